//! What `linerate mesh` prints of a round (the CLI writes it to standard error): a line per
//! try as it ends, and the round's summary.

use crate::inventory::Inventory;
use crate::round::{RoundResult, TaskResult, Try};
use linerate_model::units::format_rate;

/// The line of try `t` of round `round`: the test, the pair, its figure or why it failed, and
/// when it ran in the round.
pub fn tried(inv: &Inventory, round: u64, t: &Try) -> String {
    let test = &inv.tests[t.task.test];
    let (a, b) = (&inv.agents[t.task.from].name, &inv.agents[t.task.to].name);
    let what = match &t.result {
        TaskResult::Done(m) => match m.latency_us {
            Some(l) => format!("p50 {:.0} us, p99 {:.0} us", l.p50, l.p99),
            None => format_rate(m.throughput_bps),
        },
        TaskResult::Unreachable { agent, message } => {
            format!("{} unreachable: {message}", inv.agents[*agent].name)
        }
        TaskResult::Failed { message } => format!("failed: {message}"),
        TaskResult::Down { agent } => format!("not tried: {} is down", inv.agents[*agent].name),
    };
    format!("linerate mesh: round {round}: {} {a} > {b}: {what} ({:.1}-{:.1} s)", test.name, t.start_s, t.end_s)
}

/// The summary of round `r`: its tally, the agents found down, and the stored run's id if it
/// was saved.
pub fn round_summary(inv: &Inventory, r: &RoundResult, saved: Option<&str>) -> String {
    let down = match r.down.as_slice() {
        [] => String::new(),
        d => format!("; down: {}", d.iter().map(|&d| inv.agents[d].name.as_str()).collect::<Vec<_>>().join(", ")),
    };
    format!(
        "linerate mesh: round {}: {} ran, {} failed ({} retries, {} waves){down}{}",
        r.round,
        r.tally.done,
        r.tally.failed,
        r.tally.retried,
        r.tally.waves,
        saved.map_or(String::new(), |id| format!("; saved as {id}"))
    )
}
