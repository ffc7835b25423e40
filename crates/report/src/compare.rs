//! `report compare`: every metric of two runs side by side with the relative change, and
//! which changes are regressions beyond a threshold (the direction comes from `better`).

use crate::convert::si;
use crate::model::{Better, RunReport};

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
    /// The change is worse than the threshold.
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
}

impl Comparison {
    /// Whether any figure regressed beyond the threshold.
    pub fn has_regression(&self) -> bool {
        self.rows.iter().any(|r| r.regression)
    }

    /// A plain-text table for the terminal.
    pub fn to_text(&self) -> String {
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
            } else if r.change_pct.is_some_and(|c| c.abs() > self.threshold_pct) {
                "improved".to_string()
            } else {
                String::new()
            };
            out.push([r.name.clone(), v(r.a), v(r.b), change, flag]);
        }
        let widths: Vec<usize> =
            (0..5).map(|i| out.iter().map(|row| row[i].chars().count()).max().unwrap_or(0)).collect();
        let mut s = String::new();
        for row in &out {
            let line: Vec<String> = row.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
            s.push_str(line.join("  ").trim_end());
            s.push('\n');
        }
        s
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
            let regression = match (va, vb, change_pct) {
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
            Row { name: name.to_string(), unit, a: va, b: vb, change_pct, better, regression }
        })
        .collect();
    Comparison { a: a.id.clone(), b: b.id.clone(), threshold_pct, rows }
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
        b.metrics[0].value = 10e9;
        b.metrics[2].value = 3.0;
        assert!(compare(&a, &b, 5.0).rows[2].regression);
        assert!(compare(&a, &b, 5.0).to_text().contains("REGRESSION"));
    }
}
