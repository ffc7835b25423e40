//! From what `linerate bench` is asked ([`PlanConfig`], the flags' values) to a resolved
//! [`Plan`]: the base test, its sweep's points, the repeat rule, the `--start-at` instant, and
//! every refusal that needs no server (a bad `--repeat`, a test `--hgrm` or `--json-iperf3`
//! cannot take, an unwritable `--hgrm` path, a test the protocol forbids) before anything is
//! sent or printed. [`Plan::run`](crate::run) runs it.

use crate::campaign::Repeat;
use crate::sweep::{self, SweepError, SweepPoint};
use crate::{check_local_options, ClientTuning};
use linerate_model::doc::iperf3::NotIperf3;
use linerate_net::EngineError;
use linerate_proto::bench::{Direction, Limits, Profile, SpecError, TestKind, TestSpec};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What a run prints on its standard output: the text report, or one document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// Banners, interval lines, a table per point (and the sweep's table).
    #[default]
    Text,
    /// One CSV row per point (`--csv`).
    Csv,
    /// The `linerate.bench/1` document (`--json`).
    Json,
    /// iperf3's `-J` document (`--json-iperf3`): one tcp-stream or udp-stream test.
    Iperf3,
}

impl Format {
    /// The format the flags ask for: `--json`, else `--csv`, else `--json-iperf3`, else text.
    pub fn of(json: bool, csv: bool, iperf3: bool) -> Format {
        match (json, csv, iperf3) {
            (true, _, _) => Format::Json,
            (_, true, _) => Format::Csv,
            (_, _, true) => Format::Iperf3,
            _ => Format::Text,
        }
    }
}

/// iperf3's `-A N[,M]`: the core of this side's workers and, with `,M`, the agent's for this
/// test (`,M` alone pins only the agent's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Affinity {
    /// This side's core (`N`).
    pub client: Option<u32>,
    /// The agent's core (`M`).
    pub server: Option<u32>,
}

/// Why `-A` does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadAffinity {
    /// A core that is not a number.
    #[error("-A {0:?}: cores are numbers, as N or N,M")]
    NotANumber(String),
    /// Neither core given.
    #[error("-A {0:?}: give a core, as N or N,M")]
    NoCore(String),
}

impl std::str::FromStr for Affinity {
    type Err = BadAffinity;

    fn from_str(s: &str) -> Result<Affinity, BadAffinity> {
        let core = |t: &str| match t.trim() {
            "" => Ok(None),
            t => t.parse().map(Some).map_err(|_| BadAffinity::NotANumber(s.to_string())),
        };
        let (client, server) = match s.split_once(',') {
            Some((n, m)) => (core(n)?, core(m)?),
            None => (core(s)?, None),
        };
        if client.is_none() && server.is_none() {
            return Err(BadAffinity::NoCore(s.to_string()));
        }
        Ok(Affinity { client, server })
    }
}

/// What `linerate bench` asks of its tests: the flags' values as given (the CLI's clap
/// arguments hold their `--help`), read into a [`Plan`] by [`PlanConfig::plan`].
#[derive(Debug, Clone, Default)]
pub struct PlanConfig {
    /// The test kind (`--test`, `-u`); a profile when `profile` is given.
    pub kind: Option<TestKind>,
    /// A uperf-style TOML workload (`--profile`).
    pub profile: Option<PathBuf>,
    /// Connections (`-P`; with a one-group profile, the group's).
    pub connections: Option<u32>,
    /// Time to measure (`-t`): 10 s, or 10 min as a cap with a byte or block count; 0 until stopped.
    pub time: Option<Duration>,
    /// End after this many bytes (`-n`).
    pub bytes: Option<u64>,
    /// End after this many writes of each point's write size (`-k`).
    pub blockcount: Option<u64>,
    /// Warm-up, not counted (`-O`).
    pub omit: Duration,
    /// Time between interval lines (`-i`); zero: no lines, samples each second.
    pub interval: Duration,
    /// The server sends (`-R`).
    pub reverse: bool,
    /// Both directions (`--bidir`).
    pub bidir: bool,
    /// Bytes per write, request or datagram (`-l`).
    pub length: Option<u32>,
    /// Bytes per response (`--response`).
    pub response: Option<u32>,
    /// Both socket buffers (`-w`).
    pub window: Option<u32>,
    /// SO_SNDBUF (`--sndbuf`).
    pub sndbuf: Option<u32>,
    /// SO_RCVBUF (`--rcvbuf`).
    pub rcvbuf: Option<u32>,
    /// Per stream for stream tests, transactions/s in all for rr/crr (`-b`); 0 unpaced.
    pub rate: Option<u64>,
    /// UDP packets per second in all (`--pps`).
    pub pps: Option<u64>,
    /// sendfile from a memory file (`-Z`).
    pub zerocopy: bool,
    /// TCP_NODELAY (`-N`).
    pub nodelay: bool,
    /// Nagle's algorithm left on in rr and crr (`--no-nodelay`).
    pub no_nodelay: bool,
    /// Congestion control of the data connections (`-C`).
    pub congestion: Option<String>,
    /// The TOS byte of the data packets (`-S`, or `--dscp` × 4).
    pub tos: Option<u8>,
    /// UDP GSO and GRO (`--gsro`).
    pub gsro: bool,
    /// Pinned cores (`-A`).
    pub affinity: Affinity,
    /// `KEY=V1,V2` sweeps (`--sweep`).
    pub sweep: Vec<String>,
    /// `N` or `MIN,MAX` runs per point (`--repeat`).
    pub repeat: String,
    /// `LEVEL,WIDTH%` (`--confidence`).
    pub confidence: String,
    /// Link rate (bit/s) and MTU that efficiency is counted against (`--link-rate`, `--mtu`).
    pub link: Option<(f64, u32)>,
    /// The wall-clock instant of the first test, ms since the Unix epoch (`--start-at`).
    pub start_at: Option<u64>,
    /// Where the latency histogram goes (`--hgrm`).
    pub hgrm: Option<PathBuf>,
    /// What standard output carries.
    pub format: Format,
    /// No banners or interval lines (`-q`).
    pub quiet: bool,
    /// Each line of the text report begins with this (`-T`).
    pub title: Option<String>,
    /// Each line of the text report begins with the UTC time (`--timestamps`).
    pub timestamps: bool,
    /// The linerate version that runs, for the document.
    pub version: &'static str,
}

/// Why a run cannot be planned as asked: every one bad usage, found before anything is sent.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// `--repeat` or `--confidence` is not `A,B`.
    #[error("{what}: expected two numbers A,B, got {given:?}")]
    Pair {
        /// The flag.
        what: &'static str,
        /// Its value.
        given: String,
    },
    /// One of its numbers does not read.
    #[error("{what}: {given:?}")]
    Number {
        /// The flag.
        what: &'static str,
        /// The number as given.
        given: String,
        /// Why it does not read.
        #[source]
        source: std::num::ParseFloatError,
    },
    /// A duration flag beyond what the wire holds.
    #[error("{what} {given:?}: must be at most 10000000 s (about 115 days)")]
    TooLong {
        /// The flag.
        what: &'static str,
        /// Its value.
        given: Duration,
    },
    /// `--pps` for a test that is not udp-stream.
    #[error("--pps applies to udp-stream")]
    Pps,
    /// `--gsro` for a test that is not udp-stream.
    #[error("--gsro applies to udp-stream (-u)")]
    Gsro,
    /// The profile file cannot be read.
    #[error("reading profile {}", .path.display())]
    ReadProfile {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The profile is not a profile's TOML.
    #[error("profile {}", .path.display())]
    ProfileToml {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: toml::de::Error,
    },
    /// `-P` with a profile of several groups.
    #[error("-P applies to a profile with one group; {} has {groups}", .path.display())]
    ProfileGroups {
        /// The file.
        path: PathBuf,
        /// Its groups.
        groups: usize,
    },
    /// The profile breaks its rules.
    #[error("profile {}", .path.display())]
    Profile {
        /// The file.
        path: PathBuf,
        /// The rule.
        #[source]
        source: linerate_model::profile::ProfileError,
    },
    /// A `--sweep` that cannot be run.
    #[error(transparent)]
    Sweep(#[from] SweepError),
    /// `--start-at` more than a day ahead (the whole message).
    #[error("{0}")]
    StartAt(String),
    /// A test iperf3's document cannot hold.
    #[error("--json-iperf3: {0}")]
    Iperf3(NotIperf3),
    /// A test `--hgrm` cannot take.
    #[error("--hgrm: {0}")]
    Hgrm(HgrmRefusal),
    /// An `--hgrm` path that cannot be written.
    #[error("--hgrm {}: {source}", crate::hgrm::shown(.path))]
    HgrmPath {
        /// The path.
        path: PathBuf,
        /// Why (its message is part of this one).
        source: std::io::Error,
    },
    /// A test the protocol forbids, whatever the server's caps.
    #[error(transparent)]
    Spec(#[from] SpecError),
}

/// Why `--hgrm` cannot take a run: it writes the one histogram of one test (a sweep's points or
/// a point's repeats would each need a file, and the figures printed for repeats are means that
/// no one histogram holds), and only tests that time transactions have one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HgrmRefusal {
    /// A sweep or repeats.
    #[error(
        "one test writes one histogram: a --sweep or --repeat is refused (run each point on its own, each with its \
         own --hgrm)"
    )]
    Many,
    /// A stream test.
    #[error("a {} test times no transactions, so it has no latency: give tcp-rr, tcp-crr or a --profile", .0.name())]
    NoTransactions(TestKind),
}

/// The UDP rate when none is given: iperf3's default, 1 Mbit/s (per stream).
pub const UDP_DEFAULT_RATE: u64 = 1_000_000;

/// The furthest ahead `--start-at` may be: a day. A wait beyond it is more likely a wrong clock
/// or a unit mistake (seconds for milliseconds read the other way) than a plan, and a later start
/// is a scheduler's job (issue 42: an instant a year ahead waited silently).
const START_AT_AHEAD: Duration = Duration::from_secs(24 * 60 * 60);

/// A resolved run: its points, how each repeats, when it starts.
#[derive(Debug, Clone)]
pub struct Plan {
    pub(crate) config: PlanConfig,
    /// Every point, in order, each with its labels.
    pub points: Vec<SweepPoint>,
    /// How each point repeats.
    pub repeat: Repeat,
    /// `--start-at`: its milliseconds and the instant they name.
    pub start: Option<(u64, SystemTime)>,
}

impl PlanConfig {
    /// The plan, seen at `now` (for `--start-at`), with every check that needs no server.
    pub fn plan(self, now: SystemTime) -> Result<Plan, PlanError> {
        let points = self.points(udp_default_size(None))?;
        // Before anything is sent: a start too far ahead is refused at once.
        let start = self.start_at.map(|ms| start_at(ms, now).map(|at| (ms, at))).transpose()?;
        // `--repeat N`: exactly N runs (hyperfine's `--runs N`); MIN,MAX: until confident
        let (rmin, rmax) = match self.repeat.trim().parse::<f64>() {
            Ok(n) => (n, n),
            Err(_) => pair(&self.repeat, "--repeat")?,
        };
        let (level, width) = pair(&self.confidence, "--confidence")?;
        let repeat = Repeat::new(rmin, rmax, level, width);
        if self.format == Format::Iperf3 {
            if points.len() != 1 || repeat.max > 1 {
                return Err(PlanError::Iperf3(NotIperf3::NotOnePoint));
            }
            if let Some((_, s)) =
                points.iter().find(|(_, s)| !matches!(s.kind, TestKind::TcpStream | TestKind::UdpStream))
            {
                return Err(PlanError::Iperf3(NotIperf3::Kind(s.kind.name().into())));
            }
        }
        if let Some(path) = &self.hgrm {
            if let Some(why) = hgrm_refusal(&points, repeat.max) {
                return Err(PlanError::Hgrm(why));
            }
            // An unwritable PATH is found now, not after the test.
            crate::hgrm::check_writable(path).map_err(|source| PlanError::HgrmPath { path: path.clone(), source })?;
        }
        // Every rule that does not depend on the server's caps, before anything is printed.
        let open = Limits { max_duration_ms: u64::MAX, ..Default::default() };
        for (_, spec) in &points {
            let mut s = spec.clone();
            s.grant_until_stopped(&open);
            s.validate(&open)?;
        }
        Ok(Plan { config: self, points, repeat, start })
    }

    /// Every point of the run: the base test, its sweep, the block count (-k) and the rate per
    /// stream (-b) made totals; `udp_size` as for [`PlanConfig::base_spec`].
    fn points(&self, udp_size: u32) -> Result<Vec<SweepPoint>, PlanError> {
        let base = self.base_spec(udp_size)?;
        let mut points = sweep::points(&base, &self.sweep)?;
        sweep::count_blocks(&mut points, self.blockcount);
        if self.pps.is_none() {
            sweep::rate_per_stream(&mut points);
        }
        Ok(points)
    }

    /// The base test; `udp_size` is the datagram size when `length` does not give one.
    fn base_spec(&self, udp_size: u32) -> Result<TestSpec, PlanError> {
        let kind = match self.profile {
            Some(_) => TestKind::Profile,
            None => self.kind.unwrap_or(TestKind::TcpStream),
        };
        let mut s = TestSpec::new(kind);
        s.connections = self.connections.unwrap_or(1);
        // With a byte count the clock is only a cap.
        let counted = self.bytes.is_some() || self.blockcount.is_some();
        s.duration_ms = secs_ms(self.time.unwrap_or(Duration::from_secs(if counted { 600 } else { 10 })), "--time")?;
        // -t 0: until Ctrl-C; the agent grants its cap as the duration.
        s.until_stopped = s.duration_ms == 0 && self.time.is_some();
        s.bytes = self.bytes;
        s.omit_ms = secs_ms(self.omit, "--omit")?;
        // -i 0 prints no interval lines; the samples are still taken, each second.
        s.interval_ms = match secs_ms(self.interval, "--interval")? {
            0 => 1000,
            ms => ms,
        };
        if kind == TestKind::UdpStream {
            s.msg_size = udp_size;
        }
        s.direction = if self.bidir {
            Direction::Bidir
        } else if self.reverse {
            Direction::Receive
        } else {
            Direction::Send
        };
        // iperf3's --bidir -P N: N connections each way, 2N in all
        s.each_way = self.bidir && kind == TestKind::TcpStream;
        if let Some(l) = self.length {
            s.msg_size = l;
            if self.response.is_none() && matches!(kind, TestKind::TcpRr | TestKind::TcpCrr) {
                s.resp_size = l;
            }
        }
        if let Some(r) = self.response {
            s.resp_size = r;
        }
        s.sndbuf = self.sndbuf.or(self.window);
        s.rcvbuf = self.rcvbuf.or(self.window);
        // For stream tests a rate per stream here, made the total by `sweep::rate_per_stream`
        // once each point's connection count is known.
        s.rate = match (kind, self.rate) {
            // Paced by default, as iperf3's UDP is (1 Mbit/s); 0 asks for no pacing.
            (TestKind::UdpStream, None) if self.pps.is_none() => Some(UDP_DEFAULT_RATE),
            (_, Some(0)) => None,
            (_, r) => r,
        };
        if let Some(pps) = self.pps {
            if kind != TestKind::UdpStream {
                return Err(PlanError::Pps);
            }
            s.rate = Some(pps.saturating_mul(u64::from(s.msg_size)).saturating_mul(8));
        }
        s.zerocopy = self.zerocopy;
        // The test kind's default (on for request/response) unless a flag says.
        s.nodelay = (s.nodelay || self.nodelay) && !self.no_nodelay;
        s.congestion = self.congestion.clone();
        s.tos = self.tos;
        if self.gsro && kind != TestKind::UdpStream {
            return Err(PlanError::Gsro);
        }
        s.gsro = self.gsro;
        s.server_cpu = self.affinity.server;
        if let Some(p) = &self.profile {
            let path = || p.clone();
            let text = std::fs::read_to_string(p).map_err(|source| PlanError::ReadProfile { path: path(), source })?;
            let mut prof: Profile =
                toml::from_str(&text).map_err(|source| PlanError::ProfileToml { path: path(), source })?;
            if let Some(n) = self.connections {
                match prof.groups.as_mut_slice() {
                    [g] => g.connections = n,
                    _ => return Err(PlanError::ProfileGroups { path: path(), groups: prof.groups.len() }),
                }
            }
            prof.validate().map_err(|source| PlanError::Profile { path: path(), source })?;
            s.profile = Some(prof);
        }
        Ok(s)
    }
}

impl Plan {
    /// Try every point's socket options on this host against `server`'s address family, with
    /// this side's `tuning` (an unknown congestion control, a core the host lacks): usage errors
    /// before the server is asked.
    pub fn check_local(&self, tuning: &ClientTuning, server: SocketAddr) -> Result<(), EngineError> {
        self.points.iter().try_for_each(|(_, spec)| check_local_options(spec, tuning, server))
    }

    /// The points again with iperf3's UDP datagram size, once the control connection's MSS is
    /// known (when a udp-stream point has no `length`).
    pub(crate) fn with_control_mss(&mut self, mss: Option<u32>) -> Result<(), PlanError> {
        if self.config.length.is_none() && self.points.iter().any(|(_, s)| s.kind == TestKind::UdpStream) {
            self.points = self.config.points(udp_default_size(mss))?;
        }
        Ok(())
    }
}

/// The instant `--start-at UNIX_MS` names, seen at `now`: refused more than [`START_AT_AHEAD`]
/// ahead.
fn start_at(ms: u64, now: SystemTime) -> Result<SystemTime, PlanError> {
    let at = UNIX_EPOCH.checked_add(Duration::from_millis(ms));
    let ahead = at.and_then(|t| t.duration_since(now).ok()).unwrap_or_default();
    match at {
        Some(at) if ahead <= START_AT_AHEAD => Ok(at),
        _ => Err(PlanError::StartAt(format!(
            "--start-at {ms} ({}) is {} ahead; at most a day ({} ms) is accepted (milliseconds since the Unix \
             epoch: now is {}; a later start is a job for a scheduler: cron, a systemd timer, `linerate mesh`)",
            linerate_model::time::rfc3339_millis(ms),
            if at.is_some() { span(ahead) } else { "too far".to_string() },
            START_AT_AHEAD.as_millis(),
            now.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis(),
        ))),
    }
}

/// A span for people: `4.2 s`, `12 min 5 s`, `25 h 20 min`, `2 d 4 h`.
pub(crate) fn span(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{:.1} s", d.as_secs_f64()),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        3600..172_800 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} d {} h", s / 86_400, s % 86_400 / 3600),
    }
}

/// The UDP datagram size when `length` is not given, by iperf3's rule: the MSS of the control
/// connection (32 KiB on Linux loopback), else 1460 bytes; within what a datagram may carry.
fn udp_default_size(control_mss: Option<u32>) -> u32 {
    use linerate_proto::bench::{MAX_UDP_PAYLOAD, MIN_UDP_PAYLOAD};
    control_mss.unwrap_or(1460).clamp(MIN_UDP_PAYLOAD, MAX_UDP_PAYLOAD)
}

/// `A,B` as two numbers, for the flag `what`.
fn pair(s: &str, what: &'static str) -> Result<(f64, f64), PlanError> {
    let (a, b) = s.split_once(',').ok_or_else(|| PlanError::Pair { what, given: s.to_string() })?;
    let num = |t: &str| t.trim().parse().map_err(|source| PlanError::Number { what, given: t.to_string(), source });
    Ok((num(a)?, num(b)?))
}

/// A duration flag in whole milliseconds, rounded to the nearest (the wire's unit), at most
/// 10,000,000 s as before.
fn secs_ms(d: Duration, what: &'static str) -> Result<u64, PlanError> {
    if d > Duration::from_secs(10_000_000) {
        return Err(PlanError::TooLong { what, given: d });
    }
    Ok(((d.as_nanos() + 500_000) / 1_000_000) as u64)
}

/// Why `--hgrm` cannot take these points (`rmax` runs each), if it cannot.
fn hgrm_refusal(points: &[SweepPoint], rmax: usize) -> Option<HgrmRefusal> {
    if points.len() != 1 || rmax > 1 {
        return Some(HgrmRefusal::Many);
    }
    let kind = points.first()?.1.kind;
    matches!(kind, TestKind::TcpStream | TestKind::UdpStream).then_some(HgrmRefusal::NoTransactions(kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_wins_then_csv_then_iperf3s_json() {
        assert_eq!(Format::of(true, true, true), Format::Json);
        assert_eq!(Format::of(false, true, true), Format::Csv);
        assert_eq!(Format::of(false, false, true), Format::Iperf3);
        assert_eq!(Format::of(false, false, false), Format::Text);
    }

    /// What `linerate bench HOST` asks with no other flag: its defaults.
    fn asked() -> PlanConfig {
        PlanConfig {
            repeat: "1,1".into(),
            confidence: "99,5".into(),
            interval: Duration::from_secs(1),
            ..Default::default()
        }
    }

    fn udp() -> PlanConfig {
        PlanConfig { kind: Some(TestKind::UdpStream), ..asked() }
    }

    fn rr() -> PlanConfig {
        PlanConfig { kind: Some(TestKind::TcpRr), ..asked() }
    }

    #[test]
    fn start_at_is_refused_more_than_a_day_ahead() {
        let now = UNIX_EPOCH + Duration::from_millis(1_800_000_000_000);
        let day = 24 * 3600 * 1000;
        // Past, now, and exactly a day ahead are taken.
        assert_eq!(start_at(1_000, now).unwrap(), UNIX_EPOCH + Duration::from_millis(1_000));
        assert!(start_at(1_800_000_000_000, now).is_ok());
        assert!(start_at(1_800_000_000_000 + day, now).is_ok());
        // A millisecond more is refused, naming the bound; so is a year, and the end of time.
        let e = start_at(1_800_000_000_000 + day + 1, now).unwrap_err().to_string();
        assert!(e.contains("at most a day (86400000 ms)") && e.contains("24 h 0 min ahead"), "{e}");
        let e = start_at(1_800_000_000_000 + 365 * day, now).unwrap_err().to_string();
        assert!(e.contains("365 d 0 h ahead") && e.contains("now is 1800000000000"), "{e}");
        assert!(start_at(u64::MAX, now).is_err());
        assert_eq!(span(Duration::from_millis(4_300)), "4.3 s");
        assert_eq!(span(Duration::from_secs(725)), "12 min 5 s");
        assert_eq!(span(Duration::from_secs(3 * 3600 + 20 * 60)), "3 h 20 min");
        let e = PlanConfig { start_at: Some(u64::MAX), ..asked() }.plan(now).unwrap_err();
        assert!(matches!(e, PlanError::StartAt(_)), "{e:?}");
    }

    #[test]
    fn gsro_is_off_unless_asked_and_only_for_udp() {
        assert!(!udp().base_spec(1460).unwrap().gsro, "one datagram a packet by default");
        assert!(PlanConfig { gsro: true, ..udp() }.base_spec(1460).unwrap().gsro);
        let e = PlanConfig { gsro: true, ..asked() }.base_spec(1460).unwrap_err().to_string();
        assert!(e.contains("--gsro applies to udp-stream"), "{e}");
    }

    #[test]
    fn affinity_takes_the_client_core_and_the_server_core() {
        let a = |client, server| Ok(Affinity { client, server });
        assert_eq!("1".parse(), a(Some(1), None));
        assert_eq!("1,0".parse(), a(Some(1), Some(0)));
        assert_eq!(",3".parse(), a(None, Some(3)));
        for bad in ["", ",", "x", "1,y", "-1"] {
            assert!(bad.parse::<Affinity>().is_err(), "{bad:?}");
        }
        let c = PlanConfig { affinity: Affinity { client: Some(0), server: Some(1) }, ..asked() };
        assert_eq!(c.base_spec(1460).unwrap().server_cpu, Some(1));
    }

    #[test]
    fn a_byte_or_block_count_makes_the_time_a_cap() {
        let s = PlanConfig { bytes: Some(10 << 20), ..asked() }.base_spec(1460).unwrap();
        assert_eq!((s.bytes, s.duration_ms), (Some(10 << 20), 600_000));
        let c = PlanConfig { bytes: Some(1 << 30), time: Some(Duration::from_secs(30)), ..asked() };
        let s = c.base_spec(1460).unwrap();
        assert_eq!((s.bytes, s.duration_ms), (Some(1 << 30), 30_000));
        assert_eq!(asked().base_spec(1460).unwrap().duration_ms, 10_000);
        let c = PlanConfig { blockcount: Some(100), length: Some(1024), sweep: vec!["msg=1K,2K".into()], ..asked() };
        let pts = c.points(1460).unwrap();
        assert_eq!(pts.iter().map(|p| p.1.bytes).collect::<Vec<_>>(), [Some(102_400), Some(204_800)]);
        let addr = "127.0.0.1:1".parse().unwrap();
        assert!(crate::text::banner(&pts[0].1, &addr, &[]).contains("until 100 KiB are sent"));
    }

    #[test]
    fn iperf3s_b_t_and_i_zero_and_its_udp_datagram_rule() {
        // -b per stream, as iperf3's: four streams of 100 Mbit/s are 400 in all.
        let rate = |c: PlanConfig| c.points(1460).unwrap()[0].1.rate;
        assert_eq!(rate(PlanConfig { connections: Some(4), rate: Some(100_000_000), ..asked() }), Some(400_000_000));
        let two = PlanConfig { connections: Some(2), ..udp() };
        assert_eq!(rate(two.clone()), Some(2 * UDP_DEFAULT_RATE), "iperf3's 1 Mbit/s per UDP stream");
        for c in [asked(), udp(), rr()] {
            assert_eq!(rate(PlanConfig { rate: Some(0), ..c.clone() }), None, "{:?}: unpaced", c.kind);
        }
        let pps = PlanConfig { pps: Some(1000), length: Some(100), ..two };
        assert_eq!(rate(pps), Some(800_000), "--pps is in all");
        let c = PlanConfig { connections: Some(4), rate: Some(1000), ..rr() };
        assert_eq!(rate(c), Some(1000), "transactions/s in all");
        assert!(matches!(PlanConfig { pps: Some(1), ..asked() }.base_spec(1460), Err(PlanError::Pps)));
        // -t 0: until stopped, the duration the agent's grant; -i 0: no lines, samples each second.
        let c = PlanConfig { time: Some(Duration::ZERO), interval: Duration::ZERO, ..asked() };
        let s = c.base_spec(1460).unwrap();
        assert!(s.until_stopped && s.duration_ms == 0 && s.interval_ms == 1000, "{s:?}");
        let c = PlanConfig { time: Some(Duration::from_secs(1)), ..asked() };
        assert!(!c.base_spec(1460).unwrap().until_stopped);
        // The UDP datagram: the control connection's MSS (32 KiB on loopback), else 1460.
        assert_eq!(udp_default_size(Some(32_768)), 32_768);
        assert_eq!(udp_default_size(None), 1460);
        assert_eq!(udp_default_size(Some(65_483)), 65_483);
        assert_eq!(udp_default_size(Some(1)), linerate_proto::bench::MIN_UDP_PAYLOAD);
        assert_eq!(udp().base_spec(32_768).unwrap().msg_size, 32_768);
        assert_eq!(PlanConfig { length: Some(64), ..udp() }.base_spec(32_768).unwrap().msg_size, 64, "-l wins");
        let mut plan = udp().plan(SystemTime::now()).unwrap();
        plan.with_control_mss(Some(32_768)).unwrap();
        assert_eq!(plan.points[0].1.msg_size, 32_768, "re-planned once the control connection's MSS is known");
    }

    #[test]
    fn repeats_and_confidence_read_as_n_or_min_max_and_refuse_the_rest() {
        let plan = |repeat: &str, confidence: &str| {
            PlanConfig { repeat: repeat.into(), confidence: confidence.into(), ..asked() }.plan(SystemTime::now())
        };
        assert_eq!(plan("3", "99,5").unwrap().repeat, Repeat::new(3.0, 3.0, 99.0, 5.0));
        assert_eq!(plan("2,10", "95,10").unwrap().repeat, Repeat::new(2.0, 10.0, 95.0, 10.0));
        let e = plan("x", "99,5").unwrap_err();
        assert_eq!(e.to_string(), "--repeat: expected two numbers A,B, got \"x\"");
        let e = plan("1,1", "99,y").unwrap_err();
        assert_eq!(e.to_string(), "--confidence: \"y\"");
        assert!(std::error::Error::source(&e).is_some(), "the number's own error follows");
        let e = PlanConfig { time: Some(Duration::from_secs(10_000_001)), ..asked() }.plan(SystemTime::now());
        assert_eq!(e.unwrap_err().to_string(), "--time 10000001s: must be at most 10000000 s (about 115 days)");
    }

    #[test]
    fn hgrm_takes_one_request_response_test_and_refuses_streams_sweeps_and_repeats() {
        let refusal = |c: PlanConfig, rmax| hgrm_refusal(&c.points(1460).unwrap(), rmax);
        assert_eq!(refusal(rr(), 1), None);
        let crr = PlanConfig { kind: Some(TestKind::TcpCrr), connections: Some(4), rate: Some(1000), ..asked() };
        assert_eq!(refusal(crr, 1), None);
        let swept = PlanConfig { sweep: vec!["msg=1,1K".into()], ..rr() };
        for (c, rmax, want) in [
            (asked(), 1, "a tcp-stream test times no transactions"),
            (udp(), 1, "a udp-stream test times no transactions"),
            (swept, 1, "a --sweep or --repeat is refused"),
            (rr(), 3, "a --sweep or --repeat is refused"),
        ] {
            let why = refusal(c, rmax).unwrap_or_else(|| panic!("×{rmax} taken")).to_string();
            assert!(why.contains(want), "{why}");
        }
        let dir = tempfile::tempdir().unwrap();
        let e = PlanConfig { hgrm: Some(dir.path().into()), ..rr() }.plan(SystemTime::now()).unwrap_err();
        assert!(e.to_string().ends_with(": is a directory"), "{e}");
    }

    #[test]
    fn shipped_profiles_parse_and_validate() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../profiles");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "toml") {
                let c = PlanConfig { profile: Some(p.clone()), ..asked() };
                let s = c.base_spec(1460).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                assert_eq!(s.kind, TestKind::Profile);
                n += 1;
            }
        }
        assert!(n >= 4, "profiles shipped: {n}");
    }
}
