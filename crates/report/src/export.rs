//! Exporters: the JSON document itself, a long-format CSV (one figure per row, for
//! spreadsheets and scripts) and Markdown (for tickets and pull requests).

use crate::format::si;
use crate::model::{Better, Cell, RunReport, Table};
use linerate_model::units::significant;
use serde_json::Value;
use std::fmt::Write;

/// An export format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The "linerate.run/1" document, pretty-printed.
    Json,
    /// `section,chart,series,x,value,unit` rows.
    Csv,
    /// Markdown tables.
    Md,
}

/// Renders `r` in `format`.
pub fn export(r: &RunReport, format: Format) -> String {
    match format {
        Format::Json => to_json(r),
        Format::Csv => to_csv(r),
        Format::Md => to_markdown(r),
    }
}

/// The document as pretty JSON with a final newline.
pub fn to_json(r: &RunReport) -> String {
    let mut s = serde_json::to_string_pretty(r).unwrap_or_default();
    s.push('\n');
    s
}

/// A number rounded to 12 significant digits (so 15.299999999999999 prints as 15.3).
fn num(x: f64) -> String {
    if x.is_finite() {
        let rounded: f64 = format!("{x:.11e}").parse().unwrap_or(x);
        format!("{rounded}")
    } else {
        String::new()
    }
}

/// A parameter's value as text: a fractional parameter (seconds, a time scale) as [`num`] writes
/// it, so a whole one reads as it was given.
fn cell(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Number(n) if n.is_f64() => n.as_f64().map_or_else(String::new, num),
        Value::Number(n) => n.to_string(),
        other => other.to_string(),
    }
}

/// A table cell as text: numbers as JSON writes them, nothing for null.
fn table_cell(c: &Cell) -> String {
    match c {
        Cell::Null => String::new(),
        Cell::Text(s) => s.clone(),
        Cell::Bool(b) => b.to_string(),
        Cell::Int(i) => i.to_string(),
        Cell::Number(x) => serde_json::Number::from_f64(*x).map_or_else(String::new, |n| n.to_string()),
    }
}

/// Long-format CSV: every metric, bar, point, flow, sample, percentile and table cell is one row
/// `section,chart,series,x,value,unit`, after a header and the run's `id`, `kind`, `created`
/// and `title` rows (section `run`) and params (section `param`).
pub fn to_csv(r: &RunReport) -> String {
    // RFC 4180 through the `csv` crate: quoted where a field needs it, "\n" after each row.
    let mut w = csv::WriterBuilder::new().terminator(csv::Terminator::Any(b'\n')).from_writer(Vec::new());
    let mut row = |cols: [&str; 6]| {
        // Writing to memory fails only on a bug; the rows written before it are kept.
        let _ = w.write_record(cols);
    };
    row(["section", "chart", "series", "x", "value", "unit"]);
    row(["run", "", "id", "", &r.id, ""]);
    row(["run", "", "kind", "", r.kind.as_str(), ""]);
    row(["run", "", "created", "", &r.created, ""]);
    row(["run", "", "title", "", &r.title, ""]);
    row(["run", "", "tool_version", "", &r.tool_version, ""]);
    for (k, v) in &r.params.entries() {
        row(["param", "", k, "", &cell(v), ""]);
    }
    for m in &r.metrics {
        row(["metric", "", &m.name.to_string(), "", &num(m.value), &m.unit]);
    }
    for c in &r.charts.bars {
        for b in &c.bars {
            row(["bar", &c.title, &b.label, "", &num(b.value), &c.unit]);
        }
        if let Some(l) = &c.ceiling {
            row(["ceiling", &c.title, &l.label, "", &num(l.value), &c.unit]);
        }
    }
    for c in &r.charts.xy {
        for l in &c.lines {
            for p in &l.points {
                row(["xy", &c.title, &l.name, &num(p[0]), &num(p[1]), &c.y.unit]);
            }
        }
    }
    for c in &r.charts.flows {
        for b in &c.flows {
            row(["flow", &c.title, &b.label, "", &num(b.value), &c.unit]);
        }
        if let Some(j) = c.jain_index() {
            row(["jain", &c.title, "", "", &num(j), ""]);
        }
    }
    for c in &r.charts.series {
        for l in &c.lines {
            for p in &l.points {
                row(["series", &c.title, &l.name, &num(p[0]), &num(p[1]), &c.unit]);
            }
        }
        for g in &c.guarantees {
            row(["guarantee", &c.title, &g.label, "", &num(g.value), &c.unit]);
        }
    }
    for c in &r.charts.latency {
        for l in &c.lines {
            for p in &l.points {
                row(["latency", &c.title, &l.name, &num(p[0]), &num(p[1]), "us"]);
            }
        }
    }
    for t in &r.tables {
        for (i, cells) in t.rows.iter().enumerate() {
            for (col, v) in t.columns.iter().zip(cells) {
                row(["table", &t.title, col, &i.to_string(), &table_cell(v), ""]);
            }
        }
    }
    String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
}

/// Escapes text for a Markdown table cell.
fn md(s: &str) -> String {
    s.replace('\\', "\\\\").replace('|', "\\|").replace(['\n', '\r'], " ")
}

fn md_cell(v: &Cell, column: &str) -> String {
    match v.as_f64() {
        Some(x) => {
            // a unit in the heading, "(bit/s)", means SI formatting helps reading
            match column.rsplit_once('(').map(|(_, u)| u.trim_end_matches(')')) {
                Some(u) if u == "bit/s" || u == "B" || u == "1/s" => si(x, u),
                _ if x.fract() == 0.0 => format!("{x}"),
                _ => significant(x, 4),
            }
        }
        None => md(&table_cell(v)),
    }
}

/// A value in one Markdown cell: an object as `key: value; …` (a nested one in parentheses), a
/// list joined by commas.
fn md_value(v: &Value, nested: bool) -> String {
    match v {
        Value::Object(o) => {
            let items: Vec<String> = o.iter().map(|(k, x)| format!("{k}: {}", md_value(x, true))).collect();
            if nested {
                format!("({})", items.join(", "))
            } else {
                items.join("; ")
            }
        }
        Value::Array(a) => a.iter().map(|x| md_value(x, true)).collect::<Vec<_>>().join(", "),
        other => cell(other),
    }
}

fn md_table(s: &mut String, t: &Table) {
    let _ = writeln!(s, "\n## {}\n", md(&t.title));
    let heads: Vec<String> = t.columns.iter().map(|c| md(c)).collect();
    let _ = writeln!(s, "| {} |", heads.join(" | "));
    let _ = writeln!(s, "|{}", "---|".repeat(t.columns.len()));
    for cells in &t.rows {
        let row: Vec<String> =
            t.columns.iter().enumerate().map(|(i, c)| cells.get(i).map_or(String::new(), |v| md_cell(v, c))).collect();
        let _ = writeln!(s, "| {} |", row.join(" | "));
    }
}

/// Markdown: title, run facts, parameters (a lab's topology as tables of its own), metrics, bar
/// and fairness figures, tables.
pub fn to_markdown(r: &RunReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# {}\n", md(&r.title));
    let _ = writeln!(s, "- id: `{}`", r.id);
    let _ = writeln!(s, "- kind: {}", r.kind.as_str());
    let _ = writeln!(s, "- created: {}", r.created);
    let _ = writeln!(s, "- linerate: {}", md(&r.tool_version));
    let lab = crate::html::lab_of(r).map(crate::html::lab_tables);
    if !r.params.is_empty() {
        let _ = writeln!(s, "\n## Parameters\n\n| parameter | value |\n|---|---|");
        for (k, v) in r.params.entries().iter().filter(|(k, _)| !(lab.is_some() && k.as_str() == "lab")) {
            let _ = writeln!(s, "| {} | {} |", md(k), md(&md_value(v, false)));
        }
    }
    for t in lab.iter().flatten() {
        md_table(&mut s, t);
    }
    if !r.metrics.is_empty() {
        let _ = writeln!(s, "\n## Metrics\n\n| metric | value | better |\n|---|---:|---|");
        for m in &r.metrics {
            let better = if m.better == Better::Higher { "higher" } else { "lower" };
            let _ = writeln!(s, "| {} | {} | {} |", md(&m.name.to_string()), si(m.value, &m.unit), better);
        }
    }
    for c in &r.charts.bars {
        let _ = writeln!(s, "\n## {}\n\n| | {} |\n|---|---:|", md(&c.title), md(&c.unit));
        for b in &c.bars {
            let _ = writeln!(s, "| {} | {} |", md(&b.label), si(b.value, &c.unit));
        }
        if let Some(l) = &c.ceiling {
            let _ = writeln!(s, "| *{}* | {} |", md(&l.label), si(l.value, &c.unit));
        }
    }
    for c in &r.charts.flows {
        let jain = c.jain_index().map_or_else(|| "–".into(), |j| format!("{j:.3}"));
        let _ = writeln!(s, "\n## {} (Jain's index {jain})\n\n| flow | rate |\n|---|---:|", md(&c.title));
        for b in &c.flows {
            let _ = writeln!(s, "| {} | {} |", md(&b.label), si(b.value, &c.unit));
        }
    }
    for c in &r.charts.latency {
        let _ = writeln!(s, "\n## {}\n", md(&c.title));
        for l in &c.lines {
            let heads: Vec<String> = l.points.iter().map(|p| format!("p{}", significant(p[0], 6))).collect();
            let _ = writeln!(s, "| {} | {} |", md(&l.name), heads.join(" | "));
            let _ = writeln!(s, "|---|{}", "---:|".repeat(l.points.len()));
            let vals: Vec<String> = l.points.iter().map(|p| si(p[1], "us")).collect();
            let _ = writeln!(s, "| latency | {} |", vals.join(" | "));
        }
    }
    for t in &r.tables {
        md_table(&mut s, t);
    }
    s
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn csv_quotes_commas_quotes_and_newlines_only() {
        let doc = include_str!("../tests/fixtures/cp.json");
        let mut r = crate::from_json(serde_json::from_str(doc).unwrap()).unwrap();
        r.title = "say \"hi\", twice\nplease".into();
        r.id = "plain".into();
        let text = to_csv(&r);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "section,chart,series,x,value,unit");
        assert_eq!(lines[1], "run,,id,,plain,");
        assert!(text.contains("run,,title,,\"say \"\"hi\"\", twice\nplease\",\n"), "{text}");
    }

    #[test]
    fn markdown_escapes_pipes_and_newlines() {
        assert_eq!(md("a|b\nc"), "a\\|b c");
    }
}
