//! Lost DELs are reclaimed by eniipd's sandbox reaper: a sandbox whose
//! network namespace was deleted behind the runtime's back, and one whose
//! namespace stayed mounted with no process left in it (what containerd
//! leaves of a sandbox it forgot), lose their address, host veth and
//! rules; a live pod beside them and an allocation made by hand keep
//! theirs. After a node restart (every sandbox gone, eniipd's state kept)
//! a pod that comes back under its name gets its address again
//! (`ip_stick_time`). Under Debian's containerd, a sandbox containerd
//! forgot across a crash while its netns stayed mounted is reaped and a
//! live one beside it kept. Needs root, `ip` and busybox (and containerd's
//! tools for that case); says SKIPPED loudly otherwise (and fails under
//! ENIIPD_CI=1).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::cnienv;

use crate::common::eventually;
use cnienv::{can_run, Ctr, World};
use serde_json::json;

/// A process kept running inside a namespace (a pod's pause, or the
/// node's processes the reaper enters to remove a host end).
struct Holder(Child);

impl Holder {
    fn in_ns(ns: &str) -> Holder {
        Holder(
            Command::new("ip")
                .args(["netns", "exec", ns, "sleep", "600"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The host end eniip-cni made for a container (ifname eth0).
fn host_end(c: &Ctr) -> String {
    eniipd::cni::datapath::host_veth_name(&c.id, "eth0")
}

fn has_link(w: &World, name: &str) -> bool {
    w.node_ip(&["-o", "link"])
        .lines()
        .any(|l| l.contains(&format!(": {name}@")) || l.contains(&format!(": {name}:")))
}

fn rules_of(w: &World, ip: &str) -> Vec<String> {
    w.node_ip(&["rule"])
        .lines()
        .filter(|l| l.contains(&format!("{ip} ")) || l.ends_with(ip))
        .map(str::to_string)
        .collect()
}

fn metric(w: &World, line_start: &str) -> Option<String> {
    w.daemon()
        .ask("metrics")
        .into_iter()
        .find(|l| l.starts_with(line_start))
}

#[test]
fn lost_dels_are_reaped_and_live_sandboxes_kept() {
    if !can_run("cni sandbox reaper", &["busybox", "sleep"]) {
        return;
    }
    let w = World::start("ecs.g7.large", json!({"sandbox_reap_interval": 1}));
    let _node_process = Holder::in_ns(&w.node.name);
    let conf = w.conf("1.0.0", json!({}));
    let live = Ctr::new(&w, 0);
    let _pause = Holder::in_ns(&live.ns.name);
    let mut deleted = Ctr::new(&w, 1);
    let forgotten = Ctr::new(&w, 2);
    let r_live = w.cni("ADD", Some(&live), &conf).expect_ok("ADD live");
    let r_deleted = w.cni("ADD", Some(&deleted), &conf).expect_ok("ADD deleted");
    let r_forgotten = w
        .cni("ADD", Some(&forgotten), &conf)
        .expect_ok("ADD forgotten");
    let hand = w.daemon().ask("alloc by-hand/one");
    assert!(hand[0].starts_with("OK ip="), "{hand:?}");
    // The namespace goes behind the runtime's back; the other stays
    // mounted with nobody in it.
    deleted.ns.delete();

    let gone = [r_deleted.ip(), r_forgotten.ip()];
    assert!(
        eventually(Duration::from_secs(30), || {
            let inuse = w.inuse();
            gone.iter().all(|ip| !inuse.contains_key(ip))
        }),
        "not reaped: {:?}\n{}",
        w.inuse(),
        w.diag()
    );
    for (c, ip) in [(&deleted, r_deleted.ip()), (&forgotten, r_forgotten.ip())] {
        assert!(
            !has_link(&w, &host_end(c)),
            "{} left\n{}",
            host_end(c),
            w.diag()
        );
        assert!(rules_of(&w, &ip).is_empty(), "{:?}", rules_of(&w, &ip));
    }
    assert_eq!(
        metric(&w, "eniipd_sandbox_reaped_total{reason=\"netns-gone\"}").as_deref(),
        Some("eniipd_sandbox_reaped_total{reason=\"netns-gone\"} 1")
    );
    assert_eq!(
        metric(&w, "eniipd_sandbox_reaped_total{reason=\"netns-empty\"}").as_deref(),
        Some("eniipd_sandbox_reaped_total{reason=\"netns-empty\"} 1")
    );

    // Several looks later the live pod and the allocation made by hand
    // still hold theirs, and the live pod still works.
    std::thread::sleep(Duration::from_secs(4));
    let inuse = w.inuse();
    assert!(inuse.contains_key(&r_live.ip()), "{inuse:?}");
    assert_eq!(
        inuse.values().filter(|o| *o == "by-hand/one").count(),
        1,
        "{inuse:?}"
    );
    assert!(has_link(&w, &host_end(&live)), "{}", w.diag());
    assert!(live.ping(cnienv::GATEWAY), "{}", w.diag());

    let mut with_prev = conf.clone();
    with_prev["prevResult"] = r_live.json.clone();
    w.cni("DEL", Some(&live), &with_prev).expect_ok("DEL live");
    w.daemon().ask("release by-hand/one");
    assert!(w.inuse().is_empty(), "{:?}", w.inuse());
}

/// A pod sandbox named as a kubelet names it.
fn pod(w: &World, n: usize, name: &str) -> Ctr {
    let mut c = Ctr::new(w, n);
    c.args = format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={name}");
    c
}

#[test]
fn after_a_node_restart_pods_that_come_back_keep_their_address_and_the_rest_are_reaped() {
    if !can_run(
        "cni sandbox reaper after a node restart",
        &["busybox", "sleep"],
    ) {
        return;
    }
    let mut w = World::start(
        "ecs.g7.large",
        json!({"sandbox_reap_interval": 1, "ip_stick_time": 600}),
    );
    let _node_process = Holder::in_ns(&w.node.name);
    let conf = w.conf("1.0.0", json!({}));
    let mut back = pod(&w, 0, "web-0");
    let mut lost = pod(&w, 1, "web-1");
    let ip_back = w.cni("ADD", Some(&back), &conf).expect_ok("ADD web-0").ip();
    let ip_lost = w.cni("ADD", Some(&lost), &conf).expect_ok("ADD web-1").ip();

    // The node goes down: eniipd dies with it, every sandbox is gone.
    w.stop_daemon();
    back.ns.delete();
    lost.ns.delete();
    for c in [&back, &lost] {
        let _ = cnienv::try_sh(&["ip", "-n", &w.node.name, "link", "del", &host_end(c)]);
    }
    w.start_daemon();
    assert!(
        eventually(Duration::from_secs(30), || w.inuse().is_empty()),
        "not reaped after the restart: {:?}",
        w.inuse()
    );
    // web-0 comes back in a new sandbox: its address, kept for it.
    let again = {
        let mut c = pod(&w, 2, "web-0");
        c.id = format!("{}-again", c.id);
        c
    };
    let r_again = w
        .cni("ADD", Some(&again), &conf)
        .expect_ok("ADD web-0 again");
    assert_eq!(r_again.ip(), ip_back);
    let _pause = Holder::in_ns(&again.ns.name);
    assert!(again.ping(cnienv::GATEWAY), "{}", w.diag());
    // web-1 did not: its address is held for it, not handed to anyone.
    let list = w.daemon().ask("list");
    assert!(
        list.iter()
            .any(|l| l.starts_with(&format!("{ip_lost} reserved"))),
        "{list:?}"
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        w.inuse().get(&ip_back).map(String::as_str),
        Some(format!("{}/default/web-0", w.network).as_str())
    );
    let mut with_prev = conf.clone();
    with_prev["prevResult"] = r_again.json.clone();
    w.cni("DEL", Some(&again), &with_prev)
        .expect_ok("DEL web-0");
}

/// Network namespaces containerd mounted and will never unmount (it forgot
/// them): unmounted and removed at the end, whatever happens.
struct Mounted(Vec<String>);

impl Drop for Mounted {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = Command::new("umount").arg(p).status();
            let _ = std::fs::remove_file(p);
        }
    }
}

fn kill9(pid: i32) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
}

#[test]
fn a_sandbox_containerd_forgot_across_its_restart_is_reaped_and_a_live_one_kept() {
    let tools = crate::cri::tools();
    let tools: Vec<&str> = tools.iter().map(String::as_str).collect();
    if !can_run("cni reaper under containerd", &tools) {
        return;
    }
    let w = World::start("ecs.g7.xlarge", json!({"sandbox_reap_interval": 1}));
    let _node_process = Holder::in_ns(&w.node.name);
    let mut c = crate::cri::Containerd::start_in_host_mounts(&w);
    let run = |c: &crate::cri::Containerd, name: &str| {
        let (id, _) = c
            .run_pod(name, "default")
            .unwrap_or_else(|e| panic!("RunPodSandbox {name}: {e}\n{}", c.log()));
        let st = c.status(&id);
        assert_eq!(st.state, "SANDBOX_READY", "{st:?}");
        (id, st)
    };
    let (live_id, live) = run(&c, "live-0");
    let (gone_id, gone) = run(&c, "gone-0");
    let _mounts = Mounted(vec![live.netns.clone(), gone.netns.clone()]);
    let inuse = w.inuse();
    assert_eq!(
        inuse.get(&gone.ip).map(String::as_str),
        Some("eniip/default/gone-0")
    );
    assert_eq!(
        inuse.get(&live.ip).map(String::as_str),
        Some("eniip/default/live-0")
    );

    // containerd crashes; the gone pod's processes are killed with it; a
    // containerd started afresh knows neither sandbox and sends no DEL.
    // The gone pod's netns stays mounted, with nobody in it.
    let gone_shim = c.shim_of(&gone_id);
    c.kill9();
    kill9(gone.pid as i32);
    if let Some(p) = gone_shim {
        kill9(p);
    }
    let again = crate::cri::Containerd::start_in_host_mounts(&w);
    assert!(again.list().is_empty(), "{:?}", again.list());
    assert!(std::path::Path::new(&gone.netns).exists(), "{}", gone.netns);

    assert!(
        eventually(Duration::from_secs(30), || !w
            .inuse()
            .contains_key(&gone.ip)),
        "not reaped: {:?}\n{}\n{}",
        w.inuse(),
        w.daemon().log_text(),
        w.diag()
    );
    // (Its ADD named the netns containerd mounted: the reaper looked.)
    let gone_end = eniipd::cni::datapath::host_veth_name(&gone_id, "eth0");
    assert!(!has_link(&w, &gone_end), "{gone_end} left\n{}", w.diag());
    assert!(
        rules_of(&w, &gone.ip).is_empty(),
        "{:?}",
        rules_of(&w, &gone.ip)
    );
    assert_eq!(
        metric(&w, "eniipd_sandbox_reaped_total{reason=\"netns-empty\"}").as_deref(),
        Some("eniipd_sandbox_reaped_total{reason=\"netns-empty\"} 1")
    );
    // The live pod, forgotten by containerd too but with its pause still
    // running, keeps its address and its path out, several looks later.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(
        w.inuse().get(&live.ip).map(String::as_str),
        Some("eniip/default/live-0"),
        "{:?}",
        w.inuse()
    );
    assert!(c.ping_from(live.pid, cnienv::GATEWAY), "{}", w.diag());

    // Its end: once its processes are gone it is reaped the same way.
    let live_shim = c.shim_of(&live_id);
    kill9(live.pid as i32);
    if let Some(p) = live_shim {
        kill9(p);
    }
    w.assert_none_in_use_within(Duration::from_secs(30));
}
