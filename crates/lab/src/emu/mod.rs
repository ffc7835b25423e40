//! linerate's own link emulator, for kernels without netem (delay, jitter, loss, reordering,
//! duplication, corruption, rate with a queue limit, and changes while running).
//!
//! A link it emulates is two TAP devices, one moved into each end's namespace in place of a
//! veth pair, and one process (`linerate lab emulate --config FILE`, started by `lab up`)
//! that holds both and forwards frames between them, one thread per direction, each through a
//! [`shape::Shaper`]. The TAPs take TCP super-packets (TSO, up to 64 KB with partial
//! checksums) so few frames cross user space; loss, reordering, duplication and corruption are
//! still drawn for each wire packet a super-packet stands for, and one is cut into its wire
//! packets ([`wire::Frame::split`]) only when a draw hits it, so "1 %" means 1 % of wire
//! packets; a corrupted packet's checksum is finished before its bit flips, so the receiver's
//! checksums catch it. The TAPs are not persistent: they go with the process. A control socket
//! takes `set`, `stats`. SIGTERM/SIGINT stop it through a [`Shutdown`]: the control loop waits
//! on a [`mio`] poll that the stop wakes, the forwarding threads look at it between packets.

pub mod shape;
mod tap;
pub mod wire;

use crate::LabError;
use linerate_model::shutdown::Shutdown;
use linerate_model::units::Percent;
use serde::{Deserialize, Serialize};
use shape::{Counters, Impairment, Shaper};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use wire::Frame;

/// Longest control request, bytes.
pub const MAX_REQUEST: usize = 4096;
/// Time a control client has for its whole request (however its bytes come) and to take the
/// answer.
pub const CONTROL_TIMEOUT: Duration = Duration::from_secs(2);
/// Control connections served at once; one more is answered `error: busy` and closed.
pub const MAX_CONTROL: usize = 8;
/// Most timer lateness the forwarding loop corrects for.
const MAX_LATE_NS: u64 = 500_000;
/// Largest frame a TAP hands over: a 64 KB super-packet with its headers.
const MAX_FRAME: usize = 65_536 + 256;

/// What one emulator process does: written by `lab up`, read by `lab emulate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EmuConfig {
    /// The link's name.
    pub link: String,
    /// TAP device of end a, created in the emulator's namespace (the lab moves it).
    pub a_tap: String,
    /// TAP device of end b.
    pub b_tap: String,
    /// What happens to frames from a to b.
    pub a_to_b: Impairment,
    /// What happens to frames from b to a.
    pub b_to_a: Impairment,
    /// Created once both TAPs exist (the lab waits for it).
    pub ready: PathBuf,
    /// The control socket.
    pub control: PathBuf,
    /// Seed of the loss, jitter and reordering draws.
    pub seed: u64,
}

/// Both directions' counters, as `stats` reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmuStats {
    /// a → b.
    pub a_to_b: Counters,
    /// b → a.
    pub b_to_a: Counters,
}

type Shared = Arc<Mutex<Shaper<Frame>>>;

fn lock(s: &Shared) -> std::sync::MutexGuard<'_, Shaper<Frame>> {
    s.lock().unwrap_or_else(PoisonError::into_inner)
}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> LabError {
    let w = what.into();
    move |e| LabError::Io(w, e)
}

/// `linerate lab emulate`: create the TAPs, say ready, forward until `stop` (the process's
/// SIGTERM or SIGINT, which the caller turns into it).
pub fn run(config: &Path, stop: Shutdown) -> Result<(), LabError> {
    let text = std::fs::read_to_string(config).map_err(io_err(format!("reading {}", config.display())))?;
    let cfg: EmuConfig = serde_json::from_str(&text)
        .map_err(|source| LabError::EmulatorConfig { path: config.to_path_buf(), source })?;
    let a = tap::create(&cfg.a_tap).map_err(io_err(format!("creating TAP {} (is /dev/net/tun there?)", cfg.a_tap)))?;
    let b = tap::create(&cfg.b_tap).map_err(io_err(format!("creating TAP {}", cfg.b_tap)))?;
    let ab: Shared = Arc::new(Mutex::new(Shaper::new(cfg.a_to_b.clone(), cfg.seed)));
    let ba: Shared = Arc::new(Mutex::new(Shaper::new(cfg.b_to_a.clone(), cfg.seed.rotate_left(17) ^ 0x9e37_79b9)));
    let _ = std::fs::remove_file(&cfg.control);
    let listener = UnixListener::bind(&cfg.control).map_err(io_err(format!("binding {}", cfg.control.display())))?;
    listener.set_nonblocking(true).map_err(io_err("control socket"))?;
    std::fs::write(&cfg.ready, b"ready\n").map_err(io_err(format!("writing {}", cfg.ready.display())))?;
    let origin = Instant::now();
    let (a2, b2) = (a.try_clone().map_err(io_err("dup"))?, b.try_clone().map_err(io_err("dup"))?);
    let threads =
        [spawn_dir(a, b2, ab.clone(), stop.clone(), origin), spawn_dir(b, a2, ba.clone(), stop.clone(), origin)];
    serve_control(&listener, &ab, &ba, &stop, CONTROL_TIMEOUT).map_err(io_err("watching the control socket"))?;
    for t in threads {
        let _ = t.join();
    }
    let _ = std::fs::remove_file(&cfg.control);
    Ok(())
}

fn spawn_dir(src: OwnedFd, dst: OwnedFd, s: Shared, stop: Shutdown, origin: Instant) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || forward(&src, &dst, &s, &stop, origin))
}

/// One direction: read what `src` hands over, shape it, write it to `dst` when due.
fn forward(src: &OwnedFd, dst: &OwnedFd, s: &Shared, stop: &Shutdown, origin: Instant) {
    tap::tight_timers();
    let (mut rd, mut wr) = match (src.try_clone(), dst.try_clone()) {
        (Ok(r), Ok(w)) => (File::from(r), File::from(w)),
        _ => return,
    };
    let mut scratch = vec![0u8; MAX_FRAME];
    let now = || origin.elapsed().as_nanos() as u64;
    // How late a timed wait ends (a VM's timer wake-up is tens of µs late, which a 1 ms round
    // trip would show): measured as it goes, and slept that much less; a packet due within it
    // is released now rather than that much late.
    let mut late: u64 = 0;
    // Not a sleep-polling loop: each turn waits for a frame or the next release; the 100 ms cap
    // on that wait is when the stop is looked at while the link is idle.
    while !stop.is_stopped() {
        let next = {
            let mut sh = lock(s);
            let horizon = now() + late;
            while let Some(f) = sh.pop_due(horizon) {
                // A full receive queue at the far end drops the frame, as a wire would.
                let _ = wr.write(f.bytes());
            }
            sh.next_release()
        };
        let t = now();
        let wait = next.map_or(100_000_000, |n| n.saturating_sub(t + late).min(100_000_000));
        if wait > 0 {
            match tap::wait_readable(src, wait) {
                Ok(true) => {}
                _ => {
                    let over = now().saturating_sub(t + wait).min(MAX_LATE_NS);
                    late = (7 * late + over) / 8;
                    continue;
                }
            }
        }
        // Drain what is there (bounded, so releases are not starved).
        for _ in 0..256 {
            match rd.read(&mut scratch) {
                Ok(n) if n > wire::VNET_HDR => {
                    let f = Frame::new(scratch[..n].to_vec());
                    lock(s).push(now(), f);
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
    }
}

/// Serve the control socket (non-blocking) until `stop`: each connection on a thread of its own,
/// at most [`MAX_CONTROL`] at once, each with `timeout` for its whole request, so a slow client
/// holds neither another client's `set` nor the shutdown (issue 28). It waits for a connection
/// or the stop on one poll.
fn serve_control(
    listener: &UnixListener,
    ab: &Shared,
    ba: &Shared,
    stop: &Shutdown,
    timeout: Duration,
) -> std::io::Result<()> {
    const LISTENER: mio::Token = mio::Token(0);
    const WAKE: mio::Token = mio::Token(1);
    let mut poll = mio::Poll::new()?;
    let fd = listener.as_raw_fd();
    poll.registry().register(&mut mio::unix::SourceFd(&fd), LISTENER, mio::Interest::READABLE)?;
    // Kept here as well as in the hook: the hook is dropped once it has run, and closing the
    // eventfd then would take its wake-up out of the poll before the loop sees it.
    let waker = Arc::new(mio::Waker::new(poll.registry(), WAKE)?);
    let w = waker.clone();
    stop.on_stop(move || {
        let _ = w.wake();
    });
    let mut events = mio::Events::with_capacity(4);
    let busy = Arc::new(AtomicUsize::new(0));
    while !stop.is_stopped() {
        match listener.accept() {
            Ok((conn, _)) => {
                if busy.fetch_add(1, Ordering::AcqRel) >= MAX_CONTROL {
                    busy.fetch_sub(1, Ordering::AcqRel);
                    let _ = conn.set_nonblocking(true);
                    let _ = (&conn).write_all(b"error: busy: the emulator serves 8 control requests at once\n");
                    continue;
                }
                let (ab, ba, busy) = (ab.clone(), ba.clone(), busy.clone());
                std::thread::spawn(move || {
                    control(conn, &ab, &ba, Instant::now() + timeout);
                    busy.fetch_sub(1, Ordering::AcqRel);
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                poll.poll(&mut events, None).or_else(|e| match e.kind() {
                    std::io::ErrorKind::Interrupted => Ok(()),
                    _ => Err(e),
                })?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // Out of descriptors: the connection stays queued; retry after a pause the stop ends.
            Err(_) => {
                if stop.wait_timeout(Duration::from_millis(50)) {
                    break;
                }
            }
        }
    }
    drop(waker);
    Ok(())
}

/// One control request: `stats`, or `set DIR KEY=VALUE...` with DIR `a>b`, `b>a` or `both`,
/// whole by `deadline`.
fn control(conn: UnixStream, ab: &Shared, ba: &Shared, deadline: Instant) {
    let reply = match read_request(&conn, deadline) {
        Ok(line) => handle(line.trim(), ab, ba).unwrap_or_else(|e| format!("error: {e}")),
        Err(e) => format!("error: {e}"),
    };
    let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
    let _ = conn.set_write_timeout(Some(left));
    let _ = (&conn).write_all(format!("{reply}\n").as_bytes());
}

/// Why the emulator refused a control request; sent back as `error: ` and this text.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The client sent no whole line in time.
    #[error("no whole request within {} s", CONTROL_TIMEOUT.as_secs())]
    Timeout,
    /// The line is longer than [`MAX_REQUEST`].
    #[error("a request is at most {MAX_REQUEST} bytes")]
    TooLong,
    /// The control socket failed (setting its timeout, reading).
    #[error("reading the request: {0}")]
    Read(#[source] std::io::Error),
    /// The line is not UTF-8.
    #[error("the request is not UTF-8")]
    NotUtf8,
    /// Neither `stats` nor `set`.
    #[error("unknown request {0:?}: stats, or set DIR KEY=VALUE...")]
    UnknownRequest(Option<String>),
    /// `set` without `a>b`, `b>a` or `both`.
    #[error("direction {0:?}: a>b, b>a or both")]
    Direction(Option<String>),
    /// A word of `set` that is neither `KEY=VALUE` nor `up`/`down`.
    #[error("'{0}': KEY=VALUE, up or down")]
    NotAChange(String),
    /// A key the emulator does not know.
    #[error("unknown key '{0}'")]
    UnknownKey(String),
    /// A value its key's grammar refuses; the grammar's own words.
    #[error("{key}: {why}")]
    Value {
        /// The key.
        key: String,
        /// What is wrong with the value.
        why: String,
    },
    /// The counters could not be encoded.
    #[error("encoding the counters: {0}")]
    Encode(#[source] serde_json::Error),
}

/// One line of at most [`MAX_REQUEST`] bytes, read by `deadline` (an unfinished last line
/// counts when the client closes).
fn read_request(mut conn: &UnixStream, deadline: Instant) -> Result<String, ControlError> {
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 512];
    while !buf.contains(&b'\n') {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ControlError::Timeout);
        }
        conn.set_read_timeout(Some(left)).map_err(ControlError::Read)?;
        match conn.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) if buf.len() + n > MAX_REQUEST => return Err(ControlError::TooLong),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) => return Err(ControlError::Read(e)),
        }
    }
    let line = buf.split(|&b| b == b'\n').next().unwrap_or_default();
    String::from_utf8(line.to_vec()).map_err(|_| ControlError::NotUtf8)
}

fn handle(req: &str, ab: &Shared, ba: &Shared) -> Result<String, ControlError> {
    let mut words = req.split_ascii_whitespace();
    match words.next() {
        Some("stats") => {
            let st = EmuStats { a_to_b: lock(ab).counters(), b_to_a: lock(ba).counters() };
            serde_json::to_string(&st).map_err(ControlError::Encode)
        }
        Some("set") => {
            let dirs: Vec<&Shared> = match words.next() {
                Some("a>b") => vec![ab],
                Some("b>a") => vec![ba],
                Some("both") => vec![ab, ba],
                other => return Err(ControlError::Direction(other.map(str::to_string))),
            };
            let changes: Vec<&str> = words.collect();
            for d in dirs {
                let mut sh = lock(d);
                let next = apply(sh.config().clone(), &changes)?;
                sh.set(next);
            }
            Ok("ok".into())
        }
        other => Err(ControlError::UnknownRequest(other.map(str::to_string))),
    }
}

/// `cfg` with `KEY=VALUE` changes applied: `up`/`down` (words), delay, jitter, loss, loss_burst,
/// reorder, duplicate, corrupt, rate (`0` for none), queue (bytes).
pub fn apply(mut cfg: Impairment, changes: &[&str]) -> Result<Impairment, ControlError> {
    let mut loss: Option<f64> = None;
    let mut burst: Option<f64> = None;
    for c in changes {
        let Some((k, v)) = c.split_once('=') else {
            match *c {
                "down" => cfg.up = false,
                "up" => cfg.up = true,
                _ => return Err(ControlError::NotAChange(c.to_string())),
            }
            continue;
        };
        let bad = |why: String| ControlError::Value { key: k.to_string(), why };
        // a link time: the scenario's own grammar ([`crate::scenario::LinkTime`]), in ns
        let time_ns = || {
            v.parse::<crate::scenario::LinkTime>().map(|t| t.as_micros() * 1000).map_err(|e| match e {
                LabError::Scenario(why) => bad(why),
                e => bad(e.to_string()),
            })
        };
        // a percentage as a share: the one grammar of `Percent` (`1%`, `1`, `0.5`), as in a scenario
        let share = || v.parse::<Percent>().map(Percent::fraction).map_err(|e| bad(e.to_string()));
        match k {
            "delay" => cfg.delay_ns = time_ns()?,
            "jitter" => cfg.jitter_ns = time_ns()?,
            "jitter_dist" => {
                cfg.dist = match v {
                    "normal" => shape::Dist::Normal,
                    "uniform" => shape::Dist::Uniform,
                    _ => return Err(bad(format!("'{v}': normal or uniform"))),
                }
            }
            "loss" => loss = Some(share()?),
            "loss_burst" => {
                let range = crate::scenario::LOSS_BURST;
                let b: f64 = v.parse().map_err(|_| bad(format!("'{v}': packets")))?;
                if !range.contains(&b) {
                    let (lo, hi) = (range.start(), range.end());
                    return Err(bad(format!("'{v}': a mean burst of {lo} to {hi} packets")));
                }
                burst = Some(b);
            }
            "reorder" => cfg.reorder = share()?,
            "duplicate" => cfg.duplicate = share()?,
            "corrupt" => cfg.corrupt = share()?,
            "rate" => {
                let r =
                    if v == "0" { 0 } else { linerate_model::units::parse_rate(v).map_err(|e| bad(e.to_string()))? };
                cfg.rate_bps = (r > 0).then_some(r);
            }
            "queue" => {
                cfg.queue_bytes =
                    linerate_model::units::parse_size(v).map_err(|e| bad(e.to_string()))?.min(shape::MAX_HELD)
            }
            _ => return Err(ControlError::UnknownKey(k.to_string())),
        }
    }
    if loss.is_some() || burst.is_some() {
        let now = match cfg.loss {
            shape::Loss::Random { p } => p,
            shape::Loss::GilbertElliott { p, r, .. } => p / (p + r),
            shape::Loss::None => 0.0,
        };
        cfg.loss = shape::Loss::bursty(loss.unwrap_or(now), burst.unwrap_or(1.0));
    }
    Ok(cfg)
}

/// Ask a running emulator (its control socket) `request`; its one-line answer.
pub fn ask(control: &Path, request: &str) -> Result<String, LabError> {
    let mut c =
        UnixStream::connect(control).map_err(io_err(format!("connecting to the emulator at {}", control.display())))?;
    c.set_read_timeout(Some(Duration::from_secs(5))).map_err(io_err("control socket"))?;
    c.write_all(format!("{request}\n").as_bytes()).map_err(io_err("sending to the emulator"))?;
    let mut answer = String::new();
    BufReader::new(c.take(1 << 20)).read_line(&mut answer).map_err(io_err("reading the emulator's answer"))?;
    let a = answer.trim().to_string();
    match a.strip_prefix("error: ") {
        Some(e) => Err(LabError::EmulatorRefused {
            control: control.to_path_buf(),
            request: request.to_string(),
            reason: e.to_string(),
        }),
        None => Ok(a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linerate_model::shutdown::Stopper;

    #[test]
    fn changes_apply_to_a_copy_and_bad_ones_are_refused() {
        let changes = ["delay=50ms", "loss=1%", "loss_burst=3", "rate=1gbit", "queue=1MB", "jitter_dist=uniform"];
        let c = apply(Impairment::default(), &changes).unwrap();
        assert_eq!(c.dist, shape::Dist::Uniform);
        assert_eq!(c.delay_ns, 50_000_000);
        assert_eq!(c.rate_bps, Some(1_000_000_000));
        assert_eq!(c.queue_bytes, 1_000_000);
        assert!(matches!(c.loss, shape::Loss::GilbertElliott { .. }));
        let d = apply(c.clone(), &["down"]).unwrap();
        assert!(!d.up && d.delay_ns == c.delay_ns);
        assert!(apply(d, &["up"]).unwrap().up);
        for bad in ["loss_burst=nan", "loss_burst=inf", "loss_burst=-5", "loss_burst=1e308", "loss_burst=0.5"] {
            let e = apply(Impairment::default(), &["loss=1%", bad]).unwrap_err();
            assert!(e.to_string().contains("1 to 1000 packets"), "{bad}: {e}");
        }
        for bad in [
            "delay=5 fortnights",
            "loss=101%",
            "loss=nan",
            "loss=inf%",
            "nonsense",
            "colour=blue",
            "rate=fast",
            "queue=-1",
            "jitter_dist=pareto",
        ] {
            assert!(apply(Impairment::default(), &[bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn requests_are_answered_and_garbage_is_refused() {
        let ab: Shared = Arc::new(Mutex::new(Shaper::new(Impairment::default(), 1)));
        let ba: Shared = Arc::new(Mutex::new(Shaper::new(Impairment::default(), 2)));
        assert_eq!(handle("set a>b delay=10ms", &ab, &ba).unwrap(), "ok");
        assert_eq!(lock(&ab).config().delay_ns, 10_000_000);
        assert_eq!(lock(&ba).config().delay_ns, 0, "only a>b");
        handle("set both down", &ab, &ba).unwrap();
        assert!(!lock(&ab).config().up && !lock(&ba).config().up);
        let st: EmuStats = serde_json::from_str(&handle("stats", &ab, &ba).unwrap()).unwrap();
        assert_eq!(st, EmuStats::default());
        for bad in ["", "set", "set sideways delay=1ms", "set both delay", "drop tables", "set a>b loss=x"] {
            assert!(handle(bad, &ab, &ba).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_slow_control_client_holds_neither_another_request_nor_the_shutdown() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("control");
        let listener = UnixListener::bind(&path).unwrap();
        listener.set_nonblocking(true).unwrap();
        let ab: Shared = Arc::new(Mutex::new(Shaper::new(Impairment::default(), 1)));
        let ba: Shared = Arc::new(Mutex::new(Shaper::new(Impairment::default(), 2)));
        let stop = Stopper::new();
        let (done_tx, done) = std::sync::mpsc::channel();
        let server = {
            let stop = stop.shutdown();
            // A minute per request: one served at a time, the dribbler below would hold it.
            std::thread::spawn(move || {
                serve_control(&listener, &ab, &ba, &stop, Duration::from_secs(60)).unwrap();
                let _ = done_tx.send(());
            })
        };
        let mut dribbler = UnixStream::connect(&path).unwrap();
        dribbler.write_all(b"st").unwrap(); // and no more
        let stats = ask(&path, "stats").expect("stats answered while a client dribbles");
        assert_eq!(serde_json::from_str::<EmuStats>(&stats).unwrap(), EmuStats::default());
        // Beyond the cap a connection is told so at once.
        let held: Vec<UnixStream> = (0..MAX_CONTROL).map(|_| UnixStream::connect(&path).unwrap()).collect();
        let e = ask(&path, "stats").unwrap_err().to_string();
        assert!(e.contains("busy"), "{e}");
        stop.stop();
        done.recv_timeout(Duration::from_secs(20)).expect("the control loop ends on stop while clients dribble");
        server.join().unwrap();
        drop((held, dribbler));
    }
}
