//! Which address of an ENI's IPv6 /80 an owner gets ([`pick`]): a pure
//! function of the owner's name and of the addresses taken.
//!
//! The /80 holds 2^48 addresses and the cloud assigns it whole, so the
//! choice is eniipd's. It starts from a hash of the owner (SHA-256, a
//! fixed function: the same owner lands on the same address in every
//! version and on every node) and probes linearly past addresses taken by
//! others. So a reused owner (a StatefulSet pod re-created under its name)
//! gets its IPv6 back whenever it lands on the same ENI, even when its
//! IPv4 changed, and two owners never share one: `taken` says which are
//! someone's. The durable record stays the truth: an allocation restored
//! from the state files keeps the address recorded, whatever this says.
//!
//! Invariants (its unit tests): the address is inside the /80, never its
//! network address (host part 0), never one `taken` names; at most
//! `|taken| + 1` probes find one, since only taken addresses are skipped.

use std::net::Ipv6Addr;

use sha2::{Digest, Sha256};

use eniip_protocol::core::Ipv6Prefix;

/// The host part where `owner`'s probe starts.
fn start(owner: &str) -> u64 {
    let d = Sha256::digest(owner.as_bytes());
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    u64::from_be_bytes(b) & Ipv6Prefix::HOST_MAX
}

/// The address of `p` for `owner`: the first from its hash on that is
/// not the network address and not `taken`.
pub(crate) fn pick(p: Ipv6Prefix, owner: &str, taken: impl Fn(Ipv6Addr) -> bool) -> Ipv6Addr {
    probe(p, start(owner), taken)
}

/// The first address of `p` from host part `host` on (wrapping) that is
/// not the network address and not `taken`.
fn probe(p: Ipv6Prefix, mut host: u64, taken: impl Fn(Ipv6Addr) -> bool) -> Ipv6Addr {
    loop {
        let a = p.address(host);
        if host != 0 && !taken(a) {
            return a;
        }
        host = host.wrapping_add(1) & Ipv6Prefix::HOST_MAX;
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::collections::HashSet;

    use super::*;

    fn p() -> Ipv6Prefix {
        "2408:4005:3ab:100:7::/80".parse().unwrap()
    }

    #[test]
    fn an_owner_lands_on_the_same_address_every_time_and_inside_the_80() {
        let a = pick(p(), "default/web-0", |_| false);
        assert_eq!(a, pick(p(), "default/web-0", |_| false));
        assert!(p().contains(a));
        // A fixed function: this value must never change between
        // versions (a restart without state files would move pods).
        assert_eq!(a.to_string(), "2408:4005:3ab:100:7:2afe:623a:6f1e");
        let q: Ipv6Prefix = "2408:4005:3ab:100:9::/80".parse().unwrap();
        assert_eq!(
            Ipv6Prefix::host(pick(q, "default/web-0", |_| false)),
            Ipv6Prefix::host(a),
            "the same host part on another ENI's /80"
        );
        assert_ne!(a, pick(p(), "default/web-1", |_| false));
    }

    #[test]
    fn two_owners_never_share_one_and_probing_is_bounded() {
        let mut taken = HashSet::new();
        for i in 0..2000 {
            let a = pick(p(), &format!("ns/pod-{i}"), |b| taken.contains(&b));
            assert!(p().contains(a) && Ipv6Prefix::host(a) != 0);
            assert!(taken.insert(a), "{a} twice");
        }
        // Everything from the start taken: the next free one, after
        // exactly as many probes as were taken.
        let first = pick(p(), "x", |_| false);
        let blocked: HashSet<Ipv6Addr> = (0..50)
            .map(|i| p().address(Ipv6Prefix::host(first) + i))
            .collect();
        let probes = Cell::new(0);
        let a = pick(p(), "x", |b| {
            probes.set(probes.get() + 1);
            blocked.contains(&b)
        });
        assert_eq!(a, p().address(Ipv6Prefix::host(first) + 50));
        assert_eq!(probes.get(), 51);
    }

    #[test]
    fn the_probe_wraps_and_skips_the_network_address() {
        let top = Ipv6Prefix::HOST_MAX;
        let taken = |b: Ipv6Addr| Ipv6Prefix::host(b) >= top - 1;
        assert_eq!(Ipv6Prefix::host(probe(p(), top - 1, taken)), 1);
        assert_eq!(Ipv6Prefix::host(probe(p(), 0, |_| false)), 1);
        assert_eq!(probe(p(), top, |_| false), p().address(top));
    }
}
