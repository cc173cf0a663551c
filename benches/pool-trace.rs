//! `pool-trace`: the same pod-churn traces replayed against eniip-sim for
//! eniipd's pool policy and for the static ones users configure today,
//! through real configuration keys only:
//!
//! - `eniipd`: the defaults (`min_pool_size` 0, `max_pool_size` 5, the
//!   idle target following the allocation rate);
//! - `terway-default`: Terway's sample pool, a fixed 0..5
//!   (`adaptive_pool` false);
//! - `warm-1`, `warm-5`, `warm-16`: WARM_IP_TARGET-style, N idle kept
//!   (`min_pool_size` = `max_pool_size` = N, `adaptive_pool` false).
//!
//! Traces (time compressed: a day is 16 s; arrivals seeded, so every
//! policy replays the same pods): `steady` (Poisson arrivals, 4 a second,
//! exponential lifetimes of 3 s on average), `ramp` (a daily ramp: the
//! rate goes 0.2 -> 8 -> 0.2 a second), `storm` (light churn, then 100 pods
//! at once), `scale-to-zero` (steady churn, then every pod goes and none
//! comes). Every run: an emulator of its own (ecs.g7.4xlarge, 80 ms per
//! call, attaches 300 ms, metadata 100 ms behind), `pool_check_interval`
//! 1 s for every policy (the traces are compressed), the trace started
//! once the pool holds `min_pool_size` idle. The five policies of a trace
//! run side by side.
//!
//! Printed, one line per trace and policy:
//! `pool-trace trace=<name> policy=<name> idle_address_seconds=N
//! p50_wait_ms=N p99_wait_ms=N calls=N`: addresses held but not in use
//! (every pool address that is not `inuse`, sampled every 25 ms) times
//! seconds over the trace; how long each `alloc` waited for its answer;
//! the OpenAPI calls the emulator counted during the trace.
//!
//! Run: `cargo bench --bench pool-trace [-- --json] [--trace NAME]`
//! (`--trace`: that trace only).

#[path = "../tests/it/common.rs"]
mod common;
#[path = "support/mod.rs"]
mod support;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Daemon, Sim};
use eniip_protocol::protocol::client::Client;
use eniip_protocol::protocol::reply::parse_status;
use serde_json::{json, Value};

/// One pod: when it comes (`None`: it is there when the trace starts,
/// allocated before and not measured) and when it goes (`None`: it
/// stays).
#[derive(Debug, Clone, Copy)]
struct Pod {
    arrive: Option<Duration>,
    leave: Option<Duration>,
}

/// A named trace: its pods and how long it lasts.
#[derive(Debug, Clone)]
struct Trace {
    name: &'static str,
    pods: Vec<Pod>,
    length: Duration,
}

/// A small seeded generator (xorshift64*): the same trace for every
/// policy.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Exponential with `mean`.
    fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.next()).ln()
    }
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s.max(0.0))
}

/// Poisson arrivals at `rate(t)` per second over `[from, to)` (thinning
/// under `peak`), each living an exponential `life` on average, leaving
/// by `cut` at the latest when given.
fn churn(
    rng: &mut Rng,
    (from, to): (f64, f64),
    peak: f64,
    rate: impl Fn(f64) -> f64,
    life: f64,
    cut: Option<f64>,
) -> Vec<Pod> {
    let mut pods = Vec::new();
    let mut t = from;
    loop {
        t += rng.exp(1.0 / peak);
        if t >= to {
            return pods;
        }
        if rng.next() * peak > rate(t) {
            continue;
        }
        let mut leave = t + rng.exp(life);
        if let Some(c) = cut {
            leave = leave.min(c + rng.next());
        }
        pods.push(Pod {
            arrive: Some(secs(t)),
            leave: Some(secs(leave)),
        });
    }
}

/// `n` pods there at the start, each leaving after an exponential `life`
/// on average (by `cut` at the latest when given).
fn present(rng: &mut Rng, n: usize, life: f64, cut: Option<f64>) -> Vec<Pod> {
    (0..n)
        .map(|_| {
            let leave = rng.exp(life);
            Pod {
                arrive: None,
                leave: Some(secs(cut.map_or(leave, |c| leave.min(c + rng.next())))),
            }
        })
        .collect()
}

fn traces() -> Vec<Trace> {
    let len = 16.0;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // A node in its steady state: as many pods as the churn keeps.
    let mut steady = present(&mut rng, 12, 3.0, None);
    steady.extend(churn(&mut rng, (0.0, len), 4.0, |_| 4.0, 3.0, None));
    let day = |t: f64| 0.2 + 7.8 * (std::f64::consts::PI * t / len).sin().powi(2);
    let mut ramp = present(&mut rng, 1, 3.0, None);
    ramp.extend(churn(&mut rng, (0.0, len), 8.0, day, 3.0, None));
    let mut storm = present(&mut rng, 3, 3.0, None);
    storm.extend(churn(&mut rng, (0.0, len), 1.0, |_| 1.0, 3.0, None));
    for _ in 0..100 {
        storm.push(Pod {
            arrive: Some(secs(3.0)),
            leave: Some(secs(7.0 + 4.0 * rng.next())),
        });
    }
    let mut zero = present(&mut rng, 12, 3.0, Some(6.0));
    zero.extend(churn(&mut rng, (0.0, 6.0), 4.0, |_| 4.0, 3.0, Some(6.0)));
    vec![
        Trace {
            name: "steady",
            pods: steady,
            length: secs(len),
        },
        Trace {
            name: "ramp",
            pods: ramp,
            length: secs(len),
        },
        Trace {
            name: "storm",
            pods: storm,
            length: secs(len),
        },
        Trace {
            name: "scale-to-zero",
            pods: zero,
            length: secs(len),
        },
    ]
}

fn policies() -> Vec<(&'static str, Value)> {
    let warm = |n: u64| json!({"min_pool_size": n, "max_pool_size": n, "adaptive_pool": false});
    vec![
        ("eniipd", json!({})),
        (
            "terway-default",
            json!({"min_pool_size": 0, "max_pool_size": 5, "adaptive_pool": false}),
        ),
        ("warm-1", warm(1)),
        ("warm-5", warm(5)),
        ("warm-16", warm(16)),
    ]
}

fn status(c: &mut Client) -> Option<eniip_protocol::core::StatusCounts> {
    let r = c.ask_within("status", Duration::from_secs(10)).ok()?;
    parse_status(r.outcome().ok()?).ok()
}

fn calls(sim: &Sim) -> u64 {
    sim.state()["calls"]
        .as_object()
        .map(|m| m.values().filter_map(Value::as_u64).sum())
        .unwrap_or(0)
}

/// One trace under one policy: (idle address-seconds, waits in ms,
/// calls).
fn run(work: &Path, trace: &Trace, (policy, keys): &(&str, Value)) -> (f64, Vec<f64>, u64) {
    let sim = Sim::start(&[
        "--instance-type",
        "ecs.g7.4xlarge",
        "--latency-ms",
        "80",
        "--attach-delay-ms",
        "300",
        "--metadata-lag-ms",
        "100",
    ]);
    let dir = work.join(format!("{}-{policy}", trace.name));
    std::fs::create_dir_all(&dir).expect("a work directory");
    let cfg = common::merged(
        common::merged(
            common::base_config(&sim.ecs, &sim.metadata, &dir),
            json!({"pool_check_interval": 1}),
        ),
        keys.clone(),
    );
    let d = Daemon::start(&dir, &cfg);
    let min = keys["min_pool_size"].as_u64().unwrap_or(0) as usize;
    let mut c = Client::connect(&d.socket, Duration::from_secs(10)).expect("a connection");
    for (i, _) in trace
        .pods
        .iter()
        .enumerate()
        .filter(|(_, p)| p.arrive.is_none())
    {
        let r = c.ask_within(&format!("alloc trace/pod-{i}"), Duration::from_secs(90));
        assert!(
            r.is_ok_and(|r| r.outcome().is_ok()),
            "the pods present at the start"
        );
    }
    let warm = Instant::now() + Duration::from_secs(60);
    while status(&mut c).is_none_or(|s| s.idle < min) && Instant::now() < warm {
        std::thread::sleep(Duration::from_millis(50));
    }
    let before = calls(&sim);
    let t0 = Instant::now();
    let end = t0 + trace.length;
    let done = AtomicBool::new(false);
    let (idle_s, waits) = std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let mut area = 0.0;
            let mut last = Instant::now();
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(25));
                let now = Instant::now();
                if let Some(st) = status(&mut c) {
                    area += (st.ips - st.inuse) as f64 * (now - last).as_secs_f64();
                }
                last = now;
            }
            area
        });
        let pods: Vec<_> = trace
            .pods
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let socket = d.socket.clone();
                s.spawn(move || {
                    let owner = format!("trace/pod-{i}");
                    let mut waited = None;
                    if let Some(arrive) = p.arrive {
                        std::thread::sleep((t0 + arrive).saturating_duration_since(Instant::now()));
                    }
                    let mut c = Client::connect(&socket, Duration::from_secs(10)).ok()?;
                    if p.arrive.is_some() {
                        let asked = Instant::now();
                        let r = c.ask_within(&format!("alloc {owner}"), Duration::from_secs(90));
                        waited = Some(asked.elapsed().as_secs_f64() * 1000.0);
                        r.ok()?.outcome().ok()?;
                    }
                    if let Some(leave) = p.leave.filter(|l| *l < trace.length) {
                        std::thread::sleep((t0 + leave).saturating_duration_since(Instant::now()));
                        let _ = c.ask_within(&format!("release {owner}"), Duration::from_secs(10));
                    }
                    waited
                })
            })
            .collect();
        let mut waits: Vec<f64> = pods
            .into_iter()
            .filter_map(|h| h.join().ok().flatten())
            .collect();
        std::thread::sleep(end.saturating_duration_since(Instant::now()));
        done.store(true, Ordering::Relaxed);
        let area = sampler.join().unwrap_or(0.0);
        waits.sort_by(f64::total_cmp);
        (area, waits)
    });
    let n = calls(&sim) - before;
    drop(d);
    (idle_s, waits, n)
}

/// Every trace, or the one named `only`.
fn measure(work: &Path, only: Option<&str>) -> Value {
    let mut rows = Vec::new();
    for trace in traces()
        .into_iter()
        .filter(|t| only.is_none_or(|o| o == t.name))
    {
        let policies = policies();
        let results: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = policies
                .iter()
                .map(|p| s.spawn(|| run(work, &trace, p)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a run"))
                .collect()
        });
        for ((policy, _), (idle_s, mut waits, calls)) in policies.iter().zip(results) {
            rows.push(json!({
                "trace": trace.name,
                "policy": policy,
                "pods": trace.pods.iter().filter(|p| p.arrive.is_some()).count(),
                "answered": waits.len(),
                "idle_address_seconds": idle_s.round() as u64,
                "p50_wait_ms": support::pct(&mut waits, 0.50).round() as u64,
                "p99_wait_ms": support::pct(&mut waits, 0.99).round() as u64,
                "calls": calls,
            }));
        }
    }
    Value::Array(rows)
}

fn table(report: &Value) {
    for r in report.as_array().into_iter().flatten() {
        println!(
            "pool-trace trace={} policy={} idle_address_seconds={} p50_wait_ms={} p99_wait_ms={} calls={}",
            r["trace"].as_str().unwrap_or("?"),
            r["policy"].as_str().unwrap_or("?"),
            r["idle_address_seconds"],
            r["p50_wait_ms"],
            r["p99_wait_ms"],
            r["calls"],
        );
        let (pods, answered) = (&r["pods"], &r["answered"]);
        if pods != answered {
            eprintln!("pool-trace: {answered} of {pods} allocs answered OK");
        }
    }
}

fn main() {
    let (mut json, mut only) = (false, None);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--json" => json = true,
            "--bench" => {}
            "--trace" => only = args.next(),
            other => support::usage("pool-trace", &format!("unknown argument {other:?}")),
        }
    }
    if let Some(name) = &only {
        if !traces().iter().any(|t| t.name == name) {
            support::usage("pool-trace", &format!("no trace {name:?}"));
        }
    }
    support::run_and_print(
        "pool-trace",
        json,
        |work| measure(work, only.as_deref()),
        table,
    );
}
