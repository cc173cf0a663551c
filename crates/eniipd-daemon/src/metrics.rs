//! Process-wide metrics in the Prometheus text exposition format (SPEC
//! section 7). Counters and histograms are recorded where things happen
//! (cloud client, allocator, store); gauges are read from a pool snapshot at
//! render time, so they can never drift from the state they describe.
//!
//! Hand-rolled: a dozen families do not justify a metrics crate, and the
//! official Rust client would pull a second `parking_lot`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::Instant;

use parking_lot::Mutex;

/// Latency buckets (seconds) for requests served from memory or one fsync.
const FAST_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];
/// Latency buckets (seconds) for cloud calls.
const CLOUD_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 60.0,
];

/// Buckets (seconds) for the stages of a request: from 2 microseconds,
/// fine enough below a millisecond to read a median from.
const STAGE_BUCKETS: &[f64] = &[
    0.000_002, 0.000_005, 0.000_01, 0.000_015, 0.000_02, 0.000_03, 0.000_04, 0.000_05, 0.000_075,
    0.000_1, 0.000_15, 0.000_2, 0.000_3, 0.000_5, 0.001, 0.002_5, 0.01, 0.1, 1.0,
];

/// The stages of a request that changes the state, in the order it goes
/// through them (`eniipd_request_stage_seconds{stage}`): where the time
/// of a warm `alloc` goes, beside the disk's share (`commit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// The connection thread: from its request line read to the command
    /// handed to the allocator (parsing, the peer's rights).
    Connection,
    /// The hand-off to the allocator's thread: until it takes the command.
    ToActor,
    /// The allocator's own work on it, its records handed to the store.
    Actor,
    /// The hand-off to the store's thread: until it starts the commit
    /// that carries the records.
    ToCommitter,
    /// The commit: one log frame written and `fdatasync`ed.
    Commit,
    /// From the commit's end to the reply written to the client's socket:
    /// by the store's thread itself when the socket takes it at once
    /// (`server::delivery`), else by the connection's thread once awake.
    Reply,
}

impl Stage {
    const ALL: [Stage; 6] = [
        Stage::Connection,
        Stage::ToActor,
        Stage::Actor,
        Stage::ToCommitter,
        Stage::Commit,
        Stage::Reply,
    ];

    fn name(self) -> &'static str {
        match self {
            Stage::Connection => "connection",
            Stage::ToActor => "to-actor",
            Stage::Actor => "actor",
            Stage::ToCommitter => "to-committer",
            Stage::Commit => "commit",
            Stage::Reply => "reply",
        }
    }
}

/// When the last commit ended, in nanoseconds since [`CLOCK`]: what
/// [`Stage::Reply`] is measured from (exact while one client asks at a
/// time; with many, the latest commit's end).
static COMMITTED_AT: AtomicU64 = AtomicU64::new(0);
static CLOCK: LazyLock<Instant> = LazyLock::new(Instant::now);

/// Notes that a commit ended now, just before its replies are sent.
pub(crate) fn mark_committed() {
    let ns = CLOCK.elapsed().as_nanos() as u64;
    COMMITTED_AT.store(ns, Ordering::Relaxed);
}

/// The end of the latest commit so far, to give
/// [`record_reply_written`].
pub(crate) fn last_commit() -> u64 {
    COMMITTED_AT.load(Ordering::Relaxed)
}

/// Records [`Stage::Reply`] for a reply just written: the time since the
/// latest commit ended, if one ended since `last_commit` (read when the
/// request was handed over; none did if it committed nothing).
pub(crate) fn record_reply_written(last_commit: u64) {
    let now = CLOCK.elapsed().as_nanos() as u64;
    let at = COMMITTED_AT.load(Ordering::Relaxed);
    if at > last_commit && now >= at {
        record_stage(Stage::Reply, (now - at) as f64 / 1e9);
    }
}

#[derive(Debug, Clone)]
struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    fn observe(&mut self, v: f64) {
        if let Some(i) = self.bounds.iter().position(|b| v <= *b) {
            self.counts[i] += 1;
        }
        self.sum += v;
        self.count += 1;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            cumulative += c;
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {cumulative}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum);
        let _ = writeln!(out, "{name}_count{braces} {}", self.count);
    }
}

#[derive(Debug)]
struct Registry {
    alloc_total: BTreeMap<String, u64>,
    alloc_duration: Histogram,
    release_total: BTreeMap<String, u64>,
    sandbox_reaped_total: BTreeMap<String, u64>,
    /// The sandbox reaper's last look, once it runs: whether it could not
    /// see every process, and how many sandboxes wait out their grace.
    sandbox_reaper: Option<(bool, u64)>,
    /// The sandbox reaper's looks so far.
    sandbox_reaper_looks: u64,
    openapi_total: BTreeMap<(String, String), u64>,
    openapi_duration: BTreeMap<String, Histogram>,
    metadata_total: BTreeMap<String, u64>,
    commit_duration: Histogram,
    connections_rejected: u64,
    /// By [`Stage`], in its order.
    stages: [Histogram; 6],
}

static REGISTRY: LazyLock<Mutex<Registry>> = LazyLock::new(|| {
    Mutex::new(Registry {
        alloc_total: BTreeMap::new(),
        alloc_duration: Histogram::new(FAST_BUCKETS),
        release_total: BTreeMap::new(),
        sandbox_reaped_total: BTreeMap::new(),
        sandbox_reaper: None,
        sandbox_reaper_looks: 0,
        openapi_total: BTreeMap::new(),
        openapi_duration: BTreeMap::new(),
        metadata_total: BTreeMap::new(),
        commit_duration: Histogram::new(FAST_BUCKETS),
        connections_rejected: 0,
        stages: std::array::from_fn(|_| Histogram::new(STAGE_BUCKETS)),
    })
});

/// One more in the count of `key`.
fn bump(counts: &mut BTreeMap<String, u64>, key: &str) {
    *counts.entry(key.to_string()).or_default() += 1;
}

/// Records one `alloc` answer (`result` is `ok` or an error code) and how
/// long it took.
pub(crate) fn record_alloc(result: &str, seconds: f64) {
    let mut r = REGISTRY.lock();
    bump(&mut r.alloc_total, result);
    r.alloc_duration.observe(seconds);
}

/// Records one `release` answer (`ok`, `none` or an error code).
pub(crate) fn record_release(result: &str) {
    bump(&mut REGISTRY.lock().release_total, result);
}

/// Records one allocation released by the sandbox reaper, by why its
/// sandbox was taken for gone (`netns-gone`, `netns-empty`).
pub(crate) fn record_reaped(reason: &str) {
    bump(&mut REGISTRY.lock().sandbox_reaped_total, reason);
}

/// The sandbox reaper's last look: `blind` when it could not see every
/// process (it then reaps nothing), `pending` sandboxes found gone that
/// wait out `sandbox_reap_grace`.
/// Each call ends one look, and is counted.
pub(crate) fn set_sandbox_reaper(blind: bool, pending: usize) {
    let mut r = REGISTRY.lock();
    r.sandbox_reaper = Some((blind, pending as u64));
    r.sandbox_reaper_looks += 1;
}

/// Records one OpenAPI attempt: `code` is `OK`, the service's error code,
/// or `transport`/`timeout` when no answer came.
pub(crate) fn record_openapi(action: &str, code: &str, seconds: f64) {
    let mut r = REGISTRY.lock();
    *r.openapi_total
        .entry((action.to_string(), code.to_string()))
        .or_default() += 1;
    r.openapi_duration
        .entry(action.to_string())
        .or_insert_with(|| Histogram::new(CLOUD_BUCKETS))
        .observe(seconds);
}

/// Records one metadata request (`ok`, `not-found`, `error`).
pub(crate) fn record_metadata(result: &str) {
    bump(&mut REGISTRY.lock().metadata_total, result);
}

/// Makes the cloud client's calls counted here (its crate knows no
/// metrics: it tells a recorder). Idempotent.
pub(crate) fn count_cloud_calls() {
    eniip_cloud::telemetry::set_recorder(eniip_cloud::telemetry::Recorder {
        openapi: record_openapi,
        metadata: record_metadata,
    });
}

/// Records one state commit (one fsync, however many records it carried).
pub(crate) fn record_commit(seconds: f64) {
    REGISTRY.lock().commit_duration.observe(seconds);
}

/// Records how long a request that changes the state spent in `stage`.
pub(crate) fn record_stage(stage: Stage, seconds: f64) {
    REGISTRY.lock().stages[stage as usize].observe(seconds);
}

/// Records a connection closed to admit another (SPEC section 4).
pub(crate) fn record_connection_evicted() {
    REGISTRY.lock().connections_rejected += 1;
}

type ConnectionSource = Box<dyn Fn() -> usize + Send + Sync>;

static CONNECTIONS: LazyLock<Mutex<Option<ConnectionSource>>> = LazyLock::new(|| Mutex::new(None));

/// Tells the registry how to count open client connections (the
/// listener's counter; the daemon sets it once the socket serves).
pub(crate) fn set_connection_source(f: ConnectionSource) {
    *CONNECTIONS.lock() = Some(f);
}

/// Open client connections now (0 before a listener is registered).
pub(crate) fn connections() -> u64 {
    CONNECTIONS.lock().as_ref().map(|f| f() as u64).unwrap_or(0)
}

/// Point-in-time values of the pool, supplied by the caller of [`render`].
#[derive(Debug, Clone, Default)]
pub struct Gauges {
    /// IPs by state name (`idle`, `inuse`, ...).
    pub(crate) ips_by_state: Vec<(&'static str, u64)>,
    /// Managed ENIs.
    pub(crate) enis: u64,
    /// Managed ENIs by the security-group set eniipd gave them (`-`: one
    /// with none known yet).
    pub(crate) enis_by_set: Vec<(String, u64)>,
    /// Capacity in IPs.
    pub(crate) capacity: u64,
    /// IPs requested from the cloud and not yet answered.
    pub(crate) pending: u64,
    /// Open client connections.
    pub(crate) connections: u64,
    /// ENI operations in flight.
    pub(crate) eni_ops: u64,
    /// Vswitches currently inhibited for exhaustion.
    pub(crate) inhibited_vswitches: u64,
    /// Prefix mode only: per ENI, its pool IPs in /28 prefixes and as
    /// single addresses (the primary included), and its prefix count.
    pub(crate) eni_modes: Vec<EniModeGauge>,
    /// The exhaustion forecasts: (ceiling, vswitch or "", seconds), only
    /// for what is being used up.
    pub(crate) exhaustion: Vec<(&'static str, String, u64)>,
}

/// How one ENI holds its addresses (prefix mode).
#[derive(Debug, Clone, Default)]
pub(crate) struct EniModeGauge {
    /// The ENI.
    pub(crate) eni: String,
    /// Addresses in its /28 prefixes.
    pub(crate) in_prefixes: u64,
    /// Single addresses, its primary included.
    pub(crate) singles: u64,
    /// Its /28 prefixes.
    pub(crate) prefixes: u64,
    /// Its IPv6 /80 prefixes (dual stack).
    pub(crate) v6_prefixes: u64,
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A metric family: its name, type and help line.
type Family = (&'static str, &'static str, &'static str);

const fn gauge(name: &'static str, help: &'static str) -> Family {
    (name, "gauge", help)
}

const fn counter(name: &'static str, help: &'static str) -> Family {
    (name, "counter", help)
}

const fn histogram(name: &'static str, help: &'static str) -> Family {
    (name, "histogram", help)
}

// The families, in the order eniipd(8) lists them.
const IPS: Family = gauge("eniipd_ips", "Pool IPs by state.");
const ENIS: Family = gauge("eniipd_enis", "Managed ENIs.");
const SET_ENIS: Family = gauge(
    "eniipd_sg_set_enis",
    "Managed ENIs by the security-group set eniipd gave them.",
);
const CAPACITY: Family = gauge(
    "eniipd_capacity_ips",
    "IPs the node can hold on managed ENIs.",
);
const PENDING: Family = gauge(
    "eniipd_pending_ips",
    "IPs asked of the cloud and not yet answered.",
);
const OPEN_CONNECTIONS: Family = gauge("eniipd_connections", "Open client connections.");
const ENI_OPS: Family = gauge(
    "eniipd_eni_operations",
    "ENI create/delete operations in flight.",
);
const INHIBITED: Family = gauge(
    "eniipd_inhibited_vswitches",
    "Vswitches skipped after exhaustion.",
);
const EXHAUSTION: Family = gauge(
    "eniipd_exhaustion_seconds",
    "Seconds until an alloc would fail on this ceiling at the rate it is being used up (0: exhausted; absent: not being used up).",
);
const ENI_IPS: Family = gauge(
    "eniipd_eni_ips",
    "Pool IPs per ENI by how they are held (prefix mode): in /28 prefixes or single.",
);
const ENI_PREFIXES: Family = gauge(
    "eniipd_eni_prefixes",
    "IPv4 /28 prefixes per ENI (prefix mode).",
);
const ENI_V6_PREFIXES: Family = gauge(
    "eniipd_eni_ipv6_prefixes",
    "IPv6 /80 prefixes per ENI (prefix mode, dual stack).",
);
const ALLOCS: Family = counter("eniipd_alloc_total", "alloc answers by result.");
const ALLOC_TIME: Family = histogram("eniipd_alloc_duration_seconds", "Time to answer alloc.");
const RELEASES: Family = counter("eniipd_release_total", "release answers by result.");
const REAPED: Family = counter(
    "eniipd_sandbox_reaped_total",
    "allocations released because their sandbox was gone, by reason.",
);
const REAPER_BLIND: Family = gauge(
    "eniipd_sandbox_reaper_blind",
    "1 while the sandbox reaper cannot see every process (it then reaps nothing).",
);
const REAP_PENDING: Family = gauge(
    "eniipd_sandbox_reap_pending",
    "Sandboxes found gone that wait out sandbox_reap_grace.",
);
const REAPER_LOOKS: Family = counter(
    "eniipd_sandbox_reaper_looks_total",
    "Looks the sandbox reaper made (blind ones included).",
);
const OPENAPI: Family = counter(
    "eniipd_openapi_requests_total",
    "OpenAPI attempts by action and answer code.",
);
const OPENAPI_TIME: Family = histogram(
    "eniipd_openapi_duration_seconds",
    "OpenAPI attempt latency.",
);
const METADATA: Family = counter(
    "eniipd_metadata_requests_total",
    "Metadata requests by result.",
);
const COMMIT_TIME: Family = histogram(
    "eniipd_state_commit_duration_seconds",
    "Time of one durable state commit.",
);
const STAGE_TIME: Family = histogram(
    "eniipd_request_stage_seconds",
    "Time requests that change the state spent in each stage.",
);
const EVICTED: Family = counter(
    "eniipd_connections_evicted_total",
    "Idle connections closed to admit new ones.",
);

fn header(out: &mut String, (name, kind, help): Family) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A family of one value.
fn single(out: &mut String, family: Family, value: u64) {
    header(out, family);
    let _ = writeln!(out, "{} {value}", family.0);
}

/// A family of values told apart by one label.
fn by_label<'a>(
    out: &mut String,
    family: Family,
    label: &str,
    values: impl IntoIterator<Item = (&'a str, u64)>,
) {
    header(out, family);
    for (k, v) in values {
        let _ = writeln!(out, "{}{{{label}=\"{}\"}} {v}", family.0, escape(k));
    }
}

/// A family of values by one label, from the registry's counts.
fn counted(out: &mut String, family: Family, label: &str, counts: &BTreeMap<String, u64>) {
    by_label(
        out,
        family,
        label,
        counts.iter().map(|(k, v)| (k.as_str(), *v)),
    );
}

/// A histogram family without labels.
fn one_histogram(out: &mut String, family: Family, h: &Histogram) {
    header(out, family);
    h.render(out, family.0, "");
}

/// The whole exposition text.
pub fn render(g: &Gauges) -> String {
    let mut out = String::with_capacity(4096);
    let o = &mut out;
    by_label(o, IPS, "state", g.ips_by_state.iter().copied());
    single(o, ENIS, g.enis);
    if !g.enis_by_set.is_empty() {
        let sets = g.enis_by_set.iter().map(|(k, v)| (k.as_str(), *v));
        by_label(o, SET_ENIS, "security_groups", sets);
    }
    single(o, CAPACITY, g.capacity);
    single(o, PENDING, g.pending);
    single(o, OPEN_CONNECTIONS, g.connections);
    single(o, ENI_OPS, g.eni_ops);
    single(o, INHIBITED, g.inhibited_vswitches);
    if !g.exhaustion.is_empty() {
        header(o, EXHAUSTION);
        for (ceiling, vswitch, s) in &g.exhaustion {
            let v = escape(vswitch);
            let _ = writeln!(
                o,
                "{}{{ceiling=\"{ceiling}\",vswitch=\"{v}\"}} {s}",
                EXHAUSTION.0
            );
        }
    }
    if !g.eni_modes.is_empty() {
        header(o, ENI_IPS);
        for m in &g.eni_modes {
            let eni = escape(&m.eni);
            let (p, s) = (m.in_prefixes, m.singles);
            let _ = writeln!(o, "eniipd_eni_ips{{eni=\"{eni}\",mode=\"prefix\"}} {p}");
            let _ = writeln!(o, "eniipd_eni_ips{{eni=\"{eni}\",mode=\"single\"}} {s}");
        }
        let prefixes = g.eni_modes.iter().map(|m| (m.eni.as_str(), m.prefixes));
        by_label(o, ENI_PREFIXES, "eni", prefixes);
        let v6 = g.eni_modes.iter().map(|m| (m.eni.as_str(), m.v6_prefixes));
        by_label(o, ENI_V6_PREFIXES, "eni", v6);
    }

    let r = REGISTRY.lock();
    counted(o, ALLOCS, "result", &r.alloc_total);
    one_histogram(o, ALLOC_TIME, &r.alloc_duration);
    counted(o, RELEASES, "result", &r.release_total);
    counted(o, REAPED, "reason", &r.sandbox_reaped_total);
    if let Some((blind, pending)) = r.sandbox_reaper {
        single(o, REAPER_BLIND, u64::from(blind));
        single(o, REAP_PENDING, pending);
        single(o, REAPER_LOOKS, r.sandbox_reaper_looks);
    }
    header(o, OPENAPI);
    for ((a, c), v) in &r.openapi_total {
        let (a, c) = (escape(a), escape(c));
        let _ = writeln!(o, "{}{{action=\"{a}\",code=\"{c}\"}} {v}", OPENAPI.0);
    }
    header(o, OPENAPI_TIME);
    for (a, h) in &r.openapi_duration {
        h.render(o, OPENAPI_TIME.0, &format!("action=\"{}\"", escape(a)));
    }
    counted(o, METADATA, "result", &r.metadata_total);
    one_histogram(o, COMMIT_TIME, &r.commit_duration);
    single(o, EVICTED, r.connections_rejected);
    header(o, STAGE_TIME);
    for stage in Stage::ALL {
        let labels = format!("stage=\"{}\"", stage.name());
        r.stages[stage as usize].render(o, STAGE_TIME.0, &labels);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_spec_family() {
        record_alloc("ok", 0.002);
        record_release("ok");
        record_openapi("AssignPrivateIpAddresses", "OK", 0.05);
        record_metadata("ok");
        record_commit(0.001);
        record_stage(Stage::Commit, 0.0001);
        set_sandbox_reaper(true, 2);
        let text = render(&Gauges {
            ips_by_state: vec![("idle", 3), ("inuse", 2)],
            enis: 1,
            capacity: 10,
            pending: 0,
            exhaustion: vec![("vswitch", "vsw-a".into(), 1800)],
            ..Gauges::default()
        });
        for family in [
            "eniipd_ips{state=\"idle\"} 3",
            "eniipd_enis 1",
            "eniipd_capacity_ips 10",
            "eniipd_pending_ips 0",
            "eniipd_exhaustion_seconds{ceiling=\"vswitch\",vswitch=\"vsw-a\"} 1800",
            "eniipd_alloc_total{result=\"ok\"}",
            "eniipd_alloc_duration_seconds_bucket{le=\"+Inf\"}",
            "eniipd_release_total{result=\"ok\"}",
            "eniipd_openapi_requests_total{action=\"AssignPrivateIpAddresses\",code=\"OK\"}",
            "eniipd_openapi_duration_seconds_bucket{action=\"AssignPrivateIpAddresses\",le=\"0.05\"}",
            "eniipd_metadata_requests_total{result=\"ok\"}",
            "eniipd_state_commit_duration_seconds_count",
            "eniipd_sandbox_reaper_blind 1",
            "eniipd_sandbox_reap_pending 2",
            "eniipd_request_stage_seconds_bucket{stage=\"commit\",le=\"0.0001\"}",
            "eniipd_request_stage_seconds_count{stage=\"to-actor\"}",
        ] {
            assert!(text.contains(family), "missing {family} in\n{text}");
        }
        // Nothing being used up: no forecast at all.
        assert!(!render(&Gauges::default()).contains("eniipd_exhaustion_seconds"));
        // No line may look like a protocol final line.
        assert!(text
            .lines()
            .all(|l| !l.starts_with("OK") && !l.starts_with("ERR")));
    }
}
