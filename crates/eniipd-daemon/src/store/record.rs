//! What is stored: allocations (owner -> address) and holds (released
//! addresses kept for their last owner or from other owners), changed by
//! [`Record`]s. `apply` is total and deterministic, so replaying the log
//! always rebuilds the same state.

use std::collections::{BTreeMap, HashSet};
use std::net::{Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

/// An address held by an owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    /// The owner key.
    pub owner: String,
    /// The sandbox that holds it, if one was named.
    #[serde(default)]
    pub sandbox: Option<String>,
    /// The IPv4 address.
    pub ipv4: Ipv4Addr,
    /// The IPv6 pair (dual stack).
    #[serde(default)]
    pub ipv6: Option<Ipv6Addr>,
    /// The /80 of its ENI `ipv6` was carved from (`x:x::/80`), when it
    /// was (dual stack, prefix mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv6_prefix: Option<String>,
    /// The ENI it is on.
    pub eni: String,
    /// When it was handed out (Unix ms).
    pub at_ms: u64,
    /// Its generation (0, not written: recorded by an eniipd without
    /// them).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gen: u64,
    /// The sandbox's network, when eniip-cni named it (for the reaper).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attach: Option<eniip_protocol::core::Attachment>,
    /// What its `alloc` asked beyond an address (written only when it
    /// asked something: a file of an older eniipd reads as asking
    /// nothing, and one that asks nothing is written as before).
    #[serde(flatten)]
    pub asked: Asked,
}

/// What an allocation's `alloc` asked (a pod's annotations), as stored:
/// keys beside the allocation's own, each only when it asked it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Asked {
    /// The vswitch asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vswitch: Option<String>,
    /// The owner's own stick time (seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stick_s: Option<u64>,
    /// IPv4 only (its `ipv6` is its pair, which it is not answered).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ipv4_only: bool,
    /// The security-group set asked (`eniipd/security-groups`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_groups: Option<Vec<String>>,
}

/// A released address kept for its last owner (`reserved_until_ms`) and/or
/// from other owners (`cooling_until_ms`). `last_owner: None` is a
/// quarantine after a state rebuild.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    /// The IPv4 address.
    pub ipv4: Ipv4Addr,
    /// Its IPv6 pair.
    #[serde(default)]
    pub ipv6: Option<Ipv6Addr>,
    /// The /80 `ipv6` was carved from, when it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv6_prefix: Option<String>,
    /// The ENI it is on.
    pub eni: String,
    /// Who may take it back.
    #[serde(default)]
    pub last_owner: Option<String>,
    /// End of the reservation (Unix ms, 0 = none).
    #[serde(default)]
    pub reserved_until_ms: u64,
    /// End of the cool-down (Unix ms, 0 = none).
    #[serde(default)]
    pub cooling_until_ms: u64,
}

/// One change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Record {
    /// `allocations[owner] = it`; any hold on its address ends.
    Alloc(Allocation),
    /// The owner's allocation ends; the hold, if any, starts. An empty
    /// owner releases nothing and only records the hold (quarantine).
    Release {
        /// Whose.
        owner: String,
        /// The hold to record.
        hold: Option<Hold>,
    },
    /// A hold ends.
    ClearHold {
        /// Its address.
        ipv4: Ipv4Addr,
    },
    /// An allocation is dropped (the cloud no longer has its address).
    Forget {
        /// Whose.
        owner: String,
    },
    /// The security groups eniipd gave an ENI (`None`: it is no longer
    /// managed). A file of an older eniipd has none: its ENIs take the
    /// groups the cloud shows.
    EniSet {
        /// Which.
        eni: String,
        /// Its groups, sorted.
        security_groups: Option<Vec<String>>,
    },
    /// The node starts (`true`) or ends (`false`) draining (`drain`,
    /// `undrain`).
    Drain {
        /// Draining from now on.
        on: bool,
    },
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Everything stored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PersistedState {
    /// By owner.
    pub allocations: BTreeMap<String, Allocation>,
    /// By address.
    pub holds: BTreeMap<Ipv4Addr, Hold>,
    /// Above every allocation generation ever recorded, the released
    /// ones' too: where the next eniipd starts handing them out (0, not
    /// written: no generation recorded yet).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub next_gen: u64,
    /// The security groups eniipd gave each managed ENI, by ENI (none
    /// written: no set recorded yet).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub eni_sets: BTreeMap<String, Vec<String>>,
    /// The node is draining (not written when it is not).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub draining: bool,
}

impl PersistedState {
    /// Applies one record.
    pub fn apply(&mut self, r: &Record) {
        match r {
            Record::Alloc(a) => {
                self.next_gen = self.next_gen.max(a.gen.saturating_add(1));
                self.holds.remove(&a.ipv4);
                self.allocations.insert(a.owner.clone(), a.clone());
            }
            Record::Release { owner, hold } => {
                if !owner.is_empty() {
                    self.allocations.remove(owner);
                }
                if let Some(h) = hold {
                    self.holds.insert(h.ipv4, h.clone());
                }
            }
            Record::ClearHold { ipv4 } => {
                self.holds.remove(ipv4);
            }
            Record::Forget { owner } => {
                self.allocations.remove(owner);
            }
            Record::EniSet {
                eni,
                security_groups,
            } => match security_groups {
                Some(g) => {
                    self.eni_sets.insert(eni.clone(), g.clone());
                }
                None => {
                    self.eni_sets.remove(eni);
                }
            },
            Record::Drain { on } => self.draining = *on,
        }
    }

    /// Checks that no address is held twice (by two owners, or by an owner
    /// and a hold).
    pub fn check(&self) -> Result<(), String> {
        let mut v4 = HashSet::new();
        let mut v6 = HashSet::new();
        for a in self.allocations.values() {
            if !v4.insert(a.ipv4) {
                return Err(format!("{} is allocated twice", a.ipv4));
            }
            if let Some(b) = a.ipv6 {
                if !v6.insert(b) {
                    return Err(format!("{b} is allocated twice"));
                }
            }
        }
        for h in self.holds.values() {
            if v4.contains(&h.ipv4) {
                return Err(format!("{} is both allocated and held", h.ipv4));
            }
        }
        Ok(())
    }

    /// Makes the state pass [`check`](Self::check) the conservative way,
    /// for a rebuild from damaged files: every allocation whose address is
    /// also claimed by another is dropped (neither claimant can be trusted,
    /// and the address is then quarantined as one with no known owner), and
    /// holds on allocated addresses end. Returns what was dropped.
    pub(crate) fn drop_collisions(&mut self) -> Vec<String> {
        let mut claims4: BTreeMap<Ipv4Addr, usize> = BTreeMap::new();
        let mut claims6: BTreeMap<Ipv6Addr, usize> = BTreeMap::new();
        for a in self.allocations.values() {
            *claims4.entry(a.ipv4).or_default() += 1;
            if let Some(b) = a.ipv6 {
                *claims6.entry(b).or_default() += 1;
            }
        }
        let mut dropped = Vec::new();
        self.allocations.retain(|owner, a| {
            let twice = claims4[&a.ipv4] > 1 || a.ipv6.is_some_and(|b| claims6[&b] > 1);
            if twice {
                dropped.push(format!("{owner}: {} is claimed twice", a.ipv4));
            }
            !twice
        });
        let allocated: HashSet<Ipv4Addr> = self.allocations.values().map(|a| a.ipv4).collect();
        self.holds.retain(|ip, _| !allocated.contains(ip));
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(owner: &str, ip: &str) -> Allocation {
        Allocation {
            owner: owner.into(),
            sandbox: None,
            ipv4: ip.parse().unwrap(),
            ipv6: None,
            ipv6_prefix: None,
            eni: "eni-1".into(),
            at_ms: 1,
            gen: 0,
            attach: None,
            asked: Asked::default(),
        }
    }

    #[test]
    fn apply_semantics() {
        let mut s = PersistedState::default();
        s.apply(&Record::Alloc(alloc("a", "10.0.0.1")));
        s.apply(&Record::Alloc(alloc("b", "10.0.0.2")));
        let hold = Hold {
            ipv4: "10.0.0.1".parse().unwrap(),
            ipv6: None,
            ipv6_prefix: None,
            eni: "eni-1".into(),
            last_owner: Some("a".into()),
            reserved_until_ms: 5,
            cooling_until_ms: 0,
        };
        s.apply(&Record::Release {
            owner: "a".into(),
            hold: Some(hold.clone()),
        });
        assert!(!s.allocations.contains_key("a"));
        assert_eq!(s.holds.len(), 1);
        s.check().unwrap();
        // Re-allocating the held address ends the hold.
        s.apply(&Record::Alloc(alloc("c", "10.0.0.1")));
        assert!(s.holds.is_empty());
        s.apply(&Record::Forget { owner: "b".into() });
        s.apply(&Record::ClearHold {
            ipv4: "10.9.9.9".parse().unwrap(),
        });
        assert_eq!(s.allocations.keys().collect::<Vec<_>>(), vec!["c"]);
        // A generation recorded stays above, the allocation gone or not.
        s.apply(&Record::Alloc(Allocation {
            gen: 9,
            ..alloc("d", "10.0.0.4")
        }));
        s.apply(&Record::Release {
            owner: "d".into(),
            hold: None,
        });
        s.apply(&Record::Alloc(Allocation {
            gen: 3,
            ..alloc("e", "10.0.0.5")
        }));
        assert_eq!(s.next_gen, 10);
        s.apply(&Record::Forget { owner: "e".into() });
        // A quarantine hold releases nobody.
        s.apply(&Record::Release {
            owner: String::new(),
            hold: Some(Hold {
                last_owner: None,
                ..hold
            }),
        });
        assert_eq!(s.allocations.len(), 1);
        assert!(s.check().is_err(), "10.0.0.1 is now allocated and held");
        // A drain is kept until an undrain.
        s.apply(&Record::Drain { on: true });
        s.apply(&Record::Forget { owner: "c".into() });
        assert!(s.draining);
        s.apply(&Record::Drain { on: false });
        assert!(!s.draining);
    }

    #[test]
    fn eni_sets_are_kept_and_dropped_and_old_files_have_none() {
        let mut s: PersistedState =
            serde_json::from_str(r#"{"allocations":{},"holds":{}}"#).unwrap();
        assert!(s.eni_sets.is_empty());
        let set = Record::EniSet {
            eni: "eni-1".into(),
            security_groups: Some(vec!["sg-a".into()]),
        };
        let text = serde_json::to_string(&set).unwrap();
        s.apply(&serde_json::from_str(&text).unwrap());
        assert_eq!(s.eni_sets["eni-1"], ["sg-a"]);
        assert!(serde_json::to_string(&s).unwrap().contains("eni_sets"));
        s.apply(&Record::EniSet {
            eni: "eni-1".into(),
            security_groups: None,
        });
        assert!(s.eni_sets.is_empty());
        assert!(!serde_json::to_string(&s).unwrap().contains("eni_sets"));
    }

    #[test]
    fn double_allocation_is_caught() {
        let mut s = PersistedState::default();
        s.apply(&Record::Alloc(alloc("a", "10.0.0.1")));
        s.apply(&Record::Alloc(alloc("b", "10.0.0.1")));
        assert!(s.check().is_err());
    }

    #[test]
    fn drop_collisions_keeps_only_what_one_claimant_holds() {
        let mut s = PersistedState::default();
        s.apply(&Record::Alloc(alloc("a", "10.0.0.1")));
        s.apply(&Record::Alloc(alloc("b", "10.0.0.1")));
        s.apply(&Record::Alloc(alloc("c", "10.0.0.2")));
        s.holds.insert(
            "10.0.0.2".parse().unwrap(),
            Hold {
                ipv4: "10.0.0.2".parse().unwrap(),
                ipv6: None,
                ipv6_prefix: None,
                eni: "eni-1".into(),
                last_owner: None,
                reserved_until_ms: 0,
                cooling_until_ms: 1,
            },
        );
        assert!(s.check().is_err());
        let dropped = s.drop_collisions();
        assert_eq!(dropped.len(), 2, "{dropped:?}");
        assert_eq!(s.allocations.keys().collect::<Vec<_>>(), ["c"]);
        assert!(s.holds.is_empty());
        assert!(s.check().is_ok());
    }
}
