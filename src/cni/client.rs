//! eniipd's line protocol from the plugin's side: the protocol's client
//! ([`crate::protocol::client`], which keeps the deadlines) with its
//! failures as CNI errors. One connection per invocation, checked with a
//! `ping` first.
//!
//! An eniipd that cannot be reached, that does not answer `ping` within
//! [`PING_TIMEOUT`](crate::protocol::client::PING_TIMEOUT) (stopped, hung), that misses a deadline, or that
//! answers `busy`, `shutting-down`, `timeout` or `cloud`, is CNI error 11
//! ("try again later"): the runtime retries and nothing is lost. Any
//! other `ERR` is error 100, in words a user can act on ([`wording`]).

use std::path::Path;

use crate::core::ErrCode;
use crate::protocol::client::{self as protocol, verb, ClientError};
pub(crate) use crate::protocol::client::{ALLOC_DEADLINE, REPLY_DEADLINE};
use crate::protocol::reply::{ErrReply, Reply};

use super::spec::{code, CniError};
use super::wording;

/// One connection to eniipd.
#[derive(Debug)]
pub(crate) struct Client(protocol::Client);

impl Client {
    /// Connects to eniipd's socket and checks that it answers `ping`
    /// within [`crate::protocol::client::PING_TIMEOUT`].
    pub(crate) fn connect(socket: &Path) -> Result<Client, CniError> {
        protocol::Client::connect_answering(socket)
            .map(Client)
            .map_err(cni_error)
    }

    /// Sends one request: its reply for `OK`; a CNI error for `ERR`, a
    /// broken connection or a missed deadline (see the module doc).
    pub(crate) fn ask(&mut self, line: &str) -> Result<Reply, CniError> {
        let r = self.0.ask(line).map_err(cni_error)?;
        ok(verb(line), r)
    }

    /// [`Client::ask`] where `ERR not-found` is an answer: `None`.
    pub(crate) fn ask_found(&mut self, line: &str) -> Result<Option<Reply>, CniError> {
        let r = self.0.ask(line).map_err(cni_error)?;
        if r.outcome()
            .is_err_and(|e| e.known() == Some(ErrCode::NotFound))
        {
            return Ok(None);
        }
        ok(verb(line), r).map(Some)
    }

    /// A `gc` of the allocations under `owner_prefix`, keeping `keep`.
    pub(crate) fn gc(&mut self, owner_prefix: &str, keep: &[String]) -> Result<Reply, CniError> {
        let r = self.0.gc(owner_prefix, keep).map_err(cni_error)?;
        ok("gc", r)
    }
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
                    "eniipd is down: it is not reachable at {}",
                    socket.display()
                ),
            )
            .details(source.to_string())
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
                .details(details);
        }
    };
    CniError::new(code::TRY_AGAIN, msg)
}

/// An `ERR` reply to `verb` as a CNI error; eniipd's own words in the
/// details.
fn daemon_error(verb: &str, err: &ErrReply) -> CniError {
    let cni = match err.code() {
        "busy" | "shutting-down" | "timeout" | "cloud" => code::TRY_AGAIN,
        _ => code::DAEMON,
    };
    CniError::new(cni, wording::explain(verb, err)).details(err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::test_support::{fake_eniipd, test_dir, ALLOC_V6};
    use crate::protocol::client::PING_TIMEOUT;

    fn err(line: &str) -> ErrReply {
        ErrReply::parse(line).unwrap()
    }

    #[test]
    fn errors_map_to_cni_codes() {
        let e = daemon_error("alloc", &err("ERR shutting-down the daemon is stopping"));
        assert_eq!(e.code, code::TRY_AGAIN);
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
