//! eniip-cni under containerd's CRI, as a kubelet drives it, on the
//! shipped `cni/eniip.conflist` unchanged (see `tests/it/cri.rs`): 10 pods
//! one after another and 10 at once each get their own address, owned by
//! `eniip/<namespace>/<pod>`, and ping the vswitch gateway through their
//! own ENI; Stop+Remove releases them all and leaves no netns, veth, rule
//! or address. A stop while eniipd is away succeeds: the pod's node side
//! goes, and its release waits for eniipd, which applies it before it
//! serves. Needs
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
