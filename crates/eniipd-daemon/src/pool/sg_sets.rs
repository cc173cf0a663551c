//! The security groups of the pool's ENIs ([`SgSets`]): for each managed
//! ENI, the set eniipd gave it (at its creation, or when it re-purposed
//! it), and what the cloud shows when that differs (changed out of band).
//!
//! Invariants, kept by the verbs and checked by the unit tests:
//! - an ENI serves an owner only when its set is exactly the owner's,
//!   the cloud shows that set, and no change of its set is in flight
//!   ([`SgSets::serves`]); so an ENI changed out of band serves no new
//!   owner until its groups are again the set eniipd gave it (owners
//!   keep their addresses: nothing here takes one back);
//! - a change in flight ([`SgSets::begin_change`]) ends once, with the
//!   new set on success or the old one kept on failure.

use std::collections::{BTreeMap, BTreeSet};

use eniip_protocol::core::SecurityGroupSet;

/// One ENI's sets.
#[derive(Debug, Clone, PartialEq, Eq)]
struct EniSet {
    /// What eniipd gave it.
    given: SecurityGroupSet,
    /// What the cloud shows instead (sorted), when it differs.
    cloud: Option<Vec<String>>,
    /// Being changed to this set (ModifyNetworkInterfaceAttribute).
    changing: Option<SecurityGroupSet>,
}

/// The set of each managed ENI, by id.
#[derive(Debug, Clone, Default)]
pub(crate) struct SgSets {
    by_eni: BTreeMap<String, EniSet>,
    /// ENIs whose set changed since [`SgSets::take_unrecorded`] last ran.
    unrecorded: BTreeSet<String>,
    /// The node's own set: what an ENI with none recorded serves.
    default: Option<SecurityGroupSet>,
}

/// What [`SgSets::observe`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Observed {
    /// As eniipd gave it (again).
    Same,
    /// Unknown until now: its set is what the cloud shows.
    Adopted,
    /// Changed out of band (newly so).
    Changed,
    /// Still changed out of band.
    StillChanged,
    /// Back to what eniipd gave it.
    Restored,
}

impl SgSets {
    /// The node's own set (`security_groups`): an ENI with no set yet
    /// serves it.
    pub(crate) fn set_default(&mut self, default: Option<SecurityGroupSet>) {
        self.default = default;
    }

    /// `eni` has `set`, as eniipd gave it (created or re-purposed).
    pub(crate) fn give(&mut self, eni: &str, set: SecurityGroupSet) {
        self.unrecorded.insert(eni.to_string());
        self.by_eni.insert(
            eni.to_string(),
            EniSet {
                given: set,
                cloud: None,
                changing: None,
            },
        );
    }

    /// What the cloud shows for `eni`, checked against what eniipd gave
    /// it; an ENI with no set yet takes the cloud's (when it is one).
    pub(crate) fn observe(&mut self, eni: &str, cloud: &[String]) -> Observed {
        let shown = SecurityGroupSet::from_ids(cloud.iter().map(String::as_str)).ok();
        let Some(e) = self.by_eni.get_mut(eni) else {
            return match shown {
                Some(s) => {
                    self.give(eni, s);
                    Observed::Adopted
                }
                None => Observed::Same,
            };
        };
        if e.changing.is_some() {
            // Its own change is in flight: the cloud may show either.
            return Observed::Same;
        }
        let same = shown.as_ref() == Some(&e.given);
        let mut sorted = cloud.to_vec();
        sorted.sort();
        match (same, e.cloud.is_some()) {
            (true, false) => Observed::Same,
            (true, true) => {
                e.cloud = None;
                Observed::Restored
            }
            (false, was) => {
                e.cloud = Some(sorted);
                if was {
                    Observed::StillChanged
                } else {
                    Observed::Changed
                }
            }
        }
    }

    /// `eni` is no longer managed.
    pub(crate) fn remove(&mut self, eni: &str) {
        if self.by_eni.remove(eni).is_some() {
            self.unrecorded.insert(eni.to_string());
        }
    }

    /// The ENIs whose set changed since the last call, with their set now
    /// (`None`: no longer managed), for the state files.
    pub(crate) fn take_unrecorded(&mut self) -> Vec<(String, Option<SecurityGroupSet>)> {
        std::mem::take(&mut self.unrecorded)
            .into_iter()
            .map(|id| {
                let set = self.given(&id).cloned();
                (id, set)
            })
            .collect()
    }

    /// Whether `eni` may hand an address to an owner of `want`.
    pub(crate) fn serves(&self, eni: &str, want: &SecurityGroupSet) -> bool {
        match self.by_eni.get(eni) {
            Some(e) => &e.given == want && e.cloud.is_none() && e.changing.is_none(),
            None => self.default.as_ref() == Some(want),
        }
    }

    /// The set eniipd gave `eni`.
    pub(crate) fn given(&self, eni: &str) -> Option<&SecurityGroupSet> {
        self.by_eni.get(eni).map(|e| &e.given)
    }

    /// What the cloud shows for `eni` instead of its set, when it was
    /// changed out of band.
    pub(crate) fn changed(&self, eni: &str) -> Option<&[String]> {
        self.by_eni.get(eni).and_then(|e| e.cloud.as_deref())
    }

    /// Whether a change of `eni`'s set is in flight.
    pub(crate) fn changing(&self, eni: &str) -> bool {
        self.by_eni.get(eni).is_some_and(|e| e.changing.is_some())
    }

    /// Whether some ENI is being changed to `to`.
    pub(crate) fn changing_to(&self, to: &SecurityGroupSet) -> bool {
        self.by_eni
            .values()
            .any(|e| e.changing.as_ref() == Some(to))
    }

    /// A change of `eni`'s set to `to` begins: it serves nobody until it
    /// ends. False when it has no set or a change is already in flight.
    pub(crate) fn begin_change(&mut self, eni: &str, to: SecurityGroupSet) -> bool {
        match self.by_eni.get_mut(eni) {
            Some(e) if e.changing.is_none() => {
                e.changing = Some(to);
                true
            }
            _ => false,
        }
    }

    /// The change of `eni`'s set ended: `Some(set)` it has that set now,
    /// `None` it failed and keeps its old one.
    pub(crate) fn end_change(&mut self, eni: &str, to: Option<SecurityGroupSet>) {
        if let Some(e) = self.by_eni.get_mut(eni) {
            e.changing = None;
            if let Some(s) = to {
                e.given = s;
                e.cloud = None;
                self.unrecorded.insert(eni.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(s: &str) -> SecurityGroupSet {
        SecurityGroupSet::parse(s).unwrap()
    }

    fn ids(s: &str) -> Vec<String> {
        s.split(',').map(String::from).collect()
    }

    #[test]
    fn serves_only_its_exact_set_as_the_cloud_shows_it() {
        let mut s = SgSets::default();
        s.give("eni-1", set("sg-a,sg-b"));
        assert!(s.serves("eni-1", &set("sg-b,sg-a")));
        assert!(!s.serves("eni-1", &set("sg-a")));
        assert!(!s.serves("eni-2", &set("sg-a")), "no set: serves nobody");
        s.set_default(Some(set("sg-n")));
        assert!(s.serves("eni-2", &set("sg-n")), "but the node's own");
        assert_eq!(s.observe("eni-1", &ids("sg-b,sg-a")), Observed::Same);
        assert_eq!(s.observe("eni-1", &ids("sg-a")), Observed::Changed);
        assert!(!s.serves("eni-1", &set("sg-a,sg-b")));
        assert!(!s.serves("eni-1", &set("sg-a")), "nor the cloud's set");
        assert_eq!(s.changed("eni-1"), Some(&ids("sg-a")[..]));
        assert_eq!(s.observe("eni-1", &ids("sg-a")), Observed::StillChanged);
        assert_eq!(s.observe("eni-1", &ids("sg-a,sg-b")), Observed::Restored);
        assert!(s.serves("eni-1", &set("sg-a,sg-b")));
    }

    #[test]
    fn unknown_enis_adopt_the_cloud_and_changes_end_once() {
        let mut s = SgSets::default();
        assert_eq!(s.observe("eni-1", &ids("sg-c")), Observed::Adopted);
        assert_eq!(s.given("eni-1"), Some(&set("sg-c")));
        assert!(s.begin_change("eni-1", set("sg-d")));
        assert!(s.changing_to(&set("sg-d")));
        assert!(!s.begin_change("eni-1", set("sg-e")));
        assert!(!s.serves("eni-1", &set("sg-c")));
        assert_eq!(s.observe("eni-1", &ids("sg-d")), Observed::Same);
        s.end_change("eni-1", Some(set("sg-d")));
        assert!(s.serves("eni-1", &set("sg-d")));
        assert!(s.begin_change("eni-1", set("sg-e")));
        s.end_change("eni-1", None);
        assert!(!s.changing_to(&set("sg-e")));
        assert!(s.serves("eni-1", &set("sg-d")));
        s.remove("eni-1");
        assert_eq!(s.given("eni-1"), None);
    }
}
