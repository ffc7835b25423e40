//! One `linerate mesh` round as a typed document ([`MeshRound`]): the agents and tests of the
//! inventory, the round's tally, and every try of every ordered pair with its figures. Built by
//! `linerate-mesh` from a finished round, kept whole in the stored run, and read by
//! `linerate-report`'s mesh matrix by field. The metric a pair's figure is compared by is named
//! by [`crate::metric::MetricId::pair`] alone, with the figure [`MeshTest::figure`] says.

use serde::{Deserialize, Serialize};

/// One round over a fleet's ordered pairs.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct MeshRound {
    /// The round's number.
    pub round: u64,
    /// The agents' names, in inventory order.
    pub agents: Vec<String>,
    /// The inventory's tests.
    pub tests: Vec<MeshTest>,
    /// How the round went.
    pub tally: MeshTally,
    /// Every try of every pair, in the order they finished.
    pub tries: Vec<MeshTry>,
}

/// A test of the inventory.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct MeshTest {
    /// Its name.
    pub name: String,
    /// What it measures (`tcp-stream`, `tcp-rr`, ...).
    pub kind: String,
    /// How long it runs, seconds.
    pub duration_s: f64,
    /// Parallel connections.
    pub streams: u64,
    /// Run from each end of a pair.
    pub both_ways: bool,
    /// A latency test measured beside the throughput tests on purpose (the inventory's
    /// `under_load`); otherwise a latency test never shares an agent with a throughput test.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub under_load: bool,
}

/// The round's counts.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct MeshTally {
    /// Tasks that measured.
    pub done: u64,
    /// Tasks that failed for good.
    pub failed: u64,
    /// Tries that were retried.
    pub retried: u64,
    /// Waves of tasks run at once.
    pub waves: u64,
    /// Agents found down.
    pub down: Vec<String>,
    /// The round was stopped before its end.
    pub stopped: bool,
}

/// How a try's status starts when it was not tried because an agent was down for the round
/// (`agent down: NAME`): the matrix draws it as such, not as "not measured".
pub const AGENT_DOWN: &str = "agent down";

/// One try of a test from one agent to another.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct MeshTry {
    /// The test's name.
    pub test: String,
    /// The agent that ran it.
    pub from: String,
    /// The agent it measured against.
    pub to: String,
    /// Attempt, from 0.
    pub attempt: u32,
    /// `ok`, `unreachable AGENT: ...`, `failed: ...` or `agent down: AGENT` ([`AGENT_DOWN`]).
    pub status: String,
    /// Its figures, when it ran.
    pub figures: Option<PairFigures>,
    /// Seconds from the round's start to the try's start.
    pub start_s: f64,
    /// ... and to its end.
    pub end_s: f64,
}

/// What a try measured.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Default)]
pub struct PairFigures {
    /// Goodput, bit/s.
    pub throughput_bps: f64,
    /// Median latency, µs (round-trip tests).
    pub p50_us: Option<f64>,
    /// 99th percentile latency, µs.
    pub p99_us: Option<f64>,
    /// Retransmitted segments.
    pub retransmits: u64,
    /// Datagram loss, percent (UDP).
    pub loss_pct: Option<f64>,
    /// How the figures varied over the test's reporting intervals: the pair's own noise, as a
    /// bench run's (issue 43). Absent from an older agent, or with fewer than two intervals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread: Option<PairSpread>,
}

/// How a test's figures varied from one reporting interval to the next (warm-up and a partial
/// last interval left out): standard deviations (n − 1) over `intervals` intervals.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PairSpread {
    /// Intervals counted (2 or more).
    pub intervals: u64,
    /// Of the goodput, bit/s.
    pub throughput_bps: f64,
    /// Of the median round trip, µs (tcp-rr): the intervals' transaction rates' relative
    /// spread times the median, since a closed loop's round trip is the inverse of its rate.
    pub p50_us: Option<f64>,
}

impl PairSpread {
    /// Whether every figure is finite and not negative (a peer's document is checked before use).
    pub fn is_valid(&self) -> bool {
        let ok = |x: f64| x.is_finite() && x >= 0.0;
        self.intervals >= 2 && ok(self.throughput_bps) && self.p50_us.is_none_or(ok)
    }

    /// The spread of `figure`, in its unit.
    pub fn of(&self, figure: PairFigure) -> Option<f64> {
        match figure {
            PairFigure::Throughput => Some(self.throughput_bps),
            PairFigure::LatencyP50 => self.p50_us,
        }
    }
}

/// Which figure of a pair its metric carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PairFigure {
    /// Goodput (tests that need the path to themselves).
    Throughput,
    /// Median latency (round-trip tests, which share the path).
    LatencyP50,
}

impl PairFigure {
    /// Both, in the order a reader looks for a pair's metric.
    pub const ALL: [PairFigure; 2] = [PairFigure::Throughput, PairFigure::LatencyP50];
}

impl MeshTest {
    /// The figure a pair of this test is compared by: the median round trip for a round-trip
    /// test (`tcp-rr`), which shares the path, else the goodput.
    pub fn figure(&self) -> PairFigure {
        if self.kind == "tcp-rr" {
            PairFigure::LatencyP50
        } else {
            PairFigure::Throughput
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_trip_test_is_compared_by_its_median_the_others_by_their_goodput() {
        let rtt = MeshTest { kind: "tcp-rr".into(), ..MeshTest::default() };
        let tput = MeshTest { kind: "tcp-stream".into(), ..MeshTest::default() };
        assert_eq!((rtt.figure(), tput.figure()), (PairFigure::LatencyP50, PairFigure::Throughput));
    }
}
