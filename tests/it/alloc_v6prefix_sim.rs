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
use common::{config, eventually, field, tempdir, Daemon, Sim, DUAL_VSWITCH};
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

/// Whether `b`, handed out on `eni`, is an IPv6 the cloud holds for that
/// ENI now: in one of its /80s or one of its single addresses.
fn held_by_cloud(sim: &Sim, eni: &str, b: Ipv6Addr) -> bool {
    sim.managed().iter().any(|e| {
        e["id"] == eni
            && (strings(&e["ipv6s"]).contains(&b.to_string())
                || strings(&e["ipv6_prefixes"])
                    .iter()
                    .any(|p| p.parse::<Ipv6Prefix>().unwrap().contains(b)))
    })
}

/// An ENI's /80 removed out of band (an operator's UnassignIpv6Addresses):
/// no IPv6 of it is handed out again, eniipd stops assigning /28s that
/// could never be paired, a new /80 is asked for, and all of it holds
/// across a kill -9.
#[test]
fn an_80_removed_out_of_band_is_never_handed_out_again() {
    let sim = sim();
    let dir = tempdir("v6pfxgone");
    let mut d = Daemon::start(&dir, &cfg(&sim, &dir, true));
    let mut pairs = BTreeMap::new();
    for i in 0..4 {
        let o = format!("gone/pod-{i}");
        pairs.insert(o.clone(), pair(&d.ok(&format!("alloc {o}"))));
    }
    let (eni, (_, lost)) = cloud_prefixes(&sim)
        .into_iter()
        .find_map(|(e, (_, p6))| p6.first().map(|p| (e.clone(), (e, *p))))
        .expect("an ENI with a /80");
    let c = crate::openapi_client::client(sim.openapi_options());
    let lost_s = lost.to_string();
    crate::openapi_client::call(
        &c,
        "UnassignIpv6Addresses",
        &[
            ("RegionId", &sim.region),
            ("NetworkInterfaceId", &eni),
            ("Ipv6Prefix.1", &lost_s),
        ],
    )
    .expect("the /80 removed");
    // Owners give their carved IPv6 back; eniipd learns of the removal at
    // its next reconcile.
    for i in 0..2 {
        d.ok(&format!("release gone/pod-{i}"));
        pairs.remove(&format!("gone/pod-{i}"));
    }
    assert!(
        d.ask("enis").join("\n").contains(&lost_s),
        "{:?}",
        d.ask("enis")
    );
    assert!(
        eventually(Duration::from_secs(20), || !d
            .ask("enis")
            .join("\n")
            .contains(&lost_s)),
        "eniipd still shows {lost_s} on {eni}: {:?}",
        d.ask("enis")
    );
    let check = |d: &Daemon, tag: &str, n: usize| {
        for i in 0..n {
            let o = format!("gone/{tag}-{i}");
            let (a, b, e) = pair(&d.ok(&format!("alloc {o}")));
            assert!(
                !lost.contains(b),
                "{o} got {b} of the removed {lost} on {e}"
            );
            assert!(
                held_by_cloud(&sim, &e, b),
                "{o}: {b} is not {e}'s in the cloud"
            );
            let _ = a;
        }
        // No /28 is assigned that no IPv6 could pair: every ENI's /28s
        // are at most what its owners and one spare /28 need.
        for (e, (p4, p6)) in cloud_prefixes(&sim) {
            assert!(
                p4.len() <= 3,
                "{e} holds {} /28s ({p6:?} /80s): {p4:?}",
                p4.len()
            );
        }
    };
    check(&d, "after", 20);
    assert!(
        cloud_prefixes(&sim)[&eni].1.iter().any(|p| *p != lost)
            || sim
                .managed()
                .iter()
                .any(|e| e["id"] == eni.as_str() && !strings(&e["ipv6s"]).is_empty()),
        "{eni} got no new /80 (nor single IPv6): {:?}",
        cloud_prefixes(&sim)
    );
    d.kill9();
    let d = Daemon::start(&dir, &cfg(&sim, &dir, true));
    check(&d, "restarted", 10);
    // The owners that held a carved IPv6 of it keep it (a running pod's
    // address is not taken from it), and audit names each: the ENI no
    // longer has it. Released, it is gone for good.
    let kept: Vec<Ipv6Addr> = pairs.values().map(|p| p.1).collect();
    assert!(kept.iter().all(|b| lost.contains(*b)), "{pairs:?}");
    let audit = d.ask("audit");
    for b in &kept {
        assert!(
            audit.iter().any(|l| l.contains(&b.to_string())),
            "audit does not name {b}: {audit:?}"
        );
    }
    for o in pairs.keys() {
        d.ok(&format!("release {o}"));
    }
    d.audits_consistent_within(Duration::from_secs(20));
    check(&d, "released", 4);
}
