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

Options (by hand, or an init container):
  --install DIR  copy this binary into the CNI bin dir DIR as eniip-cni,
                 atomically (a temporary file, fsynced, renamed)
  --help         this text
  --version      the plugin's version
";

/// `--install DIR`: exit 0 once DIR holds this binary, 1 naming what
/// failed, 2 on a wrong command line.
fn install(args: &[String]) -> ExitCode {
    let [dir] = args else {
        eprintln!("eniip-cni: --install takes one directory (try --help)");
        return ExitCode::from(2);
    };
    match eniipd::cni::install::install_self(std::path::Path::new(dir)) {
        Ok((path, how)) => {
            let how = match how {
                eniipd::cni::install::Installed::Written => "installed",
                eniipd::cni::install::Installed::Unchanged => "already installed",
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

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--install") {
        return install(&args[1..]);
    }
    match args.first().map(String::as_str) {
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
