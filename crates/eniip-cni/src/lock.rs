//! One invocation at a time per owner on a node. ADD, DEL and CHECK hold
//! the lock of their owner from before they ask eniipd anything until they
//! are done, so two ADDs for one container (a retry storm), or an ADD and
//! a DEL of one pod, never interleave: without it, one ADD's rollback
//! released the address the other had just handed to its pod.
//!
//! The locks are `flock`s on a fixed set of files, `DIR/owner.N` with N a
//! hash of the owner in `0..BUCKETS`: two owners may share one (they then
//! wait for each other: a whole ADD, hundreds of milliseconds when a
//! storm of pods starts at once on a small node, so there are enough for
//! two pods of a storm to share one seldom), and the directory never
//! grows past that. The files are never removed (removing a lock file others may
//! wait on is a race); `/run` empties them at boot.

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
/// How often a waiting invocation tries the lock again.
const POLL: Duration = Duration::from_millis(5);

/// A held lock, released when dropped.
#[derive(Debug)]
pub(crate) struct OwnerLock {
    _held: Flock<File>,
}

/// The lock file of `owner` in `dir` (also for tests that hold an
/// owner's lock as a concurrent invocation would).
pub fn path_of(dir: &Path, owner: &str) -> PathBuf {
    let h = Sha1::digest(owner.as_bytes());
    let n = u32::from_be_bytes([h[0], h[1], h[2], h[3]]) % BUCKETS;
    dir.join(format!("owner.{n}"))
}

fn io_error(path: &Path, e: impl std::fmt::Display) -> CniError {
    CniError::new(code::IO, format!("cannot take the lock {}", path.display()))
        .details(e.to_string())
}

fn open(dir: &Path, owner: &str) -> Result<(PathBuf, File), CniError> {
    let path = path_of(dir, owner);
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
    let (path, mut f) = open(dir, owner)?;
    let end = Instant::now() + wait;
    loop {
        match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
            Ok(held) => return Ok(OwnerLock { _held: held }),
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
    let (path, f) = open(dir, owner)?;
    match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
        Ok(held) => Ok(Some(OwnerLock { _held: held })),
        Err((_, Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(io_error(&path, e)),
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
        assert!(
            files <= BUCKETS as usize && files > BUCKETS as usize / 2,
            "{files} lock files"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
