//! The client side of the line protocol: one connection to eniipd's
//! socket, requests written whole, each reply read through its final line
//! ([`super::reply`] frames and parses it), every wait with a deadline.
//! eniipctl, eniip-cni, the tests and the benches all speak through it.
//!
//! Deadlines: connecting has one (a listener whose backlog stays full does
//! not hold a client forever), and so has every request, writing and
//! reading together. eniipd answers `ping` from its listener at once, even
//! while an allocation waits on the cloud, so [`Client::connect_answering`]
//! checks that a daemon is there within [`PING_TIMEOUT`]. [`Client::ask`]
//! gives an `alloc` [`ALLOC_DEADLINE`] (a cold pool waits for the cloud up
//! to eniipd's `alloc_timeout`, 60 s by default) and, while it waits in
//! silence, probes eniipd with one `ping` on a second connection after
//! [`WATCH_EVERY`], then at growing intervals up to [`WATCH_MOST`] (not a
//! connection a second), each bounded by what is left of the caller's
//! deadline, so a slow allocation goes on and a hung eniipd fails it
//! within seconds. Any answer is a live eniipd: `ERR busy` (every
//! connection slot serving) says it is alive and busy, and never fails
//! the wait. Any other request gets [`REPLY_DEADLINE`]. Callers with
//! deadlines of their own (eniipctl's `--timeout`) pass them.
//!
//! Invariant: a request either gets its own reply or an error, never the
//! reply of another: a connection whose reply did not come whole in time
//! is shut, so nothing late is read as an answer to the next request.

use std::fmt;
use std::io::{self, BufRead, BufReader, ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::reply::{ErrReply, Framer, Reply};
use super::MAX_LINE;

/// How long eniipd may take to answer `ping`, connecting included.
pub const PING_TIMEOUT: Duration = Duration::from_secs(2);
/// How long an `alloc` may take in all.
pub const ALLOC_DEADLINE: Duration = Duration::from_secs(90);
/// How long any other answer may take.
pub const REPLY_DEADLINE: Duration = Duration::from_secs(10);
/// How long a waiting `alloc` waits in silence before its first check
/// that eniipd still answers; each next wait is twice the last.
pub const WATCH_EVERY: Duration = Duration::from_secs(1);
/// The longest wait between two such checks.
pub const WATCH_MOST: Duration = Duration::from_secs(4);
/// How often a connect answered `ERR busy` (every slot serving) is tried
/// again by [`Client::connect_answering_within`].
const BUSY_RETRY: Duration = Duration::from_millis(200);
/// Longest reply line read (a data line of `metrics` is under 1 KiB).
const MAX_REPLY_LINE: usize = 1 << 20;
/// How often a connect whose listener's backlog is full is tried again.
const CONNECT_RETRY: Duration = Duration::from_millis(10);

/// The first word of a request line (`alloc`, `keep`, ...), for errors.
pub fn verb(line: &str) -> &str {
    line.split(' ').find(|w| !w.is_empty()).unwrap_or("")
}

/// The `keep` lines that carry `ids`, each within the protocol's line
/// limit ([`MAX_LINE`]); none for no ids.
pub fn keep_lines(ids: &[String]) -> Vec<String> {
    const KEEP: &str = "keep";
    let mut lines = Vec::new();
    let mut cur = String::from(KEEP);
    for id in ids {
        if cur.len() > KEEP.len() && cur.len() + 1 + id.len() > MAX_LINE {
            lines.push(std::mem::replace(&mut cur, String::from(KEEP)));
        }
        cur.push(' ');
        cur.push_str(id);
    }
    if cur.len() > KEEP.len() {
        lines.push(cur);
    }
    lines
}

/// When a request must be answered by, and the limit it was given (for
/// the error that says it was not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    at: Instant,
    limit: Duration,
}

impl Deadline {
    /// `limit` from now.
    pub fn after(limit: Duration) -> Deadline {
        Deadline {
            at: Instant::now() + limit,
            limit,
        }
    }

    /// What is left of it (zero once past).
    pub fn left(&self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }

    /// The limit it was made with.
    pub fn limit(&self) -> Duration {
        self.limit
    }
}

/// Why a request got no reply.
#[derive(Debug)]
pub enum ClientError {
    /// The socket could not be connected (its kind says why: not there,
    /// not allowed, nobody listening, the backlog full past the deadline).
    Connect {
        /// The socket.
        socket: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// Connected, and no `pong` came in time (a stopped or hung eniipd).
    NotAnswering {
        /// The socket.
        socket: PathBuf,
        /// How long it was given.
        limit: Duration,
    },
    /// eniipd answered the `ping` of [`Client::connect_answering`] with
    /// `ERR`.
    Refused(ErrReply),
    /// The request could not be written.
    Send {
        /// The request's verb.
        verb: String,
        /// The cause.
        source: io::Error,
    },
    /// Reading the reply failed.
    Receive {
        /// The request's verb.
        verb: String,
        /// The cause.
        source: io::Error,
    },
    /// The connection ended before the final line.
    Closed {
        /// The request's verb.
        verb: String,
    },
    /// The reply has too many lines, or a line too long, to be a reply.
    TooLong {
        /// The request's verb.
        verb: String,
    },
    /// No complete reply within the deadline.
    Late {
        /// The request's verb.
        verb: String,
        /// The deadline's limit.
        limit: Duration,
    },
}

impl ClientError {
    /// The kind of the I/O error behind a failed connect, write or read.
    pub fn io_kind(&self) -> Option<ErrorKind> {
        match self {
            ClientError::Connect { source, .. }
            | ClientError::Send { source, .. }
            | ClientError::Receive { source, .. } => Some(source.kind()),
            _ => None,
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Connect { socket, .. } => {
                write!(f, "cannot connect to {}", socket.display())
            }
            ClientError::NotAnswering { socket, limit } => write!(
                f,
                "no pong within {limit:?} at {} (is eniipd stopped or hung?)",
                socket.display()
            ),
            ClientError::Refused(e) => write!(f, "ping answered ERR {e}"),
            ClientError::Send { verb, .. } => write!(f, "cannot send {verb}"),
            ClientError::Receive { verb, .. } => write!(f, "reading the reply to {verb}"),
            ClientError::Closed { verb } => write!(
                f,
                "the daemon closed the connection before the final line of {verb}"
            ),
            ClientError::TooLong { verb } => write!(f, "the reply to {verb} is too long"),
            ClientError::Late { verb, limit } => {
                write!(f, "no complete reply to {verb} within {limit:?}")
            }
        }
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClientError::Connect { source, .. }
            | ClientError::Send { source, .. }
            | ClientError::Receive { source, .. } => Some(source),
            ClientError::Refused(e) => Some(e),
            _ => None,
        }
    }
}

fn timed_out(e: &io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

/// Connects to `socket` by `deadline`: a listener whose backlog is full
/// is tried again until then.
fn connect_by(socket: &Path, deadline: Instant) -> io::Result<UnixStream> {
    use nix::errno::Errno;
    use nix::sys::socket::{connect, socket as new_socket, AddressFamily, SockFlag, SockType};
    let fd = new_socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    let addr = nix::sys::socket::UnixAddr::new(socket)?;
    let mut outcome = Err(Errno::EAGAIN);
    eniip_util::thread::poll_until(deadline, CONNECT_RETRY, || {
        outcome = loop {
            match connect(fd.as_raw_fd(), &addr) {
                Err(Errno::EINTR) => continue,
                r => break r,
            }
        };
        outcome != Err(Errno::EAGAIN)
    });
    match outcome {
        Ok(()) => {
            let s = UnixStream::from(fd);
            s.set_nonblocking(false)?;
            Ok(s)
        }
        Err(Errno::EAGAIN) => Err(io::Error::new(
            ErrorKind::TimedOut,
            "its listen backlog stayed full: the daemon is not accepting",
        )),
        Err(e) => Err(e.into()),
    }
}

/// One connection to eniipd.
#[derive(Debug)]
pub struct Client {
    socket: PathBuf,
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    /// A line read in parts across timed-out reads.
    partial: Vec<u8>,
}

impl Client {
    /// Connects to `socket` within `limit`; nothing is sent.
    pub fn connect(socket: &Path, limit: Duration) -> Result<Client, ClientError> {
        let failed = |source| ClientError::Connect {
            socket: socket.to_path_buf(),
            source,
        };
        let s = connect_by(socket, Instant::now() + limit).map_err(failed)?;
        let r = s.try_clone().map_err(failed)?;
        Ok(Client {
            socket: socket.to_path_buf(),
            writer: s,
            reader: BufReader::new(r),
            partial: Vec::new(),
        })
    }

    /// Connects and checks that eniipd answers `ping` within
    /// [`PING_TIMEOUT`], connecting included.
    pub fn connect_answering(socket: &Path) -> Result<Client, ClientError> {
        Client::connect_answering_then(socket, &[])
    }

    /// [`Client::connect_answering`] with the requests `then` written in
    /// the same write as the `ping`, behind it: one round trip where
    /// there were `1 + then.len()`. Their replies come next, in order
    /// ([`Client::read_reply`]). A `ping` refused (`ERR busy`: every slot
    /// serving, or eniipd starting) was answered without a request of
    /// the connection served, so none of `then` was done. A `ping` not
    /// answered in time (`NotAnswering`) leaves `then` in doubt: a slow
    /// eniipd still does them once it reads them.
    pub fn connect_answering_then(socket: &Path, then: &[&str]) -> Result<Client, ClientError> {
        let deadline = Deadline::after(PING_TIMEOUT);
        let mut c = Client::connect(socket, PING_TIMEOUT)?;
        let not_answering = || ClientError::NotAnswering {
            socket: socket.to_path_buf(),
            limit: PING_TIMEOUT,
        };
        let lines: Vec<&str> = std::iter::once("ping")
            .chain(then.iter().copied())
            .collect();
        let r = match c.send(&lines, &deadline) {
            Ok(()) => c.read_reply("ping", &deadline, false),
            // A refusal written and the connection closed before the
            // requests arrived: the refusal is still there to be read.
            Err(e @ ClientError::Send { .. }) => match c.read_reply("ping", &deadline, false) {
                Ok(r) if !r.is_ok() => Ok(r),
                _ => Err(e),
            },
            Err(e) => Err(e),
        }
        .map_err(|e| match e {
            ClientError::Late { .. } => not_answering(),
            e => e,
        })?;
        match r.outcome() {
            Ok(_) => Ok(c),
            Err(e) => Err(ClientError::Refused(e.clone())),
        }
    }

    /// [`Client::connect_answering`], tried again for up to `wait` while
    /// eniipd answers `ERR busy` because every connection slot is serving
    /// (it is there, and a slot frees as soon as a request is answered).
    /// Any other outcome is returned at once.
    pub fn connect_answering_within(socket: &Path, wait: Duration) -> Result<Client, ClientError> {
        Client::connect_answering_within_then(socket, wait, &[])
    }

    /// [`Client::connect_answering_within`] with `then` sent behind each
    /// `ping` as [`Client::connect_answering_then`] sends it (a refused
    /// `ping` did none of it, so it is sent again with the next).
    pub fn connect_answering_within_then(
        socket: &Path,
        wait: Duration,
        then: &[&str],
    ) -> Result<Client, ClientError> {
        let end = Instant::now() + wait;
        loop {
            match Client::connect_answering_then(socket, then) {
                Err(ClientError::Refused(e))
                    if e.code() == "busy" && !e.is_starting() && Instant::now() < end =>
                {
                    std::thread::sleep(
                        end.saturating_duration_since(Instant::now())
                            .min(BUSY_RETRY),
                    );
                }
                r => return r,
            }
        }
    }

    /// Whether eniipd answers at `socket` within `limit` (at most
    /// [`PING_TIMEOUT`]): any answer, `ERR busy` included, is a live
    /// eniipd.
    fn probe(socket: &Path, limit: Duration) -> Result<(), ClientError> {
        let limit = limit.min(PING_TIMEOUT);
        let deadline = Deadline::after(limit);
        let mut c = Client::connect(socket, limit)?;
        match c.exchange("ping", &deadline, false) {
            Ok(_) => Ok(()),
            Err(ClientError::Late { .. }) => Err(ClientError::NotAnswering {
                socket: socket.to_path_buf(),
                limit,
            }),
            Err(e) => Err(e),
        }
    }

    /// One request and its reply, with the deadline of its verb (see the
    /// module doc).
    pub fn ask(&mut self, line: &str) -> Result<Reply, ClientError> {
        if verb(line).eq_ignore_ascii_case("alloc") {
            self.exchange(line, &Deadline::after(ALLOC_DEADLINE), true)
        } else {
            self.exchange(line, &Deadline::after(REPLY_DEADLINE), false)
        }
    }

    /// One request and its reply within `limit`.
    pub fn ask_within(&mut self, line: &str, limit: Duration) -> Result<Reply, ClientError> {
        self.exchange(line, &Deadline::after(limit), false)
    }

    /// An `alloc` and its reply within `limit` (an ADD's budget may leave
    /// it less than [`ALLOC_DEADLINE`]), eniipd watched as [`Client::ask`]
    /// watches it.
    pub fn alloc_within(&mut self, line: &str, limit: Duration) -> Result<Reply, ClientError> {
        self.exchange(line, &Deadline::after(limit), true)
    }

    /// A `gc` of the allocations under `owner_prefix`, keeping `keep`
    /// (owners or sandboxes): the `keep` lines they need, then the `gc`.
    /// The reply of the `gc`, or of the first `keep` that was refused.
    pub fn gc(&mut self, owner_prefix: &str, keep: &[String]) -> Result<Reply, ClientError> {
        for line in keep_lines(keep) {
            let r = self.ask(&line)?;
            if !r.is_ok() {
                return Ok(r);
            }
        }
        self.ask(&format!("gc owner-prefix={owner_prefix}"))
    }

    fn exchange(
        &mut self,
        line: &str,
        deadline: &Deadline,
        watch: bool,
    ) -> Result<Reply, ClientError> {
        self.send(&[line], deadline)?;
        self.read_reply(verb(line), deadline, watch)
    }

    /// Writes request lines without reading (to pipeline them): each
    /// gets its reply, in order, from [`Client::read_reply`].
    pub fn send<S: AsRef<str>>(
        &mut self,
        lines: &[S],
        deadline: &Deadline,
    ) -> Result<(), ClientError> {
        let first = lines.first().map_or("", |l| verb(l.as_ref())).to_string();
        let text: String = lines
            .iter()
            .flat_map(|l| [l.as_ref(), "\n"])
            .collect::<String>();
        let left = deadline.left();
        if left.is_zero() {
            return Err(self.late(&first, deadline));
        }
        let sent = self
            .writer
            .set_write_timeout(Some(left))
            .and_then(|()| self.writer.write_all(text.as_bytes()));
        match sent {
            Ok(()) => Ok(()),
            Err(e) if timed_out(&e) => Err(self.late(&first, deadline)),
            Err(source) => Err(ClientError::Send {
                verb: first,
                source,
            }),
        }
    }

    /// Says nothing more will be sent (eniipd answers what it got, then
    /// sees the end).
    pub fn finish_sending(&self) -> Result<(), ClientError> {
        self.writer
            .shutdown(std::net::Shutdown::Write)
            .map_err(|source| ClientError::Send {
                verb: "the end of the requests".into(),
                source,
            })
    }

    /// Reads the next reply by `deadline`; `watch`: while waiting, check
    /// on a second connection that eniipd still answers `ping` (see the
    /// module doc for when).
    pub fn read_reply(
        &mut self,
        verb: &str,
        deadline: &Deadline,
        watch: bool,
    ) -> Result<Reply, ClientError> {
        let mut framer = Framer::default();
        let mut silence = WATCH_EVERY;
        loop {
            let line = self.read_line(verb, deadline, watch.then_some(&mut silence))?;
            match framer.push(&line) {
                Ok(Some(reply)) => return Ok(reply),
                Ok(None) => {}
                Err(_) => return Err(self.abandon(ClientError::TooLong { verb: verb.into() })),
            }
        }
    }

    /// One line by `deadline`; with `watch`, eniipd is probed after each
    /// `watch` of silence, which then doubles up to [`WATCH_MOST`].
    fn read_line(
        &mut self,
        verb: &str,
        deadline: &Deadline,
        mut watch: Option<&mut Duration>,
    ) -> Result<String, ClientError> {
        loop {
            let left = deadline.left();
            if left.is_zero() {
                return Err(self.late(verb, deadline));
            }
            let wait = match &watch {
                Some(silence) => left.min(**silence),
                None => left,
            };
            if let Err(source) = self.reader.get_ref().set_read_timeout(Some(wait)) {
                return Err(self.abandon(ClientError::Receive {
                    verb: verb.into(),
                    source,
                }));
            }
            let room = (MAX_REPLY_LINE - self.partial.len()) as u64;
            match (&mut self.reader)
                .take(room)
                .read_until(b'\n', &mut self.partial)
            {
                Ok(_) if self.partial.ends_with(b"\n") => {
                    let line = String::from_utf8_lossy(&self.partial).into_owned();
                    self.partial.clear();
                    return Ok(line);
                }
                Ok(_) if self.partial.len() >= MAX_REPLY_LINE => {
                    return Err(self.abandon(ClientError::TooLong { verb: verb.into() }))
                }
                // The end, maybe after a last line with no terminator.
                Ok(_) => return Err(self.abandon(ClientError::Closed { verb: verb.into() })),
                Err(e) if timed_out(&e) => {
                    if let Some(silence) = watch.as_deref_mut() {
                        // Slow or hung? A hung eniipd fails the probe; a
                        // busy one answers it.
                        let left = deadline.left();
                        if left.is_zero() {
                            return Err(self.late(verb, deadline));
                        }
                        if let Err(e) = Client::probe(&self.socket, left) {
                            if deadline.left().is_zero() {
                                return Err(self.late(verb, deadline));
                            }
                            return Err(self.abandon(e));
                        }
                        *silence = (*silence * 2).min(WATCH_MOST);
                    }
                }
                Err(source) => {
                    return Err(self.abandon(ClientError::Receive {
                        verb: verb.into(),
                        source,
                    }))
                }
            }
        }
    }

    fn late(&mut self, verb: &str, deadline: &Deadline) -> ClientError {
        self.abandon(ClientError::Late {
            verb: verb.into(),
            limit: deadline.limit(),
        })
    }

    /// Shuts the connection (see the module doc's invariant) and gives
    /// back `e`.
    fn abandon(&mut self, e: ClientError) -> ClientError {
        let _ = self.writer.shutdown(std::net::Shutdown::Both);
        self.partial.clear();
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    fn dir(what: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "eniipd-client-{what}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// A daemon stand-in that answers the lines of one connection with
    /// `answer`, written raw, until the client ends it or `answer` says
    /// `None` (then it closes); the lines it was sent.
    fn serve_one(
        listener: UnixListener,
        answer: impl Fn(&str) -> Option<String> + Send + 'static,
    ) -> std::thread::JoinHandle<Vec<String>> {
        let serve = move || {
            let (s, _) = listener.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut w = s.try_clone().unwrap();
            let mut seen = Vec::new();
            for line in BufReader::new(s).lines() {
                let Ok(line) = line else { break };
                let Some(a) = answer(&line) else { break };
                let _ = w.write_all(a.as_bytes());
                seen.push(line);
            }
            seen
        };
        std::thread::Builder::new()
            .name("client-test-daemon".into())
            .spawn(serve)
            .unwrap()
    }

    /// A stand-in that answers nothing before it holds `lines` whole
    /// request lines of one connection, then writes `answer`; what it
    /// was sent.
    fn answer_after_lines(
        listener: UnixListener,
        lines: usize,
        answer: &'static str,
    ) -> std::thread::JoinHandle<String> {
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let (mut got, mut buf) = (Vec::new(), [0u8; 4096]);
            while got.iter().filter(|&&b| b == b'\n').count() < lines {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            let _ = s.write_all(answer.as_bytes());
            String::from_utf8(got).unwrap()
        })
    }

    #[test]
    fn requests_behind_the_ping_go_without_waiting_for_its_answer() {
        // The stand-in answers the ping only once the two requests behind
        // it arrived: a client that waited for the pong before sending
        // them would get no answer (NotAnswering) instead.
        let d = dir("then");
        let path = d.join("d.sock");
        let daemon = answer_after_lines(
            UnixListener::bind(&path).unwrap(),
            3,
            "OK pong\nERR not-found\nOK ip=10.0.0.5 eni=eni-1\n",
        );
        let mut c = Client::connect_answering_then(&path, &["show a/b", "alloc a/b"]).unwrap();
        let dl = Deadline::after(Duration::from_secs(5));
        let show = c.read_reply("show", &dl, false).unwrap();
        assert_eq!(show.outcome().unwrap_err().code(), "not-found");
        let alloc = c.read_reply("alloc", &dl, true).unwrap();
        assert_eq!(alloc.outcome(), Ok("ip=10.0.0.5 eni=eni-1"));
        assert_eq!(daemon.join().unwrap(), "ping\nshow a/b\nalloc a/b\n");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_ping_refused_busy_is_tried_again_with_what_goes_behind_it() {
        // The first connection is refused as eniipd's listener refuses
        // one when every slot serves (nothing read, `ERR busy`, closed);
        // the second is served, and carries the request again.
        let d = dir("then-busy");
        let path = d.join("d.sock");
        let l = UnixListener::bind(&path).unwrap();
        let l2 = l.try_clone().unwrap();
        let daemon = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            s.write_all(b"ERR busy too many connections\n").unwrap();
            drop(s);
            answer_after_lines(l2, 2, "OK pong\nOK ip=10.0.0.6\n")
                .join()
                .unwrap()
        });
        let mut c =
            Client::connect_answering_within_then(&path, Duration::from_secs(5), &["alloc a/b"])
                .unwrap();
        let dl = Deadline::after(Duration::from_secs(5));
        let alloc = c.read_reply("alloc", &dl, false).unwrap();
        assert_eq!(alloc.outcome(), Ok("ip=10.0.0.6"));
        assert_eq!(daemon.join().unwrap(), "ping\nalloc a/b\n");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn keep_lines_stay_within_a_protocol_line() {
        let ids: Vec<String> = (0..2000).map(|i| format!("{i:064}")).collect();
        let lines = keep_lines(&ids);
        assert!(lines.len() > 1);
        let mut seen = Vec::new();
        for l in &lines {
            assert!(l.len() <= MAX_LINE, "{}", l.len());
            match crate::protocol::parse_request(l.as_bytes()).unwrap() {
                crate::protocol::ClientRequest::Keep(ids) => seen.extend(ids),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(seen, ids);
        // The limit is the protocol's, not below it: a line is full.
        assert!(lines[0].len() > MAX_LINE - 66, "{}", lines[0].len());
        assert!(keep_lines(&[]).is_empty());
    }

    #[test]
    fn a_connect_that_fails_says_why_in_its_kind() {
        let d = dir("connect");
        let e = Client::connect(&d.join("none.sock"), Duration::from_secs(1)).unwrap_err();
        assert_eq!(e.io_kind(), Some(ErrorKind::NotFound), "{e}");
        assert!(e.to_string().contains("none.sock"), "{e}");
        // A socket file nobody listens on.
        let path = d.join("stale.sock");
        drop(UnixListener::bind(&path).unwrap());
        let e = Client::connect(&path, Duration::from_secs(1)).unwrap_err();
        assert_eq!(e.io_kind(), Some(ErrorKind::ConnectionRefused), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_listener_that_never_accepts_fails_the_connect_by_its_deadline() {
        use nix::sys::socket::{bind, listen, socket, AddressFamily, Backlog, SockFlag, SockType};
        let d = dir("backlog");
        let path = d.join("full.sock");
        let fd = socket(
            AddressFamily::Unix,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .unwrap();
        bind(
            fd.as_raw_fd(),
            &nix::sys::socket::UnixAddr::new(&path).unwrap(),
        )
        .unwrap();
        listen(&fd, Backlog::new(0).unwrap()).unwrap();
        // The backlog takes one; the next waits and gives up.
        let mut held = Vec::new();
        let e = loop {
            match Client::connect(&path, Duration::from_millis(200)) {
                Ok(c) if held.len() < 8 => held.push(c),
                Ok(_) => panic!("a backlog of 0 took {} connections", held.len() + 1),
                Err(e) => break e,
            }
        };
        assert_eq!(e.io_kind(), Some(ErrorKind::TimedOut), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn replies_are_read_whole_in_order_and_a_late_one_ends_the_connection() {
        let d = dir("replies");
        let path = d.join("d.sock");
        let daemon = serve_one(UnixListener::bind(&path).unwrap(), |line| {
            Some(match verb(line) {
                "list" => "10.0.0.1 idle - eni-1\n10.0.0.2 inuse a/b eni-1\nOK 2\n".into(),
                "keep" => "OK\n".into(),
                "gc" => "10.0.0.2 a/b - veth=enip1\nOK released=1\n".into(),
                // Half a line, then nothing: a hung daemon.
                "audit" => "10.0.0.9 missing".into(),
                _ => "ERR unknown-command\n".into(),
            })
        });
        let mut c = Client::connect(&path, Duration::from_secs(5)).unwrap();
        let r = c.ask("list").unwrap();
        assert_eq!(
            r.data(),
            ["10.0.0.1 idle - eni-1", "10.0.0.2 inuse a/b eni-1"]
        );
        assert_eq!(r.outcome(), Ok("2"));
        let ids: Vec<String> = (0..200).map(|i| format!("a/{i:060}")).collect();
        let r = c.gc("a/", &ids).unwrap();
        assert_eq!(r.data(), ["10.0.0.2 a/b - veth=enip1"]);
        let r = c.ask("bogus").unwrap();
        assert_eq!(r.outcome().unwrap_err().code(), "unknown-command");
        // Pipelined: both sent, both answered in order.
        let d2 = Deadline::after(Duration::from_secs(5));
        c.send(&["keep x", "list"], &d2).unwrap();
        assert_eq!(c.read_reply("keep", &d2, false).unwrap().final_line(), "OK");
        assert_eq!(c.read_reply("list", &d2, false).unwrap().data().len(), 2);
        let e = c
            .ask_within("audit", Duration::from_millis(300))
            .unwrap_err();
        assert!(
            matches!(e, ClientError::Late { ref verb, .. } if verb == "audit"),
            "{e}"
        );
        // The late reply's rest is never taken for the next one's.
        assert!(c.ask("list").is_err());
        drop(c);
        let seen = daemon.join().unwrap();
        let keeps: Vec<&String> = seen.iter().filter(|l| l.starts_with("keep ")).collect();
        assert_eq!(keeps.len(), keep_lines(&ids).len() + 1);
        assert_eq!(
            keeps[..keeps.len() - 1],
            keep_lines(&ids).iter().collect::<Vec<_>>()[..]
        );
        let verbs: Vec<&str> = seen.iter().map(|l| verb(l)).collect();
        assert_eq!(
            verbs,
            ["list", "keep", "keep", "keep", "keep", "gc", "bogus", "keep", "list", "audit"]
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_reply_cut_short_is_closed_not_an_answer() {
        let d = dir("closed");
        let path = d.join("d.sock");
        // `list` is answered up to half its final line, `quit` by closing.
        let daemon = serve_one(UnixListener::bind(&path).unwrap(), |line| {
            (verb(line) == "list").then(|| "10.0.0.1 idle - eni-1\nOK".to_string())
        });
        let mut c = Client::connect(&path, Duration::from_secs(5)).unwrap();
        let deadline = Deadline::after(Duration::from_secs(5));
        c.send(&["list", "quit"], &deadline).unwrap();
        let e = c.read_reply("list", &deadline, false).unwrap_err();
        assert!(matches!(e, ClientError::Closed { .. }), "{e}");
        assert_eq!(daemon.join().unwrap(), ["list"]);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
