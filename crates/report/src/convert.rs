//! Converters from the JSON documents the tools print (`cp --json`, `bench --json`
//! "linerate.bench/1", `lab run --json` "linerate.lab/1") to a [`RunReport`]. They take
//! `serde_json::Value`s so this crate does not depend on the engine or the lab, and they are
//! defensive: a missing or mistyped field leaves its figure out instead of failing.

use crate::model::*;
use crate::ReportError;
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

/// What a lab run can be swept over (not `rate`: that is the measured figure there).
const LAB_SWEEP_KEYS: &[&str] = &["guests", "connections", "parallel", "msg_size", "message_size"];

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
            let determined = (0..merged.len()).all(|i| (0..merged.len()).all(|j| x_of(i) != x_of(j) || vals[i] == vals[j]));
            varies && !determined
        })
        .collect();
    let series = |i: usize| -> String {
        if others.is_empty() {
            return name.to_string();
        }
        others
            .iter()
            .map(|k| format!("{k}={}", merged[i].get(k.as_str()).and_then(Value::as_f64).map_or("?".into(), |x| trim(x, 6))))
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

/// The CPU of a lab run as a percentage: a number (fraction ≤ 1 or a percentage), or an object
/// with `local`/`user`/`system`/`softirq` parts as bench prints them.
fn lab_cpu_pct(run: &Value) -> Option<f64> {
    let c = run.get("cpu").or_else(|| run.get("cpu_pct"))?;
    if let Some(x) = c.as_f64().filter(|x| x.is_finite()) {
        return Some(if run.get("cpu_pct").is_some() || x > 1.0 { x } else { x * 100.0 });
    }
    let side = c.get("local").unwrap_or(c);
    let parts: Vec<f64> = ["user", "system", "softirq"].iter().filter_map(|k| f(side, &[k])).collect();
    (!parts.is_empty()).then(|| parts.iter().sum::<f64>() * 100.0)
}

/// One tool's rates, CPU percentages and Jain indexes over its repeats.
type ToolRuns = (String, Vec<f64>, Vec<f64>, Vec<f64>);

fn is_ceiling_tool(tool: &str) -> bool {
    let t = tool.to_ascii_lowercase();
    t == "iperf3" || t == "netperf" || t == "ceiling" || t.starts_with("iperf")
}

/// `linerate lab run --json` ("linerate.lab/1") → run: the lab description, then `runs`, each
/// with tool, host, repeat, rate in bit/s, duration, CPU and Jain where known and the raw bench
/// document under `raw`. Tools become bars (median over repeats) against the iperf3 ceiling;
/// per-guest or per-run intervals become time series with the scenario's guarantee lines.
pub fn from_lab_json(v: &Value) -> Result<RunReport, ReportError> {
    match v.get("schema").and_then(Value::as_str) {
        Some("linerate.lab/1") => {}
        other => return Err(ReportError::UnknownSchema(other.unwrap_or("").to_string())),
    }
    let desc = v.get("lab").or_else(|| v.get("scenario")).unwrap_or(v);
    let name = s_any(desc, &["name", "title", "scenario"]).or_else(|| s_any(v, &["name", "title"])).unwrap_or("lab");
    let mut r = RunReport::new(RunKind::Lab, format!("lab {name}"));
    // the description: every top-level scalar, plus the scenario object as a whole
    if let Some(o) = obj(v) {
        for (k, val) in o {
            if !matches!(k.as_str(), "schema" | "runs" | "hosts" | "guests") {
                r.params.insert(k.clone(), val.clone());
            }
        }
    }
    if let Some(h) = v.get("hosts") {
        r.hosts = h.clone();
    }
    let runs: Vec<&Value> = v.get("runs").and_then(Value::as_array).map(|a| a.iter().collect()).unwrap_or_default();

    // per tool: rates, cpu, jain, in first-seen order
    let mut tools: Vec<ToolRuns> = Vec::new();
    let mut rows = Vec::new();
    let mut series = Vec::new();
    let mut flow_charts = Vec::new();
    let mut latency_lines = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for (i, run) in runs.iter().enumerate() {
        let tool = s_any(run, &["tool", "name"]).unwrap_or("run").to_string();
        let host = s_any(run, &["host", "guest"]).unwrap_or("").to_string();
        let rep = run.get("repeat").or_else(|| run.get("repeat_index")).and_then(Value::as_u64);
        let raw = run.get("raw").unwrap_or(&Value::Null);
        let rate = f_any(run, &["rate_bps", "bps", "throughput_bps", "rate"])
            .or_else(|| f(raw, &["summary", "throughput_bps"]));
        let dur = f_any(run, &["duration_s", "seconds", "duration"]);
        let cpu = lab_cpu_pct(run)
            .or_else(|| cpu_total(raw.get("summary").unwrap_or(&Value::Null), "local").map(|c| c * 100.0));
        let jain = f(run, &["jain"]).or_else(|| f(raw, &["summary", "jain"]));
        let idx = match tools.iter().position(|t| t.0 == tool) {
            Some(p) => p,
            None => {
                tools.push((tool.clone(), Vec::new(), Vec::new(), Vec::new()));
                tools.len() - 1
            }
        };
        if let Some(x) = rate {
            tools[idx].1.push(x);
        }
        if let Some(x) = cpu {
            tools[idx].2.push(x);
        }
        if let Some(x) = jain {
            tools[idx].3.push(x);
        }
        let label = match (rep, host.is_empty()) {
            (Some(k), true) => format!("{tool} #{k}"),
            (Some(k), false) => format!("{tool}@{host} #{k}"),
            (None, true) => format!("{tool} ({})", i + 1),
            (None, false) => format!("{tool}@{host}"),
        };
        rows.push(vec![
            json!(tool),
            json!(host),
            rep.map_or(Value::Null, |k| json!(k)),
            num(rate),
            num(dur),
            num(cpu),
            num(jain),
        ]);
        if let Some(l) = raw.get("intervals").and_then(|iv| intervals_line(&label, iv)) {
            series.push(l);
        }
        // the first run of each tool only, so a 5-repeat scenario does not draw 5 fairness charts
        if !seen.contains(&tool) {
            seen.push(tool.clone());
            let flows = raw.get("connections").map(flows_of).unwrap_or_default();
            if flows.len() > 1 {
                flow_charts.push(FlowChart {
                    title: format!("Per-flow throughput: {label}"),
                    unit: "bit/s".into(),
                    flows,
                    jain,
                });
            }
            if let Some(l) = raw.get("summary").and_then(|s| s.get("latency_us")).and_then(|l| latency_line(&label, l))
            {
                latency_lines.push(l);
            }
        }
    }
    let ceiling_tool = tools.iter().find(|t| is_ceiling_tool(&t.0) && !t.1.is_empty()).map(|t| t.0.clone());
    let mut bars = Vec::new();
    let mut ceiling = None;
    for (tool, rates, cpus, jains) in &mut tools {
        let key = tool.replace(char::is_whitespace, "_");
        if let Some(m) = median(rates) {
            r.metric(&format!("rate.{key}"), m, "bit/s", Better::Higher);
            bars.push(Bar { label: tool.clone(), value: m });
            if ceiling_tool.as_deref() == Some(tool.as_str()) {
                ceiling = Some(RefLine { label: format!("{tool} ceiling"), value: m });
            }
        }
        if let Some(m) = median(cpus) {
            r.metric(&format!("cpu.{key}"), m, "%", Better::Lower);
        }
        if let Some(m) = median(jains) {
            r.metric(&format!("jain.{key}"), m, "", Better::Higher);
        }
    }
    if let Some(c) = &ceiling {
        for b in &bars {
            if c.value > 0.0 && !is_ceiling_tool(&b.label) {
                let key = b.label.replace(char::is_whitespace, "_");
                r.metric(&format!("ratio.{key}"), b.value / c.value, "", Better::Higher);
            }
        }
    }
    if !bars.is_empty() {
        r.charts.bars.push(BarChart {
            title: "Throughput by tool (median of repeats)".into(),
            unit: "bit/s".into(),
            bars,
            ceiling,
        });
    }
    // throughput against the number of guests / connections, one line per tool
    let run_params: Vec<&Value> = runs.iter().map(|r| r.get("params").unwrap_or(r)).collect();
    let key = LAB_SWEEP_KEYS.iter().find(|k| {
        let vals: Vec<Option<f64>> = run_params.iter().map(|p| p.get(**k).and_then(Value::as_f64)).collect();
        vals.iter().all(Option::is_some) && vals.windows(2).any(|w| w[0] != w[1])
    });
    if let Some(key) = key.map(|k| k.to_string()) {
        let mut lines: Vec<Line> = Vec::new();
        for (run, p) in runs.iter().zip(&run_params) {
            let (Some(x), Some(y)) =
                (p.get(&key).and_then(Value::as_f64), f_any(run, &["rate_bps", "bps", "throughput_bps"]))
            else {
                continue;
            };
            let tool = s_any(run, &["tool"]).unwrap_or("run").to_string();
            match lines.iter_mut().find(|l| l.name == tool) {
                Some(l) => l.points.push([x, y]),
                None => lines.push(Line { name: tool, points: vec![[x, y]] }),
            }
        }
        for l in &mut lines {
            l.points.sort_by(|a, b| a[0].total_cmp(&b[0]));
        }
        if !lines.is_empty() {
            r.charts.xy.push(XyChart {
                title: format!("Throughput against {}", key.replace('_', " ")),
                x: axis_label(&key),
                y: Axis { label: "throughput".into(), unit: "bit/s".into() },
                lines,
            });
        }
    }
    // per-guest series (QoS scenarios) with their guarantees
    let mut guarantees = Vec::new();
    if let Some(gs) = v.get("guests").and_then(Value::as_array) {
        for (i, g) in gs.iter().enumerate() {
            let gname = s_any(g, &["name", "guest", "host"]).map_or_else(|| format!("guest {}", i + 1), str::to_string);
            if let Some(l) = g.get("intervals").and_then(|iv| intervals_line(&gname, iv)) {
                series.push(l);
            }
            if let Some(x) = f_any(g, &["guarantee_bps", "guarantee"]) {
                guarantees.push(RefLine { label: format!("{gname} guarantee"), value: x });
            }
            if let Some(x) = f_any(g, &["rate_bps", "bps"]) {
                r.metric(&format!("guest.{gname}"), x, "bit/s", Better::Higher);
            }
        }
    }
    if let Some(x) = f_any(desc, &["guarantee_bps"]).or_else(|| f_any(v, &["guarantee_bps"])) {
        guarantees.push(RefLine { label: "guarantee".into(), value: x });
    }
    if !series.is_empty() {
        r.charts.series.push(TimeChart {
            title: "Throughput over time".into(),
            unit: "bit/s".into(),
            lines: series,
            guarantees,
        });
    }
    r.charts.flows = flow_charts;
    if !latency_lines.is_empty() {
        r.charts.latency.push(LatencyChart { title: "Latency percentiles".into(), lines: latency_lines });
    }
    if !rows.is_empty() {
        r.tables.push(Table {
            title: "Runs".into(),
            columns: vec![
                "tool".into(),
                "host".into(),
                "repeat".into(),
                "rate (bit/s)".into(),
                "duration (s)".into(),
                "CPU (%)".into(),
                "Jain".into(),
            ],
            rows,
        });
    }
    Ok(r)
}

/// A value with an SI prefix and its unit: `9.31 Gbit/s`, `512 kB`, `120 us`.
pub fn si(x: f64, unit: &str) -> String {
    if !x.is_finite() {
        return "–".into();
    }
    if unit == "%" {
        return format!("{}%", trim(x, 3));
    }
    if unit == "us" || unit == "s" || unit.is_empty() {
        let (v, u) = match unit {
            "us" if x.abs() >= 1e6 => (x / 1e6, "s"),
            "us" if x.abs() >= 1e3 => (x / 1e3, "ms"),
            "s" if x != 0.0 && x.abs() < 1e-3 => (x * 1e6, "us"),
            "s" if x != 0.0 && x.abs() < 1.0 => (x * 1e3, "ms"),
            _ => (x, unit),
        };
        return if u.is_empty() { trim(v, 3) } else { format!("{} {u}", trim(v, 3)) };
    }
    let (v, p) = si_split(x);
    format!("{} {p}{unit}", trim(v, 3))
}

/// Splits `x` into a mantissa below 1000 and an SI prefix.
pub(crate) fn si_split(x: f64) -> (f64, &'static str) {
    let a = x.abs();
    for (scale, p) in [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")] {
        if a >= scale * 0.9995 {
            return (x / scale, p);
        }
    }
    (x, "")
}

/// `x` with `sig` significant digits and no trailing zeros.
pub(crate) fn trim(x: f64, sig: i32) -> String {
    if x == 0.0 {
        return "0".into();
    }
    let mag = x.abs().log10().floor() as i32;
    let decimals = (sig - 1 - mag).clamp(0, 9) as usize;
    let s = format!("{x:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
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
    fn lab_runs_over_a_guest_count_become_one_line_per_tool() {
        let mut runs = Vec::new();
        for g in [1, 2, 4, 8] {
            runs.push(
                json!({"tool": "linerate", "params": {"guests": g}, "rate_bps": 9e9 - f64::from(g) * 1e8, "rate": 1}),
            );
            runs.push(json!({"tool": "iperf3", "params": {"guests": g}, "rate_bps": 9.4e9}));
        }
        let r = from_lab_json(&json!({"schema": "linerate.lab/1", "name": "guests", "runs": runs})).unwrap();
        let xy = &r.charts.xy[0];
        assert_eq!(xy.x.label, "guests");
        assert_eq!(xy.lines.len(), 2);
        assert_eq!(xy.lines[0].name, "linerate");
        assert_eq!(xy.lines[0].points, vec![[1.0, 8.9e9], [2.0, 8.8e9], [4.0, 8.6e9], [8.0, 8.2e9]]);
    }

    #[test]
    fn lab_converter_tolerates_an_almost_empty_document() {
        let r = from_lab_json(&json!({"schema": "linerate.lab/1", "runs": [{"tool": 3}, {}, "x"]})).unwrap();
        assert_eq!(r.kind, RunKind::Lab);
        assert!(r.metrics.is_empty());
        assert_eq!(r.tables[0].rows.len(), 3);
    }
}
