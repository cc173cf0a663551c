//! Security groups per pod, the allocator's side: which set an `alloc`
//! may ask ([`refusal`]), the sets of the ENIs at start and at each
//! reconcile against what the state files say eniipd gave them
//! ([`recover`], [`restore`], [`observe`]), which ENI of another set can
//! be re-purposed for a set that needs one ([`repurposable`]), and why a
//! set's pod is refused when none can ([`exhausted`]).
//!
//! A pod's address comes only from an ENI whose security groups are
//! exactly its set (the node's `security_groups` when it asked none):
//! the pool keeps each ENI's set ([`SgSets`](crate::pool::SgSets)), and
//! the planner plans each set on its own ENIs. Pure functions here; the
//! actor's hooks call them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use log::{info, warn};

use crate::pool::{choose::not_idle_by_eni, IpState, Observed, PoolState};
use crate::store::{PersistedState, Record};
use eniip_cloud::Eni;
use eniip_protocol::core::{Intent, Owner, SecurityGroupSet, ARG_SECURITY_GROUPS};

/// What the node says of security groups per pod.
#[derive(Debug, Clone, Default)]
pub(crate) struct SetPolicy {
    /// The groups a pod may ask (`pod_security_groups`; `None`: absent).
    pub(crate) allowed: Option<Vec<String>>,
    /// A set other than the node's own with no owner this long gives its
    /// ENIs back (`sg_set_idle_s`).
    pub(crate) idle: Duration,
}

/// When each set other than the node's own last had an owner, a hold or
/// a waiter, as the pool checks saw it: a set unused for `sg_set_idle_s`
/// gives its ENIs back.
#[derive(Debug, Default)]
pub(crate) struct SetUse {
    last_used: BTreeMap<SecurityGroupSet, Instant>,
}

impl SetUse {
    /// Notes which sets are used at `now` (`used`: the sets of owners,
    /// holds and waiters) and returns the ENIs of the sets unused for
    /// `idle` that can go back: settled, with no address in use, kept or
    /// invalid. Never the node's own set (`own`).
    pub(crate) fn idle_enis(
        &mut self,
        pool: &PoolState,
        used: &BTreeSet<SecurityGroupSet>,
        own: Option<&SecurityGroupSet>,
        idle: Duration,
        now: Instant,
    ) -> Vec<String> {
        let given: BTreeSet<&SecurityGroupSet> = pool
            .enis()
            .iter()
            .filter_map(|e| pool.sg_sets().given(e.id()))
            .filter(|s| Some(*s) != own)
            .collect();
        self.last_used.retain(|s, _| given.contains(s));
        for s in given {
            let at = self.last_used.entry(s.clone()).or_insert(now);
            if used.contains(s) {
                *at = now;
            }
        }
        let busy = not_idle_by_eni(pool);
        pool.enis()
            .iter()
            .filter(|e| e.settled() && !e.gone() && !busy.contains_key(e.id()))
            .filter(|e| !pool.sg_sets().changing(e.id()))
            .filter(|e| {
                pool.sg_sets().given(e.id()).is_some_and(|s| {
                    self.last_used
                        .get(s)
                        .is_some_and(|at| now.saturating_duration_since(*at) >= idle)
                })
            })
            .map(|e| e.id().to_string())
            .collect()
    }
}

/// The sets the owners and holds of `pool` are on (by their ENIs).
pub(crate) fn sets_in_use(pool: &PoolState) -> BTreeSet<SecurityGroupSet> {
    let busy = not_idle_by_eni(pool);
    busy.keys()
        .filter_map(|eni| pool.sg_sets().given(eni).cloned())
        .collect()
}

/// Whether some ENI has a set other than the node's own (`own`).
pub(crate) fn other_sets(pool: &PoolState, own: Option<&SecurityGroupSet>) -> bool {
    pool.enis()
        .iter()
        .any(|e| pool.sg_sets().given(e.id()).is_some_and(|g| Some(g) != own))
}

/// Idle addresses that an owner of `set` can be handed now.
pub(crate) fn idle_in_set(pool: &PoolState, set: &SecurityGroupSet) -> usize {
    pool.states()
        .filter(|(ip, s)| {
            *s == IpState::Idle && pool.allocatable(ip) && pool.sg_sets().serves(ip.eni(), set)
        })
        .count()
}

/// The node's own set (`security_groups`), when it has one.
pub(crate) fn default_set(security_groups: &[String]) -> Option<SecurityGroupSet> {
    SecurityGroupSet::from_ids(security_groups.iter().map(String::as_str)).ok()
}

/// Why `intent`'s set is refused, if it is: the key is absent, a group
/// is not in it, or `owner` holds (or waits for) an address of another
/// set (`has`: `Some(None)` the node's own). Begins with the argument,
/// as eniip-cni expects.
pub(crate) fn refusal(
    owner: &Owner,
    intent: &Intent,
    allowed: Option<&[String]>,
    has: Option<Option<&SecurityGroupSet>>,
) -> Option<String> {
    let set = intent.security_groups.as_ref()?;
    if let Some(other) = has.filter(|h| *h != Some(set)) {
        return Some(format!(
            "{ARG_SECURITY_GROUPS}={set}: {owner} holds or waits for an address of {}; release it first",
            other.map_or("the node's own security groups".to_string(), |o| format!("the set {o}"))
        ));
    }
    let Some(allowed) = allowed else {
        return Some(format!(
            "{ARG_SECURITY_GROUPS}={set}: this node allows no security groups per pod (eni.json has no pod_security_groups)"
        ));
    };
    let not: Vec<&str> = set
        .ids()
        .iter()
        .filter(|id| !allowed.contains(id))
        .map(String::as_str)
        .collect();
    (!not.is_empty()).then(|| {
        format!(
            "{ARG_SECURITY_GROUPS}={set}: {} not in this node's pod_security_groups ({})",
            not.join(", "),
            if allowed.is_empty() {
                "none".to_string()
            } else {
                allowed.join(", ")
            }
        )
    })
}

/// An `alloc` asking exactly the node's own set asks nothing new: it is
/// served as one that asked none.
pub(crate) fn normalize(intent: &mut Intent, default: Option<&SecurityGroupSet>) {
    if intent.security_groups.is_some() && intent.security_groups.as_ref() == default {
        intent.security_groups = None;
    }
}

/// After a restart from the state files alone (no OpenAPI yet): each ENI
/// gets the set they recorded; the first reconcile checks them.
pub(crate) fn restore(pool: &mut PoolState, persisted: &PersistedState) {
    let ids: Vec<String> = pool.enis().iter().map(|e| e.id().to_string()).collect();
    for id in ids {
        if let Some(set) = recorded(persisted, &id) {
            pool.sg_sets_mut().give(&id, set);
        }
    }
}

fn recorded(persisted: &PersistedState, eni: &str) -> Option<SecurityGroupSet> {
    persisted
        .eni_sets
        .get(eni)
        .and_then(|g| SecurityGroupSet::from_ids(g.iter().map(String::as_str)).ok())
}

/// At start from the OpenAPI: each ENI in `pool` gets the set the state
/// files recorded, checked against what DescribeNetworkInterfaces says
/// (`enis`); one with no record takes the cloud's, and that is recorded.
/// Sets recorded for ENIs no longer managed are dropped.
pub(crate) fn recover<'a>(
    pool: &mut PoolState,
    persisted: &PersistedState,
    enis: impl Iterator<Item = &'a Eni>,
) -> Vec<Record> {
    restore(pool, persisted);
    let mut records = Vec::new();
    for e in enis {
        if pool.enis().contains(&e.id) {
            records.extend(observe(pool, &e.id, &e.security_group_ids));
        }
    }
    for eni in persisted.eni_sets.keys() {
        if !pool.enis().contains(eni) {
            records.push(Record::eni_set(eni, None));
        }
    }
    records
}

/// The records of the sets given, changed or dropped since the last call.
pub(crate) fn unrecorded(pool: &mut PoolState) -> Vec<Record> {
    pool.sg_sets_mut()
        .take_unrecorded()
        .into_iter()
        .map(|(eni, set)| Record::eni_set(&eni, set.as_ref()))
        .collect()
}

/// What the cloud shows of `eni`'s groups, checked against its set: logs
/// a change out of band (and its end); the record of a set adopted.
pub(crate) fn observe(pool: &mut PoolState, eni: &str, cloud: &[String]) -> Option<Record> {
    match pool.sg_sets_mut().observe(eni, cloud) {
        Observed::Same | Observed::StillChanged => None,
        Observed::Adopted => {
            let set = pool.sg_sets().given(eni).cloned();
            info!(
                "{eni} has the security groups {} (none recorded: taken from the cloud)",
                set.as_ref().map_or("-".to_string(), ToString::to_string)
            );
            Some(Record::eni_set(eni, set.as_ref()))
        }
        Observed::Changed => {
            warn!(
                "{eni}: its security groups were changed out of band to {} (eniipd gave it {}): it serves no new owner until they are again its set",
                shown(cloud),
                pool.sg_sets().given(eni).map_or("-".into(), ToString::to_string)
            );
            None
        }
        Observed::Restored => {
            info!("{eni}: its security groups are again the set eniipd gave it");
            None
        }
    }
}

fn shown(ids: &[String]) -> String {
    if ids.is_empty() {
        "-".into()
    } else {
        ids.join(",")
    }
}

/// `audit`'s lines for the managed ENIs (`enis`, as the OpenAPI shows
/// them) whose groups are not the set eniipd gave them (the node's own,
/// `default`, for one with none recorded); one whose set is being
/// changed is not a difference.
pub(crate) fn audit_lines(pool: &PoolState, enis: &[Eni], default: &[String]) -> Vec<String> {
    let own = default_set(default);
    enis.iter()
        .filter(|e| !pool.sg_sets().changing(&e.id))
        .filter_map(|e| {
            let want = pool.sg_sets().given(&e.id).or(own.as_ref())?;
            let have = SecurityGroupSet::from_ids(e.security_group_ids.iter().map(String::as_str)).ok();
            (have.as_ref() != Some(want)).then(|| {
                let mut have = e.security_group_ids.clone();
                have.sort();
                format!(
                    "eni {} security groups {} differ from the set eniipd gave it, {want}: it serves no new owner until they are again",
                    e.id,
                    shown(&have)
                )
            })
        })
        .collect()
}

/// Managed ENIs (not gone) by the set eniipd gave them (`-`: none known
/// yet), for the metric `eniipd_sg_set_enis`.
pub(crate) fn enis_by_set(pool: &PoolState) -> Vec<(String, u64)> {
    let mut by_set: BTreeMap<String, u64> = BTreeMap::new();
    for e in pool.enis().iter().filter(|e| !e.gone()) {
        let key = pool
            .sg_sets()
            .given(e.id())
            .map_or("-".to_string(), ToString::to_string);
        *by_set.entry(key).or_default() += 1;
    }
    by_set.into_iter().collect()
}

/// An ENI of another set than `want` that can be re-purposed for it: ready
/// with nothing in flight, its groups as eniipd gave them, and no address
/// on it in use, kept or invalid. The one with the fewest addresses.
pub(crate) fn repurposable(pool: &PoolState, want: &SecurityGroupSet) -> Option<String> {
    let busy = not_idle_by_eni(pool);
    pool.enis()
        .iter()
        .filter(|e| e.settled() && !e.gone() && !busy.contains_key(e.id()))
        .filter(|e| {
            let sg = pool.sg_sets();
            sg.given(e.id()).is_some_and(|g| g != want)
                && sg.changed(e.id()).is_none()
                && !sg.changing(e.id())
        })
        .min_by_key(|e| (pool.ips().count_on(e.id()), e.id().to_string()))
        .map(|e| e.id().to_string())
}

/// Why a pod of `want` is refused when its set has no ENI with room, no
/// ENI slot is free and no ENI can be re-purposed: which sets hold the
/// ENIs (the ceiling, `eni_slots`, is the caller's to name through
/// `AllocError::exhausted`). `None` when no ENI serves another set (the
/// usual reason applies).
pub(crate) fn exhausted(
    pool: &PoolState,
    usable_enis: usize,
    want: &SecurityGroupSet,
) -> Option<String> {
    let mut by_set: BTreeMap<String, usize> = BTreeMap::new();
    for e in pool.enis().iter().filter(|e| !e.gone()) {
        let key = match pool.sg_sets().given(e.id()) {
            Some(g) if g == want && pool.sg_sets().changed(e.id()).is_none() => continue,
            Some(g) => g.to_string(),
            None => "-".into(),
        };
        *by_set.entry(key).or_default() += 1;
    }
    let others: usize = by_set.values().sum();
    if others == 0 {
        return None;
    }
    let list: Vec<String> = by_set.iter().map(|(k, n)| format!("{k}: {n}")).collect();
    Some(format!(
        "{others} of {usable_enis} ENIs serve other security-group sets ({}), and none of them is free to re-purpose for {want}",
        list.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(s: &str) -> SecurityGroupSet {
        SecurityGroupSet::parse(s).unwrap()
    }

    fn asking(s: &str) -> Intent {
        Intent {
            security_groups: Some(set(s)),
            ..Intent::default()
        }
    }

    fn refusal(intent: &Intent, allowed: Option<&[String]>) -> Option<String> {
        super::refusal(&Owner::parse("ns/p").unwrap(), intent, allowed, None)
    }

    #[test]
    fn only_allowed_groups_and_the_key_is_named() {
        assert_eq!(refusal(&Intent::default(), None), None);
        let why = refusal(&asking("sg-a"), None).unwrap();
        assert!(why.starts_with("security-groups=sg-a:"), "{why}");
        assert!(why.contains("pod_security_groups"), "{why}");
        let allowed = ["sg-a".to_string(), "sg-b".to_string()];
        assert_eq!(refusal(&asking("sg-b,sg-a"), Some(&allowed)), None);
        let why = refusal(&asking("sg-a,sg-zz"), Some(&allowed)).unwrap();
        assert!(
            why.contains("sg-zz not in this node's pod_security_groups"),
            "{why}"
        );
        // Held of another set: release it first; the same set again is fine.
        let o = Owner::parse("ns/p").unwrap();
        let a = set("sg-a");
        let i = asking("sg-a");
        assert_eq!(super::refusal(&o, &i, Some(&allowed), Some(Some(&a))), None);
        let why = super::refusal(&o, &i, Some(&allowed), Some(None)).unwrap();
        assert!(why.contains("release it first"), "{why}");
    }

    #[test]
    fn asking_the_nodes_own_set_asks_nothing() {
        let own = set("sg-n");
        let mut i = asking("sg-n");
        normalize(&mut i, Some(&own));
        assert!(i.is_empty());
        let mut i = asking("sg-a");
        normalize(&mut i, Some(&own));
        assert_eq!(i.security_groups, Some(set("sg-a")));
    }
}
