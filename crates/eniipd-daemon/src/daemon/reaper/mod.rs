//! The sandbox reaper: releases allocations whose sandbox is gone when no
//! runtime says so (a CNI DEL that never came: containerd forgot the
//! sandbox across a crash, the node rebooted, the namespace was removed
//! behind the runtime's back).
//!
//! Every `sandbox_reap_interval` it looks at the allocations eniip-cni
//! made with `netns=` and `veth=`, and takes a sandbox for gone only when
//! every signal agrees ([`verdict`]): no thread of any process is in the
//! network namespace recorded at ADD (found by its identity, whatever its
//! path shows now), and that path no longer holds it (`netns-gone`) or
//! holds it with nobody in it (`netns-empty`: containerd keeps the mount
//! of a sandbox it forgot). A sandbox is reaped once it looked gone at
//! every look for `sandbox_reap_grace` (a runtime without an infra process
//! leaves the namespace empty while a container waits out its restart
//! back-off), two looks at least, on an allocation older than one
//! interval: an ADD in progress (its namespace has no process yet) is
//! never taken. The host end of its veth is removed (its routes go with
//! it) with its rules, in the namespace the plugin built them in, then the
//! address is released if it is still held for that sandbox and namespace.
//!
//! Allocations made by hand (no attachment) are never looked at. When
//! eniipd cannot see every process ([`sight`]: a PID namespace of its own,
//! a `/proc` that is not the host's, `hidepid`, a thread it may not read)
//! it takes nothing for gone, says so once in the log and in
//! `eniipd_sandbox_reaper_blind`.

mod procs;
mod sight;
mod verdict;

use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, RecvTimeoutError, Sender};
use log::{debug, info, warn};

use crate::alloc::Allocator;
use crate::pool::Attached;
use eniip_protocol::core::{NsId, Owner};
use eniip_util::netns_identity;
use eniip_util::time::unix_ms;
use procs::Processes;
use sight::{Blind, Facts, Sight};
use verdict::{verdict, Gone, Key, Suspects};

/// The reaper thread.
pub(super) struct Reaper {
    stop: Sender<()>,
    handle: JoinHandle<()>,
}

impl Reaper {
    /// Starts looking every `interval`; a sandbox is reaped once it looked
    /// gone for `grace`.
    pub(super) fn spawn(
        alloc: Arc<Allocator>,
        interval: Duration,
        grace: Duration,
    ) -> io::Result<Reaper> {
        let (stop, stop_rx) = bounded::<()>(1);
        let handle = std::thread::Builder::new()
            .name("eniipd-reaper".into())
            .spawn(move || {
                let mut r = Looks::new(interval, grace);
                // What it can see is said at start, not at the first pod.
                r.sees_all();
                loop {
                    match stop_rx.recv_timeout(interval) {
                        Err(RecvTimeoutError::Timeout) => r.look(&alloc),
                        _ => return,
                    }
                }
            })?;
        Ok(Reaper { stop, handle })
    }

    /// Stops it (a look in progress finishes first, within `until`).
    pub(super) fn stop(self, until: Instant) {
        let _ = self.stop.try_send(());
        if !eniip_util::thread::join_until(self.handle, until) {
            warn!("the sandbox reaper did not stop in time; abandoned");
        }
    }
}

/// The reaper's memory between looks.
struct Looks {
    interval: Duration,
    suspects: Suspects,
    /// The kinds of blindness said already (each is said once).
    said: HashSet<&'static str>,
    /// Blind at the last look.
    blind: bool,
}

impl Looks {
    fn new(interval: Duration, grace: Duration) -> Looks {
        Looks {
            interval,
            suspects: Suspects::new(grace),
            said: HashSet::new(),
            blind: false,
        }
    }

    /// Whether eniipd can see every process now (said when it cannot).
    fn sees_all(&mut self) -> bool {
        match sight::judge(&Facts::gather()) {
            Sight::All => true,
            Sight::Blind(b) => {
                self.blinded(&b);
                false
            }
        }
    }

    /// Cannot judge: says why (once per kind), forgets every suspect.
    fn blinded(&mut self, why: &Blind) {
        if self.said.insert(why.kind()) {
            warn!("sandbox reaper: {why}; no sandbox is taken for gone while eniipd cannot see every process");
        }
        self.blind = true;
        self.suspects.clear();
        crate::metrics::set_sandbox_reaper(true, 0);
    }

    /// Can judge.
    fn seeing(&mut self) {
        if self.blind {
            info!("sandbox reaper: every process can be seen again");
            self.blind = false;
        }
        crate::metrics::set_sandbox_reaper(false, self.suspects.pending());
    }

    fn look(&mut self, alloc: &Allocator) {
        let started = Instant::now();
        let attached = match alloc.attached() {
            Ok(a) => a,
            Err(e) => {
                debug!("sandbox reaper: {e}");
                return;
            }
        };
        if !self.sees_all() {
            return;
        }
        if attached.is_empty() {
            self.suspects.clear();
            self.seeing();
            return;
        }
        let procs = Processes::scan();
        if let Some(why) = procs.unreadable() {
            self.blinded(why);
            return;
        }
        let gone = self.gone(&attached, &procs);
        let due = self.suspects.look(Instant::now(), gone);
        self.seeing();
        debug!(
            "sandbox reaper: {} attachment(s), {} thread(s), {} looking gone, {} due, in {:?}",
            attached.len(),
            procs.tasks(),
            self.suspects.pending(),
            due.len(),
            started.elapsed()
        );
        for ((owner, ns), why, for_) in due {
            if let Some(a) = attached
                .iter()
                .find(|a| a.owner == owner && a.attach.netns_id == ns)
            {
                reap(alloc, a, &why, for_, &attached, &procs);
            }
        }
    }

    /// The sandboxes this look finds gone (an allocation younger than one
    /// interval is not looked at: its ADD may be in progress).
    fn gone(&self, attached: &[Attached], procs: &Processes) -> Vec<(Key, Gone)> {
        let now_ms = unix_ms();
        let young = u64::try_from(self.interval.as_millis()).unwrap_or(u64::MAX);
        attached
            .iter()
            .filter(|a| now_ms.saturating_sub(a.since_ms) >= young)
            .filter_map(|a| {
                let now = netns_identity::identity(Path::new(&a.attach.netns));
                verdict(&a.attach.netns, a.attach.netns_id, now, procs)
                    .map(|g| ((a.owner.clone(), a.attach.netns_id), g))
            })
            .collect()
    }
}

/// Removes `a`'s host end and rules, then releases its address.
fn reap(
    alloc: &Allocator,
    a: &Attached,
    gone: &Gone,
    for_: Duration,
    all: &[Attached],
    procs: &Processes,
) {
    let sandbox = a.sandbox.as_ref().map_or("-", |s| s.as_str());
    // A host end another allocation names is not this one's to remove.
    let claimed: HashSet<&Owner> = all
        .iter()
        .filter(|o| o.attach.veth == a.attach.veth)
        .map(|o| &o.owner)
        .collect();
    if claimed.len() == 1 {
        if let Err(e) = teardown(&a.attach.veth, a.attach.host_id, procs) {
            warn!(
                "sandbox reaper: removing {} of {} (sandbox {sandbox}): {e}; its rules may be left",
                a.attach.veth, a.owner
            );
        }
    }
    match alloc.reap(a) {
        Ok(Some(ip)) => {
            info!(
                "sandbox reaper: released {ip} of {} (sandbox {sandbox}): {}, at every look for {} s",
                a.owner,
                gone.describe(&a.attach.netns),
                for_.as_secs()
            );
            crate::metrics::record_reaped(gone.label());
        }
        Ok(None) => debug!("sandbox reaper: {} moved on meanwhile: kept", a.owner),
        Err(e) => warn!("sandbox reaper: releasing {}: {e}", a.owner),
    }
}

/// The datapath of one attachment, removed in the namespace the plugin
/// built it in (eniipd's own, or one a thread is in).
fn teardown(veth: &str, host: NsId, procs: &Processes) -> io::Result<()> {
    let own = netns_identity::own().map(|(dev, ino)| NsId { dev, ino })?;
    let local = || eniip_datapath::datapath::teardown(veth).map_err(io::Error::other);
    if host == NsId::default() || host == own {
        return local();
    }
    let Some(task) = procs.holder(host) else {
        return Err(io::Error::other(
            "it is in a namespace no process is in any more",
        ));
    };
    let ns = File::open(task.netns_path())?;
    let veth = veth.to_string();
    eniip_datapath::netns::run_in(&ns, move || {
        eniip_datapath::datapath::teardown(&veth).map_err(io::Error::other)
    })
}
