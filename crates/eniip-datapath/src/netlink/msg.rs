//! What each rtnetlink request says and how its answers read, in the
//! kernel's own wire form (`linux/rtnetlink.h`, `if_link.h`,
//! `if_addr.h`, `fib_rules.h`, `neighbour.h`): the messages built from
//! the plugin's vocabulary ([`Link`], [`Route`], [`Rule`], [`Family`])
//! and read back into it. Pure: no socket and no I/O; which flags a
//! request carries and what an error means is the socket's business
//! ([`super::Netlink`]).
//!
//! Written here rather than taken from netlink-packet-route: the
//! datapath says fifteen messages and reads five, a few hundred lines,
//! where that crate's parsers for every link kind and attribute were
//! 13 % of eniipd's text, mapped and resident in every daemon for its
//! reaper's teardown (BENCHMARKS.md, "eniipd without the emulator").
//!
//! Invariants: a message's body is its family header then its
//! attributes, each padded to 4 bytes; a reader never trusts a length
//! (an attribute or a header that runs past its message ends the read,
//! it never panics); a table id travels whole in the `Table` attribute,
//! the header's 8-bit table field holding it when it fits and 252
//! (`RT_TABLE_COMPAT`) when it does not, as iproute2 does.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::RawFd;

use super::{Family, Link, Route, Rule};

// Message types (linux/rtnetlink.h).
const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
const RTM_GETLINK: u16 = 18;
const RTM_SETLINK: u16 = 19;
const RTM_NEWADDR: u16 = 20;
const RTM_GETADDR: u16 = 22;
const RTM_NEWROUTE: u16 = 24;
const RTM_DELROUTE: u16 = 25;
const RTM_GETROUTE: u16 = 26;
const RTM_NEWNEIGH: u16 = 28;
const RTM_NEWRULE: u16 = 32;
const RTM_DELRULE: u16 = 33;
const RTM_GETRULE: u16 = 34;

const AF_UNSPEC: u8 = 0;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;

// Links (linux/if_link.h, linux/veth.h, linux/if.h).
const IFLA_ADDRESS: u16 = 1;
const IFLA_IFNAME: u16 = 3;
const IFLA_MTU: u16 = 4;
const IFLA_LINK: u16 = 5;
const IFLA_LINKINFO: u16 = 18;
const IFLA_AF_SPEC: u16 = 26;
const IFLA_NET_NS_FD: u16 = 28;
const IFLA_EXT_MASK: u16 = 29;
pub(super) const IFLA_NUM_TX_QUEUES: u16 = 31;
pub(super) const IFLA_NUM_RX_QUEUES: u16 = 32;
const IFLA_INFO_KIND: u16 = 1;
const IFLA_INFO_DATA: u16 = 2;
const VETH_INFO_PEER: u16 = 1;
const IFLA_INET6_ADDR_GEN_MODE: u16 = 8;
const IN6_ADDR_GEN_MODE_NONE: u8 = 1;
const RTEXT_FILTER_SKIP_STATS: u32 = 1 << 3;
const IFF_UP: u32 = 1;

// Addresses (linux/if_addr.h).
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IFA_FLAGS: u16 = 8;
const IFA_F_NODAD: u8 = 0x02;

// Routes (linux/rtnetlink.h).
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RTA_TABLE: u16 = 15;
const RTPROT_BOOT: u8 = 3;
const RT_SCOPE_UNIVERSE: u8 = 0;
const RT_SCOPE_LINK: u8 = 253;
const RT_SCOPE_NOWHERE: u8 = 255;
const RTN_UNICAST: u8 = 1;
const RTNH_F_ONLINK: u32 = 4;
const RT_TABLE_MAIN: u8 = 254;
const RT_TABLE_COMPAT: u8 = 252;

// Rules (linux/fib_rules.h).
const FRA_DST: u16 = 1;
const FRA_SRC: u16 = 2;
const FRA_IIFNAME: u16 = 3;
const FRA_PRIORITY: u16 = 6;
const FRA_TABLE: u16 = 15;
const FR_ACT_TO_TBL: u8 = 1;

// Neighbours (linux/neighbour.h).
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
const NUD_PERMANENT: u16 = 0x80;

/// An attribute's type without the nested and byte-order flags.
const NLA_TYPE_MASK: u16 = 0x3fff;
/// The room of `struct ifinfomsg`, the header of a link message.
const IFINFOMSG_LEN: usize = 16;

/// One rtnetlink message without its netlink header: its type, and its
/// body (the family header and the attributes) as the kernel reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Msg {
    /// `RTM_*`.
    pub(super) kind: u16,
    /// The family header, then the attributes.
    pub(super) body: Vec<u8>,
}

/// A body being written: a family header, then attributes.
struct Body(Vec<u8>);

impl Body {
    fn new(header: &[u8]) -> Body {
        Body(header.to_vec())
    }

    fn attr(&mut self, kind: u16, payload: &[u8]) -> &mut Body {
        let len = 4 + payload.len();
        self.0.extend_from_slice(&(len as u16).to_ne_bytes());
        self.0.extend_from_slice(&kind.to_ne_bytes());
        self.0.extend_from_slice(payload);
        self.pad();
        self
    }

    fn u32(&mut self, kind: u16, v: u32) -> &mut Body {
        self.attr(kind, &v.to_ne_bytes())
    }

    /// A NUL-terminated string, as the kernel's names are.
    fn str(&mut self, kind: u16, s: &str) -> &mut Body {
        let mut payload = s.as_bytes().to_vec();
        payload.push(0);
        self.attr(kind, &payload)
    }

    fn ip(&mut self, kind: u16, ip: IpAddr) -> &mut Body {
        match ip {
            IpAddr::V4(a) => self.attr(kind, &a.octets()),
            IpAddr::V6(a) => self.attr(kind, &a.octets()),
        }
    }

    /// An attribute whose payload `inner` writes (a nested one, or a
    /// header with attributes after it, as a veth's peer).
    fn nest(&mut self, kind: u16, inner: impl FnOnce(&mut Body)) -> &mut Body {
        let at = self.0.len();
        self.0.extend_from_slice(&[0; 4]);
        let mut b = Body(std::mem::take(&mut self.0));
        inner(&mut b);
        self.0 = b.0;
        let len = (self.0.len() - at) as u16;
        self.0[at..at + 2].copy_from_slice(&len.to_ne_bytes());
        self.0[at + 2..at + 4].copy_from_slice(&kind.to_ne_bytes());
        self.pad();
        self
    }

    fn pad(&mut self) {
        self.0.resize((self.0.len() + 3) & !3, 0);
    }

    fn msg(&mut self, kind: u16) -> Msg {
        Msg {
            kind,
            body: std::mem::take(&mut self.0),
        }
    }
}

/// `struct ifinfomsg`: family unspecified.
fn ifinfomsg(index: u32, flags: u32, change: u32) -> [u8; IFINFOMSG_LEN] {
    let mut h = [0u8; IFINFOMSG_LEN];
    h[4..8].copy_from_slice(&index.to_ne_bytes());
    h[8..12].copy_from_slice(&flags.to_ne_bytes());
    h[12..16].copy_from_slice(&change.to_ne_bytes());
    h
}

/// `struct rtmsg`.
struct RtMsg {
    family: u8,
    dst_len: u8,
    table: u8,
    protocol: u8,
    scope: u8,
    kind: u8,
    flags: u32,
}

impl RtMsg {
    fn bytes(&self) -> [u8; 12] {
        let mut h = [0u8; 12];
        h[0] = self.family;
        h[1] = self.dst_len;
        // [2] src_len, [3] tos: 0.
        h[4] = self.table;
        h[5] = self.protocol;
        h[6] = self.scope;
        h[7] = self.kind;
        h[8..12].copy_from_slice(&self.flags.to_ne_bytes());
        h
    }
}

fn af(family: Family) -> u8 {
    match family {
        Family::V4 => AF_INET,
        Family::V6 => AF_INET6,
    }
}

/// The header's 8-bit table field for `table`.
fn table_byte(table: u32) -> u8 {
    u8::try_from(table).unwrap_or(RT_TABLE_COMPAT)
}

/// The attributes from `bytes` on, as (type, payload); the read ends at
/// the first one that runs past `bytes`.
fn attrs(bytes: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut rest = bytes;
    std::iter::from_fn(move || {
        if rest.len() < 4 {
            return None;
        }
        let len = usize::from(u16::from_ne_bytes([rest[0], rest[1]]));
        let kind = u16::from_ne_bytes([rest[2], rest[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > rest.len() {
            rest = &[];
            return None;
        }
        let payload = &rest[4..len];
        rest = rest.get((len + 3) & !3..).unwrap_or(&[]);
        Some((kind, payload))
    })
}

/// The body of `m` after a family header of `header` bytes, if it is a
/// message of type `kind` with room for that header.
fn body_of(m: &Msg, kind: u16, header: usize) -> Option<(&[u8], &[u8])> {
    (m.kind == kind && m.body.len() >= header).then(|| m.body.split_at(header))
}

fn u32_of(payload: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(payload.get(..4)?.try_into().ok()?))
}

/// A name as the kernel writes it: up to its NUL.
fn str_of(payload: &[u8]) -> String {
    let end = payload
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(payload.len());
    String::from_utf8_lossy(&payload[..end]).into_owned()
}

fn ip_of(payload: &[u8]) -> Option<IpAddr> {
    if let Ok(a) = <[u8; 4]>::try_from(payload) {
        return Some(IpAddr::V4(Ipv4Addr::from(a)));
    }
    <[u8; 16]>::try_from(payload)
        .ok()
        .map(|a| IpAddr::V6(Ipv6Addr::from(a)))
}

/// A request's kind, for [`super::stopwatch`]: the message's type in
/// iproute2's words (`newlink`, `getlink`), a dump's as `dump...`.
pub(super) fn kind(m: &Msg, dump: bool) -> &'static str {
    match (m.kind, dump) {
        (RTM_GETLINK, true) => "dumplink",
        (RTM_GETLINK, false) => "getlink",
        (RTM_NEWLINK, _) => "newlink",
        (RTM_SETLINK, _) => "setlink",
        (RTM_DELLINK, _) => "dellink",
        (RTM_NEWADDR, _) => "newaddr",
        (RTM_GETADDR, _) => "dumpaddr",
        (RTM_NEWROUTE, _) => "newroute",
        (RTM_DELROUTE, _) => "delroute",
        (RTM_GETROUTE, _) => "dumproute",
        (RTM_NEWRULE, _) => "newrule",
        (RTM_DELRULE, _) => "delrule",
        (RTM_GETRULE, _) => "dumprule",
        (RTM_NEWNEIGH, _) => "newneigh",
        _ => "other",
    }
}

/// A dump of every link, without their counters (what is read of a link
/// is its name, address and flags; a dump's length is what it costs,
/// under RTNL, and a node has hundreds of links).
pub(super) fn get_links() -> Msg {
    Body::new(&ifinfomsg(0, 0, 0))
        .u32(IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS)
        .msg(RTM_GETLINK)
}

/// The one link named `name` (a get, not a dump), without its counters.
pub(super) fn get_link_named(name: &str) -> Msg {
    Body::new(&ifinfomsg(0, 0, 0))
        .str(IFLA_IFNAME, name)
        .u32(IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS)
        .msg(RTM_GETLINK)
}

/// A link of a dump.
pub(super) fn link_of(m: &Msg) -> Option<Link> {
    let (h, rest) = body_of(m, RTM_NEWLINK, IFINFOMSG_LEN)?;
    let mut link = Link {
        index: u32_of(&h[4..8])?,
        name: String::new(),
        mac: Vec::new(),
        up: u32_of(&h[8..12])? & IFF_UP != 0,
    };
    for (kind, payload) in attrs(rest) {
        match kind {
            IFLA_IFNAME => link.name = str_of(payload),
            IFLA_ADDRESS => link.mac = payload.to_vec(),
            _ => {}
        }
    }
    Some(link)
}

/// A `u32` attribute `attr` of a link of a dump or echo.
pub(super) fn link_u32(m: &Msg, attr: u16) -> Option<u32> {
    let (_, rest) = body_of(m, RTM_NEWLINK, IFINFOMSG_LEN)?;
    attrs(rest)
        .find(|(k, _)| *k == attr)
        .and_then(|(_, p)| u32_of(p))
}

/// A veth pair: `name` here (with hardware address `mac` if given),
/// `peer` in the namespace `peer_ns` (with `peer_mac` if given); `name`
/// up from the start when `up`
/// (the kernel sets its flags once both ends are made, so no separate
/// request sets it up later). The peer cannot be: the kernel sets its
/// flags before the two ends know each other, and a veth without its
/// peer refuses to go up (ENOTCONN).
///
/// Each end with one transmit and one receive queue, said in the
/// request: without that the kernel makes a queue per possible CPU,
/// then, each end registered, takes the real ones down to one, which
/// waits for an RCU grace period (`synchronize_net`, expedited) twice
/// per pair while holding RTNL — under a storm the longest holds of
/// RTNL there are.
pub(super) fn new_veth(
    (name, mac): (&str, Option<&[u8]>),
    (peer, peer_mac): (&str, Option<&[u8]>),
    peer_ns: RawFd,
    mtu: u32,
    up: bool,
) -> Msg {
    let flags = if up { IFF_UP } else { 0 };
    let mut b = Body::new(&ifinfomsg(0, flags, flags));
    b.str(IFLA_IFNAME, name)
        .u32(IFLA_MTU, mtu)
        .u32(IFLA_NUM_TX_QUEUES, 1)
        .u32(IFLA_NUM_RX_QUEUES, 1)
        .nest(IFLA_LINKINFO, |info| {
            info.str(IFLA_INFO_KIND, "veth")
                .nest(IFLA_INFO_DATA, |data| {
                    // The peer: a link message of its own, header and
                    // attributes, as the payload.
                    data.nest(VETH_INFO_PEER, |p| {
                        p.0.extend_from_slice(&ifinfomsg(0, 0, 0));
                        p.str(IFLA_IFNAME, peer)
                            .u32(IFLA_MTU, mtu)
                            .u32(IFLA_NUM_TX_QUEUES, 1)
                            .u32(IFLA_NUM_RX_QUEUES, 1)
                            .u32(IFLA_NET_NS_FD, peer_ns as u32);
                        if let Some(mac) = peer_mac {
                            p.attr(IFLA_ADDRESS, mac);
                        }
                    });
                });
        });
    if let Some(mac) = mac {
        b.attr(IFLA_ADDRESS, mac);
    }
    b.msg(RTM_NEWLINK)
}

/// The ifindex of the link a link of a dump or echo names as its own
/// (`IFLA_LINK`: a veth's peer, in the peer's namespace).
pub(super) fn link_of_link(m: &Msg) -> Option<u32> {
    link_u32(m, IFLA_LINK)
}

/// Deleting link `index`.
pub(super) fn del_link(index: u32) -> Msg {
    Body::new(&ifinfomsg(index, 0, 0)).msg(RTM_DELLINK)
}

/// Setting link `index` up.
pub(super) fn set_up(index: u32) -> Msg {
    Body::new(&ifinfomsg(index, IFF_UP, IFF_UP)).msg(RTM_SETLINK)
}

/// Link `index` to make no IPv6 link-local address when it comes up
/// (`addrgenmode none`).
pub(super) fn no_link_local(index: u32) -> Msg {
    Body::new(&ifinfomsg(index, 0, 0))
        .nest(IFLA_AF_SPEC, |spec| {
            spec.nest(u16::from(AF_INET6), |inet6| {
                inet6.attr(IFLA_INET6_ADDR_GEN_MODE, &[IN6_ADDR_GEN_MODE_NONE]);
            });
        })
        .msg(RTM_SETLINK)
}

/// `struct ifaddrmsg`.
fn ifaddrmsg(family: u8, prefix: u8, flags: u8, index: u32) -> [u8; 8] {
    let mut h = [0u8; 8];
    h[0] = family;
    h[1] = prefix;
    h[2] = flags;
    // [3] scope: 0.
    h[4..8].copy_from_slice(&index.to_ne_bytes());
    h
}

/// `ip/prefix` on link `index`; an IPv6 address skips duplicate address
/// detection, so it is usable at once.
pub(super) fn new_addr(index: u32, ip: IpAddr, prefix: u8) -> Msg {
    let nodad = if ip.is_ipv6() { IFA_F_NODAD } else { 0 };
    let mut b = Body::new(&ifaddrmsg(af(Family::of(&ip)), prefix, nodad, index));
    b.ip(IFA_LOCAL, ip).ip(IFA_ADDRESS, ip);
    if ip.is_ipv6() {
        b.u32(IFA_FLAGS, u32::from(IFA_F_NODAD));
    }
    b.msg(RTM_NEWADDR)
}

/// A dump of the addresses of `family`.
pub(super) fn get_addrs(family: Family) -> Msg {
    Body::new(&ifaddrmsg(af(family), 0, 0, 0)).msg(RTM_GETADDR)
}

/// An address of a dump, with its prefix length, if it is on link
/// `index` and of `family`.
pub(super) fn addr_of(m: &Msg, index: u32, family: Family) -> Option<(IpAddr, u8)> {
    let (h, rest) = body_of(m, RTM_NEWADDR, 8)?;
    if u32_of(&h[4..8])? != index {
        return None;
    }
    let (mut local, mut addr) = (None, None);
    for (kind, payload) in attrs(rest) {
        match kind {
            IFA_LOCAL => local = ip_of(payload),
            // IPv6 addresses come as IFA_ADDRESS alone.
            IFA_ADDRESS => addr = ip_of(payload),
            _ => {}
        }
    }
    local
        .or(addr)
        .filter(|ip| Family::of(ip) == family)
        .map(|ip| (ip, h[1]))
}

/// The route `dst/prefix [via gw] dev oif table T`; with `onlink` the
/// gateway need not be on a subnet of the link.
pub(super) fn new_route(
    table: u32,
    dst: (IpAddr, u8),
    gateway: Option<IpAddr>,
    oif: u32,
    onlink: bool,
) -> Msg {
    let family = Family::of(&dst.0);
    let header = RtMsg {
        family: af(family),
        dst_len: dst.1,
        table: table_byte(table),
        protocol: RTPROT_BOOT,
        scope: if gateway.is_some() || family == Family::V6 {
            RT_SCOPE_UNIVERSE
        } else {
            RT_SCOPE_LINK
        },
        kind: RTN_UNICAST,
        flags: if onlink { RTNH_F_ONLINK } else { 0 },
    };
    let mut b = Body::new(&header.bytes());
    if dst.1 > 0 {
        b.ip(RTA_DST, dst.0);
    }
    if let Some(gw) = gateway {
        b.ip(RTA_GATEWAY, gw);
    }
    b.u32(RTA_OIF, oif).u32(RTA_TABLE, table).msg(RTM_NEWROUTE)
}

/// A dump of the routes of `family` in `table` (out of `oif`, if
/// given): a kernel that checks dump requests strictly
/// (`NETLINK_GET_STRICT_CHK`) sends only those; another sends every
/// route of the family, for the reader to filter.
pub(super) fn get_routes(family: Family, table: u32, oif: Option<u32>) -> Msg {
    let header = RtMsg {
        family: af(family),
        dst_len: 0,
        table: 0,
        protocol: 0,
        scope: 0,
        kind: 0,
        flags: 0,
    };
    let mut b = Body::new(&header.bytes());
    b.u32(RTA_TABLE, table);
    if let Some(oif) = oif {
        b.u32(RTA_OIF, oif);
    }
    b.msg(RTM_GETROUTE)
}

/// A route of a dump of `family`.
pub(super) fn route_of(m: &Msg, family: Family) -> Option<Route> {
    let (h, rest) = body_of(m, RTM_NEWROUTE, 12)?;
    let mut route = Route {
        table: u32::from(h[4]),
        dst: (family.any(), h[1]),
        gateway: None,
        oif: None,
    };
    for (kind, payload) in attrs(rest) {
        match kind {
            RTA_TABLE => route.table = u32_of(payload)?,
            RTA_DST => {
                if let Some(d) = ip_of(payload) {
                    route.dst.0 = d;
                }
            }
            RTA_GATEWAY => route.gateway = ip_of(payload),
            RTA_OIF => route.oif = u32_of(payload),
            _ => {}
        }
    }
    if route.table == 0 {
        route.table = u32::from(RT_TABLE_MAIN);
    }
    Some(route)
}

/// Deleting route `r`.
pub(super) fn del_route(r: &Route) -> Msg {
    let header = RtMsg {
        family: af(Family::of(&r.dst.0)),
        dst_len: r.dst.1,
        table: table_byte(r.table),
        protocol: 0,
        scope: RT_SCOPE_NOWHERE,
        kind: 0,
        flags: 0,
    };
    let mut b = Body::new(&header.bytes());
    if r.dst.1 > 0 {
        b.ip(RTA_DST, r.dst.0);
    }
    if let Some(oif) = r.oif {
        b.u32(RTA_OIF, oif);
    }
    b.u32(RTA_TABLE, r.table).msg(RTM_DELROUTE)
}

/// Adding `rule`.
pub(super) fn new_rule(rule: &Rule) -> Msg {
    rule_body(rule).msg(RTM_NEWRULE)
}

/// Deleting `rule`.
pub(super) fn del_rule(rule: &Rule) -> Msg {
    rule_body(rule).msg(RTM_DELRULE)
}

/// `struct fib_rule_hdr` for `family`.
fn fib_rule_hdr(family: u8, dst_len: u8, src_len: u8, table: u8, action: u8) -> [u8; 12] {
    let mut h = [0u8; 12];
    h[0] = family;
    h[1] = dst_len;
    h[2] = src_len;
    // [3] tos: 0.
    h[4] = table;
    // [5], [6] reserved.
    h[7] = action;
    h
}

fn rule_body(rule: &Rule) -> Body {
    let len = |p: Option<(IpAddr, u8)>| p.map_or(0, |(_, n)| n);
    let mut b = Body::new(&fib_rule_hdr(
        af(rule.family),
        len(rule.dst),
        len(rule.src),
        table_byte(rule.table),
        FR_ACT_TO_TBL,
    ));
    if let Some((src, _)) = rule.src {
        b.ip(FRA_SRC, src);
    }
    if let Some((dst, _)) = rule.dst {
        b.ip(FRA_DST, dst);
    }
    if let Some(iif) = &rule.iif {
        b.str(FRA_IIFNAME, iif);
    }
    b.u32(FRA_PRIORITY, rule.priority)
        .u32(FRA_TABLE, rule.table);
    b
}

/// A dump of the rules of `family`, or of every family (IPv4 and IPv6
/// in one answer) without one.
pub(super) fn get_rules(family: Option<Family>) -> Msg {
    let family = family.map_or(AF_UNSPEC, af);
    Body::new(&fib_rule_hdr(family, 0, 0, 0, 0)).msg(RTM_GETRULE)
}

/// An IPv4 or IPv6 rule of a dump (a multicast routing rule is none).
pub(super) fn rule_of(m: &Msg) -> Option<Rule> {
    let (h, rest) = body_of(m, RTM_NEWRULE, 12)?;
    let family = match h[0] {
        AF_INET => Family::V4,
        AF_INET6 => Family::V6,
        _ => return None,
    };
    let (dst_len, src_len) = (h[1], h[2]);
    let mut rule = Rule {
        family,
        priority: 0,
        src: None,
        dst: None,
        iif: None,
        table: u32::from(h[4]),
    };
    for (kind, payload) in attrs(rest) {
        match kind {
            FRA_PRIORITY => rule.priority = u32_of(payload)?,
            FRA_SRC => rule.src = ip_of(payload).map(|ip| (ip, src_len)),
            FRA_DST => rule.dst = ip_of(payload).map(|ip| (ip, dst_len)),
            FRA_IIFNAME => rule.iif = Some(str_of(payload)),
            FRA_TABLE => rule.table = u32_of(payload)?,
            _ => {}
        }
    }
    Some(rule)
}

/// The permanent neighbour entry `ip lladdr mac dev index`.
pub(super) fn new_neigh(index: u32, ip: IpAddr, mac: &[u8]) -> Msg {
    // struct ndmsg: family, 3 bytes of padding, ifindex, state, flags,
    // type.
    let mut h = [0u8; 12];
    h[0] = af(Family::of(&ip));
    h[4..8].copy_from_slice(&index.to_ne_bytes());
    h[8..10].copy_from_slice(&NUD_PERMANENT.to_ne_bytes());
    h[11] = RTN_UNICAST;
    Body::new(&h)
        .ip(NDA_DST, ip)
        .attr(NDA_LLADDR, mac)
        .msg(RTM_NEWNEIGH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_reads_back_as_written_whatever_its_table() {
        for table in [254, 1000] {
            let rule = Rule {
                family: Family::V4,
                priority: 512,
                src: Some(("192.168.0.7".parse().unwrap(), 32)),
                dst: None,
                iif: Some("eth1".into()),
                table,
            };
            let m = new_rule(&rule);
            assert_eq!(m.body[4], table_byte(table));
            // What the kernel sends back is a new rule, whatever it was
            // asked.
            assert_eq!(rule_of(&del_rule(&rule)), None);
            assert_eq!(rule_of(&m), Some(rule));
        }
    }

    #[test]
    fn a_route_reads_back_as_written() {
        let gw: IpAddr = "192.168.0.253".parse().unwrap();
        let m = new_route(1003, (Family::V4.any(), 0), Some(gw), 7, true);
        let want = Route {
            table: 1003,
            dst: (Family::V4.any(), 0),
            gateway: Some(gw),
            oif: Some(7),
        };
        assert_eq!(route_of(&m, Family::V4), Some(want));
        assert_eq!(link_of(&m), None);
        let host: IpAddr = "fd00::9".parse().unwrap();
        let m = new_route(254, (host, 128), None, 9, false);
        let got = route_of(&m, Family::V6).expect("a route");
        assert_eq!((got.dst, got.table, got.oif), ((host, 128), 254, Some(9)));
    }

    /// A link message byte for byte as iproute2 (`ip link add enipa
    /// mtu 1500 up type veth peer name enipb`, with the queues and the
    /// namespace) would say it, native endian: attributes padded, the
    /// peer a link message of its own inside `IFLA_INFO_DATA`.
    #[test]
    fn a_veth_request_is_the_kernel_wire_form() {
        let m = new_veth(
            ("enipa", None),
            ("enipb", Some(&[2, 0, 0, 0, 0, 1])),
            9,
            1500,
            true,
        );
        assert_eq!(m.kind, RTM_NEWLINK);
        let mut want: Vec<u8> = Vec::new();
        let attr = |w: &mut Vec<u8>, len: u16, kind: u16| {
            w.extend_from_slice(&len.to_ne_bytes());
            w.extend_from_slice(&kind.to_ne_bytes());
        };
        let u32a = |w: &mut Vec<u8>, kind: u16, v: u32| {
            attr(w, 8, kind);
            w.extend_from_slice(&v.to_ne_bytes());
        };
        // ifinfomsg: family 0, index 0, flags and change IFF_UP.
        want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]);
        want.extend_from_slice(&1u32.to_ne_bytes());
        want.extend_from_slice(&1u32.to_ne_bytes());
        attr(&mut want, 10, IFLA_IFNAME);
        want.extend_from_slice(b"enipa\0\0\0");
        u32a(&mut want, IFLA_MTU, 1500);
        u32a(&mut want, IFLA_NUM_TX_QUEUES, 1);
        u32a(&mut want, IFLA_NUM_RX_QUEUES, 1);
        // linkinfo 4 + kind 12 + data (4 + peer (4 + 16 + 12 + 8 + 8 + 8
        // + 8 + 12)).
        attr(
            &mut want,
            4 + 12 + 4 + 4 + 16 + 12 + 8 * 4 + 12,
            IFLA_LINKINFO,
        );
        attr(&mut want, 9, IFLA_INFO_KIND);
        want.extend_from_slice(b"veth\0\0\0\0");
        attr(&mut want, 4 + 4 + 16 + 12 + 8 * 4 + 12, IFLA_INFO_DATA);
        attr(&mut want, 4 + 16 + 12 + 8 * 4 + 12, VETH_INFO_PEER);
        want.extend_from_slice(&[0; 16]);
        attr(&mut want, 10, IFLA_IFNAME);
        want.extend_from_slice(b"enipb\0\0\0");
        u32a(&mut want, IFLA_MTU, 1500);
        u32a(&mut want, IFLA_NUM_TX_QUEUES, 1);
        u32a(&mut want, IFLA_NUM_RX_QUEUES, 1);
        u32a(&mut want, IFLA_NET_NS_FD, 9);
        attr(&mut want, 10, IFLA_ADDRESS);
        want.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0, 0]);
        assert_eq!(m.body, want);
    }

    /// A reader never runs past what it was given: an attribute whose
    /// length is too short or too long ends the read; a header too short
    /// for its type is no message of it.
    #[test]
    fn a_bad_length_ends_the_read_and_never_panics() {
        let mut b = Body::new(&ifinfomsg(3, IFF_UP, 0));
        b.str(IFLA_IFNAME, "eth0");
        let good = b.msg(RTM_NEWLINK);
        assert_eq!(
            link_of(&good).map(|l| (l.index, l.name, l.up)),
            Some((3, "eth0".into(), true))
        );
        let mut long = good.clone();
        long.body[IFINFOMSG_LEN] = 200; // the name's length, past the end
        assert_eq!(link_of(&long).map(|l| l.name), Some(String::new()));
        let mut short = good.clone();
        short.body[IFINFOMSG_LEN] = 2;
        short.body[IFINFOMSG_LEN + 1] = 0;
        assert_eq!(attrs(&short.body[IFINFOMSG_LEN..]).count(), 0);
        let cut = Msg {
            kind: RTM_NEWLINK,
            body: good.body[..IFINFOMSG_LEN - 1].to_vec(),
        };
        assert_eq!(link_of(&cut), None);
        for n in 0..good.body.len() {
            let m = Msg {
                kind: RTM_NEWLINK,
                body: good.body[..n].to_vec(),
            };
            let _ = (link_of(&m), link_u32(&m, IFLA_MTU));
        }
    }

    #[test]
    fn an_address_reads_back_local_first_and_only_on_its_link() {
        let ip: IpAddr = "10.0.0.5".parse().unwrap();
        let m = new_addr(4, ip, 32);
        assert_eq!(addr_of(&m, 4, Family::V4), Some((ip, 32)));
        assert_eq!(addr_of(&m, 5, Family::V4), None);
        assert_eq!(addr_of(&m, 4, Family::V6), None);
        let v6: IpAddr = "fd00::5".parse().unwrap();
        let m = new_addr(4, v6, 128);
        assert_eq!(m.body[2], IFA_F_NODAD);
        assert_eq!(addr_of(&m, 4, Family::V6), Some((v6, 128)));
    }
}
