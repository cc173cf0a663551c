//! A failed ADD says why, in words a user can act on (runtimes show the
//! CNI error's `msg` as the pod's event): eniipd down, the vswitch out of
//! addresses (named), the instance's ENI quota reached, a timeout, a
//! pod's security groups malformed or not allowed; STATUS
//! the same.
//! Needs root and `ip`; says SKIPPED loudly otherwise (and fails under
//! ENIIPD_CI=1).

use crate::cnienv;

use crate::common::first_vswitch;
use cnienv::{can_run, Ctr, World};
use serde_json::json;

const LARGE: &str = "ecs.g7.large";

fn msg(out: &cnienv::CniOut) -> String {
    out.json["msg"].as_str().unwrap_or("").to_string()
}

#[test]
fn an_add_refused_for_the_eni_quota_or_eniipd_away_says_so() {
    if !can_run("cni error words", &[]) {
        return;
    }
    let mut w = World::start(LARGE, json!({}));
    let conf = w.conf("1.0.0", json!({}));
    // ecs.g7.large: 2 usable ENIs x 6 = 12 addresses.
    for i in 0..12 {
        w.daemon().ok(&format!("alloc fill/{i}"));
    }
    let c = Ctr::new(&w, 0);
    let out = w.cni("ADD", Some(&c), &conf);
    assert_eq!(out.code(), 100, "{out:?}");
    assert!(msg(&out).contains("ENI quota is reached"), "{out:?}");
    let status = w.cni("STATUS", None, &w.conf("1.1.0", json!({})));
    assert_eq!(status.code(), 51, "{status:?}");
    assert!(msg(&status).contains("ENI quota is reached"), "{status:?}");
    assert!(!msg(&status).contains("  "), "a run of spaces: {status:?}");

    w.stop_daemon();
    // daemonWait 0: no wait for the eniipd that is away.
    let out = w.cni("ADD", Some(&c), &w.conf("1.0.0", json!({"daemonWait": 0})));
    assert_eq!(out.code(), 11, "{out:?}");
    assert!(msg(&out).starts_with("eniipd is away"), "{out:?}");
    let status = w.cni("STATUS", None, &w.conf("1.1.0", json!({})));
    assert_eq!(status.code(), 50, "{status:?}");
    assert!(msg(&status).contains("eniipd is away"), "{status:?}");
}

#[test]
fn an_add_refused_for_an_empty_vswitch_names_it() {
    if !can_run("cni error words", &[]) {
        return;
    }
    let w = World::start(LARGE, json!({}));
    let vsw = first_vswitch(&w.sim.state());
    w.sim.set_free(&vsw, 0);
    let c = Ctr::new(&w, 0);
    let out = w.cni("ADD", Some(&c), &w.conf("1.0.0", json!({})));
    assert_eq!(out.code(), 100, "{out:?}");
    assert!(
        msg(&out).contains(&format!("vswitch {vsw} is out of addresses")),
        "{out:?}"
    );
    assert!(w.inuse().is_empty(), "{:?}", w.inuse());
}

#[test]
fn an_add_that_times_out_says_so() {
    if !can_run("cni error words", &[]) {
        return;
    }
    // The cloud throttles every address call; eniipd's cloud layer keeps
    // retrying past alloc_timeout, so the ADD times out.
    let w = World::start(LARGE, json!({"alloc_timeout": 3}));
    for action in ["AssignPrivateIpAddresses", "CreateNetworkInterface"] {
        w.sim.fault(&format!(
            r#"{{"action":"{action}","code":"Throttling.User"}}"#
        ));
    }
    let c = Ctr::new(&w, 0);
    let out = w.cni("ADD", Some(&c), &w.conf("1.0.0", json!({})));
    assert_eq!(out.code(), 11, "{out:?}");
    assert!(msg(&out).starts_with("timed out"), "{out:?}");
    assert!(msg(&out).contains("3 s"), "{out:?}");
    assert!(w.inuse().is_empty(), "{:?}", w.inuse());
}

#[test]
fn a_pods_security_groups_are_checked_by_the_plugin_and_refused_by_an_eniipd_that_allows_none() {
    if !can_run("cni error words", &[]) {
        return;
    }
    // No pod_security_groups in eni.json: no pod may ask its own groups.
    let w = World::start(LARGE, json!({}));
    let conf = |annotations: serde_json::Value| {
        w.conf(
            "1.0.0",
            json!({"runtimeConfig": {"io.kubernetes.cri.pod-annotations": annotations}}),
        )
    };
    // Malformed: refused by the plugin, naming the annotation, before
    // eniipd is asked.
    let c = Ctr::new(&w, 0);
    let out = w.cni(
        "ADD",
        Some(&c),
        &conf(json!({"eniipd/security-groups": "sg-a,sg-b,sg-c,sg-d,sg-e,sg-f"})),
    );
    assert_eq!(out.code(), 7, "{out:?}");
    assert!(
        msg(&out).starts_with("invalid pod annotation eniipd/security-groups: "),
        "{out:?}"
    );
    assert!(msg(&out).contains("at most 5"), "{out:?}");
    // Well formed: eniipd's refusal, naming the annotation and the key
    // that would allow it; nothing is held.
    let out = w.cni(
        "ADD",
        Some(&c),
        &conf(json!({"eniipd/security-groups": "sg-bp1b,sg-bp1a"})),
    );
    assert_eq!(out.code(), 100, "{out:?}");
    assert!(
        msg(&out).starts_with(
            "eniipd refused the pod's annotation eniipd/security-groups: security-groups=sg-bp1a,sg-bp1b"
        ),
        "{out:?}"
    );
    assert!(msg(&out).contains("pod_security_groups"), "{out:?}");
    assert!(w.inuse().is_empty(), "{:?}", w.inuse());
    // A pod that asks nothing is served as before.
    w.cni("ADD", Some(&c), &conf(json!({"app": "web"})))
        .expect_ok("an ADD asking nothing");
    assert_eq!(w.inuse().len(), 1, "{:?}", w.inuse());
}
