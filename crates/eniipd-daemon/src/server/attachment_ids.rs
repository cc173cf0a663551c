//! The identities of an `alloc`'s attachment (`netns=`, `veth=`), found
//! by the server, never taken from the client: the sandbox's namespace as
//! it is now, and the namespace of the process that asked (where eniip-cni
//! built the host end), with the boot they were taken in and when.

use std::path::Path;

use log::warn;

use eniip_protocol::core::{Attachment, NsId};
use eniip_util::netns_identity;
use eniip_util::peercred::Peer;

/// `a` with its identities, or `None` (and a warning) when the sandbox's
/// namespace cannot be read: such an allocation is kept as if no
/// attachment had been named, so the reaper never touches it.
pub(super) fn resolve(mut a: Attachment, peer: Option<&Peer>) -> Option<Attachment> {
    match netns_identity::identity(Path::new(&a.netns)) {
        Ok((dev, ino)) => a.netns_id = NsId { dev, ino },
        Err(e) => {
            warn!(
                "alloc netns={}: {e}; the allocation is kept without it (the sandbox reaper will not look at it)",
                a.netns
            );
            return None;
        }
    }
    // The asker's namespace; unknown (zero) is taken as eniipd's own.
    a.host_id = peer
        .filter(|p| p.pid > 0)
        .and_then(|p| netns_identity::identity(Path::new(&format!("/proc/{}/ns/net", p.pid))).ok())
        .map(|(dev, ino)| NsId { dev, ino })
        .unwrap_or_default();
    a.boot = netns_identity::this_boot().map(str::to_string);
    a.noted_ns = eniip_util::time::unix_ns();
    Some(a)
}
