//! The daemon's memory comes back after a burst of clients: its
//! anonymous resident memory (heap, stacks, written data; not the
//! executable's and the libraries' shared pages) is, soon after 16
//! clients at once have gone, within [`BOUND_KIB`] of what it was idle.
//! That bound is for these debug builds, between what they showed before
//! one malloc arena and trimming (1.6 to 1.9 MiB more after the clients)
//! and after (0.7 to 0.9 MiB, mostly the 24 KiB glibc keeps of each
//! exited connection thread's stack for reuse); the release goal, 1 MiB
//! of all resident memory, is measured by the benchmarks. Reads the
//! daemon's `/proc/PID/status`, so it runs where that is the daemon's own
//! (natively, or in an arm64 kernel; under qemu-user it would be the
//! emulator's, and `.ci/arm64` runs it in its VM). The figures, release
//! builds, per architecture: `cargo bench --bench eniip-bench` and
//! `.ci/footprint --all` (BENCHMARKS.md).

use std::time::Duration;

use crate::common::{at_once, config, eventually, tempdir, Daemon, Sim};
use serde_json::json;

/// How much more anonymous memory than idle may stay after the clients.
const BOUND_KIB: u64 = 1280;

/// `RssAnon` of `pid`, in KiB.
fn anon_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no RssAnon in /proc/{pid}/status"))
}

#[test]
fn sixteen_clients_at_once_leave_no_lasting_memory() {
    let sim = Sim::quick(&[]);
    let dir = tempdir("footprint");
    let d = Daemon::start(&dir, &config(&sim, &dir, json!({})));
    // Idle, after one client has come and gone.
    assert!(d.ok("status").contains(" inuse=0 "));
    let idle = anon_kib(d.pid());
    at_once(16, |k| {
        for i in 0..10 {
            d.ok(&format!("alloc burst/c{k}-{i}"));
            d.ok(&format!("release burst/c{k}-{i}"));
        }
    });
    let mut last = 0;
    let back = eventually(Duration::from_secs(10), || {
        last = anon_kib(d.pid());
        last <= idle + BOUND_KIB
    });
    println!("anonymous memory: {idle} KiB idle, {last} KiB after 16 clients");
    assert!(
        back,
        "anonymous memory {idle} KiB idle, still {last} KiB after 16 clients had gone"
    );
}
