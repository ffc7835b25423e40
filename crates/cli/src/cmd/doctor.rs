//! `linerate doctor`: inspect this host (and the path to a peer) and say what limits transfer
//! speed, before any benchmark. Collection and analysis live in `linerate_engine::host` and
//! `linerate_engine::doctor`; this file parses flags and prints the report.

use crate::error::{Result, ResultExt};
use anyhow::Context as _;
use clap::Args;
use linerate_doctor::host::Roots;
use linerate_doctor::{self as doctor, AnalysisConfig, CollectConfig, Estimate, Report, Severity};
use linerate_model::units::{format_rate, format_size_iec};
use std::fmt::Write as _;
use std::time::Duration;

const DOCTOR_AFTER_HELP: &str = "\
CHECKS:
  per interface: link speed, MTU, driver, PCIe link vs the card's maximum and its ceiling,
  queues, interrupt spread, RPS, offloads (ethtool netlink), qdisc, NUMA node;
  host: cores, SMT, NUMA, governor, AES-NI/VAES/AVX2/PCLMULQDQ, AEAD speed per core (0.3 s),
  congestion control, tcp_rmem/tcp_wmem/rmem_max/wmem_max against the bandwidth-delay product;
  with --peer: RTT (TCP connect to the serve port) and path MTU (ICMP echo, Don't Fragment;
  needs root or ping sockets). See docs/USER_GUIDE.md for the formulas.

EXIT STATUS:
  0  the report was produced (whatever it found; read the findings or the JSON)
  2  bad usage: unknown --iface, malformed --rtt
";

/// Flags of `linerate doctor`.
#[derive(Args, Debug)]
#[command(after_help = DOCTOR_AFTER_HELP)]
pub struct DoctorArgs {
    /// Inspect only this interface [default: all but loopback; the verdict is for the one
    /// routing to --peer, else the default route's].
    #[arg(long, value_name = "IF")]
    iface: Option<String>,
    /// Include the loopback interface.
    #[arg(long)]
    include_lo: bool,
    /// A running `linerate serve` to check the path to: RTT, path MTU.
    #[arg(long, value_name = "HOST[:PORT]")]
    peer: Option<String>,
    /// Round-trip time for the buffer check when no peer is measured (e.g. 1ms, 250us, 0.04s).
    #[arg(long, default_value = "1ms", value_parser = parse_rtt)]
    rtt: Duration,
    /// Streams of the multi-stream estimate [default: the number of cores, 2 to 8, as cp].
    #[arg(long, short = 'P')]
    streams: Option<u32>,
    /// Key file of the --peer agent: with it, doctor measures single- and multi-stream rates
    /// with a 2 s `linerate bench` tcp-stream test each.
    #[arg(long, value_name = "FILE", conflicts_with = "identity")]
    key_file: Option<std::path::PathBuf>,
    /// ed25519 identity for a --peer in daemon mode (`serve --authorized-keys`): with it, doctor
    /// measures the rates as with --key-file.
    #[arg(long, value_name = "FILE")]
    identity: Option<std::path::PathBuf>,
    /// Skip the 0.3 s AEAD measurement (the crypto limit is then left out).
    #[arg(long)]
    no_crypto_bench: bool,
    /// Print one JSON document (schema "linerate.doctor/1") instead of the text report.
    #[arg(long)]
    json: bool,
}

/// Parse `1ms`, `250us`, `0.04s`, `2` (milliseconds).
fn parse_rtt(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else {
        (t, 1e-3)
    };
    let v: f64 = num.trim().parse().map_err(|_| format!("'{s}' is not a duration (try 1ms, 250us, 0.04s)"))?;
    let secs = v * scale;
    if !(1e-6..=60.0).contains(&secs) {
        return Err(format!("'{s}': the RTT must be between 1us and 60s"));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn esc(s: &str) -> String {
    linerate_proto::name::escape(s.as_bytes())
}

/// Measures the rate to the peer with a `linerate bench` tcp-stream test.
struct BenchProbe {
    key: linerate_engine::auth::secret::Secret,
    key_auth: Option<linerate_engine::auth::keys::KeyClient>,
}

impl doctor::RateProbe for BenchProbe {
    fn probe(&self, peer: &str, streams: u32, secs: f64) -> Result<f64, String> {
        use linerate_engine::bench::{BenchClient, BenchClientConfig};
        use linerate_proto::bench::{TestKind, TestSpec};
        use std::net::ToSocketAddrs;
        let addr = peer.to_socket_addrs().map_err(|e| format!("{peer}: {e}"))?.next().ok_or("no address")?;
        let cfg = BenchClientConfig {
            addr,
            secret: self.key.clone(),
            key_auth: self.key_auth.clone(),
            suite: linerate_engine::net::conn::preferred_suite(),
            timeout: Duration::from_secs(10),
            tuning: Default::default(),
        };
        let mut spec = TestSpec::new(TestKind::TcpStream);
        spec.connections = streams.max(1);
        spec.duration_ms = (secs * 1000.0) as u64;
        spec.omit_ms = 200;
        let r = BenchClient::connect(cfg).and_then(|mut c| c.run(&spec, &mut |_| {})).map_err(|e| e.to_string())?;
        Ok(r.summary(None).throughput_bps)
    }
}

/// The rate probe, when --key-file or --identity is given (and there is a --peer).
fn probe_for(a: &DoctorArgs) -> anyhow::Result<Option<BenchProbe>> {
    let (Some(peer), true) = (&a.peer, a.key_file.is_some() || a.identity.is_some()) else {
        return Ok(None);
    };
    let keys = crate::keys::ClientKeyArgs {
        key_file: a.key_file.clone(),
        identity: a.identity.clone(),
        strict_host_key: false,
    };
    let port = crate::cmd::bench::resolve(peer)?.port();
    let (key, key_auth) = keys.resolve(crate::cmd::bench::host_of(peer), port, "the rate probe")?;
    Ok(Some(BenchProbe { key, key_auth }))
}

/// Run `linerate doctor`: 0 whenever the report was produced, 2 bad usage.
pub fn run_doctor(a: DoctorArgs) -> Result {
    let cores = linerate_doctor::host::cpu::CpuFacts::read(&Roots::default()).cores;
    let ccfg = CollectConfig {
        iface: a.iface.clone(),
        include_lo: a.include_lo,
        peer: a.peer.clone(),
        live: true,
        aead_budget: (!a.no_crypto_bench).then(|| Duration::from_millis(300)),
        probe_streams: a.streams.unwrap_or(cores.clamp(2, 8)),
        probe_secs: 2.0,
    };
    // The rate probe is a short `linerate bench` against the peer; it needs the peer's key.
    let probe = probe_for(&a).usage()?;
    let facts =
        doctor::collect(&Roots::default(), &ccfg, probe.as_ref().map(|p| p as &dyn doctor::RateProbe)).usage()?;
    let mut acfg = AnalysisConfig::for_cores(facts.cpu.cores);
    acfg.rtt_s = a.rtt.as_secs_f64();
    if let Some(s) = a.streams {
        acfg.streams = s.clamp(1, 4096);
    }
    let report = doctor::analyze(facts, &acfg);
    if a.json {
        let j = serde_json::to_string_pretty(&report).context("cannot encode the report").internal()?;
        out(&format!("{j}\n"));
    } else {
        out(&human(&report));
    }
    Ok(())
}

/// Write to stdout; a closed pipe (`| head`) is not an error worth a panic.
fn out(text: &str) {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(text.as_bytes()).and_then(|()| o.flush());
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn cpus(v: &[u32]) -> String {
    if v.is_empty() {
        return "-".into();
    }
    let mut out = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push(if j > i { format!("{}-{}", v[i], v[j]) } else { v[i].to_string() });
        i = j + 1;
    }
    out.join(",")
}

fn estimate(out: &mut String, label: &str, e: &Estimate) {
    let ceiling = e.ceiling_bps.map(format_rate).unwrap_or_else(|| "unknown".into());
    let by = e.limited_by.as_deref().map(|b| format!(", limited by {b}")).unwrap_or_default();
    let _ = writeln!(out, "  {label:<22} {ceiling}{by}");
    for l in &e.limits {
        let _ = writeln!(out, "    {:<12} {:>14}   {}", l.name, format_rate(l.bps), esc(&l.formula));
    }
    if let Some(m) = e.measured_bps {
        let _ = writeln!(out, "    {:<12} {:>14}", "measured", format_rate(m));
    }
}

/// The text report.
pub fn human(r: &Report) -> String {
    let f = &r.facts;
    let c = &f.cpu;
    let mut o = String::new();
    let _ = writeln!(o, "linerate doctor: host {} (Linux {})", esc(&f.hostname), esc(&f.kernel));
    let _ = writeln!(
        o,
        "CPU   {} · {} cores, {} logical CPUs, SMT {} · {} NUMA node(s) · governor {}",
        if c.model.is_empty() { "unknown model".to_string() } else { esc(&c.model) },
        c.cores,
        c.logical_cpus,
        c.smt_active.map(|s| if s { "on" } else { "off" }).unwrap_or("unknown"),
        c.numa_nodes,
        c.governor.as_deref().map(esc).unwrap_or_else(|| "none".into())
    );
    let _ = writeln!(
        o,
        "      AES-NI {} · VAES {} · AVX2 {} · PCLMULQDQ {}",
        yes(c.flags.aes),
        yes(c.flags.vaes),
        yes(c.flags.avx2),
        yes(c.flags.pclmulqdq)
    );
    if let Some(a) = &f.aead {
        let _ = writeln!(
            o,
            "AEAD  per core: AES-256-GCM {} · ChaCha20-Poly1305 {}",
            format_rate(a.aes_256_gcm_bps),
            format_rate(a.chacha20_poly1305_bps)
        );
    }
    let t = &f.tcp;
    let iec = |b: u64| format_size_iec(b as f64);
    let _ = writeln!(
        o,
        "TCP   {} (available: {}) · tcp_rmem max {} · tcp_wmem max {} · rmem_max {} · wmem_max {}",
        t.congestion_control.as_deref().map(esc).unwrap_or_else(|| "?".into()),
        esc(&t.available_congestion_control.join(" ")),
        t.tcp_rmem.map(|v| iec(v[2])).unwrap_or_else(|| "?".into()),
        t.tcp_wmem.map(|v| iec(v[2])).unwrap_or_else(|| "?".into()),
        t.rmem_max.map(iec).unwrap_or_else(|| "?".into()),
        t.wmem_max.map(iec).unwrap_or_else(|| "?".into()),
    );
    let _ = writeln!(o, "\nInterfaces");
    let _ = writeln!(
        o,
        "  {:<12} {:>11} {:>6}  {:<10} {:<19} {:>7}  {:<9} {:<9} {:<5} OFFLOADS",
        "IF", "SPEED", "MTU", "DRIVER", "PCIe NOW / MAX", "QUEUES", "IRQ CPUs", "QDISC", "NUMA"
    );
    for n in &f.nics {
        let x = &n.facts;
        let pcie = x
            .pcie
            .as_ref()
            .map(|p| {
                format!(
                    "gen{} x{} / gen{} x{}",
                    doctor::pcie_gen(p.current_gts),
                    p.current_width,
                    doctor::pcie_gen(p.max_gts),
                    p.max_width
                )
            })
            .unwrap_or_else(|| "-".into());
        let mut irq_cpus: Vec<u32> = x.irqs.iter().flat_map(|i| i.cpus_hit.iter().copied()).collect();
        irq_cpus.sort_unstable();
        irq_cpus.dedup();
        let off = n
            .offloads
            .as_ref()
            .map(|f| {
                [
                    ("tso", f.tso),
                    ("gso", f.gso),
                    ("gro", f.gro),
                    ("lro", f.lro),
                    ("rxcsum", f.rx_checksum),
                    ("txcsum", f.tx_checksum),
                ]
                .iter()
                .filter_map(|(k, v)| v.map(|on| if on { k.to_string() } else { format!("-{k}") }))
                .collect::<Vec<_>>()
                .join(" ")
            })
            .unwrap_or_else(|| "?".into());
        let primary = if f.primary.as_deref() == Some(x.name.as_str()) { "*" } else { " " };
        let _ = writeln!(
            o,
            " {primary}{:<12} {:>11} {:>6}  {:<10} {:<19} {:>7}  {:<9} {:<9} {:<5} {}",
            esc(&x.name),
            x.speed_mbps.map(|m| format_rate(m as f64 * 1e6)).unwrap_or_else(|| "-".into()),
            x.mtu.map(|m| m.to_string()).unwrap_or_else(|| "?".into()),
            x.driver.as_deref().map(esc).unwrap_or_else(|| "(virtual)".into()),
            pcie,
            format!("{}/{}", x.rx_queues, x.tx_queues),
            cpus(&irq_cpus),
            n.qdisc.as_ref().and_then(|q| q.root.as_ref()).map(|q| esc(&q.kind)).unwrap_or_else(|| "?".into()),
            x.numa_node.map(|v| v.to_string()).unwrap_or_else(|| "-".into()),
            off
        );
    }
    if let Some(p) = &f.path {
        let _ =
            writeln!(o, "\nPath to {} via {}", esc(&p.peer), p.iface.as_deref().map(esc).unwrap_or_else(|| "?".into()));
        match (&p.rtt, &p.rtt_error) {
            (Some(r), _) => {
                let _ = writeln!(
                    o,
                    "  RTT       {:.3} ms (median of {} TCP connects)",
                    r.median_us / 1e3,
                    r.samples_us.len()
                );
            }
            (None, Some(e)) => {
                let _ = writeln!(o, "  RTT       not measured: {}", esc(e));
            }
            _ => {}
        }
        match (&p.pmtu, &p.pmtu_error) {
            (Some(m), _) => {
                let _ = writeln!(
                    o,
                    "  path MTU  {} (route MTU {}; {} probes)",
                    m.path_mtu.map(|v| v.to_string()).unwrap_or_else(|| "unknown: no probe answered".into()),
                    m.route_mtu,
                    m.probes.len()
                );
            }
            (None, Some(e)) => {
                let _ = writeln!(o, "  path MTU  not probed: {}", esc(e));
            }
            _ => {}
        }
        if let Some(e) = &p.probe_error {
            let _ = writeln!(o, "  rate      not probed: {}", esc(e));
        }
    }
    let _ = writeln!(o, "\nFindings");
    if r.findings.is_empty() {
        let _ = writeln!(o, "  none");
    }
    for x in &r.findings {
        let sev = match x.severity {
            Severity::Critical => "CRITICAL",
            Severity::Warn => "warn",
            Severity::Info => "info",
        };
        let _ = writeln!(o, "  {sev:<8} {:<6} {}", esc(&x.subject), esc(&x.message));
        if let Some(fix) = &x.fix {
            let _ = writeln!(o, "  {:<8} {:<6} fix: {}", "", "", esc(fix));
        }
    }
    let v = &r.verdict;
    let _ = writeln!(
        o,
        "\nVerdict for {} (RTT {:.3} ms, {})",
        v.iface.as_deref().map(esc).unwrap_or_else(|| "no interface".into()),
        v.rtt_s * 1e3,
        v.rtt_source
    );
    estimate(&mut o, "single stream:", &v.single_stream);
    estimate(&mut o, &format!("{} streams:", v.multi_stream.streams), &v.multi_stream);
    let _ = writeln!(o, "  first bottleneck: {}", esc(&v.bottleneck));
    if !v.actions.is_empty() {
        let _ = writeln!(o, "  what to change, most severe first:");
        for (i, a) in v.actions.iter().enumerate() {
            let _ = writeln!(o, "    {}. {}", i + 1, esc(a));
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rtts() {
        assert_eq!(parse_rtt("1ms").unwrap(), Duration::from_millis(1));
        assert_eq!(parse_rtt("250us").unwrap(), Duration::from_micros(250));
        assert_eq!(parse_rtt("0.04s").unwrap(), Duration::from_millis(40));
        assert_eq!(parse_rtt("20").unwrap(), Duration::from_millis(20));
        assert!(parse_rtt("fast").is_err());
        assert!(parse_rtt("0ms").is_err());
        assert!(parse_rtt("2h").is_err());
    }

    #[test]
    fn text_report_shows_the_critical_finding_its_fix_and_the_verdict() {
        use linerate_doctor::host::nic::{NicFacts, PcieLink};
        use linerate_doctor::{Facts, NicReport};
        let nic = NicFacts {
            name: "eth\x1b0".into(),
            mtu: Some(1500),
            speed_mbps: Some(10_000),
            driver: Some("ixgbe".into()),
            pcie: Some(PcieLink { current_gts: 2.5, current_width: 4, max_gts: 5.0, max_width: 8 }),
            rx_queues: 4,
            tx_queues: 4,
            ..NicFacts::default()
        };
        let facts = Facts {
            nics: vec![NicReport { facts: nic, ..NicReport::default() }],
            primary: Some("eth\x1b0".into()),
            ..Facts::default()
        };
        let text = human(&doctor::analyze(facts, &AnalysisConfig::for_cores(4)));
        assert!(!text.contains('\x1b'), "control characters must be escaped:\n{text}");
        let crit = text.lines().find(|l| l.trim_start().starts_with("CRITICAL")).unwrap_or_else(|| panic!("{text}"));
        assert!(crit.contains("PCIe gen1 x4 negotiated, card can do gen2 x8: ceiling 6.4 Gbit/s"), "{crit}");
        assert!(text.contains("fix: move the card to a slot wired x8"), "{text}");
        assert!(text.contains("first bottleneck: the PCIe slot, at 6.4 Gbit/s"), "{text}");
        assert!(text.contains("gen1 x4 / gen2 x8"), "{text}");
    }

    #[test]
    fn cpu_ranges_are_compact() {
        assert_eq!(cpus(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
        assert_eq!(cpus(&[]), "-");
    }
}
