//! `linerate serve`: the agent that receives copies beneath `--root` and answers benchmarks, for
//! many clients at once; SIGTERM/SIGINT stop it gracefully.

use crate::error::{Error, Kind};
use anyhow::Result;
use clap::Args;
use linerate_agent::log::{Level, Log, LogFormat};
use linerate_agent::server::{Server, ServerConfig};
use linerate_copy::recv;
use linerate_model::shutdown::{Stage, Stopper};
use linerate_model::units::{self, format_rate, parse_duration, UnitError};
use linerate_net::auth::secret::Secret;
use std::net::ToSocketAddrs;
use std::path::PathBuf;
use std::time::Duration;

/// `linerate serve` flags.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "0.0.0.0:7878")]
    listen: String,
    /// Directory every copy is confined beneath. Without it the server answers benchmarks only.
    #[arg(long)]
    root: Option<PathBuf>,
    /// Longest benchmark test, warm-up included: a duration (90s, 2h); a bare number is seconds.
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = parse_duration)]
    max_duration: Duration,
    /// Most connections in one benchmark test.
    #[arg(long, default_value_t = 10_000)]
    max_connections: u32,
    /// Highest rate a benchmark test may ask for (10G, 10gbit, 1.25GB/s); tests must then
    /// give --rate. Unlimited when absent.
    #[arg(long, value_name = "RATE", value_parser = linerate_model::units::parse_rate)]
    max_rate: Option<u64>,
    /// Most benchmark tests running at once, over all clients (mesh tasks this agent runs
    /// for a controller count too).
    #[arg(long, default_value_t = 8)]
    max_tests: usize,
    /// Networks a `mesh` key may send this agent's tests to, as CIDR (`198.18.0.0/15,::1/128`);
    /// a task for any other address is refused. Without it a `mesh` key may point the agent
    /// at any host:port it reaches (about ten connection attempts a second, each sending a
    /// 28-byte preamble): give it wherever agents are not all trusted networks of their own.
    #[arg(long, value_name = "NET,...", value_delimiter = ',', value_parser = parse_net)]
    mesh_targets: Option<Vec<ipnet::IpNet>>,
    /// Ports for benchmark data, LOW-HIGH (or one PORT), for a firewall: each test's data
    /// listener (and UDP socket) takes the first one free, and a test that finds none is
    /// refused as busy. Default: ephemeral ports.
    #[arg(long, value_name = "LOW-HIGH", value_parser = parse_port_range)]
    data_ports: Option<(u16, u16)>,
    /// Most connections from one address in their handshake at once.
    #[arg(long, default_value_t = 16)]
    max_handshakes_per_source: usize,
    /// Key file shared with clients (64 hex digits, mode 0600); `-` reads the key from standard
    /// input. Optional with --authorized-keys (then only keys are admitted unless it is given).
    #[arg(long, value_name = "FILE", required_unless_present_any = ["ssh", "authorized_keys"])]
    key_file: Option<PathBuf>,
    #[command(flatten)]
    keys: crate::keys::ServeKeyArgs,
    /// Serve one session, then exit with its status.
    #[arg(long)]
    once: bool,
    /// Print `LINERATE <version> LISTEN <addr>` on stdout once listening (and, with --metrics,
    /// `LINERATE <version> METRICS <addr>` after it).
    #[arg(long)]
    announce: bool,
    /// Serve the agent's counters in the Prometheus text format on `http://ADDR/metrics`
    /// (plain, unauthenticated HTTP: bind it to loopback or a management network).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<std::net::SocketAddr>,
    /// Most sessions at once.
    #[arg(long, default_value_t = 64)]
    max_sessions: usize,
    /// Time a client has from connecting to its first request, however slowly it sends: a
    /// duration (10s, 1m); a bare number is seconds.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    handshake_timeout: Duration,
    /// Receive buffers all copy sessions together may reserve: a size (2GiB, 512M); a bare
    /// number is MiB (512 = 512 MiB). A push reserves streams × its chunk size (at most 256 MiB)
    /// when it starts, and is refused as busy when that is not free.
    #[arg(long, value_name = "SIZE", default_value = "1GiB", value_parser = parse_buffer_memory)]
    max_buffer_memory: u64,
    /// On SIGTERM or SIGINT: stop accepting, let running sessions finish for this long (a
    /// duration, 30s, 2m; a bare number is seconds), then abort the rest cleanly (unfinished
    /// files removed, resumable ones kept) and exit 0. A second signal aborts them at once.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    shutdown_grace: Duration,
    /// Time a stream may stay silent mid-session: a duration (300s, 5m); a bare number is
    /// seconds.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    idle_timeout: Duration,
    /// No per-session log lines.
    #[arg(long, short)]
    quiet: bool,
    /// Log lines on stderr: `text` (`TIME linerate serve: MESSAGE`) or `json` (one object per
    /// line: ts, level, msg, and fields such as peer, kind, event, bytes). Times are RFC 3339
    /// UTC with milliseconds.
    #[arg(long, value_name = "text|json", default_value = "text", value_parser = clap::value_parser!(LogFormat))]
    log_format: LogFormat,
    /// Most bit/s of each copy session, both directions (a rate, as cp --bwlimit).
    /// Benchmarks are not paced (see --max-rate).
    #[arg(long, value_name = "RATE", value_parser = linerate_net::limit::parse_limit)]
    max_rate_per_client: Option<u64>,
    /// Most bit/s of all copy sessions together; every active session gets an equal share
    /// (within its own cap), and what one leaves unused goes to the others.
    #[arg(long, value_name = "RATE", value_parser = linerate_net::limit::parse_limit)]
    max_rate_total: Option<u64>,
    /// Let clients keep owners and groups (cp -o/-g, part of -a): files may then be created owned
    /// by any user and group, set-user-ID bits included, where this server runs as root.
    /// Refused without it (a server started through ssh, or by a local cp, follows its user's
    /// privileges instead).
    #[arg(long)]
    keep_owners: bool,
    /// Let clients create devices, FIFOs and sockets (cp -D, part of -a); devices need this
    /// server to run as root. Refused without it.
    #[arg(long)]
    allow_devices: bool,
    #[command(flatten)]
    ssh: crate::ssh::ServeSshArgs,
}

/// `serve` flags from an argument list, read as `linerate serve ARGS` reads them: how
/// `bench -s` (iperf3's server mode) becomes the one agent, with every rule of `serve`.
pub(crate) fn serve_args(args: Vec<std::ffi::OsString>) -> Result<ServeArgs, clap::Error> {
    #[derive(clap::Parser)]
    #[command(name = "linerate serve")]
    struct Serve {
        #[command(flatten)]
        args: ServeArgs,
    }
    <Serve as clap::Parser>::try_parse_from(std::iter::once("linerate serve".into()).chain(args)).map(|s| s.args)
}

/// A network in CIDR form (`198.18.0.0/15`); a bare address is that one address.
fn parse_net(s: &str) -> Result<ipnet::IpNet, String> {
    s.parse::<ipnet::IpNet>()
        .or_else(|_| s.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map(|n| n.trunc())
        .map_err(|_| format!("'{s}': a network such as 198.18.0.0/15 or fd00::/8, or one address"))
}

/// `--data-ports`: `LOW-HIGH` or one port, 1 to 65535.
fn parse_port_range(s: &str) -> Result<(u16, u16), String> {
    let port = |t: &str| t.trim().parse::<u16>().ok().filter(|p| *p > 0);
    let (low, high) = match s.split_once('-') {
        Some((a, b)) => (port(a), port(b)),
        None => (port(s), port(s)),
    };
    match (low, high) {
        (Some(l), Some(h)) if l <= h => Ok((l, h)),
        _ => Err(format!("{s:?}: give LOW-HIGH (or one port), 1 to 65535, LOW not above HIGH")),
    }
}

/// `--max-buffer-memory`: a size in the one grammar, in bytes; a bare number counts MiB, as the
/// flag always did.
pub(crate) fn parse_buffer_memory(s: &str) -> Result<u64, UnitError> {
    units::parse_size_bare(s, 1 << 20)
}

/// A timeout from its flag: at least a second, as the flags always read a 0.
fn at_least_1s(d: Duration) -> Duration {
    d.max(Duration::from_secs(1))
}

/// The log line of `--max-rate-per-client` and `--max-rate-total`: only the caps given.
fn caps_line(each: Option<u64>, total: Option<u64>) -> String {
    let rate = |r: u64| format_rate(r as f64);
    match (each, total) {
        (Some(e), Some(t)) => format!("copy sessions capped at {} each, {} in total (split fairly)", rate(e), rate(t)),
        (Some(e), None) => format!("copy sessions capped at {} each", rate(e)),
        (None, Some(t)) => format!("copy sessions capped at {} in total (split fairly)", rate(t)),
        (None, None) => "copy sessions not capped".into(),
    }
}

pub fn run_serve(a: ServeArgs) -> crate::error::Result {
    if a.ssh.ssh_protocol {
        outln!(
            "{} {} SOFTWARE {}",
            linerate_remote::script::PROTOCOL_TAG,
            linerate_proto::PROTOCOL_VERSION,
            env!("CARGO_PKG_VERSION")
        )?;
        return Ok(());
    }
    if a.ssh.ssh {
        let (hs, idle) = (at_least_1s(a.handshake_timeout), at_least_1s(a.idle_timeout));
        return crate::ssh::run_serve_ssh(&a.ssh, hs, idle);
    }
    let log = Log::new(a.log_format);
    // Failures go to the log (its --log-format), so they are reported here, not by `main`.
    let fail = |msg: String, kind: Kind| {
        log.emit(Level::Error, &msg, &[]);
        Err(Error::reported(kind))
    };
    let keys = match a.keys.config() {
        Ok(k) => k,
        Err(e) => return fail(format!("{e:#}"), Kind::Usage),
    };
    let secret = match (&a.key_file, &keys) {
        (Some(f), _) if f.as_os_str() == "-" => Secret::read_from(std::io::stdin().lock()),
        (Some(f), _) => Secret::load(f),
        // Keys only: a secret nobody holds, and the server refuses the secret mode outright.
        (None, Some(_)) => Secret::generate(),
        (None, None) => {
            let msg = "--key-file or --authorized-keys is required (or --ssh, when started by linerate cp)";
            return fail(msg.into(), Kind::Usage);
        }
    };
    let secret = match secret {
        Ok(s) => s,
        Err(e) => return fail(e.to_string(), Kind::Usage),
    };
    let listen = match a.listen.to_socket_addrs().ok().and_then(|mut i| i.next()) {
        Some(l) => l,
        None => return fail(format!("cannot parse listen address '{}'", a.listen), Kind::Usage),
    };
    let mut cfg = ServerConfig::bench_only(listen, secret);
    cfg.root = a.root;
    cfg.bench.limits.max_duration_ms = u64::try_from(a.max_duration.as_millis()).unwrap_or(u64::MAX);
    cfg.bench.limits.max_connections = a.max_connections;
    cfg.bench.limits.max_rate_bps = a.max_rate.unwrap_or(u64::MAX);
    cfg.bench.max_tests = a.max_tests.max(1);
    cfg.bench.handshake_timeout = at_least_1s(a.handshake_timeout);
    cfg.bench.data_ports = a.data_ports;
    cfg.max_handshakes_per_source = a.max_handshakes_per_source.max(1);
    cfg.once = a.once;
    cfg.first_connect_deadline = a.once.then(|| at_least_1s(a.ssh.connect_deadline));
    cfg.max_sessions = a.max_sessions.max(1);
    cfg.max_buffer_memory = usize::try_from(a.max_buffer_memory).unwrap_or(usize::MAX).max(1 << 20);
    cfg.shutdown_grace = a.shutdown_grace;
    cfg.handshake_timeout = at_least_1s(a.handshake_timeout);
    cfg.idle_timeout = at_least_1s(a.idle_timeout);
    cfg.log = !a.quiet;
    cfg.log_format = a.log_format;
    cfg.rate_per_client = a.max_rate_per_client;
    cfg.rate_total = a.max_rate_total;
    cfg.accept_secret = a.key_file.is_some();
    let key_note = keys.as_ref().zip(a.keys.authorized_keys.as_deref()).map(|(k, f)| crate::keys::host_key_note(k, f));
    cfg.keys = keys;
    cfg.metrics = a.metrics;
    cfg.mesh_targets = a.mesh_targets.clone();
    // A server started through ssh has them already (ServerConfig::ssh_user).
    cfg.keep_owners |= a.keep_owners;
    cfg.allow_devices |= a.allow_devices;
    let server = match Server::bind(cfg) {
        Ok(s) => s,
        Err(e) => return fail(e.to_string(), Kind::Usage),
    };
    if a.announce {
        // Whoever started us reads this line: without it nobody can connect.
        outln!("LINERATE {} LISTEN {}", linerate_proto::PROTOCOL_VERSION, server.local_addr())?;
        if let Some(m) = server.metrics_addr() {
            outln!("LINERATE {} METRICS {m}", linerate_proto::PROTOCOL_VERSION)?;
        }
    } else if !a.quiet {
        let addr = server.local_addr().to_string();
        log.emit(Level::Info, &format!("listening on {addr}"), &[("listen", addr.as_str().into())]);
    }
    if let Some((note, fingerprint)) = key_note {
        // Logged even with --quiet: clients compare this fingerprint on first contact.
        log.emit(Level::Info, &note, &[("host_key", fingerprint.into())]);
    }
    if let (Some(m), false) = (server.metrics_addr(), a.quiet) {
        log.emit(Level::Info, &format!("metrics on http://{m}/metrics"), &[("metrics", m.to_string().into())]);
    }
    if !a.quiet && (a.max_rate_per_client.is_some() || a.max_rate_total.is_some()) {
        let msg = caps_line(a.max_rate_per_client, a.max_rate_total);
        log.emit(Level::Info, &msg, &[]);
    }
    if let Err(e) = stop_on_signals(server.stopper(), a.shutdown_grace, (!a.quiet).then_some(log)) {
        return fail(format!("installing signal handlers: {e}"), Kind::Session);
    }
    match server.run() {
        Ok(Some(recv::Outcome::Done(s))) if s.errors == 0 => Ok(()),
        Ok(Some(recv::Outcome::Done(_))) => Err(Error::reported(Kind::Partial)),
        Ok(Some(recv::Outcome::Aborted(_))) => Err(Error::reported(Kind::Session)),
        Ok(None) => Ok(()),
        Err(e) => fail(e.to_string(), Kind::Session),
    }
}

/// SIGTERM and SIGINT stop the server: the first lets running sessions finish within the grace,
/// a second aborts them now. The process's signal thread turns them into [`Stopper::stop`]
/// (`ending`). Each signal is logged to `log` (none: `--quiet`).
fn stop_on_signals(stopper: Stopper, grace: Duration, log: Option<Log>) -> std::io::Result<()> {
    crate::ending::stop_on_signals(&stopper, move |stage| {
        if let Some(log) = log {
            if stage == Stage::Stopping {
                let msg = format!(
                    "stopping: no new sessions; running ones have {} to finish (signal again to abort them now)",
                    units::significant(grace.as_secs_f64(), 3) + " s"
                );
                log.emit(Level::Info, &msg, &[]);
            } else {
                log.emit(Level::Warn, "aborting the running sessions", &[]);
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_caps_line_names_only_the_caps_given() {
        assert_eq!(caps_line(Some(500_000_000), None), "copy sessions capped at 500 Mbit/s each");
        assert_eq!(caps_line(None, Some(2_000_000_000)), "copy sessions capped at 2 Gbit/s in total (split fairly)");
        assert_eq!(
            caps_line(Some(1_000_000_000), Some(4_000_000_000)),
            "copy sessions capped at 1 Gbit/s each, 4 Gbit/s in total (split fairly)"
        );
    }

    #[test]
    fn data_ports_are_a_range_or_one_port() {
        assert_eq!(parse_port_range("5201-5210"), Ok((5201, 5210)));
        assert_eq!(parse_port_range("5201"), Ok((5201, 5201)));
        for bad in ["5210-5201", "0-10", "1-65536", "x", "", "-5"] {
            assert!(parse_port_range(bad).is_err(), "{bad:?}");
        }
    }
}
