//! Holds ([`Holds`]): addresses kept out of circulation for a while after
//! they were released: reservations for their last owner
//! (`ip_stick_time`), cool-downs from everyone else (`ip_cooldown`), and
//! the quarantine of addresses with no known owner after a state rebuild.
//!
//! Invariants, kept by the verbs and checked by [`Holds::check`]: an
//! address has at most one hold; an owner keeps at most one held address
//! (a newer hold for it ends the older one); the owner index agrees with
//! the holds. A hold ends at its time ([`Holds::settle`]): a reservation
//! becomes the cool-down that follows it, if that lasts longer; a
//! cool-down or a quarantine ends, and its address is idle again.

use std::collections::{btree_map, BTreeMap, HashMap};
use std::net::Ipv4Addr;

use eniip_protocol::core::Owner;

/// How long a released address is kept: reserved for its last owner for
/// the node's `ip_stick_time`, or the owner's own stick time when its
/// `alloc` asked one (a pod's `eniipd/ip-stick-time`), never longer than
/// `max_ip_stick_time` (checked again here: the config may have lowered it
/// since the `alloc`); and kept from other owners for `ip_cooldown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HoldTimes {
    /// The node's `ip_stick_time` (ms).
    pub(crate) stick_ms: u64,
    /// `max_ip_stick_time` (ms): the most an owner's own may be.
    pub(crate) max_stick_ms: u64,
    /// `ip_cooldown` (ms).
    pub(crate) cool_ms: u64,
}

impl HoldTimes {
    /// The reservation of an owner that asked `asked` seconds (or nothing).
    pub(crate) fn stick_ms_for(&self, asked: Option<u64>) -> u64 {
        match asked {
            Some(s) => s.saturating_mul(1000).min(self.max_stick_ms),
            None => self.stick_ms,
        }
    }
}

/// A hold on one address (what it is is this module's: readers see its
/// owner, its end and whether it is a cool-down).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HoldOn(Kind);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// Kept for its last owner.
    Reserved {
        /// The last owner.
        owner: Owner,
        /// End of the reservation (Unix ms).
        until_ms: u64,
        /// End of the cool-down that follows (Unix ms; may be earlier).
        cool_until_ms: u64,
    },
    /// Kept from owners other than the last one.
    Cooling {
        /// The last owner.
        owner: Owner,
        /// End of the cool-down (Unix ms).
        until_ms: u64,
    },
    /// Owner unknown after a state rebuild: out of circulation until then.
    Quarantined {
        /// End of the quarantine (Unix ms).
        until_ms: u64,
    },
}

impl HoldOn {
    /// The owner it is kept for, if any.
    pub(crate) fn owner(&self) -> Option<&Owner> {
        match &self.0 {
            Kind::Reserved { owner, .. } | Kind::Cooling { owner, .. } => Some(owner),
            Kind::Quarantined { .. } => None,
        }
    }

    /// When it ends (or, reserved, turns into its cool-down).
    pub(crate) fn until_ms(&self) -> u64 {
        match &self.0 {
            Kind::Reserved { until_ms, .. }
            | Kind::Cooling { until_ms, .. }
            | Kind::Quarantined { until_ms } => *until_ms,
        }
    }

    /// A cool-down (listed `cooling`); a reservation or a quarantine is
    /// listed `reserved`.
    pub(crate) fn cooling(&self) -> bool {
        matches!(self.0, Kind::Cooling { .. })
    }
}

/// Every hold, by address, and the address each owner has held.
#[derive(Debug, Clone, Default)]
pub(crate) struct Holds {
    /// In address order, so the pool can walk it beside its addresses.
    on: BTreeMap<Ipv4Addr, HoldOn>,
    for_owner: HashMap<Owner, Ipv4Addr>,
}

impl Holds {
    /// The hold on `v4`.
    pub(crate) fn get(&self, v4: &Ipv4Addr) -> Option<&HoldOn> {
        self.on.get(v4)
    }

    /// Whether `v4` is held.
    pub(crate) fn holds(&self, v4: &Ipv4Addr) -> bool {
        self.on.contains_key(v4)
    }

    /// The address held for `owner`.
    pub(crate) fn for_owner(&self, owner: &Owner) -> Option<Ipv4Addr> {
        self.for_owner.get(owner).copied()
    }

    /// Every hold and its address, in address order.
    pub(crate) fn iter(&self) -> btree_map::Iter<'_, Ipv4Addr, HoldOn> {
        self.on.iter()
    }

    /// The earliest end of a hold, if any (so the caller can wake then).
    pub(crate) fn next_expiry(&self) -> Option<u64> {
        self.on.values().map(HoldOn::until_ms).min()
    }

    /// Checks the invariants; `Err` names the first violation.
    pub(crate) fn check(&self) -> Result<(), String> {
        let with_owner = self.on.values().filter(|h| h.owner().is_some()).count();
        if with_owner != self.for_owner.len() {
            return Err(format!(
                "{with_owner} holds have an owner, the index has {}",
                self.for_owner.len()
            ));
        }
        for (owner, v4) in &self.for_owner {
            if self.on.get(v4).and_then(HoldOn::owner) != Some(owner) {
                return Err(format!("hold index disagrees for {owner}"));
            }
        }
        Ok(())
    }

    // ---- what only the pool does (it keeps addresses and owners in step) -

    /// `owner` released `v4` at `now_ms`: held for it `stick_ms` (then
    /// cooling until `cool_ms` after `now_ms`), or only cooling when
    /// `stick_ms` is zero. The ends, as (reserved until, cooling until; 0
    /// for none), or `None` when both are zero: no hold.
    pub(super) fn keep_for(
        &mut self,
        v4: Ipv4Addr,
        owner: &Owner,
        now_ms: u64,
        stick_ms: u64,
        cool_ms: u64,
    ) -> Option<(u64, u64)> {
        if stick_ms == 0 && cool_ms == 0 {
            return None;
        }
        let reserved_until_ms = if stick_ms > 0 { now_ms + stick_ms } else { 0 };
        let cooling_until_ms = if cool_ms > 0 { now_ms + cool_ms } else { 0 };
        let hold = if stick_ms > 0 {
            Kind::Reserved {
                owner: owner.clone(),
                until_ms: reserved_until_ms,
                cool_until_ms: cooling_until_ms,
            }
        } else {
            Kind::Cooling {
                owner: owner.clone(),
                until_ms: cooling_until_ms,
            }
        };
        self.put(v4, HoldOn(hold));
        Some((reserved_until_ms, cooling_until_ms))
    }

    /// Quarantines `v4` until `until_ms`.
    pub(super) fn quarantine(&mut self, v4: Ipv4Addr, until_ms: u64) {
        self.put(v4, HoldOn(Kind::Quarantined { until_ms }));
    }

    /// A hold read back from the state file, as it stands at `now_ms`: a
    /// reservation still running, else its cool-down; no `last_owner` is a
    /// quarantine. False (nothing held) when it has ended.
    pub(super) fn restore(
        &mut self,
        v4: Ipv4Addr,
        last_owner: Option<&Owner>,
        reserved_until_ms: u64,
        cooling_until_ms: u64,
        now_ms: u64,
    ) -> bool {
        let hold = match last_owner {
            None if reserved_until_ms > now_ms => Kind::Quarantined {
                until_ms: reserved_until_ms,
            },
            None => return false,
            Some(owner) if reserved_until_ms > now_ms => Kind::Reserved {
                owner: owner.clone(),
                until_ms: reserved_until_ms,
                cool_until_ms: cooling_until_ms,
            },
            Some(owner) if cooling_until_ms > now_ms => Kind::Cooling {
                owner: owner.clone(),
                until_ms: cooling_until_ms,
            },
            Some(_) => return false,
        };
        self.put(v4, HoldOn(hold));
        true
    }

    /// Ends the hold on `v4`, if any.
    pub(super) fn end(&mut self, v4: &Ipv4Addr) -> Option<HoldOn> {
        let h = self.on.remove(v4)?;
        if let Some(owner) = h.owner() {
            if self.for_owner.get(owner) == Some(v4) {
                self.for_owner.remove(owner);
            }
        }
        Some(h)
    }

    /// Ends what is due at `now_ms`; the addresses whose hold ended, in
    /// address order (their hold records can be cleared).
    pub(super) fn settle(&mut self, now_ms: u64) -> Vec<Ipv4Addr> {
        let mut freed = Vec::new();
        for (v4, h) in self.on.iter_mut().filter(|(_, h)| h.until_ms() <= now_ms) {
            let cooling = match &h.0 {
                Kind::Reserved {
                    owner,
                    cool_until_ms,
                    ..
                } if *cool_until_ms > now_ms => HoldOn(Kind::Cooling {
                    owner: owner.clone(),
                    until_ms: *cool_until_ms,
                }),
                _ => {
                    freed.push(*v4);
                    continue;
                }
            };
            *h = cooling;
        }
        for v4 in &freed {
            self.end(v4);
        }
        freed
    }

    /// Holds `v4` as `hold`: any hold on it ends, and so does its owner's
    /// older one.
    fn put(&mut self, v4: Ipv4Addr, hold: HoldOn) {
        self.end(&v4);
        if let Some(owner) = hold.owner() {
            if let Some(old) = self.for_owner.insert(owner.clone(), v4) {
                self.on.remove(&old);
            }
        }
        self.on.insert(v4, hold);
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{ip10 as ip, owner};
    use super::{HoldOn, Holds, Kind};

    #[test]
    fn a_reservation_turns_into_its_cool_down_then_ends() {
        let mut h = Holds::default();
        assert_eq!(
            h.keep_for(ip(1), &owner("a"), 100, 1000, 5000),
            Some((1100, 5100))
        );
        assert_eq!(h.for_owner(&owner("a")), Some(ip(1)));
        assert_eq!(h.next_expiry(), Some(1100));
        assert!(h.settle(1099).is_empty());
        assert!(h.settle(1100).is_empty(), "cooling now");
        assert!(matches!(
            h.get(&ip(1)),
            Some(HoldOn(Kind::Cooling { until_ms: 5100, .. }))
        ));
        assert_eq!(h.for_owner(&owner("a")), Some(ip(1)), "still a's");
        h.check().unwrap();
        assert_eq!(h.settle(5100), vec![ip(1)]);
        assert!(!h.holds(&ip(1)));
        assert_eq!(h.for_owner(&owner("a")), None);
        h.check().unwrap();
        // No stick time and no cool-down: no hold.
        assert_eq!(h.keep_for(ip(2), &owner("b"), 0, 0, 0), None);
        assert!(!h.holds(&ip(2)));
        // A cool-down shorter than the reservation ends with it.
        h.keep_for(ip(3), &owner("c"), 0, 10, 5);
        assert_eq!(h.settle(10), vec![ip(3)]);
    }

    #[test]
    fn an_owner_keeps_one_held_address_the_newest() {
        let mut h = Holds::default();
        h.keep_for(ip(1), &owner("a"), 0, 100, 0);
        h.keep_for(ip(2), &owner("a"), 0, 0, 100);
        assert!(!h.holds(&ip(1)), "the older hold ended");
        assert_eq!(h.for_owner(&owner("a")), Some(ip(2)));
        // Another hold on the same address replaces it, and its owner's
        // index with it.
        h.keep_for(ip(2), &owner("b"), 0, 100, 0);
        assert_eq!(h.for_owner(&owner("a")), None);
        assert_eq!(h.for_owner(&owner("b")), Some(ip(2)));
        h.quarantine(ip(2), 50);
        assert_eq!(h.for_owner(&owner("b")), None);
        assert_eq!(h.get(&ip(2)).and_then(HoldOn::owner), None);
        h.check().unwrap();
        assert!(h.end(&ip(2)).is_some());
        assert_eq!(h.next_expiry(), None);
    }

    #[test]
    fn an_owners_own_stick_time_replaces_the_nodes_within_the_maximum() {
        let t = super::HoldTimes {
            stick_ms: 60_000,
            max_stick_ms: 3_600_000,
            cool_ms: 0,
        };
        assert_eq!(t.stick_ms_for(None), 60_000, "asked nothing: the node's");
        assert_eq!(t.stick_ms_for(Some(600)), 600_000);
        assert_eq!(t.stick_ms_for(Some(0)), 0, "none at all, if asked");
        assert_eq!(t.stick_ms_for(Some(7200)), 3_600_000, "bounded");
        assert_eq!(t.stick_ms_for(Some(u64::MAX)), 3_600_000);
    }

    #[test]
    fn restored_holds_are_what_is_left_of_them() {
        let mut h = Holds::default();
        let a = owner("a");
        assert!(h.restore(ip(1), Some(&a), 200, 300, 100));
        assert!(matches!(h.get(&ip(1)), Some(HoldOn(Kind::Reserved { .. }))));
        assert!(h.restore(ip(2), Some(&owner("b")), 50, 300, 100));
        assert!(matches!(
            h.get(&ip(2)),
            Some(HoldOn(Kind::Cooling { until_ms: 300, .. }))
        ));
        assert!(!h.restore(ip(3), Some(&owner("c")), 50, 60, 100), "over");
        assert!(h.restore(ip(4), None, 200, 0, 100));
        assert!(matches!(
            h.get(&ip(4)),
            Some(HoldOn(Kind::Quarantined { until_ms: 200 }))
        ));
        assert!(!h.restore(ip(5), None, 100, 0, 100), "over");
        h.check().unwrap();
    }
}
