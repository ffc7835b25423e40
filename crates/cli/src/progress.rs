//! The live progress display of `cp`, on stderr: one aggregate bar on a terminal (percent,
//! bytes done of the total found so far, rate, ETA, files, the current file's escaped name);
//! with `--progress` and no terminal, one plain line a second instead; nothing with `-q`.
//! `-v` lists each file as it has been sent, above the bar.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use linerate_copy::run::progress::{bar_line, plain_line, Counts, Rate};
use linerate_copy::run::Observer;
use linerate_copy::send::{ErrorSink, FileHook, Progress};
use linerate_model::shutdown::Stopper;
use linerate_model::units::RateUnit;
use linerate_net::error::shown;
use std::io::IsTerminal;
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
    /// Rates in bits (default) or bytes per second (`--bytes`), the summary's too.
    pub unit: RateUnit,
}

/// How often the bar is redrawn from the counters (a pace, not a poll: a stop ends the wait).
const REDRAW: Duration = Duration::from_millis(100);

/// A bar updated from the engine's counters by a background thread.
pub struct Bar {
    bar: ProgressBar,
    stop: Stopper,
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
        // The whole line is composed here ([`bar_line`]), to fit the terminal's width.
        bar.set_style(ProgressStyle::with_template("{msg}").unwrap_or_else(|_| ProgressStyle::default_bar()));
        let plain = show.force && !show.quiet && bar.is_hidden();
        let stop = Stopper::new();
        let thread = (!bar.is_hidden() || plain).then(|| {
            let (bar, stop) = (bar.clone(), stop.shutdown());
            std::thread::spawn(move || {
                let start = Instant::now();
                let mut last_line = Instant::now();
                let mut last_bytes = 0;
                let mut rate = Rate::default();
                loop {
                    let c = Counts::of(&p);
                    rate.update(c.bytes, start.elapsed());
                    if !bar.is_hidden() {
                        let name = current.lock().unwrap_or_else(PoisonError::into_inner).clone();
                        bar.set_message(bar_line(&c, &rate, &name, terminal_width(), show.unit));
                    }
                    if plain && last_line.elapsed() >= Duration::from_secs(1) {
                        let r = (c.bytes - last_bytes.min(c.bytes)) as f64 / last_line.elapsed().as_secs_f64();
                        if errln!("{}", plain_line(&c, r, start.elapsed(), &rate, show.unit)).is_err() {
                            break; // stderr is gone (a closed pipe stops the copy: crate::out)
                        }
                        last_line = Instant::now();
                        last_bytes = c.bytes;
                    }
                    if stop.wait_timeout(REDRAW) {
                        break;
                    }
                }
            })
        });
        Bar { bar, stop, thread }
    }

    /// Stop and erase the bar.
    pub fn finish(mut self) {
        self.stop.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.bar.finish_and_clear();
    }

    /// Print a line above the bar without garbling it. A failed write is not returned: a closed
    /// pipe stops the copy ([`crate::out`]), and the copy's end reports it.
    pub fn println(bar: &ProgressBar, line: &str) {
        if bar.is_hidden() {
            let _ = errln!("{line}");
        } else {
            bar.println(line);
        }
    }
}

/// A copy shown as [`Show`] says: the bar (or plain lines) from the session's counters, each
/// file with `-v`, and each failure that does not end the session, above the bar.
pub struct Drawn {
    show: Show,
    current: Arc<Mutex<String>>,
    target: ProgressBar,
    bar: Option<Bar>,
}

impl Drawn {
    /// Nothing drawn yet.
    pub fn new(show: Show) -> Drawn {
        Drawn { show, current: Arc::default(), target: Bar::target(show), bar: None }
    }
}

impl Observer for Drawn {
    fn file_hook(&mut self) -> FileHook {
        Bar::hook(self.show, self.current.clone(), self.target.clone())
    }

    fn started(&mut self, progress: Arc<Progress>) {
        self.bar = Some(Bar::start(self.target.clone(), progress, self.show, self.current.clone()));
    }

    fn error_sink(&mut self) -> ErrorSink {
        let handle = self.target.clone();
        Arc::new(move |m: String| Bar::println(&handle, &format!("linerate: {m}")))
    }

    fn finished(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish();
        }
    }
}

/// Columns of the terminal on stderr (80 if unknown).
fn terminal_width() -> usize {
    match rustix::termios::tcgetwinsize(std::io::stderr()).map(|w| usize::from(w.ws_col)) {
        Ok(0) | Err(_) => 80, // a terminal that does not say
        Ok(cols) => cols.max(20),
    }
}
