//! The live progress bar: bytes, files, rate and ETA on a terminal; nothing otherwise.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use linerate_engine::send::Progress;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// A bar updated from the engine's counters by a background thread.
pub struct Bar {
    bar: ProgressBar,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Bar {
    /// Start drawing, unless `quiet` or stderr is not a terminal.
    pub fn start(p: Arc<Progress>, quiet: bool) -> Bar {
        let target = if quiet || !std::io::stderr().is_terminal() {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr_with_hz(10)
        };
        let bar = ProgressBar::with_draw_target(Some(0), target);
        bar.set_style(
            ProgressStyle::with_template(
                "{bar:30.cyan/blue} {decimal_bytes:>10}/{decimal_total_bytes:<10} {decimal_bytes_per_sec:>12} ETA {eta:>4} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (bar, stop) = (bar.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Relaxed) {
                    let walking = p.walk_done.load(Relaxed) == 0;
                    bar.set_length(p.found_bytes.load(Relaxed));
                    bar.set_position(p.bytes.load(Relaxed));
                    let files = p.files.load(Relaxed);
                    let found = p.found_files.load(Relaxed);
                    bar.set_message(format!("{files}/{found}{} files", if walking { "+" } else { "" }));
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
        };
        Bar { bar, stop, thread: Some(thread) }
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
