//! Prefix mode's pure decisions (issue 13), apart from the actor so they
//! can be tested alone: addresses per ENI, how a demand turns into /28s,
//! room and pending counted in IPv4 slots, which prefixes a shrink gives
//! back, and when a demand falls back to single addresses; in dual stack
//! (issue 32) where an ENI's new IPv6 come from (its /80, a /80 asked
//! first, or single addresses). Packing (an allocation takes an address of
//! the fullest prefix) is the pool's `best_idle`.
//!
//! Invariants: a prefix is given back only with all 16 addresses idle and
//! past stick/cooldown; pool sizes count addresses, never prefixes; in
//! dual stack /28s are asked only for an ENI whose IPv6 come from a /80
//! (16 single IPv6 addresses a /28 would overrun its IPv6 quota).

use crate::pool::shrink::PrefixCandidate;
use eniip_cloud::Ipv4Prefix;

/// Addresses in a prefix.
pub(crate) const PER_PREFIX: usize = Ipv4Prefix::SIZE as usize;
/// Pool addresses per ENI in prefix mode: every IPv4 slot but the
/// primary's holds a /28 ((quota - 1) x 16).
pub(crate) fn ips_per_eni(ipv4_quota: usize) -> usize {
    ipv4_quota.saturating_sub(1) * PER_PREFIX
}

/// Prefixes to ask for `demand` more addresses on an ENI with `free_slots`
/// IPv4 slots left: whole /28s, never more than the slots.
pub(crate) fn prefixes_for(demand: usize, free_slots: usize) -> usize {
    demand.div_ceil(PER_PREFIX).min(free_slots)
}

/// How an ENI's next demand is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// /28 prefixes.
    Prefix,
    /// Single secondary addresses (prefix mode off, or no /28 could be had
    /// and the inhibit has not expired).
    Single,
}

/// Where the IPv6 pairs of an ENI's new addresses come from (dual stack).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum V6From {
    /// Its /80, which it holds: no IPv6 call.
    Prefix,
    /// A /80, which it does not hold yet: asked first (with the create,
    /// or one AssignIpv6Addresses with `Ipv6PrefixCount=1`).
    NewPrefix,
    /// One AssignIpv6Addresses address per IPv4.
    Single,
}

/// Where the IPv6 of an ENI's next addresses come from: none in IPv4
/// stack; its /80 when it holds one (whatever the mode: a node that turned
/// prefix mode off keeps carving from the /80s it has); in prefix mode a
/// new /80, unless the cloud refused the ENI one (`refused`: its IPv6
/// quota) or its vswitch had none to give (inhibited until a time still to
/// come, Unix ms); else single addresses.
pub(crate) fn next_v6(
    dual: bool,
    prefix_mode: bool,
    (has_prefix, refused): (bool, bool),
    inhibit_ms: Option<u64>,
    now_ms: u64,
) -> Option<V6From> {
    if !dual {
        return None;
    }
    Some(if has_prefix {
        V6From::Prefix
    } else if prefix_mode && !refused && inhibit_ms.is_none_or(|until| until <= now_ms) {
        V6From::NewPrefix
    } else {
        V6From::Single
    })
}

/// An ENI's IPv4 kind given where its IPv6 come from: /28s only with a
/// /80 to carve their pairs from.
pub(crate) fn kind_with(kind: Kind, v6: Option<V6From>) -> Kind {
    match v6 {
        Some(V6From::Single) => Kind::Single,
        _ => kind,
    }
}

/// IPv6 slots an ENI without a /80 still has for single addresses:
/// `quota` (EniIpv6AddressQuantity) less `used` (its single IPv6 and /80s)
/// less the single addresses in flight (`pending`, `in_prefixes` of them
/// parts of /28s, which take none).
pub(crate) fn v6_room(quota: usize, used: usize, pending: usize, in_prefixes: usize) -> usize {
    quota.saturating_sub(used + pending.saturating_sub(in_prefixes))
}

/// The kind of the next Assign on an ENI: prefixes in prefix mode unless a
/// `PrefixExhausted` answer inhibited them (on its vswitch) until a time
/// still to come (Unix ms).
pub(crate) fn next_kind(prefix_mode: bool, prefix_inhibit_ms: Option<u64>, now_ms: u64) -> Kind {
    match (prefix_mode, prefix_inhibit_ms) {
        (false, _) => Kind::Single,
        (true, Some(until)) if until > now_ms => Kind::Single,
        (true, _) => Kind::Prefix,
    }
}

/// Addresses an ENI can still be asked for: `free_slots` IPv4 slots hold
/// 16 each as /28s, one each as single addresses.
pub(crate) fn room(kind: Kind, free_slots: usize) -> usize {
    match kind {
        Kind::Prefix => free_slots * PER_PREFIX,
        Kind::Single => free_slots,
    }
}

/// IPv4 slots that `pending` addresses in flight take, `in_prefixes` of
/// them asked as parts of /28s.
pub(crate) fn pending_slots(pending: usize, in_prefixes: usize) -> usize {
    in_prefixes.div_ceil(PER_PREFIX) + pending.saturating_sub(in_prefixes)
}

/// Units to queue for `n` addresses of demand: whole /28s' worth in
/// prefix kind (the surplus arrives anyway and is counted as pending),
/// never more than `limit` (room, backlog).
pub(crate) fn round_units(kind: Kind, n: usize, limit: usize) -> usize {
    match kind {
        Kind::Prefix => (n.div_ceil(PER_PREFIX) * PER_PREFIX).min(limit),
        Kind::Single => n.min(limit),
    }
}

/// How a new ENI is asked for, for `demand` units of demand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CreateShape {
    /// The units of demand it serves (the first tickets).
    pub(crate) demand: usize,
    /// /28 prefixes beside its primary (0: single addresses).
    pub(crate) prefixes: usize,
    /// Tickets it carries: the demand, then what a /28 brings beyond it
    /// (counted as the pool's, so addresses in flight are counted once).
    pub(crate) tickets: usize,
    /// Single addresses it asks, its primary included: with `prefixes`,
    /// only if its vswitch has no free /28.
    pub(crate) singles: usize,
}

/// The shape of a create: single addresses are one call's worth
/// (`max_per_call` and the vswitch's `call_size`, within the ENI's
/// `slots` beside its primary); /28s are whole ones for the demand beyond
/// the primary, at least one (the primary is handed out last, and the next
/// demand then needs no call of its own), within the slots.
pub(crate) fn create_shape(
    kind: Kind,
    demand: usize,
    max_per_call: usize,
    slots: usize,
    call_size: usize,
) -> CreateShape {
    let singles_max = max_per_call.min(slots) + 1;
    let demand = match kind {
        Kind::Single => demand.min(singles_max).min(call_size),
        Kind::Prefix => demand,
    };
    let prefixes = match kind {
        Kind::Prefix => prefixes_for(demand.saturating_sub(1).max(1), slots),
        Kind::Single => 0,
    };
    CreateShape {
        demand,
        prefixes,
        tickets: if prefixes > 0 {
            1 + prefixes * PER_PREFIX
        } else {
            demand
        },
        singles: demand.min(singles_max),
    }
}

/// The prefixes a shrink gives back: only wholly reclaimable ones, the
/// emptiest ENIs (fewest addresses in use: they drain) first, while the idle count stays above `max_idle` and
/// never drops below `min_idle` (sizes count addresses).
pub(crate) fn to_give_back(
    candidates: &[PrefixCandidate],
    idle: usize,
    min_idle: usize,
    max_idle: usize,
) -> Vec<Ipv4Prefix> {
    let mut c: Vec<&PrefixCandidate> = candidates.iter().filter(|c| c.reclaimable).collect();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Ipv4Prefix {
        s.parse().unwrap()
    }

    #[test]
    fn a_create_asks_one_call_of_singles_or_whole_prefixes() {
        let single = |demand, call| create_shape(Kind::Single, demand, 10, 14, call);
        assert_eq!(
            single(4, 10),
            CreateShape {
                demand: 4,
                prefixes: 0,
                tickets: 4,
                singles: 4
            }
        );
        // One call's worth: 10 secondaries and the primary.
        assert_eq!(single(30, 99).tickets, 11);
        // A vswitch near exhaustion asks fewer.
        assert_eq!(single(30, 2).tickets, 2);
        // Slots bound it too.
        assert_eq!(create_shape(Kind::Single, 30, 10, 3, 99).tickets, 4);
        let prefix = |demand| create_shape(Kind::Prefix, demand, 10, 5, 1);
        // The primary serves one; a /28 at least, whatever is left.
        assert_eq!(
            prefix(1),
            CreateShape {
                demand: 1,
                prefixes: 1,
                tickets: 17,
                singles: 1
            }
        );
        assert_eq!(prefix(17).prefixes, 1);
        assert_eq!(prefix(18).prefixes, 2);
        assert_eq!(prefix(18).tickets, 33);
        // Within the slots; the fallback asks one call of singles.
        assert_eq!(prefix(500).prefixes, 5);
        assert_eq!(prefix(500).singles, 6);
    }

    #[test]
    fn capacity_math_of_the_issue() {
        // ecs.g7.large: 6 IPv4 per ENI: one secondary ENI holds 80 in
        // prefixes.
        assert_eq!(ips_per_eni(6), 80);
        // ecs.g7.4xlarge: 30 IPv4 per ENI.
        assert_eq!(ips_per_eni(30), 29 * 16);
        assert_eq!(ips_per_eni(1), 0);
        assert_eq!(ips_per_eni(0), 0);
    }

    #[test]
    fn demand_becomes_whole_prefixes_within_the_slots() {
        assert_eq!(prefixes_for(1, 5), 1);
        assert_eq!(prefixes_for(16, 5), 1);
        assert_eq!(prefixes_for(17, 5), 2);
        assert_eq!(prefixes_for(80, 5), 5);
        assert_eq!(prefixes_for(81, 5), 5);
        assert_eq!(prefixes_for(0, 5), 0);
        // 160 cold addresses on a 4xlarge ENI (29 slots): 10 prefixes.
        assert_eq!(prefixes_for(160, 29), 10);
    }

    #[test]
    fn room_and_pending_count_slots() {
        assert_eq!(room(Kind::Prefix, 3), 48);
        assert_eq!(room(Kind::Single, 3), 3);
        // 20 in flight as prefix units take 2 slots; 3 singles beside, 3.
        assert_eq!(pending_slots(20, 20), 2);
        assert_eq!(pending_slots(23, 20), 5);
        assert_eq!(pending_slots(0, 0), 0);
        // Demand rounds up to whole /28s in prefix kind, within the limit.
        assert_eq!(round_units(Kind::Prefix, 3, 160), 16);
        assert_eq!(round_units(Kind::Prefix, 17, 160), 32);
        assert_eq!(round_units(Kind::Prefix, 3, 10), 10);
        assert_eq!(round_units(Kind::Single, 3, 160), 3);
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
    fn ipv6_comes_from_the_enis_80_a_new_one_or_singles() {
        let now = 1_000;
        let v6 = |dual, mode, held: (bool, bool), inhibit| next_v6(dual, mode, held, inhibit, now);
        assert_eq!(v6(false, true, (true, false), None), None, "IPv4 stack");
        assert_eq!(
            v6(true, true, (true, true), Some(now + 1)),
            Some(V6From::Prefix)
        );
        assert_eq!(
            v6(true, false, (true, false), None),
            Some(V6From::Prefix),
            "a /80 held is used with the mode off too"
        );
        assert_eq!(
            v6(true, true, (false, false), None),
            Some(V6From::NewPrefix)
        );
        assert_eq!(
            v6(true, true, (false, false), Some(now)),
            Some(V6From::NewPrefix)
        );
        assert_eq!(
            v6(true, true, (false, false), Some(now + 1)),
            Some(V6From::Single)
        );
        assert_eq!(v6(true, true, (false, true), None), Some(V6From::Single));
        assert_eq!(v6(true, false, (false, false), None), Some(V6From::Single));
        // /28s only where the pairs come from a /80.
        assert_eq!(kind_with(Kind::Prefix, Some(V6From::Single)), Kind::Single);
        assert_eq!(
            kind_with(Kind::Prefix, Some(V6From::NewPrefix)),
            Kind::Prefix
        );
        assert_eq!(kind_with(Kind::Prefix, None), Kind::Prefix);
        assert_eq!(kind_with(Kind::Single, Some(V6From::Prefix)), Kind::Single);
        // 10 IPv6 per ENI, 4 used, 3 in flight of which 2 in /28s.
        assert_eq!(v6_room(10, 4, 3, 2), 5);
        assert_eq!(v6_room(10, 12, 0, 0), 0);
    }

    #[test]
    fn shrink_gives_back_whole_idle_prefixes_only() {
        let c = |s: &str, eni_in_use, reclaimable| PrefixCandidate {
            eni: "eni-1".into(),
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
}
