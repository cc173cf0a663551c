//! Waiting with a deadline: polling a condition, and joining threads.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Asks `done` every `step` until it says true or `deadline` passes; its
/// last answer (it is always asked at least once, and once more at the
/// deadline's side of a sleep).
pub fn poll_until(deadline: Instant, step: Duration, mut done: impl FnMut() -> bool) -> bool {
    loop {
        if done() {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        std::thread::sleep(step.min(deadline - now));
    }
}

/// The thread's result once it has finished, or the thread back if
/// `until` passes first (a thread stuck in a syscall that never returns,
/// such as an fsync on a frozen filesystem, is then left behind rather
/// than waited for).
pub fn join_by<T>(
    h: JoinHandle<T>,
    until: Instant,
) -> Result<std::thread::Result<T>, JoinHandle<T>> {
    if poll_until(until, Duration::from_millis(2), || h.is_finished()) {
        Ok(h.join())
    } else {
        Err(h)
    }
}

/// Joins a thread unless `until` passes first (see [`join_by`]); whether
/// it was joined.
pub fn join_until<T>(h: JoinHandle<T>, until: Instant) -> bool {
    join_by(h, until).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_is_joined_by_its_deadline_or_handed_back() {
        let (tx, rx) = crossbeam_channel::bounded::<()>(0);
        let held = std::thread::spawn(move || rx.recv().is_err());
        let start = Instant::now();
        let back = join_by(held, start + Duration::from_millis(30)).unwrap_err();
        assert!(start.elapsed() >= Duration::from_millis(30));
        drop(tx);
        assert!(matches!(
            join_by(back, Instant::now() + Duration::from_secs(10)),
            Ok(Ok(true))
        ));
        let mut n = 0;
        assert!(poll_until(
            Instant::now() + Duration::from_secs(10),
            Duration::from_millis(1),
            || {
                n += 1;
                n == 3
            }
        ));
        assert!(!poll_until(
            Instant::now(),
            Duration::from_millis(1),
            || false
        ));
    }
}
