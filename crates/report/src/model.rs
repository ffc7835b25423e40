//! The `RunReport` document ("linerate.run/1"): one run of `cp`, `bench`, `lab` or `mesh`, with its
//! parameters, hosts, headline figures, chart data, and the typed document it was made from.
//! Documented in docs/REPORT_SCHEMA.md and described by docs/schema/run-v1.schema.json; outside
//! scripts rely on it, so fields are only ever added, and a breaking change gets a new schema
//! string. Every field is typed: the key parameters ([`RunParams`]), the hosts ([`Hosts`]), table
//! cells ([`Cell`]) and the source document ([`Body`]); what a run stored by an older linerate
//! holds that no longer fits its field is left out when it is read, never an error.

use crate::ReportError;
use linerate_model::doc::bench::BenchDocument;
use linerate_model::doc::cp::CpSummary;
use linerate_model::doc::lab::{LabDescription, LabDocument, LabScenario, Machine};
use linerate_model::doc::mesh::{MeshRound, MeshTally, MeshTest};
use linerate_model::host::HostInfo;
use linerate_model::metric::{Goal, GroupFigure, MetricId, MetricKind, RunFigure};
use linerate_model::profile::Profile;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// The schema string of the current document version.
pub const SCHEMA: &str = "linerate.run/1";

/// One stored run.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct RunReport {
    /// Always [`SCHEMA`] for this version.
    pub schema: String,
    /// Run id, unique within a store (see [`new_id`]).
    pub id: String,
    /// Which tool produced the run.
    pub kind: RunKind,
    /// When the run was made, RFC 3339 in UTC.
    pub created: String,
    /// One line saying what was measured.
    pub title: String,
    /// `linerate` version that produced it.
    pub tool_version: String,
    /// Parameters of the run (flags, scenario settings): the ones that decide whether two runs
    /// measure the same thing.
    #[serde(default)]
    pub params: RunParams,
    /// Host metadata: a bench run's two sides, a lab's machine.
    #[serde(default)]
    pub hosts: Hosts,
    /// Headline figures; `report compare` compares these by name.
    #[serde(default)]
    pub metrics: Vec<Metric>,
    /// The measured spread of figures, by metric name: what `report compare` weighs a change
    /// against before it calls it a regression (issue 33). Absent in runs stored before it was
    /// measured, and for figures measured once.
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "lenient_vec")]
    pub spreads: Vec<Spread>,
    /// Chart data.
    #[serde(default)]
    pub charts: Charts,
    /// Free tables (connection scaling with CPU, per-run listings).
    #[serde(default)]
    pub tables: Vec<Table>,
    /// The typed document the run was made from, kept whole: what renderers read beyond the
    /// figures (a lab's topology, a mesh round's agents). Absent in runs stored before it was
    /// kept, and in runs made from documents older than the typed ones.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub body: Option<Body>,
}

/// The document a run was made from.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum Body {
    /// A `linerate bench --json` document.
    Bench(Box<BenchDocument>),
    /// A `linerate cp --json` summary.
    Cp(Box<CpSummary>),
    /// A `linerate lab run` document.
    Lab(Box<LabDocument>),
    /// A `linerate mesh` round.
    Mesh(Box<MeshRound>),
}

/// Reads an optional field, leaving it out (`None`) when its value does not have the field's
/// type: runs stored by older versions (and documents older than the typed ones) carried
/// free-form parameters and hosts, and still import.
fn lenient<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either<T> {
        Typed(T),
        Other(serde::de::IgnoredAny),
    }
    Ok(match Option::<Either<T>>::deserialize(d)? {
        Some(Either::Typed(t)) => Some(t),
        _ => None,
    })
}

/// Reads a list, leaving it empty when it does not have the list's type.
fn lenient_vec<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    Ok(lenient(d)?.unwrap_or_default())
}

/// A lab scenario as a parameter: the scenario file's `{name, description, file}`, or, in
/// documents of the older sketch, its name alone.
fn scenario_param<'de, D: Deserializer<'de>>(d: D) -> Result<Option<LabScenario>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Typed(LabScenario),
        Name(String),
        Other(serde::de::IgnoredAny),
    }
    Ok(match Option::<Either>::deserialize(d)? {
        Some(Either::Typed(t)) => Some(t),
        Some(Either::Name(name)) => Some(LabScenario { name, ..LabScenario::default() }),
        _ => None,
    })
}

/// The key parameters of a run, each present only where the run has it: a bench run's test
/// (the `linerate.bench/1` test's fields, so the rate cap, direction, connections and duration
/// are compared), a cp run's copy, a lab run's scenario and topology, a mesh round's agents and
/// tests. Serialized under the same names as the free-form parameters were, in name order.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct RunParams {
    /// Mesh: the round's agents, in inventory order.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub agents: Option<Vec<String>>,
    /// Bench, a sweep: the best point's swept values (`connections=2 msg_size=131072`).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub best_point: Option<String>,
    /// Bench: bytes the test ended after (`-n`); cp: file bytes sent.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub bytes: Option<u64>,
    /// cp: the AEAD used.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub cipher: Option<String>,
    /// Bench: the client's pinned core (`-A`).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub client_cpu: Option<u32>,
    /// cp: every entry arrived.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub complete: Option<bool>,
    /// Bench: the congestion control asked for (`-C`).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub congestion: Option<String>,
    /// Bench: parallel connections.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub connections: Option<u32>,
    /// Bench: the client's first data port (`--cport`).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub cport: Option<u16>,
    /// cp: where the tree went.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub destination: Option<String>,
    /// Bench: `send`, `receive` (`-R`) or `bidir`.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub direction: Option<String>,
    /// cp: directories sent.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub dirs: Option<u64>,
    /// Bench: measured time, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub duration_ms: Option<u64>,
    /// Bench, the contract sample: measured time, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub duration_s: Option<f64>,
    /// cp: files sent.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub files: Option<u64>,
    /// Bench, udp-stream: UDP GSO and GRO asked for (`--gsro`); absent in UDP runs from before
    /// it was an option (which used them unless `LINERATE_UDP_OFFLOAD=off` was set).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub gsro: Option<bool>,
    /// Lab: when the scenario ended, seconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub finished_unix: Option<u64>,
    /// Bench, the contract sample: the agent.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub host: Option<String>,
    /// Bench: reporting interval, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub interval_ms: Option<u64>,
    /// Bench: what was measured (the same as `test`).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub kind: Option<String>,
    /// Lab: the lab as built (hosts, links, switches, QoS).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub lab: Option<LabDescription>,
    /// cp: symlinks sent.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub links: Option<u64>,
    /// Bench: the MTU of the path, when the run knew it (from its efficiency figures).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub mtu: Option<u32>,
    /// Bench: `TCP_MAXSEG` (`-M`).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub mss: Option<u32>,
    /// Bench: bytes per write, request or datagram.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub msg_size: Option<u32>,
    /// Bench: TCP_NODELAY.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub nodelay: Option<bool>,
    /// Bench: warm-up, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub omit_ms: Option<u64>,
    /// Bench, the contract sample: warm-up, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub omit_s: Option<f64>,
    /// Bench, a sweep: how many points it measured.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub points: Option<u64>,
    /// Bench: a profile test's workload.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub profile: Option<Profile>,
    /// Bench: the rate cap, bit/s for stream tests, transactions/s for rr/crr; absent when
    /// uncapped.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub rate: Option<u64>,
    /// Bench: SO_RCVBUF asked for.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub rcvbuf: Option<u32>,
    /// Bench: bytes per response.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub resp_size: Option<u32>,
    /// Mesh: the round's number.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub round: Option<u64>,
    /// Lab: the lab's run id.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub run_id: Option<String>,
    /// Lab: the scenario.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "scenario_param")]
    pub scenario: Option<LabScenario>,
    /// Bench: the agent's address.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub server: Option<String>,
    /// Bench: the agent's pinned core (`-A N,M`).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub server_cpu: Option<u32>,
    /// Bench: SO_SNDBUF asked for.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub sndbuf: Option<u32>,
    /// Lab: when the scenario began, seconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub started_unix: Option<u64>,
    /// cp: data streams used.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub streams: Option<u32>,
    /// Bench, a sweep: the parameter on its x axis.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub sweep: Option<String>,
    /// Bench, a sweep: what it ranged over (`connections 1–8`).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub sweep_range: Option<String>,
    /// Mesh: how the round went.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub tally: Option<MeshTally>,
    /// Bench: the test's name (`tcp-stream`).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub test: Option<String>,
    /// Mesh: the inventory's tests.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub tests: Option<Vec<MeshTest>>,
    /// Lab: a smoke run's time factor (`--scale-time`).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub time_scale: Option<f64>,
    /// Bench: the IP TOS byte (`--dscp`).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub tos: Option<u8>,
    /// Bench: the protocol's document version.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub version: Option<u32>,
    /// Lab: the directory that held the runner's trees.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub workdir: Option<String>,
    /// Bench: sent with zero copy.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub zerocopy: Option<bool>,
}

impl RunParams {
    /// Every parameter the run has, by name in name order, as JSON values: what exports and
    /// the HTML report list.
    pub fn entries(&self) -> Vec<(String, Value)> {
        match serde_json::to_value(self) {
            Ok(Value::Object(o)) => o.into_iter().collect(),
            _ => Vec::new(),
        }
    }

    /// Whether the run has no parameter.
    pub fn is_empty(&self) -> bool {
        *self == RunParams::default()
    }
}

/// The hosts of a run, each present where the run says.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct Hosts {
    /// A bench run's client.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub local: Option<HostInfo>,
    /// The machine a lab ran on.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub machine: Option<Machine>,
    /// A bench run's agent.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub remote: Option<HostInfo>,
}

/// One table cell.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(untagged)]
pub enum Cell {
    /// No value.
    Null,
    /// A yes/no value.
    Bool(bool),
    /// A whole number (a count).
    Int(i64),
    /// A number.
    Number(f64),
    /// Text.
    Text(String),
}

impl Cell {
    /// A number, or null.
    pub fn num(x: Option<f64>) -> Cell {
        x.map_or(Cell::Null, Cell::Number)
    }

    /// Text, or null when it is empty.
    pub fn text(s: &str) -> Cell {
        if s.is_empty() {
            Cell::Null
        } else {
            Cell::Text(s.to_string())
        }
    }

    /// The value of a number cell.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Cell::Int(i) => Some(*i as f64),
            Cell::Number(x) => Some(*x),
            _ => None,
        }
    }

    /// The text of a text cell.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Cell::Text(s) => Some(s),
            _ => None,
        }
    }

    /// Whether the cell is a number.
    pub fn is_number(&self) -> bool {
        matches!(self, Cell::Int(_) | Cell::Number(_))
    }
}

impl From<&str> for Cell {
    fn from(s: &str) -> Cell {
        Cell::Text(s.to_string())
    }
}

impl From<String> for Cell {
    fn from(s: String) -> Cell {
        Cell::Text(s)
    }
}

impl From<f64> for Cell {
    fn from(x: f64) -> Cell {
        Cell::Number(x)
    }
}

impl From<u64> for Cell {
    fn from(x: u64) -> Cell {
        i64::try_from(x).map_or(Cell::Number(x as f64), Cell::Int)
    }
}

impl From<u32> for Cell {
    fn from(x: u32) -> Cell {
        Cell::Int(i64::from(x))
    }
}

impl From<usize> for Cell {
    fn from(x: usize) -> Cell {
        Cell::from(x as u64)
    }
}

impl PartialEq<&str> for Cell {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == Some(*other)
    }
}

/// The tool that produced a run.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RunKind {
    /// `linerate cp`.
    Cp,
    /// `linerate bench`.
    Bench,
    /// `linerate lab run`.
    Lab,
    /// `linerate mesh`: one round over a fleet's pairs.
    Mesh,
}

impl RunKind {
    /// The lowercase name used in the document and the store.
    pub fn as_str(self) -> &'static str {
        match self {
            RunKind::Cp => "cp",
            RunKind::Bench => "bench",
            RunKind::Lab => "lab",
            RunKind::Mesh => "mesh",
        }
    }
}

/// Which direction of a figure is an improvement.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    /// Bigger is better (throughput, transactions).
    Higher,
    /// Smaller is better (latency, CPU, time).
    Lower,
}

/// One headline figure.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Metric {
    /// Its stable name (`throughput`, `latency.p99`, `cpu.local`), typed.
    pub name: MetricId,
    /// The value in `unit` (no SI prefix: bit/s, not Gbit/s).
    pub value: f64,
    /// Unit: `bit/s`, `B`, `s`, `us`, `%`, `1/s`, or empty for a ratio.
    pub unit: String,
    /// Which direction is an improvement.
    pub better: Better,
}

/// How much a figure varies between measurements of the same thing: the standard deviation of
/// its samples, in the figure's unit; [`Spread::noise`] is how uncertain the figure itself is.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Spread {
    /// The metric's name.
    pub metric: MetricId,
    /// The samples' standard deviation (n − 1), in the metric's unit.
    pub sd: f64,
    /// How many samples.
    pub n: u64,
    /// What the samples are.
    pub of: SpreadOf,
}

/// What a [`Spread`]'s samples are.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum SpreadOf {
    /// The run's reporting intervals (warm-up and a partial last interval left out): how one
    /// interval varies, a stand-in for how the run would vary if made again.
    Intervals,
    /// `--repeat`: the runs of the same test, each one figure.
    Repeats,
    /// A baseline made of the last runs of the same test (`report compare --against last:K`).
    Runs,
    /// A least-squares estimate from `n` runs (a figure at zero hypervisor steal, issue 33):
    /// `sd` is its standard error.
    Fit,
}

impl Spread {
    /// How far the figure this spread belongs to is expected to fall from the true value, in its
    /// unit (issue 33), by what the figure is:
    ///
    /// * one run, spread of its intervals: `sd` itself. One run is one sample of the test; how it
    ///   would differ if made again is estimated by how one interval differs from the next (on
    ///   the 2-core VM the 1 s intervals' spread, ~10 %, is what separate 5 s runs show, 11–12 %);
    /// * the mean of `n` `--repeat` runs: its standard error `sd / √n`;
    /// * the median of the last `n` runs (a baseline): `√(π/2) · sd / √n`;
    /// * a least-squares estimate: `sd`, its standard error.
    pub fn noise(&self) -> f64 {
        use linerate_model::stats::{standard_error, MEDIAN_SE_FACTOR};
        match self.of {
            SpreadOf::Intervals => self.sd,
            SpreadOf::Repeats => standard_error(self.sd, self.n).unwrap_or(self.sd),
            SpreadOf::Runs => MEDIAN_SE_FACTOR * standard_error(self.sd, self.n).unwrap_or(self.sd),
            SpreadOf::Fit => self.sd,
        }
    }
}

impl SpreadOf {
    /// The lowercase name shown and stored.
    pub fn as_str(self) -> &'static str {
        match self {
            SpreadOf::Intervals => "intervals",
            SpreadOf::Repeats => "repeats",
            SpreadOf::Runs => "runs",
            SpreadOf::Fit => "fit",
        }
    }
}

/// All chart data of a run; every list may be empty.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct Charts {
    /// Bar charts (tools side by side against a ceiling).
    #[serde(default)]
    pub bars: Vec<BarChart>,
    /// Line charts of y against x (throughput or CPU against connections, guests, message size).
    #[serde(default)]
    pub xy: Vec<XyChart>,
    /// Per-flow rates with Jain's fairness index.
    #[serde(default)]
    pub flows: Vec<FlowChart>,
    /// Rates over time per flow or guest, with guarantee lines.
    #[serde(default)]
    pub series: Vec<TimeChart>,
    /// Latency percentile plots.
    #[serde(default)]
    pub latency: Vec<LatencyChart>,
}

/// A bar chart.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct BarChart {
    /// Chart title.
    pub title: String,
    /// Unit of every bar and of the ceiling.
    pub unit: String,
    /// The bars, in display order.
    pub bars: Vec<Bar>,
    /// A reference line drawn across the bars (the netperf/iperf3 ceiling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ceiling: Option<RefLine>,
}

/// One bar.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Bar {
    /// Label under the bar.
    pub label: String,
    /// Height of the bar.
    pub value: f64,
}

/// A labelled horizontal reference line (ceiling, guarantee).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct RefLine {
    /// What the line is.
    pub label: String,
    /// Its value, in the chart's unit.
    pub value: f64,
}

/// An axis description.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Axis {
    /// What is plotted (`connections`, `throughput`).
    pub label: String,
    /// Its unit, or empty for a count.
    pub unit: String,
}

/// A named line of (x, y) points.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Line {
    /// Legend entry.
    pub name: String,
    /// Points as `[x, y]`, in x order.
    pub points: Vec<[f64; 2]>,
}

/// A line chart of y against x.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct XyChart {
    /// Chart title.
    pub title: String,
    /// Horizontal axis.
    pub x: Axis,
    /// Vertical axis.
    pub y: Axis,
    /// One or more lines.
    pub lines: Vec<Line>,
}

/// Per-flow rates.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct FlowChart {
    /// Chart title.
    pub title: String,
    /// Unit of the rates.
    pub unit: String,
    /// One bar per flow.
    pub flows: Vec<Bar>,
    /// Jain's fairness index (1 = perfectly fair); computed from `flows` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jain: Option<f64>,
}

impl FlowChart {
    /// Jain's index as given, or computed from the flows ([`linerate_model::stats::jain`]).
    pub fn jain_index(&self) -> Option<f64> {
        self.jain.or_else(|| linerate_model::stats::jain(&self.flows.iter().map(|f| f.value).collect::<Vec<_>>()))
    }
}

/// Rates over time.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct TimeChart {
    /// Chart title.
    pub title: String,
    /// Unit of the values (time is always seconds from the start).
    pub unit: String,
    /// One line per flow or guest; x is seconds.
    pub lines: Vec<Line>,
    /// Guarantee lines (QoS minimum shares).
    #[serde(default)]
    pub guarantees: Vec<RefLine>,
}

/// Latency percentiles of one or more runs.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct LatencyChart {
    /// Chart title.
    pub title: String,
    /// One line per distribution; x is the percentile (0–100 exclusive of 100), y microseconds.
    pub lines: Vec<Line>,
}

/// A free table.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Table {
    /// Table title.
    pub title: String,
    /// Column headings (with the unit in parentheses where there is one).
    pub columns: Vec<String>,
    /// Rows of cells (numbers, strings or null), each as long as `columns`.
    pub rows: Vec<Vec<Cell>>,
}

impl RunReport {
    /// An empty report of `kind` with a fresh id and the current time.
    pub fn new(kind: RunKind, title: impl Into<String>) -> RunReport {
        RunReport {
            schema: SCHEMA.to_string(),
            id: new_id(),
            kind,
            created: crate::time::now_rfc3339(),
            title: title.into(),
            tool_version: env!("CARGO_PKG_VERSION").to_string(),
            params: RunParams::default(),
            hosts: Hosts::default(),
            metrics: Vec::new(),
            spreads: Vec::new(),
            charts: Charts::default(),
            tables: Vec::new(),
            body: None,
        }
    }

    /// Reads a stored or exported document, checking its schema string.
    pub fn from_json(v: Value) -> Result<RunReport, ReportError> {
        match v.get("schema").and_then(Value::as_str) {
            Some(SCHEMA) => serde_json::from_value(v).map_err(|e| ReportError::Invalid(e.to_string())),
            Some(other) => Err(ReportError::UnknownSchema(other.to_string())),
            None => Err(ReportError::UnknownSchema(String::new())),
        }
    }

    /// Adds a metric (skipped when the value is not finite).
    pub fn metric(&mut self, name: impl Into<MetricId>, value: f64, unit: &str, better: Better) {
        if value.is_finite() {
            self.metrics.push(Metric { name: name.into(), value, unit: unit.to_string(), better });
        }
    }

    /// The metric called `name` (a [`MetricId`], or its name), if present.
    pub fn find_metric<N: ?Sized>(&self, name: &N) -> Option<&Metric>
    where
        MetricId: PartialEq<N>,
    {
        self.metrics.iter().find(|m| m.name == *name)
    }

    /// The spread measured for metric `name`, if any.
    pub fn spread<N: ?Sized>(&self, name: &N) -> Option<&Spread>
    where
        MetricId: PartialEq<N>,
    {
        self.spreads.iter().find(|s| s.metric == *name)
    }

    /// Records the spread of metric `name` from its samples (nothing when there are fewer than
    /// two, or one is not finite).
    pub fn set_spread(&mut self, name: impl Into<MetricId>, samples: &[f64], of: SpreadOf) {
        if let Some(sd) = linerate_model::stats::std_dev(samples) {
            let metric = name.into();
            self.spreads.retain(|s| s.metric != metric);
            self.spreads.push(Spread { metric, sd, n: samples.len() as u64, of });
        }
    }

    /// The bench test a run made (`tcp-stream`, `tcp-rr`), from its parameters.
    pub fn test_name(&self) -> Option<&str> {
        self.params.test.as_deref().or(self.params.kind.as_deref())
    }

    /// Whether the run is a request/response test, judged by transactions and latency.
    pub fn is_request_response(&self) -> bool {
        self.kind == RunKind::Bench && self.test_name().is_some_and(request_response)
    }

    /// Whether metric `name` is one the run is judged by: throughput for a stream test,
    /// transactions and the p50 and p99 latency for request/response (and for a sweep, the best
    /// point's too), elapsed time and rate for cp, the groups' rates and failed runs for lab, every pair for
    /// mesh. The other figures (retransmits, CPU, errors) are informational: `report compare`
    /// shows their change but never calls it a regression.
    pub fn is_goal(&self, name: &MetricId) -> bool {
        use linerate_model::doc::bench::LatencyFigure::{P50, P99};
        use MetricKind as K;
        match (self.kind, name.kind()) {
            (RunKind::Bench, K::Best(g) | K::Goal(g)) => *g == Goal::of(self.is_request_response()),
            (RunKind::Bench, K::Latency(l)) => self.is_request_response() && matches!(l, P50 | P99),
            (RunKind::Cp, K::Run(RunFigure::Seconds) | K::Goal(Goal::Throughput)) => true,
            (RunKind::Lab, K::Group(GroupFigure::Rate | GroupFigure::Failed, _)) => true,
            (RunKind::Mesh, _) => true,
            _ => false,
        }
    }

    /// The figure a run is summed up by: its first goal metric.
    pub fn headline(&self) -> Option<&Metric> {
        self.metrics.iter().find(|m| self.is_goal(&m.name))
    }
}

/// Whether a bench test name is a request/response test (`tcp-rr`, `tcp-crr`).
pub fn request_response(test: &str) -> bool {
    test.ends_with("-rr") || test.ends_with("-crr")
}

/// A new run id: UTC time to the second plus 6 hex digits of the clock's nanoseconds mixed with
/// the process id, e.g. `20261122-054716-3fa9c1`. Sortable by creation time.
pub fn new_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let (y, mo, d, h, mi, s) = crate::time::civil(now.as_secs());
    let mut x = u64::from(now.subsec_nanos())
        ^ (u64::from(std::process::id()) << 20)
        ^ COUNTER.fetch_add(1, Ordering::Relaxed).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    // splitmix64 finaliser, so consecutive ids differ in every digit
    x ^= x >> 30;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    format!("{y:04}{mo:02}{d:02}-{h:02}{mi:02}{s:02}-{:06x}", x & 0xff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_distinct_and_shaped() {
        let a = new_id();
        let b = new_id();
        assert_ne!(a, b);
        assert_eq!(a.len(), 22, "{a}");
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit() || c == b'-'), "{a}");
    }

    #[test]
    fn a_run_stored_with_free_form_parameters_still_reads() {
        let v = r#"{"schema": "linerate.run/1", "id": "x", "kind": "lab", "created": "2026-11-25T00:00:00Z",
            "title": "old", "tool_version": "0.1.0",
            "params": {"scenario": "qos", "lab": {"guests": 3}, "streams": "four", "run_id": "lr1"},
            "hosts": {"g1": {"cpus": 2}, "machine": {"kernel": "6.1", "cpus": 2}},
            "tables": [{"title": "t", "columns": ["a", "b", "c", "d"], "rows": [[1, 2.5, "x", null]]}],
            "body": {"lab": {"schema": "linerate.lab/9"}}}"#;
        let r = RunReport::from_json(serde_json::from_str(v).unwrap()).unwrap();
        assert_eq!(r.params.scenario.map(|s| s.name).as_deref(), Some("qos"), "a name alone is the scenario's");
        assert_eq!((r.params.lab, r.params.streams, r.params.run_id.as_deref()), (None, None, Some("lr1")));
        assert_eq!(r.hosts.machine.map(|m| m.cpus), Some(2));
        assert_eq!(r.tables[0].rows[0], [Cell::Int(1), Cell::Number(2.5), Cell::from("x"), Cell::Null]);
        assert_eq!(r.body, None, "a body this version cannot read is left out");
    }

    #[test]
    fn parameters_and_cells_write_as_the_free_form_ones_did() {
        let mut r = RunReport::new(RunKind::Bench, "b");
        (r.params.test, r.params.connections, r.params.rate) = (Some("tcp-stream".into()), Some(4), Some(1_000_000));
        r.tables.push(Table {
            title: "t".into(),
            columns: vec!["a".into(), "b".into()],
            rows: vec![vec![3u64.into(), Cell::Null]],
        });
        let v = serde_json::to_value(&r).unwrap();
        let text = |x: &Value| serde_json::to_string(x).unwrap();
        assert_eq!(text(&v["params"]), r#"{"connections":4,"rate":1000000,"test":"tcp-stream"}"#);
        assert_eq!(text(&v["tables"][0]["rows"]), "[[3,null]]");
        assert_eq!(text(&v["hosts"]), "{}");
        assert!(v.get("body").is_none(), "no body: left out");
        assert_eq!(r.params.entries().len(), 3);
    }

    #[test]
    fn rejects_an_unknown_schema_string() {
        let json = |s: &str| serde_json::from_str::<Value>(s).unwrap();
        let e = RunReport::from_json(json(r#"{"schema": "linerate.run/0"}"#)).unwrap_err();
        assert!(matches!(e, ReportError::UnknownSchema(s) if s == "linerate.run/0"));
        let e = RunReport::from_json(json(r#"{"id": "x"}"#)).unwrap_err();
        assert!(matches!(e, ReportError::UnknownSchema(_)));
    }
}
