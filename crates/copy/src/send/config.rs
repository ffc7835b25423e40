//! What a copy is asked to do and what it reports: the client's configuration, the sending
//! side's options, live progress and the final report.

use crate::filter::{Filter, TreeFilter};
use linerate_net::auth::keys::KeyClient;
use linerate_net::auth::secret::Secret;
use linerate_net::conn::{self};
use linerate_net::rate::SessionRate;
use linerate_net::resources::CpuTimes;
use linerate_proto::frame::{
    Finish, Placement, Summary, FLAG_CHECKSUM, FLAG_DELETE, FLAG_DEVICES, FLAG_DRY_RUN, FLAG_FSYNC, FLAG_GROUP,
    FLAG_HARD_LINKS, FLAG_NUMERIC_IDS, FLAG_OWNER, FLAG_SPARSE, FLAG_SYNC, FLAG_VERIFY,
};
use linerate_proto::hello::Suite;
use std::net::SocketAddr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

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
    /// `streams` is a default the path may raise: after the control connection's handshake, its
    /// measured round trip decides ([`streams_for_path`]). Off when the user gave `-P`.
    pub auto_streams: bool,
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
    /// [`linerate_net::rate::Governor::admit`]); when limited, it replaces `bwlimit`.
    pub pace: SessionRate,
    /// What to call the receiver in messages: "server", or for a local copy "destination".
    pub peer: &'static str,
    /// `-H`: files with several names in the tree are sent once and linked on the receiver.
    pub hard_links: bool,
    /// `-S`: holes of sparse files are not sent, and stay holes on the receiver.
    pub sparse: bool,
    /// `--modify-window`: modification times within this many seconds count as equal in the
    /// up-to-date check (0: to the nanosecond).
    pub modify_window: u32,
    /// Where the sources land relative to `dest`. `new` leaves `cp -r`'s rule ([`Placement::Cp`]);
    /// `linerate cp` asks for the rsync rule's choice ([`placement`]).
    pub placement: Placement,
    /// Keep owners (`-o`): the receiver applies them as root.
    pub owner: bool,
    /// Keep groups (`-g`).
    pub group: bool,
    /// Owners and groups by number, not by name (`--numeric-ids`).
    pub numeric_ids: bool,
    /// Send character and block devices (`--devices`, part of `-D`).
    pub devices: bool,
    /// Send FIFOs and sockets (`--specials`, part of `-D`).
    pub specials: bool,
    /// `--exclude`/`--include` rules: the sender skips what they exclude; under `--delete` the
    /// receiver keeps what they exclude (sent to the server in a `Filter` frame).
    pub filter: Option<Arc<Filter>>,
    /// `--delete-excluded`: the rules do not keep names at the destination from `--delete`.
    pub delete_excluded: bool,
}

/// Where a push's sources land, by the rsync rule for sources, so that running the same command
/// again lands exactly where the first run did:
/// * a directory named without a trailing `/`, or several sources: into `dest` (created when
///   absent) under their own names, so `cp dir dest` makes `dest/dir`;
/// * a directory named with a trailing `/` (or `.`): `dest` becomes the copy, so `cp dir/ dest`
///   fills `dest` with what `dir` holds;
/// * one file (or symlink, or special file): into `dest` when `dest` ends in `/` (created when
///   absent); otherwise into `dest` if it is a directory, else the file takes the name `dest`.
pub fn placement(sources: &[PathBuf], dest: &[u8]) -> Placement {
    match sources {
        [one] if names_contents(one) && one.is_dir() => Placement::As,
        [one] if std::fs::symlink_metadata(one).is_ok_and(|m| m.is_dir()) => Placement::Into,
        [_] if dest.ends_with(b"/") => Placement::Into,
        [_] => Placement::Cp,
        [] => Placement::Cp,
        _ => Placement::Into,
    }
}

/// Whether a source path names a directory's contents rather than the directory: a trailing `/`
/// or `/.`, or a path without a last name of its own (`.`, `..`, `/`).
pub fn names_contents(p: &std::path::Path) -> bool {
    let b = p.as_os_str().as_bytes();
    b.ends_with(b"/") || b.ends_with(b"/.") || b == b"." || p.file_name().is_none()
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
    pub(super) fn say(this: &Option<ListSink>, line: &str) {
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
            streams: 4,
            auto_streams: false,
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
            placement: Placement::Cp,
            filter: None,
            delete_excluded: false,
            hard_links: false,
            sparse: false,
            modify_window: 0,
            peer: "server",
            owner: false,
            group: false,
            numeric_ids: false,
            devices: false,
            specials: false,
            dest,
            sources,
        }
    }

    /// The rules as applied to a tree whose root's name begins every path (`root_in_path`), or
    /// `None` without rules.
    pub fn tree_filter(&self, root_in_path: bool) -> Option<TreeFilter> {
        self.filter.as_ref().filter(|f| !f.is_empty()).map(|f| TreeFilter { filter: f.clone(), root_in_path })
    }

    /// The `Begin.flags` this configuration asks for.
    pub fn flags(&self) -> u32 {
        let mut f = self.placement.flag();
        for (on, bit) in [
            (self.verify, FLAG_VERIFY),
            (self.fsync, FLAG_FSYNC),
            (self.sync, FLAG_SYNC),
            (self.sync && self.checksum, FLAG_CHECKSUM),
            (self.sync && self.delete, FLAG_DELETE),
            (self.sync && self.dry_run, FLAG_DRY_RUN),
            (self.owner, FLAG_OWNER),
            (self.group, FLAG_GROUP),
            ((self.owner || self.group) && self.numeric_ids, FLAG_NUMERIC_IDS),
            (self.devices || self.specials, FLAG_DEVICES),
            (self.hard_links, FLAG_HARD_LINKS),
            (self.sparse, FLAG_SPARSE),
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
    /// Stopped (by a signal thread) to end the copy: the peer is told (code 17, Interrupted)
    /// and the copy returns [`linerate_net::EngineError::Interrupted`].
    pub cancel: linerate_model::shutdown::Shutdown,
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
    /// A dry run: nothing was changed.
    pub dry_run: bool,
    /// In a dry run, the files and bytes (less what a resume would keep) that would be sent.
    pub would_send: (u64, u64),
    /// The phases of a copy over ssh (set by the command that started the remote side).
    pub phases: Option<linerate_model::doc::cp::CpPhases>,
    /// The session's phases, for a push (a pull's sender is the other side): `connect_s` to
    /// `close_s`; the command that ran it adds the rest.
    pub timeline: Option<linerate_model::doc::cp::CpTimeline>,
    /// Files the receiver would not take, so not sent: beneath a directory it could not create
    /// (reported once, for the directory) or failing themselves (each reported).
    pub refused_files: u64,
    /// Devices, FIFOs and sockets found and not sent (no `-D`), as rsync's "skipping non-regular
    /// file".
    pub skipped_specials: u64,
    /// Bytes of this copy still in the page cache at its end, where that makes its rate one to
    /// the page cache ([`linerate_model::doc::cp::unwritten_share`]); set by the command that
    /// ran a copy to this host without `--fsync`.
    pub page_cache_bytes: Option<u64>,
}

impl CopyReport {
    /// File bytes transferred in this run (bytes a resume kept are not counted).
    pub fn moved(&self) -> u64 {
        self.bytes.saturating_sub(self.resumed_bytes)
    }

    /// Goodput in Gbit/s (SI) of the bytes [moved](Self::moved); `None` for a copy too small or
    /// too short to have a rate ([`linerate_model::doc::cp::rate_bps`]).
    pub fn gbit_per_s(&self) -> Option<f64> {
        linerate_model::doc::cp::rate_bps(self.moved(), self.seconds).map(|b| b / 1e9)
    }

    /// True when every entry arrived.
    pub fn is_complete(&self) -> bool {
        self.local_errors == 0 && self.server.errors == 0 && self.server.files == self.files
    }
}

/// Where per-entry problems are reported as they happen.
pub type ErrorSink = Arc<dyn Fn(String) + Send + Sync>;

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
    /// Which special files are sent when the session has `FLAG_DEVICES`.
    pub kinds: SpecialKinds,
    /// What the walk skips (`--exclude`).
    pub filter: Option<TreeFilter>,
}

/// Which non-regular files a sender sends with `FLAG_DEVICES` (rsync's `--devices` and
/// `--specials`, which `-D` sets both of).
#[derive(Debug, Clone, Copy)]
pub struct SpecialKinds {
    /// Character and block devices.
    pub devices: bool,
    /// FIFOs and sockets.
    pub specials: bool,
}

impl SpecialKinds {
    /// Both kinds (a server sending for a pull with `FLAG_DEVICES`).
    pub const ALL: SpecialKinds = SpecialKinds { devices: true, specials: true };
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
            peer: cfg.peer,
            pace: if cfg.pace.is_limited() { cfg.pace.clone() } else { SessionRate::fixed(cfg.bwlimit) },
            kinds: SpecialKinds { devices: cfg.devices, specials: cfg.specials },
            filter: cfg.tree_filter(cfg.placement != Placement::As),
        }
    }
    pub(super) fn has(&self, flag: u32) -> bool {
        self.flags & flag != 0
    }
}

/// What the sending side of a session did.
#[derive(Debug, Clone)]
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
    /// A dry run: the files and bytes that would have been sent.
    pub would_send: (u64, u64),
    /// Files the receiver refused ([`CopyReport::refused_files`]).
    pub refused_files: u64,
    /// Devices, FIFOs and sockets not sent (no `-D`).
    pub skipped_specials: u64,
    /// When `Finish` went (every byte sent).
    pub finished_at: std::time::Instant,
    /// When the receiver's summary came.
    pub summary_at: std::time::Instant,
}

/// What one stream is assumed to keep in flight per round trip: this host's `tcp_rmem` and
/// `tcp_wmem` maxima through [`linerate_model::tcp::usable_window`] (Linux's defaults if
/// unreadable), at least 1 MiB.
fn usable_window() -> u64 {
    let max = |f: &str, default: u64| {
        std::fs::read_to_string(format!("/proc/sys/net/ipv4/{f}"))
            .ok()
            .and_then(|t| t.split_whitespace().nth(2).and_then(|v| v.parse::<u64>().ok()))
            .unwrap_or(default)
    };
    let w = linerate_model::tcp::usable_window(Some(max("tcp_rmem", 6 << 20)), Some(max("tcp_wmem", 4 << 20)));
    (w.unwrap_or(0.0) as u64).max(1 << 20)
}

/// The rate a copy's streams together should be able to keep in flight on a long path when the
/// user gave no `-P`. Not the 10 Gbit/s this tool is for: streams beyond what the path needs
/// cost goodput at a shallow bottleneck (1 Gbit/s × 50 ms with a 20 ms tbf queue, 640-file
/// tree, alternating, 2 rounds: 2, 4, 5, 6 streams 0.81–0.83 Gbit/s, 8 streams 0.78, 16 0.70),
/// and the path's rate is not known before the copy; give `-P` for faster long paths.
pub const PATH_TARGET_BPS: u64 = 2_500_000_000;

/// Streams for a path with round trip `rtt_us`, each carrying at most `window` bytes per round
/// trip: enough for [`PATH_TARGET_BPS`] (one stream moves `window × 8 / rtt` bit/s), never fewer
/// than `default`, at most 16. Below 2 ms (a LAN) the window never binds: `default`.
pub fn streams_for_path(rtt_us: u32, window: u64, default: u16) -> u16 {
    if rtt_us < 2_000 || window == 0 {
        return default;
    }
    let per_stream = window as f64 * 8.0 / (f64::from(rtt_us) / 1e6);
    let want = (PATH_TARGET_BPS as f64 / per_stream).ceil().min(16.0) as u16;
    want.max(default).min(16)
}

/// [`streams_for_path`] for the control connection `sock` (the smallest round trip its handshake
/// saw) when `cfg` lets the path decide; else `cfg.streams`.
pub(crate) fn streams_for(cfg: &CopyConfig, sock: Option<std::net::TcpStream>) -> u16 {
    let fixed = cfg.streams.clamp(1, linerate_proto::caps::MAX_STREAMS);
    if !cfg.auto_streams {
        return fixed;
    }
    match sock.and_then(|s| linerate_net::sockopt::min_rtt_us(&s).ok().flatten()) {
        Some(rtt) => streams_for_path(rtt, usable_window(), fixed).clamp(1, linerate_proto::caps::MAX_STREAMS),
        None => fixed,
    }
}

#[cfg(test)]
mod path_tests {
    use super::*;

    #[test]
    fn long_paths_get_streams_enough_for_10_gbit_and_lans_the_default() {
        let w = 3 << 20; // about what Linux's default buffers keep in flight (3.5 MB)
        assert_eq!(streams_for_path(200, w, 2), 2, "loopback/LAN: the default");
        assert_eq!(streams_for_path(1_900, w, 4), 4);
        // 10 ms: one stream carries 3 MiB / 10 ms = 2.5 Gbit/s: the default is enough.
        assert_eq!(streams_for_path(10_000, w, 2), 2);
        // 50 ms: 0.5 Gbit/s each, 5 for 2.5 Gbit/s; never fewer than the default.
        assert_eq!(streams_for_path(50_000, w, 2), 5);
        assert_eq!(streams_for_path(50_000, w, 8), 8, "never fewer than the default");
        // 200 ms: 0.13 Gbit/s each, 20 wanted, 16 at most.
        assert_eq!(streams_for_path(200_000, w, 2), 16);
        // a larger window needs fewer
        assert_eq!(streams_for_path(50_000, 32 << 20, 2), 2);
        assert_eq!(streams_for_path(100_000, 0, 3), 3, "no window known: the default");
    }
}
