//! The binary's one way to write for the user (issue 31): every line to standard output or
//! standard error goes through [`line()`] (the `outln!` and `errln!` macros), which returns
//! the write's error instead of panicking as `println!` does on a closed pipe.
//!
//! A closed pipe (`linerate cp -v … | head -1`: EPIPE, as Rust's runtime ignores SIGPIPE) is a
//! quiet end, not an error worth a word (ripgrep's rule): the first one is remembered
//! ([`closed`]) and stops whatever work registered a [`Stopper`] ([`stop_on_close`]) — a copy
//! in flight is interrupted in order as by Ctrl-C — and `main` exits with
//! [`Kind::Closed`]'s code without a message. Threads that cannot
//! return an error (progress, per-file lines, listings) ignore the result: the stop does the rest.

use crate::error::{Error, Kind};
use linerate_model::shutdown::{Shutdown, Stopper};
use std::fmt;
use std::io::{self, Write};
use std::sync::LazyLock;

/// Where a line goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum To {
    /// Standard output: what the command produces (listings, documents, ids).
    Out,
    /// Standard error: progress, summaries, notes, warnings.
    Err,
}

impl To {
    fn name(self) -> &'static str {
        match self {
            To::Out => "standard output",
            To::Err => "standard error",
        }
    }
}

/// Stopped at the first write that met a closed pipe (and its `Shutdown`, read by [`closed`]);
/// its hooks stop what [`stop_on_close`] registered.
static CLOSED: LazyLock<(Stopper, Shutdown)> = LazyLock::new(|| {
    let s = Stopper::new();
    let watch = s.shutdown();
    (s, watch)
});

/// Whether a write met a closed pipe (standard output or error read no more).
pub fn closed() -> bool {
    CLOSED.1.is_stopped()
}

/// Stop `stopper` (first stage: in order, as Ctrl-C) when a write meets a closed pipe; at once
/// if one did already.
pub fn stop_on_close(stopper: &Stopper) {
    let s = stopper.clone();
    CLOSED.1.on_stop(move || {
        s.stop();
    });
}

/// Remember a closed pipe and stop the registered work (once: the hooks run at the first stop).
fn mark_closed() {
    if !closed() {
        CLOSED.0.stop();
    }
}

/// Watch standard output and error while the command waits with nothing to print (`lab up`):
/// a pipe whose reader went away (`| head -1` done reading) counts as closed at once, as a
/// write would find it, instead of after the next line.
pub fn watch_closed() {
    linerate_net::proc::on_readers_gone(mark_closed);
}

/// Write `text` as is (no newline added) to `to`, flushed; an error names the stream. A closed
/// pipe is of kind [`Kind::Closed`], any other failure [`Kind::Io`].
pub fn write(to: To, text: fmt::Arguments<'_>) -> crate::error::Result {
    match text.as_str() {
        Some(s) => bytes(to, s.as_bytes()),
        None => bytes(to, text.to_string().as_bytes()),
    }
}

/// Write `b` as is to `to`, flushed: `write` for bulk output (a document, a page, a script).
pub fn bytes(to: To, b: &[u8]) -> crate::error::Result {
    let r = match to {
        To::Out => {
            let mut o = io::stdout().lock();
            o.write_all(b).and_then(|()| o.flush())
        }
        To::Err => {
            let mut e = io::stderr().lock();
            e.write_all(b).and_then(|()| e.flush())
        }
    };
    r.map_err(|e| failed(to, e))
}

/// Write one line (`text` and a newline) to `to`: `write`.
pub fn line(to: To, text: fmt::Arguments<'_>) -> crate::error::Result {
    write(to, format_args!("{text}\n"))
}

/// The error of a failed write to `to`; a closed pipe is remembered.
pub fn failed(to: To, e: io::Error) -> Error {
    if e.kind() == io::ErrorKind::BrokenPipe {
        mark_closed();
        Error::new(Kind::Closed, anyhow::Error::new(e).context(format!("writing to {}", to.name())))
    } else {
        Error::new(Kind::Io, anyhow::Error::new(e).context(format!("writing to {}", to.name())))
    }
}

/// A line on standard output: `outln!("{x}")?`. Returns [`crate::error::Result`].
macro_rules! outln {
    ($($t:tt)*) => { crate::out::line(crate::out::To::Out, format_args!($($t)*)) };
}

/// A line on standard error: `errln!("{x}")?`. Returns [`crate::error::Result`].
macro_rules! errln {
    ($($t:tt)*) => { crate::out::line(crate::out::To::Err, format_args!($($t)*)) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_pipe_is_of_kind_closed_and_stops_registered_work() {
        let s = Stopper::new();
        let watch = s.shutdown();
        stop_on_close(&s);
        assert!(!watch.is_stopped());
        let e = failed(To::Out, io::Error::from(io::ErrorKind::BrokenPipe));
        assert_eq!(e.kind(), Kind::Closed);
        assert!(closed() && watch.is_stopped());
        // Registered after the pipe closed: stopped at once.
        let late = Stopper::new();
        stop_on_close(&late);
        assert!(late.shutdown().is_stopped());
        let full = failed(To::Err, io::Error::from(io::ErrorKind::StorageFull));
        assert_eq!(full.kind(), Kind::Io);
        assert!(format!("{}", full).starts_with("writing to standard error"), "{full}");
    }
}
