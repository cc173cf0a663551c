//! Planning: where the demand waiting goes (worker backlogs, new ENIs),
//! and maintenance: what goes back to the cloud when the pool is too big.

use super::*;

impl Actor {
    // ---- planning ------------------------------------------------------

    pub(super) fn plan(&mut self, now: Instant) {
        if self.stopping {
            return;
        }
        // Waiters without a ticket adopt pool tickets first.
        let spare: Vec<TicketId> = self
            .tickets
            .iter()
            .filter(|(_, t)| t.waiter.is_none())
            .map(|(id, _)| *id)
            .collect();
        for t in spare {
            let Some(w) = self.waiters.iter_mut().find(|w| w.ticket.is_none()) else {
                break;
            };
            w.ticket = Some(t);
            let wid = w.id;
            if let Some(ticket) = self.tickets.get_mut(&t) {
                ticket.waiter = Some(wid);
            }
        }
        let clients: VecDeque<u64> = self
            .waiters
            .iter()
            .filter(|w| w.ticket.is_none())
            .map(|w| w.id)
            .collect();
        let pool_units = if self.pool_backoff.active(now) || !self.waiters.is_empty() {
            0
        } else {
            let spare_tickets = self.tickets.values().filter(|t| t.waiter.is_none()).count();
            self.cap
                .min_idle
                .saturating_sub(self.pool.idle_count() + spare_tickets)
        };
        if clients.is_empty() && pool_units == 0 {
            return;
        }

        let now_ms = unix_ms();
        let mut order = self.vsw.order(now_ms);
        for c in &mut order {
            c.free = self
                .vsw
                .budget(&c.id, self.asked_on(&c.id))
                .map(|b| b as u64);
        }
        let mut enis: Vec<(usize, usize, EniRoom)> = self
            .pool
            .enis
            .values()
            .filter(|e| e.phase == EniPhase::Ready && !e.at_limit)
            .filter(|e| self.vsw.inhibited_until(&e.vswitch, now_ms).is_none())
            .filter_map(|e| {
                let held = self.pool.ips_on(&e.id) + e.pending;
                let room = self.eni_room(e, now_ms);
                let backlog_free = self.workers.get(&e.id)?.backlog_free();
                (room > 0).then(|| {
                    (
                        VSwitches::rank(&order, &e.vswitch),
                        held,
                        EniRoom {
                            id: e.id.clone(),
                            room,
                            backlog_free,
                        },
                    )
                })
            })
            .collect();
        enis.sort_by(|a, b| (a.0, a.1, &a.2.id).cmp(&(b.0, b.1, &b.2.id)));
        let mut enis: Vec<EniRoom> = enis.into_iter().map(|(_, _, e)| e).collect();
        self.cap_to_vswitches(&mut enis, now_ms);
        enis.retain(|e| e.room > 0);
        let creating_room = self
            .ops
            .values()
            .map(|op| match op {
                Op::Create { init, .. } => self.cap.ips_per_eni.saturating_sub(*init),
                Op::Free { .. } => 0,
            })
            .sum();
        let input = PlanInput {
            demand: clients.len() + pool_units,
            client_demand: clients.len(),
            enis,
            creating_room,
            vswitches: order,
            eni_slots: self.eni_sem.available(),
            op_slots: self.op_sem.available(),
            max_per_call: self.per_call(),
            ips_per_eni: self.cap.ips_per_eni,
        };
        let plan = planner::plan(&input);
        let mut units: VecDeque<Option<u64>> = clients.iter().copied().map(Some).collect();
        units.extend(std::iter::repeat_n(None, pool_units));

        for (eni, n) in plan.submits {
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
        // New ENIs aggregate like the workers do: a create waits until the
        // oldest waiting client has waited the aggregation window, unless
        // it is already full, so a burst is sized as a whole.
        let oldest = self
            .waiters
            .iter()
            .filter(|w| w.ticket.is_none())
            .map(|w| w.since)
            .min();
        let gathered = oldest.is_none_or(|t| now.duration_since(t) >= self.opts.aggregation_window);
        for (vswitch, init) in plan.creates {
            if !gathered && init < self.per_call().min(self.cap.ips_per_eni) {
                continue;
            }
            let (Some(eni_permit), Some(op_permit)) =
                (self.eni_sem.try_acquire(), self.op_sem.try_acquire())
            else {
                break;
            };
            let op = self.id();
            // In prefix kind the ENI comes with whole /28s beside its
            // primary: the surplus over the demand is counted as pool
            // tickets, as for a worker's prefix call.
            let kind = self.kind_on(&vswitch, now_ms);
            // Single addresses: one call's worth, within the ENI's slots
            // (the planner sizes prefix-mode creates in /28s' worth).
            let init = match kind {
                Kind::Single => {
                    init.min(self.opts.max_ips_per_call.min(self.cap.slots_per_eni) + 1)
                }
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
            let mut tickets = Vec::new();
            for i in 0..total {
                let unit = if i < init {
                    units.pop_front().flatten()
                } else {
                    None
                };
                tickets.push(self.new_ticket(unit));
            }
            let job = CreateJob {
                op,
                vswitch: vswitch.clone(),
                security_groups: self.opts.security_groups.clone(),
                extra_tags: self.opts.eni_tags.clone(),
                instance_id: self.opts.instance_id.clone(),
                node_id: self.opts.node_id.clone(),
                // What a create with single addresses asks if no /28 can
                // be had.
                init: init.min(self.opts.max_ips_per_call.min(self.cap.slots_per_eni) + 1),
                prefixes,
                dual: self.opts.dual,
                ready_timeout: self.opts.eni_ready_timeout,
                metadata_wait: self.opts.metadata_wait,
            };
            if prefixes > 0 {
                info!("creating an ENI on {vswitch} with {prefixes} /28 prefix(es)");
            } else {
                info!("creating an ENI on {vswitch} with {init} address(es)");
            }
            self.ops.insert(
                op,
                Op::Create {
                    vswitch,
                    init: total,
                    eni: None,
                    tickets,
                    permit: eni_permit,
                },
            );
            match eniops::spawn_create(
                job,
                Arc::clone(&self.cloud),
                Arc::clone(&self.batcher),
                self.events_tx.clone(),
                op_permit,
            ) {
                Ok(h) => self.helpers.push((format!("ENI create {op}"), h)),
                Err(e) => {
                    self.fatal(format!("cannot start an ENI operation thread: {e}"));
                    return;
                }
            }
        }
        if plan.unplaceable > 0 {
            let reason = self.exhaustion_reason(now_ms);
            let doomed: Vec<u64> = self
                .waiters
                .iter()
                .rev()
                .filter(|w| w.ticket.is_none())
                .take(plan.unplaceable)
                .map(|w| w.id)
                .collect();
            for id in doomed {
                self.fail_waiter(id, AllocError::new(ErrCode::Exhausted, reason.clone()));
            }
        }
    }

    /// Caps each ENI's room by what its vswitch has left (its cached free
    /// count less what is asked and not yet granted there), in the order
    /// the ENIs are used: no call asks a vswitch for more than it has, so
    /// its last addresses are handed out instead of refused as a batch.
    /// Prefix mode is left alone: a free count says nothing of free /28s.
    fn cap_to_vswitches(&self, rooms: &mut [EniRoom], now_ms: u64) {
        let mut left: HashMap<String, usize> = HashMap::new();
        for r in rooms.iter_mut() {
            let Some(e) = self.pool.enis.get(&r.id) else {
                continue;
            };
            if self.kind_on(&e.vswitch, now_ms) != Kind::Single {
                continue;
            }
            let budget = match left.entry(e.vswitch.clone()) {
                std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
                std::collections::hash_map::Entry::Vacant(v) => {
                    match self.vsw.budget(&e.vswitch, self.asked_on(&e.vswitch)) {
                        Some(b) => v.insert(b),
                        None => continue,
                    }
                }
            };
            r.room = r.room.min(*budget);
            *budget -= r.room;
        }
    }

    /// Addresses asked of a vswitch and not yet granted: the pending
    /// tickets of its ENIs and the ENIs being created on it.
    fn asked_on(&self, vswitch: &str) -> usize {
        let pending: usize = self
            .pool
            .enis
            .values()
            .filter(|e| e.vswitch == vswitch)
            .map(|e| e.pending)
            .sum();
        let creating: usize = self
            .ops
            .values()
            .map(|op| match op {
                Op::Create {
                    vswitch: v, init, ..
                } if v == vswitch => *init,
                _ => 0,
            })
            .sum();
        pending + creating
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
        let inhibited: Vec<String> = self
            .vsw
            .ids()
            .iter()
            .filter_map(|id| {
                self.vsw
                    .inhibited_until(id, now_ms)
                    .map(|u| format!("{id} until {}", format_utc(u / 1000)))
            })
            .collect();
        if !inhibited.is_empty() && inhibited.len() == self.vsw.ids().len() {
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
                self.tickets.len()
            )
        }
    }

    // ---- maintenance ---------------------------------------------------

    pub(super) fn maintain(&mut self, now: Instant) {
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
        if !self.waiters.is_empty()
            || self.tickets.values().any(|t| t.waiter.is_some())
            || self.shed_backoff.active(now)
        {
            return;
        }
        let mut idle = self.pool.idle_count();
        if self.cap.prefix_mode {
            idle -= self.give_back_prefixes(idle);
        }
        let mut excess = idle.saturating_sub(self.cap.max_idle);
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
                "giving {} idle address(es) of {eni} back (idle {idle} > max {})",
                v4.len(),
                self.cap.max_idle
            );
            let v6 = self.pool.pairs_of(&v4);
            let _ = w.unassign(v4, v6);
        }
        let mut freeable = self.pool.freeable_enis();
        freeable.retain(|e| self.free_backoff.get(e).is_none_or(|t| *t <= now));
        for eni in freeable.into_iter().take(excess) {
            let Some(permit) = self.op_sem.try_acquire() else {
                break;
            };
            if let Some(p) = self.pool.enis.get_mut(&eni) {
                p.phase = EniPhase::Freeing;
            }
            info!("freeing {eni}: it holds only its idle primary address");
            let op = self.id();
            self.ops.insert(op, Op::Free { eni: eni.clone() });
            match eniops::spawn_free(
                eni.clone(),
                self.opts.instance_id.clone(),
                Arc::clone(&self.cloud),
                self.events_tx.clone(),
                permit,
            ) {
                Ok(h) => self.helpers.push((format!("ENI free {eni}"), h)),
                Err(e) => {
                    self.fatal(format!("cannot start an ENI operation thread: {e}"));
                    return;
                }
            }
        }
    }

    /// Prefix mode: gives back whole /28s whose 16 addresses are idle
    /// (past any reservation or cool-down), from the ENIs with the fewest
    /// addresses in use, while idle stays above `max_pool_size` and not
    /// below `min_pool_size`. Returns the addresses on their way back.
    fn give_back_prefixes(&mut self, idle: usize) -> usize {
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
        let chosen = prefix::to_give_back(&only, idle, self.cap.min_idle, self.cap.max_idle);
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
                "giving {} idle /28 prefix(es) of {eni} back (idle {idle} > max {})",
                prefixes.len(),
                self.cap.max_idle
            );
            let _ = w.unassign_prefixes(prefixes);
        }
        leaving
    }
}
