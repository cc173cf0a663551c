//! The account's flow control: per Action, counted the way ECS counts it
//! (doc 437902: per account, per region, per API, in one-minute windows;
//! an API throttled in minute T can be called again only in minute T+1),
//! or, for comparison, as a token bucket refilled evenly over the window.
//!
//! One [`FlowControl`] sits in the gateway and is shared by every instance
//! the emulator serves: that sharing is what makes a fleet's restart a
//! storm. Throttled calls are answered `Throttling.User` (400, "Request
//! was denied due to user flow control.") and counted per Action.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// How calls are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowModel {
    /// Fixed windows: N calls per window, the rest wait for the next one.
    Window,
    /// A bucket of N tokens refilled at N per window, evenly.
    Bucket,
}

impl FlowModel {
    /// Parses `window` or `bucket`.
    pub fn parse(s: &str) -> Result<FlowModel, String> {
        match s {
            "window" => Ok(FlowModel::Window),
            "bucket" => Ok(FlowModel::Bucket),
            other => Err(format!("{other:?}: the model is window or bucket")),
        }
    }
}

/// Per-account limits (calls per minute) the emulator assumes when flow
/// control is on and an Action is not given: Alibaba publishes no numbers
/// (they are in each account's Quota Center), so these are the order of
/// magnitude of a default account's ECS quotas, mutations tighter than
/// reads. `*` is every other Action.
pub(crate) const DEFAULT_LIMITS: &[(&str, u32)] = &[
    ("CreateNetworkInterface", 500),
    ("AttachNetworkInterface", 500),
    ("DetachNetworkInterface", 500),
    ("DeleteNetworkInterface", 500),
    ("AssignPrivateIpAddresses", 1000),
    ("UnassignPrivateIpAddresses", 1000),
    ("AssignIpv6Addresses", 1000),
    ("UnassignIpv6Addresses", 1000),
    ("DescribeNetworkInterfaces", 2000),
    ("DescribeInstanceTypes", 600),
    ("DescribeVSwitches", 600),
    ("*", 1000),
];

/// A limit on the command line: `ACTION=N/min` (`*` for every Action
/// without its own).
pub fn parse_limit(s: &str) -> Result<(String, u32), String> {
    let (action, rate) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: expected ACTION=N/min"))?;
    let n = rate
        .strip_suffix("/min")
        .ok_or_else(|| format!("{s:?}: the rate is counted per minute, as N/min"))?;
    let n: u32 = n
        .parse()
        .map_err(|_| format!("{s:?}: {n:?} is not a number of calls"))?;
    let named =
        action == "*" || (!action.is_empty() && action.chars().all(|c| c.is_ascii_alphanumeric()));
    if !named {
        return Err(format!("{s:?}: {action:?} is not an Action name or *"));
    }
    Ok((action.to_string(), n))
}

/// Flow control settings.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowOptions {
    /// Limits per Action (`*`: the rest); empty: no flow control.
    pub limits: BTreeMap<String, u32>,
    /// The counting model.
    pub model: FlowModel,
    /// The window: one minute, as the service counts; shorter only for
    /// tests (`--flow-window-ms`), so they need not wait a minute.
    pub window: Duration,
}

impl Default for FlowOptions {
    fn default() -> FlowOptions {
        FlowOptions {
            limits: BTreeMap::new(),
            model: FlowModel::Window,
            window: Duration::from_secs(60),
        }
    }
}

impl FlowOptions {
    /// [`DEFAULT_LIMITS`], overridden by `given`.
    pub fn with_defaults(given: &BTreeMap<String, u32>) -> BTreeMap<String, u32> {
        let mut l: BTreeMap<String, u32> = DEFAULT_LIMITS
            .iter()
            .map(|(a, n)| (a.to_string(), *n))
            .collect();
        l.extend(given.iter().map(|(a, n)| (a.clone(), *n)));
        l
    }
}

/// The account's counters.
#[derive(Debug)]
pub(crate) struct FlowControl {
    opts: FlowOptions,
    epoch: Instant,
    /// Per Action: (window index, calls admitted in it).
    windows: HashMap<String, (u64, u32)>,
    /// Per Action: (tokens, when last refilled).
    buckets: HashMap<String, (f64, Instant)>,
    throttled: BTreeMap<String, u64>,
}

impl FlowControl {
    /// Counters starting now.
    pub(crate) fn new(opts: FlowOptions) -> FlowControl {
        FlowControl {
            opts,
            epoch: Instant::now(),
            windows: HashMap::new(),
            buckets: HashMap::new(),
            throttled: BTreeMap::new(),
        }
    }

    fn limit(&self, action: &str) -> Option<u32> {
        self.opts
            .limits
            .get(action)
            .or_else(|| self.opts.limits.get("*"))
            .copied()
    }

    /// Admits one call of `action` at `now`, or answers how long until it
    /// would pass (the `TimeLeft` a throttled answer carries).
    pub(crate) fn admit(&mut self, action: &str, now: Instant) -> Result<(), Duration> {
        let Some(limit) = self.limit(action) else {
            return Ok(());
        };
        let window = self.opts.window.max(Duration::from_millis(1));
        let verdict = match self.opts.model {
            FlowModel::Window => {
                let since = now.saturating_duration_since(self.epoch);
                let index = (since.as_nanos() / window.as_nanos()) as u64;
                let slot = self.windows.entry(action.to_string()).or_insert((index, 0));
                if slot.0 != index {
                    *slot = (index, 0);
                }
                if slot.1 < limit {
                    slot.1 += 1;
                    Ok(())
                } else {
                    let end = window * (index as u32 + 1);
                    Err(end.saturating_sub(since))
                }
            }
            FlowModel::Bucket => {
                let per_sec = f64::from(limit) / window.as_secs_f64();
                let slot = self
                    .buckets
                    .entry(action.to_string())
                    .or_insert((f64::from(limit), now));
                let refill = now.saturating_duration_since(slot.1).as_secs_f64() * per_sec;
                slot.0 = (slot.0 + refill).min(f64::from(limit));
                slot.1 = now;
                if slot.0 >= 1.0 {
                    slot.0 -= 1.0;
                    Ok(())
                } else if per_sec > 0.0 {
                    Err(Duration::from_secs_f64((1.0 - slot.0) / per_sec))
                } else {
                    Err(window)
                }
            }
        };
        if verdict.is_err() {
            *self.throttled.entry(action.to_string()).or_default() += 1;
        }
        verdict
    }

    /// Throttled calls per Action, for `/__sim/state`.
    pub(crate) fn throttled(&self) -> &BTreeMap<String, u64> {
        &self.throttled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fc(model: FlowModel, n: u32) -> FlowControl {
        FlowControl::new(FlowOptions {
            limits: [("AssignPrivateIpAddresses".to_string(), n)].into(),
            model,
            window: Duration::from_secs(60),
        })
    }

    #[test]
    fn a_window_passes_its_quota_then_waits_for_the_next_minute() {
        let mut f = fc(FlowModel::Window, 3);
        let t0 = f.epoch + Duration::from_secs(10);
        for _ in 0..3 {
            assert_eq!(f.admit("AssignPrivateIpAddresses", t0), Ok(()));
        }
        assert_eq!(
            f.admit("AssignPrivateIpAddresses", t0),
            Err(Duration::from_secs(50))
        );
        // Still minute T a second before its end; T+1 passes again.
        let late = f.epoch + Duration::from_secs(59);
        assert!(f.admit("AssignPrivateIpAddresses", late).is_err());
        let next = f.epoch + Duration::from_secs(60);
        assert_eq!(f.admit("AssignPrivateIpAddresses", next), Ok(()));
        assert_eq!(f.throttled()["AssignPrivateIpAddresses"], 2);
        // Unlimited Actions are not counted.
        assert_eq!(f.admit("DescribeVSwitches", t0), Ok(()));
    }

    #[test]
    fn a_bucket_refills_evenly() {
        let mut f = fc(FlowModel::Bucket, 60);
        let t0 = f.epoch;
        for _ in 0..60 {
            assert_eq!(f.admit("AssignPrivateIpAddresses", t0), Ok(()));
        }
        assert!(f.admit("AssignPrivateIpAddresses", t0).is_err());
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(f.admit("AssignPrivateIpAddresses", t1), Ok(()));
        assert!(f.admit("AssignPrivateIpAddresses", t1).is_err());
    }

    #[test]
    fn limits_parse_as_the_manual_says() {
        assert_eq!(
            parse_limit("CreateNetworkInterface=5/min"),
            Ok(("CreateNetworkInterface".into(), 5))
        );
        assert_eq!(parse_limit("*=100/min"), Ok(("*".into(), 100)));
        assert!(parse_limit("Create=5").unwrap_err().contains("N/min"));
        assert!(parse_limit("Create=x/min")
            .unwrap_err()
            .contains("not a number"));
        assert!(parse_limit("a b=1/min").unwrap_err().contains("Action"));
    }
}
