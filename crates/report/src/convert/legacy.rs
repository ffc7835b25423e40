//! Documents written before the typed documents of [`linerate_model::doc`] (issue 14), read
//! by explicit upgrades so stored results keep importing. Each older form is a named struct
//! here, each difference from today's form is handled once and said why; nothing here is used
//! for a document in today's form.
//!
//! * **The bench contract sample** (`linerate.bench/1` without `tool`): the shape agreed before
//!   `linerate bench` existed. Its `test` has its own fields (`host`, `duration_s`), its
//!   summary only some figures, its points no `test`. Read by [`bench_sample`]; the same form
//!   inside older lab documents' `raw` is upgraded to the typed form.
//! * **Bench documents without `sweep`**: the swept parameters are the test fields whose
//!   values differ between points.
//! * **Lab documents without `tool`** (the runner's output before the typed documents, and the
//!   older sketch with `lab`, `hosts` and `guests`): runs without `group` fall in the group of
//!   their name, else of their tool; a group `BASE/N` is step N of a sweep over BASE; an
//!   instance named `NAME@HOST/LINK` ran through LINK; `cpu` was a fraction (a percentage when
//!   above 1), an object of one side's parts, or `local`/`remote` objects; a run's rate,
//!   intervals, fairness (`jain` in the sketch) and CPU missing from it are its `raw`
//!   document's. Read by [`lab`].

use super::bench::{bench_report, BenchParts, Figures};
use super::lab::lab_charts;
use super::parts::{parse, stamp};
use crate::model::*;
use crate::ReportError;
use linerate_model::doc::bench::*;
use linerate_model::doc::cp::CpSummary;
use linerate_model::doc::lab::{
    CpuBusy, Guarantee, Interval, LabRun, LabScenario, Machine, RawDoc, RunCpu, SweepStep, Tool,
};
use linerate_model::doc::ToolInfo;
use linerate_model::metric::{GroupFigure, MetricId};
use serde::Deserialize;
use serde_json::{Map, Value};

/// The contract sample's document.
#[derive(Deserialize)]
struct Sample {
    /// The test, kept whole as the run's parameters.
    #[serde(default)]
    test: Map<String, Value>,
    #[serde(default)]
    hosts: Value,
    summary: Option<SampleSummary>,
    #[serde(default)]
    intervals: Vec<SampleInterval>,
    #[serde(default)]
    connections: Vec<SampleConnection>,
    #[serde(default)]
    points: Vec<SamplePoint>,
}

/// The sample's test fields a report reads.
#[derive(Deserialize, Default)]
struct SampleTest {
    test: Option<String>,
    host: Option<String>,
    connections: Option<u32>,
    msg_size: Option<u32>,
    resp_size: Option<u32>,
    sndbuf: Option<u32>,
    rcvbuf: Option<u32>,
}

/// The figures the sample's summaries had.
#[derive(Deserialize, Clone)]
struct SampleSummary {
    throughput_bps: Option<f64>,
    connections: Option<u64>,
    jain: Option<f64>,
    transactions_per_s: Option<f64>,
    latency_us: Option<SampleLatency>,
    loss_pct: Option<f64>,
    cpu: Option<SampleCpu>,
}

#[derive(Deserialize, Clone)]
struct SampleLatency {
    min: Option<f64>,
    mean: Option<f64>,
    p50: Option<f64>,
    p90: Option<f64>,
    p99: Option<f64>,
    p999: Option<f64>,
    max: Option<f64>,
}

#[derive(Deserialize, Clone)]
struct SampleCpu {
    local: Option<CpuParts>,
    remote: Option<CpuParts>,
}

/// One side's CPU as older documents gave it: whichever parts the tool had.
#[derive(Deserialize, Clone, Copy, Default)]
struct CpuParts {
    user: Option<f64>,
    system: Option<f64>,
    softirq: Option<f64>,
    irq: Option<f64>,
}

impl CpuParts {
    fn busy(self) -> Option<CpuBusy> {
        let parts = [self.user, self.system, self.softirq, self.irq];
        parts.iter().any(Option::is_some).then(|| CpuBusy {
            user: self.user.unwrap_or(0.0),
            system: self.system.unwrap_or(0.0),
            softirq: self.softirq.unwrap_or(0.0),
            irq: self.irq.unwrap_or(0.0),
        })
    }
}

#[derive(Deserialize)]
struct SampleInterval {
    start_s: f64,
    end_s: f64,
    bps: f64,
}

#[derive(Deserialize)]
struct SampleConnection {
    id: u32,
    #[serde(default)]
    bytes: u64,
    bps: f64,
}

#[derive(Deserialize)]
struct SamplePoint {
    /// The test fields the point set, by their names.
    #[serde(default)]
    params: Map<String, Value>,
    summary: SampleSummary,
}

impl SampleLatency {
    /// Figure `f`, where the sample has it.
    fn get(&self, f: LatencyFigure) -> Option<f64> {
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
    /// The figures it has, in name order ([`LatencyFigure::ALL`]).
    fn figures(&self) -> Vec<(LatencyFigure, f64)> {
        LatencyFigure::ALL.into_iter().filter_map(|f| Some((f, self.get(f)?))).collect()
    }
    /// The percentiles it has ([`LatencyFigure::PERCENTILES`]), to plot.
    fn points(&self) -> Vec<[f64; 2]> {
        super::bench::percentile_points(|f| self.get(f))
    }
}

impl From<&SampleSummary> for Figures {
    fn from(s: &SampleSummary) -> Figures {
        let cpu = |side: Option<CpuParts>| side.and_then(CpuParts::busy).map(|c| c.busy());
        Figures {
            throughput: s.throughput_bps,
            transactions: s.transactions_per_s,
            jain: s.jain,
            loss: s.loss_pct,
            latency: s.latency_us.as_ref().map(SampleLatency::figures).unwrap_or_default(),
            p99: s.latency_us.as_ref().and_then(|l| l.p99),
            cpu: [cpu(s.cpu.as_ref().and_then(|c| c.local)), cpu(s.cpu.as_ref().and_then(|c| c.remote))],
            ..Figures::default()
        }
    }
}

/// A test with the sample's fields; the others, which no sample report reads, are zero.
fn sample_test(t: &SampleTest) -> BenchTest {
    BenchTest {
        version: 1,
        kind: t.test.clone().unwrap_or_default(),
        direction: String::new(),
        connections: t.connections.unwrap_or(1),
        duration_ms: 0,
        omit_ms: 0,
        interval_ms: 0,
        msg_size: t.msg_size.unwrap_or(0),
        resp_size: t.resp_size.unwrap_or(0),
        sndbuf: t.sndbuf,
        rcvbuf: t.rcvbuf,
        rate: None,
        zerocopy: false,
        nodelay: false,
        profile: None,
        server: t.host.clone().unwrap_or_default(),
        test: t.test.clone().unwrap_or_default(),
        options: Default::default(),
    }
}

fn sample_intervals(s: &Sample) -> Vec<BenchInterval> {
    let iv = |i: &SampleInterval| BenchInterval {
        start_s: i.start_s,
        end_s: i.end_s,
        bps: i.bps,
        transactions_per_s: 0.0,
        omitted: false,
        detail: Default::default(),
    };
    s.intervals.iter().map(iv).collect()
}

fn sample_connections(s: &Sample) -> Vec<BenchConnection> {
    let c =
        |c: &SampleConnection| BenchConnection { id: c.id, bytes: c.bytes, bps: c.bps, tcp: None, server_tcp: None };
    s.connections.iter().map(c).collect()
}

/// The contract sample (`linerate.bench/1` without `tool`) → run, with the figures it has.
pub fn bench_sample(v: &Value) -> Result<RunReport, ReportError> {
    let s: Sample = parse(v, "linerate.bench/1 (contract sample)")?;
    let test: SampleTest = parse(&Value::Object(s.test.clone()), "its test")?;
    let points = s
        .points
        .iter()
        .map(|p| {
            // the sample's point parameters are the test's own fields
            let mut fields = s.test.clone();
            fields.extend(p.params.clone());
            let t: SampleTest = parse(&Value::Object(fields), "a point's parameters")?;
            Ok((sample_test(&t), Figures::from(&p.summary)))
        })
        .collect::<Result<Vec<_>, ReportError>>()?;
    Ok(bench_report(BenchParts {
        name: test.test.clone().unwrap_or_else(|| "bench".into()),
        target: test.host.clone(),
        // the sample's test fields that are run parameters today (`test`, `host`, `duration_s`,
        // `connections`, sizes); the rest is left out
        params: RunParams::deserialize(&Value::Object(s.test.clone())).unwrap_or_default(),
        hosts: Hosts::deserialize(&s.hosts).unwrap_or_default(),
        body: None,
        stamp: None,
        figures: s.summary.as_ref().map(Figures::from),
        latency: s.summary.as_ref().and_then(|x| x.latency_us.as_ref()).map(SampleLatency::points).unwrap_or_default(),
        intervals: sample_intervals(&s),
        connections: sample_connections(&s),
        sweep: SweepParam::varying(points.iter().map(|(t, _)| t)),
        points,
    }))
}

/// A sample-form bench document kept as `raw` in an older lab document → the typed form.
/// The lab report reads only its intervals, connections, throughput, Jain's index, CPU and
/// latency percentiles; the figures the sample lacks are zero.
fn sample_document(v: &Value) -> Result<BenchDocument, ReportError> {
    let s: Sample = parse(v, "a run's raw bench document (contract sample)")?;
    let cpu = |side: Option<CpuParts>| {
        let b = side.and_then(CpuParts::busy).unwrap_or_default();
        CpuShare { user: b.user, system: b.system, softirq: b.softirq, irq: b.irq, ..CpuShare::default() }
    };
    let summary = s.summary.as_ref().map(|x| BenchSummary {
        throughput_bps: x.throughput_bps.unwrap_or(0.0),
        send_bps: 0.0,
        receive_bps: 0.0,
        connections: x.connections.unwrap_or(0),
        seconds: 0.0,
        jain: x.jain,
        fairness: None,
        transactions_per_s: x.transactions_per_s,
        latency_us: x.latency_us.as_ref().map(|l| Latency {
            min: l.min.unwrap_or(0.0),
            mean: l.mean.unwrap_or(0.0),
            p50: l.p50.unwrap_or(0.0),
            p90: l.p90.unwrap_or(0.0),
            p99: l.p99.unwrap_or(0.0),
            p999: l.p999.unwrap_or(0.0),
            max: l.max.unwrap_or(0.0),
            count: 0,
            curve: Vec::new(),
            behind_schedule: None,
        }),
        loss_pct: x.loss_pct,
        out_of_order: None,
        duplicates: None,
        packets_per_s: None,
        jitter_us: None,
        sender_bps: None,
        udp_batching: None,
        cpu: CpuPair {
            local: cpu(x.cpu.as_ref().and_then(|c| c.local)),
            remote: cpu(x.cpu.as_ref().and_then(|c| c.remote)),
        },
        service_demand_us_per_kb: SidePair { local: 0.0, remote: 0.0 },
        service_demand_us_per_tran: None,
        retransmits: 0,
        rtt_us: None,
        buffers: BufferPair { local: None, remote: None },
        efficiency: None,
        errors: Vec::new(),
        groups: Vec::new(),
    });
    Ok(BenchDocument {
        schema: BENCH_SCHEMA.into(),
        tool: ToolInfo::linerate(""),
        started_unix_s: 0,
        started_unix_us: None,
        sweep: Some(Vec::new()),
        test: None,
        hosts: BenchHosts::default(),
        summary,
        intervals: Some(sample_intervals(&s)),
        connections: Some(sample_connections(&s)),
        points: Vec::new(),
    })
}

/// A lab document of the older form.
#[derive(Deserialize)]
struct OldLab {
    /// The scenario (`{name, description, file}`), or its name.
    scenario: Option<Value>,
    /// The runner's lab description, or the sketch's scenario.
    lab: Option<Value>,
    started_unix: Option<u64>,
    /// The sketch's host table.
    hosts: Option<Value>,
    machine: Option<Value>,
    /// The sketch's per-guest results.
    #[serde(default)]
    guests: Vec<OldGuest>,
    #[serde(default)]
    runs: Vec<OldRun>,
}

#[derive(Deserialize)]
struct OldGuest {
    name: String,
    #[serde(default)]
    intervals: Vec<Interval>,
    guarantee_bps: Option<f64>,
    rate_bps: Option<f64>,
}

#[derive(Deserialize)]
struct OldRun {
    name: Option<String>,
    /// A tool's name; the sketch also had `linerate` (its bench).
    tool: String,
    host: Option<String>,
    server: Option<String>,
    server_addr: Option<String>,
    group: Option<String>,
    repeat: Option<u32>,
    streams: Option<u32>,
    #[serde(default)]
    reverse: bool,
    #[serde(default)]
    args: Vec<String>,
    ok: Option<bool>,
    error: Option<String>,
    rate_bps: Option<f64>,
    duration_s: Option<f64>,
    bytes: Option<f64>,
    cpu: Option<Value>,
    fairness: Option<f64>,
    /// The sketch's name for `fairness`.
    jain: Option<f64>,
    flows: Option<f64>,
    #[serde(default)]
    intervals: Vec<Interval>,
    guarantee: Option<OldGuarantee>,
    raw: Option<Value>,
}

#[derive(Deserialize)]
struct OldGuarantee {
    #[serde(default)]
    class: String,
    #[serde(default)]
    link: String,
    rate_bps: f64,
    ceil_bps: Option<f64>,
    intervals_met_pct: Option<f64>,
}

/// The older `cpu` shapes, each named: a fraction (or percentage above 1) of the client, an
/// object of the client's parts, or `local`/`remote` objects of parts (`cp`'s CPU seconds,
/// `client`/`server`, are not a share and give none).
fn old_cpu(v: &Value) -> Result<Option<RunCpu>, ReportError> {
    let side = |v: Option<&Value>| -> Result<Option<CpuBusy>, ReportError> {
        Ok(match v {
            Some(x) if !x.is_null() => parse::<CpuParts>(x, "a run's cpu")?.busy(),
            _ => None,
        })
    };
    Ok(match v {
        Value::Number(n) => n.as_f64().map(|x| RunCpu {
            local: Some(CpuBusy { user: if x > 1.0 { x / 100.0 } else { x }, ..CpuBusy::default() }),
            remote: None,
        }),
        Value::Object(o) if o.contains_key("local") || o.contains_key("remote") => {
            Some(RunCpu { local: side(o.get("local"))?, remote: side(o.get("remote"))? })
        }
        Value::Object(o) if o.contains_key("user") => Some(RunCpu { local: side(Some(v))?, remote: None }),
        _ => None,
    })
}

/// A run's `raw` document in the form it has.
fn old_raw(v: &Value) -> Result<Option<RawDoc>, ReportError> {
    Ok(match v.get("schema").and_then(Value::as_str) {
        Some(BENCH_SCHEMA) if v.get("tool").is_some() => {
            Some(RawDoc::Bench(Box::new(parse(v, "a run's raw bench document")?)))
        }
        Some(BENCH_SCHEMA) => Some(RawDoc::Bench(Box::new(sample_document(v)?))),
        None if v.get("gbit_per_s").is_some() => {
            Some(RawDoc::Cp(Box::new(parse::<CpSummary>(v, "a run's raw cp summary")?)))
        }
        _ => None,
    })
}

fn tool_of(name: &str) -> Tool {
    Tool::ALL
        .into_iter()
        .find(|t| t.name() == name)
        // the sketch's `linerate` was its bench
        .unwrap_or(Tool::Bench)
}

fn upgrade(o: OldRun) -> Result<LabRun, ReportError> {
    let raw = o.raw.as_ref().map(old_raw).transpose()?.flatten();
    let bench = raw.as_ref().and_then(RawDoc::bench);
    let summary = bench.and_then(|b| b.summary.as_ref());
    let name = o.name.unwrap_or_default();
    let group = o.group.or_else(|| (!name.is_empty()).then(|| name.clone())).unwrap_or_else(|| o.tool.clone());
    let sweep = group
        .rsplit_once('/')
        .and_then(|(base, n)| Some(SweepStep { base: base.to_string(), instances: n.parse().ok()? }));
    let host = o.host.unwrap_or_default();
    let via = name.split_once('@').and_then(|(_, at)| at.split_once('/')).map(|(_, link)| link.to_string());
    let cpu = match o.cpu.as_ref().filter(|c| !c.is_null()) {
        Some(c) => old_cpu(c)?,
        None => summary.map(|s| RunCpu {
            local: Some(CpuBusy {
                user: s.cpu.local.user,
                system: s.cpu.local.system,
                softirq: s.cpu.local.softirq,
                irq: s.cpu.local.irq,
            }),
            remote: Some(CpuBusy {
                user: s.cpu.remote.user,
                system: s.cpu.remote.system,
                softirq: s.cpu.remote.softirq,
                irq: s.cpu.remote.irq,
            }),
        }),
    };
    let intervals = if o.intervals.is_empty() {
        let raw_iv = bench.and_then(|b| b.intervals.as_deref()).unwrap_or_default();
        raw_iv.iter().map(|i| Interval { start_s: i.start_s, end_s: i.end_s, bps: i.bps }).collect()
    } else {
        o.intervals
    };
    Ok(LabRun {
        tool: tool_of(&o.tool),
        mode: None,
        machine_cpu_s: None,
        host,
        server: o.server.unwrap_or_default(),
        server_addr: o.server_addr.unwrap_or_default(),
        via,
        sweep,
        repeat: o.repeat.unwrap_or(0),
        streams: o.streams.unwrap_or(1),
        reverse: o.reverse,
        args: o.args,
        ok: o.ok.unwrap_or(true),
        error: o.error,
        rate_bps: o.rate_bps.or_else(|| summary.map(|s| s.throughput_bps)),
        duration_s: o.duration_s,
        bytes: o.bytes.map(|b| b as u64),
        cpu,
        fairness: o.fairness.or(o.jain).or_else(|| summary.and_then(|s| s.jain)),
        flows: o.flows.map(|f| f as u64),
        intervals,
        guarantee: o.guarantee.map(|g| Guarantee {
            class: g.class,
            link: g.link,
            rate_bps: g.rate_bps as u64,
            ceil_bps: g.ceil_bps.unwrap_or(0.0) as u64,
            intervals_met_pct: g.intervals_met_pct,
        }),
        raw,
        name,
        group,
        congestion: None,
        started_unix_us: None,
    })
}

/// A lab document of the older form (no `tool`) → run.
pub fn lab(v: &Value) -> Result<RunReport, ReportError> {
    let old: OldLab = parse(v, "linerate.lab/1 (before typed documents)")?;
    let scenario = old.scenario.as_ref().filter(|s| s.is_object()).or(old.lab.as_ref().filter(|s| s.is_object()));
    let name = scenario
        .and_then(|s| s.get("name"))
        .or_else(|| old.scenario.as_ref().filter(|s| s.is_string()))
        .and_then(Value::as_str)
        .unwrap_or("lab");
    let mut r = RunReport::new(RunKind::Lab, format!("lab {name}"));
    // the document's fields that are run parameters today (`scenario`, `run_id`, the times,
    // `lab` where it is the runner's description); the sketch's own are left out
    if let Some(o) = v.as_object() {
        let kept: Map<String, Value> = o
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "schema" | "runs" | "hosts" | "guests" | "groups" | "machine"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        r.params = RunParams::deserialize(&Value::Object(kept)).unwrap_or_default();
    }
    // the sketch named its scenario in `lab`: its name and description are the scenario's
    if r.params.scenario.is_none() {
        let description = scenario.and_then(|s| s.get("description")).and_then(Value::as_str).unwrap_or_default();
        r.params.scenario =
            Some(LabScenario { name: name.to_string(), description: description.to_string(), file: String::new() });
    }
    r.hosts = match (old.hosts, old.machine) {
        (Some(h), _) => Hosts::deserialize(&h).unwrap_or_default(),
        (None, Some(m)) => Hosts { machine: Machine::deserialize(&m).ok(), ..Hosts::default() },
        (None, None) => Hosts::default(),
    };
    if let Some(t) = old.started_unix {
        let version = r.tool_version.clone();
        stamp(&mut r, t, &version);
    }
    // what the older documents did not say, kept to show them as they were
    let shown: Vec<(String, bool)> = old.runs.iter().map(|o| (o.tool.clone(), o.streams.is_none())).collect();
    let runs = old.runs.into_iter().map(upgrade).collect::<Result<Vec<_>, _>>()?;
    lab_charts(&mut r, &runs);
    for t in r.tables.iter_mut() {
        let streams = t.columns.iter().position(|c| c == "streams");
        match (t.title.as_str(), streams) {
            ("Every measurement", _) => {
                t.rows.iter_mut().zip(&shown).for_each(|(row, (tool, _))| row[1] = Cell::from(tool.as_str()))
            }
            // the groups' table (its title may go on to say some are incomplete)
            (title, Some(col)) if title.starts_with("Runs (median of repeats)") => {
                for row in t.rows.iter_mut() {
                    let unsaid =
                        runs.iter().zip(&shown).find(|(run, _)| row[0] == run.group.as_str()).is_some_and(|(_, s)| s.1);
                    if unsaid {
                        row[col] = Cell::Null;
                    }
                }
            }
            _ => {}
        }
    }
    // the sketch's per-guest results and guarantees join the single runs' time series
    let mut lines = Vec::new();
    let mut guarantees = Vec::new();
    for g in &old.guests {
        let iv = g.intervals.iter().map(|i| (i.start_s, i.end_s, i.bps));
        lines.extend(super::bench::intervals_line(&g.name, iv));
        if let Some(x) = g.guarantee_bps {
            guarantees.push(RefLine { label: format!("{} guarantee", g.name), value: x });
        }
        if let Some(x) = g.rate_bps {
            r.metric(MetricId::group(GroupFigure::Guest, &g.name), x, "bit/s", Better::Higher);
        }
    }
    if let Some(x) = scenario.and_then(|s| s.get("guarantee_bps")).and_then(Value::as_f64) {
        guarantees.push(RefLine { label: "guarantee".into(), value: x });
    }
    if !lines.is_empty() || !guarantees.is_empty() {
        const TITLE: &str = "Throughput over time (first repeat)";
        if r.charts.series.last().is_none_or(|c| c.title != TITLE) && !lines.is_empty() {
            let chart =
                TimeChart { title: TITLE.into(), unit: "bit/s".into(), lines: Vec::new(), guarantees: Vec::new() };
            r.charts.series.push(chart);
        }
        if let Some(c) = r.charts.series.last_mut().filter(|c| c.title == TITLE) {
            c.lines.extend(lines);
            c.lines.truncate(8);
            c.guarantees.extend(guarantees);
        }
    }
    Ok(r)
}
