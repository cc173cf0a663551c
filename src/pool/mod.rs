//! The pool: every address on the managed ENIs and who holds it.
//!
//! States (SPEC section 4): `idle` (free for anyone), `inuse` (held by an
//! owner), `reserved` (kept for its last owner until `ip_stick_time` runs
//! out), `cooling` (kept from other owners until `ip_cooldown` runs out; its
//! last owner may still take it back), `invalid` (never handed out: refused
//! by the cloud, or half of an unpaired dual-stack pair). After a state
//! rebuild, addresses with no known owner are quarantined (listed as
//! `reserved` with owner `-`) until the quarantine ends.
//!
//! This module is pure data and transitions: no I/O, no threads, no clock
//! (callers pass `now_ms`). Invariants, checked by [`PoolState::check`]:
//! an owner holds at most one address and an address has at most one
//! holder; the owner indexes agree with the address states; every address
//! belongs to a known ENI.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::cloud::Ipv4Prefix;
use crate::core::{
    Allocation, Attachment, EniEntry, EniInfo, Hold, ListEntry, Owner, PrefixUse, SandboxId,
    StatusCounts,
};

mod attach;
pub(crate) use attach::Attached;
mod holds;
mod records;
pub(crate) use records::{EniPhase, IpState, PoolEni, PoolIp};
mod shrink;
mod supply;
mod views;
pub(crate) use supply::Gone;

/// What `release` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ReleaseOutcome {
    /// The owner held nothing.
    NotHeld,
    /// Held by another sandbox than the one named: nothing changed.
    SandboxMismatch,
    /// Released; `hold` is what to persist (reservation / cool-down).
    Released {
        /// The address.
        v4: Ipv4Addr,
        /// Its IPv6 pair.
        v6: Option<Ipv6Addr>,
        /// The reservation or cool-down now on it, if any.
        hold: Option<Hold>,
    },
}

/// All managed ENIs and addresses.
#[derive(Debug, Clone, Default)]
pub(crate) struct PoolState {
    /// Managed ENIs by id.
    pub(crate) enis: BTreeMap<String, PoolEni>,
    /// Addresses by IPv4.
    pub(crate) ips: BTreeMap<Ipv4Addr, PoolIp>,
    /// Dual stack: IPv6 addresses with no IPv4 pair (invalid), by ENI.
    pub(crate) unpaired_v6: BTreeMap<Ipv6Addr, String>,
    owners: HashMap<Owner, Ipv4Addr>,
    held_for: HashMap<Owner, Ipv4Addr>,
    /// Sandbox networks by owner (see `attach.rs`).
    attachments: HashMap<Owner, (Option<SandboxId>, Attachment)>,
    dual: bool,
}

impl PoolState {
    /// An empty pool; `dual` when every allocation is an IPv4+IPv6 pair.
    pub(crate) fn new(dual: bool) -> PoolState {
        PoolState {
            dual,
            ..PoolState::default()
        }
    }

    /// Adds an ENI (its addresses are added separately).
    pub(crate) fn add_eni(&mut self, eni: PoolEni) {
        self.enis.insert(eni.id.clone(), eni);
    }

    /// Adds an address as idle (or invalid when dual stack lacks its pair).
    /// An address already known is left as it is.
    pub(crate) fn add_ip(&mut self, eni: &str, v4: Ipv4Addr, v6: Option<Ipv6Addr>) {
        if self.ips.contains_key(&v4) {
            return;
        }
        let primary = self.enis.get(eni).is_some_and(|e| e.primary_ip == v4);
        let state = if self.dual && v6.is_none() {
            IpState::Invalid {
                reason: "no IPv6 pair".into(),
            }
        } else {
            IpState::Idle
        };
        self.ips.insert(
            v4,
            PoolIp {
                v4,
                v6,
                eni: eni.to_string(),
                primary,
                state,
                releasing: false,
                lost: false,
                prefix: None,
            },
        );
    }

    /// Adds a /28 of an ENI and its 16 addresses (idle). Addresses already
    /// known are left as they are, but counted as members.
    pub(crate) fn add_prefix(&mut self, eni: &str, p: Ipv4Prefix) {
        let Some(e) = self.enis.get_mut(eni) else {
            return;
        };
        e.prefixes.insert(p);
        for a in p.addresses() {
            self.add_ip(eni, a, None);
            if let Some(ip) = self.ips.get_mut(&a) {
                if ip.eni == eni {
                    ip.prefix = Some(p);
                }
            }
        }
    }

    /// Forgets a /28 of an ENI (its addresses are removed separately, as
    /// they are for single addresses).
    pub(crate) fn remove_prefix(&mut self, eni: &str, p: Ipv4Prefix) {
        if let Some(e) = self.enis.get_mut(eni) {
            e.prefixes.remove(&p);
        }
        for a in p.addresses() {
            if let Some(ip) = self.ips.get_mut(&a) {
                if ip.eni == eni {
                    ip.prefix = None;
                }
            }
        }
    }

    /// Address slots an ENI uses beside its primary: one per prefix, one
    /// per single secondary address (invalid ones included), and in dual
    /// stack one per unpaired IPv6 (it holds a slot of the IPv6 quota
    /// until it goes back).
    pub(crate) fn slots_used(&self, eni: &str) -> usize {
        let prefixes = self.enis.get(eni).map_or(0, |e| e.prefixes.len());
        let singles = self
            .ips
            .values()
            .filter(|ip| ip.eni == eni && !ip.primary && ip.prefix.is_none())
            .count();
        let unpaired = self.unpaired_v6.values().filter(|e| *e == eni).count();
        prefixes + singles + unpaired
    }

    /// Records an unpaired IPv6 address (dual stack; invalid).
    pub(crate) fn add_unpaired_v6(&mut self, eni: &str, v6: Ipv6Addr) {
        self.unpaired_v6.insert(v6, eni.to_string());
    }

    /// Removes addresses that left the cloud (unassigned or gone). Owners
    /// and holds on them are dropped from the indexes.
    pub(crate) fn remove_ips(&mut self, v4s: &[Ipv4Addr]) {
        for v4 in v4s {
            if let Some(ip) = self.ips.remove(v4) {
                self.unindex(&ip);
            }
        }
    }

    /// ENIs marked gone that no longer hold any address: forgotten.
    pub(crate) fn drop_empty_gone(&mut self) -> Vec<String> {
        let empty: Vec<String> = self
            .enis
            .values()
            .filter(|e| e.gone && self.ips_on(&e.id) == 0)
            .map(|e| e.id.clone())
            .collect();
        for id in &empty {
            self.remove_eni(id);
        }
        empty
    }

    /// Removes an ENI and every address on it.
    pub(crate) fn remove_eni(&mut self, id: &str) -> Option<PoolEni> {
        let on_it: Vec<Ipv4Addr> = self
            .ips
            .values()
            .filter(|ip| ip.eni == id)
            .map(|ip| ip.v4)
            .collect();
        self.remove_ips(&on_it);
        self.unpaired_v6.retain(|_, e| e != id);
        self.enis.remove(id)
    }

    fn unindex(&mut self, ip: &PoolIp) {
        match &ip.state {
            IpState::InUse { owner, .. } if self.owners.get(owner) == Some(&ip.v4) => {
                self.owners.remove(owner);
                self.attachments.remove(owner);
            }
            IpState::Reserved { owner, .. } | IpState::Cooling { owner, .. }
                if self.held_for.get(owner) == Some(&ip.v4) =>
            {
                self.held_for.remove(owner);
            }
            _ => {}
        }
    }

    fn set_state(&mut self, v4: Ipv4Addr, state: IpState) {
        let Some(ip) = self.ips.get(&v4).cloned() else {
            return;
        };
        self.unindex(&ip);
        match &state {
            IpState::InUse { owner, .. } => {
                self.owners.insert(owner.clone(), v4);
                if self.held_for.get(owner) == Some(&v4) {
                    self.held_for.remove(owner);
                }
            }
            IpState::Reserved { owner, .. } | IpState::Cooling { owner, .. } => {
                // An owner keeps at most one held address: the newest wins.
                if let Some(old) = self.held_for.insert(owner.clone(), v4) {
                    if old != v4 {
                        self.end_hold(old);
                    }
                }
            }
            _ => {}
        }
        if let Some(ip) = self.ips.get_mut(&v4) {
            ip.state = state;
        }
    }

    fn end_hold(&mut self, v4: Ipv4Addr) {
        if let Some(ip) = self.ips.get_mut(&v4) {
            if matches!(ip.state, IpState::Reserved { .. } | IpState::Cooling { .. }) {
                ip.state = IpState::Idle;
            }
        }
    }

    /// The address an owner holds.
    pub(crate) fn owner_ip(&self, owner: &Owner) -> Option<&PoolIp> {
        self.owners.get(owner).and_then(|v4| self.ips.get(v4))
    }

    fn allocatable(&self, ip: &PoolIp) -> bool {
        !ip.releasing
            && !ip.lost
            && self
                .enis
                .get(&ip.eni)
                .is_some_and(|e| e.phase == EniPhase::Ready)
    }

    /// Picks an address for `owner` (who holds none): its reservation or
    /// cool-down first, then `prefer` if free, then the best idle address.
    /// Call [`PoolState::settle`] first.
    pub(crate) fn pick(&self, owner: &Owner, prefer: Option<IpAddr>) -> Option<Ipv4Addr> {
        if let Some(v4) = self.held_for.get(owner) {
            if let Some(ip) = self.ips.get(v4) {
                if self.allocatable(ip) {
                    return Some(*v4);
                }
            }
        }
        if let Some(p) = prefer {
            let found = match p {
                IpAddr::V4(v4) => self.ips.get(&v4),
                IpAddr::V6(v6) => self.ips.values().find(|ip| ip.v6 == Some(v6)),
            };
            if let Some(ip) = found {
                if ip.state == IpState::Idle && self.allocatable(ip) {
                    return Some(ip.v4);
                }
            }
        }
        self.best_idle()
    }

    /// The idle address to hand out next: secondary addresses before
    /// primaries (so ENIs can drain), then the ENI with the most addresses
    /// in use (packing), then the fullest prefix (so whole prefixes empty
    /// out and can go back; single addresses count as an empty prefix),
    /// then the lowest address.
    fn best_idle(&self) -> Option<Ipv4Addr> {
        let (inuse, taken) = self.not_idle_counts();
        self.ips
            .values()
            .filter(|ip| ip.state == IpState::Idle && self.allocatable(ip))
            .min_by_key(|ip| {
                (
                    ip.primary,
                    std::cmp::Reverse(inuse.get(ip.eni.as_str()).copied().unwrap_or(0)),
                    std::cmp::Reverse(ip.prefix.and_then(|p| taken.get(&p).copied()).unwrap_or(0)),
                    ip.v4,
                )
            })
            .map(|ip| ip.v4)
    }

    /// Addresses that are not idle, per ENI and per prefix, in one pass
    /// (`best_idle` runs on every allocation).
    fn not_idle_counts(&self) -> (HashMap<&str, usize>, HashMap<Ipv4Prefix, usize>) {
        let mut by_eni: HashMap<&str, usize> = HashMap::new();
        let mut by_prefix: HashMap<Ipv4Prefix, usize> = HashMap::new();
        for ip in self.ips.values().filter(|ip| ip.state != IpState::Idle) {
            *by_eni.entry(ip.eni.as_str()).or_default() += 1;
            if let Some(p) = ip.prefix {
                *by_prefix.entry(p).or_default() += 1;
            }
        }
        (by_eni, by_prefix)
    }

    fn inuse_by_eni(&self) -> HashMap<&str, usize> {
        self.not_idle_counts().0
    }

    /// Hands `v4` to `owner`; returns the allocation to persist.
    pub(crate) fn take(
        &mut self,
        v4: Ipv4Addr,
        owner: &Owner,
        sandbox: Option<&SandboxId>,
        now_ms: u64,
    ) -> Option<Allocation> {
        self.ips.get(&v4)?;
        self.set_state(
            v4,
            IpState::InUse {
                owner: owner.clone(),
                sandbox: sandbox.cloned(),
                since_ms: now_ms,
            },
        );
        self.allocation(owner)
    }

    /// Moves an owner's allocation to another sandbox; returns the
    /// allocation to persist, or `None` if nothing changed.
    pub(crate) fn move_sandbox(
        &mut self,
        owner: &Owner,
        sandbox: Option<&SandboxId>,
    ) -> Option<Allocation> {
        let v4 = *self.owners.get(owner)?;
        let ip = self.ips.get_mut(&v4)?;
        let IpState::InUse {
            sandbox: current, ..
        } = &mut ip.state
        else {
            return None;
        };
        match sandbox {
            Some(new) if current.as_ref() != Some(new) => *current = Some(new.clone()),
            _ => return None,
        }
        self.allocation(owner)
    }

    /// Releases an owner's address. With `sandbox`, only if the allocation
    /// belongs to that sandbox (or was made without one).
    pub(crate) fn release(
        &mut self,
        owner: &Owner,
        sandbox: Option<&SandboxId>,
        now_ms: u64,
        stick_ms: u64,
        cool_ms: u64,
    ) -> ReleaseOutcome {
        let Some(ip) = self.owner_ip(owner).cloned() else {
            return ReleaseOutcome::NotHeld;
        };
        if let (
            Some(want),
            IpState::InUse {
                sandbox: Some(have),
                ..
            },
        ) = (sandbox, &ip.state)
        {
            if want != have {
                return ReleaseOutcome::SandboxMismatch;
            }
        }
        if ip.lost {
            self.remove_ips(&[ip.v4]);
            return ReleaseOutcome::Released {
                v4: ip.v4,
                v6: ip.v6,
                hold: None,
            };
        }
        let (state, hold) = if stick_ms > 0 || cool_ms > 0 {
            let reserved_until_ms = if stick_ms > 0 { now_ms + stick_ms } else { 0 };
            let cooling_until_ms = if cool_ms > 0 { now_ms + cool_ms } else { 0 };
            let state = if stick_ms > 0 {
                IpState::Reserved {
                    owner: owner.clone(),
                    until_ms: reserved_until_ms,
                    cool_until_ms: cooling_until_ms,
                }
            } else {
                IpState::Cooling {
                    owner: owner.clone(),
                    until_ms: cooling_until_ms,
                }
            };
            let hold = Hold {
                ip: ip.v4,
                ipv6: ip.v6,
                eni: ip.eni.clone(),
                last_owner: Some(owner.clone()),
                reserved_until_ms,
                cooling_until_ms,
            };
            (state, Some(hold))
        } else {
            (IpState::Idle, None)
        };
        self.set_state(ip.v4, state);
        ReleaseOutcome::Released {
            v4: ip.v4,
            v6: ip.v6,
            hold,
        }
    }

    /// Marks or unmarks addresses as being unassigned.
    pub(crate) fn set_releasing(&mut self, v4s: &[Ipv4Addr], releasing: bool) {
        for v4 in v4s {
            if let Some(ip) = self.ips.get_mut(v4) {
                ip.releasing = releasing;
            }
        }
    }

    /// Marks an owned address the cloud no longer has: the owner keeps
    /// seeing it until it releases it, and it is never handed out again.
    pub(crate) fn mark_lost(&mut self, v4: Ipv4Addr) {
        if let Some(ip) = self.ips.get_mut(&v4) {
            ip.lost = true;
        }
    }

    /// Clears [`mark_lost`](Self::mark_lost): the cloud has the address
    /// again (its ENI was attached again).
    pub(crate) fn mark_found(&mut self, v4: Ipv4Addr) {
        if let Some(ip) = self.ips.get_mut(&v4) {
            ip.lost = false;
        }
    }
}

#[cfg(test)]
mod tests;
