//! The line protocol, version 1 (SPEC section 4). Its pure part, which
//! can be fuzzed and property-tested on its own: bytes of one request line
//! in, a [`ClientRequest`] (local verbs, or a core [`Command`]) out; a core
//! [`Answer`] or [`AllocError`] in, its [`ClientReply`] text out; and on
//! the other side of the socket, reply lines in, a framed and typed
//! [`reply::Reply`] out ([`reply`]). Its I/O is [`client`], the client
//! side that eniipctl, eniip-cni, the tests and the benches speak
//! through, and [`reach`], which says why a client could not reach the
//! socket and what to do.
//!
//! Both sides of the socket own it: the daemon's listener
//! ([`eniipd_daemon::server`]) parses requests and renders replies; the clients
//! write requests and read replies. The names say which side of the
//! socket a type is on: a [`ClientRequest`] and a [`ClientReply`] travel
//! on it; the allocator's own `Request` (the daemon's asks of its actor)
//! and its reply channel never do.
//!
//! Invariants: a rendered reply is zero or more data lines and exactly one
//! final line (`OK`, `OK <text>`, `ERR <code>`, `ERR <code> <message>`); a
//! data line never looks like a final line; nothing rendered contains a
//! control character other than the line ends; every reply parser reads
//! the fields it knows and ignores the others ([`reply`]).

pub mod client;
pub mod reach;
pub mod reply;

use std::net::IpAddr;

use crate::core::{
    AllocError, Allocation, Answer, Attachment, CeilingUse, Command, EniEntry, EniInfo, ErrCode,
    Generation, Intent, ListEntry, Owner, SandboxId, SecurityGroupSet, StatusCounts, MAX_STICK_S,
};
use eniip_util::time::format_utc;

/// Protocol version announced by `version`.
pub const PROTOCOL_VERSION: u32 = 1;
/// Longest request line, terminator excluded.
pub const MAX_LINE: usize = 4096;
/// The `alloc` arguments that carry what an owner asks beyond an address
/// ([`Intent`]; a pod's annotations, SPEC section 6a). An eniipd that
/// refuses one of them answers `ERR bad-request` with a message that
/// begins `<argument>=<value>`; one that does not know them (older than
/// they are) answers `ERR bad-request unexpected argument
/// <argument>=<value>`.
pub use crate::core::{ARG_SECURITY_GROUPS, ARG_STACK, ARG_STICK, ARG_VSWITCH};

/// How the message of the `ERR busy` a socket-activated eniipd answers
/// while it starts begins (eniipd-protocol(7)): a client takes it for an
/// eniipd that is not there yet ([`reply::ErrReply::is_starting`]).
pub const STARTING: &str = "eniipd is starting";

/// One parsed request: a verb the connection answers itself, or a
/// [`Command`] for the allocator.
// One per request line, parsed once and moved to its handler: the size of
// an `alloc` (its attachment) costs nothing worth a box in every match.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientRequest {
    /// `ping`
    Ping,
    /// `version`
    Version,
    /// `help`
    Help,
    /// `quit`
    Quit,
    /// `keep ID [ID ...]`: adds to this connection's keep-list.
    Keep(Vec<String>),
    /// Everything the allocator answers. A parsed `gc` carries an empty
    /// keep-list: the connection fills in its own.
    Command(Command),
}

impl ClientRequest {
    /// True for the requests that change allocations (access-checked).
    pub fn is_mutating(&self) -> bool {
        match self {
            ClientRequest::Command(c) => c.is_mutating(),
            ClientRequest::Keep(_) => true,
            _ => false,
        }
    }

    /// The verb, for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            ClientRequest::Ping => "ping",
            ClientRequest::Version => "version",
            ClientRequest::Help => "help",
            ClientRequest::Quit => "quit",
            ClientRequest::Keep(_) => "keep",
            ClientRequest::Command(c) => c.name(),
        }
    }

    /// The request as a protocol line (no terminator); `parse_request` of it
    /// gives the request back (a `gc`'s keep-list travels in `keep` lines).
    pub fn to_line(&self) -> String {
        let mut s = self.name().to_string();
        let mut id = |prefix: &str, v: &str| {
            s.push(' ');
            s.push_str(prefix);
            s.push_str(v);
        };
        match self {
            ClientRequest::Keep(ids) => {
                for i in ids {
                    id("", i);
                }
            }
            ClientRequest::Command(Command::Alloc {
                owner,
                sandbox,
                prefer,
                attach,
                intent,
            }) => {
                id("", owner.as_str());
                if let Some(sb) = sandbox {
                    id("sandbox=", sb.as_str());
                }
                if let Some(ip) = prefer {
                    id("prefer=", &ip.to_string());
                }
                if let Some(a) = attach {
                    id("netns=", &a.netns);
                    id("veth=", &a.veth);
                }
                for arg in intent_args(intent) {
                    id("", &arg);
                }
            }
            ClientRequest::Command(Command::Release {
                owner,
                sandbox,
                gen,
            }) => {
                id("", owner.as_str());
                if let Some(sb) = sandbox {
                    id("sandbox=", sb.as_str());
                }
                if let Some(g) = gen {
                    id("gen=", &g.to_string());
                }
            }
            ClientRequest::Command(Command::Show { owner }) => id("", owner.as_str()),
            ClientRequest::Command(Command::Eni { eni }) => id("", eni),
            ClientRequest::Command(Command::Gc { owner_prefix, .. }) => {
                id("owner-prefix=", owner_prefix)
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
    "alloc OWNER [sandbox=ID] [prefer=IP] [vswitch=ID] [ip-stick-time=S] [ip-stack=ipv4] [security-groups=SG,...]   get (or get again) OWNER's IP",
    "release OWNER [sandbox=ID] [gen=N]     give OWNER's IP back (only that allocation's, with gen=)",
    "show OWNER                             OWNER's allocation",
    "list                                   every pool IP: ip state owner eni",
    "status                                 pool counters",
    "enis                                   managed ENIs",
    "eni ID                                 one managed ENI: MAC, vswitch, gateways",
    "audit                                  compare local state with the cloud",
    "capacity                               each ceiling: used, limit, rate per minute, forecast",
    "drain                                  retire the node: no new allocation, give back what is idle",
    "undrain                                end a drain",
    "metrics                                Prometheus metrics",
    "config                                 effective configuration",
    "keep ID [ID ...]                       add owners or sandboxes to this connection's keep-list",
    "gc owner-prefix=P                      release P* allocations not in the keep-list",
    "quit                                   close the connection",
];

/// Parses one request line (terminator already removed, a trailing `\r`
/// allowed). Never panics.
pub fn parse_request(line: &[u8]) -> Result<ClientRequest, AllocError> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.len() > MAX_LINE {
        return Err(AllocError::bare(ErrCode::LineTooLong));
    }
    let text =
        std::str::from_utf8(line).map_err(|_| AllocError::bad("request is not valid UTF-8"))?;
    if text.bytes().any(|b| b.is_ascii_control()) {
        return Err(AllocError::bad("control character in request"));
    }
    let mut words = text.split(' ').filter(|w| !w.is_empty());
    let Some(cmd) = words.next() else {
        return Err(AllocError::bad("empty request"));
    };
    let args: Vec<&str> = words.collect();
    let cmd = cmd.to_ascii_lowercase();
    let no_args = |req: ClientRequest| {
        if args.is_empty() {
            Ok(req)
        } else {
            Err(AllocError::bad(format!("{cmd} takes no arguments")))
        }
    };
    let command = |c: Command| no_args(ClientRequest::Command(c));
    match cmd.as_str() {
        "ping" => no_args(ClientRequest::Ping),
        "version" => no_args(ClientRequest::Version),
        "help" => no_args(ClientRequest::Help),
        "quit" => no_args(ClientRequest::Quit),
        "list" => command(Command::List),
        "status" => command(Command::Status),
        "enis" => command(Command::Enis),
        "audit" => command(Command::Audit),
        "metrics" => command(Command::Metrics),
        "config" => command(Command::Config),
        "capacity" => command(Command::Capacity),
        "drain" => command(Command::Drain(true)),
        "undrain" => command(Command::Drain(false)),
        "keep" => {
            if args.is_empty() {
                return Err(AllocError::bad("keep needs at least one ID"));
            }
            let ids = args
                .iter()
                .map(|a| {
                    // Owners and sandbox ids share one alphabet.
                    SandboxId::parse(a)
                        .map(|s| s.as_str().to_string())
                        .map_err(|_| AllocError::bad(format!("invalid ID {}", clip(a))))
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(ClientRequest::Keep(ids))
        }
        "gc" => {
            let mut prefix = None;
            for arg in &args {
                match arg.split_once('=') {
                    Some((k, v)) if k.eq_ignore_ascii_case("owner-prefix") && prefix.is_none() => {
                        // A prefix is an owner's beginning: same alphabet.
                        Owner::parse(v).map_err(|_| {
                            AllocError::bad(format!("invalid owner-prefix {}", clip(v)))
                        })?;
                        prefix = Some(v.to_string());
                    }
                    _ => {
                        return Err(AllocError::bad(format!(
                            "unexpected argument {}",
                            clip(arg)
                        )))
                    }
                }
            }
            let Some(owner_prefix) = prefix else {
                return Err(AllocError::bad(
                    "gc needs owner-prefix=P (without it, it would release everything)",
                ));
            };
            Ok(ClientRequest::Command(Command::Gc {
                owner_prefix,
                keep: Vec::new(),
            }))
        }
        "eni" => match args.as_slice() {
            [id] if valid_eni_id(id) => Ok(ClientRequest::Command(Command::Eni {
                eni: id.to_string(),
            })),
            [id] => Err(AllocError::bad(format!("invalid ENI id {}", clip(id)))),
            _ => Err(AllocError::bad("eni needs exactly one ENI id")),
        },
        "alloc" | "release" | "show" => parse_owner_verb(&cmd, &args),
        _ => Err(AllocError::new(
            ErrCode::UnknownCommand,
            match did_you_mean(&cmd) {
                Some(verb) => format!("{} (did you mean {verb}? try help)", clip(&cmd)),
                None => format!("{} (try help)", clip(&cmd)),
            },
        )),
    }
}

/// The command a mistyped `cmd` (lowercase) most likely meant: the
/// nearest within two edits (a swap of two neighbours counts one), if no
/// other is as near.
fn did_you_mean(cmd: &str) -> Option<&'static str> {
    let mut near: Vec<(usize, &'static str)> = HELP
        .iter()
        .filter_map(|l| l.split(' ').next())
        .map(|v| (edits(cmd, v), v))
        .filter(|(d, _)| *d <= 2)
        .collect();
    near.sort_unstable();
    match near[..] {
        [(d, one), (d2, _), ..] if d2 > d => Some(one),
        [(_, one)] => Some(one),
        _ => None,
    }
}

/// How far apart two words of a line are; a word longer than 32 is
/// never near (a client's line is bounded, the work per word too).
fn edits(a: &str, b: &str) -> usize {
    if a.len() > 32 || b.len() > 32 {
        return usize::MAX;
    }
    eniip_util::spelling::edit_distance(a, b)
}

/// `alloc`, `release` or `show` (`cmd`, lowercase) and its arguments:
/// `OWNER` then `key=value` arguments, each at most once, each where it
/// belongs.
fn parse_owner_verb(cmd: &str, args: &[&str]) -> Result<ClientRequest, AllocError> {
    let (owner, rest) = match args.split_first() {
        Some((o, rest)) => (Owner::parse(o)?, rest),
        None => return Err(AllocError::bad(format!("{cmd} needs an OWNER"))),
    };
    let mut sandbox = None;
    let mut gen = None;
    let mut prefer = None;
    let mut netns = None;
    let mut veth = None;
    let mut intent = Intent::default();
    let mut stack = None;
    for arg in rest {
        let Some((k, v)) = arg.split_once('=') else {
            return Err(AllocError::bad(format!(
                "unexpected argument {}",
                clip(arg)
            )));
        };
        match (cmd, k.to_ascii_lowercase().as_str()) {
            ("alloc" | "release", "sandbox") if sandbox.is_none() => {
                sandbox = Some(SandboxId::parse(v)?)
            }
            ("release", "gen") if gen.is_none() => gen = Some(Generation::parse(v)?),
            ("alloc", "prefer") if prefer.is_none() => {
                prefer = Some(v.parse::<IpAddr>().map_err(|_| {
                    AllocError::bad(format!("prefer={} is not an IP address", clip(v)))
                })?);
            }
            ("alloc", "netns") if netns.is_none() => netns = Some(v),
            ("alloc", "veth") if veth.is_none() => veth = Some(v),
            ("alloc", ARG_VSWITCH) if intent.vswitch.is_none() => {
                intent.vswitch = Some(parse_vswitch(v)?)
            }
            ("alloc", ARG_STICK) if intent.stick_s.is_none() => {
                intent.stick_s = Some(parse_stick(v)?)
            }
            ("alloc", ARG_STACK) if stack.is_none() => {
                stack = Some(v);
                intent.ipv4_only = parse_stack(v)?;
            }
            ("alloc", ARG_SECURITY_GROUPS) if intent.security_groups.is_none() => {
                intent.security_groups = Some(parse_security_groups(v)?)
            }
            _ => {
                return Err(AllocError::bad(format!(
                    "unexpected argument {}",
                    clip(arg)
                )))
            }
        }
    }
    let attach = match (netns, veth) {
        (None, None) => None,
        (Some(n), Some(v)) if sandbox.is_some() => Some(Attachment::parse(n, v)?),
        (Some(_), Some(_)) => {
            return Err(AllocError::bad("netns= and veth= need sandbox="));
        }
        _ => return Err(AllocError::bad("netns= and veth= go together")),
    };
    Ok(ClientRequest::Command(match cmd {
        "alloc" => Command::Alloc {
            owner,
            sandbox,
            prefer,
            attach,
            intent,
        },
        "release" => Command::Release {
            owner,
            sandbox,
            gen,
        },
        _ => Command::Show { owner },
    }))
}

/// `vswitch=ID`'s value: a vswitch id as the cloud makes them (`vsw-`
/// then 1 to 64 lowercase letters and digits).
pub fn parse_vswitch(v: &str) -> Result<String, AllocError> {
    let shaped = v.strip_prefix("vsw-").is_some_and(|rest| {
        (1..=64).contains(&rest.len())
            && rest
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    });
    if shaped {
        Ok(v.to_string())
    } else {
        Err(AllocError::bad(format!(
            "{ARG_VSWITCH}={} is not a vswitch id (vsw- then lowercase letters and digits)",
            clip(v)
        )))
    }
}

/// `ip-stick-time=SECONDS`'s value: whole seconds, at most
/// [`MAX_STICK_S`] (the config's `max_ip_stick_time` bounds it further).
pub fn parse_stick(v: &str) -> Result<u64, AllocError> {
    match v.parse::<u64>() {
        Ok(s) if s <= MAX_STICK_S && v.bytes().all(|b| b.is_ascii_digit()) => Ok(s),
        _ => Err(AllocError::bad(format!(
            "{ARG_STICK}={} is not a number of seconds from 0 to {MAX_STICK_S}",
            clip(v)
        ))),
    }
}

/// `ip-stack=`'s value: `ipv4` (IPv4 only) is the one thing to ask.
pub fn parse_stack(v: &str) -> Result<bool, AllocError> {
    if v == "ipv4" {
        Ok(true)
    } else {
        Err(AllocError::bad(format!(
            "{ARG_STACK}={}: only ipv4 can be asked (IPv4 only on a dual-stack node)",
            clip(v)
        )))
    }
}

/// `security-groups=SG,...`'s value: 1 to 5 security group ids, any
/// order, repeats counted once (answered and kept canonical).
pub fn parse_security_groups(v: &str) -> Result<SecurityGroupSet, AllocError> {
    SecurityGroupSet::parse(v)
        .map_err(|e| AllocError::bad(format!("{ARG_SECURITY_GROUPS}={}: {e}", clip(v))))
}

/// The `alloc` arguments that carry `intent` (none when it asks nothing).
pub fn intent_args(intent: &Intent) -> Vec<String> {
    let mut args = Vec::new();
    if let Some(v) = &intent.vswitch {
        args.push(format!("{ARG_VSWITCH}={v}"));
    }
    if let Some(s) = intent.stick_s {
        args.push(format!("{ARG_STICK}={s}"));
    }
    if intent.ipv4_only {
        args.push(format!("{ARG_STACK}=ipv4"));
    }
    if let Some(sgs) = &intent.security_groups {
        args.push(format!("{ARG_SECURITY_GROUPS}={sgs}"));
    }
    args
}

/// At most 64 characters of client text, for error messages.
fn clip(s: &str) -> String {
    s.chars().take(64).collect()
}

/// An ENI id as the cloud makes them (`eni-` and letters and digits): at
/// most 64 of `A-Z a-z 0-9 -`.
fn valid_eni_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// `eni=.. mac=.. vswitch=.. cidr=.. gateway=..[ cidr6=.. gateway6=..]`
pub(crate) fn eni_text(e: &EniInfo) -> String {
    let mut s = format!(
        "eni={} mac={} vswitch={} cidr={} gateway={}",
        e.eni, e.mac, e.vswitch, e.cidr, e.gateway
    );
    if let Some((cidr6, gw6)) = &e.v6 {
        s.push_str(&format!(" cidr6={cidr6} gateway6={gw6}"));
    }
    s
}

/// `ip=.. [ipv6=.. [ipv6prefix=..]] eni=.. mac=.. vswitch=.. cidr=..
/// gateway=.. [gen=N] [security-groups=SG,...]`: the allocation's
/// addresses (and the /80 its IPv6 was carved from), the IPv4 half of its
/// ENI (no IPv6 gateway: `eni` answers that), its generation (none for an
/// allocation an older eniipd recorded, until its next `alloc`) and, for
/// an owner that asked its own, its security groups.
pub(crate) fn allocation_text(a: &Allocation, eni: &EniInfo) -> String {
    let mut s = format!("ip={}", a.ip);
    if let Some(v6) = a.owner_ipv6() {
        s.push_str(&format!(" ipv6={v6}"));
        // The /80 it was carved from goes with it (an IPv4-only owner is
        // answered neither).
        if let Some(p) = a.ipv6_prefix {
            s.push_str(&format!(" ipv6prefix={p}"));
        }
    }
    s.push_str(&format!(
        " eni={} mac={} vswitch={} cidr={} gateway={}",
        eni.eni, eni.mac, eni.vswitch, eni.cidr, eni.gateway
    ));
    if !a.gen.is_none() {
        s.push_str(&format!(" gen={}", a.gen));
    }
    if let Some(sgs) = &a.intent.security_groups {
        s.push_str(&format!(" {ARG_SECURITY_GROUPS}={sgs}"));
    }
    s
}

/// The `OK` text of `status`: the counters, then the soonest forecast
/// when something is being used up (`exhaust_in=<s> exhaust_by=<ceiling>`,
/// and `exhaust_vswitch=<id>` for a vswitch's), then
/// `draining=yes retire_ready=<yes|no>` while draining.
pub fn status_text(c: &StatusCounts) -> String {
    let mut s = format!(
        "enis={} ips={} idle={} inuse={} reserved={} cooling={} pending={} capacity={}",
        c.enis, c.ips, c.idle, c.inuse, c.reserved, c.cooling, c.pending, c.capacity
    );
    if let Some(x) = &c.exhaustion {
        s.push_str(&format!(
            " exhaust_in={} exhaust_by={}",
            x.seconds,
            x.ceiling.kind()
        ));
        if let Some(v) = x.ceiling.vswitch() {
            s.push_str(&format!(" exhaust_vswitch={v}"));
        }
    }
    if let Some(ready) = c.draining {
        s.push_str(&format!(" draining=yes retire_ready={}", yes_no(ready)));
    }
    s
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// `<ceiling> [vswitch=<id>] used=N limit=N rate_per_min=<x>
/// forecast_s=<n or none>`: one `capacity` data line.
pub fn capacity_line(c: &CeilingUse) -> String {
    let mut line = c.ceiling.kind().to_string();
    if let Some(v) = c.ceiling.vswitch() {
        line.push_str(&format!(" vswitch={v}"));
    }
    let rate = c.rate_milli_per_min as f64 / 1000.0;
    line.push_str(&format!(
        " used={} limit={} rate_per_min={rate:.2} forecast_s={}",
        c.used,
        c.limit,
        c.forecast_s
            .map(|s| s.to_string())
            .unwrap_or_else(|| "none".into())
    ));
    line
}

/// `<ip> <state> <owner or -> <eni> [ipv6=<v6> ipv6prefix=<p>] [gen=N]`
/// (the two for an IPv6 carved from the ENI's /80, `gen` for an address
/// in use by an allocation that has one).
pub(crate) fn list_line(e: &ListEntry) -> String {
    let mut line = format!(
        "{} {} {} {}",
        e.ip,
        e.state,
        e.owner.as_deref().unwrap_or("-"),
        e.eni
    );
    if let Some((b, p)) = &e.carved {
        line.push_str(&format!(" ipv6={b} ipv6prefix={p}"));
    }
    if let Some(g) = e.gen.filter(|g| !g.is_none()) {
        line.push_str(&format!(" gen={g}"));
    }
    line
}

/// `<eni> <mac> <vswitch> ips=N pending=N inhibited=<rfc3339 or ->`, in
/// prefix mode then `mode= prefixes= [v6prefix=] fallback=`.
pub(crate) fn eni_line(e: &EniEntry) -> String {
    let mut line = format!(
        "{} {} {} ips={} pending={} inhibited={}",
        e.eni,
        e.mac,
        e.vswitch,
        e.ips,
        e.pending,
        e.inhibited_until
            .map(format_utc)
            .unwrap_or_else(|| "-".into())
    );
    if let Some(p) = &e.prefixes {
        line.push_str(&format!(" mode={} prefixes={}", p.mode(), p.prefixes));
    }
    if let Some(p) = &e.v6_prefix {
        line.push_str(&format!(" v6prefix={p}"));
    }
    if let Some(sgs) = &e.security_groups {
        line.push_str(&format!(" {ARG_SECURITY_GROUPS}={sgs}"));
    }
    if let Some(cloud) = &e.security_groups_cloud {
        let shown = if cloud.is_empty() {
            "-".to_string()
        } else {
            cloud.join(",")
        };
        line.push_str(&format!(" {ARG_SECURITY_GROUPS}-cloud={shown}"));
    }
    if let Some(p) = &e.prefixes {
        line.push_str(&format!(" fallback={}", p.fallback_word()));
    }
    line
}

/// The reply to a command's outcome.
pub fn answer_reply(outcome: Result<Answer, AllocError>) -> ClientReply {
    let answer = match outcome {
        Ok(a) => a,
        Err(e) => return ClientReply::err(e),
    };
    let counted = |data: Vec<String>| {
        let n = data.len();
        ClientReply::with_data(data, n.to_string())
    };
    match answer {
        Answer::Allocation(a, eni) => ClientReply::ok(allocation_text(&a, &eni)),
        Answer::Released(Some(ip)) => ClientReply::ok(format!("released={ip}")),
        Answer::Released(None) => ClientReply::ok("released=none"),
        // Read as `released=none` by a client that knows no `stale`.
        Answer::Stale => ClientReply::ok("released=none stale=yes"),
        Answer::List(l) => counted(l.iter().map(list_line).collect()),
        Answer::Status(s) => ClientReply::ok(status_text(&s)),
        Answer::Enis(l) => counted(l.iter().map(eni_line).collect()),
        Answer::Eni(e) => ClientReply::ok(eni_text(&e)),
        Answer::Audit(d) if d.is_empty() => ClientReply::ok("consistent"),
        Answer::Audit(d) => {
            let n = d.len();
            ClientReply {
                data: d,
                outcome: Err(AllocError::new(ErrCode::Inconsistent, n.to_string())),
            }
        }
        Answer::Capacity(l) => counted(l.iter().map(capacity_line).collect()),
        Answer::Draining(on) => ClientReply::ok(format!("draining={}", yes_no(on))),
        Answer::Metrics(text) => {
            ClientReply::with_data(text.lines().map(str::to_string).collect(), "")
        }
        Answer::Config(kv) => ClientReply::with_data(
            kv.into_iter().map(|(k, v)| format!("{k}={v}")).collect(),
            "",
        ),
        Answer::Collected(released) => {
            let n = released.len();
            let data = released
                .into_iter()
                .map(|c| {
                    let mut line = format!(
                        "{} {} {}",
                        c.ip,
                        c.owner,
                        c.sandbox.as_ref().map(SandboxId::as_str).unwrap_or("-")
                    );
                    if let Some(v) = &c.veth {
                        line.push_str(" veth=");
                        line.push_str(v);
                    }
                    line
                })
                .collect();
            ClientReply::with_data(data, format!("released={n}"))
        }
    }
}

/// A reply: data lines plus the final line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientReply {
    /// Zero or more data lines.
    pub(crate) data: Vec<String>,
    /// `OK [text]` or `ERR code [message]`.
    pub(crate) outcome: Result<String, AllocError>,
}

impl ClientReply {
    /// `OK` or `OK <text>` with no data.
    pub fn ok(text: impl Into<String>) -> ClientReply {
        ClientReply {
            data: Vec::new(),
            outcome: Ok(text.into()),
        }
    }

    /// Data lines then `OK <text>`.
    pub fn with_data(data: Vec<String>, text: impl Into<String>) -> ClientReply {
        ClientReply {
            data,
            outcome: Ok(text.into()),
        }
    }

    /// `ERR ...` with no data.
    pub fn err(e: AllocError) -> ClientReply {
        ClientReply {
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
                if let Some(c) = &e.cloud_code {
                    out.push(' ');
                    out.push_str(&sanitize(c));
                }
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
mod tests;

#[cfg(test)]
mod proptests;
