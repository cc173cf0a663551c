//! Reports from workers, ENI operations and the maintenance thread.

use super::*;

impl Actor {
    // ---- events --------------------------------------------------------

    pub(super) fn on_event(&mut self, e: Event) {
        match e {
            Event::Assigned {
                eni,
                tickets,
                prefixes,
                v4,
                v6,
                error,
            } => match (prefixes, error) {
                (Some(p), None) => self.on_prefixes_assigned(eni, tickets, &p),
                (p, error) => self.on_assigned(eni, tickets, v4, v6, error, p.is_some()),
            },
            Event::Unassigned {
                eni,
                v4,
                gone_v4,
                gone_v6,
                gone_prefixes,
                error,
            } => {
                for p in &gone_prefixes {
                    self.pool.remove_prefix(&eni, *p);
                }
                self.on_unassigned(&eni, &v4, &gone_v4, &gone_v6, error);
            }
            Event::EniCreated { op, eni } => {
                self.inflight.created(op, eni);
            }
            Event::EniReady { op, eni } => self.on_eni_ready(op, eni),
            Event::EniFailed { op, error, leaked } => self.on_eni_failed(op, &error, leaked),
            Event::EniFreed { eni, result } => self.on_eni_freed(eni, result),
            Event::VSwitchFree(counts) => {
                for id in self.vsw.set_free(counts) {
                    info!("{id} has free addresses again: no longer inhibited");
                }
                self.apply_call_caps();
            }
            Event::VSwitchV6 {
                vswitch,
                cidr6,
                gateway6,
            } => {
                self.vsw.set_v6(vswitch, cidr6, gateway6);
            }
            Event::SecurityGroupDrift(lines) => {
                for l in &lines {
                    warn!("security group drift: {l}");
                }
                self.sg_drift = lines;
            }
            Event::Reconcile {
                started,
                enis,
                detached,
            } => self.on_reconcile(started, enis, detached.as_deref()),
        }
    }

    /// A call for `asked` addresses on `vswitch` found too few free: the
    /// next calls ask fewer, or the vswitch is inhibited (`vswstate`).
    pub(super) fn exhausted(&mut self, vswitch: &str, asked: usize, err: &CloudError) {
        let until = unix_ms() + self.opts.inhibit.as_millis() as u64;
        match self.vsw.exhausted(vswitch, asked, until) {
            vswstate::Exhaustion::Capped(n) => {
                warn!(
                    "{vswitch} has fewer than {asked} free address(es) ({}): asking at most {n} a call",
                    err.code_or_kind()
                );
                self.apply_call_caps();
            }
            vswstate::Exhaustion::Inhibited => self.inhibit(vswitch, err),
        }
    }

    pub(super) fn inhibit(&mut self, vswitch: &str, err: &CloudError) {
        let until = unix_ms() + self.opts.inhibit.as_millis() as u64;
        warn!(
            "{vswitch} is out of addresses ({}); not used until {}",
            err.code_or_kind(),
            format_utc(until / 1000)
        );
        self.vsw.inhibit(vswitch, until);
    }

    pub(super) fn add_addresses(&mut self, eni: &str, v4: &[Ipv4Addr], v6: &[Ipv6Addr]) -> usize {
        let dual = self.opts.dual;
        let mut valid = 0;
        for (i, a) in v4.iter().enumerate() {
            let pair = if dual { v6.get(i).copied() } else { None };
            self.pool.add_ip(eni, *a, pair);
            if !dual || pair.is_some() {
                valid += 1;
            }
        }
        if dual {
            for b in v6.iter().skip(v4.len()) {
                self.pool.add_unpaired_v6(eni, *b);
            }
        }
        self.last_change.insert(eni.to_string(), Instant::now());
        valid
    }

    /// A worker's call for these tickets ended: they no longer count as
    /// pending on the ENI (its prefix tickets, if they were).
    fn settle_pending(&mut self, eni: &str, tickets: usize, in_prefixes: bool) {
        if let Some(e) = self.pool.enis.get_mut(eni) {
            e.pending = e.pending.saturating_sub(tickets);
            if in_prefixes {
                e.pending_in_prefixes = e.pending_in_prefixes.saturating_sub(tickets);
            }
        }
    }

    /// A prefix call granted /28s: all 16 addresses of each join the pool
    /// (those beyond the tickets idle).
    pub(super) fn on_prefixes_assigned(
        &mut self,
        eni: String,
        tickets: Vec<TicketId>,
        prefixes: &[Ipv4Prefix],
    ) {
        self.settle_pending(&eni, tickets.len(), true);
        for p in prefixes {
            self.pool.add_prefix(&eni, *p);
        }
        self.last_change.insert(eni.clone(), Instant::now());
        self.pool_backoff.succeed();
        let valid = prefixes.len() * prefix::PER_PREFIX;
        info!(
            "{eni} got {} /28 prefix(es): {valid} address(es)",
            prefixes.len()
        );
        for (i, t) in tickets.into_iter().enumerate() {
            if i < valid {
                self.ticket_done(t);
            } else {
                self.ticket_failed(t, None);
            }
        }
    }

    pub(super) fn on_assigned(
        &mut self,
        eni: String,
        tickets: Vec<TicketId>,
        v4: Vec<Ipv4Addr>,
        v6: Vec<Ipv6Addr>,
        error: Option<CloudError>,
        as_prefixes: bool,
    ) {
        self.settle_pending(&eni, tickets.len(), as_prefixes);
        let valid = self.add_addresses(&eni, &v4, &v6);
        if let Some(err) = &error {
            warn!("assigning addresses to {eni} failed: {err}");
            match err.kind {
                CloudErrorKind::Exhausted => {
                    if let Some(vsw) = self.pool.enis.get(&eni).map(|e| e.vswitch.clone()) {
                        if as_prefixes {
                            self.inhibit(&vsw, err);
                        } else {
                            self.exhausted(&vsw, tickets.len(), err);
                        }
                    }
                }
                CloudErrorKind::PrefixExhausted => {
                    if let Some(vsw) = self.pool.enis.get(&eni).map(|e| e.vswitch.clone()) {
                        self.inhibit_prefixes(&vsw, err.code_or_kind());
                    }
                }
                CloudErrorKind::LimitExceeded => {
                    if let Some(e) = self.pool.enis.get_mut(&eni) {
                        e.at_limit = true;
                    }
                }
                _ => {}
            }
        } else {
            self.pool_backoff.succeed();
            if !as_prefixes {
                if let Some(vsw) = self.pool.enis.get(&eni).map(|e| e.vswitch.clone()) {
                    if self.vsw.call_cap(&vsw).is_some() {
                        self.vsw.served(&vsw, tickets.len());
                        self.apply_call_caps();
                    }
                }
            }
        }
        for (i, t) in tickets.into_iter().enumerate() {
            if i < valid {
                self.ticket_done(t);
            } else {
                self.ticket_failed(t, error.as_ref());
            }
        }
    }

    pub(super) fn on_unassigned(
        &mut self,
        eni: &str,
        asked: &[Ipv4Addr],
        gone_v4: &[Ipv4Addr],
        gone_v6: &[Ipv6Addr],
        error: Option<CloudError>,
    ) {
        // The pair of an IPv4 that left stays on the ENI if its own
        // unassign did not happen: it is unpaired now, and goes back with
        // the next invalid sweep.
        for b in self.pool.pairs_of(gone_v4) {
            if !gone_v6.contains(&b) {
                self.pool.add_unpaired_v6(eni, b);
            }
        }
        self.pool.remove_ips(gone_v4);
        for b in gone_v6 {
            self.pool.unpaired_v6.remove(b);
        }
        let kept: Vec<Ipv4Addr> = asked
            .iter()
            .filter(|a| !gone_v4.contains(a))
            .copied()
            .collect();
        self.pool.set_releasing(&kept, false);
        if !gone_v4.is_empty() || !gone_v6.is_empty() {
            self.last_change.insert(eni.to_string(), Instant::now());
            if let Some(e) = self.pool.enis.get_mut(eni) {
                e.at_limit = false;
            }
            info!(
                "gave {} address(es) of {eni} back to the cloud",
                gone_v4.len() + gone_v6.len()
            );
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

    pub(super) fn on_eni_ready(&mut self, op: OpId, r: ReadyEni) {
        let Some(inflight::Ended { tickets, .. }) = self.inflight.ready(op, &r.id) else {
            return;
        };
        info!(
            "{} is ready on {} with {} address(es)",
            r.id,
            r.vswitch,
            r.v4.len()
        );
        self.pool.add_eni(r.pool_eni());
        let mut valid = self.add_addresses(&r.id, &r.v4, &r.v6);
        for p in &r.prefixes {
            self.pool.add_prefix(&r.id, *p);
            valid += prefix::PER_PREFIX;
        }
        if r.prefix_fallback {
            self.inhibit_prefixes(&r.vswitch, "at CreateNetworkInterface");
        }
        self.pool_backoff.succeed();
        for (i, t) in tickets.into_iter().enumerate() {
            if i < valid {
                self.ticket_done(t);
            } else {
                self.ticket_failed(t, None);
            }
        }
        if !self.stopping {
            self.start_worker(&r.id, &r.mac);
        }
    }

    pub(super) fn on_eni_failed(&mut self, op: OpId, err: &CloudError, leaked: Option<String>) {
        let Some(inflight::Ended {
            vswitch,
            tickets,
            eni: created,
        }) = self.inflight.failed(op)
        else {
            return;
        };
        if let Some(id) = created {
            // Rolled back (or left for the sweeper): never adopted from a
            // view read while it was still attached.
            self.last_change.insert(id, Instant::now());
        }
        if let Some(eni) = leaked {
            error!("{eni} was left behind by a failed creation; the sweeper will delete it");
        }
        warn!("creating an ENI on {vswitch} failed: {err}");
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

    pub(super) fn on_eni_freed(&mut self, eni: String, result: Result<(), FreeFailure>) {
        self.inflight.freed(&eni);
        match result {
            Ok(()) => {
                info!("{eni} detached and deleted");
                self.forget_eni(&eni);
            }
            Err(FreeFailure::Detach(e)) => {
                warn!("detaching {eni} failed: {e}; it stays in the pool");
                if let Some(p) = self.pool.enis.get_mut(&eni) {
                    p.phase = EniPhase::Ready;
                }
                self.free_backoff
                    .insert(eni, Instant::now() + Duration::from_secs(60));
            }
            Err(FreeFailure::Delete(e)) => {
                warn!("{eni} is detached but deleting it failed: {e}; the sweeper will retry");
                self.forget_eni(&eni);
            }
        }
    }

    pub(super) fn forget_eni(&mut self, eni: &str) {
        if let Some(w) = self.workers.remove(eni) {
            drop(w.stop());
        }
        self.pool.remove_eni(eni);
        self.inflight.forget(eni);
        // Kept (pruned by maintenance) so that a cloud view read before
        // the ENI went away cannot adopt it again.
        self.last_change.insert(eni.to_string(), Instant::now());
    }

    pub(super) fn on_reconcile(
        &mut self,
        started: Instant,
        cloud: Vec<CloudEniView>,
        detached: Option<&[String]>,
    ) {
        let busy = self.inflight.busy_enis();
        for view in &cloud {
            let r = &view.eni;
            if busy.contains(&r.id) {
                continue;
            }
            // The cloud was read at `started`: if the ENI changed since
            // (an assign or unassign ended, it was freed or rolled back),
            // the view may be stale, so it waits for the next pass. Without
            // this, addresses an unassign had just given back were adopted
            // again from the stale view and handed out although gone.
            if self.last_change.get(&r.id).is_some_and(|t| *t >= started) {
                continue;
            }
            if !self.pool.enis.contains_key(&r.id) {
                if !view.in_metadata {
                    continue;
                }
                warn!(
                    "adopting {} (managed, attached, unknown locally) with {} address(es)",
                    r.id,
                    r.v4.len()
                );
                self.inflight.adopt(&r.id);
                self.pool.add_eni(r.pool_eni());
                self.add_addresses(&r.id, &r.v4, &r.v6);
                for p in &r.prefixes {
                    self.pool.add_prefix(&r.id, *p);
                }
                self.start_worker(&r.id, &r.mac);
                continue;
            }
            let Some(local) = self.pool.enis.get(&r.id) else {
                continue;
            };
            if local.pending > 0 || local.phase != EniPhase::Ready {
                continue;
            }
            // A per-ENI limit the cloud reported is retried once a pass.
            if let Some(e) = self.pool.enis.get_mut(&r.id) {
                e.at_limit = false;
            }
            self.reconcile_prefixes(r);
            let cloud_v4 = r.all_v4();
            // Addresses withdrawn while the ENI was away that are back.
            let found: Vec<Ipv4Addr> = self
                .pool
                .ips
                .values()
                .filter(|ip| ip.eni == r.id && ip.lost && cloud_v4.contains(&ip.v4))
                .map(|ip| ip.v4)
                .collect();
            for a in found {
                info!("{a} is on {} in the cloud again", r.id);
                self.pool.mark_found(a);
            }
            // Addresses the cloud has and we do not: adopt (a result lost
            // after the cloud granted it). One that an owner still holds on
            // a deleted ENI (the vswitch gave it out again) waits until
            // that owner releases it: never two owners of one address.
            let unknown: Vec<Ipv4Addr> = cloud_v4
                .iter()
                .copied()
                .filter(|a| match self.pool.ips.get(a) {
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
            if !unknown.is_empty() {
                warn!(
                    "adopting {} address(es) found on {} but unknown locally",
                    unknown.len(),
                    r.id
                );
                for a in unknown {
                    self.pool.add_ip(&r.id, a, None);
                }
            }
            // IPv6 the cloud has and we do not (an AssignIpv6Addresses whose
            // answer was lost): unpaired, so they go back with the next sweep.
            if self.opts.dual {
                let known = self.pool.known_v6();
                for b in r.v6.iter().filter(|b| !known.contains(b)) {
                    warn!("{b} is on {} but unknown locally; giving it back", r.id);
                    self.pool.add_unpaired_v6(&r.id, *b);
                }
            }
            // Addresses we have and the cloud does not: out of circulation.
            let missing: Vec<(Ipv4Addr, bool)> = self
                .pool
                .ips
                .values()
                .filter(|ip| ip.eni == r.id && !ip.releasing && !cloud_v4.contains(&ip.v4))
                .map(|ip| (ip.v4, matches!(ip.state, IpState::InUse { .. })))
                .collect();
            for (a, owned) in missing {
                if owned {
                    error!(
                        "{a} is held by an owner but is no longer on {} in the cloud",
                        r.id
                    );
                    self.pool.mark_lost(a);
                } else {
                    warn!("{a} is no longer on {} in the cloud; dropped", r.id);
                    self.pool.remove_ips(&[a]);
                }
            }
        }
        self.withdraw_vanished(started, &busy, &cloud, detached);
        self.verify();
    }

    /// Prefixes of a settled ENI against the cloud's: one the cloud has
    /// and we do not (an Assign whose answer was lost) is adopted with its
    /// addresses idle, so the next shrink can give it back whole; one we
    /// have and the cloud does not is dropped (its addresses then follow
    /// the rule for addresses the cloud no longer has).
    fn reconcile_prefixes(&mut self, r: &ReadyEni) {
        let local: Vec<Ipv4Prefix> = self
            .pool
            .enis
            .get(&r.id)
            .map(|e| e.prefixes.iter().copied().collect())
            .unwrap_or_default();
        for p in r.prefixes.iter().filter(|p| !local.contains(p)) {
            let clash = p
                .addresses()
                .any(|a| self.pool.ips.get(&a).is_some_and(|ip| ip.eni != r.id));
            if clash {
                warn!(
                    "{p} is on {} in the cloud but some of its addresses are still held on another ENI; adopted once released",
                    r.id
                );
                continue;
            }
            warn!("adopting {p} found on {} but unknown locally", r.id);
            self.pool.add_prefix(&r.id, *p);
        }
        for p in local.iter().filter(|p| !r.prefixes.contains(p)) {
            let releasing = p
                .addresses()
                .any(|a| self.pool.ips.get(&a).is_some_and(|ip| ip.releasing));
            if !releasing {
                warn!("{p} is no longer on {} in the cloud", r.id);
                self.pool.remove_prefix(&r.id, *p);
            }
        }
    }

    /// Managed ENIs the cloud no longer shows attached (an operator
    /// detached or deleted one): nothing more is asked of them, their idle
    /// addresses leave the pool and their owned ones are never handed out
    /// again. If an ENI comes back, the next pass adopts its addresses.
    fn withdraw_vanished(
        &mut self,
        started: Instant,
        busy: &[String],
        cloud: &[CloudEniView],
        detached: Option<&[String]>,
    ) {
        let vanished: Vec<String> = self
            .pool
            .enis
            .values()
            .filter(|e| !e.gone)
            .filter(|e| e.phase == EniPhase::Ready && e.pending == 0 && !busy.contains(&e.id))
            .filter(|e| !cloud.iter().any(|v| v.eni.id == e.id))
            .filter(|e| self.last_change.get(&e.id).is_none_or(|t| *t < started))
            .map(|e| e.id.clone())
            .collect();
        for id in vanished {
            if detached.is_some_and(|d| !d.contains(&id)) {
                self.forget_deleted(&id);
                continue;
            }
            let on_it: Vec<(Ipv4Addr, bool)> = self
                .pool
                .ips
                .values()
                .filter(|ip| ip.eni == id && !ip.lost)
                .map(|ip| (ip.v4, matches!(ip.state, IpState::InUse { .. })))
                .collect();
            if let Some(e) = self.pool.enis.get_mut(&id) {
                if e.at_limit && on_it.is_empty() {
                    continue;
                }
                e.at_limit = true;
            }
            error!(
                "{id} is no longer attached to this instance in the cloud; its {} address(es) are withdrawn",
                on_it.len()
            );
            for (a, owned) in on_it {
                if owned {
                    self.pool.mark_lost(a);
                } else {
                    self.pool.remove_ips(&[a]);
                }
            }
        }
    }

    /// A managed ENI the cloud no longer has at all (deleted behind our
    /// back): its slot is free for a new ENI, its worker stops, its idle
    /// addresses leave the pool; the addresses owners hold stay theirs
    /// until released (never handed out again), then it is forgotten.
    fn forget_deleted(&mut self, id: &str) {
        let on_it: Vec<(Ipv4Addr, bool)> = self
            .pool
            .ips
            .values()
            .filter(|ip| ip.eni == id)
            .map(|ip| (ip.v4, matches!(ip.state, IpState::InUse { .. })))
            .collect();
        let held = on_it.iter().filter(|(_, owned)| *owned).count();
        error!(
            "{id} no longer exists in the cloud: its slot is freed; {held} address(es) still held by owners are kept for them until released, never handed out again"
        );
        for (a, owned) in on_it {
            if owned {
                self.pool.mark_lost(a);
            } else {
                self.pool.remove_ips(&[a]);
            }
        }
        self.pool.unpaired_v6.retain(|_, e| e != id);
        if let Some(e) = self.pool.enis.get_mut(id) {
            e.gone = true;
            e.at_limit = true;
        }
        if let Some(w) = self.workers.remove(id) {
            if let Some(h) = w.stop() {
                self.helpers.push((format!("worker of {id}"), h));
            }
        }
        self.inflight.forget(id);
        self.pool.drop_empty_gone();
    }
}
