//! `linerate.lab/1` → run. Runs measured together form a group (their explicit `group`);
//! groups become bars (median over repeats) against the best group of iperf3 runs as ceiling;
//! sweep steps (their explicit `sweep`) become throughput and fairness against guests; single
//! runs of one tool at several stream counts become throughput and CPU against connections;
//! groups of several runs give fairness bars and time series with their guarantees.

use super::bench::{flows_of, intervals_line, latency_points};
use super::parts::{num, push_point, stamp};
use crate::model::*;
use crate::ReportError;
use linerate_model::doc::lab::{LabDocument, LabRun, LAB_SCHEMA};
use linerate_model::metric::{GroupFigure, MetricId};
use linerate_model::stats::{jain, median};
use std::collections::BTreeSet;

/// A run's measured rate, if it succeeded.
fn rate(run: &LabRun) -> Option<f64> {
    run.rate_bps.filter(|_| run.ok)
}

/// A run's CPU on one side, percent of the machine.
fn cpu_pct(run: &LabRun, remote: bool) -> Option<f64> {
    let c = run.cpu?;
    Some(if remote { c.remote? } else { c.local? }.busy() * 100.0)
}

/// Runs measured together (a lab `group`) over their repeats.
struct Group<'a> {
    name: &'a str,
    runs: Vec<&'a LabRun>,
}

impl Group<'_> {
    fn repeats(&self) -> Vec<u32> {
        let set: BTreeSet<u32> = self.runs.iter().map(|r| r.repeat).collect();
        set.into_iter().collect()
    }
    fn members(&self, repeat: u32) -> Vec<&LabRun> {
        self.runs.iter().copied().filter(|r| r.repeat == repeat).collect()
    }
    /// Total rate of each repeat in which some member measured one.
    fn totals(&self) -> Vec<f64> {
        self.repeats()
            .into_iter()
            .filter_map(|k| {
                let rates: Vec<f64> = self.members(k).into_iter().filter_map(rate).collect();
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
                    jain(&m.into_iter().filter_map(rate).collect::<Vec<_>>())
                } else {
                    m.first().and_then(|r| r.fairness)
                }
            })
            .collect()
    }
    fn cpu(&self, remote: bool) -> Vec<f64> {
        self.runs.iter().filter_map(|r| cpu_pct(r, remote)).collect()
    }
    /// The whole machine's busy core-seconds per GB moved, per repeat in which the members moved
    /// bytes and the runner read `/proc/stat` (every member carries the group's figure).
    fn machine_cpu_per_gb(&self) -> Vec<f64> {
        self.repeats()
            .into_iter()
            .filter_map(|k| {
                let m = self.members(k);
                let cpu = m.iter().find_map(|r| r.machine_cpu_s)?;
                let bytes: u64 = m.iter().filter(|r| rate(r).is_some()).filter_map(|r| r.bytes).sum();
                (bytes > 0).then(|| cpu / (bytes as f64 / 1e9))
            })
            .collect()
    }
    /// Every run is of a reference tool (iperf3).
    fn all_ceiling(&self) -> bool {
        self.runs.iter().all(|r| r.tool.is_ceiling())
    }
    /// A sweep step: the swept run's name and the instances measured together.
    fn sweep(&self) -> Option<(&str, f64)> {
        let s = self.runs.first()?.sweep.as_ref()?;
        Some((s.base.as_str(), f64::from(s.instances)))
    }
    fn streams(&self) -> Option<f64> {
        self.runs.first().map(|r| f64::from(r.streams))
    }
    /// Runs of the group that failed, over all repeats: a group with one is incomplete, and
    /// its totals and fairness are over the members that measured.
    fn failed(&self) -> Vec<&LabRun> {
        self.runs.iter().copied().filter(|r| rate(r).is_none()).collect()
    }
    /// The fewest members that measured in one repeat: `n` of [`Group::size`].
    fn measured(&self) -> usize {
        self.repeats()
            .into_iter()
            .map(|k| self.members(k).into_iter().filter(|r| rate(r).is_some()).count())
            .min()
            .unwrap_or(0)
    }
    /// The members' mean rate and its population standard deviation per repeat of several
    /// members, over those that measured: the hypervisor study's "627 ± 17 Mbit/s per guest".
    fn per_member(&self) -> Vec<(f64, f64)> {
        self.repeats()
            .into_iter()
            .filter_map(|k| {
                let rates: Vec<f64> = self.members(k).into_iter().filter_map(rate).collect();
                let n = rates.len() as f64;
                let mean = rates.iter().sum::<f64>() / n;
                let var = rates.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / n;
                (rates.len() > 1).then(|| (mean, var.sqrt()))
            })
            .collect()
    }
    /// The spread of the members' test starts per repeat, milliseconds (where two or more
    /// members recorded theirs).
    fn start_skew_ms(&self) -> Vec<f64> {
        self.repeats()
            .into_iter()
            .filter_map(|k| {
                let starts: Vec<u64> = self
                    .members(k)
                    .into_iter()
                    .filter(|r| rate(r).is_some())
                    .filter_map(|r| r.started_unix_us)
                    .collect();
                let (a, b) = (starts.iter().min()?, starts.iter().max()?);
                (starts.len() > 1).then(|| (b - a) as f64 / 1e3)
            })
            .collect()
    }
}

/// `linerate lab run` → run.
pub fn from_lab(doc: &LabDocument) -> Result<RunReport, ReportError> {
    if doc.schema != LAB_SCHEMA {
        return Err(ReportError::UnknownSchema(doc.schema.clone()));
    }
    let mut r = RunReport::new(RunKind::Lab, format!("lab {}", doc.scenario.name));
    r.params = RunParams {
        scenario: Some(doc.scenario.clone()),
        run_id: Some(doc.run_id.clone()),
        started_unix: Some(doc.started_unix),
        finished_unix: Some(doc.finished_unix),
        workdir: doc.workdir.clone(),
        time_scale: doc.time_scale,
        lab: Some(doc.lab.clone()),
        ..RunParams::default()
    };
    r.hosts = Hosts { machine: Some(doc.machine.clone()), ..Hosts::default() };
    r.body = Some(Body::Lab(Box::new(doc.clone())));
    stamp(&mut r, doc.started_unix, &doc.tool.version);
    lab_charts(&mut r, &doc.runs);
    if let Some(f) = doc.time_scale {
        r.title = format!("{} (smoke run: durations × {f}, not the experiment's figures)", r.title);
    }
    let groups = groups_of(&doc.runs);
    let incomplete = groups.iter().filter(|g| !g.failed().is_empty()).count();
    if incomplete > 0 {
        let failed = doc.runs.iter().filter(|r| rate(r).is_none()).count();
        r.title = format!(
            "{} — INCOMPLETE: {failed} of {} runs failed, {incomplete} of {} groups incomplete",
            r.title,
            doc.runs.len(),
            groups.len()
        );
    }
    Ok(r)
}

/// Metrics, charts and tables of a lab's runs.
pub(crate) fn lab_charts(r: &mut RunReport, runs: &[LabRun]) {
    let groups = groups_of(runs);
    headline(r, &groups);
    curves(r, &groups);
    group_charts(r, &groups);
    tables(r, &groups, runs);
}

/// The runs by group, in the order the groups first appear.
fn groups_of(runs: &[LabRun]) -> Vec<Group<'_>> {
    let mut groups: Vec<Group> = Vec::new();
    for run in runs {
        match groups.iter_mut().find(|g| g.name == run.group) {
            Some(g) => g.runs.push(run),
            None => groups.push(Group { name: &run.group, runs: vec![run] }),
        }
    }
    groups
}

/// Headline figures of every group, and bars of the groups that are not sweep steps against
/// the best iperf3 group as ceiling.
fn headline(r: &mut RunReport, groups: &[Group]) {
    let mut bars = Vec::new();
    let mut ceiling: Option<RefLine> = None;
    for g in groups {
        let key = |k: GroupFigure| MetricId::group(k, g.name);
        let Some(m) = median(&g.totals()) else { continue };
        r.metric(key(GroupFigure::Rate), m, "bit/s", Better::Higher);
        if let Some(j) = median(&g.fairness()) {
            r.metric(key(GroupFigure::Jain), j, "", Better::Higher);
        }
        if let Some(c) = median(&g.cpu(false)) {
            r.metric(key(GroupFigure::Cpu), c, "%", Better::Lower);
        }
        if let Some(c) = median(&g.machine_cpu_per_gb()) {
            r.metric(key(GroupFigure::MachineCpuPerGb), c, "core-s/GB", Better::Lower);
        }
        if let Some(c) = median(&g.start_skew_ms()) {
            r.metric(key(GroupFigure::StartSkew), c, "ms", Better::Lower);
        }

        if g.sweep().is_none() {
            bars.push(Bar { label: g.name.to_string(), value: m });
            if g.all_ceiling() && ceiling.as_ref().is_none_or(|c| m > c.value) {
                ceiling = Some(RefLine { label: format!("{} ceiling", g.name), value: m });
            }
        }
    }
    // every group says how many of its runs failed (after the rates, which head the run):
    // `report compare` reads it to keep an incomplete group's figures from passing for the
    // experiment's
    for g in groups {
        r.metric(MetricId::group(GroupFigure::Failed, g.name), g.failed().len() as f64, "", Better::Lower);
    }
    if let Some(c) = ceiling.as_ref().filter(|c| c.value > 0.0) {
        for g in groups.iter().filter(|g| g.sweep().is_none() && !g.all_ceiling()) {
            if let Some(b) = bars.iter().find(|b| b.label == g.name) {
                r.metric(MetricId::group(GroupFigure::Ratio, g.name), b.value / c.value, "", Better::Higher);
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
}

/// Sweeps: throughput and fairness against the number of guests, one line per swept run.
fn sweep_lines(groups: &[Group]) -> (Vec<Line>, Vec<Line>) {
    let (mut thr, mut fair): (Vec<Line>, Vec<Line>) = (Vec::new(), Vec::new());
    for g in groups {
        if let Some((base, n)) = g.sweep() {
            if let Some(m) = median(&g.totals()) {
                push_point(&mut thr, base, [n, m]);
            }
            if let Some(j) = median(&g.fairness()) {
                push_point(&mut fair, base, [n, j]);
            }
        }
    }
    (thr, fair)
}

/// Single runs of one tool (same hosts and arguments) at several stream counts: throughput
/// and CPU against connections, one line per tool.
fn scaling_lines(groups: &[Group]) -> (Vec<Line>, Vec<Line>) {
    let (mut scale, mut scale_cpu): (Vec<Line>, Vec<Line>) = (Vec::new(), Vec::new());
    let singles = || groups.iter().filter(|g| g.sweep().is_none() && g.size() == 1);
    for g in singles() {
        let (Some(run), Some(n)) = (g.runs.first(), g.streams()) else { continue };
        let shared = singles()
            .any(|o| o.runs.first().is_some_and(|x| x.tool == run.tool && (x.host != run.host || x.args != run.args)));
        let line = if shared {
            format!("{} {}→{} {}", run.tool.name(), run.host, run.server, run.args.join(" ")).trim_end().to_string()
        } else {
            run.tool.name().to_string()
        };
        if let Some(m) = median(&g.totals()) {
            push_point(&mut scale, &line, [n, m]);
        }
        for (side, remote) in [("local", false), ("remote", true)] {
            if let Some(c) = median(&g.cpu(remote)) {
                push_point(&mut scale_cpu, &format!("{line} {side} CPU"), [n, c]);
            }
        }
    }
    (scale, scale_cpu)
}

/// The x–y charts: a declared sweep is worth a line from two steps; stream counts from three.
fn curves(r: &mut RunReport, groups: &[Group]) {
    let (thr, fair) = sweep_lines(groups);
    let (scale, scale_cpu) = scaling_lines(groups);
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
}

/// A run's throughput over time as a line named `name`.
fn line_of(m: &LabRun, name: &str) -> Option<Line> {
    intervals_line(name, m.intervals.iter().map(|i| (i.start_s, i.end_s, i.bps)))
}

/// Per-guest bars of a group's members: by guest; when one host runs several members (one
/// per link), by host and link.
fn guest_flows(g: &Group, members: &[&LabRun]) -> Option<FlowChart> {
    let hosts: BTreeSet<&str> = members.iter().map(|m| m.host.as_str()).collect();
    let unique = hosts.len() == members.len();
    let bar_label = |m: &LabRun| match (&m.via, unique) {
        (_, true) => m.host.clone(),
        (Some(via), false) => format!("{}/{via}", m.host),
        (None, false) => m.name.clone(),
    };
    let flows: Vec<Bar> = members.iter().filter_map(|m| Some(Bar { label: bar_label(m), value: rate(m)? })).collect();
    (flows.len() > 1).then(|| FlowChart {
        title: format!("Per-guest throughput: {}", g.name),
        unit: "bit/s".into(),
        flows,
        jain: None,
    })
}

/// The members' throughput over time with their guarantees.
fn group_series(g: &Group, members: &[&LabRun]) -> Option<TimeChart> {
    let lines: Vec<Line> = members.iter().filter_map(|m| line_of(m, &m.name)).collect();
    let guarantees: Vec<RefLine> = members
        .iter()
        .filter_map(|m| {
            let value = m.guarantee.as_ref()?.rate_bps as f64;
            Some(RefLine { label: format!("{} guarantee", m.name), value })
        })
        .collect();
    (!lines.is_empty()).then(|| TimeChart {
        title: format!("Throughput over time: {}", g.name),
        unit: "bit/s".into(),
        lines,
        guarantees,
    })
}

/// Per-flow bars of a single `linerate bench` run that kept its connections.
fn bench_flows(g: &Group, run: &LabRun) -> Option<FlowChart> {
    let bench = run.raw.as_ref().and_then(|d| d.bench());
    let flows = bench.and_then(|b| b.connections.as_deref()).map(flows_of).unwrap_or_default();
    (flows.len() > 1).then(|| FlowChart {
        title: format!("Per-flow throughput: {}", g.name),
        unit: "bit/s".into(),
        flows,
        jain: run.fairness,
    })
}

/// A group's latency percentiles, from its first member's bench document.
fn latency_line(g: &Group, members: &[&LabRun]) -> Option<Line> {
    let first = members.first().and_then(|m| m.raw.as_ref()).and_then(|d| d.bench());
    let l = first.and_then(|b| b.summary.as_ref()?.latency_us.as_ref())?;
    let mut points = latency_points(l);
    points.sort_by(|a, b| a[0].total_cmp(&b[0]));
    Some(Line { name: g.name.to_string(), points })
}

/// Charts of each group's first repeat: per-guest bars (of a sweep, only its largest step),
/// time series with guarantees, single runs' series and per-flow bars, latency.
fn group_charts(r: &mut RunReport, groups: &[Group]) {
    let largest = |g: &Group| match g.sweep() {
        None => true,
        Some((base, n)) => !groups.iter().any(|o| o.sweep().is_some_and(|(b, m)| b == base && m > n)),
    };
    let mut singles = Vec::new();
    let mut latency_lines = Vec::new();
    for g in groups {
        let Some(first) = g.repeats().first().copied() else { continue };
        let members = g.members(first);
        if members.len() > 1 && largest(g) && r.charts.flows.len() < 8 {
            r.charts.flows.extend(guest_flows(g, &members));
        }
        if members.len() > 1 && g.sweep().is_none() {
            r.charts.series.extend(group_series(g, &members));
        }
        if members.len() == 1 && g.sweep().is_none() {
            singles.extend(line_of(members[0], g.name));
            if r.charts.flows.len() < 8 {
                r.charts.flows.extend(bench_flows(g, members[0]));
            }
        }
        if g.sweep().is_none() && latency_lines.len() < 8 {
            latency_lines.extend(latency_line(g, &members));
        }
    }
    if !singles.is_empty() {
        singles.truncate(8);
        r.charts.series.push(TimeChart {
            title: "Throughput over time (first repeat)".into(),
            unit: "bit/s".into(),
            lines: singles,
            guarantees: Vec::new(),
        });
    }
    if !latency_lines.is_empty() {
        r.charts.latency.push(LatencyChart { title: "Latency percentiles".into(), lines: latency_lines });
    }
}

/// The groups' table (medians of repeats) and every measurement's.
fn tables(r: &mut RunReport, groups: &[Group], runs: &[LabRun]) {
    if !groups.is_empty() {
        // the whole machine's CPU only when the runner recorded it (documents since issue 15)
        let machine = groups.iter().any(|g| !g.machine_cpu_per_gb().is_empty());
        let skew = groups.iter().any(|g| !g.start_skew_ms().is_empty());
        let several = groups.iter().any(|g| !g.per_member().is_empty());
        let incomplete = groups.iter().filter(|g| !g.failed().is_empty()).count();
        let rows = groups
            .iter()
            .map(|g| {
                let failed = g.failed();
                let (members, complete) = if failed.is_empty() {
                    (Cell::from(g.size()), Cell::from("yes"))
                } else {
                    let repeats = g.repeats().len() > 1;
                    let names: Vec<String> = failed
                        .iter()
                        .map(|r| match (r.name.is_empty(), repeats) {
                            (true, _) => format!("{} repeat {}", r.tool.name(), r.repeat),
                            (false, true) => format!("{} repeat {}", r.name, r.repeat),
                            (false, false) => r.name.clone(),
                        })
                        .collect();
                    (
                        Cell::from(format!("{} of {}", g.measured(), g.size())),
                        Cell::from(format!("INCOMPLETE: {} failed ({})", failed.len(), names.join(", "))),
                    )
                };
                let mut row = vec![
                    Cell::from(g.name),
                    members,
                    complete,
                    num(g.streams()),
                    Cell::from(g.repeats().len()),
                    num(median(&g.totals())),
                    num(median(&g.fairness())),
                    num(median(&g.cpu(false))),
                    num(median(&g.cpu(true))),
                ];
                if machine {
                    row.push(num(median(&g.machine_cpu_per_gb())));
                }
                if several {
                    let pm = g.per_member();
                    row.push(num(median(&pm.iter().map(|p| p.0).collect::<Vec<_>>())));
                    row.push(num(median(&pm.iter().map(|p| p.1).collect::<Vec<_>>())));
                }
                if skew {
                    row.push(num(median(&g.start_skew_ms())));
                }
                row
            })
            .collect();
        let mut columns =
            ["run", "members", "complete", "streams", "repeats", "rate (bit/s)", "Jain", "CPU (%)", "remote CPU (%)"]
                .map(String::from)
                .to_vec();
        if machine {
            columns.push("machine CPU (core-s/GB)".into());
        }
        if several {
            columns.push("per member (bit/s)".into());
            columns.push("per-member stdev (bit/s)".into());
        }
        if skew {
            columns.push("start skew (ms)".into());
        }
        let title = if incomplete == 0 {
            "Runs (median of repeats)".to_string()
        } else {
            format!(
                "Runs (median of repeats); {incomplete} INCOMPLETE: their members, rate and Jain are over the members that measured"
            )
        };
        r.tables.push(Table { title, columns, rows });
    }
    if !runs.is_empty() {
        let rows = runs
            .iter()
            .map(|run| {
                vec![
                    Cell::text(&run.name),
                    Cell::from(run.tool.name()),
                    Cell::text(&run.host),
                    Cell::from(run.repeat),
                    num(rate(run)),
                    num(run.duration_s),
                    num(cpu_pct(run, false)),
                    num(run.fairness),
                    run.congestion.as_deref().map_or(Cell::Null, Cell::from),
                    run.error.as_deref().map_or(Cell::Null, Cell::from),
                ]
            })
            .collect();
        let columns = [
            "name",
            "tool",
            "host",
            "repeat",
            "rate (bit/s)",
            "duration (s)",
            "CPU (%)",
            "Jain",
            "congestion",
            "error",
        ];
        r.tables.push(Table { title: "Every measurement".into(), columns: columns.map(String::from).to_vec(), rows });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linerate_model::doc::example;
    use linerate_model::doc::lab::{SweepStep, Tool};

    fn run(name: &str, host: &str, group: &str, rate: f64) -> LabRun {
        let mut r = example::lab().runs[0].clone();
        (r.name, r.host, r.group, r.rate_bps, r.tool, r.sweep) =
            (name.into(), host.into(), group.into(), Some(rate), Tool::Bench, None);
        r
    }

    fn lab_of(runs: Vec<LabRun>) -> LabDocument {
        LabDocument { runs, ..example::lab() }
    }

    #[test]
    fn sweep_steps_become_throughput_and_fairness_against_guests() {
        let mut runs = Vec::new();
        for n in [1u32, 2, 4, 8] {
            for g in 1..=n {
                let rate = 9.2e9 / f64::from(n) * if g == 1 { 1.1 } else { 1.0 };
                let mut r = run(&format!("tx@g{g}"), &format!("g{g}"), &format!("tx/{n}"), rate);
                r.sweep = Some(SweepStep { base: "tx".into(), instances: n });
                runs.push(r);
            }
        }
        let mut failed = run("tx@g9", "g9", "tx/8", 0.0);
        (failed.ok, failed.rate_bps, failed.sweep) = (false, None, Some(SweepStep { base: "tx".into(), instances: 8 }));
        runs.push(failed);
        let r = from_lab(&lab_of(runs)).unwrap();
        assert_eq!(r.title, "lab example — INCOMPLETE: 1 of 16 runs failed, 1 of 4 groups incomplete");
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
    fn a_group_with_a_failed_member_says_it_is_incomplete_and_is_not_compared() {
        let fair = |failing: bool| {
            let mut runs: Vec<LabRun> =
                (1..=3).map(|g| run(&format!("fair@g{g}"), &format!("g{g}"), "fair", 1e9)).collect();
            runs[1].started_unix_us = Some(1_000_000);
            runs[2].started_unix_us = Some(1_004_500);
            runs[0].started_unix_us = Some(1_002_000);
            if failing {
                (runs[2].ok, runs[2].rate_bps, runs[2].error) = (false, None, Some("server busy".into()));
            }
            runs.push(run("alone", "g4", "alone", 2e9));
            from_lab(&lab_of(runs)).unwrap()
        };
        let (whole, part) = (fair(false), fair(true));
        assert_eq!(whole.title, "lab example");
        assert!(part.title.ends_with("INCOMPLETE: 1 of 4 runs failed, 1 of 2 groups incomplete"), "{}", part.title);
        let t = &part.tables[0];
        assert!(t.title.contains("1 INCOMPLETE"), "{}", t.title);
        let col = |name: &str| t.columns.iter().position(|c| c == name).unwrap();
        assert_eq!(t.rows[0][col("members")], "2 of 3");
        assert_eq!(t.rows[0][col("complete")], "INCOMPLETE: 1 failed (fair@g3)");
        assert_eq!(t.rows[0][col("rate (bit/s)")], Cell::Number(2e9), "the total over the two that measured");
        assert_eq!(t.rows[1][col("complete")], "yes");
        assert_eq!(whole.tables[0].rows[0][col("members")], Cell::Int(3));
        assert_eq!(whole.tables[0].rows[0][col("start skew (ms)")], Cell::Number(4.5));
        assert_eq!(t.rows[0][col("start skew (ms)")], Cell::Number(2.0), "between the members that measured");
        assert_eq!(t.rows[0][col("per member (bit/s)")], Cell::Number(1e9));
        assert_eq!(t.rows[0][col("per-member stdev (bit/s)")], Cell::Number(0.0));
        assert_eq!(t.rows[1][col("per member (bit/s)")], Cell::Null, "one member: no spread");
        let m = |r: &RunReport, name: &str| r.find_metric(name).map(|m| m.value);
        assert_eq!((m(&whole, "failed.fair"), m(&part, "failed.fair")), (Some(0.0), Some(1.0)));
        assert_eq!(whole.headline().map(|m| m.name.to_string()).as_deref(), Some("rate.fair"));

        // compared, the incomplete group's figures are not judged; its failure is a regression
        let c = crate::compare::compare(&whole, &part, 5.0);
        let row = |name: &str| c.rows.iter().find(|r| r.name == name).unwrap();
        assert!(row("failed.fair").regression);
        assert_eq!((row("rate.fair").change_pct, row("rate.fair").regression), (None, false));
        assert_eq!(row("rate.alone").change_pct, Some(0.0), "a complete group is still compared");
        assert!(
            c.warnings.iter().any(|w| w.starts_with("group fair is incomplete in B (1 failed runs)")),
            "{:?}",
            c.warnings
        );
        let back = crate::compare::compare(&part, &whole, 5.0);
        assert!(
            !back.has_regression() && back.rows.iter().find(|r| r.name == "rate.fair").unwrap().change_pct.is_none()
        );
    }

    #[test]
    fn a_group_named_like_a_sweep_step_is_not_one() {
        // the explicit `sweep` decides, not the name
        let runs = (1..=3).map(|g| run(&format!("a/{g}"), &format!("g{g}"), &format!("a/{g}"), 1e9)).collect();
        let r = from_lab(&lab_of(runs)).unwrap();
        assert!(r.charts.xy.iter().all(|c| c.x.label != "guests"));
        assert_eq!(r.charts.bars[0].bars.len(), 3);
    }

    #[test]
    fn flows_of_one_host_over_several_links_are_labelled_by_link() {
        let runs: Vec<LabRun> = (1..=4)
            .map(|p| LabRun {
                via: Some(format!("p{p}")),
                ..run(&format!("tx-8@sut/p{p}"), "sut", "tx-8", 1e9 * f64::from(p))
            })
            .collect();
        let r = from_lab(&lab_of(runs)).unwrap();
        let labels: Vec<&str> = r.charts.flows[0].flows.iter().map(|b| b.label.as_str()).collect();
        assert_eq!(labels, ["sut/p1", "sut/p2", "sut/p3", "sut/p4"]);
    }

    #[test]
    fn single_runs_of_one_tool_at_several_stream_counts_scale() {
        let runs = [8u32, 32, 128]
            .into_iter()
            .map(|n| LabRun { streams: n, ..run(&format!("any-name-{n}x"), "sut", &format!("r{n}"), 1e9) })
            .collect();
        let r = from_lab(&lab_of(runs)).unwrap();
        let scale = r.charts.xy.iter().find(|c| c.title == "Throughput against connections").unwrap();
        assert_eq!(scale.lines[0].name, "bench");
        assert_eq!(scale.lines[0].points.iter().map(|p| p[0]).collect::<Vec<_>>(), vec![8.0, 32.0, 128.0]);
    }

    #[test]
    fn machine_cpu_is_per_gb_of_the_whole_group() {
        let two = |k: u32, cpu: f64| {
            ["a", "b"].map(|h| LabRun {
                repeat: k,
                bytes: Some(500_000_000),
                machine_cpu_s: Some(cpu),
                ..run(&format!("cp@{h}"), h, "pair", 1e9)
            })
        };
        let mut runs: Vec<LabRun> = [two(0, 2.0), two(1, 4.0), two(2, 3.0)].concat();
        runs.push(LabRun { machine_cpu_s: None, ..run("old", "c", "old", 1e9) });
        let r = from_lab(&lab_of(runs)).unwrap();
        let m = |name: &str| r.metrics.iter().find(|m| m.name == name).map(|m| m.value);
        assert_eq!(m("machine_cpu_per_gb.pair"), Some(3.0), "1 GB a repeat, the median of 2, 4 and 3 core-s");
        assert_eq!(m("machine_cpu_per_gb.old"), None, "no figure without /proc/stat readings");
        let col = r.tables[0].columns.iter().position(|c| c == "machine CPU (core-s/GB)").unwrap();
        assert_eq!(r.tables[0].rows[0][col], Cell::Number(3.0));
    }
}
