//! `eniip-cni`: the CNI plugin. Reads `CNI_*` from the environment and the
//! network configuration from stdin, prints the result (or the CNI error
//! object, exit 1) on stdout. The logic is `eniip_cni`.

use std::io::{Read, Write};
use std::process::ExitCode;

use eniip_cni::spec::{code, CniError, Command, Env};
use eniip_cni::version;
use eniip_protocol::cli::{self, Asked, UsageError};

const HELP: &str = "\
eniip-cni - CNI plugin (spec 0.4.0, 1.0.0, 1.1.0): container addresses from eniipd

Usage: a container runtime runs it with CNI_COMMAND (ADD, DEL, CHECK, GC,
STATUS, VERSION) and the other CNI_* variables set, and the network
configuration on stdin. See eniip-cni(8).

Options (by hand, or an init container):
  --install DIR   copy this binary into the CNI bin dir DIR as eniip-cni,
                  atomically (a temporary file, fsynced, renamed)
  -h, --help      this text
  -V, --version   the plugin's version
";

/// `--install DIR`: exit 0 once DIR holds this binary, 1 naming what
/// failed (a wrong command line is 2, as every usage error).
fn install(dir: &str) -> ExitCode {
    match eniip_cni::install::install_self(std::path::Path::new(dir)) {
        Ok((path, how)) => {
            let how = match how {
                eniip_cni::install::Installed::Written => "installed",
                eniip_cni::install::Installed::Unchanged => "already installed",
            };
            println!(
                "eniip-cni {} {how} as {}",
                env!("CARGO_PKG_VERSION"),
                path.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("eniip-cni: --install: {e}");
            ExitCode::from(1)
        }
    }
}

/// Largest configuration read from stdin.
const MAX_STDIN: u64 = 4 << 20;

/// A runtime passes no arguments: only the shared `--help` and
/// `--version` are taken, and `--install DIR` (an init container's).
fn options(args: impl IntoIterator<Item = String>) -> Result<Asked<Option<String>>, UsageError> {
    let mut p = cli::parser(args);
    let Some(arg) = p.next()? else {
        return Ok(Asked::Run(None));
    };
    if let Some(asked) = cli::shared(&arg) {
        return Ok(asked);
    }
    if arg == cli::Arg::Long("install") {
        let dir = cli::value(&mut p, "--install")?;
        if let Some(more) = p.next()? {
            return Err(more.unexpected().into());
        }
        return Ok(Asked::Run(Some(dir)));
    }
    Err(arg.unexpected().into())
}

fn main() -> ExitCode {
    match cli::settle("eniip-cni", HELP, options(std::env::args().skip(1))) {
        Err(code) => return code,
        Ok(Some(dir)) => return install(&dir),
        Ok(None) => {}
    }
    let mut stdin = Vec::new();
    let read = std::io::stdin()
        .take(MAX_STDIN)
        .read_to_end(&mut stdin)
        .map_err(|e| CniError::new(code::IO, format!("cannot read stdin: {e}")));
    let outcome = read.and_then(|_| {
        let cmd = Command::parse(&std::env::var("CNI_COMMAND").unwrap_or_default())?;
        let env = Env::from_vars(cmd, |k| std::env::var(k).ok())?;
        eniip_cni::run(cmd, &env, &stdin)
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
