//! eniipd's line protocol from the plugin's side: the protocol's client
//! ([`eniip_protocol::protocol::client`], which keeps the deadlines) with its
//! failures as CNI errors. One connection per invocation, checked with a
//! `ping` first; ADD writes its requests behind that `ping`, in the same
//! write, so its whole conversation is one round trip.
//!
//! An eniipd that cannot be asked (away: its socket missing or refusing,
//! stopped, restarting, replaced by a rollout; or not answering `ping`
//! within [`PING_TIMEOUT`](eniip_protocol::protocol::client::PING_TIMEOUT), hung;
//! or going: the connection broke, it answered `shutting-down`) is marked
//! so ([`went_away`]): ADD waits for it, up to the conflist's `daemonWait`
//! ([`Client::connect_waiting_then`]), DEL queues its release. Past that, and
//! when eniipd misses a deadline or answers `busy`, `timeout` or `cloud`,
//! it is CNI error 11 ("try again later"): the runtime retries and nothing
//! is lost. Any other `ERR` is error 100, in words a user can act on
//! ([`wording`]).

use std::path::Path;
use std::time::{Duration, Instant};

use eniip_protocol::core::ErrCode;
use eniip_protocol::protocol::client::{self as protocol, verb, ClientError};
pub(crate) use eniip_protocol::protocol::client::{ALLOC_DEADLINE, REPLY_DEADLINE};
use eniip_protocol::protocol::reply::{ErrReply, Reply};

use super::spec::{code, CniError};
use super::wording;

/// How long an ADD may take in all, waiting for an eniipd that is away
/// included: kubelet's runtime request timeout is 2 minutes, past which
/// it gives up on RunPodSandbox (and containerd kills the plugin), so ADD
/// answers, with its reason, before that.
pub(crate) const ADD_BUDGET: Duration = Duration::from_secs(110);
/// How often an eniipd that is away is looked for.
pub(crate) const AWAY_POLL: Duration = Duration::from_millis(200);

/// Whether `e` says eniipd cannot be asked now (away, or going; see the
/// module doc). An idempotent request (`alloc` for a sandbox, `release`
/// with its sandbox) may be sent again once it is back, or (a release)
/// queued for it.
pub(crate) fn went_away(e: &CniError) -> bool {
    e.away
}

/// One connection to eniipd.
#[derive(Debug)]
pub(crate) struct Client(protocol::Client);

impl Client {
    /// Connects to eniipd's socket and checks that it answers `ping`
    /// within [`eniip_protocol::protocol::client::PING_TIMEOUT`].
    pub(crate) fn connect(socket: &Path) -> Result<Client, CniError> {
        protocol::Client::connect_answering(socket)
            .map(Client)
            .map_err(cni_error)
    }

    /// [`Client::connect`], waiting up to `wait` for an eniipd that
    /// cannot be asked ([`went_away`]: not listening, not answering), with
    /// the requests `then` sent behind each `ping`, in its write
    /// ([`protocol::Client::connect_answering_then`]): their replies are
    /// read next ([`Client::read_found`], [`Client::read_alloc`]). An
    /// eniipd that answers `ERR busy` (every connection slot serving) is
    /// there and did none of them: it is asked again within the same
    /// `wait`. A `ping` not answered in time leaves what was sent behind
    /// it in doubt (eniipd may still do it): only idempotent requests go
    /// there.
    pub(crate) fn connect_waiting_then(
        socket: &Path,
        wait: Duration,
        then: &[&str],
    ) -> Result<Client, CniError> {
        let end = Instant::now() + wait;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match protocol::Client::connect_answering_within_then(socket, left, then)
                .map(Client)
                .map_err(cni_error)
            {
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

    /// The reply of an `alloc` already sent, within `limit` (never more
    /// than [`ALLOC_DEADLINE`]), eniipd watched as [`Client::ask`] does.
    pub(crate) fn read_alloc(&mut self, limit: Duration) -> Result<Reply, CniError> {
        let deadline = protocol::Deadline::after(limit.min(ALLOC_DEADLINE));
        let r = self
            .0
            .read_reply("alloc", &deadline, true)
            .map_err(cni_error)?;
        ok("alloc", r)
    }

    /// The reply of a read-only request `verb` already sent; `ERR
    /// not-found` is an answer: `None`.
    pub(crate) fn read_found(&mut self, verb: &str) -> Result<Option<Reply>, CniError> {
        let deadline = protocol::Deadline::after(REPLY_DEADLINE);
        let r = self
            .0
            .read_reply(verb, &deadline, false)
            .map_err(cni_error)?;
        found(verb, r)
    }

    /// Sends one request: its reply for `OK`; a CNI error for `ERR`, a
    /// broken connection or a missed deadline (see the module doc).
    pub(crate) fn ask(&mut self, line: &str) -> Result<Reply, CniError> {
        let r = self.0.ask(line).map_err(cni_error)?;
        ok(verb(line), r)
    }

    /// A `gc` of the allocations under `owner_prefix`, keeping `keep`.
    pub(crate) fn gc(&mut self, owner_prefix: &str, keep: &[String]) -> Result<Reply, CniError> {
        let r = self.0.gc(owner_prefix, keep).map_err(cni_error)?;
        ok("gc", r)
    }
}

/// An `OK` reply as `Some`, `ERR not-found` as `None`, any other `ERR`
/// as a CNI error.
fn found(verb: &str, r: Reply) -> Result<Option<Reply>, CniError> {
    if r.outcome()
        .is_err_and(|e| e.known() == Some(ErrCode::NotFound))
    {
        return Ok(None);
    }
    ok(verb, r).map(Some)
}

/// An `OK` reply as it is, an `ERR` as a CNI error.
fn ok(verb: &str, r: Reply) -> Result<Reply, CniError> {
    match r.outcome() {
        Ok(_) => Ok(r),
        Err(e) => Err(daemon_error(verb, e)),
    }
}

/// A failure to get a reply (every one is "try again later").
fn cni_error(e: ClientError) -> CniError {
    let msg = match &e {
        ClientError::Connect { socket, source } => {
            return CniError::new(
                code::TRY_AGAIN,
                format!(
                    "eniipd is away: it is not reachable at {} (stopped, restarting, or being replaced)",
                    socket.display()
                ),
            )
            .details(source.to_string())
            .eniipd_away()
        }
        ClientError::NotAnswering { socket, limit } => format!(
            "eniipd is not answering: no pong within {limit:?} at {} (is it stopped or hung?)",
            socket.display()
        ),
        ClientError::Refused(err) => return daemon_error("ping", err),
        ClientError::Late { verb, limit } => {
            format!("eniipd gave no answer to {verb} within {limit:?}")
        }
        ClientError::Send { .. }
        | ClientError::Receive { .. }
        | ClientError::Closed { .. }
        | ClientError::TooLong { .. } => {
            let mut details = e.to_string();
            if let Some(source) = std::error::Error::source(&e) {
                details.push_str(&format!(": {source}"));
            }
            return CniError::new(code::TRY_AGAIN, "the connection to eniipd broke")
                .details(details)
                .eniipd_away();
        }
    };
    let away = matches!(e, ClientError::NotAnswering { .. });
    let e = CniError::new(code::TRY_AGAIN, msg);
    if away {
        e.eniipd_away()
    } else {
        e
    }
}

/// An `ERR` reply to `verb` as a CNI error; eniipd's own words in the
/// details.
fn daemon_error(verb: &str, err: &ErrReply) -> CniError {
    let cni = match err.code() {
        "busy" | "shutting-down" | "timeout" | "cloud" => code::TRY_AGAIN,
        _ => code::DAEMON,
    };
    let e = CniError::new(cni, wording::explain(verb, err)).details(err.to_string());
    // Stopping, or started by socket activation and not ready yet: either
    // way it is away for now, and ADD waits for it as for a missing one.
    if err.code() == "shutting-down" || err.is_starting() {
        e.eniipd_away()
    } else {
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{fake_eniipd, test_dir, ALLOC_V6};
    use eniip_protocol::protocol::client::PING_TIMEOUT;

    fn err(line: &str) -> ErrReply {
        ErrReply::parse(line).unwrap()
    }

    #[test]
    fn errors_map_to_cni_codes() {
        let e = daemon_error("alloc", &err("ERR shutting-down the daemon is stopping"));
        assert_eq!(e.code, code::TRY_AGAIN);
        assert!(went_away(&e));
        assert!(!went_away(&daemon_error("alloc", &err("ERR busy"))));
        let starting = format!(
            "ERR busy {} (for 6 s): not ready yet",
            eniip_protocol::protocol::STARTING
        );
        let e = daemon_error("ping", &err(&starting));
        assert_eq!(e.code, code::TRY_AGAIN);
        assert!(
            went_away(&e),
            "a socket-activated eniipd that is starting is away: {e}"
        );
        let e = daemon_error("alloc", &err("ERR cloud Throttling slow down"));
        assert_eq!(e.code, code::TRY_AGAIN);
        let e = daemon_error("alloc", &err("ERR exhausted no IP"));
        assert_eq!(e.code, code::DAEMON);
        assert!(e.msg.contains("exhausted"), "{e}");
        assert_eq!(e.details, "exhausted no IP");
        // A code a later eniipd adds is eniipd's refusal, not a crash.
        let e = daemon_error("alloc", &err("ERR quota-frozen until noon"));
        assert_eq!(e.code, code::DAEMON);
        assert!(e.msg.contains("quota-frozen: until noon"), "{e}");
    }

    #[test]
    fn a_missing_socket_is_try_again() {
        let e = Client::connect(Path::new("/nonexistent/eniipd.sock")).unwrap_err();
        assert_eq!(e.code, code::TRY_AGAIN);
        assert!(
            e.msg.contains("not reachable at /nonexistent/eniipd.sock"),
            "{e}"
        );
        assert!(went_away(&e), "{e}");
    }

    #[test]
    fn a_hung_eniipd_fails_within_seconds_and_a_slow_alloc_does_not() {
        // Accepts (the kernel does, for a stopped process too) and never
        // answers.
        let dir = test_dir("hung");
        let path = dir.join("eniipd.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let t = std::time::Instant::now();
        let err = Client::connect(&path).unwrap_err();
        assert_eq!(err.code, code::TRY_AGAIN, "{err}");
        assert!(err.msg.contains("not answering"), "{err}");
        assert!(went_away(&err), "{err}");
        assert!(t.elapsed() < PING_TIMEOUT * 3, "{:?}", t.elapsed());
        std::fs::remove_dir_all(&dir).unwrap();

        // Answers ping at once and the alloc after 2.5 s, beyond one watch
        // period: the alloc waits for it.
        let (socket, server) = fake_eniipd(&[("alloc", "sleep 2500"), ("alloc", ALLOC_V6)]);
        let mut c = Client::connect(&socket).unwrap();
        let a = c.ask("alloc eni/x").unwrap();
        assert!(a.text().starts_with("ip=192.168.0.9"), "{a:?}");
        drop(c);
        assert_eq!(server.join().unwrap(), vec!["alloc eni/x".to_string()]);
    }
}
