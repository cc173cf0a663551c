//! A small synchronous rtnetlink client: one blocking `NETLINK_ROUTE` socket
//! (netlink-sys) speaking rtnetlink messages ([`msg`]), request by request.
//!
//! Invariants: every receive has a deadline (`SO_RCVTIMEO`), every reply
//! loop is bounded in messages, and a reply is matched to its request by
//! sequence number. A socket answers for the network namespace it was
//! opened in, whatever thread later uses it (see [`super::netns`]).
//!
//! This file is the socket and the vocabulary ([`Link`], [`Route`],
//! [`Rule`]); what each request says and how its answers read, in the
//! kernel's wire form, is [`msg`]'s.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

use msg::Msg;

mod msg;
pub mod stopwatch;

// The netlink header's flags and control types (linux/netlink.h).
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_ECHO: u16 = 0x8;
const NLM_F_REPLACE: u16 = 0x100;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
/// The first type of a message of a protocol's own (below: control).
const NLMSG_MIN_TYPE: u16 = 0x10;
/// The room of `struct nlmsghdr`.
const NLMSG_HDRLEN: usize = 16;

/// How long one netlink answer may take.
const RECV_TIMEOUT: Duration = Duration::from_secs(5);
/// Most netlink messages one request may answer (a dump of a big table).
const MAX_REPLY_MESSAGES: usize = 1_000_000;
/// Receive buffer; a kernel dump datagram is at most a few pages.
const RECV_BUF: usize = 256 * 1024;

/// A link name's room, its terminating NUL included.
const IFNAMSIZ: usize = 16;

/// The main routing table.
pub const MAIN_TABLE: u32 = 254;

/// One link as a dump shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// ifindex.
    pub index: u32,
    /// Its name.
    pub name: String,
    /// Its hardware address (empty when it has none).
    pub mac: Vec<u8>,
    /// IFF_UP.
    pub up: bool,
}

/// An address family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// IPv4
    V4,
    /// IPv6
    V6,
}

impl Family {
    /// The family of `ip`.
    pub fn of(ip: &IpAddr) -> Family {
        match ip {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }

    /// The unspecified address (`0.0.0.0`, `::`): a default route's
    /// destination.
    pub fn any(self) -> IpAddr {
        match self {
            Family::V4 => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            Family::V6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        }
    }
}

/// One route as a dump shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Table.
    pub table: u32,
    /// Destination and prefix length (`0.0.0.0/0` or `::/0` for a default
    /// route).
    pub dst: (IpAddr, u8),
    /// Gateway.
    pub gateway: Option<IpAddr>,
    /// Output link.
    pub oif: Option<u32>,
}

/// One policy rule as a dump shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Its family.
    pub family: Family,
    /// Priority.
    pub priority: u32,
    /// `from` prefix.
    pub src: Option<(IpAddr, u8)>,
    /// `to` prefix.
    pub dst: Option<(IpAddr, u8)>,
    /// `iif` name.
    pub iif: Option<String>,
    /// Table looked up.
    pub table: u32,
}

/// A netlink socket in one network namespace.
pub struct Netlink {
    sock: Socket,
    seq: u32,
    buf: Vec<u8>,
    /// Put before the kind of each request it times ([`stopwatch`]).
    label: &'static str,
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Option<Vec<u8>> {
    let v: Vec<u8> = s
        .split(':')
        .map(|h| u8::from_str_radix(h, 16).ok().filter(|_| h.len() == 2))
        .collect::<Option<_>>()?;
    (v.len() == 6).then_some(v)
}

/// Formats a MAC as `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(mac: &[u8]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn is_errno(e: &io::Error, errno: i32) -> bool {
    e.raw_os_error() == Some(errno)
}

/// True for "already there" answers.
pub fn is_exists(e: &io::Error) -> bool {
    is_errno(e, nix::libc::EEXIST)
}

/// True for the answer of a kernel without the address family.
pub fn is_no_family(e: &io::Error) -> bool {
    is_errno(e, nix::libc::EAFNOSUPPORT)
}

/// True for "not there" answers.
pub fn is_missing(e: &io::Error) -> bool {
    is_errno(e, nix::libc::ENOENT)
        || is_errno(e, nix::libc::ENODEV)
        || is_errno(e, nix::libc::ESRCH)
}

/// The first netlink message of `bytes`: its type, its sequence number,
/// its payload, and what follows it. A length that runs past `bytes` or
/// is shorter than the header is an error, never a panic.
fn split_message(bytes: &[u8]) -> io::Result<(u16, u32, &[u8], &[u8])> {
    let bad = || io::Error::other("bad netlink answer: a message's length runs past it");
    let header = bytes.get(..NLMSG_HDRLEN).ok_or_else(bad)?;
    let word = |at: usize| {
        u32::from_ne_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    let len = word(0) as usize;
    if len < NLMSG_HDRLEN || len > bytes.len() {
        return Err(bad());
    }
    let kind = u16::from_ne_bytes([header[4], header[5]]);
    let next = bytes.get((len + 3) & !3..).unwrap_or(&[]);
    Ok((kind, word(8), &bytes[NLMSG_HDRLEN..len], next))
}

/// What one message of an answer is to its request.
#[derive(Debug)]
enum Part {
    /// One of the answer's messages (a dump's, a get's, an echo).
    Message(Msg),
    /// The answer's end: the request's acknowledgement or its error.
    End(io::Result<()>),
    /// Nothing to the request (`NLMSG_NOOP`, `NLMSG_OVERRUN`).
    Skip,
}

/// Reads one message of an answer, of type `kind`: an error message's
/// code (0 acknowledges, else the errno negated), a dump's end with the
/// dump's own error if it met one (a strict kernel's ENOENT for a table
/// that is not there comes so), or a message of the answer.
fn part_of(kind: u16, payload: &[u8]) -> io::Result<Part> {
    if kind >= NLMSG_MIN_TYPE {
        return Ok(Part::Message(Msg {
            kind,
            body: payload.to_vec(),
        }));
    }
    if kind != NLMSG_ERROR && kind != NLMSG_DONE {
        return Ok(Part::Skip);
    }
    let code = match payload.get(..4) {
        Some(c) => i32::from_ne_bytes([c[0], c[1], c[2], c[3]]),
        // An old kernel's bare end of a dump.
        None if kind == NLMSG_DONE => 0,
        None => {
            return Err(io::Error::other(
                "bad netlink answer: an error without its code",
            ))
        }
    };
    Ok(Part::End(match code {
        0 => Ok(()),
        e => Err(io::Error::from_raw_os_error(e.saturating_neg())),
    }))
}

impl std::fmt::Debug for Netlink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Netlink")
            .field("seq", &self.seq)
            .finish_non_exhaustive()
    }
}

impl Netlink {
    /// A socket in the calling thread's network namespace.
    pub fn open() -> io::Result<Netlink> {
        let mut sock = Socket::new(NETLINK_ROUTE)?;
        sock.bind_auto()?;
        sock.connect(&SocketAddr::new(0, 0))?;
        // SAFETY: `sock` owns the fd and outlives this borrow, which ends
        // with the setsockopt below.
        #[allow(unsafe_code)]
        let fd = unsafe { BorrowedFd::borrow_raw(sock.as_raw_fd()) };
        nix::sys::socket::setsockopt(
            &fd,
            nix::sys::socket::sockopt::ReceiveTimeout,
            &nix::sys::time::TimeVal::new(RECV_TIMEOUT.as_secs() as i64, 0),
        )
        .map_err(io::Error::from)?;
        // Dumps filtered by the kernel (a table, a link) where it can; a
        // kernel that cannot (before 4.20) sends everything, and the
        // readers filter.
        let _ = sock.set_netlink_get_strict_chk(true);
        Ok(Netlink {
            sock,
            seq: 0,
            buf: Vec::with_capacity(RECV_BUF),
            label: "",
        })
    }

    /// The same socket, its requests timed under kinds that start with
    /// `label` (`ctr.` for a container's: `ctr.dumplink`).
    pub fn labelled(mut self, label: &'static str) -> Netlink {
        self.label = label;
        self
    }

    /// Sends one request and collects its answer: the messages of a dump,
    /// or nothing for an acknowledged change (the change itself, with
    /// `NLM_F_ECHO`). A kernel error is the errno. Timed by [`stopwatch`]
    /// when it counts.
    fn request(&mut self, msg: Msg, flags: u16) -> io::Result<Vec<Msg>> {
        let began = stopwatch::begin();
        let kind = msg::kind(&msg, flags & NLM_F_DUMP == NLM_F_DUMP);
        let r = self.exchange(vec![(msg, flags)]);
        let label = self.label;
        stopwatch::end(began, || format!("{label}{kind}"));
        r.and_then(|mut answers| answers.pop().unwrap_or_else(|| Ok(Vec::new())))
    }

    /// Sends `requests` in one datagram (the kernel takes them in order,
    /// each on its own, and acknowledges each) and collects each one's
    /// answer, in order. The outer error is the socket's, or an answer
    /// that is not netlink.
    fn exchange(&mut self, requests: Vec<(Msg, u16)>) -> io::Result<Vec<io::Result<Vec<Msg>>>> {
        if requests.is_empty() {
            return Ok(Vec::new());
        }
        let first = self.seq.wrapping_add(1);
        let mut out = Vec::new();
        for (msg, flags) in requests {
            self.seq = self.seq.wrapping_add(1);
            let dump = flags & NLM_F_DUMP == NLM_F_DUMP;
            let flags = NLM_F_REQUEST | flags | if dump { 0 } else { NLM_F_ACK };
            let len = u32::try_from(NLMSG_HDRLEN + msg.body.len())
                .map_err(|_| io::Error::other("netlink request too long"))?;
            out.extend_from_slice(&len.to_ne_bytes());
            out.extend_from_slice(&msg.kind.to_ne_bytes());
            out.extend_from_slice(&flags.to_ne_bytes());
            out.extend_from_slice(&self.seq.to_ne_bytes());
            out.extend_from_slice(&0u32.to_ne_bytes());
            out.extend_from_slice(&msg.body);
            out.resize((out.len() + 3) & !3, 0);
        }
        let count = self.seq.wrapping_sub(first).wrapping_add(1) as usize;
        self.sock.send(&out, 0)?;

        let mut answers: Vec<Option<io::Result<Vec<Msg>>>> = (0..count).map(|_| None).collect();
        let mut got: Vec<Vec<Msg>> = (0..count).map(|_| Vec::new()).collect();
        let mut open = count;
        let mut seen = 0usize;
        while open > 0 {
            self.buf.clear();
            let n = self.sock.recv(&mut self.buf, 0)?;
            if n > self.buf.len() {
                return Err(io::Error::other("netlink answer larger than the buffer"));
            }
            let mut rest = &self.buf[..n];
            while !rest.is_empty() {
                seen += 1;
                if seen > MAX_REPLY_MESSAGES {
                    return Err(io::Error::other("netlink answer too long"));
                }
                let (kind, seq, payload, next) = split_message(rest)?;
                rest = next;
                let i = seq.wrapping_sub(first) as usize;
                if i >= count || answers[i].is_some() {
                    continue;
                }
                let done = match part_of(kind, payload)? {
                    Part::Message(m) => {
                        got[i].push(m);
                        continue;
                    }
                    Part::Skip => continue,
                    Part::End(r) => r.map(|()| std::mem::take(&mut got[i])),
                };
                answers[i] = Some(done);
                open -= 1;
            }
        }
        Ok(answers.into_iter().flatten().collect())
    }

    /// Makes `changes` with one send: the kernel takes each on its own,
    /// in order (one that fails does not stop the next), so a batch is
    /// only of changes that need nothing of each other but their order.
    /// Each change's outcome, in order (what it may find done already is
    /// fine); the outer error is the socket's. Timed as one request whose
    /// kind is its changes' kinds joined by `+`.
    pub fn batch(&mut self, changes: Vec<Change>) -> io::Result<Vec<io::Result<()>>> {
        let began = stopwatch::begin();
        let kinds: Vec<&'static str> = changes.iter().map(|c| msg::kind(&c.msg, false)).collect();
        let tolerated: Vec<fn(&io::Error) -> bool> = changes.iter().map(|c| c.fine).collect();
        let r = self.exchange(changes.into_iter().map(|c| (c.msg, c.flags)).collect());
        let label = self.label;
        stopwatch::end(began, || format!("{label}{}", kinds.join("+")));
        Ok(r?
            .into_iter()
            .zip(tolerated)
            .map(|(r, fine)| match r {
                Err(e) if fine(&e) => Ok(()),
                r => r.map(drop),
            })
            .collect())
    }

    /// Makes one change (what it may find done already is fine).
    pub fn apply(&mut self, change: Change) -> io::Result<()> {
        let fine = change.fine;
        match self.request(change.msg, change.flags) {
            Err(e) if fine(&e) => Ok(()),
            r => r.map(drop),
        }
    }

    /// Every link.
    pub fn links(&mut self) -> io::Result<Vec<Link>> {
        let msgs = self.request(msg::get_links(), NLM_F_DUMP)?;
        Ok(msgs.iter().filter_map(msg::link_of).collect())
    }

    /// The link named `name`, if any: one get, not a dump of every link
    /// (a node's hundreds of host ends would be read for each lookup).
    pub fn link_by_name(&mut self, name: &str) -> io::Result<Option<Link>> {
        // No link has a name the kernel would refuse to look up.
        if name.is_empty() || name.len() >= IFNAMSIZ {
            return Ok(None);
        }
        match self.request(msg::get_link_named(name), 0) {
            Err(e) if is_missing(&e) => Ok(None),
            r => Ok(r?.iter().filter_map(msg::link_of).find(|l| l.name == name)),
        }
    }

    /// The links whose hardware address is `mac`.
    pub fn links_by_mac(&mut self, mac: &[u8]) -> io::Result<Vec<Link>> {
        Ok(self.links()?.into_iter().filter(|l| l.mac == mac).collect())
    }

    /// Creates a veth pair: `name` here (up from the start when `up`),
    /// `peer` (down, with the hardware address `peer_mac`) in the
    /// namespace `peer_ns`. Returns `name` as the kernel made it, from
    /// the request's own answer (`NLM_F_ECHO`: no lookup after it), with
    /// its peer's ifindex there when the answer says it; `None` from a
    /// kernel that does not echo a new link (before 6.3).
    pub fn add_veth(
        &mut self,
        name: &str,
        (peer, peer_mac): (&str, &[u8]),
        peer_ns: RawFd,
        mtu: u32,
        up: bool,
    ) -> io::Result<Option<(Link, Option<u32>)>> {
        let msg = msg::new_veth((name, None), (peer, Some(peer_mac)), peer_ns, mtu, up);
        let echoed = self.request(msg, NLM_F_CREATE | NLM_F_EXCL | NLM_F_ECHO)?;
        Ok(echoed.iter().find_map(|m| {
            let link = msg::link_of(m).filter(|l| l.name == name)?;
            Some((link, msg::link_of_link(m)))
        }))
    }

    /// Same, `name` carrying the hardware address `mac` (an emulated
    /// ENI: see [`eniip_sim::hostlinks`]).
    pub fn add_veth_with_mac(
        &mut self,
        name: &str,
        mac: &[u8],
        peer: &str,
        peer_ns: RawFd,
        mtu: u32,
    ) -> io::Result<()> {
        let msg = msg::new_veth((name, Some(mac)), (peer, None), peer_ns, mtu, false);
        self.request(msg, NLM_F_CREATE | NLM_F_EXCL).map(drop)
    }

    /// Deletes a link (a veth takes its peer along).
    pub fn del_link(&mut self, index: u32) -> io::Result<()> {
        self.request(msg::del_link(index), 0).map(drop)
    }

    /// Sets a link up.
    pub fn set_up(&mut self, index: u32) -> io::Result<()> {
        self.apply(Change::set_up(index))
    }

    /// Adds `ip/prefix` to a link (already there is fine). An IPv6 address
    /// skips duplicate address detection, so it is usable at once.
    pub fn add_addr(&mut self, index: u32, ip: IpAddr, prefix: u8) -> io::Result<()> {
        self.apply(Change::add_addr(index, ip, prefix))
    }

    /// Addresses of `family` on a link, with prefix lengths.
    pub fn addrs(&mut self, index: u32, family: Family) -> io::Result<Vec<(IpAddr, u8)>> {
        let msgs = self.request(msg::get_addrs(family), NLM_F_DUMP)?;
        Ok(msgs
            .iter()
            .filter_map(|m| msg::addr_of(m, index, family))
            .collect())
    }

    /// Adds or replaces a route: `dst/prefix [via gw] dev oif table T`;
    /// with `onlink` the gateway need not be on a subnet of the link.
    pub fn replace_route(
        &mut self,
        table: u32,
        dst: (IpAddr, u8),
        gateway: Option<IpAddr>,
        oif: u32,
        onlink: bool,
    ) -> io::Result<()> {
        self.apply(Change::replace_route(table, dst, gateway, oif, onlink))
    }

    /// Adds or replaces the default route of `gateway`'s family in
    /// `table`: via `gateway`, out of `oif` (`onlink` as above).
    pub fn replace_default_route(
        &mut self,
        table: u32,
        gateway: IpAddr,
        oif: u32,
        onlink: bool,
    ) -> io::Result<()> {
        self.apply(Change::replace_default_route(table, gateway, oif, onlink))
    }

    /// Every route of `family` in `table`; none when there is no such
    /// table.
    pub fn routes(&mut self, family: Family, table: u32) -> io::Result<Vec<Route>> {
        self.routes_out(family, table, None)
    }

    /// Every route of `family` in `table` out of `oif`, if given (the
    /// kernel sends only those when it can filter a dump, see
    /// [`msg::get_routes`]; the rest are dropped here); none when there
    /// is no such table or link.
    pub fn routes_out(
        &mut self,
        family: Family,
        table: u32,
        oif: Option<u32>,
    ) -> io::Result<Vec<Route>> {
        let msgs = match self.request(msg::get_routes(family, table, oif), NLM_F_DUMP) {
            // A strict kernel's answer for a table or a link that is not
            // there.
            Err(e) if is_missing(&e) => return Ok(Vec::new()),
            r => r?,
        };
        Ok(msgs
            .iter()
            .filter_map(|m| msg::route_of(m, family))
            .filter(|r| r.table == table && oif.is_none_or(|o| r.oif == Some(o)))
            .collect())
    }

    /// Deletes a route (gone already is fine).
    pub fn del_route(&mut self, r: &Route) -> io::Result<()> {
        self.apply(Change::del_route(r))
    }

    /// Adds `[from src] [to dst] [iif IIF] lookup TABLE` at `priority`
    /// (already there is fine: one rule, never a duplicate).
    pub fn add_rule(&mut self, rule: &Rule) -> io::Result<()> {
        self.apply(Change::add_rule(rule))
    }

    /// Deletes a rule (gone already is fine).
    pub fn del_rule(&mut self, rule: &Rule) -> io::Result<()> {
        self.apply(Change::del_rule(rule))
    }

    /// Every rule of `family`.
    pub fn rules(&mut self, family: Family) -> io::Result<Vec<Rule>> {
        let msgs = self.request(msg::get_rules(Some(family)), NLM_F_DUMP)?;
        Ok(msgs
            .iter()
            .filter_map(msg::rule_of)
            .filter(|r| r.family == family)
            .collect())
    }

    /// Every IPv4 and IPv6 rule, in one dump.
    pub fn all_rules(&mut self) -> io::Result<Vec<Rule>> {
        let msgs = self.request(msg::get_rules(None), NLM_F_DUMP)?;
        Ok(msgs.iter().filter_map(msg::rule_of).collect())
    }

    /// A permanent neighbour entry `ip lladdr mac dev index`.
    pub fn replace_neigh(&mut self, index: u32, ip: IpAddr, mac: &[u8]) -> io::Result<()> {
        self.apply(Change::replace_neigh(index, ip, mac))
    }
}

/// One change to make, on its own ([`Netlink::apply`]) or with others in
/// one send ([`Netlink::batch`]): its message, its flags, and which
/// answers mean it was made already.
#[derive(Debug)]
pub struct Change {
    msg: Msg,
    flags: u16,
    fine: fn(&io::Error) -> bool,
}

fn never(_: &io::Error) -> bool {
    false
}

impl Change {
    /// Link `index` up.
    pub fn set_up(index: u32) -> Change {
        Change {
            msg: msg::set_up(index),
            flags: 0,
            fine: never,
        }
    }

    /// Link `index` to make no IPv6 link-local address when it comes up
    /// (`addrgenmode none`), so the kernel neither makes one nor runs
    /// its duplicate address detection (work that takes RTNL). Only a
    /// link that is there takes it (not its create), and only before it
    /// has its carrier (when the address is made). A kernel without
    /// IPv6 (`EAFNOSUPPORT`) makes none anyway: fine.
    pub fn no_link_local(index: u32) -> Change {
        Change {
            msg: msg::no_link_local(index),
            flags: 0,
            fine: is_no_family,
        }
    }

    /// `ip/prefix` on link `index` (already there is fine); an IPv6
    /// address without duplicate address detection.
    pub fn add_addr(index: u32, ip: IpAddr, prefix: u8) -> Change {
        Change {
            msg: msg::new_addr(index, ip, prefix),
            flags: NLM_F_CREATE | NLM_F_EXCL,
            fine: is_exists,
        }
    }

    /// The route `dst/prefix [via gw] dev oif table T`, added or
    /// replacing the one there; with `onlink` the gateway need not be on
    /// a subnet of the link.
    pub fn replace_route(
        table: u32,
        dst: (IpAddr, u8),
        gateway: Option<IpAddr>,
        oif: u32,
        onlink: bool,
    ) -> Change {
        Change {
            msg: msg::new_route(table, dst, gateway, oif, onlink),
            flags: NLM_F_CREATE | NLM_F_REPLACE,
            fine: never,
        }
    }

    /// The default route of `gateway`'s family in `table`, as
    /// [`Change::replace_route`].
    pub fn replace_default_route(table: u32, gateway: IpAddr, oif: u32, onlink: bool) -> Change {
        let any = Family::of(&gateway).any();
        Change::replace_route(table, (any, 0), Some(gateway), oif, onlink)
    }

    /// Deleting route `r` (gone already is fine).
    pub fn del_route(r: &Route) -> Change {
        Change {
            msg: msg::del_route(r),
            flags: 0,
            fine: is_missing,
        }
    }

    /// Adding `rule` (already there is fine: one rule, never a
    /// duplicate).
    pub fn add_rule(rule: &Rule) -> Change {
        Change {
            msg: msg::new_rule(rule),
            flags: NLM_F_CREATE | NLM_F_EXCL,
            fine: is_exists,
        }
    }

    /// Deleting `rule` (gone already is fine).
    pub fn del_rule(rule: &Rule) -> Change {
        Change {
            msg: msg::del_rule(rule),
            flags: 0,
            fine: is_missing,
        }
    }

    /// The permanent neighbour entry `ip lladdr mac dev index`, added or
    /// replacing the one there.
    pub fn replace_neigh(index: u32, ip: IpAddr, mac: &[u8]) -> Change {
        Change {
            msg: msg::new_neigh(index, ip, mac),
            flags: NLM_F_CREATE | NLM_F_REPLACE,
            fine: never,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a network namespace of its own (a thread that unshares one):
    /// a link is found by its name, a name no link has (or none can have)
    /// is none, not an error; a veth made up is up from the start.
    #[test]
    fn a_link_is_found_by_its_name_alone_and_a_veth_is_made_up() {
        crate::netns::in_own_netns(
            "a_link_is_found_by_its_name_alone_and_a_veth_is_made_up",
            || {
                let mut nl = Netlink::open()?;
                let lo = nl.link_by_name("lo")?.expect("lo is in every namespace");
                assert_eq!((lo.index, lo.name.as_str()), (1, "lo"));
                assert_eq!(nl.link_by_name("enipnothere")?, None);
                assert_eq!(nl.link_by_name("")?, None);
                assert_eq!(nl.link_by_name("sixteen-letters!")?, None);
                // A veth made up, its peer in the same namespace here;
                // the creating request answers it (a kernel since 6.3).
                let here = std::fs::File::open("/proc/thread-self/ns/net")?;
                let peer_mac = [0x02, 0, 0, 0, 0, 0x07];
                let echoed = nl.add_veth(
                    "enipup",
                    ("peerup", &peer_mac),
                    here.as_raw_fd(),
                    1500,
                    true,
                )?;
                let made = nl.link_by_name("enipup")?.expect("the veth was made");
                let peer = nl.link_by_name("peerup")?.expect("its peer was made");
                assert!(made.up && !peer.up, "{made:?} {peer:?}");
                // Made with one queue each way (no grace period under
                // RTNL to take the others down, see `msg::new_veth`).
                for end in ["enipup", "peerup"] {
                    assert_eq!(queues(&mut nl, end)?, (Some(1), Some(1)), "{end}");
                }
                assert_eq!(peer.mac, peer_mac);
                if let Some((e, peer_index)) = echoed {
                    assert_eq!(
                        (e.index, &e.name, &e.mac),
                        (made.index, &made.name, &made.mac)
                    );
                    assert_eq!(peer_index, Some(peer.index));
                }
                Ok(())
            },
        );
    }

    /// The transmit and receive queues the kernel made `link` with.
    fn queues(nl: &mut Netlink, link: &str) -> io::Result<(Option<u32>, Option<u32>)> {
        let answer = nl.request(msg::get_link_named(link), 0)?;
        let read = |attr| answer.iter().find_map(|m| msg::link_u32(m, attr));
        Ok((read(msg::IFLA_NUM_TX_QUEUES), read(msg::IFLA_NUM_RX_QUEUES)))
    }

    /// In a network namespace of its own: a veth made down, both ends
    /// told to make no IPv6 link-local address before they come up,
    /// come up without one (`addrgenmode none`, which the kernel keeps
    /// in the links' `addr_gen_mode`); a kernel without IPv6 has
    /// nothing to say.
    #[test]
    fn a_veth_told_before_it_comes_up_makes_no_link_local() {
        crate::netns::in_own_netns("a_veth_told_before_it_comes_up_makes_no_link_local", || {
            let mut nl = Netlink::open()?;
            let here = std::fs::File::open("/proc/thread-self/ns/net")?;
            let peer_mac = [0x02, 0, 0, 0, 0, 0x08];
            nl.add_veth(
                "enipdn",
                ("peerdn", &peer_mac),
                here.as_raw_fd(),
                1500,
                false,
            )?;
            let a = nl.link_by_name("enipdn")?.expect("the veth was made");
            let b = nl.link_by_name("peerdn")?.expect("its peer");
            assert!(!a.up && !b.up, "{a:?} {b:?}");
            let done = nl.batch(vec![
                Change::no_link_local(b.index),
                Change::set_up(b.index),
                Change::no_link_local(a.index),
                Change::set_up(a.index),
            ])?;
            assert!(done.iter().all(Result::is_ok), "{done:?}");
            assert!(nl.link_by_name("enipdn")?.is_some_and(|l| l.up));
            for link in ["enipdn", "peerdn"] {
                // None: a kernel without IPv6 has no knob.
                if let Some(mode) = crate::netns::addr_gen_mode(link)? {
                    assert_eq!(mode, "1", "{link}");
                }
            }
            Ok(())
        });
    }

    /// In a network namespace of its own: a batch answers each change,
    /// in order, one that fails not stopping the next, what was done
    /// already being fine; one dump reads IPv4 and IPv6 rules; a table's
    /// routes are its own, none for a table that is not there.
    #[test]
    fn a_batch_answers_each_change_and_dumps_read_what_they_filter() {
        crate::netns::in_own_netns(
            "a_batch_answers_each_change_and_dumps_read_what_they_filter",
            || {
                let mut nl = Netlink::open()?;
                let here = std::fs::File::open("/proc/thread-self/ns/net")?;
                nl.add_veth(
                    "enipa",
                    ("enipb", &[2, 0, 0, 0, 0, 1]),
                    here.as_raw_fd(),
                    1500,
                    true,
                )?;
                let a = nl.link_by_name("enipa")?.expect("the veth was made");
                let b = nl.link_by_name("enipb")?.expect("its peer");
                let ip: IpAddr = "10.77.0.9".parse().unwrap();
                let gw: IpAddr = "10.77.0.1".parse().unwrap();
                let rule = |family, src: IpAddr| Rule {
                    family,
                    priority: 2048,
                    src: Some((src, if src.is_ipv4() { 32 } else { 128 })),
                    dst: None,
                    iif: Some("enipa".into()),
                    table: 1001,
                };
                let r4 = rule(Family::V4, ip);
                let r6 = rule(Family::V6, "fd00::9".parse().unwrap());
                let done = nl.batch(vec![
                    Change::add_addr(b.index, ip, 32),
                    Change::add_addr(b.index, ip, 32),
                    // enipb is down: the kernel refuses a route out of it.
                    Change::replace_default_route(1001, gw, b.index, true),
                    Change::set_up(b.index),
                    Change::replace_default_route(1001, gw, b.index, true),
                    Change::add_rule(&r4),
                    Change::add_rule(&r4),
                    Change::del_rule(&rule(Family::V4, gw)),
                ])?;
                let ok: Vec<bool> = done.iter().map(Result::is_ok).collect();
                assert_eq!(
                    ok,
                    [true, true, false, true, true, true, true, true],
                    "{done:?}"
                );
                assert_eq!(nl.addrs(b.index, Family::V4)?, vec![(ip, 32)]);
                let t = nl.routes(Family::V4, 1001)?;
                assert_eq!(t.len(), 1, "{t:?}");
                assert_eq!((t[0].gateway, t[0].oif), (Some(gw), Some(b.index)));
                assert_eq!(nl.routes(Family::V4, 1002)?, vec![]);
                assert_eq!(nl.routes_out(Family::V4, 1001, Some(a.index))?, vec![]);
                let v6 = nl.add_rule(&r6).is_ok();
                let all = nl.all_rules()?;
                assert!(all.contains(&r4), "{all:?}");
                assert_eq!(all.contains(&r6), v6, "{all:?}");
                Ok(())
            },
        );
    }

    /// An answer's messages split where their lengths say, and a length
    /// shorter than the header or past the datagram is an error, not a
    /// panic or a loop.
    #[test]
    fn an_answer_splits_by_its_lengths_and_a_bad_one_is_an_error() {
        let message = |len: u32, kind: u16, seq: u32, payload: &[u8]| {
            let mut m = Vec::new();
            m.extend_from_slice(&len.to_ne_bytes());
            m.extend_from_slice(&kind.to_ne_bytes());
            m.extend_from_slice(&0u16.to_ne_bytes());
            m.extend_from_slice(&seq.to_ne_bytes());
            m.extend_from_slice(&0u32.to_ne_bytes());
            m.extend_from_slice(payload);
            m
        };
        // An error of 6 bytes' payload (padded to 8), then a done.
        let mut two = message(22, NLMSG_ERROR, 7, &[1, 2, 3, 4, 5, 6, 0, 0]);
        two.extend(message(20, NLMSG_DONE, 8, &0i32.to_ne_bytes()));
        let (kind, seq, payload, rest) = split_message(&two).unwrap();
        assert_eq!(
            (kind, seq, payload),
            (NLMSG_ERROR, 7, &[1, 2, 3, 4, 5, 6][..])
        );
        let (kind, seq, _, rest) = split_message(rest).unwrap();
        assert_eq!((kind, seq, rest.len()), (NLMSG_DONE, 8, 0));
        for bad in [
            message(15, NLMSG_DONE, 1, &[0; 4]),
            message(21, NLMSG_DONE, 1, &[0; 4]),
            two[..10].to_vec(),
        ] {
            assert!(split_message(&bad).is_err(), "{bad:?}");
        }
    }

    /// An error message's code and a dump end's are the request's
    /// outcome: 0 is done, else the errno; the rest is the answer.
    #[test]
    fn an_error_or_a_dumps_end_carries_the_requests_outcome() {
        let end = |kind, code: i32| match part_of(kind, &code.to_ne_bytes()) {
            Ok(Part::End(r)) => r.map_err(|e| e.raw_os_error()),
            other => panic!("{other:?}"),
        };
        assert_eq!(end(NLMSG_ERROR, 0), Ok(()));
        assert_eq!(end(NLMSG_ERROR, -17), Err(Some(nix::libc::EEXIST)));
        assert_eq!(end(NLMSG_DONE, 0), Ok(()));
        assert_eq!(end(NLMSG_DONE, -2), Err(Some(nix::libc::ENOENT)));
        assert!(matches!(part_of(NLMSG_DONE, &[]), Ok(Part::End(Ok(())))));
        assert!(part_of(NLMSG_ERROR, &[0, 0]).is_err());
        assert!(matches!(part_of(1, &[]), Ok(Part::Skip)));
        assert!(matches!(part_of(16, &[1, 2]), Ok(Part::Message(m)) if m.body == [1, 2]));
    }

    #[test]
    fn macs_parse_and_format() {
        let m = parse_mac("00:16:3e:0a:BC:ff").unwrap();
        assert_eq!(m, vec![0, 0x16, 0x3e, 0x0a, 0xbc, 0xff]);
        assert_eq!(format_mac(&m), "00:16:3e:0a:bc:ff");
        for bad in [
            "",
            "00:16:3e:0a:bc",
            "00:16:3e:0a:bc:ff:00",
            "0:16:3e:0a:bc:ff",
            "zz:16:3e:0a:bc:ff",
        ] {
            assert!(parse_mac(bad).is_none(), "{bad}");
        }
    }
}
