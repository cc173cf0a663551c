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
pub(crate) struct Holder(pub(crate) Child);

impl Holder {
    pub(crate) fn in_ns(ns: &str) -> Holder {
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
pub(crate) fn host_end(c: &Ctr) -> String {
    eniip_datapath::datapath::host_veth_name(&c.id, "eth0")
}

pub(crate) fn has_link(w: &World, name: &str) -> bool {
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

pub(crate) fn metric(w: &World, line_start: &str) -> Option<String> {
    w.daemon()
        .ask("metrics")
        .into_iter()
        .find(|l| l.starts_with(line_start))
}

/// Waits (5 s at most) for the metric line starting `line_start` to be
/// `want`: the reaper counts a reap once it has eniipd's answer, which
/// comes after the release is visible to `list`.
fn assert_metric_becomes(w: &World, line_start: &str, want: &str) {
    assert!(
        eventually(Duration::from_secs(5), || metric(w, line_start).as_deref()
            == Some(want)),
        "{:?}, not {want}",
        metric(w, line_start)
    );
}

/// The reaper's looks so far (`eniipd_sandbox_reaper_looks_total`).
fn looks(w: &World) -> u64 {
    metric(w, "eniipd_sandbox_reaper_looks_total ")
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
}

/// Returns once the reaper has made `n` more looks (within `limit`): what
/// is found alive after it was judged by them, not merely by a slow
/// reaper that had not looked yet.
fn after_looks(w: &World, n: u64, limit: Duration) {
    let from = looks(w);
    assert!(
        eventually(limit, || looks(w) >= from + n),
        "the reaper made {} of {n} looks within {limit:?}\n{}",
        looks(w) - from,
        w.daemon().log_text()
    );
}

#[test]
fn lost_dels_are_reaped_and_live_sandboxes_kept() {
    if !can_run("cni sandbox reaper", &["busybox", "sleep"]) {
        return;
    }
    let w = World::start(
        "ecs.g7.large",
        json!({"sandbox_reap_interval": 1, "sandbox_reap_grace": 0}),
    );
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
    assert_metric_becomes(
        &w,
        "eniipd_sandbox_reaped_total{reason=\"netns-gone\"}",
        "eniipd_sandbox_reaped_total{reason=\"netns-gone\"} 1",
    );
    assert_metric_becomes(
        &w,
        "eniipd_sandbox_reaped_total{reason=\"netns-empty\"}",
        "eniipd_sandbox_reaped_total{reason=\"netns-empty\"} 1",
    );

    // Several looks later the live pod and the allocation made by hand
    // still hold theirs, and the live pod still works.
    after_looks(&w, 4, Duration::from_secs(30));
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
        json!({"sandbox_reap_interval": 1, "sandbox_reap_grace": 0, "ip_stick_time": 600}),
    );
    let _node_process = Holder::in_ns(&w.node.name);
    let conf = w.conf("1.0.0", json!({}));
    let mut back = Ctr::pod(&w, 0, "web-0");
    let mut lost = Ctr::pod(&w, 1, "web-1");
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
        let mut c = Ctr::pod(&w, 2, "web-0");
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
    after_looks(&w, 3, Duration::from_secs(30));
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
    let w = World::start(
        "ecs.g7.xlarge",
        json!({"sandbox_reap_interval": 1, "sandbox_reap_grace": 0}),
    );
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
    let gone_end = eniip_datapath::datapath::host_veth_name(&gone_id, "eth0");
    assert!(!has_link(&w, &gone_end), "{gone_end} left\n{}", w.diag());
    assert!(
        rules_of(&w, &gone.ip).is_empty(),
        "{:?}",
        rules_of(&w, &gone.ip)
    );
    assert_metric_becomes(
        &w,
        "eniipd_sandbox_reaped_total{reason=\"netns-empty\"}",
        "eniipd_sandbox_reaped_total{reason=\"netns-empty\"} 1",
    );
    // The live pod, forgotten by containerd too but with its pause still
    // running, keeps its address and its path out, several looks later.
    after_looks(&w, 4, Duration::from_secs(30));
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

/// A thread of this process alone in a namespace (its process's leader
/// stays where it is): what a process whose main thread exited, or moved
/// elsewhere, leaves holding a sandbox. Leaves it on drop.
struct ThreadIn {
    stop: crossbeam_channel::Sender<()>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl ThreadIn {
    fn ns(path: &std::path::Path) -> ThreadIn {
        let ns = std::fs::File::open(path).unwrap();
        let (stop, stop_rx) = crossbeam_channel::bounded::<()>(1);
        let (entered, entered_rx) = crossbeam_channel::bounded(1);
        let handle = std::thread::Builder::new()
            .name("reap-test-holder".into())
            .spawn(move || {
                let r = nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET);
                let _ = entered.send(r);
                let _ = stop_rx.recv_timeout(Duration::from_secs(300));
            })
            .unwrap();
        entered_rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap()
            .unwrap();
        ThreadIn {
            stop,
            handle: Some(handle),
        }
    }
}

impl Drop for ThreadIn {
    fn drop(&mut self) {
        let _ = self.stop.send(());
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Unmounts a namespace file (its process keeps the namespace).
fn umount(path: &std::path::Path) {
    cnienv::sh(&["umount", &path.display().to_string()]);
}

/// Issue 31 items 2 and 3: a sandbox is reaped only when every signal
/// agrees, for `sandbox_reap_grace`. A sandbox with no infra process whose
/// only process exits and comes back two looks later, one whose netns
/// mount is gone for 8 s while its process lives, and one held by a
/// thread that is not its process's leader all keep their address and
/// host end; a sandbox that is truly gone is reaped once its grace is
/// over, within grace + interval.
#[test]
fn a_sandbox_is_reaped_only_when_every_signal_agrees_for_its_grace() {
    if !can_run("cni reaper's signals", &["busybox", "sleep", "mount"]) {
        return;
    }
    let interval = Duration::from_secs(1);
    let grace = Duration::from_secs(6);
    let w = World::start(
        "ecs.g7.large",
        json!({"sandbox_reap_interval": 1, "sandbox_reap_grace": 6}),
    );
    let _node_process = Holder::in_ns(&w.node.name);
    let conf = w.conf("1.0.0", json!({}));
    let infraless = Ctr::new(&w, 0);
    let unmounted = Ctr::new(&w, 1);
    let threaded = Ctr::new(&w, 2);
    let mut gone = Ctr::new(&w, 3);
    let first = Holder::in_ns(&infraless.ns.name);
    let in_unmounted = Holder::in_ns(&unmounted.ns.name);
    let _thread = ThreadIn::ns(&threaded.ns.path());
    let gone_holder = Holder::in_ns(&gone.ns.name);
    let kept: Vec<(&Ctr, String)> = [&infraless, &unmounted, &threaded]
        .into_iter()
        .map(|c| (c, w.cni("ADD", Some(c), &conf).expect_ok("ADD").ip()))
        .collect();
    let gone_ip = w.cni("ADD", Some(&gone), &conf).expect_ok("ADD").ip();
    // Looks that find every one alive, past the age an ADD is spared.
    std::thread::sleep(2 * interval);

    // The infra-less sandbox's only process exits; a mount vanishes; the
    // gone sandbox goes for good.
    drop(first);
    let mount = unmounted.ns.path();
    umount(&mount);
    let unmounted_at = std::time::Instant::now();
    drop(gone_holder);
    gone.ns.delete();
    let gone_at = std::time::Instant::now();

    // Its container restarts two looks later, in the same namespace.
    std::thread::sleep(interval * 5 / 2);
    let _second = Holder::in_ns(&infraless.ns.name);

    assert!(
        eventually(grace + interval + Duration::from_secs(5), || !w
            .inuse()
            .contains_key(&gone_ip)),
        "not reaped: {:?}\n{}",
        w.inuse(),
        w.daemon().log_text()
    );
    let took = gone_at.elapsed();
    eprintln!("a sandbox truly gone was reaped {took:?} after it went (grace {grace:?}, interval {interval:?})");
    assert!(took >= grace, "reaped before its grace: {took:?}");
    assert!(!has_link(&w, &host_end(&gone)), "{}", w.diag());

    // The mount comes back after 8 s.
    std::thread::sleep(Duration::from_secs(8).saturating_sub(unmounted_at.elapsed()));
    cnienv::sh(&[
        "mount",
        "--bind",
        &format!("/proc/{}/ns/net", in_unmounted.0.id()),
        &mount.display().to_string(),
    ]);
    // More than a grace of looks later, every live one keeps its own.
    let n = ((grace + 2 * interval).as_secs() / interval.as_secs()).max(1);
    after_looks(&w, n, grace + 2 * interval + Duration::from_secs(30));
    let inuse = w.inuse();
    for (c, ip) in &kept {
        assert!(inuse.contains_key(ip), "{} lost {ip}: {inuse:?}", c.id);
        assert!(has_link(&w, &host_end(c)), "{} lost its host end", c.id);
    }
    assert!(kept[0].0.ping(cnienv::GATEWAY), "{}", w.diag());
    assert_eq!(
        metric(&w, "eniipd_sandbox_reaped_total{reason=").as_deref(),
        Some("eniipd_sandbox_reaped_total{reason=\"netns-gone\"} 1")
    );
    assert_eq!(
        metric(&w, "eniipd_sandbox_reap_pending").as_deref(),
        Some("eniipd_sandbox_reap_pending 0")
    );
}

/// The pid of the process a wrapper (`unshare --fork`) started.
fn child_of(wrapper: i32) -> Option<i32> {
    std::fs::read_to_string(format!("/proc/{wrapper}/task/{wrapper}/children"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Kills a daemon started under `unshare --fork --kill-child` and waits
/// for eniipd itself to end (it then holds its state directory no more).
fn stop_wrapped(w: &mut World) {
    let eniipd = child_of(w.daemon().pid());
    w.stop_daemon();
    let Some(pid) = eniipd else { return };
    let ended = eventually(Duration::from_secs(10), || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        })
    });
    assert!(ended, "eniipd (pid {pid}) did not end");
}

/// Issue 30 item 5: eniipd in a PID namespace of its own (a container
/// without hostPID) sees only its own processes. It knows it, says so once
/// (log and metric) and takes no sandbox for gone: for 30 s at a reap
/// interval of 2 s, six live pods keep their address and host end, and so
/// does a sandbox that is truly gone (eniipd does less, never guesses).
/// With the host's PID namespace (a mount namespace and a proc of its
/// own, as a hostPID container has) it reaps as on a host: the gone one
/// goes, the live ones stay.
#[test]
fn a_reaper_that_cannot_see_every_process_takes_nothing_and_says_so_once() {
    if !can_run(
        "cni reaper in a PID namespace of its own",
        &["busybox", "sleep", "unshare", "mount"],
    ) {
        return;
    }
    let mut w = World::start(
        "ecs.g7.xlarge",
        json!({"sandbox_reap_interval": 2, "sandbox_reap_grace": 0}),
    );
    let _node_process = Holder::in_ns(&w.node.name);
    // As a pod without hostPID: its own PID namespace and /proc; the pods'
    // netns mounts reach it (mountPropagation: HostToContainer).
    w.stop_daemon();
    w.daemon = Some(crate::common::Daemon::start_wrapped(
        &[
            "unshare",
            "--pid",
            "--fork",
            "--kill-child",
            "--mount-proc",
            "--propagation",
            "slave",
        ],
        &w.dir,
        &w.cfg,
    ));
    let conf = w.conf("1.0.0", json!({}));
    let pods: Vec<Ctr> = (0..6).map(|i| Ctr::new(&w, i)).collect();
    let _pauses: Vec<Holder> = pods.iter().map(|c| Holder::in_ns(&c.ns.name)).collect();
    let ips: Vec<String> = pods
        .iter()
        .map(|c| w.cni("ADD", Some(c), &conf).expect_ok("ADD").ip())
        .collect();
    let mut gone = Ctr::new(&w, 6);
    let gone_ip = w.cni("ADD", Some(&gone), &conf).expect_ok("ADD gone").ip();
    gone.ns.delete();

    // Looks enough to have reaped the gone one, were the reaper not blind.
    after_looks(&w, 15, Duration::from_secs(60));
    let inuse = w.inuse();
    for (c, ip) in pods.iter().zip(&ips) {
        assert!(inuse.contains_key(ip), "{} lost {ip}: {inuse:?}", c.id);
        assert!(has_link(&w, &host_end(c)), "{} lost its host end", c.id);
    }
    assert!(pods[0].ping(cnienv::GATEWAY), "{}", w.diag());
    assert!(inuse.contains_key(&gone_ip), "{inuse:?}");
    let log = w.daemon().log_text();
    assert_eq!(
        log.matches("is not in the host's PID namespace").count(),
        1,
        "{log}"
    );
    assert_eq!(
        metric(&w, "eniipd_sandbox_reaper_blind").as_deref(),
        Some("eniipd_sandbox_reaper_blind 1")
    );

    // hostPID: the host's PID namespace, a mount namespace of its own with
    // a proc of that PID namespace mounted, as a container runtime does.
    stop_wrapped(&mut w);
    w.daemon = Some(crate::common::Daemon::start_wrapped(
        &[
            "unshare",
            "--mount",
            "--propagation",
            "slave",
            "--fork",
            "--kill-child",
            "sh",
            "-c",
            "mount -t proc proc /proc && exec \"$@\"",
            "sh",
        ],
        &w.dir,
        &w.cfg,
    ));
    assert!(
        eventually(Duration::from_secs(20), || !w
            .inuse()
            .contains_key(&gone_ip)),
        "not reaped with the host's PID namespace: {:?}\n{}",
        w.inuse(),
        w.daemon().log_text()
    );
    std::thread::sleep(Duration::from_secs(4));
    let inuse = w.inuse();
    for ip in &ips {
        assert!(inuse.contains_key(ip), "{ip}: {inuse:?}");
    }
    assert_eq!(
        metric(&w, "eniipd_sandbox_reaper_blind").as_deref(),
        Some("eniipd_sandbox_reaper_blind 0")
    );
    stop_wrapped(&mut w);
}
