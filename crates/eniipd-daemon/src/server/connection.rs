//! One client connection: the line protocol over it (SPEC section 4). It
//! reads request lines under the line and idle timeouts, checks that the
//! peer may change allocations, asks the allocator through
//! [`eniip_protocol::core::Commands`] and writes each reply within
//! `write_timeout`.
//!
//! Invariants: never more than one line (4096 bytes) is buffered; every
//! read and write has a deadline; a request whose client left is still
//! completed and only its reply is dropped. The connection tells its
//! listener where it is in its request cycle ([`Phase`]): that is all the
//! listener needs to choose which connection to close when it is full
//! (see `listener.rs`), and all a connection knows of the others.

use std::io::{self, Read};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use log::debug;

use super::access::may_mutate;
use super::delivery::{Delivery, Left};
use super::{ServerConfig, CLIENT_LOG};
use crate::metrics::{self, Stage};
use eniip_protocol::core::{AllocError, Command, Commands, Deliver, ErrCode};
use eniip_protocol::protocol::{self, ClientReply, ClientRequest, MAX_LINE};
use eniip_util::log_limited;
use eniip_util::peercred::{supplementary_groups, Peer};

/// Where a connection is in its request cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Reading the next request line (or nothing yet).
    Waiting,
    /// The backend is answering a request, or its reply is being written
    /// as fast as the client takes it.
    Serving,
    /// The reply does not fit in what the client has read: it stalled.
    /// Also a connection drained after `ERR line-too-long`: closable
    /// whatever its client still sends.
    Stalled,
}

/// What a connection needs of the listener that admitted it.
pub(super) struct Context<'a> {
    /// The limits and the access rules.
    pub(super) cfg: &'a ServerConfig,
    /// Where commands go.
    pub(super) commands: &'a Commands,
    /// Set once the listener stops: new requests get `ERR shutting-down`.
    pub(super) stopping: &'a AtomicBool,
    /// Tells the listener the connection's new phase.
    pub(super) set_phase: &'a dyn Fn(Phase),
}

/// Ids a connection's keep-list may hold (eniipd-protocol(7), `keep`): a
/// bound on what one connection may make the daemon keep, far above what
/// a real list needs (an owner and a sandbox per address a node can
/// hold).
const MAX_KEEP: usize = 100_000;

/// Writes a reply within `write_timeout`. While the client takes it the
/// connection counts as serving; once the client stops reading (the socket
/// is full) it is `Stalled`, idle since the reply last moved, and may be
/// closed to admit another client.
fn write_reply(cx: &Context<'_>, stream: &UnixStream, bytes: &[u8]) -> io::Result<()> {
    use nix::errno::Errno;
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use nix::sys::socket::{send, MsgFlags};
    use std::os::fd::AsRawFd;
    let deadline = Instant::now() + cx.cfg.write_timeout;
    let mut rest = bytes;
    let mut stalled = false;
    while !rest.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client did not take its reply in time",
            ));
        }
        let flags = MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL;
        match send(stream.as_raw_fd(), rest, flags) {
            Ok(n) => {
                rest = &rest[n..];
                if stalled && n > 0 {
                    (cx.set_phase)(Phase::Stalled);
                }
            }
            Err(Errno::EINTR) => {}
            Err(Errno::EAGAIN) => {
                if !stalled {
                    stalled = true;
                    (cx.set_phase)(Phase::Stalled);
                }
                let mut fds = [PollFd::new(stream.as_fd(), PollFlags::POLLOUT)];
                let timeout = PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX);
                match poll(&mut fds, timeout) {
                    Ok(_) | Err(Errno::EINTR) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// After `ERR line-too-long` the client may still be sending its line.
/// Closing with its bytes unread would reset the connection and lose the
/// reply, so what it sends is read and dropped, up to this many bytes...
const DRAIN_MAX_BYTES: u64 = 4 << 20;
/// ... and for this long at most, before the connection is closed.
const DRAIN_MAX_TIME: Duration = Duration::from_secs(2);

/// Ends the connection after a final error: the reply is followed by EOF at
/// once, and what the client still sends is discarded (within the bounds
/// above) until it closes its end, so it can read the reply.
fn drain_and_close(mut stream: &UnixStream) {
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let until = Instant::now() + DRAIN_MAX_TIME;
    let mut dropped: u64 = 0;
    let mut chunk = [0u8; 16 * 1024];
    while dropped < DRAIN_MAX_BYTES {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            break;
        }
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => dropped += n as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

enum Next {
    Line(Vec<u8>),
    TooLong,
    Closed,
}

/// Reads one request line under the timeouts. `buf` keeps bytes read past
/// the line for the next call.
fn read_line(cx: &Context<'_>, mut stream: &UnixStream, buf: &mut Vec<u8>) -> Next {
    let mut line_started: Option<Instant> = if buf.is_empty() {
        None
    } else {
        Some(Instant::now())
    };
    let idle_since = Instant::now();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(pos) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).take(pos).collect();
            return Next::Line(line);
        }
        if buf.len() > MAX_LINE + 1 {
            return Next::TooLong;
        }
        if cx.stopping.load(Ordering::SeqCst) && buf.is_empty() {
            return Next::Closed;
        }
        let deadline = match line_started {
            Some(t) => t + cx.cfg.line_timeout,
            None => idle_since + cx.cfg.idle_timeout,
        };
        let now = Instant::now();
        if now >= deadline {
            debug!(
                "closing a connection: {}",
                if line_started.is_some() {
                    "request line too slow"
                } else {
                    "idle"
                }
            );
            return Next::Closed;
        }
        let _ = stream.set_read_timeout(Some(deadline - now));
        match stream.read(&mut chunk) {
            Ok(0) => {
                // EOF: a last line without its newline is still a request.
                if buf.is_empty() || buf.len() > MAX_LINE + 1 {
                    return Next::Closed;
                }
                return Next::Line(std::mem::take(buf));
            }
            Ok(n) => {
                if line_started.is_none() {
                    line_started = Some(Instant::now());
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(_) => return Next::Closed,
        }
    }
}

/// Serves one connection until its client leaves, a limit closes it, or
/// the listener stops; the listener forgets it after.
pub(super) fn serve(cx: &Context<'_>, stream: UnixStream) {
    // Shared with the thread that answers a change, which writes its
    // reply (`delivery`).
    let stream = Arc::new(stream);
    let peer = Peer::of(&stream).ok();
    let mut buf = Vec::with_capacity(256);
    // `keep` lines gather here until the `gc` that uses them.
    let mut keep: Vec<String> = Vec::new();
    loop {
        let line = match read_line(cx, &stream, &mut buf) {
            Next::Line(l) => l,
            Next::TooLong => {
                let _ = write_reply(
                    cx,
                    &stream,
                    ClientReply::err(AllocError::bare(ErrCode::LineTooLong))
                        .render()
                        .as_bytes(),
                );
                (cx.set_phase)(Phase::Stalled);
                drain_and_close(&stream);
                return;
            }
            Next::Closed => return,
        };
        let read_at = Instant::now();
        (cx.set_phase)(Phase::Serving);
        let (out, quit) = if cx.stopping.load(Ordering::SeqCst) {
            (
                Out::Reply(ClientReply::err(AllocError::new(
                    ErrCode::ShuttingDown,
                    "the daemon is stopping",
                ))),
                false,
            )
        } else {
            match protocol::parse_request(&line) {
                Ok(req) => {
                    let quit = req == ClientRequest::Quit;
                    let out = handle(cx, &stream, peer.as_ref(), &mut keep, req, read_at);
                    (out, quit)
                }
                Err(e) => {
                    debug!("bad request: {e}");
                    let close = e.code == ErrCode::LineTooLong;
                    (Out::Reply(ClientReply::err(e)), close)
                }
            }
        };
        let (text, sent, timed) = match out {
            Out::Reply(r) => (r.render(), 0, None),
            Out::Change(r, last_commit) => (r.render(), 0, Some(last_commit)),
            Out::Rest {
                text,
                sent,
                last_commit,
            } => (text, sent, Some(last_commit)),
            Out::Lost => {
                debug!("closing a connection: its reply was left half written");
                let _ = stream.shutdown(std::net::Shutdown::Both);
                return;
            }
        };
        let rest = &text.as_bytes()[sent..];
        let written = if rest.is_empty() {
            Ok(())
        } else {
            let written = write_reply(cx, &stream, rest);
            if let Some(last_commit) = timed {
                metrics::record_reply_written(last_commit);
            }
            written
        };
        (cx.set_phase)(Phase::Waiting);
        if let Err(e) = written {
            debug!("reply not delivered (client gone?): {e}");
            return;
        }
        if quit {
            let _ = stream.shutdown(std::net::Shutdown::Both);
            return;
        }
        // When stopping, requests already received still get their
        // `ERR shutting-down` (read_line returns them before it closes).
    }
}

/// What a request leaves the connection to write.
enum Out {
    /// A reply to render and write.
    Reply(ClientReply),
    /// The reply to a change, none of it written yet; the latest commit's
    /// end when it was handed over (its `reply` stage counts from the
    /// commit that ended since).
    Change(ClientReply, u64),
    /// The reply to a change, its first `sent` bytes written by the
    /// thread that answered it.
    Rest {
        text: String,
        sent: usize,
        last_commit: u64,
    },
    /// The reply to a change was left half written: the stream's framing
    /// is lost, the connection is closed.
    Lost,
}

/// Answers `req`, whose line was read at `read_at`.
fn handle(
    cx: &Context<'_>,
    stream: &Arc<UnixStream>,
    peer: Option<&Peer>,
    keep: &mut Vec<String>,
    req: ClientRequest,
    read_at: Instant,
) -> Out {
    if req.is_mutating() {
        let allowed = peer.is_some_and(|p| {
            may_mutate(p, &cx.cfg.allowed_uids, cx.cfg.socket_gid, || {
                supplementary_groups(stream, p.pid)
            })
        });
        if !allowed {
            log_limited!(
                CLIENT_LOG,
                log::Level::Info,
                "{} refused to uid {:?} pid {:?}",
                req.name(),
                peer.map(|p| p.uid),
                peer.map(|p| p.pid)
            );
            return Out::Reply(ClientReply::err(AllocError::new(
                ErrCode::Denied,
                "this uid may not change allocations",
            )));
        }
    }
    Out::Reply(match req {
        ClientRequest::Ping => ClientReply::ok("pong"),
        ClientRequest::Version => ClientReply::ok(format!(
            "eniipd {} protocol={}",
            cx.cfg.version,
            protocol::PROTOCOL_VERSION
        )),
        ClientRequest::Help => {
            ClientReply::with_data(protocol::HELP.iter().map(|s| s.to_string()).collect(), "")
        }
        ClientRequest::Quit => ClientReply::ok("bye"),
        ClientRequest::Keep(ids) => {
            // Bounded, so one connection cannot grow without end.
            if keep.len() + ids.len() > MAX_KEEP {
                return Out::Reply(ClientReply::err(AllocError::bad(format!(
                    "a keep-list holds at most {MAX_KEEP} ids: this one has {}, the line adds {}; the list is unchanged",
                    keep.len(),
                    ids.len()
                ))));
            }
            keep.extend(ids);
            keep.sort_unstable();
            keep.dedup();
            ClientReply::ok(format!("keep={}", keep.len()))
        }
        ClientRequest::Command(mut command) => {
            match &mut command {
                Command::Gc { keep: list, .. } => *list = std::mem::take(keep),
                Command::Alloc { attach, .. } => {
                    if let Some(a) = attach.take() {
                        match super::attachment_ids::resolve(a, peer) {
                            Ok(a) => *attach = a,
                            Err(e) => return Out::Reply(ClientReply::err(e)),
                        }
                    }
                }
                _ => {}
            }
            return ask(cx, stream, peer, command, read_at);
        }
    })
}

/// Hands `command` to the allocator and waits for its answer. A change's
/// reply is written by the thread that answers it (`delivery`), the
/// stages of its way measured (`eniipd_request_stage_seconds`).
fn ask(
    cx: &Context<'_>,
    stream: &Arc<UnixStream>,
    peer: Option<&Peer>,
    command: Command,
    read_at: Instant,
) -> Out {
    let name = command.name();
    let delivery = command.is_mutating().then(|| {
        metrics::record_stage(Stage::Connection, read_at.elapsed().as_secs_f64());
        Delivery::new(Arc::clone(stream))
    });
    let deliver = delivery.clone().map(|d| d as Arc<dyn Deliver>);
    let outcome = cx.commands.ask_delivering(command, read_at, deliver);
    if let Some(p) = peer {
        debug!(
            "{name} by uid {} pid {}: {}",
            p.uid,
            p.pid,
            if outcome.is_ok() { "ok" } else { "error" }
        );
    }
    let Some(delivery) = delivery else {
        return Out::Reply(protocol::answer_reply(outcome));
    };
    match delivery.take() {
        Left::Everything => Out::Change(protocol::answer_reply(outcome), delivery.last_commit()),
        Left::Rest { text, sent } => Out::Rest {
            text,
            sent,
            last_commit: delivery.last_commit(),
        },
        Left::Unknown => Out::Lost,
    }
}
