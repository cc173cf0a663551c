//! `eniipctl`: sends one request to eniipd and prints the reply (for `gc`,
//! the `keep` lines of its keep-list first).
//! Exit 0 on `OK`, 1 on `ERR` (or no complete reply in time), 2 when the
//! socket cannot be reached or the command line is wrong.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use eniipd::protocol::{is_final_line, MAX_LINE};

const HELP: &str = "\
eniipctl - send one request to eniipd and print the reply

Usage: eniipctl [OPTIONS] COMMAND [ARGS...] [OPTIONS]

Options (before or after the command; `--` ends them):
  --socket PATH, --socket=PATH
                  the daemon's socket (default $ENIIPD_SOCKET, else
                  /run/eniipd/eniipd.sock)
  --timeout S, --timeout=S
                  seconds to wait for the whole reply (default 90; a cold
                  alloc may take the daemon's alloc_timeout)
  --version       print eniipctl's version
  --help          this text

Commands: ping, version, help, alloc OWNER [sandbox=ID] [prefer=IP],
release OWNER [sandbox=ID], show OWNER, list, status, enis, eni ID, audit,
metrics, config, quit, and gc owner-prefix=P [KEEP-ID...]: eniipctl sends the
keep-list in as many `keep` lines as it needs, then the `gc`. See
eniipd-protocol(7).

Exit status: 0 the reply ended with OK; 1 it ended with ERR, or no complete
reply came in time; 2 the socket could not be reached, or usage error.
";

fn usage(msg: &str) -> ExitCode {
    eprintln!("eniipctl: {msg} (try --help)");
    ExitCode::from(2)
}

/// The request lines for `words`: one line, or for `gc` the `keep` lines
/// its keep-list needs and then the `gc` itself.
fn request_lines(words: &[String]) -> Result<Vec<String>, String> {
    if words[0].eq_ignore_ascii_case("gc") {
        let (opts, ids): (Vec<&String>, Vec<&String>) =
            words[1..].iter().partition(|w| w.contains('='));
        let mut lines = Vec::new();
        let mut line = String::new();
        for id in ids {
            if !line.is_empty() && line.len() + 1 + id.len() > MAX_LINE {
                lines.push(std::mem::take(&mut line));
            }
            if line.is_empty() {
                line.push_str("keep");
            }
            line.push(' ');
            line.push_str(id);
        }
        if !line.is_empty() {
            lines.push(line);
        }
        let mut gc = String::from("gc");
        for o in opts {
            gc.push(' ');
            gc.push_str(o);
        }
        lines.push(gc);
        return Ok(lines);
    }
    let line = words.join(" ");
    if line.len() > MAX_LINE || line.contains('\n') {
        return Err("the request is longer than 4096 bytes or contains a newline".into());
    }
    Ok(vec![line])
}

fn main() -> ExitCode {
    let mut socket = std::env::var("ENIIPD_SOCKET")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| eniipd::config::DEFAULT_SOCKET_PATH.to_string());
    let mut timeout = Duration::from_secs(90);
    let mut words: Vec<String> = Vec::new();
    let mut args = std::env::args().skip(1);
    let mut options_done = false;
    while let Some(a) = args.next() {
        if options_done || !a.starts_with('-') || a == "-" {
            words.push(a);
            continue;
        }
        let (name, inline) = match a.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (a.clone(), None),
        };
        let mut value = |what: &str| -> Result<String, ExitCode> {
            inline
                .clone()
                .or_else(|| args.next())
                .filter(|v| !v.is_empty())
                .ok_or_else(|| usage(&format!("{name} needs {what}")))
        };
        match name.as_str() {
            "--" => options_done = true,
            "--help" | "-h" => {
                print!("{HELP}");
                return ExitCode::SUCCESS;
            }
            "--version" | "-V" => {
                println!("eniipctl {}", env!("CARGO_PKG_VERSION"));
                return ExitCode::SUCCESS;
            }
            "--socket" => match value("a path") {
                Ok(v) => socket = v,
                Err(code) => return code,
            },
            "--timeout" => match value("a number of seconds").map(|v| v.parse::<f64>()) {
                Ok(Ok(t)) if t > 0.0 && t < 1e6 => timeout = Duration::from_secs_f64(t),
                Err(code) => return code,
                _ => return usage("--timeout needs a positive number of seconds"),
            },
            s => return usage(&format!("unknown option {s}")),
        }
    }
    if words.is_empty() {
        return usage("no command given");
    }
    let lines = match request_lines(&words) {
        Ok(l) => l,
        Err(e) => return usage(&e),
    };
    let mut stream = match UnixStream::connect(&socket) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("eniipctl: cannot connect to {socket}: {e}");
            return ExitCode::from(2);
        }
    };
    let deadline = Instant::now() + timeout;
    let _ = stream.set_write_timeout(Some(timeout));
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    if let Err(e) = stream.write_all(text.as_bytes()) {
        eprintln!("eniipctl: cannot send to {socket}: {e}");
        return ExitCode::from(1);
    }
    // Every reply but the last is a `keep` acknowledgement: read, not shown.
    let mut skip = lines.len() - 1;
    // Half-close: the daemon answers what it got, then sees EOF.
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut reader = BufReader::new(stream);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            eprintln!(
                "eniipctl: no complete reply within {} s",
                timeout.as_secs_f64()
            );
            return ExitCode::from(1);
        }
        let _ = reader.get_ref().set_read_timeout(Some(left));
        let mut l = String::new();
        match reader.read_line(&mut l) {
            Ok(0) => {
                eprintln!("eniipctl: the daemon closed the connection before its final line");
                return ExitCode::from(1);
            }
            Ok(_) => {
                let text = l.trim_end_matches(['\n', '\r']);
                if skip > 0 {
                    if is_final_line(text) {
                        if !text.starts_with("OK") {
                            let _ = writeln!(out, "{text}");
                            return ExitCode::from(1);
                        }
                        skip -= 1;
                    }
                    continue;
                }
                let _ = writeln!(out, "{text}");
                if is_final_line(text) {
                    let _ = out.flush();
                    return if text.starts_with("OK") {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::from(1)
                    };
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                eprintln!(
                    "eniipctl: no complete reply within {} s",
                    timeout.as_secs_f64()
                );
                return ExitCode::from(1);
            }
            Err(e) => {
                eprintln!("eniipctl: reading the reply: {e}");
                return ExitCode::from(1);
            }
        }
    }
}
