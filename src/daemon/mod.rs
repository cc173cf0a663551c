//! `eniipd` itself: start-up (config, state, cloud, recovery), serving, and
//! shutdown, with the exit codes of SPEC section 2.
//!
//! Order matters: signal handlers first; local preconditions
//! ([`preflight`]) before the state or the cloud is touched; the state
//! lock before anything else touches the state directory or the socket;
//! no run beside a live peer ([`peer`]); the pool restored from state and
//! cloud before the socket accepts (so an answering `ping` means ready).
//! Serving and the stop against one deadline are in [`serve`](mod@serve).

pub mod args;
mod conflist;
mod facts;
mod peer;
pub(crate) mod preflight;
mod reaper;
mod serve;

use peer::{foreign_enis, refuse_beside_peer};
use serve::{serve, signals};

use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use log::{error, info, warn};

use crate::alloc::capacity::{self, PoolSizes};
use crate::alloc::recover::{provisional, recover, Provisional};
use crate::alloc::{Allocator, AllocatorOptions};
use crate::cloud::aliyun::{AliyunCloud, AliyunCloudOptions};
use crate::cloud::credentials::CredentialSource;
use crate::cloud::{CloudApi, CloudError, InstanceIdentity};
use crate::config::{Config, RawConfig, DEFAULT_CONFIG_PATH};
use crate::server::listener::{bind_socket, Server, ServerConfig};
use crate::server::socket::{check_socket_free, BindError, SocketFile};
use crate::sim::hostlinks::{self, HostLinks, HostLinksOptions};
use crate::sim::{SimOptions, Simulator};
use crate::store::{Store, StoreError, StoreOptions};
use crate::systemd::Notifier;

use crate::core::{Answer, Command, Commands};
use crate::protocol::status_text;

use args::Args;

/// Exit codes (SPEC section 2). Corrupt state files (65) is the store's
/// own ([`crate::store::StoreError::exit_code`]).
pub mod exit {
    /// Clean stop.
    pub(crate) const OK: i32 = 0;
    /// Anything else.
    pub(crate) const FAILURE: i32 = 1;
    /// Usage.
    pub const USAGE: i32 = 2;
    /// Cloud or metadata unreachable at start.
    pub(crate) const UNAVAILABLE: i32 = 69;
    /// State directory held, or socket served, by another instance.
    pub(crate) const TEMPFAIL: i32 = 75;
    /// The cloud refused the credentials at start.
    pub(crate) const NOPERM: i32 = 77;
    /// Bad configuration.
    pub(crate) const CONFIG: i32 = 78;
    /// Stopped, but the state directory did not finish the final flush
    /// within the stop deadline (nothing acknowledged is lost).
    pub(crate) const NOT_DURABLE: i32 = 1;
}

/// A start-up or run failure with its exit code.
#[derive(Debug)]
pub(crate) struct DaemonError {
    /// Exit code.
    pub(crate) code: i32,
    /// What went wrong.
    pub(crate) message: String,
}

impl DaemonError {
    fn new(code: i32, message: impl Into<String>) -> DaemonError {
        DaemonError {
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for DaemonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DaemonError {}

fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let cause = c.to_string();
        // Some errors already end their sentence with their cause (the
        // store's I/O errors do): say it once.
        if !s.ends_with(&cause) {
            s.push_str(": ");
            s.push_str(&cause);
        }
        cur = c.source();
    }
    s
}

fn store_error(e: &StoreError) -> DaemonError {
    DaemonError::new(e.exit_code(), chain(e))
}

fn bind_error(e: &BindError) -> DaemonError {
    let code = if e.in_use() {
        exit::TEMPFAIL
    } else {
        exit::FAILURE
    };
    DaemonError::new(code, chain(e))
}

/// Loads the config and applies flag overrides (and the `--simulate`
/// defaults).
pub(crate) fn load_config(
    args: &Args,
    sim: Option<&Simulator>,
    sim_dir: Option<&Path>,
) -> Result<(Config, Vec<String>), DaemonError> {
    let path: Option<PathBuf> = match (&args.config, args.simulate) {
        (Some(p), _) => Some(p.clone()),
        (None, true) => None,
        (None, false) => Some(PathBuf::from(DEFAULT_CONFIG_PATH)),
    };
    let mut raw = match &path {
        Some(p) => RawConfig::load_or_defaults(p, args.config.is_some())
            .map_err(|e| DaemonError::new(exit::CONFIG, chain(&e)))?
            .unwrap_or_else(|| {
                info!("no {}: every key takes its default", p.display());
                RawConfig::default()
            }),
        None => RawConfig::default(),
    };
    let mut warnings = raw.warnings();
    if let Some(w) = path.as_ref().and_then(|p| raw.secret_file_warning(p)) {
        warnings.push(w);
    }
    if let Some(sim) = sim {
        raw.access_key = Some(sim.access_key_id().to_string());
        raw.access_secret = Some(crate::util::Secret::new(sim.access_key_secret()));
        raw.ecs_endpoint = Some(sim.ecs_url());
        raw.vpc_endpoint = Some(sim.vpc_url());
        raw.metadata_endpoint = Some(sim.metadata_url());
        raw.allowed_uids = Some(vec![serde_json::Value::from(
            nix::unistd::getuid().as_raw(),
        )]);
        raw.socket_mode = Some(serde_json::Value::from("0600"));
        if raw.pool_check_interval.is_none() {
            raw.pool_check_interval = Some(serde_json::Value::from(30));
        }
    }
    if let Some(dir) = sim_dir {
        raw.socket_path = Some(dir.join("eniipd.sock").display().to_string());
        raw.state_dir = Some(dir.join("state").display().to_string());
    } else {
        // systemd's directories are the defaults under a unit.
        if raw.state_dir.is_none() {
            if let Ok(d) = std::env::var("STATE_DIRECTORY") {
                raw.state_dir = d.split(':').next().map(str::to_string);
            }
        }
        if raw.socket_path.is_none() {
            if let Ok(d) = std::env::var("RUNTIME_DIRECTORY") {
                raw.socket_path = d.split(':').next().map(|d| format!("{d}/eniipd.sock"));
            }
        }
    }
    let path_string = |p: &PathBuf| p.display().to_string();
    if let Some(p) = &args.socket {
        raw.socket_path = Some(path_string(p));
    }
    if let Some(p) = &args.state_dir {
        raw.state_dir = Some(path_string(p));
    }
    for (flag, slot) in [
        (&args.ecs_endpoint, &mut raw.ecs_endpoint),
        (&args.vpc_endpoint, &mut raw.vpc_endpoint),
        (&args.metadata_endpoint, &mut raw.metadata_endpoint),
    ] {
        if let Some(v) = flag {
            *slot = Some(v.clone());
        }
    }
    let cfg = raw
        .validate()
        .map_err(|e| DaemonError::new(exit::CONFIG, chain(&e)))?;
    Ok((cfg, warnings))
}

/// A fresh private directory for `--simulate`.
fn simulate_dir() -> Result<PathBuf, DaemonError> {
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_dir())
        .unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!("eniipd-sim-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .and_then(|()| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
        })
        .map_err(|e| {
            DaemonError::new(
                exit::FAILURE,
                format!("cannot create {}: {e}", dir.display()),
            )
        })?;
    Ok(dir)
}

/// How long start-up waits for the account's quota while every answer is
/// a throttle: a fleet's restart spends windows, it is not an outage.
const THROTTLED_START_LIMIT: Duration = Duration::from_secs(30 * 60);

/// Retries a start-up cloud read for up to `budget` (up to
/// [`THROTTLED_START_LIMIT`] while it is throttled); failure is exit 69,
/// refused credentials exit 77, and SIGTERM/SIGINT while it waits a clean
/// stop.
fn at_start<T>(
    what: &str,
    budget: Duration,
    signals: &Receiver<i32>,
    mut f: impl FnMut() -> Result<T, CloudError>,
) -> Result<T, DaemonError> {
    let end = Instant::now() + budget;
    let throttled_end = Instant::now() + THROTTLED_START_LIMIT;
    let mut delay = Duration::from_millis(500);
    loop {
        match f() {
            Ok(v) => return Ok(v),
            Err(e) if e.kind == crate::cloud::CloudErrorKind::Auth => {
                return Err(DaemonError::new(
                    exit::NOPERM,
                    format!(
                        "{what}: the cloud refused the credentials ({}): {}",
                        e.code_or_kind(),
                        chain(&e)
                    ),
                ));
            }
            Err(e) if e.kind == crate::cloud::CloudErrorKind::ClockSkew => {
                return Err(DaemonError::new(
                    exit::UNAVAILABLE,
                    format!("{what}: {}", chain(&e)),
                ));
            }
            // Throttled: the cloud answers, the account's quota is spent
            // (a fleet starting at once). Wait our turn, with jitter, up
            // to THROTTLED_START_LIMIT rather than exit 69 (which says the
            // cloud is unreachable).
            Err(e)
                if e.kind == crate::cloud::CloudErrorKind::Throttled
                    && Instant::now() + delay < end.max(throttled_end) =>
            {
                warn!("{what}: {e}; the account's quota is spent, waiting for the next window");
                stopped_during_start(signals, delay.mul_f64(crate::util::rand::jitter(0.5)))?;
                delay = (delay * 2).min(Duration::from_secs(10));
            }
            Err(e) if Instant::now() + delay >= end => {
                return Err(DaemonError::new(
                    exit::UNAVAILABLE,
                    format!("{what}: {}", chain(&e)),
                ));
            }
            Err(e) => {
                warn!("{what}: {e}; retrying");
                stopped_during_start(signals, delay)?;
                delay = (delay * 2).min(Duration::from_secs(10));
            }
        }
    }
}

/// Waits `delay`, unless SIGTERM or SIGINT comes first: then start-up
/// ends with a clean stop (nothing was acknowledged yet; the state files
/// are consistent).
fn stopped_during_start(signals: &Receiver<i32>, delay: Duration) -> Result<(), DaemonError> {
    let until = Instant::now() + delay;
    loop {
        match signals.recv_deadline(until) {
            Ok(signal_hook::consts::SIGHUP) => continue,
            Ok(s) => {
                return Err(DaemonError::new(
                    exit::OK,
                    format!("signal {s} during start-up: stopping"),
                ))
            }
            Err(_) => return Ok(()),
        }
    }
}

fn build_cloud(cfg: &Config, identity: &InstanceIdentity) -> AliyunCloud {
    let region = cfg
        .region_id
        .clone()
        .unwrap_or_else(|| identity.region_id.clone());
    let credentials = match (&cfg.access_key, &cfg.access_secret) {
        (Some(id), Some(secret)) => CredentialSource::Static {
            id: id.clone(),
            secret: secret.clone(),
            token: None,
        },
        _ => CredentialSource::from_env_or_role(cfg.ram_role.clone()),
    };
    info!("credentials: {}", credentials.describe());
    let mut opts = AliyunCloudOptions::new(&region, &cfg.metadata_endpoint, credentials);
    if let Some(e) = &cfg.ecs_endpoint {
        opts.ecs_endpoint = e.clone();
    }
    if let Some(e) = &cfg.vpc_endpoint {
        opts.vpc_endpoint = e.clone();
    }
    opts.signature_version = cfg.signature_version;
    info!(
        "endpoints: ECS {}, VPC {}, metadata {}",
        opts.ecs_endpoint, opts.vpc_endpoint, opts.metadata_endpoint
    );
    AliyunCloud::new(opts)
}

/// Where `--simulate --state-dir DIR` keeps the emulated cloud.
const SIM_WORLD_FILE: &str = "sim-world.json";

/// Everything that runs once start-up is done.
struct Running {
    server: Server,
    alloc: Arc<Allocator>,
    committer: Arc<crate::store::Committer>,
    socket: Option<SocketFile>,
    metrics_http: Option<crate::httpd::HttpServer>,
    sim: Option<Simulator>,
    notifier: Notifier,
    cfg: Config,
    config_path: Option<PathBuf>,
    limits: crate::cloud::InstanceTypeLimits,
    sim_dir: Option<PathBuf>,
    /// Installs `cni_conflist` once the pool is warm (started last).
    conflist: Option<conflist::Installer>,
    /// Releases what lost CNI DELs left (`sandbox_reap_interval`).
    reaper: Option<reaper::Reaper>,
    /// `--simulate-links`: the emulated ENIs as links on this host.
    links: Option<HostLinks>,
    /// Dropped last: this node is alive until the process ends.
    _beacon: crate::util::node::Beacon,
}

/// Runs the daemon; returns the exit code.
pub fn run(args: Args) -> i32 {
    let level = args.log_level.clone().unwrap_or_else(|| "info".into());
    if let Err(e) = crate::logging::init(&level) {
        eprintln!("eniipd: {e} (try --help)");
        return exit::USAGE;
    }
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
            e.code
        }
    };
    sig.stop(Instant::now() + Duration::from_secs(1));
    code
}

/// `--check-config`: a typo of a known key is an error (78), not the
/// warning the daemon gives at start.
fn check_near_misses(args: &Args) -> Result<(), DaemonError> {
    let path = args
        .config
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG_PATH));
    let Some(raw) = RawConfig::load_or_defaults(&path, args.config.is_some())
        .map_err(|e| DaemonError::new(exit::CONFIG, chain(&e)))?
    else {
        return Ok(());
    };
    let misses: Vec<String> = raw
        .near_misses()
        .into_iter()
        .map(|(k, known)| format!("`{k}` (did you mean `{known}`?)"))
        .collect();
    if misses.is_empty() {
        return Ok(());
    }
    Err(DaemonError::new(
        exit::CONFIG,
        format!(
            "{}: unknown key(s) close to known ones: {}; fix the spelling (a misspelt key is ignored and its default used)",
            path.display(),
            misses.join(", ")
        ),
    ))
}

fn start(args: &Args, signals: &Receiver<i32>) -> Result<Option<Running>, DaemonError> {
    if args.check_config {
        return check_config(args).map(|()| None);
    }
    // A usage error: SPEC.md's exit codes have no other for it.
    if args.simulate_links && !nix::unistd::geteuid().is_root() {
        return Err(DaemonError::new(
            exit::USAGE,
            "--simulate-links needs root: it creates links and a network namespace on this host (run it as root, or drop --simulate-links)",
        ));
    }
    let (sim, sim_dir) = start_simulator(args)?;
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
    let conflist_bytes = match &cfg.cni.conflist {
        Some(_) => conflist::content(cfg.cni.conflist_source.as_deref(), &cfg.socket_path)?,
        None => Vec::new(),
    };

    // The state lock first: nothing else may touch the directory or the
    // socket without it.
    let (store, persisted, quarantine) = open_state(&cfg, args.recover_state)?;
    // Another instance serving the socket (with another state directory)
    // must be found before this one touches the cloud.
    if std::env::var_os("LISTEN_FDS").is_none() {
        check_socket_free(&cfg.socket_path).map_err(|e| bind_error(&e))?;
    }
    let node_id = store.node_id().map_err(|e| store_error(&e))?;
    // Held for the daemon's life: another eniipd on this host can tell
    // this node is alive.
    let beacon = crate::util::node::Beacon::hold(&node_id).map_err(|e| {
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

    // Once this instance holds its state and socket (a second demo on
    // the same state would show the same MACs twice), and before the
    // allocator attaches anything: each ENI then appears a moment after
    // its attach, as on a real host.
    let links = match (&sim, args.simulate_links) {
        (Some(sim), true) => Some(simulate_links(sim)?),
        _ => None,
    };
    let md = crate::cloud::metadata::MetadataClient::new(&cfg.metadata_endpoint);
    let budget = cfg.start_timeout;
    let mut identity = at_start("reading instance metadata", budget, signals, || {
        crate::cloud::MetadataApi::identity(&md)
    })?;
    if let Some(id) = &cfg.instance_id {
        identity.instance_id = id.clone();
    }
    let cloud: Arc<dyn CloudApi> = Arc::new(build_cloud(&cfg, &identity));
    let Restored {
        facts,
        opts,
        recovered,
    } = restore(
        &cfg,
        &identity,
        &*cloud,
        &md,
        Restore {
            persisted: &persisted,
            quarantine,
            node_id,
        },
        signals,
    )?;
    let limits = facts.limits();
    for n in &recovered.notes {
        info!("{n}");
    }
    if !recovered.records.is_empty() {
        committer
            .commit(recovered.records, Duration::from_secs(30))
            .map_err(|e| store_error(&e))?;
    }
    let alloc = Arc::new(
        Allocator::start(opts, Arc::clone(&cloud), committer.clone(), recovered.pool).map_err(
            |e| DaemonError::new(exit::FAILURE, format!("cannot start the allocator: {e}")),
        )?,
    );

    let (server, socket) = listen(&cfg, pre.socket_gid, alloc.commands())?;
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
        simulate_banner(&cfg.socket_path, sim, links.as_ref());
    }
    let _ = notifier.ready();
    let _ = notifier.status(&status);
    let conflist = conflist::Installer::start(&cfg, conflist_bytes, alloc.commands())?;
    let reaper = match cfg.cni.sandbox_reap_interval {
        d if d.is_zero() => None,
        d => Some(reaper::Reaper::spawn(Arc::clone(&alloc), d).map_err(|e| {
            DaemonError::new(
                exit::FAILURE,
                format!("cannot start the sandbox reaper: {e}"),
            )
        })?),
    };
    Ok(Some(Running {
        server,
        alloc,
        committer,
        socket,
        metrics_http,
        sim,
        notifier,
        cfg,
        config_path: args.config.clone(),
        limits,
        sim_dir,
        conflist,
        reaper,
        links,
        _beacon: beacon,
    }))
}

/// Locks and loads the state directory (`--recover-state`: salvaging);
/// the quarantine to apply to addresses with no known owner, if any.
fn open_state(
    cfg: &Config,
    recover_state: bool,
) -> Result<(Store, crate::store::PersistedState, Option<Duration>), DaemonError> {
    if recover_state {
        let (store, state, report) =
            Store::open_recovering(&cfg.state_dir, StoreOptions::default())
                .map_err(|e| store_error(&e))?;
        warn!("state recovered: {report:?}");
        let q = report
            .quarantine_needed
            .then_some(Duration::from_secs(3600));
        Ok((store, state, q))
    } else {
        let (store, state) =
            Store::open(&cfg.state_dir, StoreOptions::default()).map_err(|e| store_error(&e))?;
        Ok((store, state, None))
    }
}

/// `--check-config`: the effective config and every local check, then
/// exit.
fn check_config(args: &Args) -> Result<(), DaemonError> {
    let (cfg, warnings) = load_config(args, None, None)?;
    for w in warnings.iter().chain(&cfg.local_warnings()) {
        warn!("{w}");
    }
    check_near_misses(args)?;
    let mut out = std::io::stdout().lock();
    for (k, v) in cfg.effective() {
        let _ = writeln!(out, "{k}={v}");
    }
    preflight::check(&cfg, true).map_err(preflight_error)?;
    Ok(())
}

/// `--simulate`: the in-process emulator, and the throwaway directory of
/// a demo without `--state-dir`.
fn start_simulator(args: &Args) -> Result<(Option<Simulator>, Option<PathBuf>), DaemonError> {
    Ok(if args.simulate {
        // With --state-dir the emulated cloud is kept beside the state,
        // so a restarted demo finds its ENIs and keeps its allocations.
        let opts = SimOptions {
            world_file: args.state_dir.as_ref().map(|d| d.join(SIM_WORLD_FILE)),
            ..SimOptions::default()
        };
        if let Some(d) = &args.state_dir {
            std::fs::create_dir_all(d).map_err(|e| {
                DaemonError::new(exit::CONFIG, format!("--state-dir {}: {e}", d.display()))
            })?;
        }
        let sim = Simulator::start(opts).map_err(|e| {
            DaemonError::new(
                exit::FAILURE,
                format!("cannot start the emulator: {}", chain(&e)),
            )
        })?;
        info!("emulator: {}", sim.ready_line());
        // A kept demo keeps its socket too (an exported SOCK stays right
        // across restarts); only a throwaway one gets a directory of its
        // own, removed at stop.
        let throwaway = match &args.state_dir {
            Some(_) => None,
            None => Some(simulate_dir()?),
        };
        (Some(sim), throwaway)
    } else {
        (None, None)
    })
}

/// What [`restore`] gives: the instance's facts, the allocator's
/// options, the pool to start with.
struct Restored {
    facts: facts::InstanceFacts,
    opts: AllocatorOptions,
    recovered: crate::alloc::recover::Recovered,
}

/// What [`restore`] starts from.
struct Restore<'a> {
    persisted: &'a crate::store::PersistedState,
    quarantine: Option<Duration>,
    node_id: String,
}

/// The instance's facts, the allocator's options and the pool to start
/// with: from the state files and metadata on a restart they confirm
/// (no OpenAPI call before ready), else from the OpenAPI (eniipd(8),
/// "Start-up and recovery").
fn restore(
    cfg: &Config,
    identity: &InstanceIdentity,
    cloud: &dyn CloudApi,
    md: &dyn crate::cloud::MetadataApi,
    from: Restore<'_>,
    signals: &Receiver<i32>,
) -> Result<Restored, DaemonError> {
    let budget = cfg.start_timeout;
    let (persisted, quarantine) = (from.persisted, from.quarantine);
    let dual = cfg.ip_stack == crate::config::IpStack::Dual;
    let kept = kept_facts(cfg, identity);
    // A restart whose state files metadata confirms is served from them
    // before the OpenAPI is asked anything (a fleet restarting at once
    // would otherwise spend the account's quota before any node serves).
    let warm = match (&kept, quarantine) {
        (Some(_), None) => match at_start("reading metadata", budget, signals, || {
            provisional(md, dual, persisted)
        })? {
            Provisional::Ready(r) => Some(*r),
            Provisional::Cold(why) => {
                info!("restoring the pool from the OpenAPI before serving: {why}");
                None
            }
        },
        _ => None,
    };
    let facts = match (&warm, kept) {
        (Some(_), Some(f)) => f,
        _ => ask_facts(cfg, identity, cloud, signals)?,
    };
    let mut opts = allocator_options(cfg, identity, &facts)?;
    opts.node_id = from.node_id.clone();
    let recovered = match warm {
        Some(mut r) => {
            for n in r.notes.drain(..) {
                info!("{n}");
            }
            let first = first_reconcile_delay(cfg.pool_check_interval);
            info!(
                "restarted from the state files and metadata, before any OpenAPI call: nothing new is handed out until the first reconcile, in {} ms (or at the first alloc that needs an address)",
                first.as_millis()
            );
            opts.first_reconcile = Some(first);
            r
        }
        None => from_openapi(cfg, identity, cloud, &mut opts, &from, &facts, signals)?,
    };
    Ok(Restored {
        facts,
        opts,
        recovered,
    })
}

/// A first start: the pool from the OpenAPI, before serving, after the
/// checks a restart leaves to its first reconcile; the facts kept.
fn from_openapi(
    cfg: &Config,
    identity: &InstanceIdentity,
    cloud: &dyn CloudApi,
    opts: &mut AllocatorOptions,
    from: &Restore<'_>,
    facts: &facts::InstanceFacts,
    signals: &Receiver<i32>,
) -> Result<crate::alloc::recover::Recovered, DaemonError> {
    let budget = cfg.start_timeout;
    if cfg.vswitch_selection_policy == crate::config::VSwitchPolicy::Ordered {
        match cloud.describe_vswitches(&opts.vswitches) {
            Ok(v) => opts.vswitch_free = v.into_iter().map(|s| (s.id, s.available_ips)).collect(),
            Err(e) => warn!("DescribeVSwitches failed ({e}); vswitches start unordered"),
        }
    }
    at_start("looking for another eniipd's ENIs", budget, signals, || {
        foreign_enis(cloud, &identity.instance_id, &opts.node_id)
    })
    .and_then(refuse_beside_peer)?;
    let r = at_start(
        "restoring the pool from the cloud",
        budget * 3,
        signals,
        || {
            recover(
                cloud,
                &identity.instance_id,
                &opts.node_id,
                opts.dual,
                from.persisted,
                from.quarantine,
            )
        },
    )?;
    if let Err(e) = facts::save(&cfg.state_dir, facts) {
        warn!(
            "cannot keep the instance's facts in {} ({e}): the next start asks the OpenAPI again",
            cfg.state_dir.display()
        );
    }
    Ok(r)
}

/// The instance's facts kept at the last cold start, if they describe
/// this instance and hold what this configuration needs from them.
fn kept_facts(cfg: &Config, identity: &InstanceIdentity) -> Option<facts::InstanceFacts> {
    match facts::load(&cfg.state_dir) {
        Ok(Some(f)) if !f.describe(identity) => {
            info!(
                "{} describes {} ({}), not this instance: asking the OpenAPI",
                facts::INSTANCE_FILE,
                f.instance_id,
                f.instance_type
            );
            None
        }
        Ok(Some(f)) if cfg.security_groups.is_empty() && f.security_groups.is_empty() => None,
        Ok(f) => f,
        Err(e) => {
            warn!("ignoring the kept instance facts: {e}");
            None
        }
    }
}

/// What the OpenAPI says about the instance: its type's limits and
/// (unless configured) its security groups.
fn ask_facts(
    cfg: &Config,
    identity: &InstanceIdentity,
    cloud: &dyn CloudApi,
    signals: &Receiver<i32>,
) -> Result<facts::InstanceFacts, DaemonError> {
    let budget = cfg.start_timeout;
    let limits = at_start("DescribeInstanceTypes", budget, signals, || {
        cloud.instance_type_limits(&identity.instance_type)
    })?;
    let security_groups = if cfg.security_groups.is_empty() {
        at_start("DescribeInstanceAttribute", budget, signals, || {
            cloud.instance_security_groups(&identity.instance_id)
        })?
    } else {
        Vec::new()
    };
    Ok(facts::InstanceFacts::new(
        identity,
        &limits,
        &security_groups,
    ))
}

/// When the first reconcile of a restart served from the state files
/// runs: at a random point of the first `min(pool_check_interval, 10 s)`,
/// so that the nodes of a fleet restarted at once spread their calls.
fn first_reconcile_delay(pool_check_interval: Duration) -> Duration {
    let spread = pool_check_interval.min(Duration::from_secs(10));
    spread.mul_f64(crate::util::rand::with_thread_rng(|r| r.unit()))
}

fn allocator_options(
    cfg: &Config,
    identity: &InstanceIdentity,
    facts: &facts::InstanceFacts,
) -> Result<AllocatorOptions, DaemonError> {
    let limits = facts.limits();
    let security_groups = if cfg.security_groups.is_empty() {
        facts.security_groups.clone()
    } else {
        cfg.security_groups.clone()
    };
    let vswitches = match cfg.vswitches.get(&identity.zone_id) {
        Some(v) if !v.is_empty() => v.clone(),
        _ => vec![identity.vswitch_id.clone()],
    };
    let mut notes = Vec::new();
    let cap = capacity::compute(&limits, cfg, PoolSizes::of(cfg), &mut notes);
    for n in &notes {
        warn!("{n}");
    }
    if cap.total_ips == 0 {
        return Err(DaemonError::new(
            exit::CONFIG,
            format!(
                "no capacity: {} allows {} ENI(s) of {} address(es); with eni_cap_ratio {}, eni_cap_shift {} and max_eni {} no secondary ENI is usable",
                limits.instance_type, limits.eni_quantity, cap.ips_per_eni, cfg.eni_cap_ratio, cfg.eni_cap_shift, cfg.max_eni
            ),
        ));
    }
    info!(
        "{} in {}: {} usable ENI(s) x {} address(es) = capacity {}; idle pool {}..{}",
        identity.instance_type,
        identity.zone_id,
        cap.usable_enis,
        cap.ips_per_eni,
        cap.total_ips,
        cap.min_idle,
        cap.max_idle
    );
    let mut opts =
        AllocatorOptions::new(cfg, &identity.instance_id, vswitches, security_groups, cap);
    opts.config_view = capacity::effective_view(cfg, &cap);
    Ok(opts)
}

/// The client socket: inherited from systemd, or bound here; then the
/// server on it.
fn listen(
    cfg: &Config,
    gid: Option<u32>,
    commands: Commands,
) -> Result<(Server, Option<SocketFile>), DaemonError> {
    let (listener, socket) = match crate::systemd::take_listener()
        .map_err(|e| DaemonError::new(exit::FAILURE, format!("inherited socket: {e}")))?
    {
        Some(l) => {
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

/// `--simulate-links`: the emulator's ENIs as links on this host.
fn simulate_links(sim: &Simulator) -> Result<HostLinks, DaemonError> {
    let tag = hostlinks::daemon_tag(std::process::id());
    let links = HostLinks::start(HostLinksOptions {
        ecs_url: sim.ecs_url(),
        instance_id: sim.instance_id(),
        node_netns: None,
        vpc_netns: None,
        tag: tag.clone(),
        poll: Duration::from_millis(100),
    })
    .map_err(|e| DaemonError::new(exit::FAILURE, format!("--simulate-links: {}", chain(&e))))?;
    info!(
        "simulated links: the emulated ENIs appear here as e{tag}n<N>; the VPC: nsenter --net={}",
        links.vpc_path().display()
    );
    Ok(links)
}

/// What `--simulate` prints for the user: commands that work as pasted.
fn simulate_banner(socket: &Path, sim: &Simulator, links: Option<&HostLinks>) {
    // eniipctl is built beside eniipd; if it is not there (only eniipd was
    // built), cargo builds and runs it.
    let ctl = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("eniipctl")))
        .filter(|p| p.is_file())
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "cargo run --release --bin eniipctl --".into());
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "eniipd is running against the built-in emulator.");
    let _ = writeln!(out, "socket: {}", socket.display());
    let _ = writeln!(
        out,
        "try:    echo 'alloc demo/web-1' | socat -t 90 - UNIX-CONNECT:{}",
        socket.display()
    );
    let _ = writeln!(
        out,
        "or:     export SOCK={0} ENIIPD_SOCKET={0}",
        socket.display()
    );
    let _ = writeln!(out, "        {ctl} status");
    if let Some(l) = links {
        let gateway = hostlinks::first_gateway(&sim.state())
            .map(|g| format!(" (gateway {g})"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "links:  the emulated ENIs appear here as links; the VPC{gateway}: nsenter --net={}",
            l.vpc_path().display()
        );
    }
    let _ = writeln!(out, "stop with Ctrl-C.");
    let _ = out.flush();
}

/// The `status` counters as one line (empty if the allocator did not
/// answer).
fn status_line(commands: &Commands) -> String {
    match commands.ask(Command::Status) {
        Ok(Answer::Status(c)) => status_text(&c),
        _ => String::new(),
    }
}

fn preflight_error(problems: Vec<String>) -> DaemonError {
    DaemonError::new(exit::CONFIG, problems.join("; "))
}

fn metrics_server(
    listener: std::net::TcpListener,
    commands: Commands,
) -> Result<crate::httpd::HttpServer, DaemonError> {
    use crate::httpd::{HttpOptions, HttpResponse, HttpServer};
    let handler = Arc::new(move |req: &crate::httpd::HttpRequest| {
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
