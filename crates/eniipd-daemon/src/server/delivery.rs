//! The reply to a change written by the thread that answers it: the
//! store's, just after the fdatasync that made the change durable (or the
//! allocator's, when it answers at once). The connection's own thread is
//! asleep until then; waking it to write the reply put one more thread's
//! wake-up on every client's path (issue 37: 15 to 30 us of a 0.3 ms
//! `alloc` on a VM, where waking an idle vCPU is that slow).
//!
//! Invariants: a reply is written to the client at most once, either here
//! or by the connection's thread, never both and never in part by both
//! unless in order: what the socket does not take at once is left, with
//! its offset, for the connection's thread ([`Delivery::take`]). Nothing
//! here waits for the client (the write is non-blocking), so a client that
//! does not read never holds the store's thread. The durability order is
//! kept by the caller: the answer reaches a [`Delivery`] only after its
//! commit ended (`alloc::actor::durable`).

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use nix::errno::Errno;
use nix::sys::socket::{send, MsgFlags};
use parking_lot::Mutex;

use crate::metrics;
use eniip_protocol::core::{AllocError, Answer, Deliver};
use eniip_protocol::protocol;

#[derive(Debug)]
enum State {
    /// No answer yet.
    Waiting,
    /// The answering thread is writing it.
    Writing,
    /// Rendered, and its first `sent` bytes are on the socket.
    Written { text: String, sent: usize },
    /// The connection gave up waiting and answers itself.
    Revoked,
}

/// What is left for the connection's thread once its ask returned.
#[derive(Debug)]
pub(super) enum Left {
    /// Nothing was written: the connection renders and writes the reply.
    Everything,
    /// The reply, written up to `sent`: the connection writes the rest
    /// (usually nothing).
    Rest { text: String, sent: usize },
    /// A write began and its end is unknown (the answering thread stalled
    /// mid-write past every deadline): the stream's framing is lost.
    Unknown,
}

/// One request's reply, writable by the thread that answers it.
pub(super) struct Delivery {
    stream: Arc<UnixStream>,
    state: Mutex<State>,
    /// The latest commit's end when the request was handed over: a
    /// commit that ended since is the one this reply waited for.
    last_commit: u64,
}

impl Delivery {
    /// For a request about to be handed over on `stream`.
    pub(super) fn new(stream: Arc<UnixStream>) -> Arc<Delivery> {
        Arc::new(Delivery {
            stream,
            state: Mutex::new(State::Waiting),
            last_commit: metrics::last_commit(),
        })
    }

    /// Once the ask returned: what the connection still has to write.
    pub(super) fn take(&self) -> Left {
        match std::mem::replace(&mut *self.state.lock(), State::Revoked) {
            State::Waiting | State::Revoked => Left::Everything,
            State::Written { text, sent } => Left::Rest { text, sent },
            State::Writing => Left::Unknown,
        }
    }

    /// The latest commit's end when the request was handed over.
    pub(super) fn last_commit(&self) -> u64 {
        self.last_commit
    }
}

impl Deliver for Delivery {
    fn deliver(&self, outcome: &Result<Answer, AllocError>) {
        {
            let mut s = self.state.lock();
            if !matches!(*s, State::Waiting) {
                return;
            }
            *s = State::Writing;
        }
        let text = protocol::answer_reply(outcome.clone()).render();
        let flags = MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL;
        let sent = loop {
            match send(self.stream.as_raw_fd(), text.as_bytes(), flags) {
                Ok(n) => break n,
                Err(Errno::EINTR) => {}
                // Full, or the client is gone: the connection's thread
                // finds out for itself.
                Err(_) => break 0,
            }
        };
        if sent == text.len() {
            metrics::record_reply_written(self.last_commit);
        }
        *self.state.lock() = State::Written { text, sent };
    }

    fn revoke(&self) -> bool {
        let mut s = self.state.lock();
        match *s {
            State::Waiting | State::Revoked => {
                *s = State::Revoked;
                true
            }
            State::Writing | State::Written { .. } => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eniip_protocol::core::ErrCode;
    use std::io::{Read, Write};

    fn read_all(s: &mut UnixStream) -> String {
        s.set_nonblocking(true).unwrap();
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_answering_thread_writes_the_reply_and_leaves_nothing() {
        let (ours, mut client) = UnixStream::pair().unwrap();
        let d = Delivery::new(Arc::new(ours));
        d.deliver(&Ok(Answer::Released(None)));
        assert_eq!(read_all(&mut client), "OK released=none\n");
        assert!(!d.revoke(), "written: too late to revoke");
        match d.take() {
            Left::Rest { text, sent } => assert_eq!(sent, text.len()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_revoked_delivery_writes_nothing_and_a_second_answer_is_not_written() {
        let (ours, mut client) = UnixStream::pair().unwrap();
        let d = Delivery::new(Arc::new(ours));
        assert!(d.revoke());
        d.deliver(&Ok(Answer::Released(None)));
        assert_eq!(read_all(&mut client), "");
        assert!(matches!(d.take(), Left::Everything));

        let (ours, mut client) = UnixStream::pair().unwrap();
        let d = Delivery::new(Arc::new(ours));
        d.deliver(&Err(AllocError::bare(ErrCode::Busy)));
        d.deliver(&Ok(Answer::Released(None)));
        assert_eq!(read_all(&mut client), "ERR busy\n");
    }

    #[test]
    fn what_a_full_socket_does_not_take_is_left_for_the_connection() {
        let (ours, mut client) = UnixStream::pair().unwrap();
        // Fill the socket so that not all of a reply fits.
        ours.set_nonblocking(true).unwrap();
        let mut filled = 0;
        for chunk in [4096, 1] {
            while let Ok(n) = (&ours).write(&vec![b'x'; chunk]) {
                filled += n;
            }
        }
        ours.set_nonblocking(false).unwrap();
        let d = Delivery::new(Arc::new(ours));
        d.deliver(&Ok(Answer::Released(None)));
        match d.take() {
            Left::Rest { text, sent } => {
                assert_eq!(text, "OK released=none\n");
                assert!(sent < text.len(), "a full socket takes nothing at once");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(read_all(&mut client).len(), filled);
    }
}
