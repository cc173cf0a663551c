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
//!
//! This file holds the state, the loop and the views; `requests` the
//! client side (waiters, tickets), `plan` where demand goes and what the
//! pool gives back, `events` what workers and ENI operations report.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver, Sender};
use log::{debug, error, info, warn};

use crate::cloud::{CloudApi, CloudError, CloudErrorKind, Ipv4Prefix};
use crate::core::{
    AllocError, Allocation, Answer, Command, EniEntry, Envelope, ErrCode, Owner, PrefixUse,
    SandboxId,
};
use crate::pool::{EniPhase, IpState, PoolEni, PoolState, ReleaseOutcome};
use crate::store::Record;
use crate::util::sem::{Permit, Semaphore};
use crate::util::time::{format_utc, unix_ms};

use super::capacity::Capacity;
use super::describe::StatusBatcher;
use super::eniops::{self, CreateJob};
use super::msg::{CloudEniView, Event, FreeFailure, OpId, ReadyEni, Request, TicketId};
use super::planner::{self, EniRoom, PlanInput};
use super::prefix::{self, Kind};
use super::vswitch::VSwitches;
use super::worker::{self, WorkerConfig, WorkerHandle};
use super::{AllocatorOptions, Joinable, Journal, Snapshot};

mod eni_info;
mod events;
mod plan;
mod requests;

/// How soon a waiter that could not be planned is planned again.
const REPLAN: Duration = Duration::from_millis(100);
/// How often an inhibited vswitch's free count is read (DescribeVSwitches
/// is cheap): a refilled vswitch serves again within this, not after the
/// whole inhibit window.
const VSW_PROBE: Duration = Duration::from_secs(10);

type Reply = Sender<Result<Answer, AllocError>>;

#[derive(Debug)]
struct Waiter {
    id: u64,
    since: Instant,
    owner: Owner,
    sandbox: Option<SandboxId>,
    prefer: Option<IpAddr>,
    replies: Vec<(Reply, Instant)>,
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
    /// The actor's own channel, for the audit threads' snapshots.
    requests_tx: Sender<Request>,
    /// Threads it started that are not workers (ENI operations, audits):
    /// joined at stop.
    helpers: Vec<Joinable>,
    config_view: Vec<(String, String)>,
    /// When inhibited vswitches are probed next.
    next_vsw_probe: Instant,
    /// Prefix mode: vswitches that had no free /28, until when (Unix ms)
    /// their ENIs get single addresses instead.
    prefix_inhibit: HashMap<String, u64>,
    /// Dual stack: vswitches' IPv6 CIDR and gateway, once read (`eni`).
    vswitch_v6: HashMap<String, (String, Ipv6Addr)>,
    /// `eni` lookups reading metadata now.
    lookups: Arc<std::sync::atomic::AtomicUsize>,
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
        requests_tx: Sender<Request>,
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
            config_view: opts.config_view.clone(),
            next_vsw_probe: now,
            prefix_inhibit: HashMap::new(),
            vswitch_v6: HashMap::new(),
            lookups: Arc::default(),
            requests_tx,
            helpers: Vec::new(),
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
            prefix_mode: self.cap.prefix_mode,
            metadata_wait: self.opts.metadata_wait,
        }
    }

    /// How the next addresses of an ENI on `vswitch` are asked.
    fn kind_on(&self, vswitch: &str, now_ms: u64) -> Kind {
        prefix::next_kind(
            self.cap.prefix_mode,
            self.prefix_inhibit.get(vswitch).copied(),
            now_ms,
        )
    }

    /// Addresses an ENI can still be asked for (its free IPv4 slots, as
    /// /28s or single addresses).
    fn eni_room(&self, e: &PoolEni, now_ms: u64) -> usize {
        let pending = prefix::pending_slots(e.pending, e.pending_in_prefixes);
        let free = self
            .cap
            .slots_per_eni
            .saturating_sub(self.pool.slots_used(&e.id) + pending);
        prefix::room(self.kind_on(&e.vswitch, now_ms), free)
    }

    /// Prefix mode: no free /28 on `vswitch`; single addresses until the
    /// inhibit period ends, then prefixes again.
    fn inhibit_prefixes(&mut self, vswitch: &str, code: &str) {
        let until = unix_ms() + self.opts.inhibit.as_millis() as u64;
        warn!(
            "{vswitch} has no free /28 prefix ({code}); single addresses until {}",
            format_utc(until / 1000)
        );
        self.prefix_inhibit.insert(vswitch.to_string(), until);
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

    /// Runs until `stop` fires or every command sender is gone; returns
    /// the threads it started, for the caller to join.
    pub(super) fn run(
        mut self,
        commands: Receiver<Envelope>,
        requests: Receiver<Request>,
        events: Receiver<Event>,
        stop: Receiver<()>,
    ) -> Vec<Joinable> {
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
                recv(commands) -> c => match c {
                    Ok(c) => self.on_command(c),
                    Err(_) => break,
                },
                recv(requests) -> r => if let Ok(r) = r {
                    self.on_request(r);
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
        while let Ok(c) = commands.try_recv() {
            self.on_command(c);
        }
        while let Ok(r) = requests.try_recv() {
            self.on_request(r);
        }
        let mut threads: Vec<Joinable> = self
            .workers
            .drain()
            .filter_map(|(eni, w)| w.stop().map(|h| (format!("worker of {eni}"), h)))
            .collect();
        threads.append(&mut self.helpers);
        threads
    }

    fn begin_stop(&mut self) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        for w in self.waiters.drain(..) {
            for (r, _) in w.replies {
                let _ = r.send(Err(AllocError::shutting_down()));
            }
        }
        info!(
            "allocator stopped: {} ENI operation(s) still in flight are abandoned",
            self.ops.len()
        );
    }

    /// Reads the free count of inhibited vswitches on a thread of its own
    /// (the actor never calls the cloud); the answer comes back as
    /// `VSwitchFree` and lifts the inhibition of one that has room.
    fn probe_inhibited(&mut self, now: Instant) {
        if now < self.next_vsw_probe {
            return;
        }
        let ids = self.vsw.inhibited_ids(unix_ms());
        if ids.is_empty() {
            return;
        }
        self.next_vsw_probe = now + VSW_PROBE;
        let cloud = Arc::clone(&self.cloud);
        let events = self.events_tx.clone();
        let spawned = std::thread::Builder::new()
            .name("eniipd-vsw-probe".into())
            .spawn(move || match cloud.describe_vswitches(&ids) {
                Ok(v) => {
                    let counts = v.into_iter().map(|s| (s.id, s.available_ips)).collect();
                    let _ = events.send(Event::VSwitchFree(counts));
                }
                Err(e) => debug!("probing inhibited vswitches failed: {e}"),
            });
        match spawned {
            Ok(h) => self.helpers.push(("vswitch probe".into(), h)),
            Err(e) => warn!("cannot start a vswitch probe: {e}"),
        }
    }

    fn next_wakeup(&self, now: Instant) -> Instant {
        let mut wake = self.next_maintenance;
        if self.vsw.inhibited_count(unix_ms()) > 0 {
            wake = wake.min(self.next_vsw_probe.max(now));
        }
        for w in &self.waiters {
            wake = wake.min(w.deadline);
            if w.ticket.is_none() {
                let gathered = w.since + self.opts.aggregation_window;
                wake = wake.min(if gathered > now {
                    gathered
                } else {
                    // Gathered and still nothing asked for it: it waits for
                    // a slot that another thread frees (an ENI operation or
                    // a sweep ending) without telling the actor, so look
                    // again soon instead of at the next event.
                    now + REPLAN
                });
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
        self.helpers.retain(|(_, h)| !h.is_finished());
        self.probe_inhibited(now);
        for id in self.pool.drop_empty_gone() {
            info!("{id} is forgotten: the last address held on it was released");
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

    // ---- views ---------------------------------------------------------

    fn eni_entries(&self) -> Vec<EniEntry> {
        let now_ms = unix_ms();
        let fallback = |vsw: &str| self.kind_on(vsw, now_ms) == Kind::Single;
        let mut out = self.pool.eni_entries(
            |vsw| self.vsw.inhibited_until(vsw, now_ms).map(|u| u / 1000),
            self.cap
                .prefix_mode
                .then_some(&fallback as &dyn Fn(&str) -> bool),
        );
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
                    inhibited_until: self.vsw.inhibited_until(vswitch, now_ms).map(|u| u / 1000),
                    prefixes: self.cap.prefix_mode.then(|| PrefixUse {
                        prefixes: 0,
                        singles: 0,
                        fallback: fallback(vswitch),
                    }),
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
pub(super) fn cloud_error(e: &CloudError) -> AllocError {
    match e.kind {
        CloudErrorKind::Exhausted | CloudErrorKind::PrefixExhausted => {
            AllocError::cloud(ErrCode::Exhausted, e.code_or_kind(), e.message.clone())
        }
        CloudErrorKind::Timeout => AllocError::new(ErrCode::Timeout, e.to_string()),
        _ => AllocError::cloud(ErrCode::Cloud, e.code_or_kind(), e.message.clone()),
    }
}

#[cfg(test)]
mod tests;
