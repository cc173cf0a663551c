//! The allocator: the seed's ENI multi-IP factory, rebuilt as threads and
//! channels.
//!
//! - [`actor`]: one thread owns the pool and plans demand ([`planner`]).
//! - [`worker`]: one thread per ENI batches AssignPrivateIpAddresses calls.
//! - [`eniops`]: ENI create/free operations, at most
//!   `max_concurrent_eni_ops` at a time, each rolled back on failure.
//! - [`maint`]: the periodic cloud reads (vswitch free counts, the leaked
//!   ENI sweeper, security-group drift, reconcile).
//! - [`recover`]: start-up: state file + cloud -> the initial pool.
//! - [`audit`]: local state against the OpenAPI.
//!
//! [`Allocator`] is the handle the daemon and tests use; every method
//! returns within a deadline.

pub mod actor;
pub mod audit;
pub mod capacity;
pub mod describe;
pub mod eniops;
pub mod maint;
pub mod msg;
pub mod planner;
pub mod recover;
pub mod vswitch;
pub mod worker;

#[cfg(test)]
mod fake;
#[cfg(test)]
mod tests;

use std::io;
use std::net::IpAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, SendTimeoutError, Sender};
use log::warn;

use crate::cloud::CloudApi;
use crate::config::VSwitchPolicy;
use crate::pool::PoolState;
use crate::server::protocol::{
    Allocation, EniEntry, ErrCode, ListEntry, Owner, ProtoError, SandboxId, StatusCounts,
};
use crate::store::{Record, StoreError};
use crate::util::sem::Semaphore;

use capacity::Capacity;
use msg::Request;

/// Where committed records go: the durable store, or a fake in tests.
/// `done` runs once the records are durable (or failed); records submitted
/// later are made durable after earlier ones.
pub trait Journal: Send + Sync {
    /// Queues records; never blocks on the disk.
    fn submit(&self, records: Vec<Record>, done: Box<dyn FnOnce(Result<(), StoreError>) + Send>);
}

impl Journal for crate::store::Committer {
    fn submit(&self, records: Vec<Record>, done: Box<dyn FnOnce(Result<(), StoreError>) + Send>) {
        crate::store::Committer::submit(self, records, done);
    }
}

/// Everything the allocator needs to know, from the config, the cloud and
/// built-in tunables.
#[derive(Debug, Clone)]
pub struct AllocatorOptions {
    /// This instance.
    pub instance_id: String,
    /// Vswitches for new ENIs (this zone's configured ones, or the
    /// instance's own).
    pub vswitches: Vec<String>,
    /// Free addresses per vswitch known at start (`ordered` policy).
    pub vswitch_free: Vec<(String, u64)>,
    /// How a new ENI's vswitch is chosen.
    pub vswitch_policy: VSwitchPolicy,
    /// Security groups for new ENIs.
    pub security_groups: Vec<String>,
    /// Extra tags for new ENIs.
    pub eni_tags: Vec<(String, String)>,
    /// IPv4+IPv6 pairs.
    pub dual: bool,
    /// Capacity and pool sizes.
    pub capacity: Capacity,
    /// Per-ENI batching window.
    pub aggregation_window: Duration,
    /// Addresses per call.
    pub max_ips_per_call: usize,
    /// Concurrent ENI operations.
    pub max_concurrent_eni_ops: usize,
    /// How long a cold alloc may wait.
    pub alloc_timeout: Duration,
    /// Pool maintenance period.
    pub pool_check_interval: Duration,
    /// Reservation for the last owner after release.
    pub ip_stick_time: Duration,
    /// Cool-down from other owners after release.
    pub ip_cooldown: Duration,
    /// How long an exhausted vswitch is skipped (10 min).
    pub inhibit: Duration,
    /// How long to wait for metadata to show new addresses (10 s).
    pub metadata_wait: Duration,
    /// Deadline for a new ENI to be attached, in use and in metadata.
    pub eni_ready_timeout: Duration,
    /// Cap of the backoff after failed background work.
    pub pool_backoff_max: Duration,
    /// Unattached tagged ENIs younger than this are left to their creator.
    pub sweep_min_age: Duration,
}

impl AllocatorOptions {
    /// Options from a validated config and what the cloud said.
    pub fn new(
        cfg: &crate::config::Config,
        instance_id: &str,
        vswitches: Vec<String>,
        security_groups: Vec<String>,
        capacity: Capacity,
    ) -> AllocatorOptions {
        AllocatorOptions {
            instance_id: instance_id.to_string(),
            vswitches,
            vswitch_free: Vec::new(),
            vswitch_policy: cfg.vswitch_selection_policy,
            security_groups,
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
            ip_stick_time: cfg.ip_stick_time,
            ip_cooldown: cfg.ip_cooldown,
            inhibit: Duration::from_secs(600),
            metadata_wait: Duration::from_secs(10),
            eni_ready_timeout: Duration::from_secs(120),
            pool_backoff_max: Duration::from_secs(300),
            sweep_min_age: Duration::from_secs(300),
        }
    }
}

/// A copy of the allocator's state at one instant.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The pool.
    pub pool: PoolState,
    /// Addresses asked of the cloud and not yet answered.
    pub pending: usize,
    /// Capacity and pool sizes.
    pub capacity: Capacity,
    /// ENIs being created (ids known so far).
    pub creating: Vec<String>,
    /// ENIs being freed.
    pub freeing: Vec<String>,
    /// ENI operations in flight.
    pub eni_ops: usize,
    /// Vswitches inhibited now.
    pub inhibited_vswitches: usize,
    /// Security-group drift found by the last check.
    pub sg_drift: Vec<String>,
    /// Clients waiting for an address.
    pub waiters: usize,
}

impl Snapshot {
    /// Metric gauges of this snapshot.
    pub fn gauges(&self) -> crate::metrics::Gauges {
        crate::metrics::Gauges {
            ips_by_state: self.pool.counts_by_state(),
            enis: self.pool.enis.len() as u64,
            capacity: self.capacity.total_ips as u64,
            pending: self.pending as u64,
            connections: 0,
            eni_ops: self.eni_ops as u64,
            inhibited_vswitches: self.inhibited_vswitches as u64,
        }
    }
}

/// How long a client waits to hand a request to the actor before `busy`.
const ENQUEUE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a non-alloc answer may take (commits included).
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// The running allocator.
pub struct Allocator {
    requests: Sender<Request>,
    stop: Sender<()>,
    maint_stop: Sender<()>,
    threads: parking_lot::Mutex<Vec<(&'static str, JoinHandle<()>)>>,
    fatal: Receiver<String>,
    opts: Arc<AllocatorOptions>,
    cloud: Arc<dyn CloudApi>,
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
    pub fn start(
        opts: AllocatorOptions,
        cloud: Arc<dyn CloudApi>,
        journal: Arc<dyn Journal>,
        pool: PoolState,
    ) -> io::Result<Allocator> {
        let opts = Arc::new(opts);
        let (req_tx, req_rx) = bounded(1024);
        let (ev_tx, ev_rx) = bounded(256);
        let (stop_tx, stop_rx) = bounded(1);
        let (maint_stop_tx, maint_stop_rx) = bounded(1);
        let (fatal_tx, fatal_rx) = bounded(16);
        let eni_sem = Semaphore::new(opts.capacity.usable_enis);
        let op_sem = Semaphore::new(opts.max_concurrent_eni_ops);
        let actor = actor::Actor::new(
            Arc::clone(&opts),
            Arc::clone(&cloud),
            journal,
            pool,
            eni_sem,
            op_sem.clone(),
            ev_tx.clone(),
            fatal_tx,
        );
        let actor = std::thread::Builder::new()
            .name("eniipd-pool".into())
            .spawn(move || actor.run(req_rx, ev_rx, stop_rx))?;
        let maint = maint::spawn(
            Arc::clone(&opts),
            Arc::clone(&cloud),
            req_tx.clone(),
            ev_tx,
            op_sem,
            maint_stop_rx,
        )?;
        Ok(Allocator {
            requests: req_tx,
            stop: stop_tx,
            maint_stop: maint_stop_tx,
            threads: parking_lot::Mutex::new(vec![("eniipd-pool", actor), ("eniipd-maint", maint)]),
            fatal: fatal_rx,
            opts,
            cloud,
        })
    }

    fn ask<T>(
        &self,
        make: impl FnOnce(Sender<T>) -> Request,
        timeout: Duration,
    ) -> Result<T, ProtoError> {
        let (tx, rx) = bounded(1);
        match self.requests.send_timeout(make(tx), ENQUEUE_TIMEOUT) {
            Ok(()) => {}
            Err(SendTimeoutError::Timeout(_)) => {
                return Err(ProtoError::new(
                    ErrCode::Busy,
                    "too many requests in flight",
                ))
            }
            Err(SendTimeoutError::Disconnected(_)) => {
                return Err(ProtoError::new(
                    ErrCode::ShuttingDown,
                    "the daemon is stopping",
                ))
            }
        }
        match rx.recv_timeout(timeout) {
            Ok(v) => Ok(v),
            Err(RecvTimeoutError::Timeout) => Err(ProtoError::new(
                ErrCode::Internal,
                "no answer from the allocator in time",
            )),
            Err(RecvTimeoutError::Disconnected) => Err(ProtoError::new(
                ErrCode::ShuttingDown,
                "the daemon is stopping",
            )),
        }
    }

    /// `alloc`: the owner's address, once durable.
    pub fn alloc(
        &self,
        owner: &Owner,
        sandbox: Option<&SandboxId>,
        prefer: Option<IpAddr>,
    ) -> Result<Allocation, ProtoError> {
        let started = Instant::now();
        self.ask(
            |reply| Request::Alloc {
                owner: owner.clone(),
                sandbox: sandbox.cloned(),
                prefer,
                started,
                reply,
            },
            self.opts.alloc_timeout + REPLY_TIMEOUT,
        )?
    }

    /// `release`: the released address (None: nothing held), once durable.
    pub fn release(
        &self,
        owner: &Owner,
        sandbox: Option<&SandboxId>,
    ) -> Result<Option<IpAddr>, ProtoError> {
        self.ask(
            |reply| Request::Release {
                owner: owner.clone(),
                sandbox: sandbox.cloned(),
                reply,
            },
            REPLY_TIMEOUT,
        )?
    }

    /// `show`
    pub fn show(&self, owner: &Owner) -> Result<Allocation, ProtoError> {
        self.ask(
            |reply| Request::Show {
                owner: owner.clone(),
                reply,
            },
            REPLY_TIMEOUT,
        )?
    }

    /// `list`
    pub fn list(&self) -> Result<Vec<ListEntry>, ProtoError> {
        self.ask(Request::List, REPLY_TIMEOUT)
    }

    /// `status`
    pub fn status(&self) -> Result<StatusCounts, ProtoError> {
        self.ask(Request::Status, REPLY_TIMEOUT)
    }

    /// `enis`
    pub fn enis(&self) -> Result<Vec<EniEntry>, ProtoError> {
        self.ask(Request::Enis, REPLY_TIMEOUT)
    }

    /// A copy of the state.
    pub fn snapshot(&self) -> Result<Snapshot, ProtoError> {
        self.ask(Request::Snapshot, REPLY_TIMEOUT)
    }

    /// `audit`: differences between local state and the OpenAPI.
    pub fn audit(&self) -> Result<Vec<String>, ProtoError> {
        audit::audit(
            &*self.cloud,
            &self.opts.instance_id,
            &self.opts.security_groups,
            || self.snapshot(),
        )
    }

    /// SIGHUP: new pool sizes.
    pub fn reload(&self, capacity: Capacity) -> Result<Capacity, ProtoError> {
        self.ask(|reply| Request::Reload { capacity, reply }, REPLY_TIMEOUT)
    }

    /// True if the actor answers within `timeout` (watchdog).
    pub fn ping(&self, timeout: Duration) -> bool {
        self.ask(Request::Ping, timeout).is_ok()
    }

    /// Fatal errors (a failed commit): the daemon must stop.
    pub fn fatal(&self) -> &Receiver<String> {
        &self.fatal
    }

    /// Stops the maintenance thread and the actor (waiting clients get
    /// `shutting-down`), joining them within `deadline`. Idempotent.
    pub fn shutdown(&self, deadline: Duration) {
        let until = Instant::now() + deadline;
        let _ = self.maint_stop.try_send(());
        let _ = self.stop.try_send(());
        let threads: Vec<_> = self.threads.lock().drain(..).collect();
        for (name, h) in threads {
            if !join_until(h, until) {
                warn!("thread {name} did not stop in time; abandoned");
            }
        }
    }
}

/// Joins a thread unless `until` passes first.
pub fn join_until(h: JoinHandle<()>, until: Instant) -> bool {
    while !h.is_finished() {
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = h.join();
    true
}
