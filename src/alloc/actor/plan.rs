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
        let order = self.vsw.order(now_ms);
        let mut enis: Vec<(usize, usize, EniRoom)> = self
            .pool
            .enis
            .values()
            .filter(|e| e.phase == EniPhase::Ready && !e.at_limit)
            .filter(|e| self.vsw.inhibited_until(&e.vswitch, now_ms).is_none())
            .filter_map(|e| {
                let held = self.pool.ips_on(&e.id) + e.pending;
                let room = self.cap.ips_per_eni.saturating_sub(held);
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
            enis: enis.into_iter().map(|(_, _, e)| e).collect(),
            creating_room,
            vswitches: order,
            eni_slots: self.eni_sem.available(),
            op_slots: self.op_sem.available(),
            max_per_call: self.opts.max_ips_per_call,
            ips_per_eni: self.cap.ips_per_eni,
        };
        let plan = planner::plan(&input);
        let mut units: VecDeque<Option<u64>> = clients.iter().copied().map(Some).collect();
        units.extend(std::iter::repeat_n(None, pool_units));

        for (eni, n) in plan.submits {
            for _ in 0..n {
                let Some(&unit) = units.front() else { break };
                let t = self.new_ticket(unit);
                let queued = self.workers.get(&eni).is_some_and(|w| w.try_submit(t));
                if !queued {
                    self.ticket_done(t);
                    break;
                }
                units.pop_front();
                if let Some(e) = self.pool.enis.get_mut(&eni) {
                    e.pending += 1;
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
            if !gathered && init < self.opts.max_ips_per_call.min(self.cap.ips_per_eni) {
                continue;
            }
            let (Some(eni_permit), Some(op_permit)) =
                (self.eni_sem.try_acquire(), self.op_sem.try_acquire())
            else {
                break;
            };
            let op = self.id();
            let mut tickets = Vec::new();
            for _ in 0..init {
                let unit = units.pop_front().flatten();
                tickets.push(self.new_ticket(unit));
            }
            let job = CreateJob {
                op,
                vswitch: vswitch.clone(),
                security_groups: self.opts.security_groups.clone(),
                extra_tags: self.opts.eni_tags.clone(),
                instance_id: self.opts.instance_id.clone(),
                node_id: self.opts.node_id.clone(),
                init,
                dual: self.opts.dual,
                ready_timeout: self.opts.eni_ready_timeout,
                metadata_wait: self.opts.metadata_wait,
            };
            info!("creating an ENI on {vswitch} with {init} address(es)");
            self.ops.insert(
                op,
                Op::Create {
                    vswitch,
                    init,
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
        let idle = self.pool.idle_count();
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
}
