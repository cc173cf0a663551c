//! Who runs the actor: its own thread ("eniipd-pool"), or a client's
//! thread that finds it free (flat combining).
//!
//! The actor's state sits behind one mutex that nobody holds across I/O.
//! A client's thread that can take it without waiting ([`Combiner`])
//! answers what the actor's thread has queued, then its own command, then
//! lets go and commits the records itself when no commit is in flight
//! ([`Journal::lead`](crate::alloc::Journal::lead)): a lone `alloc` goes from its line to its reply on
//! the connection's own thread, with no sleeping thread to wake (issue
//! 37). It leads only while its client's deadline is watched by another
//! thread ([`Watchdog`]): the disk can hold a leader in its fdatasync for
//! ever (a frozen filesystem), and its client is then answered `timeout`
//! at the deadline as if its thread had been waiting. The actor's thread keeps everything else: timers, its helpers'
//! reports, internal requests, and every command a client could not run
//! (the state was taken); its records go to the store's thread
//! ([`Journal::hand_off`](crate::alloc::Journal::hand_off)), so under load commits still gather and
//! overlap as before.
//!
//! Invariants: every command is answered exactly once, by whoever holds
//! the state, and each is followed by a `step` as on the actor's thread;
//! records reach the journal in the order of the decisions (they are
//! queued under the state's lock); a client that leaves the actor needing
//! to wake sooner than its thread planned (or stopping) nudges the
//! thread. Once the thread stops it takes the state out: clients then
//! hand their commands to a channel nobody reads and get
//! `shutting-down`.

use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{select, Receiver, Sender};
use parking_lot::Mutex;

use eniip_protocol::core::{Combine, Envelope, Overdue};

use super::super::mailbox::{Event, Request};
use super::super::overdue::Watchdog;
use super::super::Joinable;
use super::Actor;

/// The actor and the command queue its thread reads, while it runs.
pub(in crate::alloc) struct Held {
    actor: Actor,
    commands: Receiver<Box<Envelope>>,
}

/// The state shared by the actor's thread and combining clients.
pub(in crate::alloc) type Shared = Arc<Mutex<Option<Held>>>;

impl Held {
    /// `actor`, whose thread reads `commands`.
    pub(in crate::alloc) fn new(actor: Actor, commands: Receiver<Box<Envelope>>) -> Shared {
        Arc::new(Mutex::new(Some(Held { actor, commands })))
    }
}

/// Runs commands on the asker's thread when the actor is free.
pub(in crate::alloc) struct Combiner {
    shared: Shared,
    /// Wakes the actor's thread early.
    nudge: Sender<()>,
    /// Answers the client of a leader held in the disk past its deadline.
    watchdog: Arc<Watchdog>,
}

impl Combiner {
    pub(in crate::alloc) fn new(
        shared: Shared,
        nudge: Sender<()>,
        watchdog: Arc<Watchdog>,
    ) -> Combiner {
        Combiner {
            shared,
            nudge,
            watchdog,
        }
    }
}

impl Combine for Combiner {
    fn run(&self, env: Box<Envelope>, overdue: Option<Overdue>) -> Option<Box<Envelope>> {
        let Some(mut guard) = self.shared.try_lock() else {
            return Some(env);
        };
        let Some(held) = guard.as_mut() else {
            return Some(env);
        };
        if held.actor.stopping {
            return Some(env);
        }
        // Older commands first: the actor's thread may not have taken them.
        while let Ok(c) = held.commands.try_recv() {
            held.actor.on_timed_command(*c);
            held.actor.step(Instant::now());
        }
        held.actor.on_timed_command(*env);
        // The step before the commit, not after the reply: what it writes
        // (holds that ended) then rides in the change's own frame. Stepping
        // after the reply cost a second frame and fdatasync per change and
        // slowed the next commit (BENCHMARKS.md, issue 37).
        let now = Instant::now();
        held.actor.step(now);
        let nudge = held.actor.stopping || held.actor.next_wakeup(now) < held.actor.planned_wake;
        let journal = held.actor.durable.journal();
        drop(guard);
        // The commit first: a nudged thread would wake beside it. Only a
        // client that someone else can answer at its deadline has its
        // thread lead (the disk may hold it for ever); the rest (views,
        // asks without a delivery) have the store's thread commit.
        match overdue {
            Some(o) => self.watchdog.watch(o, || journal.lead()),
            None => journal.hand_off(),
        }
        if nudge {
            let _ = self.nudge.try_send(());
        }
        None
    }
}

/// One message to the actor's thread.
enum Msg {
    Command(Box<Envelope>),
    Request(Request),
    Event(Event),
    /// A timer or a nudge.
    Wake,
    Stop,
}

/// The actor's thread: runs until `stop` fires, the actor stops or every
/// command sender is gone; returns the threads the actor started, for the
/// caller to join.
pub(in crate::alloc) fn run(
    shared: Shared,
    nudge: Receiver<()>,
    commands: Receiver<Box<Envelope>>,
    requests: Receiver<Request>,
    events: Receiver<Event>,
    stop: Receiver<()>,
) -> Vec<Joinable> {
    let journal = {
        let mut guard = shared.lock();
        let a = &mut guard.as_mut().expect("the actor runs once").actor;
        let enis: Vec<(String, String)> = a
            .pool
            .enis()
            .iter()
            .map(|e| (e.id().to_string(), e.mac().to_string()))
            .collect();
        for (id, mac) in enis {
            let started = a.reports().start_worker(&id, &mac);
            a.or_fatal(started);
        }
        a.step(Instant::now());
        a.durable.journal()
    };
    journal.hand_off();
    loop {
        let now = Instant::now();
        let wake = {
            let mut guard = shared.lock();
            let a = &mut guard.as_mut().expect("taken out only here").actor;
            if a.stopping {
                break;
            }
            a.planned_wake = a.next_wakeup(now);
            a.planned_wake
        };
        let msg = select! {
            recv(stop) -> _ => Msg::Stop,
            recv(nudge) -> _ => Msg::Wake,
            recv(commands) -> c => match c {
                Ok(c) => Msg::Command(c),
                Err(_) => Msg::Stop,
            },
            recv(requests) -> r => r.map_or(Msg::Wake, Msg::Request),
            recv(events) -> e => e.map_or(Msg::Wake, Msg::Event),
            default(wake.saturating_duration_since(now)) => Msg::Wake,
        };
        if matches!(msg, Msg::Stop) {
            break;
        }
        {
            let mut guard = shared.lock();
            let a = &mut guard.as_mut().expect("taken out only here").actor;
            match msg {
                Msg::Command(c) => a.on_timed_command(*c),
                Msg::Request(r) => a.on_request(r),
                Msg::Event(e) => a.on_event(e),
                Msg::Wake | Msg::Stop => {}
            }
            if !a.stopping {
                a.step(Instant::now());
            }
        }
        journal.hand_off();
    }
    let held = shared.lock().take().expect("taken out only here");
    let Held { mut actor, .. } = held;
    actor.begin_stop();
    // Answer what is queued so no client waits for a reply that will
    // never come.
    while let Ok(c) = commands.try_recv() {
        actor.on_command(*c);
    }
    while let Ok(r) = requests.try_recv() {
        actor.on_request(r);
    }
    let mut threads = actor.workers.stop_all();
    threads.append(&mut actor.threads.drain());
    drop(actor);
    journal.hand_off();
    threads
}
