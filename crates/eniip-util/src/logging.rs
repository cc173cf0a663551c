//! Logging: `log` + `env_logger` with our own line format.
//!
//! Under systemd with standard error going to the journal
//! (`$JOURNAL_STREAM` set), lines are `<N>target: message` with no
//! timestamp, so journald keeps the level and adds its own time. Otherwise
//! lines are `2026-12-02T23:59:59.123Z LEVEL target: message`.
//!
//! Anything a client can trigger is logged at debug or through a
//! [`RateLimit`], so a hostile client cannot flood the log.

use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use log::Level;
use parking_lot::Mutex;

/// Dependencies whose logs could carry credentials.
const QUIET: &[&str] = &["ureq", "ureq_proto", "rustls"];

/// The syslog priority journald reads from a `<N>` prefix.
pub fn journal_priority(level: Level) -> u8 {
    match level {
        Level::Error => 3,
        Level::Warn => 4,
        Level::Info => 6,
        Level::Debug | Level::Trace => 7,
    }
}

/// Checks a level or directive string (`info`, `info,eniip_cloud=debug`).
pub fn validate_level(spec: &str) -> Result<(), String> {
    if spec.is_empty() {
        return Err("empty log level".into());
    }
    for part in spec.split(',') {
        let level = match part.split_once('=') {
            Some((module, level)) if !module.is_empty() => level,
            Some(_) => return Err(format!("bad log directive {part:?}")),
            None => part,
        };
        if !["error", "warn", "info", "debug", "trace", "off"]
            .contains(&level.to_ascii_lowercase().as_str())
        {
            return Err(format!(
                "unknown log level {level:?} (error, warn, info, debug, trace)"
            ));
        }
    }
    Ok(())
}

/// Installs the logger. `ENIIPD_LOG`, if set, replaces `level`.
pub fn init(level: &str) -> Result<(), String> {
    let spec = std::env::var("ENIIPD_LOG")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| level.to_string());
    validate_level(&spec)?;
    let journal = std::env::var_os("JOURNAL_STREAM").is_some();
    let mut b = env_logger::Builder::new();
    b.parse_filters(&spec);
    // The HTTP client logs request URIs (which carry SecurityToken) at
    // debug and hex dumps of bodies (role credentials) at trace. Its
    // failures reach us as errors anyway, so it is silenced whatever level
    // is asked for: secrets must never reach a log.
    for module in QUIET {
        b.filter_module(module, log::LevelFilter::Off);
    }
    b.target(env_logger::Target::Stderr);
    if journal {
        b.format(|buf, r| {
            writeln!(
                buf,
                "<{}>{}: {}",
                journal_priority(r.level()),
                r.target(),
                r.args()
            )
        });
    } else {
        b.format(|buf, r| {
            writeln!(
                buf,
                "{} {:<5} {}: {}",
                crate::time::format_utc_ms(crate::time::unix_ms()),
                r.level(),
                r.target(),
                r.args()
            )
        });
    }
    b.try_init().map_err(|e| e.to_string())
}

/// A token bucket for log lines: at most `burst` lines per `interval`;
/// the rest are counted and reported with the next line that passes.
#[derive(Debug)]
pub struct RateLimit {
    burst: u32,
    interval: Duration,
    state: Mutex<(Instant, u32)>,
    suppressed: AtomicU64,
}

impl RateLimit {
    /// `burst` lines per `interval`.
    pub fn new(burst: u32, interval: Duration) -> RateLimit {
        RateLimit {
            burst,
            interval,
            state: Mutex::new((Instant::now(), 0)),
            suppressed: AtomicU64::new(0),
        }
    }

    /// `Some(n)` if a line may be logged now (`n` lines were suppressed
    /// since the last one), `None` if it must be dropped.
    pub fn check(&self) -> Option<u64> {
        let mut st = self.state.lock();
        let now = Instant::now();
        if now.duration_since(st.0) >= self.interval {
            *st = (now, 0);
        }
        if st.1 < self.burst {
            st.1 += 1;
            Some(self.suppressed.swap(0, Ordering::Relaxed))
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

/// Logs through a [`RateLimit`]: `log_limited!(LIMIT, Level::Warn, "...", args)`.
#[macro_export]
macro_rules! log_limited {
    ($limit:expr, $level:expr, $($arg:tt)+) => {
        if let Some(n) = $limit.check() {
            if n > 0 {
                log::log!($level, "{} ({} similar lines suppressed)", format_args!($($arg)+), n);
            } else {
                log::log!($level, $($arg)+);
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities() {
        assert_eq!(journal_priority(Level::Error), 3);
        assert_eq!(journal_priority(Level::Warn), 4);
        assert_eq!(journal_priority(Level::Info), 6);
        assert_eq!(journal_priority(Level::Trace), 7);
    }

    #[test]
    fn levels_are_checked() {
        assert!(validate_level("info").is_ok());
        assert!(validate_level("info,eniip_cloud=debug").is_ok());
        assert!(validate_level("loud").is_err());
        assert!(validate_level("=debug").is_err());
        assert!(validate_level("").is_err());
    }

    #[test]
    fn rate_limit_counts_what_it_drops() {
        let r = RateLimit::new(2, Duration::from_secs(60));
        assert_eq!(r.check(), Some(0));
        assert_eq!(r.check(), Some(0));
        assert_eq!(r.check(), None);
        assert_eq!(r.check(), None);
        let r = RateLimit::new(1, Duration::from_millis(1));
        assert_eq!(r.check(), Some(0));
        assert_eq!(r.check(), None);
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(r.check(), Some(1));
    }
}
