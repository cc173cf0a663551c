//! Where one ADD's time went, on request: with `ENIIP_CNI_PROFILE=FILE`
//! in its environment, ADD appends one line to FILE when it ends (ended
//! well or not), for benchmarks of pod storms (`cni-bench --storm`):
//!
//! `add <container id> ok=<bool> total_us=N lock_us=N eniipd_us=N
//! datapath_us=N netlink_us=N netlink_requests=N
//! netlink_kinds=KIND:N:US,...`
//!
//! `lock_us` is the wait for the owner's lock, `eniipd_us` the
//! conversation with eniipd up to the `alloc` reply, `datapath_us` the
//! attachment (and its record), `netlink_us` the part of the whole ADD
//! spent inside netlink requests ([`crate::netlink::stopwatch`]: the most
//! it held the kernel's RTNL), and `netlink_kinds` the same by kind of
//! request (`newlink`, `dumprule`; a batch of changes sent together is
//! one request, its kinds joined by `+`): how many, and the time in them.
//! Without the variable nothing is timed.
//! The line is one `write` on an `O_APPEND` file, so the lines of
//! concurrent ADDs never mix. A file that cannot be written is let be:
//! the profile never fails an ADD.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::netlink::stopwatch;

/// The variable that asks for a profile.
pub const VAR: &str = "ENIIP_CNI_PROFILE";

/// The stages of an ADD this profile tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Waiting for the owner's lock.
    Lock,
    /// Asking eniipd, up to the `alloc` reply.
    Eniipd,
    /// Building the attachment and keeping its record.
    Datapath,
}

/// One ADD's profile, when asked for.
#[derive(Debug)]
pub(crate) struct Profile {
    file: Option<PathBuf>,
    started: Instant,
    at: Instant,
    spent: [Duration; 3],
}

impl Profile {
    /// Starts timing when `file` is there (the variable's value).
    pub(crate) fn start(file: Option<PathBuf>) -> Profile {
        if file.is_some() {
            stopwatch::start();
        }
        let now = Instant::now();
        Profile {
            file,
            started: now,
            at: now,
            spent: [Duration::ZERO; 3],
        }
    }

    /// The time since the last mark was `stage`'s.
    pub(crate) fn mark(&mut self, stage: Stage) {
        if self.file.is_none() {
            return;
        }
        let now = Instant::now();
        self.spent[stage as usize] += now - self.at;
        self.at = now;
    }

    /// The time since the last mark is no stage's.
    pub(crate) fn skip(&mut self) {
        if self.file.is_some() {
            self.at = Instant::now();
        }
    }

    /// The line for `container_id`, if asked for.
    fn line(&self, container_id: &str, ok: bool) -> String {
        let us = |d: Duration| d.as_micros();
        let (netlink, requests) = stopwatch::spent();
        let kinds: Vec<String> = stopwatch::by_kind()
            .iter()
            .map(|(kind, n, d)| format!("{kind}:{n}:{}", us(*d)))
            .collect();
        format!(
            "add {container_id} ok={ok} total_us={} lock_us={} eniipd_us={} datapath_us={} \
             netlink_us={} netlink_requests={requests} netlink_kinds={}\n",
            us(self.started.elapsed()),
            us(self.spent[Stage::Lock as usize]),
            us(self.spent[Stage::Eniipd as usize]),
            us(self.spent[Stage::Datapath as usize]),
            us(netlink),
            kinds.join(","),
        )
    }

    /// Appends the line for `container_id`, if asked for.
    pub(crate) fn finish(&self, container_id: &str, ok: bool) {
        let Some(path) = &self.file else { return };
        let line = self.line(container_id, ok);
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_add_up_and_nothing_is_timed_unasked() {
        let mut off = Profile::start(None);
        off.mark(Stage::Lock);
        assert_eq!(off.spent, [Duration::ZERO; 3]);

        let dir = crate::test_support::test_dir("profile");
        let file = dir.join("p.log");
        let mut p = Profile::start(Some(file.clone()));
        std::thread::sleep(Duration::from_millis(2));
        p.mark(Stage::Lock);
        p.mark(Stage::Eniipd);
        p.finish("c1", true);
        p.finish("c2", false);
        let text = std::fs::read_to_string(&file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].starts_with("add c1 ok=true total_us="), "{text}");
        assert!(lines[1].starts_with("add c2 ok=false "), "{text}");
        assert!(
            lines[0].contains(" netlink_requests=0 netlink_kinds="),
            "{text}"
        );
        let lock: u64 = lines[0]
            .split(' ')
            .find_map(|w| w.strip_prefix("lock_us="))
            .and_then(|v| v.parse().ok())
            .unwrap();
        assert!(lock >= 2000, "{text}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
