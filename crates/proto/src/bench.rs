//! The benchmark session (`linerate bench` against `linerate serve`): what a test asks for, the
//! server's admission rules, the preamble that binds a data connection to its test, the
//! per-message header of profile workloads, and the results each side reports.
//!
//! The control connection is the same authenticated, encrypted session as `cp`; its first frame
//! is a [`crate::frame::Frame::BenchRequest`] instead of `Begin`. Test data travels on plain TCP
//! (or UDP) connections to a per-test port, each opened with a [`DataHello`] that carries the
//! test's random cookie: benchmark payload is synthetic, so it is not encrypted, exactly as
//! iperf3 and netperf measure the network and not a cipher. [`ClientMachine`] and
//! [`ServerMachine`] enforce the order of frames on the control connection.

use crate::frame::Frame;
use crate::ProtoError;
use serde::{Deserialize, Serialize};

pub use linerate_model::doc::bench::{CpuShare, TcpStats};
use linerate_model::host::HostInfo;
pub use linerate_model::profile::{FlowOp, Group, Profile, Size, Transaction, MAX_GROUPS, MAX_OPS, MAX_PROFILE_MSG};

/// Version of the JSON documents in benchmark frames; bumped on incompatible change.
pub const BENCH_DOC_VERSION: u32 = 1;
/// Bytes of a [`DataHello`] on the wire.
pub const DATA_HELLO_LEN: usize = 60;
/// The server's acknowledgement of a valid [`DataHello`].
pub const DATA_ACK: [u8; 4] = *b"LNRb";
/// Magic of a data preamble.
pub const DATA_MAGIC: [u8; 4] = *b"LNRB";
/// Bytes of a profile message header ([`MsgHeader`]).
pub const MSG_HEADER_LEN: usize = 8;
/// [`MsgHeader::reply`] value asking the server to send without end until the connection closes.
pub const REPLY_STREAM: u32 = u32::MAX;
/// Bytes at the start of every UDP datagram: tag, sequence number, send time.
pub const UDP_HEADER_LEN: usize = 24;
/// Smallest UDP payload (it must hold the header).
pub const MIN_UDP_PAYLOAD: u32 = UDP_HEADER_LEN as u32;
/// Largest UDP payload over IPv4.
pub const MAX_UDP_PAYLOAD: u32 = 65_507;
/// Largest message (write/read size) of any TCP test.
pub const MAX_MSG: u32 = 16 * 1024 * 1024;

/// What a test measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TestKind {
    /// Bulk TCP transfer (netperf TCP_STREAM / iperf3).
    TcpStream,
    /// UDP at a target rate, loss counted at the receiver.
    UdpStream,
    /// TCP request/response on long-lived connections (netperf TCP_RR).
    TcpRr,
    /// TCP connect, request, response, close (netperf TCP_CRR).
    TcpCrr,
    /// A uperf-style workload profile.
    Profile,
}

impl TestKind {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            TestKind::TcpStream => "tcp-stream",
            TestKind::UdpStream => "udp-stream",
            TestKind::TcpRr => "tcp-rr",
            TestKind::TcpCrr => "tcp-crr",
            TestKind::Profile => "profile",
        }
    }

    /// The kinds a command line names (`--test`): a profile is given as its file instead.
    pub const NAMED: [TestKind; 4] = [TestKind::TcpStream, TestKind::UdpStream, TestKind::TcpRr, TestKind::TcpCrr];
}

/// Not the name of a test kind (the text as given).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?}: a test is tcp-stream, udp-stream, tcp-rr, tcp-crr or profile")]
pub struct BadTestKind(pub String);

impl std::str::FromStr for TestKind {
    type Err = BadTestKind;

    /// A kind by its [`TestKind::name`].
    fn from_str(s: &str) -> Result<TestKind, BadTestKind> {
        let all = [TestKind::TcpStream, TestKind::UdpStream, TestKind::TcpRr, TestKind::TcpCrr, TestKind::Profile];
        all.into_iter().find(|k| k.name() == s).ok_or_else(|| BadTestKind(s.to_string()))
    }
}

/// Which way bulk data flows, seen from the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    /// Client sends, server receives.
    Send,
    /// Server sends, client receives (iperf3 `-R`).
    Receive,
    /// Both at once on every connection.
    Bidir,
}

/// One test, as the client asks for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestSpec {
    /// [`BENCH_DOC_VERSION`].
    pub version: u32,
    /// What to measure.
    pub kind: TestKind,
    /// Which way data flows (stream tests).
    pub direction: Direction,
    /// Parallel connections (UDP: sockets).
    pub connections: u32,
    /// Length of the measured run, after the warm-up, in milliseconds.
    pub duration_ms: u64,
    /// Warm-up at the start that is run but not counted, in milliseconds.
    pub omit_ms: u64,
    /// Interval between reports, in milliseconds.
    pub interval_ms: u64,
    /// Bytes per write (stream), per request (rr/crr), per datagram (udp).
    pub msg_size: u32,
    /// Bytes per response (rr/crr).
    pub resp_size: u32,
    /// SO_SNDBUF to ask for, both sides (None: the kernel's autotuning).
    pub sndbuf: Option<u32>,
    /// SO_RCVBUF to ask for, both sides.
    pub rcvbuf: Option<u32>,
    /// Total target: bits/s for stream and udp tests, transactions/s for rr/crr (open loop).
    pub rate: Option<u64>,
    /// Send with zero copy (`sendfile` from a memory file).
    pub zerocopy: bool,
    /// TCP_NODELAY on every connection.
    pub nodelay: bool,
    /// The workload, for [`TestKind::Profile`].
    pub profile: Option<Profile>,
    /// TCP congestion control on the data connections, both sides (iperf3 `-C`); none: each
    /// host's default. A name as [`check_congestion`] allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion: Option<String>,
    /// The IP TOS byte (IPv6: traffic class) of every data socket, both sides: a DSCP shifted
    /// left by two (iperf3 `--dscp`, `-S`). Its two ECN bits must be clear.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tos: Option<u8>,
    /// The core the server pins this test's worker threads to (iperf3 `-A N,M`'s M), below
    /// [`MAX_CPU`]; the server refuses one it does not have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_cpu: Option<u32>,
    /// End the test once the sender has sent this many bytes over all its connections (iperf3
    /// `-n`, `-k`), the warm-up included; the duration is then a safety cap. tcp-stream one way,
    /// or udp-stream from the client; at most [`MAX_TEST_BYTES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Run until the client stops it (iperf3 `-t 0`): the server grants its own cap as the
    /// duration ([`TestSpec::grant_until_stopped`]) and says so in [`Ready::duration_ms`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub until_stopped: bool,
    /// tcp-stream `--bidir` with connections of their own each way, as iperf3's `--bidir -P N`
    /// opens them: `connections` send from the client (data connections `0..N`) and as many
    /// send from the server (`N..2N`), so the test opens `2N`. Without it each of the `N`
    /// connections carries both directions. An agent older than the field refuses it by name.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub each_way: bool,
    /// UDP GSO on the sending sockets and GRO on the receiving ones, both sides (iperf3 3.19's
    /// `--gsro`): the kernel cuts and joins trains of datagrams, so a send or receive carries
    /// many datagrams and per-datagram timing is lost. Off unless asked (issue 43: a packet rate
    /// counts packets as the wire carries them); udp-stream only. Sent only when on, so a server
    /// from before the field reads a default test, and one that does not know it refuses a test
    /// that asks for it (unknown field) rather than running it without.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gsro: bool,
}

impl TestSpec {
    /// A test with defaults for everything but its kind.
    pub fn new(kind: TestKind) -> TestSpec {
        let (msg, resp) = match kind {
            TestKind::TcpStream => (128 * 1024, 0),
            TestKind::UdpStream => (1448, 0),
            TestKind::TcpRr | TestKind::TcpCrr => (1, 1),
            TestKind::Profile => (0, 0),
        };
        TestSpec {
            version: BENCH_DOC_VERSION,
            kind,
            direction: Direction::Send,
            connections: 1,
            duration_ms: 10_000,
            omit_ms: 0,
            interval_ms: 1000,
            msg_size: msg,
            resp_size: resp,
            sndbuf: None,
            rcvbuf: None,
            rate: None,
            zerocopy: false,
            // A request/response test measures the network, not Nagle's wait for the previous
            // answer's ACK (issue 43: open-loop tcp-rr at 1000/s read p50 1 ms, the interval):
            // TCP_NODELAY by default, as sockperf and netperf's TCP_RR set it.
            nodelay: matches!(kind, TestKind::TcpRr | TestKind::TcpCrr),
            profile: None,
            congestion: None,
            tos: None,
            server_cpu: None,
            bytes: None,
            until_stopped: false,
            each_way: false,
            gsro: false,
        }
    }

    /// A test that runs until stopped gets the longest duration `lim` allows, the warm-up
    /// included; other tests are left as they are.
    pub fn grant_until_stopped(&mut self, lim: &Limits) {
        if self.until_stopped {
            self.duration_ms = lim.max_duration_ms.saturating_sub(self.omit_ms).max(1);
        }
    }

    /// Check the test against the rules of the protocol and the server's admission caps. The
    /// error names the parameter, its value and the allowed range.
    pub fn validate(&self, lim: &Limits) -> Result<(), SpecError> {
        use SpecError as E;
        if self.version != BENCH_DOC_VERSION {
            return Err(E::Version(self.version));
        }
        let conns = match (&self.kind, &self.profile) {
            (TestKind::Profile, Some(p)) => {
                p.validate()?;
                p.connections()
            }
            (TestKind::Profile, None) => return Err(E::NoProfile),
            (_, Some(_)) => return Err(E::StrayProfile),
            _ if self.each_way && (self.kind, self.direction) != (TestKind::TcpStream, Direction::Bidir) => {
                return Err(E::EachWay)
            }
            _ => self.initial_connections(),
        };
        if conns == 0 || conns > u64::from(lim.max_connections) {
            return Err(E::Connections { asked: conns, max: lim.max_connections });
        }
        let total = self.duration_ms.saturating_add(self.omit_ms);
        if self.duration_ms == 0 || total > lim.max_duration_ms {
            return Err(E::Duration { ms: self.duration_ms, omit_ms: self.omit_ms, max_s: lim.max_duration_ms / 1000 });
        }
        if !(10..=60_000).contains(&self.interval_ms) {
            return Err(E::Interval(self.interval_ms));
        }
        match self.kind {
            TestKind::TcpStream if !(1..=MAX_MSG).contains(&self.msg_size) => {
                return Err(E::MessageSize(self.msg_size))
            }
            TestKind::UdpStream if !(MIN_UDP_PAYLOAD..=MAX_UDP_PAYLOAD).contains(&self.msg_size) => {
                return Err(E::DatagramSize(self.msg_size))
            }
            TestKind::UdpStream if self.direction == Direction::Bidir => return Err(E::UdpBidir),
            TestKind::TcpRr | TestKind::TcpCrr => {
                for (what, v) in [("request", self.msg_size), ("response", self.resp_size)] {
                    if !(1..=MAX_MSG).contains(&v) {
                        return Err(E::TransactionSize { what, size: v });
                    }
                }
            }
            _ => {}
        }
        for (what, b) in [("send buffer", self.sndbuf), ("receive buffer", self.rcvbuf)] {
            if let Some(b) = b {
                if !(1024..=1 << 30).contains(&b) {
                    return Err(E::Buffer { what, size: b });
                }
            }
        }
        if let Some(r) = self.rate {
            if r == 0 {
                return Err(E::ZeroRate);
            }
            let bits = matches!(self.kind, TestKind::TcpStream | TestKind::UdpStream);
            if bits && r > lim.max_rate_bps {
                return Err(E::OverRateCap { bps: r, cap: lim.max_rate_bps });
            }
            if !bits && r > 10_000_000 {
                return Err(E::TransactionRate(r));
            }
        } else if lim.max_rate_bps < u64::MAX && self.kind != TestKind::TcpRr && self.kind != TestKind::TcpCrr {
            return Err(E::RateRequired { cap: lim.max_rate_bps });
        }
        if self.zerocopy && !matches!(self.kind, TestKind::TcpStream) {
            return Err(E::ZeroCopy);
        }
        if let Some(cc) = &self.congestion {
            check_congestion(cc)?;
            if self.kind == TestKind::UdpStream {
                return Err(E::CongestionOfUdp);
            }
        }
        if let Some(t) = self.tos {
            if t & 0x03 != 0 {
                return Err(E::Tos(t));
            }
        }
        if let Some(b) = self.bytes {
            if !(1..=MAX_TEST_BYTES).contains(&b) {
                return Err(E::Bytes(b));
            }
            let one_way = match self.kind {
                TestKind::TcpStream => self.direction != Direction::Bidir,
                TestKind::UdpStream => self.direction == Direction::Send,
                _ => false,
            };
            if !one_way {
                return Err(E::BytesBothWays);
            }
        }
        if self.gsro && self.kind != TestKind::UdpStream {
            return Err(E::Gsro);
        }
        if let Some(c) = self.server_cpu {
            if c >= MAX_CPU {
                return Err(E::ServerCpu(c));
            }
        }
        Ok(())
    }

    /// Connections the test opens at its start.
    pub fn initial_connections(&self) -> u64 {
        match &self.profile {
            Some(p) => p.connections(),
            None if self.each_way => 2 * u64::from(self.connections),
            None => u64::from(self.connections),
        }
    }
}

/// Most bytes a test may be asked to send (1 PiB).
pub const MAX_TEST_BYTES: u64 = 1 << 50;

/// Cores a test may pin its threads to: 0 to this less one (the kernel's `CPU_SETSIZE`).
pub const MAX_CPU: u32 = 1024;

/// Longest name of a TCP congestion control algorithm (the kernel's `TCP_CA_NAME_MAX` less its NUL).
pub const MAX_CONGESTION_NAME: usize = 15;

/// Why a [`TestSpec`] is refused ([`TestSpec::validate`]): each names the parameter, its value
/// and the allowed range, in words a client can show its user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// Another version of the benchmark document.
    #[error("benchmark document version {0} (this server speaks {BENCH_DOC_VERSION})")]
    Version(u32),
    /// A profile test without a profile.
    #[error("a profile test needs a profile")]
    NoProfile,
    /// A profile beside a test that is not a profile test.
    #[error("a profile was sent with a test that is not a profile test")]
    StrayProfile,
    /// A connection each way for a test other than tcp-stream --bidir.
    #[error("a connection each way applies to tcp-stream --bidir only")]
    EachWay,
    /// Too many connections (or none).
    #[error("connections {asked}: must be 1 to {max} on this server")]
    Connections {
        /// What the test would open.
        asked: u64,
        /// This server's cap.
        max: u32,
    },
    /// Too long a test (or an empty one).
    #[error("duration {ms} ms plus warm-up {omit_ms} ms: the test must last 1 ms to {max_s} s on this server")]
    Duration {
        /// The measured time asked for.
        ms: u64,
        /// The warm-up asked for.
        omit_ms: u64,
        /// This server's cap, in seconds.
        max_s: u64,
    },
    /// An interval outside 10 ms to 60 s.
    #[error("interval {0} ms: must be 10 ms to 60 s")]
    Interval(u64),
    /// A tcp-stream message size outside 1 to [`MAX_MSG`].
    #[error("message size {0}: must be 1 to {MAX_MSG}")]
    MessageSize(u32),
    /// A datagram size outside [`MIN_UDP_PAYLOAD`] to [`MAX_UDP_PAYLOAD`].
    #[error("datagram size {0}: must be {MIN_UDP_PAYLOAD} to {MAX_UDP_PAYLOAD}")]
    DatagramSize(u32),
    /// A udp-stream both ways.
    #[error("udp-stream runs one way: send or receive")]
    UdpBidir,
    /// A request or response size outside 1 to [`MAX_MSG`].
    #[error("{what} size {size}: must be 1 to {MAX_MSG}")]
    TransactionSize {
        /// `request` or `response`.
        what: &'static str,
        /// The size asked for.
        size: u32,
    },
    /// A socket buffer outside 1 KiB to 1 GiB.
    #[error("{what} {size}: must be 1 KiB to 1 GiB")]
    Buffer {
        /// `send buffer` or `receive buffer`.
        what: &'static str,
        /// The size asked for.
        size: u32,
    },
    /// A rate of 0.
    #[error("rate 0: leave it out for an unlimited test")]
    ZeroRate,
    /// A rate over this server's cap.
    #[error("rate {bps} bit/s is over this server's cap of {cap} bit/s")]
    OverRateCap {
        /// The rate asked for.
        bps: u64,
        /// This server's cap.
        cap: u64,
    },
    /// A transaction rate over 10,000,000 per second.
    #[error("rate {0} transactions/s: must be at most 10,000,000")]
    TransactionRate(u64),
    /// No rate, where this server caps it.
    #[error("this server caps the rate at {cap} bit/s: give --rate up to that")]
    RateRequired {
        /// This server's cap.
        cap: u64,
    },
    /// Zero copy for a test other than tcp-stream.
    #[error("zero copy applies to tcp-stream only")]
    ZeroCopy,
    /// A congestion control name the kernel could not have.
    #[error(transparent)]
    Congestion(#[from] BadCongestion),
    /// A congestion control for udp-stream.
    #[error("congestion control applies to TCP tests, not udp-stream")]
    CongestionOfUdp,
    /// A TOS with ECN bits.
    #[error("TOS {0:#04x}: its low two bits are ECN's, which the kernel sets; give a DSCP (TOS = DSCP × 4)")]
    Tos(u8),
    /// A byte count outside 1 to [`MAX_TEST_BYTES`].
    #[error("bytes to send {0}: must be 1 to {MAX_TEST_BYTES}")]
    Bytes(u64),
    /// A byte count for a test that does not run one way from the client.
    #[error("a byte count applies to tcp-stream one way (not --bidir) and to udp-stream sent by the client (not -R)")]
    BytesBothWays,
    /// GSO/GRO for a test other than udp-stream.
    #[error("GSO/GRO (--gsro) applies to udp-stream")]
    Gsro,
    /// A core number at or over [`MAX_CPU`].
    #[error("server core {0}: must be below {MAX_CPU}")]
    ServerCpu(u32),
    /// The profile breaks its rules.
    #[error(transparent)]
    Profile(#[from] linerate_model::profile::ProfileError),
}

/// A congestion control name that is not 1 to [`MAX_CONGESTION_NAME`] letters, digits, `_` or
/// `-` (shown escaped).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("congestion control \"{}\": must be 1 to {MAX_CONGESTION_NAME} letters, digits, '_' or '-'", crate::name::escape(.0.as_bytes()))]
pub struct BadCongestion(pub String);

/// Check a congestion control name from a flag or a peer: 1 to [`MAX_CONGESTION_NAME`] ASCII
/// letters, digits, `_` or `-` (what the kernel's algorithms are called: `reno`, `cubic`, `bbr`).
pub fn check_congestion(name: &str) -> Result<(), BadCongestion> {
    let ok = (1..=MAX_CONGESTION_NAME).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(BadCongestion(name.to_string()))
    }
}

/// `-C ALGO`: a congestion control name as a flag gives it, by [`check_congestion`]'s rule.
pub fn parse_congestion(s: &str) -> Result<String, BadCongestion> {
    check_congestion(s).map(|()| s.to_string())
}

/// A DSCP (RFC 2474), as iperf3's `--dscp` takes it: 0 to 63 (or `0x..`), or a per-hop
/// behaviour's name (RFC 2597, 3246): `ef`, `af11` to `af43`, `cs0` to `cs7`. Sent as the TOS
/// byte ([`Dscp::tos`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dscp(pub u8);

impl Dscp {
    /// The TOS byte (IPv6: traffic class) that carries it: DSCP × 4, the ECN bits clear.
    pub fn tos(self) -> u8 {
        self.0 << 2
    }
}

/// Not a DSCP (the text as given).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?}: a DSCP is 0 to 63 or a name (ef, af11 to af43, cs0 to cs7)")]
pub struct BadDscp(pub String);

impl std::str::FromStr for Dscp {
    type Err = BadDscp;

    fn from_str(s: &str) -> Result<Dscp, BadDscp> {
        let t = s.trim().to_ascii_lowercase();
        let class = |n: &str| n.parse::<u8>().ok().filter(|n| *n <= 7).map(|n| n << 3);
        let named = match t.as_str() {
            "ef" => Some(46),
            _ => t.strip_prefix("cs").and_then(class).or_else(|| {
                // afXY: class X 1..=4, drop precedence Y 1..=3 → 8X + 2Y.
                match t.strip_prefix("af")?.as_bytes() {
                    [x @ b'1'..=b'4', y @ b'1'..=b'3'] => Some(8 * (x - b'0') + 2 * (y - b'0')),
                    _ => None,
                }
            }),
        };
        named.or_else(|| byte(&t).filter(|v| *v <= 63)).map(Dscp).ok_or_else(|| BadDscp(s.to_string()))
    }
}

/// Not a TOS byte (the text as given).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?}: a TOS byte is 0 to 255 (or 0x00 to 0xff)")]
pub struct BadTos(pub String);

/// A whole TOS byte, as iperf3's `-S` takes it: 0 to 255, decimal or `0x` hexadecimal (the ECN
/// bits are checked with the test: [`TestSpec::validate`]).
pub fn parse_tos(s: &str) -> Result<u8, BadTos> {
    byte(s.trim()).ok_or_else(|| BadTos(s.to_string()))
}

/// A byte in decimal or `0x` hexadecimal.
fn byte(t: &str) -> Option<u8> {
    match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u8::from_str_radix(h, 16).ok(),
        None => t.parse().ok(),
    }
}

/// The server's admission caps for one test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest test including warm-up, milliseconds.
    pub max_duration_ms: u64,
    /// Most connections in one test.
    pub max_connections: u32,
    /// Highest bulk rate a test may ask for, bits/s (`u64::MAX`: unlimited).
    pub max_rate_bps: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { max_duration_ms: 3_600_000, max_connections: 10_000, max_rate_bps: u64::MAX }
    }
}

/// Server → client: the test is admitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ready {
    /// [`BENCH_DOC_VERSION`].
    pub version: u32,
    /// The test's identifier, carried by every data preamble.
    pub test: [u8; 16],
    /// Secret that data preambles must carry.
    pub cookie: [u8; 32],
    /// TCP port of the test's data listener (same address as the control connection).
    pub tcp_port: u16,
    /// UDP port of the test's socket, for udp-stream.
    pub udp_port: Option<u16>,
    /// For a test that runs until stopped: the duration granted, the server's cap less the
    /// warm-up, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
}

/// A data connection's preamble: which test and which connection it is, and the cookie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataHello {
    /// Test identifier from [`Ready`].
    pub test: [u8; 16],
    /// Connection index, below the test's connection count.
    pub conn: u32,
    /// Secret from [`Ready`].
    pub cookie: [u8; 32],
}

impl DataHello {
    /// Encode to the fixed wire form.
    pub fn encode(&self) -> [u8; DATA_HELLO_LEN] {
        let mut b = [0u8; DATA_HELLO_LEN];
        b[0..4].copy_from_slice(&DATA_MAGIC);
        b[4..6].copy_from_slice(&crate::PROTOCOL_VERSION.to_be_bytes());
        b[8..24].copy_from_slice(&self.test);
        b[24..28].copy_from_slice(&self.conn.to_be_bytes());
        b[28..60].copy_from_slice(&self.cookie);
        b
    }

    /// Decode; checks magic, version and reserved bytes (not the cookie: see [`DataHello::admits`]).
    pub fn decode(b: &[u8; DATA_HELLO_LEN]) -> Result<DataHello, ProtoError> {
        if b[0..4] != DATA_MAGIC {
            return Err(ProtoError::BadMagic);
        }
        let v = u16::from_be_bytes([b[4], b[5]]);
        if v != crate::PROTOCOL_VERSION {
            return Err(ProtoError::Version { ours: crate::PROTOCOL_VERSION, theirs: v });
        }
        if b[6..8] != [0, 0] {
            return Err(ProtoError::Invalid("reserved preamble bytes"));
        }
        let mut test = [0u8; 16];
        test.copy_from_slice(&b[8..24]);
        let mut cookie = [0u8; 32];
        cookie.copy_from_slice(&b[28..60]);
        Ok(DataHello { test, conn: u32::from_be_bytes([b[24], b[25], b[26], b[27]]), cookie })
    }

    /// Whether this preamble belongs to the test with `ready`'s id and cookie, for a connection
    /// index below `conns`. The cookie is compared in constant time.
    pub fn admits(&self, ready: &Ready, conns: u64) -> bool {
        // Every byte is compared whatever the first difference, so timing does not reveal a prefix.
        let diff = self.cookie.iter().zip(&ready.cookie).fold(0u8, |acc, (a, b)| acc | (a ^ b));
        let cookie_ok = std::hint::black_box(diff) == 0;
        cookie_ok && self.test == ready.test && u64::from(self.conn) < conns
    }
}

/// A profile message header: `len` payload bytes follow; the server answers with `reply` bytes
/// ([`REPLY_STREAM`]: without end, until the connection closes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsgHeader {
    /// Payload bytes after the header.
    pub len: u32,
    /// Bytes the server sends back once the payload is in.
    pub reply: u32,
}

impl MsgHeader {
    /// Encode.
    pub fn encode(&self) -> [u8; MSG_HEADER_LEN] {
        let mut b = [0u8; MSG_HEADER_LEN];
        b[0..4].copy_from_slice(&self.len.to_be_bytes());
        b[4..8].copy_from_slice(&self.reply.to_be_bytes());
        b
    }

    /// Decode and check both sizes against [`MAX_PROFILE_MSG`].
    pub fn decode(b: &[u8; MSG_HEADER_LEN]) -> Result<MsgHeader, ProtoError> {
        let len = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        let reply = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
        if len > MAX_PROFILE_MSG {
            return Err(ProtoError::TooLong { what: "profile message", len: len.into(), cap: MAX_PROFILE_MSG.into() });
        }
        if reply > MAX_PROFILE_MSG && reply != REPLY_STREAM {
            return Err(ProtoError::TooLong { what: "profile reply", len: reply.into(), cap: MAX_PROFILE_MSG.into() });
        }
        Ok(MsgHeader { len, reply })
    }
}

/// The head of every UDP datagram: which test, its sequence number and the sender's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpHeader {
    /// The first 8 bytes of the test's cookie: datagrams of other tests are not counted.
    pub tag: [u8; 8],
    /// Per-socket sequence number from 0.
    pub seq: u64,
    /// Sender's monotonic time in nanoseconds since the test started.
    pub sent_ns: u64,
}

impl UdpHeader {
    /// Write into the first [`UDP_HEADER_LEN`] bytes of `b` (which must be that long).
    pub fn write(&self, b: &mut [u8]) {
        b[0..8].copy_from_slice(&self.tag);
        b[8..16].copy_from_slice(&self.seq.to_be_bytes());
        b[16..24].copy_from_slice(&self.sent_ns.to_be_bytes());
    }

    /// Read from a datagram; `None` when it is too short.
    pub fn read(b: &[u8]) -> Option<UdpHeader> {
        let h = b.get(..UDP_HEADER_LEN)?;
        let mut tag = [0u8; 8];
        tag.copy_from_slice(&h[0..8]);
        let mut seq = [0u8; 8];
        seq.copy_from_slice(&h[8..16]);
        let mut t = [0u8; 8];
        t.copy_from_slice(&h[16..24]);
        Some(UdpHeader { tag, seq: u64::from_be_bytes(seq), sent_ns: u64::from_be_bytes(t) })
    }
}

/// One connection's counts on one side.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnCounts {
    /// Connection index.
    pub id: u32,
    /// Bytes received after the warm-up.
    pub rx: u64,
    /// Bytes sent after the warm-up.
    pub tx: u64,
    /// TCP statistics, when it is a TCP connection that was still open.
    pub tcp: Option<TcpStats>,
}

/// Totals of one reporting interval on one side.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntervalCounts {
    /// Start, seconds since the start of the test (warm-up included).
    pub start_s: f64,
    /// End.
    pub end_s: f64,
    /// Bytes received in the interval.
    pub rx: u64,
    /// Bytes sent in the interval.
    pub tx: u64,
    /// Transactions completed in the interval.
    pub transactions: u64,
    /// TCP segments this side's connections retransmitted in the interval, where sampled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retrans: Option<u64>,
    /// Mean congestion window of this side's connections near the interval's end, bytes, where
    /// sampled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwnd: Option<u64>,
}

/// UDP receiver counts.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UdpCounts {
    /// Datagrams sent.
    pub sent: u64,
    /// Datagrams received (first copies).
    pub received: u64,
    /// Payload bytes received.
    pub bytes: u64,
    /// Datagrams that arrived after a later one.
    pub out_of_order: u64,
    /// Datagrams received more than once.
    pub duplicates: u64,
    /// Highest sequence number seen plus one, summed over sockets: what the sender had sent by
    /// the last datagram that arrived.
    pub expected: u64,
    /// Mean inter-arrival jitter (RFC 3550 style), microseconds.
    pub jitter_us: f64,
    /// How this side's datagrams travelled. In a peer's report only for a test with
    /// [`TestSpec::gsro`]: a peer from before the field refuses fields it does not know, and
    /// one that can ask for `gsro` knows this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batching: Option<UdpBatching>,
}

/// How one side's datagrams travelled, counted over the whole test: system calls, messages (a
/// GSO or GRO train is one message, otherwise a message is one datagram) and datagrams, each
/// way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UdpBatching {
    /// `sendmmsg` calls that sent something.
    pub send_calls: u64,
    /// Messages they sent.
    pub sent_messages: u64,
    /// Datagrams in those messages.
    pub sent_datagrams: u64,
    /// `recvmmsg` calls that returned something.
    pub recv_calls: u64,
    /// Messages they returned.
    pub received_messages: u64,
    /// Datagrams in those messages.
    pub received_datagrams: u64,
}

/// What one side measured in one test; the server sends its own in `BenchResult`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SideReport {
    /// [`BENCH_DOC_VERSION`].
    pub version: u32,
    /// Seconds counted (after the warm-up), on this side's clock.
    pub seconds: f64,
    /// Per-connection counts.
    pub conns: Vec<ConnCounts>,
    /// Per-interval totals.
    pub intervals: Vec<IntervalCounts>,
    /// CPU over the counted time.
    pub cpu: CpuShare,
    /// Transactions answered (rr, crr, profile).
    pub transactions: u64,
    /// UDP counts, for udp-stream.
    pub udp: Option<UdpCounts>,
    /// Socket buffer sizes the kernel granted (SO_SNDBUF, SO_RCVBUF) on this side's sockets.
    pub buffers: Option<(u32, u32)>,
    /// Host description: kernel, CPU, congestion control, interfaces, and this test's facts
    /// (the congestion control its sockets used, the pinned core, tests running beside it).
    /// `null` from a peer reads as an empty description.
    #[serde(deserialize_with = "linerate_model::host::null_as_default")]
    pub host: HostInfo,
    /// Connections refused or lost during the test, with the first reason.
    pub errors: Vec<String>,
}

impl SideReport {
    /// Check a peer's report against the test: bounded list lengths and finite numbers.
    pub fn check(&self, spec: &TestSpec) -> Result<(), ProtoError> {
        let bad = |w: &str| ProtoError::Violation(format!("benchmark result: {w}"));
        if self.version != BENCH_DOC_VERSION {
            return Err(bad("document version"));
        }
        if self.conns.len() as u64 > spec.initial_connections().max(1) {
            return Err(bad("more connections than the test has"));
        }
        // The client's own test may hold any values (the server's caps are not checked here).
        let max_intervals = (spec.duration_ms.saturating_add(spec.omit_ms) / spec.interval_ms.max(1)).saturating_add(4);
        if self.intervals.len() as u64 > max_intervals {
            return Err(bad("more intervals than the test has"));
        }
        if self.errors.len() > 64 {
            return Err(bad("too many error lines"));
        }
        let c = &self.cpu;
        let fin =
            [self.seconds, c.user, c.system, c.softirq, c.irq, c.idle, c.steal, c.process_user_s, c.process_system_s];
        if fin.iter().any(|v| !v.is_finite() || *v < 0.0) {
            return Err(bad("a figure is negative or not a number"));
        }
        Ok(())
    }
}

/// Decode a JSON benchmark document of a frame. The error quotes the peer's text (an unknown
/// variant, a field name), so control characters in it are escaped before it reaches a log.
pub fn decode_doc<'a, T: Deserialize<'a>>(doc: &'a [u8], what: &'static str) -> Result<T, ProtoError> {
    serde_json::from_slice(doc)
        .map_err(|e| ProtoError::Violation(format!("{what}: {}", crate::name::escape(e.to_string().as_bytes()))))
}

/// Encode a benchmark document.
pub fn encode_doc<T: Serialize>(v: &T) -> Vec<u8> {
    // Serializing our own plain structs cannot fail (no maps with non-string keys).
    serde_json::to_vec(v).unwrap_or_default()
}

/// Where a control connection is in a benchmark session, on either side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Between tests: the client may ask for the next one.
    Idle,
    /// A test was asked for; waiting for `BenchReady` (client) or for the answer to go out.
    Requested,
    /// Admitted; data connections are being opened.
    Admitted,
    /// `BenchGo` sent by the client.
    Starting,
    /// Running.
    Running,
    /// `BenchStop` sent; waiting for the result.
    Stopping,
}

/// The server's rules for the client's frames.
#[derive(Debug)]
pub struct ServerMachine {
    phase: Phase,
}

/// What the server must do next.
#[derive(Debug, PartialEq)]
pub enum ServerEvent {
    /// Validate and admit this test, then call [`ServerMachine::admitted`].
    Request(Box<TestSpec>),
    /// Start the test and answer `BenchGo`.
    Go,
    /// Stop and send the result, then call [`ServerMachine::finished`].
    Stop,
}

impl Default for ServerMachine {
    fn default() -> Self {
        ServerMachine { phase: Phase::Idle }
    }
}

impl ServerMachine {
    /// Where the session is.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Take one frame from the client.
    pub fn handle(&mut self, f: &Frame<'_>) -> Result<ServerEvent, ProtoError> {
        let out = match (self.phase, f) {
            (Phase::Idle, Frame::BenchRequest(doc)) => {
                self.phase = Phase::Requested;
                ServerEvent::Request(Box::new(decode_doc(doc, "test request")?))
            }
            (Phase::Admitted, Frame::BenchGo) => {
                self.phase = Phase::Running;
                ServerEvent::Go
            }
            (Phase::Admitted | Phase::Running, Frame::BenchStop) => {
                self.phase = Phase::Stopping;
                ServerEvent::Stop
            }
            (p, f) => return Err(ProtoError::Violation(format!("benchmark frame {f:?} in phase {p:?}"))),
        };
        Ok(out)
    }

    /// The test was admitted and `BenchReady` sent.
    pub fn admitted(&mut self) {
        if self.phase == Phase::Requested {
            self.phase = Phase::Admitted;
        }
    }

    /// The result was sent; the client may ask for another test.
    pub fn finished(&mut self) {
        self.phase = Phase::Idle;
    }
}

/// The client's rules for the server's frames.
#[derive(Debug)]
pub struct ClientMachine {
    phase: Phase,
    spec: Option<TestSpec>,
}

/// What the server told the client.
#[derive(Debug, PartialEq)]
pub enum ClientEvent {
    /// The test is admitted: open the data connections, then call [`ClientMachine::go`].
    Ready(Ready),
    /// The server runs: start the clock.
    Started,
    /// The server's measurements.
    Result(Box<SideReport>),
}

impl Default for ClientMachine {
    fn default() -> Self {
        ClientMachine { phase: Phase::Idle, spec: None }
    }
}

impl ClientMachine {
    /// Where the session is.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Ask for a test; returns the frame body to send in `BenchRequest`.
    pub fn request(&mut self, spec: &TestSpec) -> Result<Vec<u8>, ProtoError> {
        if self.phase != Phase::Idle {
            return Err(ProtoError::Violation(format!("new test in phase {:?}", self.phase)));
        }
        self.phase = Phase::Requested;
        self.spec = Some(spec.clone());
        Ok(encode_doc(spec))
    }

    /// The data connections are up; send `BenchGo`.
    pub fn go(&mut self) -> Result<(), ProtoError> {
        if self.phase != Phase::Admitted {
            return Err(ProtoError::Violation(format!("start in phase {:?}", self.phase)));
        }
        self.phase = Phase::Starting;
        Ok(())
    }

    /// The test's time is over (or it is abandoned); send `BenchStop`.
    pub fn stop(&mut self) -> Result<(), ProtoError> {
        if !matches!(self.phase, Phase::Admitted | Phase::Starting | Phase::Running) {
            return Err(ProtoError::Violation(format!("stop in phase {:?}", self.phase)));
        }
        self.phase = Phase::Stopping;
        Ok(())
    }

    /// Take one frame from the server. A `Fatal` frame is returned as an error by the caller
    /// before it gets here.
    pub fn handle(&mut self, f: &Frame<'_>) -> Result<ClientEvent, ProtoError> {
        match (self.phase, f) {
            (Phase::Requested, Frame::BenchReady(doc)) => {
                let r: Ready = decode_doc(doc, "test admission")?;
                if r.version != BENCH_DOC_VERSION {
                    return Err(ProtoError::Violation("benchmark admission version".into()));
                }
                if let Some(spec) = self.spec.as_mut().filter(|s| s.until_stopped) {
                    // The server's grant bounds the intervals its result may hold.
                    let d = r.duration_ms.ok_or_else(|| {
                        ProtoError::Violation("admission of a test until stopped without its duration".into())
                    })?;
                    spec.duration_ms = d;
                }
                self.phase = Phase::Admitted;
                Ok(ClientEvent::Ready(r))
            }
            (Phase::Starting, Frame::BenchGo) => {
                self.phase = Phase::Running;
                Ok(ClientEvent::Started)
            }
            (Phase::Stopping, Frame::BenchResult(doc)) => {
                let r: SideReport = decode_doc(doc, "benchmark result")?;
                if let Some(spec) = &self.spec {
                    r.check(spec)?;
                }
                self.phase = Phase::Idle;
                Ok(ClientEvent::Result(Box::new(r)))
            }
            (p, f) => Err(ProtoError::Violation(format!("benchmark frame {f:?} in phase {p:?}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_kinds_read_by_their_names() {
        for k in TestKind::NAMED.into_iter().chain([TestKind::Profile]) {
            assert_eq!(k.name().parse(), Ok(k));
        }
        assert_eq!("tcp_rr".parse::<TestKind>(), Err(BadTestKind("tcp_rr".into())));
    }

    #[test]
    fn dscp_names_and_numbers_and_tos_bytes_parse() {
        let dscp = |s: &str| s.parse::<Dscp>().map(|d| d.0);
        for (s, v) in [("ef", 46), ("EF", 46), ("af11", 10), ("af23", 22), ("af41", 34), ("af43", 38)] {
            assert_eq!(dscp(s), Ok(v), "{s}");
        }
        for (s, v) in [("cs0", 0), ("cs1", 8), ("cs6", 48), ("cs7", 56), ("0", 0), ("63", 63), ("0x2e", 46)] {
            assert_eq!(dscp(s), Ok(v), "{s}");
        }
        for bad in ["64", "af44", "af51", "af1", "cs8", "", "-1", "ef1"] {
            assert!(dscp(bad).is_err(), "{bad}");
        }
        assert_eq!(Dscp(18).tos(), 18 << 2, "sent as the TOS byte, DSCP × 4");
        assert_eq!(parse_tos("0xb8"), Ok(0xb8));
        assert_eq!(parse_tos("184"), Ok(184));
        assert!(parse_tos("256").is_err());
        assert_eq!(parse_congestion("bbr"), Ok("bbr".to_string()));
        assert!(parse_congestion("no such").is_err());
    }
    use crate::frame::{self, Frame};

    fn ready() -> Ready {
        Ready {
            version: BENCH_DOC_VERSION,
            test: [7; 16],
            cookie: [9; 32],
            tcp_port: 4000,
            udp_port: None,
            duration_ms: None,
        }
    }

    /// Encode a frame and decode it again, as the wire would.
    fn wire(f: Frame<'_>) -> Vec<u8> {
        let mut b = Vec::new();
        f.encode(&mut b);
        b
    }

    #[test]
    fn two_sessions_in_memory_run_a_test_and_then_another() {
        let mut c = ClientMachine::default();
        let mut s = ServerMachine::default();
        for round in 0..2 {
            let mut spec = TestSpec::new(TestKind::TcpStream);
            spec.connections = 4 + round;
            let req = wire(Frame::BenchRequest(&c.request(&spec).unwrap()));
            let (f, _) = frame::decode(&req).unwrap();
            let ServerEvent::Request(got) = s.handle(&f).unwrap() else { panic!("not a request") };
            assert_eq!(*got, spec);
            got.validate(&Limits::default()).unwrap();
            s.admitted();
            let r = ready();
            let rd = wire(Frame::BenchReady(&encode_doc(&r)));
            assert_eq!(c.handle(&frame::decode(&rd).unwrap().0).unwrap(), ClientEvent::Ready(r));
            c.go().unwrap();
            assert_eq!(s.handle(&Frame::BenchGo).unwrap(), ServerEvent::Go);
            assert_eq!(c.handle(&Frame::BenchGo).unwrap(), ClientEvent::Started);
            c.stop().unwrap();
            assert_eq!(s.handle(&Frame::BenchStop).unwrap(), ServerEvent::Stop);
            let rep = SideReport {
                version: BENCH_DOC_VERSION,
                seconds: 1.0,
                conns: vec![ConnCounts { id: 0, rx: 5, tx: 0, tcp: None }],
                ..Default::default()
            };
            let res = wire(Frame::BenchResult(&encode_doc(&rep)));
            match c.handle(&frame::decode(&res).unwrap().0).unwrap() {
                ClientEvent::Result(got) => assert_eq!(*got, rep),
                other => panic!("{other:?}"),
            }
            s.finished();
            assert_eq!((c.phase(), s.phase()), (Phase::Idle, Phase::Idle));
        }
    }

    #[test]
    fn a_test_until_stopped_runs_for_the_servers_cap_and_its_result_may_fill_it() {
        let lim = Limits { max_duration_ms: 60_000, ..Limits::default() };
        let mut spec = TestSpec::new(TestKind::TcpStream);
        (spec.duration_ms, spec.omit_ms, spec.until_stopped) = (0, 2_000, true);
        let mut c = ClientMachine::default();
        c.request(&spec).unwrap();
        spec.grant_until_stopped(&lim);
        assert_eq!(spec.duration_ms, 58_000, "the cap less the warm-up");
        spec.validate(&lim).unwrap();
        // An admission that does not say the grant is refused: the result could not be bounded.
        let mut bare = ClientMachine::default();
        bare.request(&spec).unwrap();
        assert!(bare.handle(&Frame::BenchReady(&encode_doc(&ready()))).is_err());
        let r = Ready { duration_ms: Some(spec.duration_ms), ..ready() };
        c.handle(&Frame::BenchReady(&encode_doc(&r))).unwrap();
        c.go().unwrap();
        c.handle(&Frame::BenchGo).unwrap();
        c.stop().unwrap();
        let intervals = vec![IntervalCounts::default(); 60];
        let rep = SideReport { version: BENCH_DOC_VERSION, intervals, ..Default::default() };
        assert!(matches!(c.handle(&Frame::BenchResult(&encode_doc(&rep))).unwrap(), ClientEvent::Result(_)));
        // A plain test keeps its own duration.
        let mut plain = TestSpec::new(TestKind::TcpStream);
        plain.grant_until_stopped(&lim);
        assert_eq!(plain.duration_ms, 10_000);
    }

    #[test]
    fn server_refuses_frames_out_of_order() {
        let mut s = ServerMachine::default();
        assert!(s.handle(&Frame::BenchGo).is_err());
        let mut s = ServerMachine::default();
        assert!(s.handle(&Frame::BenchStop).is_err());
        let mut s = ServerMachine::default();
        let doc = encode_doc(&TestSpec::new(TestKind::TcpRr));
        s.handle(&Frame::BenchRequest(&doc)).unwrap();
        // A second request before the first is admitted is a violation.
        assert!(s.handle(&Frame::BenchRequest(&doc)).is_err());
    }

    #[test]
    fn client_refuses_results_it_did_not_ask_for() {
        let mut c = ClientMachine::default();
        let rep = encode_doc(&SideReport { version: BENCH_DOC_VERSION, ..Default::default() });
        assert!(c.handle(&Frame::BenchResult(&rep)).is_err());
        assert!(c.handle(&Frame::BenchGo).is_err());
        assert!(c.go().is_err());
    }

    #[test]
    fn result_with_more_connections_than_the_test_is_refused() {
        let mut c = ClientMachine::default();
        c.request(&TestSpec::new(TestKind::TcpStream)).unwrap();
        c.handle(&Frame::BenchReady(&encode_doc(&ready()))).unwrap();
        c.stop().unwrap();
        let rep = SideReport {
            version: BENCH_DOC_VERSION,
            conns: vec![ConnCounts::default(), ConnCounts::default()],
            ..Default::default()
        };
        let err = c.handle(&Frame::BenchResult(&encode_doc(&rep))).unwrap_err();
        assert!(err.to_string().contains("more connections"), "{err}");
    }

    #[test]
    fn options_added_later_are_left_out_when_unset_and_default_when_absent() {
        // An older server refuses unknown fields: a test that uses none of the later options
        // must not send them, and a document from an older client must decode.
        let plain = TestSpec::new(TestKind::TcpStream);
        let v = serde_json::to_value(&plain).unwrap();
        let sent: Vec<_> =
            ["congestion", "tos", "server_cpu", "bytes"].into_iter().filter(|k| v.get(k).is_some()).collect();
        assert!(sent.is_empty(), "{sent:?} sent unset: {v}");
        let back: TestSpec = decode_doc(&encode_doc(&plain), "test").unwrap();
        assert_eq!(back, plain);
        let mut cc = plain.clone();
        cc.congestion = Some("reno".into());
        cc.tos = Some(0xb8);
        cc.server_cpu = Some(1);
        cc.bytes = Some(10 << 20);
        assert_eq!(decode_doc::<TestSpec>(&encode_doc(&cc), "test").unwrap(), cc);
    }

    #[test]
    fn requests_with_wrong_types_or_unknown_fields_are_refused() {
        let mut s = ServerMachine::default();
        let err = s.handle(&Frame::BenchRequest(br#"{"kind":"tcp-stream","connections":-1}"#)).unwrap_err();
        assert_eq!(err.code(), crate::ErrorCode::Protocol);
        let mut spec = serde_json::to_value(TestSpec::new(TestKind::TcpStream)).unwrap();
        spec["extra"] = 1.into();
        let mut s = ServerMachine::default();
        assert!(s.handle(&Frame::BenchRequest(spec.to_string().as_bytes())).is_err());
        let mut spec = serde_json::to_value(TestSpec::new(TestKind::TcpStream)).unwrap();
        spec["duration_ms"] = "ten".into();
        let mut s = ServerMachine::default();
        assert!(s.handle(&Frame::BenchRequest(spec.to_string().as_bytes())).is_err());
    }

    #[test]
    fn validate_names_the_parameter_and_the_range() {
        let lim = Limits { max_duration_ms: 60_000, max_connections: 100, max_rate_bps: u64::MAX };
        let ok = TestSpec::new(TestKind::TcpStream);
        ok.validate(&lim).unwrap();
        type Case = (Box<dyn Fn(&mut TestSpec)>, &'static str);
        let cases: Vec<Case> = vec![
            (Box::new(|s| s.connections = 0), "connections 0"),
            (Box::new(|s| s.connections = 101), "connections 101"),
            (Box::new(|s| s.duration_ms = 0), "duration 0"),
            (Box::new(|s| s.duration_ms = 61_000), "duration 61000"),
            (Box::new(|s| s.omit_ms = u64::MAX), "warm-up"),
            (Box::new(|s| s.msg_size = MAX_MSG + 1), "message size"),
            (Box::new(|s| s.msg_size = 0), "message size 0"),
            (Box::new(|s| s.interval_ms = 1), "interval 1"),
            (Box::new(|s| s.sndbuf = Some(10)), "send buffer 10"),
            (Box::new(|s| s.rate = Some(0)), "rate 0"),
            (Box::new(|s| s.version = 9), "version 9"),
            (Box::new(|s| s.kind = TestKind::Profile), "needs a profile"),
            (Box::new(|s| s.congestion = Some(String::new())), "congestion control \"\""),
            (Box::new(|s| s.congestion = Some("a".repeat(16))), "1 to 15 letters"),
            (Box::new(|s| s.congestion = Some("bbr\n2".into())), "bbr\\x0a2"),
            (Box::new(|s| s.congestion = Some("../x".into())), "congestion control"),
            (Box::new(|s| s.tos = Some(0xb9)), "TOS 0xb9: its low two bits are ECN's"),
            (Box::new(|s| s.server_cpu = Some(MAX_CPU)), "server core 1024: must be below 1024"),
            (Box::new(|s| s.bytes = Some(0)), "bytes to send 0"),
            (Box::new(|s| s.bytes = Some(MAX_TEST_BYTES + 1)), "must be 1 to"),
            (Box::new(|s| (s.bytes, s.direction) = (Some(1), Direction::Bidir)), "tcp-stream one way"),
            (Box::new(|s| (s.bytes, s.kind, s.resp_size) = (Some(1), TestKind::TcpRr, 1)), "tcp-stream one way"),
            (
                Box::new(|s| {
                    (s.bytes, s.kind, s.msg_size, s.direction) = (Some(1), TestKind::UdpStream, 64, Direction::Receive)
                }),
                "udp-stream sent by the client",
            ),
            (
                Box::new(|s| (s.kind, s.msg_size, s.congestion) = (TestKind::UdpStream, 64, Some("reno".into()))),
                "TCP tests",
            ),
            (Box::new(|s| s.gsro = true), "--gsro) applies to udp-stream"),
        ];
        for (mutate, want) in cases {
            let mut s = ok.clone();
            mutate(&mut s);
            let err = s.validate(&lim).unwrap_err().to_string();
            assert!(err.contains(want), "{want:?} not in {err:?}");
        }
        let mut udp = TestSpec::new(TestKind::UdpStream);
        udp.msg_size = 10;
        assert_eq!(udp.validate(&lim), Err(SpecError::DatagramSize(10)));
        assert!(udp.validate(&lim).unwrap_err().to_string().contains("datagram size 10"));
        udp.msg_size = 64;
        udp.direction = Direction::Bidir;
        assert!(udp.validate(&lim).is_err());
    }

    #[test]
    fn gsro_travels_only_when_asked_so_an_old_peer_reads_a_default_udp_test() {
        let lim = Limits::default();
        let mut udp = TestSpec::new(TestKind::UdpStream);
        udp.msg_size = 64;
        let plain = String::from_utf8(encode_doc(&udp)).unwrap();
        assert!(!plain.contains("gsro"), "{plain}");
        // A server that knows the field reads a request without it (an old client's) as off.
        let mut s = ServerMachine::default();
        match s.handle(&Frame::BenchRequest(plain.as_bytes())).unwrap() {
            ServerEvent::Request(got) => assert!(!got.gsro && got.validate(&lim).is_ok()),
            e => panic!("{e:?}"),
        }
        udp.gsro = true;
        let asked = encode_doc(&udp);
        let mut s = ServerMachine::default();
        match s.handle(&Frame::BenchRequest(&asked)).unwrap() {
            ServerEvent::Request(got) => assert_eq!(*got, udp, "the field round-trips"),
            e => panic!("{e:?}"),
        }
        // A server from before the field refuses the test rather than run it without trains:
        // its TestSpec denies unknown fields, as ours does for a field we do not know.
        let mut v: serde_json::Value = serde_json::from_slice(&asked).unwrap();
        v["gsro_from_a_later_version"] = true.into();
        let mut s = ServerMachine::default();
        assert!(s.handle(&Frame::BenchRequest(v.to_string().as_bytes())).is_err());
    }

    #[test]
    fn udp_batching_stays_off_the_wire_unless_counted_and_round_trips() {
        let plain = UdpCounts { sent: 3, ..Default::default() };
        let text = serde_json::to_string(&plain).unwrap();
        assert!(!text.contains("batching"), "an old peer's UdpCounts denies unknown fields: {text}");
        let b = UdpBatching { send_calls: 1, sent_messages: 2, sent_datagrams: 128, ..Default::default() };
        let with = UdpCounts { batching: Some(b), ..plain };
        let back: UdpCounts = decode_doc(serde_json::to_string(&with).unwrap().as_bytes(), "udp").unwrap();
        assert_eq!(back, with);
        let old: UdpCounts = decode_doc(text.as_bytes(), "udp").unwrap();
        assert_eq!(old.batching, None);
    }

    #[test]
    fn a_rate_capped_server_demands_a_rate_within_its_cap() {
        let lim = Limits { max_rate_bps: 1_000_000_000, ..Limits::default() };
        let mut s = TestSpec::new(TestKind::TcpStream);
        assert_eq!(s.validate(&lim), Err(SpecError::RateRequired { cap: lim.max_rate_bps }));
        s.rate = Some(2_000_000_000);
        assert_eq!(s.validate(&lim), Err(SpecError::OverRateCap { bps: 2_000_000_000, cap: 1_000_000_000 }));
        s.rate = Some(500_000_000);
        s.validate(&lim).unwrap();
    }

    #[test]
    fn data_hello_round_trips_and_checks_cookie_test_and_index() {
        let r = ready();
        let h = DataHello { test: r.test, conn: 3, cookie: r.cookie };
        let d = DataHello::decode(&h.encode()).unwrap();
        assert_eq!(d, h);
        assert!(d.admits(&r, 4));
        assert!(!d.admits(&r, 3), "index must be below the connection count");
        let mut wrong = h;
        wrong.cookie[31] ^= 1;
        assert!(!wrong.admits(&r, 4));
        let mut other = h;
        other.test[0] ^= 1;
        assert!(!other.admits(&r, 4));
        let mut b = h.encode();
        b[0] = b'X';
        assert_eq!(DataHello::decode(&b), Err(ProtoError::BadMagic));
        let mut b = h.encode();
        b[5] = 9;
        assert!(matches!(DataHello::decode(&b), Err(ProtoError::Version { theirs: 9, .. })));
        let mut b = h.encode();
        b[7] = 1;
        assert!(DataHello::decode(&b).is_err());
    }

    #[test]
    fn msg_header_caps_both_sizes() {
        let h = MsgHeader { len: 100, reply: REPLY_STREAM };
        assert_eq!(MsgHeader::decode(&h.encode()).unwrap(), h);
        let big = MsgHeader { len: MAX_PROFILE_MSG + 1, reply: 0 }.encode();
        assert!(matches!(MsgHeader::decode(&big), Err(ProtoError::TooLong { .. })));
        let big = MsgHeader { len: 0, reply: MAX_PROFILE_MSG + 1 }.encode();
        assert!(MsgHeader::decode(&big).is_err());
    }

    #[test]
    fn udp_header_round_trips_and_short_datagrams_are_ignored() {
        let h = UdpHeader { tag: [1; 8], seq: 77, sent_ns: 123_456 };
        let mut b = [0u8; 64];
        h.write(&mut b);
        assert_eq!(UdpHeader::read(&b), Some(h));
        assert_eq!(UdpHeader::read(&b[..UDP_HEADER_LEN - 1]), None);
    }

    #[test]
    fn bench_document_over_the_cap_is_refused_before_use() {
        let mut b = vec![0x10u8];
        b.extend_from_slice(&((crate::caps::MAX_BENCH_DOC + 1) as u32).to_be_bytes());
        b.resize(5 + crate::caps::MAX_BENCH_DOC + 1, b'x');
        assert!(matches!(frame::decode(&b), Err(ProtoError::TooLong { .. })));
    }

    #[test]
    fn decode_errors_escape_control_characters_from_the_peer() {
        // serde quotes an unknown variant verbatim; the server logs this message.
        let doc = br#"{"version":1,"kind":"\u001b[2J\nforged log line"}"#;
        let err = decode_doc::<TestSpec>(doc, "test request").unwrap_err().to_string();
        assert!(!err.contains('\x1b') && !err.contains('\n'), "{err:?}");
        assert!(err.contains("\\x1b[2J\\x0aforged"), "{err}");
    }

    #[test]
    fn a_result_reads_the_hosts_description_typed_and_refuses_unknown_cpu_fields() {
        let mut v = serde_json::to_value(SideReport { version: BENCH_DOC_VERSION, ..Default::default() }).unwrap();
        v["host"] = serde_json::Value::Null;
        let r: SideReport = decode_doc(&serde_json::to_vec(&v).unwrap(), "result").unwrap();
        assert_eq!(r.host, HostInfo::default(), "null: an empty description");
        v["host"] = serde_json::from_str(r#"{"kernel":"6.1","concurrent_tests":3,"from_a_later_version":1}"#).unwrap();
        let r: SideReport = decode_doc(&serde_json::to_vec(&v).unwrap(), "result").unwrap();
        assert_eq!((r.host.machine.kernel.as_str(), r.host.concurrent_tests), ("6.1", Some(3)));
        v["host"]["cores"] = "many".into();
        assert!(decode_doc::<SideReport>(&serde_json::to_vec(&v).unwrap(), "result").is_err());
        v["host"] = serde_json::Value::Null;
        v["cpu"]["turbo"] = 1.into();
        assert!(decode_doc::<SideReport>(&serde_json::to_vec(&v).unwrap(), "result").is_err(), "CpuShare refuses it");
    }

    #[test]
    fn a_connections_tcp_statistics_keep_their_bytes_on_the_wire() {
        // The wire's TCP statistics are the bench document's `TcpStats` (one struct): these are
        // the bytes an older peer sends and reads, pinned.
        let c = ConnCounts {
            id: 3,
            rx: 5,
            tx: 7,
            tcp: Some(TcpStats {
                cwnd: 10,
                rtt_us: 52,
                rttvar_us: 8,
                retrans: 1,
                mss: 1448,
                delivery_rate: 125_000_000,
                pacing_rate: 250_000_000,
            }),
        };
        let wire = br#"{"id":3,"rx":5,"tx":7,"tcp":{"cwnd":10,"rtt_us":52,"rttvar_us":8,"retrans":1,"mss":1448,"delivery_rate":125000000,"pacing_rate":250000000}}"#;
        assert_eq!(String::from_utf8_lossy(&encode_doc(&c)), String::from_utf8_lossy(wire));
        assert_eq!(decode_doc::<ConnCounts>(wire, "connection").unwrap(), c);
        let none = ConnCounts { tcp: None, ..c };
        assert_eq!(encode_doc(&none), br#"{"id":3,"rx":5,"tx":7,"tcp":null}"#);
        // unknown fields are refused inside the statistics as around them
        let extra = br#"{"id":3,"rx":5,"tx":7,"tcp":{"cwnd":10,"rtt_us":52,"rttvar_us":8,"retrans":1,"mss":1448,"delivery_rate":1,"pacing_rate":2,"lost":0}}"#;
        assert!(decode_doc::<ConnCounts>(extra, "connection").is_err());
    }

    #[test]
    fn result_check_survives_a_test_whose_duration_overflows() {
        // Found by the `bench_machines` fuzz target: duration + warm-up overflowed u64 (a panic in
        // debug builds) when a client's test was never checked against a server's caps.
        let mut spec = TestSpec::new(TestKind::TcpStream);
        spec.duration_ms = u64::MAX;
        spec.omit_ms = u64::MAX;
        spec.interval_ms = 1;
        let r = SideReport { version: BENCH_DOC_VERSION, ..Default::default() };
        assert_eq!(r.check(&spec), Ok(()));
    }
}
