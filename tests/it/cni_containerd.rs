//! eniip-cni under containerd's CRI, as a kubelet drives it, on the
//! shipped `cni/eniip.conflist` unchanged (see `tests/it/cri.rs`): 10 pods
//! one after another and 10 at once each get their own address, owned by
//! `eniip/<namespace>/<pod>`, and ping the vswitch gateway through their
//! own ENI; Stop+Remove releases them all and leaves no netns, veth, rule
//! or address. A stop while eniipd is away succeeds: the pod's node side
//! goes, and its release waits for eniipd, which applies it before it
//! serves. Pods ask through their annotations: one annotated with a
//! vswitch gets its address on an ENI of that vswitch, one with a vswitch
//! the node does not have fails naming it, and a pod re-created with the
//! same name after its stick time's release gets its address back. Needs
//! root, containerd, runc, busybox, Debian's plugins and the CRI client's
//! venv; says SKIPPED loudly otherwise (and fails under ENIIPD_CI=1).

use crate::cnienv;
use crate::cri::{self, Containerd};

use std::collections::BTreeSet;
use std::time::Duration;

use cnienv::{can_run, World, GATEWAY};
use serde_json::json;

/// ecs.g7.xlarge: an ENI holds 15 addresses, so 10 pods at once fit with
/// room and spread over ENIs as eniipd decides.
const XLARGE: &str = "ecs.g7.xlarge";

fn can() -> bool {
    let tools = cri::tools();
    let tools: Vec<&str> = tools.iter().map(String::as_str).collect();
    can_run("cni containerd CRI", &tools)
}

/// Checks a running pod: READY, an address eniipd gives its owner, the
/// gateway reachable from inside.
pub(crate) fn check_pod(
    w: &World,
    c: &Containerd,
    id: &str,
    name: &str,
    ns: &str,
) -> cri::PodStatus {
    let st = c.status(id);
    assert_eq!(st.state, "SANDBOX_READY", "{name}: {st:?}");
    assert!(!st.ip.is_empty(), "{name}: no address: {st:?}");
    assert_eq!(
        w.inuse().get(&st.ip),
        Some(&format!("eniip/{ns}/{name}")),
        "{name}: {:?}",
        w.inuse()
    );
    assert!(
        c.ping_from(st.pid, GATEWAY),
        "{name} ({}) cannot ping {GATEWAY}\n{}",
        st.ip,
        w.diag()
    );
    st
}

/// Nothing of the pods is left: containerd lists none, eniipd holds no
/// address, the node has no host end, no rule for them, and their netns
/// files are gone.
fn assert_all_gone(w: &World, c: &Containerd, pods: &[cri::PodStatus]) {
    assert!(c.list().is_empty(), "{:?}", c.list());
    w.assert_none_in_use_within(Duration::from_secs(5));
    w.assert_no_host_end();
    let rules = w.node_ip(&["rule"]);
    for p in pods {
        assert!(!rules.contains(&format!("{} ", p.ip)), "{}: {rules}", p.ip);
        assert!(
            !std::path::Path::new(&p.netns).exists(),
            "netns {} left",
            p.netns
        );
    }
}

#[test]
fn containerd_runs_pods_one_after_another_and_at_once() {
    if !can() {
        return;
    }
    let w = World::start(XLARGE, json!({}));
    let c = Containerd::start(&w);
    let ns = "default";
    let mut ids = Vec::new();
    let mut pods = Vec::new();
    for i in 0..10 {
        let name = format!("seq-{i}");
        let (id, _) = c
            .run_pod(&name, ns)
            .unwrap_or_else(|e| panic!("RunPodSandbox {name}: {e}\n{}", c.log()));
        pods.push(check_pod(&w, &c, &id, &name, ns));
        ids.push(id);
    }
    let parallel: Vec<(String, String)> = crate::common::at_once(10, |i| {
        let name = format!("par-{i}");
        let r = c.run_pod(&name, "batch");
        (name, r)
    })
    .into_iter()
    .map(|(name, r)| {
        let (id, _) = r.unwrap_or_else(|e| panic!("RunPodSandbox {name}: {e}"));
        (name, id)
    })
    .collect();
    for (name, id) in &parallel {
        pods.push(check_pod(&w, &c, id, name, "batch"));
        ids.push(id.clone());
    }
    let ips: BTreeSet<&str> = pods.iter().map(|p| p.ip.as_str()).collect();
    assert_eq!(ips.len(), 20, "{pods:?}");
    assert_eq!(c.list().len(), 20);
    std::thread::scope(|s| {
        for id in &ids {
            let c = &c;
            s.spawn(move || {
                c.stop(id)
                    .unwrap_or_else(|e| panic!("StopPodSandbox {id}: {e}"));
                c.remove(id)
                    .unwrap_or_else(|e| panic!("RemovePodSandbox {id}: {e}"));
            });
        }
    });
    assert_all_gone(&w, &c, &pods);
}

#[test]
fn a_stop_while_eniipd_is_away_succeeds_and_the_release_waits_for_it() {
    if !can() {
        return;
    }
    let mut w = World::start(XLARGE, json!({}));
    let c = Containerd::start(&w);
    let (id, _) = c
        .run_pod("web-0", "default")
        .unwrap_or_else(|e| panic!("RunPodSandbox: {e}\n{}", c.log()));
    let pod = check_pod(&w, &c, &id, "web-0", "default");
    w.stop_daemon();
    c.stop(&id)
        .unwrap_or_else(|e| panic!("StopPodSandbox with eniipd away: {e}"));
    c.remove(&id)
        .unwrap_or_else(|e| panic!("RemovePodSandbox: {e}"));
    // The release waited for eniipd, which applied it before serving.
    w.start_daemon();
    assert!(!w.inuse().contains_key(&pod.ip), "{:?}", w.inuse());
    assert_all_gone(&w, &c, &[pod]);
}

/// The emulator's two vswitches in the node's zone (the instance's
/// first), both in eniipd's config, the first by preference (`ordered`:
/// the one with more free addresses).
const VSW1: &str = "vsw-bp1sim0000000000000001";
const VSW2: &str = "vsw-bp1sim0000000000000002";

#[test]
fn pods_get_what_their_annotations_ask() {
    if !can() {
        return;
    }
    let w = World::start_on_vswitches(
        XLARGE,
        &[
            &format!("{VSW1}=192.168.0.0/22,free=1000"),
            &format!("{VSW2}=192.168.8.0/22,free=500"),
        ],
        json!({
            "vswitches": {"cn-hangzhou-i": [VSW1, VSW2]},
            "vswitch_selection_policy": "ordered",
        }),
    );
    let c = Containerd::start(&w);
    let ns = "default";
    let run =
        |name: &str, annotations: serde_json::Value| c.run_pod_annotated(name, ns, &annotations);
    // Asking nothing: on the first vswitch, by preference.
    let (plain, _) = run("plain", json!({"app": "web"}))
        .unwrap_or_else(|e| panic!("RunPodSandbox plain: {e}\n{}", c.log()));
    let plain = check_pod(&w, &c, &plain, "plain", ns);
    assert_eq!(w.eni_of(&plain.ip).vswitch, VSW1);

    // A vswitch asked: the address is on an ENI of that vswitch (one made
    // there for it), and the pod reaches that vswitch's gateway.
    let (pinned_id, _) = run("pinned", json!({"eniipd/vswitch": VSW2}))
        .unwrap_or_else(|e| panic!("RunPodSandbox pinned: {e}\n{}", c.log()));
    let st = c.status(&pinned_id);
    assert_eq!(st.state, "SANDBOX_READY", "{st:?}");
    let eni = w.eni_of(&st.ip);
    assert_eq!(eni.vswitch, VSW2, "{st:?}: {eni:?}");
    assert!(
        st.ip.starts_with("192.168.") && eni.cidr == "192.168.8.0/22",
        "{st:?}: {eni:?}"
    );
    assert_eq!(
        w.inuse().get(&st.ip),
        Some(&format!("eniip/{ns}/pinned")),
        "{:?}",
        w.inuse()
    );
    assert!(
        c.ping_from(st.pid, &eni.gateway.to_string()),
        "pinned ({}) cannot ping {}\n{}",
        st.ip,
        eni.gateway,
        w.diag()
    );

    // A vswitch this node does not have: RunPodSandbox fails naming it,
    // and nothing is held.
    let e = run(
        "astray",
        json!({"eniipd/vswitch": "vsw-nosuch0000000000000009"}),
    )
    .expect_err("a vswitch the node does not have");
    assert!(
        e.contains("eniipd/vswitch") && e.contains("vsw-nosuch0000000000000009"),
        "{e}"
    );
    assert!(
        !w.inuse().values().any(|o| o.ends_with("/astray")),
        "{:?}",
        w.inuse()
    );

    // A stick time: re-created with the same name (a StatefulSet's pod),
    // the pod gets its address back, and a pod in between does not get
    // it (the node itself keeps nothing for a released pod).
    let sticky = json!({"eniipd/ip-stick-time": "600"});
    let (db_id, _) = run("db-0", sticky.clone())
        .unwrap_or_else(|e| panic!("RunPodSandbox db-0: {e}\n{}", c.log()));
    let db = check_pod(&w, &c, &db_id, "db-0", ns);
    c.stop(&db_id).unwrap();
    c.remove(&db_id).unwrap();
    assert!(!w.inuse().contains_key(&db.ip));
    let (between_id, _) = run("between", json!({}))
        .unwrap_or_else(|e| panic!("RunPodSandbox between: {e}\n{}", c.log()));
    let between = check_pod(&w, &c, &between_id, "between", ns);
    assert_ne!(between.ip, db.ip, "db-0's address is reserved for it");
    let (again_id, _) = run("db-0", sticky)
        .unwrap_or_else(|e| panic!("RunPodSandbox db-0 again: {e}\n{}", c.log()));
    let again = check_pod(&w, &c, &again_id, "db-0", ns);
    assert_eq!(again.ip, db.ip, "db-0 re-created gets its address back");
}
