//! `eniip-cni`: the CNI plugin. Reads `CNI_*` from the environment and the
//! network configuration from stdin, prints the result (or the CNI error
//! object, exit 1) on stdout. The logic is `eniipd::cni`.

use std::io::{Read, Write};
use std::process::ExitCode;

use eniipd::cli::{self, Asked, UsageError};
use eniipd::cni::spec::{code, CniError, Command, Env};
use eniipd::cni::version;

const HELP: &str = "\
eniip-cni - CNI plugin (spec 0.4.0, 1.0.0, 1.1.0): container addresses from eniipd

Usage: a container runtime runs it with CNI_COMMAND (ADD, DEL, CHECK, GC,
STATUS, VERSION) and the other CNI_* variables set, and the network
configuration on stdin. See eniip-cni(8).

Options (by hand only):
  -h, --help      this text
  -V, --version   the plugin's version
";

/// Largest configuration read from stdin.
const MAX_STDIN: u64 = 4 << 20;

/// A runtime passes no arguments: only the shared `--help` and
/// `--version` are taken.
fn options(args: impl IntoIterator<Item = String>) -> Result<Asked<()>, UsageError> {
    let mut p = cli::parser(args);
    let Some(arg) = p.next()? else {
        return Ok(Asked::Run(()));
    };
    cli::shared(&arg).ok_or_else(|| arg.unexpected().into())
}

fn main() -> ExitCode {
    if let Err(code) = cli::settle("eniip-cni", HELP, options(std::env::args().skip(1))) {
        return code;
    }
    let mut stdin = Vec::new();
    let read = std::io::stdin()
        .take(MAX_STDIN)
        .read_to_end(&mut stdin)
        .map_err(|e| CniError::new(code::IO, format!("cannot read stdin: {e}")));
    let outcome = read.and_then(|_| {
        let cmd = Command::parse(&std::env::var("CNI_COMMAND").unwrap_or_default())?;
        let env = Env::from_vars(cmd, |k| std::env::var(k).ok())?;
        eniipd::cni::run(cmd, &env, &stdin)
    });
    let mut out = std::io::stdout().lock();
    match outcome {
        Ok(text) => {
            if !text.is_empty() {
                let _ = writeln!(out, "{text}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            let _ = writeln!(out, "{}", e.to_json(&version::of_errors(&stdin)));
            eprintln!("eniip-cni: {e}");
            ExitCode::from(1)
        }
    }
}
