//! One round of a mesh, with I/O at one boundary: [`Agents`] runs a task (the real one asks the
//! task's first agent over the network, [`NetAgents`]; tests use a double). Tasks of a wave run
//! on their own threads; the [`Scheduler`] decides what starts when; every try is recorded with
//! its start and end for the timeline; a stop request (SIGTERM, a [`Shutdown`]) starts nothing
//! new and lets the running tests finish. The round waits for a test's end, the scheduler's next
//! start or the stop at once, on channels.
//!
//! A task the scheduler gives up without a try (its agent down, or an under-load test with no
//! throughput left to run beside) is recorded as a failed try, so the round's tries and its
//! tally agree; at the round's end each agent whose test toward a down agent was given up is
//! told so ([`Agents::record_failed`]), and its `linerate_mesh_up` toward that agent goes to 0
//! within the round (issue 43: it kept the previous round's figure and 1).

use crate::inventory::{Inventory, Test};
use crate::schedule::{AgentId, GiveUp, Outcome, Poll, Scheduler, Tally, Task};
use linerate_agent::mesh::{run_task, TaskError};
use linerate_model::shutdown::Shutdown;
use linerate_net::auth::keys::Identity;
use linerate_proto::bench::{Direction, TestSpec};
use linerate_proto::mesh::{MeshNames, MeshOutcome, MeshReport, MeshTask, MESH_DOC_VERSION};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

/// How one try of a task ended.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskResult {
    /// It ran.
    Done(MeshReport),
    /// `agent` could not be reached.
    Unreachable {
        /// Which of the two.
        agent: AgentId,
        /// What happened.
        message: String,
    },
    /// It failed otherwise.
    Failed {
        /// What happened.
        message: String,
    },
    /// Not tried: `agent` was down for the round (after its retries).
    Down {
        /// The agent down.
        agent: AgentId,
    },
}

/// The boundary: run `task` (test `test` from agent `task.from` to agent `task.to`).
pub trait Agents: Sync {
    /// Run it and say how it went.
    fn run(&self, task: &Task, test: &Test) -> TaskResult;

    /// Tell agent `task.from` that `task` failed without a try, for `reason` (its peer is
    /// down), so that its metrics show the pair down. Best effort: an agent that cannot be told
    /// keeps its last result, which ages into the stale alert.
    fn record_failed(&self, task: &Task, test: &Test, reason: &str);
}

/// One try, as the timeline shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Try {
    /// The task.
    pub task: Task,
    /// Seconds from the round's start to the try's start and end.
    pub start_s: f64,
    /// End.
    pub end_s: f64,
    /// How it went.
    pub result: TaskResult,
}

/// What a round did.
#[derive(Debug, Clone)]
pub struct RoundResult {
    /// The round's number.
    pub round: u64,
    /// When it started.
    pub started: SystemTime,
    /// Every try, in the order they ended.
    pub tries: Vec<Try>,
    /// The scheduler's tally.
    pub tally: Tally,
    /// Agents found down.
    pub down: Vec<AgentId>,
    /// Whether a stop request cut it short.
    pub stopped: bool,
}

/// Runs round `round` of `inv` through `agents`; `log` sees a line as each try ends.
pub fn run_round(
    inv: &Inventory,
    agents: &dyn Agents,
    round: u64,
    stop: &Shutdown,
    log: &mut dyn FnMut(&Try),
) -> RoundResult {
    let mut sched = Scheduler::new(inv.agents.len(), &inv.plans(), inv.limits, round);
    let (started, t0) = (SystemTime::now(), Instant::now());
    let mut tries = Vec::new();
    let mut running = 0usize;
    let mut stopped = false;
    let mut tell = Vec::new();
    std::thread::scope(|scope| {
        let (tx, rx) = crossbeam_channel::unbounded::<(Task, f64, TaskResult)>();
        loop {
            let now = Instant::now();
            if stop.is_stopped() {
                stopped = true;
            }
            let poll = if stopped { Poll::Wait(None) } else { sched.poll(now) };
            given_up(&mut sched, t0, &mut tries, &mut tell, log);
            let wait = match poll {
                Poll::Done => break,
                Poll::Start(batch) => {
                    for task in batch {
                        let tx = tx.clone();
                        let test = &inv.tests[task.test];
                        running += 1;
                        scope.spawn(move || {
                            let start = t0.elapsed().as_secs_f64();
                            let r = agents.run(&task, test);
                            let _ = tx.send((task, start, r));
                        });
                    }
                    continue;
                }
                Poll::Wait(until) => until.map(|u| u.saturating_duration_since(now)),
            };
            if stopped && running == 0 {
                break;
            }
            // A test's end, the next start, or the stop (once stopped, only a test's end).
            let stopping = if stopped { crossbeam_channel::never() } else { stop.stopped().clone() };
            let timeout = wait.map_or_else(crossbeam_channel::never, crossbeam_channel::after);
            let got = crossbeam_channel::select! {
                recv(rx) -> got => got.ok(),
                recv(stopping) -> _ => None,
                recv(timeout) -> _ => None,
            };
            if let Some((task, start_s, result)) = got {
                running -= 1;
                let outcome = match &result {
                    TaskResult::Done(_) => Outcome::Done,
                    TaskResult::Unreachable { agent, .. } => Outcome::Unreachable(*agent),
                    TaskResult::Failed { .. } | TaskResult::Down { .. } => Outcome::Failed,
                };
                let t = Try { task, start_s, end_s: t0.elapsed().as_secs_f64(), result };
                log(&t);
                tries.push(t);
                sched.handle_done(task.id, outcome, Instant::now());
                given_up(&mut sched, t0, &mut tries, &mut tell, log);
            }
        }
        // Each agent whose test toward a down agent was given up hears of it, all at once.
        let down: Vec<AgentId> = sched.down().collect();
        for (task, agent) in tell.iter().filter(|(t, _)| !down.contains(&t.from)) {
            let reason = format!("agent down: {} (given up after its retries)", inv.agents[*agent].name);
            scope.spawn(move || agents.record_failed(task, &inv.tests[task.test], &reason));
        }
    });
    RoundResult { round, started, tries, tally: sched.tally(), down: sched.down().collect(), stopped }
}

/// Records the tasks `sched` ended without a try as failed tries of no length, logged like the
/// others; `tell` gets those whose client is to hear that its peer is down.
fn given_up(
    sched: &mut Scheduler,
    t0: Instant,
    tries: &mut Vec<Try>,
    tell: &mut Vec<(Task, AgentId)>,
    log: &mut dyn FnMut(&Try),
) {
    for (task, why) in sched.poll_given_up() {
        let at = t0.elapsed().as_secs_f64();
        let result = match why {
            GiveUp::AgentDown(agent) => {
                if agent != task.from {
                    tell.push((task, agent));
                }
                TaskResult::Down { agent }
            }
            GiveUp::NoLoad => TaskResult::Failed {
                message: "not run: no throughput test was left to run it under load beside".into(),
            },
        };
        let t = Try { task, start_s: at, end_s: at, result };
        log(&t);
        tries.push(t);
    }
}

/// The real agents: each task goes to its first agent as a mesh request, signed with the
/// controller's `identity`.
pub struct NetAgents<'a> {
    /// The inventory (addresses, pinned keys).
    pub inv: &'a Inventory,
    /// The controller's key (`mesh` in every agent's authorized_keys).
    pub identity: Arc<Identity>,
}

/// The bench test a mesh test stands for: reporting intervals of a tenth of it (100 ms to 1 s),
/// so that even a short test has the intervals its spread is taken from.
pub fn spec(test: &Test) -> TestSpec {
    let mut s = TestSpec::new(test.kind);
    s.direction = Direction::Send;
    s.connections = test.streams as u32;
    s.duration_ms = test.duration.as_millis() as u64;
    s.interval_ms = (s.duration_ms / 10).clamp(100, 1000);
    s.rate = test.rate;
    s
}

impl NetAgents<'_> {
    /// The request for `task`, named as the inventory names its test and agents.
    fn request(&self, task: &Task, test: &Test, failed: Option<String>) -> MeshTask {
        let (from, to) = (&self.inv.agents[task.from], &self.inv.agents[task.to]);
        let peer = if to.host.contains(':') {
            format!("[{}]:{}", to.host, to.port)
        } else {
            format!("{}:{}", to.host, to.port)
        };
        MeshTask {
            version: MESH_DOC_VERSION,
            peer,
            peer_host_key: to.host_key.clone(),
            test: spec(test),
            names: Some(MeshNames { test: test.name.clone(), agent: from.name.clone(), peer: to.name.clone() }),
            interval_s: self.inv.interval.map(|i| i.as_secs().max(1)),
            failed,
        }
    }

    fn addr(&self, a: AgentId) -> std::io::Result<SocketAddr> {
        let ag = &self.inv.agents[a];
        (ag.host.as_str(), ag.port)
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, format!("{} does not resolve", ag.host)))
    }
}

impl Agents for NetAgents<'_> {
    fn run(&self, task: &Task, test: &Test) -> TaskResult {
        let from = &self.inv.agents[task.from];
        let addr = match self.addr(task.from) {
            Ok(a) => a,
            Err(e) => return TaskResult::Unreachable { agent: task.from, message: e.to_string() },
        };
        let mt = self.request(task, test, None);
        match run_task(addr, &from.host_key, self.identity.clone(), &mt, self.inv.connect_timeout) {
            Ok(MeshOutcome::Done(r)) => TaskResult::Done(r),
            Ok(MeshOutcome::PeerUnreachable { message }) => TaskResult::Unreachable { agent: task.to, message },
            Ok(MeshOutcome::Failed { message }) => TaskResult::Failed { message },
            Err(TaskError::Unreachable(e)) => TaskResult::Unreachable { agent: task.from, message: e.to_string() },
            Err(TaskError::Failed(e)) => TaskResult::Failed { message: e.to_string() },
        }
    }

    fn record_failed(&self, task: &Task, test: &Test, reason: &str) {
        let Ok(addr) = self.addr(task.from) else { return };
        let mt = self.request(task, test, Some(reason.to_string()));
        let key = &self.inv.agents[task.from].host_key;
        let _ = run_task(addr, key, self.identity.clone(), &mt, self.inv.connect_timeout);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::schedule::Class;
    use linerate_model::shutdown::Stopper;
    use std::collections::HashMap;
    use std::sync::Mutex;
    use std::time::Duration;

    /// A double: every test takes `ms`, agent `dead` is unreachable; records who ran when.
    pub(crate) struct Fake {
        ms: u64,
        dead: Option<AgentId>,
        busy: Mutex<Vec<(u32, u32)>>,
        overlaps: Mutex<u32>,
        /// (from, to, reason) of each pair told it failed.
        told: Mutex<Vec<(AgentId, AgentId, String)>>,
        /// When not 0: each throughput test waits for the rest of its wave (this many tests) to
        /// start, and counts in `apart` if they do not within 10 s (they were not started
        /// together).
        wave: usize,
        started: (Mutex<usize>, std::sync::Condvar),
        apart: Mutex<u32>,
    }

    pub(crate) fn fake(ms: u64, dead: Option<AgentId>, n: usize) -> Fake {
        Fake {
            ms,
            dead,
            busy: Mutex::new(vec![(0, 0); n]),
            overlaps: Mutex::new(0),
            told: Mutex::default(),
            wave: 0,
            started: Default::default(),
            apart: Mutex::new(0),
        }
    }

    impl Fake {
        /// Wait for the rest of this test's wave to start (see `wave`).
        fn wait_for_the_wave(&self) {
            let (count, changed) = &self.started;
            let mut n = count.lock().unwrap();
            *n += 1;
            let goal = (*n - 1) / self.wave * self.wave + self.wave;
            changed.notify_all();
            let (_n, waited) = changed.wait_timeout_while(n, Duration::from_secs(10), |n| *n < goal).unwrap();
            if waited.timed_out() {
                *self.apart.lock().unwrap() += 1;
            }
        }
    }

    impl Agents for Fake {
        fn run(&self, task: &Task, test: &Test) -> TaskResult {
            if Some(task.from) == self.dead || Some(task.to) == self.dead {
                return TaskResult::Unreachable { agent: self.dead.unwrap_or(0), message: "refused".into() };
            }
            // busy[a]: (exclusive, normal) tests running on agent a
            let class = test.class();
            {
                let mut b = self.busy.lock().unwrap();
                let clash = |x: (u32, u32)| match class {
                    Class::Exclusive => x.0 + x.1 > 0,
                    Class::Normal => x.0 > 0,
                    Class::Background => false,
                };
                if clash(b[task.from]) || clash(b[task.to]) {
                    *self.overlaps.lock().unwrap() += 1;
                }
                for a in [task.from, task.to] {
                    match class {
                        Class::Exclusive => b[a].0 += 1,
                        Class::Normal => b[a].1 += 1,
                        Class::Background => {}
                    }
                }
            }
            if self.wave > 0 && class == Class::Exclusive {
                self.wait_for_the_wave();
            }
            // The double stands for a test that takes `ms` (not a wait for something).
            std::thread::sleep(Duration::from_millis(self.ms));
            let mut b = self.busy.lock().unwrap();
            for a in [task.from, task.to] {
                match class {
                    Class::Exclusive => b[a].0 -= 1,
                    Class::Normal => b[a].1 -= 1,
                    Class::Background => {}
                }
            }
            TaskResult::Done(MeshReport {
                version: 1,
                started_unix_s: 0,
                seconds: 0.01,
                throughput_bps: 1e9,
                retransmits: 0,
                rtt_us: None,
                latency_us: None,
                transactions_per_s: None,
                loss_pct: None,
                cpu_busy: (0.0, 0.0),
                spread: None,
            })
        }

        fn record_failed(&self, task: &Task, _: &Test, reason: &str) {
            self.told.lock().unwrap().push((task.from, task.to, reason.to_string()));
        }
    }

    pub(crate) fn inventory(n: usize) -> Inventory {
        let fp = "SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU";
        let mut t = String::from("[limits]\nbackoff = \"100ms\"\nretries = 1\n");
        for i in 0..n {
            t += &format!("[[agent]]\nname = \"a{i}\"\naddress = \"198.18.1.{}\"\nhost_key = \"{fp}\"\n", i + 1);
        }
        t += "[[test]]\nname = \"tput\"\nkind = \"tcp-stream\"\n[[test]]\nname = \"rtt\"\nkind = \"tcp-rr\"\n";
        Inventory::parse(&t).unwrap()
    }

    #[test]
    fn a_round_runs_every_task_on_threads_without_overlap() {
        let inv = inventory(6);
        let fake = Fake { wave: 3, ..fake(20, None, 6) };
        let mut lines = 0;
        let r = run_round(&inv, &fake, 0, &Shutdown::never(), &mut |_| lines += 1);
        assert_eq!(r.tries.len(), 30 + 15);
        assert_eq!(lines, 45);
        assert_eq!(*fake.overlaps.lock().unwrap(), 0, "no agent in a throughput test beside another test");
        assert_eq!((r.tally.done, r.tally.waves, r.stopped), (45, 15, false));
        // Each throughput wave's three tests started together: each waited for the other two
        // (a round that ran them one after another would leave each waiting alone).
        assert_eq!(*fake.apart.lock().unwrap(), 0, "a wave's tests started apart");
    }

    #[test]
    fn a_dead_agent_is_given_up_and_a_stop_lets_running_tests_finish() {
        let inv = inventory(4);
        let dead = fake(5, Some(3), 4);
        let r = run_round(&inv, &dead, 0, &Shutdown::never(), &mut |_| {});
        assert_eq!(r.down, vec![3]);
        assert_eq!(r.tally.done, 6 + 3, "the other three agents' pairs");
        // Issue 43: every task of agent 3 ended as a try (its last one failed or down), as many
        // as the tally's failures; each agent whose test toward it was given up was told.
        let mut last: HashMap<(usize, usize, usize), &TaskResult> = HashMap::new();
        for t in &r.tries {
            last.insert((t.task.test, t.task.from, t.task.to), &t.result);
        }
        let failed = last.values().filter(|r| !matches!(r, TaskResult::Done(_))).count() as u64;
        assert_eq!((failed, r.tally.failed), (3 * 2 + 3, 3 * 2 + 3), "tput both ways and rtt with agent 3");
        let down = r.tries.iter().filter(|t| t.result == TaskResult::Down { agent: 3 }).count();
        let told = dead.told.lock().unwrap().clone();
        assert!(down >= 6 && told.len() >= 2, "given up: {down}, told: {told:?}");
        assert!(told.iter().all(|(from, to, why)| *from != 3 && *to == 3 && why.starts_with("agent down: a3")));
        let given_up_toward_3 =
            r.tries.iter().filter(|t| t.result == TaskResult::Down { agent: 3 } && t.task.from != 3).count();
        assert_eq!(told.len(), given_up_toward_3, "told exactly the clients of the given-up tests");
        let stop = Stopper::new();
        let slow = fake(200, None, 4);
        let mut n = 0;
        let r = run_round(&inv, &slow, 0, &stop.shutdown(), &mut |_| {
            n += 1;
            stop.stop();
        });
        assert!(r.stopped);
        assert!(r.tries.len() < 12 + 6, "it stopped early: {}", r.tries.len());
        assert!(r.tries.iter().all(|t| matches!(t.result, TaskResult::Done(_))), "running tests finished");
    }
}
