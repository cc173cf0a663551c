//! A minimal HTTP/1.1 server on `std::net`, for the emulator and for
//! `GET /metrics`: keep-alive, `Content-Length` and chunked bodies, bounded
//! headers and bodies, read timeouts, one named thread per connection, a
//! bounded number of connections, and a shutdown that returns promptly even
//! with idle keep-alive clients. Requests are read in `request.rs` (the
//! grammar is `httparse`'s); garbage gets a `4xx` and the connection is
//! closed, never a panic.

use std::collections::HashMap;
use std::io::{self, BufReader, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use eniip_util::accept::accept_until_woken;

mod request;
pub use request::HttpRequest;
use request::{read_request, ReadError};

/// A response.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// Extra headers (Content-Length is added).
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// A `text/plain` response.
    pub fn text(status: u16, body: impl Into<String>) -> HttpResponse {
        HttpResponse {
            status,
            headers: vec![("Content-Type".into(), "text/plain; charset=utf-8".into())],
            body: body.into().into_bytes(),
        }
    }

    /// An `application/json` response.
    pub fn json(status: u16, v: &serde_json::Value) -> HttpResponse {
        HttpResponse {
            status,
            headers: vec![(
                "Content-Type".into(),
                "application/json;charset=utf-8".into(),
            )],
            body: serde_json::to_vec(v).unwrap_or_default(),
        }
    }

    /// Adds (or replaces) a header.
    pub fn with_header(mut self, name: &str, value: impl Into<String>) -> HttpResponse {
        self.headers.retain(|(k, _)| !k.eq_ignore_ascii_case(name));
        self.headers.push((name.to_string(), value.into()));
        self
    }
}

/// Limits.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Open connections at most; more are answered 503 and closed.
    pub max_connections: usize,
    /// An idle keep-alive connection (or a slow request) is closed after this.
    pub read_timeout: Duration,
    /// Largest request body.
    pub max_body: usize,
    /// Largest request line plus headers (with any blank lines before
    /// them), and largest trailer section of a chunked body.
    pub max_head: usize,
}

impl Default for HttpOptions {
    fn default() -> HttpOptions {
        HttpOptions {
            max_connections: 256,
            read_timeout: Duration::from_secs(30),
            max_body: 1 << 20,
            max_head: 32 << 10,
        }
    }
}

/// An open connection: a handle to close it, and its thread.
type ConnEntry = (TcpStream, Option<JoinHandle<()>>);

/// The handler type.
pub type Handler = Arc<dyn Fn(&HttpRequest) -> HttpResponse + Send + Sync>;

struct Shared {
    handler: Handler,
    opts: HttpOptions,
    stopping: AtomicBool,
    conns: Mutex<HashMap<u64, ConnEntry>>,
    next: AtomicU64,
    name: String,
}

/// A running server.
pub struct HttpServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    wake: Option<OwnedFd>,
    accept: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for HttpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl HttpServer {
    /// Binds `addr` and serves with `handler`; threads are named after `name`.
    pub fn bind(
        addr: SocketAddr,
        name: &str,
        handler: Handler,
        opts: HttpOptions,
    ) -> io::Result<HttpServer> {
        HttpServer::serve(TcpListener::bind(addr)?, name, handler, opts)
    }

    /// Serves an already bound listener (bound early, so that a busy port
    /// is found before anything else happens).
    pub fn serve(
        listener: TcpListener,
        name: &str,
        handler: Handler,
        opts: HttpOptions,
    ) -> io::Result<HttpServer> {
        listener.set_nonblocking(true)?;
        let local = listener.local_addr()?;
        let (wake_rx, wake_tx) = nix::unistd::pipe()?;
        let shared = Arc::new(Shared {
            handler,
            opts,
            stopping: AtomicBool::new(false),
            conns: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            name: name.to_string(),
        });
        let sh = Arc::clone(&shared);
        let accept = std::thread::Builder::new()
            .name(format!("{name}-accept"))
            .spawn(move || accept_loop(&sh, &listener, &wake_rx))?;
        Ok(HttpServer {
            shared,
            addr: local,
            wake: Some(wake_tx),
            accept: Some(accept),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, closes every connection and joins the threads
    /// (within a couple of seconds; stragglers are abandoned).
    pub fn shutdown(mut self) {
        self.stop(Instant::now() + Duration::from_secs(3));
    }

    /// [`HttpServer::shutdown`] against the caller's deadline.
    pub fn shutdown_until(mut self, until: Instant) {
        self.stop(until);
    }

    fn stop(&mut self, until: Instant) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        if let Some(w) = self.wake.take() {
            let _ = nix::unistd::write(&w, b"x");
        }
        if let Some(h) = self.accept.take() {
            let _ = eniip_util::thread::join_until(h, until);
        }
        let threads: Vec<JoinHandle<()>> = {
            let mut conns = self.shared.conns.lock();
            for (s, _) in conns.values() {
                let _ = s.shutdown(Shutdown::Both);
            }
            conns.values_mut().filter_map(|(_, t)| t.take()).collect()
        };
        for t in threads {
            let _ = eniip_util::thread::join_until(t, until);
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop(Instant::now() + Duration::from_secs(3));
    }
}

fn accept_loop(sh: &Arc<Shared>, listener: &TcpListener, wake: &OwnedFd) {
    accept_until_woken(
        listener.as_fd(),
        wake.as_fd(),
        &sh.stopping,
        || listener.accept().map(|(stream, _)| stream),
        |stream| admit(sh, stream),
        |_| {},
    );
}

fn admit(sh: &Arc<Shared>, stream: TcpStream) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(Duration::from_secs(30)));
    let mut conns = sh.conns.lock();
    if conns.len() >= sh.opts.max_connections {
        drop(conns);
        let _ = write_response(
            &mut &stream,
            &HttpResponse::text(503, "too many connections\n"),
            false,
        );
        return;
    }
    let Ok(clone) = stream.try_clone() else {
        return;
    };
    let id = sh.next.fetch_add(1, Ordering::Relaxed);
    conns.insert(id, (clone, None));
    drop(conns);
    let sh2 = Arc::clone(sh);
    let t = std::thread::Builder::new()
        .name(format!("{}-{id}", sh.name))
        .stack_size(256 * 1024)
        .spawn(move || {
            serve(&sh2, stream);
            sh2.conns.lock().remove(&id);
        });
    match t {
        Ok(t) => {
            if let Some(c) = sh.conns.lock().get_mut(&id) {
                c.1 = Some(t);
            }
        }
        Err(_) => {
            sh.conns.lock().remove(&id);
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

fn write_response(w: &mut impl Write, resp: &HttpResponse, keep_alive: bool) -> io::Result<()> {
    let mut head = format!("HTTP/1.1 {} {}\r\n", resp.status, reason(resp.status));
    for (k, v) in &resp.headers {
        if !k.eq_ignore_ascii_case("content-length") && !k.eq_ignore_ascii_case("connection") {
            head.push_str(&format!("{k}: {}\r\n", v.replace(['\r', '\n'], " ")));
        }
    }
    head.push_str(&format!("Content-Length: {}\r\n", resp.body.len()));
    head.push_str(if keep_alive {
        "Connection: keep-alive\r\n\r\n"
    } else {
        "Connection: close\r\n\r\n"
    });
    let mut buf = head.into_bytes();
    buf.extend_from_slice(&resp.body);
    w.write_all(&buf)?;
    w.flush()
}

fn serve(sh: &Shared, stream: TcpStream) {
    let _ = stream.set_read_timeout(Some(sh.opts.read_timeout));
    let Ok(write_half) = stream.try_clone() else {
        return;
    };
    let mut w = write_half;
    let mut r = BufReader::new(stream);
    while !sh.stopping.load(Ordering::SeqCst) {
        match read_request(&mut r, &sh.opts) {
            Ok(req) => {
                let keep = !req
                    .header("connection")
                    .is_some_and(|c| c.eq_ignore_ascii_case("close"));
                let resp = (sh.handler)(&req);
                if write_response(&mut w, &resp, keep).is_err() || !keep {
                    break;
                }
            }
            Err(ReadError::Closed) => break,
            Err(ReadError::Bad(status, why)) => {
                let _ = write_response(
                    &mut w,
                    &HttpResponse::text(status, format!("{why}\n")),
                    false,
                );
                break;
            }
        }
    }
    let _ = w.shutdown(Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn server() -> HttpServer {
        let h: Handler = Arc::new(|req: &HttpRequest| {
            HttpResponse::text(
                200,
                format!(
                    "{} {} {} {}",
                    req.method,
                    req.path,
                    req.query,
                    String::from_utf8_lossy(&req.body)
                ),
            )
        });
        HttpServer::bind(
            "127.0.0.1:0".parse().unwrap(),
            "test-http",
            h,
            HttpOptions::default(),
        )
        .unwrap()
    }

    fn raw(addr: SocketAddr, data: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(data).unwrap();
        let _ = s.shutdown(Shutdown::Write);
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    #[test]
    fn keep_alive_with_either_body_framing() {
        let srv = server();
        for framing in [
            &b"Content-Length: 3\r\n\r\nabc"[..],
            b"Transfer-Encoding: chunked\r\n\r\n1;ext=v\r\na\r\n2\r\nbc\r\n0\r\nX-Trailer: t\r\n\r\n",
        ] {
            let mut input = b"POST /a?x=1 HTTP/1.1\r\nHost: h\r\n".to_vec();
            input.extend_from_slice(framing);
            input.extend_from_slice(b"GET /b HTTP/1.1\r\nConnection: close\r\n\r\n");
            let out = raw(srv.local_addr(), &input);
            assert!(out.contains("POST /a x=1 abc"), "{out}");
            assert!(out.contains("GET /b  "), "{out}");
        }
        srv.shutdown();
    }

    /// A refusal is answered with its status and closes the connection: a
    /// request after it is not read (request.rs's tests go through every
    /// malformed case).
    #[test]
    fn refusals_are_answered_then_the_connection_closes() {
        let srv = server();
        let big_head = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(40_000));
        let big_chunk = format!(
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n",
            2 << 20
        );
        for (bad, status) in [
            (&b"\x00\x01\x02\r\n\r\n"[..], "400"),
            (b"GET / HTTP/1.1\r\nno colon\r\n\r\n", "400"),
            (b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", "501"),
            (big_head.as_bytes(), "431"),
            (big_chunk.as_bytes(), "413"),
        ] {
            let mut input = bad.to_vec();
            input.extend_from_slice(b"GET /after HTTP/1.1\r\n\r\n");
            let out = raw(srv.local_addr(), &input);
            assert!(
                out.starts_with(&format!("HTTP/1.1 {status} ")),
                "{:?} -> {out}",
                String::from_utf8_lossy(&bad[..bad.len().min(60)])
            );
            assert!(out.contains("Connection: close\r\n"), "{out}");
            assert!(!out.contains("/after"), "{out}");
        }
        srv.shutdown();
    }

    #[test]
    fn shutdown_is_prompt_with_idle_clients() {
        let srv = server();
        let _idle: Vec<TcpStream> = (0..5)
            .map(|_| TcpStream::connect(srv.local_addr()).unwrap())
            .collect();
        std::thread::sleep(Duration::from_millis(50));
        let t = Instant::now();
        srv.shutdown();
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    }
}
