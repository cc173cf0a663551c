//! What the actor shows of its parts: the `enis` listing and the reason an
//! `alloc` is refused as exhausted. Pure functions of the parts, read at
//! one instant (`now_ms`).

use crate::pool::{PoolEni, PoolState};
use eniip_protocol::core::{Ceiling, EniEntry, PrefixUse};
use eniip_util::time::format_utc;

use super::super::capacity::Capacity;
use super::super::prefix_mode::Kind;
use super::inflight::InFlight;
use super::vswstate::VswState;

/// The `enis` listing: the pool's ENIs, then the creations in flight.
pub(super) fn eni_entries(
    pool: &PoolState,
    vsw: &VswState,
    inflight: &InFlight,
    prefix_mode: bool,
    now_ms: u64,
) -> Vec<EniEntry> {
    let switches = vsw.switches();
    let inhibited = |v: &str| switches.inhibited_until(v, now_ms).map(|u| u / 1000);
    let fallback = |v: &str| vsw.kind_on(v, now_ms) == Kind::Single;
    // An ENI is on an IPv6 fallback while it holds no /80 and its IPv6
    // come as single addresses.
    let on_fallback = |e: &PoolEni| {
        let (v4, v6) = vsw.on_fallback(e.vswitch(), now_ms);
        let single_v6 = e.carve_prefix().is_none() && (v6 || (vsw.dual() && e.v6_refused()));
        (fallback(e.vswitch()), v4, single_v6)
    };
    let mut out = crate::pool::views::eni_entries(
        pool,
        inhibited,
        prefix_mode.then_some(&on_fallback as crate::pool::views::FallbackOf<'_>),
    );
    for c in inflight.creating() {
        out.push(EniEntry {
            eni: c.eni.unwrap_or("creating").to_string(),
            mac: "-".into(),
            vswitch: c.vswitch.to_string(),
            ips: 0,
            pending: c.tickets,
            inhibited_until: inhibited(c.vswitch),
            prefixes: prefix_mode.then(|| PrefixUse {
                prefixes: 0,
                singles: 0,
                fallback: fallback(c.vswitch),
                v4_fallback: false,
                v6_fallback: false,
            }),
            v6_prefix: None,
            security_groups: c.set.cloned(),
            security_groups_cloud: None,
        });
    }
    out
}

/// Why no source can serve an `alloc` now, and the ceiling it hit: every
/// vswitch is out of addresses (until when), or the node's capacity is
/// reached (`eni_slots`, with the counts that fill it; `pending`
/// addresses are asked of the cloud). For an `alloc` that `asked` a
/// vswitch: that one is out of addresses, or no ENI on it has room and
/// none can be created.
pub(super) fn exhaustion_reason(
    pool: &PoolState,
    vsw: &VswState,
    cap: &Capacity,
    pending: usize,
    now_ms: u64,
    asked: Option<&str>,
) -> (Ceiling, String) {
    let switches = vsw.switches();
    let c = crate::pool::views::counts(pool);
    let counts = format!(
        "{} addresses on {} of {} ENIs ({} in use, {} reserved, {} cooling, {} requested)",
        c.ips,
        pool.enis().len(),
        cap.usable_enis,
        c.inuse,
        c.reserved,
        c.cooling,
        pending
    );
    if let Some(v) = asked {
        if let Some(u) = switches.inhibited_until(v, now_ms) {
            return (
                Ceiling::VSwitch(v.to_string()),
                format!(
                    "the vswitch asked, {v}, has no free addresses (until {})",
                    format_utc(u / 1000)
                ),
            );
        }
        return (
            Ceiling::EniSlots,
            format!(
                "capacity reached for the vswitch asked, {v}: no ENI on it has room and no ENI can be created: {counts}"
            ),
        );
    }
    let inhibited: Vec<String> = switches
        .ids()
        .iter()
        .filter_map(|id| {
            switches
                .inhibited_until(id, now_ms)
                .map(|u| format!("{id} until {}", format_utc(u / 1000)))
        })
        .collect();
    if !inhibited.is_empty() && inhibited.len() == switches.ids().len() {
        return (
            Ceiling::VSwitch(switches.ids().join(",")),
            format!("no vswitch has free addresses ({})", inhibited.join(", ")),
        );
    }
    (Ceiling::EniSlots, format!("capacity reached: {counts}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::vswitch_choice::VSwitches;
    use crate::config::VSwitchPolicy;
    use std::time::Instant;

    #[test]
    fn exhausted_names_every_inhibited_vswitch_or_the_capacity() {
        let ids = vec!["vsw-a".to_string(), "vsw-b".to_string()];
        let mut vsw = VswState::new(
            VSwitches::new(ids, VSwitchPolicy::Random),
            false,
            10,
            Instant::now(),
        );
        let pool = super::super::tests::one_eni_pool();
        let cap = Capacity {
            usable_enis: 2,
            ips_per_eni: 4,
            slots_per_eni: 3,
            ipv6_per_eni: 0,
            prefix_mode: false,
            total_ips: 8,
            min_idle: 0,
            max_idle: 8,
        };
        let (ceiling, why) = exhaustion_reason(&pool, &vsw, &cap, 3, 1_000, None);
        assert_eq!(ceiling, Ceiling::EniSlots);
        assert_eq!(
            why,
            "capacity reached: 4 addresses on 1 of 2 ENIs (0 in use, 0 reserved, 0 cooling, 3 requested)"
        );
        // One of two inhibited: still the capacity's reason.
        vsw.inhibit("vsw-a", 61_000);
        assert!(exhaustion_reason(&pool, &vsw, &cap, 0, 1_000, None)
            .1
            .starts_with("capacity reached"));
        vsw.inhibit("vsw-b", 61_000);
        let (ceiling, why) = exhaustion_reason(&pool, &vsw, &cap, 0, 1_000, None);
        assert_eq!(ceiling, Ceiling::VSwitch("vsw-a,vsw-b".into()));
        assert!(
            why.starts_with("no vswitch has free addresses (vsw-a until 1970-01-01")
                && why.contains("vsw-b until"),
            "{why}"
        );
        // Past the inhibition: the capacity again.
        assert!(exhaustion_reason(&pool, &vsw, &cap, 0, 61_001, None)
            .1
            .starts_with("capacity reached"));
        // A vswitch asked: that one is named, inhibited or full.
        let (ceiling, why) = exhaustion_reason(&pool, &vsw, &cap, 0, 1_000, Some("vsw-a"));
        assert_eq!(ceiling, Ceiling::VSwitch("vsw-a".into()));
        assert!(
            why.starts_with("the vswitch asked, vsw-a, has no free addresses (until 1970-01-01"),
            "{why}"
        );
        let (ceiling, why) = exhaustion_reason(&pool, &vsw, &cap, 0, 61_001, Some("vsw-b"));
        assert_eq!(ceiling, Ceiling::EniSlots);
        assert_eq!(
            why,
            "capacity reached for the vswitch asked, vsw-b: no ENI on it has room and no ENI can be created: 4 addresses on 1 of 2 ENIs (0 in use, 0 reserved, 0 cooling, 0 requested)"
        );
        assert_eq!(
            eni_entries(
                &pool,
                &vsw,
                &InFlight::new(
                    eniip_util::sem::Semaphore::new(2),
                    eniip_util::sem::Semaphore::new(3),
                    std::iter::empty(),
                ),
                false,
                1_000
            )
            .len(),
            1
        );
    }
}
