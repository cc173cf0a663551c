//! The kubelet's path (see `tests/it/kube.rs`): the shipped DaemonSet's
//! pod, from the image `.ci/image` built, under Debian's containerd over
//! CRI. Its init container installs eniip-cni into the node's CNI bin
//! dir, eniipd comes up ready (the manifest's probes, run with ExecSync)
//! and writes the conflist; 10 pods then get their addresses from it and
//! ping the vswitch gateway through their own ENI. In the shipped pod the
//! sandbox reaper works as on a host: a pod whose sandbox died is reaped,
//! the live ones keep their addresses. Rollouts (the eniipd pod stopped
//! with SIGTERM or killed with SIGKILL, a new one from the image a moment
//! later) during a storm of pods fail no RunPodSandbox and no
//! StopPodSandbox, and leak or share no address. Needs root, containerd's
//! tools, socat, the CRI venv with PyYAML and the image; says SKIPPED
//! loudly otherwise (and fails under ENIIPD_CI=1).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::cni_containerd::check_pod;
use crate::cnienv;
use crate::common::eventually;
use crate::kube::{self, Node};

/// ecs.g7.xlarge: an ENI holds 15 addresses.
const XLARGE: &str = "ecs.g7.xlarge";

/// Up to the conflist: the pod comes up ready and installs the plugin;
/// eniipd writes the conflist once its pool is warm.
fn ready_node(eni_json: serde_json::Value) -> (Node, f64) {
    let n = Node::start(XLARGE, eni_json);
    let ready = n.start_eniipd();
    let plugin = n.cni_bin.join("eniip-cni");
    let out = std::process::Command::new(&plugin)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", plugin.display()));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("eniip-cni {}", env!("CARGO_PKG_VERSION"))
    );
    assert!(
        eventually(Duration::from_secs(60), || n.conflist().exists()),
        "eniipd wrote no conflist into the node's conf dir\n{}",
        n.eniipd_log()
    );
    let conflist: serde_json::Value =
        serde_json::from_slice(&std::fs::read(n.conflist()).unwrap()).unwrap();
    assert_eq!(
        conflist["plugins"][0]["socket"], "/run/eniipd/eniipd.sock",
        "{conflist}"
    );
    (n, ready)
}

#[test]
fn the_shipped_daemonset_comes_up_and_serves_pods_through_containerd() {
    if !kube::can("kubelet path") {
        return;
    }
    let (n, ready) = ready_node(json!({}));
    let mut pods = Vec::new();
    let mut slowest: f64 = 0.0;
    for i in 0..10 {
        let name = format!("web-{i}");
        let (id, secs) =
            n.c.run_pod(&name, "default")
                .unwrap_or_else(|e| panic!("RunPodSandbox {name}: {e}\n{}", n.c.log()));
        slowest = slowest.max(secs);
        pods.push((id.clone(), check_pod(&n.w, &n.c, &id, &name, "default")));
    }
    let ips: BTreeSet<&str> = pods.iter().map(|(_, p)| p.ip.as_str()).collect();
    assert_eq!(ips.len(), 10, "{pods:?}");
    for (id, _) in &pods {
        n.c.stop(id)
            .unwrap_or_else(|e| panic!("StopPodSandbox {id}: {e}"));
        n.c.remove(id)
            .unwrap_or_else(|e| panic!("RemovePodSandbox {id}: {e}"));
    }
    n.w.assert_none_in_use_within(Duration::from_secs(5));
    n.w.assert_no_host_end();
    println!(
        "kubelet path: the eniipd pod ready {ready:.1} s after RunPodSandbox; \
         10 pods, slowest RunPodSandbox {slowest:.2} s"
    );
}

#[test]
fn the_reaper_in_the_shipped_pod_reaps_a_dead_sandbox_and_keeps_live_ones() {
    if !kube::can("kubelet path, reaper") {
        return;
    }
    // Only the pace is the test's: a look every 2 s instead of 60 s, and
    // no grace beyond the two looks in a row (600 s by default).
    let (n, _) = ready_node(json!({"sandbox_reap_interval": 2, "sandbox_reap_grace": 0}));
    let mut pods = Vec::new();
    for i in 0..4 {
        let name = format!("app-{i}");
        let (id, _) =
            n.c.run_pod(&name, "default")
                .unwrap_or_else(|e| panic!("RunPodSandbox {name}: {e}"));
        pods.push((
            id.clone(),
            name.clone(),
            check_pod(&n.w, &n.c, &id, &name, "default"),
        ));
    }
    // A sandbox dies and nobody tells the runtime's CNI (its netns stays
    // mounted, empty): only the reaper can give its address back. It must
    // be taken for empty, which only a reaper that sees every process of
    // the node may judge.
    let die_and_be_reaped = |k: usize, count: u64| {
        let (_, name, p) = &pods[k];
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(p.pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        assert!(
            eventually(Duration::from_secs(60), || !n.w.inuse().contains_key(&p.ip)),
            "{name}'s address {} was not reaped: {:?}\n{}",
            p.ip,
            n.w.inuse(),
            n.eniipd_log()
        );
        assert!(
            std::path::Path::new(&p.netns).exists(),
            "containerd removed {name}'s netns {}",
            p.netns
        );
        // The count follows the release a moment later.
        let want = format!("eniipd_sandbox_reaped_total{{reason=\"netns-empty\"}} {count}");
        assert!(
            eventually(Duration::from_secs(10), || n
                .w
                .ask("metrics")
                .contains(&want)),
            "no {want}\n{}",
            n.eniipd_log()
        );
    };
    // With the node's PID namespace (hostPID) it sees every process.
    let blind =
        n.w.ask("metrics")
            .into_iter()
            .find(|l| l.starts_with("eniipd_sandbox_reaper_blind "));
    assert_eq!(
        blind.as_deref(),
        Some("eniipd_sandbox_reaper_blind 0"),
        "{}",
        n.eniipd_log()
    );
    die_and_be_reaped(0, 1);
    // A second one dies after the first was reaped: when it is reaped
    // too, the reaper has looked at least twice more at the live pods.
    die_and_be_reaped(3, 2);
    for (id, name, p) in &pods[1..3] {
        let again = check_pod(&n.w, &n.c, id, name, "default");
        assert_eq!(again.ip, p.ip);
    }
    // The runtime's own late DELs for the reaped sandboxes still succeed.
    for k in [0, 3] {
        n.c.stop(&pods[k].0)
            .unwrap_or_else(|e| panic!("StopPodSandbox of the reaped {}: {e}", pods[k].1));
    }
}

/// What a storm saw.
#[derive(Debug, Default)]
struct Storm {
    run_failed: Vec<String>,
    stop_failed: Vec<String>,
    /// An address RunPodSandbox gave a pod while another live pod had it.
    shared: Vec<String>,
    /// The longest RunPodSandbox (its ADD waited for eniipd across a
    /// rollout).
    longest_run: f64,
    runs: usize,
}

/// One pod of the storm: created, its address noted among the live
/// ones, stopped and removed.
fn storm_pod(n: &Node, name: &str, storm: &Mutex<Storm>, live: &Mutex<BTreeMap<String, String>>) {
    let (id, secs) = match n.c.run_pod(name, "default") {
        Ok(r) => r,
        Err(e) => {
            storm
                .lock()
                .unwrap()
                .run_failed
                .push(format!("{name}: {e}"));
            return;
        }
    };
    let ip = n.c.status(&id).ip;
    {
        let mut st = storm.lock().unwrap();
        st.runs += 1;
        st.longest_run = st.longest_run.max(secs);
        if let Some(other) = live.lock().unwrap().insert(ip.clone(), name.to_string()) {
            st.shared.push(format!("{ip}: {other} and {name}"));
        }
    }
    let stopped = n.c.stop(&id);
    live.lock().unwrap().remove(&ip);
    if let Err(e) = stopped {
        storm
            .lock()
            .unwrap()
            .stop_failed
            .push(format!("{name}: {e}"));
    }
    let _ = n.c.remove(&id);
}

#[test]
fn rollouts_during_a_pod_storm_fail_no_pod_and_leak_no_address() {
    if !kube::can("kubelet path, rollouts") {
        return;
    }
    // ENIIPD_ROLLOUT_PODS: a longer storm by hand (BENCHMARKS.md).
    let total: usize = std::env::var("ENIIPD_ROLLOUT_PODS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    let rollouts = 5;
    // A flood: side by side with another it would measure the machine.
    let _turn = crate::common::one_flood_at_a_time();
    let (n, _) = ready_node(json!({}));
    let storm = Mutex::new(Storm::default());
    // ip -> the pod holding it, from RunPodSandbox to its StopPodSandbox.
    let live = Mutex::new(BTreeMap::new());
    let created = AtomicUsize::new(0);
    let mut away = Vec::new();
    std::thread::scope(|s| {
        for wk in 0..4 {
            let (n, storm, live, created) = (&n, &storm, &live, &created);
            s.spawn(move || loop {
                let i = created.fetch_add(1, Ordering::SeqCst);
                if i >= total {
                    break;
                }
                storm_pod(n, &format!("storm-{wk}-{i}"), storm, live);
            });
        }
        // Spread over the storm, the eniipd pod goes (SIGTERM and SIGKILL
        // alternately) and a new one comes from the image a moment later,
        // as the DaemonSet controller and kubelet do.
        for r in 0..rollouts {
            let at = (r + 1) * total / (rollouts + 1);
            let reached = eventually(Duration::from_secs(600), || {
                created.load(Ordering::SeqCst) >= at
            });
            assert!(reached, "the storm stalled before pod {at}");
            let gone = Instant::now();
            n.stop_eniipd(r % 2 == 1);
            // The controller's and kubelet's reaction time, not a wait for
            // anything.
            std::thread::sleep(Duration::from_secs(2));
            n.start_eniipd();
            away.push(gone.elapsed().as_secs_f64());
        }
    });
    let st = storm.into_inner().unwrap();
    // Every release applied: nothing is left in use.
    eventually(Duration::from_secs(30), || n.w.inuse().is_empty());
    let leaked = n.w.inuse();
    println!(
        "rollouts: {rollouts} (SIGTERM and SIGKILL alternately) during {} pods: \
         {} RunPodSandbox failed, {} StopPodSandbox failed, {} addresses shared, \
         {} leaked; eniipd away {:?} s; longest RunPodSandbox {:.1} s",
        st.runs + st.run_failed.len(),
        st.run_failed.len(),
        st.stop_failed.len(),
        st.shared.len(),
        leaked.len(),
        away.iter()
            .map(|a| (a * 10.0).round() / 10.0)
            .collect::<Vec<_>>(),
        st.longest_run
    );
    assert!(
        st.run_failed.is_empty(),
        "RunPodSandbox failed: {:?}",
        st.run_failed
    );
    assert!(
        st.stop_failed.is_empty(),
        "StopPodSandbox failed: {:?}",
        st.stop_failed
    );
    assert!(st.shared.is_empty(), "addresses shared: {:?}", st.shared);
    assert!(leaked.is_empty(), "addresses leaked: {leaked:?}");
    n.w.assert_no_host_end();
}

#[test]
fn the_image_loads_into_podman_runs_every_binary_and_has_no_shell() {
    if !kube::can("image under podman") || !cnienv::can_run("image under podman", &["podman"]) {
        return;
    }
    let dir = crate::common::tempdir("podman-image");
    let store = |more: &[&str]| -> std::process::Output {
        std::process::Command::new("podman")
            .arg("--root")
            .arg(dir.join("root"))
            .arg("--runroot")
            .arg(dir.join("run"))
            .args(["--storage-driver", "vfs"])
            .args(more)
            .output()
            .unwrap()
    };
    let archive = kube::image_archive();
    let loaded = store(&["load", "-i", &cnienv::s(&archive)]);
    assert!(loaded.status.success(), "podman load: {loaded:?}");
    assert!(
        String::from_utf8_lossy(&loaded.stdout)
            .contains(concat!("localhost/eniipd:", env!("CARGO_PKG_VERSION"))),
        "{loaded:?}"
    );
    // As README says for a container in a container: limits root cannot
    // raise are passed.
    let run = |entry: &str, arg: &str| {
        store(&[
            "run",
            "--rm",
            "--network",
            "none",
            "--ulimit",
            "nofile=16384:16384",
            "--ulimit",
            "nproc=16384:16384",
            "--entrypoint",
            entry,
            concat!("localhost/eniipd:", env!("CARGO_PKG_VERSION")),
            arg,
        ])
    };
    let version = env!("CARGO_PKG_VERSION");
    for (bin, name) in [
        ("/usr/bin/eniipd", "eniipd"),
        ("/usr/bin/eniipctl", "eniipctl"),
        ("/usr/bin/eniip-sim", "eniip-sim"),
        ("/usr/lib/cni/eniip-cni", "eniip-cni"),
    ] {
        let out = run(bin, "--version");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!("{name} {version}"),
            "{bin}: {out:?}"
        );
    }
    let sh = run("/bin/sh", "-c");
    assert!(!sh.status.success(), "the image has a shell: {sh:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
