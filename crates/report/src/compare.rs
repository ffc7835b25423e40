//! `report compare`: every metric of two runs side by side with the relative change, and
//! which changes are regressions beyond a threshold (the direction comes from `better`). Only a
//! run's goal figures ([`RunReport::is_goal`]) can regress; the others (retransmits, CPU,
//! errors) are shown as informational. Runs of different kinds or with different key
//! parameters (connections, test, duration, message size) are flagged, since their figures
//! measure different things.

use crate::convert::lab::FAILED_PREFIX;
use crate::convert::si;
use crate::model::{Better, RunKind, RunReport};
use linerate_model::units::significant;

/// One figure of a comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Metric name.
    pub name: String,
    /// Unit.
    pub unit: String,
    /// Value in the baseline run, if it has the metric.
    pub a: Option<f64>,
    /// Value in the new run, if it has the metric.
    pub b: Option<f64>,
    /// Relative change in percent, `(b - a) / |a| · 100`, when both exist and `a` is non-zero.
    pub change_pct: Option<f64>,
    /// Which direction is better.
    pub better: Better,
    /// A figure the runs are judged by ([`RunReport::is_goal`]); only these can regress.
    pub goal: bool,
    /// The change is worse than the threshold.
    pub worse: bool,
    /// A goal figure worse than the threshold.
    pub regression: bool,
}

/// The comparison of run `b` against baseline `a`.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// Baseline id.
    pub a: String,
    /// New run id.
    pub b: String,
    /// Threshold in percent.
    pub threshold_pct: f64,
    /// One row per metric name found in either run, baseline order first.
    pub rows: Vec<Row>,
    /// One line per run (baseline first): id, time, title and key parameters, so that runs
    /// with the same title can be told apart.
    pub runs: [String; 2],
    /// The runs are of different kinds (`bench` against `cp`): their figures do not compare.
    pub kinds_differ: bool,
    /// What makes the runs unlike: a different kind, different key parameters.
    pub warnings: Vec<String>,
}

impl Comparison {
    /// Whether any figure regressed beyond the threshold.
    pub fn has_regression(&self) -> bool {
        self.rows.iter().any(|r| r.regression)
    }

    /// A plain-text table for the terminal, after a line per run and the warnings.
    pub fn to_text(&self) -> String {
        let mut s = format!("A  {}\nB  {}\n", self.runs[0], self.runs[1]);
        for w in &self.warnings {
            s.push_str(&format!("warning: {w}\n"));
        }
        s.push('\n');
        let mut out = vec![[
            "metric".to_string(),
            format!("A {}", self.a),
            format!("B {}", self.b),
            "change".to_string(),
            String::new(),
        ]];
        for r in &self.rows {
            let v = |x: Option<f64>| x.map_or_else(|| "–".to_string(), |x| si(x, &r.unit));
            let change = r.change_pct.map_or_else(|| "–".into(), |c| format!("{c:+.1}%"));
            let flag = if r.regression {
                format!("REGRESSION (beyond {}%)", self.threshold_pct)
            } else if r.worse {
                "worse (informational)".to_string()
            } else if r.change_pct.is_some_and(|c| c.abs() > self.threshold_pct) {
                "improved".to_string()
            } else {
                String::new()
            };
            out.push([r.name.clone(), v(r.a), v(r.b), change, flag]);
        }
        let widths: Vec<usize> =
            (0..5).map(|i| out.iter().map(|row| row[i].chars().count()).max().unwrap_or(0)).collect();
        for row in &out {
            let line: Vec<String> = row.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
            s.push_str(line.join("  ").trim_end());
            s.push('\n');
        }
        s
    }
}

/// A lab group with a failed run (`failed.GROUP` above zero in either run) is incomplete: its
/// other figures (`rate.GROUP`, `jain.GROUP`, …) are over the members that measured, so they
/// are not compared (no change, never a regression nor an improvement) and a warning names it.
/// More failed runs in B than in A is itself a regression (`failed.` is a goal figure).
fn incomplete_groups(a: &RunReport, b: &RunReport, rows: &mut [Row], warnings: &mut Vec<String>) {
    let failed = |r: &RunReport, g: &str| r.find_metric(&format!("{FAILED_PREFIX}{g}")).map_or(0.0, |m| m.value);
    let groups: Vec<String> = rows
        .iter()
        .filter_map(|r| r.name.strip_prefix(FAILED_PREFIX))
        .filter(|g| failed(a, g) > 0.0 || failed(b, g) > 0.0)
        .map(str::to_string)
        .collect();
    for g in groups {
        let which: Vec<String> = [("A", a), ("B", b)]
            .iter()
            .filter(|(_, r)| failed(r, &g) > 0.0)
            .map(|(n, r)| format!("{n} ({} failed runs)", failed(r, &g)))
            .collect();
        warnings.push(format!(
            "group {g} is incomplete in {}: its figures are over the members that measured and are not compared",
            which.join(" and ")
        ));
        for row in rows.iter_mut() {
            let of_group = row.name.split_once('.').is_some_and(|(_, k)| k == g);
            if of_group && !row.name.starts_with(FAILED_PREFIX) {
                (row.change_pct, row.worse, row.regression) = (None, false, false);
            }
        }
    }
}

/// Compares `b` against baseline `a`; a change worse than `threshold_pct` percent in the
/// metric's bad direction is a regression.
pub fn compare(a: &RunReport, b: &RunReport, threshold_pct: f64) -> Comparison {
    let mut names: Vec<&str> = a.metrics.iter().map(|m| m.name.as_str()).collect();
    for m in &b.metrics {
        if !names.contains(&m.name.as_str()) {
            names.push(&m.name);
        }
    }
    let rows = names
        .into_iter()
        .map(|name| {
            let ma = a.find_metric(name);
            let mb = b.find_metric(name);
            let (unit, better) = ma.or(mb).map_or((String::new(), Better::Higher), |m| (m.unit.clone(), m.better));
            let (va, vb) = (ma.map(|m| m.value), mb.map(|m| m.value));
            let change_pct = match (va, vb) {
                (Some(x), Some(y)) if x != 0.0 => Some((y - x) / x.abs() * 100.0),
                _ => None,
            };
            // a goal of both runs: a stream test's throughput is not judged against a
            // request/response test's
            let goal = a.is_goal(name) && b.is_goal(name);
            let worse = match (va, vb, change_pct) {
                (_, _, Some(c)) => match better {
                    Better::Higher => c < -threshold_pct,
                    Better::Lower => c > threshold_pct,
                },
                // from zero: any worsening counts (e.g. errors 0 → 3)
                (Some(x), Some(y), None) => match better {
                    Better::Higher => y < x,
                    Better::Lower => y > x,
                },
                _ => false,
            };
            Row {
                name: name.to_string(),
                unit,
                a: va,
                b: vb,
                change_pct,
                better,
                goal,
                worse,
                regression: worse && goal,
            }
        })
        .collect::<Vec<Row>>();
    let kinds_differ = a.kind != b.kind;
    let mut warnings = Vec::new();
    let mut rows = rows;
    incomplete_groups(a, b, &mut rows, &mut warnings);
    if kinds_differ {
        warnings.push(format!(
            "the runs are of different kinds (A is {}, B is {}): their figures measure different things",
            a.kind.as_str(),
            b.kind.as_str()
        ));
    }
    let (ka, kb) = (key_params(a), key_params(b));
    let mut names: Vec<&str> = ka.iter().map(|(k, _)| *k).collect();
    names.extend(kb.iter().map(|(k, _)| *k).filter(|k| !ka.iter().any(|(x, _)| x == k)));
    for name in names {
        let va = ka.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_str());
        let vb = kb.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_str());
        if va != vb && !kinds_differ {
            warnings.push(format!("{name} differs: A {}, B {}", va.unwrap_or("–"), vb.unwrap_or("–")));
        }
    }
    Comparison {
        a: a.id.clone(),
        b: b.id.clone(),
        threshold_pct,
        rows,
        runs: [describe(a), describe(b)],
        kinds_differ,
        warnings,
    }
}

/// A run on one line: id, time, title and key parameters.
pub fn describe(r: &RunReport) -> String {
    let params: Vec<String> = key_params(r).into_iter().map(|(k, v)| format!("{k} {v}")).collect();
    let mut s = format!("{}  {}  {}", r.id, r.created, r.title);
    if !params.is_empty() {
        s.push_str(&format!("  ({})", params.join(", ")));
    }
    s.chars().map(|c| if c.is_control() { '?' } else { c }).collect()
}

/// The parameters that decide whether two runs measure the same thing, as (name, value shown):
/// the test, its direction, connections or streams, the rate cap, duration, message size, a
/// sweep's points and range, a lab's scenario.
pub fn key_params(r: &RunReport) -> Vec<(&'static str, String)> {
    let p = &r.params;
    let n = |x: f64| significant(x, 6);
    let mut out = Vec::new();
    match r.kind {
        RunKind::Bench => {
            if let Some(t) = r.test_name() {
                out.push(("test", t.to_string()));
            }
            if let Some(d) = &p.direction {
                out.push(("direction", d.clone()));
            }
            if let Some(c) = p.connections {
                out.push(("connections", n(f64::from(c))));
            }
            if let Some(rate) = p.rate {
                let unit = if r.is_request_response() { "1/s" } else { "bit/s" };
                out.push(("rate cap", si(rate as f64, unit)));
            }
            let secs = p.duration_ms.map(|ms| ms as f64 / 1e3).or(p.duration_s);
            if let Some(d) = secs {
                out.push(("duration", si(d, "s")));
            }
            if let Some(m) = p.msg_size {
                out.push(("message size", format!("{} B", n(f64::from(m)))));
            }
            if let Some(x) = p.points {
                out.push(("points", n(x as f64)));
            }
            if let Some(x) = &p.sweep_range {
                out.push(("sweep", x.clone()));
            }
        }
        RunKind::Cp => {
            if let Some(x) = p.streams {
                out.push(("streams", n(f64::from(x))));
            }
        }
        RunKind::Lab => {
            if let Some(s) = &p.scenario {
                out.push(("scenario", s.name.clone()));
            }
            if let Some(f) = p.time_scale {
                out.push(("time scale", n(f)));
            }
        }
        RunKind::Mesh => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RunKind;

    #[test]
    fn direction_decides_what_is_a_regression() {
        let mut a = RunReport::new(RunKind::Bench, "a");
        a.metric("throughput", 10e9, "bit/s", Better::Higher);
        a.metric("latency.p99", 100.0, "us", Better::Lower);
        a.metric("errors", 0.0, "", Better::Lower);
        let mut b = a.clone();
        b.metrics[0].value = 9.6e9; // -4 %
        b.metrics[1].value = 90.0; // -10 %: better
        let c = compare(&a, &b, 5.0);
        assert!(!c.has_regression(), "{}", c.to_text());
        b.metrics[0].value = 9.0e9; // -10 %
        let c = compare(&a, &b, 5.0);
        assert!(c.rows[0].regression && !c.rows[1].regression);
        assert!(c.to_text().contains("REGRESSION"));
    }

    /// A bench run of `test` with `metrics`.
    fn bench(test: &str, metrics: &[(&str, f64, &str, Better)]) -> RunReport {
        let mut r = RunReport::new(RunKind::Bench, test);
        r.params.test = Some(test.into());
        for (name, value, unit, better) in metrics {
            r.metric(name, *value, unit, *better);
        }
        r
    }

    #[test]
    fn counters_that_are_not_the_goal_never_regress() {
        let a = bench(
            "tcp-stream",
            &[
                ("throughput", 10e9, "bit/s", Better::Higher),
                ("retransmits", 54.0, "", Better::Lower),
                ("errors", 0.0, "", Better::Lower),
            ],
        );
        let mut b = a.clone();
        b.metrics[1].value = 73.0;
        b.metrics[2].value = 3.0;
        let c = compare(&a, &b, 5.0);
        assert!(!c.has_regression(), "{}", c.to_text());
        assert!(c.rows[1].worse && !c.rows[1].goal && c.rows[2].worse);
        let text = c.to_text();
        let line = text.lines().find(|l| l.starts_with("retransmits")).unwrap();
        assert!(line.contains("worse (informational)") && !line.contains("REGRESSION"), "{line}");
    }

    #[test]
    fn request_response_runs_are_judged_by_transactions_and_latency() {
        let a = bench(
            "tcp-rr",
            &[
                ("throughput", 345e3, "bit/s", Better::Higher),
                ("transactions", 40_000.0, "1/s", Better::Higher),
                ("latency.p99", 100.0, "us", Better::Lower),
            ],
        );
        let mut b = a.clone();
        b.metrics[0].value = 200e3; // throughput of an rr test: informational
        assert!(!compare(&a, &b, 5.0).has_regression());
        b.metrics[2].value = 130.0;
        assert!(compare(&a, &b, 5.0).rows[2].regression);
        b.metrics[2].value = 100.0;
        b.metrics[1].value = 30_000.0;
        assert!(compare(&a, &b, 5.0).rows[1].regression);
        assert_eq!(a.headline().map(|m| m.name.as_str()), Some("transactions"));
    }

    #[test]
    fn different_kinds_and_parameters_are_flagged() {
        let mut a = RunReport::new(RunKind::Bench, "bench tcp-stream to x");
        (a.params.test, a.params.connections, a.params.duration_ms) =
            (Some("tcp-stream".into()), Some(1), Some(10_000));
        let mut b = a.clone();
        b.id = "other".into();
        b.params.connections = Some(8);
        let c = compare(&a, &b, 5.0);
        assert!(!c.kinds_differ);
        assert_eq!(c.warnings, ["connections differs: A 1, B 8"]);
        let text = c.to_text();
        assert!(text.contains("warning: connections differs: A 1, B 8"), "{text}");
        // the same title, told apart by id and parameters
        assert!(text.contains(&format!("A  {}", a.id)) && text.contains("B  other"), "{text}");
        assert!(text.contains("connections 8") && text.contains("duration 10 s"), "{text}");
        let cp = RunReport::new(RunKind::Cp, "cp");
        let c = compare(&a, &cp, 5.0);
        assert!(c.kinds_differ && c.warnings[0].contains("A is bench, B is cp"), "{:?}", c.warnings);
        // a stream test's throughput is not a request/response test's goal: no regression
        let mut stream = a.clone();
        stream.metric("throughput", 10e9, "bit/s", Better::Higher);
        let mut rr = stream.clone();
        rr.params.test = Some("tcp-rr".into());
        rr.metrics[0].value = 1e6;
        let c = compare(&stream, &rr, 5.0);
        assert!(!c.has_regression() && c.rows[0].worse, "{}", c.to_text());
        assert!(c.warnings.iter().any(|w| w == "test differs: A tcp-stream, B tcp-rr"), "{:?}", c.warnings);
        assert!(compare(&a, &a, 5.0).warnings.is_empty());
        // a capped run is told from an uncapped one
        let mut capped = a.clone();
        capped.params.rate = Some(2_000_000_000);
        assert_eq!(compare(&a, &capped, 5.0).warnings, ["rate cap differs: A –, B 2 Gbit/s"]);
    }
}
