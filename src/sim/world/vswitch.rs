//! A vswitch and its address book: the offsets of its blocks that are
//! taken, and how many addresses the cloud says are free.
//!
//! Invariants: `free` starts at no more than the usable addresses of the
//! block; an address is taken only while `free` and the untaken offsets
//! both allow, and its offset is then in `used` until it is given back,
//! which frees it once. The admin knob may set `free` to anything, as the
//! real count moves with other tenants. Randomness comes in as a seed
//! drawn from the world's generator, so a seeded world takes the same
//! addresses every run.

use std::collections::HashSet;
use std::net::{Ipv4Addr, Ipv6Addr};

use super::params::{err, ApiError};
use crate::sim::net::{Net4, Net6};
use crate::util::rand::Rng;

/// A vswitch.
#[derive(Debug)]
pub(crate) struct Vsw {
    /// `vsw-...`
    pub(crate) id: String,
    /// Its zone.
    pub(crate) zone: String,
    /// IPv4 block.
    pub(crate) cidr: Net4,
    /// IPv6 block, if enabled.
    pub(crate) cidr6: Option<Net6>,
    /// AvailableIpAddressCount.
    pub(crate) free: u64,
    /// Offsets in `cidr` taken (by an ENI, or reserved by a prefix).
    pub(super) used: HashSet<u64>,
    /// Host parts in `cidr6` taken.
    pub(super) used6: HashSet<u128>,
    /// How many more /28 prefixes may be carved (`None`: as many as aligned
    /// free blocks allow); the admin knob that makes fragmentation visible.
    pub(super) prefix_cap: Option<u64>,
}

impl Vsw {
    /// A vswitch with nothing taken; `free` defaults to, and is capped at,
    /// the usable addresses of `cidr`.
    pub(super) fn new(
        id: &str,
        zone: &str,
        cidr: Net4,
        cidr6: Option<Net6>,
        free: Option<u64>,
    ) -> Vsw {
        let usable = cidr.usable().end - cidr.usable().start;
        Vsw {
            id: id.to_string(),
            zone: zone.to_string(),
            cidr,
            cidr6,
            free: free.unwrap_or(usable).min(usable),
            used: HashSet::new(),
            used6: HashSet::new(),
            prefix_cap: None,
        }
    }

    /// Takes `n` addresses at random (from `seed`), or none if fewer are
    /// free.
    pub(super) fn take_v4(&mut self, seed: u64, n: usize) -> Result<Vec<Ipv4Addr>, ApiError> {
        let usable = self.cidr.usable();
        let room = (usable.end - usable.start).saturating_sub(self.used.len() as u64);
        if self.free < n as u64 || room < n as u64 {
            return Err(err(
                403,
                "InvalidVSwitchId.IpNotEnough",
                format!(
                    "The specified VSwitch \"{}\" has not enough IpAddress.",
                    self.id
                ),
            ));
        }
        let span = usable.end - usable.start;
        let mut r = Rng::seeded(seed);
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let mut off = usable.start + r.below(span);
            while self.used.contains(&off) {
                off = usable.start + (off - usable.start + 1) % span;
            }
            self.used.insert(off);
            out.push(self.cidr.at(off));
        }
        self.free -= n as u64;
        Ok(out)
    }

    /// Gives addresses back (those not taken are ignored).
    pub(super) fn give_v4(&mut self, ips: &[Ipv4Addr]) {
        for ip in ips {
            let off = u64::from(u32::from(*ip).wrapping_sub(self.cidr.base));
            if self.used.remove(&off) {
                self.free += 1;
            }
        }
    }

    /// Takes `n` IPv6 addresses at random (from `seed`); refused when the
    /// vswitch has no IPv6 block.
    pub(super) fn take_v6(&mut self, seed: u64, n: usize) -> Result<Vec<Ipv6Addr>, ApiError> {
        let Some(net) = self.cidr6 else {
            return Err(err(
                403,
                "InvalidVSwitch.Ipv6NotTurnOn",
                format!("The VSwitch \"{}\" does not have IPv6 enabled.", self.id),
            ));
        };
        let mut r = Rng::seeded(seed);
        let mut out = Vec::new();
        while out.len() < n {
            let host = u128::from(r.next_u64() >> 16) + 16;
            if self.used6.insert(host) {
                out.push(net.at(host));
            }
        }
        Ok(out)
    }

    /// Gives IPv6 addresses back.
    pub(super) fn give_v6(&mut self, ips: &[Ipv6Addr]) {
        if let Some(net) = self.cidr6 {
            for ip in ips {
                let host = u128::from(*ip) & !(u128::MAX << (128 - net.prefix));
                self.used6.remove(&host);
            }
        }
    }
}
