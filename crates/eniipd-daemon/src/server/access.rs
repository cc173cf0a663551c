//! Whether a peer may change allocations: its uid must be in
//! `allowed_uids`, or the socket group must be its primary or a
//! supplementary group. Who the peer is comes from [`eniip_util::peercred`].

use eniip_util::peercred::Peer;

/// May this peer `alloc` and `release`? `groups` is asked for only when the
/// uid and primary gid do not already decide it.
pub(crate) fn may_mutate(
    peer: &Peer,
    allowed_uids: &[u32],
    socket_gid: Option<u32>,
    groups: impl FnOnce() -> Vec<u32>,
) -> bool {
    if allowed_uids.contains(&peer.uid) {
        return true;
    }
    match socket_gid {
        Some(g) if peer.gid == g => true,
        Some(g) => groups().contains(&g),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(uid: u32, gid: u32) -> Peer {
        Peer { pid: 1, uid, gid }
    }

    #[test]
    fn access_rules() {
        assert!(may_mutate(&peer(0, 0), &[0], None, Vec::new));
        assert!(!may_mutate(&peer(1000, 1000), &[0], None, || vec![50]));
        assert!(may_mutate(&peer(1000, 50), &[0], Some(50), || panic!(
            "not needed"
        )));
        assert!(may_mutate(&peer(1000, 1000), &[0], Some(50), || vec![
            4, 50
        ]));
        assert!(!may_mutate(&peer(1000, 1000), &[0], Some(50), || vec![4]));
    }
}
