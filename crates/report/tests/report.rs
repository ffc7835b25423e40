//! linerate-report end to end: converters on realistic documents, the JSON Schema, exporter and
//! SVG snapshots, store migrations, and the HTML report rendered by headless Chromium.
#![allow(clippy::unwrap_used)] // tests fail loudly by design

use linerate_report::export::{self, Format};
use linerate_report::store::STORE_VERSION;
use linerate_report::svg::{self, ChartKind};
use linerate_report::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Every sample document: cp, bench (contract sample, real sweep, real tcp-rr), lab (an older
/// sketch of the shape, and the runner's shape).
const FIXTURES: [&str; 7] = [
    "cp.json",
    "bench.json",
    "bench-real-sweep.json",
    "bench-real-rr.json",
    "lab.json",
    "lab-runner.json",
    "lab-real.json",
];

fn fixture(name: &str) -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

/// A converted fixture with the id and time pinned, so snapshots are stable.
fn pinned(name: &str) -> RunReport {
    let mut r = from_json(fixture(name)).unwrap();
    r.id = format!("20261122-054716-{}", &name[..name.len().min(6)].replace('.', "0"));
    r.created = "2026-11-22T05:47:16Z".into();
    r.tool_version = "0.1.0".into();
    r
}

fn metric(r: &RunReport, name: &str) -> f64 {
    r.find_metric(name).unwrap_or_else(|| panic!("no metric {name} in {:?}", r.metrics)).value
}

#[test]
fn cp_summary_converts_to_throughput_and_cpu() {
    let r = pinned("cp.json");
    assert_eq!(r.kind, RunKind::Cp);
    assert!((metric(&r, "throughput") - 8.38e9).abs() < 1.0);
    assert_eq!(metric(&r, "seconds"), 2.05);
    assert!((metric(&r, "cpu.client") - 2.03).abs() < 1e-9);
    assert!((metric(&r, "cpu.server") - 2.62).abs() < 1e-9);
    assert_eq!(metric(&r, "errors"), 0.0);
    assert_eq!(r.find_metric("cpu.client").unwrap().better, Better::Lower);
    assert_eq!(r.params.streams, Some(4));
    assert_eq!(r.charts.bars[0].bars.len(), 4);
}

#[test]
fn bench_document_converts_sweep_intervals_flows_and_latency() {
    let r = pinned("bench.json");
    assert_eq!(r.kind, RunKind::Bench);
    // named by its key parameters (issue 33)
    let named =
        "(direction forward, connections 4, duration 10 s, message size 131072 B, points 5, sweep connections 1–64)";
    assert_eq!(r.title, format!("bench tcp-stream to 198.18.0.2:7878 {named}"));
    assert_eq!(metric(&r, "throughput"), 9.32e9);
    assert_eq!(metric(&r, "latency.p99"), 142.0);
    assert!((metric(&r, "cpu.local") - 15.3).abs() < 1e-9);
    assert_eq!(r.hosts.remote.as_ref().map(|h| h.machine.hostname.as_str()), Some("server-b"));
    // sweep → throughput and CPU against connections, plus the table
    let thr = &r.charts.xy[0];
    assert_eq!(thr.x.label, "connections");
    assert_eq!(thr.lines[0].points.len(), 5);
    assert_eq!(thr.lines[0].points[4], [64.0, 9.28e9]);
    let cpu = r.charts.xy.iter().find(|c| c.y.unit == "%").unwrap();
    assert_eq!(cpu.lines.len(), 2);
    assert_eq!(r.tables[0].rows.len(), 5);
    assert_eq!(r.params.sweep.as_deref(), Some("connections"));
    // intervals, connections, latency
    assert_eq!(r.charts.series[0].lines[0].points.len(), 10);
    assert_eq!(r.charts.series[0].lines[0].points[0], [1.0, 9.18e9], "at the end of the first interval");
    assert_eq!(r.charts.flows[0].flows.len(), 4);
    assert_eq!(r.charts.flows[0].jain, Some(0.9986));
    let lat = &r.charts.latency[0].lines[0].points;
    assert_eq!(lat.iter().map(|p| p[0]).collect::<Vec<_>>(), vec![50.0, 90.0, 99.0, 99.9]);
}

#[test]
fn lab_document_converts_tools_against_the_iperf3_ceiling() {
    let r = pinned("lab.json");
    assert_eq!(r.kind, RunKind::Lab);
    assert_eq!(r.title, "lab tools-vs-ceiling");
    let bars = &r.charts.bars[0];
    let labels: Vec<&str> = bars.bars.iter().map(|b| b.label.as_str()).collect();
    assert_eq!(labels, ["iperf3", "linerate", "scp", "rsync"]);
    assert_eq!(bars.ceiling.as_ref().unwrap().value, 9.41e9); // median of 3 repeats
    assert_eq!(metric(&r, "rate.linerate"), 8.99e9);
    assert_eq!(metric(&r, "rate.rsync"), (0.55e9 + 0.54e9) / 2.0); // the repeat without a rate is left out
    assert!((metric(&r, "ratio.scp") - 0.50e9 / 9.41e9).abs() < 1e-12);
    assert!((metric(&r, "cpu.iperf3") - 18.0).abs() < 1e-9);
    assert!((metric(&r, "cpu.linerate") - 33.0).abs() < 1e-9);
    assert_eq!(metric(&r, "jain.linerate"), 0.998);
    // per-guest series with guarantees, plus the raw bench run's intervals
    let s = &r.charts.series[0];
    assert_eq!(s.lines.len(), 3, "{:?}", s.lines.iter().map(|l| &l.name).collect::<Vec<_>>());
    assert_eq!(s.guarantees.len(), 3);
    assert_eq!(r.charts.flows.len(), 1);
    assert_eq!(r.charts.latency[0].lines.len(), 1);
    assert_eq!(r.tables[0].rows.len(), 4);
    assert_eq!(r.tables[1].rows.len(), 12);
}

#[test]
fn real_bench_sweep_gives_one_line_per_message_size() {
    // `linerate bench 127.0.0.1:PORT -t 1 --sweep conns=1,2,4 --sweep msg=16K,128K --json`
    let r = pinned("bench-real-sweep.json");
    assert!(r.title.starts_with("bench tcp-stream to 127.0.0.1:39779 (direction send, "), "{}", r.title);
    assert_eq!(r.params.sweep.as_deref(), Some("connections"));
    let thr = &r.charts.xy[0];
    assert_eq!(thr.x.label, "connections");
    let names: Vec<&str> = thr.lines.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["msg_size=16384", "msg_size=131072"]);
    assert!(thr.lines.iter().all(|l| l.points.iter().map(|p| p[0]).collect::<Vec<_>>() == [1.0, 2.0, 4.0]));
    let cpu = r.charts.xy.iter().find(|c| c.y.unit == "%").unwrap();
    assert_eq!(cpu.lines.len(), 4, "local and remote CPU per message size");
    assert_eq!(r.tables[0].columns[..2], ["connections".to_string(), "msg size (B)".to_string()]);
    assert_eq!(r.tables[0].rows.len(), 6);
    // the document's own start time and version, not the import's
    let doc = fixture("bench-real-sweep.json");
    let fresh = from_json(doc.clone()).unwrap();
    assert!(fresh.created.starts_with("2026-11-22T"), "{}", fresh.created);
    assert!(r.find_metric("service_demand.local").is_some() && r.find_metric("latency.count").is_none());
}

#[test]
fn real_bench_rr_plots_the_hdr_curve_without_the_100th_percentile() {
    let r = pinned("bench-real-rr.json");
    assert!(metric(&r, "transactions") > 1000.0);
    let line = &r.charts.latency[0].lines[0];
    assert_eq!(line.points.len(), 13, "{:?}", line.points);
    assert_eq!(line.points.last().unwrap()[0], 99.999);
    assert_eq!(metric(&r, "latency.p999"), 104.959);
}

#[test]
fn lab_runner_document_gives_groups_sweeps_scaling_and_guarantees() {
    let r = pinned("lab-runner.json");
    assert_eq!(r.title, "lab consolidation-qos");
    assert_eq!(r.created, "2026-11-22T05:47:16Z");
    // the mixed group: its total, fairness between its members, a time series with two guarantees
    assert!((metric(&r, "rate.mix") - (1.45e9 + 0.5e9 + 0.49e9 + 0.06e9) * 1.005).abs() < 1e3);
    let mix = r.charts.series.iter().find(|c| c.title.ends_with("mix")).unwrap();
    assert_eq!(mix.lines.len(), 4);
    assert_eq!(
        mix.guarantees.iter().map(|g| g.label.as_str()).collect::<Vec<_>>(),
        ["mix@g1 guarantee", "mix@g2 guarantee"]
    );
    let fair = r.charts.flows.iter().find(|c| c.title.ends_with("mix")).unwrap();
    assert_eq!(fair.flows.len(), 4);
    assert!(fair.jain_index().unwrap() < 0.7);
    // the sweep: throughput and fairness against guests; the failed run left out
    let thr = r.charts.xy.iter().find(|c| c.title == "Throughput against guests").unwrap();
    assert_eq!(thr.lines[0].points.iter().map(|p| p[0]).collect::<Vec<_>>(), vec![1.0, 2.0, 4.0, 8.0]);
    assert!(r.charts.flows.iter().any(|c| c.title.ends_with("tx/8") && c.flows.len() == 7));
    // tx-8 … tx-512: throughput and CPU against connections, from the raw bench documents
    let scale = r.charts.xy.iter().find(|c| c.title == "Throughput against connections").unwrap();
    assert_eq!(scale.lines[0].points.len(), 4);
    let cpu = r.charts.xy.iter().find(|c| c.title == "CPU against connections").unwrap();
    assert_eq!(cpu.lines.len(), 2);
    assert_eq!(r.charts.latency[0].lines.len(), 4);
    let bars: Vec<&str> = r.charts.bars[0].bars.iter().map(|b| b.label.as_str()).collect();
    assert_eq!(bars, ["mix", "tx-8", "tx-32", "tx-128", "tx-512"]);
    assert!(r.charts.bars[0].ceiling.is_none(), "no group of iperf3 runs alone");
    let table = r.tables.iter().find(|t| t.title.starts_with("Runs")).unwrap();
    assert_eq!(table.rows.len(), 1 + 4 + 4);
}

#[test]
fn real_lab_run_gives_tools_against_the_ceiling_fairness_and_guarantees() {
    // `linerate lab run` of a 2-guest scenario: 1 Gbit/s htb uplink, g1 guaranteed 400 Mbit/s
    let r = pinned("lab-real.json");
    assert_eq!(r.title, "lab report-fixture");
    let bars = &r.charts.bars[0];
    assert_eq!(bars.bars.iter().map(|b| b.label.as_str()).collect::<Vec<_>>(), ["iperf3-1", "bench-1", "mix"]);
    let ceiling = bars.ceiling.as_ref().unwrap();
    assert_eq!(ceiling.label, "iperf3-1 ceiling");
    assert!((0.9e9..1.0e9).contains(&ceiling.value), "{ceiling:?}");
    assert!((0.9..1.1).contains(&metric(&r, "ratio.bench-1")));
    let mix = r.charts.series.iter().find(|c| c.title.ends_with("mix")).unwrap();
    assert_eq!(mix.lines.len(), 2);
    assert_eq!(mix.guarantees, vec![RefLine { label: "mix@g1 guarantee".into(), value: 4e8 }]);
    let thr = r.charts.xy.iter().find(|c| c.title == "Throughput against guests").unwrap();
    assert_eq!(thr.lines[0].points.len(), 2);
    assert_eq!(r.charts.flows.len(), 2, "mix and tx/2");
    assert!(metric(&r, "jain.mix") > 0.5);
}

/// Producer → JSON → report, for every figure a typed document carries. How this guards the
/// boundary between the tools and the report: the producers (`cli/src/cp.rs`,
/// `cli/src/bench.rs`, `lab/src/runner.rs`) fill these same `linerate_model::doc` structs, so
/// * renaming a field in Rust breaks the build of the producer, the converter and this test;
/// * renaming it in JSON (`#[serde(rename)]`) changes the documents pinned in
///   `crates/model/tests/golden/` and stops the documents earlier versions wrote
///   (`bench-real-*.json`, `lab-real.json`) from reading, which fails
///   `documents_earlier_versions_wrote_read_strictly` below;
/// * a converter that stops reading a field loses a metric or chart asserted here.
#[test]
fn every_figure_of_the_typed_documents_reaches_the_report() {
    use linerate_model::doc::example;
    let cp = example::cp();
    let r = from_json(serde_json::to_value(&cp).unwrap()).unwrap();
    assert_eq!(metric(&r, "throughput"), cp.gbit_per_s.unwrap() * 1e9);
    assert_eq!(metric(&r, "seconds"), cp.seconds);
    assert_eq!(metric(&r, "cpu.client"), cp.cpu.client.total());
    assert_eq!(metric(&r, "cpu.server"), cp.cpu.server.total());
    assert_eq!(metric(&r, "peak_rss.client"), cp.peak_rss_bytes.client as f64);
    assert_eq!(metric(&r, "peak_rss.server"), cp.peak_rss_bytes.server as f64);
    assert_eq!(metric(&r, "errors"), (cp.errors.local + cp.errors.remote) as f64);
    assert_eq!((r.params.files, r.params.streams), (Some(cp.files), Some(4)));
    assert_eq!(r.params.cipher.as_deref(), Some(cp.cipher.as_str()));

    let bench = example::bench();
    let r = from_json(serde_json::to_value(&bench).unwrap()).unwrap();
    let s = bench.summary.as_ref().unwrap();
    let test = bench.test.as_ref().unwrap();
    assert_eq!(r.title, format!("bench {} to {} ({})", test.test, test.server, linerate_report::compare::label(&r)));
    assert_eq!(r.created, "2026-11-22T05:47:16Z");
    assert_eq!(r.tool_version, bench.tool.version);
    assert_eq!(r.params.msg_size, Some(test.msg_size));
    assert_eq!(r.hosts.remote, bench.hosts.remote);
    for (name, want) in [
        ("throughput", s.throughput_bps),
        ("transactions", s.transactions_per_s.unwrap()),
        ("jain", s.jain.unwrap()),
        ("loss", s.loss_pct.unwrap()),
        ("packets", s.packets_per_s.unwrap()),
        ("jitter", s.jitter_us.unwrap()),
        ("rtt", s.rtt_us.unwrap()),
        ("retransmits", s.retransmits as f64),
        ("service_demand.local", s.service_demand_us_per_kb.local),
        ("service_demand.remote", s.service_demand_us_per_kb.remote),
        ("service_demand_tran.local", s.service_demand_us_per_tran.unwrap().local),
        ("service_demand_tran.remote", s.service_demand_us_per_tran.unwrap().remote),
        ("cpu.local", s.cpu.local.busy() * 100.0),
        ("cpu.remote", s.cpu.remote.busy() * 100.0),
    ] {
        assert_eq!(metric(&r, name), want, "{name}");
    }
    for (k, x) in s.latency_us.as_ref().unwrap().figures() {
        assert_eq!(metric(&r, &format!("latency.{}", k.name())), x);
    }
    let iv = bench.intervals.as_ref().unwrap();
    assert_eq!(r.charts.series[0].lines[0].points.len(), iv.len());
    assert_eq!(r.charts.flows[0].flows.len(), bench.connections.as_ref().unwrap().len());
    assert_eq!(r.charts.latency[0].lines[0].points.len(), 5, "the curve without its 100th percentile");
    // the sweep: connections on x (the first swept), one line per message size
    assert_eq!(r.params.sweep.as_deref(), Some("connections"));
    let thr = &r.charts.xy[0];
    assert_eq!(thr.lines.iter().map(|l| l.name.as_str()).collect::<Vec<_>>(), ["msg_size=1024", "msg_size=65536"]);
    assert_eq!(r.tables[0].rows.len(), bench.points.len());

    let lab = example::lab();
    let r = from_json(serde_json::to_value(&lab).unwrap()).unwrap();
    assert!(r.title.starts_with("lab example"));
    assert_eq!(r.tool_version, lab.tool.version);
    assert_eq!(r.params.run_id.as_deref(), Some("lr4242"));
    assert_eq!(r.hosts.machine.as_ref().map(|m| m.cpus), Some(2));
    assert_eq!(metric(&r, "rate.bench-2"), 9.2e8);
    assert_eq!(metric(&r, "jain.bench-2"), 0.99);
    assert!((metric(&r, "cpu.bench-2") - 17.0).abs() < 1e-9);
    assert!((metric(&r, "ratio.cp-3") - 8.1e8 / 9.4e8).abs() < 1e-12);
    assert_eq!(r.charts.bars[0].ceiling.as_ref().unwrap().label, "iperf3-1 ceiling");
    let mix = r.charts.series.iter().find(|c| c.title.ends_with("mix")).unwrap();
    assert_eq!(mix.guarantees.len(), 2);
    assert!(r.charts.xy.iter().any(|c| c.title == "Throughput against guests"));
    assert_eq!(r.charts.latency[0].lines[0].name, "bench-2", "latency from the bench run's own document");
    let every = r.tables.iter().find(|t| t.title == "Every measurement").unwrap();
    assert_eq!(every.rows.len(), lab.runs.len());
    let col = |name: &str| every.columns.iter().position(|c| c == name).unwrap();
    assert_eq!(every.rows.last().unwrap()[col("error")], "timed out after 60 s");
    assert_eq!(every.rows[0][col("congestion")], "cubic");
    assert!(r.title.ends_with("INCOMPLETE: 1 of 9 runs failed, 1 of 7 groups incomplete"), "{}", r.title);
    assert_eq!(metric(&r, "failed.scp-4"), 1.0);
}

/// The bench documents `linerate bench` wrote before the typed documents read into them
/// strictly: same field names, same shapes.
#[test]
fn documents_earlier_versions_wrote_read_strictly() {
    use linerate_model::doc::bench::BenchDocument;
    for name in ["bench-real-sweep.json", "bench-real-rr.json"] {
        let doc: BenchDocument = serde_json::from_value(fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(doc.sweep.is_none() && !doc.points.is_empty(), "{name}");
    }
    let lab = fixture("lab-real.json");
    for run in lab["runs"].as_array().unwrap() {
        if run["tool"] == "bench" {
            let _: BenchDocument = serde_json::from_value(run["raw"].clone()).unwrap();
        }
    }
}

#[test]
fn exported_documents_validate_against_the_json_schema() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/schema/run-v1.schema.json");
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    let v = jsonschema::validator_for(&schema).unwrap();
    for name in FIXTURES {
        let r = from_json(fixture(name)).unwrap();
        let doc: Value = serde_json::from_str(&export::to_json(&r)).unwrap();
        let errors: Vec<String> = v.iter_errors(&doc).map(|e| format!("{e} at {}", e.instance_path())).collect();
        assert!(errors.is_empty(), "{name}: {errors:#?}");
        // and it reads back unchanged
        assert_eq!(RunReport::from_json(doc).unwrap(), r);
    }
    // the schema admits fields added later in version 1, so check it names every field we write
    let text = serde_json::to_string(&schema).unwrap();
    for name in FIXTURES {
        let doc = serde_json::to_value(from_json(fixture(name)).unwrap()).unwrap();
        for key in keys(&doc) {
            assert!(text.contains(&format!("\"{key}\":{{")), "{name}: field '{key}' is not in the JSON Schema");
        }
    }
    // an unknown field is ignored by this reader too
    let mut doc: Value = serde_json::to_value(pinned("bench.json")).unwrap();
    doc["added_in_a_later_release"] = 1.into();
    doc["metrics"][0]["stddev"] = 0.1.into();
    assert!(v.is_valid(&doc));
    assert_eq!(RunReport::from_json(doc).unwrap(), pinned("bench.json"));
    // the schema is not vacuous: a wrong kind, a missing field and a bad metric are refused
    let mut doc: Value = serde_json::to_value(pinned("bench.json")).unwrap();
    doc["kind"] = "iperf".into();
    assert!(!v.is_valid(&doc));
    let mut doc: Value = serde_json::to_value(pinned("bench.json")).unwrap();
    doc.as_object_mut().unwrap().remove("created");
    assert!(!v.is_valid(&doc));
    let mut doc: Value = serde_json::to_value(pinned("bench.json")).unwrap();
    doc["metrics"][0]["better"] = "more".into();
    assert!(!v.is_valid(&doc));
}

/// Every object key in a document, except inside the free-form `params` and `hosts`.
fn keys(v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    match v {
        Value::Object(o) => {
            for (k, x) in o {
                out.push(k.clone());
                match (k.as_str(), x) {
                    // free of the run's schema: the parameters, the hosts, and the documents kept
                    // whole (their own schemas); the body's kind is the run's
                    ("params" | "hosts", _) => {}
                    ("body", Value::Object(b)) => out.extend(b.keys().cloned()),
                    _ => out.extend(keys(x)),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| out.extend(keys(x))),
        _ => {}
    }
    out.sort();
    out.dedup();
    out
}

#[test]
fn export_snapshots() {
    let bench = pinned("bench.json");
    insta::assert_snapshot!("bench_csv", export::export(&bench, Format::Csv));
    insta::assert_snapshot!("bench_md", export::export(&bench, Format::Md));
    insta::assert_snapshot!("bench_json", export::export(&bench, Format::Json));
    let lab = pinned("lab.json");
    insta::assert_snapshot!("lab_md", export::export(&lab, Format::Md));
    insta::assert_snapshot!("cp_csv", export::export(&pinned("cp.json"), Format::Csv));
}

#[test]
fn svg_snapshots() {
    let lab = pinned("lab.json");
    insta::assert_snapshot!("lab_bars_svg", svg::render(&lab, ChartKind::Bars, 0).unwrap());
    let bench = pinned("bench.json");
    insta::assert_snapshot!("bench_latency_svg", svg::render(&bench, ChartKind::Latency, 0).unwrap());
    assert!(matches!(svg::render(&bench, ChartKind::Bars, 0), Err(ReportError::NoChart { have: 0, .. })));
}

#[test]
fn every_chart_is_well_formed_and_labelled() {
    for name in FIXTURES {
        let r = pinned(name);
        for (kind, s) in svg::all(&r) {
            assert!(s.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""), "{name} {kind:?}");
            assert!(s.trim_end().ends_with("</svg>"), "{name} {kind:?}");
            assert_eq!(s.matches("<svg").count(), s.matches("</svg>").count());
            assert!(!s.contains("NaN") && !s.contains("inf"), "{name} {kind:?}");
            if matches!(kind, ChartKind::Xy | ChartKind::Series | ChartKind::Latency) {
                assert!(s.contains("<path class=\"line\""), "{name} {kind:?} has no line");
            }
        }
    }
    let bench = pinned("bench.json");
    let thr = svg::render(&bench, ChartKind::Xy, 0).unwrap();
    assert!(thr.contains("throughput (Gbit/s)") && thr.contains(">connections<"), "{thr}");
    let flows = svg::render(&bench, ChartKind::Flows, 0).unwrap();
    assert!(flows.contains("Jain&#39;s index 0.999"), "{flows}");
    let lab = pinned("lab.json");
    let series = svg::render(&lab, ChartKind::Series, 0).unwrap();
    assert_eq!(series.matches("class=\"ref\"").count(), 3);
}

#[test]
fn html_of_a_lab_run_shows_its_topology_as_tables() {
    use linerate_model::doc::{example, lab::LabHost};
    let mut doc = example::lab();
    doc.lab.hosts.insert("<b>evil</b>".into(), LabHost { ns: "ns&1".into(), interfaces: vec![] });
    let r = from_lab(&doc).unwrap();
    let html = html::report(&[r], 5.0);
    for heading in ["Lab hosts", "Lab links", "Lab switches", "Lab QoS classes"] {
        assert!(html.contains(&format!("<h3>{heading}</h3>")), "no {heading} table");
    }
    let links = &html[html.find("<h3>Lab links</h3>").unwrap()..];
    let links = &links[..links.find("</table>").unwrap()];
    for cell in [
        "<td>uplink</td>",
        "<td>g1 (eth0)</td>",
        "<td>sw (p0)</td>",
        "<td class=\"n\">1 Gbit/s</td>",
        "<td>htb</td>",
        "<td class=\"n\">1500</td>",
        "<td>100 us</td>",
        "<td>10 us</td>",
        "<td>0.1%</td>",
        "<td>0.5%</td>",
    ] {
        assert!(links.contains(cell), "{cell} missing from {links}");
    }
    assert!(html.contains("<td>198.18.0.1/24</td>") && html.contains("<td>lr4242-g1</td>"), "hosts");
    assert!(html.contains("<td>br0</td>") && html.contains("<td>lr4242-sw</td>"), "switches");
    let qos = &html[html.find("<h3>Lab QoS classes</h3>").unwrap()..];
    let qos = &qos[..qos.find("</table>").unwrap()];
    for cell in ["uplink end b, egress", "<td>g-guaranteed</td>", "400 Mbit/s", "dst g1, dport 5201"] {
        assert!(qos.contains(cell), "{cell} missing from {qos}");
    }
    // text is escaped, and no parameter is a raw JSON blob
    assert!(html.contains("<td>&lt;b&gt;evil&lt;/b&gt;</td>") && html.contains("<td>ns&amp;1</td>"));
    assert!(!html.contains("<b>evil"));
    assert!(!html.contains("{&quot;") && !html.contains("[{") && !html.contains("&quot;hosts&quot;"), "raw JSON");
    assert!(html.contains("<th>description</th><td>every kind of run</td>"), "the scenario as key/value");
    // `report show` the same way
    let md = export::to_markdown(&from_lab(&doc).unwrap());
    assert!(md.contains("## Lab links"), "{md}");
    assert!(
        md.contains("| uplink | g1 (eth0) | sw (p0) | 1 Gbit/s | htb | 1500 | 100 us | 10 us | 0.1% | 0.5% |"),
        "{md}"
    );
    assert!(md.contains("| scenario | description: every kind of run; file: scenarios/example.toml; name: example |"));
    assert!(!md.contains("{\""), "raw JSON: {md}");
}

#[test]
fn a_bench_run_with_one_interval_draws_its_point() {
    use linerate_model::doc::{bench::BenchInterval, example};
    let mut doc = example::bench();
    doc.points.truncate(1);
    doc.intervals = Some(vec![BenchInterval {
        start_s: 0.0,
        end_s: 1.0,
        bps: 5e8,
        transactions_per_s: 1.0,
        omitted: false,
        detail: Default::default(),
    }]);
    let r = from_bench(&doc).unwrap();
    assert_eq!(r.charts.series[0].lines[0].points, vec![[1.0, 5e8]]);
    let s = svg::render(&r, ChartKind::Series, 0).unwrap();
    // one marker, at the right end of the plot: the axis runs 0–1 s
    assert_eq!(s.matches("<circle").count(), 1, "{s}");
    assert!(s.contains(&format!("<circle cx=\"{:.1}\"", svg::WIDTH - 24.0)), "{s}");
    assert!(!s.contains(">0.5<") || s.contains(">0.4<"), "{s}");
}

#[test]
fn throughput_over_time_ends_with_the_last_full_interval() {
    use linerate_model::doc::{bench::BenchInterval, example};
    let iv = |start_s: f64, end_s: f64, bps: f64| BenchInterval {
        start_s,
        end_s,
        bps,
        transactions_per_s: 0.0,
        omitted: false,
        detail: Default::default(),
    };
    let mut doc = example::bench();
    doc.points.truncate(1);
    let mut ivs: Vec<BenchInterval> = (0..10).map(|i| iv(f64::from(i), f64::from(i + 1), 9e9)).collect();
    ivs.push(iv(10.0, 10.02, 2e8)); // the partial tail of a 10 s test
    doc.intervals = Some(ivs.clone());
    let r = from_bench(&doc).unwrap();
    let pts = &r.charts.series[0].lines[0].points;
    assert_eq!(pts.len(), 10, "{pts:?}");
    assert_eq!(pts.last(), Some(&[10.0, 9e9]));
    let s = svg::render(&r, ChartKind::Series, 0).unwrap();
    assert!(s.contains(">10</text>") && !s.contains(">12</text>"), "the axis ends at 10 s: {s}");
    // an empty last interval is left out too
    ivs.pop();
    ivs.push(iv(10.0, 11.0, 0.0));
    doc.intervals = Some(ivs);
    let r = from_bench(&doc).unwrap();
    assert_eq!(r.charts.series[0].lines[0].points.last(), Some(&[10.0, 9e9]));
}

#[test]
fn headlines_are_the_figures_a_run_is_judged_by() {
    // request/response: transactions and latency first, throughput after them
    let mut rr = pinned("bench-real-rr.json");
    rr.id = "20261122-054716-rr".into();
    let names: Vec<String> = rr.metrics.iter().take(3).map(|m| m.name.to_string()).collect();
    assert_eq!(names, ["transactions", "latency.p50", "latency.p99"]);
    assert_eq!(rr.headline().unwrap().name, "transactions");
    // a sweep: its best point, how many points and over what
    let mut sweep = pinned("bench-real-sweep.json");
    sweep.id = "20261122-054716-sweep".into();
    assert_eq!(sweep.metrics[0].name, "throughput.best");
    assert!((sweep.metrics[0].value - 34_231_796_695.409_15).abs() < 1.0);
    assert!((metric(&sweep, "throughput") - 15_585_977_508.590_21).abs() < 1.0, "the first point's, as before");
    assert_eq!(sweep.params.points, Some(6));
    assert_eq!(sweep.params.best_point.as_deref(), Some("connections=2 msg_size=131072"));
    assert_eq!(sweep.params.sweep_range.as_deref(), Some("connections 1–4, msg_size 16384–131072"));
    let mut store = Store::open_in_memory().unwrap();
    store.insert(&rr).unwrap();
    store.insert(&sweep).unwrap();
    let heads: Vec<String> = store.list().unwrap().into_iter().map(|r| r.headline.unwrap().name.to_string()).collect();
    assert_eq!(heads, ["transactions", "throughput.best"]);
    let html = html::report(&[sweep], 5.0);
    assert!(html.contains("<th>best point</th><td>connections=2 msg_size=131072</td>"), "{html}");
    assert!(html.contains("<th>throughput.best</th><td class=\"n\">34.2 Gbit/s</td>"));
    assert!(html.contains("points 6, sweep connections 1–4, msg_size 16384–131072"));
}

#[test]
fn cpu_per_gbit_is_cpu_seconds_per_gigabit() {
    use linerate_model::doc::example;
    // the first point: 0.5 Gbit/s, a quarter of 16 cores busy → 4 CPU seconds a second
    let r = from_bench(&example::bench()).unwrap();
    let m = r.find_metric("cpu.local.per_gbit").unwrap();
    assert_eq!(m.unit, "s/Gbit");
    assert!((m.value - 8.0).abs() < 1e-9, "{}", m.value);
    let html = html::report(&[r], 5.0);
    assert!(html.contains("<th>cpu.local.per_gbit</th><td class=\"n\">8 s/Gbit</td>"), "{html}");
    let cp = pinned("cp.json");
    assert_eq!(cp.find_metric("cpu.client.per_gbit").unwrap().unit, "s/Gbit");
    // the contract sample does not say how many cores: no figure rather than a wrong unit
    assert!(pinned("bench.json").find_metric("cpu.local.per_gbit").is_none());
}

#[test]
fn a_run_stored_already_is_found_again() {
    let mut s = Store::open_in_memory().unwrap();
    // `cp` saves its run with the destination; `cp --json` prints neither it nor a start time
    let mut saved = from_json(fixture("cp.json")).unwrap();
    saved.params.destination = Some("host:7878:dir".into());
    saved.created = "2026-11-22T05:47:16Z".into();
    s.insert(&saved).unwrap();
    let imported = from_json(fixture("cp.json")).unwrap();
    assert_ne!(imported.id, saved.id);
    assert_eq!(s.find_same(&imported).unwrap(), Some(saved.id.clone()));
    let mut other = imported.clone();
    other.metrics[0].value *= 1.001;
    assert_eq!(s.find_same(&other).unwrap(), None, "another copy of the same tree");
    // a bench run: the start time counts too
    let bench = from_json(fixture("bench-real-rr.json")).unwrap();
    s.insert(&bench).unwrap();
    let again = from_json(fixture("bench-real-rr.json")).unwrap();
    assert_eq!(s.find_same(&again).unwrap(), Some(bench.id.clone()));
    let later = RunReport { created: "2026-11-22T06:47:16Z".into(), ..again };
    assert_eq!(s.find_same(&later).unwrap(), None);
    assert_eq!(s.find_same(&bench).unwrap(), Some(bench.id.clone()), "the same id");
}

/// The version-1 layout, as a v1 build created it.
const V1_DDL: &str = "CREATE TABLE runs (id TEXT PRIMARY KEY, kind TEXT NOT NULL, created TEXT NOT NULL,
    title TEXT NOT NULL, doc TEXT NOT NULL); PRAGMA user_version = 1;";

#[test]
fn a_version_1_store_is_migrated_and_its_metrics_backfilled() {
    let t = tempfile::tempdir().unwrap();
    let path = t.path().join("old.sqlite");
    let r = pinned("bench.json");
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(V1_DDL).unwrap();
        c.execute(
            "INSERT INTO runs VALUES (?1, 'bench', ?2, ?3, ?4)",
            rusqlite::params![r.id, r.created, r.title, export::to_json(&r)],
        )
        .unwrap();
        c.execute("INSERT INTO runs VALUES ('broken', 'bench', 'x', 'x', '{not json')", []).unwrap();
    }
    let mut s = Store::open(&path).unwrap();
    assert_eq!(s.version().unwrap(), STORE_VERSION);
    assert_eq!(s.get(&r.id).unwrap(), r);
    let l = s.list().unwrap();
    assert_eq!(l.len(), 2);
    let head = l.iter().find(|x| x.id == r.id).unwrap().headline.clone().unwrap();
    assert_eq!(
        (head.name.to_string().as_str(), head.value),
        ("throughput.best", 9.35e9),
        "the best point of the sweep"
    );
    drop(s);
    let c = rusqlite::Connection::open(&path).unwrap();
    let n: i64 = c.query_row("SELECT COUNT(*) FROM metrics WHERE run_id = ?1", [&r.id], |x| x.get(0)).unwrap();
    assert_eq!(n as usize, r.metrics.len());
    // opening again is a no-op
    assert_eq!(Store::open(&path).unwrap().version().unwrap(), STORE_VERSION);
}

#[test]
fn a_store_from_a_newer_linerate_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let path = t.path().join("new.sqlite");
    rusqlite::Connection::open(&path).unwrap().execute_batch("PRAGMA user_version = 99;").unwrap();
    assert!(matches!(Store::open(&path), Err(ReportError::StoreTooNew { found: 99, .. })));
}

#[test]
fn a_store_file_round_trips_every_kind() {
    let t = tempfile::tempdir().unwrap();
    let path = t.path().join("sub/dir/runs.sqlite");
    let runs: Vec<RunReport> =
        ["cp.json", "bench.json", "lab.json"].iter().map(|n| from_json(fixture(n)).unwrap()).collect();
    {
        let mut s = Store::open(&path).unwrap();
        for r in &runs {
            s.insert(r).unwrap();
        }
    }
    let mut s = Store::open(&path).unwrap();
    for r in &runs {
        assert_eq!(&s.get(&r.id).unwrap(), r);
    }
    assert_eq!(s.list().unwrap().len(), 3);
}

/// A store written before the one stored shape (layout 2, fixtures/store-v2.sqlite.sql: every
/// document whole) by that build: each run reads back exactly as that build stored it (its
/// figures now derived from its body where it has one), opening migrates it to the one shape,
/// and its metric rows stay what they were.
#[test]
fn a_store_written_in_the_earlier_shape_reads_as_it_was_stored_and_is_migrated() {
    let t = tempfile::tempdir().unwrap();
    let path = t.path().join("v2.sqlite");
    let dump =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store-v2.sqlite.sql"));
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute_batch(&dump.unwrap()).unwrap();
    let stored = stored_runs(&mut |sql| {
        let mut st = c.prepare(sql).unwrap();
        let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
        rows.map(Result::unwrap).collect()
    });
    let metric_rows = |c: &rusqlite::Connection| -> Vec<(String, String, f64)> {
        let mut st = c.prepare("SELECT run_id, name, value FROM metrics ORDER BY run_id, rowid").unwrap();
        let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).unwrap();
        rows.map(Result::unwrap).collect()
    };
    let before = metric_rows(&c);
    drop(c);
    let mut s = Store::open(&path).unwrap();
    assert_eq!(s.version().unwrap(), STORE_VERSION);
    the_store_reads_as_stored(&mut s, &stored);
    drop(s);
    let c = rusqlite::Connection::open(&path).unwrap();
    assert_eq!(metric_rows(&c), before, "the metric rows, derived again, are the ones stored");
    let docs = stored_runs(&mut |sql| {
        let mut st = c.prepare(sql).unwrap();
        let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
        rows.map(Result::unwrap).collect()
    });
    in_the_one_shape(&docs);
}

/// Each stored run of a store, as (its document, the run it reads as), by `query`ing its
/// `runs` table.
fn stored_runs(query: &mut dyn FnMut(&str) -> Vec<(String, String)>) -> Vec<(Value, RunReport)> {
    let rows = query("SELECT id, doc FROM runs ORDER BY id");
    assert_eq!(rows.len(), 8, "the fixture's runs");
    rows.into_iter()
        .map(|(_, doc)| {
            let v: Value = serde_json::from_str(&doc).unwrap();
            (v.clone(), RunReport::from_json(v).unwrap())
        })
        .collect()
}

/// Every run of `stored` (documents written whole, read as written) reads back from `s` the
/// same, run for run, and in `report compare`.
fn the_store_reads_as_stored(s: &mut Store, stored: &[(Value, RunReport)]) {
    let kinds: Vec<&str> = stored.iter().map(|(_, r)| r.kind.as_str()).collect();
    assert_eq!(kinds, ["cp", "bench", "bench", "bench", "lab", "lab", "lab", "mesh"]);
    assert_eq!(stored.iter().filter(|(_, r)| r.body.is_some()).count(), 4, "cp, two bench runs and the mesh round");
    for (_, r) in stored {
        assert_eq!(&s.get(&r.id).unwrap(), r, "run {} ({})", r.id, r.title);
    }
    let (a, b) = (&stored[2].1, &stored[3].1);
    let shown = compare(&s.get(&a.id).unwrap(), &s.get(&b.id).unwrap(), 5.0).to_text();
    assert_eq!(shown, compare(a, b, 5.0).to_text());
    let heads: Vec<Option<String>> =
        s.list().unwrap().into_iter().map(|r| r.headline.map(|m| format!("{} {}", m.name, m.value))).collect();
    // a mesh round has no headline in `report list` (no figure sums a round up)
    assert_eq!(
        heads.iter().map(Option::is_some).collect::<Vec<_>>(),
        [true, true, true, true, true, true, true, false]
    );
}

/// Every document of a store in the one shape: without metrics, spreads, charts and tables
/// when it has a body, whole when it has none.
fn in_the_one_shape(docs: &[(Value, RunReport)]) {
    for (v, r) in docs {
        let derived = ["metrics", "spreads", "charts", "tables"].map(|k| v.get(k).is_some());
        if r.body.is_some() {
            assert_eq!(derived, [false; 4], "run {} keeps what its body gives", r.id);
        } else {
            assert!(derived[0] && derived[3], "run {} without a body keeps its figures", r.id);
        }
    }
}

#[test]
fn a_run_is_stored_as_its_body_and_its_figures_derived_when_read() {
    let t = tempfile::tempdir().unwrap();
    let path = t.path().join("runs.sqlite");
    let runs: Vec<RunReport> = FIXTURES.iter().map(|n| pinned(n)).collect();
    let mut s = Store::open(&path).unwrap();
    for (i, r) in runs.iter().enumerate() {
        let r = RunReport { id: format!("20261124-0{i}0000-{i:04x}"), ..r.clone() };
        s.insert(&r).unwrap();
        assert_eq!(s.get(&r.id).unwrap(), r);
    }
    drop(s);
    let c = rusqlite::Connection::open(&path).unwrap();
    let mut st = c.prepare("SELECT id, doc FROM runs ORDER BY id").unwrap();
    let docs: Vec<(Value, RunReport)> = st
        .query_map([], |r| r.get::<_, String>(1))
        .unwrap()
        .map(|d| {
            let v: Value = serde_json::from_str(&d.unwrap()).unwrap();
            (v.clone(), RunReport::from_json(v).unwrap())
        })
        .collect();
    assert_eq!(docs.iter().filter(|(_, r)| r.body.is_some()).count(), 3, "cp and two bench documents");
    in_the_one_shape(&docs);
    // an export carries the figures, which an import derives again from the body
    let mut out = from_json(serde_json::from_str(&export::to_json(&runs[2])).unwrap()).unwrap();
    assert_eq!(out, runs[2]);
    let mut tampered: Value = serde_json::from_str(&export::to_json(&runs[2])).unwrap();
    tampered["metrics"][0]["value"] = 1.0.into();
    out = from_json(tampered).unwrap();
    assert_eq!(out, runs[2], "the figures are the body's");
}

/// Runs `cmd` for at most `limit`, killing it (by its pid) if it overstays. Output goes to
/// files beside `out`, not pipes, so a large DOM dump cannot fill a pipe and stall the browser.
fn run_bounded(cmd: &mut Command, limit: Duration, out: &Path) -> std::process::Output {
    let (o, e) = (out.with_extension("stdout"), out.with_extension("stderr"));
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&o).unwrap())
        .stderr(std::fs::File::create(&e).unwrap())
        .spawn()
        .unwrap();
    let status = linerate_model::testkit::exit_within(&mut child, limit).unwrap_or_else(|| {
        panic!("chromium did not finish in {limit:?}: {}", std::fs::read_to_string(&e).unwrap_or_default())
    });
    std::process::Output { status, stdout: std::fs::read(&o).unwrap(), stderr: std::fs::read(&e).unwrap() }
}

fn chromium() -> PathBuf {
    for c in ["chromium", "chromium-browser", "google-chrome"] {
        if let Some(p) = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|d| d.join(c))
            .find(|p| p.is_file())
        {
            return p;
        }
    }
    panic!("chromium is not installed: `apt-get install chromium` (.ci/run installs it)");
}

fn headless(profile: &Path) -> Command {
    let mut c = Command::new(chromium());
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-dev-shm-usage",
        "--window-size=1200,2000",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    // crash reports and caches go to the profile, not the user's home
    .env("HOME", profile)
    .env("XDG_CONFIG_HOME", profile.join("config"))
    .env("XDG_CACHE_HOME", profile.join("cache"));
    c
}

#[test]
fn html_never_draws_unlike_tests_on_one_axis() {
    let mut second = pinned("bench.json");
    second.id = "20261122-054716-second".into();
    let runs = [pinned("bench.json"), second, pinned("bench-real-rr.json")];
    let html = html::report(&runs, 5.0);
    // the two stream runs share a chart; the request/response run's throughput has none with them
    assert!(html.contains("throughput by run (bench tcp-stream)"), "no chart of the stream runs");
    assert!(!html.contains("by run (bench tcp-rr)"), "one rr run: nothing to draw it beside");
    // nor a change against a stream run in the summary (it was -100.0 %)
    assert!(!html.contains("(-100.0%)") && !html.contains("(-99."), "an rr run judged against a stream run");
}

#[test]
fn html_report_renders_in_headless_chromium() {
    let t = tempfile::tempdir().unwrap();
    let mut second = pinned("bench.json");
    second.id = "20261122-054716-second".into();
    second.metrics[0].value *= 0.8;
    let runs = [pinned("lab-runner.json"), pinned("bench.json"), second];
    let html = html::report(&runs, 5.0);
    assert!(
        !html.contains("http://")
            || html.matches("http://").count() == html.matches("http://www.w3.org/2000/svg").count()
    );
    assert!(!html.contains("<script src") && !html.contains("<link"), "external resources");
    let page = t.path().join("report.html");
    std::fs::write(&page, &html).unwrap();
    let charts = html.matches("<svg ").count();
    assert!(charts >= 9 + 5, "{charts} charts");
    assert!(html.contains("throughput by run"), "no side-by-side chart of the two bench runs");
    let url = format!("file://{}", page.display());

    let dump = t.path().join("dom");
    let out = run_bounded(headless(&t.path().join("p1")).arg("--dump-dom").arg(&url), Duration::from_secs(120), &dump);
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
    assert!(dom.contains("data-rendered=\"yes\""), "the inline script did not run: {}", &dom[..dom.len().min(2000)]);
    assert!(!dom.contains("data-errors=\""), "script errors on the page: {}", &dom[..dom.len().min(600)]);
    let sizes = dom.split("data-chart-sizes=\"").nth(1).and_then(|s| s.split('"').next()).unwrap();
    let sizes: Vec<(f64, f64)> = sizes
        .split_whitespace()
        .map(|s| {
            let (w, h) = s.split_once('x').unwrap();
            (w.parse().unwrap(), h.parse().unwrap())
        })
        .collect();
    assert_eq!(sizes.len(), charts, "{sizes:?}");
    for (w, h) in &sizes {
        assert!(*w >= 200.0 && *h >= 100.0, "a chart rendered at {w}x{h}: {sizes:?}");
    }

    let shot = t.path().join("shot.png");
    let out = run_bounded(
        headless(&t.path().join("p2")).arg(format!("--screenshot={}", shot.display())).arg(&url),
        Duration::from_secs(120),
        &t.path().join("shot"),
    );
    assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), (1200, 2000));
    let px = info.color_type.samples();
    let pixels: Vec<&[u8]> = buf[..info.buffer_size()].chunks(px).collect();
    let mut colours: Vec<&[u8]> = pixels.iter().step_by(97).copied().collect();
    colours.sort();
    colours.dedup();
    assert!(colours.len() > 20, "the screenshot is nearly blank: {} colours", colours.len());
    // the bar colours of the chart palette are on screen
    let blue = pixels.iter().filter(|p| p[0] == 0x4e && p[1] == 0x79 && p[2] == 0xa7).count();
    assert!(blue > 1000, "{blue} pixels of bar blue");
}

/// The store on a real PostgreSQL: a throwaway cluster (Debian's postgresql, run as the
/// `postgres` user, which PostgreSQL requires instead of root) on a free loopback port, one
/// database per test, stopped and removed when dropped.
mod postgres_store {
    use super::*;
    use linerate_report::store::postgres::PgStore;

    struct Cluster {
        /// The data directory, of a server `pg_ctl` started.
        data: PathBuf,
        port: u16,
        _dir: tempfile::TempDir,
    }

    fn bin_dir() -> PathBuf {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .map(|d| {
                d.filter_map(|e| e.ok()).map(|e| e.path().join("bin")).filter(|p| p.join("initdb").exists()).collect()
            })
            .unwrap_or_default();
        dirs.sort();
        dirs.pop()
            .unwrap_or_else(|| panic!("PostgreSQL is needed: install Debian's `postgresql` package (.ci/run does)"))
    }

    fn as_postgres(program: PathBuf) -> Command {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=postgres", "--regid=postgres", "--init-groups"]).arg(program);
        c
    }

    impl Cluster {
        /// A cluster, for a test that is `#[ignore = "needs root"]` (it fails without root).
        fn start() -> Cluster {
            Cluster::start_with(None)
        }

        /// A cluster that speaks TLS only (pg_hba: `hostssl`), with `cert` as its certificate
        /// and key; root as [`Cluster::start`].
        fn start_tls(cert: &Pki) -> Cluster {
            Cluster::start_with(Some(cert))
        }

        fn start_with(tls: Option<&Pki>) -> Cluster {
            linerate_model::testkit::require_root("the PostgreSQL store tests (PostgreSQL run as user postgres)");
            let bin = bin_dir();
            let dir = tempfile::tempdir().unwrap();
            let (data, sock) = (dir.path().join("data"), dir.path().join("sock"));
            std::fs::create_dir(&sock).unwrap();
            let o = Command::new("chown").args(["-R", "postgres:postgres"]).arg(dir.path()).output().unwrap();
            assert!(o.status.success());
            let o = as_postgres(bin.join("initdb"))
                .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync", "-D"])
                .arg(&data)
                .output()
                .unwrap();
            assert!(o.status.success(), "initdb: {}", String::from_utf8_lossy(&o.stderr));
            let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            let mut tls_args = Vec::new();
            if let Some(pki) = tls {
                // TCP only with TLS: plaintext gets "no pg_hba.conf entry ... no encryption"
                std::fs::write(data.join("pg_hba.conf"), "local all all trust\nhostssl all all 127.0.0.1/32 trust\n")
                    .unwrap();
                for (from, to) in [(&pki.server_crt, "server.crt"), (&pki.server_key, "server.key")] {
                    std::fs::copy(from, data.join(to)).unwrap();
                }
                let o = Command::new("chown").args(["-R", "postgres:postgres"]).arg(&data).output().unwrap();
                assert!(o.status.success());
                std::fs::set_permissions(data.join("server.key"), std::os::unix::fs::PermissionsExt::from_mode(0o600))
                    .unwrap();
                tls_args.extend(["-c", "ssl=on"]);
            }
            // `pg_ctl start -w` returns once the server accepts connections (or failed to).
            let mut opts = format!("-p {port} -c listen_addresses=127.0.0.1 -c fsync=off -k {}", sock.display());
            for a in tls_args {
                opts.push(' ');
                opts.push_str(a);
            }
            let o = as_postgres(bin.join("pg_ctl"))
                .args(["start", "-w", "-t", "30", "-D"])
                .arg(&data)
                .arg("-l")
                .arg(dir.path().join("log"))
                .args(["-o", &opts])
                .stdin(Stdio::null())
                .output()
                .unwrap();
            let log = std::fs::read_to_string(dir.path().join("log")).unwrap_or_default();
            assert!(o.status.success(), "pg_ctl start: {}{log}", String::from_utf8_lossy(&o.stderr));
            Cluster { data, port, _dir: dir }
        }

        /// A new, empty database; its URL.
        fn db(&self, name: &str) -> String {
            let o = Command::new(bin_dir().join("createdb"))
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", "postgres", name])
                .output()
                .unwrap();
            assert!(o.status.success(), "createdb: {}", String::from_utf8_lossy(&o.stderr));
            format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
        }
    }

    impl Drop for Cluster {
        fn drop(&mut self) {
            // PostgreSQL's fast shutdown, waited for (a bound against a hang: `-t`).
            let _ = as_postgres(bin_dir().join("pg_ctl"))
                .args(["stop", "-w", "-t", "20", "-m", "fast", "-D"])
                .arg(&self.data)
                .stdin(Stdio::null())
                .output();
        }
    }

    /// Throwaway certificates made with the openssl command: a CA, a server certificate it
    /// signs for the name `localhost` only, and another CA that signed nothing here.
    struct Pki {
        _dir: tempfile::TempDir,
        ca: PathBuf,
        other_ca: PathBuf,
        server_crt: PathBuf,
        server_key: PathBuf,
    }

    impl Pki {
        fn new() -> Pki {
            let dir = tempfile::tempdir().unwrap();
            let p = |n: &str| dir.path().join(n);
            let openssl = |args: &[&str]| {
                let o = Command::new("openssl").args(args).current_dir(dir.path()).output().unwrap_or_else(|e| {
                    panic!("the TLS store test needs the openssl command (.ci/run installs it): {e}")
                });
                assert!(o.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&o.stderr));
            };
            let key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
            for ca in ["ca", "other-ca"] {
                let (k, c, subj) = (format!("{ca}.key"), format!("{ca}.pem"), format!("/CN=linerate test {ca}"));
                let mut a = vec!["req", "-x509", "-days", "2", "-subj", &subj, "-keyout", &k, "-out", &c];
                a.extend(key);
                a.extend(["-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign"]);
                openssl(&a);
            }
            let mut a = vec!["req", "-subj", "/CN=localhost", "-keyout", "server.key", "-out", "server.csr"];
            a.extend(key);
            openssl(&a);
            std::fs::write(
                p("ext.cnf"),
                "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
            )
            .unwrap();
            openssl(&[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                "ext.cnf",
                "-out",
                "server.crt",
            ]);
            Pki {
                ca: p("ca.pem"),
                other_ca: p("other-ca.pem"),
                server_crt: p("server.crt"),
                server_key: p("server.key"),
                _dir: dir,
            }
        }
    }

    fn runs() -> Vec<RunReport> {
        let mut out: Vec<RunReport> = FIXTURES.iter().map(|f| pinned(f)).collect();
        for (i, r) in out.iter_mut().enumerate() {
            r.id = format!("20261124-0{i}0000-{i:04x}");
        }
        out
    }

    /// A PostgreSQL store written before the one stored shape (fixtures/store-v2.postgres.sql,
    /// layout 2) reads back as that build stored it, and opening migrates it to the one shape.
    #[test]
    #[ignore = "needs root"]
    fn a_postgres_store_written_in_the_earlier_shape_reads_as_stored_and_is_migrated() {
        let c = Cluster::start();
        let url = c.db("earlier");
        let dump = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store-v2.postgres.sql");
        let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        client.batch_execute(&std::fs::read_to_string(dump).unwrap()).unwrap();
        let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let query = |client: &mut postgres::Client, sql: &str| -> Vec<(String, String)> {
            client.query(sql, &[]).unwrap().into_iter().map(|r| (r.get(0), r.get(1))).collect()
        };
        let stored = stored_runs(&mut |sql| query(&mut client, sql));
        let metric_rows = |client: &mut postgres::Client| -> Vec<(String, String, f64)> {
            let rows = client.query("SELECT run_id, name, value FROM metrics ORDER BY run_id, seq", &[]).unwrap();
            rows.into_iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect()
        };
        let before = metric_rows(&mut client);
        let mut pg = Store::open(Path::new(&url)).unwrap();
        assert_eq!(pg.version().unwrap(), STORE_VERSION);
        the_store_reads_as_stored(&mut pg, &stored);
        assert_eq!(metric_rows(&mut client), before, "the metric rows, derived again, are the ones stored");
        in_the_one_shape(&stored_runs(&mut |sql| query(&mut client, sql)));
        // the same store in SQLite lists the same
        let dir = tempfile::tempdir().unwrap();
        let mut lite = Store::open(&dir.path().join("runs.sqlite")).unwrap();
        for (_, r) in &stored {
            lite.insert(r).unwrap();
        }
        assert_eq!(pg.list().unwrap(), lite.list().unwrap());
    }

    #[test]
    #[ignore = "needs root"]
    fn postgres_answers_as_sqlite_does() {
        let c = Cluster::start();
        let url = c.db("same");
        let dir = tempfile::tempdir().unwrap();
        let mut lite = Store::open(&dir.path().join("runs.sqlite")).unwrap();
        let mut pg = Store::open(Path::new(&url)).unwrap();
        assert!(matches!(pg, Store::Postgres(_)));
        assert_eq!(pg.version().unwrap(), STORE_VERSION);
        for r in runs() {
            lite.insert(&r).unwrap();
            pg.insert(&r).unwrap();
        }
        assert_eq!(pg.list().unwrap(), lite.list().unwrap(), "report list");
        for r in runs() {
            assert_eq!(pg.get(&r.id).unwrap(), lite.get(&r.id).unwrap(), "report show {}", r.id);
        }
        let (a, b) = (&runs()[1].id, &runs()[2].id);
        let cmp = |s: &mut Store| compare(&s.get(a).unwrap(), &s.get(b).unwrap(), 5.0).to_text();
        assert_eq!(cmp(&mut pg), cmp(&mut lite), "report compare");
        let html = |s: &mut Store| linerate_report::html::report(&[s.get(a).unwrap(), s.get(b).unwrap()], 5.0);
        assert_eq!(html(&mut pg), html(&mut lite), "report html");
        assert!(matches!(pg.get("2026"), Err(ReportError::Ambiguous(..))));
        assert!(matches!(pg.get("%"), Err(ReportError::NotFound(_))), "LIKE wildcards are literal");
        assert!(matches!(pg.insert(&runs()[0]), Err(ReportError::Duplicate(_))));
        assert_eq!(pg.remove(a).unwrap(), *a);
        assert!(matches!(pg.get(a), Err(ReportError::NotFound(_))));
        // a server without TLS fails sslmode=require: never a silent downgrade
        let e = PgStore::connect(&format!("{url}?sslmode=require")).err().unwrap().to_string();
        assert!(e.contains("server does not support TLS"), "{e}");
    }

    /// Issue 33: a store a fleet can use is one behind TLS. verify-full passes by the name in
    /// the certificate, a wrong CA or a wrong name fails saying so, and nothing is plaintext.
    #[test]
    #[ignore = "needs root"]
    fn tls_store_verifies_the_server_and_a_wrong_ca_fails_clearly() {
        let pki = Pki::new();
        let c = Cluster::start_tls(&pki);
        let by_addr = c.db("tls");
        let by_name = by_addr.replace("127.0.0.1", "localhost");
        let (ca, other) = (pki.ca.display().to_string(), pki.other_ca.display().to_string());

        let mut s = PgStore::connect(&format!("{by_name}?sslmode=verify-full&sslrootcert={ca}")).unwrap();
        s.insert(&runs()[0]).unwrap();
        assert_eq!(s.list().unwrap().len(), 1);
        // the server refuses plaintext, so what just worked was TLS
        let e = PgStore::connect(&format!("{by_addr}?sslmode=disable")).err().unwrap().to_string();
        assert!(e.contains("no encryption"), "{e}");

        // the certificate names localhost, not 127.0.0.1: verify-full says so, verify-ca passes
        let e = PgStore::connect(&format!("{by_addr}?sslmode=verify-full&sslrootcert={ca}")).err().unwrap();
        assert!(matches!(e, ReportError::PostgresTls { .. }), "{e:?}");
        let e = e.to_string();
        assert!(
            e.contains("TLS handshake failed: invalid peer certificate: certificate not valid for name \"127.0.0.1\""),
            "{e}"
        );
        let mut s = PgStore::connect(&format!("{by_addr}?sslmode=verify-ca&sslrootcert={ca}")).unwrap();
        assert_eq!(s.list().unwrap().len(), 1);

        // a CA that did not sign the server's certificate: refused, naming the file
        for mode in ["verify-full", "verify-ca", "require"] {
            let e =
                PgStore::connect(&format!("{by_name}?sslmode={mode}&sslrootcert={other}")).err().unwrap().to_string();
            assert!(
                e.contains("TLS handshake failed: the server's certificate is not signed by a trusted CA")
                    && e.contains(&format!("checked against the CA in {other}")),
                "{mode}: {e}"
            );
        }
        // libpq's require without a root: encrypted, unchecked; the key-value form as well
        let kv = format!("host=127.0.0.1 port={} user=postgres dbname=tls sslmode=require", c.port);
        assert_eq!(PgStore::connect(&kv).unwrap().list().unwrap().len(), 1);
        let e = PgStore::connect(&format!("{by_name}?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem"))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("sslrootcert /nonexistent/ca.pem: "), "{e}");
    }

    #[test]
    #[ignore = "needs root"]
    fn two_writers_at_once_migrating_and_inserting() {
        let c = Cluster::start();
        let url = c.db("writers");
        // Both open the empty database at once: the advisory lock makes one migrate it.
        let threads: Vec<_> = (0..2)
            .map(|w| {
                let url = url.clone();
                std::thread::spawn(move || {
                    let mut s = Store::open(Path::new(&url)).unwrap();
                    for i in 0..40 {
                        let mut r = RunReport::new(RunKind::Bench, format!("writer {w} run {i}"));
                        r.id = format!("w{w}-{i:03}");
                        r.metric("throughput", f64::from(i), "bit/s", Better::Higher);
                        s.insert(&r).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let mut s = Store::open(Path::new(&url)).unwrap();
        let l = s.list().unwrap();
        assert_eq!(l.len(), 80, "every run of both writers");
        assert!(l.iter().all(|r| r.headline.is_some()));
    }

    #[test]
    #[ignore = "needs root"]
    fn a_version_1_database_is_migrated_and_a_newer_one_refused() {
        let c = Cluster::start();
        let url = c.db("old");
        let doc = serde_json::to_string(&runs()[1]).unwrap();
        let mut raw = postgres::Client::connect(&format!("{url}?sslmode=disable"), postgres::NoTls).unwrap();
        raw.batch_execute(
            "CREATE TABLE runs (id TEXT PRIMARY KEY, kind TEXT NOT NULL, created TEXT NOT NULL, title TEXT NOT NULL, doc TEXT NOT NULL);
             CREATE TABLE linerate_meta (key TEXT PRIMARY KEY, value BIGINT NOT NULL);
             INSERT INTO linerate_meta VALUES ('version', 1);",
        )
        .unwrap();
        raw.execute("INSERT INTO runs VALUES ($1, 'bench', $2, 't', $3)", &[&runs()[1].id, &runs()[1].created, &doc])
            .unwrap();
        let mut s = Store::open(Path::new(&url)).unwrap();
        assert_eq!(s.version().unwrap(), STORE_VERSION);
        let l = s.list().unwrap();
        assert_eq!(l.len(), 1);
        assert!(l[0].headline.is_some(), "metrics backfilled from the stored document");
        raw.execute("UPDATE linerate_meta SET value = 99 WHERE key = 'version'", &[]).unwrap();
        assert!(matches!(Store::open(Path::new(&url)), Err(ReportError::StoreTooNew { found: 99, .. })));
    }

    #[test]
    fn errors_name_the_database_without_its_password() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let url = format!("postgres://me:hunter2@127.0.0.1:{port}/runs");
        let e = PgStore::connect(&url).err().unwrap().to_string();
        assert!(e.contains("me:***@127.0.0.1") && !e.contains("hunter2"), "{e}");
        let e = PgStore::connect("postgres://me@db.example/runs?sslmode=prefer").err().unwrap().to_string();
        assert!(e.contains("never falls back to plaintext"), "{e}");
    }
}
