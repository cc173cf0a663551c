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

use std::net::IpAddr;
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
    /// The answer; the sender side is dropped unanswered only if the
    /// allocator is gone.
    pub reply: Sender<Result<Answer, AllocError>>,
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
#[derive(Debug, Clone)]
pub struct Commands {
    tx: Sender<Box<Envelope>>,
    alloc_timeout: Duration,
}

impl Commands {
    /// A handle on `tx`; changes wait at most `alloc_timeout` for their
    /// answer (a commit the disk does not finish by then is `timeout`).
    pub fn new(tx: Sender<Box<Envelope>>, alloc_timeout: Duration) -> Commands {
        Commands { tx, alloc_timeout }
    }

    /// Asks and waits for the answer, within the command's deadline.
    pub fn ask(&self, command: Command) -> Result<Answer, AllocError> {
        self.ask_since(command, Instant::now())
    }

    /// [`ask`](Self::ask) for a client who asked at `started` (its request
    /// line read then): deadlines and latency count from there.
    pub fn ask_since(&self, command: Command, started: Instant) -> Result<Answer, AllocError> {
        let wait = match command {
            // The actor answers a waiter by alloc_timeout itself; the
            // margin lets its own `timeout` (or the commit) arrive first.
            Command::Alloc { .. } => self.alloc_timeout + Duration::from_secs(2),
            Command::Release { .. } | Command::Gc { .. } | Command::Drain(_) => self.alloc_timeout,
            Command::Audit => AUDIT_TIMEOUT,
            _ => VIEW_TIMEOUT,
        };
        let mutating = command.is_mutating();
        let (reply, rx) = bounded(1);
        let env = Box::new(Envelope {
            command,
            started,
            sent: Instant::now(),
            reply,
        });
        match self.tx.send_timeout(env, ENQUEUE_TIMEOUT) {
            Ok(()) => {}
            Err(SendTimeoutError::Timeout(_)) => {
                return Err(AllocError::new(
                    ErrCode::Busy,
                    "too many requests in flight",
                ))
            }
            Err(SendTimeoutError::Disconnected(_)) => return Err(AllocError::shutting_down()),
        }
        match rx.recv_timeout(wait.saturating_sub(started.elapsed())) {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) if mutating => Err(AllocError::new(
                ErrCode::Timeout,
                format!(
                    "no answer within {} s (the state could not be made durable in time); the outcome is unknown",
                    wait.as_secs()
                ),
            )),
            Err(RecvTimeoutError::Timeout) => Err(AllocError::new(
                ErrCode::Timeout,
                format!("no answer within {} s", wait.as_secs()),
            )),
            Err(RecvTimeoutError::Disconnected) => Err(AllocError::shutting_down()),
        }
    }
}
