//! `eniipctl`: sends one request to eniipd and prints the reply.
//! Exit 0 on `OK`, 1 on `ERR` (or no complete reply in time), 2 when the
//! socket cannot be reached or the command line is wrong.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use eniipd::server::protocol::{is_final_line, MAX_LINE};

const HELP: &str = "\
eniipctl - send one request to eniipd and print the reply

Usage: eniipctl [--socket PATH] [--timeout S] COMMAND [ARGS...]

Options:
  --socket PATH   the daemon's socket (default $ENIIPD_SOCKET, else
                  /run/eniipd/eniipd.sock)
  --timeout S     seconds to wait for the whole reply (default 90; a cold
                  alloc may take the daemon's alloc_timeout)
  --help          this text

Commands: ping, version, help, alloc OWNER [sandbox=ID] [prefer=IP],
release OWNER [sandbox=ID], show OWNER, list, status, enis, audit, metrics,
config, quit. See eniipd-protocol(7).

Exit status: 0 the reply ended with OK; 1 it ended with ERR, or no complete
reply came in time; 2 the socket could not be reached, or usage error.
";

fn usage(msg: &str) -> ExitCode {
    eprintln!("eniipctl: {msg} (try --help)");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let mut socket = std::env::var("ENIIPD_SOCKET")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| eniipd::config::DEFAULT_SOCKET_PATH.to_string());
    let mut timeout = Duration::from_secs(90);
    let mut words: Vec<String> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if !words.is_empty() {
            words.push(a);
            continue;
        }
        match a.as_str() {
            "--help" | "-h" => {
                print!("{HELP}");
                return ExitCode::SUCCESS;
            }
            "--socket" => match args.next() {
                Some(s) if !s.is_empty() => socket = s,
                _ => return usage("--socket needs a path"),
            },
            "--timeout" => match args.next().and_then(|s| s.parse::<f64>().ok()) {
                Some(t) if t > 0.0 && t < 1e6 => timeout = Duration::from_secs_f64(t),
                _ => return usage("--timeout needs a positive number of seconds"),
            },
            s if s.starts_with("--") => return usage(&format!("unknown option {s}")),
            _ => words.push(a),
        }
    }
    if words.is_empty() {
        return usage("no command given");
    }
    let line = words.join(" ");
    if line.len() > MAX_LINE || line.contains('\n') {
        return usage("the request is longer than 4096 bytes or contains a newline");
    }
    let mut stream = match UnixStream::connect(&socket) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("eniipctl: cannot connect to {socket}: {e}");
            return ExitCode::from(2);
        }
    };
    let deadline = Instant::now() + timeout;
    let _ = stream.set_write_timeout(Some(timeout));
    if let Err(e) = stream.write_all(format!("{line}\n").as_bytes()) {
        eprintln!("eniipctl: cannot send to {socket}: {e}");
        return ExitCode::from(1);
    }
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
