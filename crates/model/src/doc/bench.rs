//! The `linerate bench --json` document, schema [`BENCH_SCHEMA`]: the first point's test,
//! hosts, summary, intervals and connections at the top, and every sweep point below. Written by
//! `cli/src/bench.rs`, kept as `raw` in lab runs of `bench`, read by `linerate-report`.

use super::ToolInfo;
use crate::host::HostInfo;
use crate::profile::Profile;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The schema string of a bench document.
pub const BENCH_SCHEMA: &str = "linerate.bench/1";

/// One `linerate bench` invocation: one or more points (a sweep), each measured one or more
/// times. The top-level `test`, `summary`, `intervals` and `connections` are the first point's;
/// they are `null` when no point ran.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct BenchDocument {
    /// Always [`BENCH_SCHEMA`].
    pub schema: String,
    /// The program that wrote it.
    pub tool: ToolInfo,
    /// When the first point started, seconds since the Unix epoch (0 when no point ran).
    pub started_unix_s: u64,
    /// The same instant in microseconds, for lining up clients started together (the lab's
    /// group start skew). Absent in documents written before it was added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_unix_us: Option<u64>,
    /// The test parameters a sweep varies, in the order of the `--sweep` flags: the first is
    /// the x axis of sweep charts, the others name their lines. Empty without a sweep.
    /// Absent (`None`) only in documents written before it was added; readers then take the
    /// fields whose values differ between points.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<Vec<SweepParam>>,
    /// The first point's test.
    #[serde(deserialize_with = "super::required")]
    pub test: Option<BenchTest>,
    /// Both hosts' metadata (kernel, CPU, interfaces, TCP settings).
    pub hosts: BenchHosts,
    /// The first point's figures.
    #[serde(deserialize_with = "super::required")]
    pub summary: Option<BenchSummary>,
    /// The first point's per-interval rates.
    #[serde(deserialize_with = "super::required")]
    pub intervals: Option<Vec<BenchInterval>>,
    /// The first point's per-connection rates.
    #[serde(deserialize_with = "super::required")]
    pub connections: Option<Vec<BenchConnection>>,
    /// Every point, in the order they ran.
    pub points: Vec<BenchPoint>,
}

/// A test's socket and ending options (`-C`, `--dscp`, `-n`, `-M`, `--cport`, `-A`): in the
/// document only when set, beside the other fields of [`BenchTest`].
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct TestOptions {
    /// TCP congestion control asked for on both hosts (`-C`), when one was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion: Option<String>,
    /// IP TOS byte of the data sockets (`--dscp` × 4, `-S`), when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tos: Option<u8>,
    /// Bytes the test ended after (`-n`, `-k`), when it was not timed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// `TCP_MAXSEG` of the client's data connections (`-M`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mss: Option<u32>,
    /// Local port of the client's first data connection (`--cport`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cport: Option<u16>,
    /// Cores the client's and the server's workers were pinned to (`-A N,M`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cpu: Option<u32>,
    /// See `client_cpu`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_cpu: Option<u32>,
    /// `--bidir` over connections of their own each way (`connections` each way, as iperf3's
    /// `--bidir -P N`); absent: each connection carried both directions (before issue 43).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub each_way: bool,
    /// udp-stream: whether UDP GSO and GRO were asked for (`--gsro`); written for every UDP
    /// test since it was an option (absent in older UDP runs, which used them unless
    /// `LINERATE_UDP_OFFLOAD=off` was set), absent for TCP tests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gsro: Option<bool>,
}

/// A test as the client asked for it: the protocol's test spec (`linerate_proto::bench::TestSpec`)
/// with the server it ran against and the test's name.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct BenchTest {
    /// Version of the protocol's benchmark documents.
    pub version: u32,
    /// What was measured: `tcp-stream`, `udp-stream`, `tcp-rr`, `tcp-crr` or `profile`.
    pub kind: String,
    /// Which way bulk data flowed: `send`, `receive` or `bidir`.
    pub direction: String,
    /// Parallel connections (UDP: sockets).
    pub connections: u32,
    /// Measured time after the warm-up, milliseconds.
    pub duration_ms: u64,
    /// Warm-up, milliseconds.
    pub omit_ms: u64,
    /// Interval between reports, milliseconds.
    pub interval_ms: u64,
    /// Bytes per write (stream), request (rr/crr) or datagram (udp).
    pub msg_size: u32,
    /// Bytes per response (rr/crr).
    pub resp_size: u32,
    /// SO_SNDBUF asked for (None: autotuning).
    #[serde(deserialize_with = "super::required")]
    pub sndbuf: Option<u32>,
    /// SO_RCVBUF asked for.
    #[serde(deserialize_with = "super::required")]
    pub rcvbuf: Option<u32>,
    /// Target: bit/s for stream tests, transactions/s for rr/crr.
    #[serde(deserialize_with = "super::required")]
    pub rate: Option<u64>,
    /// Sent with zero copy.
    pub zerocopy: bool,
    /// TCP_NODELAY.
    pub nodelay: bool,
    /// The workload of a `profile` test, in the protocol's own form (see profiles/).
    #[serde(deserialize_with = "super::required")]
    pub profile: Option<Profile>,
    /// The agent's address, `IP:PORT`.
    pub server: String,
    /// The test's name (the same as `kind`).
    pub test: String,
    /// The iperf3-habit options, each present only when given.
    #[serde(flatten)]
    pub options: TestOptions,
}

/// A test parameter a sweep varies, named as the [`BenchTest`] field it sets.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SweepParam {
    /// `--sweep conns=`.
    Connections,
    /// `--sweep msg=`.
    MsgSize,
    /// `--sweep buf=`: SO_SNDBUF and SO_RCVBUF together.
    Sndbuf,
    /// `--sweep response=`.
    RespSize,
}

impl SweepParam {
    /// Every parameter, in the order a reader without `sweep` prefers them as the x axis.
    pub const ALL: [SweepParam; 4] =
        [SweepParam::Connections, SweepParam::MsgSize, SweepParam::Sndbuf, SweepParam::RespSize];

    /// The field's name in [`BenchTest`].
    pub fn name(self) -> &'static str {
        match self {
            SweepParam::Connections => "connections",
            SweepParam::MsgSize => "msg_size",
            SweepParam::Sndbuf => "sndbuf",
            SweepParam::RespSize => "resp_size",
        }
    }

    /// Its unit: `B` for sizes, empty for a count.
    pub fn unit(self) -> &'static str {
        match self {
            SweepParam::Connections => "",
            _ => "B",
        }
    }

    /// Its value in `test` (None for autotuned buffers).
    pub fn value(self, test: &BenchTest) -> Option<f64> {
        match self {
            SweepParam::Connections => Some(f64::from(test.connections)),
            SweepParam::MsgSize => Some(f64::from(test.msg_size)),
            SweepParam::Sndbuf => test.sndbuf.map(f64::from),
            SweepParam::RespSize => Some(f64::from(test.resp_size)),
        }
    }

    /// The parameters a sweep varied, for a document that does not say (written before
    /// `sweep`): those whose values differ between the points' `tests`, in [`SweepParam::ALL`]
    /// order (so connections is the x axis when it varies).
    pub fn varying<'a>(tests: impl Iterator<Item = &'a BenchTest> + Clone) -> Vec<SweepParam> {
        SweepParam::ALL
            .into_iter()
            .filter(|k| {
                let vals: Vec<Option<f64>> = tests.clone().map(|t| k.value(t)).collect();
                vals.iter().all(Option::is_some) && vals.windows(2).any(|w| w[0] != w[1])
            })
            .collect()
    }
}

/// Metadata of both hosts (each `null` when no point ran).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct BenchHosts {
    /// The client.
    #[serde(deserialize_with = "super::required")]
    pub local: Option<HostInfo>,
    /// The agent.
    #[serde(deserialize_with = "super::required")]
    pub remote: Option<HostInfo>,
}

/// The figures of one test.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct BenchSummary {
    /// Goodput counted at the receivers, both directions together, bit/s.
    pub throughput_bps: f64,
    /// Client → server goodput, bit/s.
    pub send_bps: f64,
    /// Server → client goodput, bit/s.
    pub receive_bps: f64,
    /// Connections.
    pub connections: u64,
    /// Seconds counted.
    pub seconds: f64,
    /// Jain's index of the per-connection goodput (`null` when nothing moved).
    #[serde(deserialize_with = "super::required")]
    pub jain: Option<f64>,
    /// Spread of the per-connection goodput.
    #[serde(deserialize_with = "super::required")]
    pub fairness: Option<Fairness>,
    /// Transactions per second (rr, crr, profile).
    #[serde(deserialize_with = "super::required")]
    pub transactions_per_s: Option<f64>,
    /// Transaction latency, microseconds.
    #[serde(deserialize_with = "super::required")]
    pub latency_us: Option<Latency>,
    /// Datagram loss at the receiver, percent (udp).
    #[serde(deserialize_with = "super::required")]
    pub loss_pct: Option<f64>,
    /// Datagrams that arrived after a later one (udp); absent in documents before it was kept.
    #[serde(default)]
    pub out_of_order: Option<u64>,
    /// Datagrams that arrived twice (udp).
    #[serde(default)]
    pub duplicates: Option<u64>,
    /// Datagrams per second received (udp).
    #[serde(deserialize_with = "super::required")]
    pub packets_per_s: Option<f64>,
    /// Receiver's mean jitter, µs (udp).
    #[serde(deserialize_with = "super::required")]
    pub jitter_us: Option<f64>,
    /// What the sender offered, bit/s (udp).
    #[serde(deserialize_with = "super::required")]
    pub sender_bps: Option<f64>,
    /// How the datagrams travelled (udp), where the side was counted; absent in older runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_batching: Option<UdpBatching>,
    /// Both hosts' CPU over the measured time.
    pub cpu: CpuPair,
    /// CPU µs per KB moved (netperf's service demand), per host.
    pub service_demand_us_per_kb: SidePair,
    /// CPU µs per transaction, per host.
    #[serde(deserialize_with = "super::required")]
    pub service_demand_us_per_tran: Option<SidePair>,
    /// Retransmitted segments, both sides' senders.
    pub retransmits: u64,
    /// Mean smoothed RTT over the client's connections, µs.
    #[serde(deserialize_with = "super::required")]
    pub rtt_us: Option<f64>,
    /// Socket buffers the kernel granted.
    pub buffers: BufferPair,
    /// Goodput against the link's payload rate, when a link rate was given.
    #[serde(deserialize_with = "super::required")]
    pub efficiency: Option<Efficiency>,
    /// Errors either side saw (the agent's prefixed `server: `).
    pub errors: Vec<String>,
    /// A profile's figures per group, in the profile's order (flent's rrul reads the latency
    /// probe apart from the bulk flows); absent outside profiles.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<GroupFigures>,
}

/// How a UDP test's datagrams travelled: per system call and per message (a GSO or GRO train
/// is one message: one super-packet through the stack, cut into datagrams at the far end of it).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Default)]
pub struct UdpBatching {
    /// Datagrams per `sendmmsg` call on the sender.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datagrams_per_send_call: Option<f64>,
    /// Datagrams per message the sender handed the kernel: its GSO train length (1 without GSO).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datagrams_per_train: Option<f64>,
    /// Datagrams per message the receiver read: its GRO train length (1 without GRO).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datagrams_per_received_train: Option<f64>,
}

/// The figures of one group of a profile.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct GroupFigures {
    /// The group's name in the profile.
    pub name: String,
    /// Its connections.
    pub connections: u64,
    /// Client → server goodput of its connections, bit/s.
    pub send_bps: f64,
    /// Server → client goodput of its connections, bit/s.
    pub receive_bps: f64,
    /// Transactions per second: iterations that waited for an answer (`null` for a group that
    /// only writes or streams).
    #[serde(deserialize_with = "super::required")]
    pub transactions_per_s: Option<f64>,
    /// Latency of its transactions, microseconds.
    #[serde(deserialize_with = "super::required")]
    pub latency_us: Option<Latency>,
}

/// A figure of each host.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct SidePair {
    /// The client.
    pub local: f64,
    /// The agent.
    pub remote: f64,
}

/// Spread of per-connection rates.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct Fairness {
    /// Slowest connection, bit/s.
    pub min_bps: f64,
    /// Fastest.
    pub max_bps: f64,
    /// Mean.
    pub mean_bps: f64,
    /// Population standard deviation.
    pub stddev_bps: f64,
    /// stddev / mean (0 when the mean is 0).
    pub cov: f64,
    /// Jain's index ([`crate::stats::jain`]); `null` when nothing moved.
    #[serde(deserialize_with = "super::required")]
    pub jain: Option<f64>,
    /// Connections that moved nothing.
    pub starved: u64,
}

/// Latency percentiles of transactions, microseconds, from the merged HDR histogram.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Latency {
    /// Smallest.
    pub min: f64,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th.
    pub p99: f64,
    /// 99.9th.
    pub p999: f64,
    /// Largest.
    pub max: f64,
    /// Transactions measured.
    pub count: u64,
    /// The distribution for plotting: 0th to 100th percentile.
    pub curve: Vec<CurvePoint>,
    /// Open loop: the share of requests that left more than one interval after they were due
    /// (their latency counts the wait). Absent for closed loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub behind_schedule: Option<f64>,
}

impl Latency {
    /// Figure `f`.
    pub fn get(&self, f: LatencyFigure) -> f64 {
        match f {
            LatencyFigure::Min => self.min,
            LatencyFigure::Mean => self.mean,
            LatencyFigure::P50 => self.p50,
            LatencyFigure::P90 => self.p90,
            LatencyFigure::P99 => self.p99,
            LatencyFigure::P999 => self.p999,
            LatencyFigure::Max => self.max,
        }
    }

    /// Every figure, in name order ([`LatencyFigure::ALL`]).
    pub fn figures(&self) -> [(LatencyFigure, f64); 7] {
        LatencyFigure::ALL.map(|f| (f, self.get(f)))
    }
}

/// A figure of a latency distribution: the list every latency document and report uses,
/// written once. `latency.NAME` metrics are named by [`LatencyFigure::name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LatencyFigure {
    /// Smallest.
    Min,
    /// Mean.
    Mean,
    /// Median.
    P50,
    /// 90th percentile.
    P90,
    /// 99th.
    P99,
    /// 99.9th.
    P999,
    /// Largest.
    Max,
}

impl LatencyFigure {
    /// Every figure, in name order (as a run's `latency.NAME` metrics are listed).
    pub const ALL: [LatencyFigure; 7] = [
        LatencyFigure::Max,
        LatencyFigure::Mean,
        LatencyFigure::Min,
        LatencyFigure::P50,
        LatencyFigure::P90,
        LatencyFigure::P99,
        LatencyFigure::P999,
    ];

    /// The percentiles every document carries, in order: p50, p90, p99, p99.9.
    pub const PERCENTILES: [LatencyFigure; 4] =
        [LatencyFigure::P50, LatencyFigure::P90, LatencyFigure::P99, LatencyFigure::P999];

    /// The name (`p50`, `p999`, `max`).
    pub fn name(self) -> &'static str {
        match self {
            LatencyFigure::Min => "min",
            LatencyFigure::Mean => "mean",
            LatencyFigure::P50 => "p50",
            LatencyFigure::P90 => "p90",
            LatencyFigure::P99 => "p99",
            LatencyFigure::P999 => "p999",
            LatencyFigure::Max => "max",
        }
    }

    /// The percentile it is (99.9 for `p999`); `None` for min, mean and max.
    pub fn percentile(self) -> Option<f64> {
        match self {
            LatencyFigure::P50 => Some(50.0),
            LatencyFigure::P90 => Some(90.0),
            LatencyFigure::P99 => Some(99.0),
            LatencyFigure::P999 => Some(99.9),
            LatencyFigure::Min | LatencyFigure::Mean | LatencyFigure::Max => None,
        }
    }

    /// The figure named `s`.
    pub fn parse(s: &str) -> Option<LatencyFigure> {
        LatencyFigure::ALL.into_iter().find(|f| f.name() == s)
    }
}

/// One point of a latency distribution.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct CurvePoint {
    /// Percentile, 0 to 100.
    pub percentile: f64,
    /// Latency at it, µs.
    pub us: f64,
}

/// Both hosts' CPU.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct CpuPair {
    /// The client.
    pub local: CpuShare,
    /// The agent.
    pub remote: CpuShare,
}

/// Whole-machine CPU use from /proc/stat over the measured time, as fractions of all cores:
/// what each side of a benchmark reports on the wire (`linerate_proto::bench::SideReport`, which
/// refuses unknown fields) and what the bench document keeps.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct CpuShare {
    /// User (and nice) time.
    pub user: f64,
    /// System time.
    pub system: f64,
    /// Software-interrupt time (where the network stack's receive work lands).
    pub softirq: f64,
    /// Hardware-interrupt time.
    pub irq: f64,
    /// Idle and I/O wait.
    pub idle: f64,
    /// Stolen by the hypervisor. Absent in documents written before it was counted: 0.
    #[serde(default)]
    pub steal: f64,
    /// Cores counted.
    pub cores: u32,
    /// The measuring process's own user time, seconds.
    pub process_user_s: f64,
    /// Its system time, seconds.
    pub process_system_s: f64,
}

impl CpuShare {
    /// Busy share of the machine: user + system + softirq + irq.
    pub fn busy(&self) -> f64 {
        self.user + self.system + self.softirq + self.irq
    }
}

/// Socket buffers granted on each host.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct BufferPair {
    /// The client's (`null` when no socket reported them).
    #[serde(deserialize_with = "super::required")]
    pub local: Option<Buffers>,
    /// The agent's.
    #[serde(deserialize_with = "super::required")]
    pub remote: Option<Buffers>,
}

/// SO_SNDBUF and SO_RCVBUF as the kernel granted them, bytes.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Buffers {
    /// SO_SNDBUF.
    pub sndbuf: u32,
    /// SO_RCVBUF.
    pub rcvbuf: u32,
}

/// Goodput against the theoretical payload rate of the link.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct Efficiency {
    /// Link rate, bit/s.
    pub link_bps: f64,
    /// MTU.
    pub mtu: u32,
    /// Payload ceiling, bit/s.
    pub ceiling_bps: f64,
    /// Goodput / ceiling.
    pub ratio: f64,
}

/// One reporting interval, as the receiver of the bulk saw it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct BenchInterval {
    /// Start, seconds since the test began (warm-up included).
    pub start_s: f64,
    /// End.
    pub end_s: f64,
    /// Goodput, bit/s.
    pub bps: f64,
    /// Transactions per second.
    pub transactions_per_s: f64,
    /// Inside the warm-up (not counted).
    pub omitted: bool,
    /// What else iperf3's interval lines carry, where it was measured.
    #[serde(flatten)]
    pub detail: IntervalDetail,
}

/// An interval's bytes on each side, the UDP receiver's loss, the TCP sender's retransmits and
/// congestion window, and each stream's own figures, as iperf3's interval lines carry them;
/// each left out where not measured.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct IntervalDetail {
    /// Bytes the receiver of the bulk got in the interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Bytes the sender sent in its own interval of the same span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_bytes: Option<u64>,
    /// UDP: the receiver's loss in the interval, percent: bytes received against bytes sent in
    /// the same span, so a datagram in flight across a boundary counts in the next one (the
    /// test's loss, from sequence numbers, is exact).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_pct: Option<f64>,
    /// TCP: segments the client's sending connections retransmitted in the interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retransmits: Option<u64>,
    /// TCP: the client's sending connections' congestion window near the interval's end, bytes,
    /// mean over the connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwnd_bytes: Option<u64>,
    /// Each connection's own figures in the interval, as the client counted them (iperf3's
    /// per-stream lines with `-P`): tests of 2 to 128 streams (`--bidir`: 2 to 64 each way),
    /// not profiles. Absent with one stream and in documents written before issue 43's
    /// per-stream lines.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub streams: Vec<BenchStream>,
}

/// One connection's figures in one interval, counted by the client: what it sent and received
/// there (so for a test the client sends, the streams' `sent_bytes` add up to the interval's
/// `sent_bytes`; the interval's `bytes` and `bps` are the receiver's).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Default)]
pub struct BenchStream {
    /// Connection index, as in `connections`.
    pub id: u32,
    /// Bytes the client sent on it in the interval.
    pub sent_bytes: u64,
    /// Bytes the client received on it.
    pub received_bytes: u64,
    /// Both together, bit/s over the client's interval.
    pub bps: f64,
    /// Request/response: transactions completed on it per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transactions_per_s: Option<f64>,
    /// TCP: segments it retransmitted in the interval, where sampled (a sending connection of
    /// a tcp-stream test of up to 128 connections).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retransmits: Option<u64>,
    /// TCP: its congestion window near the interval's end, bytes, where sampled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwnd_bytes: Option<u64>,
}

/// One connection's goodput.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct BenchConnection {
    /// Connection index.
    pub id: u32,
    /// Bytes received after the warm-up.
    pub bytes: u64,
    /// Goodput, bit/s.
    pub bps: f64,
    /// The client's kernel TCP statistics of it.
    #[serde(deserialize_with = "super::required")]
    pub tcp: Option<TcpStats>,
    /// The agent's.
    #[serde(deserialize_with = "super::required")]
    pub server_tcp: Option<TcpStats>,
}

/// Kernel TCP statistics of one connection at the end of a test: what each side reports on the
/// wire (`linerate_proto::bench::ConnCounts`, which refuses unknown fields, so this does too)
/// and what the bench document keeps, one struct for both.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(deny_unknown_fields)]
pub struct TcpStats {
    /// Congestion window, segments.
    pub cwnd: u32,
    /// Smoothed RTT, µs.
    pub rtt_us: u32,
    /// RTT variance, µs.
    pub rttvar_us: u32,
    /// Segments retransmitted over the connection's life.
    pub retrans: u32,
    /// Maximum segment size in use.
    pub mss: u32,
    /// Most recent delivery rate, bytes/s.
    pub delivery_rate: u64,
    /// Pacing rate, bytes/s.
    pub pacing_rate: u64,
}

/// One point of a sweep (or the only point), with its last run's figures.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct BenchPoint {
    /// The `--sweep` keys and values that made it, as typed (`{"conns": "8", "msg": "64K"}`).
    pub params: BTreeMap<String, String>,
    /// Its test.
    pub test: BenchTest,
    /// Figures of its last run.
    pub summary: BenchSummary,
    /// Intervals of its last run.
    pub intervals: Vec<BenchInterval>,
    /// The repeats.
    pub repeats: Repeats,
}

/// Repeated runs of one point.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Repeats {
    /// The headline figure of every run (goodput, or transactions/s for rr-like tests).
    pub runs: Vec<f64>,
    /// Tests with transactions: every run's latency percentiles, in the order of `runs` (absent
    /// for other tests, and in documents written before they were kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub latency_us: Vec<RunLatency>,
    /// Every run's share of each machine's CPU time the hypervisor took (steal, 0–1), in the
    /// order of `runs` (absent in documents written before it was kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steal: Vec<SidePair>,
    /// Their confidence interval (two runs or more).
    #[serde(deserialize_with = "super::required")]
    pub confidence: Option<Confidence>,
    /// The interval's full width asked for, percent of the mean (netperf `-I 99,5`: ±2.5 %).
    pub target_width_pct: f64,
    /// Whether the runs met it: `confidence.full_width_pct` at most `target_width_pct`.
    pub met: bool,
}

/// One run's latency percentiles, microseconds: what a repeated test's latency figures are the
/// mean of, and their spread.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct RunLatency {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th.
    pub p99: f64,
    /// 99.9th.
    pub p999: f64,
}

impl RunLatency {
    /// The percentiles of `l`.
    pub fn of(l: &Latency) -> RunLatency {
        RunLatency { p50: l.p50, p90: l.p90, p99: l.p99, p999: l.p999 }
    }

    /// Percentile `f` ([`LatencyFigure::PERCENTILES`]); `None` for min, mean and max, which a
    /// run's latency does not keep.
    pub fn get(&self, f: LatencyFigure) -> Option<f64> {
        match f {
            LatencyFigure::P50 => Some(self.p50),
            LatencyFigure::P90 => Some(self.p90),
            LatencyFigure::P99 => Some(self.p99),
            LatencyFigure::P999 => Some(self.p999),
            LatencyFigure::Min | LatencyFigure::Mean | LatencyFigure::Max => None,
        }
    }

    /// The percentiles, in [`LatencyFigure::PERCENTILES`] order (each of which it keeps).
    pub fn figures(&self) -> [(LatencyFigure, f64); 4] {
        LatencyFigure::PERCENTILES.map(|f| (f, self.get(f).unwrap_or(f64::NAN)))
    }
}

/// Mean and confidence interval of repeated measurements.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct Confidence {
    /// Runs.
    pub n: usize,
    /// Mean.
    pub mean: f64,
    /// Half-width of the interval.
    pub half_width: f64,
    /// Level, percent (95 or 99).
    pub level: u32,
    /// Half-width as a percentage of the mean (the interval is the mean ± this).
    pub width_pct: f64,
    /// Full width as a percentage of the mean (twice `width_pct`), what `target_width_pct` is
    /// compared with. Absent in documents before it was added: computed from `width_pct`.
    #[serde(default)]
    pub full_width_pct: Option<f64>,
}
