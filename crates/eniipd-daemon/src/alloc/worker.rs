//! The per-ENI worker: one OS thread per managed ENI.
//!
//! It waits on its bounded backlog (capacity 10, or 10 x 16 in prefix
//! mode) and its control channel. When a unit of demand arrives it
//! aggregates more until the oldest client demand in the batch has
//! waited the aggregation window (300 ms by default) since its client
//! asked, stopping early once it has `max_ips_per_call` units (in prefix
//! mode: enough for `max_ips_per_call` /28s). The planner marks the last
//! unit of each batch it queues ([`Origin`]): a top-up the pool planned
//! for itself, and client demand that has waited its window already (in
//! the actor, for room in this backlog while the last call ran), is
//! asked once its batch is whole and no unit has come for 50 ms, instead
//! of waiting a window more (the top-ups of one burst of allocations
//! still share a call). Then it asks for all of them in ONE
//! AssignPrivateIpAddresses call (paired with AssignIpv6Addresses in dual
//! stack; with `Ipv4PrefixCount` for prefix units), waits (bounded) for
//! metadata to show single addresses, and reports the outcome for exactly
//! the tickets it took, on the actor's bounded event channel. Unlike the
//! seed, a failure is reported once for the batch with the ticket ids, so
//! the actor's pending count for the ENI cannot drift. A prefix call
//! brings 16 addresses per /28: the surplus over the tickets becomes idle.
//!
//! Dual stack with a /80 (issue 32): the ENI's addresses carve their IPv6
//! from it, so no IPv6 call follows the IPv4 one. An ENI that has none
//! when a unit asks for one gets it first, with one AssignIpv6Addresses
//! (`Ipv6PrefixCount=1`) before the IPv4 call, and only once: the worker
//! remembers it (units planned before it came still ask). A refused /80
//! fails the call before any IPv4 is asked, and the actor plans its
//! tickets again with single IPv6 addresses.
//!
//! Unassigns for this ENI go through the same thread, so the cloud never
//! sees two operations on one ENI at once from us (`Operation.Conflict`).
//! The thread ends when the actor drops its handle.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, select, unbounded, Receiver, Sender, TrySendError};
use log::{debug, warn};

use eniip_cloud::{wait, CloudApi, CloudError, CloudErrorKind, Ipv4Prefix, Ipv6Prefix};

use super::mailbox::{Event, Origin, TicketId, Unit};
use super::prefix_mode::{Kind, V6From, PER_PREFIX};

/// A pool's batch, whole, still takes what comes this soon after its
/// last unit (within the window): the top-ups of allocations that came
/// in one burst go in one call.
const POOL_QUIET: Duration = Duration::from_millis(50);

/// Backlog capacity of every ENI (the seed's `maxIPBacklog`); prefix mode
/// multiplies it by the 16 addresses of a /28.
pub(crate) const BACKLOG: usize = 10;

/// Tunables of a worker.
#[derive(Debug, Clone)]
pub(crate) struct WorkerConfig {
    /// How long to gather demand after the first unit.
    pub(crate) window: Duration,
    /// Addresses per call.
    pub(crate) max_per_call: usize,
    /// Pair every IPv4 with an IPv6.
    pub(crate) dual: bool,
    /// Prefix mode: the backlog holds units for `max_per_call` /28s.
    pub(crate) prefix_mode: bool,
    /// How long to wait for metadata to show new addresses.
    pub(crate) metadata_wait: Duration,
}

enum Control {
    Unassign {
        v4: Vec<Ipv4Addr>,
        v6: Vec<Ipv6Addr>,
    },
    UnassignPrefixes(Vec<Ipv4Prefix>),
}

/// The actor's handle on a worker. Dropping it stops the worker after the
/// batch in flight.
#[derive(Debug)]
pub(crate) struct WorkerHandle {
    backlog: Sender<Unit>,
    capacity: usize,
    /// Addresses one call may ask when fewer than `max_per_call` (0: no
    /// cap), set by the actor for a vswitch near exhaustion.
    call_cap: Arc<AtomicUsize>,
    /// Set by the actor when the cloud no longer shows the ENI's /80 (and
    /// it has no other): read by the worker before its next call.
    v6_gone: Arc<AtomicBool>,
    control: Sender<Control>,
    join: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Control")
    }
}

impl WorkerHandle {
    /// Caps the addresses one call asks (`None`: `max_per_call`).
    pub(crate) fn set_call_cap(&self, cap: Option<usize>) {
        self.call_cap.store(cap.unwrap_or(0), Ordering::Relaxed);
    }

    /// The cloud no longer shows the ENI's /80 (and it has no other): the
    /// worker forgets it holds one before any unit submitted after this,
    /// so it asks a new one (or single IPv6) instead of /28s that could
    /// never be paired.
    pub(crate) fn v6_prefix_gone(&self) {
        self.v6_gone.store(true, Ordering::SeqCst);
    }

    /// Free places in the backlog.
    pub(crate) fn backlog_free(&self) -> usize {
        self.capacity.saturating_sub(self.backlog.len())
    }

    /// Queues a unit; false if the backlog is full (the unit stays
    /// unplanned; nothing is lost).
    pub(crate) fn try_submit(&self, unit: Unit) -> bool {
        match self.backlog.try_send(unit) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
        }
    }

    /// Asks the worker to unassign addresses (at most 10 per call).
    pub(crate) fn unassign(&self, v4: Vec<Ipv4Addr>, v6: Vec<Ipv6Addr>) -> bool {
        self.control.send(Control::Unassign { v4, v6 }).is_ok()
    }

    /// Asks the worker to give whole /28 prefixes back (at most 10 per
    /// call).
    pub(crate) fn unassign_prefixes(&self, prefixes: Vec<Ipv4Prefix>) -> bool {
        self.control
            .send(Control::UnassignPrefixes(prefixes))
            .is_ok()
    }

    /// Stops the worker and returns its thread, to join with a deadline.
    pub(crate) fn stop(mut self) -> Option<JoinHandle<()>> {
        self.join.take()
    }
}

/// Starts the worker thread of an ENI (`has_v6_prefix`: it holds a /80).
pub(crate) fn spawn(
    (eni, mac, has_v6_prefix): (String, String, bool),
    cloud: Arc<dyn CloudApi>,
    cfg: WorkerConfig,
    events: Sender<Event>,
) -> io::Result<WorkerHandle> {
    let capacity = if cfg.prefix_mode {
        BACKLOG * PER_PREFIX
    } else {
        BACKLOG
    };
    let (backlog_tx, backlog_rx) = bounded(capacity);
    let (control_tx, control_rx) = unbounded();
    let call_cap = Arc::new(AtomicUsize::new(0));
    let cap = Arc::clone(&call_cap);
    let v6_gone = Arc::new(AtomicBool::new(false));
    let inbox = Inbox {
        backlog: backlog_rx,
        control: control_rx,
        call_cap: cap,
        v6_gone: Arc::clone(&v6_gone),
    };
    let join = std::thread::Builder::new()
        .name(format!("eni-{}", eni.trim_start_matches("eni-")))
        .stack_size(256 * 1024)
        .spawn(move || {
            let mut on = OnEni {
                eni: &eni,
                mac: &mac,
                has_v6_prefix,
            };
            run(&mut on, &*cloud, &cfg, &inbox, &events);
        })?;
    Ok(WorkerHandle {
        backlog: backlog_tx,
        capacity,
        call_cap,
        v6_gone,
        control: control_tx,
        join: Some(join),
    })
}

/// What the actor sends a worker: units, control, the call cap.
struct Inbox {
    backlog: Receiver<Unit>,
    control: Receiver<Control>,
    call_cap: Arc<AtomicUsize>,
    v6_gone: Arc<AtomicBool>,
}

/// The ENI a worker serves, and what it knows of it.
struct OnEni<'a> {
    eni: &'a str,
    mac: &'a str,
    /// It holds a /80 (the actor said so at start or in a unit, or this
    /// worker got it): a unit asking a new one asks nothing.
    has_v6_prefix: bool,
}

fn run(
    on: &mut OnEni<'_>,
    cloud: &dyn CloudApi,
    cfg: &WorkerConfig,
    inbox: &Inbox,
    events: &Sender<Event>,
) {
    let eni = on.eni;
    let (backlog, control, call_cap) = (&inbox.backlog, &inbox.control, &*inbox.call_cap);
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
                Ok(Control::UnassignPrefixes(prefixes)) => {
                    let event = unassign_prefixes(cloud, eni, &prefixes);
                    if events.send(event).is_err() {
                        return;
                    }
                }
                Err(_) => break,
            },
            recv(backlog) -> first => match first {
                Ok(u) => {
                    if inbox.v6_gone.swap(false, Ordering::SeqCst) {
                        on.has_v6_prefix = false;
                    }
                    let (prefix, single) = gather(u, backlog, cfg);
                    for units in prefix.chunks(cfg.max_per_call * PER_PREFIX) {
                        let event = assign_prefixes(cloud, on, cfg, units);
                        if events.send(event).is_err() {
                            return;
                        }
                    }
                    let per_call = match call_cap.load(Ordering::Relaxed) {
                        0 => cfg.max_per_call,
                        c => c.min(cfg.max_per_call),
                    };
                    for units in single.chunks(per_call.max(1)) {
                        let event = assign(cloud, on, cfg, units);
                        if events.send(event).is_err() {
                            return;
                        }
                    }
                }
                Err(_) => break,
            },
        }
    }
    debug!("worker for {eni} stopped");
}

/// Collects units within the window after the first, until there are
/// enough for one call of the first unit's kind (`max_per_call` addresses,
/// or `max_per_call` /28s); returns the prefix and the single units.
///
/// A pod's demand gathers until its oldest client has waited the window
/// (counted from the client's ask, not from this pickup: demand that
/// waited in the actor for backlog room, behind this worker's last call,
/// has gathered already). A batch of the pool's own top-up, and pod
/// demand past its window, close at the planner's last unit: they take
/// what is queued and what comes within [`POOL_QUIET`] of the last unit,
/// and wait no longer.
fn gather(first: Unit, backlog: &Receiver<Unit>, cfg: &WorkerConfig) -> (Vec<Unit>, Vec<Unit>) {
    let per_unit = |k: Kind| match k {
        Kind::Prefix => 1,
        Kind::Single => PER_PREFIX,
    };
    // Both kinds fill one budget: a call's worth of the first unit's kind.
    let budget = cfg.max_per_call * PER_PREFIX;
    let mut used = per_unit(first.kind);
    let (mut prefix, mut single) = (Vec::new(), Vec::new());
    // When the oldest pod demand in the batch has waited the window, and
    // whether a planner's batch is whole.
    let (mut pods_until, mut closed): (Option<Instant>, bool) = (None, false);
    let mut push = |u: Unit| {
        match u.origin {
            Origin::Pod { since, last } => {
                let until = since + cfg.window;
                pods_until = Some(pods_until.map_or(until, |t| t.min(until)));
                closed |= last;
            }
            Origin::Pool { last } => closed |= last,
        }
        match u.kind {
            Kind::Prefix => prefix.push(u),
            Kind::Single => single.push(u),
        }
        (pods_until, closed)
    };
    let (mut pods, mut whole) = push(first);
    // No batch gathers longer than one window from its pickup.
    let deadline = Instant::now() + cfg.window;
    while used < budget {
        let now = Instant::now();
        let until = match pods {
            // Fresh pod demand: until its oldest has waited the window.
            Some(t) if t > now => t.min(deadline),
            // Whole: the next batch planned in the same burst rides along.
            _ if whole => deadline.min(now + POOL_QUIET),
            // The rest of the planner's batch is on its way.
            _ => deadline,
        };
        let Ok(u) = backlog.recv_deadline(until) else {
            break;
        };
        used += per_unit(u.kind);
        (pods, whole) = push(u);
    }
    (prefix, single)
}

/// The IPv6 side of a call, before its IPv4 one (dual stack): a unit of
/// an ENI known to hold a /80 says so; one asking a new /80 has it asked
/// here, unless the ENI has one by now. The /80 granted, or the refusal.
fn ask_v6_prefix(
    cloud: &dyn CloudApi,
    on: &mut OnEni<'_>,
    units: &[Unit],
) -> Result<Vec<Ipv6Prefix>, CloudError> {
    if units.iter().any(|u| u.v6 == Some(V6From::Prefix)) {
        on.has_v6_prefix = true;
    }
    if on.has_v6_prefix || !units.iter().any(|u| u.v6 == Some(V6From::NewPrefix)) {
        return Ok(Vec::new());
    }
    debug!("asking a /80 prefix of {} for its IPv6 addresses", on.eni);
    let got = cloud.assign_ipv6_prefixes(on.eni, 1)?;
    if got.is_empty() {
        return Err(CloudError::new(
            CloudErrorKind::Decode,
            "AssignIpv6Addresses",
            "one IPv6 /80 prefix was asked; the answer holds none",
        ));
    }
    on.has_v6_prefix = true;
    Ok(got)
}

/// An Assigned event for `units` that asked nothing of the IPv4 side: the
/// /80 was refused (`v6_refused`) or the call could not be made.
fn not_asked(
    on: &OnEni<'_>,
    units: &[Unit],
    prefixes: bool,
    v6_refused: bool,
    error: CloudError,
) -> Event {
    Event::Assigned {
        eni: on.eni.to_string(),
        tickets: units.iter().map(|u| u.ticket).collect(),
        prefixes: prefixes.then(Vec::new),
        v4: Vec::new(),
        v6: Vec::new(),
        v6_prefixes: Vec::new(),
        v6_refused,
        error: Some(error),
    }
}

/// One AssignPrivateIpAddresses with `Ipv4PrefixCount` for the /28s that
/// `units` need; every address of every prefix granted is reported. In
/// dual stack their IPv6 come from the ENI's /80 (asked first if it has
/// none): a /28 is never asked without one.
fn assign_prefixes(
    cloud: &dyn CloudApi,
    on: &mut OnEni<'_>,
    cfg: &WorkerConfig,
    units: &[Unit],
) -> Event {
    let eni = on.eni;
    let v6_prefixes = match cfg.dual {
        true => match ask_v6_prefix(cloud, on, units) {
            Ok(p) => p,
            Err(e) => return not_asked(on, units, true, true, e),
        },
        false => Vec::new(),
    };
    if cfg.dual && !on.has_v6_prefix {
        let e = CloudError::new(
            CloudErrorKind::Api,
            "AssignPrivateIpAddresses",
            format!("{eni} holds no IPv6 /80 to pair /28 prefixes with"),
        );
        return not_asked(on, units, true, false, e);
    }
    let tickets: Vec<TicketId> = units.iter().map(|u| u.ticket).collect();
    let n = tickets.len().div_ceil(PER_PREFIX);
    debug!(
        "asking {n} /28 prefix(es) of {eni} for {} address(es)",
        tickets.len()
    );
    let (prefixes, error) = match cloud.assign_ipv4_prefixes(eni, n) {
        Ok(p) => (p, None),
        Err(e) => (Vec::new(), Some(e)),
    };
    if error.is_none() && prefixes.len() != n {
        warn!(
            "{eni}: asked for {n} prefixes, the cloud assigned {}",
            prefixes.len()
        );
    }
    // Prefixes are read from the OpenAPI only (their metadata path is not
    // confirmed): nothing to wait for.
    let v4 = prefixes.iter().flat_map(|p| p.addresses()).collect();
    Event::Assigned {
        eni: eni.to_string(),
        tickets,
        prefixes: Some(prefixes),
        v4,
        v6: Vec::new(),
        v6_prefixes,
        v6_refused: false,
        error,
    }
}

/// One AssignPrivateIpAddresses for `units`' single addresses; in dual
/// stack their IPv6 come from the ENI's /80 (asked first if a unit wants
/// one and it has none), else from one AssignIpv6Addresses.
fn assign(cloud: &dyn CloudApi, on: &mut OnEni<'_>, cfg: &WorkerConfig, units: &[Unit]) -> Event {
    let (eni, mac) = (on.eni, on.mac);
    let v6_prefixes = match cfg.dual {
        true => match ask_v6_prefix(cloud, on, units) {
            Ok(p) => p,
            Err(e) => return not_asked(on, units, false, true, e),
        },
        false => Vec::new(),
    };
    let tickets: Vec<TicketId> = units.iter().map(|u| u.ticket).collect();
    let n = tickets.len();
    debug!("asking {n} address(es) of {eni}");
    let mut v6 = Vec::new();
    let v4 = match cloud.assign_ipv4(eni, n) {
        Ok(v) => v,
        Err(error) => {
            return Event::Assigned {
                eni: eni.to_string(),
                tickets,
                prefixes: None,
                v4: Vec::new(),
                v6,
                v6_prefixes,
                v6_refused: false,
                error: Some(error),
            }
        }
    };
    let mut error = None;
    if cfg.dual && !v4.is_empty() && !on.has_v6_prefix {
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
        prefixes: None,
        v4,
        v6,
        v6_prefixes,
        v6_refused: false,
        error,
    }
}

/// Gives `items` back 10 per call through `call`, stopping at the first
/// refusal: those the cloud took back, and the refusal.
fn in_tens<T: Copy>(
    items: &[T],
    mut call: impl FnMut(&[T]) -> Result<(), CloudError>,
) -> (Vec<T>, Option<CloudError>) {
    let mut gone = Vec::new();
    for chunk in items.chunks(10) {
        if let Err(e) = call(chunk) {
            return (gone, Some(e));
        }
        gone.extend_from_slice(chunk);
    }
    (gone, None)
}

/// Gives whole /28 prefixes back, 10 per call. Reports the prefixes the
/// cloud took back, and their addresses.
fn unassign_prefixes(cloud: &dyn CloudApi, eni: &str, prefixes: &[Ipv4Prefix]) -> Event {
    let (gone, error) = in_tens(prefixes, |c| cloud.unassign_ipv4_prefixes(eni, c));
    debug!("{eni}: gave back {} /28 prefix(es)", gone.len());
    Event::Unassigned {
        eni: eni.to_string(),
        v4: prefixes.iter().flat_map(|p| p.addresses()).collect(),
        gone_v4: gone.iter().flat_map(|p| p.addresses()).collect(),
        gone_v6: Vec::new(),
        gone_prefixes: gone,
        error,
    }
}

/// Gives addresses back, IPv4 first: an IPv6 whose IPv4 is gone while
/// its own unassign failed is left unpaired (and retried later), never an
/// IPv4 whose IPv6 is gone. Reports exactly what the cloud took back.
fn unassign(cloud: &dyn CloudApi, eni: &str, v4: Vec<Ipv4Addr>, v6: &[Ipv6Addr]) -> Event {
    let (gone_v4, mut error) = in_tens(&v4, |c| cloud.unassign_ipv4(eni, c));
    let mut gone_v6 = Vec::new();
    if error.is_none() {
        (gone_v6, error) = in_tens(v6, |c| cloud.unassign_ipv6(eni, c));
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
        gone_prefixes: Vec::new(),
        error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(window: Duration) -> WorkerConfig {
        WorkerConfig {
            window,
            max_per_call: 10,
            dual: false,
            prefix_mode: false,
            metadata_wait: Duration::from_secs(1),
        }
    }

    fn unit(ticket: TicketId, origin: Origin) -> Unit {
        Unit {
            ticket,
            kind: Kind::Single,
            v6: None,
            origin,
        }
    }

    fn tickets(units: &[Unit]) -> Vec<TicketId> {
        units.iter().map(|u| u.ticket).collect()
    }

    /// A pod's unit whose client asked just now.
    fn fresh(last: bool) -> Origin {
        Origin::Pod {
            since: Instant::now(),
            last,
        }
    }

    /// Sends `u` once `rx` is empty (the batch was taken) and `after` more
    /// has passed.
    fn send_after_taken(
        tx: &crossbeam_channel::Sender<Unit>,
        rx: &Receiver<Unit>,
        after: Duration,
        u: Unit,
    ) -> JoinHandle<()> {
        let (tx, rx) = (tx.clone(), rx.clone());
        std::thread::spawn(move || {
            while !rx.is_empty() {
                std::thread::sleep(Duration::from_millis(5));
            }
            std::thread::sleep(after);
            tx.send(u).unwrap();
        })
    }

    #[test]
    fn a_pool_batch_closes_at_its_last_unit() {
        let (tx, rx) = bounded(BACKLOG);
        let pool = |last| Origin::Pool { last };
        for u in [
            unit(2, pool(false)),
            unit(3, pool(true)),
            unit(4, pool(true)),
        ] {
            tx.try_send(u).unwrap();
        }
        // A unit that comes a while after the batch was taken, within
        // the (long) window: a batch that gathered for the window would
        // take it too.
        let later = send_after_taken(&tx, &rx, Duration::from_secs(1), unit(99, pool(true)));
        // Queued before it closed: taken in the same call.
        let (_, single) = gather(unit(1, pool(false)), &rx, &cfg(Duration::from_secs(30)));
        assert_eq!(tickets(&single), [1, 2, 3, 4]);
        later.join().unwrap();
        assert_eq!(rx.try_recv().map(|u| u.ticket), Ok(99));
        // A pod's unit queued after a closed batch rides with it, and the
        // batch then gathers for the window like any pod's.
        tx.try_send(unit(6, fresh(true))).unwrap();
        let (_, single) = gather(unit(5, pool(true)), &rx, &cfg(Duration::from_millis(50)));
        assert_eq!(tickets(&single), [5, 6]);
    }

    #[test]
    fn pod_demand_gathers_for_the_window_up_to_a_call() {
        let (tx, rx) = bounded(BACKLOG * 2);
        // A closing pool unit among pods does not end their window.
        tx.try_send(unit(2, Origin::Pool { last: true })).unwrap();
        for t in 3..=12 {
            tx.try_send(unit(t, fresh(t == 12))).unwrap();
        }
        let (_, single) = gather(unit(1, fresh(false)), &rx, &cfg(Duration::from_secs(600)));
        // Stopped at max_per_call (10 units), not at the pool's unit.
        assert_eq!(tickets(&single), (1..=10).collect::<Vec<_>>());
        assert_eq!(rx.len(), 2);
    }

    #[test]
    fn fresh_pod_demand_gathers_past_its_batch_end() {
        // More clients may be on their way: the planner's batch being
        // whole does not end a fresh pod's window.
        let (tx, rx) = bounded(BACKLOG);
        tx.try_send(unit(2, fresh(true))).unwrap();
        let later = send_after_taken(&tx, &rx, Duration::from_millis(300), unit(3, fresh(true)));
        let (_, single) = gather(unit(1, fresh(false)), &rx, &cfg(Duration::from_secs(3)));
        later.join().unwrap();
        assert_eq!(tickets(&single), [1, 2, 3]);
    }

    #[test]
    fn demand_past_its_window_gathers_no_second_one() {
        // Its clients asked a window ago (it waited in the actor for room
        // in the backlog while the last call ran): once its batch is
        // whole it is asked, not held a window more from this pickup.
        let window = Duration::from_secs(2);
        let asked = Instant::now();
        std::thread::sleep(window);
        let old = |last| Origin::Pod { since: asked, last };
        let (tx, rx) = bounded(BACKLOG);
        tx.try_send(unit(2, old(false))).unwrap();
        tx.try_send(unit(3, old(true))).unwrap();
        let later = send_after_taken(&tx, &rx, Duration::from_secs(1), unit(9, fresh(true)));
        let (_, single) = gather(unit(1, old(false)), &rx, &cfg(window));
        later.join().unwrap();
        assert_eq!(tickets(&single), [1, 2, 3]);
        assert_eq!(rx.try_recv().map(|u| u.ticket), Ok(9));
        // Not yet whole: the rest of the planner's batch still rides.
        tx.try_send(unit(5, old(false))).unwrap();
        let rest = send_after_taken(&tx, &rx, Duration::from_millis(200), unit(6, old(true)));
        let (_, single) = gather(unit(4, old(false)), &rx, &cfg(window));
        rest.join().unwrap();
        assert_eq!(tickets(&single), [4, 5, 6]);
    }
}
