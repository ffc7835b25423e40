//! A mesh round's scheduler, without I/O: which tests start when, so that every ordered pair of
//! agents runs every test once per round, no agent ever takes part in two throughput tests at
//! once, and no latency test runs beside a throughput test on either of its agents (a
//! throughput test on a shared host measures the other test, and a latency test beside one
//! measures the queue it builds: issue 33 saw p99 308–1,053 µs against 34 µs idle).
//!
//! The classes are pScheduler's, declared per test and only read here:
//! [`Class::Exclusive`] (throughput) has both its agents to itself; [`Class::Normal`] (latency)
//! may run beside other latency tests but never beside an exclusive one on either agent;
//! [`Class::Background`] (latency measured under load on purpose, the inventory's
//! `under_load = true`) runs beside anything, one per agent at a time.
//!
//! Exclusive and normal tests run in **waves** with synchronised starts: a wave begins when the
//! previous one has ended entirely, and takes, in order, every pending test whose two agents are
//! free in this wave (at most `max_parallel` exclusive, `max_shared` normal). Waves alternate:
//! a throughput wave, then a latency wave while latency tests are pending; a wave's free agents
//! (an odd fleet's resting one, an agent back from backoff) take tests of the other class, so
//! nothing waits that could run. The order is the round-robin "circle" tournament: for N agents,
//! N − 1 rounds of N / 2 disjoint pairs (N rounds with one agent resting when N is odd), once per
//! direction and test, so a wave is one such round and every agent is busy in every wave.
//! A background test (latency under load) is under load for the whole of it (issue 43: one was
//! stored "under load" from a wave where neither of its agents carried traffic): it starts only
//! with a throughput wave, on a pair whose two agents each run a throughput test of that wave
//! at least as long as it, so both carry traffic from its start to its end; one per agent at a
//! time. The inventory refuses under-load tests the throughput tests cannot cover
//! ([`crate::inventory`]); one left when no throughput test is (agents down, retries) is given
//! up ([`GiveUp::NoLoad`]), never run unloaded.
//!
//! An agent that cannot be reached ([`Outcome::Unreachable`]) is left alone for a backoff that
//! doubles each time, its test tried again after it; after `retries` failures in a row it is
//! down for the rest of the round, and its remaining tests fail at once (so one dead agent among
//! a thousand costs a few tries, not a thousand time-outs).
//! The round's order is rotated by the round number, so rounds cut short (SIGTERM) cover the
//! pairs evenly over time. Time is whatever [`Instant`]s the caller passes in.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// An agent: its index in the inventory.
pub type AgentId = usize;

/// A test's scheduling class (pScheduler's `exclusive`, `normal`, `background`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Throughput: never beside another exclusive or a normal test on either agent.
    Exclusive,
    /// Latency: beside other normal tests (one per agent at a time), never beside an exclusive
    /// test on either agent.
    Normal,
    /// Latency under load, on purpose: beside anything (one per agent at a time).
    Background,
}

/// One test of the inventory as the scheduler sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TestPlan {
    /// Exclusive or shared.
    pub class: Class,
    /// Run it both ways (a → b and b → a), or only from the lower-numbered agent of each pair's
    /// first direction.
    pub both_ways: bool,
    /// How long it runs: a background test starts only beside throughput tests at least as long.
    pub duration: Duration,
}

/// Why a task ended without being tried ([`Scheduler::poll_given_up`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveUp {
    /// This agent is down for the round.
    AgentDown(AgentId),
    /// A background (under load) test with no throughput test left to run beside.
    NoLoad,
}

/// A test to run: test `test` of the inventory from agent `from` (the client) to agent `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Task {
    /// Unique in the round.
    pub id: u32,
    /// Index of the test in the inventory.
    pub test: usize,
    /// The agent that runs the client side.
    pub from: AgentId,
    /// The agent it measures against.
    pub to: AgentId,
    /// 0 for the first try.
    pub attempt: u32,
}

/// How a task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It ran (its result is the runner's to keep).
    Done,
    /// This agent could not be reached (or refused to start it): the agent is left alone for
    /// a backoff, then the task is tried again; after `retries` such failures in a row the agent
    /// is down for the rest of the round and its remaining tasks fail without being tried.
    Unreachable(AgentId),
    /// It ran and failed: recorded, not tried again.
    Failed,
}

/// The scheduler's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most exclusive tests in one wave.
    pub max_parallel: usize,
    /// Most latency tests (normal or background) in one wave.
    pub max_shared: usize,
    /// Tries after the first failure of an agent before it counts as down for the round.
    pub retries: u32,
    /// The first retry's wait; doubled for each further one.
    pub backoff: Duration,
    /// The longest wait between tries.
    pub max_backoff: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_parallel: 64,
            max_shared: 64,
            retries: 3,
            backoff: Duration::from_secs(5),
            max_backoff: Duration::from_secs(120),
        }
    }
}

/// What the caller should do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Poll {
    /// Start these now, together.
    Start(Vec<Task>),
    /// Nothing to start before this time (or before a running task ends, if `None`).
    Wait(Option<Instant>),
    /// Every task has ended.
    Done,
}

/// How the round went so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Tasks that ran.
    pub done: u64,
    /// Tasks that failed, those of agents down included.
    pub failed: u64,
    /// Tries that were repeated.
    pub retried: u64,
    /// Agents found down in this round.
    pub down: u64,
    /// Waves of exclusive and normal tests started (background tests run beside them).
    pub waves: u64,
}

/// How far ahead of the first pending task a wave looks for one that fits: enough to fill a
/// wave from a circle-ordered queue with retries mixed in, without scanning a million tasks.
const LOOKAHEAD_PER_AGENT: usize = 4;

#[derive(Debug, Default)]
struct Queue {
    pending: VecDeque<Task>,
    running: HashMap<u32, Task>,
}

impl Queue {
    /// Adds to a wave: in order, pending tasks that `fit` and whose agents are not `held` and not
    /// yet `taken`, up to `max`, looking at most `window` tasks ahead; marks their agents taken.
    fn wave(
        &mut self,
        taken: &mut [bool],
        held: &[Option<Instant>],
        max: usize,
        window: usize,
        fit: impl Fn(&Task) -> bool,
    ) -> Vec<Task> {
        let free = |taken: &[bool], a: AgentId| !taken[a] && held[a].is_none();
        let mut n_free = (0..taken.len()).filter(|&a| free(taken, a)).count();
        let mut out = Vec::new();
        let (mut i, mut seen) = (0, 0);
        while i < self.pending.len() && out.len() < max && n_free >= 2 && seen < window {
            let t = self.pending[i];
            seen += 1;
            if free(taken, t.from) && free(taken, t.to) && fit(&t) {
                taken[t.from] = true;
                taken[t.to] = true;
                n_free -= 2;
                self.running.insert(t.id, t);
                out.push(t);
                let _ = self.pending.remove(i);
            } else {
                i += 1;
            }
        }
        out
    }

    fn idle(&self) -> bool {
        self.pending.is_empty() && self.running.is_empty()
    }
}

/// One round of a mesh.
#[derive(Debug)]
pub struct Scheduler {
    limits: Limits,
    agents: usize,
    exclusive: Queue,
    normal: Queue,
    background: Queue,
    /// The next foreground wave starts with latency tests (waves alternate).
    latency_turn: bool,
    /// Per agent: failures in a row, left alone until, down for the round.
    fails: Vec<u32>,
    hold: Vec<Option<Instant>>,
    down: Vec<bool>,
    /// The agents with a hold.
    held: Vec<AgentId>,
    /// Each test's plan (durations and classes).
    plans: Vec<TestPlan>,
    /// Tasks ended without a try, not yet polled.
    given_up: Vec<(Task, GiveUp)>,
    tally: Tally,
}

/// The circle method's rounds for `n` agents: each a list of disjoint pairs (with one agent
/// resting when `n` is odd), together every unordered pair exactly once.
pub fn circle(n: usize) -> Vec<Vec<(AgentId, AgentId)>> {
    if n < 2 {
        return Vec::new();
    }
    let m = n + n % 2; // a resting "agent" when odd
    let mut rounds = Vec::with_capacity(m - 1);
    for r in 0..m - 1 {
        // position 0 is fixed; the others rotate by r
        let at = |p: usize| if p == 0 { 0 } else { 1 + (p - 1 + r) % (m - 1) };
        let mut pairs = Vec::with_capacity(m / 2);
        for i in 0..m / 2 {
            let (a, b) = (at(i), at(m - 1 - i));
            if a < n && b < n {
                // the lower agent is the client when the sum is odd: each agent is the client
                // in about half its pairs
                let (lo, hi) = (a.min(b), a.max(b));
                pairs.push(if (lo + hi) % 2 == 1 { (lo, hi) } else { (hi, lo) });
            }
        }
        rounds.push(pairs);
    }
    rounds
}

impl Scheduler {
    /// Round number `round` of `tests` among `agents` agents.
    pub fn new(agents: usize, tests: &[TestPlan], limits: Limits, round: u64) -> Scheduler {
        let rounds = circle(agents);
        // Units of order: (test, direction, circle round); rotated by the round number.
        let mut units: Vec<(usize, bool, usize)> = Vec::new();
        for (ti, t) in tests.iter().enumerate() {
            for reverse in [false, true].into_iter().take(if t.both_ways { 2 } else { 1 }) {
                units.extend((0..rounds.len()).map(|r| (ti, reverse, r)));
            }
        }
        let mut s = Scheduler {
            limits,
            agents,
            exclusive: Queue::default(),
            normal: Queue::default(),
            background: Queue::default(),
            latency_turn: false,
            fails: vec![0; agents],
            hold: vec![None; agents],
            down: vec![false; agents],
            held: Vec::new(),
            plans: tests.to_vec(),
            given_up: Vec::new(),
            tally: Tally::default(),
        };
        if units.is_empty() {
            return s;
        }
        let shift = (round % units.len() as u64) as usize;
        units.rotate_left(shift);
        let mut id = 0u32;
        for (ti, reverse, r) in units {
            for &(a, b) in &rounds[r] {
                let (from, to) = if reverse { (b, a) } else { (a, b) };
                let task = Task { id, test: ti, from, to, attempt: 0 };
                id += 1;
                match tests[ti].class {
                    Class::Exclusive => s.exclusive.pending.push_back(task),
                    Class::Normal => s.normal.pending.push_back(task),
                    Class::Background => s.background.pending.push_back(task),
                }
            }
        }
        s
    }

    /// Tasks in the round, ended or not.
    pub fn len(&self) -> usize {
        [&self.exclusive, &self.normal, &self.background]
            .iter()
            .map(|q| q.pending.len() + q.running.len())
            .sum::<usize>()
            + (self.tally.done + self.tally.failed) as usize
    }

    /// Whether the round has no task at all (fewer than two agents, or no test).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The tally so far.
    pub fn tally(&self) -> Tally {
        self.tally
    }

    /// What to do at `now`. Call it again after each [`Scheduler::handle_done`] and when the
    /// time it named has come.
    pub fn poll(&mut self, now: Instant) -> Poll {
        let window = LOOKAHEAD_PER_AGENT * self.agents.max(8);
        let hold = &mut self.hold;
        self.held.retain(|&a| {
            let keep = hold[a].is_some_and(|t| t > now);
            if !keep {
                hold[a] = None;
            }
            keep
        });
        let mut start = Vec::new();
        // A wave starts only when the last one has ended entirely: synchronised starts. Exclusive
        // and normal tests share the waves, so a latency test never runs beside a throughput test
        // on either of its agents.
        let foreground_busy = !self.exclusive.running.is_empty() || !self.normal.running.is_empty();
        let foreground_pending = !self.exclusive.pending.is_empty() || !self.normal.pending.is_empty();
        if !foreground_busy && foreground_pending {
            let mut taken = vec![false; self.agents];
            let (max_x, max_n) = (self.limits.max_parallel.max(1), self.limits.max_shared.max(1));
            let latency_first = self.latency_turn && !self.normal.pending.is_empty();
            if latency_first {
                start.extend(self.normal.wave(&mut taken, &self.hold, max_n, window, |_| true));
                start.extend(self.exclusive.wave(&mut taken, &self.hold, max_x, window, |_| true));
            } else {
                start.extend(self.exclusive.wave(&mut taken, &self.hold, max_x, window, |_| true));
                start.extend(self.normal.wave(&mut taken, &self.hold, max_n, window, |_| true));
            }
            self.latency_turn = !latency_first;
            self.tally.waves += u64::from(!start.is_empty());
        }
        // Background tests start with the throughput tests that load both their agents.
        if !start.is_empty() && !self.background.pending.is_empty() {
            let mut load = vec![Duration::ZERO; self.agents];
            for t in start.iter().filter(|t| self.plans[t.test].class == Class::Exclusive) {
                load[t.from] = self.plans[t.test].duration;
                load[t.to] = self.plans[t.test].duration;
            }
            let mut taken = vec![false; self.agents];
            for t in self.background.running.values() {
                taken[t.from] = true;
                taken[t.to] = true;
            }
            for (a, d) in load.iter().enumerate() {
                taken[a] |= d.is_zero();
            }
            // both agents loaded at least as long as the test (else it waits for a longer wave)
            let plans = &self.plans;
            let fit = |t: &Task| load[t.from].min(load[t.to]) >= plans[t.test].duration;
            let max = self.limits.max_shared.max(1);
            start.extend(self.background.wave(&mut taken, &self.hold, max, window, fit));
        }
        let no_load = self.exclusive.idle();
        if no_load && !self.background.pending.is_empty() {
            // no throughput test left to run beside: never run one unloaded
            for t in std::mem::take(&mut self.background.pending) {
                self.tally.failed += 1;
                self.given_up.push((t, GiveUp::NoLoad));
            }
        }
        if !start.is_empty() {
            return Poll::Start(start);
        }
        let all = [&self.exclusive, &self.normal, &self.background];
        if all.iter().all(|q| q.idle()) {
            return Poll::Done;
        }
        // Waiting for a running task to end, or for an agent's backoff to pass.
        Poll::Wait(self.held.iter().filter_map(|&a| self.hold[a]).min())
    }

    /// Task `id` ended at `now` with `outcome`. Unknown or already ended ids are ignored.
    pub fn handle_done(&mut self, id: u32, outcome: Outcome, now: Instant) {
        let Some((task, queue)) = [&mut self.exclusive, &mut self.normal, &mut self.background]
            .into_iter()
            .enumerate()
            .find_map(|(k, q)| q.running.remove(&id).map(|t| (t, k)))
        else {
            return;
        };
        match outcome {
            Outcome::Done => {
                self.tally.done += 1;
                self.fails[task.from] = 0;
                self.fails[task.to] = 0;
            }
            Outcome::Failed => self.tally.failed += 1,
            Outcome::Unreachable(a) if a != task.from && a != task.to => self.tally.failed += 1,
            Outcome::Unreachable(a) => {
                self.fails[a] += 1;
                if self.fails[a] > self.limits.retries {
                    self.tally.failed += 1;
                    self.mark_down(a);
                    return;
                }
                self.tally.retried += 1;
                let k = self.fails[a] - 1;
                let wait = self.limits.backoff.saturating_mul(1 << k.min(16)).min(self.limits.max_backoff);
                if self.hold[a].replace(now + wait).is_none() {
                    self.held.push(a);
                }
                // first in line once the agent is back, so a retry does not go to the round's end
                let again = Task { attempt: task.attempt + 1, ..task };
                let q = match queue {
                    0 => &mut self.exclusive,
                    1 => &mut self.normal,
                    _ => &mut self.background,
                };
                q.pending.push_front(again);
            }
        }
    }

    /// Agent `a` is down for the round: its pending tasks fail now.
    fn mark_down(&mut self, a: AgentId) {
        if std::mem::replace(&mut self.down[a], true) {
            return;
        }
        self.tally.down += 1;
        self.hold[a] = None;
        self.held.retain(|&h| h != a);
        for q in [&mut self.exclusive, &mut self.normal, &mut self.background] {
            let (gone, kept): (Vec<Task>, Vec<Task>) = q.pending.drain(..).partition(|t| t.from == a || t.to == a);
            q.pending = kept.into();
            self.tally.failed += gone.len() as u64;
            self.given_up.extend(gone.into_iter().map(|t| (t, GiveUp::AgentDown(a))));
        }
    }

    /// Tasks ended without a try since the last call (counted failed in the tally): an agent
    /// down's, or an under-load test's with no throughput left. The caller records them as
    /// failed tries, so a round's tries and its tally agree.
    pub fn poll_given_up(&mut self) -> Vec<(Task, GiveUp)> {
        std::mem::take(&mut self.given_up)
    }

    /// Agents found down so far.
    pub fn down(&self) -> impl Iterator<Item = AgentId> + '_ {
        self.down.iter().enumerate().filter(|(_, d)| **d).map(|(a, _)| a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BinaryHeap, HashMap, HashSet};

    const S10: Duration = Duration::from_secs(10);
    const THROUGHPUT: TestPlan = TestPlan { class: Class::Exclusive, both_ways: true, duration: S10 };
    const LATENCY: TestPlan = TestPlan { class: Class::Normal, both_ways: false, duration: S10 };
    const UNDER_LOAD: TestPlan = TestPlan { class: Class::Background, both_ways: false, duration: S10 };
    const ONE_WAY: TestPlan = TestPlan { class: Class::Exclusive, both_ways: false, duration: S10 };

    #[test]
    fn the_circle_covers_every_pair_once_in_disjoint_rounds() {
        for n in [2, 3, 6, 7, 16, 101] {
            let rounds = circle(n);
            assert_eq!(rounds.len(), if n % 2 == 0 { n - 1 } else { n });
            let mut seen = HashSet::new();
            for r in &rounds {
                let mut busy = HashSet::new();
                for &(a, b) in r {
                    assert!(a != b && a < n && b < n);
                    assert!(busy.insert(a) && busy.insert(b), "an agent twice in one round (n = {n})");
                    assert!(seen.insert((a.min(b), a.max(b))), "a pair twice (n = {n})");
                }
                assert_eq!(r.len(), n / 2, "every agent but the resting one is busy");
            }
            assert_eq!(seen.len(), n * (n - 1) / 2);
            // each agent is the client about half the time
            let mut client = vec![0usize; n];
            rounds.iter().flatten().for_each(|&(a, _)| client[a] += 1);
            assert!(client.iter().all(|&c| c + 1 >= (n - 1) / 2 && c <= n / 2 + 1), "{client:?}");
        }
    }

    /// What a simulated round did.
    struct Sim {
        /// (start, end, task, outcome) of every try, virtual nanoseconds.
        tries: Vec<(u64, u64, Task, Outcome)>,
        tally: Tally,
        end: u64,
        /// Tasks ended without a try, and when.
        given_up: Vec<(u64, Task, GiveUp)>,
    }

    /// Runs a round on a virtual clock: every try takes `dur(task)` ns; `outcome` decides how it
    /// ends.
    fn simulate(
        agents: usize,
        tests: &[TestPlan],
        limits: Limits,
        round: u64,
        dur: impl Fn(&Task) -> u64,
        outcome: impl Fn(&Task) -> Outcome,
    ) -> Sim {
        let origin = Instant::now();
        let at = |ns: u64| origin + Duration::from_nanos(ns);
        let mut s = Scheduler::new(agents, tests, limits, round);
        let mut now = 0u64;
        let mut ends: BinaryHeap<std::cmp::Reverse<(u64, u32)>> = BinaryHeap::new();
        let mut started: HashMap<u32, (u64, Task)> = HashMap::new();
        let mut tries = Vec::new();
        let mut given_up = Vec::new();
        for _ in 0..50_000_000 {
            let poll = s.poll(at(now));
            given_up.extend(s.poll_given_up().into_iter().map(|(t, g)| (now, t, g)));
            match poll {
                Poll::Start(ts) => {
                    for t in ts {
                        assert!(started.insert(t.id, (now, t)).is_none(), "started twice while running");
                        ends.push(std::cmp::Reverse((now + dur(&t), t.id)));
                    }
                }
                Poll::Done => {
                    assert!(ends.is_empty());
                    return Sim { tries, tally: s.tally(), end: now, given_up };
                }
                Poll::Wait(until) => {
                    let next_end = ends.peek().map(|r| r.0 .0);
                    let until = until.map(|u| u.duration_since(origin).as_nanos() as u64);
                    let t = match (next_end, until) {
                        (Some(e), Some(u)) => e.min(u),
                        (Some(e), None) => e,
                        (None, Some(u)) => u,
                        (None, None) => panic!("waiting for nothing"),
                    };
                    assert!(t >= now);
                    now = t;
                    while let Some(std::cmp::Reverse((e, id))) = ends.peek().copied() {
                        if e > now {
                            break;
                        }
                        ends.pop();
                        let (st, task) = started.remove(&id).unwrap();
                        let o = outcome(&task);
                        tries.push((st, e, task, o));
                        s.handle_done(id, o, at(now));
                        given_up.extend(s.poll_given_up().into_iter().map(|(t, g)| (now, t, g)));
                    }
                }
            }
        }
        panic!("the round did not finish");
    }

    /// No agent in two exclusive tries at once, nor in a normal (latency) try while in an
    /// exclusive one; returns how many exclusive tries each agent had.
    fn assert_no_overlap(sim: &Sim, tests: &[TestPlan], agents: usize) -> Vec<u64> {
        let mut per: Vec<Vec<(u64, u64, Class)>> = vec![Vec::new(); agents];
        for (s, e, t, _) in &sim.tries {
            let class = tests[t.test].class;
            if class != Class::Background {
                per[t.from].push((*s, *e, class));
                per[t.to].push((*s, *e, class));
            }
        }
        for (a, spans) in per.iter_mut().enumerate() {
            spans.sort_by_key(|&(s, e, _)| (s, e));
            for (i, x) in spans.iter().enumerate() {
                for y in &spans[i + 1..] {
                    let either = x.2 == Class::Exclusive || y.2 == Class::Exclusive;
                    assert!(!either || y.0 >= x.1, "agent {a} double-booked: {x:?} and {y:?}");
                }
            }
        }
        per.iter().map(|p| p.iter().filter(|s| s.2 == Class::Exclusive).count() as u64).collect()
    }

    #[test]
    fn a_round_of_six_agents_runs_every_pair_both_ways_in_waves_without_overlap() {
        let tests = [THROUGHPUT, LATENCY];
        let sim = simulate(6, &tests, Limits::default(), 0, |t| if t.test == 0 { 10 } else { 4 }, |_| Outcome::Done);
        assert_eq!(sim.tally, Tally { done: 30 + 15, failed: 0, retried: 0, down: 0, waves: 15 });
        let per = assert_no_overlap(&sim, &tests, 6);
        assert!(per.iter().all(|&n| n == 10), "each agent in 2 × 5 throughput tests: {per:?}");
        let ordered: HashSet<(usize, usize)> =
            sim.tries.iter().filter(|(_, _, t, _)| t.test == 0).map(|(_, _, t, _)| (t.from, t.to)).collect();
        assert_eq!(ordered.len(), 30, "every ordered pair");
        // 10 throughput waves of 10 ns and 5 latency waves of 4 ns, back to back, alternating
        assert_eq!(sim.end, 10 * 10 + 5 * 4);
        let starts: HashSet<u64> = sim.tries.iter().filter(|(_, _, t, _)| t.test == 0).map(|(s, _, _, _)| *s).collect();
        assert_eq!(starts.len(), 10, "each wave's tests start together");
        assert!(sim.tries.iter().any(|(s, _, t, _)| t.test == 1 && *s == 10), "the first latency wave is second");
    }

    /// Issue 33: a latency test never beside a throughput test on either of its agents, however
    /// the waves fall (odd fleets with a resting agent, a dead agent's backoff holes) — unless
    /// the inventory asks for it under load, when it runs beside them.
    #[test]
    fn latency_never_runs_beside_throughput_on_its_agents_unless_asked_under_load() {
        for n in [2, 3, 5, 6, 7, 12] {
            let tests = [THROUGHPUT, LATENCY, ONE_WAY, LATENCY];
            let dead = |t: &Task| if t.from == 1 && t.attempt == 0 { Outcome::Unreachable(1) } else { Outcome::Done };
            let limits = Limits { backoff: Duration::from_nanos(7), ..Limits::default() };
            let sim = simulate(n, &tests, limits, 3, |t| 5 + (t.id as u64 % 4) * 3, dead);
            let pairs = (n * (n - 1) / 2) as u64;
            assert_eq!(sim.tally.done, 2 * pairs + pairs + pairs + pairs, "n = {n}");
            assert_no_overlap(&sim, &tests, n);
        }
        // under load on purpose: beside the throughput waves, from the start
        let tests = [THROUGHPUT, UNDER_LOAD];
        let sim = simulate(6, &tests, Limits::default(), 0, |_| 10, |_| Outcome::Done);
        assert_eq!((sim.tally.done, sim.tally.waves), (45, 10), "the latency tests took no wave of their own");
        assert!(sim.tries.iter().any(|(s, _, t, _)| t.test == 1 && *s == 0), "under load: beside throughput");
        assert_eq!(sim.end, 100);
    }

    #[test]
    fn an_unreachable_agent_is_retried_with_backoff_then_down_and_the_others_go_on() {
        let limits =
            Limits { backoff: Duration::from_nanos(100), max_backoff: Duration::from_nanos(1000), ..Limits::default() };
        let tests = [THROUGHPUT];
        let dead = |t: &Task| if t.to == 5 || t.from == 5 { Outcome::Unreachable(5) } else { Outcome::Done };
        let sim = simulate(6, &tests, limits, 0, |_| 10, dead);
        // agent 5: 4 tries (the first and 3 retries), then down; its 10 tasks fail, the other 20 run
        assert_eq!((sim.tally.done, sim.tally.failed, sim.tally.retried, sim.tally.down), (20, 10, 3, 1));
        // issue 43: the 9 tasks never tried are handed back, so the round shows them failed
        assert_eq!(sim.given_up.len(), 9);
        assert!(sim.given_up.iter().all(|(_, t, g)| *g == GiveUp::AgentDown(5) && (t.from == 5 || t.to == 5)));
        let tried: HashSet<u32> = sim.tries.iter().map(|(_, _, t, _)| t.id).collect();
        assert!(sim.given_up.iter().all(|(_, t, _)| !tried.contains(&t.id)), "given up means never tried");
        assert_no_overlap(&sim, &tests, 6);
        // the backoff doubled: agent 5's tries start at least 100, 200, 400 ns after the last ended
        let fives: Vec<(u64, u64)> =
            sim.tries.iter().filter(|(_, _, t, _)| t.from == 5 || t.to == 5).map(|(s, e, _, _)| (*s, *e)).collect();
        assert_eq!(fives.len(), 4);
        for (k, w) in fives.windows(2).enumerate() {
            assert!(w[1].0 >= w[0].1 + (100 << k), "try {k}: {fives:?}");
        }
        // an agent that comes back is not held against: a failure then success resets it
        let flaky = |t: &Task| {
            if (t.to == 2 || t.from == 2) && t.attempt == 0 {
                Outcome::Unreachable(2)
            } else {
                Outcome::Done
            }
        };
        let sim = simulate(6, &tests, limits, 0, |_| 10, flaky);
        assert_eq!((sim.tally.done, sim.tally.failed, sim.tally.down), (30, 0, 0));
        assert_eq!(sim.tally.retried, 10, "each of its tasks once");
    }

    #[test]
    fn a_thousand_agents_complete_a_round_fairly_and_never_double_booked() {
        let n = 1000;
        let tests = [ONE_WAY, LATENCY];
        let limits = Limits {
            max_parallel: 500,
            max_shared: 500,
            backoff: Duration::from_nanos(20_000),
            max_backoff: Duration::from_nanos(80_000),
            ..Limits::default()
        };
        // tests take 10-12 "s"; agent 7 is down (its tries all fail)
        let sim = simulate(
            n,
            &tests,
            limits,
            3,
            |t| 10_000 + (t.id as u64 * 7919) % 2_000,
            |t| if t.from == 7 || t.to == 7 { Outcome::Unreachable(7) } else { Outcome::Done },
        );
        let pairs = (n * (n - 1) / 2) as u64;
        assert_eq!(sim.tally.done + sim.tally.failed, 2 * pairs, "every pair's two tests ended");
        assert_eq!(sim.tally.failed, 2 * (n as u64 - 1), "agent 7's, and only those");
        let tries = assert_no_overlap(&sim, &tests, n);
        assert_eq!((sim.tally.down, sim.tally.retried), (1, 3));
        // fairness: every other agent ran all its throughput tests but the one with agent 7
        let mut done = vec![0u64; n];
        for (_, _, t, _) in sim.tries.iter().filter(|(_, _, t, o)| t.test == 0 && *o == Outcome::Done) {
            done[t.from] += 1;
            done[t.to] += 1;
        }
        assert!(done.iter().enumerate().all(|(a, &d)| d == if a == 7 { 0 } else { 998 }), "{done:?}");
        assert!(tries.iter().all(|&t| t <= 999 + 3), "at most the retries more");
        // waves: the 999 circle rounds of each test, and a few more where agent 7's backoff left
        // holes
        assert!((1998..=2010).contains(&sim.tally.waves), "waves {}", sim.tally.waves);
        assert!(sim.end <= 2010 * 12_000, "round took {}", sim.end);
    }

    #[test]
    fn rounds_cut_short_cover_the_pairs_evenly_over_time() {
        // 8 agents, one way: 7 waves a round; each round is cut after 3 waves.
        let tests = [ONE_WAY];
        let mut covered: HashMap<(usize, usize), u32> = HashMap::new();
        for round in 0..7 {
            let mut s = Scheduler::new(8, &tests, Limits::default(), round);
            let now = Instant::now();
            for _ in 0..3 {
                let Poll::Start(wave) = s.poll(now) else { panic!("a wave") };
                for t in wave {
                    *covered.entry((t.from.min(t.to), t.from.max(t.to))).or_default() += 1;
                    s.handle_done(t.id, Outcome::Done, now);
                }
            }
        }
        assert_eq!(covered.len(), 28, "every pair ran in 7 cut rounds");
        assert!(covered.values().all(|&c| c == 3), "each pair 3 times: {covered:?}");
    }

    /// Issue 43: a background (under load) test runs only while both its agents carry a
    /// throughput test, from its start to its end; one that no throughput test can cover is
    /// given up, never run unloaded.
    #[test]
    fn an_under_load_test_runs_only_while_both_its_agents_carry_throughput() {
        let secs = |s: u64| Duration::from_secs(s);
        let dur = |tests: &[TestPlan]| {
            let d: Vec<u64> = tests.iter().map(|p| p.duration.as_secs()).collect();
            move |t: &Task| d[t.test]
        };
        for n in [2, 5, 6, 7] {
            let tests = [TestPlan { duration: secs(5), ..UNDER_LOAD }, THROUGHPUT, LATENCY];
            let sim = simulate(n, &tests, Limits::default(), 1, dur(&tests), |_| Outcome::Done);
            let pairs = (n * (n - 1) / 2) as u64;
            assert_eq!(sim.tally.done, pairs + 2 * pairs + pairs, "n = {n}: every test ran");
            assert!(sim.given_up.is_empty());
            assert_no_overlap(&sim, &tests, n);
            for (s, e, t, _) in sim.tries.iter().filter(|x| x.2.test == 0) {
                for a in [t.from, t.to] {
                    let loaded = sim
                        .tries
                        .iter()
                        .any(|(xs, xe, x, _)| x.test == 1 && (x.from == a || x.to == a) && xs <= s && xe >= e);
                    assert!(loaded, "n = {n}: under-load {t:?} ({s}-{e}) without throughput on agent {a}");
                }
            }
        }
        // longer than any throughput test (the inventory refuses this): never run, given up
        let tests = [THROUGHPUT, TestPlan { duration: secs(20), ..UNDER_LOAD }];
        let sim = simulate(4, &tests, Limits::default(), 0, dur(&tests), |_| Outcome::Done);
        assert!(sim.tries.iter().all(|x| x.2.test == 0), "no under-load try");
        assert_eq!((sim.given_up.len(), sim.tally.failed), (6, 6));
        assert!(sim.given_up.iter().all(|(at, _, g)| *g == GiveUp::NoLoad && *at == sim.end), "once load ran out");
        // an agent down: its under-load tests are given up with it, the others still loaded
        let tests = [THROUGHPUT, UNDER_LOAD];
        let limits = Limits { backoff: Duration::from_nanos(1), retries: 0, ..Limits::default() };
        let dead = |t: &Task| if t.from == 3 || t.to == 3 { Outcome::Unreachable(3) } else { Outcome::Done };
        let sim = simulate(6, &tests, limits, 0, dur(&tests), dead);
        assert!(sim.given_up.iter().all(|(_, t, g)| *g == GiveUp::AgentDown(3) && (t.from == 3 || t.to == 3)));
        assert_eq!(sim.tally.done, 20 + 10, "the other five agents' pairs, both tests");
    }

    #[test]
    fn nothing_to_do_is_done_and_stray_completions_are_ignored() {
        let mut s = Scheduler::new(1, &[THROUGHPUT], Limits::default(), 0);
        assert!(s.is_empty());
        assert_eq!(s.poll(Instant::now()), Poll::Done);
        let mut s = Scheduler::new(2, &[THROUGHPUT], Limits::default(), 0);
        s.handle_done(99, Outcome::Done, Instant::now());
        let Poll::Start(w) = s.poll(Instant::now()) else { panic!() };
        assert_eq!(w.len(), 1);
        s.handle_done(w[0].id, Outcome::Done, Instant::now());
        s.handle_done(w[0].id, Outcome::Done, Instant::now()); // twice: ignored
        assert_eq!(s.tally().done, 1);
        let Poll::Start(w) = s.poll(Instant::now()) else { panic!() };
        assert_eq!((w[0].from, w[0].to), (1, 0), "then the other way");
    }
}
