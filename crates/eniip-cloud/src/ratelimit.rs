//! Client-side token buckets, one per OpenAPI action.
//!
//! The defaults are Terway's per-minute figures (a production-tested safe
//! envelope; the real quotas are per account and region and not
//! published). The burst is a tenth of the minute's figure: enough for a
//! cold burst of this node (100 allocations need about 20 calls), while a
//! runaway loop is slowed to the steady rate within seconds instead of
//! spending the account's whole minute.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Calls per minute for an action (Terway's defaults).
pub(crate) fn per_minute(action: &str) -> u32 {
    match action {
        "CreateNetworkInterface" | "AttachNetworkInterface" | "DeleteNetworkInterface" => 500,
        "DetachNetworkInterface" => 400,
        "AssignPrivateIpAddresses"
        | "UnassignPrivateIpAddresses"
        | "AssignIpv6Addresses"
        | "UnassignIpv6Addresses" => 400,
        "DescribeNetworkInterfaces" => 800,
        "DescribeInstanceTypes" => 400,
        "DescribeVSwitches" => 300,
        _ => 500,
    }
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    capacity: f64,
    per_sec: f64,
    at: Instant,
}

impl Bucket {
    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + dt * self.per_sec).min(self.capacity);
        self.at = now;
    }
}

/// Token buckets by action.
#[derive(Debug)]
pub(crate) struct RateLimiter {
    buckets: Mutex<HashMap<String, Bucket>>,
    rate: fn(&str) -> u32,
    burst_divisor: u32,
}

impl Default for RateLimiter {
    fn default() -> RateLimiter {
        RateLimiter::new(per_minute, 10)
    }
}

impl RateLimiter {
    /// Buckets with `rate(action)` calls per minute and a burst of
    /// `rate / burst_divisor` (at least 1).
    pub(crate) fn new(rate: fn(&str) -> u32, burst_divisor: u32) -> RateLimiter {
        RateLimiter {
            buckets: Mutex::new(HashMap::new()),
            rate,
            burst_divisor: burst_divisor.max(1),
        }
    }

    /// Takes a token for `action`, sleeping (without holding the lock)
    /// until one is available. `false` if that would pass `deadline`.
    pub(crate) fn acquire(&self, action: &str, deadline: Instant) -> bool {
        let started = Instant::now();
        loop {
            let wait = {
                let mut b = self.buckets.lock();
                let now = Instant::now();
                let per_min = f64::from((self.rate)(action).max(1));
                let bucket = b.entry(action.to_string()).or_insert_with(|| {
                    let capacity = (per_min / f64::from(self.burst_divisor)).max(1.0);
                    Bucket {
                        tokens: capacity,
                        capacity,
                        per_sec: per_min / 60.0,
                        at: now,
                    }
                });
                bucket.refill(now);
                if bucket.tokens >= 1.0 {
                    bucket.tokens -= 1.0;
                    None
                } else {
                    Some(Duration::from_secs_f64(
                        (1.0 - bucket.tokens) / bucket.per_sec,
                    ))
                }
            };
            let Some(wait) = wait else {
                let waited = started.elapsed();
                if waited > Duration::from_secs(1) {
                    log::debug!("{action}: waited {waited:?} for the client-side rate limit");
                }
                return true;
            };
            if Instant::now() + wait > deadline {
                return false;
            }
            std::thread::sleep(wait);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_terway() {
        assert_eq!(per_minute("AssignPrivateIpAddresses"), 400);
        assert_eq!(per_minute("DescribeNetworkInterfaces"), 800);
        assert_eq!(per_minute("DescribeVSwitches"), 300);
        assert_eq!(per_minute("Whatever"), 500);
    }

    #[test]
    fn burst_then_steady_rate() {
        // 600/min = 10/s, burst 3.
        let r = RateLimiter::new(|_| 600, 200);
        let far = Instant::now() + Duration::from_secs(5);
        let t = Instant::now();
        for _ in 0..3 {
            assert!(r.acquire("A", far));
        }
        assert!(
            t.elapsed() < Duration::from_millis(50),
            "burst is immediate"
        );
        assert!(r.acquire("A", far));
        assert!(
            t.elapsed() >= Duration::from_millis(80),
            "then about 100 ms per token: {:?}",
            t.elapsed()
        );
        // Another action has its own bucket.
        let t = Instant::now();
        assert!(r.acquire("B", far));
        assert!(t.elapsed() < Duration::from_millis(50));
        // A deadline too close is refused without sleeping past it.
        let r = RateLimiter::new(|_| 6, 100);
        assert!(r.acquire("C", far));
        assert!(!r.acquire("C", Instant::now() + Duration::from_millis(100)));
    }
}
