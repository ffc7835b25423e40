//! `linerate.bench/1` → run: headline metrics from the summary, a time series of the
//! intervals, per-connection fairness bars, the latency distribution, and for a sweep line
//! charts of throughput, transactions and CPU against the swept parameter with a table.

use super::{num, push_point, stamp};
use crate::model::*;
use crate::ReportError;
use linerate_model::doc::bench::{
    BenchConnection, BenchDocument, BenchInterval, BenchSummary, BenchTest, Latency, SweepParam, BENCH_SCHEMA,
};
use linerate_model::units::significant;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// The figures of one bench summary that become metrics and table cells. Built from a typed
/// summary, where each is present as the document has it; [`super::legacy`] builds it from the
/// contract sample, which carried fewer.
#[derive(Debug, Clone, Default)]
pub(crate) struct Figures {
    pub throughput: Option<f64>,
    pub transactions: Option<f64>,
    pub jain: Option<f64>,
    pub loss: Option<f64>,
    /// `latency.NAME` metrics, in name order.
    pub latency: Vec<(&'static str, f64)>,
    pub p99: Option<f64>,
    pub packets: Option<f64>,
    pub jitter: Option<f64>,
    pub rtt: Option<f64>,
    pub retransmits: Option<f64>,
    /// Service demand per KB and per transaction, local then remote.
    pub service_demand: [Option<f64>; 2],
    pub service_demand_tran: [Option<f64>; 2],
    /// Busy CPU share (user + system + softirq + irq), local then remote.
    pub cpu: [Option<f64>; 2],
}

impl From<&BenchSummary> for Figures {
    fn from(s: &BenchSummary) -> Figures {
        Figures {
            throughput: Some(s.throughput_bps),
            transactions: s.transactions_per_s,
            jain: s.jain,
            loss: s.loss_pct,
            latency: s.latency_us.as_ref().map(|l| l.figures().to_vec()).unwrap_or_default(),
            p99: s.latency_us.as_ref().map(|l| l.p99),
            packets: s.packets_per_s,
            jitter: s.jitter_us,
            rtt: s.rtt_us,
            retransmits: Some(s.retransmits as f64),
            service_demand: [Some(s.service_demand_us_per_kb.local), Some(s.service_demand_us_per_kb.remote)],
            service_demand_tran: [
                s.service_demand_us_per_tran.map(|p| p.local),
                s.service_demand_us_per_tran.map(|p| p.remote),
            ],
            cpu: [Some(s.cpu.local.busy()), Some(s.cpu.remote.busy())],
        }
    }
}

/// What a bench run's report is made of, from a typed document or a legacy one.
pub(crate) struct BenchParts {
    /// The test's name (`tcp-stream`).
    pub name: String,
    /// The agent it ran against.
    pub target: Option<String>,
    pub params: BTreeMap<String, Value>,
    pub hosts: Value,
    /// Start time and linerate version, when the document has them.
    pub stamp: Option<(u64, String)>,
    pub figures: Option<Figures>,
    /// The latency distribution: (percentile, µs).
    pub latency: Vec<[f64; 2]>,
    pub intervals: Vec<BenchInterval>,
    pub connections: Vec<BenchConnection>,
    /// The swept parameters, the x axis first.
    pub sweep: Vec<SweepParam>,
    pub points: Vec<(BenchTest, Figures)>,
}

/// `linerate bench --json` → run.
pub fn from_bench(doc: &BenchDocument) -> Result<RunReport, ReportError> {
    if doc.schema != BENCH_SCHEMA {
        return Err(ReportError::UnknownSchema(doc.schema.clone()));
    }
    let points: Vec<(BenchTest, Figures)> = doc.points.iter().map(|p| (p.test.clone(), (&p.summary).into())).collect();
    let sweep = match &doc.sweep {
        Some(s) => s.clone(),
        // written before `sweep` existed: the parameters whose values differ between points
        None => super::legacy::varying(points.iter().map(|(t, _)| t)),
    };
    Ok(bench_report(BenchParts {
        name: doc.test.as_ref().map_or_else(|| "bench".into(), |t| t.test.clone()),
        target: doc.test.as_ref().map(|t| t.server.clone()),
        params: doc.test.as_ref().map(test_params).unwrap_or_default(),
        hosts: json!({"local": doc.hosts.local, "remote": doc.hosts.remote}),
        stamp: Some((doc.started_unix_s, doc.tool.version.clone())),
        figures: doc.summary.as_ref().map(Figures::from),
        latency: doc.summary.as_ref().and_then(|s| s.latency_us.as_ref()).map(latency_points).unwrap_or_default(),
        intervals: doc.intervals.clone().unwrap_or_default(),
        connections: doc.connections.clone().unwrap_or_default(),
        sweep,
        points,
    }))
}

/// A test's fields as run parameters.
fn test_params(t: &BenchTest) -> BTreeMap<String, Value> {
    match serde_json::to_value(t) {
        Ok(Value::Object(o)) => o.into_iter().collect(),
        _ => BTreeMap::new(),
    }
}

/// The distribution to plot: the HDR `curve` when it has two points or more (the 100th
/// percentile left out: it has no place on a nines axis), else p50, p90, p99 and p99.9.
pub(crate) fn latency_points(l: &Latency) -> Vec<[f64; 2]> {
    let curve: Vec<[f64; 2]> =
        l.curve.iter().map(|c| [c.percentile, c.us]).filter(|p| (0.0..100.0).contains(&p[0])).collect();
    if curve.len() >= 2 {
        curve
    } else {
        vec![[50.0, l.p50], [90.0, l.p90], [99.0, l.p99], [99.9, l.p999]]
    }
}

/// A line of rates over time, at the middle of each interval.
pub(crate) fn intervals_line(name: &str, intervals: impl IntoIterator<Item = (f64, f64, f64)>) -> Option<Line> {
    let points: Vec<[f64; 2]> = intervals.into_iter().map(|(start, end, bps)| [(start + end) / 2.0, bps]).collect();
    (!points.is_empty()).then(|| Line { name: name.to_string(), points })
}

/// One bar per connection, labelled `#ID`.
pub(crate) fn flows_of(connections: &[BenchConnection]) -> Vec<Bar> {
    connections.iter().map(|c| Bar { label: format!("#{}", c.id), value: c.bps }).collect()
}

/// Headline metrics of a summary's figures.
fn summary_metrics(r: &mut RunReport, f: &Figures) {
    let opt = |r: &mut RunReport, name: &str, x: Option<f64>, unit: &str, better: Better| {
        if let Some(x) = x {
            r.metric(name, x, unit, better);
        }
    };
    opt(r, "throughput", f.throughput, "bit/s", Better::Higher);
    opt(r, "transactions", f.transactions, "1/s", Better::Higher);
    opt(r, "jain", f.jain, "", Better::Higher);
    opt(r, "loss", f.loss, "%", Better::Lower);
    for (k, x) in &f.latency {
        r.metric(&format!("latency.{k}"), *x, "us", Better::Lower);
    }
    opt(r, "packets", f.packets, "1/s", Better::Higher);
    opt(r, "jitter", f.jitter, "us", Better::Lower);
    opt(r, "rtt", f.rtt, "us", Better::Lower);
    opt(r, "retransmits", f.retransmits, "", Better::Lower);
    for (i, side) in ["local", "remote"].into_iter().enumerate() {
        // netperf's service demand: CPU microseconds per KB moved, per transaction
        opt(r, &format!("service_demand.{side}"), f.service_demand[i], "us/KB", Better::Lower);
        opt(r, &format!("service_demand_tran.{side}"), f.service_demand_tran[i], "us", Better::Lower);
    }
    for (i, side) in ["local", "remote"].into_iter().enumerate() {
        if let Some(c) = f.cpu[i] {
            r.metric(&format!("cpu.{side}"), c * 100.0, "%", Better::Lower);
            if let Some(bps) = f.throughput.filter(|b| *b > 0.0) {
                r.metric(&format!("cpu.{side}.per_gbit"), c * 100.0 / (bps / 1e9), "%", Better::Lower);
            }
        }
    }
}

/// The report of a bench run.
pub(crate) fn bench_report(p: BenchParts) -> RunReport {
    let mut r = RunReport::new(
        RunKind::Bench,
        match &p.target {
            Some(t) => format!("bench {} to {t}", p.name),
            None => format!("bench {}", p.name),
        },
    );
    r.params = p.params;
    r.hosts = p.hosts;
    if let Some((t, v)) = &p.stamp {
        stamp(&mut r, *t, v);
    }
    if let Some(f) = &p.figures {
        summary_metrics(&mut r, f);
    }
    if let Some(line) = intervals_line("total", p.intervals.iter().map(|i| (i.start_s, i.end_s, i.bps))) {
        r.charts.series.push(TimeChart {
            title: "Throughput over time".into(),
            unit: "bit/s".into(),
            lines: vec![line],
            guarantees: Vec::new(),
        });
    }
    let flows = flows_of(&p.connections);
    if !flows.is_empty() {
        let jain = p.figures.as_ref().and_then(|f| f.jain);
        r.charts.flows.push(FlowChart { title: "Per-connection throughput".into(), unit: "bit/s".into(), flows, jain });
    }
    if !p.latency.is_empty() {
        let mut points = p.latency;
        points.sort_by(|a, b| a[0].total_cmp(&b[0]));
        r.charts.latency.push(LatencyChart {
            title: "Latency percentiles".into(),
            lines: vec![Line { name: p.name.clone(), points }],
        });
    }
    if p.points.len() >= 2 {
        sweep_charts(&mut r, &p.name, &p.sweep, &p.points);
    }
    r
}

/// A number cell: an integer when the value is one.
fn count_cell(x: f64) -> Value {
    if x.fract() == 0.0 && x.abs() < 9e15 {
        json!(x as i64)
    } else {
        json!(x)
    }
}

/// Sweep points → throughput, transactions and CPU against the first swept parameter (one
/// line per value of the others that vary), and a table with CPU.
fn sweep_charts(r: &mut RunReport, name: &str, sweep: &[SweepParam], points: &[(BenchTest, Figures)]) {
    let key = sweep.first().copied();
    let x_of = |i: usize| key.and_then(|k| k.value(&points[i].0)).unwrap_or((i + 1) as f64);
    let varies = |k: SweepParam| {
        let vals: Vec<Option<f64>> = points.iter().map(|(t, _)| k.value(t)).collect();
        vals.windows(2).any(|w| w[0] != w[1])
    };
    let others: Vec<SweepParam> = sweep.iter().skip(1).copied().filter(|k| varies(*k)).collect();
    let series = |i: usize| -> String {
        if others.is_empty() {
            return name.to_string();
        }
        others
            .iter()
            .map(|k| format!("{}={}", k.name(), k.value(&points[i].0).map_or("?".into(), |x| significant(x, 6))))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let axis = |k: SweepParam| Axis { label: k.name().replace('_', " "), unit: k.unit().into() };
    let x_axis = key.map_or(Axis { label: "point".into(), unit: String::new() }, axis);
    let (mut thr, mut tps, mut cpu) = (Vec::new(), Vec::new(), Vec::new());
    let mut rows = Vec::new();
    for (i, (test, f)) in points.iter().enumerate() {
        let (x, line) = (x_of(i), series(i));
        let [cl, cr] = f.cpu.map(|c| c.map(|c| c * 100.0));
        let suffix = if others.is_empty() { String::new() } else { format!(" {line}") };
        if let Some(b) = f.throughput {
            push_point(&mut thr, &line, [x, b]);
        }
        if let Some(t) = f.transactions {
            push_point(&mut tps, &line, [x, t]);
        }
        if let Some(c) = cl {
            push_point(&mut cpu, &format!("local CPU{suffix}"), [x, c]);
        }
        if let Some(c) = cr {
            push_point(&mut cpu, &format!("remote CPU{suffix}"), [x, c]);
        }
        let mut row = vec![json!(x)];
        row.extend(others.iter().map(|k| k.value(test).map_or(Value::Null, count_cell)));
        row.extend([num(f.throughput), num(f.transactions), num(f.p99), num(cl), num(cr), num(f.jain)]);
        rows.push(row);
    }
    let xl = x_axis.label.clone();
    for (lines, title, y) in [
        (thr, "Throughput", Axis { label: "throughput".into(), unit: "bit/s".into() }),
        (tps, "Transactions", Axis { label: "transactions".into(), unit: "1/s".into() }),
        (cpu, "CPU", Axis { label: "CPU".into(), unit: "%".into() }),
    ] {
        if !lines.is_empty() {
            r.charts.xy.push(XyChart { title: format!("{title} against {xl}"), x: x_axis.clone(), y, lines });
        }
    }
    let heading = |a: Axis| if a.unit.is_empty() { a.label } else { format!("{} ({})", a.label, a.unit) };
    let mut columns = vec![heading(x_axis.clone())];
    columns.extend(others.iter().map(|k| heading(axis(*k))));
    columns.extend(
        ["throughput (bit/s)", "transactions (1/s)", "p99 latency (us)", "local CPU (%)", "remote CPU (%)", "Jain"]
            .map(String::from),
    );
    r.tables.push(Table { title: format!("Sweep over {xl}"), columns, rows });
    if let Some(k) = key {
        r.params.insert("sweep".into(), json!(k.name()));
    }
}
