//! The identities of an `alloc`'s attachment (`netns=`, `veth=`), found
//! by the server, never taken from the client: the sandbox's namespace as
//! it is now, and the namespace of the process that asked (where eniip-cni
//! built the host end), with the boot they were taken in and when.

use std::path::Path;

use log::warn;

use eniip_protocol::core::{AllocError, Attachment, NsId};
use eniip_util::netns_identity;
use eniip_util::peercred::Peer;

/// `a` with its identities; the path is never opened for real
/// ([`netns_identity::named`]). What a runtime's namespace looks like to
/// an eniipd that cannot see its mount (nothing there, or the empty file
/// the mount is made on: a mount namespace that missed it) is `Ok(None)`
/// with a warning: the allocation is made without the attachment, and the
/// reaper never looks at it. Anything else that is no network namespace
/// (a FIFO, a device, a socket, a directory, a link) is refused at once,
/// naming the key.
pub(super) fn resolve(
    mut a: Attachment,
    peer: Option<&Peer>,
) -> Result<Option<Attachment>, AllocError> {
    let path = Path::new(&a.netns);
    match netns_identity::named(path) {
        Ok((dev, ino)) => a.netns_id = NsId { dev, ino },
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                || std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file()) =>
        {
            warn!(
                "alloc netns={}: {e}; the allocation is made without it (the sandbox reaper will not look at it; eniipd must see the runtimes' netns mounts: eniipd(8))",
                a.netns
            );
            return Ok(None);
        }
        Err(e) => return Err(AllocError::bad(format!("netns=: {e}"))),
    }
    // The asker's namespace; unknown (zero) is taken as eniipd's own.
    a.host_id = peer
        .filter(|p| p.pid > 0)
        .and_then(|p| netns_identity::named(Path::new(&format!("/proc/{}/ns/net", p.pid))).ok())
        .map(|(dev, ino)| NsId { dev, ino })
        .unwrap_or_default();
    a.boot = netns_identity::this_boot().map(str::to_string);
    a.noted_ns = eniip_util::time::unix_ns();
    Ok(Some(a))
}
