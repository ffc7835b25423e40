//! The live progress display of `cp`, on stderr: one aggregate bar on a terminal (percent,
//! bytes done of the total found so far, rate, ETA, files, the current file's escaped name);
//! with `--progress` and no terminal, one plain line a second instead; nothing with `-q`.
//! `-v` lists each file as it has been sent, above the bar.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use linerate_copy::run::progress::{Counts, Ticker};
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

/// A copy shown as [`Show`] says: a bar (or plain lines) redrawn from the session's counters by
/// a background thread, each file with `-v`, and each failure that does not end the session,
/// printed above the bar.
pub struct Drawn {
    show: Show,
    /// The current file's escaped name, for the bar.
    current: Arc<Mutex<String>>,
    /// The bar (hidden when nothing is drawn, so that lines print plainly).
    bar: ProgressBar,
    /// Whether the session started (and the bar with it).
    started: bool,
    stop: Stopper,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drawn {
    /// Nothing drawn yet.
    pub fn new(show: Show) -> Drawn {
        let target = if !show.quiet && std::io::stderr().is_terminal() {
            ProgressDrawTarget::stderr_with_hz(10)
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(Some(0), target);
        Drawn { show, current: Arc::default(), bar, started: false, stop: Stopper::new(), thread: None }
    }

    /// Print a line above the bar without garbling it. A failed write is not returned: a closed
    /// pipe stops the copy ([`crate::out`]), and the copy's end reports it.
    fn println(bar: &ProgressBar, line: &str) {
        if bar.is_hidden() {
            let _ = errln!("{line}");
        } else {
            bar.println(line);
        }
    }
}

impl Observer for Drawn {
    /// Records the current file for the bar and, with `-v`, prints each finished one above it;
    /// nothing when nothing is shown.
    fn file_hook(&mut self) -> FileHook {
        let (show, current, bar) = (self.show, self.current.clone(), self.bar.clone());
        let drawn = !show.quiet && (show.force || !bar.is_hidden());
        if !drawn && !show.verbose {
            return FileHook::default(); // nobody looks: keep the per-file path free of it
        }
        FileHook::new(move |path, _size, done| {
            let name = shown(path);
            if done && show.verbose {
                Drawn::println(&bar, &name);
            }
            *current.lock().unwrap_or_else(PoisonError::into_inner) = name;
        })
    }

    /// Start drawing from the counters in `p`.
    fn started(&mut self, p: Arc<Progress>) {
        self.started = true;
        let (bar, show, current) = (self.bar.clone(), self.show, self.current.clone());
        // The whole line is composed by the ticker, to fit the terminal's width.
        bar.set_style(ProgressStyle::with_template("{msg}").unwrap_or_else(|_| ProgressStyle::default_bar()));
        let plain = show.force && !show.quiet && bar.is_hidden();
        let stop = self.stop.shutdown();
        self.thread = (!bar.is_hidden() || plain).then(|| {
            std::thread::spawn(move || {
                let mut ticker = Ticker::new(Instant::now(), show.unit);
                loop {
                    let (c, now) = (Counts::of(&p), Instant::now());
                    ticker.tick(&c, now);
                    if !bar.is_hidden() {
                        let name = current.lock().unwrap_or_else(PoisonError::into_inner).clone();
                        bar.set_message(ticker.bar_line(&c, &name, terminal_width()));
                    }
                    let line = if plain { ticker.plain_line(&c, now) } else { None };
                    if line.is_some_and(|l| errln!("{l}").is_err()) {
                        break; // stderr is gone (a closed pipe stops the copy: crate::out)
                    }
                    if stop.wait_timeout(REDRAW) {
                        break;
                    }
                }
            })
        });
    }

    fn error_sink(&mut self) -> ErrorSink {
        let bar = self.bar.clone();
        Arc::new(move |m: String| Drawn::println(&bar, &format!("linerate: {m}")))
    }

    /// Stop and erase the bar.
    fn finished(&mut self) {
        if !std::mem::take(&mut self.started) {
            return;
        }
        self.stop.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.bar.finish_and_clear();
    }
}

/// Columns of the terminal on stderr (80 if unknown).
fn terminal_width() -> usize {
    match rustix::termios::tcgetwinsize(std::io::stderr()).map(|w| usize::from(w.ws_col)) {
        Ok(0) | Err(_) => 80, // a terminal that does not say
        Ok(cols) => cols.max(20),
    }
}
