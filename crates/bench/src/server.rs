//! The agent's side of a benchmark session: admit a test against the server's caps, open a
//! per-test data port, accept only connections that carry the test's cookie (each within the
//! handshake deadline, with a cap on those not yet proven), run the mirror of the client's
//! workload, and report what this side counted.

use super::reactor::{self, Conn, WorkerHandle};
use super::stats::InterfaceProbe;
use super::{udp, worker_count, workload, Counters, Sampler};
use linerate_model::shutdown::{Shutdown, Stopper};
use linerate_net::conn::{RecvHalf, SendHalf};
use linerate_net::EngineError;
use linerate_proto::bench::{
    encode_doc, DataHello, Direction, Limits, Ready, ServerEvent, ServerMachine, SideReport, TestKind, TestSpec,
    UdpCounts, BENCH_DOC_VERSION, DATA_ACK, DATA_HELLO_LEN,
};
use linerate_proto::frame::{self, Frame};
use linerate_proto::{ErrorCode, ProtoError};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::Ordering::{AcqRel, Acquire};
use std::sync::atomic::{AtomicU8, AtomicUsize};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Most data connections from the client's own address waiting at once, per test (to show
/// their preamble, or for their index to be free): the test's declared connections plus
/// [`PENDING_SLACK`], and never more than this.
const MAX_PENDING: usize = 1024;
/// Pending connections from the client's address beyond the test's declared count.
const PENDING_SLACK: usize = 16;
/// Most pending data connections from any one other address (as the control port's
/// `max_handshakes_per_source`): a test's connections come from its client's address.
const PER_SOURCE_PENDING: usize = 16;
/// Most pending data connections from all other addresses together.
const FOREIGN_PENDING: usize = 64;

/// Which of a test's connection indexes hold a live data connection on this side: at most one
/// each, so a test never holds more data connections than it declared, whatever its client
/// opens (SECURITY.md). A crr or profile connection's successor, which can arrive before the
/// worker has seen its predecessor close, waits with the pending ones until the worker frees
/// the index and wakes the acceptor.
pub(crate) struct Slots {
    state: Box<[AtomicU8]>,
    waker: mio::Waker,
}

const FREE: u8 = 0;
const LIVE: u8 = 1;
/// Live, and a successor is waiting: the release wakes the acceptor.
const WANTED: u8 = 2;

impl Slots {
    fn new(n: u64, waker: mio::Waker) -> Slots {
        Slots { state: (0..n).map(|_| AtomicU8::new(FREE)).collect(), waker }
    }

    /// Take index `i` for a new connection; false while another holds it (the caller waits).
    fn claim(&self, i: u32) -> bool {
        let Some(s) = self.state.get(i as usize) else { return false };
        loop {
            match s.compare_exchange(FREE, LIVE, AcqRel, Acquire) {
                Ok(_) => return true,
                Err(WANTED) => return false,
                Err(_) => match s.compare_exchange(LIVE, WANTED, AcqRel, Acquire) {
                    Ok(_) | Err(WANTED) => return false,
                    Err(_) => {} // freed meanwhile: claim again
                },
            }
        }
    }

    /// The connection holding index `i` closed.
    pub(crate) fn release(&self, i: u32) {
        if self.state.get(i as usize).is_some_and(|s| s.swap(FREE, AcqRel) == WANTED) {
            let _ = self.waker.wake();
        }
    }
}

/// The two ends of a benchmark session's control connection, as this side sees them.
#[derive(Debug, Clone, Copy)]
pub struct Ends {
    /// The address the control connection arrived on: data ports open there.
    pub local: IpAddr,
    /// The client's address: its data connections get the test's own pending budget, every
    /// other address a small one (none: every connection counts as the client's).
    pub client: Option<IpAddr>,
}

/// The agent's admission caps for benchmarks.
#[derive(Debug, Clone)]
pub struct BenchServerConfig {
    /// Caps on each test.
    pub limits: Limits,
    /// Most tests running at once (across all clients).
    pub max_tests: usize,
    /// Time a data connection has to send its preamble.
    pub handshake_timeout: Duration,
    /// Longest silence on the control connection between tests.
    pub idle_timeout: Duration,
    /// Ports the tests' data listeners (and UDP sockets) take, each test the first one free
    /// (`serve --data-ports LOW-HIGH`); none: ephemeral ports.
    pub data_ports: Option<(u16, u16)>,
}

impl Default for BenchServerConfig {
    fn default() -> Self {
        BenchServerConfig {
            limits: Limits::default(),
            max_tests: 8,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            data_ports: None,
        }
    }
}

/// A memory file holding `n` bytes of payload, for zero-copy `sendfile`.
pub(crate) fn zerocopy_file(n: usize) -> Result<OwnedFd, EngineError> {
    let fd = rustix::fs::memfd_create("linerate-bench", rustix::fs::MemfdFlags::CLOEXEC)
        .map_err(|e| EngineError::net("creating a memory file for zero-copy send", e.into()))?;
    let mut f = std::fs::File::from(fd);
    f.write_all(&reactor::pattern(n)).map_err(|e| EngineError::net("filling the zero-copy memory file", e))?;
    Ok(OwnedFd::from(f))
}

fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    // A failed RNG leaves zeros; such a cookie still only admits this test's own connections,
    // and SystemRandom does not fail on Linux with getrandom.
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b);
    b
}

/// One test of a benchmark session that ran to its end, as this side counted it (for the log).
#[derive(Debug, Clone, PartialEq)]
pub struct TestDone {
    /// What was measured.
    pub kind: TestKind,
    /// Seconds counted, after the warm-up.
    pub seconds: f64,
    /// Bytes this side received in the counted time.
    pub rx: u64,
    /// Bytes this side sent in the counted time.
    pub tx: u64,
}

impl TestDone {
    fn of(kind: TestKind, report: &SideReport) -> TestDone {
        let (rx, tx) = report.conns.iter().fold((0, 0), |(r, t), c| (r + c.rx, t + c.tx));
        // UDP tests count datagrams apart from connections.
        let rx = if rx == 0 { report.udp.as_ref().map_or(0, |u| u.bytes) } else { rx };
        TestDone { kind, seconds: report.seconds, rx, tx }
    }
}

/// The payload bytes a benchmark session's tests moved on this side so far, warm-up included:
/// what `serve --metrics` reads while the session runs.
#[derive(Default)]
pub struct Moved(Mutex<MovedState>);

#[derive(Default)]
struct MovedState {
    /// (received, sent) by the tests that ended.
    done: (u64, u64),
    /// The running test's counters.
    current: Option<Arc<Counters>>,
}

impl Moved {
    /// Bytes (received, sent) so far; never less than an earlier reading.
    pub fn read(&self) -> (u64, u64) {
        let m = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let (r, t) = m.current.as_ref().map_or((0, 0), |c| c.totals());
        (m.done.0 + r, m.done.1 + t)
    }

    fn start(&self, c: &Arc<Counters>) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).current = Some(c.clone());
    }

    fn finish(&self) {
        let mut m = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = m.current.take() {
            let (r, t) = c.totals();
            m.done = (m.done.0 + r, m.done.1 + t);
        }
    }
}

/// Run a benchmark session whose first frame was `BenchRequest(first)`; returns the number of
/// tests run, and tells `on_test` about each as it ends. Data ports open on `ends.local`. A client that goes away (an interrupted one)
/// ends it with an error for which [`EngineError::is_peer_gone`] holds. `moved` counts the
/// bytes its tests move, as they move.
#[allow(clippy::too_many_arguments)]
pub fn serve_session(
    first: &[u8],
    mut tx: SendHalf,
    mut rx: RecvHalf,
    ends: Ends,
    cfg: &BenchServerConfig,
    running: &AtomicUsize,
    moved: &Moved,
    mut on_test: impl FnMut(&TestDone),
) -> Result<u64, EngineError> {
    let mut machine = ServerMachine::default();
    let mut doc = first.to_vec();
    let mut tests = 0;
    loop {
        let mut spec = match machine.handle(&Frame::BenchRequest(&doc)) {
            Ok(ServerEvent::Request(s)) => *s,
            Ok(_) => return fatal(&mut tx, ErrorCode::Protocol, "expected a test request".into()),
            Err(e) => return fatal(&mut tx, ErrorCode::BadParams, e.to_string()),
        };
        spec.grant_until_stopped(&cfg.limits);
        if let Err(msg) = spec.validate(&cfg.limits) {
            return fatal(&mut tx, ErrorCode::BadParams, msg.to_string());
        }
        if running.fetch_add(1, Relaxed) >= cfg.max_tests {
            running.fetch_sub(1, Relaxed);
            return fatal(&mut tx, ErrorCode::Busy, format!("{} tests are running; try again later", cfg.max_tests));
        }
        let r = run_test(&spec, &mut machine, &mut tx, &mut rx, ends, cfg, running, moved);
        moved.finish();
        running.fetch_sub(1, Relaxed);
        on_test(&TestDone::of(spec.kind, &r?));
        tests += 1;
        // Wait for the next test or the end of the session.
        rx.set_timeout(Some(cfg.idle_timeout));
        match rx.recv() {
            Ok(None) => return Ok(tests),
            Ok(Some(plain)) => match frame::decode(plain) {
                Ok((Frame::BenchRequest(d), _)) => doc = d.to_vec(),
                Ok((f, _)) => {
                    let msg = format!("expected a test request, got {f:?}");
                    return fatal(&mut tx, ErrorCode::Protocol, msg);
                }
                Err(e) => return fatal(&mut tx, e.code(), e.to_string()),
            },
            Err(e) => return Err(e),
        }
    }
}

fn fatal<T>(tx: &mut SendHalf, code: ErrorCode, msg: String) -> Result<T, EngineError> {
    let _ = tx.send_frames(&[Frame::Fatal(frame::Fatal { code: code as u16, message: msg.as_bytes() })]);
    Err(EngineError::Remote { code, message: msg })
}

/// Read the client's next control frame, and check it against the machine.
fn next_event(rx: &mut RecvHalf, machine: &mut ServerMachine, timeout: Duration) -> Result<ServerEvent, EngineError> {
    rx.set_timeout(Some(timeout));
    let closed =
        || EngineError::net("the control connection closed mid-test", std::io::ErrorKind::UnexpectedEof.into());
    let plain = rx.recv()?.ok_or_else(closed)?;
    let (f, _) = frame::decode(plain)?;
    Ok(machine.handle(&f)?)
}

#[allow(clippy::too_many_arguments)]
fn run_test(
    spec: &TestSpec,
    machine: &mut ServerMachine,
    tx: &mut SendHalf,
    rx: &mut RecvHalf,
    ends: Ends,
    cfg: &BenchServerConfig,
    running: &AtomicUsize,
    moved: &Moved,
) -> Result<SideReport, EngineError> {
    // Tests of other clients running beside this one share the machine whose CPU is reported.
    let mut concurrent = running.load(Relaxed);
    let conns = spec.initial_connections();
    let counters = Counters::new(conns as usize, Duration::from_millis(spec.omit_ms));
    moved.start(&counters);
    counters.track_tcp(spec);
    if let (Some(b), Direction::Receive) = (spec.bytes, spec.direction) {
        counters.limit_bytes(b);
    }
    if let Some(c) = spec.server_cpu {
        if let Err(msg) = super::check_cpu(c) {
            return fatal(tx, ErrorCode::BadParams, format!("on the server: {msg}"));
        }
    }
    let (listener, udp_sock) = match open_data_ports(ends.local, spec, cfg.data_ports) {
        Ok(p) => p,
        Err(Refusal::Test(code, msg)) => return fatal(tx, code, msg),
        Err(Refusal::Local(e)) => return Err(e),
    };
    let tcp_port = listener.local_addr().map_err(|e| EngineError::net("data port", e))?.port();
    let ready = Ready {
        version: BENCH_DOC_VERSION,
        test: random(),
        cookie: random(),
        tcp_port,
        udp_port: udp_sock.as_ref().and_then(|u| u.local_addr().ok()).map(|a| a.port()),
        duration_ms: spec.until_stopped.then_some(spec.duration_ms),
    };
    // Workers and the acceptor run from admission on; sources wait for the start.
    let zerocopy = if spec.zerocopy { Some(Arc::new(zerocopy_file(spec.msg_size as usize)?)) } else { None };
    let poll = Poll::new().map_err(|e| EngineError::net("creating the data acceptor's poll set", e))?;
    let waker = mio::Waker::new(poll.registry(), SLOT_FREED)
        .map_err(|e| EngineError::net("creating the data acceptor's waker", e))?;
    let slots = Arc::new(Slots::new(conns, waker));
    let wcfg = reactor::WorkerConfig {
        counters: counters.clone(),
        write_size: workload::write_size(spec),
        zerocopy,
        dialer: None,
        slots: Some(slots.clone()),
    };
    let mut handles = Vec::new();
    let mut threads = Vec::new();
    let udp_side = match udp_sock {
        Some(u) => Some(udp::Server::open(u, spec, &ready, counters.clone())?),
        None => {
            // A profile's connections that wait for answers beside bulk flows (rrul's probe) are
            // answered from loops of their own (see workload::probe_slots), after the shared ones.
            let probes = workload::probe_slots(spec).iter().filter(|p| **p).count() as u64;
            let loops = worker_count(conns.saturating_sub(probes)) + if probes > 0 { worker_count(probes) } else { 0 };
            for _ in 0..loops {
                let (w, h) = reactor::worker(&wcfg).map_err(|e| EngineError::net("creating an event loop", e))?;
                handles.push(h);
                threads.push(super::spawn_worker(spec.server_cpu, move || w.run()));
            }
            None
        }
    };
    // The acceptor ends with the test's loops: the stop wakes its poll through the one waker a
    // poll may have, the slots' (its handler finds nothing new and the loop ends).
    let stop = counters.shutdown();
    let wake = slots.clone();
    stop.on_stop(move || {
        let _ = wake.waker.wake();
    });
    let acceptor = {
        let (handles, ready, spec) = (handles.clone(), ready.clone(), spec.clone());
        let acceptor = Acceptor { poll, slots, client: ends.client, deadline: cfg.handshake_timeout };
        std::thread::spawn(move || acceptor.run(listener, &ready, &spec, conns, &handles, &stop))
    };
    let mut probe_slot = None;
    let probe = &mut probe_slot;
    let result = (|| -> Result<(Sampler, Instant, Option<udp::Running>), EngineError> {
        tx.send_frames(&[Frame::BenchReady(&encode_doc(&ready))])?;
        machine.admitted();
        // The client opens its data connections, then says Go (or Stop if it gave up).
        let setup = cfg.handshake_timeout + Duration::from_millis(conns) + Duration::from_secs(30);
        match next_event(rx, machine, setup)? {
            ServerEvent::Go => {}
            _ => return Err(ProtoError::Violation("the client stopped before the test started".into()).into()),
        }
        // The baseline is taken before anything may move and before the client hears Go.
        let start = counters.start_now();
        let mut sampler = Sampler::new(counters.clone(), Duration::from_millis(spec.interval_ms), start);
        *probe = if spec.kind == TestKind::UdpStream { ends.client.and_then(InterfaceProbe::start) } else { None };
        counters.release();
        for h in &handles {
            let _ = h.waker.wake();
        }
        let running = udp_side.map(|u| u.start(spec, spec.server_cpu)).transpose()?;
        tx.send_frames(&[Frame::BenchGo])?;
        // The sampler samples until the client's Stop (or the control connection's end).
        let sampler_stop = Stopper::new();
        let sampler = {
            let stop = sampler_stop.shutdown();
            std::thread::spawn(move || {
                while sampler.tick(None, &stop, &|| false).is_some() {}
                sampler
            })
        };
        let limit = Duration::from_millis(spec.duration_ms + spec.omit_ms) + Duration::from_secs(30);
        let ev = next_event(rx, machine, limit);
        let now = Instant::now();
        sampler_stop.stop();
        let mut sampler = sampler.join().map_err(|_| EngineError::Internal("the sampler thread panicked".into()))?;
        sampler.freeze(now);
        match ev? {
            ServerEvent::Stop => Ok((sampler, now, running)),
            _ => Err(ProtoError::Violation("expected BenchStop".into()).into()),
        }
    })();
    // Ends the workers and the acceptor, each woken by its hook on the counters' stop.
    counters.stop();
    let accepted = acceptor.join().unwrap_or_default();
    let mut tcp = Vec::new();
    let mut buffers = None;
    let mut congestion = None;
    let mut errors = accepted;
    for t in threads {
        if let Ok(w) = t.join() {
            tcp.extend(w.tcp);
            buffers = buffers.or(w.buffers);
            congestion = congestion.or(w.congestion);
            errors.extend(w.errors);
        }
    }
    let (sampler, now, udp_running) = result?;
    concurrent = concurrent.max(running.load(Relaxed));
    errors.truncate(32);
    let mut udp_counts = None;
    if let Some(r) = udp_running {
        let (u, b) = r.join(&counters);
        udp_counts = Some(u);
        buffers = b;
    }
    let mut report = sampler.finish(now, buffers, errors);
    // A client from before the batching counts refuses fields it does not know; one that can
    // ask for `gsro` knows them.
    report.udp = udp_counts.map(|u| if spec.gsro { u } else { UdpCounts { batching: None, ..u } });
    report.host = linerate_model::host::HostInfo {
        interface_packets: probe_slot.and_then(InterfaceProbe::finish),
        congestion_control_in_use: congestion,
        workers_pinned_to_core: spec.server_cpu,
        // The machine's CPU shares cover every test running: say how many were.
        concurrent_tests: Some(concurrent as u64),
        ..super::stats::host_metadata()
    };
    for (slot, t) in tcp {
        if let Some(c) = report.conns.get_mut(slot as usize) {
            c.tcp = Some(t);
        }
    }
    tx.send_frames(&[Frame::BenchResult(&encode_doc(&report))])?;
    machine.finished();
    Ok(report)
}

/// Why a test's data ports did not open.
enum Refusal {
    /// The client's to hear about: an option the kernel refused, every port of the range taken.
    Test(ErrorCode, String),
    /// This host failed.
    Local(EngineError),
}

/// The test's data listener, and its UDP socket for udp-stream: on ephemeral ports, or on the
/// first port of `range` free for both (`serve --data-ports`, for firewalls).
fn open_data_ports(
    ip: IpAddr,
    spec: &TestSpec,
    range: Option<(u16, u16)>,
) -> Result<(TcpListener, Option<std::net::UdpSocket>), Refusal> {
    let opts = reactor::SockOpts::of(spec);
    let udp = spec.kind == TestKind::UdpStream;
    let open = |port: u16| -> Result<Result<_, reactor::SockOptError>, EngineError> {
        let listener = match bind_data(ip, port, &opts)? {
            Ok(l) => l,
            Err(msg) => return Ok(Err(msg)),
        };
        let sock = if udp {
            Some(
                std::net::UdpSocket::bind(SocketAddr::new(ip, port))
                    .map_err(|e| EngineError::net(format!("binding UDP port {port}"), e))?,
            )
        } else {
            None
        };
        Ok(Ok((listener, sock)))
    };
    let refused = |e: reactor::SockOptError| Refusal::Test(ErrorCode::BadParams, format!("on the server: {e}"));
    let Some((low, high)) = range else {
        return open(0).map_err(Refusal::Local)?.map_err(refused);
    };
    for port in low..=high {
        match open(port) {
            Ok(r) => return r.map_err(refused),
            // Taken by another test (or another program): try the next.
            Err(EngineError::Net { io, .. }) if io.kind() == std::io::ErrorKind::AddrInUse => {}
            Err(e) => return Err(Refusal::Local(e)),
        }
    }
    Err(Refusal::Test(
        ErrorCode::Busy,
        format!(
            "every data port of this server's --data-ports {low}-{high} is taken by running tests; try again later"
        ),
    ))
}

/// A data listener on `port` (0: ephemeral); buffer sizes and congestion control are set on it
/// so accepted sockets inherit them before the handshake fixes the window scale. The inner error
/// is an option the kernel refused (the client's to fix).
fn bind_data(
    ip: IpAddr,
    port: u16,
    opts: &reactor::SockOpts,
) -> Result<Result<TcpListener, reactor::SockOptError>, EngineError> {
    let addr = SocketAddr::new(ip, port);
    let s =
        socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, Some(socket2::Protocol::TCP))
            .map_err(|e| EngineError::net("creating the data listener", e))?;
    if let Err(msg) = opts.apply(&socket2::SockRef::from(&s)) {
        return Ok(Err(msg));
    }
    // A fixed port is free again while the last test's connections linger in TIME_WAIT; a
    // listener of a running test still holds it.
    s.set_reuse_address(true).map_err(|e| EngineError::net("SO_REUSEADDR on the data listener", e))?;
    let bind = s.bind(&addr.into()).and_then(|()| s.listen(4096)).and_then(|()| s.set_nonblocking(true));
    bind.map_err(|e| EngineError::net(format!("opening data port {addr}"), e))?;
    Ok(Ok(TcpListener::from_std(std::net::TcpListener::from(s))))
}

/// Poll token of the data listener.
const LISTENER: Token = Token(usize::MAX - 1);
/// Poll token of [`Slots`]' waker: an index a successor waits for is free.
const SLOT_FREED: Token = Token(usize::MAX - 2);

/// A data connection not admitted yet: showing its preamble, or (with `hello`) waiting for its
/// connection index to be free.
struct Pending {
    sock: TcpStream,
    buf: [u8; DATA_HELLO_LEN],
    got: usize,
    deadline: Instant,
    /// `None`: the client's own address.
    foreign: Option<IpAddr>,
    hello: Option<DataHello>,
}

/// What the pending connections hold, by source: the client's own budget is never spent by
/// connections from elsewhere.
#[derive(Default)]
struct Budget {
    own: usize,
    foreign: usize,
    per_source: HashMap<IpAddr, usize>,
}

impl Budget {
    fn take(&mut self, foreign: Option<IpAddr>, own_cap: usize) -> bool {
        match foreign {
            None if self.own < own_cap => self.own += 1,
            Some(ip) if self.foreign < FOREIGN_PENDING => {
                let n = self.per_source.entry(ip).or_default();
                if *n >= PER_SOURCE_PENDING {
                    return false;
                }
                *n += 1;
                self.foreign += 1;
            }
            _ => return false,
        }
        true
    }

    fn give_back(&mut self, foreign: Option<IpAddr>) {
        match foreign {
            None => self.own = self.own.saturating_sub(1),
            Some(ip) => {
                self.foreign = self.foreign.saturating_sub(1);
                if let Some(n) = self.per_source.get_mut(&ip) {
                    *n -= 1;
                    if *n == 0 {
                        self.per_source.remove(&ip);
                    }
                }
            }
        }
    }
}

/// The test's data acceptor: admits connections that show the test's preamble within
/// `deadline`, one live connection per index ([`Slots`]), with the pending ones capped by source.
struct Acceptor {
    poll: Poll,
    slots: Arc<Slots>,
    client: Option<IpAddr>,
    deadline: Duration,
}

impl Acceptor {
    /// Accept data connections until `stop` (which must wake the poll: the slots' waker);
    /// returns error lines (capped).
    fn run(
        mut self,
        mut listener: TcpListener,
        ready: &Ready,
        spec: &TestSpec,
        conns: u64,
        workers: &[WorkerHandle],
        stop: &Shutdown,
    ) -> Vec<String> {
        let mut errors = Vec::new();
        if self.poll.registry().register(&mut listener, LISTENER, Interest::READABLE).is_err() {
            return vec!["cannot watch the data listener".into()];
        }
        let mut events = Events::with_capacity(1024);
        let mut pending: Vec<Option<Pending>> = Vec::new();
        let mut budget = Budget::default();
        let own_cap = (conns as usize).saturating_add(PENDING_SLACK).min(MAX_PENDING);
        let client = self.client.map(|c| c.to_canonical());
        let probes = workload::probe_slots(spec);
        let n_probes = probes.iter().filter(|p| **p).count() as u64;
        // The first `shared` loops take bulk connections, the rest the probes.
        let shared =
            if n_probes > 0 { worker_count(conns.saturating_sub(n_probes)).min(workers.len()) } else { workers.len() };
        let (mut next_shared, mut next_probe) = (0usize, 0usize);
        let mut admit = |s: TcpStream, h: &DataHello| {
            // Inherited from the listener, which took them all; set again as before.
            let _ = reactor::SockOpts::of(spec).apply(&socket2::SockRef::from(&s));
            let probe = probes.get(h.conn as usize).copied().unwrap_or(false) && shared < workers.len();
            let w = if probe {
                next_probe += 1;
                &workers[shared + (next_probe - 1) % (workers.len() - shared)]
            } else {
                next_shared += 1;
                &workers[(next_shared - 1) % shared.max(1)]
            };
            w.give(Conn::new(s, h.conn, workload::server_role(spec, h.conn)));
        };
        let mut refused = 0u64;
        while !stop.is_stopped() {
            // Until the next event, or the first pending connection's deadline.
            let first = pending.iter().flatten().map(|p| p.deadline).min();
            let timeout = first.map(|d| d.saturating_duration_since(Instant::now()));
            if self.poll.poll(&mut events, timeout).is_err() {
                continue;
            }
            let now = Instant::now();
            for ev in events.iter() {
                match ev.token() {
                    LISTENER => loop {
                        match listener.accept() {
                            Ok((mut s, from)) => {
                                let ip = from.ip().to_canonical();
                                let foreign = client.filter(|c| *c != ip).map(|_| ip);
                                if workers.is_empty() || !budget.take(foreign, own_cap) {
                                    refused += 1;
                                    continue; // dropped: closed at once
                                }
                                let slot = pending.iter().position(Option::is_none).unwrap_or_else(|| {
                                    pending.push(None);
                                    pending.len() - 1
                                });
                                if self.poll.registry().register(&mut s, Token(slot), Interest::READABLE).is_ok() {
                                    let deadline = now + self.deadline;
                                    let buf = [0; DATA_HELLO_LEN];
                                    pending[slot] =
                                        Some(Pending { sock: s, buf, got: 0, deadline, foreign, hello: None });
                                } else {
                                    budget.give_back(foreign);
                                }
                            }
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                            Err(_) => break,
                        }
                    },
                    SLOT_FREED => {
                        // Successors whose index is free now go in.
                        for p in pending.iter_mut() {
                            let ok =
                                p.as_ref().and_then(|p| p.hello.as_ref()).is_some_and(|h| self.slots.claim(h.conn));
                            if let Some(p) = p.take_if(|_| ok) {
                                budget.give_back(p.foreign);
                                if let Some(h) = p.hello {
                                    self.acknowledge(p.sock, &h, &mut admit);
                                }
                            }
                        }
                    }
                    Token(k) => {
                        let Some(p) = pending.get_mut(k).and_then(Option::as_mut) else { continue };
                        if p.hello.is_some() {
                            continue;
                        }
                        let verdict = loop {
                            match p.sock.read(&mut p.buf[p.got..]) {
                                Ok(0) => break Some(false),
                                Ok(n) => {
                                    p.got += n;
                                    if p.got == DATA_HELLO_LEN {
                                        break Some(true);
                                    }
                                }
                                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break None,
                                Err(_) => break Some(false),
                            }
                        };
                        let Some(complete) = verdict else { continue };
                        let _ = self.poll.registry().deregister(&mut p.sock);
                        match complete.then(|| DataHello::decode(&p.buf).ok()).flatten() {
                            Some(h) if h.admits(ready, conns) => {
                                if self.slots.claim(h.conn) {
                                    if let Some(p) = pending[k].take() {
                                        budget.give_back(p.foreign);
                                        self.acknowledge(p.sock, &h, &mut admit);
                                    }
                                } else {
                                    // Its index is live: it waits (pending) for the close.
                                    p.hello = Some(h);
                                }
                            }
                            _ => {
                                if let Some(p) = pending[k].take() {
                                    budget.give_back(p.foreign);
                                }
                                refused += 1;
                                if errors.len() < 4 {
                                    errors.push(
                                        "a data connection with a wrong preamble or cookie was refused".to_string(),
                                    );
                                }
                            }
                        }
                    }
                }
            }
            // Drop connections that missed the deadline: the preamble's, or a free index's.
            for p in pending.iter_mut() {
                if let Some(mut p) = p.take_if(|p| now >= p.deadline) {
                    if p.hello.is_none() {
                        let _ = self.poll.registry().deregister(&mut p.sock);
                    }
                    budget.give_back(p.foreign);
                    refused += 1;
                }
            }
        }
        if refused > 0 {
            errors.push(format!(
                "{refused} data connections refused (bad preamble, deadline, an index already connected, or over the cap)"
            ));
        }
        errors
    }

    /// Send the acknowledgement and hand the connection to a worker; an index whose
    /// acknowledgement fails is free again.
    fn acknowledge(&self, mut s: TcpStream, h: &DataHello, admit: &mut impl FnMut(TcpStream, &DataHello)) {
        if s.write(&DATA_ACK).ok() == Some(DATA_ACK.len()) {
            admit(s, h);
        } else {
            self.slots.release(h.conn);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_congestion_control_the_kernel_refuses_is_named_with_the_sysctl() {
        let opts = reactor::SockOpts { congestion: Some("nosuchalgo".into()), ..Default::default() };
        let msg = bind_data(IpAddr::from([127, 0, 0, 1]), 0, &opts).unwrap().unwrap_err().to_string();
        assert!(msg.contains("\"nosuchalgo\"") && msg.contains("net.ipv4.tcp_available_congestion_control"), "{msg}");
        let reno = reactor::SockOpts { congestion: Some("reno".into()), tos: Some(0xb8), ..Default::default() };
        let l = bind_data(IpAddr::from([127, 0, 0, 1]), 0, &reno).unwrap().unwrap();
        assert_eq!(reactor::congestion_of(&socket2::SockRef::from(&l)).as_deref(), Some("reno"));
        assert_eq!(reactor::tos_of(&socket2::SockRef::from(&l)), Some(0xb8), "accepted sockets inherit it");
    }
}
