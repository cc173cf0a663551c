//! The emulated cloud kept in a file (`eniip-sim --state-file`, `eniipd
//! --simulate --state-dir`): restored at start, saved after every change
//! (an OpenAPI call that changed the world, an admin change of a
//! vswitch) and at shutdown, so that a daemon restarted against a
//! restarted emulator, after a crash or a reboot as after a clean stop,
//! finds the cloud it left.
//!
//! Invariants: one emulator keeps a file at a time (it holds an
//! exclusive `flock` on `PATH.lock` beside it, which names its pid, for
//! as long as it runs); the file always holds one whole world (a save is
//! written aside under a name of its own, `.NAME.PID.tmp`, synced,
//! renamed over it, and the directory synced: whatever PATH is named,
//! even `*.tmp`); saves land in the order their snapshots were taken (an
//! older snapshot never overwrites a newer one); no save holds the
//! world's lock while it writes.

use std::fs::File;
use std::io::{self, Read as _, Seek as _, Write as _};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use parking_lot::Mutex;
use serde_json::Value;

use super::world::World;

/// Where the world is kept, and which snapshot the file holds.
#[derive(Debug)]
pub(crate) struct Keeper {
    path: PathBuf,
    /// Where a save is written before it is renamed over `path`.
    aside: PathBuf,
    /// Snapshots taken so far (numbered under the world's lock).
    taken: Mutex<u64>,
    /// The number of the snapshot the file holds.
    written: Mutex<u64>,
    /// The lock on `PATH.lock`, held while the keeper lives.
    _lock: Flock<File>,
}

impl Keeper {
    /// Takes `path` for this emulator: refused (naming the holder's pid)
    /// while another emulator keeps it (after 2 s: one that is stopping
    /// lets go before). A save a killed emulator left
    /// aside is removed.
    pub(crate) fn open(path: &Path) -> Result<Keeper, String> {
        let lock_path = beside(path, "", ".lock");
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(|e| format!("{}: {e}", lock_path.display()))?;
        // An emulator that is stopping (one `eniipd --simulate` restarted
        // at once left, ending with its standard input) is waited for a
        // moment; one that keeps running is not.
        let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let mut f = f;
        let taken = loop {
            match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
                Err((back, nix::errno::Errno::EWOULDBLOCK))
                    if std::time::Instant::now() < until =>
                {
                    f = back;
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                other => break other,
            }
        };
        let mut lock = match taken {
            Ok(l) => l,
            Err((mut f, nix::errno::Errno::EWOULDBLOCK)) => {
                let mut pid = String::new();
                let _ = f.read_to_string(&mut pid);
                let pid = pid.trim();
                let who = if pid.is_empty() { "?" } else { pid };
                return Err(format!(
                    "{} is kept by another eniip-sim (pid {who}, holding {}): one emulator per state file",
                    path.display(),
                    lock_path.display()
                ));
            }
            Err((_, e)) => return Err(format!("{}: flock: {e}", lock_path.display())),
        };
        let named = lock
            .set_len(0)
            .and_then(|()| lock.rewind())
            .and_then(|()| writeln!(lock, "{}", std::process::id()));
        named.map_err(|e| format!("{}: {e}", lock_path.display()))?;
        remove_left_aside(path);
        Ok(Keeper {
            path: path.to_path_buf(),
            aside: beside(path, ".", &format!(".{}.tmp", std::process::id())),
            taken: Mutex::new(0),
            written: Mutex::new(0),
            _lock: lock,
        })
    }

    /// The file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces `world` with the one in the file, if there is a file.
    /// Whether there was one.
    pub(crate) fn restore(&self, world: &mut World) -> Result<bool, String> {
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(format!("{}: {e}", self.path.display())),
        };
        let saved: Value =
            serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", self.path.display()))?;
        world
            .restore(&saved)
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
        Ok(true)
    }

    /// Saves the world as it is now (a failure is logged: the emulator
    /// goes on, and the next change tries again).
    pub(crate) fn save(&self, world: &Mutex<World>) {
        let (n, saved) = {
            let w = world.lock();
            let mut taken = self.taken.lock();
            *taken += 1;
            (*taken, w.saved())
        };
        let mut written = self.written.lock();
        if *written >= n {
            return;
        }
        match write_whole(&self.path, &self.aside, &saved) {
            Ok(()) => *written = n,
            Err(e) => log::warn!(
                "cannot save the emulated cloud to {}: {e}",
                self.path.display()
            ),
        }
    }
}

/// `path`'s file name with `before` and `after` around it, in its
/// directory.
fn beside(path: &Path, before: &str, after: &str) -> PathBuf {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    path.with_file_name(format!("{before}{name}{after}"))
}

/// Removes the saves emulators killed while writing left beside `path`
/// (`.NAME.PID.tmp`; called under the lock, so none is being written).
fn remove_left_aside(path: &Path) {
    let Some(name) = path.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return;
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let start = format!(".{name}.");
    for e in entries.flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        let pid = n.strip_prefix(&start).and_then(|r| r.strip_suffix(".tmp"));
        if pid.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Writes `value` to `path` (through `aside`) so that the file is the
/// old or the new content, whole, whatever happens.
fn write_whole(path: &Path, aside: &Path, value: &Value) -> io::Result<()> {
    let bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    let mut f = std::fs::File::create(aside)?;
    f.write_all(&bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(aside, path)?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)?.sync_all()
}
