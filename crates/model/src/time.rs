//! UTC calendar arithmetic for RFC 3339 time stamps (H. Hinnant's civil-from-days algorithm), so
//! no crate needs a date library: report ids and `created` fields, and `serve`'s log lines. Pure
//! arithmetic on a Unix time; callers read the clock.

/// `(year, month, day, hour, minute, second)` of a Unix time in UTC.
pub fn civil(secs: u64) -> (i64, u32, u32, u32, u32, u32) {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d, (rem / 3600) as u32, (rem / 60 % 60) as u32, (rem % 60) as u32)
}

/// A Unix time as RFC 3339 UTC, e.g. `2026-11-22T05:47:16Z`.
pub fn rfc3339(secs: u64) -> String {
    let (y, mo, d, h, mi, s) = civil(secs);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

/// A Unix time in milliseconds as RFC 3339 UTC with milliseconds, e.g.
/// `2026-11-22T05:47:16.123Z` (the log time stamp of `serve`).
pub fn rfc3339_millis(ms: u64) -> String {
    let (y, mo, d, h, mi, s) = civil(ms / 1000);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{:03}Z", ms % 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_326_436), "2026-11-22T05:47:16Z");
    }

    #[test]
    fn known_dates_with_milliseconds() {
        assert_eq!(rfc3339_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_millis(7), "1970-01-01T00:00:00.007Z");
        // The last millisecond of a leap day, and the first of the next day.
        assert_eq!(rfc3339_millis(951_868_799_999), "2000-02-29T23:59:59.999Z");
        assert_eq!(rfc3339_millis(951_868_800_000), "2000-03-01T00:00:00.000Z");
        assert_eq!(rfc3339_millis(1_795_326_436_123), "2026-11-22T05:47:16.123Z");
        // Far ahead: a year past 9999 still prints (five digits), never panics.
        assert_eq!(rfc3339_millis(253_402_300_800_000), "10000-01-01T00:00:00.000Z");
    }
}
