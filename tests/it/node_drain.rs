//! Draining a node for retirement (issue 38, item 4): with 50 owners in
//! use and 20 idle, `drain` gives the idle addresses back within 30 s,
//! refuses new allocations with `ERR draining` and serves releases; a
//! kill -9 during the drain and a restart keep it draining;
//! `retire_ready=yes` once the 50 are released, and then the node holds
//! no secondary address and no ENI of its own in the cloud.

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{at_once, config, eventually, field, tempdir, Daemon, Sim};
use serde_json::json;

/// Every address on the emulator's managed ENIs that is not its ENI's
/// primary.
fn secondaries(sim: &Sim) -> BTreeSet<String> {
    sim.managed()
        .iter()
        .flat_map(|e| {
            let primary = e["primary_ip"].as_str().unwrap_or("").to_string();
            e["private_ips"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|ip| ip.as_str().map(str::to_string))
                .filter(move |ip| *ip != primary)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The addresses `list` shows in use.
fn in_use(d: &Daemon) -> BTreeSet<String> {
    common::list_rows(&d.ask("list"))
        .into_iter()
        .filter(|r| r.state == "inuse")
        .map(|r| r.ip.to_string())
        .collect()
}

#[test]
fn a_drained_node_gives_back_what_is_idle_and_ends_holding_nothing() {
    let sim = Sim::quick(&["--instance-type", "ecs.g7.4xlarge"]);
    let dir = tempdir("drain");
    let cfg = config(
        &sim,
        &dir,
        json!({"min_pool_size": 20, "max_pool_size": 20, "pool_check_interval": 60}),
    );
    let mut d = Daemon::start(&dir, &cfg);
    let replies = at_once(50, |i| d.ask(&format!("alloc pod/{i}")));
    assert!(
        replies.iter().all(|r| r[0].starts_with("OK ip=")),
        "{replies:?}"
    );
    let idle = |d: &Daemon| -> usize { field(&d.ok("status"), "idle").parse().unwrap() };
    assert!(
        eventually(Duration::from_secs(30), || idle(&d) >= 20),
        "{}",
        d.ok("status")
    );
    assert!(!d.ok("status").contains("draining="));

    // Before the drain the cloud holds the idle ones too.
    let idle_in_cloud = secondaries(&sim).difference(&in_use(&d)).count();
    assert!(idle_in_cloud >= 10, "{idle_in_cloud}");
    let drained = std::time::Instant::now();
    assert_eq!(d.ok("drain"), "draining=yes");
    // The idle addresses go back to the cloud within 30 s: every
    // secondary address left there is in use (primaries go with their
    // ENI).
    let used = in_use(&d);
    assert_eq!(used.len(), 50);
    assert!(
        eventually(Duration::from_secs(30), || secondaries(&sim)
            .is_subset(&used)),
        "{:?} not in use\n{}",
        secondaries(&sim).difference(&used).collect::<Vec<_>>(),
        d.log_text()
    );
    eprintln!(
        "drain: the idle addresses were back in the cloud {:.2} s after drain",
        drained.elapsed().as_secs_f64()
    );
    let status = d.ok("status");
    assert!(status.contains(" draining=yes retire_ready="), "{status}");
    // No new allocation; an owner holding one is answered it again;
    // releases are served.
    let r = d.ask("alloc pod/new");
    assert!(r[0].starts_with("ERR draining "), "{r:?}");
    assert!(d.ask("alloc pod/1")[0].starts_with("OK ip="));
    for i in 0..10 {
        assert!(d.ok(&format!("release pod/{i}")).starts_with("released="));
    }

    // A crash in the middle of the drain: it drains on after a restart.
    d.kill9();
    let d = Daemon::start(&dir, &cfg);
    d.wait_verified(Duration::from_secs(30));
    let status = d.ok("status");
    assert!(status.contains(" draining=yes retire_ready="), "{status}");
    assert!(d.ask("alloc pod/new")[0].starts_with("ERR draining "));
    assert_eq!(in_use(&d).len(), 40);
    let others = at_once(40, |i| d.ok(&format!("release pod/{}", i + 10)));
    assert!(
        others.iter().all(|r| r.starts_with("released=")),
        "{others:?}"
    );
    assert!(
        eventually(Duration::from_secs(30), || d
            .ok("status")
            .contains(" draining=yes retire_ready=yes")),
        "{}\n{}",
        d.ok("status"),
        d.log_text()
    );
    // Nothing of the node's is left in the cloud.
    assert!(
        eventually(Duration::from_secs(30), || sim.managed().is_empty()),
        "{:?}",
        sim.managed()
    );
    assert_eq!(field(&d.ok("status"), "ips"), "0");
    d.audits_consistent_within(Duration::from_secs(10));
    // Undrain: the pool warms up again.
    assert_eq!(d.ok("undrain"), "draining=no");
    assert!(
        eventually(Duration::from_secs(30), || idle(&d) >= 20),
        "{}",
        d.ok("status")
    );
    assert!(!d.ok("status").contains("draining="));
}
