//! The [`Backend`] the socket server calls: the allocator plus the bits
//! only the daemon knows (configuration, connection count).

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use crate::alloc::Allocator;
use crate::config::Config;
use crate::pool::IpState;
use crate::server::protocol::{
    Allocation, EniEntry, GcEntry, ListEntry, Owner, ProtoError, SandboxId, StatusCounts,
};
use crate::server::Backend;

/// The daemon's backend.
pub struct DaemonBackend {
    alloc: Arc<Allocator>,
    config: Vec<(String, String)>,
    connections: OnceLock<Box<dyn Fn() -> usize + Send + Sync>>,
}

impl DaemonBackend {
    /// A backend over a running allocator.
    pub fn new(alloc: Arc<Allocator>, cfg: &Config) -> DaemonBackend {
        DaemonBackend {
            alloc,
            config: cfg.effective(),
            connections: OnceLock::new(),
        }
    }

    /// Tells the backend how to count open connections (for metrics).
    pub fn set_connection_counter(&self, f: Box<dyn Fn() -> usize + Send + Sync>) {
        let _ = self.connections.set(f);
    }

    /// The metrics exposition text.
    pub fn metrics_text(&self) -> String {
        let mut g = match self.alloc.snapshot() {
            Ok(s) => s.gauges(),
            Err(_) => crate::metrics::Gauges::default(),
        };
        g.connections = self.connections.get().map(|f| f() as u64).unwrap_or(0);
        crate::metrics::render(&g)
    }
}

impl Backend for DaemonBackend {
    fn alloc(
        &self,
        owner: &Owner,
        sandbox: Option<&SandboxId>,
        prefer: Option<IpAddr>,
    ) -> Result<Allocation, ProtoError> {
        self.alloc.alloc(owner, sandbox, prefer)
    }

    fn release(
        &self,
        owner: &Owner,
        sandbox: Option<&SandboxId>,
    ) -> Result<Option<IpAddr>, ProtoError> {
        self.alloc.release(owner, sandbox)
    }

    fn show(&self, owner: &Owner) -> Result<Allocation, ProtoError> {
        self.alloc.show(owner)
    }

    fn list(&self) -> Result<Vec<ListEntry>, ProtoError> {
        self.alloc.list()
    }

    fn status(&self) -> Result<StatusCounts, ProtoError> {
        self.alloc.status()
    }

    fn enis(&self) -> Result<Vec<EniEntry>, ProtoError> {
        self.alloc.enis()
    }

    fn audit(&self) -> Result<Vec<String>, ProtoError> {
        self.alloc.audit()
    }

    fn metrics(&self) -> String {
        self.metrics_text()
    }

    fn config(&self) -> Vec<(String, String)> {
        self.config.clone()
    }

    /// A snapshot picks the candidates; each is then released through the
    /// ordinary `release` path with its sandbox, so it is durable, counts
    /// as a release by its owner, and an allocation that moved to a new
    /// sandbox since the snapshot is left alone.
    fn gc(&self, owner_prefix: &str, keep: &HashSet<String>) -> Result<Vec<GcEntry>, ProtoError> {
        let snap = self.alloc.snapshot()?;
        let doomed: Vec<(Owner, Option<SandboxId>)> = snap
            .pool
            .ips
            .values()
            .filter_map(|ip| match &ip.state {
                IpState::InUse { owner, sandbox, .. }
                    if owner.as_str().starts_with(owner_prefix)
                        && !keep.contains(owner.as_str())
                        && !sandbox.as_ref().is_some_and(|s| keep.contains(s.as_str())) =>
                {
                    Some((owner.clone(), sandbox.clone()))
                }
                _ => None,
            })
            .collect();
        let mut released = Vec::new();
        for (owner, sandbox) in doomed {
            if let Some(ip) = self.alloc.release(&owner, sandbox.as_ref())? {
                released.push(GcEntry { ip, owner, sandbox });
            }
        }
        Ok(released)
    }
}
