//! The accept loop of both socket servers (the daemon's Unix socket, the
//! emulator's HTTP): wait on the listener and a wake pipe, take every
//! connection that is waiting, and return once the wake pipe is readable
//! or `stopping` is set. A failing poll or accept backs off instead of
//! spinning; what to log of it is the caller's.

use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

/// After a failed poll (both descriptors are the server's own: never seen).
const POLL_BACKOFF: Duration = Duration::from_millis(100);
/// After a failed accept (out of descriptors and the like).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// What failed, for the caller's log.
#[derive(Debug)]
pub enum AcceptFailure<'a> {
    /// `poll` on the listener and the wake pipe.
    Poll(Errno),
    /// `accept`.
    Accept(&'a io::Error),
}

/// Accepts (`accept`, on a non-blocking listener) and hands each
/// connection to `admit` until woken or stopping.
pub fn accept_until_woken<C>(
    listener: BorrowedFd<'_>,
    wake: BorrowedFd<'_>,
    stopping: &AtomicBool,
    mut accept: impl FnMut() -> io::Result<C>,
    mut admit: impl FnMut(C),
    mut failed: impl FnMut(AcceptFailure<'_>),
) {
    while !stopping.load(Ordering::SeqCst) {
        let mut fds = [
            PollFd::new(listener, PollFlags::POLLIN),
            PollFd::new(wake, PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(Errno::EINTR) => continue,
            Err(e) => {
                failed(AcceptFailure::Poll(e));
                std::thread::sleep(POLL_BACKOFF);
                continue;
            }
        }
        if fds[1].revents().is_some_and(|r| !r.is_empty()) {
            return;
        }
        loop {
            match accept() {
                Ok(c) => admit(c),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    failed(AcceptFailure::Accept(&e));
                    std::thread::sleep(ACCEPT_BACKOFF);
                    break;
                }
            }
        }
    }
}
