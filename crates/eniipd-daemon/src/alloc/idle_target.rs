//! The adaptive idle target: how many idle addresses the pool keeps ready,
//! from how fast addresses are being allocated (issue 38, item 2).
//!
//! A fixed `min_pool_size` is either wasteful (addresses idle all night)
//! or slow (every pod of a busy hour waits for the cloud). What the pool
//! needs ready is the demand that arrives while a refill is in flight:
//! the allocation rate, less what releases give back meanwhile, times the
//! refill's lead time. [`IdleTarget`] measures them on the node: the
//! rates of allocations and of releases over the last [`WINDOW_CHECKS`]
//! pool checks (in [`BUCKETS`] buckets; a rise shows in the last two
//! buckets at once, a fall only once it has lasted the whole window), the
//! lead time as a moving average of the cold waits (an `alloc` no idle
//! address could answer at once). The warm-up target is the net demand
//! during one refill (none when releases outpace allocations) with a
//! margin of two standard deviations of the arrivals in that time
//! (taken as Poisson); the shrink keeps at most a quarter more. Both stay within `min_pool_size` and `max_pool_size`, which
//! remain the bounds. With no allocation for a whole window the target
//! is 0 and the pool goes back to `min_pool_size`.
//!
//! Static (`adaptive_pool` false): the warm-up target is `min_pool_size`
//! and the shrink keeps `max_pool_size`, as Terway's pool does.
//!
//! Invariants: [`IdleTarget::warm`] <= [`IdleTarget::keep`], both within
//! `[min, max]`; a bucket counts only allocations of its own time slot
//! (a slot reused after the window is emptied first).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use eniip_protocol::core::SecurityGroupSet;

/// Buckets of the rate window.
pub(crate) const BUCKETS: usize = 10;

/// The rate window, in pool checks (`pool_check_interval`): with the
/// default 120 s, six minutes without an allocation bring the pool back
/// to `min_pool_size`.
pub(crate) const WINDOW_CHECKS: u32 = 3;

/// The lead time assumed before any cold wait was seen.
const DEFAULT_LEAD: Duration = Duration::from_secs(1);

/// Weight of a new cold wait in the lead time's average.
const LEAD_WEIGHT: f64 = 0.3;

/// The rate and lead-time tracker, with the invariants in the module's doc.
#[derive(Debug, Clone)]
pub(crate) struct IdleTarget {
    adaptive: bool,
    origin: Instant,
    bucket: Duration,
    /// (the time slot it counts, allocations in it), slot % BUCKETS.
    counts: [(u64, u32); BUCKETS],
    /// The same for releases.
    released: [(u64, u32); BUCKETS],
    lead_s: f64,
}

impl IdleTarget {
    /// A tracker whose window is [`WINDOW_CHECKS`] × `pool_check_interval`
    /// (at least a second); `adaptive` false: static bounds.
    pub(crate) fn new(adaptive: bool, pool_check_interval: Duration, now: Instant) -> IdleTarget {
        let window = (pool_check_interval * WINDOW_CHECKS).max(Duration::from_secs(1));
        IdleTarget {
            adaptive,
            origin: now,
            bucket: window / BUCKETS as u32,
            counts: [(u64::MAX, 0); BUCKETS],
            released: [(u64::MAX, 0); BUCKETS],
            lead_s: DEFAULT_LEAD.as_secs_f64(),
        }
    }

    fn slot(&self, now: Instant) -> u64 {
        let since = now.saturating_duration_since(self.origin).as_nanos();
        (since / self.bucket.as_nanos().max(1)) as u64
    }

    /// A new allocation was asked at `now` (not an owner's repeat).
    pub(crate) fn allocated(&mut self, now: Instant) {
        let slot = self.slot(now);
        count(&mut self.counts, slot);
    }

    /// An allocation was released at `now`.
    pub(crate) fn released(&mut self, now: Instant) {
        let slot = self.slot(now);
        count(&mut self.released, slot);
    }

    /// An `alloc` waited `waited` for an address (none was idle).
    pub(crate) fn waited(&mut self, waited: Duration) {
        let w = waited.as_secs_f64().clamp(0.01, 60.0);
        self.lead_s += LEAD_WEIGHT * (w - self.lead_s);
    }

    /// Allocations per second: the higher of the last two buckets' rate
    /// and the whole window's.
    pub(crate) fn rate(&self, now: Instant) -> f64 {
        self.rate_of(&self.counts, now)
    }

    /// Releases per second, as [`Self::rate`].
    fn release_rate(&self, now: Instant) -> f64 {
        self.rate_of(&self.released, now)
    }

    fn rate_of(&self, counts: &[(u64, u32); BUCKETS], now: Instant) -> f64 {
        let slot = self.slot(now);
        let in_last = |n: u64| -> u32 {
            counts
                .iter()
                .filter(|(s, _)| *s != u64::MAX && *s <= slot && slot - *s < n)
                .map(|(_, c)| *c)
                .sum()
        };
        let per_s = |count: u32, buckets: u64| {
            f64::from(count) / (self.bucket.as_secs_f64() * buckets as f64)
        };
        per_s(in_last(2), 2).max(per_s(in_last(BUCKETS as u64), BUCKETS as u64))
    }

    /// The lead time a refill takes, as the cold waits say.
    #[cfg(test)]
    pub(crate) fn lead(&self) -> Duration {
        Duration::from_secs_f64(self.lead_s)
    }

    /// The net demand expected during one refill, with its margin: 0
    /// when nothing was allocated for a whole window.
    fn wanted(&self, now: Instant) -> usize {
        let (allocs, releases) = (self.rate(now), self.release_rate(now));
        if allocs <= 0.0 {
            return 0;
        }
        let net = (allocs - releases).max(0.0) * self.lead_s;
        let arrivals = allocs * self.lead_s;
        (net + 2.0 * arrivals.sqrt()).ceil() as usize
    }

    /// Idle addresses the warm-up keeps ready, within `[min, max]`.
    pub(crate) fn warm(&self, now: Instant, min: usize, max: usize) -> usize {
        if !self.adaptive {
            return min;
        }
        self.wanted(now).clamp(min, max.max(min))
    }

    /// Idle addresses a shrink keeps at most, within `[min, max]` and
    /// never under [`Self::warm`].
    pub(crate) fn keep(&self, now: Instant, min: usize, max: usize) -> usize {
        if !self.adaptive {
            return max.max(min);
        }
        let w = self.wanted(now);
        (w + w.div_ceil(4)).clamp(min, max.max(min))
    }
}

/// One [`IdleTarget`] per security-group set (`None`: the node's own
/// set): a set warms up for its own pods' rate, never for another set's
/// (a busy set would otherwise make every other set hold idle addresses,
/// and ENIs, it has no use for).
#[derive(Debug, Clone)]
pub(crate) struct IdleTargets {
    adaptive: bool,
    pool_check_interval: Duration,
    by_set: BTreeMap<Option<SecurityGroupSet>, IdleTarget>,
}

impl IdleTargets {
    /// The node's own set's tracker, started at `now`.
    pub(crate) fn new(adaptive: bool, pool_check_interval: Duration, now: Instant) -> IdleTargets {
        let own = IdleTarget::new(adaptive, pool_check_interval, now);
        IdleTargets {
            adaptive,
            pool_check_interval,
            by_set: BTreeMap::from([(None, own)]),
        }
    }

    fn of(&mut self, set: Option<&SecurityGroupSet>, now: Instant) -> &mut IdleTarget {
        let (adaptive, interval) = (self.adaptive, self.pool_check_interval);
        self.by_set
            .entry(set.cloned())
            .or_insert_with(|| IdleTarget::new(adaptive, interval, now))
    }

    /// A new allocation of `set` was asked at `now`.
    pub(crate) fn allocated(&mut self, set: Option<&SecurityGroupSet>, now: Instant) {
        self.of(set, now).allocated(now);
    }

    /// An allocation of `set` was released at `now`.
    pub(crate) fn released(&mut self, set: Option<&SecurityGroupSet>, now: Instant) {
        self.of(set, now).released(now);
    }

    /// An `alloc` waited `waited`: the cloud's refill time, every set's.
    pub(crate) fn waited(&mut self, waited: Duration) {
        for t in self.by_set.values_mut() {
            t.waited(waited);
        }
    }

    /// Idle addresses of `set` the warm-up keeps ready, within `[min, max]`.
    pub(crate) fn warm(
        &self,
        set: Option<&SecurityGroupSet>,
        now: Instant,
        min: usize,
        max: usize,
    ) -> usize {
        self.by_set
            .get(&set.cloned())
            .map_or(min, |t| t.warm(now, min, max))
    }

    /// Idle addresses a shrink keeps at most, all sets together, within
    /// `[min, max]`.
    pub(crate) fn keep(&self, now: Instant, min: usize, max: usize) -> usize {
        if !self.adaptive {
            return max.max(min);
        }
        let each: usize = self.by_set.values().map(|t| t.keep(now, 0, max)).sum();
        each.clamp(min, max.max(min))
    }
}

/// Counts one event in `slot`'s bucket (emptied first if it held an
/// older slot).
fn count(counts: &mut [(u64, u32); BUCKETS], slot: u64) {
    let c = &mut counts[(slot % BUCKETS as u64) as usize];
    if c.0 != slot {
        *c = (slot, 0);
    }
    c.1 = c.1.saturating_add(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHECK: Duration = Duration::from_secs(2);

    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    #[test]
    fn the_target_rises_with_the_rate_and_stays_within_the_bounds() {
        let t0 = Instant::now();
        let mut t = IdleTarget::new(true, CHECK, t0);
        assert_eq!(t.warm(t0, 0, 5), 0, "nothing allocated: min");
        assert_eq!(t.keep(t0, 0, 5), 0);
        // One allocation a second: about one during a one-second refill.
        for s in 0..3 {
            t.allocated(at(t0, s * 1000));
        }
        let slow = t.warm(at(t0, 2500), 0, 64);
        assert!((1..=4).contains(&slow), "{slow}");
        // Twenty a second (ten over the last two one-second buckets, the
        // newest just begun): more.
        for i in 0..40 {
            t.allocated(at(t0, 3000 + i * 50));
        }
        let fast = t.warm(at(t0, 5000), 0, 64);
        assert!(fast > slow && fast >= 10, "{fast} vs {slow}");
        assert!(t.keep(at(t0, 5000), 0, 64) >= fast);
        // The bounds hold.
        assert_eq!(t.warm(at(t0, 5000), 0, 5), 5);
        assert_eq!(t.keep(at(t0, 5000), 0, 5), 5);
        assert_eq!(t.warm(at(t0, 5000), 80, 100), 80);
    }

    #[test]
    fn a_set_warms_up_for_its_own_pods_only() {
        let t0 = Instant::now();
        let a = SecurityGroupSet::parse("sg-a").unwrap();
        let mut t = IdleTargets::new(true, CHECK, t0);
        for i in 0..40 {
            t.allocated(Some(&a), at(t0, i * 50));
        }
        let now = at(t0, 2000);
        assert!(t.warm(Some(&a), now, 0, 64) >= 10);
        assert_eq!(
            t.warm(None, now, 0, 64),
            0,
            "the node's own set has no pods"
        );
        let b = SecurityGroupSet::parse("sg-b").unwrap();
        assert_eq!(t.warm(Some(&b), now, 2, 64), 2, "an unseen set: min");
        // What a shrink keeps is every set's together.
        assert!(t.keep(now, 0, 64) >= t.warm(Some(&a), now, 0, 64));
        assert_eq!(IdleTargets::new(false, CHECK, t0).keep(now, 1, 5), 5);
    }

    #[test]
    fn the_target_falls_back_to_min_when_allocation_stops() {
        let t0 = Instant::now();
        let mut t = IdleTarget::new(true, CHECK, t0);
        for i in 0..50 {
            t.allocated(at(t0, i * 100));
        }
        let busy = t.warm(at(t0, 5000), 2, 64);
        assert!(busy > 2, "{busy}");
        // Half a window later it is still held (a fall must last).
        assert!(t.warm(at(t0, 5000 + 3000), 2, 64) > 2);
        // A whole window (3 checks of 2 s) without one: back to min.
        let quiet = at(t0, 5000 + 6500);
        assert_eq!(t.warm(quiet, 2, 64), 2);
        assert_eq!(t.keep(quiet, 2, 64), 2);
        assert_eq!(t.rate(quiet), 0.0);
        // A bucket reused later counts only its own slot.
        t.allocated(at(t0, 100_000));
        assert!(t.rate(at(t0, 100_000)) < 1.0);
    }

    #[test]
    fn releases_that_keep_up_want_only_the_margin() {
        let t0 = Instant::now();
        let mut growing = IdleTarget::new(true, CHECK, t0);
        let mut churning = IdleTarget::new(true, CHECK, t0);
        for i in 0..40 {
            growing.allocated(at(t0, i * 100));
            churning.allocated(at(t0, i * 100));
            churning.released(at(t0, i * 100 + 50));
        }
        let now = at(t0, 4000);
        assert!(churning.warm(now, 0, 100) < growing.warm(now, 0, 100));
        assert!(churning.warm(now, 0, 100) > 0, "churn still needs a margin");
        // Everyone leaving: nothing beyond the margin.
        let mut leaving = IdleTarget::new(true, CHECK, t0);
        leaving.allocated(at(t0, 0));
        for i in 0..100 {
            leaving.released(at(t0, i * 10));
        }
        assert!(leaving.warm(at(t0, 1000), 0, 100) <= 4);
    }

    #[test]
    fn slower_refills_want_more_ready() {
        let t0 = Instant::now();
        let mut quick = IdleTarget::new(true, CHECK, t0);
        let mut slow = IdleTarget::new(true, CHECK, t0);
        for i in 0..20 {
            quick.allocated(at(t0, i * 100));
            slow.allocated(at(t0, i * 100));
        }
        for _ in 0..10 {
            quick.waited(Duration::from_millis(100));
            slow.waited(Duration::from_secs(3));
        }
        let now = at(t0, 2000);
        assert!(slow.warm(now, 0, 100) > quick.warm(now, 0, 100));
        assert!(quick.lead() < Duration::from_millis(200));
    }

    #[test]
    fn static_is_min_to_max_whatever_the_rate() {
        let t0 = Instant::now();
        let mut t = IdleTarget::new(false, CHECK, t0);
        for i in 0..100 {
            t.allocated(at(t0, i * 10));
        }
        assert_eq!(t.warm(at(t0, 1000), 1, 5), 1);
        assert_eq!(t.keep(at(t0, 1000), 1, 5), 5);
        assert_eq!(t.keep(at(t0, 1000), 7, 5), 7, "never under min");
    }
}
