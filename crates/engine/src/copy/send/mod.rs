//! The sending side of `cp`: one control connection, N data streams, a walker feeding one global
//! queue, and per-stream threads that read, encrypt and send, batching small files into large
//! records and spreading the chunks of large files over every stream.

mod config;
mod offers;
mod stream;

pub use config::{
    CopyConfig, CopyReport, ErrorSink, FileFn, FileHook, ListSink, Progress, SendOpts, Sent, KEEPALIVE, STALL_TIMEOUT,
    SUMMARY_WAIT,
};
use offers::*;
use stream::*;

use crate::copy::sched::Queue;
use crate::copy::walk::{self, shown, Item, Root};
use crate::net::conn::{self};
use crate::rate::SessionRate;
use crate::usage::{self};
use crate::EngineError;
use linerate_proto::copy::{SenderControl, SenderEvent, SenderTimeouts};
use linerate_proto::frame::{
    self, Finish, Frame, Summary, FLAG_CHECKSUM, FLAG_DELETE, FLAG_DRY_RUN, FLAG_SYNC, FLAG_VERIFY, NOTE_WOULD_DELETE,
};
use linerate_proto::hello::StreamKind;
use linerate_proto::{name, ErrorCode, ProtoError};
use std::collections::HashMap;
use std::net::TcpStream;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{mpsc, Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

#[derive(Default)]
struct Totals {
    files: AtomicU64,
    bytes: AtomicU64,
    dirs: AtomicU64,
    links: AtomicU64,
    errors: AtomicU64,
    skipped_files: AtomicU64,
    skipped_bytes: AtomicU64,
    resumed_bytes: AtomicU64,
    deleted: AtomicU64,
}

struct Ctx {
    queue: Queue<Item, Arc<BigFile>>,
    chunk: u64,
    verify: bool,
    /// Files were offered (declared) on the control stream: no `FileStart` on data streams.
    sync: bool,
    /// Set when the receiver stopped answering offers.
    stalled: AtomicBool,
    keepalive: Duration,
    totals: Totals,
    progress: Arc<Progress>,
    on_error: ErrorSink,
    /// Paces every record before it goes (`--bwlimit`, or a server's share when it sends).
    pace: SessionRate,
}

impl Ctx {
    fn fail(&self, msg: String) {
        self.totals.errors.fetch_add(1, Relaxed);
        (self.on_error)(msg);
    }
}

/// Copy `cfg.sources` to the server. Per-entry failures are reported through `on_error` and
/// counted in the report; a failure of the session itself is an error.
pub fn copy(cfg: &CopyConfig, progress: Arc<Progress>, on_error: ErrorSink) -> Result<CopyReport, EngineError> {
    if cfg.sources.is_empty() {
        return Err(EngineError::Usage("no sources given".into()));
    }
    let streams = cfg.streams.clamp(1, linerate_proto::caps::MAX_STREAMS);
    let start = Instant::now();
    let cpu0 = usage::process();
    let mut control = conn::connect_control(cfg.addr, cfg.suite, &cfg.secret, cfg.key_auth.as_ref(), cfg.timeout)?;
    control.tx.send_frames(&[Frame::Begin(frame::Begin {
        dest: &cfg.dest,
        sources: cfg.sources.len() as u32,
        chunk_size: cfg.chunk_size,
        flags: cfg.flags(),
        streams,
    })])?;
    let into_dir = await_target(&mut control, cfg.timeout)?;
    let roots = roots(&cfg.sources, &cfg.dest, into_dir)?;
    let data = connect_data(cfg, &control, streams)?;
    let sent = run_sender(control, data, roots, &SendOpts::of(cfg), progress, on_error)?;
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
        client_cpu: usage::process().since(cpu0),
        client_peak_rss: usage::peak_rss(),
        skipped_files: sent.skipped_files,
        skipped_bytes: sent.skipped_bytes,
        resumed_bytes: sent.resumed_bytes,
        deleted: sent.deleted,
        pulled: false,
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
    (1..=streams)
        .map(|i| {
            conn::connect(cfg.addr, StreamKind::Data, cfg.suite, &control.stream_psk, control.session, i, cfg.timeout)
        })
        .collect()
}

/// The sending side of a session: walk `roots`, send every entry over `data`, then `Finish` on
/// `control` and wait for the receiver's summary. Used by the client's push and the server's pull.
pub fn run_sender(
    control: conn::Secured,
    data: Vec<conn::Secured>,
    roots: Vec<Root>,
    o: &SendOpts,
    progress: Arc<Progress>,
    on_error: ErrorSink,
) -> Result<Sent, EngineError> {
    // A send that makes no progress for this long fails (SO_SNDTIMEO) instead of waiting on a
    // dead link for the kernel's retransmission limit.
    for s in data.iter().chain(std::iter::once(&control)) {
        if let Some(sock) = s.rx.socket() {
            let _ = sock.set_write_timeout(Some(o.stall_timeout.max(Duration::from_millis(1))));
        }
    }
    let ctx = Arc::new(Ctx {
        queue: Queue::new(4096),
        chunk: o.chunk,
        verify: o.has(FLAG_VERIFY),
        sync: o.has(FLAG_SYNC),
        stalled: AtomicBool::new(false),
        keepalive: o.keepalive,
        totals: Totals::default(),
        progress: progress.clone(),
        on_error: on_error.clone(),
        pace: o.pace.clone(),
    });
    let timeouts = SenderTimeouts { stall: o.stall_timeout, summary: o.summary_wait };
    let offers = Arc::new(Offers {
        state: Mutex::new(OfferState {
            files: HashMap::new(),
            ctl: SenderControl::new(o.flags, o.chunk as u32, timeouts, Instant::now()),
        }),
        changed: Condvar::new(),
    });
    let ctl_tx = Arc::new(Mutex::new(control.tx));
    // Control reader: wants, notes and per-entry errors as they come, then the summary or a
    // fatal error.
    let (done_tx, done_rx) = mpsc::channel::<Result<Summary, EngineError>>();
    let data_socks: Vec<TcpStream> = data.iter().filter_map(|s| s.rx.socket()).collect();
    let mut crx = control.rx;
    let reader = {
        let (ctx, offers, list) = (ctx.clone(), offers.clone(), o.list.clone());
        let dry = o.has(FLAG_DRY_RUN);
        std::thread::spawn(move || {
            let result = loop {
                let plain = match crx.recv() {
                    Ok(Some(p)) => p,
                    Ok(None) => {
                        break Err(EngineError::net("reading from the peer", std::io::ErrorKind::UnexpectedEof.into()))
                    }
                    Err(e) => break Err(e),
                };
                let mut out = None;
                for f in frame::frames(plain) {
                    let f = match f {
                        Ok(f) => f,
                        Err(e) => {
                            out = Some(Err(e.into()));
                            break;
                        }
                    };
                    // The protocol's rules decide what this frame may be (crates/proto `copy`).
                    let mut st = offers.lock();
                    match st.ctl.handle_frame(f, Instant::now()) {
                        Err(e) => out = Some(Err(e.into())),
                        Ok(SenderEvent::Want { file, verdict, held }) => {
                            on_want(&ctx, &offers, st, file, verdict, held, dry, &list);
                        }
                        Ok(event) => {
                            drop(st);
                            match event {
                                SenderEvent::Error(e) => (ctx.on_error)(format!(
                                    "remote: {}: {} ({})",
                                    name::escape(e.path),
                                    name::escape(e.message),
                                    ErrorCode::from_u16(e.code).describe()
                                )),
                                SenderEvent::Note(n) => {
                                    ctx.totals.deleted.fetch_add(1, Relaxed);
                                    let what = if n.kind == NOTE_WOULD_DELETE { "would delete" } else { "deleted" };
                                    ListSink::say(&list, &format!("{what} {}", name::escape(n.path)));
                                }
                                SenderEvent::Summary(s) => out = Some(Ok(s)),
                                SenderEvent::Fatal(f) => out = Some(Err(remote(f.code, f.message))),
                                SenderEvent::Want { .. } => {}
                            }
                        }
                    }
                    if out.is_some() {
                        break;
                    }
                }
                if let Some(r) = out {
                    break r;
                }
            };
            if result.is_err() {
                ctx.queue.abort();
                offers.changed.notify_all();
                for s in &data_socks {
                    let _ = s.shutdown(std::net::Shutdown::Both);
                }
            }
            let _ = done_tx.send(result);
        })
    };

    let walker = {
        let (ctx, offers, ctl_tx) = (ctx.clone(), offers.clone(), ctl_tx.clone());
        let (listing, checksum) = (o.has(FLAG_DELETE), o.has(FLAG_CHECKSUM));
        std::thread::spawn(move || {
            let err = |m: String| ctx.fail(m);
            let mut out = Outbox::new(ctl_tx);
            walk::walk_listing(
                &roots,
                listing && ctx.sync,
                |item| {
                    if let Item::File(f) = &item {
                        ctx.progress.found_files.fetch_add(1, Relaxed);
                        ctx.progress.found_bytes.fetch_add(f.size, Relaxed);
                    }
                    match item {
                        Item::File(f) if ctx.sync => offer(&ctx, &offers, &mut out, f, checksum),
                        Item::Listing { dir, names } => {
                            out.keep(dir, &names);
                            true
                        }
                        item => ctx.queue.push(item),
                    }
                },
                &err,
            );
            // Every offer must be answered before the streams may finish.
            out.flush(&ctx);
            let mut st = offers.lock();
            while !st.files.is_empty() && !ctx.queue.is_aborted() {
                st = offers.changed.wait_timeout(st, WANT_POLL).unwrap_or_else(PoisonError::into_inner).0;
                if stalled(&ctx, &mut st) {
                    break;
                }
            }
            drop(st);
            ctx.queue.walker_done();
            ctx.progress.walk_done.store(1, Relaxed);
        })
    };
    let (fin_tx, fin_rx) = mpsc::channel::<Result<(), EngineError>>();
    let workers: Vec<_> = data
        .into_iter()
        .map(|s| {
            let (ctx, fin_tx) = (ctx.clone(), fin_tx.clone());
            let mut tx = s.tx;
            std::thread::spawn(move || {
                let r = stream_loop(&ctx, &mut tx);
                if r.is_err() {
                    ctx.queue.abort();
                }
                let _ = fin_tx.send(r);
            })
        })
        .collect();
    drop(fin_tx);
    // Wait for the streams, keeping the otherwise silent control stream alive.
    let mut first_err = None;
    let mut finished = 0;
    while finished < workers.len() {
        match fin_rx.recv_timeout(o.keepalive) {
            Ok(r) => {
                finished += 1;
                if let Err(e) = r {
                    first_err.get_or_insert(e);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = ctl_tx.lock().unwrap_or_else(PoisonError::into_inner).keepalive();
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                first_err.get_or_insert(EngineError::Internal("a sender thread panicked".into()));
                break;
            }
        }
    }
    for w in workers {
        let _ = w.join();
    }
    offers.changed.notify_all();
    let _ = walker.join();
    let shutdown = || ctl_tx.lock().unwrap_or_else(PoisonError::into_inner).shutdown();
    if ctx.stalled.load(Relaxed) {
        first_err.get_or_insert(EngineError::Timeout(format!(
            "the receiver answered no offer for {} s (link down, or the receiver stalled)",
            o.stall_timeout.as_secs_f64()
        )));
    }
    if first_err.is_none() && ctx.queue.is_aborted() {
        // The control reader ended the session (a fatal error, a broken protocol).
        first_err = Some(EngineError::Aborted {
            code: ErrorCode::Protocol,
            message: "the session was aborted (the control stream ended it)".into(),
        });
    }
    if let Some(e) = first_err {
        // Prefer the peer's own explanation if it sent one.
        let r = done_rx.recv_timeout(Duration::from_secs(5));
        shutdown();
        return Err(match (r, e) {
            (Ok(Err(why @ (EngineError::Remote { .. } | EngineError::Proto(_)))), _) => why,
            (_, e @ EngineError::Net { .. }) if e.is_timeout() => EngineError::Timeout(format!(
                "no progress sending to the {} for {} s (link down, or the {} stalled)",
                o.peer,
                o.stall_timeout.as_secs_f64(),
                o.peer
            )),
            (_, EngineError::Net { io: source, .. })
                if matches!(
                    source.kind(),
                    std::io::ErrorKind::BrokenPipe
                        | std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::UnexpectedEof
                ) =>
            {
                EngineError::net(
                    format!("the {} closed the connection mid-transfer (stopped or killed?)", o.peer),
                    source,
                )
            }
            (Ok(Err(why)), EngineError::Aborted { .. }) => why,
            (_, e) => e,
        });
    }
    let t = &ctx.totals;
    let fin = Finish {
        files: t.files.load(Relaxed),
        bytes: t.bytes.load(Relaxed),
        dirs: t.dirs.load(Relaxed),
        links: t.links.load(Relaxed),
    };
    // From here the summary is due, within the limit (crates/proto `copy`), and may claim no
    // more than these totals: a receiver commits only what it was sent, and a summary claiming
    // more must not make an incomplete copy look complete.
    let due = {
        let mut st = offers.lock();
        st.ctl.finish(fin, Instant::now());
        st.ctl.poll_timeout()
    };
    ctl_tx.lock().unwrap_or_else(PoisonError::into_inner).send_frames(&[Frame::Finish(fin)])?;
    let wait = due.map_or(o.summary_wait, |d| d.saturating_duration_since(Instant::now()));
    let summary = match done_rx.recv_timeout(wait) {
        Ok(s) => s,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            shutdown();
            let expired = offers.lock().ctl.handle_timeout(Instant::now() + wait).err();
            let why = expired.map_or_else(|| "no summary from the receiver".into(), |e| e.to_string());
            return Err(EngineError::Timeout(why));
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            return Err(EngineError::Internal("the control reader ended without a result".into()))
        }
    };
    let _ = reader.join();
    let summary = summary?;
    Ok(Sent {
        fin,
        summary,
        local_errors: t.errors.load(Relaxed),
        skipped_files: t.skipped_files.load(Relaxed),
        skipped_bytes: t.skipped_bytes.load(Relaxed),
        resumed_bytes: t.resumed_bytes.load(Relaxed),
        deleted: t.deleted.load(Relaxed),
    })
}

pub(crate) fn remote(code: u16, message: &[u8]) -> EngineError {
    EngineError::Remote { code: ErrorCode::from_u16(code), message: name::escape(message) }
}

/// Name each source at the destination, following `cp -r`.
fn roots(sources: &[PathBuf], dest: &[u8], into_dir: bool) -> Result<Vec<Root>, EngineError> {
    let last = name::split_dest(dest).map_err(|e| EngineError::Usage(e.to_string()))?.last().map(|s| s.to_vec());
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
                            EngineError::Usage(format!("{}: cannot name this source at the destination", shown(src)))
                        })?,
                };
                base
            } else {
                last.clone().ok_or_else(|| EngineError::Usage("destination has no name".into()))?
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
            return Err(EngineError::Usage(format!(
                "{} and {} would both be copied to '{}': copy them one at a time or to different names",
                shown(&first.path),
                shown(&r.path),
                name::escape(&r.name)
            )));
        }
    }
    Ok(roots)
}
