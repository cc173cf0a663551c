//! `eniip-cni`: the CNI plugin. Reads `CNI_*` from the environment and the
//! network configuration from stdin, prints the result (or the CNI error
//! object, exit 1) on stdout. The logic is `eniipd::cni`.

use std::io::{Read, Write};
use std::process::ExitCode;

use eniipd::cni::spec::{code, CniError, Command, Env};

const HELP: &str = "\
eniip-cni - CNI plugin (spec 0.4.0, 1.0.0, 1.1.0): container addresses from eniipd

Usage: a container runtime runs it with CNI_COMMAND (ADD, DEL, CHECK, GC,
STATUS, VERSION) and the other CNI_* variables set, and the network
configuration on stdin. See eniip-cni(8).

Options (by hand only):
  --help      this text
  --version   the plugin's version
";

/// Largest configuration read from stdin.
const MAX_STDIN: u64 = 4 << 20;

fn main() -> ExitCode {
    match std::env::args().nth(1).as_deref() {
        Some("--help") => {
            print!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Some("--version") => {
            println!("eniip-cni {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Some(other) => {
            eprintln!("eniip-cni: unexpected argument {other:?} (try --help)");
            return ExitCode::from(2);
        }
        None => {}
    }
    let mut stdin = Vec::new();
    let read = std::io::stdin()
        .take(MAX_STDIN)
        .read_to_end(&mut stdin)
        .map_err(|e| CniError::new(code::IO, format!("cannot read stdin: {e}")));
    let version = serde_json::from_slice::<serde_json::Value>(&stdin)
        .ok()
        .and_then(|v| {
            v.get("cniVersion")
                .and_then(|s| s.as_str())
                .map(String::from)
        })
        .unwrap_or_else(|| "1.1.0".to_string());
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
            let _ = writeln!(out, "{}", e.to_json(&version));
            eprintln!("eniip-cni: {e}");
            ExitCode::from(1)
        }
    }
}
