//! `cni-bench --storm`: 50, 100 and 150 pods started at once under
//! containerd's CRI (one RunPodSandbox each, all released together from
//! one client, as a kubelet starting a node's pods after a drain), on a
//! warm node (eniipd's pool holds an address for every pod) and a cold
//! one (its pool empty: addresses and ENIs come from the emulator while
//! the pods wait), and the same storm with the reference `ptp` +
//! `host-local` (same containerd, same chained `portmap` and `bandwidth`,
//! same node) in the same run, right after the warm one.
//!
//! Figures, per storm: RunPodSandbox p50/p99/max (the CRI client's own
//! time); the plugin's ADD p50/p99, timed by a wrapper containerd runs in
//! the plugin's place (this bench's own binary by the plugin's name: it
//! starts the real plugin, waits, and logs how long it took); OpenAPI
//! calls per pod (eniip-sim's `/__sim/state` counts, from the storm's
//! start to its last reply); and, for eniip-cni, what its ADD spent in
//! netlink requests (its `ENIIP_CNI_PROFILE` report, which the wrapper
//! asks for): the most it held the kernel's RTNL, with where the rest of
//! its time went (the owner's lock, eniipd, the datapath), and its
//! netlink time by kind of request (which requests cost); and eniipd's
//! own time for the storm's requests, by stage (its
//! `eniipd_request_stage_seconds`, read with the `metrics` verb before
//! and after the storm), beside what ADD waited for it.
//!
//! Before each storm the bench waits (at most two minutes, and prints how
//! long) until the kernel has dismantled the namespaces of the last
//! storm's pods and of the last world ([`settle`]: its count of network
//! namespaces no longer falls and it answers a request that takes RTNL at
//! once): its `cleanup_net` does that later, holding RTNL, and the next
//! storm, whichever plugin's, would pay for it.
//!
//! Everything is inside the tests' world (tests/it/cnienv: node and VPC
//! namespaces, eniipd against eniip-sim on loopback) and containerd's own
//! folders; after each storm every pod is stopped and removed, and each
//! world goes with its containerd. Every CRI call has a deadline
//! (tests/it/cri.py).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::cnienv::{self, World};
use crate::cri::Containerd;
use crate::support::{pct, StageHistogram, STAGES};
use crate::{common, shipped};

/// How many pods each storm starts, by default.
pub(crate) const SIZES: [usize; 3] = [50, 100, 150];
/// An instance whose ENIs hold 203 pod addresses.
const INSTANCE: &str = "ecs.g7.4xlarge";
/// The wrapper's log, in containerd's folder: `PLUGIN COMMAND ID MICROS`.
const TIMES: &str = "plugin-times.log";
/// eniip-cni's profile, in containerd's folder.
const PROFILE: &str = "eniip-profile.log";
/// The longest wait for a warm pool.
const WARM_WITHIN: Duration = Duration::from_secs(180);

/// The plugins the storm times: the name containerd runs, the real one.
fn timed_plugin(name: &str) -> Option<PathBuf> {
    match name {
        "eniip-cni" => Some(PathBuf::from(cnienv::plugin())),
        "ptp" => Some(PathBuf::from("/usr/lib/cni/ptp")),
        _ => None,
    }
}

/// When this binary runs as a timed plugin (containerd ran it by a
/// plugin's name from a storm's bin dir): runs the real plugin with the
/// same stdin, stdout, stderr and environment, logs how long it took,
/// and returns its exit code.
pub(crate) fn as_wrapper() -> Option<i32> {
    let argv0 = PathBuf::from(std::env::args_os().next()?);
    let name = argv0.file_name()?.to_str()?.to_string();
    let real = timed_plugin(&name)?;
    std::env::var_os("CNI_COMMAND")?;
    let dir = argv0.parent()?.parent()?.to_path_buf();
    let mut c = Command::new(real);
    if name == "eniip-cni" {
        c.env(eniip_cni::add_profile::VAR, dir.join(PROFILE));
    }
    let call = format!(
        "{name} {} {}",
        std::env::var("CNI_COMMAND").unwrap_or_default(),
        std::env::var("CNI_CONTAINERID").unwrap_or_default()
    );
    mark(&format!("{call} start"));
    let t = Instant::now();
    let status = c.status();
    let us = t.elapsed().as_micros();
    mark(&format!("{call} end {us}"));
    let line = format!("{call} {us}\n");
    let _ = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(TIMES))
        .and_then(|mut f| f.write_all(line.as_bytes()));
    Some(status.ok().and_then(|s| s.code()).unwrap_or(1))
}

/// The variable that turns [`mark`] on: the path of a tracefs
/// `trace_marker` (containerd passes the bench's environment to the
/// plugins it runs, so the wrapper sees it too).
const TRACE_MARKER: &str = "ENIIP_STORM_TRACE_MARKER";

/// A line in the kernel's trace, when [`TRACE_MARKER`] names a marker
/// file (BENCHMARKS.md, "Pod storms"): each storm's phases and each timed
/// plugin call's start and end, so that a trace of RTNL's waiters and of
/// the kernel's work can be read against the ADDs. Off by default, and
/// not a file probed for: opening a path under `/sys` takes sysfs's lock
/// for reading, the lock a veth's creation waits for under RTNL (what
/// the storms' tail is made of), so the marks cost the storm they time.
fn mark(line: &str) {
    let Some(path) = std::env::var_os(TRACE_MARKER) else {
        return;
    };
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
}

/// One storm's figures (milliseconds).
#[derive(Debug, Default)]
struct Storm {
    label: String,
    pods: usize,
    failed: Vec<String>,
    run: Vec<f64>,
    add: Vec<f64>,
    calls: Option<u64>,
    /// eniip-cni's profile, per ADD: (netlink, lock, eniipd, datapath)
    /// in ms and the netlink requests.
    profile: Vec<([f64; 4], u64)>,
    /// The same ADDs' netlink requests by kind: (kind, requests, ms).
    kinds: Vec<Vec<(String, u64, f64)>>,
    /// The same ADDs' whole time inside the plugin (`total_us`), ms.
    totals: Vec<f64>,
    /// eniipd's stages during the storm, for eniip-cni.
    stages: Option<Vec<StageHistogram>>,
    load: String,
    /// The wait for the kernel before it ([`settle`]).
    settled: Settled,
}

/// The 1-minute load average.
fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split(' ')
        .next()
        .unwrap_or("?")
        .to_string()
}

/// Every OpenAPI call the emulator has answered.
fn calls(w: &World) -> u64 {
    w.sim.state()["calls"]
        .as_object()
        .map(|m| m.values().filter_map(Value::as_u64).sum())
        .unwrap_or(0)
}

/// eniipd's request stages ([`StageHistogram`]), read now.
fn read_stages(w: &World) -> Vec<StageHistogram> {
    StageHistogram::all_of(&w.ask("metrics"))
}

/// Per stage that counted any between two readings: its name, how many,
/// and the bucket bounds (ms) under which half and 99 in 100 of them
/// ended.
fn stage_quantiles(stages: &[StageHistogram]) -> Vec<(&'static str, f64, f64, f64)> {
    STAGES
        .iter()
        .zip(stages)
        .filter(|(_, h)| h.count() > 0.0)
        .map(|(stage, h)| {
            let n = h.count();
            let under = |q: f64| {
                h.buckets
                    .iter()
                    .find(|&&(_, c)| c >= q * n)
                    .map_or(f64::INFINITY, |&(le, _)| le * 1000.0)
            };
            (*stage, n, under(0.5), under(0.99))
        })
        .collect()
}

/// The length of `path` now (where a storm's lines start).
fn len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// The lines of `path` from `from` on.
fn lines_from(path: &Path, from: u64) -> Vec<String> {
    let text = std::fs::read(path).unwrap_or_default();
    let from = usize::try_from(from).unwrap_or(0).min(text.len());
    String::from_utf8_lossy(&text[from..])
        .lines()
        .map(String::from)
        .collect()
}

/// `key=N` of a profile line.
fn field(line: &str, key: &str) -> f64 {
    line.split(' ')
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// `netlink_kinds=KIND:N:US,...` of a profile line: (kind, requests,
/// ms).
fn kinds(line: &str) -> Vec<(String, u64, f64)> {
    let Some(list) = line
        .split(' ')
        .find_map(|w| w.strip_prefix("netlink_kinds="))
    else {
        return Vec::new();
    };
    list.split(',')
        .filter_map(|k| {
            let mut f = k.rsplitn(3, ':');
            let us: f64 = f.next()?.parse().ok()?;
            let n: u64 = f.next()?.parse().ok()?;
            Some((f.next()?.to_string(), n, us / 1000.0))
        })
        .collect()
}

/// A request that takes the kernel's RTNL, this fast, three times in a
/// row, is one sign the kernel is done with what the last storm or world
/// left.
const SETTLED: Duration = Duration::from_millis(5);
/// The other: the kernel's count of network namespaces has not fallen
/// for this long. A removed namespace is dismantled later, by the
/// kernel's `cleanup_net` work, which holds RTNL while it unregisters the
/// namespace's links (a pod's veth, both ends) and frees the namespace
/// last; a fast request alone passes in the gaps between its batches.
const NAMESPACES_STILL: Duration = Duration::from_secs(2);
/// The longest wait for both.
const SETTLE_WITHIN: Duration = Duration::from_secs(120);

/// The kernel's network namespaces, live ones and removed ones not yet
/// dismantled: the `net_namespace` slab's objects in use
/// (/proc/slabinfo, root only); None where it cannot be read.
fn namespaces() -> Option<u64> {
    let slabs = std::fs::read_to_string("/proc/slabinfo").ok()?;
    slabs
        .lines()
        .find_map(|l| l.strip_prefix("net_namespace "))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// What [`settle`] waited for: how long, and the namespaces at its start
/// and end.
#[derive(Debug, Default)]
struct Settled {
    took: Duration,
    namespaces: Option<(u64, u64)>,
    /// It gave up at [`SETTLE_WITHIN`].
    timed_out: bool,
}

/// Waits until the kernel has dismantled what the last storm or world
/// removed (its count of network namespaces no longer falls, see
/// [`NAMESPACES_STILL`], and RTNL is free, see [`SETTLED`]), so that no
/// storm, whichever plugin's, pays for the one before it.
fn settle(w: &World) -> Settled {
    let t = Instant::now();
    let node = std::fs::File::open(w.node.path()).expect("the node namespace");
    let mut nl = eniip_cni::netns::netlink_in(&node).expect("a netlink socket in the node");
    let first = namespaces();
    let (mut count, mut fell) = (first, Instant::now());
    let mut fast = 0;
    loop {
        let probe = Instant::now();
        // lo (ifindex 1) is up already: a change of nothing, under RTNL.
        nl.set_up(1).expect("set lo up in the node");
        fast = if probe.elapsed() < SETTLED {
            fast + 1
        } else {
            0
        };
        let now = namespaces();
        if now < count {
            fell = Instant::now();
        }
        count = now;
        let done = fast >= 3 && (now.is_none() || fell.elapsed() >= NAMESPACES_STILL);
        if done || t.elapsed() >= SETTLE_WITHIN {
            return Settled {
                took: t.elapsed(),
                namespaces: first.zip(now),
                timed_out: !done,
            };
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts `n` pods at once on `c`, then stops and removes every pod.
fn storm(c: &Containerd, w: &World, n: usize, label: &str, prefix: &str) -> Storm {
    mark(&format!("storm {label} settle"));
    let settled = settle(w);
    mark(&format!("storm {label} start"));
    let w = Some(w).filter(|_| !label.starts_with("ptp"));
    let (times, profile) = (c.dir.join(TIMES), c.dir.join(PROFILE));
    let (t0, p0) = (len(&times), len(&profile));
    let calls0 = w.map(calls);
    let stages0 = w.map(read_stages);
    let load = load();
    let out = c
        .cri(&["storm", prefix, "bench", &n.to_string()])
        .unwrap_or_else(|e| panic!("the storm of {n} ({label}): {e}\n{}", c.log()));
    let calls = w.map(calls).zip(calls0).map(|(a, b)| a - b);
    let stages = w
        .map(read_stages)
        .zip(stages0)
        .map(|(a, b)| a.iter().zip(&b).map(|(a, b)| a.since(b)).collect());
    let mut s = Storm {
        label: label.to_string(),
        pods: n,
        calls,
        load,
        settled,
        stages,
        ..Storm::default()
    };
    for p in out.as_array().into_iter().flatten() {
        match p["seconds"].as_f64() {
            Some(secs) => s.run.push(secs * 1000.0),
            None => s.failed.push(format!("{}: {}", p["name"], p["error"])),
        }
    }
    mark(&format!("storm {label} end"));
    let cleaned = c
        .cri(&["clean"])
        .unwrap_or_else(|e| panic!("removing the storm's pods: {e}"));
    assert!(
        cleaned["errors"].as_array().is_some_and(Vec::is_empty),
        "removing the storm's pods: {cleaned}"
    );
    mark(&format!("storm {label} cleaned"));
    for l in lines_from(&times, t0) {
        let f: Vec<&str> = l.split(' ').collect();
        if f.len() == 4 && f[1] == "ADD" {
            s.add.push(f[3].parse::<f64>().unwrap_or(0.0) / 1000.0);
        }
    }
    for l in lines_from(&profile, p0) {
        let ms = |k| field(&l, k) / 1000.0;
        s.profile.push((
            [
                ms("netlink_us"),
                ms("lock_us"),
                ms("eniipd_us"),
                ms("datapath_us"),
            ],
            field(&l, "netlink_requests") as u64,
        ));
        s.kinds.push(kinds(&l));
        s.totals.push(field(&l, "total_us") / 1000.0);
    }
    s
}

/// eniipd's idle addresses (its `status`).
fn idle(w: &World) -> usize {
    w.ask("status")
        .first()
        .and_then(|l| {
            l.split(' ')
                .find_map(|kv| kv.strip_prefix("idle="))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// The reference network: `ptp` + `host-local`, then what the shipped
/// conflist chains.
fn reference_conflist(ipam: &Path) -> Value {
    json!({
        "cniVersion": "1.0.0",
        "name": "ptp-storm",
        "plugins": [
            {
                "type": "ptp",
                "mtu": 1500,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": "10.251.0.0/16"}]],
                    "dataDir": ipam.display().to_string(),
                }
            },
            {"type": "portmap", "capabilities": {"portMappings": true}},
            {"type": "bandwidth", "capabilities": {"bandwidth": true}},
        ]
    })
}

/// A world for `n` pods: warm (the pool filled with `n` addresses) or
/// cold; eniipd at its defaults otherwise.
fn world(n: usize, warm: bool) -> World {
    let pool = if warm {
        json!({"min_pool_size": n, "max_pool_size": n})
    } else {
        json!({"min_pool_size": 0})
    };
    let defaults = json!({"pool_check_interval": 120, "aggregation_window_ms": 300});
    let w = World::start(INSTANCE, common::merged(defaults, pool));
    if warm {
        let full = common::eventually(WARM_WITHIN, || idle(&w) >= n);
        assert!(full, "the pool did not fill with {n} in time: {}", w.diag());
    }
    w
}

/// containerd on the shipped conflist, eniip-cni timed.
fn eniip_containerd(w: &World, me: &Path) -> Containerd {
    Containerd::start_with_conflist(
        w,
        &shipped::shipped_conflist("eniip.conflist"),
        &[("eniip-cni", me.to_path_buf())],
    )
}

/// Runs the storms of `sizes` (the cold ones too when `cold`) and
/// prints the table.
pub(crate) fn run(sizes: &[usize], cold: bool) {
    let tools = crate::cri::tools();
    let mut tools: Vec<&str> = tools.iter().map(String::as_str).collect();
    tools.extend(["/usr/lib/cni/ptp", "/usr/lib/cni/host-local"]);
    if !cnienv::can_run("cni-bench --storm", &tools) {
        return;
    }
    let me = std::env::current_exe().expect("this binary's path");
    let started = Instant::now();
    let mut storms = Vec::new();
    for &n in sizes {
        {
            let w = world(n, true);
            let ipam = common::tempdir("storm-ipam");
            let ours = eniip_containerd(&w, &me);
            let reference = Containerd::start_with_conflist(
                &w,
                &reference_conflist(&ipam),
                &[("ptp", me.clone())],
            );
            storms.push(storm(&ours, &w, n, "eniip-cni, warm", "warm"));
            storms.push(storm(&reference, &w, n, "ptp + host-local", "ref"));
            drop((ours, reference));
            let _ = std::fs::remove_dir_all(&ipam);
        }
        if cold {
            let w = world(n, false);
            let ours = eniip_containerd(&w, &me);
            storms.push(storm(&ours, &w, n, "eniip-cni, cold", "cold"));
        }
    }
    print(&storms, started.elapsed());
}

fn print(storms: &[Storm], took: Duration) {
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "pod storms under containerd 1.6's CRI, {nproc} cores, {:.0} s in all (ms)",
        took.as_secs_f64()
    );
    println!(
        "{:<5} {:<18} {:>5} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6} {:>8} {:>8} {:>5}",
        "pods",
        "",
        "ok",
        "run p50",
        "run p99",
        "run max",
        "ADD p50",
        "ADD p99",
        "calls",
        "RTNL p50",
        "RTNL p99",
        "load"
    );
    for s in storms {
        let (mut run, mut add) = (s.run.clone(), s.add.clone());
        let mut nl: Vec<f64> = s.profile.iter().map(|p| p.0[0]).collect();
        let calls = s.calls.map_or("-".to_string(), |c| {
            format!("{:.2}", c as f64 / s.pods as f64)
        });
        let mut rtnl = |q| {
            if nl.is_empty() {
                "-".to_string()
            } else {
                format!("{:.2}", pct(&mut nl, q))
            }
        };
        let (r50, r99) = (rtnl(0.5), rtnl(0.99));
        println!(
            "{:<5} {:<18} {:>5} {:>8.1} {:>8.1} {:>8.1} {:>8.2} {:>8.2} {:>6} {:>8} {:>8} {:>5}",
            s.pods,
            s.label,
            s.run.len(),
            pct(&mut run, 0.5),
            pct(&mut run, 0.99),
            pct(&mut run, 1.0),
            pct(&mut add, 0.5),
            pct(&mut add, 0.99),
            calls,
            r50,
            r99,
            s.load
        );
        let count = s.settled.namespaces.map_or(String::new(), |(a, b)| {
            format!(", network namespaces {a} -> {b}")
        });
        println!(
            "      (waited {:.1} s for the kernel before it{count}{})",
            s.settled.took.as_secs_f64(),
            if s.settled.timed_out {
                ": gave up, it did not settle"
            } else {
                ""
            }
        );
        for f in s.failed.iter().take(3) {
            println!("      failed: {f}");
        }
    }
    println!();
    println!("eniip-cni's ADD, where the time went (its ENIIP_CNI_PROFILE; ms, p50 / p99)");
    println!(
        "{:<5} {:<18} {:>13} {:>13} {:>13} {:>13} {:>9}",
        "pods", "", "lock", "eniipd", "datapath", "netlink", "requests"
    );
    for s in storms.iter().filter(|s| !s.profile.is_empty()) {
        let col = |i: usize| {
            let mut v: Vec<f64> = s.profile.iter().map(|p| p.0[i]).collect();
            format!("{:.2} / {:.2}", pct(&mut v, 0.5), pct(&mut v, 0.99))
        };
        let mut req: Vec<f64> = s.profile.iter().map(|p| p.1 as f64).collect();
        println!(
            "{:<5} {:<18} {:>13} {:>13} {:>13} {:>13} {:>9.0}",
            s.pods,
            s.label,
            col(1),
            col(2),
            col(3),
            col(0),
            pct(&mut req, 0.5)
        );
    }
    println!();
    println!(
        "eniipd's own time for the storm's requests that change the state, by stage \
         (eniipd_request_stage_seconds: how many, and the bucket bounds in ms that half \
         and 99 in 100 ended under)"
    );
    for s in storms.iter().filter(|s| s.stages.is_some()) {
        let cells: Vec<String> = s
            .stages
            .iter()
            .flat_map(|h| stage_quantiles(h))
            .map(|(stage, n, p50, p99)| format!("{stage} {n:.0}: {} / {}", bound(p50), bound(p99)))
            .collect();
        println!("{:<5} {:<18} {}", s.pods, s.label, cells.join(", "));
    }
    println!();
    println!(
        "eniip-cni's ADD, its netlink requests by kind (a batch's kinds joined by +): \
         requests per ADD, ms per ADD p50 / p99, share of the netlink time"
    );
    for s in storms.iter().filter(|s| !s.kinds.is_empty()) {
        print_kinds(s);
    }
    println!();
    println!("the tail: ADD p90, p95 and the five longest ADDs (ms); eniip-cni's five longest by its profile");
    for s in storms {
        print_tail(s);
    }
    for n in storms
        .iter()
        .map(|s| s.pods)
        .collect::<std::collections::BTreeSet<_>>()
    {
        let of = |label: &str| {
            storms
                .iter()
                .find(|s| s.pods == n && s.label == label)
                .map(|s| pct(&mut s.add.clone(), 0.99))
        };
        if let (Some(e), Some(r)) = (of("eniip-cni, warm"), of("ptp + host-local")) {
            println!(
                "{n} pods, warm: eniip-cni ADD p99 / ptp + host-local ADD p99 = {:.2}x (goal: at most 0.5x)",
                e / r
            );
        }
    }
}

/// A bucket bound in ms as `<=N`; past the last one (1 s), `>1000`.
fn bound(ms: f64) -> String {
    if !ms.is_finite() {
        return ">1000".to_string();
    }
    let n = format!("{ms:.3}");
    format!("<={}", n.trim_end_matches('0').trim_end_matches('.'))
}

/// One storm's slowest ADDs: the wrapper's times, then (eniip-cni)
/// where the five longest by the plugin's own total went.
fn print_tail(s: &Storm) {
    let mut add = s.add.clone();
    add.sort_by(f64::total_cmp);
    let longest: Vec<String> = add
        .iter()
        .rev()
        .take(5)
        .map(|v| format!("{v:.0}"))
        .collect();
    println!(
        "{:<5} {:<18} p90 {:.0}, p95 {:.0}; longest {}",
        s.pods,
        s.label,
        pct(&mut add, 0.9),
        pct(&mut add, 0.95),
        longest.join(", ")
    );
    let mut by_total: Vec<usize> = (0..s.totals.len()).collect();
    by_total.sort_by(|&a, &b| s.totals[b].total_cmp(&s.totals[a]));
    for &i in by_total.iter().take(5) {
        let (p, _) = s.profile[i];
        let kinds: Vec<String> = s.kinds[i]
            .iter()
            .filter(|k| k.2 >= 1.0)
            .map(|k| format!("{} {:.0}", k.0, k.2))
            .collect();
        println!(
            "      total {:.0}: lock {:.0}, eniipd {:.0}, datapath {:.0} (netlink {:.0}: {})",
            s.totals[i],
            p[1],
            p[2],
            p[3],
            p[0],
            kinds.join(", ")
        );
    }
}

/// One storm's netlink requests by kind (see [`kinds`]).
fn print_kinds(s: &Storm) {
    let mut names: Vec<&str> = Vec::new();
    for k in s.kinds.iter().flatten() {
        if !names.contains(&k.0.as_str()) {
            names.push(&k.0);
        }
    }
    let adds = s.kinds.len() as f64;
    let total: f64 = s.kinds.iter().flatten().map(|k| k.2).sum();
    println!("{:<5} {}", s.pods, s.label);
    for name in names {
        let of = |add: &Vec<(String, u64, f64)>| add.iter().find(|k| k.0 == name).cloned();
        let count: u64 = s.kinds.iter().filter_map(of).map(|k| k.1).sum();
        let mut ms: Vec<f64> = s
            .kinds
            .iter()
            .map(|add| of(add).map_or(0.0, |k| k.2))
            .collect();
        let sum: f64 = ms.iter().sum();
        println!(
            "      {:<44} {:>5.2} {:>9.2} / {:>9.2} {:>5.1} %",
            name,
            count as f64 / adds,
            pct(&mut ms, 0.5),
            pct(&mut ms, 0.99),
            if total > 0.0 {
                100.0 * sum / total
            } else {
                0.0
            }
        );
    }
}
