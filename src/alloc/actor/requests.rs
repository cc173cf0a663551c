//! Client requests, and the waiters and tickets that carry their demand
//! until an address or an error answers them.

use super::*;
use crate::core::EniInfo;

impl Actor {
    // ---- requests --------------------------------------------------------

    /// A client's command: the one place where each verb is answered.
    pub(super) fn on_command(&mut self, env: Envelope) {
        let Envelope {
            command,
            started,
            reply,
        } = env;
        match command {
            Command::Alloc {
                owner,
                sandbox,
                prefer,
                attach,
            } => {
                let renew = self.pool.note_attachment(&owner, sandbox.as_ref(), attach);
                self.on_alloc(owner, sandbox, prefer, renew, started, reply);
            }
            Command::Release { owner, sandbox } => self.on_release(owner, sandbox, reply),
            Command::Gc { owner_prefix, keep } => self.on_gc(&owner_prefix, &keep, reply),
            Command::Show { owner } => {
                let a = self
                    .pool
                    .allocation_with_eni(&owner)
                    .map(|(a, eni)| Answer::Allocation(a, eni))
                    .ok_or_else(|| AllocError::bare(ErrCode::NotFound));
                let _ = reply.send(a);
            }
            Command::List => {
                let _ = reply.send(Ok(Answer::List(self.pool.list())));
            }
            Command::Status => {
                let _ = reply.send(Ok(Answer::Status(self.status_counts())));
            }
            Command::Enis => {
                let _ = reply.send(Ok(Answer::Enis(self.eni_entries())));
            }
            Command::Eni { eni } => self.on_eni(&eni, reply),
            Command::Metrics => {
                let mut g = self.snapshot().gauges();
                g.connections = crate::metrics::connections();
                let _ = reply.send(Ok(Answer::Metrics(crate::metrics::render(&g))));
            }
            Command::Config => {
                let _ = reply.send(Ok(Answer::Config(self.config_view.clone())));
            }
            Command::Audit => self.start_audit(reply),
        }
    }

    /// `audit` reads the cloud, which the actor never does itself: a
    /// thread of its own compares and answers. Before the first reconcile
    /// of a restart the pool is not settled (it holds only what was handed
    /// out): the audit waits for that reconcile, asked for now.
    pub(super) fn start_audit(&mut self, reply: Reply) {
        if self.stopping {
            let _ = reply.send(Err(AllocError::shutting_down()));
            return;
        }
        if !self.verified() {
            self.deferred_audits.push(reply);
            self.ask_first_reconcile();
            return;
        }
        let cloud = Arc::clone(&self.cloud);
        let opts = Arc::clone(&self.opts);
        let requests = self.requests_tx.clone();
        let spawned = std::thread::Builder::new()
            .name("eniipd-audit".into())
            .spawn(move || {
                let r = super::super::audit::audit(
                    &*cloud,
                    &opts.instance_id,
                    &opts.node_id,
                    &opts.security_groups,
                    || super::super::request(&requests, Request::Snapshot, Duration::from_secs(30)),
                );
                let _ = reply.send(r.map(Answer::Audit));
            });
        match spawned {
            Ok(h) => self.helpers.push(("audit".into(), h)),
            Err(e) => warn!("cannot start an audit thread: {e}"),
        }
    }

    pub(super) fn status_counts(&self) -> crate::core::StatusCounts {
        let mut c = self.pool.counts();
        c.pending = self.demand.pending();
        c.capacity = self.cap.total_ips;
        c
    }

    /// Internal requests: the daemon's and the allocator's own helpers'.
    pub(super) fn on_request(&mut self, r: Request) {
        match r {
            Request::Snapshot(reply) => {
                let _ = reply.send(self.snapshot());
            }
            Request::KnownEnis(reply) => {
                let mut ids: Vec<String> = self.pool.enis.keys().cloned().collect();
                ids.extend(self.inflight.busy_enis());
                let _ = reply.send(ids);
            }
            Request::Reload {
                capacity,
                view,
                reply,
            } => {
                info!(
                    "pool sizes reloaded: min idle {} -> {}, max idle {} -> {}",
                    self.cap.min_idle, capacity.min_idle, self.cap.max_idle, capacity.max_idle
                );
                self.cap.min_idle = capacity.min_idle;
                self.cap.max_idle = capacity.max_idle;
                self.config_view = view;
                self.next_maintenance = Instant::now();
                let _ = reply.send(self.cap);
            }
            Request::Ping(reply) => {
                let _ = reply.send(());
            }
            Request::Attached(reply) => {
                let _ = reply.send(self.pool.attached());
            }
            Request::Reap {
                owner,
                sandbox,
                netns_id,
                reply,
            } => self.on_reap(&owner, sandbox, netns_id, reply),
        }
    }

    /// The sandbox reaper found `owner`'s sandbox gone: its address is
    /// released if it is still held for that sandbox and that namespace
    /// (a new ADD in the meantime keeps it).
    fn on_reap(
        &mut self,
        owner: &Owner,
        sandbox: Option<SandboxId>,
        netns_id: crate::core::NsId,
        reply: Reply,
    ) {
        if self.stopping {
            let _ = reply.send(Err(AllocError::shutting_down()));
            return;
        }
        let same =
            self.pool.attached().iter().any(|a| {
                &a.owner == owner && a.sandbox == sandbox && a.attach.netns_id == netns_id
            });
        if !same {
            let _ = reply.send(Ok(Answer::Released(None)));
            return;
        }
        let (records, released) = self.release_one(owner, sandbox.as_ref());
        self.commit_then(records, reply, move || Answer::Released(released));
    }

    /// `renew`: the owner's attachment changed, its record is written
    /// again even if nothing else did.
    pub(super) fn on_alloc(
        &mut self,
        owner: Owner,
        sandbox: Option<SandboxId>,
        prefer: Option<IpAddr>,
        renew: bool,
        started: Instant,
        reply: Reply,
    ) {
        if self.stopping {
            let _ = reply.send(Err(AllocError::shutting_down()));
            return;
        }
        self.pool.settle(unix_ms());
        if let Some(held) = self.pool.allocation(&owner) {
            // Idempotent: the same reply again (a new sandbox moves it). The
            // answer still goes through the journal so that it is only sent
            // once the original allocation is durable.
            let moved = self.pool.move_sandbox(&owner, sandbox.as_ref());
            let renewed = moved.or_else(|| renew.then_some(held));
            let records: Vec<Record> = renewed.iter().map(Record::alloc).collect();
            match self.pool.allocation_with_eni(&owner) {
                Some((a, eni)) => self.commit_alloc(records, a, eni, vec![(reply, started)]),
                None => {
                    let _ = reply.send(Err(AllocError::new(
                        ErrCode::Internal,
                        "allocation on an unknown ENI",
                    )));
                }
            }
            return;
        }
        let ask = Ask {
            owner,
            sandbox,
            prefer,
            reply,
            started,
            deadline: started + self.opts.alloc_timeout,
        };
        // Two concurrent allocs for one owner get one address.
        let Err(ask) = self.demand.join(ask) else {
            return;
        };
        if !self.verified() {
            // Nothing new before the OpenAPI has said what is ours: this
            // waiter is served once the first reconcile has run (asked
            // for now) or fails at its deadline.
            self.demand.push(ask, Instant::now());
            self.ask_first_reconcile();
            return;
        }
        if let Some(v4) = self.pool.pick(&ask.owner, ask.prefer) {
            self.hand_out(
                v4,
                &ask.owner,
                ask.sandbox.as_ref(),
                vec![(ask.reply, ask.started)],
            );
            return;
        }
        self.demand.push(ask, Instant::now());
    }

    pub(super) fn hand_out(
        &mut self,
        v4: Ipv4Addr,
        owner: &Owner,
        sandbox: Option<&SandboxId>,
        replies: Vec<(Reply, Instant)>,
    ) {
        let a = self.pool.take(v4, owner, sandbox, unix_ms());
        self.answer_taken(v4, owner, a, replies);
    }

    /// Commits an address just taken from the pool for `owner` and
    /// answers once it is durable (nothing was taken: no answer).
    fn answer_taken(
        &mut self,
        v4: Ipv4Addr,
        owner: &Owner,
        a: Option<Allocation>,
        replies: Vec<(Reply, Instant)>,
    ) {
        let Some(a) = a else {
            return;
        };
        match self.pool.eni_info(&a.eni) {
            Some(eni) => {
                debug!("{owner} gets {v4}");
                self.commit_alloc(vec![Record::alloc(&a)], a, eni, replies);
            }
            None => {
                for (r, _) in replies {
                    let _ = r.send(Err(AllocError::new(
                        ErrCode::Internal,
                        "address on an unknown ENI",
                    )));
                }
            }
        }
    }

    pub(super) fn commit_alloc(
        &self,
        records: Vec<Record>,
        a: Allocation,
        eni: EniInfo,
        replies: Vec<(Reply, Instant)>,
    ) {
        let fatal = self.fatal_tx.clone();
        self.journal.submit(
            records,
            Box::new(move |res| match res {
                Ok(()) => {
                    for (r, started) in replies {
                        crate::metrics::record_alloc("ok", started.elapsed().as_secs_f64());
                        let _ = r.send(Ok(Answer::Allocation(a.clone(), eni.clone())));
                    }
                }
                Err(e) => {
                    let msg = format!("state commit failed: {e}");
                    for (r, _) in replies {
                        crate::metrics::record_alloc("internal", 0.0);
                        let _ = r.send(Err(AllocError::new(ErrCode::Internal, msg.clone())));
                    }
                    let _ = fatal.try_send(msg.into());
                }
            }),
        );
    }

    pub(super) fn on_release(&mut self, owner: Owner, sandbox: Option<SandboxId>, reply: Reply) {
        if self.stopping {
            let _ = reply.send(Err(AllocError::shutting_down()));
            return;
        }
        let (records, released) = self.release_one(&owner, sandbox.as_ref());
        self.commit_then(records, reply, move || {
            crate::metrics::record_release(if released.is_some() { "ok" } else { "none" });
            Answer::Released(released)
        });
    }

    /// `gc`: releases every allocation whose owner starts with `prefix`
    /// unless its owner or its sandbox is in `keep`, in one commit.
    pub(super) fn on_gc(&mut self, prefix: &str, keep: &[String], reply: Reply) {
        if self.stopping {
            let _ = reply.send(Err(AllocError::shutting_down()));
            return;
        }
        let keep: std::collections::HashSet<&str> = keep.iter().map(String::as_str).collect();
        let doomed: Vec<(Owner, Option<SandboxId>)> = self
            .pool
            .owners()
            .filter(|(o, _)| o.as_str().starts_with(prefix))
            .filter_map(|(o, v4)| match &self.pool.ips.get(v4)?.state {
                IpState::InUse { sandbox, .. } => Some((o.clone(), sandbox.clone())),
                _ => None,
            })
            .filter(|(o, sb)| {
                !keep.contains(o.as_str())
                    && !sb.as_ref().is_some_and(|s| keep.contains(s.as_str()))
            })
            .collect();
        let mut records = Vec::new();
        let mut collected = Vec::new();
        for (owner, sandbox) in doomed {
            let veth = self.pool.attachment(&owner).map(|a| a.veth.clone());
            let (mut r, released) = self.release_one(&owner, sandbox.as_ref());
            records.append(&mut r);
            if let Some(ip) = released {
                info!("gc: released {ip} of {owner}");
                collected.push(Collected {
                    ip,
                    owner,
                    sandbox,
                    veth,
                });
            }
        }
        self.commit_then(records, reply, move || {
            for _ in &collected {
                crate::metrics::record_release("ok");
            }
            Answer::Collected(collected)
        });
    }

    /// Releases in the pool; the records that make it durable and the
    /// address given back, if one was held.
    fn release_one(
        &mut self,
        owner: &Owner,
        sandbox: Option<&SandboxId>,
    ) -> (Vec<Record>, Option<IpAddr>) {
        let outcome = self.pool.release(
            owner,
            sandbox,
            unix_ms(),
            self.opts.ip_stick_time.as_millis() as u64,
            self.opts.ip_cooldown.as_millis() as u64,
        );
        match outcome {
            ReleaseOutcome::NotHeld => {
                // A release while the owner's alloc still waits: the client
                // gave up, so the alloc is cancelled rather than completed
                // for nobody.
                if let Some(w) = self.demand.take_owner(owner) {
                    for (r, _) in w.replies {
                        let _ = r.send(Err(AllocError::new(
                            ErrCode::Timeout,
                            "cancelled by a release of the same owner",
                        )));
                    }
                }
                (Vec::new(), None)
            }
            ReleaseOutcome::SandboxMismatch => (Vec::new(), None),
            ReleaseOutcome::Released { v4, hold, .. } => {
                debug!("{owner} released {v4}");
                if self.pool.idle_count() > self.cap.max_idle {
                    let soon =
                        Instant::now() + self.opts.pool_check_interval.min(Duration::from_secs(10));
                    self.next_maintenance = self.next_maintenance.min(soon);
                }
                (
                    vec![Record::release(owner, hold.as_ref())],
                    Some(IpAddr::V4(v4)),
                )
            }
        }
    }

    /// Answers `reply` with `answer()` once `records` are durable (a
    /// failed commit stops the daemon).
    fn commit_then(
        &self,
        records: Vec<Record>,
        reply: Reply,
        answer: impl FnOnce() -> Answer + Send + 'static,
    ) {
        let fatal = self.fatal_tx.clone();
        self.journal.submit(
            records,
            Box::new(move |res| match res {
                Ok(()) => {
                    let _ = reply.send(Ok(answer()));
                }
                Err(e) => {
                    let msg = format!("state commit failed: {e}");
                    crate::metrics::record_release("internal");
                    let _ = reply.send(Err(AllocError::new(ErrCode::Internal, msg.clone())));
                    let _ = fatal.try_send(msg.into());
                }
            }),
        );
    }

    // ---- waiters and tickets -------------------------------------------

    pub(super) fn expire_waiters(&mut self, now: Instant) {
        while let Some(w) = self.demand.take_expired(now) {
            info!(
                "alloc for {} timed out after {:?}",
                w.owner, self.opts.alloc_timeout
            );
            for (r, started) in w.replies {
                crate::metrics::record_alloc("timeout", started.elapsed().as_secs_f64());
                let _ = r.send(Err(AllocError::new(
                    ErrCode::Timeout,
                    format!("no address within {} s", self.opts.alloc_timeout.as_secs()),
                )));
            }
        }
    }

    pub(super) fn fail_waiter(&mut self, id: u64, err: AllocError) {
        if let Some(w) = self.demand.take(id) {
            info!("alloc for {} failed: {err}", w.owner);
            for (r, started) in w.replies {
                crate::metrics::record_alloc(err.code.as_str(), started.elapsed().as_secs_f64());
                let _ = r.send(Err(err.clone()));
            }
        }
    }

    /// Hands idle addresses to waiters, oldest first.
    pub(super) fn serve_waiters(&mut self) {
        if !self.verified() {
            return;
        }
        let now_ms = unix_ms();
        let pool = &mut self.pool;
        let served = self.demand.serve(|w| match pool.pick(&w.owner, w.prefer) {
            Some(v4) => Pick::Served((v4, pool.take(v4, &w.owner, w.sandbox.as_ref(), now_ms))),
            None if pool.idle_count() == 0 => Pick::Stop,
            None => Pick::Skip,
        });
        for ((v4, a), w) in served {
            self.answer_taken(v4, &w.owner, a, w.replies);
        }
    }

    /// A ticket ended without an address: its waiter is re-planned, or
    /// failed when the error is one that re-planning cannot cure.
    pub(super) fn ticket_failed(&mut self, t: TicketId, err: Option<&CloudError>) {
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
                self.fail_waiter(wid, cloud_error(e));
            }
        }
    }

    /// A ticket whose failure no other plan can avoid: its waiter gets
    /// the cloud's error (a pool ticket backs off).
    pub(super) fn ticket_refused(&mut self, t: TicketId, err: &CloudError) {
        match self.demand.ticket_waiter(t) {
            Some(Some(wid)) => {
                self.ticket_done(t);
                self.fail_waiter(wid, cloud_error(err));
            }
            _ => self.ticket_failed(t, Some(err)),
        }
    }

    pub(super) fn ticket_done(&mut self, t: TicketId) {
        self.demand.end_ticket(t);
    }

    pub(super) fn new_ticket(&mut self, waiter: Option<u64>) -> TicketId {
        self.demand.new_ticket(waiter)
    }
}
