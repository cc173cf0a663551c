//! The allocator: the seed's ENI multi-IP factory, rebuilt as threads and
//! channels.
//!
//! - [`actor`]: one thread owns the pool and plans demand ([`placement`]).
//! - [`worker`]: one thread per ENI batches AssignPrivateIpAddresses calls.
//! - [`eniops`]: ENI create/free operations, at most
//!   `max_concurrent_eni_ops` at a time, each rolled back on failure.
//! - [`maint_thread`]: the periodic cloud reads (vswitch free counts, the leaked
//!   ENI sweeper, security-group drift, reconcile).
//! - [`recover`]: start-up: state file + cloud -> the initial pool.
//! - [`audit`]: local state against the OpenAPI.
//! - [`sg_sets`]: security groups per pod (ENIs by security-group set).
//!
//! [`Allocator`] is the handle the daemon and tests use; every method
//! returns within a deadline.

pub(crate) mod actor;
pub(crate) mod audit;
pub(crate) mod capacity;
pub(crate) mod describe;
pub(crate) mod drain;
pub(crate) mod eniops;
pub(crate) mod forecast;
pub(crate) mod idle_target;
pub(crate) mod mailbox;
pub(crate) mod maint_thread;
pub(crate) mod overdue;
pub(crate) mod ownership;
pub(crate) mod placement;
pub(crate) mod prefix_mode;
pub(crate) mod recover;
pub(crate) mod sg_sets;
pub(crate) mod vswitch_choice;
pub(crate) mod vswitch_reads;
pub(crate) mod worker;

#[cfg(test)]
mod fake;
#[cfg(test)]
mod tests;

use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, SendTimeoutError, Sender};
use log::warn;

use crate::config::VSwitchPolicy;
use crate::pool::{HoldTimes, PoolState};
use crate::store::{Record, StoreError};
use eniip_cloud::{CloudApi, CloudError, CloudErrorKind};
use eniip_protocol::core::{AllocError, Answer, Commands, ErrCode};
use eniip_util::sem::Semaphore;
use eniip_util::thread::join_until;

use capacity::Capacity;
use mailbox::Request;

/// Where committed records go: the durable store, or a fake in tests.
/// `done` runs once the records are durable (or failed); records submitted
/// later are made durable after earlier ones.
///
/// The allocator only queues (under its lock); the thread that let go of
/// the lock then has what it queued committed: on its own thread when no
/// commit is in flight ([`lead`](Journal::lead), a client's thread), or by
/// the store's ([`hand_off`](Journal::hand_off), the allocator's own).
pub(crate) trait Journal: Send + Sync {
    /// Queues records; never blocks on the disk.
    fn submit(&self, records: Vec<Record>, done: Box<dyn FnOnce(Result<(), StoreError>) + Send>);
    /// Commits what is queued on this thread unless a commit is in flight
    /// (its holder takes it); blocks for one fsync at most.
    fn lead(&self) {}
    /// Has what is queued committed by the store's thread.
    fn hand_off(&self) {}
}

impl Journal for crate::store::Committer {
    fn submit(&self, records: Vec<Record>, done: Box<dyn FnOnce(Result<(), StoreError>) + Send>) {
        crate::store::Committer::queue(self, records, done);
    }
    fn lead(&self) {
        crate::store::Committer::lead(self);
    }
    fn hand_off(&self) {
        crate::store::Committer::hand_off(self);
    }
}

/// Everything the allocator needs to know, from the config, the cloud and
/// built-in tunables.
#[derive(Debug, Clone)]
pub(crate) struct AllocatorOptions {
    /// This instance.
    pub(crate) instance_id: String,
    /// This daemon's node id (its state directory's), tagged on its ENIs.
    pub(crate) node_id: String,
    /// Vswitches for new ENIs (this zone's configured ones, or the
    /// instance's own).
    pub(crate) vswitches: Vec<String>,
    /// Free addresses per vswitch known at start (`ordered` policy).
    pub(crate) vswitch_free: Vec<(String, u64)>,
    /// How a new ENI's vswitch is chosen.
    pub(crate) vswitch_policy: VSwitchPolicy,
    /// Security groups for new ENIs.
    pub(crate) security_groups: Vec<String>,
    /// Security groups per pod: which a pod may ask, how long a set idles.
    pub(crate) sg_policy: sg_sets::SetPolicy,
    /// Extra tags for new ENIs.
    pub(crate) eni_tags: Vec<(String, String)>,
    /// IPv4+IPv6 pairs.
    pub(crate) dual: bool,
    /// Capacity and pool sizes.
    pub(crate) capacity: Capacity,
    /// Per-ENI batching window.
    pub(crate) aggregation_window: Duration,
    /// Addresses per call.
    pub(crate) max_ips_per_call: usize,
    /// Concurrent ENI operations.
    pub(crate) max_concurrent_eni_ops: usize,
    /// How long a cold alloc may wait.
    pub(crate) alloc_timeout: Duration,
    /// Pool maintenance period.
    pub(crate) pool_check_interval: Duration,
    /// The idle target follows the allocation rate (`idle_target`).
    pub(crate) adaptive_pool: bool,
    /// Reservation for the last owner after release.
    pub(crate) ip_stick_time: Duration,
    /// The longest reservation an owner may ask for itself.
    pub(crate) max_ip_stick_time: Duration,
    /// Cool-down from other owners after release.
    pub(crate) ip_cooldown: Duration,
    /// How long an exhausted vswitch is skipped (10 min).
    pub(crate) inhibit: Duration,
    /// How long to wait for metadata to show new addresses (10 s).
    pub(crate) metadata_wait: Duration,
    /// Deadline for a new ENI to be attached, in use and in metadata.
    pub(crate) eni_ready_timeout: Duration,
    /// Cap of the backoff after failed background work.
    pub(crate) pool_backoff_max: Duration,
    /// Unattached tagged ENIs younger than this are left to their creator.
    pub(crate) sweep_min_age: Duration,
    /// What the `config` command shows (effective values, secrets masked).
    pub(crate) config_view: Vec<(String, String)>,
    /// A restart served from the state files before the OpenAPI was
    /// asked: the first reconcile runs this long after start (or at once
    /// when an `alloc` needs a new address), and until it has run nothing
    /// new is handed out and the peer check of a cold start is made there.
    /// `None`: the pool came from the OpenAPI.
    pub(crate) first_reconcile: Option<Duration>,
    /// A forecast under this is logged once as a WARN (0: never).
    pub(crate) exhaustion_warn: Duration,
    /// The node was draining when it stopped (the store's record).
    pub(crate) draining: bool,
}

impl AllocatorOptions {
    /// Options from a validated config and what the cloud said.
    pub(crate) fn new(
        cfg: &crate::config::Config,
        instance_id: &str,
        vswitches: Vec<String>,
        security_groups: Vec<String>,
        capacity: Capacity,
    ) -> AllocatorOptions {
        AllocatorOptions {
            instance_id: instance_id.to_string(),
            node_id: String::new(),
            vswitches,
            vswitch_free: Vec::new(),
            vswitch_policy: cfg.vswitch_selection_policy,
            security_groups,
            sg_policy: sg_sets::SetPolicy {
                allowed: cfg.sg.pod_security_groups.clone(),
                idle: cfg.sg.sg_set_idle,
            },
            eni_tags: cfg
                .eni_tags
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            dual: cfg.ip_stack == crate::config::IpStack::Dual,
            capacity,
            aggregation_window: cfg.aggregation_window,
            max_ips_per_call: cfg.max_ips_per_call,
            max_concurrent_eni_ops: cfg.max_concurrent_eni_ops,
            alloc_timeout: cfg.alloc_timeout,
            pool_check_interval: cfg.pool_check_interval,
            adaptive_pool: cfg.adaptive_pool,
            ip_stick_time: cfg.ip_stick_time,
            max_ip_stick_time: cfg.max_ip_stick_time,
            ip_cooldown: cfg.ip_cooldown,
            inhibit: Duration::from_secs(600),
            metadata_wait: Duration::from_secs(10),
            eni_ready_timeout: Duration::from_secs(120),
            pool_backoff_max: Duration::from_secs(300),
            sweep_min_age: Duration::from_secs(300),
            config_view: cfg.effective(),
            first_reconcile: None,
            exhaustion_warn: cfg.exhaustion_warn,
            draining: false,
        }
    }

    /// The node's own security-group set (`security_groups`).
    pub(crate) fn default_set(&self) -> Option<eniip_protocol::core::SecurityGroupSet> {
        sg_sets::default_set(&self.security_groups)
    }

    /// How long a released address is kept (see [`HoldTimes`]).
    pub(crate) fn hold_times(&self) -> HoldTimes {
        HoldTimes {
            stick_ms: self.ip_stick_time.as_millis() as u64,
            max_stick_ms: self.max_ip_stick_time.as_millis() as u64,
            cool_ms: self.ip_cooldown.as_millis() as u64,
        }
    }
}

/// Why the allocator stopped by itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fatal {
    /// What happened, for the log.
    pub(crate) message: String,
    /// Another eniipd (another state directory) manages ENIs attached to
    /// this instance: a restart cannot help until one of them is stopped.
    pub(crate) peer_running: bool,
}

impl From<String> for Fatal {
    fn from(message: String) -> Fatal {
        Fatal {
            message,
            peer_running: false,
        }
    }
}

/// A copy of what `audit` compares with the cloud, at one instant.
#[derive(Debug, Clone)]
pub(crate) struct Snapshot {
    /// The pool.
    pub(crate) pool: PoolState,
    /// ENIs being created (ids known so far).
    pub(crate) creating: Vec<String>,
    /// ENIs being freed.
    pub(crate) freeing: Vec<String>,
    /// Clients waiting for an address.
    #[cfg_attr(not(test), allow(dead_code, reason = "only the unit tests read it"))]
    pub(crate) waiters: usize,
}

/// How long an internal request (snapshot, reload, ping) may take.
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// A thread to join at stop, with its name for the log.
pub(crate) type Joinable = (String, JoinHandle<()>);

/// The running allocator.
pub(crate) struct Allocator {
    commands: Commands,
    requests: Sender<Request>,
    stop: Sender<()>,
    maint_stop: Sender<()>,
    maint: parking_lot::Mutex<Option<JoinHandle<()>>>,
    reads_stop: Sender<()>,
    reads: parking_lot::Mutex<Option<JoinHandle<()>>>,
    actor: parking_lot::Mutex<Option<JoinHandle<Vec<Joinable>>>>,
    /// Answers clients whose threads are held in a commit they lead.
    watchdog: Arc<overdue::Watchdog>,
    fatal: Receiver<Fatal>,
    opts: Arc<AllocatorOptions>,
}

impl std::fmt::Debug for Allocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Allocator")
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

impl Allocator {
    /// Starts the actor, the per-ENI workers of `pool`'s ENIs and the
    /// maintenance thread.
    pub(crate) fn start(
        opts: AllocatorOptions,
        cloud: Arc<dyn CloudApi>,
        journal: Arc<dyn Journal>,
        pool: PoolState,
    ) -> io::Result<Allocator> {
        // The pool pairs addresses by its own flag: one source of truth.
        debug_assert_eq!(pool.dual(), opts.dual, "a pool built for another ip_stack");
        let opts = Arc::new(opts);
        // Bounded channels allocate and touch every slot at once: the
        // commands travel boxed (see `Commands`), and a request's sender
        // waits for its answer, so a handful of slots serve every thread
        // that asks.
        let (cmd_tx, cmd_rx) = bounded(1024);
        let (req_tx, req_rx) = bounded(16);
        let (ev_tx, ev_rx) = bounded(256);
        let (stop_tx, stop_rx) = bounded(1);
        let (maint_stop_tx, maint_stop_rx) = bounded(1);
        let (reads_stop_tx, reads_stop_rx) = bounded(1);
        let (fatal_tx, fatal_rx) = bounded(16);
        // The allocator asks for its first reconcile early (an `alloc`
        // waits on it); one pending ask is enough.
        let (kick_tx, kick_rx) = bounded(1);
        let op_sem = Semaphore::new(opts.max_concurrent_eni_ops);
        let actor = actor::Actor::new(
            Arc::clone(&opts),
            Arc::clone(&cloud),
            journal,
            pool,
            op_sem.clone(),
            actor::Senders {
                events: ev_tx.clone(),
                fatal: fatal_tx.clone(),
                requests: req_tx.clone(),
            },
        )
        .with_first_reconcile(kick_tx);
        // Clients run commands themselves when the actor is free
        // (`actor::combine`); a nudge wakes its thread sooner than planned.
        let shared = actor::Held::new(actor, cmd_rx.clone());
        let (nudge_tx, nudge_rx) = bounded(1);
        let watchdog = Arc::new(overdue::Watchdog::start()?);
        let combiner = Arc::new(actor::Combiner::new(
            Arc::clone(&shared),
            nudge_tx,
            Arc::clone(&watchdog),
        ));
        let actor = std::thread::Builder::new()
            .name("eniipd-pool".into())
            .spawn(move || actor::run(shared, nudge_rx, cmd_rx, req_rx, ev_rx, stop_rx))?;
        let reads = vswitch_reads::spawn(
            Arc::clone(&cloud),
            opts.vswitches.clone(),
            ev_tx.clone(),
            reads_stop_rx,
        )?;
        let maint = maint_thread::spawn(
            Arc::clone(&opts),
            Arc::clone(&cloud),
            req_tx.clone(),
            ev_tx,
            op_sem,
            maint_thread::Wakeups {
                stop: maint_stop_rx,
                kick: kick_rx,
            },
            fatal_tx,
        )?;
        Ok(Allocator {
            commands: Commands::new(cmd_tx, opts.alloc_timeout).combining(combiner),
            requests: req_tx,
            stop: stop_tx,
            maint_stop: maint_stop_tx,
            maint: parking_lot::Mutex::new(Some(maint)),
            reads_stop: reads_stop_tx,
            reads: parking_lot::Mutex::new(Some(reads)),
            actor: parking_lot::Mutex::new(Some(actor)),
            watchdog,
            fatal: fatal_rx,
            opts,
        })
    }

    /// Where clients send their commands.
    pub(crate) fn commands(&self) -> Commands {
        self.commands.clone()
    }

    /// Sends one command and waits for its answer (within its deadline).
    #[cfg(test)]
    pub(crate) fn ask(&self, command: eniip_protocol::core::Command) -> Result<Answer, AllocError> {
        self.commands.ask(command)
    }

    fn request<T>(
        &self,
        make: impl FnOnce(Sender<T>) -> Request,
        timeout: Duration,
    ) -> Result<T, AllocError> {
        request(&self.requests, make, timeout)
    }

    /// A copy of the state.
    #[cfg(test)]
    pub(crate) fn snapshot(&self) -> Result<Snapshot, AllocError> {
        self.request(Request::Snapshot, REPLY_TIMEOUT)
    }

    /// Held allocations that recorded their sandbox's network.
    pub(crate) fn attached(&self) -> Result<Vec<crate::pool::Attached>, AllocError> {
        self.request(Request::Attached, REPLY_TIMEOUT)
    }

    /// If `a` is still held for the same sandbox and attachment: runs
    /// `teardown`, then releases it, atomically (see
    /// [`Request::Reap`]); the address released, if any.
    pub(crate) fn reap(
        &self,
        a: &crate::pool::Attached,
        teardown: Option<Box<dyn FnOnce() + Send>>,
    ) -> Result<Option<std::net::IpAddr>, AllocError> {
        let answer = self.request(
            |reply| Request::Reap {
                owner: a.owner.clone(),
                sandbox: a.sandbox.clone(),
                seen: a.attach.clone(),
                teardown: teardown.map(mailbox::Teardown),
                reply,
            },
            REPLY_TIMEOUT,
        )??;
        Ok(match answer {
            Answer::Released(ip) => ip,
            _ => None,
        })
    }

    /// SIGHUP: new pool sizes, and the configuration view that goes with
    /// them.
    pub(crate) fn reload(
        &self,
        capacity: Capacity,
        view: Vec<(String, String)>,
    ) -> Result<Capacity, AllocError> {
        self.request(
            |reply| Request::Reload {
                capacity,
                view,
                reply,
            },
            REPLY_TIMEOUT,
        )
    }

    /// True if the actor answers within `timeout` (watchdog).
    pub(crate) fn ping(&self, timeout: Duration) -> bool {
        self.request(Request::Ping, timeout).is_ok()
    }

    /// Fatal errors (a failed commit): the daemon must stop.
    pub(crate) fn fatal(&self) -> &Receiver<Fatal> {
        &self.fatal
    }

    /// Tells the actor and the maintenance thread to stop, without
    /// waiting: every waiting client is answered `shutting-down` within
    /// milliseconds.
    pub(crate) fn begin_stop(&self) {
        let _ = self.stop.try_send(());
        let _ = self.maint_stop.try_send(());
        let _ = self.reads_stop.try_send(());
    }

    /// Stops the allocator: every waiting client is answered
    /// `shutting-down` at once, then the maintenance thread, the actor and
    /// every thread the actor started (ENI workers, ENI operations, audits)
    /// are joined, latest first, until `until`. Idempotent.
    #[cfg(test)]
    pub(crate) fn shutdown(&self, until: Instant) {
        let rest = self.stop_actor(until);
        join_all(rest, until);
    }

    /// Stops the actor and joins it until `until`; once it returns, nothing
    /// submits to the journal any more. The threads still to join (ENI
    /// workers, ENI operations, audits, maintenance), for [`join_all`].
    pub(crate) fn stop_actor(&self, until: Instant) -> Vec<Joinable> {
        self.begin_stop();
        // The connections are served by now (or left behind, held in the
        // disk): their clients still waiting are answered `timeout`.
        self.watchdog.stop(until);
        let mut threads: Vec<Joinable> = Vec::new();
        if let Some(h) = self.maint.lock().take() {
            threads.push(("eniipd-maint".into(), h));
        }
        if let Some(h) = self.reads.lock().take() {
            threads.push(("eniipd-vsw-read".into(), h));
        }
        if let Some(h) = self.actor.lock().take() {
            match eniip_util::thread::join_by(h, until) {
                Ok(Ok(mut helpers)) => threads.append(&mut helpers),
                Ok(Err(_)) => {}
                Err(_) => warn!("thread eniipd-pool did not stop in time; abandoned"),
            }
        }
        threads
    }
}

/// The protocol error for a cloud failure.
pub(crate) fn cloud_error(e: &CloudError) -> AllocError {
    match e.kind {
        CloudErrorKind::Exhausted | CloudErrorKind::PrefixExhausted => {
            AllocError::cloud(ErrCode::Exhausted, e.code_or_kind(), e.message.clone())
        }
        CloudErrorKind::Timeout => AllocError::new(ErrCode::Timeout, e.to_string()),
        _ => AllocError::cloud(ErrCode::Cloud, e.code_or_kind(), e.message.clone()),
    }
}

/// Joins `threads`, latest started first, until `until`; a thread still
/// inside a cloud call then is left behind and named in the log.
pub(crate) fn join_all(threads: Vec<Joinable>, until: Instant) {
    for (name, h) in threads.into_iter().rev() {
        if !join_until(h, until) {
            warn!("thread {name} did not stop in time (a cloud call in flight?); abandoned");
        }
    }
}

/// Asks the actor something on its internal channel.
pub(crate) fn request<T>(
    requests: &Sender<Request>,
    make: impl FnOnce(Sender<T>) -> Request,
    timeout: Duration,
) -> Result<T, AllocError> {
    let (tx, rx) = bounded(1);
    match requests.send_timeout(make(tx), timeout) {
        Ok(()) => {}
        Err(SendTimeoutError::Timeout(_)) => {
            return Err(AllocError::new(ErrCode::Busy, "the allocator is busy"))
        }
        Err(SendTimeoutError::Disconnected(_)) => return Err(AllocError::shutting_down()),
    }
    match rx.recv_timeout(timeout) {
        Ok(v) => Ok(v),
        Err(RecvTimeoutError::Timeout) => Err(AllocError::new(
            ErrCode::Internal,
            "no answer from the allocator in time",
        )),
        Err(RecvTimeoutError::Disconnected) => Err(AllocError::shutting_down()),
    }
}
