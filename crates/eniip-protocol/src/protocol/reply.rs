//! Replies as a client reads them, as pure functions: lines in, a framed
//! [`Reply`] out ([`Framer`]), and its text parsed into the typed replies
//! (the allocation of `alloc` and `show`, `eni`, `status`, the data lines
//! of `list`, `enis` and `gc`, `release`'s address, an `ERR` line's code
//! and message). The renderers these undo are beside the request parser
//! in the module above.
//!
//! Invariant, so a newer eniipd never breaks an installed eniip-cni or
//! eniipctl (SPEC section 6a): every parser here reads what it knows and
//! ignores the rest: a `key=value` it does not know, a bare word, a data
//! line's words past the ones it reads, an `ERR` code it has no name for.
//! Only a field it needs that is missing or malformed is an error, and the
//! error names that field.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use super::is_final_line;
use crate::core::{
    Ceiling, EniInfo, ErrCode, Exhaustion, Generation, SecurityGroupSet, StatusCounts,
    ARG_SECURITY_GROUPS,
};

/// Most data lines one reply may carry (a `gc` or `list` of a big node
/// has a few hundred).
pub const MAX_DATA_LINES: usize = 100_000;

/// One reply: its data lines and its final line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    data: Vec<String>,
    last: String,
    outcome: Result<String, ErrReply>,
}

impl Reply {
    /// The data lines, in order.
    pub fn data(&self) -> &[String] {
        &self.data
    }

    /// The final line as it came (no terminator).
    pub fn final_line(&self) -> &str {
        &self.last
    }

    /// True for `OK`.
    pub fn is_ok(&self) -> bool {
        self.outcome.is_ok()
    }

    /// The text after `OK` (empty for a bare `OK`), or the `ERR` line.
    pub fn outcome(&self) -> Result<&str, &ErrReply> {
        self.outcome.as_deref()
    }

    /// The `OK` text; for an `ERR` reply, its code and message.
    pub fn text(&self) -> &str {
        match &self.outcome {
            Ok(t) => t,
            Err(_) => self.last.strip_prefix("ERR").unwrap_or(&self.last).trim(),
        }
    }

    /// Every line of the reply, the final one last.
    pub fn into_lines(self) -> Vec<String> {
        let mut lines = self.data;
        lines.push(self.last);
        lines
    }
}

/// An `ERR <code> [message]` line. The code is kept as sent: a code this
/// version has no name for is still a code ([`ErrReply::known`] is `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrReply {
    code: String,
    message: String,
}

impl ErrReply {
    /// Reads an `ERR` line (`None` for anything else).
    pub fn parse(line: &str) -> Option<ErrReply> {
        let line = line.strip_suffix('\r').unwrap_or(line);
        let rest = line.strip_prefix("ERR")?;
        if !(rest.is_empty() || rest.starts_with(' ')) {
            return None;
        }
        let rest = rest.trim_start_matches(' ');
        let (code, message) = rest.split_once(' ').unwrap_or((rest, ""));
        Some(ErrReply {
            code: code.to_string(),
            message: message.trim().to_string(),
        })
    }

    /// The code as sent (`busy`, `not-found`, ...).
    pub fn code(&self) -> &str {
        &self.code
    }

    /// The code, if this version knows it.
    pub fn known(&self) -> Option<ErrCode> {
        ErrCode::ALL.into_iter().find(|c| c.as_str() == self.code)
    }

    /// The text after the code (for `cloud`, the service's code first).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// `ERR busy eniipd is starting ...`: a socket-activated eniipd that
    /// is not ready yet (try again; nothing was done).
    pub fn is_starting(&self) -> bool {
        self.code == "busy" && self.message.starts_with(super::STARTING)
    }

    /// The service's code of an `ERR cloud <Code> <message>`.
    pub fn cloud_code(&self) -> Option<&str> {
        (self.code == ErrCode::Cloud.as_str())
            .then(|| self.message.split(' ').next())
            .flatten()
            .filter(|c| !c.is_empty())
    }
}

impl fmt::Display for ErrReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.code)?;
        if !self.message.is_empty() {
            write!(f, " {}", self.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for ErrReply {}

/// More than [`MAX_DATA_LINES`] data lines before a final line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLong;

impl fmt::Display for TooLong {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the reply has more than {MAX_DATA_LINES} data lines")
    }
}

impl std::error::Error for TooLong {}

/// Gathers the lines of one reply until its final line.
#[derive(Debug, Default)]
pub struct Framer {
    data: Vec<String>,
}

impl Framer {
    /// Takes the next line (its `\n` or `\r\n` may still be on it): the
    /// whole reply once this was its final line.
    pub fn push(&mut self, line: &str) -> Result<Option<Reply>, TooLong> {
        let line = line.trim_end_matches(['\n', '\r']);
        if !is_final_line(line) {
            if self.data.len() >= MAX_DATA_LINES {
                return Err(TooLong);
            }
            self.data.push(line.to_string());
            return Ok(None);
        }
        let outcome = match ErrReply::parse(line) {
            Some(e) => Err(e),
            None => Ok(line.strip_prefix("OK").unwrap_or("").trim().to_string()),
        };
        Ok(Some(Reply {
            data: std::mem::take(&mut self.data),
            last: line.to_string(),
            outcome,
        }))
    }
}

/// A reply's text that is not what its request answers: names what is
/// missing or wrong (not the text: the caller has it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyError(String);

impl fmt::Display for ReplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ReplyError {}

/// The value of `key=` in a reply's text (its first, if it repeats).
pub fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.split(' ')
        .find_map(|w| w.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

/// The `key=value` words of a text, read liberally (see the module doc).
struct Fields<'a>(&'a str);

impl<'a> Fields<'a> {
    fn get(&self, key: &str) -> Option<&'a str> {
        field(self.0, key)
    }

    fn need(&self, key: &str) -> Result<&'a str, ReplyError> {
        self.get(key)
            .ok_or_else(|| ReplyError(format!("no {key}=")))
    }

    fn parsed<T: FromStr>(&self, key: &str, what: &str) -> Result<Option<T>, ReplyError> {
        self.get(key)
            .map(|v| {
                v.parse()
                    .map_err(|_| ReplyError(format!("{key}={v} is not {what}")))
            })
            .transpose()
    }

    fn need_parsed<T: FromStr>(&self, key: &str, what: &str) -> Result<T, ReplyError> {
        self.parsed(key, what)?
            .ok_or_else(|| ReplyError(format!("no {key}=")))
    }
}

/// What `alloc` and `show` answer: the addresses and the ENI they are on
/// (its `v6` is `None`: the reply carries no IPv6 gateway; `eni` does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocReply {
    /// The IPv4 address.
    pub ip: Ipv4Addr,
    /// The IPv6 address (dual stack).
    pub ipv6: Option<Ipv6Addr>,
    /// The ENI holding them.
    pub eni: EniInfo,
    /// The allocation's generation (none from an eniipd older than
    /// generations).
    pub gen: Option<Generation>,
    /// The security groups of its ENI, for an owner that asked its own
    /// (`security-groups=`; none from an eniipd older than them).
    pub security_groups: Option<SecurityGroupSet>,
}

/// Reads the `OK` text of `alloc` or `show`.
pub fn parse_allocation(text: &str) -> Result<AllocReply, ReplyError> {
    let f = Fields(text);
    Ok(AllocReply {
        ip: f.need_parsed("ip", "an IPv4 address")?,
        ipv6: f.parsed("ipv6", "an IPv6 address")?,
        eni: eni_of(&f, false)?,
        gen: f.parsed("gen", "a generation")?,
        security_groups: f.parsed(ARG_SECURITY_GROUPS, "a set of security group ids")?,
    })
}

/// Reads the `OK` text of `eni`: the IPv6 pair only when both halves are
/// there.
pub fn parse_eni(text: &str) -> Result<EniInfo, ReplyError> {
    eni_of(&Fields(text), true)
}

fn eni_of(f: &Fields<'_>, with_v6: bool) -> Result<EniInfo, ReplyError> {
    let v6 = if with_v6 {
        let gateway6 = f.parsed::<Ipv6Addr>("gateway6", "an IPv6 address")?;
        f.get("cidr6").map(str::to_string).zip(gateway6)
    } else {
        None
    };
    Ok(EniInfo {
        eni: f.need("eni")?.to_string(),
        mac: f.need("mac")?.to_string(),
        vswitch: f.need("vswitch")?.to_string(),
        cidr: f.need("cidr")?.to_string(),
        gateway: f.need_parsed("gateway", "an IPv4 address")?,
        v6,
    })
}

/// Reads the `OK` text of `status`.
pub fn parse_status(text: &str) -> Result<StatusCounts, ReplyError> {
    let f = Fields(text);
    let n = |k: &str| f.need_parsed::<usize>(k, "a count");
    Ok(StatusCounts {
        enis: n("enis")?,
        ips: n("ips")?,
        idle: n("idle")?,
        inuse: n("inuse")?,
        reserved: n("reserved")?,
        cooling: n("cooling")?,
        pending: n("pending")?,
        capacity: n("capacity")?,
        exhaustion: match (field(text, "exhaust_in"), field(text, "exhaust_by")) {
            (Some(_), Some(by)) => Some(Exhaustion {
                seconds: f.need_parsed("exhaust_in", "a number of seconds")?,
                ceiling: match by {
                    "vswitch" => Ceiling::VSwitch(
                        field(text, "exhaust_vswitch")
                            .unwrap_or_default()
                            .to_string(),
                    ),
                    "prefix" => Ceiling::Prefix,
                    _ => Ceiling::EniSlots,
                },
            }),
            _ => None,
        },
        draining: (field(text, "draining") == Some("yes"))
            .then(|| field(text, "retire_ready") == Some("yes")),
    })
}

/// Reads the `OK` text of `release`: the address given back, if any.
pub fn parse_released(text: &str) -> Result<Option<IpAddr>, ReplyError> {
    match Fields(text).need("released")? {
        "none" => Ok(None),
        v => v
            .parse()
            .map(Some)
            .map_err(|_| ReplyError(format!("released={v} is not an address"))),
    }
}

/// The first `n` words of a data line (more may follow: later fields).
fn words<'a, const N: usize>(line: &'a str, what: &str) -> Result<[&'a str; N], ReplyError> {
    let mut w = line.split(' ').filter(|w| !w.is_empty());
    let mut out = [""; N];
    for slot in &mut out {
        *slot = w
            .next()
            .ok_or_else(|| ReplyError(format!("{what} line has fewer than {N} words")))?;
    }
    Ok(out)
}

fn address(v: &str) -> Result<IpAddr, ReplyError> {
    v.parse()
        .map_err(|_| ReplyError(format!("{v} is not an address")))
}

/// A data line of `list`: `<ip> <state> <owner or -> <eni>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListLine {
    /// The address.
    pub ip: IpAddr,
    /// `idle`, `inuse`, `reserved`, `cooling`, `invalid` (or a later one).
    pub state: String,
    /// Its owner.
    pub owner: Option<String>,
    /// Its ENI.
    pub eni: String,
}

/// Reads a data line of `list`.
pub fn parse_list_line(line: &str) -> Result<ListLine, ReplyError> {
    let [ip, state, owner, eni] = words(line, "a list")?;
    Ok(ListLine {
        ip: address(ip)?,
        state: state.to_string(),
        owner: (owner != "-").then(|| owner.to_string()),
        eni: eni.to_string(),
    })
}

/// A data line of `enis`: `<eni> <mac> <vswitch> ips=N pending=N
/// inhibited=<rfc3339 or -> [mode=M prefixes=N [v6prefix=P] fallback=F]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EniLine {
    /// `eni-...` (or `creating`).
    pub eni: String,
    /// Its MAC (or `-`).
    pub mac: String,
    /// Its vswitch.
    pub vswitch: String,
    /// Pool addresses on it.
    pub ips: usize,
    /// Addresses asked of it, not yet answered.
    pub pending: usize,
    /// Until when its vswitch is inhibited (RFC 3339), if it is.
    pub inhibited: Option<String>,
    /// Prefix mode only: `prefix`, `single` or `mixed`.
    pub mode: Option<String>,
    /// Prefix mode only: its /28 prefixes.
    pub prefixes: Option<usize>,
    /// Dual stack: the IPv6 /80 its pods' IPv6 come from, if it holds one.
    pub v6_prefix: Option<String>,
    /// Prefix mode only: which stacks are on fallback (`-`, `v4`, `v6`,
    /// `v4,v6`).
    pub fallback: Option<String>,
}

/// Reads a data line of `enis`.
pub fn parse_eni_line(line: &str) -> Result<EniLine, ReplyError> {
    let [eni, mac, vswitch] = words(line, "an enis")?;
    let f = Fields(line);
    Ok(EniLine {
        eni: eni.to_string(),
        mac: mac.to_string(),
        vswitch: vswitch.to_string(),
        ips: f.need_parsed("ips", "a count")?,
        pending: f.need_parsed("pending", "a count")?,
        inhibited: f.get("inhibited").filter(|v| *v != "-").map(String::from),
        mode: f.get("mode").map(String::from),
        prefixes: f.parsed("prefixes", "a count")?,
        v6_prefix: f.get("v6prefix").map(String::from),
        fallback: f.get("fallback").map(String::from),
    })
}

/// A data line of `gc`: `<ip> <owner> <sandbox or -> [veth=NAME]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectedLine {
    /// The address released.
    pub ip: IpAddr,
    /// Its owner.
    pub owner: String,
    /// Its sandbox, when one was named.
    pub sandbox: Option<String>,
    /// The host end eniip-cni named at `alloc`, when it did.
    pub veth: Option<String>,
}

/// Reads a data line of `gc`.
pub fn parse_collected_line(line: &str) -> Result<CollectedLine, ReplyError> {
    let [ip, owner, sandbox] = words(line, "a gc")?;
    Ok(CollectedLine {
        ip: address(ip)?,
        owner: owner.to_string(),
        sandbox: (sandbox != "-").then(|| sandbox.to_string()),
        veth: Fields(line).get("veth").map(String::from),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{EniEntry, ListEntry, PrefixUse};
    use crate::protocol::tests::eni_abc as eni;

    /// `text` with words this version does not know before, between and
    /// after its own (a field a later eniipd adds, a bare word).
    fn with_unknown(text: &str) -> Vec<String> {
        let mut words: Vec<&str> = text.split(' ').collect();
        let mid = words.len() / 2;
        words.insert(mid, "zone=cn-hangzhou-i");
        vec![
            format!("future=1 {text}"),
            words.join(" "),
            format!("{text} gateway7=10.0.0.1 flags"),
            format!("{text}  trailing=  =x"),
        ]
    }

    #[test]
    fn the_allocation_reads_back_whatever_else_a_later_eniipd_adds() {
        let a = crate::core::Allocation {
            owner: crate::core::Owner::parse("ns/pod").unwrap(),
            sandbox: None,
            ip: "192.168.0.11".parse().unwrap(),
            ipv6: Some("2408:4005:300::11".parse().unwrap()),
            ipv6_prefix: None,
            eni: "eni-abc".into(),
            since_ms: 1,
            gen: Generation::from_u64(5),
            attach: None,
            intent: crate::core::Intent::default(),
        };
        let want = AllocReply {
            ip: a.ip,
            ipv6: a.ipv6,
            eni: eni(),
            gen: Some(Generation::from_u64(5)),
            security_groups: None,
        };
        let text = super::super::allocation_text(&a, &eni());
        assert!(text.starts_with("ip=192.168.0.11 ipv6=2408:4005:300::11 eni=eni-abc mac="));
        assert_eq!(parse_allocation(&text), Ok(want.clone()));
        for t in with_unknown(&text) {
            assert_eq!(parse_allocation(&t), Ok(want.clone()), "{t}");
        }
        // What it needs is still needed, and named when missing or wrong.
        let e = parse_allocation(&text.replace("ip=192.168.0.11 ", "")).unwrap_err();
        assert_eq!(e.to_string(), "no ip=");
        let e = parse_allocation(&text.replace("gateway=192.168.3.253", "gateway=x")).unwrap_err();
        assert_eq!(e.to_string(), "gateway=x is not an IPv4 address");
    }

    #[test]
    fn an_owner_with_its_own_security_groups_reads_them_back() {
        let set = crate::core::SecurityGroupSet::parse("sg-b,sg-a").unwrap();
        let a = crate::core::Allocation {
            owner: crate::core::Owner::parse("ns/pod").unwrap(),
            sandbox: None,
            ip: "192.168.0.11".parse().unwrap(),
            ipv6: None,
            ipv6_prefix: None,
            eni: "eni-abc".into(),
            since_ms: 1,
            gen: Generation::from_u64(5),
            attach: None,
            intent: crate::core::Intent {
                security_groups: Some(set.clone()),
                ..crate::core::Intent::default()
            },
        };
        let text = super::super::allocation_text(&a, &eni());
        assert!(text.ends_with(" gen=5 security-groups=sg-a,sg-b"), "{text}");
        let got = parse_allocation(&text).unwrap();
        assert_eq!(got.security_groups, Some(set));
        for t in with_unknown(&text) {
            assert_eq!(
                parse_allocation(&t).unwrap().security_groups,
                got.security_groups,
                "{t}"
            );
        }
        let e = parse_allocation(&text.replace("sg-a,sg-b", "sg-a,web")).unwrap_err();
        assert!(
            e.to_string().starts_with("security-groups=sg-a,web is not"),
            "{e}"
        );
    }

    #[test]
    fn eni_and_status_read_back_whatever_else_a_later_eniipd_adds() {
        let mut e = eni();
        e.v6 = Some((
            "2408:4005:3ff:5100::/64".into(),
            "2408:4005:3ff:5100::fff7".parse().unwrap(),
        ));
        let text = super::super::eni_text(&e);
        for t in with_unknown(&text) {
            assert_eq!(parse_eni(&t), Ok(e.clone()), "{t}");
        }
        let c = StatusCounts {
            enis: 2,
            ips: 20,
            idle: 5,
            inuse: 12,
            reserved: 1,
            cooling: 1,
            pending: 1,
            capacity: 30,
            exhaustion: None,
            draining: None,
        };
        let text = super::super::status_text(&c);
        assert_eq!(parse_status(&text), Ok(c.clone()));
        for t in with_unknown(&text) {
            assert_eq!(parse_status(&t), Ok(c.clone()), "{t}");
        }
        // A forecast and a drain read back too.
        for (exhaustion, draining) in [
            (
                Some(Exhaustion {
                    seconds: 95,
                    ceiling: Ceiling::VSwitch("vsw-a".into()),
                }),
                Some(false),
            ),
            (
                Some(Exhaustion {
                    seconds: 7,
                    ceiling: Ceiling::EniSlots,
                }),
                Some(true),
            ),
        ] {
            let c = StatusCounts {
                exhaustion,
                draining,
                ..c.clone()
            };
            let text = super::super::status_text(&c);
            assert_eq!(parse_status(&text), Ok(c.clone()), "{text}");
        }
        let e = parse_status(&text.replace("idle=5", "idle=-1")).unwrap_err();
        assert_eq!(e.to_string(), "idle=-1 is not a count");
    }

    #[test]
    fn released_reads_an_address_or_none() {
        assert_eq!(
            parse_released("released=10.0.0.9"),
            Ok(Some("10.0.0.9".parse().unwrap()))
        );
        assert_eq!(parse_released("released=none"), Ok(None));
        assert_eq!(
            parse_released("released6=::1 released=10.0.0.9 more=1"),
            Ok(Some("10.0.0.9".parse().unwrap()))
        );
        assert!(parse_released("").is_err());
        assert!(parse_released("released=x").is_err());
        assert_eq!(field("released=1.2.3.4", "released"), Some("1.2.3.4"));
        assert_eq!(field("ip=1.2.3.4 ipv6=::1", "ip"), Some("1.2.3.4"));
        assert_eq!(field("ipv6=::1", "ip"), None);
    }

    #[test]
    fn data_lines_read_back_with_later_words_ignored() {
        let entry = ListEntry {
            ip: "10.0.0.3".parse().unwrap(),
            state: "inuse",
            owner: Some("ns/pod".into()),
            gen: None,
            eni: "eni-1".into(),
            carved: None,
        };
        let want = ListLine {
            ip: entry.ip,
            state: "inuse".into(),
            owner: Some("ns/pod".into()),
            eni: "eni-1".into(),
        };
        let line = super::super::list_line(&entry);
        assert_eq!(parse_list_line(&line), Ok(want.clone()));
        assert_eq!(
            parse_list_line(&format!("{line} since=2026-01-01T00:00:00Z x")),
            Ok(want)
        );
        let idle = parse_list_line("10.0.0.4 idle - eni-1").unwrap();
        assert_eq!(idle.owner, None);
        assert!(parse_list_line("10.0.0.4 idle -").is_err());

        let mut entry = EniEntry {
            eni: "eni-1".into(),
            mac: "00:16:3e:00:00:01".into(),
            vswitch: "vsw-1".into(),
            ips: 10,
            pending: 2,
            inhibited_until: None,
            prefixes: None,
            v6_prefix: None,
            security_groups: None,
            security_groups_cloud: None,
        };
        let line = super::super::eni_line(&entry);
        let read = parse_eni_line(&line).unwrap();
        assert_eq!(
            (read.ips, read.pending, read.inhibited, read.mode),
            (10, 2, None, None)
        );
        for t in with_unknown(&line) {
            // Past the three leading words: a field may go anywhere there.
            if t.starts_with("future") {
                continue;
            }
            assert_eq!(parse_eni_line(&t).unwrap().ips, 10, "{t}");
        }
        entry.inhibited_until = Some(1_800_000_000);
        entry.prefixes = Some(PrefixUse {
            prefixes: 3,
            singles: 0,
            fallback: false,
            v4_fallback: false,
            v6_fallback: false,
        });
        let read = parse_eni_line(&super::super::eni_line(&entry)).unwrap();
        assert_eq!(read.inhibited.as_deref(), Some("2027-01-15T08:00:00Z"));
        assert_eq!(
            (
                read.mode.as_deref(),
                read.prefixes,
                read.fallback.as_deref()
            ),
            (Some("prefix"), Some(3), Some("-"))
        );
        for (v4, v6, word) in [
            (true, false, "v4"),
            (false, true, "v6"),
            (true, true, "v4,v6"),
        ] {
            entry.prefixes = Some(PrefixUse {
                prefixes: 3,
                singles: 2,
                fallback: v4,
                v4_fallback: v4,
                v6_fallback: v6,
            });
            let read = parse_eni_line(&super::super::eni_line(&entry)).unwrap();
            assert_eq!(read.fallback.as_deref(), Some(word));
        }

        let c = parse_collected_line("10.0.0.14 batch/job-7 abc veth=enip0 later=1").unwrap();
        assert_eq!(
            c,
            CollectedLine {
                ip: "10.0.0.14".parse().unwrap(),
                owner: "batch/job-7".into(),
                sandbox: Some("abc".into()),
                veth: Some("enip0".into()),
            }
        );
        let c = parse_collected_line("10.0.0.14 batch/job-7 -").unwrap();
        assert_eq!((c.sandbox, c.veth), (None, None));
    }

    #[test]
    fn err_lines_keep_their_code_and_message_known_or_not() {
        let e = ErrReply::parse("ERR cloud Throttling.User Request was denied").unwrap();
        assert_eq!(e.code(), "cloud");
        assert_eq!(e.known(), Some(ErrCode::Cloud));
        assert_eq!(e.cloud_code(), Some("Throttling.User"));
        assert_eq!(e.message(), "Throttling.User Request was denied");
        assert_eq!(e.to_string(), "cloud Throttling.User Request was denied");
        let e = ErrReply::parse("ERR not-found\r").unwrap();
        assert_eq!((e.code(), e.message()), ("not-found", ""));
        assert_eq!(e.cloud_code(), None);
        // A code a later eniipd adds is a code all the same.
        let e = ErrReply::parse("ERR quota-frozen until tomorrow").unwrap();
        assert_eq!((e.code(), e.known()), ("quota-frozen", None));
        assert_eq!(ErrReply::parse("ERRORS 2"), None);
        assert_eq!(ErrReply::parse("OK"), None);
        // Every code this version renders reads back as itself.
        for code in ErrCode::ALL {
            let line = crate::protocol::ClientReply::err(crate::core::AllocError::new(code, "why"))
                .render();
            let e = ErrReply::parse(line.trim_end()).unwrap();
            assert_eq!((e.known(), e.message()), (Some(code), "why"), "{line}");
        }
    }

    #[test]
    fn the_framer_gives_a_reply_at_its_final_line_only() {
        let mut f = Framer::default();
        assert_eq!(f.push("10.0.0.1 idle - eni-1\n"), Ok(None));
        assert_eq!(f.push("OKAY is data\r\n"), Ok(None));
        let r = f.push("OK 2\r\n").unwrap().unwrap();
        assert_eq!(r.data(), ["10.0.0.1 idle - eni-1", "OKAY is data"]);
        assert_eq!(
            (r.outcome(), r.text(), r.final_line()),
            (Ok("2"), "2", "OK 2")
        );
        let r = f.push("ERR busy try later").unwrap().unwrap();
        assert!(r.data().is_empty() && !r.is_ok());
        assert_eq!(r.outcome().unwrap_err().code(), "busy");
        assert_eq!(r.text(), "busy try later");
        assert_eq!(r.clone().into_lines(), ["ERR busy try later"]);
        let r = f.push("OK").unwrap().unwrap();
        assert_eq!((r.outcome(), r.text()), (Ok(""), ""));
        for _ in 0..MAX_DATA_LINES {
            assert_eq!(f.push("x"), Ok(None));
        }
        assert_eq!(f.push("x"), Err(TooLong));
    }
}
