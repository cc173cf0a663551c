//! Who is on the other end of a Unix-socket connection: the credentials
//! the kernel took at its `connect` or `listen` (SO_PEERCRED) and its supplementary
//! groups. Used by the socket server's access checks and by the node
//! liveness check ([`super::node_liveness`]); it decides nothing itself.

use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;

/// Credentials of a connected peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Process id (0 if unknown).
    pub pid: i32,
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
}

impl Peer {
    /// SO_PEERCRED of a connected stream.
    pub fn of(stream: &UnixStream) -> std::io::Result<Peer> {
        let c = nix::sys::socket::getsockopt(
            &stream.as_fd(),
            nix::sys::socket::sockopt::PeerCredentials,
        )?;
        Ok(Peer {
            pid: c.pid(),
            uid: c.uid(),
            gid: c.gid(),
        })
    }
}

/// The peer's supplementary groups: SO_PEERGROUPS, else the `Groups:` line
/// of `/proc/<pid>/status`, else none.
pub fn supplementary_groups(stream: &UnixStream, pid: i32) -> Vec<u32> {
    peer_groups(stream).unwrap_or_else(|| proc_groups(pid))
}

fn peer_groups(stream: &UnixStream) -> Option<Vec<u32>> {
    use std::os::fd::AsRawFd;
    let mut groups = vec![0 as nix::libc::gid_t; 256];
    let mut len = (groups.len() * std::mem::size_of::<nix::libc::gid_t>()) as nix::libc::socklen_t;
    // SAFETY: the buffer is valid for `len` bytes and outlives the call;
    // the kernel writes at most `len` bytes and stores the size used.
    #[allow(unsafe_code)]
    let rc = unsafe {
        nix::libc::getsockopt(
            stream.as_raw_fd(),
            nix::libc::SOL_SOCKET,
            nix::libc::SO_PEERGROUPS,
            groups.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return None;
    }
    groups.truncate(len as usize / std::mem::size_of::<nix::libc::gid_t>());
    Some(groups)
}

fn proc_groups(pid: i32) -> Vec<u32> {
    if pid <= 0 {
        return Vec::new();
    }
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| parse_status_groups(&s))
        .unwrap_or_default()
}

/// Parses the `Groups:` line of `/proc/<pid>/status`.
pub fn parse_status_groups(status: &str) -> Option<Vec<u32>> {
    let line = status.lines().find(|l| l.starts_with("Groups:"))?;
    Some(
        line["Groups:".len()..]
            .split_whitespace()
            .filter_map(|g| g.parse().ok())
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_groups() {
        let s = "Name:\tx\nUid:\t1 1 1 1\nGroups:\t4 24 27 \nNgid:\t0\n";
        assert_eq!(parse_status_groups(s), Some(vec![4, 24, 27]));
        assert_eq!(parse_status_groups("Name: x\n"), None);
    }

    #[test]
    fn own_credentials_over_a_socketpair() {
        let (a, _b) = UnixStream::pair().unwrap();
        let p = Peer::of(&a).unwrap();
        assert_eq!(p.uid, nix::unistd::getuid().as_raw());
        assert_eq!(p.pid as u32, std::process::id());
        let _ = supplementary_groups(&a, p.pid);
    }
}
