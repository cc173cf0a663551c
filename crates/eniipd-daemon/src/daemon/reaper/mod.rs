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
        if !due.is_empty() {
            hold_for_tests();
        }
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
                let now = netns_identity::stat(Path::new(&a.attach.netns));
                let rebooted = a.attach.of_another_boot(netns_identity::this_boot());
                verdict(&a.attach.netns, a.attach.netns_id, rebooted, now, procs)
                    .map(|g| ((a.owner.clone(), a.attach.netns_id), g))
            })
            .collect()
    }
}

/// Asks eniipd to remove `a`'s host end and rules and release its
/// address, in one step, if the allocation is still that sandbox's and
/// that attachment's (an ADD since the look, even of the same container
/// id into a namespace of the same identity, keeps everything).
fn reap(
    alloc: &Allocator,
    a: &Attached,
    gone: &Gone,
    for_: Duration,
    all: &[Attached],
    procs: &Processes,
) {
    let sandbox = a.sandbox.as_ref().map_or("-", |s| s.as_str()).to_string();
    // A host end another allocation names is not this one's to remove; one
    // of another boot is gone with it (a link of its name now is another's).
    let claimed: HashSet<&Owner> = all
        .iter()
        .filter(|o| o.attach.veth == a.attach.veth)
        .map(|o| &o.owner)
        .collect();
    let ours = claimed.len() == 1 && !a.attach.of_another_boot(netns_identity::this_boot());
    let teardown: Option<Box<dyn FnOnce() + Send>> = match ours.then(|| host_ns(a, procs)) {
        None => None,
        Some(Err(e)) => {
            warn!(
                "sandbox reaper: removing {} of {} (sandbox {sandbox}): {e}; its rules may be left",
                a.attach.veth, a.owner
            );
            None
        }
        Some(Ok(ns)) => {
            let (veth, owner, sandbox) = (a.attach.veth.clone(), a.owner.clone(), sandbox.clone());
            Some(Box::new(move || {
                if let Err(e) = teardown(&veth, ns) {
                    warn!(
                        "sandbox reaper: removing {veth} of {owner} (sandbox {sandbox}): {e}; its rules may be left"
                    );
                }
            }))
        }
    };
    match alloc.reap(a, teardown) {
        Ok(Some(ip)) => {
            info!(
                "sandbox reaper: released {ip} of {} (sandbox {sandbox}): {}, at every look for {} s",
                a.owner,
                gone.describe(&a.attach.netns),
                for_.as_secs()
            );
            crate::metrics::record_reaped(gone.label());
        }
        Ok(None) => debug!(
            "sandbox reaper: {} moved on meanwhile (a new ADD): kept, nothing removed",
            a.owner
        ),
        Err(e) => warn!("sandbox reaper: releasing {}: {e}", a.owner),
    }
}

/// The namespace `a`'s host end was built in: `None` for eniipd's own,
/// else a file of it (a thread in it holds it open meanwhile).
fn host_ns(a: &Attached, procs: &Processes) -> io::Result<Option<File>> {
    let own = netns_identity::own().map(|(dev, ino)| NsId { dev, ino })?;
    let host = a.attach.host_id;
    if host == NsId::default() || host == own {
        return Ok(None);
    }
    let Some(task) = procs.holder(host) else {
        return Err(io::Error::other(
            "it is in a namespace no process is in any more",
        ));
    };
    File::open(task.netns_path()).map(Some)
}

/// Removes the datapath of one attachment in the namespace the plugin
/// built it in (`None`: eniipd's own).
fn teardown(veth: &str, ns: Option<File>) -> io::Result<()> {
    let Some(ns) = ns else {
        return eniip_datapath::datapath::teardown(veth).map_err(io::Error::other);
    };
    let veth = veth.to_string();
    eniip_datapath::netns::run_in(&ns, move || {
        eniip_datapath::datapath::teardown(&veth).map_err(io::Error::other)
    })
}

/// Debug builds only, for the tests that open the window between a look
/// and what it does: with `ENIIPD_TEST_REAPER_HOLD=DIR`, a look that
/// found sandboxes due creates `DIR/held` and waits (30 s at most) for
/// `DIR/go`, then removes both and goes on.
#[cfg(debug_assertions)]
fn hold_for_tests() {
    let Some(dir) = std::env::var_os("ENIIPD_TEST_REAPER_HOLD") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let (held, go) = (dir.join("held"), dir.join("go"));
    if std::fs::write(&held, b"").is_err() {
        return;
    }
    let until = Instant::now() + Duration::from_secs(30);
    while !go.exists() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = std::fs::remove_file(&go);
    let _ = std::fs::remove_file(&held);
}

#[cfg(not(debug_assertions))]
fn hold_for_tests() {}
