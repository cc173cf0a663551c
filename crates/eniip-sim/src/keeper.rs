//! The emulated cloud kept in a file (`eniip-sim --state-file`, `eniipd
//! --simulate --state-dir`): restored at start, saved after every change
//! (an OpenAPI call that changed the world, an admin change of a
//! vswitch) and at shutdown, so that a daemon restarted against a
//! restarted emulator, after a crash or a reboot as after a clean stop,
//! finds the cloud it left.
//!
//! Invariants: the file always holds one whole world (a save is written
//! aside, synced, renamed over it, and the directory synced); saves land
//! in the order their snapshots were taken (an older snapshot never
//! overwrites a newer one); no save holds the world's lock while it
//! writes.

use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use serde_json::Value;

use super::world::World;

/// Where the world is kept, and which snapshot the file holds.
#[derive(Debug)]
pub(crate) struct Keeper {
    path: PathBuf,
    /// Snapshots taken so far (numbered under the world's lock).
    taken: Mutex<u64>,
    /// The number of the snapshot the file holds.
    written: Mutex<u64>,
}

impl Keeper {
    pub(crate) fn new(path: &Path) -> Keeper {
        Keeper {
            path: path.to_path_buf(),
            taken: Mutex::new(0),
            written: Mutex::new(0),
        }
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
        match write_whole(&self.path, &saved) {
            Ok(()) => *written = n,
            Err(e) => log::warn!(
                "cannot save the emulated cloud to {}: {e}",
                self.path.display()
            ),
        }
    }
}

/// Writes `value` to `path` so that the file is the old or the new
/// content, whole, whatever happens.
fn write_whole(path: &Path, value: &Value) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    let bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)?.sync_all()
}
