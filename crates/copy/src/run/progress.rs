//! The live progress of a copy as text: one reading of its counters ([`Counts`]), the rate
//! smoothed so that the ETA does not swing ([`Rate`]), the terminal bar's line ([`bar_line`],
//! fitted to a width) and the plain line printed each second without a terminal ([`plain_line`]),
//! both kept at each redraw by a [`Ticker`], which is told the time. Drawing them is the caller's.

use crate::send::Progress;
use linerate_model::units::{format_size, RateUnit};
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

/// One reading of the counters.
#[derive(Debug, Clone, Copy)]
pub struct Counts {
    /// File bytes sent.
    pub bytes: u64,
    /// Bytes found so far.
    pub total: u64,
    /// Files sent.
    pub files: u64,
    /// Files found so far.
    pub found: u64,
    /// The walk is still finding files.
    pub walking: bool,
}

impl Counts {
    fn files_text(&self) -> String {
        let noun = if self.found == 1 && !self.walking { "file" } else { "files" };
        format!("{}/{}{} {noun}", self.files, self.found, if self.walking { "+" } else { "" })
    }

    /// The counters of `p` now.
    pub fn of(p: &Progress) -> Counts {
        Counts {
            bytes: p.bytes.load(Relaxed),
            total: p.found_bytes.load(Relaxed),
            files: p.files.load(Relaxed),
            found: p.found_files.load(Relaxed),
            walking: p.walk_done.load(Relaxed) == 0,
        }
    }
}

/// The end of `name`, at most `width` characters (an ellipsis marks a cut).
pub fn tail(name: &str, width: usize) -> String {
    let n = name.chars().count();
    if n <= width {
        return name.to_string();
    }
    let keep: String = name.chars().skip(n - (width - 1)).collect();
    format!("…{keep}")
}

/// `secs` as `m:ss`, or `h:mm:ss` from an hour.
pub fn clock(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

/// The transfer rate, smoothed over about five seconds (an exponential moving average), so that
/// the ETA does not swing with every burst; nothing until a second has passed and bytes moved.
#[derive(Debug, Default)]
pub struct Rate {
    last: Option<(u64, Duration)>,
    smooth: Option<f64>,
    since: Duration,
}

/// Time constant of the smoothing.
const RATE_TAU: f64 = 5.0;

impl Rate {
    /// Take a reading: `bytes` sent `at` this time since the start.
    pub fn update(&mut self, bytes: u64, at: Duration) {
        let Some((b0, t0)) = self.last.replace((bytes, at)) else { return };
        let dt = (at - t0).as_secs_f64();
        if dt <= 0.0 {
            return;
        }
        if bytes == 0 {
            self.since = at; // the clock of the rate starts with the first byte
            return;
        }
        let now = (bytes - b0.min(bytes)) as f64 / dt;
        let run = (at - self.since).as_secs_f64();
        // Until the time constant has passed, the plain average since the first byte.
        self.smooth = Some(match self.smooth {
            Some(s) if run >= RATE_TAU => s + (now - s) * dt / (RATE_TAU + dt),
            _ => bytes as f64 / run.max(dt),
        });
    }

    /// Bytes per second, once there is one to show.
    pub fn per_sec(&self) -> Option<f64> {
        let (_, at) = self.last?;
        self.smooth.filter(|&r| r > 0.0 && (at - self.since) >= Duration::from_secs(1))
    }

    /// Seconds left for what remains, once the total is known (the walk is over).
    pub fn eta(&self, c: &Counts) -> Option<f64> {
        (!c.walking).then_some(())?;
        Some((c.total - c.bytes.min(c.total)) as f64 / self.per_sec()?)
    }
}

/// The bar's line, at most `width - 1` columns: what matters first (percent, bytes, rate, ETA,
/// files), then the bar and the current file's name in whatever room is left, never cut midway
/// through a figure.
pub fn bar_line(c: &Counts, rate: &Rate, name: &str, width: usize, unit: RateUnit) -> String {
    let pct =
        if c.total > 0 && !c.walking { (c.bytes * 100 / c.total).min(100).to_string() + "%" } else { "-%".into() };
    let speed = rate.per_sec().map_or("-".into(), |r| unit.format(r));
    let eta = rate.eta(c).map_or("-".into(), clock);
    let core = format!(
        "{pct:>4} {}/{} {speed} ETA {eta} {}",
        format_size(c.bytes as f64),
        format_size(c.total as f64),
        c.files_text()
    );
    let room = width.saturating_sub(1);
    let mut line = core.clone();
    if core.chars().count() > room {
        return core.chars().take(room).collect();
    }
    let left = room - core.chars().count();
    if left >= 12 {
        let cells = (left / 3).clamp(8, 24);
        let filled =
            if c.total > 0 { (c.bytes.min(c.total) as u128 * cells as u128 / c.total as u128) as usize } else { 0 };
        let bar: String = (0..cells)
            .map(|i| {
                if i < filled {
                    '='
                } else if i == filled {
                    '>'
                } else {
                    ' '
                }
            })
            .collect();
        line = format!("{pct:>4} [{bar}] {}", &core[pct.len().max(4) + 1..]);
    }
    let left = room.saturating_sub(line.chars().count());
    if left > 4 && !name.is_empty() {
        line.push(' ');
        line.push_str(&tail(name, left - 1));
    }
    line
}

/// The line printed each second when progress is forced without a terminal.
pub fn plain_line(c: &Counts, rate: f64, elapsed: Duration, smooth: &Rate, unit: RateUnit) -> String {
    let pct = if c.total > 0 { (c.bytes as f64 * 100.0 / c.total as f64).min(100.0) } else { 0.0 };
    let eta = smooth.eta(c).map_or("-".into(), clock);
    format!(
        "linerate: {pct:3.0}% {}/{} {} elapsed {} ETA {eta} {}",
        format_size(c.bytes as f64),
        format_size(c.total as f64),
        unit.format(rate),
        clock(elapsed.as_secs_f64()),
        c.files_text()
    )
}

/// The display's state from one redraw to the next: the smoothed rate, and when the last plain
/// line was due. Sans-I/O: each call is given the counters and the time.
#[derive(Debug)]
pub struct Ticker {
    start: Instant,
    rate: Rate,
    last_line: Instant,
    last_bytes: u64,
    unit: RateUnit,
}

impl Ticker {
    /// A display started at `now`, showing rates in `unit`.
    pub fn new(now: Instant, unit: RateUnit) -> Ticker {
        Ticker { start: now, rate: Rate::default(), last_line: now, last_bytes: 0, unit }
    }

    /// A redraw at `now` of counters `c`: the smoothed rate takes them in.
    pub fn tick(&mut self, c: &Counts, now: Instant) {
        self.rate.update(c.bytes, now.duration_since(self.start));
    }

    /// The terminal bar's line for `c`, `width` columns wide, naming the current file `name`.
    pub fn bar_line(&self, c: &Counts, name: &str, width: usize) -> String {
        bar_line(c, &self.rate, name, width, self.unit)
    }

    /// The plain line, once a second (`None` until a second has passed since the last one): the
    /// rate over that second, then the totals.
    pub fn plain_line(&mut self, c: &Counts, now: Instant) -> Option<String> {
        let since = now.duration_since(self.last_line);
        if since < Duration::from_secs(1) {
            return None;
        }
        let r = (c.bytes - self.last_bytes.min(c.bytes)) as f64 / since.as_secs_f64();
        (self.last_line, self.last_bytes) = (now, c.bytes);
        Some(plain_line(c, r, now.duration_since(self.start), &self.rate, self.unit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plain_line_comes_once_a_second_with_the_rate_of_that_second() {
        let t0 = Instant::now();
        let mut t = Ticker::new(t0, RateUnit::Bytes);
        let at = |ms| t0 + Duration::from_millis(ms);
        let c = |bytes| Counts { bytes, total: 1_000_000_000, files: 1, found: 2, walking: false };
        for (ms, bytes) in [(100, 10_000_000), (900, 90_000_000)] {
            t.tick(&c(bytes), at(ms));
            assert_eq!(t.plain_line(&c(bytes), at(ms)), None, "before a second");
        }
        t.tick(&c(100_000_000), at(1000));
        let line = t.plain_line(&c(100_000_000), at(1000)).unwrap();
        assert!(line.contains(" 100 MB/s elapsed 0:01"), "{line}");
        assert_eq!(t.plain_line(&c(150_000_000), at(1500)), None, "the next one a second later");
        let line = t.plain_line(&c(150_000_000), at(2000)).unwrap();
        assert!(line.contains(" 50 MB/s elapsed 0:02"), "the rate of that second: {line}");
    }

    /// A rate that has seen `bps` for `secs` seconds.
    fn steady(bps: f64, secs: u64) -> Rate {
        let mut r = Rate::default();
        r.update(0, Duration::ZERO);
        for t in 1..=secs * 10 {
            r.update((bps * t as f64 / 10.0) as u64, Duration::from_millis(t * 100));
        }
        r
    }

    #[test]
    fn plain_progress_line_has_percent_bytes_rate_eta_and_files() {
        let c = Counts { bytes: 500_000_000, total: 2_000_000_000, files: 12, found: 340, walking: false };
        assert_eq!(
            plain_line(&c, 100e6, Duration::from_secs(5), &steady(100e6, 5), RateUnit::Bits),
            "linerate:  25% 500 MB/2 GB 800 Mbit/s elapsed 0:05 ETA 0:15 12/340 files"
        );
        assert!(plain_line(&c, 100e6, Duration::from_secs(5), &steady(100e6, 5), RateUnit::Bytes)
            .contains(" 100 MB/s elapsed"));
        let c = Counts { walking: true, ..c };
        assert!(plain_line(&c, 0.0, Duration::from_secs(3700), &Rate::default(), RateUnit::Bits)
            .ends_with("elapsed 1:01:40 ETA - 12/340+ files"));
    }

    #[test]
    fn no_rate_or_eta_before_there_is_one_and_a_burst_does_not_swing_the_eta() {
        let c = Counts { bytes: 0, total: 3_000_000_000, files: 0, found: 1000, walking: false };
        let line = bar_line(&c, &Rate::default(), "", 120, RateUnit::Bits);
        assert!(line.contains(" - ETA - ") && !line.contains("0 B/s") && !line.contains("0s"), "{line}");
        // 100 MB/s for 10 s, then one second at 1 GB/s: the ETA moves, but not tenfold.
        let mut r = steady(100e6, 10);
        let before = r.eta(&Counts { bytes: 1_000_000_000, ..c }).unwrap();
        for t in 1..=10u64 {
            r.update(1_000_000_000 + t * 100_000_000, Duration::from_millis(10_000 + t * 100));
        }
        let after = r.eta(&Counts { bytes: 2_000_000_000, ..c }).unwrap();
        assert!((10.0..=20.0).contains(&before), "{before}");
        assert!(after > before / 10.0 && after < before, "{before} -> {after}");
    }

    #[test]
    fn the_bar_line_fits_the_terminal_and_never_cuts_a_figure() {
        let c = Counts { bytes: 431_000_000, total: 3_132_000_000, files: 138, found: 1000, walking: false };
        let r = steady(112e6, 6);
        for width in [40, 60, 80, 100, 200] {
            let line = bar_line(&c, &r, "tree/d0000/a-rather-long-file-name-000138.bin", width, RateUnit::Bytes);
            assert!(line.chars().count() < width, "{width}: {line}");
            if width >= 60 {
                assert!(line.contains("138/1000 files"), "{width}: {line}");
                assert!(line.contains("13% ") && line.contains("MB/s ETA 0:"), "{width}: {line}");
            }
            if width >= 100 {
                assert!(line.contains('[') && line.contains(".bin"), "{width}: {line}");
            }
        }
    }

    #[test]
    fn long_names_keep_their_end() {
        assert_eq!(tail("short", 10), "short");
        assert_eq!(tail("a/very/long/path/name.bin", 10), "…/name.bin");
        assert_eq!(tail("a/very/long/path/name.bin", 10).chars().count(), 10);
    }
}
