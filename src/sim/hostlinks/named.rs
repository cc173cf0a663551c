//! Named network namespaces, as `ip netns add` and `ip netns del` make
//! and remove them (`/run/netns/NAME`, a bind mount of a namespace file),
//! without the `ip` command: made on a short-lived named thread that
//! unshares its network namespace, so the caller never changes namespace.
//!
//! Invariant: a [`Named`] was created here and is removed (unmounted and
//! unlinked) at [`Named::delete`] or on drop; one found already there is
//! refused, never taken over.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{unshare, CloneFlags};

/// Where named namespaces live (as iproute2 keeps them).
pub const NETNS_DIR: &str = "/run/netns";

/// A network namespace this process created under [`NETNS_DIR`].
#[derive(Debug)]
pub struct Named {
    name: String,
    path: PathBuf,
    deleted: bool,
}

impl Named {
    /// Creates `/run/netns/NAME` holding a new, empty network namespace
    /// (its `lo` down, as `ip netns add` leaves it).
    pub fn create(name: &str) -> io::Result<Named> {
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{name:?} is not a namespace name"),
            ));
        }
        let dir = Path::new(NETNS_DIR);
        std::fs::create_dir_all(dir)?;
        make_shared(dir)?;
        let path = dir.join(name);
        // O_EXCL: a namespace of that name (someone else's, or a stale one)
        // is not ours to take over.
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "{}: {e} (delete it with `ip netns del {name}`)",
                        path.display()
                    ),
                )
            })?;
        let named = Named {
            name: name.to_string(),
            path: path.clone(),
            deleted: false,
        };
        let target = path.clone();
        let (tx, rx) = crossbeam_channel::bounded(1);
        let handle = std::thread::Builder::new()
            .name("eniip-netns-add".into())
            .spawn(move || {
                let r = unshare(CloneFlags::CLONE_NEWNET)
                    .map_err(|e| io::Error::other(format!("unshare(CLONE_NEWNET): {e}")))
                    .and_then(|()| {
                        mount(
                            Some("/proc/thread-self/ns/net"),
                            &target,
                            None::<&str>,
                            MsFlags::MS_BIND,
                            None::<&str>,
                        )
                        .map_err(|e| io::Error::other(format!("bind mount: {e}")))
                    });
                let _ = tx.send(r);
            })?;
        let r = rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .map_err(|_| io::Error::other("no answer from the namespace thread in time"))
            .and_then(|r| r);
        let _ = handle.join();
        // On failure `named` drops: the file goes (an unmount of a path
        // that is not a mount point is refused and ignored).
        r.map(|()| named)
    }

    /// Its name (`ip netns exec NAME ...`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `/run/netns/NAME`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens it (for `setns` and `IFLA_NET_NS_FD`).
    pub fn open(&self) -> io::Result<File> {
        File::open(&self.path)
    }

    /// Unmounts and removes it. The namespace itself ends once nothing
    /// (a socket, a process, an open file) holds it any more; its links go
    /// with it.
    pub fn delete(&mut self) -> io::Result<()> {
        if self.deleted {
            return Ok(());
        }
        self.deleted = true;
        remove(&self.path)
    }
}

impl Drop for Named {
    fn drop(&mut self) {
        if let Err(e) = self.delete() {
            log::warn!("cannot remove network namespace {}: {e}", self.name);
        }
    }
}

/// Unmounts and unlinks a namespace file (what `ip netns del` does);
/// gone already is fine.
pub fn remove(path: &Path) -> io::Result<()> {
    match umount2(path, MntFlags::MNT_DETACH) {
        Ok(()) | Err(nix::errno::Errno::EINVAL) | Err(nix::errno::Errno::ENOENT) => {}
        Err(e) => return Err(io::Error::other(format!("umount {}: {e}", path.display()))),
    }
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Makes `dir` a shared mount point, as iproute2 does, so a namespace
/// mounted there is seen from every mount namespace (`ip netns exec`
/// makes one per command).
fn make_shared(dir: &Path) -> io::Result<()> {
    let shared = || {
        mount(
            None::<&str>,
            dir,
            None::<&str>,
            MsFlags::MS_SHARED | MsFlags::MS_REC,
            None::<&str>,
        )
    };
    match shared() {
        Ok(()) => Ok(()),
        // Not a mount point yet: bind it onto itself first.
        Err(nix::errno::Errno::EINVAL) => mount(
            Some(dir),
            dir,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None::<&str>,
        )
        .and_then(|()| shared())
        .map_err(|e| io::Error::other(format!("make {} shared: {e}", dir.display()))),
        Err(e) => Err(io::Error::other(format!(
            "make {} shared: {e}",
            dir.display()
        ))),
    }
}
