//! What the cloud side reports: workers' assigns and unassigns, ENI
//! creations and frees, vswitch probes and IPv6 reads, and the
//! maintenance thread's view of the cloud (applied by [`reconcile`]).
//! Each report ends the tickets it carried (see [`Demand`]): a ticket
//! served, or failed with the cloud's error when re-planning cannot cure
//! it.
//!
//! [`Reports`] borrows only the parts a report touches: it never answers a
//! client's request but by failing a waiter, and never writes the journal.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Instant;

use log::{error, info, warn};

use crate::pool::{Gone, PoolState};
use eniip_cloud::{CloudError, CloudErrorKind, Ipv4Prefix};
use eniip_util::time::{format_utc, unix_ms};

use super::super::mailbox::{CloudEniView, Event, FreeFailure, OpId, ReadyEni, TicketId};
use super::super::{cloud_error, AllocatorOptions, Fatal};
use super::backoff::{Backoff, FreeBackoff};
use super::demand::Demand;
use super::inflight::{self, InFlight};
use super::reconcile::{self, Changes, Pass};
use super::threads::Threads;
use super::vswstate::{Exhaustion, VswState};
use super::workers::{self, Workers};

/// The parts a report touches.
pub(super) struct Reports<'a> {
    pub(super) opts: &'a AllocatorOptions,
    pub(super) pool: &'a mut PoolState,
    pub(super) demand: &'a mut Demand,
    pub(super) vsw: &'a mut VswState,
    pub(super) inflight: &'a mut InFlight,
    pub(super) workers: &'a mut Workers,
    pub(super) threads: &'a mut Threads,
    pub(super) changes: &'a mut Changes,
    pub(super) pool_backoff: &'a mut Backoff,
    pub(super) shed_backoff: &'a mut Backoff,
    pub(super) free_backoff: &'a mut FreeBackoff,
    pub(super) stopping: bool,
    /// The first reconcile after a restart is still to come.
    pub(super) restoring: bool,
}

impl Reports<'_> {
    /// Applies one report; a worker that could not be started is fatal.
    pub(super) fn on_event(&mut self, e: Event) -> Result<(), Fatal> {
        match e {
            Event::Assigned {
                eni,
                tickets,
                prefixes,
                v4,
                v6,
                v6_prefixes,
                v6_refused,
                error,
            } => {
                // A /80 granted stays, whatever became of the IPv4 call.
                if !v6_prefixes.is_empty() {
                    self.prefix_granted(&eni, false);
                }
                for p in v6_prefixes {
                    info!("{eni} got the IPv6 prefix {p}: its addresses' IPv6 come from it");
                    self.pool.add_v6_prefix(&eni, p);
                }
                match (prefixes, error) {
                    (Some(p), None) => self.on_prefixes_assigned(&eni, tickets, &p),
                    (p, Some(err)) if v6_refused => {
                        self.on_v6_prefix_refused(&eni, tickets, &err, p.is_some());
                    }
                    (p, error) => self.on_assigned(&eni, tickets, (&v4, &v6), error, p.is_some()),
                }
            }
            Event::Unassigned {
                eni,
                v4,
                gone_v4,
                gone_v6,
                gone_prefixes,
                error,
            } => {
                let gone = Gone {
                    v4: gone_v4,
                    v6: gone_v6,
                    prefixes: gone_prefixes,
                };
                self.on_unassigned(&eni, &v4, &gone, error);
            }
            Event::EniCreated { op, eni } => self.inflight.created(op, eni),
            Event::EniReady { op, eni } => return self.on_eni_ready(op, &eni),
            Event::EniFailed { op, error, leaked } => self.on_eni_failed(op, &error, leaked),
            Event::EniFreed { eni, result } => self.on_eni_freed(eni, result),
            Event::SecurityGroups { started, enis } => {
                for (id, groups) in enis {
                    // A set changed since the read began is not judged
                    // by it.
                    if !self.changes.since(&id, started) {
                        super::super::sg_sets::observe(self.pool, &id, &groups);
                    }
                }
            }
            Event::SetChanged { eni, set, error } => {
                self.changes.touch(&eni, Instant::now());
                let to = match error {
                    None => {
                        info!("{eni} now has the security groups {set}");
                        Some(set)
                    }
                    Some(e) => {
                        warn!("changing the security groups of {eni} to {set} failed: {e}");
                        None
                    }
                };
                self.pool.sg_sets_mut().end_change(&eni, to);
            }
            Event::VSwitchFree(counts) => {
                for id in self.vsw.set_free(counts) {
                    info!("{id} has free addresses again: no longer inhibited");
                }
                self.apply_call_caps();
            }
            // The actor's own (it samples the forecast).
            Event::ForecastTick { .. } => {}
            Event::VSwitchV6 {
                vswitch,
                cidr6,
                gateway6,
            } => self.vsw.set_v6(vswitch, cidr6, gateway6),
            Event::Reconcile {
                started,
                enis,
                detached,
            } => return self.on_reconcile(started, &enis, detached.as_deref()),
        }
        Ok(())
    }

    /// A prefix call granted /28s: all 16 addresses of each join the pool
    /// (those beyond the tickets idle).
    fn on_prefixes_assigned(&mut self, eni: &str, tickets: Vec<TicketId>, prefixes: &[Ipv4Prefix]) {
        self.pool.enis_mut().answered(eni, tickets.len(), true);
        if !prefixes.is_empty() {
            self.prefix_granted(eni, true);
        }
        for p in prefixes {
            self.pool.add_prefix(eni, *p);
        }
        self.changes.touch(eni, Instant::now());
        self.pool_backoff.succeed();
        let valid = prefixes
            .iter()
            .flat_map(|p| p.addresses())
            .filter(|a| self.pool.ip(*a).is_some_and(|ip| !ip.invalid()))
            .count();
        info!(
            "{eni} got {} /28 prefix(es): {valid} address(es)",
            prefixes.len()
        );
        self.end_tickets(tickets, valid, None);
    }

    /// A call for single addresses (or a prefix call that failed) ended
    /// with `granted` IPv4 and IPv6 addresses.
    fn on_assigned(
        &mut self,
        eni: &str,
        tickets: Vec<TicketId>,
        granted: (&[Ipv4Addr], &[Ipv6Addr]),
        error: Option<CloudError>,
        as_prefixes: bool,
    ) {
        self.pool
            .enis_mut()
            .answered(eni, tickets.len(), as_prefixes);
        let valid = self.pool.add_granted(eni, granted.0, granted.1);
        self.changes.touch(eni, Instant::now());
        let vswitch = self.pool.eni(eni).map(|e| e.vswitch().to_string());
        match (&error, vswitch) {
            (Some(err), vswitch) => {
                warn!("assigning addresses to {eni} failed: {err}");
                match (err.kind, vswitch) {
                    (CloudErrorKind::Exhausted, Some(v)) if as_prefixes => self.inhibit(&v, err),
                    (CloudErrorKind::Exhausted, Some(v)) => self.exhausted(&v, tickets.len(), err),
                    (CloudErrorKind::PrefixExhausted, Some(v)) => {
                        self.inhibit_prefixes(&v, err.code_or_kind());
                    }
                    (CloudErrorKind::LimitExceeded, _) => self.pool.enis_mut().hit_limit(eni),
                    _ => {}
                }
            }
            (None, vswitch) => {
                self.pool_backoff.succeed();
                if let Some(v) = vswitch.filter(|v| !as_prefixes && self.vsw.call_cap(v).is_some())
                {
                    self.vsw.served(&v, tickets.len());
                    self.apply_call_caps();
                }
            }
        }
        self.end_tickets(tickets, valid, error.as_ref());
    }

    /// The /80 asked first for a call was refused: nothing was asked of
    /// the IPv4 side. No room for one inhibits /80s on the ENI's vswitch,
    /// the ENI's IPv6 quota full marks it refused; either way its tickets
    /// are planned again with single IPv6 addresses.
    fn on_v6_prefix_refused(
        &mut self,
        eni: &str,
        tickets: Vec<TicketId>,
        err: &CloudError,
        as_prefixes: bool,
    ) {
        self.pool
            .enis_mut()
            .answered(eni, tickets.len(), as_prefixes);
        let vswitch = self.pool.eni(eni).map(|e| e.vswitch().to_string());
        match (err.kind, vswitch) {
            (CloudErrorKind::PrefixExhausted | CloudErrorKind::Exhausted, Some(v)) => {
                self.inhibit_v6_prefixes(&v, err.code_or_kind());
            }
            (CloudErrorKind::LimitExceeded, _) => {
                warn!(
                    "{eni} was refused an IPv6 /80 prefix ({}: its IPv6 quota is full); single IPv6 addresses for it",
                    err.code_or_kind()
                );
                self.pool.enis_mut().refuse_v6_prefix(eni);
            }
            _ => warn!("asking an IPv6 /80 prefix of {eni} failed: {err}"),
        }
        self.end_tickets(tickets, 0, Some(err));
    }

    fn on_unassigned(
        &mut self,
        eni: &str,
        asked: &[Ipv4Addr],
        gone: &Gone,
        error: Option<CloudError>,
    ) {
        let kept = self.pool.unassigned(eni, asked, gone);
        if !gone.is_empty() {
            self.changes.touch(eni, Instant::now());
            info!(
                "gave {} address(es) of {eni} back to the cloud",
                gone.v4.len() + gone.v6.len()
            );
            self.gave_back(eni, gone.v4.len());
        }
        match error {
            None => self.shed_backoff.succeed(),
            Some(e) => {
                warn!(
                    "giving addresses of {eni} back failed: {e}; {} stay in the pool",
                    kept.len()
                );
                self.shed_backoff.fail(Instant::now());
            }
        }
    }

    /// A call for `asked` addresses on `vswitch` found too few free: the
    /// next calls ask fewer, or the vswitch is inhibited (`vswstate`).
    fn exhausted(&mut self, vswitch: &str, asked: usize, err: &CloudError) {
        let until = unix_ms() + self.opts.inhibit.as_millis() as u64;
        match self.vsw.exhausted(vswitch, asked, until) {
            Exhaustion::Capped(n) => {
                warn!(
                    "{vswitch} has fewer than {asked} free address(es) ({}): asking at most {n} a call",
                    err.code_or_kind()
                );
                self.apply_call_caps();
            }
            Exhaustion::Inhibited => self.inhibit(vswitch, err),
        }
    }

    fn inhibit(&mut self, vswitch: &str, err: &CloudError) {
        let until = unix_ms() + self.opts.inhibit.as_millis() as u64;
        warn!(
            "{vswitch} is out of addresses ({}); not used until {}",
            err.code_or_kind(),
            format_utc(until / 1000)
        );
        self.vsw.inhibit(vswitch, until);
    }

    /// Prefix mode: no free /28 on `vswitch`; single addresses until the
    /// inhibit period ends, then prefixes again.
    fn inhibit_prefixes(&mut self, vswitch: &str, code: &str) {
        let now_ms = unix_ms();
        let until = now_ms + self.opts.inhibit.as_millis() as u64;
        warn!(
            "{vswitch} has no free /28 prefix ({code}); single addresses until {} (or a /28 granted there)",
            format_utc(until / 1000)
        );
        self.vsw.inhibit_prefixes(vswitch, now_ms, until);
    }

    /// Dual stack, prefix mode: no /80 to give on `vswitch`; its ENIs
    /// without one get single IPv6 addresses until the inhibit period
    /// ends, then /80s are asked again.
    fn inhibit_v6_prefixes(&mut self, vswitch: &str, code: &str) {
        let now_ms = unix_ms();
        let until = now_ms + self.opts.inhibit.as_millis() as u64;
        warn!(
            "{vswitch} has no IPv6 /80 prefix to give ({code}); single IPv6 addresses until {} (or a /80 granted there)",
            format_utc(until / 1000)
        );
        self.vsw.inhibit_v6_prefixes(vswitch, now_ms, until);
    }

    /// A prefix was granted on `eni`'s vswitch (a /28 when `v4`, else a
    /// /80): the vswitch has room again, its fallback is over.
    fn prefix_granted(&mut self, eni: &str, v4: bool) {
        let Some(vswitch) = self.pool.eni(eni).map(|e| e.vswitch().to_string()) else {
            return;
        };
        let lifted = if v4 {
            self.vsw.lift_prefixes(&vswitch)
        } else {
            self.vsw.lift_v6_prefixes(&vswitch)
        };
        if lifted {
            info!(
                "{vswitch} granted a {} again: its ENIs are asked prefixes again",
                if v4 { "/28" } else { "/80" }
            );
        }
    }

    fn on_eni_ready(&mut self, op: OpId, r: &ReadyEni) -> Result<(), Fatal> {
        let id = r.id();
        let Some(inflight::Ended { tickets, set, .. }) = self.inflight.ready(op, id) else {
            return Ok(());
        };
        info!(
            "{id} is ready on {} with {} address(es)",
            r.link.vswitch,
            r.v4.len()
        );
        self.pool.add_eni(r.link.clone(), r.primary_ip);
        if let Some(set) = set {
            // Recorded (the actor writes it) before any owner on it.
            self.pool.sg_sets_mut().give(id, set);
        }
        // Its /80 first: the addresses that follow carve from it.
        for p in &r.v6_prefixes {
            self.pool.add_v6_prefix(id, *p);
        }
        let mut valid = self.pool.add_granted(id, &r.v4, &r.v6);
        self.changes.touch(id, Instant::now());
        for p in &r.prefixes {
            self.pool.add_prefix(id, *p);
            valid += p
                .addresses()
                .filter(|a| self.pool.ip(*a).is_some_and(|ip| !ip.invalid()))
                .count();
        }
        if r.prefix_fallback {
            self.inhibit_prefixes(&r.link.vswitch, "at CreateNetworkInterface");
        } else if !r.prefixes.is_empty() {
            self.prefix_granted(id, true);
        }
        if r.v6_prefix_fallback {
            self.inhibit_v6_prefixes(&r.link.vswitch, "at CreateNetworkInterface");
        } else if !r.v6_prefixes.is_empty() {
            self.prefix_granted(id, false);
        }
        self.pool_backoff.succeed();
        self.end_tickets(tickets, valid, None);
        if self.stopping {
            return Ok(());
        }
        self.start_worker(id, &r.link.mac)
    }

    fn on_eni_failed(&mut self, op: OpId, err: &CloudError, leaked: Option<String>) {
        let Some(inflight::Ended {
            vswitch,
            tickets,
            eni: created,
            ..
        }) = self.inflight.failed(op)
        else {
            return;
        };
        if let Some(id) = created {
            // Rolled back (or left for the sweeper): never adopted from a
            // view read while it was still attached.
            self.changes.touch(&id, Instant::now());
        }
        if let Some(eni) = leaked {
            error!("{eni} was left behind by a failed creation; the sweeper will delete it");
        }
        warn!("creating an ENI on {vswitch} failed: {err}");
        if err.kind == CloudErrorKind::PrefixExhausted {
            // Refused rather than fallen back: another vswitch had /28
            // room (see `eniops::create_call`); its demand goes there.
            self.inhibit_prefixes(&vswitch, err.code_or_kind());
        }
        if err.kind == CloudErrorKind::Exhausted {
            // The ENI's primary address is one of what it asked. A create
            // carrying /28s has more tickets than a single-address create
            // (its fallback) asks: count at most a capped call's worth, so
            // the cap still comes down to one address and then inhibits.
            let asked = tickets.len().min(self.vsw.call_size(&vswitch));
            self.exhausted(&vswitch, asked, err);
        }
        for t in tickets {
            if err.kind == CloudErrorKind::LimitExceeded {
                // An ENI that was never made cannot be marked at its limit:
                // planning it again would ask the same again at once.
                self.ticket_refused(t, err);
            } else {
                self.ticket_failed(t, Some(err));
            }
        }
    }

    fn on_eni_freed(&mut self, eni: String, result: Result<(), FreeFailure>) {
        self.inflight.freed(&eni);
        match result {
            Ok(()) => {
                info!("{eni} detached and deleted");
                let addresses = self.pool.ips().count_on(&eni);
                self.gave_back(&eni, addresses);
                self.forget_eni(&eni);
            }
            Err(FreeFailure::Detach(e)) => {
                warn!("detaching {eni} failed: {e}; it stays in the pool");
                self.pool.enis_mut().free_failed(&eni);
                self.free_backoff.failed(eni, Instant::now());
            }
            Err(FreeFailure::Delete(e)) => {
                warn!("{eni} is detached but deleting it failed: {e}; the sweeper will retry");
                self.forget_eni(&eni);
            }
        }
    }

    /// `n` IPv4 addresses of `eni` went back to its vswitch: an exhausted
    /// vswitch that eniipd itself refilled serves again at once.
    fn gave_back(&mut self, eni: &str, n: usize) {
        let Some(vswitch) = self.pool.eni(eni).map(|e| e.vswitch().to_string()) else {
            return;
        };
        if self.vsw.gave_back(&vswitch, n) {
            info!("{vswitch} has free addresses again ({n} given back): no longer inhibited");
        }
        self.apply_call_caps();
    }

    fn forget_eni(&mut self, eni: &str) {
        self.stop_worker(eni);
        self.pool.remove_eni(eni);
        self.inflight.forget(eni);
        // Kept (pruned by maintenance) so that a cloud view read before
        // the ENI went away cannot adopt it again.
        self.changes.touch(eni, Instant::now());
    }

    /// The maintenance thread's view of the cloud, read at `started`.
    fn on_reconcile(
        &mut self,
        started: Instant,
        cloud: &[CloudEniView],
        detached: Option<&[String]>,
    ) -> Result<(), Fatal> {
        let busy = self.inflight.busy_enis();
        let pass = Pass {
            started,
            cloud,
            detached,
            busy: &busy,
            restoring: self.restoring,
        };
        let done = reconcile::reconcile(self.pool, self.changes, &pass);
        for id in done.deleted {
            // Its slot is free for a new ENI.
            self.stop_worker(&id);
            self.inflight.forget(&id);
        }
        for id in done.v6_gone {
            self.workers.v6_prefix_gone(&id);
        }
        for (id, mac) in done.adopted {
            self.inflight.adopt(&id);
            self.start_worker(&id, &mac)?;
        }
        Ok(())
    }

    /// A call for `tickets` ended with `valid` addresses: the first
    /// `valid` tickets are served, the rest failed with `err`.
    fn end_tickets(&mut self, tickets: Vec<TicketId>, valid: usize, err: Option<&CloudError>) {
        for (i, t) in tickets.into_iter().enumerate() {
            if i < valid {
                self.demand.end_ticket(t);
            } else {
                self.ticket_failed(t, err);
            }
        }
    }

    /// A ticket ended without an address: its waiter is re-planned, or
    /// failed when the error is one that re-planning cannot cure.
    fn ticket_failed(&mut self, t: TicketId, err: Option<&CloudError>) {
        let Some(waiter) = self.demand.end_ticket(t) else {
            return;
        };
        let Some(wid) = waiter else {
            // No free /28 is not a failure to back off from: the next plan
            // asks single addresses at once.
            if err.is_some_and(|e| e.kind != CloudErrorKind::PrefixExhausted) {
                self.pool_backoff.fail(Instant::now());
            }
            return;
        };
        if let Some(e) = err {
            if !matches!(
                e.kind,
                CloudErrorKind::Exhausted
                    | CloudErrorKind::PrefixExhausted
                    | CloudErrorKind::LimitExceeded
            ) {
                self.demand.fail(wid, &cloud_error(e));
            }
        }
    }

    /// A ticket whose failure no other plan can avoid: its waiter gets
    /// the cloud's error (a pool ticket backs off).
    fn ticket_refused(&mut self, t: TicketId, err: &CloudError) {
        match self.demand.ticket_waiter(t) {
            Some(Some(wid)) => {
                self.demand.end_ticket(t);
                self.demand.fail(wid, &cloud_error(err));
            }
            _ => self.ticket_failed(t, Some(err)),
        }
    }

    /// Starts `eni`'s worker with its vswitch's call cap.
    pub(super) fn start_worker(&mut self, eni: &str, mac: &str) -> Result<(), Fatal> {
        let cap = workers::cap_of(self.pool, self.vsw, eni);
        let has_v6_prefix = self
            .pool
            .eni(eni)
            .is_some_and(|e| e.carve_prefix().is_some());
        self.workers
            .start((eni, mac, has_v6_prefix), cap)
            .map_err(|e| format!("cannot start the worker thread of {eni}: {e}").into())
    }

    /// Stops `eni`'s worker after its call in flight; its thread is joined
    /// with the others.
    fn stop_worker(&mut self, eni: &str) {
        if let Some(h) = self.workers.stop(eni) {
            self.threads.track(format!("worker of {eni}"), h);
        }
    }

    /// Tells every worker how many addresses one call on its vswitch may
    /// ask (see `vswstate`).
    fn apply_call_caps(&self) {
        self.workers
            .set_call_caps(|eni| workers::cap_of(self.pool, self.vsw, eni));
    }
}
