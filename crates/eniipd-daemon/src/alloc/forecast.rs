//! The exhaustion forecast: for each ceiling an `alloc` can fail on (the
//! instance's ENIs and the addresses each holds, `eni_slots`; each
//! configured vswitch's free addresses; in prefix mode the ENIs' slots
//! for new /28s, `prefix`), what is used, the limit, the rate at which it
//! is being used up and the seconds until it is reached.
//!
//! Pure: the actor feeds it samples (the node's own use at each tick,
//! each vswitch's free count at each `DescribeVSwitches` read, see
//! [`super::vswitch_reads`]) with their time on a [`Clock`], and asks it
//! for the ceilings. The rate of a ceiling is the least-squares slope of
//! its samples over a sliding window ([`WINDOW_S`]): under a steady rate
//! it is that rate whatever the phase of the reads against the steps of
//! the use (a read every minute, addresses taken every few seconds), and
//! it follows a change of rate within one window. A ceiling gets a rate
//! only once its samples span [`MIN_SAMPLES`] reads: two reads a step
//! apart would say a rate many times the truth.
//!
//! Invariant: a forecast exists only for a ceiling being used up (a
//! positive rate reaching the limit within [`HORIZON_S`]) or one already
//! reached (forecast 0).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use super::capacity::Capacity;
use crate::pool::PoolState;
use eniip_protocol::core::{Ceiling, CeilingUse, Exhaustion};

/// How far back the rate looks (s on the forecast clock).
pub(crate) const WINDOW_S: f64 = 900.0;
/// Samples a rate needs at least.
pub(crate) const MIN_SAMPLES: usize = 8;
/// Samples kept per ceiling at most.
const MAX_SAMPLES: usize = 64;
/// A forecast further out than this (a week) is no forecast: a node
/// whose use wanders up by a few addresses a day is not running out.
pub(crate) const HORIZON_S: f64 = 7.0 * 86_400.0;

/// The forecast's time base: seconds since the daemon started, times a
/// scale that is 1 except in debug builds whose tests set
/// `ENIIPD_TEST_TIME_SCALE` (a test of a minute's forecast then runs in
/// seconds; every rate and forecast is on this clock).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    start: Instant,
    scale: f64,
}

impl Clock {
    /// The clock the daemon runs on.
    pub(crate) fn new() -> Clock {
        Clock {
            start: Instant::now(),
            scale: test_scale().unwrap_or(1.0),
        }
    }

    /// Seconds at `t`.
    pub(crate) fn at(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.start).as_secs_f64() * self.scale
    }
}

#[cfg(debug_assertions)]
fn test_scale() -> Option<f64> {
    std::env::var("ENIIPD_TEST_TIME_SCALE")
        .ok()?
        .parse()
        .ok()
        .filter(|s: &f64| *s > 0.0 && s.is_finite())
}

#[cfg(not(debug_assertions))]
fn test_scale() -> Option<f64> {
    None
}

/// Samples of one ceiling's use, oldest first, within the window.
#[derive(Debug, Clone, Default)]
pub(crate) struct Series {
    samples: VecDeque<(f64, f64)>,
}

impl Series {
    /// Adds `used` at `t` (s); drops what fell out of the window.
    pub(crate) fn push(&mut self, t: f64, used: f64) {
        if self.samples.back().is_some_and(|(last, _)| t < *last) {
            // A clock never goes back; a sample that does is dropped.
            return;
        }
        self.samples.push_back((t, used));
        while self.samples.len() > MAX_SAMPLES
            || self
                .samples
                .front()
                .is_some_and(|(t0, _)| t - t0 > WINDOW_S)
        {
            self.samples.pop_front();
        }
    }

    /// The least-squares slope (per s) once there are enough samples.
    pub(crate) fn rate(&self) -> Option<f64> {
        let n = self.samples.len();
        if n < MIN_SAMPLES {
            return None;
        }
        let nf = n as f64;
        let (st, su) = self
            .samples
            .iter()
            .fold((0.0, 0.0), |(a, b), (t, u)| (a + t, b + u));
        let (mt, mu) = (st / nf, su / nf);
        let (mut cov, mut var) = (0.0, 0.0);
        for (t, u) in &self.samples {
            cov += (t - mt) * (u - mu);
            var += (t - mt) * (t - mt);
        }
        (var > 0.0).then(|| cov / var)
    }

    /// Forgets every sample (a limit that changed, a vswitch no longer read).
    pub(crate) fn clear(&mut self) {
        self.samples.clear();
    }
}

/// One ceiling's use at a time and its history.
#[derive(Debug, Clone, Default)]
struct Gauge {
    used: u64,
    limit: u64,
    /// When `used` was seen (s on the clock).
    at: f64,
    series: Series,
}

impl Gauge {
    fn observe(&mut self, t: f64, used: u64, limit: u64) {
        self.set(t, used, limit);
        self.series.push(t, used as f64);
    }

    /// The use at `t`, between samples; a new limit starts a new history.
    fn set(&mut self, t: f64, used: u64, limit: u64) {
        if limit != self.limit {
            self.series.clear();
        }
        self.used = used;
        self.limit = limit;
        self.at = t;
    }

    /// As of `now`: a forecast made from a use seen earlier counts down
    /// the time since (a vswitch is read once a minute).
    fn view(&self, ceiling: Ceiling, now: f64) -> CeilingUse {
        let rate = self.series.rate();
        let since = (now - self.at).max(0.0).round() as u64;
        CeilingUse {
            ceiling,
            used: self.used,
            limit: self.limit,
            rate_milli_per_min: rate.map_or(0, |r| (r * 60_000.0).round() as i64),
            forecast_s: forecast(self.used, self.limit, rate).map(|s| s.saturating_sub(since)),
        }
    }
}

/// Seconds until `used` reaches `limit` at `rate` (per s): 0 when reached,
/// `None` when it is not being used up (or not within [`HORIZON_S`]).
pub(crate) fn forecast(used: u64, limit: u64, rate: Option<f64>) -> Option<u64> {
    if limit > 0 && used >= limit {
        return Some(0);
    }
    let rate = rate.filter(|r| *r > 0.0)?;
    let s = (limit - used) as f64 / rate;
    (s <= HORIZON_S).then(|| s.round() as u64)
}

/// The node's use of each ceiling, sampled.
#[derive(Debug, Clone, Default)]
pub(crate) struct Forecast {
    eni_slots: Gauge,
    prefix: Option<Gauge>,
    vswitches: BTreeMap<String, Gauge>,
    /// The latest time it was told of (s on the clock).
    now: f64,
    /// Ceilings whose forecast is under the warning threshold and was
    /// logged (logged again only once it was over it in between).
    warned: BTreeSet<Ceiling>,
}

/// What the node uses of its own ceilings at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NodeUse {
    /// Addresses no new owner can have (in use, reserved, cooling).
    pub(crate) addresses: u64,
    /// Addresses the node can hold.
    pub(crate) capacity: u64,
    /// Prefix mode: IPv4 slots taken (/28s and single addresses) and
    /// slots there are.
    pub(crate) slots: Option<(u64, u64)>,
}

impl Forecast {
    /// The node's use at `t`.
    pub(crate) fn observe_node(&mut self, t: f64, u: NodeUse) {
        self.now = self.now.max(t);
        self.eni_slots.observe(t, u.addresses, u.capacity);
        match u.slots {
            Some((used, limit)) => self
                .prefix
                .get_or_insert_with(Gauge::default)
                .observe(t, used, limit),
            None => self.prefix = None,
        }
    }

    /// The node's use now, between ticks (no sample: the rate stays the
    /// ticks').
    pub(crate) fn now(&mut self, t: f64, u: NodeUse) {
        self.now = self.now.max(t);
        self.eni_slots.set(t, u.addresses, u.capacity);
        match (u.slots, &mut self.prefix) {
            (Some((used, limit)), Some(p)) => p.set(t, used, limit),
            (Some((used, limit)), None) => {
                let mut g = Gauge::default();
                g.set(t, used, limit);
                self.prefix = Some(g);
            }
            (None, _) => self.prefix = None,
        }
    }

    /// A vswitch's free count read at `t`, of `limit` addresses.
    pub(crate) fn observe_vswitch(&mut self, t: f64, id: &str, free: u64, limit: u64) {
        let limit = limit.max(free);
        self.now = self.now.max(t);
        self.vswitches
            .entry(id.to_string())
            .or_default()
            .observe(t, limit - free, limit);
    }

    /// Every ceiling: `eni_slots`, `prefix` in prefix mode, each vswitch read.
    pub(crate) fn ceilings(&self) -> Vec<CeilingUse> {
        let now = self.now;
        let mut out = vec![self.eni_slots.view(Ceiling::EniSlots, now)];
        if let Some(p) = &self.prefix {
            out.push(p.view(Ceiling::Prefix, now));
        }
        for (id, g) in &self.vswitches {
            out.push(g.view(Ceiling::VSwitch(id.clone()), now));
        }
        out
    }

    /// The soonest forecast, if anything is being used up.
    pub(crate) fn soonest(&self) -> Option<Exhaustion> {
        self.ceilings()
            .into_iter()
            .filter_map(|c| {
                c.forecast_s.map(|seconds| Exhaustion {
                    seconds,
                    ceiling: c.ceiling,
                })
            })
            .min_by_key(|e| e.seconds)
    }

    /// `eniipd_exhaustion_seconds`: (ceiling, vswitch or "", seconds) of
    /// each ceiling being used up.
    pub(crate) fn gauges(&self) -> Vec<(&'static str, String, u64)> {
        self.ceilings()
            .into_iter()
            .filter_map(|c| {
                let s = c.forecast_s?;
                let v = c.ceiling.vswitch().unwrap_or("").to_string();
                Some((c.ceiling.kind(), v, s))
            })
            .collect()
    }

    /// The forecasts newly under `warn_s` (each once until it is over it
    /// again), for the WARN log.
    pub(crate) fn newly_under(&mut self, warn_s: u64) -> Vec<CeilingUse> {
        let ceilings = self.ceilings();
        let under: Vec<CeilingUse> = ceilings
            .into_iter()
            .filter(|c| c.forecast_s.is_some_and(|s| s < warn_s))
            .collect();
        self.warned
            .retain(|w| under.iter().any(|c| &c.ceiling == w));
        under
            .into_iter()
            .filter(|c| self.warned.insert(c.ceiling.clone()))
            .collect()
    }
}

/// What `pool` uses of the node's own ceilings under `cap`: the
/// addresses no new owner can have against the capacity, and in prefix
/// mode the IPv4 slots taken (/28s and single addresses) against the
/// slots of every usable ENI.
pub(crate) fn node_use(pool: &PoolState, cap: &Capacity) -> NodeUse {
    let c = crate::pool::views::counts(pool);
    let slots = cap.prefix_mode.then(|| {
        let used: usize = pool
            .enis()
            .iter()
            .filter(|e| !e.gone())
            .map(|e| pool.slots_used(e.id()))
            .sum();
        (used as u64, (cap.usable_enis * cap.slots_per_eni) as u64)
    });
    NodeUse {
        addresses: (c.inuse + c.reserved + c.cooling) as u64,
        capacity: cap.total_ips as u64,
        slots,
    }
}

/// Addresses a vswitch of `cidr` (`a.b.c.d/n`) holds for its users: the
/// block less the 4 the VPC reserves (its first and last three); `None`
/// when the CIDR cannot be read.
pub(crate) fn vswitch_limit(cidr: &str) -> Option<u64> {
    let (_, len) = cidr.split_once('/')?;
    let len: u32 = len.parse().ok().filter(|l| *l <= 32)?;
    Some((1u64 << (32 - len)).saturating_sub(4))
}

/// The WARN line for a forecast under `exhaustion_warn_s`.
pub(crate) fn warning(c: &CeilingUse) -> String {
    let rate = c.rate_milli_per_min as f64 / 1000.0;
    match c.forecast_s {
        Some(0) => format!(
            "{} is exhausted: {} of {} used",
            c.ceiling, c.used, c.limit
        ),
        Some(s) => format!(
            "{} will be exhausted in about {}: {} of {} used, {rate:.2} more a minute; new allocations will then fail",
            c.ceiling,
            human(Duration::from_secs(s)),
            c.used,
            c.limit
        ),
        None => String::new(),
    }
}

fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=119 => format!("{s} s"),
        120..=7199 => format!("{} min", s / 60),
        _ => format!("{} h", s / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A use that steps up by `step` every `every` s, read every `read`
    /// s from `phase`: the least-squares rate is the true one within a
    /// few percent once the window holds enough reads.
    fn staircase(step: f64, every: f64, read: f64, phase: f64, reads: usize) -> Option<f64> {
        let mut s = Series::default();
        for i in 0..reads {
            let t = phase + i as f64 * read;
            s.push(t, (t / every).floor() * step);
        }
        s.rate()
    }

    #[test]
    fn a_steady_rate_is_found_whatever_the_phase_of_the_reads() {
        let truth = 3.0 / 5.0;
        for read in [5.0, 10.0, 60.0] {
            for phase in [0.0, 1.3, 2.9, 4.4] {
                // From the first forecast on (MIN_SAMPLES reads) when the
                // reads are at least as far apart as the steps, and from
                // a few more when closer.
                let reads = if read >= 5.0 { MIN_SAMPLES } else { 12 };
                let r = staircase(3.0, 5.0, read, phase, reads).unwrap();
                assert!(
                    (r - truth).abs() / truth < 0.25,
                    "read {read} phase {phase}: {r}"
                );
                let r = staircase(3.0, 5.0, read, phase, 40).unwrap();
                assert!(
                    (r - truth).abs() / truth < 0.05,
                    "read {read} phase {phase}: {r}"
                );
            }
        }
        assert_eq!(staircase(3.0, 5.0, 5.0, 0.0, MIN_SAMPLES - 1), None);
    }

    #[test]
    fn the_window_follows_a_change_of_rate() {
        let mut s = Series::default();
        for i in 0..30 {
            s.push(i as f64 * 60.0, i as f64 * 10.0);
        }
        assert!((s.rate().unwrap() - 10.0 / 60.0).abs() < 1e-9);
        // Then flat for a window: no longer being used up.
        for i in 30..50 {
            s.push(i as f64 * 60.0, 290.0);
        }
        assert!(s.rate().unwrap().abs() < 1e-9);
        // A clock going back is ignored.
        s.push(0.0, 0.0);
        assert!(s.rate().unwrap().abs() < 1e-9);
    }

    #[test]
    fn a_forecast_only_for_what_is_being_used_up() {
        assert_eq!(forecast(10, 100, Some(1.0)), Some(90));
        assert_eq!(forecast(10, 100, Some(0.0)), None);
        assert_eq!(forecast(10, 100, Some(-1.0)), None);
        assert_eq!(forecast(10, 100, None), None);
        assert_eq!(forecast(100, 100, None), Some(0), "reached: exhausted");
        assert_eq!(forecast(0, 1_000_000, Some(0.001)), None, "beyond a week");
        assert_eq!(forecast(0, 0, None), None);
    }

    #[test]
    fn ceilings_and_the_soonest_and_one_warning_each() {
        let mut f = Forecast::default();
        // Samples every 10 s, just enough of them; the last at `last`
        // sees 7 addresses short of the capacity and 450 free.
        let n = MIN_SAMPLES as u64;
        let last = (n - 1) * 10;
        let node = |a| NodeUse {
            addresses: a,
            capacity: n + 6,
            slots: None,
        };
        for i in 0..n {
            let t = i as f64 * 10.0;
            f.observe_node(t, node(i));
            // 1 free address a second less; 1020 in a /22.
            f.observe_vswitch(
                t,
                "vsw-a",
                450 + last - i * 10,
                vswitch_limit("10.0.0.0/22").unwrap(),
            );
            f.observe_vswitch(t, "vsw-b", 900, 1020);
        }
        let c = f.ceilings();
        assert_eq!(c.len(), 3);
        assert_eq!((c[0].used, c[0].limit), (n - 1, n + 6));
        // 7 left at 0.1 a second.
        assert_eq!(c[0].forecast_s, Some(70));
        assert_eq!(c[0].rate_milli_per_min, 6000);
        assert_eq!(c[1].ceiling, Ceiling::VSwitch("vsw-a".into()));
        assert_eq!((c[1].used, c[1].limit), (1020 - 450, 1020));
        assert_eq!(c[1].forecast_s, Some(450));
        assert_eq!(c[2].forecast_s, None, "vsw-b is not being used up");
        assert_eq!(
            f.soonest(),
            Some(Exhaustion {
                seconds: 70,
                ceiling: Ceiling::EniSlots
            })
        );
        let warned = f.newly_under(3600);
        assert_eq!(warned.len(), 2);
        assert!(warning(&warned[0]).starts_with("eni_slots will be exhausted in about 70 s"));
        assert!(warning(&warned[1]).starts_with("vswitch vsw-a will be exhausted"));
        assert!(f.newly_under(3600).is_empty(), "once");
        // Over the threshold, then under again: warned again.
        assert!(f.newly_under(10).is_empty());
        assert_eq!(f.newly_under(3600).len(), 2);
        // Told of a later time, a vswitch read earlier counts down.
        f.now((last + 10) as f64, node(n - 1));
        assert_eq!(f.ceilings()[1].forecast_s, Some(440));
        assert_eq!(f.ceilings()[0].forecast_s, Some(70), "seen now");
        // A new capacity (a reload of max_eni, say) starts a new history.
        f.observe_node(
            (last + 10) as f64,
            NodeUse {
                addresses: 6,
                capacity: 24,
                slots: Some((2, 10)),
            },
        );
        let c = f.ceilings();
        assert_eq!(c[0].forecast_s, None);
        assert_eq!(c[1].ceiling, Ceiling::Prefix);
    }

    #[test]
    fn a_vswitch_holds_its_block_less_four() {
        assert_eq!(vswitch_limit("192.168.0.0/22"), Some(1020));
        assert_eq!(vswitch_limit("192.168.0.0/29"), Some(4));
        assert_eq!(vswitch_limit("x"), None);
        assert_eq!(vswitch_limit("1.2.3.4/33"), None);
    }
}
