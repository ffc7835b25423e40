//! The text report of `linerate doctor`, rendered from the [`Report`] this crate owns (the CLI
//! only prints it): host, interfaces, path, findings and verdict, aligned for a terminal.

use crate::host::repeat::Spread;
use crate::{analyze::pcie_gen, Estimate, Report, Severity, PROBE_MEASURES};
use linerate_model::units::{format_rate, format_size_iec};
use std::fmt::Write as _;

fn esc(s: &str) -> String {
    linerate_proto::name::escape(s.as_bytes())
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

/// `low`–`high` with the unit once where both have the same (`4.1–5.3 Gbit/s`).
fn range(low: f64, high: f64) -> String {
    let (a, b) = (format_rate(low), format_rate(high));
    match (a.split_once(' '), b.split_once(' ')) {
        (Some((x, u)), Some((y, v))) if u == v => format!("{x}–{y} {u}"),
        _ => format!("{a} – {b}"),
    }
}

/// A measured rate: its median, and the range of its rounds where there were several.
fn spread(bps: f64, s: Option<Spread>) -> String {
    match s {
        Some(s) if s.rounds > 1 => {
            format!("{} ({}, {} runs)", format_rate(bps), range(s.low_bps, s.high_bps), s.rounds)
        }
        _ => format_rate(bps),
    }
}

fn estimate(out: &mut String, label: &str, e: &Estimate) {
    let ceiling = match (e.ceiling_bps, e.ceiling_low_bps, e.ceiling_high_bps) {
        (Some(m), Some(lo), Some(hi)) => format!("{} (median {})", range(lo, hi), format_rate(m)),
        (Some(m), _, _) => format_rate(m),
        _ => "unknown".into(),
    };
    let by = e.limited_by.as_deref().map(|b| format!(", limited by {b}")).unwrap_or_default();
    let _ = writeln!(out, "  {label:<22} {ceiling}{by}");
    for l in &e.limits {
        let runs = match (l.low_bps, l.high_bps) {
            (Some(lo), Some(hi)) => format!(" (slowest–fastest runs: {})", range(lo, hi)),
            _ => String::new(),
        };
        let _ = writeln!(out, "    {:<12} {:>14}   {}{runs}", l.name, format_rate(l.bps), esc(&l.formula));
    }
    if let Some(m) = e.measured_bps {
        let what = e.measured_by.as_deref().unwrap_or(PROBE_MEASURES);
        let _ = writeln!(out, "    {:<12} {:>14}   {}", "measured", format_rate(m), esc(what));
    }
}

/// The text report of `linerate doctor` (without `--json`): the host, its interfaces, the path
/// to the peer, the findings with their fixes and the verdict. Names and messages from the host
/// or the peer are printed with control characters escaped.
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
            spread(a.aes_256_gcm_bps, a.aes_256_gcm),
            spread(a.chacha20_poly1305_bps, a.chacha20_poly1305)
        );
    }
    if let Some(c) = &f.copy {
        let _ = writeln!(
            o,
            "COPY  per core: page-cache read {} · write {} · TCP over loopback (both ends) {} · BLAKE3 {} (--verify, --checksum)",
            spread(c.page_read_bps, c.spread.map(|s| s.page_read)),
            spread(c.page_write_bps, c.spread.map(|s| s.page_write)),
            spread(c.tcp_both_ends_bps, c.spread.map(|s| s.tcp_both_ends)),
            spread(c.blake3_bps, c.spread.map(|s| s.blake3))
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
                    pcie_gen(p.current_gts),
                    p.current_width,
                    pcie_gen(p.max_gts),
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
    use crate::{analyze, AnalysisConfig};

    #[test]
    fn text_report_shows_the_critical_finding_its_fix_and_the_verdict() {
        use crate::host::nic::{NicFacts, PcieLink};
        use crate::{Facts, NicReport};
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
        let text = human(&analyze(facts, &AnalysisConfig::for_cores(4)));
        assert!(!text.contains('\x1b'), "control characters must be escaped:\n{text}");
        let crit = text.lines().find(|l| l.trim_start().starts_with("CRITICAL")).unwrap_or_else(|| panic!("{text}"));
        assert!(crit.contains("PCIe gen1 x4 negotiated, card can do gen2 x8: ceiling 6.4 Gbit/s"), "{crit}");
        assert!(text.contains("fix: move the card to a slot wired x8"), "{text}");
        assert!(text.contains("first bottleneck: the PCIe slot, at 6.4 Gbit/s"), "{text}");
        assert!(text.contains("gen1 x4 / gen2 x8"), "{text}");
        insta::assert_snapshot!(text);
    }

    /// Issue 43: the ceiling as a range of the micro-benchmarks' rounds; the rate probe named
    /// for what it is; a TAP's nominal 10 Mbit/s no line rate.
    #[test]
    fn text_report_prints_the_ceiling_as_a_range_and_names_the_memory_probe() {
        use crate::host::aead::AeadRates;
        use crate::host::copycost::{CopyCost, CopyCostSpread};
        use crate::host::nic::NicFacts;
        use crate::{Facts, NicReport, PathReport, ProbeResults};
        let s =
            |low: f64, median: f64, high: f64| Spread { median_bps: median, low_bps: low, high_bps: high, rounds: 7 };
        let tap = NicFacts {
            name: "tap0".into(),
            mtu: Some(1500),
            nominal_speed_mbps: Some(10),
            rx_queues: 1,
            tx_queues: 1,
            ..NicFacts::default()
        };
        let facts = Facts {
            cpu: crate::host::cpu::CpuFacts { cores: 2, logical_cpus: 2, ..Default::default() },
            nics: vec![NicReport { facts: tap, ..NicReport::default() }],
            primary: Some("tap0".into()),
            aead: Some(AeadRates {
                aes_256_gcm_bps: 12e9,
                chacha20_poly1305_bps: 6e9,
                aes_256_gcm: Some(s(9e9, 12e9, 13e9)),
                chacha20_poly1305: Some(s(5e9, 6e9, 6.5e9)),
            }),
            copy: Some(CopyCost {
                blake3_bps: 8e9,
                page_read_bps: 40e9,
                page_write_bps: 12e9,
                tcp_both_ends_bps: 10e9,
                spread: Some(CopyCostSpread {
                    blake3: s(7e9, 8e9, 9e9),
                    page_read: s(30e9, 40e9, 45e9),
                    page_write: s(5.4e9, 12e9, 18.6e9),
                    tcp_both_ends: s(8e9, 10e9, 11e9),
                }),
            }),
            path: Some(PathReport {
                peer: "198.18.0.2:7878".into(),
                iface: Some("tap0".into()),
                probe: Some(ProbeResults { single_bps: 20e9, multi_bps: 30e9, multi_streams: 2 }),
                ..PathReport::default()
            }),
            ..Facts::default()
        };
        let text = human(&analyze(facts, &AnalysisConfig::for_cores(2)));
        let single = text.lines().find(|l| l.contains("single stream:")).unwrap_or_else(|| panic!("{text}"));
        assert!(single.contains("Gbit/s (median ") && single.contains("–"), "{single}");
        assert!(text.contains("measured          20 Gbit/s   memory-to-memory TCP"), "{text}");
        assert!(!text.contains("line rate"), "a TAP's nominal speed is no line rate:\n{text}");
        insta::assert_snapshot!(text);
    }

    #[test]
    fn cpu_ranges_are_compact() {
        assert_eq!(cpus(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
        assert_eq!(cpus(&[]), "-");
    }
}
