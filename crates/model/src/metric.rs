//! The names a stored run's figures go by ([`MetricId`]): `throughput`, `latency.p99`,
//! `cpu.local`, `throughput.steal_adjusted`, a lab group's `rate.GROUP` and `failed.GROUP`, a
//! mesh pair's `TEST:FROM>TO`. Stored runs, `report compare`, the CSV and JSON exports, the
//! HTML report and the store's `metrics` table use these strings, so they never change; this
//! module is the one place that writes them ([`fmt::Display`]) and reads them back
//! ([`FromStr`]): every producer builds a typed [`MetricKind`], every reader matches on one.
//!
//! A name is read by the first of these rules that fits it, so that each name has exactly one
//! reading (a [`MetricId`] is always the reading of its own name, see [`MetricId::new`]):
//!
//! 1. a goal: `throughput`, `transactions`; with `.best` a sweep's best point's, with
//!    `.steal_adjusted` the figure without the hypervisor's steal;
//! 2. `latency.` and a latency figure (`p50`, `max`, ...);
//! 3. a figure of the whole run: `jain`, `loss`, `packets`, `jitter`, `rtt`, `retransmits`,
//!    `seconds`, `errors`;
//! 4. a machine's figure: `cpu.SIDE`, `cpu.SIDE.per_gbit`, `steal.SIDE`, `service_demand.SIDE`,
//!    `service_demand_tran.SIDE`, `peak_rss.SIDE`, SIDE one of `local`, `remote`, `client`,
//!    `server`;
//! 5. a profile group's figure: `group.NAME.send`, `.receive`, `.transactions`, `.latency.P`;
//! 6. a mesh pair's figure: `TEST:FROM>TO`, with `:p50` the median round trip (none of the three
//!    names empty or holding `:` or `>`, which mesh names never do);
//! 7. a lab group's figure: `rate.GROUP`, `failed.GROUP`, `jain.GROUP`, `cpu.GROUP`,
//!    `machine_cpu_per_gb.GROUP`, `start_skew.GROUP`, `ratio.GROUP`, and the older sketch's
//!    `guest.NAME`;
//! 8. anything else is kept as it is ([`MetricKind::Other`]): a name a newer linerate wrote.
//!
//! So a lab group named like a machine's side (`local`) has its CPU figure read by rule 4:
//! `cpu.local` is the same name either way ([`MetricId::of_lab_group`] says so).

use crate::doc::bench::LatencyFigure;
use crate::doc::mesh::PairFigure;
use std::fmt;
use std::str::FromStr;

/// A bench test's goal figure: what a stream test (and a copy) is judged by, or a
/// request/response test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Goal {
    /// Goodput, bit/s (`throughput`).
    Throughput,
    /// Transactions per second (`transactions`).
    Transactions,
}

impl Goal {
    /// Both.
    pub const ALL: [Goal; 2] = [Goal::Throughput, Goal::Transactions];

    /// The name.
    pub fn name(self) -> &'static str {
        match self {
            Goal::Throughput => "throughput",
            Goal::Transactions => "transactions",
        }
    }

    /// The goal of a request/response test (`rr`) or of a stream test.
    pub fn of(rr: bool) -> Goal {
        if rr {
            Goal::Transactions
        } else {
            Goal::Throughput
        }
    }

    fn parse(s: &str) -> Option<Goal> {
        Goal::ALL.into_iter().find(|g| g.name() == s)
    }
}

/// A figure of a run as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunFigure {
    /// Jain's fairness index between connections (`jain`).
    Jain,
    /// Datagram loss, percent (`loss`).
    Loss,
    /// Packets per second (`packets`).
    Packets,
    /// UDP jitter, µs (`jitter`).
    Jitter,
    /// Smoothed round trip, µs (`rtt`).
    Rtt,
    /// Retransmitted segments (`retransmits`).
    Retransmits,
    /// A copy's elapsed time, seconds (`seconds`).
    Seconds,
    /// A copy's failed entries (`errors`).
    Errors,
}

impl RunFigure {
    /// Every one.
    pub const ALL: [RunFigure; 8] = [
        RunFigure::Jain,
        RunFigure::Loss,
        RunFigure::Packets,
        RunFigure::Jitter,
        RunFigure::Rtt,
        RunFigure::Retransmits,
        RunFigure::Seconds,
        RunFigure::Errors,
    ];

    /// The name.
    pub fn name(self) -> &'static str {
        match self {
            RunFigure::Jain => "jain",
            RunFigure::Loss => "loss",
            RunFigure::Packets => "packets",
            RunFigure::Jitter => "jitter",
            RunFigure::Rtt => "rtt",
            RunFigure::Retransmits => "retransmits",
            RunFigure::Seconds => "seconds",
            RunFigure::Errors => "errors",
        }
    }
}

/// Which machine a figure is of: a bench run's two ends, a copy's two.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// The bench client.
    Local,
    /// The bench agent.
    Remote,
    /// The copy's sender.
    Client,
    /// The copy's receiver.
    Server,
}

impl Side {
    /// Every one.
    pub const ALL: [Side; 4] = [Side::Local, Side::Remote, Side::Client, Side::Server];
    /// A bench run's, client first.
    pub const BENCH: [Side; 2] = [Side::Local, Side::Remote];
    /// A copy's, client first.
    pub const COPY: [Side; 2] = [Side::Client, Side::Server];

    /// The name.
    pub fn name(self) -> &'static str {
        match self {
            Side::Local => "local",
            Side::Remote => "remote",
            Side::Client => "client",
            Side::Server => "server",
        }
    }

    fn parse(s: &str) -> Option<Side> {
        Side::ALL.into_iter().find(|x| x.name() == s)
    }
}

/// A figure of one machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SideFigure {
    /// Busy CPU, percent of the machine (bench), or CPU seconds (cp): `cpu.SIDE`.
    Cpu,
    /// CPU seconds per gigabit moved: `cpu.SIDE.per_gbit`.
    CpuPerGbit,
    /// The share of the machine's CPU time the hypervisor took, percent: `steal.SIDE`.
    Steal,
    /// netperf's service demand, CPU µs per KB: `service_demand.SIDE`.
    ServiceDemand,
    /// ... per transaction: `service_demand_tran.SIDE`.
    ServiceDemandTran,
    /// Peak resident memory, bytes: `peak_rss.SIDE`.
    PeakRss,
}

impl SideFigure {
    /// Every one.
    pub const ALL: [SideFigure; 6] = [
        SideFigure::Cpu,
        SideFigure::CpuPerGbit,
        SideFigure::Steal,
        SideFigure::ServiceDemand,
        SideFigure::ServiceDemandTran,
        SideFigure::PeakRss,
    ];

    /// The name's head (before the side).
    fn head(self) -> &'static str {
        match self {
            SideFigure::Cpu | SideFigure::CpuPerGbit => "cpu",
            SideFigure::Steal => "steal",
            SideFigure::ServiceDemand => "service_demand",
            SideFigure::ServiceDemandTran => "service_demand_tran",
            SideFigure::PeakRss => "peak_rss",
        }
    }
}

/// A figure of one group of a profile test (rrul's bulk flows, its latency probe).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProfileFigure {
    /// Goodput sent, bit/s.
    Send,
    /// Goodput received, bit/s.
    Receive,
    /// Transactions per second.
    Transactions,
    /// A latency figure, µs.
    Latency(LatencyFigure),
}

impl ProfileFigure {
    /// Every one.
    pub fn all() -> impl Iterator<Item = ProfileFigure> {
        [ProfileFigure::Send, ProfileFigure::Receive, ProfileFigure::Transactions]
            .into_iter()
            .chain(LatencyFigure::ALL.into_iter().map(ProfileFigure::Latency))
    }

    fn write(self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProfileFigure::Send => f.write_str("send"),
            ProfileFigure::Receive => f.write_str("receive"),
            ProfileFigure::Transactions => f.write_str("transactions"),
            ProfileFigure::Latency(l) => write!(f, "latency.{}", l.name()),
        }
    }

    /// The name (`send`, `latency.p99`).
    fn name(self) -> String {
        struct Shown(ProfileFigure);
        impl fmt::Display for Shown {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.write(f)
            }
        }
        Shown(self).to_string()
    }
}

/// A figure of one group of a lab run (the runs measured together), the median over repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupFigure {
    /// Total rate, bit/s: `rate.GROUP`, the group's goal.
    Rate,
    /// Runs of the group that failed: `failed.GROUP`, a goal too (more failures regress).
    Failed,
    /// Fairness between the members: `jain.GROUP`.
    Jain,
    /// The first member's client CPU, percent: `cpu.GROUP`.
    Cpu,
    /// The machine's busy core-seconds per GB moved: `machine_cpu_per_gb.GROUP`.
    MachineCpuPerGb,
    /// The spread of the members' starts, ms: `start_skew.GROUP`.
    StartSkew,
    /// The rate over the iperf3 ceiling: `ratio.GROUP`.
    Ratio,
    /// The older sketch's per-guest rate, bit/s: `guest.NAME`.
    Guest,
}

impl GroupFigure {
    /// Every one.
    pub const ALL: [GroupFigure; 8] = [
        GroupFigure::Rate,
        GroupFigure::Failed,
        GroupFigure::Jain,
        GroupFigure::Cpu,
        GroupFigure::MachineCpuPerGb,
        GroupFigure::StartSkew,
        GroupFigure::Ratio,
        GroupFigure::Guest,
    ];

    /// The name's head (before the group).
    pub fn name(self) -> &'static str {
        match self {
            GroupFigure::Rate => "rate",
            GroupFigure::Failed => "failed",
            GroupFigure::Jain => "jain",
            GroupFigure::Cpu => "cpu",
            GroupFigure::MachineCpuPerGb => "machine_cpu_per_gb",
            GroupFigure::StartSkew => "start_skew",
            GroupFigure::Ratio => "ratio",
            GroupFigure::Guest => "guest",
        }
    }
}

/// What a metric is: the typed reading of its name (see the module's rules).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MetricKind {
    /// A goal figure as measured: `throughput`, `transactions`.
    Goal(Goal),
    /// A sweep's best point's goal figure: `throughput.best`.
    Best(Goal),
    /// A repeated run's goal figure without the hypervisor's steal: `throughput.steal_adjusted`.
    StealAdjusted(Goal),
    /// The run's latency: `latency.p99`.
    Latency(LatencyFigure),
    /// A figure of the run as a whole: `jain`, `seconds`.
    Run(RunFigure),
    /// A figure of one machine: `cpu.local`, `peak_rss.server`.
    Side(SideFigure, Side),
    /// A figure of a profile's group: `group.NAME.send`.
    Profile {
        /// The group's name.
        group: String,
        /// Which figure.
        figure: ProfileFigure,
    },
    /// A figure of a mesh pair: `TEST:FROM>TO`, `TEST:FROM>TO:p50`.
    Pair {
        /// The test's name.
        test: String,
        /// The agent that ran it.
        from: String,
        /// The agent it measured against.
        to: String,
        /// Which figure.
        figure: PairFigure,
    },
    /// A figure of a lab group: `rate.GROUP`, `failed.GROUP`.
    Group(GroupFigure, String),
    /// A name none of the others reads, kept as it is.
    Other(String),
}

impl fmt::Display for MetricKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetricKind::Goal(g) => f.write_str(g.name()),
            MetricKind::Best(g) => write!(f, "{}.best", g.name()),
            MetricKind::StealAdjusted(g) => write!(f, "{}.steal_adjusted", g.name()),
            MetricKind::Latency(l) => write!(f, "latency.{}", l.name()),
            MetricKind::Run(r) => f.write_str(r.name()),
            MetricKind::Side(SideFigure::CpuPerGbit, s) => write!(f, "cpu.{}.per_gbit", s.name()),
            MetricKind::Side(k, s) => write!(f, "{}.{}", k.head(), s.name()),
            MetricKind::Profile { group, figure } => {
                write!(f, "group.{group}.")?;
                figure.write(f)
            }
            MetricKind::Pair { test, from, to, figure: PairFigure::Throughput } => write!(f, "{test}:{from}>{to}"),
            MetricKind::Pair { test, from, to, figure: PairFigure::LatencyP50 } => write!(f, "{test}:{from}>{to}:p50"),
            MetricKind::Group(k, g) => write!(f, "{}.{g}", k.name()),
            MetricKind::Other(s) => f.write_str(s),
        }
    }
}

impl MetricKind {
    /// The reading of `s` by the module's rules.
    fn read(s: &str) -> MetricKind {
        if let Some(g) = Goal::parse(s) {
            return MetricKind::Goal(g);
        }
        if let Some(g) = s.strip_suffix(".best").and_then(Goal::parse) {
            return MetricKind::Best(g);
        }
        if let Some(g) = s.strip_suffix(".steal_adjusted").and_then(Goal::parse) {
            return MetricKind::StealAdjusted(g);
        }
        if let Some(l) = s.strip_prefix("latency.").and_then(LatencyFigure::parse) {
            return MetricKind::Latency(l);
        }
        if let Some(r) = RunFigure::ALL.into_iter().find(|r| r.name() == s) {
            return MetricKind::Run(r);
        }
        if let Some(side) = s.strip_prefix("cpu.").and_then(|t| t.strip_suffix(".per_gbit")).and_then(Side::parse) {
            return MetricKind::Side(SideFigure::CpuPerGbit, side);
        }
        if let Some((head, tail)) = s.split_once('.') {
            let figure = SideFigure::ALL.into_iter().find(|k| *k != SideFigure::CpuPerGbit && k.head() == head);
            if let (Some(k), Some(side)) = (figure, Side::parse(tail)) {
                return MetricKind::Side(k, side);
            }
        }
        if let Some(rest) = s.strip_prefix("group.") {
            for figure in ProfileFigure::all() {
                let group = rest.strip_suffix(figure.name().as_str()).and_then(|g| g.strip_suffix('.'));
                if let Some(group) = group.filter(|g| !g.is_empty()) {
                    return MetricKind::Profile { group: group.to_string(), figure };
                }
            }
        }
        if let Some(pair) = read_pair(s) {
            return pair;
        }
        if let Some((head, group)) = s.split_once('.') {
            if let Some(k) = GroupFigure::ALL.into_iter().find(|k| k.name() == head).filter(|_| !group.is_empty()) {
                return MetricKind::Group(k, group.to_string());
            }
        }
        MetricKind::Other(s.to_string())
    }
}

/// `TEST:FROM>TO[:p50]`, each name non-empty and without `:` or `>`.
fn read_pair(s: &str) -> Option<MetricKind> {
    let (body, figure) = match s.strip_suffix(":p50") {
        Some(b) => (b, PairFigure::LatencyP50),
        None => (s, PairFigure::Throughput),
    };
    let (test, rest) = body.split_once(':')?;
    let (from, to) = rest.split_once('>')?;
    let name = |x: &str| !x.is_empty() && !x.contains([':', '>']);
    (name(test) && name(from) && name(to)).then(|| MetricKind::Pair {
        test: test.to_string(),
        from: from.to_string(),
        to: to.to_string(),
        figure,
    })
}

/// A metric's name, typed: the reading of its name by the module's rules ([`MetricKind`]).
/// Written ([`fmt::Display`]) and read ([`FromStr`], which takes any string) as the name, in
/// JSON too; two ids are equal exactly when their names are.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MetricId(MetricKind);

impl MetricId {
    /// The id of `kind`: `kind` itself, or, where its name reads otherwise by the module's rules
    /// (a lab group named `local`, a mesh pair with a `:` in a name), that reading, so that an id
    /// always equals the one read back from its name.
    pub fn new(kind: MetricKind) -> MetricId {
        let read = MetricKind::read(&kind.to_string());
        MetricId(read)
    }

    /// What the metric is.
    pub fn kind(&self) -> &MetricKind {
        &self.0
    }

    /// A goal figure as measured.
    pub fn goal(g: Goal) -> MetricId {
        MetricId(MetricKind::Goal(g))
    }

    /// A sweep's best point's goal figure.
    pub fn best(g: Goal) -> MetricId {
        MetricId(MetricKind::Best(g))
    }

    /// A repeated run's goal figure without the hypervisor's steal.
    pub fn steal_adjusted(g: Goal) -> MetricId {
        MetricId(MetricKind::StealAdjusted(g))
    }

    /// The run's latency figure.
    pub fn latency(l: LatencyFigure) -> MetricId {
        MetricId(MetricKind::Latency(l))
    }

    /// A figure of the run as a whole.
    pub fn run(r: RunFigure) -> MetricId {
        MetricId(MetricKind::Run(r))
    }

    /// A figure of one machine.
    pub fn side(k: SideFigure, side: Side) -> MetricId {
        MetricId(MetricKind::Side(k, side))
    }

    /// A figure of a profile's group.
    pub fn profile(group: &str, figure: ProfileFigure) -> MetricId {
        MetricId::new(MetricKind::Profile { group: group.to_string(), figure })
    }

    /// A figure of lab group `group` (whitespace in its name written `_`).
    pub fn group(k: GroupFigure, group: &str) -> MetricId {
        let key: String = group.chars().map(|c| if c.is_whitespace() { '_' } else { c }).collect();
        MetricId::new(MetricKind::Group(k, key))
    }

    /// A figure of test `test` from agent `from` to agent `to`.
    pub fn pair(test: &str, from: &str, to: &str, figure: PairFigure) -> MetricId {
        MetricId::new(MetricKind::Pair { test: test.into(), from: from.into(), to: to.into(), figure })
    }

    /// The figure without the hypervisor's steal this goal figure is judged by, when both runs
    /// have it: `throughput` → `throughput.steal_adjusted`. `None` for other figures.
    pub fn without_steal(&self) -> Option<MetricId> {
        match self.0 {
            MetricKind::Goal(g) => Some(MetricId::steal_adjusted(g)),
            _ => None,
        }
    }

    /// A sweep's best point's figure.
    pub fn is_best(&self) -> bool {
        matches!(self.0, MetricKind::Best(_))
    }

    /// The lab group whose figure `figure` this is.
    pub fn lab_group(&self, figure: GroupFigure) -> Option<&str> {
        match &self.0 {
            MetricKind::Group(k, g) if *k == figure => Some(g),
            _ => None,
        }
    }

    /// Whether this is a figure of lab group `group` (any but its failed count): `rate.GROUP`,
    /// `jain.GROUP`..., and `cpu.GROUP` for a group named like a machine's side (rule 4 reads
    /// `cpu.local` as the local machine's).
    pub fn of_lab_group(&self, group: &str) -> bool {
        match &self.0 {
            MetricKind::Group(k, g) => *k != GroupFigure::Failed && g == group,
            MetricKind::Side(SideFigure::Cpu, side) => side.name() == group,
            _ => false,
        }
    }
}

impl fmt::Display for MetricId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for MetricId {
    type Err = std::convert::Infallible;

    /// Any name reads: one no rule reads is [`MetricKind::Other`].
    fn from_str(s: &str) -> Result<MetricId, Self::Err> {
        Ok(MetricId(MetricKind::read(s)))
    }
}

impl From<&str> for MetricId {
    fn from(s: &str) -> MetricId {
        MetricId(MetricKind::read(s))
    }
}

impl From<&String> for MetricId {
    fn from(s: &String) -> MetricId {
        MetricId::from(s.as_str())
    }
}

impl From<String> for MetricId {
    fn from(s: String) -> MetricId {
        MetricId::from(s.as_str())
    }
}

impl From<MetricKind> for MetricId {
    fn from(k: MetricKind) -> MetricId {
        MetricId::new(k)
    }
}

/// An id equals a name when it is written so (compared as it is written, without allocating).
impl PartialEq<str> for MetricId {
    fn eq(&self, other: &str) -> bool {
        struct Rest<'a>(&'a str);
        impl fmt::Write for Rest<'_> {
            fn write_str(&mut self, s: &str) -> fmt::Result {
                self.0 = self.0.strip_prefix(s).ok_or(fmt::Error)?;
                Ok(())
            }
        }
        let mut rest = Rest(other);
        fmt::write(&mut rest, format_args!("{self}")).is_ok() && rest.0.is_empty()
    }
}

impl PartialEq<&str> for MetricId {
    fn eq(&self, other: &&str) -> bool {
        *self == **other
    }
}

impl PartialEq<String> for MetricId {
    fn eq(&self, other: &String) -> bool {
        *self == *other.as_str()
    }
}

impl serde::Serialize for MetricId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for MetricId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<MetricId, D::Error> {
        let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Ok(MetricId::from(s.as_ref()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One id of every kind (and every figure of each kind).
    fn every_kind() -> Vec<MetricKind> {
        let mut out = Vec::new();
        for g in Goal::ALL {
            out.extend([MetricKind::Goal(g), MetricKind::Best(g), MetricKind::StealAdjusted(g)]);
        }
        out.extend(LatencyFigure::ALL.map(MetricKind::Latency));
        out.extend(RunFigure::ALL.map(MetricKind::Run));
        for k in SideFigure::ALL {
            out.extend(Side::ALL.map(|s| MetricKind::Side(k, s)));
        }
        for figure in ProfileFigure::all() {
            for group in ["upload", "latency", "a.b", "send", "x.latency"] {
                out.push(MetricKind::Profile { group: group.into(), figure });
            }
        }
        for figure in PairFigure::ALL {
            for (test, from, to) in [("tput", "a", "b"), ("rtt", "b1.lan", "a-2"), ("rate.x", "p50", "best")] {
                out.push(MetricKind::Pair { test: test.into(), from: from.into(), to: to.into(), figure });
            }
        }
        for k in GroupFigure::ALL {
            for g in ["fair", "tx/8", "scp-4", "a.b", "cpu", "rate.x", "p50"] {
                out.push(MetricKind::Group(k, g.into()));
            }
        }
        out.extend(
            ["", "bogus", "throughput.worst", "latency.p42", "group.x", "a:b", ".rate", "rate."]
                .map(|s| MetricKind::Other(s.into())),
        );
        out
    }

    #[test]
    fn every_kind_round_trips_through_its_name() {
        for kind in every_kind() {
            let name = kind.to_string();
            let id: MetricId = name.parse().unwrap();
            assert_eq!(id.kind(), &kind, "{name:?}");
            assert_eq!(id.to_string(), name);
            assert_eq!(MetricId::new(kind.clone()), id, "{name:?}");
            let json = serde_json::to_string(&id).unwrap();
            assert_eq!(json, serde_json::to_string(&name).unwrap());
            assert_eq!(serde_json::from_str::<MetricId>(&json).unwrap(), id);
        }
    }

    #[test]
    fn any_name_reads_and_writes_back_unchanged() {
        // names made of the grammar's own pieces, in every order (a property over them)
        let pieces = ["throughput", "cpu", "local", "rate", "group", "latency", "p50", "best", "x", ""];
        let glue = [".", ":", ">", ""];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for _ in 0..20_000 {
            let mut name = String::new();
            for _ in 0..next(6) {
                name.push_str(pieces[next(pieces.len())]);
                name.push_str(glue[next(glue.len())]);
            }
            let id = MetricId::from(name.as_str());
            assert_eq!(id.to_string(), name);
            assert_eq!(MetricId::new(id.kind().clone()), id, "{name:?}");
        }
    }

    #[test]
    fn the_names_stored_runs_hold_read_as_their_kind() {
        use MetricKind as K;
        let cases = [
            ("throughput", K::Goal(Goal::Throughput)),
            ("transactions", K::Goal(Goal::Transactions)),
            ("throughput.best", K::Best(Goal::Throughput)),
            ("transactions.best", K::Best(Goal::Transactions)),
            ("throughput.steal_adjusted", K::StealAdjusted(Goal::Throughput)),
            ("transactions.steal_adjusted", K::StealAdjusted(Goal::Transactions)),
            ("latency.p99", K::Latency(LatencyFigure::P99)),
            ("latency.p999", K::Latency(LatencyFigure::P999)),
            ("latency.mean", K::Latency(LatencyFigure::Mean)),
            ("seconds", K::Run(RunFigure::Seconds)),
            ("errors", K::Run(RunFigure::Errors)),
            ("jain", K::Run(RunFigure::Jain)),
            ("cpu.local", K::Side(SideFigure::Cpu, Side::Local)),
            ("cpu.client.per_gbit", K::Side(SideFigure::CpuPerGbit, Side::Client)),
            ("steal.remote", K::Side(SideFigure::Steal, Side::Remote)),
            ("service_demand_tran.local", K::Side(SideFigure::ServiceDemandTran, Side::Local)),
            ("peak_rss.server", K::Side(SideFigure::PeakRss, Side::Server)),
            (
                "group.latency.latency.p99",
                K::Profile { group: "latency".into(), figure: ProfileFigure::Latency(LatencyFigure::P99) },
            ),
            ("group.upload.send", K::Profile { group: "upload".into(), figure: ProfileFigure::Send }),
            ("rate.fair", K::Group(GroupFigure::Rate, "fair".into())),
            ("failed.scp-4", K::Group(GroupFigure::Failed, "scp-4".into())),
            ("jain.tx/8", K::Group(GroupFigure::Jain, "tx/8".into())),
            ("cpu.iperf3", K::Group(GroupFigure::Cpu, "iperf3".into())),
            ("machine_cpu_per_gb.pair", K::Group(GroupFigure::MachineCpuPerGb, "pair".into())),
            ("start_skew.fair", K::Group(GroupFigure::StartSkew, "fair".into())),
            ("ratio.bench", K::Group(GroupFigure::Ratio, "bench".into())),
            ("guest.g1", K::Group(GroupFigure::Guest, "g1".into())),
            (
                "tput:a>b",
                K::Pair { test: "tput".into(), from: "a".into(), to: "b".into(), figure: PairFigure::Throughput },
            ),
            (
                "rtt:b>a:p50",
                K::Pair { test: "rtt".into(), from: "b".into(), to: "a".into(), figure: PairFigure::LatencyP50 },
            ),
            ("something.new", K::Other("something.new".into())),
        ];
        for (name, kind) in cases {
            assert_eq!(MetricId::from(name).kind(), &kind, "{name}");
            assert_eq!(kind.to_string(), name);
        }
    }

    #[test]
    fn constructors_write_todays_names() {
        assert_eq!(MetricId::group(GroupFigure::Failed, "two words").to_string(), "failed.two_words");
        assert_eq!(MetricId::pair("tput", "a", "b", PairFigure::Throughput).to_string(), "tput:a>b");
        assert_eq!(MetricId::goal(Goal::Throughput).without_steal().unwrap().to_string(), "throughput.steal_adjusted");
        assert_eq!(MetricId::best(Goal::Throughput).without_steal(), None);
        // a lab group named like a side: its CPU figure is the side's name, and still the group's
        let id = MetricId::group(GroupFigure::Cpu, "local");
        assert_eq!(id, MetricId::side(SideFigure::Cpu, Side::Local));
        assert!(id.of_lab_group("local") && !MetricId::group(GroupFigure::Failed, "local").of_lab_group("local"));
        assert_eq!(MetricId::from("failed.fair").lab_group(GroupFigure::Failed), Some("fair"));
        let (fair, fai) = (MetricId::group(GroupFigure::Rate, "fair"), MetricId::group(GroupFigure::Rate, "fai"));
        assert!(fair == "rate.fair" && fair != "rate.fai" && fai != "rate.fair" && fair != "rate.fairer");
        assert!(MetricId::pair("t", "a", "b", PairFigure::LatencyP50) == "t:a>b:p50");
    }
}
