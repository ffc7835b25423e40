//! The receiving side of a copy session. Each stream has its own thread; all of them feed one
//! [`Tracker`] (the protocol's rules) under one lock, and do their file I/O outside it. A file is
//! written unnamed beside its final name (a large, resumable one to a partial file in the
//! destination's working directory, [`crate::workdir`]) and given its name only when every
//! chunk is written, its end has been declared and, with verification on, its BLAKE3 matches.
//! At the end of a session, partial files of its tree that it was not offered (their source is
//! gone) are removed, and the working directory with them when it is empty.

use crate::confined::{self, Destination, DirCache};
use crate::filter::TreeFilter;
use crate::journal::Journal;
use crate::mounts::{self, Exhausted};
use crate::send::{ListSink, Progress};
use crate::tally::Tally;
use crate::workdir::{self, WorkDir};
use linerate_net::conn::{RecvHalf, SendHalf};
use linerate_net::rate::SessionRate;
use linerate_net::resources::CpuTimes;
use linerate_proto::copy::receiver::Receiver;
use linerate_proto::frame::{Finish, Frame, Summary, Time, FLAG_DRY_RUN};
use linerate_proto::track::Tracker;
use linerate_proto::{ErrorCode, ProtoError};
use std::collections::{HashMap, HashSet};
use std::net::{Shutdown, TcpStream};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

mod control;
mod data;
mod links;

/// What failed when a directory could not be created ([`RecvSession::entry_failed`]).
const CREATE_DIR: &str = "cannot create directory";

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
    /// A pull: the one entry the target may receive ([`Tracker::for_pull`]).
    pub pull_of: Option<PullOf>,
    /// `--delete` keeps the names these rules exclude (the sender's `--exclude`, unless
    /// `--delete-excluded`).
    pub keep: Option<TreeFilter>,
    /// `--modify-window`, seconds (checked against its cap when `Begin` was decoded).
    pub modify_window: u32,
}

/// The one entry a pull's target receives: the server sends it under the name the client asked
/// for (`Pull.name`), and it is written under `local`. The two differ when where a pull lands
/// depends on whether its source is a directory, which the client learns only from `Target`.
#[derive(Debug, Clone)]
pub struct PullOf {
    /// `Pull.name`.
    pub asked: Vec<u8>,
    /// The name in the local target.
    pub local: Vec<u8>,
}

struct OpenFile {
    inc: confined::Incoming,
    /// Held while a chunk is written: streams writing one file take turns here, asleep, instead
    /// of spinning on the inode's lock in the kernel (`rwsem_spin_on_owner`).
    write: Mutex<()>,
    /// For a resumable (multi-chunk, sync) file: its journal.
    journal: Option<Mutex<Journal>>,
    /// For a resumable file: the working directory that holds it (`inc.tmp` names it there).
    partial_in: Option<Arc<WorkDir>>,
    /// The destination's own file, whose data is up to date (every chunk answered as held):
    /// opened read-only, given its metadata at its end, never renamed.
    in_place: bool,
    parent: Arc<OwnedFd>,
    path: Vec<u8>,
    name: Box<[u8]>,
    tmp: Vec<u8>,
    mode: u32,
    mtime: Time,
    /// The owner and group to apply before it is renamed into place (`-o`, `-g`).
    ids: confined::Ids,
}

/// A file to create, with what its [`OpenFile`] needs besides the file itself.
struct NewFile {
    parent: Arc<OwnedFd>,
    /// The id of its directory.
    dir: u64,
    path: Vec<u8>,
    name: Box<[u8]>,
    mode: u32,
    mtime: Time,
    ids: confined::Ids,
}

enum Slot {
    /// Answered "send it all" in a directory this session created, not yet created: the first
    /// data stream that needs it creates it, so the control stream only answers and the files
    /// of a new tree are created on every data stream's thread, not one after another on one.
    Deferred(Box<NewFile>),
    Creating,
    Ready(Arc<OpenFile>),
}

struct State {
    tracker: Tracker,
    dirs: DirCache,
    open: HashMap<u64, Slot>,
    /// The session machine: the session-level rules (attached and ended streams, progress,
    /// `Finish`) and what goes out on the control stream (crates/proto `copy::receiver`).
    ctl: Receiver,
    /// `--delete`: names kept so far per directory (None once over the cap).
    keeps: HashMap<u64, Option<HashSet<Box<[u8]>>>>,
    /// Keys of the partial files this session used ([`journal::key`]).
    offered: HashSet<String>,
    /// The sender's user and group ids mapped to this machine's (`-o`, `-g`).
    ids: linerate_proto::owner::IdMap,
}

/// The destination's working directory, looked for at most once and made at most once.
#[derive(Default)]
struct Work {
    looked: bool,
    made_failed: bool,
    dir: Option<Arc<WorkDir>>,
}

/// The receiver's counters: the ones both ends keep ([`Tally`]) and its own.
#[derive(Default)]
struct Counters {
    tally: Tally,
    cpu_user: AtomicU64,
    cpu_sys: AtomicU64,
    temp_seq: AtomicU64,
    /// Entries skipped without a message of their own beneath a directory that failed (which
    /// was reported once).
    beneath_failed: AtomicU64,
    /// File bytes written to the destination by this session (named in a full disk's message).
    written: AtomicU64,
    /// `-S` with `verify`: hole bytes charged to the session's budget for hashing zeros it was
    /// not sent ([`links`]).
    holes: AtomicU64,
    /// Offered files answered `WANT_REFUSED`.
    refused: AtomicU64,
}

/// Why a session ended early.
#[derive(Debug, Clone)]
pub struct Abort {
    /// The code sent to the client.
    pub code: ErrorCode,
    /// The message sent to the client.
    pub message: String,
    /// The client went away mid-session (its connections closed or were reset), as an
    /// interrupted client does: logged as such, not as a broken rule.
    pub interrupted: bool,
}

impl From<ProtoError> for Abort {
    fn from(e: ProtoError) -> Abort {
        Abort::new(e.code(), e.to_string())
    }
}

impl Abort {
    /// An abort with `code` and `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Abort {
        Abort { code, message: message.into(), interrupted: false }
    }

    /// A protocol abort with `message`.
    fn protocol(message: impl Into<String>) -> Abort {
        Abort::new(ErrorCode::Protocol, message)
    }

    /// The client went away: `message` says where.
    fn gone(message: impl Into<String>) -> Abort {
        Abort { interrupted: true, ..Abort::protocol(message) }
    }
}

/// The next record of a stream (an empty one is a keepalive), or the abort that ends the
/// session: the peer closed `stream` (`closed` says what that means there), it was silent for
/// `idle`, or it broke.
fn next_record<'a>(rx: &'a mut RecvHalf, stream: &str, closed: &str, idle: Duration) -> Result<&'a [u8], Abort> {
    match rx.recv() {
        Ok(Some(p)) => Ok(p),
        Ok(None) => Err(Abort::gone(closed)),
        Err(e) if e.is_peer_gone() => Err(Abort::gone(e.to_string())),
        Err(linerate_net::EngineError::Proto(e)) => Err(e.into()),
        Err(e) if e.is_timeout() => {
            Err(Abort::protocol(format!("{stream} was silent for {} s (the idle timeout)", idle.as_secs_f64())))
        }
        Err(e) => Err(Abort::protocol(e.to_string())),
    }
}

/// One copy session on the receiver.
pub struct RecvSession {
    p: SessionParams,
    /// The destination directory (directory 0), where the working directory lives.
    dest: Option<OwnedFd>,
    work: Mutex<Work>,
    state: Mutex<State>,
    changed: Condvar,
    control: Mutex<SendHalf>,
    sockets: Mutex<Vec<TcpStream>>,
    /// Set once by [`Self::abort`]: the session's state, which stream threads and writers read
    /// before each piece of work (and a hash's reader before each block: `data::WhileAlive`).
    /// A flag, not a stop polled for: nothing waits for it on a timer, since the abort itself
    /// wakes whoever blocks (it shuts the sockets down and notifies `changed`'s waiters).
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
    /// Which owners and groups this process may apply.
    privileges: crate::ids::Privileges,
}

/// The answer to an offer: verdict, chunk ranges held, and the file to write (none when nothing
/// will be written): [`Slot::Ready`] or [`Slot::Deferred`].
type Decision = (u8, Vec<(u64, u64)>, Option<Slot>);

/// What a pull's receiving side did beyond its summary.
#[derive(Debug, Clone, Copy, Default)]
pub struct SyncCounts {
    /// Files found up to date.
    pub skipped_files: u64,
    /// Their bytes.
    pub skipped_bytes: u64,
    /// Bytes of partial files reused.
    pub resumed_bytes: u64,
    /// Entries deleted (or that would be).
    pub deleted: u64,
    /// A dry run: files, and their bytes less what a resume would keep, that would be received.
    pub would_send: (u64, u64),
    /// Files refused (not received): beneath a directory that failed, or failing themselves.
    pub refused: u64,
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
    /// The name an entry declared in `parent` is written under: a pull's root under its local
    /// name ([`PullOf`]); everything else as sent.
    fn local_name<'a>(&'a self, parent: u64, name: &'a [u8]) -> &'a [u8] {
        match &self.p.pull_of {
            Some(pull) if parent == 0 && name == pull.asked.as_slice() => &pull.local,
            _ => name,
        }
    }

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
        let dest_dir = dest.dir.try_clone().ok();
        Arc::new(RecvSession {
            dest: dest_dir,
            work: Mutex::new(Work::default()),
            state: Mutex::new(State {
                tracker: match &p.pull_of {
                    Some(pull) => Tracker::for_pull(p.chunk_size, &pull.local),
                    None => Tracker::new(p.chunk_size),
                }
                .with_specials(p.flags & linerate_proto::frame::FLAG_DEVICES != 0),
                ids: linerate_proto::owner::IdMap::new(p.flags),
                dirs: {
                    let mut dirs = DirCache::new(dest.dir);
                    if dest.absent {
                        // A dry run's destination that would be created: nothing in it exists.
                        dirs.mark_failed(0);
                    }
                    dirs
                },
                open: HashMap::new(),
                ctl: Receiver::new(p.flags, p.streams, p.idle_timeout, Instant::now()),
                keeps: HashMap::new(),
                offered: HashSet::new(),
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
            privileges: crate::ids::Privileges::of_process(),
        })
    }

    /// The owner and group to apply for the sender's `owner`: mapped by name, then limited to what
    /// this process may set (owners as root, groups as root or a member).
    fn ids_for(&self, st: &State, owner: linerate_proto::frame::Owner) -> confined::Ids {
        self.privileges.allowed(st.ids.local(owner))
    }

    /// An `IdName` from the sender: map the name to this machine's id (the number when unknown).
    fn on_id_name(&self, n: &linerate_proto::frame::IdName<'_>) -> Result<(), Abort> {
        use crate::ids;
        use linerate_proto::frame::IdKind;
        self.lock().ids.name(n, |kind, name| match kind {
            IdKind::User => ids::user_id(name),
            IdKind::Group => ids::group_id(name),
        })?;
        Ok(())
    }

    /// A record arrived: with frames it is progress; a keepalive ends the session once nothing
    /// else came for the idle timeout (`ReceiverControl::handle_record`).
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
            skipped_files: self.n.tally.skipped_files.load(Relaxed),
            skipped_bytes: self.n.tally.skipped_bytes.load(Relaxed),
            resumed_bytes: self.n.tally.resumed_bytes.load(Relaxed),
            deleted: self.n.tally.deleted.load(Relaxed),
            would_send: (self.n.tally.would_files.load(Relaxed), self.n.tally.would_bytes.load(Relaxed)),
            refused: self.n.refused.load(Relaxed),
        }
    }

    fn has(&self, flag: u32) -> bool {
        self.p.flags & flag != 0
    }

    /// What an entry may remove when a directory holds its name (a type change): rsync's rule,
    /// the whole directory with `--delete`, else only an empty one.
    fn in_the_way(&self) -> confined::InTheWay {
        if self.has(linerate_proto::frame::FLAG_DELETE) {
            confined::InTheWay::Tree
        } else {
            confined::InTheWay::EmptyDir
        }
    }

    /// Remove (or, for a resumable file when `keep` is set, preserve for the next run) what an
    /// unfinished file left behind.
    fn drop_file(of: &OpenFile, keep: bool) {
        // After any chunk being written (on a data stream's thread) and its journal entry.
        let _turn = of.write.lock().unwrap_or_else(PoisonError::into_inner);
        match (&of.journal, &of.partial_in) {
            // A partial file that holds nothing is no head start for the next run: not kept.
            (Some(j), Some(_)) if keep && j.lock().unwrap_or_else(PoisonError::into_inner).holds_chunks() => {
                let _ = j.lock().unwrap_or_else(PoisonError::into_inner).flush(&of.inc.file);
            }
            (Some(j), Some(work)) => {
                confined::discard_incoming(&work.fd, &of.inc);
                j.lock().unwrap_or_else(PoisonError::into_inner).remove(&work.fd);
            }
            _ => confined::discard_incoming(&of.parent, &of.inc),
        }
    }

    /// The destination's working directory: looked for once; with `make`, made if there is none
    /// (once: a destination that cannot take it receives without resume).
    fn work_dir(&self, make: bool) -> Option<Arc<WorkDir>> {
        let dest = self.dest.as_ref()?;
        let mut w = self.work.lock().unwrap_or_else(PoisonError::into_inner);
        if w.dir.is_none() && !w.looked {
            w.looked = true;
            w.dir = workdir::find(dest).ok().flatten().map(Arc::new);
        }
        if w.dir.is_none() && make && !w.made_failed {
            match workdir::find_or_create(dest) {
                Ok(d) => w.dir = Some(Arc::new(d)),
                Err(_) => w.made_failed = true,
            }
        }
        w.dir.clone()
    }

    /// The working directory, if this session has found or made one (no look at the disk).
    fn known_work_dir(&self) -> Option<Arc<WorkDir>> {
        self.work.lock().unwrap_or_else(PoisonError::into_inner).dir.clone()
    }

    /// The session is over: remove the partial files of its tree it was not offered (`clean`:
    /// it completed) and the working directory if nothing is left in it.
    fn settle_work_dir(&self, clean: bool) {
        let Some(dest) = &self.dest else { return };
        let work = if clean { self.work_dir(false) } else { self.known_work_dir() };
        let Some(work) = work else { return };
        if clean {
            let all = workdir::leftovers(&work).unwrap_or_default();
            if !all.is_empty() {
                // The session's tree: the names it declared in the destination, among the tops of
                // the leftovers' paths (one pass over the directories, and only when needed).
                let tops: HashSet<&[u8]> =
                    all.iter().filter_map(|l| l.path.as_deref()?.split(|&b| b == b'/').next()).collect();
                let (roots, offered) = {
                    let mut st = self.lock();
                    let roots: HashSet<Vec<u8>> =
                        st.tracker.top_names().filter(|n| tops.contains(n)).map(<[u8]>::to_vec).collect();
                    (roots, std::mem::take(&mut st.offered))
                };
                for l in workdir::abandoned(&all, &roots, &offered) {
                    workdir::remove(&work, &l.key);
                }
            }
        }
        workdir::remove_if_empty(dest, &work);
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
        !self.aborted.load(Relaxed) && self.lock().ctl.rules().can_attach(stream)
    }

    /// Admit data stream `stream`; each index once, within the count the client announced.
    pub fn attach(&self, stream: u16, sock: Option<TcpStream>) -> bool {
        if self.aborted.load(Relaxed) || stream == 0 || stream > self.p.streams {
            return false;
        }
        let ok = self.lock().ctl.rules_mut().attach(stream);
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
        // Held until the `Fatal` is out and the streams are closed: the session's outcome waits
        // for it ([`Self::aborted_outcome`]), so a `serve --once` cannot exit between another
        // thread's seeing `aborted` and this one's telling the client why (the client then read
        // only "unexpected end of file").
        let mut reason = self.abort_reason.lock().unwrap_or_else(PoisonError::into_inner);
        if self.aborted.swap(true, Relaxed) {
            return;
        }
        *reason = Some(a.clone());
        self.lock().ctl.abort(a.code as u16, a.message.as_bytes());
        let _ = self.flush_control();
        for s in self.sockets.lock().unwrap_or_else(PoisonError::into_inner).iter() {
            let _ = s.shutdown(Shutdown::Both);
        }
        let mut st = self.lock();
        for (_, slot) in st.open.drain() {
            if let Slot::Ready(of) = slot {
                Self::drop_file(&of, true);
            }
        }
        if self.p.flags & FLAG_DRY_RUN == 0 {
            // Best effort: the session is over either way.
            let _ = self.apply_dir_meta(&mut st, false);
        }
        drop(st);
        self.settle_work_dir(false);
        self.changed.notify_all();
        drop(reason);
    }

    /// Send frames on the control stream before the session runs (the server's `Target`).
    pub fn send_control(&self, frames: &[Frame<'_>]) -> Result<(), linerate_net::EngineError> {
        self.control.lock().unwrap_or_else(PoisonError::into_inner).send_frames(frames)
    }

    /// Send what the session machine queued for the control stream, in its order. Never called
    /// with the state's lock held (the control lock comes first).
    fn flush_control(&self) -> Result<(), linerate_net::EngineError> {
        let mut tx = self.control.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = Vec::new();
        {
            let mut st = self.lock();
            while let Some(rec) = st.ctl.poll_transmit() {
                out.push(rec);
            }
        }
        let mut buf = Vec::new();
        for rec in out {
            buf.clear();
            buf.resize(linerate_proto::record::HEADER_LEN, 0);
            buf.extend_from_slice(&rec);
            tx.send_buf(&mut buf)?;
        }
        Ok(())
    }

    fn report(&self, code: ErrorCode, path: &[u8], msg: &str) {
        self.n.tally.errors.fetch_add(1, Relaxed);
        if let Some(sink) = &self.on_error {
            sink(format!(
                "{}: {} ({})",
                linerate_proto::name::escape(path),
                linerate_proto::name::escape(msg.as_bytes()),
                code.describe()
            ));
        }
        self.lock().ctl.report(code as u16, path, msg.as_bytes());
        let _ = self.flush_control();
    }

    /// A failure `e` to create entry `path` in directory `parent` (its handle `dir`, when open)
    /// while `what`: an entry beneath a directory that failed is skipped without a message (that
    /// directory was reported once; what lies beneath it is counted); a file system that takes
    /// no more (full, over quota, read-only) ends the session with one message
    /// ([`Self::exhausted`]); permission refused (EACCES, EPERM: the directory is not writable
    /// or immutable) fails the directory itself, once, and nothing more is tried in it, as rsync
    /// skips a failed directory; anything else is reported for this entry, and the rest goes on.
    fn entry_failed(
        &self,
        dir: Option<&OwnedFd>,
        parent: u64,
        path: &[u8],
        what: &str,
        e: &std::io::Error,
    ) -> Result<(), Abort> {
        if confined::BeneathFailed::is(e) {
            self.n.beneath_failed.fetch_add(1, Relaxed);
            return Ok(());
        }
        if let Some(x) = Exhausted::of(e) {
            return Err(self.exhausted(dir, path, x, e));
        }
        if e.kind() == std::io::ErrorKind::PermissionDenied {
            let mut st = self.lock();
            let first = st.dirs.mark_failed(parent);
            let shown = match st.tracker.dir_path(parent) {
                p if p.is_empty() => "the destination".to_string(),
                p => format!("'{}'", linerate_proto::name::escape(&p)),
            };
            drop(st);
            if !first {
                self.n.beneath_failed.fetch_add(1, Relaxed);
                return Ok(());
            }
            self.report(ErrorCode::Io, path, &format!("{what}: {e}; nothing more is copied into {shown}"));
            return Ok(());
        }
        // A directory that failed takes its subtree with it (DirCache::mark_failed): say so.
        let beneath = if what == CREATE_DIR { "; nothing beneath it is copied" } else { "" };
        self.report(ErrorCode::Io, path, &format!("{what}: {e}{beneath}"));
        Ok(())
    }

    /// The abort that ends a session whose destination file system takes no more: which file
    /// system, what happened to it, and how much this session wrote first.
    fn exhausted(&self, dir: Option<&OwnedFd>, path: &[u8], x: Exhausted, e: &std::io::Error) -> Abort {
        let fs = match dir {
            Some(d) => mounts::describe(d),
            None => mounts::describe(&*self.lock().dirs.root()),
        };
        let written = self.n.written.load(Relaxed);
        Abort::new(
            ErrorCode::Storage,
            format!(
                "{fs} {} after this copy wrote {} to it ({}: {e})",
                x.what(),
                linerate_model::units::format_size(written as f64),
                linerate_proto::name::escape(path),
            ),
        )
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
                return Err(Abort::protocol("session aborted"));
            }
            if let Some(v) = f(&mut st)? {
                return Ok(v);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || st.ctl.rules().ended().saturating_add(u16::from(!control)) >= self.p.streams {
                return Err(ProtoError::Violation("a frame refers to an entry that was never declared".into()).into());
            }
            st = self.wait(st, left);
        }
    }

    /// An entry the tracker accepted: refuse (`Err`, with the message to report) a name of the
    /// working directory's form ([`linerate_proto::name::is_work_dir_name`]), which the receiver
    /// never writes for a peer, so no peer can write into a working directory or plant one.
    fn admit(name: &[u8]) -> Result<(), &'static str> {
        if linerate_proto::name::is_work_dir_name(name) {
            return Err("the name has the form of a linerate working directory, never written for a peer");
        }
        Ok(())
    }

    /// The handle of directory `parent` for a new entry `name`, or why the entry is refused there
    /// ([`Self::admit`], as `InvalidInput`, or the directory's own failure).
    fn parent_for(st: &mut State, parent: u64, name: &[u8]) -> std::io::Result<Arc<OwnedFd>> {
        Self::admit(name).map_err(|why| std::io::Error::new(std::io::ErrorKind::InvalidInput, why))?;
        st.dirs.get(parent, &st.tracker)
    }

    fn entry_path(st: &State, parent: u64, name: &[u8]) -> Vec<u8> {
        let mut p = st.tracker.dir_path(parent);
        if !p.is_empty() {
            p.push(b'/');
        }
        p.extend_from_slice(name);
        p
    }

    /// CPU used by this session's threads so far.
    pub fn cpu(&self) -> CpuTimes {
        CpuTimes { user_us: self.n.cpu_user.load(Relaxed), sys_us: self.n.cpu_sys.load(Relaxed) }
    }
}
