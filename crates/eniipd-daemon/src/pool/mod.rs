//! The pool: every address on the managed ENIs and who holds it.
//!
//! States (SPEC section 4): `idle` (free for anyone), `inuse` (held by an
//! owner), `reserved` (kept for its last owner until `ip_stick_time` runs
//! out), `cooling` (kept from other owners until `ip_cooldown` runs out; its
//! last owner may still take it back), `invalid` (never handed out: half of
//! an unpaired dual-stack pair). After a state rebuild, addresses with no
//! known owner are quarantined (listed as `reserved` with owner `-`) until
//! the quarantine ends.
//!
//! This module is pure data and transitions: no I/O, no threads, no clock
//! (callers pass `now_ms`). [`PoolState`] is made of parts, each a type
//! with private fields that keeps its own invariant (stated in its doc,
//! checked by its `check` and its unit tests):
//! - [`Enis`] (`eni.rs`): the ENIs, with what is pending on each, its
//!   limit, its phase and its prefixes (/28s, and its /80 in dual stack);
//! - [`Addresses`] (`ip.rs`): the addresses, their ENI, IPv6 pair, /28 and
//!   /80, and the unpaired IPv6; an IPv6 is known once;
//! - [`Owners`] (`owners.rs`): one owner, one address; the sandbox moves;
//! - [`Holds`] (`holds.rs`): reservations, cool-downs, quarantines; one
//!   per owner, ended at their time;
//! - [`Attachments`] (`attachments.rs`): the sandbox network of each owner.
//! - [`SgSets`] (`sg_sets.rs`): the security-group set of each ENI, and
//!   whether the cloud shows another (security groups per pod).
//!
//! An address's state is read from them ([`IpState`]). What ties the
//! parts together is kept here, by the verbs that cross them (an address
//! comes, is taken, released, settled or goes), and checked by
//! [`PoolState::check`]: every address and unpaired IPv6 is on a known
//! ENI; a prefix's members are marked only while their ENI holds it; an
//! address carves its IPv6 only from the first /80 of its ENI, and holds a
//! carved one only while it is held (an owner's, or kept by a hold: the
//! cloud knows nothing of it, so it leaves with the owner); owners and
//! holds are on known addresses, never both on one; an attachment counts
//! only while its owner holds its address for that sandbox.
//! Choices and summaries are pure functions of the read accessors:
//! which address an owner gets in `choose.rs` (and which address of a /80
//! in `carve.rs`), what can go back to the cloud in `shrink.rs`, what the
//! protocol and metrics show in `views.rs`.

use std::net::{Ipv4Addr, Ipv6Addr};

use eniip_cloud::{Ipv4Prefix, Ipv6Prefix};
use eniip_protocol::core::{
    Allocation, Attachment, EniInfo, Generation, Hold, Intent, Owner, SandboxId,
};

mod attachments;
mod carve;
pub(crate) mod choose;
mod eni;
mod holds;
mod ip;
mod owners;
mod sg_sets;
pub(crate) mod shrink;
pub(crate) mod views;

pub(crate) use attachments::{Attached, Attachments};
pub(crate) use eni::{EniPhase, Enis, PoolEni};
pub(crate) use holds::{HoldOn, HoldTimes, Holds};
pub(crate) use ip::{Addresses, Gone, PoolIp};
pub(crate) use owners::{Held, Owners, ReleaseOutcome};
pub(crate) use sg_sets::{Observed, SgSets};
pub(crate) use views::IpState;

/// All managed ENIs and addresses, and who holds them.
#[derive(Debug, Clone, Default)]
pub(crate) struct PoolState {
    enis: Enis,
    ips: Addresses,
    owners: Owners,
    holds: Holds,
    attachments: Attachments,
    /// The security-group set of each ENI (security groups per pod).
    sg: SgSets,
}

impl PoolState {
    /// An empty pool; `dual` when every allocation is an IPv4+IPv6 pair.
    pub(crate) fn new(dual: bool) -> PoolState {
        PoolState {
            ips: Addresses::new(dual),
            ..PoolState::default()
        }
    }

    // ---- the parts, to read ------------------------------------------------

    /// Every allocation is an IPv4+IPv6 pair.
    pub(crate) fn dual(&self) -> bool {
        self.ips.dual()
    }

    /// The owners.
    pub(crate) fn owners(&self) -> &Owners {
        &self.owners
    }

    /// The holds.
    pub(crate) fn holds(&self) -> &Holds {
        &self.holds
    }

    /// The ENIs.
    pub(crate) fn enis(&self) -> &Enis {
        &self.enis
    }

    /// The security-group sets of the ENIs.
    pub(crate) fn sg_sets(&self) -> &SgSets {
        &self.sg
    }

    /// The security-group sets of the ENIs, to give, observe and change.
    pub(crate) fn sg_sets_mut(&mut self) -> &mut SgSets {
        &mut self.sg
    }

    /// The ENIs, for the verbs that keep one ENI's own invariant (what is
    /// pending on it, its limit, its phase); ENIs come and go only through
    /// the pool's own verbs.
    pub(crate) fn enis_mut(&mut self) -> &mut Enis {
        &mut self.enis
    }

    /// The ENI `id`.
    pub(crate) fn eni(&self, id: &str) -> Option<&PoolEni> {
        self.enis.get(id)
    }

    /// The addresses.
    pub(crate) fn ips(&self) -> &Addresses {
        &self.ips
    }

    /// The address `v4`.
    pub(crate) fn ip(&self, v4: Ipv4Addr) -> Option<&PoolIp> {
        self.ips.get(&v4)
    }

    /// Every address with its state, in address order: the addresses, the
    /// owners and the holds walked side by side (the hot path reads every
    /// address's state this way, with no lookup per address).
    pub(crate) fn states(&self) -> impl Iterator<Item = (&PoolIp, IpState<'_>)> {
        let mut owners = self.owners.by_address().peekable();
        let mut holds = self.holds.iter().peekable();
        self.ips.iter().map(move |ip| {
            let v4 = ip.v4();
            while owners.next_if(|(a, _)| **a < v4).is_some() {}
            while holds.next_if(|(a, _)| **a < v4).is_some() {}
            let state = if let Some((_, owner)) = owners.next_if(|(a, _)| **a == v4) {
                IpState::InUse(owner)
            } else if let Some((_, h)) = holds.next_if(|(a, _)| **a == v4) {
                IpState::Held(h)
            } else if ip.invalid() {
                IpState::Invalid
            } else {
                IpState::Idle
            };
            (ip, state)
        })
    }

    /// The state of `ip`, read from the owners and the holds.
    pub(crate) fn state_of<'a>(&'a self, ip: &PoolIp) -> IpState<'a> {
        if let Some((owner, _)) = self.owners.of(&ip.v4()) {
            IpState::InUse(owner)
        } else if let Some(h) = self.holds.get(&ip.v4()) {
            IpState::Held(h)
        } else if ip.invalid() {
            IpState::Invalid
        } else {
            IpState::Idle
        }
    }

    // ---- ENIs and addresses come and go --------------------------------------

    /// Adds a ready ENI (its addresses are added separately); one already
    /// known is left as it is.
    pub(crate) fn add_eni(&mut self, link: EniInfo, primary_ip: Ipv4Addr) {
        self.enis.add(link, primary_ip);
    }

    /// Adds an address of a known ENI as idle (invalid when dual stack
    /// lacks its pair and its ENI has no /80 to carve one from). An
    /// address already known is left as it is.
    pub(crate) fn add_ip(&mut self, eni: &str, v4: Ipv4Addr, v6: Option<Ipv6Addr>) {
        let Some(e) = self.enis.get(eni) else {
            return;
        };
        let (primary, carve) = (e.primary_ip() == v4, e.carve_prefix());
        if self.ips.add(eni, v4, v6, primary) && carve.is_some() {
            self.ips.set_v6_prefix(v4, eni, carve);
        }
    }

    /// Adds a /80 to a known ENI (one it holds already is left as it is).
    /// If it is its first, its addresses without a fixed IPv6 pair carve
    /// theirs from it from now on.
    pub(crate) fn add_v6_prefix(&mut self, eni: &str, p: Ipv6Prefix) {
        if !self.enis.add_v6_prefix(eni, p) {
            return;
        }
        if self.enis.get(eni).and_then(PoolEni::carve_prefix) != Some(p) {
            return;
        }
        let on_it: Vec<Ipv4Addr> = self
            .ips
            .on(eni)
            .filter(|ip| ip.v6_prefix().is_none())
            .map(PoolIp::v4)
            .collect();
        for a in on_it {
            self.ips.set_v6_prefix(a, eni, Some(p));
        }
    }

    /// Forgets a /80 of an ENI (the cloud no longer shows it): no IPv6
    /// of it is handed out again. An address not in use drops the IPv6 it
    /// carved from it and carves from the ENI's next /80, if it has one
    /// (else it is invalid until one comes); a carved IPv6 an owner holds
    /// stays the owner's until it is released (as a lost address does:
    /// the pod's address cannot be taken from it, `audit` names it), and
    /// the address then does the same.
    pub(crate) fn remove_v6_prefix(&mut self, eni: &str, p: Ipv6Prefix) {
        self.enis.remove_v6_prefix(eni, p);
        let on_it: Vec<Ipv4Addr> = self
            .ips
            .on(eni)
            .filter(|ip| ip.v6_prefix() == Some(p))
            .map(PoolIp::v4)
            .filter(|a| !self.owners.holds(a))
            .collect();
        for a in on_it {
            self.uncarve(a);
        }
    }

    /// `v4` is in use no more: a carved IPv6 it held leaves, and it
    /// carves next only from a /80 its ENI holds now.
    fn uncarve(&mut self, v4: Ipv4Addr) {
        self.ips.uncarve(v4);
        let Some((eni, p)) = self
            .ips
            .get(&v4)
            .and_then(|ip| Some((ip.eni().to_string(), ip.v6_prefix()?)))
        else {
            return;
        };
        let e = self.enis.get(&eni);
        if e.is_some_and(|e| e.v6_prefixes().contains(&p)) {
            return;
        }
        let next = e.and_then(PoolEni::carve_prefix);
        self.ips.set_v6_prefix(v4, &eni, next);
    }

    /// Addresses of `eni` that nobody holds whose IPv6 the cloud does not
    /// hold for it (`held` false: neither one of its addresses nor in one
    /// of its /80s) lose that IPv6, and carve next from the ENI's /80 if it
    /// has one. The pairs dropped.
    pub(crate) fn drop_v6_not_held(
        &mut self,
        eni: &str,
        held: impl Fn(Ipv6Addr) -> bool,
    ) -> Vec<(Ipv4Addr, Ipv6Addr)> {
        let stale: Vec<(Ipv4Addr, Ipv6Addr)> = self
            .ips
            .on(eni)
            .filter(|ip| !ip.releasing() && !self.owners.holds(&ip.v4()))
            .filter_map(|ip| ip.v6().filter(|b| !held(*b)).map(|b| (ip.v4(), b)))
            .collect();
        let next = self.enis.get(eni).and_then(PoolEni::carve_prefix);
        for (a, _) in &stale {
            self.ips.unpair(*a);
            self.ips.set_v6_prefix(*a, eni, next);
        }
        stale
    }

    /// Records an unpaired IPv6 address of a known ENI (dual stack;
    /// invalid).
    pub(crate) fn add_unpaired_v6(&mut self, eni: &str, v6: Ipv6Addr) {
        if self.enis.contains(eni) {
            self.ips.add_unpaired(eni, v6);
        }
    }

    /// Adds a /28 of an ENI and its 16 addresses (idle). Addresses already
    /// known on that ENI are left as they are, but counted as members.
    pub(crate) fn add_prefix(&mut self, eni: &str, p: Ipv4Prefix) {
        if !self.enis.add_prefix(eni, p) {
            return;
        }
        for a in p.addresses() {
            self.add_ip(eni, a, None);
            self.ips.set_prefix(a, eni, Some(p));
        }
    }

    /// Forgets a /28 of an ENI (its addresses are removed separately, as
    /// they are for single addresses).
    pub(crate) fn remove_prefix(&mut self, eni: &str, p: Ipv4Prefix) {
        self.enis.remove_prefix(eni, p);
        for a in p.addresses() {
            self.ips.set_prefix(a, eni, None);
        }
    }

    /// Removes addresses that left the cloud (unassigned or gone). Owners,
    /// their attachments and holds on them go with them.
    pub(crate) fn remove_ips(&mut self, v4s: &[Ipv4Addr]) {
        for v4 in v4s {
            if self.ips.remove(v4).is_some() {
                if let Some(owner) = self.owners.drop_address(v4) {
                    self.attachments.forget(&owner);
                }
                self.holds.end(v4);
            }
        }
    }

    /// Removes an ENI and every address on it.
    pub(crate) fn remove_eni(&mut self, id: &str) -> Option<PoolEni> {
        let on_it: Vec<Ipv4Addr> = self.ips.on(id).map(PoolIp::v4).collect();
        self.remove_ips(&on_it);
        self.ips.drop_unpaired_of(id);
        self.sg.remove(id);
        self.enis.remove(id)
    }

    /// ENIs marked gone that no longer hold any address: forgotten.
    pub(crate) fn drop_empty_gone(&mut self) -> Vec<String> {
        let empty: Vec<String> = self
            .enis
            .iter()
            .filter(|e| e.gone() && self.ips.count_on(e.id()) == 0)
            .map(|e| e.id().to_string())
            .collect();
        for id in &empty {
            self.remove_eni(id);
        }
        empty
    }

    /// Adds the addresses `eni` was granted, paired by position in dual
    /// stack (an IPv6 beyond the IPv4 is unpaired: invalid, given back by
    /// the next sweep; on an ENI with a /80 an IPv4 beyond the IPv6 carves
    /// its pair). One an owner still holds on a deleted ENI (the vswitch
    /// gave it out again) stays that owner's, and its IPv6 is not
    /// recorded: a reconcile adopts both once it is released. Returns how
    /// many can be handed out.
    pub(crate) fn add_granted(&mut self, eni: &str, v4: &[Ipv4Addr], v6: &[Ipv6Addr]) -> usize {
        let dual = self.dual();
        let mut valid = 0;
        for (i, a) in v4.iter().enumerate() {
            if self.ips.get(a).is_some_and(|ip| ip.eni() != eni) {
                continue;
            }
            let pair = if dual { v6.get(i).copied() } else { None };
            self.add_ip(eni, *a, pair);
            if self.ips.get(a).is_some_and(|ip| !ip.invalid()) {
                valid += 1;
            }
        }
        if dual {
            for b in v6.iter().skip(v4.len()) {
                self.add_unpaired_v6(eni, *b);
            }
        }
        valid
    }

    /// An unassign of `asked` on `eni` ended and the cloud took back
    /// `gone`: those leave the pool (a /28 with its addresses), and an ENI
    /// that gave something back is no longer at its limit. The pair of an
    /// IPv4 that left stays if its own unassign did not happen: unpaired
    /// now, it goes back with the next sweep. Returns the asked addresses
    /// that stay (no longer releasing).
    pub(crate) fn unassigned(
        &mut self,
        eni: &str,
        asked: &[Ipv4Addr],
        gone: &Gone,
    ) -> Vec<Ipv4Addr> {
        for p in &gone.prefixes {
            self.remove_prefix(eni, *p);
        }
        let left_alone: Vec<Ipv6Addr> = self
            .ips
            .pairs_of(&gone.v4)
            .into_iter()
            .filter(|b| !gone.v6.contains(b))
            .collect();
        self.remove_ips(&gone.v4);
        for b in left_alone {
            self.add_unpaired_v6(eni, b);
        }
        for b in &gone.v6 {
            self.ips.remove_unpaired(b);
        }
        let kept: Vec<Ipv4Addr> = asked
            .iter()
            .filter(|a| !gone.v4.contains(a))
            .copied()
            .collect();
        self.set_releasing(&kept, false);
        if !gone.is_empty() {
            self.enis.gave_back(eni);
        }
        kept
    }

    /// Marks or unmarks addresses as being unassigned.
    pub(crate) fn set_releasing(&mut self, v4s: &[Ipv4Addr], releasing: bool) {
        for v4 in v4s {
            self.ips.set_releasing(*v4, releasing);
        }
    }

    /// Clears a mark of [`withdraw`](Self::withdraw): the cloud has the
    /// address again (its ENI was attached again).
    pub(crate) fn mark_found(&mut self, v4: Ipv4Addr) {
        self.ips.set_lost(v4, false);
    }

    /// The cloud no longer has `v4`: an address nobody holds leaves the
    /// pool, an owned one is marked lost (its owner keeps seeing it until
    /// it releases it, and it is never handed out again).
    pub(crate) fn withdraw(&mut self, v4: Ipv4Addr) {
        if self.owners.holds(&v4) {
            self.ips.set_lost(v4, true);
        } else {
            self.remove_ips(&[v4]);
        }
    }

    /// The cloud no longer shows `id` attached here: nothing more is asked
    /// of it, and every address on it not lost yet is withdrawn. How many
    /// were, or `None` when it was withdrawn already (at its limit with
    /// nothing left to withdraw).
    pub(crate) fn withdraw_eni(&mut self, id: &str) -> Option<usize> {
        let on_it: Vec<Ipv4Addr> = self
            .ips
            .on(id)
            .filter(|ip| !ip.lost())
            .map(PoolIp::v4)
            .collect();
        if self.enis.get(id).is_some_and(PoolEni::at_limit) && on_it.is_empty() {
            return None;
        }
        self.enis.hit_limit(id);
        for a in &on_it {
            self.withdraw(*a);
        }
        Some(on_it.len())
    }

    /// The cloud no longer has `id` at all: it is gone (its slot is free),
    /// its idle addresses leave the pool, the ones owners hold stay theirs
    /// until released (never handed out again), then it is forgotten. How
    /// many owners still hold an address on it.
    pub(crate) fn forget_deleted(&mut self, id: &str) -> usize {
        let on_it: Vec<Ipv4Addr> = self.ips.on(id).map(PoolIp::v4).collect();
        let held = on_it.iter().filter(|a| self.owners.holds(a)).count();
        for a in on_it {
            self.withdraw(a);
        }
        self.ips.drop_unpaired_of(id);
        self.enis.mark_gone(id);
        self.drop_empty_gone();
        held
    }

    // ---- owners --------------------------------------------------------------

    /// May be handed out, if idle: not being unassigned, not lost, on a
    /// ready ENI.
    pub(crate) fn allocatable(&self, ip: &PoolIp) -> bool {
        !ip.releasing()
            && !ip.lost()
            && self
                .enis
                .get(ip.eni())
                .is_some_and(|e| e.phase() == EniPhase::Ready)
    }

    /// Idle: not held, not kept, not invalid.
    pub(crate) fn is_idle(&self, ip: &PoolIp) -> bool {
        !ip.invalid() && !self.owners.holds(&ip.v4()) && !self.holds.holds(&ip.v4())
    }

    /// Hands `v4` to `owner` (who holds none), which asked `intent`; a
    /// hold on it ends. Returns the allocation to persist, or `None`
    /// (nothing changed) when `v4` is unknown or held, or `owner` holds an
    /// address already.
    pub(crate) fn take(
        &mut self,
        v4: Ipv4Addr,
        owner: &Owner,
        sandbox: Option<&SandboxId>,
        now_ms: u64,
        intent: &Intent,
    ) -> Option<Allocation> {
        if !self.ips.contains(&v4)
            || !self
                .owners
                .take(owner, v4, sandbox.cloned(), now_ms, intent.clone(), None)
        {
            return None;
        }
        let kept_for_owner = self.holds.get(&v4).and_then(HoldOn::owner) == Some(owner);
        self.holds.end(&v4);
        self.carve_for(v4, owner, kept_for_owner);
        self.allocation(owner)
    }

    /// `v4`, just taken by `owner`, carves its IPv6 for it when its ENI
    /// has a /80 (an address kept for this owner keeps the one it had).
    fn carve_for(&mut self, v4: Ipv4Addr, owner: &Owner, kept_for_owner: bool) {
        let Some(ip) = self.ips.get(&v4) else {
            return;
        };
        let Some(p) = ip.v6_prefix() else {
            return;
        };
        if kept_for_owner && ip.v6().is_some() {
            return;
        }
        let b = carve::pick(p, owner.as_str(), |b| self.ips.v6_taken(b, v4));
        self.ips.carve(v4, b);
    }

    /// Moves an owner's allocation to another sandbox; returns the
    /// allocation to persist, or `None` if nothing changed.
    pub(crate) fn move_sandbox(
        &mut self,
        owner: &Owner,
        sandbox: Option<&SandboxId>,
    ) -> Option<Allocation> {
        match sandbox {
            Some(new) if self.owners.move_sandbox(owner, new) => self.allocation(owner),
            _ => None,
        }
    }

    /// `owner`, who holds an address, is answered an `alloc` again: a new
    /// generation (what earlier answers' releases name no longer touches
    /// it). The allocation to persist, or `None` if it holds none.
    pub(crate) fn renew(&mut self, owner: &Owner) -> Option<Allocation> {
        self.owners.renew(owner)?;
        self.allocation(owner)
    }

    /// Never hands out a generation below `floor` (the store's, at start).
    pub(crate) fn raise_next_gen(&mut self, floor: Generation) {
        self.owners.raise_next_gen(floor);
    }

    /// `owner`, who holds an address, asks its own stick time again (the
    /// newest ask is kept): the allocation to persist, or `None` if
    /// nothing changed.
    pub(crate) fn restick(&mut self, owner: &Owner, stick_s: u64) -> Option<Allocation> {
        if self.owners.restick(owner, stick_s) {
            self.allocation(owner)
        } else {
            None
        }
    }

    /// Releases an owner's address. With `sandbox`, only if the allocation
    /// belongs to that sandbox (or was made without one); with `gen`, only
    /// if it is still that generation's (else [`ReleaseOutcome::Stale`]).
    /// A lost address
    /// leaves the pool; any other is reserved and/or cools down for its
    /// last owner (for as long as `times` says for the stick time it
    /// asked), or is idle at once.
    pub(crate) fn release(
        &mut self,
        owner: &Owner,
        sandbox: Option<&SandboxId>,
        gen: Option<Generation>,
        now_ms: u64,
        times: &HoldTimes,
    ) -> ReleaseOutcome {
        let Some(ip) = self.owner_ip(owner) else {
            return ReleaseOutcome::NotHeld;
        };
        let have = self.owners.get(owner).and_then(Held::sandbox);
        if sandbox.zip(have).is_some_and(|(want, have)| want != have) {
            return ReleaseOutcome::SandboxMismatch;
        }
        if gen.is_some_and(|g| self.owners.get(owner).map(Held::gen) != Some(g)) {
            return ReleaseOutcome::Stale;
        }
        let (v4, v6, eni, lost) = (ip.v4(), ip.v6(), ip.eni().to_string(), ip.lost());
        let ipv6_prefix = ip.v6_prefix().filter(|_| v6.is_some());
        if lost {
            self.remove_ips(&[v4]);
            return ReleaseOutcome::Released {
                v4,
                v6,
                hold: None,
                superseded: None,
            };
        }
        let stick_ms = self
            .owners
            .release(owner)
            .map_or(times.stick_ms, |h| times.stick_ms_for(h.intent().stick_s));
        self.attachments.forget(owner);
        let older = self.holds.for_owner(owner).filter(|o| *o != v4);
        let hold = self
            .holds
            .keep_for(v4, owner, now_ms, stick_ms, times.cool_ms)
            .map(|(reserved_until_ms, cooling_until_ms)| Hold {
                ip: v4,
                ipv6: v6,
                ipv6_prefix,
                eni,
                last_owner: Some(owner.clone()),
                reserved_until_ms,
                cooling_until_ms,
            });
        if hold.is_none() {
            // Idle: a carved IPv6 leaves with its owner.
            self.uncarve(v4);
        }
        // A new hold for the owner ends its older one: idle now, its
        // carved IPv6 leaves too.
        let superseded = older.filter(|o| hold.is_some() && !self.holds.holds(o));
        if let Some(o) = superseded {
            self.uncarve(o);
        }
        ReleaseOutcome::Released {
            v4,
            v6,
            hold,
            superseded,
        }
    }

    /// An `alloc` names (or does not name) its sandbox's network: noted
    /// before the address is taken, so the record that makes it durable
    /// carries it. True when `owner` already holds its address for this
    /// sandbox and the attachment is new (its record must be written
    /// again). An `alloc` without one keeps the sandbox's earlier one.
    pub(crate) fn note_attachment(
        &mut self,
        owner: &Owner,
        sandbox: Option<&SandboxId>,
        attach: Option<Attachment>,
    ) -> bool {
        let renew = attach.as_ref().is_some_and(|a| {
            self.owners.holds_for(owner, sandbox) && self.attachment(owner) != Some(a)
        });
        self.attachments.note(owner, sandbox, attach);
        renew
    }

    /// Restores an allocation from the state file: false (nothing changed)
    /// when its address is not in the pool on its ENI, or is held, or its
    /// owner holds another.
    pub(crate) fn restore_allocation(&mut self, a: &Allocation) -> bool {
        match self.ips.get(&a.ip) {
            Some(ip) if ip.eni() == a.eni || a.eni.is_empty() => {}
            _ => return false,
        }
        let gen = Some(a.gen).filter(|g| !g.is_none());
        if !self.owners.take(
            &a.owner,
            a.ip,
            a.sandbox.clone(),
            a.since_ms,
            a.intent.clone(),
            gen,
        ) {
            return false;
        }
        self.holds.end(&a.ip);
        if let Some(v6) = a.ipv6 {
            // The recorded IPv6 is the owner's: carved from its /80 if it is
            // in it, else a fixed pair (the cloud's, matched on adoption).
            if !self.ips.carve(a.ip, v6) {
                self.ips.pair(a.ip, v6);
            }
        }
        self.ips.validate(a.ip);
        if let Some(at) = &a.attach {
            self.attachments
                .restore(&a.owner, a.sandbox.clone(), at.clone());
        }
        true
    }

    /// Restores a reservation / cool-down / quarantine from the state file
    /// (on an idle address, if it has not ended by `now_ms`).
    pub(crate) fn restore_hold(&mut self, h: &Hold, now_ms: u64) -> bool {
        if !self.ips.get(&h.ip).is_some_and(|ip| self.is_idle(ip)) {
            return false;
        }
        let kept = self.holds.restore(
            h.ip,
            h.last_owner.as_ref(),
            h.reserved_until_ms,
            h.cooling_until_ms,
            now_ms,
        );
        // A carved IPv6 is kept with its address, as it was.
        if let Some(v6) = h.ipv6.filter(|_| kept) {
            self.ips.carve(h.ip, v6);
        }
        kept
    }

    /// Puts an idle address in quarantine until `until_ms`; the hold to
    /// persist.
    pub(crate) fn quarantine(&mut self, v4: Ipv4Addr, until_ms: u64) -> Option<Hold> {
        let ip = self.ips.get(&v4).filter(|ip| self.is_idle(ip))?;
        let hold = Hold {
            ip: v4,
            ipv6: ip.v6(),
            ipv6_prefix: None,
            eni: ip.eni().to_string(),
            last_owner: None,
            reserved_until_ms: until_ms,
            cooling_until_ms: 0,
        };
        self.holds.quarantine(v4, until_ms);
        Some(hold)
    }

    /// Ends expired holds. Returns the addresses that became idle (their
    /// hold records can be cleared).
    pub(crate) fn settle(&mut self, now_ms: u64) -> Vec<Ipv4Addr> {
        let idle = self.holds.settle(now_ms);
        for a in &idle {
            self.uncarve(*a);
        }
        idle
    }

    /// The earliest hold expiry, if any (so the caller can wake then).
    pub(crate) fn next_expiry(&self) -> Option<u64> {
        self.holds.next_expiry()
    }

    // ---- reads across parts --------------------------------------------------

    /// The address an owner holds.
    pub(crate) fn owner_ip(&self, owner: &Owner) -> Option<&PoolIp> {
        self.owners.get(owner).and_then(|h| self.ips.get(&h.v4()))
    }

    /// Whether an owner holds `v4`.
    pub(crate) fn is_held(&self, v4: Ipv4Addr) -> bool {
        self.owners.holds(&v4)
    }

    /// `owner`'s allocation, if it holds one.
    pub(crate) fn allocation(&self, owner: &Owner) -> Option<Allocation> {
        let held = self.owners.get(owner)?;
        let ip = self.ips.get(&held.v4())?;
        Some(Allocation {
            owner: owner.clone(),
            sandbox: held.sandbox().cloned(),
            ip: ip.v4(),
            ipv6: ip.v6(),
            ipv6_prefix: ip.v6_prefix().filter(|_| ip.v6().is_some()),
            eni: ip.eni().to_string(),
            since_ms: held.since_ms(),
            gen: held.gen(),
            attach: self.attachment(owner).cloned(),
            intent: held.intent().clone(),
        })
    }

    /// `owner`'s allocation and the ENI it is on: what `alloc` and `show`
    /// answer.
    pub(crate) fn allocation_with_eni(&self, owner: &Owner) -> Option<(Allocation, EniInfo)> {
        let a = self.allocation(owner)?;
        let eni = self.eni_info(&a.eni)?;
        Some((a, eni))
    }

    /// A known ENI's link and IPv4 gateway (the pool knows no IPv6
    /// gateway: `v6` is `None`).
    pub(crate) fn eni_info(&self, id: &str) -> Option<EniInfo> {
        self.enis.get(id).map(|e| e.link().clone())
    }

    /// The attachment of `owner`'s allocation, if it holds one for the
    /// sandbox the attachment was named for.
    pub(crate) fn attachment(&self, owner: &Owner) -> Option<&Attachment> {
        self.attachments.current(owner, &self.owners)
    }

    /// Every held allocation with an attachment.
    pub(crate) fn attached(&self) -> Vec<Attached> {
        self.attachments.attached(&self.owners)
    }

    /// Addresses free for anyone right now.
    pub(crate) fn idle_count(&self) -> usize {
        self.states()
            .filter(|(ip, state)| *state == IpState::Idle && self.allocatable(ip))
            .count()
    }

    /// Address slots an ENI uses beside its primary: one per prefix, and
    /// one per single secondary address or unpaired IPv6 (see
    /// [`Addresses::singles_on`]).
    pub(crate) fn slots_used(&self, eni: &str) -> usize {
        let prefixes = self.enis.get(eni).map_or(0, |e| e.prefixes().len());
        prefixes + self.ips.singles_on(eni)
    }

    /// IPv6 slots of an ENI's quota its single IPv6 addresses and /80s
    /// use (a /80 takes one).
    pub(crate) fn v6_slots_used(&self, eni: &str) -> usize {
        let prefixes = self.enis.get(eni).map_or(0, |e| e.v6_prefixes().len());
        prefixes + self.ips.fixed_v6_on(eni)
    }

    /// Checks every part's invariant and those that tie them together;
    /// `Err` names the first violation.
    pub(crate) fn check(&self) -> Result<(), String> {
        self.enis.check()?;
        self.ips.check()?;
        self.owners.check()?;
        self.holds.check()?;
        for ip in self.ips.iter() {
            let Some(e) = self.enis.get(ip.eni()) else {
                return Err(format!("{} is on unknown ENI {}", ip.v4(), ip.eni()));
            };
            if let Some(p) = ip.prefix().filter(|p| !e.prefixes().contains(p)) {
                return Err(format!(
                    "{} is in {p}, which {} does not hold",
                    ip.v4(),
                    ip.eni()
                ));
            }
            if let Some(p) = ip.v6_prefix().filter(|p| e.carve_prefix() != Some(*p)) {
                return Err(format!(
                    "{} carves from {p}, not the /80 of {}",
                    ip.v4(),
                    ip.eni()
                ));
            }
            let held = self.owners.holds(&ip.v4()) || self.holds.holds(&ip.v4());
            if let (Some(b), Some(_), false) = (ip.v6(), ip.v6_prefix(), held) {
                return Err(format!("{} is idle but holds the carved {b}", ip.v4()));
            }
        }
        if let Some((b, eni)) = self.ips.unpaired().find(|(_, e)| !self.enis.contains(e)) {
            return Err(format!("{b} is on unknown ENI {eni}"));
        }
        for (owner, h) in self.owners.iter() {
            if !self.ips.contains(&h.v4()) {
                return Err(format!("owner {owner} holds {}, not in the pool", h.v4()));
            }
            if self.holds.holds(&h.v4()) {
                return Err(format!("{} is both held by {owner} and kept", h.v4()));
            }
        }
        if let Some((v4, _)) = self.holds.iter().find(|(v4, _)| !self.ips.contains(v4)) {
            return Err(format!("{v4} is kept but not in the pool"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
