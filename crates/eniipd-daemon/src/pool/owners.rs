//! Who holds which address ([`Owners`]): an allocation's owner, its
//! address, the sandbox it was made for, when, and what its `alloc`
//! asked beyond an address.
//!
//! Invariants, kept by the verbs and checked by [`Owners::check`]: one
//! owner, one address, and one address, one owner (the two indexes mirror
//! each other); an allocation's sandbox may move to the owner's new
//! sandbox, its address never does; every generation handed out
//! ([`Owners::take`], [`Owners::renew`]) is above every one handed out or
//! restored before it (the next is above all held).

use std::collections::{btree_map, hash_map, BTreeMap, BTreeSet, HashMap};
use std::net::{Ipv4Addr, Ipv6Addr};

use eniip_protocol::core::{Generation, Hold, Intent, Owner, SandboxId};

/// What `release` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ReleaseOutcome {
    /// The owner held nothing.
    NotHeld,
    /// Held by another sandbox than the one named: nothing changed.
    SandboxMismatch,
    /// Held under another generation than the one named (a newer `alloc`
    /// was answered since): nothing changed.
    Stale,
    /// Released; `hold` is what to persist (reservation / cool-down).
    Released {
        /// The address.
        v4: Ipv4Addr,
        /// Its IPv6 pair.
        v6: Option<Ipv6Addr>,
        /// The reservation or cool-down now on it, if any.
        hold: Option<Hold>,
        /// The owner's older hold that `hold` replaced (an owner keeps at
        /// most one): its address is idle now, and that must be persisted
        /// too. An owner has one while it holds an address only when it
        /// took another than its reservation (one on the vswitch it asked).
        superseded: Option<Ipv4Addr>,
    },
}

/// One owner's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Held {
    v4: Ipv4Addr,
    sandbox: Option<SandboxId>,
    since_ms: u64,
    intent: Intent,
    gen: Generation,
}

impl Held {
    /// Its identity: the generation its latest `alloc` was answered.
    pub(crate) fn gen(&self) -> Generation {
        self.gen
    }

    /// The address.
    pub(crate) fn v4(&self) -> Ipv4Addr {
        self.v4
    }

    /// The sandbox it is held for, if one was named.
    pub(crate) fn sandbox(&self) -> Option<&SandboxId> {
        self.sandbox.as_ref()
    }

    /// When it was handed out (Unix ms).
    pub(crate) fn since_ms(&self) -> u64 {
        self.since_ms
    }

    /// What its `alloc` asked beyond an address.
    pub(crate) fn intent(&self) -> &Intent {
        &self.intent
    }
}

/// Every owner and its address, both ways.
#[derive(Debug, Clone)]
pub(crate) struct Owners {
    by_owner: HashMap<Owner, Held>,
    /// In address order, so the pool can walk it beside its addresses.
    by_v4: BTreeMap<Ipv4Addr, Owner>,
    /// The generation the next `alloc` answered gets.
    next_gen: Generation,
}

impl Default for Owners {
    fn default() -> Owners {
        Owners {
            by_owner: HashMap::new(),
            by_v4: BTreeMap::new(),
            next_gen: Generation::FIRST,
        }
    }
}

impl Owners {
    /// What `owner` holds.
    pub(crate) fn get(&self, owner: &Owner) -> Option<&Held> {
        self.by_owner.get(owner)
    }

    /// Who holds `v4`, and how.
    pub(crate) fn of(&self, v4: &Ipv4Addr) -> Option<(&Owner, &Held)> {
        let owner = self.by_v4.get(v4)?;
        self.by_owner.get(owner).map(|h| (owner, h))
    }

    /// Whether anyone holds `v4`.
    pub(crate) fn holds(&self, v4: &Ipv4Addr) -> bool {
        self.by_v4.contains_key(v4)
    }

    /// Whether `owner` holds its address for `sandbox` (or for no sandbox
    /// when `sandbox` is `None`).
    pub(crate) fn holds_for(&self, owner: &Owner, sandbox: Option<&SandboxId>) -> bool {
        self.by_owner
            .get(owner)
            .is_some_and(|h| h.sandbox.as_ref() == sandbox)
    }

    /// The allocations `gc` releases: owners starting with `prefix` whose
    /// owner and sandbox are both absent from `keep`.
    pub(crate) fn collectable(
        &self,
        prefix: &str,
        keep: &[String],
    ) -> Vec<(Owner, Option<SandboxId>)> {
        let keep: BTreeSet<&str> = keep.iter().map(String::as_str).collect();
        self.by_owner
            .iter()
            .filter(|(o, _)| o.as_str().starts_with(prefix))
            .filter(|(o, h)| {
                !keep.contains(o.as_str())
                    && !h
                        .sandbox
                        .as_ref()
                        .is_some_and(|s| keep.contains(s.as_str()))
            })
            .map(|(o, h)| (o.clone(), h.sandbox.clone()))
            .collect()
    }

    /// Every held address and its owner, in address order.
    pub(crate) fn by_address(&self) -> btree_map::Iter<'_, Ipv4Addr, Owner> {
        self.by_v4.iter()
    }

    /// Every owner and what it holds.
    pub(crate) fn iter(&self) -> hash_map::Iter<'_, Owner, Held> {
        self.by_owner.iter()
    }

    /// Checks the invariants; `Err` names the first violation.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.by_owner.len() != self.by_v4.len() {
            return Err(format!(
                "{} owners hold {} addresses",
                self.by_owner.len(),
                self.by_v4.len()
            ));
        }
        for (owner, h) in &self.by_owner {
            if self.by_v4.get(&h.v4) != Some(owner) {
                return Err(format!("owner index disagrees for {owner}"));
            }
            if h.gen >= self.next_gen {
                return Err(format!(
                    "{owner} holds generation {} but the next is {}",
                    h.gen, self.next_gen
                ));
            }
        }
        Ok(())
    }

    // ---- what only the pool does (it keeps addresses and holds in step) --

    /// Never hands out a generation below `floor` (the store's, at start:
    /// above every one ever recorded).
    pub(super) fn raise_next_gen(&mut self, floor: Generation) {
        self.next_gen = self.next_gen.max(floor);
    }

    /// `owner` takes `v4` for `sandbox` at `since_ms`, having asked
    /// `intent`, under generation `gen` (`None`: a new one). False (and
    /// nothing changed) if `owner` holds an address already or `v4` is
    /// held.
    pub(super) fn take(
        &mut self,
        owner: &Owner,
        v4: Ipv4Addr,
        sandbox: Option<SandboxId>,
        since_ms: u64,
        intent: Intent,
        gen: Option<Generation>,
    ) -> bool {
        if self.by_owner.contains_key(owner) || self.by_v4.contains_key(&v4) {
            return false;
        }
        let gen = match gen {
            Some(g) => {
                self.raise_next_gen(g.next());
                g
            }
            None => self.issue(),
        };
        self.by_v4.insert(v4, owner.clone());
        self.by_owner.insert(
            owner.clone(),
            Held {
                v4,
                sandbox,
                since_ms,
                intent,
                gen,
            },
        );
        true
    }

    fn issue(&mut self) -> Generation {
        let g = self.next_gen;
        self.next_gen = g.next();
        g
    }

    /// `owner`, who holds an address, is answered an `alloc` again: its
    /// allocation is now the newest answer's (what an earlier answer's
    /// release names no longer touches it). Its new generation, or `None`
    /// if it holds nothing.
    pub(super) fn renew(&mut self, owner: &Owner) -> Option<Generation> {
        if !self.by_owner.contains_key(owner) {
            return None;
        }
        let g = self.issue();
        if let Some(h) = self.by_owner.get_mut(owner) {
            h.gen = g;
        }
        Some(g)
    }

    /// `owner`, who holds an address, asks its own stick time again: the
    /// newest ask is kept. False if it holds none or nothing changed.
    pub(super) fn restick(&mut self, owner: &Owner, stick_s: u64) -> bool {
        match self.by_owner.get_mut(owner) {
            Some(h) if h.intent.stick_s != Some(stick_s) => {
                h.intent.stick_s = Some(stick_s);
                true
            }
            _ => false,
        }
    }

    /// Moves `owner`'s allocation to `sandbox`; false if it holds none or
    /// already holds it for that sandbox.
    pub(super) fn move_sandbox(&mut self, owner: &Owner, sandbox: &SandboxId) -> bool {
        match self.by_owner.get_mut(owner) {
            Some(h) if h.sandbox.as_ref() != Some(sandbox) => {
                h.sandbox = Some(sandbox.clone());
                true
            }
            _ => false,
        }
    }

    /// `owner` lets go of its address; what it held.
    pub(super) fn release(&mut self, owner: &Owner) -> Option<Held> {
        let h = self.by_owner.remove(owner)?;
        self.by_v4.remove(&h.v4);
        Some(h)
    }

    /// `v4` leaves the pool: its holder, if any, holds nothing.
    pub(super) fn drop_address(&mut self, v4: &Ipv4Addr) -> Option<Owner> {
        let owner = self.by_v4.remove(v4)?;
        self.by_owner.remove(&owner);
        Some(owner)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{ip10 as ip, owner};
    use super::{Held, Owners};
    use eniip_protocol::core::SandboxId;

    #[test]
    fn one_owner_one_address() {
        let mut o = Owners::default();
        assert!(o.take(&owner("a"), ip(1), None, 5, Default::default(), None));
        assert!(
            !o.take(&owner("a"), ip(2), None, 6, Default::default(), None),
            "a holds one already"
        );
        assert!(
            !o.take(&owner("b"), ip(1), None, 6, Default::default(), None),
            "1 is a's"
        );
        assert!(o.take(&owner("b"), ip(2), None, 6, Default::default(), None));
        o.check().unwrap();
        assert_eq!(
            o.of(&ip(1)).map(|(w, h)| (w.as_str(), h.since_ms())),
            Some(("a", 5))
        );
        assert_eq!(o.get(&owner("b")).map(Held::v4), Some(ip(2)));
        assert_eq!(o.release(&owner("a")).map(|h| h.v4()), Some(ip(1)));
        assert!(!o.holds(&ip(1)));
        assert_eq!(o.release(&owner("a")), None);
        assert_eq!(o.drop_address(&ip(2)), Some(owner("b")));
        assert_eq!(o.iter().count(), 0);
        o.check().unwrap();
    }

    #[test]
    fn every_generation_handed_out_is_new() {
        use eniip_protocol::core::Generation;
        let mut o = Owners::default();
        // Restored from the state: the next is above it.
        let kept = Generation::from_u64(41);
        assert!(o.take(&owner("a"), ip(1), None, 0, Default::default(), Some(kept)));
        assert!(o.take(&owner("b"), ip(2), None, 0, Default::default(), None));
        let b = o.get(&owner("b")).unwrap().gen();
        assert_eq!(b.get(), 42);
        let renewed = o.renew(&owner("b")).unwrap();
        assert!(renewed > b);
        assert_eq!(o.get(&owner("b")).unwrap().gen(), renewed);
        o.release(&owner("b"));
        assert!(o.take(&owner("b"), ip(2), None, 0, Default::default(), None));
        assert!(o.get(&owner("b")).unwrap().gen() > renewed);
        assert_eq!(o.renew(&owner("c")), None);
        o.raise_next_gen(Generation::from_u64(7));
        assert!(o.next_gen.get() > 43, "never lowered");
        o.check().unwrap();
    }

    #[test]
    fn the_sandbox_moves_the_address_does_not() {
        let mut o = Owners::default();
        let (x, y) = (
            SandboxId::parse("x").unwrap(),
            SandboxId::parse("y").unwrap(),
        );
        assert!(o.take(
            &owner("a"),
            ip(1),
            Some(x.clone()),
            0,
            Default::default(),
            None
        ));
        assert!(o.holds_for(&owner("a"), Some(&x)));
        assert!(
            !o.move_sandbox(&owner("a"), &x),
            "same sandbox: nothing moves"
        );
        assert!(o.move_sandbox(&owner("a"), &y));
        assert!(o.holds_for(&owner("a"), Some(&y)));
        assert!(!o.holds_for(&owner("a"), Some(&x)));
        assert_eq!(o.get(&owner("a")).map(Held::v4), Some(ip(1)));
        assert!(!o.move_sandbox(&owner("b"), &y), "b holds nothing");
        o.check().unwrap();
    }

    #[test]
    fn gc_collects_by_prefix_keeping_named_owners_and_sandboxes() {
        let mut o = Owners::default();
        let sb = |s: &str| Some(SandboxId::parse(s).unwrap());
        o.take(
            &owner("k8s/a"),
            ip(1),
            sb("sa"),
            0,
            Default::default(),
            None,
        );
        o.take(
            &owner("k8s/b"),
            ip(2),
            sb("sb"),
            0,
            Default::default(),
            None,
        );
        o.take(&owner("k8s/c"), ip(3), None, 0, Default::default(), None);
        o.take(&owner("other/d"), ip(4), None, 0, Default::default(), None);
        let mut got = o.collectable("k8s/", &["k8s/a".into(), "sb".into()]);
        got.sort_by(|x, y| x.0.as_str().cmp(y.0.as_str()));
        assert_eq!(got, vec![(owner("k8s/c"), None)]);
    }
}
