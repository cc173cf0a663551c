//! Wall-clock helpers: UTC timestamps in the `yyyy-MM-ddTHH:mm:ssZ` form the
//! OpenAPI uses, and RFC 3339 parsing of the same (fractional seconds and
//! numeric offsets accepted). Hand-written so the daemon needs no date crate.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Nanoseconds since the Unix epoch (0 before it).
pub fn unix_ns() -> u64 {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Milliseconds since the Unix epoch (0 if the clock is before 1970).
pub fn unix_ms() -> u64 {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Seconds since the Unix epoch (0 if the clock is before 1970).
pub fn unix_secs() -> u64 {
    unix_ms() / 1000
}

/// Days since 1970-01-01 for a proleptic Gregorian date (Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let m = i64::from(m);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Civil date (year, month, day) for days since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Formats Unix seconds as `yyyy-MM-ddTHH:mm:ssZ` (UTC).
pub fn format_utc(secs: u64) -> String {
    let secs = i64::try_from(secs).unwrap_or(i64::MAX / 2);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Formats Unix milliseconds as `yyyy-MM-ddTHH:mm:ss.mmmZ` (UTC), for logs.
pub fn format_utc_ms(ms: u64) -> String {
    let base = format_utc(ms / 1000);
    format!("{}.{:03}Z", &base[..base.len() - 1], ms % 1000)
}

/// The current time as `yyyy-MM-ddTHH:mm:ssZ`.
pub fn now_utc() -> String {
    format_utc(unix_secs())
}

fn digits(s: &[u8]) -> Option<u32> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    s.iter().try_fold(0u32, |acc, c| {
        acc.checked_mul(10)?.checked_add(u32::from(c - b'0'))
    })
}

/// Parses an RFC 3339 / ISO 8601 timestamp (`2024-05-01T12:00:00Z`, optional
/// fraction, `Z` or `+hh:mm`) into Unix seconds. `None` if malformed or
/// before 1970.
pub fn parse_rfc3339(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let year = digits(&b[0..4])?;
    let month = digits(&b[5..7])?;
    let day = digits(&b[8..10])?;
    let hour = digits(&b[11..13])?;
    let min = digits(&b[14..16])?;
    let sec = digits(&b[17..19])?;
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || min > 59 || sec > 60 {
        return None;
    }
    let mut rest = &b[19..];
    if rest.first() == Some(&b'.') {
        let n = rest[1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 {
            return None;
        }
        rest = &rest[1 + n..];
    }
    let offset: i64 = match rest {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let h = i64::from(digits(&[*h1, *h2])?);
            let m = i64::from(digits(&[*m1, *m2])?);
            if h > 23 || m > 59 {
                return None;
            }
            let o = h * 3600 + m * 60;
            if *sign == b'+' {
                o
            } else {
                -o
            }
        }
        _ => return None,
    };
    let days = days_from_civil(i64::from(year), month, day);
    let t = days * 86_400 + i64::from(hour) * 3600 + i64::from(min) * 60 + i64::from(sec) - offset;
    u64::try_from(t).ok()
}

fn days_in_month(y: u32, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400) => 29,
        _ => 28,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(format_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_utc(1_714_564_800), "2024-05-01T12:00:00Z");
        assert_eq!(format_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(format_utc_ms(1_714_564_800_123), "2024-05-01T12:00:00.123Z");
    }

    #[test]
    fn parses_what_it_formats() {
        for t in [0u64, 86_399, 951_782_400, 1_714_564_800, 4_102_444_800] {
            assert_eq!(parse_rfc3339(&format_utc(t)), Some(t));
        }
    }

    #[test]
    fn parses_fractions_and_offsets() {
        assert_eq!(parse_rfc3339("2024-05-01T12:00:00.5Z"), Some(1_714_564_800));
        assert_eq!(
            parse_rfc3339("2024-05-01T14:00:00+02:00"),
            Some(1_714_564_800)
        );
        assert_eq!(
            parse_rfc3339("2024-05-01T10:00:00-02:00"),
            Some(1_714_564_800)
        );
    }

    #[test]
    fn rejects_garbage() {
        for s in [
            "",
            "mock date",
            "2024-13-01T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2024-05-01T24:00:00Z",
            "2024-05-01T12:00:00",
            "2024-05-01T12:00:00.Z",
            "1969-12-31T23:59:59Z",
            "２024-05-01T12:00:00Z",
        ] {
            assert_eq!(parse_rfc3339(s), None, "{s}");
        }
    }
}
