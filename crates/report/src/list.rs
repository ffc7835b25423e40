//! `linerate report list`: one line per stored run, as text for a terminal or as one JSON
//! object per line, rendered here from the store's [`RunSummary`] (the CLI only prints it).

pub use crate::format::clean;
use crate::format::si;
use crate::store::RunSummary;

/// `report list`: id, kind, creation time, headline figure and title, aligned, a line each. A
/// run without a headline figure (a copy too small for a rate, a lab run that measured
/// nothing) shows `-`.
pub fn text(runs: &[RunSummary]) -> String {
    let mut out = String::new();
    for r in runs {
        let head = r.headline.as_ref().map_or("-".into(), |m| si(m.value, &m.unit));
        out.push_str(&format!("{}  {:<5}  {}  {:>14}  {}\n", r.id, r.kind, r.created, head, clean(&r.title)));
    }
    out
}

/// `report list --json`: one JSON object per run and line (id, kind, created, title, headline).
pub fn json_lines(runs: &[RunSummary]) -> String {
    runs.iter().map(|r| r.json_line() + "\n").collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Better, Metric};

    fn runs() -> Vec<RunSummary> {
        let metric =
            |name: &str, value| Metric { name: name.into(), value, unit: "bit/s".into(), better: Better::Higher };
        vec![
            RunSummary {
                id: "20261125-230046-0ce81f".into(),
                kind: "bench".into(),
                created: "2026-11-25T23:00:46Z".into(),
                title: "bench tcp-stream to 198.18.0.2:7878".into(),
                headline: Some(metric("throughput.best", 9.35e9)),
            },
            RunSummary {
                id: "20261125-230046-29c456".into(),
                kind: "cp".into(),
                created: "2026-11-25T23:00:46Z".into(),
                title: "cp: 1024 files,\x1b[31m 2.15 GB in 2.05 s".into(),
                headline: Some(metric("throughput", 8380000000.000001)),
            },
            RunSummary {
                id: "20261125-230047-aaaaaa".into(),
                kind: "lab".into(),
                created: "2026-11-25T23:00:47Z".into(),
                title: "lab without figures".into(),
                headline: None,
            },
        ]
    }

    #[test]
    fn the_text_list_aligns_and_escapes_titles() {
        let t = text(&runs());
        assert!(!t.contains('\x1b'), "{t}");
        insta::assert_snapshot!(t);
    }

    #[test]
    fn the_json_list_has_one_object_per_line_with_sorted_keys() {
        insta::assert_snapshot!(json_lines(&runs()));
    }
}
