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
//! pages once the clients have gone. An arena count the environment sets
//! (`MALLOC_ARENA_MAX`, `GLIBC_TUNABLES`) is left as it is: see
//! eniipd(8), ENVIRONMENT.
//!
//! On a C library other than glibc both are no-ops: its allocator is left
//! as it is.

/// Every thread allocates from the main arena, unless the environment
/// sets the number of arenas itself (`MALLOC_ARENA_MAX`, or
/// `glibc.malloc.arena_max` in `GLIBC_TUNABLES`: an operator's choice
/// wins). Call it first thing in `main`, before any thread starts (an
/// arena, once made, stays).
pub fn one_arena() {
    if arenas_set_by(
        std::env::var_os("MALLOC_ARENA_MAX").is_some(),
        std::env::var("GLIBC_TUNABLES").ok().as_deref(),
    ) {
        return;
    }
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

/// Does the environment set the number of malloc arenas?
fn arenas_set_by(malloc_arena_max: bool, tunables: Option<&str>) -> bool {
    malloc_arena_max
        || tunables.is_some_and(|t| {
            t.split(':')
                .any(|kv| kv.split('=').next() == Some("glibc.malloc.arena_max"))
        })
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

    #[test]
    fn an_arena_count_the_environment_sets_is_left_alone() {
        assert!(!arenas_set_by(false, None));
        assert!(arenas_set_by(true, None));
        assert!(arenas_set_by(
            false,
            Some("glibc.malloc.tcache_count=0:glibc.malloc.arena_max=4")
        ));
        assert!(!arenas_set_by(false, Some("glibc.malloc.arena_test=2")));
    }

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
