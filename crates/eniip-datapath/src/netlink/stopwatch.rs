//! An opt-in account of the time this process spent in netlink requests
//! (from the send to the last message of the answer) and how many it
//! made, in all and by kind (`newlink`, `dumprule`, a batch as its kinds
//! joined by `+`): what a caller held the kernel's RTNL for, at most (a
//! change holds it for its whole request; a dump, on a recent kernel,
//! for less), and which requests cost it.
//!
//! Off unless [`start`] is called: then one relaxed load per request, so
//! the plugin's normal ADD pays nothing it could measure. The sums are
//! the whole process's (eniip-cni runs one command per process).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static ON: AtomicBool = AtomicBool::new(false);
static NANOS: AtomicU64 = AtomicU64::new(0);
static REQUESTS: AtomicU64 = AtomicU64::new(0);
/// Per kind, in the order first seen: (kind, requests, nanoseconds).
static KINDS: Mutex<Vec<(String, u64, u64)>> = Mutex::new(Vec::new());

/// Starts counting (from zero).
pub fn start() {
    NANOS.store(0, Ordering::Relaxed);
    REQUESTS.store(0, Ordering::Relaxed);
    KINDS.lock().unwrap_or_else(|p| p.into_inner()).clear();
    ON.store(true, Ordering::Relaxed);
}

/// The time spent in netlink requests since [`start`], and how many.
pub fn spent() -> (Duration, u64) {
    (
        Duration::from_nanos(NANOS.load(Ordering::Relaxed)),
        REQUESTS.load(Ordering::Relaxed),
    )
}

/// The same by kind, in the order each kind was first seen: the kind,
/// how many requests of it, the time in them.
pub fn by_kind() -> Vec<(String, u64, Duration)> {
    KINDS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|(k, n, ns)| (k.clone(), *n, Duration::from_nanos(*ns)))
        .collect()
}

/// When one request began, if counting.
pub(super) fn begin() -> Option<Instant> {
    ON.load(Ordering::Relaxed).then(Instant::now)
}

/// One request of `kind` (built only when counting) that began at
/// `began` ended.
pub(super) fn end(began: Option<Instant>, kind: impl FnOnce() -> String) {
    let Some(t) = began else { return };
    let n = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
    NANOS.fetch_add(n, Ordering::Relaxed);
    REQUESTS.fetch_add(1, Ordering::Relaxed);
    let kind = kind();
    let mut kinds = KINDS.lock().unwrap_or_else(|p| p.into_inner());
    match kinds.iter_mut().find(|(k, _, _)| *k == kind) {
        Some(k) => {
            k.1 += 1;
            k.2 = k.2.saturating_add(n);
        }
        None => kinds.push((kind, 1, n)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_only_once_started_and_by_kind() {
        // No other test's requests meanwhile (under qemu-user one made
        // it 4 against 3).
        let _serial = crate::netns::netlink_tests_serially();
        end(begin(), || "newlink".into());
        assert_eq!(spent().1, 0, "off by default");
        assert!(by_kind().is_empty());
        start();
        end(begin(), || "newrule".into());
        end(begin(), || "dumplink".into());
        end(begin(), || "newrule".into());
        assert_eq!(spent().1, 3);
        let kinds: Vec<(String, u64)> = by_kind().into_iter().map(|(k, n, _)| (k, n)).collect();
        assert_eq!(
            kinds,
            vec![("newrule".to_string(), 2), ("dumplink".to_string(), 1)]
        );
    }
}
