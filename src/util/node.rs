//! Is the eniipd of a node id running on this host? Each daemon holds an
//! abstract Unix socket named after its node id for its whole life (no
//! file, gone with the process however it ends); a connect tells another
//! daemon whether the node that tagged an ENI is alive. So a second daemon
//! refuses to run beside a live one, and adopts the ENIs of one that is
//! gone for good (its state directory wiped or moved).

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};

fn name(node_id: &str) -> Vec<u8> {
    format!("eniipd-node-{node_id}").into_bytes()
}

/// The beacon of a running daemon; dropping it says the node is gone.
#[derive(Debug)]
pub struct Beacon {
    _listener: UnixListener,
}

impl Beacon {
    /// Announces `node_id` as running here. `AddrInUse`: another process
    /// already runs with this node id.
    pub fn hold(node_id: &str) -> io::Result<Beacon> {
        let addr = SocketAddr::from_abstract_name(name(node_id))?;
        Ok(Beacon {
            _listener: UnixListener::bind_addr(&addr)?,
        })
    }
}

/// True when a daemon with `node_id` runs on this host (in this network
/// namespace).
pub fn alive(node_id: &str) -> bool {
    let Ok(addr) = SocketAddr::from_abstract_name(name(node_id)) else {
        return false;
    };
    match UnixStream::connect_addr(&addr) {
        Ok(_) => true,
        // A full backlog is a listener that exists.
        Err(e) => e.kind() == io::ErrorKind::WouldBlock,
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
        assert!(alive(&id));
        assert_eq!(
            Beacon::hold(&id).unwrap_err().kind(),
            io::ErrorKind::AddrInUse
        );
        drop(b);
        assert!(!alive(&id));
    }
}
