//! What the pool keeps of each managed ENI ([`PoolEni`], its [`EniPhase`])
//! and of each address ([`PoolIp`], its [`IpState`]): plain records, with
//! no index over them.
//!
//! The rules that tie them together (every address on a known ENI, an
//! owner holding at most one address, a prefix's addresses marked as its
//! members, the owner indexes agreeing with the states) are
//! [`super::PoolState`]'s to keep and check; nothing here changes a
//! record behind its back.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::cloud::Ipv4Prefix;
use crate::core::{Owner, SandboxId};

/// Where an ENI is in its life, once it exists locally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EniPhase {
    /// Attached and serving.
    Ready,
    /// Being detached and deleted: none of its addresses is handed out.
    Freeing,
}

/// A managed ENI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PoolEni {
    /// `eni-...`
    pub(crate) id: String,
    /// Its MAC.
    pub(crate) mac: String,
    /// Its vswitch.
    pub(crate) vswitch: String,
    /// The vswitch CIDR (from metadata).
    pub(crate) cidr: String,
    /// The vswitch gateway (from metadata).
    pub(crate) gateway: Ipv4Addr,
    /// Its primary IPv4: handed out last, never unassigned.
    pub(crate) primary_ip: Ipv4Addr,
    /// Ready or freeing.
    pub(crate) phase: EniPhase,
    /// Addresses asked of the cloud for it and not yet answered.
    pub(crate) pending: usize,
    /// The cloud said it holds all it can (per-ENI limit): no more asks
    /// until the next reconcile.
    pub(crate) at_limit: bool,
    /// The cloud no longer has it (deleted behind eniipd's back): it holds
    /// no slot and only the addresses owners still hold, never handed out
    /// again; it is forgotten once they are released.
    pub(crate) gone: bool,
    /// Its IPv4 /28 prefixes (prefix mode): every address of each is a
    /// pool IP, and they go back to the cloud only as whole prefixes.
    pub(crate) prefixes: BTreeSet<Ipv4Prefix>,
    /// Of `pending`, the addresses asked as parts of /28s.
    pub(crate) pending_in_prefixes: usize,
}

impl PoolEni {
    /// A ready ENI with nothing pending.
    pub(crate) fn ready(
        id: &str,
        mac: &str,
        vswitch: &str,
        cidr: &str,
        gateway: Ipv4Addr,
        primary_ip: Ipv4Addr,
    ) -> PoolEni {
        PoolEni {
            id: id.to_string(),
            mac: mac.to_string(),
            vswitch: vswitch.to_string(),
            cidr: cidr.to_string(),
            gateway,
            primary_ip,
            phase: EniPhase::Ready,
            pending: 0,
            at_limit: false,
            gone: false,
            prefixes: BTreeSet::new(),
            pending_in_prefixes: 0,
        }
    }
}

/// The state of one address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum IpState {
    /// Free.
    Idle,
    /// Held by an owner.
    InUse {
        /// The holder.
        owner: Owner,
        /// Its sandbox, if it gave one.
        sandbox: Option<SandboxId>,
        /// When it was handed out (Unix ms).
        since_ms: u64,
    },
    /// Kept for its last owner.
    Reserved {
        /// The last owner.
        owner: Owner,
        /// End of the reservation (Unix ms).
        until_ms: u64,
        /// End of the cool-down that follows (Unix ms; may be earlier).
        cool_until_ms: u64,
    },
    /// Kept from owners other than the last one.
    Cooling {
        /// The last owner.
        owner: Owner,
        /// End of the cool-down (Unix ms).
        until_ms: u64,
    },
    /// Owner unknown after a state rebuild: out of circulation until then.
    Quarantined {
        /// End of the quarantine (Unix ms).
        until_ms: u64,
    },
    /// Never handed out.
    Invalid {
        /// Why.
        reason: String,
    },
}

impl IpState {
    /// The protocol name of the state.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            IpState::Idle => "idle",
            IpState::InUse { .. } => "inuse",
            IpState::Reserved { .. } | IpState::Quarantined { .. } => "reserved",
            IpState::Cooling { .. } => "cooling",
            IpState::Invalid { .. } => "invalid",
        }
    }
}

/// One pool address (an IPv4, with its IPv6 pair in dual stack).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PoolIp {
    /// The IPv4 address (the key).
    pub(crate) v4: Ipv4Addr,
    /// The paired IPv6 address (dual stack).
    pub(crate) v6: Option<Ipv6Addr>,
    /// The ENI it is on.
    pub(crate) eni: String,
    /// True for the ENI's primary IPv4.
    pub(crate) primary: bool,
    /// Who holds it.
    pub(crate) state: IpState,
    /// An unassign is in flight: not handed out.
    pub(crate) releasing: bool,
    /// The cloud no longer has it although an owner holds it: never handed
    /// out again; dropped from the pool when released.
    pub(crate) lost: bool,
    /// The /28 of its ENI it belongs to (prefix mode): never unassigned on
    /// its own, only with its whole prefix.
    pub(crate) prefix: Option<Ipv4Prefix>,
}
