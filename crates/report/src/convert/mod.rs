//! Conversions from the tools' typed result documents ([`linerate_model::doc`]: the `cp --json`
//! summary, the `linerate.bench/1` and `linerate.lab/1` documents, a mesh round) to a
//! [`RunReport`]: its metrics (named by [`linerate_model::metric::MetricId`]), charts and
//! tables are derived from the document, which the run keeps as its body. JSON is
//! first deserialized into those types, so a missing or renamed field is an error that names
//! it, not a figure silently left out; the run keeps the document whole as its [`Body`]. Documents
//! written before the typed documents are read by the explicit upgrades of [`legacy`].

use crate::format::si;
use crate::model::*;
use crate::ReportError;
use linerate_model::doc::bench::BENCH_SCHEMA;
use linerate_model::doc::cp::CpSummary;
use linerate_model::doc::lab::LAB_SCHEMA;
use linerate_model::metric::{Goal, MetricId, RunFigure, Side, SideFigure};
use serde::Deserialize;
use serde_json::Value;

mod bench;
pub(crate) mod lab;
pub mod legacy;
pub mod mesh;
mod parts;

use parts::parse;

pub use bench::from_bench;
pub use lab::from_lab;
pub use mesh::from_mesh;

/// Any document this crate knows: a stored or exported run ("linerate.run/1", read by
/// [`load`]), a bench or lab document, or a cp summary (which has no schema string: recognised
/// by reading as one).
pub fn from_json(v: Value) -> Result<RunReport, ReportError> {
    match v.get("schema").and_then(Value::as_str) {
        Some(SCHEMA) => load(v),
        Some(BENCH_SCHEMA) => from_bench_json(&v),
        Some(LAB_SCHEMA) => from_lab_json(&v),
        Some(other) => Err(ReportError::UnknownSchema(other.to_string())),
        None => match CpSummary::deserialize(&v) {
            Ok(c) => Ok(from_cp(&c)),
            Err(_) => Err(ReportError::UnknownSchema(String::new())),
        },
    }
}

/// The run made from `body`: its metrics, spreads, charts and tables are what a run with this
/// body has (the rest of it, the id, time, title and parameters, is the converter's and is
/// replaced by the stored run's own in [`load`]).
pub fn from_body(body: &Body) -> Result<RunReport, ReportError> {
    match body {
        Body::Bench(d) => from_bench(d),
        Body::Cp(c) => Ok(from_cp(c)),
        Body::Lab(d) => from_lab(d),
        Body::Mesh(m) => Ok(from_mesh(m)),
    }
}

/// A stored or exported run (`linerate.run/1`) read back. A run with a body this version reads
/// gets its metrics, spreads, charts and tables from it ([`from_body`]), whatever the document
/// carries beside it (a store keeps none, [`to_stored`]; an export or a run stored before
/// layout 3 carries the ones it was made with); its id, time, title, version, parameters and
/// hosts are the document's. A run without a body (stored before bodies were kept, or made
/// from a document older than the typed ones) keeps the figures it carries: they are all there
/// is.
pub fn load(v: Value) -> Result<RunReport, ReportError> {
    let mut r = RunReport::from_json(v)?;
    derive_parts(&mut r);
    Ok(r)
}

/// Replaces the metrics, spreads, charts and tables of `r` by the ones its body gives; whether
/// it has a body that gives them.
fn derive_parts(r: &mut RunReport) -> bool {
    match r.body.as_ref().and_then(|b| from_body(b).ok()) {
        Some(d) => {
            (r.metrics, r.spreads, r.charts, r.tables) = (d.metrics, d.spreads, d.charts, d.tables);
            true
        }
        None => false,
    }
}

/// What [`to_stored`] leaves out of a run that has a body: the parts [`load`] derives.
const DERIVED: [&str; 4] = ["metrics", "spreads", "charts", "tables"];

/// Run `r` as a store keeps it (`linerate.run/1` JSON): without its metrics, spreads, charts and
/// tables when it has a body they derive from ([`load`] makes them again), whole otherwise.
pub fn to_stored(r: &RunReport) -> Result<String, ReportError> {
    stored_json(r, r.body.as_ref().is_some_and(|b| from_body(b).is_ok()))
}

/// `r` as JSON, without its derived parts when `lean`.
fn stored_json(r: &RunReport, lean: bool) -> Result<String, ReportError> {
    let mut v = serde_json::to_value(r).map_err(|e| ReportError::Invalid(e.to_string()))?;
    if let Some(o) = v.as_object_mut().filter(|_| lean) {
        DERIVED.iter().for_each(|k| _ = o.remove(*k));
    }
    serde_json::to_string(&v).map_err(|e| ReportError::Invalid(e.to_string()))
}

/// A document a store holds (`linerate.run/1`) in the one stored shape ([`to_stored`]), with
/// the run's metrics derived from its body: what migrating a store rewrites it to. `None` for a
/// run without a body this version derives from (kept as it is), or a document it cannot read.
pub(crate) fn restored(doc: &str) -> Option<(String, Vec<Metric>)> {
    let mut r = RunReport::from_json(serde_json::from_str(doc).ok()?).ok()?;
    derive_parts(&mut r).then_some(())?;
    Some((stored_json(&r, true).ok()?, r.metrics))
}

/// The schema check every typed document gets.
fn check_schema(v: &Value, want: &str) -> Result<(), ReportError> {
    match v.get("schema").and_then(Value::as_str) {
        Some(s) if s == want => Ok(()),
        other => Err(ReportError::UnknownSchema(other.unwrap_or("").to_string())),
    }
}

/// `linerate cp --json` summary (JSON) → run.
pub fn from_cp_json(v: &Value) -> Result<RunReport, ReportError> {
    Ok(from_cp(&parse(v, "cp summary")?))
}

/// `linerate.bench/1` (JSON) → run. A document without `tool` is the contract sample that
/// preceded the typed documents, read by [`legacy::bench_sample`].
pub fn from_bench_json(v: &Value) -> Result<RunReport, ReportError> {
    check_schema(v, BENCH_SCHEMA)?;
    if v.get("tool").is_none() {
        return legacy::bench_sample(v);
    }
    from_bench(&parse(v, BENCH_SCHEMA)?)
}

/// `linerate.lab/1` (JSON) → run. A document without `tool` was written before the typed
/// documents and is read by [`legacy::lab`].
pub fn from_lab_json(v: &Value) -> Result<RunReport, ReportError> {
    check_schema(v, LAB_SCHEMA)?;
    if v.get("tool").is_none() {
        return legacy::lab(v);
    }
    from_lab(&parse(v, LAB_SCHEMA)?)
}

/// A `cp` summary → run: throughput, time, CPU seconds of both sides (and per gigabit moved),
/// peak memory, errors; bars of CPU time and of the throughput. An incomplete copy (entries
/// failed) keeps no rate: no `throughput`, `seconds` or per-gigabit figure, and its title says
/// so; a bytes-sent rate of a copy that did not land would be compared as a speed (issue 31).
/// A copy too small or too short for a rate ([`linerate_model::doc::cp::rate_bps`], judged
/// here from its counts, so older summaries that carry a number follow the same rule) keeps
/// no `throughput` and no per-gigabit figure either (issue 43: `149 bit/s` for 6 bytes).
pub fn from_cp(c: &CpSummary) -> RunReport {
    let moved = c.bytes.saturating_sub(c.resumed_bytes);
    let has_rate = linerate_model::doc::cp::rate_bps(moved, c.seconds).is_some();
    let bps = match c.gbit_per_s {
        Some(g) if c.complete && has_rate => g * 1e9,
        _ => 0.0,
    };
    let mut title = format!(
        "cp: {}, {} in {}",
        linerate_model::units::count(c.files, "file"),
        si(c.bytes as f64, "B"),
        si(c.seconds, "s")
    );
    if !c.complete {
        title += &format!(" — INCOMPLETE: {}", linerate_model::units::count(c.errors.local + c.errors.remote, "error"));
    }
    let mut r = RunReport::new(RunKind::Cp, title);
    r.params = RunParams {
        bytes: Some(c.bytes),
        files: Some(c.files),
        dirs: Some(c.dirs),
        links: Some(c.links),
        streams: Some(c.streams),
        cipher: Some(c.cipher.clone()),
        complete: Some(c.complete),
        ..RunParams::default()
    };
    r.body = Some(Body::Cp(Box::new(c.clone())));
    if c.complete {
        if bps > 0.0 {
            r.metric(MetricId::goal(Goal::Throughput), bps, "bit/s", Better::Higher);
        }
        r.metric(MetricId::run(RunFigure::Seconds), c.seconds, "s", Better::Lower);
    }
    let mut cpu_bars = Vec::new();
    for (side, cpu, rss) in
        [(Side::Client, c.cpu.client, c.peak_rss_bytes.client), (Side::Server, c.cpu.server, c.peak_rss_bytes.server)]
    {
        r.metric(MetricId::side(SideFigure::Cpu, side), cpu.total(), "s", Better::Lower);
        if bps > 0.0 {
            // CPU seconds per gigabit moved: the cost figure the studies compare
            let per_gbit = cpu.total() / (bps * c.seconds / 1e9);
            r.metric(MetricId::side(SideFigure::CpuPerGbit, side), per_gbit, "s/Gbit", Better::Lower);
        }
        cpu_bars.push(Bar { label: format!("{} user", side.name()), value: cpu.user_s });
        cpu_bars.push(Bar { label: format!("{} system", side.name()), value: cpu.system_s });
        r.metric(MetricId::side(SideFigure::PeakRss, side), rss as f64, "B", Better::Lower);
    }
    r.metric(MetricId::run(RunFigure::Errors), (c.errors.local + c.errors.remote) as f64, "", Better::Lower);
    r.charts.bars.push(BarChart { title: "CPU time".into(), unit: "s".into(), bars: cpu_bars, ceiling: None });
    if bps > 0.0 {
        r.charts.bars.push(BarChart {
            title: "Copy throughput".into(),
            unit: "bit/s".into(),
            bars: vec![Bar { label: "linerate cp".into(), value: bps }],
            ceiling: None,
        });
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(text: &str) -> Value {
        serde_json::from_str(text).unwrap_or_default()
    }

    #[test]
    fn a_cp_summary_is_recognised_by_reading_as_one() {
        let v = serde_json::to_value(linerate_model::doc::example::cp()).unwrap_or_default();
        let r = from_json(v).unwrap();
        assert_eq!(r.kind, RunKind::Cp);
        assert!(matches!(&r.body, Some(Body::Cp(c)) if **c == linerate_model::doc::example::cp()));
    }

    #[test]
    fn an_incomplete_copy_is_kept_without_a_rate() {
        let whole = from_cp(&linerate_model::doc::example::cp());
        assert!(whole.metrics.iter().any(|m| m.name == "throughput"), "a complete copy has its rate");
        let mut c = linerate_model::doc::example::cp();
        c.complete = false;
        (c.errors.local, c.errors.remote) = (0, 1);
        let r = from_cp(&c);
        for name in ["throughput", "seconds", "cpu.client.per_gbit", "cpu.server.per_gbit"] {
            assert!(r.metrics.iter().all(|m| m.name != name), "{name} kept for an incomplete copy");
        }
        assert!(r.metrics.iter().any(|m| m.name == "errors"));
        assert!(r.title.ends_with("— INCOMPLETE: 1 error"), "{}", r.title);
        assert!(r.charts.bars.iter().all(|b| b.title != "Copy throughput"));
    }

    #[test]
    fn a_copy_too_small_for_a_rate_is_kept_without_one() {
        // issue 43: a 6-byte copy in 0.32 s was listed at `149 bit/s`; an older summary carries
        // that number, a newer one `null`: neither becomes a rate
        let mut c = linerate_model::doc::example::cp();
        (c.bytes, c.resumed_bytes, c.seconds, c.gbit_per_s) = (6, 0, 0.322, Some(1.49e-7));
        for gbit in [Some(1.49e-7), None] {
            c.gbit_per_s = gbit;
            let r = from_cp(&c);
            for name in ["throughput", "cpu.client.per_gbit", "cpu.server.per_gbit"] {
                assert!(r.metrics.iter().all(|m| m.name != name), "{name} kept for 6 bytes ({gbit:?})");
            }
            assert!(r.metrics.iter().any(|m| m.name == "seconds"), "its time is kept");
            assert!(r.charts.bars.iter().all(|b| b.title != "Copy throughput"));
            assert_eq!(r.headline().map(|m| m.name.to_string()).as_deref(), Some("seconds"));
        }
        // a whole-sized copy whose bytes a resume kept moved 6: no rate either
        let mut c = linerate_model::doc::example::cp();
        c.resumed_bytes = c.bytes - 6;
        assert!(from_cp(&c).metrics.iter().all(|m| m.name != "throughput"));
    }

    #[test]
    fn unknown_documents_are_refused_with_a_typed_error() {
        assert!(
            matches!(from_json(json(r#"{"schema": "linerate.bench/9"}"#)), Err(ReportError::UnknownSchema(s)) if s == "linerate.bench/9")
        );
        assert!(matches!(from_json(json(r#"{"hello": 1}"#)), Err(ReportError::UnknownSchema(_))));
        assert!(matches!(
            from_bench_json(&json(r#"{"schema": "linerate.lab/1"}"#)),
            Err(ReportError::UnknownSchema(_))
        ));
        assert!(matches!(from_cp_json(&json("[1, 2]")), Err(ReportError::Invalid(_))));
    }

    #[test]
    fn a_typed_document_missing_a_field_is_refused_naming_it() {
        let mut v = serde_json::to_value(linerate_model::doc::example::cp()).unwrap_or_default();
        v.as_object_mut().map(|o| o.remove("seconds"));
        let e = from_cp_json(&v).unwrap_err();
        assert!(matches!(&e, ReportError::Invalid(m) if m.contains("seconds")), "{e}");
        let mut v = serde_json::to_value(linerate_model::doc::example::lab()).unwrap_or_default();
        v["runs"][1].as_object_mut().map(|o| o.remove("rate_bps"));
        let e = from_lab_json(&v).unwrap_err();
        assert!(matches!(&e, ReportError::Invalid(m) if m.contains("rate_bps")), "{e}");
    }
}
