//! What the pool shows: an address's state as read from the owners and
//! the holds ([`IpState`]), and the summaries the protocol and the metrics
//! answer with. Pure functions of [`PoolState`]'s read accessors: nothing
//! here changes the pool.

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::{HoldOn, PoolEni, PoolState};
use eniip_protocol::core::{EniEntry, ListEntry, Owner, PrefixUse, StatusCounts};

/// The state of one address, read from the parts (an owner holds it, a
/// hold keeps it, it is invalid, or it is idle: in that order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IpState<'a> {
    /// Free for anyone.
    Idle,
    /// Held by this owner.
    InUse(&'a Owner),
    /// Reserved, cooling or quarantined.
    Held(&'a HoldOn),
    /// Never handed out (dual stack without an IPv6 pair).
    Invalid,
}

impl IpState<'_> {
    /// The protocol name of the state.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            IpState::Idle => "idle",
            IpState::InUse(_) => "inuse",
            IpState::Held(h) if h.cooling() => "cooling",
            IpState::Held(_) => "reserved",
            IpState::Invalid => "invalid",
        }
    }

    /// Its owner, or last owner while kept for it.
    pub(crate) fn owner(&self) -> Option<&Owner> {
        match self {
            IpState::InUse(owner) => Some(owner),
            IpState::Held(h) => h.owner(),
            IpState::Idle | IpState::Invalid => None,
        }
    }
}

/// Counters for `status` (pending and capacity are the caller's).
pub(crate) fn counts(pool: &PoolState) -> StatusCounts {
    let mut c = StatusCounts {
        enis: pool.enis().iter().filter(|e| !e.gone()).count(),
        ips: pool.ips().len() + pool.ips().unpaired_len(),
        ..StatusCounts::default()
    };
    for (_, state) in pool.states() {
        match state {
            IpState::Idle => c.idle += 1,
            IpState::InUse(_) => c.inuse += 1,
            IpState::Held(h) if h.cooling() => c.cooling += 1,
            IpState::Held(_) => c.reserved += 1,
            IpState::Invalid => {}
        }
    }
    c
}

/// Counts by state name, invalid included (for metrics).
pub(crate) fn counts_by_state(pool: &PoolState) -> Vec<(&'static str, u64)> {
    let c = counts(pool);
    let invalid = (c.ips - c.idle - c.inuse - c.reserved - c.cooling) as u64;
    vec![
        ("idle", c.idle as u64),
        ("inuse", c.inuse as u64),
        ("reserved", c.reserved as u64),
        ("cooling", c.cooling as u64),
        ("invalid", invalid),
    ]
}

/// `list` data.
pub(crate) fn list(pool: &PoolState) -> Vec<ListEntry> {
    let mut out: Vec<ListEntry> = pool
        .states()
        .map(|(ip, state)| ListEntry {
            ip: IpAddr::V4(ip.v4()),
            state: state.name(),
            owner: state.owner().map(Owner::to_string),
            gen: state
                .owner()
                .and_then(|o| pool.owners().get(o))
                .map(|h| h.gen()),
            eni: ip.eni().to_string(),
            carved: ip.v6().zip(ip.v6_prefix()),
        })
        .collect();
    out.extend(pool.ips().unpaired().map(|(v6, eni)| ListEntry {
        ip: IpAddr::V6(v6),
        state: "invalid",
        owner: None,
        gen: None,
        eni: eni.to_string(),
        carved: None,
    }));
    out
}

/// Of an ENI in prefix mode: (its next addresses are single ones, its
/// IPv4 is on fallback, its IPv6 is on fallback).
pub(crate) type FallbackOf<'a> = &'a dyn Fn(&PoolEni) -> (bool, bool, bool);

/// `enis` data for the ENIs that exist (the caller adds ones being
/// created). In prefix mode, `fallback` says of an ENI whether its next
/// addresses are single ones, and whether its IPv4 and its IPv6 are on
/// fallback; each entry shows how its ENI holds addresses.
pub(crate) fn eni_entries(
    pool: &PoolState,
    inhibited: impl Fn(&str) -> Option<u64>,
    fallback: Option<FallbackOf<'_>>,
) -> Vec<EniEntry> {
    pool.enis()
        .iter()
        .filter(|e| !e.gone())
        .map(|e| EniEntry {
            eni: e.id().to_string(),
            mac: e.mac().to_string(),
            vswitch: e.vswitch().to_string(),
            ips: pool.ips().count_on(e.id()),
            pending: e.pending(),
            inhibited_until: inhibited(e.vswitch()),
            prefixes: fallback.map(|f| prefix_use(pool, e, f(e))),
            v6_prefix: e.carve_prefix(),
            security_groups: pool.sg_sets().given(e.id()).cloned(),
            security_groups_cloud: pool.sg_sets().changed(e.id()).map(<[String]>::to_vec),
        })
        .collect()
}

/// How an ENI holds its addresses (prefix mode).
fn prefix_use(
    pool: &PoolState,
    e: &PoolEni,
    (fallback, v4_fallback, v6_fallback): (bool, bool, bool),
) -> PrefixUse {
    PrefixUse {
        prefixes: e.prefixes().len(),
        singles: pool.slots_used(e.id()) - e.prefixes().len(),
        fallback,
        v4_fallback,
        v6_fallback,
    }
}

/// Per ENI, its addresses in prefixes and single (metrics, prefix mode).
pub(crate) fn eni_modes(pool: &PoolState) -> Vec<crate::metrics::EniModeGauge> {
    let mut m: BTreeMap<&str, crate::metrics::EniModeGauge> = pool
        .enis()
        .iter()
        .filter(|e| !e.gone())
        .map(|e| {
            (
                e.id(),
                crate::metrics::EniModeGauge {
                    eni: e.id().to_string(),
                    prefixes: e.prefixes().len() as u64,
                    v6_prefixes: e.v6_prefixes().len() as u64,
                    ..Default::default()
                },
            )
        })
        .collect();
    for ip in pool.ips().iter() {
        if let Some(g) = m.get_mut(ip.eni()) {
            if ip.prefix().is_some() {
                g.in_prefixes += 1;
            } else {
                g.singles += 1;
            }
        }
    }
    m.into_values().collect()
}
