//! IPv6 /80 prefixes end to end (issue 32; real binaries, eniip-sim on
//! loopback): in dual stack with `ip_prefix`, 100 pods at once on an empty
//! ecs.g7.4xlarge cost at most two create/assign calls for both stacks,
//! every pod's IPv4 in a /28 and its IPv6 in its ENI's /80; kill -9 and a
//! restart give every owner the same pair; turning the option off and on
//! across restarts keeps every address handed out; a vswitch with no /80
//! to give still serves, with single IPv6 addresses.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use crate::alloc_prefix_sim::burst;
use common::{config, field, tempdir, Daemon, Sim, DUAL_VSWITCH};
use eniip_cloud::{Ipv4Prefix, Ipv6Prefix};
use serde_json::{json, Value};

fn sim() -> Sim {
    Sim::quick(&[
        "--instance-type",
        "ecs.g7.4xlarge",
        "--vswitch",
        DUAL_VSWITCH,
    ])
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

/// The /28s and /80s of each managed ENI in the emulator.
fn cloud_prefixes(sim: &Sim) -> BTreeMap<String, (Vec<Ipv4Prefix>, Vec<Ipv6Prefix>)> {
    sim.managed()
        .iter()
        .map(|e| {
            let v4 = strings(&e["ipv4_prefixes"])
                .iter()
                .map(|p| p.parse().unwrap())
                .collect();
            let v6 = strings(&e["ipv6_prefixes"])
                .iter()
                .map(|p| p.parse().unwrap())
                .collect();
            (e["id"].as_str().unwrap().to_string(), (v4, v6))
        })
        .collect()
}

/// Create and assign calls of both stacks.
fn ip_calls(sim: &Sim) -> u64 {
    [
        "CreateNetworkInterface",
        "AssignPrivateIpAddresses",
        "AssignIpv6Addresses",
    ]
    .iter()
    .map(|a| sim.calls(a))
    .sum()
}

type Pair = (Ipv4Addr, Ipv6Addr, String);

fn pair(r: &str) -> Pair {
    (
        field(r, "ip").parse().unwrap(),
        field(r, "ipv6").parse().unwrap(),
        field(r, "eni"),
    )
}

/// Every owner's pair is distinct and its IPv4 in one of its ENI's /28s
/// (or the ENI's primary address), its IPv6 in its ENI's /80 (as the
/// emulator holds them).
fn check_carved(sim: &Sim, pairs: &BTreeMap<String, Pair>) {
    let cloud = cloud_prefixes(sim);
    let primaries: BTreeMap<String, String> = sim
        .managed()
        .iter()
        .map(|e| {
            (
                e["id"].as_str().unwrap().into(),
                e["primary_ip"].as_str().unwrap().into(),
            )
        })
        .collect();
    let v4: BTreeSet<_> = pairs.values().map(|p| p.0).collect();
    let v6: BTreeSet<_> = pairs.values().map(|p| p.1).collect();
    assert_eq!(
        (v4.len(), v6.len()),
        (pairs.len(), pairs.len()),
        "{pairs:?}"
    );
    for (owner, (a, b, eni)) in pairs {
        let (p4, p6) = cloud
            .get(eni)
            .unwrap_or_else(|| panic!("{owner}: {eni} not in the cloud"));
        let primary = primaries[eni] == a.to_string();
        assert!(
            primary || p4.iter().any(|p| p.contains(*a)),
            "{owner}: {a} in no /28 of {eni}: {p4:?}"
        );
        assert_eq!(p6.len(), 1, "{eni} holds one /80: {p6:?}");
        assert!(p6[0].contains(*b), "{owner}: {b} not in {eni}'s {}", p6[0]);
    }
}

fn cfg(sim: &Sim, dir: &std::path::Path, prefix: bool) -> Value {
    config(
        sim,
        dir,
        json!({"ip_stack": "dual", "ip_prefix": prefix, "max_pool_size": 0}),
    )
}

#[test]
fn cold_100_dual_stack_cost_two_calls_and_kill9_keeps_every_pair() {
    let sim = sim();
    let free80 = sim.state()["vswitches"][0]["free_v6_prefixes"]
        .as_u64()
        .unwrap();
    let dir = tempdir("v6pfx100");
    let mut d = Daemon::start(&dir, &cfg(&sim, &dir, true));
    let replies = burst(&d, "cold", 100);
    let calls = ip_calls(&sim);
    println!(
        "100 cold dual-stack allocations with /80s on ecs.g7.4xlarge: {calls} create/assign call(s) \
         ({} create(s), {} IPv4 assign(s), {} IPv6 assign(s))",
        sim.calls("CreateNetworkInterface"),
        sim.calls("AssignPrivateIpAddresses"),
        sim.calls("AssignIpv6Addresses")
    );
    assert!(calls <= 2, "{calls} create/assign calls");
    let pairs: BTreeMap<String, Pair> = replies.iter().map(|(o, r)| (o.clone(), pair(r))).collect();
    check_carved(&sim, &pairs);
    let managed = cloud_prefixes(&sim).len() as u64;
    assert_eq!(
        sim.state()["vswitches"][0]["free_v6_prefixes"]
            .as_u64()
            .unwrap(),
        free80 - managed,
        "each managed ENI took one /80 of the vswitch"
    );
    assert_eq!(d.ask("audit"), vec!["OK consistent"]);
    let list = d.ask("list").join("\n");
    let (owner0, (_, b0, _)) = pairs.iter().next().unwrap();
    assert!(
        list.lines()
            .any(|l| l.contains(owner0.as_str()) && l.contains(&format!("ipv6={b0} ipv6prefix="))),
        "list shows the carved pair: {list}"
    );
    let enis = d.ask("enis").join("\n");
    assert!(enis.contains("/80"), "enis shows the /80s: {enis}");
    let m = d.ask("metrics").join("\n");
    assert!(m.contains("eniipd_eni_ipv6_prefixes{"), "{m}");

    // A reused owner gets its IPv6 back; another owner never gets it.
    let (owner, (_, b, _)) = pairs.iter().next().unwrap();
    d.ok(&format!("release {owner}"));
    let again = pair(&d.ok(&format!("alloc {owner}")));
    let mut pairs = pairs.clone();
    if again.2 == pairs[owner].2 {
        assert_eq!(again.1, *b, "{owner} got its IPv6 back on its ENI");
    }
    pairs.insert(owner.clone(), again);

    // kill -9, restart: every owner has the same pair, and new pods
    // carve from the ENI's /80 at once (the state files name it): no
    // IPv6 call, no second /80.
    d.kill9();
    let v6_calls = sim.calls("AssignIpv6Addresses");
    let d = Daemon::start(&dir, &cfg(&sim, &dir, true));
    for (owner, p) in &pairs {
        assert_eq!(
            &pair(&d.ok(&format!("show {owner}"))),
            p,
            "{owner} after kill -9"
        );
    }
    for i in 0..20 {
        let o = format!("cold/new-{i}");
        pairs.insert(o.clone(), pair(&d.ok(&format!("alloc {o}"))));
    }
    check_carved(&sim, &pairs);
    assert_eq!(
        sim.calls("AssignIpv6Addresses"),
        v6_calls,
        "an IPv6 call after the restart"
    );
    d.audits_consistent_within(Duration::from_secs(10));
}

#[test]
fn turning_v6_prefixes_off_and_on_keeps_every_address_handed_out() {
    let sim = sim();
    let dir = tempdir("v6pfxoff");
    let mut held = BTreeMap::new();
    // On: pairs carved from /80s.
    let mut d = Daemon::start(&dir, &cfg(&sim, &dir, true));
    for i in 0..5 {
        let o = format!("on/pod-{i}");
        held.insert(o.clone(), pair(&d.ok(&format!("alloc {o}"))));
    }
    check_carved(&sim, &held);
    d.terminate(Duration::from_secs(10));
    // Off: the carved pairs stay their owners'; new pods get pairs too.
    let mut d = Daemon::start(&dir, &cfg(&sim, &dir, false));
    for (o, p) in &held {
        assert_eq!(
            &pair(&d.ok(&format!("show {o}"))),
            p,
            "{o} with the option off"
        );
    }
    for i in 0..5 {
        let o = format!("off/pod-{i}");
        held.insert(o.clone(), pair(&d.ok(&format!("alloc {o}"))));
    }
    d.audits_consistent_within(Duration::from_secs(10));
    d.kill9();
    // On again: everything kept.
    let d = Daemon::start(&dir, &cfg(&sim, &dir, true));
    for (o, p) in &held {
        assert_eq!(
            &pair(&d.ok(&format!("show {o}"))),
            p,
            "{o} with the option on again"
        );
    }
    let v6: BTreeSet<_> = held.values().map(|p| p.1).collect();
    assert_eq!(v6.len(), held.len(), "{held:?}");
    d.audits_consistent_within(Duration::from_secs(10));
}

#[test]
fn a_vswitch_with_no_80_to_give_serves_single_ipv6_addresses() {
    let sim = sim();
    let vsw = sim.state()["vswitches"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    sim.vswitch(&format!(r#"{{"id":"{vsw}","free_v6_prefixes":0}}"#));
    let dir = tempdir("v6pfxnone");
    let d = Daemon::start(&dir, &cfg(&sim, &dir, true));
    let mut v6 = BTreeSet::new();
    for i in 0..12 {
        let (_, b, eni) = pair(&d.ok(&format!("alloc none/pod-{i}")));
        let on_cloud = sim
            .managed()
            .iter()
            .any(|e| e["id"] == eni.as_str() && strings(&e["ipv6s"]).contains(&b.to_string()));
        assert!(on_cloud, "{b} is a single IPv6 address of {eni}");
        assert!(v6.insert(b));
    }
    assert!(cloud_prefixes(&sim).values().all(|(_, p6)| p6.is_empty()));
    d.audits_consistent_within(Duration::from_secs(10));
}
