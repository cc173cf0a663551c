//! Giving back, the actor's maintenance phase ([`Maintenance`]) at each
//! pool check: what goes back to the cloud. Invalid addresses; idle ones
//! above the bound (`max_pool_size`, or after a surge what was idle
//! before it), whole /28s first in prefix mode; then ENIs holding nothing
//! but their idle primary. Nothing is given back
//! while a client waits or a ticket is asked for one, nor while giving
//! back backs off after a failure.
//!
//! [`Maintenance`] borrows only the parts this touches: it marks addresses
//! releasing and asks workers and ENI frees to give them back; the pool
//! changes only when they report.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::Instant;

use log::info;

use crate::pool::shrink::{self, PrefixCandidate};
use crate::pool::PoolState;
use eniip_cloud::Ipv4Prefix;

use super::super::capacity::Capacity;
use super::super::prefix_mode;
use super::super::{AllocatorOptions, Fatal};
use super::backoff::{Backoff, FreeBackoff};
use super::demand::Demand;
use super::inflight::InFlight;
use super::reconcile::Changes;
use super::surge::{self, Surge};
use super::threads::Threads;
use super::workers::Workers;

/// The parts maintenance touches.
pub(super) struct Maintenance<'a> {
    pub(super) opts: &'a AllocatorOptions,
    pub(super) cap: &'a Capacity,
    pub(super) pool: &'a mut PoolState,
    pub(super) demand: &'a Demand,
    pub(super) inflight: &'a mut InFlight,
    pub(super) workers: &'a Workers,
    pub(super) threads: &'a mut Threads,
    pub(super) surge: &'a mut Surge,
    /// Idle addresses a shrink keeps at most now (`idle_target`; the
    /// `max_pool_size` when static).
    pub(super) idle_keep: usize,
    pub(super) changes: &'a mut Changes,
    pub(super) shed_backoff: &'a Backoff,
    pub(super) free_backoff: &'a FreeBackoff,
    pub(super) set_use: &'a mut super::super::sg_sets::SetUse,
}

impl Maintenance<'_> {
    /// Gives back what the pool does not need: invalid addresses, idle ones
    /// (whole /28s in prefix mode) above the bound, then ENIs holding only
    /// their idle primary.
    pub(super) fn maintain(&mut self, now: Instant) -> Result<(), Fatal> {
        let enis = self.pool.enis();
        self.changes.prune(now, |eni| enis.contains(eni));
        for (eni, v4, v6) in shrink::invalid_to_release(self.pool) {
            if self.workers.has(&eni) {
                self.pool.set_releasing(&v4, true);
                self.workers.unassign(&eni, v4, v6);
            }
        }
        self.give_back_idle_sets(now)?;
        if self.demand.waiting() > 0 || self.demand.any_bound() || self.shed_backoff.active(now) {
            return Ok(());
        }
        let mut idle = self.pool.idle_count();
        let max_idle = self.idle_bound(idle, now);
        if self.cap.prefix_mode {
            idle -= self.give_back_prefixes(idle, max_idle);
        }
        let mut excess = idle.saturating_sub(max_idle);
        if excess == 0 {
            return Ok(());
        }
        for (eni, v4) in shrink::shed_candidates(self.pool, excess) {
            if !self.workers.has(&eni) {
                continue;
            }
            excess -= v4.len();
            self.pool.set_releasing(&v4, true);
            info!(
                "giving {} idle address(es) of {eni} back (idle {idle} > {max_idle})",
                v4.len()
            );
            let v6 = self.pool.ips().pairs_of(&v4);
            self.workers.unassign(&eni, v4, v6);
        }
        let mut freeable = shrink::freeable_enis(self.pool);
        freeable.retain(|e| self.free_backoff.ready(e, now));
        for eni in freeable.into_iter().take(excess) {
            if !self.free_eni(&eni)? {
                break;
            }
        }
        Ok(())
    }

    /// The ENIs of security-group sets with no owner for `sg_set_idle_s`
    /// go back (see [`SetUse`](super::super::sg_sets::SetUse)).
    fn give_back_idle_sets(&mut self, now: Instant) -> Result<(), Fatal> {
        let mut used = super::super::sg_sets::sets_in_use(self.pool);
        used.extend(self.demand.waiting_sets());
        let own = self.opts.default_set();
        let idle = self.set_use.idle_enis(
            self.pool,
            &used,
            own.as_ref(),
            self.opts.sg_policy.idle,
            now,
        );
        for eni in idle {
            let Some((_, permit)) = self.inflight.begin_free(&eni) else {
                break;
            };
            self.pool.enis_mut().begin_free(&eni);
            info!(
                "freeing {eni}: its security-group set has had no owner for {} s",
                self.opts.sg_policy.idle.as_secs()
            );
            self.threads
                .free(&eni, &self.opts.instance_id, permit)
                .map_err(|e| Fatal::from(format!("cannot start an ENI operation thread: {e}")))?;
        }
        Ok(())
    }

    /// Starts freeing `eni`; false when no operation slot is free (a
    /// thread that could not be started is fatal).
    fn free_eni(&mut self, eni: &str) -> Result<bool, Fatal> {
        let Some((_, permit)) = self.inflight.begin_free(eni) else {
            return Ok(false);
        };
        // Chosen by freeable_enis this very pass: ready, nothing pending,
        // so it is freeing now (none of its addresses is handed out).
        self.pool.enis_mut().begin_free(eni);
        info!("freeing {eni}: it holds only its idle primary address");
        self.threads
            .free(eni, &self.opts.instance_id, permit)
            .map_err(|e| Fatal::from(format!("cannot start an ENI operation thread: {e}")))?;
        Ok(true)
    }

    /// The idle addresses this pool check keeps at most: what the idle
    /// target keeps (`max_pool_size` when static), or after a surge what
    /// was idle before it (see `surge`).
    fn idle_bound(&mut self, idle: usize, now: Instant) -> usize {
        let Some(grown) = self.surge.shrink_back(now) else {
            return self.idle_keep;
        };
        self.surge.settle();
        let keep = surge::keep_after(idle, grown, self.cap.min_idle, self.idle_keep);
        if keep < idle.min(self.idle_keep) {
            info!(
                "the surge is over: giving back what it added, down to {keep} idle (it asked {grown} beyond the shortfall)"
            );
        }
        keep
    }

    /// Prefix mode: gives back whole /28s whose 16 addresses are idle
    /// (past any reservation or cool-down), from the ENIs with the fewest
    /// addresses in use, while idle stays above `max_idle` and not below
    /// `min_pool_size`. Returns the addresses on their way back.
    fn give_back_prefixes(&mut self, idle: usize, max_idle: usize) -> usize {
        let candidates = shrink::prefix_candidates(self.pool);
        let chosen = prefix_mode::to_give_back(&candidates, idle, self.cap.min_idle, max_idle);
        let mut by_eni: BTreeMap<String, Vec<Ipv4Prefix>> = BTreeMap::new();
        for PrefixCandidate { eni, prefix, .. } in candidates {
            if chosen.contains(&prefix) {
                by_eni.entry(eni).or_default().push(prefix);
            }
        }
        let mut leaving = 0;
        for (eni, prefixes) in by_eni {
            if !self.workers.has(&eni) {
                continue;
            }
            let members: Vec<Ipv4Addr> = prefixes.iter().flat_map(|p| p.addresses()).collect();
            self.pool.set_releasing(&members, true);
            leaving += members.len();
            info!(
                "giving {} idle /28 prefix(es) of {eni} back (idle {idle} > {max_idle})",
                prefixes.len()
            );
            self.workers.unassign_prefixes(&eni, prefixes);
        }
        leaving
    }
}
