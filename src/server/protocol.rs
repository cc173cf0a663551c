//! The line protocol, version 1 (SPEC section 4), as pure functions: bytes of
//! one request line in, a [`Request`] out; a [`Reply`] in, its text out. No
//! I/O, so it can be fuzzed and property-tested on its own.
//!
//! Invariants: a rendered reply is zero or more data lines and exactly one
//! final line (`OK`, `OK <text>`, `ERR <code>`, `ERR <code> <message>`); a
//! data line never looks like a final line; nothing rendered contains a
//! control character other than the line ends.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Protocol version announced by `version`.
pub const PROTOCOL_VERSION: u32 = 1;
/// Longest request line, terminator excluded.
pub const MAX_LINE: usize = 4096;
/// Longest owner or sandbox id.
pub const MAX_ID: usize = 255;

/// Stable error codes of `ERR` lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrCode {
    /// Malformed request or argument.
    BadRequest,
    /// No such command.
    UnknownCommand,
    /// Request longer than [`MAX_LINE`]; the server closes after it.
    LineTooLong,
    /// `show` of an owner holding nothing.
    NotFound,
    /// No IP can be had: capacity reached or vswitches empty.
    Exhausted,
    /// `alloc` waited `alloc_timeout`.
    Timeout,
    /// The cloud refused: `ERR cloud <Code> <message>`.
    Cloud,
    /// Too many requests in flight.
    Busy,
    /// The peer may not use this command.
    Denied,
    /// The daemon is stopping.
    ShuttingDown,
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
            ErrCode::Inconsistent => "inconsistent",
            ErrCode::Internal => "internal",
        }
    }

    /// Every code, for documentation checks.
    pub const ALL: [ErrCode; 12] = [
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
        ErrCode::Inconsistent,
        ErrCode::Internal,
    ];
}

impl fmt::Display for ErrCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An `ERR` answer: code plus optional message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtoError {
    /// The stable code.
    pub code: ErrCode,
    /// Human text (may be empty). For `cloud` it starts with the service
    /// code: `InvalidVSwitchId.IpNotEnough The specified ...`.
    pub message: String,
}

impl ProtoError {
    /// An error with a message.
    pub fn new(code: ErrCode, message: impl Into<String>) -> ProtoError {
        ProtoError {
            code,
            message: message.into(),
        }
    }

    /// An error with no message.
    pub fn bare(code: ErrCode) -> ProtoError {
        ProtoError::new(code, "")
    }

    fn bad(message: impl Into<String>) -> ProtoError {
        ProtoError::new(ErrCode::BadRequest, message)
    }
}

impl fmt::Display for ProtoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "{}", self.code)
        } else {
            write!(f, "{} {}", self.code, self.message)
        }
    }
}

impl std::error::Error for ProtoError {}

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
    pub fn parse(s: &str) -> Result<Owner, ProtoError> {
        if valid_id(s) {
            Ok(Owner(s.to_string()))
        } else {
            Err(ProtoError::bad(
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
    pub fn parse(s: &str) -> Result<SandboxId, ProtoError> {
        if valid_id(s) {
            Ok(SandboxId(s.to_string()))
        } else {
            Err(ProtoError::bad(
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

/// One parsed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `ping`
    Ping,
    /// `version`
    Version,
    /// `help`
    Help,
    /// `alloc OWNER [sandbox=ID] [prefer=IP]`
    Alloc {
        /// Who gets the IP.
        owner: Owner,
        /// The sandbox (pod sandbox / container) asking.
        sandbox: Option<SandboxId>,
        /// An IP to prefer if it is free.
        prefer: Option<IpAddr>,
    },
    /// `release OWNER [sandbox=ID]`
    Release {
        /// Whose IP.
        owner: Owner,
        /// Only if held by this sandbox (or by none).
        sandbox: Option<SandboxId>,
    },
    /// `show OWNER`
    Show {
        /// Whose allocation.
        owner: Owner,
    },
    /// `list`
    List,
    /// `status`
    Status,
    /// `enis`
    Enis,
    /// `audit`
    Audit,
    /// `metrics`
    Metrics,
    /// `config`
    Config,
    /// `keep ID [ID ...]`: adds owner or sandbox ids to this connection's
    /// keep-list (for `gc`).
    Keep {
        /// Owner or sandbox ids, each valid as either.
        ids: Vec<String>,
    },
    /// `gc owner-prefix=P`: releases every in-use allocation whose owner
    /// starts with P and whose owner and sandbox are both off the
    /// connection's keep-list; then empties the keep-list.
    Gc {
        /// The owner prefix (never empty: a `gc` of everything is refused).
        owner_prefix: String,
    },
    /// `quit`
    Quit,
}

impl Request {
    /// True for the commands that change allocations (access-checked).
    pub fn is_mutating(&self) -> bool {
        matches!(
            self,
            Request::Alloc { .. } | Request::Release { .. } | Request::Gc { .. }
        )
    }

    /// The command name, for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Request::Ping => "ping",
            Request::Version => "version",
            Request::Help => "help",
            Request::Alloc { .. } => "alloc",
            Request::Release { .. } => "release",
            Request::Show { .. } => "show",
            Request::List => "list",
            Request::Status => "status",
            Request::Enis => "enis",
            Request::Audit => "audit",
            Request::Metrics => "metrics",
            Request::Config => "config",
            Request::Keep { .. } => "keep",
            Request::Gc { .. } => "gc",
            Request::Quit => "quit",
        }
    }

    /// The request as a protocol line (no terminator); `parse_request` of it
    /// gives the request back.
    pub fn to_line(&self) -> String {
        let mut s = self.name().to_string();
        match self {
            Request::Alloc {
                owner,
                sandbox,
                prefer,
            } => {
                s.push(' ');
                s.push_str(owner.as_str());
                if let Some(sb) = sandbox {
                    s.push_str(" sandbox=");
                    s.push_str(sb.as_str());
                }
                if let Some(ip) = prefer {
                    s.push_str(&format!(" prefer={ip}"));
                }
            }
            Request::Release { owner, sandbox } => {
                s.push(' ');
                s.push_str(owner.as_str());
                if let Some(sb) = sandbox {
                    s.push_str(" sandbox=");
                    s.push_str(sb.as_str());
                }
            }
            Request::Show { owner } => {
                s.push(' ');
                s.push_str(owner.as_str());
            }
            Request::Keep { ids } => {
                for id in ids {
                    s.push(' ');
                    s.push_str(id);
                }
            }
            Request::Gc { owner_prefix } => {
                s.push_str(" owner-prefix=");
                s.push_str(owner_prefix);
            }
            _ => {}
        }
        s
    }
}

/// Synopsis of every command, one per `help` data line.
pub const HELP: &[&str] = &[
    "ping                                   check the daemon answers",
    "version                                daemon and protocol version",
    "help                                   this list",
    "alloc OWNER [sandbox=ID] [prefer=IP]   get (or get again) OWNER's IP",
    "release OWNER [sandbox=ID]             give OWNER's IP back",
    "show OWNER                             OWNER's allocation",
    "list                                   every pool IP: ip state owner eni",
    "status                                 pool counters",
    "enis                                   managed ENIs",
    "audit                                  compare local state with the cloud",
    "metrics                                Prometheus metrics",
    "config                                 effective configuration",
    "keep ID [ID ...]                       add owner/sandbox ids to this connection's keep-list",
    "gc owner-prefix=P                      release P* allocations not on the keep-list",
    "quit                                   close the connection",
];

/// Parses one request line (terminator already removed, a trailing `\r`
/// allowed). Never panics.
pub fn parse_request(line: &[u8]) -> Result<Request, ProtoError> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.len() > MAX_LINE {
        return Err(ProtoError::bare(ErrCode::LineTooLong));
    }
    let text =
        std::str::from_utf8(line).map_err(|_| ProtoError::bad("request is not valid UTF-8"))?;
    if text.bytes().any(|b| b.is_ascii_control()) {
        return Err(ProtoError::bad("control character in request"));
    }
    let mut words = text.split(' ').filter(|w| !w.is_empty());
    let Some(cmd) = words.next() else {
        return Err(ProtoError::bad("empty request"));
    };
    let args: Vec<&str> = words.collect();
    let cmd = cmd.to_ascii_lowercase();
    let no_args = |req: Request| {
        if args.is_empty() {
            Ok(req)
        } else {
            Err(ProtoError::bad(format!("{cmd} takes no arguments")))
        }
    };
    match cmd.as_str() {
        "ping" => no_args(Request::Ping),
        "version" => no_args(Request::Version),
        "help" => no_args(Request::Help),
        "list" => no_args(Request::List),
        "status" => no_args(Request::Status),
        "enis" => no_args(Request::Enis),
        "audit" => no_args(Request::Audit),
        "metrics" => no_args(Request::Metrics),
        "config" => no_args(Request::Config),
        "quit" => no_args(Request::Quit),
        "keep" => {
            if args.is_empty() {
                return Err(ProtoError::bad("keep needs at least one ID"));
            }
            let mut ids = Vec::with_capacity(args.len());
            for a in &args {
                if !valid_id(a) {
                    return Err(ProtoError::bad(format!(
                        "invalid id {} (1..255 of A-Z a-z 0-9 . _ - / : @)",
                        clip(a)
                    )));
                }
                ids.push(a.to_string());
            }
            Ok(Request::Keep { ids })
        }
        "gc" => match args.as_slice() {
            [arg] => match arg.split_once('=') {
                Some((k, v)) if k.eq_ignore_ascii_case("owner-prefix") && valid_id(v) => {
                    Ok(Request::Gc {
                        owner_prefix: v.to_string(),
                    })
                }
                _ => Err(ProtoError::bad(format!(
                    "unexpected argument {} (gc owner-prefix=P)",
                    clip(arg)
                ))),
            },
            _ => Err(ProtoError::bad(
                "gc needs exactly owner-prefix=P (it would release everything)",
            )),
        },
        "alloc" | "release" | "show" => {
            let (owner, rest) = match args.split_first() {
                Some((o, rest)) => (Owner::parse(o)?, rest),
                None => return Err(ProtoError::bad(format!("{cmd} needs an OWNER"))),
            };
            let mut sandbox = None;
            let mut prefer = None;
            for arg in rest {
                let Some((k, v)) = arg.split_once('=') else {
                    return Err(ProtoError::bad(format!(
                        "unexpected argument {}",
                        clip(arg)
                    )));
                };
                match (cmd.as_str(), k.to_ascii_lowercase().as_str()) {
                    ("alloc" | "release", "sandbox") if sandbox.is_none() => {
                        sandbox = Some(SandboxId::parse(v)?)
                    }
                    ("alloc", "prefer") if prefer.is_none() => {
                        prefer = Some(v.parse::<IpAddr>().map_err(|_| {
                            ProtoError::bad(format!("prefer={} is not an IP address", clip(v)))
                        })?);
                    }
                    _ => {
                        return Err(ProtoError::bad(format!(
                            "unexpected argument {}",
                            clip(arg)
                        )))
                    }
                }
            }
            Ok(match cmd.as_str() {
                "alloc" => Request::Alloc {
                    owner,
                    sandbox,
                    prefer,
                },
                "release" => Request::Release { owner, sandbox },
                _ => Request::Show { owner },
            })
        }
        _ => Err(ProtoError::new(
            ErrCode::UnknownCommand,
            format!("{} (try help)", clip(&cmd)),
        )),
    }
}

/// At most 64 characters of client text, for error messages.
fn clip(s: &str) -> String {
    s.chars().take(64).collect()
}

/// An IP handed to an owner, as `alloc` and `show` print it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    /// The IPv4 address.
    pub ip: Ipv4Addr,
    /// The IPv6 address (dual stack).
    pub ipv6: Option<Ipv6Addr>,
    /// The ENI holding it.
    pub eni: String,
    /// That ENI's MAC.
    pub mac: String,
    /// The ENI's vswitch.
    pub vswitch: String,
    /// The vswitch CIDR.
    pub cidr: String,
    /// The vswitch gateway.
    pub gateway: Ipv4Addr,
}

impl Allocation {
    /// `ip=.. [ipv6=..] eni=.. mac=.. vswitch=.. cidr=.. gateway=..`
    pub fn to_text(&self) -> String {
        let mut s = format!("ip={}", self.ip);
        if let Some(v6) = self.ipv6 {
            s.push_str(&format!(" ipv6={v6}"));
        }
        s.push_str(&format!(
            " eni={} mac={} vswitch={} cidr={} gateway={}",
            self.eni, self.mac, self.vswitch, self.cidr, self.gateway
        ));
        s
    }

    /// Parses [`Allocation::to_text`] output (used by clients and tests).
    pub fn parse(text: &str) -> Option<Allocation> {
        let mut ip = None;
        let mut ipv6 = None;
        let (mut eni, mut mac, mut vswitch, mut cidr, mut gateway) = (None, None, None, None, None);
        for word in text.split(' ').filter(|w| !w.is_empty()) {
            let (k, v) = word.split_once('=')?;
            match k {
                "ip" => ip = Some(v.parse().ok()?),
                "ipv6" => ipv6 = Some(v.parse().ok()?),
                "eni" => eni = Some(v.to_string()),
                "mac" => mac = Some(v.to_string()),
                "vswitch" => vswitch = Some(v.to_string()),
                "cidr" => cidr = Some(v.to_string()),
                "gateway" => gateway = Some(v.parse().ok()?),
                _ => return None,
            }
        }
        Some(Allocation {
            ip: ip?,
            ipv6,
            eni: eni?,
            mac: mac?,
            vswitch: vswitch?,
            cidr: cidr?,
            gateway: gateway?,
        })
    }
}

/// Pool counters for `status`.
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
}

impl StatusCounts {
    /// The `OK` text of `status`.
    pub fn to_text(&self) -> String {
        format!(
            "enis={} ips={} idle={} inuse={} reserved={} cooling={} pending={} capacity={}",
            self.enis,
            self.ips,
            self.idle,
            self.inuse,
            self.reserved,
            self.cooling,
            self.pending,
            self.capacity
        )
    }
}

/// One `list` data line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListEntry {
    /// The address (IPv4, or the IPv6 of an unpaired IPv6).
    pub ip: IpAddr,
    /// `idle`, `inuse`, `reserved`, `cooling`, `invalid`.
    pub state: &'static str,
    /// The owner, if any.
    pub owner: Option<String>,
    /// The ENI.
    pub eni: String,
}

impl ListEntry {
    /// `<ip> <state> <owner or -> <eni>`
    pub fn to_line(&self) -> String {
        format!(
            "{} {} {} {}",
            self.ip,
            self.state,
            self.owner.as_deref().unwrap_or("-"),
            self.eni
        )
    }
}

/// One `gc` data line: an allocation it released.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcEntry {
    /// The released address.
    pub ip: IpAddr,
    /// Its owner.
    pub owner: Owner,
    /// Its sandbox, if it had one.
    pub sandbox: Option<SandboxId>,
}

impl GcEntry {
    /// `<ip> <owner> <sandbox or ->`
    pub fn to_line(&self) -> String {
        format!(
            "{} {} {}",
            self.ip,
            self.owner,
            self.sandbox.as_ref().map_or("-", |s| s.as_str())
        )
    }
}

/// One `enis` data line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EniEntry {
    /// `eni-...`
    pub eni: String,
    /// Its MAC (`-` while being created).
    pub mac: String,
    /// Its vswitch.
    pub vswitch: String,
    /// Pool IPs on it.
    pub ips: usize,
    /// IPs asked of it and not yet answered.
    pub pending: usize,
    /// Until when its vswitch is inhibited (RFC 3339), if it is.
    pub inhibited_until: Option<String>,
}

impl EniEntry {
    /// `<eni> <mac> <vswitch> ips=N pending=N inhibited=<rfc3339 or ->`
    pub fn to_line(&self) -> String {
        format!(
            "{} {} {} ips={} pending={} inhibited={}",
            self.eni,
            self.mac,
            self.vswitch,
            self.ips,
            self.pending,
            self.inhibited_until.as_deref().unwrap_or("-")
        )
    }
}

/// A reply: data lines plus the final line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// Zero or more data lines.
    pub data: Vec<String>,
    /// `OK [text]` or `ERR code [message]`.
    pub outcome: Result<String, ProtoError>,
}

impl Reply {
    /// `OK` or `OK <text>` with no data.
    pub fn ok(text: impl Into<String>) -> Reply {
        Reply {
            data: Vec::new(),
            outcome: Ok(text.into()),
        }
    }

    /// Data lines then `OK <text>`.
    pub fn with_data(data: Vec<String>, text: impl Into<String>) -> Reply {
        Reply {
            data,
            outcome: Ok(text.into()),
        }
    }

    /// `ERR ...` with no data.
    pub fn err(e: ProtoError) -> Reply {
        Reply {
            data: Vec::new(),
            outcome: Err(e),
        }
    }

    /// The wire text: each line ends in `\n`.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for line in &self.data {
            let line = sanitize(line);
            if is_final_line(&line) {
                // Keep the framing unambiguous whatever a data source produced.
                out.push(' ');
            }
            out.push_str(&line);
            out.push('\n');
        }
        match &self.outcome {
            Ok(text) if text.is_empty() => out.push_str("OK\n"),
            Ok(text) => {
                out.push_str("OK ");
                out.push_str(&sanitize(text));
                out.push('\n');
            }
            Err(e) => {
                out.push_str("ERR ");
                out.push_str(e.code.as_str());
                let msg = sanitize(&e.message);
                if !msg.is_empty() {
                    out.push(' ');
                    out.push_str(&msg);
                }
                out.push('\n');
            }
        }
        out
    }
}

/// Replaces control characters (a newline in a cloud message, say) with
/// spaces, so one logical line stays one line.
fn sanitize(s: &str) -> String {
    if s.chars().any(char::is_control) {
        s.chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect()
    } else {
        s.to_string()
    }
}

/// True when `line` (no terminator) is a final line: `OK` or `ERR`, then a
/// space or the end.
pub fn is_final_line(line: &str) -> bool {
    let line = line.strip_suffix('\r').unwrap_or(line);
    for word in ["OK", "ERR"] {
        if let Some(rest) = line.strip_prefix(word) {
            if rest.is_empty() || rest.starts_with(' ') {
                return true;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Request, ProtoError> {
        parse_request(s.as_bytes())
    }

    #[test]
    fn commands_parse_case_insensitively() {
        assert_eq!(parse("PING").unwrap(), Request::Ping);
        assert_eq!(parse("Version\r").unwrap(), Request::Version);
        assert_eq!(parse("  status  ").unwrap(), Request::Status);
        for name in ["help", "list", "enis", "audit", "metrics", "config", "quit"] {
            assert_eq!(parse(name).unwrap().name(), name);
        }
    }

    #[test]
    fn alloc_arguments() {
        let r = parse("alloc default/web-1 sandbox=abc123 prefer=192.168.0.10").unwrap();
        assert_eq!(
            r,
            Request::Alloc {
                owner: Owner::parse("default/web-1").unwrap(),
                sandbox: Some(SandboxId::parse("abc123").unwrap()),
                prefer: Some("192.168.0.10".parse().unwrap()),
            }
        );
        assert_eq!(parse(&r.to_line()).unwrap(), r);
        assert!(parse("alloc a sandbox=x sandbox=y").is_err());
        assert!(parse("alloc a prefer=nope").is_err());
        assert!(parse("alloc a colour=blue").is_err());
        assert!(parse("alloc a extra").is_err());
        assert!(parse("release a prefer=10.0.0.1").is_err());
        assert!(parse("show a sandbox=x").is_err());
        assert!(parse("ping extra").is_err());
    }

    #[test]
    fn owners_are_validated() {
        assert!(parse("alloc").is_err());
        assert!(parse("alloc ns/name:80@x_y-z.w").is_ok());
        assert_eq!(parse("alloc a|b").unwrap_err().code, ErrCode::BadRequest);
        assert_eq!(parse("alloc é").unwrap_err().code, ErrCode::BadRequest);
        let long = "a".repeat(256);
        assert_eq!(
            parse(&format!("alloc {long}")).unwrap_err().code,
            ErrCode::BadRequest
        );
        assert!(parse(&format!("alloc {}", "a".repeat(255))).is_ok());
    }

    #[test]
    fn keep_and_gc() {
        let r = parse("KEEP net/a net/b sandbox-1").unwrap();
        assert_eq!(
            r,
            Request::Keep {
                ids: vec!["net/a".into(), "net/b".into(), "sandbox-1".into()]
            }
        );
        assert_eq!(parse(&r.to_line()).unwrap(), r);
        assert!(!r.is_mutating());
        let g = parse("gc owner-prefix=cni-net/").unwrap();
        assert_eq!(
            g,
            Request::Gc {
                owner_prefix: "cni-net/".into()
            }
        );
        assert_eq!(parse(&g.to_line()).unwrap(), g);
        assert!(g.is_mutating());
        // gc without a prefix would release everything: refused.
        for bad in [
            "gc",
            "gc owner-prefix=",
            "gc prefix=a",
            "gc owner-prefix=a extra",
            "gc a",
            "keep",
            "keep a b*c",
        ] {
            assert_eq!(parse(bad).unwrap_err().code, ErrCode::BadRequest, "{bad}");
        }
    }

    #[test]
    fn garbage_is_refused_not_panicked() {
        assert_eq!(
            parse_request(&[0xff, 0xfe]).unwrap_err().code,
            ErrCode::BadRequest
        );
        assert_eq!(
            parse_request(b"ping\x00").unwrap_err().code,
            ErrCode::BadRequest
        );
        assert_eq!(parse_request(b"").unwrap_err().code, ErrCode::BadRequest);
        assert_eq!(
            parse("frobnicate").unwrap_err().code,
            ErrCode::UnknownCommand
        );
        let long = vec![b'a'; MAX_LINE + 1];
        assert_eq!(parse_request(&long).unwrap_err().code, ErrCode::LineTooLong);
    }

    #[test]
    fn replies_render_with_one_final_line() {
        let r = Reply::with_data(
            vec!["10.0.0.1 idle - eni-1".into(), "OK sneaky".into()],
            "2",
        );
        let text = r.render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines.iter().filter(|l| is_final_line(l)).count(), 1);
        assert_eq!(lines[2], "OK 2");
        let e = Reply::err(ProtoError::new(ErrCode::Cloud, "Throttling.User too\nmany"));
        assert_eq!(e.render(), "ERR cloud Throttling.User too many\n");
        assert_eq!(Reply::ok("").render(), "OK\n");
        assert_eq!(
            Reply::err(ProtoError::bare(ErrCode::NotFound)).render(),
            "ERR not-found\n"
        );
    }

    #[test]
    fn allocation_text_round_trips() {
        let a = Allocation {
            ip: "192.168.0.11".parse().unwrap(),
            ipv6: Some("2408:4005:300::11".parse().unwrap()),
            eni: "eni-abc".into(),
            mac: "00:16:3e:00:00:01".into(),
            vswitch: "vsw-1".into(),
            cidr: "192.168.0.0/22".into(),
            gateway: "192.168.3.253".parse().unwrap(),
        };
        let t = a.to_text();
        assert!(t.starts_with("ip=192.168.0.11 ipv6=2408:4005:300::11 eni=eni-abc mac="));
        assert_eq!(Allocation::parse(&t), Some(a));
    }

    #[test]
    fn final_line_detection() {
        assert!(is_final_line("OK"));
        assert!(is_final_line("OK pong"));
        assert!(is_final_line("ERR busy"));
        assert!(!is_final_line("OKAY"));
        assert!(!is_final_line("ERRORS 1"));
        assert!(!is_final_line(" OK"));
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    fn id() -> impl Strategy<Value = String> {
        "[A-Za-z0-9._:@/-]{1,40}"
    }

    fn request() -> impl Strategy<Value = Request> {
        prop_oneof![
            Just(Request::Ping),
            Just(Request::Status),
            Just(Request::List),
            Just(Request::Quit),
            (
                id(),
                proptest::option::of(id()),
                proptest::option::of(any::<[u8; 4]>())
            )
                .prop_map(|(o, s, p)| Request::Alloc {
                    owner: Owner::parse(&o).unwrap(),
                    sandbox: s.map(|s| SandboxId::parse(&s).unwrap()),
                    prefer: p.map(|b| IpAddr::V4(Ipv4Addr::from(b))),
                }),
            (id(), proptest::option::of(id())).prop_map(|(o, s)| Request::Release {
                owner: Owner::parse(&o).unwrap(),
                sandbox: s.map(|s| SandboxId::parse(&s).unwrap()),
            }),
            id().prop_map(|o| Request::Show {
                owner: Owner::parse(&o).unwrap()
            }),
            proptest::collection::vec(id(), 1..20).prop_map(|ids| Request::Keep { ids }),
            id().prop_map(|p| Request::Gc { owner_prefix: p }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Any bytes: a request or an error, never a panic; errors render
        /// as exactly one final line.
        #[test]
        fn never_panics_on_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..5000)) {
            match parse_request(&bytes) {
                Ok(r) => prop_assert!(parse_request(r.to_line().as_bytes()).is_ok()),
                Err(e) => {
                    let text = Reply::err(e).render();
                    prop_assert_eq!(text.matches('\n').count(), 1);
                    prop_assert!(text.starts_with("ERR "));
                }
            }
        }

        /// Printable lines too (closer to what parses).
        #[test]
        fn never_panics_on_text(line in "[ -~]{0,300}") {
            let _ = parse_request(line.as_bytes());
        }

        /// Rendering a request and parsing it gives it back.
        #[test]
        fn round_trip(r in request()) {
            prop_assert_eq!(parse_request(r.to_line().as_bytes()).unwrap(), r);
        }

        /// Whatever the data, a reply has exactly one final line, last.
        #[test]
        fn replies_are_framed(data in proptest::collection::vec("[ -~\n\r\t]{0,60}", 0..8), ok in any::<bool>(), text in "[ -~\n]{0,40}") {
            let outcome = if ok { Ok(text) } else { Err(ProtoError::new(ErrCode::Cloud, text)) };
            let rendered = Reply { data, outcome }.render();
            let lines: Vec<&str> = rendered.split_terminator('\n').collect();
            prop_assert_eq!(lines.iter().filter(|l| is_final_line(l)).count(), 1);
            prop_assert!(is_final_line(lines.last().unwrap()));
        }
    }
}
