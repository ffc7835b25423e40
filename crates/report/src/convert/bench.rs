//! `linerate.bench/1` → run: headline metrics from the summary, a time series of the
//! intervals, per-connection fairness bars, the latency distribution, and for a sweep line
//! charts of throughput, transactions and CPU against the swept parameter with a table.

use super::parts::{num, push_point, stamp};
use crate::model::*;
use crate::ReportError;
use linerate_model::doc::bench::{
    BenchConnection, BenchDocument, BenchInterval, BenchSummary, BenchTest, GroupFigures, Latency, LatencyFigure,
    SweepParam, BENCH_SCHEMA,
};
use linerate_model::metric::{Goal, MetricId, ProfileFigure, RunFigure, Side, SideFigure};
use linerate_model::units::significant;

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
    pub latency: Vec<(LatencyFigure, f64)>,
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
    /// CPU cores of each machine, local then remote (the contract sample has none).
    pub cores: [Option<f64>; 2],
    /// The share of each machine's CPU time the hypervisor took (steal), local then remote.
    pub steal: [Option<f64>; 2],
    /// A profile's groups (rrul's bulk flows and latency probe), each with its own figures.
    pub groups: Vec<GroupFigures>,
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
            cores: [s.cpu.local.cores, s.cpu.remote.cores].map(|c| (c > 0).then_some(f64::from(c))),
            steal: [Some(s.cpu.local.steal), Some(s.cpu.remote.steal)],
            groups: s.groups.clone(),
        }
    }
}

/// What a bench run's report is made of, from a typed document or a legacy one.
pub(crate) struct BenchParts {
    /// The test's name (`tcp-stream`).
    pub name: String,
    /// The agent it ran against.
    pub target: Option<String>,
    pub params: RunParams,
    pub hosts: Hosts,
    /// The typed document, when the run is made from one.
    pub body: Option<Body>,
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
        None => SweepParam::varying(points.iter().map(|(t, _)| t)),
    };
    let mut r = bench_report(BenchParts {
        name: doc.test.as_ref().map_or_else(|| "bench".into(), |t| t.test.clone()),
        target: doc.test.as_ref().map(|t| t.server.clone()),
        params: RunParams {
            mtu: doc.summary.as_ref().and_then(|s| s.efficiency).map(|e| e.mtu).filter(|m| *m > 0),
            ..doc.test.as_ref().map(test_params).unwrap_or_default()
        },
        hosts: Hosts { local: doc.hosts.local.clone(), remote: doc.hosts.remote.clone(), machine: None },
        body: Some(Body::Bench(Box::new(doc.clone()))),
        stamp: Some((doc.started_unix_s, doc.tool.version.clone())),
        figures: doc.summary.as_ref().map(Figures::from),
        latency: doc.summary.as_ref().and_then(|s| s.latency_us.as_ref()).map(latency_points).unwrap_or_default(),
        intervals: doc.intervals.clone().unwrap_or_default(),
        connections: doc.connections.clone().unwrap_or_default(),
        sweep,
        points,
    });
    repeat_spread(&mut r, doc);
    steal_adjusted(&mut r, doc);
    Ok(r)
}

/// A test's fields as run parameters.
fn test_params(t: &BenchTest) -> RunParams {
    let o = &t.options;
    RunParams {
        version: Some(t.version),
        kind: Some(t.kind.clone()),
        // a connection each way is another test than connections carrying both ways
        direction: Some(if o.each_way { format!("{} each way", t.direction) } else { t.direction.clone() }),
        connections: Some(t.connections),
        duration_ms: Some(t.duration_ms),
        omit_ms: Some(t.omit_ms),
        interval_ms: Some(t.interval_ms),
        msg_size: Some(t.msg_size),
        resp_size: Some(t.resp_size),
        sndbuf: t.sndbuf,
        rcvbuf: t.rcvbuf,
        rate: t.rate,
        zerocopy: Some(t.zerocopy),
        nodelay: Some(t.nodelay),
        profile: t.profile.clone(),
        server: Some(t.server.clone()),
        test: Some(t.test.clone()),
        congestion: o.congestion.clone(),
        tos: o.tos,
        bytes: o.bytes,
        mss: o.mss,
        cport: o.cport,
        client_cpu: o.client_cpu,
        server_cpu: o.server_cpu,
        gsro: o.gsro,
        ..RunParams::default()
    }
}

/// The distribution to plot: the HDR `curve` when it has two points or more (the 100th
/// percentile left out: it has no place on a nines axis), else the percentiles
/// ([`LatencyFigure::PERCENTILES`]: p50, p90, p99 and p99.9).
pub(crate) fn latency_points(l: &Latency) -> Vec<[f64; 2]> {
    let curve: Vec<[f64; 2]> =
        l.curve.iter().map(|c| [c.percentile, c.us]).filter(|p| (0.0..100.0).contains(&p[0])).collect();
    if curve.len() >= 2 {
        curve
    } else {
        percentile_points(|f| Some(l.get(f)))
    }
}

/// The percentiles ([`LatencyFigure::PERCENTILES`]) `get` has, as (percentile, µs) points.
pub(crate) fn percentile_points(get: impl Fn(LatencyFigure) -> Option<f64>) -> Vec<[f64; 2]> {
    LatencyFigure::PERCENTILES.into_iter().filter_map(|f| Some([f.percentile()?, get(f)?])).collect()
}

/// A line of rates over time, each interval's rate at its end (so the time axis ends where the
/// test did), the test's shutdown left out ([`steady`]).
pub(crate) fn intervals_line(name: &str, intervals: impl IntoIterator<Item = (f64, f64, f64)>) -> Option<Line> {
    let points: Vec<[f64; 2]> =
        steady(intervals.into_iter().collect()).into_iter().map(|(_, end, bps)| [end, bps]).collect();
    (!points.is_empty()).then(|| Line { name: name.to_string(), points })
}

pub(crate) use linerate_model::stats::steady;

/// The spread of a bench run's goal figure across its reporting intervals after the warm-up
/// (the shutdown's tail left out), for a run of one point (issue 33).
fn interval_spread(r: &mut RunReport, intervals: &[BenchInterval], points: usize) {
    if points > 1 {
        return;
    }
    let rr = r.is_request_response();
    let goal = MetricId::goal(Goal::of(rr));
    let pick = |i: &BenchInterval| if rr { i.transactions_per_s } else { i.bps };
    let samples: Vec<f64> =
        steady(intervals.iter().filter(|i| !i.omitted).map(|i| (i.start_s, i.end_s, pick(i))).collect())
            .into_iter()
            .map(|(_, _, x)| x)
            .collect();
    if r.find_metric(&goal).is_some() {
        r.set_spread(goal, &samples, SpreadOf::Intervals);
    }
}

/// With two or more `--repeat` runs, the goal figure is their mean (as netperf's and
/// hyperfine's: the value the confidence interval is centred on, not the last run's) and its
/// spread theirs, in place of the intervals'; for a sweep, the best point's. Each machine's
/// steal share, when the runs kept theirs, is their mean too.
fn repeat_spread(r: &mut RunReport, doc: &BenchDocument) {
    let rr = r.is_request_response();
    let (goal, best) = (MetricId::goal(Goal::of(rr)), MetricId::best(Goal::of(rr)));
    let repeats = |i: usize| doc.points.get(i).map(|p| p.repeats.runs.clone()).filter(|runs| runs.len() >= 2);
    let (name, runs) = if doc.points.len() <= 1 {
        (goal, repeats(0))
    } else {
        let Some(value) = r.find_metric(&best).map(|m| m.value) else { return };
        let figure = |s: &BenchSummary| if rr { s.transactions_per_s } else { Some(s.throughput_bps) };
        (best, doc.points.iter().position(|p| figure(&p.summary) == Some(value)).and_then(repeats))
    };
    if let Some(runs) = runs {
        if let Some(m) = r.metrics.iter_mut().find(|m| m.name == name) {
            if let Some(mean) = linerate_model::stats::mean(&runs) {
                m.value = mean;
            }
            r.set_spread(name, &runs, SpreadOf::Repeats);
        }
    }
    // A test of one point whose runs kept their steal: each machine's share the runs' mean.
    if let [p] = doc.points.as_slice() {
        let steal = &p.repeats.steal;
        if p.repeats.runs.len() >= 2 && steal.len() == p.repeats.runs.len() {
            for (i, side) in Side::BENCH.into_iter().enumerate() {
                let shares: Vec<f64> = steal.iter().map(|s| [s.local, s.remote][i] * 100.0).collect();
                let mean = linerate_model::stats::mean(&shares);
                let name = MetricId::side(SideFigure::Steal, side);
                if let (Some(m), Some(mean)) = (r.metrics.iter_mut().find(|m| m.name == name), mean) {
                    m.value = mean;
                }
            }
        }
    }
    // A test of one point with transactions: its latency percentiles the same way, each run's
    // percentile a sample (a sweep's latency figures are its first point's, left as they are).
    let latencies = match doc.points.as_slice() {
        [p] if p.repeats.latency_us.len() >= 2 => &p.repeats.latency_us,
        _ => return,
    };
    for (i, (k, _)) in latencies[0].figures().into_iter().enumerate() {
        let samples: Vec<f64> = latencies.iter().map(|l| l.figures()[i].1).collect();
        let name = MetricId::latency(k);
        let Some(m) = r.metrics.iter_mut().find(|m| m.name == name) else { continue };
        if let Some(mean) = linerate_model::stats::mean(&samples) {
            m.value = mean;
        }
        r.set_spread(name, &samples, SpreadOf::Repeats);
    }
}

/// The least spread of the runs' steal (standard deviation, share of the CPU time) a line through
/// their (steal, figure) points is fitted to: 1 percentage point. Below it the runs were made at
/// about the same steal and the line's slope is the figure's noise over a tick of `/proc/stat`
/// (issue 43: readings of 0 and one 0.005 gave a slope of −186 Gbit/s per unit of steal and a
/// figure 5.2 % above every run).
pub const MIN_STEAL_SD: f64 = 0.01;

/// A repeated one-point run's goal figure with the hypervisor's steal taken out (issue 33):
/// `GOAL.steal_adjusted` ([`MetricId::steal_adjusted`]), from the runs that kept their
/// steal (`--repeat`, three or more): the figure at zero steal of the least-squares line through
/// the runs' (steal, figure) points (the larger of the two machines' steal), with the standard
/// error of that estimate as its noise ([`SpreadOf::Fit`]). The line is the measurement's own:
/// a test the CPU bounds loses to the steal as much as it does here, one a link bounds not at
/// all (slope 0). The line is used only where it can be estimated (issue 43): the runs' steal
/// spread at least [`MIN_STEAL_SD`], and a slope that falls with the steal and is told apart
/// from zero ([`linerate_model::stats::LineFit::slope_is_significant`]). Otherwise, and for a
/// run with a rate cap (bound by its cap, not by the CPU), the figure is the runs' mean with
/// their spread ([`SpreadOf::Repeats`]), and `report compare` says which of the two it judged.
fn steal_adjusted(r: &mut RunReport, doc: &BenchDocument) {
    let [p] = doc.points.as_slice() else { return };
    let (runs, steal) = (&p.repeats.runs, &p.repeats.steal);
    if runs.len() < 3 || steal.len() != runs.len() {
        return;
    }
    let goal = Goal::of(r.is_request_response());
    let Some(m) = r.find_metric(&MetricId::goal(goal)).cloned() else { return };
    let capped = r.params.rate.is_some();
    let stolen: Vec<f64> = steal.iter().map(|s| s.local.max(s.remote)).collect();
    if stolen.iter().any(|s| !(0.0..=1.0).contains(s)) {
        return;
    }
    let name = MetricId::steal_adjusted(goal);
    match steal_fit(&stolen, runs).filter(|_| !capped) {
        Some(f) => {
            r.metric(name.clone(), f.at_zero, &m.unit, m.better);
            r.spreads.push(Spread { metric: name, sd: f.at_zero_se, n: runs.len() as u64, of: SpreadOf::Fit });
        }
        None => {
            let Some(mean) = linerate_model::stats::mean(runs) else { return };
            r.metric(name.clone(), mean, &m.unit, m.better);
            r.set_spread(name, runs, SpreadOf::Repeats);
        }
    }
}

/// The line through the runs' (steal, figure) points, where it can be estimated: the steal
/// spread at least [`MIN_STEAL_SD`], a slope that falls and is significant.
fn steal_fit(stolen: &[f64], runs: &[f64]) -> Option<linerate_model::stats::LineFit> {
    let spread = linerate_model::stats::std_dev(stolen)?;
    if spread < MIN_STEAL_SD {
        return None;
    }
    linerate_model::stats::line_fit(stolen, runs).filter(|f| f.slope < 0.0 && f.slope_is_significant())
}

/// One bar per connection, labelled `#ID`.
pub(crate) fn flows_of(connections: &[BenchConnection]) -> Vec<Bar> {
    connections.iter().map(|c| Bar { label: format!("#{}", c.id), value: c.bps }).collect()
}

/// Headline metrics of a summary's figures.
fn summary_metrics(r: &mut RunReport, f: &Figures) {
    let opt = |r: &mut RunReport, name: MetricId, x: Option<f64>, unit: &str, better: Better| {
        if let Some(x) = x {
            r.metric(name, x, unit, better);
        }
    };
    opt(r, MetricId::goal(Goal::Throughput), f.throughput, "bit/s", Better::Higher);
    opt(r, MetricId::goal(Goal::Transactions), f.transactions, "1/s", Better::Higher);
    opt(r, MetricId::run(RunFigure::Jain), f.jain, "", Better::Higher);
    opt(r, MetricId::run(RunFigure::Loss), f.loss, "%", Better::Lower);
    for (k, x) in &f.latency {
        r.metric(MetricId::latency(*k), *x, "us", Better::Lower);
    }
    opt(r, MetricId::run(RunFigure::Packets), f.packets, "1/s", Better::Higher);
    opt(r, MetricId::run(RunFigure::Jitter), f.jitter, "us", Better::Lower);
    opt(r, MetricId::run(RunFigure::Rtt), f.rtt, "us", Better::Lower);
    opt(r, MetricId::run(RunFigure::Retransmits), f.retransmits, "", Better::Lower);
    // A profile's groups apart: `group.NAME.send`, `.receive`, `.transactions`, `.latency.p50`...
    for g in &f.groups {
        let name = |k: ProfileFigure| MetricId::profile(&g.name, k);
        r.metric(name(ProfileFigure::Send), g.send_bps, "bit/s", Better::Higher);
        r.metric(name(ProfileFigure::Receive), g.receive_bps, "bit/s", Better::Higher);
        opt(r, name(ProfileFigure::Transactions), g.transactions_per_s, "1/s", Better::Higher);
        for (k, x) in g.latency_us.as_ref().map(|l| l.figures().to_vec()).unwrap_or_default() {
            r.metric(name(ProfileFigure::Latency(k)), x, "us", Better::Lower);
        }
    }
    for (i, side) in Side::BENCH.into_iter().enumerate() {
        // netperf's service demand: CPU microseconds per KB moved, per transaction
        opt(r, MetricId::side(SideFigure::ServiceDemand, side), f.service_demand[i], "us/KB", Better::Lower);
        opt(r, MetricId::side(SideFigure::ServiceDemandTran, side), f.service_demand_tran[i], "us", Better::Lower);
    }
    for (i, side) in Side::BENCH.into_iter().enumerate() {
        opt(r, MetricId::side(SideFigure::Steal, side), f.steal[i].map(|x| x * 100.0), "%", Better::Lower);
        if let Some(c) = f.cpu[i] {
            r.metric(MetricId::side(SideFigure::Cpu, side), c * 100.0, "%", Better::Lower);
            // CPU seconds per gigabit moved, as cp has it: the busy share of the machine is
            // `c × cores` CPU seconds each second, over `bps / 1e9` gigabits each second
            if let (Some(bps), Some(cores)) = (f.throughput.filter(|b| *b > 0.0), f.cores[i]) {
                let per_gbit = c * cores / (bps / 1e9);
                r.metric(MetricId::side(SideFigure::CpuPerGbit, side), per_gbit, "s/Gbit", Better::Lower);
            }
        }
    }
}

/// For a sweep: the best point's goal figure first (`throughput.best`, or `transactions.best`
/// for a request/response test), and parameters saying how many points there were, which was
/// best and what the sweep ranged over.
fn best_point(r: &mut RunReport, rr: bool, sweep: &[SweepParam], points: &[(BenchTest, Figures)]) {
    let goal = |f: &Figures| if rr { f.transactions } else { f.throughput };
    let best = points
        .iter()
        .filter_map(|(t, f)| Some((t, goal(f).filter(|x| x.is_finite())?)))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    if let Some((test, value)) = best {
        let unit = if rr { "1/s" } else { "bit/s" };
        r.metric(MetricId::best(Goal::of(rr)), value, unit, Better::Higher);
        let at: Vec<String> =
            sweep.iter().filter_map(|k| Some(format!("{}={}", k.name(), significant(k.value(test)?, 6)))).collect();
        r.params.best_point = Some(at.join(" "));
    }
    r.params.points = Some(points.len() as u64);
    let ranges: Vec<String> = sweep
        .iter()
        .filter_map(|k| {
            let vals: Vec<f64> = points.iter().filter_map(|(t, _)| k.value(t)).collect();
            let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            (lo.is_finite() && hi > lo).then(|| format!("{} {}–{}", k.name(), significant(lo, 6), significant(hi, 6)))
        })
        .collect();
    if !ranges.is_empty() {
        r.params.sweep_range = Some(ranges.join(", "));
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
    r.body = p.body;
    if let Some((t, v)) = &p.stamp {
        stamp(&mut r, *t, v);
    }
    if let Some(f) = &p.figures {
        summary_metrics(&mut r, f);
    }
    interval_spread(&mut r, &p.intervals, p.points.len());
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
    // A profile's groups with transactions each draw their own line (the probe apart from the rest).
    let group_lines: Vec<Line> = p
        .figures
        .iter()
        .flat_map(|f| &f.groups)
        .filter_map(|g| Some(Line { name: g.name.clone(), points: latency_points(g.latency_us.as_ref()?) }))
        .collect();
    if group_lines.len() > 1 {
        r.charts.latency.push(LatencyChart { title: "Latency percentiles by group".into(), lines: group_lines });
    } else if !p.latency.is_empty() {
        let mut points = p.latency;
        points.sort_by(|a, b| a[0].total_cmp(&b[0]));
        r.charts.latency.push(LatencyChart {
            title: "Latency percentiles".into(),
            lines: vec![Line { name: p.name.clone(), points }],
        });
    }
    if p.points.len() >= 2 {
        sweep_charts(&mut r, &p.name, &p.sweep, &p.points);
        best_point(&mut r, request_response(&p.name), &p.sweep, &p.points);
    }
    // the figures the run is judged by first, a sweep's best point before all: the summary
    // and `report list` lead with them
    let rank: Vec<u8> = r
        .metrics
        .iter()
        .map(|m| match (m.name.is_best(), r.is_goal(&m.name)) {
            (true, _) => 0,
            (false, true) => 1,
            (false, false) => 2,
        })
        .collect();
    let mut ordered: Vec<(u8, Metric)> = rank.into_iter().zip(std::mem::take(&mut r.metrics)).collect();
    ordered.sort_by_key(|(rank, _)| *rank);
    r.metrics = ordered.into_iter().map(|(_, m)| m).collect();
    // named by its key parameters, so that `report list` tells a capped or reversed run apart
    let label = crate::compare::label(&r);
    if !label.is_empty() {
        r.title = format!("{} ({label})", r.title);
    }
    r
}

/// A number cell: an integer when the value is one.
fn count_cell(x: f64) -> Cell {
    if x.fract() == 0.0 && x.abs() < 9e15 {
        Cell::Int(x as i64)
    } else {
        Cell::Number(x)
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
        let mut row = vec![Cell::Number(x)];
        row.extend(others.iter().map(|k| k.value(test).map_or(Cell::Null, count_cell)));
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
        r.params.sweep = Some(k.name().to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linerate_model::doc::bench::SidePair;
    use linerate_model::doc::example;

    /// The example document cut to its first point, as a test of kind `kind` without a sweep.
    fn one_point(kind: &str) -> BenchDocument {
        let mut doc = example::bench();
        doc.points.truncate(1);
        doc.sweep = Some(Vec::new());
        for t in doc.test.iter_mut().chain([&mut doc.points[0].test]) {
            t.kind = kind.into();
            t.test = kind.into();
        }
        doc
    }

    #[test]
    fn repeated_runs_are_stored_as_their_mean_with_their_spread() {
        let mut doc = one_point("tcp-stream");
        let last = doc.points[0].summary.throughput_bps;
        doc.points[0].repeats.runs = vec![8e9, 10e9, 12e9, last];
        for s in doc.summary.iter_mut().chain([&mut doc.points[0].summary]) {
            s.cpu.remote.steal = 0.125;
        }
        let r = from_bench(&doc).unwrap();
        let steal = |side: &str| r.find_metric(&format!("steal.{side}")).map(|m| m.value);
        assert_eq!((steal("local"), steal("remote")), (Some(0.0), Some(12.5)), "the hypervisor's share, percent");
        let want = (30e9 + last) / 4.0;
        assert_eq!(r.find_metric("throughput").unwrap().value, want, "the mean, not the last run's {last}");
        let s = r.spread("throughput").unwrap();
        assert_eq!((s.n, s.of), (4, SpreadOf::Repeats));
        // one run: its own figure, spread over its intervals (when it has two or more)
        doc.points[0].repeats.runs = vec![last];
        let r = from_bench(&doc).unwrap();
        assert_eq!(r.find_metric("throughput").unwrap().value, last);
        assert_ne!(r.spread("throughput").map(|s| s.of), Some(SpreadOf::Repeats));
    }

    #[test]
    fn a_repeated_runs_figure_is_kept_at_zero_steal_too() {
        let name = "throughput.steal_adjusted";
        let mut doc = one_point("tcp-stream");
        doc.points[0].test.rate = None;
        doc.test = Some(doc.points[0].test.clone());
        let pair = |local, remote| SidePair { local, remote };
        // 10 Gbit/s less 20 Gbit/s per unit of steal, the larger of the two machines'
        doc.points[0].repeats.runs = vec![8e9, 10e9, 6e9, 9e9];
        doc.points[0].repeats.steal = vec![pair(0.1, 0.0), pair(0.0, 0.0), pair(0.0, 0.2), pair(0.05, 0.01)];
        let r = from_bench(&doc).unwrap();
        let close = |x: f64, want: f64| (x - want).abs() < want * 1e-9;
        let m = r.find_metric(name).unwrap();
        assert!(close(m.value, 10e9) && m.better == Better::Higher, "{m:?}");
        let s = r.spread(name).unwrap();
        assert!((s.n, s.of) == (4, SpreadOf::Fit) && s.sd < 1.0 && s.noise() == s.sd, "{s:?}");
        assert!(close(r.find_metric("throughput").unwrap().value, 8.25e9), "the figure as measured stays");
        let steal = |side: &str| r.find_metric(&format!("steal.{side}")).map(|m| m.value);
        let (l, rm) = (steal("local").unwrap(), steal("remote").unwrap());
        assert!(close(l, 3.75) && close(rm, 5.25), "the mean of the runs' steal: {l} {rm}");
        // a run with a rate cap is bound by it, not by the CPU: the runs' mean
        doc.points[0].test.rate = Some(9_500_000_000);
        doc.test = Some(doc.points[0].test.clone());
        let r = from_bench(&doc).unwrap();
        assert!(close(r.find_metric(name).unwrap().value, 8.25e9), "{:?}", r.find_metric(name));
        assert_eq!(r.spread(name).map(|s| (s.n, s.of)), Some((4, SpreadOf::Repeats)));
        // a rate that rises with the steal (noise): the steal cost nothing, the runs' mean
        doc.points[0].test.rate = None;
        doc.test = Some(doc.points[0].test.clone());
        doc.points[0].repeats.runs = vec![9e9, 10e9, 11e9, 10e9];
        let r = from_bench(&doc).unwrap();
        assert!(close(r.find_metric(name).unwrap().value, 10e9));
        assert_eq!(r.spread(name).map(|s| (s.n, s.of)), Some((4, SpreadOf::Repeats)));
        // issue 43's case: steal read 0 but for one tick of 0.005 in one run, a run faster than
        // the others: the line would put the figure at zero steal above every run; the mean
        doc.points[0].repeats.runs = vec![8.0e9, 7.6e9, 8.1e9, 7.7e9, 7.5e9];
        doc.points[0].repeats.steal = [0.0, 0.0, 0.0, 0.005, 0.0].map(|x| pair(x, 0.0)).to_vec();
        let r = from_bench(&doc).unwrap();
        assert!(close(r.find_metric(name).unwrap().value, 7.78e9), "{:?}", r.find_metric(name));
        assert_eq!(r.spread(name).map(|s| s.of), Some(SpreadOf::Repeats));
        // the steal spread enough, but the runs scatter around a flat line: no trend, the mean
        doc.points[0].repeats.steal = [0.0, 0.1, 0.2, 0.0, 0.1].map(|x| pair(0.0, x)).to_vec();
        doc.points[0].repeats.runs = vec![8e9, 9e9, 8.5e9, 9.5e9, 8.2e9];
        let r = from_bench(&doc).unwrap();
        assert_eq!(r.spread(name).map(|s| s.of), Some(SpreadOf::Repeats), "{:?}", r.find_metric(name));
        // the same steal with a clear fall: fitted
        doc.points[0].repeats.runs = vec![10e9, 8.1e9, 5.9e9, 10.1e9, 8e9];
        let r = from_bench(&doc).unwrap();
        assert_eq!(r.spread(name).map(|s| s.of), Some(SpreadOf::Fit), "{:?}", r.find_metric(name));
        doc.points[0].repeats.runs = vec![8e9, 10e9, 6e9, 9e9];
        // every run's steal the same: nothing to fit, the mean
        doc.points[0].repeats.steal = vec![pair(0.1, 0.0); 4];
        assert_eq!(from_bench(&doc).unwrap().spread(name).map(|s| s.of), Some(SpreadOf::Repeats));
        // runs without their steal, a steal out of range, two runs: none
        doc.points[0].repeats.steal[1] = pair(1.5, 0.0);
        assert!(from_bench(&doc).unwrap().find_metric(name).is_none());
        doc.points[0].repeats.steal.pop();
        assert!(from_bench(&doc).unwrap().find_metric(name).is_none());
        doc.points[0].repeats.runs = vec![9e9, 8e9];
        doc.points[0].repeats.steal = vec![pair(0.1, 0.0), pair(0.2, 0.0)];
        assert!(from_bench(&doc).unwrap().find_metric(name).is_none());
    }

    #[test]
    fn repeated_latency_percentiles_are_stored_as_their_mean_with_their_spread_and_judged_by_it() {
        use linerate_model::doc::bench::RunLatency;
        let rr = |p99s: [f64; 3]| {
            let mut doc = one_point("tcp-rr");
            let summary = doc.summary.clone().unwrap();
            assert!(summary.latency_us.is_some(), "the example has latency");
            doc.points[0].summary = summary;
            doc.points[0].repeats.runs = vec![20e3, 21e3, 19e3];
            doc.points[0].repeats.latency_us =
                p99s.iter().map(|&p99| RunLatency { p50: 40.0, p90: 60.0, p99, p999: 2.0 * p99 }).collect();
            from_bench(&doc).unwrap()
        };
        let a = rr([90.0, 100.0, 110.0]);
        assert_eq!(a.find_metric("latency.p99").unwrap().value, 100.0, "the mean of the runs' p99");
        assert_eq!(a.find_metric("latency.p999").unwrap().value, 200.0);
        let s = a.spread("latency.p99").unwrap();
        assert_eq!((s.n, s.of, s.sd), (3, SpreadOf::Repeats, 10.0));
        // p50 did not move between runs: no spread to speak of
        assert_eq!(a.spread("latency.p50").unwrap().sd, 0.0);
        // p99 +15 %: within 3 · √2 · 10/√3 = 24.5 µs of noise; +40 % is beyond it
        let row = |c: &crate::compare::Comparison| {
            c.rows.iter().find(|r| r.name == "latency.p99").map(|r| (r.within_noise, r.regression)).unwrap()
        };
        let c = crate::compare::compare(&a, &rr([105.0, 115.0, 125.0]), 5.0);
        assert_eq!(row(&c), (true, false), "{}", c.to_text());
        let c = crate::compare::compare(&a, &rr([130.0, 140.0, 150.0]), 5.0);
        assert_eq!(row(&c), (false, true), "{}", c.to_text());
    }

    #[test]
    fn a_profiles_groups_become_metrics_and_latency_lines_of_their_own() {
        let mut doc = example::bench();
        let summary = doc.summary.as_mut().unwrap();
        let probe = summary.latency_us.clone();
        let group = |name: &str, latency: Option<Latency>| GroupFigures {
            name: name.into(),
            connections: 4,
            send_bps: 1e9,
            receive_bps: 0.0,
            transactions_per_s: latency.as_ref().map(|_| 200.0),
            latency_us: latency,
        };
        summary.groups = vec![group("upload", None), group("latency", probe.clone()), group("rpc", probe)];
        let r = from_bench(&doc).unwrap();
        let names: Vec<String> = r.metrics.iter().map(|m| m.name.to_string()).collect();
        for want in
            ["group.upload.send", "group.latency.transactions", "group.latency.latency.p99", "group.rpc.latency.p50"]
        {
            assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
        }
        assert!(!names.iter().any(|n| n == "group.upload.transactions"), "bulk has no transactions: {names:?}");
        let lines: Vec<&str> = r.charts.latency[0].lines.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(lines, ["latency", "rpc"], "one line per group with transactions");
    }
}
