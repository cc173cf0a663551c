//! What the harness-less benches share; each is a crate of its own and
//! takes this in with `#[path = "support/mod.rs"] mod support;`, beside
//! the tests' harness (`#[path = "../tests/it/common.rs"] mod common;`,
//! for eniip-sim as a child process and eniipd's config). Here: the end
//! of a bench's `main` (a work directory, the report as a table or JSON),
//! the config file, and the figures
//! (percentiles, milliseconds, a process's `/proc` status, eniipd's
//! request stages from its `metrics`).

// Each bench uses part of it, and `pub` here means "for the benches",
// not an API.
#![allow(unreachable_pub)]
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::common;

/// A usage error of bench `bench`: says so and exits 2.
pub fn usage(bench: &str, msg: &str) -> ! {
    eprintln!("{bench}: {msg}");
    std::process::exit(2)
}

/// Runs `measure` in a fresh work directory (`<bench>-<pid>` in the temp
/// directory, removed after) and prints what it returns: pretty JSON with
/// `json`, else laid out by `table`.
pub fn run_and_print(
    bench: &str,
    json: bool,
    measure: impl FnOnce(&Path) -> Value,
    table: fn(&Value),
) {
    let work = std::env::temp_dir().join(format!("{bench}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).expect("a work directory");
    let report = measure(&work);
    let _ = std::fs::remove_dir_all(&work);
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    } else {
        table(&report);
    }
}

/// Writes `dir/eni.json`: [`common::base_config`] for the emulator at
/// `ecs` and `metadata`, with the keys of `extra`; returns its path.
pub fn write_config(dir: &Path, ecs: &str, metadata: &str, extra: Value) -> PathBuf {
    let c = common::merged(common::base_config(ecs, metadata, dir), extra);
    let p = dir.join("eni.json");
    std::fs::write(&p, serde_json::to_vec(&c).unwrap_or_default()).expect("config");
    p
}

/// The `p` quantile (0 to 1) of `v`, nearest rank; 0 for none.
pub fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i.min(v.len() - 1)]
}

/// `d` in milliseconds.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A number field (`VmRSS:` in KiB, `Threads:`) of `status`, the text of
/// a `/proc/<pid>/status`; 0 if there is none.
pub fn proc_status(status: &str, key: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The stages of a request that changes the state, as eniipd measures
/// them (`eniipd_request_stage_seconds{stage}`), in order. `to-connection`
/// (the connection's thread woken to write the reply) is an older
/// eniipd's (`eniip-bench --eniipd`): since the store's thread writes the
/// reply itself, `reply` counts from the commit's end.
pub const STAGES: [&str; 7] = [
    "connection",
    "to-actor",
    "actor",
    "to-committer",
    "commit",
    "to-connection",
    "reply",
];

/// One stage's histogram as eniipd's `metrics` gives it: its sum
/// (seconds), and its cumulative buckets (upper bound, count), `+Inf`
/// last.
#[derive(Clone, Debug, Default)]
pub struct StageHistogram {
    pub sum: f64,
    pub buckets: Vec<(f64, f64)>,
}

impl StageHistogram {
    /// Each of [`STAGES`]' histograms, in that order, from the lines of
    /// eniipd's `metrics` (empty for a stage it does not measure).
    pub fn all_of<S: AsRef<str>>(metrics: &[S]) -> Vec<StageHistogram> {
        let name = "eniipd_request_stage_seconds";
        STAGES
            .iter()
            .map(|stage| {
                let mut h = StageHistogram::default();
                let sum = format!("{name}_sum{{stage=\"{stage}\"}} ");
                let bucket = format!("{name}_bucket{{stage=\"{stage}\",le=\"");
                for l in metrics.iter().map(AsRef::as_ref) {
                    if let Some(v) = l.strip_prefix(&sum) {
                        h.sum = v.trim().parse().unwrap_or(f64::NAN);
                    } else if let Some((le, n)) =
                        l.strip_prefix(&bucket).and_then(|r| r.split_once("\"} "))
                    {
                        let le = if le == "+Inf" {
                            f64::INFINITY
                        } else {
                            le.parse().unwrap_or(f64::NAN)
                        };
                        h.buckets.push((le, n.trim().parse().unwrap_or(f64::NAN)));
                    }
                }
                h
            })
            .collect()
    }

    /// What was counted between `before` (an earlier reading of the same
    /// eniipd, so the same buckets) and this reading.
    pub fn since(&self, before: &StageHistogram) -> StageHistogram {
        StageHistogram {
            sum: self.sum - before.sum,
            buckets: self
                .buckets
                .iter()
                .zip(&before.buckets)
                .map(|((le, n1), (_, n0))| (*le, n1 - n0))
                .collect(),
        }
    }

    /// How many it counted.
    pub fn count(&self) -> f64 {
        self.buckets.last().map_or(0.0, |b| b.1)
    }
}
