//! `eniip-sim`: the Alibaba Cloud ECS/VPC OpenAPI and metadata emulator as
//! a program. Prints one `ready ...` line on stdout, then logs to stderr.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use eniipd::cli::{self, Arg, Asked, UsageError};
use eniipd::sim::{
    flow, SimOptions, Simulator, VSwitchSpec, DEFAULT_ACCESS_KEY_ID, DEFAULT_ACCESS_KEY_SECRET,
};

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
            [--state-file PATH] [-V|--version] [-h|--help]
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

When ready it prints one line to stdout:
  ready ecs=http://127.0.0.1:P vpc=http://127.0.0.1:P metadata=http://127.0.0.1:Q instance=<id> region=<id>
and logs to stderr only. Admin: GET /__sim/state, POST/DELETE /__sim/faults,
POST /__sim/vswitch, POST /__sim/metadata on the OpenAPI listener.
See eniip-sim(1).
",
        eniipd::sim::types::DEFAULT,
        eniipd::sim::types::known()
    )
}

/// The options from the command line (after the program name).
fn options(args: impl IntoIterator<Item = String>) -> Result<Asked<SimOptions>, UsageError> {
    let mut o = SimOptions::default();
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
    match (key_id, key_secret) {
        (Some(i), Some(s)) => {
            o.access_key_id = i;
            o.access_key_secret = s;
        }
        (None, None) => {}
        _ => {
            return Err(UsageError::new(
                "--access-key-id and --access-key-secret go together",
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
    Ok(Asked::Run(o))
}

fn main() -> ExitCode {
    let o = match cli::settle("eniip-sim", &help(), options(std::env::args().skip(1))) {
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
            return ExitCode::from(if matches!(e, eniipd::sim::SimError::Config(_)) {
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
    log::info!("eniip-sim serving instance {}", sim.instance_id());
    sim.notify_ready();
    let mut signals = signals;
    if let Some(s) = signals.forever().next() {
        log::info!("signal {s}: stopping");
    }
    sim.shutdown();
    ExitCode::SUCCESS
}
