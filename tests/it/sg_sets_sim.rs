//! Security groups per pod end to end (eniipd against eniip-sim, real
//! binaries): ENIs by security-group set within the instance's ENI
//! slots, the ceiling named, an idle set's ENI re-purposed (one
//! ModifyNetworkInterfaceAttribute, no delete), kill -9 mid-burst over
//! three sets, a set changed out of band, and the burst's call count.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use crate::openapi_client::{call, client};
use common::{at_once, config, eventually, field, tempdir, Daemon, Sim};
use serde_json::{json, Value};

const SG_A: &str = "sg-bp1podsa000000000001";
const SG_B: &str = "sg-bp1podsb000000000002";
const SG_C: &str = "sg-bp1podsc000000000003";
const SG_D: &str = "sg-bp1podsd000000000004";

/// The emulator with the four groups in its VPC (the default type,
/// ecs.g7.xlarge: 3 usable ENIs of 15 addresses), `more` after.
fn sim_with_groups(more: &[&str]) -> Sim {
    let mut args = vec![
        "--security-group",
        SG_A,
        "--security-group",
        SG_B,
        "--security-group",
        SG_C,
        "--security-group",
        SG_D,
    ];
    args.extend_from_slice(more);
    Sim::quick(&args)
}

/// A config allowing the four groups, no warm pool to keep.
fn cfg(sim: &Sim, dir: &std::path::Path, more: Value) -> Value {
    let base = config(
        sim,
        dir,
        json!({
            "pod_security_groups": [SG_A, SG_B, SG_C, SG_D],
            "min_pool_size": 0,
            "max_pool_size": 200,
        }),
    );
    common::merged(base, more)
}

/// The groups the emulator shows for `eni`, sorted.
fn cloud_groups(sim: &Sim, eni: &str) -> Vec<String> {
    common::sorted_strings(&common::by_id(&sim.state(), "enis", eni)["security_group_ids"])
}

#[test]
fn a_fourth_set_is_refused_naming_the_ceiling_then_an_idle_sets_eni_is_repurposed() {
    let sim = sim_with_groups(&[]);
    let dir = tempdir("sg-ceiling");
    let d = Daemon::start(&dir, &cfg(&sim, &dir, json!({})));
    let mut eni_of = BTreeMap::new();
    for sg in [SG_A, SG_B, SG_C] {
        let r = d.ok(&format!("alloc pods/{sg} security-groups={sg}"));
        assert_eq!(field(&r, "security-groups"), sg, "{r}");
        let eni = field(&r, "eni");
        assert_eq!(cloud_groups(&sim, &eni), [sg]);
        eni_of.insert(sg, eni);
    }
    assert_eq!(eni_of.values().collect::<BTreeSet<_>>().len(), 3);
    let r = d.ask(&format!("alloc pods/{SG_D} security-groups={SG_D}"));
    let last = r.last().unwrap();
    assert!(
        last.starts_with("ERR exhausted eni_slots: 3 of 3 ENIs serve other security-group sets"),
        "{r:?}"
    );
    let creates = sim.calls("CreateNetworkInterface");
    d.ok(&format!("release pods/{SG_C}"));
    let r = d.ok(&format!("alloc pods/{SG_D} security-groups={SG_D}"));
    let eni = field(&r, "eni");
    assert_eq!(eni, eni_of[SG_C], "the idle set's ENI: {r}");
    assert_eq!(cloud_groups(&sim, &eni), [SG_D]);
    assert_eq!(sim.calls("ModifyNetworkInterfaceAttribute"), 1);
    assert_eq!(sim.calls("DeleteNetworkInterface"), 0);
    assert_eq!(sim.calls("CreateNetworkInterface"), creates);
    let show = d.ok(&format!("show pods/{SG_D}"));
    assert_eq!(field(&show, "security-groups"), SG_D);
    let enis = d.ask("enis");
    assert!(
        enis.iter()
            .any(|l| l.starts_with(&eni) && l.contains(&format!(" security-groups={SG_D}"))),
        "{enis:?}"
    );
    let metrics = d.ask("metrics").join("\n");
    assert!(
        metrics.contains(&format!(
            "eniipd_sg_set_enis{{security_groups=\"{SG_D}\"}} 1"
        )),
        "{metrics}"
    );
    d.audits_consistent_within(Duration::from_secs(10));
}

#[test]
fn asks_outside_pod_security_groups_are_refused_and_plain_pods_get_the_nodes_set() {
    let sim = sim_with_groups(&[]);
    let dir = tempdir("sg-ask");
    let d = Daemon::start(
        &dir,
        &cfg(&sim, &dir, json!({"pod_security_groups": [SG_A]})),
    );
    let r = d.ask(&format!("alloc pods/x security-groups={SG_A},{SG_B}"));
    let last = r.last().unwrap();
    assert!(
        last.starts_with("ERR bad-request security-groups="),
        "{r:?}"
    );
    assert!(
        last.contains(SG_B) && last.contains("pod_security_groups"),
        "{r:?}"
    );
    let plain = d.ok("alloc pods/plain");
    assert!(!plain.contains("security-groups="), "{plain}");
    let own = common::by_id(&sim.state(), "enis", &field(&plain, "eni"));
    let instance_groups = own["security_group_ids"].clone();
    let primary: Vec<Value> = sim.state()["enis"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["tags"]["creator"] != "eniipd")
        .cloned()
        .collect();
    assert_eq!(
        instance_groups, primary[0]["security_group_ids"],
        "the node's own"
    );
}

#[test]
fn kill_9_mid_burst_over_three_sets_keeps_every_owner_its_address_and_set() {
    let sim = sim_with_groups(&["--latency-ms", "20"]);
    let dir = tempdir("sg-crash");
    let config = cfg(&sim, &dir, json!({}));
    let mut d = Daemon::start(&dir, &config);
    let acked: Mutex<BTreeMap<String, (String, String)>> = Mutex::new(BTreeMap::new());
    const CLIENTS: usize = 6;
    const EACH: usize = 6;
    std::thread::scope(|s| {
        for t in 0..CLIENTS {
            let (sock, acked) = (d.socket.clone(), &acked);
            s.spawn(move || {
                use eniip_protocol::protocol::client::Client;
                let sg = [SG_A, SG_B, SG_C][t % 3];
                for i in 0..EACH {
                    let owner = format!("crash/{t}-{i}");
                    let r = Client::connect(&sock, Duration::from_secs(10)).and_then(|mut c| {
                        c.ask_within(
                            &format!("alloc {owner} security-groups={sg}"),
                            Duration::from_secs(30),
                        )
                    });
                    match r {
                        Ok(r) if r.is_ok() => {
                            let line = r.into_lines().pop().unwrap();
                            assert_eq!(field(&line, "security-groups"), sg, "{line}");
                            let v = (field(&line, "ip"), sg.to_string());
                            acked.lock().unwrap().insert(owner, v);
                        }
                        _ => return,
                    }
                }
            });
        }
        assert!(
            eventually(Duration::from_secs(30), || acked.lock().unwrap().len() >= 9),
            "no allocation acknowledged"
        );
        d.kill9();
    });
    let acked = acked.into_inner().unwrap();
    println!(
        "{} allocations over 3 sets acknowledged before kill -9",
        acked.len()
    );
    assert!(
        acked.len() < CLIENTS * EACH,
        "the burst ended before the kill"
    );
    drop(d);
    let d = Daemon::start(&dir, &config);
    d.wait_verified(Duration::from_secs(30));
    let mut ips = BTreeSet::new();
    for (owner, (ip, sg)) in &acked {
        let r = d.ok(&format!("show {owner}"));
        assert_eq!(field(&r, "ip"), *ip, "{owner}: {r}");
        assert_eq!(field(&r, "security-groups"), *sg, "{owner}: {r}");
        assert_eq!(
            cloud_groups(&sim, &field(&r, "eni")),
            vec![sg.to_string()],
            "{owner}"
        );
        assert!(ips.insert(ip.clone()), "{ip} held twice");
    }
    let rows = common::list_rows(&d.ask("list"));
    let listed: BTreeSet<String> = rows.iter().map(|l| l.ip.to_string()).collect();
    assert_eq!(listed.len(), rows.len(), "an address listed twice");
    // The restarted daemon serves each set from its own ENIs.
    for sg in [SG_A, SG_B, SG_C] {
        let r = d.ok(&format!("alloc after/{sg} security-groups={sg}"));
        assert_eq!(cloud_groups(&sim, &field(&r, "eni")), [sg]);
    }
    d.audits_consistent_within(Duration::from_secs(10));
}

#[test]
fn a_set_changed_out_of_band_gives_no_new_owner_its_addresses_and_audit_names_it() {
    let sim = sim_with_groups(&[]);
    let dir = tempdir("sg-drift");
    let d = Daemon::start(&dir, &cfg(&sim, &dir, json!({})));
    let first = d.ok(&format!("alloc a/0 security-groups={SG_A}"));
    let eni = field(&first, "eni");
    // Idle addresses of set A on it, that a new owner would get.
    for i in 1..4 {
        let r = d.ok(&format!("alloc tmp/{i} security-groups={SG_A}"));
        assert_eq!(field(&r, "eni"), eni);
        d.ok(&format!("release tmp/{i}"));
    }
    let c = client(sim.openapi_options());
    call(
        &c,
        "ModifyNetworkInterfaceAttribute",
        &[("NetworkInterfaceId", &eni), ("SecurityGroupId.1", SG_B)],
    )
    .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || d.ask("enis").iter().any(|l| l
            .starts_with(&eni)
            && l.contains("security-groups-cloud="))),
        "{:?}",
        d.ask("enis")
    );
    let audit = d.ask("audit");
    assert!(
        audit.last().unwrap().starts_with("ERR inconsistent"),
        "{audit:?}"
    );
    assert!(audit.iter().any(|l| l.contains(&eni)), "{audit:?}");
    for (owner, sg) in [("a/1", SG_A), ("b/1", SG_B)] {
        let r = d.ok(&format!("alloc {owner} security-groups={sg}"));
        assert_ne!(field(&r, "eni"), eni, "{owner} got an address of {eni}");
    }
    let r = d.ok("show a/0");
    assert_eq!(field(&r, "ip"), field(&first, "ip"), "its owner keeps it");
}

#[test]
fn a_burst_of_60_over_three_sets_stays_within_the_call_bound() {
    let sim = sim_with_groups(&["--instance-type", "ecs.g7.4xlarge"]);
    let dir = tempdir("sg-burst");
    let d = Daemon::start(&dir, &cfg(&sim, &dir, json!({})));
    let replies = at_once(60, |i| {
        let sg = [SG_A, SG_B, SG_C][i % 3];
        (sg, d.ok(&format!("alloc burst/{i} security-groups={sg}")))
    });
    let mut ips = BTreeSet::new();
    for (sg, r) in &replies {
        assert!(ips.insert(field(r, "ip")), "{r}");
        assert_eq!(
            cloud_groups(&sim, &field(r, "eni")),
            [sg.to_string()],
            "{r}"
        );
    }
    let creates = sim.calls("CreateNetworkInterface");
    let assigns = sim.calls("AssignPrivateIpAddresses");
    // 60 addresses at 10 a call: 6 calls at best; one create per set.
    println!(
        "sg-burst creates={creates} assigns={assigns} bound={}",
        6 + 3
    );
    assert_eq!(creates, 3);
    assert!(
        creates + assigns <= 6 + 3,
        "{creates} creates + {assigns} assigns"
    );
}
