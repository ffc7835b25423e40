//! `linerate doctor`: what will limit a transfer, found before anyone benchmarks. [`host`] reads
//! this machine (CPU, NICs, PCIe links, queues and interrupts, offloads, qdiscs, TCP settings)
//! and the path to a peer (RTT, path MTU); [`mod@analyze`] turns those facts into findings with a
//! severity and a concrete fix, and a verdict: the expected ceiling and what sets it; [`text`]
//! renders that report for a terminal; [`inspect`] does it all for this host as `linerate
//! doctor` asks ([`DoctorConfig`]). It uses nothing of the engine: a rate probe against a peer
//! comes in through [`analyze::RateProbe`].

pub mod analyze;
pub mod host;
pub mod text;

pub use analyze::*;

use host::Roots;
use linerate_model::units::UnitError;
use std::time::Duration;

/// What `linerate doctor` asks: its flags' values.
#[derive(Clone, Debug, Default)]
pub struct DoctorConfig {
    /// Only this interface (`--iface`).
    pub iface: Option<String>,
    /// Include loopback (`--include-lo`).
    pub include_lo: bool,
    /// `HOST[:PORT]` of a `linerate serve` to check the path to (`--peer`).
    pub peer: Option<String>,
    /// Round-trip time for the buffer check when none is measured (`--rtt`).
    pub rtt: Duration,
    /// The line rate, bit/s, where the interface cannot say it (`--link-rate`).
    pub link_bps: Option<u64>,
    /// Streams of the multi-stream estimate and probe (`-P`) [default: cores, 2 to 8].
    pub streams: Option<u32>,
    /// Run the micro-benchmarks (not with `--no-crypto-bench`).
    pub micro_benchmarks: bool,
}

/// Seconds of each rate probe.
const PROBE_SECS: f64 = 2.0;

/// Inspect this host (and the path to `cfg.peer`, its rates measured through `probe` where
/// given) and analyze what was found.
pub fn inspect(cfg: &DoctorConfig, probe: Option<&dyn RateProbe>) -> Result<Report, DoctorError> {
    let roots = Roots::default();
    let cores = host::cpu::CpuFacts::read(&roots).cores;
    let collect_cfg = CollectConfig {
        iface: cfg.iface.clone(),
        include_lo: cfg.include_lo,
        peer: cfg.peer.clone(),
        live: true,
        aead_budget: cfg.micro_benchmarks.then_some(host::repeat::Repeat::DOCTOR.budget),
        probe_streams: cfg.streams.unwrap_or(cores.clamp(2, 8)),
        probe_secs: PROBE_SECS,
    };
    let facts = collect(&roots, &collect_cfg, probe)?;
    let mut acfg = AnalysisConfig::for_cores(facts.cpu.cores);
    acfg.rtt_s = cfg.rtt.as_secs_f64();
    acfg.link_bps = cfg.link_bps.map(|r| r as f64);
    if let Some(s) = cfg.streams {
        acfg.streams = s.clamp(1, 4096);
    }
    Ok(analyze(facts, &acfg))
}

/// Why `--rtt` does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadRtt {
    /// Not a duration with its unit.
    #[error("--rtt: {0}")]
    Grammar(UnitError),
    /// Outside 1 µs to 60 s (the text as given).
    #[error("'{0}': the RTT must be between 1us and 60s")]
    Range(String),
}

/// `--rtt`: `1ms`, `250us`, `0.04s`: the one duration grammar with its unit required (a bare
/// `20` is refused with a hint: it was milliseconds here once, and is seconds elsewhere).
pub fn parse_rtt(s: &str) -> Result<Duration, BadRtt> {
    let d = linerate_model::units::Duration::with_unit(s).map_err(BadRtt::Grammar)?.get();
    if !(Duration::from_micros(1)..=Duration::from_secs(60)).contains(&d) {
        return Err(BadRtt::Range(s.to_string()));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rtts() {
        assert_eq!(parse_rtt("1ms").unwrap(), Duration::from_millis(1));
        assert_eq!(parse_rtt("250us").unwrap(), Duration::from_micros(250));
        assert_eq!(parse_rtt("0.04s").unwrap(), Duration::from_millis(40));
        let e = parse_rtt("20").unwrap_err().to_string();
        assert!(e.contains("no unit: give one, e.g. 20ms"), "a bare number is refused with a hint: {e}");
        assert!(parse_rtt("0.5").is_err());
        assert!(parse_rtt("fast").is_err());
        assert!(parse_rtt("0ms").is_err());
        assert!(parse_rtt("2h").is_err());
    }
}
