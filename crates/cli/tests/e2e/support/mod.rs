//! Shared helpers of the integration tests.

pub mod sshlab;

/// How a server's announce line begins: the protocol version this build speaks
/// (`linerate_proto::PROTOCOL_VERSION`, docs/PROTOCOL.md), pinned here so that a change of the
/// wire's version is a deliberate change of these tests too.
pub const ANNOUNCE: &str = "LINERATE 3 ";

/// The one root-only rule ([`linerate_lab::testkit::require_root`]): a test that needs root is
/// `#[ignore = "needs root"]` and calls this first, so that run with `--include-ignored`
/// without root it fails saying what needs root.
pub use linerate_lab::testkit::require_root;

/// Write `len` bytes of incompressible, deterministic data to `path`.
pub fn noise(path: &std::path::Path, len: usize) {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ len as u64;
    let data: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(path, data).unwrap();
}

/// A `linerate serve --announce` that was started: its child, the address of its announce line,
/// and (daemon mode) the host key fingerprint of its first log line; its log is drained.
pub struct Announced {
    /// The server.
    pub child: std::process::Child,
    /// `IP:PORT` it listens on.
    pub addr: String,
    /// Its host key fingerprint, if it printed one.
    pub fingerprint: Option<String>,
}

/// Spawns `cmd` (a `serve --announce …`) and reads its announce line and first log line.
pub fn spawn_announced(mut cmd: std::process::Command) -> Announced {
    use std::io::{BufRead, BufReader};
    let mut child = cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut note = String::new();
    err.read_line(&mut note).unwrap();
    // Keep draining the log so the server never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    let fingerprint =
        note.split_whitespace().find(|w| w.starts_with("SHA256:")).map(|f| f.trim_end_matches(';').to_string());
    let addr = line.trim().rsplit(' ').next().unwrap_or_else(|| panic!("no announce line: {line:?} {note:?}"));
    Announced { child, addr: addr.to_string(), fingerprint }
}

/// A `serve --announce` started by `cmd`, killed when dropped.
pub struct Daemon {
    /// The server.
    pub child: std::process::Child,
    /// `IP:PORT` it listens on.
    pub addr: String,
}

impl Daemon {
    /// Start it and read its announce line (`LINERATE <version> LISTEN ADDR`); its log is not kept.
    pub fn start(mut cmd: std::process::Command) -> Daemon {
        use std::io::{BufRead, BufReader};
        let mut child = cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::null()).spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let addr = line.trim().rsplit(' ').next().unwrap_or_default().to_string();
        assert!(addr.contains(':'), "no announce line: {line:?}");
        Daemon { child, addr }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How a child exited, if it did within a bound (else it is killed): awaited, never polled.
pub use linerate_model::testkit::exit_within;

/// Whether a condition became true within a bound: the one polling wait, for state that has no
/// event to await (what Prometheus has scraped, an emulator's counters, a listener closed).
pub use linerate_model::testkit::eventually;

/// Whether `cond` (about files beneath `dirs`, which another process writes) became true within
/// `limit`, a bound that only guards against a hang. Awaited through inotify: it is checked again
/// whenever something in one of the directories that exist is created, written or moved — no
/// polling interval. `alive` is asked too: false once the writer is gone, which ends the wait.
pub fn await_files(
    dirs: &[&std::path::Path],
    limit: std::time::Duration,
    mut alive: impl FnMut() -> bool,
    mut cond: impl FnMut() -> bool,
) -> bool {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    use rustix::fs::inotify::{self, CreateFlags, WatchFlags};
    let deadline = std::time::Instant::now() + limit;
    let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).expect("inotify");
    let what = WatchFlags::CREATE | WatchFlags::MODIFY | WatchFlags::MOVED_TO | WatchFlags::CLOSE_WRITE;
    loop {
        // (Again each round: a directory may have appeared; an existing watch is kept as is.)
        for d in dirs {
            match d.parent() {
                // Not there yet: its parent says when it appears.
                Some(p) if !d.exists() => watch_tree(&fd, p, what, 0),
                _ => watch_tree(&fd, d, what, 4),
            }
        }
        if cond() {
            return true;
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() || !alive() {
            return cond();
        }
        // Wake at the next change, or within a second to look at the writer and new directories.
        let wait = Timespec::try_from(left.min(std::time::Duration::from_secs(1))).expect("timespec");
        let _ = poll(&mut [PollFd::new(&fd, PollFlags::IN)], Some(&wait));
        let mut buf = [0u8; 4096];
        while matches!(rustix::io::read(&fd, &mut buf), Ok(n) if n > 0) {}
    }
}

/// Watch `dir` and its directories `depth` levels down (inotify watches one directory each).
fn watch_tree(fd: &std::os::fd::OwnedFd, dir: &std::path::Path, what: rustix::fs::inotify::WatchFlags, depth: u32) {
    if rustix::fs::inotify::add_watch(fd, dir, what).is_err() || depth == 0 {
        return;
    }
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            watch_tree(fd, &e.path(), what, depth - 1);
        }
    }
}

/// Those of `pids` still running after `limit` (a bound against a hang). Awaited through a pidfd
/// for each (it becomes readable when the process exits), not by polling the process table.
pub fn await_gone(pids: &[u32], limit: std::time::Duration) -> Vec<u32> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    use rustix::process::{pidfd_open, Pid, PidfdFlags};
    let deadline = std::time::Instant::now() + limit;
    pids.iter()
        .copied()
        .filter(|&p| {
            let Some(pid) = Pid::from_raw(p as i32) else { return false };
            // Already gone: nothing to open.
            let Ok(fd) = pidfd_open(pid, PidfdFlags::empty()) else { return false };
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let wait = Timespec::try_from(left).expect("timespec");
            !matches!(poll(&mut [PollFd::new(&fd, PollFlags::IN)], Some(&wait)), Ok(n) if n > 0)
        })
        .collect()
}

/// The receiver's working directories (`.linerate-work-<hex>`) in `dest`, the directory a copy
/// landed in.
pub fn work_dirs(dest: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out: Vec<std::path::PathBuf> = std::fs::read_dir(dest)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".linerate-work-"))
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// The files in the working directories of `dest` (partial files, journals, the marker).
pub fn work_files(dest: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out: Vec<std::path::PathBuf> = work_dirs(dest)
        .iter()
        .flat_map(|w| std::fs::read_dir(w).into_iter().flatten().flatten().map(|e| e.path()))
        .collect();
    out.sort();
    out
}

/// Whether a resume journal with entries is in a working directory of `dest` (a receiver is
/// mid-file in a copy that landed in `dest`).
pub fn journaled(dest: &std::path::Path) -> bool {
    work_files(dest)
        .iter()
        .any(|p| p.extension().is_some_and(|x| x == "journal") && std::fs::metadata(p).is_ok_and(|m| m.len() > 200))
}
