//! Planning: where the demand waiting goes (worker backlogs, new ENIs),
//! and maintenance: what goes back to the cloud when the pool is too big.

use super::*;

impl Actor {
    // ---- planning ------------------------------------------------------

    /// Gathers the input, lets the pure planner decide, then dispatches
    /// what it decided.
    pub(super) fn plan(&mut self, now: Instant) {
        if self.stopping || !self.verified() {
            return;
        }
        // Waiters without a ticket adopt pool tickets first.
        self.demand.bind_spare();
        let Some((input, mut units)) = self.gather(now) else {
            return;
        };
        let now_ms = unix_ms();
        let plan = planner::plan(&input);
        // The surplus rides after every unit of demand.
        units.extend(std::iter::repeat_n(None, plan.surplus));
        let spare_before = self.demand.spare_tickets();
        self.submit(plan.submits, &mut units, now_ms);
        let created = self.create(plan.creates, &mut units, now, now_ms);
        if self.surge.surging() {
            // Pool tickets made in a surge (the surplus and any /28's
            // rounding) are what a shrink-back may give back.
            let grown = self.demand.spare_tickets().saturating_sub(spare_before);
            self.surge.grew(grown);
        }
        if !created {
            return;
        }
        self.fail_unplaceable(plan.unplaceable, now_ms);
    }

    /// The planner's input, and the units its demand stands for in order
    /// (the unplanned waiters, oldest first, then pool top-up as `None`);
    /// `None` when nothing is to be planned.
    fn gather(&mut self, now: Instant) -> Option<(PlanInput, VecDeque<Option<u64>>)> {
        let clients = self.demand.unplanned();
        let pool_units = if self.pool_backoff.active(now) || self.demand.waiting() > 0 {
            0
        } else {
            self.cap
                .min_idle
                .saturating_sub(self.pool.idle_count() + self.demand.spare_tickets())
        };
        if clients.is_empty() && pool_units == 0 {
            return None;
        }
        // A surge: what the calls for the clients may carry beside them,
        // up to max_pool_size idle.
        let surplus = if self.surge.surging() && !clients.is_empty() {
            self.cap
                .max_idle
                .saturating_sub(self.pool.idle_count() + self.demand.spare_tickets())
        } else {
            0
        };
        let now_ms = unix_ms();
        let order = self.vsw.order(now_ms);
        let input = PlanInput {
            demand: clients.len() + pool_units,
            client_demand: clients.len(),
            enis: self.usable_enis(&order, now_ms),
            creating_room: self.inflight.creating_room(self.cap.ips_per_eni),
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

    /// ENIs that can take addresses now, in preference order: vswitch
    /// rank, then fewest addresses held or pending.
    fn usable_enis(&self, order: &[planner::VswChoice], now_ms: u64) -> Vec<EniRoom> {
        let switches = self.vsw.switches();
        let mut enis: Vec<(usize, usize, EniRoom)> = self
            .pool
            .enis
            .values()
            .filter(|e| e.phase == EniPhase::Ready && !e.at_limit)
            .filter(|e| switches.inhibited_until(&e.vswitch, now_ms).is_none())
            .filter_map(|e| {
                let held = self.pool.ips_on(&e.id) + e.pending;
                let room = self.eni_room(e, now_ms);
                let backlog_free = self.workers.get(&e.id)?.backlog_free();
                let call = match self.kind_on(&e.vswitch, now_ms) {
                    Kind::Prefix => self.per_call(),
                    Kind::Single => self.vsw.call_size(&e.vswitch),
                };
                (room > 0).then(|| {
                    (
                        VSwitches::rank(order, &e.vswitch),
                        held,
                        EniRoom {
                            id: e.id.clone(),
                            room,
                            backlog_free,
                            call,
                        },
                    )
                })
            })
            .collect();
        enis.sort_by(|a, b| (a.0, a.1, &a.2.id).cmp(&(b.0, b.1, &b.2.id)));
        enis.into_iter().map(|(_, _, e)| e).collect()
    }

    /// Queues the planned units on their ENIs' workers, each as a ticket.
    fn submit(
        &mut self,
        submits: Vec<(String, usize)>,
        units: &mut VecDeque<Option<u64>>,
        now_ms: u64,
    ) {
        for (eni, n) in submits {
            let Some(e) = self.pool.enis.get(&eni) else {
                continue;
            };
            let kind = self.kind_on(&e.vswitch, now_ms);
            // A /28 brings 16 addresses whatever the demand: ask for whole
            // ones, and count the surplus as pool tickets so that the
            // addresses in flight are counted once.
            let limit = self
                .eni_room(e, now_ms)
                .min(self.workers.get(&eni).map_or(0, |w| w.backlog_free()));
            let total = prefix::round_units(kind, n, limit).max(n);
            for i in 0..total {
                // The planner's `n` units first, then the surplus.
                let unit = if i < n {
                    match units.front() {
                        Some(&u) => u,
                        None => break,
                    }
                } else {
                    None
                };
                let t = self.new_ticket(unit);
                let queued = self
                    .workers
                    .get(&eni)
                    .is_some_and(|w| w.try_submit(t, kind));
                if !queued {
                    self.ticket_done(t);
                    break;
                }
                if i < n {
                    units.pop_front();
                }
                if let Some(e) = self.pool.enis.get_mut(&eni) {
                    e.pending += 1;
                    if kind == Kind::Prefix {
                        e.pending_in_prefixes += 1;
                    }
                }
            }
        }
    }

    /// Starts the planned ENI creations; false if a thread could not be
    /// started (the allocator is stopping).
    fn create(
        &mut self,
        creates: Vec<(String, usize)>,
        units: &mut VecDeque<Option<u64>>,
        now: Instant,
        now_ms: u64,
    ) -> bool {
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
            if !self.create_one(slots, vswitch, init, units, now_ms) {
                return false;
            }
        }
        true
    }

    /// One ENI creation on `vswitch` for `init` units of demand.
    fn create_one(
        &mut self,
        slots: inflight::CreateSlots,
        vswitch: String,
        init: usize,
        units: &mut VecDeque<Option<u64>>,
        now_ms: u64,
    ) -> bool {
        // In prefix kind the ENI comes with whole /28s beside its
        // primary: the surplus over the demand is counted as pool
        // tickets, as for a worker's prefix call.
        let kind = self.kind_on(&vswitch, now_ms);
        let singles_max = self.opts.max_ips_per_call.min(self.cap.slots_per_eni) + 1;
        // Single addresses: one call's worth, within the ENI's slots
        // (the planner sizes prefix-mode creates in /28s' worth).
        let init = match kind {
            Kind::Single => init.min(singles_max).min(self.vsw.call_size(&vswitch)),
            Kind::Prefix => init,
        };
        // At least one: the primary is handed out last, and the next
        // demand then needs no call of its own.
        let prefixes = match kind {
            Kind::Prefix => {
                prefix::prefixes_for(init.saturating_sub(1).max(1), self.cap.slots_per_eni)
            }
            Kind::Single => 0,
        };
        let total = if prefixes > 0 {
            1 + prefixes * prefix::PER_PREFIX
        } else {
            init
        };
        let tickets: Vec<TicketId> = (0..total)
            .map(|i| {
                let unit = if i < init {
                    units.pop_front().flatten()
                } else {
                    None
                };
                self.new_ticket(unit)
            })
            .collect();
        if prefixes > 0 {
            info!("creating an ENI on {vswitch} with {prefixes} /28 prefix(es)");
        } else {
            info!("creating an ENI on {vswitch} with {init} address(es)");
        }
        let (op, op_permit) = self
            .inflight
            .begin_create(slots, vswitch.clone(), total, tickets);
        let job = CreateJob {
            op,
            vswitch,
            security_groups: self.opts.security_groups.clone(),
            extra_tags: self.opts.eni_tags.clone(),
            instance_id: self.opts.instance_id.clone(),
            node_id: self.opts.node_id.clone(),
            // What a create with single addresses asks if no /28 can
            // be had.
            init: init.min(singles_max),
            prefixes,
            dual: self.opts.dual,
            ready_timeout: self.opts.eni_ready_timeout,
            metadata_wait: self.opts.metadata_wait,
        };
        match eniops::spawn_create(
            job,
            Arc::clone(&self.cloud),
            Arc::clone(&self.batcher),
            self.events_tx.clone(),
            op_permit,
        ) {
            Ok(h) => {
                self.helpers.push((format!("ENI create {op}"), h));
                true
            }
            Err(e) => {
                self.fatal(format!("cannot start an ENI operation thread: {e}").into());
                false
            }
        }
    }

    /// Client units no source can serve now fail at once, newest first.
    fn fail_unplaceable(&mut self, unplaceable: usize, now_ms: u64) {
        if unplaceable == 0 {
            return;
        }
        let reason = self.exhaustion_reason(now_ms);
        for id in self.demand.newest_unplanned(unplaceable) {
            self.fail_waiter(id, AllocError::new(ErrCode::Exhausted, reason.clone()));
        }
    }

    /// Addresses one Assign or Create call brings at most: a call's worth
    /// of /28s in prefix mode.
    pub(super) fn per_call(&self) -> usize {
        if self.cap.prefix_mode {
            self.opts.max_ips_per_call * prefix::PER_PREFIX
        } else {
            self.opts.max_ips_per_call
        }
    }

    pub(super) fn exhaustion_reason(&self, now_ms: u64) -> String {
        let switches = self.vsw.switches();
        let inhibited: Vec<String> = switches
            .ids()
            .iter()
            .filter_map(|id| {
                switches
                    .inhibited_until(id, now_ms)
                    .map(|u| format!("{id} until {}", format_utc(u / 1000)))
            })
            .collect();
        if !inhibited.is_empty() && inhibited.len() == switches.ids().len() {
            format!("no vswitch has free addresses ({})", inhibited.join(", "))
        } else {
            let c = self.pool.counts();
            format!(
                "capacity reached: {} addresses on {} of {} ENIs ({} in use, {} reserved, {} cooling, {} requested)",
                c.ips,
                self.pool.enis.len(),
                self.cap.usable_enis,
                c.inuse,
                c.reserved,
                c.cooling,
                self.demand.pending()
            )
        }
    }

    // ---- maintenance ---------------------------------------------------

    pub(super) fn maintain(&mut self, now: Instant) {
        if !self.verified() {
            return;
        }
        // Change times of ENIs that are gone are only needed while a cloud
        // view read before they went may still arrive.
        let horizon = now.checked_sub(Duration::from_secs(600));
        let enis = &self.pool.enis;
        self.last_change
            .retain(|eni, t| enis.contains_key(eni) || horizon.is_none_or(|h| *t > h));
        // Invalid addresses go back to the cloud.
        for (eni, v4, v6) in self.pool.invalid_to_release() {
            if let Some(w) = self.workers.get(&eni) {
                self.pool.set_releasing(&v4, true);
                let _ = w.unassign(v4, v6);
            }
        }
        if self.demand.waiting() > 0 || self.demand.any_bound() || self.shed_backoff.active(now) {
            return;
        }
        let mut idle = self.pool.idle_count();
        let max_idle = self.idle_bound(idle, now);
        if self.cap.prefix_mode {
            idle -= self.give_back_prefixes(idle, max_idle);
        }
        let mut excess = idle.saturating_sub(max_idle);
        if excess == 0 {
            return;
        }
        for (eni, v4) in self.pool.shed_candidates(excess) {
            let Some(w) = self.workers.get(&eni) else {
                continue;
            };
            excess -= v4.len();
            self.pool.set_releasing(&v4, true);
            info!(
                "giving {} idle address(es) of {eni} back (idle {idle} > {max_idle})",
                v4.len()
            );
            let v6 = self.pool.pairs_of(&v4);
            let _ = w.unassign(v4, v6);
        }
        let mut freeable = self.pool.freeable_enis();
        freeable.retain(|e| self.free_backoff.get(e).is_none_or(|t| *t <= now));
        for eni in freeable.into_iter().take(excess) {
            let Some((_, permit)) = self.inflight.begin_free(&eni) else {
                break;
            };
            if let Some(p) = self.pool.enis.get_mut(&eni) {
                p.phase = EniPhase::Freeing;
            }
            info!("freeing {eni}: it holds only its idle primary address");
            match eniops::spawn_free(
                eni.clone(),
                self.opts.instance_id.clone(),
                Arc::clone(&self.cloud),
                self.events_tx.clone(),
                permit,
            ) {
                Ok(h) => self.helpers.push((format!("ENI free {eni}"), h)),
                Err(e) => {
                    self.fatal(format!("cannot start an ENI operation thread: {e}").into());
                    return;
                }
            }
        }
    }

    /// The idle addresses this pool check keeps at most: `max_pool_size`,
    /// or after a surge what was idle before it (see `surge`).
    fn idle_bound(&mut self, idle: usize, now: Instant) -> usize {
        let Some(grown) = self.surge.shrink_back(now) else {
            return self.cap.max_idle;
        };
        self.surge.settle();
        let keep = surge::keep_after(idle, grown, self.cap.min_idle, self.cap.max_idle);
        if keep < idle.min(self.cap.max_idle) {
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
        let candidates: Vec<(String, prefix::Candidate)> = self
            .pool
            .prefix_candidates()
            .into_iter()
            .map(|(eni, p, in_use, reclaimable)| {
                (
                    eni,
                    prefix::Candidate {
                        prefix: p,
                        eni_in_use: in_use,
                        reclaimable,
                    },
                )
            })
            .collect();
        let only: Vec<prefix::Candidate> = candidates.iter().map(|(_, c)| *c).collect();
        let chosen = prefix::to_give_back(&only, idle, self.cap.min_idle, max_idle);
        let mut by_eni: BTreeMap<String, Vec<Ipv4Prefix>> = BTreeMap::new();
        for (eni, c) in &candidates {
            if chosen.contains(&c.prefix) {
                by_eni.entry(eni.clone()).or_default().push(c.prefix);
            }
        }
        let mut leaving = 0;
        for (eni, prefixes) in by_eni {
            let Some(w) = self.workers.get(&eni) else {
                continue;
            };
            let members: Vec<Ipv4Addr> = prefixes.iter().flat_map(|p| p.addresses()).collect();
            self.pool.set_releasing(&members, true);
            leaving += members.len();
            info!(
                "giving {} idle /28 prefix(es) of {eni} back (idle {idle} > {max_idle})",
                prefixes.len()
            );
            let _ = w.unassign_prefixes(prefixes);
        }
        leaving
    }
}
