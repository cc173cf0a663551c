//! The per-ENI worker threads (see [`super::super::worker`]): the actor
//! queues tickets on them and asks them to give addresses back.
//!
//! Invariants: at most one worker per ENI; a worker taken out (its ENI
//! forgotten, or the allocator stopping) hands its thread back to be
//! joined, never dropped while it may still run; each worker's call cap is
//! the one its vswitch has now (set at start and whenever a cap changes).

use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::Sender;

use crate::pool::PoolState;
use eniip_cloud::{CloudApi, Ipv4Prefix};

use super::super::mailbox::{Event, Origin, TicketId, Unit};
use super::super::prefix_mode::{Kind, V6From};
use super::super::worker::{self, WorkerConfig, WorkerHandle};
use super::super::Joinable;
use super::vswstate::VswState;

/// The call cap of `eni`'s vswitch now (`None`: `max_per_call`).
pub(super) fn cap_of(pool: &PoolState, vsw: &VswState, eni: &str) -> Option<usize> {
    pool.eni(eni).and_then(|e| vsw.call_cap(e.vswitch()))
}

/// The workers, by ENI.
pub(super) struct Workers {
    by_eni: HashMap<String, WorkerHandle>,
    cloud: Arc<dyn CloudApi>,
    config: WorkerConfig,
    events: Sender<Event>,
}

impl Workers {
    pub(super) fn new(
        cloud: Arc<dyn CloudApi>,
        config: WorkerConfig,
        events: Sender<Event>,
    ) -> Workers {
        Workers {
            by_eni: HashMap::new(),
            cloud,
            config,
            events,
        }
    }

    /// Starts the worker of `eni` with its vswitch's call cap (and whether
    /// the ENI holds a /80); an ENI that has one keeps it.
    pub(super) fn start(
        &mut self,
        (eni, mac, has_v6_prefix): (&str, &str, bool),
        call_cap: Option<usize>,
    ) -> io::Result<()> {
        if self.by_eni.contains_key(eni) {
            return Ok(());
        }
        let h = worker::spawn(
            (eni.to_string(), mac.to_string(), has_v6_prefix),
            Arc::clone(&self.cloud),
            self.config.clone(),
            self.events.clone(),
        )?;
        h.set_call_cap(call_cap);
        self.by_eni.insert(eni.to_string(), h);
        Ok(())
    }

    /// Sets every worker's call cap: `cap_of(eni)`.
    pub(super) fn set_call_caps(&self, cap_of: impl Fn(&str) -> Option<usize>) {
        for (eni, w) in &self.by_eni {
            w.set_call_cap(cap_of(eni));
        }
    }

    /// Free places in `eni`'s backlog; `None` without a worker.
    pub(super) fn backlog_free(&self, eni: &str) -> Option<usize> {
        self.by_eni.get(eni).map(WorkerHandle::backlog_free)
    }

    /// Queues a ticket on `eni`'s worker, asked by `origin`; false if it
    /// has none or its backlog is full.
    pub(super) fn submit(
        &self,
        eni: &str,
        ticket: TicketId,
        (kind, v6): (Kind, Option<V6From>),
        origin: Origin,
    ) -> bool {
        let unit = Unit {
            ticket,
            kind,
            v6,
            origin,
        };
        self.by_eni.get(eni).is_some_and(|w| w.try_submit(unit))
    }

    /// Tells `eni`'s worker its /80 is gone (see
    /// [`WorkerHandle::v6_prefix_gone`]).
    pub(super) fn v6_prefix_gone(&self, eni: &str) {
        if let Some(w) = self.by_eni.get(eni) {
            w.v6_prefix_gone();
        }
    }

    /// Asks `eni`'s worker to give addresses back; false if it has none.
    pub(super) fn unassign(&self, eni: &str, v4: Vec<Ipv4Addr>, v6: Vec<Ipv6Addr>) -> bool {
        self.by_eni.get(eni).is_some_and(|w| w.unassign(v4, v6))
    }

    /// Asks `eni`'s worker to give whole /28s back; false if it has none.
    pub(super) fn unassign_prefixes(&self, eni: &str, prefixes: Vec<Ipv4Prefix>) -> bool {
        self.by_eni
            .get(eni)
            .is_some_and(|w| w.unassign_prefixes(prefixes))
    }

    /// Whether `eni` has a worker.
    pub(super) fn has(&self, eni: &str) -> bool {
        self.by_eni.contains_key(eni)
    }

    /// Stops `eni`'s worker (after its call in flight); its thread, to
    /// join.
    pub(super) fn stop(&mut self, eni: &str) -> Option<JoinHandle<()>> {
        self.by_eni.remove(eni)?.stop()
    }

    /// Stops every worker; their threads, to join.
    pub(super) fn stop_all(&mut self) -> Vec<Joinable> {
        self.by_eni
            .drain()
            .filter_map(|(eni, w)| w.stop().map(|h| (format!("worker of {eni}"), h)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::fake::FakeCloud;
    use std::time::Duration;

    fn workers() -> Workers {
        let (events, _) = crossbeam_channel::bounded(16);
        let config = WorkerConfig {
            window: Duration::from_millis(10),
            max_per_call: 10,
            dual: false,
            prefix_mode: false,
            metadata_wait: Duration::from_millis(10),
        };
        Workers::new(FakeCloud::new(4, 15, 1000), config, events)
    }

    #[test]
    fn one_worker_per_eni_and_a_stopped_one_is_joined() {
        let mut w = workers();
        w.start(("eni-1", "00:16:3e:00:00:01", false), None)
            .unwrap();
        w.start(("eni-1", "00:16:3e:00:00:01", false), None)
            .unwrap();
        w.start(("eni-2", "00:16:3e:00:00:02", false), Some(2))
            .unwrap();
        assert_eq!(w.by_eni.len(), 2);
        assert!(w.has("eni-1") && !w.has("eni-3"));
        assert!(w.backlog_free("eni-1").is_some_and(|n| n > 0));
        assert_eq!(w.backlog_free("eni-3"), None);
        let pod = Origin::Pod {
            since: std::time::Instant::now(),
            last: true,
        };
        assert!(!w.submit("eni-3", 1, (Kind::Single, None), pod));
        assert!(!w.unassign("eni-3", Vec::new(), Vec::new()));
        let h = w.stop("eni-1").expect("a running worker's thread");
        h.join().unwrap();
        assert!(!w.has("eni-1"));
        assert!(w.stop("eni-1").is_none());
        let left = w.stop_all();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].0, "worker of eni-2");
        for (_, h) in left {
            h.join().unwrap();
        }
    }
}
