//! `linerate bench`: flags → test specs (with sweeps and repeats), then the runs, printing the
//! live interval lines, the final table or CSV (rendered by `linerate_bench::text`) and
//! the JSON document (schema `linerate.bench/1`).

use crate::error::{Error, Kind, ResultExt};
use anyhow::Context;
use clap::Args;
use linerate_bench::plan::{Affinity, Format, PlanConfig};
use linerate_bench::run::Output;
use linerate_bench::{BenchClientConfig, ClientTuning};
use linerate_model::doc::bench::BenchDocument;
use linerate_model::units;
use linerate_proto::bench::{parse_congestion, parse_tos, Dscp, TestKind};
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

const AFTER_HELP: &str = "\
TESTS:
  tcp-stream  bulk TCP (netperf TCP_STREAM, iperf3): -P connections, -l write size, -R, --bidir
  udp-stream  paced UDP (-u; -b bit/s per stream, 1 Mbit/s by default as in iperf3, 0 unpaced;
              or --pps in all); datagrams of the control connection's MSS unless -l (iperf3's
              rule); loss, reordering and jitter at the receiver
  tcp-rr      request/response on open connections (netperf TCP_RR): -l request, --response
  tcp-crr     connect/request/response/close (netperf TCP_CRR)
  --profile   a uperf-style TOML workload (see profiles/)
  rr and crr run closed-loop, or open-loop with --rate transactions/s, latency timed from the
  intended send (no coordinated omission).

SWEEPS AND REPEATS:
  --sweep msg=512,8K,64K --sweep buf=8K,64K --sweep conns=8,64,512  runs every combination.
  --repeat 3,10 --confidence 99,5  repeats each point 3 to 10 times until the 99% confidence
  interval is within 5% of the mean (netperf -i 10,3 -I 99,5).

IPERF3 HABITS:
  -c HOST, -p PORT, -4, -6, -u, -b, -l, -w, -R, --bidir, -O, -i, -J, -Z, -P, -t, -T,
  --timestamps, --logfile, -C ALGO, -M SIZE, --dscp, -S, --cport, -A N,M, -n SIZE, -k N and
  --gsro mean what they mean in iperf3 (with -n or -k, -t is a safety cap, 600 s unless given).
  -b is per stream (-P 4 -b 100M sends 400 Mbit/s in all), 0 unpaced; -t 0 runs until Ctrl-C,
  at most the agent's cap (said when it starts); -i 0 prints no interval lines.
  -s [-p PORT] [-B ADDR] [-1] --key-file FILE runs the agent for benchmarks, as `linerate
  serve --listen ADDR:PORT --key-file FILE [--once]` (the key is what iperf3 lacks: clients
  give the same file). The report goes to stdout (or --logfile), warnings and errors to stderr.

EXIT STATUS:
  0  the test ran     2  bad usage or a test the server refused     3  connection or protocol failure,
  or a --hgrm file that could not be written after the test";

/// `linerate bench` flags.
#[derive(Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct BenchArgs {
    /// The agent: HOST or HOST:PORT (default port 7878, or -p).
    #[arg(required_unless_present_any = ["client", "iperf3_server"], conflicts_with = "client")]
    server: Option<String>,
    /// The agent, as iperf3 names it (`-c HOST`): the same as giving HOST.
    #[arg(short = 'c', long, value_name = "HOST", hide_short_help = true)]
    client: Option<String>,
    /// Be the agent instead, as iperf3 -s: `linerate serve --listen 0.0.0.0:PORT --key-file
    /// FILE` for benchmarks (-p PORT, -B ADDR, -1, -6 apply; client options are refused).
    #[arg(short = 's', long = "server", requires = "key_file", conflicts_with_all = CLIENT_ONLY)]
    iperf3_server: bool,
    /// The agent's port, as iperf3 -p: the client's when HOST names none (default 7878); with
    /// -s the port to listen on.
    #[arg(short = 'p', long, value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
    port: Option<u16>,
    /// With -s, the address to listen on (iperf3 -B) [default: 0.0.0.0, or :: with -6].
    #[arg(short = 'B', long = "bind", value_name = "ADDR")]
    bind: Option<String>,
    /// Only IPv4 addresses of HOST (iperf3 -4).
    #[arg(short = '4', long = "ipv4", conflicts_with = "ipv6")]
    ipv4: bool,
    /// Only IPv6 addresses of HOST (iperf3 -6).
    #[arg(short = '6', long = "ipv6")]
    ipv6: bool,
    /// Prefix every line of the report with TITLE (iperf3 -T).
    #[arg(short = 'T', long, value_name = "TITLE")]
    title: Option<String>,
    /// Prefix every line of the report with the UTC time (iperf3 --timestamps).
    #[arg(long)]
    timestamps: bool,
    /// With -s, serve one session, then exit with its status (iperf3 -1; `serve --once`).
    #[arg(short = '1', long = "one-off")]
    one_off: bool,
    /// UDP, as iperf3's `-u`: the same as --test udp-stream.
    #[arg(short = 'u', long, conflicts_with = "test")]
    udp: bool,
    #[command(flatten)]
    keys: crate::keys::ClientKeyArgs,
    /// Test kind.
    #[arg(long, default_value = "tcp-stream", value_parser = test_kind())]
    test: TestKind,
    /// Parallel connections (1 to 10,000) [default: 1]. With a one-group --profile, the
    /// group's connection count.
    #[arg(short = 'P', long = "parallel")]
    connections: Option<u32>,
    /// Time to measure, a duration (10, 1.5s, 2m; a bare number is seconds, as iperf3's)
    /// [default: 10s]; with -n or -k, a safety cap [default then: 10m]. 0: until Ctrl-C, at
    /// most the agent's cap (iperf3 -t 0).
    #[arg(short = 't', long = "time", value_name = "DURATION", value_parser = units::parse_duration)]
    time: Option<Duration>,
    /// End once this many bytes are sent over all connections, the warm-up included (iperf3
    /// -n): a size (10M = 10 MiB). tcp-stream one way, or udp-stream sent by the client.
    #[arg(short = 'n', long = "bytes", value_name = "SIZE", value_parser = units::parse_size, conflicts_with = "blockcount")]
    bytes: Option<u64>,
    /// End once this many writes of -l bytes (UDP: datagrams) are sent (iperf3 -k).
    #[arg(short = 'k', long = "blockcount", value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    blockcount: Option<u64>,
    /// Warm-up run first and not counted (iperf3 -O): a duration (2, 500ms); a bare number is
    /// seconds.
    #[arg(short = 'O', long, value_name = "DURATION", default_value = "0s", value_parser = units::parse_duration)]
    omit: Duration,
    /// Time between interval reports (iperf3 -i): a duration (1, 0.5, 200ms); a bare number is
    /// seconds. 0: no interval lines (iperf3 -i 0).
    #[arg(short = 'i', long, value_name = "DURATION", default_value = "1s", value_parser = units::parse_duration)]
    interval: Duration,
    /// The server sends, the client receives.
    #[arg(short = 'R', long, conflicts_with = "bidir")]
    reverse: bool,
    /// Both directions at once on every connection.
    #[arg(long)]
    bidir: bool,
    /// Bytes per write (stream), request (rr/crr) or datagram (udp): a size (64K = 64KiB).
    #[arg(short = 'l', long, value_name = "SIZE", value_parser = units::parse_size32)]
    length: Option<u32>,
    /// Bytes per response (rr/crr).
    #[arg(long, value_name = "SIZE", value_parser = units::parse_size32)]
    response: Option<u32>,
    /// Socket buffers (SO_SNDBUF and SO_RCVBUF) on both sides.
    #[arg(short = 'w', long, value_name = "SIZE", value_parser = units::parse_size32)]
    window: Option<u32>,
    /// SO_SNDBUF only.
    #[arg(long, value_name = "SIZE", value_parser = units::parse_size32)]
    sndbuf: Option<u32>,
    /// SO_RCVBUF only.
    #[arg(long, value_name = "SIZE", value_parser = units::parse_size32)]
    rcvbuf: Option<u32>,
    /// Target: for stream tests a rate per stream, as iperf3's -b (2.5G, 1gbit, 50MB/s; -P 4 -b
    /// 100M sends 400 Mbit/s in all); for rr/crr transactions/s in all (open loop). UDP is
    /// paced at 1 Mbit/s per stream unless given, as iperf3's is. 0: unpaced.
    #[arg(short = 'b', long, value_name = "RATE", value_parser = units::parse_rate_or_zero)]
    rate: Option<u64>,
    /// UDP packets per second in all (sets --rate from the datagram size).
    #[arg(long)]
    pps: Option<u64>,
    /// Send with sendfile from a memory file (zero copy).
    #[arg(short = 'Z', long)]
    zerocopy: bool,
    /// TCP_NODELAY (the default for tcp-rr and tcp-crr, as sockperf's: their latency is then
    /// the network's, not Nagle's).
    #[arg(short = 'N', long)]
    nodelay: bool,
    /// Leave Nagle's algorithm on in tcp-rr and tcp-crr (small requests wait for the previous
    /// answer's ACK, as an application without TCP_NODELAY sees).
    #[arg(long, conflicts_with = "nodelay")]
    no_nodelay: bool,
    /// Run a TOML workload profile.
    #[arg(long, value_name = "FILE")]
    profile: Option<PathBuf>,
    /// Sweep a parameter: msg=..., buf=..., conns=... (repeatable; every combination runs).
    #[arg(long, value_name = "KEY=V1,V2,...")]
    sweep: Vec<String>,
    /// Runs per point, each a session of its own: N, or MIN,MAX (stops early once --confidence
    /// is met).
    #[arg(long, default_value = "1,1")]
    repeat: String,
    /// Confidence rule for repeats: LEVEL,WIDTH% (95 or 99; the interval's width in % of the mean).
    #[arg(long, default_value = "99,5")]
    confidence: String,
    /// Link rate for line-rate efficiency (10G, 10gbit).
    #[arg(long, value_name = "RATE", value_parser = units::parse_rate)]
    link_rate: Option<u64>,
    /// MTU for line-rate efficiency.
    #[arg(long, default_value_t = 1500)]
    mtu: u32,
    /// Print one JSON document (schema linerate.bench/1) on stdout (iperf3 -J).
    #[arg(short = 'J', long, conflicts_with = "csv")]
    json: bool,
    /// Print iperf3's -J document instead (its field names for what both tools have: end.sum_sent,
    /// end.sum_received, intervals[].sum...), so that parsers written for iperf3 read the test.
    /// One tcp-stream or udp-stream test: no --sweep, --repeat or profile.
    #[arg(long, conflicts_with_all = ["csv", "json"])]
    json_iperf3: bool,
    /// TCP congestion control on the data connections of both hosts (reno, cubic, bbr; iperf3
    /// -C); the kernel must offer it (sysctl net.ipv4.tcp_available_congestion_control).
    #[arg(short = 'C', long = "congestion", value_name = "ALGO", value_parser = parse_congestion)]
    congestion: Option<String>,
    /// TCP_MAXSEG of the client's data connections, set before they connect (iperf3 -M): a
    /// size, 88 to 32767 bytes. The kernel clamps the MSS both ways to it.
    #[arg(short = 'M', long = "set-mss", value_name = "SIZE", value_parser = units::parse_size32)]
    set_mss: Option<u32>,
    /// Pin the client's worker threads to core N and, with ,M, the server's for this test to
    /// its core M (iperf3 -A N,M). A core the host lacks is refused.
    #[arg(short = 'A', long = "affinity", value_name = "N[,M]")]
    affinity: Option<Affinity>,
    /// Local port of the client's data connections (iperf3 --cport): with -P N they use PORT to
    /// PORT+N-1, for a firewall that admits known ports. tcp-stream, tcp-rr and udp-stream.
    #[arg(long, value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
    cport: Option<u16>,
    /// DSCP of the data packets, both ways (iperf3 --dscp): 0 to 63, or a name: ef, af11 to
    /// af43, cs0 to cs7. Sent as the TOS byte (IPv6: traffic class) DSCP × 4.
    #[arg(long, value_name = "DSCP", conflicts_with = "tos")]
    dscp: Option<Dscp>,
    /// The whole TOS byte of the data packets, both ways (iperf3 -S): 0 to 255 (or 0x..) with the
    /// two ECN bits clear.
    #[arg(short = 'S', long, value_name = "TOS", value_parser = parse_tos)]
    tos: Option<u8>,
    /// UDP GSO and GRO (iperf3 3.19 --gsro), both hosts for this test: the kernel moves trains
    /// of datagrams, so a 64-byte test sends and receives far more datagrams than the wire
    /// carries packets, and jitter cannot be measured. Off by default: one datagram is one
    /// packet (sendmmsg/recvmmsg batching stays on). udp-stream only; the run records it.
    #[arg(long)]
    gsro: bool,
    /// Append the report (what goes to stdout) to FILE instead, as iperf3's --logfile.
    #[arg(long, value_name = "FILE")]
    logfile: Option<PathBuf>,
    /// Write the test's latency histogram to PATH as HdrHistogram's percentile distribution
    /// (.hgrm, microseconds, as wrk2 writes it; HdrHistogram's plotter and hdr-plot draw it):
    /// every transaction after the warm-up, over all connections. tcp-rr, tcp-crr or a profile
    /// (with two or more groups each group's too, at PATH with .gN before the extension); one
    /// test: no --sweep or --repeat. Written whole, then renamed over PATH.
    #[arg(long, value_name = "PATH")]
    hgrm: Option<PathBuf>,
    /// Print CSV (one row per sweep point) on stdout.
    #[arg(long)]
    csv: bool,
    /// No interval lines.
    #[arg(short, long)]
    quiet: bool,
    /// Time allowed to connect, authenticate and open the data connections: a duration (15s,
    /// 1m); a bare number is seconds. At least 1 s.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = units::parse_duration)]
    timeout: Duration,
    /// Connect and authenticate, then wait until this wall-clock instant (milliseconds since
    /// the Unix epoch) before the first test, so that clients started one after another
    /// measure at the same time (`linerate lab run` starts a group's members so). An instant
    /// already past starts at once; one more than a day ahead is refused. A wait of a second or
    /// more is said on stderr.
    #[arg(long, value_name = "UNIX_MS")]
    start_at: Option<u64>,
    /// Run store to save this run in (a SQLite file or a postgres:// URL) [default: $LINERATE_DB, else the user's data directory].
    #[arg(long, value_name = "PATH")]
    db: Option<PathBuf>,
    /// Do not save this run in the run store.
    #[arg(long)]
    no_save: bool,
}

/// `--test`: the kinds a command line names, listed in `--help` (a profile is `--profile`).
fn test_kind() -> impl clap::builder::TypedValueParser<Value = TestKind> {
    use clap::builder::TypedValueParser as _;
    let names = TestKind::NAMED.map(TestKind::name);
    clap::builder::PossibleValuesParser::new(names).try_map(|s| s.parse::<TestKind>())
}

/// The options that only a client has: refused with `-s`, which runs the agent instead.
const CLIENT_ONLY: [&str; 47] = [
    "server",
    "client",
    "title",
    "timestamps",
    "udp",
    "identity",
    "strict_host_key",
    "test",
    "connections",
    "time",
    "bytes",
    "blockcount",
    "omit",
    "interval",
    "reverse",
    "bidir",
    "length",
    "response",
    "window",
    "sndbuf",
    "rcvbuf",
    "rate",
    "pps",
    "zerocopy",
    "nodelay",
    "no_nodelay",
    "profile",
    "sweep",
    "repeat",
    "confidence",
    "json",
    "json_iperf3",
    "csv",
    "congestion",
    "set_mss",
    "affinity",
    "cport",
    "dscp",
    "tos",
    "gsro",
    "logfile",
    "hgrm",
    "link_rate",
    "timeout",
    "start_at",
    "db",
    "no_save",
];

/// Run `linerate bench`: 0 the test ran, 2 bad usage or a test the server refused, 3 the
/// session failed.
pub fn run(a: BenchArgs) -> crate::error::Result {
    // Not clap's `requires`: a flag's default value (false) would satisfy it.
    if a.one_off || a.bind.is_some() {
        return Err(Error::usage("-1 and -B are the server's (iperf3 -s -1 -B ADDR): add -s to run the agent"));
    }
    run_client(&a)
}

/// iperf3's `-s`: the agent, answering benchmarks only, as `linerate serve` with the same
/// key file; `-1` serves one session (`--once`). With `-s`, `linerate serve`'s arguments,
/// which `main` runs as that command.
pub fn server_argv(a: &BenchArgs) -> Option<crate::error::Result<Vec<std::ffi::OsString>>> {
    a.iperf3_server.then(|| serve_argv(a))
}

fn serve_argv(a: &BenchArgs) -> crate::error::Result<Vec<std::ffi::OsString>> {
    let Some(key) = &a.keys.key_file else { return Err(Error::usage("-s needs --key-file FILE")) };
    let host = match (&a.bind, a.ipv6) {
        (Some(b), _) => b.as_str(),
        (None, true) => "::",
        (None, false) => "0.0.0.0",
    };
    let mut argv: Vec<std::ffi::OsString> = vec!["--listen".into(), linerate_net::addr::host_port(host, a.port).into()];
    argv.extend(["--key-file".into(), key.into()]);
    if a.one_off {
        argv.push("--once".into());
    }
    if a.quiet {
        argv.push("--quiet".into());
    }
    Ok(argv)
}

/// What the flags ask of the tests.
fn plan_config(a: &BenchArgs) -> PlanConfig {
    PlanConfig {
        kind: Some(if a.udp { TestKind::UdpStream } else { a.test }),
        profile: a.profile.clone(),
        connections: a.connections,
        time: a.time,
        bytes: a.bytes,
        blockcount: a.blockcount,
        omit: a.omit,
        interval: a.interval,
        reverse: a.reverse,
        bidir: a.bidir,
        length: a.length,
        response: a.response,
        window: a.window,
        sndbuf: a.sndbuf,
        rcvbuf: a.rcvbuf,
        rate: a.rate,
        pps: a.pps,
        zerocopy: a.zerocopy,
        nodelay: a.nodelay,
        no_nodelay: a.no_nodelay,
        congestion: a.congestion.clone(),
        tos: a.tos.or(a.dscp.map(Dscp::tos)),
        gsro: a.gsro,
        affinity: a.affinity.unwrap_or_default(),
        sweep: a.sweep.clone(),
        repeat: a.repeat.clone(),
        confidence: a.confidence.clone(),
        link: a.link_rate.map(|r| (r as f64, a.mtu)),
        start_at: a.start_at,
        hgrm: a.hgrm.clone(),
        format: Format::of(a.json, a.csv, a.json_iperf3),
        quiet: a.quiet,
        title: a.title.clone(),
        timestamps: a.timestamps,
        version: env!("CARGO_PKG_VERSION"),
    }
}

fn run_client(a: &BenchArgs) -> crate::error::Result {
    let plan = plan_config(a).plan(SystemTime::now())?;
    let server = a.server.as_deref().or(a.client.as_deref()).unwrap_or_default();
    let addr = linerate_net::addr::resolve(server, linerate_net::addr::family(a.ipv4, a.ipv6), a.port).usage()?;
    let tuning = ClientTuning { mss: a.set_mss, cport: a.cport, cpu: a.affinity.and_then(|n| n.client) };
    plan.check_local(&tuning, addr)?;
    let (secret, key_auth) = a.keys.resolve(linerate_net::addr::host_of(server), addr.port(), "the server").usage()?;
    let suite = linerate_net::conn::preferred_suite();
    let timeout = a.timeout.max(Duration::from_secs(1));
    let cfg = BenchClientConfig { addr, secret, key_auth, suite, timeout, tuning };
    // The report (live lines, tables, the JSON or CSV document) goes to stdout, or with
    // --logfile to the end of that file; diagnostics to stderr.
    let log = match &a.logfile {
        Some(f) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(f)
                .with_context(|| format!("--logfile {}", f.display()))
                .usage()?,
        ),
        None => None,
    };
    // A closed standard output or error (`| head`) ends the test at once, quietly; Ctrl-C or
    // SIGTERM ends it in order, as its end would: what it measured is printed and saved (iperf3
    // -t 0 ends so); a second one ends the process at once (`main`, told by `ending`), which
    // also says whether a signal, not a closed pipe, stopped it.
    let stopper = linerate_model::shutdown::Stopper::new();
    crate::out::stop_on_close(&stopper);
    crate::ending::interrupt_on_signals(&stopper).context("installing signal handlers").internal()?;
    let said = !a.quiet && Format::of(a.json, a.csv, a.json_iperf3) == Format::Text;
    let mut printer = Printer { log, save: (!a.no_save).then_some(a.db.as_deref()), said };
    let Some(done) = plan.run(cfg, &stopper.shutdown(), &mut printer)? else {
        let stopped = if crate::ending::signalled() { Kind::Interrupted } else { Kind::Closed };
        return Err(Error::reported(stopped));
    };
    // Ctrl-C is how a test until stopped (-t 0) ends; any other test it cut short says so.
    if crate::ending::signalled() && !done.iter().all(|p| p.result.spec.until_stopped) {
        return Err(Error::reported(Kind::Interrupted));
    }
    Ok(())
}

/// Where `linerate bench` writes its run: the report to `--logfile` or standard output,
/// notes to standard error; the document saved in the run store.
struct Printer<'a> {
    /// `--logfile`, or standard output.
    log: Option<std::fs::File>,
    /// The store to save the run in (`--db`), unless `--no-save`.
    save: Option<Option<&'a std::path::Path>>,
    /// Whether the run's id is said once saved (not with -q or a document on stdout).
    said: bool,
}

impl Output for Printer<'_> {
    type Error = Error;

    fn report(&mut self, text: &str) -> crate::error::Result {
        match &mut self.log {
            Some(f) => f.write_all(text.as_bytes()).context("writing the report (--logfile)").io(),
            None => crate::out::bytes(crate::out::To::Out, text.as_bytes()),
        }
    }

    fn note(&mut self, line: &str) -> crate::error::Result {
        errln!("{line}")
    }

    fn check_open(&mut self) -> crate::error::Result {
        match crate::out::closed() {
            true => Err(Error::reported(Kind::Closed)),
            false => Ok(()),
        }
    }

    fn document(&mut self, doc: &BenchDocument) -> crate::error::Result {
        let Some(db) = self.save.filter(|_| !doc.points.is_empty()) else { return Ok(()) };
        let saved = linerate_report::from_bench(doc)
            .internal()
            .and_then(|run| linerate_report::store::save_run(db, &run).map_err(Error::from));
        match saved {
            Ok(id) if self.said => errln!("saved as run {id} (linerate report show {id})"),
            Ok(_) => Ok(()),
            Err(e) => errln!("linerate bench: warning: the run was not saved: {e:#}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flags of `linerate bench HOST ARGS...`, or clap's refusal.
    fn try_parse(args: &[&str]) -> Result<BenchArgs, clap::Error> {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            a: BenchArgs,
        }
        let argv = ["bench", "127.0.0.1", "--key-file", "k"].iter().chain(args);
        <Cli as clap::Parser>::try_parse_from(argv).map(|c| c.a)
    }

    fn parse(args: &[&str]) -> BenchArgs {
        try_parse(args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The first point's test that the flags `args` plan.
    fn spec(args: &[&str]) -> linerate_proto::bench::TestSpec {
        let plan = plan_config(&parse(args)).plan(SystemTime::now()).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        plan.points[0].1.clone()
    }

    #[test]
    fn flags_reach_the_planned_test() {
        assert_eq!(spec(&["--dscp", "af21"]).tos, Some(18 << 2), "sent as the TOS byte, DSCP × 4");
        assert_eq!(spec(&["-S", "0x10"]).tos, Some(0x10));
        assert_eq!(spec(&["-A", "0,1"]).server_cpu, Some(1));
        let udp = spec(&["-u", "-P", "2"]);
        assert_eq!((udp.kind, udp.msg_size, udp.rate), (TestKind::UdpStream, 1460, Some(2_000_000)));
        assert_eq!(spec(&["--test", "tcp-rr", "-l", "1K"]).resp_size, 1024);
        assert_eq!(spec(&["-P", "4", "-b", "100M"]).rate, Some(400_000_000), "-b per stream, as iperf3's");
        assert_eq!(spec(&["-b", "0"]).rate, None, "unpaced");
        let e = plan_config(&parse(&["--json-iperf3", "--test", "tcp-rr"])).plan(SystemTime::now()).unwrap_err();
        assert_eq!(e.to_string(), "--json-iperf3: iperf3's JSON has tcp-stream and udp-stream tests, not tcp-rr");
        for bad in [&["-A", "x"][..], &["--dscp", "64"], &["-l", "8G"], &["-C", "no such"], &["-b", "0.1"]] {
            assert!(try_parse(bad).is_err(), "{bad:?}");
        }
    }
}
