//! A `linerate mesh` round ([`MeshRound`]) → run: the round kept whole as the run's body, a
//! metric per test and ordered pair that measured (what `report compare` compares:
//! [`MetricId::pair`], the figure [`MeshTest::figure`] says, with the test's own spread over its
//! intervals), and the `pairs` table, which is also the scheduler's timeline (each try's start
//! and end).

use crate::model::*;
use linerate_model::doc::mesh::{MeshRound, MeshTest, PairFigure};
use linerate_model::metric::MetricId;

/// The columns of the `pairs` table.
pub const PAIR_COLUMNS: [&str; 12] = [
    "test",
    "from",
    "to",
    "attempt",
    "status",
    "throughput (bit/s)",
    "p50 (us)",
    "p99 (us)",
    "retransmits",
    "loss (%)",
    "start (s)",
    "end (s)",
];

/// Round `round` as a run.
pub fn from_mesh(round: &MeshRound) -> RunReport {
    let mut rep = RunReport::new(
        RunKind::Mesh,
        format!(
            "mesh round {}: {} agents, {} tests{}",
            round.round,
            round.agents.len(),
            round.tests.len(),
            if round.tally.stopped { " (stopped)" } else { "" }
        ),
    );
    rep.params = RunParams {
        round: Some(round.round),
        agents: Some(round.agents.clone()),
        tests: Some(round.tests.clone()),
        tally: Some(round.tally.clone()),
        ..RunParams::default()
    };
    let figure_of =
        |test: &str| round.tests.iter().find(|t| t.name == test).map_or(PairFigure::Throughput, MeshTest::figure);
    let mut rows = Vec::with_capacity(round.tries.len());
    for t in &round.tries {
        if let Some(f) = &t.figures {
            let figure = figure_of(&t.test);
            let name = MetricId::pair(&t.test, &t.from, &t.to, figure);
            let value = match figure {
                PairFigure::Throughput => Some((f.throughput_bps, "bit/s", Better::Higher)),
                PairFigure::LatencyP50 => f.p50_us.map(|p50| (p50, "us", Better::Lower)),
            };
            if let Some((v, unit, better)) = value {
                rep.metric(name.clone(), v, unit, better);
                // the test's own spread over its intervals, as a bench run's (issue 43)
                if let Some((sd, n)) = f.spread.and_then(|s| s.of(figure).map(|sd| (sd, s.intervals))) {
                    rep.spreads.retain(|s| s.metric != name);
                    rep.spreads.push(Spread { metric: name, sd, n, of: SpreadOf::Intervals });
                }
            }
        }
        let f = t.figures.as_ref();
        rows.push(vec![
            Cell::from(t.test.as_str()),
            Cell::from(t.from.as_str()),
            Cell::from(t.to.as_str()),
            Cell::from(t.attempt),
            Cell::from(t.status.as_str()),
            Cell::num(f.map(|f| f.throughput_bps)),
            Cell::num(f.and_then(|f| f.p50_us)),
            Cell::num(f.and_then(|f| f.p99_us)),
            f.map_or(Cell::Null, |f| Cell::from(f.retransmits)),
            Cell::num(f.and_then(|f| f.loss_pct)),
            Cell::Number(t.start_s),
            Cell::Number(t.end_s),
        ]);
    }
    rep.tables.push(Table {
        title: "pairs".into(),
        columns: PAIR_COLUMNS.iter().map(|c| c.to_string()).collect(),
        rows,
    });
    rep.body = Some(Body::Mesh(Box::new(round.clone())));
    rep
}
