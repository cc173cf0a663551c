//! eniip-cni, the CNI plugin (spec 0.4.0, 1.0.0 and 1.1.0): gets a container's
//! address from eniipd over its socket and builds the container's network
//! ([`datapath`]) over netlink, synchronously. In dual stack the IPv6 half
//! needs the vswitch's IPv6 gateway, which eniipd's `eni` verb gives (the
//! `alloc` reply does not carry it).
//!
//! Identity: the owner is `<network>/<K8S_POD_NAMESPACE>/<K8S_POD_NAME>`
//! when `CNI_ARGS` names the pod (so `ip_stick_time` gives a restarted pod
//! its address back), else `<network>/<CNI_CONTAINERID>`; the sandbox is
//! `CNI_CONTAINERID`. A pod's owner has three parts and a container's two,
//! and neither kind is used literally when a part holds `/` or `@` or the
//! whole does not fit eniipd's id alphabet: it is then `<network>/@p-HASH`
//! or `<network>/@c-HASH`, so an owner made from a container id never
//! equals one made from a pod. The network prefix keeps two networks of
//! one pod apart and scopes GC.
//!
//! Invariants: one invocation per owner at a time ([`lock`]); an ADD that
//! fails gives back only what it took itself (the address only when the
//! owner held none before it, the host end only when it made it); DEL is
//! idempotent; an eniipd that cannot be asked (away: restarting, replaced
//! by a rollout, hung) is waited for by ADD up to `daemonWait` and
//! [`client::ADD_BUDGET`] (then CNI error 11, before anything changes),
//! and never fails a DEL: the node's side is torn down and the release
//! queued for eniipd ([`crate::releases`]); the environment is checked
//! before anything is asked or built (CNI error 4).

pub(crate) mod client;
pub mod datapath;
pub mod install;
pub(crate) mod lock;
pub(crate) mod netlink;
pub(crate) mod netns;
pub mod spec;
pub(crate) mod wording;

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sha1::{Digest, Sha1};

use crate::core::{EniInfo, Owner};
use crate::protocol::{parse_allocation, parse_eni};
use client::{field, Client};
use spec::{
    code, CniError, CniResult, Command, Env, Interface, IpConfig, NetConf, ResultRoute,
    POD_GATEWAY, POD_GATEWAY6, SUPPORTED_VERSIONS,
};

/// How long ADD waits for the ENI's link to appear after the attach.
pub(crate) const LINK_TIMEOUT: Duration = Duration::from_secs(10);
/// A `keep` line's budget (the protocol's 4096 bytes, with room).
const KEEP_LINE_BYTES: usize = 4000;

fn hex_sha1(s: &str) -> String {
    Sha1::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn hashed(s: &str) -> String {
    format!("h-{}", hex_sha1(s))
}

/// `s` if eniipd accepts it as an id, else a stable hash of it.
fn fit_id(s: &str) -> String {
    if Owner::parse(s).is_ok() {
        s.to_string()
    } else {
        hashed(s)
    }
}

/// The sandbox id of a container.
pub(crate) fn sandbox_of(container_id: &str) -> String {
    fit_id(container_id)
}

/// A part of an owner that can be used as it is: no `/` (it would read as
/// another split) and no `@` (it would read as a hashed form).
fn literal(part: &str) -> bool {
    !part.is_empty() && !part.contains(['/', '@'])
}

/// The owner of an attachment (see the module doc).
pub(crate) fn owner_of(network: &str, env: &Env) -> String {
    let pod = match (
        env.args.get("K8S_POD_NAMESPACE").filter(|s| !s.is_empty()),
        env.args.get("K8S_POD_NAME").filter(|s| !s.is_empty()),
    ) {
        (Some(ns), Some(pod)) => Some((ns, pod)),
        _ => None,
    };
    let (plain, hashed) = match pod {
        Some((ns, pod)) => (
            (literal(ns) && literal(pod)).then(|| format!("{network}/{ns}/{pod}")),
            // The length keeps `a/b` + `c` and `a` + `b/c` apart.
            format!(
                "{network}/@p-{}",
                hex_sha1(&format!("{}:{ns}/{pod}", ns.len()))
            ),
        ),
        None => {
            let id = &env.container_id;
            (
                literal(id).then(|| format!("{network}/{id}")),
                format!("{network}/@c-{}", hex_sha1(id)),
            )
        }
    };
    plain.filter(|o| Owner::parse(o).is_ok()).unwrap_or(hashed)
}

/// Runs one command; `Ok` is what goes to stdout (possibly nothing).
pub fn run(cmd: Command, env: &Env, stdin: &[u8]) -> Result<String, CniError> {
    if cmd == Command::Version {
        return Ok(version(stdin));
    }
    let conf = NetConf::parse(stdin, cmd)?;
    match cmd {
        Command::Add => add(&conf, env),
        Command::Del => del(&conf, env).map(|()| String::new()),
        Command::Check => check(&conf, env).map(|()| String::new()),
        Command::Gc => gc(&conf).map(|()| String::new()),
        Command::Status => status(&conf).map(|()| String::new()),
        Command::Version => unreachable!("handled above"),
    }
}

/// The VERSION answer, in the caller's version when it gave one.
pub(crate) fn version(stdin: &[u8]) -> String {
    let asked = serde_json::from_slice::<Value>(stdin)
        .ok()
        .and_then(|v| {
            v.get("cniVersion")
                .and_then(Value::as_str)
                .map(String::from)
        })
        .filter(|v| SUPPORTED_VERSIONS.contains(&v.as_str()))
        .unwrap_or_else(|| SUPPORTED_VERSIONS[SUPPORTED_VERSIONS.len() - 1].to_string());
    json!({"cniVersion": asked, "supportedVersions": SUPPORTED_VERSIONS}).to_string()
}

fn datapath_error(e: datapath::DatapathError) -> CniError {
    CniError::new(code::DATAPATH, e.to_string())
}

/// The container's netns, open, checked to be a network namespace other
/// than the plugin's own (a pod interface made in the node's namespace
/// would take over its default route). `Ok(None)`: nothing is there.
fn open_netns(env: &Env) -> Result<Option<std::fs::File>, CniError> {
    let Some(path) = &env.netns else {
        return Ok(None);
    };
    let bad = |what: String| CniError::new(code::INVALID_ENV, what);
    let f = match netns::open(path) {
        Ok(Some(f)) => f,
        Ok(None) => return Ok(None),
        Err(e) => {
            return Err(
                bad(format!("cannot open CNI_NETNS {}", path.display())).details(e.to_string())
            )
        }
    };
    let id = crate::util::netns::identity_of(&f, path)
        .map_err(|e| bad(format!("CNI_NETNS {}: {e}", path.display())))?;
    let own = crate::util::netns::own()
        .map_err(|e| CniError::new(code::IO, format!("cannot read the plugin's own netns: {e}")))?;
    if id == own {
        return Err(bad(format!(
            "CNI_NETNS {} is the namespace eniip-cni runs in, not a container's",
            path.display()
        )));
    }
    Ok(Some(f))
}

/// The IPv6 half of an allocation holding `ip6` on `eni`: the vswitch's IPv6
/// gateway comes from eniipd's `eni` (no `alloc` reply carries it).
fn pod6(c: &mut Client, eni: &EniInfo, ip6: Ipv6Addr) -> Result<datapath::Pod6, CniError> {
    let r = c.ask(&format!("eni {}", eni.eni))?;
    let info = parse_eni(&r.text).ok_or_else(|| {
        CniError::new(code::DAEMON, "eniipd's eni answer is not understood").details(r.text.clone())
    })?;
    let (_, gateway) = info.v6.ok_or_else(|| {
        CniError::new(
            code::DAEMON,
            format!(
                "eniipd knows no IPv6 gateway for ENI {} (vswitch {}): the pod's IPv6 address {ip6} cannot be routed",
                eni.eni, eni.vswitch
            ),
        )
        .details(r.text.clone())
    })?;
    Ok(datapath::Pod6 { ip: ip6, gateway })
}

/// ` netns=PATH veth=NAME` for eniipd's sandbox reaper, or nothing when
/// the path cannot travel in a protocol word (the allocation is then
/// never reaped, only released by DEL or GC).
fn attach_args(netns: &std::path::Path, host_veth: &str) -> String {
    match netns.to_str() {
        Some(p) if p.starts_with('/') && !p.is_empty() && !p.chars().any(char::is_whitespace) => {
            format!(" netns={p} veth={host_veth}")
        }
        _ => String::new(),
    }
}

fn add(conf: &NetConf, env: &Env) -> Result<String, CniError> {
    let owner = owner_of(&conf.name, env);
    let sandbox = sandbox_of(&env.container_id);
    let host_veth = datapath::host_veth_name(&env.container_id, &env.ifname);
    let netns_path = env.netns.clone().unwrap_or_default();
    let ns = open_netns(env)?.ok_or_else(|| {
        CniError::new(
            code::INVALID_ENV,
            format!("CNI_NETNS {} does not exist", netns_path.display()),
        )
    })?;
    let _held = lock::lock(&conf.lock_dir, &owner, client::ALLOC_DEADLINE)?;
    let (mut c, held_before, reply) = allocate(
        conf,
        &owner,
        &format!(
            "alloc {owner} sandbox={sandbox}{}",
            attach_args(&netns_path, &host_veth)
        ),
    )?;
    let (ip, ipv6, eni) = parse_allocation(&reply.text).ok_or_else(|| {
        CniError::new(code::DAEMON, "eniipd's alloc answer is not understood")
            .details(reply.text.clone())
    })?;
    let built = (|| {
        let mac = netlink::parse_mac(&eni.mac)
            .ok_or_else(|| CniError::new(code::DAEMON, format!("bad ENI MAC {}", eni.mac)))?;
        let v6 = match ipv6 {
            Some(ip6) => Some(pod6(&mut c, &eni, ip6)?),
            None => None,
        };
        datapath::setup(&datapath::Attach {
            pod: datapath::Pod {
                ip,
                eni_mac: &mac,
                gateway: eni.gateway,
                v6,
                ifname: &env.ifname,
                host_veth: &host_veth,
                netns: &ns,
            },
            mtu: conf.mtu,
            link_timeout: LINK_TIMEOUT,
        })
        .map_err(datapath_error)
    })();
    let attached = match built {
        Ok(a) => a,
        Err(e) => {
            // Roll back: what we built, then the address if it was ours.
            let _ = datapath::teardown(&host_veth);
            if !held_before {
                let _ = c.ask(&format!("release {owner} sandbox={sandbox}"));
            }
            return Err(e);
        }
    };
    let mut ips = vec![IpConfig {
        version: None,
        address: format!("{ip}/32"),
        gateway: Some(POD_GATEWAY.to_string()),
        interface: Some(1),
    }];
    let mut routes = vec![ResultRoute {
        dst: "0.0.0.0/0".into(),
        gw: Some(POD_GATEWAY.to_string()),
    }];
    if let Some(ip6) = ipv6 {
        ips.push(IpConfig {
            version: None,
            address: format!("{ip6}/128"),
            gateway: Some(POD_GATEWAY6.to_string()),
            interface: Some(1),
        });
        routes.push(ResultRoute {
            dst: "::/0".into(),
            gw: Some(POD_GATEWAY6.to_string()),
        });
    }
    // `interface` 1 is CNI_IFNAME in the sandbox: containerd's go-cni
    // finds the pod's addresses through it ("failed to find network info
    // for sandbox" otherwise).
    let result = CniResult {
        cni_version: conf.cni_version.clone(),
        interfaces: vec![
            Interface {
                name: host_veth,
                mac: attached.host_mac,
                sandbox: None,
            },
            Interface {
                name: env.ifname.clone(),
                mac: attached.container_mac,
                sandbox: Some(netns_path.display().to_string()),
            },
        ],
        ips,
        routes,
        dns: conf.dns.clone().unwrap_or_else(|| json!({})),
    }
    .for_version(&conf.cni_version);
    serde_json::to_string(&result)
        .map_err(|e| CniError::new(code::IO, format!("cannot render the result: {e}")))
}

/// ADD's conversation with eniipd: the connection, whether the owner held
/// an address before (what a failed ADD may give back: the address only
/// if the owner held none, so a second ADD of a running pod, or the new
/// sandbox of a pod whose old one was not deleted yet, does not take it
/// away from under it) and the `alloc` reply. While eniipd cannot be
/// asked (away, restarting, replaced by a rollout, going away in the
/// middle) it is waited for, up to `daemonWait` at a time and
/// [`client::ADD_BUDGET`] in all, and asked again: `alloc` for a sandbox
/// is idempotent.
fn allocate(
    conf: &NetConf,
    owner: &str,
    alloc: &str,
) -> Result<(Client, bool, client::Answer), CniError> {
    let started = Instant::now();
    let mut held_before = None;
    loop {
        let left = client::ADD_BUDGET.saturating_sub(started.elapsed());
        let mut c = Client::connect_waiting(&conf.socket, conf.daemon_wait.min(left))?;
        let mut ask = || {
            let held = match held_before {
                Some(h) => h,
                None => c.ask_found(&format!("show {owner}"))?.is_some(),
            };
            held_before = Some(held);
            c.limit_alloc(client::ADD_BUDGET.saturating_sub(started.elapsed()));
            c.ask(alloc).map(|reply| (held, reply))
        };
        match ask() {
            Err(e)
                if client::went_away(&e)
                    && !conf.daemon_wait.is_zero()
                    && started.elapsed() < client::ADD_BUDGET =>
            {
                // It went away in the middle: a moment, then it is
                // waited for again.
                std::thread::sleep(client::AWAY_POLL);
            }
            r => return r.map(|(held, reply)| (c, held, reply)),
        }
    }
}

fn del(conf: &NetConf, env: &Env) -> Result<(), CniError> {
    let owner = owner_of(&conf.name, env);
    let sandbox = sandbox_of(&env.container_id);
    let host_veth = datapath::host_veth_name(&env.container_id, &env.ifname);
    let _held = lock::lock(&conf.lock_dir, &owner, client::ALLOC_DEADLINE)?;
    let release = format!("release {owner} sandbox={sandbox}");
    let released = Client::connect(&conf.socket).and_then(|mut c| {
        datapath::teardown(&host_veth).map_err(datapath_error)?;
        c.ask(&release)
    });
    match released {
        Ok(r) => {
            if let Some(ip) = field(&r.text, "released").and_then(|s| s.parse::<Ipv4Addr>().ok()) {
                // The address was ours alone: any other host end still
                // routing it is a leftover.
                datapath::cleanup_ip(ip).map_err(datapath_error)?;
            }
            Ok(())
        }
        // eniipd cannot be asked: the node's side goes now, the release
        // waits for eniipd in its queue (it applies it before it serves).
        Err(e) if client::went_away(&e) => {
            datapath::teardown(&host_veth).map_err(datapath_error)?;
            queue_release(conf, &owner, &sandbox, &e)
        }
        Err(e) => Err(e),
    }
}

/// Queues `owner`'s release for eniipd ([`crate::releases`]); an error 11
/// naming the queue if even that fails (the runtime retries the DEL).
fn queue_release(
    conf: &NetConf,
    owner: &str,
    sandbox: &str,
    away: &CniError,
) -> Result<(), CniError> {
    crate::releases::queue(&conf.socket, owner, sandbox)
        .map(drop)
        .map_err(|io| {
            CniError::new(
                code::TRY_AGAIN,
                format!(
                    "{}, and the release of {owner} cannot be queued in {}: {io}",
                    away.msg,
                    crate::releases::dir_for(&conf.socket).display()
                ),
            )
        })
}

fn check(conf: &NetConf, env: &Env) -> Result<(), CniError> {
    let prev = conf.prev_result.as_ref().ok_or_else(|| {
        CniError::new(
            code::INVALID_CONFIG,
            "invalid network config: prevResult is missing",
        )
    })?;
    let want_ip = CniResult::ipv4_of(prev).ok_or_else(|| {
        CniError::new(
            code::INVALID_CONFIG,
            "invalid network config: prevResult has no IPv4 address",
        )
    })?;
    let owner = owner_of(&conf.name, env);
    let ns = open_netns(env)?
        .ok_or_else(|| CniError::new(code::DATAPATH, "the container's netns is gone"))?;
    let _held = lock::lock(&conf.lock_dir, &owner, client::ALLOC_DEADLINE)?;
    let mut c = Client::connect(&conf.socket)?;
    let r = c.ask(&format!("show {owner}"))?;
    let (ip, ipv6, eni) = parse_allocation(&r.text).ok_or_else(|| {
        CniError::new(code::DAEMON, "eniipd's show answer is not understood")
            .details(r.text.clone())
    })?;
    if ip != want_ip {
        return Err(CniError::new(
            code::DATAPATH,
            format!("eniipd gives {owner} {ip} but prevResult has {want_ip}"),
        ));
    }
    // The IPv6 half is checked when ADD reported one (an attachment made
    // before eniip-cni configured IPv6 has none to check).
    let v6 = match (CniResult::ipv6_of(prev), ipv6) {
        (None, _) => None,
        (Some(want6), Some(ip6)) if want6 == ip6 => Some(pod6(&mut c, &eni, ip6)?),
        (Some(want6), got) => {
            return Err(CniError::new(
                code::DATAPATH,
                format!(
                    "eniipd gives {owner} IPv6 {} but prevResult has {want6}",
                    got.map_or_else(|| "none".to_string(), |a| a.to_string())
                ),
            ))
        }
    };
    let mac = netlink::parse_mac(&eni.mac)
        .ok_or_else(|| CniError::new(code::DAEMON, format!("bad ENI MAC {}", eni.mac)))?;
    datapath::check(&datapath::Pod {
        ip,
        eni_mac: &mac,
        gateway: eni.gateway,
        v6,
        ifname: &env.ifname,
        host_veth: &datapath::host_veth_name(&env.container_id, &env.ifname),
        netns: &ns,
    })
    .map_err(datapath_error)
}

/// The `keep` lines for a set of ids, each within the line budget.
pub(crate) fn keep_lines(ids: &[String]) -> Vec<String> {
    let mut lines = Vec::new();
    let mut cur = String::from("keep");
    for id in ids {
        if cur.len() + 1 + id.len() > KEEP_LINE_BYTES && cur != "keep" {
            lines.push(std::mem::replace(&mut cur, String::from("keep")));
        }
        cur.push(' ');
        cur.push_str(id);
    }
    if cur != "keep" {
        lines.push(cur);
    }
    lines
}

/// The interface name runtimes give a pod's network (kubelet through
/// containerd and CRI-O, podman's first network): the host end of an
/// allocation that recorded none is looked for under it.
const DEFAULT_IFNAME: &str = "eth0";

fn gc(conf: &NetConf) -> Result<(), CniError> {
    let mut ids: Vec<String> = conf
        .valid_attachments
        .iter()
        .map(|a| sandbox_of(&a.container_id))
        .collect();
    ids.sort();
    ids.dedup();
    let mut c = Client::connect(&conf.socket)?;
    for line in keep_lines(&ids) {
        c.ask(&line)?;
    }
    let r = c.ask(&format!("gc owner-prefix={}/", conf.name))?;
    let mut first_err = None;
    for line in &r.data {
        let mut words = line.split(' ');
        let ip = words.next().and_then(|s| s.parse::<Ipv4Addr>().ok());
        let owner = words.next().unwrap_or("");
        let sandbox = words.next().filter(|s| *s != "-");
        // The host end eniipd recorded at ADD: found even when the ADD was
        // killed before its rules existed (cleanup_ip finds ends by rule
        // and by route).
        let veth = words
            .find_map(|w| w.strip_prefix("veth="))
            .filter(|v| v.starts_with(datapath::HOST_PREFIX));
        let Some(ip) = ip else { continue };
        // An invocation for this owner that runs now finishes first.
        let _held = match lock::lock(&conf.lock_dir, owner, client::REPLY_DEADLINE) {
            Ok(l) => l,
            Err(e) => {
                first_err.get_or_insert(e);
                continue;
            }
        };
        let removed = match (veth, sandbox) {
            (Some(v), _) => datapath::teardown(v),
            // An allocation that recorded no host end (an older plugin's,
            // or made while eniipd could not read the netns): the one ADD
            // names after the sandbox's container id and eth0, when it
            // routes nobody else's address.
            (None, Some(s)) => {
                let named = datapath::host_veth_name(s, DEFAULT_IFNAME);
                datapath::teardown_unless_routing_another(&named, ip).map(|_| ())
            }
            (None, None) => Ok(()),
        };
        if let Err(e) = removed {
            first_err.get_or_insert(datapath_error(e));
        }
        if let Err(e) = datapath::cleanup_ip(ip) {
            first_err.get_or_insert(datapath_error(e));
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// STATUS: 50 when eniipd cannot be asked, 51 when it could not hand out
/// an address now (no idle address, nothing pending, and the pool at its
/// capacity).
fn status(conf: &NetConf) -> Result<(), CniError> {
    let not_available = |e: CniError| {
        let queued = crate::releases::count(&conf.socket);
        let queued = match queued {
            0 => String::new(),
            n => format!(" ({n} release(s) queued for it)"),
        };
        CniError::new(
            code::NOT_AVAILABLE,
            format!("eniipd is not available: {}{queued}", e.msg),
        )
        .details(e.to_string())
    };
    let mut c = Client::connect(&conf.socket).map_err(not_available)?;
    let r = c.ask("status").map_err(not_available)?;
    let n = |k: &str| field(&r.text, k).and_then(|v| v.parse::<u64>().ok());
    if let (Some(idle), Some(pending), Some(ips), Some(capacity)) =
        (n("idle"), n("pending"), n("ips"), n("capacity"))
    {
        if idle == 0 && pending == 0 && ips >= capacity {
            let enis = n("enis").unwrap_or(0);
            return Err(CniError::new(
                code::LIMITED,
                format!(
                    "no address can be had: the instance's ENI quota is reached and every ENI                      is full ({ips} of {capacity} addresses on {enis} ENIs in use, none idle)"
                ),
            )
            .details(r.text.clone()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(cid: &str, args: &[(&str, &str)]) -> Env {
        Env {
            container_id: cid.into(),
            ifname: "eth0".into(),
            netns: None,
            args: args
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn owners_follow_the_pod_when_named() {
        let e = env(
            "abc123",
            &[("K8S_POD_NAMESPACE", "ns"), ("K8S_POD_NAME", "web-1")],
        );
        assert_eq!(owner_of("eni", &e), "eni/ns/web-1");
        assert_eq!(owner_of("eni", &env("abc123", &[])), "eni/abc123");
        // Out of the alphabet or too long: hashed, the network kept.
        let long = "x".repeat(300);
        let o = owner_of("eni", &env(&long, &[]));
        assert!(o.starts_with("eni/@c-") && Owner::parse(&o).is_ok(), "{o}");
        let o = owner_of("eni", &env("a b", &[]));
        assert!(o.starts_with("eni/@c-") && Owner::parse(&o).is_ok(), "{o}");
        assert_eq!(sandbox_of("abc"), "abc");
        assert!(sandbox_of(&long).starts_with("h-"));
    }

    #[test]
    fn owners_of_containers_never_equal_owners_of_pods() {
        let pod = |ns: &str, name: &str| {
            owner_of(
                "eni",
                &env("c", &[("K8S_POD_NAMESPACE", ns), ("K8S_POD_NAME", name)]),
            )
        };
        let ctr = |id: &str| owner_of("eni", &env(id, &[]));
        // The collision reported: no CNI_ARGS and CNI_CONTAINERID=ns/pod.
        assert_ne!(ctr("ns/web-1"), pod("ns", "web-1"));
        // Whatever a container id holds, it is not a pod's owner; hashed
        // forms cannot be forged by an id or a pod name either.
        for id in ["ns/web-1", "@p-x", "ns/@c-y", "a b", "ns/web-1/x", "@c-1"] {
            let o = ctr(id);
            assert_eq!(o.matches('/').count(), 1, "{id} -> {o}");
            assert!(o.starts_with("eni/@c-"), "{id} -> {o}");
            assert!(Owner::parse(&o).is_ok(), "{o}");
        }
        // Pods whose parts would read as another split are hashed apart.
        assert_ne!(pod("a/b", "c"), pod("a", "b/c"));
        assert!(pod("a/b", "c").starts_with("eni/@p-"));
        assert!(pod("ns", "@x").starts_with("eni/@p-"));
        assert_ne!(pod("ns", "@x"), ctr("@x"));
    }

    #[test]
    fn keep_lines_stay_within_a_protocol_line() {
        let ids: Vec<String> = (0..2000).map(|i| format!("{i:064}")).collect();
        let lines = keep_lines(&ids);
        assert!(lines.len() > 1);
        let mut seen = Vec::new();
        for l in &lines {
            assert!(l.len() <= crate::protocol::MAX_LINE, "{}", l.len());
            let req = crate::protocol::parse_request(l.as_bytes()).unwrap();
            match req {
                crate::protocol::ClientRequest::Keep(ids) => seen.extend(ids),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(seen, ids);
        assert!(keep_lines(&[]).is_empty());
    }

    fn test_dir(what: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "eniip-cni-test-{what}-{}-{}",
            std::process::id(),
            hashed(&format!("{:?}", std::time::Instant::now()))
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A stand-in eniipd on a socket: answers each request line by its
    /// verb from `answers` (`ping` with `pong`), on every connection, and
    /// gives back every line it was sent but the pings. An answer
    /// `sleep N` waits N ms, then gives the next answer for that verb.
    fn fake_eniipd(
        answers: &'static [(&'static str, &'static str)],
    ) -> (std::path::PathBuf, std::thread::JoinHandle<Vec<String>>) {
        use std::io::{BufRead, BufReader, Write};
        let dir = test_dir("eniipd");
        let path = dir.join("eniipd.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        listener.set_nonblocking(true).unwrap();
        let h = std::thread::spawn(move || {
            let seen = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
            let mut conns = Vec::new();
            let end = std::time::Instant::now() + Duration::from_secs(20);
            // Serves until the first connection (the plugin's own) ends.
            while std::time::Instant::now() < end {
                match listener.accept() {
                    Ok((s, _)) => {
                        let seen = seen.clone();
                        conns.push(std::thread::spawn(move || {
                            s.set_nonblocking(false).unwrap();
                            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                            let mut w = s.try_clone().unwrap();
                            for line in BufReader::new(s).lines() {
                                let Ok(line) = line else { break };
                                let verb = line.split(' ').next().unwrap_or("").to_string();
                                if verb == "ping" {
                                    writeln!(w, "OK pong").unwrap();
                                    continue;
                                }
                                seen.lock().push(line);
                                let mut mine = answers.iter().filter(|(v, _)| *v == verb);
                                let mut a = mine.next().map_or("ERR unknown-command", |(_, a)| a);
                                if let Some(ms) = a.strip_prefix("sleep ") {
                                    std::thread::sleep(Duration::from_millis(ms.parse().unwrap()));
                                    a = mine.next().map_or("ERR unknown-command", |(_, a)| a);
                                }
                                if writeln!(w, "{a}").is_err() {
                                    break;
                                }
                            }
                        }));
                    }
                    Err(_) if conns.first().is_some_and(|c| c.is_finished()) => break,
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            for c in conns {
                let _ = c.join();
            }
            let _ = std::fs::remove_dir_all(&dir);
            let seen = seen.lock().clone();
            seen
        });
        (path, h)
    }

    fn conf_on(socket: &std::path::Path) -> NetConf {
        NetConf::parse(
            json!({
                "cniVersion": "1.1.0", "name": "eni", "socket": socket,
                "lockDir": test_dir("locks"),
            })
            .to_string()
            .as_bytes(),
            Command::Add,
        )
        .unwrap()
    }

    /// A network namespace of a thread's own, for as long as the guard
    /// lives (`None`, said loudly, without the right to make one).
    struct OtherNetns {
        path: std::path::PathBuf,
        done: Option<crossbeam_channel::Sender<()>>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    impl OtherNetns {
        fn new(test: &str) -> Option<OtherNetns> {
            let (ready_tx, ready_rx) = crossbeam_channel::bounded(1);
            let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(1);
            let thread = std::thread::spawn(move || {
                let r = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)
                    .map(|()| nix::unistd::gettid());
                let ok = r.is_ok();
                let _ = ready_tx.send(r);
                if ok {
                    let _ = done_rx.recv_timeout(Duration::from_secs(60));
                }
            });
            match ready_rx.recv().unwrap() {
                Ok(tid) => Some(OtherNetns {
                    path: format!("/proc/{}/task/{tid}/ns/net", std::process::id()).into(),
                    done: Some(done_tx),
                    thread: Some(thread),
                }),
                Err(e) => {
                    let msg = format!("SKIPPED: {test}: needs a network namespace ({e})");
                    assert!(
                        std::env::var("ENIIPD_CI").as_deref() != Ok("1"),
                        "{msg} (ENIIPD_CI=1: a skip is a failure)"
                    );
                    eprintln!("\n*** {msg} ***\n");
                    None
                }
            }
        }
    }

    impl Drop for OtherNetns {
        fn drop(&mut self) {
            drop(self.done.take());
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }

    const ALLOC_V6: &str = "OK ip=192.168.0.9 ipv6=2408:4005:3ff:5100::9 eni=eni-1 \
        mac=00:16:3e:00:00:01 vswitch=vsw-1 cidr=192.168.0.0/22 gateway=192.168.3.253";
    const ENI_V4_ONLY: &str =
        "OK eni=eni-1 mac=00:16:3e:00:00:01 vswitch=vsw-1 cidr=192.168.0.0/22 gateway=192.168.3.253";

    #[test]
    fn add_without_an_ipv6_gateway_fails_and_gives_the_address_back() {
        let Some(ns) = OtherNetns::new("an ADD's rollback") else {
            return;
        };
        let (socket, server) = fake_eniipd(&[
            ("show", "ERR not-found"),
            ("alloc", ALLOC_V6),
            ("eni", ENI_V4_ONLY),
            ("release", "OK released=192.168.0.9"),
        ]);
        let conf = conf_on(&socket);
        let mut e = env("abc123", &[]);
        // Never entered: the failure comes before the datapath.
        e.netns = Some(ns.path.clone());
        let err = add(&conf, &e).unwrap_err();
        assert_eq!(err.code, code::DAEMON, "{err}");
        assert!(
            err.msg.contains("no IPv6 gateway for ENI eni-1") && err.msg.contains("vsw-1"),
            "{err}"
        );
        drop(e);
        let seen = server.join().unwrap();
        assert_eq!(
            seen,
            vec![
                "show eni/abc123".to_string(),
                format!(
                    "alloc eni/abc123 sandbox=abc123 netns={} veth={}",
                    ns.path.display(),
                    datapath::host_veth_name("abc123", "eth0")
                ),
                "eni eni-1".to_string(),
                "release eni/abc123 sandbox=abc123".to_string(),
            ]
        );
    }

    #[test]
    fn a_failed_add_keeps_an_address_the_owner_held_before_it() {
        let Some(ns) = OtherNetns::new("an ADD's rollback") else {
            return;
        };
        // A second ADD of a running pod: the address is the first one's.
        let (socket, server) = fake_eniipd(&[
            ("show", ALLOC_V6),
            ("alloc", ALLOC_V6),
            ("eni", ENI_V4_ONLY),
            ("release", "OK released=192.168.0.9"),
        ]);
        let mut e = env("abc123", &[]);
        e.netns = Some(ns.path.clone());
        let err = add(&conf_on(&socket), &e).unwrap_err();
        assert_eq!(err.code, code::DAEMON, "{err}");
        let seen = server.join().unwrap();
        assert_eq!(seen.len(), 3, "{seen:?}");
        assert!(!seen.iter().any(|l| l.starts_with("release")), "{seen:?}");
    }

    #[test]
    fn a_bad_netns_is_refused_before_eniipd_is_asked() {
        // No eniipd at all: a check made after connecting would answer 11.
        let conf = conf_on(std::path::Path::new("/nonexistent/eniipd.sock"));
        let dir = test_dir("netns");
        let file = dir.join("file");
        std::fs::write(&file, "x").unwrap();
        for (path, says) in [
            ("/proc/self/ns/net", "is the namespace eniip-cni runs in"),
            (
                "/proc/thread-self/ns/net",
                "is the namespace eniip-cni runs in",
            ),
            ("/dev/null", "is not a network namespace"),
            ("/proc/self/ns/uts", "is not a network namespace"),
            (dir.to_str().unwrap(), "is not a network namespace"),
            (file.to_str().unwrap(), "is not a network namespace"),
        ] {
            let mut e = env("abc123", &[]);
            e.netns = Some(path.into());
            for cmd in [Command::Add, Command::Check] {
                let r = if cmd == Command::Add {
                    add(&conf, &e).map(drop)
                } else {
                    let mut c = conf.clone();
                    c.prev_result = Some(json!({"ips": [{"address": "192.168.0.9/32"}]}));
                    check(&c, &e)
                };
                let err = r.unwrap_err();
                assert_eq!(err.code, code::INVALID_ENV, "{path} {cmd:?}: {err}");
                assert!(err.msg.contains(says), "{path}: {err}");
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_hung_eniipd_fails_within_seconds_and_a_slow_alloc_does_not() {
        // Accepts (the kernel does, for a stopped process too) and never
        // answers.
        let dir = test_dir("hung");
        let path = dir.join("eniipd.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let t = std::time::Instant::now();
        let err = Client::connect(&path).unwrap_err();
        assert_eq!(err.code, code::TRY_AGAIN, "{err}");
        assert!(err.msg.contains("not answering"), "{err}");
        assert!(t.elapsed() < client::PING_TIMEOUT * 3, "{:?}", t.elapsed());
        std::fs::remove_dir_all(&dir).unwrap();

        // Answers ping at once and the alloc after 2.5 s, beyond one watch
        // period: the alloc waits for it.
        let (socket, server) = fake_eniipd(&[("alloc", "sleep 2500"), ("alloc", ALLOC_V6)]);
        let mut c = Client::connect(&socket).unwrap();
        let a = c.ask("alloc eni/x").unwrap();
        assert!(a.text.starts_with("ip=192.168.0.9"), "{a:?}");
        drop(c);
        assert_eq!(server.join().unwrap(), vec!["alloc eni/x".to_string()]);
    }

    #[test]
    fn version_answers_in_the_callers_version() {
        let v: Value = serde_json::from_str(&version(br#"{"cniVersion":"1.0.0"}"#)).unwrap();
        assert_eq!(v["cniVersion"], "1.0.0");
        assert_eq!(v["supportedVersions"], json!(["0.4.0", "1.0.0", "1.1.0"]));
        let v: Value = serde_json::from_str(&version(br#"{"cniVersion":"0.4.0"}"#)).unwrap();
        assert_eq!(v["cniVersion"], "0.4.0");
        let v: Value = serde_json::from_str(&version(b"")).unwrap();
        assert_eq!(v["cniVersion"], "1.1.0");
    }
}
