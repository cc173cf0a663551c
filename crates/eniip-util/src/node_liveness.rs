//! Is the eniipd of a node id running on this host? Each daemon holds an
//! abstract Unix socket named after its node id for its whole life (no
//! file, gone with the process however it ends); a connect tells another
//! daemon whether the node that tagged an ENI is alive. So a second daemon
//! refuses to run beside a live one, and adopts the ENIs of one that is
//! gone for good (its state directory wiped or moved).
//!
//! Abstract names are visible to every local user (`/proc/net/unix`) and
//! anyone may bind one, so the name alone proves nothing: only a listener
//! whose credentials (`SO_PEERCRED`, taken by the kernel at `listen`) are
//! root's or this process's own uid counts as an eniipd. A listener of
//! any other user is a squatter: it never makes a node look alive, and it
//! never keeps the node's own daemon from starting.

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};

use super::peercred::Peer;

fn name(node_id: &str) -> Vec<u8> {
    format!("eniipd-node-{node_id}").into_bytes()
}

/// Who listens on a node's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// Nobody: the node does not run here.
    None,
    /// Root or this process's uid: an eniipd.
    Trusted(Peer),
    /// Another user: not an eniipd, whatever the name says.
    Squatter(Peer),
    /// A listener whose backlog is full, so its credentials cannot be read.
    Unknown,
}

/// Who listens on `node_id`'s name now.
pub fn holder(node_id: &str) -> io::Result<Holder> {
    let addr = SocketAddr::from_abstract_name(name(node_id))?;
    match UnixStream::connect_addr(&addr) {
        Ok(s) => {
            let peer = Peer::of(&s)?;
            let me = nix::unistd::geteuid().as_raw();
            Ok(if peer.uid == 0 || peer.uid == me {
                Holder::Trusted(peer)
            } else {
                Holder::Squatter(peer)
            })
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Holder::Unknown),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => Ok(Holder::None),
        Err(e) => Err(e),
    }
}

/// The beacon of a running daemon; dropping it says the node is gone.
#[derive(Debug)]
pub struct Beacon {
    /// Bound for as long as the beacon lives: the name is ours while it is.
    _listener: Option<UnixListener>,
    squatter: Option<Peer>,
}

impl Beacon {
    /// Announces `node_id` as running here. `AddrInUse`: another eniipd
    /// (root's or this uid's listener, or one that cannot be asked) runs
    /// with this node id. When another user holds the name, the daemon runs
    /// without a beacon and [`Beacon::squatter`] names that process.
    pub fn hold(node_id: &str) -> io::Result<Beacon> {
        let addr = SocketAddr::from_abstract_name(name(node_id))?;
        let busy = match UnixListener::bind_addr(&addr) {
            Ok(l) => {
                return Ok(Beacon {
                    _listener: Some(l),
                    squatter: None,
                })
            }
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => e,
            Err(e) => return Err(e),
        };
        match holder(node_id)? {
            Holder::Squatter(p) => Ok(Beacon {
                _listener: None,
                squatter: Some(p),
            }),
            // Gone between the bind and the connect: try once more.
            Holder::None => Ok(Beacon {
                _listener: Some(UnixListener::bind_addr(&addr)?),
                squatter: None,
            }),
            Holder::Trusted(p) => Err(io::Error::new(
                busy.kind(),
                format!(
                    "@{} is held by pid {} (uid {})",
                    String::from_utf8_lossy(&name(node_id)),
                    p.pid,
                    p.uid
                ),
            )),
            Holder::Unknown => Err(io::Error::new(
                busy.kind(),
                format!(
                    "@{} is held by a listener that takes no connection (`ss -xlp` names it)",
                    String::from_utf8_lossy(&name(node_id))
                ),
            )),
        }
    }

    /// Another user's process holding this node's name: this daemon runs,
    /// but other eniipd on the host cannot see it running.
    pub fn squatter(&self) -> Option<&Peer> {
        self.squatter.as_ref()
    }

    /// True when the name is this process's own listener.
    #[cfg(test)]
    pub fn held(&self) -> bool {
        self._listener.is_some()
    }
}

/// True when a daemon with `node_id` runs on this host (in this network
/// namespace): a listener of root or of this uid holds its name. A full
/// backlog is a listener that exists, taken as alive (never adopt the ENIs
/// of a daemon that may run).
pub fn alive(node_id: &str) -> bool {
    match holder(node_id) {
        Ok(Holder::Trusted(_) | Holder::Unknown) => true,
        Ok(Holder::None) | Err(_) => false,
        // Debug: any local user can bind the name, and reconcile asks
        // every cycle (the daemon that owns the name warns at its start).
        Ok(Holder::Squatter(p)) => {
            log::debug!(
                "@{} is held by pid {} of uid {}, not an eniipd: node {node_id} is taken as gone",
                String::from_utf8_lossy(&name(node_id)),
                p.pid,
                p.uid
            );
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_beacon_is_alive_and_a_dropped_one_is_not() {
        let id = format!("test{}", std::process::id());
        assert!(!alive(&id));
        let b = Beacon::hold(&id).unwrap();
        assert!(b.held() && b.squatter().is_none());
        assert!(alive(&id));
        assert!(matches!(holder(&id), Ok(Holder::Trusted(_))));
        assert_eq!(
            Beacon::hold(&id).unwrap_err().kind(),
            io::ErrorKind::AddrInUse
        );
        drop(b);
        assert!(!alive(&id));
        assert_eq!(holder(&id).unwrap(), Holder::None);
    }
}
