//! The typed documents against golden JSON: every field name, nesting and number format that
//! `cp --json`, `bench --json` and `lab run` write is pinned in `tests/golden/`. A field renamed
//! (in Rust or with `#[serde(rename)]`), dropped or moved changes the JSON and fails here, and
//! documents already written by earlier versions keep reading back unchanged.
//! `UPDATE_GOLDEN=1 cargo test -p linerate-model` rewrites the files after a deliberate change.
#![allow(clippy::unwrap_used)] // tests fail loudly by design

use linerate_model::doc::example;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use std::path::Path;

fn golden<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(name: &str, doc: &T) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name);
    let made = serde_json::to_value(doc).unwrap();
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, serde_json::to_string_pretty(&made).unwrap() + "\n").unwrap();
    }
    let want: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(made, want, "{name}: the document's JSON changed; see the comment at the top of this file");
    let back: T = serde_json::from_value(want).unwrap();
    assert_eq!(&back, doc, "{name} does not read back into the same document");
}

#[test]
fn cp_summary_json_is_pinned() {
    golden("cp.json", &example::cp());
}

#[test]
fn bench_document_json_is_pinned() {
    golden("bench.json", &example::bench());
}

#[test]
fn lab_document_json_is_pinned() {
    golden("lab.json", &example::lab());
}

#[test]
fn a_missing_field_is_an_error_not_a_silent_default() {
    let mut v = serde_json::to_value(example::bench()).unwrap();
    v["summary"].as_object_mut().unwrap().remove("throughput_bps");
    let e = serde_json::from_value::<linerate_model::doc::bench::BenchDocument>(v).unwrap_err();
    assert!(e.to_string().contains("throughput_bps"), "{e}");
    let mut v = serde_json::to_value(example::lab()).unwrap();
    v["runs"][0].as_object_mut().unwrap().remove("group");
    let e = serde_json::from_value::<linerate_model::doc::lab::LabDocument>(v).unwrap_err();
    assert!(e.to_string().contains("group"), "{e}");
    // an Option field too: `null` is "no value", a missing key is an error
    let mut v = serde_json::to_value(example::lab()).unwrap();
    v["runs"][0].as_object_mut().unwrap().remove("rate_bps");
    let e = serde_json::from_value::<linerate_model::doc::lab::LabDocument>(v).unwrap_err();
    assert!(e.to_string().contains("rate_bps"), "{e}");
    let mut v = serde_json::to_value(example::bench()).unwrap();
    v["summary"].as_object_mut().unwrap().remove("latency_us");
    let e = serde_json::from_value::<linerate_model::doc::bench::BenchDocument>(v).unwrap_err();
    assert!(e.to_string().contains("latency_us"), "{e}");
}

#[test]
fn fields_added_later_read_as_absent_from_older_documents() {
    let mut v = serde_json::to_value(example::lab()).unwrap();
    v.as_object_mut().unwrap().remove("workdir");
    for link in v["lab"]["links"].as_array_mut().unwrap() {
        link.as_object_mut().unwrap().remove("burst_bytes");
        link.as_object_mut().unwrap().remove("latency_us");
    }
    for run in v["runs"].as_array_mut().unwrap() {
        let run = run.as_object_mut().unwrap();
        run.remove("mode");
        run.remove("machine_cpu_s");
    }
    let doc: linerate_model::doc::lab::LabDocument = serde_json::from_value(v).unwrap();
    assert_eq!(doc.workdir, None);
    assert!(doc.lab.links.iter().all(|l| l.burst_bytes.is_none() && l.latency_us.is_none()));
    assert!(doc.runs.iter().all(|r| r.mode.is_none() && r.machine_cpu_s.is_none()));
}

#[test]
fn an_intervals_streams_are_written_only_when_kept_and_read_back() {
    use linerate_model::doc::bench::{BenchDocument, BenchStream};
    let mut doc = example::bench();
    let v = serde_json::to_value(&doc).unwrap();
    assert!(v["intervals"][0].get("streams").is_none(), "none kept: no key, as in documents before it");
    let s = BenchStream { id: 1, sent_bytes: 1000, bps: 8000.0, retransmits: Some(2), ..BenchStream::default() };
    doc.intervals.as_mut().unwrap()[0].detail.streams = vec![s];
    let v = serde_json::to_value(&doc).unwrap();
    let got = &v["intervals"][0]["streams"][0];
    assert_eq!(
        (got["id"].as_u64(), got["sent_bytes"].as_u64(), got["received_bytes"].as_u64()),
        (Some(1), Some(1000), Some(0))
    );
    assert!(got.get("cwnd_bytes").is_none() && got.get("transactions_per_s").is_none(), "{got}");
    let back: BenchDocument = serde_json::from_value(v).unwrap();
    assert_eq!(back, doc);
}
