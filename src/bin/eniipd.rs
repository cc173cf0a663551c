//! `eniipd`: parses the command line and runs the daemon (see `eniipd(8)`).

use std::process::ExitCode;

use eniipd::daemon::args::{self, Command};

fn main() -> ExitCode {
    // Before any thread starts: one malloc arena for every thread.
    eniipd::util::memory::one_arena();
    let code = match args::parse(std::env::args().skip(1)) {
        Ok(Command::Help) => {
            print!("{}", args::HELP);
            0
        }
        Ok(Command::Version) => {
            println!("eniipd {}", env!("CARGO_PKG_VERSION"));
            0
        }
        Ok(Command::Run(a)) => eniipd::daemon::run(a),
        Err(e) => {
            eprintln!("eniipd: {e}");
            eniipd::daemon::exit::USAGE
        }
    };
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}
