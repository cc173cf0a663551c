//! One invocation at a time per owner on a node. ADD, DEL and CHECK hold
//! the lock of their owner from before they ask eniipd anything until they
//! are done, so two ADDs for one container (a retry storm), or an ADD and
//! a DEL of one pod, never interleave: without it, one ADD's rollback
//! released the address the other had just handed to its pod.
//!
//! The locks are `flock`s on a fixed set of files, `DIR/slot.N` with N a
//! hash of the owner in `0..BUCKETS`: two owners may share one (they then
//! wait for each other: a whole ADD, hundreds of milliseconds when a
//! storm of pods starts at once on a small node, so there are enough for
//! two pods of a storm to share one seldom), and the directory never
//! grows past that. The files are never removed (removing a lock file others may
//! wait on is a race); `/run` empties them at boot.
//!
//! Plugins before this one locked `DIR/owner.M` exclusively, M the same
//! hash in `0..LEGACY_BUCKETS`. While a rollout replaces the binary, an
//! old invocation and a new one for the same owner may run at once, so a
//! new one also holds its owner's `owner.M`, shared: new invocations never
//! wait for each other there (shared locks do not conflict), and an old
//! one and a new one for the same owner still exclude each other.
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use sha1::{Digest, Sha1};

use super::spec::{code, CniError};

/// How many lock files there may be: with 64, half the ADDs of a
/// 100-pod storm waited for another pod's (`cni-bench --storm`); with
/// 1024, about one in twenty. An empty file on `/run`'s tmpfs costs the
/// kernel under a kilobyte.
const BUCKETS: u32 = 1024;
/// How many lock files plugins before `slot.N` had (`owner.M`).
const LEGACY_BUCKETS: u32 = 64;
/// How often a waiting invocation tries the lock again.
const POLL: Duration = Duration::from_millis(5);

/// A held lock, released when dropped.
#[derive(Debug)]
pub(crate) struct OwnerLock {
    _held: Flock<File>,
    /// The older plugins' lock of the owner, shared (see the module doc).
    _legacy: Flock<File>,
}

/// The lock file of `owner` in `dir` (also for tests that hold an
/// owner's lock as a concurrent invocation would).
pub fn path_of(dir: &Path, owner: &str) -> PathBuf {
    dir.join(format!("slot.{}", hash(owner) % BUCKETS))
}

/// The lock file plugins before `slot.N` took for `owner`.
pub fn legacy_path_of(dir: &Path, owner: &str) -> PathBuf {
    dir.join(format!("owner.{}", hash(owner) % LEGACY_BUCKETS))
}

fn hash(owner: &str) -> u32 {
    let h = Sha1::digest(owner.as_bytes());
    u32::from_be_bytes([h[0], h[1], h[2], h[3]])
}

fn io_error(path: &Path, e: impl std::fmt::Display) -> CniError {
    CniError::new(code::IO, format!("cannot take the lock {}", path.display()))
        .details(e.to_string())
}

fn open(dir: &Path, path: PathBuf) -> Result<(PathBuf, File), CniError> {
    std::fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| io_error(&path, e))?;
    Ok((path, f))
}

/// Takes `owner`'s lock, waiting up to `wait` for another invocation to
/// finish (CNI error 11 past it: the runtime retries).
pub(crate) fn lock(dir: &Path, owner: &str, wait: Duration) -> Result<OwnerLock, CniError> {
    let end = Instant::now() + wait;
    let held = take(
        dir,
        path_of(dir, owner),
        FlockArg::LockExclusiveNonblock,
        owner,
        (end, wait),
    )?;
    let legacy = take(
        dir,
        legacy_path_of(dir, owner),
        FlockArg::LockSharedNonblock,
        owner,
        (end, wait),
    )?;
    Ok(OwnerLock {
        _held: held,
        _legacy: legacy,
    })
}

/// Takes the lock `path` as `how`, polling until `end`.
fn take(
    dir: &Path,
    path: PathBuf,
    how: FlockArg,
    owner: &str,
    (end, wait): (Instant, Duration),
) -> Result<Flock<File>, CniError> {
    let (path, mut f) = open(dir, path)?;
    loop {
        match Flock::lock(f, how) {
            Ok(held) => return Ok(held),
            Err((back, Errno::EWOULDBLOCK)) => f = back,
            Err((back, Errno::EINTR)) => {
                f = back;
                continue;
            }
            Err((_, e)) => return Err(io_error(&path, e)),
        }
        if Instant::now() >= end {
            return Err(CniError::new(
                code::TRY_AGAIN,
                format!(
                    "another eniip-cni invocation for {owner} is still running after {wait:?} \
                     (lock {})",
                    path.display()
                ),
            ));
        }
        std::thread::sleep(POLL);
    }
}

/// Takes `owner`'s lock if no invocation holds it now.
#[cfg(test)]
pub(crate) fn try_lock(dir: &Path, owner: &str) -> Result<Option<OwnerLock>, CniError> {
    match lock(dir, owner, Duration::ZERO) {
        Ok(held) => Ok(Some(held)),
        Err(e) if e.code == code::TRY_AGAIN => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_per_owner_and_the_others_wait_or_give_up() {
        let dir = std::env::temp_dir().join(format!("eniip-cni-lock-test-{}", std::process::id()));
        let a = lock(&dir, "eni/ns/a", Duration::from_secs(1)).unwrap();
        // flock is per open file: a second open in this process conflicts
        // just as another process's would.
        assert!(try_lock(&dir, "eni/ns/a").unwrap().is_none());
        let e = lock(&dir, "eni/ns/a", Duration::from_millis(50)).unwrap_err();
        assert_eq!(e.code, code::TRY_AGAIN, "{e}");
        assert!(e.msg.contains("eni/ns/a"), "{e}");
        let t = std::thread::spawn({
            let dir = dir.clone();
            move || lock(&dir, "eni/ns/a", Duration::from_secs(10)).map(drop)
        });
        std::thread::sleep(Duration::from_millis(30));
        drop(a);
        t.join().unwrap().unwrap();
        assert!(try_lock(&dir, "eni/ns/a").unwrap().is_some());
        // A fixed set of files, whatever the number of owners.
        for i in 0..3 * BUCKETS {
            drop(try_lock(&dir, &format!("eni/ns/p{i}")).unwrap());
        }
        let files = std::fs::read_dir(&dir).unwrap().count();
        let most = (BUCKETS + LEGACY_BUCKETS) as usize;
        assert!(
            files <= most && files > BUCKETS as usize / 2,
            "{files} lock files"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// An older plugin's exclusive `owner.M`, as it takes it.
    fn old_plugin_holds(dir: &Path, owner: &str) -> Option<Flock<File>> {
        let (_, f) = open(dir, legacy_path_of(dir, owner)).unwrap();
        Flock::lock(f, FlockArg::LockExclusiveNonblock).ok()
    }

    #[test]
    fn an_older_plugin_and_this_one_exclude_each_other_and_new_ones_share_the_old_files() {
        let dir =
            std::env::temp_dir().join(format!("eniip-cni-lock-legacy-{}", std::process::id()));
        // An old invocation for the owner runs: a new one waits for it.
        let old = old_plugin_holds(&dir, "eni/ns/a").unwrap();
        assert!(try_lock(&dir, "eni/ns/a").unwrap().is_none());
        drop(old);
        // A new invocation runs: an old one for the owner cannot start.
        let new = try_lock(&dir, "eni/ns/a").unwrap().unwrap();
        assert!(old_plugin_holds(&dir, "eni/ns/a").is_none());
        // Two owners of one old file and of two new ones: new invocations
        // for both run at once.
        let other = (0..10_000)
            .map(|i| format!("eni/ns/b{i}"))
            .find(|o| {
                legacy_path_of(&dir, o) == legacy_path_of(&dir, "eni/ns/a")
                    && path_of(&dir, o) != path_of(&dir, "eni/ns/a")
            })
            .unwrap();
        assert!(try_lock(&dir, &other).unwrap().is_some());
        drop(new);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
