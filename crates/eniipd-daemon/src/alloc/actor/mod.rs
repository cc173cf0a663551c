//! The actor: the state that owns the pool, and its thread.
//!
//! Clients, workers, ENI operations and the maintenance thread talk to it by
//! message; a client's thread that finds it free runs its own command on it
//! ([`combine`]: no thread to wake for a lone `alloc`). It never calls the
//! cloud and never touches the disk itself (it queues records in the
//! journal, which answers the client once they are durable, after the
//! state is let go). So no lock is held across I/O, and a slow cloud can
//! never stall an allocation that idle addresses can serve.
//!
//! The actor is made of parts, each a type with private fields, its
//! invariant in its doc and its own tests:
//! - [`demand`]: clients waiting (FIFO) and the addresses asked of the
//!   cloud for them or for the pool (tickets): every ticket ends exactly
//!   once, so an ENI's `pending` returns to zero after any burst;
//! - [`inflight`]: ENI creations and frees running, and the ENI and
//!   operation slots they hold;
//! - [`vswstate`]: inhibited vswitches, call caps, the prefix fallback,
//!   IPv6 gateways, probes; [`surge`]: growth that follows demand;
//! - [`intent`]: what an `alloc` may ask beyond an address (a pod's
//!   annotations), checked before anything changes;
//! - [`workers`] and [`threads`]: the threads it starts, every one joined;
//! - [`combine`]: who runs it, its thread or a client's;
//! - [`durable`]: answers sent only once their records are on disk;
//! - [`reconcile`]: the cloud's view applied to the pool, never a stale
//!   one; [`verify`]: the pool before the first reconcile of a restart;
//! - [`lookups`], [`backoff`], [`views`].
//!
//! What happens to them is in four phases, each a view that borrows only
//! the parts it may touch (so the compiler checks the boundaries): client
//! requests ([`clients`]), the cloud side's reports ([`reports`]),
//! planning ([`plan`]: gather the input, let the pure planner
//! ([`placement`](super::placement)) decide, dispatch) and giving
//! back ([`give_back`]). This file owns the parts,
//! runs the loop and routes each message to its phase.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use log::{error, info};

use crate::metrics::{self, Stage};
use crate::pool::PoolState;
use crate::store::Record;
use eniip_cloud::CloudApi;
use eniip_protocol::core::{AllocError, Answer, Command, Envelope, ErrCode};
use eniip_util::sem::Semaphore;
use eniip_util::time::unix_ms;

use super::capacity::Capacity;
use super::drain::{self, Drain};
use super::forecast::{Clock, Forecast};
use super::idle_target::{IdleTargets, SurplusWatch};
use super::mailbox::{Event, Request};
use super::vswitch_choice::VSwitches;
use super::worker::WorkerConfig;
use super::{AllocatorOptions, Fatal, Journal, Snapshot};

mod backoff;
mod clients;
mod combine;
mod demand;
mod durable;
mod give_back;
mod inflight;
mod intent;
mod lookups;
mod outlook;
mod plan;
mod reconcile;
mod reports;
mod surge;
mod threads;
mod verify;
mod views;
mod vswstate;
mod workers;

use backoff::{Backoff, FreeBackoff};
use clients::Clients;
pub(super) use combine::{run, Combiner, Held};
use demand::{Ask, Demand};
use durable::Durable;
use give_back::Maintenance;
use inflight::InFlight;
use lookups::Lookups;
use outlook::Outlook;
use plan::Planning;
use reconcile::Changes;
use reports::Reports;
use surge::Surge;
use threads::Threads;
use verify::Verification;
use vswstate::VswState;
use workers::Workers;

/// How soon a waiter that could not be planned is planned again.
const REPLAN: Duration = Duration::from_millis(100);

/// A gap in arriving requests this long ends a create's aggregation early
/// (a burst arrives within milliseconds; a lone first pod should not wait
/// the whole window).
const CREATE_QUIET: Duration = Duration::from_millis(50);

type Reply = eniip_protocol::core::Reply;

/// Where the actor sends: its helpers' reports (to itself), fatal errors
/// (to the daemon) and internal requests (its helpers' own, to itself).
pub(super) struct Senders {
    /// Reports of workers, ENI operations, lookups and probes.
    pub(super) events: Sender<Event>,
    /// The allocator cannot go on.
    pub(super) fatal: Sender<Fatal>,
    /// Requests its helper threads make of it (an audit's snapshots).
    pub(super) requests: Sender<Request>,
}

/// The parts, and what the loop itself keeps.
pub(super) struct Actor {
    opts: Arc<AllocatorOptions>,
    cap: Capacity,
    pool: PoolState,
    demand: Demand,
    surge: Surge,
    idle_target: IdleTargets,
    /// Brings the pool check forward for a surplus no pod will take.
    surplus: SurplusWatch,
    vsw: VswState,
    inflight: InFlight,
    workers: Workers,
    threads: Threads,
    durable: Durable,
    lookups: Lookups,
    changes: Changes,
    verification: Verification,
    pool_backoff: Backoff,
    shed_backoff: Backoff,
    free_backoff: FreeBackoff,
    set_use: super::sg_sets::SetUse,
    fatal_tx: Sender<Fatal>,
    next_maintenance: Instant,
    config_view: Vec<(String, String)>,
    stopping: bool,
    /// The exhaustion forecast and its clock.
    forecast: Forecast,
    clock: Clock,
    /// Whether the node drains (it owns the pool sizes set aside).
    drain: Drain,
    /// When the actor's thread wakes next unless a message comes: a
    /// combining client that needs it sooner nudges it.
    planned_wake: Instant,
}

impl Actor {
    /// The actor over `pool`; ENI slots as the capacity allows, ENI
    /// operations within `op_sem` (shared with the maintenance thread).
    pub(super) fn new(
        opts: Arc<AllocatorOptions>,
        cloud: Arc<dyn CloudApi>,
        journal: Arc<dyn Journal>,
        pool: PoolState,
        op_sem: Semaphore,
        senders: Senders,
    ) -> Actor {
        let Senders {
            events: events_tx,
            fatal: fatal_tx,
            requests: requests_tx,
        } = senders;
        let eni_sem = Semaphore::new(opts.capacity.usable_enis);
        let mut switches = VSwitches::new(opts.vswitches.clone(), opts.vswitch_policy);
        switches.set_free(opts.vswitch_free.iter().cloned(), u64::MAX);
        let mut pool = pool;
        pool.sg_sets_mut().set_default(opts.default_set());
        let now = Instant::now();
        let worker_config = WorkerConfig {
            window: opts.aggregation_window,
            max_per_call: opts.max_ips_per_call,
            dual: opts.dual,
            prefix_mode: opts.capacity.prefix_mode,
            metadata_wait: opts.metadata_wait,
        };
        Actor {
            cap: opts.capacity,
            config_view: opts.config_view.clone(),
            vsw: VswState::new(
                switches,
                opts.capacity.prefix_mode,
                opts.max_ips_per_call,
                now,
            )
            .dual_stack(opts.dual),
            inflight: InFlight::new(eni_sem, op_sem, pool.enis().iter().map(|e| e.id())),
            workers: Workers::new(Arc::clone(&cloud), worker_config, events_tx.clone()),
            threads: Threads::new(cloud, events_tx, requests_tx),
            durable: Durable::new(journal, fatal_tx.clone()),
            lookups: Lookups::default(),
            changes: Changes::default(),
            verification: Verification::default(),
            pool_backoff: Backoff::new(opts.pool_backoff_max),
            shed_backoff: Backoff::new(opts.pool_backoff_max),
            free_backoff: FreeBackoff::default(),
            set_use: super::sg_sets::SetUse::default(),
            next_maintenance: now,
            pool,
            demand: Demand::with_default_set(opts.default_set()),
            surge: Surge::default(),
            forecast: Forecast::default(),
            clock: Clock::new(),
            drain: Drain::default(),
            idle_target: IdleTargets::new(opts.adaptive_pool, opts.pool_check_interval, now),
            surplus: SurplusWatch::new(opts.pool_check_interval),
            opts,
            fatal_tx,
            stopping: false,
            planned_wake: now,
        }
        .with_drain()
    }

    /// Draining from the start when the node was when it stopped.
    fn with_drain(mut self) -> Actor {
        if self.opts.draining {
            self.drain.start(&mut self.cap);
            info!("the node is draining (eniipctl drain before the restart): no new allocation; eniipctl undrain ends it");
        }
        self
    }

    /// After a restart served from the state files (`first_reconcile` in
    /// the options): unverified until the first reconcile, which `kick`
    /// asks for early.
    pub(super) fn with_first_reconcile(mut self, kick: Sender<()>) -> Actor {
        if self.opts.first_reconcile.is_some() {
            self.verification = Verification::until_first_reconcile(kick);
        }
        self
    }

    fn begin_stop(&mut self) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        for w in self.demand.drain() {
            w.fail(&AllocError::shutting_down(), false);
        }
        for r in self.verification.drain_audits() {
            let _ = r.send(Err(AllocError::shutting_down()));
        }
        info!(
            "allocator stopped: {} ENI operation(s) still in flight are abandoned",
            self.inflight.len()
        );
    }

    /// A phase could not start a thread it needed: the allocator stops.
    fn or_fatal(&mut self, r: Result<(), Fatal>) {
        if let Err(f) = r {
            error!("{}", f.message);
            let _ = self.fatal_tx.try_send(f);
            self.begin_stop();
        }
    }

    fn next_wakeup(&self, now: Instant) -> Instant {
        let demand = self
            .demand
            .next_wakeup(now, self.opts.aggregation_window, REPLAN);
        let quiet_ends = self
            .demand
            .last_unplanned_arrival()
            .map(|t| t + CREATE_QUIET)
            .filter(|t| *t > now);
        let expiry = self
            .pool
            .next_expiry()
            .map(|ms| now + Duration::from_millis(ms.saturating_sub(unix_ms())));
        [
            self.vsw.next_wakeup(now, unix_ms()),
            demand,
            quiet_ends,
            expiry,
            self.pool_backoff.ends_after(now),
            self.shed_backoff.ends_after(now),
        ]
        .into_iter()
        .flatten()
        .fold(self.next_maintenance, Instant::min)
        .max(now + Duration::from_millis(1))
    }

    /// Everything that follows a change: holds, deadlines, maintenance,
    /// serving and planning.
    fn step(&mut self, now: Instant) {
        if self.stopping {
            return;
        }
        self.threads.prune();
        if let Some(ids) = self.vsw.probe_due(now, unix_ms()) {
            self.threads.probe(ids);
        }
        for id in self.pool.drop_empty_gone() {
            info!("{id} is forgotten: the last address held on it was released");
        }
        // The sets given, changed or dropped, on disk before any owner
        // served from them is answered (the journal keeps order).
        let sets = super::sg_sets::unrecorded(&mut self.pool);
        self.durable.write(sets);
        let freed = self.pool.settle(unix_ms());
        self.durable.write(
            freed
                .into_iter()
                .map(|ipv4| Record::ClearHold { ipv4 })
                .collect(),
        );
        self.demand.expire(now, self.opts.alloc_timeout);
        let verified = self.verification.verified();
        if now >= self.next_maintenance {
            if verified {
                let done = self.maintenance().maintain(now);
                self.or_fatal(done);
                self.surplus.checked(self.pool.idle_count(), now);
            }
            let jitter = eniip_util::rand::jitter(0.2);
            self.next_maintenance = now + self.opts.pool_check_interval.mul_f64(jitter);
        }
        if self.outlook().retire_ready() == Some(false) {
            // Something is still to give back: check again soon.
            self.next_maintenance = self.next_maintenance.min(now + drain::DRAIN_PASS);
        }
        self.clients().serve_waiters();
        if self.surge.observe(now, self.demand.waiting() > 0) {
            info!(
                "the pool ran dry again within {}s of its last refill: calls carry addresses beyond the shortfall, up to max_pool_size={} idle",
                surge::SURGE_GAP.as_secs(),
                self.cap.max_idle
            );
        }
        if verified && !self.stopping {
            let planned = self.planning().plan(now);
            self.or_fatal(planned);
        }
        if verified && !self.drain.on() {
            // A surplus no pod will take goes back soon, not at the next
            // regular pool check.
            let idle = self.pool.idle_count();
            let untaken = self
                .idle_target
                .untaken(now, idle, self.cap.min_idle, self.cap.max_idle);
            if let Some(due) = self.surplus.observe(now, idle, untaken) {
                self.next_maintenance = self.next_maintenance.min(due);
            }
        }
    }

    // ---- the phases ----------------------------------------------------

    fn clients(&mut self) -> Clients<'_> {
        Clients {
            opts: &self.opts,
            cap: &self.cap,
            pool: &mut self.pool,
            demand: &mut self.demand,
            durable: &self.durable,
            verification: &mut self.verification,
            lookups: &self.lookups,
            threads: &mut self.threads,
            vsw: &self.vsw,
            next_maintenance: &mut self.next_maintenance,
            stopping: self.stopping,
        }
    }

    fn reports(&mut self) -> Reports<'_> {
        Reports {
            opts: &self.opts,
            pool: &mut self.pool,
            demand: &mut self.demand,
            vsw: &mut self.vsw,
            inflight: &mut self.inflight,
            workers: &mut self.workers,
            threads: &mut self.threads,
            changes: &mut self.changes,
            pool_backoff: &mut self.pool_backoff,
            shed_backoff: &mut self.shed_backoff,
            free_backoff: &mut self.free_backoff,
            stopping: self.stopping,
            restoring: !self.verification.verified(),
        }
    }

    fn planning(&mut self) -> Planning<'_> {
        Planning {
            opts: &self.opts,
            cap: &self.cap,
            pool: &mut self.pool,
            demand: &mut self.demand,
            vsw: &mut self.vsw,
            inflight: &mut self.inflight,
            workers: &self.workers,
            threads: &mut self.threads,
            surge: &mut self.surge,
            pool_backoff: &self.pool_backoff,
            idle_target: &self.idle_target,
        }
    }

    fn outlook(&mut self) -> Outlook<'_> {
        Outlook {
            opts: &self.opts,
            cap: &mut self.cap,
            pool: &self.pool,
            demand: &self.demand,
            inflight: &self.inflight,
            durable: &self.durable,
            forecast: &mut self.forecast,
            clock: &self.clock,
            drain: &mut self.drain,
            next_maintenance: &mut self.next_maintenance,
        }
    }

    fn maintenance(&mut self) -> Maintenance<'_> {
        Maintenance {
            opts: &self.opts,
            cap: &self.cap,
            pool: &mut self.pool,
            demand: &self.demand,
            inflight: &mut self.inflight,
            workers: &self.workers,
            threads: &mut self.threads,
            surge: &mut self.surge,
            idle_keep: self
                .idle_target
                .keep(Instant::now(), self.cap.min_idle, self.cap.max_idle),
            changes: &mut self.changes,
            shed_backoff: &self.shed_backoff,
            free_backoff: &self.free_backoff,
            set_use: &mut self.set_use,
        }
    }

    // ---- messages ------------------------------------------------------

    /// [`on_command`](Self::on_command), its stages measured when it
    /// changes the state (`eniipd_request_stage_seconds`).
    fn on_timed_command(&mut self, env: Envelope) {
        if !env.command.is_mutating() {
            return self.on_command(env);
        }
        let taken = Instant::now();
        metrics::record_stage(Stage::ToActor, (taken - env.sent).as_secs_f64());
        self.on_command(env);
        metrics::record_stage(Stage::Actor, taken.elapsed().as_secs_f64());
    }

    /// A client's command: the one place where each verb is answered.
    fn on_command(&mut self, env: Envelope) {
        let Envelope {
            command,
            started,
            reply,
            ..
        } = env;
        let answer = match command {
            Command::Alloc { owner, .. }
                if self.drain.on() && self.pool.allocation(&owner).is_none() =>
            {
                crate::metrics::record_alloc("draining", started.elapsed().as_secs_f64());
                log::debug!("alloc for {owner} refused: the node is draining");
                Err(AllocError::draining())
            }
            Command::Alloc {
                owner,
                sandbox,
                prefer,
                attach,
                intent,
            } => {
                let mut intent = intent;
                super::sg_sets::normalize(&mut intent, self.opts.default_set().as_ref());
                if self.pool.allocation(&owner).is_none() {
                    // A new allocation: the rate the idle target follows.
                    self.idle_target
                        .allocated(intent.security_groups.as_ref(), Instant::now());
                }
                let ask = Ask {
                    owner,
                    sandbox,
                    prefer,
                    intent,
                    reply,
                    started,
                    deadline: started + self.opts.alloc_timeout,
                };
                return self.clients().alloc(ask, attach);
            }
            Command::Release {
                owner,
                sandbox,
                gen,
            } => {
                if let Some(a) = self.pool.allocation(&owner) {
                    let set = a.intent.security_groups.clone();
                    self.idle_target.released(set.as_ref(), Instant::now());
                }
                return self.clients().release(owner, sandbox, gen, reply);
            }
            Command::Gc { owner_prefix, keep } => {
                return self.clients().gc(&owner_prefix, &keep, reply)
            }
            Command::Eni { eni } => return self.clients().eni(&eni, reply),
            Command::Audit => return self.clients().audit(reply),
            Command::Show { owner } => self
                .pool
                .allocation_with_eni(&owner)
                .map(|(a, eni)| Answer::Allocation(Box::new(a), eni))
                .ok_or_else(|| {
                    AllocError::new(ErrCode::NotFound, format!("{owner} holds no address"))
                }),
            Command::List => Ok(Answer::List(crate::pool::views::list(&self.pool))),
            Command::Status => Ok(Answer::Status(self.status_counts())),
            Command::Enis => Ok(Answer::Enis(views::eni_entries(
                &self.pool,
                &self.vsw,
                &self.inflight,
                self.cap.prefix_mode,
                unix_ms(),
            ))),
            Command::Capacity => Ok(Answer::Capacity(self.outlook().ceilings())),
            Command::Drain(on) => return self.outlook().set_drain(on, reply),
            Command::Metrics => Ok(Answer::Metrics(crate::metrics::render(&self.gauges()))),
            Command::Config => Ok(Answer::Config(self.config_view.clone())),
        };
        let _ = reply.send(answer);
    }

    /// Internal requests: the daemon's and the allocator's own helpers'.
    fn on_request(&mut self, r: Request) {
        match r {
            Request::Snapshot(reply) => {
                let _ = reply.send(self.snapshot());
            }
            Request::KnownEnis(reply) => {
                let mut ids: Vec<String> = self
                    .pool
                    .enis()
                    .iter()
                    .map(|e| e.id().to_string())
                    .collect();
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
                self.drain
                    .reload(&mut self.cap, capacity.min_idle, capacity.max_idle);
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
                seen,
                teardown,
                reply,
            } => self
                .clients()
                .reap(&owner, sandbox, &seen, teardown, reply.into()),
        }
    }

    /// A report of the cloud side; after the first reconcile of a
    /// restart, the pool is verified and the audits held for it start.
    fn on_event(&mut self, e: Event) {
        let e = match e {
            Event::ForecastTick { at, read } => {
                // The free counts read go where every read of them goes.
                match self.outlook().tick(at, read) {
                    Some(counts) => Event::VSwitchFree(counts),
                    None => return,
                }
            }
            e => e,
        };
        let reconcile = matches!(e, Event::Reconcile { .. });
        // A top-up of the pool's own that came: how long a refill takes.
        let refill = match &e {
            Event::Assigned {
                tickets,
                error: None,
                ..
            } => self.demand.pool_asked_for(tickets, Instant::now()),
            _ => None,
        };
        let done = self.reports().on_event(e);
        if let Some(lead) = refill {
            self.idle_target.refilled(lead);
        }
        self.or_fatal(done);
        if !reconcile {
            return;
        }
        if let Some(audits) = self.verification.reconciled() {
            info!(
                "the pool is verified against the OpenAPI: {} address(es) on {} ENI(s), {} waiter(s) served from now on",
                self.pool.ips().len(),
                self.pool.enis().len(),
                self.demand.waiting()
            );
            for reply in audits {
                self.clients().audit(reply);
            }
        }
    }

    // ---- views ---------------------------------------------------------

    fn status_counts(&mut self) -> eniip_protocol::core::StatusCounts {
        let mut c = crate::pool::views::counts(&self.pool);
        c.pending = self.demand.pending();
        c.capacity = self.cap.total_ips;
        let mut outlook = self.outlook();
        c.exhaustion = outlook.soonest();
        c.draining = outlook.retire_ready();
        c
    }

    /// A copy of what `audit` compares with the cloud.
    fn snapshot(&self) -> Snapshot {
        let (creating, freeing) = self.inflight.creating_and_freeing();
        Snapshot {
            pool: self.pool.clone(),
            creating,
            freeing,
            waiters: self.demand.waiting(),
        }
    }

    /// The metric gauges, counted where the state lives (no copy of it).
    fn gauges(&self) -> crate::metrics::Gauges {
        crate::metrics::Gauges {
            ips_by_state: crate::pool::views::counts_by_state(&self.pool),
            enis: self.pool.enis().len() as u64,
            enis_by_set: super::sg_sets::enis_by_set(&self.pool),
            capacity: self.cap.total_ips as u64,
            pending: self.demand.pending() as u64,
            connections: crate::metrics::connections(),
            eni_ops: self.inflight.op_slots_used() as u64,
            inhibited_vswitches: self.vsw.switches().inhibited_count(unix_ms()) as u64,
            exhaustion: self.forecast.gauges(),
            eni_modes: if self.cap.prefix_mode {
                crate::pool::views::eni_modes(&self.pool)
            } else {
                Vec::new()
            },
        }
    }
}

#[cfg(test)]
mod tests;
