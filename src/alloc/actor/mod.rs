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
        vsw.set_free(opts.vswitch_free.iter().cloned(), u64::MAX);
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
    fn inhibit_prefixes(&mut self, vswitch: &str, err: &CloudError) {
        let until = unix_ms() + self.opts.inhibit.as_millis() as u64;
        warn!(
            "{vswitch} has no free /28 prefix ({}); single addresses until {}",
            err.code_or_kind(),
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
mod tests {
    //! Event orderings too narrow to hit reliably through threads, driven
    //! directly on an actor.

    use super::*;
    use crate::alloc::capacity::{self, PoolSizes};
    use crate::alloc::fake::{FakeCloud, MemJournal, INSTANCE};
    use crate::config::RawConfig;
    use crate::pool::PoolEni;

    const ENI: &str = "eni-0001";

    fn ip(last: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 0, 0, last)
    }

    fn actor() -> Actor {
        actor_with(Semaphore::new(3))
    }

    fn actor_with(op_sem: Semaphore) -> Actor {
        actor_of("{}", op_sem)
    }

    fn actor_of(config: &str, op_sem: Semaphore) -> Actor {
        let fake = FakeCloud::new(4, 15, 1000);
        let cfg = RawConfig::parse(config).unwrap().validate().unwrap();
        let cap = capacity::compute(&fake.limits, &cfg, PoolSizes::of(&cfg), &mut Vec::new());
        let opts = AllocatorOptions::new(&cfg, INSTANCE, vec!["vsw-a".into()], Vec::new(), cap);
        let mut pool = PoolState::new(false);
        pool.add_eni(PoolEni::ready(
            ENI,
            "00:16:3e:00:00:01",
            "vsw-a",
            "10.0.0.0/24",
            ip(253),
            ip(1),
        ));
        for last in 1..=4 {
            pool.add_ip(ENI, ip(last), None);
        }
        let (events_tx, _) = crossbeam_channel::bounded(16);
        let (fatal_tx, _) = crossbeam_channel::bounded(16);
        let (requests_tx, _) = crossbeam_channel::bounded(16);
        Actor::new(
            Arc::new(opts),
            fake,
            Arc::new(MemJournal::default()),
            pool,
            Semaphore::new(3),
            op_sem,
            events_tx,
            fatal_tx,
            requests_tx,
        )
    }

    fn view(v4: &[Ipv4Addr]) -> CloudEniView {
        CloudEniView {
            eni: ReadyEni {
                id: ENI.into(),
                mac: "00:16:3e:00:00:01".into(),
                vswitch: "vsw-a".into(),
                cidr: "10.0.0.0/24".into(),
                gateway: ip(253),
                primary_ip: ip(1),
                v4: v4.to_vec(),
                v6: Vec::new(),
                prefixes: Vec::new(),
                prefix_fallback: false,
            },
            in_metadata: true,
        }
    }

    #[test]
    fn a_cloud_view_older_than_an_unassign_does_not_bring_its_addresses_back() {
        let mut a = actor();
        // The maintenance thread reads the cloud...
        let started = Instant::now();
        let stale = view(&[ip(1), ip(2), ip(3), ip(4)]);
        // ...then an unassign of two idle addresses ends...
        a.pool.set_releasing(&[ip(3), ip(4)], true);
        a.on_event(Event::Unassigned {
            eni: ENI.into(),
            v4: vec![ip(3), ip(4)],
            gone_v4: vec![ip(3), ip(4)],
            gone_v6: Vec::new(),
            gone_prefixes: Vec::new(),
            error: None,
        });
        // ...and only then does the old view arrive.
        a.on_event(Event::Reconcile {
            started,
            enis: vec![stale],
            detached: None,
        });
        let held: Vec<Ipv4Addr> = a.pool.ips.keys().copied().collect();
        assert_eq!(held, [ip(1), ip(2)], "gone addresses came back");

        // A view taken after the change is acted on: an address the cloud
        // granted whose answer was lost is adopted, one it lost is dropped.
        std::thread::sleep(Duration::from_millis(2));
        a.on_event(Event::Reconcile {
            started: Instant::now(),
            enis: vec![view(&[ip(1), ip(5)])],
            detached: None,
        });
        let held: Vec<Ipv4Addr> = a.pool.ips.keys().copied().collect();
        assert_eq!(held, [ip(1), ip(5)]);
    }

    #[test]
    fn a_cloud_view_older_than_a_free_does_not_adopt_the_eni_again() {
        let mut a = actor();
        let started = Instant::now();
        let stale = view(&[ip(1)]);
        a.on_event(Event::EniFreed {
            eni: ENI.into(),
            result: Ok(()),
        });
        assert!(a.pool.enis.is_empty());
        a.on_event(Event::Reconcile {
            started,
            enis: vec![stale],
            detached: None,
        });
        assert!(a.pool.enis.is_empty(), "a deleted ENI was adopted");
        assert!(a.pool.ips.is_empty());
    }

    #[test]
    fn a_waiter_blocked_on_an_operation_slot_is_planned_again_soon() {
        let ops = Semaphore::new(1);
        let mut a = actor_with(ops.clone());
        // Every address taken, so the next alloc needs a new ENI.
        for last in 1..=4 {
            let (tx, _rx) = crossbeam_channel::bounded(1);
            a.on_alloc(
                Owner::parse(&format!("o/{last}")).unwrap(),
                None,
                None,
                Instant::now(),
                tx,
            );
        }
        // A sweep holds the only operation slot.
        let sweep = ops.try_acquire().unwrap();
        let (tx, _rx) = crossbeam_channel::bounded(1);
        a.on_alloc(
            Owner::parse("o/new").unwrap(),
            None,
            None,
            Instant::now(),
            tx,
        );
        let later = Instant::now() + a.opts.aggregation_window + Duration::from_millis(1);
        a.step(later);
        assert_eq!(a.waiters.len(), 1);
        assert!(a.ops.is_empty(), "no slot, so no create");
        // The sweep ends without telling the actor: it must look again
        // soon, not at the next maintenance pass minutes away.
        drop(sweep);
        let wake = a.next_wakeup(later);
        assert!(wake <= later + REPLAN, "{:?}", wake - later);
    }

    #[test]
    fn an_eni_detached_behind_our_back_is_withdrawn_and_readopted_when_back() {
        let mut a = actor();
        let (tx, _rx) = crossbeam_channel::bounded(1);
        a.on_alloc(Owner::parse("o/1").unwrap(), None, None, Instant::now(), tx);
        let held = a.pool.owner_ip(&Owner::parse("o/1").unwrap()).unwrap().v4;
        // The cloud no longer lists the ENI as attached (it still exists).
        a.on_event(Event::Reconcile {
            started: Instant::now(),
            enis: Vec::new(),
            detached: Some(vec![ENI.into()]),
        });
        assert_eq!(a.pool.ips.len(), 1, "idle addresses leave the pool");
        assert!(
            a.pool.ips[&held].lost,
            "the owned one is never handed out again"
        );
        assert!(a.pool.enis[ENI].at_limit, "nothing more is asked of it");
        let other = Owner::parse("o/2").unwrap();
        assert_eq!(
            a.pool.pick(&other, None),
            None,
            "nothing from a vanished ENI"
        );
        // It is attached again: its addresses come back as idle.
        a.on_event(Event::Reconcile {
            started: Instant::now(),
            enis: vec![view(&[ip(1), ip(2), ip(3), ip(4)])],
            detached: None,
        });
        assert!(!a.pool.enis[ENI].at_limit);
        assert_eq!(a.pool.ips.len(), 4);
        assert!(!a.pool.ips[&held].lost);
        assert!(a.pool.pick(&other, None).is_some());
    }

    #[test]
    fn an_eni_deleted_behind_our_back_frees_its_slot_and_is_forgotten_once_released() {
        let mut a = actor();
        let o1 = Owner::parse("o/1").unwrap();
        let (tx, _rx) = crossbeam_channel::bounded(1);
        a.on_alloc(o1.clone(), None, None, Instant::now(), tx);
        let held = a.pool.owner_ip(&o1).unwrap().v4;
        let slots = a.eni_sem.available();
        // Neither attached nor detached: the ENI is gone from the cloud.
        a.on_event(Event::Reconcile {
            started: Instant::now(),
            enis: Vec::new(),
            detached: Some(Vec::new()),
        });
        assert_eq!(a.eni_sem.available(), slots + 1, "its slot is free again");
        assert!(a.eni_entries().is_empty(), "not listed as a managed ENI");
        assert_eq!(a.status_counts().enis, 0);
        assert_eq!(a.pool.ips.len(), 1, "only the owned address is kept");
        assert!(a.pool.ips[&held].lost);
        assert_eq!(a.pool.owner_ip(&o1).map(|ip| ip.v4), Some(held));
        // The vswitch gives the held address to a new ENI: it is not
        // adopted (two owners) while o/1 holds it.
        let mut new = view(&[ip(9), held]);
        new.eni.id = "eni-0002".into();
        new.eni.primary_ip = ip(9);
        a.on_event(Event::Reconcile {
            started: Instant::now(),
            enis: vec![new.clone()],
            detached: Some(Vec::new()),
        });
        assert_eq!(a.pool.ips[&held].eni, ENI, "still the old owner's");
        assert!(
            a.pool
                .pick(&Owner::parse("o/2").unwrap(), Some(IpAddr::V4(held)))
                != Some(held)
        );
        // Released: the deleted ENI is forgotten, and the next pass adopts
        // the address on its new ENI.
        let (tx, _rx) = crossbeam_channel::bounded(1);
        a.on_release(o1, None, tx);
        a.step(Instant::now());
        assert!(!a.pool.enis.contains_key(ENI), "forgotten");
        std::thread::sleep(Duration::from_millis(2));
        a.on_event(Event::Reconcile {
            started: Instant::now(),
            enis: vec![new],
            detached: Some(Vec::new()),
        });
        assert_eq!(a.pool.ips[&held].eni, "eni-0002");
        assert!(a.pool.check().is_ok(), "{:?}", a.pool.check());
    }

    fn prefix_view(v4: &[Ipv4Addr], prefixes: &[&str]) -> CloudEniView {
        let mut v = view(v4);
        v.eni.prefixes = prefixes.iter().map(|p| p.parse().unwrap()).collect();
        v
    }

    #[test]
    fn a_prefix_whose_assign_answer_was_lost_is_adopted_and_one_the_cloud_lost_dropped() {
        let mut a = actor_of(r#"{"ip_prefix": true}"#, Semaphore::new(3));
        let p1: Ipv4Prefix = "10.0.0.16/28".parse().unwrap();
        let p2: Ipv4Prefix = "10.0.0.32/28".parse().unwrap();
        // The cloud granted p1 but the answer never came back.
        let base = [ip(1), ip(2), ip(3), ip(4)];
        a.on_event(Event::Reconcile {
            started: Instant::now(),
            enis: vec![prefix_view(&base, &["10.0.0.16/28"])],
            detached: None,
        });
        assert!(a.pool.enis[ENI].prefixes.contains(&p1));
        assert_eq!(a.pool.ips.len(), 4 + 16);
        assert!(p1.addresses().all(|x| a.pool.ips[&x].prefix == Some(p1)));
        // Its members are never shed one by one; idle and whole, the
        // prefix goes back whole.
        assert!(a
            .pool
            .shed_candidates(100)
            .iter()
            .all(|(_, v)| v.iter().all(|x| !p1.contains(*x))));
        // p2 is known locally but the cloud no longer has it: dropped with
        // its addresses, an owned one kept for its owner and never handed
        // out again.
        a.pool.add_prefix(ENI, p2);
        let o = Owner::parse("o/p2").unwrap();
        a.pool.take(p2.base(), &o, None, 1);
        std::thread::sleep(Duration::from_millis(2));
        a.on_event(Event::Reconcile {
            started: Instant::now(),
            enis: vec![prefix_view(&base, &["10.0.0.16/28"])],
            detached: None,
        });
        assert!(!a.pool.enis[ENI].prefixes.contains(&p2));
        assert_eq!(a.pool.ips.len(), 4 + 16 + 1);
        assert!(a.pool.ips[&p2.base()].lost);
        assert!(a.pool.check().is_ok(), "{:?}", a.pool.check());
        // A view read before a prefix went back does not bring it back.
        let started = Instant::now();
        let members: Vec<Ipv4Addr> = p1.addresses().collect();
        a.pool.set_releasing(&members, true);
        a.on_event(Event::Unassigned {
            eni: ENI.into(),
            v4: members.clone(),
            gone_v4: members.clone(),
            gone_v6: Vec::new(),
            gone_prefixes: vec![p1],
            error: None,
        });
        a.on_event(Event::Reconcile {
            started,
            enis: vec![prefix_view(&base, &["10.0.0.16/28"])],
            detached: None,
        });
        assert!(
            !a.pool.enis[ENI].prefixes.contains(&p1),
            "a gone prefix came back"
        );
        assert!(members.iter().all(|x| !a.pool.ips.contains_key(x)));
    }

    #[test]
    fn no_free_slash_28_turns_the_next_demand_into_single_addresses() {
        let mut a = actor_of(r#"{"ip_prefix": true}"#, Semaphore::new(3));
        let now_ms = unix_ms();
        assert_eq!(a.kind_on("vsw-a", now_ms), Kind::Prefix);
        // 15 IPv4 per ENI: 14 slots beside the primary, 3 used by singles.
        let e = a.pool.enis[ENI].clone();
        assert_eq!(a.eni_room(&e, now_ms), 11 * 16);
        let (tx, rx) = crossbeam_channel::bounded(1);
        let t = a.new_ticket(None);
        a.waiters.push_back(Waiter {
            id: 99,
            since: Instant::now(),
            owner: Owner::parse("o/w").unwrap(),
            sandbox: None,
            prefer: None,
            replies: vec![(tx, Instant::now())],
            deadline: Instant::now() + Duration::from_secs(60),
            ticket: None,
        });
        a.tickets.get_mut(&t).unwrap().waiter = Some(99);
        a.waiters[0].ticket = Some(t);
        a.pool.enis.get_mut(ENI).unwrap().pending = 16;
        a.pool.enis.get_mut(ENI).unwrap().pending_in_prefixes = 16;
        let e = a.pool.enis[ENI].clone();
        assert_eq!(a.eni_room(&e, now_ms), 10 * 16, "16 in flight take a slot");
        a.on_event(Event::Assigned {
            eni: ENI.into(),
            tickets: vec![t],
            prefixes: Some(Vec::new()),
            v4: Vec::new(),
            v6: Vec::new(),
            error: Some(CloudError::new(
                CloudErrorKind::PrefixExhausted,
                "InvalidVSwitchId.IpNotEnough",
                "no free /28",
            )),
        });
        // The waiter is not failed: it is planned again, as singles.
        assert!(rx.try_recv().is_err());
        assert_eq!(a.waiters.len(), 1);
        assert_eq!(a.waiters[0].ticket, None);
        assert_eq!(a.kind_on("vsw-a", unix_ms()), Kind::Single);
        let e = a.pool.enis[ENI].clone();
        assert_eq!((e.pending, e.pending_in_prefixes), (15, 15));
        assert_eq!(
            a.eni_room(&e, unix_ms()),
            11 - 1,
            "one slot for 15 in flight"
        );
        assert_eq!(
            a.eni_entries()[0].prefixes.map(|p| p.mode()),
            Some("single")
        );
        // Once the inhibit has passed, prefixes again.
        assert_eq!(a.kind_on("vsw-a", unix_ms() + 601_000), Kind::Prefix);
    }
}
