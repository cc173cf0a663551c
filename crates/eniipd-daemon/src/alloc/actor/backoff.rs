//! Capped exponential backoff for the actor's background work that failed
//! (growing the pool, giving addresses back, freeing an ENI).
//!
//! Invariants: a failure backs off for the current delay (±20% jitter) and
//! doubles it up to the cap; a success ends the backoff and resets the
//! delay to one second; nothing is ever backed off past `max` (+20%).

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// One piece of work's backoff.
#[derive(Debug)]
pub(super) struct Backoff {
    until: Option<Instant>,
    delay: Duration,
    max: Duration,
}

const FIRST: Duration = Duration::from_secs(1);

impl Backoff {
    pub(super) fn new(max: Duration) -> Backoff {
        Backoff {
            until: None,
            delay: FIRST,
            max,
        }
    }

    /// Backing off at `now`.
    pub(super) fn active(&self, now: Instant) -> bool {
        self.ends_after(now).is_some()
    }

    /// When the backoff ends, if it is still on at `now` (one that ended
    /// is not a reason to wake up).
    pub(super) fn ends_after(&self, now: Instant) -> Option<Instant> {
        self.until.filter(|u| *u > now)
    }

    pub(super) fn fail(&mut self, now: Instant) {
        let d = self.delay.mul_f64(eniip_util::rand::jitter(0.2));
        self.until = Some(now + d);
        self.delay = (self.delay * 2).min(self.max);
    }

    pub(super) fn succeed(&mut self) {
        self.until = None;
        self.delay = FIRST;
    }
}

/// ENIs whose free (detach) failed: not tried again for a while.
#[derive(Debug, Default)]
pub(super) struct FreeBackoff {
    until: HashMap<String, Instant>,
}

impl FreeBackoff {
    /// How long an ENI whose detach failed is left alone.
    const PAUSE: Duration = Duration::from_secs(60);

    pub(super) fn failed(&mut self, eni: String, now: Instant) {
        self.until.insert(eni, now + Self::PAUSE);
    }

    /// May `eni` be freed at `now`?
    pub(super) fn ready(&self, eni: &str, now: Instant) -> bool {
        self.until.get(eni).is_none_or(|t| *t <= now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_the_cap_and_a_success_resets() {
        let now = Instant::now();
        let mut b = Backoff::new(Duration::from_secs(4));
        assert!(!b.active(now));
        let mut lasts = Vec::new();
        for _ in 0..5 {
            b.fail(now);
            assert!(b.active(now));
            lasts.push(b.ends_after(now).unwrap() - now);
        }
        // 1, 2, 4, 4, 4 s, each within ±20%.
        for (d, want) in lasts.iter().zip([1.0, 2.0, 4.0, 4.0, 4.0]) {
            let s = d.as_secs_f64();
            assert!(
                s >= want * 0.8 - 1e-9 && s <= want * 1.2 + 1e-9,
                "{s} vs {want}"
            );
        }
        let later = now + Duration::from_secs(5);
        assert!(!b.active(later));
        assert_eq!(b.ends_after(later), None, "an ended backoff wakes nobody");
        b.succeed();
        assert!(!b.active(now));
        b.fail(now);
        assert!(b.ends_after(now).unwrap() - now <= Duration::from_millis(1200));
    }

    #[test]
    fn a_failed_free_waits_a_minute() {
        let now = Instant::now();
        let mut f = FreeBackoff::default();
        assert!(f.ready("eni-1", now));
        f.failed("eni-1".into(), now);
        assert!(!f.ready("eni-1", now + Duration::from_secs(59)));
        assert!(f.ready("eni-1", now + Duration::from_secs(60)));
        assert!(f.ready("eni-2", now));
    }
}
