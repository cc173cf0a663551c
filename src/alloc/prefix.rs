//! Prefix mode's pure decisions (issue 13), kept apart from the actor so
//! they can be tested alone and wired in later: capacity, how a demand
//! turns into /28s and calls, which address an allocation takes (packing),
//! which prefixes a shrink gives back, and when a demand falls back to
//! single addresses.
//!
//! Invariants: an allocation packs into the fullest prefix that still has
//! a free address, so whole prefixes empty out; a prefix is given back only
//! with all 16 addresses idle and past stick/cooldown; pool sizes count
//! addresses, never prefixes. NOT WIRED INTO THE ALLOCATOR YET.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use crate::cloud::Ipv4Prefix;

/// Addresses in a prefix.
pub const PER_PREFIX: usize = Ipv4Prefix::SIZE as usize;
/// Prefixes in one Assign or Create call (`Ipv4PrefixCount` is 1 to 10).
pub const MAX_PREFIXES_PER_CALL: usize = 10;

/// Pool addresses per ENI in prefix mode: every IPv4 slot but the
/// primary's holds a /28 ((quota - 1) x 16).
pub fn ips_per_eni(ipv4_quota: usize) -> usize {
    ipv4_quota.saturating_sub(1) * PER_PREFIX
}

/// Capacity in prefix mode: usable ENIs x (quota - 1) x 16.
pub fn capacity(usable_enis: usize, ipv4_quota: usize) -> usize {
    usable_enis * ips_per_eni(ipv4_quota)
}

/// Prefixes to ask for `demand` more addresses on an ENI with `free_slots`
/// IPv4 slots left: whole /28s, never more than the slots.
pub fn prefixes_for(demand: usize, free_slots: usize) -> usize {
    demand.div_ceil(PER_PREFIX).min(free_slots)
}

/// `n` prefixes as calls of at most [`MAX_PREFIXES_PER_CALL`] each.
pub fn calls(n: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut left = n;
    while left > 0 {
        let c = left.min(MAX_PREFIXES_PER_CALL);
        out.push(c);
        left -= c;
    }
    out
}

/// How an ENI's next demand is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// /28 prefixes.
    Prefix,
    /// Single secondary addresses (prefix mode off, or no /28 could be had
    /// and the inhibit has not expired).
    Single,
}

/// The kind of the next Assign on an ENI: prefixes in prefix mode unless a
/// `PrefixExhausted` answer inhibited them (on its vswitch) until a time
/// still to come (Unix ms).
pub fn next_kind(prefix_mode: bool, prefix_inhibit_ms: Option<u64>, now_ms: u64) -> Kind {
    match (prefix_mode, prefix_inhibit_ms) {
        (false, _) => Kind::Single,
        (true, Some(until)) if until > now_ms => Kind::Single,
        (true, _) => Kind::Prefix,
    }
}

/// Addresses an ENI can still be asked for: `free_slots` IPv4 slots hold
/// 16 each as /28s, one each as single addresses.
pub fn room(kind: Kind, free_slots: usize) -> usize {
    match kind {
        Kind::Prefix => free_slots * PER_PREFIX,
        Kind::Single => free_slots,
    }
}

/// IPv4 slots that `pending` addresses in flight take, `in_prefixes` of
/// them asked as parts of /28s.
pub fn pending_slots(pending: usize, in_prefixes: usize) -> usize {
    in_prefixes.div_ceil(PER_PREFIX) + pending.saturating_sub(in_prefixes)
}

/// Units to queue for `n` addresses of demand: whole /28s' worth in
/// prefix kind (the surplus arrives anyway and is counted as pending),
/// never more than `limit` (room, backlog).
pub fn round_units(kind: Kind, n: usize, limit: usize) -> usize {
    match kind {
        Kind::Prefix => (n.div_ceil(PER_PREFIX) * PER_PREFIX).min(limit),
        Kind::Single => n.min(limit),
    }
}

/// The address an allocation takes: in the fullest prefix that has one
/// free (ties: the lower prefix), its lowest free address. `free` says
/// whether an address may be handed out (idle, not reserved or cooling).
pub fn pick(prefixes: &[Ipv4Prefix], free: impl Fn(Ipv4Addr) -> bool) -> Option<Ipv4Addr> {
    let mut best: Option<(usize, Ipv4Prefix, Ipv4Addr)> = None;
    for p in prefixes {
        let mut first_free = None;
        let mut taken = 0;
        for a in p.addresses() {
            if free(a) {
                first_free.get_or_insert(a);
            } else {
                taken += 1;
            }
        }
        let Some(a) = first_free else { continue };
        let better = match best {
            None => true,
            Some((t, bp, _)) => taken > t || (taken == t && *p < bp),
        };
        if better {
            best = Some((taken, *p, a));
        }
    }
    best.map(|(_, _, a)| a)
}

/// A prefix as a shrink sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// The prefix.
    pub prefix: Ipv4Prefix,
    /// Its ENI's addresses in use (fewer first: ENIs drain).
    pub eni_in_use: usize,
    /// All 16 idle and past stick and cooldown.
    pub reclaimable: bool,
}

/// The prefixes a shrink gives back: only wholly reclaimable ones, the
/// emptiest ENIs first, while the idle count stays above `max_idle` and
/// never drops below `min_idle` (sizes count addresses).
pub fn to_give_back(
    candidates: &[Candidate],
    idle: usize,
    min_idle: usize,
    max_idle: usize,
) -> Vec<Ipv4Prefix> {
    let mut c: Vec<&Candidate> = candidates.iter().filter(|c| c.reclaimable).collect();
    c.sort_by_key(|c| (c.eni_in_use, c.prefix));
    let mut left = idle;
    let mut out = Vec::new();
    for cand in c {
        if left <= max_idle || left < min_idle + PER_PREFIX {
            break;
        }
        left -= PER_PREFIX;
        out.push(cand.prefix);
    }
    out
}

/// Per ENI, how many of its pool addresses sit in prefixes and how many
/// are single: what `enis` and `metrics` show as the ENI's mode.
pub fn mode_counts(prefixes: &[Ipv4Prefix], addresses: &[Ipv4Addr]) -> (usize, usize) {
    let in_prefix = addresses
        .iter()
        .filter(|a| prefixes.iter().any(|p| p.contains(**a)))
        .count();
    (in_prefix, addresses.len() - in_prefix)
}

/// Groups addresses by the prefix holding them (addresses outside every
/// prefix are left out): the audit's view of "no address outside a prefix
/// or the secondary set".
pub fn by_prefix(
    prefixes: &[Ipv4Prefix],
    addresses: &[Ipv4Addr],
) -> BTreeMap<Ipv4Prefix, Vec<Ipv4Addr>> {
    let mut m: BTreeMap<Ipv4Prefix, Vec<Ipv4Addr>> =
        prefixes.iter().map(|p| (*p, Vec::new())).collect();
    for a in addresses {
        if let Some(v) = m.get_mut(&Ipv4Prefix::containing(*a)) {
            v.push(*a);
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn p(s: &str) -> Ipv4Prefix {
        s.parse().unwrap()
    }

    #[test]
    fn capacity_math_of_the_issue() {
        // ecs.g7.large: 3 ENIs, 6 IPv4 each: one secondary ENI holds 80.
        assert_eq!(ips_per_eni(6), 80);
        assert_eq!(capacity(2, 6), 160);
        // ecs.g7.4xlarge: 8 ENIs, 30 IPv4 each.
        assert_eq!(capacity(7, 30), 7 * 29 * 16);
        assert_eq!(ips_per_eni(1), 0);
        assert_eq!(ips_per_eni(0), 0);
    }

    #[test]
    fn demand_becomes_whole_prefixes_in_calls_of_ten() {
        assert_eq!(prefixes_for(1, 5), 1);
        assert_eq!(prefixes_for(16, 5), 1);
        assert_eq!(prefixes_for(17, 5), 2);
        assert_eq!(prefixes_for(80, 5), 5);
        assert_eq!(prefixes_for(81, 5), 5);
        assert_eq!(prefixes_for(0, 5), 0);
        // 160 cold addresses on a 4xlarge ENI (29 slots): 10 prefixes, one
        // call.
        assert_eq!(calls(prefixes_for(160, 29)), vec![10]);
        assert_eq!(calls(23), vec![10, 10, 3]);
        assert!(calls(0).is_empty());
    }

    #[test]
    fn fallback_lasts_as_long_as_the_inhibit() {
        let now = 1_000_000;
        let later = now + 30_000;
        assert_eq!(next_kind(false, None, now), Kind::Single);
        assert_eq!(next_kind(true, None, now), Kind::Prefix);
        assert_eq!(next_kind(true, Some(later), now), Kind::Single);
        assert_eq!(next_kind(true, Some(now), later), Kind::Prefix);
    }

    #[test]
    fn allocation_packs_into_the_fullest_prefix() {
        let a = p("10.0.0.16/28");
        let b = p("10.0.0.32/28");
        let mut busy: BTreeSet<Ipv4Addr> = BTreeSet::new();
        // Empty: the lower prefix, its first address.
        let pick1 = pick(&[b, a], |x| !busy.contains(&x)).unwrap();
        assert_eq!(pick1, Ipv4Addr::new(10, 0, 0, 16));
        // b fuller than a: b's lowest free address.
        busy.insert(Ipv4Addr::new(10, 0, 0, 33));
        busy.insert(Ipv4Addr::new(10, 0, 0, 34));
        busy.insert(Ipv4Addr::new(10, 0, 0, 16));
        assert_eq!(
            pick(&[a, b], |x| !busy.contains(&x)),
            Some(Ipv4Addr::new(10, 0, 0, 32))
        );
        // A full prefix is skipped.
        busy.extend(b.addresses());
        assert_eq!(
            pick(&[a, b], |x| !busy.contains(&x)),
            Some(Ipv4Addr::new(10, 0, 0, 17))
        );
        busy.extend(a.addresses());
        assert_eq!(pick(&[a, b], |x| !busy.contains(&x)), None);
        // 80 allocations from five prefixes are 80 distinct addresses, and
        // each prefix fills before the next is touched.
        let five: Vec<Ipv4Prefix> = (1..=5)
            .map(|i| p(&format!("10.0.1.{}/28", i * 16)))
            .collect();
        let mut taken = BTreeSet::new();
        for n in 0..80 {
            let x = pick(&five, |x| !taken.contains(&x)).unwrap();
            assert!(taken.insert(x));
            let touched = five
                .iter()
                .filter(|q| q.addresses().any(|y| taken.contains(&y)))
                .count();
            assert_eq!(touched, n / 16 + 1);
        }
        assert_eq!(pick(&five, |x| !taken.contains(&x)), None);
    }

    #[test]
    fn shrink_gives_back_whole_idle_prefixes_only() {
        let c = |s: &str, eni_in_use, reclaimable| Candidate {
            prefix: p(s),
            eni_in_use,
            reclaimable,
        };
        let cands = [
            c("10.0.0.16/28", 3, true),
            c("10.0.0.32/28", 0, true),
            c("10.0.0.48/28", 0, false),
            c("10.0.0.64/28", 9, true),
        ];
        // 60 idle, max 20, min 0: the drained ENI's prefix first, then by
        // in-use count; stops once idle is at most max.
        assert_eq!(
            to_give_back(&cands, 60, 0, 20),
            vec![p("10.0.0.32/28"), p("10.0.0.16/28"), p("10.0.0.64/28")]
        );
        assert_eq!(
            to_give_back(&cands, 40, 0, 20),
            vec![p("10.0.0.32/28"), p("10.0.0.16/28")]
        );
        // Never below min: 40 idle, min 30 leaves room for none.
        assert!(to_give_back(&cands, 40, 30, 20).is_empty());
        // At or under max: nothing.
        assert!(to_give_back(&cands, 20, 0, 20).is_empty());
        // A prefix with one address in use or cooling is never given back.
        assert!(to_give_back(&[c("10.0.0.48/28", 0, false)], 100, 0, 0).is_empty());
    }

    #[test]
    fn modes_and_grouping() {
        let a = p("10.0.0.16/28");
        let ips = [
            Ipv4Addr::new(10, 0, 0, 17),
            Ipv4Addr::new(10, 0, 0, 30),
            Ipv4Addr::new(10, 0, 0, 200),
        ];
        assert_eq!(mode_counts(&[a], &ips), (2, 1));
        assert_eq!(mode_counts(&[], &ips), (0, 3));
        let g = by_prefix(&[a], &ips);
        assert_eq!(g[&a].len(), 2);
        assert_eq!(g.len(), 1);
    }
}
