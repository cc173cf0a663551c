//! The actor: the one thread that owns the pool.
//!
//! Clients, workers, ENI operations and the maintenance thread talk to it by
//! message; it never calls the cloud and never touches the disk itself (it
//! hands records to the journal, whose thread answers the client once they
//! are durable). So no lock is held across I/O, and a slow cloud can never
//! stall an allocation that idle addresses can serve.
//!
//! Demand is tracked as waiters (clients wanting an address, FIFO) and
//! tickets (addresses asked of the cloud: one per unit, on an ENI's worker
//! or in an ENI creation). Every ticket ends exactly once, with an address
//! or an error, and is removed then, so an ENI's `pending` returns to zero
//! after any burst, errors included. Addresses that arrive go to the pool
//! and are handed to waiters oldest first; a ticket is bound to at most one
//! waiter so that a cloud error reaches a request that asked for it.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver, Sender};
use log::{debug, error, info, warn};

use crate::cloud::{CloudApi, CloudError, CloudErrorKind};
use crate::pool::{EniPhase, IpState, PoolState, ReleaseOutcome};
use crate::server::protocol::{Allocation, EniEntry, ErrCode, Owner, ProtoError, SandboxId};
use crate::store::Record;
use crate::util::sem::{Permit, Semaphore};
use crate::util::time::{format_utc, unix_ms};

use super::capacity::Capacity;
use super::describe::StatusBatcher;
use super::eniops::{self, CreateJob};
use super::msg::{CloudEniView, Event, FreeFailure, OpId, ReadyEni, Request, TicketId};
use super::planner::{self, EniRoom, PlanInput};
use super::vswitch::VSwitches;
use super::worker::{self, WorkerConfig, WorkerHandle};
use super::{AllocatorOptions, Journal, Snapshot};

type AllocReply = Sender<Result<Allocation, ProtoError>>;

#[derive(Debug)]
struct Waiter {
    id: u64,
    since: Instant,
    owner: Owner,
    sandbox: Option<SandboxId>,
    prefer: Option<IpAddr>,
    replies: Vec<(AllocReply, Instant)>,
    deadline: Instant,
    ticket: Option<TicketId>,
}

#[derive(Debug)]
struct Ticket {
    waiter: Option<u64>,
}

#[derive(Debug)]
enum Op {
    Create {
        vswitch: String,
        init: usize,
        eni: Option<String>,
        tickets: Vec<TicketId>,
        permit: Permit,
    },
    Free {
        eni: String,
    },
}

/// Capped exponential backoff for background work that failed.
#[derive(Debug)]
struct Backoff {
    until: Option<Instant>,
    delay: Duration,
    max: Duration,
}

impl Backoff {
    fn new(max: Duration) -> Backoff {
        Backoff {
            until: None,
            delay: Duration::from_secs(1),
            max,
        }
    }

    fn active(&self, now: Instant) -> bool {
        self.until.is_some_and(|u| u > now)
    }

    fn fail(&mut self, now: Instant) {
        let d = self.delay.mul_f64(crate::util::rand::jitter(0.2));
        self.until = Some(now + d);
        self.delay = (self.delay * 2).min(self.max);
    }

    fn succeed(&mut self) {
        self.until = None;
        self.delay = Duration::from_secs(1);
    }
}

pub(super) struct Actor {
    opts: Arc<AllocatorOptions>,
    cloud: Arc<dyn CloudApi>,
    journal: Arc<dyn Journal>,
    cap: Capacity,
    pool: PoolState,
    vsw: VSwitches,
    waiters: VecDeque<Waiter>,
    tickets: HashMap<TicketId, Ticket>,
    ops: BTreeMap<OpId, Op>,
    workers: HashMap<String, WorkerHandle>,
    eni_permits: HashMap<String, Permit>,
    eni_sem: Semaphore,
    op_sem: Semaphore,
    events_tx: Sender<Event>,
    fatal_tx: Sender<String>,
    next_id: u64,
    pool_backoff: Backoff,
    shed_backoff: Backoff,
    free_backoff: HashMap<String, Instant>,
    last_change: HashMap<String, Instant>,
    next_maintenance: Instant,
    sg_drift: Vec<String>,
    stopping: bool,
    batcher: Arc<StatusBatcher>,
}

impl Actor {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        opts: Arc<AllocatorOptions>,
        cloud: Arc<dyn CloudApi>,
        journal: Arc<dyn Journal>,
        pool: PoolState,
        eni_sem: Semaphore,
        op_sem: Semaphore,
        events_tx: Sender<Event>,
        fatal_tx: Sender<String>,
    ) -> Actor {
        let mut vsw = VSwitches::new(opts.vswitches.clone(), opts.vswitch_policy);
        vsw.set_free(opts.vswitch_free.iter().cloned());
        let eni_permits = pool
            .enis
            .keys()
            .map(|id| {
                (
                    id.clone(),
                    eni_sem
                        .try_acquire()
                        .unwrap_or_else(|| eni_sem.acquire_over_limit()),
                )
            })
            .collect();
        if eni_sem.used() > eni_sem.limit() {
            warn!(
                "{} managed ENIs are attached but the capacity allows {}: no new ENI will be created",
                eni_sem.used(),
                eni_sem.limit()
            );
        }
        let now = Instant::now();
        let cloud_for_batcher = Arc::clone(&cloud);
        Actor {
            cap: opts.capacity,
            pool_backoff: Backoff::new(opts.pool_backoff_max),
            shed_backoff: Backoff::new(opts.pool_backoff_max),
            next_maintenance: now,
            opts,
            cloud,
            journal,
            pool,
            vsw,
            waiters: VecDeque::new(),
            tickets: HashMap::new(),
            ops: BTreeMap::new(),
            workers: HashMap::new(),
            eni_permits,
            eni_sem,
            op_sem,
            events_tx,
            fatal_tx,
            next_id: 1,
            free_backoff: HashMap::new(),
            last_change: HashMap::new(),
            sg_drift: Vec::new(),
            stopping: false,
            batcher: Arc::new(StatusBatcher::new(
                Arc::clone(&cloud_for_batcher),
                Duration::from_millis(30),
            )),
        }
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn worker_config(&self) -> WorkerConfig {
        WorkerConfig {
            window: self.opts.aggregation_window,
            max_per_call: self.opts.max_ips_per_call,
            dual: self.opts.dual,
            metadata_wait: self.opts.metadata_wait,
        }
    }

    fn start_worker(&mut self, eni: &str, mac: &str) {
        match worker::spawn(
            eni.to_string(),
            mac.to_string(),
            Arc::clone(&self.cloud),
            self.worker_config(),
            self.events_tx.clone(),
        ) {
            Ok(h) => {
                self.workers.insert(eni.to_string(), h);
            }
            Err(e) => self.fatal(format!("cannot start the worker thread of {eni}: {e}")),
        }
    }

    fn fatal(&mut self, msg: String) {
        error!("{msg}");
        let _ = self.fatal_tx.try_send(msg);
        self.begin_stop();
    }

    /// Runs until `stop` fires or every request sender is gone.
    pub(super) fn run(
        mut self,
        requests: Receiver<Request>,
        events: Receiver<Event>,
        stop: Receiver<()>,
    ) {
        let enis: Vec<(String, String)> = self
            .pool
            .enis
            .values()
            .map(|e| (e.id.clone(), e.mac.clone()))
            .collect();
        for (id, mac) in enis {
            self.start_worker(&id, &mac);
        }
        self.step(Instant::now());
        loop {
            let now = Instant::now();
            let wake = self.next_wakeup(now);
            select! {
                recv(stop) -> _ => break,
                recv(requests) -> r => match r {
                    Ok(r) => self.on_request(r),
                    Err(_) => break,
                },
                recv(events) -> e => if let Ok(e) = e {
                    self.on_event(e);
                },
                default(wake.saturating_duration_since(now)) => {}
            }
            if self.stopping {
                break;
            }
            self.step(Instant::now());
        }
        self.begin_stop();
        // Answer what is queued so no client waits for a reply that will
        // never come.
        while let Ok(r) = requests.try_recv() {
            self.on_request(r);
        }
    }

    fn begin_stop(&mut self) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        for w in self.waiters.drain(..) {
            for (r, _) in w.replies {
                let _ = r.send(Err(ProtoError::new(
                    ErrCode::ShuttingDown,
                    "the daemon is stopping",
                )));
            }
        }
        for (_, w) in self.workers.drain() {
            drop(w.stop());
        }
        info!(
            "allocator stopped: {} ENI operation(s) still in flight are abandoned",
            self.ops.len()
        );
    }

    fn next_wakeup(&self, now: Instant) -> Instant {
        let mut wake = self.next_maintenance;
        for w in &self.waiters {
            wake = wake.min(w.deadline);
            if w.ticket.is_none() {
                let gathered = w.since + self.opts.aggregation_window;
                if gathered > now {
                    wake = wake.min(gathered);
                }
            }
        }
        if let Some(ms) = self.pool.next_expiry() {
            let in_ms = ms.saturating_sub(unix_ms());
            wake = wake.min(now + Duration::from_millis(in_ms));
        }
        for u in [self.pool_backoff.until, self.shed_backoff.until]
            .into_iter()
            .flatten()
        {
            wake = wake.min(u);
        }
        wake.max(now + Duration::from_millis(1))
    }

    /// Everything that follows a change: holds, deadlines, maintenance,
    /// serving and planning.
    fn step(&mut self, now: Instant) {
        if self.stopping {
            return;
        }
        let freed = self.pool.settle(unix_ms());
        if !freed.is_empty() {
            let records = freed
                .into_iter()
                .map(|ipv4| Record::ClearHold { ipv4 })
                .collect();
            self.journal.submit(records, Box::new(|_| {}));
        }
        self.expire_waiters(now);
        if now >= self.next_maintenance {
            self.maintain(now);
            let jitter = crate::util::rand::jitter(0.2);
            self.next_maintenance = now + self.opts.pool_check_interval.mul_f64(jitter);
        }
        self.serve_waiters();
        self.plan(now);
    }

    // ---- requests --------------------------------------------------------

    fn on_request(&mut self, r: Request) {
        match r {
            Request::Alloc {
                owner,
                sandbox,
                prefer,
                started,
                reply,
            } => self.on_alloc(owner, sandbox, prefer, started, reply),
            Request::Release {
                owner,
                sandbox,
                reply,
            } => self.on_release(owner, sandbox, reply),
            Request::Show { owner, reply } => {
                let a = self
                    .pool
                    .owner_ip(&owner)
                    .and_then(|ip| self.pool.allocation_of(ip.v4))
                    .ok_or_else(|| ProtoError::bare(ErrCode::NotFound));
                let _ = reply.send(a);
            }
            Request::List(reply) => {
                let _ = reply.send(self.pool.list());
            }
            Request::Status(reply) => {
                let mut c = self.pool.counts();
                c.pending = self.tickets.len();
                c.capacity = self.cap.total_ips;
                let _ = reply.send(c);
            }
            Request::Enis(reply) => {
                let _ = reply.send(self.eni_entries());
            }
            Request::Snapshot(reply) => {
                let _ = reply.send(self.snapshot());
            }
            Request::KnownEnis(reply) => {
                let mut ids: Vec<String> = self.pool.enis.keys().cloned().collect();
                for op in self.ops.values() {
                    match op {
                        Op::Create { eni: Some(e), .. } | Op::Free { eni: e } => {
                            ids.push(e.clone())
                        }
                        Op::Create { eni: None, .. } => {}
                    }
                }
                let _ = reply.send(ids);
            }
            Request::Reload { capacity, reply } => {
                info!(
                    "pool sizes reloaded: min idle {} -> {}, max idle {} -> {}",
                    self.cap.min_idle, capacity.min_idle, self.cap.max_idle, capacity.max_idle
                );
                self.cap.min_idle = capacity.min_idle;
                self.cap.max_idle = capacity.max_idle;
                self.next_maintenance = Instant::now();
                let _ = reply.send(self.cap);
            }
            Request::Ping(reply) => {
                let _ = reply.send(());
            }
        }
    }

    fn on_alloc(
        &mut self,
        owner: Owner,
        sandbox: Option<SandboxId>,
        prefer: Option<IpAddr>,
        started: Instant,
        reply: AllocReply,
    ) {
        if self.stopping {
            let _ = reply.send(Err(ProtoError::new(
                ErrCode::ShuttingDown,
                "the daemon is stopping",
            )));
            return;
        }
        self.pool.settle(unix_ms());
        if let Some(v4) = self.pool.owner_ip(&owner).map(|ip| ip.v4) {
            // Idempotent: the same reply again (a new sandbox moves it). The
            // answer still goes through the journal so that it is only sent
            // once the original allocation is durable.
            let moved = self.pool.move_sandbox(&owner, sandbox.as_ref());
            let records = moved.map(Record::Alloc).into_iter().collect();
            match self.pool.allocation_of(v4) {
                Some(a) => self.commit_alloc(records, a, vec![(reply, started)]),
                None => {
                    let _ = reply.send(Err(ProtoError::new(
                        ErrCode::Internal,
                        "allocation on an unknown ENI",
                    )));
                }
            }
            return;
        }
        if let Some(w) = self.waiters.iter_mut().find(|w| w.owner == owner) {
            // Two concurrent allocs for one owner get one address.
            w.replies.push((reply, started));
            if sandbox.is_some() {
                w.sandbox = sandbox;
            }
            return;
        }
        if let Some(v4) = self.pool.pick(&owner, prefer) {
            self.hand_out(v4, &owner, sandbox.as_ref(), vec![(reply, started)]);
            return;
        }
        let id = self.id();
        self.waiters.push_back(Waiter {
            id,
            since: Instant::now(),
            owner,
            sandbox,
            prefer,
            replies: vec![(reply, started)],
            deadline: started + self.opts.alloc_timeout,
            ticket: None,
        });
    }

    fn hand_out(
        &mut self,
        v4: Ipv4Addr,
        owner: &Owner,
        sandbox: Option<&SandboxId>,
        replies: Vec<(AllocReply, Instant)>,
    ) {
        let Some(rec) = self.pool.take(v4, owner, sandbox, unix_ms()) else {
            return;
        };
        match self.pool.allocation_of(v4) {
            Some(a) => {
                debug!("{owner} gets {v4}");
                self.commit_alloc(vec![Record::Alloc(rec)], a, replies);
            }
            None => {
                for (r, _) in replies {
                    let _ = r.send(Err(ProtoError::new(
                        ErrCode::Internal,
                        "address on an unknown ENI",
                    )));
                }
            }
        }
    }

    fn commit_alloc(
        &self,
        records: Vec<Record>,
        a: Allocation,
        replies: Vec<(AllocReply, Instant)>,
    ) {
        let fatal = self.fatal_tx.clone();
        self.journal.submit(
            records,
            Box::new(move |res| match res {
                Ok(()) => {
                    for (r, started) in replies {
                        crate::metrics::record_alloc("ok", started.elapsed().as_secs_f64());
                        let _ = r.send(Ok(a.clone()));
                    }
                }
                Err(e) => {
                    let msg = format!("state commit failed: {e}");
                    for (r, _) in replies {
                        crate::metrics::record_alloc("internal", 0.0);
                        let _ = r.send(Err(ProtoError::new(ErrCode::Internal, msg.clone())));
                    }
                    let _ = fatal.try_send(msg);
                }
            }),
        );
    }

    fn on_release(
        &mut self,
        owner: Owner,
        sandbox: Option<SandboxId>,
        reply: Sender<Result<Option<IpAddr>, ProtoError>>,
    ) {
        if self.stopping {
            let _ = reply.send(Err(ProtoError::new(
                ErrCode::ShuttingDown,
                "the daemon is stopping",
            )));
            return;
        }
        let now_ms = unix_ms();
        let outcome = self.pool.release(
            &owner,
            sandbox.as_ref(),
            now_ms,
            self.opts.ip_stick_time.as_millis() as u64,
            self.opts.ip_cooldown.as_millis() as u64,
        );
        let (records, released) = match outcome {
            ReleaseOutcome::NotHeld => {
                // A release while the owner's alloc still waits: the client
                // gave up, so the alloc is cancelled rather than completed
                // for nobody.
                if let Some(pos) = self.waiters.iter().position(|w| w.owner == owner) {
                    if let Some(w) = self.remove_waiter(pos) {
                        for (r, _) in w.replies {
                            let _ = r.send(Err(ProtoError::new(
                                ErrCode::Timeout,
                                "cancelled by a release of the same owner",
                            )));
                        }
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
                    vec![Record::Release {
                        owner: owner.to_string(),
                        hold,
                    }],
                    Some(IpAddr::V4(v4)),
                )
            }
        };
        let fatal = self.fatal_tx.clone();
        self.journal.submit(
            records,
            Box::new(move |res| match res {
                Ok(()) => {
                    crate::metrics::record_release(if released.is_some() { "ok" } else { "none" });
                    let _ = reply.send(Ok(released));
                }
                Err(e) => {
                    let msg = format!("state commit failed: {e}");
                    crate::metrics::record_release("internal");
                    let _ = reply.send(Err(ProtoError::new(ErrCode::Internal, msg.clone())));
                    let _ = fatal.try_send(msg);
                }
            }),
        );
    }

    // ---- waiters and tickets -------------------------------------------

    fn remove_waiter(&mut self, pos: usize) -> Option<Waiter> {
        let w = self.waiters.remove(pos)?;
        if let Some(t) = w.ticket {
            self.rebind(t);
        }
        Some(w)
    }

    /// Gives an outstanding ticket whose waiter left to the oldest waiter
    /// that has none (or to the pool), so demand is never asked twice.
    fn rebind(&mut self, t: TicketId) {
        let Some(ticket) = self.tickets.get_mut(&t) else {
            return;
        };
        ticket.waiter = None;
        if let Some(w) = self.waiters.iter_mut().find(|w| w.ticket.is_none()) {
            w.ticket = Some(t);
            ticket.waiter = Some(w.id);
        }
    }

    fn expire_waiters(&mut self, now: Instant) {
        while let Some(pos) = self.waiters.iter().position(|w| w.deadline <= now) {
            if let Some(w) = self.remove_waiter(pos) {
                info!(
                    "alloc for {} timed out after {:?}",
                    w.owner, self.opts.alloc_timeout
                );
                for (r, started) in w.replies {
                    crate::metrics::record_alloc("timeout", started.elapsed().as_secs_f64());
                    let _ = r.send(Err(ProtoError::new(
                        ErrCode::Timeout,
                        format!("no address within {} s", self.opts.alloc_timeout.as_secs()),
                    )));
                }
            }
        }
    }

    fn fail_waiter(&mut self, id: u64, err: ProtoError) {
        if let Some(pos) = self.waiters.iter().position(|w| w.id == id) {
            if let Some(w) = self.remove_waiter(pos) {
                info!("alloc for {} failed: {err}", w.owner);
                for (r, started) in w.replies {
                    crate::metrics::record_alloc(
                        err.code.as_str(),
                        started.elapsed().as_secs_f64(),
                    );
                    let _ = r.send(Err(err.clone()));
                }
            }
        }
    }

    /// Hands idle addresses to waiters, oldest first.
    fn serve_waiters(&mut self) {
        let mut i = 0;
        while i < self.waiters.len() {
            let (owner, prefer) = (self.waiters[i].owner.clone(), self.waiters[i].prefer);
            match self.pool.pick(&owner, prefer) {
                Some(v4) => {
                    if let Some(w) = self.remove_waiter(i) {
                        self.hand_out(v4, &w.owner, w.sandbox.as_ref(), w.replies);
                    }
                }
                None => {
                    if self.pool.idle_count() == 0 {
                        break;
                    }
                    i += 1;
                }
            }
        }
    }

    /// A ticket ended without an address: its waiter is re-planned, or
    /// failed when the error is one that re-planning cannot cure.
    fn ticket_failed(&mut self, t: TicketId, err: Option<&CloudError>) {
        let Some(ticket) = self.tickets.remove(&t) else {
            return;
        };
        let Some(wid) = ticket.waiter else {
            if err.is_some() {
                self.pool_backoff.fail(Instant::now());
            }
            return;
        };
        if let Some(w) = self.waiters.iter_mut().find(|w| w.id == wid) {
            w.ticket = None;
        }
        if let Some(e) = err {
            if !matches!(
                e.kind,
                CloudErrorKind::Exhausted | CloudErrorKind::LimitExceeded
            ) {
                self.fail_waiter(wid, cloud_error(e));
            }
        }
    }

    fn ticket_done(&mut self, t: TicketId) {
        if let Some(ticket) = self.tickets.remove(&t) {
            if let Some(wid) = ticket.waiter {
                if let Some(w) = self.waiters.iter_mut().find(|w| w.id == wid) {
                    w.ticket = None;
                }
            }
        }
    }

    fn new_ticket(&mut self, waiter: Option<u64>) -> TicketId {
        let t = self.id();
        self.tickets.insert(t, Ticket { waiter });
        if let Some(wid) = waiter {
            if let Some(w) = self.waiters.iter_mut().find(|w| w.id == wid) {
                w.ticket = Some(t);
            }
        }
        t
    }

    // ---- planning ------------------------------------------------------

    fn plan(&mut self, now: Instant) {
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
            if let Err(e) = eniops::spawn_create(
                job,
                Arc::clone(&self.cloud),
                Arc::clone(&self.batcher),
                self.events_tx.clone(),
                op_permit,
            ) {
                self.fatal(format!("cannot start an ENI operation thread: {e}"));
                return;
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
                self.fail_waiter(id, ProtoError::new(ErrCode::Exhausted, reason.clone()));
            }
        }
    }

    fn exhaustion_reason(&self, now_ms: u64) -> String {
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

    // ---- events --------------------------------------------------------

    fn on_event(&mut self, e: Event) {
        match e {
            Event::Assigned {
                eni,
                tickets,
                v4,
                v6,
                error,
            } => self.on_assigned(eni, tickets, v4, v6, error),
            Event::Unassigned {
                eni,
                v4,
                gone_v4,
                gone_v6,
                error,
            } => self.on_unassigned(&eni, &v4, &gone_v4, &gone_v6, error),
            Event::EniCreated { op, eni } => {
                if let Some(Op::Create { eni: slot, .. }) = self.ops.get_mut(&op) {
                    *slot = Some(eni);
                }
            }
            Event::EniReady { op, eni } => self.on_eni_ready(op, eni),
            Event::EniFailed { op, error, leaked } => self.on_eni_failed(op, &error, leaked),
            Event::EniFreed { eni, result } => self.on_eni_freed(eni, result),
            Event::VSwitchFree(counts) => self.vsw.set_free(counts),
            Event::SecurityGroupDrift(lines) => {
                for l in &lines {
                    warn!("security group drift: {l}");
                }
                self.sg_drift = lines;
            }
            Event::Reconcile { started, enis } => self.on_reconcile(started, enis),
            Event::Fatal(msg) => self.fatal(msg),
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

    fn add_addresses(&mut self, eni: &str, v4: &[Ipv4Addr], v6: &[Ipv6Addr]) -> usize {
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

    fn on_assigned(
        &mut self,
        eni: String,
        tickets: Vec<TicketId>,
        v4: Vec<Ipv4Addr>,
        v6: Vec<Ipv6Addr>,
        error: Option<CloudError>,
    ) {
        if let Some(e) = self.pool.enis.get_mut(&eni) {
            e.pending = e.pending.saturating_sub(tickets.len());
        }
        let valid = self.add_addresses(&eni, &v4, &v6);
        if let Some(err) = &error {
            warn!("assigning addresses to {eni} failed: {err}");
            match err.kind {
                CloudErrorKind::Exhausted => {
                    if let Some(vsw) = self.pool.enis.get(&eni).map(|e| e.vswitch.clone()) {
                        self.inhibit(&vsw, err);
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
        }
        for (i, t) in tickets.into_iter().enumerate() {
            if i < valid {
                self.ticket_done(t);
            } else {
                self.ticket_failed(t, error.as_ref());
            }
        }
    }

    fn on_unassigned(
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

    fn on_eni_ready(&mut self, op: OpId, r: ReadyEni) {
        let Some(Op::Create {
            tickets, permit, ..
        }) = self.ops.remove(&op)
        else {
            return;
        };
        info!(
            "{} is ready on {} with {} address(es)",
            r.id,
            r.vswitch,
            r.v4.len()
        );
        self.eni_permits.insert(r.id.clone(), permit);
        self.pool.add_eni(r.pool_eni());
        let valid = self.add_addresses(&r.id, &r.v4, &r.v6);
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

    fn on_eni_failed(&mut self, op: OpId, err: &CloudError, leaked: Option<String>) {
        let Some(Op::Create {
            vswitch, tickets, ..
        }) = self.ops.remove(&op)
        else {
            return;
        };
        if let Some(eni) = leaked {
            error!("{eni} was left behind by a failed creation; the sweeper will delete it");
        }
        warn!("creating an ENI on {vswitch} failed: {err}");
        if err.kind == CloudErrorKind::Exhausted {
            self.inhibit(&vswitch, err);
        }
        for t in tickets {
            self.ticket_failed(t, Some(err));
        }
    }

    fn on_eni_freed(&mut self, eni: String, result: Result<(), FreeFailure>) {
        self.ops
            .retain(|_, op| !matches!(op, Op::Free { eni: e } if *e == eni));
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

    fn forget_eni(&mut self, eni: &str) {
        if let Some(w) = self.workers.remove(eni) {
            drop(w.stop());
        }
        self.pool.remove_eni(eni);
        self.eni_permits.remove(eni);
        self.last_change.remove(eni);
    }

    fn on_reconcile(&mut self, started: Instant, cloud: Vec<CloudEniView>) {
        let busy: Vec<String> = self
            .ops
            .values()
            .filter_map(|op| match op {
                Op::Create { eni, .. } => eni.clone(),
                Op::Free { eni } => Some(eni.clone()),
            })
            .collect();
        for view in &cloud {
            let r = &view.eni;
            if busy.contains(&r.id) {
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
                let permit = self
                    .eni_sem
                    .try_acquire()
                    .unwrap_or_else(|| self.eni_sem.acquire_over_limit());
                self.eni_permits.insert(r.id.clone(), permit);
                self.pool.add_eni(r.pool_eni());
                self.add_addresses(&r.id, &r.v4, &r.v6);
                self.start_worker(&r.id, &r.mac);
                continue;
            }
            let Some(local) = self.pool.enis.get(&r.id) else {
                continue;
            };
            if local.pending > 0 || local.phase != EniPhase::Ready {
                continue;
            }
            // Addresses the cloud has and we do not: adopt (a result lost
            // after the cloud granted it).
            let unknown: Vec<Ipv4Addr> =
                r.v4.iter()
                    .copied()
                    .filter(|a| !self.pool.ips.contains_key(a))
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
            // Addresses we have and the cloud does not, unchanged since
            // before the cloud was asked: out of circulation.
            let changed_after = self.last_change.get(&r.id).is_some_and(|t| *t >= started);
            if !changed_after {
                let missing: Vec<(Ipv4Addr, bool)> = self
                    .pool
                    .ips
                    .values()
                    .filter(|ip| ip.eni == r.id && !ip.releasing && !r.v4.contains(&ip.v4))
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
            if let Some(e) = self.pool.enis.get_mut(&r.id) {
                e.at_limit = false;
            }
        }
    }

    // ---- maintenance ---------------------------------------------------

    fn maintain(&mut self, now: Instant) {
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
            if let Err(e) = eniops::spawn_free(
                eni,
                self.opts.instance_id.clone(),
                Arc::clone(&self.cloud),
                self.events_tx.clone(),
                permit,
            ) {
                self.fatal(format!("cannot start an ENI operation thread: {e}"));
                return;
            }
        }
    }

    // ---- views ---------------------------------------------------------

    fn eni_entries(&self) -> Vec<EniEntry> {
        let now_ms = unix_ms();
        let mut out = self.pool.eni_entries(|vsw| {
            self.vsw
                .inhibited_until(vsw, now_ms)
                .map(|u| format_utc(u / 1000))
        });
        for op in self.ops.values() {
            if let Op::Create {
                vswitch,
                eni,
                tickets,
                ..
            } = op
            {
                out.push(EniEntry {
                    eni: eni.clone().unwrap_or_else(|| "creating".into()),
                    mac: "-".into(),
                    vswitch: vswitch.clone(),
                    ips: 0,
                    pending: tickets.len(),
                    inhibited_until: self
                        .vsw
                        .inhibited_until(vswitch, now_ms)
                        .map(|u| format_utc(u / 1000)),
                });
            }
        }
        out
    }

    fn snapshot(&self) -> Snapshot {
        let now_ms = unix_ms();
        let mut creating = Vec::new();
        let mut freeing = Vec::new();
        for op in self.ops.values() {
            match op {
                Op::Create { eni: Some(e), .. } => creating.push(e.clone()),
                Op::Create { eni: None, .. } => {}
                Op::Free { eni } => freeing.push(eni.clone()),
            }
        }
        Snapshot {
            pool: self.pool.clone(),
            pending: self.tickets.len(),
            capacity: self.cap,
            creating,
            freeing,
            eni_ops: self.op_sem.used(),
            inhibited_vswitches: self.vsw.inhibited_count(now_ms),
            sg_drift: self.sg_drift.clone(),
            waiters: self.waiters.len(),
        }
    }
}

/// The protocol error for a cloud failure.
pub(super) fn cloud_error(e: &CloudError) -> ProtoError {
    match e.kind {
        CloudErrorKind::Exhausted => ProtoError::new(
            ErrCode::Exhausted,
            format!("{} {}", e.code_or_kind(), e.message),
        ),
        CloudErrorKind::Timeout => ProtoError::new(ErrCode::Timeout, e.to_string()),
        _ => ProtoError::new(
            ErrCode::Cloud,
            format!("{} {}", e.code_or_kind(), e.message),
        ),
    }
}
