//! A campaign: a sweep's points ([`super::sweep`]), each run once or repeated by a [`Repeat`]
//! rule (`bench --repeat N`, or MIN,MAX until the confidence interval is narrow enough:
//! netperf's `-i MAX,MIN -I LEVEL,WIDTH`), against an agent's sessions ([`Sessions`]), with an
//! [`Observer`] that sees each step (the CLI prints). What it returns is the points' results,
//! each with the mean of its repeats ([`Summary::mean_of_repeats`](super::stats::Summary)),
//! every repeat's headline, latency percentiles and steal.
//!
//! Each repeat after a point's first runs in a session of its own ([`Sessions::renew`]): on a
//! VM the rate of one session differs from the next by more than its runs differ from each
//! other (issue 33: 15 runs in one session gave means 2.5 × further apart than their standard
//! errors said, 15 sessions 1.3 ×), so only separate sessions make the repeats' spread the
//! noise of the measurement. A point's first run takes the session the last one left.

use super::stats::confident_enough;
use super::stats::Point;
use super::sweep::SweepPoint;
use super::{BenchClient, BenchClientConfig, LiveInterval, TestResult};
use linerate_model::doc::bench::{RunLatency, SidePair};
use linerate_model::shutdown::Shutdown;
use linerate_net::EngineError;
use linerate_proto::bench::TestSpec;
use std::cell::RefCell;

/// How many times each point runs: at least `min`, at most `max`; in between until the
/// confidence interval of the runs' headlines is within `width_pct` of their mean at `level`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Repeat {
    /// Runs at least (1 or more).
    pub min: usize,
    /// Runs at most (`min` or more).
    pub max: usize,
    /// The confidence level, percent (netperf `-I 99,5`'s 99).
    pub level: u32,
    /// The interval's full width the runs must reach, percent of their mean (its 5).
    pub width_pct: f64,
}

impl Repeat {
    /// `--repeat` and `--confidence` as given: `min` below 1 is 1, `max` below `min` is `min`
    /// (`--repeat N` is `N,N`: exactly N runs, hyperfine's `--runs N`).
    pub fn new(min: f64, max: f64, level: f64, width_pct: f64) -> Repeat {
        let min = min.max(1.0);
        Repeat { min: min as usize, max: max.max(min) as usize, level: level as u32, width_pct }
    }

    /// Whether `runs` (each run's headline so far) are enough: `min` of them, and with room for
    /// more, a narrow enough interval.
    pub fn enough(&self, runs: &[f64]) -> bool {
        runs.len() >= self.min && (self.max == 1 || confident_enough(runs, self.level, self.width_pct, self.min))
    }
}

/// Where a campaign's tests run: an agent's benchmark sessions ([`Agent`]), or a test double.
pub trait Sessions {
    /// Run `spec` in the current session, as [`BenchClient::run_admitted`] does.
    fn run(
        &mut self,
        spec: &TestSpec,
        admitted: &mut dyn FnMut(&TestSpec),
        progress: &mut dyn FnMut(&LiveInterval<'_>),
    ) -> Result<TestResult, EngineError>;

    /// End the current session and begin another, for the next repeat.
    fn renew(&mut self) -> Result<(), EngineError>;
}

/// An agent's sessions: the client connected to it, connected again for each new session, each
/// connection's running test ended by `cancel` ([`BenchClient::cancel_on`]).
pub struct Agent {
    cfg: BenchClientConfig,
    client: BenchClient,
    cancel: Shutdown,
}

impl Agent {
    /// Sessions of `client`'s agent, the first `client`'s own.
    pub fn new(cfg: BenchClientConfig, mut client: BenchClient, cancel: Shutdown) -> Agent {
        client.cancel_on(cancel.clone());
        Agent { cfg, client, cancel }
    }
}

impl Sessions for Agent {
    fn run(
        &mut self,
        spec: &TestSpec,
        admitted: &mut dyn FnMut(&TestSpec),
        progress: &mut dyn FnMut(&LiveInterval<'_>),
    ) -> Result<TestResult, EngineError> {
        self.client.run_admitted(spec, admitted, progress)
    }

    fn renew(&mut self) -> Result<(), EngineError> {
        self.client = BenchClient::connect(self.cfg.clone())?;
        self.client.cancel_on(self.cancel.clone());
        Ok(())
    }
}

/// What a campaign tells as it goes (the CLI prints it). An error from [`Observer::point`],
/// [`Observer::run`] or [`Observer::point_done`] ends the campaign with it (a closed output).
pub trait Observer {
    /// The campaign's error: the observer's own, or a session's.
    type Error: From<EngineError>;

    /// A point begins, before its first run.
    fn point(&mut self, labels: &[(String, String)], spec: &TestSpec) -> Result<(), Self::Error>;

    /// The agent admitted a run's test, as it runs (a test until stopped with the duration the
    /// agent grants).
    fn admitted(&mut self, spec: &TestSpec);

    /// An interval of a run of `spec` closed.
    fn interval(&mut self, spec: &TestSpec, iv: &LiveInterval<'_>);

    /// A run ended.
    fn run(&mut self, result: &TestResult) -> Result<(), Self::Error>;

    /// A point's runs ended: its figures, the mean of its repeats, with the last run's result,
    /// its histograms still there (the campaign drops them after this call: nothing else reads
    /// them, and they are a few hundred KB each).
    fn point_done(&mut self, point: &Point) -> Result<(), Self::Error>;
}

/// The points of a run and how each repeats.
#[derive(Debug, Clone)]
pub struct Campaign {
    points: Vec<SweepPoint>,
    repeat: Repeat,
    link: Option<(f64, u32)>,
}

impl Campaign {
    /// Run `points` in order, each by `repeat`; `link` is the (link rate bit/s, MTU) that the
    /// figures' efficiency is counted against, if given.
    pub fn new(points: Vec<SweepPoint>, repeat: Repeat, link: Option<(f64, u32)>) -> Campaign {
        Campaign { points, repeat, link }
    }

    /// Run every point against `sessions`, telling `observer`; a stop of `stop` (which also ends
    /// a running test, through the sessions' cancel) ends the campaign after the running test:
    /// the points run so far are returned, the one stopped with the runs it had.
    pub fn run<O: Observer>(
        self,
        sessions: &mut dyn Sessions,
        stop: &Shutdown,
        observer: &mut O,
    ) -> Result<Vec<Point>, O::Error> {
        let mut done = Vec::new();
        for (labels, spec) in self.points {
            observer.point(&labels, &spec)?;
            let mut runs = Vec::new();
            let mut latencies = Vec::new();
            let mut steal = Vec::new();
            let mut last = None;
            for repeat in 0..self.repeat.max {
                if repeat > 0 {
                    sessions.renew()?;
                }
                let r = {
                    // Both callbacks tell the observer; they run one at a time.
                    let told = RefCell::new(&mut *observer);
                    let mut admitted = |s: &TestSpec| told.borrow_mut().admitted(s);
                    let mut progress = |iv: &LiveInterval<'_>| told.borrow_mut().interval(&spec, iv);
                    sessions.run(&spec, &mut admitted, &mut progress)?
                };
                observer.run(&r)?;
                let s = r.summary(self.link);
                runs.push(s.headline(spec.kind));
                latencies.extend(s.latency_us.as_ref().map(RunLatency::of));
                steal.push(SidePair { local: s.cpu.local.steal, remote: s.cpu.remote.steal });
                last = Some((r, s));
                if self.repeat.enough(&runs) || stop.is_stopped() {
                    break;
                }
            }
            let Some((result, mut summary)) = last else { continue };
            // One figure per point: what is printed, the document and the store all have the mean.
            summary.mean_of_repeats(spec.kind, &runs, &latencies);
            let mut point = Point { labels, result, summary, runs, latencies, steal };
            observer.point_done(&point)?;
            point.result.histogram = None;
            point.result.group_histograms = Vec::new();
            done.push(point);
            if stop.is_stopped() {
                break;
            }
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linerate_model::shutdown::Stopper;
    use linerate_proto::bench::{ConnCounts, CpuShare, IntervalCounts, SideReport, TestKind};
    use std::collections::VecDeque;

    /// A tcp-stream run whose goodput is `mbps` Mbit/s (a second at the server), with `steal`
    /// of each machine's time stolen.
    fn run_of(spec: &TestSpec, mbps: f64, steal: f64) -> TestResult {
        let cpu = CpuShare { steal, cores: 1, ..CpuShare::default() };
        let remote = SideReport {
            seconds: 1.0,
            conns: vec![ConnCounts { rx: (mbps * 1e6 / 8.0) as u64, ..ConnCounts::default() }],
            cpu,
            ..SideReport::default()
        };
        let local = SideReport { seconds: 1.0, cpu, ..SideReport::default() };
        let mut r = TestResult::of_sides(spec.clone(), local, remote);
        r.histogram = Some(crate::reactor::new_histogram());
        r
    }

    /// The agent's sessions as a script: each run's goodput in turn; a stop after the run
    /// numbered `stop_at` (counted from 1), as Ctrl-C during it would; a failure at `fail_at`.
    #[derive(Default)]
    struct Script {
        rates: VecDeque<f64>,
        runs: usize,
        sessions: usize,
        stop_at: Option<(usize, Stopper)>,
        fail_at: Option<usize>,
    }

    impl Sessions for Script {
        fn run(
            &mut self,
            spec: &TestSpec,
            admitted: &mut dyn FnMut(&TestSpec),
            progress: &mut dyn FnMut(&LiveInterval<'_>),
        ) -> Result<TestResult, EngineError> {
            self.runs += 1;
            if self.fail_at == Some(self.runs) {
                return Err(EngineError::Timeout("the agent".into()));
            }
            admitted(spec);
            let iv = IntervalCounts { start_s: 0.0, end_s: 1.0, ..IntervalCounts::default() };
            progress(&LiveInterval { counts: &iv, streams: &[] });
            if let Some((_, s)) = self.stop_at.as_ref().filter(|(n, _)| *n == self.runs) {
                s.stop();
            }
            let mbps = self.rates.pop_front().unwrap_or(100.0);
            Ok(run_of(spec, mbps, self.runs as f64 / 100.0))
        }

        fn renew(&mut self) -> Result<(), EngineError> {
            self.sessions += 1;
            Ok(())
        }
    }

    /// Every step told, as a line; `closed_at`: the run (from 1) after which the output closes.
    #[derive(Default)]
    struct Told {
        lines: Vec<String>,
        closed_at: Option<usize>,
        runs: usize,
    }

    impl Observer for Told {
        type Error = EngineError;

        fn point(&mut self, labels: &[(String, String)], _: &TestSpec) -> Result<(), EngineError> {
            self.lines.push(format!("point {labels:?}"));
            Ok(())
        }

        fn admitted(&mut self, _: &TestSpec) {
            self.lines.push("admitted".into());
        }

        fn interval(&mut self, spec: &TestSpec, iv: &LiveInterval<'_>) {
            self.lines.push(format!("interval {} {}", spec.kind.name(), iv.counts.end_s));
        }

        fn run(&mut self, r: &TestResult) -> Result<(), EngineError> {
            self.runs += 1;
            self.lines.push(format!("run {}", r.summary(None).throughput_bps / 1e6));
            if self.closed_at == Some(self.runs) {
                return Err(EngineError::Usage(linerate_net::UsageError::Test("closed".into())));
            }
            Ok(())
        }

        fn point_done(&mut self, p: &Point) -> Result<(), EngineError> {
            assert!(p.result.histogram.is_some(), "the observer sees the last run's histogram");
            self.lines.push(format!("done {} runs, {} Mbit/s", p.runs.len(), p.summary.throughput_bps / 1e6));
            Ok(())
        }
    }

    fn points(n: usize) -> Vec<SweepPoint> {
        (0..n).map(|i| (vec![("msg".to_string(), i.to_string())], TestSpec::new(TestKind::TcpStream))).collect()
    }

    fn script(rates: &[f64]) -> Script {
        Script { rates: rates.iter().copied().collect(), ..Script::default() }
    }

    #[test]
    fn the_repeat_rule_is_n_runs_or_min_to_max_until_confident() {
        assert_eq!(Repeat::new(3.0, 3.0, 99.0, 5.0), Repeat { min: 3, max: 3, level: 99, width_pct: 5.0 });
        assert_eq!((Repeat::new(0.0, 0.0, 99.0, 5.0).min, Repeat::new(0.0, 0.0, 99.0, 5.0).max), (1, 1));
        assert_eq!(Repeat::new(5.0, 2.0, 95.0, 10.0).max, 5, "a max below the min is the min");
        let once = Repeat::new(1.0, 1.0, 99.0, 5.0);
        assert!(once.enough(&[7.0]));
        let three = Repeat::new(3.0, 3.0, 99.0, 5.0);
        assert!(!three.enough(&[7.0, 7.0]) && three.enough(&[7.0, 7.0, 7.0]));
        let until = Repeat::new(2.0, 10.0, 99.0, 5.0);
        assert!(!until.enough(&[100.0]), "under the min");
        assert!(until.enough(&[100.0, 100.0]), "no spread: confident at the min");
        assert!(!until.enough(&[100.0, 50.0, 150.0]), "too wide");
    }

    #[test]
    fn n_repeats_run_each_point_n_times_each_repeat_in_a_session_of_its_own_and_keep_the_mean() {
        let mut s = script(&[100.0, 200.0, 300.0, 10.0, 20.0, 30.0]);
        let mut told = Told::default();
        let c = Campaign::new(points(2), Repeat::new(3.0, 3.0, 99.0, 5.0), None);
        let done = c.run(&mut s, &Shutdown::never(), &mut told).unwrap();
        assert_eq!((s.runs, s.sessions), (6, 4), "a new session for each repeat after a point's first");
        assert_eq!(done.len(), 2);
        assert_eq!(done[0].runs.iter().map(|r| r / 1e6).collect::<Vec<_>>(), [100.0, 200.0, 300.0]);
        assert!((done[0].summary.throughput_bps / 1e6 - 200.0).abs() < 1e-6, "the mean of the repeats");
        assert!((done[1].summary.throughput_bps / 1e6 - 20.0).abs() < 1e-6);
        assert_eq!(done[1].labels, [("msg".to_string(), "1".to_string())]);
        // Steal per run, each side.
        let steal: Vec<f64> = done[1].steal.iter().map(|p| p.local).collect();
        assert_eq!(steal, [0.04, 0.05, 0.06]);
        assert!(done.iter().all(|p| p.result.histogram.is_none()), "histograms dropped once told");
        assert_eq!(
            told.lines[..6],
            [
                "point [(\"msg\", \"0\")]",
                "admitted",
                "interval tcp-stream 1",
                "run 100",
                "admitted",
                "interval tcp-stream 1"
            ]
        );
        assert_eq!(told.lines.iter().filter(|l| l.starts_with("done")).count(), 2);
        assert!(told.lines.contains(&"done 3 runs, 200 Mbit/s".to_string()), "{:?}", told.lines);
    }

    #[test]
    fn min_to_max_stops_once_confident_or_at_the_max() {
        // Alike runs: confident at the min.
        let mut s = script(&[100.0; 10]);
        let c = Campaign::new(points(1), Repeat::new(3.0, 10.0, 99.0, 5.0), None);
        let done = c.run(&mut s, &Shutdown::never(), &mut Told::default()).unwrap();
        assert_eq!((done[0].runs.len(), s.sessions), (3, 2));
        // Scattered runs: all ten, and the mean of all.
        let rates = [100.0, 50.0, 150.0, 80.0, 120.0, 60.0, 140.0, 90.0, 110.0, 100.0];
        let mut s = script(&rates);
        let c = Campaign::new(points(1), Repeat::new(3.0, 10.0, 99.0, 5.0), None);
        let done = c.run(&mut s, &Shutdown::never(), &mut Told::default()).unwrap();
        assert_eq!(done[0].runs.len(), 10);
        assert!((done[0].summary.throughput_bps / 1e6 - 100.0).abs() < 1e-6);
        // Once: one run, the figures its own.
        let mut s = script(&[123.0]);
        let c = Campaign::new(points(1), Repeat::new(1.0, 1.0, 99.0, 5.0), None);
        let done = c.run(&mut s, &Shutdown::never(), &mut Told::default()).unwrap();
        assert_eq!((done[0].runs.len(), s.sessions), (1, 0));
        assert!((done[0].summary.throughput_bps / 1e6 - 123.0).abs() < 1e-6);
    }

    #[test]
    fn a_stop_ends_the_repeats_after_the_running_test_and_keeps_what_ran() {
        let stopper = Stopper::new();
        let mut s = Script { stop_at: Some((2, stopper.clone())), ..script(&[100.0, 300.0, 999.0]) };
        let c = Campaign::new(points(3), Repeat::new(5.0, 5.0, 99.0, 5.0), None);
        let done = c.run(&mut s, &stopper.shutdown(), &mut Told::default()).unwrap();
        assert_eq!(s.runs, 2, "no run after the stop");
        assert_eq!(done.len(), 1, "the next points do not start");
        assert_eq!(done[0].runs.len(), 2);
        assert!((done[0].summary.throughput_bps / 1e6 - 200.0).abs() < 1e-6, "the mean of the runs it had");
    }

    #[test]
    fn a_failed_session_or_a_closed_output_ends_the_campaign_with_its_error() {
        let mut s = Script { fail_at: Some(2), ..script(&[]) };
        let c = Campaign::new(points(2), Repeat::new(3.0, 3.0, 99.0, 5.0), None);
        let Err(e) = c.run(&mut s, &Shutdown::never(), &mut Told::default()) else { panic!("ran on") };
        assert!(matches!(e, EngineError::Timeout(_)), "{e:?}");
        let mut told = Told { closed_at: Some(1), ..Told::default() };
        let c = Campaign::new(points(2), Repeat::new(3.0, 3.0, 99.0, 5.0), None);
        let Err(e) = c.run(&mut script(&[]), &Shutdown::never(), &mut told) else { panic!("ran on") };
        assert!(matches!(e, EngineError::Usage(_)), "{e:?}");
        assert_eq!(told.runs, 1);
        assert!(!told.lines.iter().any(|l| l.starts_with("done")));
    }
}
