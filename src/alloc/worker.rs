//! The per-ENI worker: one OS thread per managed ENI.
//!
//! It waits on its bounded backlog (capacity 10) and its control channel.
//! When a unit of demand arrives it aggregates more for the aggregation
//! window (300 ms by default), stopping early once it has
//! `max_ips_per_call`, then asks for all of them in ONE
//! AssignPrivateIpAddresses call (paired with AssignIpv6Addresses in dual
//! stack), waits (bounded) for metadata to show them, and reports the
//! outcome for exactly the tickets it took, on the actor's bounded event
//! channel. Unlike the seed, a failure is reported once for the batch with
//! the ticket ids, so the actor's pending count for the ENI cannot drift.
//!
//! Unassigns for this ENI go through the same thread, so the cloud never
//! sees two operations on one ENI at once from us (`Operation.Conflict`).
//! The thread ends when the actor drops its handle.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{
    bounded, select, unbounded, Receiver, RecvTimeoutError, Sender, TrySendError,
};
use log::{debug, warn};

use crate::cloud::{wait, CloudApi, CloudErrorKind};

use super::msg::{Event, TicketId};

/// Backlog capacity of every ENI (the seed's `maxIPBacklog`).
pub const BACKLOG: usize = 10;

/// Tunables of a worker.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// How long to gather demand after the first unit.
    pub window: Duration,
    /// Addresses per call.
    pub max_per_call: usize,
    /// Pair every IPv4 with an IPv6.
    pub dual: bool,
    /// How long to wait for metadata to show new addresses.
    pub metadata_wait: Duration,
}

enum Control {
    Unassign {
        v4: Vec<Ipv4Addr>,
        v6: Vec<Ipv6Addr>,
    },
}

/// The actor's handle on a worker. Dropping it stops the worker after the
/// batch in flight.
#[derive(Debug)]
pub struct WorkerHandle {
    backlog: Sender<TicketId>,
    control: Sender<Control>,
    join: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Control")
    }
}

impl WorkerHandle {
    /// Free places in the backlog.
    pub fn backlog_free(&self) -> usize {
        BACKLOG.saturating_sub(self.backlog.len())
    }

    /// Queues a ticket; false if the backlog is full (the unit stays
    /// unplanned; nothing is lost).
    pub fn try_submit(&self, t: TicketId) -> bool {
        match self.backlog.try_send(t) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
        }
    }

    /// Asks the worker to unassign addresses (at most 10 per call).
    pub fn unassign(&self, v4: Vec<Ipv4Addr>, v6: Vec<Ipv6Addr>) -> bool {
        self.control.send(Control::Unassign { v4, v6 }).is_ok()
    }

    /// Stops the worker and returns its thread, to join with a deadline.
    pub fn stop(mut self) -> Option<JoinHandle<()>> {
        self.join.take()
    }
}

/// Starts the worker thread of an ENI.
pub fn spawn(
    eni: String,
    mac: String,
    cloud: Arc<dyn CloudApi>,
    cfg: WorkerConfig,
    events: Sender<Event>,
) -> io::Result<WorkerHandle> {
    let (backlog_tx, backlog_rx) = bounded(BACKLOG);
    let (control_tx, control_rx) = unbounded();
    let join = std::thread::Builder::new()
        .name(format!("eni-{}", eni.trim_start_matches("eni-")))
        .stack_size(256 * 1024)
        .spawn(move || run(&eni, &mac, &*cloud, &cfg, &backlog_rx, &control_rx, &events))?;
    Ok(WorkerHandle {
        backlog: backlog_tx,
        control: control_tx,
        join: Some(join),
    })
}

fn run(
    eni: &str,
    mac: &str,
    cloud: &dyn CloudApi,
    cfg: &WorkerConfig,
    backlog: &Receiver<TicketId>,
    control: &Receiver<Control>,
    events: &Sender<Event>,
) {
    debug!("worker for {eni} started");
    loop {
        select! {
            recv(control) -> msg => match msg {
                Ok(Control::Unassign { v4, v6 }) => {
                    let event = unassign(cloud, eni, v4, &v6);
                    if events.send(event).is_err() {
                        return;
                    }
                }
                Err(_) => break,
            },
            recv(backlog) -> first => match first {
                Ok(t) => {
                    let tickets = gather(t, backlog, cfg);
                    let event = assign(cloud, eni, mac, cfg, tickets);
                    if events.send(event).is_err() {
                        return;
                    }
                }
                Err(_) => break,
            },
        }
    }
    debug!("worker for {eni} stopped");
}

/// Collects up to `max_per_call` tickets within the window after the first.
fn gather(first: TicketId, backlog: &Receiver<TicketId>, cfg: &WorkerConfig) -> Vec<TicketId> {
    let mut tickets = vec![first];
    let deadline = Instant::now() + cfg.window;
    while tickets.len() < cfg.max_per_call {
        match backlog.recv_deadline(deadline) {
            Ok(t) => tickets.push(t),
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
        }
    }
    tickets
}

fn assign(
    cloud: &dyn CloudApi,
    eni: &str,
    mac: &str,
    cfg: &WorkerConfig,
    tickets: Vec<TicketId>,
) -> Event {
    let n = tickets.len();
    debug!("asking {n} address(es) of {eni}");
    let mut v6 = Vec::new();
    let v4 = match cloud.assign_ipv4(eni, n) {
        Ok(v) => v,
        Err(error) => {
            return Event::Assigned {
                eni: eni.to_string(),
                tickets,
                v4: Vec::new(),
                v6,
                error: Some(error),
            }
        }
    };
    let mut error = None;
    if cfg.dual && !v4.is_empty() {
        match cloud.assign_ipv6(eni, v4.len()) {
            Ok(v) => v6 = v,
            Err(e) => error = Some(e),
        }
    }
    if v4.len() != n {
        warn!(
            "{eni}: asked for {n} addresses, the cloud assigned {}",
            v4.len()
        );
    }
    let deadline = Instant::now() + cfg.metadata_wait;
    if let Err(e) = wait::wait_ips_present(cloud.metadata(), mac, &v4, &v6, deadline) {
        // The OpenAPI is the source of truth: the addresses are assigned.
        // Handing them out is right; metadata only lags.
        if e.kind == CloudErrorKind::Timeout {
            warn!(
                "{eni}: new addresses not yet in metadata after {:?}; using them anyway",
                cfg.metadata_wait
            );
        } else {
            warn!("{eni}: checking new addresses in metadata: {e}");
        }
    }
    Event::Assigned {
        eni: eni.to_string(),
        tickets,
        v4,
        v6,
        error,
    }
}

/// Gives addresses back, IPv4 first: an IPv6 whose IPv4 is gone while
/// its own unassign failed is left unpaired (and retried later), never an
/// IPv4 whose IPv6 is gone. Reports exactly what the cloud took back.
fn unassign(cloud: &dyn CloudApi, eni: &str, v4: Vec<Ipv4Addr>, v6: &[Ipv6Addr]) -> Event {
    let mut gone_v4 = Vec::new();
    let mut gone_v6 = Vec::new();
    let mut error = None;
    for chunk in v4.chunks(10) {
        match cloud.unassign_ipv4(eni, chunk) {
            Ok(()) => gone_v4.extend_from_slice(chunk),
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    if error.is_none() {
        for chunk in v6.chunks(10) {
            match cloud.unassign_ipv6(eni, chunk) {
                Ok(()) => gone_v6.extend_from_slice(chunk),
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
    }
    debug!(
        "{eni}: gave back {} IPv4 and {} IPv6 address(es)",
        gone_v4.len(),
        gone_v6.len()
    );
    Event::Unassigned {
        eni: eni.to_string(),
        v4,
        gone_v4,
        gone_v6,
        error,
    }
}
