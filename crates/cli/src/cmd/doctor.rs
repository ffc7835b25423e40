//! `linerate doctor`: inspect this host (and the path to a peer) and say what limits transfer
//! speed, before any benchmark. Collection, analysis and the text report live in
//! `linerate-doctor`; this file parses flags, builds its configs and prints the report.

use crate::error::{Result, ResultExt};
use anyhow::Context as _;
use clap::Args;
use linerate_doctor::host::Roots;
use linerate_doctor::{self as doctor, AnalysisConfig, CollectConfig};
use std::time::Duration;

const DOCTOR_AFTER_HELP: &str = "\
CHECKS:
  per interface: link speed, MTU, driver, PCIe link vs the card's maximum and its ceiling,
  queues, interrupt spread, RPS, offloads (ethtool netlink), qdisc, NUMA node;
  host: cores, SMT, NUMA, governor, AES-NI/VAES/AVX2/PCLMULQDQ; per core the speed of the
  AEADs, page-cache writes and reads, TCP over loopback and BLAKE3, each repeated at least 5
  times within 0.25 s (median and slowest-fastest range; the ceiling is printed as a range);
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
    /// The line rate (10G, 1gbit) where the interface cannot say it: a VM's virtio NIC, a TAP or
    /// a veth report no speed or a nominal one, which doctor never takes for a line rate.
    #[arg(long, value_name = "RATE", value_parser = linerate_model::units::parse_rate)]
    link_rate: Option<u64>,
    /// Streams of the multi-stream estimate [default: the number of cores, 2 to 8, as cp].
    #[arg(long, short = 'P')]
    streams: Option<u32>,
    /// Key file of the --peer agent: with it, doctor measures single- and multi-stream rates
    /// with a 2 s `linerate bench` tcp-stream test each (memory to memory, unencrypted: not a
    /// copy's rate).
    #[arg(long, value_name = "FILE", conflicts_with = "identity")]
    key_file: Option<std::path::PathBuf>,
    /// ed25519 identity for a --peer in daemon mode (`serve --authorized-keys`): with it, doctor
    /// measures the rates as with --key-file.
    #[arg(long, value_name = "FILE")]
    identity: Option<std::path::PathBuf>,
    /// Skip the micro-benchmarks (about 1.5 s: AEADs, page cache, TCP, BLAKE3); the crypto and
    /// CPU-per-byte limits are then left out.
    #[arg(long)]
    no_crypto_bench: bool,
    /// Print one JSON document (schema "linerate.doctor/1") instead of the text report.
    #[arg(long)]
    json: bool,
}

/// Parse `1ms`, `250us`, `0.04s`: the one duration grammar with its unit required (a bare `20`
/// is refused with a hint: it was milliseconds here once, and is seconds elsewhere).
fn parse_rtt(s: &str) -> Result<Duration, String> {
    let d = linerate_model::units::Duration::with_unit(s).map_err(|e| format!("--rtt: {e}"))?.get();
    if !(Duration::from_micros(1)..=Duration::from_secs(60)).contains(&d) {
        return Err(format!("'{s}': the RTT must be between 1us and 60s"));
    }
    Ok(d)
}

/// Measures the rate to the peer with a `linerate bench` tcp-stream test.
struct BenchProbe {
    key: linerate_net::auth::secret::Secret,
    key_auth: Option<linerate_net::auth::keys::KeyClient>,
}

impl doctor::RateProbe for BenchProbe {
    fn probe(&self, peer: &str, streams: u32, secs: f64) -> Result<f64, Box<dyn std::error::Error + Send + Sync>> {
        use linerate_bench::{BenchClient, BenchClientConfig};
        use linerate_proto::bench::{TestKind, TestSpec};
        use std::net::ToSocketAddrs;
        let addr = peer.to_socket_addrs().map_err(|e| format!("{peer}: {e}"))?.next().ok_or("no address")?;
        let cfg = BenchClientConfig {
            addr,
            secret: self.key.clone(),
            key_auth: self.key_auth.clone(),
            suite: linerate_net::conn::preferred_suite(),
            timeout: Duration::from_secs(10),
            tuning: Default::default(),
        };
        let mut spec = TestSpec::new(TestKind::TcpStream);
        spec.connections = streams.max(1);
        spec.duration_ms = (secs * 1000.0) as u64;
        spec.omit_ms = 200;
        let r = BenchClient::connect(cfg).and_then(|mut c| c.run(&spec, &mut |_| {}))?;
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
    let port = linerate_net::addr::resolve(peer, None, None)?.port();
    let (key, key_auth) = keys.resolve(linerate_net::addr::host_of(peer), port, "the rate probe")?;
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
        aead_budget: (!a.no_crypto_bench).then_some(linerate_doctor::host::repeat::Repeat::DOCTOR.budget),
        probe_streams: a.streams.unwrap_or(cores.clamp(2, 8)),
        probe_secs: 2.0,
    };
    // The rate probe is a short `linerate bench` against the peer; it needs the peer's key.
    let probe = probe_for(&a).usage()?;
    let facts =
        doctor::collect(&Roots::default(), &ccfg, probe.as_ref().map(|p| p as &dyn doctor::RateProbe)).usage()?;
    let mut acfg = AnalysisConfig::for_cores(facts.cpu.cores);
    acfg.rtt_s = a.rtt.as_secs_f64();
    acfg.link_bps = a.link_rate.map(|r| r as f64);
    if let Some(s) = a.streams {
        acfg.streams = s.clamp(1, 4096);
    }
    let report = doctor::analyze(facts, &acfg);
    if a.json {
        let j = serde_json::to_string_pretty(&report).context("cannot encode the report").internal()?;
        outln!("{j}")
    } else {
        crate::out::bytes(crate::out::To::Out, linerate_doctor::text::human(&report).as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rtts() {
        assert_eq!(parse_rtt("1ms").unwrap(), Duration::from_millis(1));
        assert_eq!(parse_rtt("250us").unwrap(), Duration::from_micros(250));
        assert_eq!(parse_rtt("0.04s").unwrap(), Duration::from_millis(40));
        let e = parse_rtt("20").unwrap_err();
        assert!(e.contains("no unit: give one, e.g. 20ms"), "a bare number is refused with a hint: {e}");
        assert!(parse_rtt("0.5").is_err());
        assert!(parse_rtt("fast").is_err());
        assert!(parse_rtt("0ms").is_err());
        assert!(parse_rtt("2h").is_err());
    }
}
