//! Running a copy or a pull the way every command shows it (`cp`, `cp` over ssh, `demo`): a
//! local receiver when the destination is a path ([`local()`]), the caller's [`Observer`] told of
//! the session's counters, failures mapped to what the user is told ([`RunError`]), the
//! command's timeline, and how much of a local copy was still in the page cache at its end.
//! What it prints at the end is [`summary`]'s; the progress line as text [`progress`]'s.
//!
//! | module | what |
//! |---|---|
//! | [`local`](mod@local) | the local receiver: `linerate serve --once` of this user on loopback |
//! | [`summary`] | the `--json` document and the one-line summary |
//! | [`progress`] | the progress bar's and the plain progress line's text |

pub mod local;
pub mod progress;
pub mod summary;

use crate::send::{self, CopyConfig, CopyReport, ErrorSink, FileHook, Progress};
use linerate_model::doc::cp::CpTimeline;
use linerate_model::shutdown::Shutdown;
use linerate_model::units::format_size;
use linerate_net::auth::secret::Secret;
use linerate_net::EngineError;
use linerate_proto::ErrorCode;
use local::{LocalServer, LocalServerError};
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Who shows a running copy: told of its counters when it starts and of its end.
pub trait Observer {
    /// The hook the session calls for each file (none by default: the per-file path stays free).
    fn file_hook(&mut self) -> FileHook {
        FileHook::default()
    }
    /// The session starts; `progress` holds its counters.
    fn started(&mut self, progress: Arc<Progress>);
    /// Where the session reports a failure that does not end it (one file's).
    fn error_sink(&mut self) -> ErrorSink;
    /// The session has returned.
    fn finished(&mut self);
}

/// What a run is given besides its configuration.
#[derive(Debug, Clone)]
pub struct RunContext {
    /// Ends the session in order (Ctrl-C, a closed output).
    pub cancel: Shutdown,
    /// When the command started: the timeline's origin.
    pub started: Instant,
}

/// Why a run failed, as the user is told.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Stopped on request (Ctrl-C): what had been sent, of what was found (`walking`: so far).
    #[error(
        "interrupted after sending {files} of {found_files}{more} {} ({} of {}{more}); the files finished at \
         the destination are kept; run the same command to resume",
        if *found_files == 1 && !walking { "file" } else { "files" },
        format_size(*bytes as f64),
        format_size(*found_bytes as f64),
        more = if *walking { "+" } else { "" }
    )]
    Interrupted {
        /// Files sent.
        files: u64,
        /// Files found.
        found_files: u64,
        /// Bytes sent.
        bytes: u64,
        /// Bytes found.
        found_bytes: u64,
        /// The walk had not ended.
        walking: bool,
    },
    /// The destination's file system took no more: the receiver's `message`, and what was due.
    #[error(
        "the copy stopped: {message}; {} of {}{more} had been {}. Once the destination can take the rest, \
         the same command goes on from there",
        format_size(*bytes as f64),
        format_size(*found_bytes as f64),
        if *received { "received" } else { "sent" },
        more = if *walking { "+" } else { "" }
    )]
    Storage {
        /// Which file system and how much it wrote.
        message: String,
        /// Bytes sent (or received, for a pull).
        bytes: u64,
        /// Bytes found.
        found_bytes: u64,
        /// The walk had not ended.
        walking: bool,
        /// This side ended the session (a pull's receiver).
        received: bool,
    },
    /// A local copy's receiver ended the session: this machine's own process, no "server".
    #[error("the copy to the local destination ended: {message} ({})", code.describe())]
    Local {
        /// The receiver's code.
        code: ErrorCode,
        /// Its message.
        message: String,
    },
    /// No key for the local receiver.
    #[error(transparent)]
    Key(EngineError),
    /// The local receiver did not start.
    #[error(transparent)]
    LocalServer(#[from] LocalServerError),
    /// Any other failure of the session.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// Copy `config.sources` to `config.dest` beneath `root` on this host, through a server process
/// of this user on loopback holding a fresh key (`exe`: this linerate, `None` for the running
/// executable).
pub fn local(
    mut config: CopyConfig,
    root: &Path,
    exe: Option<&Path>,
    obs: &mut dyn Observer,
    cx: &RunContext,
) -> Result<CopyReport, RunError> {
    let secret = Secret::generate().map_err(RunError::Key)?;
    let mut server = LocalServer::spawn(exe, root, &secret)?;
    (config.addr, config.secret) = (server.addr, secret);
    watching_writeback(true, &config, || {
        session(obs, cx, |progress, sink| send::copy(&config, progress, sink), Some(&mut server))
    })
}

/// Copy `config.sources` to a running server (`config` has its address and credentials), or
/// pull `from` it `into` a local path.
pub fn daemon(
    config: CopyConfig,
    pull: Option<(&[u8], &Path)>,
    obs: &mut dyn Observer,
    cx: &RunContext,
) -> Result<CopyReport, RunError> {
    match pull {
        None => watching_writeback(false, &config, || session(obs, cx, |p, sink| send::copy(&config, p, sink), None)),
        Some((from, into)) => watching_writeback(true, &config, || {
            session(obs, cx, |p, sink| crate::pull::pull(&config, from, into, p, sink), None)
        }),
    }
}

/// Runs a copy whose destination is on this host (`here`) and, unless it fsyncs or changes
/// nothing, notes in its report how much of it was still in the page cache at its end (issue 43:
/// 340 MB–1.3 GB of a 2 GB copy to ext4; counting the `sync`, the rate was 8–11 % lower). The
/// summary then says its rate is to the page cache. `--fsync` is the way to count the disk.
fn watching_writeback(
    here: bool,
    cfg: &CopyConfig,
    run: impl FnOnce() -> Result<CopyReport, RunError>,
) -> Result<CopyReport, RunError> {
    let before = (here && !cfg.fsync && !cfg.dry_run).then(dirty_bytes).flatten();
    let mut r = run()?;
    if let (Some(a), Some(b)) = (before, before.and_then(|_| dirty_bytes())) {
        r.page_cache_bytes = linerate_model::doc::cp::unwritten_share(r.moved(), a, b);
    }
    Ok(r)
}

/// The host's data in the page cache not yet on a disk: `Dirty` + `Writeback` of
/// `/proc/meminfo`, bytes; `None` where it cannot be read.
fn dirty_bytes() -> Option<u64> {
    parse_dirty(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

/// `Dirty:` + `Writeback:` (in kB, as the kernel writes them: KiB) of a `/proc/meminfo` text.
fn parse_dirty(meminfo: &str) -> Option<u64> {
    let field = |name: &str| {
        meminfo.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix(':')?.trim();
            rest.strip_suffix("kB").unwrap_or(rest).trim().parse::<u64>().ok()
        })
    };
    Some(field("Dirty")?.saturating_add(field("Writeback")?).saturating_mul(1024))
}

/// Run a copy or pull `f` shown to `obs`, cancelled by `cx.cancel`; then end the `local`
/// receiver (at once unless the copy ended well or in order) and map a failure to a [`RunError`].
pub fn session(
    obs: &mut dyn Observer,
    cx: &RunContext,
    f: impl FnOnce(Arc<Progress>, ErrorSink) -> Result<CopyReport, EngineError>,
    local: Option<&mut LocalServer>,
) -> Result<CopyReport, RunError> {
    let progress = Arc::new(Progress { on_file: obs.file_hook(), cancel: cx.cancel.clone(), ..Progress::default() });
    obs.started(progress.clone());
    let sink = obs.error_sink();
    let result = f(progress.clone(), sink);
    let returned = Instant::now();
    obs.finished();
    let is_local = local.is_some();
    if let Some(server) = local {
        let interrupted = matches!(result, Err(EngineError::Interrupted));
        if result.is_err()
            && !(interrupted && linerate_net::proc::exit_within(&mut server.child, Duration::from_secs(10)).is_some())
        {
            let _ = server.child.kill();
        }
        let _ = server.child.wait();
    }
    let p = &progress;
    let walking = p.walk_done.load(Relaxed) == 0;
    match result {
        Ok(mut r) => {
            r.timeline = Some(timeline(&r, cx.started, returned, Instant::now()));
            Ok(r)
        }
        // Counted as sent: the receiver keeps each file it had finished when told to stop,
        // which may be a few fewer (it says nothing more once interrupted).
        Err(EngineError::Interrupted) => Err(RunError::Interrupted {
            files: p.files.load(Relaxed),
            found_files: p.found_files.load(Relaxed),
            bytes: p.bytes.load(Relaxed),
            found_bytes: p.found_bytes.load(Relaxed),
            walking,
        }),
        // The destination's file system took no more: the receiver ended the session at the
        // first such write and said which file system and how much it wrote; add what was due.
        Err(
            ref e @ (EngineError::Remote { code: ErrorCode::Storage, ref message }
            | EngineError::Aborted { code: ErrorCode::Storage, ref message }),
        ) => Err(RunError::Storage {
            message: message.clone(),
            bytes: p.bytes.load(Relaxed),
            found_bytes: p.found_bytes.load(Relaxed),
            walking,
            received: matches!(e, EngineError::Aborted { .. }),
        }),
        Err(EngineError::Remote { code, message }) if is_local => Err(RunError::Local { code, message }),
        Err(e) => Err(RunError::Engine(e)),
    }
}

/// The whole command's timeline: the session's phases (a push's own; a pull's as one transfer)
/// between the time before it (from `started`) and after it (`returned` from the session, `now`).
fn timeline(r: &CopyReport, started: Instant, returned: Instant, now: Instant) -> CpTimeline {
    let session = r.timeline.unwrap_or(CpTimeline { transfer_s: r.seconds, ..CpTimeline::default() });
    let total_s = now.saturating_duration_since(started).as_secs_f64();
    let end_s = now.saturating_duration_since(returned).as_secs_f64();
    let inside = session.connect_s + session.transfer_s + session.finish_s + session.close_s;
    CpTimeline { start_s: (total_s - end_s - inside).max(0.0), end_s, total_s, ..session }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirty_data_is_dirty_plus_writeback_from_meminfo() {
        let m =
            "MemTotal:       16318820 kB\nDirty:            332032 kB\nWriteback:         1024 kB\nAnonPages: 1 kB\n";
        assert_eq!(parse_dirty(m), Some((332_032 + 1024) * 1024));
        assert_eq!(parse_dirty("Dirty: 1 kB\n"), None, "no Writeback line");
        assert_eq!(parse_dirty("Dirty: x kB\nWriteback: 0 kB\n"), None);
        assert_eq!(parse_dirty("DirtyX: 1 kB\nDirty: 2 kB\nWriteback: 0 kB\n"), Some(2048), "the exact name");
    }
}
