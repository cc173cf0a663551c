//! Planning: where the demand waiting goes. Three steps: [`Planning::gather`]
//! the input from the parts, let the pure [`placement`] decide, dispatch
//! what it decided (tickets on workers' backlogs: [`Planning::submit`];
//! new ENIs: [`Planning::create`]); client demand no source can serve
//! fails at once as exhausted.
//!
//! [`Planning`] borrows only the parts planning touches: it asks the cloud
//! for addresses (through workers and ENI creations) and fails waiters it
//! cannot place; it never hands out or takes back an address.

use std::collections::VecDeque;
use std::time::Instant;

use log::info;

use crate::pool::{PoolEni, PoolState};
use eniip_protocol::core::{AllocError, Ceiling, SecurityGroupSet};
use eniip_util::time::unix_ms;

use super::super::capacity::Capacity;
use super::super::eniops::CreateJob;
use super::super::idle_target::IdleTargets;
use super::super::mailbox::{Origin, TicketId};
use super::super::placement::{self, EniRoom, PlanInput};
use super::super::prefix_mode::{self, Kind, V6From};
use super::super::sg_sets;
use super::super::vswitch_choice::VSwitches;
use super::super::{AllocatorOptions, Fatal};
use super::backoff::Backoff;
use super::demand::Demand;
use super::inflight::{self, InFlight};
use super::surge::Surge;
use super::threads::Threads;
use super::views;
use super::vswstate::VswState;
use super::workers::Workers;
use super::CREATE_QUIET;

/// The parts planning touches.
pub(super) struct Planning<'a> {
    pub(super) opts: &'a AllocatorOptions,
    pub(super) cap: &'a Capacity,
    pub(super) pool: &'a mut PoolState,
    pub(super) demand: &'a mut Demand,
    pub(super) vsw: &'a mut VswState,
    pub(super) inflight: &'a mut InFlight,
    pub(super) workers: &'a Workers,
    pub(super) threads: &'a mut Threads,
    pub(super) surge: &'a mut Surge,
    pub(super) pool_backoff: &'a Backoff,
    /// The idle targets, one per security-group set (`idle_target`).
    pub(super) idle_target: &'a IdleTargets,
}

impl Planning<'_> {
    /// Gathers the input, lets the pure planner decide, then dispatches
    /// what it decided: for the waiters that asked a vswitch first, each
    /// vswitch on its own (only its ENIs, new ones only there), then for
    /// the others and the pool's top-up.
    pub(super) fn plan(&mut self, now: Instant) -> Result<(), Fatal> {
        // Waiters without a ticket adopt pool tickets first.
        self.demand.bind_spare();
        for vswitch in self.demand.unplanned_vswitches() {
            self.plan_on(now, Some(&vswitch))?;
        }
        self.plan_on(now, None)?;
        // Then each security-group set other than the node's own, on its
        // own ENIs (new ones made with its groups).
        for (vswitch, set) in self.demand.unplanned_sets() {
            self.plan_in(now, vswitch.as_deref(), Some(&set))?;
        }
        // Then the warm pool of each set in use (when nobody waits).
        if self.cap.min_idle > 0 && self.demand.waiting() == 0 {
            let own = self.opts.default_set();
            for set in sg_sets::sets_in_use(self.pool) {
                if Some(&set) != own.as_ref() {
                    self.plan_in(now, None, Some(&set))?;
                }
            }
        }
        Ok(())
    }

    /// Plans the waiters that asked `vswitch` (`None`: that asked none,
    /// and the pool's top-up).
    fn plan_on(&mut self, now: Instant, vswitch: Option<&str>) -> Result<(), Fatal> {
        self.plan_in(now, vswitch, None)
    }

    /// [`plan_on`](Self::plan_on) for the waiters of the security-group
    /// set `set` (`None`: the node's own, and the pool's top-up).
    fn plan_in(
        &mut self,
        now: Instant,
        vswitch: Option<&str>,
        set: Option<&SecurityGroupSet>,
    ) -> Result<(), Fatal> {
        let want = set.cloned().or_else(|| self.opts.default_set());
        let Some((input, mut units)) = self.gather(now, vswitch, set, want.as_ref()) else {
            return Ok(());
        };
        let now_ms = unix_ms();
        let plan = placement::plan(&input);
        // The surplus rides after every unit of demand.
        units.extend(std::iter::repeat_n(None, plan.surplus));
        let spare_before = self.demand.spare_tickets();
        self.submit(plan.submits, &mut units, (now, now_ms), want.as_ref());
        self.create(
            plan.creates,
            &mut units,
            (now, now_ms),
            vswitch.is_none(),
            want.as_ref(),
        )?;
        if self.surge.surging() {
            // Pool tickets made in a surge (the surplus and any /28's
            // rounding) are what a shrink-back may give back.
            let grown = self.demand.spare_tickets().saturating_sub(spare_before);
            self.surge.grew(grown);
        }
        if plan.unplaceable > 0 && !self.repurpose(want.as_ref()) {
            // Client units no source can serve now fail at once, newest
            // first.
            let (ceiling, reason) = match want
                .as_ref()
                .and_then(|w| sg_sets::exhausted(self.pool, self.cap.usable_enis, w))
            {
                Some(why) => (Ceiling::EniSlots, why),
                None => views::exhaustion_reason(
                    self.pool,
                    self.vsw,
                    self.cap,
                    self.demand.pending(),
                    now_ms,
                    vswitch,
                ),
            };
            let err = AllocError::exhausted(&ceiling, reason);
            let ids = self
                .demand
                .newest_unplanned_in(vswitch, want.as_ref(), plan.unplaceable);
            for id in ids {
                self.demand.fail(id, &err);
            }
        }
        Ok(())
    }

    /// The planner's input for the waiters that asked `vswitch` (`None`:
    /// that asked none, with the pool's top-up), and the units its demand
    /// stands for in order (those waiters, oldest first, then pool top-up
    /// as `None`); `None` when nothing is to be planned.
    fn gather(
        &mut self,
        now: Instant,
        vswitch: Option<&str>,
        set: Option<&SecurityGroupSet>,
        want: Option<&SecurityGroupSet>,
    ) -> Option<(PlanInput, VecDeque<Option<u64>>)> {
        let clients = match set {
            None => self.demand.unplanned_on(vswitch),
            Some(_) => self.demand.unplanned_in(vswitch, want),
        };
        let idle_and_asked = self.pool.idle_count() + self.demand.spare_tickets();
        // The warm-up of this set follows its own pods' rate.
        let idle_warm = self
            .idle_target
            .warm(set, now, self.cap.min_idle, self.cap.max_idle);
        let pool_units = if vswitch.is_some()
            || self.pool_backoff.active(now)
            || self.demand.waiting() > 0
            || idle_warm == 0
        {
            0
        } else {
            // Each set keeps its own warm pool, within max_pool_size idle
            // in all (which the pool check gives back above).
            let own = self.opts.default_set();
            let (in_set, spare) = match want {
                Some(w) if set.is_some() || sg_sets::other_sets(self.pool, own.as_ref()) => (
                    sg_sets::idle_in_set(self.pool, w),
                    self.demand.spare_tickets_in(w),
                ),
                _ => (self.pool.idle_count(), self.demand.spare_tickets()),
            };
            let room = self.cap.max_idle.saturating_sub(idle_and_asked);
            idle_warm.saturating_sub(in_set + spare).min(room)
        };
        if clients.is_empty() && pool_units == 0 {
            return None;
        }
        // A surge: what the calls for the clients may carry beside them,
        // up to max_pool_size idle.
        let surplus =
            if vswitch.is_none() && set.is_none() && self.surge.surging() && !clients.is_empty() {
                self.cap.max_idle.saturating_sub(idle_and_asked)
            } else {
                0
            };
        let now_ms = unix_ms();
        let mut order = self.vsw.order(now_ms);
        if let Some(v) = vswitch {
            order.retain(|c| c.id == v);
        }
        // Prefix mode: the vswitches with /28 room first (a stable sort
        // keeps the policy's order among each), so a new ENI goes where
        // it gets /28s before one falls back to single addresses.
        order.sort_by_key(|c| self.vsw.kind_on(&c.id, now_ms) == Kind::Single);
        let input = PlanInput {
            demand: clients.len() + pool_units,
            client_demand: clients.len(),
            enis: self.usable_enis(&order, vswitch, now_ms, want),
            creating_room: self
                .inflight
                .creating_room_in(vswitch, want, self.cap.ips_per_eni),
            vswitches: order,
            eni_slots: self.inflight.eni_slots(),
            op_slots: self.inflight.op_slots(),
            max_per_call: self.per_call(),
            ips_per_eni: self.cap.ips_per_eni,
            surplus,
        };
        let mut units: VecDeque<Option<u64>> = clients.into_iter().map(Some).collect();
        units.extend(std::iter::repeat_n(None, pool_units));
        Some((input, units))
    }

    /// ENIs that can take addresses now (on `vswitch`, when given), in
    /// preference order: vswitch rank, then fewest addresses held or
    /// pending.
    fn usable_enis(
        &self,
        order: &[placement::VswChoice],
        vswitch: Option<&str>,
        now_ms: u64,
        want: Option<&SecurityGroupSet>,
    ) -> Vec<EniRoom> {
        let switches = self.vsw.switches();
        // ENIs on a vswitch without /28 room get single addresses: not
        // while a new ENI can go where /28s are (see `gather`'s order).
        let slots_for_prefixes = self.inflight.eni_slots() > 0
            && order
                .first()
                .is_some_and(|c| self.vsw.kind_on(&c.id, now_ms) == Kind::Prefix);
        let mut enis: Vec<((usize, usize), usize, EniRoom)> = self
            .pool
            .enis()
            .iter()
            .filter(|e| e.takes_asks())
            .filter(|e| vswitch.is_none_or(|v| e.vswitch() == v))
            .filter(|e| want.is_none_or(|w| self.pool.sg_sets().serves(e.id(), w)))
            .filter(|e| switches.inhibited_until(e.vswitch(), now_ms).is_none())
            .filter(|e| {
                !(slots_for_prefixes && self.vsw.kind_on(e.vswitch(), now_ms) == Kind::Single)
            })
            .filter_map(|e| {
                let room = self.eni_room(e.id(), now_ms);
                let backlog_free = self.workers.backlog_free(e.id())?;
                let call = match self.ask_of(e, now_ms).0 {
                    Kind::Prefix => self.per_call(),
                    Kind::Single => self.vsw.call_size(e.vswitch()),
                };
                (room > 0).then(|| {
                    let held = self.pool.ips().count_on(e.id()) + e.pending();
                    // ENIs falling back rank after every other.
                    let fallback = usize::from(
                        self.cap.prefix_mode
                            && self.vsw.kind_on(e.vswitch(), now_ms) == Kind::Single,
                    );
                    let rank = (fallback, VSwitches::rank(order, e.vswitch()));
                    let id = e.id().to_string();
                    let room = EniRoom {
                        id,
                        room,
                        backlog_free,
                        call,
                    };
                    (rank, held, room)
                })
            })
            .collect();
        enis.sort_by(|a, b| (a.0, a.1, &a.2.id).cmp(&(b.0, b.1, &b.2.id)));
        enis.into_iter().map(|(_, _, e)| e).collect()
    }

    /// How the next addresses of `e` are asked: their IPv4 kind and where
    /// their IPv6 come from (see `VswState::ask_on`).
    fn ask_of(&self, e: &PoolEni, now_ms: u64) -> (Kind, Option<V6From>) {
        self.vsw.ask_on(
            e.vswitch(),
            (e.carve_prefix().is_some(), e.v6_refused()),
            now_ms,
        )
    }

    /// Addresses an ENI can still be asked for (its free IPv4 slots, as
    /// /28s or single addresses; in prefix mode, an ENI whose IPv6 are
    /// single addresses also within its free IPv6 slots).
    pub(super) fn eni_room(&self, eni: &str, now_ms: u64) -> usize {
        let Some(e) = self.pool.eni(eni) else {
            return 0;
        };
        let pending = prefix_mode::pending_slots(e.pending(), e.pending_in_prefixes());
        let free = self
            .cap
            .slots_per_eni
            .saturating_sub(self.pool.slots_used(eni) + pending);
        let (kind, v6) = self.ask_of(e, now_ms);
        let room = prefix_mode::room(kind, free);
        if self.cap.prefix_mode && v6 == Some(V6From::Single) {
            let used6 = self.pool.v6_slots_used(eni);
            room.min(prefix_mode::v6_room(
                self.cap.ipv6_per_eni,
                used6,
                e.pending(),
                e.pending_in_prefixes(),
            ))
        } else {
            room
        }
    }

    /// Addresses one Assign or Create call brings at most: a call's worth
    /// of /28s in prefix mode.
    fn per_call(&self) -> usize {
        if self.cap.prefix_mode {
            self.opts.max_ips_per_call * prefix_mode::PER_PREFIX
        } else {
            self.opts.max_ips_per_call
        }
    }

    /// Queues the planned units on their ENIs' workers, each as a ticket.
    fn submit(
        &mut self,
        submits: Vec<(String, usize)>,
        units: &mut VecDeque<Option<u64>>,
        (now, now_ms): (Instant, u64),
        want: Option<&SecurityGroupSet>,
    ) {
        for (eni, n) in submits {
            let Some((vswitch, (kind, v6))) = self
                .pool
                .eni(&eni)
                .map(|e| (e.vswitch().to_string(), self.ask_of(e, now_ms)))
            else {
                continue;
            };
            // A /28 brings 16 addresses whatever the demand: ask for whole
            // ones, and count the surplus as pool tickets so that the
            // addresses in flight are counted once.
            let limit = self
                .eni_room(&eni, now_ms)
                .min(self.workers.backlog_free(&eni).unwrap_or(0));
            let total = prefix_mode::round_units(kind, n, limit).max(n);
            // A batch of the pool's own (no client's unit in it) is whole
            // as planned: its worker asks it at once (see `worker`).
            let count = if units.len() >= n { total } else { units.len() };
            let pool_only = units.iter().take(n).all(Option::is_none);
            // The batch's demand gathers from its oldest client's ask.
            let since = self
                .demand
                .oldest_of(units.iter().take(n).flatten().copied())
                .unwrap_or(now);
            for i in 0..count {
                // The planner's `n` units first, then the surplus.
                let unit = if i < n {
                    match units.front() {
                        Some(&u) => u,
                        None => break,
                    }
                } else {
                    None
                };
                let t = self.demand.new_ticket_in(unit, &vswitch, want.cloned());
                let last = i + 1 == count;
                let origin = match pool_only {
                    true => Origin::Pool { last },
                    false => Origin::Pod { since, last },
                };
                if !self.workers.submit(&eni, t, (kind, v6), origin) {
                    self.demand.end_ticket(t);
                    break;
                }
                if i < n {
                    units.pop_front();
                }
                self.pool.enis_mut().asked(&eni, kind == Kind::Prefix);
            }
        }
    }

    /// Starts the planned ENI creations (`any_vswitch`: their demand may
    /// go on any configured vswitch); a thread that could not be started
    /// is fatal.
    fn create(
        &mut self,
        creates: Vec<(String, usize)>,
        units: &mut VecDeque<Option<u64>>,
        (now, now_ms): (Instant, u64),
        any_vswitch: bool,
        want: Option<&SecurityGroupSet>,
    ) -> Result<(), Fatal> {
        // New ENIs aggregate like the workers do: a create waits until the
        // oldest waiting client has waited the aggregation window, unless
        // it is already full, so a burst is sized as a whole; or until
        // no request has arrived for CREATE_QUIET: the burst is over, and
        // the node's first pod does not wait the whole window for
        // requests that are not coming.
        let oldest = self.demand.oldest_unplanned();
        let quiet = self
            .demand
            .last_unplanned_arrival()
            .is_none_or(|t| now.duration_since(t) >= CREATE_QUIET);
        let gathered =
            quiet || oldest.is_none_or(|t| now.duration_since(t) >= self.opts.aggregation_window);
        for (vswitch, init) in creates {
            if !gathered && init < self.per_call().min(self.cap.ips_per_eni) {
                continue;
            }
            let Some(slots) = self.inflight.create_slots() else {
                break;
            };
            // Its /28s are refused rather than fallen back from while
            // another vswitch has room (the demand is planned there).
            let elsewhere = any_vswitch
                && self.vsw.prefix_room_elsewhere(
                    &vswitch,
                    self.vsw
                        .switches()
                        .ids()
                        .iter()
                        .map(String::as_str)
                        .filter(|id| self.vsw.switches().inhibited_until(id, now_ms).is_none()),
                    now_ms,
                );
            self.create_one(slots, (vswitch, elsewhere, want), init, units, now_ms)?;
        }
        Ok(())
    }

    /// One ENI creation on `vswitch` for `init` units of demand
    /// (`elsewhere`: another vswitch has /28 room).
    fn create_one(
        &mut self,
        slots: inflight::CreateSlots,
        (vswitch, elsewhere, want): (String, bool, Option<&SecurityGroupSet>),
        init: usize,
        units: &mut VecDeque<Option<u64>>,
        now_ms: u64,
    ) -> Result<(), Fatal> {
        let (kind, v6) = self.vsw.ask_on(&vswitch, (false, false), now_ms);
        // In prefix mode a new ENI always asks /28s first, even on a
        // vswitch on fallback: the create falls back in the same call if
        // there is still no room, and finds it if room returned.
        let kind = if self.cap.prefix_mode {
            prefix_mode::kind_with(Kind::Prefix, v6)
        } else {
            kind
        };
        let shape = prefix_mode::create_shape(
            kind,
            init,
            self.opts.max_ips_per_call,
            self.cap.slots_per_eni,
            self.vsw.call_size(&vswitch),
        );
        let tickets: Vec<TicketId> = (0..shape.tickets)
            .map(|i| {
                let unit = if i < shape.demand {
                    units.pop_front().flatten()
                } else {
                    None
                };
                self.demand.new_ticket_in(unit, &vswitch, want.cloned())
            })
            .collect();
        if shape.prefixes > 0 {
            info!(
                "creating an ENI on {vswitch} with {} /28 prefix(es)",
                shape.prefixes
            );
        } else {
            info!(
                "creating an ENI on {vswitch} with {} address(es)",
                shape.demand
            );
        }
        let (op, op_permit) = self.inflight.begin_create_in(
            slots,
            vswitch.clone(),
            shape.tickets,
            tickets,
            want.cloned(),
        );
        let mut job = CreateJob::new(self.opts, (op, vswitch), shape.singles, shape.prefixes, v6)
            .prefixes_elsewhere(elsewhere);
        if let Some(w) = want {
            job.security_groups = w.ids().to_vec();
        }
        self.threads
            .create(job, op_permit)
            .map_err(|e| format!("cannot start an ENI operation thread: {e}").into())
    }

    /// A set whose clients no source can serve: an ENI of another set
    /// that holds nothing is re-purposed for it (its groups changed, not
    /// deleted and created again), or one already is. False when none
    /// can be: the clients are refused.
    fn repurpose(&mut self, want: Option<&SecurityGroupSet>) -> bool {
        let Some(want) = want else {
            return false;
        };
        if self.pool.sg_sets().changing_to(want) {
            return true;
        }
        let Some(eni) = sg_sets::repurposable(self.pool, want) else {
            return false;
        };
        if !self.pool.sg_sets_mut().begin_change(&eni, want.clone()) {
            return false;
        }
        info!("re-purposing {eni} (no address of it in use) for the security groups {want}");
        if self.threads.set_groups(&eni, want.clone()) {
            true
        } else {
            self.pool.sg_sets_mut().end_change(&eni, None);
            false
        }
    }
}
