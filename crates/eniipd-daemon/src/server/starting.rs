//! Answers clients while the daemon starts, on a socket systemd passed.
//!
//! With socket activation the socket exists, and the kernel queues
//! connections on it, before eniipd is ready; without an answer a client
//! waits in silence for as long as start-up takes (minutes when the cloud
//! cannot be reached). A start that ends within [`GRACE`] serves those
//! connections as they are (they wait in the queue, as before); past it,
//! until the pool is restored, every connection is answered
//! `ERR busy ...` at once, saying the daemon is starting, and closed. `ping` never answers `OK` here, so "a `ping` that answers `OK`
//! means ready" (SPEC.md section 2) holds; a client that retries on
//! `busy` (eniip-cni does: CNI error 11) is served once eniipd is ready.
//!
//! Invariants: one thread, named, that ends when [`Starting::ready`] asks
//! (the listener then goes to the real server, with every connection not
//! yet accepted still queued on it) or when the process exits; every wait
//! has a deadline, so a client that sends nothing, or does not read,
//! holds it up for at most [`CLIENT_WAIT`].

use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use log::debug;

use eniip_protocol::protocol::MAX_LINE;

/// How long a connection may wait in the queue for the start to end
/// before it is answered `busy` (a restart from the state files is ready
/// well within it).
pub(crate) const GRACE: Duration = Duration::from_secs(5);
/// How long one client may take to send its request or read the answer.
const CLIENT_WAIT: Duration = Duration::from_millis(500);
/// How often the thread looks whether it should stop.
const TICK: Duration = Duration::from_millis(100);

/// The thread answering while the daemon starts.
#[derive(Debug)]
pub(crate) struct Starting {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<io::Result<UnixListener>>,
}

impl Starting {
    /// Starts answering on `listener`; `since` is when start-up began.
    pub(crate) fn spawn(listener: UnixListener, since: Instant) -> io::Result<Starting> {
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("eniipd-starting".into())
            .spawn(move || {
                while !flag.load(Ordering::Acquire) {
                    if since.elapsed() < GRACE {
                        std::thread::sleep(TICK);
                        continue;
                    }
                    match listener.accept() {
                        Ok((conn, _)) => answer(conn, &starting_reply(since)),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => wait(&listener),
                        Err(e) => {
                            debug!("accepting while starting: {e}");
                            std::thread::sleep(TICK);
                        }
                    }
                }
                listener.set_nonblocking(false)?;
                Ok(listener)
            })?;
        Ok(Starting { stop, thread })
    }

    /// The daemon is ready: the thread ends (within a tick and one
    /// client's wait) and hands the listener back.
    pub(crate) fn ready(self) -> io::Result<UnixListener> {
        self.stop.store(true, Ordering::Release);
        self.thread
            .join()
            .map_err(|_| io::Error::other("the start-up responder panicked"))?
    }
}

/// Sleeps until a connection may be waiting, a tick at most.
fn wait(listener: &UnixListener) {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
    let tick = PollTimeout::try_from(TICK).unwrap_or(PollTimeout::ZERO);
    let _ = poll(&mut fds, tick);
}

/// What a client is told while the daemon starts.
fn starting_reply(since: Instant) -> String {
    format!(
        "ERR busy {} (for {} s) and answers once the pool is restored from state and cloud; `journalctl -u eniipd` says what it waits for",
        eniip_protocol::protocol::STARTING,
        since.elapsed().as_secs()
    )
}

/// Answers every connection already queued on `listener` with `reply`
/// (one final line) and closes it, until none is left or `until`: what a
/// daemon that cannot start does before it exits, so that the clients
/// that started it through socket activation read why, and their queued
/// connections do not start it again at once (each start spends the
/// unit's start limit). Returns how many were answered.
pub(crate) fn refuse_queued(listener: &UnixListener, reply: &str, until: Instant) -> usize {
    if listener.set_nonblocking(true).is_err() {
        return 0;
    }
    let mut n = 0;
    while Instant::now() < until {
        match listener.accept() {
            Ok((conn, _)) => {
                answer(conn, reply);
                n += 1;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    n
}

/// Reads the client's first request (so closing does not reset the
/// connection under the answer), answers, closes.
fn answer(mut conn: UnixStream, reply: &str) {
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_read_timeout(Some(CLIENT_WAIT));
    let _ = conn.set_write_timeout(Some(CLIENT_WAIT));
    let deadline = Instant::now() + CLIENT_WAIT;
    let mut buf = [0u8; 512];
    let mut read = 0usize;
    while Instant::now() < deadline && read <= MAX_LINE {
        match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                read += n;
                if buf[..n].contains(&b'\n') {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let _ = conn.write_all(format!("{reply}\n").as_bytes());
    let _ = conn.shutdown(std::net::Shutdown::Write);
    // Whatever else the client sent is read (bounded), so the close does
    // not turn into a reset that loses the answer.
    let mut rest = [0u8; 4096];
    let mut drained = 0usize;
    while Instant::now() < deadline && drained < 64 * 1024 {
        match conn.read(&mut rest) {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};

    #[test]
    fn every_client_is_told_the_daemon_is_starting_until_it_is_ready() {
        let dir = std::env::temp_dir().join(format!("eniipd-starting-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let since = Instant::now().checked_sub(GRACE).unwrap();
        let s = Starting::spawn(listener, since).unwrap();
        for req in ["ping\n", "status\nlist\n", ""] {
            let mut c = UnixStream::connect(&path).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            c.write_all(req.as_bytes()).unwrap();
            if req.is_empty() {
                c.shutdown(std::net::Shutdown::Write).unwrap();
            }
            let mut lines = BufReader::new(c).lines();
            let first = lines.next().unwrap().unwrap();
            assert!(first.starts_with("ERR busy eniipd is starting"), "{first}");
            let err = eniip_protocol::protocol::reply::ErrReply::parse(&first).unwrap();
            assert!(err.is_starting(), "{first}");
            assert!(eniip_protocol::protocol::is_final_line(&first));
            assert!(lines.next().is_none(), "closed after one answer");
        }
        // Ready: a connection made now waits for the real server.
        let listener = s.ready().unwrap();
        let _c = UnixStream::connect(&path).unwrap();
        let (_conn, _) = listener.accept().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
