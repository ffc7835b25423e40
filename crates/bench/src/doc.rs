//! The client's measurements as the typed `linerate.bench/1` document
//! ([`linerate_model::doc::bench::BenchDocument`]): the one place a test, its two sides' counts
//! and its figures become the document that `linerate bench --json` prints, the lab keeps and
//! the report reads. The CLI calls [`document`] and nothing else.

use super::stats::{confidence, confident_enough, Point, Summary, TestResult};
use super::ClientTuning;
use linerate_model::doc::bench::{
    BenchConnection, BenchDocument, BenchHosts, BenchInterval, BenchPoint, BenchStream, BenchSummary, BenchTest,
    BufferPair, Buffers, IntervalDetail, Repeats, SidePair, SweepParam, TestOptions, BENCH_SCHEMA,
};
use linerate_model::doc::ToolInfo;
use linerate_proto::bench::{Direction, IntervalCounts, TestKind, TestSpec};
use std::net::SocketAddr;

/// How the document is stamped and judged.
#[derive(Debug, Clone, Copy)]
pub struct DocumentConfig<'a> {
    /// The agent the tests ran against.
    pub addr: SocketAddr,
    /// The client's own socket options.
    pub tuning: &'a ClientTuning,
    /// Confidence level of the repeats, percent (95 or 99).
    pub level: u32,
    /// The confidence interval's full width asked for, percent of the mean.
    pub width_pct: f64,
    /// The linerate version that ran (`CARGO_PKG_VERSION` of the binary).
    pub version: &'a str,
}

/// The points, in the order they ran, as one bench document.
pub fn document(points: &[Point], cfg: &DocumentConfig) -> BenchDocument {
    let since_epoch = points.first().and_then(|p| p.result.started.duration_since(std::time::UNIX_EPOCH).ok());
    let pts = points
        .iter()
        .map(|p| BenchPoint {
            params: p.labels.iter().cloned().collect(),
            test: test_doc(&p.result.spec, &cfg.addr, cfg.tuning),
            summary: summary_doc(&p.summary),
            intervals: intervals_doc(&p.result),
            repeats: Repeats {
                runs: p.runs.to_vec(),
                latency_us: p.latencies.clone(),
                steal: p.steal.clone(),
                confidence: confidence(&p.runs, cfg.level),
                target_width_pct: cfg.width_pct,
                met: p.runs.len() > 1 && confident_enough(&p.runs, cfg.level, cfg.width_pct, 2),
            },
        })
        .collect();
    let first = points.first();
    BenchDocument {
        schema: BENCH_SCHEMA.into(),
        tool: ToolInfo::linerate(cfg.version),
        started_unix_s: since_epoch.map_or(0, |d| d.as_secs()),
        started_unix_us: since_epoch.and_then(|d| u64::try_from(d.as_micros()).ok()),
        sweep: Some(first.map(|p| p.labels.iter().filter_map(|(k, _)| swept(k)).collect()).unwrap_or_default()),
        test: first.map(|p| test_doc(&p.result.spec, &cfg.addr, cfg.tuning)),
        hosts: BenchHosts {
            local: first.map(|p| p.result.local.host.clone()),
            remote: first.map(|p| p.result.remote.host.clone()),
        },
        summary: first.map(|p| summary_doc(&p.summary)),
        intervals: first.map(|p| intervals_doc(&p.result)),
        connections: first.map(|p| connections_doc(&p.result)),
        points: pts,
    }
}

/// The test parameter a `--sweep` key sets (the keys the CLI's sweep accepts).
pub fn swept(key: &str) -> Option<SweepParam> {
    Some(match key {
        "msg" | "length" => SweepParam::MsgSize,
        "buf" | "window" => SweepParam::Sndbuf,
        "conns" | "parallel" => SweepParam::Connections,
        "response" => SweepParam::RespSize,
        _ => return None,
    })
}

/// A summary's figures in the document's form.
pub fn summary_doc(s: &Summary) -> BenchSummary {
    let bufs = |b: Option<(u32, u32)>| b.map(|(sndbuf, rcvbuf)| Buffers { sndbuf, rcvbuf });
    let pair = |(local, remote): (f64, f64)| SidePair { local, remote };
    BenchSummary {
        throughput_bps: s.throughput_bps,
        send_bps: s.send_bps,
        receive_bps: s.receive_bps,
        connections: s.connections,
        seconds: s.seconds,
        jain: s.jain,
        fairness: s.fairness,
        transactions_per_s: s.transactions_per_s,
        latency_us: s.latency_us.clone(),
        loss_pct: s.loss_pct,
        out_of_order: s.out_of_order,
        duplicates: s.duplicates,
        packets_per_s: s.packets_per_s,
        jitter_us: s.jitter_us,
        sender_bps: s.sender_bps,
        udp_batching: s.udp_batching,
        cpu: s.cpu,
        service_demand_us_per_kb: pair(s.service_demand_us_per_kb),
        service_demand_us_per_tran: s.service_demand_us_per_tran.map(pair),
        retransmits: s.retransmits,
        rtt_us: s.rtt_us,
        buffers: BufferPair { local: bufs(s.buffers.0), remote: bufs(s.buffers.1) },
        efficiency: s.efficiency,
        errors: s.errors.clone(),
        groups: s.groups.clone(),
    }
}

/// Intervals as the receiver of the bulk saw them (the client's for rr-like tests).
pub fn intervals_doc(r: &TestResult) -> Vec<BenchInterval> {
    interval_details(r)
        .into_iter()
        .map(|(iv, detail)| {
            let secs = (iv.end_s - iv.start_s).max(1e-9);
            let bytes = if r.spec.direction == Direction::Bidir { iv.rx + iv.tx } else { iv.rx.max(iv.tx) };
            BenchInterval {
                start_s: iv.start_s,
                end_s: iv.end_s,
                bps: bytes as f64 * 8.0 / secs,
                transactions_per_s: iv.transactions as f64 / secs,
                omitted: iv.start_s * 1000.0 < r.spec.omit_ms as f64,
                detail,
            }
        })
        .collect()
}

/// Each interval of the bulk's receiver (the client's for rr-like tests) with what iperf3's
/// interval lines add: its bytes, the sender's bytes in the same span, for UDP the loss between
/// the two, for TCP the sender's retransmits and congestion window (where its side sampled them),
/// and each stream's figures as the client counted them in the same span (where it kept them).
pub fn interval_details(r: &TestResult) -> Vec<(IntervalCounts, IntervalDetail)> {
    let one_way = matches!(r.spec.kind, TestKind::TcpStream | TestKind::UdpStream)
        && matches!(r.spec.direction, Direction::Send | Direction::Receive);
    let (receiver, sender) = match r.spec.direction {
        Direction::Send if one_way => (&r.remote, Some(&r.local)),
        Direction::Receive if one_way => (&r.local, Some(&r.remote)),
        _ => (&r.local, None),
    };
    receiver
        .intervals
        .iter()
        .enumerate()
        .map(|(i, iv)| {
            // The two sides close their intervals on their own clocks, from their own Go.
            let half = r.spec.interval_ms as f64 / 2000.0;
            let sent = sender.and_then(|s| s.intervals.get(i)).filter(|s| (s.start_s - iv.start_s).abs() < half);
            let mut d = IntervalDetail {
                bytes: one_way.then_some(iv.rx),
                streams: streams_doc(r, i, iv.start_s),
                ..IntervalDetail::default()
            };
            if let Some(s) = sent {
                d.sent_bytes = Some(s.tx);
                if r.spec.kind == TestKind::UdpStream && s.tx > 0 {
                    d.lost_pct = Some((1.0 - iv.rx as f64 / s.tx as f64).max(0.0) * 100.0);
                }
                (d.retransmits, d.cwnd_bytes) = (s.retrans, s.cwnd);
            }
            (*iv, d)
        })
        .collect()
}

/// The client's per-connection counts of its interval `i`, when that interval starts where the
/// receiver's (at `start_s`) does: both sides close intervals on their own clocks.
fn streams_doc(r: &TestResult, i: usize, start_s: f64) -> Vec<BenchStream> {
    let half = r.spec.interval_ms as f64 / 2000.0;
    let (Some(iv), Some(streams)) = (r.local.intervals.get(i), r.streams.get(i)) else { return Vec::new() };
    if (iv.start_s - start_s).abs() >= half {
        return Vec::new();
    }
    let secs = (iv.end_s - iv.start_s).max(1e-9);
    let rr = matches!(r.spec.kind, TestKind::TcpRr | TestKind::TcpCrr | TestKind::Profile);
    streams
        .iter()
        .map(|s| BenchStream {
            id: s.id,
            sent_bytes: s.tx,
            received_bytes: s.rx,
            bps: (s.tx + s.rx) as f64 * 8.0 / secs,
            transactions_per_s: rr.then(|| s.transactions as f64 / secs),
            retransmits: s.retrans,
            cwnd_bytes: s.cwnd,
        })
        .collect()
}

fn connections_doc(r: &TestResult) -> Vec<BenchConnection> {
    let recv_side = match r.spec.direction {
        Direction::Receive => &r.local,
        _ if matches!(r.spec.kind, TestKind::TcpStream | TestKind::UdpStream) => &r.remote,
        _ => &r.local,
    };
    r.local
        .conns
        .iter()
        .map(|c| {
            let rc = recv_side.conns.get(c.id as usize);
            let bytes = match r.spec.direction {
                Direction::Bidir => c.rx + r.remote.conns.get(c.id as usize).map_or(0, |x| x.rx),
                _ => rc.map_or(0, |x| {
                    x.rx + if std::ptr::eq(recv_side, &r.local)
                        && !matches!(r.spec.kind, TestKind::TcpStream | TestKind::UdpStream)
                    {
                        x.tx
                    } else {
                        0
                    }
                }),
            };
            let secs = recv_side.seconds.max(1e-9);
            BenchConnection {
                id: c.id,
                bytes,
                bps: bytes as f64 * 8.0 / secs,
                tcp: c.tcp,
                server_tcp: r.remote.conns.get(c.id as usize).and_then(|x| x.tcp),
            }
        })
        .collect()
}

/// A test as the client asked for it, with the server and the client's own options.
pub fn test_doc(s: &TestSpec, addr: &SocketAddr, tuning: &ClientTuning) -> BenchTest {
    let direction = match s.direction {
        Direction::Send => "send",
        Direction::Receive => "receive",
        Direction::Bidir => "bidir",
    };
    BenchTest {
        version: s.version,
        kind: s.kind.name().into(),
        direction: direction.into(),
        connections: s.connections,
        duration_ms: s.duration_ms,
        omit_ms: s.omit_ms,
        interval_ms: s.interval_ms,
        msg_size: s.msg_size,
        resp_size: s.resp_size,
        sndbuf: s.sndbuf,
        rcvbuf: s.rcvbuf,
        rate: s.rate,
        zerocopy: s.zerocopy,
        nodelay: s.nodelay,
        profile: s.profile.clone(),
        server: addr.to_string(),
        test: s.kind.name().into(),
        options: TestOptions {
            congestion: s.congestion.clone(),
            tos: s.tos,
            bytes: s.bytes,
            mss: tuning.mss,
            cport: tuning.cport,
            client_cpu: tuning.cpu,
            server_cpu: s.server_cpu,
            each_way: s.each_way,
            gsro: (s.kind == TestKind::UdpStream).then_some(s.gsro),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_keys_name_the_test_field_they_set() {
        assert_eq!(swept("conns"), Some(SweepParam::Connections));
        assert_eq!(swept("parallel"), Some(SweepParam::Connections));
        assert_eq!(swept("window"), Some(SweepParam::Sndbuf));
        assert_eq!(swept("rate"), None);
    }

    #[test]
    fn each_interval_of_the_document_has_the_clients_streams_of_the_same_span() {
        use crate::stats::StreamCounts;
        use linerate_proto::bench::SideReport;
        let mut spec = TestSpec::new(TestKind::TcpStream);
        (spec.connections, spec.interval_ms) = (2, 1000);
        let iv = |start_s, rx, tx| IntervalCounts { start_s, end_s: start_s + 1.0, rx, tx, ..Default::default() };
        let st = |id, tx, retrans: Option<u64>| StreamCounts {
            id,
            tx,
            retrans,
            cwnd: retrans.map(|_| 1000),
            ..Default::default()
        };
        let r = TestResult {
            spec,
            started: std::time::UNIX_EPOCH,
            local: SideReport {
                intervals: vec![iv(0.0, 0, 300), iv(1.0, 0, 500), iv(2.0, 0, 100)],
                ..Default::default()
            },
            // the agent's intervals, from its own Go; its third is of another span
            remote: SideReport {
                intervals: vec![iv(0.01, 290, 0), iv(1.01, 500, 0), iv(2.9, 100, 0)],
                ..Default::default()
            },
            latency: None,
            group_latency: Vec::new(),
            histogram: None,
            group_histograms: Vec::new(),
            streams: vec![
                vec![st(0, 200, Some(1)), st(1, 100, Some(0))],
                vec![st(0, 250, Some(0)), st(1, 250, Some(2))],
                vec![st(0, 50, Some(0)), st(1, 50, Some(0))],
            ],
        };
        let ivs = intervals_doc(&r);
        for d in ivs[..2].iter().map(|i| &i.detail) {
            assert_eq!(d.streams.iter().map(|s| s.sent_bytes).sum::<u64>(), d.sent_bytes.unwrap(), "{d:?}");
        }
        let first = BenchStream {
            id: 0,
            sent_bytes: 200,
            received_bytes: 0,
            bps: 1600.0,
            transactions_per_s: None,
            retransmits: Some(1),
            cwnd_bytes: Some(1000),
        };
        assert_eq!(ivs[0].detail.streams[0], first);
        assert!(ivs[2].detail.streams.is_empty(), "the client's interval is of another span: none");
        let json = serde_json::to_value(&ivs[0]).unwrap();
        assert_eq!(json["streams"][1]["sent_bytes"], 100, "{json}");
        assert!(serde_json::to_value(&ivs[2]).unwrap().get("streams").is_none(), "absent when none");
    }

    #[test]
    fn a_test_keeps_the_clients_own_options_and_its_profile() {
        let mut spec = TestSpec::new(TestKind::TcpStream);
        spec.rate = Some(1_000_000_000);
        spec.direction = Direction::Bidir;
        let tuning = ClientTuning { mss: Some(1400), cpu: Some(2), ..ClientTuning::default() };
        let t = test_doc(&spec, &"127.0.0.1:7878".parse().unwrap(), &tuning);
        assert_eq!((t.test.as_str(), t.direction.as_str(), t.rate), ("tcp-stream", "bidir", Some(1_000_000_000)));
        assert_eq!((t.options.mss, t.options.client_cpu, t.server.as_str()), (Some(1400), Some(2), "127.0.0.1:7878"));
        let empty = document(
            &[],
            &DocumentConfig {
                addr: "127.0.0.1:1".parse().unwrap(),
                tuning: &tuning,
                level: 95,
                width_pct: 5.0,
                version: "0",
            },
        );
        assert_eq!((empty.test, empty.hosts.local, empty.started_unix_s), (None, None, 0), "no point: nulls");
    }
}
