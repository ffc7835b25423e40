//! Round after round of a mesh, as `linerate mesh` runs them: one, or one each interval (the
//! next at once if one overran) until stopped, each told to an [`Observer`] with the run it is
//! stored as, and the last round's [`Verdict`] (its exit status).

use crate::inventory::Inventory;
use crate::round::{run_round, Agents, RoundResult, Try};
use crate::schedule::Tally;
use linerate_model::shutdown::Shutdown;
use linerate_report::RunReport;
use std::time::Instant;

/// What a mesh's rounds tell as they go (the CLI prints and stores).
pub trait Observer {
    /// The observer's error: it ends the rounds.
    type Error;

    /// A try of round `round` ended.
    fn tried(&mut self, round: u64, t: &Try);

    /// Round `r` ended; `run` is it as a stored run ([`crate::report::to_report`]).
    fn round(&mut self, r: &RoundResult, run: &RunReport) -> Result<(), Self::Error>;
}

/// How the last round went (the exit status of `linerate mesh`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Every test ran.
    AllRan,
    /// Some ran, some failed.
    SomeFailed,
    /// Tests failed and none ran.
    NoneRan,
}

impl Verdict {
    /// The verdict of a round whose tally is `t`.
    pub fn of(t: &Tally) -> Verdict {
        match (t.done, t.failed) {
            (0, f) if f > 0 => Verdict::NoneRan,
            (_, 0) => Verdict::AllRan,
            _ => Verdict::SomeFailed,
        }
    }
}

/// Runs `inv`'s rounds through `agents`, numbered from `first`: one, or with `every` one each
/// `every` (the next at once if one overran) until `stop`; `observer` sees each try and round.
pub fn run_rounds<O: Observer>(
    inv: &Inventory,
    agents: &dyn Agents,
    first: u64,
    every: Option<std::time::Duration>,
    stop: &Shutdown,
    observer: &mut O,
) -> Result<Verdict, O::Error> {
    let mut verdict = Verdict::AllRan;
    for round in first.. {
        let began = Instant::now();
        let r = run_round(inv, agents, round, stop, &mut |t| observer.tried(round, t));
        observer.round(&r, &crate::report::to_report(inv, &r))?;
        // Each failed test is on its line and in the stored run.
        verdict = Verdict::of(&r.tally);
        let Some(every) = every else { break };
        // Next round at its time (at once if this one overran), unless stopped meanwhile.
        if r.stopped || stop.wait_deadline(began + every) {
            break;
        }
    }
    Ok(verdict)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::round::tests::{fake, inventory};
    use linerate_model::shutdown::Stopper;
    use std::time::Duration;

    /// Every try and round told, the rounds' tallies; `stop_after` rounds, a stop.
    struct Told {
        tries: u64,
        rounds: Vec<(u64, u64, u64)>,
        stop_after: Option<(usize, Stopper)>,
    }

    impl Observer for Told {
        type Error = String;

        fn tried(&mut self, _: u64, _: &Try) {
            self.tries += 1;
        }

        fn round(&mut self, r: &RoundResult, run: &RunReport) -> Result<(), String> {
            assert_eq!(run.params.round, Some(r.round), "the stored run is the round's");
            self.rounds.push((r.round, r.tally.done, r.tally.failed));
            if let Some((_, s)) = self.stop_after.as_ref().filter(|(n, _)| *n == self.rounds.len()) {
                s.stop();
            }
            Ok(())
        }
    }

    #[test]
    fn rounds_run_once_or_at_their_interval_until_stopped_with_the_last_ones_verdict() {
        let inv = inventory(3);
        let mut told = Told { tries: 0, rounds: Vec::new(), stop_after: None };
        let v = run_rounds(&inv, &fake(1, None, 3), 7, None, &Shutdown::never(), &mut told).unwrap();
        assert_eq!((v, told.tries, told.rounds.as_slice()), (Verdict::AllRan, 9, &[(7, 9, 0)][..]), "one round");
        let stopper = Stopper::new();
        let mut told = Told { tries: 0, rounds: Vec::new(), stop_after: Some((2, stopper.clone())) };
        let every = Some(Duration::ZERO);
        let v = run_rounds(&inv, &fake(1, Some(2), 3), 1, every, &stopper.shutdown(), &mut told).unwrap();
        assert_eq!(told.rounds.iter().map(|r| r.0).collect::<Vec<_>>(), [1, 2], "round after round until the stop");
        assert_eq!(v, Verdict::SomeFailed, "agent 2 unreachable: {:?}", told.rounds);
        assert_eq!(Verdict::of(&Tally { failed: 3, ..Tally::default() }), Verdict::NoneRan);
    }
}
