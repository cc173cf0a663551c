//! The allocator end to end (real binaries): a burst of 100, giving
//! addresses back under max_pool_size (dual stack too), and kill -9 in the
//! middle of a burst followed by a restart.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use common::{
    at_once, config, eventually, field, first_vswitch, tempdir, Daemon, Sim, DUAL_VSWITCH,
};
use serde_json::{json, Value};

fn large_sim(extra: &[&str]) -> Sim {
    let mut args = vec![
        "--instance-type",
        "ecs.g7.4xlarge",
        "--attach-delay-ms",
        "100",
        "--metadata-lag-ms",
        "100",
    ];
    args.extend_from_slice(extra);
    Sim::start(&args)
}

/// Every managed address in the emulator, with its ENI.
fn cloud_ips(sim: &Sim) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for e in sim.managed() {
        for ip in e["private_ips"].as_array().unwrap() {
            let prev = out.insert(
                ip.as_str().unwrap().to_string(),
                e["id"].as_str().unwrap().to_string(),
            );
            assert!(prev.is_none(), "{ip} on two ENIs");
        }
    }
    out
}

fn list(d: &Daemon) -> Vec<(String, String, String, String)> {
    common::list_rows(&d.ask("list"))
        .into_iter()
        .map(|l| {
            let owner = l.owner.unwrap_or_else(|| "-".into());
            (l.ip.to_string(), l.state, owner, l.eni)
        })
        .collect()
}

#[test]
fn a_burst_of_100_gives_every_owner_exactly_one_address() {
    let sim = large_sim(&[]);
    let dir = tempdir("burst");
    let d = Daemon::start(&dir, &config(&sim, &dir, json!({"max_pool_size": 0})));
    let replies = at_once(100, |i| d.ok(&format!("alloc burst/pod-{i}")));
    let owners: BTreeMap<String, String> = replies
        .iter()
        .enumerate()
        .map(|(i, r)| (format!("burst/pod-{i}"), field(r, "ip")))
        .collect();
    let ips: BTreeSet<&String> = owners.values().collect();
    assert_eq!(ips.len(), 100, "every owner a different address");
    let cloud = cloud_ips(&sim);
    for (o, ip) in &owners {
        let eni = cloud
            .get(ip)
            .unwrap_or_else(|| panic!("{o}'s {ip} is not on any ENI in the cloud"));
        let r = &replies[o.trim_start_matches("burst/pod-").parse::<usize>().unwrap()];
        assert_eq!(&field(r, "eni"), eni);
    }
    let creates = sim.calls("CreateNetworkInterface");
    let assigns = sim.calls("AssignPrivateIpAddresses");
    let attaches = sim.calls("AttachNetworkInterface");
    println!(
        "100 allocations: {creates} creates, {assigns} assigns, {attaches} attaches, {} describes",
        sim.calls("DescribeNetworkInterfaces")
    );
    assert!(
        creates + assigns <= 12,
        "far from the lower bound of 10: {creates} + {assigns}"
    );
    let st = d.ok("status");
    assert!(
        st.contains(" inuse=100 ") && st.contains(" pending=0 "),
        "{st}"
    );
    assert_eq!(d.ask("audit"), vec!["OK consistent"]);
}

#[test]
fn dual_stack_pairs_come_and_go_together() {
    let sim = large_sim(&["--vswitch", DUAL_VSWITCH]);
    let dir = tempdir("dual");
    let d = Daemon::start(
        &dir,
        &config(
            &sim,
            &dir,
            json!({"ip_stack": "dual", "max_pool_size": 2, "pool_check_interval": 1}),
        ),
    );
    let mut held = BTreeMap::new();
    for i in 0..25 {
        let r = d.ok(&format!("alloc dual/{i}"));
        held.insert(i, (field(&r, "ip"), field(&r, "ipv6")));
    }
    let v6s: BTreeSet<&String> = held.values().map(|(_, b)| b).collect();
    assert_eq!(v6s.len(), 25, "every owner has its own IPv6: {held:?}");
    for i in 1..25 {
        d.ok(&format!("release dual/{i}"));
    }
    // Shed down to max_pool_size: every IPv6 leaves with its IPv4.
    let pairs_match = || {
        let enis = sim.managed();
        let v4: usize = enis
            .iter()
            .map(|e| e["private_ips"].as_array().unwrap().len())
            .sum();
        let v6: usize = enis
            .iter()
            .map(|e| e["ipv6s"].as_array().unwrap().len())
            .sum();
        v4 <= 3 && v4 == v6
    };
    assert!(
        eventually(Duration::from_secs(30), pairs_match),
        "cloud: {:?}; daemon: {}",
        sim.managed(),
        d.ok("status")
    );
    let (ip, ipv6) = &held[&0];
    let on_cloud = sim.managed().into_iter().any(|e| {
        e["private_ips"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a == ip.as_str())
            && e["ipv6s"]
                .as_array()
                .unwrap()
                .iter()
                .any(|b| b == ipv6.as_str())
    });
    assert!(
        on_cloud,
        "dual/0 keeps {ip} and {ipv6}: {:?}",
        sim.managed()
    );
    d.audits_consistent_within(Duration::from_secs(10));
}

/// `eni ID` gives what a datapath needs to route through an ENI: the same
/// MAC, vswitch and IPv4 gateway as `alloc`, and in dual stack the
/// vswitch's IPv6 CIDR and gateway (which no `alloc` reply carries).
#[test]
fn eni_gives_the_vswitch_gateways_in_dual_stack() {
    let sim = large_sim(&["--vswitch", DUAL_VSWITCH]);
    let dir = tempdir("eniverb");
    let d = Daemon::start(
        &dir,
        &config(&sim, &dir, json!({"ip_stack": "dual", "max_pool_size": 4})),
    );
    let a = d.ok("alloc eniverb/0");
    let eni = field(&a, "eni");
    let info = d.ok(&format!("eni {eni}"));
    for k in ["eni", "mac", "vswitch", "cidr", "gateway"] {
        assert_eq!(field(&info, k), field(&a, k), "{k}: {info} / {a}");
    }
    assert_eq!(field(&info, "cidr6"), "2408:4005:3ff:5100::/64", "{info}");
    assert_eq!(
        field(&info, "gateway6"),
        "2408:4005:3ff:5100:ffff:ffff:ffff:fff7",
        "{info}"
    );
    // The IPv4 fields keep the alloc reply's order; v6 fields come last.
    assert!(info.starts_with(&format!("eni={eni} mac=")), "{info}");
    // Read once per vswitch: with the metadata service failing, the next
    // ADD of a pod on that vswitch still gets its gateway.
    sim.fault(r#"{"action":"metadata","code":"InternalError"}"#);
    assert_eq!(d.ok(&format!("eni {eni}")), info);
    sim.clear_faults();
    assert_eq!(
        d.ask("eni eni-doesnotexist0000"),
        vec!["ERR not-found eni-doesnotexist0000 is no ENI eniipd manages".to_string()]
    );
    for bad in ["eni", "eni a b", "eni eni|x"] {
        let r = d.ask(bad);
        assert!(
            r.last().unwrap().starts_with("ERR bad-request"),
            "{bad}: {r:?}"
        );
    }
}

#[test]
fn releases_and_max_pool_size_give_addresses_back() {
    let sim = large_sim(&[]);
    let dir = tempdir("giveback");
    let d = Daemon::start(
        &dir,
        &config(
            &sim,
            &dir,
            json!({"max_pool_size": 2, "pool_check_interval": 1}),
        ),
    );
    for i in 0..25 {
        d.ok(&format!("alloc gb/{i}"));
    }
    // IPv4 only: `eni` has the alloc reply's fields and no IPv6 ones.
    let a = d.ok("show gb/0");
    let info = d.ok(&format!("eni {}", field(&a, "eni")));
    assert_eq!(field(&info, "gateway"), field(&a, "gateway"), "{info}");
    assert!(!info.contains("6="), "{info}");
    let at_peak = cloud_ips(&sim).len();
    assert!(at_peak >= 25);
    for i in 0..25 {
        assert!(d.ok(&format!("release gb/{i}")).starts_with("released=1"));
    }
    assert!(
        eventually(Duration::from_secs(30), || cloud_ips(&sim).len() <= 2),
        "cloud still holds {} addresses; daemon: {}",
        cloud_ips(&sim).len(),
        d.ok("status")
    );
    assert!(sim.calls("UnassignPrivateIpAddresses") >= 1);
    let st = d.ok("status");
    assert!(
        st.contains(" inuse=0 ") && st.contains(" pending=0 "),
        "{st}"
    );
    d.audits_consistent_within(Duration::from_secs(10));
}

#[test]
fn kill_9_mid_burst_loses_no_acknowledged_allocation_and_leaks_nothing() {
    let sim = large_sim(&["--latency-ms", "20"]);
    let dir = tempdir("crash");
    let cfg = config(&sim, &dir, json!({"max_pool_size": 0}));
    let mut d = Daemon::start(&dir, &cfg);
    let acked: Mutex<BTreeMap<String, String>> = Mutex::new(BTreeMap::new());
    const BURST: usize = 8 * 10;
    std::thread::scope(|s| {
        for t in 0..8 {
            let (sock, acked) = (d.socket.clone(), &acked);
            s.spawn(move || {
                use eniip_protocol::protocol::client::Client;
                for i in 0..10 {
                    let owner = format!("crash/{t}-{i}");
                    // After the kill a connect or a reply fails: this
                    // client's burst ends there.
                    let r = Client::connect(&sock, Duration::from_secs(10)).and_then(|mut c| {
                        c.ask_within(&format!("alloc {owner}"), Duration::from_secs(30))
                    });
                    match r {
                        Ok(r) if r.is_ok() => {
                            let ip = field(&r.into_lines().pop().unwrap(), "ip");
                            acked.lock().unwrap().insert(owner, ip);
                        }
                        _ => return,
                    }
                }
            });
        }
        // Mid-burst: once some allocations are acknowledged.
        assert!(
            eventually(Duration::from_secs(30), || acked.lock().unwrap().len()
                >= 10),
            "no allocation acknowledged"
        );
        d.kill9();
    });
    let acked = acked.into_inner().unwrap();
    println!("{} allocations acknowledged before kill -9", acked.len());
    // The kill fell mid-burst: some were acknowledged, not all.
    assert!(
        acked.len() < BURST,
        "the burst ended before the kill: all {BURST} acknowledged"
    );
    drop(d);
    let d = Daemon::start(&dir, &cfg);
    d.wait_verified(Duration::from_secs(30));
    for (owner, ip) in &acked {
        let r = d.ask(&format!("show {owner}"));
        assert_eq!(
            field(&r[0], "ip"),
            *ip,
            "{owner} lost or changed its address: {r:?}"
        );
    }
    let rows = list(&d);
    let mut by_ip: BTreeSet<&str> = BTreeSet::new();
    let mut owners: BTreeSet<&str> = BTreeSet::new();
    for (ip, state, owner, _) in &rows {
        assert!(by_ip.insert(ip), "{ip} listed twice");
        if state == "inuse" {
            assert!(owners.insert(owner), "{owner} holds two addresses");
        }
    }
    // Everything the cloud has is known to the daemon, and nothing leaked.
    let cloud = cloud_ips(&sim);
    let known: BTreeMap<String, String> = rows
        .iter()
        .map(|(ip, _, _, eni)| (ip.clone(), eni.clone()))
        .collect();
    assert_eq!(cloud, known, "cloud vs daemon");
    let managed: Vec<Value> = sim.managed();
    assert!(
        managed.iter().all(|e| e["status"] == "InUse"),
        "an unattached tagged ENI was left: {managed:?}"
    );
    let enis = d.ask("enis");
    assert_eq!(enis.len() - 1, managed.len());
    assert!(eventually(Duration::from_secs(10), || d
        .ok("status")
        .contains(" pending=0 ")));
    assert_eq!(d.ask("audit"), vec!["OK consistent"]);
}

#[test]
fn an_eni_deleted_behind_the_daemons_back_is_let_go() {
    use eniip_cloud::aliyun::{AliyunCloud, AliyunCloudOptions};
    use eniip_cloud::credentials::CredentialSource;
    use eniip_cloud::{wait, CloudApi, EniStatus};

    // ecs.g7.large: 2 usable ENIs of 6 addresses, capacity 12.
    let sim = Sim::quick(&["--instance-type", "ecs.g7.large"]);
    let dir = tempdir("deleted");
    let cfg = config(&sim, &dir, json!({"max_pool_size": 0}));
    let d = Daemon::start(&dir, &cfg);
    let mut held = BTreeMap::new();
    for i in 0..12 {
        let r = d.ok(&format!("alloc o/{i}"));
        held.insert(format!("o/{i}"), field(&r, "eni"));
    }
    let victim = held["o/0"].clone();
    for (o, e) in &held {
        if *e == victim {
            assert!(d.ok(&format!("release {o}")).starts_with("released="));
        }
    }
    // Someone else detaches and deletes it.
    let mut opts = AliyunCloudOptions::new(
        &sim.region,
        &sim.metadata,
        CredentialSource::Static {
            id: eniip_sim::DEFAULT_ACCESS_KEY_ID.into(),
            secret: eniip_util::Secret::new(eniip_sim::DEFAULT_ACCESS_KEY_SECRET),
            token: None,
        },
    );
    opts.ecs_endpoint = sim.ecs.clone();
    opts.vpc_endpoint = sim.ecs.clone();
    let other = AliyunCloud::new(opts);
    other.detach_eni(&victim, &sim.instance).unwrap();
    wait::wait_eni_status(
        &other,
        &victim,
        EniStatus::Available,
        std::time::Instant::now() + Duration::from_secs(10),
    )
    .unwrap();
    other.delete_eni(&victim).unwrap();
    // The daemon lets it go: it is no longer listed, its slot is free and
    // the audit is clean.
    assert!(
        eventually(Duration::from_secs(20), || !d
            .ask("enis")
            .iter()
            .any(|l| l.starts_with(&victim))),
        "{:?}",
        d.ask("enis")
    );
    d.audits_consistent_within(Duration::from_secs(10));
    // The whole capacity can be had again (a new ENI replaces it).
    for i in 12..18 {
        let r = d.ask(&format!("alloc o/{i}"));
        assert!(r[0].starts_with("OK ip="), "o/{i}: {r:?}");
    }
    assert!(d.ok("status").contains(" inuse=12 "));
}

/// Alloc and release end to end with one signature version; returns the
/// emulator's count of requests per version.
fn alloc_release_signed_with(version: Option<&str>) -> Value {
    let sim = Sim::start(&[]);
    let dir = tempdir(&format!("sig-{}", version.unwrap_or("default")));
    let mut extra = json!({"max_pool_size": 0, "min_pool_size": 0});
    if let Some(v) = version {
        extra["signature_version"] = json!(v);
    }
    let d = Daemon::start(&dir, &config(&sim, &dir, extra));
    let mut ips = BTreeSet::new();
    for i in 0..3 {
        ips.insert(field(&d.ok(&format!("alloc sig/{i}")), "ip"));
    }
    assert_eq!(ips.len(), 3);
    let cloud = cloud_ips(&sim);
    assert!(ips.iter().all(|ip| cloud.contains_key(ip)), "{cloud:?}");
    for i in 0..3 {
        assert!(d.ok(&format!("release sig/{i}")).starts_with("released="));
    }
    // max_pool_size 0: every released secondary address goes back.
    assert!(
        eventually(Duration::from_secs(30), || {
            let c = cloud_ips(&sim);
            ips.iter().filter(|ip| c.contains_key(*ip)).count() <= 1
        }),
        "cloud still holds {:?}",
        cloud_ips(&sim)
    );
    sim.state()["signatures"].clone()
}

#[test]
fn the_daemon_signs_with_v3_by_default() {
    let sigs = alloc_release_signed_with(None);
    assert!(common::signed(&sigs, "v3") >= 3, "{sigs}");
    assert_eq!(common::signed(&sigs, "v1"), 0, "{sigs}");
}

#[test]
fn signature_version_v1_still_allocates_and_releases() {
    let sigs = alloc_release_signed_with(Some("v1"));
    assert!(common::signed(&sigs, "v1") >= 3, "{sigs}");
    assert_eq!(common::signed(&sigs, "v3"), 0, "{sigs}");
}

#[test]
fn check_config_shows_signature_version_and_refuses_a_bad_one() {
    let dir = tempdir("sigcfg");
    let run = |value: &str| {
        let path = dir.join(format!("{value}.json"));
        std::fs::write(&path, format!("{{\"signature_version\": \"{value}\"}}")).unwrap();
        std::process::Command::new(env!("CARGO_BIN_EXE_eniipd"))
            .args(["--check-config", "--config"])
            .arg(&path)
            .output()
            .unwrap()
    };
    for ok in ["v3", "v1"] {
        let out = run(ok);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout
                .lines()
                .any(|l| l == format!("signature_version={ok}")),
            "{stdout}"
        );
    }
    let out = run("v2");
    assert_eq!(out.status.code(), Some(78));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("`signature_version`") && stderr.contains("\"v2\""),
        "{stderr}"
    );
}

#[test]
fn a_failing_metadata_service_reaches_clients_named_as_such() {
    let sim = Sim::start(&[]);
    let dir = tempdir("md500");
    let d = Daemon::start(&dir, &config(&sim, &dir, json!({})));
    sim.fault(r#"{"action": "metadata", "code": "InternalError"}"#);
    let reply = d.ask("audit");
    let last = reply.last().unwrap();
    assert!(last.starts_with("ERR cloud metadata "), "{reply:?}");
    assert!(
        last.contains("metadata service") && last.contains("HTTP 500"),
        "{reply:?}"
    );
    sim.clear_faults();
    d.audits_consistent_within(Duration::from_secs(10));
}

#[test]
fn a_wrong_secret_exits_77_without_the_whole_key_id_in_the_log() {
    let sim = Sim::start(&[]);
    let key_id = eniip_sim::DEFAULT_ACCESS_KEY_ID;
    for version in ["v1", "v3"] {
        let dir = tempdir(&format!("wrongkey-{version}"));
        let cfg = config(
            &sim,
            &dir,
            json!({"access_secret": "not-the-secret", "signature_version": version}),
        );
        let mut d = Daemon::spawn(&dir, &cfg, &["--log-level", "debug"]);
        let code = d.wait_exit(Duration::from_secs(60)).code();
        assert_eq!(code, Some(77), "{version}: {}", d.log_text());
        let log = d.log_text();
        assert!(log.contains("SignatureDoesNotMatch"), "{version}: {log}");
        assert!(!log.contains(key_id), "{version}: the key id in\n{log}");
        assert!(!log.contains("not-the-secret"), "{version}");
    }
}

/// An emulator and a daemon that keeps no idle address, and the
/// vswitch's id.
fn no_idle_pool(tag: &str) -> (Sim, Daemon, String) {
    let sim = Sim::quick(&[]);
    let dir = tempdir(tag);
    let cfg = config(&sim, &dir, json!({"max_pool_size": 0}));
    let d = Daemon::start(&dir, &cfg);
    let vsw = first_vswitch(&sim.state());
    (sim, d, vsw)
}

#[test]
fn a_refilled_vswitch_serves_again_without_waiting_out_the_inhibit() {
    let (sim, d, vsw) = no_idle_pool("refill");
    sim.set_free(&vsw, 0);
    let r = d.ask("alloc dry/one");
    assert!(r[0].starts_with("ERR exhausted"), "{r:?}");
    sim.set_free(&vsw, 100);
    // The inhibit window is 10 minutes; a probe of the vswitch lifts it
    // within seconds once it has room.
    assert!(
        eventually(Duration::from_secs(30), || d.ask("alloc dry/one")[0]
            .starts_with("OK ip=")),
        "{}",
        d.log_text()
    );
    assert!(
        d.log_text().contains("no longer inhibited"),
        "{}",
        d.log_text()
    );
}

#[test]
fn the_last_addresses_of_a_small_vswitch_are_handed_out() {
    let (sim, d, vsw) = no_idle_pool("last4");
    // An ENI with room for many more, on a vswitch down to its last 4.
    let first = d.ok("alloc last/first");
    sim.set_free(&vsw, 4);
    // 6 at once: one call for 6 is refused (an assign is all or
    // nothing); the last 4 must still be handed out, and only the other
    // 2 refused as exhausted.
    let replies = at_once(6, |i| d.ask(&format!("alloc last/pod-{i}"))[0].clone());
    let served: BTreeSet<String> = replies
        .iter()
        .filter(|r| r.starts_with("OK ip="))
        .map(|r| field(r, "ip"))
        .collect();
    let exhausted = replies
        .iter()
        .filter(|r| r.starts_with("ERR exhausted"))
        .count();
    println!("6 allocations on a vswitch with 4 free: {replies:?}");
    assert_eq!(served.len(), 4, "every free address is used: {replies:?}");
    assert_eq!(exhausted, 2, "{replies:?}");
    assert!(!served.contains(&field(&first, "ip")));
    assert_eq!(sim.state()["vswitches"][0]["free"], 0);
    // Three come back: any free address lifts the inhibit (it waited for
    // max_ips_per_call, 10, before), within a probe period.
    sim.set_free(&vsw, 3);
    assert!(
        eventually(Duration::from_secs(30), || d.ask("alloc last/again")[0]
            .starts_with("OK ip=")),
        "{}",
        d.log_text()
    );
    d.audits_consistent_within(Duration::from_secs(20));
}

/// Issue 31's `t3_eni_reuse`: an ENI deleted behind eniipd's back on a
/// small vswitch while its owners still hold their addresses; the only
/// free addresses left are those (an ENI not eniipd's holds the rest), so
/// the new ENI eniipd creates gets them, its primary among them, every
/// run. None is handed to a new owner while an old owner holds it (the
/// vswitch is "exhausted" for eniipd); once the old owners release,
/// eniipd adopts them, keeps the new ENI's primary (a primary never goes
/// back) and gives the rest back, and from then on the vswitch is not
/// "exhausted" (eniipd knows it has free addresses: here no probe could
/// tell it, DescribeVSwitches fails).
#[test]
fn a_vswitch_eniipd_gave_addresses_back_to_is_not_exhausted() {
    eni_reuse(false);
}

/// The same in dual stack: the new ENI's primary is adopted with an IPv6
/// of that ENI as its pair, so it is handed out (before, that IPv6 went
/// back while the primary waited, and the primary stayed invalid).
#[test]
fn a_reused_primary_gets_an_ipv6_pair_in_dual_stack() {
    eni_reuse(true);
}

fn eni_reuse(dual: bool) {
    let small = if dual {
        "vsw-small=10.9.0.0/28,ipv6=2408:4005:3ff:5100::/64"
    } else {
        "vsw-small=10.9.0.0/28"
    };
    let sim = Sim::quick(&["--vswitch", small]);
    let dir = tempdir("t3-eni-reuse");
    let stack = if dual { "dual" } else { "ipv4" };
    let d = Daemon::start(
        &dir,
        // One idle address kept (a static pool: an adaptive one keeps
        // none here, there being no demand): with none, the new ENI, left
        // with only its idle primary once the rest went back, is freed at
        // the next pool check (as it should be), and the primary with it.
        &config(
            &sim,
            &dir,
            json!({"max_pool_size": 1, "adaptive_pool": false, "ip_stack": stack}),
        ),
    );
    sim.fault(r#"{"action":"DescribeVSwitches","code":"InternalError"}"#);
    let old: Vec<String> = (0..4).map(|i| d.ok(&format!("alloc old/{i}"))).collect();
    let held: BTreeSet<String> = old.iter().map(|r| field(r, "ip")).collect();
    let eni = field(&old[0], "eni");
    let client = crate::openapi_client::client(sim.openapi_options());
    let on = [
        ("RegionId", sim.region.as_str()),
        ("NetworkInterfaceId", eni.as_str()),
        ("InstanceId", sim.instance.as_str()),
    ];
    crate::openapi_client::call(&client, "DetachNetworkInterface", &on).unwrap();
    assert!(eventually(Duration::from_secs(10), || {
        crate::openapi_client::call(&client, "DeleteNetworkInterface", &on[..2]).is_ok()
    }));
    assert!(eventually(Duration::from_secs(20), || !d
        .ask("enis")
        .iter()
        .any(|l| l.starts_with(&eni))));
    // Everything else the vswitch has goes to an ENI not eniipd's (the
    // usable addresses of a /28 are .3 to .12), so the old owners'
    // addresses are all it has left.
    let vsw = first_vswitch(&sim.state());
    let sg = crate::openapi_client::call(
        &client,
        "DescribeSecurityGroups",
        &[("RegionId", &sim.region)],
    )
    .unwrap()["SecurityGroups"]["SecurityGroup"][0]["SecurityGroupId"]
        .as_str()
        .unwrap()
        .to_string();
    let live = common::sim_held_v4(&sim.state());
    let rest: Vec<String> = (3..=12)
        .map(|n| format!("10.9.0.{n}"))
        .filter(|a| !held.contains(a) && !live.contains(a))
        .collect();
    let mut create = vec![
        ("RegionId".to_string(), sim.region.clone()),
        ("VSwitchId".to_string(), vsw.clone()),
        ("SecurityGroupId".to_string(), sg),
        ("PrimaryIpAddress".to_string(), rest[0].clone()),
    ];
    for (i, a) in rest[1..].iter().enumerate() {
        create.push((format!("PrivateIpAddress.{}", i + 1), a.clone()));
    }
    let create: Vec<(&str, &str)> = create
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let foreign = crate::openapi_client::call(&client, "CreateNetworkInterface", &create).unwrap()
        ["NetworkInterfaceId"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(sim.state()["vswitches"][0]["free"], held.len() as u64);
    // A new owner: eniipd creates a new ENI, which gets the old owners'
    // addresses, and hands none of them out.
    let r = d.ask("alloc new/0");
    assert!(r[0].starts_with("ERR exhausted"), "{r:?}\n{}", d.log_text());
    let new = sim.managed();
    let [new] = new.as_slice() else {
        panic!("one ENI of eniipd's: {new:?}");
    };
    let primary = new["primary_ip"].as_str().unwrap().to_string();
    assert!(held.contains(&primary), "{primary} is not an old owner's");
    let on_new: BTreeSet<String> = new["private_ips"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    assert_eq!(on_new, held, "the new ENI has every old owner's address");
    for (i, r) in old.iter().enumerate() {
        let shown = d.ok(&format!("show old/{i}"));
        assert_eq!(field(&shown, "ip"), field(r, "ip"), "{shown}");
    }
    // A reconcile sees them on the new ENI while they are held.
    assert!(
        eventually(Duration::from_secs(30), || d
            .log_text()
            .contains("in the cloud but still held on")),
        "{}",
        d.log_text()
    );
    // The other ENI goes: the vswitch has free addresses again, but eniipd
    // cannot tell (no probe answers) until it gives some back itself.
    let gone = [
        ("RegionId", sim.region.as_str()),
        ("NetworkInterfaceId", foreign.as_str()),
    ];
    crate::openapi_client::call(&client, "DeleteNetworkInterface", &gone).unwrap();
    for i in 0..4 {
        d.ok(&format!("release old/{i}"));
    }
    // The old owners' addresses are adopted: the new ENI's primary stays,
    // idle, the other three go back.
    let free = || sim.state()["vswitches"][0]["free"].as_u64().unwrap();
    assert!(
        eventually(Duration::from_secs(30), || free()
            == (rest.len() + held.len() - 1) as u64
            && d.ok("status").contains(" idle=1 ")
            && d.log_text().contains("back to the cloud")),
        "{}",
        d.log_text()
    );
    let again: Vec<Vec<String>> = (0..2).map(|i| d.ask(&format!("alloc again/{i}"))).collect();
    assert_eq!(field(&again[0][0], "ip"), primary, "{again:?}");
    if dual {
        assert!(again[0][0].contains(" ipv6="), "{again:?}");
    }
    assert!(
        again[1][0].starts_with("OK ip="),
        "{again:?} while the vswitch has {} free\n{}",
        free(),
        d.log_text()
    );
    sim.clear_faults();
    d.audits_consistent_within(Duration::from_secs(20));
}
