//! eniip-sim as one account: the account's flow control (per Action, per
//! window, `Throttling.User` 400 with the real message and retry hints,
//! counted in `/__sim/state`), driven through the real binary with a
//! short window (`--flow-window-ms`, the documented test knob).

use std::time::Duration;

use eniip_cloud::aliyun::AliyunCloud;
use eniip_cloud::CloudError;
use serde_json::Value;

use crate::common::{eventually, Sim};
use crate::openapi_client::{call, client};

fn describe(c: &AliyunCloud, region: &str) -> Result<Value, CloudError> {
    call(c, "DescribeInstanceTypes", &[("RegionId", region)])
}

fn throttled(r: &Result<Value, CloudError>) -> bool {
    match r {
        Ok(_) => false,
        Err(e) => {
            assert_eq!(e.code.as_deref(), Some("Throttling.User"), "{e}");
            assert_eq!(e.http_status, Some(400));
            assert_eq!(e.message, "Request was denied due to user flow control.");
            true
        }
    }
}

#[test]
fn a_window_passes_its_quota_and_the_next_window_passes_again() {
    let sim = Sim::start(&[
        "--flow-control",
        "DescribeInstanceTypes=3/min",
        "--flow-window-ms",
        "2000",
    ]);
    let c = client(sim.openapi_options());
    let mut seen = 0u64;
    // Use up whatever is left of the first window.
    let mut spent = false;
    for _ in 0..4 {
        if throttled(&describe(&c, &sim.region)) {
            seen += 1;
            spent = true;
            break;
        }
    }
    assert!(spent, "a quota of 3 let 4 calls through in one window");
    // The window turns: a call passes again, and from there exactly the
    // quota passes (the window is 2 s; these calls take milliseconds).
    assert!(eventually(Duration::from_secs(5), || {
        let r = describe(&c, &sim.region);
        if throttled(&r) {
            seen += 1;
            false
        } else {
            true
        }
    }));
    for i in 0..2 {
        let r = describe(&c, &sim.region);
        assert!(
            !throttled(&r),
            "call {} of the new window was throttled",
            i + 2
        );
    }
    assert!(throttled(&describe(&c, &sim.region)));
    seen += 1;
    let st = sim.state();
    assert_eq!(st["throttled"]["DescribeInstanceTypes"], seen, "{st}");
    // Actions without a limit of their own get the defaults (1000/min for
    // `*`): untouched by this burst.
    assert!(st["throttled"].get("DescribeNetworkInterfaces").is_none());
}

#[test]
fn without_flow_control_nothing_is_throttled() {
    let sim = Sim::start(&[]);
    let c = client(sim.openapi_options());
    for _ in 0..20 {
        assert!(!throttled(&describe(&c, &sim.region)));
    }
    assert_eq!(sim.state()["throttled"], serde_json::json!({}));
}

/// The addresses on the ENIs attached to `instance`, from the state.
fn addresses_of(st: &Value, instance: &str) -> Vec<String> {
    st["enis"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["instance_id"] == instance)
        .flat_map(|e| e["private_ips"].as_array().unwrap().clone())
        .map(|ip| ip.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn each_daemon_of_a_fleet_is_its_own_instance_on_shared_vswitches() {
    const N: usize = 5;
    let sim = Sim::start(&[
        "--instances",
        "5",
        "--instance-types",
        "ecs.g7.large,ecs.g7.2xlarge",
        "--attach-delay-ms",
        "20",
        "--metadata-lag-ms",
        "0",
    ]);
    assert_eq!(sim.fleet.len(), N);
    assert_eq!(
        sim.fleet[0].0, sim.instance,
        "instance 1 is the ready line's"
    );
    assert_eq!(sim.fleet[0].2, sim.metadata);
    let types: Vec<&str> = sim.fleet.iter().map(|f| f.1.as_str()).collect();
    assert_eq!(
        types[1..],
        [
            "ecs.g7.large",
            "ecs.g7.2xlarge",
            "ecs.g7.large",
            "ecs.g7.2xlarge"
        ]
    );
    let free0 = sim.state()["vswitches"][0]["free"].as_u64().unwrap();
    let mut daemons = Vec::new();
    for (i, (_, _, md)) in sim.fleet.iter().enumerate() {
        let dir = crate::common::tempdir(&format!("fleet{i}"));
        let cfg = crate::common::config(
            &sim,
            &dir,
            serde_json::json!({"metadata_endpoint": md, "min_pool_size": 2}),
        );
        daemons.push(crate::common::Daemon::start(&dir, &cfg));
    }
    let got: Vec<String> = daemons
        .iter()
        .enumerate()
        .map(|(i, d)| crate::common::field(&d.ok(&format!("alloc ns/pod-{i}")), "ip"))
        .collect();
    let st = sim.state();
    for (i, (id, _, _)) in sim.fleet.iter().enumerate() {
        let mine = addresses_of(&st, id);
        assert!(
            mine.contains(&got[i]),
            "daemon {i} got {} not on instance {id}: {st}",
            got[i]
        );
        for (j, other) in sim.fleet.iter().enumerate() {
            if j != i {
                assert!(!addresses_of(&st, &other.0).contains(&got[i]));
            }
        }
    }
    let free = st["vswitches"][0]["free"].as_u64().unwrap();
    // Each node took at least its pod's address plus its pool from the
    // one vswitch (and a primary address per new ENI).
    assert!(free + (N as u64) * 2 <= free0, "free {free0} -> {free}");
}

/// A daemon started while the account's quota for a start-up read is
/// spent, for longer than one call's retry budget (60 s): it waits for
/// the window to turn and becomes ready, rather than exit 69 (which says
/// the cloud is unreachable).
#[test]
fn a_daemon_started_on_a_spent_quota_waits_for_the_next_window() {
    let sim = Sim::start(&[
        "--flow-control",
        "DescribeInstanceTypes=1/min",
        "--flow-window-ms",
        "70000",
    ]);
    let c = client(sim.openapi_options());
    assert!(
        !throttled(&describe(&c, &sim.region)),
        "the window's one call"
    );
    assert!(throttled(&describe(&c, &sim.region)), "the quota is spent");
    let dir = crate::common::tempdir("fleet-spent");
    let cfg = crate::common::config(&sim, &dir, serde_json::json!({"start_timeout": 1}));
    let d = crate::common::Daemon::spawn(&dir, &cfg, &[]);
    d.wait_ready(Duration::from_secs(150));
    let st = sim.state();
    assert!(
        st["throttled"]["DescribeInstanceTypes"].as_u64().unwrap() >= 2,
        "{st}"
    );
    assert!(d.ok("alloc ns/pod-0").contains("ip="));
}
