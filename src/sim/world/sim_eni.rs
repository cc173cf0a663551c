//! One ENI as the world keeps it, and its asynchronous state machine:
//! Attaching -> InUse, Detaching -> Available, Deleting -> gone, each
//! ending `attach_delay` after it began (the actions that start them are
//! in `enis.rs`).
//!
//! Invariants: at most one transition is in flight (`pending`; a busy ENI
//! refuses another with `Operation.Conflict`); a deleted ENI keeps its
//! addresses, all marked removed at its deletion, only for the metadata
//! lag, and gives them back to its vswitch exactly once.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use super::addr::Addr;
use crate::cloud::EniStatus;

/// An ENI.
#[derive(Debug)]
pub(crate) struct SimEni {
    /// `eni-...`
    pub(crate) id: String,
    /// MAC.
    pub(crate) mac: String,
    /// Vswitch.
    pub(crate) vswitch: String,
    pub(super) status: EniStatus,
    /// A transition in flight: the status it ends in, and when.
    pub(super) pending: Option<(EniStatus, Instant)>,
    pub(super) instance: Option<String>,
    pub(super) primary_eni: bool,
    pub(super) v4: Vec<Addr<Ipv4Addr>>,
    pub(super) v6: Vec<Addr<Ipv6Addr>>,
    /// IPv4 /28 prefixes by their network address.
    pub(super) v4p: Vec<Addr<Ipv4Addr>>,
    pub(super) tags: Vec<(String, String)>,
    pub(super) sgs: Vec<String>,
    pub(super) created: u64,
    pub(super) description: String,
    pub(super) name: String,
    pub(super) attached_since: Option<Instant>,
    pub(super) detach_started: Option<Instant>,
    /// The attachment the last detach ended: (instance, attached since,
    /// detach started). Metadata lags a detach as it lags everything, so
    /// that instance still sees the ENI until the lag has passed its
    /// detach, though the ENI is attached to nothing (or elsewhere) now.
    pub(super) detached_from: Option<(String, Instant, Instant)>,
    pub(super) deleted_at: Option<Instant>,
}

impl SimEni {
    pub(super) fn live_v4(&self) -> impl Iterator<Item = &Addr<Ipv4Addr>> {
        self.v4.iter().filter(|a| a.removed.is_none())
    }

    pub(super) fn live_v6(&self) -> impl Iterator<Item = &Addr<Ipv6Addr>> {
        self.v6.iter().filter(|a| a.removed.is_none())
    }

    pub(super) fn live_v4p(&self) -> impl Iterator<Item = &Addr<Ipv4Addr>> {
        self.v4p.iter().filter(|a| a.removed.is_none())
    }

    pub(super) fn primary_ip(&self) -> Option<Ipv4Addr> {
        self.v4.iter().find(|a| a.primary).map(|a| a.ip)
    }

    /// Whether metadata at `t` shows the ENI attached to `instance`.
    pub(super) fn shown_on(&self, instance: &str, t: Instant) -> bool {
        let now = self.instance.as_deref() == Some(instance)
            && self.attached_since.is_some_and(|a| a <= t)
            && self.detach_started.is_none_or(|d| d > t);
        let before = self
            .detached_from
            .as_ref()
            .is_some_and(|(i, a, d)| i == instance && *a <= t && t < *d);
        now || before
    }

    pub(super) fn busy(&self) -> bool {
        self.pending.is_some()
    }

    /// Ends its transition if it is due at `now` and forgets addresses
    /// removed longer than `lag` ago; when that ends its deletion, what it
    /// gives back to its vswitch.
    pub(super) fn settle(&mut self, now: Instant, lag: Duration) -> Option<Freed> {
        let mut freed = None;
        if let Some((target, at)) = self.pending.clone() {
            if at <= now {
                self.pending = None;
                match target {
                    EniStatus::InUse => {
                        self.status = EniStatus::InUse;
                        self.attached_since = Some(at);
                        self.detach_started = None;
                    }
                    EniStatus::Available => {
                        self.status = EniStatus::Available;
                        self.instance = None;
                    }
                    _ => {
                        self.deleted_at = Some(at);
                        let v4: Vec<Ipv4Addr> = self.live_v4().map(|a| a.ip).collect();
                        let v6: Vec<Ipv6Addr> = self.live_v6().map(|a| a.ip).collect();
                        let v4p: Vec<Ipv4Addr> = self.live_v4p().map(|a| a.ip).collect();
                        for a in self.v4p.iter_mut() {
                            a.removed.get_or_insert(at);
                        }
                        for a in self.v4.iter_mut() {
                            a.removed.get_or_insert(at);
                        }
                        for a in self.v6.iter_mut() {
                            a.removed.get_or_insert(at);
                        }
                        freed = Some((self.vswitch.clone(), v4, v6, v4p));
                    }
                }
            }
        }
        self.v4.retain(|a| a.removed.is_none_or(|r| r + lag > now));
        self.v6.retain(|a| a.removed.is_none_or(|r| r + lag > now));
        self.v4p.retain(|a| a.removed.is_none_or(|r| r + lag > now));
        freed
    }
}

/// What a deleted ENI gives back to its vswitch: (vswitch, addresses,
/// IPv6 addresses, /28 prefixes).
pub(super) type Freed = (String, Vec<Ipv4Addr>, Vec<Ipv6Addr>, Vec<Ipv4Addr>);
