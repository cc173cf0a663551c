//! What the reaper decides, without I/O: whether one sandbox looks gone
//! at one look ([`verdict`]), and which sandboxes have looked gone long
//! enough to be reaped ([`Suspects`]).
//!
//! A sandbox looks gone only when every signal says so: no thread of any
//! process is in the namespace recorded at ADD (its identity, whatever
//! its path shows now), and its path no longer holds that namespace or
//! holds it with nobody in it; or its identity was recorded in another
//! boot of the node. A scan that could not see every thread says
//! nothing. It is reaped only when it looked gone at every look for
//! `sandbox_reap_grace`, and at two looks at least.

use std::collections::HashMap;
use std::io;
use std::time::{Duration, Instant};

use super::procs::Processes;
use eniip_protocol::core::{NsId, Owner};

/// Why a sandbox is taken for gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Gone {
    /// Its namespace path is gone or holds something else, and nobody is
    /// in the namespace it held.
    Netns(String),
    /// Its namespace is there with nobody in it.
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

    /// A sentence for the log.
    pub(super) fn describe(&self, netns: &str) -> String {
        match self {
            Gone::Netns(why) => format!("{why}, and no process is in the namespace it held"),
            Gone::Empty => format!("no process is left in its network namespace {netns}"),
        }
    }
}

/// What one look says of a sandbox whose namespace was `recorded` at ADD
/// (in another boot of the node: `rebooted`) and whose path `path` shows
/// `now`. `None`: alive, or not known.
pub(super) fn verdict(
    path: &str,
    recorded: NsId,
    rebooted: bool,
    now: io::Result<(u64, u64)>,
    procs: &Processes,
) -> Option<Gone> {
    // Not every thread seen: nothing can be said.
    if procs.unreadable().is_some() {
        return None;
    }
    // No namespace outlives a reboot: whatever namespace of this boot has
    // the identity (nsfs inodes are handed out again), it is another.
    if rebooted {
        return Some(Gone::Netns(format!(
            "its network namespace {path} was recorded in another boot of the node"
        )));
    }
    // No identity to look for: nothing can be said. A thread in the
    // namespace: alive, whatever the path shows (a mount that vanished, a
    // remount, eniipd in a mount namespace that missed it).
    if recorded == NsId::default() || procs.holder(recorded).is_some() {
        return None;
    }
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
        Ok(_) => Some(Gone::Empty),
    }
}

/// One allocation's sandbox, as the reaper tells them apart.
pub(super) type Key = (Owner, NsId);

/// Sandboxes that looked gone at every look since they first did.
///
/// Invariant: a key is due only once it looked gone at two looks in a row
/// at least and at every look for `grace` since the first; a look that
/// does not find it gone forgets it, so its grace starts again.
#[derive(Debug)]
pub(super) struct Suspects {
    grace: Duration,
    /// When each was first found gone, and at how many looks since.
    since: HashMap<Key, (Instant, u32)>,
}

impl Suspects {
    pub(super) fn new(grace: Duration) -> Suspects {
        Suspects {
            grace,
            since: HashMap::new(),
        }
    }

    /// A look at `now` found `gone` (and nothing else gone): the keys now
    /// due, with how long they have looked gone. They are forgotten here;
    /// the caller reaps them.
    pub(super) fn look(
        &mut self,
        now: Instant,
        gone: Vec<(Key, Gone)>,
    ) -> Vec<(Key, Gone, Duration)> {
        let mut next = HashMap::with_capacity(gone.len());
        let mut due = Vec::new();
        for (key, why) in gone {
            let (first, looks) = self.since.get(&key).copied().unwrap_or((now, 0));
            let looks = looks + 1;
            let for_ = now.saturating_duration_since(first);
            if looks >= 2 && for_ >= self.grace {
                due.push((key, why, for_));
            } else {
                next.insert(key, (first, looks));
            }
        }
        self.since = next;
        due
    }

    /// Forgets every suspect (a look that could not judge).
    pub(super) fn clear(&mut self) {
        self.since.clear();
    }

    /// Sandboxes looking gone and not yet due.
    pub(super) fn pending(&self) -> usize {
        self.since.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::reaper::sight::Blind;

    const REC: NsId = NsId { dev: 4, ino: 100 };

    #[test]
    fn every_signal_must_agree() {
        let p = "/run/netns/x";
        let err = |k| Err(io::Error::from(k));
        let nobody = Processes::of(&[], None);
        let inside = Processes::of(&[REC], None);
        let blind = Processes::of(
            &[],
            Some(Blind::Process {
                path: "/proc/9/task/9/ns/net".into(),
                error: "Permission denied".into(),
            }),
        );
        // Mounted, nobody in it: empty.
        assert_eq!(
            verdict(p, REC, false, Ok((4, 100)), &nobody),
            Some(Gone::Empty)
        );
        // Gone, not a namespace, another namespace: gone, when nobody is in
        // the one recorded.
        for now in [
            err(io::ErrorKind::NotFound),
            err(io::ErrorKind::InvalidInput),
            Ok((4, 101)),
        ] {
            assert_eq!(
                verdict(p, REC, false, now, &nobody).map(|g| g.label()),
                Some("netns-gone")
            );
        }
        // A thread in the recorded namespace keeps it, whatever the path.
        for now in [
            Ok((4, 100)),
            err(io::ErrorKind::NotFound),
            err(io::ErrorKind::InvalidInput),
            Ok((4, 101)),
        ] {
            assert_eq!(verdict(p, REC, false, now, &inside), None);
        }
        // Recorded in another boot: gone, though a thread of this boot is
        // in a namespace of the same identity; unless the scan is blind.
        for procs in [&nobody, &inside] {
            assert_eq!(
                verdict(p, REC, true, Ok((4, 100)), procs).map(|g| g.label()),
                Some("netns-gone")
            );
        }
        assert_eq!(verdict(p, REC, true, Ok((4, 100)), &blind), None);
        // A scan that did not see every thread says nothing.
        assert_eq!(verdict(p, REC, false, Ok((4, 100)), &blind), None);
        assert_eq!(
            verdict(p, REC, false, err(io::ErrorKind::NotFound), &blind),
            None
        );
        // Nor does a path that cannot be read, or an unknown identity.
        assert_eq!(
            verdict(p, REC, false, err(io::ErrorKind::PermissionDenied), &nobody),
            None
        );
        assert_eq!(
            verdict(
                p,
                NsId::default(),
                false,
                err(io::ErrorKind::NotFound),
                &nobody
            ),
            None
        );
    }

    fn key(n: u64) -> Key {
        (Owner::parse("net/pod").unwrap(), NsId { dev: 4, ino: n })
    }

    #[test]
    fn a_suspect_is_due_after_two_looks_and_its_grace() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut s = Suspects::new(Duration::from_secs(10));
        let gone = |keys: &[u64]| keys.iter().map(|k| (key(*k), Gone::Empty)).collect();
        assert!(s.look(at(0), gone(&[1, 2])).is_empty());
        assert!(s.look(at(5), gone(&[1, 2])).is_empty());
        // 2 came back at 8: its grace starts again at 12.
        assert!(s.look(at(8), gone(&[1])).is_empty());
        assert_eq!(s.pending(), 1);
        let due = s.look(at(10), gone(&[1]));
        assert_eq!(due.len(), 1);
        assert_eq!(
            (due[0].0.clone(), due[0].2),
            (key(1), Duration::from_secs(10))
        );
        assert!(s.look(at(12), gone(&[2])).is_empty());
        assert!(s.look(at(21), gone(&[2])).is_empty());
        assert_eq!(s.look(at(22), gone(&[2])).len(), 1);
        assert_eq!(s.pending(), 0);

        // No grace: two looks in a row all the same.
        let mut s = Suspects::new(Duration::ZERO);
        assert!(s.look(at(0), gone(&[3])).is_empty());
        assert_eq!(s.look(at(1), gone(&[3])).len(), 1);
        // A look that could not judge forgets every suspect.
        assert!(s.look(at(2), gone(&[4])).is_empty());
        s.clear();
        assert!(s.look(at(3), gone(&[4])).is_empty());
    }
}
