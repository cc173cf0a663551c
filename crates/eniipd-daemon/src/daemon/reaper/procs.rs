//! The network namespaces the node's threads are in: every thread of
//! every process (`/proc/PID/task/TID/ns/net`), not only thread-group
//! leaders, since a namespace may be held by a thread alone (a process
//! whose main thread exited, or moved to another namespace, while another
//! thread stays).
//!
//! Invariant: a scan that could not read some thread's namespace says so
//! ([`Processes::unreadable`]); a namespace it names no thread in is then
//! not known to be empty. What it could not read is: an entry of a
//! listing that failed, any error but "not there", and "not there"
//! itself unless the process (or thread) is gone or a zombie: a
//! `/proc/PID` that is missing for a process that runs is masked
//! (something mounted over it), not exited.

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
        for entry in dir {
            let entry = match entry {
                Ok(e) => e,
                Err(e) => {
                    p.unreadable.get_or_insert_with(|| Blind::Process {
                        path: "/proc".into(),
                        error: e.to_string(),
                    });
                    continue;
                }
            };
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
                    for t in threads {
                        match t {
                            Ok(t) => {
                                if let Some(tid) =
                                    t.file_name().to_str().and_then(|n| n.parse().ok())
                                {
                                    p.add(Task { pid, tid });
                                }
                            }
                            Err(e) => p.failed(pid, None, &tasks, &e),
                        }
                    }
                }
                Err(e) => p.failed(pid, None, &tasks, &e),
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
            Err(e) => self.failed(task.pid, Some(task.tid), Path::new(&path), &e),
        }
    }

    /// `path` of `pid` (its thread `tid`) could not be read.
    fn failed(&mut self, pid: u32, tid: Option<u32>, path: &Path, e: &io::Error) {
        // Exited meanwhile (a zombie has no namespaces either): said only
        // by the process being gone, never by the missing file alone.
        let missing =
            e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(nix::libc::ESRCH);
        if missing && ended(pid, tid) {
            return;
        }
        // The init of eniipd's PID namespace (systemd on a host) is never
        // inside a pod sandbox, which a runtime makes for the pod's own
        // processes: not being able to read it (some sandboxes refuse it
        // even to root) says nothing.
        if pid == 1 {
            return;
        }
        let path = path.display().to_string();
        self.unreadable.get_or_insert_with(|| match missing {
            true => Blind::Masked { path, pid },
            false => Blind::Process {
                path,
                error: e.to_string(),
            },
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

/// Whether process `pid` (its thread `tid`) has ended: gone (signal 0
/// says `ESRCH`), or a zombie (`/proc/PID/task/TID/stat` says `Z` or
/// `X`). Not known to be: false.
fn ended(pid: u32, tid: Option<u32>) -> bool {
    let (Ok(p), Ok(t)) = (
        nix::libc::pid_t::try_from(pid),
        nix::libc::pid_t::try_from(tid.unwrap_or(pid)),
    ) else {
        return false;
    };
    // SAFETY: tgkill with signal 0 sends nothing; it only checks that the
    // thread exists.
    #[allow(unsafe_code)]
    let r = unsafe { nix::libc::syscall(nix::libc::SYS_tgkill, p, t, 0) };
    if r == -1 && nix::errno::Errno::last() == nix::errno::Errno::ESRCH {
        return true;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{t}/stat")).unwrap_or_default();
    // The state follows the command name's closing parenthesis.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .is_some_and(|state| state == "Z" || state == "X")
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

    /// A missing file of a process that has ended is explained; of one
    /// that runs (this one) it is not: the scan is then blind.
    #[test]
    fn not_found_is_explained_only_by_an_ended_process() {
        let mut p = Processes::default();
        let gone = io::Error::from(io::ErrorKind::NotFound);
        // A child that has exited and been waited for: gone.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        p.failed(pid, None, Path::new("/proc/x/task"), &gone);
        assert!(p.unreadable().is_none(), "{:?}", p.unreadable());
        // A zombie (exited, not yet waited for).
        let mut zombie = std::process::Command::new("true").spawn().unwrap();
        let zpid = zombie.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !ended(zpid, None) && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        p.failed(zpid, None, Path::new("/proc/x/task"), &gone);
        assert!(p.unreadable().is_none(), "{:?}", p.unreadable());
        zombie.wait().unwrap();
        // This process runs: its /proc entry cannot be missing.
        p.failed(std::process::id(), None, Path::new("/proc/x/task"), &gone);
        assert!(
            matches!(p.unreadable(), Some(Blind::Masked { .. })),
            "{:?}",
            p.unreadable()
        );
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
