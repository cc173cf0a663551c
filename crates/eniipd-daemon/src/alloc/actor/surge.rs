//! Growth that follows demand. Pods often arrive in waves (a runtime runs
//! a limited number of CNI ADDs at once); growing by each wave's shortfall
//! costs one call per wave. A *dry spell* is a time when some client waits
//! for the cloud (no idle address could answer it); a dry spell that begins
//! within [`SURGE_GAP`] of the end of the previous one is a *surge*: demand
//! arrives faster than the pool refills.
//!
//! During a surge the planner may add pool addresses to the calls it makes
//! anyway for the clients (see `placement::PlanInput::surplus`), up to
//! `max_pool_size` idle; once no dry spell has begun for [`SURGE_GAP`],
//! the next pool check (`pool_check_interval`) gives back what the surge added above
//! `min_pool_size`.
//!
//! Invariants, kept by the methods here and tested below:
//! - the first dry spell after a quiet time is never a surge: a single
//!   burst grows by its shortfall only;
//! - a surge is decided when its dry spell begins and holds until the
//!   spell ends (requests that join it do not re-decide);
//! - what the surge added ([`Surge::grew`]) is offered back at most once
//!   ([`Surge::shrink_back`] until [`Surge::settle`]), and only after a
//!   quiet [`SURGE_GAP`].

use std::time::{Duration, Instant};

/// A dry spell beginning within this time of the previous one's end is a
/// surge; this long without one ends it.
pub(super) const SURGE_GAP: Duration = Duration::from_secs(10);

/// The surge state, with the invariants in the module's doc.
#[derive(Debug, Default)]
pub(super) struct Surge {
    /// When the dry spell now on began.
    dry_since: Option<Instant>,
    /// When the last dry spell ended.
    last_dry_end: Option<Instant>,
    /// Whether the dry spell now on is a surge.
    on: bool,
    /// Addresses asked beyond the clients' shortfall since the last
    /// shrink-back.
    grown: usize,
}

impl Surge {
    /// Records at `now` whether some client waits for the cloud; returns
    /// true when a surge begins.
    pub(super) fn observe(&mut self, now: Instant, dry: bool) -> bool {
        match (dry, self.dry_since) {
            (true, None) => {
                self.dry_since = Some(now);
                self.on = self
                    .last_dry_end
                    .is_some_and(|end| now.saturating_duration_since(end) <= SURGE_GAP);
                self.on
            }
            (false, Some(_)) => {
                self.dry_since = None;
                self.on = false;
                self.last_dry_end = Some(now);
                false
            }
            _ => false,
        }
    }

    /// Whether the planner may add pool addresses to its calls now.
    pub(super) fn surging(&self) -> bool {
        self.on
    }

    /// The surge asked `n` addresses beyond the clients' shortfall.
    pub(super) fn grew(&mut self, n: usize) {
        self.grown += n;
    }

    /// What the surges added, once no dry spell is on and none has begun
    /// for [`SURGE_GAP`]: the most a shrink-back gives back.
    pub(super) fn shrink_back(&self, now: Instant) -> Option<usize> {
        let quiet = self.dry_since.is_none()
            && self
                .last_dry_end
                .is_some_and(|end| now.saturating_duration_since(end) >= SURGE_GAP);
        (quiet && self.grown > 0).then_some(self.grown)
    }

    /// The shrink-back was made (or found nothing to give back).
    pub(super) fn settle(&mut self) {
        self.grown = 0;
    }
}

/// Idle addresses a shrink-back keeps: what was idle less what the surge
/// added, not below `min_idle` and not above `max_idle`.
pub(super) fn keep_after(idle: usize, grown: usize, min_idle: usize, max_idle: usize) -> usize {
    idle.saturating_sub(grown).max(min_idle).min(max_idle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    #[test]
    fn a_single_burst_is_not_a_surge() {
        let t0 = Instant::now();
        let mut s = Surge::default();
        assert!(!s.observe(t0, true));
        assert!(!s.surging());
        // Requests joining the same spell do not make it one.
        assert!(!s.observe(at(t0, 5), true));
        assert!(!s.surging());
        s.observe(at(t0, 900), false);
        assert!(!s.surging());
    }

    #[test]
    fn a_spell_soon_after_the_last_is_a_surge_until_it_ends() {
        let t0 = Instant::now();
        let mut s = Surge::default();
        s.observe(t0, true);
        s.observe(at(t0, 500), false);
        assert!(s.observe(at(t0, 600), true), "the pool ran dry again");
        assert!(s.surging());
        assert!(!s.observe(at(t0, 700), true), "decided once per spell");
        assert!(s.surging());
        s.observe(at(t0, 800), false);
        assert!(!s.surging());
        // A spell after a quiet gap is no surge again.
        let later = at(t0, 800) + SURGE_GAP + Duration::from_millis(1);
        assert!(!s.observe(later, true));
        assert!(!s.surging());
    }

    #[test]
    fn what_a_surge_added_is_offered_back_once_after_a_quiet_gap() {
        let t0 = Instant::now();
        let mut s = Surge::default();
        s.observe(t0, true);
        s.observe(at(t0, 100), false);
        s.observe(at(t0, 200), true);
        s.grew(40);
        assert_eq!(s.shrink_back(at(t0, 300)), None, "a spell is on");
        s.observe(at(t0, 400), false);
        assert_eq!(s.shrink_back(at(t0, 500)), None, "not quiet long enough");
        let quiet = at(t0, 400) + SURGE_GAP;
        assert_eq!(s.shrink_back(quiet), Some(40));
        s.settle();
        assert_eq!(s.shrink_back(quiet), None);
    }

    #[test]
    fn a_new_spell_postpones_the_shrink_back() {
        let t0 = Instant::now();
        let mut s = Surge::default();
        s.observe(t0, true);
        s.observe(at(t0, 100), false);
        s.observe(at(t0, 200), true);
        s.grew(16);
        s.observe(at(t0, 300), false);
        let quiet = at(t0, 300) + SURGE_GAP;
        // Dry again just before the gap ends: still a surge, nothing back.
        s.observe(quiet - Duration::from_millis(1), true);
        assert!(s.surging());
        assert_eq!(s.shrink_back(quiet), None);
    }

    #[test]
    fn the_shrink_back_keeps_what_was_idle_before_within_the_bounds() {
        // 40 idle, 30 of them the surge's: keep 10.
        assert_eq!(keep_after(40, 30, 0, 128), 10);
        // Never below min_pool_size.
        assert_eq!(keep_after(40, 30, 16, 128), 16);
        // Clients took some: keep what is left above the surge's.
        assert_eq!(keep_after(20, 30, 0, 128), 0);
        // Never above max_pool_size (the usual shrink).
        assert_eq!(keep_after(200, 10, 0, 128), 128);
    }
}
