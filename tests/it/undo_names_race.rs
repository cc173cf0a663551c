//! The race of issue 36: ADD, DEL and GC of sandboxes on a node of 4
//! addresses (every ADD reuses one another sandbox gave back), from two
//! threads at once, with the windows the old code lost in kept open by
//! construction: eniipd stalled (SIGSTOP) twice for 2.5 s, so that DELs
//! queue their releases and ADDs wait; every release's reply held back a
//! moment by a socket in front of eniipd, so that eniipd has given the
//! address back before the DEL returns; an owner's lock held while GC
//! runs; a third of the ADDs re-adding the container id just deleted (as
//! podman does). After every step: no address held by two live
//! sandboxes, every live sandbox held its address by eniipd and its host
//! end the one its ADD made (same ifindex).
//!
//! eniip-cni runs in this process (`eniip_cni::run`, what the binary
//! runs), on threads in the test's node namespace, with real veths into
//! real container namespaces: 1 000 steps through the binary and `ip
//! netns exec` would take minutes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use eniip_cni::spec::Command as Cni;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};

use crate::cnienv::{can_run, Ctr, ReplyRewriter, World};
use crate::common::{ask, eventually, field, first_vswitch};

/// Steps in all (both threads).
const STEPS: usize = 1000;
/// Sandbox slots (one container namespace each), two per thread: as many
/// as the node has addresses.
const SLOTS: usize = 4;

/// A sandbox the runtime knows is running (its ADD succeeded).
#[derive(Debug, Clone)]
struct Live {
    id: String,
    owner: String,
    ip: String,
    veth: String,
    ifindex: u32,
}

/// What every thread sees.
#[derive(Default)]
struct Shared {
    /// By slot.
    live: BTreeMap<usize, Live>,
    /// Sandboxes being added (the runtime knows them: GC keeps them).
    adding: BTreeSet<String>,
    /// Forgotten by the runtime without a DEL, until a GC collects them.
    forgotten: BTreeMap<usize, Live>,
    /// GCs running (both threads may run one at once): while any runs,
    /// the runtime starts no ADD, since a GC's list may not name it (CNI
    /// 1.1). A flag here let an ADD start when the first of two GCs
    /// ended, and the second, whose list did not name it, collected it:
    /// "ADD made no enip..." and a live sandbox's address not in `list`.
    gc_running: usize,
}

/// One plugin invocation in this thread (in the node namespace).
fn cni(cmd: Cni, id: Option<(&str, &PathBuf)>, conf: &Value) -> Result<String, String> {
    let vars: BTreeMap<&str, String> = match id {
        Some((id, ns)) => [
            ("CNI_CONTAINERID", id.to_string()),
            ("CNI_NETNS", ns.display().to_string()),
            ("CNI_IFNAME", "eth0".to_string()),
        ]
        .into(),
        None => BTreeMap::new(),
    };
    let env = eniip_cni::spec::Env::from_vars(cmd, |k| vars.get(k).cloned())
        .map_err(|e| e.to_string())?;
    eniip_cni::run(cmd, &env, conf.to_string().as_bytes()).map_err(|e| e.to_string())
}

/// The node's links: name -> ifindex (`ip -o link`, in this thread's
/// namespace: the node's).
fn links() -> BTreeMap<String, u32> {
    let out = crate::cnienv::sh(&["ip", "-o", "link"]);
    out.lines()
        .filter_map(|l| {
            let mut w = l.split(": ");
            let index = w.next()?.trim().parse().ok()?;
            let name = w.next()?.split('@').next()?.to_string();
            Some((name, index))
        })
        .collect()
}

fn ifindex(name: &str) -> Option<u32> {
    links().get(name).copied()
}

/// The invariants, checked with the shared state locked; what eniipd
/// holds only when it is not stalled (the next check after asks it).
fn check(s: &Shared, w: &World, step: usize, stalled: &AtomicBool) {
    let socket = &w.socket();
    let mut ips = BTreeSet::new();
    for l in s.live.values() {
        assert!(
            ips.insert(&l.ip),
            "step {step}: {} is held by two live sandboxes: {:?}",
            l.ip,
            s.live
        );
    }
    // A list eniipd answered (an `ERR busy` or a broken connection under
    // load says nothing of what it holds: asked again).
    let reply = (!stalled.load(Ordering::SeqCst)).then(|| {
        let mut reply = Vec::new();
        let answered = eventually(Duration::from_secs(30), || {
            reply = ask(socket, "list");
            reply.last().is_some_and(|l| l.starts_with("OK"))
        });
        assert!(answered, "step {step}: list: {reply:?}");
        reply
    });
    let inuse: Option<BTreeMap<String, String>> = reply.as_ref().map(|r| {
        r.iter()
            .filter_map(|l| eniip_protocol::protocol::reply::parse_list_line(l).ok())
            .filter(|l| l.state == "inuse")
            .filter_map(|l| Some((l.ip.to_string(), l.owner?)))
            .collect()
    });
    let links = links();
    for l in s.live.values() {
        let Some(inuse) = &inuse else { continue };
        if inuse.get(&l.ip) != Some(&l.owner) {
            // What eniipd said of this address and this sandbox: who took
            // it away.
            let log: Vec<String> = w
                .daemon()
                .log_text()
                .lines()
                .filter(|line| line.contains(&l.ip) || line.contains(&l.id))
                .map(str::to_string)
                .collect();
            panic!(
                "step {step}: live {} does not hold {} in eniipd: {inuse:?}\nlist: {reply:?}\neniipd's log of it:\n{}",
                l.id,
                l.ip,
                log.join("\n")
            );
        }
    }
    for l in s.live.values() {
        assert_eq!(
            links.get(&l.veth),
            Some(&l.ifindex),
            "step {step}: live {} lost its host end {}",
            l.id,
            l.veth
        );
    }
}

/// What the race's threads share.
struct Race<'a> {
    w: &'a World,
    slots: Vec<Ctr>,
    node: std::fs::File,
    shared: Mutex<Shared>,
    gc_done: std::sync::Condvar,
    steps: AtomicUsize,
    stalled: AtomicBool,
    counts: Mutex<BTreeMap<&'static str, usize>>,
    locks: PathBuf,
    direct: Value,
    held_back: Value,
}

impl Race<'_> {
    fn count(&self, what: &'static str) {
        *self.counts.lock().unwrap().entry(what).or_default() += 1;
    }

    /// One thread's steps on its two slots, in the node namespace.
    fn worker(&self, t: usize) {
        nix::sched::setns(&self.node, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        let mut rng = eniip_util::rand::Rng::seeded(0x1d3 + t as u64);
        let mine = [2 * t, 2 * t + 1];
        let mut last_id: BTreeMap<usize, String> = BTreeMap::new();
        for n in 0.. {
            let step = self.steps.fetch_add(1, Ordering::SeqCst);
            if step >= STEPS {
                break;
            }
            if n % 25 == 24 {
                self.gc(step);
                continue;
            }
            let slot = mine[rng.below(2) as usize];
            let (live, forgotten) = {
                let st = self.shared.lock().unwrap();
                (
                    st.live.get(&slot).cloned(),
                    st.forgotten.contains_key(&slot),
                )
            };
            match live {
                _ if forgotten => {}
                None => {
                    // A third of the time the container id just deleted
                    // again (podman's restart).
                    let id = match last_id.get(&slot) {
                        Some(id) if rng.below(3) == 0 => {
                            self.count("same id");
                            id.clone()
                        }
                        _ => format!("r{}t{t}s{slot}n{n}", self.w.tag),
                    };
                    if self.add(step, slot, &id) {
                        last_id.insert(slot, id);
                    }
                }
                Some(l) => self.remove(step, slot, l, rng.below(10) == 0),
            }
        }
    }

    /// GC, the runtime knowing every live sandbox and every one being
    /// added; an owner's lock held a moment meanwhile.
    fn gc(&self, step: usize) {
        let (shared, gc_done, locks, held_back, stalled) = (
            &self.shared,
            &self.gc_done,
            &self.locks,
            &self.held_back,
            &self.stalled,
        );
        let count = |what| self.count(what);
        let (valid, busy) = {
            let mut st = shared.lock().unwrap();
            st.gc_running += 1;
            let mut v: Vec<Value> = st
                .live
                .values()
                .map(|l| l.id.clone())
                .chain(st.adding.iter().cloned())
                .map(|id| json!({"containerID": id, "ifname": "eth0"}))
                .collect();
            v.sort_by_key(|v| v.to_string());
            (v, st.live.values().next().map(|l| l.owner.clone()))
        };
        let holder = busy.map(|owner| {
            std::thread::spawn({
                let locks = locks.clone();
                move || {
                    let f = std::fs::OpenOptions::new()
                        .create(true)
                        .truncate(false)
                        .write(true)
                        .open(eniip_cni::lock::path_of(&locks, &owner))
                        .unwrap();
                    let _held =
                        nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive).unwrap();
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        });
        let mut gc = held_back.clone();
        gc["cni.dev/valid-attachments"] = Value::Array(valid);
        let r = cni(Cni::Gc, None, &gc);
        if let Some(h) = holder {
            h.join().unwrap();
        }
        match r {
            Ok(_) => count("gc"),
            // eniipd stalled: GC has no daemonWait.
            Err(_) if stalled.load(Ordering::SeqCst) => count("gc away"),
            Err(e) => panic!("step {step}: GC: {e}"),
        }
        let mut st = shared.lock().unwrap();
        st.gc_running -= 1;
        if st.gc_running == 0 {
            gc_done.notify_all();
        }
        // What GC collected is gone, its slot free.
        st.forgotten.retain(|_, l| ifindex(&l.veth).is_some());
        check(&st, self.w, step, stalled);
    }

    /// ADD of `id` in `slot`; whether it succeeded.
    fn add(&self, step: usize, slot: usize, id: &str) -> bool {
        let ns = self.slots[slot].ns.path();
        {
            let st = self.shared.lock().unwrap();
            let (mut st, waited) = self
                .gc_done
                .wait_timeout_while(st, Duration::from_secs(60), |st| st.gc_running > 0)
                .unwrap();
            assert!(!waited.timed_out(), "step {step}: a GC ran for 60 s");
            st.adding.insert(id.to_string());
        }
        let r = cni(Cni::Add, Some((id, &ns)), &self.direct);
        let mut st = self.shared.lock().unwrap();
        st.adding.remove(id);
        let veth = eniip_cni::datapath::host_veth_name(id, "eth0");
        let added = match r {
            Ok(out) => {
                let res: Value = serde_json::from_str(&out).unwrap();
                let ip = res["ips"][0]["address"]
                    .as_str()
                    .unwrap()
                    .trim_end_matches("/32")
                    .to_string();
                let ifindex = ifindex(&veth).unwrap_or_else(|| {
                    let log: Vec<String> = self
                        .w
                        .daemon()
                        .log_text()
                        .lines()
                        .filter(|l| l.contains(id))
                        .map(str::to_string)
                        .collect();
                    panic!(
                        "step {step}: ADD of {id} made no {veth} ({} GC running)\neniipd's log of it:\n{}",
                        st.gc_running,
                        log.join("\n")
                    )
                });
                st.live.insert(
                    slot,
                    Live {
                        owner: format!("{}/{id}", self.w.network),
                        id: id.to_string(),
                        ip,
                        veth,
                        ifindex,
                    },
                );
                self.count("add");
                true
            }
            Err(e) => {
                // No address to be had, or eniipd stalled past daemonWait:
                // nothing left behind.
                assert_eq!(
                    ifindex(&veth),
                    None,
                    "step {step}: failed ADD left {veth}: {e}"
                );
                self.count("add failed");
                false
            }
        };
        check(&st, self.w, step, &self.stalled);
        added
    }

    /// DEL of the live `l` in `slot`, or (`forget`) the runtime loses it
    /// and a GC collects it.
    fn remove(&self, step: usize, slot: usize, l: Live, forget: bool) {
        let mut st = self.shared.lock().unwrap();
        st.live.remove(&slot);
        if forget {
            st.forgotten.insert(slot, l);
            self.count("forgotten");
            check(&st, self.w, step, &self.stalled);
            return;
        }
        drop(st);
        let queued = self.stalled.load(Ordering::SeqCst);
        let ns = self.slots[slot].ns.path();
        cni(Cni::Del, Some((&l.id, &ns)), &self.held_back)
            .unwrap_or_else(|e| panic!("step {step}: DEL {}: {e}", l.id));
        self.count(if queued { "del while stalled" } else { "del" });
        let st = self.shared.lock().unwrap();
        check(&st, self.w, step, &self.stalled);
    }
}

#[test]
fn no_address_is_held_by_two_live_sandboxes_and_none_loses_its_host_end() {
    if !can_run("the identity race", &[]) {
        return;
    }
    let started = Instant::now();
    let w = World::start(
        "ecs.g7.large",
        json!({"min_pool_size": SLOTS, "max_pool_size": SLOTS, "alloc_timeout": 3}),
    );
    // A pool of 4 addresses, and the vswitch has no more to give.
    assert!(
        eventually(Duration::from_secs(30), || {
            let s = w.ask("status");
            let last = s.last().unwrap();
            field(last, "idle") == SLOTS.to_string() && field(last, "pending") == "0"
        }),
        "{:?}",
        w.ask("status")
    );
    w.sim.set_free(&first_vswitch(&w.sim.state()), 0);
    let proxy = ReplyRewriter::start(&w.dir, w.socket(), |req, last| {
        if req.starts_with("release ") {
            // eniipd has given the address back; the DEL learns it later
            // (a fault's length, not a wait for anything).
            let ms = eniip_util::rand::with_thread_rng(|r| r.below(4));
            std::thread::sleep(Duration::from_millis(ms));
        }
        last.to_string()
    });
    let locks = w.dir.join("locks");
    let extra = json!({"lockDir": locks.display().to_string(), "daemonWait": 10});
    let direct = w.conf("1.1.0", extra.clone());
    let mut held_back = w.conf("1.1.0", extra);
    held_back["socket"] = json!(proxy.path.display().to_string());
    let race = Race {
        w: &w,
        slots: (0..SLOTS).map(|n| Ctr::new(&w, n)).collect(),
        node: std::fs::File::open(w.node.path()).unwrap(),
        shared: Mutex::new(Shared::default()),
        gc_done: std::sync::Condvar::new(),
        steps: AtomicUsize::new(0),
        stalled: AtomicBool::new(false),
        counts: Mutex::new(BTreeMap::new()),
        locks,
        direct,
        held_back,
    };
    let pid = w.daemon().pid();
    std::thread::scope(|s| {
        // eniipd stalled twice, 2.5 s each, a third and two thirds in.
        let staller = s.spawn(|| {
            for at in [STEPS / 3, 2 * STEPS / 3] {
                while race.steps.load(Ordering::SeqCst) < at
                    && started.elapsed() < Duration::from_secs(120)
                {
                    std::thread::sleep(Duration::from_millis(5));
                }
                kill(Pid::from_raw(pid), Signal::SIGSTOP).unwrap();
                race.stalled.store(true, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(2500));
                race.stalled.store(false, Ordering::SeqCst);
                kill(Pid::from_raw(pid), Signal::SIGCONT).unwrap();
            }
        });
        let workers: Vec<_> = (0..2)
            .map(|t| {
                s.spawn({
                    let race = &race;
                    move || race.worker(t)
                })
            })
            .collect();
        for h in workers {
            h.join().unwrap();
        }
        staller.join().unwrap();
    });
    let Race {
        shared,
        node,
        slots,
        direct,
        counts,
        ..
    } = race;
    // The end: every sandbox deleted, what was forgotten collected.
    std::thread::scope(|s| {
        s.spawn(|| {
            nix::sched::setns(&node, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            let st = shared.lock().unwrap();
            for (slot, l) in &st.live {
                cni(Cni::Del, Some((&l.id, &slots[*slot].ns.path())), &direct).unwrap();
            }
            let mut gc = direct.clone();
            gc["cni.dev/valid-attachments"] = json!([]);
            cni(Cni::Gc, None, &gc).unwrap();
        });
    });
    drop(proxy);
    assert!(
        eventually(Duration::from_secs(30), || w.inuse().is_empty()),
        "{:?}",
        w.inuse()
    );
    w.assert_no_host_end();
    let counts = counts.into_inner().unwrap();
    eprintln!(
        "identity race: {STEPS} steps in {:.1} s: {counts:?}",
        started.elapsed().as_secs_f64()
    );
}
