//! The mesh matrix (`linerate report mesh`): for a run of kind `mesh`, one matrix per test —
//! rows the agent that ran the test, columns the agent it measured against — each cell the
//! pair's figure, coloured by its change against a baseline round: green better and red worse
//! beyond the threshold and beyond its noise, grey within either, white where there is nothing to
//! compare. The noise is the pair's own spread over its earlier rounds once it has
//! [`MIN_NOISE_ROUNDS`] of them, else the test's own spread over its intervals (as `report
//! compare` judges a bench run), and a cell with neither is not judged: grey, never coloured by
//! the threshold alone (issue 43: two identical rounds coloured 7 of 20 cells). A coloured cell
//! judged by the test's spread has a dotted outline. A pair whose test failed is hatched red and
//! says so, "agent down" when one of its agents was down for the round; a pair the round did not
//! schedule (one-way tests, a round cut short) is plain grey with a dash, so they are never
//! mistaken. Each cell carries its spread over the last rounds of the same mesh and a
//! small history of them (a sparkline); the title names the round, its time, the test (kind,
//! duration, streams, "under load") and the unit. Readable at 100 agents: cells never shrink
//! below [`MIN_CELL`] px, values are written short (`9.41G`, `35µ`). SVG in the style of
//! [`crate::svg`], and one HTML page.

use crate::format::si;
use crate::model::{Better, Body, Metric, RunKind, RunReport};
use crate::svg::esc;
use crate::ReportError;
use linerate_model::doc::mesh::{MeshTest, PairFigure, AGENT_DOWN};
use linerate_model::metric::MetricId;
use linerate_model::stats::{noise_band, std_dev, NOISE_SIGMAS};
use std::collections::HashMap;
use std::fmt::Write;

/// Smallest cell, px: room for a short value in a 9 px font.
pub const MIN_CELL: f64 = 34.0;
/// Rounds of history a cell shows (this one included).
pub const HISTORY: usize = 8;

/// What a cell shows for its ordered pair.
#[derive(Debug, Clone, PartialEq)]
pub enum State {
    /// The round did not run the test for this pair.
    NotMeasured,
    /// It ran and failed: the last try's status.
    Failed(String),
    /// It failed because this agent was down for the round (tried and unreachable, or not
    /// tried after the agent's retries): the agent's name.
    Down(String),
    /// The pair's figure and its change against the baseline in percent (if it has one).
    Measured {
        /// The figure.
        value: f64,
        /// Change against the baseline, percent.
        change: Option<f64>,
        /// The noise band, percent of the baseline, by `rule`. A change within it is not
        /// coloured as better or worse; without one (`None`) the change is not judged.
        noise: Option<f64>,
        /// Which noise judged the change.
        rule: Noise,
    },
}

/// Which noise a cell's change was judged against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Noise {
    /// The pair's own spread over its earlier rounds ([`MIN_NOISE_ROUNDS`] or more):
    /// `NOISE_SIGMAS · √2 · sd`.
    PairRounds,
    /// The test's own spread over its reporting intervals, this round's and the baseline's
    /// (`report compare`'s rule for one run against one).
    TestSpread,
    /// Neither: too few earlier rounds and no spread measured; not judged.
    None,
}

/// One cell: its state, and the pair's figure in the rounds before (oldest first; `None`
/// where that round did not measure it).
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    /// This round.
    pub state: State,
    /// Earlier rounds of the same mesh, oldest first.
    pub history: Vec<Option<f64>>,
}

impl Cell {
    /// The figure, if measured.
    pub fn value(&self) -> Option<f64> {
        match self.state {
            State::Measured { value, .. } => Some(value),
            _ => None,
        }
    }

    /// The figure's spread over this round and the history: (lowest, highest), with at least
    /// two rounds measured.
    pub fn spread(&self) -> Option<(f64, f64)> {
        let all: Vec<f64> = self.history.iter().flatten().copied().chain(self.value()).collect();
        (all.len() >= 2)
            .then(|| (all.iter().copied().fold(f64::INFINITY, f64::min), all.iter().copied().fold(0.0, f64::max)))
    }
}

/// One test's matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct Matrix {
    /// The test's name.
    pub test: String,
    /// The test as the inventory declared it (kind, duration, streams, under load), if known.
    pub spec: Option<MeshTest>,
    /// The round's number, when stored.
    pub round: Option<u64>,
    /// When the round ran (RFC 3339).
    pub created: String,
    /// Rounds of history drawn (earlier rounds of the same mesh).
    pub rounds_before: usize,
    /// Unit of the figures (`bit/s`, `us`).
    pub unit: String,
    /// Which way is better.
    pub better: Better,
    /// The agents, in inventory order.
    pub agents: Vec<String>,
    /// `cells[from][to]`.
    pub cells: Vec<Vec<Cell>>,
}

/// The agents and the tests of a mesh run: from its round, or from the parameters of a run
/// stored before the round was kept.
fn agents_and_tests(r: &RunReport) -> Result<(Vec<String>, Vec<MeshTest>), ReportError> {
    match (&r.body, &r.params.agents, &r.params.tests) {
        (Some(Body::Mesh(round)), _, _) => Ok((round.agents.clone(), round.tests.clone())),
        (_, Some(agents), Some(tests)) => Ok((agents.clone(), tests.clone())),
        _ => Err(ReportError::Invalid(format!("mesh run {} has no agents and tests", r.id))),
    }
}

/// Whether `a` and `b` are rounds of the same mesh: the same agents and tests, by name.
pub fn same_mesh(a: &RunReport, b: &RunReport) -> bool {
    let names =
        |r: &RunReport| agents_and_tests(r).ok().map(|(ag, t)| (ag, t.into_iter().map(|t| t.name).collect::<Vec<_>>()));
    a.kind == RunKind::Mesh && b.kind == RunKind::Mesh && names(a).is_some() && names(a) == names(b)
}

/// The state of each (test, from, to) of a round kept whole whose last try failed: down when
/// either agent was down for the round (its tries unreachable, or not tried: `agent down`),
/// else failed with the try's status.
fn failures(r: &RunReport) -> HashMap<(&str, &str, &str), State> {
    let mut m = HashMap::new();
    if let Some(Body::Mesh(round)) = &r.body {
        let down = |n: &str| round.tally.down.iter().any(|d| d == n);
        for t in &round.tries {
            let key = (t.test.as_str(), t.from.as_str(), t.to.as_str());
            if t.status == "ok" {
                m.remove(&key);
                continue;
            }
            let gone = [t.to.as_str(), t.from.as_str()].into_iter().find(|a| down(a));
            let gone = gone.or_else(|| t.status.strip_prefix(AGENT_DOWN).map(|n| n.trim_start_matches(": ")));
            let state = match gone {
                Some(a) => State::Down(a.to_string()),
                None => State::Failed(t.status.clone()),
            };
            m.insert(key, state);
        }
    }
    m
}

/// The matrices of mesh run `run`, changes against `base` (another mesh run) where given,
/// with `history` (earlier rounds of the same mesh, oldest first) in each cell.
pub fn matrices(run: &RunReport, base: Option<&RunReport>, history: &[RunReport]) -> Result<Vec<Matrix>, ReportError> {
    if run.kind != RunKind::Mesh {
        return Err(ReportError::Invalid(format!("run {} is a {} run, not a mesh round", run.id, run.kind.as_str())));
    }
    let (agents, tests) = agents_and_tests(run)?;
    let failed = failures(run);
    let history = &history[history.len().saturating_sub(HISTORY - 1)..];
    // Each run's metrics by name, once: a 100-agent round has 10,000 pairs per test.
    let index = |r: &'_ RunReport| -> HashMap<MetricId, Metric> {
        r.metrics.iter().map(|m| (m.name.clone(), m.clone())).collect()
    };
    let (now, then) = (index(run), base.map(index).unwrap_or_default());
    let spreads = |r: &'_ RunReport| -> HashMap<MetricId, f64> {
        r.spreads.iter().map(|s| (s.metric.clone(), s.noise())).collect()
    };
    let (own_now, own_then) = (spreads(run), base.map(spreads).unwrap_or_default());
    let before: Vec<HashMap<MetricId, Metric>> = history.iter().map(index).collect();
    let mut out = Vec::new();
    for spec in tests {
        let test = spec.name.clone();
        let n = agents.len();
        let mut m = Matrix {
            test: test.clone(),
            spec: Some(spec).filter(|s| !s.kind.is_empty()),
            round: run.params.round,
            created: run.created.clone(),
            rounds_before: history.len(),
            unit: String::new(),
            better: Better::Higher,
            agents: agents.clone(),
            cells: vec![vec![Cell { state: State::NotMeasured, history: Vec::new() }; n]; n],
        };
        for (i, a) in agents.iter().enumerate() {
            for (j, b) in agents.iter().enumerate() {
                if i == j {
                    continue;
                }
                let names = PairFigure::ALL.map(|f| MetricId::pair(&test, a, b, f));
                let find = |r: &HashMap<MetricId, Metric>| names.iter().find_map(|n| r.get(n)).cloned();
                let cell = &mut m.cells[i][j];
                cell.history = before.iter().map(|h| find(h).map(|x| x.value)).collect();
                match find(&now) {
                    Some(metric) => {
                        m.unit = metric.unit.clone();
                        m.better = metric.better;
                        let old = then.get(&metric.name).map(|o| o.value).filter(|v| *v != 0.0);
                        let change = old.map(|o| (metric.value - o) / o * 100.0);
                        let (noise, rule) = judge(&cell.history, own_now.get(&metric.name), own_then.get(&metric.name));
                        let noise = noise.zip(old).map(|(band, o)| band / o.abs() * 100.0);
                        cell.state = State::Measured { value: metric.value, change, noise, rule };
                    }
                    None => {
                        if let Some(st) = failed.get(&(test.as_str(), a.as_str(), b.as_str())) {
                            cell.state = st.clone();
                        }
                    }
                }
            }
        }
        if m.unit.is_empty() {
            // nothing measured: the unit from the test's kind
            let latency = m.spec.as_ref().is_some_and(|s| s.figure() == PairFigure::LatencyP50);
            m.unit = if latency { "us" } else { "bit/s" }.into();
            m.better = if latency { Better::Lower } else { Better::Higher };
        }
        out.push(m);
    }
    Ok(out)
}

/// The noise band of a pair's figure, in its unit, and the rule that gave it: the spread of the
/// pair's figure over its earlier rounds (`history`) with [`MIN_NOISE_ROUNDS`] of them, for both
/// sides of the comparison (each is one measurement of the pair); else the test's own spread
/// this round (`now`) and in the baseline (`then`), as `report compare` judges two runs; else
/// none (the change is not judged).
fn judge(history: &[Option<f64>], now: Option<&f64>, then: Option<&f64>) -> (Option<f64>, Noise) {
    let seen: Vec<f64> = history.iter().flatten().copied().collect();
    if seen.len() >= MIN_NOISE_ROUNDS {
        if let Some(sd) = std_dev(&seen) {
            return (noise_band(Some(sd), Some(sd), NOISE_SIGMAS), Noise::PairRounds);
        }
    }
    match noise_band(now.copied(), then.copied(), NOISE_SIGMAS) {
        Some(band) => (Some(band), Noise::TestSpread),
        None => (None, Noise::None),
    }
}

/// A cell's fill: by the change's direction against `better`, beyond `threshold` percent and
/// beyond its `noise` band (percent); grey within either, and without a band (not judged).
fn fill(change: Option<f64>, noise: Option<f64>, better: Better, threshold: f64) -> &'static str {
    match change {
        None => "#ffffff",
        Some(c) if noise.is_none_or(|n| c.abs() <= n) => "#e8e8e8",
        Some(c) => {
            let good = if better == Better::Higher { c } else { -c };
            if good <= -threshold {
                "#f4a6a6"
            } else if good >= threshold {
                "#a8d8a8"
            } else {
                "#e8e8e8"
            }
        }
    }
}

/// Earlier rounds a pair needs before its own spread counts as its noise; with fewer, a change is
/// judged by the test's own spread, or not at all.
pub const MIN_NOISE_ROUNDS: usize = 3;

/// Fill of a pair the round did not measure.
const NOT_MEASURED: &str = "#b0b0b0";

/// A figure written short for a cell: `9.41G`, `350M`, `35µ`, `1.2m`.
fn short(v: f64, unit: &str) -> String {
    let s = si(v, unit).replace(" bit/s", "").replace("bit/s", "").replace(" us", "µ").replace(" ms", "m");
    s.replace(' ', "")
}

/// What the figure is, for the title: `throughput, bit/s`, `median round trip, µs`.
fn what(m: &Matrix) -> String {
    match m.unit.as_str() {
        "us" => "median round trip (p50), µs".into(),
        "bit/s" => "throughput, bit/s".into(),
        u => u.to_string(),
    }
}

/// The test's description: `tput (tcp-stream, 10 s, 4 streams, under load)`.
fn test_line(m: &Matrix) -> String {
    match &m.spec {
        Some(t) => {
            let streams = if t.streams > 1 { format!(", {} streams", t.streams) } else { String::new() };
            let load = if t.under_load { ", under load" } else { "" };
            format!("{} ({}, {} s{streams}{load})", t.name, t.kind, t.duration_s)
        }
        None => m.test.clone(),
    }
}

/// The matrix's title lines: the test, the round and its time, the figure and its unit.
pub fn title_lines(m: &Matrix) -> [String; 2] {
    let round = m.round.map_or("mesh round".to_string(), |r| format!("mesh round {r}"));
    [
        format!("test {}: {}", test_line(m), what(m)),
        format!("{round}, {}; rows run the test against the columns; {} agents", m.created, m.agents.len()),
    ]
}

/// Matrix `m` as a standalone SVG document.
pub fn matrix_svg(m: &Matrix, threshold: f64) -> String {
    let n = m.agents.len().max(1);
    let label_w = 16.0 + 6.6 * m.agents.iter().map(|a| a.chars().count()).max().unwrap_or(4) as f64;
    let cell = (720.0 / n as f64).clamp(MIN_CELL, 90.0);
    let font = (cell / 4.0).clamp(9.0, 13.0);
    let titles = title_lines(m);
    let history = match m.rounds_before {
        0 => String::new(),
        k => format!("; line: the last {} rounds", k + 1),
    };
    let legend = format!(
        "green: better by {threshold}%+ and past the pair's noise over {MIN_NOISE_ROUNDS}+ rounds (dotted outline: \
         past the test's own spread, fewer rounds), red: worse; grey: within, or no noise known; white: no baseline"
    );
    let legend2 = format!("hatched red: failed, or agent down; mid grey with a dash: not scheduled{history}");
    let text_w = titles
        .iter()
        .map(|t| 7.6 * t.chars().count() as f64)
        .fold(6.2 * legend.chars().count().max(legend2.chars().count()) as f64, f64::max);
    // the column labels lean right by half their length (rotated 60°) past the last column
    let grid_w = label_w + cell * n as f64 + 12.0 + label_w * 0.5;
    let w = grid_w.max(text_w + 24.0);
    let (x0, y0) = (label_w, 110.0 + label_w * 0.87);
    let h = y0 + cell * n as f64 + 20.0;
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" data-kind=\"mesh\" width=\"{w:.0}\" height=\"{h:.0}\" \
         viewBox=\"0 0 {w:.0} {h:.0}\" font-family=\"DejaVu Sans,Helvetica,Arial,sans-serif\">\
         <defs><pattern id=\"failed\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\">\
         <rect width=\"6\" height=\"6\" fill=\"#fde8e8\"/><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#d04040\" stroke-width=\"1.5\"/></pattern></defs>\
         <rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\
         <text class=\"title\" x=\"12\" y=\"24\" font-size=\"15\" font-weight=\"bold\">{}</text>\
         <text class=\"title\" x=\"12\" y=\"46\" font-size=\"13\">{}</text>\
         <text class=\"legend\" x=\"12\" y=\"66\" font-size=\"11\" fill=\"#555\">{}</text>\
         <text class=\"legend\" x=\"12\" y=\"80\" font-size=\"11\" fill=\"#555\">{}</text>",
        esc(&titles[0]),
        esc(&titles[1]),
        esc(&legend),
        esc(&legend2)
    );
    for (k, a) in m.agents.iter().enumerate() {
        let c = x0 + cell * (k as f64 + 0.5);
        let _ = write!(
            s,
            "<text class=\"label col\" x=\"{c:.1}\" y=\"{:.1}\" font-size=\"11\" transform=\"rotate(-60 {c:.1} {:.1})\">{}</text>",
            y0 - 6.0,
            y0 - 6.0,
            esc(a)
        );
        let _ = write!(
            s,
            "<text class=\"label row\" x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"end\">{}</text>",
            x0 - 6.0,
            y0 + cell * (k as f64 + 0.5) + 4.0,
            esc(a)
        );
    }
    for (i, row) in m.cells.iter().enumerate() {
        for (j, c) in row.iter().enumerate() {
            let (x, y) = (x0 + cell * j as f64, y0 + cell * i as f64);
            let (cx, cy) = (x + cell / 2.0, y + cell / 2.0);
            if i == j {
                let _ = write!(
                    s,
                    "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{cell:.1}\" height=\"{cell:.1}\" fill=\"#555\"/>"
                );
                continue;
            }
            let pair = format!("{} > {}", m.agents[i], m.agents[j]);
            let mut outline = "stroke=\"#fff\"";
            let (f, tip) = match &c.state {
                State::NotMeasured => (NOT_MEASURED, format!("{pair}: not scheduled in this round")),
                State::Failed(st) => ("url(#failed)", format!("{pair}: {st}")),
                State::Down(a) => ("url(#failed)", format!("{pair}: {AGENT_DOWN}: {a}, failed for the round")),
                State::Measured { value, change, noise, rule } => {
                    let mut t = format!("{pair}: {}", si(*value, &m.unit));
                    if let Some(ch) = change {
                        let _ = write!(t, ", {ch:+.1}% against the baseline");
                        let whose = match rule {
                            Noise::PairRounds => "the pair's noise over its last rounds",
                            Noise::TestSpread => "the test's own spread",
                            Noise::None => "",
                        };
                        match noise {
                            Some(n) => {
                                let within = if ch.abs() <= *n { "within" } else { "past" };
                                let _ = write!(t, " ({within} {whose}, ±{n:.1}%)");
                            }
                            None => {
                                let _ = write!(
                                    t,
                                    " (not judged: no spread measured, fewer than {MIN_NOISE_ROUNDS} earlier rounds)"
                                );
                            }
                        }
                    }
                    if let Some((lo, hi)) = c.spread() {
                        let _ = write!(t, "; last rounds {} to {}", si(lo, &m.unit), si(hi, &m.unit));
                    }
                    let f = fill(*change, *noise, m.better, threshold);
                    if *rule == Noise::TestSpread && f != "#e8e8e8" && f != "#ffffff" {
                        outline = "stroke=\"#333\" stroke-dasharray=\"2 2\"";
                    }
                    (f, t)
                }
            };
            let _ = write!(
                s,
                "<g class=\"cell\"><title>{}</title><rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{cell:.1}\" height=\"{cell:.1}\" \
                 fill=\"{f}\" {outline}/>",
                esc(&tip)
            );
            let text_at = |s: &mut String, dy: f64, size: f64, colour: &str, class: &str, t: &str| {
                let _ = write!(
                    s,
                    "<text class=\"{class}\" x=\"{cx:.1}\" y=\"{:.1}\" font-size=\"{size:.1}\" text-anchor=\"middle\" fill=\"{colour}\">{}</text>",
                    cy + dy,
                    esc(t)
                );
            };
            match &c.state {
                State::NotMeasured => text_at(&mut s, font / 3.0, font, "#666", "nm", "–"),
                State::Failed(_) => text_at(&mut s, font / 3.0, font, "#a00000", "failed", "failed"),
                State::Down(_) => {
                    text_at(&mut s, -font * 0.25, font * 0.85, "#a00000", "failed down", "agent");
                    text_at(&mut s, font * 0.75, font * 0.85, "#a00000", "failed down", "down");
                }
                State::Measured { value, change, .. } => {
                    let big = cell >= 56.0;
                    let top =
                        if big { -font * 0.55 } else { font / 3.0 - if c.history.is_empty() { 0.0 } else { 3.0 } };
                    text_at(&mut s, top, font, "#000", "value", &short(*value, &m.unit));
                    if big {
                        let mut second = String::new();
                        if let Some((lo, hi)) = c.spread() {
                            let mid = (lo + hi) / 2.0;
                            if mid > 0.0 {
                                second = format!("±{:.0}%", (hi - lo) / 2.0 / mid * 100.0);
                            }
                        }
                        if let Some(ch) = change {
                            second =
                                if second.is_empty() { format!("{ch:+.0}%") } else { format!("{ch:+.0}% {second}") };
                        }
                        if !second.is_empty() {
                            text_at(&mut s, font * 0.6, font * 0.8, "#444", "spread", &second);
                        }
                    }
                    spark(&mut s, c, x, y, cell);
                }
            }
            s.push_str("</g>");
        }
    }
    s.push_str("</svg>\n");
    s
}

/// The pair's last rounds as a line along the bottom of its cell (this round the last point).
fn spark(s: &mut String, c: &Cell, x: f64, y: f64, cell: f64) {
    let pts: Vec<Option<f64>> = c.history.iter().copied().chain(std::iter::once(c.value())).collect();
    let Some((lo, hi)) = c.spread() else { return };
    let (left, width, base, height) = (x + 4.0, cell - 8.0, y + cell - 3.0, (cell * 0.18).min(10.0));
    let step = width / (pts.len().max(2) - 1) as f64;
    let mut d = String::new();
    for (k, p) in pts.iter().enumerate() {
        let Some(v) = p else { continue };
        let frac = if hi > lo { (v - lo) / (hi - lo) } else { 0.5 };
        let _ = write!(
            d,
            "{}{:.1},{:.1}",
            if d.is_empty() { "M" } else { " L" },
            left + step * k as f64,
            base - frac * height
        );
    }
    let _ = write!(s, "<path class=\"spark\" d=\"{d}\" fill=\"none\" stroke=\"#3060a0\" stroke-width=\"1\"/>");
}

/// `report mesh`: the HTML page of every test (`html`), or one test's matrix as SVG (`test`,
/// else the first), of `run` against `base` with the cells' `history`.
pub fn render(
    run: &RunReport,
    base: Option<&RunReport>,
    history: &[RunReport],
    threshold: f64,
    html: bool,
    test: Option<&str>,
) -> Result<String, ReportError> {
    if html {
        return mesh_html(run, base, history, threshold);
    }
    let ms = matrices(run, base, history)?;
    let m = match test {
        Some(t) => ms.iter().find(|m| m.test == t),
        None => ms.first(),
    };
    let m = m.ok_or_else(|| ReportError::NoTest { run: run.id.clone(), test: test.map(String::from) })?;
    Ok(matrix_svg(m, threshold))
}

/// One HTML page: every test's matrix of `run`, coloured against `base`, each cell with the
/// pair's `history` (earlier rounds of the same mesh, oldest first).
pub fn mesh_html(
    run: &RunReport,
    base: Option<&RunReport>,
    history: &[RunReport],
    threshold: f64,
) -> Result<String, ReportError> {
    let ms = matrices(run, base, history)?;
    let mut s = String::new();
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t}</title>\
         <style>body{{font-family:DejaVu Sans,Helvetica,Arial,sans-serif;margin:24px;color:#222}}\
         figure{{margin:0 0 16px;overflow-x:auto}}.meta{{color:#666;font-size:13px}}</style>\
         </head>\n<body><h1>{t}</h1><p class=\"meta\">run <code>{id}</code>, {created}; {against}; \
         {n} earlier rounds in each cell's history</p>",
        t = esc(&run.title),
        id = esc(&run.id),
        created = esc(&run.created),
        against = match base {
            Some(b) => format!("against <code>{}</code> ({})", esc(&b.id), esc(&b.created)),
            None => "no baseline".into(),
        },
        n = ms.first().map_or(0, |m| m.rounds_before),
    );
    for m in &ms {
        let _ = write!(s, "<figure>{}</figure>", matrix_svg(m, threshold).trim_end());
    }
    s.push_str("</body></html>\n");
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use linerate_model::doc::mesh::{MeshRound, MeshTry};

    fn round(n: u64, values: &[(&str, f64)]) -> RunReport {
        let mut r = RunReport::new(RunKind::Mesh, format!("mesh round {n}"));
        r.created = format!("2026-11-26T04:{n:02}:00Z");
        let test = |name: &str, kind: &str| MeshTest {
            name: name.into(),
            kind: kind.into(),
            duration_s: 2.0,
            streams: 1,
            ..MeshTest::default()
        };
        r.params.round = Some(n);
        r.params.agents = Some(["a", "b", "c"].map(String::from).to_vec());
        r.params.tests = Some(vec![test("tput", "tcp-stream"), test("rtt", "tcp-rr")]);
        for (name, v) in values {
            if name.ends_with(":p50") {
                r.metric(*name, *v, "us", Better::Lower);
            } else {
                r.metric(*name, *v, "bit/s", Better::Higher);
            }
        }
        r
    }

    fn measured(c: &Cell) -> (f64, Option<f64>, Option<f64>) {
        match c.state {
            State::Measured { value, change, noise, .. } => (value, change, noise),
            ref other => panic!("not measured: {other:?}"),
        }
    }

    fn rule(c: &Cell) -> Noise {
        match c.state {
            State::Measured { rule, .. } => rule,
            ref other => panic!("not measured: {other:?}"),
        }
    }

    /// `r` with a spread over its intervals of `pct` percent of each figure.
    fn with_spread(mut r: RunReport, pct: f64) -> RunReport {
        use crate::model::{Spread, SpreadOf};
        r.spreads = r
            .metrics
            .iter()
            .map(|m| Spread { metric: m.name.clone(), sd: m.value * pct / 100.0, n: 10, of: SpreadOf::Intervals })
            .collect();
        r
    }

    /// Issue 43: two identical rounds colour nothing; with fewer than three earlier rounds and no
    /// spread measured nothing is coloured past "within"; the test's own spread judges until the
    /// pair's rounds can, and the cell and the legend say which did.
    #[test]
    fn short_history_colours_nothing_and_each_cell_says_which_noise_judged_it() {
        let figures = [("tput:a>b", 1e9), ("tput:b>a", 9e8), ("rtt:a>b:p50", 40.0)];
        let ms = matrices(&round(2, &figures), Some(&round(1, &figures)), &[round(1, &figures)]).unwrap();
        for m in &ms {
            for c in m.cells.iter().flatten().filter(|c| c.value().is_some()) {
                let (_, change, noise) = measured(c);
                assert_eq!((change, fill(change, noise, m.better, 10.0)), (Some(0.0), "#e8e8e8"));
            }
        }
        // no spread, two rounds: halved but not judged
        let old = round(1, &figures);
        let new = round(2, &[("tput:a>b", 5e8), ("tput:b>a", 9e8)]);
        let t = &matrices(&new, Some(&old), std::slice::from_ref(&old)).unwrap()[0];
        assert_eq!((measured(&t.cells[0][1]).2, rule(&t.cells[0][1])), (None, Noise::None));
        assert_eq!(fill(Some(-50.0), None, Better::Higher, 10.0), "#e8e8e8", "not judged: grey");
        assert!(matrix_svg(t, 10.0).contains("not judged: no spread measured, fewer than 3 earlier rounds"));
        // the test's own spread (5 % a side: a band of 3·√2·5 = 21 %): -50 % is past it, -15 % within
        let (old, new) =
            (with_spread(old, 5.0), with_spread(round(2, &[("tput:a>b", 5e8), ("tput:b>a", 7.65e8)]), 5.0));
        let t = &matrices(&new, Some(&old), std::slice::from_ref(&old)).unwrap()[0];
        let f = |c: &Cell| {
            let (_, change, noise) = measured(c);
            fill(change, noise, t.better, 10.0)
        };
        assert_eq!((rule(&t.cells[0][1]), f(&t.cells[0][1])), (Noise::TestSpread, "#f4a6a6"));
        assert_eq!(f(&t.cells[1][0]), "#e8e8e8", "-15 % within the test's own spread");
        let svg = matrix_svg(t, 10.0);
        assert!(svg.contains("past the test&#39;s own spread, ±") && svg.contains("stroke-dasharray"), "{svg}");
        assert!(svg.contains("dotted outline: past the test&#39;s own spread"), "the legend names both rules");
        // three earlier rounds: the pair's own noise judges, whatever the test's spread says
        let hist: Vec<RunReport> = (1..=3).map(|k| with_spread(round(k, &figures), 5.0)).collect();
        let t = &matrices(&new, hist.last(), &hist).unwrap()[0];
        assert_eq!(rule(&t.cells[0][1]), Noise::PairRounds);
        assert!(matrix_svg(t, 10.0).contains("past the pair&#39;s noise over its last rounds"));
    }

    /// Issue 43: a down agent's pairs are failed cells saying "agent down", tried or not, as many
    /// as the round's tally counts; a pair not scheduled stays a grey dash.
    #[test]
    fn a_down_agents_pairs_are_failed_cells_saying_agent_down() {
        use linerate_model::doc::mesh::MeshTally;
        let mut r = round(4, &[("tput:a>b", 1e9), ("tput:b>a", 1e9)]);
        let t = |test: &str, from: &str, to: &str, status: &str| MeshTry {
            test: test.into(),
            from: from.into(),
            to: to.into(),
            status: status.into(),
            ..MeshTry::default()
        };
        let tries = vec![
            t("tput", "a", "b", "ok"),
            t("tput", "b", "a", "ok"),
            t("tput", "a", "c", "unreachable c: connection refused"),
            t("tput", "a", "c", "unreachable c: connection refused"),
            t("tput", "c", "a", "agent down: c"),
            t("tput", "b", "c", "agent down: c"),
            t("tput", "c", "b", "agent down: c"),
            t("rtt", "a", "c", "agent down: c"),
            t("rtt", "b", "c", "agent down: c"),
        ];
        let tally = MeshTally { done: 2, failed: 6, down: vec!["c".into()], ..MeshTally::default() };
        r.body = Some(Body::Mesh(Box::new(MeshRound {
            round: 4,
            agents: ["a", "b", "c"].map(String::from).to_vec(),
            tests: r.params.tests.clone().unwrap_or_default(),
            tally,
            tries,
        })));
        let ms = matrices(&r, None, &[]).unwrap();
        let down: usize =
            ms.iter().map(|m| m.cells.iter().flatten().filter(|c| c.state == State::Down("c".into())).count()).sum();
        assert_eq!(down, 6, "as many as the tally's failures");
        assert_eq!(ms[1].cells[0][1].state, State::NotMeasured, "rtt a > b: not scheduled, not down");
        let svg = matrix_svg(&ms[0], 10.0);
        assert_eq!(svg.matches(">agent</text>").count(), 4);
        assert!(svg.contains("a &gt; c: agent down: c, failed for the round"), "{svg}");
    }

    #[test]
    fn a_change_within_the_pairs_own_noise_is_not_called_worse() {
        // a > b has swung between 0.7 and 1.3 Gbit/s over its last rounds; b > a has been steady.
        let rounds: Vec<RunReport> = [(0.7e9, 1.0e9), (1.3e9, 1.01e9), (0.8e9, 0.99e9), (1.2e9, 1.0e9)]
            .iter()
            .enumerate()
            .map(|(k, (ab, ba))| round(k as u64 + 1, &[("tput:a>b", *ab), ("tput:b>a", *ba)]))
            .collect();
        let base = round(5, &[("tput:a>b", 1e9), ("tput:b>a", 1e9)]);
        let new = round(6, &[("tput:a>b", 8e8), ("tput:b>a", 8e8)]);
        let ms = matrices(&new, Some(&base), &rounds).unwrap();
        let t = &ms[0];
        let f = |c: &Cell| {
            let (_, change, noise) = measured(c);
            fill(change, noise, t.better, 10.0)
        };
        assert_eq!(f(&t.cells[0][1]), "#e8e8e8", "-20 % on a pair this noisy: within its noise");
        assert_eq!(f(&t.cells[1][0]), "#f4a6a6", "-20 % on a steady pair: worse");
        let svg = matrix_svg(t, 10.0);
        assert!(
            svg.contains("-20.0% against the baseline (within the pair") && svg.contains("(past the pair"),
            "{svg}"
        );
    }

    #[test]
    fn cells_hold_the_pairs_figures_their_change_and_history() {
        let older = round(1, &[("tput:a>b", 1.1e9)]);
        let old = round(2, &[("tput:a>b", 1e9), ("tput:b>a", 1e9), ("rtt:a>b:p50", 100.0)]);
        let mut new = round(3, &[("tput:a>b", 5e8), ("tput:b>a", 1.01e9), ("tput:a>c", 2e9), ("rtt:a>b:p50", 150.0)]);
        // the round kept whole: c > a failed, b > c was never tried
        let tried = |from: &str, to: &str, status: &str| MeshTry {
            test: "tput".into(),
            from: from.into(),
            to: to.into(),
            status: status.into(),
            ..MeshTry::default()
        };
        new.body = Some(Body::Mesh(Box::new(MeshRound {
            round: 3,
            agents: ["a", "b", "c"].map(String::from).to_vec(),
            tests: new.params.tests.clone().unwrap_or_default(),
            tries: vec![tried("c", "a", "failed: reset"), tried("a", "b", "ok")],
            ..MeshRound::default()
        })));
        let (old, older, new) = (with_spread(old, 2.0), with_spread(older, 2.0), with_spread(new, 2.0));
        let ms = matrices(&new, Some(&old), &[older.clone(), old.clone()]).unwrap();
        assert_eq!(ms.len(), 2);
        let t = &ms[0];
        assert_eq!((t.unit.as_str(), t.better, t.round, t.rounds_before), ("bit/s", Better::Higher, Some(3), 2));
        // Two earlier rounds are too few to say the pair's noise: the test's own spread judges.
        assert_eq!(measured(&t.cells[0][1]).0, 5e8);
        assert_eq!(rule(&t.cells[0][1]), Noise::TestSpread);
        assert_eq!(t.cells[0][1].history, [Some(1.1e9), Some(1e9)]);
        assert_eq!(t.cells[0][1].spread(), Some((5e8, 1.1e9)));
        assert_eq!(measured(&t.cells[0][2]), (2e9, None, None), "no baseline for a>c");
        assert_eq!(t.cells[2][0].state, State::Failed("failed: reset".into()), "c>a failed");
        assert_eq!(t.cells[1][2].state, State::NotMeasured, "b>c was not measured: not a failure");
        let f = |c: &Cell, m: &Matrix| {
            let (_, change, noise) = measured(c);
            fill(change, noise, m.better, 10.0)
        };
        assert_eq!(f(&t.cells[0][1], t), "#f4a6a6", "halved: worse");
        assert_eq!(f(&t.cells[1][0], t), "#e8e8e8", "+1 %: within");
        let r = &ms[1];
        assert_eq!(r.better, Better::Lower);
        assert_eq!(f(&r.cells[0][1], r), "#f4a6a6", "latency up 50 %: worse");
        let svg = matrix_svg(t, 10.0);
        for want in [
            "500M",
            "-50%",
            "url(#failed)",
            ">failed<",
            NOT_MEASURED,
            "class=\"spark\"",
            "mesh round 3",
            "2026-11-26T04:03:00Z",
            "tput (tcp-stream, 2 s)",
            "throughput, bit/s",
        ] {
            assert!(svg.contains(want), "{want} not in {svg}");
        }
        assert!(matrix_svg(r, 10.0).contains("median round trip (p50), µs"));
        let html = mesh_html(&new, Some(&old), std::slice::from_ref(&old), 10.0).unwrap();
        assert_eq!(html.matches("<svg").count(), 2);
        assert!(matrices(&RunReport::new(RunKind::Bench, "x"), None, &[]).is_err(), "not a mesh run");
        assert!(same_mesh(&old, &new) && !same_mesh(&old, &RunReport::new(RunKind::Mesh, "other")));
    }

    #[test]
    fn a_small_matrix_renders_as_its_snapshot() {
        let old = with_spread(round(6, &[("tput:a>b", 1e9), ("tput:b>a", 9.4e9), ("rtt:a>b:p50", 35.0)]), 2.0);
        let new = with_spread(round(7, &[("tput:a>b", 9.41e9), ("tput:b>a", 9.3e9), ("rtt:a>b:p50", 41.0)]), 2.0);
        let ms = matrices(&new, Some(&old), std::slice::from_ref(&old)).unwrap();
        insta::assert_snapshot!("mesh_matrix_3_agents", matrix_svg(&ms[0], 10.0));
    }

    /// A check run in the browser: every agent label, title line, value and failure mark of the
    /// page's SVGs lies inside its drawing (the page scrolls sideways), has a size, does not overlap its neighbour (labels) and
    /// fits its cell (values); the verdict is written into `#verdict`.
    const CHECK: &str = r#"<pre id="verdict">not run</pre><script>
    (() => {
      const bad = [];
      const box = e => e.getBoundingClientRect();
      const texts = [...document.querySelectorAll('svg text')];
      for (const t of texts) {
        const [b, s] = [box(t), box(t.ownerSVGElement)];
        if (b.width < 2 || b.height < 6 || b.left < s.left - 1 || b.top < s.top - 1 || b.right > s.right + 1 || b.bottom > s.bottom + 1)
          bad.push('outside its drawing or empty: ' + t.textContent + ' ' + JSON.stringify(b));
      }
      // row labels stacked: none overlaps the next (column labels are rotated 60 degrees, a
      // cell apart: their boxes overlap by design, their glyphs do not)
      const rows = [...document.querySelectorAll('svg text.label.row')].map(box);
      for (let i = 1; i < rows.length; i++)
        if (rows[i].top > rows[i - 1].top && rows[i].top < rows[i - 1].bottom - 1) bad.push('row labels overlap at ' + i);
      for (const g of document.querySelectorAll('svg g.cell')) {
        const r = box(g.querySelector('rect'));
        for (const t of g.querySelectorAll('text')) {
          const b = box(t);
          if (b.width > r.width + 0.5) bad.push('does not fit its cell: ' + t.textContent);
        }
      }
      const labels = document.querySelectorAll('svg text.label').length;
      const values = document.querySelectorAll('svg text.value').length;
      document.getElementById('verdict').textContent =
        bad.length ? 'BAD ' + bad.slice(0, 20).join(' | ') : 'OK labels=' + labels + ' values=' + values + ' texts=' + texts.length;
    })();
    </script>"#;

    /// Issue 33: a 100-agent round (synthetic: long agent names, failures, pairs not measured,
    /// a history of three rounds) renders, and headless Chromium lays it out with every label,
    /// title and value visible and fitting; the screenshot is written beside the page (and to
    /// `$LINERATE_MESH_SCREENSHOT` when set). Needs `chromium` on the PATH: fails, loudly, when
    /// it is not.
    #[test]
    fn a_hundred_agent_round_renders_with_every_label_showing_in_chromium() {
        let n = 100;
        let agents: Vec<String> = (0..n).map(|i| format!("dc{}-rack{:02}-agent{i:03}", i % 4, i % 17)).collect();
        let test = |name: &str, kind: &str| MeshTest {
            name: name.into(),
            kind: kind.into(),
            duration_s: 10.0,
            streams: 4,
            both_ways: kind != "tcp-rr",
            under_load: false,
        };
        let mk = |k: u64| {
            let mut r = RunReport::new(RunKind::Mesh, format!("mesh round {k}: {n} agents, 2 tests"));
            r.params.round = Some(k);
            r.params.agents = Some(agents.clone());
            r.params.tests = Some(vec![test("throughput", "tcp-stream"), test("rtt", "tcp-rr")]);
            let mut tries = Vec::new();
            for (i, a) in agents.iter().enumerate() {
                for (j, b) in agents.iter().enumerate() {
                    let (x, y) = (i as u64, j as u64);
                    if i == j || (x * 7 + y * 3 + k) % 53 == 0 {
                        continue; // not measured
                    }
                    if (x + y * 11) % 97 == 0 {
                        tries.push(MeshTry {
                            test: "throughput".into(),
                            from: a.clone(),
                            to: b.clone(),
                            status: "failed: reset by peer".into(),
                            ..MeshTry::default()
                        });
                        continue;
                    }
                    let v = 9.4e9 - ((x * 31 + y * 17 + k * 5) % 40) as f64 * 1e8 - if j == 42 { 9e9 } else { 0.0 };
                    r.metric(MetricId::pair("throughput", a, b, PairFigure::Throughput), v, "bit/s", Better::Higher);
                    if i < j {
                        let p50 = 30.0 + ((x + y + k) % 50) as f64 * if j == 7 { 40.0 } else { 1.0 };
                        r.metric(MetricId::pair("rtt", a, b, PairFigure::LatencyP50), p50, "us", Better::Lower);
                    }
                }
            }
            r.body = Some(Body::Mesh(Box::new(MeshRound {
                round: k,
                agents: agents.clone(),
                tests: vec![test("throughput", "tcp-stream"), test("rtt", "tcp-rr")],
                tries,
                ..MeshRound::default()
            })));
            r
        };
        let history = [mk(5), mk(6), mk(7)];
        let run = mk(8);
        let html = mesh_html(&run, history.last(), &history, 10.0).unwrap();
        let ms = matrices(&run, history.last(), &history).unwrap();
        let t = &ms[0];
        let failed = t.cells.iter().flatten().filter(|c| matches!(c.state, State::Failed(_))).count();
        let not = t.cells.iter().flatten().filter(|c| c.state == State::NotMeasured).count() - n;
        assert!(failed > 50 && not > 100, "the round has failures ({failed}) and pairs not measured ({not})");
        let dir = tempfile::tempdir().unwrap();
        let page = dir.path().join("mesh100.html");
        std::fs::write(&page, html.replace("</body>", &format!("{CHECK}</body>"))).unwrap();
        let url = format!("file://{}", page.display());
        let chromium = || {
            let mut c = std::process::Command::new("chromium");
            c.args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--virtual-time-budget=10000"]);
            c
        };
        let dom = chromium().arg("--dump-dom").arg(&url).output().unwrap_or_else(|e| {
            panic!("this test needs headless Chromium (`chromium` on the PATH) to lay the page out: {e}")
        });
        let dom = String::from_utf8_lossy(&dom.stdout);
        let verdict = dom.split("<pre id=\"verdict\">").nth(1).and_then(|v| v.split("</pre>").next()).unwrap_or("");
        // 2 tests x (100 row + 100 column labels); every measured cell's value
        let values = t.cells.iter().flatten().filter(|c| c.value().is_some()).count()
            + ms[1].cells.iter().flatten().filter(|c| c.value().is_some()).count();
        assert_eq!(
            verdict.split(" texts=").next(),
            Some(format!("OK labels=400 values={values}").as_str()),
            "{verdict}"
        );
        let shot = std::env::var_os("LINERATE_MESH_SCREENSHOT").map_or(dir.path().join("mesh100.png"), Into::into);
        let w = matrix_svg(t, 10.0)
            .split("width=\"")
            .nth(1)
            .and_then(|w| w.split('"').next())
            .and_then(|w| w.parse::<u32>().ok())
            .unwrap_or(4000);
        let o = chromium()
            .arg(format!("--screenshot={}", std::path::Path::new(&shot).display()))
            .arg(format!("--window-size={},{}", w + 60, w + 300))
            .arg(&url)
            .output()
            .unwrap();
        let png = std::fs::read(&shot)
            .unwrap_or_else(|e| panic!("no screenshot ({e}): {}", String::from_utf8_lossy(&o.stderr)));
        assert!(png.starts_with(b"\x89PNG") && png.len() > 50_000, "a screenshot of the matrix: {} bytes", png.len());
    }
}
