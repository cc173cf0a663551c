//! A flipped bit anywhere in the state files is either refused (exit 65)
//! or harmless: loading never yields less than, or something other than,
//! what was acknowledged. A torn tail is the only damage the loader may
//! repair silently, and a bit flip in a complete, acknowledged log is
//! never one.

use std::fs;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::tempdir_in;
use eniipd_daemon::store::{
    Allocation, Hold, PersistedState, Record, Store, StoreError, StoreOptions,
};

const T: Duration = Duration::from_secs(5);

/// A fresh directory for one sweep: thousands of loads, so on tmpfs when
/// there is one, and the sweep measures the loader and not the disk.
fn scratch(tag: &str) -> PathBuf {
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    tempdir_in(&base, &format!("store-corruption-{tag}"))
}

fn alloc(i: u8) -> Record {
    Record::Alloc(Allocation {
        owner: format!("ns/pod-{i}"),
        sandbox: Some(format!("sb{i}")),
        ipv4: Ipv4Addr::new(10, 1, 0, i),
        ipv6: None,
        ipv6_prefix: None,
        eni: "eni-sweep".into(),
        at_ms: 1_700_000_000_000 + u64::from(i),
        gen: 0,
        attach: None,
        asked: Default::default(),
    })
}

fn release(i: u8) -> Record {
    Record::Release {
        owner: format!("ns/pod-{i}"),
        hold: Some(Hold {
            ipv4: Ipv4Addr::new(10, 1, 0, i),
            ipv6: None,
            ipv6_prefix: None,
            eni: "eni-sweep".into(),
            last_owner: Some(format!("ns/pod-{i}")),
            reserved_until_ms: 1_800_000_000_000,
            cooling_until_ms: 0,
        }),
    }
}

/// Commits through the real store (with compactions along the way), ends
/// with a compaction so a snapshot exists, then commits a few more
/// batches and stops without a final snapshot (as a crash would): a
/// state.json plus a log with several frames. Returns the acknowledged
/// state, and the state before the last batch.
fn build(dir: &Path) -> (PersistedState, PersistedState) {
    let mut model = PersistedState::default();
    let mut before_last = model.clone();
    let mut phase = |opts: StoreOptions, batches: Vec<Vec<Record>>, close: bool| {
        let (s, _) = Store::open(dir, opts).unwrap();
        let c = s.start();
        for records in batches {
            before_last = model.clone();
            c.commit(records.clone(), T).unwrap();
            for r in &records {
                model.apply(r);
            }
        }
        if close {
            c.close().unwrap();
        }
    };
    phase(
        StoreOptions {
            compact_after_bytes: 500,
        },
        (0..6).map(|i| vec![alloc(i), alloc(i + 100)]).collect(),
        true,
    );
    assert!(dir.join("state.json").exists());
    phase(
        StoreOptions::default(),
        vec![
            vec![release(0)],
            vec![alloc(200)],
            vec![Record::Forget {
                owner: "ns/pod-100".into(),
            }],
            vec![alloc(201), release(3)],
        ],
        false,
    );
    (model, before_last)
}

#[derive(Default)]
struct Tally {
    tried: usize,
    refused: usize,
    loaded: usize,
    wrong: Vec<String>,
}

/// Flips `bit` at `offset` of `file` (the other file intact), loads, and
/// records the outcome.
fn trial(
    trial_dir: &Path,
    files: &[(&str, Vec<u8>)],
    file: &str,
    offset: usize,
    bit: u8,
    want: &PersistedState,
    tally: &mut Tally,
) {
    // A directory per trial: the state lock is an flock, and a child that
    // another test of this process forks holds a copy of the previous
    // trial's lock until it execs.
    let trial_dir = &trial_dir.join(tally.tried.to_string());
    fs::create_dir(trial_dir).unwrap();
    for (name, bytes) in files {
        let mut b = bytes.clone();
        if *name == file {
            b[offset] ^= 1 << bit;
        }
        fs::write(trial_dir.join(name), &b).unwrap();
    }
    tally.tried += 1;
    match Store::open(trial_dir, StoreOptions::default()) {
        Err(e @ StoreError::Corrupt { .. }) => {
            assert_eq!(e.exit_code(), 65);
            tally.refused += 1;
        }
        Ok((_s, got)) if &got == want => tally.loaded += 1,
        Ok((_s, got)) => tally.wrong.push(format!(
            "{file} byte {offset} bit {bit}: loaded {} allocation(s), {} hold(s) instead of {}, {}",
            got.allocations.len(),
            got.holds.len(),
            want.allocations.len(),
            want.holds.len()
        )),
        Err(e) => tally
            .wrong
            .push(format!("{file} byte {offset} bit {bit}: {e}")),
    }
    let _ = fs::remove_dir_all(trial_dir);
}

#[test]
fn every_flipped_bit_is_refused_or_harmless() {
    let dir = scratch("build");
    let (want, _) = build(&dir);
    // Dropping the committer joined its thread: the lock is free.
    let (s, loaded) = Store::open(&dir, StoreOptions::default()).unwrap();
    assert_eq!(
        loaded, want,
        "the undamaged files load what was acknowledged"
    );
    drop(s);
    let files = [
        ("state.json", fs::read(dir.join("state.json")).unwrap()),
        ("wal", fs::read(dir.join("wal")).unwrap()),
    ];
    let trial_dir = scratch("trial");
    let started = Instant::now();
    let mut tally = Tally::default();
    for (name, bytes) in &files {
        for (offset, byte) in bytes.iter().enumerate() {
            // Every bit of the log; of the snapshot, two bits per byte,
            // rotating so every bit position is hit across neighbouring
            // bytes, and every bit of a digit, since those are the flips
            // that still parse into a different document (a generation,
            // an address, a time). Every bit of every byte of both files
            // takes over 20 s in a debug build.
            let bits: Vec<u8> = if *name == "wal" || byte.is_ascii_digit() {
                (0..8).collect()
            } else {
                vec![(offset % 8) as u8, ((offset + 4) % 8) as u8]
            };
            for bit in bits {
                trial(&trial_dir, &files, name, offset, bit, &want, &mut tally);
            }
        }
    }
    eprintln!(
        "corruption sweep: state.json {} bytes, wal {} bytes; {} flips tried, {} refused, {} loaded the acknowledged state, {} wrong ({} in state.json), in {:?}",
        files[0].1.len(),
        files[1].1.len(),
        tally.tried,
        tally.refused,
        tally.loaded,
        tally.wrong.len(),
        tally.wrong.iter().filter(|w| w.starts_with("state.json")).count(),
        started.elapsed()
    );
    let _ = fs::remove_dir_all(&dir);
    let _ = fs::remove_dir_all(&trial_dir);
    assert!(
        tally.wrong.is_empty(),
        "{} flip(s) loaded something other than the acknowledged state, e.g.:\n{}",
        tally.wrong.len(),
        tally.wrong[..tally.wrong.len().min(15)].join("\n")
    );
    assert!(tally.refused > 0 && tally.tried == tally.refused + tally.loaded);
}

#[test]
fn an_interrupted_last_append_is_dropped_and_the_rest_loads() {
    let dir = scratch("torn");
    let (_, before_last) = build(&dir);
    let wal = fs::read(dir.join("wal")).unwrap();
    let snap = fs::read(dir.join("state.json")).unwrap();
    // Where the last frame starts: loading the log without it must give
    // the state before the last batch, and nothing else does.
    let trial_dir = scratch("torn-trial");
    let trials = std::cell::Cell::new(0u32);
    // A directory per load, for the reason `trial` gives.
    let load = |wal: &[u8]| {
        trials.set(trials.get() + 1);
        let d = trial_dir.join(trials.get().to_string());
        fs::create_dir(&d).unwrap();
        fs::write(d.join("state.json"), &snap).unwrap();
        fs::write(d.join("wal"), wal).unwrap();
        let got = Store::open(&d, StoreOptions::default()).map(|(_s, state)| state);
        let _ = fs::remove_dir_all(&d);
        got
    };
    let last = (0..wal.len())
        .find(|cut| load(&wal[..*cut]).ok().as_ref() == Some(&before_last))
        .unwrap();
    assert!(wal.len() - last > 24, "the last frame is found");
    let mut tried = 0;
    for cut in last..wal.len() {
        // Cut short, or the size written but the rest lost (zeros).
        let mut zeroed = wal.clone();
        zeroed[cut..].fill(0);
        for bytes in [&wal[..cut], &zeroed[..]] {
            tried += 1;
            match load(bytes) {
                Ok(state) => assert_eq!(state, before_last, "cut at {cut}"),
                Err(e) => panic!("cut at {cut}: {e}"),
            }
        }
    }
    eprintln!("torn tails: {tried} interrupted appends of the last frame, all dropped cleanly");
    let _ = fs::remove_dir_all(&dir);
    let _ = fs::remove_dir_all(&trial_dir);
}
