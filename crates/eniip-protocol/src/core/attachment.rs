//! Where a sandbox's network lives ([`Attachment`]): what eniip-cni tells
//! eniipd at ADD (`alloc ... netns=PATH veth=NAME`) and what eniipd found
//! there, so that the sandbox reaper can tell a sandbox that is gone from a
//! live one without any runtime's help.

use serde::{Deserialize, Serialize};

use super::AllocError;

/// Prefix of the host end of every pod veth eniip-cni makes.
pub(crate) const HOST_VETH_PREFIX: &str = "enip";

/// Longest `netns=` path accepted.
const MAX_NETNS_PATH: usize = 1024;

/// A namespace's identity: the device and inode of its nsfs file. A path
/// reused by another namespace has another identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct NsId {
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
}

/// One allocation's sandbox network, recorded with the allocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    /// The sandbox's network namespace (`CNI_NETNS`).
    pub netns: String,
    /// What `netns` was when the allocation was made (filled in by the
    /// server, never taken from the client).
    #[serde(default)]
    pub netns_id: NsId,
    /// The host end of the pod's veth (`enip` + 11 hex digits).
    pub veth: String,
    /// The network namespace the plugin built the host side in: the
    /// namespace of the process that asked (filled in by the server).
    #[serde(default)]
    pub host_id: NsId,
    /// The boot of the node the identities were taken in
    /// (`/proc/sys/kernel/random/boot_id`; filled in by the server): nsfs
    /// inodes are handed out again after a reboot, so an identity of
    /// another boot never names a namespace of this one. `None` in
    /// records older than it, and when the kernel does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot: Option<String>,
    /// When the server recorded it (Unix ns): a new ADD makes a new
    /// attachment even when its namespace has the identity of the old
    /// one (a freed nsfs inode is handed out again at once), so "still
    /// the attachment the reaper looked at" is an exact question.
    #[serde(default)]
    pub noted_ns: u64,
}

impl Attachment {
    /// Whether its identities were taken in another boot of the node than
    /// `this_boot` (unknown either side: not known to be).
    pub fn of_another_boot(&self, this_boot: Option<&str>) -> bool {
        matches!((self.boot.as_deref(), this_boot), (Some(b), Some(t)) if b != t)
    }
}

impl Attachment {
    /// Validates `netns=` and `veth=` as a client sends them; the
    /// identities are the server's to fill in.
    pub fn parse(netns: &str, veth: &str) -> Result<Attachment, AllocError> {
        if !netns.starts_with('/')
            || netns.len() > MAX_NETNS_PATH
            || netns.split('/').any(|c| c == "..")
            || netns.chars().any(char::is_control)
        {
            return Err(AllocError::bad(format!(
                "netns= must be an absolute path of at most {MAX_NETNS_PATH} bytes, without ..",
            )));
        }
        if !valid_veth(veth) {
            return Err(AllocError::bad(format!(
                "veth= must be {HOST_VETH_PREFIX} and 11 lowercase hex digits (eniip-cni's host end)",
            )));
        }
        Ok(Attachment {
            netns: netns.to_string(),
            netns_id: NsId::default(),
            veth: veth.to_string(),
            host_id: NsId::default(),
            boot: None,
            noted_ns: 0,
        })
    }
}

/// A host end eniip-cni could have made.
pub(crate) fn valid_veth(name: &str) -> bool {
    name.strip_prefix(HOST_VETH_PREFIX).is_some_and(|h| {
        h.len() == 11
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_client_may_send() {
        let a = Attachment::parse("/var/run/netns/cni-1234", "enip0123456789a").unwrap();
        assert_eq!(a.netns, "/var/run/netns/cni-1234");
        assert_eq!(a.netns_id, NsId::default());
        for (netns, veth) in [
            ("run/netns/x", "enip0123456789a"),
            ("/run/netns/../../etc/passwd", "enip0123456789a"),
            ("/run/netns/x", "eth0"),
            ("/run/netns/x", "enip0123456789"),
            ("/run/netns/x", "enip0123456789A"),
            ("/run/netns/x", "enip0123456789ab"),
        ] {
            assert!(Attachment::parse(netns, veth).is_err(), "{netns} {veth}");
        }
        assert!(Attachment::parse(&format!("/{}", "a".repeat(2000)), "enip0123456789a").is_err());
    }
}
