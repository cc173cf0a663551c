//! `fleet-bench`: a fleet of eniipd on one account. One eniip-sim with N
//! instances (default 100) and the account's default flow control, N
//! eniipd processes on loopback, each its own instance. Phases:
//!
//! - (a) cold start of the whole fleet at once, to `min_pool_size` idle on
//!   every node;
//! - (b) `kill -9` of all N, then all N started at once;
//! - (c) SIGTERM of all N, then all N started at once;
//!
//! and, on one node of a simulator of its own, (d) 160 allocations in
//! prefix mode arriving 32 at a time.
//!
//! For (a)-(c): time to ready and to a full pool (p50/p99/max over the
//! nodes), OpenAPI calls (all, per node, per action), throttled answers,
//! the nodes that restarted without asking the OpenAPI before ready, and
//! one `alloc` per node once the pool is full (failures must be 0). Beside
//! each time, its bound in the same run: the calls the phase made divided
//! by the quota's rate (the most loaded action's). Memory: the sum of the
//! daemons' RSS. `--json` prints one JSON object.
//!
//! Run: `cargo bench --bench fleet-bench [-- --nodes N] [--json]`.

#[path = "../tests/it/common.rs"]
mod common;
#[path = "support/mod.rs"]
mod support;

use std::collections::BTreeMap;

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{merged, says_ready, Sim};
use serde_json::{json, Value};
use support::{pct, usage, write_config};

const NAME: &str = "fleet-bench";

/// The account's default quotas per minute, as eniip-sim(1) documents
/// them (`--flow-control default`).
fn quota(action: &str) -> f64 {
    match action {
        "CreateNetworkInterface"
        | "AttachNetworkInterface"
        | "DetachNetworkInterface"
        | "DeleteNetworkInterface" => 500.0,
        "DescribeNetworkInterfaces" => 2000.0,
        "DescribeInstanceTypes" | "DescribeVSwitches" => 600.0,
        _ => 1000.0,
    }
}

const MIN_POOL: u64 = 5;

fn main() {
    let mut nodes = 100usize;
    let mut as_json = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--json" => as_json = true,
            "--bench" => {}
            "--nodes" => {
                nodes = args
                    .next()
                    .and_then(|s| s.parse().ok())
                    .filter(|n| *n > 0)
                    .unwrap_or_else(|| usage(NAME, "--nodes needs a count above 0"))
            }
            "--help" | "-h" => {
                println!("cargo bench --bench fleet-bench -- [--nodes N (100)] [--json]");
                return;
            }
            other => usage(NAME, &format!("unknown option {other}")),
        }
    }
    support::run_and_print(NAME, as_json, |work| run(nodes, work), print_table);
}

// ---- processes -------------------------------------------------------------

/// (calls, throttled) per action so far.
fn counters(sim: &Sim) -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
    let s = sim.state();
    let m = |v: &Value| -> BTreeMap<String, u64> {
        v.as_object()
            .map(|o| {
                o.iter()
                    .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
                    .collect()
            })
            .unwrap_or_default()
    };
    (m(&s["calls"]), m(&s["throttled"]))
}

struct Node {
    dir: PathBuf,
    config: PathBuf,
    child: Option<Child>,
    notify: Option<UnixDatagram>,
    started: Instant,
}

impl Node {
    fn new(sim: &Sim, i: usize, work: &Path, extra: Value) -> Node {
        let dir = work.join(format!("node-{i:03}"));
        std::fs::create_dir_all(&dir).expect("node dir");
        let pool = json!({"min_pool_size": MIN_POOL, "max_pool_size": MIN_POOL * 2});
        // Instance i's metadata (the one instance's without --instances).
        let metadata = sim.fleet.get(i).map_or(&sim.metadata, |(_, _, md)| md);
        let config = write_config(&dir, &sim.ecs, metadata, merged(pool, extra));
        Node {
            dir,
            config,
            child: None,
            notify: None,
            started: Instant::now(),
        }
    }

    fn spawn(&mut self) {
        let path = self.dir.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let notify = UnixDatagram::bind(&path).expect("notify socket");
        let _ = notify.set_nonblocking(true);
        let log = std::fs::File::create(self.dir.join("log")).expect("log file");
        self.started = Instant::now();
        self.child = Some(
            Command::new(env!("CARGO_BIN_EXE_eniipd"))
                .arg("--config")
                .arg(&self.config)
                .env("NOTIFY_SOCKET", &path)
                .env("ENIIPD_LOG", "info")
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("eniipd"),
        );
        self.notify = Some(notify);
    }

    /// True once READY=1 came.
    fn ready(&self) -> bool {
        let mut buf = [0u8; 512];
        let Some(n) = &self.notify else { return false };
        while let Ok(k) = n.recv(&mut buf) {
            if says_ready(&buf[..k]) {
                return true;
            }
        }
        false
    }

    /// One request; the final line (`<no answer>` when none came).
    fn ask(&self, line: &str) -> String {
        common::try_ask(&self.dir.join("d.sock"), line).unwrap_or_else(|| "<no answer>".into())
    }

    fn idle(&self) -> u64 {
        self.ask("status")
            .split_whitespace()
            .find_map(|w| w.strip_prefix("idle="))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    fn pid(&self) -> i32 {
        self.child.as_ref().map_or(0, |c| c.id() as i32)
    }

    fn signal(&mut self, sig: nix::sys::signal::Signal) {
        if let Some(mut c) = self.child.take() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(c.id() as i32), sig);
            let _ = c.wait();
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    fn rss_kib(&self) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        support::proc_status(&status, "VmRSS:")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.signal(nix::sys::signal::Signal::SIGKILL);
    }
}

// ---- figures ---------------------------------------------------------------

fn spread(mut v: Vec<f64>) -> Value {
    json!({
        "p50_s": pct(&mut v, 0.5),
        "p99_s": pct(&mut v, 0.99),
        "max_s": pct(&mut v, 1.0),
    })
}

fn diff(after: &BTreeMap<String, u64>, before: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v > 0)
        .collect()
}

/// The calls of a phase divided by the quota's rate: the most loaded
/// action's, in seconds.
fn quota_bound(calls: &BTreeMap<String, u64>) -> f64 {
    calls
        .iter()
        .map(|(a, n)| *n as f64 / (quota(a) / 60.0))
        .fold(0.0, f64::max)
}

/// Starts every node at once (all spawned before any is waited for);
/// the phase's figures once every pool is full and each node served one
/// `alloc`.
fn phase(sim: &Sim, nodes: &mut [Node], key: &str, name: &str) -> Value {
    let (calls0, thr0) = counters(sim);
    let t0 = Instant::now();
    for n in nodes.iter_mut() {
        n.spawn();
    }
    let end = t0 + Duration::from_secs(900);
    let count = nodes.len();
    let mut ready_at: Vec<Option<f64>> = vec![None; count];
    let mut full_at: Vec<Option<f64>> = vec![None; count];
    let mut calls_at_ready = None;
    while full_at.iter().any(Option::is_none) && Instant::now() < end {
        for (i, n) in nodes.iter().enumerate() {
            if ready_at[i].is_none() && n.ready() {
                ready_at[i] = Some(n.started.elapsed().as_secs_f64());
            }
            if ready_at[i].is_some() && full_at[i].is_none() && n.idle() >= MIN_POOL {
                full_at[i] = Some(n.started.elapsed().as_secs_f64());
            }
        }
        if calls_at_ready.is_none() && ready_at.iter().all(Option::is_some) {
            calls_at_ready = Some(diff(&counters(sim).0, &calls0));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let wall = t0.elapsed().as_secs_f64();
    let (calls1, thr1) = counters(sim);
    let calls = diff(&calls1, &calls0);
    let throttled = diff(&thr1, &thr0);
    // One alloc per node, all at once.
    let failed: usize = std::thread::scope(|s| {
        let hs: Vec<_> = nodes
            .iter()
            .map(|n| s.spawn(move || !n.ask(&format!("alloc bench/phase-{key}")).starts_with("OK")))
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or(true) as usize)
            .sum()
    });
    let warm = nodes
        .iter()
        .filter(|n| {
            n.log()
                .contains("restarted from the state files and metadata")
        })
        .count();
    let total: u64 = calls.values().sum();
    let rss: u64 = nodes.iter().map(Node::rss_kib).sum();
    let missing = ready_at.iter().filter(|r| r.is_none()).count()
        + full_at.iter().filter(|r| r.is_none()).count();
    json!({
        "phase": name,
        "nodes": count,
        "ready": spread(ready_at.iter().flatten().copied().collect()),
        "full_pool": spread(full_at.iter().flatten().copied().collect()),
        "wall_s": wall,
        "quota_bound_s": quota_bound(&calls),
        "calls": total,
        "calls_per_node": total as f64 / count as f64,
        "calls_by_action": calls,
        "calls_until_all_ready": calls_at_ready.map(|c| c.values().sum::<u64>()),
        "throttled": throttled.values().sum::<u64>(),
        "throttled_by_action": throttled,
        "warm_restarts": warm,
        "failed_allocs": failed,
        "not_ready_or_not_full": missing,
        "rss_sum_mib": rss as f64 / 1024.0,
    })
}

fn fleet(count: usize, work: &Path) -> Vec<Value> {
    let n = count.to_string();
    let sim = Sim::start(&[
        "--instances",
        &n,
        "--flow-control",
        "default",
        "--vswitch",
        "vsw-bp1sim0000000000000001=10.0.0.0/16,free=65000",
        "--attach-delay-ms",
        "500",
        "--metadata-lag-ms",
        "200",
        "--latency-ms",
        "20",
    ]);
    let mut nodes: Vec<Node> = (0..count)
        .map(|i| Node::new(&sim, i, work, json!({})))
        .collect();
    let mut out = vec![phase(&sim, &mut nodes, "a", "a: cold start")];
    for n in nodes.iter_mut() {
        n.signal(nix::sys::signal::Signal::SIGKILL);
    }
    out.push(phase(&sim, &mut nodes, "b", "b: kill -9, restart"));
    for n in nodes.iter_mut() {
        n.signal(nix::sys::signal::Signal::SIGTERM);
    }
    out.push(phase(&sim, &mut nodes, "c", "c: SIGTERM, restart"));
    out
}

/// (d): 160 allocations in prefix mode, 32 at a time, on one node that
/// may keep 128 idle addresses (8 /28s); then the idle count once the
/// surge is over and a pool check gave back what it added.
fn waves(work: &Path) -> Value {
    let sim = Sim::start(&["--instance-type", "ecs.g7.4xlarge", "--latency-ms", "20"]);
    let dir = work.join("waves");
    std::fs::create_dir_all(&dir).expect("dir");
    let mut node = Node::new(
        &sim,
        0,
        &dir,
        json!({
            "ip_prefix": true,
            "min_pool_size": 0,
            "max_pool_size": 128,
            "pool_check_interval": 2
        }),
    );
    node.spawn();
    let end = Instant::now() + Duration::from_secs(60);
    while !node.ready() {
        assert!(Instant::now() < end, "the prefix node never became ready");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (calls0, _) = counters(&sim);
    let t0 = Instant::now();
    let mut failed = 0;
    for wave in 0..5 {
        failed += std::thread::scope(|s| {
            let hs: Vec<_> = (0..32)
                .map(|i| {
                    let n = &node;
                    s.spawn(move || !n.ask(&format!("alloc wave/{wave}-{i}")).starts_with("OK"))
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap_or(true) as usize)
                .sum::<usize>()
        });
    }
    let wall = t0.elapsed().as_secs_f64();
    let calls = diff(&counters(&sim).0, &calls0);
    let grow = calls.get("CreateNetworkInterface").copied().unwrap_or(0)
        + calls.get("AssignPrivateIpAddresses").copied().unwrap_or(0);
    let idle_after = node.idle();
    // The surge ends 10 s after the pool last ran dry; the next pool check
    // (every 2 s here) gives back what it added.
    let end = Instant::now() + Duration::from_secs(30);
    while node.idle() >= idle_after && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(200));
    }
    json!({
        "phase": "d: 160 allocs, 32 at a time, prefix mode",
        "wall_s": wall,
        "create_assign_calls": grow,
        "calls_by_action": calls,
        "failed_allocs": failed,
        "idle_after_waves": idle_after,
        "idle_after_surge": node.idle(),
        "shrink_back_s": t0.elapsed().as_secs_f64() - wall,
    })
}

fn run(nodes: usize, work: &Path) -> Value {
    let mut phases = fleet(nodes, work);
    phases.push(waves(work));
    json!({"nodes": nodes, "phases": phases})
}

fn print_table(r: &Value) {
    println!(
        "fleet-bench: {} nodes on one account (default flow control)",
        r["nodes"]
    );
    println!(
        "{:<24} {:>20} {:>20} {:>8} {:>7} {:>9} {:>9} {:>6} {:>6} {:>8}",
        "phase",
        "ready p50/p99/max s",
        "full p50/p99/max s",
        "bound s",
        "calls",
        "pre-ready",
        "throttled",
        "warm",
        "failed",
        "RSS MiB"
    );
    let Some(phases) = r["phases"].as_array() else {
        return;
    };
    let f = |v: &Value| v.as_f64().unwrap_or(0.0);
    for p in phases {
        if p.get("ready").is_none() {
            continue;
        }
        let s = |k: &str| {
            format!(
                "{:.2}/{:.2}/{:.2}",
                f(&p[k]["p50_s"]),
                f(&p[k]["p99_s"]),
                f(&p[k]["max_s"])
            )
        };
        println!(
            "{:<24} {:>20} {:>20} {:>8.2} {:>7} {:>9} {:>9} {:>6} {:>6} {:>8.0}",
            p["phase"].as_str().unwrap_or(""),
            s("ready"),
            s("full_pool"),
            f(&p["quota_bound_s"]),
            p["calls"].to_string(),
            p["calls_until_all_ready"].to_string(),
            p["throttled"].to_string(),
            p["warm_restarts"].to_string(),
            p["failed_allocs"].to_string(),
            f(&p["rss_sum_mib"]),
        );
    }
    for p in phases {
        if let Some(m) = p["calls_by_action"].as_object() {
            let list: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
            println!(
                "  {}: {}",
                p["phase"].as_str().unwrap_or(""),
                list.join(" ")
            );
        }
        if p.get("create_assign_calls").is_some() {
            println!(
                "  {}: {} create/assign call(s), {:.2} s, {} failed; idle {} after the waves, {} once the surge was over ({:.1} s later)",
                p["phase"].as_str().unwrap_or(""),
                p["create_assign_calls"],
                f(&p["wall_s"]),
                p["failed_allocs"],
                p["idle_after_waves"],
                p["idle_after_surge"],
                f(&p["shrink_back_s"])
            );
        }
    }
}
