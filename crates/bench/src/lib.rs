//! `linerate bench`: the client that runs tests against `linerate serve`, the agent's side of a
//! test, and the counting, sampling and summing that both sides share (this file: the client).
//!
//! | module | what |
//! |---|---|
//! | [`server`] | the agent's side of a test: admission against its caps, the data port, the mirror of the client's connections |
//! | `reactor` | the epoll event loops that drive TCP test connections, a few threads for thousands of sockets |
//! | `workload` | what each connection does: stream roles, rr/crr/profile scripts, opening connections before the clock |
//! | `udp`, `dgram` | the UDP test, and its batched datagram I/O (`sendmmsg`/`recvmmsg`, GSO/GRO) |
//! | [`sweep`] | a sweep's points from a base test |
//! | [`stats`] | from two sides' counts to the figures people read (goodput, fairness, latency, confidence) |
//! | [`doc`] | the typed `linerate.bench/1` document |
//! | [`text`] | what `linerate bench` prints: banners, interval lines, tables, the CSV |
//! | [`hgrm`] | a latency histogram as HdrHistogram's `.hgrm` text |
//! | [`campaign`] | a sweep's points with their repeats (`--repeat`, `--confidence`) |
//! | [`plan`] | from what `linerate bench` is asked to its points, repeats and start, every refusal that needs no server |
//! | [`probe`] | `linerate doctor`'s rate probe, a short tcp-stream test |
//! | [`run`] | one run of a plan: the campaign, the document, the report and `--hgrm` files, told to an `Output` |
//!
//! A test's loops (event-loop workers, the agent's acceptor, UDP senders and receivers) stop
//! through one [`Shutdown`] per test and side (the counters' stop); each loop that waits on
//! something else (a mio poll) is woken by it through a waker, none polls a flag on a timer.

pub mod campaign;
pub(crate) mod dgram;
pub mod doc;
pub mod hgrm;
pub mod plan;
pub mod probe;
pub(crate) mod reactor;
pub mod run;
pub mod server;
pub mod stats;
pub mod sweep;
pub mod text;
pub(crate) mod udp;
pub(crate) mod workload;

use hdrhistogram::Histogram;
use linerate_model::host::HostInfo;
use linerate_model::shutdown::{Shutdown, Stopper};
use linerate_net::auth::secret::Secret;
use linerate_net::conn::{self, RecvHalf, SendHalf};
use linerate_net::resources;
use linerate_net::{EngineError, UsageError};
use linerate_proto::bench::{
    ClientEvent, ClientMachine, ConnCounts, Direction, IntervalCounts, Ready, SideReport, TestKind, TestSpec,
    BENCH_DOC_VERSION,
};
use linerate_proto::frame::{self, Frame};
use linerate_proto::hello::Suite;
use linerate_proto::{ErrorCode, ProtoError};
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

/// What the client measured of one test.
struct Measured {
    /// Its side's counts.
    side: SideReport,
    /// Each connection's own counts per interval ([`TestResult::streams`]).
    streams: Vec<Vec<StreamCounts>>,
    /// The latency of all transactions, and per profile group (empty outside profiles).
    latency: Option<Latency>,
    group_latency: Vec<Option<Latency>>,
    /// The histograms they were read from (see [`TestResult::histogram`]).
    histogram: Option<Histogram<u64>>,
    group_histograms: Vec<Histogram<u64>>,
}

pub use reactor::new_histogram;
pub use stats::{Latency, StreamCounts, TestResult};

/// An interval as it closes on the client, for the live lines: this side's totals and, in a
/// test that keeps them ([`per_stream`]), each connection's own share of them.
#[derive(Debug, Clone, Copy)]
pub struct LiveInterval<'a> {
    /// The totals (what [`SideReport::intervals`] keeps).
    pub counts: &'a IntervalCounts,
    /// Each connection's counts, in connection order; empty when the test keeps none.
    pub streams: &'a [StreamCounts],
}

/// The most connections a test may have and keep each one's interval figures: iperf3's own
/// `-P` cap. Beyond it the lines would scroll past unread, and the figures cost memory per
/// interval.
pub const STREAMS_MAX: u64 = 128;

/// The most per-connection interval figures a test keeps for its document (64 bytes each, 8
/// MiB): 128 streams for 17 minutes at one interval a second. Later intervals still print
/// their per-stream lines; the document has their totals only.
pub const STREAM_SAMPLES_MAX: usize = 1 << 17;

/// Whether the client keeps each connection's own interval figures beside the totals, as
/// iperf3 prints a line per stream with `-P`: tests of two streams or more (`-P 2`; with
/// `--bidir`, two each way), of at most [`STREAMS_MAX`] connections in all; not profiles, whose
/// groups are reported apart.
pub fn per_stream(spec: &TestSpec) -> bool {
    spec.kind != TestKind::Profile && spec.connections >= 2 && spec.initial_connections() <= STREAMS_MAX
}

/// Per-connection byte and transaction counts and the test's clock, shared by one side's
/// threads. Every count is kept per connection, each by the one worker that drives it, so the
/// per-stream interval figures cost nothing where the bytes are counted: the sampler reads the
/// arrays at each interval's end.
pub(crate) struct Counters {
    rx: Box<[AtomicU64]>,
    tx: Box<[AtomicU64]>,
    /// Transactions completed, per connection.
    trans: Box<[AtomicU64]>,
    pub failures: AtomicU64,
    /// Open-loop iterations scheduled while measuring, and those due before the connection was
    /// free (the previous transaction still unanswered).
    pub scheduled: AtomicU64,
    pub behind: AtomicU64,
    /// Ends the test on this side: every loop of it holds its [`Shutdown`] ([`Counters::shutdown`]).
    stop: Stopper,
    /// The same, read: `stopped` is a load, not a clone of the channels.
    watch: Shutdown,
    /// Whether sources and scripts may run ([`Counters::release`]): state the workers read per
    /// connection step (they are woken when it changes), not a stop.
    pub started: AtomicBool,
    /// Bytes this side's sources may still send (`u64::MAX`: no byte count, the clock ends it).
    budget: AtomicU64,
    /// Connections that ended (closed by the peer or failed).
    pub closed: AtomicU64,
    /// Per connection, the last sampled TCP retransmits (over its life) and congestion window
    /// in bytes, for the interval lines; sampled only when `track_tcp` is set.
    retrans: Box<[AtomicU64]>,
    cwnd: Box<[AtomicU64]>,
    /// Whether the workers sample the TCP figures ([`Counters::track_tcp`]): set once before
    /// they run; a setting, not a stop.
    track_tcp: AtomicBool,
    start: OnceLock<Instant>,
    omit: Duration,
}

impl Counters {
    pub(crate) fn new(slots: usize, omit: Duration) -> Arc<Counters> {
        let mk = || (0..slots).map(|_| AtomicU64::new(0)).collect::<Vec<_>>().into_boxed_slice();
        let stop = Stopper::new();
        Arc::new(Counters {
            watch: stop.shutdown(),
            rx: mk(),
            tx: mk(),
            trans: mk(),
            failures: AtomicU64::new(0),
            scheduled: AtomicU64::new(0),
            behind: AtomicU64::new(0),
            stop,
            started: AtomicBool::new(false),
            budget: AtomicU64::new(u64::MAX),
            closed: AtomicU64::new(0),
            retrans: mk(),
            cwnd: mk(),
            track_tcp: AtomicBool::new(false),
            start: OnceLock::new(),
            omit,
        })
    }

    pub(crate) fn add_rx(&self, slot: usize, n: usize) {
        if let Some(c) = self.rx.get(slot) {
            c.fetch_add(n as u64, Relaxed);
        }
    }

    pub(crate) fn add_tx(&self, slot: usize, n: usize) {
        if let Some(c) = self.tx.get(slot) {
            c.fetch_add(n as u64, Relaxed);
        }
    }

    /// One transaction completed on connection `slot`.
    pub(crate) fn add_transaction(&self, slot: usize) {
        // A slot past the table (none should be) counts in the first: no transaction is lost.
        if let Some(c) = self.trans.get(slot).or_else(|| self.trans.first()) {
            c.fetch_add(1, Relaxed);
        }
    }

    /// Transactions completed so far on all connections.
    pub(crate) fn transactions(&self) -> u64 {
        self.trans.iter().map(|t| t.load(Relaxed)).sum()
    }

    /// Sample the sending connections' retransmits and congestion window for the intervals, as
    /// iperf3's lines show them: TCP stream tests of at most [`TCP_TRACKED_CONNS`] connections
    /// (each sample is a syscall per connection).
    pub(crate) fn track_tcp(&self, spec: &TestSpec) {
        let on = spec.kind == TestKind::TcpStream && spec.initial_connections() <= TCP_TRACKED_CONNS;
        self.track_tcp.store(on, Relaxed);
    }

    pub(crate) fn tracks_tcp(&self) -> bool {
        self.track_tcp.load(Relaxed)
    }

    /// A sending connection's retransmits over its life and its congestion window in bytes.
    pub(crate) fn note_tcp(&self, slot: usize, retrans: u32, cwnd_bytes: u64) {
        if let (Some(r), Some(c)) = (self.retrans.get(slot), self.cwnd.get(slot)) {
            r.store(u64::from(retrans), Relaxed);
            c.store(cwnd_bytes, Relaxed);
        }
    }

    /// Every connection's counts now, read once each (the TCP figures only where sampled).
    fn read_slots(&self) -> Vec<SlotCounts> {
        let tcp = self.tracks_tcp();
        (0..self.rx.len())
            .map(|i| {
                let get = |a: &[AtomicU64]| a.get(i).map_or(0, |c| c.load(Relaxed));
                SlotCounts {
                    rx: get(&self.rx),
                    tx: get(&self.tx),
                    transactions: get(&self.trans),
                    retrans: if tcp { get(&self.retrans) } else { 0 },
                    cwnd: if tcp { get(&self.cwnd) } else { 0 },
                }
            })
            .collect()
    }

    /// This side sends `bytes` in all and then ends its streams (iperf3 `-n`).
    pub(crate) fn limit_bytes(&self, bytes: u64) {
        self.budget.store(bytes, Relaxed);
    }

    /// Take up to `want` bytes of the budget for one write; 0 when it is spent.
    pub(crate) fn take(&self, want: usize) -> usize {
        let mut got = 0;
        let _ = self.budget.fetch_update(Relaxed, Relaxed, |left| {
            if left == u64::MAX {
                got = want;
                return None;
            }
            got = (want as u64).min(left) as usize;
            Some(left - got as u64)
        });
        got
    }

    /// Return what a write took and did not send.
    pub(crate) fn give_back(&self, n: usize) {
        if n > 0 && self.budget.load(Relaxed) != u64::MAX {
            self.budget.fetch_add(n as u64, Relaxed);
        }
    }

    /// Whether a byte count was set and is all sent.
    pub(crate) fn budget_spent(&self) -> bool {
        self.budget.load(Relaxed) == 0
    }

    /// Start the clock (once); sources still wait for [`Counters::release`], so a baseline
    /// taken in between sees nothing moved yet.
    pub(crate) fn start_now(&self) -> Instant {
        *self.start.get_or_init(Instant::now)
    }

    /// End the test's loops on this side (again: nothing more); each is woken by the hook it
    /// set on [`Counters::shutdown`].
    pub(crate) fn stop(&self) {
        if !self.watch.is_stopped() {
            self.stop.stop();
        }
    }

    /// Whether the test's loops were told to end: a read between pieces of work.
    pub(crate) fn stopped(&self) -> bool {
        self.watch.is_stopped()
    }

    /// What a loop of the test holds to wait for its end, or to be woken at it
    /// ([`Shutdown::on_stop`]).
    pub(crate) fn shutdown(&self) -> Shutdown {
        self.watch.clone()
    }

    /// Let sources and scripts run.
    pub(crate) fn release(&self) {
        self.started.store(true, Relaxed);
    }

    /// The warm-up in nanoseconds.
    pub(crate) fn omit_ns(&self) -> u64 {
        self.omit.as_nanos().min(u128::from(u64::MAX)) as u64
    }

    pub(crate) fn since_start(&self) -> Duration {
        self.start.get().map_or(Duration::ZERO, Instant::elapsed)
    }

    pub(crate) fn start_instant(&self) -> Option<Instant> {
        self.start.get().copied()
    }

    /// Whether `now` is past the warm-up.
    pub(crate) fn measuring(&self, now: Instant) -> bool {
        self.start.get().is_some_and(|s| now >= *s + self.omit)
    }

    fn snapshot(&self) -> Vec<(u64, u64)> {
        self.rx.iter().zip(self.tx.iter()).map(|(r, t)| (r.load(Relaxed), t.load(Relaxed))).collect()
    }

    fn totals(&self) -> (u64, u64) {
        let rx = self.rx.iter().map(|r| r.load(Relaxed)).sum();
        let tx = self.tx.iter().map(|t| t.load(Relaxed)).sum();
        (rx, tx)
    }
}

/// One connection's counters as read at an interval's end: bytes each way and transactions
/// since the counters were made, TCP retransmits over its life and its congestion window in
/// bytes (0 where not sampled).
#[derive(Debug, Clone, Copy, Default)]
struct SlotCounts {
    rx: u64,
    tx: u64,
    transactions: u64,
    retrans: u64,
    cwnd: u64,
}

/// Retransmits of all sending connections so far, and their mean congestion window in bytes;
/// none where the test does not sample them or before any was sampled.
fn tcp_figures(tracks: bool, slots: &[SlotCounts]) -> Option<(u64, u64)> {
    if !tracks {
        return None;
    }
    let windows: Vec<u64> = slots.iter().map(|s| s.cwnd).filter(|c| *c > 0).collect();
    if windows.is_empty() {
        return None;
    }
    let retrans = slots.iter().map(|s| s.retrans).sum();
    Some((retrans, windows.iter().sum::<u64>() / windows.len() as u64))
}

/// Interval samples and the state at the end of the warm-up, which the totals are counted from.
pub(crate) struct Sampler {
    counters: Arc<Counters>,
    interval: Duration,
    next: Instant,
    last: (u64, u64, u64),
    /// Retransmits counted up to the last interval.
    last_retrans: u64,
    last_t: f64,
    pub intervals: Vec<IntervalCounts>,
    /// With [`Sampler::keep_streams`]: each connection's counts in each of `intervals` (one
    /// entry per interval, empty past [`STREAM_SAMPLES_MAX`]).
    pub streams: Vec<Vec<StreamCounts>>,
    /// The same of the interval just closed, for the live lines (kept or not).
    current: Vec<StreamCounts>,
    /// Every connection's counters at the last interval's end.
    last_slots: Vec<SlotCounts>,
    keep_streams: bool,
    /// Entries in `streams`, held to [`STREAM_SAMPLES_MAX`].
    kept: usize,
    base: Option<Baseline>,
    end: Option<Baseline>,
    /// How often a wait looks at a `done` condition that no event announces (a byte count's
    /// end: [`Sampler::check_every`]); none: the waits last to the next boundary or the stop.
    check: Option<Duration>,
}

struct Baseline {
    at: Instant,
    conns: Vec<(u64, u64)>,
    transactions: u64,
    machine: resources::MachineTimes,
    process: resources::CpuTimes,
}

impl Sampler {
    pub(crate) fn new(counters: Arc<Counters>, interval: Duration, start: Instant) -> Sampler {
        let mut s = Sampler {
            counters,
            interval,
            next: start + interval,
            last: (0, 0, 0),
            last_retrans: 0,
            last_t: 0.0,
            intervals: Vec::new(),
            streams: Vec::new(),
            current: Vec::new(),
            last_slots: Vec::new(),
            keep_streams: false,
            kept: 0,
            base: None,
            end: None,
            check: None,
        };
        if s.counters.omit.is_zero() {
            s.take_baseline(start);
        }
        s
    }

    fn take_baseline(&mut self, at: Instant) {
        self.base = Some(Baseline {
            at,
            conns: self.counters.snapshot(),
            transactions: self.counters.transactions(),
            machine: resources::machine(),
            process: resources::process(),
        });
    }

    /// Keep each connection's own counts per interval too (the client's, in a test that shows
    /// them: [`per_stream`]); before the first interval closes.
    pub(crate) fn keep_streams(&mut self) {
        self.keep_streams = true;
    }

    /// Sleep until the next interval boundary (or `until`, or the stop, or `done`), sampling on
    /// the way. Returns the interval just closed, if one was.
    pub(crate) fn tick(
        &mut self,
        until: Option<Instant>,
        stop: &Shutdown,
        done: &dyn Fn() -> bool,
    ) -> Option<IntervalCounts> {
        let start = self.counters.start_instant()?;
        let omit_end = start + self.counters.omit;
        loop {
            let now = Instant::now();
            if self.base.is_none() && now >= omit_end {
                self.take_baseline(now);
            }
            let wake = [Some(self.next), until, (self.base.is_none()).then_some(omit_end)]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(self.next);
            if now >= self.next {
                let t = self.next;
                self.next += self.interval;
                return Some(self.close_interval(start, t));
            }
            if until.is_some_and(|u| now >= u) || stop.is_stopped() || done() {
                return None;
            }
            // A schedule, not a poll: the next interval's boundary (or the warm-up's end, or
            // `until`), cut short by the stop; a byte count's end, which nothing announces, is
            // looked at every `check`.
            let left = wake.saturating_duration_since(now);
            stop.wait_timeout(self.check.map_or(left, |c| left.min(c)));
        }
    }

    fn close_interval(&mut self, start: Instant, t: Instant) -> IntervalCounts {
        // One read of every connection: the totals are the sum of the streams' counts.
        let slots = self.counters.read_slots();
        let (rx, tx, tr) =
            slots.iter().fold((0u64, 0u64, 0u64), |(r, x, n), s| (r + s.rx, x + s.tx, n + s.transactions));
        let end_s = t.duration_since(start).as_secs_f64();
        let tcp = tcp_figures(self.counters.tracks_tcp(), &slots);
        let iv = IntervalCounts {
            start_s: self.last_t,
            end_s,
            rx: rx.saturating_sub(self.last.0),
            tx: tx.saturating_sub(self.last.1),
            transactions: tr.saturating_sub(self.last.2),
            retrans: tcp.map(|(r, _)| r.saturating_sub(self.last_retrans)),
            cwnd: tcp.map(|(_, c)| c),
        };
        if let Some((r, _)) = tcp {
            self.last_retrans = r;
        }
        self.last = (rx, tx, tr);
        self.last_t = end_s;
        self.intervals.push(iv);
        if self.keep_streams {
            self.close_streams(slots, tcp.is_some());
        }
        iv
    }

    /// Each connection's share of the interval just closed: its counts since the last one.
    fn close_streams(&mut self, slots: Vec<SlotCounts>, tcp: bool) {
        self.current = slots
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let was = self.last_slots.get(i).copied().unwrap_or_default();
                // Sampled: a sending connection of a test that samples them.
                let sampled = tcp && s.cwnd > 0;
                StreamCounts {
                    id: i as u32,
                    rx: s.rx.saturating_sub(was.rx),
                    tx: s.tx.saturating_sub(was.tx),
                    transactions: s.transactions.saturating_sub(was.transactions),
                    retrans: sampled.then(|| s.retrans.saturating_sub(was.retrans)),
                    cwnd: sampled.then_some(s.cwnd),
                }
            })
            .collect();
        self.last_slots = slots;
        let room = self.kept + self.current.len() <= STREAM_SAMPLES_MAX;
        let kept = if room { self.current.clone() } else { Vec::new() };
        self.kept += kept.len();
        self.streams.push(kept);
    }

    /// Report every interval to `progress` until `end`, the stop or `done`; returns when the
    /// run ended.
    pub(crate) fn run_until(
        &mut self,
        end: Instant,
        stop: &Shutdown,
        done: &dyn Fn() -> bool,
        progress: &mut dyn FnMut(&LiveInterval<'_>),
    ) -> Instant {
        while let Some(iv) = self.tick(Some(end), stop, done) {
            progress(&LiveInterval { counts: &iv, streams: &self.current });
            if Instant::now() >= end || stop.is_stopped() || done() {
                break;
            }
        }
        Instant::now()
    }

    /// Look at the `done` condition this often at least: finely for a test that ends on a byte
    /// count, whose end is neither on the clock nor an event the sampler can wait on.
    pub(crate) fn check_every(&mut self, check: Duration) {
        self.check = Some(check);
    }

    /// The run is over at `now`: close the last partial interval and take the final counts, before
    /// the workers wind down (what they move after this is not counted).
    pub(crate) fn freeze(&mut self, now: Instant) {
        if self.end.is_some() {
            return;
        }
        if let Some(start) = self.counters.start_instant() {
            let left = now.duration_since(start).as_secs_f64() - self.last_t;
            if left > 0.25 * self.interval.as_secs_f64() || self.intervals.is_empty() {
                if left > 0.0005 {
                    self.close_interval(start, now);
                }
            } else if left > 0.0 {
                // A sliver after the last full interval (the end landing a few ms past it) is
                // folded into that interval: alone, a few ms of bytes already in flight would
                // read as an impossible rate.
                let iv = self.close_interval(start, now);
                self.intervals.pop();
                if let Some(last) = self.intervals.last_mut() {
                    last.end_s = iv.end_s;
                    last.rx += iv.rx;
                    last.tx += iv.tx;
                    last.transactions += iv.transactions;
                    last.retrans = iv.retrans.map(|r| r + last.retrans.unwrap_or(0));
                    last.cwnd = iv.cwnd.or(last.cwnd);
                }
                // Each stream's sliver joins its own last interval alike.
                if let Some(sliver) = self.streams.pop() {
                    self.kept -= sliver.len();
                    if let Some(last) = self.streams.last_mut() {
                        for (l, s) in last.iter_mut().zip(&sliver) {
                            l.rx += s.rx;
                            l.tx += s.tx;
                            l.transactions += s.transactions;
                            l.retrans = s.retrans.map(|r| r + l.retrans.unwrap_or(0));
                            l.cwnd = s.cwnd.or(l.cwnd);
                        }
                    }
                }
            }
        }
        if self.base.is_none() {
            // Stopped before the warm-up ended: nothing counts.
            self.take_baseline(now);
        }
        self.end = Some(Baseline {
            at: now,
            conns: self.counters.snapshot(),
            transactions: self.counters.transactions(),
            machine: resources::machine(),
            process: resources::process(),
        });
    }

    /// This side's report, from the baseline to the frozen end.
    pub(crate) fn finish(mut self, now: Instant, buffers: Option<(u32, u32)>, errors: Vec<String>) -> SideReport {
        self.freeze(now);
        let base = self.base.take().unwrap_or_else(|| Baseline {
            at: now,
            conns: Vec::new(),
            transactions: 0,
            machine: resources::machine(),
            process: resources::process(),
        });
        let end = self.end.take().unwrap_or_else(|| Baseline {
            at: now,
            conns: self.counters.snapshot(),
            transactions: self.counters.transactions(),
            machine: resources::machine(),
            process: resources::process(),
        });
        let conns = end
            .conns
            .iter()
            .enumerate()
            .map(|(i, (rx, tx))| {
                let (brx, btx) = base.conns.get(i).copied().unwrap_or((0, 0));
                ConnCounts { id: i as u32, rx: rx.saturating_sub(brx), tx: tx.saturating_sub(btx), tcp: None }
            })
            .collect();
        SideReport {
            version: BENCH_DOC_VERSION,
            seconds: end.at.saturating_duration_since(base.at).as_secs_f64(),
            conns,
            intervals: self.intervals,
            cpu: end.machine.share_since(&base.machine, end.process, base.process),
            transactions: end.transactions.saturating_sub(base.transactions),
            udp: None,
            buffers,
            host: HostInfo::default(),
            errors,
        }
    }
}

/// Try a test's socket options on this host (a socket of `server`'s address family), so that one
/// the kernel refuses (an unknown congestion control) fails as a usage error before the server is
/// asked and before anything is printed.
pub fn check_local_options(spec: &TestSpec, tuning: &ClientTuning, server: SocketAddr) -> Result<(), EngineError> {
    if let Some(m) = tuning.mss {
        if !MSS_RANGE.contains(&m) {
            return Err(EngineError::Usage(UsageError::Test(format!(
                "MSS {m}: must be {} to {} bytes",
                MSS_RANGE.start(),
                MSS_RANGE.end()
            ))));
        }
    }
    if let Some(c) = tuning.cpu {
        check_cpu(c).map_err(|e| UsageError::ThisHost(e.into()))?;
    }
    if let Some(p) = tuning.cport {
        if matches!(spec.kind, TestKind::TcpCrr | TestKind::Profile) {
            return Err(EngineError::Usage(UsageError::Test(
                "--cport applies to tcp-stream, tcp-rr and udp-stream: tcp-crr and profiles open new connections \
                 all the time"
                    .into(),
            )));
        }
        let last = u64::from(p) + spec.initial_connections().saturating_sub(1);
        if p == 0 || last > 65_535 {
            return Err(EngineError::Usage(UsageError::Test(format!(
                "--cport {p} with {} connections needs local ports {p} to {last}: they must be 1 to 65535",
                spec.initial_connections()
            ))));
        }
    }
    if spec.kind == TestKind::UdpStream {
        if tuning.mss.is_some() {
            return Err(EngineError::Usage(UsageError::Test("the MSS applies to TCP tests, not udp-stream".into())));
        }
        return Ok(());
    }
    client_sock_opts(spec, tuning).probe(server).map_err(|e| UsageError::ThisHost(e.into()).into())
}

/// The options of the client's TCP data sockets: the test's, and this side's own.
fn client_sock_opts(spec: &TestSpec, tuning: &ClientTuning) -> reactor::SockOpts {
    reactor::SockOpts { mss: tuning.mss, ..reactor::SockOpts::of(spec) }
}

/// Why a test may not run on the core it names (`-A`).
#[derive(Debug, thiserror::Error)]
pub enum CpuError {
    /// The process's affinity could not be read.
    #[error("reading the CPU affinity: {0}")]
    Affinity(rustix::io::Errno),
    /// Not one of the cores this process may use (listed, comma-separated).
    #[error("core {cpu} does not exist or is not available to linerate (cores {cores})")]
    Unavailable {
        /// The core asked for.
        cpu: u32,
        /// The cores this process may use.
        cores: String,
    },
}

/// Check that this process may run on core `cpu`; the error lists the cores it may use.
pub(crate) fn check_cpu(cpu: u32) -> Result<(), CpuError> {
    let allowed = rustix::thread::sched_getaffinity(None).map_err(CpuError::Affinity)?;
    if (cpu as usize) < rustix::thread::CpuSet::MAX_CPU && allowed.is_set(cpu as usize) {
        return Ok(());
    }
    let cores: Vec<String> =
        (0..rustix::thread::CpuSet::MAX_CPU).filter(|&i| allowed.is_set(i)).map(|i| i.to_string()).collect();
    Err(CpuError::Unavailable { cpu, cores: cores.join(",") })
}

/// Start a benchmark worker thread, pinned to `cpu` when one is given (checked before with
/// [`check_cpu`]; should the kernel refuse it now, the thread runs unpinned).
pub(crate) fn spawn_worker<T: Send + 'static>(
    cpu: Option<u32>,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    std::thread::spawn(move || {
        if let Some(c) = cpu {
            let mut set = rustix::thread::CpuSet::new();
            set.set(c as usize);
            let _ = rustix::thread::sched_setaffinity(None, &set);
        }
        f()
    })
}

/// The most connections whose TCP figures the interval lines carry (iperf3 prints a line per
/// stream; beyond this many, a syscall per connection per sample costs more than it tells).
pub const TCP_TRACKED_CONNS: u64 = 128;

/// Worker threads for a test: one per core, never more than connections.
pub(crate) fn worker_count(conns: u64) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (conns as usize).clamp(1, cores.max(1))
}

/// Settings of the client's control connection.
#[derive(Debug, Clone)]
pub struct BenchClientConfig {
    /// The agent.
    pub addr: SocketAddr,
    /// The shared key (unused when `key_auth` is set).
    pub secret: Secret,
    /// Authenticate with an ed25519 identity instead (a server in daemon mode).
    pub key_auth: Option<linerate_net::auth::keys::KeyClient>,
    /// AEAD of the control connection.
    pub suite: Suite,
    /// Time to connect, authenticate and open data connections.
    pub timeout: Duration,
    /// Options of this side's own sockets, which the server need not know.
    pub tuning: ClientTuning,
}

/// The client's own socket options (iperf3 sets these on the client only).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientTuning {
    /// `TCP_MAXSEG` on every TCP data connection before it connects (iperf3 `-M`).
    pub mss: Option<u32>,
    /// Local port of data connection 0; connection `i` uses `cport + i` (iperf3 `--cport`):
    /// tcp-stream, tcp-rr and udp-stream, whose connections live as long as the test.
    pub cport: Option<u16>,
    /// The core this side's worker threads are pinned to (iperf3 `-A N`).
    pub cpu: Option<u32>,
}

/// The range `TCP_MAXSEG` accepts (the kernel's `TCP_MIN_MSS` to `MAX_TCP_WINDOW`).
pub const MSS_RANGE: std::ops::RangeInclusive<u32> = 88..=32_767;

/// An authenticated control connection to an agent, which runs tests one after another.
pub struct BenchClient {
    tx: SendHalf,
    rx: RecvHalf,
    machine: ClientMachine,
    cfg: BenchClientConfig,
    /// Ends a running test early, in order, as its end would ([`BenchClient::cancel_on`]).
    cancel: Shutdown,
}

impl BenchClient {
    /// Connect and authenticate.
    pub fn connect(cfg: BenchClientConfig) -> Result<BenchClient, EngineError> {
        let sec = conn::connect_control(cfg.addr, cfg.suite, &cfg.secret, cfg.key_auth.as_ref(), cfg.timeout)?;
        let cancel = Shutdown::never();
        Ok(BenchClient { tx: sec.tx, rx: sec.rx, machine: ClientMachine::default(), cfg, cancel })
    }

    /// The MSS of the control connection (`TCP_MAXSEG`), which iperf3 takes as the default UDP
    /// datagram size; none where the kernel does not say.
    pub fn control_mss(&self) -> Option<u32> {
        self.tx.mss()
    }

    /// A stop of `cancel` ends the running test at once, as its end would (the server is told
    /// to stop; the result covers the time run): Ctrl-C, or the CLI's closed output.
    pub fn cancel_on(&mut self, cancel: Shutdown) {
        self.cancel = cancel;
    }

    fn recv_event(&mut self, timeout: Duration) -> Result<ClientEvent, EngineError> {
        self.rx.set_timeout(Some(timeout));
        let plain = match self.rx.recv() {
            Ok(Some(p)) => p,
            Ok(None) => return Err(ProtoError::Truncated("the server closed the control connection").into()),
            Err(e) if e.is_timeout() => {
                return Err(EngineError::Timeout("waiting for the server on the control connection".into()))
            }
            Err(e) => return Err(e),
        };
        let (f, used) = frame::decode(plain)?;
        if used != plain.len() {
            return Err(ProtoError::Violation("more than one frame in a benchmark record".into()).into());
        }
        if let Frame::Fatal(f) = f {
            return Err(EngineError::Remote {
                code: ErrorCode::from_u16(f.code),
                message: linerate_proto::name::escape(f.message),
            });
        }
        Ok(self.machine.handle(&f)?)
    }

    /// Run one test. `progress` sees every interval as it closes (this side's counts, and each
    /// connection's where the test keeps them: [`per_stream`]).
    pub fn run(
        &mut self,
        spec: &TestSpec,
        progress: &mut dyn FnMut(&LiveInterval<'_>),
    ) -> Result<TestResult, EngineError> {
        self.run_admitted(spec, &mut |_| {}, progress)
    }

    /// [`BenchClient::run`], telling `admitted` the test as the server admitted it (a test until
    /// stopped, iperf3 `-t 0`, with the duration the server's cap grants) before it starts.
    pub fn run_admitted(
        &mut self,
        spec: &TestSpec,
        admitted: &mut dyn FnMut(&TestSpec),
        progress: &mut dyn FnMut(&LiveInterval<'_>),
    ) -> Result<TestResult, EngineError> {
        let wall = SystemTime::now();
        check_local_options(spec, &self.cfg.tuning, self.cfg.addr)?;
        let doc = self.machine.request(spec)?;
        self.tx.send_frames(&[Frame::BenchRequest(&doc)])?;
        let ready = match self.recv_event(self.cfg.timeout)? {
            ClientEvent::Ready(r) => r,
            _ => return Err(ProtoError::Violation("expected BenchReady".into()).into()),
        };
        let mut granted = spec.clone();
        if let (true, Some(d)) = (spec.until_stopped, ready.duration_ms) {
            granted.duration_ms = d;
        }
        let spec = &granted;
        admitted(spec);
        let host = crate::stats::host_metadata();
        let outcome = if spec.kind == TestKind::UdpStream {
            self.run_udp(spec, &ready, progress)
        } else {
            self.run_tcp(spec, &ready, progress)
        };
        let Measured { side: mut local, streams, latency, group_latency, histogram, group_histograms } = match outcome {
            Ok(x) => x,
            Err(e) => {
                // Tell the server to wind down; the session is unusable after a failed test.
                let _ = self.tx.send_frames(&[Frame::BenchStop]);
                return Err(e);
            }
        };
        // This side's facts about the test's own sockets join the host description.
        local.host = HostInfo {
            congestion_control_in_use: local.host.congestion_control_in_use.take(),
            workers_pinned_to_core: local.host.workers_pinned_to_core,
            interface_packets: local.host.interface_packets.take(),
            ..host
        };
        let remote = match self.recv_event(self.cfg.timeout + Duration::from_secs(10))? {
            ClientEvent::Result(r) => *r,
            _ => return Err(ProtoError::Violation("expected BenchResult".into()).into()),
        };
        Ok(TestResult {
            spec: spec.clone(),
            started: wall,
            local,
            remote,
            latency,
            group_latency,
            histogram,
            group_histograms,
            streams,
        })
    }

    /// Send Go and wait for the server's Go.
    fn synchronise(&mut self) -> Result<(), EngineError> {
        self.machine.go()?;
        self.tx.send_frames(&[Frame::BenchGo])?;
        match self.recv_event(self.cfg.timeout)? {
            ClientEvent::Started => Ok(()),
            _ => Err(ProtoError::Violation("expected BenchGo".into()).into()),
        }
    }

    fn stop(&mut self) -> Result<(), EngineError> {
        self.machine.stop()?;
        self.tx.send_frames(&[Frame::BenchStop])
    }

    fn run_tcp(
        &mut self,
        spec: &TestSpec,
        ready: &Ready,
        progress: &mut dyn FnMut(&LiveInterval<'_>),
    ) -> Result<Measured, EngineError> {
        let conns = spec.initial_connections();
        let counters = Counters::new(conns as usize, Duration::from_millis(spec.omit_ms));
        counters.track_tcp(spec);
        if let (Some(b), Direction::Send) = (spec.bytes, spec.direction) {
            counters.limit_bytes(b);
        }
        let dialer = reactor::Dialer {
            addr: SocketAddr::new(self.cfg.addr.ip(), ready.tcp_port),
            test: ready.test,
            cookie: ready.cookie,
            opts: client_sock_opts(spec, &self.cfg.tuning),
            cport: self.cfg.tuning.cport,
        };
        let zerocopy =
            if spec.zerocopy { Some(Arc::new(server::zerocopy_file(spec.msg_size as usize)?)) } else { None };
        let wcfg = reactor::WorkerConfig {
            counters: counters.clone(),
            write_size: workload::write_size(spec),
            zerocopy,
            dialer: Some(dialer.clone()),
            slots: None,
        };
        // Connections that wait for answers beside bulk flows (rrul's probe) run on loops of
        // their own, after the `n` shared ones.
        let probes = workload::probe_slots(spec);
        let n_probes = probes.iter().filter(|p| **p).count() as u64;
        let n = worker_count(conns.saturating_sub(n_probes));
        let m = if n_probes > 0 { worker_count(n_probes) } else { 0 };
        let mut handles = Vec::new();
        let mut threads = Vec::new();
        for _ in 0..n + m {
            let (w, h) = reactor::worker(&wcfg).map_err(|e| EngineError::net("creating an event loop", e))?;
            handles.push(h);
            threads.push(spawn_worker(self.cfg.tuning.cpu, move || w.run()));
        }
        let deadline = Instant::now() + self.cfg.timeout.max(Duration::from_secs(5)) + Duration::from_millis(conns);
        let setup = match spec.kind {
            // Long-lived connections are opened before the clock starts.
            TestKind::TcpStream | TestKind::TcpRr => workload::open_all(&dialer, conns, deadline).map(|socks| {
                for (i, s) in socks.into_iter().enumerate() {
                    let role = workload::client_role(spec, i as u32);
                    handles[i % n].give(reactor::Conn::new(s, i as u32, role));
                }
            }),
            // Connections that come and go are opened by their scripts once the clock runs.
            TestKind::TcpCrr | TestKind::Profile => {
                let (mut bulk, mut probe) = (0, 0);
                for (i, c) in workload::script_conns(spec, &counters).into_iter().enumerate() {
                    if probes.get(i).copied().unwrap_or(false) {
                        handles[n + probe % m].give(c);
                        probe += 1;
                    } else {
                        handles[bulk % n].give(c);
                        bulk += 1;
                    }
                }
                Ok(())
            }
            TestKind::UdpStream => Ok(()),
        };
        // A byte count the server sends may be all here before its Go is: count from before ours.
        let early = (spec.bytes.is_some() && spec.direction == Direction::Receive)
            .then(|| Sampler::new(counters.clone(), Duration::from_millis(spec.interval_ms), counters.start_now()));
        let result = setup.and_then(|()| self.synchronise());
        if let Err(e) = result {
            // Wakes the workers (each set a hook on the counters' stop).
            counters.stop();
            for t in threads {
                let _ = t.join();
            }
            return Err(e);
        }
        let start = counters.start_now();
        let mut sampler =
            early.unwrap_or_else(|| Sampler::new(counters.clone(), Duration::from_millis(spec.interval_ms), start));
        if per_stream(spec) {
            sampler.keep_streams();
        }
        // A byte count (iperf3 -n) ends the test when every connection has ended: the sender
        // shuts its side down after its last byte, the receiver closes on reading that end, so
        // each byte sent was counted by the receiver before the client says stop.
        let cancel = self.cancel.clone();
        let done = || spec.bytes.is_some() && counters.closed.load(Relaxed) >= conns;
        if spec.bytes.is_some() {
            sampler.check_every(Duration::from_millis(2));
        }
        counters.release();
        for h in &handles {
            let _ = h.waker.wake();
        }
        let end = start + Duration::from_millis(spec.omit_ms + spec.duration_ms);
        let now = sampler.run_until(end, &cancel, &done, progress);
        sampler.freeze(now);
        counters.stop();
        self.stop()?;
        let mut groups: Vec<Histogram<u64>> = Vec::new();
        let mut tcp = Vec::new();
        let mut buffers = None;
        let mut congestion = None;
        let mut errors = Vec::new();
        for t in threads {
            let w = t.join().map_err(|_| EngineError::Internal("a benchmark worker thread panicked".into()))?;
            for (g, h) in w.hists.iter().enumerate() {
                if groups.len() <= g {
                    groups.resize_with(g + 1, reactor::new_histogram);
                }
                let _ = groups[g].add(h);
            }
            tcp.extend(w.tcp);
            buffers = buffers.or(w.buffers);
            congestion = congestion.or(w.congestion);
            errors.extend(w.errors);
        }
        errors.truncate(16);
        let failures = counters.failures.load(Relaxed);
        if failures > errors.len() as u64 {
            errors.push(format!("{failures} connection failures in all"));
        }
        let streams = std::mem::take(&mut sampler.streams);
        let mut report = sampler.finish(now, buffers, errors);
        for (slot, t) in tcp {
            if let Some(c) = report.conns.get_mut(slot as usize) {
                c.tcp = Some(t);
            }
        }
        report.host.congestion_control_in_use = congestion;
        report.host.workers_pinned_to_core = self.cfg.tuning.cpu;
        let mut hist = reactor::new_histogram();
        for h in &groups {
            let _ = hist.add(h);
        }
        let latency = (!hist.is_empty()).then(|| {
            let mut l = stats::latency_from_histogram(&hist);
            let scheduled = counters.scheduled.load(Relaxed);
            if scheduled > 0 {
                l.behind_schedule = Some(counters.behind.load(Relaxed) as f64 / scheduled as f64);
            }
            l
        });
        // Per group only where there are groups to tell apart.
        let group_histograms: Vec<Histogram<u64>> = match &spec.profile {
            Some(p) if spec.kind == TestKind::Profile => {
                groups.resize_with(p.groups.len().max(groups.len()), reactor::new_histogram);
                groups.truncate(p.groups.len());
                groups
            }
            _ => Vec::new(),
        };
        let group_latency =
            group_histograms.iter().map(|h| (!h.is_empty()).then(|| stats::latency_from_histogram(h))).collect();
        let histogram = (spec.kind != TestKind::TcpStream).then_some(hist);
        Ok(Measured { side: report, streams, latency, group_latency, histogram, group_histograms })
    }

    fn run_udp(
        &mut self,
        spec: &TestSpec,
        ready: &Ready,
        progress: &mut dyn FnMut(&LiveInterval<'_>),
    ) -> Result<Measured, EngineError> {
        let port = ready.udp_port.ok_or_else(|| ProtoError::Violation("udp test without a UDP port".into()))?;
        let target = SocketAddr::new(self.cfg.addr.ip(), port);
        let counters = Counters::new(spec.connections as usize, Duration::from_millis(spec.omit_ms));
        let side = udp::Client::open(spec, ready, target, self.cfg.tuning.cport, counters.clone())?;
        self.synchronise()?;
        if let Some(b) = spec.bytes {
            counters.limit_bytes(b);
        }
        let start = counters.start_now();
        let mut sampler = Sampler::new(counters.clone(), Duration::from_millis(spec.interval_ms), start);
        if spec.bytes.is_some() {
            sampler.check_every(Duration::from_millis(2));
        }
        if per_stream(spec) {
            sampler.keep_streams();
        }
        let probe = stats::InterfaceProbe::start(self.cfg.addr.ip());
        counters.release();
        let running = side.start(spec, self.cfg.tuning.cpu).inspect_err(|_| counters.stop())?;
        let cancel = self.cancel.clone();
        let done = || counters.budget_spent();
        let end = start + Duration::from_millis(spec.omit_ms + spec.duration_ms);
        let now = sampler.run_until(end, &cancel, &done, progress);
        counters.stop();
        // Let the last datagrams land before the server stops counting (kept on purpose: UDP in
        // flight announces nothing to await).
        std::thread::sleep(Duration::from_millis(100));
        self.stop()?;
        let (udp, buffers) = running.join(&counters);
        sampler.freeze(now);
        let streams = std::mem::take(&mut sampler.streams);
        let mut report = sampler.finish(now, buffers, Vec::new());
        report.udp = Some(udp);
        report.host.workers_pinned_to_core = self.cfg.tuning.cpu;
        report.host.interface_packets = probe.and_then(stats::InterfaceProbe::finish);
        Ok(Measured {
            side: report,
            streams,
            latency: None,
            group_latency: Vec::new(),
            histogram: None,
            group_histograms: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_thread_runs_on_the_core_asked_for_alone() {
        let allowed = rustix::thread::sched_getaffinity(None).unwrap();
        // The last core this process may use: with several, pinning visibly narrows the mask.
        let core = (0..rustix::thread::CpuSet::MAX_CPU).rev().find(|&i| allowed.is_set(i)).unwrap() as u32;
        check_cpu(core).unwrap();
        let mask = spawn_worker(Some(core), || rustix::thread::sched_getaffinity(None).unwrap()).join().unwrap();
        assert!(
            mask.is_set(core as usize) && mask.count() == 1,
            "pinned to {core}: {} cores in the mask",
            mask.count()
        );
        let free = spawn_worker(None, || rustix::thread::sched_getaffinity(None).unwrap()).join().unwrap();
        assert_eq!(free.count(), allowed.count(), "unpinned workers keep the process's cores");
        let e = check_cpu(1023).unwrap_err().to_string();
        assert!(e.contains("core 1023 does not exist or is not available") && e.contains(&format!("{core}")), "{e}");
    }

    #[test]
    fn a_sliver_after_the_last_interval_joins_it_and_a_real_remainder_stands_alone() {
        for (after_ms, expect) in [(4u64, 1usize), (60, 2)] {
            let c = Counters::new(1, Duration::ZERO);
            let start = c.start_now();
            let mut s = Sampler::new(c.clone(), Duration::from_millis(100), start);
            c.add_rx(0, 1000);
            let first = s.close_interval(start, start + Duration::from_millis(100));
            assert_eq!(first.rx, 1000);
            s.next += s.interval;
            // Bytes in flight that land just after the last boundary.
            c.add_rx(0, 700);
            s.freeze(start + Duration::from_millis(100 + after_ms));
            assert_eq!(s.intervals.len(), expect, "{after_ms} ms after: {:?}", s.intervals);
            let last = s.intervals.last().unwrap();
            assert!((last.end_s - (100 + after_ms) as f64 / 1000.0).abs() < 1e-9, "{last:?}");
            assert_eq!(s.intervals.iter().map(|i| i.rx).sum::<u64>(), 1700, "no byte lost or counted twice");
        }
    }

    #[test]
    fn each_connections_interval_counts_sum_to_the_intervals_totals_and_its_sliver_joins_its_own() {
        let ms = Duration::from_millis;
        let c = Counters::new(3, Duration::ZERO);
        c.track_tcp(&TestSpec::new(TestKind::TcpStream));
        let start = c.start_now();
        let mut s = Sampler::new(c.clone(), ms(100), start);
        s.keep_streams();
        // Connections 0 and 1 send (their TCP figures sampled), 2 receives.
        c.add_tx(0, 1000);
        c.add_tx(1, 500);
        c.add_rx(2, 300);
        c.add_transaction(1);
        c.add_transaction(7); // past the table: counted, in the first connection's
        c.note_tcp(0, 2, 14_480);
        c.note_tcp(1, 0, 28_960);
        s.close_interval(start, start + ms(100));
        assert_eq!(s.current, s.streams[0], "the live lines see the interval just closed");
        s.next += s.interval;
        c.add_tx(0, 4000);
        c.note_tcp(0, 5, 14_480);
        s.close_interval(start, start + ms(200));
        s.next += s.interval;
        c.add_tx(1, 70); // lands 3 ms after the last boundary
        s.freeze(start + ms(203));
        assert_eq!((s.intervals.len(), s.streams.len()), (2, 2), "{:?}", s.streams);
        for (iv, st) in s.intervals.iter().zip(&s.streams) {
            assert_eq!(st.iter().map(|x| x.id).collect::<Vec<_>>(), [0, 1, 2]);
            assert_eq!(st.iter().map(|x| x.tx).sum::<u64>(), iv.tx, "{iv:?} {st:?}");
            assert_eq!(st.iter().map(|x| x.rx).sum::<u64>(), iv.rx, "{iv:?} {st:?}");
            assert_eq!(st.iter().map(|x| x.transactions).sum::<u64>(), iv.transactions, "{iv:?} {st:?}");
            assert_eq!(st.iter().filter_map(|x| x.retrans).sum::<u64>(), iv.retrans.unwrap(), "{iv:?} {st:?}");
        }
        let first = StreamCounts { id: 0, tx: 1000, transactions: 1, retrans: Some(2), cwnd: Some(14_480), rx: 0 };
        assert_eq!(s.streams[0][0], first);
        assert_eq!((s.streams[0][1].transactions, s.streams[0][2].rx), (1, 300));
        assert_eq!((s.streams[0][2].retrans, s.streams[0][2].cwnd), (None, None), "a receiver has no TCP sample");
        assert_eq!(s.streams[1][0].retrans, Some(3), "retransmits in the interval, not over the connection's life");
        assert_eq!(s.streams[1][1].tx, 70, "the sliver joined connection 1's last interval");
        // A sampler that was not asked (the agent's) keeps none.
        let mut plain = Sampler::new(c.clone(), ms(100), start);
        plain.close_interval(start, start + ms(100));
        assert!(plain.streams.is_empty() && plain.current.is_empty());
    }

    #[test]
    fn past_their_budget_the_streams_figures_reach_the_live_lines_but_are_not_kept() {
        let c = Counters::new(STREAMS_MAX as usize, Duration::ZERO);
        let start = c.start_now();
        let mut s = Sampler::new(c.clone(), Duration::from_millis(100), start);
        s.keep_streams();
        let fit = STREAM_SAMPLES_MAX / STREAMS_MAX as usize;
        for i in 0..=fit as u32 {
            c.add_tx(5, 10);
            s.close_interval(start, start + Duration::from_millis(100) * (i + 1));
        }
        assert_eq!(s.streams.len(), fit + 1, "one entry per interval");
        assert_eq!(s.streams[fit - 1].len(), STREAMS_MAX as usize);
        assert!(s.streams[fit].is_empty(), "past the budget");
        assert_eq!(s.current[5].tx, 10, "the live lines still have it");
    }

    #[test]
    fn streams_are_kept_from_two_per_direction_up_to_iperf3s_cap_and_not_for_profiles() {
        let mut s = TestSpec::new(TestKind::TcpStream);
        assert!(!per_stream(&s), "-P 1 prints as before");
        for (n, on) in [(2, true), (128, true), (129, false)] {
            s.connections = n;
            assert_eq!(per_stream(&s), on, "-P {n}");
        }
        (s.direction, s.each_way) = (Direction::Bidir, true);
        for (n, on) in [(1, false), (2, true), (64, true), (65, false)] {
            s.connections = n;
            assert_eq!(per_stream(&s), on, "--bidir -P {n}: {} connections", s.initial_connections());
        }
        let mut rr = TestSpec::new(TestKind::TcpCrr);
        rr.connections = 4;
        assert!(per_stream(&rr));
        rr.kind = TestKind::Profile;
        assert!(!per_stream(&rr), "a profile's groups are reported apart");
    }
}
