//! The single-file HTML report: a summary table (several runs side by side with the change
//! against the first), then every chart of every run as inline SVG in one column per run, then
//! the runs' tables. No external fetches; one small inline script records the rendered size of
//! each chart in `data-chart-sizes` on `<body>` so a headless browser test can check them.

use crate::compare::compare;
use crate::convert::si;
use crate::model::{RunReport, Table};
use crate::svg::{self, esc};
use linerate_model::units::significant;
use serde_json::Value;
use std::fmt::Write;

const CSS: &str = "body{font-family:DejaVu Sans,Helvetica,Arial,sans-serif;margin:24px;color:#222;background:#fafafa}\
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd}\
h3{font-size:15px;margin:12px 0 6px}\
table{border-collapse:collapse;margin:8px 0;background:#fff;max-width:100%}td{overflow-wrap:anywhere}th,td{border:1px solid #ddd;padding:4px 8px;font-size:13px}\
th{background:#f0f0f0;text-align:left}td.n{text-align:right;font-variant-numeric:tabular-nums}\
td.bad{color:#b00020;font-weight:bold}td.good{color:#1b7a1b}\
.grid{display:grid;gap:16px;align-items:start}.run{min-width:0}\
figure{margin:0 0 16px;background:#fff;border:1px solid #e4e4e4;padding:4px}\
svg.chart{display:block;max-width:100%;height:auto}\
.single .run{display:flex;flex-wrap:wrap;gap:0 16px}.single .run h3{flex-basis:100%}.single figure{flex:0 1 640px}.meta{color:#666;font-size:13px}code{font-size:12px}";

const SCRIPT: &str = "(function(){var s=[];document.querySelectorAll('svg.chart').forEach(function(e){\
var r=e.getBoundingClientRect();s.push(Math.round(r.width)+'x'+Math.round(r.height));});\
document.body.setAttribute('data-chart-sizes',s.join(' '));document.body.setAttribute('data-rendered','yes');})();";

const ONERROR: &str = "window.addEventListener('error',function(e){var d=document.documentElement;\
d.setAttribute('data-errors',(d.getAttribute('data-errors')||'')+String(e.message)+';');});";

fn cell(v: &Value) -> String {
    match v {
        Value::Null => "–".into(),
        Value::String(s) => esc(s),
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(f64::NAN);
            if x.fract() == 0.0 && x.abs() < 1e15 {
                format!("{x}")
            } else {
                significant(x, 4)
            }
        }
        other => esc(&other.to_string()),
    }
}

fn table_html(s: &mut String, t: &Table) {
    let _ = write!(s, "<h3>{}</h3><table><tr>", esc(&t.title));
    for c in &t.columns {
        let _ = write!(s, "<th>{}</th>", esc(c));
    }
    s.push_str("</tr>");
    for row in &t.rows {
        s.push_str("<tr>");
        for (i, c) in t.columns.iter().enumerate() {
            let v = row.get(i).unwrap_or(&Value::Null);
            let text = match (v.as_f64(), c.rsplit_once('(').map(|(_, u)| u.trim_end_matches(')'))) {
                (Some(x), Some(u @ ("bit/s" | "B" | "1/s"))) => esc(&si(x, u)),
                _ => cell(v),
            };
            let class = if v.is_number() { " class=\"n\"" } else { "" };
            let _ = write!(s, "<td{class}>{text}</td>");
        }
        s.push_str("</tr>");
    }
    s.push_str("</table>");
}

/// The summary table: one column per run, one row per metric; from the second run on, each
/// value carries its change against the first run, coloured when worse/better than
/// `threshold_pct`.
fn summary(s: &mut String, runs: &[RunReport], threshold_pct: f64) {
    s.push_str("<h2>Summary</h2><table class=\"summary\"><tr><th></th>");
    for r in runs {
        let _ = write!(s, "<th><code>{}</code></th>", esc(&r.id));
    }
    s.push_str("</tr>");
    for (label, f) in [
        ("kind", (|r: &RunReport| r.kind.as_str().to_string()) as fn(&RunReport) -> String),
        ("title", |r| r.title.clone()),
        ("created", |r| r.created.clone()),
        ("linerate", |r| r.tool_version.clone()),
    ] {
        let _ = write!(s, "<tr><th>{label}</th>");
        for r in runs {
            let _ = write!(s, "<td>{}</td>", esc(&f(r)));
        }
        s.push_str("</tr>");
    }
    let Some(base) = runs.first() else {
        s.push_str("</table>");
        return;
    };
    let mut names: Vec<String> = Vec::new();
    for r in runs {
        for m in &r.metrics {
            if !names.contains(&m.name) {
                names.push(m.name.clone());
            }
        }
    }
    let cmps: Vec<_> = runs.iter().map(|r| compare(base, r, threshold_pct)).collect();
    for name in &names {
        let _ = write!(s, "<tr><th>{}</th>", esc(name));
        for (i, r) in runs.iter().enumerate() {
            match r.find_metric(name) {
                None => s.push_str("<td class=\"n\">–</td>"),
                Some(m) => {
                    let row = cmps[i].rows.iter().find(|x| &x.name == name);
                    let (class, change) = match row.and_then(|x| x.change_pct.map(|c| (x.regression, c))) {
                        Some((bad, c)) if i > 0 => {
                            let class = if bad {
                                "n bad"
                            } else if c.abs() > threshold_pct {
                                "n good"
                            } else {
                                "n"
                            };
                            (class, format!(" ({c:+.1}%)"))
                        }
                        _ => ("n", String::new()),
                    };
                    let _ = write!(s, "<td class=\"{class}\">{}{change}</td>", esc(&si(m.value, &m.unit)));
                }
            }
        }
        s.push_str("</tr>");
    }
    s.push_str("</table>");
}

/// With several runs: one bar chart per rate metric that two or more of them have, one bar per
/// run that has it.
fn side_by_side(s: &mut String, runs: &[RunReport]) {
    let mut shared: Vec<&str> = Vec::new();
    for m in runs.iter().flat_map(|r| &r.metrics) {
        let have = runs.iter().filter(|r| r.find_metric(&m.name).is_some_and(|x| x.unit == "bit/s")).count();
        if m.unit == "bit/s" && have >= 2 && !shared.contains(&m.name.as_str()) && shared.len() < 4 {
            shared.push(&m.name);
        }
    }
    if shared.is_empty() {
        return;
    }
    s.push_str(
        "<h2>Runs side by side</h2><div class=\"grid\" style=\"grid-template-columns:repeat(2,minmax(0,1fr))\">",
    );
    for name in shared {
        let chart = crate::model::BarChart {
            title: format!("{name} by run"),
            unit: "bit/s".into(),
            bars: runs
                .iter()
                .filter_map(|r| {
                    let m = r.find_metric(name)?;
                    let label = format!("{} {}", r.kind.as_str(), r.id.rsplit('-').next().unwrap_or(&r.id));
                    Some(crate::model::Bar { label, value: m.value })
                })
                .collect(),
            ceiling: None,
        };
        let _ = write!(s, "<figure data-kind=\"bars\">{}</figure>", svg::bar_chart(&chart).trim_end());
    }
    s.push_str("</div>");
}

/// The HTML report of `runs` (the first is the baseline of the changes shown).
pub fn report(runs: &[RunReport], threshold_pct: f64) -> String {
    let mut s = String::new();
    let title = match runs {
        [one] => format!("linerate report: {}", one.title),
        _ => format!("linerate report: {} runs compared", runs.len()),
    };
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{}</title><style>{CSS}</style><script>{ONERROR}</script></head>\n<body>",
        esc(&title)
    );
    let _ = write!(s, "<h1>{}</h1>", esc(&title));
    let _ =
        write!(s, "<p class=\"meta\">generated by linerate {} · {} run(s)</p>", env!("CARGO_PKG_VERSION"), runs.len());
    summary(&mut s, runs, threshold_pct);
    side_by_side(&mut s, runs);
    s.push_str("<h2>Charts</h2>");
    let single = if runs.len() == 1 { " single" } else { "" };
    let _ = write!(
        s,
        "<div class=\"grid{single}\" style=\"grid-template-columns:repeat({},minmax(0,1fr))\">",
        runs.len().max(1)
    );
    for r in runs {
        let _ = write!(s, "<div class=\"run\"><h3>{} <code>{}</code></h3>", esc(&r.title), esc(&r.id));
        for (kind, chart) in svg::all(r) {
            let _ = write!(s, "<figure data-kind=\"{}\">{}</figure>", kind.name(), chart.trim_end());
        }
        s.push_str("</div>");
    }
    s.push_str("</div>");
    if runs.iter().any(|r| !r.tables.is_empty() || !r.params.is_empty()) {
        s.push_str("<h2>Details</h2>");
        let _ = write!(
            s,
            "<div class=\"grid\" style=\"grid-template-columns:repeat({},minmax(0,1fr))\">",
            runs.len().max(1)
        );
        for r in runs {
            s.push_str("<div class=\"run\">");
            if !r.params.is_empty() {
                let t = Table {
                    title: format!("Parameters of {}", r.id),
                    columns: vec!["parameter".into(), "value".into()],
                    rows: r.params.iter().map(|(k, v)| vec![Value::String(k.clone()), v.clone()]).collect(),
                };
                table_html(&mut s, &t);
            }
            for t in &r.tables {
                table_html(&mut s, t);
            }
            s.push_str("</div>");
        }
        s.push_str("</div>");
    }
    let _ = write!(s, "\n<script>{SCRIPT}</script>\n</body></html>\n");
    s
}
