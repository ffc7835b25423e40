//! `linerate serve`'s values on their way to the agent: the parsers of the flags whose types
//! live here (networks, port ranges), the floors its timeouts keep, the lines the agent shows
//! as it starts and as a signal stops it, and its run once it listens ([`run`]). The CLI parses
//! the flags, writes the announce lines and wires the signals.

use crate::log::{Level, Log, LogFormat};
use crate::server::{Server, ServerConfig};
use linerate_copy::recv::Outcome;
use linerate_model::shutdown::{Stage, Stopper};
use linerate_model::units::{self, format_rate};
use linerate_net::auth::authorized::KeyAuthConfig;
use linerate_net::auth::secret::Secret;
use linerate_net::EngineError;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

/// Why `serve` could not start listening.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Neither a shared key nor authorized keys were given.
    #[error("--key-file or --authorized-keys is required (or --ssh, when started by linerate cp)")]
    NoKey,
    /// The listen address does not resolve.
    #[error("cannot parse listen address '{0}'")]
    Listen(String),
    /// The key could not be read or made, or the server could not bind.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// `serve`'s flags as values: everything of a [`ServerConfig`] a command line sets, before the
/// floors ([`at_least_1s`], at least one of each count, 1 MiB of buffers) are applied.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Address to listen on (`host:port`, resolved on [`ServeOptions::bind`]).
    pub listen: String,
    /// The shared key's file (`-`: standard input); none with keys only.
    pub key_file: Option<PathBuf>,
    /// The authorized keys, when given.
    pub keys: Option<KeyAuthConfig>,
    /// Directory copies are confined beneath; none: benchmarks only.
    pub root: Option<PathBuf>,
    /// Longest benchmark test.
    pub max_duration: Duration,
    /// Most connections in one test.
    pub max_connections: u32,
    /// Highest rate a test may ask for; none: unlimited.
    pub max_rate: Option<u64>,
    /// Most tests at once.
    pub max_tests: usize,
    /// Ports for benchmark data.
    pub data_ports: Option<(u16, u16)>,
    /// Most handshakes from one address at once.
    pub max_handshakes_per_source: usize,
    /// Serve one session, then exit.
    pub once: bool,
    /// With `once`: how long to wait for the first connection.
    pub connect_deadline: Duration,
    /// Most sessions at once.
    pub max_sessions: usize,
    /// Receive buffers of all copy sessions together, in bytes.
    pub max_buffer_memory: u64,
    /// How long running sessions may finish after a stop.
    pub shutdown_grace: Duration,
    /// Time from connecting to the first request.
    pub handshake_timeout: Duration,
    /// Time a stream may stay silent.
    pub idle_timeout: Duration,
    /// No per-session log lines.
    pub quiet: bool,
    /// Text or JSON log lines.
    pub log_format: LogFormat,
    /// Most bit/s of each copy session.
    pub max_rate_per_client: Option<u64>,
    /// Most bit/s of all copy sessions together.
    pub max_rate_total: Option<u64>,
    /// Where to serve the metrics.
    pub metrics: Option<SocketAddr>,
    /// Networks a mesh key may send tests to.
    pub mesh_targets: Option<Vec<ipnet::IpNet>>,
    /// Let clients keep owners and groups.
    pub keep_owners: bool,
    /// Let clients create devices, FIFOs and sockets.
    pub allow_devices: bool,
}

impl ServeOptions {
    /// The shared key: read from the key file (or standard input), or, with keys only, one
    /// nobody holds (the server then refuses the secret mode outright).
    fn secret(&self) -> Result<Secret, ServeError> {
        match (self.key_file.as_deref(), &self.keys) {
            (Some(f), _) if f.as_os_str() == "-" => Ok(Secret::read_from(std::io::stdin().lock())?),
            (Some(f), _) => Ok(Secret::load(f)?),
            (None, Some(_)) => Ok(Secret::generate()?),
            (None, None) => Err(ServeError::NoKey),
        }
    }

    /// The server's configuration, with the floors applied.
    pub fn config(self) -> Result<ServerConfig, ServeError> {
        let secret = self.secret()?;
        let listen = resolve(&self.listen)?;
        let mut cfg = ServerConfig::bench_only(listen, secret);
        cfg.root = self.root;
        cfg.bench.limits.max_duration_ms = u64::try_from(self.max_duration.as_millis()).unwrap_or(u64::MAX);
        cfg.bench.limits.max_connections = self.max_connections;
        cfg.bench.limits.max_rate_bps = self.max_rate.unwrap_or(u64::MAX);
        cfg.bench.max_tests = self.max_tests.max(1);
        cfg.bench.handshake_timeout = at_least_1s(self.handshake_timeout);
        cfg.bench.data_ports = self.data_ports;
        cfg.max_handshakes_per_source = self.max_handshakes_per_source.max(1);
        cfg.once = self.once;
        cfg.first_connect_deadline = self.once.then(|| at_least_1s(self.connect_deadline));
        cfg.max_sessions = self.max_sessions.max(1);
        cfg.max_buffer_memory = usize::try_from(self.max_buffer_memory).unwrap_or(usize::MAX).max(1 << 20);
        cfg.shutdown_grace = self.shutdown_grace;
        cfg.handshake_timeout = at_least_1s(self.handshake_timeout);
        cfg.idle_timeout = at_least_1s(self.idle_timeout);
        cfg.log = !self.quiet;
        cfg.log_format = self.log_format;
        cfg.rate_per_client = self.max_rate_per_client;
        cfg.rate_total = self.max_rate_total;
        cfg.accept_secret = self.key_file.is_some();
        cfg.keys = self.keys;
        cfg.metrics = self.metrics;
        cfg.mesh_targets = self.mesh_targets;
        // A server started through ssh has them already (ServerConfig::ssh_user).
        cfg.keep_owners |= self.keep_owners;
        cfg.allow_devices |= self.allow_devices;
        Ok(cfg)
    }

    /// The server, listening: its key read, its address resolved, its configuration built.
    pub fn bind(self) -> Result<Server, ServeError> {
        Ok(Server::bind(self.config()?)?)
    }

    /// What the agent shows as it starts with these options: the announce lines (with
    /// `announce`), the host key's line (`host_key`), its quiet and its copy caps.
    pub fn startup(&self, announce: bool, host_key: Option<(String, String)>) -> Startup {
        Startup {
            announce,
            quiet: self.quiet,
            host_key,
            rate_per_client: self.max_rate_per_client,
            rate_total: self.max_rate_total,
        }
    }
}

/// The first address `listen` resolves to.
fn resolve(listen: &str) -> Result<SocketAddr, ServeError> {
    listen.to_socket_addrs().ok().and_then(|mut i| i.next()).ok_or_else(|| ServeError::Listen(listen.to_string()))
}

/// A network in CIDR form (`198.18.0.0/15`); a bare address is that one address.
pub fn parse_net(s: &str) -> Result<ipnet::IpNet, String> {
    s.parse::<ipnet::IpNet>()
        .or_else(|_| s.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map(|n| n.trunc())
        .map_err(|_| format!("'{s}': a network such as 198.18.0.0/15 or fd00::/8, or one address"))
}

/// `--data-ports`: `LOW-HIGH` or one port, 1 to 65535.
pub fn parse_port_range(s: &str) -> Result<(u16, u16), String> {
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

/// A timeout from its flag: at least a second, as the flags always read a 0.
pub fn at_least_1s(d: Duration) -> Duration {
    d.max(Duration::from_secs(1))
}

/// The log line of `--max-rate-per-client` and `--max-rate-total`: only the caps given.
pub fn caps_line(each: Option<u64>, total: Option<u64>) -> String {
    let rate = |r: u64| format_rate(r as f64);
    match (each, total) {
        (Some(e), Some(t)) => format!("copy sessions capped at {} each, {} in total (split fairly)", rate(e), rate(t)),
        (Some(e), None) => format!("copy sessions capped at {} each", rate(e)),
        (None, Some(t)) => format!("copy sessions capped at {} in total (split fairly)", rate(t)),
        (None, None) => "copy sessions not capped".into(),
    }
}

/// What a started agent shows: the announce lines for whoever started it, or its log lines.
#[derive(Debug, Clone, Default)]
pub struct Startup {
    /// `--announce`: the listening (and metrics) address as lines for the starter to read.
    pub announce: bool,
    /// `--quiet`: no log lines but the host key's.
    pub quiet: bool,
    /// The host key's log line and fingerprint, logged even when quiet.
    pub host_key: Option<(String, String)>,
    /// `--max-rate-per-client`.
    pub rate_per_client: Option<u64>,
    /// `--max-rate-total`.
    pub rate_total: Option<u64>,
}

impl Startup {
    /// With `--announce`, `LINERATE <version> LISTEN <addr>` and, with metrics,
    /// `LINERATE <version> METRICS <addr>`: without them nobody can connect.
    pub fn announce_lines(&self, server: &Server) -> Vec<String> {
        let v = linerate_proto::PROTOCOL_VERSION;
        let mut lines = Vec::new();
        if self.announce {
            lines.push(format!("LINERATE {v} LISTEN {}", server.local_addr()));
            lines.extend(server.metrics_addr().map(|m| format!("LINERATE {v} METRICS {m}")));
        }
        lines
    }

    /// Logs where `server` listens (unless announced), its host key, its metrics address and
    /// its copy caps.
    pub fn log(&self, server: &Server, log: &Log) {
        if !self.announce && !self.quiet {
            let addr = server.local_addr().to_string();
            log.emit(Level::Info, &format!("listening on {addr}"), &[("listen", addr.as_str().into())]);
        }
        if let Some((note, fingerprint)) = &self.host_key {
            // Logged even with --quiet: clients compare this fingerprint on first contact.
            log.emit(Level::Info, note, &[("host_key", fingerprint.clone().into())]);
        }
        if let (Some(m), false) = (server.metrics_addr(), self.quiet) {
            log.emit(Level::Info, &format!("metrics on http://{m}/metrics"), &[("metrics", m.to_string().into())]);
        }
        if !self.quiet && (self.rate_per_client.is_some() || self.rate_total.is_some()) {
            log.emit(Level::Info, &caps_line(self.rate_per_client, self.rate_total), &[]);
        }
    }
}

/// The log line of a signal that brought the agent's stop to `stage`: the first stops it
/// accepting and gives running sessions `grace`, a second aborts them.
pub fn stop_line(stage: Stage, grace: Duration) -> (Level, String) {
    if stage == Stage::Stopping {
        let msg = format!(
            "stopping: no new sessions; running ones have {} to finish (signal again to abort them now)",
            units::significant(grace.as_secs_f64(), 3) + " s"
        );
        (Level::Info, msg)
    } else {
        (Level::Warn, "aborting the running sessions".into())
    }
}

/// How [`run`] ended, for the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Stopped, or its one session (`--once`) done without errors.
    Served,
    /// Its one session done, with errors.
    Partial,
    /// Its one session aborted.
    Aborted,
    /// The signals could not be wired or the server failed; the log says why.
    Failed,
}

/// `serve` once it listens: logs its start ([`Startup::log`]), has `signals` stop `server` by
/// stages (the first lets running sessions finish within `grace`, a second aborts them), each
/// signal logged unless quiet, and serves until stopped or its one session ends. Failures go
/// to `log` (its format), not to the caller.
pub fn run(
    server: Server,
    startup: &Startup,
    log: Log,
    grace: Duration,
    signals: impl FnOnce(&Stopper, Box<dyn FnMut(Stage) + Send>) -> std::io::Result<()>,
) -> Ended {
    startup.log(&server, &log);
    let signal_log = (!startup.quiet).then_some(log);
    let logged = signals(
        &server.stopper(),
        Box::new(move |stage| {
            if let Some(log) = signal_log {
                let (level, msg) = stop_line(stage, grace);
                log.emit(level, &msg, &[]);
            }
        }),
    );
    if let Err(e) = logged {
        log.emit(Level::Error, &format!("installing signal handlers: {e}"), &[]);
        return Ended::Failed;
    }
    match server.run() {
        Ok(Some(Outcome::Done(s))) if s.errors == 0 => Ended::Served,
        Ok(Some(Outcome::Done(_))) => Ended::Partial,
        Ok(Some(Outcome::Aborted(_))) => Ended::Aborted,
        Ok(None) => Ended::Served,
        Err(e) => {
            log.emit(Level::Error, &e.to_string(), &[]);
            Ended::Failed
        }
    }
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

    #[test]
    fn a_first_signal_gives_the_grace_and_a_second_aborts() {
        let (level, msg) = stop_line(Stage::Stopping, Duration::from_secs(30));
        assert_eq!(level, Level::Info);
        assert!(msg.contains("running ones have 30 s to finish"), "{msg}");
        assert_eq!(stop_line(Stage::Hurrying, Duration::from_secs(30)).1, "aborting the running sessions");
    }

    #[test]
    fn signals_that_cannot_be_wired_fail_the_run_before_it_serves() {
        let secret = Secret::generate().unwrap();
        let server = Server::bind(ServerConfig::bench_only("127.0.0.1:0".parse().unwrap(), secret)).unwrap();
        let startup = Startup { quiet: true, ..Startup::default() };
        let ended = run(server, &startup, Log::new(LogFormat::Text), Duration::from_secs(1), |_, _| {
            Err(std::io::Error::other("no handler"))
        });
        assert_eq!(ended, Ended::Failed);
    }
}
