//! Model-based chaos: clients issue random alloc/release (owners repeat)
//! while eniipd is killed with SIGKILL at random moments and restarted,
//! with emulator faults on (20 % Throttling.User, 5 % InternalError,
//! latency spikes, one vswitch exhausted part of the time, metadata lag).
//! The test keeps its own model of what was acknowledged and checks after
//! every restart and at the end:
//! - every acknowledged allocation is held by the same owner, same address;
//! - no address is held by two owners;
//! - every address and ENI in the emulator is known to the daemon, and no
//!   tagged ENI is left unattached;
//! - pending is 0 once idle, and `audit` is consistent.
//!
//! The prefix-mode variant (`ip_prefix`) checks the same, with the cloud's
//! addresses being its secondary addresses and every address of its /28s,
//! so that no prefix is leaked (each one the cloud holds is fully known to
//! the daemon) and no address outside a prefix or the secondary set is
//! handed out; in half the rounds no vswitch has a free /28 (while both
//! have free addresses), so the single-address fallback runs under faults
//! too.
//!
//! Bounded: `ENIIPD_CHAOS_ROUNDS` rounds (default 8, well under a minute),
//! each at most a few seconds of traffic; the dual-stack and prefix
//! variants run half as many. `ENIIPD_CHAOS_ROUNDS=50` is a soak.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{config, eventually, field, tempdir, Daemon, Sim};
use eniip_util::rand::Rng;
use serde_json::json;

/// What the test knows about one owner.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Known {
    /// Acknowledged: holds this address.
    Holds(String),
    /// Acknowledged release (or never allocated).
    Free,
    /// A request was in flight when the daemon died.
    Unknown,
}

#[derive(Default)]
struct Counts {
    allocs: AtomicU64,
    releases: AtomicU64,
    errors: AtomicU64,
    lost_replies: AtomicU64,
}

fn rounds() -> usize {
    std::env::var("ENIIPD_CHAOS_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8)
}

/// The address mode a chaos run exercises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Ipv4,
    Dual,
    Prefix,
}

#[test]
fn chaos_kill_restart_with_faults() {
    chaos(Mode::Ipv4, rounds());
}

/// The same in dual stack (half the rounds): every allocation is a pair,
/// and once settled every managed ENI holds as many IPv6 as IPv4.
#[test]
fn chaos_dual_stack() {
    chaos(Mode::Dual, rounds().div_ceil(2));
}

/// The same in prefix mode (half the rounds): /28s come and go whole, and
/// a vswitch without a free /28 makes the fallback run too.
#[test]
fn chaos_prefix_mode() {
    chaos(Mode::Prefix, rounds().div_ceil(2));
}

// One round loop of kill, restart and check, read top to bottom.
#[allow(clippy::too_many_lines)]
fn chaos(mode: Mode, rounds: usize) {
    let dual = mode == Mode::Dual;
    let seed = std::env::var("ENIIPD_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| Rng::from_entropy().next_u64());
    println!("chaos seed {seed} (ENIIPD_CHAOS_SEED to replay the test's choices)");
    let mut rng = Rng::seeded(seed);
    let (vsw_a, vsw_b) = if dual {
        (
            "vsw-chaosa=10.10.0.0/22,ipv6=2408:4005:3ff:a00::/64,free=1000",
            "vsw-chaosb=10.20.0.0/22,ipv6=2408:4005:3ff:b00::/64,free=1000",
        )
    } else {
        (
            "vsw-chaosa=10.10.0.0/22,free=1000",
            "vsw-chaosb=10.20.0.0/22,free=1000",
        )
    };
    let sim = Sim::start(&[
        "--instance-type",
        "ecs.g7.4xlarge",
        "--vswitch",
        vsw_a,
        "--vswitch",
        vsw_b,
        "--attach-delay-ms",
        "80",
        "--metadata-lag-ms",
        "150",
        "--seed",
        &seed.to_string(),
    ]);
    let dir = tempdir("chaos");
    let zone = sim.state()["instance"]["zone"]
        .as_str()
        .unwrap()
        .to_string();
    let cfg = config(
        &sim,
        &dir,
        json!({"max_pool_size": 3, "vswitches": {zone: ["vsw-chaosa", "vsw-chaosb"]}, "alloc_timeout": 30,
               "ip_stack": if dual { "dual" } else { "ipv4" }, "ip_prefix": mode == Mode::Prefix}),
    );
    let faults = || {
        sim.fault(r#"{"action":"*","code":"Throttling.User","probability":0.2}"#);
        sim.fault(r#"{"action":"*","code":"InternalError","probability":0.05}"#);
        sim.fault(r#"{"action":"*","latency_ms":300,"probability":0.05}"#);
    };
    let owners_per_client = 15;
    let clients = 4;
    let model: Mutex<BTreeMap<String, Known>> = Mutex::new(BTreeMap::new());
    let counts = Counts::default();
    let mut kills = 0;
    let mut exhausted_rounds = 0;
    for round in 0..rounds {
        // Faults off while the daemon starts, so start-up does not spend
        // its retry budget; on for the traffic.
        sim.clear_faults();
        let mut d = Daemon::start(&dir, &cfg);
        check_restart(&sim, &d, &model, round, mode);
        faults();
        let exhaust = rng.below(2) == 0;
        if exhaust {
            exhausted_rounds += 1;
            if mode == Mode::Prefix {
                // Fragmented: free addresses, but no free /28 anywhere.
                for v in ["vsw-chaosa", "vsw-chaosb"] {
                    sim.vswitch(&format!(r#"{{"id":"{v}","free":1000,"free_prefixes":0}}"#));
                }
            } else {
                sim.set_free("vsw-chaosb", 0);
            }
        } else {
            sim.set_free("vsw-chaosb", 1000);
            if mode == Mode::Prefix {
                for v in ["vsw-chaosa", "vsw-chaosb"] {
                    sim.vswitch(&format!(r#"{{"id":"{v}","free_prefixes":null}}"#));
                }
            }
        }
        let stop = AtomicBool::new(false);
        let kill_after = Duration::from_millis(500 + rng.below(2500));
        let seeds: Vec<u64> = (0..clients).map(|_| rng.next_u64()).collect();
        let sock = d.socket.clone();
        std::thread::scope(|s| {
            for (c, seed) in seeds.iter().enumerate() {
                let (sock, model, counts, stop) = (&sock, &model, &counts, &stop);
                let mut r = Rng::seeded(*seed);
                s.spawn(move || {
                    let until = Instant::now() + Duration::from_secs(8);
                    while !stop.load(Ordering::SeqCst) && Instant::now() < until {
                        let owner = format!("chaos/c{c}-{}", r.below(owners_per_client));
                        let release = r.below(2) == 0;
                        let line = if release {
                            format!("release {owner}")
                        } else {
                            format!("alloc {owner}")
                        };
                        model.lock().unwrap().insert(owner.clone(), Known::Unknown);
                        let reply = common::try_ask(sock, &line);
                        let mut m = model.lock().unwrap();
                        match reply.as_deref() {
                            Some(l) if l.starts_with("OK ip=") => {
                                counts.allocs.fetch_add(1, Ordering::Relaxed);
                                m.insert(owner, Known::Holds(field(l, "ip")));
                            }
                            Some(l) if l.starts_with("OK released=") => {
                                counts.releases.fetch_add(1, Ordering::Relaxed);
                                m.insert(owner, Known::Free);
                            }
                            Some(_) => {
                                // An ERR changes nothing that was acknowledged
                                // before, but this owner's earlier state is now
                                // only known by asking.
                                counts.errors.fetch_add(1, Ordering::Relaxed);
                            }
                            None => {
                                counts.lost_replies.fetch_add(1, Ordering::Relaxed);
                                return;
                            }
                        }
                        drop(m);
                        std::thread::sleep(Duration::from_millis(r.below(40)));
                    }
                });
            }
            std::thread::sleep(kill_after);
            d.kill9();
            kills += 1;
            stop.store(true, Ordering::SeqCst);
        });
        drop(d);
    }
    sim.clear_faults();
    sim.set_free("vsw-chaosb", 1000);
    let d = Daemon::start(&dir, &cfg);
    check_restart(&sim, &d, &model, rounds, mode);
    assert!(
        eventually(Duration::from_secs(30), || d
            .ok("status")
            .contains(" pending=0 ")),
        "pending never returned to 0"
    );
    assert_eq!(d.ask("audit"), vec!["OK consistent"]);
    println!(
        "chaos ({}): {} rounds, {kills} kill -9, {exhausted_rounds} with a vswitch exhausted; {} allocs, {} releases acknowledged, {} ERR replies, {} replies lost to kills; {} OpenAPI calls made under 20 % Throttling.User, 5 % InternalError and 5 % +300 ms faults",
        match mode {
            Mode::Ipv4 => "IPv4",
            Mode::Dual => "dual stack",
            Mode::Prefix => "prefix mode; exhausted: no free /28",
        },
        rounds,
        counts.allocs.load(Ordering::Relaxed),
        counts.releases.load(Ordering::Relaxed),
        counts.errors.load(Ordering::Relaxed),
        counts.lost_replies.load(Ordering::Relaxed),
        sim.state()["calls"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum::<u64>(),
    );
}

/// Checks right after a restart (nothing in flight yet), and learns the
/// truth about owners whose last request had no reply.
fn check_restart(
    sim: &Sim,
    d: &Daemon,
    model: &Mutex<BTreeMap<String, Known>>,
    round: usize,
    mode: Mode,
) {
    let dual = mode == Mode::Dual;
    let mut m = model.lock().unwrap();
    for (owner, known) in m.iter_mut() {
        let r = d.ask(&format!("show {owner}"));
        let now = if r[0].starts_with("OK ip=") {
            assert!(
                !dual || r[0].contains(" ipv6="),
                "round {round}: {owner} holds no pair: {}",
                r[0]
            );
            Known::Holds(field(&r[0], "ip"))
        } else {
            Known::Free
        };
        match known {
            Known::Unknown => *known = now,
            k => assert_eq!(
                *k, now,
                "round {round}: {owner} acknowledged {k:?} but the daemon says {now:?}"
            ),
        }
    }
    drop(m);
    let list = d.ask("list");
    let mut ips = BTreeSet::new();
    let mut holders = BTreeSet::new();
    let mut known_ips = BTreeMap::new();
    for l in &list[..list.len() - 1] {
        let w: Vec<&str> = l.split(' ').collect();
        assert!(
            ips.insert(w[0].to_string()),
            "round {round}: {} listed twice",
            w[0]
        );
        if w[1] == "inuse" {
            assert!(
                holders.insert(w[2].to_string()),
                "round {round}: {} holds two addresses",
                w[2]
            );
        }
        known_ips.insert(w[0].to_string(), w[3].to_string());
    }
    // The first maintenance pass may be giving idle addresses back right
    // after start: compare once that has settled.
    let mut last = (BTreeMap::new(), BTreeMap::new());
    let settled = eventually(Duration::from_secs(20), || {
        let mut cloud = BTreeMap::new();
        let mut unattached = false;
        let mut unpaired = false;
        for e in sim.managed() {
            unattached |= e["status"] != "InUse";
            // Dual stack: no IPv6 left behind its IPv4, none missing.
            unpaired |= dual
                && e["ipv6s"].as_array().unwrap().len()
                    != e["private_ips"].as_array().unwrap().len();
            for ip in e["private_ips"].as_array().unwrap() {
                cloud.insert(
                    ip.as_str().unwrap().to_string(),
                    e["id"].as_str().unwrap().to_string(),
                );
            }
            // Every address of every /28: a prefix the daemon lost track
            // of shows as addresses it does not list.
            for p in e["ipv4_prefixes"].as_array().into_iter().flatten() {
                assert!(
                    mode == Mode::Prefix,
                    "round {round}: a prefix outside prefix mode: {p}"
                );
                let p: eniip_cloud::Ipv4Prefix = p.as_str().unwrap().parse().unwrap();
                for a in p.addresses() {
                    cloud.insert(a.to_string(), e["id"].as_str().unwrap().to_string());
                }
            }
        }
        let list = d.ask("list");
        let daemon: BTreeMap<String, String> = list[..list.len() - 1]
            .iter()
            .map(|l| {
                let w: Vec<&str> = l.split(' ').collect();
                (w[0].to_string(), w[3].to_string())
            })
            .collect();
        let same = cloud == daemon && !unattached && !unpaired;
        last = (cloud, daemon);
        same
    });
    assert!(
        settled,
        "round {round}: the cloud's addresses and the daemon's differ:\ncloud  {:?}\ndaemon {:?}\nmanaged {:?}",
        last.0, last.1, sim.managed()
    );
    let _ = known_ips;
}
