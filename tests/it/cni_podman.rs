//! eniip-cni under a real runtime: Debian's podman (CNI backend) with runc
//! on the shipped `cni/eniip.conflist`, unchanged (eniip-cni, then Debian's
//! portmap and bandwidth), and an image imported from busybox-static. The
//! conflist's socket path `/run/eniipd/eniipd.sock` is the test's eniipd
//! inside a mount namespace every podman command enters
//! ([`crate::shipped::MountHolder`]).
//!
//! podman runs with its network namespace set to the test's node namespace
//! (`nsenter --net`, which, unlike `ip netns exec`, keeps /sys and the
//! cgroup tree podman and runc need), so the plugins it runs, their routes,
//! rules and iptables rules all live in that namespace and the host's are
//! never touched. Its storage, run root, network and plugin folders are
//! private temporary folders.
//!
//! Shows: `podman run --network <net>` gets an address eniipd lists for that
//! container, pings the vswitch gateway out the right ENI, serves through
//! portmap; `podman rm` releases it (eniipd and the emulator agree); 20
//! containers started at once get distinct addresses across 2+ ENIs. In
//! dual stack, a container gets eniipd's IPv6 address too and pings the
//! vswitch's IPv6 gateway.

use crate::cnienv;
use crate::podman::{one_at_a_time, Podman};

use std::collections::{BTreeMap, BTreeSet};

use cnienv::{can_run, World, GATEWAY, GATEWAY6};
use serde_json::{json, Value};

/// The node's address that portmap clients connect to.
const NODE_ADDR: &str = "10.250.0.1";

/// An HTTP GET of `/` at `addr`, from inside the namespace `netns` (a
/// named thread enters it; the test's own thread never moves). Returns
/// the body.
fn http_get_in(netns: &std::path::Path, addr: &str) -> Result<String, String> {
    use std::io::{Read, Write};
    let (ns, addr) = (
        std::fs::File::open(netns).map_err(|e| e.to_string())?,
        addr.to_string(),
    );
    std::thread::Builder::new()
        .name("http-in-node".into())
        .spawn(move || {
            nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(|e| e.to_string())?;
            let sa: std::net::SocketAddr = addr.parse().map_err(|e| format!("{e}"))?;
            let mut s =
                std::net::TcpStream::connect_timeout(&sa, std::time::Duration::from_secs(5))
                    .map_err(|e| format!("connect {addr}: {e}"))?;
            s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
                .unwrap();
            s.write_all(b"GET / HTTP/1.0\r\n\r\n")
                .map_err(|e| e.to_string())?;
            let mut r = String::new();
            s.read_to_string(&mut r).map_err(|e| e.to_string())?;
            Ok(r.split("\r\n\r\n").nth(1).unwrap_or("").to_string())
        })
        .unwrap()
        .join()
        .unwrap()
}

/// eniipd's `list`: ip -> (state, owner, eni).
fn pool(w: &World) -> BTreeMap<String, (String, String, String)> {
    crate::common::list_rows(&w.daemon().ask("list"))
        .into_iter()
        .map(|l| {
            let owner = l.owner.unwrap_or_else(|| "-".into());
            (l.ip.to_string(), (l.state, owner, l.eni))
        })
        .collect()
}

#[test]
fn podman_containers_get_their_address_from_eniipd() {
    if !can_run(
        "cni under podman",
        &[
            "podman",
            "runc",
            "conmon",
            "busybox",
            "nsenter",
            "iptables",
            "tar",
            "/usr/lib/cni/portmap",
        ],
    ) {
        return;
    }
    let _serial = one_at_a_time();
    let w = World::start("ecs.g7.xlarge", json!({}));
    // A global address, as a node's eth0 has: the node would ask for the
    // gateway from it, which the emulated VPC (strict about reverse
    // paths) would not answer; the emulation's neighbour entry for the
    // gateway on each ENI link stands in for that answer.
    w.node_ip(&["addr", "add", &format!("{NODE_ADDR}/32"), "dev", "lo"]);
    let pm = Podman::shipped(&w.node.name, &w.socket());
    let net = pm.net.clone();

    // One container with a published port.
    pm.ok(&[
        "run",
        "-d",
        "--name",
        "web",
        "--network",
        &net,
        "-p",
        "18080:8080",
        "localhost/eniip-bb:1",
        "httpd",
        "-f",
        "-p",
        "8080",
        "-h",
        "/www",
    ]);
    let (id, ip) = pm.address("web", &net);
    let (state, owner, eni) = pool(&w).get(&ip).cloned().unwrap_or_default();
    assert_eq!(state, "inuse", "{:?}", pool(&w));
    assert!(
        owner.starts_with(&format!("{net}/")) && (owner.contains("web") || owner.contains(&id)),
        "{owner}"
    );
    let out = pm.run(&["exec", "web", "ping", "-c", "1", "-W", "2", GATEWAY]);
    if !out.status.success() {
        let o = pm.run(&["exec", "web", "sh", "-c", "ip addr; ip route; ip neigh"]);
        panic!(
            "ping: {}\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&o.stdout),
            w.diag()
        );
    }
    // Through portmap, from the node.
    let got = http_get_in(&w.node.path(), &format!("{NODE_ADDR}:18080"));
    assert_eq!(
        got.as_deref().ok(),
        Some("hello-from-the-pod\n"),
        "{got:?}\n{}",
        w.diag()
    );

    // podman rm releases it: eniipd has it idle, the emulator still has it
    // on the same ENI (the pool keeps it), and audit finds no difference.
    pm.ok(&["rm", "-f", "-t", "0", "web"]);
    let (state, _, eni_after) = pool(&w).get(&ip).cloned().unwrap_or_default();
    assert_eq!(state, "idle", "{:?}", pool(&w));
    assert_eq!(eni_after, eni);
    let on_eni: Vec<String> = w
        .sim
        .managed()
        .iter()
        .filter(|e| e["id"] == eni.as_str())
        .flat_map(|e| e["private_ips"].as_array().unwrap().clone())
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert!(on_eni.contains(&ip), "{on_eni:?}");
    assert_eq!(w.daemon().ask("audit").last().unwrap(), "OK consistent");

    twenty_at_once(&w, &pm, &net);
}

/// 20 containers started at once get distinct addresses across 2+ ENIs;
/// one on each ENI reaches the gateway through it; `rm` gives all back.
fn twenty_at_once(w: &World, pm: &Podman, net: &str) {
    let names: Vec<String> = (0..20).map(|i| format!("burst{i}")).collect();
    let handles: Vec<_> = names
        .iter()
        .map(|n| {
            let (n, dir, node, net) = (n.clone(), pm.dir.clone(), pm.node.clone(), net.to_string());
            let (enter, holder) = (pm.enter.clone(), pm.holder.clone());
            std::thread::Builder::new()
                .name(format!("podman-{n}"))
                .spawn(move || {
                    let mut p = Podman {
                        dir,
                        node,
                        net: net.clone(),
                        enter,
                        holder,
                    };
                    let out = p.run(&[
                        "run",
                        "-d",
                        "--name",
                        &n,
                        "--network",
                        &net,
                        "localhost/eniip-bb:1",
                        "sleep",
                        "600",
                    ]);
                    // The shared folder and the mount holder are the
                    // test's: give the holder back, skip the clean-up.
                    drop(p.holder.take());
                    std::mem::forget(p);
                    out
                })
                .unwrap()
        })
        .collect();
    for (n, h) in names.iter().zip(handles) {
        let out = h.join().unwrap();
        assert!(
            out.status.success(),
            "{n}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let ips: Vec<String> = names.iter().map(|n| pm.address(n, net).1).collect();
    let distinct: BTreeSet<&String> = ips.iter().collect();
    assert_eq!(distinct.len(), 20, "{ips:?}");
    let p = pool(w);
    let mut by_eni: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for (ip, n) in ips.iter().zip(&names) {
        let (state, _, eni) = p.get(ip).cloned().unwrap_or_default();
        assert_eq!(state, "inuse", "{ip}");
        by_eni.entry(eni).or_default().push((n.clone(), ip.clone()));
    }
    assert!(by_eni.len() >= 2, "{by_eni:?}");
    // One container on each ENI reaches the gateway through its own ENI.
    for (eni, list) in &by_eni {
        let (n, ip) = &list[0];
        let out = pm.run(&["exec", n, "ping", "-c", "1", "-W", "2", GATEWAY]);
        assert!(out.status.success(), "{n} {ip} on {eni}");
    }
    pm.ok(&["rm", "-af", "-t", "0"]);
    // podman's clean-up (the DEL) may end in conmon's `container
    // cleanup` just after `rm` returns.
    let inuse = || -> Vec<_> {
        pool(w)
            .into_iter()
            .filter(|(_, (s, _, _))| s == "inuse")
            .collect()
    };
    assert!(
        crate::common::eventually(std::time::Duration::from_secs(10), || inuse().is_empty()),
        "{:?}",
        inuse()
    );
}

#[test]
fn podman_containers_get_ipv6_in_dual_stack() {
    if !can_run(
        "cni under podman, dual stack",
        &[
            "podman",
            "runc",
            "conmon",
            "busybox",
            "nsenter",
            "ip6tables",
            "tar",
        ],
    ) {
        return;
    }
    let _serial = one_at_a_time();
    let w = World::start_dual("ecs.g7.large", json!({}));
    let pm = Podman::with_plugins(
        &w.node.name,
        &w.network,
        Some(json!([{"type": "eniip-cni", "socket": w.cfg["socket_path"], "mtu": 1500}])),
    );
    let net = w.network.clone();
    pm.ok(&[
        "run",
        "-d",
        "--name",
        "v6",
        "--network",
        &net,
        "localhost/eniip-bb:1",
        "sleep",
        "600",
    ]);
    let v: Value = serde_json::from_str(&pm.ok(&["inspect", "v6"])).unwrap();
    let settings = &v[0]["NetworkSettings"]["Networks"][&net];
    let ip = settings["IPAddress"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let ip6 = settings["GlobalIPv6Address"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(ip6.contains(':'), "podman shows no IPv6: {v}");
    let (state, owner, _) = pool(&w).get(&ip).cloned().unwrap_or_default();
    assert_eq!(state, "inuse", "{:?}", pool(&w));
    let show = w.daemon().ok(&format!("show {owner}"));
    assert!(show.contains(&format!("ipv6={ip6} ")), "{show} / {ip6}");
    let ping6 = || {
        pm.run(&["exec", "v6", "ping6", "-c", "1", "-W", "2", GATEWAY6])
            .status
            .success()
    };
    if !crate::common::eventually(std::time::Duration::from_secs(10), ping6) {
        let o = pm.run(&[
            "exec",
            "v6",
            "sh",
            "-c",
            "ip -6 addr; ip -6 route; ip -6 neigh",
        ]);
        panic!(
            "ping6 {GATEWAY6} from {ip6}:\n{}\n{}",
            String::from_utf8_lossy(&o.stdout),
            w.diag()
        );
    }
    let out = pm.run(&["exec", "v6", "ping", "-c", "1", "-W", "2", GATEWAY]);
    assert!(out.status.success(), "IPv4 too");
    pm.ok(&["rm", "-f", "-t", "0", "v6"]);
    // podman's clean-up (the DEL) may end in conmon's `container
    // cleanup` just after `rm` returns.
    assert!(
        crate::common::eventually(std::time::Duration::from_secs(10), || pool(&w)
            .get(&ip)
            .is_some_and(|(state, _, _)| state == "idle")),
        "{:?}",
        pool(&w)
    );
    let v6 = format!(
        "{}{}",
        w.node_ip(&["-6", "rule"]),
        w.node_ip(&["-6", "route", "show", "table", "all"])
    );
    assert!(!v6.contains(&ip6), "{v6}");
}
