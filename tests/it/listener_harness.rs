//! The socket server ([`eniipd_daemon::server::listener::Server`]) in-process, on
//! a socket of its own in a fresh directory, its commands answered by what
//! the test puts behind it ([`Harness::backend`]). On drop the server is
//! stopped (a 2 s deadline) and the directory removed.

// `pub` here means "for the tests", not an API.
#![allow(unreachable_pub)]

use std::io::BufRead;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use eniip_protocol::core::Commands;
use eniip_protocol::protocol::client::Client;
use eniip_protocol::protocol::reply::Framer;
use eniipd_daemon::server::listener::{bind_socket, Server, ServerConfig};

pub struct Harness<B> {
    pub path: PathBuf,
    pub server: Option<Server>,
    /// What answers the server's commands; lives as long as the harness.
    pub backend: B,
    dir: PathBuf,
}

impl<B> Harness<B> {
    /// Binds `s.sock` (mode 0660) in a fresh directory and serves it with
    /// `cfg`, sending commands on `commands`.
    pub fn start(cfg: ServerConfig, commands: Commands, backend: B) -> Harness<B> {
        let dir = crate::common::tempdir("srv");
        let path = dir.join("s.sock");
        let (listener, _) = bind_socket(&path, 0o660, None).unwrap();
        let server = Server::start(listener, cfg, commands).unwrap();
        Harness {
            path,
            server: Some(server),
            backend,
            dir,
        }
    }

    /// A connection whose reads give up after 10 s.
    pub fn connect(&self) -> UnixStream {
        let s = UnixStream::connect(&self.path).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    /// Sends one line and reads the whole reply (within 10 s).
    pub fn ask(&self, line: &str) -> Vec<String> {
        let wait = Duration::from_secs(10);
        let mut c = Client::connect(&self.path, wait).unwrap();
        match c.ask_within(line, wait) {
            Ok(r) => r.into_lines(),
            Err(e) => panic!("{line}: {e}"),
        }
    }
}

impl<B> Drop for Harness<B> {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown(Instant::now() + Duration::from_secs(2));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A server config that lets this test's uid do everything.
pub fn me() -> ServerConfig {
    ServerConfig {
        allowed_uids: vec![nix::unistd::getuid().as_raw()],
        ..ServerConfig::default()
    }
}

/// One reply read off a stream a test wrote to by hand, framed as the
/// protocol's client frames it; panics if the connection closes first.
pub fn read_reply(r: &mut impl BufRead) -> Vec<String> {
    let mut framer = Framer::default();
    let mut got = 0;
    loop {
        let mut l = String::new();
        if r.read_line(&mut l).unwrap() == 0 {
            panic!("connection closed before the final line, after {got} lines");
        }
        got += 1;
        if let Some(reply) = framer.push(&l).unwrap() {
            return reply.into_lines();
        }
    }
}
