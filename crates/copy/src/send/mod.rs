//! The sending side of `cp`: one control connection, N data streams, a walker feeding one global
//! queue, and per-stream threads that read, encrypt and send, batching small files into large
//! records and spreading the chunks of large files over every stream.

mod config;
mod offers;
mod owners;
mod reader;
mod session;
mod stall;
mod stream;

pub(crate) use config::streams_for;
pub use config::{
    names_contents, placement, streams_for_path, CopyConfig, CopyReport, ErrorSink, FileFn, FileHook, ListSink,
    Progress, SendOpts, Sent, SpecialKinds, KEEPALIVE, PATH_TARGET_BPS, STALL_TIMEOUT, SUMMARY_WAIT,
};
use linerate_net::error::shown;
use session::*;
use stream::*;

use crate::queue::Queue;
use crate::tally::Tally;
use crate::walk::{Item, Root};
use linerate_net::conn::{self};
use linerate_net::rate::SessionRate;
use linerate_net::resources::{self};
use linerate_net::{EngineError, UsageError};
use linerate_proto::frame::{self, Finish, Frame, Summary};
use linerate_proto::hello::StreamKind;
use linerate_proto::{name, ErrorCode, ProtoError};
use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The sender's counters: the ones both ends keep ([`Tally`]) and its own.
#[derive(Default)]
struct Totals {
    tally: Tally,
    refused_files: AtomicU64,
    /// Devices, FIFOs and sockets not sent (no `-D`).
    skipped_specials: AtomicU64,
}

impl Totals {
    /// What was sent: `fin` (at `finished_at`), the receiver's `summary` (at `summary_at`) and
    /// these totals.
    fn sent(&self, fin: Finish, summary: Summary, finished_at: Instant, summary_at: Instant) -> Sent {
        Sent {
            fin,
            summary,
            finished_at,
            summary_at,
            local_errors: self.tally.errors.load(Relaxed),
            skipped_files: self.tally.skipped_files.load(Relaxed),
            skipped_bytes: self.tally.skipped_bytes.load(Relaxed),
            resumed_bytes: self.tally.resumed_bytes.load(Relaxed),
            deleted: self.tally.deleted.load(Relaxed),
            would_send: (self.tally.would_files.load(Relaxed), self.tally.would_bytes.load(Relaxed)),
            refused_files: self.refused_files.load(Relaxed),
            skipped_specials: self.skipped_specials.load(Relaxed),
        }
    }
}

struct Ctx {
    queue: Queue<Item, Arc<BigFile>>,
    chunk: u64,
    verify: bool,
    /// Files were offered (declared) on the control stream: no `FileStart` on data streams.
    sync: bool,
    /// `-S`: chunks that are holes at the source go as `Hole` frames.
    sparse: bool,
    keepalive: Duration,
    totals: Totals,
    progress: Arc<Progress>,
    on_error: ErrorSink,
    /// Paces every record before it goes (`--bwlimit`, or a server's share when it sends).
    pace: SessionRate,
    /// What messages call the receiver ([`SendOpts::peer`]).
    peer: &'static str,
    /// Owners and their names (`-o`, `-g`).
    owners: owners::Owners,
    /// Which devices, FIFOs and sockets are sent (`-D`); none without `FLAG_DEVICES`.
    kinds: SpecialKinds,
}

impl Ctx {
    fn fail(&self, msg: String) {
        self.totals.tally.errors.fetch_add(1, Relaxed);
        (self.on_error)(msg);
    }
}

/// Copy `cfg.sources` to the server. Per-entry failures are reported through `on_error` and
/// counted in the report; a failure of the session itself is an error.
pub fn copy(cfg: &CopyConfig, progress: Arc<Progress>, on_error: ErrorSink) -> Result<CopyReport, EngineError> {
    if cfg.sources.is_empty() {
        return Err(UsageError::Sources("no sources given".into()).into());
    }
    if let Some(src) = cfg.sources.iter().find(|s| cfg.sources.len() > 1 && names_contents(s) && s.is_dir()) {
        return Err(EngineError::Usage(UsageError::Sources(format!(
            "{}: a trailing '/' copies a directory's contents, which only a single source can do \
             (copy it alone, or name it without the '/')",
            shown(src)
        ))));
    }
    let start = Instant::now();
    let cpu0 = resources::process();
    let mut control = conn::connect_control(cfg.addr, cfg.suite, &cfg.secret, cfg.key_auth.as_ref(), cfg.timeout)?;
    let streams = config::streams_for(cfg, control.rx.socket());
    let begin = Frame::Begin(frame::Begin {
        dest: &cfg.dest,
        sources: cfg.sources.len() as u32,
        chunk_size: cfg.chunk_size,
        flags: cfg.flags(),
        streams,
        modify_window: cfg.modify_window,
    });
    // The receiver needs the rules too: under --delete it keeps the names they exclude.
    let mut rules = Vec::new();
    let filter = cfg.tree_filter(cfg.placement != frame::Placement::As).map(|t| {
        Frame::Filter(frame::FilterRules {
            flags: t.frame_flags(cfg.delete_excluded),
            rules: t.filter.encode(&mut rules),
        })
    });
    control.tx.send_frames(&[Some(begin), filter].into_iter().flatten().collect::<Vec<_>>())?;
    let into_dir = await_target(&mut control, cfg.timeout)?;
    let roots = roots(&cfg.sources, &cfg.dest, into_dir)?;
    let data = connect_data(cfg, &control, streams)?;
    let connected = Instant::now();
    let sent = run_sender(control, data, roots, &SendOpts::of(cfg), progress, on_error)?;
    let end = Instant::now();
    let secs = |a: Instant, b: Instant| b.saturating_duration_since(a).as_secs_f64();
    let timeline = linerate_model::doc::cp::CpTimeline {
        connect_s: secs(start, connected),
        transfer_s: secs(connected, sent.finished_at),
        finish_s: secs(sent.finished_at, sent.summary_at),
        close_s: secs(sent.summary_at, end),
        ..Default::default()
    };
    Ok(CopyReport {
        bytes: sent.fin.bytes,
        files: sent.fin.files,
        dirs: sent.fin.dirs,
        links: sent.fin.links,
        seconds: start.elapsed().as_secs_f64(),
        streams,
        cipher: cfg.suite.name(),
        local_errors: sent.local_errors,
        server: sent.summary,
        client_cpu: resources::process().since(cpu0),
        client_peak_rss: resources::peak_rss(),
        skipped_files: sent.skipped_files,
        skipped_bytes: sent.skipped_bytes,
        resumed_bytes: sent.resumed_bytes,
        deleted: sent.deleted,
        pulled: false,
        dry_run: cfg.sync && cfg.dry_run,
        would_send: sent.would_send,
        phases: None,
        timeline: Some(timeline),
        refused_files: sent.refused_files,
        skipped_specials: sent.skipped_specials,
        page_cache_bytes: None,
    })
}

/// Wait for the server's answer to `Begin` (or `Begin` + `Pull`): one record holding one `Target`.
pub(crate) fn await_target(control: &mut conn::Secured, timeout: Duration) -> Result<bool, EngineError> {
    // The answer comes at once from a working server; a silent one must not hold us forever.
    control.rx.set_timeout(Some(timeout));
    let answer = match control.rx.recv() {
        Err(e) if e.is_timeout() => {
            return Err(EngineError::Timeout(format!(
                "the server did not answer the copy request within {} s",
                timeout.as_secs_f64()
            )))
        }
        r => r?,
    };
    let into_dir = match answer {
        Some(plain) => match conn::decode_all(plain)?.as_slice() {
            [Frame::Target { dest_is_dir }] => *dest_is_dir,
            [Frame::Fatal(f), ..] => return Err(remote(f.code, f.message)),
            [Frame::Target { .. }, extra, ..] => {
                return Err(ProtoError::Violation(format!("unexpected {extra:?} from the server after Target")).into())
            }
            [other, ..] => {
                return Err(ProtoError::Violation(format!("expected Target from the server, got {other:?}")).into())
            }
            [] => {
                return Err(ProtoError::Violation("expected Target from the server, got an empty record".into()).into())
            }
        },
        None => {
            return Err(EngineError::net("waiting for the server's answer", std::io::ErrorKind::UnexpectedEof.into()))
        }
    };
    control.rx.set_timeout(None);
    Ok(into_dir)
}

/// Open the session's data streams.
pub(crate) fn connect_data(
    cfg: &CopyConfig,
    control: &conn::Secured,
    streams: u16,
) -> Result<Vec<conn::Secured>, EngineError> {
    // All at once: each is a TCP and a Noise handshake, 2 round trips, which one after the other
    // cost 16 streams 1.6 s on a 50 ms path.
    std::thread::scope(|s| {
        let (psk, session) = (&control.stream_psk, control.session);
        let each: Vec<_> = (1..=streams)
            .map(|i| {
                s.spawn(move || conn::connect(cfg.addr, StreamKind::Data, cfg.suite, psk, session, i, cfg.timeout))
            })
            .collect();
        each.into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| Err(EngineError::Internal("a stream's connecting thread panicked".into())))
            })
            .collect()
    })
}

/// The sending side of a session: walk `roots`, send every entry over `data`, then `Finish` on
/// `control` and wait for the receiver's summary. Used by the client's push and the server's pull.
/// What is sent on the control stream and when is the session machine's decision
/// (`linerate_proto::copy::sender`); the threads here move bytes and feed it.
pub fn run_sender(
    control: conn::Secured,
    data: Vec<conn::Secured>,
    roots: Vec<Root>,
    o: &SendOpts,
    progress: Arc<Progress>,
    on_error: ErrorSink,
) -> Result<Sent, EngineError> {
    let cancel = progress.cancel.clone();
    let ctx = shared_state(o, progress, on_error);
    send_session(control, data, roots, o, ctx, cancel)
}

pub(crate) fn remote(code: u16, message: &[u8]) -> EngineError {
    EngineError::Remote { code: ErrorCode::from_u16(code), message: name::escape(message) }
}

/// Name each source at the destination: under its own name when it goes into a directory
/// (`into_dir`), else under the destination's last name ([`placement`]).
fn roots(sources: &[PathBuf], dest: &[u8], into_dir: bool) -> Result<Vec<Root>, EngineError> {
    let last = name::split_dest(dest).map_err(|e| UsageError::Destination(e.to_string()))?.last().map(|s| s.to_vec());
    sources
        .iter()
        .map(|src| {
            let name = if into_dir {
                let base = match src.file_name() {
                    Some(n) => n.as_bytes().to_vec(),
                    None => std::fs::canonicalize(src)
                        .ok()
                        .and_then(|p| p.file_name().map(|n| n.as_bytes().to_vec()))
                        .ok_or_else(|| {
                            EngineError::Usage(UsageError::Sources(format!(
                                "{}: cannot name this source at the destination",
                                shown(src)
                            )))
                        })?,
                };
                base
            } else {
                last.clone().ok_or_else(|| UsageError::Destination("destination has no name".into()))?
            };
            Ok(Root { path: src.clone(), name, beneath: None })
        })
        .collect::<Result<Vec<Root>, EngineError>>()
        .and_then(distinct_names)
}

/// Refuse two sources that would land under one name (`cp a/x b/x DEST`), before a byte is
/// sent: copying both would leave one file made of the other or, interleaved, of both.
fn distinct_names(roots: Vec<Root>) -> Result<Vec<Root>, EngineError> {
    let mut seen: HashMap<&[u8], &Root> = HashMap::new();
    for r in &roots {
        if let Some(first) = seen.insert(&r.name, r) {
            return Err(EngineError::Usage(UsageError::Sources(format!(
                "{} and {} would both be copied to '{}': copy them one at a time or to different names",
                shown(&first.path),
                shown(&r.path),
                name::escape(&r.name)
            ))));
        }
    }
    Ok(roots)
}
