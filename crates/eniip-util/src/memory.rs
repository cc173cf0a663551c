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
//! The same goes for thread stacks: glibc keeps the stack of every thread
//! that has ended, up to 40 MiB of them, to reuse for the next thread, and
//! 24 KiB of each stays resident (the 16 KiB below where the thread
//! stopped, its descriptor and TLS). eniipd starts a thread per client
//! connection, so 240 connections at once left about 6 MiB for good.
//! [`release_free`] empties that cache too.
//!
//! On a C library other than glibc all three are no-ops: its allocator is
//! left as it is (musl unmaps a thread's stack when the thread ends).

/// Every thread allocates from the main arena, unless the environment
/// sets the number of arenas itself (`MALLOC_ARENA_MAX`, or
/// `glibc.malloc.arena_max` in `GLIBC_TUNABLES`: an operator's choice
/// wins). Call it before any thread starts (an arena, once made,
/// stays), once the log is set up (a refusal is logged at debug level).
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

/// No transparent huge pages for this process: the kernel may back any
/// 2 MiB-aligned stretch of the heap or a stack with one huge page, all of
/// it resident for the few KiB a small daemon touches (an arm64 VM showed
/// one such 2 MiB page left a minute after 240 connections had gone).
/// Call it early, before any thread or child starts (children inherit
/// it), once the log is set up. A kernel that refuses it (no THP)
/// changes nothing.
pub fn no_huge_pages() {
    #[cfg(target_os = "linux")]
    if let Err(e) = nix::sys::prctl::set_thp_disable(true) {
        log::debug!("PR_SET_THP_DISABLE was refused ({e}); huge pages stay possible");
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

/// Does the environment set the size of glibc's cache of thread stacks?
fn stack_cache_set_by(tunables: Option<&str>) -> bool {
    tunables.is_some_and(|t| {
        t.split(':')
            .any(|kv| kv.split('=').next() == Some("glibc.pthread.stack_cache_size"))
    })
}

/// glibc's cache of the stacks of ended threads keeps at most this many
/// bytes of them (`glibc.pthread.stack_cache_size`'s default).
const STACK_CACHE_MAX: usize = 40 << 20;

/// Hands back to the kernel what the threads and clients that have gone
/// left behind: the stacks glibc keeps for reuse, then the free pages of
/// the heap (`malloc_trim`). After a burst of clients, what their
/// connections allocated and freed stops counting in the daemon's
/// resident memory. Costs a thread start and a walk of the free lists
/// (about a millisecond after a burst, microseconds when idle).
pub fn release_free() {
    if !stack_cache_set_by(std::env::var("GLIBC_TUNABLES").ok().as_deref()) {
        empty_stack_cache();
    }
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

/// Empties glibc's cache of thread stacks. glibc has no call for it, but
/// it trims the cache whenever a stack returned to it makes the cache
/// larger than its limit, unmapping stacks oldest first until it fits: a
/// thread whose stack alone is larger than the limit makes it unmap every
/// cached stack, its own last. The stack is address space only (the
/// thread touches its top pages), unmapped again when it is joined.
/// Stacks of threads still ending stay until the next call. A cache size
/// an operator sets (`glibc.pthread.stack_cache_size`) is left alone.
fn empty_stack_cache() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let flush = std::thread::Builder::new()
            .name("eniipd-trim".into())
            .stack_size(STACK_CACHE_MAX + (1 << 20))
            .spawn(|| {});
        match flush {
            // It does nothing, so it ends at once; if it did not, dropping
            // its handle detaches it, and its stack empties the cache
            // when it ends.
            Ok(h) => {
                let _ = super::thread::join_until(h, std::time::Instant::now() + STACK_FLUSH_WAIT);
            }
            Err(e) => log::debug!("thread stacks kept for reuse stay: {e}"),
        }
    }
}

/// How long [`empty_stack_cache`] waits for its thread.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const STACK_FLUSH_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

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

    #[test]
    fn a_stack_cache_size_the_environment_sets_is_left_alone() {
        assert!(!stack_cache_set_by(None));
        assert!(!stack_cache_set_by(Some("glibc.malloc.arena_max=1")));
        assert!(stack_cache_set_by(Some(
            "glibc.malloc.arena_max=1:glibc.pthread.stack_cache_size=0"
        )));
    }

    /// The tests that measure this process's memory run one at a time:
    /// each one's [`release_free`] would hand back what another measures.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// What 240 threads that have ended leave (the stacks glibc keeps for
    /// reuse, 24 KiB resident each) is handed back.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn the_stacks_of_ended_threads_go_back_to_the_kernel() {
        let _alone = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
        let threads: Vec<_> = (0..240)
            .map(|_| {
                std::thread::Builder::new()
                    .stack_size(128 * 1024)
                    .spawn(|| std::hint::black_box([0u8; 32 * 1024]).len())
                    .unwrap()
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let full = anon_kib();
        empty_stack_cache();
        let after = anon_kib();
        assert!(
            full.saturating_sub(after) > 4 * 1024,
            "240 ended threads' stacks, yet anonymous memory went only from {full} to {after} KiB"
        );
    }

    /// `RssAnon` of this process, in KiB.
    fn anon_kib() -> u64 {
        status_kib("RssAnon:")
    }

    fn status_kib(key: &str) -> u64 {
        let s = std::fs::read_to_string("/proc/self/status").unwrap();
        s.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap()
    }

    /// What a burst leaves (a thread's allocations, freed) is handed back:
    /// the resident set shrinks by most of it.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn free_pages_go_back_to_the_kernel() {
        let _alone = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
        fn rss_kib() -> u64 {
            status_kib("VmRSS:")
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
