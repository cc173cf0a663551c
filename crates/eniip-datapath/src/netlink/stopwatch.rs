//! An opt-in account of the time this process spent in netlink requests
//! (from the send to the last message of the answer) and how many it
//! made: what a caller held the kernel's RTNL for, at most (a change holds
//! it for its whole request; a dump, on a recent kernel, for less).
//!
//! Off unless [`start`] is called: then one relaxed load per request, so
//! the plugin's normal ADD pays nothing it could measure. The sums are
//! the whole process's (eniip-cni runs one command per process).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

static ON: AtomicBool = AtomicBool::new(false);
static NANOS: AtomicU64 = AtomicU64::new(0);
static REQUESTS: AtomicU64 = AtomicU64::new(0);

/// Starts counting (from zero).
pub fn start() {
    NANOS.store(0, Ordering::Relaxed);
    REQUESTS.store(0, Ordering::Relaxed);
    ON.store(true, Ordering::Relaxed);
}

/// The time spent in netlink requests since [`start`], and how many.
pub fn spent() -> (Duration, u64) {
    (
        Duration::from_nanos(NANOS.load(Ordering::Relaxed)),
        REQUESTS.load(Ordering::Relaxed),
    )
}

/// When one request began, if counting.
pub(super) fn begin() -> Option<Instant> {
    ON.load(Ordering::Relaxed).then(Instant::now)
}

/// One request that began at `began` ended.
pub(super) fn end(began: Option<Instant>) {
    if let Some(t) = began {
        let n = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
        NANOS.fetch_add(n, Ordering::Relaxed);
        REQUESTS.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_only_once_started() {
        end(begin());
        assert_eq!(spent().1, 0, "off by default");
        start();
        end(begin());
        end(begin());
        assert_eq!(spent().1, 2);
    }
}
