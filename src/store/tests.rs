//! Store tests on real files in temporary directories.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::*;

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let p = std::env::temp_dir().join(format!("eniipd-store-{tag}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn alloc(owner: &str, last: u8) -> Record {
    alloc_at(owner, 1, last)
}

fn alloc_at(owner: &str, third: u8, last: u8) -> Record {
    Record::Alloc(Allocation {
        owner: owner.into(),
        sandbox: None,
        ipv4: std::net::Ipv4Addr::new(10, 0, third, last),
        ipv6: None,
        eni: "eni-1".into(),
        at_ms: 1,
    })
}

const T: Duration = Duration::from_secs(5);

#[test]
fn commits_survive_reopen_and_the_lock_excludes_a_second_opener() {
    let d = TempDir::new("reopen");
    let (s, state) = Store::open(&d.0, StoreOptions::default()).unwrap();
    assert!(state.allocations.is_empty());
    let c = s.start();
    c.commit(vec![alloc("a", 1), alloc("b", 2)], T).unwrap();
    c.commit(vec![Record::Forget { owner: "a".into() }], T)
        .unwrap();
    let e = Store::open(&d.0, StoreOptions::default()).unwrap_err();
    assert!(matches!(e, StoreError::Locked { .. }), "{e}");
    assert_eq!(e.exit_code(), 75);
    c.close().unwrap();
    let (_s, state) = Store::open(&d.0, StoreOptions::default()).unwrap();
    assert_eq!(state.allocations.keys().collect::<Vec<_>>(), vec!["b"]);
}

#[test]
fn a_crash_without_close_loses_nothing_acknowledged() {
    let d = TempDir::new("crash");
    let (s, _) = Store::open(&d.0, StoreOptions::default()).unwrap();
    let c = s.start();
    for i in 0..20u8 {
        c.commit(vec![alloc(&format!("o{i}"), i)], T).unwrap();
    }
    // No close: the thread and the lock die with the "process" here by
    // leaking; reopen must still see all 20. (The lock is per open file
    // description, so drop it by dropping the committer's queue.)
    drop(c);
    std::thread::sleep(Duration::from_millis(50));
    let (_s, state) = Store::open(&d.0, StoreOptions::default()).unwrap();
    assert_eq!(state.allocations.len(), 20);
}

#[test]
fn torn_tail_is_truncated_and_corruption_is_refused() {
    let d = TempDir::new("torn");
    let (s, _) = Store::open(&d.0, StoreOptions::default()).unwrap();
    let c = s.start();
    c.commit(vec![alloc("a", 1)], T).unwrap();
    c.commit(vec![alloc("b", 2)], T).unwrap();
    drop(c);
    std::thread::sleep(Duration::from_millis(50));
    let wal = d.0.join("wal");
    let good = fs::read(&wal).unwrap();
    // Half a frame appended: torn.
    let mut torn = good.clone();
    torn.extend_from_slice(&wal::frame(&[alloc("c", 3)])[..10]);
    fs::write(&wal, &torn).unwrap();
    let (s, state) = Store::open(&d.0, StoreOptions::default()).unwrap();
    assert_eq!(state.allocations.len(), 2);
    drop(s);
    assert_eq!(fs::read(&wal).unwrap(), good, "torn tail truncated");
    // A damaged first frame followed by a good one: corruption.
    let mut bad = good.clone();
    bad[wal::HEADER_LEN + wal::FRAME_HEADER_LEN + 2] ^= 0x10;
    fs::write(&wal, &bad).unwrap();
    let e = Store::open(&d.0, StoreOptions::default()).unwrap_err();
    assert_eq!(e.exit_code(), 65);
    let msg = e.to_string();
    assert!(
        msg.contains("wal") && msg.contains("checksum") && msg.contains("byte 20"),
        "{msg}"
    );
}

#[test]
fn corrupt_snapshot_and_missing_log_are_refused() {
    let d = TempDir::new("snap");
    let (s, _) = Store::open(&d.0, StoreOptions::default()).unwrap();
    let c = s.start();
    c.commit(vec![alloc("a", 1)], T).unwrap();
    c.close().unwrap();
    let snap = d.0.join("state.json");
    let text = fs::read_to_string(&snap).unwrap();
    fs::write(&snap, text.replace("10.0.1.1", "10.0.1.9")).unwrap();
    let e = Store::open(&d.0, StoreOptions::default()).unwrap_err();
    assert!(
        e.to_string().contains("state.json") && e.to_string().contains("checksum"),
        "{e}"
    );
    fs::write(&snap, &text).unwrap();
    fs::remove_file(d.0.join("wal")).unwrap();
    let e = Store::open(&d.0, StoreOptions::default()).unwrap_err();
    assert!(e.to_string().contains("missing"), "{e}");
}

#[test]
fn compaction_and_its_crash_points() {
    let d = TempDir::new("compact");
    let opts = StoreOptions {
        compact_after_bytes: 600,
    };
    let (s, _) = Store::open(&d.0, opts.clone()).unwrap();
    let c = s.start();
    for i in 0..30u8 {
        c.commit(vec![alloc(&format!("o{i}"), i)], T).unwrap();
    }
    drop(c);
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        fs::metadata(d.0.join("wal")).unwrap().len() < 2000,
        "compacted"
    );
    let (s, state) = Store::open(&d.0, opts.clone()).unwrap();
    assert_eq!(state.allocations.len(), 30);
    let gen = s.generation;
    drop(s);
    // Crash after the snapshot of generation+1 was renamed, before the log
    // was reset: the old log is stale and must be ignored, not replayed.
    let mut next = state.clone();
    next.apply(&alloc("late", 200));
    snapshot::write_atomic(&d.0, "state.json", &snapshot::encode(gen + 1, &next)).unwrap();
    fs::write(d.0.join("junk.tmp"), b"half").unwrap();
    let (s, state) = Store::open(&d.0, opts).unwrap();
    assert_eq!(state, next);
    assert_eq!(s.generation, gen + 1);
    assert!(!d.0.join("junk.tmp").exists());
}

#[test]
fn recovery_moves_damage_aside_and_keeps_the_valid_prefix() {
    let d = TempDir::new("recover");
    let (s, _) = Store::open(&d.0, StoreOptions::default()).unwrap();
    let c = s.start();
    c.commit(vec![alloc("a", 1)], T).unwrap();
    c.commit(vec![alloc("b", 2)], T).unwrap();
    c.commit(vec![alloc("c", 3)], T).unwrap();
    drop(c);
    std::thread::sleep(Duration::from_millis(50));
    let wal = d.0.join("wal");
    let mut b = fs::read(&wal).unwrap();
    let second = b.len() - 2 * wal::frame(&[alloc("c", 3)]).len();
    b[second + wal::FRAME_HEADER_LEN + 1] ^= 0x40;
    fs::write(&wal, &b).unwrap();
    assert!(Store::open(&d.0, StoreOptions::default()).is_err());
    let (s, state, report) = Store::open_recovering(&d.0, StoreOptions::default()).unwrap();
    assert!(report.quarantine_needed);
    assert_eq!(report.frames_salvaged, 1);
    assert_eq!(state.allocations.keys().collect::<Vec<_>>(), vec!["a"]);
    assert_eq!(report.moved.len(), 1);
    assert!(
        report.moved[0].exists(),
        "the damaged log is kept for inspection"
    );
    drop(s);
    let (_s, again) = Store::open(&d.0, StoreOptions::default()).unwrap();
    assert_eq!(again, state);
    // Nothing wrong: recovering is a plain open, no quarantine.
    drop(_s);
    let (_s, _, report) = Store::open_recovering(&d.0, StoreOptions::default()).unwrap();
    assert!(!report.quarantine_needed);
}

#[test]
fn recovery_drops_both_claimants_of_an_address_claimed_twice() {
    let d = TempDir::new("twice");
    let (s, _) = Store::open(&d.0, StoreOptions::default()).unwrap();
    let c = s.start();
    c.commit(vec![alloc("a", 1), alloc("c", 3)], T).unwrap();
    // The committer stores what it is given; the actor never asks this.
    c.commit(vec![alloc("b", 1)], T).unwrap();
    c.close().unwrap();
    let e = Store::open(&d.0, StoreOptions::default()).unwrap_err();
    assert_eq!(e.exit_code(), 65, "{e}");
    assert!(e.to_string().contains("allocated twice"), "{e}");
    let (s, state, report) = Store::open_recovering(&d.0, StoreOptions::default()).unwrap();
    assert!(report.quarantine_needed);
    assert_eq!(state.allocations.keys().collect::<Vec<_>>(), vec!["c"]);
    assert_eq!(report.moved.len(), 1, "{report:?}");
    assert!(
        report.problems.iter().any(|p| p.starts_with("a: 10.0.1.1")),
        "{report:?}"
    );
    drop(s);
    let (_s, again) = Store::open(&d.0, StoreOptions::default()).unwrap();
    assert_eq!(again, state);
}

#[test]
fn concurrent_commits_share_fsyncs() {
    let d = TempDir::new("group");
    let (s, _) = Store::open(&d.0, StoreOptions::default()).unwrap();
    let c = Arc::new(s.start());
    let per = 25;
    std::thread::scope(|sc| {
        for t in 0..16u8 {
            let c = Arc::clone(&c);
            sc.spawn(move || {
                for i in 0..per {
                    c.commit(vec![alloc_at(&format!("t{t}-{i}"), t + 10, i as u8)], T)
                        .unwrap();
                }
            });
        }
    });
    let commits = 16 * per as u64;
    let syncs = c.syncs();
    println!("{commits} commits, {syncs} fsyncs");
    assert!(syncs < commits, "{syncs} fsyncs for {commits} commits");
    let before = c.syncs();
    c.commit(Vec::new(), T).unwrap();
    assert_eq!(c.syncs(), before, "an empty batch costs no fsync");
    Arc::try_unwrap(c).unwrap().close().unwrap();
    let (_s, state) = Store::open(&d.0, StoreOptions::default()).unwrap();
    assert_eq!(state.allocations.len() as u64, commits);
}

#[test]
fn measure_atomic_write_leaves_nothing() {
    let d = TempDir::new("floor");
    fs::create_dir_all(&d.0).unwrap();
    let t = measure_atomic_write(&d.0, 4096).unwrap();
    assert!(t > Duration::ZERO);
    assert_eq!(fs::read_dir(&d.0).unwrap().count(), 0);
}
