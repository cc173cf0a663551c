//! eniip-cni against what an adversarial pass threw at it (issue 20,
//! items 1 to 7): a CNI_NETNS that is the plugin's own namespace or no
//! network namespace at all, interface names the kernel refuses, two ADDs
//! of one container at once, an owner made to collide, a host end left by
//! a killed ADD (with or without the name recorded by eniipd), a hung
//! eniipd, and two links with the ENI's MAC.
//! Needs root and `ip`; says SKIPPED loudly otherwise (and fails under
//! ENIIPD_CI=1).

use std::time::{Duration, Instant};

use crate::cnienv;

use crate::common::eventually;
use cnienv::{can_run, run_bin, s, sh, try_sh, Ctr, World};
use serde_json::{json, Value};

const XLARGE: &str = "ecs.g7.xlarge";

/// Everything of the node an ADD could change: its links, rules, routes of
/// every table and every rp_filter.
fn node_state(w: &World) -> String {
    let mut out = String::new();
    for what in [
        "link",
        "rule",
        "route show table all",
        "-6 route show table all",
    ] {
        let mut a = vec!["-o"];
        a.extend(what.split(' '));
        out.push_str(&w.node_ip(&a));
    }
    out.push_str(&sh(&[
        "ip",
        "netns",
        "exec",
        &w.node.name,
        "sh",
        "-c",
        "grep -r . /proc/sys/net/ipv4/conf/*/rp_filter /proc/sys/net/ipv4/ip_forward",
    ]));
    out
}

/// One plugin run with every CNI_* variable given as is.
fn run_raw(w: &World, cmd: &str, vars: &[(&str, &str)], conf: &Value) -> cnienv::CniOut {
    let mut c = cnienv::plugin_command(
        &["ip", "netns", "exec", &w.node.name, cnienv::plugin()],
        cmd,
    );
    c.envs(vars.iter().copied());
    cnienv::CniOut::from(cnienv::feed(c, conf))
}

#[test]
fn a_bad_environment_is_refused_first_and_touches_nothing() {
    if !can_run("cni hostile environment", &[]) {
        return;
    }
    let w = World::start(XLARGE, json!({}));
    let conf = w.conf("1.0.0", json!({}));
    let dir = w.dir.join("not-a-netns");
    std::fs::create_dir_all(&dir).unwrap();
    let file = w.dir.join("a-file");
    std::fs::write(&file, "x").unwrap();
    let node_path = w.node.path();
    let ctr = Ctr::new(&w, 0);
    let good_ns = s(&ctr.ns.path());
    let before = node_state(&w);
    let cases: Vec<(String, String, &str)> = vec![
        // The plugin's own namespace, by two names.
        ("/proc/self/ns/net".into(), "eth0".into(), "runs in"),
        (s(&node_path), "eth0".into(), "runs in"),
        // No network namespace at all.
        (s(&file), "eth0".into(), "not a network namespace"),
        (s(&dir), "eth0".into(), "not a network namespace"),
        ("/dev/null".into(), "eth0".into(), "not a network namespace"),
        (
            "/proc/self/ns/uts".into(),
            "eth0".into(),
            "not a network namespace",
        ),
        // Names the kernel refuses.
        (good_ns.clone(), "..".into(), "not a valid interface name"),
        (
            good_ns.clone(),
            "eth\t0".into(),
            "not a valid interface name",
        ),
        (
            good_ns.clone(),
            "eth\n0".into(),
            "not a valid interface name",
        ),
        (
            good_ns.clone(),
            "eth:0".into(),
            "not a valid interface name",
        ),
    ];
    for (netns, ifname, says) in &cases {
        for cmd in ["ADD", "CHECK"] {
            let mut conf = conf.clone();
            if cmd == "CHECK" {
                conf["prevResult"] = json!({"ips": [{"address": "192.168.0.9/32"}]});
            }
            let out = run_raw(
                &w,
                cmd,
                &[
                    ("CNI_CONTAINERID", "hostile1"),
                    ("CNI_NETNS", netns),
                    ("CNI_IFNAME", ifname),
                ],
                &conf,
            );
            assert_eq!(out.code(), 4, "{cmd} {netns} {ifname:?}: {out:?}");
            assert!(
                out.json["msg"].as_str().unwrap_or("").contains(says),
                "{cmd} {netns} {ifname:?}: {out:?}"
            );
        }
    }
    // Nothing was allocated and nothing on the node changed: no pod
    // interface, no default route taken over, no ENI table, no rp_filter.
    assert!(w.inuse().is_empty(), "{:?}", w.inuse());
    assert_eq!(node_state(&w), before, "{}", w.diag());
    // The same node still serves a real pod.
    let out = w.cni("ADD", Some(&ctr), &conf).expect_ok("ADD");
    // The emulated VPC routes a new address once it has seen it in the
    // emulator's state (a poll every 30 ms), maybe just after the ADD.
    assert!(
        eventually(Duration::from_secs(5), || ctr.ping(cnienv::GATEWAY)),
        "{}",
        w.diag()
    );
    assert!(!out.ip().is_empty());
}

#[test]
fn two_adds_of_one_container_at_once_never_hand_its_address_twice() {
    if !can_run("cni concurrent ADDs", &["busybox"]) {
        return;
    }
    let w = World::start(XLARGE, json!({}));
    let conf = w.conf("1.0.0", json!({}));
    let other = Ctr::new(&w, 99);
    for trial in 0..10 {
        let c = Ctr::new(&w, trial);
        let runs: Vec<_> = (0..2)
            .map(|_| {
                let (node, id, path, conf) =
                    (w.node.name.clone(), c.id.clone(), c.ns.path(), conf.clone());
                std::thread::spawn(move || {
                    run_bin(
                        &[],
                        &node,
                        cnienv::plugin(),
                        "ADD",
                        Some((&id, path, "")),
                        &conf,
                    )
                })
            })
            .collect();
        let outs: Vec<_> = runs.into_iter().map(|h| h.join().unwrap()).collect();
        // Whatever each answered, the container holds its address and uses
        // it, and nobody else can get it.
        let owner = format!("{}/{}", w.network, c.id);
        let held = w.daemon().ok(&format!("show {owner}"));
        let ip = held
            .split(' ')
            .find_map(|w| w.strip_prefix("ip="))
            .unwrap()
            .to_string();
        for o in outs.iter().filter(|o| o.ok) {
            assert_eq!(o.ip(), ip, "trial {trial}: {outs:?}");
        }
        assert!(outs.iter().any(|o| o.ok), "trial {trial}: {outs:?}");
        assert!(
            c.ns.exec(&["ip", "-o", "addr", "show", "eth0"])
                .stdout
                .windows(ip.len())
                .any(|x| x == ip.as_bytes()),
            "trial {trial}: {}",
            w.diag()
        );
        assert!(c.ping(cnienv::GATEWAY), "trial {trial}: {}", w.diag());
        let next = w.cni("ADD", Some(&other), &conf).expect_ok("ADD other");
        assert_ne!(next.ip(), ip, "trial {trial}: the address was handed twice");
        w.cni("DEL", Some(&other), &conf).expect_ok("DEL other");
        w.cni("DEL", Some(&c), &conf).expect_ok("DEL");
    }
    assert!(w.inuse().is_empty(), "{:?}", w.inuse());
}

#[test]
fn a_container_named_like_a_pod_does_not_get_the_pods_address() {
    if !can_run("cni owner collision", &[]) {
        return;
    }
    let w = World::start(XLARGE, json!({}));
    let conf = w.conf("1.0.0", json!({}));
    let pod = Ctr::new(&w, 0);
    let pod_out = w
        .cni_with(
            "ADD",
            Some((
                &pod.id,
                pod.ns.path(),
                "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-1",
            )),
            &conf,
        )
        .expect_ok("pod ADD");
    let impostor = Ctr::new(&w, 1);
    let out = w
        .cni_with("ADD", Some(("ns/web-1", impostor.ns.path(), "")), &conf)
        .expect_ok("container ADD");
    assert_ne!(out.ip(), pod_out.ip(), "{:?}", w.inuse());
    assert_eq!(w.inuse().len(), 2, "{:?}", w.inuse());
}

#[test]
fn gc_removes_the_host_end_of_an_add_killed_before_its_rules() {
    if !can_run("cni GC of a killed ADD", &[]) {
        return;
    }
    let w = World::start(XLARGE, json!({}));
    let conf = w.conf("1.1.0", json!({}));
    let live = Ctr::new(&w, 0);
    w.cni("ADD", Some(&live), &conf).expect_ok("ADD");
    // What a plugin killed between making the veth and adding its rule
    // leaves: the allocation (with the host end it named) and a veth with
    // no address, route or rule.
    let dead = Ctr::new(&w, 1);
    let veth = eniip_datapath::datapath::host_veth_name(&dead.id, "eth0");
    let owner = format!("{}/{}", w.network, dead.id);
    w.daemon().ok(&format!(
        "alloc {owner} sandbox={} netns={} veth={veth}",
        dead.id,
        s(&dead.ns.path())
    ));
    w.node_ip(&[
        "link",
        "add",
        &veth,
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "netns",
        &dead.ns.name,
    ]);
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([{"containerID": live.id, "ifname": "eth0"}]);
    w.cni("GC", None, &gc).expect_ok("GC");
    let links = w.node_ip(&["-o", "link"]);
    assert!(!links.contains(&veth), "{links}");
    assert_eq!(w.inuse().len(), 1, "{:?}", w.inuse());
    assert!(live.ping(cnienv::GATEWAY), "{}", w.diag());
}

/// An allocation that recorded no host end (`alloc` without `veth=`: an
/// older eniip-cni's, or one made while eniipd could not read the netns)
/// whose ADD was killed half way: GC removes its host end all the same,
/// found by its host route when it has one, and by the name ADD gives it
/// (the container id and eth0) when it has nothing else (issue 31 item
/// 5). A host end of that name that routes another address is left.
#[test]
fn gc_removes_the_host_end_of_an_allocation_that_named_none() {
    if !can_run("cni GC without veth=", &[]) {
        return;
    }
    let w = World::start(XLARGE, json!({}));
    let conf = w.conf("1.1.0", json!({}));
    let live = Ctr::new(&w, 0);
    w.cni("ADD", Some(&live), &conf).expect_ok("ADD");
    // Killed after its host route and before its rule; killed right after
    // its veth; and one whose host end routes another address.
    let routed = Ctr::new(&w, 1);
    let bare = Ctr::new(&w, 2);
    let other = Ctr::new(&w, 3);
    let mut ends = Vec::new();
    for (c, route) in [
        (&routed, Some(None)),
        (&bare, None),
        (&other, Some(Some("10.255.0.7".to_string()))),
    ] {
        let veth = eniip_datapath::datapath::host_veth_name(&c.id, "eth0");
        let owner = format!("{}/{}", w.network, c.id);
        let got = w.daemon().ok(&format!("alloc {owner} sandbox={}", c.id));
        let ip = crate::common::field(&got, "ip");
        w.node_ip(&[
            "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &c.ns.name,
        ]);
        w.node_ip(&["link", "set", &veth, "up"]);
        if let Some(to) = route {
            let to = to.unwrap_or_else(|| ip.clone());
            w.node_ip(&["route", "add", &format!("{to}/32"), "dev", &veth]);
        }
        ends.push((veth, ip));
    }
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([{"containerID": live.id, "ifname": "eth0"}]);
    w.cni("GC", None, &gc).expect_ok("GC");
    let links = w.node_ip(&["-o", "link"]);
    let routes = w.node_ip(&["route"]);
    for (veth, ip) in &ends[..2] {
        assert!(!links.contains(veth.as_str()), "{veth} left:\n{links}");
        assert!(
            !routes.contains(&format!("{ip} ")),
            "the route to {ip} left:\n{routes}"
        );
    }
    assert!(links.contains(ends[2].0.as_str()), "{links}");
    assert_eq!(w.inuse().len(), 1, "{:?}", w.inuse());
    assert!(live.ping(cnienv::GATEWAY), "{}", w.diag());
}

#[test]
fn a_hung_eniipd_fails_add_check_and_gc_within_seconds_and_a_del_queues_its_release() {
    if !can_run("cni against a hung eniipd", &[]) {
        return;
    }
    let w = World::start(XLARGE, json!({}));
    // daemonWait 0: ADD does not wait for it either.
    let conf = w.conf("1.1.0", json!({"daemonWait": 0}));
    let c = Ctr::new(&w, 0);
    let added = w.cni("ADD", Some(&c), &conf).expect_ok("ADD");
    let veth = eniip_datapath::datapath::host_veth_name(&c.id, "eth0");
    let pid = nix::unistd::Pid::from_raw(w.daemon().pid());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let mut check = conf.clone();
    check["prevResult"] = added.json.clone();
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([]);
    let other = Ctr::new(&w, 1);
    let timed = |cmd: &str, ctr: Option<&Ctr>, conf: &serde_json::Value| {
        let t = Instant::now();
        let out = w.cni(cmd, ctr, conf);
        (out, t.elapsed())
    };
    let outcomes: Vec<(&str, cnienv::CniOut, Duration)> = [
        ("ADD", Some(&other), &conf),
        ("CHECK", Some(&c), &check),
        ("GC", None, &gc),
    ]
    .into_iter()
    .map(|(cmd, ctr, conf)| {
        let (out, took) = timed(cmd, ctr, conf);
        (cmd, out, took)
    })
    .collect();
    // DEL never fails for it: the node side goes, the release is queued.
    let (del, del_took) = timed("DEL", Some(&c), &conf);
    let queue = eniip_protocol::releases::dir_for(&w.socket());
    let queued = std::fs::read_dir(&queue).map(|d| d.count()).unwrap_or(0);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    for (cmd, out, took) in &outcomes {
        assert_eq!(out.code(), 11, "{cmd}: {out:?}");
        assert!(
            out.json["msg"]
                .as_str()
                .unwrap_or("")
                .contains("not answering"),
            "{cmd}: {out:?}"
        );
        // The deadline is a behaviour here (runtimes time plugins out),
        // with room for a loaded machine.
        assert!(*took < Duration::from_secs(20), "{cmd} took {took:?}");
    }
    assert!(del.ok, "DEL with eniipd hung: {del:?}");
    assert!(del_took < Duration::from_secs(20), "DEL took {del_took:?}");
    assert_eq!(queued, 1, "{}", queue.display());
    assert!(!w.node_ip(&["-o", "link"]).contains(&veth), "{}", w.diag());
    // Once eniipd runs again it applies the release, and the queue empties.
    w.assert_none_in_use_within(Duration::from_secs(30));
    assert!(
        crate::common::eventually(Duration::from_secs(30), || {
            std::fs::read_dir(&queue).map(|d| d.count()).unwrap_or(0) == 0
        }),
        "{}",
        queue.display()
    );
}

#[test]
fn two_links_with_the_enis_mac_fail_the_add_naming_both() {
    if !can_run("cni two links with one MAC", &[]) {
        return;
    }
    let w = World::start(XLARGE, json!({}));
    let conf = w.conf("1.0.0", json!({}));
    let first = Ctr::new(&w, 0);
    w.cni("ADD", Some(&first), &conf).expect_ok("ADD");
    let shown = w.daemon().ok(&format!("show {}/{}", w.network, first.id));
    let mac = shown
        .split(' ')
        .find_map(|x| x.strip_prefix("mac="))
        .expect("the ENI's MAC")
        .to_string();
    let twin = format!("twin{}", w.tag);
    let twin = &twin[..twin.len().min(14)];
    // A veth, as the tests' ENIs are (a rule based on the link's kind
    // would find no ENI here at all).
    let peer = format!("{twin}p");
    w.node_ip(&[
        "link", "add", twin, "address", &mac, "type", "veth", "peer", "name", &peer,
    ]);
    let second = Ctr::new(&w, 1);
    let out = w.cni("ADD", Some(&second), &conf);
    assert_eq!(out.code(), 101, "{out:?}");
    let msg = out.json["msg"].as_str().unwrap_or("").to_string();
    assert!(
        msg.contains(twin) && msg.contains("carry the ENI's MAC"),
        "{msg}"
    );
    // The failed ADD gave its address back; the first pod is untouched.
    assert!(
        eventually(Duration::from_secs(5), || w.inuse().len() == 1),
        "{:?}",
        w.inuse()
    );
    assert!(try_sh(&["ip", "-n", &w.node.name, "link", "del", twin]));
    assert!(first.ping(cnienv::GATEWAY), "{}", w.diag());
}
