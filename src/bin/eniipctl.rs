//! `eniipctl`: sends one request to eniipd and prints the reply (for `gc`,
//! the `keep` lines of its keep-list first).
//! Exit 0 on `OK`, 1 on `ERR` (or no complete reply in time), 2 when the
//! socket cannot be reached or the command line is wrong.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use eniip_protocol::cli::{self, Arg, Asked, UsageError, ValueExt};
use eniip_protocol::protocol::client::{keep_lines, verb, Client, ClientError, Deadline};
use eniip_protocol::protocol::reach::{unreachable_hint, SocketFrom};
use eniip_protocol::protocol::MAX_LINE;

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
  -V, --version   print eniipctl's version
  -h, --help      this text

Commands: ping, version, help, alloc OWNER [sandbox=ID] [prefer=IP]
[vswitch=ID] [ip-stick-time=S] [ip-stack=ipv4], release OWNER [sandbox=ID],
show OWNER, list, status, capacity, enis, eni ID, audit, metrics, config,
drain, undrain, quit, and gc owner-prefix=P [KEEP-ID...]: eniipctl sends
the keep-list in as many `keep` lines as it needs, then the `gc`. See
eniipd-protocol(7).

Exit status: 0 the reply ended with OK; 1 it ended with ERR, or no complete
reply came in time; 2 the socket could not be reached, or usage error.
";

/// What to send, where, and how long to wait.
struct Request {
    socket: PathBuf,
    /// Where `socket` came from (said when it cannot be reached).
    socket_from: SocketFrom,
    timeout: Duration,
    lines: Vec<String>,
}

/// The request lines for `words`: one line, or for `gc` the `keep` lines
/// its keep-list needs and then the `gc` itself.
fn request_lines(words: &[String]) -> Result<Vec<String>, UsageError> {
    if words[0].eq_ignore_ascii_case("gc") {
        let (opts, ids): (Vec<String>, Vec<String>) =
            words[1..].iter().cloned().partition(|w| w.contains('='));
        let mut lines = keep_lines(&ids);
        lines.push(
            std::iter::once("gc".to_string())
                .chain(opts)
                .collect::<Vec<_>>()
                .join(" "),
        );
        return Ok(lines);
    }
    let line = words.join(" ");
    if line.len() > MAX_LINE || line.contains('\n') {
        return Err(UsageError::new(
            "the request is longer than 4096 bytes or contains a newline",
        ));
    }
    Ok(vec![line])
}

fn parse(args: impl IntoIterator<Item = String>) -> Result<Asked<Request>, UsageError> {
    let (mut socket, mut socket_from) = match std::env::var("ENIIPD_SOCKET") {
        Ok(s) if !s.is_empty() => (s, SocketFrom::Env),
        _ => (
            eniipd_daemon::config::DEFAULT_SOCKET_PATH.to_string(),
            SocketFrom::Default,
        ),
    };
    let mut timeout = Duration::from_secs(90);
    let mut words = Vec::new();
    let mut p = cli::parser(args);
    while let Some(arg) = p.next()? {
        if let Some(asked) = cli::shared(&arg) {
            return Ok(asked);
        }
        match arg {
            Arg::Long("socket") => {
                socket = cli::value(&mut p, "--socket")?;
                socket_from = SocketFrom::Flag;
            }
            Arg::Long("timeout") => match cli::value(&mut p, "--timeout")?.parse::<f64>() {
                Ok(t) if t > 0.0 && t < 1e6 => timeout = Duration::from_secs_f64(t),
                _ => {
                    return Err(UsageError::new(
                        "--timeout needs a positive number of seconds",
                    ))
                }
            },
            Arg::Value(w) => words.push(w.string()?),
            _ => return Err(arg.unexpected().into()),
        }
    }
    if words.is_empty() {
        return Err(UsageError::new("no command given"));
    }
    Ok(Asked::Run(Request {
        socket: socket.into(),
        socket_from,
        timeout,
        lines: request_lines(&words)?,
    }))
}

/// What to look at when eniipd went away in the middle of a reply (it
/// failed to start, or stopped).
const GONE_HINT: &str = "eniipd went away without answering: did it fail to start? `systemctl status eniipd` and `journalctl -u eniipd` say why; once fixed: `systemctl reset-failed eniipd.socket eniipd.service && systemctl restart eniipd`";

/// Says why no reply came (the words eniipctl(1) users know); exit 1.
fn failed(e: &ClientError, socket: &str, timeout: Duration) -> ExitCode {
    match e {
        ClientError::Late { .. } => eprintln!(
            "eniipctl: no complete reply within {} s",
            timeout.as_secs_f64()
        ),
        ClientError::Send { source, .. } => {
            eprintln!("eniipctl: cannot send to {socket}: {source}")
        }
        ClientError::Receive { source, .. } => {
            eprintln!("eniipctl: reading the reply: {source}");
            eprintln!("eniipctl: {GONE_HINT}");
        }
        ClientError::Closed { .. } => {
            eprintln!("eniipctl: the daemon closed the connection before its final line");
            eprintln!("eniipctl: {GONE_HINT}");
        }
        e => eprintln!("eniipctl: {e}"),
    }
    ExitCode::from(1)
}

fn main() -> ExitCode {
    let req = match cli::settle("eniipctl", HELP, parse(std::env::args().skip(1))) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let socket = req.socket.display().to_string();
    let deadline = Deadline::after(req.timeout);
    let mut c = match Client::connect(&req.socket, req.timeout) {
        Ok(c) => c,
        Err(ClientError::Connect { source, .. }) => {
            eprintln!("eniipctl: cannot connect to {socket}: {source}");
            eprintln!(
                "eniipctl: {}",
                unreachable_hint(&req.socket, req.socket_from, &source)
            );
            return ExitCode::from(2);
        }
        Err(e) => return failed(&e, &socket, req.timeout),
    };
    if let Err(e) = c.send(&req.lines, &deadline) {
        return failed(&e, &socket, req.timeout);
    }
    // Half-close: the daemon answers what it got, then sees EOF.
    let _ = c.finish_sending();
    let mut out = std::io::stdout().lock();
    for (i, line) in req.lines.iter().enumerate() {
        let reply = match c.read_reply(verb(line), &deadline, false) {
            Ok(r) => r,
            Err(e) => return failed(&e, &socket, req.timeout),
        };
        let ok = reply.is_ok();
        // Every reply but the last is a `keep` acknowledgement: read, and
        // shown only when refused.
        let shown = if i + 1 == req.lines.len() {
            reply.into_lines()
        } else if !ok {
            vec![reply.final_line().to_string()]
        } else {
            continue;
        };
        for l in shown {
            let _ = writeln!(out, "{l}");
        }
        let _ = out.flush();
        return if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        };
    }
    unreachable!("a request has at least one line")
}
