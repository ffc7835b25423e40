//! `report compare`: every metric of two runs side by side with the relative change, and
//! which changes are regressions (the direction comes from `better`). Only a run's goal figures
//! ([`RunReport::is_goal`]) can regress; the others (retransmits, CPU, errors) are shown as
//! informational. A goal figure regresses only when its change is worse than the threshold AND
//! beyond the noise measured on the two sides ([`Rule`], issue 33): the noise band is
//! `σ × √(n_A² + n_B²)`, each side's noise the uncertainty of its figure ([`crate::model::Spread::noise`]):
//! the standard error of the mean of its `--repeat` runs, of the median of the runs a baseline
//! was made of ([`baseline`]), or for one run its reporting intervals' standard deviation.
//! Against a baseline, B's noise is at least the baseline runs' standard deviation: B is one
//! more measurement, as far from their median as one of them is from another (issue 43: with
//! B's own spread alone, 1 in 20 identical measurements was flagged).
//! Runs of different kinds or with different key parameters ([`key_params`]) measure different
//! things: they are named as [`Comparison::differences`], and the CLI refuses them without
//! `--force`.
//!
//! On a virtual machine the hypervisor's steal moves a CPU-bound figure from one run to the
//! next. When both runs carry a goal figure with the steal taken out (`NAME.steal_adjusted`,
//! [`MetricId::without_steal`], from `--repeat` runs), the change is judged by that figure.

use crate::format::{clean, si};
use crate::model::{Better, RunKind, RunReport, SpreadOf};
use linerate_model::metric::{GroupFigure, MetricId, Side, SideFigure};
use linerate_model::stats::{beyond_noise, median, noise_band, NOISE_SIGMAS};
use linerate_model::units::significant;

/// How a change is judged: worse than `threshold_pct` percent in the figure's bad direction,
/// and beyond `sigmas` standard deviations of the noise of both sides.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rule {
    /// Allowed change, percent.
    pub threshold_pct: f64,
    /// How many standard deviations of measured noise a change must exceed; 0 turns the noise
    /// test off (the threshold alone decides).
    pub sigmas: f64,
    /// Judge a goal figure by its counterpart without the hypervisor's steal
    /// ([`MetricId::without_steal`]) when both runs have it (`report compare --no-steal-adjust` turns it
    /// off: every figure as measured).
    pub steal_adjust: bool,
}

impl Rule {
    /// The threshold with the default noise test ([`NOISE_SIGMAS`]).
    pub fn new(threshold_pct: f64) -> Rule {
        Rule { threshold_pct, sigmas: NOISE_SIGMAS, steal_adjust: true }
    }
}

impl Rule {
    /// `report compare`'s rule from its flags: `threshold_pct` and `sigmas` must be finite and
    /// not negative.
    pub fn checked(threshold_pct: f64, sigmas: f64, steal_adjust: bool) -> Result<Rule, CompareError> {
        if !(threshold_pct.is_finite() && threshold_pct >= 0.0) {
            return Err(CompareError::Threshold(threshold_pct));
        }
        if !(sigmas.is_finite() && sigmas >= 0.0) {
            return Err(CompareError::Sigmas(sigmas));
        }
        Ok(Rule { threshold_pct, sigmas, steal_adjust })
    }
}

/// Why `report compare` refuses to compare: a flag out of range, runs it was not given, no
/// baseline, or runs that measure different things (without `--force`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CompareError {
    /// `--threshold` is negative or not a number.
    #[error("--threshold must be a percentage ≥ 0, not {0}")]
    Threshold(f64),
    /// `--sigmas` is negative or not a number.
    #[error("--sigmas must be a number ≥ 0, not {0}")]
    Sigmas(f64),
    /// `--against` is not `last:K` with K from 1 to 1000.
    #[error("--against {}: expected last:K, K from 1 to 1000", clean(.0))]
    Against(String),
    /// Neither two runs nor one with `--against`.
    #[error("compare needs two runs, A and B, or one with --against last:K")]
    NeedsTwo,
    /// Two runs with `--against`.
    #[error("with --against, give only the new run B")]
    AgainstTakesOne,
    /// No run of B's test is stored before it.
    #[error("no run of the same test as {} is stored before it", clean(.0))]
    NoBaseline(String),
    /// The runs are of different kinds.
    #[error(
        "run {} is a {a_kind} run and run {} a {b_kind} run: their figures do not compare; give --force to compare them anyway",
        clean(a), clean(b)
    )]
    KindsDiffer {
        /// Run A's id.
        a: String,
        /// Its kind.
        a_kind: &'static str,
        /// Run B's id.
        b: String,
        /// Its kind.
        b_kind: &'static str,
    },
    /// The runs' key parameters differ.
    #[error(
        "runs {} and {} measure different things ({}); give --force to compare them side by side anyway",
        clean(a), clean(b), what.join("; ")
    )]
    Unlike {
        /// Run A's id.
        a: String,
        /// Run B's id.
        b: String,
        /// Each difference, cleaned for the terminal.
        what: Vec<String>,
    },
}

/// `--against last:K` (K from 1 to 1000) → K.
pub fn parse_last(spec: &str) -> Result<usize, CompareError> {
    spec.strip_prefix("last:")
        .and_then(|k| k.parse::<usize>().ok())
        .filter(|k| (1..=1000).contains(k))
        .ok_or_else(|| CompareError::Against(spec.to_string()))
}

/// The baseline of `b` from the runs of its test stored `before` it ([`baseline`]), and a
/// warning when there are fewer than the `k` asked for.
pub fn baseline_before(
    b: &RunReport,
    before: &[RunReport],
    k: usize,
) -> Result<(RunReport, Option<String>), CompareError> {
    let base = baseline(before).ok_or_else(|| CompareError::NoBaseline(b.id.clone()))?;
    let warning = (before.len() < k).then(|| {
        format!("only {} run(s) of the same test before {}; the baseline is their median", before.len(), clean(&b.id))
    });
    Ok((base, warning))
}

/// A change of a CPU-bound bench test's goal figure that one run against one run can still
/// call a regression: 50 %. Below it such a pair cannot be judged ([`Row::unjudged`]): on the
/// 2-core VM two identical single 5 s loopback runs differed by 9.9 % (median) and up to 39 %,
/// and a band made of one run's few intervals (three 1 s intervals) is no measure of how the
/// next session differs (issue 43: 1 false alarm in 7 identical pairs).
pub const ONE_RUN_FLOOR_PCT: f64 = 50.0;

/// A CPU-bound run: a machine of either side busy for at least this many cores on average.
const CPU_BOUND_CORES: f64 = 0.9;

/// Which figure a goal figure was judged by, for one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JudgedBy {
    /// The figure as measured.
    Measured,
    /// The figure at zero hypervisor steal, from the line through its runs
    /// ([`SpreadOf::Fit`]).
    ZeroSteal,
    /// The runs' mean, where the steal did not spread enough or the line showed no trend, or
    /// a rate cap bounds the run.
    Mean,
}

impl JudgedBy {
    fn words(self) -> &'static str {
        match self {
            JudgedBy::Measured => "as measured",
            JudgedBy::ZeroSteal => "at zero steal (fitted)",
            JudgedBy::Mean => "the runs' mean (no steal trend to fit)",
        }
    }
}

/// A key parameter whose value differs between the runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Difference {
    /// The parameter (`rate cap`, `connections`).
    pub name: &'static str,
    /// Its value in A, as shown (`None`: A does not have it).
    pub a: Option<String>,
    /// Its value in B.
    pub b: Option<String>,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = |x: &Option<String>| x.clone().unwrap_or_else(|| "–".into());
        write!(f, "{} differs: A {}, B {}", self.name, v(&self.a), v(&self.b))
    }
}

/// One figure of a comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Metric name.
    pub name: MetricId,
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
    /// The noise band in percent of `|a|` ([`Rule`]), when either side's spread was measured.
    pub noise_pct: Option<f64>,
    /// A goal figure worse than the threshold but within the noise: not a regression.
    pub within_noise: bool,
    /// A goal figure judged by its counterpart without the hypervisor's steal
    /// ([`MetricId::without_steal`]), which both runs have: `within_noise` and `regression` are that
    /// figure's, `worse`, `change_pct` and `noise_pct` the figure's as measured.
    pub without_steal: bool,
    /// A goal figure worse than the threshold and beyond the noise (judged without the
    /// hypervisor's steal when `without_steal`).
    pub regression: bool,
    /// A goal figure of a CPU-bound bench test, one run on each side, worse than the threshold
    /// but within [`ONE_RUN_FLOOR_PCT`]: one run each cannot tell it from the sessions' noise,
    /// so it is neither a regression nor "within the noise".
    pub unjudged: bool,
    /// The figure each side was judged by (A, B), when judged without the steal.
    pub judged_by: [JudgedBy; 2],
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
    /// The rule the rows were judged by.
    pub rule: Rule,
    /// One row per metric name found in either run, baseline order first.
    pub rows: Vec<Row>,
    /// One line per run (baseline first): id, time, title and key parameters, so that runs
    /// with the same title can be told apart.
    pub runs: [String; 2],
    /// The runs are of different kinds (`bench` against `cp`): their figures do not compare.
    pub kinds_differ: bool,
    /// The key parameters whose values differ (none when the kinds differ).
    pub differences: Vec<Difference>,
    /// What makes the runs unlike: a different kind, different key parameters.
    pub warnings: Vec<String>,
}

impl Comparison {
    /// Whether any figure regressed beyond the threshold.
    pub fn has_regression(&self) -> bool {
        self.rows.iter().any(|r| r.regression)
    }

    /// Whether the runs measure different things: other kinds, or key parameters that differ.
    pub fn unlike(&self) -> bool {
        self.kinds_differ || !self.differences.is_empty()
    }

    /// Why runs `a` and `b` are not compared unless `force`: other kinds, or key parameters
    /// that differ.
    pub fn refusal(&self, a: &RunReport, b: &RunReport, force: bool) -> Result<(), CompareError> {
        if self.kinds_differ && !force {
            let (a_kind, b_kind) = (a.kind.as_str(), b.kind.as_str());
            return Err(CompareError::KindsDiffer { a: a.id.clone(), a_kind, b: b.id.clone(), b_kind });
        }
        if self.unlike() && !force {
            let what = self.differences.iter().map(|d| clean(&d.to_string())).collect();
            return Err(CompareError::Unlike { a: a.id.clone(), b: b.id.clone(), what });
        }
        Ok(())
    }

    /// The closing line of a comparison that found a regression (`report compare` exits 4).
    pub fn regressed(&self) -> Option<String> {
        let n = self.rows.iter().filter(|r| r.regression).count();
        (n > 0).then(|| {
            format!(
                "{n} figure(s) regressed by more than {}% and the noise from {} to {}",
                self.threshold_pct, self.a, self.b
            )
        })
    }

    /// The rule in words, for the line under the runs.
    pub fn rule_text(&self) -> String {
        if self.rule.sigmas > 0.0 {
            format!(
                "a goal figure regresses when worse than {}% and beyond {} σ of the measured noise \
                 (judged without the hypervisor's steal when both runs have the figure so)",
                significant(self.threshold_pct, 6),
                significant(self.rule.sigmas, 6)
            )
        } else {
            format!("a goal figure regresses when worse than {}%", significant(self.threshold_pct, 6))
        }
    }

    /// A plain-text table for the terminal, after a line per run, the rule and the warnings.
    pub fn to_text(&self) -> String {
        let mut s = format!("A  {}\nB  {}\nrule: {}\n", self.runs[0], self.runs[1], self.rule_text());
        for w in &self.warnings {
            s.push_str(&format!("warning: {w}\n"));
        }
        s.push('\n');
        let mut out = vec![[
            "metric".to_string(),
            format!("A {}", self.a),
            format!("B {}", self.b),
            "change".to_string(),
            "noise".to_string(),
            String::new(),
        ]];
        for r in &self.rows {
            let v = |x: Option<f64>| x.map_or_else(|| "–".to_string(), |x| si(x, &r.unit));
            let change = r.change_pct.map_or_else(|| "–".into(), |c| format!("{c:+.1}%"));
            let noise = r.noise_pct.map_or_else(String::new, |n| format!("±{n:.1}%"));
            let by = if r.judged_by == [JudgedBy::ZeroSteal; 2] {
                " without the hypervisor's steal".to_string()
            } else {
                format!("; judged by A {}, B {}", r.judged_by[0].words(), r.judged_by[1].words())
            };
            let flag = if r.unjudged {
                format!(
                    "cannot judge {:.0}% from one run each of a CPU-bound test: --repeat 5, or --against last:5",
                    r.change_pct.map_or(0.0, f64::abs)
                )
            } else if r.regression && r.without_steal {
                format!("REGRESSION (beyond {}% and the noise{by})", self.threshold_pct)
            } else if r.regression {
                if r.noise_pct.is_some() {
                    format!("REGRESSION (beyond {}% and the noise)", self.threshold_pct)
                } else {
                    format!("REGRESSION (beyond {}%; no spread measured)", self.threshold_pct)
                }
            } else if r.within_noise && r.without_steal {
                format!("worse, within the noise{by}")
            } else if r.within_noise {
                "worse, within the noise".to_string()
            } else if r.worse && r.without_steal {
                format!("worse as measured, not{by}")
            } else if r.worse {
                "worse (informational)".to_string()
            } else if r.change_pct.is_some_and(|c| c.abs() > self.threshold_pct) {
                "improved".to_string()
            } else {
                String::new()
            };
            out.push([r.name.to_string(), v(r.a), v(r.b), change, noise, flag]);
        }
        let widths: Vec<usize> =
            (0..6).map(|i| out.iter().map(|row| row[i].chars().count()).max().unwrap_or(0)).collect();
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
    let failed =
        |r: &RunReport, g: &str| r.find_metric(&MetricId::group(GroupFigure::Failed, g)).map_or(0.0, |m| m.value);
    let groups: Vec<String> = rows
        .iter()
        .filter_map(|r| r.name.lab_group(GroupFigure::Failed))
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
            if row.name.of_lab_group(&g) {
                (row.change_pct, row.worse, row.within_noise, row.without_steal, row.regression, row.unjudged) =
                    (None, false, false, false, false, false);
            }
        }
    }
}

/// Compares `b` against baseline `a` by the default [`Rule`] for `threshold_pct`.
pub fn compare(a: &RunReport, b: &RunReport, threshold_pct: f64) -> Comparison {
    compare_by(a, b, Rule::new(threshold_pct))
}

/// Compares `b` against baseline `a`: a goal figure's change worse than the rule's threshold in
/// the metric's bad direction, and beyond the noise of both sides, is a regression.
pub fn compare_by(a: &RunReport, b: &RunReport, rule: Rule) -> Comparison {
    let threshold_pct = rule.threshold_pct;
    let mut names: Vec<&MetricId> = a.metrics.iter().map(|m| &m.name).collect();
    for m in &b.metrics {
        if !names.contains(&&m.name) {
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
            let j = judge(a, b, name, better, rule);
            // a goal of both runs: a stream test's throughput is not judged against a
            // request/response test's
            let goal = a.is_goal(name) && b.is_goal(name);
            // judged by the same figure without the hypervisor's steal, when both runs have it
            let adjusted = name.without_steal().filter(|x| a.find_metric(x).is_some() && b.find_metric(x).is_some());
            let adjusted = adjusted.filter(|_| rule.steal_adjust && goal);
            let without_steal = adjusted.is_some();
            let k = adjusted.as_ref().map_or(j, |x| judge(a, b, x, better, rule));
            let by = |r: &RunReport| match adjusted.as_ref().and_then(|x| r.spread(x)).map(|s| s.of) {
                _ if !without_steal => JudgedBy::Measured,
                Some(SpreadOf::Fit) => JudgedBy::ZeroSteal,
                _ => JudgedBy::Mean,
            };
            // one run each of a CPU-bound test: its few intervals say nothing of the next session
            let one_run = |r: &RunReport| r.spread(name).is_none_or(|s| s.of == SpreadOf::Intervals);
            let unjudged = goal
                && !without_steal
                && k.worse
                && one_run(a)
                && one_run(b)
                && (cpu_bound(a) || cpu_bound(b))
                && j.change_pct.is_some_and(|c| c.abs() < ONE_RUN_FLOOR_PCT);
            Row {
                name: name.clone(),
                unit,
                a: va,
                b: vb,
                change_pct: j.change_pct,
                better,
                goal,
                worse: j.worse,
                noise_pct: j.noise_pct,
                within_noise: k.worse && goal && !k.beyond && !unjudged,
                without_steal,
                regression: k.worse && goal && k.beyond && !unjudged,
                unjudged,
                judged_by: [by(a), by(b)],
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
    let differences = if kinds_differ { Vec::new() } else { differences(a, b) };
    warnings.extend(differences.iter().map(ToString::to_string));
    warnings.extend(steal_warning(a, b));
    Comparison {
        a: a.id.clone(),
        b: b.id.clone(),
        threshold_pct,
        rule,
        rows,
        runs: [describe(a), describe(b)],
        kinds_differ,
        differences,
        warnings,
    }
}

/// How metric `name` changed from `a` to `b` under `rule`.
#[derive(Clone, Copy)]
struct Judged {
    change_pct: Option<f64>,
    /// Worse than the threshold in the metric's bad direction.
    worse: bool,
    /// The noise band in percent of `|a|`, when either side's spread was measured.
    noise_pct: Option<f64>,
    /// The change is beyond the noise band (or there is none).
    beyond: bool,
}

fn judge(a: &RunReport, b: &RunReport, name: &MetricId, better: Better, rule: Rule) -> Judged {
    let (va, vb) = (a.find_metric(name).map(|m| m.value), b.find_metric(name).map(|m| m.value));
    let change_pct = match (va, vb) {
        (Some(x), Some(y)) if x != 0.0 => Some((y - x) / x.abs() * 100.0),
        _ => None,
    };
    let worse = match (va, vb, change_pct) {
        (_, _, Some(c)) => match better {
            Better::Higher => c < -rule.threshold_pct,
            Better::Lower => c > rule.threshold_pct,
        },
        // from zero: any worsening counts (e.g. errors 0 → 3)
        (Some(x), Some(y), None) => match better {
            Better::Higher => y < x,
            Better::Lower => y > x,
        },
        _ => false,
    };
    let sd = |r: &RunReport| r.spread(name).map(|s| s.noise());
    // Against a baseline of earlier measurements (`last:K`), B is one more measurement of the
    // test: it falls from their median as far as one of them falls from another (their sd,
    // the host's drift included), whatever its own runs' spread says — a prediction band.
    let drift = a.spread(name).filter(|s| s.of == SpreadOf::Runs && s.n >= 2).map(|s| s.sd);
    let noise_b = match (sd(b), drift) {
        (Some(x), Some(d)) => Some(x.max(d)),
        (x, d) => x.or(d),
    };
    let band = noise_band(sd(a), noise_b, rule.sigmas).filter(|_| rule.sigmas > 0.0);
    let noise_pct = band.zip(va).filter(|(_, x)| *x != 0.0).map(|(n, x)| n / x.abs() * 100.0);
    let beyond = match (va, vb) {
        (Some(x), Some(y)) => beyond_noise(x, y, band),
        _ => true,
    };
    Judged { change_pct, worse, noise_pct, beyond }
}

/// Two runs whose hypervisors took shares of the CPU further apart than this (percentage
/// points) are named: on the development VM a loopback test's rate fell with the steal share
/// (60 one-second iperf3 runs: correlation −0.87, steal 0–39 %).
const STEAL_GAP_PCT: f64 = 5.0;

/// Whether bench run `r` was bound by a CPU: a machine of either side busy for
/// [`CPU_BOUND_CORES`] cores or more (its `cpu.SIDE` share times its cores).
fn cpu_bound(r: &RunReport) -> bool {
    let busy = |side: Side, host: Option<&linerate_model::host::HostInfo>| {
        let share = r.find_metric(&MetricId::side(SideFigure::Cpu, side))?.value / 100.0;
        Some(share * f64::from(host?.machine.cores))
    };
    r.kind == RunKind::Bench
        && [busy(Side::Local, r.hosts.local.as_ref()), busy(Side::Remote, r.hosts.remote.as_ref())]
            .into_iter()
            .flatten()
            .any(|cores| cores >= CPU_BOUND_CORES)
}

/// The most the hypervisor took from either machine of run `r`, percent of its CPU time.
fn steal(r: &RunReport) -> Option<f64> {
    Side::BENCH
        .into_iter()
        .filter_map(|side| r.find_metric(&MetricId::side(SideFigure::Steal, side)))
        .map(|m| m.value)
        .reduce(f64::max)
}

/// A warning when the two runs' steal differs by more than [`STEAL_GAP_PCT`].
fn steal_warning(a: &RunReport, b: &RunReport) -> Option<String> {
    let (sa, sb) = (steal(a)?, steal(b)?);
    ((sa - sb).abs() > STEAL_GAP_PCT).then(|| {
        format!(
            "the hypervisor took {sa:.0} % of a machine's CPU during A and {sb:.0} % during B: a test the CPU \
             bounds runs slower by about that share, so part of the change is the host's, not the test's"
        )
    })
}

/// The key parameters ([`key_params`]) whose values differ between `a` and `b`, A's order first.
pub fn differences(a: &RunReport, b: &RunReport) -> Vec<Difference> {
    let (ka, kb) = (key_params(a), key_params(b));
    let mut names: Vec<&'static str> = ka.iter().map(|(k, _)| *k).collect();
    names.extend(kb.iter().map(|(k, _)| *k).filter(|k| !ka.iter().any(|(x, _)| x == k)));
    names
        .into_iter()
        .filter_map(|name| {
            let va = ka.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone());
            let vb = kb.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone());
            (va != vb).then_some(Difference { name, a: va, b: vb })
        })
        .collect()
}

/// Whether `a` and `b` are runs of the same test: the same kind, key parameters and target
/// (a bench run's agent), so that one can be the other's baseline.
pub fn same_test(a: &RunReport, b: &RunReport) -> bool {
    a.kind == b.kind && a.params.server == b.params.server && differences(a, b).is_empty()
}

/// The baseline made of `runs` (of the same test, oldest first): for every metric they all
/// have, the median of their values, with their standard deviation as its spread (a single
/// run keeps its own spread); the newest run's parameters. Its id is `last:N`. `None` without
/// runs.
pub fn baseline(runs: &[RunReport]) -> Option<RunReport> {
    let newest = runs.last()?;
    let mut r = RunReport::new(newest.kind, String::new());
    r.id = format!("last:{}", runs.len());
    r.created.clone_from(&newest.created);
    r.params = newest.params.clone();
    r.hosts = newest.hosts.clone();
    for m in &newest.metrics {
        let values: Option<Vec<f64>> = runs.iter().map(|x| x.find_metric(&m.name).map(|n| n.value)).collect();
        let Some(med) = values.as_deref().and_then(median) else { continue };
        r.metric(m.name.clone(), med, &m.unit, m.better);
        if runs.len() >= 2 {
            r.set_spread(m.name.clone(), values.as_deref().unwrap_or_default(), SpreadOf::Runs);
        } else if let Some(s) = newest.spread(&m.name) {
            r.spreads.push(s.clone());
        }
    }
    let ids: Vec<&str> = runs.iter().map(|x| x.id.as_str()).collect();
    r.title = format!("median of the last {} runs of the test ({}): {}", runs.len(), ids.join(", "), newest.title);
    Some(r)
}

/// A run on one line: id, time, title and key parameters.
pub fn describe(r: &RunReport) -> String {
    let params: Vec<String> = key_params(r).into_iter().map(|(k, v)| format!("{k} {v}")).collect();
    let mut s = format!("{}  {}  {}", r.id, r.created, r.title);
    if !params.is_empty() && !r.title.ends_with(&format!("({})", label(r))) {
        s.push_str(&format!("  ({})", params.join(", ")));
    }
    s.chars().map(|c| if c.is_control() { '?' } else { c }).collect()
}

/// The parameters that decide whether two runs measure the same thing (the run's identity), as
/// (name, value shown): the test, its direction (`bidir` too), connections or streams, the rate
/// cap, duration, message, response and buffer sizes, congestion control, MSS, the path's MTU
/// when known, UDP GSO/GRO, the profile, a sweep's points and range, a lab's scenario, a mesh's agents and
/// tests.
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
            if let Some(m) = p.resp_size.filter(|m| *m > 0) {
                out.push(("response size", format!("{} B", n(f64::from(m)))));
            }
            if let Some(m) = p.sndbuf {
                out.push(("send buffer", format!("{} B", n(f64::from(m)))));
            }
            if let Some(m) = p.rcvbuf {
                out.push(("receive buffer", format!("{} B", n(f64::from(m)))));
            }
            if let Some(c) = &p.congestion {
                out.push(("congestion", c.clone()));
            }
            if let Some(m) = p.mss {
                out.push(("MSS", format!("{} B", n(f64::from(m)))));
            }
            if let Some(m) = p.mtu {
                out.push(("MTU", format!("{} B", n(f64::from(m)))));
            }
            // Trains of datagrams through the stack count many datagrams per packet on the wire
            // (issue 43): a run with GSO/GRO and one without measure different things. A UDP run
            // from before the option has no value, and differs from both.
            if let Some(g) = p.gsro {
                out.push(("GSO/GRO", if g { "on" } else { "off" }.to_string()));
            }
            if let Some(x) = &p.profile {
                out.push(("profile", x.name.clone()));
            }
            if let Some(x) = p.bytes {
                out.push(("bytes", si(x as f64, "B")));
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
        RunKind::Mesh => {
            if let Some(a) = &p.agents {
                out.push(("agents", a.join(" ")));
            }
            if let Some(t) = &p.tests {
                out.push(("tests", t.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(" ")));
            }
        }
    }
    out
}

/// The key parameters besides the test, on one line (`connections 8, rate cap 5 Gbit/s, …`):
/// what names a run in `report list` and the HTML report beside its title.
pub fn label(r: &RunReport) -> String {
    key_params(r)
        .into_iter()
        .filter(|(k, _)| *k != "test")
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RunKind;

    #[test]
    fn the_flags_of_compare_are_checked_with_their_words() {
        assert_eq!(parse_last("last:5"), Ok(5));
        for bad in ["last:0", "last:1001", "5", "last:x"] {
            assert_eq!(parse_last(bad), Err(CompareError::Against(bad.into())), "{bad}");
        }
        assert_eq!(parse_last("x\u{1b}").unwrap_err().to_string(), "--against x?: expected last:K, K from 1 to 1000");
        assert_eq!(
            Rule::checked(-1.0, 2.0, true).unwrap_err().to_string(),
            "--threshold must be a percentage ≥ 0, not -1"
        );
        assert_eq!(
            Rule::checked(5.0, f64::NAN, true).unwrap_err().to_string(),
            "--sigmas must be a number ≥ 0, not NaN"
        );
        assert_eq!(Rule::checked(5.0, 2.0, false), Ok(Rule { threshold_pct: 5.0, sigmas: 2.0, steal_adjust: false }));
    }

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
            r.metric(*name, *value, unit, *better);
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
        assert_eq!(a.headline().map(|m| m.name.to_string()).as_deref(), Some("transactions"));
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
    /// A stream run of `bps` whose throughput varies by `sd` from interval to interval.
    fn noisy(bps: f64, sd: f64) -> RunReport {
        let mut r = bench("tcp-stream", &[("throughput", bps, "bit/s", Better::Higher)]);
        r.set_spread("throughput", &[bps - sd, bps + sd], SpreadOf::Intervals);
        r
    }

    /// A quiet run of `bps` whose hypervisor took `steal` (0–1) of its CPU, with its figure
    /// without the steal.
    fn stolen(bps: f64, steal: f64) -> RunReport {
        let mut r = noisy(bps, 0.1e9);
        let adjusted = MetricId::steal_adjusted(linerate_model::metric::Goal::Throughput);
        r.metric(adjusted.clone(), bps / (1.0 - steal), "bit/s", Better::Higher);
        r.spreads.push(crate::model::Spread { metric: adjusted, sd: 0.1e9, n: 5, of: SpreadOf::Fit });
        r
    }

    /// A one-run stream test of `bps` on a machine of 2 cores busy `cpu` percent.
    fn one_run(bps: f64, cpu: f64) -> RunReport {
        let mut r = noisy(bps, 0.02e9);
        r.metric("cpu.local", cpu, "%", Better::Lower);
        let mut host = linerate_model::host::HostInfo::default();
        host.machine.cores = 2;
        r.hosts.local = Some(host);
        r
    }

    #[test]
    fn one_run_each_of_a_cpu_bound_test_is_not_judged_below_the_floor() {
        // busy 95 % of 2 cores: CPU-bound; 15 % slower is beyond its three quiet intervals, but
        // one session against one says nothing of the next
        let c = compare(&one_run(10e9, 95.0), &one_run(8.5e9, 95.0), 5.0);
        let row = &c.rows[0];
        assert!(row.unjudged && !row.regression && !row.within_noise && !c.has_regression(), "{}", c.to_text());
        assert!(c.to_text().contains("cannot judge 15% from one run each of a CPU-bound test: --repeat 5"));
        // past the floor it is a regression still
        assert!(compare(&one_run(10e9, 95.0), &one_run(4e9, 95.0), 5.0).has_regression());
        // a test no CPU bounds (busy 20 % of 2 cores: 0.4 of a core) is judged by its intervals
        let c = compare(&one_run(10e9, 20.0), &one_run(8.5e9, 20.0), 5.0);
        assert!(c.has_regression() && !c.rows[0].unjudged, "{}", c.to_text());
        // repeated runs on one side: judged
        let mut repeated = one_run(10e9, 95.0);
        repeated.set_spread("throughput", &[9.9e9, 10e9, 10.1e9], SpreadOf::Repeats);
        assert!(compare(&repeated, &one_run(8.5e9, 95.0), 5.0).has_regression());
        // an improvement is never "cannot judge"
        assert!(!compare(&one_run(8.5e9, 95.0), &one_run(10e9, 95.0), 5.0).rows[0].unjudged);
    }

    #[test]
    fn compare_says_which_figure_it_judged_and_can_judge_as_measured() {
        let mut mean = stolen(8e9, 0.0);
        let adjusted = MetricId::steal_adjusted(linerate_model::metric::Goal::Throughput);
        mean.spreads.retain(|s| s.metric != adjusted);
        mean.set_spread(adjusted.clone(), &[7.9e9, 8e9, 8.1e9], SpreadOf::Repeats);
        let c = compare(&stolen(10e9, 0.0), &mean, 5.0);
        assert_eq!(c.rows[0].judged_by, [JudgedBy::ZeroSteal, JudgedBy::Mean]);
        let text = c.to_text();
        assert!(
            text.contains("REGRESSION (beyond 5% and the noise; judged by A at zero steal (fitted), B the runs' mean"),
            "{text}"
        );
        // --no-steal-adjust: as measured, even where the figure without the steal would clear it
        let rule = Rule { steal_adjust: false, ..Rule::new(5.0) };
        let c = compare_by(&stolen(10e9, 0.0), &stolen(8e9, 0.2), rule);
        assert!(c.rows[0].regression && !c.rows[0].without_steal, "{}", c.to_text());
        assert_eq!(c.rows[0].judged_by, [JudgedBy::Measured; 2]);
    }

    #[test]
    fn a_figure_both_runs_have_without_the_hypervisors_steal_is_judged_by_it() {
        // 20 % slower with 20 points more steal: the same once the steal is out
        let c = compare(&stolen(10e9, 0.0), &stolen(8e9, 0.2), 5.0);
        let row = &c.rows[0];
        assert!(row.worse && row.without_steal && !row.regression && !c.has_regression(), "{}", c.to_text());
        assert!(c.to_text().contains("worse as measured, not without the hypervisor's steal"), "{}", c.to_text());
        // 20 % slower with the same steal: a regression
        let c = compare(&stolen(10e9, 0.1), &stolen(8e9, 0.1), 5.0);
        assert!(c.rows[0].regression && c.rows[0].without_steal, "{}", c.to_text());
        assert!(c.to_text().contains("REGRESSION (beyond 5% and the noise without the hypervisor's steal)"));
        // 30 % slower with 10 points more steal: still 22 % slower without it
        assert!(compare(&stolen(10e9, 0.0), &stolen(7e9, 0.1), 5.0).rows[0].regression);
        // as fast with all of the CPU as A was with 70 % of it: slower per CPU, a regression
        let c = compare(&stolen(10e9, 0.3), &stolen(10e9, 0.0), 5.0);
        assert!(c.rows[0].regression && !c.rows[0].worse, "{}", c.to_text());
        // one side without the figure (a single run, an older run): the figures as measured decide
        let c = compare(&stolen(10e9, 0.0), &noisy(8e9, 0.1e9), 5.0);
        assert!(c.rows[0].regression && !c.rows[0].without_steal, "{}", c.to_text());
        let c = compare(&stolen(10e9, 0.0), &noisy(10e9, 0.1e9), 5.0);
        assert!(!c.has_regression(), "{}", c.to_text());
        // the figure's own row is informational
        let row = c.rows.iter().find(|r| r.name == "throughput.steal_adjusted").unwrap();
        assert!(!row.goal && !row.regression);
    }

    #[test]
    fn runs_whose_hypervisor_took_different_shares_of_the_cpu_are_named() {
        let with_steal = |bps: f64, local: f64, remote: f64| {
            let mut r = noisy(bps, 1e6);
            r.metric("steal.local", local, "%", Better::Lower);
            r.metric("steal.remote", remote, "%", Better::Lower);
            r
        };
        let c = compare(&with_steal(10e9, 2.0, 0.0), &with_steal(8e9, 1.0, 20.0), 5.0);
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        assert!(c.warnings[0].starts_with("the hypervisor took 2 % of a machine's CPU during A and 20 % during B"));
        assert!(c.to_text().contains("warning: the hypervisor took"), "{}", c.to_text());
        assert!(!c.unlike(), "a warning, not a refusal");
        // within 5 points, or a run that did not count it: nothing
        assert!(compare(&with_steal(10e9, 2.0, 0.0), &with_steal(8e9, 6.0, 1.0), 5.0).warnings.is_empty());
        assert!(compare(&noisy(10e9, 1e6), &with_steal(8e9, 30.0, 0.0), 5.0).warnings.is_empty());
    }

    #[test]
    fn a_change_within_the_measured_noise_is_not_a_regression() {
        // the spread of [x - s, x + s] is s·√2
        let (a, s) = (10e9, 0.5e9 / 2f64.sqrt());
        let c = compare(&noisy(a, s), &noisy(a * 0.92, s), 5.0);
        let row = &c.rows[0];
        // band = 3 · √(0.5² + 0.5²) Gbit/s = 2.12 Gbit/s, 21.2 % of A: -8 % is inside
        assert!(row.worse && row.within_noise && !row.regression, "{}", c.to_text());
        assert!((row.noise_pct.unwrap() - 21.213).abs() < 0.01, "{:?}", row.noise_pct);
        let text = c.to_text();
        assert!(text.contains("±21.2%") && text.contains("worse, within the noise"), "{text}");
        assert!(text.contains("rule: a goal figure regresses when worse than 5% and beyond 3 σ"), "{text}");
        // beyond the band it is
        let c = compare(&noisy(a, s), &noisy(a * 0.7, s), 5.0);
        assert!(c.rows[0].regression && c.to_text().contains("REGRESSION (beyond 5% and the noise)"));
        // a noise test of 0 sigmas is the threshold alone
        let c = compare_by(&noisy(a, s), &noisy(a * 0.92, s), Rule { sigmas: 0.0, ..Rule::new(5.0) });
        assert!(c.rows[0].regression && c.rows[0].noise_pct.is_none(), "{}", c.to_text());
        // quiet runs: a 15 % slowdown is caught
        let c = compare(&noisy(a, 0.05e9), &noisy(a * 0.85, 0.01e9), 5.0);
        assert!(c.has_regression(), "{}", c.to_text());
        // no spread measured on either side: the threshold decides, and the table says so
        let c = compare(&bench("tcp-stream", &[("throughput", a, "bit/s", Better::Higher)]), &noisy(a * 0.9, 0.0), 5.0);
        assert!(c.has_regression(), "one side with no spread, the other's is 0: {}", c.to_text());
        let plain = |x| bench("tcp-stream", &[("throughput", x, "bit/s", Better::Higher)]);
        let c = compare(&plain(a), &plain(a * 0.9), 5.0);
        assert!(c.to_text().contains("no spread measured"), "{}", c.to_text());
    }

    #[test]
    fn repeats_are_judged_by_the_standard_error_of_their_mean() {
        // ten runs alternating ±1 Gbit/s about the mean: sd 1.054 Gbit/s, the mean's 0.333
        let runs = |bps: f64, of| {
            let mut r = bench("tcp-stream", &[("throughput", bps, "bit/s", Better::Higher)]);
            let samples: Vec<f64> = (0..10).map(|i| bps + if i % 2 == 0 { 1e9 } else { -1e9 }).collect();
            r.set_spread("throughput", &samples, of);
            r
        };
        let (a, b) = (runs(10e9, SpreadOf::Repeats), runs(8.5e9, SpreadOf::Repeats));
        let c = compare(&a, &b, 5.0);
        // band 3 · √2 · 0.333 = 1.41 Gbit/s: -15 % (1.5) is beyond it
        assert!(c.has_regression(), "{}", c.to_text());
        assert!((c.rows[0].noise_pct.unwrap() - 14.14).abs() < 0.01, "{:?}", c.rows[0].noise_pct);
        // the same spread of one run's intervals is how one run varies: -15 % is within it
        let c = compare(&runs(10e9, SpreadOf::Intervals), &runs(8.5e9, SpreadOf::Intervals), 5.0);
        assert!(!c.has_regression() && c.rows[0].within_noise, "{}", c.to_text());
        // a change of two standard errors is noise
        assert!(!compare(&a, &runs(9.4e9, SpreadOf::Repeats), 5.0).has_regression());
    }

    #[test]
    fn against_a_baseline_a_run_counts_as_one_more_measurement_of_the_test() {
        // five earlier measurements 10 ± 0.5 Gbit/s (sd 0.5): their median's noise is
        // √(π/2) · 0.5 / √5 = 0.28; a new one at 8.8 (-12 %) with a tight spread of its own
        let history: Vec<RunReport> = [9.5e9, 10.5e9, 10e9, 9.5e9, 10.5e9].iter().map(|&x| noisy(x, 0.01e9)).collect();
        let base = baseline(&history).unwrap();
        let b = noisy(8.8e9, 0.01e9);
        let c = compare(&base, &b, 5.0);
        // the band counts how far one measurement falls from another: 3 · √(0.28² + 0.5²) = 1.72
        assert!(!c.has_regression() && c.rows[0].within_noise, "{}", c.to_text());
        assert!((c.rows[0].noise_pct.unwrap() - 17.2).abs() < 0.1, "{:?}", c.rows[0].noise_pct);
        // a fall of 25 % is beyond it
        assert!(compare(&base, &noisy(7.5e9, 0.01e9), 5.0).has_regression());
        // between two measurements (no baseline), B keeps its own spread: the same -12 % regresses
        let c = compare(&noisy(10e9, 0.01e9), &b, 5.0);
        assert!(c.has_regression(), "{}", c.to_text());
    }

    #[test]
    fn a_capped_run_is_unlike_an_uncapped_one_and_named() {
        let a = noisy(10e9, 0.1e9);
        let mut capped = noisy(5e9, 0.01e9);
        capped.params.rate = Some(5_000_000_000);
        let c = compare(&a, &capped, 5.0);
        assert!(c.unlike() && !c.kinds_differ);
        assert_eq!(c.differences.len(), 1);
        assert_eq!(c.differences[0].to_string(), "rate cap differs: A –, B 5 Gbit/s");
        assert!(!same_test(&a, &capped) && same_test(&a, &noisy(9e9, 1.0)));
        assert!(label(&capped).contains("rate cap 5 Gbit/s"), "{}", label(&capped));
    }

    #[test]
    fn a_udp_run_with_gso_and_gro_is_unlike_one_without() {
        let udp = |gsro: Option<bool>| {
            let mut r = bench("udp-stream", &[("throughput", 1e9, "bit/s", Better::Higher)]);
            r.set_spread("throughput", &[0.99e9, 1.01e9], SpreadOf::Intervals);
            r.params.gsro = gsro;
            r
        };
        let c = compare(&udp(Some(false)), &udp(Some(true)), 5.0);
        assert!(c.unlike() && !c.kinds_differ, "{}", c.to_text());
        assert_eq!(c.differences.len(), 1);
        assert_eq!(c.differences[0].to_string(), "GSO/GRO differs: A off, B on");
        assert!(!compare(&udp(Some(false)), &udp(Some(false)), 5.0).unlike());
        assert!(!compare(&udp(Some(true)), &udp(Some(true)), 5.0).unlike());
        // A run from before the option used them unless told otherwise: not like a new default.
        assert!(compare(&udp(None), &udp(Some(false)), 5.0).unlike());
        assert!(label(&udp(Some(true))).contains("GSO/GRO on"), "{}", label(&udp(Some(true))));
    }

    #[test]
    fn the_last_k_baseline_is_the_median_with_the_runs_spread() {
        let runs: Vec<RunReport> = [9.0e9, 10.0e9, 9.6e9].iter().map(|x| noisy(*x, 1e6)).collect();
        let base = baseline(&runs).unwrap();
        assert_eq!(base.id, "last:3");
        assert_eq!(base.find_metric("throughput").unwrap().value, 9.6e9);
        let s = base.spread("throughput").unwrap();
        assert_eq!((s.n, s.of), (3, SpreadOf::Runs));
        assert!((s.sd - 0.503_322e9).abs() < 1e3, "{}", s.sd);
        // 9.0 is -6.25 %: beyond the threshold, within 3 σ of the runs
        assert!(!compare(&base, &noisy(9.0e9, 1e6), 5.0).has_regression());
        assert!(compare(&base, &noisy(7.5e9, 1e6), 5.0).has_regression());
        // one run keeps its own spread
        let one = baseline(&runs[..1]).unwrap();
        assert_eq!(one.spread("throughput").map(|s| s.of), Some(SpreadOf::Intervals));
        assert!(baseline(&[]).is_none());
    }
}
