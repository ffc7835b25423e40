//! `serve --metrics ADDR`: the agent's counters in the Prometheus text format (version 0.0.4)
//! on `GET /metrics`, over plain HTTP. Counting is a handful of relaxed atomics on the session
//! paths; a running session's bytes are read live from its own progress counters at each scrape
//! (so a copy or a benchmark shows while it runs, not only once it ends), and the last mesh
//! result of each pair this agent measured from is kept for the scrape. A scrape turns all of it
//! into metric families of the `prometheus` crate, whose encoder
//! writes the exposition (names, labels and help text escaped by it), and requests are parsed
//! by `httparse`. The endpoint serves each request on a thread of its own (32 at once, 4 from
//! one address), with 2 s to read a whole request of at most 8 KiB and as long to write the
//! answer, so slow or hostile clients hold nothing but their own connections, never a scrape;
//! its accept loop ends when its [`Shutdown`] comes. No secret and no path ever appears: keys
//! are labelled by their public fingerprint and their authorized_keys comment (cut).
//!
//! Why `prometheus` and not `prometheus-client`: the latter writes only OpenMetrics 1.0 (an
//! `info` type, a counter's `TYPE` line without `_total`, `# EOF`), which changes the
//! documented 0.0.4 format and which Prometheus 2's `promtool check metrics` refuses.
//!
//! The mesh's transaction latency is also a classic histogram (issue 43): fixed buckets
//! ([`LATENCY_BUCKETS_NS`]) counted from each test's HDR histogram and added up over the rounds,
//! so `rate()` and `histogram_quantile()` work on it. Not a native histogram: those travel only
//! in the protobuf exposition (or OpenMetrics 2), which this endpoint does not speak and which a
//! Prometheus reads only with a feature flag; classic buckets work in the text format with every
//! Prometheus and with `promtool`.

use hdrhistogram::Histogram;
use linerate_model::shutdown::Shutdown;
use linerate_net::accept::{Accepted, Acceptor};
use linerate_net::resources;
use linerate_proto::admit::SourceSlots;
use linerate_proto::mesh::{MeshOutcome, MeshReport, MeshTask};
use linerate_proto::ErrorCode;
use prometheus::core::{Collector, Desc};
use prometheus::proto::{Bucket, LabelPair, Metric, MetricFamily, MetricType};
use prometheus::{Counter, Gauge, GaugeVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

/// Largest request read.
pub const MAX_REQUEST: usize = 8 * 1024;
/// Time to read a request, and to write an answer.
pub const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// Most keys with their own series (more are counted under `key="other"`).
pub const MAX_KEYS: usize = 1024;
/// Most mesh pairs (test kind, peer) with series of their own.
pub const MAX_PAIRS: usize = 1024;

/// What a session is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A copy to this agent.
    Push,
    /// A copy from this agent.
    Pull,
    /// A benchmark session.
    Bench,
    /// A mesh test this agent ran for a controller.
    Mesh,
}

const KINDS: [(Kind, &str); 4] =
    [(Kind::Push, "push"), (Kind::Pull, "pull"), (Kind::Bench, "bench"), (Kind::Mesh, "mesh")];

/// Why a connection was refused, as a label.
fn reason(code: ErrorCode) -> usize {
    match code {
        ErrorCode::Auth | ErrorCode::Denied => 0,
        ErrorCode::Busy => 1,
        ErrorCode::Limit | ErrorCode::BadParams => 2,
        ErrorCode::Version => 3,
        ErrorCode::Unsupported => 4,
        ErrorCode::UnknownSession => 5,
        _ => 6,
    }
}

const REASONS: [&str; 7] = ["auth", "busy", "limits", "version", "unsupported", "unknown_session", "protocol"];

#[derive(Debug, Default)]
struct KeyBytes {
    name: String,
    received: u64,
    sent: u64,
}

/// Reads a running session's bytes so far: (received, sent).
type Reader = Box<dyn Fn() -> (u64, u64) + Send + Sync>;

/// The byte counters, and the sessions whose bytes are still moving: a scrape adds what each
/// running session has moved so far to what ended sessions moved, all under one lock, so a
/// session ending between two scrapes never makes a counter go back.
#[derive(Default)]
struct Bytes {
    received: [u64; 4],
    sent: [u64; 4],
    /// Running sessions that said how to read their bytes, by their [`Active`] number.
    live: BTreeMap<u64, (usize, Reader)>,
    keys: BTreeMap<String, KeyBytes>,
}

impl std::fmt::Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bytes")
            .field("received", &self.received)
            .field("sent", &self.sent)
            .field("live", &self.live.len())
            .finish_non_exhaustive()
    }
}

/// Upper bounds of the buckets of `linerate_mesh_transaction_latency_seconds`, nanoseconds:
/// 10 µs to 1 s in the 1, 2.5, 5 steps of Prometheus's default buckets, moved down from theirs
/// (5 ms to 10 s, for web requests) to the round trips a mesh measures, from a rack's tens of
/// microseconds to a continent's hundreds of milliseconds; a slower transaction counts in `+Inf`
/// alone. Fixed, so that every agent's series add up and `histogram_quantile` can merge them.
pub const LATENCY_BUCKETS_NS: [u64; 16] = [
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
];

/// Transaction latencies in the buckets of [`LATENCY_BUCKETS_NS`]: what one test measured, or
/// a pair's sum over every round this agent ran it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LatencyBuckets {
    /// Transactions at or below each bound (cumulative, as Prometheus's `le`).
    pub at_or_below: [u64; LATENCY_BUCKETS_NS.len()],
    /// Their latencies' sum, seconds.
    pub sum_s: f64,
    /// Transactions in all (the `+Inf` bucket).
    pub count: u64,
}

impl LatencyBuckets {
    /// The buckets of one test's latency histogram (nanoseconds), counted by the histogram
    /// itself (`count_between`): a transaction within its resolution (3 significant digits) of
    /// a bound counts at or below it. The sum is its mean times its count.
    pub fn of(h: &Histogram<u64>) -> LatencyBuckets {
        let mut at_or_below = [0; LATENCY_BUCKETS_NS.len()];
        for (n, bound) in at_or_below.iter_mut().zip(LATENCY_BUCKETS_NS) {
            *n = h.count_between(0, bound);
        }
        LatencyBuckets { at_or_below, sum_s: h.mean() * h.len() as f64 / 1e9, count: h.len() }
    }

    /// Another round's transactions added.
    fn add(&mut self, other: &LatencyBuckets) {
        for (n, o) in self.at_or_below.iter_mut().zip(other.at_or_below) {
            *n = n.saturating_add(o);
        }
        self.sum_s += other.sum_s;
        self.count = self.count.saturating_add(other.count);
    }

    /// As a metric of the text format's histogram type, labelled `labels` (sorted by name).
    fn metric(&self, labels: &[(&str, &str)]) -> Metric {
        let buckets = self
            .at_or_below
            .iter()
            .zip(LATENCY_BUCKETS_NS)
            .map(|(n, bound)| {
                let mut b = Bucket::default();
                b.set_upper_bound(bound as f64 / 1e9);
                b.set_cumulative_count(*n);
                b
            })
            .collect();
        let mut h = prometheus::proto::Histogram::default();
        h.set_bucket(buckets);
        h.set_sample_count(self.count);
        h.set_sample_sum(self.sum_s);
        let mut m = Metric::default();
        m.set_label(
            labels
                .iter()
                .map(|(k, v)| {
                    let mut l = LabelPair::default();
                    l.set_name((*k).to_string());
                    l.set_value((*v).to_string());
                    l
                })
                .collect(),
        );
        m.set_histogram(h);
        m
    }
}

/// A metric family written out whole (the mesh's latency histograms, whose counts come from
/// HDR histograms rather than from `observe` calls), registered as any other so that its name
/// is checked against the rest.
struct Family {
    desc: Desc,
    family: MetricFamily,
}

impl Collector for Family {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        vec![self.family.clone()]
    }
}

/// The last mesh result of one (test, peer) pair this agent measured from.
#[derive(Debug, Clone)]
struct PairResult {
    /// This agent's inventory name, when the controller gave it.
    agent: String,
    /// Unix seconds when it arrived.
    at: f64,
    /// The figures, when the test ran (none: the peer was unreachable or the test failed).
    report: Option<MeshReport>,
    /// The transactions of every round of this pair's test that ran and timed some (none
    /// before the first such round).
    latency: Option<LatencyBuckets>,
}

/// The agent's counters.
#[derive(Debug)]
pub struct Metrics {
    started: Instant,
    active: [AtomicU64; 4],
    ok: [AtomicU64; 4],
    failed: [AtomicU64; 4],
    files_received: AtomicU64,
    files_sent: AtomicU64,
    refused: [AtomicU64; 7],
    handshake_failures: AtomicU64,
    next_active: AtomicU64,
    bytes: Mutex<Bytes>,
    /// By (test, peer): the inventory's names, or the kind and the address from an older
    /// controller.
    mesh: Mutex<BTreeMap<(String, String), PairResult>>,
    /// The mesh's configured time between rounds, seconds, as its last task said.
    mesh_interval: Mutex<Option<u64>>,
}

/// A running session: counted active until it ends or is dropped.
#[must_use]
pub struct Active<'a> {
    m: &'a Metrics,
    kind: usize,
    id: u64,
}

impl Active<'_> {
    /// Count the bytes `read` returns (received, sent: totals so far, never going back) as
    /// this session's while it runs: each scrape reads them.
    pub fn watch(&self, read: impl Fn() -> (u64, u64) + Send + Sync + 'static) {
        self.m.bytes().live.insert(self.id, (self.kind, Box::new(read)));
    }

    /// The session ended: counted by its result, its bytes the larger of what it says it moved
    /// and what was last read of it (an aborted copy says 0 but moved what was read).
    pub fn end(self, e: &Ended) {
        let m = self.m;
        let i = self.kind;
        if e.ok { &m.ok[i] } else { &m.failed[i] }.fetch_add(1, Relaxed);
        m.files_received.fetch_add(e.received.1, Relaxed);
        m.files_sent.fetch_add(e.sent.1, Relaxed);
        let mut b = m.bytes();
        let (r, s) = b.live.remove(&self.id).map_or((0, 0), |(_, read)| read());
        let (r, s) = (r.max(e.received.0), s.max(e.sent.0));
        b.received[i] += r;
        b.sent[i] += s;
        // Per key: copies' file bytes only.
        if let (Some((fp, name)), true) = (&e.key, matches!(KINDS[i].0, Kind::Push | Kind::Pull)) {
            let slot = if b.keys.contains_key(fp) || b.keys.len() < MAX_KEYS { fp.clone() } else { "other".into() };
            let k = b.keys.entry(slot).or_default();
            k.name = label(name);
            k.received += r;
            k.sent += s;
        }
    }
}

impl Drop for Active<'_> {
    fn drop(&mut self) {
        // Bytes of a session that ended without `end` stay counted.
        let mut b = self.m.bytes();
        if let Some((i, read)) = b.live.remove(&self.id) {
            let (r, s) = read();
            b.received[i] += r;
            b.sent[i] += s;
        }
        drop(b);
        self.m.active[self.kind].fetch_sub(1, Relaxed);
    }
}

/// How a session ended, for [`Active::end`].
#[derive(Debug, Clone, Default)]
pub struct Ended {
    /// It completed.
    pub ok: bool,
    /// Bytes and files this agent received.
    pub received: (u64, u64),
    /// Bytes and files this agent sent.
    pub sent: (u64, u64),
    /// The authenticated key: its fingerprint and comment.
    pub key: Option<(String, String)>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            started: Instant::now(),
            active: Default::default(),
            ok: Default::default(),
            failed: Default::default(),
            files_received: AtomicU64::new(0),
            files_sent: AtomicU64::new(0),
            refused: Default::default(),
            handshake_failures: AtomicU64::new(0),
            next_active: AtomicU64::new(0),
            bytes: Mutex::default(),
            mesh: Mutex::default(),
            mesh_interval: Mutex::default(),
        }
    }
}

fn idx(k: Kind) -> usize {
    KINDS.iter().position(|(x, _)| *x == k).unwrap_or(0)
}

/// A label value: control characters but line breaks dropped, at most 64 characters (the
/// encoder escapes `\`, `"` and line breaks).
fn label(s: &str) -> String {
    s.chars().filter(|c| !c.is_control() || *c == '\n').take(64).collect()
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

impl Metrics {
    fn bytes(&self) -> std::sync::MutexGuard<'_, Bytes> {
        self.bytes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A session of `kind` starts.
    pub fn active(&self, kind: Kind) -> Active<'_> {
        let kind = idx(kind);
        self.active[kind].fetch_add(1, Relaxed);
        Active { m: self, kind, id: self.next_active.fetch_add(1, Relaxed) }
    }

    /// A connection was refused with `code` (before or at authentication).
    pub fn refused(&self, code: ErrorCode) {
        self.refused[reason(code)].fetch_add(1, Relaxed);
    }

    /// A handshake failed (a bad preamble, a timeout; a failed proof is `refused(Auth)`).
    pub fn handshake_failed(&self) {
        self.handshake_failures.fetch_add(1, Relaxed);
    }

    /// A mesh task this agent ran came back with `outcome` (or was recorded as failed): it
    /// replaces the pair's last result, and the transactions `latency` timed (the test's
    /// histogram, nanoseconds) join the pair's over the earlier rounds; a test that did not run
    /// adds none. The pair is named by the inventory's test and peer names the task carries
    /// (issue 43), else the kind and the peer's address. At most [`MAX_PAIRS`] pairs are kept; a
    /// new one beyond them is not.
    pub fn mesh_result(&self, task: &MeshTask, outcome: &MeshOutcome, latency: Option<&Histogram<u64>>) {
        let report = match outcome {
            MeshOutcome::Done(r) => Some(r.clone()),
            MeshOutcome::PeerUnreachable { .. } | MeshOutcome::Failed { .. } => None,
        };
        let timed = latency.filter(|h| report.is_some() && !h.is_empty()).map(LatencyBuckets::of);
        if let Some(i) = task.interval_s {
            *self.mesh_interval.lock().unwrap_or_else(PoisonError::into_inner) = Some(i);
        }
        let (test, agent, peer) = match &task.names {
            Some(n) => (n.test.as_str(), n.agent.as_str(), n.peer.as_str()),
            None => (task.test.kind.name(), "", task.peer.as_str()),
        };
        let mut mesh = self.mesh.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (label(test), label(peer));
        if mesh.len() < MAX_PAIRS || mesh.contains_key(&key) {
            let mut latency = mesh.get(&key).and_then(|p| p.latency.clone());
            if let Some(t) = &timed {
                latency.get_or_insert_with(LatencyBuckets::default).add(t);
            }
            mesh.insert(key, PairResult { agent: label(agent), at: unix_now(), report, latency });
        }
    }

    /// Everything, in the text format; `paced_bps` is the rate the agent's pacing allows now
    /// over all paced sessions, if it paces.
    pub fn render(&self, paced_bps: Option<u64>) -> String {
        // Only a duplicate or malformed name fails, which the unit tests would show.
        self.families(paced_bps).map_or_else(|e| format!("# error: {e}\n"), |r| encode(&r))
    }

    /// A registry holding a reading of every counter.
    fn families(&self, paced_bps: Option<u64>) -> prometheus::Result<Registry> {
        let r = Registry::new();
        let load = |a: &AtomicU64| a.load(Relaxed);
        let gauges = |name: &str, help: &str, labels: &[&str]| -> prometheus::Result<IntGaugeVec> {
            let g = IntGaugeVec::new(Opts::new(name, help), labels)?;
            r.register(Box::new(g.clone()))?;
            Ok(g)
        };
        let counters = |name: &str, help: &str, labels: &[&str]| -> prometheus::Result<IntCounterVec> {
            let c = IntCounterVec::new(Opts::new(name, help), labels)?;
            r.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let active = gauges("linerate_sessions_active", "Sessions running now, by kind.", &["kind"])?;
        let total = counters("linerate_sessions_total", "Sessions ended, by kind and result.", &["kind", "result"])?;
        let received = counters(
            "linerate_received_bytes_total",
            "Bytes received, by kind (file bytes of copies, payload of benchmarks), running sessions included.",
            &["kind"],
        )?;
        let sent = counters(
            "linerate_sent_bytes_total",
            "Bytes sent, by kind (file bytes of copies, payload of benchmarks), running sessions included.",
            &["kind"],
        )?;
        let (bytes_received, bytes_sent, keys) = {
            let b = self.bytes();
            let (mut rx, mut tx) = (b.received, b.sent);
            for (i, read) in b.live.values() {
                let (r, s) = read();
                rx[*i] += r;
                tx[*i] += s;
            }
            let keys: Vec<(String, String, u64, u64)> =
                b.keys.iter().map(|(fp, k)| (label(fp), k.name.clone(), k.received, k.sent)).collect();
            (rx, tx, keys)
        };
        for (k, n) in KINDS {
            let i = idx(k);
            active.with_label_values(&[n]).set(i64::try_from(load(&self.active[i])).unwrap_or(i64::MAX));
            total.with_label_values(&[n, "ok"]).inc_by(load(&self.ok[i]));
            total.with_label_values(&[n, "error"]).inc_by(load(&self.failed[i]));
            received.with_label_values(&[n]).inc_by(bytes_received[i]);
            sent.with_label_values(&[n]).inc_by(bytes_sent[i]);
        }
        let files = counters("linerate_files_total", "Files received and sent.", &["direction"])?;
        files.with_label_values(&["received"]).inc_by(load(&self.files_received));
        files.with_label_values(&["sent"]).inc_by(load(&self.files_sent));
        let refused = counters("linerate_refused_connections_total", "Connections refused, by reason.", &["reason"])?;
        for (i, why) in REASONS.iter().enumerate() {
            refused.with_label_values(&[why]).inc_by(load(&self.refused[i]));
        }
        let failures = IntCounter::new(
            "linerate_handshake_failures_total",
            "Handshakes that failed otherwise than by a refusal (bad preamble, timeout).",
        )?;
        failures.inc_by(load(&self.handshake_failures));
        r.register(Box::new(failures))?;
        let per_key = counters(
            "linerate_key_bytes_total",
            "File bytes by authorized key (daemon mode).",
            &["key", "name", "direction"],
        )?;
        for (fp, name, rx, tx) in &keys {
            per_key.with_label_values(&[fp.as_str(), name, "received"]).inc_by(*rx);
            per_key.with_label_values(&[fp.as_str(), name, "sent"]).inc_by(*tx);
        }
        self.mesh_families(&r)?;
        if let Some(p) = paced_bps {
            let g = IntGauge::new("linerate_paced_rate_bits", "Rate the agent's pacing allows now, bit/s.")?;
            g.set(i64::try_from(p).unwrap_or(i64::MAX));
            r.register(Box::new(g))?;
        }
        let cpu = resources::process();
        let c = Counter::new("process_cpu_seconds_total", "User and system CPU time of the agent.")?;
        c.inc_by((cpu.user_us + cpu.sys_us) as f64 / 1e6);
        r.register(Box::new(c))?;
        let rss = IntGauge::new("process_resident_memory_bytes", "Resident memory of the agent.")?;
        rss.set(i64::try_from(resources::rss()).unwrap_or(i64::MAX));
        r.register(Box::new(rss))?;
        let up = Gauge::new("linerate_uptime_seconds", "Seconds since the agent started.")?;
        up.set(self.started.elapsed().as_secs_f64());
        r.register(Box::new(up))?;
        gauges("linerate_build_info", "The agent's version.", &["version"])?
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        Ok(r)
    }

    /// The last mesh result of each pair, as gauges labelled by `test` and `peer` (no series
    /// until this agent ran a mesh test).
    fn mesh_families(&self, r: &Registry) -> prometheus::Result<()> {
        let gauges = |name: &str, help: &str, labels: &[&str]| -> prometheus::Result<GaugeVec> {
            let g = GaugeVec::new(Opts::new(name, help), labels)?;
            r.register(Box::new(g.clone()))?;
            Ok(g)
        };
        let mesh = self.mesh.lock().unwrap_or_else(PoisonError::into_inner).clone();
        if mesh.is_empty() {
            return Ok(());
        }
        if let Some(i) = *self.mesh_interval.lock().unwrap_or_else(PoisonError::into_inner) {
            let g = prometheus::Gauge::new(
                "linerate_mesh_interval_seconds",
                "The mesh's configured time between rounds (the inventory's interval), as its last task said.",
            )?;
            r.register(Box::new(g.clone()))?;
            g.set(i as f64);
        }
        let l = &["test", "agent", "peer"];
        let at = gauges("linerate_mesh_result_timestamp_seconds", "Unix time the pair's last mesh result arrived.", l)?;
        let age = gauges("linerate_mesh_result_age_seconds", "Seconds since the pair's last mesh result arrived.", l)?;
        let up = gauges(
            "linerate_mesh_up",
            "1 if the pair's last mesh test ran, 0 if it failed, the peer was unreachable or the controller found it down.",
            l,
        )?;
        let tput = gauges("linerate_mesh_throughput_bits", "Goodput of the pair's last mesh test, bit/s.", l)?;
        let rtt = gauges("linerate_mesh_rtt_seconds", "Mean smoothed TCP round trip of the pair's last mesh test.", l)?;
        let lat = gauges(
            "linerate_mesh_latency_seconds",
            "Round-trip latency of the pair's last mesh test (tcp-rr), by quantile.",
            &["test", "agent", "peer", "quantile"],
        )?;
        let loss = gauges("linerate_mesh_loss_ratio", "Datagram loss of the pair's last mesh test (udp), 0 to 1.", l)?;
        let name = "linerate_mesh_transaction_latency_seconds";
        let help = "Transaction latency (request to response) of the pair's mesh tests over every round that ran, \
                    counted from each test's HDR histogram.";
        let mut histograms = Vec::new();
        let now = unix_now();
        for ((test, peer), p) in &mesh {
            let v = [test.as_str(), p.agent.as_str(), peer.as_str()];
            if let Some(b) = &p.latency {
                histograms.push(b.metric(&[("agent", &p.agent), ("peer", peer), ("test", test)]));
            }
            at.with_label_values(&v).set(p.at);
            age.with_label_values(&v).set((now - p.at).max(0.0));
            up.with_label_values(&v).set(if p.report.is_some() { 1.0 } else { 0.0 });
            let Some(rep) = &p.report else { continue };
            tput.with_label_values(&v).set(rep.throughput_bps);
            if let Some(us) = rep.rtt_us {
                rtt.with_label_values(&v).set(us / 1e6);
            }
            if let Some(l) = &rep.latency_us {
                lat.with_label_values(&[test, &p.agent, peer, "0.5"]).set(l.p50 / 1e6);
                lat.with_label_values(&[test, &p.agent, peer, "0.99"]).set(l.p99 / 1e6);
            }
            if let Some(pct) = rep.loss_pct {
                loss.with_label_values(&v).set(pct / 100.0);
            }
        }
        if !histograms.is_empty() {
            let labels = l.iter().map(|k| (*k).to_string()).collect();
            let desc = Desc::new(name.into(), help.into(), labels, Default::default())?;
            let mut family = MetricFamily::default();
            family.set_name(name.into());
            family.set_help(help.into());
            family.set_field_type(MetricType::HISTOGRAM);
            family.set_metric(histograms);
            r.register(Box::new(Family { desc, family }))?;
        }
        Ok(())
    }
}

/// The text format of everything `r` holds.
fn encode(r: &Registry) -> String {
    let mut out = String::new();
    match prometheus::TextEncoder::new().encode_utf8(&r.gather(), &mut out) {
        Ok(()) => out,
        Err(e) => format!("# error: {e}\n"),
    }
}

/// The answer to one request's bytes (as much of its head as arrived): status line, headers
/// and body. `GET /metrics` is answered with `body`, another path with 404, another method with
/// 405, anything that is not an HTTP/1.x request line with 400.
pub fn answer(request: &[u8], body: impl FnOnce() -> String) -> Vec<u8> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    // A head cut short (the client closed, the cap, the deadline) is answered by its request
    // line, when that arrived whole.
    let parsed = req.parse(request);
    let line_whole = match parsed {
        Ok(_) => true,
        Err(httparse::Error::TooManyHeaders) => true,
        Err(_) => false,
    };
    let (status, ctype, text) = match (line_whole, req.method, req.path, req.version) {
        (true, Some("GET"), Some("/metrics"), Some(_)) => {
            ("200 OK", "text/plain; version=0.0.4; charset=utf-8", body())
        }
        (true, Some("GET"), Some(_), Some(_)) => ("404 Not Found", "text/plain", "only /metrics is here\n".to_string()),
        (true, Some(_), Some(_), Some(_)) => ("405 Method Not Allowed", "text/plain", "GET /metrics\n".to_string()),
        _ => ("400 Bad Request", "text/plain", "GET /metrics\n".to_string()),
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        text.len()
    )
    .into_bytes();
    out.extend_from_slice(text.as_bytes());
    out
}

/// Requests served at once; more are closed unanswered.
pub const MAX_CLIENTS: usize = 32;
/// Requests served at once from one address: slow clients from one place cannot hold a
/// scrape from another.
pub const MAX_CLIENTS_PER_SOURCE: usize = 4;

fn serve_one(mut c: TcpStream, body: &dyn Fn() -> String, timeout: Duration) {
    let _ = c.set_write_timeout(Some(timeout));
    let deadline = Instant::now() + timeout;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    // Read until the end of the head, the cap, or the deadline for the whole request.
    let whole = |b: &[u8]| {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        !matches!(httparse::Request::new(&mut headers).parse(b), Ok(httparse::Status::Partial))
    };
    while !whole(&buf) && buf.len() < MAX_REQUEST {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || c.set_read_timeout(Some(left)).is_err() {
            break;
        }
        match c.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n.min(MAX_REQUEST - buf.len())]),
        }
    }
    if buf.is_empty() {
        return;
    }
    let _ = c.write_all(&answer(&buf, body));
}

/// Serves `GET /metrics` on `listener` until `shutdown`, each request on a thread of its own
/// ([`MAX_CLIENTS`] at once, [`MAX_CLIENTS_PER_SOURCE`] from one address), each with
/// [`IO_TIMEOUT`] to arrive whole and as long to be taken.
pub fn spawn_http(
    listener: TcpListener,
    body: Arc<dyn Fn() -> String + Send + Sync>,
    shutdown: Shutdown,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let acceptor = Acceptor::new(listener)?;
    acceptor.wake_on(&shutdown);
    Ok(std::thread::spawn(move || serve_http(acceptor, &body, IO_TIMEOUT, &shutdown)))
}

fn serve_http(
    mut acceptor: Acceptor,
    body: &Arc<dyn Fn() -> String + Send + Sync>,
    timeout: Duration,
    shutdown: &Shutdown,
) {
    // The per-source caps are the server's admission's (`linerate_proto::admit`), one
    // implementation for both listeners.
    let busy = Arc::new(Mutex::new(SourceSlots::new(MAX_CLIENTS, MAX_CLIENTS_PER_SOURCE)));
    while !shutdown.is_stopped() {
        let (c, peer) = match acceptor.next(None) {
            Accepted::Conn(c, peer) => (c, peer),
            Accepted::Woken | Accepted::Timeout => continue,
        };
        let ip = peer.ip();
        if busy.lock().unwrap_or_else(PoisonError::into_inner).take(ip).is_err() {
            continue; // closed unanswered
        }
        let (body, busy) = (body.clone(), busy.clone());
        std::thread::spawn(move || {
            serve_one(c, &*body, timeout);
            busy.lock().unwrap_or_else(PoisonError::into_inner).give_back(ip);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_render_in_the_text_format() {
        let m = Metrics::default();
        let a = m.active(Kind::Push);
        assert!(m.render(None).contains("linerate_sessions_active{kind=\"push\"} 1"));
        a.end(&Ended {
            ok: true,
            received: (1000, 3),
            key: Some(("SHA256:abc".into(), "al\"ice\n".into())),
            ..Default::default()
        });
        m.active(Kind::Pull).end(&Ended { ok: false, sent: (10, 1), ..Default::default() });
        m.refused(ErrorCode::Auth);
        m.refused(ErrorCode::Version);
        m.handshake_failed();
        let t = m.render(Some(8_000_000));
        for want in [
            "linerate_sessions_active{kind=\"push\"} 0",
            "linerate_sessions_total{kind=\"push\",result=\"ok\"} 1",
            "linerate_sessions_total{kind=\"pull\",result=\"error\"} 1",
            "linerate_received_bytes_total{kind=\"push\"} 1000",
            "linerate_files_total{direction=\"received\"} 3",
            "linerate_refused_connections_total{reason=\"auth\"} 1",
            "linerate_refused_connections_total{reason=\"version\"} 1",
            "linerate_handshake_failures_total 1",
            "linerate_key_bytes_total{direction=\"received\",key=\"SHA256:abc\",name=\"al\\\"ice\\n\"} 1000",
            "linerate_paced_rate_bits 8000000",
            "# TYPE process_cpu_seconds_total counter",
            "linerate_build_info{version=",
        ] {
            assert!(t.contains(want), "{want} not in\n{t}");
        }
        // every sample line is NAME{...} VALUE or NAME VALUE
        for l in t.lines().filter(|l| !l.starts_with('#')) {
            let v = l.rsplit(' ').next().unwrap();
            assert!(v.parse::<f64>().is_ok(), "{l}");
        }
    }

    #[test]
    fn keys_beyond_the_cap_share_one_series() {
        let m = Metrics::default();
        for i in 0..MAX_KEYS + 10 {
            m.active(Kind::Push).end(&Ended {
                ok: true,
                received: (1, 0),
                key: Some((format!("k{i}"), String::new())),
                ..Default::default()
            });
        }
        let t = m.render(None);
        assert_eq!(t.matches("direction=\"received\"").count() - 1, MAX_KEYS + 1, "the cap, and `other`");
        assert!(t.contains("{direction=\"received\",key=\"other\",name=\"\"} 10"), "{t}");
    }

    #[test]
    fn running_sessions_count_their_bytes_and_counters_never_go_back() {
        let m = Metrics::default();
        let moved = Arc::new(AtomicU64::new(0));
        let value = |t: &str, series: &str| -> u64 {
            let l = t.lines().find(|l| l.starts_with(series)).unwrap_or_else(|| panic!("{series} not in\n{t}"));
            l.rsplit(' ').next().unwrap().parse().unwrap()
        };
        let push = m.active(Kind::Push);
        push.watch({
            let n = moved.clone();
            move || (n.load(Relaxed), 0)
        });
        let bench = m.active(Kind::Bench);
        bench.watch(|| (7, 9));
        moved.store(4096, Relaxed);
        let t = m.render(None);
        assert_eq!(value(&t, "linerate_received_bytes_total{kind=\"push\"}"), 4096, "mid-copy");
        assert_eq!(value(&t, "linerate_received_bytes_total{kind=\"bench\"}"), 7);
        assert_eq!(value(&t, "linerate_sent_bytes_total{kind=\"bench\"}"), 9);
        // An aborted copy says it received nothing: what was read of it stays counted.
        moved.store(5000, Relaxed);
        push.end(&Ended { ok: false, ..Default::default() });
        let t = m.render(None);
        assert_eq!(value(&t, "linerate_received_bytes_total{kind=\"push\"}"), 5000);
        assert_eq!(value(&t, "linerate_sessions_active{kind=\"push\"}"), 0);
        // A complete copy counts what it says when that is more than its live reading.
        let p = m.active(Kind::Push);
        p.watch(|| (10, 0));
        p.end(&Ended { ok: true, received: (100, 1), ..Default::default() });
        // A session dropped without `end` keeps its bytes.
        drop(bench);
        let t = m.render(None);
        assert_eq!(value(&t, "linerate_received_bytes_total{kind=\"push\"}"), 5100);
        assert_eq!(value(&t, "linerate_sent_bytes_total{kind=\"bench\"}"), 9);
        assert_eq!(value(&t, "linerate_sessions_active{kind=\"bench\"}"), 0);
    }

    /// A mesh task to `peer` for test `test`: named as the inventory names them (issue 43) when
    /// `test` is not a kind, else as an older controller sends it.
    fn task(test: &str, peer: &str) -> MeshTask {
        use linerate_proto::bench::{TestKind, TestSpec};
        use linerate_proto::mesh::MeshNames;
        let kind = [TestKind::TcpStream, TestKind::TcpRr, TestKind::UdpStream].into_iter().find(|k| k.name() == test);
        MeshTask {
            version: 1,
            peer: format!("{peer}:7878"),
            peer_host_key: String::new(),
            test: TestSpec::new(kind.unwrap_or(TestKind::TcpRr)),
            names: kind.is_none().then(|| MeshNames { test: test.into(), agent: "a".into(), peer: peer.into() }),
            interval_s: kind.is_none().then_some(3600),
            failed: None,
        }
    }

    #[test]
    fn the_last_mesh_result_of_each_pair_is_exported() {
        use linerate_proto::mesh::{MeshLatency, MESH_DOC_VERSION};
        let m = Metrics::default();
        assert!(!m.render(None).contains("linerate_mesh_"), "no mesh series before a mesh test");
        let report = MeshReport {
            version: MESH_DOC_VERSION,
            started_unix_s: 0,
            seconds: 5.0,
            throughput_bps: 9.5e9,
            retransmits: 0,
            rtt_us: Some(40.0),
            latency_us: None,
            transactions_per_s: None,
            loss_pct: None,
            cpu_busy: (0.1, 0.1),
            spread: None,
        };
        m.mesh_result(&task("tcp-stream", "10.0.0.2"), &MeshOutcome::Done(report.clone()), None);
        let rr = MeshReport { latency_us: Some(MeshLatency { p50: 30.0, p99: 50.0 }), ..report.clone() };
        m.mesh_result(&task("tcp-rr", "10.0.0.2"), &MeshOutcome::Done(rr.clone()), None);
        let udp = MeshReport { loss_pct: Some(2.5), ..report };
        m.mesh_result(&task("udp-stream", "10.0.0.3"), &MeshOutcome::Done(udp), None);
        m.mesh_result(
            &task("tcp-stream", "10.0.0.3"),
            &MeshOutcome::Done(MeshReport { throughput_bps: 1.0, ..report_of(&m) }),
            None,
        );
        m.mesh_result(
            &task("tcp-stream", "10.0.0.3"),
            &MeshOutcome::PeerUnreachable { message: "refused".into() },
            None,
        );
        let t = m.render(None);
        for want in [
            "linerate_mesh_throughput_bits{agent=\"\",peer=\"10.0.0.2:7878\",test=\"tcp-stream\"} 9500000000",
            "linerate_mesh_rtt_seconds{agent=\"\",peer=\"10.0.0.2:7878\",test=\"tcp-stream\"} 0.00004",
            "linerate_mesh_latency_seconds{agent=\"\",peer=\"10.0.0.2:7878\",quantile=\"0.99\",test=\"tcp-rr\"} 0.00005",
            "linerate_mesh_loss_ratio{agent=\"\",peer=\"10.0.0.3:7878\",test=\"udp-stream\"} 0.025",
            "linerate_mesh_up{agent=\"\",peer=\"10.0.0.2:7878\",test=\"tcp-stream\"} 1",
            // the last result replaces the one before: unreachable now, and no stale figure
            "linerate_mesh_up{agent=\"\",peer=\"10.0.0.3:7878\",test=\"tcp-stream\"} 0",
            "linerate_mesh_result_age_seconds{agent=\"\",peer=\"10.0.0.3:7878\",test=\"tcp-stream\"} ",
            "linerate_mesh_result_timestamp_seconds{agent=\"\",peer=\"10.0.0.3:7878\",test=\"tcp-stream\"} ",
        ] {
            assert!(t.contains(want), "{want} not in\n{t}");
        }
        assert!(
            !t.contains("linerate_mesh_throughput_bits{agent=\"\",peer=\"10.0.0.3:7878\",test=\"tcp-stream\"}"),
            "{t}"
        );
        assert!(!t.contains("linerate_mesh_interval_seconds"), "no interval before a task says it");
        // Issue 43: two tests of one kind are two series, named as the inventory names the test
        // and the agents; the interval is exported; a pair recorded as failed is down.
        m.mesh_result(&task("rtt", "ams-2"), &MeshOutcome::Done(rr.clone()), None);
        m.mesh_result(&task("rtt-loaded", "ams-2"), &MeshOutcome::Done(rr), None);
        m.mesh_result(&task("tput", "ams-2"), &MeshOutcome::Failed { message: "agent down: ams-2".into() }, None);
        let t = m.render(None);
        for want in [
            "linerate_mesh_latency_seconds{agent=\"a\",peer=\"ams-2\",quantile=\"0.5\",test=\"rtt\"} 0.00003",
            "linerate_mesh_latency_seconds{agent=\"a\",peer=\"ams-2\",quantile=\"0.5\",test=\"rtt-loaded\"} 0.00003",
            "linerate_mesh_up{agent=\"a\",peer=\"ams-2\",test=\"tput\"} 0",
            "linerate_mesh_interval_seconds 3600",
        ] {
            assert!(t.contains(want), "{want} not in\n{t}");
        }
        // pairs beyond the cap get no series
        for i in 0..MAX_PAIRS + 5 {
            m.mesh_result(&task("tcp-rr", &format!("h{i}")), &MeshOutcome::Failed { message: String::new() }, None);
        }
        assert_eq!(m.render(None).matches("linerate_mesh_up{").count(), MAX_PAIRS);
    }

    /// Issue 43: a pair's transactions as a Prometheus histogram, counted from the test's HDR
    /// histogram: cumulative buckets, `+Inf` and `_count` the number of transactions, `_sum`
    /// their latencies; a second round adds to the first (counters that never go back); a
    /// failed round, a stream test and an empty histogram add nothing.
    #[test]
    fn a_pairs_transactions_are_a_histogram_accumulated_over_rounds() {
        use linerate_proto::mesh::{MeshLatency, MESH_DOC_VERSION};
        let report = MeshReport {
            version: MESH_DOC_VERSION,
            started_unix_s: 0,
            seconds: 1.0,
            throughput_bps: 1e6,
            retransmits: 0,
            rtt_us: None,
            latency_us: Some(MeshLatency { p50: 30.0, p99: 300.0 }),
            transactions_per_s: Some(1e4),
            loss_pct: None,
            cpu_busy: (0.1, 0.1),
            spread: None,
        };
        // 30 µs ×100, 70 µs ×50, 300 µs ×9, 2 s ×1 (beyond the last bound).
        let mut h = linerate_bench::new_histogram();
        h.record_n(30_000, 100).unwrap();
        h.record_n(70_000, 50).unwrap();
        h.record_n(300_000, 9).unwrap();
        h.record(2_000_000_000).unwrap();
        let b = LatencyBuckets::of(&h);
        assert_eq!(b.at_or_below, [0, 0, 100, 150, 150, 159, 159, 159, 159, 159, 159, 159, 159, 159, 159, 159]);
        assert_eq!(b.count, 160);
        let sum = 100.0 * 30e-6 + 50.0 * 70e-6 + 9.0 * 300e-6 + 2.0;
        assert!((b.sum_s - sum).abs() < sum * 1e-3, "{} against {sum}", b.sum_s);

        let m = Metrics::default();
        let done = MeshOutcome::Done(report.clone());
        m.mesh_result(&task("rtt", "b"), &done, Some(&h));
        let series = |t: &str, suffix: &str| -> Vec<(String, f64)> {
            let head =
                format!("linerate_mesh_transaction_latency_seconds{suffix}{{agent=\"a\",peer=\"b\",test=\"rtt\"");
            t.lines()
                .filter(|l| l.starts_with(&head))
                .map(|l| {
                    let (k, v) = l.rsplit_once(' ').unwrap();
                    (k[head.len()..].to_string(), v.parse().unwrap())
                })
                .collect()
        };
        let t = m.render(None);
        assert!(t.contains("# TYPE linerate_mesh_transaction_latency_seconds histogram"), "{t}");
        let first = series(&t, "_bucket");
        let le: Vec<&str> = first.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(le.len(), LATENCY_BUCKETS_NS.len() + 1, "{le:?}");
        assert_eq!(
            (le[0], le[2], le[15], le[16]),
            (",le=\"0.00001\"}", ",le=\"0.00005\"}", ",le=\"1\"}", ",le=\"+Inf\"}")
        );
        let counts: Vec<f64> = first.iter().map(|(_, v)| *v).collect();
        assert_eq!(&counts[..6], [0.0, 0.0, 100.0, 150.0, 150.0, 159.0]);
        assert_eq!((counts[15], counts[16]), (159.0, 160.0), "+Inf is every transaction");
        assert_eq!(series(&t, "_count"), [("}".to_string(), 160.0)]);

        // A second round adds to the first; a failed round and a stream test's none add nothing.
        let mut h2 = linerate_bench::new_histogram();
        h2.record_n(20_000, 10).unwrap();
        m.mesh_result(&task("rtt", "b"), &done, Some(&h2));
        m.mesh_result(&task("rtt", "b"), &MeshOutcome::Failed { message: "refused".into() }, Some(&h2));
        m.mesh_result(&task("rtt", "b"), &done, Some(&linerate_bench::new_histogram()));
        m.mesh_result(&task("tput", "b"), &done, None);
        let t = m.render(None);
        let second: Vec<f64> = series(&t, "_bucket").iter().map(|(_, v)| *v).collect();
        assert_eq!(&second[..6], [0.0, 10.0, 110.0, 160.0, 160.0, 169.0]);
        assert!(second.iter().zip(&counts).all(|(b, a)| b >= a), "counters never go back: {counts:?} then {second:?}");
        assert!(second.windows(2).all(|w| w[0] <= w[1]), "cumulative: {second:?}");
        assert_eq!(series(&t, "_count"), [("}".to_string(), 170.0)]);
        let sum2 = series(&t, "_sum")[0].1;
        assert!((sum2 - (sum + 10.0 * 20e-6)).abs() < sum * 1e-3, "{sum2}");
        // the last round ran without a transaction: the pair is up, its histogram as it was
        assert!(t.contains("linerate_mesh_up{agent=\"a\",peer=\"b\",test=\"rtt\"} 1"), "{t}");
        assert!(!t.contains("linerate_mesh_transaction_latency_seconds_count{agent=\"a\",peer=\"b\",test=\"tput\"}"));
    }

    /// Any stored report of `m` (the test above stores one first).
    fn report_of(m: &Metrics) -> MeshReport {
        m.mesh.lock().unwrap().values().find_map(|p| p.report.clone()).unwrap()
    }

    #[test]
    fn requests_get_the_right_answers() {
        let body = || "m 1\n".to_string();
        let ok = String::from_utf8(answer(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", body)).unwrap();
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n") && ok.contains("version=0.0.4") && ok.ends_with("\r\n\r\nm 1\n"));
        for (req, status) in [
            (&b"GET / HTTP/1.1\r\n\r\n"[..], "404"),
            (b"POST /metrics HTTP/1.1\r\n\r\n", "405"),
            (b"\x16\x03\x01garbage", "400"),
            (b"GET /metrics\r\n", "400"),
        ] {
            let a = String::from_utf8(answer(req, body)).unwrap();
            assert!(a.starts_with(&format!("HTTP/1.1 {status}")), "{a}");
        }
    }

    #[test]
    fn the_endpoint_answers_beside_a_silent_client_and_cuts_an_oversized_request() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let stop = linerate_model::shutdown::Stopper::new();
        let server = spawn_http(l, Arc::new(|| "linerate_up 1\n".to_string()), stop.shutdown()).unwrap();
        let _silent = TcpStream::connect(addr).unwrap(); // says nothing
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut got = String::new();
        c.read_to_string(&mut got).unwrap();
        assert!(got.contains("linerate_up 1"), "{got}");
        // an oversized request is cut at the cap, answered, and the endpoint goes on
        let mut big = TcpStream::connect(addr).unwrap();
        let _ = big.write_all(&vec![b'A'; 100_000]);
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
        let mut got = String::new();
        c.read_to_string(&mut got).unwrap();
        assert!(got.contains("linerate_up 1"));
        // A stop ends the endpoint: its thread returns and the port is closed.
        stop.stop();
        server.join().unwrap();
        assert!(TcpStream::connect(addr).is_err(), "nothing listens after the stop");
    }

    /// An endpoint on 127.0.0.1 with a minute per request, serving until the test ends; its
    /// address.
    fn slow_endpoint() -> std::net::SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let body: Arc<dyn Fn() -> String + Send + Sync> = Arc::new(|| "linerate_up 1\n".to_string());
        let never = Shutdown::never();
        let acceptor = Acceptor::new(l).unwrap();
        std::thread::spawn(move || serve_http(acceptor, &body, Duration::from_secs(60), &never));
        addr
    }

    /// A connection to `to` from source address `from`, with 20 s to read.
    fn connect_from(from: [u8; 4], to: std::net::SocketAddr) -> TcpStream {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.bind(&std::net::SocketAddr::from((from, 0)).into()).unwrap();
        s.connect(&to.into()).unwrap();
        let s = TcpStream::from(s);
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s
    }

    /// Whether `c` was closed without an answer (at the end of a bounded read).
    fn unanswered(mut c: TcpStream) -> bool {
        let mut got = Vec::new();
        match c.read_to_end(&mut got) {
            Ok(_) => got.is_empty(),
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        }
    }

    #[test]
    fn a_scrape_is_answered_while_eight_clients_dribble() {
        // A minute per request: served one at a time, the dribblers would hold a scrape for 8.
        let addr = slow_endpoint();
        // Eight slow clients from other addresses than the scraper's (4 per address at most).
        let dribblers: Vec<TcpStream> = (0..8)
            .map(|i| {
                let mut s = connect_from([127, 0, 0, 2 + i / 4], addr);
                s.write_all(b"GET /met").unwrap();
                s
            })
            .collect();
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        c.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
        let mut got = String::new();
        c.read_to_string(&mut got).expect("the scrape answered while eight clients dribble");
        assert!(got.contains("linerate_up 1"), "{got}");
        // A fifth slow client from one address is closed unanswered.
        assert!(unanswered(connect_from([127, 0, 0, 2], addr)), "closed without an answer");
        drop(dribblers);
    }

    /// The cap in all: with [`MAX_CLIENTS`] silent clients (from eight addresses, four each), a
    /// client from yet another address is closed unanswered.
    #[test]
    fn a_client_beyond_the_cap_in_all_is_closed_unanswered() {
        let addr = slow_endpoint();
        // Accepted in the order they connected: the silent ones first.
        let silent: Vec<TcpStream> =
            (0..MAX_CLIENTS).map(|i| connect_from([127, 0, 1, 2 + (i / MAX_CLIENTS_PER_SOURCE) as u8], addr)).collect();
        let mut late = connect_from([127, 0, 1, 100], addr);
        late.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
        assert!(unanswered(late), "a client beyond the cap in all was answered");
        drop(silent);
    }
}
