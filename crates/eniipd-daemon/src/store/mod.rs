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
//! Every field the loader acts on is under a checksum, and the two files
//! name each other (the log's header holds the generation and checksum of
//! the snapshot it follows; a snapshot names the log it absorbed), so a
//! log is only ever replayed onto, or discarded as already contained in,
//! the snapshot it belongs to.

mod committer;
mod edge;
mod load;
mod node;
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

pub use committer::Committer;
pub use record::{Allocation, Asked, Hold, PersistedState, Record};
pub(crate) use snapshot::write_atomic;

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
    /// A bounded close ran out of time with the disk not answering (an
    /// fsync can block for as long as a filesystem stays frozen). The
    /// store thread is left behind, still holding the lock.
    NotDurable {
        /// Submitted records not made durable (0: every record is in the
        /// log, only the final snapshot is missing).
        records: usize,
    },
}

impl StoreError {
    /// eniipd's exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            StoreError::Locked { .. } => 75,
            StoreError::Corrupt { .. } => 65,
            StoreError::Io { .. } | StoreError::Closed | StoreError::NotDurable { .. } => 1,
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
            // The OS error is part of the sentence (a commit failure is
            // logged and answered with Display alone) and also the source.
            StoreError::Io { context, source } => write!(f, "{context}: {source}"),
            StoreError::Closed => write!(f, "the state store is closed after an earlier failure"),
            StoreError::NotDurable { records: 0 } => write!(
                f,
                "the state disk did not answer before the deadline: every submitted record is durable, the final snapshot was not written"
            ),
            StoreError::NotDurable { records } => write!(
                f,
                "the state disk did not answer before the deadline: {records} submitted record(s) are not durable"
            ),
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
pub(crate) struct RecoveryReport {
    /// Files moved aside (into `corrupt-<time>/`).
    pub(crate) moved: Vec<PathBuf>,
    /// What was wrong with them.
    pub(crate) problems: Vec<String>,
    /// Log frames kept.
    pub(crate) frames_salvaged: usize,
    /// Allocations kept.
    pub(crate) allocations: usize,
    /// Holds kept.
    pub(crate) holds: usize,
    /// True when something was lost, so addresses with no known owner
    /// must be kept out of circulation for a while.
    pub(crate) quarantine_needed: bool,
}

/// An open state directory (locked), before its committer thread starts.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    _lock: File,
    /// The log, open for append.
    wal: File,
    /// Generation of the snapshot the log follows (and of the log).
    generation: u64,
    /// Frames in the log (the next one gets this plus one).
    frames: u64,
    wal_len: u64,
    state: PersistedState,
    opts: StoreOptions,
}

const SNAPSHOT: &str = "state.json";
const WAL: &str = "wal";

impl Store {
    /// Opens (creating if needed) and loads a state directory.
    pub fn open(dir: &Path, opts: StoreOptions) -> Result<(Store, PersistedState), StoreError> {
        let lock = lock_dir(dir)?;
        let l = load::load(dir)?;
        let state = l.state.clone();
        Ok((l.into_store(dir, lock, opts), state))
    }

    /// Opens a state directory whose files may be corrupt: damaged files
    /// are moved into `corrupt-<unix time>/`, everything valid is kept,
    /// and a fresh snapshot is written.
    pub(crate) fn open_recovering(
        dir: &Path,
        opts: StoreOptions,
    ) -> Result<(Store, PersistedState, RecoveryReport), StoreError> {
        let lock = lock_dir(dir)?;
        let (l, report) = load::recover(dir)?;
        let state = l.state.clone();
        Ok((l.into_store(dir, lock, opts), state, report))
    }

    /// Starts the committer thread, which owns the store from now on.
    pub fn start(self) -> Committer {
        Committer::start(self)
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

/// Starts an empty log following the snapshot of `generation` whose
/// checksum is `snapshot_crc`, atomically (a crash leaves the old log or
/// the new one, never a mix); returns it open for append, and its length.
fn fresh_wal(dir: &Path, generation: u64, snapshot_crc: u32) -> Result<(File, u64), StoreError> {
    let h = wal::header(generation, snapshot_crc);
    snapshot::write_atomic(dir, WAL, &h).map_err(|e| StoreError::io("cannot write wal", e))?;
    let f = OpenOptions::new()
        .append(true)
        .open(dir.join(WAL))
        .map_err(|e| StoreError::io("cannot open wal", e))?;
    Ok((f, h.len() as u64))
}

/// Writes `state` as the snapshot of `generation`, naming the log it
/// absorbs, then starts that generation's empty log. A crash between the
/// two steps leaves the absorbed log beside the new snapshot, which the
/// loader recognises by `supersedes` and discards.
fn rewrite(
    dir: &Path,
    generation: u64,
    supersedes: Option<snapshot::LogRef>,
    state: &PersistedState,
) -> Result<(File, u64), StoreError> {
    let (bytes, checksum) = snapshot::encode(generation, supersedes, state);
    snapshot::write_atomic(dir, SNAPSHOT, &bytes)
        .map_err(|e| StoreError::io("cannot write state.json", e))?;
    fresh_wal(dir, generation, checksum)
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

/// A scratch log in which each [`commit`](FloorLog::commit) is one
/// commit as the committer makes it, minus everything around it: one log
/// frame of the same records appended, then `fdatasync`. The physical
/// floor of a durable reply, for benchmarks; the file is removed when it
/// is dropped.
#[derive(Debug)]
pub struct FloorLog {
    file: File,
    path: PathBuf,
    seq: u64,
    records: Vec<Record>,
}

impl FloorLog {
    /// A fresh log in `dir` whose commits carry `records`.
    pub fn create(dir: &Path, records: Vec<Record>) -> io::Result<FloorLog> {
        use std::io::Write as _;
        let path = dir.join("bench-floor.wal");
        drop(File::create(&path)?);
        let mut file = OpenOptions::new().append(true).open(&path)?;
        file.write_all(&wal::header(1, 0))?;
        file.sync_all()?;
        Ok(FloorLog {
            file,
            path,
            seq: 0,
            records,
        })
    }

    /// One commit; how long it took.
    pub fn commit(&mut self) -> io::Result<Duration> {
        use std::io::Write as _;
        let started = Instant::now();
        self.seq += 1;
        let frame = wal::frame(self.seq, &self.records);
        self.file.write_all(&frame)?;
        self.file.sync_data()?;
        Ok(started.elapsed())
    }
}

impl Drop for FloorLog {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests;
