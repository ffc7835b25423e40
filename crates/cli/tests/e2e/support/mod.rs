//! Shared helpers of the integration tests.

pub mod sshlab;

/// Variable that lets a run without root skip the tests that need it, knowingly.
pub const SKIP_ROOT: &str = "LINERATE_SKIP_ROOT_TESTS";

/// Whether a test that needs root (network namespaces, veth, tc) can run: true as root. Without
/// root it fails loudly, so that a run which tested nothing of those parts never reports ok,
/// unless `LINERATE_SKIP_ROOT_TESTS=1` says to skip them (then it prints that it did).
pub fn needs_root(what: &str) -> bool {
    if rustix::process::geteuid().is_root() {
        return true;
    }
    if std::env::var_os(SKIP_ROOT).is_some_and(|v| v == "1") {
        eprintln!("SKIPPED, not run: {what} needs root ({SKIP_ROOT}=1)");
        return false;
    }
    panic!("{what} needs root: run the tests as root (CI does), or set {SKIP_ROOT}=1 to skip them knowingly");
}

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

/// How `child` exited, or `None` when it had not within `limit` (it is then killed). Waits on
/// a pidfd, which becomes readable when the child exits: no polling.
pub fn exit_within(child: &mut std::process::Child, limit: std::time::Duration) -> Option<std::process::ExitStatus> {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let deadline = std::time::Instant::now() + limit;
    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id()).ok()?)?;
    let pidfd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty());
    loop {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        let Ok(fd) = &pidfd else {
            // Reaped already (or a kernel without pidfds): nothing left to wait for.
            return child.wait().ok();
        };
        let ts = Timespec { tv_sec: left.as_secs() as i64, tv_nsec: i64::from(left.subsec_nanos()) };
        let _ = rustix::event::poll(&mut [PollFd::new(fd, PollFlags::IN)], Some(&ts));
    }
}
