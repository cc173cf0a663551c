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
//! lead time as a moving average of the pool's own top-ups (from the
//! moment the pool asked one to its addresses being usable; a top-up
//! does not wait out the aggregation window, see `worker`). The warm-up
//! target is the least count that the arrivals during one refill, less
//! the releases meanwhile (both taken as Poisson: their difference is a
//! Skellam variable), exceed with a chance of at most [`WAIT_RISK`], but
//! never more than were allocated in the whole window (one pod is not a
//! rate); the shrink keeps at most a quarter more or, while allocations
//! outpace releases, what that difference takes before the next pool
//! check if more (within the same count). Both stay within
//! `min_pool_size` and `max_pool_size`, which remain the bounds. With no
//! allocation for a whole window the target is 0 and the pool goes back
//! to `min_pool_size`.
//!
//! A surplus no pod will take ([`IdleTargets::untaken`]: idle above what
//! the shrink keeps by more than the allocations expected before the
//! next pool check less the releases expected meanwhile, as when a
//! storm's pods leave) brings the pool check forward to a tenth of a pool
//! check after it appears ([`SurplusWatch`], [`SURPLUS_GIVE_BACK`]).
//!
//! Static (`adaptive_pool` false): the warm-up target is `min_pool_size`
//! and the shrink keeps `max_pool_size`, as Terway's pool does; nothing
//! brings its pool check forward.
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

/// The chance, at most, that the pods arriving during one refill take
/// more than the idle addresses ready (less what releases give back
/// meanwhile): the warm-up target's margin.
const WAIT_RISK: f64 = 0.01;

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
    /// `pool_check_interval`: how long a shrink's keep must last.
    check_s: f64,
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
            check_s: pool_check_interval.as_secs_f64(),
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

    /// A top-up the pool asked for itself came `lead` after it was asked
    /// (its aggregation, call and metadata wait included): a refill's
    /// lead time.
    pub(crate) fn refilled(&mut self, lead: Duration) {
        let w = lead.as_secs_f64().clamp(0.01, 60.0);
        self.lead_s += LEAD_WEIGHT * (w - self.lead_s);
    }

    /// Allocations counted over the whole window.
    fn allocations(&self, now: Instant) -> u32 {
        in_last(&self.counts, self.slot(now), BUCKETS as u64)
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
        let per_s = |buckets: u64| {
            f64::from(in_last(counts, slot, buckets)) / (self.bucket.as_secs_f64() * buckets as f64)
        };
        per_s(2).max(per_s(BUCKETS as u64))
    }

    /// The lead time a refill takes, as the pool's top-ups say.
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
        let wanted = drop_within(allocs * self.lead_s, releases * self.lead_s, WAIT_RISK);
        // One pod is not a rate: never more ready than were allocated in
        // the whole window.
        wanted.min(self.allocations(now) as usize)
    }

    /// Idle addresses the warm-up keeps ready, within `[min, max]`.
    pub(crate) fn warm(&self, now: Instant, min: usize, max: usize) -> usize {
        if !self.adaptive {
            return min;
        }
        self.wanted(now).clamp(min, max.max(min))
    }

    /// Idle addresses a shrink keeps at most, within `[min, max]` and
    /// never under [`Self::warm`]: the warm-up target and a quarter more,
    /// or, when allocations outpace releases (a rise), what that net
    /// demand takes before the next pool check if more (what it would
    /// take is not given back only to be asked for again).
    pub(crate) fn keep(&self, now: Instant, min: usize, max: usize) -> usize {
        if !self.adaptive {
            return max.max(min);
        }
        let w = self.wanted(now);
        let net = (self.rate(now) - self.release_rate(now)).max(0.0) * self.check_s;
        let allocated = self.allocations(now) as usize;
        (w + w.div_ceil(4).max(net.ceil() as usize))
            .min(allocated)
            .clamp(min, max.max(min))
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

    /// A top-up of the pool came `lead` after it was asked: the cloud's
    /// refill time, every set's.
    pub(crate) fn refilled(&mut self, lead: Duration) {
        for t in self.by_set.values_mut() {
            t.refilled(lead);
        }
    }

    /// Whether `idle` addresses hold a surplus no pod will take: more
    /// above what a shrink keeps than the allocations expected before
    /// the next pool check, less the releases expected meanwhile (under
    /// steady churn what pods take, others give back: the surplus
    /// stays), never when static.
    pub(crate) fn untaken(&self, now: Instant, idle: usize, min: usize, max: usize) -> bool {
        if !self.adaptive {
            return false;
        }
        let keep = self.keep(now, min, max);
        let rate: f64 = self
            .by_set
            .values()
            .map(|t| (t.rate(now) - t.release_rate(now)).max(0.0))
            .sum();
        let expected = rate * self.pool_check_interval.as_secs_f64();
        idle.saturating_sub(keep) as f64 > expected
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

/// How soon after a surplus no pod will take appears
/// ([`IdleTargets::untaken`]) the pool check that gives it back runs, in
/// pool checks: 100 ms at pool-trace's 1 s, 12 s at the default 120 s.
const SURPLUS_GIVE_BACK: f64 = 0.1;

/// The least time between two pool checks a surplus brings forward, in
/// pool checks (250 ms at 1 s, 30 s at the default 120 s): a surplus that
/// keeps growing (pods leaving one by one) goes back in a few calls, not
/// one per departure. A fixed time would not do: at the default interval
/// a scale-down of a few minutes would give back every 250 ms, an
/// unassign call per ENI each time, against the account's flow control.
const SURPLUS_GAP: f64 = 0.25;

/// Brings the pool check forward for a surplus no pod will take: to
/// [`SURPLUS_GIVE_BACK`] after it appears, and once a check has run,
/// again only when the surplus grew beyond what that check left (a
/// surplus it could not give back waits for the next regular check),
/// and no sooner than [`SURPLUS_GAP`] after it; both in pool checks.
#[derive(Debug)]
pub(crate) struct SurplusWatch {
    give_back: Duration,
    gap: Duration,
    since: Option<Instant>,
    left: Option<usize>,
    checked: Option<Instant>,
}

impl SurplusWatch {
    /// A watch for pool checks every `pool_check_interval`.
    pub(crate) fn new(pool_check_interval: Duration) -> SurplusWatch {
        SurplusWatch {
            give_back: pool_check_interval.mul_f64(SURPLUS_GIVE_BACK),
            gap: pool_check_interval.mul_f64(SURPLUS_GAP),
            since: None,
            left: None,
            checked: None,
        }
    }

    /// At `now`, `idle` addresses hold (`untaken`) or not a surplus no
    /// pod will take: when the pool check is due for it, if it is.
    pub(crate) fn observe(&mut self, now: Instant, idle: usize, untaken: bool) -> Option<Instant> {
        if !untaken {
            (self.since, self.left) = (None, None);
            return None;
        }
        if self.left.is_some_and(|left| idle <= left) {
            return None;
        }
        let due = *self.since.get_or_insert(now) + self.give_back;
        Some(self.checked.map_or(due, |at| due.max(at + self.gap)))
    }

    /// A pool check ran at `now` and left `idle` addresses idle.
    pub(crate) fn checked(&mut self, idle: usize, now: Instant) {
        self.since = None;
        self.left = Some(idle);
        self.checked = Some(now);
    }
}

/// The least `k` such that the idle count falls by more than `k` with a
/// chance of at most `risk`, when `arrivals` and `releases` are the
/// means of two Poisson counts over the same time (the fall is their
/// difference, a Skellam variable: releases give back what arrivals take,
/// but their variance adds). Summed in log space, so that large means do
/// not underflow.
fn drop_within(arrivals: f64, releases: f64, risk: f64) -> usize {
    fn pmf(mean: f64, n: usize) -> Vec<f64> {
        let mut lp = -mean;
        let ln_mean = mean.max(f64::MIN_POSITIVE).ln();
        (0..n)
            .map(|k| {
                if k > 0 {
                    lp += ln_mean - (k as f64).ln();
                }
                lp.exp()
            })
            .collect()
    }
    let n = |mean: f64| (mean + 12.0 * mean.sqrt() + 12.0).ceil() as usize;
    let (na, nr) = (n(arrivals), n(releases));
    let a = pmf(arrivals, na);
    let r = pmf(releases, nr);
    // above[k]: the chance of more than k arrivals.
    let mut above = vec![0.0; na + nr + 1];
    let mut tail = 0.0;
    for k in (0..na).rev() {
        above[k] = tail;
        tail += a[k];
    }
    // The chance of a fall beyond k shrinks as k grows: a binary search
    // (a few sums of `nr` terms, even for the means of a busy node).
    let beyond = |k: usize| -> f64 { r.iter().enumerate().map(|(j, pr)| pr * above[k + j]).sum() };
    let (mut lo, mut hi) = (0, na);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if beyond(mid) <= risk {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

/// The events counted in the `n` buckets up to `slot` (its own
/// included).
fn in_last(counts: &[(u64, u32); BUCKETS], slot: u64, n: u64) -> u32 {
    counts
        .iter()
        .filter(|(s, _)| *s != u64::MAX && *s <= slot && slot - *s < n)
        .map(|(_, c)| *c)
        .sum()
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
    fn the_margin_covers_the_bursts_of_poisson_arrivals() {
        // One arrival expected per refill: more than 3 come one time in
        // 53, more than 4 one time in 270.
        assert_eq!(drop_within(1.0, 0.0, WAIT_RISK), 4);
        // As many releases: they give back what arrivals take, but the
        // fall is as likely to exceed 2 as 3 is to be exceeded alone.
        assert_eq!(drop_within(1.0, 1.0, WAIT_RISK), 3);
        assert_eq!(drop_within(0.0, 0.0, WAIT_RISK), 0);
        assert_eq!(drop_within(0.0, 5.0, WAIT_RISK), 0);
        // Large means neither underflow nor lose the tail (1000 + 2.33 sd).
        let big = drop_within(1000.0, 0.0, WAIT_RISK);
        assert!((1065..1085).contains(&big), "{big}");
        // Four a second come and go, refills of 250 ms: three ready, where
        // two standard deviations of the arrivals alone made two (a
        // burst of four within a refill, one in 53, made pods wait).
        let t0 = Instant::now();
        let mut t = IdleTarget::new(true, CHECK, t0);
        for _ in 0..20 {
            t.refilled(Duration::from_millis(250));
        }
        for i in 0..24 {
            t.allocated(at(t0, i * 250));
            t.released(at(t0, i * 250 + 125));
        }
        assert!(
            t.warm(at(t0, 6000), 0, 64) >= 3,
            "{}",
            t.warm(at(t0, 6000), 0, 64)
        );
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
            quick.refilled(Duration::from_millis(100));
            slow.refilled(Duration::from_secs(3));
        }
        let now = at(t0, 2000);
        assert!(slow.warm(now, 0, 100) > quick.warm(now, 0, 100));
        assert!(quick.lead() < Duration::from_millis(200));
    }

    #[test]
    fn one_pod_is_not_a_rate() {
        let t0 = Instant::now();
        let mut t = IdleTarget::new(true, CHECK, t0);
        t.allocated(t0);
        let now = at(t0, 100);
        assert!(t.warm(now, 0, 64) <= 1, "{}", t.warm(now, 0, 64));
        assert!(t.keep(now, 0, 64) <= 1, "{}", t.keep(now, 0, 64));
        // Two: at most two.
        t.allocated(at(t0, 200));
        assert!(t.warm(at(t0, 300), 0, 64) <= 2);
        // min_pool_size still holds.
        assert_eq!(t.warm(now, 3, 64), 3);
    }

    #[test]
    fn the_lead_follows_the_pools_own_refills() {
        let t0 = Instant::now();
        let mut t = IdleTarget::new(true, CHECK, t0);
        assert_eq!(t.lead(), DEFAULT_LEAD, "none seen yet");
        for _ in 0..20 {
            t.refilled(Duration::from_millis(250));
        }
        let lead = t.lead().as_secs_f64();
        assert!((0.24..0.26).contains(&lead), "{lead}");
        // Busy (10 a second, nothing released): a quick refill wants
        // fewer ready than the default second would.
        let mut default = IdleTarget::new(true, CHECK, t0);
        for i in 0..30 {
            t.allocated(at(t0, i * 100));
            default.allocated(at(t0, i * 100));
        }
        let now = at(t0, 3000);
        assert!(t.warm(now, 0, 64) < default.warm(now, 0, 64));
    }

    #[test]
    fn a_rise_keeps_what_it_will_take_before_the_next_check() {
        // Three a second, one a second released: a shrink keeps the two
        // a second net demand of a 2 s check beyond the warm-up target
        // (a quarter more gave back what the rise took right after, and
        // its pods waited for it to be asked again).
        let t0 = Instant::now();
        let mut rise = IdleTarget::new(true, CHECK, t0);
        for _ in 0..20 {
            rise.refilled(Duration::from_millis(250));
        }
        for i in 0..18 {
            rise.allocated(at(t0, i * 333));
            if i % 3 == 0 {
                rise.released(at(t0, i * 333 + 100));
            }
        }
        let now = at(t0, 6000);
        let (warm, keep) = (rise.warm(now, 0, 64), rise.keep(now, 0, 64));
        assert!(keep >= warm + 4, "warm {warm} keep {keep}");
        // Steady churn: a quarter more only.
        let mut churn = IdleTarget::new(true, CHECK, t0);
        for i in 0..24 {
            churn.allocated(at(t0, i * 250));
            churn.released(at(t0, i * 250 + 125));
        }
        let (warm, keep) = (churn.warm(now, 0, 64), churn.keep(now, 0, 64));
        assert_eq!(keep, warm + warm.div_ceil(4));
    }

    #[test]
    fn a_surplus_no_pod_will_take_is_seen() {
        let t0 = Instant::now();
        let mut t = IdleTargets::new(true, CHECK, t0);
        // Four a second, nothing released, the last 600 ms quiet: what
        // the next check's may take (19 in the 6 s window: 19/6 a second
        // over 2 s, 6.3) is not a surplus; beyond it is.
        for i in 0..24 {
            t.allocated(None, at(t0, i * 250));
        }
        let now = at(t0, 6600);
        let keep = t.keep(now, 0, 64);
        assert!(!t.untaken(now, keep + 6, 0, 64));
        assert!(t.untaken(now, keep + 7, 0, 64));
        // Then all leaving: releases outpace allocations, so nothing
        // beyond what a shrink keeps will be taken.
        for i in 0..60 {
            t.released(None, at(t0, 6000 + i * 10));
        }
        let now = at(t0, 6600);
        let keep = t.keep(now, 0, 64);
        assert!(!t.untaken(now, keep, 0, 64));
        assert!(t.untaken(now, keep + 1, 0, 64));
        // Once allocation stopped for a whole window, any surplus is.
        let quiet = at(t0, 6000 + 6500);
        assert!(t.untaken(quiet, 1, 0, 64));
        assert!(!t.untaken(quiet, 0, 0, 64));
        // Static pools give back at their checks only.
        assert!(!IdleTargets::new(false, CHECK, t0).untaken(quiet, 50, 0, 5));
    }

    #[test]
    fn under_steady_churn_a_surplus_is_not_taken() {
        // Four a second come and four go: what pods take, others give
        // back, so idle beyond what a shrink keeps stays idle (before,
        // the four a second of allocations alone made 8 over a 2 s check
        // look taken).
        let t0 = Instant::now();
        let mut t = IdleTargets::new(true, CHECK, t0);
        for i in 0..24 {
            t.allocated(None, at(t0, i * 250));
            t.released(None, at(t0, i * 250 + 125));
        }
        let now = at(t0, 6000);
        let keep = t.keep(now, 0, 64);
        assert!(!t.untaken(now, keep, 0, 64));
        assert!(t.untaken(now, keep + 2, 0, 64), "keep {keep}");
    }

    #[test]
    fn a_surplus_brings_one_check_forward_until_it_grows() {
        let t0 = Instant::now();
        let mut w = SurplusWatch::new(Duration::from_secs(1));
        let (give_back, gap) = (Duration::from_millis(100), Duration::from_millis(250));
        assert_eq!(w.observe(t0, 3, false), None);
        let due = at(t0, 0) + give_back;
        assert_eq!(w.observe(t0, 9, true), Some(due));
        // Seen again later: still due when it first appeared.
        assert_eq!(w.observe(at(t0, 50), 9, true), Some(due));
        // The check ran and left 6 (it could not give all back): not
        // again for those 6, again once it grows, gap after it.
        w.checked(6, at(t0, 100));
        assert_eq!(w.observe(at(t0, 110), 6, true), None);
        assert_eq!(w.observe(at(t0, 120), 7, true), Some(at(t0, 100) + gap));
        w.checked(6, at(t0, 600));
        assert_eq!(
            w.observe(at(t0, 1200), 9, true),
            Some(at(t0, 1200) + give_back)
        );
        // Gone, then back right after that check: it waits for the gap.
        w.checked(3, at(t0, 1300));
        assert_eq!(w.observe(at(t0, 1350), 2, false), None);
        assert_eq!(w.observe(at(t0, 1360), 6, true), Some(at(t0, 1300) + gap));
        // Later on: give_back after it appears.
        assert_eq!(w.observe(at(t0, 1400), 2, false), None);
        assert_eq!(
            w.observe(at(t0, 3000), 6, true),
            Some(at(t0, 3000) + give_back)
        );
    }

    #[test]
    fn the_surplus_times_are_in_pool_checks() {
        // At the default interval a surplus waits 12 s and then 30 s
        // between checks: not a call per ENI every 250 ms of a
        // scale-down.
        let t0 = Instant::now();
        let mut w = SurplusWatch::new(Duration::from_secs(120));
        assert_eq!(w.observe(t0, 9, true), Some(t0 + Duration::from_secs(12)));
        w.checked(6, t0 + Duration::from_secs(12));
        assert_eq!(
            w.observe(t0 + Duration::from_secs(13), 7, true),
            Some(t0 + Duration::from_secs(42))
        );
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
