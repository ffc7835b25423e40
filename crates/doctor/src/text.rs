//! The text report of `linerate doctor`, rendered from the [`Report`] this crate owns (the CLI
//! only prints it): host, interfaces, path, findings and verdict, aligned for a terminal.

use crate::{analyze::pcie_gen, Estimate, Report, Severity};
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
            format_rate(a.aes_256_gcm_bps),
            format_rate(a.chacha20_poly1305_bps)
        );
    }
    if let Some(c) = &f.copy {
        let _ = writeln!(
            o,
            "COPY  per core: page-cache read {} · write {} · TCP over loopback (both ends) {} · BLAKE3 {} (--verify, --checksum)",
            format_rate(c.page_read_bps),
            format_rate(c.page_write_bps),
            format_rate(c.tcp_both_ends_bps),
            format_rate(c.blake3_bps)
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

    #[test]
    fn cpu_ranges_are_compact() {
        assert_eq!(cpus(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
        assert_eq!(cpus(&[]), "-");
    }
}
