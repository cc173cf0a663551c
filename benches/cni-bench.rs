//! `cni-bench`: warm ADD+DEL latency of eniip-cni against the reference
//! `ptp` + `host-local` plugins doing the same job (a veth pair, an address,
//! routes) in the same namespaces, interleaved so both see the same noise.
//! eniip-cni does more on top: a round trip to eniipd with a durable commit
//! for each of ADD and DEL, and the ENI's table and policy rule.
//!
//! The world is the tests' (tests/cnienv): node, VPC and container
//! namespaces, eniipd against eniip-sim with a warm pool. Each plugin run is
//! a fresh process started straight into the node namespace (a `setns` in
//! the child before `exec`), as a runtime would run it.
//!
//! With `--containerd`: RunPodSandbox under Debian's containerd on the
//! shipped conflist (tests/it/cri.rs; the time is the RPC's own, measured
//! by the CRI client), interleaved with eniip-cni's own ADD run straight,
//! in the same world.
//!
//! With `--storm`: pods started at once under containerd, eniip-cni
//! against the reference plugins (`storm`; `--sizes 50,100` to choose,
//! `--warm-only` to leave out the cold storms).
//!
//! Run: `cargo bench --bench cni-bench [-- --iters N] [--containerd]
//! [--storm [--sizes N,...] [--warm-only]]` as root (prints SKIPPED otherwise).

#[path = "../tests/it/cnienv.rs"]
mod cnienv;
#[path = "../tests/it/common.rs"]
mod common;
#[path = "../tests/it/cri.rs"]
mod cri;
#[path = "../tests/it/shipped.rs"]
mod shipped;
#[path = "storm/mod.rs"]
mod storm;
#[path = "support/mod.rs"]
mod support;

use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::Instant;

use cnienv::{Netns, World};
use serde_json::{json, Value};
use support::{ms, pct};

/// Runs one plugin in `node` and waits; panics on failure.
fn run(node: &File, plugin: &str, cmd: &str, id: &str, netns: &Path, conf: &Value) {
    let ns = node.try_clone().unwrap();
    let mut c = cnienv::plugin_command(&[plugin], cmd);
    c.env("CNI_CONTAINERID", id)
        .env("CNI_NETNS", netns)
        .env("CNI_IFNAME", "eth0");
    // SAFETY: only an async-signal-safe system call between fork and exec.
    #[allow(unsafe_code)]
    unsafe {
        c.pre_exec(move || {
            nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(std::io::Error::from)
        });
    }
    let out = cnienv::feed(c, conf);
    assert!(
        out.status.success(),
        "{plugin} {cmd}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn main() {
    if let Some(code) = storm::as_wrapper() {
        std::process::exit(code);
    }
    let mut iters = None;
    let mut under_containerd = false;
    let mut storm_sizes = None;
    let mut cold = true;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--iters" => iters = Some(args.next().and_then(|s| s.parse().ok()).expect("--iters N")),
            "--containerd" => under_containerd = true,
            "--storm" => storm_sizes = storm_sizes.or(Some(storm::SIZES.to_vec())),
            "--sizes" => {
                let v = args.next().unwrap_or_default();
                let sizes = v
                    .split(',')
                    .map(|n| n.parse().ok().filter(|&n: &usize| n > 0));
                storm_sizes = Some(sizes.collect::<Option<_>>().expect("--sizes N,N,..."));
            }
            "--warm-only" => cold = false,
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    if let Some(sizes) = storm_sizes {
        storm::run(&sizes, cold);
        return;
    }
    if under_containerd {
        containerd(iters.unwrap_or(30));
        return;
    }
    let iters = iters.unwrap_or(200);
    if !cnienv::can_run(
        "cni-bench",
        &["/usr/lib/cni/ptp", "/usr/lib/cni/host-local"],
    ) {
        return;
    }
    let w = World::start("ecs.g7.xlarge", json!({"min_pool_size": 10}));
    let node = File::open(w.node.path()).unwrap();
    let ctr = Netns::new(&format!("eniip-bench-{}", w.tag));
    let eniip_conf = w.conf("1.0.0", json!({}));
    let ipam_dir = common::tempdir("bench-ipam");
    let ptp_conf = json!({
        "cniVersion": "1.0.0",
        "name": "ptp-bench",
        "type": "ptp",
        "mtu": 1500,
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": "10.251.0.0/16"}]],
            "dataDir": ipam_dir.display().to_string(),
        }
    });
    let eniip = cnienv::plugin();
    let ptp = "/usr/lib/cni/ptp";

    // Warm up both (the first ADD waits for the ENI).
    for i in 0..5 {
        let id = format!("warm{i}");
        run(&node, eniip, "ADD", &id, &ctr.path(), &eniip_conf);
        run(&node, eniip, "DEL", &id, &ctr.path(), &eniip_conf);
        run(&node, ptp, "ADD", &id, &ctr.path(), &ptp_conf);
        run(&node, ptp, "DEL", &id, &ctr.path(), &ptp_conf);
    }
    let (mut e_pair, mut p_pair, mut e_add, mut p_add) = (vec![], vec![], vec![], vec![]);
    for i in 0..iters {
        let id = format!("bench{i}");
        for (plugin, conf, pair, add) in [
            (eniip, &eniip_conf, &mut e_pair, &mut e_add),
            (ptp, &ptp_conf, &mut p_pair, &mut p_add),
        ] {
            let t = Instant::now();
            run(&node, plugin, "ADD", &id, &ctr.path(), conf);
            let a = t.elapsed();
            run(&node, plugin, "DEL", &id, &ctr.path(), conf);
            pair.push(ms(t.elapsed()));
            add.push(ms(a));
        }
    }
    let (e50, e99, p50, p99) = (
        pct(&mut e_pair, 0.5),
        pct(&mut e_pair, 0.99),
        pct(&mut p_pair, 0.5),
        pct(&mut p_pair, 0.99),
    );
    println!("warm ADD+DEL, {iters} pairs each, interleaved (ms)");
    println!("{:<28} {:>8} {:>8} {:>10}", "", "p50", "p99", "ADD p50");
    println!(
        "{:<28} {:>8.2} {:>8.2} {:>10.2}",
        "eniip-cni",
        e50,
        e99,
        pct(&mut e_add, 0.5)
    );
    println!(
        "{:<28} {:>8.2} {:>8.2} {:>10.2}",
        "ptp + host-local",
        p50,
        p99,
        pct(&mut p_add, 0.5)
    );
    println!(
        "ratio eniip-cni / reference: p50 {:.2}x, p99 {:.2}x (goal: within 1.3x)",
        e50 / p50,
        e99 / p99
    );
    drop(ctr);
    let _ = std::fs::remove_dir_all(&ipam_dir);
}

/// RunPodSandbox p50/p99 under containerd beside eniip-cni's own ADD.
fn containerd(iters: usize) {
    let tools = cri::tools();
    let tools: Vec<&str> = tools.iter().map(String::as_str).collect();
    if !cnienv::can_run("cni-bench --containerd", &tools) {
        return;
    }
    let w = World::start("ecs.g7.xlarge", json!({"min_pool_size": 10}));
    let c = cri::Containerd::start(&w);
    let node = File::open(w.node.path()).unwrap();
    let ctr = Netns::new(&format!("eniip-bench-{}", w.tag));
    let conf = w.conf("1.0.0", json!({}));
    let eniip = cnienv::plugin();
    let pod = |name: &str| -> f64 {
        let (id, secs) = c
            .run_pod(name, "bench")
            .unwrap_or_else(|e| panic!("RunPodSandbox {name}: {e}\n{}", c.log()));
        c.stop(&id).unwrap();
        c.remove(&id).unwrap();
        secs * 1000.0
    };
    for i in 0..3 {
        pod(&format!("warm{i}"));
        run(&node, eniip, "ADD", "warm", &ctr.path(), &conf);
        run(&node, eniip, "DEL", "warm", &ctr.path(), &conf);
    }
    let (mut runs, mut adds) = (vec![], vec![]);
    for i in 0..iters {
        runs.push(pod(&format!("pod{i}")));
        let t = Instant::now();
        run(&node, eniip, "ADD", "direct", &ctr.path(), &conf);
        adds.push(ms(t.elapsed()));
        run(&node, eniip, "DEL", "direct", &ctr.path(), &conf);
    }
    println!("containerd {iters} pods, one after another, interleaved (ms)");
    println!("{:<40} {:>8} {:>8}", "", "p50", "p99");
    println!(
        "{:<40} {:>8.2} {:>8.2}",
        "RunPodSandbox (containerd 1.6, CRI)",
        pct(&mut runs, 0.5),
        pct(&mut runs, 0.99)
    );
    println!(
        "{:<40} {:>8.2} {:>8.2}",
        "eniip-cni ADD alone",
        pct(&mut adds, 0.5),
        pct(&mut adds, 0.99)
    );
    drop(ctr);
}
