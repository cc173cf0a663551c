//! Durable state: the only code that touches the state directory.
//!
//! Files (see `docs/state-format.md` and eniipd(8)): `lock` (held with an
//! exclusive lock for the life of the store: a second eniipd gets
//! [`StoreError::Locked`]), `state.json` (a snapshot, replaced atomically)
//! and `wal` (an append-only log of record batches since that snapshot).
//!
//! Invariants: a record is acknowledged only after the frame holding it is
//! fsynced; frames are written in submission order, so a later
//! acknowledged record implies every earlier one is durable; at every
//! instant the directory loads into the state of some prefix of the
//! submitted records. A crash can leave a torn last frame, which is
//! expected and dropped; anything else that does not check out is
//! corruption and stops start-up (exit 65) unless `--recover-state`.

mod committer;
mod record;
mod snapshot;
mod wal;

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read as _};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use log::{info, warn};

pub use committer::Committer;
pub use record::{Allocation, Hold, PersistedState, Record};

/// Tunables.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Write a new snapshot and start a fresh log once the log passes this.
    pub compact_after_bytes: u64,
}

impl Default for StoreOptions {
    fn default() -> StoreOptions {
        StoreOptions {
            compact_after_bytes: 1 << 20,
        }
    }
}

/// Why the state could not be used.
#[derive(Debug, Clone)]
pub enum StoreError {
    /// Another process holds the state directory.
    Locked {
        /// The directory.
        dir: PathBuf,
    },
    /// A file is damaged beyond a torn tail.
    Corrupt {
        /// Which file.
        file: PathBuf,
        /// Where in it, if known.
        offset: Option<u64>,
        /// What is wrong.
        what: String,
    },
    /// An I/O error.
    Io {
        /// What was being done.
        context: String,
        /// The error.
        source: Arc<io::Error>,
    },
    /// The store was closed or failed earlier.
    Closed,
}

impl StoreError {
    /// eniipd's exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            StoreError::Locked { .. } => 75,
            StoreError::Corrupt { .. } => 65,
            StoreError::Io { .. } | StoreError::Closed => 1,
        }
    }

    fn io(context: impl Into<String>, e: io::Error) -> StoreError {
        StoreError::Io {
            context: context.into(),
            source: Arc::new(e),
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Locked { dir } => write!(
                f,
                "state directory {} is in use by another eniipd",
                dir.display()
            ),
            StoreError::Corrupt {
                file,
                offset: Some(o),
                what,
            } => {
                write!(
                    f,
                    "state file {} is corrupt at byte {o}: {what}",
                    file.display()
                )
            }
            StoreError::Corrupt {
                file,
                offset: None,
                what,
            } => write!(f, "state file {} is corrupt: {what}", file.display()),
            StoreError::Io { context, .. } => write!(f, "{context}"),
            StoreError::Closed => write!(f, "the state store is closed after an earlier failure"),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Io { source, .. } => Some(&**source),
            _ => None,
        }
    }
}

/// What `--recover-state` did.
#[derive(Debug, Clone, Default)]
pub struct RecoveryReport {
    /// Files moved aside (into `corrupt-<time>/`).
    pub moved: Vec<PathBuf>,
    /// What was wrong with them.
    pub problems: Vec<String>,
    /// Log frames kept.
    pub frames_salvaged: usize,
    /// Allocations kept.
    pub allocations: usize,
    /// Holds kept.
    pub holds: usize,
    /// True when something was lost, so addresses with no known owner
    /// must be kept out of circulation for a while.
    pub quarantine_needed: bool,
}

/// An open state directory (locked), before its committer thread starts.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    _lock: File,
    wal: File,
    generation: u64,
    wal_len: u64,
    state: PersistedState,
    opts: StoreOptions,
}

const SNAPSHOT: &str = "state.json";
const WAL: &str = "wal";

impl Store {
    fn new(
        dir: &Path,
        lock: File,
        wal: File,
        generation: u64,
        wal_len: u64,
        state: &PersistedState,
        opts: StoreOptions,
    ) -> Store {
        Store {
            dir: dir.to_path_buf(),
            _lock: lock,
            wal,
            generation,
            wal_len,
            state: state.clone(),
            opts,
        }
    }

    /// Opens (creating if needed) and loads a state directory.
    pub fn open(dir: &Path, opts: StoreOptions) -> Result<(Store, PersistedState), StoreError> {
        let lock = lock_dir(dir)?;
        let (generation, state, wal_len, wal) = load(dir)?;
        let s = Store::new(dir, lock, wal, generation, wal_len, &state, opts);
        Ok((s, state))
    }

    /// Opens a state directory whose files may be corrupt: damaged files
    /// are moved into `corrupt-<unix time>/`, everything valid is kept,
    /// and a fresh snapshot is written.
    pub fn open_recovering(
        dir: &Path,
        opts: StoreOptions,
    ) -> Result<(Store, PersistedState, RecoveryReport), StoreError> {
        let lock = lock_dir(dir)?;
        if let Ok((generation, state, wal_len, wal)) = load(dir) {
            let report = RecoveryReport {
                allocations: state.allocations.len(),
                holds: state.holds.len(),
                ..RecoveryReport::default()
            };
            let s = Store::new(dir, lock, wal, generation, wal_len, &state, opts);
            return Ok((s, state, report));
        }
        let mut report = RecoveryReport {
            quarantine_needed: true,
            ..RecoveryReport::default()
        };
        let aside = dir.join(format!("corrupt-{}", crate::util::time::unix_secs()));
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
        let (mut generation, mut state) = (0, PersistedState::default());
        if let Some(b) = read_opt(&dir.join(SNAPSHOT))? {
            match snapshot::decode(&b) {
                Ok((g, s)) => {
                    if let Err(why) = s.check() {
                        move_aside(SNAPSHOT, format!("inconsistent state: {why}"), &mut report)?;
                    }
                    (generation, state) = (g, s);
                }
                Err(why) => move_aside(SNAPSHOT, why, &mut report)?,
            }
        }
        if let Some(b) = read_opt(&dir.join(WAL))? {
            let (frames, why) = match wal::scan(&b) {
                Ok(s) if s.generation == generation || generation == 0 => (s.frames, None),
                Ok(s) if s.generation < generation => (Vec::new(), None),
                Ok(s) => (
                    s.frames,
                    Some(format!(
                        "log generation {} is newer than the snapshot's {generation}",
                        s.generation
                    )),
                ),
                Err(e) => (
                    e.salvage,
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
            if let Some(why) = why {
                move_aside(WAL, why, &mut report)?;
            }
        }
        if let Err(why) = state.check() {
            warn!("the salvaged state does not add up ({why}); dropping what collides");
            report.problems.extend(state.drop_collisions());
        }
        generation += 1;
        snapshot::write_atomic(dir, SNAPSHOT, &snapshot::encode(generation, &state))
            .map_err(|e| StoreError::io("cannot write state.json", e))?;
        let (wal, wal_len) = fresh_wal(dir, generation)?;
        report.allocations = state.allocations.len();
        report.holds = state.holds.len();
        let s = Store::new(dir, lock, wal, generation, wal_len, &state, opts);
        Ok((s, state, report))
    }

    /// Starts the committer thread, which owns the store from now on.
    pub fn start(self) -> Committer {
        Committer::start(self)
    }

    /// The state directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

fn read_opt(p: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    match File::open(p) {
        Ok(mut f) => {
            let mut b = Vec::new();
            f.read_to_end(&mut b)
                .map_err(|e| StoreError::io(format!("cannot read {}", p.display()), e))?;
            Ok(Some(b))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StoreError::io(format!("cannot open {}", p.display()), e)),
    }
}

fn lock_dir(dir: &Path) -> Result<File, StoreError> {
    if !dir.exists() {
        fs::create_dir_all(dir).map_err(|e| {
            StoreError::io(
                format!("cannot create state directory {}", dir.display()),
                e,
            )
        })?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(|e| {
            StoreError::io(format!("cannot set permissions of {}", dir.display()), e)
        })?;
    }
    let path = dir.join("lock");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(|e| StoreError::io(format!("cannot open {}", path.display()), e))?;
    match f.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => {
            return Err(StoreError::Locked {
                dir: dir.to_path_buf(),
            })
        }
        Err(fs::TryLockError::Error(e)) => {
            return Err(StoreError::io(format!("cannot lock {}", path.display()), e))
        }
    }
    // Leftovers of an interrupted atomic write are never the real file.
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().ends_with(".tmp") {
                let _ = fs::remove_file(e.path());
            }
        }
    }
    Ok(f)
}

fn fresh_wal(dir: &Path, generation: u64) -> Result<(File, u64), StoreError> {
    let h = wal::header(generation);
    snapshot::write_atomic(dir, WAL, &h).map_err(|e| StoreError::io("cannot write wal", e))?;
    let f = OpenOptions::new()
        .append(true)
        .open(dir.join(WAL))
        .map_err(|e| StoreError::io("cannot open wal", e))?;
    Ok((f, h.len() as u64))
}

/// Loads snapshot + log: (generation, state, log length, log for append).
fn load(dir: &Path) -> Result<(u64, PersistedState, u64, File), StoreError> {
    let snap_path = dir.join(SNAPSHOT);
    let wal_path = dir.join(WAL);
    let corrupt = |file: &Path, offset, what: String| StoreError::Corrupt {
        file: file.to_path_buf(),
        offset,
        what,
    };
    let snap = read_opt(&snap_path)?;
    let (generation, mut state) = match &snap {
        Some(b) => snapshot::decode(b).map_err(|w| corrupt(&snap_path, None, w))?,
        None => (0, PersistedState::default()),
    };
    state
        .check()
        .map_err(|w| corrupt(&snap_path, None, format!("inconsistent state: {w}")))?;
    let Some(bytes) = read_opt(&wal_path)? else {
        if snap.is_some() {
            return Err(corrupt(
                &wal_path,
                None,
                "missing although state.json exists".into(),
            ));
        }
        let (f, len) = fresh_wal(dir, generation)?;
        return Ok((generation, state, len, f));
    };
    let scan = wal::scan(&bytes).map_err(|e| corrupt(&wal_path, e.offset, e.what))?;
    if scan.generation < generation {
        // A crash between writing a snapshot and resetting the log: the
        // log's content is already in the snapshot.
        info!(
            "wal of generation {} predates state.json ({generation}); replaced",
            scan.generation
        );
        let (f, len) = fresh_wal(dir, generation)?;
        return Ok((generation, state, len, f));
    }
    if scan.generation > generation {
        return Err(corrupt(
            &wal_path,
            Some(12),
            format!(
                "log generation {} is newer than the snapshot's {generation}",
                scan.generation
            ),
        ));
    }
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
    let f = OpenOptions::new()
        .append(true)
        .open(&wal_path)
        .map_err(|e| StoreError::io("cannot open wal", e))?;
    if scan.torn > 0 {
        warn!(
            "wal: dropped a torn tail of {} byte(s) at offset {} (an interrupted write)",
            scan.torn, scan.valid_len
        );
        f.set_len(scan.valid_len)
            .and_then(|()| f.sync_all())
            .map_err(|e| StoreError::io("cannot truncate the torn tail of wal", e))?;
    }
    Ok((generation, state, scan.valid_len, f))
}

/// For the benchmark floor: an atomic, durable write of `bytes` bytes
/// (temporary file, fsync, rename, directory fsync), timed, then removed.
pub fn measure_atomic_write(dir: &Path, bytes: usize) -> io::Result<Duration> {
    let data = vec![b'x'; bytes];
    let started = Instant::now();
    snapshot::write_atomic(dir, "bench-floor", &data)?;
    let took = started.elapsed();
    fs::remove_file(dir.join("bench-floor"))?;
    Ok(took)
}

#[cfg(test)]
mod tests;
