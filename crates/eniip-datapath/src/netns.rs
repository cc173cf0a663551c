//! Network namespaces without moving the caller: a netlink socket for a
//! namespace is opened (or a sysctl of it written) on a short-lived, named
//! thread that `setns`es into it; the socket stays bound to that namespace
//! after the thread ends, so the main thread never changes namespace.
//! And the container's namespace checked before anything is asked or
//! built ([`open_container`]).

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::path::Path;
use std::time::Duration;

use nix::sched::{setns, CloneFlags};

use super::netlink::Netlink;
use super::spec::{code, CniError, Env};

/// How long the work of a namespace thread may take.
const OPEN_TIMEOUT: Duration = Duration::from_secs(5);

/// Opens a namespace file (`/run/netns/x`, `/proc/PID/ns/net`). `Ok(None)`
/// when it does not exist.
pub(crate) fn open(path: &Path) -> io::Result<Option<File>> {
    match File::open(path) {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The container's netns (`CNI_NETNS`), open, checked to be a network
/// namespace other than the plugin's own (a pod interface made in the
/// node's namespace would take over its default route). `Ok(None)`:
/// nothing is there. A bad one is CNI error 4.
pub(crate) fn open_container(env: &Env) -> Result<Option<File>, CniError> {
    let Some(path) = &env.netns else {
        return Ok(None);
    };
    let bad = |what: String| CniError::new(code::INVALID_ENV, what);
    let f = match open(path) {
        Ok(Some(f)) => f,
        Ok(None) => return Ok(None),
        Err(e) => {
            return Err(
                bad(format!("cannot open CNI_NETNS {}", path.display())).details(e.to_string())
            )
        }
    };
    let id = crate::util::netns_identity::identity_of(&f, path)
        .map_err(|e| bad(format!("CNI_NETNS {}: {e}", path.display())))?;
    let own = crate::util::netns_identity::own()
        .map_err(|e| CniError::new(code::IO, format!("cannot read the plugin's own netns: {e}")))?;
    if id == own {
        return Err(bad(format!(
            "CNI_NETNS {} is the namespace eniip-cni runs in, not a container's",
            path.display()
        )));
    }
    Ok(Some(f))
}

/// Runs `f` on a short-lived thread inside the namespace `ns` and returns
/// what it returns (a socket it opens stays in that namespace; a
/// `/proc/sys/net` path it opens is that namespace's).
pub(crate) fn run_in<T: Send + 'static>(
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
pub(crate) fn netlink_in(ns: &File) -> io::Result<Netlink> {
    run_in(ns, Netlink::open)
}
