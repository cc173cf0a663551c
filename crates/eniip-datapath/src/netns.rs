//! Network namespaces without moving the caller: a netlink socket for a
//! namespace is opened (or a sysctl of it written) on a short-lived, named
//! thread that `setns`es into it; the socket stays bound to that namespace
//! after the thread ends, so the main thread never changes namespace.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::path::Path;
use std::time::Duration;

use nix::sched::{setns, CloneFlags};

use crate::netlink::Netlink;

/// How long the work of a namespace thread may take.
const OPEN_TIMEOUT: Duration = Duration::from_secs(5);

/// Opens a namespace file (`/run/netns/x`, `/proc/PID/ns/net`). `Ok(None)`
/// when it does not exist.
pub fn open(path: &Path) -> io::Result<Option<File>> {
    match File::open(path) {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Runs `f` on a short-lived thread inside the namespace `ns` and returns
/// what it returns (a socket it opens stays in that namespace; a
/// `/proc/sys/net` path it opens is that namespace's).
pub fn run_in<T: Send + 'static>(
    ns: &File,
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    let ns = ns.try_clone()?;
    let (tx, rx) = crossbeam_channel::bounded(1);
    let handle = std::thread::Builder::new()
        .name("cni-netns".into())
        .spawn(move || {
            let r = setns(ns.as_fd(), CloneFlags::CLONE_NEWNET)
                .map_err(|e| io::Error::other(format!("setns: {e}")))
                .and_then(|()| f());
            let _ = tx.send(r);
        })?;
    let r = rx
        .recv_timeout(OPEN_TIMEOUT)
        .map_err(|_| io::Error::other("no answer from the namespace thread in time"))?;
    let _ = handle.join();
    r
}

/// A netlink socket inside the namespace `ns`.
pub fn netlink_in(ns: &File) -> io::Result<Netlink> {
    run_in(ns, Netlink::open)
}

/// Held by every test that makes netlink requests, and by the one that
/// counts them: the netlink stopwatch sums the whole process's requests
/// (eniip-cni runs one command per process), and a test binary runs
/// its tests side by side.
#[cfg(test)]
pub(crate) fn netlink_tests_serially() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// `link`'s IPv6 `addr_gen_mode` in the calling thread's namespace (`1`:
/// none, no link-local address); none on a kernel without IPv6.
#[cfg(test)]
pub(crate) fn addr_gen_mode(link: &str) -> io::Result<Option<String>> {
    match std::fs::read_to_string(format!("/proc/sys/net/ipv6/conf/{link}/addr_gen_mode")) {
        Ok(mode) => Ok(Some(mode.trim().to_string())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Runs the test `body` on a thread in a network namespace of its own
/// (one such test at a time, see [`netlink_tests_serially`]); without
/// the right to make one (EPERM) the test `name` is skipped, loudly
/// ([`eniip_util::testing::skip`]).
#[cfg(test)]
pub(crate) fn in_own_netns(name: &str, body: impl FnOnce() -> io::Result<()> + Send + 'static) {
    let _serial = netlink_tests_serially();
    let r = std::thread::Builder::new()
        .name("own-netns".into())
        .spawn(move || {
            nix::sched::unshare(CloneFlags::CLONE_NEWNET)?;
            body()
        })
        .expect("a thread")
        .join()
        .expect("the test's thread");
    match r {
        Err(e) if e.raw_os_error() == Some(nix::libc::EPERM) => {
            eniip_util::testing::skip(&format!("{name}: needs a network namespace ({e})"));
        }
        r => r.unwrap(),
    }
}
