//! What each rtnetlink request says and how its answers read: the
//! netlink-packet-route messages built from the plugin's vocabulary
//! ([`Link`], [`Route`], [`Rule`], [`Family`]) and read back into it.
//! Pure: no socket and no I/O; which flags a request carries and what an
//! error means is the socket's business ([`super::Netlink`]).
//!
//! Invariant: a table id travels whole in the `Table` attribute; the
//! header's 8-bit table field holds it when it fits and 252
//! (`RT_TABLE_COMPAT`) when it does not, as iproute2 does.

use std::net::IpAddr;
use std::os::fd::RawFd;

use netlink_packet_route::address::{
    AddressAttribute, AddressFlags, AddressHeaderFlags, AddressMessage,
};
use netlink_packet_route::link::{
    AfSpecInet6, AfSpecUnspec, In6AddrGenMode, InfoData, InfoKind, InfoVeth, LinkAttribute,
    LinkExtentMask, LinkFlags, LinkInfo, LinkMessage,
};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteHeader, RouteMessage, RouteProtocol, RouteScope,
    RouteType,
};
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::{Family, Link, Route, Rule};

fn af(family: Family) -> AddressFamily {
    match family {
        Family::V4 => AddressFamily::Inet,
        Family::V6 => AddressFamily::Inet6,
    }
}

/// The header's 8-bit table field for `table`.
fn table_byte(table: u32) -> u8 {
    if table < 256 {
        table as u8
    } else {
        252
    }
}

/// A request's kind, for [`super::stopwatch`]: the message's type in
/// iproute2's words (`newlink`, `getlink`), a dump's as `dump...`.
pub(super) fn kind(m: &RouteNetlinkMessage, dump: bool) -> &'static str {
    use RouteNetlinkMessage as M;
    match (m, dump) {
        (M::GetLink(_), true) => "dumplink",
        (M::GetLink(_), false) => "getlink",
        (M::NewLink(_), _) => "newlink",
        (M::SetLink(_), _) => "setlink",
        (M::DelLink(_), _) => "dellink",
        (M::NewAddress(_), _) => "newaddr",
        (M::GetAddress(_), _) => "dumpaddr",
        (M::NewRoute(_), _) => "newroute",
        (M::DelRoute(_), _) => "delroute",
        (M::GetRoute(_), _) => "dumproute",
        (M::NewRule(_), _) => "newrule",
        (M::DelRule(_), _) => "delrule",
        (M::GetRule(_), _) => "dumprule",
        (M::NewNeighbour(_), _) => "newneigh",
        _ => "other",
    }
}

/// A dump of every link, without their counters (what is read of a link
/// is its name, address and flags; a dump's length is what it costs,
/// under RTNL, and a node has hundreds of links).
pub(super) fn get_links() -> RouteNetlinkMessage {
    let mut m = LinkMessage::default();
    m.attributes
        .push(LinkAttribute::ExtMask(vec![LinkExtentMask::SkipStats]));
    RouteNetlinkMessage::GetLink(m)
}

/// The one link named `name` (a get, not a dump), without its counters.
pub(super) fn get_link_named(name: &str) -> RouteNetlinkMessage {
    let mut m = LinkMessage::default();
    m.attributes.push(LinkAttribute::IfName(name.to_string()));
    m.attributes
        .push(LinkAttribute::ExtMask(vec![LinkExtentMask::SkipStats]));
    RouteNetlinkMessage::GetLink(m)
}

/// A link of a dump.
pub(super) fn link_of(m: &RouteNetlinkMessage) -> Option<Link> {
    let RouteNetlinkMessage::NewLink(l) = m else {
        return None;
    };
    let mut link = Link {
        index: l.header.index,
        name: String::new(),
        mac: Vec::new(),
        up: l.header.flags.contains(LinkFlags::Up),
    };
    for a in &l.attributes {
        match a {
            LinkAttribute::IfName(n) => link.name = n.clone(),
            LinkAttribute::Address(m) => link.mac = m.clone(),
            _ => {}
        }
    }
    Some(link)
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
) -> RouteNetlinkMessage {
    let mut peer_msg = LinkMessage::default();
    peer_msg.attributes = vec![
        LinkAttribute::IfName(peer.to_string()),
        LinkAttribute::Mtu(mtu),
        LinkAttribute::NumTxQueues(1),
        LinkAttribute::NumRxQueues(1),
        LinkAttribute::NetNsFd(peer_ns),
    ];
    if let Some(mac) = peer_mac {
        peer_msg
            .attributes
            .push(LinkAttribute::Address(mac.to_vec()));
    }
    let mut msg = LinkMessage::default();
    if up {
        msg.header.flags = LinkFlags::Up;
        msg.header.change_mask = LinkFlags::Up;
    }
    msg.attributes = vec![
        LinkAttribute::IfName(name.to_string()),
        LinkAttribute::Mtu(mtu),
        LinkAttribute::NumTxQueues(1),
        LinkAttribute::NumRxQueues(1),
        LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::Veth),
            LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer_msg))),
        ]),
    ];
    if let Some(mac) = mac {
        msg.attributes.push(LinkAttribute::Address(mac.to_vec()));
    }
    RouteNetlinkMessage::NewLink(msg)
}

/// The ifindex of the link a link of a dump or echo names as its own
/// (`IFLA_LINK`: a veth's peer, in the peer's namespace).
pub(super) fn link_of_link(m: &RouteNetlinkMessage) -> Option<u32> {
    let RouteNetlinkMessage::NewLink(l) = m else {
        return None;
    };
    l.attributes.iter().find_map(|a| match a {
        LinkAttribute::Link(i) => Some(*i),
        _ => None,
    })
}

/// Deleting link `index`.
pub(super) fn del_link(index: u32) -> RouteNetlinkMessage {
    let mut msg = LinkMessage::default();
    msg.header.index = index;
    RouteNetlinkMessage::DelLink(msg)
}

/// Setting link `index` up.
pub(super) fn set_up(index: u32) -> RouteNetlinkMessage {
    let mut msg = LinkMessage::default();
    msg.header.index = index;
    msg.header.flags = LinkFlags::Up;
    msg.header.change_mask = LinkFlags::Up;
    RouteNetlinkMessage::SetLink(msg)
}

/// Link `index` to make no IPv6 link-local address when it comes up
/// (`addrgenmode none`).
pub(super) fn no_link_local(index: u32) -> RouteNetlinkMessage {
    let mut msg = LinkMessage::default();
    msg.header.index = index;
    msg.attributes = vec![LinkAttribute::AfSpecUnspec(vec![AfSpecUnspec::Inet6(
        vec![AfSpecInet6::AddrGenMode(In6AddrGenMode::None)],
    )])];
    RouteNetlinkMessage::SetLink(msg)
}

/// `ip/prefix` on link `index`; an IPv6 address skips duplicate address
/// detection, so it is usable at once.
pub(super) fn new_addr(index: u32, ip: IpAddr, prefix: u8) -> RouteNetlinkMessage {
    let mut msg = AddressMessage::default();
    msg.header.family = af(Family::of(&ip));
    msg.header.prefix_len = prefix;
    msg.header.index = index;
    msg.attributes = vec![AddressAttribute::Local(ip), AddressAttribute::Address(ip)];
    if ip.is_ipv6() {
        msg.header.flags = AddressHeaderFlags::Nodad;
        msg.attributes
            .push(AddressAttribute::Flags(AddressFlags::Nodad));
    }
    RouteNetlinkMessage::NewAddress(msg)
}

/// A dump of the addresses of `family`.
pub(super) fn get_addrs(family: Family) -> RouteNetlinkMessage {
    let mut msg = AddressMessage::default();
    msg.header.family = af(family);
    RouteNetlinkMessage::GetAddress(msg)
}

/// An address of a dump, with its prefix length, if it is on link
/// `index` and of `family`.
pub(super) fn addr_of(m: &RouteNetlinkMessage, index: u32, family: Family) -> Option<(IpAddr, u8)> {
    let RouteNetlinkMessage::NewAddress(a) = m else {
        return None;
    };
    if a.header.index != index {
        return None;
    }
    let local = a.attributes.iter().find_map(|at| match at {
        AddressAttribute::Local(ip) => Some(*ip),
        _ => None,
    });
    // IPv6 addresses come as IFA_ADDRESS alone.
    let addr = a.attributes.iter().find_map(|at| match at {
        AddressAttribute::Address(ip) => Some(*ip),
        _ => None,
    });
    local
        .or(addr)
        .filter(|ip| Family::of(ip) == family)
        .map(|ip| (ip, a.header.prefix_len))
}

/// The route `dst/prefix [via gw] dev oif table T`; with `onlink` the
/// gateway need not be on a subnet of the link.
pub(super) fn new_route(
    table: u32,
    dst: (IpAddr, u8),
    gateway: Option<IpAddr>,
    oif: u32,
    onlink: bool,
) -> RouteNetlinkMessage {
    let family = Family::of(&dst.0);
    let mut msg = RouteMessage::default();
    msg.header.address_family = af(family);
    msg.header.destination_prefix_length = dst.1;
    msg.header.table = table_byte(table);
    msg.header.protocol = RouteProtocol::Boot;
    msg.header.scope = if gateway.is_some() || family == Family::V6 {
        RouteScope::Universe
    } else {
        RouteScope::Link
    };
    msg.header.kind = RouteType::Unicast;
    if onlink {
        msg.header.flags = RouteFlags::Onlink;
    }
    if dst.1 > 0 {
        msg.attributes
            .push(RouteAttribute::Destination(RouteAddress::from(dst.0)));
    }
    if let Some(gw) = gateway {
        msg.attributes
            .push(RouteAttribute::Gateway(RouteAddress::from(gw)));
    }
    msg.attributes.push(RouteAttribute::Oif(oif));
    msg.attributes.push(RouteAttribute::Table(table));
    RouteNetlinkMessage::NewRoute(msg)
}

/// A dump of the routes of `family` in `table` (out of `oif`, if
/// given): a kernel that checks dump requests strictly
/// (`NETLINK_GET_STRICT_CHK`) sends only those; another sends every
/// route of the family, for the reader to filter.
pub(super) fn get_routes(family: Family, table: u32, oif: Option<u32>) -> RouteNetlinkMessage {
    let mut msg = RouteMessage::default();
    msg.header.address_family = af(family);
    msg.attributes.push(RouteAttribute::Table(table));
    if let Some(oif) = oif {
        msg.attributes.push(RouteAttribute::Oif(oif));
    }
    RouteNetlinkMessage::GetRoute(msg)
}

/// A route of a dump of `family`.
pub(super) fn route_of(m: &RouteNetlinkMessage, family: Family) -> Option<Route> {
    let RouteNetlinkMessage::NewRoute(r) = m else {
        return None;
    };
    let mut route = Route {
        table: u32::from(r.header.table),
        dst: (family.any(), r.header.destination_prefix_length),
        gateway: None,
        oif: None,
    };
    let ip = |a: &RouteAddress| match a {
        RouteAddress::Inet(v) => Some(IpAddr::V4(*v)),
        RouteAddress::Inet6(v) => Some(IpAddr::V6(*v)),
        _ => None,
    };
    for a in &r.attributes {
        match a {
            RouteAttribute::Table(t) => route.table = *t,
            RouteAttribute::Destination(d) => {
                if let Some(d) = ip(d) {
                    route.dst.0 = d;
                }
            }
            RouteAttribute::Gateway(g) => route.gateway = ip(g),
            RouteAttribute::Oif(o) => route.oif = Some(*o),
            _ => {}
        }
    }
    if route.table == 0 {
        route.table = u32::from(RouteHeader::RT_TABLE_MAIN);
    }
    Some(route)
}

/// Deleting route `r`.
pub(super) fn del_route(r: &Route) -> RouteNetlinkMessage {
    let mut msg = RouteMessage::default();
    msg.header.address_family = af(Family::of(&r.dst.0));
    msg.header.destination_prefix_length = r.dst.1;
    msg.header.table = table_byte(r.table);
    msg.header.scope = RouteScope::NoWhere;
    if r.dst.1 > 0 {
        msg.attributes
            .push(RouteAttribute::Destination(RouteAddress::from(r.dst.0)));
    }
    if let Some(oif) = r.oif {
        msg.attributes.push(RouteAttribute::Oif(oif));
    }
    msg.attributes.push(RouteAttribute::Table(r.table));
    RouteNetlinkMessage::DelRoute(msg)
}

/// Adding `rule`.
pub(super) fn new_rule(rule: &Rule) -> RouteNetlinkMessage {
    RouteNetlinkMessage::NewRule(rule_msg(rule))
}

/// Deleting `rule`.
pub(super) fn del_rule(rule: &Rule) -> RouteNetlinkMessage {
    RouteNetlinkMessage::DelRule(rule_msg(rule))
}

fn rule_msg(rule: &Rule) -> RuleMessage {
    let mut msg = RuleMessage::default();
    msg.header.family = af(rule.family);
    msg.header.action = RuleAction::ToTable;
    msg.header.table = table_byte(rule.table);
    if let Some((src, len)) = rule.src {
        msg.header.src_len = len;
        msg.attributes.push(RuleAttribute::Source(src));
    }
    if let Some((dst, len)) = rule.dst {
        msg.header.dst_len = len;
        msg.attributes.push(RuleAttribute::Destination(dst));
    }
    if let Some(iif) = &rule.iif {
        msg.attributes.push(RuleAttribute::Iifname(iif.clone()));
    }
    msg.attributes.push(RuleAttribute::Priority(rule.priority));
    msg.attributes.push(RuleAttribute::Table(rule.table));
    msg
}

/// A dump of the rules of `family`, or of every family (IPv4 and IPv6
/// in one answer) without one.
pub(super) fn get_rules(family: Option<Family>) -> RouteNetlinkMessage {
    let mut msg = RuleMessage::default();
    msg.header.family = family.map_or(AddressFamily::Unspec, af);
    RouteNetlinkMessage::GetRule(msg)
}

/// An IPv4 or IPv6 rule of a dump (a multicast routing rule is none).
pub(super) fn rule_of(m: &RouteNetlinkMessage) -> Option<Rule> {
    let RouteNetlinkMessage::NewRule(r) = m else {
        return None;
    };
    let family = match r.header.family {
        AddressFamily::Inet => Family::V4,
        AddressFamily::Inet6 => Family::V6,
        _ => return None,
    };
    let mut rule = Rule {
        family,
        priority: 0,
        src: None,
        dst: None,
        iif: None,
        table: u32::from(r.header.table),
    };
    for a in &r.attributes {
        match a {
            RuleAttribute::Priority(p) => rule.priority = *p,
            RuleAttribute::Source(s) => rule.src = Some((*s, r.header.src_len)),
            RuleAttribute::Destination(d) => rule.dst = Some((*d, r.header.dst_len)),
            RuleAttribute::Iifname(n) => rule.iif = Some(n.clone()),
            RuleAttribute::Table(t) => rule.table = *t,
            _ => {}
        }
    }
    Some(rule)
}

/// The permanent neighbour entry `ip lladdr mac dev index`.
pub(super) fn new_neigh(index: u32, ip: IpAddr, mac: &[u8]) -> RouteNetlinkMessage {
    let mut msg = NeighbourMessage::default();
    msg.header.family = af(Family::of(&ip));
    msg.header.ifindex = index;
    msg.header.state = NeighbourState::Permanent;
    msg.header.kind = RouteType::Unicast;
    let dst = match ip {
        IpAddr::V4(a) => NeighbourAddress::Inet(a),
        IpAddr::V6(a) => NeighbourAddress::Inet6(a),
    };
    msg.attributes = vec![
        NeighbourAttribute::Destination(dst),
        NeighbourAttribute::LinkLayerAddress(mac.to_vec()),
    ];
    RouteNetlinkMessage::NewNeighbour(msg)
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
            let RouteNetlinkMessage::NewRule(r) = &m else {
                panic!("{m:?}");
            };
            assert_eq!(r.header.table, table_byte(table));
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
    }
}
