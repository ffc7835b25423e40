//! The single-file HTML report: a summary table (several runs side by side with the change
//! against the first), then every chart of every run as inline SVG in one column per run, then
//! the runs' tables. No external fetches; one small inline script records the rendered size of
//! each chart in `data-chart-sizes` on `<body>` so a headless browser test can check them.

use crate::compare::{compare, key_params};
use crate::format::si;
use crate::model::{Better, Body, Cell, RunKind, RunReport, Table};
use crate::svg::{self, esc};
use linerate_model::doc::lab::{LabDescription, Side};
use linerate_model::metric::MetricId;
use linerate_model::units::significant;
use serde_json::Value;
use std::fmt::Write;

const CSS: &str = "body{font-family:DejaVu Sans,Helvetica,Arial,sans-serif;margin:24px;color:#222;background:#fafafa}\
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd}\
h3{font-size:15px;margin:12px 0 6px}\
table{border-collapse:collapse;margin:8px 0;background:#fff;max-width:100%}td{overflow-wrap:anywhere}th,td{border:1px solid #ddd;padding:4px 8px;font-size:13px}\
th{background:#f0f0f0;text-align:left}td.n{text-align:right;font-variant-numeric:tabular-nums}\
td.bad{color:#b00020;font-weight:bold}td.good{color:#1b7a1b}td.worse{color:#9a5b00}\
table.kv{margin:0;border:0}table.kv th,table.kv td{border:0;border-bottom:1px solid #eee;padding:1px 6px;font-size:12px}\
.grid{display:grid;gap:16px;align-items:start}.run{min-width:0}\
figure{margin:0 0 16px;background:#fff;border:1px solid #e4e4e4;padding:4px}\
svg.chart{display:block;max-width:100%;height:auto}\
.single .run{display:flex;flex-wrap:wrap;gap:0 16px}.single .run h3{flex-basis:100%}.single figure{flex:0 1 640px}.meta{color:#666;font-size:13px}code{font-size:12px}";

const SCRIPT: &str = "(function(){var s=[];document.querySelectorAll('svg.chart').forEach(function(e){\
var r=e.getBoundingClientRect();s.push(Math.round(r.width)+'x'+Math.round(r.height));});\
document.body.setAttribute('data-chart-sizes',s.join(' '));document.body.setAttribute('data-rendered','yes');})();";

const ONERROR: &str = "window.addEventListener('error',function(e){var d=document.documentElement;\
d.setAttribute('data-errors',(d.getAttribute('data-errors')||'')+String(e.message)+';');});";

/// A nested value as HTML: an object as a small key/value table, a list of plain values joined
/// by commas, a list of objects one after another; never a raw JSON string.
fn nested(v: &Value, depth: usize) -> String {
    match v {
        Value::Object(o) if depth < 4 => {
            let mut s = String::from("<table class=\"kv\">");
            for (k, x) in o {
                let _ = write!(s, "<tr><th>{}</th><td>{}</td></tr>", esc(k), nested(x, depth + 1));
            }
            s.push_str("</table>");
            s
        }
        Value::Array(a) if depth < 4 && a.iter().any(|x| x.is_object() || x.is_array()) => {
            a.iter().map(|x| nested(x, depth + 1)).collect()
        }
        Value::Array(a) => esc(&a
            .iter()
            .map(|x| x.as_str().map_or_else(|| x.to_string(), String::from))
            .collect::<Vec<_>>()
            .join(", ")),
        other => cell(other),
    }
}

fn cell(v: &Value) -> String {
    match v {
        Value::Null => "–".into(),
        Value::Object(_) | Value::Array(_) => nested(v, 0),
        Value::String(s) => esc(s),
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(f64::NAN);
            if x.fract() == 0.0 && x.abs() < 1e15 {
                format!("{x}")
            } else {
                significant(x, 4)
            }
        }
        Value::Bool(b) => (if *b { "yes" } else { "no" }).into(),
    }
}

/// A table cell as HTML: a number as written (four significant digits when not whole), text
/// escaped, `–` for nothing.
fn cell_html(c: &Cell) -> String {
    match c {
        Cell::Null => "–".into(),
        Cell::Text(s) => esc(s),
        Cell::Bool(b) => (if *b { "yes" } else { "no" }).into(),
        Cell::Int(i) => i.to_string(),
        Cell::Number(x) if x.fract() == 0.0 && x.abs() < 1e15 => format!("{x}"),
        Cell::Number(x) => significant(*x, 4),
    }
}

/// The lab a lab run was made in, as the typed description: hosts, links (rate, MTU, delay,
/// loss), switches and QoS classes. `None` for runs of the older sketch, which have none.
pub fn lab_of(r: &RunReport) -> Option<&LabDescription> {
    match (&r.body, r.kind) {
        (Some(Body::Lab(doc)), _) => Some(&doc.lab),
        (_, RunKind::Lab) => r.params.lab.as_ref(),
        _ => None,
    }
}

/// The lab as built as tables: hosts, links (rate, MTU, delay, loss), switches and QoS classes.
pub fn lab_tables(lab: &LabDescription) -> Vec<Table> {
    let text = Cell::text;
    let opt = |x: Option<String>| x.map_or(Cell::Null, Cell::Text);
    let mut out = Vec::new();
    let mut rows = Vec::new();
    for (name, h) in &lab.hosts {
        if h.interfaces.is_empty() {
            rows.push(vec![Cell::from(name.as_str()), text(&h.ns), Cell::Null, Cell::Null, Cell::Null]);
        }
        for i in &h.interfaces {
            rows.push(vec![Cell::from(name.as_str()), text(&h.ns), text(&i.name), text(&i.addr), text(&i.link)]);
        }
    }
    if !rows.is_empty() {
        let columns = ["host", "namespace", "interface", "address", "link"].map(String::from).to_vec();
        out.push(Table { title: "Lab hosts".into(), columns, rows });
    }
    let rows: Vec<Vec<Cell>> = lab
        .links
        .iter()
        .map(|l| {
            let us = |x: Option<u64>| opt(x.map(|v| si(v as f64, "us")));
            let pct = |x: Option<f64>| opt(x.map(|v| si(v, "%")));
            vec![
                Cell::from(l.name.as_str()),
                Cell::from(format!("{} ({})", l.a, l.a_if)),
                Cell::from(format!("{} ({})", l.b, l.b_if)),
                l.rate_bps.map_or(Cell::Null, Cell::from),
                Cell::from(format!("{:?}", l.shaper).to_lowercase()),
                Cell::from(l.mtu),
                us(l.delay_us),
                us(l.jitter_us),
                pct(l.loss_pct),
                pct(l.reorder_pct),
                text(&l.subnet),
            ]
        })
        .collect();
    if !rows.is_empty() {
        let columns =
            ["link", "end a", "end b", "rate (bit/s)", "shaper", "MTU", "delay", "jitter", "loss", "reorder", "subnet"]
                .map(String::from)
                .to_vec();
        out.push(Table { title: "Lab links".into(), columns, rows });
    }
    let rows: Vec<Vec<Cell>> = lab
        .switches
        .iter()
        .map(|w| vec![Cell::from(w.name.as_str()), text(&w.bridge), text(&w.ns), text(&w.subnet)])
        .collect();
    if !rows.is_empty() {
        let columns = ["switch", "bridge", "namespace", "subnet"].map(String::from).to_vec();
        out.push(Table { title: "Lab switches".into(), columns, rows });
    }
    let mut rows = Vec::new();
    for q in &lab.qos {
        let side = match q.side {
            Side::A => "a",
            Side::B => "b",
        };
        let place = format!("{} end {side}, {}", q.link, if q.ingress { "ingress" } else { "egress" });
        for c in &q.classes {
            let mut matches = Vec::new();
            for (k, v) in [("src", c.src.clone()), ("dst", c.dst.clone())] {
                if let Some(v) = v {
                    matches.push(format!("{k} {v}"));
                }
            }
            for (k, v) in [("sport", c.sport), ("dport", c.dport)] {
                if let Some(v) = v {
                    matches.push(format!("{k} {v}"));
                }
            }
            if c.default {
                matches.push("default".into());
            }
            rows.push(vec![
                Cell::from(place.as_str()),
                Cell::from(q.rate_bps),
                Cell::from(c.name.as_str()),
                Cell::from(c.rate_bps),
                Cell::from(c.ceil_bps),
                Cell::from(matches.join(", ")),
            ]);
        }
    }
    if !rows.is_empty() {
        let columns = ["link end", "total (bit/s)", "class", "guarantee (bit/s)", "ceiling (bit/s)", "matches"]
            .map(String::from)
            .to_vec();
        out.push(Table { title: "Lab QoS classes".into(), columns, rows });
    }
    out
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
            let v = row.get(i).unwrap_or(&Cell::Null);
            let text = match (v.as_f64(), c.rsplit_once('(').map(|(_, u)| u.trim_end_matches(')'))) {
                (Some(x), Some(u @ ("bit/s" | "B" | "1/s"))) => esc(&si(x, u)),
                _ => cell_html(v),
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
        ("parameters", |r| key_params(r).into_iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ")),
        ("best point", |r| r.params.best_point.clone().unwrap_or_default()),
    ] {
        if label == "best point" && runs.iter().all(|r| r.params.best_point.is_none()) {
            continue;
        }
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
    let mut names: Vec<MetricId> = Vec::new();
    for r in runs {
        for m in &r.metrics {
            if !names.contains(&m.name) {
                names.push(m.name.clone());
            }
        }
    }
    let cmps: Vec<_> = runs.iter().map(|r| compare(base, r, threshold_pct)).collect();
    for name in &names {
        let _ = write!(s, "<tr><th>{}</th>", esc(&name.to_string()));
        for (i, r) in runs.iter().enumerate() {
            match r.find_metric(name) {
                None => s.push_str("<td class=\"n\">–</td>"),
                Some(m) => {
                    let row = cmps[i].rows.iter().find(|x| &x.name == name);
                    // no change against a run of another kind or test: they do not share an axis
                    let like = axis_class(r) == axis_class(base);
                    let (class, change) = match row.and_then(|x| x.change_pct.map(|c| (x, c))) {
                        Some((x, c)) if i > 0 && like => {
                            let better = match x.better {
                                Better::Higher => c > 0.0,
                                Better::Lower => c < 0.0,
                            };
                            let class = if x.regression {
                                "n bad"
                            } else if x.worse {
                                "n worse"
                            } else if better && c.abs() > threshold_pct {
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

/// What may share an axis: runs of one kind and one test (a request/response test's throughput
/// is never drawn beside a stream test's, issue 33).
fn axis_class(r: &RunReport) -> String {
    format!("{} {}", r.kind.as_str(), r.test_name().unwrap_or_default())
}

/// With several runs: for each class of like runs ([`axis_class`]), one bar chart per rate
/// metric that two or more of them have, one bar per run that has it.
fn side_by_side(s: &mut String, runs: &[RunReport]) {
    let mut classes: Vec<String> = Vec::new();
    for r in runs {
        if !classes.contains(&axis_class(r)) {
            classes.push(axis_class(r));
        }
    }
    let mut charts: Vec<(String, &MetricId, Vec<&RunReport>)> = Vec::new();
    for class in &classes {
        let like: Vec<&RunReport> = runs.iter().filter(|r| axis_class(r) == *class).collect();
        for m in like.iter().flat_map(|r| &r.metrics) {
            let have = like.iter().filter(|r| r.find_metric(&m.name).is_some_and(|x| x.unit == "bit/s")).count();
            let new = !charts.iter().any(|(c, n, _)| c == class && **n == m.name);
            if m.unit == "bit/s" && have >= 2 && new && charts.len() < 4 {
                charts.push((class.clone(), &m.name, like.clone()));
            }
        }
    }
    if charts.is_empty() {
        return;
    }
    s.push_str(
        "<h2>Runs side by side</h2><div class=\"grid\" style=\"grid-template-columns:repeat(2,minmax(0,1fr))\">",
    );
    for (class, name, like) in charts {
        let title =
            if classes.len() > 1 { format!("{name} by run ({})", class.trim_end()) } else { format!("{name} by run") };
        let chart = crate::model::BarChart {
            title,
            unit: "bit/s".into(),
            bars: like
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

/// Writes [`report`] of `runs` to `path`, one self-contained file.
pub fn write(runs: &[RunReport], threshold_pct: f64, path: &std::path::Path) -> std::io::Result<()> {
    std::fs::write(path, report(runs, threshold_pct))
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
            // a lab's topology gets tables of its own instead of one nested value
            let lab = lab_of(r).map(lab_tables);
            let params: Vec<(String, Value)> =
                r.params.entries().into_iter().filter(|(k, _)| !(lab.is_some() && k.as_str() == "lab")).collect();
            if !params.is_empty() {
                let _ = write!(
                    s,
                    "<h3>{}</h3><table><tr><th>parameter</th><th>value</th></tr>",
                    esc(&format!("Parameters of {}", r.id))
                );
                for (k, v) in &params {
                    let class = if v.is_number() { " class=\"n\"" } else { "" };
                    let _ = write!(s, "<tr><td>{}</td><td{class}>{}</td></tr>", esc(k), cell(v));
                }
                s.push_str("</table>");
            }
            for t in lab.iter().flatten() {
                table_html(&mut s, t);
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
