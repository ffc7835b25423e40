//! `linerate serve`: the agent that receives copies beneath `--root` and answers benchmarks, for
//! many clients at once; SIGTERM/SIGINT stop it gracefully.

use crate::error::{Error, Kind};
use anyhow::Result;
use clap::Args;
use linerate_agent::log::{Level, Log, LogFormat};
use linerate_agent::serve::{self, at_least_1s, parse_net, parse_port_range, Ended, ServeOptions};
use linerate_model::units::{parse_buffer_memory, parse_duration};
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

pub fn run_serve(a: ServeArgs) -> crate::error::Result {
    if a.ssh.ssh_protocol {
        outln!("{}", linerate_remote::script::protocol_line(env!("CARGO_PKG_VERSION")))?;
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
    let key_note = keys
        .as_ref()
        .zip(a.keys.authorized_keys.as_deref())
        .map(|(k, f)| linerate_net::auth::credentials::host_key_note(k, f));
    let options = ServeOptions {
        listen: a.listen,
        key_file: a.key_file,
        keys,
        root: a.root,
        max_duration: a.max_duration,
        max_connections: a.max_connections,
        max_rate: a.max_rate,
        max_tests: a.max_tests,
        data_ports: a.data_ports,
        max_handshakes_per_source: a.max_handshakes_per_source,
        once: a.once,
        connect_deadline: a.ssh.connect_deadline,
        max_sessions: a.max_sessions,
        max_buffer_memory: a.max_buffer_memory,
        shutdown_grace: a.shutdown_grace,
        handshake_timeout: a.handshake_timeout,
        idle_timeout: a.idle_timeout,
        quiet: a.quiet,
        log_format: a.log_format,
        max_rate_per_client: a.max_rate_per_client,
        max_rate_total: a.max_rate_total,
        metrics: a.metrics,
        mesh_targets: a.mesh_targets,
        keep_owners: a.keep_owners,
        allow_devices: a.allow_devices,
    };
    let startup = options.startup(a.announce, key_note);
    let server = match options.bind() {
        Ok(s) => s,
        Err(e) => return fail(e.to_string(), Kind::Usage),
    };
    // Whoever started us reads the announce lines: without them nobody can connect.
    for l in startup.announce_lines(&server) {
        outln!("{l}")?;
    }
    // SIGTERM and SIGINT: the first lets running sessions finish within the grace, a second
    // aborts them now; each is logged (unless --quiet).
    match serve::run(server, &startup, log, a.shutdown_grace, crate::ending::stop_on_signals) {
        Ended::Served => Ok(()),
        Ended::Partial => Err(Error::reported(Kind::Partial)),
        Ended::Aborted | Ended::Failed => Err(Error::reported(Kind::Session)),
    }
}
