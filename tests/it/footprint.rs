//! The daemon's memory comes back after a burst of clients: its
//! anonymous resident memory (heap, stacks, written data; not the
//! executable's and the libraries' shared pages) is, soon after 16
//! clients at once have gone, and soon after 240 connections at once,
//! within [`BOUND_KIB`] of what it was idle.
//! That bound is for these debug builds, between what they showed before
//! one malloc arena and trimming (1.6 to 1.9 MiB more after the 16
//! clients) and after (0.7 to 0.9 MiB); after the 240 connections, more
//! than the bound stayed (24 KiB of each ended connection thread's stack,
//! kept by glibc for reuse) until the daemon emptied glibc's stack cache
//! (0.4 MiB after). The release goal, 1 MiB
//! of all resident memory, is measured by the benchmarks. Reads the
//! daemon's `/proc/PID/status`, so it runs where that is the daemon's own
//! (natively, or in an arm64 kernel; under qemu-user it would be the
//! emulator's, and `.ci/arm64` runs it in its VM). The figures, release
//! builds, per architecture: `cargo bench --bench eniip-bench` and
//! `.ci/footprint --all` (BENCHMARKS.md).

use std::sync::Barrier;
use std::time::Duration;

use crate::common::{at_once, config, eventually, tempdir, Daemon, Sim, REPLY_WAIT};
use eniip_protocol::protocol::client::Client;
use serde_json::json;

/// How much more anonymous memory than idle may stay after the clients.
const BOUND_KIB: u64 = 1280;

/// How long the memory may take to come back: the issue's "a minute
/// after" (it is back within a second or two on an idle machine; an
/// emulated arm64 VM running other tests beside it is far slower).
const SETTLE: Duration = Duration::from_secs(60);

/// Where a daemon's memory is, for a failure's message: its threads and
/// its mappings with more than 64 KiB of anonymous memory.
fn where_it_is(pid: i32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let threads = status
        .lines()
        .find(|l| l.starts_with("Threads:"))
        .unwrap_or("Threads: ?");
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let mut out = format!("{threads}\n");
    let mut head = "";
    for l in smaps.lines() {
        if l.split_whitespace().next().is_some_and(|w| w.contains('-')) {
            head = l;
        } else if let Some(kib) = l.strip_prefix("Anonymous:") {
            let kib: u64 = kib
                .split_whitespace()
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            if kib > 64 {
                out.push_str(&format!("{kib:>8} KiB anonymous in {head}\n"));
            }
        }
    }
    out
}

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
    let back = eventually(SETTLE, || {
        last = anon_kib(d.pid());
        last <= idle + BOUND_KIB
    });
    println!("anonymous memory: {idle} KiB idle, {last} KiB after 16 clients");
    assert!(
        back,
        "anonymous memory {idle} KiB idle, still {last} KiB after 16 clients had gone\n{}",
        where_it_is(d.pid())
    );
}

/// Connections held open at once in the wide burst: within the default
/// `max_connections` (256), so none is evicted.
const WIDE: usize = 240;

/// The wide burst (issue 37): 240 connections at once, 20 `status` each,
/// all held open until every one has been answered, then closed. Each had its own thread, and glibc
/// keeps the stack of an exited thread for reuse, 24 KiB of it resident:
/// about 6 MiB that stayed for good before the daemon emptied that cache
/// once its clients had gone.
#[test]
fn two_hundred_forty_connections_at_once_leave_no_lasting_memory() {
    let sim = Sim::quick(&[]);
    let dir = tempdir("footprint-wide");
    let d = Daemon::start(&dir, &config(&sim, &dir, json!({})));
    assert!(d.ok("status").contains(" inuse=0 "));
    let idle = anon_kib(d.pid());
    let all_open = Barrier::new(WIDE);
    let all_answered = Barrier::new(WIDE);
    at_once(WIDE, |_| {
        let mut c = Client::connect(&d.socket, REPLY_WAIT).expect("connect");
        // Every connection open (and its thread started) before any asks.
        all_open.wait();
        for _ in 0..20 {
            let r = c.ask_within("status", REPLY_WAIT).expect("status");
            assert!(r.final_line().starts_with("OK "), "{r:?}");
        }
        // None closes before every one has been answered: 240 threads
        // alive at once in the daemon.
        all_answered.wait();
    });
    let mut last = 0;
    let back = eventually(SETTLE, || {
        last = anon_kib(d.pid());
        last <= idle + BOUND_KIB
    });
    println!("anonymous memory: {idle} KiB idle, {last} KiB after {WIDE} connections");
    assert!(
        back,
        "anonymous memory {idle} KiB idle, still {last} KiB after {WIDE} connections had gone\n{}",
        where_it_is(d.pid())
    );
}
