//! The socket listener: an accept thread and one thread per connection.
//!
//! Hostile-client rules (SPEC section 4): a request line must arrive whole
//! within `line_timeout` of its first byte; a connection with no request
//! for `idle_timeout` is closed; lines over 4096 bytes get
//! `ERR line-too-long` and the connection is closed, without ever buffering
//! more than that; a reply must be taken by the client within
//! `write_timeout`. At `max_connections` the connection idle longest is
//! closed to admit the new one. A connection whose client does not read its
//! reply counts as idle since its reply last made progress, so clients that
//! never read cannot lock others out; a connection whose request is being
//! served, or whose next request has arrived, is never closed this way
//! (`ERR busy` to the newcomer if every connection is such). A request
//! whose client left is still completed: the backend call runs to the end
//! and only the reply is dropped.
//!
//! The accept thread sleeps in `poll` on the listener and a wake-up pipe,
//! so an idle daemon uses no CPU here. When the last connection closes,
//! the heap's free pages and the stacks glibc keeps of the connections'
//! ended threads go back to the kernel
//! ([`eniip_util::memory::release_free`]): a burst of clients, however
//! wide, leaves no lasting resident memory.
//!
//! This file admits connections, evicts them at the limit and stops them;
//! what one connection does for its client (framing, timeouts, access
//! checks, the reply) is [`super::connection`]'s. A connection reports its
//! [`Phase`] back, and that is what eviction goes by.

use std::collections::HashMap;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use log::{debug, warn};
use parking_lot::{Condvar, Mutex};

use super::connection::{self, Context, Phase};
pub use super::socket::{bind_socket, resolve_group};
pub use super::ServerConfig;
use super::CLIENT_LOG;
use eniip_protocol::core::{AllocError, Commands, ErrCode};
use eniip_protocol::protocol::ClientReply;
use eniip_util::accept::{accept_until_woken, AcceptFailure};
use eniip_util::log_limited;

struct Conn {
    stream: UnixStream,
    phase: Phase,
    /// When the connection last did something for its client: opened,
    /// finished a request, or got a piece of its reply taken.
    last_active: Instant,
    /// Has a request arrived on it yet?
    asked: bool,
    thread: Option<JoinHandle<()>>,
}

/// A new connection is given this long to send its first request before it
/// may be closed to admit yet another: a client connects, then writes, and
/// may be descheduled in between.
const FIRST_REQUEST_GRACE: Duration = Duration::from_millis(200);

/// How long a new connection may wait, at `max_connections`, for one to
/// become closable (a request to be read, a reply to stall) before it is
/// refused with `ERR busy`. Meanwhile the accept thread waits and new
/// connections queue in the listen backlog.
const ADMIT_WAIT: Duration = Duration::from_secs(1);

struct Shared {
    cfg: ServerConfig,
    commands: Commands,
    conns: Mutex<HashMap<u64, Conn>>,
    /// Signalled when a connection may have become closable or left.
    changed: Condvar,
    stopping: AtomicBool,
    next: AtomicU64,
    /// Threads of evicted connections, still finishing a write or a read
    /// that their shutdown ends: joined at stop like the others.
    retired: Mutex<Vec<JoinHandle<()>>>,
}

/// A running listener.
pub struct Server {
    shared: Arc<Shared>,
    wake: Mutex<Option<OwnedFd>>,
    accept: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("connections", &self.connections())
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Starts serving `listener`.
    pub fn start(
        listener: UnixListener,
        cfg: ServerConfig,
        commands: Commands,
    ) -> io::Result<Server> {
        listener.set_nonblocking(true)?;
        let (wake_rx, wake_tx) = nix::unistd::pipe()?;
        let shared = Arc::new(Shared {
            cfg,
            commands,
            conns: Mutex::new(HashMap::new()),
            changed: Condvar::new(),
            stopping: AtomicBool::new(false),
            next: AtomicU64::new(1),
            retired: Mutex::new(Vec::new()),
        });
        let sh = Arc::clone(&shared);
        let accept = std::thread::Builder::new()
            .name("eniipd-accept".into())
            .spawn(move || accept_loop(&sh, &listener, &wake_rx))?;
        Ok(Server {
            shared,
            wake: Mutex::new(Some(wake_tx)),
            accept: Mutex::new(Some(accept)),
        })
    }

    /// Open connections.
    pub fn connections(&self) -> usize {
        self.shared.conns.lock().len()
    }

    /// A counter of open connections, for the metrics gauge.
    pub(crate) fn connection_counter(&self) -> Box<dyn Fn() -> usize + Send + Sync> {
        let sh = Arc::downgrade(&self.shared);
        Box::new(move || sh.upgrade().map(|s| s.conns.lock().len()).unwrap_or(0))
    }

    /// Stops accepting, closes idle connections, lets requests in progress
    /// finish (new ones get `ERR shutting-down`) and joins every thread
    /// until `until`. Idempotent.
    pub fn shutdown(&self, until: Instant) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        self.shared.changed.notify_all();
        if let Some(w) = self.wake.lock().take() {
            let _ = nix::unistd::write(&w, b"x");
        }
        if let Some(h) = self.accept.lock().take() {
            if !eniip_util::thread::join_until(h, until) {
                warn!("accept thread did not stop in time");
            }
        }
        let threads: Vec<JoinHandle<()>> = {
            let mut conns = self.shared.conns.lock();
            for c in conns.values() {
                if c.phase == Phase::Waiting {
                    let _ = c.stream.shutdown(std::net::Shutdown::Both);
                }
            }
            let mut threads: Vec<JoinHandle<()>> =
                conns.values_mut().filter_map(|c| c.thread.take()).collect();
            threads.append(&mut self.shared.retired.lock());
            threads
        };
        let mut abandoned = 0;
        for t in threads {
            if !eniip_util::thread::join_until(t, until) {
                abandoned += 1;
            }
        }
        if abandoned > 0 {
            warn!("{abandoned} connection thread(s) still busy at shutdown; abandoned");
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown(Instant::now() + Duration::from_secs(1));
    }
}

fn accept_loop(sh: &Arc<Shared>, listener: &UnixListener, wake: &OwnedFd) {
    accept_until_woken(
        listener.as_fd(),
        wake.as_fd(),
        &sh.stopping,
        || listener.accept().map(|(stream, _)| stream),
        |stream| admit(sh, stream),
        |failure| match failure {
            AcceptFailure::Poll(e) => warn!("poll on the listening socket failed: {e}"),
            // Out of fds and the like: backed off, not spinning.
            AcceptFailure::Accept(e) => {
                log_limited!(CLIENT_LOG, log::Level::Warn, "accept failed: {e}")
            }
        },
    );
}

fn admit(sh: &Arc<Shared>, stream: UnixStream) {
    if pending(&stream) == Pending::Gone {
        // Connected and closed with nothing sent (a probe, or a connect
        // storm): nothing to answer, so no slot or thread. Keeps the accept
        // loop as fast as such clients and the listen backlog from filling.
        return;
    }
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_write_timeout(Some(sh.cfg.write_timeout));
    let id = sh.next.fetch_add(1, Ordering::Relaxed);
    {
        let mut conns = sh.conns.lock();
        let give_up = Instant::now() + ADMIT_WAIT;
        while conns.len() >= sh.cfg.max_connections {
            match pick_victim(&conns) {
                Some(v) => {
                    if let Some(c) = conns.get(&v) {
                        let _ = c.stream.shutdown(std::net::Shutdown::Both);
                    }
                    // Its thread removes it; count it out now so the limit holds.
                    if let Some(h) = conns.remove(&v).and_then(|mut c| c.thread.take()) {
                        let mut retired = sh.retired.lock();
                        retired.retain(|h| !h.is_finished());
                        retired.push(h);
                    }
                    crate::metrics::record_connection_evicted();
                    debug!("closed the connection idle longest to admit a new one");
                }
                None if !sh.stopping.load(Ordering::SeqCst) && Instant::now() < give_up => {
                    // Woken when a connection changes; a new one's grace
                    // ends unannounced, hence the bounded slice.
                    let slice = Instant::now() + FIRST_REQUEST_GRACE / 5;
                    sh.changed.wait_until(&mut conns, give_up.min(slice));
                }
                None => {
                    drop(conns);
                    let mut s = stream;
                    let _ = s.write_all(
                        ClientReply::err(AllocError::new(ErrCode::Busy, "too many connections"))
                            .render()
                            .as_bytes(),
                    );
                    return;
                }
            }
        }
        let clone = match stream.try_clone() {
            Ok(c) => c,
            Err(e) => {
                log_limited!(
                    CLIENT_LOG,
                    log::Level::Warn,
                    "cannot clone a client socket: {e}"
                );
                return;
            }
        };
        conns.insert(
            id,
            Conn {
                stream: clone,
                phase: Phase::Waiting,
                last_active: Instant::now(),
                asked: false,
                thread: None,
            },
        );
    }
    let sh2 = Arc::clone(sh);
    let t = std::thread::Builder::new()
        .name(format!("eniipd-conn-{id}"))
        .stack_size(128 * 1024)
        .spawn(move || {
            let cx = Context {
                cfg: &sh2.cfg,
                commands: &sh2.commands,
                stopping: &sh2.stopping,
                set_phase: &|phase| set_phase(&sh2, id, phase),
            };
            connection::serve(&cx, stream);
            let last = {
                let mut conns = sh2.conns.lock();
                conns.remove(&id);
                conns.is_empty()
            };
            sh2.changed.notify_all();
            if last {
                // The clients have gone: what their connections used
                // goes back to the kernel.
                eniip_util::memory::release_free();
            }
        });
    match t {
        Ok(t) => {
            if let Some(c) = sh.conns.lock().get_mut(&id) {
                c.thread = Some(t);
            }
        }
        Err(e) => {
            log_limited!(
                CLIENT_LOG,
                log::Level::Warn,
                "cannot start a connection thread: {e}"
            );
            if let Some(c) = sh.conns.lock().remove(&id) {
                let mut s = c.stream;
                let _ = s.write_all(
                    ClientReply::err(AllocError::new(
                        ErrCode::Busy,
                        "no thread for this connection",
                    ))
                    .render()
                    .as_bytes(),
                );
            }
        }
    }
}

/// The connection to close to admit a new one: the one idle longest among
/// those waiting for a request that has not arrived and those whose reply
/// the client is not taking. Never one being served, one whose next
/// request is already in its socket (it is about to be served), nor a new
/// one within its first-request grace.
fn pick_victim(conns: &HashMap<u64, Conn>) -> Option<u64> {
    let now = Instant::now();
    let mut candidates: Vec<(&u64, &Conn)> = conns
        .iter()
        .filter(|(_, c)| c.phase != Phase::Serving)
        .filter(|(_, c)| c.asked || now.duration_since(c.last_active) >= FIRST_REQUEST_GRACE)
        .collect();
    candidates.sort_by_key(|(_, c)| c.last_active);
    candidates
        .into_iter()
        .find(|(_, c)| c.phase == Phase::Stalled || !has_input(&c.stream))
        .map(|(id, _)| *id)
}

/// Has the client sent bytes the connection has not read yet?
fn has_input(stream: &UnixStream) -> bool {
    pending(stream) == Pending::Input
}

/// What a client has sent that the connection has not read.
#[derive(Debug, PartialEq, Eq)]
enum Pending {
    /// Bytes.
    Input,
    /// Nothing, and its end is closed.
    Gone,
    /// Nothing yet.
    Nothing,
}

fn pending(stream: &UnixStream) -> Pending {
    use nix::sys::socket::{recv, MsgFlags};
    use std::os::fd::AsRawFd;
    let mut b = [0u8; 1];
    match recv(
        stream.as_raw_fd(),
        &mut b,
        MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT,
    ) {
        Ok(0) => Pending::Gone,
        Ok(_) => Pending::Input,
        Err(_) => Pending::Nothing,
    }
}

fn set_phase(sh: &Shared, id: u64, phase: Phase) {
    if let Some(c) = sh.conns.lock().get_mut(&id) {
        c.phase = phase;
        c.last_active = Instant::now();
        c.asked |= phase == Phase::Serving;
    }
    if phase != Phase::Serving {
        sh.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection in `phase`, last active `ago`, with `sent` bytes from
    /// its client not read yet; the client's end is returned to keep it open.
    fn conn(phase: Phase, ago: Duration, asked: bool, sent: &[u8]) -> (Conn, UnixStream) {
        let (server, mut client) = UnixStream::pair().unwrap();
        client.write_all(sent).unwrap();
        let conn = Conn {
            stream: server,
            phase,
            last_active: Instant::now() - ago,
            asked,
            thread: None,
        };
        (conn, client)
    }

    fn victim(conns: Vec<(Conn, UnixStream)>) -> Option<u64> {
        let mut map = HashMap::new();
        let mut clients = Vec::new();
        for (i, (c, client)) in conns.into_iter().enumerate() {
            map.insert(i as u64, c);
            clients.push(client);
        }
        pick_victim(&map)
    }

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn the_idle_longest_goes_first_and_a_stalled_reply_counts_as_idle() {
        let v = victim(vec![
            conn(Phase::Waiting, S(5), true, b""),
            conn(Phase::Stalled, S(9), true, b""),
            conn(Phase::Waiting, S(7), true, b""),
        ]);
        assert_eq!(v, Some(1));
    }

    #[test]
    fn never_one_being_served_nor_one_whose_request_has_arrived() {
        let v = victim(vec![
            conn(Phase::Serving, S(60), true, b""),
            conn(Phase::Waiting, S(50), true, b"ping\n"),
            conn(Phase::Waiting, S(1), true, b""),
        ]);
        assert_eq!(v, Some(2));
        let v = victim(vec![
            conn(Phase::Serving, S(60), true, b""),
            conn(Phase::Waiting, S(50), true, b"status\n"),
        ]);
        assert_eq!(v, None);
    }

    #[test]
    fn a_new_connection_has_a_grace_before_its_first_request() {
        let v = victim(vec![
            conn(Phase::Waiting, Duration::ZERO, false, b""),
            conn(Phase::Serving, S(3), true, b""),
        ]);
        assert_eq!(v, None);
        let v = victim(vec![
            conn(Phase::Waiting, FIRST_REQUEST_GRACE * 2, false, b""),
            conn(Phase::Serving, S(3), true, b""),
        ]);
        assert_eq!(v, Some(0));
    }

    #[test]
    fn a_client_gone_without_a_word_is_told_from_one_that_sent() {
        let (a, client) = UnixStream::pair().unwrap();
        assert_eq!(pending(&a), Pending::Nothing);
        drop(client);
        assert_eq!(pending(&a), Pending::Gone);
        let (b, mut client) = UnixStream::pair().unwrap();
        client.write_all(b"alloc x\n").unwrap();
        drop(client);
        assert_eq!(pending(&b), Pending::Input);
    }
}
