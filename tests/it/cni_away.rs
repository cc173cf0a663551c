//! eniip-cni while eniipd is away (restarting, replaced by a rollout,
//! killed): ADD waits for it (`daemonWait`) and gets its address once it
//! is back; past the bound it is error 11 saying so. DEL never fails: it
//! removes the pod's node side and queues the release, which eniipd
//! applies before it serves, once. A queued release that comes late
//! never takes the address of a newer sandbox of the same pod. CHECK and
//! STATUS say eniipd is away. Needs root, `ip` and busybox; says SKIPPED
//! loudly otherwise (and fails under ENIIPD_CI=1).

use std::time::{Duration, Instant};

use serde_json::json;

use crate::cnienv::{can_run, plugin, run_bin, with_prev, Ctr, World, GATEWAY};
use crate::common::eventually;

const LARGE: &str = "ecs.g7.large";

/// The releases queued beside the test eniipd's socket.
fn queued(w: &World) -> Vec<String> {
    let dir = eniip_protocol::releases::dir_for(&w.socket());
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn an_add_waits_for_eniipd_and_a_del_queues_its_release() {
    if !can_run("cni with eniipd away", &["busybox"]) {
        return;
    }
    let mut w = World::start(LARGE, json!({}));
    let conf = w.conf("1.0.0", json!({}));
    let a = Ctr::pod(&w, 0, "web-a");
    let ra = w.cni("ADD", Some(&a), &conf).expect_ok("ADD a");
    let ip_a = ra.ip();

    w.stop_daemon();
    // DEL while eniipd is away: success; the node side is gone; the
    // release waits in the queue.
    w.cni("DEL", Some(&a), &with_prev(&conf, &ra.json))
        .expect_ok("DEL with eniipd away");
    w.assert_no_host_end();
    assert_eq!(queued(&w).len(), 1, "{:?}", queued(&w));
    // CHECK and STATUS say eniipd is away.
    let b = Ctr::pod(&w, 1, "web-b");
    let check = w.cni("CHECK", Some(&a), &with_prev(&conf, &ra.json));
    assert_eq!(check.code(), 11, "{check:?}");
    assert!(check.stdout.contains("eniipd is away"), "{check:?}");
    let status = w.cni("STATUS", None, &w.conf("1.1.0", json!({})));
    assert_eq!(status.code(), 50, "{status:?}");
    assert!(status.stdout.contains("eniipd is away"), "{status:?}");
    assert!(status.stdout.contains("1 release(s) queued"), "{status:?}");

    // ADD while eniipd is away waits for it, and gets its address once
    // eniipd is back (it starts after the ADD did).
    let node = w.node.name.clone();
    let rb = std::thread::scope(|s| {
        let add = s.spawn(|| {
            let ctr = (b.id.as_str(), b.ns.path(), b.args.as_str());
            run_bin(&[], &node, plugin(), "ADD", Some(ctr), &conf)
        });
        w.start_daemon();
        add.join().unwrap()
    });
    let rb = rb.expect_ok("ADD across eniipd's absence");
    assert!(b.ping(GATEWAY), "{}", w.diag());
    // The queued release was applied before eniipd served anything: a's
    // address is free, b holds its own, and the queue is empty.
    let inuse = w.inuse();
    let web_a = format!("{}/default/web-a", w.network);
    assert!(!inuse.values().any(|o| *o == web_a), "{ip_a}: {inuse:?}");
    assert_eq!(
        inuse.get(&rb.ip()),
        Some(&format!("{}/default/web-b", w.network))
    );
    assert!(queued(&w).is_empty(), "{:?}", queued(&w));
}

#[test]
fn an_add_past_daemon_wait_is_error_11_saying_so() {
    if !can_run("cni with eniipd away", &[]) {
        return;
    }
    let mut w = World::start(LARGE, json!({}));
    w.stop_daemon();
    let c = Ctr::pod(&w, 0, "web-0");
    let t = Instant::now();
    let out = w.cni("ADD", Some(&c), &w.conf("1.0.0", json!({"daemonWait": 1})));
    assert_eq!(out.code(), 11, "{out:?}");
    assert!(out.stdout.contains("eniipd is away"), "{out:?}");
    assert!(out.stdout.contains("waited 1 s for it"), "{out:?}");
    assert!(t.elapsed() >= Duration::from_secs(1), "{:?}", t.elapsed());
    // A bad bound is refused naming the key.
    let bad = w.cni(
        "ADD",
        Some(&c),
        &w.conf("1.0.0", json!({"daemonWait": 101})),
    );
    assert_eq!(bad.code(), 7, "{bad:?}");
    assert!(bad.stdout.contains("daemonWait"), "{bad:?}");
}

#[test]
fn a_late_queued_release_never_takes_a_newer_sandboxs_address() {
    if !can_run("cni with eniipd away", &["busybox"]) {
        return;
    }
    let w = World::start(LARGE, json!({}));
    let conf = w.conf("1.0.0", json!({}));
    // The pod's first sandbox, then its second (the same owner): the
    // address moves to the new sandbox.
    let old = Ctr::pod(&w, 0, "db-0");
    let r_old = w.cni("ADD", Some(&old), &conf).expect_ok("ADD old sandbox");
    let new = Ctr::pod(&w, 1, "db-0");
    let r_new = w.cni("ADD", Some(&new), &conf).expect_ok("ADD new sandbox");
    assert_eq!(r_old.ip(), r_new.ip());
    // The old sandbox's release arrives late, through the queue, while
    // eniipd runs: it is applied (its file goes) and changes nothing.
    let owner = format!("{}/default/db-0", w.network);
    eniip_protocol::releases::queue(&w.socket(), &owner, &old.id, None).unwrap();
    assert!(
        eventually(Duration::from_secs(30), || queued(&w).is_empty()),
        "the queued release was not applied: {:?}",
        queued(&w)
    );
    assert_eq!(w.inuse().get(&r_new.ip()), Some(&owner), "{:?}", w.inuse());
    assert!(new.ping(GATEWAY), "{}", w.diag());
    // A file that is no release is put aside, never applied.
    let dir = eniip_protocol::releases::dir_for(&w.socket());
    std::fs::write(dir.join("junk.release"), format!("release {owner}\n")).unwrap();
    assert!(
        eventually(Duration::from_secs(30), || dir
            .join("junk.release.refused")
            .exists()),
        "{:?}",
        queued(&w)
    );
    assert!(w.inuse().contains_key(&r_new.ip()), "{:?}", w.inuse());
}
