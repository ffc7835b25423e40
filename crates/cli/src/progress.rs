//! The live progress display of `cp`, on stderr: one aggregate bar on a terminal (percent,
//! bytes done of the total found so far, rate, ETA, files, the current file's escaped name);
//! with `--progress` and no terminal, one plain line a second instead; nothing with `-q`.
//! `-v` lists each file as it has been sent, above the bar.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use linerate_engine::copy::send::{FileHook, Progress};
use linerate_engine::copy::walk::shown;
use linerate_model::units::{format_rate, format_size};
use std::fmt::Write as FmtWrite;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// What to show while copying.
#[derive(Debug, Clone, Copy, Default)]
pub struct Show {
    /// Nothing at all (`-q`, `--json`).
    pub quiet: bool,
    /// Progress even when stderr is not a terminal (`--progress`).
    pub force: bool,
    /// List each file as it has been sent (`-v`).
    pub verbose: bool,
}

/// Longest file name shown on the bar; longer names keep their end, like scp.
const NAME_WIDTH: usize = 32;

/// A bar updated from the engine's counters by a background thread.
pub struct Bar {
    bar: ProgressBar,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Bar {
    /// The hook to put in [`Progress::on_file`] for `show`: it records the current file for the
    /// bar and, with `verbose`, prints each finished one above it; none when nothing is shown.
    /// Call before [`Bar::start`] with the same `current`.
    pub fn hook(show: Show, current: Arc<Mutex<String>>, bar: ProgressBar) -> FileHook {
        let drawn = !show.quiet && (show.force || !bar.is_hidden());
        if !drawn && !show.verbose {
            return FileHook::default(); // nobody looks: keep the per-file path free of it
        }
        FileHook::new(move |path, _size, done| {
            let name = shown(path);
            if done && show.verbose {
                Bar::println(&bar, &name);
            }
            *current.lock().unwrap_or_else(PoisonError::into_inner) = name;
        })
    }

    /// A bar drawing nothing yet, so that a hook can print above it.
    pub fn target(show: Show) -> ProgressBar {
        let target = if !show.quiet && std::io::stderr().is_terminal() {
            ProgressDrawTarget::stderr_with_hz(10)
        } else {
            ProgressDrawTarget::hidden()
        };
        ProgressBar::with_draw_target(Some(0), target)
    }

    /// Start drawing `bar` from the counters in `p`.
    pub fn start(bar: ProgressBar, p: Arc<Progress>, show: Show, current: Arc<Mutex<String>>) -> Bar {
        bar.set_style(
            ProgressStyle::with_template(
                "{percent:>3}% [{bar:24}] {done:>9}/{total:<9} {speed:>11} ETA {eta:<4} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .with_key("done", |s: &ProgressState, w: &mut dyn FmtWrite| {
                let _ = w.write_str(&format_size(s.pos() as f64));
            })
            .with_key("total", |s: &ProgressState, w: &mut dyn FmtWrite| {
                let _ = w.write_str(&format_size(s.len().unwrap_or(0) as f64));
            })
            .with_key("speed", |s: &ProgressState, w: &mut dyn FmtWrite| {
                let _ = write!(w, "{}/s", format_size(s.per_sec()));
            })
            .progress_chars("=> "),
        );
        let plain = show.force && !show.quiet && bar.is_hidden();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = (!bar.is_hidden() || plain).then(|| {
            let (bar, stop) = (bar.clone(), stop.clone());
            std::thread::spawn(move || {
                let start = Instant::now();
                let mut last_line = Instant::now();
                let mut last_bytes = 0;
                while !stop.load(Relaxed) {
                    let c = counts(&p);
                    bar.set_length(c.total.max(c.bytes).max(1)); // not "100%" of nothing while walking
                    bar.set_position(c.bytes);
                    let name = tail(&current.lock().unwrap_or_else(PoisonError::into_inner), NAME_WIDTH);
                    bar.set_message(format!("{} {name}", c.files_text()));
                    if plain && last_line.elapsed() >= Duration::from_secs(1) {
                        let rate = (c.bytes - last_bytes.min(c.bytes)) as f64 / last_line.elapsed().as_secs_f64();
                        eprintln!("{}", plain_line(&c, rate, start.elapsed()));
                        last_line = Instant::now();
                        last_bytes = c.bytes;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
        });
        Bar { bar, stop, thread }
    }

    /// Stop and erase the bar.
    pub fn finish(mut self) {
        self.stop.store(true, Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.bar.finish_and_clear();
    }

    /// Print a line above the bar without garbling it.
    pub fn println(bar: &ProgressBar, line: &str) {
        if bar.is_hidden() {
            eprintln!("{line}");
        } else {
            bar.println(line);
        }
    }

    /// The underlying bar, for printing above it.
    pub fn handle(&self) -> ProgressBar {
        self.bar.clone()
    }
}

/// One reading of the counters.
#[derive(Debug, Clone, Copy)]
struct Counts {
    bytes: u64,
    total: u64,
    files: u64,
    found: u64,
    walking: bool,
}

impl Counts {
    fn files_text(&self) -> String {
        format!("{}/{}{} files", self.files, self.found, if self.walking { "+" } else { "" })
    }
}

fn counts(p: &Progress) -> Counts {
    Counts {
        bytes: p.bytes.load(Relaxed),
        total: p.found_bytes.load(Relaxed),
        files: p.files.load(Relaxed),
        found: p.found_files.load(Relaxed),
        walking: p.walk_done.load(Relaxed) == 0,
    }
}

/// The end of `name`, at most `width` characters (an ellipsis marks a cut).
fn tail(name: &str, width: usize) -> String {
    let n = name.chars().count();
    if n <= width {
        return name.to_string();
    }
    let keep: String = name.chars().skip(n - (width - 1)).collect();
    format!("…{keep}")
}

fn clock(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

/// The line printed each second when progress is forced without a terminal.
fn plain_line(c: &Counts, rate: f64, elapsed: Duration) -> String {
    let pct = if c.total > 0 { (c.bytes as f64 * 100.0 / c.total as f64).min(100.0) } else { 0.0 };
    let avg = c.bytes as f64 / elapsed.as_secs_f64().max(1e-3);
    let eta = if avg > 0.0 && !c.walking { clock((c.total - c.bytes.min(c.total)) as f64 / avg) } else { "-".into() };
    format!(
        "linerate: {pct:3.0}% {}/{} {}/s ({}) elapsed {} ETA {eta} {}",
        format_size(c.bytes as f64),
        format_size(c.total as f64),
        format_size(rate),
        format_rate(rate * 8.0),
        clock(elapsed.as_secs_f64()),
        c.files_text()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_progress_line_has_percent_bytes_rate_eta_and_files() {
        let c = Counts { bytes: 500_000_000, total: 2_000_000_000, files: 12, found: 340, walking: false };
        assert_eq!(
            plain_line(&c, 100e6, Duration::from_secs(5)),
            "linerate:  25% 500 MB/2 GB 100 MB/s (800 Mbit/s) elapsed 0:05 ETA 0:15 12/340 files"
        );
        let c = Counts { walking: true, ..c };
        assert!(plain_line(&c, 0.0, Duration::from_secs(3700)).ends_with("elapsed 1:01:40 ETA - 12/340+ files"));
    }

    #[test]
    fn long_names_keep_their_end() {
        assert_eq!(tail("short", 10), "short");
        assert_eq!(tail("a/very/long/path/name.bin", 10), "…/name.bin");
        assert_eq!(tail("a/very/long/path/name.bin", 10).chars().count(), 10);
    }
}
