//! eniip-cni speaks the spec versions runtimes speak: the shipped
//! `cni/eniip.conflist`, byte for byte, runs through Debian's reference
//! plugins (1.1.1, which refuse 1.1.0 configs) the way libcni runs a list;
//! each of 0.4.0, 1.0.0 and 1.1.0 is answered in its own version with the
//! addresses mapped to `CNI_IFNAME` (what containerd's go-cni looks up); a
//! version we do not speak, and GC or STATUS before 1.1.0, get CNI error 1
//! with nothing taken; `cni/eniip-1.1.conflist`'s entry answers STATUS
//! and GC. Needs root, `ip`, `unshare`, busybox and Debian's
//! plugins; says SKIPPED loudly otherwise (and fails under ENIIPD_CI=1).

use crate::cnienv;

use std::time::Duration;

use crate::common::eventually;
use crate::shipped::{self, ShippedSocket};
use cnienv::{can_run, Ctr, World, GATEWAY};
use serde_json::{json, Value};

const LARGE: &str = "ecs.g7.large";

/// The index `ips[0].interface` names is the sandbox's `eth0`.
fn assert_maps_to_eth0(r: &Value, netns: &str) {
    for ip in r["ips"].as_array().unwrap_or_else(|| panic!("no ips: {r}")) {
        let i = ip["interface"]
            .as_u64()
            .unwrap_or_else(|| panic!("no interface index: {r}"));
        let itf = &r["interfaces"][i as usize];
        assert_eq!(itf["name"], "eth0", "{r}");
        assert_eq!(itf["sandbox"], netns, "{r}");
    }
}

#[test]
fn the_shipped_conflist_runs_unchanged_with_debians_plugins() {
    if !can_run(
        "cni shipped conflist",
        &[
            "busybox",
            "unshare",
            "iptables",
            "tc",
            "/usr/lib/cni/portmap",
            "/usr/lib/cni/bandwidth",
        ],
    ) {
        return;
    }
    let w = World::start(LARGE, json!({}));
    let ship = ShippedSocket::new(&w.socket());
    let list = shipped::shipped_conflist("eniip.conflist");
    let plugins = list["plugins"].as_array().expect("plugins").clone();
    let mut c = Ctr::new(&w, 0);
    c.args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-1".into();
    let ctr = || Some((c.id.as_str(), c.ns.path(), c.args.as_str()));
    let run = |cmd: &str, p: &Value, prev: &Value| {
        let bin = shipped::plugin_bin(p["type"].as_str().expect("type"));
        let conf = shipped::plugin_conf(&list, p, prev);
        let out = cnienv::run_bin(&ship.wrap(), &w.node.name, &bin, cmd, ctr(), &conf);
        assert!(out.ok, "{cmd} {bin} ({}): {out:?}", list["cniVersion"]);
        out
    };
    let mut result = Value::Null;
    for p in &plugins {
        result = run("ADD", p, &result).json;
    }
    assert_eq!(result["cniVersion"], list["cniVersion"]);
    assert_maps_to_eth0(&result, &c.ns.path().display().to_string());
    let ip = result["ips"][0]["address"]
        .as_str()
        .unwrap()
        .trim_end_matches("/32")
        .to_string();
    assert_eq!(
        w.inuse().get(&ip),
        Some(&"eniip/default/web-1".to_string()),
        "{:?}",
        w.inuse()
    );
    assert!(c.ping(GATEWAY), "ping {GATEWAY} from {ip}\n{}", w.diag());
    for p in plugins.iter().rev() {
        run("DEL", p, &result);
    }
    w.assert_none_in_use_within(Duration::from_secs(5));
    w.assert_no_host_end();
    let rules = w.node_ip(&["rule"]);
    assert!(!rules.contains(&ip), "{rules}");
}

#[test]
fn each_version_is_answered_in_its_own() {
    if !can_run("cni versions", &[]) {
        return;
    }
    let w = World::start(LARGE, json!({}));
    for (n, v) in ["0.4.0", "1.0.0", "1.1.0"].into_iter().enumerate() {
        let conf = w.conf(v, json!({"cniVersions": ["0.4.0", "1.0.0", "1.1.0"]}));
        let c = Ctr::new(&w, n);
        let add = w.cni("ADD", Some(&c), &conf).expect_ok(v);
        let r = &add.json;
        assert_eq!(r["cniVersion"], v, "{r}");
        assert_maps_to_eth0(r, &c.ns.path().display().to_string());
        // 0.4.0 requires each address's IP version; 1.0.0 dropped it.
        let version = &r["ips"][0]["version"];
        if v == "0.4.0" {
            assert_eq!(version, "4", "{r}");
        } else {
            assert!(version.is_null(), "{r}");
        }
        let mut with_prev = conf.clone();
        with_prev["prevResult"] = r.clone();
        w.cni("CHECK", Some(&c), &with_prev)
            .expect_ok(&format!("CHECK {v}"));
        w.cni("DEL", Some(&c), &with_prev)
            .expect_ok(&format!("DEL {v}"));
        assert!(w.inuse().is_empty(), "{v}: {:?}", w.inuse());
    }
    // A version we do not speak: error 1, in the caller's version, and no
    // address taken.
    let c = Ctr::new(&w, 9);
    let out = w.cni("ADD", Some(&c), &w.conf("0.3.1", json!({})));
    assert_eq!(out.code(), 1, "{out:?}");
    assert_eq!(out.json["cniVersion"], "0.3.1", "{out:?}");
    assert!(w.inuse().is_empty(), "{:?}", w.inuse());
    // GC and STATUS exist from 1.1.0 only.
    for v in ["0.4.0", "1.0.0"] {
        let conf = w.conf(v, json!({"cni.dev/valid-attachments": []}));
        for cmd in ["GC", "STATUS"] {
            let out = w.cni(cmd, None, &conf);
            assert_eq!(out.code(), 1, "{cmd} {v}: {out:?}");
        }
    }
    w.cni("STATUS", None, &w.conf("1.1.0", json!({})))
        .expect_ok("STATUS 1.1.0");
}

/// `cni/eniip-1.1.conflist` (for stacks that speak 1.1.0 throughout):
/// eniip-cni's entry, as shipped, answers STATUS and GC, and an ADD in
/// 1.1.0.
#[test]
fn the_1_1_conflist_gives_status_and_gc() {
    if !can_run("cni 1.1 conflist", &["unshare"]) {
        return;
    }
    let w = World::start(LARGE, json!({}));
    let ship = ShippedSocket::new(&w.socket());
    let list = shipped::shipped_conflist("eniip-1.1.conflist");
    assert_eq!(list["cniVersion"], "1.1.0");
    let ours = list["plugins"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["type"] == "eniip-cni"))
        .expect("an eniip-cni entry")
        .clone();
    let conf = shipped::plugin_conf(&list, &ours, &Value::Null);
    let run = |cmd: &str, ctr: Option<&Ctr>, conf: &Value| {
        let ctr = ctr.map(|c| (c.id.as_str(), c.ns.path(), ""));
        cnienv::run_bin(&ship.wrap(), &w.node.name, cnienv::plugin(), cmd, ctr, conf)
    };
    let out = run("STATUS", None, &conf);
    assert!(out.ok, "STATUS: {out:?}");
    let c = Ctr::new(&w, 0);
    let add = run("ADD", Some(&c), &conf);
    assert!(add.ok, "ADD: {add:?}");
    assert_eq!(add.json["cniVersion"], "1.1.0");
    // GC keeping nothing releases it.
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([]);
    let out = run("GC", None, &gc);
    assert!(out.ok, "GC: {out:?}");
    assert!(
        eventually(Duration::from_secs(5), || w.inuse().is_empty()),
        "{:?}",
        w.inuse()
    );
}
