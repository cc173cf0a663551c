//! `eniip-sim`: the Alibaba Cloud ECS/VPC OpenAPI and metadata emulator as
//! a program. Prints one `ready ...` line on stdout, then logs to stderr.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

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
            [--state-file PATH] [--version] [--help]

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
  tags, vswitch counts) in PATH: restored at start, saved as it changes.

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

fn usage(msg: &str) -> ExitCode {
    eprintln!("eniip-sim: {msg} (try --help)");
    ExitCode::from(2)
}

/// The options from the command line; `Err`: exit with this code now
/// (`--help`, `--version`, a usage error).
fn options() -> Result<SimOptions, ExitCode> {
    let mut o = SimOptions::default();
    let mut vswitches = Vec::new();
    let (mut key_id, mut key_secret) = (None, None);
    let mut flow_given: Option<std::collections::BTreeMap<String, u32>> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") && f != "--vswitch" => {
                (f.to_string(), Some(v.to_string()))
            }
            _ => (a.clone(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .filter(|v| !v.is_empty())
        };
        macro_rules! val {
            ($name:expr) => {
                match value() {
                    Some(v) => v,
                    None => return Err(usage(&format!("{} needs a value", $name))),
                }
            };
        }
        macro_rules! num {
            ($name:expr) => {{
                let v = val!($name);
                match v.parse::<u64>() {
                    Ok(n) => n,
                    Err(_) => return Err(usage(&format!("{}: {v:?} is not a number", $name))),
                }
            }};
        }
        match flag.as_str() {
            "--help" | "-h" => {
                print!("{}", help());
                return Err(ExitCode::SUCCESS);
            }
            "--version" => {
                println!("eniip-sim {}", env!("CARGO_PKG_VERSION"));
                return Err(ExitCode::SUCCESS);
            }
            "--listen" | "--metadata-listen" => {
                let v = val!(flag);
                let addr: SocketAddr = match v.parse() {
                    Ok(a) => a,
                    Err(_) => {
                        return Err(usage(&format!(
                            "{flag}: {v:?} is not an address such as 127.0.0.1:8080"
                        )))
                    }
                };
                if flag == "--listen" {
                    o.listen = addr;
                } else {
                    o.metadata_listen = addr;
                }
            }
            "--instance-type" => o.instance_type = val!(flag),
            "--region" => o.region = val!(flag),
            "--zone" => o.zone = val!(flag),
            "--vswitch" => {
                let v = val!(flag);
                match VSwitchSpec::parse(&v) {
                    Ok(s) => vswitches.push(s),
                    Err(e) => return Err(usage(&format!("--vswitch {e}"))),
                }
            }
            "--access-key-id" => key_id = Some(val!(flag)),
            "--access-key-secret" => key_secret = Some(val!(flag)),
            "--latency-ms" => o.latency = Duration::from_millis(num!(flag)),
            "--attach-delay-ms" => o.attach_delay = Duration::from_millis(num!(flag)),
            "--metadata-lag-ms" => o.metadata_lag = Duration::from_millis(num!(flag)),
            "--seed" => o.seed = Some(num!(flag)),
            "--metadata-hardened" => o.metadata_hardened = true,
            "--state-file" => o.world_file = Some(std::path::PathBuf::from(val!(flag))),
            "--flow-control" => {
                let v = val!(flag);
                let given = flow_given.get_or_insert_with(Default::default);
                if v != "default" {
                    match flow::parse_limit(&v) {
                        Ok((a, n)) => drop(given.insert(a, n)),
                        Err(e) => return Err(usage(&format!("--flow-control {e}"))),
                    }
                }
            }
            "--instances" => match num!(flag) {
                n @ 1..=1000 => o.instances = n as usize,
                n => return Err(usage(&format!("--instances {n}: from 1 to 1000"))),
            },
            "--instance-types" => {
                o.instance_types = val!(flag).split(',').map(str::to_string).collect()
            }
            "--flow-control-model" => match flow::FlowModel::parse(&val!(flag)) {
                Ok(m) => o.flow.model = m,
                Err(e) => return Err(usage(&format!("--flow-control-model {e}"))),
            },
            // A test knob (eniip-sim(1)): windows shorter than the
            // service's minute, so tests need not wait one.
            "--flow-window-ms" => match num!(flag) {
                0 => return Err(usage("--flow-window-ms must be at least 1")),
                n => o.flow.window = Duration::from_millis(n),
            },
            other => return Err(usage(&format!("unknown option {other}"))),
        }
    }
    match (key_id, key_secret) {
        (Some(i), Some(s)) => {
            o.access_key_id = i;
            o.access_key_secret = s;
        }
        (None, None) => {}
        _ => return Err(usage("--access-key-id and --access-key-secret go together")),
    }
    if !vswitches.is_empty() {
        o.vswitches = vswitches;
    }
    // A fleet shares the account's quota: flow control is on for it.
    if flow_given.is_some() || o.instances > 1 {
        o.flow.limits = flow::FlowOptions::with_defaults(&flow_given.unwrap_or_default());
    }
    Ok(o)
}

fn main() -> ExitCode {
    let o = match options() {
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
