//! `eniipd`'s command line (SPEC section 2) on [`eniip_protocol::cli`]: flags and
//! their values, `--flag=value` accepted too, `-h`/`--help` and
//! `-V`/`--version`. Usage errors name the flag and are exit 2.

use std::path::PathBuf;

use eniip_protocol::cli::{self, Arg, Asked, UsageError};

/// Flags of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Args {
    /// `--config FILE`
    pub(crate) config: Option<PathBuf>,
    /// `--socket PATH`
    pub(crate) socket: Option<PathBuf>,
    /// `--state-dir DIR`
    pub(crate) state_dir: Option<PathBuf>,
    /// `--log-level LEVEL`
    pub(crate) log_level: Option<String>,
    /// `--ecs-endpoint URL`
    pub(crate) ecs_endpoint: Option<String>,
    /// `--vpc-endpoint URL`
    pub(crate) vpc_endpoint: Option<String>,
    /// `--metadata-endpoint URL`
    pub(crate) metadata_endpoint: Option<String>,
    /// `--simulate`
    pub(crate) simulate: bool,
    /// `--simulate-links` (only with `--simulate`)
    pub(crate) simulate_links: bool,
    /// `--check-config`
    pub(crate) check_config: bool,
    /// `--recover-state`
    pub(crate) recover_state: bool,
}

/// `--help` text.
pub const HELP: &str = "\
eniipd - keeps a warm pool of secondary private IPs on the ENIs of this
Alibaba Cloud ECS instance and hands them out over a Unix socket.

Usage:
  eniipd [--config FILE] [--socket PATH] [--state-dir DIR] [--log-level LEVEL]
         [--ecs-endpoint URL] [--vpc-endpoint URL] [--metadata-endpoint URL]
         [--simulate [--simulate-links]] [--check-config] [--recover-state]
         [--version] [--help]

Options (a value follows its flag, or comes after `=`):
  --config FILE            config file (default /etc/eniipd/eni.json)
  --socket PATH            client socket (default /run/eniipd/eniipd.sock)
  --state-dir DIR          state directory (default /var/lib/eniipd)
  --log-level LEVEL        error, warn, info (default), debug, trace, or
                           directives such as info,eniip_cloud=debug
  --ecs-endpoint URL       ECS OpenAPI (default https://ecs-vpc.<region>.aliyuncs.com)
  --vpc-endpoint URL       VPC OpenAPI (default https://vpc-vpc.<region>.aliyuncs.com)
  --metadata-endpoint URL  metadata service (default http://100.100.100.200)
  --simulate               run against a built-in emulator on 127.0.0.1: no
                           config, credentials or root needed
  --simulate-links         with --simulate, root only: the emulated ENIs appear
                           as links on this host (veth pairs carrying their
                           MACs, whose far ends sit in a network namespace of
                           eniipd's own playing the VPC and its gateway), so
                           eniip-cni and containers work without a cloud;
                           all gone when eniipd ends, even on SIGKILL
  --check-config           validate the config, print it (secrets masked), exit
  --recover-state          move corrupt state files aside, keep what is valid,
                           and hold every address with no known owner back
                           for an hour (see eniipd(8))
  -V, --version            print the version
  -h, --help               print this help

Flags override config keys. Exit codes: 0 clean stop, 1 other error, 2 usage,
65 corrupt state, 69 cloud unreachable at start, 75 state directory in use,
78 bad config. See eniipd(8).
";

/// Parses the arguments after the program name.
pub fn parse<I: IntoIterator<Item = String>>(argv: I) -> Result<Asked<Args>, UsageError> {
    let mut a = Args::default();
    let mut p = cli::parser(argv);
    while let Some(arg) = p.next()? {
        if let Some(asked) = cli::shared(&arg) {
            return Ok(asked);
        }
        match arg {
            Arg::Long("config") => a.config = Some(cli::value(&mut p, "--config")?.into()),
            Arg::Long("socket") => a.socket = Some(cli::value(&mut p, "--socket")?.into()),
            Arg::Long("state-dir") => a.state_dir = Some(cli::value(&mut p, "--state-dir")?.into()),
            Arg::Long("log-level") => a.log_level = Some(cli::value(&mut p, "--log-level")?),
            Arg::Long("ecs-endpoint") => {
                a.ecs_endpoint = Some(cli::value(&mut p, "--ecs-endpoint")?)
            }
            Arg::Long("vpc-endpoint") => {
                a.vpc_endpoint = Some(cli::value(&mut p, "--vpc-endpoint")?)
            }
            Arg::Long("metadata-endpoint") => {
                a.metadata_endpoint = Some(cli::value(&mut p, "--metadata-endpoint")?)
            }
            Arg::Long("simulate") => a.simulate = true,
            Arg::Long("simulate-links") => a.simulate_links = true,
            Arg::Long("check-config") => a.check_config = true,
            Arg::Long("recover-state") => a.recover_state = true,
            _ => return Err(arg.unexpected().into()),
        }
    }
    if a.simulate_links && !a.simulate {
        return Err(UsageError::new(
            "--simulate-links needs --simulate (it shows the emulator's ENIs)",
        ));
    }
    Ok(Asked::Run(a))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Asked<Args>, UsageError> {
        parse(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn flags_and_values() {
        let Asked::Run(a) = p(&[
            "--config",
            "/x.json",
            "--socket=/s.sock",
            "--simulate",
            "--log-level",
            "debug",
        ])
        .unwrap() else {
            panic!()
        };
        assert_eq!(a.config, Some(PathBuf::from("/x.json")));
        assert_eq!(a.socket, Some(PathBuf::from("/s.sock")));
        assert!(a.simulate && !a.check_config);
        assert_eq!(a.log_level.as_deref(), Some("debug"));
        assert_eq!(p(&["--help"]).unwrap(), Asked::Help);
        assert_eq!(p(&["-h"]).unwrap(), Asked::Help);
        assert_eq!(p(&["--version"]).unwrap(), Asked::Version);
        assert_eq!(p(&["-V"]).unwrap(), Asked::Version);
    }

    #[test]
    fn usage_errors_name_the_flag() {
        for (args, needle) in [
            (&["--config"][..], "--config needs a value"),
            (&["--bogus"][..], "unknown option --bogus"),
            (&["stray"][..], "unexpected argument stray"),
            (&["--simulate=yes"][..], "--simulate takes no value"),
            (&["--socket="][..], "--socket needs a value"),
            (
                &["--simulate-links"][..],
                "--simulate-links needs --simulate",
            ),
            (
                &["--simulate", "--simulate-links=1"][..],
                "--simulate-links takes no value",
            ),
        ] {
            let e = p(args).unwrap_err();
            assert!(e.to_string().contains(needle), "{e}");
        }
    }
}
