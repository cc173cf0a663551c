//! The one command type that travels from a client to the allocator, in
//! the shape of Firecracker's API thread handing its VMM an action and a
//! reply channel: the socket listener parses a line into a [`Command`],
//! [`Commands::ask`] puts it in an [`Envelope`] with a bounded(1) reply
//! channel, the allocator's actor answers it with an [`Answer`], and the
//! listener renders that. A new verb is a parser arm, a handler arm and
//! its documentation.
//!
//! Every ask has a deadline: a client never waits for an answer that the
//! cloud or the disk may never give.
//!
//! An asker may hand a [`Deliver`] with its command: whichever thread
//! answers (the store's, after the commit that makes a change durable)
//! then writes the reply to the client itself, before it wakes the
//! asker, so the client does not wait for one more thread to wake.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, RecvTimeoutError, SendTimeoutError, Sender};

use super::{
    AllocError, Allocation, Attachment, CeilingUse, EniEntry, EniInfo, ErrCode, Generation, Intent,
    ListEntry, Owner, SandboxId, StatusCounts,
};

/// What a client asks of the allocator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// An address for `owner` (idempotent per owner).
    Alloc {
        /// Who gets the address.
        owner: Owner,
        /// The sandbox (pod sandbox / container) asking.
        sandbox: Option<SandboxId>,
        /// An address to prefer if it is free.
        prefer: Option<IpAddr>,
        /// The sandbox's network, for the reaper (eniip-cni sends it).
        attach: Option<Attachment>,
        /// What the owner asks beyond an address (a pod's annotations).
        intent: Intent,
    },
    /// Give `owner`'s address back.
    Release {
        /// Whose address.
        owner: Owner,
        /// Only if held by this sandbox (or by none).
        sandbox: Option<SandboxId>,
        /// Only if the allocation is still this one (see
        /// eniipd-protocol(7) for what each form may touch): a release
        /// naming an older generation is [`Answer::Stale`], and never
        /// cancels a waiting `alloc`.
        gen: Option<Generation>,
    },
    /// `owner`'s allocation.
    Show {
        /// Whose.
        owner: Owner,
    },
    /// Every pool address.
    List,
    /// Pool counters.
    Status,
    /// Managed ENIs.
    Enis,
    /// One managed ENI's link and gateways (what a datapath needs).
    Eni {
        /// `eni-...`
        eni: String,
    },
    /// Local state against the cloud.
    Audit,
    /// Every ceiling's use, limit, rate and forecast.
    Capacity,
    /// Start (`true`) or end (`false`) draining the node.
    Drain(bool),
    /// Prometheus exposition.
    Metrics,
    /// The effective configuration.
    Config,
    /// Release every allocation whose owner starts with `owner_prefix`
    /// unless its owner or its sandbox is in `keep`.
    Gc {
        /// Only owners starting with this.
        owner_prefix: String,
        /// Owners and sandbox ids to keep.
        keep: Vec<String>,
    },
}

impl Command {
    /// True for the commands that change allocations (access-checked).
    pub fn is_mutating(&self) -> bool {
        matches!(
            self,
            Command::Alloc { .. }
                | Command::Release { .. }
                | Command::Gc { .. }
                | Command::Drain(_)
        )
    }

    /// The verb, for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Alloc { .. } => "alloc",
            Command::Release { .. } => "release",
            Command::Show { .. } => "show",
            Command::List => "list",
            Command::Status => "status",
            Command::Enis => "enis",
            Command::Eni { .. } => "eni",
            Command::Audit => "audit",
            Command::Capacity => "capacity",
            Command::Drain(true) => "drain",
            Command::Drain(false) => "undrain",
            Command::Metrics => "metrics",
            Command::Config => "config",
            Command::Gc { .. } => "gc",
        }
    }
}

/// The allocator's answer to a [`Command`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// `Alloc`, `Show`: the allocation (durable for `Alloc`) and the ENI
    /// it is on (the IPv4 half: `alloc` answers no IPv6 gateway).
    Allocation(Box<Allocation>, EniInfo),
    /// `Release`: the address given back, if one was held (durable).
    Released(Option<IpAddr>),
    /// `Release` naming a generation the owner's allocation no longer has
    /// (a newer `alloc` was answered since): nothing changed.
    Stale,
    /// `List`.
    List(Vec<ListEntry>),
    /// `Status`.
    Status(StatusCounts),
    /// `Enis`.
    Enis(Vec<EniEntry>),
    /// `Eni`.
    Eni(EniInfo),
    /// `Audit`: the differences (empty: consistent).
    Audit(Vec<String>),
    /// `Capacity`: one entry per ceiling.
    Capacity(Vec<CeilingUse>),
    /// `Drain`: draining now or not (durable).
    Draining(bool),
    /// `Metrics`: exposition text.
    Metrics(String),
    /// `Config`: `key=value` pairs, secrets masked.
    Config(Vec<(String, String)>),
    /// `Gc`: what was released (durable).
    Collected(Vec<Collected>),
}

/// One allocation a `gc` released.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collected {
    /// Its address.
    pub ip: IpAddr,
    /// Its owner.
    pub owner: Owner,
    /// Its sandbox, when one was given.
    pub sandbox: Option<SandboxId>,
    /// The host end eniip-cni named at `alloc`, when it did.
    pub veth: Option<String>,
}

/// A command on its way to the actor, with where to answer.
#[derive(Debug)]
pub struct Envelope {
    /// What is asked.
    pub command: Command,
    /// When the client asked (deadlines and latency count from here).
    pub started: Instant,
    /// When it was handed to the allocator's thread.
    pub sent: Instant,
    /// The answer; dropped unanswered only if the allocator is gone.
    pub reply: Reply,
}

/// Writes the reply to a command's outcome to its client, from the thread
/// that answers (the asker's own thread is asleep; waking it first would
/// put one more thread's wake-up on the client's path).
///
/// Contract: [`deliver`](Self::deliver) is called at most once per ask,
/// before the outcome goes back to the asker, and never waits (what the
/// client's socket does not take at once is left for the asker to write);
/// after [`revoke`](Self::revoke) returned true it writes nothing.
pub trait Deliver: Send + Sync {
    /// Writes the reply to `outcome`, as far as it goes without waiting.
    fn deliver(&self, outcome: &Result<Answer, AllocError>);
    /// The asker gave up waiting and answers itself: true if nothing was
    /// or will be written by [`deliver`](Self::deliver).
    fn revoke(&self) -> bool;
}

/// Where an answer goes: back to the asker, and first to its client when
/// the asker handed a [`Deliver`].
#[derive(Clone)]
pub struct Reply {
    tx: Sender<Result<Answer, AllocError>>,
    deliver: Option<Arc<dyn Deliver>>,
}

impl Reply {
    /// Answers: the reply written through the [`Deliver`], if any, then
    /// the outcome sent to the asker (an error if it is gone).
    pub fn send(&self, outcome: Result<Answer, AllocError>) -> Result<(), AskerGone> {
        if let Some(d) = &self.deliver {
            d.deliver(&outcome);
        }
        self.tx.send(outcome).map_err(|_| AskerGone)
    }
}

/// The asker of a [`Reply`] stopped waiting (its deadline passed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AskerGone;

impl From<Sender<Result<Answer, AllocError>>> for Reply {
    /// A reply that only goes back to the asker.
    fn from(tx: Sender<Result<Answer, AllocError>>) -> Reply {
        Reply { tx, deliver: None }
    }
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reply")
            .field("delivers", &self.deliver.is_some())
            .finish()
    }
}

/// Runs a command on the asker's own thread when the allocator's state is
/// free (flat combining): a lone request then goes from its line to its
/// reply with no other thread to wake (issue 37: each wake-up of a
/// sleeping thread is 15 to 30 us on a VM). The allocator's own thread
/// keeps whatever the asker could not take.
pub trait Combine: Send + Sync {
    /// Takes the allocator's state if nobody holds it, answers what its
    /// thread has queued and then `env` (its reply sent as the allocator
    /// would), and has the records committed; gives `env` back untouched
    /// when the state is taken (it then goes to the allocator's thread).
    ///
    /// The asker's thread may commit the records itself (no thread to
    /// wake) only when `overdue` says how its client is answered should
    /// that commit outlast the asker's deadline: a thread inside an
    /// fdatasync of a frozen disk can answer nobody.
    fn run(&self, env: Box<Envelope>, overdue: Option<Overdue>) -> Option<Box<Envelope>>;
}

/// How a client is answered when its asker's thread is held past the
/// asker's deadline (inside a commit it leads): `answer` written through
/// `deliver` at `deadline`, exactly what the asker would have written had
/// it been waiting (main's path: its wait ends, it revokes the delivery
/// and answers `timeout`).
#[derive(Clone)]
pub struct Overdue {
    /// When the asker would have given up.
    pub deadline: Instant,
    /// The client's reply, claimed by whoever answers first.
    pub deliver: Arc<dyn Deliver>,
    /// The `timeout` the asker would have answered.
    pub answer: AllocError,
}

impl std::fmt::Debug for Overdue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Overdue")
            .field("deadline", &self.deadline)
            .field("answer", &self.answer)
            .finish_non_exhaustive()
    }
}

/// How long a client waits to hand a command over before `busy`.
const ENQUEUE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a read-only view may take.
const VIEW_TIMEOUT: Duration = Duration::from_secs(30);
/// `audit` reads the cloud.
const AUDIT_TIMEOUT: Duration = Duration::from_secs(120);

/// The client side of the allocator's command channel. The channel
/// carries boxes: a bounded channel allocates and touches every slot when
/// it is made, and an envelope is 184 bytes where its box is 8.
#[derive(Clone)]
pub struct Commands {
    tx: Sender<Box<Envelope>>,
    alloc_timeout: Duration,
    combine: Option<Arc<dyn Combine>>,
}

impl std::fmt::Debug for Commands {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Commands")
            .field("alloc_timeout", &self.alloc_timeout)
            .field("combines", &self.combine.is_some())
            .finish()
    }
}

impl Commands {
    /// A handle on `tx`; changes wait at most `alloc_timeout` for their
    /// answer (a commit the disk does not finish by then is `timeout`).
    pub fn new(tx: Sender<Box<Envelope>>, alloc_timeout: Duration) -> Commands {
        Commands {
            tx,
            alloc_timeout,
            combine: None,
        }
    }

    /// The same, a command run on the asker's thread by `combine` when it
    /// can be, sent on `tx` when not.
    pub fn combining(self, combine: Arc<dyn Combine>) -> Commands {
        Commands {
            combine: Some(combine),
            ..self
        }
    }

    /// Asks and waits for the answer, within the command's deadline.
    pub fn ask(&self, command: Command) -> Result<Answer, AllocError> {
        self.ask_since(command, Instant::now())
    }

    /// [`ask`](Self::ask) for a client who asked at `started` (its request
    /// line read then): deadlines and latency count from there.
    pub fn ask_since(&self, command: Command, started: Instant) -> Result<Answer, AllocError> {
        self.ask_delivering(command, started, None)
    }

    /// [`ask_since`](Self::ask_since), the reply written to the client
    /// through `deliver` by the thread that answers. Should the wait end
    /// first, `deliver` is revoked before the timeout is returned; if it
    /// could not be (a delivery had begun), the outcome it delivered is
    /// awaited a little longer instead.
    pub fn ask_delivering(
        &self,
        command: Command,
        started: Instant,
        deliver: Option<Arc<dyn Deliver>>,
    ) -> Result<Answer, AllocError> {
        let wait = match command {
            // The actor answers a waiter by alloc_timeout itself; the
            // margin lets its own `timeout` (or the commit) arrive first.
            Command::Alloc { .. } => self.alloc_timeout + Duration::from_secs(2),
            Command::Release { .. } | Command::Gc { .. } | Command::Drain(_) => self.alloc_timeout,
            Command::Audit => AUDIT_TIMEOUT,
            _ => VIEW_TIMEOUT,
        };
        let mutating = command.is_mutating();
        let (tx, rx) = bounded(1);
        let late = deliver.clone();
        let env = Box::new(Envelope {
            command,
            started,
            sent: Instant::now(),
            reply: Reply { tx, deliver },
        });
        let env = match &self.combine {
            Some(c) => {
                // Only a change whose client a delivery answers may have
                // its commit led by this thread (`Combine::run`).
                let overdue = late.clone().filter(|_| mutating).map(|deliver| Overdue {
                    deadline: started + wait,
                    deliver,
                    answer: timed_out(mutating, wait),
                });
                c.run(env, overdue)
            }
            None => Some(env),
        };
        match env.map_or(Ok(()), |env| self.tx.send_timeout(env, ENQUEUE_TIMEOUT)) {
            Ok(()) => {}
            Err(SendTimeoutError::Timeout(_)) => {
                return Err(AllocError::new(
                    ErrCode::Busy,
                    "too many requests in flight",
                ))
            }
            Err(SendTimeoutError::Disconnected(_)) => return Err(AllocError::shutting_down()),
        }
        let mut got = rx.recv_timeout(wait.saturating_sub(started.elapsed()));
        if matches!(got, Err(RecvTimeoutError::Timeout)) && late.is_some_and(|d| !d.revoke()) {
            // Being delivered: the outcome follows at once.
            got = rx.recv_timeout(ENQUEUE_TIMEOUT);
        }
        match got {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) => Err(timed_out(mutating, wait)),
            Err(RecvTimeoutError::Disconnected) => Err(AllocError::shutting_down()),
        }
    }
}

/// The `timeout` of an ask that waited `wait` in vain.
fn timed_out(mutating: bool, wait: Duration) -> AllocError {
    if mutating {
        AllocError::new(
            ErrCode::Timeout,
            format!(
                "no answer within {} s (the state could not be made durable in time); the outcome is unknown",
                wait.as_secs()
            ),
        )
    } else {
        AllocError::new(
            ErrCode::Timeout,
            format!("no answer within {} s", wait.as_secs()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    /// Records what it delivers; refuses to be revoked once `begun`.
    #[derive(Default)]
    struct Recorder {
        delivered: Mutex<Vec<Result<Answer, AllocError>>>,
        revoked: AtomicUsize,
        begun: std::sync::atomic::AtomicBool,
    }

    impl Deliver for Recorder {
        fn deliver(&self, outcome: &Result<Answer, AllocError>) {
            self.delivered.lock().unwrap().push(outcome.clone());
        }
        fn revoke(&self) -> bool {
            self.revoked.fetch_add(1, Ordering::SeqCst);
            !self.begun.load(Ordering::SeqCst)
        }
    }

    fn release() -> Command {
        Command::Release {
            owner: Owner::parse("pod-a").unwrap(),
            sandbox: None,
            gen: None,
        }
    }

    #[test]
    fn the_answer_is_delivered_before_the_asker_has_it() {
        let (tx, rx) = bounded::<Box<Envelope>>(4);
        let commands = Commands::new(tx, Duration::from_secs(5));
        let recorder = Arc::new(Recorder::default());
        let answering = std::thread::spawn(move || {
            for _ in 0..2 {
                let env = rx.recv_timeout(Duration::from_secs(5)).unwrap();
                let _ = env.reply.send(Ok(Answer::Released(None)));
            }
        });
        let deliver = Arc::clone(&recorder) as Arc<dyn Deliver>;
        let got = commands.ask_delivering(release(), Instant::now(), Some(deliver));
        assert_eq!(got, Ok(Answer::Released(None)));
        assert_eq!(
            *recorder.delivered.lock().unwrap(),
            vec![Ok(Answer::Released(None))],
            "delivered once, before the asker woke"
        );
        // Without a delivery, the asker has the answer as before.
        assert_eq!(commands.ask(release()), Ok(Answer::Released(None)));
        assert_eq!(recorder.delivered.lock().unwrap().len(), 1);
        answering.join().unwrap();
    }

    #[test]
    fn a_timed_out_ask_revokes_its_delivery_or_waits_for_the_one_begun() {
        // Nobody answers: revoked, and the asker answers `timeout` itself.
        let (tx, _rx) = bounded::<Box<Envelope>>(4);
        let commands = Commands::new(tx, Duration::from_millis(50));
        let recorder = Arc::new(Recorder::default());
        let deliver = Arc::clone(&recorder) as Arc<dyn Deliver>;
        let got = commands.ask_delivering(release(), Instant::now(), Some(deliver));
        assert_eq!(got.unwrap_err().code, ErrCode::Timeout);
        assert_eq!(recorder.revoked.load(Ordering::SeqCst), 1);

        // A delivery began just as the wait ended: its outcome is awaited.
        let (tx, rx) = bounded::<Box<Envelope>>(4);
        let commands = Commands::new(tx, Duration::from_millis(50));
        let recorder = Arc::new(Recorder::default());
        recorder.begun.store(true, Ordering::SeqCst);
        let watched = Arc::clone(&recorder);
        let late = std::thread::spawn(move || {
            let env = rx.recv_timeout(Duration::from_secs(5)).unwrap();
            // Answers once the asker's wait has ended (it tried to revoke).
            let until = Instant::now() + Duration::from_secs(5);
            while watched.revoked.load(Ordering::SeqCst) == 0 && Instant::now() < until {
                std::thread::yield_now();
            }
            let _ = env.reply.send(Ok(Answer::Released(None)));
        });
        let deliver = Arc::clone(&recorder) as Arc<dyn Deliver>;
        let got = commands.ask_delivering(release(), Instant::now(), Some(deliver));
        assert_eq!(got, Ok(Answer::Released(None)));
        late.join().unwrap();
    }
}
