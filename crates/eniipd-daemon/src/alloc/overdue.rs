//! The client's answer when its own thread is held in a commit: a
//! connection's thread that leads the commit of its change
//! (`actor::combine`) can be held in an fdatasync for as long as the
//! state disk stays frozen, and a thread inside a syscall answers nobody.
//! So while it leads, its [`Overdue`] is watched here: should its deadline
//! pass first, this thread ("eniipd-overdue") writes the client the
//! `timeout` the connection would have written had it been waiting (the
//! hand-off path: its wait ends, it answers `timeout`, the outcome
//! unknown). The reply is the client's [`Deliver`](eniip_protocol::core::Deliver):
//! whoever writes it first, the commit's callback or this thread, is the
//! only one who does.
//!
//! It costs a commit nothing but two syscalls: the watched deadlines arm
//! a timerfd (the earliest of them) and unwatching disarms it, and the
//! thread sleeps in the timerfd's read, woken only when a deadline passes
//! with its commit still in flight, or at stop. No thread is woken on a
//! change's path (issue 37).
//!
//! Invariants: every watched [`Overdue`] leaves exactly once, unwatched
//! by its leader or answered here (at its deadline, or at stop, when
//! nobody else will answer it); the timer is armed for the earliest
//! deadline watched, and disarmed when none is.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use log::{error, warn};
use nix::sys::time::TimeSpec;
use nix::sys::timer::{Expiration, TimerSetTimeFlags};
use nix::sys::timerfd::{ClockId, TimerFd, TimerFlags};
use parking_lot::Mutex;

use eniip_protocol::core::Overdue;

/// What is watched, under one lock with the timer it arms.
struct Watched {
    next_id: u64,
    entries: Vec<(u64, Overdue)>,
    stopping: bool,
}

struct Shared {
    watched: Mutex<Watched>,
    timer: TimerFd,
}

impl Shared {
    /// Arms the timer for the earliest deadline watched (or disarms it).
    fn rearm(&self, w: &Watched) {
        let earliest = w.entries.iter().map(|(_, o)| o.deadline).min();
        let set = match earliest {
            // A zero expiration disarms a timerfd: a deadline already
            // passed fires at once instead.
            Some(at) => self.timer.set(
                Expiration::OneShot(TimeSpec::from_duration(
                    at.saturating_duration_since(Instant::now())
                        .max(Duration::from_nanos(1)),
                )),
                TimerSetTimeFlags::empty(),
            ),
            None => self.timer.unset(),
        };
        if let Err(e) = set {
            // Cannot happen with a valid timerfd and time; said, not hidden.
            error!("cannot arm the overdue-reply timer: {e}");
        }
    }
}

/// Watches the deadlines of clients whose threads lead commits.
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Watchdog {
    /// Starts its thread.
    pub(crate) fn start() -> std::io::Result<Watchdog> {
        let timer = TimerFd::new(ClockId::CLOCK_MONOTONIC, TimerFlags::TFD_CLOEXEC)?;
        let shared = Arc::new(Shared {
            watched: Mutex::new(Watched {
                next_id: 0,
                entries: Vec::new(),
                stopping: false,
            }),
            timer,
        });
        let theirs = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("eniipd-overdue".into())
            .stack_size(128 * 1024)
            .spawn(move || run(&theirs))?;
        Ok(Watchdog {
            shared,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Runs `commit` (which may hold this thread in the disk) while
    /// `overdue` is watched: its client is answered at its deadline if
    /// `commit` has not returned by then.
    pub(crate) fn watch<R>(&self, overdue: Overdue, commit: impl FnOnce() -> R) -> R {
        let id = {
            let mut w = self.shared.watched.lock();
            if w.stopping {
                // Stopped: nothing watches, the client's thread answers.
                drop(w);
                return commit();
            }
            let id = w.next_id;
            w.next_id += 1;
            let earlier = w.entries.iter().all(|(_, o)| o.deadline > overdue.deadline);
            w.entries.push((id, overdue));
            if earlier {
                self.shared.rearm(&w);
            }
            id
        };
        let r = commit();
        let mut w = self.shared.watched.lock();
        if let Some(at) = w.entries.iter().position(|(i, _)| *i == id) {
            let (_, gone) = w.entries.swap_remove(at);
            if w.entries.iter().all(|(_, o)| o.deadline > gone.deadline) {
                self.shared.rearm(&w);
            }
        }
        r
    }

    /// Answers whatever is still watched (its commit is still held, and
    /// its client's thread with it) and stops the thread, joining it
    /// until `until`. Idempotent.
    pub(crate) fn stop(&self, until: Instant) {
        {
            let mut w = self.shared.watched.lock();
            w.stopping = true;
            if let Err(e) = self.shared.timer.set(
                Expiration::OneShot(TimeSpec::from_duration(Duration::from_nanos(1))),
                TimerSetTimeFlags::empty(),
            ) {
                error!("cannot wake the overdue-reply thread: {e}");
            }
        }
        if let Some(h) = self.thread.lock().take() {
            if !eniip_util::thread::join_until(h, until) {
                warn!("thread eniipd-overdue did not stop in time; abandoned");
            }
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop(Instant::now() + Duration::from_secs(1));
    }
}

fn run(shared: &Shared) {
    loop {
        if let Err(e) = shared.timer.wait() {
            error!("the overdue-reply timer failed: {e}; overdue commits are answered by nobody");
            return;
        }
        let (due, stopping) = {
            let mut w = shared.watched.lock();
            let now = Instant::now();
            let stopping = w.stopping;
            let (due, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut w.entries)
                .into_iter()
                .partition(|(_, o)| stopping || o.deadline <= now);
            w.entries = rest;
            if !stopping {
                shared.rearm(&w);
            }
            (due, stopping)
        };
        for (_, o) in due {
            warn!("a change's commit is still in the disk at its client's deadline (the state disk does not answer?): the client is answered timeout");
            o.deliver.deliver(&Err(o.answer));
        }
        if stopping {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eniip_protocol::core::{AllocError, Answer, Deliver, ErrCode};

    /// Records what it was answered, and on which thread.
    #[derive(Default)]
    struct Seen(Mutex<Vec<(Result<Answer, AllocError>, std::thread::ThreadId)>>);

    impl Deliver for Seen {
        fn deliver(&self, outcome: &Result<Answer, AllocError>) {
            self.0
                .lock()
                .push((outcome.clone(), std::thread::current().id()));
        }
        fn revoke(&self) -> bool {
            self.0.lock().is_empty()
        }
    }

    fn overdue(seen: &Arc<Seen>, after: Duration) -> Overdue {
        Overdue {
            deadline: Instant::now() + after,
            deliver: Arc::clone(seen) as Arc<dyn Deliver>,
            answer: AllocError::new(ErrCode::Timeout, "no answer in time"),
        }
    }

    #[test]
    fn a_held_commit_has_its_client_answered_at_the_deadline_by_another_thread() {
        let w = Watchdog::start().unwrap();
        let seen = Arc::new(Seen::default());
        let (release_tx, release_rx) = crossbeam_channel::bounded::<()>(0);
        let started = Instant::now();
        std::thread::scope(|s| {
            let held = s.spawn(|| {
                w.watch(overdue(&seen, Duration::from_millis(50)), || {
                    // A commit the disk holds until the test lets it go.
                    release_rx.recv_timeout(Duration::from_secs(30)).is_ok()
                })
            });
            assert!(eniip_util::thread::poll_until(
                started + Duration::from_secs(10),
                Duration::from_millis(2),
                || !seen.0.lock().is_empty()
            ));
            assert!(started.elapsed() >= Duration::from_millis(50));
            release_tx.send(()).unwrap();
            assert!(held.join().unwrap(), "the commit itself went on");
        });
        let got = seen.0.lock();
        assert_eq!(got.len(), 1, "answered once");
        assert!(matches!(&got[0].0, Err(e) if e.code == ErrCode::Timeout));
        assert_ne!(got[0].1, std::thread::current().id());
    }

    #[test]
    fn a_commit_within_its_deadline_leaves_nothing_to_answer() {
        let w = Watchdog::start().unwrap();
        let seen = Arc::new(Seen::default());
        for _ in 0..100 {
            assert_eq!(w.watch(overdue(&seen, Duration::from_millis(20)), || 7), 7);
        }
        // Nothing was left watched, nor the timer armed to answer it.
        assert!(w.shared.watched.lock().entries.is_empty());
        assert_eq!(w.shared.timer.get().unwrap(), None);
        assert!(seen.0.lock().is_empty());
    }

    #[test]
    fn stop_answers_what_is_still_held_and_the_thread_ends() {
        let w = Arc::new(Watchdog::start().unwrap());
        let seen = Arc::new(Seen::default());
        let (release_tx, release_rx) = crossbeam_channel::bounded::<()>(0);
        let held = {
            let (w, seen) = (Arc::clone(&w), Arc::clone(&seen));
            std::thread::spawn(move || {
                w.watch(overdue(&seen, Duration::from_secs(3600)), || {
                    release_rx.recv_timeout(Duration::from_secs(30)).is_ok()
                })
            })
        };
        assert!(eniip_util::thread::poll_until(
            Instant::now() + Duration::from_secs(10),
            Duration::from_millis(2),
            || !w.shared.watched.lock().entries.is_empty()
        ));
        w.stop(Instant::now() + Duration::from_secs(10));
        assert!(w.thread.lock().is_none(), "joined");
        assert_eq!(seen.0.lock().len(), 1, "answered at stop");
        release_tx.send(()).unwrap();
        assert!(held.join().unwrap());
    }
}
