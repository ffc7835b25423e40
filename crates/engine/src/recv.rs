//! The receiving side of a copy session. Each stream has its own thread; all of them feed one
//! [`Tracker`] (the protocol's rules) under one lock, and do their file I/O outside it. A file is
//! written to a temporary name beside its final one and renamed into place only when every chunk
//! is written, its end has been declared and, with verification on, its BLAKE3 matches.

use crate::conn::{RecvHalf, SendHalf};
use crate::cpu::{self, CpuTimes};
use crate::fsx::{self, Destination, DirCache};
use crate::journal::{self, Journal};
use crate::rate::SessionRate;
use crate::send::{ListSink, Progress};
use linerate_proto::copy::{ReceiverControl, ReceiverEvent};
use linerate_proto::frame::{
    Chunk, DirEntry, FileAbort, FileEnd, FileStart, Finish, Frame, Keep, LinkEntry, Note, Offer, Ranges, Summary, Time,
    Want, FLAG_CHECKSUM, FLAG_DRY_RUN, FLAG_FSYNC, FLAG_VERIFY, NOTE_DELETED, NOTE_WOULD_DELETE, WANT_ALL,
    WANT_MISSING, WANT_NONE, WANT_REFUSED,
};
use linerate_proto::track::{Completion, Step, Tracker};
use linerate_proto::{frame, ErrorCode, ProtoError};
use std::collections::{HashMap, HashSet};
use std::net::{Shutdown, TcpStream};
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// How an abort caused by the sender's `Fatal` begins (a pull shows it as the server's error).
pub const SENDER_ENDED: &str = "the sender ended the session: ";

/// How long a frame may wait for the declaration it refers to (sent on another stream), and the
/// streams may take to end after `Finish`.
const WAIT_LIMIT: Duration = linerate_proto::copy::END_WAIT;

/// Parameters of one session, from the client's `Begin` and the server's settings.
#[derive(Debug, Clone)]
pub struct SessionParams {
    /// `FLAG_*` bits.
    pub flags: u32,
    /// Chunk size.
    pub chunk_size: u32,
    /// Number of data streams the client will open.
    pub streams: u16,
    /// Short tag used in temporary names.
    pub tag: String,
    /// How long a stream may stay silent, and how long the whole session may go without a
    /// record that carries frames (keepalives alone are not progress).
    pub idle_timeout: Duration,
    /// A pull: the name the client asked for, the one entry the target may receive
    /// ([`Tracker::for_pull`]).
    pub pull_of: Option<Vec<u8>>,
}

struct OpenFile {
    inc: fsx::Incoming,
    /// For a resumable (multi-chunk, sync) file: its journal.
    journal: Option<Mutex<Journal>>,
    parent: Arc<OwnedFd>,
    path: Vec<u8>,
    name: Box<[u8]>,
    tmp: Vec<u8>,
    mode: u32,
    mtime: Time,
}

enum Slot {
    Creating,
    Ready(Arc<OpenFile>),
}

struct State {
    tracker: Tracker,
    dirs: DirCache,
    open: HashMap<u64, Slot>,
    /// The session-level rules: attached and ended streams, progress, `Finish` (crates/proto
    /// `copy`).
    ctl: ReceiverControl,
    /// `--delete`: names kept so far per directory (None once over the cap).
    keeps: HashMap<u64, Option<HashSet<Box<[u8]>>>>,
}

#[derive(Default)]
struct Counters {
    files: AtomicU64,
    bytes: AtomicU64,
    dirs: AtomicU64,
    links: AtomicU64,
    errors: AtomicU64,
    cpu_user: AtomicU64,
    cpu_sys: AtomicU64,
    temp_seq: AtomicU64,
    skipped_files: AtomicU64,
    skipped_bytes: AtomicU64,
    resumed_bytes: AtomicU64,
    deleted: AtomicU64,
}

/// Why a session ended early.
#[derive(Debug, Clone)]
pub struct Abort {
    /// The code sent to the client.
    pub code: ErrorCode,
    /// The message sent to the client.
    pub message: String,
}

impl From<ProtoError> for Abort {
    fn from(e: ProtoError) -> Abort {
        Abort { code: e.code(), message: e.to_string() }
    }
}

/// One copy session on the receiver.
pub struct RecvSession {
    p: SessionParams,
    state: Mutex<State>,
    changed: Condvar,
    control: Mutex<SendHalf>,
    sockets: Mutex<Vec<TcpStream>>,
    aborted: AtomicBool,
    /// Threads waiting on `changed`; waking nobody costs a futex syscall, so skip it.
    waiters: AtomicUsize,
    abort_reason: Mutex<Option<Abort>>,
    n: Counters,
    fin: Mutex<Finish>,
    /// Live counters, when this side shows progress (a pull).
    progress: Option<Arc<Progress>>,
    /// Where listings go on this side (a pull); otherwise they travel to the peer as `Note`s.
    list: Option<ListSink>,
    /// Where per-entry errors are shown on this side (a pull), besides being sent to the peer.
    on_error: Option<crate::send::ErrorSink>,
    /// Paces what the data streams receive (a server's cap or fair share, a pull's --bwlimit).
    pace: OnceLock<SessionRate>,
}

/// The answer to an offer: verdict, chunk ranges held, and the file to write (none when nothing
/// will be written).
type Decision = (u8, Vec<(u64, u64)>, Option<OpenFile>);

/// What a pull's receiving side did beyond its summary.
#[derive(Debug, Clone, Copy, Default)]
pub struct SyncCounts {
    /// Files found up to date (in a dry run: every offered file).
    pub skipped_files: u64,
    /// Their bytes.
    pub skipped_bytes: u64,
    /// Bytes of partial files reused.
    pub resumed_bytes: u64,
    /// Entries deleted (or that would be).
    pub deleted: u64,
}

/// How a session ended.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The client got a summary.
    Done(Summary),
    /// The session was aborted.
    Aborted(Abort),
}

impl RecvSession {
    /// A session writing beneath `dest`, reporting on `control`.
    pub fn new(p: SessionParams, dest: Destination, control: SendHalf) -> Arc<RecvSession> {
        Self::with_display(p, dest, control, None, None, None)
    }

    /// A session that also updates `progress` and lists to `list` locally (the receiving side of a
    /// pull, in the client).
    pub fn with_display(
        p: SessionParams,
        dest: Destination,
        control: SendHalf,
        progress: Option<Arc<Progress>>,
        list: Option<ListSink>,
        on_error: Option<crate::send::ErrorSink>,
    ) -> Arc<RecvSession> {
        Arc::new(RecvSession {
            state: Mutex::new(State {
                tracker: match &p.pull_of {
                    Some(name) => Tracker::for_pull(p.chunk_size, name),
                    None => Tracker::new(p.chunk_size),
                },
                dirs: DirCache::new(dest.dir),
                open: HashMap::new(),
                ctl: ReceiverControl::new(p.flags, p.streams, p.idle_timeout, Instant::now()),
                keeps: HashMap::new(),
            }),
            p,
            changed: Condvar::new(),
            control: Mutex::new(control),
            sockets: Mutex::new(Vec::new()),
            aborted: AtomicBool::new(false),
            waiters: AtomicUsize::new(0),
            abort_reason: Mutex::new(None),
            n: Counters::default(),
            fin: Mutex::new(Finish::default()),
            progress,
            list,
            on_error,
            pace: OnceLock::new(),
        })
    }

    /// A record arrived: with frames it is progress; a keepalive ends the session once nothing
    /// else came for the idle timeout ([`ReceiverControl::handle_record`]).
    fn record(&self, empty: bool) -> Result<(), Abort> {
        self.lock().ctl.handle_record(empty, Instant::now()).map_err(Abort::from)
    }

    /// The sender's `Finish` totals (zero until it arrived).
    pub fn finish_totals(&self) -> Finish {
        *self.fin.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sync counters.
    pub fn sync_counts(&self) -> SyncCounts {
        SyncCounts {
            skipped_files: self.n.skipped_files.load(Relaxed),
            skipped_bytes: self.n.skipped_bytes.load(Relaxed),
            resumed_bytes: self.n.resumed_bytes.load(Relaxed),
            deleted: self.n.deleted.load(Relaxed),
        }
    }

    fn has(&self, flag: u32) -> bool {
        self.p.flags & flag != 0
    }

    /// Remove (or, for a resumable file when `keep` is set, preserve for the next run) what an
    /// unfinished file left behind.
    fn drop_file(of: &OpenFile, keep: bool) {
        match &of.journal {
            Some(j) if keep => {
                let _ = j.lock().unwrap_or_else(PoisonError::into_inner).flush(&of.inc.file);
            }
            Some(j) => {
                fsx::discard_incoming(&of.parent, &of.inc);
                j.lock().unwrap_or_else(PoisonError::into_inner).remove(&of.parent);
            }
            None => fsx::discard_incoming(&of.parent, &of.inc),
        }
    }

    /// Wake waiters after a change made under the lock (the lock orders our change before any
    /// waiter's count, so a waiter that missed the change is counted here).
    fn wake(&self) {
        if self.waiters.load(SeqCst) > 0 {
            self.changed.notify_all();
        }
    }

    /// Wait on `changed` for at most `left`, counted in `waiters`.
    fn wait<'a>(&self, st: MutexGuard<'a, State>, left: Duration) -> MutexGuard<'a, State> {
        self.waiters.fetch_add(1, SeqCst);
        let st = self.changed.wait_timeout(st, left).unwrap_or_else(PoisonError::into_inner).0;
        self.waiters.fetch_sub(1, SeqCst);
        st
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether data stream `stream` would be admitted (asked before its handshake, so that a
    /// stream beyond the announced count costs the server nothing).
    pub fn can_attach(&self, stream: u16) -> bool {
        !self.aborted.load(Relaxed) && self.lock().ctl.can_attach(stream)
    }

    /// Admit data stream `stream`; each index once, within the count the client announced.
    pub fn attach(&self, stream: u16, sock: Option<TcpStream>) -> bool {
        if self.aborted.load(Relaxed) || stream == 0 || stream > self.p.streams {
            return false;
        }
        let ok = self.lock().ctl.attach(stream);
        if ok {
            if let Some(s) = sock {
                self.sockets.lock().unwrap_or_else(PoisonError::into_inner).push(s);
            }
        }
        ok
    }

    /// Pace the data streams with `rate` (set once, before the first data stream attaches): each
    /// stream waits for its share after every record, so TCP back-pressure slows the sender.
    pub fn pace_with(&self, rate: SessionRate) {
        let _ = self.pace.set(rate);
    }

    /// Register the control socket so an abort can close it.
    pub fn add_socket(&self, sock: TcpStream) {
        self.sockets.lock().unwrap_or_else(PoisonError::into_inner).push(sock);
    }

    /// End the session: tell the client why, close every stream, remove temporary files.
    pub fn abort(&self, a: Abort) {
        if self.aborted.swap(true, Relaxed) {
            return;
        }
        let msg = a.message.clone();
        *self.abort_reason.lock().unwrap_or_else(PoisonError::into_inner) = Some(a.clone());
        let _ = self
            .control
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send_frames(&[Frame::Fatal(frame::Fatal { code: a.code as u16, message: msg.as_bytes() })]);
        for s in self.sockets.lock().unwrap_or_else(PoisonError::into_inner).iter() {
            let _ = s.shutdown(Shutdown::Both);
        }
        let mut st = self.lock();
        for (_, slot) in st.open.drain() {
            if let Slot::Ready(of) = slot {
                Self::drop_file(&of, true);
            }
        }
        drop(st);
        self.changed.notify_all();
    }

    /// Send frames on the control stream.
    pub fn send_control(&self, frames: &[Frame<'_>]) -> Result<(), crate::EngineError> {
        self.control.lock().unwrap_or_else(PoisonError::into_inner).send_frames(frames)
    }

    fn report(&self, code: ErrorCode, path: &[u8], msg: &str) {
        self.n.errors.fetch_add(1, Relaxed);
        if let Some(sink) = &self.on_error {
            sink(format!(
                "{}: {} ({})",
                linerate_proto::name::escape(path),
                linerate_proto::name::escape(msg.as_bytes()),
                code.describe()
            ));
        }
        let _ = self
            .control
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send_frames(&[Frame::Error(frame::ErrorReport { code: code as u16, path, message: msg.as_bytes() })]);
    }

    /// Wait (bounded) until `f` returns Some: frames may refer to entries declared on other streams.
    /// Only a data stream that has not ended can still declare something, so when the caller's
    /// stream is the last one open the answer is final at once; otherwise the wait ends after
    /// [`WAIT_LIMIT`] or the idle timeout, whichever is shorter.
    fn until<T>(&self, f: impl FnMut(&mut State) -> Result<Option<T>, ProtoError>) -> Result<T, Abort> {
        self.until_from(false, f)
    }

    /// [`Self::until`] for a caller on the control stream (which cannot declare anything itself).
    fn until_from<T>(
        &self,
        control: bool,
        mut f: impl FnMut(&mut State) -> Result<Option<T>, ProtoError>,
    ) -> Result<T, Abort> {
        // The control stream waits a little longer than the data streams do, so that a data
        // stream's own failure (it is what carries the declarations) is the one reported.
        let extra = if control { Duration::from_secs(2) } else { Duration::ZERO };
        let deadline = Instant::now() + WAIT_LIMIT.min(self.p.idle_timeout) + extra;
        let mut st = self.lock();
        loop {
            if self.aborted.load(Relaxed) {
                return Err(Abort { code: ErrorCode::Protocol, message: "session aborted".into() });
            }
            if let Some(v) = f(&mut st)? {
                return Ok(v);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || st.ctl.ended().saturating_add(u16::from(!control)) >= self.p.streams {
                return Err(ProtoError::Violation("a frame refers to an entry that was never declared".into()).into());
            }
            st = self.wait(st, left);
        }
    }

    fn entry_path(st: &State, parent: u64, name: &[u8]) -> Vec<u8> {
        let mut p = st.tracker.dir_path(parent);
        if !p.is_empty() {
            p.push(b'/');
        }
        p.extend_from_slice(name);
        p
    }

    /// Serve one data stream until its `End`, or abort the session on a protocol error.
    pub fn run_data(self: &Arc<Self>, mut rx: RecvHalf) {
        let cpu0 = cpu::thread();
        rx.set_timeout(Some(self.p.idle_timeout));
        rx.set_record_cap(linerate_proto::caps::data_record_cap(self.p.chunk_size));
        let r = self.data_loop(&mut rx);
        let used = cpu::thread().since(cpu0);
        self.n.cpu_user.fetch_add(used.user_us, Relaxed);
        self.n.cpu_sys.fetch_add(used.sys_us, Relaxed);
        match r {
            Ok(()) => {
                self.lock().ctl.stream_ended();
                self.wake();
            }
            Err(a) => self.abort(a),
        }
    }

    fn data_loop(&self, rx: &mut RecvHalf) -> Result<(), Abort> {
        loop {
            let plain = match rx.recv() {
                Ok(Some(p)) => p,
                Ok(None) => {
                    return Err(Abort {
                        code: ErrorCode::Protocol,
                        message: "data stream closed before its end".into(),
                    })
                }
                Err(crate::EngineError::Proto(e)) => return Err(e.into()),
                Err(e) if e.is_timeout() => {
                    let secs = self.p.idle_timeout.as_secs_f64();
                    return Err(Abort {
                        code: ErrorCode::Protocol,
                        message: format!("a data stream was silent for {secs} s (the idle timeout)"),
                    });
                }
                Err(e) => return Err(Abort { code: ErrorCode::Protocol, message: e.to_string() }),
            };
            self.record(plain.is_empty())?;
            if plain.is_empty() {
                continue;
            }
            if let Some(pace) = self.pace.get() {
                pace.take(plain.len());
            }
            for f in frame::frames(plain) {
                match f? {
                    Frame::Dir(d) => self.on_dir(&d)?,
                    Frame::Link(l) => self.on_link(&l)?,
                    Frame::FileStart(s) => self.on_file_start(&s)?,
                    Frame::Chunk(c) => self.on_chunk(&c)?,
                    Frame::FileEnd(e) => self.on_file_end(&e)?,
                    Frame::FileAbort(a) => self.on_file_abort(&a)?,
                    Frame::End => return Ok(()),
                    other => {
                        return Err(
                            ProtoError::Violation(format!("frame {other:?} is not allowed on a data stream")).into()
                        )
                    }
                }
            }
        }
    }

    fn on_dir(&self, d: &DirEntry) -> Result<(), Abort> {
        let failed = self.until(|st| {
            Ok(match st.tracker.dir(d)? {
                Step::Accepted => {
                    let dry = self.has(FLAG_DRY_RUN);
                    let r = st.dirs.get(d.parent, &st.tracker).and_then(|p| {
                        if dry {
                            fsx::open_dir(&p, d.name)
                        } else {
                            fsx::make_dir(&p, d.name)
                        }
                    });
                    if dry && r.is_err() {
                        // Would be created: everything beneath it is new.
                        st.dirs.mark_failed(d.id);
                        return Ok(Some(None));
                    }
                    Some(match r {
                        Ok(fd) => {
                            st.dirs.insert(d.id, fd);
                            None
                        }
                        Err(e) => {
                            st.dirs.mark_failed(d.id);
                            Some((Self::entry_path(st, d.parent, d.name), e))
                        }
                    })
                }
                _ => None,
            })
        })?;
        self.wake();
        match failed {
            None => {
                self.n.dirs.fetch_add(1, Relaxed);
            }
            Some((path, e)) => self.report(ErrorCode::Io, &path, &format!("cannot create directory: {e}")),
        }
        Ok(())
    }

    fn on_link(&self, l: &LinkEntry) -> Result<(), Abort> {
        let (parent, path) = self.until(|st| {
            Ok(match st.tracker.link(l)? {
                Step::Accepted => Some((st.dirs.get(l.parent, &st.tracker), Self::entry_path(st, l.parent, l.name))),
                _ => None,
            })
        })?;
        if self.has(FLAG_DRY_RUN) {
            return Ok(());
        }
        let tmp = fsx::temp_name(&self.p.tag, u64::MAX - self.n.temp_seq.fetch_add(1, Relaxed));
        match parent.and_then(|p| fsx::make_symlink(&p, &tmp, l.name, l.target, l.mtime)) {
            Ok(()) => {
                self.n.links.fetch_add(1, Relaxed);
            }
            Err(e) => self.report(ErrorCode::Io, &path, &format!("cannot create symlink: {e}")),
        }
        Ok(())
    }

    fn on_file_start(&self, s: &FileStart) -> Result<(), Abort> {
        let (parent, path) = self.until(|st| {
            Ok(match st.tracker.file_start(s)? {
                Step::Accepted => {
                    st.open.insert(s.id, Slot::Creating);
                    Some((st.dirs.get(s.parent, &st.tracker), Self::entry_path(st, s.parent, s.name)))
                }
                _ => None,
            })
        })?;
        let tmp = fsx::temp_name(&self.p.tag, s.id);
        let created = parent.and_then(|p| fsx::create_incoming(&p, &tmp, s.mode).map(|f| (p, f)));
        let mut st = self.lock();
        let still_wanted = matches!(st.open.get(&s.id), Some(Slot::Creating));
        match created {
            Ok((parent, inc)) if still_wanted => {
                if let Some(p) = &self.progress {
                    p.found_files.fetch_add(1, Relaxed);
                    p.found_bytes.fetch_add(s.size, Relaxed);
                }
                let of = OpenFile {
                    inc,
                    journal: None,
                    parent,
                    path,
                    name: s.name.into(),
                    tmp,
                    mode: s.mode,
                    mtime: s.mtime,
                };
                st.open.insert(s.id, Slot::Ready(Arc::new(of)));
            }
            Ok((parent, inc)) => fsx::discard_incoming(&parent, &inc),
            Err(e) => {
                st.open.remove(&s.id);
                st.tracker.abandon(s.id);
                drop(st);
                self.wake();
                self.report(ErrorCode::Io, &path, &format!("cannot create file: {e}"));
                return Ok(());
            }
        }
        drop(st);
        self.wake();
        Ok(())
    }

    /// Wait until file `id` is open (or gone); None if it was abandoned.
    fn ready(&self, id: u64) -> Result<Option<Arc<OpenFile>>, Abort> {
        self.until(|st| {
            Ok(match st.open.get(&id) {
                Some(Slot::Ready(of)) => Some(Some(of.clone())),
                Some(Slot::Creating) => None,
                None => Some(None),
            })
        })
    }

    fn on_chunk(&self, c: &Chunk) -> Result<(), Abort> {
        let step = self.until(|st| {
            Ok(match st.tracker.chunk(c.file, c.offset, c.data.len())? {
                Step::NotYet => None,
                s => Some(s),
            })
        })?;
        if step != Step::Accepted {
            return Ok(());
        }
        let Some(of) = self.ready(c.file)? else {
            return Ok(());
        };
        if let Err(e) = of.inc.file.write_all_at(c.data, c.offset) {
            self.fail_file(c.file, ErrorCode::Io, &format!("write failed: {e}"));
            return Ok(());
        }
        if let Some(j) = &of.journal {
            let index = c.offset / u64::from(self.p.chunk_size.max(1));
            let r = j.lock().unwrap_or_else(PoisonError::into_inner).record(&of.inc.file, index, c.data);
            if let Err(e) = r {
                self.fail_file(c.file, ErrorCode::Io, &format!("writing the resume journal: {e}"));
                return Ok(());
            }
        }
        if let Some(p) = &self.progress {
            p.bytes.fetch_add(c.data.len() as u64, Relaxed);
        }
        let step = self.lock().tracker.chunk_written(c.file);
        if let Step::Complete(done) = step {
            self.commit(done)?;
        }
        Ok(())
    }

    fn on_file_end(&self, e: &FileEnd) -> Result<(), Abort> {
        if self.p.flags & FLAG_VERIFY != 0 && e.digest.is_none() {
            return Err(ProtoError::Violation("file end without a digest in a verified session".into()).into());
        }
        let step = self.until(|st| {
            Ok(match st.tracker.file_end(e)? {
                Step::NotYet => None,
                s => Some(s),
            })
        })?;
        if let Step::Complete(done) = step {
            self.commit(done)?;
        }
        Ok(())
    }

    fn on_file_abort(&self, a: &FileAbort) -> Result<(), Abort> {
        let slot =
            self.until(|st| Ok(if st.tracker.abandon(a.file) { Some(st.open.remove(&a.file)) } else { None }))?;
        if let Some(Slot::Ready(of)) = slot {
            Self::drop_file(&of, false);
        }
        self.wake();
        Ok(())
    }

    /// Give up on a file after a local failure: remove its temporary file, tell the client.
    fn fail_file(&self, id: u64, code: ErrorCode, msg: &str) {
        let mut st = self.lock();
        st.tracker.abandon(id);
        let slot = st.open.remove(&id);
        drop(st);
        self.wake();
        if let Some(Slot::Ready(of)) = slot {
            Self::drop_file(&of, false);
            self.report(code, &of.path, msg);
        }
    }

    /// Every chunk is written and the end declared: verify, apply metadata, rename into place.
    fn commit(&self, done: Completion) -> Result<(), Abort> {
        let Some(of) = self.ready(done.file)? else {
            return Ok(());
        };
        self.lock().open.remove(&done.file);
        let r = (|| -> Result<(), (ErrorCode, String)> {
            let io = |what: &str, e: std::io::Error| (ErrorCode::Io, format!("{what}: {e}"));
            if self.p.flags & FLAG_VERIFY != 0 {
                let mut h = blake3::Hasher::new();
                h.update_reader(&of.inc.file).map_err(|e| io("re-reading for verification", e))?;
                if Some(*h.finalize().as_bytes()) != done.digest {
                    return Err((ErrorCode::Integrity, "BLAKE3 of the written file differs from the source".into()));
                }
            }
            // Every chunk was checked for offset and exact length and written, so the size is right.
            if of.journal.is_none() && fsx::created_with(of.mode) {
                fsx::set_mtime(&of.inc.file, of.mtime).map_err(|e| io("setting the modification time", e))?;
            } else {
                fsx::set_meta(&of.inc.file, of.mode, of.mtime).map_err(|e| io("setting mode and time", e))?;
            }
            if self.p.flags & FLAG_FSYNC != 0 {
                of.inc.file.sync_all().map_err(|e| io("fsync", e))?;
            }
            fsx::commit_incoming(&of.parent, &of.inc, &of.name, &of.tmp).map_err(|e| io("renaming into place", e))?;
            if let Some(j) = &of.journal {
                j.lock().unwrap_or_else(PoisonError::into_inner).remove(&of.parent);
            }
            if self.p.flags & FLAG_FSYNC != 0 {
                fsx::sync_dir(&of.parent).map_err(|e| io("fsync of directory", e))?;
            }
            Ok(())
        })();
        match r {
            Ok(()) => {
                self.n.files.fetch_add(1, Relaxed);
                self.n.bytes.fetch_add(done.size, Relaxed);
                if let Some(p) = &self.progress {
                    p.files.fetch_add(1, Relaxed);
                    use std::os::unix::ffi::OsStrExt;
                    p.on_file.call(std::path::Path::new(std::ffi::OsStr::from_bytes(&of.path)), done.size, true);
                }
            }
            Err((code, msg)) => {
                Self::drop_file(&of, false);
                self.report(code, &of.path, &msg);
            }
        }
        Ok(())
    }

    /// Serve the control stream: wait for `Finish`, for every data stream's `End`, then settle
    /// directories and send the summary.
    pub fn run_control(self: &Arc<Self>, mut rx: RecvHalf) -> Outcome {
        let cpu0 = cpu::thread();
        let fin = match self.wait_finish(&mut rx) {
            Ok(f) => f,
            Err(a) => {
                self.abort(a);
                return self.aborted_outcome();
            }
        };
        // Every stream must end; Finish only comes after the client saw all its streams through.
        let mut st = self.lock();
        while !st.ctl.all_ended() && !self.aborted.load(Relaxed) {
            let now = Instant::now();
            if let Err(e) = st.ctl.handle_timeout(now) {
                drop(st);
                self.abort(e.into());
                return self.aborted_outcome();
            }
            let left = st.ctl.poll_timeout().map_or(WAIT_LIMIT, |d| d.saturating_duration_since(now));
            st = self.wait(st, left.max(Duration::from_millis(1)));
        }
        if self.aborted.load(Relaxed) {
            return self.aborted_outcome();
        }
        let leftovers: Vec<(u64, Option<Arc<OpenFile>>)> = st
            .tracker
            .open_file_ids()
            .into_iter()
            .map(|id| {
                (
                    id,
                    match st.open.remove(&id) {
                        Some(Slot::Ready(of)) => Some(of),
                        _ => None,
                    },
                )
            })
            .collect();
        for (id, _) in &leftovers {
            st.tracker.abandon(*id);
        }
        // Looked up one by one rather than collected: a copy of every directory's metadata would
        // add a third to the receiver's peak memory for a tree of many directories.
        let mut meta_errors = Vec::new();
        for id in st.tracker.dirs_deepest_first() {
            let st = &mut *st;
            let Some((mode, mtime)) = st.tracker.dir_info(id).map(|d| (d.mode, d.mtime)) else { continue };
            // A directory that could not be created was reported then; skip it here.
            if let Ok(fd) = st.dirs.get(id, &st.tracker) {
                let r = fsx::set_meta(&*fd, mode, mtime).and_then(|()| {
                    if self.p.flags & FLAG_FSYNC != 0 {
                        fsx::sync_dir(&fd)
                    } else {
                        Ok(())
                    }
                });
                if let Err(e) = r {
                    meta_errors.push((st.tracker.dir_path(id), e.to_string()));
                }
            }
        }
        drop(st);
        for (_, of) in leftovers {
            if let Some(of) = of {
                // A resumable file keeps its verified chunks for the next run.
                Self::drop_file(&of, true);
                self.report(ErrorCode::Integrity, &of.path, "incomplete: not every chunk arrived");
            } else {
                self.report(ErrorCode::Integrity, b"", "a declared file never completed");
            }
        }
        for (path, e) in meta_errors {
            self.report(ErrorCode::Io, &path, &format!("setting directory mode and time: {e}"));
        }
        let files = self.n.files.load(Relaxed);
        if files + self.n.errors.load(Relaxed) < fin.files {
            self.report(ErrorCode::Integrity, b"", &format!("client sent {} files, {files} arrived", fin.files));
        }
        let used = cpu::thread().since(cpu0);
        let summary = Summary {
            files,
            bytes: self.n.bytes.load(Relaxed),
            dirs: self.n.dirs.load(Relaxed),
            links: self.n.links.load(Relaxed),
            errors: self.n.errors.load(Relaxed),
            cpu_user_us: self.n.cpu_user.load(Relaxed) + used.user_us,
            cpu_sys_us: self.n.cpu_sys.load(Relaxed) + used.sys_us,
            peak_rss: cpu::peak_rss(),
        };
        let _ = self.control.lock().unwrap_or_else(PoisonError::into_inner).send_frames(&[Frame::Summary(summary)]);
        Outcome::Done(summary)
    }

    /// Read the control stream until `Finish`: offers (sync) and listings (`--delete`) come first.
    fn wait_finish(&self, rx: &mut RecvHalf) -> Result<Finish, Abort> {
        rx.set_timeout(Some(self.p.idle_timeout));
        let mut wants = Vec::new();
        loop {
            let plain = match rx.recv() {
                Ok(Some([])) => {
                    self.record(true)?;
                    continue;
                }
                Ok(Some(p)) => p,
                Ok(None) => {
                    return Err(Abort { code: ErrorCode::Protocol, message: "peer closed the control stream".into() })
                }
                Err(crate::EngineError::Proto(e)) => return Err(e.into()),
                Err(e) if e.is_timeout() => {
                    let secs = self.p.idle_timeout.as_secs_f64();
                    return Err(Abort {
                        code: ErrorCode::Protocol,
                        message: format!("the control stream was silent for {secs} s (the idle timeout)"),
                    });
                }
                Err(e) => return Err(Abort { code: ErrorCode::Protocol, message: e.to_string() }),
            };
            self.record(false)?;
            self.lock().ctl.working(true, Instant::now());
            let fin = self.control_record(plain, &mut wants);
            self.lock().ctl.working(false, Instant::now());
            let fin = fin?;
            if !wants.is_empty() {
                let frames: Vec<Frame<'_>> = wants
                    .iter()
                    .map(|(file, verdict, have): &(u64, u8, Vec<u8>)| {
                        Frame::Want(Want { file: *file, verdict: *verdict, have: Ranges::from_encoded(have) })
                    })
                    .collect();
                self.send_control(&frames)
                    .map_err(|e| Abort { code: ErrorCode::Protocol, message: format!("answering offers: {e}") })?;
                wants.clear();
            }
            if let Some(f) = fin {
                *self.fin.lock().unwrap_or_else(PoisonError::into_inner) = f;
                return Ok(f);
            }
        }
    }

    /// One record of the control stream before `Finish`: offers and listings; the `Finish`, if
    /// it holds one (as its last frame).
    fn control_record(&self, plain: &[u8], wants: &mut Vec<(u64, u8, Vec<u8>)>) -> Result<Option<Finish>, Abort> {
        let mut fin = None;
        for f in frame::frames(plain) {
            let event = self.lock().ctl.handle_control_frame(f?, Instant::now())?;
            match event {
                ReceiverEvent::Offer(o) => self.on_offer(&o, wants)?,
                ReceiverEvent::Keep(k) => self.on_keep(&k)?,
                ReceiverEvent::Finish(x) => fin = Some(x),
                ReceiverEvent::Fatal(f) => {
                    // The sender gave up (a pull's server); say why, in its words.
                    let message = format!("{SENDER_ENDED}{}", linerate_proto::name::escape(f.message));
                    return Err(Abort { code: ErrorCode::from_u16(f.code), message });
                }
            }
        }
        Ok(fin)
    }

    /// A file offered in a sync session: decide what of it to fetch, and get ready to receive it.
    fn on_offer(&self, o: &Offer<'_>, wants: &mut Vec<(u64, u8, Vec<u8>)>) -> Result<(), Abort> {
        let s = &o.file;
        let (parent, path) = self.until_from(true, |st| {
            Ok(match st.tracker.file_start(s)? {
                Step::Accepted => {
                    st.open.insert(s.id, Slot::Creating);
                    Some((st.dirs.get(s.parent, &st.tracker), Self::entry_path(st, s.parent, s.name)))
                }
                _ => None,
            })
        })?;
        let dry = self.has(FLAG_DRY_RUN);
        let chunk = u64::from(self.p.chunk_size.max(1));
        let decided = (|| -> Result<Decision, String> {
            let parent = match parent {
                Ok(p) => p,
                Err(_) if dry => return Ok((WANT_ALL, Vec::new(), None)),
                Err(e) => return Err(format!("cannot create file: {e}")),
            };
            if self.up_to_date(&parent, s, o.digest) {
                return Ok((WANT_NONE, Vec::new(), None));
            }
            let src = journal::Source { name: s.name, size: s.size, mtime: s.mtime, chunk };
            if dry {
                let have = if s.size > chunk { journal::probe(&parent, &src) } else { Vec::new() };
                return Ok((if have.is_empty() { WANT_ALL } else { WANT_MISSING }, have, None));
            }
            let tmp = fsx::temp_name(&self.p.tag, s.id);
            let (inc, jr, have) = if s.size > chunk {
                let p = journal::open(&parent, &src).map_err(|e| format!("cannot create partial file: {e}"))?;
                (fsx::Incoming { file: p.file, tmp: Some(p.name) }, Some(Mutex::new(p.journal)), p.have)
            } else {
                let inc =
                    fsx::create_incoming(&parent, &tmp, s.mode).map_err(|e| format!("cannot create file: {e}"))?;
                (inc, None, Vec::new())
            };
            let of = OpenFile {
                inc,
                journal: jr,
                parent,
                path: path.clone(),
                name: s.name.into(),
                tmp,
                mode: s.mode,
                mtime: s.mtime,
            };
            Ok((if have.is_empty() { WANT_ALL } else { WANT_MISSING }, have, Some(of)))
        })();
        let (verdict, have, of) = match decided {
            Ok(d) => d,
            Err(msg) => {
                let mut st = self.lock();
                st.open.remove(&s.id);
                st.tracker.abandon(s.id);
                drop(st);
                self.wake();
                self.report(ErrorCode::Io, &path, &msg);
                wants.push((s.id, WANT_REFUSED, Vec::new()));
                return Ok(());
            }
        };
        let held: u64 = have
            .iter()
            .flat_map(|&(first, count)| first..first.saturating_add(count))
            .map(|i| s.size.saturating_sub(i.saturating_mul(chunk)).min(chunk))
            .sum();
        let mut st = self.lock();
        match of {
            Some(of) => {
                st.tracker.prefill(s.id, have.iter().copied());
                st.open.insert(s.id, Slot::Ready(Arc::new(of)));
                self.n.resumed_bytes.fetch_add(held, Relaxed);
                if let Some(p) = &self.progress {
                    p.found_files.fetch_add(1, Relaxed);
                    p.found_bytes.fetch_add(s.size - held, Relaxed);
                }
            }
            None => {
                st.open.remove(&s.id);
                st.tracker.skip(s.id);
                self.n.skipped_files.fetch_add(1, Relaxed);
                self.n.skipped_bytes.fetch_add(s.size, Relaxed);
                if dry {
                    if let Some(l) = &self.list {
                        let how = if held > 0 {
                            format!(" (resume: {held} of {} bytes held)", s.size)
                        } else {
                            String::new()
                        };
                        (l.0)(&format!("would receive {}{how}", linerate_proto::name::escape(&path)));
                    }
                }
            }
        }
        drop(st);
        self.wake();
        let mut enc = Vec::new();
        let _ = Ranges::encode(&have, &mut enc);
        wants.push((s.id, verdict, enc));
        Ok(())
    }

    /// Whether the destination already holds offered file `s`: a regular file of the same size
    /// and modification time, or, with `--checksum`, of the same size and BLAKE3.
    fn up_to_date(&self, parent: &OwnedFd, s: &FileStart<'_>, digest: Option<[u8; 32]>) -> bool {
        use rustix::fs::{self as rfs, AtFlags, FileType};
        let Ok(st) = rfs::statat(parent, s.name, AtFlags::SYMLINK_NOFOLLOW) else { return false };
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile || st.st_size as u64 != s.size {
            return false;
        }
        if self.has(FLAG_CHECKSUM) {
            let Some(want) = digest else { return false };
            let flags = rfs::OFlags::RDONLY | rfs::OFlags::NOFOLLOW | rfs::OFlags::CLOEXEC;
            let Ok(fd) = rfs::openat(parent, s.name, flags, rfs::Mode::empty()) else { return false };
            let mut h = blake3::Hasher::new();
            return h.update_reader(std::fs::File::from(fd)).is_ok() && *h.finalize().as_bytes() == want;
        }
        st.st_mtime == s.mtime.sec && i128::from(st.st_mtime_nsec) == i128::from(s.mtime.nsec)
    }

    /// `--delete`: the names source directory `k.dir` holds; after the last part, remove
    /// everything else in it.
    fn on_keep(&self, k: &Keep<'_>) -> Result<(), Abort> {
        let done = self.until_from(true, |st| {
            if st.tracker.dir_info(k.dir).is_none() {
                return Ok(None);
            }
            let entry = st.keeps.entry(k.dir).or_insert_with(|| Some(HashSet::new()));
            if let Some(set) = entry {
                if set.len() + k.names.len() > linerate_proto::caps::MAX_DIR_NAMES {
                    *entry = None;
                } else {
                    set.extend(k.names.iter().map(Box::from));
                }
            }
            if !k.last {
                return Ok(Some(None));
            }
            let set = st.keeps.remove(&k.dir).flatten();
            Ok(Some(Some((set, st.dirs.get(k.dir, &st.tracker), st.tracker.dir_path(k.dir)))))
        })?;
        let Some((set, dir, path)) = done else { return Ok(()) };
        let Some(set) = set else {
            self.report(ErrorCode::Limit, &path, "too many names to delete safely; nothing deleted here");
            return Ok(());
        };
        // A directory that does not exist (dry run) or could not be made has nothing to delete.
        let Ok(dir) = dir else { return Ok(()) };
        let dry = self.has(FLAG_DRY_RUN);
        let extra = match fsx::list_dir(&dir) {
            Ok(names) => names.into_iter().filter(|n| !set.contains(n.as_slice()) && !journal::is_working_name(n)),
            Err(e) => {
                self.report(ErrorCode::Io, &path, &format!("listing for --delete: {e}"));
                return Ok(());
            }
        };
        for name in extra {
            let mut shown = path.clone();
            if !shown.is_empty() {
                shown.push(b'/');
            }
            shown.extend_from_slice(&name);
            if !dry {
                if let Err(e) = fsx::remove_tree(&dir, &name) {
                    self.report(ErrorCode::Io, &shown, &format!("cannot delete: {e}"));
                    continue;
                }
            }
            self.n.deleted.fetch_add(1, Relaxed);
            let kind = if dry { NOTE_WOULD_DELETE } else { NOTE_DELETED };
            match &self.list {
                Some(l) => {
                    let what = if dry { "would delete" } else { "deleted" };
                    (l.0)(&format!("{what} {}", linerate_proto::name::escape(&shown)));
                }
                None => {
                    let _ = self.send_control(&[Frame::Note(Note { kind, path: &shown })]);
                }
            }
        }
        Ok(())
    }

    fn aborted_outcome(&self) -> Outcome {
        let a = self.abort_reason.lock().unwrap_or_else(PoisonError::into_inner).clone();
        Outcome::Aborted(a.unwrap_or(Abort { code: ErrorCode::Protocol, message: "aborted".into() }))
    }

    /// CPU used by this session's threads so far.
    pub fn cpu(&self) -> CpuTimes {
        CpuTimes { user_us: self.n.cpu_user.load(Relaxed), sys_us: self.n.cpu_sys.load(Relaxed) }
    }
}
