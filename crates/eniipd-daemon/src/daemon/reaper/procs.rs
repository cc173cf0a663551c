//! The network namespaces the node's threads are in: every thread of
//! every process (`/proc/PID/task/TID/ns/net`), not only thread-group
//! leaders, since a namespace may be held by a thread alone (a process
//! whose main thread exited, or moved to another namespace, while another
//! thread stays).
//!
//! Invariant: a scan that could not read some thread's namespace says so
//! ([`Processes::unreadable`]); a namespace it names no thread in is then
//! not known to be empty.

use std::collections::HashMap;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::sight::Blind;
use eniip_protocol::core::NsId;

/// One thread, by which its namespace can be entered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Task {
    /// Its process.
    pub(super) pid: u32,
    /// The thread.
    pub(super) tid: u32,
}

impl Task {
    /// Its network namespace's file.
    pub(super) fn netns_path(&self) -> String {
        format!("/proc/{}/task/{}/ns/net", self.pid, self.tid)
    }
}

/// A scan of every thread's network namespace.
#[derive(Debug, Default)]
pub(super) struct Processes {
    /// A thread in each namespace seen.
    by_ns: HashMap<NsId, Task>,
    /// Threads scanned.
    tasks: usize,
    /// The first thread (or `/proc` listing) that could not be read.
    unreadable: Option<Blind>,
}

impl Processes {
    /// Scans `/proc`.
    pub(super) fn scan() -> Processes {
        let mut p = Processes::default();
        let dir = match std::fs::read_dir("/proc") {
            Ok(d) => d,
            Err(e) => {
                p.unreadable = Some(Blind::Unreadable {
                    what: "/proc",
                    error: e.to_string(),
                });
                return p;
            }
        };
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let tasks = entry.path().join("task");
            match std::fs::read_dir(&tasks) {
                Ok(threads) => {
                    for t in threads.flatten() {
                        if let Some(tid) = t.file_name().to_str().and_then(|n| n.parse().ok()) {
                            p.add(Task { pid, tid });
                        }
                    }
                }
                Err(e) => p.failed(pid, &tasks, &e),
            }
        }
        p
    }

    fn add(&mut self, task: Task) {
        let path = task.netns_path();
        match std::fs::metadata(&path) {
            Ok(m) => {
                self.tasks += 1;
                self.by_ns
                    .entry(NsId {
                        dev: m.dev(),
                        ino: m.ino(),
                    })
                    .or_insert(task);
            }
            Err(e) => self.failed(task.pid, Path::new(&path), &e),
        }
    }

    fn failed(&mut self, pid: u32, path: &Path, e: &io::Error) {
        // Exited meanwhile (a zombie has no namespaces either).
        if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(nix::libc::ESRCH) {
            return;
        }
        // The init of eniipd's PID namespace (systemd on a host) is never
        // inside a pod sandbox, which a runtime makes for the pod's own
        // processes: not being able to read it (some sandboxes refuse it
        // even to root) says nothing.
        if pid == 1 {
            return;
        }
        self.unreadable.get_or_insert_with(|| Blind::Process {
            path: path.display().to_string(),
            error: e.to_string(),
        });
    }

    /// A thread in namespace `ns`, if the scan saw one.
    pub(super) fn holder(&self, ns: NsId) -> Option<Task> {
        self.by_ns.get(&ns).copied()
    }

    /// Why the scan is not complete, if it is not.
    pub(super) fn unreadable(&self) -> Option<&Blind> {
        self.unreadable.as_ref()
    }

    /// Threads whose namespace was read.
    pub(super) fn tasks(&self) -> usize {
        self.tasks
    }

    /// A scan that saw `held` (for the tests of what is decided on it).
    #[cfg(test)]
    pub(super) fn of(held: &[NsId], unreadable: Option<Blind>) -> Processes {
        Processes {
            by_ns: held.iter().map(|n| (*n, Task { pid: 2, tid: 2 })).collect(),
            tasks: held.len(),
            unreadable,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eniip_util::netns_identity;

    fn own() -> NsId {
        let (dev, ino) = netns_identity::own().unwrap();
        NsId { dev, ino }
    }

    #[test]
    fn this_process_is_seen_in_its_namespace() {
        let p = Processes::scan();
        assert!(p.holder(own()).is_some());
        assert!(p.tasks() >= 1);
    }

    /// A namespace held only by a thread that is not its process's leader
    /// (this test's own thread, in a namespace of its own) is seen.
    #[test]
    fn a_namespace_held_by_a_non_leader_thread_is_seen() {
        use nix::sched::{unshare, CloneFlags};
        if !nix::unistd::geteuid().is_root() {
            eniip_util::testing::skip(
                "a namespace held by a non-leader thread: needs root to unshare a network namespace",
            );
            return;
        }
        let (tx, rx) = crossbeam_channel::bounded(1);
        let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(1);
        let t = std::thread::Builder::new()
            .name("reaper-test-netns".into())
            .spawn(move || {
                unshare(CloneFlags::CLONE_NEWNET).unwrap();
                let _ = tx.send(own());
                let _ = stop_rx.recv_timeout(std::time::Duration::from_secs(30));
            })
            .unwrap();
        let ns = rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
        assert_ne!(ns, own());
        let p = Processes::scan();
        let held = p.holder(ns);
        let _ = stop_tx.send(());
        t.join().unwrap();
        let task = held.expect("a thread alone in its namespace is seen");
        assert_eq!(task.pid, std::process::id());
        assert_ne!(task.tid, task.pid);
    }
}
