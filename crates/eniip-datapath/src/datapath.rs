//! The container's network, as Terway's veth datapath on an ENI multi-IP
//! node builds it, over netlink:
//!
//! - container: `CNI_IFNAME` (one end of a veth pair) with the pod address
//!   as /32, a link route to [`POD_GATEWAY`] and a default route via it,
//!   and a permanent neighbour entry for it (the host end's MAC), so the pod
//!   never ARPs for its gateway;
//! - host: the other end, `enip<hash>`, up, with a link route to the pod
//!   address and a permanent neighbour entry for it;
//! - neither end with an IPv6 link-local address (`addrgenmode none`),
//!   unless the pod is dual stack;
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

use super::ifreq::Ioctls;
use super::netlink::{format_mac, Change, Family, Link, Netlink, Route, Rule, MAIN_TABLE};
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
/// lo's ifindex, in every network namespace.
const LOOPBACK_INDEX: u32 = 1;
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
/// error naming them. Every link is asked by ioctl ([`ifreq`]), not
/// dumped over netlink: a dump of a node's links (a host end per pod)
/// takes RTNL for each part of its answer.
fn eni_link(io: &Ioctls, mac: &[u8]) -> Result<Option<Link>, DatapathError> {
    let mut found = io.links_by_mac(mac).ctx(|| "list links".into())?;
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
fn wait_link(io: &Ioctls, mac: &[u8], timeout: Duration) -> Result<Link, DatapathError> {
    let end = Instant::now() + timeout;
    loop {
        if let Some(l) = eni_link(io, mac)? {
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
    let io = Ioctls::open().ctx(|| "socket".into())?;
    let eni = wait_link(&io, mac, timeout)?;
    if !eni.up {
        host.set_up(eni.index)
            .ctx(|| format!("set ENI link {} up", eni.name))?;
    }
    // Replies to the pod arrive on the ENI while the pod's own route is over
    // its veth: strict reverse-path filtering would drop them.
    write_sysctl(&format!("net/ipv4/conf/{}/rp_filter", eni.name), "2")?;
    write_sysctl("net/ipv4/ip_forward", "1")?;
    let table = TABLE_BASE + eni.index;
    eni_default_route(host, &eni, table, v4(gateway))?;
    if let Some(gw6) = gateway6 {
        enable_ipv6(&eni.name)?;
        // The kernel forwards IPv6 only when `all` says so (a link's own
        // switch only makes it act as a router).
        write_sysctl("net/ipv6/conf/all/forwarding", "1")?;
        eni_default_route(host, &eni, table, v6(gw6))?;
    }
    Ok((eni, table))
}

/// The ENI `table`'s default route of `gateway`'s family, via it out of
/// the ENI: read first (a dump of that table alone, which takes no RTNL
/// on a recent kernel) and made only when it is not there, as on the
/// first ADD on the ENI, so the pods of a storm do not each replace it
/// (a change, under RTNL, behind every other pod's).
fn eni_default_route(
    host: &mut Netlink,
    eni: &Link,
    table: u32,
    gateway: IpAddr,
) -> Result<(), DatapathError> {
    let family = Family::of(&gateway);
    let there = host
        .routes(family, table)
        .ctx(|| format!("list routes of table {table}"))?;
    if has_default_route(&there, gateway, eni.index) {
        return Ok(());
    }
    host.replace_default_route(table, gateway, eni.index, true)
        .ctx(|| format!("default route via {gateway} dev {} table {table}", eni.name))
}

/// Makes `changes` (each with what it does, for its error) in one send
/// ([`Netlink::batch`]); the first that failed is the error.
fn apply_all(nl: &mut Netlink, changes: Vec<(Change, String)>) -> Result<(), DatapathError> {
    let (changes, whats): (Vec<Change>, Vec<String>) = changes.into_iter().unzip();
    let done = nl.batch(changes).ctx(|| whats.join(", "))?;
    for (r, what) in done.into_iter().zip(whats) {
        r.ctx(|| what)?;
    }
    Ok(())
}

/// Builds the attachment. On error, what was built is left for
/// [`teardown`] (the caller's rollback).
///
/// In as few requests as the kernel allows, since under a storm of pods
/// each one that takes RTNL waits behind every other pod's: the ENI
/// found without netlink ([`ifreq`]); its table's default route and the
/// node's rules read by dumps that take no RTNL; the veth made with its
/// peer's MAC chosen here, and read back (its peer's ifindex too) from
/// the creating request's own answer; then the container's changes in
/// one send and the host's in two (the `to` rules only after the `from`
/// rules were made, see [`route_to_pod`]).
pub fn setup(a: &Attach) -> Result<Attached, DatapathError> {
    let pod = &a.pod;
    let mut host = Netlink::open().ctx(|| "netlink socket".into())?;
    let gw6 = pod.v6.map(|p| p.gateway);
    let (_eni, table) = prepare_eni(&mut host, pod.eni_mac, pod.gateway, gw6, a.link_timeout)?;

    // The rules an earlier, failed ADD of this attachment left (they
    // outlive its host end), then the host end: one that is there
    // already is that attempt's, taken down (with its rules) before it
    // is made again. The kernel's refusal says so: no lookup before.
    clear_rules_on(&mut host, pod.host_veth, Vec::new())?;
    // The container end's MAC is chosen here, and its ifindex is in the
    // create's answer: the container's links need not be read.
    let pod_mac = container_mac(pod.host_veth);
    // An IPv4-only pod's ends make no IPv6 link-local address (see
    // [`Change::no_link_local`]): the kernel would make one on each end
    // when the pair has its carrier (both ends up) and check it for
    // duplicates, work that takes RTNL behind every other pod's, for an
    // address nothing uses. A dual-stack pod's IPv6 needs them. The host
    // end is then made down, and each end is told before it goes up, in
    // the send that sets it up.
    let link_local = pod.v6.is_some();
    let create = |host: &mut Netlink| {
        host.add_veth(
            pod.host_veth,
            (pod.ifname, &pod_mac),
            pod.netns.as_raw_fd(),
            a.mtu,
            link_local,
        )
    };
    let made = match create(&mut host) {
        Err(e) if super::netlink::is_exists(&e) => {
            teardown_on(&mut host, pod.host_veth)?;
            create(&mut host)
        }
        r => r,
    }
    .ctx(|| format!("create veth {} / {}", pod.host_veth, pod.ifname))?;
    let (hv, peer_index) = match made {
        Some(m) => m,
        // A kernel that does not echo a new link.
        None => (
            host.link_by_name(pod.host_veth)
                .ctx(|| "list links".into())?
                .ok_or_else(|| fail(format!("{} vanished", pod.host_veth)))?,
            None,
        ),
    };

    // The container's sockets, and IPv6 on for its end in dual stack
    // (on the same short-lived thread in its namespace).
    let knob = pod
        .v6
        .map(|_| format!("/proc/sys/net/ipv6/conf/{}/disable_ipv6", pod.ifname));
    let (ctr, ctr_io) = netns::run_in(pod.netns, move || {
        if let Some(knob) = knob {
            std::fs::write(&knob, "0").map_err(|e| {
                io::Error::new(e.kind(), format!("enable IPv6 in the container: {e}"))
            })?;
        }
        Ok((Netlink::open()?, Ioctls::open()?))
    })
    .ctx(|| format!("sockets for {} in the container", pod.ifname))?;
    let mut ctr = ctr.labelled("ctr.");
    let cl = match peer_index {
        Some(index) => Link {
            index,
            name: pod.ifname.to_string(),
            mac: pod_mac.to_vec(),
            up: false,
        },
        None => ctr_io
            .link(pod.ifname)
            .ctx(|| "list container links".into())?
            .ok_or_else(|| fail(format!("{} is not in the container", pod.ifname)))?,
    };
    let mut changes = Vec::new();
    // The runtime's loopback plugin has it up already, as a rule.
    if ctr_io.is_up("lo").ctx(|| "lo in the container".into())? == Some(false) {
        changes.push((Change::set_up(LOOPBACK_INDEX), "set lo up".to_string()));
    }
    changes.push((
        Change::add_addr(cl.index, v4(pod.ip), 32),
        format!("address {}/32 on {}", pod.ip, pod.ifname),
    ));
    if let Some(p) = pod.v6 {
        changes.push((
            Change::add_addr(cl.index, v6(p.ip), 128),
            format!("address {}/128 on {}", p.ip, pod.ifname),
        ));
    }
    if !link_local {
        changes.push((
            Change::no_link_local(cl.index),
            format!("addrgenmode none on {}", pod.ifname),
        ));
    }
    // Up before its routes: the kernel refuses a route out of a link
    // that is down.
    changes.push((Change::set_up(cl.index), format!("set {} up", pod.ifname)));
    changes.push((
        Change::replace_route(MAIN_TABLE, (v4(POD_GATEWAY), 32), None, cl.index, false),
        format!("route {POD_GATEWAY} dev {}", pod.ifname),
    ));
    default_via(&mut changes, cl.index, v4(POD_GATEWAY), &hv.mac);
    if pod.v6.is_some() {
        // A link-local gateway is on-link by definition: no link route.
        default_via(&mut changes, cl.index, v6(POD_GATEWAY6), &hv.mac);
    }
    apply_all(&mut ctr, changes)?;

    if pod.v6.is_some() {
        enable_ipv6(pod.host_veth)?;
    }
    let mut ips = vec![v4(pod.ip)];
    ips.extend(pod.v6.map(|p| v6(p.ip)));
    // The host end, made down for an IPv4-only pod, goes up first.
    let mut changes = Vec::new();
    if !link_local {
        changes.push((
            Change::no_link_local(hv.index),
            format!("addrgenmode none on {}", pod.host_veth),
        ));
        changes.push((
            Change::set_up(hv.index),
            format!("set {} up", pod.host_veth),
        ));
    }
    route_to_pod(
        &mut host,
        (hv.index, pod.host_veth),
        &ips,
        &cl.mac,
        table,
        changes,
    )?;
    Ok(Attached {
        host_index: hv.index,
        host_mac: format_mac(&hv.mac),
        container_mac: format_mac(&cl.mac),
    })
}

/// A MAC for the container end of `host_veth`: locally administered,
/// unicast, and new for each attempt (a hash of the name, the process
/// and the time).
fn container_mac(host_veth: &str) -> [u8; 6] {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let h = Sha1::digest(format!("{host_veth}/{}/{now}", std::process::id()).as_bytes());
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&h[..6]);
    mac[0] = (mac[0] & 0xfe) | 0x02;
    mac
}

/// On the host: the pod's addresses `ips` behind its host end (`veth`:
/// index and name), answered by `pod_mac`; what it sends goes by the
/// ENI's `table`, what is sent to it by main. In the same send after
/// `first` (what the host end needs before its routes). The `to` rules
/// go in a second send, once the `from` rules are made: a rollback
/// finds a `to` rule through its `from` rule (or the host end's route),
/// so none is left behind by a `from` rule that failed.
fn route_to_pod(
    host: &mut Netlink,
    (veth, veth_name): (u32, &str),
    ips: &[IpAddr],
    pod_mac: &[u8],
    table: u32,
    first: Vec<(Change, String)>,
) -> Result<(), DatapathError> {
    let mut changes = first;
    for &ip in ips {
        let (_, len) = host_prefix(ip);
        changes.push((
            Change::replace_neigh(veth, ip, pod_mac),
            format!("neighbour {ip} on {veth_name}"),
        ));
        changes.push((
            Change::replace_route(MAIN_TABLE, (ip, len), None, veth, false),
            format!("route {ip}/{len} dev {veth_name}"),
        ));
        changes.push((
            Change::add_rule(&pod_rule(ip, veth_name, table)),
            format!("rule from {ip} lookup {table}"),
        ));
    }
    apply_all(host, changes)?;
    let to = ips
        .iter()
        .map(|&ip| {
            (
                Change::add_rule(&to_pod_rule(ip)),
                format!("rule to {ip} lookup main"),
            )
        })
        .collect();
    apply_all(host, to)
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
    teardown_on(&mut host, host_veth)
}

/// [`teardown`] on the host's socket `host`: a lookup of the host end by
/// its name and one dump of the rules when nothing is left (ADD's
/// clean-up of an earlier attempt, as a rule, finds nothing).
fn teardown_on(host: &mut Netlink, host_veth: &str) -> Result<(), DatapathError> {
    // The pod's addresses, from the host end's routes (read before the
    // link goes, taking them along) and from its rules: either may be all
    // that is left of a half-built or hand-edited attachment.
    let mut pods: Vec<IpAddr> = Vec::new();
    if let Some(l) = host.link_by_name(host_veth).ctx(|| "list links".into())? {
        for family in [Family::V4, Family::V6] {
            let routes = match host.routes_out(family, MAIN_TABLE, Some(l.index)) {
                Err(e) if family == Family::V6 && no_family(&e) => continue,
                r => r.ctx(|| "list routes".into())?,
            };
            let full = if family == Family::V4 { 32 } else { 128 };
            pods.extend(routes.iter().filter(|r| r.dst.1 == full).map(|r| r.dst.0));
        }
        match host.del_link(l.index) {
            Err(e) if super::netlink::is_missing(&e) => {}
            r => r.ctx(|| format!("delete {host_veth}"))?,
        }
    }
    clear_rules_on(host, host_veth, pods)
}

/// The rules of the host end `host_veth`, and the `to` rules of their
/// addresses and of `pods` (the addresses its routes held) that no other
/// host end of ours routes: [`teardown_on`] once the link is gone.
fn clear_rules_on(
    host: &mut Netlink,
    host_veth: &str,
    mut pods: Vec<IpAddr>,
) -> Result<(), DatapathError> {
    // IPv4 and IPv6 in one dump (a kernel without IPv6 has none of it).
    let rules = host.all_rules().ctx(|| "list rules".into())?;
    let (mine, others): (Vec<Rule>, Vec<Rule>) = rules
        .into_iter()
        .partition(|r| r.iif.as_deref() == Some(host_veth));
    for r in &mine {
        host.del_rule(r)
            .ctx(|| format!("delete rule of {host_veth}"))?;
    }
    pods.extend(mine.iter().filter_map(|r| r.src.map(|(ip, _)| ip)));
    pods.sort();
    pods.dedup();
    // Its addresses' `to` rules, unless another host end of ours still
    // routes the address (a pod's new sandbox, when this is a late DEL
    // of the old one).
    for ip in &pods {
        if !others.iter().any(|r| routes_pod(r, *ip)) {
            host.del_rule(&to_pod_rule(*ip))
                .ctx(|| format!("delete rule to {ip}"))?;
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
        .routes_out(Family::V4, MAIN_TABLE, Some(l.index))
        .ctx(|| "list routes".into())?
        .iter()
        .any(|r| other(Some(r.dst)));
    let by_rule = host
        .rules(Family::V4)
        .ctx(|| "list rules".into())?
        .iter()
        .any(|r| r.iif.as_deref() == Some(host_veth) && other(r.src));
    if by_route || by_rule {
        return Ok(false);
    }
    teardown_on(&mut host, host_veth)?;
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
    let io = Ioctls::open().ctx(|| "socket".into())?;
    let eni = eni_link(&io, e.eni_mac)?
        .ok_or_else(|| fail(format!("no ENI link with MAC {}", format_mac(e.eni_mac))))?;
    let table = TABLE_BASE + eni.index;
    let hv = up_link(&mut host, e.host_veth, "list links", |state| {
        format!("host end {} is {state}", e.host_veth)
    })?;
    for w in &wants {
        let family = Family::of(&w.pod);
        let main = host
            .routes_out(family, MAIN_TABLE, Some(hv.index))
            .ctx(|| "list routes".into())?;
        if !main.iter().any(|r| r.dst == (w.pod, w.prefix)) {
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
fn default_via(changes: &mut Vec<(Change, String)>, link: u32, gateway: IpAddr, host_mac: &[u8]) {
    changes.push((
        Change::replace_neigh(link, gateway, host_mac),
        format!("neighbour {gateway} in the container"),
    ));
    changes.push((
        Change::replace_default_route(MAIN_TABLE, gateway, link, false),
        format!("default route via {gateway} in the container"),
    ));
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

    /// A file of a network namespace other than the calling thread's
    /// (the container's), made by a thread that unshares one.
    fn container_ns() -> io::Result<File> {
        std::thread::spawn(|| {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)?;
            File::open("/proc/thread-self/ns/net")
        })
        .join()
        .unwrap()
    }

    fn rules_of(nl: &mut Netlink, ip: IpAddr) -> Vec<Rule> {
        let rules = nl.all_rules().unwrap();
        rules
            .into_iter()
            .filter(|r| r.src.map(|s| s.0) == Some(ip) || r.dst.map(|d| d.0) == Some(ip))
            .collect()
    }

    /// ADD after an earlier attempt of the same attachment: its host end
    /// (found by the kernel's refusal to make it again) and its rules
    /// go, with the `to` rule of the address they routed, before the new
    /// one is built; and its rules alone (the host end gone) go as well.
    /// What is built passes CHECK, and teardown leaves nothing.
    #[test]
    fn an_add_clears_what_an_earlier_attempt_left_and_builds_what_check_expects() {
        crate::netns::in_own_netns(
            "an_add_clears_what_an_earlier_attempt_left_and_builds_what_check_expects",
            || {
                let ctr = container_ns()?;
                let mut nl = Netlink::open()?;
                // lo up, as on every node (the kernel refuses a gateway
                // without it).
                nl.set_up(1)?;
                // The ENI: a link with its MAC (a veth, as the tests' ENIs).
                let mac = [0x00, 0x16, 0x3e, 0x00, 0x00, 0x07];
                let here = File::open("/proc/thread-self/ns/net")?;
                nl.add_veth_with_mac("eth1", &mac, "eth1p", here.as_raw_fd(), 1500)?;
                let veth = host_veth_name("c0ffee", "eth0");
                let (old, new): (IpAddr, IpAddr) = (
                    "192.168.5.5".parse().unwrap(),
                    "192.168.5.9".parse().unwrap(),
                );
                let gateway = "192.168.5.253".parse().unwrap();
                let pod = |ip: IpAddr| Pod {
                    ip: match ip {
                        IpAddr::V4(v) => v,
                        IpAddr::V6(_) => unreachable!(),
                    },
                    eni_mac: &mac,
                    gateway,
                    v6: None,
                    ifname: "eth0",
                    host_veth: &veth,
                    netns: &ctr,
                };
                let attach = |ip| Attach {
                    pod: pod(ip),
                    mtu: 1500,
                    link_timeout: Duration::from_secs(1),
                };
                // The earlier attempt: built whole for `old`, then its
                // container end left as it was (a killed ADD).
                setup(&attach(old)).map_err(io::Error::other)?;
                assert_eq!(rules_of(&mut nl, old).len(), 2);
                let built = setup(&attach(new)).map_err(io::Error::other)?;
                assert_eq!(
                    rules_of(&mut nl, old),
                    vec![],
                    "the earlier attempt's rules"
                );
                assert_eq!(rules_of(&mut nl, new).len(), 2);
                check(&pod(new)).map_err(io::Error::other)?;
                let hv = nl.link_by_name(&veth)?.expect("the host end");
                assert_eq!(hv.index, built.host_index);
                // The container end is what ADD says it is (the host's
                // neighbour entry for the pod carries its MAC).
                let cl = netns::netlink_in(&ctr)?
                    .link_by_name("eth0")?
                    .expect("the container end");
                assert!(cl.up, "{cl:?}");
                assert_eq!(format_mac(&cl.mac), built.container_mac);
                // An IPv4-only pod's ends make no IPv6 link-local address
                // (`1`: none; a kernel without IPv6 has no knob).
                let none = |mode: Option<String>| mode.is_none_or(|m| m == "1");
                assert!(none(netns::addr_gen_mode(&veth)?), "{veth}");
                let ctr_mode = netns::run_in(&ctr, || netns::addr_gen_mode("eth0"))?;
                assert!(none(ctr_mode), "eth0 in the container");
                // Its rules alone: the host end deleted by hand.
                nl.del_link(hv.index)?;
                assert_eq!(rules_of(&mut nl, new).len(), 2, "rules outlive a link");
                setup(&attach(old)).map_err(io::Error::other)?;
                assert_eq!(
                    rules_of(&mut nl, new),
                    vec![],
                    "the rules of a gone host end"
                );
                check(&pod(old)).map_err(io::Error::other)?;
                teardown(&veth).map_err(io::Error::other)?;
                assert_eq!(rules_of(&mut nl, old), vec![]);
                assert_eq!(nl.link_by_name(&veth)?, None);
                Ok(())
            },
        );
    }

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
