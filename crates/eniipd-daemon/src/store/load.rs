//! Reading the state directory at start: a plain load, which refuses
//! anything that does not check out, and a recovering one, which moves
//! damage aside and keeps what is valid.
//!
//! Which log goes with which snapshot is decided only from checksummed
//! fields: a log follows the snapshot whose generation and checksum its
//! header records, and is replayed onto it; a log of an older generation
//! is discarded only when the snapshot names it (generation and frame
//! count) as the log it absorbed, which is exactly what a crash between
//! the two steps of a compaction leaves. Any other pairing is damage
//! (exit 65), blamed on the file that is missing or does not fit.
//! Version 1 files (from before the snapshot and log named each other)
//! are read with version 1's rules and rewritten in version 2 at once.

use std::cmp::Ordering;
use std::fs::{self, File, OpenOptions};
use std::path::Path;

use log::{info, warn};

use super::snapshot::{self, LogRef, Snapshot};
use super::{
    fresh_wal, read_opt, rewrite, wal, PersistedState, RecoveryReport, Store, StoreError,
    StoreOptions, SNAPSHOT, WAL,
};

/// What loading yields: the state and the log to append to.
pub(super) struct Loaded {
    pub(super) generation: u64,
    pub(super) frames: u64,
    pub(super) wal_len: u64,
    pub(super) wal: File,
    pub(super) state: PersistedState,
}

impl Loaded {
    /// `state` at `generation`, with a log just begun beside it.
    fn fresh(generation: u64, (wal, wal_len): (File, u64), state: PersistedState) -> Loaded {
        Loaded {
            generation,
            frames: 0,
            wal_len,
            wal,
            state,
        }
    }

    pub(super) fn into_store(self, dir: &Path, lock: File, opts: StoreOptions) -> Store {
        Store {
            dir: dir.to_path_buf(),
            _lock: lock,
            wal: self.wal,
            generation: self.generation,
            frames: self.frames,
            wal_len: self.wal_len,
            state: self.state,
            opts,
        }
    }
}

/// How a log relates to the snapshot beside it.
#[derive(Debug, PartialEq, Eq)]
enum Fit {
    /// It follows the snapshot: replay it.
    Follows,
    /// The snapshot already holds its content: discard it.
    Absorbed,
}

/// Which file a mismatch is blamed on, where in the log header, and why.
struct Misfit {
    snapshot: bool,
    offset: Option<u64>,
    what: String,
}

/// Offsets in the log header of the fields a misfit is about.
const GENERATION_AT: Option<u64> = Some(12);
const SNAPSHOT_CRC_AT: Option<u64> = Some(20);

fn fit(scan: &wal::Scan, snap: Option<&Snapshot>) -> Result<Fit, Misfit> {
    let Some(s) = snap else {
        // Snapshots start at generation 1: a log of generation 0 is the
        // first one, anything else lost the snapshot it follows.
        if scan.generation == 0 && scan.snapshot_crc.unwrap_or(0) == 0 {
            return Ok(Fit::Follows);
        }
        return Err(Misfit {
            snapshot: true,
            offset: None,
            what: format!(
                "missing, but wal follows the snapshot of generation {}",
                scan.generation
            ),
        });
    };
    match scan.generation.cmp(&s.generation) {
        Ordering::Equal => match scan.snapshot_crc {
            Some(c) if c != s.checksum => Err(Misfit {
                snapshot: false,
                offset: SNAPSHOT_CRC_AT,
                what: format!(
                    "the log follows a snapshot of generation {} with checksum {c:08x}, not this state.json ({:08x})",
                    s.generation, s.checksum
                ),
            }),
            _ => Ok(Fit::Follows),
        },
        Ordering::Less => {
            let this = LogRef {
                generation: scan.generation,
                frames: scan.frames.len() as u64,
            };
            // Version 1 snapshots did not name the log they absorbed.
            if s.version == 1 || s.supersedes == Some(this) {
                return Ok(Fit::Absorbed);
            }
            let absorbed = s.supersedes.map_or("none".to_string(), |r| {
                format!("generation {}, {} frame(s)", r.generation, r.frames)
            });
            Err(Misfit {
                snapshot: false,
                offset: GENERATION_AT,
                what: format!(
                    "the log (generation {}, {} frame(s)) is older than state.json (generation {}) but is not the log it absorbed ({absorbed})",
                    this.generation, this.frames, s.generation
                ),
            })
        }
        Ordering::Greater => Err(Misfit {
            snapshot: false,
            offset: GENERATION_AT,
            what: format!(
                "log generation {} is newer than the snapshot's {}",
                scan.generation, s.generation
            ),
        }),
    }
}

fn corrupt(file: &Path, offset: Option<u64>, what: String) -> StoreError {
    StoreError::Corrupt {
        file: file.to_path_buf(),
        offset,
        what,
    }
}

/// Loads snapshot + log, refusing damage.
pub(super) fn load(dir: &Path) -> Result<Loaded, StoreError> {
    let snap_path = dir.join(SNAPSHOT);
    let wal_path = dir.join(WAL);
    let snap = match read_opt(&snap_path)? {
        Some(b) => Some(snapshot::decode(&b).map_err(|w| corrupt(&snap_path, None, w))?),
        None => None,
    };
    if let Some(s) = &snap {
        s.state
            .check()
            .map_err(|w| corrupt(&snap_path, None, format!("inconsistent state: {w}")))?;
    }
    let (generation, checksum, mut state) = snap
        .as_ref()
        .map_or((0, 0, PersistedState::default()), |s| {
            (s.generation, s.checksum, s.state.clone())
        });
    let Some(bytes) = read_opt(&wal_path)? else {
        if snap.is_some() {
            return Err(corrupt(
                &wal_path,
                None,
                "missing although state.json exists".into(),
            ));
        }
        return Ok(Loaded::fresh(generation, fresh_wal(dir, 0, 0)?, state));
    };
    let scan = wal::scan(&bytes).map_err(|e| corrupt(&wal_path, e.offset, e.what))?;
    let legacy =
        scan.version == wal::WAL_VERSION_1 || snap.as_ref().is_some_and(|s| s.version == 1);
    let fits = fit(&scan, snap.as_ref()).map_err(|m| {
        let file = if m.snapshot { &snap_path } else { &wal_path };
        corrupt(file, m.offset, m.what)
    })?;
    if scan.torn > 0 {
        warn!(
            "wal: dropped a torn tail of {} byte(s) at offset {} (an interrupted write)",
            scan.torn, scan.valid_len
        );
    }
    let on_disk = LogRef {
        generation: scan.generation,
        frames: scan.frames.len() as u64,
    };
    if fits == Fit::Absorbed {
        info!(
            "wal of generation {} is already contained in state.json (generation {generation}); replaced",
            scan.generation
        );
    } else {
        for f in &scan.frames {
            for r in f {
                state.apply(r);
            }
        }
        state.check().map_err(|w| {
            corrupt(
                &wal_path,
                None,
                format!("replay gives an inconsistent state: {w}"),
            )
        })?;
    }
    if legacy {
        // Version 1 files are only as safe as version 1's checks: write
        // the state in version 2 now rather than keep appending to them.
        let wal = rewrite(dir, generation + 1, Some(on_disk), &state)?;
        info!(
            "state files rewritten in format version {} (generation {})",
            snapshot::VERSION,
            generation + 1
        );
        return Ok(Loaded::fresh(generation + 1, wal, state));
    }
    if fits == Fit::Absorbed {
        let wal = fresh_wal(dir, generation, checksum)?;
        return Ok(Loaded::fresh(generation, wal, state));
    }
    let wal = OpenOptions::new()
        .append(true)
        .open(&wal_path)
        .map_err(|e| StoreError::io("cannot open wal", e))?;
    if scan.torn > 0 {
        wal.set_len(scan.valid_len)
            .and_then(|()| wal.sync_all())
            .map_err(|e| StoreError::io("cannot truncate the torn tail of wal", e))?;
    }
    Ok(Loaded {
        generation,
        frames: on_disk.frames,
        wal_len: scan.valid_len,
        wal,
        state,
    })
}

/// Loads what can be trusted, moving damaged files aside, and writes it
/// as a fresh snapshot and log.
/// How far a recovery that lost something moves the next allocation
/// generation: more than a state directory's log can ever have held
/// between two snapshots.
pub(super) const GENERATIONS_LOST_AT_MOST: u64 = 1 << 32;

pub(super) fn recover(dir: &Path) -> Result<(Loaded, RecoveryReport), StoreError> {
    if let Ok(l) = load(dir) {
        let report = RecoveryReport {
            allocations: l.state.allocations.len(),
            holds: l.state.holds.len(),
            ..RecoveryReport::default()
        };
        return Ok((l, report));
    }
    let mut report = RecoveryReport {
        quarantine_needed: true,
        ..RecoveryReport::default()
    };
    let aside = dir.join(format!("corrupt-{}", eniip_util::time::unix_secs()));
    let move_aside =
        |name: &str, why: String, report: &mut RecoveryReport| -> Result<(), StoreError> {
            fs::create_dir_all(&aside)
                .map_err(|e| StoreError::io(format!("cannot create {}", aside.display()), e))?;
            let to = aside.join(name);
            fs::rename(dir.join(name), &to)
                .map_err(|e| StoreError::io(format!("cannot move {name} aside"), e))?;
            warn!("moved {name} to {}: {why}", to.display());
            report.moved.push(to);
            report.problems.push(format!("{name}: {why}"));
            Ok(())
        };
    let mut snap = None;
    if let Some(b) = read_opt(&dir.join(SNAPSHOT))? {
        match snapshot::decode(&b) {
            Ok(s) => {
                if let Err(why) = s.state.check() {
                    move_aside(SNAPSHOT, format!("inconsistent state: {why}"), &mut report)?;
                }
                snap = Some(s);
            }
            Err(why) => move_aside(SNAPSHOT, why, &mut report)?,
        }
    }
    let mut generation = snap.as_ref().map_or(0, |s| s.generation);
    let mut state = snap.as_ref().map(|s| s.state.clone()).unwrap_or_default();
    // The log left in place, which the new snapshot then absorbs.
    let mut supersedes = None;
    if let Some(b) = read_opt(&dir.join(WAL))? {
        let (frames, on_disk, why) = match wal::scan(&b) {
            Ok(s) => {
                let on_disk = LogRef {
                    generation: s.generation,
                    frames: s.frames.len() as u64,
                };
                match fit(&s, snap.as_ref()) {
                    Ok(Fit::Follows) => (s.frames, on_disk, None),
                    Ok(Fit::Absorbed) => (Vec::new(), on_disk, None),
                    // Without a trusted snapshot the log is all there is.
                    Err(_) if snap.is_none() => (s.frames, on_disk, None),
                    // An older log that does not belong would bring back
                    // what was released since: keep it only aside.
                    Err(m) if s.generation < generation => (Vec::new(), on_disk, Some(m.what)),
                    Err(m) => (s.frames, on_disk, Some(m.what)),
                }
            }
            Err(e) => (
                e.salvage,
                LogRef {
                    generation: e.generation.unwrap_or(0),
                    frames: 0,
                },
                Some(match e.offset {
                    Some(o) => format!("{} at byte {o}", e.what),
                    None => e.what,
                }),
            ),
        };
        report.frames_salvaged = frames.len();
        let was_consistent = state.check().is_ok();
        for f in &frames {
            for r in f {
                state.apply(r);
            }
        }
        let why = why.or_else(|| {
            let w = state.check().err().filter(|_| was_consistent)?;
            Some(format!("replay gives an inconsistent state: {w}"))
        });
        match why {
            Some(why) => move_aside(WAL, why, &mut report)?,
            None => supersedes = Some(on_disk),
        }
        // A new snapshot must be newer than any log left beside it.
        generation = generation.max(on_disk.generation);
    }
    if let Err(why) = state.check() {
        warn!("the salvaged state does not add up ({why}); dropping what collides");
        report.problems.extend(state.drop_collisions());
    }
    // Whatever was lost may have recorded allocation generations above
    // every one kept; an owner still holding one of those must never
    // see it handed out again (a `release ... gen=N` would then match a
    // new allocation), so the count leaps past any that can have been.
    state.next_gen = state.next_gen.saturating_add(GENERATIONS_LOST_AT_MOST);
    generation += 1;
    let wal = rewrite(dir, generation, supersedes, &state)?;
    report.allocations = state.allocations.len();
    report.holds = state.holds.len();
    Ok((Loaded::fresh(generation, wal, state), report))
}
