//! The `RunReport` document ("linerate.run/1"): one run of `cp`, `bench`, `lab` or `mesh`, with its
//! parameters, hosts, headline figures and chart data. Documented in docs/REPORT_SCHEMA.md and
//! described by docs/schema/run-v1.schema.json; outside scripts rely on it, so fields are only
//! ever added, and a breaking change gets a new schema string.

use crate::ReportError;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

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
    /// Parameters of the run (flags, scenario settings), name → JSON value.
    #[serde(default)]
    pub params: BTreeMap<String, Value>,
    /// Host metadata, free-form (for instance `{"local":{...},"remote":{...}}`).
    #[serde(default)]
    pub hosts: Value,
    /// Headline figures; `report compare` compares these by name.
    #[serde(default)]
    pub metrics: Vec<Metric>,
    /// Chart data.
    #[serde(default)]
    pub charts: Charts,
    /// Free tables (connection scaling with CPU, per-run listings).
    #[serde(default)]
    pub tables: Vec<Table>,
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
    /// Stable name, dotted (`throughput`, `latency.p99`, `cpu.local`).
    pub name: String,
    /// The value in `unit` (no SI prefix: bit/s, not Gbit/s).
    pub value: f64,
    /// Unit: `bit/s`, `B`, `s`, `us`, `%`, `1/s`, or empty for a ratio.
    pub unit: String,
    /// Which direction is an improvement.
    pub better: Better,
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
    pub rows: Vec<Vec<Value>>,
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
            params: BTreeMap::new(),
            hosts: Value::Object(Default::default()),
            metrics: Vec::new(),
            charts: Charts::default(),
            tables: Vec::new(),
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
    pub fn metric(&mut self, name: &str, value: f64, unit: &str, better: Better) {
        if value.is_finite() {
            self.metrics.push(Metric { name: name.to_string(), value, unit: unit.to_string(), better });
        }
    }

    /// The metric called `name`, if present.
    pub fn find_metric(&self, name: &str) -> Option<&Metric> {
        self.metrics.iter().find(|m| m.name == name)
    }

    /// The bench test a run made (`tcp-stream`, `tcp-rr`), from its parameters.
    pub fn test_name(&self) -> Option<&str> {
        self.params.get("test").or_else(|| self.params.get("kind")).and_then(Value::as_str)
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
    pub fn is_goal(&self, name: &str) -> bool {
        match self.kind {
            RunKind::Bench if self.is_request_response() => {
                matches!(name, "transactions.best" | "transactions" | "latency.p50" | "latency.p99")
            }
            RunKind::Bench => matches!(name, "throughput.best" | "throughput"),
            RunKind::Cp => matches!(name, "seconds" | "throughput"),
            RunKind::Lab => name.starts_with("rate.") || name.starts_with(crate::convert::lab::FAILED_PREFIX),
            RunKind::Mesh => true,
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
    fn rejects_an_unknown_schema_string() {
        let e = RunReport::from_json(serde_json::json!({"schema": "linerate.run/0"})).unwrap_err();
        assert!(matches!(e, ReportError::UnknownSchema(s) if s == "linerate.run/0"));
        let e = RunReport::from_json(serde_json::json!({"id": "x"})).unwrap_err();
        assert!(matches!(e, ReportError::UnknownSchema(_)));
    }
}
