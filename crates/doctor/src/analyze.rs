//! `linerate doctor`: what the collected host facts mean. Turns [`Facts`] (from
//! [`crate::host`]) into findings with a severity and a concrete fix, and a verdict: the expected
//! ceiling of single-stream and multi-stream encrypted transfer, and what limits it first.
//! [`analyze`] is a pure function of the facts, so fixture trees test it; [`collect`] gathers
//! the facts from the live host. Issue 8; the formulas are documented in docs/USER_GUIDE.md.

use crate::host::aead::{self, AeadRates};
use crate::host::copycost::{self, CopyCost};
use crate::host::cpu::CpuFacts;
use crate::host::ethtool::{self, Offloads};
use crate::host::nic::{self, NicFacts};
use crate::host::path::{self, PmtuFacts, RttFacts};
use crate::host::qdisc::{self, QdiscFacts};
use crate::host::repeat::{Repeat, Spread};
use crate::host::tcp::TcpFacts;
use crate::host::{read_trim, Roots};
use linerate_model::units::{format_rate, format_size_iec};
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::time::Duration;

/// Schema name of the JSON report; bumped on incompatible changes.
pub const SCHEMA: &str = "linerate.doctor/1";

/// Share of the PCIe data rate (after line encoding) left for packet payload: a 256-byte max
/// payload carries ~24 bytes of TLP header, sequence number, LCRC and framing (256/280 ≈ 0.91),
/// and ACK/flow-control DLLPs, descriptor reads, doorbells and completions take a few percent
/// more. Measured NICs land around 0.8 of the encoded rate.
pub const PCIE_EFFICIENCY: f64 = 0.80;

/// A source of a short measured rate to a peer: the CLI implements it with `linerate bench`.
pub trait RateProbe {
    /// Run a `streams`-connection TCP stream test to `peer` (`HOST:PORT` of a `linerate
    /// serve`) for about `secs` seconds; return the goodput in bits per second, or why it
    /// could not be measured (shown in the report).
    fn probe(&self, peer: &str, streams: u32, secs: f64) -> Result<f64, Box<dyn std::error::Error + Send + Sync>>;
}

/// How bad a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing; nothing to fix necessarily.
    Info,
    /// Costs speed or robustness; fix when convenient.
    Warn,
    /// Caps the rate below the link, or breaks transfers.
    Critical,
}

impl std::fmt::Display for Severity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Severity::Info => "info",
            Severity::Warn => "warn",
            Severity::Critical => "CRITICAL",
        })
    }
}

/// One thing doctor noticed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// Stable identifier (`pcie-limits-line-rate`, `path-mtu-mismatch`...).
    pub id: String,
    /// Severity.
    pub severity: Severity,
    /// What it is about: an interface name, `host`, `tcp` or `path`.
    pub subject: String,
    /// What was found, with the numbers.
    pub message: String,
    /// What to change (a command where there is one).
    pub fix: Option<String>,
}

/// An interface with the facts that need the live kernel (netlink, tc).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NicReport {
    /// sysfs/procfs facts.
    #[serde(flatten)]
    pub facts: NicFacts,
    /// Offloads, if the ethtool netlink family answered.
    pub offloads: Option<Offloads>,
    /// Qdiscs, if `tc` answered.
    pub qdisc: Option<QdiscFacts>,
}

/// Result of the short rate probes to the peer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProbeResults {
    /// One stream, bits per second.
    pub single_bps: f64,
    /// `multi_streams` streams, bits per second.
    pub multi_bps: f64,
    /// Streams of the multi-stream probe.
    pub multi_streams: u32,
}

/// What was learned about the path to `--peer`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PathReport {
    /// The peer as resolved (`ADDR:PORT`).
    pub peer: String,
    /// Interface the route to the peer leaves through.
    pub iface: Option<String>,
    /// Round-trip time (TCP connect to the serve port).
    pub rtt: Option<RttFacts>,
    /// Why there is no RTT.
    pub rtt_error: Option<String>,
    /// Path-MTU probe.
    pub pmtu: Option<PmtuFacts>,
    /// Why there is no path MTU.
    pub pmtu_error: Option<String>,
    /// Rate probes.
    pub probe: Option<ProbeResults>,
    /// Why there are no rate probes.
    pub probe_error: Option<String>,
}

/// Everything doctor looks at.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Facts {
    /// Kernel release.
    pub kernel: String,
    /// Host name.
    pub hostname: String,
    /// CPUs.
    pub cpu: CpuFacts,
    /// TCP settings.
    pub tcp: TcpFacts,
    /// Interfaces inspected.
    pub nics: Vec<NicReport>,
    /// The interface the verdict is about (route to the peer, `--iface`, or the default route).
    pub primary: Option<String>,
    /// Measured AEAD rates on one core.
    pub aead: Option<AeadRates>,
    /// Measured per-byte costs of a copy besides the AEAD (page-cache reads and writes, TCP stack; BLAKE3 for `--verify`).
    #[serde(default)]
    pub copy: Option<CopyCost>,
    /// Path to the peer, with `--peer`.
    pub path: Option<PathReport>,
}

/// Knobs of the analysis.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AnalysisConfig {
    /// RTT to assume when none was measured, seconds (`--rtt`, default 1 ms).
    pub rtt_s: f64,
    /// Streams of a multi-stream transfer (default: cores, 2 to 8, like `linerate cp`).
    pub streams: u32,
    /// The line rate, bit/s, as the user gives it (`--link-rate`): for a path whose interface
    /// reports no speed or only a nominal one (a VM's virtio, a TAP, a veth), and over the one
    /// it reports where given.
    pub link_bps: Option<f64>,
}

impl AnalysisConfig {
    /// Defaults for a host with `cores` cores.
    pub fn for_cores(cores: u32) -> AnalysisConfig {
        AnalysisConfig { rtt_s: 0.001, streams: cores.clamp(2, 8), link_bps: None }
    }
}

/// One limit on the rate, with how it was computed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Limit {
    /// `line rate`, `pcie`, `crypto`, `cpu per byte`, `tcp buffers`.
    pub name: String,
    /// Bits per second (from the median round of what was measured).
    pub bps: f64,
    /// The formula with its numbers.
    pub formula: String,
    /// From the slowest rounds of what was measured, bit/s; `None` for a limit computed from
    /// facts alone (a link speed, a PCIe link, a buffer).
    #[serde(default)]
    pub low_bps: Option<f64>,
    /// From the fastest rounds, bit/s (as `low_bps`).
    #[serde(default)]
    pub high_bps: Option<f64>,
}

impl Limit {
    /// A limit computed from measured rates: its median, with the range of its rounds where
    /// they were measured.
    fn measured(name: &str, s: Spread, formula: String) -> Limit {
        Limit {
            name: name.into(),
            bps: s.median_bps,
            formula,
            low_bps: (s.rounds > 0).then_some(s.low_bps),
            high_bps: (s.rounds > 0).then_some(s.high_bps),
        }
    }
}

/// What the rate probe to a peer measures (`doctor --peer --key-file`): a `linerate bench`
/// tcp-stream test, from memory to memory and unencrypted, not an encrypted copy through the
/// page cache (issue 43: printed under a copy's ceiling, 6–12 × above it).
pub const PROBE_MEASURES: &str = "memory-to-memory TCP (linerate bench tcp-stream), unencrypted, not a copy";

/// Expected ceiling for one transfer shape.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// Streams.
    pub streams: u32,
    /// All limits that could be computed.
    pub limits: Vec<Limit>,
    /// The lowest of them, bits per second (`None` if none could be computed).
    pub ceiling_bps: Option<f64>,
    /// Name of the lowest limit.
    pub limited_by: Option<String>,
    /// Rate measured by the probe, when one ran.
    pub measured_bps: Option<f64>,
    /// The ceiling from the slowest rounds of the micro-benchmarks: the lowest of the limits'
    /// `low_bps` (or `bps`); `None` when no limit has a measured range.
    #[serde(default)]
    pub ceiling_low_bps: Option<f64>,
    /// The ceiling from the fastest rounds (as `ceiling_low_bps`).
    #[serde(default)]
    pub ceiling_high_bps: Option<f64>,
    /// What `measured_bps` measures ([`PROBE_MEASURES`]), when a probe ran.
    #[serde(default)]
    pub measured_by: Option<String>,
}

/// The bottom line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// Interface the estimate is for.
    pub iface: Option<String>,
    /// RTT used, seconds.
    pub rtt_s: f64,
    /// `measured` or `assumed`.
    pub rtt_source: String,
    /// One stream.
    pub single_stream: Estimate,
    /// Several streams.
    pub multi_stream: Estimate,
    /// What limits a multi-stream transfer first (the best this host can do), in words.
    pub bottleneck: String,
    /// Fixes of the warn and critical findings, most severe first.
    pub actions: Vec<String>,
}

/// The whole report (`linerate doctor --json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// What was looked at.
    pub facts: Facts,
    /// What it means, most severe first.
    pub findings: Vec<Finding>,
    /// The bottom line.
    pub verdict: Verdict,
}

/// Data rate of one PCIe lane after line encoding, Gbit/s, for a transfer rate in GT/s:
/// gen1/gen2 (2.5, 5 GT/s) use 8b/10b, gen3 to gen5 (8, 16, 32 GT/s) 128b/130b, gen6 (64 GT/s)
/// 256-byte FLITs of which 236 bytes carry TLPs.
pub fn pcie_lane_gbps(gts: f64) -> f64 {
    if gts >= 64.0 {
        gts * 236.0 / 256.0
    } else if gts >= 8.0 {
        gts * 128.0 / 130.0
    } else {
        gts * 0.8
    }
}

/// PCIe generation for a transfer rate.
pub fn pcie_gen(gts: f64) -> u32 {
    match gts {
        g if g >= 64.0 => 6,
        g if g >= 32.0 => 5,
        g if g >= 16.0 => 4,
        g if g >= 8.0 => 3,
        g if g >= 5.0 => 2,
        _ => 1,
    }
}

/// Payload ceiling of a PCIe link per direction, bits per second:
/// lane rate × width × [`PCIE_EFFICIENCY`].
pub fn pcie_ceiling_bps(gts: f64, width: u32) -> f64 {
    pcie_lane_gbps(gts) * f64::from(width) * 1e9 * PCIE_EFFICIENCY
}

/// Why collection failed.
#[derive(Debug, thiserror::Error)]
pub enum DoctorError {
    /// `--iface` names no interface.
    #[error("no interface {name:?} (present: {present})")]
    NoSuchInterface {
        /// What was asked for.
        name: String,
        /// What exists.
        present: String,
    },
}

/// What to collect.
#[derive(Clone, Debug, Default)]
pub struct CollectConfig {
    /// Only this interface (`--iface`).
    pub iface: Option<String>,
    /// Include loopback.
    pub include_lo: bool,
    /// `HOST[:PORT]` of a `linerate serve` to check the path to.
    pub peer: Option<String>,
    /// Ask the live kernel (netlink, tc, sockets); off for fixture trees.
    pub live: bool,
    /// Time for each micro-benchmark (the two AEADs, BLAKE3, page-cache writes and reads, TCP
    /// over loopback), each repeated within it as [`Repeat::DOCTOR`] says; `None` skips them.
    pub aead_budget: Option<Duration>,
    /// Streams of the multi-stream rate probe.
    pub probe_streams: u32,
    /// Seconds of each rate probe.
    pub probe_secs: f64,
}

/// Gather the facts under `roots` (plus netlink, tc, sockets when `cfg.live`).
pub fn collect(roots: &Roots, cfg: &CollectConfig, probe: Option<&dyn RateProbe>) -> Result<Facts, DoctorError> {
    let all = nic::list(roots, true);
    let path = cfg.peer.as_deref().map(|p| collect_path(roots, p, cfg, probe));
    let route = path.as_ref().and_then(|p| p.iface.clone());
    let names: Vec<String> = match (&cfg.iface, route) {
        (Some(i), _) if all.contains(i) => vec![i.clone()],
        (Some(i), _) => return Err(DoctorError::NoSuchInterface { name: i.clone(), present: all.join(", ") }),
        // the interface the route to the peer uses carries the transfer; the others' advice
        // would not apply to it (a loopback peer is `lo`, and no NIC is involved)
        (None, Some(r)) if all.contains(&r) => vec![r],
        (None, _) => all.into_iter().filter(|n| cfg.include_lo || n != "lo").collect(),
    };
    let nics: Vec<NicReport> = names
        .iter()
        .map(|n| NicReport {
            facts: NicFacts::read(roots, n),
            offloads: if cfg.live { ethtool::features(n).ok().map(|f| Offloads::from_features(&f)) } else { None },
            qdisc: if cfg.live { qdisc::show(n).ok() } else { None },
        })
        .collect();
    let primary = cfg
        .iface
        .clone()
        .or_else(|| path.as_ref().and_then(|p| p.iface.clone()))
        .or_else(|| path::route_iface(roots, std::net::Ipv4Addr::new(198, 51, 100, 1)))
        .or_else(|| nics.iter().max_by_key(|n| n.facts.speed_mbps.unwrap_or(0)).map(|n| n.facts.name.clone()));
    Ok(Facts {
        kernel: read_trim(&roots.proc.join("sys/kernel/osrelease")).unwrap_or_default(),
        hostname: read_trim(&roots.proc.join("sys/kernel/hostname")).unwrap_or_default(),
        cpu: CpuFacts::read(roots),
        tcp: TcpFacts::read(roots),
        nics,
        primary,
        aead: cfg.aead_budget.map(|b| aead::measure(&Repeat { budget: b, ..Repeat::DOCTOR })),
        copy: cfg.aead_budget.map(|b| copycost::measure(&Repeat { budget: b, ..Repeat::DOCTOR })),
        path,
    })
}

fn collect_path(roots: &Roots, peer: &str, cfg: &CollectConfig, probe: Option<&dyn RateProbe>) -> PathReport {
    let addr = match path::resolve_peer(peer) {
        Ok(a) => a,
        Err(e) => {
            let e = e.to_string();
            return PathReport {
                peer: peer.to_string(),
                rtt_error: Some(e.clone()),
                pmtu_error: Some(e.clone()),
                probe_error: Some(e),
                ..PathReport::default()
            };
        }
    };
    let iface = match addr.ip() {
        IpAddr::V4(v4) => path::route_iface(roots, v4),
        IpAddr::V6(_) => None,
    };
    let mut r = PathReport { peer: addr.to_string(), iface, ..PathReport::default() };
    if !cfg.live {
        return r;
    }
    match path::rtt(addr, 5, Duration::from_secs(2)) {
        Ok(x) => r.rtt = Some(x),
        Err(e) => r.rtt_error = Some(e.to_string()),
    }
    if r.iface.as_deref() == Some("lo") {
        // no path to probe: no hop lies between, and lo's MTU is no link's
        r.pmtu_error = Some("the peer is on this host (lo): no path MTU to probe".into());
    } else {
        match path::path_mtu(addr.ip()) {
            Ok(x) => r.pmtu = Some(x),
            Err(e) => r.pmtu_error = Some(e.to_string()),
        }
    }
    match probe {
        None => r.probe_error = Some("no rate probe in this build (it comes with `linerate bench`)".into()),
        Some(p) => {
            let streams = cfg.probe_streams.max(2);
            let peer = addr.to_string();
            match (p.probe(&peer, 1, cfg.probe_secs), p.probe(&peer, streams, cfg.probe_secs)) {
                (Ok(single_bps), Ok(multi_bps)) => {
                    r.probe = Some(ProbeResults { single_bps, multi_bps, multi_streams: streams })
                }
                (Err(e), _) | (_, Err(e)) => r.probe_error = Some(e.to_string()),
            }
        }
    }
    r
}

struct Out {
    findings: Vec<Finding>,
}

impl Out {
    fn add(&mut self, id: &str, severity: Severity, subject: &str, message: String, fix: Option<String>) {
        self.findings.push(Finding { id: id.into(), severity, subject: subject.into(), message, fix });
    }
}

/// Mask with the first `n` CPUs set, as `rps_cpus` wants it.
fn cpu_mask_hex(n: u32) -> String {
    let n = n.clamp(1, 32);
    format!("{:x}", if n == 32 { u32::MAX } else { (1u32 << n) - 1 })
}

/// What each NIC rule reads about one NIC.
struct Nic<'a> {
    n: &'a NicReport,
    f: &'a NicFacts,
    name: &'a str,
    physical: bool,
    /// A paravirtual NIC or software link ([`NicFacts::is_virtual`]): no cable, no link speed.
    virt: bool,
    line: Option<f64>,
    cpu: &'a CpuFacts,
}

/// A rule about one NIC: it adds the findings it has.
type NicRule = fn(&Nic<'_>, &mut Out);

/// The NIC rules, in the order their findings are listed (within a severity).
const NIC_RULES: &[NicRule] =
    &[link_speed_unknown, pcie_link, queues, rss_spread, irq_spread, offloads, jumbo_frames, qdisc, numa];

fn nic_findings(o: &mut Out, n: &NicReport, cpu: &CpuFacts) {
    let f = &n.facts;
    let c = Nic {
        n,
        f,
        name: f.name.as_str(),
        physical: f.driver.is_some(),
        virt: f.is_virtual(),
        line: f.speed_mbps.map(|m| m as f64 * 1e6),
        cpu,
    };
    for rule in NIC_RULES {
        rule(&c, o);
    }
}

/// A NIC whose link speed the kernel does not report: a cable to check on a physical one, the
/// host's business on a paravirtual one (virtio, netvsc...).
fn link_speed_unknown(c: &Nic<'_>, o: &mut Out) {
    let f = c.f;
    let name = c.name;
    let physical = c.physical;
    let line = c.line;
    if physical && c.virt && line.is_none() {
        o.add(
            "link-speed-virtual",
            Severity::Info,
            name,
            format!(
                "virtual NIC ({}): no link speed to read; its rate is whatever the host behind it gives",
                f.driver.as_deref().unwrap_or("?")
            ),
            None,
        );
    } else if physical && line.is_none() {
        o.add(
            "link-speed-unknown",
            Severity::Info,
            name,
            format!(
                "no link speed reported (operstate {}; virtual NICs report none)",
                f.operstate.as_deref().unwrap_or("unknown")
            ),
            Some(format!("check the cable and `ip link show dev {name}`")),
        );
    }
}

/// A PCIe link narrower or slower than the card: the slot may cap the NIC.
fn pcie_link(c: &Nic<'_>, o: &mut Out) {
    let f = c.f;
    let name = c.name;
    let line = c.line;
    if let Some(p) = &f.pcie {
        let cur = pcie_ceiling_bps(p.current_gts, p.current_width);
        let max = pcie_ceiling_bps(p.max_gts, p.max_width);
        let desc = format!(
            "PCIe gen{} x{} negotiated, card can do gen{} x{}: ceiling {} per direction",
            pcie_gen(p.current_gts),
            p.current_width,
            pcie_gen(p.max_gts),
            p.max_width,
            format_rate(cur)
        );
        let downgraded = p.current_width < p.max_width || p.current_gts < p.max_gts;
        let fix = if p.current_width < p.max_width {
            format!(
                "move the card to a slot wired x{} (gen{} or better); check the BIOS slot settings",
                p.max_width,
                pcie_gen(p.max_gts)
            )
        } else {
            format!("move the card to a gen{} slot; check the BIOS PCIe speed setting", pcie_gen(p.max_gts))
        };
        match line {
            Some(l) if cur < l => o.add(
                "pcie-limits-line-rate",
                Severity::Critical,
                name,
                format!("{desc}, below the {} link", format_rate(l)),
                Some(fix),
            ),
            _ if downgraded && max > cur => {
                o.add("pcie-downgraded", Severity::Info, name, format!("{desc}; still above the line rate"), Some(fix))
            }
            _ => {}
        }
    }
}

/// A single queue (or one direction) on a multi-core host: one core takes every packet; RPS as the fix.
fn queues(c: &Nic<'_>, o: &mut Out) {
    let f = c.f;
    let name = c.name;
    let physical = c.physical;
    let cpu = c.cpu;
    if physical && cpu.logical_cpus > 1 && (f.rx_queues <= 1 || f.tx_queues <= 1) {
        o.add(
            "single-queue",
            Severity::Warn,
            name,
            format!(
                "{} RX / {} TX queue(s): one core takes every interrupt and all the receive processing",
                f.rx_queues, f.tx_queues
            ),
            Some(format!(
                "ethtool -L {name} combined {} (if `ethtool -l {name}` shows more channels)",
                cpu.logical_cpus.min(16)
            )),
        );
        if f.rx_queues == 1 && f.rps_cpus.first().is_some_and(|c| c.is_empty()) {
            o.add(
                "rps-off",
                Severity::Warn,
                name,
                "one receive queue and receive packet steering off: receive processing stays on one CPU".into(),
                Some(format!("echo {} > /sys/class/net/{name}/queues/rx-0/rps_cpus", cpu_mask_hex(cpu.logical_cpus))),
            );
        }
    }
}

/// Receive-side scaling across the queues.
fn rss_spread(c: &Nic<'_>, o: &mut Out) {
    let f = c.f;
    let name = c.name;
    let physical = c.physical;
    let cpu = c.cpu;
    if physical && f.rx_queues > 1 {
        o.add(
            "rss",
            Severity::Info,
            name,
            format!(
                "receive-side scaling over {} RX queues: flows spread by hash, but one stream stays on one queue and one CPU",
                f.rx_queues
            ),
            Some(format!("use at least {} streams to use every queue", f.rx_queues.min(cpu.logical_cpus))),
        );
    }
}

/// Every queue interrupt landing on one CPU.
fn irq_spread(c: &Nic<'_>, o: &mut Out) {
    let f = c.f;
    let name = c.name;
    let physical = c.physical;
    let cpu = c.cpu;
    if physical && f.rx_queues > 1 && f.irqs.len() > 1 && cpu.logical_cpus > 1 {
        let mut hit: Vec<u32> = f.irqs.iter().flat_map(|i| i.cpus_hit.iter().copied()).collect();
        hit.sort_unstable();
        hit.dedup();
        let mut allowed: Vec<u32> = f.irqs.iter().flat_map(|i| i.affinity.iter().copied()).collect();
        allowed.sort_unstable();
        allowed.dedup();
        if allowed.len() == 1 || hit.len() == 1 {
            let cpu_n = if allowed.len() == 1 { allowed[0] } else { hit[0] };
            o.add(
                "irqs-on-one-cpu",
                Severity::Warn,
                name,
                format!("all {} queue interrupts land on CPU {cpu_n}", f.irqs.len()),
                Some(format!(
                    "run irqbalance, or spread them: echo CPU > /proc/irq/N/smp_affinity_list for IRQs {}",
                    f.irqs.iter().map(|i| i.irq.to_string()).collect::<Vec<_>>().join(",")
                )),
            );
        }
    }
}

/// Offloads that are off (TSO, GSO, GRO, checksums) or LRO on.
fn offloads(c: &Nic<'_>, o: &mut Out) {
    let n = c.n;
    let name = c.name;
    let physical = c.physical;
    if let Some(off) = n.offloads.as_ref().filter(|_| physical) {
        let mut missing = Vec::new();
        for (on, flag, what) in [(off.tso, "tso", "TSO"), (off.gso, "gso", "GSO"), (off.gro, "gro", "GRO")] {
            if on == Some(false) {
                missing.push((flag, what));
            }
        }
        if !missing.is_empty() {
            o.add(
                "offloads-off",
                Severity::Warn,
                name,
                format!(
                    "{} off: the CPU handles every MTU-sized packet",
                    missing.iter().map(|m| m.1).collect::<Vec<_>>().join(", ")
                ),
                Some(format!(
                    "ethtool -K {name} {}",
                    missing.iter().map(|m| format!("{} on", m.0)).collect::<Vec<_>>().join(" ")
                )),
            );
        }
        if off.rx_checksum == Some(false) || off.tx_checksum == Some(false) {
            o.add(
                "checksum-offload-off",
                Severity::Warn,
                name,
                "checksum offload off: the CPU checksums every packet".into(),
                Some(format!("ethtool -K {name} rx on tx on")),
            );
        }
        if off.lro == Some(true) {
            o.add(
                "lro-on",
                Severity::Info,
                name,
                "LRO on: fine for an endpoint, breaks routing and bridging through this host".into(),
                Some(format!("ethtool -K {name} lro off   # only if this host forwards traffic")),
            );
        }
    }
}

/// A fast link at the standard MTU.
fn jumbo_frames(c: &Nic<'_>, o: &mut Out) {
    let f = c.f;
    let name = c.name;
    let line = c.line;
    if let (Some(l), Some(mtu)) = (line, f.mtu) {
        if l >= 10e9 && mtu <= 1500 {
            o.add(
                "standard-mtu",
                Severity::Info,
                name,
                format!("MTU {mtu} on a {} link: jumbo frames cut per-packet CPU cost", format_rate(l)),
                Some(format!("ip link set dev {name} mtu 9000   # only if every hop and the peer take 9000")),
            );
        }
    }
}

/// A root qdisc that does not suit a fast NIC.
fn qdisc(c: &Nic<'_>, o: &mut Out) {
    let n = c.n;
    let name = c.name;
    let physical = c.physical;
    if let Some(root) = n.qdisc.as_ref().and_then(|q| q.root.as_ref()) {
        if root.kind == "pfifo_fast" && physical {
            o.add(
                "qdisc-pfifo-fast",
                Severity::Info,
                name,
                "root qdisc pfifo_fast: no pacing or per-flow fairness between streams".into(),
                Some(format!("tc qdisc replace dev {name} root fq")),
            );
        }
    }
}

/// The NIC's NUMA node against the cores that will use it.
fn numa(c: &Nic<'_>, o: &mut Out) {
    let f = c.f;
    let name = c.name;
    let physical = c.physical;
    let cpu = c.cpu;
    if cpu.numa_nodes > 1 && physical {
        match f.numa_node {
            Some(node) => o.add(
                "numa-node",
                Severity::Info,
                name,
                format!("the NIC hangs off NUMA node {node} of {}", cpu.numa_nodes),
                Some(format!("numactl --cpunodebind={node} --membind={node} linerate ...")),
            ),
            None => o.add(
                "numa-node-unknown",
                Severity::Info,
                name,
                format!("{} NUMA nodes, the NIC's node is unknown", cpu.numa_nodes),
                None,
            ),
        }
    }
}

/// What the host, TCP and path rules read: the facts, and the figures derived from them once.
struct Host<'a> {
    facts: &'a Facts,
    /// The primary NIC's line rate, bit/s.
    line: Option<f64>,
    /// The RTT to assume, measured or configured, seconds.
    rtt_s: f64,
    /// The usable TCP window, bytes.
    window: Option<f64>,
}

/// A rule about the host, its TCP settings or the path: it adds the findings it has.
type HostRule = fn(&Host<'_>, &mut Out);

/// The host, TCP and path rules, in the order their findings are listed (within a severity).
const HOST_RULES: &[HostRule] = &[cpu_governor, smt, aes_ni, tcp_buffers, congestion_control, path_findings, crypto];

/// The CPU frequency governor: cores that ramp up late under bursty load.
fn cpu_governor(c: &Host<'_>, o: &mut Out) {
    let cpu = &c.facts.cpu;
    match cpu.governor.as_deref() {
        Some("performance") | None => {}
        Some(g) => o.add(
            "cpu-governor",
            if g == "powersave" { Severity::Warn } else { Severity::Info },
            "host",
            format!("CPU frequency governor {g}: cores ramp up late under bursty network load"),
            Some("cpupower frequency-set -g performance".into()),
        ),
    }
}

/// SMT: logical CPUs are not cores for bulk crypto.
fn smt(c: &Host<'_>, o: &mut Out) {
    let cpu = &c.facts.cpu;
    if cpu.smt_active == Some(true) {
        o.add(
            "smt",
            Severity::Info,
            "host",
            format!("SMT on: {} logical CPUs on {} cores; bulk crypto scales with cores", cpu.logical_cpus, cpu.cores),
            None,
        );
    }
}

/// No AES-NI or carry-less multiply: AES-GCM in software.
fn aes_ni(c: &Host<'_>, o: &mut Out) {
    let cpu = &c.facts.cpu;
    if cpu.flags.known && (!cpu.flags.aes || !cpu.flags.pclmulqdq) {
        o.add(
            "no-aes-ni",
            Severity::Warn,
            "host",
            "no AES-NI/carry-less multiply in /proc/cpuinfo: AES-GCM runs in software".into(),
            Some("use `--cipher chacha20-poly1305` (auto picks it)".into()),
        );
    }
}

/// TCP buffer limits against the bandwidth-delay product.
fn tcp_buffers(c: &Host<'_>, o: &mut Out) {
    let tcp = &c.facts.tcp;
    let line = c.line;
    let rtt_s = c.rtt_s;
    let window = c.window;
    if let (Some(l), Some(w)) = (line, window) {
        let bdp = l * rtt_s / 8.0;
        let need = linerate_model::tcp::buffer_for(bdp).ceil().max(4.0 * 1024.0 * 1024.0) as u64;
        let need = need.next_power_of_two();
        let limit = w * 8.0 / rtt_s;
        if limit < l {
            o.add(
                "tcp-buffers-below-bdp",
                if limit < l / 2.0 { Severity::Critical } else { Severity::Warn },
                "tcp",
                format!(
                    "bandwidth-delay product {} ({} × {:.2} ms) needs {} of buffer, tcp_rmem/tcp_wmem max ({}/{}) keep {} in flight: one stream tops out at {}",
                    format_size_iec(bdp),
                    format_rate(l),
                    rtt_s * 1e3,
                    format_size_iec(need as f64),
                    format_size_iec(tcp.tcp_rmem.map_or(0, |r| r[2]) as f64),
                    format_size_iec(tcp.tcp_wmem.map_or(0, |w| w[2]) as f64),
                    format_size_iec(w),
                    format_rate(limit)
                ),
                Some(format!(
                    "sysctl -w net.ipv4.tcp_rmem=\"4096 131072 {need}\" net.ipv4.tcp_wmem=\"4096 16384 {need}\" net.core.rmem_max={need} net.core.wmem_max={need}"
                )),
            );
        } else if tcp.rmem_max.is_some_and(|m| (m as f64) < bdp) || tcp.wmem_max.is_some_and(|m| (m as f64) < bdp) {
            o.add(
                "core-mem-max-below-bdp",
                Severity::Info,
                "tcp",
                format!(
                    "net.core.rmem_max/wmem_max ({}/{}) are below the BDP {}: tools that set SO_RCVBUF/SO_SNDBUF (iperf3 -w) are capped; autotuning is not",
                    format_size_iec(tcp.rmem_max.unwrap_or(0) as f64),
                    format_size_iec(tcp.wmem_max.unwrap_or(0) as f64),
                    format_size_iec(bdp)
                ),
                Some(format!("sysctl -w net.core.rmem_max={need} net.core.wmem_max={need}")),
            );
        }
    }
}

/// The congestion control for this path's RTT.
fn congestion_control(c: &Host<'_>, o: &mut Out) {
    let tcp = &c.facts.tcp;
    let rtt_s = c.rtt_s;
    match tcp.congestion_control.as_deref() {
        Some("reno") => o.add(
            "congestion-control-reno",
            Severity::Warn,
            "tcp",
            "congestion control reno: slow to recover window on fast links".into(),
            Some("sysctl -w net.ipv4.tcp_congestion_control=cubic".into()),
        ),
        Some(cc) if cc != "bbr" && rtt_s >= 0.01 => {
            let fix = if tcp.available_congestion_control.iter().any(|a| a == "bbr") {
                "sysctl -w net.ipv4.tcp_congestion_control=bbr"
            } else {
                "modprobe tcp_bbr && sysctl -w net.ipv4.tcp_congestion_control=bbr"
            };
            o.add(
                "congestion-control-long-rtt",
                Severity::Info,
                "tcp",
                format!("{cc} on a {:.0} ms path: BBR keeps the pipe fuller after losses", rtt_s * 1e3),
                Some(fix.into()),
            );
        }
        _ => {}
    }
}

/// The path to the peer: reachable, and its MTU against the local one.
fn path_findings(c: &Host<'_>, o: &mut Out) {
    let facts = c.facts;
    if let Some(p) = &facts.path {
        if let Some(e) = &p.rtt_error {
            o.add(
                "peer-unreachable",
                Severity::Critical,
                "path",
                format!("cannot reach the serve port of {}: {e}", p.peer),
                Some("start `linerate serve --listen ADDR:PORT --key-file FILE` on the peer; check firewalls".into()),
            );
        }
        let local_mtu =
            p.iface.as_ref().and_then(|i| facts.nics.iter().find(|n| &n.facts.name == i)).and_then(|n| n.facts.mtu);
        match (&p.pmtu, &p.pmtu_error) {
            (Some(m), _) => match m.path_mtu {
                Some(pm) if local_mtu.is_some_and(|l| pm < l.min(65_535)) => {
                    let l = local_mtu.unwrap_or(0);
                    let dev = p.iface.as_deref().unwrap_or("IF");
                    o.add(
                        "path-mtu-mismatch",
                        if m.route_mtu > pm { Severity::Critical } else { Severity::Warn },
                        "path",
                        format!(
                            "path MTU to {} is {pm} but {dev} has MTU {l}{}",
                            p.peer,
                            if m.route_mtu > pm {
                                ": larger packets vanish without an ICMP error (black hole)"
                            } else {
                                ": the kernel learned it; every flow starts by losing big packets"
                            }
                        ),
                        Some(format!(
                            "ip link set dev {dev} mtu {pm}   # or raise the MTU of every hop to {l}; also sysctl -w net.ipv4.tcp_mtu_probing=1"
                        )),
                    );
                }
                Some(_) => {}
                None => o.add(
                    "path-mtu-unanswered",
                    Severity::Warn,
                    "path",
                    format!("no ICMP echo to {} was answered; the path MTU is unknown", p.peer),
                    Some("allow ICMP echo and ICMP fragmentation-needed on the path".into()),
                ),
            },
            (None, Some(e)) => o.add("path-mtu-not-probed", Severity::Info, "path", e.clone(), None),
            (None, None) => {}
        }
    }
}

/// Encryption speed against the link: all cores together, or one stream's core.
fn crypto(c: &Host<'_>, o: &mut Out) {
    let cpu = &c.facts.cpu;
    let (Some(r), Some(l)) = (c.facts.aead.as_ref().map(|a| a.best_bps()), c.line) else { return };
    if r * f64::from(cpu.cores.max(1)) < l {
        o.add(
            "crypto-bound",
            Severity::Critical,
            "host",
            format!(
                "encryption on all {} cores together reaches {}, below the {} link",
                cpu.cores,
                format_rate(r * f64::from(cpu.cores.max(1))),
                format_rate(l)
            ),
            Some("more or faster cores (AES-NI/VAES), or `linerate cp` with -P equal to the cores".into()),
        );
    } else if r < l {
        let need = (l / r).ceil() as u32;
        o.add(
            "crypto-single-stream",
            Severity::Warn,
            "host",
            format!(
                "one stream's encryption tops out at {} (one core), below the {} link",
                format_rate(r),
                format_rate(l)
            ),
            Some(format!("use at least {need} streams: linerate cp -P {}", need.max(2))),
        );
    }
}

/// What limits a transfer over many streams, in words, with its ceiling.
fn bottleneck(multi_stream: &Estimate, line: Option<f64>, local: bool) -> String {
    match (&multi_stream.limited_by, multi_stream.ceiling_bps) {
        (Some(name), Some(c)) => {
            let what = match name.as_str() {
                "line rate" => "the link itself (good: nothing on this host is slower)",
                "pcie" => "the PCIe slot",
                "crypto" => "encryption on the CPU",
                "cpu per byte" => "the CPU: encryption, page-cache copies and the TCP stack for every byte",
                _ => "TCP buffer limits for this RTT",
            };
            let unknown_link = match line {
                None if local => " (the peer is on this host: no link, both ends share its CPU)",
                None => " (the link speed is unknown, so the link is not counted)",
                Some(_) => "",
            };
            format!("{what}, at {}{unknown_link}", format_rate(c))
        }
        _ => "unknown (no link speed, PCIe, crypto or buffer figures)".into(),
    }
}

/// The fixes of the findings that matter (warnings and worse), most severe first, each once.
fn actions(findings: &[Finding]) -> Vec<String> {
    let mut actions: Vec<String> = Vec::new();
    for f in findings.iter().filter(|f| f.severity >= Severity::Warn) {
        if let Some(fix) = &f.fix {
            if !actions.contains(fix) {
                actions.push(fix.clone());
            }
        }
    }
    actions
}

/// Analyse the facts: findings (most severe first) and the verdict.
pub fn analyze(facts: Facts, cfg: &AnalysisConfig) -> Report {
    let mut o = Out { findings: Vec::new() };
    let cpu = &facts.cpu;
    for n in &facts.nics {
        nic_findings(&mut o, n, cpu);
    }
    let primary = facts.primary.as_ref().and_then(|p| facts.nics.iter().find(|n| &n.facts.name == p));
    let line = cfg.link_bps.or_else(|| primary.and_then(|n| n.facts.speed_mbps).map(|m| m as f64 * 1e6));

    let measured_rtt = facts.path.as_ref().and_then(|p| p.rtt.as_ref()).map(|r| r.median_us / 1e6);
    let (rtt_s, rtt_source) = match measured_rtt {
        Some(r) if r > 0.0 => (r, "measured"),
        _ => (cfg.rtt_s.max(1e-6), "assumed"),
    };
    let streams = cfg.streams.max(1);
    let tcp = &facts.tcp;
    let window = linerate_model::tcp::usable_window(tcp.tcp_rmem.map(|r| r[2]), tcp.tcp_wmem.map(|w| w[2]));
    let host = Host { facts: &facts, line, rtt_s, window };
    for rule in HOST_RULES {
        rule(&host, &mut o);
    }

    // Limits.
    let mut common = Vec::new();
    if let Some(l) = line {
        common.push(Limit {
            name: "line rate".into(),
            bps: l,
            formula: format!("{} link speed", primary.map(|n| n.facts.name.as_str()).unwrap_or("")),
            ..Limit::default()
        });
    }
    if let Some(p) = primary.and_then(|n| n.facts.pcie.as_ref()) {
        common.push(Limit {
            name: "pcie".into(),
            bps: pcie_ceiling_bps(p.current_gts, p.current_width),
            formula: format!(
                "{} GT/s × {:.4} encoding × x{} × {PCIE_EFFICIENCY} protocol efficiency",
                p.current_gts,
                pcie_lane_gbps(p.current_gts) / p.current_gts,
                p.current_width
            ),
            ..Limit::default()
        });
    }
    // the faster AEAD by its median, over its rounds (its median alone where none were kept)
    let best = facts.aead.as_ref().map(|a| {
        let (name, bps, spread) = a.best();
        (spread.unwrap_or(Spread { median_bps: bps, low_bps: bps, high_bps: bps, rounds: 0 }), name)
    });
    // a peer on this host (loopback, or one of its own addresses) runs both ends on its cores
    let local = facts.path.as_ref().and_then(|p| p.iface.as_deref()) == Some("lo");
    let cores_per_end = if local { (cpu.cores / 2).max(1) } else { cpu.cores.max(1) };
    let crypto_cores = streams.min(cores_per_end);
    let mut single = common.clone();
    let mut multi = common;
    if let Some((a, name)) = best {
        let r = a.median_bps;
        single.push(Limit::measured("crypto", a, format!("{name} {} on one core", format_rate(r))));
        let n = f64::from(crypto_cores);
        multi.push(Limit::measured(
            "crypto",
            a.map(|x| x * n),
            format!("{name} {} per core × {crypto_cores} cores", format_rate(r)),
        ));
    }
    if let (Some((a, name)), Some(c)) = (best, facts.copy.as_ref().filter(|c| c.complete())) {
        let r = a.median_bps;
        // CPU time per bit on the dearer end: seal (or open), its page-cache pass (the
        // receiver's writes into new pages), one TCP stack; a plain copy hashes nothing
        let per_core = |aead: f64, page: f64, tcp: f64| 1.0 / (1.0 / aead + 1.0 / page + 0.5 / tcp);
        let one_core = per_core(r, c.page_bps(), c.tcp_both_ends_bps);
        // the range: every cost at its slowest round, then at its fastest (a rate falls as each
        // of its costs' rates falls); only where every cost has its rounds
        let range = match (a.rounds > 0, c.page_spread(), c.spread.map(|s| s.tcp_both_ends)) {
            (true, Some(p), Some(t)) => Spread {
                median_bps: one_core,
                low_bps: per_core(a.low_bps, p.low_bps, t.low_bps),
                high_bps: per_core(a.high_bps, p.high_bps, t.high_bps),
                rounds: a.rounds.min(p.rounds).min(t.rounds),
            },
            _ => Spread { median_bps: one_core, low_bps: one_core, high_bps: one_core, rounds: 0 },
        };
        let parts = format!(
            "per byte on each end: {name} {}, page cache {}, TCP stack {} = {} per core",
            format_rate(r),
            format_rate(c.page_bps()),
            format_rate(2.0 * c.tcp_both_ends_bps),
            format_rate(one_core)
        );
        // one stream takes one core per end; both ends of a loopback copy share one core on a 1-core host
        let (share, shared) = if local && cpu.cores < 2 { (0.5, "; both ends on this 1-core host") } else { (1.0, "") };
        single.push(Limit::measured("cpu per byte", range.map(|x| x * share), format!("{parts}{shared}")));
        let both = if local { format!(" (both ends on this host: {} cores / 2)", cpu.cores) } else { String::new() };
        let n = f64::from(crypto_cores);
        multi.push(Limit::measured(
            "cpu per byte",
            range.map(|x| x * n),
            format!("{parts} × {crypto_cores} cores{both}"),
        ));
    }
    if let Some(w) = window {
        let one = w * 8.0 / rtt_s;
        let ms = rtt_s * 1e3;
        single.push(Limit {
            name: "tcp buffers".into(),
            bps: one,
            formula: format!("{} usable window / {ms:.3} ms RTT", format_size_iec(w)),
            ..Limit::default()
        });
        multi.push(Limit {
            name: "tcp buffers".into(),
            bps: one * f64::from(streams),
            formula: format!("{} usable window / {ms:.3} ms RTT × {streams} streams", format_size_iec(w)),
            ..Limit::default()
        });
    }
    let probe = facts.path.as_ref().and_then(|p| p.probe.as_ref());
    let estimate = |limits: Vec<Limit>, n: u32, measured: Option<f64>| {
        let min = limits.iter().min_by(|a, b| a.bps.total_cmp(&b.bps));
        // the range of the ceiling: the lowest limit at each end (a limit without a measured
        // range is the same at both); none when no limit has one
        let ranged = limits.iter().any(|l| l.low_bps.is_some());
        let lowest = |end: fn(&Limit) -> Option<f64>| {
            limits.iter().map(|l| end(l).unwrap_or(l.bps)).min_by(f64::total_cmp).filter(|_| ranged)
        };
        Estimate {
            streams: n,
            ceiling_bps: min.map(|m| m.bps),
            limited_by: min.map(|m| m.name.clone()),
            ceiling_low_bps: lowest(|l| l.low_bps),
            ceiling_high_bps: lowest(|l| l.high_bps),
            limits: limits.clone(),
            measured_by: measured.map(|_| PROBE_MEASURES.to_string()),
            measured_bps: measured,
        }
    };
    let single_stream = estimate(single, 1, probe.map(|p| p.single_bps));
    let multi_stream = estimate(multi, probe.map(|p| p.multi_streams).unwrap_or(streams), probe.map(|p| p.multi_bps));
    for (e, what) in [(&single_stream, "single-stream"), (&multi_stream, "multi-stream")] {
        // judged against the ceiling's low end: a probe under half of the slowest rounds'
        if let (Some(m), Some(c)) = (e.measured_bps, e.ceiling_low_bps.or(e.ceiling_bps)) {
            if m < c * 0.5 {
                o.add(
                    "measured-below-ceiling",
                    Severity::Warn,
                    "path",
                    format!(
                        "{what} probe (memory-to-memory TCP, unencrypted) measured {}, under half the expected {}: the limit is elsewhere (peer, path, CPU spent in the stack)",
                        format_rate(m),
                        format_rate(c)
                    ),
                    Some("run `linerate doctor` on the peer too, and `linerate bench` with --json for CPU use".into()),
                );
            }
        }
    }
    let bottleneck = bottleneck(&multi_stream, line, local);
    o.findings.sort_by_key(|f| std::cmp::Reverse(f.severity));
    let actions = actions(&o.findings);
    let verdict = Verdict {
        iface: facts.primary.clone(),
        rtt_s,
        rtt_source: rtt_source.into(),
        single_stream,
        multi_stream,
        bottleneck,
        actions,
    };
    Report { schema: SCHEMA.into(), findings: o.findings, facts, verdict }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::path::{MtuProbe, PmtuFacts};
    use std::fs;
    use std::path::Path;

    /// A fixture sysfs/procfs tree: 8 cores without SMT, cubic, 6 MiB/4 MiB autotuning limits.
    struct Fx {
        dir: tempfile::TempDir,
    }

    impl Fx {
        fn new() -> Fx {
            let fx = Fx { dir: tempfile::tempdir().unwrap() };
            fx.write("sys/devices/system/cpu/online", "0-7\n");
            for c in 0..8 {
                fx.write(&format!("sys/devices/system/cpu/cpu{c}/topology/physical_package_id"), "0\n");
                fx.write(&format!("sys/devices/system/cpu/cpu{c}/topology/core_id"), &format!("{c}\n"));
            }
            fx.write("sys/devices/system/cpu/smt/active", "0\n");
            fx.write("sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", "performance\n");
            fx.write("sys/devices/system/node/online", "0\n");
            fx.write(
                "proc/cpuinfo",
                "processor\t: 0\nmodel name\t: Test CPU\nflags\t\t: fpu sse2 aes pclmulqdq avx2\n",
            );
            fx.write("proc/sys/kernel/osrelease", "6.1.0-test\n");
            fx.write("proc/sys/kernel/hostname", "fixture\n");
            fx.write("proc/sys/net/ipv4/tcp_congestion_control", "cubic\n");
            fx.write("proc/sys/net/ipv4/tcp_available_congestion_control", "reno cubic\n");
            fx.write("proc/sys/net/ipv4/tcp_rmem", "4096\t131072\t6291456\n");
            fx.write("proc/sys/net/ipv4/tcp_wmem", "4096\t16384\t4194304\n");
            fx.write("proc/sys/net/core/rmem_max", "212992\n");
            fx.write("proc/sys/net/core/wmem_max", "212992\n");
            fx.write("proc/interrupts", "           CPU0       CPU1       CPU2\n");
            fx
        }

        fn write(&self, rel: &str, text: &str) {
            let p = self.dir.path().join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, text).unwrap();
        }

        /// A PCIe NIC: `pcie` is (current speed, current width, max speed, max width).
        fn nic(&self, name: &str, mbps: i64, mtu: u32, queues: u32, pcie: Option<(&str, u32, &str, u32)>) {
            let d = format!("sys/class/net/{name}");
            self.write(&format!("{d}/speed"), &format!("{mbps}\n"));
            self.write(&format!("{d}/mtu"), &format!("{mtu}\n"));
            self.write(&format!("{d}/operstate"), "up\n");
            self.write(&format!("{d}/device/numa_node"), "-1\n");
            std::os::unix::fs::symlink(
                "../../../bus/pci/drivers/ixgbe",
                self.dir.path().join(&d).join("device/driver"),
            )
            .unwrap();
            for q in 0..queues {
                self.write(&format!("{d}/queues/rx-{q}/rps_cpus"), "00\n");
                self.write(&format!("{d}/queues/tx-{q}/xps_cpus"), "00\n");
            }
            if let Some((cs, cw, ms, mw)) = pcie {
                self.write(&format!("{d}/device/current_link_speed"), &format!("{cs}\n"));
                self.write(&format!("{d}/device/current_link_width"), &format!("{cw}\n"));
                self.write(&format!("{d}/device/max_link_speed"), &format!("{ms}\n"));
                self.write(&format!("{d}/device/max_link_width"), &format!("{mw}\n"));
            }
        }

        fn roots(&self) -> Roots {
            Roots::under(self.dir.path())
        }

        fn facts(&self, iface: &str) -> Facts {
            let cfg = CollectConfig { iface: Some(iface.into()), ..CollectConfig::default() };
            let mut f = collect(&self.roots(), &cfg, None).unwrap();
            // Fast crypto so that it never is the limit unless a test says so.
            f.aead = Some(AeadRates { aes_256_gcm_bps: 40e9, chacha20_poly1305_bps: 20e9, ..AeadRates::default() });
            f
        }
    }

    fn cfg() -> AnalysisConfig {
        AnalysisConfig::for_cores(8)
    }

    fn ids(r: &Report) -> Vec<&str> {
        r.findings.iter().map(|f| f.id.as_str()).collect()
    }

    fn finding<'a>(r: &'a Report, id: &str) -> &'a Finding {
        r.findings.iter().find(|f| f.id == id).unwrap_or_else(|| panic!("no {id} in {:#?}", r.findings))
    }

    #[test]
    fn pcie_rates_per_generation() {
        assert!((pcie_lane_gbps(2.5) - 2.0).abs() < 1e-9);
        assert!((pcie_lane_gbps(5.0) - 4.0).abs() < 1e-9);
        assert!((pcie_lane_gbps(8.0) - 7.877).abs() < 1e-3);
        assert!((pcie_lane_gbps(16.0) - 15.754).abs() < 1e-3);
        assert!((pcie_lane_gbps(32.0) - 31.508).abs() < 1e-3);
        assert!((pcie_lane_gbps(64.0) - 59.0).abs() < 1e-9);
        assert_eq!((pcie_gen(2.5), pcie_gen(5.0), pcie_gen(8.0), pcie_gen(16.0), pcie_gen(64.0)), (1, 2, 3, 4, 6));
        // gen3 x8 carries 40 GbE with room; gen3 x16 just carries 100 GbE.
        assert!(pcie_ceiling_bps(8.0, 8) > 40e9 && pcie_ceiling_bps(8.0, 16) > 100e9);
    }

    #[test]
    fn x4_slot_under_an_x8_card_caps_a_10g_nic_near_6_gbit() {
        let fx = Fx::new();
        fx.nic("eth0", 10_000, 1500, 8, Some(("2.5 GT/s PCIe", 4, "5.0 GT/s PCIe", 8)));
        let facts = fx.facts("eth0");
        let p = facts.nics[0].facts.pcie.as_ref().unwrap();
        assert_eq!((p.current_gts, p.current_width, p.max_gts, p.max_width), (2.5, 4, 5.0, 8));
        assert_eq!(facts.nics[0].facts.driver.as_deref(), Some("ixgbe"));
        let r = analyze(facts, &cfg());
        let f = finding(&r, "pcie-limits-line-rate");
        assert_eq!(f.severity, Severity::Critical);
        assert!(f.fix.as_deref().unwrap().contains("x8"), "{f:?}");
        assert_eq!(r.findings[0].severity, Severity::Critical);
        // 2.5 GT/s × 0.8 × 4 lanes × 0.8 = 6.4 Gbit/s.
        let c = r.verdict.multi_stream.ceiling_bps.unwrap();
        assert!((c - 6.4e9).abs() < 1e6, "{c}");
        assert_eq!(r.verdict.multi_stream.limited_by.as_deref(), Some("pcie"));
        assert!(r.verdict.bottleneck.contains("PCIe"), "{}", r.verdict.bottleneck);
        assert!(r.verdict.actions[0].contains("slot wired x8"), "{:?}", r.verdict.actions);
    }

    #[test]
    fn a_gen2_x4_link_is_downgraded_but_not_the_limit_of_10g() {
        let fx = Fx::new();
        fx.nic("eth0", 10_000, 1500, 8, Some(("5.0 GT/s PCIe", 4, "5.0 GT/s PCIe", 8)));
        let r = analyze(fx.facts("eth0"), &cfg());
        assert_eq!(finding(&r, "pcie-downgraded").severity, Severity::Info);
        assert!(!ids(&r).contains(&"pcie-limits-line-rate"));
        assert_eq!(r.verdict.multi_stream.limited_by.as_deref(), Some("line rate"));
        assert_eq!(r.verdict.multi_stream.ceiling_bps, Some(10e9));
    }

    #[test]
    fn single_queue_nic_is_named_with_rps_fix() {
        let fx = Fx::new();
        fx.nic("eth0", 10_000, 9000, 1, None);
        let r = analyze(fx.facts("eth0"), &cfg());
        let f = finding(&r, "single-queue");
        assert_eq!(f.severity, Severity::Warn);
        assert!(f.message.starts_with("1 RX / 1 TX"), "{f:?}");
        assert!(f.fix.as_deref().unwrap().contains("ethtool -L eth0 combined 8"));
        let rps = finding(&r, "rps-off");
        assert_eq!(rps.fix.as_deref(), Some("echo ff > /sys/class/net/eth0/queues/rx-0/rps_cpus"));
        // With RPS on, only the queue finding stays.
        fx.write("sys/class/net/eth0/queues/rx-0/rps_cpus", "ff\n");
        let r = analyze(fx.facts("eth0"), &cfg());
        assert!(ids(&r).contains(&"single-queue") && !ids(&r).contains(&"rps-off"), "{:?}", ids(&r));
    }

    #[test]
    fn queue_interrupts_all_on_one_cpu_are_reported() {
        let fx = Fx::new();
        fx.nic("eth0", 25_000, 9000, 2, None);
        fx.write(
            "proc/interrupts",
            "           CPU0       CPU1       CPU2\n\
             40:        100          0          0   PCI-MSI 1-edge      eth0-TxRx-0\n\
             41:        200          0          0   PCI-MSI 2-edge      eth0-TxRx-1\n",
        );
        fx.write("proc/irq/40/smp_affinity_list", "0\n");
        fx.write("proc/irq/41/smp_affinity_list", "0\n");
        let facts = fx.facts("eth0");
        assert_eq!(facts.nics[0].facts.irqs.len(), 2);
        let r = analyze(facts, &cfg());
        assert!(finding(&r, "irqs-on-one-cpu").message.contains("CPU 0"));
        fx.write("proc/irq/41/smp_affinity_list", "1-2\n");
        fx.write(
            "proc/interrupts",
            "           CPU0       CPU1       CPU2\n\
             40:        100          0          0   PCI-MSI 1-edge      eth0-TxRx-0\n\
             41:          0        200          7   PCI-MSI 2-edge      eth0-TxRx-1\n",
        );
        assert!(!ids(&analyze(fx.facts("eth0"), &cfg())).contains(&"irqs-on-one-cpu"));
    }

    #[test]
    fn path_mtu_below_the_local_mtu_is_a_mismatch() {
        let fx = Fx::new();
        fx.nic("eth1", 10_000, 9000, 8, None);
        let mut facts = fx.facts("eth1");
        let pmtu = |route_mtu| PmtuFacts {
            route_mtu,
            path_mtu: Some(1500),
            probes: vec![MtuProbe { size: 9000, answered: false }, MtuProbe { size: 1500, answered: true }],
        };
        facts.path = Some(PathReport {
            peer: "198.18.0.2:7878".into(),
            iface: Some("eth1".into()),
            pmtu: Some(pmtu(9000)),
            ..PathReport::default()
        });
        let r = analyze(facts.clone(), &cfg());
        let f = finding(&r, "path-mtu-mismatch");
        assert_eq!(f.severity, Severity::Critical);
        assert!(f.message.contains("is 1500 but eth1 has MTU 9000"), "{f:?}");
        assert!(f.fix.as_deref().unwrap().starts_with("ip link set dev eth1 mtu 1500"));
        // Once the kernel has learned the smaller MTU it is no black hole any more.
        facts.path.as_mut().unwrap().pmtu = Some(pmtu(1500));
        assert_eq!(finding(&analyze(facts.clone(), &cfg()), "path-mtu-mismatch").severity, Severity::Warn);
        // Same MTU end to end: nothing to say.
        facts.path.as_mut().unwrap().pmtu = Some(PmtuFacts {
            route_mtu: 9000,
            path_mtu: Some(9000),
            probes: vec![MtuProbe { size: 9000, answered: true }],
        });
        assert!(!ids(&analyze(facts, &cfg())).iter().any(|i| i.starts_with("path-mtu")));
    }

    #[test]
    fn small_buffers_for_the_bdp_limit_one_stream() {
        let fx = Fx::new();
        fx.nic("eth0", 10_000, 9000, 8, None);
        fx.write("proc/sys/net/ipv4/tcp_rmem", "4096 87380 212992\n");
        fx.write("proc/sys/net/ipv4/tcp_wmem", "4096 16384 212992\n");
        let r = analyze(fx.facts("eth0"), &AnalysisConfig { rtt_s: 0.001, streams: 8, link_bps: None });
        let f = finding(&r, "tcp-buffers-below-bdp");
        assert_eq!(f.severity, Severity::Critical);
        assert!(f.fix.as_deref().unwrap().contains("net.ipv4.tcp_rmem=\"4096 131072 4194304\""), "{f:?}");
        // 212992 B × 0.66 (the receiver's share, smaller than the sender's 0.85) × 8 / 1 ms =
        // 1.12 Gbit/s per stream; 8 streams reach 9 Gbit/s.
        assert_eq!(r.verdict.single_stream.limited_by.as_deref(), Some("tcp buffers"));
        let s = r.verdict.single_stream.ceiling_bps.unwrap();
        assert!((s - 212_992.0 * 0.66 * 8.0 / 0.001).abs() < 1.0, "{s}");
        assert!((r.verdict.multi_stream.ceiling_bps.unwrap() - 8.0 * s).abs() < 1.0);
        assert_eq!(r.verdict.rtt_source, "assumed");
        // Default Debian limits (6 MiB / 4 MiB) are enough at 1 ms, not at 20 ms.
        let fx = Fx::new();
        fx.nic("eth0", 10_000, 9000, 8, None);
        assert!(!ids(&analyze(fx.facts("eth0"), &cfg())).contains(&"tcp-buffers-below-bdp"));
        let r = analyze(fx.facts("eth0"), &AnalysisConfig { rtt_s: 0.02, streams: 8, link_bps: None });
        assert!(ids(&r).contains(&"tcp-buffers-below-bdp"));
        assert!(ids(&r).contains(&"congestion-control-long-rtt"));
        // a link whose speed the kernel does not report (-1: a VM, a TAP): no line rate to hold
        // the buffers against, unless the user gives one (--link-rate)
        let fx = Fx::new();
        fx.nic("eth0", -1, 1500, 8, None);
        let slow = AnalysisConfig { rtt_s: 0.1, streams: 1, link_bps: None };
        assert!(!ids(&analyze(fx.facts("eth0"), &slow)).contains(&"tcp-buffers-below-bdp"));
        let given = AnalysisConfig { link_bps: Some(1e9), ..slow };
        assert!(ids(&analyze(fx.facts("eth0"), &given)).contains(&"tcp-buffers-below-bdp"));
    }

    /// Issue 33: on a virtio NIC the local check said "check the cable".
    #[test]
    fn a_virtio_nic_is_virtual_and_has_no_cable_to_check() {
        let fx = Fx::new();
        let d = "sys/class/net/eth0";
        for (f, v) in [("speed", "-1"), ("mtu", "1500"), ("operstate", "up"), ("device/numa_node", "-1")] {
            fx.write(&format!("{d}/{f}"), &format!("{v}\n"));
        }
        fx.write(&format!("{d}/queues/rx-0/rps_cpus"), "00\n");
        fx.write(&format!("{d}/queues/tx-0/xps_cpus"), "00\n");
        std::os::unix::fs::symlink(
            "../../../bus/virtio/drivers/virtio_net",
            fx.dir.path().join(d).join("device/driver"),
        )
        .unwrap();
        let facts = fx.facts("eth0");
        assert!(facts.nics[0].facts.is_virtual());
        let r = analyze(facts, &cfg());
        let f = finding(&r, "link-speed-virtual");
        assert!(f.message.contains("virtual NIC (virtio_net)") && f.fix.is_none(), "{f:?}");
        assert!(!ids(&r).contains(&"link-speed-unknown"));
        assert!(r.findings.iter().all(|f| !format!("{f:?}").contains("cable")), "{:#?}", r.findings);
        // a physical NIC that reports no speed still gets the cable check
        fx.nic("eth1", -1, 1500, 8, None);
        let r = analyze(fx.facts("eth1"), &cfg());
        assert!(finding(&r, "link-speed-unknown").fix.as_deref().unwrap().contains("check the cable"));
    }

    /// Issue 33: a loopback peer went "via eth0" with `ethtool -L eth0` advice, and the ceiling
    /// was encryption alone (173 Gbit/s predicted, 47 measured).
    #[test]
    fn a_loopback_peer_is_lo_without_nic_advice_and_its_ceiling_is_the_cpu_per_byte() {
        let fx = Fx::new();
        fx.nic("eth0", 10_000, 1500, 1, None); // one queue: would get `ethtool -L eth0`
        fx.write("sys/class/net/lo/mtu", "65536\n");
        fx.write(
            "proc/net/route",
            "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
             eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n",
        );
        let c = CollectConfig { peer: Some("127.0.0.1:7878".into()), ..CollectConfig::default() };
        let mut facts = collect(&fx.roots(), &c, None).unwrap();
        assert_eq!(facts.path.as_ref().unwrap().iface.as_deref(), Some("lo"));
        assert_eq!(facts.primary.as_deref(), Some("lo"));
        assert_eq!(facts.nics.iter().map(|n| n.facts.name.as_str()).collect::<Vec<_>>(), ["lo"]);
        facts.aead = Some(AeadRates { aes_256_gcm_bps: 32e9, chacha20_poly1305_bps: 16e9, ..AeadRates::default() });
        facts.copy = Some(CopyCost {
            blake3_bps: 8e9,
            page_read_bps: 64e9,
            page_write_bps: 32e9,
            tcp_both_ends_bps: 16e9,
            spread: None,
        });
        let r = analyze(facts, &cfg());
        assert!(r.findings.iter().all(|f| !format!("{f:?}").contains("eth0")), "{:#?}", r.findings);
        // per bit on the dearer end: 1/32 (AEAD) + 1/32 (the receiver's page-cache writes, not
        // the sender's reads at 64) + 0.5/16 (TCP) = 3/32 ns, 10.7 Gbit/s per core (BLAKE3, slow
        // here, is not counted: a plain copy hashes nothing); 8 cores hold both ends: 4 per end,
        // 42.7 Gbit/s, where encryption alone would say 4 × 32 = 128
        let (one, m) = (32e9 / 3.0, &r.verdict.multi_stream);
        assert_eq!(m.limited_by.as_deref(), Some("cpu per byte"));
        assert!((m.ceiling_bps.unwrap() - 4.0 * one).abs() < 1.0, "{m:?}");
        let crypto = m.limits.iter().find(|l| l.name == "crypto").unwrap();
        assert_eq!(crypto.bps, 128e9);
        let s = &r.verdict.single_stream;
        assert!((s.ceiling_bps.unwrap() - one).abs() < 1.0, "{s:?}");
        assert!(m.limits.iter().any(|l| l.formula.contains("both ends on this host: 8 cores / 2")), "{m:?}");
        assert!(r.verdict.bottleneck.starts_with("the CPU: encryption, page-cache copies"), "{}", r.verdict.bottleneck);
        assert!(r.verdict.bottleneck.contains("the peer is on this host"), "{}", r.verdict.bottleneck);
    }

    #[test]
    fn slow_crypto_is_the_bottleneck_and_probes_are_compared() {
        let fx = Fx::new();
        fx.nic("eth0", 100_000, 9000, 8, Some(("16.0 GT/s PCIe", 16, "16.0 GT/s PCIe", 16)));
        fx.write("sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", "powersave\n");
        fx.write("proc/sys/net/ipv4/tcp_rmem", "4096 131072 268435456\n");
        fx.write("proc/sys/net/ipv4/tcp_wmem", "4096 16384 268435456\n");
        let mut facts = fx.facts("eth0");
        facts.aead = Some(AeadRates { aes_256_gcm_bps: 5e9, chacha20_poly1305_bps: 2e9, ..AeadRates::default() });
        facts.path = Some(PathReport {
            peer: "198.18.0.2:7878".into(),
            probe: Some(ProbeResults { single_bps: 1e9, multi_bps: 30e9, multi_streams: 8 }),
            ..PathReport::default()
        });
        let r = analyze(facts, &cfg());
        assert_eq!(finding(&r, "crypto-bound").severity, Severity::Critical);
        assert_eq!(finding(&r, "cpu-governor").severity, Severity::Warn);
        assert_eq!(r.verdict.single_stream.ceiling_bps, Some(5e9));
        assert_eq!(r.verdict.multi_stream.ceiling_bps, Some(40e9));
        assert_eq!(r.verdict.multi_stream.limited_by.as_deref(), Some("crypto"));
        assert_eq!(r.verdict.single_stream.measured_bps, Some(1e9));
        let m = finding(&r, "measured-below-ceiling");
        assert!(
            m.message.starts_with("single-stream probe (memory-to-memory TCP, unencrypted) measured 1 Gbit/s"),
            "{m:?}"
        );
        assert_eq!(r.verdict.single_stream.measured_by.as_deref(), Some(PROBE_MEASURES));
    }

    /// Issue 43: the ceiling moved 18.6 → 5.4 Gbit/s between two runs of one 75 ms test; now
    /// each figure is a spread of rounds and the ceiling a range.
    #[test]
    fn the_ceiling_is_a_range_from_the_slowest_and_fastest_rounds() {
        use crate::host::copycost::CopyCostSpread;
        let fx = Fx::new();
        fx.nic("eth0", 100_000, 9000, 8, None);
        fx.write("proc/sys/net/ipv4/tcp_rmem", "4096 131072 268435456\n");
        fx.write("proc/sys/net/ipv4/tcp_wmem", "4096 16384 268435456\n");
        let mut facts = fx.facts("eth0");
        let s =
            |low: f64, median: f64, high: f64| Spread { median_bps: median, low_bps: low, high_bps: high, rounds: 5 };
        facts.aead = Some(AeadRates {
            aes_256_gcm_bps: 32e9,
            chacha20_poly1305_bps: 16e9,
            aes_256_gcm: Some(s(16e9, 32e9, 64e9)),
            chacha20_poly1305: Some(s(16e9, 16e9, 16e9)),
        });
        let page = s(16e9, 32e9, 64e9);
        facts.copy = Some(CopyCost {
            blake3_bps: 8e9,
            page_read_bps: 64e9,
            page_write_bps: 32e9,
            tcp_both_ends_bps: 16e9,
            spread: Some(CopyCostSpread {
                blake3: s(8e9, 8e9, 8e9),
                page_read: s(64e9, 64e9, 64e9),
                page_write: page,
                tcp_both_ends: s(8e9, 16e9, 32e9),
            }),
        });
        let r = analyze(facts, &cfg());
        // per core: median 1/(1/32 + 1/32 + 0.5/16) = 32/3; every cost at half (low) and at
        // double (high): 16/3 and 64/3 Gbit/s
        let e = &r.verdict.single_stream;
        assert_eq!(e.limited_by.as_deref(), Some("cpu per byte"));
        let near = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1.0);
        assert!(near(e.ceiling_bps, 32e9 / 3.0), "{e:?}");
        assert!(near(e.ceiling_low_bps, 16e9 / 3.0) && near(e.ceiling_high_bps, 64e9 / 3.0), "{e:?}");
        let crypto = e.limits.iter().find(|l| l.name == "crypto").unwrap();
        assert_eq!((crypto.low_bps, crypto.bps, crypto.high_bps), (Some(16e9), 32e9, Some(64e9)));
        // 8 streams on 8 cores: eight times the range, 42.7 to 170.7 Gbit/s, but a limit
        // without a range caps both ends: the 100 Gbit/s line rate is the high end
        let m = &r.verdict.multi_stream;
        assert!(near(m.ceiling_bps, 8.0 * 32e9 / 3.0), "{m:?}");
        assert!(near(m.ceiling_low_bps, 8.0 * 16e9 / 3.0) && near(m.ceiling_high_bps, 100e9), "{m:?}");
        assert_eq!(m.limits.iter().find(|l| l.name == "line rate").unwrap().low_bps, None);
        // without the rounds (an older report): no range
        let mut f = fx.facts("eth0");
        f.aead = Some(AeadRates { aes_256_gcm_bps: 32e9, chacha20_poly1305_bps: 16e9, ..AeadRates::default() });
        let e = analyze(f, &cfg()).verdict.single_stream;
        assert_eq!((e.ceiling_low_bps, e.ceiling_high_bps), (None, None), "{e:?}");
    }

    /// Issue 43: a TAP's nominal 10 Mbit/s (and a veth's 10 Gbit/s) is no line rate.
    #[test]
    fn a_virtual_interface_s_nominal_speed_is_no_line_rate() {
        let fx = Fx::new();
        for (name, mbps) in [("tap0", "10"), ("veth0", "10000")] {
            let d = format!("sys/class/net/{name}");
            for (f, v) in [("speed", mbps), ("mtu", "1500"), ("operstate", "up")] {
                fx.write(&format!("{d}/{f}"), &format!("{v}\n"));
            }
            fx.write(&format!("{d}/uevent"), &format!("INTERFACE={name}\nIFINDEX=7\n"));
            let f = fx.facts(name);
            let n = &f.nics[0].facts;
            assert_eq!((n.speed_mbps, n.nominal_speed_mbps), (None, Some(mbps.parse().unwrap())), "{n:?}");
            let r = analyze(f, &cfg());
            let e = &r.verdict.single_stream;
            assert!(e.limits.iter().all(|l| l.name != "line rate"), "{e:?}");
            assert!(r.findings.iter().all(|f| !f.message.contains("Mbit/s link")), "{:#?}", r.findings);
        }
        // a bond or a VLAN carries its members' speed: that one is real
        let d = "sys/class/net/bond0";
        for (f, v) in
            [("speed", "20000"), ("mtu", "9000"), ("operstate", "up"), ("uevent", "DEVTYPE=bond\nINTERFACE=bond0")]
        {
            fx.write(&format!("{d}/{f}"), &format!("{v}\n"));
        }
        let f = fx.facts("bond0");
        assert_eq!(f.nics[0].facts.speed_mbps, Some(20_000));
        let r = analyze(f, &cfg());
        assert!(r.verdict.single_stream.limits.iter().any(|l| l.name == "line rate" && l.bps == 20e9));
    }

    #[test]
    fn missing_aes_ni_is_reported_only_when_the_flags_are_known() {
        let fx = Fx::new();
        fx.nic("eth0", 10_000, 9000, 8, None);
        assert!(!ids(&analyze(fx.facts("eth0"), &cfg())).contains(&"no-aes-ni"));
        fx.write("proc/cpuinfo", "processor\t: 0\nflags\t\t: fpu sse2 avx2\n");
        let f = fx.facts("eth0");
        assert!(f.cpu.flags.known && !f.cpu.flags.aes && f.cpu.flags.avx2);
        assert_eq!(finding(&analyze(f, &cfg()), "no-aes-ni").severity, Severity::Warn);
        fx.write("proc/cpuinfo", "");
        assert!(!ids(&analyze(fx.facts("eth0"), &cfg())).contains(&"no-aes-ni"));
    }

    #[test]
    fn report_json_is_versioned_and_round_trips() {
        let fx = Fx::new();
        fx.nic("eth0", 10_000, 1500, 1, Some(("2.5 GT/s PCIe", 4, "5.0 GT/s PCIe", 8)));
        let r = analyze(fx.facts("eth0"), &cfg());
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["schema"], "linerate.doctor/1");
        assert_eq!(j["facts"]["nics"][0]["name"], "eth0");
        assert_eq!(j["facts"]["nics"][0]["pcie"]["max_width"], 8);
        assert_eq!(j["findings"][0]["severity"], "critical");
        assert!(j["verdict"]["multi_stream"]["ceiling_bps"].as_f64().is_some());
        let back: Report = serde_json::from_value(j).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn unknown_interface_is_an_error_naming_the_present_ones() {
        let fx = Fx::new();
        fx.nic("eth0", 1000, 1500, 1, None);
        let cfg = CollectConfig { iface: Some("eth9".into()), ..CollectConfig::default() };
        let e = collect(&fx.roots(), &cfg, None).unwrap_err().to_string();
        assert!(e.contains("eth9") && e.contains("eth0"), "{e}");
        assert!(Path::new(&fx.roots().sys).is_dir());
    }
}
