//! The pool's addresses: what it keeps of each IPv4 ([`PoolIp`]: its ENI,
//! its IPv6 pair, its /28, the /80 its IPv6 is carved from, whether it
//! may be handed out) and the IPv6 addresses that have no IPv4 pair
//! ([`Addresses`]).
//!
//! An IPv6 pair is fixed (a single address the cloud assigned, the pair
//! of this IPv4 for its life) or carved: on an ENI holding a /80 an
//! address with no IPv6 of its own is marked with that /80, and gets an
//! address of it when it is handed out, chosen for its owner
//! ([`super::carve`]); it keeps it while it is held (in use, reserved,
//! cooling) and drops it once idle, since the cloud knows nothing of it.
//!
//! Who holds an address is not kept here: owners and holds are parts of
//! their own, and an address's state ([`super::IpState`]) is read from
//! them.
//!
//! Invariants, kept by the verbs and checked by [`Addresses::check`]:
//! - an address is filed under its own IPv4, once, on one ENI;
//! - an IPv6 is known once: as the pair of one IPv4, or unpaired (dual
//!   stack: it holds a slot until it goes back, and is never handed out);
//! - a /28 member is marked with its prefix, which contains it;
//! - an address marked with a /80 is never invalid, and an IPv6 it holds
//!   is inside that /80 (a carved one);
//! - the index of IPv6 addresses names exactly the pairs.
//!
//! That every address is on a known ENI, and a prefix's members are marked
//! only while their ENI holds the prefix, is [`super::PoolState`]'s to
//! keep: adding and removing addresses is only done from there.

use std::collections::{btree_map, BTreeMap, BTreeSet, HashMap};
use std::net::{Ipv4Addr, Ipv6Addr};

use eniip_cloud::{Ipv4Prefix, Ipv6Prefix};

/// One pool address (an IPv4, with its IPv6 pair in dual stack).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PoolIp {
    v4: Ipv4Addr,
    v6: Option<Ipv6Addr>,
    eni: String,
    /// The ENI's primary IPv4: handed out last, never unassigned.
    primary: bool,
    /// Dual stack without an IPv6 pair: never handed out (it goes back,
    /// unless it is a primary). A pair found later, or an owner restored
    /// on it, ends that.
    invalid: bool,
    /// An unassign is in flight: not handed out.
    releasing: bool,
    /// The cloud no longer has it although an owner holds it: never handed
    /// out again; dropped from the pool when released.
    lost: bool,
    /// The /28 of its ENI it belongs to (prefix mode): never unassigned on
    /// its own, only with its whole prefix.
    prefix: Option<Ipv4Prefix>,
    /// The /80 of its ENI its IPv6 is carved from (dual stack, an ENI
    /// holding one, an address with no fixed pair): `v6`, when set, is a
    /// carved address of it.
    v6_prefix: Option<Ipv6Prefix>,
}

impl PoolIp {
    /// The IPv4 address (the key).
    pub(crate) fn v4(&self) -> Ipv4Addr {
        self.v4
    }

    /// The paired IPv6 address (dual stack).
    pub(crate) fn v6(&self) -> Option<Ipv6Addr> {
        self.v6
    }

    /// The ENI it is on.
    pub(crate) fn eni(&self) -> &str {
        &self.eni
    }

    /// The ENI's primary IPv4.
    pub(crate) fn primary(&self) -> bool {
        self.primary
    }

    /// Never handed out: dual stack without an IPv6 pair.
    pub(crate) fn invalid(&self) -> bool {
        self.invalid
    }

    /// An unassign is in flight.
    pub(crate) fn releasing(&self) -> bool {
        self.releasing
    }

    /// The cloud no longer has it; kept only for its owner.
    pub(crate) fn lost(&self) -> bool {
        self.lost
    }

    /// The /28 it belongs to, if any.
    pub(crate) fn prefix(&self) -> Option<Ipv4Prefix> {
        self.prefix
    }

    /// The /80 its IPv6 is carved from, if any.
    pub(crate) fn v6_prefix(&self) -> Option<Ipv6Prefix> {
        self.v6_prefix
    }

    /// Its IPv6 is a fixed pair (a single address of the cloud's), not a
    /// carved one.
    pub(crate) fn fixed_v6(&self) -> Option<Ipv6Addr> {
        self.v6.filter(|_| self.v6_prefix.is_none())
    }
}

/// Every pool address, by IPv4, and the unpaired IPv6 by ENI.
#[derive(Debug, Clone, Default)]
pub(crate) struct Addresses {
    /// Every address is an IPv4+IPv6 pair: one without a pair is invalid.
    dual: bool,
    by_v4: BTreeMap<Ipv4Addr, PoolIp>,
    /// Every pair, fixed or carved, by its IPv6.
    by_v6: HashMap<Ipv6Addr, Ipv4Addr>,
    /// Dual stack: IPv6 addresses with no IPv4 pair (invalid), and their
    /// ENI.
    unpaired_v6: BTreeMap<Ipv6Addr, String>,
}

impl Addresses {
    /// No address yet; `dual` when every address is an IPv4+IPv6 pair.
    pub(crate) fn new(dual: bool) -> Addresses {
        Addresses {
            dual,
            ..Addresses::default()
        }
    }

    /// Every address is an IPv4+IPv6 pair.
    pub(crate) fn dual(&self) -> bool {
        self.dual
    }

    /// The address `v4`.
    pub(crate) fn get(&self, v4: &Ipv4Addr) -> Option<&PoolIp> {
        self.by_v4.get(v4)
    }

    /// Whether `v4` is a pool address.
    pub(crate) fn contains(&self, v4: &Ipv4Addr) -> bool {
        self.by_v4.contains_key(v4)
    }

    /// Every address, in IPv4 order.
    pub(crate) fn iter(&self) -> btree_map::Values<'_, Ipv4Addr, PoolIp> {
        self.by_v4.values()
    }

    /// How many IPv4 addresses (unpaired IPv6 not counted).
    pub(crate) fn len(&self) -> usize {
        self.by_v4.len()
    }

    /// The addresses on `eni`.
    pub(crate) fn on<'a>(&'a self, eni: &'a str) -> impl Iterator<Item = &'a PoolIp> + 'a {
        self.by_v4.values().filter(move |ip| ip.eni == eni)
    }

    /// The unpaired IPv6 addresses and their ENIs.
    pub(crate) fn unpaired(&self) -> impl Iterator<Item = (Ipv6Addr, &str)> {
        self.unpaired_v6.iter().map(|(b, e)| (*b, e.as_str()))
    }

    /// How many unpaired IPv6 `eni` has.
    pub(crate) fn unpaired_on(&self, eni: &str) -> usize {
        self.unpaired_v6.values().filter(|e| *e == eni).count()
    }

    /// How many unpaired IPv6 there are.
    pub(crate) fn unpaired_len(&self) -> usize {
        self.unpaired_v6.len()
    }

    /// Addresses and unpaired IPv6 on `eni`.
    pub(crate) fn count_on(&self, eni: &str) -> usize {
        self.on(eni).count() + self.unpaired_on(eni)
    }

    /// Slots of `eni`'s quotas its single addresses use: one per secondary
    /// IPv4 not in a /28 (invalid ones included), and in dual stack one
    /// per unpaired IPv6 (it holds a slot of the IPv6 quota until it goes
    /// back).
    pub(crate) fn singles_on(&self, eni: &str) -> usize {
        self.on(eni)
            .filter(|ip| !ip.primary && ip.prefix.is_none())
            .count()
            + self.unpaired_on(eni)
    }

    /// IPv6 slots of `eni`'s quota its single IPv6 addresses use: the
    /// fixed pairs (its primary's included) and the unpaired.
    pub(crate) fn fixed_v6_on(&self, eni: &str) -> usize {
        self.on(eni).filter(|ip| ip.fixed_v6().is_some()).count() + self.unpaired_on(eni)
    }

    /// The fixed IPv6 pairs of these addresses (dual stack; a carved one
    /// is not the cloud's to take back).
    pub(crate) fn pairs_of(&self, v4s: &[Ipv4Addr]) -> Vec<Ipv6Addr> {
        v4s.iter()
            .filter_map(|a| self.by_v4.get(a).and_then(PoolIp::fixed_v6))
            .collect()
    }

    /// The address whose IPv6 pair is `v6`.
    pub(crate) fn paired_with(&self, v6: Ipv6Addr) -> Option<&PoolIp> {
        self.by_v6.get(&v6).and_then(|a| self.by_v4.get(a))
    }

    /// Whether `v6` is known (a pair, or unpaired) other than as the pair
    /// of `v4`.
    pub(crate) fn v6_taken(&self, v6: Ipv6Addr, v4: Ipv4Addr) -> bool {
        self.by_v6.get(&v6).is_some_and(|a| *a != v4) || self.unpaired_v6.contains_key(&v6)
    }

    /// Every IPv6 known: paired (fixed or carved) or unpaired.
    pub(crate) fn known_v6(&self) -> BTreeSet<Ipv6Addr> {
        self.by_v6
            .keys()
            .chain(self.unpaired_v6.keys())
            .copied()
            .collect()
    }

    /// Checks the invariants; `Err` names the first violation.
    pub(crate) fn check(&self) -> Result<(), String> {
        let mut pairs = 0;
        for (key, ip) in &self.by_v4 {
            if *key != ip.v4 {
                return Err(format!("{} is filed as {key}", ip.v4));
            }
            if let Some(p) = ip.prefix.filter(|p| !p.contains(ip.v4)) {
                return Err(format!("{} is marked a member of {p}", ip.v4));
            }
            if let Some(p) = ip.v6_prefix {
                if ip.invalid {
                    return Err(format!("{} carves from {p} but is invalid", ip.v4));
                }
                if let Some(b) = ip.v6.filter(|b| !p.contains(*b)) {
                    return Err(format!("{} carves from {p} but holds {b}", ip.v4));
                }
            }
            if let Some(b) = ip.v6 {
                pairs += 1;
                if self.by_v6.get(&b) != Some(&ip.v4) {
                    return Err(format!("{b}, the pair of {}, is not indexed", ip.v4));
                }
                if self.unpaired_v6.contains_key(&b) {
                    return Err(format!("{b} appears twice"));
                }
            }
        }
        if pairs != self.by_v6.len() {
            return Err(format!(
                "{} IPv6 indexed for {pairs} pairs",
                self.by_v6.len()
            ));
        }
        Ok(())
    }

    // ---- what only the pool does (it keeps ENIs and holders in step) ----

    /// Adds `v4` on `eni` with its pair `v6` (dropped if it is another's
    /// already; that pair is no longer unpaired). In dual stack an address
    /// without a pair is invalid. False (and nothing changed) if `v4` is
    /// known already.
    pub(super) fn add(
        &mut self,
        eni: &str,
        v4: Ipv4Addr,
        v6: Option<Ipv6Addr>,
        primary: bool,
    ) -> bool {
        if self.by_v4.contains_key(&v4) {
            return false;
        }
        let v6 = v6.filter(|b| !self.by_v6.contains_key(b));
        if let Some(b) = v6 {
            self.unpaired_v6.remove(&b);
            self.by_v6.insert(b, v4);
        }
        let invalid = self.dual && v6.is_none();
        self.by_v4.insert(
            v4,
            PoolIp {
                v4,
                v6,
                eni: eni.to_string(),
                primary,
                invalid,
                releasing: false,
                lost: false,
                prefix: None,
                v6_prefix: None,
            },
        );
        true
    }

    /// Removes `v4` (and its pair with it).
    pub(super) fn remove(&mut self, v4: &Ipv4Addr) -> Option<PoolIp> {
        let ip = self.by_v4.remove(v4)?;
        if let Some(b) = ip.v6 {
            self.by_v6.remove(&b);
        }
        Some(ip)
    }

    /// Records `v6` of `eni` as unpaired (unless it is a pair already).
    pub(super) fn add_unpaired(&mut self, eni: &str, v6: Ipv6Addr) {
        if !self.by_v6.contains_key(&v6) {
            self.unpaired_v6.insert(v6, eni.to_string());
        }
    }

    /// Forgets an unpaired IPv6.
    pub(super) fn remove_unpaired(&mut self, v6: &Ipv6Addr) {
        self.unpaired_v6.remove(v6);
    }

    /// Forgets every unpaired IPv6 of `eni`.
    pub(super) fn drop_unpaired_of(&mut self, eni: &str) {
        self.unpaired_v6.retain(|_, e| e != eni);
    }

    /// Gives `v4`, which has none, the pair `v6` (no longer unpaired): it
    /// is valid from now on. False if it has a pair already or `v6` is
    /// another's.
    pub(super) fn pair(&mut self, v4: Ipv4Addr, v6: Ipv6Addr) -> bool {
        if self.by_v6.contains_key(&v6) {
            return false;
        }
        match self.by_v4.get_mut(&v4) {
            Some(ip) if ip.v6.is_none() && ip.v6_prefix.is_none_or(|p| p.contains(v6)) => {
                ip.v6 = Some(v6);
                ip.invalid = false;
                self.unpaired_v6.remove(&v6);
                self.by_v6.insert(v6, v4);
                true
            }
            _ => false,
        }
    }

    /// Marks `v4`, if it is on `eni`, as carving its IPv6 from `p` (or from
    /// no /80): with one, an address without a fixed pair is valid and
    /// its IPv6, if it holds one, must be inside `p` (else it is kept as a
    /// fixed pair, as the cloud lost the /80 it came from); without one,
    /// a carved IPv6 it holds stays as a fixed pair, and an address left
    /// without a pair is invalid in dual stack. False if it is not there.
    pub(super) fn set_v6_prefix(&mut self, v4: Ipv4Addr, eni: &str, p: Option<Ipv6Prefix>) -> bool {
        let dual = self.dual;
        match self.by_v4.get_mut(&v4) {
            Some(ip) if ip.eni == eni => {
                ip.v6_prefix = match (p, ip.v6) {
                    (Some(p), Some(b)) if !p.contains(b) => None,
                    (p, _) => p,
                };
                ip.invalid = dual && ip.v6.is_none() && ip.v6_prefix.is_none();
                true
            }
            _ => false,
        }
    }

    /// Gives `v4`, which carves from a /80, the IPv6 `v6` of it (replacing
    /// the one it had); false, and nothing changed, if it does not carve,
    /// `v6` is outside its /80, or `v6` is known otherwise.
    pub(super) fn carve(&mut self, v4: Ipv4Addr, v6: Ipv6Addr) -> bool {
        if self.v6_taken(v6, v4) {
            return false;
        }
        match self.by_v4.get_mut(&v4) {
            Some(ip) if ip.v6_prefix.is_some_and(|p| p.contains(v6)) => {
                if let Some(old) = ip.v6.replace(v6) {
                    self.by_v6.remove(&old);
                }
                self.by_v6.insert(v6, v4);
                true
            }
            _ => false,
        }
    }

    /// `v4` loses its IPv6 pair, fixed or carved (its ENI no longer has
    /// it); invalid in dual stack until it carves from a /80.
    pub(super) fn unpair(&mut self, v4: Ipv4Addr) {
        if let Some(ip) = self.by_v4.get_mut(&v4) {
            if let Some(b) = ip.v6.take() {
                self.by_v6.remove(&b);
            }
            ip.invalid = self.dual && ip.v6_prefix.is_none();
        }
    }

    /// `v4` is idle again: a carved IPv6 it held is dropped (a fixed pair
    /// stays).
    pub(super) fn uncarve(&mut self, v4: Ipv4Addr) {
        if let Some(ip) = self.by_v4.get_mut(&v4) {
            if ip.v6_prefix.is_some() {
                if let Some(b) = ip.v6.take() {
                    self.by_v6.remove(&b);
                }
            }
        }
    }

    /// An owner was restored on `v4`: it is handed out, so no longer
    /// invalid.
    pub(super) fn validate(&mut self, v4: Ipv4Addr) {
        if let Some(ip) = self.by_v4.get_mut(&v4) {
            ip.invalid = false;
        }
    }

    /// Marks `v4`, if it is on `eni`, a member of `p` (or of none); false
    /// if it is not there.
    pub(super) fn set_prefix(&mut self, v4: Ipv4Addr, eni: &str, p: Option<Ipv4Prefix>) -> bool {
        match self.by_v4.get_mut(&v4) {
            Some(ip) if ip.eni == eni && p.is_none_or(|p| p.contains(v4)) => {
                ip.prefix = p;
                true
            }
            _ => false,
        }
    }

    /// Marks or unmarks `v4` as being unassigned.
    pub(super) fn set_releasing(&mut self, v4: Ipv4Addr, releasing: bool) {
        if let Some(ip) = self.by_v4.get_mut(&v4) {
            ip.releasing = releasing;
        }
    }

    /// Marks `v4` lost (the cloud no longer has it) or found again.
    pub(super) fn set_lost(&mut self, v4: Ipv4Addr, lost: bool) {
        if let Some(ip) = self.by_v4.get_mut(&v4) {
            ip.lost = lost;
        }
    }
}

/// What an unassign took back from one ENI.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Gone {
    /// IPv4 addresses (a /28's among them).
    pub(crate) v4: Vec<Ipv4Addr>,
    /// IPv6 addresses.
    pub(crate) v6: Vec<Ipv6Addr>,
    /// Whole /28 prefixes.
    pub(crate) prefixes: Vec<Ipv4Prefix>,
}

impl Gone {
    /// Nothing was taken back.
    pub(crate) fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv6Addr;

    use super::super::tests::ip10 as ip;
    use super::{Addresses, PoolIp};
    use eniip_cloud::Ipv4Prefix;

    fn v6(n: u16) -> Ipv6Addr {
        Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, n)
    }

    #[test]
    fn an_ipv6_is_known_once_paired_or_unpaired() {
        let mut a = Addresses::new(true);
        a.add_unpaired("eni-1", v6(2));
        assert!(a.add("eni-1", ip(1), Some(v6(1)), true));
        assert!(!a.add("eni-1", ip(1), None, true), "known already");
        // Another's pair is not taken: without one, it is invalid.
        assert!(a.add("eni-1", ip(3), Some(v6(1)), false));
        assert_eq!(a.get(&ip(3)).unwrap().v6(), None);
        assert!(a.get(&ip(3)).unwrap().invalid());
        // Added with its pair: no longer unpaired.
        assert!(a.add("eni-1", ip(2), Some(v6(2)), false));
        assert!(!a.get(&ip(2)).unwrap().invalid());
        assert_eq!(a.unpaired_len(), 0);
        // A pair is never recorded unpaired as well.
        a.add_unpaired("eni-1", v6(1));
        assert_eq!(a.unpaired_len(), 0);
        a.check().unwrap();
        assert_eq!(a.known_v6().len(), 2);
        assert_eq!(a.paired_with(v6(2)).map(PoolIp::v4), Some(ip(2)));
    }

    #[test]
    fn pairing_ends_invalid_and_takes_the_ipv6_off_the_unpaired() {
        let mut a = Addresses::new(true);
        assert!(a.add("eni-1", ip(4), None, false));
        a.add_unpaired("eni-1", v6(4));
        assert_eq!(a.unpaired_on("eni-1"), 1);
        assert!(a.get(&ip(4)).unwrap().invalid());
        assert!(a.pair(ip(4), v6(4)));
        let x = a.get(&ip(4)).unwrap();
        assert_eq!(x.v6(), Some(v6(4)));
        assert!(!x.invalid());
        assert_eq!(a.unpaired_on("eni-1"), 0);
        assert!(!a.pair(ip(4), v6(5)), "it has a pair");
        a.check().unwrap();
        assert!(a.add("eni-1", ip(5), None, false));
        a.validate(ip(5));
        assert!(!a.get(&ip(5)).unwrap().invalid());
    }

    #[test]
    fn a_member_is_marked_only_with_a_prefix_that_contains_it_on_its_eni() {
        let mut a = Addresses::new(false);
        let p: Ipv4Prefix = "10.0.0.16/28".parse().unwrap();
        assert!(a.add("eni-1", ip(17), None, false));
        assert!(!a.set_prefix(ip(17), "eni-2", Some(p)), "another ENI's");
        assert!(a.add("eni-1", ip(40), None, false));
        assert!(!a.set_prefix(ip(40), "eni-1", Some(p)), "not in it");
        assert!(a.set_prefix(ip(17), "eni-1", Some(p)));
        assert_eq!(a.get(&ip(17)).unwrap().prefix(), Some(p));
        a.check().unwrap();
        assert!(a.set_prefix(ip(17), "eni-1", None));
        assert_eq!(a.get(&ip(17)).unwrap().prefix(), None);
    }

    #[test]
    fn flags_and_removal() {
        let mut a = Addresses::new(false);
        a.add("eni-1", ip(1), None, true);
        a.add("eni-1", ip(2), None, false);
        a.add("eni-2", ip(3), None, false);
        assert!(!a.get(&ip(1)).unwrap().invalid(), "single stack");
        a.add_unpaired("eni-1", v6(9));
        a.set_releasing(ip(2), true);
        a.set_lost(ip(3), true);
        assert!(a.get(&ip(2)).unwrap().releasing());
        assert!(a.get(&ip(3)).unwrap().lost());
        assert_eq!(a.on("eni-1").count(), 2);
        a.drop_unpaired_of("eni-1");
        assert_eq!(a.unpaired_len(), 0);
        assert!(a.remove(&ip(2)).is_some());
        assert!(!a.contains(&ip(2)));
        assert_eq!(a.len(), 2);
    }
}
