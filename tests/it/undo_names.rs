//! Undo names exactly what it undoes (issue 36): a release, queued or on
//! the socket, touches only the allocation it was made for, never a newer
//! one of the same owner, sandbox or address; DEL and GC take down only
//! the host end their ADD built, before the address is given back.
//!
//! Each test holds open the window the old code lost in: an eniipd that is
//! stalled (SIGSTOP, not down), a reply held back by a socket in front of
//! eniipd ([`ReplyRewriter`]), an owner's lock held by the test, an
//! allocation kept waiting by the emulator's latency.

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::json;

use crate::cnienv::{can_run, Ctr, ReplyRewriter, World, GATEWAY};
use crate::common::{ask, config, eventually, tempdir, Daemon, Sim};

/// An ENI of this type holds 6 addresses (5 besides its primary).
const LARGE: &str = "ecs.g7.large";

/// The queued releases eniipd has not applied yet.
fn queued(socket: &Path) -> Vec<String> {
    std::fs::read_dir(eniip_protocol::releases::dir_for(socket))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".release"))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the node has a link named `name`.
fn has_link(w: &World, name: &str) -> bool {
    w.node_ip(&["-o", "link"]).contains(name)
}

/// eniipd stopped (SIGSTOP: its socket accepts, nothing answers) until
/// dropped.
struct Stalled(i32);

impl Stalled {
    fn new(pid: i32) -> Stalled {
        kill(Pid::from_raw(pid), Signal::SIGSTOP).unwrap();
        Stalled(pid)
    }
}

impl Drop for Stalled {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.0), Signal::SIGCONT);
    }
}

#[test]
fn a_release_queued_before_the_same_sandbox_was_added_again_keeps_its_address() {
    if !can_run("podman-style same-id restart", &["busybox"]) {
        return;
    }
    let w = World::start(LARGE, json!({}));
    let conf = w.conf("1.0.0", json!({}));
    // podman restarts a container with the same id: DEL, then ADD of the
    // same sandbox again.
    let c1 = Ctr::new(&w, 0);
    let ip = w.cni("ADD", Some(&c1), &conf).expect_ok("ADD").ip();
    let owner = w.inuse()[&ip].clone();
    // The DEL while eniipd is stalled for 3 s (the plugin gives up on its
    // `ping` after 2 s): the node's side goes, the release is queued.
    let started = Instant::now();
    let q = eniip_protocol::releases::dir_for(&w.socket());
    let aside = w.dir.join("queued-aside");
    {
        let _stalled = Stalled::new(w.daemon().pid());
        w.cni("DEL", Some(&c1), &conf)
            .expect_ok("DEL, eniipd stalled");
        let files = queued(&w.socket());
        assert_eq!(files.len(), 1, "the DEL queued its release");
        // eniipd's queue pass may come at any moment once it runs again:
        // the release is kept out of its sight until the ADD below, as
        // when the pass comes after it.
        std::fs::rename(q.join(&files[0]), &aside).unwrap();
        let left = Duration::from_secs(3).saturating_sub(started.elapsed());
        // The stall's length, not a wait for anything.
        std::thread::sleep(left);
    }
    // The same sandbox again, before the queue's next pass: the same
    // address, held for it still.
    let again = w.cni("ADD", Some(&c1), &conf).expect_ok("ADD again");
    assert_eq!(again.ip(), ip);
    // The queue's next pass applies the old DEL's release: it must not
    // touch the running container's allocation.
    std::fs::rename(&aside, q.join("from-the-del.release")).unwrap();
    assert!(
        eventually(Duration::from_secs(30), || queued(&w.socket()).is_empty()),
        "the queued release was never applied: {:?}",
        queued(&w.socket())
    );
    assert_eq!(
        w.inuse().get(&ip),
        Some(&owner),
        "the running container lost {ip}: {:?}",
        w.inuse()
    );
    assert!(c1.ping(GATEWAY), "{}", w.diag());
    // Another container is never handed the same address.
    let c2 = Ctr::new(&w, 1);
    let other = w.cni("ADD", Some(&c2), &conf).expect_ok("ADD c2").ip();
    assert_ne!(other, ip);
    for c in [&c2, &c1] {
        w.cni("DEL", Some(c), &conf).expect_ok("DEL");
    }
    w.assert_none_in_use_within(Duration::from_secs(5));
    w.assert_no_host_end();
}

/// `ip=owner` of what eniipd holds, asked on `socket`.
fn held(socket: &Path) -> BTreeMap<String, String> {
    ask(socket, "list")
        .iter()
        .filter_map(|l| eniip_protocol::protocol::reply::parse_list_line(l).ok())
        .filter(|l| l.state == "inuse")
        .filter_map(|l| Some((l.ip.to_string(), l.owner?)))
        .collect()
}

/// Takes every idle address of `w`'s eniipd for owners of its own (so the
/// next address given back is the only one another ADD can get); returns
/// them.
fn take_idle(w: &World, prefix: &str) -> Vec<String> {
    let mut taken = Vec::new();
    let none_left = eventually(Duration::from_secs(20), || {
        let status = w.ask("status");
        let last = status.last().unwrap();
        let (idle, pending) = (
            crate::common::field(last, "idle"),
            crate::common::field(last, "pending"),
        );
        if idle != "0" {
            let r = w.ask(&format!("alloc {prefix}-{}", taken.len()));
            assert!(r.last().unwrap().starts_with("OK "), "{r:?}");
            taken.push(format!("{prefix}-{}", taken.len()));
        }
        idle == "0" && pending == "0"
    });
    assert!(none_left, "{:?}", w.ask("status"));
    taken
}

#[test]
fn a_del_whose_address_went_to_another_pod_before_it_returned_leaves_that_pod_alone() {
    if !can_run("DEL's window held open", &["busybox"]) {
        return;
    }
    // No pool beyond what is asked, and nothing to grow it by: the
    // address A gives back is the only one B can get.
    let w = World::start_on_vswitches(
        LARGE,
        &["vsw-ident1=192.168.0.0/22,free=4"],
        json!({
            "vswitches": {"cn-hangzhou-i": ["vsw-ident1"]},
            "max_pool_size": 3,
            "min_pool_size": 0,
        }),
    );
    let a = Ctr::new(&w, 0);
    let conf = w.conf("1.0.0", json!({}));
    let ip = w.cni("ADD", Some(&a), &conf).expect_ok("ADD A").ip();
    let fillers = take_idle(&w, "filler");
    // A's DEL goes through a socket that holds eniipd's answer to its
    // release until B has been added.
    let (at_release, release_seen) = mpsc::channel::<()>();
    let (go, gate) = mpsc::channel::<()>();
    let gate = std::sync::Mutex::new(gate);
    let at_release = std::sync::Mutex::new(at_release);
    let proxy = ReplyRewriter::start(&w.dir, w.socket(), move |req, last| {
        if req.starts_with("release ") {
            let _ = at_release.lock().unwrap().send(());
            let _ = gate.lock().unwrap().recv_timeout(Duration::from_secs(30));
        }
        last.to_string()
    });
    let held_back = w.conf("1.0.0", json!({"socket": proxy.path.display().to_string()}));
    std::thread::scope(|s| {
        let del = s.spawn(|| w.cni("DEL", Some(&a), &held_back));
        release_seen
            .recv_timeout(Duration::from_secs(30))
            .expect("A's DEL released");
        // eniipd has given A's address back; A's DEL does not know yet.
        let b = Ctr::new(&w, 1);
        let got = w.cni("ADD", Some(&b), &conf).expect_ok("ADD B").ip();
        assert_eq!(got, ip, "B gets the address A gave back");
        go.send(()).unwrap();
        del.join().unwrap().expect_ok("A's DEL");
        let b_end = eniip_cni::datapath::host_veth_name(&b.id, "eth0");
        assert!(
            has_link(&w, &b_end),
            "B's host end was removed: {}",
            w.diag()
        );
        assert!(b.ping(GATEWAY), "B lost its network: {}", w.diag());
        w.cni("DEL", Some(&b), &conf).expect_ok("DEL B");
    });
    drop(proxy);
    for f in fillers {
        w.ask(&format!("release {f}"));
    }
    w.assert_none_in_use_within(Duration::from_secs(5));
    w.assert_no_host_end();
}

/// Sends `line` on a connection of its own and reads the final line of
/// the reply.
fn send(socket: &Path, line: &str) -> String {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(90))).unwrap();
    s.write_all(format!("{line}\n").as_bytes()).unwrap();
    let mut r = BufReader::new(s);
    loop {
        let mut l = String::new();
        if r.read_line(&mut l).unwrap() == 0 {
            return String::new();
        }
        let l = l.trim_end().to_string();
        if eniip_protocol::protocol::is_final_line(&l) {
            return l;
        }
    }
}

#[test]
fn a_release_of_an_old_sandbox_never_answers_the_new_sandboxs_waiting_alloc() {
    let sim = Sim::quick(&[]);
    let dir = tempdir("identity-cold");
    let d = Daemon::start(
        &dir,
        &config(&sim, &dir, json!({"min_pool_size": 0, "max_pool_size": 5})),
    );
    let socket = dir.join("d.sock");
    // Cold: the first ENI takes 8 s to create, longer than the release
    // queue's rescan.
    sim.fault(r#"{"action":"CreateNetworkInterface","latency_ms":8000}"#);
    std::thread::scope(|s| {
        let by_socket = s.spawn(|| send(&socket, "alloc ns/web sandbox=new1"));
        let by_queue = s.spawn(|| send(&socket, "alloc ns/db sandbox=new2"));
        assert!(
            eventually(Duration::from_secs(10), || ask(&socket, "enis")
                .iter()
                .any(|l| l.starts_with("creating"))),
            "{:?}",
            ask(&socket, "enis")
        );
        // The old sandboxes' releases: on the socket, and queued (as a DEL
        // queues it while eniipd cannot be asked, applied by eniipd's next
        // pass, without eniip-cni's owner lock).
        let r = send(&socket, "release ns/web sandbox=old1");
        assert_eq!(r, "OK released=none");
        let q = eniip_protocol::releases::dir_for(&socket);
        std::fs::create_dir_all(&q).unwrap();
        std::fs::set_permissions(&q, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        std::fs::write(q.join("old2.release"), "release ns/db sandbox=old2\n").unwrap();
        assert!(
            eventually(Duration::from_secs(10), || queued(&socket).is_empty()),
            "not applied: {:?}",
            queued(&socket)
        );
        let answered: Vec<String> = [("socket", by_socket), ("queue", by_queue)]
            .into_iter()
            .map(|(what, h)| (what, h.join().unwrap()))
            .filter(|(_, got)| !got.starts_with("OK ip="))
            .map(|(what, got)| format!("after a release by the {what}: {got:?}"))
            .collect();
        assert!(answered.is_empty(), "waiting allocs answered {answered:?}");
    });
    let held = held(&socket);
    assert_eq!(held.len(), 2, "{held:?}");
    drop(d);
}

#[test]
fn a_gc_whose_address_went_to_another_pod_while_it_waited_leaves_that_pod_alone() {
    if !can_run("GC's window held open", &["busybox"]) {
        return;
    }
    let w = World::start_on_vswitches(
        LARGE,
        &["vsw-ident2=192.168.0.0/22,free=4"],
        json!({
            "vswitches": {"cn-hangzhou-i": ["vsw-ident2"]},
            "max_pool_size": 3,
            "min_pool_size": 0,
        }),
    );
    let locks = w.dir.join("locks");
    let conf = w.conf("1.1.0", json!({"lockDir": locks.display().to_string()}));
    let a = Ctr::new(&w, 0);
    let ip = w.cni("ADD", Some(&a), &conf).expect_ok("ADD A").ip();
    let owner_a = w.inuse()[&ip].clone();
    let fillers = take_idle(&w, "filler");
    // B, whose owner's lock is another file than A's.
    let b = (1..64)
        .map(|n| Ctr::new(&w, n))
        .find(|b| {
            eniip_cni::lock::path_of(&locks, &format!("{}/{}", w.network, b.id))
                != eniip_cni::lock::path_of(&locks, &owner_a)
        })
        .unwrap();
    // A's owner lock is held (as a concurrent DEL or CHECK of A holds it)
    // while GC runs: the runtime knows B (being added), not A.
    let lock_file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(eniip_cni::lock::path_of(&locks, &owner_a))
        .unwrap();
    let held = nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusive).unwrap();
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([{"containerID": b.id, "ifname": "eth0"}]);
    std::thread::scope(|s| {
        let gc_run = s.spawn(|| w.cni("GC", None, &gc));
        let b_add = s.spawn(|| w.cni("ADD", Some(&b), &conf));
        // B's ADD gets A's address while GC waits for A's lock, if GC gave
        // it back before taking that lock (then it is done by now); else
        // it waits for an address until GC has taken A down.
        eventually(Duration::from_secs(3), || b_add.is_finished());
        drop(held);
        gc_run.join().unwrap().expect_ok("GC");
        // A's address, or one the cloud had left: B's either way.
        let got = b_add.join().unwrap().expect_ok("ADD B").ip();
        assert_eq!(
            w.inuse().get(&got),
            Some(&format!("{}/{}", w.network, b.id))
        );
    });
    let b_end = eniip_cni::datapath::host_veth_name(&b.id, "eth0");
    assert!(
        has_link(&w, &b_end),
        "B's host end was removed: {}",
        w.diag()
    );
    assert!(b.ping(GATEWAY), "B lost its network: {}", w.diag());
    let a_end = eniip_cni::datapath::host_veth_name(&a.id, "eth0");
    assert!(!has_link(&w, &a_end), "A's host end is left: {}", w.diag());
    assert!(
        !w.inuse().values().any(|o| o == &owner_a),
        "{:?}",
        w.inuse()
    );
    w.cni("DEL", Some(&b), &conf).expect_ok("DEL B");
    for f in fillers {
        w.ask(&format!("release {f}"));
    }
    w.assert_none_in_use_within(Duration::from_secs(5));
    w.assert_no_host_end();
}
