//! The daemon's side of the socket: the Unix-socket listener that serves
//! the line protocol ([`eniip_protocol::protocol`], which the clients speak too).
//!
//! The [`listener`] admits, evicts and stops connections; each
//! [`connection`] does framing, limits, peer credentials and access checks.
//! Every command a connection parses goes to the allocator as one
//! [`eniip_protocol::core::Command`] through [`eniip_protocol::core::Commands`], and the
//! answer is rendered back by [`eniip_protocol::protocol::answer_reply`].

pub(crate) mod access;
mod attachment_ids;
mod connection;
mod delivery;
pub mod listener;
pub mod socket;
pub(crate) mod starting;

use std::time::Duration;

use eniip_util::logging::RateLimit;

/// Listener settings: the admission limit, and each connection's
/// timeouts and access rules.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Open connections at most.
    pub max_connections: usize,
    /// Uids that may alloc/release.
    pub allowed_uids: Vec<u32>,
    /// Members of this group may alloc/release.
    pub socket_gid: Option<u32>,
    /// A request line must be complete this long after its first byte.
    pub line_timeout: Duration,
    /// A connection with no request this long is closed.
    pub idle_timeout: Duration,
    /// A reply must be written within this.
    pub write_timeout: Duration,
    /// Daemon version for `version`.
    pub version: String,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            max_connections: 256,
            allowed_uids: vec![0],
            socket_gid: None,
            line_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(2),
            version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }
}

/// One budget for every log line a client can cause, accepting or
/// serving it, so no client can flood the journal.
static CLIENT_LOG: std::sync::LazyLock<RateLimit> =
    std::sync::LazyLock::new(|| RateLimit::new(10, Duration::from_secs(10)));
