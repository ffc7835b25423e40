//! The scenario file (TOML): hosts, switches, links, QoS classes and runs. Parsing is strict
//! (unknown keys are errors) and validation happens here, before anything touches the kernel,
//! so a bad file never leaves half a lab behind. Rates, times, percentages, queues and addresses
//! deserialize into typed values ([`ShaperRate`], [`LinkTime`], `Percent`, `QueueLimit`,
//! [`LabNet`]) in the one grammar of `linerate_model::units`, so an error names the file, line
//! and field, and the plan never parses a string again; [`Scenario::validate`] checks only what
//! ties fields and sections together.

use crate::LabError;
/// The tool, cp mode, shaper and link-end names a scenario uses are the results document's own.
pub use linerate_model::doc::lab::{CpMode, Shaper, Side, Tool};
use linerate_model::units::{self, Percent, QueueLimit, Rate, Subnet};
use serde::Deserialize;
use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

/// A whole scenario, as read from its file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Short name, used in result file names.
    pub name: String,
    /// What the scenario mirrors.
    #[serde(default)]
    pub description: String,
    /// Hosts: one network namespace each.
    #[serde(default, rename = "host")]
    pub hosts: Vec<HostSpec>,
    /// Switches: Linux bridges in the run's switch namespace.
    #[serde(default, rename = "switch")]
    pub switches: Vec<SwitchSpec>,
    /// Links: veth pairs between two hosts, or a host and a switch.
    #[serde(default, rename = "link")]
    pub links: Vec<LinkSpec>,
    /// QoS: htb classes on one end of a link (egress, or ingress through an ifb).
    #[serde(default, rename = "qos")]
    pub qos: Vec<QosSpec>,
    /// Measurements `linerate lab run` performs.
    #[serde(default, rename = "run")]
    pub runs: Vec<RunSpec>,
    /// Where the runner's working directory (generated trees, the daemon's root, copies) is
    /// made: an absolute path, e.g. `/var/tmp` for a disk. Default: `/dev/shm` (tmpfs, so the
    /// copies' figures compare with iperf3's memory-to-memory ones).
    pub workdir: Option<std::path::PathBuf>,
    /// Before each group of copies, write and delete a scratch file as large as the group's
    /// copies in the working directory, so every tool finds the destination's memory as warm as
    /// the last run left it (default `true`). On a virtual machine that reports free pages to
    /// its host, memory left free for a few seconds costs a host fault per page on its next
    /// write; `false` measures that cost too.
    pub prefault: Option<bool>,
}

/// One host (`name` may be a range such as `g[1..16]`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    /// Host name: lowercase letters, digits and `-`, at most 24 bytes.
    pub name: String,
}

/// One switch.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwitchSpec {
    /// Switch name (same rules as hosts; must not clash with a host).
    pub name: String,
    /// The subnet of its segment, inside 198.18.0.0/15 (default: the next free /24).
    pub subnet: Option<LabNet>,
}

/// One link: a veth pair. Either end may be a range (`g[1..16]`), which makes one link each.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    /// Name used by `[[qos]]` and `via` (default `A-B`).
    pub name: Option<String>,
    /// First end: a host or a switch.
    pub a: String,
    /// Second end: a host or a switch.
    pub b: String,
    /// Line rate, e.g. `10gbit`, `500mbit`, `10G` (default: unshaped).
    pub rate: Option<ShaperRate>,
    /// Which qdisc enforces `rate`.
    #[serde(default)]
    pub shaper: Shaper,
    /// The tbf's burst: bytes or a size (`"4MiB"`); default 2 ms of the rate, at least 64 KiB.
    #[serde(default, deserialize_with = "units::serde_size::option")]
    pub burst: Option<u64>,
    /// The tbf's latency (longest a packet may wait), e.g. `10ms`; default 20 ms.
    pub latency: Option<LinkTime>,
    /// MTU of both ends (default 1500).
    pub mtu: Option<u32>,
    /// One-way delay added by netem at each end, e.g. `5ms`.
    pub delay: Option<LinkTime>,
    /// Delay jitter (needs `delay`).
    pub jitter: Option<LinkTime>,
    /// Packet loss in percent at each end: `1.0`, `1` or `"1%"`.
    pub loss: Option<Percent>,
    /// Reordering in percent (needs `delay`).
    pub reorder: Option<Percent>,
    /// How jitter is drawn: `normal` (default, σ = jitter) or `uniform` (±jitter).
    /// linerate's emulator only.
    pub jitter_dist: Option<crate::emu::shape::Dist>,
    /// Duplicated packets in percent.
    pub duplicate: Option<Percent>,
    /// Packets with one bit flipped, in percent (the receiver's checksums drop them).
    pub corrupt: Option<Percent>,
    /// Mean length of a loss burst in packets (Gilbert–Elliott; default 1: independent losses).
    /// linerate's emulator only.
    pub loss_burst: Option<f64>,
    /// The emulator's own rate queue: the link's `rate` is then enforced by the emulator with a
    /// queue of this many bytes (`"64KiB"`) or this much time at the rate (`"2ms"`), tail
    /// dropping past it, like a shallow-buffered switch port. linerate's emulator only.
    pub queue: Option<QueueLimit>,
    /// Who emulates delay, loss and the rest: `auto` (netem where the kernel has it, else
    /// linerate's own), `netem`, or `linerate`.
    #[serde(default)]
    pub emulator: EmulatorChoice,
    /// Subnet of a host-to-host link (default: the next free /24).
    pub subnet: Option<LabNet>,
    /// Address of end a, `ADDR/PREFIX` or `ADDR`.
    pub a_addr: Option<LabNet>,
    /// Address of end b.
    pub b_addr: Option<LabNet>,
    /// Interface name at end a (hosts only; default `ethN`).
    pub a_if: Option<String>,
    /// Interface name at end b.
    pub b_if: Option<String>,
}

/// Who emulates a link's delay, loss and the rest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EmulatorChoice {
    /// netem where the kernel has it, else linerate's own.
    #[default]
    Auto,
    /// The kernel's netem qdisc.
    Netem,
    /// linerate's emulator (`linerate lab emulate`: TAP devices and a forwarding process).
    Linerate,
}

impl LinkSpec {
    /// Whether the link asks for more than rate shaping (delay, loss, ...).
    pub fn impaired(&self) -> bool {
        self.delay.is_some()
            || self.loss.is_some_and(Percent::is_positive)
            || self.duplicate.is_some_and(Percent::is_positive)
            || self.corrupt.is_some_and(Percent::is_positive)
            || self.queue.is_some()
    }

    /// Whether only linerate's emulator can do what the link asks.
    pub fn needs_own_emulator(&self) -> bool {
        self.queue.is_some()
            || self.loss_burst.is_some_and(|b| b > 1.0)
            || self.jitter_dist == Some(crate::emu::shape::Dist::Uniform)
    }
}

/// htb classes on one end of a link.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QosSpec {
    /// The link's name.
    pub link: String,
    /// Which end's interface carries the classes.
    #[serde(default)]
    pub side: Side,
    /// Shape what arrives at that end (through an ifb device) instead of what leaves it.
    #[serde(default)]
    pub ingress: bool,
    /// Total rate shared by the classes (default: the link's rate).
    pub rate: Option<ShaperRate>,
    /// The classes.
    #[serde(rename = "class")]
    pub classes: Vec<QosClass>,
}

/// One htb class: a guaranteed rate and a ceiling, and the packets that belong to it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QosClass {
    /// Class name (shown in results).
    pub name: String,
    /// Guaranteed rate.
    pub rate: ShaperRate,
    /// Ceiling (default: the total rate).
    pub ceil: Option<ShaperRate>,
    /// Source: a host name (all its addresses) or a CIDR.
    pub src: Option<QosMatch>,
    /// Destination: a host name or a CIDR.
    pub dst: Option<QosMatch>,
    /// Source TCP/UDP port.
    pub sport: Option<u16>,
    /// Destination TCP/UDP port.
    pub dport: Option<u16>,
    /// Unclassified packets go here (otherwise to an implicit class with the rate left over).
    #[serde(default)]
    pub default: bool,
}

/// One run (or, with `hosts`, one per host at once; with `sweep`, one group per count).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSpec {
    /// Name in the results (default: tool and host).
    pub name: Option<String>,
    /// The tool.
    pub tool: Tool,
    /// For `cp`: how it reaches the server host (default `push`).
    pub mode: Option<CpMode>,
    /// Client host.
    pub host: Option<String>,
    /// Several client hosts at once (ranges allowed), one flow set each.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Run with the first N instances (hosts × vias), for each N in turn (scaling sweeps).
    #[serde(default)]
    pub sweep: Vec<usize>,
    /// Server host.
    pub server: String,
    /// Reach the server through this link (default: the first segment they share).
    pub via: Option<String>,
    /// One instance per link at once (several NICs driven together); exclusive with `via`.
    #[serde(default)]
    pub vias: Vec<String>,
    /// Parallel streams/connections (iperf3 -P, bench -P, cp -P, parallel scp/rsync/tar copies).
    pub streams: Option<u32>,
    /// Duration in seconds (iperf3, bench).
    pub seconds: Option<u32>,
    /// Server sends (iperf3 -R, bench --reverse).
    #[serde(default)]
    pub reverse: bool,
    /// For the tools that go through ssh (cp's ssh modes, scp, rsync, tar): open one ssh
    /// master connection (`ControlMaster`) from the client host before the clock starts, and let
    /// the run's ssh sessions go through it, as a user with `ControlMaster auto` would.
    #[serde(default)]
    pub ssh_master: bool,
    /// Extra arguments for iperf3 or `linerate bench`, passed through.
    #[serde(default)]
    pub args: Vec<String>,
    /// Server port (iperf3; default one per run from 5201).
    pub port: Option<u16>,
    /// Repetitions (default 1).
    pub repeat: Option<u32>,
    /// Runs with the same group run at once.
    pub group: Option<String>,
    /// Files in the generated tree (cp, scp, rsync, tar, rclone; default 64).
    pub files: Option<u64>,
    /// Mean file size of log-normal sizes: bytes, or a size string such as `"1.6MB"` (default
    /// 1.6 MB, the case study's average).
    #[serde(default, deserialize_with = "units::serde_size::option")]
    pub file_size: Option<u64>,
    /// Uniform sizes instead, from this size (with `max_size`; exclusive with `file_size`).
    #[serde(default, deserialize_with = "units::serde_size::option")]
    pub min_size: Option<u64>,
    /// Uniform sizes up to this size.
    #[serde(default, deserialize_with = "units::serde_size::option")]
    pub max_size: Option<u64>,
    /// Kill the run after this many seconds (default: duration + 60, or 600 for transfers).
    pub timeout: Option<u64>,
}

/// Largest host count a range may produce, and other caps on what a file can ask for.
pub const MAX_HOSTS: usize = 256;
/// Most links in a scenario.
pub const MAX_LINKS: usize = 1024;
/// Most run instances a scenario expands to.
pub const MAX_RUNS: usize = 4096;

/// An IPv4 network, as host-order address and prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Net {
    /// Address (host order).
    pub addr: u32,
    /// Prefix length.
    pub prefix: u8,
}

impl Net {
    /// The network's mask.
    pub fn mask(&self) -> u32 {
        if self.prefix == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(self.prefix))
        }
    }
    /// The network address.
    pub fn network(&self) -> u32 {
        self.addr & self.mask()
    }
    /// Whether `ip` lies in this network.
    pub fn contains(&self, ip: u32) -> bool {
        ip & self.mask() == self.network()
    }
}

/// The benchmarking range every lab address must come from.
pub const LAB_RANGE: Net = Net { addr: 0xC612_0000, prefix: 15 };

/// Dotted-quad text of an address.
pub fn fmt_ip(ip: u32) -> String {
    std::net::Ipv4Addr::from(ip).to_string()
}

/// An address or network of the lab, `ADDR/PREFIX` or `ADDR` (the reader's default prefix
/// then applies), inside 198.18.0.0/15: checked when the scenario is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LabNet(Subnet);

impl LabNet {
    /// The network, `default_prefix` applying where the text gave none.
    pub fn net(self, default_prefix: u8) -> Net {
        let n = self.0.or_prefix(default_prefix);
        Net { addr: u32::from(n.addr()), prefix: n.prefix_len() }
    }
}

impl FromStr for LabNet {
    type Err = LabError;
    fn from_str(s: &str) -> Result<LabNet, LabError> {
        let bad = |why: &str| LabError::Scenario(format!("address '{}': {why}", s.escape_default()));
        let sub: Subnet = s.parse().map_err(|e: units::UnitError| bad(&e.to_string()))?;
        LabNet::try_from(sub).map_err(|e| bad(&e.to_string()))
    }
}

/// A value of the right grammar outside what the lab can use.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OutOfRange {
    /// An address or network outside 198.18.0.0/15.
    #[error("{0} is outside 198.18.0.0/15, the only range the lab uses")]
    Address(Subnet),
    /// A shaped rate below 1 kbit/s or above 1000 Gbit/s.
    #[error("rate {}: must be between 1kbit and 1000gbit", units::format_rate(.0.bits_per_s() as f64))]
    Rate(Rate),
    /// A link time above 60 s.
    #[error("time {0:?}: must be between 0 and 60s")]
    Time(std::time::Duration),
}

impl TryFrom<Subnet> for LabNet {
    type Error = OutOfRange;
    fn try_from(sub: Subnet) -> Result<LabNet, OutOfRange> {
        if !LAB_RANGE.contains(u32::from(sub.addr())) || sub.prefix().is_some_and(|p| p < LAB_RANGE.prefix) {
            return Err(OutOfRange::Address(sub));
        }
        Ok(LabNet(sub))
    }
}

impl<'de> Deserialize<'de> for LabNet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<LabNet, D::Error> {
        LabNet::try_from(Subnet::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for LabNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A shaped rate (a link's, a QoS total, class or ceiling) in linerate's one rate grammar
/// (`10gbit`, `2.5gbit`, `500mbit`, `10G`, `1.25GB/s`) that tc can shape: 1 kbit/s to
/// 1000 Gbit/s. Its text is tc's: `10000000000bit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ShaperRate(Rate);

impl ShaperRate {
    /// Bits per second.
    pub fn bits_per_s(self) -> u64 {
        self.0.bits_per_s()
    }
}

impl TryFrom<Rate> for ShaperRate {
    type Error = OutOfRange;
    fn try_from(r: Rate) -> Result<ShaperRate, OutOfRange> {
        if !(1_000..=1_000_000_000_000).contains(&r.bits_per_s()) {
            return Err(OutOfRange::Rate(r));
        }
        Ok(ShaperRate(r))
    }
}

impl FromStr for ShaperRate {
    type Err = LabError;
    fn from_str(s: &str) -> Result<ShaperRate, LabError> {
        let r: Rate = s.parse().map_err(|e: units::UnitError| LabError::Scenario(e.to_string()))?;
        ShaperRate::try_from(r).map_err(|e| LabError::Scenario(e.to_string()))
    }
}

impl<'de> Deserialize<'de> for ShaperRate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ShaperRate, D::Error> {
        ShaperRate::try_from(Rate::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for ShaperRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A link's delay, jitter or tbf latency: the one duration grammar ([`units::Duration`]) with
/// the unit required (`5ms`, `250us`, `0.5ms`, `1s`; a bare `5` is refused rather than taken for
/// seconds), at most 60 s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct LinkTime(units::Duration);

/// The longest link time.
const MAX_LINK_TIME: std::time::Duration = std::time::Duration::from_secs(60);

impl LinkTime {
    /// Whole microseconds.
    pub fn as_micros(self) -> u64 {
        self.0.as_micros()
    }
    /// The time as a [`units::Duration`].
    pub fn get(self) -> units::Duration {
        self.0
    }
}

impl TryFrom<units::Duration> for LinkTime {
    type Error = OutOfRange;
    fn try_from(d: units::Duration) -> Result<LinkTime, OutOfRange> {
        if d.get() > MAX_LINK_TIME {
            return Err(OutOfRange::Time(d.get()));
        }
        Ok(LinkTime(d))
    }
}

impl LinkTime {
    /// Parses `s`; the error, the whole result, says why.
    fn parse(s: &str) -> Result<LinkTime, String> {
        let bad = |why: String| format!("time '{}': {why}", s.escape_default());
        let d = units::Duration::with_unit(s).map_err(|e| bad(e.to_string()))?;
        LinkTime::try_from(d).map_err(|_| bad("must be between 0 and 60s".into()))
    }
}

impl FromStr for LinkTime {
    type Err = LabError;
    fn from_str(s: &str) -> Result<LinkTime, LabError> {
        LinkTime::parse(s).map_err(LabError::Scenario)
    }
}

impl<'de> Deserialize<'de> for LinkTime {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<LinkTime, D::Error> {
        LinkTime::parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// What a QoS class matches on one side: a host (all its addresses) or a network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QosMatch {
    /// A host of the scenario, by name.
    Host(String),
    /// A network, `ADDR/PREFIX` (a lone address is a /32).
    Net(Subnet),
}

impl<'de> Deserialize<'de> for QosMatch {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<QosMatch, D::Error> {
        let text = String::deserialize(d)?;
        Ok(match text.parse::<Subnet>() {
            Ok(n) => QosMatch::Net(n),
            Err(_) => QosMatch::Host(text),
        })
    }
}

impl fmt::Display for QosMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QosMatch::Host(h) => f.write_str(h),
            QosMatch::Net(n) => n.fmt(f),
        }
    }
}

/// A loss burst's mean length in packets (`loss_burst`), in a scenario and in `lab set` alike.
pub const LOSS_BURST: std::ops::RangeInclusive<f64> = 1.0..=1000.0;

/// Expands `prefix[A..B]` into `prefixA` .. `prefixB`; any other name stands for itself.
pub fn expand(name: &str) -> Result<Vec<String>, LabError> {
    let Some(open) = name.find('[') else { return Ok(vec![name.to_string()]) };
    let bad = || LabError::Scenario(format!("'{name}': a range is written prefix[A..B], e.g. g[1..16]"));
    let inner = name[open + 1..].strip_suffix(']').ok_or_else(bad)?;
    let (a, b) = inner.split_once("..").ok_or_else(bad)?;
    let (a, b): (usize, usize) = (a.trim().parse().map_err(|_| bad())?, b.trim().parse().map_err(|_| bad())?);
    if a > b || b - a >= MAX_HOSTS {
        return Err(LabError::Scenario(format!("'{name}': range must be ascending and at most {MAX_HOSTS} long")));
    }
    Ok((a..=b).map(|i| format!("{}{i}", &name[..open])).collect())
}

/// Host and switch names: short, lowercase, safe in namespace and file names.
pub fn check_name(kind: &str, n: &str) -> Result<(), LabError> {
    let ok = !n.is_empty()
        && n.len() <= 24
        && n.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && !n.starts_with('-');
    if ok {
        Ok(())
    } else {
        Err(LabError::Scenario(format!(
            "{kind} name '{}': use 1-24 lowercase letters, digits or '-'",
            n.escape_default()
        )))
    }
}

/// Interface names: at most 15 bytes (IFNAMSIZ - 1), no '/' or whitespace.
pub fn check_ifname(n: &str) -> Result<(), LabError> {
    let ok = !n.is_empty()
        && n.len() <= 15
        && n.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || c == b'.');
    if ok {
        Ok(())
    } else {
        Err(LabError::Scenario(format!("interface name '{}': 1-15 bytes of [A-Za-z0-9._-]", n.escape_default())))
    }
}

/// The fields only some tools take: `mode` (cp), the tree's sizes (the copying tools).
fn check_copy_fields(i: usize, r: &RunSpec) -> Result<(), LabError> {
    let tool = r.tool.name();
    if r.mode.is_some() && r.tool != Tool::Cp {
        return Err(LabError::Scenario(format!(
            "run {}: `mode` is for tool = \"cp\" (push, pull, ssh-push, ssh-pull), not {tool}",
            i + 1
        )));
    }
    let via_ssh = match r.tool {
        Tool::Cp => r.mode.is_some_and(|m| m.over_ssh()),
        Tool::Scp | Tool::Rsync | Tool::Tar => true,
        _ => false,
    };
    if r.ssh_master && !via_ssh {
        return Err(LabError::Scenario(format!(
            "run {}: `ssh_master` is for runs through ssh (cp with mode ssh-push or ssh-pull, scp, rsync, tar), not {tool}",
            i + 1
        )));
    }
    let sized = r.files.is_some() || r.file_size.is_some() || r.min_size.is_some() || r.max_size.is_some();
    if sized && !r.tool.copies() {
        return Err(LabError::Scenario(format!(
            "run {}: files and sizes are for the copying tools, not {tool}",
            i + 1
        )));
    }
    match (r.file_size, r.min_size, r.max_size) {
        (_, None, None) => Ok(()),
        (None, Some(min), Some(max)) if min <= max && max > 0 => Ok(()),
        (None, Some(_), Some(_)) => {
            Err(LabError::Scenario(format!("run {}: min_size must not exceed max_size, and max_size be > 0", i + 1)))
        }
        (Some(_), _, _) => Err(LabError::Scenario(format!(
            "run {}: file_size (log-normal mean) or min_size and max_size (uniform), not both",
            i + 1
        ))),
        _ => Err(LabError::Scenario(format!("run {}: give min_size and max_size together", i + 1))),
    }
}

/// The fields of one link that only make sense together: tbf's burst and latency with a
/// rate, jitter and reorder with a delay, a loss burst with a loss, a queue with a rate, what
/// only linerate's emulator does not asked of netem.
fn check_link_fields(name: &str, l: &LinkSpec) -> Result<(), LabError> {
    let bad = |why: String| Err(LabError::Scenario(format!("link '{name}': {why}")));
    if l.burst.is_some() || l.latency.is_some() {
        if l.rate.is_none() || l.shaper != Shaper::Tbf {
            return bad("burst and latency are the tbf shaper's: give a rate, and no shaper = \"htb\"".into());
        }
        if l.burst.is_some_and(|b| !(1500..=1 << 30).contains(&b)) {
            return bad("burst must be 1500 bytes to 1 GiB".into());
        }
        if l.latency.is_some_and(|t| t.as_micros() == 0) {
            return bad("latency must be above 0".into());
        }
    }
    if l.mtu.is_some_and(|m| !(576..=65535).contains(&m)) {
        return bad(format!("mtu {} outside 576..65535", l.mtu.unwrap_or_default()));
    }
    if (l.jitter.is_some() || l.reorder.is_some()) && l.delay.is_none() {
        return bad("jitter and reorder need a delay".into());
    }
    if l.loss_burst.is_some_and(|b| !LOSS_BURST.contains(&b) || l.loss.is_none()) {
        return bad("loss_burst is a mean burst length of 1 to 1000 packets, with a loss".into());
    }
    match l.queue {
        Some(_) if l.rate.is_none() => return bad("a queue needs the link's rate".into()),
        Some(QueueLimit::Time(t)) if t.get() > MAX_LINK_TIME => {
            return bad("a queue's time must be at most 60s".into());
        }
        _ => {}
    }
    if l.emulator == EmulatorChoice::Netem && l.needs_own_emulator() {
        return bad("queue, loss_burst and a uniform jitter_dist need emulator = \"linerate\" (or \"auto\")".into());
    }
    Ok(())
}

impl Scenario {
    /// Parses and validates a scenario.
    pub fn parse(text: &str) -> Result<Self, LabError> {
        if text.len() > 1 << 20 {
            return Err(LabError::Scenario("scenario file larger than 1 MiB".into()));
        }
        let s: Scenario = toml::from_str(text).map_err(|e| LabError::Scenario(e.to_string()))?;
        s.validate()?;
        Ok(s)
    }

    /// The scenario with every duration shortened by `factor` (0 < factor ≤ 1), for a smoke
    /// run that checks the scenario runs end to end (`lab run --scale-time`), not its figures:
    /// timed runs' `seconds` (at least 1), the trees copied (`files`, at least 8 or as many as
    /// before; a single file's `file_size`, at least 64 KiB) and `repeat` (at least 1). Sweeps,
    /// hosts, streams and links are kept: every step still runs all its members at once.
    pub fn scaled(&self, factor: f64) -> Result<Scenario, LabError> {
        if !(factor > 0.0 && factor <= 1.0) {
            return Err(LabError::Scenario(format!("time scale {factor}: must be above 0 and at most 1")));
        }
        let mut sc = self.clone();
        let by = |v: u64| (v as f64 * factor).ceil() as u64;
        for r in &mut sc.runs {
            r.seconds = r.seconds.map(|s| (by(u64::from(s)) as u32).max(1));
            r.repeat = r.repeat.map(|n| (by(u64::from(n)) as u32).max(1));
            match r.files {
                Some(1) => r.file_size = r.file_size.map(|b| by(b).max(64 << 10)),
                Some(n) => r.files = Some(by(n).max(n.min(8))),
                None => {}
            }
        }
        sc.validate()?;
        Ok(sc)
    }

    /// Reads, parses and validates a scenario file.
    pub fn load(path: &std::path::Path) -> Result<Self, LabError> {
        let text = std::fs::read_to_string(path).map_err(|e| LabError::Io(format!("reading {}", path.display()), e))?;
        Self::parse(&text).map_err(|e| match e {
            LabError::Scenario(m) => LabError::Scenario(format!("{}: {m}", path.display())),
            e => e,
        })
    }

    /// Every host name, ranges expanded, in declaration order.
    pub fn host_names(&self) -> Result<Vec<String>, LabError> {
        let mut v = Vec::new();
        for h in &self.hosts {
            v.extend(expand(&h.name)?);
        }
        Ok(v)
    }

    /// Links with ranges expanded: (name, a, b, spec).
    pub fn expanded_links(&self) -> Result<Vec<(String, String, String, &LinkSpec)>, LabError> {
        let mut out = Vec::new();
        for l in &self.links {
            let (a, b) = (expand(&l.a)?, expand(&l.b)?);
            let pairs: Vec<(String, String)> = match (a.len(), b.len()) {
                (1, _) => b.iter().map(|y| (a[0].clone(), y.clone())).collect(),
                (_, 1) => a.iter().map(|x| (x.clone(), b[0].clone())).collect(),
                (n, m) if n == m => a.into_iter().zip(b).collect(),
                _ => return Err(LabError::Scenario(format!("link {}-{}: ranges of different lengths", l.a, l.b))),
            };
            let many = pairs.len() > 1;
            for (x, y) in pairs {
                let name = match (&l.name, many) {
                    (Some(n), false) => n.clone(),
                    (Some(n), true) => format!("{n}-{x}-{y}"),
                    (None, _) => format!("{x}-{y}"),
                };
                out.push((name, x, y, l));
            }
        }
        if out.len() > MAX_LINKS {
            return Err(LabError::Scenario(format!("more than {MAX_LINKS} links")));
        }
        Ok(out)
    }

    /// Checks what the types alone cannot: names, references between sections, combinations of
    /// fields and counts. Rates, times, percentages and addresses were checked when read.
    pub fn validate(&self) -> Result<(), LabError> {
        self.check_header()?;
        let hosts = self.check_hosts()?;
        let switches = self.check_switches(&hosts)?;
        let links = self.check_links(&hosts, &switches)?;
        self.check_qos(&hosts, &links)?;
        self.check_runs(&hosts, &links)
    }

    /// The scenario's name and working directory.
    fn check_header(&self) -> Result<(), LabError> {
        let n = &self.name;
        if n.is_empty() || n.len() > 64 || !n.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_') {
            return Err(LabError::Scenario(format!(
                "scenario name '{}': use 1-64 letters, digits, '-' or '_'",
                n.escape_default()
            )));
        }
        if let Some(w) = &self.workdir {
            // its paths reach ssh's remote shell and rsync's -e words unquoted
            let plain =
                w.to_str().is_some_and(|t| t.bytes().all(|c| c.is_ascii_alphanumeric() || b"/._-".contains(&c)));
            if !w.is_absolute() || !plain {
                return Err(LabError::Scenario(format!(
                    "workdir '{}': give an absolute path of letters, digits, '/', '.', '_' and '-'",
                    w.display()
                )));
            }
        }
        Ok(())
    }

    /// The hosts, ranges expanded: at least one, at most [`MAX_HOSTS`], named well, once each.
    fn check_hosts(&self) -> Result<BTreeSet<String>, LabError> {
        let hosts = self.host_names()?;
        if hosts.is_empty() {
            return Err(LabError::Scenario("no [[host]]".into()));
        }
        if hosts.len() > MAX_HOSTS {
            return Err(LabError::Scenario(format!("more than {MAX_HOSTS} hosts")));
        }
        let mut seen = BTreeSet::new();
        for h in &hosts {
            check_name("host", h)?;
            if !seen.insert(h.clone()) {
                return Err(LabError::Scenario(format!("host '{h}' declared twice")));
            }
        }
        Ok(seen)
    }

    /// The switches: named well, clashing with no host or other switch.
    fn check_switches(&self, hosts: &BTreeSet<String>) -> Result<BTreeSet<String>, LabError> {
        let mut switches = BTreeSet::new();
        for s in &self.switches {
            check_name("switch", &s.name)?;
            if hosts.contains(&s.name) || !switches.insert(s.name.clone()) {
                return Err(LabError::Scenario(format!("switch '{}' clashes with another host or switch", s.name)));
            }
        }
        Ok(switches)
    }

    /// The links, ranges expanded: their ends exist, and their fields go together. Their names.
    fn check_links(&self, hosts: &BTreeSet<String>, switches: &BTreeSet<String>) -> Result<BTreeSet<String>, LabError> {
        let mut link_names = BTreeSet::new();
        for (name, a, b, l) in self.expanded_links()? {
            let bad = |why: &str| Err(LabError::Scenario(format!("link '{name}': {why}")));
            for end in [&a, &b] {
                if !hosts.contains(end) && !switches.contains(end) {
                    return bad(&format!("unknown host or switch '{end}'"));
                }
            }
            if switches.contains(&a) && switches.contains(&b) {
                return bad("a link between two switches is not supported");
            }
            if a == b {
                return bad(&format!("both ends are '{a}'"));
            }
            if !link_names.insert(name.clone()) {
                return Err(LabError::Scenario(format!("link '{name}' declared twice (give it a `name`)")));
            }
            check_link_fields(&name, l)?;
            for n in [&l.a_if, &l.b_if].into_iter().flatten() {
                check_ifname(n)?;
            }
        }
        Ok(link_names)
    }

    /// The QoS blocks: on a known link, with classes, one default at most, matches that name a
    /// host or a network of the lab.
    fn check_qos(&self, hosts: &BTreeSet<String>, links: &BTreeSet<String>) -> Result<(), LabError> {
        for q in &self.qos {
            if !links.contains(&q.link) {
                return Err(LabError::Scenario(format!("qos: unknown link '{}'", q.link)));
            }
            if q.classes.is_empty() {
                return Err(LabError::Scenario(format!("qos on '{}': no [[qos.class]]", q.link)));
            }
            if q.classes.iter().filter(|c| c.default).count() > 1 {
                return Err(LabError::Scenario(format!("qos on '{}': more than one default class", q.link)));
            }
            for c in &q.classes {
                for m in [&c.src, &c.dst].into_iter().flatten() {
                    let known = match m {
                        QosMatch::Host(h) => hosts.contains(h),
                        QosMatch::Net(n) => LabNet::try_from(*n).is_ok(),
                    };
                    if !known {
                        return Err(LabError::Scenario(format!(
                            "qos class '{}': '{m}' is neither a host nor a CIDR in 198.18.0.0/15",
                            c.name
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// The runs: known hosts and links, counts in range, fields their tool takes, names once
    /// each, at most [`MAX_RUNS`] instances in all.
    fn check_runs(&self, hosts: &BTreeSet<String>, links: &BTreeSet<String>) -> Result<(), LabError> {
        let mut count = 0usize;
        let mut names = BTreeSet::new();
        for (i, r) in self.runs.iter().enumerate() {
            let bad = |why: String| Err(LabError::Scenario(format!("run {}: {why}", i + 1)));
            let hosts_of_run = self.run_hosts(r)?;
            if hosts_of_run.is_empty() {
                return bad("give `host` or `hosts`".into());
            }
            if let Some(h) = hosts_of_run.iter().chain([&r.server]).find(|h| !hosts.contains(*h)) {
                return bad(format!("unknown host '{h}'"));
            }
            if r.via.is_some() && !r.vias.is_empty() {
                return bad("give `via` or `vias`, not both".into());
            }
            if let Some(v) = r.via.iter().chain(&r.vias).find(|v| !links.contains(*v)) {
                return bad(format!("unknown link '{v}' in via"));
            }
            let instances = hosts_of_run.len() * r.vias.len().max(1);
            if r.sweep.iter().any(|&n| n == 0 || n > instances) {
                return bad(format!("sweep counts must be 1..={instances}"));
            }
            if !(1..=10_000).contains(&r.streams.unwrap_or(1)) {
                return bad("streams must be 1..10000".into());
            }
            let rep = r.repeat.unwrap_or(1);
            if !(1..=100).contains(&rep) {
                return bad("repeat must be 1..100".into());
            }
            if r.seconds.is_some_and(|s| !(1..=3600).contains(&s)) {
                return bad("seconds must be 1..3600".into());
            }
            check_copy_fields(i, r)?;
            let per = if r.sweep.is_empty() { instances } else { r.sweep.iter().sum() };
            count = count.saturating_add(per.saturating_mul(rep as usize));
            if let Some(n) = r.name.as_ref().filter(|n| !names.insert(*n)) {
                return Err(LabError::Scenario(format!("run name '{n}' used twice")));
            }
        }
        if count > MAX_RUNS {
            return Err(LabError::Scenario(format!("the runs expand to more than {MAX_RUNS} instances")));
        }
        Ok(())
    }

    /// The client hosts of a run, ranges expanded.
    pub fn run_hosts(&self, r: &RunSpec) -> Result<Vec<String>, LabError> {
        let mut v: Vec<String> = r.host.iter().cloned().collect();
        for h in &r.hosts {
            v.extend(expand(h)?);
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = crate::testkit::TWO_HOSTS;

    #[test]
    fn parses_a_two_host_lab() {
        assert_eq!(crate::testkit::two_hosts("rate = \"1gbit\"\n"), TWO);
        let s = Scenario::parse(TWO).unwrap();
        assert_eq!(s.host_names().unwrap(), ["a", "b"]);
        assert_eq!(s.expanded_links().unwrap()[0].0, "a-b");
    }

    #[test]
    fn rejects_addresses_outside_the_benchmark_range() {
        for bad in ["10.0.0.1/24", "192.168.1.1", "198.20.0.1/24", "198.18.0.0/8", "8.8.8.8/32"] {
            let t = format!("{TWO}a_addr = \"{bad}\"\n");
            let e = Scenario::parse(&t).unwrap_err().to_string();
            assert!(e.contains("198.18.0.0/15") || e.contains("address"), "{bad}: {e}");
        }
        assert!(Scenario::parse(&format!("{TWO}a_addr = \"198.19.255.1/24\"\n")).is_ok());
        assert!(Scenario::parse(&format!("{TWO}subnet = \"172.16.0.0/24\"\n")).is_err());
    }

    #[test]
    fn rejects_duplicate_hosts_and_links() {
        let t = format!("{TWO}[[host]]\nname = \"a\"\n");
        assert!(Scenario::parse(&t).unwrap_err().to_string().contains("declared twice"));
        let t = format!("{TWO}[[link]]\na = \"a\"\nb = \"b\"\n");
        assert!(Scenario::parse(&t).unwrap_err().to_string().contains("declared twice"));
        let t = format!("{TWO}[[switch]]\nname = \"b\"\n");
        assert!(Scenario::parse(&t).unwrap_err().to_string().contains("clashes"));
    }

    #[test]
    fn rejects_unknown_hosts_links_and_keys() {
        let t = format!("{TWO}[[link]]\na = \"a\"\nb = \"c\"\n");
        assert!(Scenario::parse(&t).unwrap_err().to_string().contains("unknown host or switch 'c'"));
        let t = format!("{TWO}[[run]]\ntool = \"iperf3\"\nhost = \"a\"\nserver = \"zz\"\n");
        assert!(Scenario::parse(&t).unwrap_err().to_string().contains("unknown host 'zz'"));
        let t = format!("{TWO}[[qos]]\nlink = \"x-y\"\n[[qos.class]]\nname = \"c\"\nrate = \"1mbit\"\n");
        assert!(Scenario::parse(&t).unwrap_err().to_string().contains("unknown link"));
        assert!(Scenario::parse(&format!("{TWO}colour = \"red\"\n")).is_err());
    }

    #[test]
    fn rejects_bad_names_rates_and_times() {
        assert!(Scenario::parse(&TWO.replace("name = \"a\"", "name = \"A/b\"")).is_err());
        assert!(Scenario::parse(&TWO.replace("1gbit", "fast")).is_err());
        assert!(Scenario::parse(&format!("{TWO}jitter = \"1ms\"\n")).is_err(), "jitter without delay");
        assert!(Scenario::parse(&format!("{TWO}delay = \"1 fortnight\"\n")).is_err());
        assert!(Scenario::parse(&format!("{TWO}a_if = \"averyveryverylongname\"\n")).is_err());
        assert!(Scenario::parse(&format!("{TWO}loss = 101.0\n")).is_err());
        let tbf = Scenario::parse(&format!("{TWO}burst = \"4MiB\"\nlatency = \"10ms\"\n")).unwrap();
        assert_eq!((tbf.links[0].burst, tbf.links[0].latency), (Some(4 << 20), Some("10ms".parse().unwrap())));
        let e = Scenario::parse(&format!("{TWO}shaper = \"htb\"\nburst = \"4MiB\"\n")).unwrap_err().to_string();
        assert!(e.contains("tbf shaper's"), "{e}");
        assert!(Scenario::parse(&TWO.replace("rate = \"1gbit\"", "latency = \"10ms\"")).is_err(), "no rate");
        assert!(Scenario::parse(&format!("{TWO}burst = 100\n")).is_err());
        assert!(Scenario::parse(&format!("{TWO}latency = \"0ms\"\n")).is_err());
    }

    #[test]
    fn parses_units() {
        let shaper_rate = |t: &str| t.parse::<ShaperRate>().map(ShaperRate::bits_per_s);
        assert_eq!(shaper_rate("10gbit").unwrap(), 10_000_000_000);
        assert_eq!(shaper_rate("2.5gbit").unwrap(), 2_500_000_000);
        assert_eq!(shaper_rate("500mbit").unwrap(), 500_000_000);
        assert_eq!(shaper_rate("1Gbit/s").unwrap(), 1_000_000_000);
        assert_eq!(shaper_rate("10G").unwrap(), 10_000_000_000);
        assert_eq!(shaper_rate("125MB/s").unwrap(), 1_000_000_000);
        assert_eq!(shaper_rate("1000000bit").unwrap(), 1_000_000);
        assert_eq!("10gbit".parse::<ShaperRate>().unwrap().to_string(), "10000000000bit", "tc's form");
        assert!(shaper_rate("999bit").is_err());
        assert!(shaper_rate("1001gbit").is_err());
        assert!(shaper_rate("10 gigabit").is_err());
        let run = |size: &str| {
            Scenario::parse(&format!("{TWO}[[run]]\ntool = \"cp\"\nhost = \"a\"\nserver = \"b\"\nfile_size = {size}\n"))
        };
        assert_eq!(run("4096").unwrap().runs[0].file_size, Some(4096));
        assert_eq!(run("\"1.6MB\"").unwrap().runs[0].file_size, Some(1_600_000));
        assert_eq!(run("\"2GiB\"").unwrap().runs[0].file_size, Some(2 << 30));
        assert!(run("\"1.5\"").unwrap_err().to_string().contains("whole number of bytes"));
        assert!(run("-1").is_err());
        let time_us = |t: &str| t.parse::<LinkTime>().map(LinkTime::as_micros);
        assert_eq!(time_us("0.5ms").unwrap(), 500);
        assert_eq!(time_us("2s").unwrap(), 2_000_000);
        assert!(time_us("61s").unwrap_err().to_string().contains("between 0 and 60s"));
        assert!(time_us("5").unwrap_err().to_string().contains("give one, e.g. 5ms"));
        assert_eq!(expand("g[1..3]").unwrap(), ["g1", "g2", "g3"]);
        assert!(expand("g[3..1]").is_err());
        assert!(expand("g[1..100000]").is_err());
    }

    #[test]
    fn parses_cp_modes_and_refuses_them_elsewhere() {
        let run = |tool: &str, extra: &str| {
            Scenario::parse(&format!("{TWO}[[run]]\ntool = \"{tool}\"\nhost = \"a\"\nserver = \"b\"\n{extra}"))
        };
        assert_eq!(run("cp", "").unwrap().runs[0].mode, None, "push when not given");
        for (text, mode) in [
            ("push", CpMode::Push),
            ("pull", CpMode::Pull),
            ("ssh-push", CpMode::SshPush),
            ("ssh-pull", CpMode::SshPull),
        ] {
            assert_eq!(run("cp", &format!("mode = \"{text}\"\n")).unwrap().runs[0].mode, Some(mode));
        }
        let e = run("cp", "mode = \"sideways\"\n").unwrap_err().to_string();
        assert!(e.contains("sideways") && e.contains("ssh-pull"), "{e}");
        let e = run("scp", "mode = \"pull\"\n").unwrap_err().to_string();
        assert!(e.contains("`mode` is for tool = \"cp\"") && e.contains("not scp"), "{e}");
        assert!(run("rclone", "args = [\"--transfers\", \"16\"]\n").is_ok());
        for ok in
            [("cp", "mode = \"ssh-push\"\n"), ("cp", "mode = \"ssh-pull\"\n"), ("scp", ""), ("rsync", ""), ("tar", "")]
        {
            let sc = run(ok.0, &format!("{}ssh_master = true\n", ok.1)).unwrap();
            assert!(sc.runs[0].ssh_master, "{ok:?}");
        }
        for bad in [("cp", ""), ("cp", "mode = \"pull\"\n"), ("rclone", ""), ("iperf3", "")] {
            let e = run(bad.0, &format!("{}ssh_master = true\n", bad.1)).unwrap_err().to_string();
            assert!(e.contains("`ssh_master` is for runs through ssh"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn parses_uniform_sizes_and_the_workdir() {
        let run = |extra: &str| {
            Scenario::parse(&format!("{TWO}[[run]]\ntool = \"cp\"\nhost = \"a\"\nserver = \"b\"\n{extra}"))
        };
        let s = run("min_size = \"1KiB\"\nmax_size = \"16KiB\"\n").unwrap();
        assert_eq!((s.runs[0].min_size, s.runs[0].max_size), (Some(1024), Some(16384)));
        assert!(run("min_size = \"1KiB\"\n").unwrap_err().to_string().contains("together"));
        assert!(run("min_size = 9\nmax_size = 8\n").unwrap_err().to_string().contains("must not exceed"));
        assert!(run("file_size = 9\nmin_size = 1\nmax_size = 8\n").unwrap_err().to_string().contains("not both"));
        let e = Scenario::parse(&format!("{TWO}[[run]]\ntool = \"iperf3\"\nhost = \"a\"\nserver = \"b\"\nfiles = 3\n"));
        assert!(e.unwrap_err().to_string().contains("copying tools"));
        assert_eq!(Scenario::parse(TWO).unwrap().workdir, None, "the runner then uses /dev/shm");
        assert_eq!(Scenario::parse(TWO).unwrap().prefault, None, "the runner then prefaults");
        assert_eq!(Scenario::parse(&format!("prefault = false\n{TWO}")).unwrap().prefault, Some(false));
        let disk = format!("workdir = \"/var/tmp\"\n{TWO}");
        assert_eq!(Scenario::parse(&disk).unwrap().workdir, Some("/var/tmp".into()));
        let relative = format!("workdir = \"tmp\"\n{TWO}");
        assert!(Scenario::parse(&relative).unwrap_err().to_string().contains("absolute"));
        let spaced = format!("workdir = \"/mnt/my disk\"\n{TWO}");
        assert!(Scenario::parse(&spaced).unwrap_err().to_string().contains("letters, digits"));
    }

    #[test]
    fn a_time_scale_shortens_durations_trees_and_repeats_but_keeps_every_member() {
        let text = format!(
            "{TWO}[[run]]\ntool = \"bench\"\nhost = \"a\"\nserver = \"b\"\nseconds = 20\nrepeat = 3\nstreams = 5\n\
             [[run]]\ntool = \"cp\"\nhost = \"a\"\nserver = \"b\"\nfiles = 640\n\
             [[run]]\ntool = \"scp\"\nhost = \"a\"\nserver = \"b\"\nfiles = 1\nfile_size = \"2GiB\"\n\
             [[run]]\ntool = \"rsync\"\nhost = \"a\"\nserver = \"b\"\nfiles = 6\nseconds = 1\n"
        );
        let sc = Scenario::parse(&text).unwrap();
        let s = sc.scaled(0.05).unwrap();
        assert_eq!((s.runs[0].seconds, s.runs[0].repeat, s.runs[0].streams), (Some(1), Some(1), Some(5)));
        assert_eq!(s.runs[1].files, Some(32));
        assert_eq!((s.runs[2].files, s.runs[2].file_size), (Some(1), Some(107_374_183)));
        assert_eq!((s.runs[3].files, s.runs[3].seconds), (Some(6), Some(1)), "never below what it had, nor 1 s");
        let same = sc.scaled(1.0).unwrap();
        assert_eq!(
            (same.runs[0].seconds, same.runs[1].files, same.runs[2].file_size),
            (Some(20), Some(640), Some(2 << 30))
        );
        for bad in [0.0, -1.0, 1.5, f64::NAN] {
            assert!(matches!(sc.scaled(bad), Err(LabError::Scenario(_))), "{bad}");
        }
    }

    #[test]
    fn a_percentage_reads_with_or_without_its_sign() {
        for loss in ["1.0", "1", "\"1%\"", "\"1\""] {
            let sc = Scenario::parse(&format!("{TWO}delay = \"5ms\"\nloss = {loss}\n")).unwrap();
            assert_eq!(sc.links[0].loss.map(Percent::get), Some(1.0), "{loss}");
        }
        for bad in ["101.0", "-1", "\"101%\"", "\"lots\""] {
            let e = Scenario::parse(&format!("{TWO}loss = {bad}\n")).unwrap_err().to_string();
            assert!(e.contains("loss") && (e.contains("0 to 100") || e.contains("percentage")), "{bad}: {e}");
        }
    }

    #[test]
    fn a_bad_value_names_its_field_and_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wan.toml");
        std::fs::write(&path, format!("{TWO}delay = \"5\"\n")).unwrap();
        let e = Scenario::load(&path).unwrap_err().to_string();
        assert!(e.contains("wan.toml") && e.contains("delay") && e.contains("give one, e.g. 5ms"), "{e}");
        std::fs::write(&path, TWO.replace("1gbit", "999bit")).unwrap();
        let e = Scenario::load(&path).unwrap_err().to_string();
        assert!(e.contains("wan.toml") && e.contains("rate") && e.contains("between 1kbit and 1000gbit"), "{e}");
        std::fs::write(&path, format!("{TWO}subnet = \"10.0.0.0/24\"\n")).unwrap();
        let e = Scenario::load(&path).unwrap_err().to_string();
        assert!(e.contains("wan.toml") && e.contains("subnet") && e.contains("198.18.0.0/15"), "{e}");
    }

    #[test]
    fn expands_ranges_in_links_and_runs() {
        let t = r#"
name = "sw"
[[host]]
name = "g[1..4]"
[[host]]
name = "srv"
[[switch]]
name = "sw0"
[[link]]
a = "g[1..4]"
b = "sw0"
[[link]]
name = "up"
a = "sw0"
b = "srv"
[[run]]
tool = "iperf3"
hosts = ["g[1..4]"]
sweep = [1, 2, 4]
server = "srv"
"#;
        let s = Scenario::parse(t).unwrap();
        let l = s.expanded_links().unwrap();
        assert_eq!(l.len(), 5);
        assert_eq!(l[3].0, "g4-sw0");
        assert_eq!(s.run_hosts(&s.runs[0]).unwrap().len(), 4);
        assert!(Scenario::parse(&t.replace("[1, 2, 4]", "[5]")).is_err());
        let vias = t.replace("sweep = [1, 2, 4]", "vias = [\"g1-sw0\", \"up\"]\nsweep = [8]");
        assert!(Scenario::parse(&vias).is_ok(), "4 hosts x 2 links = 8 instances");
        assert!(Scenario::parse(&vias.replace("[8]", "[9]")).is_err());
        assert!(Scenario::parse(&vias.replace("\"up\"]", "\"nope\"]"))
            .unwrap_err()
            .to_string()
            .contains("unknown link"));
        assert!(Scenario::parse(&vias.replace("sweep = [8]", "via = \"up\""))
            .unwrap_err()
            .to_string()
            .contains("not both"));
    }
}
