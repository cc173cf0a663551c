//! The sandbox reaper acts only on complete evidence (issue 36): a
//! container added again with its id in a new namespace, while a look
//! that found its old sandbox gone is about to act, keeps its address and
//! its host end (the reaper asks eniipd, atomically, whether the
//! allocation is still that sandbox's before it removes anything); an
//! allocation recorded before a reboot is reaped although its namespace
//! identity (device, inode) names a live namespace of this boot (the
//! identity carries the boot id); and a live pod whose `/proc/PID` is
//! masked by an empty bind mount is kept, the reaper saying it cannot see
//! (`eniipd_sandbox_reaper_blind 1`). Needs root, `ip`, `sleep`,
//! `unshare`, `nsenter` and `mount`; says SKIPPED loudly otherwise.

use std::time::Duration;

use serde_json::json;

use crate::cni_reap::{has_link, host_end, metric, Holder};
use crate::cnienv::{can_run, sh, try_sh, Ctr, World};
use crate::common::{eventually, tempdir};

const REAP: fn() -> serde_json::Value =
    || json!({"sandbox_reap_interval": 1, "sandbox_reap_grace": 0});

#[test]
fn a_container_added_again_with_its_id_in_a_new_namespace_keeps_its_host_end() {
    if !can_run("reaper: a container added again with its id", &["sleep"]) {
        return;
    }
    let mut w = World::start_without_daemon("ecs.g7.large", REAP());
    // The window between a look and what it does, held open.
    let hold = tempdir("reaper-hold");
    let hold_arg = hold.display().to_string();
    w.start_daemon_as(&[], &[("ENIIPD_TEST_REAPER_HOLD", &hold_arg)]);
    let _node_process = Holder::in_ns(&w.node.name);
    let conf = w.conf("1.0.0", json!({}));
    let mut first = Ctr::pod(&w, 0, "web-0");
    let ip = w.cni("ADD", Some(&first), &conf).expect_ok("ADD").ip();
    // Its sandbox goes behind the runtime's back (its host end with it).
    first.ns.delete();
    assert!(
        eventually(Duration::from_secs(20), || hold.join("held").exists()),
        "the reaper never found the sandbox gone\n{}",
        w.daemon().log_text()
    );
    // The runtime adds the same container again, in a new namespace
    // (podman restarting a container keeps its id).
    let mut again = Ctr::pod(&w, 1, "web-0");
    again.id = first.id.clone();
    let _pause = Holder::in_ns(&again.ns.name);
    let r = w.cni("ADD", Some(&again), &conf).expect_ok("ADD again");
    assert_eq!(host_end(&again), host_end(&first), "the same host end name");
    assert!(has_link(&w, &host_end(&again)), "{}", w.diag());
    std::fs::write(hold.join("go"), b"").unwrap();
    assert!(
        eventually(Duration::from_secs(10), || !hold.join("held").exists()),
        "the reaper did not go on"
    );
    // Several looks later the live container keeps its address and host end.
    std::thread::sleep(Duration::from_secs(3));
    let inuse = w.inuse();
    assert!(
        inuse
            .get(&r.ip())
            .is_some_and(|o| o.ends_with("/default/web-0")),
        "was {ip}: {inuse:?}\n{}",
        w.daemon().log_text()
    );
    assert!(
        has_link(&w, &host_end(&again)),
        "the live container lost its host end\n{}\n{}",
        w.diag(),
        w.daemon().log_text()
    );
    let mut with_prev = conf.clone();
    with_prev["prevResult"] = r.json.clone();
    w.cni("DEL", Some(&again), &with_prev).expect_ok("DEL");
    let _ = std::fs::remove_dir_all(&hold);
}

/// Boot ids of two boots of the node, as `/proc/sys/kernel/random/boot_id`
/// gives them (debug builds read `ENIIPD_TEST_BOOT_ID` instead).
const BOOT_A: &str = "5b3c8a4e-2f0d-4c61-9a57-0e9d2c1b7f01";
const BOOT_B: &str = "d1f0e2c3-7b6a-4e59-8d4c-3b2a1f0e9d02";

#[test]
fn an_allocation_recorded_before_a_reboot_is_reaped_though_its_namespace_identity_is_reused() {
    if !can_run("reaper: an identity from before a reboot", &["sleep"]) {
        return;
    }
    let mut w = World::start_without_daemon("ecs.g7.large", REAP());
    w.start_daemon_as(&[], &[("ENIIPD_TEST_BOOT_ID", BOOT_A)]);
    let _node_process = Holder::in_ns(&w.node.name);
    let conf = w.conf("1.0.0", json!({}));
    // After a reboot nsfs inodes are handed out again: the namespace
    // recorded in the last boot has the (device, inode) of a live
    // namespace of this one. Here: the same namespace, alive.
    let c = Ctr::pod(&w, 0, "old-0");
    let _pause = Holder::in_ns(&c.ns.name);
    let ip = w.cni("ADD", Some(&c), &conf).expect_ok("ADD").ip();

    // eniipd restarted in the same boot: the live pod is kept.
    w.stop_daemon();
    w.start_daemon_as(&[], &[("ENIIPD_TEST_BOOT_ID", BOOT_A)]);
    std::thread::sleep(Duration::from_secs(3));
    assert!(w.inuse().contains_key(&ip), "{:?}", w.inuse());

    // The node rebooted: nothing recorded in the last boot is alive.
    w.stop_daemon();
    w.start_daemon_as(&[], &[("ENIIPD_TEST_BOOT_ID", BOOT_B)]);
    assert!(
        eventually(Duration::from_secs(20), || !w.inuse().contains_key(&ip)),
        "an allocation of the last boot was kept: {:?}\n{}",
        w.inuse(),
        w.daemon().log_text()
    );
    // Counted once the reaper has its answer.
    let counted = "eniipd_sandbox_reaped_total{reason=\"netns-gone\"} 1";
    assert!(
        eventually(Duration::from_secs(5), || metric(
            &w,
            "eniipd_sandbox_reaped_total{reason=\"netns-gone\"}"
        )
        .as_deref()
            == Some(counted)),
        "{:?}",
        metric(&w, "eniipd_sandbox_reaped_total")
    );
}

/// A mount in eniipd's mount namespace, undone on drop.
struct MountIn {
    pid: i32,
    target: String,
}

impl Drop for MountIn {
    fn drop(&mut self) {
        let _ = try_sh(&[
            "nsenter",
            "-t",
            &self.pid.to_string(),
            "-m",
            "umount",
            &self.target,
        ]);
    }
}

#[test]
fn a_live_pod_whose_proc_entry_is_masked_is_kept_and_the_reaper_says_it_cannot_see() {
    if !can_run(
        "reaper: a masked /proc/PID",
        &["sleep", "unshare", "nsenter", "mount", "umount"],
    ) {
        return;
    }
    let mut w = World::start_without_daemon("ecs.g7.large", REAP());
    // A mount namespace of eniipd's own (the pods' netns mounts reach it),
    // where the test masks a process.
    w.start_daemon_as(&["unshare", "--mount", "--propagation", "slave"], &[]);
    let _node_process = Holder::in_ns(&w.node.name);
    let conf = w.conf("1.0.0", json!({}));
    let c = Ctr::new(&w, 0);
    let pause = Holder::in_ns(&c.ns.name);
    let ip = w.cni("ADD", Some(&c), &conf).expect_ok("ADD").ip();
    let pids = sh(&["ip", "netns", "pids", &c.ns.name]);
    let pid: u32 = pids
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no process in {}: {pids:?}", c.ns.name));
    assert_eq!(pid, pause.0.id(), "{pids}");
    // An empty directory over the pod's only process's /proc entry, seen
    // by eniipd only.
    let empty = tempdir("empty-proc");
    let target = format!("/proc/{pid}");
    let eniipd = w.daemon().pid();
    sh(&[
        "nsenter",
        "-t",
        &eniipd.to_string(),
        "-m",
        "mount",
        "--bind",
        &empty.display().to_string(),
        &target,
    ]);
    let mask = MountIn {
        pid: eniipd,
        target,
    };
    assert!(
        eventually(Duration::from_secs(10), || metric(
            &w,
            "eniipd_sandbox_reaper_blind"
        )
        .as_deref()
            == Some("eniipd_sandbox_reaper_blind 1")),
        "the reaper did not say it cannot see: {:?}\n{}",
        metric(&w, "eniipd_sandbox_reaper_blind"),
        w.daemon().log_text()
    );
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        w.inuse().contains_key(&ip),
        "a live pod was reaped: {:?}\n{}",
        w.inuse(),
        w.daemon().log_text()
    );
    assert!(has_link(&w, &host_end(&c)), "{}", w.diag());
    // Unmasked, it sees again and the pod stays.
    drop(mask);
    assert!(
        eventually(Duration::from_secs(10), || metric(
            &w,
            "eniipd_sandbox_reaper_blind"
        )
        .as_deref()
            == Some("eniipd_sandbox_reaper_blind 0")),
        "{}",
        w.daemon().log_text()
    );
    assert!(w.inuse().contains_key(&ip), "{:?}", w.inuse());
    let _ = std::fs::remove_dir(&empty);
}
