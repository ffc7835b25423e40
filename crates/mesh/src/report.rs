//! A round as a stored run ([`RunReport`] of kind `mesh`): the typed round
//! ([`linerate_model::doc::mesh::MeshRound`]), from which [`linerate_report::from_mesh`] makes
//! the run (the round kept whole as its body, a metric per test and ordered pair, the `pairs`
//! table).

use crate::inventory::Inventory;
use crate::round::{RoundResult, TaskResult};
use linerate_model::doc::mesh::{MeshRound, MeshTally, MeshTest, MeshTry, PairFigures};
use linerate_report::RunReport;
use std::path::{Path, PathBuf};

/// How a try's status starts when its agent was down and it was not tried.
pub use linerate_model::doc::mesh::AGENT_DOWN;

/// Round `r` of `inv` as the typed round document.
pub fn to_round(inv: &Inventory, r: &RoundResult) -> MeshRound {
    let name = |a: usize| inv.agents[a].name.clone();
    let tries = r
        .tries
        .iter()
        .map(|t| {
            let (status, figures) = match &t.result {
                TaskResult::Done(m) => (
                    "ok".to_string(),
                    Some(PairFigures {
                        throughput_bps: m.throughput_bps,
                        p50_us: m.latency_us.map(|l| l.p50),
                        p99_us: m.latency_us.map(|l| l.p99),
                        retransmits: m.retransmits,
                        loss_pct: m.loss_pct,
                        spread: m.spread.filter(|s| s.is_valid()),
                    }),
                ),
                TaskResult::Unreachable { agent, message } => {
                    (format!("unreachable {}: {message}", inv.agents[*agent].name), None)
                }
                TaskResult::Failed { message } => (format!("failed: {message}"), None),
                TaskResult::Down { agent } => (format!("{AGENT_DOWN}: {}", inv.agents[*agent].name), None),
            };
            MeshTry {
                test: inv.tests[t.task.test].name.clone(),
                from: name(t.task.from),
                to: name(t.task.to),
                attempt: t.task.attempt,
                status,
                figures,
                start_s: (t.start_s * 1000.0).round() / 1000.0,
                end_s: (t.end_s * 1000.0).round() / 1000.0,
            }
        })
        .collect();
    MeshRound {
        round: r.round,
        agents: inv.agents.iter().map(|a| a.name.clone()).collect(),
        tests: inv
            .tests
            .iter()
            .map(|t| MeshTest {
                name: t.name.clone(),
                kind: t.kind.name().to_string(),
                duration_s: t.duration.as_secs_f64(),
                streams: t.streams,
                both_ways: t.both_ways,
                under_load: t.under_load,
            })
            .collect(),
        tally: MeshTally {
            done: r.tally.done,
            failed: r.tally.failed,
            retried: r.tally.retried,
            waves: r.tally.waves,
            down: r.down.iter().map(|&a| name(a)).collect(),
            stopped: r.stopped,
        },
        tries,
    }
}

/// A run that stands for `inv`'s mesh (its agents and tests, no round): what the run store
/// matches rounds of the same mesh by, to number the next one.
pub fn like(inv: &Inventory) -> RunReport {
    let empty = RoundResult {
        round: 0,
        started: std::time::SystemTime::UNIX_EPOCH,
        tries: Vec::new(),
        tally: crate::schedule::Tally::default(),
        down: Vec::new(),
        stopped: false,
    };
    to_report(inv, &empty)
}

/// Round `r` of `inv` as a run ([`linerate_report::from_mesh`] of its [`to_round`]).
pub fn to_report(inv: &Inventory, r: &RoundResult) -> RunReport {
    linerate_report::from_mesh(&to_round(inv, r))
}

/// Why the next round's number cannot be read from the run store.
#[derive(Debug, thiserror::Error)]
pub enum NextRoundError {
    /// `--db` names no usable store (a usage error).
    #[error(transparent)]
    Name(Box<linerate_report::ReportError>),
    /// The store does not open.
    #[error("cannot open the run store {}", .path.display())]
    Open {
        /// The store.
        path: PathBuf,
        /// Why.
        #[source]
        source: Box<linerate_report::ReportError>,
    },
    /// The store cannot be read.
    #[error("cannot read the run store {}", .path.display())]
    Read {
        /// The store.
        path: PathBuf,
        /// Why.
        #[source]
        source: Box<linerate_report::ReportError>,
    },
}

/// The number of the next round of `inv`'s mesh in the run store `db` (1 for a new mesh):
/// rounds are numbered on from the last stored round of the same agents and tests.
pub fn next_round(db: Option<&Path>, inv: &Inventory) -> Result<u64, NextRoundError> {
    use linerate_report::store::{store_path, Store};
    let path = store_path(db).map_err(|e| NextRoundError::Name(Box::new(e)))?;
    let mut store =
        Store::open(&path).map_err(|source| NextRoundError::Open { path: path.clone(), source: Box::new(source) })?;
    store.next_mesh_round(&like(inv)).map_err(|source| NextRoundError::Read { path, source: Box::new(source) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::round::Try;
    use crate::schedule::{Tally, Task};
    use linerate_proto::mesh::{MeshLatency, MeshReport};
    use linerate_report::mesh::State;
    use linerate_report::{Body, Cell, SpreadOf};

    fn inventory() -> Inventory {
        let fp = "SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU";
        let mut t = String::new();
        for i in 0..3 {
            t += &format!("[[agent]]\nname = \"a{i}\"\naddress = \"198.18.1.{}\"\nhost_key = \"{fp}\"\n", i + 1);
        }
        t += "[[test]]\nname = \"tput\"\nkind = \"tcp-stream\"\n[[test]]\nname = \"rtt\"\nkind = \"tcp-rr\"\n";
        Inventory::parse(&t).unwrap_or_else(|e| panic!("{e}"))
    }

    fn done(bps: f64, p50: Option<f64>) -> TaskResult {
        TaskResult::Done(MeshReport {
            version: 1,
            started_unix_s: 0,
            seconds: 1.0,
            throughput_bps: bps,
            retransmits: 2,
            rtt_us: None,
            latency_us: p50.map(|p50| MeshLatency { p50, p99: p50 * 2.0 }),
            transactions_per_s: None,
            loss_pct: None,
            cpu_busy: (0.0, 0.0),
            spread: None,
        })
    }

    /// `done` with a spread over 10 intervals of `pct` percent of its figures.
    fn spread(r: TaskResult, pct: f64) -> TaskResult {
        let TaskResult::Done(mut m) = r else { return r };
        m.spread = Some(linerate_proto::mesh::MeshSpread {
            intervals: 10,
            throughput_bps: m.throughput_bps * pct / 100.0,
            p50_us: m.latency_us.map(|l| l.p50 * pct / 100.0),
        });
        TaskResult::Done(m)
    }

    /// Issue 43: each pair's figure carries its test's spread, so `report compare` of two rounds
    /// judges a pair by its own noise: rounds alike within it show no regression, a pair that
    /// halved does.
    #[test]
    fn rounds_alike_within_their_tests_spread_compare_without_a_regression() {
        let inv = inventory();
        let task = |test, from, to| Task { id: 0, test, from, to, attempt: 0 };
        let round = |n: u64, tput: f64, rtt: f64| {
            let tries = vec![
                Try { task: task(0, 0, 1), start_s: 0.0, end_s: 1.0, result: spread(done(tput, None), 5.0) },
                Try { task: task(0, 1, 0), start_s: 1.0, end_s: 2.0, result: spread(done(9e8, None), 5.0) },
                Try { task: task(1, 1, 2), start_s: 2.0, end_s: 3.0, result: spread(done(1e6, Some(rtt)), 5.0) },
            ];
            let r = RoundResult {
                round: n,
                started: std::time::SystemTime::UNIX_EPOCH,
                tries,
                tally: Tally { done: 3, ..Tally::default() },
                down: Vec::new(),
                stopped: false,
            };
            to_report(&inv, &r)
        };
        let (a, b) = (round(1, 9e8, 80.0), round(2, 8.3e8, 88.0));
        let s = a.spread("rtt:a1>a2:p50").unwrap();
        assert_eq!((s.sd, s.n, s.of), (4.0, 10, SpreadOf::Intervals));
        let Some(Body::Mesh(kept)) = &a.body else { panic!() };
        assert_eq!(kept.tries[0].figures.and_then(|f| f.spread).map(|s| s.intervals), Some(10), "kept in the round");
        let c = linerate_report::compare(&a, &b, 5.0);
        assert!(!c.has_regression(), "-8 % and +10 % within a 5 % spread's band:\n{}", c.to_text());
        assert_eq!(c.rows.iter().filter(|r| r.within_noise).count(), 2, "{}", c.to_text());
        assert!(!linerate_report::compare(&a, &a, 5.0).has_regression(), "identical rounds");
        let c = linerate_report::compare(&a, &round(2, 4.5e8, 80.0), 5.0);
        assert!(c.has_regression() && c.to_text().contains("tput:a0>a1"), "{}", c.to_text());
    }

    #[test]
    fn a_round_is_kept_typed_and_its_matrix_reads_it_by_field() {
        let inv = inventory();
        let task = |test, from, to| Task { id: 0, test, from, to, attempt: 0 };
        let tries = vec![
            Try { task: task(0, 0, 1), start_s: 0.0, end_s: 1.0004, result: done(9e8, None) },
            Try { task: task(1, 1, 2), start_s: 0.0, end_s: 0.5, result: done(1e6, Some(80.0)) },
            Try {
                task: task(0, 2, 0),
                start_s: 1.0,
                end_s: 1.2,
                result: TaskResult::Failed { message: "reset".into() },
            },
        ];
        let r = RoundResult {
            round: 7,
            started: std::time::SystemTime::UNIX_EPOCH,
            tries,
            tally: Tally { done: 2, failed: 1, ..Tally::default() },
            down: Vec::new(),
            stopped: false,
        };
        let rep = to_report(&inv, &r);
        let names: Vec<String> = rep.metrics.iter().map(|m| m.name.to_string()).collect();
        assert_eq!(names, ["tput:a0>a1", "rtt:a1>a2:p50"]);
        let Some(Body::Mesh(round)) = &rep.body else { panic!("no round kept: {:?}", rep.body) };
        assert_eq!((round.round, round.agents.len(), round.tries[0].end_s), (7, 3, 1.0));
        assert_eq!(round.tries[2].status, "failed: reset");
        assert_eq!(rep.tables[0].rows[2][5], Cell::Null, "a failed try has no figures");
        assert_eq!(rep.params.agents.as_deref(), Some(&round.agents[..]));
        let m = linerate_report::mesh::matrices(&rep, None, &[]).unwrap_or_default();
        assert_eq!(m.len(), 2);
        assert_eq!((m[0].cells[0][1].value(), m[1].cells[1][2].value()), (Some(9e8), Some(80.0)));
        assert_eq!(m[0].cells[2][0].state, State::Failed("failed: reset".into()), "failed, not unmeasured");
        assert_eq!(m[0].cells[1][0].state, State::NotMeasured);
        assert!(linerate_report::mesh::same_mesh(&like(&inv), &rep), "the same mesh");
    }
}
