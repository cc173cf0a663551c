//! The daemon's heap as glibc's malloc keeps it: the one place that tunes
//! it (`mallopt`) and hands its free pages back (`malloc_trim`).
//!
//! Why: glibc gives every thread that allocates an arena of its own (up
//! to eight per CPU), and an arena keeps what its threads freed. eniipd
//! starts a thread per client connection and per DNS lookup (ureq's
//! resolver), so after a burst of clients a dozen arenas held freed
//! memory for good: 8.6 MiB a minute after 16 clients, against 6.1 MiB
//! idle. One arena is enough for a daemon whose rate is bounded by its
//! disk commits (the per-thread cache, `tcache`, still serves small
//! allocations without the lock), and [`release_free`] returns the free
//! pages once the clients have gone.
//!
//! On a C library other than glibc both are no-ops: its allocator is left
//! as it is.

/// Every thread allocates from the main arena. Call it first thing in
/// `main`, before any thread starts (an arena, once made, stays).
pub fn one_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only sets a parameter of glibc's allocator; no
        // memory is touched, and M_ARENA_MAX takes any positive count.
        #[allow(unsafe_code)]
        let ok = unsafe { nix::libc::mallopt(nix::libc::M_ARENA_MAX, 1) };
        if ok != 1 {
            log::debug!("mallopt(M_ARENA_MAX, 1) was refused; arenas stay per thread");
        }
    }
}

/// Hands the free pages of the heap back to the kernel (`malloc_trim`):
/// after a burst of clients, what their connections allocated and freed
/// stops counting in the daemon's resident memory. Costs a walk of the
/// free lists (microseconds on an idle daemon's heap).
pub fn release_free() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim only returns free pages of the allocator's
        // own heaps to the kernel (madvise); it is thread-safe and leaves
        // every live allocation where it is.
        #[allow(unsafe_code)]
        unsafe {
            nix::libc::malloc_trim(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a burst leaves (a thread's allocations, freed) is handed back:
    /// the resident set shrinks by most of it.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn free_pages_go_back_to_the_kernel() {
        fn rss_kib() -> u64 {
            let s = std::fs::read_to_string("/proc/self/status").unwrap();
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap()
        }
        // 4096 blocks of 4 KiB, below the mmap threshold, so they come
        // from an arena; one kept at the end so the heap cannot simply
        // shrink from its top.
        let mut blocks: Vec<Vec<u8>> = (0..4096).map(|i| vec![i as u8; 4096]).collect();
        let keep = blocks.pop();
        let full = rss_kib();
        drop(blocks);
        release_free();
        let after = rss_kib();
        drop(keep);
        assert!(
            full.saturating_sub(after) > 8 * 1024,
            "16 MiB freed, yet the resident set went only from {full} to {after} KiB"
        );
    }
}
