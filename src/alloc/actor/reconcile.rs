//! The cloud's view against the pool (the maintenance thread reads it; the
//! actor applies it here, without I/O).
//!
//! Invariants:
//! - a view read before an ENI last changed locally (an assign or unassign
//!   ended, it was adopted, freed or rolled back) is never applied to that
//!   ENI: [`Changes`] remembers when each changed, and such an ENI waits
//!   for the next pass. Without this, addresses an unassign had just given
//!   back were adopted again from a stale view and handed out although
//!   gone;
//! - an address an owner holds is never given to anyone else: one the
//!   cloud no longer shows is marked lost (kept for its owner until
//!   released), and one the cloud shows on another ENI while an owner
//!   still holds it here is adopted only once released;
//! - ENIs with calls or operations in flight are left alone.

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use log::{error, info, warn};

use crate::cloud::Ipv4Prefix;
use crate::pool::{EniPhase, PoolState};

use super::super::msg::{CloudEniView, ReadyEni};

/// When each ENI last changed locally.
#[derive(Debug, Default)]
pub(super) struct Changes {
    at: HashMap<String, Instant>,
}

impl Changes {
    /// How long a forgotten ENI's change is remembered: longer than any
    /// cloud read that may still be in flight.
    const KEEP_GONE: Duration = Duration::from_secs(600);

    /// `eni` changed at `now`.
    pub(super) fn touch(&mut self, eni: &str, now: Instant) {
        self.at.insert(eni.to_string(), now);
    }

    /// Whether `eni` changed at or after `t` (a view read at `t` may be
    /// stale for it).
    pub(super) fn since(&self, eni: &str, t: Instant) -> bool {
        self.at.get(eni).is_some_and(|c| *c >= t)
    }

    /// Forgets the changes of ENIs that are no longer `known` and changed
    /// long enough before `now`.
    pub(super) fn prune(&mut self, now: Instant, known: impl Fn(&str) -> bool) {
        let horizon = now.checked_sub(Self::KEEP_GONE);
        self.at
            .retain(|eni, t| known(eni) || horizon.is_none_or(|h| *t > h));
    }
}

/// One reconcile's input.
#[derive(Debug)]
pub(super) struct Pass<'a> {
    /// When the cloud was read.
    pub(super) started: Instant,
    /// The managed ENIs the cloud shows attached.
    pub(super) cloud: &'a [CloudEniView],
    /// Managed ENIs that exist but are detached (`None`: not read).
    pub(super) detached: Option<&'a [String]>,
    /// ENIs with an operation in flight.
    pub(super) busy: &'a [String],
}

/// What the actor does beyond the pool.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Reconciled {
    /// ENIs adopted (id, MAC): they need a worker.
    pub(super) adopted: Vec<(String, String)>,
    /// ENIs the cloud no longer has: their workers stop.
    pub(super) deleted: Vec<String>,
}

/// Applies one pass to the pool.
pub(super) fn reconcile(pool: &mut PoolState, changes: &mut Changes, pass: &Pass) -> Reconciled {
    let mut out = Reconciled::default();
    for view in pass.cloud {
        let r = &view.eni;
        if pass.busy.contains(&r.id) || changes.since(&r.id, pass.started) {
            continue;
        }
        if !pool.enis.contains_key(&r.id) {
            if view.in_metadata {
                adopt(pool, r);
                changes.touch(&r.id, Instant::now());
                out.adopted.push((r.id.clone(), r.mac.clone()));
            }
            continue;
        }
        settled(pool, r);
    }
    out.deleted = withdraw_vanished(pool, changes, pass);
    out
}

/// A managed, attached ENI unknown locally (a creation whose report was
/// lost, or a state file behind the cloud).
fn adopt(pool: &mut PoolState, r: &ReadyEni) {
    warn!(
        "adopting {} (managed, attached, unknown locally) with {} address(es)",
        r.id,
        r.v4.len()
    );
    pool.add_eni(r.pool_eni());
    pool.add_granted(&r.id, &r.v4, &r.v6);
    for p in &r.prefixes {
        pool.add_prefix(&r.id, *p);
    }
}

/// A known ENI with nothing in flight: its addresses against the cloud's.
fn settled(pool: &mut PoolState, r: &ReadyEni) {
    match pool.enis.get_mut(&r.id) {
        Some(local) if local.pending == 0 && local.phase == EniPhase::Ready => {
            // A per-ENI limit the cloud reported is retried once a pass.
            local.at_limit = false;
            // Kept detached over a restart with its vswitch's facts
            // unknown: metadata has them now.
            if local.cidr.is_empty() && !r.cidr.is_empty() {
                local.cidr.clone_from(&r.cidr);
                local.gateway = r.gateway;
            }
        }
        _ => return,
    }
    prefixes(pool, r);
    let cloud_v4 = r.all_v4();
    // Addresses withdrawn while the ENI was away that are back.
    let found: Vec<Ipv4Addr> = pool
        .ips
        .values()
        .filter(|ip| ip.eni == r.id && ip.lost && cloud_v4.contains(&ip.v4))
        .map(|ip| ip.v4)
        .collect();
    for a in found {
        info!("{a} is on {} in the cloud again", r.id);
        pool.mark_found(a);
    }
    // Addresses the cloud has and we do not: adopted (a result lost after
    // the cloud granted it). One an owner still holds on a deleted ENI (the
    // vswitch gave it out again) waits until that owner releases it.
    let mut unknown: Vec<Ipv4Addr> = cloud_v4
        .iter()
        .copied()
        .filter(|a| match pool.ips.get(a) {
            None => true,
            Some(ip) if ip.eni != r.id => {
                warn!(
                    "{a} is on {} in the cloud but still held on {}; adopted once released",
                    r.id, ip.eni
                );
                false
            }
            Some(_) => false,
        })
        .collect();
    // IPv6 the cloud has and we do not (an AssignIpv6Addresses whose
    // answer was lost, or after a restart the pair of an address nobody
    // held, such as the ENI's primary).
    let mut unknown6: Vec<Ipv6Addr> = if pool.dual() {
        let known = pool.known_v6();
        r.v6.iter()
            .copied()
            .filter(|b| !known.contains(b))
            .collect()
    } else {
        Vec::new()
    };
    if !unknown.is_empty() {
        warn!(
            "adopting {} address(es) found on {} but unknown locally",
            unknown.len(),
            r.id
        );
        // In dual stack each takes an unknown IPv6 of the ENI as its pair,
        // the primary first: an address without a pair is invalid and goes
        // back, but a primary cannot go back, so an unpaired primary would
        // stay invalid for the ENI's life (while its IPv6 went back alone).
        unknown.sort_by_key(|a| *a != r.primary_ip);
        let paired = unknown.len().min(unknown6.len());
        let mut pairs = unknown6.drain(..paired);
        for a in unknown {
            pool.add_ip(&r.id, a, pairs.next());
        }
    }
    // IPv6 still without a pair: unpaired, so they go back with the next
    // sweep.
    for b in unknown6 {
        warn!("{b} is on {} but unknown locally; giving it back", r.id);
        pool.add_unpaired_v6(&r.id, b);
    }
    // Addresses we have and the cloud does not: out of circulation.
    let missing: Vec<Ipv4Addr> = pool
        .ips
        .values()
        .filter(|ip| ip.eni == r.id && !ip.releasing && !cloud_v4.contains(&ip.v4))
        .map(|ip| ip.v4)
        .collect();
    for a in missing {
        if pool.is_held(a) {
            error!(
                "{a} is held by an owner but is no longer on {} in the cloud",
                r.id
            );
        } else {
            warn!("{a} is no longer on {} in the cloud; dropped", r.id);
        }
        pool.withdraw(a);
    }
}

/// Prefixes of a settled ENI against the cloud's: one the cloud has and we
/// do not (an assign whose answer was lost) is adopted with its addresses
/// idle, so the next shrink can give it back whole; one we have and the
/// cloud does not is dropped (its addresses then follow the rule for
/// addresses the cloud no longer has).
fn prefixes(pool: &mut PoolState, r: &ReadyEni) {
    let local: Vec<Ipv4Prefix> = pool
        .enis
        .get(&r.id)
        .map(|e| e.prefixes.iter().copied().collect())
        .unwrap_or_default();
    for p in r.prefixes.iter().filter(|p| !local.contains(p)) {
        let clash = p
            .addresses()
            .any(|a| pool.ips.get(&a).is_some_and(|ip| ip.eni != r.id));
        if clash {
            warn!(
                "{p} is on {} in the cloud but some of its addresses are still held on another ENI; adopted once released",
                r.id
            );
            continue;
        }
        warn!("adopting {p} found on {} but unknown locally", r.id);
        pool.add_prefix(&r.id, *p);
    }
    for p in local.iter().filter(|p| !r.prefixes.contains(p)) {
        let releasing = p
            .addresses()
            .any(|a| pool.ips.get(&a).is_some_and(|ip| ip.releasing));
        if !releasing {
            warn!("{p} is no longer on {} in the cloud", r.id);
            pool.remove_prefix(&r.id, *p);
        }
    }
}

/// Managed ENIs the cloud no longer shows attached (an operator detached
/// or deleted one): nothing more is asked of them, their idle addresses
/// leave the pool and their owned ones are never handed out again. If an
/// ENI comes back, the next pass adopts its addresses. Returns the ENIs
/// the cloud no longer has at all.
fn withdraw_vanished(pool: &mut PoolState, changes: &Changes, pass: &Pass) -> Vec<String> {
    let vanished: Vec<String> = pool
        .enis
        .values()
        .filter(|e| !e.gone)
        .filter(|e| e.phase == EniPhase::Ready && e.pending == 0 && !pass.busy.contains(&e.id))
        .filter(|e| !pass.cloud.iter().any(|v| v.eni.id == e.id))
        .filter(|e| !changes.since(&e.id, pass.started))
        .map(|e| e.id.clone())
        .collect();
    let mut deleted = Vec::new();
    for id in vanished {
        if pass.detached.is_some_and(|d| !d.contains(&id)) {
            forget_deleted(pool, &id);
            deleted.push(id);
            continue;
        }
        let on_it: Vec<Ipv4Addr> = pool
            .ips
            .values()
            .filter(|ip| ip.eni == id && !ip.lost)
            .map(|ip| ip.v4)
            .collect();
        if let Some(e) = pool.enis.get_mut(&id) {
            if e.at_limit && on_it.is_empty() {
                continue;
            }
            e.at_limit = true;
        }
        error!(
            "{id} is no longer attached to this instance in the cloud; its {} address(es) are withdrawn",
            on_it.len()
        );
        for a in on_it {
            pool.withdraw(a);
        }
    }
    deleted
}

/// A managed ENI the cloud no longer has at all (deleted behind our back):
/// its slot is free for a new ENI, its idle addresses leave the pool; the
/// addresses owners hold stay theirs until released (never handed out
/// again), then it is forgotten.
fn forget_deleted(pool: &mut PoolState, id: &str) {
    let on_it: Vec<Ipv4Addr> = pool
        .ips
        .values()
        .filter(|ip| ip.eni == id)
        .map(|ip| ip.v4)
        .collect();
    let held = on_it.iter().filter(|a| pool.is_held(**a)).count();
    error!(
        "{id} no longer exists in the cloud: its slot is freed; {held} address(es) still held by owners are kept for them until released, never handed out again"
    );
    for a in on_it {
        pool.withdraw(a);
    }
    pool.unpaired_v6.retain(|_, e| e != id);
    if let Some(e) = pool.enis.get_mut(id) {
        e.gone = true;
        e.at_limit = true;
    }
    pool.drop_empty_gone();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Owner;

    use super::super::tests::{ip, one_empty_eni, one_eni_pool as pool, ENI};

    fn view(id: &str, v4: &[Ipv4Addr]) -> CloudEniView {
        CloudEniView {
            eni: ReadyEni {
                id: id.into(),
                mac: format!("00:16:3e:00:00:0{}", &id[id.len() - 1..]),
                vswitch: "vsw-a".into(),
                cidr: "10.0.0.0/24".into(),
                gateway: ip(253),
                primary_ip: v4[0],
                v4: v4.to_vec(),
                v6: Vec::new(),
                prefixes: Vec::new(),
                prefix_fallback: false,
            },
            in_metadata: true,
        }
    }

    fn pass<'a>(
        started: Instant,
        cloud: &'a [CloudEniView],
        detached: Option<&'a [String]>,
    ) -> Pass<'a> {
        Pass {
            started,
            cloud,
            detached,
            busy: &[],
        }
    }

    fn take(pool: &mut PoolState, v4: Ipv4Addr, owner: &str) {
        pool.take(v4, &Owner::parse(owner).unwrap(), None, 1);
    }

    #[test]
    fn a_view_older_than_a_change_is_not_applied_to_that_eni() {
        let mut pool = pool();
        let mut changes = Changes::default();
        let started = Instant::now();
        changes.touch(ENI, started + Duration::from_millis(1));
        let cloud = [view(ENI, &[ip(1), ip(2)])];
        let r = reconcile(&mut pool, &mut changes, &pass(started, &cloud, None));
        assert_eq!(r, Reconciled::default());
        assert_eq!(pool.ips.len(), 4, "nothing dropped from a stale view");
        // A fresh view applies.
        reconcile(
            &mut pool,
            &mut changes,
            &pass(Instant::now() + Duration::from_millis(2), &cloud, None),
        );
        assert_eq!(
            pool.ips.keys().copied().collect::<Vec<_>>(),
            vec![ip(1), ip(2)]
        );
    }

    #[test]
    fn unknown_addresses_are_adopted_and_missing_owned_ones_kept_for_their_owner() {
        let mut pool = pool();
        take(&mut pool, ip(3), "pod-a");
        let cloud = [view(ENI, &[ip(1), ip(2), ip(5)])];
        reconcile(
            &mut pool,
            &mut Changes::default(),
            &pass(Instant::now(), &cloud, None),
        );
        assert!(pool.ips.contains_key(&ip(5)), "adopted");
        assert!(!pool.ips.contains_key(&ip(4)), "idle and gone: dropped");
        assert!(pool.ips[&ip(3)].lost, "owned and gone: lost, kept");
        assert_eq!(
            pool.owner_ip(&Owner::parse("pod-a").unwrap()).map(|i| i.v4),
            Some(ip(3))
        );
        // It comes back: found again.
        let cloud = [view(ENI, &[ip(1), ip(2), ip(3), ip(5)])];
        reconcile(
            &mut pool,
            &mut Changes::default(),
            &pass(Instant::now(), &cloud, None),
        );
        assert!(!pool.ips[&ip(3)].lost);
        pool.check().unwrap();
    }

    #[test]
    fn an_unknown_attached_eni_is_adopted_once() {
        let mut pool = pool();
        let mut changes = Changes::default();
        let cloud = [
            view(ENI, &[ip(1), ip(2), ip(3), ip(4)]),
            view("eni-2", &[ip(11), ip(12)]),
        ];
        let started = Instant::now();
        let r = reconcile(&mut pool, &mut changes, &pass(started, &cloud, None));
        assert_eq!(
            r.adopted,
            vec![("eni-2".to_string(), "00:16:3e:00:00:02".to_string())]
        );
        assert_eq!(pool.ips_on("eni-2"), 2);
        assert!(changes.since("eni-2", started));
        let r = reconcile(&mut pool, &mut changes, &pass(Instant::now(), &cloud, None));
        assert!(r.adopted.is_empty());
    }

    #[test]
    fn a_detached_eni_is_withdrawn_and_a_deleted_one_forgotten() {
        let mut pool = pool();
        take(&mut pool, ip(2), "pod-a");
        let detached = vec![ENI.to_string()];
        let r = reconcile(
            &mut pool,
            &mut Changes::default(),
            &pass(Instant::now(), &[], Some(&detached)),
        );
        assert!(r.deleted.is_empty());
        assert!(pool.enis[ENI].at_limit);
        assert_eq!(pool.ips.len(), 1, "only the owned address stays");
        assert!(pool.ips[&ip(2)].lost);

        let mut pool = self::pool();
        take(&mut pool, ip(2), "pod-a");
        let r = reconcile(
            &mut pool,
            &mut Changes::default(),
            &pass(Instant::now(), &[], Some(&[])),
        );
        assert_eq!(r.deleted, vec![ENI.to_string()]);
        assert!(pool.enis[ENI].gone, "kept while its owner holds an address");
        pool.release(&Owner::parse("pod-a").unwrap(), None, 2, 0, 0);
        pool.drop_empty_gone();
        assert!(pool.enis.is_empty());
    }

    #[test]
    fn after_a_restart_an_unknown_primary_is_paired_with_the_unknown_ipv6() {
        // A restart served from the state files knows only what was handed
        // out: here two secondaries and their IPv6, not the idle primary.
        let v6 = |n: u16| Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, n);
        let mut pool = one_empty_eni(true);
        pool.add_ip(ENI, ip(2), Some(v6(2)));
        pool.add_ip(ENI, ip(3), Some(v6(3)));
        let mut cloud = view(ENI, &[ip(1), ip(2), ip(3), ip(4)]);
        cloud.eni.v6 = vec![v6(1), v6(2), v6(3)];
        reconcile(
            &mut pool,
            &mut Changes::default(),
            &pass(Instant::now(), &[cloud], None),
        );
        let primary = &pool.ips[&ip(1)];
        assert!(primary.primary);
        assert_eq!(primary.v6, Some(v6(1)), "the primary gets the unknown IPv6");
        assert_eq!(primary.state.name(), "idle");
        assert!(pool.unpaired_v6.is_empty(), "no IPv6 left to go back alone");
        // More unknown IPv4 than IPv6: the secondary is the one left
        // invalid, and it can go back.
        assert_eq!(pool.ips[&ip(4)].state.name(), "invalid");
        let back = pool.invalid_to_release();
        assert_eq!(back, vec![(ENI.to_string(), vec![ip(4)], Vec::new())]);
        pool.check().unwrap();
    }

    #[test]
    fn changes_of_gone_enis_are_forgotten_after_a_while() {
        let mut c = Changes::default();
        let t = Instant::now();
        c.touch("eni-1", t);
        c.touch("eni-2", t);
        c.prune(t + Duration::from_secs(601), |e| e == "eni-1");
        assert!(c.since("eni-1", t));
        assert!(!c.since("eni-2", t));
    }
}
