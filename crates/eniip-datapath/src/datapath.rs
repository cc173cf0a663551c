//! The container's network, as Terway's veth datapath on an ENI multi-IP
//! node builds it, over netlink:
//!
//! - container: `CNI_IFNAME` (one end of a veth pair) with the pod address
//!   as /32, a link route to [`POD_GATEWAY`] and a default route via it,
//!   and a permanent neighbour entry for it (the host end's MAC), so the pod
//!   never ARPs for its gateway;
//! - host: the other end, `enip<hash>`, up, with a link route to the pod
//!   address and a permanent neighbour entry for it;
//! - egress: the ENI link found by the MAC eniipd reported (waited for: it
//!   appears a moment after the attach), up, `rp_filter` loose; routing
//!   table `1000 + ENI ifindex` with a default route via the vswitch
//!   gateway, onlink; and the rule
//!   `from <pod>/32 iif <host end> lookup <table>`.
//!
//! In dual stack ([`Attach::v6`]) the same shape again for IPv6: the pod
//! address as /128 (no duplicate address detection, so it is usable at
//! once), a default route via the link-local [`POD_GATEWAY6`] with a
//! permanent neighbour entry for it (the host end's MAC); on the host a
//! route to the pod address over the host end with a permanent neighbour
//! entry; the ENI table's IPv6 default route via the vswitch's IPv6
//! gateway, onlink, and the rule
//! `from <pod>/128 iif <host end> lookup <table>`; IPv6 on the links
//! involved, and forwarding.
//!
//! Local pods: the rule `to <pod> lookup main` (IPv4 and IPv6, priority
//! [`TO_POD_PRIORITY`], ahead of the per-ENI `from` rules) sends traffic
//! to a pod of this node over its veth, so two pods on different ENIs
//! reach each other on the node instead of through the VPC (Terway's
//! `toContainerPriority`).
//!
//! Invariant: everything one attachment adds is found again from its host
//! end's name (the `from` rule carries it as `iif`), so DEL and GC never
//! remove a rule that belongs to another sandbox, even one holding the same
//! address. A `to` rule cannot name a host end (traffic to a pod comes from
//! anywhere), so it is one per address, and is removed only when no `from`
//! rule of ours routes that address any more.

use std::fmt;
use std::fs::File;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use sha1::{Digest, Sha1};

use super::netlink::{format_mac, Family, Link, Netlink, Route, Rule, MAIN_TABLE};
use super::netns;

/// The link-local address the pod uses as its gateway (answered by a
/// static neighbour entry pointing at the host end of the veth).
pub const POD_GATEWAY: Ipv4Addr = Ipv4Addr::new(169, 254, 1, 1);

/// The pod's IPv6 gateway: link-local, answered the same way.
pub const POD_GATEWAY6: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);

/// Host ends of our veth pairs start with this.
pub const HOST_PREFIX: &str = "enip";
/// Priority of the per-pod policy rules.
pub const RULE_PRIORITY: u32 = 2048;
/// Priority of the `to <pod> lookup main` rules: ahead of [`RULE_PRIORITY`].
pub const TO_POD_PRIORITY: u32 = 512;
/// Per-ENI routing tables are `TABLE_BASE + ifindex`.
pub const TABLE_BASE: u32 = 1000;
/// Poll period while waiting for an ENI link.
const LINK_POLL: Duration = Duration::from_millis(50);

/// A datapath step that failed, with the kernel's answer.
#[derive(Debug)]
pub struct DatapathError {
    /// What was being done.
    pub what: String,
    /// Why it failed.
    pub source: io::Error,
}

impl fmt::Display for DatapathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.what, self.source)
    }
}

impl std::error::Error for DatapathError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

trait Context<T> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T, DatapathError>;
}

impl<T> Context<T> for io::Result<T> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T, DatapathError> {
        self.map_err(|source| DatapathError {
            what: what(),
            source,
        })
    }
}

fn fail(what: impl Into<String>) -> DatapathError {
    let what = what.into();
    DatapathError {
        source: io::Error::other(what.clone()),
        what,
    }
}

/// The host end's name for an attachment: `enip` + 11 hex digits of a hash
/// of the container id and interface name (15 bytes, IFNAMSIZ - 1).
pub fn host_veth_name(container_id: &str, ifname: &str) -> String {
    let h = Sha1::digest(format!("{container_id}/{ifname}").as_bytes());
    let hex: String = h.iter().map(|b| format!("{b:02x}")).collect();
    format!("{HOST_PREFIX}{}", &hex[..11])
}

/// A pod's IPv6 half (dual stack).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pod6 {
    /// The pod's IPv6 address.
    pub ip: Ipv6Addr,
    /// The vswitch's IPv6 gateway.
    pub gateway: Ipv6Addr,
}

/// What an attachment needs: the pod's side, and how the link is made.
#[derive(Debug)]
pub struct Attach<'a> {
    /// What the pod gets (and CHECK later expects).
    pub pod: Pod<'a>,
    /// veth MTU.
    pub mtu: u32,
    /// How long to wait for the ENI link.
    pub link_timeout: Duration,
}

/// What an attachment made.
#[derive(Debug, Clone)]
pub struct Attached {
    /// Host end's ifindex: with its name, the identity of the host end
    /// this ADD made (a later ADD of the same container id makes another
    /// by the same name).
    pub host_index: u32,
    /// Host end's MAC.
    pub host_mac: String,
    /// Container end's MAC.
    pub container_mac: String,
}

fn write_sysctl(path: &str, value: &str) -> Result<(), DatapathError> {
    std::fs::write(format!("/proc/sys/{path}"), value).ctx(|| format!("sysctl {path}={value}"))
}

/// The one link with the ENI's `mac`, if there is one; more than one is an
/// error naming them.
fn eni_link(nl: &mut Netlink, mac: &[u8]) -> Result<Option<Link>, DatapathError> {
    let mut found = nl.links_by_mac(mac).ctx(|| "list links".into())?;
    if found.len() > 1 {
        // Never guess: a bond, VLAN or stray veth with the ENI's MAC would
        // take the pod's traffic where the VPC does not expect it.
        let names: Vec<&str> = found.iter().map(|l| l.name.as_str()).collect();
        return Err(fail(format!(
            "{} links carry the ENI's MAC {}: {}; eniip-cni cannot tell which is the ENI \
             (remove or re-address the others)",
            found.len(),
            format_mac(mac),
            names.join(", ")
        )));
    }
    Ok(found.pop())
}

/// Waits (up to `timeout`) for the link with `mac`.
fn wait_link(nl: &mut Netlink, mac: &[u8], timeout: Duration) -> Result<Link, DatapathError> {
    let end = Instant::now() + timeout;
    loop {
        if let Some(l) = eni_link(nl, mac)? {
            return Ok(l);
        }
        if Instant::now() >= end {
            return Err(fail(format!(
                "no link with the ENI's MAC {} within {timeout:?}",
                format_mac(mac)
            )));
        }
        std::thread::sleep(LINK_POLL);
    }
}

fn v4(ip: Ipv4Addr) -> IpAddr {
    IpAddr::V4(ip)
}

fn v6(ip: Ipv6Addr) -> IpAddr {
    IpAddr::V6(ip)
}

/// IPv6 on for `link` (a host may have it off by default for new links).
fn enable_ipv6(link: &str) -> Result<(), DatapathError> {
    write_sysctl(&format!("net/ipv6/conf/{link}/disable_ipv6"), "0")
}

/// The ENI link, up, with its table's default routes; returns it and the
/// table number.
fn prepare_eni(
    host: &mut Netlink,
    mac: &[u8],
    gateway: Ipv4Addr,
    gateway6: Option<Ipv6Addr>,
    timeout: Duration,
) -> Result<(Link, u32), DatapathError> {
    let eni = wait_link(host, mac, timeout)?;
    if !eni.up {
        host.set_up(eni.index)
            .ctx(|| format!("set ENI link {} up", eni.name))?;
    }
    // Replies to the pod arrive on the ENI while the pod's own route is over
    // its veth: strict reverse-path filtering would drop them.
    write_sysctl(&format!("net/ipv4/conf/{}/rp_filter", eni.name), "2")?;
    write_sysctl("net/ipv4/ip_forward", "1")?;
    let table = TABLE_BASE + eni.index;
    host.replace_default_route(table, v4(gateway), eni.index, true)
        .ctx(|| format!("default route via {gateway} dev {} table {table}", eni.name))?;
    if let Some(gw6) = gateway6 {
        enable_ipv6(&eni.name)?;
        // The kernel forwards IPv6 only when `all` says so (a link's own
        // switch only makes it act as a router).
        write_sysctl("net/ipv6/conf/all/forwarding", "1")?;
        host.replace_default_route(table, v6(gw6), eni.index, true)
            .ctx(|| format!("default route via {gw6} dev {} table {table}", eni.name))?;
    }
    Ok((eni, table))
}

/// Builds the attachment. On error, what was built is left for
/// [`teardown`] (the caller's rollback).
pub fn setup(a: &Attach) -> Result<Attached, DatapathError> {
    let pod = &a.pod;
    let mut host = Netlink::open().ctx(|| "netlink socket".into())?;
    let gw6 = pod.v6.map(|p| p.gateway);
    let (_eni, table) = prepare_eni(&mut host, pod.eni_mac, pod.gateway, gw6, a.link_timeout)?;

    // A host end (and its rules) left by an earlier, failed ADD of this
    // attachment.
    teardown(pod.host_veth)?;
    // The host end up as it is made: a request fewer, which would wait
    // for the kernel's RTNL behind every other pod's.
    host.add_veth_up(pod.host_veth, pod.ifname, pod.netns.as_raw_fd(), a.mtu)
        .ctx(|| format!("create veth {} / {}", pod.host_veth, pod.ifname))?;
    let hv = host
        .link_by_name(pod.host_veth)
        .ctx(|| "list links".into())?
        .ok_or_else(|| fail(format!("{} vanished", pod.host_veth)))?;

    let mut ctr = netns::netlink_in(pod.netns).ctx(|| "netlink socket in the container".into())?;
    let cl = ctr
        .link_by_name(pod.ifname)
        .ctx(|| "list container links".into())?
        .ok_or_else(|| fail(format!("{} is not in the container", pod.ifname)))?;
    if let Some(lo) = ctr
        .link_by_name("lo")
        .ctx(|| "list container links".into())?
    {
        ctr.set_up(lo.index).ctx(|| "set lo up".into())?;
    }
    ctr.add_addr(cl.index, v4(pod.ip), 32)
        .ctx(|| format!("address {}/32 on {}", pod.ip, pod.ifname))?;
    if let Some(p) = pod.v6 {
        let knob = format!("/proc/sys/net/ipv6/conf/{}/disable_ipv6", pod.ifname);
        netns::run_in(pod.netns, move || std::fs::write(&knob, "0"))
            .ctx(|| format!("enable IPv6 on {} in the container", pod.ifname))?;
        ctr.add_addr(cl.index, v6(p.ip), 128)
            .ctx(|| format!("address {}/128 on {}", p.ip, pod.ifname))?;
    }
    ctr.set_up(cl.index)
        .ctx(|| format!("set {} up", pod.ifname))?;
    ctr.replace_route(MAIN_TABLE, (v4(POD_GATEWAY), 32), None, cl.index, false)
        .ctx(|| format!("route {POD_GATEWAY} dev {}", pod.ifname))?;
    default_via(&mut ctr, cl.index, v4(POD_GATEWAY), &hv.mac)?;
    if pod.v6.is_some() {
        // A link-local gateway is on-link by definition: no link route.
        default_via(&mut ctr, cl.index, v6(POD_GATEWAY6), &hv.mac)?;
    }

    if pod.v6.is_some() {
        enable_ipv6(pod.host_veth)?;
    }
    route_to_pod(
        &mut host,
        (hv.index, pod.host_veth),
        v4(pod.ip),
        &cl.mac,
        table,
    )?;
    if let Some(p) = pod.v6 {
        route_to_pod(
            &mut host,
            (hv.index, pod.host_veth),
            v6(p.ip),
            &cl.mac,
            table,
        )?;
    }
    Ok(Attached {
        host_index: hv.index,
        host_mac: format_mac(&hv.mac),
        container_mac: format_mac(&cl.mac),
    })
}

/// On the host: the pod's address `ip` behind its host end (`veth`: index
/// and name), answered by `pod_mac`; what it sends goes by the ENI's
/// `table`, what is sent to it by main.
fn route_to_pod(
    host: &mut Netlink,
    (veth, veth_name): (u32, &str),
    ip: IpAddr,
    pod_mac: &[u8],
    table: u32,
) -> Result<(), DatapathError> {
    host.replace_neigh(veth, ip, pod_mac)
        .ctx(|| format!("neighbour {ip} on {veth_name}"))?;
    let (_, len) = host_prefix(ip);
    host.replace_route(MAIN_TABLE, (ip, len), None, veth, false)
        .ctx(|| format!("route {ip}/{len} dev {veth_name}"))?;
    host.add_rule(&pod_rule(ip, veth_name, table))
        .ctx(|| format!("rule from {ip} lookup {table}"))?;
    // After the `from` rule: a rollback finds this one through it.
    host.add_rule(&to_pod_rule(ip))
        .ctx(|| format!("rule to {ip} lookup main"))
}

fn host_prefix(ip: IpAddr) -> (IpAddr, u8) {
    (ip, if ip.is_ipv4() { 32 } else { 128 })
}

fn pod_rule(ip: IpAddr, host_veth: &str, table: u32) -> Rule {
    Rule {
        family: Family::of(&ip),
        priority: RULE_PRIORITY,
        src: Some(host_prefix(ip)),
        dst: None,
        iif: Some(host_veth.to_string()),
        table,
    }
}

/// `to <pod> lookup main` (see the module doc).
fn to_pod_rule(ip: IpAddr) -> Rule {
    Rule {
        family: Family::of(&ip),
        priority: TO_POD_PRIORITY,
        src: None,
        dst: Some(host_prefix(ip)),
        iif: None,
        table: MAIN_TABLE,
    }
}

/// True for a `from` rule of one of our host ends routing `ip`.
fn routes_pod(r: &Rule, ip: IpAddr) -> bool {
    r.priority == RULE_PRIORITY
        && r.src == Some(host_prefix(ip))
        && r.iif.as_deref().is_some_and(|i| i.starts_with(HOST_PREFIX))
}

/// Removes one attachment's host end (its peer, routes and neighbour
/// entries go with it) and its rules, IPv4 and IPv6. Whatever is already
/// gone is fine.
pub fn teardown(host_veth: &str) -> Result<(), DatapathError> {
    let mut host = Netlink::open().ctx(|| "netlink socket".into())?;
    // The pod's addresses, from the host end's routes (read before the
    // link goes, taking them along) and from its rules: either may be all
    // that is left of a half-built or hand-edited attachment.
    let mut pods: Vec<IpAddr> = Vec::new();
    if let Some(l) = host.link_by_name(host_veth).ctx(|| "list links".into())? {
        for family in [Family::V4, Family::V6] {
            let routes = match host.routes(family, MAIN_TABLE) {
                Err(e) if family == Family::V6 && no_family(&e) => continue,
                r => r.ctx(|| "list routes".into())?,
            };
            let full = if family == Family::V4 { 32 } else { 128 };
            pods.extend(
                routes
                    .iter()
                    .filter(|r| r.oif == Some(l.index) && r.dst.1 == full)
                    .map(|r| r.dst.0),
            );
        }
        match host.del_link(l.index) {
            Err(e) if super::netlink::is_missing(&e) => {}
            r => r.ctx(|| format!("delete {host_veth}"))?,
        }
    }
    for family in [Family::V4, Family::V6] {
        let rules = match host.rules(family) {
            // No IPv6 in this kernel: no IPv6 rule of ours either.
            Err(e) if family == Family::V6 && no_family(&e) => continue,
            r => r.ctx(|| "list rules".into())?,
        };
        let (mine, others): (Vec<Rule>, Vec<Rule>) = rules
            .into_iter()
            .partition(|r| r.iif.as_deref() == Some(host_veth));
        for r in &mine {
            host.del_rule(r)
                .ctx(|| format!("delete rule of {host_veth}"))?;
        }
        pods.extend(mine.iter().filter_map(|r| r.src.map(|(ip, _)| ip)));
        // Its addresses' `to` rules, unless another host end of ours still
        // routes the address (a pod's new sandbox, when this is a late DEL
        // of the old one).
        for ip in pods.iter().filter(|ip| Family::of(ip) == family) {
            if !others.iter().any(|r| routes_pod(r, *ip)) {
                host.del_rule(&to_pod_rule(*ip))
                    .ctx(|| format!("delete rule to {ip}"))?;
            }
        }
    }
    Ok(())
}

/// Removes the host end `host_veth` that has ifindex `index` (as
/// [`teardown`]), and nothing if a link of that name is another one (a
/// later ADD of the same container id made it): the host end one ADD
/// built, never a newer one by the same name. Whether anything of it was
/// there to remove (its rules outlive a link deleted by hand).
pub fn teardown_built(host_veth: &str, index: u32) -> Result<bool, DatapathError> {
    let mut host = Netlink::open().ctx(|| "netlink socket".into())?;
    match host.link_by_name(host_veth).ctx(|| "list links".into())? {
        Some(l) if l.index != index => Ok(false),
        _ => {
            teardown(host_veth)?;
            Ok(true)
        }
    }
}

/// True for the answer of a kernel without the address family.
fn no_family(e: &io::Error) -> bool {
    e.raw_os_error() == Some(nix::libc::EAFNOSUPPORT)
}

/// Removes the host end `host_veth` (as [`teardown`]) unless it routes an
/// IPv4 address other than `ip`, by a host route or a `from` rule: for a
/// host end GC knows only by the name ADD gives it (an ADD killed before
/// its route leaves a host end that routes nothing). Whether it was
/// removed.
pub fn teardown_unless_routing_another(
    host_veth: &str,
    ip: Ipv4Addr,
) -> Result<bool, DatapathError> {
    let mut host = Netlink::open().ctx(|| "netlink socket".into())?;
    let Some(l) = host.link_by_name(host_veth).ctx(|| "list links".into())? else {
        return Ok(false);
    };
    let other = |dst: Option<(IpAddr, u8)>| dst.is_some_and(|(a, n)| n == 32 && a != v4(ip));
    let by_route = host
        .routes(Family::V4, MAIN_TABLE)
        .ctx(|| "list routes".into())?
        .iter()
        .any(|r| r.oif == Some(l.index) && other(Some(r.dst)));
    let by_rule = host
        .rules(Family::V4)
        .ctx(|| "list rules".into())?
        .iter()
        .any(|r| r.iif.as_deref() == Some(host_veth) && other(r.src));
    if by_route || by_rule {
        return Ok(false);
    }
    teardown(host_veth)?;
    Ok(true)
}

/// A pod's attachment: what ADD builds and CHECK expects.
#[derive(Debug)]
pub struct Pod<'a> {
    /// The pod address.
    pub ip: Ipv4Addr,
    /// The ENI's MAC.
    pub eni_mac: &'a [u8],
    /// The vswitch gateway.
    pub gateway: Ipv4Addr,
    /// The IPv6 half, in dual stack.
    pub v6: Option<Pod6>,
    /// Interface name in the container.
    pub ifname: &'a str,
    /// Host end's name.
    pub host_veth: &'a str,
    /// The container's netns.
    pub netns: &'a File,
}

/// One family's expectations, for [`check`].
struct Want {
    pod: IpAddr,
    prefix: u8,
    vswitch_gateway: IpAddr,
    pod_gateway: IpAddr,
}

/// CHECK: the addresses, the routes and the rules are as ADD left them.
pub fn check(e: &Pod) -> Result<(), DatapathError> {
    let mut wants = vec![Want {
        pod: v4(e.ip),
        prefix: 32,
        vswitch_gateway: v4(e.gateway),
        pod_gateway: v4(POD_GATEWAY),
    }];
    if let Some(p) = e.v6 {
        wants.push(Want {
            pod: v6(p.ip),
            prefix: 128,
            vswitch_gateway: v6(p.gateway),
            pod_gateway: v6(POD_GATEWAY6),
        });
    }
    let mut host = Netlink::open().ctx(|| "netlink socket".into())?;
    let eni = eni_link(&mut host, e.eni_mac)?
        .ok_or_else(|| fail(format!("no ENI link with MAC {}", format_mac(e.eni_mac))))?;
    let table = TABLE_BASE + eni.index;
    let hv = up_link(&mut host, e.host_veth, "list links", |state| {
        format!("host end {} is {state}", e.host_veth)
    })?;
    for w in &wants {
        let family = Family::of(&w.pod);
        let main = host
            .routes(family, MAIN_TABLE)
            .ctx(|| "list routes".into())?;
        if !main
            .iter()
            .any(|r| r.dst == (w.pod, w.prefix) && r.oif == Some(hv.index))
        {
            return Err(fail(format!(
                "route {}/{} dev {} is missing",
                w.pod, w.prefix, e.host_veth
            )));
        }
        let want = pod_rule(w.pod, e.host_veth, table);
        let rules = host.rules(family).ctx(|| "list rules".into())?;
        if !rules.contains(&want) {
            return Err(fail(format!(
                "rule from {}/{} iif {} lookup {table} is missing",
                w.pod, w.prefix, e.host_veth
            )));
        }
        if !rules.contains(&to_pod_rule(w.pod)) {
            return Err(fail(format!(
                "rule to {}/{} lookup main (pod to pod on the node) is missing",
                w.pod, w.prefix
            )));
        }
        let t = host.routes(family, table).ctx(|| "list routes".into())?;
        if !has_default_route(&t, w.vswitch_gateway, eni.index) {
            return Err(fail(format!(
                "default route via {} dev {} in table {table} is missing",
                w.vswitch_gateway, eni.name
            )));
        }
    }

    let mut ctr = netns::netlink_in(e.netns).ctx(|| "netlink socket in the container".into())?;
    let cl = up_link(&mut ctr, e.ifname, "list container links", |state| {
        format!("{} is {state} in the container", e.ifname)
    })?;
    for w in &wants {
        let family = Family::of(&w.pod);
        let addrs = ctr
            .addrs(cl.index, family)
            .ctx(|| "list addresses".into())?;
        if !addrs.contains(&(w.pod, w.prefix)) {
            return Err(fail(format!(
                "{} lacks {}/{} (has {addrs:?})",
                e.ifname, w.pod, w.prefix
            )));
        }
        let routes = ctr
            .routes(family, MAIN_TABLE)
            .ctx(|| "list routes".into())?;
        if !has_default_route(&routes, w.pod_gateway, cl.index) {
            return Err(fail(format!(
                "default route via {} dev {} is missing in the container",
                w.pod_gateway, e.ifname
            )));
        }
    }
    Ok(())
}

/// In the container: `gateway` answered by the host end (`host_mac`)
/// and the default route of its family via it, out of `link`.
fn default_via(
    ctr: &mut Netlink,
    link: u32,
    gateway: IpAddr,
    host_mac: &[u8],
) -> Result<(), DatapathError> {
    ctr.replace_neigh(link, gateway, host_mac)
        .ctx(|| format!("neighbour {gateway} in the container"))?;
    ctr.replace_default_route(MAIN_TABLE, gateway, link, false)
        .ctx(|| format!("default route via {gateway} in the container"))
}

/// The link named `name`, which must be there and up; `listing` names the
/// netlink dump in errors and `says` words a link that is `missing` or
/// `down`.
fn up_link(
    nl: &mut Netlink,
    name: &str,
    listing: &str,
    says: impl Fn(&str) -> String,
) -> Result<Link, DatapathError> {
    let link = nl
        .link_by_name(name)
        .ctx(|| listing.into())?
        .ok_or_else(|| fail(says("missing")))?;
    if link.up {
        Ok(link)
    } else {
        Err(fail(says("down")))
    }
}

/// Whether `routes` hold a default route via `gateway` out of `oif`.
fn has_default_route(routes: &[Route], gateway: IpAddr, oif: u32) -> bool {
    routes
        .iter()
        .any(|r| r.dst.1 == 0 && r.gateway == Some(gateway) && r.oif == Some(oif))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_end_names_fit_and_differ() {
        let a = host_veth_name("abc", "eth0");
        assert_eq!(a.len(), 15);
        assert!(a.starts_with(HOST_PREFIX));
        assert_eq!(a, host_veth_name("abc", "eth0"));
        assert_ne!(a, host_veth_name("abc", "eth1"));
        assert_ne!(a, host_veth_name("abd", "eth0"));
    }
}
