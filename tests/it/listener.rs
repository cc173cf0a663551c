//! The socket server ([`eniipd::server::listener::Server`]) in-process, on
//! a socket of its own in a fresh directory, its commands answered by what
//! the test puts behind it ([`Harness::backend`]). On drop the server is
//! stopped (a 2 s deadline) and the directory removed.

// `pub` here means "for the tests", not an API.
#![allow(unreachable_pub)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use eniipd::core::Commands;
use eniipd::protocol::is_final_line;
use eniipd::server::listener::{bind_socket, Server, ServerConfig};

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

    /// Sends one line and reads the whole reply.
    pub fn ask(&self, line: &str) -> Vec<String> {
        let mut s = self.connect();
        s.write_all(format!("{line}\n").as_bytes()).unwrap();
        read_reply(&mut BufReader::new(s))
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

/// One reply, through its final line; panics if the connection closes
/// first.
pub fn read_reply(r: &mut impl BufRead) -> Vec<String> {
    let mut lines = Vec::new();
    loop {
        let mut l = String::new();
        if r.read_line(&mut l).unwrap() == 0 {
            panic!("connection closed before the final line; got {lines:?}");
        }
        let l = l.trim_end().to_string();
        let done = is_final_line(&l);
        lines.push(l);
        if done {
            return lines;
        }
    }
}
