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
    AllocError, Allocation, Answer, Collected, Command, EniEntry, Envelope, ErrCode, Owner,
    PrefixUse, SandboxId,
};
use crate::pool::{EniPhase, IpState, PoolEni, PoolState, ReleaseOutcome};
use crate::store::Record;
use crate::util::sem::Semaphore;
use crate::util::time::{format_utc, unix_ms};

use super::capacity::Capacity;
use super::describe::StatusBatcher;
use super::eniops::{self, CreateJob};
use super::msg::{CloudEniView, Event, FreeFailure, OpId, ReadyEni, Request, TicketId};
use super::planner::{self, EniRoom, PlanInput};
use super::prefix::{self, Kind};
use super::vswitch::VSwitches;
use super::worker::{self, WorkerConfig, WorkerHandle};
use super::{cloud_error, AllocatorOptions, Joinable, Journal, Snapshot};

mod demand;
mod eni_info;
mod events;
mod inflight;
mod plan;
mod requests;
mod surge;
mod vswstate;

use demand::{Ask, Demand, Pick};
use inflight::InFlight;
use surge::Surge;
use vswstate::VswState;

/// How soon a waiter that could not be planned is planned again.
const REPLAN: Duration = Duration::from_millis(100);

/// A gap in arriving requests this long ends a create's aggregation early
/// (a burst arrives within milliseconds; a lone first pod should not wait
/// the whole window).
const CREATE_QUIET: Duration = Duration::from_millis(50);

type Reply = Sender<Result<Answer, AllocError>>;

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
    vsw: VswState,
    demand: Demand,
    surge: Surge,
    inflight: InFlight,
    workers: HashMap<String, WorkerHandle>,
    events_tx: Sender<Event>,
    fatal_tx: Sender<super::Fatal>,
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
    /// `eni` lookups reading metadata now.
    lookups: Arc<std::sync::atomic::AtomicUsize>,
    /// Set only after a restart served from the state files, until the
    /// first reconcile (see [`Actor::verified`]): asks the maintenance
    /// thread for that reconcile now.
    first_reconcile: Option<Sender<()>>,
    /// `audit`s asked before the first reconcile: started after it.
    deferred_audits: Vec<Reply>,
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
        fatal_tx: Sender<super::Fatal>,
        requests_tx: Sender<Request>,
    ) -> Actor {
        let mut switches = VSwitches::new(opts.vswitches.clone(), opts.vswitch_policy);
        switches.set_free(opts.vswitch_free.iter().cloned(), u64::MAX);
        let inflight = InFlight::new(eni_sem, op_sem, pool.enis.keys());
        let now = Instant::now();
        let cloud_for_batcher = Arc::clone(&cloud);
        Actor {
            cap: opts.capacity,
            config_view: opts.config_view.clone(),
            vsw: VswState::new(
                switches,
                opts.capacity.prefix_mode,
                opts.max_ips_per_call,
                now,
            ),
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
            demand: Demand::default(),
            surge: Surge::default(),
            inflight,
            workers: HashMap::new(),
            events_tx,
            fatal_tx,
            free_backoff: HashMap::new(),
            last_change: HashMap::new(),
            sg_drift: Vec::new(),
            stopping: false,
            first_reconcile: None,
            deferred_audits: Vec::new(),
            batcher: Arc::new(StatusBatcher::new(
                Arc::clone(&cloud_for_batcher),
                Duration::from_millis(30),
            )),
        }
    }

    /// After a restart served from the state files (`first_reconcile` in
    /// the options): unverified until the first reconcile, which `kick`
    /// asks for early.
    pub(super) fn with_first_reconcile(mut self, kick: Sender<()>) -> Actor {
        if self.opts.first_reconcile.is_some() {
            self.first_reconcile = Some(kick);
        }
        self
    }

    /// The pool is the OpenAPI's view (false only after a restart served
    /// from the state files, until the first reconcile): until then no
    /// address is handed out that was not already, and nothing is planned
    /// or given back. Owners keep theirs, releases work.
    fn verified(&self) -> bool {
        self.first_reconcile.is_none()
    }

    /// Asks for the first reconcile at once (a waiter needs it).
    fn ask_first_reconcile(&self) {
        if let Some(k) = &self.first_reconcile {
            let _ = k.try_send(());
        }
    }

    /// The first reconcile has run: the pool is the OpenAPI's view.
    fn verify(&mut self) {
        if self.first_reconcile.take().is_none() {
            return;
        }
        info!(
            "the pool is verified against the OpenAPI: {} address(es) on {} ENI(s), {} waiter(s) served from now on",
            self.pool.ips.len(),
            self.pool.enis.len(),
            self.demand.waiting()
        );
        for reply in std::mem::take(&mut self.deferred_audits) {
            self.start_audit(reply);
        }
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
        self.vsw.kind_on(vswitch, now_ms)
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
        self.vsw.inhibit_prefixes(vswitch, until);
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
                self.apply_call_caps();
            }
            Err(e) => self.fatal(format!("cannot start the worker thread of {eni}: {e}").into()),
        }
    }

    /// Tells every worker how many addresses one call on its vswitch may
    /// ask (see `vswstate`).
    fn apply_call_caps(&self) {
        for (eni, w) in &self.workers {
            let cap = self
                .pool
                .enis
                .get(eni)
                .and_then(|e| self.vsw.call_cap(&e.vswitch));
            w.set_call_cap(cap);
        }
    }

    fn fatal(&mut self, f: super::Fatal) {
        error!("{}", f.message);
        let _ = self.fatal_tx.try_send(f);
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
        for w in self.demand.drain() {
            for (r, _) in w.replies {
                let _ = r.send(Err(AllocError::shutting_down()));
            }
        }
        for r in self.deferred_audits.drain(..) {
            let _ = r.send(Err(AllocError::shutting_down()));
        }
        info!(
            "allocator stopped: {} ENI operation(s) still in flight are abandoned",
            self.inflight.len()
        );
    }

    /// Reads the free count of inhibited vswitches on a thread of its own
    /// (the actor never calls the cloud); the answer comes back as
    /// `VSwitchFree` and lifts the inhibition of one that has room.
    fn probe_inhibited(&mut self, now: Instant) {
        let Some(ids) = self.vsw.probe_due(now, unix_ms()) else {
            return;
        };
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
        let demand = self
            .demand
            .next_wakeup(now, self.opts.aggregation_window, REPLAN);
        for at in [self.vsw.next_wakeup(now, unix_ms()), demand]
            .into_iter()
            .flatten()
        {
            wake = wake.min(at);
        }
        if let Some(t) = self.demand.last_unplanned_arrival() {
            if t + CREATE_QUIET > now {
                wake = wake.min(t + CREATE_QUIET);
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
        if self.surge.observe(now, self.demand.waiting() > 0) {
            info!(
                "the pool ran dry again within {}s of its last refill: calls carry addresses beyond the shortfall, up to max_pool_size={} idle",
                surge::SURGE_GAP.as_secs(),
                self.cap.max_idle
            );
        }
        self.plan(now);
    }

    // ---- views ---------------------------------------------------------

    fn eni_entries(&self) -> Vec<EniEntry> {
        let now_ms = unix_ms();
        let fallback = |vsw: &str| self.kind_on(vsw, now_ms) == Kind::Single;
        let mut out = self.pool.eni_entries(
            |vsw| {
                self.vsw
                    .switches()
                    .inhibited_until(vsw, now_ms)
                    .map(|u| u / 1000)
            },
            self.cap
                .prefix_mode
                .then_some(&fallback as &dyn Fn(&str) -> bool),
        );
        for c in self.inflight.creating() {
            out.push(EniEntry {
                eni: c.eni.unwrap_or("creating").to_string(),
                mac: "-".into(),
                vswitch: c.vswitch.to_string(),
                ips: 0,
                pending: c.tickets,
                inhibited_until: self
                    .vsw
                    .switches()
                    .inhibited_until(c.vswitch, now_ms)
                    .map(|u| u / 1000),
                prefixes: self.cap.prefix_mode.then(|| PrefixUse {
                    prefixes: 0,
                    singles: 0,
                    fallback: fallback(c.vswitch),
                }),
            });
        }
        out
    }

    fn snapshot(&self) -> Snapshot {
        let now_ms = unix_ms();
        let (creating, freeing) = self.inflight.creating_and_freeing();
        Snapshot {
            pool: self.pool.clone(),
            pending: self.demand.pending(),
            capacity: self.cap,
            creating,
            freeing,
            eni_ops: self.inflight.op_slots_used(),
            inhibited_vswitches: self.vsw.switches().inhibited_count(now_ms),
            sg_drift: self.sg_drift.clone(),
            waiters: self.demand.waiting(),
        }
    }
}

#[cfg(test)]
mod tests;
