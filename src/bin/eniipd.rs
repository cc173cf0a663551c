//! `eniipd`: parses the command line and runs the daemon (see `eniipd(8)`).

use std::process::ExitCode;

use eniipd_daemon::daemon::args;

fn main() -> ExitCode {
    match eniip_protocol::cli::settle("eniipd", args::HELP, args::parse(std::env::args().skip(1))) {
        Ok(a) => ExitCode::from(u8::try_from(eniipd_daemon::daemon::run(a)).unwrap_or(1)),
        Err(code) => code,
    }
}
