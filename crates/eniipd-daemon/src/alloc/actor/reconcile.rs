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
//!   still holds it here is adopted only once released, then as that
//!   ENI's own (its primary, if the cloud made it so); in dual stack an
//!   IPv6 of that ENI is left alone meanwhile, to be its pair;
//! - ENIs with calls or operations in flight are left alone.

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use log::{error, info, warn};

use crate::pool::{PoolIp, PoolState};
use eniip_cloud::{Ipv4Prefix, Ipv6Prefix};

use super::super::mailbox::{CloudEniView, ReadyEni};

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
    /// The first pass after a restart from the state files: the addresses
    /// they do not hold (the idle ones) are found now, as expected.
    pub(super) restoring: bool,
}

/// What the actor does beyond the pool.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Reconciled {
    /// ENIs adopted (id, MAC): they need a worker.
    pub(super) adopted: Vec<(String, String)>,
    /// ENIs the cloud no longer has: their workers stop.
    pub(super) deleted: Vec<String>,
    /// ENIs whose /80 the cloud no longer shows, with none left: their
    /// workers forget it.
    pub(super) v6_gone: Vec<String>,
}

/// Applies one pass to the pool.
pub(super) fn reconcile(pool: &mut PoolState, changes: &mut Changes, pass: &Pass) -> Reconciled {
    let mut out = Reconciled::default();
    for view in pass.cloud {
        let r = &view.eni;
        let id = r.id();
        if pass.busy.iter().any(|b| b == id) || changes.since(id, pass.started) {
            continue;
        }
        if !pool.enis().contains(id) {
            if view.in_metadata {
                adopt(pool, r);
                changes.touch(id, Instant::now());
                out.adopted.push((id.to_string(), r.link.mac.clone()));
            }
            continue;
        }
        if settled(pool, r, pass.restoring) {
            out.v6_gone.push(id.to_string());
        }
    }
    out.deleted = withdraw_vanished(pool, changes, pass);
    out
}

/// A managed, attached ENI unknown locally (a creation whose report was
/// lost, or a state file behind the cloud).
fn adopt(pool: &mut PoolState, r: &ReadyEni) {
    warn!(
        "adopting {} (managed, attached, unknown locally) with {} address(es)",
        r.id(),
        r.v4.len()
    );
    pool.add_eni(r.link.clone(), r.primary_ip);
    // Its /80 first: its addresses carve their IPv6 from it.
    if pool.dual() {
        for p in &r.v6_prefixes {
            pool.add_v6_prefix(r.id(), *p);
        }
    }
    pool.add_granted(r.id(), &r.v4, &r.v6);
    for p in &r.prefixes {
        pool.add_prefix(r.id(), *p);
    }
}

/// A known ENI with nothing in flight: its addresses against the cloud's.
/// True when it lost its last /80.
fn settled(pool: &mut PoolState, r: &ReadyEni, restoring: bool) -> bool {
    let id = r.id();
    // A per-ENI limit the cloud reported is retried once a pass.
    if !pool.enis_mut().retry_limit(id) {
        return false;
    }
    // Kept detached over a restart with its vswitch's facts unknown:
    // metadata has them now.
    pool.enis_mut()
        .learn_vswitch(id, &r.link.cidr, r.link.gateway);
    prefixes(pool, r);
    let v6_gone = v6_prefixes(pool, r);
    if pool.dual() {
        // The cloud is the truth: an IPv6 it does not hold for the ENI
        // (of a /80 taken back, also one restored from the state files)
        // is never handed out again.
        let stale = pool.drop_v6_not_held(id, |b| {
            r.v6.contains(&b) || r.v6_prefixes.iter().any(|p| p.contains(b))
        });
        for (a, b) in stale {
            warn!("{b}, the IPv6 of {a}, is no longer on {id} in the cloud: dropped");
        }
    }
    let cloud_v4 = r.all_v4();
    // Addresses withdrawn while the ENI was away that are back.
    let found: Vec<Ipv4Addr> = pool
        .ips()
        .on(id)
        .filter(|ip| ip.lost() && cloud_v4.contains(&ip.v4()))
        .map(PoolIp::v4)
        .collect();
    for a in found {
        info!("{a} is on {id} in the cloud again");
        pool.mark_found(a);
    }
    // Addresses the cloud has and we do not: adopted (a result lost after
    // the cloud granted it). One an owner still holds on a deleted ENI (the
    // vswitch gave it out again) waits until that owner releases it.
    let mut waiting = 0;
    let mut unknown: Vec<Ipv4Addr> = cloud_v4
        .iter()
        .copied()
        .filter(|a| match pool.ip(*a) {
            None => true,
            Some(ip) if ip.eni() != id => {
                warn!(
                    "{a} is on {id} in the cloud but still held on {}; adopted once released",
                    ip.eni()
                );
                // A /28's members have no IPv6 pair to keep.
                waiting += usize::from(r.v4.contains(a));
                false
            }
            Some(_) => false,
        })
        .collect();
    // IPv6 the cloud has and we do not (an AssignIpv6Addresses whose
    // answer was lost, or after a restart the pair of an address nobody
    // held, such as the ENI's primary).
    let mut unknown6: Vec<Ipv6Addr> = if pool.dual() {
        let known = pool.ips().known_v6();
        r.v6.iter()
            .copied()
            .filter(|b| !known.contains(b))
            .collect()
    } else {
        Vec::new()
    };
    if !unknown.is_empty() {
        if restoring {
            // The state files hold what was handed out, not the idle rest.
            info!(
                "restored {} address(es) on {id} that the state files do not hold (idle before the restart)",
                unknown.len()
            );
        } else {
            warn!(
                "adopting {} address(es) found on {id} but unknown locally",
                unknown.len()
            );
        }
        // In dual stack each takes an unknown IPv6 of the ENI as its pair,
        // the primary first: an address without a pair is invalid and goes
        // back, but a primary cannot go back, so an unpaired primary would
        // stay invalid for the ENI's life (while its IPv6 went back alone).
        unknown.sort_by_key(|a| *a != r.primary_ip);
        let paired = unknown.len().min(unknown6.len());
        let mut pairs = unknown6.drain(..paired);
        for a in unknown {
            pool.add_ip(id, a, pairs.next());
        }
    }
    // IPv6 still without a pair: unpaired, so they go back with the next
    // sweep; but as many as there are addresses waiting for their old
    // owners stay unknown, the pairs those are adopted with once released
    // (the ENI's primary among them: it cannot go back, so without its
    // IPv6 it would stay invalid for the ENI's life).
    unknown6.truncate(unknown6.len().saturating_sub(waiting));
    for b in unknown6 {
        warn!("{b} is on {id} but unknown locally; giving it back");
        pool.add_unpaired_v6(id, b);
    }
    // Addresses we have and the cloud does not: out of circulation.
    let missing: Vec<Ipv4Addr> = pool
        .ips()
        .on(id)
        .filter(|ip| !ip.releasing() && !cloud_v4.contains(&ip.v4()))
        .map(PoolIp::v4)
        .collect();
    for a in missing {
        if pool.is_held(a) {
            error!("{a} is held by an owner but is no longer on {id} in the cloud");
        } else {
            warn!("{a} is no longer on {id} in the cloud; dropped");
        }
        pool.withdraw(a);
    }
    v6_gone
}

/// Prefixes of a settled ENI against the cloud's: one the cloud has and we
/// do not (an assign whose answer was lost) is adopted with its addresses
/// idle, so the next shrink can give it back whole; one we have and the
/// cloud does not is dropped (its addresses then follow the rule for
/// addresses the cloud no longer has).
fn prefixes(pool: &mut PoolState, r: &ReadyEni) {
    let id = r.id();
    let local: Vec<Ipv4Prefix> = pool
        .eni(id)
        .map(|e| e.prefixes().iter().copied().collect())
        .unwrap_or_default();
    for p in r.prefixes.iter().filter(|p| !local.contains(p)) {
        let clash = p
            .addresses()
            .any(|a| pool.ip(a).is_some_and(|ip| ip.eni() != id));
        if clash {
            warn!(
                "{p} is on {id} in the cloud but some of its addresses are still held on another ENI; adopted once released"
            );
            continue;
        }
        warn!("adopting {p} found on {id} but unknown locally");
        pool.add_prefix(id, *p);
    }
    for p in local.iter().filter(|p| !r.prefixes.contains(p)) {
        let releasing = p
            .addresses()
            .any(|a| pool.ip(a).is_some_and(PoolIp::releasing));
        if !releasing {
            warn!("{p} is no longer on {id} in the cloud");
            pool.remove_prefix(id, *p);
        }
    }
}

/// The /80s of a settled ENI against the cloud's (dual stack): one the
/// cloud has and we do not (an AssignIpv6Addresses whose answer was lost)
/// is adopted, so its addresses carve from it; one we have and the cloud
/// does not is forgotten: no IPv6 of it is handed out again (the carved
/// IPv6 owners hold stay theirs until released), and idle addresses carve
/// from the ENI's next /80 or wait for a new one. True when the ENI lost
/// its last /80.
fn v6_prefixes(pool: &mut PoolState, r: &ReadyEni) -> bool {
    if !pool.dual() {
        return false;
    }
    let id = r.id();
    let local: Vec<Ipv6Prefix> = pool
        .eni(id)
        .map(|e| e.v6_prefixes().to_vec())
        .unwrap_or_default();
    for p in r.v6_prefixes.iter().filter(|p| !local.contains(p)) {
        warn!("adopting the IPv6 prefix {p} found on {id} but unknown locally");
        pool.add_v6_prefix(id, *p);
    }
    let mut removed = false;
    for p in local.iter().filter(|p| !r.v6_prefixes.contains(p)) {
        warn!("the IPv6 prefix {p} is no longer on {id} in the cloud: none of its addresses is handed out again");
        pool.remove_v6_prefix(id, *p);
        removed = true;
    }
    removed && pool.eni(id).is_some_and(|e| e.carve_prefix().is_none())
}

/// Managed ENIs the cloud no longer shows attached (an operator detached
/// or deleted one): nothing more is asked of them, their idle addresses
/// leave the pool and their owned ones are never handed out again. If an
/// ENI comes back, the next pass adopts its addresses. Returns the ENIs
/// the cloud no longer has at all.
fn withdraw_vanished(pool: &mut PoolState, changes: &Changes, pass: &Pass) -> Vec<String> {
    let vanished: Vec<String> = pool
        .enis()
        .iter()
        .filter(|e| !e.gone() && e.settled())
        .filter(|e| !pass.busy.iter().any(|b| b == e.id()))
        .filter(|e| !pass.cloud.iter().any(|v| v.eni.id() == e.id()))
        .filter(|e| !changes.since(e.id(), pass.started))
        .map(|e| e.id().to_string())
        .collect();
    let mut deleted = Vec::new();
    for id in vanished {
        if pass.detached.is_some_and(|d| !d.contains(&id)) {
            // Deleted behind our back: its slot is free for a new ENI.
            let held = pool.forget_deleted(&id);
            error!(
                "{id} no longer exists in the cloud: its slot is freed; {held} address(es) still held by owners are kept for them until released, never handed out again"
            );
            deleted.push(id);
            continue;
        }
        if let Some(n) = pool.withdraw_eni(&id) {
            error!(
                "{id} is no longer attached to this instance in the cloud; its {n} address(es) are withdrawn"
            );
        }
    }
    deleted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::choose::pick;
    use eniip_protocol::core::Owner;

    use super::super::tests::{ip, one_empty_eni, one_eni_pool as pool, ENI};

    fn view(id: &str, v4: &[Ipv4Addr]) -> CloudEniView {
        CloudEniView {
            eni: ReadyEni {
                link: eniip_protocol::core::EniInfo {
                    eni: id.into(),
                    mac: format!("00:16:3e:00:00:0{}", &id[id.len() - 1..]),
                    vswitch: "vsw-a".into(),
                    cidr: "10.0.0.0/24".into(),
                    gateway: ip(253),
                    v6: None,
                },
                primary_ip: v4[0],
                v4: v4.to_vec(),
                v6: Vec::new(),
                prefixes: Vec::new(),
                prefix_fallback: false,
                v6_prefixes: Vec::new(),
                v6_prefix_fallback: false,
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
            restoring: false,
        }
    }

    fn take(pool: &mut PoolState, v4: Ipv4Addr, owner: &str) {
        pool.take(
            v4,
            &Owner::parse(owner).unwrap(),
            None,
            1,
            &Default::default(),
        );
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
        assert_eq!(pool.ips().len(), 4, "nothing dropped from a stale view");
        // A fresh view applies.
        reconcile(
            &mut pool,
            &mut changes,
            &pass(Instant::now() + Duration::from_millis(2), &cloud, None),
        );
        assert_eq!(
            pool.ips().iter().map(PoolIp::v4).collect::<Vec<_>>(),
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
        assert!(pool.ip(ip(5)).is_some(), "adopted");
        assert!(pool.ip(ip(4)).is_none(), "idle and gone: dropped");
        assert!(pool.ip(ip(3)).unwrap().lost(), "owned and gone: lost, kept");
        assert_eq!(
            pool.owner_ip(&Owner::parse("pod-a").unwrap())
                .map(PoolIp::v4),
            Some(ip(3))
        );
        // It comes back: found again.
        let cloud = [view(ENI, &[ip(1), ip(2), ip(3), ip(5)])];
        reconcile(
            &mut pool,
            &mut Changes::default(),
            &pass(Instant::now(), &cloud, None),
        );
        assert!(!pool.ip(ip(3)).unwrap().lost());
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
        assert_eq!(pool.ips().count_on("eni-2"), 2);
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
        assert!(pool.eni(ENI).unwrap().at_limit());
        assert_eq!(pool.ips().len(), 1, "only the owned address stays");
        assert!(pool.ip(ip(2)).unwrap().lost());

        let mut pool = self::pool();
        take(&mut pool, ip(2), "pod-a");
        let r = reconcile(
            &mut pool,
            &mut Changes::default(),
            &pass(Instant::now(), &[], Some(&[])),
        );
        assert_eq!(r.deleted, vec![ENI.to_string()]);
        assert!(
            pool.eni(ENI).unwrap().gone(),
            "kept while its owner holds an address"
        );
        pool.release(
            &Owner::parse("pod-a").unwrap(),
            None,
            None,
            2,
            &crate::pool::HoldTimes {
                stick_ms: 0,
                max_stick_ms: 0,
                cool_ms: 0,
            },
        );
        pool.drop_empty_gone();
        assert_eq!(pool.enis().len(), 0);
        pool.check().unwrap();
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
        let primary = pool.ip(ip(1)).unwrap();
        assert!(primary.primary());
        assert_eq!(
            primary.v6(),
            Some(v6(1)),
            "the primary gets the unknown IPv6"
        );
        assert_eq!(pool.state_of(primary).name(), "idle");
        assert_eq!(
            pool.ips().unpaired_len(),
            0,
            "no IPv6 left to go back alone"
        );
        // More unknown IPv4 than IPv6: the secondary is the one left
        // invalid, and it can go back.
        assert_eq!(pool.state_of(pool.ip(ip(4)).unwrap()).name(), "invalid");
        let back = crate::pool::shrink::invalid_to_release(&pool);
        assert_eq!(back, vec![(ENI.to_string(), vec![ip(4)], Vec::new())]);
        pool.check().unwrap();
    }

    /// Issue 31's t3_eni_reuse path: an ENI is deleted behind eniipd's
    /// back while old/0 holds .2; the vswitch gives .2 to a new ENI as its
    /// primary. Nobody else gets .2 while old/0 holds it; once released it
    /// is the new ENI's primary, to be handed out (in dual stack with an
    /// IPv6 of that ENI: before, that IPv6 went back and the primary stayed
    /// invalid for the ENI's life).
    fn a_primary_an_old_owner_holds(dual: bool) {
        let v6 = |n: u16| Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, n);
        let mut pool = one_empty_eni(dual);
        pool.add_ip(ENI, ip(1), dual.then(|| v6(1)));
        pool.add_ip(ENI, ip(2), dual.then(|| v6(2)));
        take(&mut pool, ip(2), "old/0");
        let (old, anyone) = (
            Owner::parse("old/0").unwrap(),
            Owner::parse("new/0").unwrap(),
        );
        let mut changes = Changes::default();
        let r = reconcile(
            &mut pool,
            &mut changes,
            &pass(Instant::now(), &[], Some(&[])),
        );
        assert_eq!(r.deleted, vec![ENI.to_string()]);
        // The new ENI is ready (what `on_eni_ready` adds), then seen by
        // reconciles while old/0 still holds .2.
        let mut new = view("eni-2", &[ip(2)]);
        if dual {
            new.eni.v6 = vec![v6(22)];
        }
        pool.add_eni(new.eni.link.clone(), ip(2));
        pool.add_granted("eni-2", &[ip(2)], &new.eni.v6);
        let cloud = [new];
        for _ in 0..2 {
            reconcile(
                &mut pool,
                &mut changes,
                &pass(Instant::now(), &cloud, Some(&[])),
            );
            pool.check().unwrap();
            assert_eq!(pick(&pool, &anyone, None, None), None, "dual={dual}");
            assert_eq!(pool.owner_ip(&old).map(PoolIp::eni), Some(ENI));
            assert_eq!(pool.ips().unpaired_len(), 0, "dual={dual}: v6 given back");
        }
        pool.release(
            &old,
            None,
            None,
            2,
            &crate::pool::HoldTimes {
                stick_ms: 0,
                max_stick_ms: 0,
                cool_ms: 0,
            },
        );
        pool.drop_empty_gone();
        reconcile(
            &mut pool,
            &mut changes,
            &pass(Instant::now(), &cloud, Some(&[])),
        );
        pool.check().unwrap();
        let x = pool.ip(ip(2)).unwrap();
        assert_eq!((x.eni(), x.primary()), ("eni-2", true));
        assert_eq!(x.v6(), dual.then(|| v6(22)), "dual={dual}");
        assert_eq!(pool.state_of(x).name(), "idle", "dual={dual}");
        assert_eq!(pick(&pool, &anyone, None, None), Some(ip(2)), "dual={dual}");
    }

    #[test]
    fn a_primary_an_old_owner_holds_is_the_new_enis_once_released() {
        a_primary_an_old_owner_holds(false);
    }

    #[test]
    fn a_primary_an_old_owner_holds_keeps_an_ipv6_for_when_it_is_released() {
        a_primary_an_old_owner_holds(true);
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
