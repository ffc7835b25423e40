//! The sending side of `cp`: one control connection, N data streams, a walker feeding one global
//! queue, and per-stream threads that read, encrypt and send, batching small files into large
//! records and spreading the chunks of large files over every stream.

use crate::conn::{self, SendHalf, BATCH_TARGET};
use crate::cpu::{self, CpuTimes};
use crate::digest::{self, Part};
use crate::keys::KeyClient;
use crate::rate::SessionRate;
use crate::sched::{Chunked, Queue, Waited, Work};
use crate::secret::Secret;
use crate::walk::{self, shown, Item, Root, SrcFile};
use crate::EngineError;
use linerate_proto::caps::RECORD_OVERHEAD;
use linerate_proto::copy::{SenderControl, SenderEvent, SenderTimeouts};
use linerate_proto::frame::{
    self, DirEntry, FileAbort, FileEnd, FileStart, Finish, Frame, Keep, LinkEntry, Names, Offer, Summary,
    FLAG_CHECKSUM, FLAG_DELETE, FLAG_DRY_RUN, FLAG_FSYNC, FLAG_SYNC, FLAG_VERIFY, NOTE_WOULD_DELETE, WANT_MISSING,
    WANT_NONE, WANT_REFUSED,
};
use linerate_proto::hello::{StreamKind, Suite};
use linerate_proto::record::HEADER_LEN;
use linerate_proto::{name, ErrorCode, ProtoError};
use std::collections::HashMap;
use std::fs::File;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{mpsc, Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Everything a copy needs.
#[derive(Debug, Clone)]
pub struct CopyConfig {
    /// The server.
    pub addr: SocketAddr,
    /// Shared secret of the server (unused when `key_auth` is set).
    pub secret: Secret,
    /// Daemon mode: authenticate the control connection with this ed25519 identity and check
    /// the server's host key, instead of the shared secret.
    pub key_auth: Option<KeyClient>,
    /// Destination path relative to the server's root.
    pub dest: Vec<u8>,
    /// Local sources.
    pub sources: Vec<PathBuf>,
    /// Number of parallel data streams.
    pub streams: u16,
    /// Chunk size for large files (power of two).
    pub chunk_size: u32,
    /// Hash with BLAKE3 and check on the receiver before rename.
    pub verify: bool,
    /// fsync files and directories on the receiver.
    pub fsync: bool,
    /// The AEAD to use.
    pub suite: Suite,
    /// Connect and handshake timeout.
    pub timeout: Duration,
    /// Send an empty record on any stream silent this long (the server drops silent streams).
    pub keepalive: Duration,
    /// Give up when a stream can send nothing for this long (a cut link, a stalled server).
    pub stall_timeout: Duration,
    /// Offer every file first: skip those already up to date at the destination, resume partial
    /// ones (`FLAG_SYNC`).
    pub sync: bool,
    /// With `sync`: up to date means the same BLAKE3, not the same size and modification time.
    pub checksum: bool,
    /// With `sync`: delete destination entries absent from the source directories.
    pub delete: bool,
    /// With `sync`: change nothing, list what would be sent and deleted.
    pub dry_run: bool,
    /// Where lines for the user go: dry-run listings and deletions.
    pub list: Option<ListSink>,
    /// Most bit/s of records over all streams together (`cp --bwlimit`); `None`: unlimited.
    pub bwlimit: Option<u64>,
    /// A pace set by the caller instead (a server sending in its session's fair share, from
    /// [`crate::rate::Governor::admit`]); when limited, it replaces `bwlimit`.
    pub pace: SessionRate,
}

/// Receives lines for the user (what was, or would be, sent or deleted).
#[derive(Clone)]
pub struct ListSink(pub Arc<dyn Fn(&str) + Send + Sync>);

impl std::fmt::Debug for ListSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ListSink")
    }
}

impl ListSink {
    fn say(this: &Option<ListSink>, line: &str) {
        if let Some(l) = this {
            (l.0)(line);
        }
    }
}

impl CopyConfig {
    /// A push of `sources` to `dest` beneath the server's root, with the defaults of `linerate cp`.
    pub fn new(addr: SocketAddr, secret: Secret, sources: Vec<PathBuf>, dest: Vec<u8>) -> CopyConfig {
        CopyConfig {
            addr,
            secret,
            key_auth: None,
            dest,
            sources,
            streams: 4,
            chunk_size: linerate_proto::caps::DEFAULT_CHUNK,
            verify: false,
            fsync: false,
            suite: conn::preferred_suite(),
            timeout: Duration::from_secs(15),
            keepalive: KEEPALIVE,
            stall_timeout: STALL_TIMEOUT,
            sync: true,
            checksum: false,
            delete: false,
            dry_run: false,
            list: None,
            bwlimit: None,
            pace: SessionRate::unlimited(),
        }
    }

    /// The `Begin.flags` this configuration asks for.
    pub fn flags(&self) -> u32 {
        let mut f = 0;
        for (on, bit) in [
            (self.verify, FLAG_VERIFY),
            (self.fsync, FLAG_FSYNC),
            (self.sync, FLAG_SYNC),
            (self.sync && self.checksum, FLAG_CHECKSUM),
            (self.sync && self.delete, FLAG_DELETE),
            (self.sync && self.dry_run, FLAG_DRY_RUN),
        ] {
            if on {
                f |= bit;
            }
        }
        f
    }
}

/// Default keepalive interval, well inside the server's default idle timeout.
pub const KEEPALIVE: Duration = Duration::from_secs(20);

/// Default [`CopyConfig::stall_timeout`]: the server's default idle timeout, well beyond the two
/// minutes a receiver may legitimately hold a stream while it waits for another one.
pub const STALL_TIMEOUT: Duration = Duration::from_secs(300);

/// Longest wait for the server's summary after `Finish`: it waits at most two minutes for the
/// data streams, then settles directory modes and times (with fsync, possibly many).
pub const SUMMARY_WAIT: Duration = Duration::from_secs(600);

/// Live counters for a progress display.
#[derive(Debug, Default)]
pub struct Progress {
    /// File bytes sent.
    pub bytes: AtomicU64,
    /// Files sent completely.
    pub files: AtomicU64,
    /// Bytes found by the walker so far.
    pub found_bytes: AtomicU64,
    /// Files found by the walker so far.
    pub found_files: AtomicU64,
    /// 1 once the walk is complete.
    pub walk_done: AtomicU64,
    /// Told of each file as it starts (large files) and as it has been sent completely.
    pub on_file: FileHook,
}

/// A callback for [`Progress::on_file`]: `(local path, size, done)`, with `done` false when a
/// large file starts and true once the whole file has been sent. Names are raw: escape them
/// (`walk::shown`) before printing.
#[derive(Clone, Default)]
pub struct FileHook(Option<Arc<FileFn>>);

/// The function inside a [`FileHook`].
pub type FileFn = dyn Fn(&std::path::Path, u64, bool) + Send + Sync;

impl FileHook {
    /// A hook calling `f`.
    pub fn new(f: impl Fn(&std::path::Path, u64, bool) + Send + Sync + 'static) -> FileHook {
        FileHook(Some(Arc::new(f)))
    }

    /// Tell the hook, if any.
    pub fn call(&self, path: &std::path::Path, size: u64, done: bool) {
        if let Some(f) = &self.0 {
            f(path, size, done);
        }
    }
}

impl std::fmt::Debug for FileHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "FileHook(set)" } else { "FileHook(none)" })
    }
}

/// The outcome of a copy that ran to the end (possibly with per-file errors).
#[derive(Debug, Clone)]
pub struct CopyReport {
    /// File bytes sent.
    pub bytes: u64,
    /// Files sent.
    pub files: u64,
    /// Directories sent.
    pub dirs: u64,
    /// Symlinks sent.
    pub links: u64,
    /// Wall-clock seconds from first connect to the server's summary.
    pub seconds: f64,
    /// Data streams used.
    pub streams: u16,
    /// The AEAD used.
    pub cipher: &'static str,
    /// Entries that failed on this side (unreadable, changed while read).
    pub local_errors: u64,
    /// What the receiver committed, and its CPU and memory.
    pub server: Summary,
    /// This process's CPU time during the copy.
    pub client_cpu: CpuTimes,
    /// This process's peak resident memory.
    pub client_peak_rss: u64,
    /// Files found up to date at the destination (or, in a dry run, every offered file).
    pub skipped_files: u64,
    /// Bytes in those files.
    pub skipped_bytes: u64,
    /// Bytes of partial files the receiver already held, verified, and that were not sent again.
    pub resumed_bytes: u64,
    /// Entries deleted (or, in a dry run, to be deleted) at the destination.
    pub deleted: u64,
    /// True for a pull (this side received).
    pub pulled: bool,
}

impl CopyReport {
    /// Goodput in Gbit/s (SI): file bytes transferred in this run (bytes a resume kept are not
    /// counted).
    pub fn gbit_per_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes.saturating_sub(self.resumed_bytes) as f64 * 8.0 / self.seconds / 1e9
        } else {
            0.0
        }
    }

    /// True when every entry arrived.
    pub fn is_complete(&self) -> bool {
        self.local_errors == 0 && self.server.errors == 0 && self.server.files == self.files
    }
}

/// Where per-entry problems are reported as they happen.
pub type ErrorSink = Arc<dyn Fn(String) + Send + Sync>;

/// A large file being sent in chunks by several streams.
struct BigFile {
    src: SrcFile,
    file: File,
    chunks: u64,
    remaining: AtomicU64,
    failed: Mutex<Option<String>>,
    parts: Option<Mutex<Vec<Option<Part>>>>,
}

impl Chunked for Arc<BigFile> {
    fn chunks(&self) -> u64 {
        self.chunks
    }
}

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
    let cpu0 = cpu::process();
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
        client_cpu: cpu::process().since(cpu0),
        client_peak_rss: cpu::peak_rss(),
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

/// How the sending side of a session behaves (the client's in a push, the server's in a pull).
#[derive(Debug, Clone)]
pub struct SendOpts {
    /// Chunk size.
    pub chunk: u64,
    /// `FLAG_*` bits of the session.
    pub flags: u32,
    /// Keepalive interval for silent streams.
    pub keepalive: Duration,
    /// Give up on a stream that can send nothing for this long.
    pub stall_timeout: Duration,
    /// Longest wait for the receiver's summary after `Finish`.
    pub summary_wait: Duration,
    /// Where listings go.
    pub list: Option<ListSink>,
    /// What to call the other side in messages ("server", "client").
    pub peer: &'static str,
    /// Paces what the data streams send.
    pub pace: SessionRate,
}

impl SendOpts {
    /// The options of a client's push.
    pub fn of(cfg: &CopyConfig) -> SendOpts {
        SendOpts {
            chunk: u64::from(cfg.chunk_size),
            flags: cfg.flags(),
            keepalive: cfg.keepalive,
            stall_timeout: cfg.stall_timeout,
            summary_wait: SUMMARY_WAIT,
            list: cfg.list.clone(),
            peer: "server",
            pace: if cfg.pace.is_limited() { cfg.pace.clone() } else { SessionRate::fixed(cfg.bwlimit) },
        }
    }
    fn has(&self, flag: u32) -> bool {
        self.flags & flag != 0
    }
}

/// What the sending side of a session did.
#[derive(Debug, Clone, Default)]
pub struct Sent {
    /// The totals sent in `Finish`.
    pub fin: Finish,
    /// The receiver's summary.
    pub summary: Summary,
    /// Entries that failed on this side.
    pub local_errors: u64,
    /// Files the receiver already had.
    pub skipped_files: u64,
    /// Their bytes.
    pub skipped_bytes: u64,
    /// Bytes of resumed files not sent again.
    pub resumed_bytes: u64,
    /// Entries the receiver deleted (or would delete).
    pub deleted: u64,
}

/// Most files offered and not yet answered: the receiver's tracker holds at most
/// `MAX_OPEN_FILES` declared files, and the wanted ones wait in the queue beside these.
const OFFER_WINDOW: usize = 1024;

/// The control stream's state: offers awaiting their `Want` and the protocol's rules for what
/// the receiver may answer and when ([`SenderControl`]), under one lock.
struct Offers {
    state: Mutex<OfferState>,
    changed: Condvar,
}

struct OfferState {
    /// Offered files by id, to queue when their `Want` comes.
    files: HashMap<u64, SrcFile>,
    /// What the receiver may send and every deadline of the wait for it.
    ctl: SenderControl,
}

impl Offers {
    fn lock(&self) -> std::sync::MutexGuard<'_, OfferState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
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

/// Frames for the control stream from the walker (offers, listings), batched into records.
struct Outbox {
    tx: Arc<Mutex<SendHalf>>,
    buf: Vec<u8>,
    since: Instant,
}

impl Outbox {
    fn new(tx: Arc<Mutex<SendHalf>>) -> Outbox {
        let mut buf = Vec::with_capacity(OUTBOX_FLUSH + 4096);
        reset(&mut buf);
        Outbox { tx, buf, since: Instant::now() }
    }

    fn maybe_flush(&mut self, ctx: &Ctx) {
        if self.buf.len() >= OUTBOX_FLUSH || self.since.elapsed() >= Duration::from_millis(20) {
            self.flush(ctx);
        }
    }

    /// Send what is batched. A failure aborts the copy (the control reader reports why).
    fn flush(&mut self, ctx: &Ctx) {
        if self.buf.len() > HEADER_LEN {
            let r = self.tx.lock().unwrap_or_else(PoisonError::into_inner).send_buf(&mut self.buf);
            if r.is_err() {
                ctx.queue.abort();
            }
            reset(&mut self.buf);
        }
        self.since = Instant::now();
    }

    /// List directory `dir` for `--delete`, in frames of at most `MAX_KEEP_NAMES` names.
    fn keep(&mut self, dir: u64, names: &[Vec<u8>]) {
        let mut scratch = Vec::new();
        let mut parts = names.chunks(linerate_proto::caps::MAX_KEEP_NAMES / 4).peekable();
        if parts.peek().is_none() {
            Frame::Keep(Keep { dir, last: true, names: Names::encode::<&[u8]>(&[], &mut scratch) })
                .encode(&mut self.buf);
        }
        while let Some(part) = parts.next() {
            let last = parts.peek().is_none();
            Frame::Keep(Keep { dir, last, names: Names::encode(part, &mut scratch) }).encode(&mut self.buf);
            if self.buf.len() >= OUTBOX_FLUSH {
                let mut b = std::mem::take(&mut self.buf);
                let _ = self.tx.lock().unwrap_or_else(PoisonError::into_inner).send_buf(&mut b);
                self.buf = b;
                reset(&mut self.buf);
            }
        }
    }
}

/// How often a walker waiting for answers to its offers checks for a stall.
const WANT_POLL: Duration = Duration::from_millis(200);

/// Whether the receiver has answered no offer for the stall timeout (`last` is the pending count
/// and when it last changed); if so the copy is aborted.
fn stalled(ctx: &Ctx, st: &mut OfferState) -> bool {
    if st.ctl.handle_timeout(Instant::now()).is_ok() {
        return false;
    }
    ctx.stalled.store(true, Relaxed);
    ctx.queue.abort();
    true
}

/// Batch size of the control outbox.
const OUTBOX_FLUSH: usize = 256 * 1024;

/// Offer a file (sync sessions), waiting while too many offers are unanswered.
fn offer(ctx: &Ctx, offers: &Offers, out: &mut Outbox, f: SrcFile, checksum: bool) -> bool {
    let digest = if checksum {
        match hash_file(&f) {
            Ok(d) => Some(d),
            Err(msg) => {
                ctx.fail(msg);
                return true;
            }
        }
    } else {
        None
    };
    {
        let mut st = offers.lock();
        if st.files.len() >= OFFER_WINDOW {
            drop(st);
            out.flush(ctx);
            st = offers.lock();
            while st.files.len() >= OFFER_WINDOW && !ctx.queue.is_aborted() {
                st = offers.changed.wait_timeout(st, WANT_POLL).unwrap_or_else(PoisonError::into_inner).0;
                if stalled(ctx, &mut st) {
                    return false;
                }
            }
        }
        if ctx.queue.is_aborted() {
            return false;
        }
        let start = FileStart { id: f.id, parent: f.parent, name: &f.name, size: f.size, mode: f.mode, mtime: f.mtime };
        Frame::Offer(Offer { file: start, digest }).encode(&mut out.buf);
        st.ctl.offered(f.id, f.size, Instant::now());
        st.files.insert(f.id, f);
    }
    out.maybe_flush(ctx);
    true
}

fn hash_file(f: &SrcFile) -> Result<[u8; 32], String> {
    let file = open_src(f).map_err(|e| format!("{}: {e}", shown(&f.path)))?;
    let mut h = blake3::Hasher::new();
    h.update_reader(&file).map_err(|e| format!("{}: {e}", shown(&f.path)))?;
    unchanged(f, &file)?;
    Ok(*h.finalize().as_bytes())
}

/// Wakes the walker when dropped (after the pending lock, declared before it, is released).
struct Notify<'a>(&'a Condvar);

impl Drop for Notify<'_> {
    fn drop(&mut self) {
        self.0.notify_all();
    }
}

/// The receiver's answer to an offer (checked by [`SenderControl`]): queue the file (or what
/// is missing of it), or count it as up to date. Called with the offers' lock, held until the
/// file is queued: the walker finishes the queue once no offer is pending, so an answered offer
/// must be in the queue before it stops counting as pending.
#[allow(clippy::too_many_arguments)]
fn on_want(
    ctx: &Ctx,
    offers: &Offers,
    mut st: std::sync::MutexGuard<'_, OfferState>,
    file: u64,
    verdict: u8,
    held_ranges: Vec<(u64, u64)>,
    dry: bool,
    list: &Option<ListSink>,
) {
    let _notify = Notify(&offers.changed);
    let Some(mut f) = st.files.remove(&file) else { return };
    let t = &ctx.totals;
    let held: u64 = held_ranges
        .iter()
        .map(|&(first, count)| {
            // The last chunk may be short; every other one is whole.
            let last = first + count - 1;
            count * ctx.chunk - (last * ctx.chunk + ctx.chunk).saturating_sub(f.size)
        })
        .sum();
    let skip = |bytes: u64| {
        ctx.progress.found_files.fetch_sub(1, Relaxed);
        ctx.progress.found_bytes.fetch_sub(bytes, Relaxed);
    };
    match verdict {
        WANT_NONE => {
            t.skipped_files.fetch_add(1, Relaxed);
            t.skipped_bytes.fetch_add(f.size, Relaxed);
            skip(f.size);
        }
        WANT_REFUSED => skip(f.size),
        _ if dry => {
            t.skipped_files.fetch_add(1, Relaxed);
            t.skipped_bytes.fetch_add(f.size, Relaxed);
            skip(f.size);
            let how = if held > 0 { format!(" (resume: {held} of {} bytes held)", f.size) } else { String::new() };
            ListSink::say(list, &format!("would send {}{how}", shown(&f.path)));
        }
        verdict => {
            if verdict == WANT_MISSING && held > 0 {
                t.resumed_bytes.fetch_add(held, Relaxed);
                ctx.progress.found_bytes.fetch_sub(held, Relaxed);
                f.have = Some(held_ranges.into());
            }
            ctx.queue.push_ready(Item::File(f));
        }
    }
    drop(st);
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

fn is_big(chunk: u64) -> impl Fn(&Item) -> bool {
    move |i| matches!(i, Item::File(f) if f.size > chunk)
}

fn reset(buf: &mut Vec<u8>) {
    buf.clear();
    buf.resize(HEADER_LEN, 0);
}

/// Send one record, paced.
fn flush(ctx: &Ctx, tx: &mut SendHalf, buf: &mut Vec<u8>) -> Result<(), EngineError> {
    ctx.pace.take(buf.len());
    tx.send_buf(buf)
}

/// One stream: pull work, fill records, send. Flushes whenever the queue has nothing ready.
fn stream_loop(ctx: &Ctx, tx: &mut SendHalf) -> Result<(), EngineError> {
    let cap = ctx.chunk as usize + RECORD_OVERHEAD;
    let mut buf = Vec::with_capacity(cap + 64);
    reset(&mut buf);
    loop {
        let work = match ctx.queue.try_next(is_big(ctx.chunk)) {
            Some(w) => w,
            None => {
                if buf.len() > HEADER_LEN {
                    flush(ctx, tx, &mut buf)?;
                    reset(&mut buf);
                }
                match ctx.queue.next_within(is_big(ctx.chunk), ctx.keepalive) {
                    Waited::Work(w) => w,
                    Waited::Done => break,
                    Waited::Idle => {
                        tx.keepalive()?;
                        continue;
                    }
                }
            }
        };
        match work {
            Work::Item(Item::Dir { id, parent, name, mode, mtime }) => {
                Frame::Dir(DirEntry { id, parent, name: &name, mode, mtime }).encode(&mut buf);
                ctx.totals.dirs.fetch_add(1, Relaxed);
            }
            Work::Item(Item::Link { parent, name, target, mtime }) => {
                Frame::Link(LinkEntry { parent, name: &name, target: &target, mtime }).encode(&mut buf);
                ctx.totals.links.fetch_add(1, Relaxed);
            }
            Work::Item(Item::File(f)) if f.size > ctx.chunk => {
                let id = f.id;
                if buf.len() > HEADER_LEN && buf.len() + ctx.chunk as usize + 1024 > cap {
                    flush(ctx, tx, &mut buf)?;
                    reset(&mut buf);
                }
                match open_big(ctx, f) {
                    Ok(big) => {
                        ctx.progress.on_file.call(&big.src.path, big.src.size, false);
                        if !ctx.sync {
                            encode_start(&big.src, &mut buf);
                        }
                        send_chunk(ctx, &big, 0, &mut buf);
                        ctx.queue.publish(Some(big));
                    }
                    Err(msg) => {
                        ctx.queue.publish(None);
                        if ctx.sync {
                            // The offer declared it: withdraw it.
                            let code = if msg.contains("changed while") {
                                ErrorCode::SourceChanged
                            } else {
                                ErrorCode::SourceRead
                            };
                            Frame::FileAbort(FileAbort { file: id, code: code as u16, message: msg.as_bytes() })
                                .encode(&mut buf);
                        }
                        ctx.fail(msg);
                    }
                }
            }
            Work::Item(Item::File(f)) => {
                if buf.len() + f.size as usize + 1024 > cap {
                    flush(ctx, tx, &mut buf)?;
                    reset(&mut buf);
                }
                send_small(ctx, &f, &mut buf);
            }
            Work::Chunk(big, n) => {
                if buf.len() > HEADER_LEN && buf.len() + ctx.chunk as usize + 1024 > cap {
                    flush(ctx, tx, &mut buf)?;
                    reset(&mut buf);
                }
                send_chunk(ctx, &big, n, &mut buf);
            }
            // Listings go to the control stream, never into the queue.
            Work::Item(Item::Listing { .. }) => {}
        }
        if buf.len() >= BATCH_TARGET {
            flush(ctx, tx, &mut buf)?;
            reset(&mut buf);
        }
    }
    Frame::End.encode(&mut buf);
    flush(ctx, tx, &mut buf)
}

fn encode_start(f: &SrcFile, buf: &mut Vec<u8>) {
    Frame::FileStart(FileStart {
        id: f.id,
        parent: f.parent,
        name: &f.name,
        size: f.size,
        mode: f.mode,
        mtime: f.mtime,
    })
    .encode(buf);
}

fn open_src(f: &SrcFile) -> std::io::Result<File> {
    f.open()
}

/// Whether the file still looks as it did when walked.
fn unchanged(f: &SrcFile, file: &File) -> Result<(), String> {
    let m = file.metadata().map_err(|e| format!("{}: {e}", shown(&f.path)))?;
    if m.len() != f.size || walk::mtime_of(&m) != f.mtime || !m.is_file() {
        return Err(format!("{}: changed while being read; not copied", shown(&f.path)));
    }
    Ok(())
}

/// A small file travels whole in the current record: start, one chunk, end.
fn send_small(ctx: &Ctx, f: &SrcFile, buf: &mut Vec<u8>) {
    let mark = buf.len();
    let result = (|| {
        let file = open_src(f).map_err(|e| format!("{}: {e}", shown(&f.path)))?;
        if !ctx.sync {
            encode_start(f, buf);
        }
        let mut digest = None;
        if f.size > 0 {
            let at = buf.len() + frame::CHUNK_HEADER_LEN;
            frame::encode_chunk_header(buf, f.id, 0, f.size as usize);
            buf.resize(at + f.size as usize, 0);
            read_exact_at(&file, &mut buf[at..], 0).map_err(|e| format!("{}: {e}", shown(&f.path)))?;
            if ctx.verify {
                digest = Some(*blake3::hash(&buf[at..]).as_bytes());
            }
        } else if ctx.verify {
            digest = Some(*blake3::hash(b"").as_bytes());
        }
        unchanged(f, &file)?;
        Frame::FileEnd(FileEnd { file: f.id, size: f.size, digest }).encode(buf);
        Ok::<(), String>(())
    })();
    match result {
        Ok(()) => {
            ctx.totals.files.fetch_add(1, Relaxed);
            ctx.totals.bytes.fetch_add(f.size, Relaxed);
            ctx.progress.files.fetch_add(1, Relaxed);
            ctx.progress.bytes.fetch_add(f.size, Relaxed);
            ctx.progress.on_file.call(&f.path, f.size, true);
        }
        Err(msg) => {
            buf.truncate(mark);
            if ctx.sync {
                // The offer declared it: withdraw it.
                let code = if msg.contains("changed while") { ErrorCode::SourceChanged } else { ErrorCode::SourceRead };
                Frame::FileAbort(FileAbort { file: f.id, code: code as u16, message: msg.as_bytes() }).encode(buf);
            }
            ctx.fail(msg);
        }
    }
}

fn read_exact_at(file: &File, mut buf: &mut [u8], mut off: u64) -> std::io::Result<()> {
    while !buf.is_empty() {
        match file.read_at(buf, off) {
            Ok(0) => {
                return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "file shrank while being read"))
            }
            Ok(n) => {
                buf = &mut buf[n..];
                off += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn open_big(ctx: &Ctx, f: SrcFile) -> Result<Arc<BigFile>, String> {
    let file = open_src(&f).map_err(|e| format!("{}: {e}", shown(&f.path)))?;
    unchanged(&f, &file)?;
    let chunks = f.size.div_ceil(ctx.chunk);
    let parts = ctx.verify.then(|| Mutex::new(vec![None; chunks as usize]));
    Ok(Arc::new(BigFile { src: f, file, chunks, remaining: AtomicU64::new(chunks), failed: Mutex::new(None), parts }))
}

/// Read chunk `n` of a large file into the record; the stream that finishes the last chunk checks
/// the source is unchanged and ends (or aborts) the file.
fn send_chunk(ctx: &Ctx, big: &BigFile, n: u64, buf: &mut Vec<u8>) {
    let off = n * ctx.chunk;
    let len = (big.src.size - off).min(ctx.chunk) as usize;
    let mark = buf.len();
    let held = big.src.have.as_ref().is_some_and(|h| h.iter().any(|&(first, count)| n >= first && n - first < count));
    if held && big.parts.is_none() {
        // The receiver has it; nothing to read.
    } else {
        frame::encode_chunk_header(buf, big.src.id, off, len);
    }
    let at = buf.len();
    buf.resize(at + len, 0);
    if held && big.parts.is_none() {
        buf.truncate(mark);
    } else {
        match read_exact_at(&big.file, &mut buf[at..], off) {
            Ok(()) => {
                if let Some(parts) = &big.parts {
                    let p = digest::hash_chunk(&buf[at..], off, big.src.size);
                    parts.lock().unwrap_or_else(PoisonError::into_inner)[n as usize] = Some(p);
                }
                if held {
                    // Read only for the whole-file digest; the receiver has these bytes.
                    buf.truncate(mark);
                } else {
                    ctx.progress.bytes.fetch_add(len as u64, Relaxed);
                }
            }
            Err(e) => {
                buf.truncate(mark);
                big.failed
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get_or_insert(format!("{}: {e}", shown(&big.src.path)));
            }
        }
    }
    if big.remaining.fetch_sub(1, Relaxed) != 1 {
        return;
    }
    let mut failure = big.failed.lock().unwrap_or_else(PoisonError::into_inner).take();
    if failure.is_none() {
        failure = unchanged(&big.src, &big.file).err();
    }
    let digest = match (&big.parts, &failure) {
        (Some(parts), None) => {
            let parts: Option<Vec<Part>> =
                parts.lock().unwrap_or_else(PoisonError::into_inner).iter().copied().collect();
            parts.and_then(|p| digest::merge(&p, ctx.chunk, big.src.size))
        }
        _ => None,
    };
    match failure {
        None => {
            Frame::FileEnd(FileEnd { file: big.src.id, size: big.src.size, digest }).encode(buf);
            ctx.totals.files.fetch_add(1, Relaxed);
            ctx.totals.bytes.fetch_add(big.src.size, Relaxed);
            ctx.progress.files.fetch_add(1, Relaxed);
            ctx.progress.on_file.call(&big.src.path, big.src.size, true);
        }
        Some(msg) => {
            let code = if msg.contains("changed while") { ErrorCode::SourceChanged } else { ErrorCode::SourceRead };
            Frame::FileAbort(FileAbort { file: big.src.id, code: code as u16, message: msg.as_bytes() }).encode(buf);
            ctx.fail(msg);
        }
    }
}
