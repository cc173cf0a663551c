//! `eniipd` itself: start-up (config, state, cloud, recovery), serving, and
//! shutdown, with the exit codes of SPEC section 2 ([`exit`]).
//!
//! Order matters: signal handlers first; local preconditions
//! ([`preflight`]) before the state or the cloud is touched; the state
//! lock before anything else touches the state directory or the socket;
//! no run beside a live peer ([`other_eniipd`]); the pool restored from state and
//! cloud ([`start_pool`]) before the socket accepts (so an
//! answering `ping` means ready), and the releases eniip-cni queued while
//! eniipd was away applied before it accepts too ([`queued`]). Serving and
//! the stop against one
//! deadline are in [`serve`](mod@serve).

pub mod args;
mod cloud;
mod config;
mod conflist;
mod error;
mod facts;
mod other_eniipd;
pub(crate) mod preflight;
mod queued;
mod reaper;
mod serve;
mod simulate;
mod start_pool;

use config::load_config;
pub use error::exit;
use error::{bind_error, preflight_error, store_error, DaemonError};
use serve::{serve, signals};
use start_pool::{open_state, Restore, Restored};

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use log::{error, info, warn};

use crate::alloc::Allocator;
use crate::config::Config;
use crate::server::listener::{bind_socket, Server, ServerConfig};
use crate::server::socket::{check_socket_free, SocketFile};
use crate::server::starting::Starting;
use crate::store::{Committer, PersistedState};
use eniip_cloud::CloudApi;
use eniip_protocol::core::{Answer, Command, Commands};
use eniip_protocol::protocol::status_text;
use eniip_util::systemd::Notifier;

use args::Args;

/// Everything that runs once start-up is done.
struct Running {
    server: Server,
    alloc: Arc<Allocator>,
    committer: Arc<Committer>,
    socket: Option<SocketFile>,
    metrics_http: Option<eniip_httpd::HttpServer>,
    sim: Option<simulate::SimChild>,
    notifier: Notifier,
    cfg: Config,
    /// The command line, and the directory `--simulate` put the socket
    /// in: a reload loads the config as the start did (flags over the
    /// file), so what a flag set is never taken for a change.
    args: Args,
    sock_dir: Option<PathBuf>,
    limits: eniip_cloud::InstanceTypeLimits,
    sim_dir: Option<PathBuf>,
    /// Installs `cni_conflist` once the pool is warm (started last).
    conflist: Option<conflist::Installer>,
    /// Releases what lost CNI DELs left (`sandbox_reap_interval`).
    reaper: Option<reaper::Reaper>,
    /// Applies the releases eniip-cni queues while eniipd is away.
    queued: queued::Watcher,
    /// Dropped last: this node is alive until the process ends.
    _beacon: eniip_util::node_liveness::Beacon,
}

/// Runs the daemon; returns the exit code.
pub fn run(args: Args) -> i32 {
    crate::metrics::count_cloud_calls();
    let level = args.log_level.clone().unwrap_or_else(|| "info".into());
    if let Err(e) = eniip_util::logging::init(&level) {
        eprintln!("eniipd: {e} (try --help)");
        return exit::USAGE;
    }
    // Before any thread starts (one malloc arena for every thread), and
    // once the log is set up: a refusal is said at debug level.
    eniip_util::memory::one_arena();
    eniip_util::memory::no_huge_pages();
    // Before anything else: a signal during start-up is then never the
    // default action (death), and one that comes before readiness is
    // handled once serving starts.
    let sig = match signals() {
        Ok(s) => s,
        Err(e) => {
            error!("cannot install signal handlers: {e}");
            return exit::FAILURE;
        }
    };
    let code = match start(&args, &sig.rx) {
        Ok(Some(running)) => serve(running, &sig.rx),
        Ok(None) => exit::OK,
        Err(e) if e.code == exit::OK => {
            info!("{e}");
            e.code
        }
        Err(e) => {
            error!("{e}");
            refuse_activations(e.code);
            e.code
        }
    };
    sig.stop(Instant::now() + Duration::from_secs(1));
    code
}

/// A start that failed for a reason a restart does not fix (the codes
/// `eniipd.service` keeps from restarting): the clients whose connections
/// systemd queued on its socket are told why and what to run, and their
/// connections are closed, so they do not start eniipd again at once and
/// spend the unit's start limit (eniipd(8), "Under systemd").
fn refuse_activations(code: i32) {
    let what = match code {
        exit::CONFIG => "its configuration is refused",
        exit::NOPERM => "the cloud refused its credentials",
        _ => return,
    };
    let Ok(Some(listener)) = eniip_util::systemd::take_listener() else {
        return;
    };
    let reply = format!(
        "ERR internal eniipd cannot start: {what} (exit {code}; `journalctl -u eniipd` says why); once fixed: `systemctl reset-failed eniipd.socket eniipd.service && systemctl restart eniipd`"
    );
    let n = crate::server::starting::refuse_queued(
        &listener,
        &reply,
        Instant::now() + Duration::from_secs(1),
    );
    if n > 0 {
        info!("told {n} waiting client(s) that eniipd cannot start");
    }
}

fn start(args: &Args, signals: &Receiver<i32>) -> Result<Option<Running>, DaemonError> {
    if args.check_config {
        return config::check_config(args).map(|()| None);
    }
    // A usage error: SPEC.md's exit codes have no other for it.
    if args.simulate_links && !nix::unistd::geteuid().is_root() {
        return Err(DaemonError::new(
            exit::USAGE,
            "--simulate-links needs root: it creates links and a network namespace on this host (run it as root, or drop --simulate-links)",
        ));
    }
    let since = Instant::now();
    let (sim, sim_dir) = simulate::start_simulator(args)?;
    let sock_dir = args
        .state_dir
        .clone()
        .filter(|_| args.simulate)
        .or_else(|| sim_dir.clone());
    let (cfg, warnings) = load_config(args, sim.as_ref(), sock_dir.as_deref())?;
    for w in warnings {
        warn!("{w}");
    }
    let notifier = Notifier::from_env();
    let pre = preflight::check(&cfg, false).map_err(preflight_error)?;
    // A socket systemd passed queues connections from now on: they are
    // answered (`ERR busy`, starting) until the pool is restored.
    let starting = match eniip_util::systemd::take_listener()
        .map_err(|e| DaemonError::new(exit::FAILURE, format!("inherited socket: {e}")))?
    {
        Some(l) => Some(Starting::spawn(l, since).map_err(|e| {
            DaemonError::new(
                exit::FAILURE,
                format!("cannot answer on the inherited socket: {e}"),
            )
        })?),
        None => None,
    };
    let conflist_bytes = match &cfg.cni.conflist {
        Some(_) => conflist::content(cfg.cni.conflist_source.as_deref(), &cfg.socket_path)?,
        None => Vec::new(),
    };
    let held = hold_state(&cfg, args.recover_state)?;
    let (alloc, limits) = start_allocator(&cfg, &held, signals)?;
    // The DELs that came while eniipd was away, before any new request.
    let queue = eniip_protocol::releases::dir_for(&cfg.socket_path);
    queued::apply_logged(&queue, &alloc.commands(), &mut None);

    let (server, socket) = listen(&cfg, pre.socket_gid, alloc.commands(), starting)?;
    crate::metrics::set_connection_source(server.connection_counter());
    let metrics_http = match pre.metrics {
        Some(l) => Some(metrics_server(l, alloc.commands())?),
        None => None,
    };
    let status = status_line(&alloc.commands());
    info!(
        "eniipd {} ready on {}: {status}",
        env!("CARGO_PKG_VERSION"),
        cfg.socket_path.display()
    );
    if let Some(sim) = &sim {
        simulate::simulate_banner(&cfg.socket_path, sim);
    }
    let _ = notifier.ready();
    let _ = notifier.status(&status);
    // What start-up parsed and dropped (the instance-type table, the
    // state's replay) goes back to the kernel rather than idling in the
    // heap.
    eniip_util::memory::release_free();
    let conflist = conflist::Installer::start(&cfg, conflist_bytes, alloc.commands())?;
    let reaper = match cfg.cni.sandbox_reap_interval {
        d if d.is_zero() => None,
        d => Some(
            reaper::Reaper::spawn(Arc::clone(&alloc), d, cfg.cni.sandbox_reap_grace).map_err(
                |e| {
                    DaemonError::new(
                        exit::FAILURE,
                        format!("cannot start the sandbox reaper: {e}"),
                    )
                },
            )?,
        ),
    };
    let queued = queued::Watcher::spawn(queue, alloc.commands()).map_err(|e| {
        DaemonError::new(
            exit::FAILURE,
            format!("cannot start the queued-release watcher: {e}"),
        )
    })?;
    Ok(Some(Running {
        server,
        alloc,
        committer: held.committer,
        socket,
        metrics_http,
        sim,
        notifier,
        cfg,
        args: args.clone(),
        sock_dir,
        limits,
        sim_dir,
        conflist,
        reaper,
        queued,
        _beacon: held.beacon,
    }))
}

/// The state directory, held: what it records, and this node's claim.
struct Held {
    committer: Arc<Committer>,
    persisted: PersistedState,
    /// The quarantine for addresses with no known owner (after a rebuild).
    quarantine: Option<Duration>,
    node_id: String,
    beacon: eniip_util::node_liveness::Beacon,
}

/// The state lock first: nothing else may touch the directory or the
/// socket without it. Then the socket must be free, and this node's id
/// not held by another live process.
fn hold_state(cfg: &Config, recover_state: bool) -> Result<Held, DaemonError> {
    let (store, persisted, quarantine) = open_state(cfg, recover_state)?;
    // Another instance serving the socket (with another state directory)
    // must be found before this one touches the cloud.
    if std::env::var_os("LISTEN_FDS").is_none() {
        check_socket_free(&cfg.socket_path).map_err(|e| bind_error(&e))?;
    }
    let node_id = store.node_id().map_err(|e| store_error(&e))?;
    // Held for the daemon's life: another eniipd on this host can tell
    // this node is alive.
    let beacon = eniip_util::node_liveness::Beacon::hold(&node_id).map_err(|e| {
        DaemonError::new(
            exit::TEMPFAIL,
            format!("another process runs as eniipd node {node_id} (a copy of this state directory?): {e}"),
        )
    })?;
    if let Some(p) = beacon.squatter() {
        warn!(
            "the name @eniipd-node-{node_id} is held by pid {} of uid {}, which is not an eniipd: running without it, so another eniipd on this host cannot tell this one runs; stop that process",
            p.pid, p.uid
        );
    }
    let committer = Arc::new(store.start());
    info!(
        "state: {} allocation(s), {} hold(s) in {}",
        persisted.allocations.len(),
        persisted.holds.len(),
        cfg.state_dir.display()
    );
    Ok(Held {
        committer,
        persisted,
        quarantine,
        node_id,
        beacon,
    })
}

/// The instance's identity from metadata, the cloud, the pool restored,
/// and the allocator started on it; with the instance type's limits.
fn start_allocator(
    cfg: &Config,
    held: &Held,
    signals: &Receiver<i32>,
) -> Result<(Arc<Allocator>, eniip_cloud::InstanceTypeLimits), DaemonError> {
    let md = eniip_cloud::metadata::MetadataClient::new(&cfg.metadata_endpoint);
    let mut identity =
        cloud::identity_at_start(&cfg.metadata_endpoint, cfg.start_timeout, signals, &md)?;
    if let Some(id) = &cfg.instance_id {
        identity.instance_id = id.clone();
    }
    let cloud: Arc<dyn CloudApi> = Arc::new(cloud::build_cloud(cfg, &identity));
    let Restored {
        facts,
        opts,
        recovered,
    } = start_pool::restore(
        cfg,
        &identity,
        &*cloud,
        &md,
        Restore {
            persisted: &held.persisted,
            quarantine: held.quarantine,
            node_id: held.node_id.clone(),
        },
        signals,
    )?;
    for n in &recovered.notes {
        info!("{n}");
    }
    if !recovered.records.is_empty() {
        held.committer
            .commit(recovered.records, Duration::from_secs(30))
            .map_err(|e| store_error(&e))?;
    }
    let alloc = Allocator::start(opts, cloud, held.committer.clone(), recovered.pool)
        .map_err(|e| DaemonError::new(exit::FAILURE, format!("cannot start the allocator: {e}")))?;
    Ok((Arc::new(alloc), facts.limits()))
}

/// The client socket: inherited from systemd (and answered while
/// `starting`), or bound here; then the server on it.
fn listen(
    cfg: &Config,
    gid: Option<u32>,
    commands: Commands,
    starting: Option<Starting>,
) -> Result<(Server, Option<SocketFile>), DaemonError> {
    let (listener, socket) = match starting {
        Some(s) => {
            let l = s
                .ready()
                .map_err(|e| DaemonError::new(exit::FAILURE, format!("inherited socket: {e}")))?;
            info!("using the socket passed by systemd");
            (l, None)
        }
        None => {
            let (l, file) =
                bind_socket(&cfg.socket_path, cfg.socket_mode, gid).map_err(|e| bind_error(&e))?;
            (l, Some(file))
        }
    };
    let server = Server::start(
        listener,
        ServerConfig {
            max_connections: cfg.max_connections,
            allowed_uids: cfg.allowed_uids.clone(),
            socket_gid: gid,
            line_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(2),
            version: env!("CARGO_PKG_VERSION").to_string(),
        },
        commands,
    )
    .map_err(|e| {
        DaemonError::new(
            exit::FAILURE,
            format!("cannot start the socket server: {e}"),
        )
    })?;
    Ok((server, socket))
}

/// The `status` counters as one line (empty if the allocator did not
/// answer).
fn status_line(commands: &Commands) -> String {
    match commands.ask(Command::Status) {
        Ok(Answer::Status(c)) => status_text(&c),
        _ => String::new(),
    }
}

fn metrics_server(
    listener: std::net::TcpListener,
    commands: Commands,
) -> Result<eniip_httpd::HttpServer, DaemonError> {
    use eniip_httpd::{HttpOptions, HttpResponse, HttpServer};
    let handler = Arc::new(move |req: &eniip_httpd::HttpRequest| {
        if req.method == "GET" && req.path == "/metrics" {
            match commands.ask(Command::Metrics) {
                Ok(Answer::Metrics(text)) => HttpResponse::text(200, text)
                    .with_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8"),
                Ok(_) => HttpResponse::text(500, "unexpected answer\n".to_string()),
                Err(e) => HttpResponse::text(503, format!("{e}\n")),
            }
        } else {
            HttpResponse::text(404, "not found\n".to_string())
        }
    });
    HttpServer::serve(listener, "eniipd-metrics", handler, HttpOptions::default())
        .map_err(|e| DaemonError::new(exit::FAILURE, format!("metrics_listen: {e}")))
}
