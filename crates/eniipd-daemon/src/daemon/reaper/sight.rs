//! Whether eniipd can see every process of the node, which the reaper
//! needs before it may take any sandbox for gone: a process it cannot see
//! may be the one that keeps a sandbox alive.
//!
//! It can when it is in the node's initial PID namespace, `/proc` is a
//! proc of that namespace, and `/proc` hides no process (`hidepid`).
//! What it finds is [`Sight::Blind`] with the reason, or [`Sight::All`];
//! a process whose namespace cannot be read is found by the scan
//! ([`super::procs`]). `/proc/1` is never relied on: some sandboxes
//! refuse it even to root.

use std::fmt;
use std::os::unix::fs::MetadataExt;

/// `PROC_PID_INIT_INO`: the inode of the initial PID namespace, fixed by
/// the kernel (`include/linux/proc_ns.h`) for every boot and machine.
pub(super) const PROC_PID_INIT_INO: u64 = 0xEFFF_FFFC;

/// What eniipd can see of the node's processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Sight {
    /// Every process (as far as `/proc` goes; the scan still checks that
    /// each one is readable).
    All,
    /// Not every process, and why.
    Blind(Blind),
}

/// Why eniipd cannot see every process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Blind {
    /// It runs in a PID namespace of its own (a container without the
    /// host's PID namespace): the inode of its `/proc/self/ns/pid`.
    PidNamespace(u64),
    /// `/proc` belongs to another PID namespace than eniipd's: what
    /// `/proc/self` names, against eniipd's own pid.
    ForeignProc { proc_self: String, pid: u32 },
    /// `/proc` is mounted with `hidepid`.
    HidePid,
    /// Something needed to tell could not be read.
    Unreadable { what: &'static str, error: String },
    /// A process's network namespace could not be read.
    Process { path: String, error: String },
    /// A file of a process that runs is missing: something is mounted
    /// over its `/proc/PID` (or over a part of it).
    Masked { path: String, pid: u32 },
}

impl Blind {
    /// One word per kind, for "said once" bookkeeping.
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Blind::PidNamespace(_) => "pid-namespace",
            Blind::ForeignProc { .. } => "foreign-proc",
            Blind::HidePid => "hidepid",
            Blind::Unreadable { .. } => "unreadable",
            Blind::Process { .. } => "process",
            Blind::Masked { .. } => "masked",
        }
    }
}

impl fmt::Display for Blind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Blind::PidNamespace(ino) => write!(
                f,
                "eniipd is not in the host's PID namespace (its /proc/self/ns/pid is pid:[{ino}], the host's is pid:[{PROC_PID_INIT_INO}]): run it with the host's PID namespace (hostPID: true in a pod)"
            ),
            Blind::ForeignProc { proc_self, pid } => write!(
                f,
                "/proc is not of eniipd's PID namespace (/proc/self is {proc_self:?}, eniipd is pid {pid}): mount a proc of the host's PID namespace at /proc"
            ),
            Blind::HidePid => write!(
                f,
                "/proc is mounted with hidepid: mount it without (ProtectProc=default under systemd)"
            ),
            Blind::Unreadable { what, error } => write!(f, "cannot read {what}: {error}"),
            Blind::Process { path, error } => write!(
                f,
                "cannot read {path} ({error}): eniipd needs CAP_SYS_PTRACE (and no LSM rule that denies it reading other processes)"
            ),
            Blind::Masked { path, pid } => write!(
                f,
                "{path} is missing while process {pid} runs: something is mounted over /proc/{pid} in eniipd's mount namespace (see /proc/self/mountinfo); unmount it"
            ),
        }
    }
}

/// What `/proc` and the PID namespace say, gathered.
#[derive(Debug)]
pub(super) struct Facts {
    /// The inode of `/proc/self/ns/pid`.
    pub(super) pid_ns: std::io::Result<u64>,
    /// What `/proc/self` points at.
    pub(super) proc_self: std::io::Result<String>,
    /// `getpid()`.
    pub(super) pid: u32,
    /// `/proc/self/mountinfo`.
    pub(super) mountinfo: std::io::Result<String>,
}

impl Facts {
    /// Reads them.
    pub(super) fn gather() -> Facts {
        Facts {
            pid_ns: std::fs::metadata("/proc/self/ns/pid").map(|m| m.ino()),
            proc_self: std::fs::read_link("/proc/self").map(|p| p.to_string_lossy().into_owned()),
            pid: std::process::id(),
            mountinfo: std::fs::read_to_string("/proc/self/mountinfo"),
        }
    }
}

/// What `facts` say of eniipd's sight: all only when every one of them
/// says so.
pub(super) fn judge(facts: &Facts) -> Sight {
    let unreadable = |what, e: &std::io::Error| {
        Sight::Blind(Blind::Unreadable {
            what,
            error: e.to_string(),
        })
    };
    match &facts.pid_ns {
        Err(e) => return unreadable("/proc/self/ns/pid", e),
        Ok(ino) if *ino != PROC_PID_INIT_INO => return Sight::Blind(Blind::PidNamespace(*ino)),
        Ok(_) => {}
    }
    // In the initial PID namespace, /proc/self names eniipd's own pid
    // only in a proc of that namespace (in any other, eniipd is not there
    // at all).
    match &facts.proc_self {
        Err(e) => return unreadable("/proc/self", e),
        Ok(s) if s.parse::<u32>().ok() != Some(facts.pid) => {
            return Sight::Blind(Blind::ForeignProc {
                proc_self: s.clone(),
                pid: facts.pid,
            })
        }
        Ok(_) => {}
    }
    match &facts.mountinfo {
        Err(e) => unreadable("/proc/self/mountinfo", e),
        Ok(m) if proc_hides(m) => Sight::Blind(Blind::HidePid),
        Ok(m) => match masked_process(m) {
            Some((path, pid)) => Sight::Blind(Blind::Masked { path, pid }),
            None => Sight::All,
        },
    }
}

/// A mount over a process's `/proc/PID` (or inside it), from
/// `/proc/self/mountinfo`: its mount point and the pid.
fn masked_process(mountinfo: &str) -> Option<(String, u32)> {
    mountinfo.lines().find_map(|l| {
        let mount_point = l.split(' ').nth(4)?;
        let rest = mount_point.strip_prefix("/proc/")?;
        let pid = rest.split('/').next()?.parse::<u32>().ok()?;
        Some((mount_point.to_string(), pid))
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    fn facts(pid_ns: u64, proc_self: &str, pid: u32, mountinfo: &str) -> Facts {
        Facts {
            pid_ns: Ok(pid_ns),
            proc_self: Ok(proc_self.to_string()),
            pid,
            mountinfo: Ok(mountinfo.to_string()),
        }
    }

    const PROC: &str = "22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw";

    #[test]
    fn every_fact_must_agree() {
        assert_eq!(judge(&facts(PROC_PID_INIT_INO, "42", 42, PROC)), Sight::All);
        // A PID namespace of its own (a container without hostPID).
        assert_eq!(
            judge(&facts(4026532201, "1", 1, PROC)),
            Sight::Blind(Blind::PidNamespace(4026532201))
        );
        // The host's PID namespace, but /proc of another one (where
        // eniipd is not: /proc/self names a stranger or nothing).
        assert!(matches!(
            judge(&facts(PROC_PID_INIT_INO, "7", 42, PROC)),
            Sight::Blind(Blind::ForeignProc { .. })
        ));
        let hidden = PROC.replace("proc rw", "proc rw,hidepid=invisible");
        assert_eq!(
            judge(&facts(PROC_PID_INIT_INO, "42", 42, &hidden)),
            Sight::Blind(Blind::HidePid)
        );
        let mut f = facts(PROC_PID_INIT_INO, "42", 42, PROC);
        f.proc_self = Err(io::Error::from(io::ErrorKind::NotFound));
        assert!(matches!(
            judge(&f),
            Sight::Blind(Blind::Unreadable {
                what: "/proc/self",
                ..
            })
        ));
    }

    #[test]
    fn the_reasons_say_what_to_do() {
        let b = Blind::PidNamespace(4026532201);
        assert!(b.to_string().contains("hostPID"), "{b}");
        let b = Blind::Process {
            path: "/proc/9/task/9/ns/net".into(),
            error: "Permission denied".into(),
        };
        assert!(b.to_string().contains("CAP_SYS_PTRACE"), "{b}");
    }

    #[test]
    fn a_mount_over_a_process_is_found_in_mountinfo() {
        let over = |mp: &str| format!("{PROC}\n41 22 0:44 / {mp} rw,relatime - tmpfs tmpfs rw");
        assert_eq!(masked_process(PROC), None);
        assert_eq!(
            masked_process(&over("/proc/4242")),
            Some(("/proc/4242".to_string(), 4242))
        );
        assert_eq!(
            masked_process(&over("/proc/4242/task")),
            Some(("/proc/4242/task".to_string(), 4242))
        );
        // What runtimes mask in /proc is no process.
        for mp in ["/proc/kcore", "/proc/sys", "/proc/acpi", "/run/x/proc/1"] {
            assert_eq!(masked_process(&over(mp)), None, "{mp}");
        }
        assert!(matches!(
            judge(&facts(PROC_PID_INIT_INO, "42", 42, &over("/proc/7"))),
            Sight::Blind(Blind::Masked { pid: 7, .. })
        ));
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
}
