//! Retry policy for OpenAPI calls, as pure functions.
//!
//! Retried (with the same ClientToken and a fresh nonce, timestamp and
//! signature): transport errors and timeouts, HTTP 5xx, `InternalError`,
//! `ServiceUnavailable`, `Throttling*` (waiting what `x-acs-retry-after`,
//! or the older `x-ratelimit` headers' TimeLeft, says, else a capped
//! exponential backoff with jitter,
//! at least 1 s since ECS throttles per minute), `Operation.Conflict` and
//! `InvalidOperation.Conflict`. Never retried: exhaustion, clock skew,
//! credential errors, anything else a client sent wrong. Every call has a
//! budget in attempts and in total time, so a persistent throttle ends in
//! bounded time with a clear error.

use std::time::Duration;

use super::error::{CloudError, CloudErrorKind};

/// Attempt and time budget of one logical call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts at most (1 = no retry).
    pub max_attempts: u32,
    /// Stop retrying once this much time has passed since the first attempt.
    pub max_elapsed: Duration,
    /// First backoff after a 5xx or transport error.
    pub base: Duration,
    /// First backoff after throttling without a TimeLeft header.
    pub throttle_base: Duration,
    /// Largest single backoff.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 6,
            max_elapsed: Duration::from_secs(60),
            base: Duration::from_millis(200),
            throttle_base: Duration::from_secs(1),
            max_delay: Duration::from_secs(20),
        }
    }
}

/// Should this failure be retried?
pub(crate) fn retryable(e: &CloudError) -> bool {
    match e.kind {
        CloudErrorKind::Transport
        | CloudErrorKind::Timeout
        | CloudErrorKind::Throttled
        | CloudErrorKind::Server => true,
        CloudErrorKind::InvalidState => matches!(
            e.code.as_deref(),
            Some("Operation.Conflict" | "InvalidOperation.Conflict")
        ),
        _ => false,
    }
}

/// Milliseconds to wait from `x-ratelimit-*` values such as
/// `Limit:1,Remain:0,TimeLeft:2000,Reset:1234` (the largest TimeLeft).
pub(crate) fn time_left_ms<'a>(headers: impl IntoIterator<Item = &'a str>) -> Option<u64> {
    headers
        .into_iter()
        .filter_map(|h| {
            h.split(',').find_map(|kv| {
                let (k, v) = kv.split_once(':')?;
                (k.trim().eq_ignore_ascii_case("TimeLeft"))
                    .then(|| v.trim().parse::<u64>().ok())
                    .flatten()
            })
        })
        .max()
}

/// Milliseconds a throttled answer asks the client to wait: today's
/// gateway header `x-acs-retry-after` (ms, what the current Tea SDKs read
/// into `ThrottlingException.retry_after`) when it holds a positive
/// number, else the largest TimeLeft of the older `x-ratelimit-*` headers.
pub(crate) fn retry_after_ms<'a>(
    retry_after: Option<&str>,
    ratelimit: impl IntoIterator<Item = &'a str>,
) -> Option<u64> {
    retry_after
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .or_else(|| time_left_ms(ratelimit))
}

/// The wait before attempt `attempt + 1` (attempt counts from 1), given the
/// failure and a jitter factor in `[0.5, 1.5)`. A throttled call with a
/// hint waits the hint plus up to `throttle_base` (the jitter's share).
pub(crate) fn backoff(
    policy: &RetryPolicy,
    attempt: u32,
    e: &CloudError,
    time_left: Option<u64>,
    jitter: f64,
) -> Duration {
    if e.kind == CloudErrorKind::Throttled {
        if let Some(ms) = time_left {
            // The server said when the window reopens; add a little so we
            // are not early. Every node throttled in that window heard the
            // same hint: the jitter spreads their retries over
            // `throttle_base` after it (never before), so they do not all
            // come back on the same second and spend the new window at once.
            let hint = Duration::from_millis(ms + 50).min(policy.max_delay);
            return hint + policy.throttle_base.mul_f64(jitter.clamp(0.5, 1.5) - 0.5);
        }
    }
    let base = if e.kind == CloudErrorKind::Throttled {
        policy.throttle_base
    } else {
        policy.base
    };
    let exp = base.saturating_mul(1u32 << (attempt.saturating_sub(1)).min(16));
    exp.mul_f64(jitter.clamp(0.5, 1.5)).min(policy.max_delay)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(status: u16, code: &str) -> CloudError {
        CloudError::api("X", status, code, "m", None)
    }

    #[test]
    fn what_is_retried() {
        for (status, code) in [
            (400, "Throttling"),
            (400, "Throttling.User"),
            (400, "Throttling.Api"),
            (400, "Rejected.Throttling"),
            (500, "InternalError"),
            (503, "ServiceUnavailable"),
            (502, "BadGateway"),
            (403, "Operation.Conflict"),
            (409, "InvalidOperation.Conflict"),
        ] {
            assert!(retryable(&api(status, code)), "{code}");
        }
        for (status, code) in [
            (403, "InvalidVSwitchId.IpNotEnough"),
            (400, "QuotaExceeded.PrivateIpAddress"),
            (400, "InvalidTimeStamp.Expired"),
            (400, "SignatureDoesNotMatch"),
            (404, "InvalidAccessKeyId.NotFound"),
            (400, "MissingParameter"),
            (400, "InvalidOperation.InvalidEniState"),
            (404, "InvalidEniId.NotFound"),
        ] {
            assert!(!retryable(&api(status, code)), "{code}");
        }
        assert!(retryable(&CloudError::new(
            CloudErrorKind::Transport,
            "X",
            "reset"
        )));
        assert!(retryable(&CloudError::new(
            CloudErrorKind::Timeout,
            "X",
            "slow"
        )));
    }

    #[test]
    fn time_left_headers() {
        assert_eq!(
            time_left_ms(["Limit:1,Remain:0,TimeLeft:2000,Reset:1234"]),
            Some(2000)
        );
        assert_eq!(
            time_left_ms(["Limit:1,Remain:0,TimeLeft:200", "Limit:5, TimeLeft: 900 "]),
            Some(900)
        );
        assert_eq!(time_left_ms(["garbage", "TimeLeft:x"]), None);
        assert_eq!(time_left_ms([]), None);
    }

    #[test]
    fn retry_after_header_first() {
        assert_eq!(
            retry_after_ms(Some("300"), ["Limit:1,Remain:0,TimeLeft:2000"]),
            Some(300)
        );
        assert_eq!(
            retry_after_ms(Some("0"), ["Limit:1,Remain:0,TimeLeft:2000"]),
            Some(2000)
        );
        assert_eq!(
            retry_after_ms(Some("soon"), ["Limit:1,Remain:0,TimeLeft:700"]),
            Some(700)
        );
        assert_eq!(retry_after_ms(Some(" 1500 "), []), Some(1500));
        assert_eq!(retry_after_ms(None, []), None);
    }

    #[test]
    fn backoff_bounds() {
        let p = RetryPolicy::default();
        let t = api(400, "Throttling.User");
        assert_eq!(
            backoff(&p, 1, &t, Some(1000), 0.5),
            Duration::from_millis(1050)
        );
        assert_eq!(backoff(&p, 1, &t, Some(999_999), 0.5), p.max_delay);
        assert_eq!(backoff(&p, 1, &t, None, 1.0), Duration::from_secs(1));
        assert_eq!(backoff(&p, 3, &t, None, 1.0), Duration::from_secs(4));
        let s = api(500, "InternalError");
        assert_eq!(backoff(&p, 1, &s, None, 1.0), Duration::from_millis(200));
        assert_eq!(backoff(&p, 2, &s, None, 1.0), Duration::from_millis(400));
        assert!(backoff(&p, 40, &s, None, 1.5) <= p.max_delay);
        assert_eq!(backoff(&p, 1, &s, None, 9.0), Duration::from_millis(300));
    }

    #[test]
    fn throttle_hints_are_spread_so_a_fleet_does_not_retry_at_once() {
        // N daemons throttled in one window all hear "the window turns in
        // 1000 ms": their retries must land spread over throttle_base
        // after it, never before it.
        let p = RetryPolicy::default();
        let t = api(400, "Throttling.User");
        let hint = Duration::from_millis(1050);
        let waits: Vec<Duration> = [0.5, 0.7, 1.0, 1.3, 1.49]
            .iter()
            .map(|j| backoff(&p, 1, &t, Some(1000), *j))
            .collect();
        assert_eq!(waits[0], hint, "the earliest is the hint itself");
        for w in waits.windows(2) {
            assert!(w[0] < w[1], "{waits:?}: equal jitters, equal seconds");
        }
        assert!(waits
            .iter()
            .all(|w| *w >= hint && *w < hint + p.throttle_base));
        // Capped hints keep their spread too.
        let capped = backoff(&p, 1, &t, Some(999_999), 1.0);
        assert!(capped > p.max_delay && capped <= p.max_delay + p.throttle_base);
    }
}
