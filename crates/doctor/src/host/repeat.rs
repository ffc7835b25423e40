//! Repeating a micro-benchmark until its spread is known (issue 43: doctor's ceiling moved from
//! 18.6 to 5.4 Gbit/s within minutes on one host, from one 75 ms page-cache test with no repeat
//! and no spread). Each benchmark runs in short rounds: at least [`Repeat::min_rounds`], then
//! more until the median is known to a few percent or the budget is spent. It reports the
//! median round with the slowest and the fastest ([`Spread`]), computed by
//! [`linerate_model::stats`]. The decision ([`Repeat::more`]) is a pure function of the rates
//! so far and the time spent, and [`measure`] takes its clock and its rounds as arguments, so
//! both are tested on fake samples without a wall clock.

use linerate_model::stats;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A rate measured over several rounds: the median round, the slowest and the fastest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// The median round, bit/s.
    pub median_bps: f64,
    /// The slowest round, bit/s.
    pub low_bps: f64,
    /// The fastest round, bit/s.
    pub high_bps: f64,
    /// Rounds measured.
    pub rounds: u32,
}

impl Spread {
    /// The spread of `rates` (bit/s, one per round); `None` when there is none or one is not a
    /// finite, positive rate (a failed round).
    pub fn of(rates: &[f64]) -> Option<Spread> {
        if rates.iter().any(|r| *r <= 0.0) {
            return None;
        }
        Some(Spread {
            median_bps: stats::median(rates)?,
            low_bps: stats::percentile(rates, 0.0)?,
            high_bps: stats::percentile(rates, 100.0)?,
            rounds: u32::try_from(rates.len()).unwrap_or(u32::MAX),
        })
    }

    /// A spread through `f`, a rate that falls as each of its inputs falls (a ceiling computed
    /// from per-core rates): the median through the medians, the low end through the lows.
    pub fn map(&self, f: impl Fn(f64) -> f64) -> Spread {
        Spread { median_bps: f(self.median_bps), low_bps: f(self.low_bps), high_bps: f(self.high_bps), ..*self }
    }
}

/// When to stop repeating a micro-benchmark.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Repeat {
    /// Rounds always run (unless twice the budget is spent first: a starved machine).
    pub min_rounds: u32,
    /// Rounds never exceeded.
    pub max_rounds: u32,
    /// Wall time after which no round starts once `min_rounds` have run.
    pub budget: Duration,
    /// Relative standard error of the median (`MEDIAN_SE_FACTOR · sd / √n / median`) at which
    /// the median is known well enough to stop early.
    pub settled: f64,
}

impl Repeat {
    /// doctor's rule: at least 5 rounds, at most 40, up to 250 ms, or until the median's
    /// standard error is within 2 % of it.
    pub const DOCTOR: Repeat =
        Repeat { min_rounds: 5, max_rounds: 40, budget: Duration::from_millis(250), settled: 0.02 };

    /// The length of one round: the budget over twice the minimum rounds, so the minimum takes
    /// half the budget (25 ms of 250).
    pub fn round(&self) -> Duration {
        self.budget / (2 * self.min_rounds.max(1))
    }

    /// Whether to run another round, given the rates of the rounds so far and the wall time
    /// `spent` since the first began.
    pub fn more(&self, rates: &[f64], spent: Duration) -> bool {
        let n = u32::try_from(rates.len()).unwrap_or(u32::MAX);
        if n >= self.max_rounds {
            return false;
        }
        if n < self.min_rounds {
            return spent < self.budget * 2;
        }
        spent < self.budget && !self.is_settled(rates)
    }

    /// Whether the median of `rates` is known to [`Repeat::settled`].
    fn is_settled(&self, rates: &[f64]) -> bool {
        let n = rates.len() as u64;
        match (stats::median(rates), stats::std_dev(rates)) {
            (Some(m), Some(sd)) if m > 0.0 => {
                stats::standard_error(sd, n).is_some_and(|se| se * stats::MEDIAN_SE_FACTOR / m <= self.settled)
            }
            _ => false,
        }
    }
}

/// Runs `round` (one round of a benchmark, returning its rate in bit/s; `None` when it failed)
/// as `rule` says, with `clock` giving the time spent since the start. `None` if a round failed
/// or none ran.
pub fn measure(
    rule: &Repeat,
    mut clock: impl FnMut() -> Duration,
    mut round: impl FnMut() -> Option<f64>,
) -> Option<Spread> {
    let mut rates = Vec::new();
    while rule.more(&rates, clock()) {
        rates.push(round()?);
    }
    Spread::of(&rates)
}

/// [`measure`] on the wall clock.
pub fn timed(rule: &Repeat, round: impl FnMut() -> Option<f64>) -> Option<Spread> {
    let start = std::time::Instant::now();
    measure(rule, || start.elapsed(), round)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    const MS: Duration = Duration::from_millis(1);

    /// Runs `measure` on a virtual clock where each round takes `each` and yields the next of
    /// `rates` (cycling); returns the spread and the rounds run.
    fn run(rule: &Repeat, rates: &[f64], each: Duration) -> (Option<Spread>, usize) {
        let now = Cell::new(Duration::ZERO);
        let i = Cell::new(0usize);
        let s = measure(
            rule,
            || now.get(),
            || {
                now.set(now.get() + each);
                i.set(i.get() + 1);
                Some(rates[(i.get() - 1) % rates.len()])
            },
        );
        (s, i.get())
    }

    #[test]
    fn steady_rounds_stop_after_the_minimum() {
        let (s, n) = run(&Repeat::DOCTOR, &[10e9, 10.1e9, 9.9e9], 25 * MS);
        assert_eq!(n, 5, "the median of 5 steady rounds is known: no more");
        let s = s.unwrap();
        assert_eq!((s.low_bps, s.median_bps, s.high_bps, s.rounds), (9.9e9, 10e9, 10.1e9, 5));
    }

    #[test]
    fn noisy_rounds_go_on_until_the_budget_and_keep_the_whole_range() {
        // issue 43's two readings a few minutes apart, as rounds of one run
        let (s, n) = run(&Repeat::DOCTOR, &[18.6e9, 5.4e9, 12e9, 7e9], 25 * MS);
        assert_eq!(n, 10, "rounds start until 250 ms are spent (10 × 25 ms)");
        let s = s.unwrap();
        assert_eq!((s.low_bps, s.high_bps, s.rounds), (5.4e9, 18.6e9, 10));
        assert!((s.median_bps - 9.5e9).abs() < 1.0, "{s:?}");
    }

    #[test]
    fn the_round_cap_bounds_fast_noisy_rounds() {
        let (_, n) = run(&Repeat::DOCTOR, &[1e9, 3e9], MS);
        assert_eq!(n, 40);
    }

    #[test]
    fn a_starved_machine_stops_short_of_the_minimum_at_twice_the_budget() {
        let (s, n) = run(&Repeat::DOCTOR, &[1e9, 2e9], 200 * MS);
        assert_eq!(n, 3, "rounds start at 0, 200 and 400 ms, none at 600");
        assert_eq!(s.unwrap().rounds, 3);
    }

    #[test]
    fn a_failed_round_fails_the_measurement() {
        let i = Cell::new(0);
        let s = measure(
            &Repeat::DOCTOR,
            || Duration::ZERO,
            || {
                i.set(i.get() + 1);
                (i.get() < 3).then_some(1e9)
            },
        );
        assert_eq!((s, i.get()), (None, 3));
        assert_eq!(Spread::of(&[]), None);
        assert_eq!(Spread::of(&[1e9, 0.0]), None, "a round that moved nothing");
        assert_eq!(Spread::of(&[1e9, f64::NAN]), None);
    }

    #[test]
    fn a_spread_maps_through_a_rising_function() {
        let s = Spread { median_bps: 4.0, low_bps: 2.0, high_bps: 8.0, rounds: 7 };
        assert_eq!(s.map(|x| x * 2.0), Spread { median_bps: 8.0, low_bps: 4.0, high_bps: 16.0, rounds: 7 });
    }

    #[test]
    fn a_round_is_a_tenth_of_the_budget() {
        assert_eq!(Repeat::DOCTOR.round(), 25 * MS);
    }
}
