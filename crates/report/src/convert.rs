//! Converters from the JSON documents the tools print (`cp --json`, `bench --json`
//! "linerate.bench/1", `lab run --json` "linerate.lab/1") to a [`RunReport`]. They take
//! `serde_json::Value`s so this crate does not depend on the engine or the lab, and they are
//! defensive: a missing or mistyped field leaves its figure out instead of failing.

use crate::model::*;
use crate::ReportError;
use linerate_model::units::{format_si, significant};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// Any document this crate knows: a stored run ("linerate.run/1"), a bench or lab document,
/// or a cp summary (recognised by its `bytes`, `files` and `gbit_per_s` fields).
pub fn from_json(v: Value) -> Result<RunReport, ReportError> {
    match v.get("schema").and_then(Value::as_str) {
        Some(SCHEMA) => RunReport::from_json(v),
        Some("linerate.bench/1") => from_bench_json(&v),
        Some("linerate.lab/1") => from_lab_json(&v),
        Some(other) => Err(ReportError::UnknownSchema(other.to_string())),
        None if v.get("gbit_per_s").is_some() && v.get("bytes").is_some() => from_cp_json(&v),
        None => Err(ReportError::UnknownSchema(String::new())),
    }
}

fn f(v: &Value, path: &[&str]) -> Option<f64> {
    let mut cur = v;
    for p in path {
        cur = cur.get(p)?;
    }
    cur.as_f64().filter(|x| x.is_finite())
}

fn obj(v: &Value) -> Option<&Map<String, Value>> {
    v.as_object()
}

/// First of several alternative field names that holds a finite number.
fn f_any(v: &Value, names: &[&str]) -> Option<f64> {
    names.iter().find_map(|n| f(v, &[n]))
}

fn s_any<'a>(v: &'a Value, names: &[&str]) -> Option<&'a str> {
    names.iter().find_map(|n| v.get(n).and_then(Value::as_str))
}

/// `linerate cp --json` summary → run. The throughput comes from `gbit_per_s` (or bytes and
/// seconds); CPU seconds of both sides become metrics and a bar chart.
pub fn from_cp_json(v: &Value) -> Result<RunReport, ReportError> {
    if !v.is_object() || (v.get("bytes").is_none() && v.get("gbit_per_s").is_none()) {
        return Err(ReportError::Invalid("not a cp summary: it has neither 'bytes' nor 'gbit_per_s'".into()));
    }
    let bytes = f(v, &["bytes"]);
    let secs = f(v, &["seconds"]);
    let bps = f(v, &["gbit_per_s"]).map(|g| g * 1e9).or_else(|| match (bytes, secs) {
        (Some(b), Some(s)) if s > 0.0 => Some(b * 8.0 / s),
        _ => None,
    });
    let files = f(v, &["files"]).unwrap_or(0.0);
    let mut r = RunReport::new(
        RunKind::Cp,
        format!("cp: {} files, {} in {}", files, si(bytes.unwrap_or(0.0), "B"), si(secs.unwrap_or(0.0), "s")),
    );
    for k in ["bytes", "files", "dirs", "links", "streams", "cipher", "complete"] {
        if let Some(x) = v.get(k) {
            r.params.insert(k.to_string(), x.clone());
        }
    }
    if let Some(h) = v.get("hosts") {
        r.hosts = h.clone();
    }
    if let Some(b) = bps {
        r.metric("throughput", b, "bit/s", Better::Higher);
    }
    if let Some(s) = secs {
        r.metric("seconds", s, "s", Better::Lower);
    }
    let mut cpu_bars = Vec::new();
    for side in ["client", "server"] {
        let user = f(v, &["cpu", side, "user_s"]);
        let sys = f(v, &["cpu", side, "system_s"]);
        if user.is_some() || sys.is_some() {
            let total = user.unwrap_or(0.0) + sys.unwrap_or(0.0);
            r.metric(&format!("cpu.{side}"), total, "s", Better::Lower);
            if let Some(b) = bps.filter(|b| *b > 0.0) {
                if let Some(s) = secs {
                    // CPU seconds per gigabit moved: the cost figure the studies compare
                    r.metric(&format!("cpu.{side}.per_gbit"), total / (b * s / 1e9), "s", Better::Lower);
                }
            }
            cpu_bars.push(Bar { label: format!("{side} user"), value: user.unwrap_or(0.0) });
            cpu_bars.push(Bar { label: format!("{side} system"), value: sys.unwrap_or(0.0) });
        }
        if let Some(rss) = f(v, &["peak_rss_bytes", side]) {
            r.metric(&format!("peak_rss.{side}"), rss, "B", Better::Lower);
        }
    }
    let errors = f(v, &["errors", "local"]).unwrap_or(0.0) + f(v, &["errors", "remote"]).unwrap_or(0.0);
    if v.get("errors").is_some() {
        r.metric("errors", errors, "", Better::Lower);
    }
    if !cpu_bars.is_empty() {
        r.charts.bars.push(BarChart { title: "CPU time".into(), unit: "s".into(), bars: cpu_bars, ceiling: None });
    }
    if let Some(b) = bps {
        r.charts.bars.push(BarChart {
            title: "Copy throughput".into(),
            unit: "bit/s".into(),
            bars: vec![Bar { label: "linerate cp".into(), value: b }],
            ceiling: None,
        });
    }
    Ok(r)
}

/// Takes the run's start time and linerate version from the document when it has them.
fn stamp(r: &mut RunReport, v: &Value, time_keys: &[&str]) {
    if let Some(t) = time_keys.iter().find_map(|k| v.get(k).and_then(Value::as_u64)).filter(|t| *t > 0) {
        r.created = crate::time::rfc3339(t);
    }
    if let Some(ver) = v.get("tool").and_then(|t| t.get("version")).and_then(Value::as_str) {
        r.tool_version = ver.to_string();
    }
}

/// Headline metrics of a bench `summary` object, with `prefix` before each name.
fn bench_summary_metrics(r: &mut RunReport, s: &Value) {
    if let Some(x) = f(s, &["throughput_bps"]) {
        r.metric("throughput", x, "bit/s", Better::Higher);
    }
    if let Some(x) = f(s, &["transactions_per_s"]) {
        r.metric("transactions", x, "1/s", Better::Higher);
    }
    if let Some(x) = f(s, &["jain"]) {
        r.metric("jain", x, "", Better::Higher);
    }
    if let Some(x) = f(s, &["loss_pct"]) {
        r.metric("loss", x, "%", Better::Lower);
    }
    if let Some(lat) = s.get("latency_us").and_then(obj) {
        for (k, val) in lat {
            // `count` is a sample count and `curve` the plot, not latencies
            if let Some(x) = val.as_f64().filter(|x| x.is_finite() && k != "count") {
                r.metric(&format!("latency.{k}"), x, "us", Better::Lower);
            }
        }
    }
    for (key, name, unit, better) in [
        ("packets_per_s", "packets", "1/s", Better::Higher),
        ("jitter_us", "jitter", "us", Better::Lower),
        ("rtt_us", "rtt", "us", Better::Lower),
        ("retransmits", "retransmits", "", Better::Lower),
    ] {
        if let Some(x) = f(s, &[key]) {
            r.metric(name, x, unit, better);
        }
    }
    for side in ["local", "remote"] {
        // netperf's service demand: CPU microseconds per KB moved, per transaction
        if let Some(x) = f(s, &["service_demand_us_per_kb", side]) {
            r.metric(&format!("service_demand.{side}"), x, "us/KB", Better::Lower);
        }
        if let Some(x) = f(s, &["service_demand_us_per_tran", side]) {
            r.metric(&format!("service_demand_tran.{side}"), x, "us", Better::Lower);
        }
    }
    for side in ["local", "remote"] {
        if let Some(c) = cpu_total(s, side) {
            r.metric(&format!("cpu.{side}"), c * 100.0, "%", Better::Lower);
            if let Some(bps) = f(s, &["throughput_bps"]).filter(|b| *b > 0.0) {
                r.metric(&format!("cpu.{side}.per_gbit"), c * 100.0 / (bps / 1e9), "%", Better::Lower);
            }
        }
    }
}

/// user + system + softirq + irq of one side, as a fraction of the machine.
fn cpu_total(summary: &Value, side: &str) -> Option<f64> {
    let c = summary.get("cpu")?.get(side)?;
    let parts: Vec<f64> = ["user", "system", "softirq", "irq"].iter().filter_map(|k| f(c, &[k])).collect();
    (!parts.is_empty()).then(|| parts.iter().sum())
}

/// Percentile of a key like `p50`, `p999` (99.9), `p9999` (99.99) or `p99.9`.
fn percentile_of(key: &str) -> Option<f64> {
    let d = key.strip_prefix('p')?;
    if d.contains('.') {
        return d.parse().ok().filter(|p: &f64| *p > 0.0 && *p < 100.0);
    }
    if d.is_empty() || !d.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let p: f64 = if d.len() <= 2 { d.parse().ok()? } else { format!("{}.{}", &d[..2], &d[2..]).parse().ok()? };
    (p > 0.0 && p < 100.0).then_some(p)
}

/// The latency distribution: bench's `curve` of `{percentile, us}` when present (the
/// 100th percentile left out: it has no place on a nines axis), else the `pNN` keys.
fn latency_line(name: &str, lat: &Value) -> Option<Line> {
    let curve: Vec<[f64; 2]> = lat
        .get("curve")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|p| Some([f(p, &["percentile"])?, f(p, &["us"])?]))
                .filter(|p| (0.0..100.0).contains(&p[0]))
                .collect()
        })
        .unwrap_or_default();
    let mut pts: Vec<[f64; 2]> = if curve.len() >= 2 {
        curve
    } else {
        obj(lat)?.iter().filter_map(|(k, v)| Some([percentile_of(k)?, v.as_f64().filter(|x| x.is_finite())?])).collect()
    };
    pts.sort_by(|a, b| a[0].total_cmp(&b[0]));
    (!pts.is_empty()).then(|| Line { name: name.to_string(), points: pts })
}

fn intervals_line(name: &str, intervals: &Value) -> Option<Line> {
    let pts: Vec<[f64; 2]> = intervals
        .as_array()?
        .iter()
        .filter_map(|i| {
            let end = f(i, &["end_s"])?;
            let start = f(i, &["start_s"]).unwrap_or(end);
            Some([(start + end) / 2.0, f_any(i, &["bps", "throughput_bps"])?])
        })
        .collect();
    (!pts.is_empty()).then(|| Line { name: name.to_string(), points: pts })
}

fn flows_of(connections: &Value) -> Vec<Bar> {
    connections
        .as_array()
        .map(|a| {
            a.iter()
                .enumerate()
                .filter_map(|(i, c)| {
                    let id = c.get("id").and_then(Value::as_u64).unwrap_or(i as u64);
                    let label = s_any(c, &["name", "label"]).map_or_else(|| format!("#{id}"), str::to_string);
                    Some(Bar { label, value: f_any(c, &["bps", "throughput_bps"])? })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Preferred x axes for sweeps, in order, then any other numeric parameter that varies.
const SWEEP_KEYS: &[&str] =
    &["connections", "parallel", "guests", "msg_size", "message_size", "sndbuf", "resp_size", "rate"];

fn axis_label(key: &str) -> Axis {
    let unit = match key {
        "msg_size" | "message_size" | "sndbuf" | "rcvbuf" | "resp_size" => "B",
        "rate" | "rate_bps" => "bit/s",
        "duration" | "duration_s" => "s",
        _ => "",
    };
    Axis { label: key.replace('_', " "), unit: unit.into() }
}

/// The numeric parameter that varies across `params` objects, if any: one of `SWEEP_KEYS`
/// first, then any other.
fn varying_key(params: &[&Value]) -> Option<String> {
    let mut keys: Vec<String> = Vec::new();
    for p in params {
        if let Some(o) = obj(p) {
            for (k, v) in o {
                if v.is_number() && !keys.contains(k) {
                    keys.push(k.clone());
                }
            }
        }
    }
    let varies = |k: &str| {
        let vals: Vec<Option<f64>> = params.iter().map(|p| p.get(k).and_then(Value::as_f64)).collect();
        vals.iter().all(Option::is_some) && vals.windows(2).any(|w| w[0] != w[1])
    };
    SWEEP_KEYS
        .iter()
        .map(|s| s.to_string())
        .filter(|k| keys.contains(k))
        .chain(keys.iter().cloned())
        .find(|k| varies(k))
}

fn num(x: Option<f64>) -> Value {
    x.map_or(Value::Null, |v| json!(v))
}

/// A point's numeric parameters: its test spec's, then its sweep labels' (which win).
fn point_params(p: &Value) -> Value {
    let mut m = Map::new();
    for src in [p.get("test"), p.get("params")].into_iter().flatten() {
        if let Some(o) = obj(src) {
            m.extend(o.iter().filter(|(_, v)| v.is_number()).map(|(k, v)| (k.clone(), v.clone())));
        }
    }
    Value::Object(m)
}

/// Adds a named point to the line of that name, creating it.
fn push_point(lines: &mut Vec<Line>, name: &str, p: [f64; 2]) {
    match lines.iter_mut().find(|l| l.name == name) {
        Some(l) => l.points.push(p),
        None => lines.push(Line { name: name.to_string(), points: vec![p] }),
    }
}

/// Sweep points → throughput, transactions and CPU against the parameter that varies (one
/// line per value of any other varied parameter), and a table with CPU.
fn sweep_charts(r: &mut RunReport, name: &str, points: &[&Value]) {
    let merged: Vec<Value> = points.iter().map(|p| point_params(p)).collect();
    let refs: Vec<&Value> = merged.iter().collect();
    let key = varying_key(&refs);
    let x_of = |i: usize| -> f64 {
        key.as_ref().and_then(|k| merged[i].get(k.as_str())).and_then(Value::as_f64).unwrap_or((i + 1) as f64)
    };
    // the other varied parameters that x does not already determine name the lines
    let others: Vec<String> = obj(&merged[0])
        .map(|o| o.keys().cloned().collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter(|k| Some(k) != key.as_ref())
        .filter(|k| {
            let vals: Vec<Option<f64>> = merged.iter().map(|m| m.get(k.as_str()).and_then(Value::as_f64)).collect();
            let varies = vals.windows(2).any(|w| w[0] != w[1]);
            let determined =
                (0..merged.len()).all(|i| (0..merged.len()).all(|j| x_of(i) != x_of(j) || vals[i] == vals[j]));
            varies && !determined
        })
        .collect();
    let series = |i: usize| -> String {
        if others.is_empty() {
            return name.to_string();
        }
        others
            .iter()
            .map(|k| {
                format!(
                    "{k}={}",
                    merged[i].get(k.as_str()).and_then(Value::as_f64).map_or("?".into(), |x| significant(x, 6))
                )
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    let x_axis = key.as_deref().map_or(Axis { label: "point".into(), unit: String::new() }, axis_label);
    let (mut thr, mut tps, mut cpu) = (Vec::new(), Vec::new(), Vec::new());
    let mut rows = Vec::new();
    for (i, p) in points.iter().enumerate() {
        let s = p.get("summary").unwrap_or(&Value::Null);
        let (x, line) = (x_of(i), series(i));
        let b = f(s, &["throughput_bps"]);
        let t = f(s, &["transactions_per_s"]);
        let cl = cpu_total(s, "local").map(|c| c * 100.0);
        let cr = cpu_total(s, "remote").map(|c| c * 100.0);
        let suffix = if others.is_empty() { String::new() } else { format!(" {line}") };
        if let Some(b) = b {
            push_point(&mut thr, &line, [x, b]);
        }
        if let Some(t) = t {
            push_point(&mut tps, &line, [x, t]);
        }
        if let Some(c) = cl {
            push_point(&mut cpu, &format!("local CPU{suffix}"), [x, c]);
        }
        if let Some(c) = cr {
            push_point(&mut cpu, &format!("remote CPU{suffix}"), [x, c]);
        }
        let mut row = vec![json!(x)];
        row.extend(others.iter().map(|k| merged[i].get(k.as_str()).cloned().unwrap_or(Value::Null)));
        row.extend([num(b), num(t), num(f(s, &["latency_us", "p99"])), num(cl), num(cr), num(f(s, &["jain"]))]);
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
    let mut columns = vec![if x_axis.unit.is_empty() { xl.clone() } else { format!("{xl} ({})", x_axis.unit) }];
    columns.extend(others.iter().map(|k| axis_label(k)).map(|a| {
        if a.unit.is_empty() {
            a.label
        } else {
            format!("{} ({})", a.label, a.unit)
        }
    }));
    columns.extend(
        ["throughput (bit/s)", "transactions (1/s)", "p99 latency (us)", "local CPU (%)", "remote CPU (%)", "Jain"]
            .map(String::from),
    );
    r.tables.push(Table { title: format!("Sweep over {xl}"), columns, rows });
    if let Some(k) = key {
        r.params.insert("sweep".into(), json!(k));
    }
}

/// `linerate bench --json` ("linerate.bench/1") → run. Sweep points become line charts
/// (throughput and CPU against the varied parameter) and a table; intervals a time series;
/// connections per-flow fairness bars; latency percentiles an HDR-style plot.
pub fn from_bench_json(v: &Value) -> Result<RunReport, ReportError> {
    match v.get("schema").and_then(Value::as_str) {
        Some("linerate.bench/1") => {}
        other => return Err(ReportError::UnknownSchema(other.unwrap_or("").to_string())),
    }
    let test = v.get("test").cloned().unwrap_or(Value::Null);
    let name = s_any(&test, &["test", "name", "kind"]).unwrap_or("bench");
    let target = s_any(&test, &["host", "target", "server"]);
    let mut r = RunReport::new(
        RunKind::Bench,
        match target {
            Some(t) => format!("bench {name} to {t}"),
            None => format!("bench {name}"),
        },
    );
    if let Some(o) = obj(&test) {
        r.params = o.iter().map(|(k, v)| (k.clone(), v.clone())).collect::<BTreeMap<_, _>>();
    }
    if let Some(h) = v.get("hosts") {
        r.hosts = h.clone();
    }
    stamp(&mut r, v, &["started_unix_s", "started_unix"]);
    let summary = v.get("summary").cloned().unwrap_or(Value::Null);
    bench_summary_metrics(&mut r, &summary);
    if let Some(c) = f(&summary, &["connections"]) {
        r.params.entry("connections".into()).or_insert(json!(c));
    }

    if let Some(line) = v.get("intervals").and_then(|i| intervals_line("total", i)) {
        r.charts.series.push(TimeChart {
            title: "Throughput over time".into(),
            unit: "bit/s".into(),
            lines: vec![line],
            guarantees: Vec::new(),
        });
    }
    let flows = v.get("connections").map(flows_of).unwrap_or_default();
    if !flows.is_empty() {
        let jain = f(&summary, &["jain"]);
        r.charts.flows.push(FlowChart { title: "Per-connection throughput".into(), unit: "bit/s".into(), flows, jain });
    }
    if let Some(line) = summary.get("latency_us").and_then(|l| latency_line(name, l)) {
        r.charts.latency.push(LatencyChart { title: "Latency percentiles".into(), lines: vec![line] });
    }

    let points: Vec<&Value> = v.get("points").and_then(Value::as_array).map(|a| a.iter().collect()).unwrap_or_default();
    if points.len() >= 2 {
        sweep_charts(&mut r, name, &points);
    }
    Ok(r)
}

/// Median of a non-empty slice.
fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
}

/// The CPU of one side of a lab run as a percentage of the machine: a number (fraction ≤ 1 or
/// a percentage), or an object with `local`/`remote` parts of `user`/`system`/`softirq`/`irq`
/// fractions as bench and iperf3 give them (cp's CPU seconds are not a share and are skipped).
fn lab_cpu_pct(run: &Value, side: &str) -> Option<f64> {
    let raw = run.get("raw").and_then(|r| r.get("summary"));
    let Some(c) = run.get("cpu").or_else(|| run.get("cpu_pct")).filter(|c| !c.is_null()) else {
        return raw.and_then(|s| cpu_total(s, side)).map(|c| c * 100.0);
    };
    if let Some(x) = c.as_f64().filter(|x| x.is_finite()) {
        return (side == "local").then_some(if run.get("cpu_pct").is_some() || x > 1.0 { x } else { x * 100.0 });
    }
    let part = c.get(side).or_else(|| (side == "local").then_some(c))?;
    let parts: Vec<f64> = ["user", "system", "softirq", "irq"].iter().filter_map(|k| f(part, &[k])).collect();
    (!parts.is_empty()).then(|| parts.iter().sum::<f64>() * 100.0)
}

fn is_ceiling_tool(tool: &str) -> bool {
    let t = tool.to_ascii_lowercase();
    t == "iperf3" || t == "netperf" || t == "ceiling" || t.starts_with("iperf")
}

/// A lab run's measured rate, if it succeeded.
fn lab_rate(run: &Value) -> Option<f64> {
    if run.get("ok").and_then(Value::as_bool) == Some(false) {
        return None;
    }
    f_any(run, &["rate_bps", "bps", "throughput_bps", "rate"]).or_else(|| f(run, &["raw", "summary", "throughput_bps"]))
}

/// A run's per-second intervals: its own, else its raw bench document's.
fn lab_intervals(run: &Value, name: &str) -> Option<Line> {
    run.get("intervals")
        .and_then(|iv| intervals_line(name, iv))
        .or_else(|| run.get("raw").and_then(|r| r.get("intervals")).and_then(|iv| intervals_line(name, iv)))
}

/// Runs measured together (a lab `group`, else one named run) over their repeats.
struct LabGroup<'a> {
    name: String,
    runs: Vec<&'a Value>,
}

impl LabGroup<'_> {
    fn repeats(&self) -> Vec<u64> {
        let mut r: Vec<u64> = self.runs.iter().map(|x| x.get("repeat").and_then(Value::as_u64).unwrap_or(0)).collect();
        r.sort_unstable();
        r.dedup();
        r
    }
    fn members(&self, repeat: u64) -> Vec<&Value> {
        self.runs.iter().copied().filter(|x| x.get("repeat").and_then(Value::as_u64).unwrap_or(0) == repeat).collect()
    }
    /// Total rate of each repeat in which some member measured one.
    fn totals(&self) -> Vec<f64> {
        self.repeats()
            .into_iter()
            .filter_map(|k| {
                let rates: Vec<f64> = self.members(k).iter().filter_map(|r| lab_rate(r)).collect();
                (!rates.is_empty()).then(|| rates.iter().sum())
            })
            .collect()
    }
    fn size(&self) -> usize {
        self.repeats().into_iter().map(|k| self.members(k).len()).max().unwrap_or(0)
    }
    /// Fairness per repeat: between members, or the one member's own flows.
    fn fairness(&self) -> Vec<f64> {
        self.repeats()
            .into_iter()
            .filter_map(|k| {
                let m = self.members(k);
                if m.len() > 1 {
                    jain(m.iter().filter_map(|r| lab_rate(r)))
                } else {
                    m.first()
                        .and_then(|r| f_any(r, &["fairness", "jain"]).or_else(|| f(r, &["raw", "summary", "jain"])))
                }
            })
            .collect()
    }
    fn cpu(&self, side: &str) -> Vec<f64> {
        self.runs.iter().filter_map(|r| lab_cpu_pct(r, side)).collect()
    }
    fn all_ceiling(&self) -> bool {
        !self.runs.is_empty() && self.runs.iter().all(|r| s_any(r, &["tool"]).is_some_and(is_ceiling_tool))
    }
    /// `base/N`: a sweep step of N members.
    fn sweep(&self) -> Option<(&str, f64)> {
        let (base, n) = self.name.rsplit_once('/')?;
        n.parse::<u32>().ok().map(|n| (base, f64::from(n)))
    }
    fn streams(&self) -> Option<f64> {
        self.runs.first().and_then(|r| f_any(r, &["streams", "connections"]))
    }
}

fn metric_key(s: &str) -> String {
    s.chars().map(|c| if c.is_whitespace() { '_' } else { c }).collect()
}

/// `linerate lab run --json` ("linerate.lab/1") → run. Reads `scenario`, `runs` (each with
/// `name`, `tool`, `host`, `group`, `repeat`, `rate_bps`, `duration_s`, `cpu`, `fairness`,
/// `intervals`, `guarantee` and the tool's `raw` document) and an optional `guests` list.
/// Runs measured together form a group; groups become bars (median over repeats) against the
/// best iperf3 group as ceiling; `NAME/N` sweep groups become throughput and fairness against
/// guests; groups of several runs give fairness bars and time series with their guarantees.
pub fn from_lab_json(v: &Value) -> Result<RunReport, ReportError> {
    match v.get("schema").and_then(Value::as_str) {
        Some("linerate.lab/1") => {}
        other => return Err(ReportError::UnknownSchema(other.unwrap_or("").to_string())),
    }
    let sc = v.get("scenario").filter(|s| s.is_object()).or_else(|| v.get("lab").filter(|s| s.is_object()));
    let name = sc
        .and_then(|s| s_any(s, &["name", "title"]))
        .or_else(|| s_any(v, &["name", "title"]))
        .or_else(|| v.get("scenario").and_then(Value::as_str))
        .unwrap_or("lab");
    let mut r = RunReport::new(RunKind::Lab, format!("lab {name}"));
    if let Some(o) = obj(v) {
        for (k, val) in o {
            if !matches!(k.as_str(), "schema" | "runs" | "hosts" | "guests" | "groups" | "machine") {
                r.params.insert(k.clone(), val.clone());
            }
        }
    }
    r.hosts = match (v.get("hosts"), v.get("machine")) {
        (Some(h), _) => h.clone(),
        (None, Some(m)) => json!({ "machine": m }),
        (None, None) => r.hosts.clone(),
    };
    stamp(&mut r, v, &["started_unix", "started_unix_s"]);
    let runs: Vec<&Value> = v.get("runs").and_then(Value::as_array).map(|a| a.iter().collect()).unwrap_or_default();

    let mut groups: Vec<LabGroup> = Vec::new();
    for run in &runs {
        let key = s_any(run, &["group", "name", "tool"]).unwrap_or("run").to_string();
        match groups.iter_mut().find(|g| g.name == key) {
            Some(g) => g.runs.push(run),
            None => groups.push(LabGroup { name: key, runs: vec![run] }),
        }
    }

    // headline figures and bars of the groups that are not sweep steps
    let mut bars = Vec::new();
    let mut ceiling: Option<RefLine> = None;
    for g in &groups {
        let key = metric_key(&g.name);
        let Some(m) = median(&mut g.totals()) else { continue };
        r.metric(&format!("rate.{key}"), m, "bit/s", Better::Higher);
        if let Some(j) = median(&mut g.fairness()) {
            r.metric(&format!("jain.{key}"), j, "", Better::Higher);
        }
        if let Some(c) = median(&mut g.cpu("local")) {
            r.metric(&format!("cpu.{key}"), c, "%", Better::Lower);
        }
        if g.sweep().is_none() {
            bars.push(Bar { label: g.name.clone(), value: m });
            if g.all_ceiling() && ceiling.as_ref().is_none_or(|c| m > c.value) {
                ceiling = Some(RefLine { label: format!("{} ceiling", g.name), value: m });
            }
        }
    }
    if let Some(c) = &ceiling {
        for (g, b) in groups.iter().filter(|g| g.sweep().is_none() && !g.all_ceiling()).filter_map(|g| {
            let b = bars.iter().find(|b| b.label == g.name)?;
            Some((g, b))
        }) {
            if c.value > 0.0 {
                r.metric(&format!("ratio.{}", metric_key(&g.name)), b.value / c.value, "", Better::Higher);
            }
        }
    }
    if bars.len() > 1 || (bars.len() == 1 && ceiling.is_none()) {
        r.charts.bars.push(BarChart {
            title: "Throughput by run (median of repeats)".into(),
            unit: "bit/s".into(),
            bars,
            ceiling,
        });
    }

    // sweeps: throughput and fairness against the number of guests, one line per swept run
    let (mut thr, mut fair): (Vec<Line>, Vec<Line>) = (Vec::new(), Vec::new());
    for g in &groups {
        if let Some((base, n)) = g.sweep() {
            if let Some(m) = median(&mut g.totals()) {
                push_point(&mut thr, base, [n, m]);
            }
            if let Some(j) = median(&mut g.fairness()) {
                push_point(&mut fair, base, [n, j]);
            }
        }
    }
    // runs named NAME-N with N streams: throughput and CPU against connections (scaling)
    let (mut scale, mut scale_cpu): (Vec<Line>, Vec<Line>) = (Vec::new(), Vec::new());
    for g in groups.iter().filter(|g| g.sweep().is_none() && g.size() == 1) {
        let (Some((base, _)), Some(n)) = (g.name.rsplit_once('-'), g.streams()) else { continue };
        if let Some(m) = median(&mut g.totals()) {
            push_point(&mut scale, base, [n, m]);
        }
        for side in ["local", "remote"] {
            if let Some(c) = median(&mut g.cpu(side)) {
                push_point(&mut scale_cpu, &format!("{base} {side} CPU"), [n, c]);
            }
        }
    }
    // a declared sweep is worth a line from two steps; a naming pattern only from three
    let enough = |l: &Vec<Line>, n: usize| l.iter().any(|l| l.points.len() >= n);
    let guests = Axis { label: "guests".into(), unit: String::new() };
    let conns = Axis { label: "connections".into(), unit: String::new() };
    let bps = Axis { label: "throughput".into(), unit: "bit/s".into() };
    for (lines, min, title, x, y) in [
        (thr, 2, "Throughput against guests", guests.clone(), bps.clone()),
        (fair, 2, "Fairness (Jain) against guests", guests, Axis { label: "Jain's index".into(), unit: String::new() }),
        (scale, 3, "Throughput against connections", conns.clone(), bps),
        (scale_cpu, 3, "CPU against connections", conns, Axis { label: "CPU".into(), unit: "%".into() }),
    ] {
        if enough(&lines, min) {
            let mut lines = lines;
            lines.iter_mut().for_each(|l| l.points.sort_by(|a, b| a[0].total_cmp(&b[0])));
            r.charts.xy.push(XyChart { title: title.into(), x, y, lines });
        }
    }

    // groups of several runs: fairness bars and time series with guarantees (first repeat;
    // of a sweep, only its largest step)
    let largest = |g: &LabGroup| match g.sweep() {
        None => true,
        Some((base, n)) => !groups.iter().any(|o| o.sweep().is_some_and(|(b, m)| b == base && m > n)),
    };
    let mut singles = Vec::new();
    let mut latency_lines = Vec::new();
    for g in &groups {
        let Some(first) = g.repeats().first().copied() else { continue };
        let members = g.members(first);
        let label = |run: &Value| s_any(run, &["name", "host", "tool"]).unwrap_or("run").to_string();
        if members.len() > 1 && largest(g) && r.charts.flows.len() < 8 {
            // Label by guest; when one host runs several members (one per link), by the part of
            // the run name after '@' ("sut/p1"), so the bars stay apart.
            let hosts: Vec<&str> = members.iter().filter_map(|m| s_any(m, &["host"])).collect();
            let unique = hosts.len() == members.len()
                && hosts.iter().collect::<std::collections::BTreeSet<_>>().len() == hosts.len();
            let bar_label = |m: &Value| -> Option<String> {
                let name = s_any(m, &["name"]);
                match (unique, s_any(m, &["host"]), name) {
                    (true, Some(h), _) => Some(h.to_string()),
                    (_, _, Some(n)) => Some(n.split_once('@').map_or(n, |(_, at)| at).to_string()),
                    (_, h, None) => h.map(str::to_string),
                }
            };
            let flows: Vec<Bar> =
                members.iter().filter_map(|m| Some(Bar { label: bar_label(m)?, value: lab_rate(m)? })).collect();
            if flows.len() > 1 {
                r.charts.flows.push(FlowChart {
                    title: format!("Per-guest throughput: {}", g.name),
                    unit: "bit/s".into(),
                    flows,
                    jain: None,
                });
            }
        }
        if members.len() > 1 && g.sweep().is_none() {
            let lines: Vec<Line> = members.iter().filter_map(|m| lab_intervals(m, &label(m))).collect();
            let guarantees: Vec<RefLine> = members
                .iter()
                .filter_map(|m| {
                    Some(RefLine { label: format!("{} guarantee", label(m)), value: f(m, &["guarantee", "rate_bps"])? })
                })
                .collect();
            if !lines.is_empty() {
                r.charts.series.push(TimeChart {
                    title: format!("Throughput over time: {}", g.name),
                    unit: "bit/s".into(),
                    lines,
                    guarantees,
                });
            }
        }
        if members.len() == 1 && g.sweep().is_none() {
            if let Some(l) = lab_intervals(members[0], &g.name) {
                singles.push(l);
            }
            if r.charts.flows.len() < 8 {
                let flows = members[0].get("raw").and_then(|x| x.get("connections")).map(flows_of).unwrap_or_default();
                if flows.len() > 1 {
                    let jain = f_any(members[0], &["fairness", "jain"]);
                    r.charts.flows.push(FlowChart {
                        title: format!("Per-flow throughput: {}", g.name),
                        unit: "bit/s".into(),
                        flows,
                        jain,
                    });
                }
            }
        }
        if g.sweep().is_none() && latency_lines.len() < 8 {
            if let Some(l) = members
                .first()
                .and_then(|m| m.get("raw")?.get("summary")?.get("latency_us"))
                .and_then(|l| latency_line(&g.name, l))
            {
                latency_lines.push(l);
            }
        }
    }
    // per-guest series of the older shape, and guarantees given for the whole scenario
    let mut guarantees = Vec::new();
    if let Some(gs) = v.get("guests").and_then(Value::as_array) {
        for (i, g) in gs.iter().enumerate() {
            let gname = s_any(g, &["name", "guest", "host"]).map_or_else(|| format!("guest {}", i + 1), str::to_string);
            if let Some(l) = g.get("intervals").and_then(|iv| intervals_line(&gname, iv)) {
                singles.push(l);
            }
            if let Some(x) = f_any(g, &["guarantee_bps", "guarantee"]) {
                guarantees.push(RefLine { label: format!("{gname} guarantee"), value: x });
            }
            if let Some(x) = f_any(g, &["rate_bps", "bps"]) {
                r.metric(&format!("guest.{}", metric_key(&gname)), x, "bit/s", Better::Higher);
            }
        }
    }
    if let Some(x) = sc.and_then(|s| f(s, &["guarantee_bps"])).or_else(|| f(v, &["guarantee_bps"])) {
        guarantees.push(RefLine { label: "guarantee".into(), value: x });
    }
    if !singles.is_empty() {
        singles.truncate(8);
        r.charts.series.push(TimeChart {
            title: "Throughput over time (first repeat)".into(),
            unit: "bit/s".into(),
            lines: singles,
            guarantees,
        });
    }
    if !latency_lines.is_empty() {
        r.charts.latency.push(LatencyChart { title: "Latency percentiles".into(), lines: latency_lines });
    }

    if !groups.is_empty() {
        let rows = groups
            .iter()
            .map(|g| {
                vec![
                    json!(g.name),
                    json!(g.size()),
                    num(g.streams()),
                    json!(g.repeats().len()),
                    num(median(&mut g.totals())),
                    num(median(&mut g.fairness())),
                    num(median(&mut g.cpu("local"))),
                    num(median(&mut g.cpu("remote"))),
                ]
            })
            .collect();
        let columns = ["run", "members", "streams", "repeats", "rate (bit/s)", "Jain", "CPU (%)", "remote CPU (%)"];
        r.tables.push(Table {
            title: "Runs (median of repeats)".into(),
            columns: columns.map(String::from).to_vec(),
            rows,
        });
    }
    if !runs.is_empty() {
        let rows = runs
            .iter()
            .map(|run| {
                vec![
                    s_any(run, &["name"]).map_or(Value::Null, |x| json!(x)),
                    s_any(run, &["tool"]).map_or(Value::Null, |x| json!(x)),
                    s_any(run, &["host", "guest"]).map_or(Value::Null, |x| json!(x)),
                    run.get("repeat").and_then(Value::as_u64).map_or(Value::Null, |k| json!(k)),
                    num(lab_rate(run)),
                    num(f_any(run, &["duration_s", "seconds", "duration"])),
                    num(lab_cpu_pct(run, "local")),
                    num(f_any(run, &["fairness", "jain"])),
                    s_any(run, &["error"]).map_or(Value::Null, |x| json!(x)),
                ]
            })
            .collect();
        let columns = ["name", "tool", "host", "repeat", "rate (bit/s)", "duration (s)", "CPU (%)", "Jain", "error"];
        r.tables.push(Table { title: "Every measurement".into(), columns: columns.map(String::from).to_vec(), rows });
    }
    Ok(r)
}

/// A value with an SI prefix and its unit: `9.31 Gbit/s`, `512 kB`, `120 us`.
pub fn si(x: f64, unit: &str) -> String {
    if !x.is_finite() {
        return "–".into();
    }
    if unit == "%" {
        return format!("{}%", significant(x, 3));
    }
    if unit == "us" || unit == "s" || unit.is_empty() {
        let (v, u) = match unit {
            "us" if x.abs() >= 1e6 => (x / 1e6, "s"),
            "us" if x.abs() >= 1e3 => (x / 1e3, "ms"),
            "s" if x != 0.0 && x.abs() < 1e-3 => (x * 1e6, "us"),
            "s" if x != 0.0 && x.abs() < 1.0 => (x * 1e3, "ms"),
            _ => (x, unit),
        };
        return if u.is_empty() { significant(v, 3) } else { format!("{} {u}", significant(v, 3)) };
    }
    format_si(x, unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_keys() {
        assert_eq!(percentile_of("p50"), Some(50.0));
        assert_eq!(percentile_of("p999"), Some(99.9));
        assert_eq!(percentile_of("p9999"), Some(99.99));
        assert_eq!(percentile_of("p99.5"), Some(99.5));
        assert_eq!(percentile_of("max"), None);
        assert_eq!(percentile_of("p"), None);
    }

    #[test]
    fn si_formatting() {
        assert_eq!(si(9.31e9, "bit/s"), "9.31 Gbit/s");
        assert_eq!(si(512_000.0, "B"), "512 kB");
        assert_eq!(si(999.9, "bit/s"), "1 kbit/s");
        assert_eq!(si(0.0, "bit/s"), "0 bit/s");
        assert_eq!(si(1500.0, "us"), "1.5 ms");
        assert_eq!(si(0.25, "s"), "250 ms");
        assert_eq!(si(0.987_65, ""), "0.988");
    }

    #[test]
    fn unknown_documents_are_refused_with_a_typed_error() {
        assert!(
            matches!(from_json(json!({"schema": "linerate.bench/9"})), Err(ReportError::UnknownSchema(s)) if s == "linerate.bench/9")
        );
        assert!(matches!(from_json(json!({"hello": 1})), Err(ReportError::UnknownSchema(_))));
        assert!(matches!(from_bench_json(&json!({"schema": "linerate.lab/1"})), Err(ReportError::UnknownSchema(_))));
        assert!(matches!(from_cp_json(&json!([1, 2])), Err(ReportError::Invalid(_))));
    }

    #[test]
    fn lab_sweep_groups_become_throughput_and_fairness_against_guests() {
        let mut runs = Vec::new();
        for n in [1u32, 2, 4, 8] {
            for g in 1..=n {
                let rate = 9.2e9 / f64::from(n) * if g == 1 { 1.1 } else { 1.0 };
                runs.push(json!({"name": format!("tx@g{g}"), "tool": "bench", "host": format!("g{g}"), "group": format!("tx/{n}"), "repeat": 0, "ok": true, "rate_bps": rate}));
            }
        }
        runs.push(json!({"name": "tx@g9", "tool": "bench", "host": "g9", "group": "tx/8", "repeat": 0, "ok": false, "rate_bps": null}));
        let r =
            from_lab_json(&json!({"schema": "linerate.lab/1", "scenario": {"name": "guests"}, "runs": runs})).unwrap();
        assert_eq!(r.title, "lab guests");
        let xy = &r.charts.xy[0];
        assert_eq!((xy.title.as_str(), xy.x.label.as_str()), ("Throughput against guests", "guests"));
        assert_eq!(xy.lines.len(), 1);
        assert_eq!(xy.lines[0].name, "tx");
        assert_eq!(xy.lines[0].points.iter().map(|p| p[0]).collect::<Vec<_>>(), vec![1.0, 2.0, 4.0, 8.0]);
        assert!((xy.lines[0].points[3][1] - 9.2e9 * (1.0 + 0.1 / 8.0)).abs() < 1.0);
        assert_eq!(r.charts.xy[1].y.label, "Jain's index");
        assert!(r.charts.bars.is_empty(), "sweep steps are not bars");
        // fairness bars of the largest step only, the failed run left out
        assert_eq!(r.charts.flows.len(), 1);
        assert_eq!(r.charts.flows[0].flows.len(), 8);
    }

    #[test]
    fn flows_of_one_host_over_several_links_are_labelled_by_link() {
        let runs: Vec<Value> = (1..=4)
            .map(|p| json!({"name": format!("tx-8@sut/p{p}"), "tool": "bench", "host": "sut", "group": "tx-8", "repeat": 0, "ok": true, "rate_bps": 1e9 * f64::from(p)}))
            .collect();
        let r =
            from_lab_json(&json!({"schema": "linerate.lab/1", "scenario": {"name": "links"}, "runs": runs})).unwrap();
        let labels: Vec<&str> = r.charts.flows[0].flows.iter().map(|b| b.label.as_str()).collect();
        assert_eq!(labels, ["sut/p1", "sut/p2", "sut/p3", "sut/p4"]);
    }

    #[test]
    fn lab_converter_tolerates_an_almost_empty_document() {
        let r = from_lab_json(&json!({"schema": "linerate.lab/1", "runs": [{"tool": 3}, {}, "x"]})).unwrap();
        assert_eq!(r.kind, RunKind::Lab);
        assert!(r.metrics.is_empty());
        assert_eq!(r.tables[0].rows.len(), 1, "all three fall in one group called 'run'");
        assert_eq!(r.tables[1].rows.len(), 3);
    }
}
