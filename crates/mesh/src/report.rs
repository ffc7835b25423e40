//! A round as a stored run ([`RunReport`] of kind `mesh`): a metric per test and ordered pair
//! (what `report compare` compares) and the `pairs` table, which is also the scheduler's
//! timeline (each try's start and end).

use crate::inventory::{class, Inventory};
use crate::round::{RoundResult, TaskResult};
use crate::schedule::Class;
use linerate_report::{Better, RunKind, RunReport, Table};
use serde_json::{json, Value};

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

/// The metric name of test `test` from `from` to `to` (and `:p50` for a round-trip test).
pub fn metric_name(test: &str, from: &str, to: &str, kind_class: Class) -> String {
    match kind_class {
        Class::Exclusive => format!("{test}:{from}>{to}"),
        Class::Shared => format!("{test}:{from}>{to}:p50"),
    }
}

/// Round `r` of `inv` as a run.
pub fn to_report(inv: &Inventory, r: &RoundResult) -> RunReport {
    let n = inv.agents.len();
    let mut rep = RunReport::new(
        RunKind::Mesh,
        format!(
            "mesh round {}: {n} agents, {} tests{}",
            r.round,
            inv.tests.len(),
            if r.stopped { " (stopped)" } else { "" }
        ),
    );
    rep.params.insert("round".into(), json!(r.round));
    rep.params.insert("agents".into(), json!(inv.agents.iter().map(|a| &a.name).collect::<Vec<_>>()));
    rep.params.insert(
        "tests".into(),
        json!(inv
            .tests
            .iter()
            .map(|t| json!({"name": t.name, "kind": t.kind.name(), "duration_s": t.duration.as_secs_f64(), "streams": t.streams, "both_ways": t.both_ways}))
            .collect::<Vec<_>>()),
    );
    rep.params.insert(
        "tally".into(),
        json!({"done": r.tally.done, "failed": r.tally.failed, "retried": r.tally.retried, "waves": r.tally.waves,
               "down": r.down.iter().map(|&a| &inv.agents[a].name).collect::<Vec<_>>(), "stopped": r.stopped}),
    );
    let mut rows = Vec::with_capacity(r.tries.len());
    for t in &r.tries {
        let test = &inv.tests[t.task.test];
        let (from, to) = (&inv.agents[t.task.from].name, &inv.agents[t.task.to].name);
        let num = |v: Option<f64>| v.map_or(Value::Null, |x| json!(x));
        let (status, tput, p50, p99, retr, loss) = match &t.result {
            TaskResult::Done(m) => {
                let c = class(test.kind);
                match c {
                    Class::Exclusive => {
                        rep.metric(&metric_name(&test.name, from, to, c), m.throughput_bps, "bit/s", Better::Higher)
                    }
                    Class::Shared => {
                        if let Some(l) = m.latency_us {
                            rep.metric(&metric_name(&test.name, from, to, c), l.p50, "us", Better::Lower);
                        }
                    }
                }
                (
                    "ok".to_string(),
                    json!(m.throughput_bps),
                    num(m.latency_us.map(|l| l.p50)),
                    num(m.latency_us.map(|l| l.p99)),
                    json!(m.retransmits),
                    num(m.loss_pct),
                )
            }
            TaskResult::Unreachable { agent, message } => (
                format!("unreachable {}: {message}", inv.agents[*agent].name),
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Null,
            ),
            TaskResult::Failed { message } => {
                (format!("failed: {message}"), Value::Null, Value::Null, Value::Null, Value::Null, Value::Null)
            }
        };
        rows.push(vec![
            json!(test.name),
            json!(from),
            json!(to),
            json!(t.task.attempt),
            json!(status),
            tput,
            p50,
            p99,
            retr,
            loss,
            json!((t.start_s * 1000.0).round() / 1000.0),
            json!((t.end_s * 1000.0).round() / 1000.0),
        ]);
    }
    rep.tables.push(Table {
        title: "pairs".into(),
        columns: PAIR_COLUMNS.iter().map(|c| c.to_string()).collect(),
        rows,
    });
    rep
}
