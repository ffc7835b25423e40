//! `linerate bench`: flags → test specs (with sweeps and repeats), then the runs, printing the
//! live interval lines, the final table or CSV (rendered by `linerate_bench::text`) and
//! the JSON document (schema `linerate.bench/1`).

use crate::error::{Error, ResultExt};
use anyhow::{bail, Context, Result};
use clap::Args;
use linerate_bench::campaign::{Agent, Campaign, Observer, Repeat};
use linerate_bench::doc::{document, DocumentConfig};
use linerate_bench::stats::Point;
use linerate_bench::sweep;
use linerate_bench::text;
use linerate_bench::{BenchClient, BenchClientConfig, ClientTuning, LiveInterval, TestResult};
use linerate_model::units;
use linerate_net::conn;
use linerate_proto::bench::{Direction, Profile, TestKind, TestSpec};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
    #[arg(long, value_enum, default_value_t = Test::TcpStream)]
    test: Test,
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
    #[arg(short = 'n', long = "bytes", value_name = "SIZE", value_parser = parse_size64, conflicts_with = "blockcount")]
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
    #[arg(short = 'l', long, value_name = "SIZE", value_parser = parse_size32)]
    length: Option<u32>,
    /// Bytes per response (rr/crr).
    #[arg(long, value_name = "SIZE", value_parser = parse_size32)]
    response: Option<u32>,
    /// Socket buffers (SO_SNDBUF and SO_RCVBUF) on both sides.
    #[arg(short = 'w', long, value_name = "SIZE", value_parser = parse_size32)]
    window: Option<u32>,
    /// SO_SNDBUF only.
    #[arg(long, value_name = "SIZE", value_parser = parse_size32)]
    sndbuf: Option<u32>,
    /// SO_RCVBUF only.
    #[arg(long, value_name = "SIZE", value_parser = parse_size32)]
    rcvbuf: Option<u32>,
    /// Target: for stream tests a rate per stream, as iperf3's -b (2.5G, 1gbit, 50MB/s; -P 4 -b
    /// 100M sends 400 Mbit/s in all); for rr/crr transactions/s in all (open loop). UDP is
    /// paced at 1 Mbit/s per stream unless given, as iperf3's is. 0: unpaced.
    #[arg(short = 'b', long, value_name = "RATE", value_parser = parse_bench_rate)]
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
    #[arg(short = 'M', long = "set-mss", value_name = "SIZE", value_parser = parse_size32)]
    set_mss: Option<u32>,
    /// Pin the client's worker threads to core N and, with ,M, the server's for this test to
    /// its core M (iperf3 -A N,M). A core the host lacks is refused.
    #[arg(short = 'A', long = "affinity", value_name = "N[,M]", value_parser = parse_affinity)]
    affinity: Option<(Option<u32>, Option<u32>)>,
    /// Local port of the client's data connections (iperf3 --cport): with -P N they use PORT to
    /// PORT+N-1, for a firewall that admits known ports. tcp-stream, tcp-rr and udp-stream.
    #[arg(long, value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
    cport: Option<u16>,
    /// DSCP of the data packets, both ways (iperf3 --dscp): 0 to 63, or a name: ef, af11 to
    /// af43, cs0 to cs7. Sent as the TOS byte (IPv6: traffic class) DSCP × 4.
    #[arg(long, value_name = "DSCP", value_parser = parse_dscp, conflicts_with = "tos")]
    dscp: Option<u8>,
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

/// The furthest ahead `--start-at` may be: a day. A wait beyond it is more likely a wrong clock
/// or a unit mistake (seconds for milliseconds read the other way) than a plan, and a later start
/// is a scheduler's job (issue 42: an instant a year ahead waited silently).
const START_AT_AHEAD: Duration = Duration::from_secs(24 * 60 * 60);

/// The instant `--start-at UNIX_MS` names, seen at `now`: refused more than [`START_AT_AHEAD`]
/// ahead.
fn start_at(ms: u64, now: SystemTime) -> Result<SystemTime, String> {
    let at = UNIX_EPOCH.checked_add(Duration::from_millis(ms));
    let ahead = at.and_then(|t| t.duration_since(now).ok()).unwrap_or_default();
    match at {
        Some(at) if ahead <= START_AT_AHEAD => Ok(at),
        _ => Err(format!(
            "--start-at {ms} ({}) is {} ahead; at most a day ({} ms) is accepted (milliseconds since the Unix \
             epoch: now is {}; a later start is a job for a scheduler: cron, a systemd timer, `linerate mesh`)",
            linerate_model::time::rfc3339_millis(ms),
            if at.is_some() { span(ahead) } else { "too far".to_string() },
            START_AT_AHEAD.as_millis(),
            now.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis(),
        )),
    }
}

/// A span for people: `4.2 s`, `12 min 5 s`, `25 h 20 min`, `2 d 4 h`.
fn span(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{:.1} s", d.as_secs_f64()),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        3600..172_800 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} d {} h", s / 86_400, s % 86_400 / 3600),
    }
}

/// The UDP rate when none is given: iperf3's default, 1 Mbit/s.
const UDP_DEFAULT_RATE: u64 = 1_000_000;

/// A congestion control name, by the protocol's rule.
fn parse_congestion(s: &str) -> Result<String, linerate_proto::bench::BadCongestion> {
    linerate_proto::bench::check_congestion(s).map(|()| s.to_string())
}

/// iperf3's `-A N[,M]`: the client's core, and the server's (`,M` alone pins only the server's).
fn parse_affinity(s: &str) -> Result<(Option<u32>, Option<u32>), String> {
    let core = |t: &str| -> Result<Option<u32>, String> {
        match t.trim() {
            "" => Ok(None),
            t => t.parse().map(Some).map_err(|_| format!("-A {s:?}: cores are numbers, as N or N,M")),
        }
    };
    let (n, m) = match s.split_once(',') {
        Some((n, m)) => (core(n)?, core(m)?),
        None => (core(s)?, None),
    };
    if n.is_none() && m.is_none() {
        return Err(format!("-A {s:?}: give a core, as N or N,M"));
    }
    Ok((n, m))
}

/// A DSCP: 0 to 63, or a per-hop behaviour's name (RFC 2474, 2597, 3246), as iperf3 takes.
fn parse_dscp(s: &str) -> Result<u8, String> {
    let t = s.trim().to_ascii_lowercase();
    let named = match t.as_str() {
        "ef" => Some(46),
        _ => {
            t.strip_prefix("cs").and_then(|n| n.parse::<u8>().ok()).filter(|n| *n <= 7).map(|n| n << 3).or_else(|| {
                // afXY: class X 1..=4, drop precedence Y 1..=3 → 8X + 2Y.
                let d = t.strip_prefix("af")?.as_bytes();
                match d {
                    [x @ b'1'..=b'4', y @ b'1'..=b'3'] => Some(8 * (x - b'0') + 2 * (y - b'0')),
                    _ => None,
                }
            })
        }
    };
    match named.or_else(|| parse_byte(&t).filter(|v| *v <= 63)) {
        Some(v) => Ok(v),
        None => Err(format!("{s:?}: a DSCP is 0 to 63 or a name (ef, af11 to af43, cs0 to cs7)")),
    }
}

/// A TOS byte: 0 to 255, decimal or 0x hexadecimal.
fn parse_tos(s: &str) -> Result<u8, String> {
    parse_byte(s.trim()).ok_or_else(|| format!("{s:?}: a TOS byte is 0 to 255 (or 0x00 to 0xff)"))
}

fn parse_byte(t: &str) -> Option<u8> {
    match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u8::from_str_radix(h, 16).ok(),
        None => t.parse().ok(),
    }
}

/// `-b`: a rate in the one grammar, or 0 (any unit) for unpaced, as iperf3's `-b 0`.
fn parse_bench_rate(s: &str) -> Result<u64, String> {
    match units::parse_rate(s) {
        Ok(v) => Ok(v),
        Err(e) => {
            let t = s.trim();
            let num = &t[..t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len())];
            if num.parse::<f64>().is_ok_and(|v| v == 0.0) {
                Ok(0)
            } else {
                Err(e.to_string())
            }
        }
    }
}

/// The UDP datagram size when -l is not given, by iperf3's rule: the MSS of the control
/// connection (32 KiB on Linux loopback), else 1460 bytes; within what a datagram may carry.
fn udp_default_size(control_mss: Option<u32>) -> u32 {
    use linerate_proto::bench::{MAX_UDP_PAYLOAD, MIN_UDP_PAYLOAD};
    control_mss.unwrap_or(1460).clamp(MIN_UDP_PAYLOAD, MAX_UDP_PAYLOAD)
}

/// A size in the one grammar.
fn parse_size64(s: &str) -> Result<u64, String> {
    units::parse_size(s).map_err(|e| e.to_string())
}

/// A size in the one grammar that fits the protocol's 32 bits.
fn parse_size32(s: &str) -> Result<u32, String> {
    let v = units::parse_size(s).map_err(|e| e.to_string())?;
    u32::try_from(v).map_err(|_| format!("size {s:?} is over 4 GiB"))
}

fn pair(s: &str, what: &str) -> Result<(f64, f64)> {
    let (a, b) = s.split_once(',').with_context(|| format!("{what}: expected two numbers A,B, got {s:?}"))?;
    Ok((
        a.trim().parse().with_context(|| format!("{what}: {a:?}"))?,
        b.trim().parse().with_context(|| format!("{what}: {b:?}"))?,
    ))
}

/// A duration flag in whole milliseconds, rounded to the nearest (the wire's unit), at most
/// 10,000,000 s as before.
fn secs_ms(d: Duration, what: &str) -> Result<u64> {
    if d > Duration::from_secs(10_000_000) {
        bail!("{what} {d:?}: must be at most 10000000 s (about 115 days)");
    }
    Ok(((d.as_nanos() + 500_000) / 1_000_000) as u64)
}

/// `--test`: the test kinds a command line may ask for (a profile is `--profile`).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum Test {
    // One way bulk TCP (iperf3's default).
    TcpStream,
    // UDP at a rate (-u).
    UdpStream,
    // TCP request/response on open connections (netperf TCP_RR).
    TcpRr,
    // TCP connect, request/response, close (netperf TCP_CRR).
    TcpCrr,
}

/// The base test from the flags; `udp_size` is the datagram size when -l does not give one.
fn base_spec(a: &BenchArgs, udp_size: u32) -> Result<TestSpec> {
    let kind = match (a.profile.is_some(), a.test) {
        (true, _) => TestKind::Profile,
        _ if a.udp => TestKind::UdpStream,
        (_, Test::UdpStream) => TestKind::UdpStream,
        (_, Test::TcpRr) => TestKind::TcpRr,
        (_, Test::TcpCrr) => TestKind::TcpCrr,
        (_, Test::TcpStream) => TestKind::TcpStream,
    };
    let mut s = TestSpec::new(kind);
    s.connections = a.connections.unwrap_or(1);
    // With a byte count the clock is only a cap.
    let counted = a.bytes.is_some() || a.blockcount.is_some();
    s.duration_ms = secs_ms(a.time.unwrap_or(Duration::from_secs(if counted { 600 } else { 10 })), "--time")?;
    // -t 0: until Ctrl-C; the agent grants its cap as the duration.
    s.until_stopped = s.duration_ms == 0 && a.time.is_some();
    s.bytes = a.bytes;
    s.omit_ms = secs_ms(a.omit, "--omit")?;
    // -i 0 prints no interval lines; the samples are still taken, each second.
    s.interval_ms = match secs_ms(a.interval, "--interval")? {
        0 => 1000,
        ms => ms,
    };
    if kind == TestKind::UdpStream {
        s.msg_size = udp_size;
    }
    s.direction = if a.bidir {
        Direction::Bidir
    } else if a.reverse {
        Direction::Receive
    } else {
        Direction::Send
    };
    // iperf3's --bidir -P N: N connections each way, 2N in all
    s.each_way = a.bidir && kind == TestKind::TcpStream;
    if let Some(l) = a.length {
        s.msg_size = l;
        if a.response.is_none() && matches!(kind, TestKind::TcpRr | TestKind::TcpCrr) {
            s.resp_size = l;
        }
    }
    if let Some(r) = a.response {
        s.resp_size = r;
    }
    s.sndbuf = a.sndbuf.or(a.window);
    s.rcvbuf = a.rcvbuf.or(a.window);
    // For stream tests a rate per stream here, made the total by `sweep::rate_per_stream`
    // once each point's connection count is known.
    s.rate = match (kind, a.rate) {
        // Paced by default, as iperf3's UDP is (1 Mbit/s); 0 asks for no pacing.
        (TestKind::UdpStream, None) if a.pps.is_none() => Some(UDP_DEFAULT_RATE),
        (_, Some(0)) => None,
        (_, r) => r,
    };
    if let Some(pps) = a.pps {
        if kind != TestKind::UdpStream {
            bail!("--pps applies to udp-stream");
        }
        s.rate = Some(pps.saturating_mul(u64::from(s.msg_size)).saturating_mul(8));
    }
    s.zerocopy = a.zerocopy;
    // The test kind's default (on for request/response) unless a flag says.
    s.nodelay = (s.nodelay || a.nodelay) && !a.no_nodelay;
    s.congestion = a.congestion.clone();
    s.tos = a.tos.or(a.dscp.map(|d| d << 2));
    if a.gsro && kind != TestKind::UdpStream {
        bail!("--gsro applies to udp-stream (-u)");
    }
    s.gsro = a.gsro;
    s.server_cpu = a.affinity.and_then(|(_, m)| m);
    if let Some(p) = &a.profile {
        let text = std::fs::read_to_string(p).with_context(|| format!("reading profile {}", p.display()))?;
        let mut prof: Profile = toml::from_str(&text).with_context(|| format!("profile {}", p.display()))?;
        if let Some(n) = a.connections {
            match prof.groups.as_mut_slice() {
                [g] => g.connections = n,
                _ => bail!("-P applies to a profile with one group; {} has {}", p.display(), prof.groups.len()),
            }
        }
        prof.validate().map_err(anyhow::Error::msg).with_context(|| format!("profile {}", p.display()))?;
        s.profile = Some(prof);
    }
    Ok(s)
}

/// Run `linerate bench`: 0 the test ran, 2 bad usage or a test the server refused, 3 the
/// session failed.
pub fn run(a: BenchArgs) -> crate::error::Result {
    if a.iperf3_server {
        return run_as_server(&a);
    }
    // Not clap's `requires`: a flag's default value (false) would satisfy it.
    if a.one_off || a.bind.is_some() {
        return Err(Error::usage("-1 and -B are the server's (iperf3 -s -1 -B ADDR): add -s to run the agent"));
    }
    run_inner(&a)
}

/// iperf3's `-s`: the agent, answering benchmarks only, as `linerate serve` with the same
/// key file; `-1` serves one session (`--once`).
fn run_as_server(a: &BenchArgs) -> crate::error::Result {
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
    let s = super::serve::serve_args(argv).map_err(|e| Error::usage(format!("-s: {e}")))?;
    super::serve::run_serve(s)
}

/// Every point of the run: the base test, its sweep, the block count (-k) and the rate per
/// stream (-b) made totals; `udp_size` as for [`base_spec`].
fn make_points(a: &BenchArgs, udp_size: u32) -> Result<Vec<sweep::SweepPoint>> {
    let base = base_spec(a, udp_size)?;
    let mut points = sweep::points(&base, &a.sweep)?;
    sweep::count_blocks(&mut points, a.blockcount);
    if a.pps.is_none() {
        sweep::rate_per_stream(&mut points);
    }
    Ok(points)
}

fn run_inner(a: &BenchArgs) -> crate::error::Result {
    let mut points = make_points(a, udp_default_size(None)).usage()?;
    // Before anything is sent: a start too far ahead is refused at once.
    let start =
        a.start_at.map(|ms| start_at(ms, SystemTime::now()).map(|at| (ms, at))).transpose().map_err(Error::usage)?;
    // `--repeat N`: exactly N runs (hyperfine's `--runs N`); MIN,MAX: until confident
    let (rmin, rmax) = match a.repeat.trim().parse::<f64>() {
        Ok(n) => (n, n),
        Err(_) => pair(&a.repeat, "--repeat").usage()?,
    };
    let (level, width) = pair(&a.confidence, "--confidence").usage()?;
    let repeat = Repeat::new(rmin, rmax, level, width);
    if a.json_iperf3 {
        use linerate_model::doc::iperf3::NotIperf3;
        if points.len() != 1 || repeat.max > 1 {
            return Err(Error::usage(format!("--json-iperf3: {}", NotIperf3::NotOnePoint)));
        }
        if let Some((_, s)) = points.iter().find(|(_, s)| !matches!(s.kind, TestKind::TcpStream | TestKind::UdpStream))
        {
            return Err(Error::usage(format!("--json-iperf3: {}", NotIperf3::Kind(s.kind.name().into()))));
        }
    }
    if let Some(path) = &a.hgrm {
        if let Some(why) = hgrm_refusal(&points, repeat.max) {
            return Err(Error::usage(format!("--hgrm: {why}")));
        }
        // An unwritable PATH is found now, not after the test.
        check_writable(path).map_err(|e| Error::usage(format!("--hgrm {}: {e}", shown(path))))?;
    }
    // Every rule that does not depend on the server's caps, before anything is printed.
    let open = linerate_proto::bench::Limits { max_duration_ms: u64::MAX, ..Default::default() };
    for (_, spec) in &points {
        let mut s = spec.clone();
        s.grant_until_stopped(&open);
        s.validate(&open).map_err(Error::usage)?;
    }
    let server = a.server.as_deref().or(a.client.as_deref()).unwrap_or_default();
    let family = if a.ipv4 {
        Some(4)
    } else if a.ipv6 {
        Some(6)
    } else {
        None
    };
    let addr = linerate_net::addr::resolve(server, family, a.port).usage()?;
    let tuning = ClientTuning { mss: a.set_mss, cport: a.cport, cpu: a.affinity.and_then(|(n, _)| n) };
    for (_, spec) in &points {
        linerate_bench::check_local_options(spec, &tuning, addr)?;
    }
    let (secret, key_auth) = a.keys.resolve(linerate_net::addr::host_of(server), addr.port(), "the server").usage()?;
    let cfg = BenchClientConfig {
        addr,
        secret,
        key_auth,
        suite: conn::preferred_suite(),
        timeout: a.timeout.max(Duration::from_secs(1)),
        tuning,
    };
    // The report (live lines, tables, the JSON or CSV document) goes to stdout, or with
    // --logfile to the end of that file; diagnostics to stderr.
    let to = match &a.logfile {
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
    // The JSON and CSV documents stay machine-readable: no prefixes.
    let plain = a.json || a.csv || a.json_iperf3;
    let mut out = Out { to, title: a.title.clone().filter(|_| !plain), timestamps: a.timestamps && !plain };
    let mut client = BenchClient::connect(cfg.clone())?;
    if a.length.is_none() && points.iter().any(|(_, s)| s.kind == TestKind::UdpStream) {
        // iperf3's datagram size is the control connection's MSS, known only now.
        points = make_points(a, udp_default_size(client.control_mss())).usage()?;
    }
    // A closed standard output or error (`| head`) ends the test at once, quietly; Ctrl-C or
    // SIGTERM ends it in order, as its end would: what it measured is printed and saved (iperf3
    // -t 0 ends so); a second one ends the process at once (`main`, told by `ending`), which
    // also says whether a signal, not a closed pipe, stopped it.
    let stopper = linerate_model::shutdown::Stopper::new();
    crate::out::stop_on_close(&stopper);
    crate::ending::interrupt_on_signals(&stopper).context("installing signal handlers").internal()?;
    let stop = stopper.shutdown();
    client.cancel_on(stop.clone());
    if let Some((ms, at)) = start {
        // A scheduled start (`--start-at`), the one wait here that is a time, not an event; Ctrl-C
        // ends it as it would end a test.
        if let Ok(wait) = at.duration_since(SystemTime::now()) {
            if wait >= Duration::from_secs(1) {
                errln!(
                    "linerate bench: connected; waiting {} for --start-at {ms} ({}) before the first test",
                    span(wait),
                    linerate_model::time::rfc3339_millis(ms)
                )?;
            }
            if stop.wait_timeout(wait) {
                let kind = if crate::ending::signalled() {
                    crate::error::Kind::Interrupted
                } else {
                    crate::error::Kind::Closed
                };
                return Err(Error::reported(kind));
            }
        }
    }
    let live = !(a.quiet || a.json || a.csv || a.json_iperf3);
    let mut printer = Printer {
        out: &mut out,
        addr,
        live,
        lines: live && !a.interval.is_zero(),
        tables: !(a.json || a.csv || a.json_iperf3),
        level: repeat.level,
        hgrm_path: a.hgrm.as_deref(),
        hgrm: Vec::new(),
    };
    let link = a.link_rate.map(|r| (r as f64, a.mtu));
    let mut agent = Agent::new(cfg, client, stop.clone());
    let done = Campaign::new(points, repeat, link).run(&mut agent, &stop, &mut printer)?;
    // `--hgrm`'s files, rendered once the test has run.
    let hgrm = std::mem::take(&mut printer.hgrm);
    let cfg = DocumentConfig {
        addr,
        tuning: &tuning,
        level: repeat.level,
        width_pct: repeat.width_pct,
        version: env!("CARGO_PKG_VERSION"),
    };
    let doc = document(&done, &cfg);
    if !a.no_save && !done.is_empty() {
        let saved = linerate_report::from_bench(&doc)
            .internal()
            .and_then(|run| linerate_report::store::save_run(a.db.as_deref(), &run).map_err(Error::from));
        match saved {
            Ok(id) if !(a.quiet || a.json || a.csv || a.json_iperf3) => {
                errln!("saved as run {id} (linerate report show {id})")?
            }
            Ok(_) => {}
            Err(e) => errln!("linerate bench: warning: the run was not saved: {e:#}")?,
        }
    }
    if a.json_iperf3 {
        let i =
            linerate_model::doc::iperf3::from_bench(&doc).map_err(|e| Error::usage(format!("--json-iperf3: {e}")))?;
        out.say(&serde_json::to_string_pretty(&i).internal()?)?;
    } else if a.json {
        out.say(&serde_json::to_string(&doc).internal()?)?;
    } else if a.csv {
        out.say(text::csv(&done).trim_end())?;
    } else if done.len() > 1 {
        out.say(&text::sweep_table(&done))?;
    }
    for (path, text, transactions) in &hgrm {
        write_atomically(path, text).with_context(|| format!("--hgrm: writing {}", shown(path))).io()?;
        if !(a.quiet || a.json || a.csv) {
            errln!("latency histogram ({transactions} transactions) written to {}", shown(path))?;
        }
    }
    if hgrm.first().is_some_and(|(_, _, n)| *n == 0) {
        errln!("linerate bench: warning: --hgrm: no transaction was timed after the warm-up: the file holds none")?;
    }
    // Ctrl-C is how a test until stopped (-t 0) ends; any other test it cut short says so.
    if crate::ending::signalled() && !done.iter().all(|p| p.result.spec.until_stopped) {
        return Err(Error::reported(crate::error::Kind::Interrupted));
    }
    Ok(())
}

/// Why `--hgrm` cannot take these points (`rmax` runs each), if it cannot: it writes the one
/// histogram of one test (a sweep's points or a point's repeats would each need a file, and the
/// figures printed for repeats are means that no one histogram holds), and only tests that time
/// transactions have one.
fn hgrm_refusal(points: &[sweep::SweepPoint], rmax: usize) -> Option<String> {
    if points.len() != 1 || rmax > 1 {
        return Some(
            "one test writes one histogram: a --sweep or --repeat is refused (run each point on its own, each with its \
             own --hgrm)"
                .into(),
        );
    }
    let kind = points.first()?.1.kind;
    matches!(kind, TestKind::TcpStream | TestKind::UdpStream).then(|| {
        format!(
            "a {} test times no transactions, so it has no latency: give tcp-rr, tcp-crr or a --profile",
            kind.name()
        )
    })
}

/// A path for messages, control characters escaped.
fn shown(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    linerate_proto::name::escape(path.as_os_str().as_bytes())
}

/// The directory a file at `path` is written in.
fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// Whether a file can be written at `path`: `path` is no directory, its directory is one, and
/// a temporary file can be made in it (and is removed at once).
fn check_writable(path: &Path) -> std::io::Result<()> {
    use std::io::{Error, ErrorKind};
    if path.is_dir() {
        return Err(Error::new(ErrorKind::IsADirectory, "is a directory"));
    }
    let dir = dir_of(path);
    // A missing directory (or a file in its place) is named as such, not by a temporary name.
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(Error::new(ErrorKind::NotADirectory, format!("{} is not a directory", shown(dir)))),
        Err(e) => return Err(Error::new(e.kind(), format!("{}: {e}", shown(dir)))),
    }
    tempfile::Builder::new().prefix(".linerate-hgrm-").tempfile_in(dir).map(drop)
}

/// Write `text` at `path` whole or not at all: into a temporary file beside it (mode 0666 less
/// the umask, as a file the shell creates), flushed to disk, then renamed over `path`.
fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut tmp = tempfile::Builder::new()
        .prefix(".linerate-hgrm-")
        .permissions(std::fs::Permissions::from_mode(0o666))
        .tempfile_in(dir_of(path))?;
    tmp.write_all(text.as_bytes())?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// `--hgrm PATH`'s files for a test that ran: PATH with every transaction, and with a profile of
/// two or more groups each group's at PATH with `.gN` before its extension (`rrul.hgrm` →
/// `rrul.g3.hgrm` for the third `[[group]]`), a group without transactions an empty distribution;
/// with each file the number of transactions it holds.
fn hgrm_files(path: &Path, r: &TestResult) -> Vec<(PathBuf, String, u64)> {
    use linerate_bench::hgrm::latency_hgrm;
    let Some(all) = &r.histogram else { return Vec::new() };
    let mut files = vec![(path.to_path_buf(), latency_hgrm(all), all.len())];
    if r.group_histograms.len() >= 2 {
        for (i, h) in r.group_histograms.iter().enumerate() {
            files.push((group_path(path, i + 1), latency_hgrm(h), h.len()));
        }
    }
    files
}

/// `PATH` with `.gN` before its extension: `x.hgrm` → `x.g2.hgrm`, `x` → `x.g2`.
fn group_path(path: &Path, n: usize) -> PathBuf {
    let mut name = path.file_stem().unwrap_or_default().to_os_string();
    name.push(format!(".g{n}"));
    if let Some(ext) = path.extension() {
        name.push(".");
        name.push(ext);
    }
    path.with_file_name(name)
}

/// Where the report goes, and what each of its lines starts with (-T, --timestamps).
struct Out {
    /// `--logfile`, or standard output.
    to: Option<std::fs::File>,
    title: Option<String>,
    timestamps: bool,
}

impl Out {
    /// Each line of `text`, prefixed; a closed stdout (`| head`) is [`crate::error::Kind::Closed`].
    fn say(&mut self, text: &str) -> crate::error::Result {
        let mut all = String::new();
        for line in text.split('\n') {
            let mut prefix = String::new();
            if self.timestamps {
                let ms = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64);
                prefix += &linerate_model::time::rfc3339_millis(ms);
                prefix.push(' ');
            }
            if let Some(t) = &self.title {
                prefix += t;
                prefix += ":  ";
            }
            all += &format!("{prefix}{line}\n");
        }
        match &mut self.to {
            Some(f) => f.write_all(all.as_bytes()).context("writing the report (--logfile)").io(),
            None => crate::out::bytes(crate::out::To::Out, all.as_bytes()),
        }
    }
}

/// What `linerate bench` shows of a campaign as it runs: each point's banner, the live lines,
/// the table after each point and its warnings; and `--hgrm`'s files, rendered from the last
/// point's histograms.
struct Printer<'a> {
    out: &'a mut Out,
    addr: std::net::SocketAddr,
    /// Banners and the agent's grant (not with -q, --json, --csv, --json-iperf3).
    live: bool,
    /// The interval lines and the receiver's (live, and not -i 0).
    lines: bool,
    /// The table of each point (not with a document on stdout).
    tables: bool,
    level: u32,
    hgrm_path: Option<&'a Path>,
    hgrm: Vec<(PathBuf, String, u64)>,
}

impl Observer for Printer<'_> {
    type Error = Error;

    fn point(&mut self, labels: &[(String, String)], spec: &TestSpec) -> crate::error::Result {
        if self.live {
            self.out.say(&text::banner(spec, &self.addr, labels))?;
        }
        Ok(())
    }

    fn admitted(&mut self, spec: &TestSpec) {
        if let Some(l) = text::granted(spec).filter(|_| self.live) {
            let _ = self.out.say(&l);
        }
    }

    fn interval(&mut self, spec: &TestSpec, iv: &LiveInterval<'_>) {
        if self.lines {
            // A closed pipe stops the test (`run_inner`); the error is seen after it. With -P,
            // a line per stream and their sum, written at once.
            let _ = self.out.say(&text::interval_lines(spec, iv.counts, iv.streams));
        }
    }

    fn run(&mut self, r: &TestResult) -> crate::error::Result {
        let got = text::receiver_lines(r);
        if self.lines && !got.is_empty() {
            self.out.say(got.trim_end())?;
        }
        if crate::out::closed() {
            return Err(Error::reported(crate::error::Kind::Closed));
        }
        Ok(())
    }

    fn point_done(&mut self, p: &Point) -> crate::error::Result {
        if let Some(path) = self.hgrm_path {
            self.hgrm = hgrm_files(path, &p.result);
        }
        let (result, summary) = (&p.result, &p.summary);
        if self.tables {
            self.out.say(&text::table(result, summary, &p.runs, self.level))?;
        }
        let behind = result.latency.as_ref().and_then(|l| l.behind_schedule);
        if let Some(w) = text::missed_schedule(&result.spec, summary.transactions_per_s, behind) {
            errln!("linerate bench: warning: {w}")?;
        }
        if let Some(w) = text::interval_latency(&result.spec, result.latency.as_ref().map(|l| l.p50)) {
            errln!("linerate bench: warning: {w}")?;
        }
        if let Some(w) = text::coarse_fairness(&result.spec, summary.seconds, summary.fairness.as_ref()) {
            errln!("linerate bench: note: {w}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_at_is_refused_more_than_a_day_ahead() {
        let now = UNIX_EPOCH + Duration::from_millis(1_800_000_000_000);
        let day = 24 * 3600 * 1000;
        // Past, now, and exactly a day ahead are taken.
        assert_eq!(start_at(1_000, now), Ok(UNIX_EPOCH + Duration::from_millis(1_000)));
        assert!(start_at(1_800_000_000_000, now).is_ok());
        assert!(start_at(1_800_000_000_000 + day, now).is_ok());
        // A millisecond more is refused, naming the bound; so is a year, and the end of time.
        let e = start_at(1_800_000_000_000 + day + 1, now).unwrap_err();
        assert!(e.contains("at most a day (86400000 ms)") && e.contains("24 h 0 min ahead"), "{e}");
        let e = start_at(1_800_000_000_000 + 365 * day, now).unwrap_err();
        assert!(e.contains("365 d 0 h ahead") && e.contains("now is 1800000000000"), "{e}");
        assert!(start_at(u64::MAX, now).is_err());
        assert_eq!(span(Duration::from_millis(4_300)), "4.3 s");
        assert_eq!(span(Duration::from_secs(725)), "12 min 5 s");
        assert_eq!(span(Duration::from_secs(3 * 3600 + 20 * 60)), "3 h 20 min");
    }

    #[test]
    fn dscp_names_and_numbers_and_tos_bytes_parse() {
        for (s, v) in [("ef", 46), ("EF", 46), ("af11", 10), ("af23", 22), ("af41", 34), ("af43", 38)] {
            assert_eq!(parse_dscp(s), Ok(v), "{s}");
        }
        for (s, v) in [("cs0", 0), ("cs1", 8), ("cs6", 48), ("cs7", 56), ("0", 0), ("63", 63), ("0x2e", 46)] {
            assert_eq!(parse_dscp(s), Ok(v), "{s}");
        }
        for bad in ["64", "af44", "af51", "af1", "cs8", "", "-1", "ef1"] {
            assert!(parse_dscp(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_tos("0xb8"), Ok(0xb8));
        assert_eq!(parse_tos("184"), Ok(184));
        assert!(parse_tos("256").is_err());
        let a = parse(&["--dscp", "af21"]);
        assert_eq!(base_spec(&a, 1460).unwrap().tos, Some(18 << 2), "sent as the TOS byte, DSCP × 4");
        assert_eq!(base_spec(&parse(&["-S", "0x10"]), 1460).unwrap().tos, Some(0x10));
    }

    #[test]
    fn gsro_is_off_unless_asked_and_only_for_udp() {
        assert!(!base_spec(&parse(&["-u"]), 1460).unwrap().gsro, "one datagram a packet by default");
        assert!(base_spec(&parse(&["-u", "--gsro"]), 1460).unwrap().gsro);
        let e = base_spec(&parse(&["--gsro"]), 1460).unwrap_err().to_string();
        assert!(e.contains("--gsro applies to udp-stream"), "{e}");
    }

    #[test]
    fn affinity_takes_the_client_core_and_the_server_core() {
        assert_eq!(parse_affinity("1"), Ok((Some(1), None)));
        assert_eq!(parse_affinity("1,0"), Ok((Some(1), Some(0))));
        assert_eq!(parse_affinity(",3"), Ok((None, Some(3))));
        for bad in ["", ",", "x", "1,y", "-1"] {
            assert!(parse_affinity(bad).is_err(), "{bad:?}");
        }
        assert_eq!(base_spec(&parse(&["-A", "0,1"]), 1460).unwrap().server_cpu, Some(1));
    }

    #[test]
    fn a_byte_or_block_count_makes_the_time_a_cap() {
        let s = base_spec(&parse(&["-n", "10M"]), 1460).unwrap();
        assert_eq!((s.bytes, s.duration_ms), (Some(10 << 20), 600_000));
        let s = base_spec(&parse(&["-n", "1G", "-t", "30"]), 1460).unwrap();
        assert_eq!((s.bytes, s.duration_ms), (Some(1 << 30), 30_000));
        assert_eq!(base_spec(&parse(&[]), 1460).unwrap().duration_ms, 10_000);
        let a = parse(&["-k", "100", "-l", "1K", "--sweep", "msg=1K,2K"]);
        let mut pts = sweep::points(&base_spec(&a, 1460).unwrap(), &a.sweep).unwrap();
        sweep::count_blocks(&mut pts, a.blockcount);
        assert_eq!(pts.iter().map(|p| p.1.bytes).collect::<Vec<_>>(), [Some(102_400), Some(204_800)]);
        assert!(text::banner(&pts[0].1, &"127.0.0.1:1".parse().unwrap(), &[]).contains("until 100 KiB are sent"));
    }

    /// The flags of `linerate bench HOST ARGS...`.
    fn parse(args: &[&str]) -> BenchArgs {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            a: BenchArgs,
        }
        let argv = ["bench", "127.0.0.1", "--key-file", "k"].iter().chain(args);
        <Cli as clap::Parser>::try_parse_from(argv).unwrap_or_else(|e| panic!("{e}")).a
    }

    #[test]
    fn iperf3s_b_t_and_i_zero_and_its_udp_datagram_rule() {
        for (s, v) in [("0", 0), ("0M", 0), ("0.0G", 0), ("100M", 100_000_000), ("1gbit", 1_000_000_000)] {
            assert_eq!(parse_bench_rate(s), Ok(v), "{s}");
        }
        for bad in ["0.1", "x", "-1M", ""] {
            assert!(parse_bench_rate(bad).is_err(), "{bad:?}");
        }
        // -b per stream, as iperf3's: four streams of 100 Mbit/s are 400 in all.
        let pts = make_points(&parse(&["-P", "4", "-b", "100M"]), 1460).unwrap();
        assert_eq!(pts[0].1.rate, Some(400_000_000));
        let pts = make_points(&parse(&["-u", "-P", "2"]), 1460).unwrap();
        assert_eq!(pts[0].1.rate, Some(2 * UDP_DEFAULT_RATE), "iperf3's 1 Mbit/s per UDP stream");
        for args in [&["-b", "0"][..], &["-u", "-b", "0"], &["--test", "tcp-rr", "-b", "0"]] {
            assert_eq!(make_points(&parse(args), 1460).unwrap()[0].1.rate, None, "{args:?}: unpaced");
        }
        let a = parse(&["-u", "-P", "2", "--pps", "1000", "-l", "100"]);
        assert_eq!(make_points(&a, 1460).unwrap()[0].1.rate, Some(800_000), "--pps is in all");
        let rr = parse(&["--test", "tcp-rr", "-P", "4", "-b", "1000"]);
        assert_eq!(make_points(&rr, 1460).unwrap()[0].1.rate, Some(1000), "transactions/s in all");
        // -t 0: until stopped, the duration the agent's grant; -i 0: no lines, samples each second.
        let s = base_spec(&parse(&["-t", "0", "-i", "0"]), 1460).unwrap();
        assert!(s.until_stopped && s.duration_ms == 0 && s.interval_ms == 1000, "{s:?}");
        assert!(!base_spec(&parse(&["-t", "1"]), 1460).unwrap().until_stopped);
        // The UDP datagram: the control connection's MSS (32 KiB on loopback), else 1460.
        assert_eq!(udp_default_size(Some(32_768)), 32_768);
        assert_eq!(udp_default_size(None), 1460);
        assert_eq!(udp_default_size(Some(65_483)), 65_483);
        assert_eq!(udp_default_size(Some(1)), linerate_proto::bench::MIN_UDP_PAYLOAD);
        assert_eq!(base_spec(&parse(&["-u"]), 32_768).unwrap().msg_size, 32_768);
        assert_eq!(base_spec(&parse(&["-u", "-l", "64"]), 32_768).unwrap().msg_size, 64, "-l wins");
    }

    #[test]
    fn hgrm_takes_one_request_response_test_and_refuses_streams_sweeps_and_repeats() {
        let refusal = |args: &[&str], rmax| hgrm_refusal(&make_points(&parse(args), 1460).unwrap(), rmax);
        assert_eq!(refusal(&["--test", "tcp-rr"], 1), None);
        assert_eq!(refusal(&["--test", "tcp-crr", "-P", "4", "-b", "1000"], 1), None);
        for (args, rmax, want) in [
            (&["--test", "tcp-stream"][..], 1, "a tcp-stream test times no transactions"),
            (&["-u"], 1, "a udp-stream test times no transactions"),
            (&["--test", "tcp-rr", "--sweep", "msg=1,1K"], 1, "a --sweep or --repeat is refused"),
            (&["--test", "tcp-rr"], 3, "a --sweep or --repeat is refused"),
        ] {
            let why = refusal(args, rmax).unwrap_or_else(|| panic!("{args:?} ×{rmax} taken"));
            assert!(why.contains(want), "{args:?}: {why}");
        }
    }

    #[test]
    fn hgrm_files_are_written_whole_and_unwritable_paths_are_found_first() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("rr.hgrm");
        assert_eq!(group_path(&f, 3), dir.path().join("rr.g3.hgrm"));
        assert_eq!(group_path(Path::new("x"), 1), Path::new("x.g1"));
        check_writable(&f).unwrap();
        write_atomically(&f, "one\n").unwrap();
        write_atomically(&f, "two\n").unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "two\n", "replaced");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, [std::ffi::OsString::from("rr.hgrm")], "no temporary file left");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & 0o600, 0o600, "{mode:o}");
        // A missing directory, a directory, a path under a file: refused before any test.
        for bad in [dir.path().join("no/such/dir/x.hgrm"), dir.path().to_path_buf(), f.join("x.hgrm")] {
            assert!(check_writable(&bad).is_err(), "{}", bad.display());
            assert!(write_atomically(&bad, "x").is_err(), "{}", bad.display());
        }
    }

    #[test]
    fn sizes_fit_32_bits() {
        assert_eq!(parse_size32("64K"), Ok(65536));
        assert_eq!(parse_size32("64KiB"), Ok(65536));
        assert_eq!(parse_size32("64kB"), Ok(64000));
        assert!(parse_size32("8G").is_err());
        assert!(parse_size32("1.5").is_err());
    }

    #[test]
    fn shipped_profiles_parse_and_validate() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../profiles");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "toml") {
                let prof: Profile = toml::from_str(&std::fs::read_to_string(&p).unwrap())
                    .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                prof.validate().unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                n += 1;
            }
        }
        assert!(n >= 4, "profiles shipped: {n}");
    }
}
