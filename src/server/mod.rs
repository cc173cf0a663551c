//! The daemon's client surface: the pure line protocol ([`protocol`]) and the
//! Unix-socket listener that serves it.
//!
//! The listener does framing, limits, peer credentials and access checks;
//! everything else is asked of a [`Backend`], which the daemon implements on
//! top of the allocator (and tests implement with fakes).

pub mod listener;
pub mod peer;
pub mod protocol;
pub mod socket;

use std::net::IpAddr;

use protocol::{Allocation, EniEntry, ListEntry, Owner, ProtoError, SandboxId, StatusCounts};

/// What the listener needs from the rest of the daemon. Every method returns
/// within its own deadline (`alloc` within `alloc_timeout`).
pub trait Backend: Send + Sync {
    /// Allocate (idempotent per owner); `OK` means durable.
    fn alloc(
        &self,
        owner: &Owner,
        sandbox: Option<&SandboxId>,
        prefer: Option<IpAddr>,
    ) -> Result<Allocation, ProtoError>;
    /// Release; `Ok(None)` is `released=none`. `OK` means durable.
    fn release(
        &self,
        owner: &Owner,
        sandbox: Option<&SandboxId>,
    ) -> Result<Option<IpAddr>, ProtoError>;
    /// The owner's allocation, or `not-found`.
    fn show(&self, owner: &Owner) -> Result<Allocation, ProtoError>;
    /// Every pool IP.
    fn list(&self) -> Result<Vec<ListEntry>, ProtoError>;
    /// Pool counters.
    fn status(&self) -> Result<StatusCounts, ProtoError>;
    /// Managed ENIs.
    fn enis(&self) -> Result<Vec<EniEntry>, ProtoError>;
    /// Differences between local state and the cloud (empty: consistent).
    fn audit(&self) -> Result<Vec<String>, ProtoError>;
    /// The metrics exposition text.
    fn metrics(&self) -> String;
    /// The effective configuration, secrets masked.
    fn config(&self) -> Vec<(String, String)>;
}
