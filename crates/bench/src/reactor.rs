//! The event loop that drives benchmark connections: a few worker threads (one per core at
//! most), each with its own epoll set, so 10,000 connections cost 10,000 sockets and not 10,000
//! threads. Every connection is a small state machine ([`Role`]) driven until its socket would
//! block; timers wake the ones paced by a rate or an open-loop schedule.

use super::Counters;
use hdrhistogram::Histogram;
use linerate_model::shutdown::Shutdown;
use linerate_proto::bench::{DataHello, MsgHeader, TestSpec, DATA_ACK, DATA_HELLO_LEN, MSG_HEADER_LEN, REPLY_STREAM};
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

const WAKER: Token = Token(usize::MAX);
/// The worker's timerfd: epoll's own timeout is whole milliseconds, which would make a request
/// scheduled between two ticks wait up to a millisecond and count that wait as latency.
const TIMER: Token = Token(usize::MAX - 1);
/// Reads or writes per connection per turn before others get theirs, when few connections
/// share a worker. With many, every turn is one read or write, so a pass over all of them is
/// short and no connection starves (see [`Worker::turn`]).
const TURN: usize = 16;

/// The time's worth of a paced stream one write may carry: 10 ms, at most a write buffer (`-l`).
/// iperf3 writes whole blocks when its 1 ms pacing timer allows; this writes at most 100 times a
/// second per stream, however slow the pace.
const PACE_QUANTUM: Duration = Duration::from_millis(10);

/// How far above its pace a paced stream's kernel pacing rate is set: the user-space pacer
/// keeps the average, the kernel only spreads each quantum. At exactly the pace BBR's cycles
/// below it were not made up (5 Gbit/s asked, 4.5 delivered on loopback).
const PACING_HEADROOM: f64 = 1.25;

/// The least a paced write carries (a slow pace waits for this much): one full segment.
const MIN_PACE_WRITE: u64 = 1448;
/// Connections per worker above which a turn is a single read or write.
const MANY: usize = 32;
/// How long before an open-loop request is due its worker stops sleeping and polls instead:
/// waking from a timer or from epoll takes tens of microseconds on a busy or virtual host, and
/// in an open loop that wake-up would be counted as the network's latency. sockperf's client
/// polls all the time; this one polls only while an answer is outstanding (for at most
/// [`ANSWER_SPIN`]) or a request is this close to due, and sleeps on its timerfd otherwise.
const SPIN: Duration = Duration::from_micros(100);
/// How long after its last request an open-loop worker polls for outstanding answers: past it
/// the round trip is long enough that a wake-up is a small share of it, and a long path is not
/// worth a core.
const ANSWER_SPIN: Duration = Duration::from_millis(1);

/// Socket options applied to every benchmark connection.
#[derive(Debug, Clone, Default)]
pub(crate) struct SockOpts {
    pub sndbuf: Option<u32>,
    pub rcvbuf: Option<u32>,
    pub nodelay: bool,
    /// TCP_CONGESTION, a name [`linerate_proto::bench::check_congestion`] accepted.
    pub congestion: Option<String>,
    /// TCP_MAXSEG, set before the connect (the client's own option: not in the test).
    pub mss: Option<u32>,
    /// IP_TOS (IPv4) or IPV6_TCLASS (IPv6).
    pub tos: Option<u8>,
    /// SO_MAX_PACING_RATE, bytes/s: a paced stream's sender is paced by the kernel (TCP's own
    /// pacing, or fq's), so that the bursts the user-space pacer writes ([`PACE_QUANTUM`])
    /// leave as a steady stream; [`PACING_HEADROOM`] above the pace, which the user-space pacer
    /// keeps.
    pub pacing: Option<u64>,
}

impl SockOpts {
    /// The options a test asks of both sides' data sockets.
    pub(crate) fn of(spec: &TestSpec) -> SockOpts {
        SockOpts {
            sndbuf: spec.sndbuf,
            rcvbuf: spec.rcvbuf,
            nodelay: spec.nodelay,
            congestion: spec.congestion.clone(),
            mss: None,
            tos: spec.tos,
            pacing: (spec.kind == linerate_proto::bench::TestKind::TcpStream)
                .then(|| pace(spec, senders(spec)))
                .flatten()
                .map(|p| (p.per_sec * PACING_HEADROOM).ceil() as u64),
        }
    }

    /// Apply to a TCP socket. Buffer sizes and TCP_NODELAY are requests the kernel may trim (the
    /// report shows what it granted); an option it refuses outright is an error naming it.
    pub(crate) fn apply(&self, s: &socket2::SockRef<'_>) -> Result<(), SockOptError> {
        if let Some(b) = self.sndbuf {
            let _ = s.set_send_buffer_size(b as usize);
        }
        if let Some(b) = self.rcvbuf {
            let _ = s.set_recv_buffer_size(b as usize);
        }
        if self.nodelay {
            let _ = s.set_tcp_nodelay(true);
        }
        if let Some(cc) = &self.congestion {
            s.set_tcp_congestion(cc.as_bytes()).map_err(|e| SockOptError::Congestion { name: cc.clone(), e })?;
        }
        if let Some(m) = self.mss {
            s.set_tcp_mss(m).map_err(|e| SockOptError::Mss { mss: m, e })?;
        }
        if let Some(t) = self.tos {
            set_tos(s, t)?;
        }
        if let Some(rate) = self.pacing {
            // Best effort: where the kernel refuses it, the user-space pacer alone keeps the rate.
            let _ = linerate_net::sockopt::set_max_pacing_rate(&**s, rate);
        }
        Ok(())
    }

    /// Try the options on a fresh TCP socket of `addr`'s family, so that one the kernel refuses
    /// is reported once, before any connection is opened.
    pub(crate) fn probe(&self, addr: SocketAddr) -> Result<(), SockOptError> {
        let domain = socket2::Domain::for_address(addr);
        let s = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))
            .map_err(SockOptError::Socket)?;
        self.apply(&socket2::SockRef::from(&s))
    }
}

/// The local port of connection `conn` from the first one (`--cport`): `None` without one, an
/// error past 65535.
pub(crate) fn local_port(first: Option<u16>, conn: u32) -> Option<io::Result<u16>> {
    let first = first?;
    Some(
        u16::try_from(u32::from(first) + conn)
            .map_err(|_| io::Error::other(format!("--cport {first} + {conn} is past 65535"))),
    )
}

/// Set the TOS byte of a TCP or UDP socket: IP_TOS on IPv4, IPV6_TCLASS on IPv6 (where an IPv4
/// peer of a dual-stack socket gets IP_TOS too).
pub(crate) fn set_tos(s: &socket2::SockRef<'_>, tos: u8) -> Result<(), SockOptError> {
    let r = match s.domain() {
        Ok(socket2::Domain::IPV6) => s.set_tclass_v6(u32::from(tos)).map(|()| {
            // A dual-stack socket talking to an IPv4 peer uses IP_TOS; refused on a v6-only one.
            let _ = s.set_tos_v4(u32::from(tos));
        }),
        _ => s.set_tos_v4(u32::from(tos)),
    };
    r.map_err(|e| SockOptError::Tos { tos, e })
}

/// The TOS byte (IPv4) or traffic class (IPv6) a socket sends with.
#[cfg(test)]
pub(crate) fn tos_of(s: &socket2::SockRef<'_>) -> Option<u32> {
    match s.domain().ok()? {
        socket2::Domain::IPV6 => s.tclass_v6().ok(),
        _ => s.tos_v4().ok(),
    }
}

/// A socket option of a test the kernel refused (the user's to fix), or the socket to try it on.
/// `e` is what the kernel said.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // the fields are named in the paragraph above
pub enum SockOptError {
    /// A congestion control algorithm, with where to look.
    #[error(
        "TCP congestion control \"{name}\" was refused by the kernel ({e}): it is not loaded or not allowed \
         for this user; see sysctl net.ipv4.tcp_available_congestion_control (and \
         net.ipv4.tcp_allowed_congestion_control, which unprivileged users are held to)"
    )]
    Congestion { name: String, e: io::Error },
    /// A maximum segment size.
    #[error("TCP_MAXSEG {mss} was refused by the kernel: {e}")]
    Mss { mss: u32, e: io::Error },
    /// A TOS byte (IPv4) or traffic class (IPv6).
    #[error("TOS {tos:#04x} (DSCP {dscp}) was refused by the kernel: {e}", dscp = .tos >> 2)]
    Tos { tos: u8, e: io::Error },
    /// The socket to try the options on.
    #[error("creating a TCP socket: {0}")]
    Socket(io::Error),
}

/// The congestion control a TCP socket uses.
pub(crate) fn congestion_of(s: &socket2::SockRef<'_>) -> Option<String> {
    let name = s.tcp_congestion().ok()?;
    let name: Vec<u8> = name.into_iter().take_while(|&b| b != 0).collect();
    Some(linerate_proto::name::escape(&name))
}

/// How a client opens new data connections from inside the loop (crr and profiles).
#[derive(Clone)]
pub(crate) struct Dialer {
    pub addr: SocketAddr,
    pub test: [u8; 16],
    pub cookie: [u8; 32],
    pub opts: SockOpts,
    /// Local port of connection 0; connection `i` binds `cport + i` (iperf3 `--cport`).
    pub cport: Option<u16>,
}

impl Dialer {
    /// Start a non-blocking connect with the options set before the SYN (so the window scale
    /// matches the buffer asked for).
    /// Connection `conn` binds its own local port when the client asked for fixed ones.
    pub(crate) fn dial(&self, conn: u32) -> io::Result<TcpStream> {
        let domain = socket2::Domain::for_address(self.addr);
        let s = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))?;
        s.set_nonblocking(true)?;
        self.opts.apply(&socket2::SockRef::from(&s)).map_err(io::Error::other)?;
        if let Some(port) = local_port(self.cport, conn) {
            let port = port?;
            // The same ports again for the next test: one left in TIME_WAIT does not block them.
            s.set_reuse_address(true)?;
            let any: SocketAddr = match self.addr {
                SocketAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, port).into(),
                SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, port).into(),
            };
            s.bind(&any.into()).map_err(|e| io::Error::new(e.kind(), format!("binding local port {any}: {e}")))?;
        }
        match s.connect(&self.addr.into()) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(e) => return Err(e),
        }
        Ok(TcpStream::from_std(std::net::TcpStream::from(s)))
    }

    fn hello(&self, conn: u32) -> [u8; DATA_HELLO_LEN] {
        DataHello { test: self.test, conn, cookie: self.cookie }.encode()
    }
}

/// Per-connection pace for a total rate in bits/s.
pub(crate) fn pace(spec: &TestSpec, conns: u64) -> Option<Pace> {
    spec.rate.map(|r| Pace { per_sec: r as f64 / 8.0 / conns.max(1) as f64 })
}

/// The connections that send in each direction that sends: a total rate is shared by them.
pub(crate) fn senders(spec: &TestSpec) -> u64 {
    if spec.each_way {
        u64::from(spec.connections)
    } else {
        spec.initial_connections()
    }
}

/// A per-connection pace: bytes (or transactions) allowed by now at `rate` per second.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pace {
    pub per_sec: f64,
}

impl Pace {
    /// A paced stream's next write, `elapsed` into the test with `sent` bytes written and a
    /// write buffer of `buf` bytes: `Ok(bytes)` to write now, or `Err(wait)` until a quantum is
    /// allowed. Writes come in quanta ([`PACE_QUANTUM`] of the pace, at least a segment, at most
    /// the buffer), not in whatever a few microseconds allowed: a write per ACK of ~200 bytes
    /// cost 10-16 x iperf3's client CPU at 100 Mbit/s (issue 43). The kernel's pacing
    /// (`SO_MAX_PACING_RATE`) spreads each quantum on the wire.
    pub(crate) fn next_write(&self, sent: u64, elapsed: Duration, buf: usize) -> Result<usize, Duration> {
        let quantum = ((self.per_sec * PACE_QUANTUM.as_secs_f64()) as u64).max(MIN_PACE_WRITE).min(buf as u64).max(1);
        let allowed = (self.per_sec * elapsed.as_secs_f64()) as u64;
        if sent + quantum > allowed {
            let wait = Duration::from_secs_f64(((sent + quantum - allowed) as f64 / self.per_sec).min(1.0));
            return Err(wait.max(Duration::from_micros(200)));
        }
        Ok(buf.min(usize::try_from(allowed - sent).unwrap_or(usize::MAX)))
    }
}

/// What a connection does.
#[derive(Debug)]
pub(crate) enum Role {
    /// Read and count.
    Sink,
    /// Write and count, optionally paced (bytes/s).
    Source { pace: Option<Pace> },
    /// Both at once.
    Duplex { pace: Option<Pace> },
    /// Server side of rr/crr: read a request of `req` bytes, answer `resp` bytes; with `once`,
    /// one transaction and then wait for the client to close.
    RrServer { req: u32, resp: u32, once: bool, need: u64, owe: u64, served: bool },
    /// Server side of a profile: framed messages ([`MsgHeader`] + payload, answered by `reply`
    /// bytes once the payload is in).
    ProfServer { hdr: [u8; MSG_HEADER_LEN], got: usize, need: u64, pending: u64, owe: u64, stream: bool },
    /// Client side of rr, crr and profiles: a script of steps.
    Client(Box<ClientScript>),
    /// Client side of open-loop rr: requests leave on schedule whatever is outstanding.
    OpenLoop(Box<OpenLoop>),
}

/// Open-loop request/response on one connection, pipelined as sockperf's under-load mode is:
/// each request leaves when it is due, whether or not earlier ones are answered, and responses
/// (which the server sends in order) are matched to requests in order; each latency runs from
/// the request's due time to its response's last byte.
#[derive(Debug)]
pub(crate) struct OpenLoop {
    req: u64,
    resp: u64,
    interval: Duration,
    phase: Duration,
    base: Option<Instant>,
    k: u64,
    /// Due times of requests sent (or being sent) and not yet answered, oldest first.
    due: VecDeque<Instant>,
    /// Bytes of the request being written.
    send_left: u64,
    /// Bytes of the oldest outstanding response received so far.
    recv_got: u64,
}

/// Requests in flight on one open-loop connection before new ones wait (and count as behind).
const MAX_IN_FLIGHT: usize = 4096;

impl OpenLoop {
    pub(crate) fn new(req: u64, resp: u64, interval: Duration, phase: Duration) -> OpenLoop {
        OpenLoop {
            req: req.max(1),
            resp: resp.max(1),
            interval,
            phase,
            base: None,
            k: 0,
            due: VecDeque::new(),
            send_left: 0,
            recv_got: 0,
        }
    }
}

/// One step of a client's script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Open a new connection (closing the old one); completes when the preamble is sent.
    Connect,
    /// Read and check the server's 4-byte acknowledgement of the preamble (pipelined behind the
    /// first request, so a crr transaction costs the same round trips as netperf's).
    Ack,
    /// Send `n` bytes (with a profile header in front when `hdr` is set).
    Send { n: u64, hdr: Option<MsgHeader> },
    /// Receive `n` bytes.
    Recv { n: u64 },
    /// Receive without end until the transaction's deadline.
    RecvStream,
    /// Wait.
    Think { d: Duration },
    /// Close the connection.
    Close,
    /// One iteration finished. When it waited for an answer (`answered`) it was a transaction:
    /// its latency is recorded and it is counted. A write-only iteration (a bulk upload) or a
    /// streamed download is neither: its group is judged by its bytes.
    Mark { answered: bool },
}

/// Produces the steps of a client connection: rr, crr, or a profile's transactions.
pub(crate) trait Script: Send + std::fmt::Debug {
    /// The steps of the next iteration, or `None` when the connection's work is done. `now` is
    /// when the iteration may start; the script returns the intended start time (open loop).
    fn next_iteration(&mut self, now: Instant, steps: &mut VecDeque<Step>) -> Option<Instant>;
    /// Whether iterations follow a schedule (open loop) rather than one another.
    fn scheduled(&self) -> bool {
        false
    }
    /// Deadline of the current transaction, for streaming reads.
    fn deadline(&self) -> Option<Instant>;
    /// The profile group the connection belongs to (0 outside profiles): latency is kept per
    /// group, so a latency probe is not averaged with the bulk flows beside it.
    fn group(&self) -> usize {
        0
    }
}

/// A client connection's progress through its script.
#[derive(Debug)]
pub(crate) struct ClientScript {
    pub script: Box<dyn Script>,
    pub steps: VecDeque<Step>,
    /// Bytes left of the current step.
    pub left: u64,
    /// Header bytes still to send in front of the current `Send`.
    pub hdr_left: usize,
    pub hdr: [u8; MSG_HEADER_LEN],
    /// When the current iteration was meant to start (latency is measured from here).
    pub intended: Option<Instant>,
    /// A connect in progress: waiting for writability, then for the 4-byte acknowledgement.
    pub connecting: Option<Connecting>,
    ack: [u8; 4],
    ack_got: usize,
    pub done: bool,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Connecting {
    sent_hello: usize,
}

impl ClientScript {
    pub(crate) fn new(script: Box<dyn Script>) -> ClientScript {
        ClientScript {
            script,
            steps: VecDeque::new(),
            left: 0,
            hdr_left: 0,
            hdr: [0; MSG_HEADER_LEN],
            intended: None,
            connecting: None,
            ack: [0; 4],
            ack_got: 0,
            done: false,
        }
    }
}

/// A connection in the loop.
pub(crate) struct Conn {
    pub sock: Option<TcpStream>,
    pub slot: u32,
    pub role: Role,
    /// Bytes sent so far, for pacing.
    pub sent: u64,
    /// Set while the connection waits for a timer (rate or schedule), not for its socket.
    pub parked: bool,
    /// The instant of the connection's one live entry in the worker's timer heap; entries for
    /// any other instant are stale and skipped (see [`Worker::schedule`]).
    pub timer: Option<Instant>,
}

impl Conn {
    pub(crate) fn new(sock: TcpStream, slot: u32, role: Role) -> Conn {
        Conn { sock: Some(sock), slot, role, sent: 0, parked: false, timer: None }
    }
}

/// How often a worker refreshes its sending connections' TCP figures for the interval lines.
const TCP_SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// Everything one worker thread owns.
pub(crate) struct Worker {
    poll: Poll,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    timers: BinaryHeap<Reverse<(Instant, usize)>>,
    /// A timerfd armed for the earliest timer (the kernel's high-resolution timers wake the
    /// worker within microseconds of it), and the instant it is armed for.
    timerfd: Option<(OwnedFd, Option<Instant>)>,
    again: VecDeque<usize>,
    incoming: crossbeam_channel::Receiver<Conn>,
    /// The test's stop: read between passes; it wakes the poll through the worker's waker.
    stop: Shutdown,
    counters: Arc<Counters>,
    rbuf: Vec<u8>,
    wbuf: Arc<Vec<u8>>,
    zerocopy: Option<Arc<OwnedFd>>,
    dialer: Option<Dialer>,
    slots: Option<Arc<super::server::Slots>>,
    /// Latency of completed transactions, nanoseconds, per profile group (index 0 outside
    /// profiles); grown as groups show up, at most [`linerate_proto::bench::MAX_GROUPS`].
    pub hists: Vec<Histogram<u64>>,
    /// Final TCP statistics per slot, gathered as the worker ends.
    pub tcp: Vec<(u32, linerate_proto::bench::TcpStats)>,
    /// (SO_SNDBUF, SO_RCVBUF) as granted on one of the worker's sockets.
    pub buffers: Option<(u32, u32)>,
    /// The congestion control one of the worker's sockets uses.
    pub congestion: Option<String>,
    /// Connections that failed, with a reason (capped).
    pub errors: Vec<String>,
    /// Open-loop requests sent and not yet answered, over the worker's connections.
    in_flight: usize,
    /// When the worker's last open-loop request fell due and left.
    last_request: Option<Instant>,
    /// When the worker last sampled its sending connections' TCP figures for the intervals.
    last_tcp_sample: Option<Instant>,
}

/// The sending end of a worker: hand it connections and wake it.
#[derive(Clone)]
pub(crate) struct WorkerHandle {
    pub tx: crossbeam_channel::Sender<Conn>,
    pub waker: Arc<Waker>,
}

impl WorkerHandle {
    pub(crate) fn give(&self, c: Conn) {
        if self.tx.send(c).is_ok() {
            let _ = self.waker.wake();
        }
    }
}

/// Settings shared by all workers of one side of a test.
#[derive(Clone)]
pub(crate) struct WorkerConfig {
    pub counters: Arc<Counters>,
    pub write_size: usize,
    pub zerocopy: Option<Arc<OwnedFd>>,
    pub dialer: Option<Dialer>,
    /// The server's table of live connection indexes: a closed connection frees its index.
    pub slots: Option<Arc<super::server::Slots>>,
}

/// A non-blocking monotonic timerfd registered with `poll` as [`TIMER`]; none if the kernel
/// refuses one (the poll timeout's milliseconds then do, less precisely).
fn precise_timer(poll: &Poll) -> Option<(OwnedFd, Option<Instant>)> {
    use rustix::time::{timerfd_create, TimerfdClockId, TimerfdFlags};
    use std::os::fd::AsRawFd;
    let fd = timerfd_create(TimerfdClockId::Monotonic, TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC).ok()?;
    poll.registry().register(&mut mio::unix::SourceFd(&fd.as_raw_fd()), TIMER, Interest::READABLE).ok()?;
    Some((fd, None))
}

pub(crate) fn worker(cfg: &WorkerConfig) -> io::Result<(Worker, WorkerHandle)> {
    let poll = Poll::new()?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
    // The test's stop wakes the loop from its poll ([`Worker::run`] then ends).
    let stop = cfg.counters.shutdown();
    let wake = waker.clone();
    stop.on_stop(move || {
        let _ = wake.wake();
    });
    let timerfd = precise_timer(&poll);
    let (tx, rx) = crossbeam_channel::unbounded();
    let w = Worker {
        poll,
        conns: Vec::new(),
        free: Vec::new(),
        timers: BinaryHeap::new(),
        timerfd,
        again: VecDeque::new(),
        incoming: rx,
        stop,
        counters: cfg.counters.clone(),
        rbuf: vec![0u8; cfg.write_size.clamp(64 * 1024, 4 << 20)],
        wbuf: Arc::new(pattern(cfg.write_size.max(1))),
        zerocopy: cfg.zerocopy.clone(),
        dialer: cfg.dialer.clone(),
        slots: cfg.slots.clone(),
        hists: Vec::new(),
        tcp: Vec::new(),
        buffers: None,
        congestion: None,
        errors: Vec::new(),
        in_flight: 0,
        last_request: None,
        last_tcp_sample: None,
    };
    Ok((w, WorkerHandle { tx, waker }))
}

/// A latency histogram: 1 ns to 100 s at three significant digits.
pub fn new_histogram() -> Histogram<u64> {
    // The bounds are constants that hdrhistogram accepts; auto-resize covers anything larger.
    let mut h = Histogram::new_with_bounds(1, 100_000_000_000, 3).unwrap_or_else(|_| unreachable_bounds());
    h.auto(true);
    h
}

#[allow(clippy::panic)]
fn unreachable_bounds() -> Histogram<u64> {
    panic!("hdrhistogram refused constant bounds 1..1e11 at 3 digits")
}

/// Incompressible-looking payload so that no link compression flatters the result.
pub(crate) fn pattern(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}

/// After a client step: go on with the next step, or stop turning this connection with how the
/// loop should treat it.
enum Flow {
    Go,
    Stop(Drive),
}

/// What driving a connection ended in.
enum Drive {
    /// Waiting for the socket.
    Blocked,
    /// More to do right away (turn used up).
    Again,
    /// Waiting for a timer.
    Park(Instant),
    /// Waiting for the socket and, at the latest, for a timer.
    Wait(Instant),
    /// Finished or failed: remove.
    Close(Option<String>),
}

impl Worker {
    /// Refresh the retransmits and congestion window of this worker's sending connections in the
    /// counters, for the interval lines: every [`TCP_SAMPLE_EVERY`] at most, and only in a test
    /// that asked for it ([`Counters::track_tcp`]: a syscall per connection).
    fn sample_tcp(&mut self, now: Instant) {
        if !self.counters.tracks_tcp() || self.last_tcp_sample.is_some_and(|t| now < t + TCP_SAMPLE_EVERY) {
            return;
        }
        self.last_tcp_sample = Some(now);
        for c in self.conns.iter().flatten() {
            if !matches!(c.role, Role::Source { .. } | Role::Duplex { .. }) {
                continue;
            }
            if let Some(t) = c.sock.as_ref().and_then(|s| linerate_net::sockopt::tcp_info(s).ok()) {
                self.counters.note_tcp(c.slot as usize, t.retrans, u64::from(t.cwnd) * u64::from(t.mss));
            }
        }
    }

    /// Run until the test's stop; then gather TCP statistics and close everything.
    pub(crate) fn run(mut self) -> Worker {
        let mut events = Events::with_capacity(1024);
        let mut was_started = false;
        loop {
            if self.stop.is_stopped() {
                break;
            }
            self.take_incoming();
            if !was_started && self.counters.started.load(Relaxed) {
                // Connections that waited for the start get their first turn now.
                was_started = true;
                self.again.extend(self.conns.iter().enumerate().filter(|(_, c)| c.is_some()).map(|(i, _)| i));
            }
            let now = Instant::now();
            while let Some(Reverse((t, i))) = self.timers.peek().copied() {
                if t > now {
                    break;
                }
                self.timers.pop();
                if let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) {
                    if c.timer != Some(t) {
                        continue; // superseded by an earlier one, or left by a closed connection
                    }
                    c.timer = None;
                    if c.parked {
                        c.parked = false;
                        self.again.push_back(i);
                    } else if matches!(c.role, Role::OpenLoop(_)) {
                        // Its next request is due (it waits on its socket too, not parked).
                        self.again.push_back(i);
                    }
                }
            }
            self.sample_tcp(now);
            // Sockets, timers, new connections, the start and the stop all wake the poll; only
            // the TCP figures' sampling is on a clock of its own.
            let mut timeout = self.counters.tracks_tcp().then_some(TCP_SAMPLE_EVERY);
            if !self.again.is_empty() {
                timeout = Some(Duration::ZERO);
            } else if self.busy_poll(now) {
                // Let a thread waiting for this core (the agent's, on a loopback test) go first.
                std::thread::yield_now();
                timeout = Some(Duration::ZERO);
            } else if let Some(&Reverse((t, i))) = self.timers.peek() {
                // An open-loop request's timer wakes the worker early enough to poll until due.
                let wake = if self.is_open_loop(i) { t.checked_sub(SPIN).unwrap_or(t) } else { t };
                if !self.arm(wake, now) {
                    let left = wake.saturating_duration_since(now);
                    timeout = Some(timeout.map_or(left, |d| d.min(left)));
                }
            }
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() != io::ErrorKind::Interrupted {
                    self.errors.push(format!("poll: {e}"));
                    break;
                }
            }
            for ev in events.iter() {
                if ev.token() == TIMER {
                    if let Some((fd, armed)) = &mut self.timerfd {
                        let mut buf = [0u8; 8];
                        let _ = rustix::io::read(&*fd, &mut buf);
                        *armed = None;
                    }
                    continue;
                }
                if ev.token() == WAKER {
                    continue;
                }
                self.step(ev.token().0);
            }
            for _ in 0..self.again.len() {
                if let Some(i) = self.again.pop_front() {
                    self.step(i);
                }
            }
        }
        self.finish();
        self
    }

    /// Whether to poll without sleeping: an open-loop answer is outstanding and the last request
    /// left within [`ANSWER_SPIN`], or an open-loop request falls due within [`SPIN`].
    fn busy_poll(&self, now: Instant) -> bool {
        (self.in_flight > 0 && self.last_request.is_some_and(|t| now < t + ANSWER_SPIN))
            || self.timers.peek().is_some_and(|Reverse((t, i))| *t <= now + SPIN && self.is_open_loop(*i))
    }

    fn is_open_loop(&self, i: usize) -> bool {
        self.conns.get(i).and_then(Option::as_ref).is_some_and(|c| matches!(c.role, Role::OpenLoop(_)))
    }

    /// Arm the timerfd for `t` (once per distinct instant); false without one, when the poll
    /// timeout must do.
    fn arm(&mut self, t: Instant, now: Instant) -> bool {
        let Some((fd, armed)) = &mut self.timerfd else { return false };
        if *armed == Some(t) {
            return true;
        }
        // At least a nanosecond: a zero value would disarm it.
        let left = t.saturating_duration_since(now).max(Duration::from_nanos(1));
        let spec = rustix::time::Itimerspec {
            it_interval: rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: rustix::time::Timespec { tv_sec: left.as_secs() as i64, tv_nsec: i64::from(left.subsec_nanos()) },
        };
        match rustix::time::timerfd_settime(&*fd, rustix::time::TimerfdTimerFlags::empty(), &spec) {
            Ok(_) => {
                *armed = Some(t);
                true
            }
            Err(_) => false,
        }
    }

    fn take_incoming(&mut self) {
        while let Ok(c) = self.incoming.try_recv() {
            let i = self.insert(c);
            self.again.push_back(i);
        }
    }

    fn insert(&mut self, mut c: Conn) -> usize {
        let i = self.free.pop().unwrap_or_else(|| {
            self.conns.push(None);
            self.conns.len() - 1
        });
        if let Some(s) = c.sock.as_mut() {
            if self.buffers.is_none() {
                let r = socket2::SockRef::from(&*s);
                if let (Ok(a), Ok(b)) = (r.send_buffer_size(), r.recv_buffer_size()) {
                    self.buffers = Some((a as u32, b as u32));
                }
            }
            if self.congestion.is_none() {
                self.congestion = congestion_of(&socket2::SockRef::from(&*s));
            }
            if let Err(e) = self.poll.registry().register(s, Token(i), Interest::READABLE | Interest::WRITABLE) {
                self.note_error(format!("connection {}: registering: {e}", c.slot));
            }
        }
        self.conns[i] = Some(c);
        i
    }

    fn note_error(&mut self, e: String) {
        self.counters.failures.fetch_add(1, Relaxed);
        if self.errors.len() < 16 {
            self.errors.push(e);
        }
    }

    fn step(&mut self, i: usize) {
        let Some(mut c) = self.conns.get_mut(i).and_then(Option::take) else { return };
        if c.parked {
            self.conns[i] = Some(c);
            return;
        }
        let r = self.drive(&mut c, i);
        match r {
            Drive::Blocked => {}
            Drive::Again => self.again.push_back(i),
            Drive::Park(t) => {
                c.parked = true;
                self.schedule(&mut c, i, t);
            }
            Drive::Wait(t) => self.schedule(&mut c, i, t),
            Drive::Close(err) => {
                self.counters.closed.fetch_add(1, Relaxed);
                if let Some(s) = &self.slots {
                    s.release(c.slot);
                }
                if let Some(e) = err {
                    self.note_error(format!("connection {}: {e}", c.slot));
                }
                // A long-lived connection the peer closed first keeps its last TCP statistics
                // (a crr connection's would cost a syscall per transaction, so it has none).
                if !matches!(c.role, Role::Client(_)) {
                    if let Some(t) = c.sock.as_ref().and_then(|s| linerate_net::sockopt::tcp_info(s).ok()) {
                        self.tcp.push((c.slot, t));
                    }
                }
                if let Some(mut s) = c.sock.take() {
                    let _ = self.poll.registry().deregister(&mut s);
                }
                self.free.push(i);
                return;
            }
        }
        self.conns[i] = Some(c);
    }

    /// Wake connection `i` at `t`, keeping one live timer per connection: an open-loop
    /// connection answers `Wait(next due)` on every turn its socket wakes it for, and a new
    /// heap entry each time would pile up one per response, all firing together (an open loop
    /// at 5,000/s then spun both cores popping them and sent late). An earlier live timer
    /// already covers `t`: its turn plans again.
    fn schedule(&mut self, c: &mut Conn, i: usize, t: Instant) {
        if c.timer.is_some_and(|live| live <= t) {
            return;
        }
        c.timer = Some(t);
        self.timers.push(Reverse((t, i)));
    }

    fn drive(&mut self, c: &mut Conn, i: usize) -> Drive {
        let started = self.counters.started.load(Relaxed);
        let slot = c.slot as usize;
        match &mut c.role {
            Role::Sink => self.sink(c.sock.as_mut(), slot),
            Role::Source { pace } => {
                if !started {
                    return Drive::Blocked;
                }
                let pace = *pace;
                self.source(c, pace)
            }
            Role::Duplex { pace } => {
                let pace = *pace;
                let r = self.sink(c.sock.as_mut(), slot);
                if !started || matches!(r, Drive::Close(_)) {
                    return r;
                }
                match (self.source(c, pace), r) {
                    (Drive::Again, _) | (_, Drive::Again) => Drive::Again,
                    (w, _) => w,
                }
            }
            Role::RrServer { .. } => self.rr_server(c),
            Role::ProfServer { .. } => self.prof_server(c),
            Role::Client(_) => self.client(c, i),
            Role::OpenLoop(_) => self.open_loop(c),
        }
    }

    /// Reads or writes in one turn of a bulk connection.
    fn turn(&self) -> usize {
        if self.conns.len() - self.free.len() > MANY {
            1
        } else {
            TURN
        }
    }

    fn sink(&mut self, sock: Option<&mut TcpStream>, slot: usize) -> Drive {
        let Some(s) = sock else { return Drive::Close(None) };
        for _ in 0..self.turn() {
            match s.read(&mut self.rbuf) {
                Ok(0) => return Drive::Close(None),
                Ok(n) => self.counters.add_rx(slot, n),
                Err(e) if would_block(&e) => return Drive::Blocked,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Drive::Close(closed_or(e)),
            }
        }
        Drive::Again
    }

    fn source(&mut self, c: &mut Conn, pace: Option<Pace>) -> Drive {
        let slot = c.slot as usize;
        let turn = self.turn();
        let Some(s) = c.sock.as_mut() else { return Drive::Close(None) };
        for _ in 0..turn {
            let mut n = self.wbuf.len();
            if let Some(p) = pace {
                match p.next_write(c.sent, self.counters.since_start(), n) {
                    Ok(k) => n = k,
                    Err(wait) => return Drive::Park(Instant::now() + wait),
                }
            }
            // A byte count (iperf3 -n) spent: end this side of the stream; the receiver closes
            // once it has read everything, and that close ends the connection here.
            let n = self.counters.take(n);
            if n == 0 {
                let _ = s.shutdown(std::net::Shutdown::Write);
                c.role = Role::Sink;
                return Drive::Again;
            }
            let r = match &self.zerocopy {
                Some(fd) => {
                    let mut off = 0u64;
                    rustix::fs::sendfile(&*s, fd.as_ref(), Some(&mut off), n).map_err(io::Error::from)
                }
                None => s.write(&self.wbuf[..n]),
            };
            self.counters.give_back(n - r.as_ref().map_or(0, |k| *k));
            match r {
                Ok(0) => return Drive::Close(None),
                Ok(k) => {
                    c.sent += k as u64;
                    self.counters.add_tx(slot, k);
                }
                Err(e) if would_block(&e) => return Drive::Blocked,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Drive::Close(closed_or(e)),
            }
        }
        Drive::Again
    }

    fn rr_server(&mut self, c: &mut Conn) -> Drive {
        let slot = c.slot as usize;
        let Some(s) = c.sock.as_mut() else { return Drive::Close(None) };
        let Role::RrServer { req, resp, once, need, owe, served } = &mut c.role else { return Drive::Close(None) };
        for _ in 0..TURN * 4 {
            if *owe > 0 {
                let n = (*owe as usize).min(self.wbuf.len());
                match s.write(&self.wbuf[..n]) {
                    Ok(k) => {
                        *owe -= k as u64;
                        self.counters.add_tx(slot, k);
                        if *owe == 0 {
                            self.counters.add_transaction(slot);
                            *served = *once;
                        }
                    }
                    Err(e) if would_block(&e) => return Drive::Blocked,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Drive::Close(closed_or(e)),
                }
                continue;
            }
            // After its one transaction a crr connection only waits for the client's close.
            let want = if *served {
                self.rbuf.len() as u64
            } else if *need == 0 {
                u64::from(*req)
            } else {
                *need
            };
            let n = (want as usize).min(self.rbuf.len());
            match s.read(&mut self.rbuf[..n]) {
                Ok(0) => return Drive::Close(None),
                Ok(_) if *served => return Drive::Close(Some("data after the crr transaction".into())),
                Ok(k) => {
                    self.counters.add_rx(slot, k);
                    *need = want - k as u64;
                    if *need == 0 {
                        *owe = u64::from(*resp);
                    }
                }
                Err(e) if would_block(&e) => return Drive::Blocked,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Drive::Close(closed_or(e)),
            }
        }
        Drive::Again
    }

    fn prof_server(&mut self, c: &mut Conn) -> Drive {
        let slot = c.slot as usize;
        let Some(s) = c.sock.as_mut() else { return Drive::Close(None) };
        let Role::ProfServer { hdr, got, need, pending, owe, stream } = &mut c.role else { return Drive::Close(None) };
        for _ in 0..TURN * 4 {
            if *need > 0 {
                let n = (*need as usize).min(self.rbuf.len());
                match s.read(&mut self.rbuf[..n]) {
                    Ok(0) => return Drive::Close(None),
                    Ok(k) => {
                        self.counters.add_rx(slot, k);
                        *need -= k as u64;
                        if *need == 0 {
                            *owe = std::mem::take(pending);
                            if *owe == 0 && !*stream {
                                self.counters.add_transaction(slot);
                            }
                        }
                    }
                    Err(e) if would_block(&e) => return Drive::Blocked,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Drive::Close(closed_or(e)),
                }
                continue;
            }
            if *owe > 0 || *stream {
                let n = if *stream { self.wbuf.len() } else { (*owe as usize).min(self.wbuf.len()) };
                match s.write(&self.wbuf[..n]) {
                    Ok(k) => {
                        self.counters.add_tx(slot, k);
                        if !*stream {
                            *owe -= k as u64;
                            if *owe == 0 {
                                self.counters.add_transaction(slot);
                            }
                        }
                    }
                    Err(e) if would_block(&e) => return Drive::Blocked,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Drive::Close(closed_or(e)),
                }
                continue;
            }
            match s.read(&mut hdr[*got..]) {
                Ok(0) => return Drive::Close(None),
                Ok(k) => {
                    *got += k;
                    if *got < MSG_HEADER_LEN {
                        continue;
                    }
                    *got = 0;
                    let h = match MsgHeader::decode(hdr) {
                        Ok(h) => h,
                        Err(e) => return Drive::Close(Some(e.to_string())),
                    };
                    *need = u64::from(h.len);
                    if h.reply == REPLY_STREAM {
                        *stream = true;
                    } else if *need == 0 {
                        *owe = u64::from(h.reply);
                        if *owe == 0 {
                            self.counters.add_transaction(slot);
                        }
                    } else {
                        *pending = u64::from(h.reply);
                    }
                }
                Err(e) if would_block(&e) => return Drive::Blocked,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Drive::Close(closed_or(e)),
            }
        }
        Drive::Again
    }

    /// A client connection: run its script's steps, one method per kind of step, each saying
    /// whether to go on with the next step or how the loop should treat this connection.
    fn client(&mut self, c: &mut Conn, i: usize) -> Drive {
        if !self.counters.started.load(Relaxed) {
            return Drive::Blocked;
        }
        let Conn { sock, slot, role, .. } = c;
        let slot = *slot as usize;
        let Role::Client(cs) = role else { return Drive::Close(None) };
        for _ in 0..TURN * 4 {
            if let Some(p) = cs.connecting {
                if let Flow::Stop(d) = self.step_connecting(sock, cs, slot, p) {
                    return d;
                }
                continue;
            }
            let Some(step) = cs.steps.front().copied() else {
                match Self::next_iteration(cs, &self.counters) {
                    Flow::Go => continue,
                    Flow::Stop(d) => return d,
                }
            };
            let flow = match step {
                Step::Connect => self.step_connect(sock, cs, slot, i),
                Step::Close => {
                    if let Some(mut s) = sock.take() {
                        let _ = self.poll.registry().deregister(&mut s);
                    }
                    cs.steps.pop_front();
                    Flow::Go
                }
                Step::Think { d } => {
                    cs.steps.pop_front();
                    Flow::Stop(Drive::Park(Instant::now() + d))
                }
                Step::Mark { answered } => {
                    self.step_mark(cs, slot, answered);
                    Flow::Go
                }
                Step::Ack => Self::step_ack(sock, cs),
                Step::Send { n, hdr } => self.step_send(sock, cs, slot, n, hdr),
                Step::Recv { n } => self.step_recv(sock, cs, slot, n),
                Step::RecvStream => self.step_recv_stream(sock, cs, slot),
            };
            if let Flow::Stop(d) = flow {
                return d;
            }
        }
        Drive::Again
    }

    /// A connect under way: finish it (send the preamble), or, when it failed, count it and
    /// try again shortly with a new one.
    fn step_connecting(
        &mut self,
        sock: &mut Option<TcpStream>,
        cs: &mut ClientScript,
        slot: usize,
        p: Connecting,
    ) -> Flow {
        match self.progress_connect(sock.as_mut(), slot as u32, p) {
            Ok(None) => {
                cs.connecting = None;
                Flow::Go
            }
            Ok(Some(p)) => {
                cs.connecting = Some(p);
                Flow::Stop(Drive::Blocked)
            }
            Err(e) => {
                // A failed connect is counted and the iteration goes on with a new one; one that
                // fails once the test has stopped is the agent closing its port at the end
                // (the client stops its counters before it tells the agent), not a failure.
                if !self.counters.stopped() {
                    self.note_error(format!("connection {slot}: connect: {e}"));
                }
                if let Some(mut s) = sock.take() {
                    let _ = self.poll.registry().deregister(&mut s);
                }
                cs.connecting = None;
                cs.steps.push_front(Step::Connect);
                Flow::Stop(Drive::Park(Instant::now() + Duration::from_millis(10)))
            }
        }
    }

    /// The script's steps are done: plan its next iteration, parked until it is due.
    fn next_iteration(cs: &mut ClientScript, counters: &Counters) -> Flow {
        let now = Instant::now();
        let next = cs.script.next_iteration(now, &mut cs.steps);
        if let (Some(t), true) = (next, cs.script.scheduled() && counters.measuring(now)) {
            // A scripted open loop (crr: one transaction at a time) is behind when the next one
            // was due before the previous ended.
            counters.scheduled.fetch_add(1, Relaxed);
            if t < now {
                counters.behind.fetch_add(1, Relaxed);
            }
        }
        match next {
            None => {
                cs.done = true;
                Flow::Stop(Drive::Close(None))
            }
            Some(t) => {
                cs.intended = Some(t);
                // Never early: a request sent before it is due would show a latency shorter than
                // the path's (down to zero).
                if t > now {
                    return Flow::Stop(Drive::Park(t));
                }
                Flow::Go
            }
        }
    }

    /// Open a new data connection (closing the old one).
    fn step_connect(&mut self, sock: &mut Option<TcpStream>, cs: &mut ClientScript, slot: usize, i: usize) -> Flow {
        if let Some(mut s) = sock.take() {
            let _ = self.poll.registry().deregister(&mut s);
        }
        let Some(d) = &self.dialer else { return Flow::Stop(Drive::Close(Some("no dialer".into()))) };
        match d.dial(slot as u32) {
            Ok(mut s) => {
                if let Err(e) = self.poll.registry().register(&mut s, Token(i), Interest::READABLE | Interest::WRITABLE)
                {
                    return Flow::Stop(Drive::Close(Some(format!("registering: {e}"))));
                }
                *sock = Some(s);
                cs.steps.pop_front();
                cs.connecting = Some(Connecting { sent_hello: 0 });
                Flow::Go
            }
            Err(e) => {
                // As in a connect's progress: once the test has stopped, the agent's closed
                // port is its end, not a failure.
                if !self.counters.stopped() {
                    self.note_error(format!("connection {slot}: connect: {e}"));
                }
                Flow::Stop(Drive::Park(Instant::now() + Duration::from_millis(10)))
            }
        }
    }

    /// One turn of an open-loop connection, keeping the worker's count of unanswered requests.
    fn open_loop(&mut self, c: &mut Conn) -> Drive {
        let outstanding = |c: &Conn| match &c.role {
            Role::OpenLoop(ol) => ol.due.len(),
            _ => 0,
        };
        let before = outstanding(c);
        let r = self.open_loop_turn(c);
        let after = if matches!(r, Drive::Close(_)) { 0 } else { outstanding(c) };
        self.in_flight = (self.in_flight + after).saturating_sub(before);
        r
    }

    /// Take in what responses arrived, then send what is due.
    fn open_loop_turn(&mut self, c: &mut Conn) -> Drive {
        if !self.counters.started.load(Relaxed) {
            return Drive::Blocked;
        }
        let slot = c.slot as usize;
        let (Some(s), Role::OpenLoop(ol)) = (c.sock.as_mut(), &mut c.role) else { return Drive::Close(None) };
        let base = *ol.base.get_or_insert_with(|| Instant::now() + ol.phase);
        // Responses: every byte belongs to the oldest request outstanding.
        loop {
            match s.read(&mut self.rbuf) {
                Ok(0) => return Drive::Close(Some("server closed the connection mid-test".into())),
                Ok(mut k) => {
                    self.counters.add_rx(slot, k);
                    let now = Instant::now();
                    while k > 0 {
                        let Some(&t) = ol.due.front() else {
                            return Drive::Close(Some("the server answered a request that was never sent".into()));
                        };
                        let take = (ol.resp - ol.recv_got).min(k as u64);
                        ol.recv_got += take;
                        k -= take as usize;
                        if ol.recv_got == ol.resp {
                            ol.recv_got = 0;
                            ol.due.pop_front();
                            if self.counters.measuring(now) {
                                self.record(0, now.saturating_duration_since(t));
                            }
                            self.counters.add_transaction(slot);
                        }
                    }
                }
                Err(e) if would_block(&e) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Drive::Close(Some(format!("receiving: {e}"))),
            }
        }
        // Requests: each one due goes out now, whatever is outstanding.
        loop {
            let now = Instant::now();
            if ol.send_left == 0 {
                let t = base + ol.interval.mul_f64(ol.k as f64);
                if t > now {
                    return Drive::Wait(t); // never early
                }
                if ol.due.len() >= MAX_IN_FLIGHT {
                    return Drive::Wait(now + ol.interval);
                }
                if self.counters.measuring(now) {
                    self.counters.scheduled.fetch_add(1, Relaxed);
                    // Behind: leaving more than one interval after it was due.
                    if now.saturating_duration_since(t) > ol.interval {
                        self.counters.behind.fetch_add(1, Relaxed);
                    }
                }
                ol.k += 1;
                ol.due.push_back(t);
                self.last_request = Some(now);
                ol.send_left = ol.req;
            }
            let k = (ol.send_left as usize).min(self.wbuf.len());
            match s.write(&self.wbuf[..k]) {
                Ok(w) => {
                    ol.send_left -= w as u64;
                    self.counters.add_tx(slot, w);
                }
                Err(e) if would_block(&e) => return Drive::Blocked,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Drive::Close(Some(format!("sending: {e}"))),
            }
        }
    }

    /// A transaction ended: record its latency from when it was due (open loop) and count it.
    /// An iteration without an answer to wait for is not a transaction: nothing is recorded.
    fn step_mark(&mut self, cs: &mut ClientScript, slot: usize, answered: bool) {
        cs.steps.pop_front();
        let now = Instant::now();
        let intended = cs.intended.take();
        if !answered {
            return;
        }
        if let Some(t) = intended {
            if self.counters.measuring(now) {
                self.record(cs.script.group(), now.saturating_duration_since(t));
            }
        }
        self.counters.add_transaction(slot);
    }

    /// Record one transaction's latency in its group's histogram.
    fn record(&mut self, group: usize, d: Duration) {
        let group = group.min(linerate_proto::bench::MAX_GROUPS - 1);
        if self.hists.len() <= group {
            self.hists.resize_with(group + 1, new_histogram);
        }
        let ns = d.as_nanos().min(u128::from(u64::MAX)) as u64;
        let _ = self.hists[group].record(ns.max(1));
    }

    /// Read the server's acknowledgement of the connection preamble.
    fn step_ack(sock: &mut Option<TcpStream>, cs: &mut ClientScript) -> Flow {
        let Some(s) = sock.as_mut() else { return Flow::Stop(Drive::Close(Some("no connection".into()))) };
        let got = cs.ack_got;
        match s.read(&mut cs.ack[got..]) {
            Ok(0) => Flow::Stop(Drive::Close(Some("the server refused the data connection".into()))),
            Ok(k) => {
                cs.ack_got += k;
                if cs.ack_got == DATA_ACK.len() {
                    cs.ack_got = 0;
                    if cs.ack != DATA_ACK {
                        return Flow::Stop(Drive::Close(Some("bad acknowledgement from the server".into())));
                    }
                    cs.steps.pop_front();
                }
                Flow::Go
            }
            Err(e) => Self::io_flow(e),
        }
    }

    /// Send `n` bytes, after a message header when the step has one.
    fn step_send(
        &mut self,
        sock: &mut Option<TcpStream>,
        cs: &mut ClientScript,
        slot: usize,
        n: u64,
        hdr: Option<MsgHeader>,
    ) -> Flow {
        let Some(s) = sock.as_mut() else { return Flow::Stop(Drive::Close(Some("send without a connection".into()))) };
        if cs.left == 0 && cs.hdr_left == 0 {
            cs.left = n;
            if let Some(h) = hdr {
                cs.hdr = h.encode();
                cs.hdr_left = MSG_HEADER_LEN;
            }
            if n == 0 && cs.hdr_left == 0 {
                cs.steps.pop_front();
                return Flow::Go;
            }
        }
        // Header and payload leave in one write, so Nagle never holds the payload back waiting
        // for the header's acknowledgement.
        let k = (cs.left as usize).min(self.wbuf.len());
        let r = if cs.hdr_left > 0 {
            let hdr = &cs.hdr[MSG_HEADER_LEN - cs.hdr_left..];
            let hl = hdr.len();
            s.write_vectored(&[std::io::IoSlice::new(hdr), std::io::IoSlice::new(&self.wbuf[..k])]).map(|w| {
                let h = w.min(hl);
                cs.hdr_left -= h;
                w - h
            })
        } else {
            s.write(&self.wbuf[..k])
        };
        match r {
            Ok(k) => {
                cs.left -= k as u64;
                self.counters.add_tx(slot, k);
                if cs.left == 0 && cs.hdr_left == 0 {
                    cs.steps.pop_front();
                }
                Flow::Go
            }
            Err(e) => Self::io_flow(e),
        }
    }

    /// Receive `n` bytes of a response.
    fn step_recv(&mut self, sock: &mut Option<TcpStream>, cs: &mut ClientScript, slot: usize, n: u64) -> Flow {
        let Some(s) = sock.as_mut() else {
            return Flow::Stop(Drive::Close(Some("receive without a connection".into())));
        };
        if cs.left == 0 {
            cs.left = n;
            if n == 0 {
                cs.steps.pop_front();
                return Flow::Go;
            }
        }
        let k = (cs.left as usize).min(self.rbuf.len());
        match s.read(&mut self.rbuf[..k]) {
            Ok(0) => Flow::Stop(Drive::Close(Some("server closed the connection mid-transaction".into()))),
            Ok(k) => {
                cs.left -= k as u64;
                self.counters.add_rx(slot, k);
                if cs.left == 0 {
                    cs.steps.pop_front();
                }
                Flow::Go
            }
            Err(e) => Self::io_flow(e),
        }
    }

    /// Receive a stream until the script's deadline.
    fn step_recv_stream(&mut self, sock: &mut Option<TcpStream>, cs: &mut ClientScript, slot: usize) -> Flow {
        let Some(s) = sock.as_mut() else {
            return Flow::Stop(Drive::Close(Some("receive without a connection".into())));
        };
        if cs.script.deadline().is_some_and(|d| Instant::now() >= d) {
            cs.steps.pop_front();
            return Flow::Go;
        }
        match s.read(&mut self.rbuf) {
            Ok(0) => Flow::Stop(Drive::Close(Some("server closed the stream".into()))),
            Ok(k) => {
                self.counters.add_rx(slot, k);
                Flow::Go
            }
            // Wake at the deadline even if no more data comes.
            Err(e) if would_block(&e) => Flow::Stop(match cs.script.deadline() {
                Some(d) => Drive::Park(d.min(Instant::now() + Duration::from_millis(20))),
                None => Drive::Blocked,
            }),
            Err(e) => Self::io_flow(e),
        }
    }

    /// What a socket error means to a step: wait for readiness, retry, or close.
    fn io_flow(e: io::Error) -> Flow {
        if would_block(&e) {
            Flow::Stop(Drive::Blocked)
        } else if e.kind() == io::ErrorKind::Interrupted {
            Flow::Go
        } else {
            Flow::Stop(Drive::Close(closed_or(e)))
        }
    }

    /// Advance a non-blocking connect: writable → send the preamble.
    /// `Ok(None)`: done; `Ok(Some(p))`: blocked at `p`.
    fn progress_connect(
        &mut self,
        sock: Option<&mut TcpStream>,
        conn: u32,
        mut p: Connecting,
    ) -> io::Result<Option<Connecting>> {
        let s = sock.ok_or_else(|| io::Error::other("no socket"))?;
        let Some(d) = &self.dialer else { return Err(io::Error::other("no dialer")) };
        let hello = d.hello(conn);
        while p.sent_hello < DATA_HELLO_LEN {
            if let Some(e) = s.take_error()? {
                return Err(e);
            }
            match s.write(&hello[p.sent_hello..]) {
                Ok(k) => p.sent_hello += k,
                Err(e) if would_block(&e) || e.kind() == io::ErrorKind::NotConnected => return Ok(Some(p)),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    fn finish(&mut self) {
        for c in self.conns.iter_mut().flatten() {
            if let Some(s) = c.sock.as_ref() {
                if let Ok(t) = linerate_net::sockopt::tcp_info(s) {
                    self.tcp.push((c.slot, t));
                }
            }
        }
        for c in self.conns.iter_mut().flatten() {
            if let Some(mut s) = c.sock.take() {
                let _ = self.poll.registry().deregister(&mut s);
            }
        }
        self.conns.clear();
    }
}

fn closed_or(e: io::Error) -> Option<String> {
    match e.kind() {
        io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe => None,
        _ => Some(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_paced_stream_writes_in_quanta_and_keeps_its_average() {
        let ms = Duration::from_millis;
        // 100 Mbit/s: 12.5 MB/s, a 10 ms quantum of 125,000 bytes within a 128 KiB buffer
        let p = Pace { per_sec: 12.5e6 };
        assert_eq!(p.next_write(0, ms(0), 131_072), Err(ms(10)), "nothing allowed yet: wait for a quantum");
        // a few microseconds' allowance is not written: the wait is for the rest of a quantum
        assert_eq!(
            p.next_write(125_000, Duration::from_micros(10_016), 131_072),
            Err(ms(10) - Duration::from_micros(16))
        );
        assert_eq!(p.next_write(0, ms(10), 131_072), Ok(125_000));
        // behind its schedule (a slow loop): catches up a buffer at a time
        assert_eq!(p.next_write(0, ms(100), 131_072), Ok(131_072));
        // over a second of writes the pace is kept: at most what the time allowed
        let (mut sent, mut t, mut writes) = (0u64, Duration::ZERO, 0);
        while t < Duration::from_secs(1) {
            match p.next_write(sent, t, 131_072) {
                Ok(n) => (sent, writes) = (sent + n as u64, writes + 1),
                Err(wait) => t += wait,
            }
        }
        assert!(writes <= 101 && (12.3e6..=12.5e6).contains(&(sent as f64)), "{writes} writes, {sent} bytes");
        // a slow pace writes a segment at least; a tiny buffer (-l 100) is written whole
        let slow = Pace { per_sec: 1000.0 };
        assert_eq!(slow.next_write(0, Duration::from_secs(2), 131_072), Ok(2000));
        assert!(slow.next_write(0, Duration::from_secs(1), 131_072).is_err(), "1000 bytes: under a segment");
        assert_eq!(slow.next_write(0, Duration::from_secs(1), 100), Ok(100));
    }

    #[test]
    fn dialed_sockets_carry_the_congestion_control_asked_for() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let d = Dialer {
            addr: l.local_addr().unwrap(),
            test: [0; 16],
            cookie: [0; 32],
            opts: SockOpts { congestion: Some("reno".into()), ..Default::default() },
            cport: None,
        };
        let s = d.dial(0).unwrap();
        assert_eq!(congestion_of(&socket2::SockRef::from(&s)).as_deref(), Some("reno"));
        let bad = Dialer { opts: SockOpts { congestion: Some("nosuchalgo".into()), ..Default::default() }, ..d };
        let e = bad.dial(0).unwrap_err().to_string();
        assert!(e.contains("nosuchalgo") && e.contains("tcp_available_congestion_control"), "{e}");
        assert!(bad.opts.probe(bad.addr).is_err());
    }

    #[test]
    fn an_open_loop_connection_keeps_one_live_timer_however_many_responses_wake_it() {
        // The peer answers every 64-byte request with 64 bytes, as the agent's rr server does.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let echo = std::thread::spawn(move || {
            use std::io::{Read, Write};
            let (mut s, _) = l.accept().unwrap();
            let mut b = [0u8; 64];
            while s.read_exact(&mut b).is_ok() && s.write_all(&b).is_ok() {}
        });
        let counters = Counters::new(1, Duration::ZERO);
        let (w, handle) = worker(&WorkerConfig {
            counters: counters.clone(),
            write_size: 64,
            zerocopy: None,
            dialer: None,
            slots: None,
        })
        .unwrap();
        let sock = std::net::TcpStream::connect(addr).unwrap();
        sock.set_nodelay(true).unwrap();
        sock.set_nonblocking(true).unwrap();
        let role = Role::OpenLoop(Box::new(OpenLoop::new(64, 64, Duration::from_micros(500), Duration::ZERO)));
        handle.give(Conn::new(TcpStream::from_std(sock), 0, role));
        counters.start_now();
        counters.release();
        let run = std::thread::spawn(move || w.run());
        std::thread::sleep(Duration::from_millis(400));
        counters.stop();
        let w = run.join().unwrap();
        echo.join().unwrap();
        let answered = counters.transactions();
        assert!(answered >= 20, "only {answered} responses in 400 ms at 2,000/s");
        // Every response wakes the connection, which answers Wait(next due): one entry per
        // wake-up piled up (one per response) and fired all at once, spinning the worker.
        assert!(w.timers.len() <= 2, "{} timers left after {answered} responses", w.timers.len());
    }

    #[test]
    fn a_worker_polls_without_sleeping_only_near_open_loop_work() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let conn = |role: Role| {
            let s = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
            s.set_nonblocking(true).unwrap();
            Conn::new(TcpStream::from_std(s), 0, role)
        };
        let counters = Counters::new(2, Duration::ZERO);
        let (mut w, _handle) =
            worker(&WorkerConfig { counters, write_size: 64, zerocopy: None, dialer: None, slots: None }).unwrap();
        let now = Instant::now();
        assert!(!w.busy_poll(now), "nothing to do: sleep");
        // A bulk connection's timer (pacing) never makes the worker poll.
        let bulk = w.insert(conn(Role::Sink));
        w.timers.push(Reverse((now + SPIN / 2, bulk)));
        assert!(!w.busy_poll(now), "a pacing timer: sleep until it");
        // An open-loop request due later than SPIN: sleep; within SPIN: poll.
        w.timers.clear();
        let ol =
            w.insert(conn(Role::OpenLoop(Box::new(OpenLoop::new(64, 64, Duration::from_millis(1), Duration::ZERO)))));
        w.timers.push(Reverse((now + SPIN * 10, ol)));
        assert!(!w.busy_poll(now), "the next request is far off: sleep");
        assert!(w.busy_poll(now + SPIN * 9), "the next request is within SPIN: poll");
        // An answer outstanding: poll, whenever the next request is due, until ANSWER_SPIN
        // after the last request left (a long round trip sleeps).
        w.timers.clear();
        w.in_flight = 1;
        w.last_request = Some(now);
        assert!(w.busy_poll(now) && w.busy_poll(now + ANSWER_SPIN / 2));
        assert!(!w.busy_poll(now + ANSWER_SPIN), "an answer a millisecond late: sleep until it");
    }

    /// A port P with P and P + 1 free on loopback, for TCP and UDP.
    fn two_free_ports() -> u16 {
        loop {
            let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let p = a.local_addr().unwrap().port();
            let free = |p: u16| {
                std::net::TcpListener::bind(("127.0.0.1", p)).is_ok()
                    && std::net::UdpSocket::bind(("127.0.0.1", p)).is_ok()
            };
            drop(a);
            if p < 65_535 && free(p) && free(p + 1) {
                return p;
            }
        }
    }

    #[test]
    fn connection_i_leaves_from_cport_plus_i() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let p = two_free_ports();
        let d = Dialer {
            addr: l.local_addr().unwrap(),
            test: [0; 16],
            cookie: [0; 32],
            opts: SockOpts::default(),
            cport: Some(p),
        };
        let _c0 = d.dial(0).unwrap();
        let _c1 = d.dial(1).unwrap();
        let mut seen: Vec<u16> = (0..2).map(|_| l.accept().unwrap().1.port()).collect();
        seen.sort_unstable();
        assert_eq!(seen, [p, p + 1], "the server sees the peer ports asked for");
        let e = Dialer { cport: Some(65_535), ..d }.dial(1).unwrap_err();
        assert!(e.to_string().contains("past 65535"), "{e}");
    }

    #[test]
    fn the_tos_byte_reads_back_on_tcp_and_udp_sockets_of_both_families() {
        let opts = SockOpts { tos: Some(46 << 2), ..Default::default() };
        for (domain, ty) in [
            (socket2::Domain::IPV4, socket2::Type::STREAM),
            (socket2::Domain::IPV4, socket2::Type::DGRAM),
            (socket2::Domain::IPV6, socket2::Type::STREAM),
            (socket2::Domain::IPV6, socket2::Type::DGRAM),
        ] {
            let Ok(s) = socket2::Socket::new(domain, ty, None) else { continue }; // no IPv6 here
            let r = socket2::SockRef::from(&s);
            assert_ne!(tos_of(&r), Some(0xb8), "{domain:?} {ty:?} starts without it");
            opts.apply(&r).unwrap();
            assert_eq!(tos_of(&r), Some(0xb8), "{domain:?} {ty:?}");
        }
    }
}
