//! The threads the actor starts besides the per-ENI workers: ENI
//! operations, audits, vswitch probes, ENI lookups, and workers that were
//! stopped (a forgotten ENI's worker ends after its call in flight). The
//! actor never calls the cloud itself; these do, and report back as
//! [`Event`]s (or answer their client directly).
//!
//! Invariant: every thread started or handed here is either still tracked
//! or was seen finished, so none is left running unjoined: at stop the
//! actor hands the tracked ones to the allocator, which joins them against
//! its one deadline.

use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::Sender;
use log::{debug, warn};

use eniip_cloud::CloudApi;
use eniip_util::sem::Permit;

use super::super::describe::StatusBatcher;
use super::super::eniops::{self, CreateJob};
use super::super::mailbox::{Event, Request};
use super::super::{AllocatorOptions, Joinable};
use super::Reply;

/// What the threads need, and the threads to join.
pub(super) struct Threads {
    cloud: Arc<dyn CloudApi>,
    batcher: Arc<StatusBatcher>,
    events: Sender<Event>,
    /// The actor's own channel, for the audit threads' snapshots.
    requests: Sender<Request>,
    tracked: Vec<Joinable>,
}

impl Threads {
    pub(super) fn new(
        cloud: Arc<dyn CloudApi>,
        events: Sender<Event>,
        requests: Sender<Request>,
    ) -> Threads {
        let batcher = Arc::new(StatusBatcher::new(
            Arc::clone(&cloud),
            Duration::from_millis(30),
        ));
        Threads {
            cloud,
            batcher,
            events,
            requests,
            tracked: Vec::new(),
        }
    }

    /// The cloud and the event channel, for a thread started elsewhere.
    pub(super) fn cloud_and_events(&self) -> (Arc<dyn CloudApi>, Sender<Event>) {
        (Arc::clone(&self.cloud), self.events.clone())
    }

    /// Starts `f` on a thread named `name` (what `ps` and panics show),
    /// tracked as `label` (what a late join logs).
    pub(super) fn spawn(
        &mut self,
        label: impl Into<String>,
        name: &str,
        f: impl FnOnce() + Send + 'static,
    ) -> io::Result<()> {
        let h = std::thread::Builder::new().name(name.into()).spawn(f)?;
        self.track(label, h);
        Ok(())
    }

    /// Tracks a thread started elsewhere.
    pub(super) fn track(&mut self, label: impl Into<String>, h: JoinHandle<()>) {
        self.tracked.push((label.into(), h));
    }

    /// Forgets the threads that have ended (nothing is left to join).
    pub(super) fn prune(&mut self) {
        self.tracked.retain(|(_, h)| !h.is_finished());
    }

    /// Every tracked thread, to join.
    pub(super) fn drain(&mut self) -> Vec<Joinable> {
        std::mem::take(&mut self.tracked)
    }

    /// Runs an ENI creation holding `permit` (see [`eniops`]).
    pub(super) fn create(&mut self, job: CreateJob, permit: Permit) -> io::Result<()> {
        let op = job.op;
        let h = eniops::spawn_create(
            job,
            Arc::clone(&self.cloud),
            Arc::clone(&self.batcher),
            self.events.clone(),
            permit,
        )?;
        self.track(format!("ENI create {op}"), h);
        Ok(())
    }

    /// Runs an ENI free holding `permit` (see [`eniops`]).
    pub(super) fn free(&mut self, eni: &str, instance_id: &str, permit: Permit) -> io::Result<()> {
        let h = eniops::spawn_free(
            eni.to_string(),
            instance_id.to_string(),
            Arc::clone(&self.cloud),
            self.events.clone(),
            permit,
        )?;
        self.track(format!("ENI free {eni}"), h);
        Ok(())
    }

    /// Reads the free count of inhibited vswitches `ids`; the answer
    /// comes back as [`Event::VSwitchFree`].
    pub(super) fn probe(&mut self, ids: Vec<String>) {
        let (cloud, events) = self.cloud_and_events();
        let spawned = self.spawn("vswitch probe", "eniipd-vsw-probe", move || {
            match cloud.describe_vswitches(&ids) {
                Ok(v) => {
                    let counts = v.into_iter().map(|s| (s.id, s.available_ips)).collect();
                    let _ = events.send(Event::VSwitchFree(counts));
                }
                Err(e) => debug!("probing inhibited vswitches failed: {e}"),
            }
        });
        if let Err(e) = spawned {
            warn!("cannot start a vswitch probe: {e}");
        }
    }

    /// Changes `eni`'s security groups to `set` (re-purposing it); the
    /// outcome comes back as [`Event::SetChanged`]. False when no thread
    /// could be started (nothing was asked).
    pub(super) fn set_groups(
        &mut self,
        eni: &str,
        set: eniip_protocol::core::SecurityGroupSet,
    ) -> bool {
        let (cloud, events) = self.cloud_and_events();
        let eni = eni.to_string();
        let spawned = self.spawn("ENI set change", "eniipd-eni-set", move || {
            let error = cloud.set_eni_security_groups(&eni, set.ids()).err();
            let _ = events.send(Event::SetChanged { eni, set, error });
        });
        match spawned {
            Ok(()) => true,
            Err(e) => {
                warn!("cannot start an ENI security-group change: {e}");
                false
            }
        }
    }

    /// Compares the pool (a snapshot asked of the actor) with the OpenAPI
    /// and answers `reply` (see [`super::super::audit`]).
    pub(super) fn audit(&mut self, opts: &Arc<AllocatorOptions>, reply: Reply) {
        let cloud = Arc::clone(&self.cloud);
        let opts = Arc::clone(opts);
        let requests = self.requests.clone();
        let spawned = self.spawn("audit", "eniipd-audit", move || {
            let r = super::super::audit::audit(
                &*cloud,
                &opts.instance_id,
                &opts.node_id,
                &opts.security_groups,
                || super::super::request(&requests, Request::Snapshot, Duration::from_secs(30)),
            );
            let _ = reply.send(r.map(eniip_protocol::core::Answer::Audit));
        });
        if let Err(e) = spawned {
            warn!("cannot start an audit thread: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::fake::FakeCloud;
    use std::time::Instant;

    #[test]
    fn ended_threads_are_pruned_and_running_ones_handed_back() {
        let (events, _) = crossbeam_channel::bounded(1);
        let (requests, _) = crossbeam_channel::bounded(1);
        let mut t = Threads::new(FakeCloud::new(4, 15, 1000), events, requests);
        let (tx, rx) = crossbeam_channel::bounded::<()>(0);
        t.spawn("quick", "test-quick", || {}).unwrap();
        t.spawn("held", "test-held", move || {
            let _ = rx.recv();
        })
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while t.tracked.len() > 1 && Instant::now() < deadline {
            t.prune();
            std::thread::sleep(Duration::from_millis(1));
        }
        let left = t.drain();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].0, "held");
        assert_eq!(left[0].1.thread().name(), Some("test-held"));
        drop(tx);
        for (_, h) in left {
            h.join().unwrap();
        }
        assert!(t.drain().is_empty());
    }
}
