//! The `linerate lab run` results document (results.json, and what `--json` prints), schema
//! [`LAB_SCHEMA`]: the scenario, the lab as built, and one record per measurement. Written by
//! `lab/src/runner.rs` (the lab's description by `lab/src/plan.rs`), read by `linerate-report`.

use super::bench::BenchDocument;
use super::cp::CpSummary;
use super::ToolInfo;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The schema string of a lab results document.
pub const LAB_SCHEMA: &str = "linerate.lab/1";

/// One `linerate lab run`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct LabDocument {
    /// Always [`LAB_SCHEMA`].
    pub schema: String,
    /// The program that wrote it. Documents written before the typed documents have no `tool`;
    /// readers take that as the older, untyped form.
    pub tool: ToolInfo,
    /// The scenario file.
    pub scenario: LabScenario,
    /// The lab's run id (`lr` and hex digits), which names its namespaces.
    pub run_id: String,
    /// Start, seconds since the Unix epoch.
    pub started_unix: u64,
    /// End, seconds since the Unix epoch.
    pub finished_unix: u64,
    /// The machine the lab ran on.
    pub machine: Machine,
    /// The lab as built: hosts and their addresses, switches, links, QoS.
    pub lab: LabDescription,
    /// The directory that held the runner's trees, copies and keys: a fresh directory under
    /// `/dev/shm` (tmpfs, so copies compare with iperf3's memory-to-memory figures) unless the
    /// scenario's `workdir` chose one. Absent (`null`) in documents written before it was recorded.
    #[serde(default)]
    pub workdir: Option<String>,
    /// One record per measurement (instance × repeat), in the order they ran.
    pub runs: Vec<LabRun>,
    /// One record per group and repeat: the runs that went at once.
    pub groups: Vec<GroupRecord>,
    /// What linerate's link emulator did on each link it emulated, over the whole scenario
    /// (empty where netem or nothing emulated the links, and in documents before it was kept).
    #[serde(default)]
    pub emulators: Vec<LabEmulator>,
    /// A smoke run's factor (`lab run --scale-time F`): every duration, tree and repeat count
    /// was shortened by it, so the figures check that the scenario runs, not what it measures.
    /// `null` for a run as the scenario says.
    #[serde(default)]
    pub time_scale: Option<f64>,
}

/// One link emulated by linerate's emulator, and what it did to its packets.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct LabEmulator {
    /// The link's name.
    pub link: String,
    /// From end a to end b.
    pub a_to_b: EmuCounters,
    /// From end b to end a.
    pub b_to_a: EmuCounters,
}

/// What one direction of an emulated link did to its packets.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EmuCounters {
    /// Packets that arrived.
    pub received: u64,
    /// Packets released (duplicates included).
    pub passed: u64,
    /// Bytes released.
    pub passed_bytes: u64,
    /// Dropped by the loss model.
    pub lost: u64,
    /// Dropped at the rate queue's limit.
    pub queue_drops: u64,
    /// Dropped because the delay line was full.
    pub overflow_drops: u64,
    /// Dropped while the link was down (`lab set LINK down`).
    pub down_drops: u64,
    /// Extra copies sent.
    pub duplicated: u64,
    /// Packets with a flipped bit.
    pub corrupted: u64,
    /// Packets released ahead of earlier ones.
    pub reordered: u64,
    /// Most bytes ever waiting for the rate queue.
    pub queue_high_bytes: u64,
    /// Super-packets cut into their wire packets because a draw hit one of them.
    #[serde(default)]
    pub segmented: u64,
}

/// The scenario a lab ran.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct LabScenario {
    /// Its `name`.
    pub name: String,
    /// Its `description`.
    pub description: String,
    /// The file it came from.
    pub file: String,
}

/// The machine a lab ran on.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct Machine {
    /// Kernel release.
    pub kernel: String,
    /// CPUs available.
    pub cpus: usize,
}

/// A measuring tool of a lab run.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Tool {
    /// `linerate bench`.
    Bench,
    /// `linerate cp` of a generated tree.
    Cp,
    /// iperf3 (`--json`).
    Iperf3,
    /// scp over a throwaway sshd.
    Scp,
    /// rsync over ssh.
    Rsync,
    /// tar piped through ssh.
    Tar,
    /// rclone over sftp (the throwaway sshd).
    Rclone,
}

impl Tool {
    /// The lowercase name used in scenarios and documents.
    pub fn name(self) -> &'static str {
        match self {
            Tool::Bench => "bench",
            Tool::Cp => "cp",
            Tool::Iperf3 => "iperf3",
            Tool::Scp => "scp",
            Tool::Rsync => "rsync",
            Tool::Tar => "tar",
            Tool::Rclone => "rclone",
        }
    }

    /// Every tool, in the order of the enum.
    pub const ALL: [Tool; 7] = [Tool::Bench, Tool::Cp, Tool::Iperf3, Tool::Scp, Tool::Rsync, Tool::Tar, Tool::Rclone];

    /// Whether the tool copies a generated tree (and its copy is verified byte for byte).
    pub fn copies(self) -> bool {
        !matches!(self, Tool::Bench | Tool::Iperf3)
    }

    /// A reference tool whose best group is the ceiling other tools are compared with.
    pub fn is_ceiling(self) -> bool {
        self == Tool::Iperf3
    }
}

/// How a `linerate cp` run reaches the lab's server host.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum CpMode {
    /// `linerate cp SRC ADDR:7878:TAG` to the lab's `linerate serve`.
    #[default]
    Push,
    /// `linerate cp ADDR:7878:TAG DEST` from the lab's `linerate serve` (the tree placed under
    /// its root first).
    Pull,
    /// `linerate cp SRC user@ADDR:DEST` through the lab's sshd (`linerate serve --once --ssh`
    /// on the server host).
    SshPush,
    /// `linerate cp user@ADDR:SRC DEST` through the lab's sshd.
    SshPull,
}

impl CpMode {
    /// The name used in scenarios and documents.
    pub fn name(self) -> &'static str {
        match self {
            CpMode::Push => "push",
            CpMode::Pull => "pull",
            CpMode::SshPush => "ssh-push",
            CpMode::SshPull => "ssh-pull",
        }
    }

    /// Whether the copy goes through ssh.
    pub fn over_ssh(self) -> bool {
        matches!(self, CpMode::SshPush | CpMode::SshPull)
    }

    /// Whether the server host sends (the client pulls).
    pub fn pulls(self) -> bool {
        matches!(self, CpMode::Pull | CpMode::SshPull)
    }
}

/// One measurement: one client instance in one repeat of its group.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct LabRun {
    /// Unique among the instances: the run's name, with `@HOST` (and `/LINK`) when it runs on
    /// several hosts (or links) at once.
    pub name: String,
    /// The tool.
    pub tool: Tool,
    /// For `cp`: how it reached the server host; `null` for other tools. Absent in documents
    /// written before cp had modes, whose cp runs all pushed to the daemon.
    #[serde(default)]
    pub mode: Option<CpMode>,
    /// The client host.
    pub host: String,
    /// The server host.
    pub server: String,
    /// The address the client reached the server at.
    pub server_addr: String,
    /// The link the instance was sent through, when the scenario named one (`via`, `vias`).
    #[serde(deserialize_with = "super::required")]
    pub via: Option<String>,
    /// The group it ran in: the runs measured at the same time.
    pub group: String,
    /// Set when the group is one step of a scaling sweep (`sweep = [1, 2, 4]`).
    #[serde(deserialize_with = "super::required")]
    pub sweep: Option<SweepStep>,
    /// Repeat index, from 0.
    pub repeat: u32,
    /// Parallel streams (connections, or parallel scp/rsync/tar copies) of this instance.
    pub streams: u32,
    /// The server sent.
    pub reverse: bool,
    /// Extra arguments passed to the tool.
    pub args: Vec<String>,
    /// The tool ran and its output was read.
    pub ok: bool,
    /// Why not, when `ok` is false.
    #[serde(deserialize_with = "super::required")]
    pub error: Option<String>,
    /// Measured rate, bit/s (`null` when the run failed).
    #[serde(deserialize_with = "super::required")]
    pub rate_bps: Option<f64>,
    /// Seconds measured.
    #[serde(deserialize_with = "super::required")]
    pub duration_s: Option<f64>,
    /// Bytes moved, where the tool says (iperf3, transfers).
    #[serde(deserialize_with = "super::required")]
    pub bytes: Option<u64>,
    /// CPU use, where the tool measures it as a share of the machine (bench, iperf3).
    #[serde(deserialize_with = "super::required")]
    pub cpu: Option<RunCpu>,
    /// Busy core-seconds of the whole machine (every namespace: both ends of the link, the
    /// kernel's network stack, and anything else running) while the run's group measured, from
    /// `/proc/stat` (user + nice + system + irq + softirq + steal). The members of a group that
    /// runs several at once all carry the group's figure. Absent (`null`) in documents written
    /// before it was recorded, and where `/proc/stat` could not be read.
    #[serde(default)]
    pub machine_cpu_s: Option<f64>,
    /// Jain's index between the instance's own flows ([`crate::stats::jain`]).
    #[serde(deserialize_with = "super::required")]
    pub fairness: Option<f64>,
    /// Flows (connections) the tool reported.
    #[serde(deserialize_with = "super::required")]
    pub flows: Option<u64>,
    /// Per-second rates.
    pub intervals: Vec<Interval>,
    /// The QoS class guaranteed to the client host, and how often the run met it.
    #[serde(deserialize_with = "super::required")]
    pub guarantee: Option<Guarantee>,
    /// The tool's own document, for `linerate bench` and `linerate cp`.
    #[serde(deserialize_with = "super::required")]
    pub raw: Option<RawDoc>,
    /// The TCP congestion control the sender of the test's data used (the agent's when the
    /// client received), as that side read it back from its sockets (bench) or as iperf3
    /// reported it; `null` where the tool did not say, and in documents before it was recorded.
    #[serde(default)]
    pub congestion: Option<String>,
    /// When the client's test began (its request to the agent, once connected and
    /// authenticated), microseconds since the Unix epoch: what a group's start skew is measured
    /// from. `bench` runs only; `null` elsewhere and in earlier documents.
    #[serde(default)]
    pub started_unix_us: Option<u64>,
}

/// A step of a scaling sweep: the first `instances` instances of run `base`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct SweepStep {
    /// The swept run's name; its steps are groups `BASE/N`.
    pub base: String,
    /// Instances measured together in this step.
    pub instances: u32,
}

/// CPU of one measurement, each side as a share of its machine.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct RunCpu {
    /// The client host (`null` when the tool did not say).
    #[serde(deserialize_with = "super::required")]
    pub local: Option<CpuBusy>,
    /// The server host.
    #[serde(deserialize_with = "super::required")]
    pub remote: Option<CpuBusy>,
}

/// Busy CPU time as fractions of a machine (1.0 = every core busy).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Default)]
pub struct CpuBusy {
    /// User time.
    pub user: f64,
    /// System time.
    pub system: f64,
    /// Software-interrupt time (0 where the tool does not separate it: iperf3).
    pub softirq: f64,
    /// Hardware-interrupt time (0 where the tool does not separate it: iperf3).
    pub irq: f64,
}

impl CpuBusy {
    /// The busy share: user + system + softirq + irq.
    pub fn busy(&self) -> f64 {
        self.user + self.system + self.softirq + self.irq
    }
}

/// Per-second rate.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    /// Start, seconds since the run began.
    pub start_s: f64,
    /// End.
    pub end_s: f64,
    /// Rate, bit/s.
    pub bps: f64,
}

/// A QoS guarantee of a run's client host.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Guarantee {
    /// The htb class.
    pub class: String,
    /// The link it shapes.
    pub link: String,
    /// Guaranteed rate, bit/s.
    pub rate_bps: u64,
    /// Ceiling, bit/s.
    pub ceil_bps: u64,
    /// Share of the intervals (after the first) with at least 90% of the guarantee.
    #[serde(deserialize_with = "super::required")]
    pub intervals_met_pct: Option<f64>,
}

/// A tool's own JSON, kept whole.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(untagged)]
pub enum RawDoc {
    /// `linerate bench --json`.
    Bench(Box<BenchDocument>),
    /// `linerate cp --json`.
    Cp(Box<CpSummary>),
}

impl RawDoc {
    /// The bench document, if it is one.
    pub fn bench(&self) -> Option<&BenchDocument> {
        match self {
            RawDoc::Bench(b) => Some(b),
            RawDoc::Cp(_) => None,
        }
    }
}

/// One repeat of one group.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct GroupRecord {
    /// The group's name.
    pub group: String,
    /// Repeat index.
    pub repeat: u32,
    /// Its runs' names.
    pub members: Vec<String>,
    /// Sum of the rates of the members that measured, bit/s: over all of them only when `ok`,
    /// else over `members.len() - failed.len()` of them.
    pub rate_bps: f64,
    /// Jain's index between the rates of the members that measured (like `rate_bps`, over
    /// only some of them when `ok` is false: not the group's fairness then).
    #[serde(deserialize_with = "super::required")]
    pub fairness: Option<f64>,
    /// Every member ran: the group is complete. A group with a failed member is incomplete,
    /// and its figures are not the experiment's.
    pub ok: bool,
    /// The members that failed (their runs' `error` says why); empty when `ok`. Absent in
    /// documents written before it was recorded.
    #[serde(default)]
    pub failed: Vec<String>,
    /// The spread of the members' test starts (`runs[].started_unix_us`), milliseconds: last
    /// start minus first. `null` where fewer than two members recorded a start (only `bench`
    /// does), and in earlier documents.
    #[serde(default)]
    pub start_skew_ms: Option<f64>,
    /// The spread the runner aims the starts within ([`START_TOLERANCE_MS`]) when it
    /// synchronised them (`bench` groups of two or more); `null` when it did not.
    #[serde(default)]
    pub start_tolerance_ms: Option<f64>,
}

/// How close together the lab starts the members of a group, milliseconds: each client
/// connects and authenticates first, then all begin their tests at one instant (`linerate
/// bench --start-at`); a group whose measured skew exceeds this says so.
pub const START_TOLERANCE_MS: f64 = 50.0;

impl GroupRecord {
    /// Members that measured, of all members: `(n, N)`.
    pub fn measured(&self) -> (usize, usize) {
        (self.members.len().saturating_sub(self.failed.len()), self.members.len())
    }
}

/// The lab as built.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct LabDescription {
    /// Hosts by name.
    pub hosts: BTreeMap<String, LabHost>,
    /// Switches (bridges).
    pub switches: Vec<LabSwitch>,
    /// Links (veth pairs).
    pub links: Vec<LabLink>,
    /// htb QoS on link ends.
    pub qos: Vec<LabQos>,
}

/// A host of a lab.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct LabHost {
    /// Its network namespace.
    pub ns: String,
    /// Its addressed interfaces.
    pub interfaces: Vec<LabInterface>,
}

/// An addressed interface.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct LabInterface {
    /// Device name.
    pub name: String,
    /// Address and prefix, `198.18.0.1/24`.
    pub addr: String,
    /// The link it ends.
    pub link: String,
}

/// A switch: a bridge in the lab's switch namespace.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct LabSwitch {
    /// Its name in the scenario.
    pub name: String,
    /// The bridge device.
    pub bridge: String,
    /// The namespace holding it.
    pub ns: String,
    /// The segment's subnet.
    pub subnet: String,
}

/// A link as built.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct LabLink {
    /// Its name.
    pub name: String,
    /// The `a` end (host or switch).
    pub a: String,
    /// The `b` end.
    pub b: String,
    /// The `a` end's device.
    pub a_if: String,
    /// The `b` end's device.
    pub b_if: String,
    /// Each end's address (`null` for a switch port).
    pub addrs: Vec<Option<String>>,
    /// Shaped rate, bit/s.
    #[serde(deserialize_with = "super::required")]
    pub rate_bps: Option<u64>,
    /// The shaping qdisc.
    pub shaper: Shaper,
    /// The tbf's burst, bytes, as applied (`null` for htb and unshaped links). Absent (`null`)
    /// in documents written before it was recorded.
    #[serde(default)]
    pub burst_bytes: Option<u64>,
    /// The tbf's latency, µs, as applied (`null` for htb and unshaped links). Absent (`null`)
    /// in documents written before it was recorded.
    #[serde(default)]
    pub latency_us: Option<u64>,
    /// MTU.
    pub mtu: u32,
    /// netem delay, µs.
    #[serde(deserialize_with = "super::required")]
    pub delay_us: Option<u64>,
    /// netem jitter, µs.
    #[serde(deserialize_with = "super::required")]
    pub jitter_us: Option<u64>,
    /// netem loss, percent.
    #[serde(deserialize_with = "super::required")]
    pub loss_pct: Option<f64>,
    /// netem reordering, percent.
    #[serde(deserialize_with = "super::required")]
    pub reorder_pct: Option<f64>,
    /// The segment's subnet.
    pub subnet: String,
}

/// The queueing discipline that enforces a link's rate.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Shaper {
    /// Token bucket filter.
    #[default]
    Tbf,
    /// Hierarchical token bucket with one class.
    Htb,
}

/// Which end of a link.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// The `a` end.
    #[default]
    A,
    /// The `b` end.
    B,
}

/// htb classes on one end of a link.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct LabQos {
    /// The link.
    pub link: String,
    /// Which end.
    pub side: Side,
    /// Shapes what arrives (through an ifb) rather than what leaves.
    pub ingress: bool,
    /// Total rate, bit/s.
    pub rate_bps: u64,
    /// The classes.
    pub classes: Vec<LabClass>,
}

/// One htb class.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct LabClass {
    /// Its name.
    pub name: String,
    /// Guaranteed rate, bit/s.
    pub rate_bps: u64,
    /// Ceiling, bit/s.
    pub ceil_bps: u64,
    /// Source host matched.
    #[serde(deserialize_with = "super::required")]
    pub src: Option<String>,
    /// Destination host matched.
    #[serde(deserialize_with = "super::required")]
    pub dst: Option<String>,
    /// Source port matched.
    #[serde(deserialize_with = "super::required")]
    pub sport: Option<u16>,
    /// Destination port matched.
    #[serde(deserialize_with = "super::required")]
    pub dport: Option<u16>,
    /// Unmatched traffic goes here.
    pub default: bool,
    /// The lab hosts among `src` and `dst`.
    pub hosts: Vec<String>,
}
