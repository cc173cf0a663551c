//! The pool's ENIs: what it keeps of each ([`PoolEni`]) and the verbs that
//! change it ([`Enis`]). The natural home of what belongs to one ENI: its
//! link, its phase, what is asked of the cloud for it, its limit and its
//! prefixes: the IPv4 /28s, and in dual stack its IPv6 /80 (one, as
//! eniipd asks; more if the cloud shows more), which its addresses' IPv6
//! are carved from and which goes back only with the ENI.
//!
//! Invariants, kept by the verbs and checked by [`Enis::check`]:
//! - `pending` counts the addresses asked of the cloud for the ENI and not
//!   yet answered: it goes up by one per ask ([`Enis::asked`]) and down by
//!   what each answer ends ([`Enis::answered`]), never below zero; of it,
//!   `pending_in_prefixes` were asked as parts of /28s (never more than
//!   `pending`);
//! - a freeing ENI was ready with nothing pending when its free began
//!   ([`Enis::begin_free`]); only a failed detach makes it ready again;
//! - an ENI at its limit is asked nothing more: the cloud said it holds
//!   all it can ([`Enis::hit_limit`]), or it left this instance (withdrawn
//!   or gone). The limit is lifted when it gave addresses back or once a
//!   reconcile found it settled ([`Enis::retry_limit`]);
//! - a gone ENI (the cloud no longer has it) stays gone and at its limit
//!   until it is forgotten: nothing is ever asked of it again;
//! - its /80s are distinct, in the order it got them: the first is the
//!   one its addresses carve from. One refused it (its IPv6 quota full,
//!   [`Enis::refuse_v6_prefix`]) is asked none until the refusal is
//!   lifted as its limit is.
//!
//! Which addresses an ENI holds is the address records' business; that
//! every address is on a known ENI and that a prefix's addresses are its
//! members is [`super::PoolState`]'s to keep, so adding and removing ENIs
//! and prefixes is only done from there.

use std::collections::{btree_map, BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use eniip_cloud::{Ipv4Prefix, Ipv6Prefix};
use eniip_protocol::core::EniInfo;

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
    /// Its id, MAC, vswitch, and the vswitch's IPv4 CIDR and gateway (from
    /// metadata). The pool knows no IPv6 half: `v6` stays `None`.
    link: EniInfo,
    /// Its primary IPv4: handed out last, never unassigned.
    primary_ip: Ipv4Addr,
    phase: EniPhase,
    /// Addresses asked of the cloud for it and not yet answered.
    pending: usize,
    /// Of `pending`, the addresses asked as parts of /28s.
    pending_in_prefixes: usize,
    /// No more asks until the limit is lifted (see the module doc).
    at_limit: bool,
    /// The cloud no longer has it (deleted behind eniipd's back): it holds
    /// no slot and only the addresses owners still hold, never handed out
    /// again; it is forgotten once they are released.
    gone: bool,
    /// Its IPv4 /28 prefixes (prefix mode): every address of each is a
    /// pool address, and they go back to the cloud only as whole prefixes.
    prefixes: BTreeSet<Ipv4Prefix>,
    /// Its IPv6 /80s, in the order it got them (dual stack).
    v6_prefixes: Vec<Ipv6Prefix>,
    /// The cloud refused it a /80 (its IPv6 quota is full): its new
    /// addresses get single IPv6 addresses until the refusal is lifted.
    v6_refused: bool,
}

impl PoolEni {
    /// A ready ENI with nothing pending (the IPv6 half of `link` is
    /// dropped: the pool does not keep it).
    fn ready(link: EniInfo, primary_ip: Ipv4Addr) -> PoolEni {
        PoolEni {
            link: EniInfo { v6: None, ..link },
            primary_ip,
            phase: EniPhase::Ready,
            pending: 0,
            pending_in_prefixes: 0,
            at_limit: false,
            gone: false,
            prefixes: BTreeSet::new(),
            v6_prefixes: Vec::new(),
            v6_refused: false,
        }
    }

    /// `eni-...`
    pub(crate) fn id(&self) -> &str {
        &self.link.eni
    }

    /// Its MAC.
    pub(crate) fn mac(&self) -> &str {
        &self.link.mac
    }

    /// Its vswitch.
    pub(crate) fn vswitch(&self) -> &str {
        &self.link.vswitch
    }

    /// Its link and IPv4 gateway, as `eni` answers them (no IPv6 half).
    pub(crate) fn link(&self) -> &EniInfo {
        &self.link
    }

    /// Its primary IPv4.
    pub(crate) fn primary_ip(&self) -> Ipv4Addr {
        self.primary_ip
    }

    /// Ready or freeing.
    pub(crate) fn phase(&self) -> EniPhase {
        self.phase
    }

    /// Addresses asked of the cloud for it and not yet answered.
    pub(crate) fn pending(&self) -> usize {
        self.pending
    }

    /// Of [`pending`](Self::pending), those asked as parts of /28s.
    pub(crate) fn pending_in_prefixes(&self) -> usize {
        self.pending_in_prefixes
    }

    /// Nothing more is asked of it for now.
    pub(crate) fn at_limit(&self) -> bool {
        self.at_limit
    }

    /// The cloud no longer has it.
    pub(crate) fn gone(&self) -> bool {
        self.gone
    }

    /// Its IPv4 /28 prefixes.
    pub(crate) fn prefixes(&self) -> &BTreeSet<Ipv4Prefix> {
        &self.prefixes
    }

    /// Its IPv6 /80s, the one its addresses carve from first.
    pub(crate) fn v6_prefixes(&self) -> &[Ipv6Prefix] {
        &self.v6_prefixes
    }

    /// The /80 its addresses' IPv6 are carved from, if it holds one.
    pub(crate) fn carve_prefix(&self) -> Option<Ipv6Prefix> {
        self.v6_prefixes.first().copied()
    }

    /// The cloud refused it a /80 (until the refusal is lifted).
    pub(crate) fn v6_refused(&self) -> bool {
        self.v6_refused
    }

    /// Ready and not at its limit: the cloud may be asked for addresses
    /// on it.
    pub(crate) fn takes_asks(&self) -> bool {
        self.phase == EniPhase::Ready && !self.at_limit
    }

    /// Ready with nothing asked in flight: its addresses can be compared
    /// with the cloud's.
    pub(crate) fn settled(&self) -> bool {
        self.phase == EniPhase::Ready && self.pending == 0
    }
}

/// Every managed ENI, by id.
#[derive(Debug, Clone, Default)]
pub(crate) struct Enis {
    by_id: BTreeMap<String, PoolEni>,
}

impl Enis {
    /// The ENI `id`.
    pub(crate) fn get(&self, id: &str) -> Option<&PoolEni> {
        self.by_id.get(id)
    }

    /// Whether `id` is known (gone or not).
    pub(crate) fn contains(&self, id: &str) -> bool {
        self.by_id.contains_key(id)
    }

    /// Every ENI, by id.
    pub(crate) fn iter(&self) -> btree_map::Values<'_, String, PoolEni> {
        self.by_id.values()
    }

    /// How many are known (gone ones included).
    pub(crate) fn len(&self) -> usize {
        self.by_id.len()
    }

    /// One more address was asked of the cloud for `id` (as part of a /28
    /// when `in_prefix`).
    pub(crate) fn asked(&mut self, id: &str, in_prefix: bool) {
        if let Some(e) = self.by_id.get_mut(id) {
            e.pending += 1;
            if in_prefix {
                e.pending_in_prefixes += 1;
            }
        }
    }

    /// A call for `tickets` addresses on `id` ended: they no longer count
    /// as pending on it (nor as pending in prefixes, if they were).
    pub(crate) fn answered(&mut self, id: &str, tickets: usize, in_prefixes: bool) {
        if let Some(e) = self.by_id.get_mut(id) {
            e.pending = e.pending.saturating_sub(tickets);
            if in_prefixes {
                e.pending_in_prefixes = e.pending_in_prefixes.saturating_sub(tickets);
            }
            e.pending_in_prefixes = e.pending_in_prefixes.min(e.pending);
        }
    }

    /// The cloud said `id` holds all it can: nothing more is asked of it
    /// until the limit is lifted.
    pub(crate) fn hit_limit(&mut self, id: &str) {
        if let Some(e) = self.by_id.get_mut(id) {
            e.at_limit = true;
        }
    }

    /// A reconcile found `id` in the cloud: if it is settled, a limit the
    /// cloud reported is tried again (once a pass). Whether it is settled
    /// (ready, nothing pending; its addresses may be compared).
    pub(crate) fn retry_limit(&mut self, id: &str) -> bool {
        match self.by_id.get_mut(id) {
            Some(e) if e.settled() => {
                if !e.gone {
                    e.at_limit = false;
                    e.v6_refused = false;
                }
                true
            }
            _ => false,
        }
    }

    /// The cloud refused `id` a /80 (its IPv6 quota is full): single IPv6
    /// addresses for it until the refusal is lifted (by a give-back or a
    /// settled reconcile, as a limit is).
    pub(crate) fn refuse_v6_prefix(&mut self, id: &str) {
        if let Some(e) = self.by_id.get_mut(id) {
            e.v6_refused = true;
        }
    }

    /// Starts freeing `id`: only a ready ENI with nothing pending can be
    /// freed. Whether it is freeing now.
    pub(crate) fn begin_free(&mut self, id: &str) -> bool {
        match self.by_id.get_mut(id) {
            Some(e) if e.settled() => {
                e.phase = EniPhase::Freeing;
                true
            }
            _ => false,
        }
    }

    /// `id`'s vswitch CIDR and gateway, when they were unknown (an ENI
    /// kept detached over a restart: metadata did not list it then). A
    /// known link is never changed.
    pub(crate) fn learn_vswitch(&mut self, id: &str, cidr: &str, gateway: Ipv4Addr) {
        if let Some(e) = self.by_id.get_mut(id) {
            if e.link.cidr.is_empty() && !cidr.is_empty() {
                e.link.cidr = cidr.to_string();
                e.link.gateway = gateway;
            }
        }
    }

    /// Detaching `id` failed: it is still attached and serves again.
    pub(crate) fn free_failed(&mut self, id: &str) {
        if let Some(e) = self.by_id.get_mut(id) {
            e.phase = EniPhase::Ready;
        }
    }

    /// Checks the invariants; `Err` names the first violation.
    pub(crate) fn check(&self) -> Result<(), String> {
        for (id, e) in &self.by_id {
            if id != e.id() {
                return Err(format!("ENI {} is filed as {id}", e.id()));
            }
            if e.pending_in_prefixes > e.pending {
                return Err(format!(
                    "{id} has {} pending in prefixes of {} pending",
                    e.pending_in_prefixes, e.pending
                ));
            }
            if e.gone && !e.at_limit {
                return Err(format!("{id} is gone but not at its limit"));
            }
            let distinct: BTreeSet<&Ipv6Prefix> = e.v6_prefixes.iter().collect();
            if distinct.len() != e.v6_prefixes.len() {
                return Err(format!("{id} holds a /80 twice"));
            }
        }
        Ok(())
    }

    // ---- what only the pool does (it keeps the addresses in step) -------

    /// Adds a ready ENI (one already known is left as it is).
    pub(super) fn add(&mut self, link: EniInfo, primary_ip: Ipv4Addr) {
        self.by_id
            .entry(link.eni.clone())
            .or_insert_with(|| PoolEni::ready(link, primary_ip));
    }

    /// Forgets `id`.
    pub(super) fn remove(&mut self, id: &str) -> Option<PoolEni> {
        self.by_id.remove(id)
    }

    /// Adds a /28 to `id`; false if `id` is unknown.
    pub(super) fn add_prefix(&mut self, id: &str, p: Ipv4Prefix) -> bool {
        match self.by_id.get_mut(id) {
            Some(e) => {
                e.prefixes.insert(p);
                true
            }
            None => false,
        }
    }

    /// Takes a /28 off `id`.
    pub(super) fn remove_prefix(&mut self, id: &str, p: Ipv4Prefix) {
        if let Some(e) = self.by_id.get_mut(id) {
            e.prefixes.remove(&p);
        }
    }

    /// Adds a /80 to `id` (after those it has); false if `id` is unknown
    /// or holds it already.
    pub(super) fn add_v6_prefix(&mut self, id: &str, p: Ipv6Prefix) -> bool {
        match self.by_id.get_mut(id) {
            Some(e) if !e.v6_prefixes.contains(&p) => {
                e.v6_prefixes.push(p);
                e.v6_refused = false;
                true
            }
            _ => false,
        }
    }

    /// Takes a /80 off `id` (the cloud no longer shows it).
    pub(super) fn remove_v6_prefix(&mut self, id: &str, p: Ipv6Prefix) {
        if let Some(e) = self.by_id.get_mut(id) {
            e.v6_prefixes.retain(|q| *q != p);
        }
    }

    /// `id` gave addresses back: it is no longer at its limit, nor
    /// refused a /80 (unless it is gone).
    pub(super) fn gave_back(&mut self, id: &str) {
        if let Some(e) = self.by_id.get_mut(id) {
            if !e.gone {
                e.at_limit = false;
                e.v6_refused = false;
            }
        }
    }

    /// The cloud no longer has `id`: gone, at its limit for good.
    pub(super) fn mark_gone(&mut self, id: &str) {
        if let Some(e) = self.by_id.get_mut(id) {
            e.gone = true;
            e.at_limit = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::{EniPhase, Enis};
    use eniip_cloud::{Ipv4Prefix, Ipv6Prefix};
    use eniip_protocol::core::EniInfo;

    fn link(id: &str) -> EniInfo {
        EniInfo {
            eni: id.into(),
            mac: "00:16:3e:00:00:01".into(),
            vswitch: "vsw-a".into(),
            cidr: "10.0.0.0/24".into(),
            gateway: Ipv4Addr::new(10, 0, 0, 253),
            v6: Some(("fd00::/64".into(), "fd00::1".parse().unwrap())),
        }
    }

    fn one() -> Enis {
        let mut e = Enis::default();
        e.add(link("eni-1"), Ipv4Addr::new(10, 0, 0, 1));
        e
    }

    #[test]
    fn pending_goes_up_per_ask_and_down_per_answer_never_below_zero() {
        let mut e = one();
        e.asked("eni-1", true);
        e.asked("eni-1", true);
        e.asked("eni-1", false);
        let x = e.get("eni-1").unwrap();
        assert_eq!((x.pending(), x.pending_in_prefixes()), (3, 2));
        // A late answer for more than was asked leaves zero, not an
        // underflow, and never more in prefixes than pending.
        e.answered("eni-1", 2, false);
        let x = e.get("eni-1").unwrap();
        assert_eq!((x.pending(), x.pending_in_prefixes()), (1, 1));
        e.check().unwrap();
        e.answered("eni-1", 5, true);
        let x = e.get("eni-1").unwrap();
        assert_eq!((x.pending(), x.pending_in_prefixes()), (0, 0));
        e.check().unwrap();
        // Unknown ENIs are ignored.
        e.asked("eni-9", false);
        e.answered("eni-9", 1, false);
        assert_eq!(e.len(), 1);
    }

    #[test]
    fn only_a_settled_eni_is_freed_and_a_failed_detach_makes_it_ready() {
        let mut e = one();
        e.asked("eni-1", false);
        assert!(!e.begin_free("eni-1"), "something is pending");
        e.answered("eni-1", 1, false);
        assert!(e.begin_free("eni-1"));
        let x = e.get("eni-1").unwrap();
        assert_eq!(x.phase(), EniPhase::Freeing);
        assert!(!x.takes_asks() && !x.settled());
        assert!(!e.begin_free("eni-1"), "already freeing");
        assert!(!e.retry_limit("eni-1"), "a freeing ENI is not settled");
        e.free_failed("eni-1");
        assert!(e.get("eni-1").unwrap().takes_asks());
        assert!(!e.begin_free("eni-9"));
    }

    #[test]
    fn a_limit_is_lifted_by_a_give_back_or_a_settled_reconcile_never_once_gone() {
        let mut e = one();
        e.hit_limit("eni-1");
        assert!(!e.get("eni-1").unwrap().takes_asks());
        e.gave_back("eni-1");
        assert!(e.get("eni-1").unwrap().takes_asks());
        e.hit_limit("eni-1");
        e.asked("eni-1", false);
        assert!(!e.retry_limit("eni-1"), "not settled: kept");
        assert!(e.get("eni-1").unwrap().at_limit());
        e.answered("eni-1", 1, false);
        assert!(e.retry_limit("eni-1"));
        assert!(!e.get("eni-1").unwrap().at_limit());
        e.mark_gone("eni-1");
        e.gave_back("eni-1");
        assert!(e.retry_limit("eni-1"), "settled, but...");
        let x = e.get("eni-1").unwrap();
        assert!(x.gone() && x.at_limit(), "...a gone ENI stays at its limit");
        e.check().unwrap();
    }

    #[test]
    fn a_vswitch_unknown_at_a_restart_is_learnt_once_and_a_known_one_kept() {
        let mut e = Enis::default();
        let unknown = EniInfo {
            cidr: String::new(),
            gateway: Ipv4Addr::UNSPECIFIED,
            ..link("eni-1")
        };
        e.add(unknown, Ipv4Addr::new(10, 0, 0, 1));
        e.learn_vswitch("eni-1", "", Ipv4Addr::new(10, 0, 0, 9));
        assert_eq!(e.get("eni-1").unwrap().link().cidr, "", "nothing to learn");
        e.learn_vswitch("eni-1", "10.0.0.0/24", Ipv4Addr::new(10, 0, 0, 253));
        e.learn_vswitch("eni-1", "10.9.0.0/24", Ipv4Addr::new(10, 9, 0, 253));
        let l = e.get("eni-1").unwrap().link();
        assert_eq!(
            (l.cidr.as_str(), l.gateway),
            ("10.0.0.0/24", Ipv4Addr::new(10, 0, 0, 253))
        );
    }

    #[test]
    fn an_eni_is_added_once_without_its_ipv6_half_and_holds_its_prefixes() {
        let mut e = one();
        e.asked("eni-1", false);
        e.add(link("eni-1"), Ipv4Addr::new(10, 0, 0, 9));
        let x = e.get("eni-1").unwrap();
        assert_eq!(x.pending(), 1, "an ENI already known is left as it is");
        assert_eq!(x.primary_ip(), Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(x.link().v6, None);
        assert_eq!(
            (x.id(), x.mac(), x.vswitch()),
            ("eni-1", "00:16:3e:00:00:01", "vsw-a")
        );
        let p: Ipv4Prefix = "10.0.0.16/28".parse().unwrap();
        assert!(e.add_prefix("eni-1", p));
        assert!(!e.add_prefix("eni-9", p));
        assert!(e.get("eni-1").unwrap().prefixes().contains(&p));
        e.remove_prefix("eni-1", p);
        assert!(e.get("eni-1").unwrap().prefixes().is_empty());
        assert!(e.remove("eni-1").is_some());
        assert_eq!(e.len(), 0);
    }

    #[test]
    fn an_eni_carves_from_its_first_80_and_a_refusal_lasts_until_a_give_back_or_reconcile() {
        let mut e = one();
        let p: Ipv6Prefix = "fd00:0:0:1:1::/80".parse().unwrap();
        let q: Ipv6Prefix = "fd00:0:0:1:2::/80".parse().unwrap();
        assert_eq!(e.get("eni-1").unwrap().carve_prefix(), None);
        e.refuse_v6_prefix("eni-1");
        assert!(e.get("eni-1").unwrap().v6_refused());
        e.gave_back("eni-1");
        assert!(
            !e.get("eni-1").unwrap().v6_refused(),
            "a give-back lifts it"
        );
        e.refuse_v6_prefix("eni-1");
        assert!(e.retry_limit("eni-1"));
        assert!(
            !e.get("eni-1").unwrap().v6_refused(),
            "a settled reconcile too"
        );
        assert!(e.add_v6_prefix("eni-1", q));
        assert!(e.add_v6_prefix("eni-1", p));
        assert!(!e.add_v6_prefix("eni-1", p), "held already");
        assert!(!e.add_v6_prefix("eni-9", p));
        let x = e.get("eni-1").unwrap();
        assert_eq!(x.v6_prefixes(), [q, p]);
        assert_eq!(
            x.carve_prefix(),
            Some(q),
            "the first it got, not the lowest"
        );
        e.check().unwrap();
        e.remove_v6_prefix("eni-1", q);
        assert_eq!(e.get("eni-1").unwrap().carve_prefix(), Some(p));
        e.mark_gone("eni-1");
        e.refuse_v6_prefix("eni-1");
        e.gave_back("eni-1");
        assert!(
            e.get("eni-1").unwrap().v6_refused(),
            "a gone ENI is asked nothing"
        );
    }
}
