//! Prefix mode end to end (real binaries, eniip-sim on loopback): a
//! secondary ENI of an ecs.g7.large serves 80 pod addresses; 160 cold
//! allocations on an ecs.g7.4xlarge cost at most two calls carrying
//! prefixes; releasing everything gives whole /28s back; a vswitch with
//! free addresses but no free /28 still serves, with single addresses.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::sync::Barrier;
use std::time::Duration;

use common::{at_once, config, eventually, field, first_vswitch, tempdir, Daemon, Sim};
use eniip_protocol::protocol::client::Client;
use eniip_protocol::protocol::reply::{parse_eni_line, EniLine};
use serde_json::{json, Value};

fn sim(instance_type: &str) -> Sim {
    Sim::quick(&["--instance-type", instance_type])
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

/// Every address the emulator has on managed ENIs (single and in
/// prefixes), with its ENI; and the prefixes.
fn cloud(sim: &Sim) -> (BTreeMap<Ipv4Addr, String>, BTreeSet<String>) {
    let mut ips = BTreeMap::new();
    let mut prefixes = BTreeSet::new();
    for e in sim.managed() {
        let id = e["id"].as_str().unwrap().to_string();
        for a in strings(&e["private_ips"]) {
            assert!(ips.insert(a.parse().unwrap(), id.clone()).is_none());
        }
        for p in strings(&e["ipv4_prefixes"]) {
            let p: eniip_cloud::Ipv4Prefix = p.parse().unwrap();
            for a in p.addresses() {
                assert!(ips.insert(a, id.clone()).is_none(), "{a} twice");
            }
            assert!(prefixes.insert(p.to_string()));
        }
    }
    (ips, prefixes)
}

fn vswitch_free(sim: &Sim) -> (u64, u64) {
    let v = &sim.state()["vswitches"][0];
    (
        v["free"].as_u64().unwrap(),
        v["free_prefixes"].as_u64().unwrap_or(u64::MAX),
    )
}

fn prefix_calls(sim: &Sim) -> u64 {
    let pc = &sim.state()["prefix_calls"];
    pc["AssignPrivateIpAddresses"].as_u64().unwrap_or(0)
        + pc["CreateNetworkInterface"].as_u64().unwrap_or(0)
}

/// `n` allocations at once: every client connects first, then all send
/// together (a burst, however slowly a loaded machine starts threads);
/// the replies by owner.
pub(crate) fn burst(d: &Daemon, tag: &str, n: usize) -> BTreeMap<String, String> {
    let go = Barrier::new(n);
    at_once(n, |i| {
        let owner = format!("{tag}/pod-{i}");
        let wait = Duration::from_secs(90);
        let mut c = Client::connect(&d.socket, wait).unwrap();
        go.wait();
        let r = c.ask_within(&format!("alloc {owner}"), wait).unwrap();
        let ok = r.outcome().unwrap_or_else(|e| panic!("{owner}: ERR {e}"));
        (owner, ok.to_string())
    })
    .into_iter()
    .collect()
}

/// The data lines of `enis`, read.
fn enis_lines(d: &Daemon) -> Vec<EniLine> {
    let r = d.ask("enis");
    r[..r.len() - 1]
        .iter()
        .map(|l| parse_eni_line(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect()
}

/// How an ENI of `enis` holds its addresses: its mode and prefix count.
fn held(l: &EniLine) -> (Option<&str>, Option<usize>) {
    (l.mode.as_deref(), l.prefixes)
}

#[test]
fn a_g7_large_secondary_eni_hands_out_80_distinct_addresses() {
    let sim = sim("ecs.g7.large");
    let dir = tempdir("pfx80");
    let d = Daemon::start(
        &dir,
        &config(&sim, &dir, json!({"ip_prefix": true, "max_pool_size": 0})),
    );
    let replies = burst(&d, "big", 80);
    let ips: BTreeSet<Ipv4Addr> = replies
        .values()
        .map(|r| field(r, "ip").parse().unwrap())
        .collect();
    let enis: BTreeSet<String> = replies.values().map(|r| field(r, "eni")).collect();
    assert_eq!(ips.len(), 80, "80 distinct addresses");
    assert_eq!(enis.len(), 1, "all from one secondary ENI: {enis:?}");
    let (cloud_ips, prefixes) = cloud(&sim);
    assert_eq!(prefixes.len(), 5, "{prefixes:?}");
    let eni = enis.iter().next().unwrap();
    for ip in &ips {
        assert_eq!(
            cloud_ips.get(ip),
            Some(eni),
            "{ip} is not on {eni} in the cloud"
        );
        let p = eniip_cloud::Ipv4Prefix::containing(*ip).to_string();
        assert!(prefixes.contains(&p), "{ip} is outside every prefix");
    }
    println!(
        "80 allocations on ecs.g7.large: {} call(s) carrying prefixes, {} create(s), {} assign(s)",
        prefix_calls(&sim),
        sim.calls("CreateNetworkInterface"),
        sim.calls("AssignPrivateIpAddresses")
    );
    let lines = enis_lines(&d);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].ips == 81 && held(&lines[0]) == (Some("prefix"), Some(5)),
        "{lines:?}"
    );
    // Its primary is handed out last, then a second ENI serves.
    let r = d.ok("alloc big/primary");
    assert_eq!(&field(&r, "eni"), eni);
    let r = d.ok("alloc big/next");
    assert_ne!(&field(&r, "eni"), eni);
    assert_eq!(d.ask("audit"), vec!["OK consistent"]);
    let m = d.ask("metrics").join("\n");
    assert!(
        m.contains(&format!(
            "eniipd_eni_ips{{eni=\"{eni}\",mode=\"prefix\"}} 80"
        )) && m.contains(&format!("eniipd_eni_prefixes{{eni=\"{eni}\"}} 5")),
        "{m}"
    );
}

#[test]
fn cold_160_cost_two_prefix_calls_and_release_returns_whole_prefixes() {
    let sim = sim("ecs.g7.4xlarge");
    let (free0, _) = vswitch_free(&sim);
    let dir = tempdir("pfx160");
    let d = Daemon::start(
        &dir,
        &config(&sim, &dir, json!({"ip_prefix": true, "max_pool_size": 0})),
    );
    let replies = burst(&d, "cold", 160);
    let ips: BTreeSet<String> = replies.values().map(|r| field(r, "ip")).collect();
    assert_eq!(ips.len(), 160);
    let calls = prefix_calls(&sim);
    println!(
        "160 cold allocations on ecs.g7.4xlarge: {calls} Assign-or-Create call(s) carrying prefixes \
         ({} create(s), {} assign(s) in all)",
        sim.calls("CreateNetworkInterface"),
        sim.calls("AssignPrivateIpAddresses")
    );
    assert!(calls <= 2, "{calls} calls carrying prefixes");
    let (cloud_ips, prefixes) = cloud(&sim);
    for ip in &ips {
        assert!(
            cloud_ips.contains_key(&ip.parse().unwrap()),
            "{ip} not in the cloud"
        );
    }
    assert!(!prefixes.is_empty());
    assert_eq!(d.ask("audit"), vec!["OK consistent"]);

    // A restart keeps every allocation, prefix members included.
    let d = {
        let mut d = d;
        d.terminate(Duration::from_secs(10));
        Daemon::start(
            &dir,
            &config(&sim, &dir, json!({"ip_prefix": true, "max_pool_size": 0})),
        )
    };
    for (owner, r) in &replies {
        assert_eq!(field(&d.ok(&format!("show {owner}")), "ip"), field(r, "ip"));
    }

    // Release all: with max_pool_size 0 every /28 goes back whole, never
    // address by address, and the emptied ENI is freed.
    for owner in replies.keys() {
        assert!(d.ok(&format!("release {owner}")).starts_with("released="));
    }
    assert!(
        eventually(Duration::from_secs(30), || cloud(&sim).1.is_empty()),
        "prefixes still in the cloud: {:?}; daemon: {}",
        cloud(&sim).1,
        d.ok("status")
    );
    let pc = &sim.state()["prefix_calls"];
    assert!(
        pc["UnassignPrivateIpAddresses"].as_u64().unwrap_or(0) >= 1,
        "{pc}"
    );
    assert!(
        eventually(Duration::from_secs(30), || vswitch_free(&sim).0 == free0),
        "the vswitch has {} free, {free0} before",
        vswitch_free(&sim).0
    );
    d.audits_consistent_within(Duration::from_secs(10));
}

/// Issue 21 item 4: pods in waves. The first wave grows the pool by its
/// shortfall; the next, arriving as soon as the pool ran dry, carries
/// addresses for the waves after it (up to max_pool_size idle), so five
/// waves cost two calls (one per wave before). Once the waves stop, a
/// pool check gives back what the surge added.
#[test]
fn waves_of_demand_grow_the_pool_ahead_and_it_shrinks_back() {
    let sim = sim("ecs.g7.4xlarge");
    let dir = tempdir("pfxwaves");
    let cfg = json!({
        "ip_prefix": true,
        "min_pool_size": 0,
        "max_pool_size": 128,
        "pool_check_interval": 1,
        // The surge's own mechanics at fixed sizes: the adaptive target
        // would warm up ahead of the waves too (its calls counted below).
        "adaptive_pool": false
    });
    let d = Daemon::start(&dir, &config(&sim, &dir, cfg));
    let mut ips = BTreeSet::new();
    for wave in 0..5 {
        let replies = burst(&d, &format!("wave{wave}"), 32);
        ips.extend(replies.values().map(|r| field(r, "ip")));
        if wave == 0 {
            // A single burst is no surge: its shortfall only.
            assert_eq!(cloud(&sim).1.len(), 2, "{:?}", cloud(&sim).1);
        }
    }
    assert_eq!(ips.len(), 160, "160 distinct addresses");
    let grow = sim.calls("CreateNetworkInterface") + sim.calls("AssignPrivateIpAddresses");
    let status = d.ok("status");
    println!("5 waves of 32 in prefix mode: {grow} create/assign call(s); {status}");
    assert!(grow <= 2, "{grow} create/assign calls for 5 waves");
    let idle: u64 = field(&status, "idle").parse().unwrap();
    assert!(
        idle > 1,
        "the surge grew the pool ahead of demand: {status}"
    );
    assert!(idle <= 128 + 15, "max_pool_size bounds the surge: {status}");
    // The surge ends 10 s after the pool last ran dry; the next pool check
    // gives back its /28s. The ENI's idle primary stays (it is not a /28's).
    assert!(
        eventually(Duration::from_secs(30), || field(&d.ok("status"), "idle")
            == "1"),
        "the surge's addresses are still idle: {}",
        d.ok("status")
    );
    assert_eq!(cloud(&sim).1.len(), 10, "160 in use fill ten /28s");
    d.audits_consistent_within(Duration::from_secs(10));
}

/// Prefix mode on a vswitch with no free address at all: the create with
/// a /28 falls back to single addresses, and that refusal brings the call
/// cap down to one address and inhibits the vswitch, so the request is
/// answered `exhausted`, not left to time out. (A create with /28s carries
/// 17 tickets: counted whole, every refusal only halved the cap again.)
#[test]
fn prefix_mode_on_an_empty_vswitch_answers_exhausted() {
    let sim = sim("ecs.g7.large");
    let vsw = first_vswitch(&sim.state());
    sim.set_free(&vsw, 0);
    let dir = tempdir("pfxempty");
    let d = Daemon::start(
        &dir,
        &config(
            &sim,
            &dir,
            json!({"ip_prefix": true, "max_pool_size": 0, "alloc_timeout": 20}),
        ),
    );
    let r = d.ask("alloc empty/one");
    assert!(r[0].starts_with("ERR exhausted"), "{r:?}");
    assert!(sim.managed().is_empty(), "a failed create left an ENI");
}

#[test]
fn a_vswitch_without_a_free_slash_28_falls_back_to_single_addresses() {
    let sim = sim("ecs.g7.large");
    let vsw = first_vswitch(&sim.state());
    sim.vswitch(&format!(r#"{{"id":"{vsw}","free_prefixes":0}}"#));
    let dir = tempdir("pfxfrag");
    let d = Daemon::start(
        &dir,
        &config(&sim, &dir, json!({"ip_prefix": true, "max_pool_size": 0})),
    );
    // g7.large: 6 addresses per ENI as singles, two usable ENIs.
    let replies = burst(&d, "frag", 8);
    let ips: BTreeSet<String> = replies.values().map(|r| field(r, "ip")).collect();
    assert_eq!(ips.len(), 8);
    let (cloud_ips, prefixes) = cloud(&sim);
    assert!(prefixes.is_empty(), "{prefixes:?}");
    for ip in &ips {
        assert!(cloud_ips.contains_key(&ip.parse().unwrap()));
    }
    let lines = enis_lines(&d);
    assert!(!lines.is_empty());
    for l in &lines {
        assert_eq!(held(l), (Some("single"), Some(0)), "{lines:?}");
    }
    assert!(
        d.log_text().contains("no free /28"),
        "the fallback is not logged"
    );
    assert_eq!(d.ask("audit"), vec!["OK consistent"]);
}

#[test]
fn an_eni_whose_vswitch_runs_out_of_slash_28s_goes_on_with_single_addresses() {
    let sim = sim("ecs.g7.4xlarge");
    let vsw = first_vswitch(&sim.state());
    let dir = tempdir("pfxmixed");
    let d = Daemon::start(
        &dir,
        &config(&sim, &dir, json!({"ip_prefix": true, "max_pool_size": 0})),
    );
    let first = burst(&d, "a", 20);
    let eni = field(first.values().next().unwrap(), "eni");
    let prefixes_before = cloud(&sim).1.len();
    assert!(prefixes_before >= 2, "{prefixes_before}");
    // No free /28 left: the same ENI goes on with single addresses.
    sim.vswitch(&format!(r#"{{"id":"{vsw}","free_prefixes":0}}"#));
    let more = burst(&d, "b", 40);
    let ips: BTreeSet<String> = first
        .values()
        .chain(more.values())
        .map(|r| field(r, "ip"))
        .collect();
    assert_eq!(ips.len(), 60);
    for r in more.values() {
        assert_eq!(field(r, "eni"), eni, "the fallback stays on the same ENI");
    }
    let (cloud_ips, prefixes) = cloud(&sim);
    assert_eq!(prefixes.len(), prefixes_before, "no prefix was added");
    for ip in &ips {
        assert!(cloud_ips.contains_key(&ip.parse().unwrap()), "{ip}");
    }
    let lines = enis_lines(&d);
    assert!(
        lines.len() == 1 && lines[0].mode.as_deref() == Some("mixed"),
        "{lines:?}"
    );
    assert!(
        d.log_text().contains("no free /28"),
        "the fallback is not logged"
    );
    assert_eq!(d.ask("audit"), vec!["OK consistent"]);
}

#[test]
fn a_lost_assign_answer_leaks_no_prefix() {
    let sim = sim("ecs.g7.4xlarge");
    let dir = tempdir("pfxlost");
    let d = Daemon::start(
        &dir,
        &config(&sim, &dir, json!({"ip_prefix": true, "max_pool_size": 0})),
    );
    // One /28 with the new ENI; 15 of it and the primary idle after the
    // first allocation.
    d.ok("alloc lost/first");
    let first = cloud(&sim).1;
    assert_eq!(first.len(), 1);
    // Every answer to an Assign is lost after the cloud carried it out:
    // the retries (same ClientToken) are answered the same way. Nothing
    // can be given back meanwhile, so what the cloud holds stays to be
    // counted.
    sim.fault(r#"{"action":"AssignPrivateIpAddresses","code":"InternalError","after":true}"#);
    sim.fault(r#"{"action":"UnassignPrivateIpAddresses","code":"InternalError"}"#);
    let replies: Vec<Vec<String>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..20)
            .map(|i| {
                let d = &d;
                s.spawn(move || d.ask(&format!("alloc lost/pod-{i}")))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let failed = replies.iter().filter(|r| r[0].starts_with("ERR")).count();
    println!(
        "20 allocations with every Assign answer lost: {} served from idle, {failed} refused",
        20 - failed
    );
    assert_eq!(failed, 4, "{replies:?}");
    assert!(replies
        .iter()
        .all(|r| r[0].starts_with("OK ip=") || r[0].starts_with("ERR cloud InternalError")));
    // The cloud assigned one /28 that the daemon never heard of...
    assert_eq!(
        cloud(&sim).1.len(),
        2,
        "one prefix per lost call, retries included"
    );
    sim.clear_faults();
    // ...adopts it at a reconcile and, with max_pool_size 0 and its 16
    // addresses idle, gives it back whole at a pool check: a /28 it had
    // not adopted could not be given back. (Adopted and given back can
    // both happen before this thread looks again: the end state is
    // asserted, not the moment between.)
    assert!(
        eventually(Duration::from_secs(30), || {
            cloud(&sim).1 == first && enis_lines(&d).iter().all(|l| l.prefixes == Some(1))
        }),
        "the lost prefix was not adopted and given back: cloud {:?}, {:?}",
        cloud(&sim).1,
        enis_lines(&d)
    );
    assert_eq!(d.ask("audit"), vec!["OK consistent"]);
    // Released, both go back whole.
    d.ok("release lost/first");
    for i in 0..20 {
        d.ok(&format!("release lost/pod-{i}"));
    }
    assert!(
        eventually(Duration::from_secs(30), || cloud(&sim).1.is_empty()),
        "prefixes left in the cloud: {:?}",
        cloud(&sim).1
    );
}
