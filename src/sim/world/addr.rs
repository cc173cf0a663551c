//! The life of one address (or /28 prefix) on an ENI: when it was added
//! and when removed, so the metadata service can list an ENI's addresses
//! as they were `metadata_lag` ago.
//!
//! Invariants: an entry is live until `removed` is set, and is set once
//! (a removal never moves); a removed entry is kept only until the lag no
//! longer needs it (see [`super::World::settle`]).

use std::time::Instant;

use super::params::{err, ApiError};

/// An address and its life, for the lagging metadata view.
#[derive(Debug, Clone)]
pub(super) struct Addr<T> {
    pub(super) ip: T,
    pub(super) primary: bool,
    pub(super) added: Instant,
    pub(super) removed: Option<Instant>,
}

/// New addresses as of `now` (`primary_first`: the first is the ENI's
/// primary).
pub(super) fn new_addrs<A: Copy>(ips: &[A], now: Instant, primary_first: bool) -> Vec<Addr<A>> {
    ips.iter()
        .enumerate()
        .map(|(i, ip)| Addr {
            ip: *ip,
            primary: primary_first && i == 0,
            added: now,
            removed: None,
        })
        .collect()
}

impl<T: Copy + PartialEq> Addr<T> {
    /// The addresses listed at `t` (added by then, not yet removed).
    pub(super) fn listed_at(addrs: &[Addr<T>], t: Instant) -> Vec<T> {
        addrs
            .iter()
            .filter(|a| a.added <= t && a.removed.is_none_or(|r| r > t))
            .map(|a| a.ip)
            .collect()
    }

    /// Of the live `addrs`, the one each of `wanted` names (`names`), all
    /// or none: an unassign naming anything not assigned (`what`, as the
    /// error says it) fails whole.
    pub(super) fn assigned(
        addrs: &[Addr<T>],
        wanted: &[String],
        names: impl Fn(&Addr<T>, &str) -> bool,
        what: &str,
    ) -> Result<Vec<T>, ApiError> {
        wanted
            .iter()
            .map(|w| {
                addrs
                    .iter()
                    .find(|a| a.removed.is_none() && names(a, w))
                    .map(|a| a.ip)
                    .ok_or_else(|| {
                        err(
                            403,
                            "InvalidIp.IpUnassigned",
                            format!("The specified {what} \"{w}\" is not assigned on this ENI."),
                        )
                    })
            })
            .collect()
    }

    /// Marks the live ones of `gone` removed at `now`.
    pub(super) fn remove(addrs: &mut [Addr<T>], gone: &[T], now: Instant) {
        for a in addrs
            .iter_mut()
            .filter(|a| a.removed.is_none() && gone.contains(&a.ip))
        {
            a.removed = Some(now);
        }
    }
}
