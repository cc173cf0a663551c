//! eniip-cni invoked directly, the way libcni does, in namespaces the test
//! makes (see tests/cnienv): ADD's datapath carries a ping out the right
//! ENI; CHECK passes on a healthy attachment and fails without its rule;
//! DEL is idempotent (twice, with the netns gone, across an eniipd
//! restart); GC releases exactly what its keep-list omits; STATUS reports
//! eniipd down (50) and a pool at capacity (51); a failed ADD gives its
//! address back; in dual stack, IPv6 goes out the right ENI too, CHECK
//! catches a missing IPv6 rule, and DEL, GC and a failed ADD leave no IPv6
//! state; a pod annotated `eniipd/ip-stack: ipv4` gets IPv4 only there.
//! Needs root and `ip` (busybox and ip6tables for some); says
//! SKIPPED loudly otherwise (and fails under ENIIPD_CI=1).

use crate::cnienv;

use std::time::Duration;

use crate::common::eventually;
use cnienv::{can_run, with_prev, Ctr, World, GATEWAY, GATEWAY6};
use serde_json::{json, Value};

const LARGE: &str = "ecs.g7.large";

#[test]
fn add_pings_out_its_eni_check_catches_a_missing_rule_and_del_is_idempotent() {
    if !can_run("cni add/check/del", &["busybox"]) {
        return;
    }
    let w = World::start(LARGE, json!({}));
    let conf = w.conf("1.1.0", json!({}));
    let mut c = Ctr::new(&w, 0);
    c.args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-1".into();
    let add = w.cni("ADD", Some(&c), &conf).expect_ok("ADD");
    let ip = add.ip();
    let r = &add.json;
    assert_eq!(r["cniVersion"], "1.1.0");
    assert_eq!(r["interfaces"][1]["name"], "eth0");
    assert_eq!(
        r["interfaces"][1]["sandbox"],
        c.ns.path().display().to_string()
    );
    assert!(
        r["interfaces"][1]["mac"].as_str().unwrap().len() == 17,
        "{r}"
    );
    assert_eq!(r["ips"][0]["interface"], 1);
    assert_eq!(r["ips"][0]["gateway"], "169.254.1.1");
    assert_eq!(r["routes"][0]["dst"], "0.0.0.0/0");

    // eniipd lists the address for the pod's owner.
    let owner = format!("{}/default/web-1", w.network);
    assert_eq!(w.inuse().get(&ip), Some(&owner), "{:?}", w.inuse());

    // The container reaches the vswitch gateway: the VPC side routes the
    // pod address only over the ENI holding it, with strict rp_filter.
    assert!(c.ping(GATEWAY), "ping {GATEWAY} from {ip}");

    // CHECK passes, and fails once the policy rule is gone.
    let checked = with_prev(&conf, r);
    w.cni("CHECK", Some(&c), &checked).expect_ok("CHECK");
    w.node_ip(&["rule", "del", "pref", "2048", "from", &format!("{ip}/32")]);
    let bad = w.cni("CHECK", Some(&c), &checked);
    assert_eq!(bad.code(), 101, "{bad:?}");
    assert!(
        bad.json["msg"].as_str().unwrap().contains("rule"),
        "{bad:?}"
    );
    assert!(!c.ping(GATEWAY), "no rule: the pod must not reach the VPC");

    // DEL releases; a second DEL is success too.
    w.cni("DEL", Some(&c), &checked).expect_ok("DEL");
    assert!(!w.inuse().contains_key(&ip), "{:?}", w.inuse());
    w.assert_no_host_end();
    w.cni("DEL", Some(&c), &checked).expect_ok("second DEL");
}

#[test]
fn del_with_the_netns_gone_and_across_an_eniipd_restart() {
    if !can_run("cni del cases", &[]) {
        return;
    }
    let mut w = World::start(LARGE, json!({}));
    let conf = w.conf("1.0.0", json!({}));
    let mut a = Ctr::new(&w, 0);
    let b = Ctr::new(&w, 1);
    let ra = w.cni("ADD", Some(&a), &conf).expect_ok("ADD a");
    let rb = w.cni("ADD", Some(&b), &conf).expect_ok("ADD b");
    assert_ne!(ra.ip(), rb.ip());

    // The netns is gone (the runtime removed it first): DEL still releases
    // and removes the host side.
    let (id, path) = (a.id.clone(), a.ns.path());
    a.ns.delete();
    w.cni_with(
        "DEL",
        Some((&id, path.clone(), "")),
        &with_prev(&conf, &ra.json),
    )
    .expect_ok("DEL without netns");
    assert!(!w.inuse().contains_key(&ra.ip()));
    let rules = w.node_ip(&["rule"]);
    assert!(!rules.contains(&ra.ip()), "{rules}");
    // ... and with no CNI_NETNS at all.
    w.cni_with("DEL", Some((&id, "".into(), "")), &conf)
        .expect_ok("DEL with empty CNI_NETNS");

    // eniipd away: DEL succeeds (the node side goes, the release is
    // queued and applied when eniipd is back); ADD with daemonWait 0 is
    // "try again later" (11) at once.
    w.stop_daemon();
    w.cni("DEL", Some(&b), &with_prev(&conf, &rb.json))
        .expect_ok("DEL with eniipd away");
    assert!(!b.ping(GATEWAY), "still attached after the DEL");
    let mut no_wait = conf.clone();
    no_wait["daemonWait"] = json!(0);
    let add_down = w.cni("ADD", Some(&Ctr::new(&w, 2)), &no_wait);
    assert_eq!(add_down.code(), 11, "{add_down:?}");
    w.start_daemon();
    assert!(!w.inuse().contains_key(&rb.ip()), "{:?}", w.inuse());
    w.cni("DEL", Some(&b), &with_prev(&conf, &rb.json))
        .expect_ok("DEL again after restart");
}

#[test]
fn gc_releases_exactly_the_attachments_not_kept() {
    if !can_run("cni gc", &["busybox"]) {
        return;
    }
    let w = World::start(LARGE, json!({}));
    let conf = w.conf("1.1.0", json!({}));
    // 8 containers: more than one ENI of this type holds (6).
    let ctrs: Vec<Ctr> = (0..8).map(|i| Ctr::new(&w, i)).collect();
    let ips: Vec<String> = ctrs
        .iter()
        .map(|c| w.cni("ADD", Some(c), &conf).expect_ok("ADD").ip())
        .collect();
    let enis = w.enis_in_use();
    assert!(enis.len() >= 2, "{enis:?}");
    for (c, ip) in ctrs.iter().zip(&ips) {
        assert!(c.ping(GATEWAY), "ping from {ip}");
    }
    // An allocation of another network is out of GC's scope.
    w.daemon().ok("alloc othernet/x sandbox=zzz");

    let keep = [0usize, 3, 7];
    let attachments: Vec<Value> = keep
        .iter()
        .map(|&i| json!({"containerID": ctrs[i].id, "ifname": "eth0"}))
        .collect();
    let gc_conf = w.conf("1.1.0", json!({"cni.dev/valid-attachments": attachments}));
    w.cni("GC", None, &gc_conf).expect_ok("GC");
    let inuse = w.inuse();
    for (i, ip) in ips.iter().enumerate() {
        assert_eq!(
            inuse.contains_key(ip),
            keep.contains(&i),
            "{i} {ip}: {inuse:?}"
        );
    }
    assert!(inuse.values().any(|o| o == "othernet/x"), "{inuse:?}");
    // The released ones lost their host side; the kept ones still work.
    let rules = w.node_ip(&["rule"]);
    for (i, ip) in ips.iter().enumerate() {
        assert_eq!(
            rules.contains(&format!("from {ip} ")),
            keep.contains(&i),
            "{rules}"
        );
    }
    for &i in &keep {
        assert!(ctrs[i].ping(GATEWAY));
    }
    // An empty keep-list releases the rest of this network.
    w.cni(
        "GC",
        None,
        &w.conf("1.1.0", json!({"cni.dev/valid-attachments": []})),
    )
    .expect_ok("GC all");
    assert_eq!(w.inuse().len(), 1, "{:?}", w.inuse());
}

#[test]
fn status_reports_eniipd_down_and_a_full_pool() {
    if !can_run("cni status", &[]) {
        return;
    }
    let mut w = World::start(LARGE, json!({}));
    let conf = w.conf("1.1.0", json!({}));
    w.cni("STATUS", None, &conf).expect_ok("STATUS");
    // STATUS is a 1.1 command.
    assert_eq!(w.cni("STATUS", None, &w.conf("1.0.0", json!({}))).code(), 1);
    // ecs.g7.large: 2 usable ENIs x 6 = 12 addresses.
    for i in 0..12 {
        w.daemon().ok(&format!("alloc fill/{i}"));
    }
    let full = w.cni("STATUS", None, &conf);
    assert_eq!(full.code(), 51, "{full:?}");
    w.daemon().ok("release fill/0");
    w.cni("STATUS", None, &conf)
        .expect_ok("STATUS with one idle");
    w.stop_daemon();
    let down = w.cni("STATUS", None, &conf);
    assert_eq!(down.code(), 50, "{down:?}");
}

#[test]
fn a_failed_add_gives_its_address_back_and_leaves_nothing() {
    if !can_run("cni add rollback", &[]) {
        return;
    }
    let w = World::start(LARGE, json!({}));
    let conf = w.conf("1.0.0", json!({}));
    let c = Ctr::new(&w, 0);
    w.failed_add(&c, &conf);
    w.assert_no_host_end();
    let rules = w.node_ip(&["rule"]);
    assert!(!rules.contains("2048"), "{rules}");
    // Bad config: the key is named, error 7.
    let bad = w.cni("ADD", Some(&c), &w.conf("1.0.0", json!({"mtu": "big"})));
    assert_eq!(bad.code(), 7);
    assert!(bad.json["msg"].as_str().unwrap().contains("mtu"), "{bad:?}");
}

#[test]
fn a_chain_with_tuning_portmap_and_bandwidth_as_libcni_runs_it() {
    if !can_run(
        "cni chain",
        &[
            "iptables",
            "tc",
            "/usr/lib/cni/portmap",
            "/usr/lib/cni/tuning",
            "/usr/lib/cni/bandwidth",
        ],
    ) {
        return;
    }
    let w = World::start(LARGE, json!({}));
    let c = Ctr::new(&w, 0);
    let net = w.network.clone();
    let chain: Vec<(String, Value)> = vec![
        (cnienv::plugin().to_string(), w.conf("1.0.0", json!({}))),
        (
            "/usr/lib/cni/tuning".into(),
            json!({"cniVersion": "1.0.0", "name": net, "type": "tuning",
                   "sysctl": {"net.core.somaxconn": "512"}}),
        ),
        (
            "/usr/lib/cni/portmap".into(),
            json!({"cniVersion": "1.0.0", "name": net, "type": "portmap",
                   "capabilities": {"portMappings": true},
                   "runtimeConfig": {"portMappings": [
                       {"hostPort": 18081, "containerPort": 8080, "protocol": "tcp"}]}}),
        ),
        (
            "/usr/lib/cni/bandwidth".into(),
            json!({"cniVersion": "1.0.0", "name": net, "type": "bandwidth",
                   "ingressRate": 8_000_000, "ingressBurst": 1_000_000,
                   "egressRate": 8_000_000, "egressBurst": 1_000_000}),
        ),
    ];
    let ctr = || Some((c.id.as_str(), c.ns.path(), ""));
    // ADD in order, each with the result so far.
    let mut result = Value::Null;
    for (bin, conf) in &chain {
        let conf = if result.is_null() {
            conf.clone()
        } else {
            with_prev(conf, &result)
        };
        let out = cnienv::run_bin(&[], &w.node.name, bin, "ADD", ctr(), &conf);
        assert!(out.ok, "ADD {bin}: {out:?}");
        result = out.json;
    }
    let ip = result["ips"][0]["address"]
        .as_str()
        .unwrap()
        .trim_end_matches("/32")
        .to_string();
    assert!(c.ping(GATEWAY), "ping through the chain");
    let somaxconn = c.ns.exec(&["cat", "/proc/sys/net/core/somaxconn"]);
    assert_eq!(String::from_utf8_lossy(&somaxconn.stdout).trim(), "512");
    let nat = w.node.exec(&["iptables-save", "-t", "nat"]);
    let nat = String::from_utf8_lossy(&nat.stdout).into_owned();
    assert!(
        nat.contains(&format!("--to-destination {ip}:8080")),
        "{nat}"
    );
    let qdisc = w.node.exec(&["tc", "qdisc", "show"]);
    let qdisc = String::from_utf8_lossy(&qdisc.stdout).into_owned();
    assert!(qdisc.contains("tbf"), "{qdisc}");

    // CHECK in order with the final result: every plugin agrees. portmap
    // is left out: Debian's 1.1.1 fails CHECK on an IPv4-only attachment
    // looking for IPv6 rules (containernetworking/plugins issue 819).
    for (bin, conf) in chain.iter().filter(|(b, _)| !b.ends_with("/portmap")) {
        let out = cnienv::run_bin(
            &[],
            &w.node.name,
            bin,
            "CHECK",
            ctr(),
            &with_prev(conf, &result),
        );
        assert!(out.ok, "CHECK {bin}: {out:?}");
    }
    // DEL in reverse.
    for (bin, conf) in chain.iter().rev() {
        let out = cnienv::run_bin(
            &[],
            &w.node.name,
            bin,
            "DEL",
            ctr(),
            &with_prev(conf, &result),
        );
        assert!(out.ok, "DEL {bin}: {out:?}");
    }
    let nat = w.node.exec(&["iptables-save", "-t", "nat"]);
    assert!(!String::from_utf8_lossy(&nat.stdout).contains(&ip));
    assert!(!w.inuse().contains_key(&ip), "{:?}", w.inuse());
    let links = w.node_ip(&["-o", "link"]);
    assert!(!links.contains("enip") && !links.contains("bwp"), "{links}");
}

#[test]
fn a_late_del_of_an_old_sandbox_leaves_its_successor_alone() {
    if !can_run("cni sandbox succession", &["busybox"]) {
        return;
    }
    let w = World::start(LARGE, json!({}));
    let conf = w.conf("1.0.0", json!({}));
    let pod = "IgnoreUnknown=1;K8S_POD_NAMESPACE=prod;K8S_POD_NAME=db-0";
    let mut old = Ctr::new(&w, 0);
    old.args = pod.into();
    let mut new = Ctr::new(&w, 1);
    new.args = pod.into();
    let r_old = w.cni("ADD", Some(&old), &conf).expect_ok("ADD old sandbox");
    // The pod's new sandbox arrives before the old one's DEL: same owner,
    // so eniipd moves the same address to it.
    let r_new = w.cni("ADD", Some(&new), &conf).expect_ok("ADD new sandbox");
    assert_eq!(r_old.ip(), r_new.ip());
    assert!(new.ping(GATEWAY));
    w.cni("DEL", Some(&old), &with_prev(&conf, &r_old.json))
        .expect_ok("late DEL of the old sandbox");
    let owner = format!("{}/prod/db-0", w.network);
    assert_eq!(w.inuse().get(&r_new.ip()), Some(&owner));
    w.cni("CHECK", Some(&new), &with_prev(&conf, &r_new.json))
        .expect_ok("CHECK of the successor");
    assert!(new.ping(GATEWAY), "the successor still reaches the VPC");
    w.cni("DEL", Some(&new), &with_prev(&conf, &r_new.json))
        .expect_ok("DEL of the successor");
    assert!(w.inuse().is_empty(), "{:?}", w.inuse());
}

/// The node's IPv6 rules and routes (every table), for assertions.
fn node_v6(w: &World) -> String {
    format!(
        "{}{}",
        w.node_ip(&["-6", "rule"]),
        w.node_ip(&["-6", "route", "show", "table", "all"])
    )
}

#[test]
fn dual_stack_routes_ipv6_out_the_right_eni_and_leaves_nothing_behind() {
    if !can_run("cni dual stack", &["busybox", "ip6tables"]) {
        return;
    }
    let w = World::start_dual(LARGE, json!({}));
    let conf = w.conf("1.1.0", json!({}));
    // 7 containers: more than one ENI of this type holds (6), so the
    // VPC's strict reverse-path check proves each uses its own ENI.
    let ctrs: Vec<Ctr> = (0..7).map(|i| Ctr::new(&w, i)).collect();
    // Namespaces whose new links come with IPv6 off (as some hosts and
    // runtimes have it): the plugin turns it on where it needs it.
    for ns in ctrs.iter().map(|c| &c.ns.name).chain([&w.node.name]) {
        cnienv::sh(&[
            "ip",
            "netns",
            "exec",
            ns,
            "sysctl",
            "-qw",
            "net.ipv6.conf.default.disable_ipv6=1",
        ]);
    }
    let adds: Vec<_> = ctrs
        .iter()
        .map(|c| w.cni("ADD", Some(c), &conf).expect_ok("dual ADD"))
        .collect();
    let r = &adds[0].json;
    assert_eq!(r["ips"].as_array().unwrap().len(), 2, "{r}");
    assert_eq!(r["ips"][0]["gateway"], "169.254.1.1", "{r}");
    assert_eq!(r["ips"][1]["gateway"], "fe80::1", "{r}");
    assert_eq!(r["ips"][1]["interface"], 1, "{r}");
    assert!(
        r["ips"][1]["address"].as_str().unwrap().ends_with("/128"),
        "{r}"
    );
    assert!(
        r["routes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["dst"] == "::/0" && x["gw"] == "fe80::1"),
        "{r}"
    );
    let enis = w.enis_in_use();
    assert!(enis.len() >= 2, "{enis:?}");

    for (c, add) in ctrs.iter().zip(&adds) {
        let (ip, ip6) = (add.ip(), add.ip6());
        // eniipd's pair is what the container got.
        let owner = format!("{}/{}", w.network, c.id);
        let show = w.daemon().ok(&format!("show {owner}"));
        assert!(show.contains(&format!("ipv6={ip6} ")), "{show}");
        let addrs = c.ns.exec(&["ip", "-6", "addr", "show", "dev", "eth0"]);
        let addrs = String::from_utf8_lossy(&addrs.stdout).into_owned();
        let line = addrs
            .lines()
            .find(|l| l.contains(&format!("{ip6}/128")))
            .unwrap_or_else(|| panic!("no {ip6}/128: {addrs}"));
        assert!(!line.contains("tentative"), "usable at once: {addrs}");
        assert!(
            eventually(Duration::from_secs(10), || c.ping6(GATEWAY6)),
            "ping6 {GATEWAY6} from {ip6}\n{}",
            w.diag()
        );
        assert!(c.ping(GATEWAY), "ping {GATEWAY} from {ip}");
    }

    // CHECK passes, and fails once the IPv6 rule is gone (the IPv4 one
    // still there); without it the pod's IPv6 no longer reaches the VPC.
    let (c0, r0) = (&ctrs[0], &adds[0]);
    let ip6 = r0.ip6();
    let checked = with_prev(&conf, &r0.json);
    w.cni("CHECK", Some(c0), &checked).expect_ok("dual CHECK");
    w.node_ip(&[
        "-6",
        "rule",
        "del",
        "pref",
        "2048",
        "from",
        &format!("{ip6}/128"),
    ]);
    let bad = w.cni("CHECK", Some(c0), &checked);
    assert_eq!(bad.code(), 101, "{bad:?}");
    let msg = bad.json["msg"].as_str().unwrap();
    assert!(msg.contains("rule") && msg.contains(&ip6), "{bad:?}");
    assert!(
        !c0.ping6(GATEWAY6),
        "no IPv6 rule: the pod must not reach the VPC"
    );
    assert!(c0.ping(GATEWAY), "IPv4 is unaffected");

    // DEL removes the IPv6 state with the rest.
    w.cni("DEL", Some(c0), &checked).expect_ok("dual DEL");
    let v6 = node_v6(&w);
    assert!(!v6.contains(&ip6), "{v6}");

    // GC keeping one: the others' IPv6 rules and routes go with them.
    let gc_conf = w.conf(
        "1.1.0",
        json!({"cni.dev/valid-attachments": [{"containerID": ctrs[1].id, "ifname": "eth0"}]}),
    );
    w.cni("GC", None, &gc_conf).expect_ok("dual GC");
    let v6 = node_v6(&w);
    for (i, add) in adds.iter().enumerate().skip(1) {
        assert_eq!(
            v6.contains(&format!("{} ", add.ip6())),
            i == 1,
            "{i} {}: {v6}",
            add.ip6()
        );
    }
    assert!(ctrs[1].ping6(GATEWAY6), "the kept one still works");
    w.cni("DEL", Some(&ctrs[1]), &with_prev(&conf, &adds[1].json))
        .expect_ok("last DEL");
    assert!(w.inuse().is_empty(), "{:?}", w.inuse());
    let rules = w.node_ip(&["-6", "rule"]);
    assert!(!rules.contains("2048"), "{rules}");
    w.assert_no_host_end();

    // A failed ADD (eth0 taken in the container) leaves no IPv6 either.
    let c = Ctr::new(&w, 9);
    w.failed_add(&c, &conf);
    let rules = w.node_ip(&["-6", "rule"]);
    assert!(!rules.contains("2048"), "{rules}");
}

/// Dual stack with IPv6 /80s (issue 32): a pod's IPv6 is carved from its
/// ENI's /80 by eniipd, never assigned on its own, and the datapath
/// wires it as any /128: it reaches the VPC over its own ENI only, and
/// DEL leaves nothing.
#[test]
fn an_ipv6_carved_from_an_enis_80_works_through_the_datapath() {
    if !can_run("cni dual stack with /80s", &["busybox", "ip6tables"]) {
        return;
    }
    let w = World::start_dual(LARGE, json!({"ip_prefix": true}));
    let conf = w.conf("1.1.0", json!({}));
    let ctrs: Vec<Ctr> = (0..3).map(|i| Ctr::new(&w, i)).collect();
    let adds: Vec<_> = ctrs
        .iter()
        .map(|c| w.cni("ADD", Some(c), &conf).expect_ok("ADD with /80s"))
        .collect();
    for (c, add) in ctrs.iter().zip(&adds) {
        let ip6 = add.ip6();
        let owner = format!("{}/{}", w.network, c.id);
        let show = w.daemon().ok(&format!("show {owner}"));
        let prefix = show
            .split_whitespace()
            .find_map(|x| x.strip_prefix("ipv6prefix="))
            .unwrap_or_else(|| panic!("no ipv6prefix= (not carved from a /80): {show}"));
        let p: eniip_protocol::core::Ipv6Prefix = prefix.parse().unwrap();
        assert!(p.contains(ip6.parse().unwrap()), "{ip6} outside {prefix}");
        assert!(
            eventually(Duration::from_secs(10), || c.ping6(GATEWAY6)),
            "ping6 {GATEWAY6} from {ip6} (carved from {prefix})\n{}",
            w.diag()
        );
        assert!(c.ping(GATEWAY), "ping {GATEWAY} from {}", add.ip());
    }
    for (c, add) in ctrs.iter().zip(&adds) {
        w.cni("DEL", Some(c), &with_prev(&conf, &add.json))
            .expect_ok("DEL with /80s");
    }
    assert!(w.inuse().is_empty(), "{:?}", w.inuse());
    let rules = w.node_ip(&["-6", "rule"]);
    assert!(!rules.contains("2048"), "{rules}");
    w.assert_no_host_end();
}

/// eniipd as a later version may answer: every `OK` text that carries
/// fields gets ones this version does not know, before, between and
/// after its own.
fn later_eniipd(request: &str, last: &str) -> String {
    match last.strip_prefix("OK ") {
        Some(text) if text.contains('=') => {
            let mut words: Vec<&str> = text.split(' ').collect();
            words.insert(words.len() / 2, "zone=cn-hangzhou-i");
            let verb = request.split(' ').next().unwrap_or("");
            format!(
                "OK later-{verb}=1 {} gateway7=10.0.0.1 flags",
                words.join(" ")
            )
        }
        _ => last.to_string(),
    }
}

#[test]
fn an_eniipd_answering_fields_this_version_does_not_know_still_adds_checks_and_deletes() {
    if !can_run("cni with a later eniipd", &["busybox"]) {
        return;
    }
    let w = World::start(LARGE, json!({}));
    let later = cnienv::ReplyRewriter::start(&w.dir, w.socket(), later_eniipd);
    let conf = w.conf("1.1.0", json!({"socket": later.path}));
    let c = Ctr::new(&w, 0);
    let add = w
        .cni("ADD", Some(&c), &conf)
        .expect_ok("ADD through a later eniipd");
    let ip = add.ip();
    assert_eq!(
        w.inuse().get(&ip),
        Some(&format!("{}/{}", w.network, c.id)),
        "{:?}",
        w.inuse()
    );
    // The emulated VPC routes a new address once it has seen it in the
    // emulator's state (a poll every 30 ms), maybe just after the ADD.
    assert!(
        eventually(Duration::from_secs(5), || c.ping(GATEWAY)),
        "ping {GATEWAY} from {ip}\n{}",
        w.diag()
    );
    w.cni("CHECK", Some(&c), &with_prev(&conf, &add.json))
        .expect_ok("CHECK through a later eniipd");
    w.cni("STATUS", None, &conf)
        .expect_ok("STATUS through a later eniipd");
    w.cni("DEL", Some(&c), &with_prev(&conf, &add.json))
        .expect_ok("DEL through a later eniipd");
    assert!(!w.inuse().contains_key(&ip), "{:?}", w.inuse());
    w.assert_no_host_end();
    // The plugin's requests went through it, and their replies changed.
    let seen = later.stop();
    for verb in ["alloc", "show", "status", "release"] {
        assert!(
            seen.iter().any(|l| l.starts_with(verb)),
            "no {verb} passed through: {seen:?}"
        );
    }
}

#[test]
fn a_pod_annotated_ipv4_only_gets_no_ipv6_on_a_dual_stack_node() {
    if !can_run("cni dual stack, IPv4 only", &["busybox", "ip6tables"]) {
        return;
    }
    let w = World::start_dual(LARGE, json!({}));
    // As containerd passes a pod's annotations: `null` for none.
    let conf = |annotations: Value| {
        w.conf(
            "1.0.0",
            json!({"runtimeConfig": {"io.kubernetes.cri.pod-annotations": annotations}}),
        )
    };
    let (only4, both) = (Ctr::new(&w, 0), Ctr::new(&w, 1));
    let asked = conf(json!({"eniipd/ip-stack": "ipv4", "app": "legacy"}));
    let add = w
        .cni("ADD", Some(&only4), &asked)
        .expect_ok("IPv4-only ADD");
    let ips = add.json["ips"].as_array().unwrap();
    assert_eq!(ips.len(), 1, "{}", add.json);
    assert!(
        add.json["routes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["dst"] != "::/0"),
        "{}",
        add.json
    );
    let addrs = only4
        .ns
        .exec(&["ip", "-6", "addr", "show", "dev", "eth0", "scope", "global"]);
    assert!(
        addrs.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&addrs.stdout)
    );
    assert!(only4.ping(GATEWAY), "ping {GATEWAY} from {}", add.ip());
    let owner = format!("{}/{}", w.network, only4.id);
    let show = w.daemon().ok(&format!("show {owner}"));
    assert!(!show.contains("ipv6="), "{show}");
    let checked = with_prev(&asked, &add.json);
    w.cni("CHECK", Some(&only4), &checked)
        .expect_ok("IPv4-only CHECK");

    // A pod without annotations (null) gets its pair, as before.
    let plain = w
        .cni("ADD", Some(&both), &conf(Value::Null))
        .expect_ok("dual ADD");
    assert_eq!(
        plain.json["ips"].as_array().unwrap().len(),
        2,
        "{}",
        plain.json
    );
    let held: Vec<String> = w.daemon().ask("list").into_iter().collect();
    assert!(
        held.iter()
            .any(|l| l.starts_with(&format!("{} inuse {owner} ", add.ip()))),
        "{held:?}"
    );
    w.cni("DEL", Some(&only4), &checked)
        .expect_ok("IPv4-only DEL");
    w.cni(
        "DEL",
        Some(&both),
        &with_prev(&conf(Value::Null), &plain.json),
    )
    .expect_ok("dual DEL");
    w.assert_none_in_use_within(Duration::from_secs(5));
}
