//! Pods on one node reach each other on the node: two pods whose addresses
//! sit on different ENIs ping each other (IPv4 and IPv6) while the VPC
//! side, which routes each address only over its own ENI and forwards
//! nothing between ENIs, counts none of their packets. Each attachment's
//! `to <pod> lookup main` rule goes with its DEL and not before (a late
//! DEL of an old sandbox keeps the successor's). Needs root, `ip`,
//! busybox, iptables and ip6tables; says SKIPPED loudly otherwise (and
//! fails under ENIIPD_CI=1).

use crate::cnienv;

use cnienv::{can_run, Ctr, World};
use serde_json::json;

const LARGE: &str = "ecs.g7.large";

/// The ENI holding each in-use address, from eniipd's `list`.
fn eni_of(w: &World, ip: &str) -> String {
    w.daemon()
        .ask("list")
        .iter()
        .find(|l| l.starts_with(&format!("{ip} inuse ")))
        .and_then(|l| l.split(' ').nth(3).map(String::from))
        .unwrap_or_else(|| panic!("{ip} is not in use"))
}

/// Packets the VPC namespace saw from `a` to `b` (a raw-table counter
/// rule put there by [`count_in_vpc`]).
fn vpc_count(w: &World, tool: &str, a: &str, b: &str) -> u64 {
    let out = w
        .vpc
        .exec(&[tool, "-t", "raw", "-L", "PREROUTING", "-v", "-n", "-x"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (a, b) = (a.to_string(), b.to_string());
    text.lines()
        .find(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.iter()
                .any(|x| x.trim_end_matches("/32").trim_end_matches("/128") == a)
                && f.iter()
                    .any(|x| x.trim_end_matches("/32").trim_end_matches("/128") == b)
        })
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no counter for {a} -> {b}: {text}"))
}

fn count_in_vpc(w: &World, tool: &str, a: &str, b: &str) {
    for (s, d) in [(a, b), (b, a)] {
        cnienv::sh(&[
            "ip",
            "netns",
            "exec",
            &w.vpc.name,
            tool,
            "-t",
            "raw",
            "-I",
            "PREROUTING",
            "-s",
            s,
            "-d",
            d,
        ]);
    }
}

#[test]
fn two_pods_on_different_enis_talk_on_the_node() {
    if !can_run("cni pod to pod", &["busybox", "iptables", "ip6tables"]) {
        return;
    }
    let w = World::start_dual(LARGE, json!({}));
    let conf = w.conf("1.0.0", json!({}));
    // An ENI of this type holds 6 addresses: the 7th pod is on another.
    let ctrs: Vec<Ctr> = (0..7).map(|i| Ctr::new(&w, i)).collect();
    let adds: Vec<_> = ctrs
        .iter()
        .map(|c| w.cni("ADD", Some(c), &conf).expect_ok("ADD"))
        .collect();
    let (a, ra) = (&ctrs[0], &adds[0]);
    let (b, rb) = ctrs
        .iter()
        .zip(&adds)
        .find(|(_, r)| eni_of(&w, &r.ip()) != eni_of(&w, &ra.ip()))
        .expect("a pod on a second ENI");
    count_in_vpc(&w, "iptables", &ra.ip(), &rb.ip());
    count_in_vpc(&w, "ip6tables", &ra.ip6(), &rb.ip6());
    assert!(a.ping(&rb.ip()), "{} -> {}\n{}", ra.ip(), rb.ip(), w.diag());
    assert!(b.ping(&ra.ip()), "{} -> {}\n{}", rb.ip(), ra.ip(), w.diag());
    assert!(
        a.ping6(&rb.ip6()),
        "{} -> {}\n{}",
        ra.ip6(),
        rb.ip6(),
        w.diag()
    );
    assert!(
        b.ping6(&ra.ip6()),
        "{} -> {}\n{}",
        rb.ip6(),
        ra.ip6(),
        w.diag()
    );
    for (tool, x, y) in [
        ("iptables", ra.ip(), rb.ip()),
        ("iptables", rb.ip(), ra.ip()),
        ("ip6tables", ra.ip6(), rb.ip6()),
        ("ip6tables", rb.ip6(), ra.ip6()),
    ] {
        assert_eq!(vpc_count(&w, tool, &x, &y), 0, "{x} -> {y} left the node");
    }

    // DEL takes the pod's `to` rules, and only its own.
    let mut with_prev = conf.clone();
    with_prev["prevResult"] = rb.json.clone();
    w.cni("DEL", Some(b), &with_prev).expect_ok("DEL");
    let rules = format!("{}{}", w.node_ip(&["rule"]), w.node_ip(&["-6", "rule"]));
    assert!(!rules.contains(&format!("to {} ", rb.ip())), "{rules}");
    assert!(!rules.contains(&format!("to {} ", rb.ip6())), "{rules}");
    assert!(rules.contains(&format!("to {} ", ra.ip())), "{rules}");
    assert!(rules.contains(&format!("to {} ", ra.ip6())), "{rules}");
    for (c, r) in ctrs.iter().zip(&adds) {
        let mut with_prev = conf.clone();
        with_prev["prevResult"] = r.json.clone();
        w.cni("DEL", Some(c), &with_prev).expect_ok("DEL");
    }
    let rules = format!("{}{}", w.node_ip(&["rule"]), w.node_ip(&["-6", "rule"]));
    assert!(!rules.lines().any(|l| l.starts_with("512:")), "{rules}");
    assert!(w.inuse().is_empty(), "{:?}", w.inuse());
}
