//! Security groups per pod under containerd's CRI, as a kubelet drives
//! it (see `tests/it/cri.rs`): two pods annotated with different allowed
//! sets get addresses on ENIs whose DescribeNetworkInterfaces groups are
//! exactly their sets and ping their gateway; a pod asking a group not in
//! `pod_security_groups` fails RunPodSandbox naming the group; a pod
//! without the annotation gets the node's own groups. Needs what
//! `cni_containerd` needs; says SKIPPED loudly otherwise.

use crate::cni_containerd::check_pod;
use crate::cnienv::{can_run, World};
use crate::cri::{self, Containerd};
use crate::openapi_client::{call, client};

use serde_json::json;

const SG_A: &str = "sg-bp1podsa000000000001";
const SG_B: &str = "sg-bp1podsb000000000002";
const NOT_ALLOWED: &str = "sg-bp1podsc000000000003";

/// The groups DescribeNetworkInterfaces gives `eni`, sorted.
fn described(w: &World, eni: &str) -> Vec<String> {
    let c = client(w.sim.openapi_options());
    let d = call(
        &c,
        "DescribeNetworkInterfaces",
        &[("NetworkInterfaceId.1", eni)],
    )
    .unwrap();
    crate::common::sorted_strings(
        &d["NetworkInterfaceSets"]["NetworkInterfaceSet"][0]["SecurityGroupIds"]["SecurityGroupId"],
    )
}

#[test]
fn pods_get_enis_of_exactly_their_security_groups() {
    let tools = cri::tools();
    let tools: Vec<&str> = tools.iter().map(String::as_str).collect();
    if !can_run("cni containerd CRI security groups", &tools) {
        return;
    }
    let w = World::start_with_groups(
        "ecs.g7.xlarge",
        &[SG_A, SG_B, NOT_ALLOWED],
        json!({"pod_security_groups": [SG_A, SG_B]}),
    );
    let c = Containerd::start(&w);
    let ns = "default";
    let mut enis = Vec::new();
    for (name, sg) in [("web-a", SG_A), ("web-b", SG_B)] {
        let (id, _) = c
            .run_pod_annotated(name, ns, &json!({"eniipd/security-groups": sg}))
            .unwrap_or_else(|e| panic!("RunPodSandbox {name}: {e}\n{}", c.log()));
        let st = check_pod(&w, &c, &id, name, ns);
        let eni = w.eni_of(&st.ip).eni;
        assert_eq!(described(&w, &eni), [sg], "{name} on {eni}");
        enis.push(eni);
    }
    assert_ne!(enis[0], enis[1]);
    // Not in pod_security_groups: refused naming the group, nothing held.
    let e = c
        .run_pod_annotated(
            "astray",
            ns,
            &json!({"eniipd/security-groups": format!("{SG_A},{NOT_ALLOWED}")}),
        )
        .expect_err("a group the node does not allow");
    assert!(
        e.contains("eniipd/security-groups") && e.contains(NOT_ALLOWED),
        "{e}"
    );
    assert!(!w.inuse().values().any(|o| o.ends_with("/astray")));
    // No annotation: the node's own groups (the instance's).
    let (id, _) = c
        .run_pod_annotated("plain", ns, &json!({"app": "web"}))
        .unwrap_or_else(|e| panic!("RunPodSandbox plain: {e}\n{}", c.log()));
    let st = check_pod(&w, &c, &id, "plain", ns);
    let eni = w.eni_of(&st.ip).eni;
    let own = described(&w, &eni);
    assert!(!own.iter().any(|g| g == SG_A || g == SG_B), "{own:?}");
    assert!(!enis.contains(&eni), "{eni}");
}
