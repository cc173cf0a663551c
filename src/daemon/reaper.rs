//! The sandbox reaper: releases allocations whose sandbox is gone when no
//! runtime says so (a CNI DEL that never came: containerd forgot the
//! sandbox across a crash, the node rebooted, the namespace was removed
//! behind the runtime's back).
//!
//! Every `sandbox_reap_interval` it looks at the allocations eniip-cni
//! made with `netns=` and `veth=`. A sandbox is gone when its namespace
//! path no longer exists, is no longer a network namespace, or holds
//! another namespace than at ADD (`netns-gone`); or when its namespace is
//! still there with no process left in it (`netns-empty`: containerd
//! keeps the mount of a sandbox it forgot). Only what is found gone at two
//! looks in a row, on an allocation older than one interval, is reaped:
//! an ADD in progress (its namespace has no process yet) is never taken.
//! The host end of its veth is removed (its routes go with it) with its
//! rules, in the namespace the plugin built them in, then the address is
//! released if it is still held for that sandbox and namespace.
//!
//! Allocations made by hand (no attachment) are never looked at. When
//! eniipd cannot see every process (`hidepid`, no `CAP_SYS_PTRACE`), no
//! sandbox is taken for empty, and that is logged once.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, RecvTimeoutError, Sender};
use log::{debug, info, warn};

use crate::alloc::Allocator;
use crate::core::{NsId, Owner};
use crate::pool::Attached;
use crate::util::netns;
use crate::util::time::unix_ms;

/// Why a sandbox is taken for gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Gone {
    /// Its namespace path is gone or holds something else.
    Netns(String),
    /// Its namespace is there with no process in it.
    Empty,
}

impl Gone {
    /// The metric's label.
    pub(super) fn label(&self) -> &'static str {
        match self {
            Gone::Netns(_) => "netns-gone",
            Gone::Empty => "netns-empty",
        }
    }

    fn describe(&self, netns: &str) -> String {
        match self {
            Gone::Netns(why) => why.clone(),
            Gone::Empty => format!("no process is left in its network namespace {netns}"),
        }
    }
}

/// The network namespaces processes are in, and whether that is all of
/// them (`complete`: no process was hidden or unreadable).
#[derive(Debug, Default)]
pub(super) struct Processes {
    /// A process in each namespace seen.
    pub(super) by_ns: HashMap<NsId, u32>,
    /// Every process could be read.
    pub(super) complete: bool,
}

/// What is at the sandbox's namespace path now, against what was there
/// at ADD. `None`: alive, or not known.
pub(super) fn verdict(
    path: &str,
    recorded: NsId,
    now: io::Result<(u64, u64)>,
    procs: &Processes,
) -> Option<Gone> {
    match now {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Some(Gone::Netns(format!(
            "its network namespace {path} no longer exists"
        ))),
        Err(e) if e.kind() == io::ErrorKind::InvalidInput => Some(Gone::Netns(format!(
            "{path} is no longer a network namespace"
        ))),
        // Not readable: nothing can be said.
        Err(_) => None,
        Ok((dev, ino)) if (NsId { dev, ino }) != recorded => Some(Gone::Netns(format!(
            "{path} holds another network namespace than at ADD"
        ))),
        Ok(_) if procs.complete && !procs.by_ns.contains_key(&recorded) => Some(Gone::Empty),
        Ok(_) => None,
    }
}

/// Whether `/proc` hides other users' processes (`hidepid`), from
/// `/proc/self/mountinfo`.
fn proc_hides(mountinfo: &str) -> bool {
    mountinfo.lines().any(|l| {
        let mut halves = l.splitn(2, " - ");
        let (Some(left), Some(right)) = (halves.next(), halves.next()) else {
            return false;
        };
        let mount_point = left.split(' ').nth(4);
        let mut r = right.split(' ');
        let fstype = r.next();
        let opts = r.nth(1).unwrap_or("");
        mount_point == Some("/proc")
            && fstype == Some("proc")
            && opts.split(',').any(|o| {
                o.strip_prefix("hidepid=")
                    .is_some_and(|v| !matches!(v, "0" | "off"))
            })
    })
}

/// Every process's network namespace.
pub(super) fn scan_processes() -> Processes {
    let mut p = Processes {
        complete: true,
        ..Processes::default()
    };
    if std::fs::read_to_string("/proc/self/mountinfo").map_or(true, |m| proc_hides(&m)) {
        p.complete = false;
    }
    let Ok(dir) = std::fs::read_dir("/proc") else {
        p.complete = false;
        return p;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        match netns::identity(&entry.path().join("ns/net")) {
            Ok((dev, ino)) => {
                p.by_ns.entry(NsId { dev, ino }).or_insert(pid);
            }
            // Exited meanwhile, or a kernel thread.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::InvalidInput
                ) => {}
            // The init of eniipd's PID namespace (systemd on a host, a
            // container's init) is never inside a pod sandbox, which a
            // runtime makes for the pod's own processes: not being able
            // to read it (some sandboxes refuse) says nothing.
            Err(_) if pid == 1 => {}
            Err(_) => p.complete = false,
        }
    }
    p
}

/// The reaper thread.
pub(super) struct Reaper {
    stop: Sender<()>,
    handle: JoinHandle<()>,
}

impl Reaper {
    /// Starts looking every `interval`.
    pub(super) fn spawn(alloc: Arc<Allocator>, interval: Duration) -> io::Result<Reaper> {
        let (stop, stop_rx) = bounded::<()>(1);
        let handle = std::thread::Builder::new()
            .name("eniipd-reaper".into())
            .spawn(move || {
                let mut r = Looks::new(interval);
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
        if !crate::util::thread::join_until(self.handle, until) {
            warn!("the sandbox reaper did not stop in time; abandoned");
        }
    }
}

/// The reaper's memory between looks.
struct Looks {
    interval: Duration,
    /// Found gone at the last look.
    suspects: HashMap<(Owner, NsId), Gone>,
    warned_blind: bool,
}

impl Looks {
    fn new(interval: Duration) -> Looks {
        Looks {
            interval,
            suspects: HashMap::new(),
            warned_blind: false,
        }
    }

    fn look(&mut self, alloc: &Allocator) {
        let attached = match alloc.attached() {
            Ok(a) => a,
            Err(e) => {
                debug!("sandbox reaper: {e}");
                return;
            }
        };
        if attached.is_empty() {
            self.suspects.clear();
            return;
        }
        let procs = scan_processes();
        if !procs.complete && !self.warned_blind {
            warn!(
                "sandbox reaper: some processes cannot be seen (/proc hidepid, or no CAP_SYS_PTRACE): a sandbox whose namespace is still mounted is not taken for empty"
            );
            self.warned_blind = true;
        }
        let now_ms = unix_ms();
        let young = self.interval.as_millis() as u64;
        let mut seen = HashMap::new();
        for a in &attached {
            let key = (a.owner.clone(), a.attach.netns_id);
            if now_ms.saturating_sub(a.since_ms) < young {
                continue;
            }
            let now = netns::identity(Path::new(&a.attach.netns));
            if let Some(gone) = verdict(&a.attach.netns, a.attach.netns_id, now, &procs) {
                seen.insert(key, gone);
            }
        }
        let last = std::mem::take(&mut self.suspects);
        for a in &attached {
            let key = (a.owner.clone(), a.attach.netns_id);
            let Some(gone) = seen.remove(&key) else {
                continue;
            };
            if last.contains_key(&key) {
                reap(alloc, a, &gone, &attached, &procs);
            } else {
                self.suspects.insert(key, gone);
            }
        }
    }
}

/// Removes `a`'s host end and rules, then releases its address.
fn reap(alloc: &Allocator, a: &Attached, gone: &Gone, all: &[Attached], procs: &Processes) {
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
                "sandbox reaper: released {ip} of {} (sandbox {sandbox}): {}",
                a.owner,
                gone.describe(&a.attach.netns)
            );
            crate::metrics::record_reaped(gone.label());
        }
        Ok(None) => debug!("sandbox reaper: {} moved on meanwhile: kept", a.owner),
        Err(e) => warn!("sandbox reaper: releasing {}: {e}", a.owner),
    }
}

/// The datapath of one attachment, removed in the namespace the plugin
/// built it in (eniipd's own, or one a process is in).
fn teardown(veth: &str, host: NsId, procs: &Processes) -> io::Result<()> {
    let own = netns::own().map(|(dev, ino)| NsId { dev, ino })?;
    let local = || crate::cni::datapath::teardown(veth).map_err(io::Error::other);
    if host == NsId::default() || host == own {
        return local();
    }
    let Some(pid) = procs.by_ns.get(&host) else {
        return Err(io::Error::other(
            "it is in a namespace no process is in any more",
        ));
    };
    let ns = File::open(format!("/proc/{pid}/ns/net"))?;
    let veth = veth.to_string();
    crate::cni::netns::run_in(&ns, move || {
        crate::cni::datapath::teardown(&veth).map_err(io::Error::other)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const REC: NsId = NsId { dev: 4, ino: 100 };

    fn procs(complete: bool, with: &[NsId]) -> Processes {
        Processes {
            by_ns: with.iter().map(|n| (*n, 1)).collect(),
            complete,
        }
    }

    #[test]
    fn verdicts() {
        let p = "/run/netns/x";
        let live = procs(true, &[REC]);
        let err = |k| Err(io::Error::from(k));
        assert_eq!(verdict(p, REC, Ok((4, 100)), &live), None);
        assert_eq!(
            verdict(p, REC, err(io::ErrorKind::NotFound), &live).map(|g| g.label()),
            Some("netns-gone")
        );
        assert_eq!(
            verdict(p, REC, err(io::ErrorKind::InvalidInput), &live).map(|g| g.label()),
            Some("netns-gone")
        );
        // Another namespace mounted at the path now.
        assert_eq!(
            verdict(p, REC, Ok((4, 101)), &live).map(|g| g.label()),
            Some("netns-gone")
        );
        // Unreadable: nothing is said.
        assert_eq!(
            verdict(p, REC, err(io::ErrorKind::PermissionDenied), &live),
            None
        );
        // Empty only when every process could be seen.
        assert_eq!(
            verdict(p, REC, Ok((4, 100)), &procs(true, &[])),
            Some(Gone::Empty)
        );
        assert_eq!(verdict(p, REC, Ok((4, 100)), &procs(false, &[])), None);
    }

    #[test]
    fn hidepid_is_found_in_mountinfo() {
        let line = |opts: &str| {
            format!(
                "22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc {opts}"
            )
        };
        assert!(!proc_hides(&line("rw")));
        assert!(!proc_hides(&line("rw,hidepid=0")));
        assert!(proc_hides(&line("rw,hidepid=invisible")));
        assert!(proc_hides(&line("rw,hidepid=2,subset=pid")));
        // Another proc mount elsewhere does not count.
        assert!(!proc_hides(
            "30 22 0:40 / /run/x/proc rw - proc proc rw,hidepid=2"
        ));
    }

    #[test]
    fn this_process_is_seen_in_its_namespace() {
        let p = scan_processes();
        let (dev, ino) = netns::own().unwrap();
        assert!(p.by_ns.contains_key(&NsId { dev, ino }));
    }
}
