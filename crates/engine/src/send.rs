//! The sending side of `cp`: one control connection, N data streams, a walker feeding one global
//! queue, and per-stream threads that read, encrypt and send, batching small files into large
//! records and spreading the chunks of large files over every stream.

use crate::conn::{self, SendHalf, BATCH_TARGET};
use crate::cpu::{self, CpuTimes};
use crate::digest::{self, Part};
use crate::keys::KeyClient;
use crate::sched::{Chunked, Queue, Waited, Work};
use crate::secret::Secret;
use crate::walk::{self, shown, Item, Root, SrcFile};
use crate::EngineError;
use linerate_proto::caps::RECORD_OVERHEAD;
use linerate_proto::frame::{
    self, DirEntry, FileAbort, FileEnd, FileStart, Finish, Frame, LinkEntry, Summary, FLAG_FSYNC, FLAG_VERIFY,
};
use linerate_proto::hello::{StreamKind, Suite};
use linerate_proto::record::HEADER_LEN;
use linerate_proto::{name, ErrorCode, ProtoError};
use std::fs::File;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex, PoisonError};
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
        }
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
}

impl CopyReport {
    /// Goodput in Gbit/s (SI).
    pub fn gbit_per_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 * 8.0 / self.seconds / 1e9
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
}

struct Ctx {
    queue: Queue<Item, Arc<BigFile>>,
    chunk: u64,
    verify: bool,
    keepalive: Duration,
    totals: Totals,
    progress: Arc<Progress>,
    on_error: ErrorSink,
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
    let flags = if cfg.verify { FLAG_VERIFY } else { 0 } | if cfg.fsync { FLAG_FSYNC } else { 0 };
    control.tx.send_frames(&[Frame::Begin(frame::Begin {
        dest: &cfg.dest,
        sources: cfg.sources.len() as u32,
        chunk_size: cfg.chunk_size,
        flags,
        streams,
    })])?;
    // The answer comes at once from a working server; a silent one must not hold us forever.
    control.rx.set_timeout(Some(cfg.timeout));
    let answer = match control.rx.recv() {
        Err(EngineError::Net { source, .. })
            if matches!(source.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) =>
        {
            return Err(EngineError::Timeout(format!(
                "the server did not answer the copy request within {} s",
                cfg.timeout.as_secs_f64()
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
    let roots = roots(&cfg.sources, &cfg.dest, into_dir)?;

    let mut data = Vec::new();
    for i in 1..=streams {
        let s =
            conn::connect(cfg.addr, StreamKind::Data, cfg.suite, &control.stream_psk, control.session, i, cfg.timeout)?;
        data.push(s);
    }

    // A send that makes no progress for this long fails (SO_SNDTIMEO) instead of waiting on a
    // dead link for the kernel's retransmission limit.
    for s in data.iter().chain(std::iter::once(&control)) {
        if let Some(sock) = s.rx.socket() {
            let _ = sock.set_write_timeout(Some(cfg.stall_timeout.max(Duration::from_millis(1))));
        }
    }
    // Control reader: per-entry errors as they come, then the summary or a fatal error.
    let (done_tx, done_rx) = mpsc::channel::<Result<Summary, EngineError>>();
    let data_socks: Vec<TcpStream> = data.iter().filter_map(|s| s.rx.socket()).collect();
    let mut crx = control.rx;
    let sink = on_error.clone();
    // Set just before `Finish` goes out: a summary before it is the server breaking the protocol.
    let finish_sent = Arc::new(AtomicBool::new(false));
    let finish_sent_r = finish_sent.clone();
    let reader = std::thread::spawn(move || {
        let result = loop {
            let plain = match crx.recv() {
                Ok(Some(p)) => p,
                Ok(None) => {
                    break Err(EngineError::net("reading from the server", std::io::ErrorKind::UnexpectedEof.into()))
                }
                Err(e) => break Err(e),
            };
            let frames = match conn::decode_all(plain) {
                Ok(f) => f,
                Err(e) => break Err(e.into()),
            };
            let mut out = None;
            for f in frames {
                match f {
                    Frame::Error(e) => sink(format!(
                        "remote: {}: {} ({})",
                        name::escape(e.path),
                        name::escape(e.message),
                        ErrorCode::from_u16(e.code).describe()
                    )),
                    Frame::Summary(s) if finish_sent_r.load(SeqCst) => out = Some(Ok(s)),
                    Frame::Summary(_) => {
                        out = Some(Err(ProtoError::Violation(
                            "the server sent its summary before the client finished".into(),
                        )
                        .into()))
                    }
                    Frame::Fatal(f) => out = Some(Err(remote(f.code, f.message))),
                    other => {
                        out = Some(Err(ProtoError::Violation(format!(
                            "unexpected {other:?} from the server on the control stream"
                        ))
                        .into()))
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
            for s in &data_socks {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }
        let _ = done_tx.send(result);
    });

    let ctx = Arc::new(Ctx {
        queue: Queue::new(4096),
        chunk: u64::from(cfg.chunk_size),
        verify: cfg.verify,
        keepalive: cfg.keepalive,
        totals: Totals::default(),
        progress: progress.clone(),
        on_error: on_error.clone(),
    });
    let walker = {
        let ctx = ctx.clone();
        std::thread::spawn(move || {
            let err = |m: String| ctx.fail(m);
            walk::walk(
                &roots,
                |item| {
                    if let Item::File(f) = &item {
                        ctx.progress.found_files.fetch_add(1, Relaxed);
                        ctx.progress.found_bytes.fetch_add(f.size, Relaxed);
                    }
                    ctx.queue.push(item)
                },
                &err,
            );
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
        match fin_rx.recv_timeout(cfg.keepalive) {
            Ok(r) => {
                finished += 1;
                if let Err(e) = r {
                    first_err.get_or_insert(e);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = control.tx.keepalive();
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                first_err.get_or_insert(EngineError::Usage("a sender thread panicked".into()));
                break;
            }
        }
    }
    for w in workers {
        let _ = w.join();
    }
    let _ = walker.join();
    if let Some(e) = first_err {
        // Prefer the server's own explanation if it sent one.
        let r = done_rx.recv_timeout(Duration::from_secs(5));
        control.tx.shutdown();
        return Err(match (r, e) {
            (Ok(Err(why @ (EngineError::Remote { .. } | EngineError::Proto(_)))), _) => why,
            (_, EngineError::Net { source, .. })
                if matches!(source.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) =>
            {
                EngineError::Timeout(format!(
                    "no progress sending to the server for {} s (link down, or the server stalled)",
                    cfg.stall_timeout.as_secs_f64()
                ))
            }
            (_, EngineError::Net { source, .. })
                if matches!(
                    source.kind(),
                    std::io::ErrorKind::BrokenPipe
                        | std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::UnexpectedEof
                ) =>
            {
                EngineError::net("the server closed the connection mid-transfer (stopped or killed?)", source)
            }
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
    finish_sent.store(true, SeqCst);
    control.tx.send_frames(&[Frame::Finish(fin)])?;
    let summary = match done_rx.recv_timeout(SUMMARY_WAIT) {
        Ok(s) => s,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            control.tx.shutdown();
            let secs = SUMMARY_WAIT.as_secs();
            return Err(EngineError::Timeout(format!("the server sent no summary within {secs} s of the end")));
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            return Err(EngineError::Usage("control reader ended without a result".into()))
        }
    };
    let _ = reader.join();
    let summary = summary?;
    // The server commits only what it was sent; a summary claiming more is not from a working
    // receiver, and must not make an incomplete copy look complete.
    if summary.files > fin.files || summary.bytes > fin.bytes || summary.dirs > fin.dirs || summary.links > fin.links {
        return Err(ProtoError::Violation(format!(
            "the server's summary claims {} files, {} bytes, {} dirs, {} links; {} files, {} bytes, {} dirs, {} links \
             were sent",
            summary.files, summary.bytes, summary.dirs, summary.links, fin.files, fin.bytes, fin.dirs, fin.links
        ))
        .into());
    }
    Ok(CopyReport {
        bytes: fin.bytes,
        files: fin.files,
        dirs: fin.dirs,
        links: fin.links,
        seconds: start.elapsed().as_secs_f64(),
        streams,
        cipher: cfg.suite.name(),
        local_errors: t.errors.load(Relaxed),
        server: summary,
        client_cpu: cpu::process().since(cpu0),
        client_peak_rss: cpu::peak_rss(),
    })
}

fn remote(code: u16, message: &[u8]) -> EngineError {
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
            Ok(Root { path: src.clone(), name })
        })
        .collect()
}

fn is_big(chunk: u64) -> impl Fn(&Item) -> bool {
    move |i| matches!(i, Item::File(f) if f.size > chunk)
}

fn reset(buf: &mut Vec<u8>) {
    buf.clear();
    buf.resize(HEADER_LEN, 0);
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
                    tx.send_buf(&mut buf)?;
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
                if buf.len() > HEADER_LEN && buf.len() + ctx.chunk as usize + 1024 > cap {
                    tx.send_buf(&mut buf)?;
                    reset(&mut buf);
                }
                match open_big(ctx, f) {
                    Ok(big) => {
                        encode_start(&big.src, &mut buf);
                        send_chunk(ctx, &big, 0, &mut buf);
                        ctx.queue.publish(Some(big));
                    }
                    Err(msg) => {
                        ctx.queue.publish(None);
                        ctx.fail(msg);
                    }
                }
            }
            Work::Item(Item::File(f)) => {
                if buf.len() + f.size as usize + 1024 > cap {
                    tx.send_buf(&mut buf)?;
                    reset(&mut buf);
                }
                send_small(ctx, &f, &mut buf);
            }
            Work::Chunk(big, n) => {
                if buf.len() > HEADER_LEN && buf.len() + ctx.chunk as usize + 1024 > cap {
                    tx.send_buf(&mut buf)?;
                    reset(&mut buf);
                }
                send_chunk(ctx, &big, n, &mut buf);
            }
        }
        if buf.len() >= BATCH_TARGET {
            tx.send_buf(&mut buf)?;
            reset(&mut buf);
        }
    }
    Frame::End.encode(&mut buf);
    tx.send_buf(&mut buf)
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
    std::fs::OpenOptions::new().read(true).custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32).open(&f.path)
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
        encode_start(f, buf);
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
        }
        Err(msg) => {
            buf.truncate(mark);
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
    frame::encode_chunk_header(buf, big.src.id, off, len);
    let at = buf.len();
    buf.resize(at + len, 0);
    match read_exact_at(&big.file, &mut buf[at..], off) {
        Ok(()) => {
            if let Some(parts) = &big.parts {
                let p = digest::hash_chunk(&buf[at..], off, big.src.size);
                parts.lock().unwrap_or_else(PoisonError::into_inner)[n as usize] = Some(p);
            }
            ctx.progress.bytes.fetch_add(len as u64, Relaxed);
        }
        Err(e) => {
            buf.truncate(mark);
            big.failed
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get_or_insert(format!("{}: {e}", shown(&big.src.path)));
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
        }
        Some(msg) => {
            let code = if msg.contains("changed while") { ErrorCode::SourceChanged } else { ErrorCode::SourceRead };
            Frame::FileAbort(FileAbort { file: big.src.id, code: code as u16, message: msg.as_bytes() }).encode(buf);
            ctx.fail(msg);
        }
    }
}
