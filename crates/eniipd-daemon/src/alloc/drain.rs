//! Draining (`eniipctl drain`): retiring the node. While it drains, no
//! new owner is given an address (`ERR draining`; an owner that holds one
//! is answered it again), the pool keeps nothing idle (no warm-up; idle
//! addresses and idle /28s go back to the cloud, then the ENIs left
//! holding only their idle primary are deleted, within the ENI operation
//! slots), and releases and every read are served as ever. The node is
//! ready to retire once nothing but in-use addresses remains; it ends
//! with no address and no ENI of its own once the last owner released.
//! `undrain` ends it. The state is durable (the store's `drain` record).
//!
//! [`Drain`] owns the flag and the pool sizes the drain set aside: while
//! it drains, the sizes in force are 0, and a reload's new sizes wait
//! for the undrain.

use std::collections::BTreeSet;
use std::time::Duration;

use super::capacity::Capacity;
use crate::pool::{IpState, PoolState};

/// How often the pool is checked while a drain has something to give
/// back (the calls stay within the ENI operation slots and the workers'
/// batching: a check asks nothing of what is already on its way).
pub(crate) const DRAIN_PASS: Duration = Duration::from_secs(1);

/// Whether the node drains, and the pool sizes it set aside.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Drain {
    /// `(min_idle, max_idle)` before the drain; `None`: not draining.
    kept: Option<(usize, usize)>,
}

/// What the node still holds, for [`Drain::retire_ready`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Held {
    /// Pool addresses not in use that a drain gives back ([`leftovers`]).
    pub(crate) not_in_use: usize,
    /// Addresses asked of the cloud and not answered.
    pub(crate) pending: usize,
    /// ENI creations and frees running.
    pub(crate) eni_ops: usize,
}

impl Drain {
    /// True while draining.
    pub(crate) fn on(&self) -> bool {
        self.kept.is_some()
    }

    /// Starts draining: `cap` keeps nothing idle. False if it already was.
    pub(crate) fn start(&mut self, cap: &mut Capacity) -> bool {
        if self.on() {
            return false;
        }
        self.kept = Some((cap.min_idle, cap.max_idle));
        cap.min_idle = 0;
        cap.max_idle = 0;
        true
    }

    /// Ends draining: `cap` gets its pool sizes back. False if it was not
    /// draining.
    pub(crate) fn end(&mut self, cap: &mut Capacity) -> bool {
        let Some((min, max)) = self.kept.take() else {
            return false;
        };
        cap.min_idle = min;
        cap.max_idle = max;
        true
    }

    /// New pool sizes (SIGHUP): in force at once, or at the undrain.
    pub(crate) fn reload(&mut self, cap: &mut Capacity, min_idle: usize, max_idle: usize) {
        match &mut self.kept {
            Some(kept) => *kept = (min_idle, max_idle),
            None => {
                cap.min_idle = min_idle;
                cap.max_idle = max_idle;
            }
        }
    }

    /// Draining, and nothing but in-use addresses remains: `Some(ready)`
    /// while draining, `None` when not.
    pub(crate) fn retire_ready(&self, held: Held) -> Option<bool> {
        self.on()
            .then_some(held.not_in_use == 0 && held.pending == 0 && held.eni_ops == 0)
    }
}

/// The pool's addresses a drain still has to give back: every one not in
/// use (idle, reserved, cooling, invalid; an unpaired IPv6), but the
/// primary of an ENI that holds an owner's address: a primary goes only
/// with its ENI, which goes once its last owner released.
pub(crate) fn leftovers(pool: &PoolState) -> usize {
    let in_use: BTreeSet<&str> = pool
        .states()
        .filter(|(_, s)| matches!(s, IpState::InUse(_)))
        .map(|(ip, _)| ip.eni())
        .collect();
    let addresses = pool
        .states()
        .filter(|(ip, s)| {
            let kept_with_its_eni = ip.primary() && in_use.contains(ip.eni());
            !matches!(s, IpState::InUse(_)) && !kept_with_its_eni
        })
        .count();
    addresses + pool.ips().unpaired_len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cap() -> Capacity {
        Capacity {
            usable_enis: 2,
            ips_per_eni: 6,
            slots_per_eni: 5,
            ipv6_per_eni: 0,
            prefix_mode: false,
            total_ips: 12,
            min_idle: 2,
            max_idle: 5,
        }
    }

    #[test]
    fn a_drain_keeps_nothing_idle_and_an_undrain_gives_the_sizes_back() {
        let mut c = cap();
        let mut d = Drain::default();
        assert_eq!(d.retire_ready(Held::default()), None);
        assert!(d.start(&mut c));
        assert!(!d.start(&mut c), "once");
        assert_eq!((c.min_idle, c.max_idle), (0, 0));
        // A reload while draining waits for the undrain.
        d.reload(&mut c, 3, 8);
        assert_eq!((c.min_idle, c.max_idle), (0, 0));
        assert!(d.end(&mut c));
        assert_eq!((c.min_idle, c.max_idle), (3, 8));
        assert!(!d.end(&mut c));
        d.reload(&mut c, 1, 4);
        assert_eq!((c.min_idle, c.max_idle), (1, 4));
    }

    #[test]
    fn ready_to_retire_once_only_in_use_addresses_remain() {
        let mut c = cap();
        let mut d = Drain::default();
        d.start(&mut c);
        let held = |not_in_use, pending, eni_ops| Held {
            not_in_use,
            pending,
            eni_ops,
        };
        assert_eq!(d.retire_ready(held(0, 0, 0)), Some(true));
        assert_eq!(d.retire_ready(held(1, 0, 0)), Some(false));
        assert_eq!(d.retire_ready(held(0, 1, 0)), Some(false));
        assert_eq!(d.retire_ready(held(0, 0, 1)), Some(false));
    }
}
