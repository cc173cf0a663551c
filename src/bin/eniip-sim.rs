//! `eniip-sim`: the Alibaba Cloud ECS/VPC OpenAPI and metadata emulator as
//! a program. Prints one `ready ...` line on stdout, then logs to stderr.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use eniip_protocol::cli::{self, Arg, Asked, UsageError};
use eniip_sim::hostlinks::{self, HostLinks, HostLinksOptions};
use eniip_sim::{
    flow, SimOptions, Simulator, VSwitchSpec, DEFAULT_ACCESS_KEY_ID, DEFAULT_ACCESS_KEY_SECRET,
};

/// The environment that sets the accepted access key pair (a parent such
/// as `eniipd --simulate` passes its own pair here, never on the command
/// line, where any user could read it).
const ENV_KEY_ID: &str = "ENIIP_SIM_ACCESS_KEY_ID";
const ENV_KEY_SECRET: &str = "ENIIP_SIM_ACCESS_KEY_SECRET";

/// What the program does beside serving.
#[derive(Debug, Default)]
struct Extras {
    /// `--host-links TAG`: the emulated ENIs as links on this host.
    host_links: Option<String>,
    /// `--exit-with-stdin`: stop when standard input reaches its end (the
    /// parent that holds its other end is gone, however it died).
    exit_with_stdin: bool,
}

fn help() -> String {
    format!(
        "\
eniip-sim - emulator of the Alibaba Cloud ECS/VPC OpenAPI and instance metadata
service, on loopback, with real signatures (for tests, demos and dry runs)

Usage:
  eniip-sim [--listen ADDR] [--metadata-listen ADDR] [--instance-type TYPE]
            [--region ID] [--zone ID] [--vswitch ID=CIDR[,ipv6=CIDR6][,free=N]]...
            [--access-key-id ID --access-key-secret SECRET]
            [--latency-ms N] [--attach-delay-ms N] [--metadata-lag-ms N]
            [--metadata-hardened] [--seed N]
            [--instances N] [--instance-types TYPE,TYPE...]
            [--flow-control ACTION=N/min|default]... [--flow-control-model window|bucket]
            [--state-file PATH] [--security-group ID]...
            [--host-links TAG] [--exit-with-stdin]
            [-V|--version] [-h|--help]
  A value follows its option, or comes after `=` (--vswitch=ID=CIDR).

Defaults:
  --listen 127.0.0.1:0 and --metadata-listen 127.0.0.1:0 (ephemeral ports;
  loopback addresses only), --instance-type {} (known: {}),
  --region cn-hangzhou, --zone cn-hangzhou-i,
  --vswitch vsw-bp1sim0000000000000001=192.168.0.0/22,free=1000,
  --latency-ms 0, --attach-delay-ms 100, --metadata-lag-ms 100.
  Without --access-key-id/--access-key-secret the emulator accepts this
  fixed pair (it is for the emulator only and opens nothing else):
    access key id:     {DEFAULT_ACCESS_KEY_ID}
    access key secret: {DEFAULT_ACCESS_KEY_SECRET}
  The metadata service also serves the RAM role EniipdSimRole.
  With --instances N (one account, one region) N instances share the
  vswitches and the account's flow control; the first is of --instance-type,
  the others of --instance-types cycled (default: --instance-type); after
  the ready line one line per instance:
    instance id=<id> type=<type> metadata=<url>
  No flow control for one instance unless --flow-control is given: then every Action has
  the account's default quota per minute (eniip-sim(1)) unless given one;
  `*=N/min` sets every Action without its own; `default` takes the
  defaults as they are. Calls over the quota: 400 Throttling.User.
  --state-file PATH keeps the emulated cloud (instances, ENIs, addresses,
  tags, vswitch counts) in PATH: restored at start, saved as it changes;
  one emulator per file (it locks PATH.lock; a second one exits naming
  the first's pid).
  --security-group ID (repeatable) adds a security group to the emulated
  VPC beside the instance's own: ENIs are created in any set of the VPC's
  groups (SecurityGroupIds.N, at most 5) and changed to another with
  ModifyNetworkInterfaceAttribute (SecurityGroupId.N).
  --host-links TAG (root) makes the instance's ENIs links on this host
  (e<TAG>n<slot>) with a VPC namespace behind them, and prints after the
  ready line:  links vpc=<namespace path> gateway=<first vswitch's gateway>
  --exit-with-stdin stops the emulator when its standard input ends.
  {ENV_KEY_ID} and {ENV_KEY_SECRET} in the environment set the
  accepted pair as the two options do.

When ready it prints one line to stdout:
  ready ecs=http://127.0.0.1:P vpc=http://127.0.0.1:P metadata=http://127.0.0.1:Q instance=<id> region=<id>
and logs to stderr only. Admin: GET /__sim/state, POST/DELETE /__sim/faults,
POST /__sim/vswitch, POST /__sim/metadata on the OpenAPI listener.
See eniip-sim(1).
",
        eniip_sim::types::DEFAULT,
        eniip_sim::types::known()
    )
}

/// The options from the command line (after the program name).
fn options(
    args: impl IntoIterator<Item = String>,
) -> Result<Asked<(SimOptions, Extras)>, UsageError> {
    let mut o = SimOptions::default();
    let mut extras = Extras::default();
    let mut vswitches = Vec::new();
    let (mut key_id, mut key_secret) = (None, None);
    let mut flow_given: Option<std::collections::BTreeMap<String, u32>> = None;
    let bad = |flag: &str, e: &dyn std::fmt::Display| UsageError::new(format!("{flag} {e}"));
    let mut p = cli::parser(args);
    while let Some(arg) = p.next()? {
        if let Some(asked) = cli::shared(&arg) {
            return Ok(asked);
        }
        let Arg::Long(flag) = arg else {
            return Err(arg.unexpected().into());
        };
        let flag = format!("--{flag}");
        let num = |p: &mut cli::Parser| cli::parsed::<u64>(p, &flag, "a number");
        match flag.as_str() {
            "--listen" | "--metadata-listen" => {
                let addr: SocketAddr =
                    cli::parsed(&mut p, &flag, "an address such as 127.0.0.1:8080")?;
                if flag == "--listen" {
                    o.listen = addr;
                } else {
                    o.metadata_listen = addr;
                }
            }
            "--instance-type" => o.instance_type = cli::value(&mut p, &flag)?,
            "--region" => o.region = cli::value(&mut p, &flag)?,
            "--zone" => o.zone = cli::value(&mut p, &flag)?,
            "--vswitch" => vswitches
                .push(VSwitchSpec::parse(&cli::value(&mut p, &flag)?).map_err(|e| bad(&flag, &e))?),
            "--access-key-id" => key_id = Some(cli::value(&mut p, &flag)?),
            "--access-key-secret" => key_secret = Some(cli::value(&mut p, &flag)?),
            "--latency-ms" => o.latency = Duration::from_millis(num(&mut p)?),
            "--attach-delay-ms" => o.attach_delay = Duration::from_millis(num(&mut p)?),
            "--metadata-lag-ms" => o.metadata_lag = Duration::from_millis(num(&mut p)?),
            "--seed" => o.seed = Some(num(&mut p)?),
            "--metadata-hardened" => o.metadata_hardened = true,
            "--host-links" => extras.host_links = Some(cli::value(&mut p, &flag)?),
            "--exit-with-stdin" => extras.exit_with_stdin = true,
            "--security-group" => o.security_groups.push(
                eniip_sim::parse_security_group(&cli::value(&mut p, &flag)?)
                    .map_err(|e| bad(&flag, &e))?,
            ),
            "--state-file" => {
                o.world_file = Some(std::path::PathBuf::from(cli::value(&mut p, &flag)?))
            }
            "--flow-control" => {
                let v = cli::value(&mut p, &flag)?;
                let given = flow_given.get_or_insert_with(Default::default);
                if v != "default" {
                    let (a, n) = flow::parse_limit(&v).map_err(|e| bad(&flag, &e))?;
                    given.insert(a, n);
                }
            }
            "--instances" => match num(&mut p)? {
                n @ 1..=1000 => o.instances = n as usize,
                n => return Err(UsageError::new(format!("--instances {n}: from 1 to 1000"))),
            },
            "--instance-types" => {
                o.instance_types = cli::value(&mut p, &flag)?
                    .split(',')
                    .map(str::to_string)
                    .collect()
            }
            "--flow-control-model" => {
                o.flow.model = flow::FlowModel::parse(&cli::value(&mut p, &flag)?)
                    .map_err(|e| bad(&flag, &e))?
            }
            // A test knob (eniip-sim(1)): windows shorter than the
            // service's minute, so tests need not wait one.
            "--flow-window-ms" => match num(&mut p)? {
                0 => return Err(UsageError::new("--flow-window-ms must be at least 1")),
                n => o.flow.window = Duration::from_millis(n),
            },
            _ => return Err(UsageError::new(format!("unknown option {flag}"))),
        }
    }
    let key_id = key_id.or_else(|| std::env::var(ENV_KEY_ID).ok());
    let key_secret = key_secret.or_else(|| std::env::var(ENV_KEY_SECRET).ok());
    match (key_id, key_secret) {
        (Some(i), Some(s)) => {
            o.access_key_id = i;
            o.access_key_secret = s;
        }
        (None, None) => {}
        _ => {
            return Err(UsageError::new(
                "--access-key-id and --access-key-secret go together (so do ENIIP_SIM_ACCESS_KEY_ID and ENIIP_SIM_ACCESS_KEY_SECRET)",
            ))
        }
    }
    if !vswitches.is_empty() {
        o.vswitches = vswitches;
    }
    // A fleet shares the account's quota: flow control is on for it.
    if flow_given.is_some() || o.instances > 1 {
        o.flow.limits = flow::FlowOptions::with_defaults(&flow_given.unwrap_or_default());
    }
    Ok(Asked::Run((o, extras)))
}

fn main() -> ExitCode {
    let (o, extras) = match cli::settle("eniip-sim", &help(), options(std::env::args().skip(1))) {
        Ok(o) => o,
        Err(code) => return code,
    };
    let _ = env_logger::Builder::new()
        .parse_filters(&std::env::var("ENIIP_SIM_LOG").unwrap_or_else(|_| "info".into()))
        .target(env_logger::Target::Stderr)
        .try_init();
    let signals = match signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
    ]) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("eniip-sim: cannot install signal handlers: {e}");
            return ExitCode::FAILURE;
        }
    };
    let sim = match Simulator::start(o) {
        Ok(s) => s,
        Err(e) => {
            let mut msg = e.to_string();
            if let Some(src) = std::error::Error::source(&e) {
                msg.push_str(&format!(": {src}"));
            }
            eprintln!("eniip-sim: {msg}");
            return ExitCode::from(if matches!(e, eniip_sim::SimError::Config(_)) {
                2
            } else {
                1
            });
        }
    };
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", sim.ready_line());
        for line in sim.instance_lines() {
            let _ = writeln!(out, "{line}");
        }
        let _ = out.flush();
    }
    let links = match extras.host_links.map(|tag| start_links(&sim, tag)) {
        None => None,
        Some(Ok(l)) => Some(l),
        Some(Err(msg)) => {
            eprintln!("eniip-sim: --host-links: {msg}");
            sim.shutdown();
            return ExitCode::FAILURE;
        }
    };
    log::info!("eniip-sim serving instance {}", sim.instance_id());
    sim.notify_ready();
    if extras.exit_with_stdin {
        if let Err(e) = watch_stdin(signals.handle()) {
            eprintln!("eniip-sim: --exit-with-stdin: {e}");
            sim.shutdown();
            return ExitCode::FAILURE;
        }
    }
    let mut signals = signals;
    if let Some(s) = signals.forever().next() {
        log::info!("signal {s}: stopping");
    }
    if let Some(l) = links {
        l.stop_until(std::time::Instant::now() + Duration::from_secs(3));
    }
    sim.shutdown();
    ExitCode::SUCCESS
}

/// `--host-links TAG`: starts the links and prints where they are.
fn start_links(sim: &Simulator, tag: String) -> Result<HostLinks, String> {
    let links = HostLinks::start(HostLinksOptions {
        ecs_url: sim.ecs_url(),
        instance_id: sim.instance_id(),
        node_netns: None,
        vpc_netns: None,
        tag,
        poll: Duration::from_millis(100),
    })
    .map_err(|e| match std::error::Error::source(&e) {
        Some(src) => format!("{e}: {src}"),
        None => e.to_string(),
    })?;
    let gateway = hostlinks::first_gateway(&sim.state())
        .map(|g| format!(" gateway={g}"))
        .unwrap_or_default();
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "links vpc={}{gateway}", links.vpc_path().display());
    let _ = out.flush();
    Ok(links)
}

/// `--exit-with-stdin`: a named thread reads standard input to its end,
/// then stops the program as SIGTERM would.
fn watch_stdin(stop: signal_hook::iterator::Handle) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("sim-stdin".into())
        .spawn(move || {
            let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
            log::info!("standard input closed: stopping");
            stop.close();
        })
        .map(|_| ())
}
