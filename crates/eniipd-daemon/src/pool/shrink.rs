//! What the pool can give back to the cloud: idle secondaries to shed,
//! whole idle prefixes, invalid addresses, ENIs holding nothing but their
//! idle primary. A prefix's address is never given back on its own: the
//! cloud would answer that it is not a secondary address of the ENI, and
//! the /28 would stay assigned while the pool forgot its addresses.
//!
//! Pure functions of [`PoolState`]'s read accessors: choosing changes
//! nothing (the caller marks what it gives back releasing).

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use super::choose::not_idle_by_eni;
use super::{EniPhase, IpState, PoolIp, PoolState};
use eniip_cloud::Ipv4Prefix;

/// Chooses up to `n` idle secondary addresses to give back to the cloud,
/// from the ENIs with the fewest addresses in use first (so whole ENIs
/// drain), grouped by ENI.
pub(crate) fn shed_candidates(pool: &PoolState, n: usize) -> Vec<(String, Vec<Ipv4Addr>)> {
    if n == 0 {
        return Vec::new();
    }
    let inuse = not_idle_by_eni(pool);
    let mut idle: Vec<&PoolIp> = pool
        .states()
        .filter(|(ip, state)| {
            *state == IpState::Idle
                && !ip.primary()
                && ip.prefix().is_none()
                && pool.allocatable(ip)
        })
        .map(|(ip, _)| ip)
        .collect();
    idle.sort_by_key(|ip| {
        (
            inuse.get(ip.eni()).copied().unwrap_or(0),
            ip.eni().to_string(),
            std::cmp::Reverse(ip.v4()),
        )
    });
    let mut grouped: Vec<(String, Vec<Ipv4Addr>)> = Vec::new();
    for ip in idle.into_iter().take(n) {
        match grouped.last_mut() {
            Some((eni, v)) if eni == ip.eni() => v.push(ip.v4()),
            _ => grouped.push((ip.eni().to_string(), vec![ip.v4()])),
        }
    }
    grouped
}

/// Invalid secondary addresses (with their IPv6 pairs) and unpaired IPv6
/// to unassign, by ENI.
pub(crate) fn invalid_to_release(pool: &PoolState) -> Vec<(String, Vec<Ipv4Addr>, Vec<Ipv6Addr>)> {
    let mut by_eni: BTreeMap<String, (Vec<Ipv4Addr>, Vec<Ipv6Addr>)> = BTreeMap::new();
    for (ip, state) in pool.states() {
        if state == IpState::Invalid && !ip.primary() && !ip.releasing() && ip.prefix().is_none() {
            let e = by_eni.entry(ip.eni().to_string()).or_default();
            e.0.push(ip.v4());
            e.1.extend(ip.v6());
        }
    }
    for (v6, eni) in pool.ips().unpaired() {
        by_eni.entry(eni.to_string()).or_default().1.push(v6);
    }
    by_eni
        .into_iter()
        .filter(|(eni, _)| pool.eni(eni).is_some_and(|e| e.phase() == EniPhase::Ready))
        .map(|(eni, (v4, v6))| (eni, v4, v6))
        .collect()
}

/// ENIs holding nothing but their idle primary address, with nothing in
/// flight: they can be detached and deleted.
pub(crate) fn freeable_enis(pool: &PoolState) -> Vec<String> {
    pool.enis()
        .iter()
        .filter(|e| e.settled() && !e.gone() && e.prefixes().is_empty())
        .filter(|e| {
            let mut on = pool.ips().on(e.id());
            matches!(
                (on.next(), on.next()),
                (Some(ip), None) if ip.primary() && pool.is_idle(ip) && !ip.releasing()
            ) && pool.ips().unpaired_on(e.id()) == 0
        })
        .map(|e| e.id().to_string())
        .collect()
}

/// One prefix as a shrink sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PrefixCandidate {
    /// Its ENI.
    pub(crate) eni: String,
    /// The /28.
    pub(crate) prefix: Ipv4Prefix,
    /// Addresses in use (not idle) on its ENI.
    pub(crate) eni_in_use: usize,
    /// All 16 idle (past any reservation or cool-down), with nothing in
    /// flight.
    pub(crate) reclaimable: bool,
}

/// Every prefix of a ready ENI, as a shrink sees it.
pub(crate) fn prefix_candidates(pool: &PoolState) -> Vec<PrefixCandidate> {
    let inuse = not_idle_by_eni(pool);
    let mut out = Vec::new();
    for e in pool.enis().iter() {
        if e.phase() != EniPhase::Ready || e.gone() {
            continue;
        }
        for p in e.prefixes() {
            let reclaimable = p.addresses().all(|a| {
                pool.ip(a).is_some_and(|ip| {
                    ip.eni() == e.id() && pool.is_idle(ip) && !ip.releasing() && !ip.lost()
                })
            });
            out.push(PrefixCandidate {
                eni: e.id().to_string(),
                prefix: *p,
                eni_in_use: inuse.get(e.id()).copied().unwrap_or(0),
                reclaimable,
            });
        }
    }
    out
}
