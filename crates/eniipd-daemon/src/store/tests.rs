//! Store tests on real files in temporary directories.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
        ipv6_prefix: None,
        eni: "eni-1".into(),
        at_ms: 1,
        gen: 0,
        attach: None,
        asked: Default::default(),
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
    // No close: dropping stops the thread without a final snapshot, as
    // a crash would; reopen must still see all 20 by replaying the log.
    drop(c);
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
    let wal = d.0.join("wal");
    let good = fs::read(&wal).unwrap();
    // Half a frame appended: torn.
    let mut torn = good.clone();
    torn.extend_from_slice(&wal::frame(3, &[alloc("c", 3)])[..30]);
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
        msg.contains("wal") && msg.contains("checksum") && msg.contains("byte 28"),
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

/// Options that compact the log every 600 bytes.
fn compacting() -> StoreOptions {
    StoreOptions {
        compact_after_bytes: 600,
    }
}

/// `n` allocations committed in `d` with [`compacting`] options, and the
/// store closed again; the options.
fn committed_compacting(d: &TempDir, n: u8) -> StoreOptions {
    let opts = compacting();
    let (s, _) = Store::open(&d.0, opts.clone()).unwrap();
    let c = s.start();
    for i in 0..n {
        c.commit(vec![alloc(&format!("o{i}"), i)], T).unwrap();
    }
    drop(c);
    opts
}

#[test]
fn compaction_and_its_crash_points() {
    let d = TempDir::new("compact");
    let opts = committed_compacting(&d, 32);
    assert!(
        fs::metadata(d.0.join("wal")).unwrap().len() < 2000,
        "compacted"
    );
    let (s, want) = Store::open(&d.0, opts.clone()).unwrap();
    assert_eq!(want.allocations.len(), 32);
    let (gen, frames) = (s.generation, s.frames);
    assert!(gen > 0 && frames > 0, "a snapshot and a log with frames");
    drop(s);
    let old_snap = fs::read(d.0.join("state.json")).unwrap();
    let old_wal = fs::read(d.0.join("wal")).unwrap();
    // What the next compaction writes, in order: state.json.tmp renamed
    // to state.json, then wal.tmp renamed to wal.
    let absorbed = snapshot::LogRef {
        generation: gen,
        frames,
    };
    let (new_snap, crc) = snapshot::encode(gen + 1, Some(absorbed), &want);
    let new_wal = wal::header(gen + 1, crc);
    let half_snap = &new_snap[..new_snap.len() / 2];
    // (window, the files it leaves, the generation that loads)
    type Window<'a> = (&'a str, Vec<(&'a str, &'a [u8])>, u64);
    let windows: [Window; 5] = [
        (
            "snapshot half written",
            vec![
                ("state.json", &old_snap),
                ("state.json.tmp", half_snap),
                ("wal", &old_wal),
            ],
            gen,
        ),
        (
            "snapshot renamed, log not yet reset",
            vec![("state.json", &new_snap), ("wal", &old_wal)],
            gen + 1,
        ),
        (
            "new log written, not renamed",
            vec![
                ("state.json", &new_snap),
                ("wal.tmp", &new_wal),
                ("wal", &old_wal),
            ],
            gen + 1,
        ),
        (
            "new log half written",
            vec![
                ("state.json", &new_snap),
                ("wal.tmp", &new_wal[..9]),
                ("wal", &old_wal),
            ],
            gen + 1,
        ),
        (
            "done",
            vec![("state.json", &new_snap), ("wal", &new_wal)],
            gen + 1,
        ),
    ];
    let lay_out = |files: &[(&str, &[u8])]| {
        for name in ["state.json", "state.json.tmp", "wal", "wal.tmp"] {
            let _ = fs::remove_file(d.0.join(name));
        }
        for (name, bytes) in files {
            fs::write(d.0.join(name), bytes).unwrap();
        }
    };
    for (window, files, want_gen) in &windows {
        lay_out(files);
        let (s, got) = Store::open(&d.0, opts.clone()).unwrap_or_else(|e| panic!("{window}: {e}"));
        assert_eq!(got, want, "{window}");
        assert_eq!(s.generation, *want_gen, "{window}");
        assert!(!d.0.join("state.json.tmp").exists() && !d.0.join("wal.tmp").exists());
        drop(s);
        let (_s, again) = Store::open(&d.0, opts.clone()).unwrap();
        assert_eq!(again, want, "{window}, reopened");
    }
    // An older log that is not the one the snapshot absorbed (here: one
    // frame more) is damage, not history.
    let (short, _) = snapshot::encode(
        gen + 1,
        Some(snapshot::LogRef {
            generation: gen,
            frames: frames - 1,
        }),
        &want,
    );
    lay_out(&[("state.json", &short), ("wal", &old_wal)]);
    let e = Store::open(&d.0, opts.clone()).unwrap_err();
    assert_eq!(e.exit_code(), 65, "{e}");
    assert!(
        e.to_string().contains("wal") && e.to_string().contains("absorbed"),
        "{e}"
    );
    // So is a log that follows another snapshot of the same generation.
    let mut other = want.clone();
    other.apply(&alloc("other", 250));
    let (other_snap, _) = snapshot::encode(gen, None, &other);
    lay_out(&[("state.json", &other_snap), ("wal", &old_wal)]);
    let e = Store::open(&d.0, opts.clone()).unwrap_err();
    assert_eq!(e.exit_code(), 65, "{e}");
    assert!(e.to_string().contains("not this state.json"), "{e}");
}

#[test]
fn a_snapshot_whose_generation_was_changed_is_refused() {
    let d = TempDir::new("gen");
    let opts = committed_compacting(&d, 12);
    let (s, want) = Store::open(&d.0, opts.clone()).unwrap();
    let gen = s.generation;
    assert!(gen > 0 && s.frames > 0, "a snapshot and a log with frames");
    drop(s);
    let snap = d.0.join("state.json");
    let text = fs::read_to_string(&snap).unwrap();
    for other in [gen + 1, gen - 1] {
        let from = format!("\n  \"generation\": {gen},");
        let to = format!("\n  \"generation\": {other},");
        assert!(text.contains(&from), "{text}");
        fs::write(&snap, text.replace(&from, &to)).unwrap();
        let e = Store::open(&d.0, opts.clone()).unwrap_err();
        assert_eq!(e.exit_code(), 65, "{e}");
        assert!(
            e.to_string().contains("state.json") && e.to_string().contains("checksum"),
            "{e}"
        );
    }
    fs::write(&snap, &text).unwrap();
    assert_eq!(Store::open(&d.0, opts).unwrap().1, want);
}

#[test]
fn recovery_moves_damage_aside_and_keeps_the_valid_prefix() {
    let d = TempDir::new("recover");
    let (s, _) = Store::open(&d.0, StoreOptions::default()).unwrap();
    let c = s.start();
    let generation = |mut r: Record, g: u64| {
        if let Record::Alloc(a) = &mut r {
            a.gen = g;
        }
        r
    };
    c.commit(vec![generation(alloc("a", 1), 1)], T).unwrap();
    c.commit(vec![generation(alloc("b", 2), 2)], T).unwrap();
    c.commit(vec![generation(alloc("c", 3), 3)], T).unwrap();
    drop(c);
    let wal = d.0.join("wal");
    let mut b = fs::read(&wal).unwrap();
    let second = b.len() - 2 * wal::frame(2, &[generation(alloc("c", 3), 3)]).len();
    b[second + wal::FRAME_HEADER_LEN + 1] ^= 0x40;
    fs::write(&wal, &b).unwrap();
    assert!(Store::open(&d.0, StoreOptions::default()).is_err());
    let (s, state, report) = Store::open_recovering(&d.0, StoreOptions::default()).unwrap();
    assert!(report.quarantine_needed);
    assert_eq!(report.frames_salvaged, 1);
    // "b" (generation 2) and "c" (3) were lost with the damaged frames:
    // the owners still holding those must never meet them again.
    assert!(
        state.next_gen > 3,
        "next generation {} could hand out a lost one again",
        state.next_gen
    );
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
fn the_floor_log_commits_and_leaves_nothing() {
    let d = TempDir::new("floor-log");
    fs::create_dir_all(&d.0).unwrap();
    let mut log = FloorLog::create(&d.0, vec![alloc("a", 1)]).unwrap();
    assert!(log.commit().unwrap() > Duration::ZERO);
    drop(log);
    assert_eq!(fs::read_dir(&d.0).unwrap().count(), 0);
}

#[test]
fn measure_atomic_write_leaves_nothing() {
    let d = TempDir::new("floor");
    fs::create_dir_all(&d.0).unwrap();
    let t = measure_atomic_write(&d.0, 4096).unwrap();
    assert!(t > Duration::ZERO);
    assert_eq!(fs::read_dir(&d.0).unwrap().count(), 0);
}

#[test]
fn a_failed_commit_names_the_os_error() {
    let d = TempDir::new("enospc");
    let (mut s, _) = Store::open(&d.0, StoreOptions::default()).unwrap();
    // A full disk: every write to /dev/full fails with ENOSPC.
    s.wal = OpenOptions::new().write(true).open("/dev/full").unwrap();
    let c = s.start();
    let enospc = io::Error::from_raw_os_error(nix::libc::ENOSPC).to_string();
    for _ in 0..2 {
        // The first failure, then every later commit, refused the same way.
        let e = c.commit(vec![alloc("a", 1)], T).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("cannot write the state log") && msg.contains(&enospc),
            "{msg}"
        );
        let source = std::error::Error::source(&e).map(|s| s.to_string());
        assert_eq!(source, Some(enospc.clone()));
    }
}

#[test]
fn a_missing_or_unreadable_snapshot_is_blamed_on_state_json() {
    let d = TempDir::new("blame");
    let (s, _) = Store::open(&d.0, StoreOptions::default()).unwrap();
    let c = s.start();
    c.commit(vec![alloc("a", 1)], T).unwrap();
    c.close().unwrap();
    let snap = d.0.join("state.json");
    fs::remove_file(&snap).unwrap();
    let e = Store::open(&d.0, StoreOptions::default()).unwrap_err();
    assert_eq!(e.exit_code(), 65, "{e}");
    assert!(
        matches!(&e, StoreError::Corrupt { file, .. } if *file == snap),
        "{e}"
    );
    assert!(e.to_string().contains("missing"), "{e}");
    // Unreadable (here: a directory, which even root cannot read).
    fs::create_dir(&snap).unwrap();
    let e = Store::open(&d.0, StoreOptions::default()).unwrap_err();
    let msg = e.to_string();
    let eisdir = io::Error::from_raw_os_error(nix::libc::EISDIR).to_string();
    assert!(
        msg.contains(&snap.display().to_string()) && msg.contains(&eisdir),
        "{msg}"
    );
}

/// A thread leading the commit of what `c` has queued, returned once it
/// holds the commit token (10 s at most): on a [`frozen_disk`], held in
/// its write.
fn lead_on_a_thread(c: &Arc<Committer>) -> std::thread::JoinHandle<()> {
    let leader = {
        let c = Arc::clone(c);
        std::thread::spawn(move || c.lead())
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.token_free() && Instant::now() < deadline {
        std::thread::yield_now();
    }
    leader
}

/// A store in a new directory named after `tag` whose log is a
/// [`frozen_disk`]; the directory, the store, and the pipe's read end
/// (dropping it unfreezes the disk).
fn on_a_frozen_disk(tag: &str) -> (TempDir, Store, File) {
    let d = TempDir::new(tag);
    let (mut s, _) = Store::open(&d.0, StoreOptions::default()).unwrap();
    let (wal, unfreeze) = frozen_disk();
    s.wal = wal;
    (d, s, unfreeze)
}

/// A log "disk" that never answers: the write end of a pipe that nobody
/// reads, already full, so the next write blocks. Dropping the returned
/// read end unblocks it (the write then fails with EPIPE).
fn frozen_disk() -> (File, File) {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let (r, w) = nix::unistd::pipe().unwrap();
    let mut w = File::from(w);
    fcntl(&w, FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).unwrap();
    let chunk = [b'x'; 4096];
    loop {
        match io::Write::write(&mut w, &chunk) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("{e}"),
        }
    }
    fcntl(&w, FcntlArg::F_SETFL(OFlag::empty())).unwrap();
    (w, File::from(r))
}

#[test]
fn a_leader_commits_what_is_queued_on_its_own_thread_in_order() {
    let d = TempDir::new("lead");
    let (s, _) = Store::open(&d.0, StoreOptions::default()).unwrap();
    let c = s.start();
    let done = Arc::new(parking_lot::Mutex::new(Vec::new()));
    for (name, ip) in [("a", 1), ("b", 2)] {
        let done = Arc::clone(&done);
        c.queue(
            vec![alloc(name, ip)],
            Box::new(move |r| {
                done.lock()
                    .push((name, r.is_ok(), std::thread::current().id()))
            }),
        );
    }
    c.lead();
    // Both in one frame, answered in order before `lead` returned, here.
    let me = std::thread::current().id();
    assert_eq!(*done.lock(), vec![("a", true, me), ("b", true, me)]);
    assert_eq!(c.syncs(), 1);
    c.close().unwrap();
    let (_s, state) = Store::open(&d.0, StoreOptions::default()).unwrap();
    assert_eq!(state.allocations.len(), 2);
}

#[test]
fn what_is_queued_while_a_commit_is_in_flight_is_taken_by_its_holder() {
    let (_d, s, unfreeze) = on_a_frozen_disk("lead-busy");
    let c = Arc::new(s.start());
    let (tx, rx) = crossbeam_channel::unbounded();
    let tx1 = tx.clone();
    c.queue(
        vec![alloc("a", 1)],
        Box::new(move |r| tx1.send(("a", r.is_ok())).unwrap()),
    );
    // Once the leader is inside its write, the next record waits for it.
    let leader = lead_on_a_thread(&c);
    c.queue(
        vec![alloc("b", 2)],
        Box::new(move |r| tx.send(("b", r.is_ok())).unwrap()),
    );
    c.lead();
    assert!(
        rx.try_recv().is_err(),
        "a commit is in flight: nobody answered yet"
    );
    // The disk answers (the frozen write fails): the leader answers its
    // own and leaves "b" to the store's thread, which answers it too.
    drop(unfreeze);
    leader.join().unwrap();
    let mut got: Vec<_> = (0..2)
        .map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap())
        .collect();
    got.sort();
    assert_eq!(got, vec![("a", false), ("b", false)]);
}

#[test]
fn close_gives_up_at_its_deadline_when_the_disk_does_not_answer() {
    let (_d, s, unfreeze) = on_a_frozen_disk("frozen-close");
    let c = s.start();
    c.submit(vec![alloc("a", 1), alloc("b", 2)], Box::new(|_| {}));
    c.submit(vec![alloc("c", 3)], Box::new(|_| {}));
    let started = Instant::now();
    let e = c
        .close_until(started + Duration::from_millis(300))
        .unwrap_err();
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(3),
        "{took:?}"
    );
    assert!(matches!(e, StoreError::NotDurable { records: 3 }), "{e:?}");
    assert!(e.to_string().contains("3 submitted record(s)"), "{e}");
    drop(unfreeze);
}

#[test]
fn a_store_shared_with_a_leader_held_in_the_disk_closes_by_its_deadline_and_takes_nothing_more() {
    let (_d, s, unfreeze) = on_a_frozen_disk("frozen-leader-close");
    let c = Arc::new(s.start());
    c.queue(vec![alloc("a", 1)], Box::new(|_| {}));
    // A client's thread leads the commit and the disk holds it; it keeps
    // its share of the store meanwhile.
    let leader = lead_on_a_thread(&c);
    let started = Instant::now();
    let e = c
        .close_until(started + Duration::from_millis(300))
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(matches!(e, StoreError::NotDurable { records: 1 }), "{e:?}");
    // Closing: nothing more is queued, whoever still holds the store.
    let (tx, rx) = crossbeam_channel::bounded(1);
    c.queue(
        vec![alloc("b", 2)],
        Box::new(move |r| {
            let _ = tx.send(r.is_ok());
        }),
    );
    assert_eq!(rx.try_recv(), Ok(false), "refused at once");
    drop(unfreeze);
    leader.join().unwrap();
}

#[test]
fn drop_waits_for_the_disk_only_so_long() {
    let (_d, s, unfreeze) = on_a_frozen_disk("frozen-drop");
    let c = s.start();
    c.submit(vec![alloc("a", 1)], Box::new(|_| {}));
    let started = Instant::now();
    drop(c);
    let took = started.elapsed();
    assert!(
        took >= committer::DROP_TIMEOUT && took < committer::DROP_TIMEOUT + Duration::from_secs(2),
        "{took:?}"
    );
    drop(unfreeze);
}

#[test]
fn drop_makes_what_was_submitted_durable_and_releases_the_lock() {
    let d = TempDir::new("drop");
    let (s, _) = Store::open(&d.0, StoreOptions::default()).unwrap();
    let c = s.start();
    for i in 0..200u8 {
        c.submit(vec![alloc_at(&format!("o{i}"), 2, i)], Box::new(|_| {}));
    }
    drop(c);
    // No waiting: once drop returns, the thread is gone with its lock.
    let (_s, state) = Store::open(&d.0, StoreOptions::default()).unwrap();
    assert_eq!(state.allocations.len(), 200);
}

#[test]
fn version_1_files_are_read_and_rewritten_in_version_2() {
    let d = TempDir::new("v1");
    fs::create_dir_all(&d.0).unwrap();
    let mut base = PersistedState::default();
    base.apply(&alloc("a", 1));
    let body = serde_json::to_value(&base).unwrap();
    let crc = eniip_util::encoding::crc32(&serde_json::to_vec(&body).unwrap());
    let v1_snap = serde_json::json!({
        "format": "eniipd-state", "version": 1, "generation": 3,
        "written_at": "2026-01-01T00:00:00Z", "checksum": format!("{crc:08x}"), "state": body,
    });
    fs::write(
        d.0.join("state.json"),
        serde_json::to_vec_pretty(&v1_snap).unwrap(),
    )
    .unwrap();
    let mut log = wal::v1::header(3);
    log.extend(wal::v1::frame(&[alloc("b", 2)]));
    let v1_log = log.clone();
    log.extend(&wal::v1::frame(&[alloc("c", 3)])[..7]);
    fs::write(d.0.join("wal"), &log).unwrap();
    let (s, state) = Store::open(&d.0, StoreOptions::default()).unwrap();
    assert_eq!(state.allocations.keys().collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!((s.generation, s.frames), (4, 0));
    drop(s);
    let snap = snapshot::decode(&fs::read(d.0.join("state.json")).unwrap()).unwrap();
    let absorbed = snapshot::LogRef {
        generation: 3,
        frames: 1,
    };
    assert_eq!(
        (snap.version, snap.generation, snap.supersedes),
        (2, 4, Some(absorbed))
    );
    let scan = wal::scan(&fs::read(d.0.join("wal")).unwrap()).unwrap();
    assert_eq!((scan.version, scan.generation), (2, 4));
    // A crash in the middle of that rewrite: the new snapshot beside the
    // version 1 log it absorbed, which is discarded (and, being version
    // 1, the rewrite done again).
    fs::write(d.0.join("wal"), &v1_log).unwrap();
    let (s, again) = Store::open(&d.0, StoreOptions::default()).unwrap();
    assert_eq!(again, state);
    drop(s);
    let scan = wal::scan(&fs::read(d.0.join("wal")).unwrap()).unwrap();
    assert_eq!((scan.version, scan.frames.len()), (2, 0));
}

#[test]
fn a_damaged_length_in_a_middle_frame_is_corruption_not_a_torn_tail() {
    let d = TempDir::new("length");
    let (s, _) = Store::open(&d.0, StoreOptions::default()).unwrap();
    let c = s.start();
    for i in 1..=3u8 {
        c.commit(vec![alloc(&format!("o{i}"), i)], T).unwrap();
    }
    drop(c);
    let wal_path = d.0.join("wal");
    let good = fs::read(&wal_path).unwrap();
    let second = wal::HEADER_LEN + wal::frame(1, &[alloc("o1", 1)]).len();
    // The length field is bytes 12..16 of a frame header. A larger length
    // made the old format see a frame running past the end of the file.
    for at in second + 12..second + 16 {
        let mut bad = good.clone();
        bad[at] ^= 0xff;
        fs::write(&wal_path, &bad).unwrap();
        let e = Store::open(&d.0, StoreOptions::default()).unwrap_err();
        assert_eq!(e.exit_code(), 65, "byte {at}: {e}");
        assert!(
            e.to_string()
                .contains(&format!("at byte {second}: frame header checksum mismatch")),
            "byte {at}: {e}"
        );
        assert_eq!(fs::read(&wal_path).unwrap(), bad, "nothing was truncated");
    }
    fs::write(&wal_path, &good).unwrap();
    let (_s, state) = Store::open(&d.0, StoreOptions::default()).unwrap();
    assert_eq!(state.allocations.len(), 3);
}

#[test]
fn a_failed_compaction_is_reported_at_once() {
    let d = TempDir::new("compact-fail");
    let (s, _) = Store::open(&d.0, compacting()).unwrap();
    let c = s.start();
    let failures = c.failures();
    // A directory where the snapshot goes: its rename fails, even as root.
    fs::create_dir_all(d.0.join(SNAPSHOT).join("blocker")).unwrap();
    let mut i = 0u8;
    while failures.is_empty() && i < 64 {
        let _ = c.commit(vec![alloc(&format!("o{i}"), i)], T);
        i += 1;
    }
    let msg = failures
        .recv_timeout(T)
        .expect("the failed compaction is reported without another request");
    assert!(msg.contains("compaction failed"), "{msg}");
    drop(c);
}
