//! RFC 3339 time stamps in UTC from a Unix time, through `jiff` (no calendar arithmetic of our
//! own): report ids and `created` fields, and `serve`'s log lines. Pure; callers read the clock.
//! A time past jiff's range (after 9999-12-30T22:00Z) shows as its last instant, never a panic.

use jiff::tz::Offset;
use jiff::Timestamp;

/// The instant `secs` seconds and `millis` milliseconds after the epoch; past jiff's range, its
/// last instant.
fn instant(secs: u64, millis: u32) -> Timestamp {
    i64::try_from(secs)
        .ok()
        .and_then(|s| Timestamp::new(s, millis.min(999) as i32 * 1_000_000).ok())
        .unwrap_or(Timestamp::MAX)
}

/// `(year, month, day, hour, minute, second)` of a Unix time in UTC.
pub fn civil(secs: u64) -> (i64, u32, u32, u32, u32, u32) {
    let t = Offset::UTC.to_datetime(instant(secs, 0));
    let n = |v: i8| v as u32;
    (i64::from(t.year()), n(t.month()), n(t.day()), n(t.hour()), n(t.minute()), n(t.second()))
}

/// A Unix time as RFC 3339 UTC, e.g. `2026-11-22T05:47:16Z`.
pub fn rfc3339(secs: u64) -> String {
    format!("{:.0}", instant(secs, 0))
}

/// A Unix time in milliseconds as RFC 3339 UTC with milliseconds, e.g.
/// `2026-11-22T05:47:16.123Z` (the log time stamp of `serve`).
pub fn rfc3339_millis(ms: u64) -> String {
    format!("{:.3}", instant(ms / 1000, (ms % 1000) as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_326_436), "2026-11-22T05:47:16Z");
        assert_eq!(civil(1_795_326_436), (2026, 11, 22, 5, 47, 16));
        assert_eq!(civil(951_868_799), (2000, 2, 29, 23, 59, 59));
    }

    #[test]
    fn known_dates_with_milliseconds() {
        assert_eq!(rfc3339_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_millis(7), "1970-01-01T00:00:00.007Z");
        assert_eq!(rfc3339_millis(100), "1970-01-01T00:00:00.100Z", "three digits, always");
        // The last millisecond of a leap day, and the first of the next day.
        assert_eq!(rfc3339_millis(951_868_799_999), "2000-02-29T23:59:59.999Z");
        assert_eq!(rfc3339_millis(951_868_800_000), "2000-03-01T00:00:00.000Z");
        assert_eq!(rfc3339_millis(1_795_326_436_123), "2026-11-22T05:47:16.123Z");
        // Past jiff's range (after 9999): its last instant, never a panic.
        assert_eq!(rfc3339_millis(253_402_300_800_000), "9999-12-30T22:00:00.999Z");
        assert_eq!(rfc3339(u64::MAX), "9999-12-30T22:00:00Z");
        assert_eq!(civil(u64::MAX).0, 9999);
    }
}
