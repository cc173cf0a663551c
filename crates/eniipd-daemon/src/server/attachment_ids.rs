//! The identities of an `alloc`'s attachment (`netns=`, `veth=`), found
//! by the server, never taken from the client: the sandbox's namespace as
//! it is now, and the namespace of the process that asked (where eniip-cni
//! built the host end).

use std::path::Path;

use eniip_protocol::core::{AllocError, Attachment, NsId};
use eniip_util::netns_identity;
use eniip_util::peercred::Peer;

/// `a` with its identities. A `netns=` that is not a network namespace
/// (nothing, a FIFO, a device, a link, a file) is refused at once, naming
/// the key: it is never opened for real ([`netns_identity::named`]).
pub(super) fn resolve(mut a: Attachment, peer: Option<&Peer>) -> Result<Attachment, AllocError> {
    match netns_identity::named(Path::new(&a.netns)) {
        Ok((dev, ino)) => a.netns_id = NsId { dev, ino },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(AllocError::bad(format!(
                "netns={}: no such network namespace as eniipd sees it (it must see the runtimes' netns directory: eniipd(8))",
                a.netns
            )))
        }
        Err(e) => return Err(AllocError::bad(format!("netns=: {e}"))),
    }
    // The asker's namespace; unknown (zero) is taken as eniipd's own.
    a.host_id = peer
        .filter(|p| p.pid > 0)
        .and_then(|p| netns_identity::named(Path::new(&format!("/proc/{}/ns/net", p.pid))).ok())
        .map(|(dev, ino)| NsId { dev, ino })
        .unwrap_or_default();
    Ok(a)
}
