//! Joining threads against a deadline.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Joins a thread unless `until` passes first (a thread stuck in a
/// syscall that never returns, such as an fsync on a frozen filesystem,
/// is then left behind rather than waited for).
pub(crate) fn join_until<T>(h: JoinHandle<T>, until: Instant) -> bool {
    while !h.is_finished() {
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let _ = h.join();
    true
}
