//! A one-point bench document in iperf3's `-J` shape (`linerate bench --json-iperf3`), so that
//! parsers written for iperf3 read linerate's figures: iperf3's field names for what both tools
//! have (`start.test_start`, `intervals[].sum`, `end.sum_sent`, `end.sum_received`, `end.sum`
//! for UDP, `end.cpu_utilization_percent`, `end.streams`, `intervals[].streams`), nothing
//! invented under them. What iperf3 has and linerate does not measure is left out, not zeroed:
//! the socket numbers (each stream's `socket` is its connection index), a stream interval's
//! RTT. `intervals[].streams` are the client's own counts, as iperf3's client writes them
//! (with `-P 2` or more; empty with one stream), while `intervals[].sum` is the receiver's
//! (`sender: false`). Times are seconds, rates bit/s, jitter milliseconds, as iperf3's.

use super::bench::{BenchDocument, BenchInterval, BenchStream, BenchSummary, BenchTest};
use serde::Serialize;

/// iperf3's `-J` document.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct Iperf3Document {
    /// The test as it started.
    pub start: Start,
    /// One entry per reporting interval.
    pub intervals: Vec<Interval>,
    /// The totals.
    pub end: End,
}

/// `start`.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct Start {
    /// `linerate VERSION` where iperf3 writes `iperf 3.x`.
    pub version: String,
    /// The client's kernel.
    pub system_info: String,
    /// When the test started.
    pub timestamp: Timestamp,
    /// The agent.
    pub connecting_to: Endpoint,
    /// The test's parameters.
    pub test_start: TestStart,
}

/// `start.timestamp`.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct Timestamp {
    /// RFC 3339 (iperf3 writes an RFC 1123 date here; `timesecs` is the same instant).
    pub time: String,
    /// Seconds since the epoch.
    pub timesecs: u64,
}

/// `start.connecting_to`.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct Endpoint {
    /// The host as given (an address).
    pub host: String,
    /// Its port.
    pub port: u16,
}

/// `start.test_start`.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct TestStart {
    /// `TCP` or `UDP`.
    pub protocol: String,
    /// Streams (`-P`; with `--bidir`, each way).
    pub num_streams: u32,
    /// Write (datagram) size, bytes.
    pub blksize: u32,
    /// Warm-up, seconds.
    pub omit: f64,
    /// Duration, seconds.
    pub duration: f64,
    /// Bytes to send (`-n`), 0 for a timed test.
    pub bytes: u64,
    /// 1 for `-R`.
    pub reverse: u8,
    /// 1 for `--bidir`.
    pub bidir: u8,
    /// The IP TOS byte.
    pub tos: u8,
    /// The total rate cap, bit/s (0: none).
    pub target_bitrate: u64,
}

/// `intervals[]`.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct Interval {
    /// Per stream, as the client counted it (empty with one stream): a connection that
    /// carried both ways (`--bidir` before each way had its own) has an entry each way.
    pub streams: Vec<Sum>,
    /// The test's interval.
    pub sum: Sum,
}

/// A span's totals in one direction (`sum`, `sum_sent`, `sum_received`, a stream's `sender`
/// and `receiver`).
#[derive(Serialize, Debug, Clone, PartialEq, Default)]
pub struct Sum {
    /// The stream's connection index (iperf3: its socket), in stream entries only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub socket: Option<u32>,
    /// Start, seconds since the test's start.
    pub start: f64,
    /// End.
    pub end: f64,
    /// `end - start`.
    pub seconds: f64,
    /// Bytes.
    pub bytes: u64,
    /// Bit/s.
    pub bits_per_second: f64,
    /// TCP: segments retransmitted, where the sender counted them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retransmits: Option<u64>,
    /// TCP: congestion window, bytes (interval entries).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snd_cwnd: Option<u64>,
    /// TCP: smoothed round trip, µs (stream entries).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean_rtt: Option<u64>,
    /// UDP: jitter, milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jitter_ms: Option<f64>,
    /// UDP: datagrams lost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lost_packets: Option<u64>,
    /// UDP: datagrams sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub packets: Option<u64>,
    /// UDP: percent lost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lost_percent: Option<f64>,
    /// A warm-up interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub omitted: Option<bool>,
    /// Counted by the sender (iperf3's flag: which side's view this is).
    pub sender: bool,
}

/// `end.streams[]`.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct EndStream {
    /// The sender's view.
    pub sender: Sum,
    /// The receiver's view.
    pub receiver: Sum,
}

/// `end.cpu_utilization_percent`: each process's CPU time over the test, percent of one core.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct Cpu {
    /// The client's user + system.
    pub host_total: f64,
    /// The client's user.
    pub host_user: f64,
    /// The client's system.
    pub host_system: f64,
    /// The agent's user + system.
    pub remote_total: f64,
    /// The agent's user.
    pub remote_user: f64,
    /// The agent's system.
    pub remote_system: f64,
}

/// `end`.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct End {
    /// Per stream, both views.
    pub streams: Vec<EndStream>,
    /// The data direction's (with `--bidir`, client to server) as the sender counted it.
    pub sum_sent: Sum,
    /// The same as the receiver counted it.
    pub sum_received: Sum,
    /// `--bidir`: server to client, as its sender counted it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sum_sent_bidir_reverse: Option<Sum>,
    /// `--bidir`: server to client, as the client received it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sum_received_bidir_reverse: Option<Sum>,
    /// UDP: the receiver's loss and jitter over the test.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sum: Option<Sum>,
    /// Process CPU.
    pub cpu_utilization_percent: Cpu,
    /// The sender's congestion control (TCP).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sender_tcp_congestion: Option<String>,
    /// The receiver's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receiver_tcp_congestion: Option<String>,
}

/// Why a bench document has no iperf3 form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotIperf3 {
    /// A sweep, a repeat or a profile: iperf3 has one test per document.
    NotOnePoint,
    /// A request/response test: iperf3 has none.
    Kind(String),
}

impl std::fmt::Display for NotIperf3 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotIperf3::NotOnePoint => f.write_str("iperf3's JSON holds one test: no --sweep, --repeat or profile"),
            NotIperf3::Kind(k) => write!(f, "iperf3's JSON has tcp-stream and udp-stream tests, not {k}"),
        }
    }
}

impl std::error::Error for NotIperf3 {}

/// The iperf3 form of `doc`: one tcp-stream or udp-stream point.
pub fn from_bench(doc: &BenchDocument) -> Result<Iperf3Document, NotIperf3> {
    let ([point], Some(test), Some(s)) = (doc.points.as_slice(), doc.test.as_ref(), doc.summary.as_ref()) else {
        return Err(NotIperf3::NotOnePoint);
    };
    if point.repeats.runs.len() > 1 || test.profile.is_some() {
        return Err(NotIperf3::NotOnePoint);
    }
    let udp = match test.kind.as_str() {
        "tcp-stream" => false,
        "udp-stream" => true,
        other => return Err(NotIperf3::Kind(other.to_string())),
    };
    let (host, port) = split_host_port(&test.server);
    let kernel = doc.hosts.local.as_ref().map(|h| h.machine.kernel.clone()).unwrap_or_default();
    let start = Start {
        version: format!("linerate {}", doc.tool.version),
        system_info: kernel,
        timestamp: Timestamp {
            time: crate::time::rfc3339_millis(doc.started_unix_s.saturating_mul(1000)),
            timesecs: doc.started_unix_s,
        },
        connecting_to: Endpoint { host, port },
        test_start: test_start(test, udp),
    };
    let intervals = doc.intervals.as_deref().unwrap_or_default().iter().map(|iv| interval(iv, test, udp)).collect();
    Ok(Iperf3Document { start, intervals, end: end(doc, test, s, udp) })
}

fn test_start(t: &BenchTest, udp: bool) -> TestStart {
    TestStart {
        protocol: if udp { "UDP" } else { "TCP" }.into(),
        num_streams: t.connections,
        blksize: t.msg_size,
        omit: t.omit_ms as f64 / 1000.0,
        duration: t.duration_ms as f64 / 1000.0,
        bytes: t.options.bytes.unwrap_or(0),
        reverse: u8::from(t.direction == "receive"),
        bidir: u8::from(t.direction == "bidir"),
        tos: t.options.tos.unwrap_or(0),
        target_bitrate: t.rate.unwrap_or(0),
    }
}

fn interval(iv: &BenchInterval, t: &BenchTest, udp: bool) -> Interval {
    let seconds = iv.end_s - iv.start_s;
    let bytes = iv.detail.bytes.unwrap_or_else(|| (iv.bps * seconds / 8.0).round() as u64);
    let sum = Sum {
        start: iv.start_s,
        end: iv.end_s,
        seconds,
        bytes,
        bits_per_second: iv.bps,
        retransmits: iv.detail.retransmits.filter(|_| !udp),
        snd_cwnd: iv.detail.cwnd_bytes,
        lost_percent: iv.detail.lost_pct.filter(|_| udp),
        omitted: Some(iv.omitted),
        // linerate's interval is the receiver's count, the sender's beside it
        sender: false,
        ..Sum::default()
    };
    let streams = iv.detail.streams.iter().flat_map(|s| stream_entries(s, iv, t, udp)).collect();
    Interval { streams, sum }
}

/// A stream's entries in an interval, as iperf3's client writes them: its own count, `sender`
/// where it sends. A connection of `--bidir` each way carries one way (the first `connections`
/// send); one that carried both ways has an entry each way.
fn stream_entries(s: &BenchStream, iv: &BenchInterval, t: &BenchTest, udp: bool) -> Vec<Sum> {
    let (sends, receives) = match t.direction.as_str() {
        "send" => (true, false),
        "receive" => (false, true),
        _ if t.options.each_way => (s.id < t.connections, s.id >= t.connections),
        _ => (true, true),
    };
    let seconds = iv.end_s - iv.start_s;
    let entry = |bytes: u64, sender: bool| Sum {
        socket: Some(s.id),
        start: iv.start_s,
        end: iv.end_s,
        seconds,
        bytes,
        bits_per_second: if seconds > 0.0 { bytes as f64 * 8.0 / seconds } else { 0.0 },
        retransmits: s.retransmits.filter(|_| sender && !udp),
        snd_cwnd: s.cwnd_bytes.filter(|_| sender && !udp),
        omitted: Some(iv.omitted),
        sender,
        ..Sum::default()
    };
    [(sends, s.sent_bytes, true), (receives, s.received_bytes, false)]
        .into_iter()
        .filter(|(way, _, _)| *way)
        .map(|(_, bytes, sender)| entry(bytes, sender))
        .collect()
}

fn end(doc: &BenchDocument, t: &BenchTest, s: &BenchSummary, udp: bool) -> End {
    let span = |bytes: u64, bps: f64, sender: bool| Sum {
        start: 0.0,
        end: s.seconds,
        seconds: s.seconds,
        bytes,
        bits_per_second: bps,
        sender,
        ..Sum::default()
    };
    let bytes_of = |bps: f64| (bps * s.seconds / 8.0).round() as u64;
    let counted: Vec<&BenchInterval> =
        doc.intervals.as_deref().unwrap_or_default().iter().filter(|i| !i.omitted).collect();
    let sent_bytes: Option<u64> = counted.iter().map(|i| i.detail.sent_bytes).sum();
    let bidir = t.direction == "bidir";
    // the data direction: client to server unless -R; with --bidir client to server here and
    // server to client in the reverse sums
    let forward_bps = match t.direction.as_str() {
        "receive" => s.receive_bps,
        "bidir" => s.send_bps,
        _ => s.send_bps.max(s.receive_bps),
    };
    let received = span(bytes_of(forward_bps), forward_bps, false);
    // the sender's count: UDP's offered rate; TCP's intervals' sent bytes, never under what
    // arrived (the intervals can miss the last bytes in flight at the stop)
    let sent_bytes = match (udp, sent_bytes.filter(|_| !bidir)) {
        (true, _) => s.sender_bps.map_or(received.bytes, bytes_of),
        (false, Some(b)) => b.max(received.bytes),
        (false, None) => received.bytes,
    };
    let sent_bps = if s.seconds > 0.0 { sent_bytes as f64 * 8.0 / s.seconds } else { 0.0 };
    let mut sent = span(sent_bytes, sent_bps, true);
    sent.retransmits = (!udp).then_some(s.retransmits);
    let conns = doc.connections.as_deref().unwrap_or_default();
    let streams = conns
        .iter()
        .map(|c| {
            let tcp = c.tcp.or(c.server_tcp);
            let mut snd = span(c.bytes, c.bps, true);
            snd.socket = Some(c.id);
            snd.retransmits = tcp.map(|x| u64::from(x.retrans)).filter(|_| !udp);
            snd.mean_rtt = tcp.map(|x| u64::from(x.rtt_us));
            let mut rcv = span(c.bytes, c.bps, false);
            rcv.socket = Some(c.id);
            EndStream { sender: snd, receiver: rcv }
        })
        .collect();
    let udp_sum = udp.then(|| {
        let packets = s.sender_bps.map(|bps| (bps * s.seconds / 8.0 / f64::from(t.msg_size.max(1))).round() as u64);
        let lost = packets.zip(s.loss_pct).map(|(p, l)| (p as f64 * l / 100.0).round() as u64);
        Sum {
            jitter_ms: s.jitter_us.map(|j| j / 1000.0),
            lost_packets: lost,
            packets,
            lost_percent: s.loss_pct,
            ..received.clone()
        }
    });
    let pct = |x: f64| if s.seconds > 0.0 { x / s.seconds * 100.0 } else { 0.0 };
    let (l, r) = (&s.cpu.local, &s.cpu.remote);
    let cc = |h: Option<&crate::host::HostInfo>| h.and_then(|h| h.congestion_control_in_use.clone());
    let (client_cc, server_cc) = (cc(doc.hosts.local.as_ref()), cc(doc.hosts.remote.as_ref()));
    let (sender_cc, receiver_cc) =
        if t.direction == "receive" { (server_cc, client_cc) } else { (client_cc, server_cc) };
    End {
        streams,
        sum_sent: sent,
        sum_received: received,
        sum_sent_bidir_reverse: bidir.then(|| span(bytes_of(s.receive_bps), s.receive_bps, true)),
        sum_received_bidir_reverse: bidir.then(|| span(bytes_of(s.receive_bps), s.receive_bps, false)),
        sum: udp_sum,
        cpu_utilization_percent: Cpu {
            host_total: pct(l.process_user_s + l.process_system_s),
            host_user: pct(l.process_user_s),
            host_system: pct(l.process_system_s),
            remote_total: pct(r.process_user_s + r.process_system_s),
            remote_user: pct(r.process_user_s),
            remote_system: pct(r.process_system_s),
        },
        sender_tcp_congestion: sender_cc.filter(|_| !udp),
        receiver_tcp_congestion: receiver_cc.filter(|_| !udp),
    }
}

/// `HOST:PORT` (IPv6 in brackets) apart; a server without a port reads as port 0.
fn split_host_port(server: &str) -> (String, u16) {
    match server.rsplit_once(':') {
        Some((h, p)) if p.parse::<u16>().is_ok() => {
            (h.trim_start_matches('[').trim_end_matches(']').to_string(), p.parse().unwrap_or(0))
        }
        _ => (server.to_string(), 0),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The example document cut to its first point, one run.
    fn one_point() -> BenchDocument {
        let mut doc = super::super::example::bench();
        doc.points.truncate(1);
        doc.points[0].repeats.runs.truncate(1);
        for t in doc.test.iter_mut().chain(doc.points.iter_mut().map(|p| &mut p.test)) {
            t.kind = "tcp-stream".into();
        }
        doc
    }

    #[test]
    fn a_stream_test_reads_as_iperf3s_json_where_parsers_look() {
        let doc = one_point();
        let i = serde_json::to_value(from_bench(&doc).unwrap()).unwrap();
        let s = doc.summary.as_ref().unwrap();
        let t = doc.test.as_ref().unwrap();
        // the fields iperf3 parsers read
        assert_eq!(i["start"]["test_start"]["protocol"], "TCP");
        assert_eq!(i["start"]["test_start"]["num_streams"], t.connections);
        assert_eq!(i["start"]["test_start"]["duration"].as_f64().unwrap(), t.duration_ms as f64 / 1000.0);
        assert_eq!(i["end"]["sum_received"]["bits_per_second"].as_f64().unwrap(), s.send_bps.max(s.receive_bps));
        assert_eq!(i["end"]["sum_sent"]["retransmits"], s.retransmits);
        assert!(i["end"]["sum_sent"]["sender"].as_bool().unwrap());
        assert!(i["end"]["cpu_utilization_percent"]["host_total"].is_f64());
        let ivs = i["intervals"].as_array().unwrap();
        assert_eq!(ivs.len(), doc.intervals.as_ref().unwrap().len());
        assert_eq!(ivs[0]["sum"]["bits_per_second"].as_f64(), doc.intervals.as_ref().unwrap().first().map(|x| x.bps));
        assert_eq!(i["end"]["streams"].as_array().unwrap().len(), doc.connections.as_ref().unwrap().len());
        assert!(i["end"].get("sum").is_none(), "TCP has no UDP sum");
    }

    #[test]
    fn each_streams_interval_figures_are_iperf3s_intervals_streams() {
        let mut doc = one_point();
        let stream = |id, sent_bytes, received_bytes, retransmits| BenchStream {
            id,
            sent_bytes,
            received_bytes,
            bps: (sent_bytes + received_bytes) as f64 * 8.0,
            retransmits,
            cwnd_bytes: retransmits.map(|_| 65_536),
            ..BenchStream::default()
        };
        doc.intervals.as_mut().unwrap()[1].detail.streams =
            vec![stream(0, 125_000_000, 0, Some(4)), stream(1, 100_000_000, 0, Some(0))];
        let i = serde_json::to_value(from_bench(&doc).unwrap()).unwrap();
        assert_eq!(i["intervals"][0]["streams"], serde_json::json!([]), "no streams kept: none written");
        let ss = i["intervals"][1]["streams"].as_array().unwrap();
        let iv = &doc.intervals.as_ref().unwrap()[1];
        assert_eq!(ss.len(), 2, "{ss:?}");
        for (s, (socket, bytes, retr)) in ss.iter().zip([(0, 125_000_000u64, 4), (1, 100_000_000, 0)]) {
            assert_eq!(
                (s["socket"].as_u64(), s["bytes"].as_u64(), s["retransmits"].as_u64()),
                (Some(socket), Some(bytes), Some(retr))
            );
            assert_eq!((s["start"].as_f64(), s["end"].as_f64()), (Some(iv.start_s), Some(iv.end_s)));
            assert_eq!(s["seconds"].as_f64(), Some(iv.end_s - iv.start_s));
            assert_eq!(s["bits_per_second"].as_f64(), Some(bytes as f64 * 8.0 / (iv.end_s - iv.start_s)));
            assert_eq!(
                (s["sender"].as_bool(), s["snd_cwnd"].as_u64(), s["omitted"].as_bool()),
                (Some(true), Some(65_536), Some(false))
            );
        }
        // -R: the client receives on every stream; no sender figures
        for t in doc.test.iter_mut() {
            t.direction = "receive".into();
        }
        doc.intervals.as_mut().unwrap()[1].detail.streams = vec![stream(0, 0, 3000, None)];
        let i = serde_json::to_value(from_bench(&doc).unwrap()).unwrap();
        let s = &i["intervals"][1]["streams"][0];
        assert_eq!((s["bytes"].as_u64(), s["sender"].as_bool()), (Some(3000), Some(false)));
        assert!(s.get("retransmits").is_none() && s.get("snd_cwnd").is_none(), "{s}");
        // --bidir -P 1 each way: connection 0 sends, 1 receives; a connection of the older
        // --bidir carried both, an entry each way
        for t in doc.test.iter_mut() {
            (t.direction, t.connections, t.options.each_way) = ("bidir".into(), 1, true);
        }
        doc.intervals.as_mut().unwrap()[1].detail.streams = vec![stream(0, 1000, 0, Some(1)), stream(1, 0, 2000, None)];
        // (socket, bytes, sender) of the second interval's streams
        let ways = |doc: &BenchDocument| -> Vec<(u64, u64, bool)> {
            let i = serde_json::to_value(from_bench(doc).unwrap()).unwrap();
            let ss = i["intervals"][1]["streams"].as_array().unwrap().clone();
            ss.iter()
                .map(|s| (s["socket"].as_u64().unwrap(), s["bytes"].as_u64().unwrap(), s["sender"].as_bool().unwrap()))
                .collect()
        };
        assert_eq!(ways(&doc), [(0, 1000, true), (1, 2000, false)]);
        doc.test.as_mut().unwrap().options.each_way = false;
        doc.intervals.as_mut().unwrap()[1].detail.streams = vec![stream(0, 1000, 2000, None)];
        assert_eq!(ways(&doc), [(0, 1000, true), (0, 2000, false)]);
    }

    #[test]
    fn a_udp_test_has_iperf3s_loss_and_jitter_sum_and_other_tests_are_refused() {
        let mut doc = one_point();
        for t in doc.test.iter_mut().chain(doc.points.iter_mut().map(|p| &mut p.test)) {
            t.kind = "udp-stream".into();
            t.msg_size = 1000;
        }
        let s = doc.summary.as_mut().unwrap();
        (s.sender_bps, s.loss_pct, s.jitter_us, s.seconds) = (Some(8e6), Some(2.0), Some(250.0), 10.0);
        let i = serde_json::to_value(from_bench(&doc).unwrap()).unwrap();
        let sum = &i["end"]["sum"];
        // 8 Mbit/s of 1000-byte datagrams for 10 s: 10,000 sent, 2 % of them lost
        assert_eq!((sum["packets"].as_u64(), sum["lost_packets"].as_u64()), (Some(10_000), Some(200)));
        assert_eq!(sum["jitter_ms"].as_f64(), Some(0.25));
        assert_eq!(i["start"]["test_start"]["protocol"], "UDP");
        assert!(i["end"]["sum_sent"].get("retransmits").is_none());
        // request/response has no iperf3 form; nor a repeated point
        let mut rr = one_point();
        rr.test.as_mut().unwrap().kind = "tcp-rr".into();
        assert_eq!(from_bench(&rr), Err(NotIperf3::Kind("tcp-rr".into())));
        let mut rep = one_point();
        rep.points[0].repeats.runs = vec![1.0, 2.0];
        assert_eq!(from_bench(&rep), Err(NotIperf3::NotOnePoint));
        assert_eq!(split_host_port("[::1]:5201"), ("::1".into(), 5201));
    }
}
