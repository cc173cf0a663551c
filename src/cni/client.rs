//! eniipd's line protocol from the plugin's side: one connection per
//! invocation, requests answered in order, every request with a deadline.
//!
//! An eniipd that is away (its socket missing or refusing: stopped,
//! restarting, replaced by a rollout) is waited for by ADD, up to the
//! conflist's `daemonWait` ([`Client::connect_waiting`]); past it, and for
//! the other verbs at once, that is CNI error 11 ("try again later"), as
//! is an eniipd that does not answer `ping` within [`PING_TIMEOUT`]
//! (hung), that misses a deadline, or that answers `busy`,
//! `shutting-down`, `timeout` or `cloud`: the runtime retries and nothing
//! is lost. [`went_away`] tells an eniipd that went away from one that
//! refused.
//!
//! Deadlines: eniipd answers `ping` from its listener at once, even while
//! an allocation waits on the cloud, so a connection starts with one. An
//! `alloc` may then take up to [`ALLOC_DEADLINE`] (a cold pool waits for
//! the cloud, up to eniipd's `alloc_timeout`, 60 s by default), and while
//! it waits eniipd is pinged on a second connection every [`WATCH_EVERY`]:
//! a slow allocation goes on, a hung eniipd fails it within seconds. Every
//! other request has [`REPLY_DEADLINE`].

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::spec::{code, CniError};
use crate::protocol::is_final_line;

/// How long eniipd may take to answer `ping`.
pub(crate) const PING_TIMEOUT: Duration = Duration::from_secs(2);
/// How long an `alloc` may take in all.
pub(crate) const ALLOC_DEADLINE: Duration = Duration::from_secs(90);
/// How long an ADD may take in all, waiting for an eniipd that is away
/// included: kubelet's runtime request timeout is 2 minutes, past which
/// it gives up on RunPodSandbox (and containerd kills the plugin), so ADD
/// answers, with its reason, before that.
pub(crate) const ADD_BUDGET: Duration = Duration::from_secs(110);
/// How often an eniipd that is away is looked for.
pub(crate) const AWAY_POLL: Duration = Duration::from_millis(200);
/// How long any other answer may take.
pub(crate) const REPLY_DEADLINE: Duration = Duration::from_secs(10);
/// How often a waiting `alloc` checks that eniipd still answers.
pub(crate) const WATCH_EVERY: Duration = Duration::from_secs(1);
/// Most data lines one answer may carry (a `gc` of a big node).
const MAX_DATA_LINES: usize = 100_000;

/// A reply: its data lines and the final line's `OK` text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Answer {
    /// Data lines.
    pub(crate) data: Vec<String>,
    /// The text after `OK `.
    pub(crate) text: String,
}

/// One connection to eniipd.
#[derive(Debug)]
pub(crate) struct Client {
    socket: PathBuf,
    /// How long an `alloc` may take ([`ALLOC_DEADLINE`], or what is left
    /// of an ADD's budget).
    alloc_limit: Duration,
    writer: UnixStream,
    reader: BufReader<UnixStream>,
}

fn unreachable(socket: &Path, e: impl std::fmt::Display) -> CniError {
    CniError::new(
        code::TRY_AGAIN,
        format!(
            "eniipd is away: it is not reachable at {} (stopped, restarting, or being replaced)",
            socket.display()
        ),
    )
    .details(e.to_string())
    .eniipd_away()
}

/// Whether `e` says eniipd cannot be asked now (away, or going): it was
/// not reachable, it did not answer `ping`, the connection broke, or it
/// answered `shutting-down`. An idempotent request (`alloc` for a
/// sandbox, `release` with its sandbox) may be sent again once it is
/// back, or (a release) queued for it.
pub(crate) fn went_away(e: &CniError) -> bool {
    e.away
}

fn timed_out(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

impl Client {
    /// Connects to eniipd's socket and checks that it answers `ping`
    /// within [`PING_TIMEOUT`].
    pub(crate) fn connect(socket: &Path) -> Result<Client, CniError> {
        Client::connect_once(socket)
    }

    /// [`Client::connect`], waiting up to `wait` for an eniipd that
    /// cannot be asked ([`went_away`]: not listening, not answering).
    pub(crate) fn connect_waiting(socket: &Path, wait: Duration) -> Result<Client, CniError> {
        let end = Instant::now() + wait;
        loop {
            match Client::connect_once(socket) {
                Ok(c) => return Ok(c),
                Err(e) if went_away(&e) && Instant::now() < end => {
                    let left = end.saturating_duration_since(Instant::now());
                    std::thread::sleep(left.min(AWAY_POLL));
                }
                Err(mut e) => {
                    if went_away(&e) && !wait.is_zero() {
                        e.msg.push_str(&format!(
                            "; waited {} s for it (daemonWait)",
                            wait.as_secs()
                        ));
                    }
                    return Err(e);
                }
            }
        }
    }

    fn connect_once(socket: &Path) -> Result<Client, CniError> {
        let s = UnixStream::connect(socket).map_err(|e| unreachable(socket, e))?;
        s.set_write_timeout(Some(REPLY_DEADLINE))
            .map_err(|e| unreachable(socket, e))?;
        let r = s.try_clone().map_err(|e| unreachable(socket, e))?;
        let mut c = Client {
            socket: socket.to_path_buf(),
            alloc_limit: ALLOC_DEADLINE,
            writer: s,
            reader: BufReader::new(r),
        };
        let late = || {
            CniError::new(
                code::TRY_AGAIN,
                format!(
                    "eniipd is not answering: no pong within {PING_TIMEOUT:?} at {} \
                     (is it stopped or hung?)",
                    socket.display()
                ),
            )
            .eniipd_away()
        };
        c.exchange("ping", PING_TIMEOUT, false, &late)?
            .map_err(|err| daemon_error("ping", &err))?;
        Ok(c)
    }

    /// An `alloc` on this connection may take at most `limit` (and never
    /// more than [`ALLOC_DEADLINE`]).
    pub(crate) fn limit_alloc(&mut self, limit: Duration) {
        self.alloc_limit = limit.min(ALLOC_DEADLINE);
    }

    /// Sends one request; `Ok` for `OK`, a CNI error for `ERR`, a broken
    /// connection or a missed deadline (see the module doc).
    pub(crate) fn ask(&mut self, line: &str) -> Result<Answer, CniError> {
        let (limit, watch) = match verb(line) {
            "alloc" => (self.alloc_limit, true),
            _ => (REPLY_DEADLINE, false),
        };
        let late = || {
            CniError::new(
                code::TRY_AGAIN,
                format!("eniipd gave no answer to {} within {limit:?}", verb(line)),
            )
        };
        self.exchange(line, limit, watch, &late)?
            .map_err(|err| daemon_error(line, &err))
    }

    /// [`Client::ask`] where `ERR not-found` is an answer: `None`.
    pub(crate) fn ask_found(&mut self, line: &str) -> Result<Option<Answer>, CniError> {
        let late = || {
            CniError::new(
                code::TRY_AGAIN,
                format!(
                    "eniipd gave no answer to {} within {REPLY_DEADLINE:?}",
                    verb(line)
                ),
            )
        };
        match self.exchange(line, REPLY_DEADLINE, false, &late)? {
            Ok(a) => Ok(Some(a)),
            Err(err) if err.split(' ').nth(1) == Some("not-found") => Ok(None),
            Err(err) => Err(daemon_error(line, &err)),
        }
    }

    /// One request and its answer within `limit` (the `ERR` line as the
    /// inner error); `late` is the error past it. `watch`: ping eniipd
    /// while waiting.
    fn exchange(
        &mut self,
        line: &str,
        limit: Duration,
        watch: bool,
        late: &dyn Fn() -> CniError,
    ) -> Result<Result<Answer, String>, CniError> {
        let broken = |e: &dyn std::fmt::Display| {
            CniError::new(code::TRY_AGAIN, "the connection to eniipd broke")
                .details(format!("{}: {e}", verb(line)))
                .eniipd_away()
        };
        let deadline = Instant::now() + limit;
        self.writer
            .write_all(format!("{line}\n").as_bytes())
            .map_err(|e| broken(&e))?;
        let mut data = Vec::new();
        // Kept across timed-out reads: a line read in parts stays whole.
        let mut l = String::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(late());
            }
            let wait = if watch { left.min(WATCH_EVERY) } else { left };
            self.reader
                .get_ref()
                .set_read_timeout(Some(wait))
                .map_err(|e| broken(&e))?;
            let n = match self.reader.read_line(&mut l) {
                Ok(n) => n,
                Err(e) if timed_out(&e) => {
                    if watch {
                        // Slow or hung? A hung eniipd fails the ping.
                        Client::connect(&self.socket)?;
                    }
                    continue;
                }
                Err(e) => return Err(broken(&e)),
            };
            if n == 0 {
                return Err(broken(&"closed"));
            }
            let done = std::mem::take(&mut l);
            let done = done.trim_end_matches(['\n', '\r']).to_string();
            if is_final_line(&done) {
                return Ok(match done.strip_prefix("OK") {
                    Some(rest) => Ok(Answer {
                        data,
                        text: rest.trim_start().to_string(),
                    }),
                    None => Err(done),
                });
            }
            if data.len() >= MAX_DATA_LINES {
                return Err(broken(&"answer too long"));
            }
            data.push(done);
        }
    }
}

fn verb(line: &str) -> &str {
    line.split(' ').next().unwrap_or("")
}

/// Maps an `ERR code message` line to a CNI error.
fn daemon_error(request: &str, line: &str) -> CniError {
    let rest = line.strip_prefix("ERR").unwrap_or(line).trim_start();
    let err_code = rest.split(' ').next().unwrap_or("");
    let cni = match err_code {
        "busy" | "shutting-down" | "timeout" | "cloud" => code::TRY_AGAIN,
        _ => code::DAEMON,
    };
    let e =
        CniError::new(cni, super::wording::explain(verb(request), err_code, rest)).details(rest);
    if err_code == "shutting-down" {
        e.eniipd_away()
    } else {
        e
    }
}

/// The value of `key=` in an `OK` text.
pub(crate) fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.split(' ')
        .find_map(|w| w.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_cni_codes() {
        assert_eq!(
            daemon_error("alloc x", "ERR shutting-down the daemon is stopping").code,
            code::TRY_AGAIN
        );
        assert_eq!(
            daemon_error("alloc x", "ERR cloud Throttling slow down").code,
            code::TRY_AGAIN
        );
        assert!(went_away(&daemon_error(
            "alloc x",
            "ERR shutting-down stopping"
        )));
        assert!(!went_away(&daemon_error("alloc x", "ERR busy")));
        let e = daemon_error("alloc x", "ERR exhausted no IP");
        assert!(!went_away(&e));
        assert_eq!(e.code, code::DAEMON);
        assert!(e.msg.contains("exhausted"), "{e}");
        assert_eq!(field("released=1.2.3.4", "released"), Some("1.2.3.4"));
        assert_eq!(field("ip=1.2.3.4 ipv6=::1", "ip"), Some("1.2.3.4"));
    }

    #[test]
    fn a_missing_socket_is_try_again() {
        let e = match Client::connect(Path::new("/nonexistent/eniipd.sock")) {
            Err(e) => e,
            Ok(_) => panic!("connected"),
        };
        assert_eq!(e.code, code::TRY_AGAIN);
        assert!(went_away(&e), "{e}");
    }
}
