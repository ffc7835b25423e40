//! The mesh matrix (`linerate report mesh`): for a run of kind `mesh`, one matrix per test —
//! rows the agent that ran the test, columns the agent it measured against — each cell the
//! pair's figure, coloured by its change against a baseline round: green better and red worse
//! beyond the threshold, grey within it, white where there is nothing to compare; a cell without
//! a figure (the test failed) is hatched. SVG in the style of [`crate::svg`], and one HTML page.

use crate::convert::si;
use crate::model::{Better, Body, RunKind, RunReport};
use crate::svg::esc;
use crate::ReportError;
use linerate_model::doc::mesh::{pair_metric, MeshTest, PairFigure};
use std::fmt::Write;

/// A cell: the pair's figure, and its change against the baseline in percent (if it has one).
pub type Cell = Option<(f64, Option<f64>)>;

/// One test's matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct Matrix {
    /// The test's name.
    pub test: String,
    /// Unit of the figures (`bit/s`, `us`).
    pub unit: String,
    /// Which way is better.
    pub better: Better,
    /// The agents, in inventory order.
    pub agents: Vec<String>,
    /// `cells[from][to]`: the figure and its change against the baseline in percent.
    pub cells: Vec<Vec<Cell>>,
}

/// The agents and the tests' names of a mesh run: from its round, or from the parameters of a
/// run stored before the round was kept.
fn agents_and_tests(r: &RunReport) -> Result<(Vec<String>, Vec<String>), ReportError> {
    let names = |tests: &[MeshTest]| tests.iter().map(|t| t.name.clone()).collect();
    match (&r.body, &r.params.agents, &r.params.tests) {
        (Some(Body::Mesh(round)), _, _) => Ok((round.agents.clone(), names(&round.tests))),
        (_, Some(agents), Some(tests)) => Ok((agents.clone(), names(tests))),
        _ => Err(ReportError::Invalid(format!("mesh run {} has no agents and tests", r.id))),
    }
}

/// The matrices of mesh run `run`, changes against `base` (another mesh run) where given.
pub fn matrices(run: &RunReport, base: Option<&RunReport>) -> Result<Vec<Matrix>, ReportError> {
    if run.kind != RunKind::Mesh {
        return Err(ReportError::Invalid(format!("run {} is a {} run, not a mesh round", run.id, run.kind.as_str())));
    }
    let (agents, tests) = agents_and_tests(run)?;
    let mut out = Vec::new();
    for test in tests {
        let mut m = Matrix {
            test: test.clone(),
            unit: String::new(),
            better: Better::Higher,
            agents: agents.clone(),
            cells: vec![vec![None; agents.len()]; agents.len()],
        };
        for (i, a) in agents.iter().enumerate() {
            for (j, b) in agents.iter().enumerate() {
                let found = PairFigure::ALL.into_iter().find_map(|f| run.find_metric(&pair_metric(&test, a, b, f)));
                let Some(metric) = found else { continue };
                m.unit = metric.unit.clone();
                m.better = metric.better;
                let change = base
                    .and_then(|b| b.find_metric(&metric.name))
                    .filter(|old| old.value != 0.0)
                    .map(|old| (metric.value - old.value) / old.value * 100.0);
                m.cells[i][j] = Some((metric.value, change));
            }
        }
        out.push(m);
    }
    Ok(out)
}

/// A cell's fill: by the change's direction against `better`, beyond `threshold` percent.
fn fill(change: Option<f64>, better: Better, threshold: f64) -> &'static str {
    match change {
        None => "#ffffff",
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

/// Matrix `m` as a standalone SVG document.
pub fn matrix_svg(m: &Matrix, threshold: f64) -> String {
    let n = m.agents.len().max(1);
    let label_w = 12.0 + 7.0 * m.agents.iter().map(|a| a.len()).max().unwrap_or(4) as f64;
    let cell = (560.0 / n as f64).clamp(14.0, 90.0);
    let (w, h) = (label_w + cell * n as f64 + 20.0, 60.0 + label_w + cell * n as f64 + 20.0);
    let font = (cell / 5.5).clamp(6.0, 12.0);
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" data-kind=\"mesh\" width=\"{w:.0}\" height=\"{h:.0}\" \
         viewBox=\"0 0 {w:.0} {h:.0}\" font-family=\"DejaVu Sans,Helvetica,Arial,sans-serif\">\
         <defs><pattern id=\"none\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\">\
         <rect width=\"6\" height=\"6\" fill=\"#fff\"/><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#bbb\"/></pattern></defs>\
         <rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\
         <text x=\"{:.0}\" y=\"22\" font-size=\"15\" text-anchor=\"middle\">{} ({}; rows run the test against the columns)</text>",
        w / 2.0,
        esc(&m.test),
        esc(&m.unit)
    );
    let (x0, y0) = (label_w, 40.0 + label_w);
    for (k, a) in m.agents.iter().enumerate() {
        let c = x0 + cell * (k as f64 + 0.5);
        let _ = write!(
            s,
            "<text x=\"{c:.1}\" y=\"{:.1}\" font-size=\"11\" transform=\"rotate(-60 {c:.1} {:.1})\">{}</text>",
            y0 - 6.0,
            y0 - 6.0,
            esc(a)
        );
        let _ = write!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"end\">{}</text>",
            x0 - 6.0,
            y0 + cell * (k as f64 + 0.5) + 4.0,
            esc(a)
        );
    }
    for (i, row) in m.cells.iter().enumerate() {
        for (j, c) in row.iter().enumerate() {
            let (x, y) = (x0 + cell * j as f64, y0 + cell * i as f64);
            if i == j {
                let _ = write!(
                    s,
                    "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{cell:.1}\" height=\"{cell:.1}\" fill=\"#555\"/>"
                );
                continue;
            }
            let f = c.map_or("url(#none)", |(_, ch)| fill(ch, m.better, threshold));
            let _ = write!(
                s,
                "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{cell:.1}\" height=\"{cell:.1}\" fill=\"{f}\" stroke=\"#fff\"/>"
            );
            if let Some((v, ch)) = c {
                let text = si(*v, &m.unit).replace(" bit/s", "").replace(" us", "µs");
                let _ = write!(
                    s,
                    "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"{font:.1}\" text-anchor=\"middle\">{}</text>",
                    x + cell / 2.0,
                    y + cell / 2.0 + font / 3.0,
                    esc(&text)
                );
                if let Some(ch) = ch.filter(|_| cell >= 40.0) {
                    let _ = write!(
                        s,
                        "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"{:.1}\" text-anchor=\"middle\" fill=\"#444\">{ch:+.0}%</text>",
                        x + cell / 2.0,
                        y + cell / 2.0 + font * 1.4,
                        font * 0.85
                    );
                }
            }
        }
    }
    s.push_str("</svg>\n");
    s
}

/// One HTML page: every test's matrix of `run`, coloured against `base`, and the pairs table.
pub fn mesh_html(run: &RunReport, base: Option<&RunReport>, threshold: f64) -> Result<String, ReportError> {
    let ms = matrices(run, base)?;
    let mut s = String::new();
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t}</title>\
         <style>body{{font-family:DejaVu Sans,Helvetica,Arial,sans-serif;margin:24px;color:#222}}\
         figure{{margin:0 0 16px}}svg{{max-width:100%;height:auto}}.meta{{color:#666;font-size:13px}}</style>\
         </head>\n<body><h1>{t}</h1><p class=\"meta\">run <code>{id}</code>, {created}; {against}; \
         green: better by {threshold}% or more, red: worse, grey: within, white: no baseline, hatched: failed</p>",
        t = esc(&run.title),
        id = esc(&run.id),
        created = esc(&run.created),
        against = match base {
            Some(b) => format!("against <code>{}</code> ({})", esc(&b.id), esc(&b.created)),
            None => "no baseline".into(),
        }
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

    fn round(values: &[(&str, f64)]) -> RunReport {
        let mut r = RunReport::new(RunKind::Mesh, "mesh round 0");
        let test = |name: &str| MeshTest { name: name.into(), ..MeshTest::default() };
        r.params.agents = Some(["a", "b", "c"].map(String::from).to_vec());
        r.params.tests = Some(vec![test("tput"), test("rtt")]);
        for (name, v) in values {
            if name.ends_with(":p50") {
                r.metric(name, *v, "us", Better::Lower);
            } else {
                r.metric(name, *v, "bit/s", Better::Higher);
            }
        }
        r
    }

    #[test]
    fn cells_hold_the_pairs_figures_and_their_change() {
        let old = round(&[("tput:a>b", 1e9), ("tput:b>a", 1e9), ("rtt:a>b:p50", 100.0)]);
        let new = round(&[("tput:a>b", 5e8), ("tput:b>a", 1.01e9), ("tput:a>c", 2e9), ("rtt:a>b:p50", 150.0)]);
        let ms = matrices(&new, Some(&old)).unwrap();
        assert_eq!(ms.len(), 2);
        let t = &ms[0];
        assert_eq!((t.unit.as_str(), t.better), ("bit/s", Better::Higher));
        assert_eq!(t.cells[0][1], Some((5e8, Some(-50.0))));
        assert_eq!(t.cells[0][2], Some((2e9, None)), "no baseline for a>c");
        assert_eq!(t.cells[2][0], None, "c>a did not run");
        assert_eq!(fill(t.cells[0][1].unwrap().1, t.better, 10.0), "#f4a6a6", "halved: worse");
        assert_eq!(fill(t.cells[1][0].unwrap().1, t.better, 10.0), "#e8e8e8", "+1 %: within");
        let r = &ms[1];
        assert_eq!(r.better, Better::Lower);
        assert_eq!(fill(r.cells[0][1].unwrap().1, r.better, 10.0), "#f4a6a6", "latency up 50 %: worse");
        let svg = matrix_svg(t, 10.0);
        assert!(
            svg.starts_with("<svg") && svg.contains("500 M") && svg.contains("-50%") && svg.contains("url(#none)"),
            "{svg}"
        );
        let html = mesh_html(&new, Some(&old), 10.0).unwrap();
        assert_eq!(html.matches("<svg").count(), 2);
        assert!(matrices(&RunReport::new(RunKind::Bench, "x"), None).is_err(), "not a mesh run");
    }
}
