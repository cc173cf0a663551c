//! A restart that asks the OpenAPI nothing before it is ready (issue 21
//! item 2): the state files and metadata give what was handed out; the
//! OpenAPI, asked after, decides what else is ours.

use crate::common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::openapi_client;
use common::{config, eventually, field, first_vswitch, sans_gen, tempdir, Daemon, Sim};
use serde_json::{json, Value};

/// One OpenAPI call behind the daemon's back, which must succeed.
fn call(sim: &Sim, action: &str, params: &[(&str, &str)]) -> Value {
    openapi_client::call(
        &openapi_client::client(sim.openapi_options()),
        action,
        params,
    )
    .unwrap_or_else(|e| panic!("{action}: {e}"))
}

fn idle(d: &Daemon) -> u64 {
    field(&d.ok("status"), "idle").parse().unwrap()
}

/// The addresses `list` shows.
fn listed(d: &Daemon) -> BTreeSet<String> {
    common::list_rows(&d.ask("list"))
        .into_iter()
        .map(|l| l.ip.to_string())
        .collect()
}

#[test]
fn a_restart_is_ready_while_the_openapi_answers_nothing_but_throttles() {
    let sim = Sim::quick(&[]);
    let dir = tempdir("restart-throttled");
    let cfg = config(
        &sim,
        &dir,
        // A released address cools for 5 minutes: a release made before
        // the first reconcile must still hold after it.
        json!({"min_pool_size": 3, "max_pool_size": 6, "alloc_timeout": 3, "ip_cooldown": 300}),
    );
    let mut d = Daemon::start(&dir, &cfg);
    let a = d.ok("alloc ns/a");
    let b = d.ok("alloc ns/b");
    assert!(eventually(Duration::from_secs(30), || idle(&d) >= 3));
    let (status, _) = d.terminate(Duration::from_secs(15));
    assert!(status.success(), "{}", d.log_text());

    // Every OpenAPI call is refused as a spent quota from now on.
    sim.fault(r#"{"action":"*","code":"Throttling.User"}"#);
    let throttled_before = sim.state()["throttled"].clone();
    let started = Instant::now();
    let d = Daemon::spawn(&dir, &cfg, &[]);
    d.wait_ready(Duration::from_secs(20));
    let ready_in = started.elapsed();
    println!("ready in {ready_in:?} with every OpenAPI call throttled");
    assert!(
        d.log_text()
            .contains("restarted from the state files and metadata"),
        "{}",
        d.log_text()
    );
    // The owners are served at once: shown, allocated again, released.
    assert_eq!(d.ok("show ns/a"), a);
    assert_eq!(sans_gen(&d.ok("alloc ns/a")), sans_gen(&a));
    d.ok("release ns/b");
    // Nothing new before the OpenAPI says what is ours: a new owner waits
    // its alloc_timeout and is told so.
    let reply = d.ask("alloc ns/c");
    assert!(
        reply.last().is_some_and(|l| l.starts_with("ERR timeout")),
        "{reply:?}"
    );
    assert_eq!(
        sim.state()["throttled"],
        throttled_before,
        "no fault-free call happened"
    );

    // The quota is back: the next alloc is served, from the cloud's view.
    sim.clear_faults();
    let c = d.ok("alloc ns/c");
    let ip = |r: &str| field(r, "ip");
    assert_ne!(ip(&c), ip(&a));
    assert_ne!(
        ip(&c),
        ip(&b),
        "ns/b's address is cooling or reserved, not handed out"
    );
    d.audits_consistent_within(Duration::from_secs(20));
}

#[test]
fn an_address_metadata_still_shows_but_the_openapi_took_away_is_never_handed_out() {
    let sim = Sim::quick(&[]);
    let dir = tempdir("restart-lagging");
    let cfg = config(&sim, &dir, json!({"min_pool_size": 4, "max_pool_size": 8}));
    let mut d = Daemon::start(&dir, &cfg);
    let a = d.ok("alloc ns/a");
    let (eni, mac) = (field(&a, "eni"), field(&a, "mac"));
    assert!(eventually(Duration::from_secs(30), || idle(&d) >= 4));
    // An idle secondary address of the same ENI (`list`: ip state owner
    // eni; the ENI's primary address cannot be unassigned).
    let primary = sim
        .managed()
        .into_iter()
        .find(|e| e["id"] == eni.as_str())
        .map(|e| e["primary_ip"].as_str().unwrap().to_string())
        .unwrap();
    let taken = d
        .ask("list")
        .iter()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|w| w.len() == 4 && w[1] == "idle" && w[3] == eni && w[0] != primary)
        .map(|w| w[0].to_string())
        .expect("an idle address on the ENI of ns/a");
    // Metadata lags 6 s from now on: the ENI (older than that) stays
    // shown, and so does what the OpenAPI takes away from it.
    std::thread::sleep(Duration::from_secs(7));
    sim.set_metadata_lag(6000);
    let (status, _) = d.terminate(Duration::from_secs(15));
    assert!(status.success(), "{}", d.log_text());

    // Behind the daemon's back: an idle address leaves the ENI and is
    // given to another (unmanaged) ENI, so it is someone else's now.
    call(
        &sim,
        "UnassignPrivateIpAddresses",
        &[
            ("RegionId", &sim.region),
            ("NetworkInterfaceId", &eni),
            ("PrivateIpAddress.1", &taken),
        ],
    );
    let sg = call(&sim, "DescribeSecurityGroups", &[("RegionId", &sim.region)])["SecurityGroups"]
        ["SecurityGroup"][0]["SecurityGroupId"]
        .as_str()
        .unwrap()
        .to_string();
    let vsw = first_vswitch(&sim.state());
    call(
        &sim,
        "CreateNetworkInterface",
        &[
            ("RegionId", &sim.region),
            ("VSwitchId", &vsw),
            ("SecurityGroupId", &sg),
            ("PrimaryIpAddress", &taken),
        ],
    );
    let shown = ureq::get(format!(
        "{}/latest/meta-data/network/interfaces/macs/{mac}/private-ipv4s",
        sim.metadata
    ))
    .call()
    .unwrap()
    .body_mut()
    .read_to_string()
    .unwrap();
    assert!(
        shown.contains(&taken),
        "the scenario needs metadata to still show {taken}: {shown}"
    );

    let d = Daemon::start(&dir, &cfg);
    assert!(d
        .log_text()
        .contains("restarted from the state files and metadata"));
    let mut got = Vec::new();
    for i in 0..6 {
        got.push(field(&d.ok(&format!("alloc ns/new-{i}")), "ip"));
    }
    assert!(
        !got.contains(&taken),
        "{taken} was handed out although another ENI holds it: {got:?}"
    );
    assert!(!listed(&d).contains(&taken), "{taken} is in the pool");
    sim.set_metadata_lag(50);
    d.audits_consistent_within(Duration::from_secs(20));
}

/// The ENI of `eni` as the emulator has it now.
fn sim_eni(sim: &Sim, eni: &str) -> Value {
    common::by_id(&sim.state(), "enis", eni)
}

/// `AttachNetworkInterface` or `DetachNetworkInterface` of `eni` on the
/// emulator's instance, behind the daemon's back.
fn attachment(sim: &Sim, action: &str, eni: &str) {
    call(
        sim,
        action,
        &[
            ("RegionId", &sim.region),
            ("NetworkInterfaceId", eni),
            ("InstanceId", &sim.instance),
        ],
    );
}

#[test]
fn an_eni_detached_while_eniipd_was_down_keeps_its_owners_addresses_until_it_is_back() {
    // A small vswitch (28 usable addresses): an address the cloud got
    // back is soon handed out again, as on a busy real one.
    let sim = Sim::quick(&["--vswitch", "vsw-bp1sim0000000000000001=192.168.0.0/27"]);
    let dir = tempdir("restart-detached");
    let cfg = config(&sim, &dir, json!({"min_pool_size": 2, "max_pool_size": 6}));
    let mut d = Daemon::start(&dir, &cfg);
    let old: Vec<String> = (0..5).map(|i| d.ok(&format!("alloc old/{i}"))).collect();
    let eni = field(&old[0], "eni");
    let on_eni: Vec<(usize, String)> = old
        .iter()
        .enumerate()
        .filter(|(_, r)| field(r, "eni") == eni)
        .map(|(i, r)| (i, field(r, "ip")))
        .collect();
    let held: BTreeSet<String> = old.iter().map(|r| field(r, "ip")).collect();
    let (status, _) = d.terminate(Duration::from_secs(15));
    assert!(status.success(), "{}", d.log_text());

    // Behind the daemon's back: only a detach. The addresses stay on the
    // ENI, which stays tagged for this instance.
    attachment(&sim, "DetachNetworkInterface", &eni);
    assert!(eventually(Duration::from_secs(10), || {
        sim_eni(&sim, &eni)["status"] == "Available"
    }));

    let mut d = Daemon::start(&dir, &cfg);
    let mut got = Vec::new();
    for i in 0..10 {
        let r = d.ok(&format!("alloc new/{i}"));
        assert_ne!(field(&r, "eni"), eni, "handed out from the detached ENI");
        got.push(field(&r, "ip"));
    }
    let twice: Vec<&String> = got.iter().filter(|ip| held.contains(*ip)).collect();
    assert!(
        twice.is_empty(),
        "new owners got addresses old owners hold: {twice:?}\nlog:\n{}",
        d.log_text()
    );
    // The old owners keep theirs (never dropped), and the ENI is kept.
    for (i, r) in old.iter().enumerate() {
        assert_eq!(&d.ok(&format!("show old/{i}")), r, "old/{i}");
    }
    let e = sim_eni(&sim, &eni);
    assert_eq!(e["status"], "Available", "the detached ENI still exists");
    for (_, ip) in &on_eni {
        assert!(
            e["private_ips"]
                .as_array()
                .unwrap()
                .iter()
                .any(|a| a == ip.as_str()),
            "{ip} left the detached ENI"
        );
    }

    // The operator attaches it again: its owners are served from it as
    // before, and the pool agrees with the cloud.
    attachment(&sim, "AttachNetworkInterface", &eni);
    d.audits_consistent_within(Duration::from_secs(30));
    for (i, _) in &on_eni {
        assert_eq!(
            sans_gen(&d.ok(&format!("alloc old/{i}"))),
            sans_gen(&old[*i]),
            "old/{i}"
        );
    }
    // A restart now (the ENI attached) keeps every owner as well.
    let (status, _) = d.terminate(Duration::from_secs(15));
    assert!(status.success(), "{}", d.log_text());
    d = Daemon::start(&dir, &cfg);
    for (i, r) in old.iter().enumerate() {
        assert_eq!(
            sans_gen(&d.ok(&format!("show old/{i}"))),
            sans_gen(r),
            "old/{i} after a second restart"
        );
    }
    d.audits_consistent_within(Duration::from_secs(30));
}

/// `eniip-sim --state-file`: the emulated cloud is saved as it changes,
/// so after both the emulator and eniipd are killed (a crash, a reboot)
/// and started again, eniipd finds the cloud it left and every owner
/// keeps its address.
#[test]
fn the_emulator_keeps_its_cloud_in_a_state_file_across_a_crash() {
    let dir = tempdir("sim-state-file");
    let world = dir.join("world.json");
    let world_arg = world.display().to_string();
    let sim = Sim::quick(&["--state-file", &world_arg]);
    let cfg = config(&sim, &dir, json!({"min_pool_size": 2, "max_pool_size": 4}));
    let mut d = Daemon::start(&dir, &cfg);
    let owners: Vec<String> = (0..3).map(|i| d.ok(&format!("alloc keep/{i}"))).collect();
    let instance = sim.instance.clone();
    let enis_before: BTreeSet<String> = sim
        .managed()
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect();
    d.kill9();
    drop(sim);

    let sim = Sim::quick(&["--state-file", &world_arg]);
    assert_eq!(sim.instance, instance, "the same instance");
    let enis_after: BTreeSet<String> = sim
        .managed()
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(enis_after, enis_before, "the same ENIs");
    let cfg = config(&sim, &dir, json!({"min_pool_size": 2, "max_pool_size": 4}));
    let d = Daemon::start(&dir, &cfg);
    for (i, r) in owners.iter().enumerate() {
        assert_eq!(&d.ok(&format!("show keep/{i}")), r, "keep/{i}");
    }
    assert!(!d.log_text().contains("no longer has"), "{}", d.log_text());
    d.audits_consistent_within(Duration::from_secs(20));
}

/// What an `alloc` asks beyond an address, over the socket: a vswitch the
/// node does not have and a stick time over `max_ip_stick_time` are
/// refused naming the argument; an owner's own stick time keeps its
/// address from everyone else across a kill -9, and gives it back to it
/// (the node's `ip_stick_time` is 0: it keeps nothing itself).
#[test]
fn an_owners_own_stick_time_holds_across_a_kill_9() {
    let sim = Sim::quick(&[]);
    let dir = tempdir("restart-stick");
    let cfg = config(
        &sim,
        &dir,
        json!({"min_pool_size": 2, "max_pool_size": 6, "max_ip_stick_time": 900}),
    );
    let mut d = Daemon::start(&dir, &cfg);
    let refused = d.ask("alloc sts/web-0 vswitch=vsw-nosuch0000000000000009");
    assert!(
        refused.last().unwrap().starts_with(
            "ERR bad-request vswitch=vsw-nosuch0000000000000009 is not one of this node's vswitches"
        ),
        "{refused:?}"
    );
    let refused = d.ask("alloc sts/web-0 ip-stick-time=901");
    assert!(
        refused
            .last()
            .unwrap()
            .starts_with("ERR bad-request ip-stick-time=901 is more than this node allows"),
        "{refused:?}"
    );
    let vsw = first_vswitch(&sim.state());
    let web = d.ok(&format!("alloc sts/web-0 ip-stick-time=600 vswitch={vsw}"));
    let web_ip = field(&web, "ip");
    d.ok("alloc rs/plain");
    d.ok("release sts/web-0");
    d.ok("release rs/plain");
    d.kill9();

    let d = Daemon::start(&dir, &cfg);
    let others: Vec<String> = (0..4)
        .map(|i| field(&d.ok(&format!("alloc rs/new-{i}")), "ip"))
        .collect();
    assert!(!others.contains(&web_ip), "{web_ip} is kept: {others:?}");
    assert_eq!(field(&d.ok("alloc sts/web-0"), "ip"), web_ip);
    d.audits_consistent_within(Duration::from_secs(20));
}
