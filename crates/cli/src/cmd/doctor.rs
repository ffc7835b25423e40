//! `linerate doctor`: inspect this host (and the path to a peer) and say what limits transfer
//! speed, before any benchmark. Collection, analysis and the text report live in
//! `linerate-doctor`; this file parses flags, builds its configs and prints the report.

use crate::error::{Result, ResultExt};
use anyhow::Context as _;
use clap::Args;
use linerate_bench::probe::BenchProbe;
use linerate_doctor::{self as doctor, parse_rtt, DoctorConfig};
use linerate_net::auth::credentials::ClientKeys;
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

/// Run `linerate doctor`: 0 whenever the report was produced, 2 bad usage.
pub fn run_doctor(a: DoctorArgs) -> Result {
    // The rate probe is a short `linerate bench` against the peer; it needs the peer's key.
    let probe = match (&a.peer, a.key_file.is_some() || a.identity.is_some()) {
        (Some(peer), true) => {
            let keys =
                ClientKeys { key_file: a.key_file.as_deref(), identity: a.identity.as_deref(), strict_host_key: false };
            Some(BenchProbe::for_peer(peer, &keys, crate::keys::note()).usage()?)
        }
        _ => None,
    };
    let cfg = DoctorConfig {
        iface: a.iface,
        include_lo: a.include_lo,
        peer: a.peer,
        rtt: a.rtt,
        link_bps: a.link_rate,
        streams: a.streams,
        micro_benchmarks: !a.no_crypto_bench,
    };
    let report = doctor::inspect(&cfg, probe.as_ref().map(|p| p as &dyn doctor::RateProbe)).usage()?;
    if a.json {
        let j = serde_json::to_string_pretty(&report).context("cannot encode the report").internal()?;
        outln!("{j}")
    } else {
        crate::out::bytes(crate::out::To::Out, linerate_doctor::text::human(&report).as_bytes())
    }
}
