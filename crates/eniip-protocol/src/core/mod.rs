//! The domain vocabulary every layer shares: who holds an address
//! ([`Owner`], [`SandboxId`]), what an owner asks beyond an address
//! ([`Intent`]), what was handed out ([`Allocation`]) and
//! what is kept after a release ([`Hold`]), the views of the pool
//! ([`StatusCounts`], [`ListEntry`], [`EniEntry`]), the one error the
//! allocator answers with ([`AllocError`]) and the commands that reach it
//! ([`command`]).
//!
//! Nothing here does I/O or knows the wire format: [`crate::protocol`]
//! parses text into these types and renders them back; `alloc`, `pool` and
//! `store` speak them without knowing there is a socket.

mod attachment;
pub mod command;
mod generation;
mod ipv4_prefix;
mod ipv6_prefix;
mod security_groups;

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub use attachment::Attachment;
pub use attachment::NsId;
pub use command::{
    Answer, Collected, Combine, Command, Commands, Deliver, Envelope, Overdue, Reply,
};
pub use generation::Generation;
pub use ipv4_prefix::Ipv4Prefix;
pub use ipv6_prefix::Ipv6Prefix;
pub use security_groups::{
    valid_security_group_id, SecurityGroupSet, SecurityGroupSetError, MAX_SECURITY_GROUPS,
};

/// Longest owner or sandbox id.
pub const MAX_ID: usize = 255;

/// The longest stick time there is (s): a week, for the node's
/// `ip_stick_time` and for the most an owner may ask for itself.
pub const MAX_STICK_S: u64 = 7 * 86_400;

/// Tag key marking an ENI as created by eniipd (value [`TAG_CREATOR_VALUE`]).
pub const TAG_CREATOR_KEY: &str = "creator";
/// See [`TAG_CREATOR_KEY`].
pub const TAG_CREATOR_VALUE: &str = "eniipd";
/// Tag key holding the instance an ENI was created for.
pub const TAG_INSTANCE_KEY: &str = "eniipd/instance-id";
/// Tag key holding the node id of the eniipd (its state directory) that
/// created an ENI: two daemons on one instance never take each other's.
pub const TAG_NODE_KEY: &str = "eniipd/node-id";

/// Stable error codes (the protocol's `ERR <code>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrCode {
    /// Malformed request or argument.
    BadRequest,
    /// No such command.
    UnknownCommand,
    /// Request line too long; the server closes after it.
    LineTooLong,
    /// `show` of an owner holding nothing.
    NotFound,
    /// No IP can be had: capacity reached or vswitches empty.
    Exhausted,
    /// The answer did not come in time (`alloc_timeout`, a slow disk).
    Timeout,
    /// The cloud refused; [`AllocError::cloud_code`] names its `Code`.
    Cloud,
    /// Too many requests in flight.
    Busy,
    /// The peer may not use this command.
    Denied,
    /// The daemon is stopping.
    ShuttingDown,
    /// The node is draining (`drain`): no new allocation.
    Draining,
    /// `audit` found differences.
    Inconsistent,
    /// A bug or a local failure (disk).
    Internal,
}

impl ErrCode {
    /// The code as it appears on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrCode::BadRequest => "bad-request",
            ErrCode::UnknownCommand => "unknown-command",
            ErrCode::LineTooLong => "line-too-long",
            ErrCode::NotFound => "not-found",
            ErrCode::Exhausted => "exhausted",
            ErrCode::Timeout => "timeout",
            ErrCode::Cloud => "cloud",
            ErrCode::Busy => "busy",
            ErrCode::Denied => "denied",
            ErrCode::ShuttingDown => "shutting-down",
            ErrCode::Draining => "draining",
            ErrCode::Inconsistent => "inconsistent",
            ErrCode::Internal => "internal",
        }
    }

    /// Every code, for documentation checks.
    pub const ALL: [ErrCode; 13] = [
        ErrCode::BadRequest,
        ErrCode::UnknownCommand,
        ErrCode::LineTooLong,
        ErrCode::NotFound,
        ErrCode::Exhausted,
        ErrCode::Timeout,
        ErrCode::Cloud,
        ErrCode::Busy,
        ErrCode::Denied,
        ErrCode::ShuttingDown,
        ErrCode::Draining,
        ErrCode::Inconsistent,
        ErrCode::Internal,
    ];
}

impl fmt::Display for ErrCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a command failed: a stable code, a human message and, for cloud
/// refusals, the service's `Code`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocError {
    /// The stable code.
    pub code: ErrCode,
    /// The service's error code when the cloud refused
    /// (`InvalidVSwitchId.IpNotEnough`).
    pub cloud_code: Option<String>,
    /// Human text (may be empty).
    pub message: String,
}

impl AllocError {
    /// An error with a message.
    pub fn new(code: ErrCode, message: impl Into<String>) -> AllocError {
        AllocError {
            code,
            cloud_code: None,
            message: message.into(),
        }
    }

    /// An error with no message.
    pub fn bare(code: ErrCode) -> AllocError {
        AllocError::new(code, "")
    }

    /// A malformed request.
    pub fn bad(message: impl Into<String>) -> AllocError {
        AllocError::new(ErrCode::BadRequest, message)
    }

    /// A refusal by the cloud carrying its service code.
    pub fn cloud(code: ErrCode, cloud_code: &str, message: impl Into<String>) -> AllocError {
        AllocError {
            code,
            cloud_code: Some(cloud_code.to_string()),
            message: message.into(),
        }
    }

    /// The daemon is stopping.
    pub fn shutting_down() -> AllocError {
        AllocError::new(ErrCode::ShuttingDown, "the daemon is stopping")
    }

    /// No address can be had because `ceiling` is reached: the message
    /// begins with the ceiling (`eni_slots: `, `vswitch vsw-a: `,
    /// `prefix: `), then `why`. Every `exhausted` refusal is made here, so
    /// a client (eniip-cni, a script) reads the ceiling one way.
    pub fn exhausted(ceiling: &Ceiling, why: impl fmt::Display) -> AllocError {
        AllocError::new(ErrCode::Exhausted, format!("{ceiling}: {why}"))
    }

    /// The node is draining: no new allocation.
    pub fn draining() -> AllocError {
        AllocError::new(
            ErrCode::Draining,
            "this node is draining (eniipctl drain): it takes no new allocation; eniipctl undrain ends it",
        )
    }
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code.as_str())?;
        if let Some(c) = &self.cloud_code {
            write!(f, " {c}")?;
        }
        if !self.message.is_empty() {
            write!(f, " {}", self.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for AllocError {}

fn valid_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_ID
        && s.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'/' | b':' | b'@')
        })
}

/// An owner key: 1..255 bytes of `A-Z a-z 0-9 . _ - / : @`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner(String);

impl Owner {
    /// Validates an owner.
    pub fn parse(s: &str) -> Result<Owner, AllocError> {
        if valid_id(s) {
            Ok(Owner(s.to_string()))
        } else {
            Err(AllocError::bad(
                "invalid owner (1..255 of A-Z a-z 0-9 . _ - / : @)",
            ))
        }
    }

    /// The owner text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A sandbox id, same alphabet as an owner.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SandboxId(String);

impl SandboxId {
    /// Validates a sandbox id.
    pub fn parse(s: &str) -> Result<SandboxId, AllocError> {
        if valid_id(s) {
            Ok(SandboxId(s.to_string()))
        } else {
            Err(AllocError::bad(
                "invalid sandbox id (1..255 of A-Z a-z 0-9 . _ - / : @)",
            ))
        }
    }

    /// The id text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SandboxId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What an `alloc` asks for its owner beyond an address: a pod's
/// annotations as eniip-cni passes them (SPEC section 6a). The default
/// asks nothing, and is served exactly as an `alloc` without it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Intent {
    /// The vswitch the address must be on (one of the node's configured
    /// vswitches).
    pub vswitch: Option<String>,
    /// The owner's own `ip_stick_time` (seconds), instead of the node's.
    pub stick_s: Option<u64>,
    /// IPv4 only on a dual-stack node: the owner is answered no IPv6 (its
    /// pair's IPv6 stays with the IPv4 in the pool, unused).
    pub ipv4_only: bool,
    /// The security groups the address's ENI must be in, exactly (none:
    /// the node's configured `security_groups`).
    pub security_groups: Option<SecurityGroupSet>,
}

/// `vswitch=ID`: the name an [`Intent`]'s vswitch goes by, in an `alloc`
/// and in the allocator's refusals (which begin with it, so that a client
/// can say which of its asks was refused).
pub const ARG_VSWITCH: &str = "vswitch";
/// `ip-stick-time=SECONDS`: an [`Intent`]'s own stick time.
pub const ARG_STICK: &str = "ip-stick-time";
/// `ip-stack=ipv4`: an [`Intent`]'s IPv4 only.
pub const ARG_STACK: &str = "ip-stack";
/// `security-groups=SG,...`: an [`Intent`]'s security groups (a
/// [`SecurityGroupSet`], canonical on the wire: sorted, each once).
pub const ARG_SECURITY_GROUPS: &str = "security-groups";

impl Intent {
    /// True when it asks nothing.
    pub fn is_empty(&self) -> bool {
        *self == Intent::default()
    }
}

/// An address handed to an owner: who holds it, for which sandbox, since
/// when, on which ENI, and what it asked. The pool hands these out, the journal makes
/// them durable (the store keeps its own record of one, converted at its
/// edge), and `alloc` and `show` answer one with its ENI's [`EniInfo`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    /// Who holds it.
    pub owner: Owner,
    /// The sandbox it is held for, if one was named.
    pub sandbox: Option<SandboxId>,
    /// The IPv4 address.
    pub ip: Ipv4Addr,
    /// The IPv6 address (dual stack).
    pub ipv6: Option<Ipv6Addr>,
    /// The /80 of its ENI `ipv6` was carved from (dual stack, prefix
    /// mode), when it was.
    pub ipv6_prefix: Option<Ipv6Prefix>,
    /// The ENI holding it.
    pub eni: String,
    /// When it was handed out (Unix ms).
    pub since_ms: u64,
    /// Its identity: the generation its latest `alloc` was answered
    /// ([`Generation::NONE`] when an older eniipd recorded it).
    pub gen: Generation,
    /// The sandbox's network, when eniip-cni named it (for the reaper).
    pub attach: Option<Attachment>,
    /// What its `alloc` asked beyond an address (its stick time applies
    /// at its release, `ipv4_only` to what it is answered).
    pub intent: Intent,
}

impl Allocation {
    /// The IPv6 address the owner is answered: its pair's, unless it asked
    /// IPv4 only.
    pub fn owner_ipv6(&self) -> Option<Ipv6Addr> {
        self.ipv6.filter(|_| !self.intent.ipv4_only)
    }
}

/// A released address kept for its last owner (until `reserved_until_ms`,
/// `ip_stick_time`) and/or from other owners (until `cooling_until_ms`,
/// `ip_cooldown`). No `last_owner` is a quarantine after a state rebuild.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// The IPv4 address.
    pub ip: Ipv4Addr,
    /// Its IPv6 pair.
    pub ipv6: Option<Ipv6Addr>,
    /// The /80 `ipv6` was carved from, when it was.
    pub ipv6_prefix: Option<Ipv6Prefix>,
    /// The ENI it is on.
    pub eni: String,
    /// Who may take it back.
    pub last_owner: Option<Owner>,
    /// End of the reservation (Unix ms, 0 = none).
    pub reserved_until_ms: u64,
    /// End of the cool-down (Unix ms, 0 = none).
    pub cooling_until_ms: u64,
}

/// What a consumer needs to route through one managed ENI: its link (by
/// MAC) and its vswitch's gateways.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EniInfo {
    /// `eni-...`
    pub eni: String,
    /// Its MAC.
    pub mac: String,
    /// Its vswitch.
    pub vswitch: String,
    /// The vswitch's IPv4 CIDR.
    pub cidr: String,
    /// The vswitch's IPv4 gateway.
    pub gateway: Ipv4Addr,
    /// The vswitch's IPv6 CIDR and gateway, when known (dual stack, the
    /// vswitch has IPv6 and metadata lists it for the ENI).
    pub v6: Option<(String, Ipv6Addr)>,
}

/// Pool counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatusCounts {
    /// Managed ENIs.
    pub enis: usize,
    /// Every pool IP (invalid included).
    pub ips: usize,
    /// Free for anyone.
    pub idle: usize,
    /// Held by an owner.
    pub inuse: usize,
    /// Held for a last owner (`ip_stick_time`).
    pub reserved: usize,
    /// Kept from other owners (`ip_cooldown`).
    pub cooling: usize,
    /// Asked of the cloud, not yet answered.
    pub pending: usize,
    /// IPs the node can hold.
    pub capacity: usize,
    /// The soonest exhaustion forecast, when something is being used up.
    pub exhaustion: Option<Exhaustion>,
    /// While draining: whether the node can be retired (nothing but
    /// in-use addresses remains).
    pub draining: Option<bool>,
}

/// A limit that can make an `alloc` fail (SPEC section 4, `capacity`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Ceiling {
    /// The instance's ENIs and the addresses each can hold.
    EniSlots,
    /// A vswitch's free addresses (several when every one is out).
    VSwitch(String),
    /// Prefix mode: the ENIs' slots for new /28s.
    Prefix,
}

impl Ceiling {
    /// Its kind as `capacity`, `status` and the metric name it:
    /// `eni_slots`, `vswitch`, `prefix`.
    pub fn kind(&self) -> &'static str {
        match self {
            Ceiling::EniSlots => "eni_slots",
            Ceiling::VSwitch(_) => "vswitch",
            Ceiling::Prefix => "prefix",
        }
    }

    /// The vswitch, for a vswitch's ceiling.
    pub fn vswitch(&self) -> Option<&str> {
        match self {
            Ceiling::VSwitch(id) => Some(id),
            _ => None,
        }
    }
}

/// `eni_slots`, `vswitch <id>`, `prefix`: how an `exhausted` refusal
/// names it.
impl fmt::Display for Ceiling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ceiling::VSwitch(id) => write!(f, "vswitch {id}"),
            other => f.write_str(other.kind()),
        }
    }
}

/// One ceiling as `capacity` shows it: how much of it is used, its limit,
/// how fast it is being used up and when it would be reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CeilingUse {
    /// Which.
    pub ceiling: Ceiling,
    /// Used now.
    pub used: u64,
    /// Its limit.
    pub limit: u64,
    /// How fast it is being used up, in thousandths per minute (negative:
    /// it is being given back).
    pub rate_milli_per_min: i64,
    /// Seconds until it is reached at that rate (`None`: it is not being
    /// used up).
    pub forecast_s: Option<u64>,
}

/// The soonest forecast: `status`'s `exhaust_in` and `exhaust_by`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exhaustion {
    /// Seconds until an `alloc` would fail.
    pub seconds: u64,
    /// The ceiling it would fail on.
    pub ceiling: Ceiling,
}

/// One pool address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListEntry {
    /// The address (IPv4, or the IPv6 of an unpaired IPv6).
    pub ip: IpAddr,
    /// `idle`, `inuse`, `reserved`, `cooling`, `invalid`.
    pub state: &'static str,
    /// The owner, if any.
    pub owner: Option<String>,
    /// The owner's allocation's generation (in use only).
    pub gen: Option<Generation>,
    /// The ENI.
    pub eni: String,
    /// Its IPv6, when carved from its ENI's /80 (dual stack, prefix mode),
    /// and that /80.
    pub carved: Option<(Ipv6Addr, Ipv6Prefix)>,
}

/// One managed ENI (or one being created).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EniEntry {
    /// `eni-...` (`creating` before the cloud named it).
    pub eni: String,
    /// Its MAC (`-` while being created).
    pub mac: String,
    /// Its vswitch.
    pub vswitch: String,
    /// Pool IPs on it.
    pub ips: usize,
    /// IPs asked of it and not yet answered.
    pub pending: usize,
    /// Until when its vswitch is inhibited (Unix seconds), if it is.
    pub inhibited_until: Option<u64>,
    /// Prefix mode only: how its addresses are held.
    pub prefixes: Option<PrefixUse>,
    /// The IPv6 /80 its addresses' IPv6 are carved from (dual stack), if
    /// it holds one.
    pub v6_prefix: Option<Ipv6Prefix>,
    /// The security groups eniipd gave it (`security-groups=`), when known.
    pub security_groups: Option<SecurityGroupSet>,
    /// The groups the cloud shows instead, when they were changed out of
    /// band (`security-groups-cloud=`, `-` for none): it serves no new
    /// owner until they are again `security_groups`.
    pub security_groups_cloud: Option<Vec<String>>,
}

/// How an ENI holds its addresses in prefix mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefixUse {
    /// Its /28 prefixes.
    pub prefixes: usize,
    /// Its single secondary addresses (a fallback when no /28 could be had).
    pub singles: usize,
    /// Prefixes are not asked for it now (no free /28 in its vswitch): the
    /// next demand gets single addresses.
    pub fallback: bool,
    /// Its vswitch had no /28 room when last asked: its new IPv4 capacity
    /// comes as single addresses until room returns.
    pub v4_fallback: bool,
    /// Dual stack: it holds no /80 and gets single IPv6 addresses (its
    /// vswitch had no /80 to give, or its IPv6 quota is full).
    pub v6_fallback: bool,
}

impl PrefixUse {
    /// `prefix` (only prefixes beside the primary), `single` (only single
    /// addresses), `mixed` (both); an ENI holding neither shows what it
    /// asks for next.
    pub fn mode(&self) -> &'static str {
        match (self.prefixes > 0, self.singles > 0) {
            (true, true) => "mixed",
            (true, false) => "prefix",
            (false, true) => "single",
            (false, false) if self.fallback => "single",
            (false, false) => "prefix",
        }
    }

    /// Which of its stacks are on fallback: `-`, `v4`, `v6` or `v4,v6`.
    pub fn fallback_word(&self) -> &'static str {
        match (self.v4_fallback, self.v6_fallback) {
            (false, false) => "-",
            (true, false) => "v4",
            (false, true) => "v6",
            (true, true) => "v4,v6",
        }
    }
}
