//! Integration tests: every benchmark test kind against a real agent on loopback, refusals of bad
//! parameters, and clients that misbehave without blocking others.

use linerate_agent::server::{Server, ServerConfig, ServerHandle};
use linerate_bench::{BenchClient, BenchClientConfig, ClientTuning, TestResult};
use linerate_net::auth::secret::Secret;
use linerate_net::conn;
use linerate_net::{EngineError, UsageError};
use linerate_proto::bench::{
    decode_doc, encode_doc, DataHello, Direction, FlowOp, Group, Profile, Ready, Size, TestKind, TestSpec, Transaction,
};
use linerate_proto::frame::{self, Frame};
use linerate_proto::ErrorCode;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

fn agent(tune: impl FnOnce(&mut ServerConfig)) -> (ServerHandle, Secret) {
    let secret = Secret::generate().unwrap();
    let mut cfg = ServerConfig::bench_only("127.0.0.1:0".parse().unwrap(), secret.clone());
    cfg.log = false;
    cfg.handshake_timeout = Duration::from_secs(2);
    cfg.bench.handshake_timeout = Duration::from_secs(2);
    tune(&mut cfg);
    (Server::bind(cfg).unwrap().spawn(), secret)
}

fn client(h: &ServerHandle, secret: &Secret) -> Result<BenchClient, EngineError> {
    client_tuned(h, secret, ClientTuning::default())
}

fn client_tuned(h: &ServerHandle, secret: &Secret, tuning: ClientTuning) -> Result<BenchClient, EngineError> {
    BenchClient::connect(BenchClientConfig {
        addr: h.addr,
        secret: secret.clone(),
        key_auth: None,
        suite: conn::preferred_suite(),
        timeout: Duration::from_secs(10),
        tuning,
    })
}

fn spec(kind: TestKind, conns: u32, ms: u64) -> TestSpec {
    let mut s = TestSpec::new(kind);
    s.connections = conns;
    s.duration_ms = ms;
    s.interval_ms = 100;
    s
}

fn run(h: &ServerHandle, secret: &Secret, s: &TestSpec) -> TestResult {
    let mut lines = 0;
    let r = client(h, secret).unwrap().run(s, &mut |_| lines += 1).unwrap();
    assert!(lines >= 1, "interval reports were produced");
    r
}

#[test]
fn tcp_stream_each_direction_counts_at_the_receiver() {
    let (h, secret) = agent(|_| {});
    for dir in [Direction::Send, Direction::Receive, Direction::Bidir] {
        let mut s = spec(TestKind::TcpStream, 3, 400);
        s.direction = dir;
        let r = run(&h, &secret, &s);
        let sum = r.summary(Some((10e9, 1500)));
        let (rx_srv, rx_cli): (u64, u64) =
            (r.remote.conns.iter().map(|c| c.rx).sum(), r.local.conns.iter().map(|c| c.rx).sum());
        match dir {
            Direction::Send => assert!(rx_srv > 1_000_000 && rx_cli == 0, "{dir:?}: {rx_srv} {rx_cli}"),
            Direction::Receive => assert!(rx_cli > 1_000_000 && rx_srv == 0, "{dir:?}: {rx_srv} {rx_cli}"),
            Direction::Bidir => assert!(rx_cli > 1_000_000 && rx_srv > 1_000_000, "{dir:?}: {rx_srv} {rx_cli}"),
        }
        // What the receiver counted cannot exceed what the sender wrote, plus what was still in
        // the sockets' buffers when the sender stopped counting (each side freezes at its stop).
        let tx_cli: u64 = r.local.conns.iter().map(|c| c.tx).sum();
        let in_flight: u64 = 3 * 2 * (16 << 20);
        assert!(rx_srv <= tx_cli + in_flight, "server got {rx_srv}, client sent {tx_cli}");
        assert_eq!(r.remote.conns.len(), 3);
        assert!(sum.throughput_bps > 1e6, "{}", sum.throughput_bps);
        let f = sum.fairness.unwrap();
        assert!(f.jain.is_some_and(|j| j > 0.3 && j <= 1.0 + 1e-9), "{f:?}");
        assert!(sum.efficiency.unwrap().ceiling_bps > 9.0e9);
        assert!(r.local.conns.iter().all(|c| c.tcp.is_some_and(|t| t.mss > 0)), "TCP_INFO on every connection");
        assert!(r.remote.cpu.cores >= 1 && r.remote.cpu.idle < 1.0);
        assert!(r.local.buffers.is_some_and(|(s, r)| s > 0 && r > 0));
        assert!(!r.remote.host.machine.kernel.is_empty(), "{:?}", r.remote.host);
    }
}

#[test]
fn bidir_each_way_opens_its_connections_in_each_direction_as_iperf3_does() {
    let (h, secret) = agent(|_| {});
    let mut s = spec(TestKind::TcpStream, 2, 400);
    s.direction = Direction::Bidir;
    s.each_way = true;
    let r = run(&h, &secret, &s);
    // 2 each way: the server accepted 4 data connections; 0 and 1 carry the client's data
    // only, 2 and 3 the server's only (a connection carrying both would count on both sides)
    assert_eq!((r.local.conns.len(), r.remote.conns.len()), (4, 4), "{:?}", r.remote.conns);
    for id in 0..4u32 {
        let at = |side: &[linerate_proto::bench::ConnCounts]| side.iter().find(|c| c.id == id).map_or(0, |c| c.rx);
        let (srv, cli) = (at(&r.remote.conns), at(&r.local.conns));
        if id < 2 {
            assert!(srv > 100_000 && cli == 0, "connection {id} sends from the client: server got {srv}, client {cli}");
        } else {
            assert!(cli > 100_000 && srv == 0, "connection {id} sends from the server: server got {srv}, client {cli}");
        }
    }
    let sum = r.summary(None);
    assert!(sum.send_bps > 1e6 && sum.receive_bps > 1e6, "{} {}", sum.send_bps, sum.receive_bps);
    // each way applies to tcp-stream --bidir only
    let mut bad = spec(TestKind::TcpStream, 2, 100);
    bad.each_way = true;
    assert!(bad.validate(&linerate_proto::bench::Limits::default()).is_err());
}

/// iperf3's per-stream lines with `-P` (issue 43): the client keeps each connection's share of
/// every interval, which adds up to the interval's totals, and hands it to the live lines.
#[test]
fn with_several_connections_each_interval_keeps_every_connections_share_of_it() {
    let (h, secret) = agent(|_| {});
    for (kind, conns) in [(TestKind::TcpStream, 3u32), (TestKind::TcpRr, 2), (TestKind::UdpStream, 2)] {
        let mut s = spec(kind, conns, 500);
        if kind == TestKind::UdpStream {
            (s.msg_size, s.rate) = (1000, Some(10_000_000));
        }
        let mut live = Vec::new();
        let r = client(&h, &secret).unwrap().run(&s, &mut |iv| live.push((*iv.counts, iv.streams.to_vec()))).unwrap();
        assert_eq!(r.streams.len(), r.local.intervals.len(), "{kind:?}: one entry per interval");
        assert!(r.local.intervals.len() >= 4, "{kind:?}: {:?}", r.local.intervals);
        for (iv, st) in r.local.intervals.iter().zip(&r.streams) {
            assert_eq!(st.iter().map(|c| c.id).collect::<Vec<_>>(), (0..conns).collect::<Vec<_>>(), "{kind:?}");
            assert_eq!(st.iter().map(|c| c.tx).sum::<u64>(), iv.tx, "{kind:?}: {iv:?} {st:?}");
            assert_eq!(st.iter().map(|c| c.rx).sum::<u64>(), iv.rx, "{kind:?}: {iv:?} {st:?}");
            assert_eq!(st.iter().map(|c| c.transactions).sum::<u64>(), iv.transactions, "{kind:?}: {iv:?} {st:?}");
            if let Some(retrans) = iv.retrans {
                assert_eq!(st.iter().filter_map(|c| c.retrans).sum::<u64>(), retrans, "{kind:?}: {iv:?} {st:?}");
            }
        }
        // every connection moved data, and answered requests in a request/response test
        for id in 0..conns as usize {
            let tx: u64 = r.streams.iter().map(|st| st[id].tx).sum();
            assert!(tx > 0, "{kind:?}: connection {id} sent nothing");
            if kind == TestKind::TcpRr {
                assert!(r.streams.iter().map(|st| st[id].transactions).sum::<u64>() > 0, "connection {id}");
            }
        }
        // the live lines saw what was kept (the last interval may yet take in a sliver after them)
        assert!(!live.is_empty());
        for ((c, st), (iv, kept)) in live.iter().zip(r.local.intervals.iter().zip(&r.streams)).take(live.len() - 1) {
            assert_eq!((c, st), (iv, kept), "{kind:?}");
        }
    }
    // one connection: the one line as before, nothing kept
    let mut seen = 0;
    let r = client(&h, &secret)
        .unwrap()
        .run(&spec(TestKind::TcpStream, 1, 200), &mut |iv| seen += iv.streams.len())
        .unwrap();
    assert!(r.streams.is_empty() && seen == 0, "{:?}", r.streams);
}

#[test]
fn congestion_control_is_set_on_both_sides_or_refused_naming_the_sysctl() {
    let (h, secret) = agent(|_| {});
    let in_use = |h: &linerate_model::host::HostInfo| h.congestion_control_in_use.clone();
    // Without -C each side reports its host's default.
    let r = run(&h, &secret, &spec(TestKind::TcpStream, 1, 200));
    assert_eq!(in_use(&r.local.host), Some(r.local.host.machine.congestion_control.clone()));
    // reno is always built in (and allowed to every user).
    let mut s = spec(TestKind::TcpStream, 2, 200);
    s.congestion = Some("reno".into());
    s.direction = Direction::Receive;
    let r = run(&h, &secret, &s);
    assert_eq!(in_use(&r.local.host).as_deref(), Some("reno"), "{:?}", r.local.host);
    assert_eq!(in_use(&r.remote.host).as_deref(), Some("reno"), "{:?}", r.remote.host);
    s.congestion = Some("nosuchalgo".into());
    let err = client(&h, &secret).unwrap().run(&s, &mut |_| {}).unwrap_err();
    assert!(matches!(err, EngineError::Usage(UsageError::ThisHost(_))), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("\"nosuchalgo\"") && msg.contains("sysctl net.ipv4.tcp_available_congestion_control"),
        "{msg}"
    );
}

#[test]
fn set_mss_clamps_the_segments_of_both_directions() {
    let (h, secret) = agent(|_| {});
    let tuning = ClientTuning { mss: Some(1000), ..Default::default() };
    for dir in [Direction::Send, Direction::Receive] {
        let mut s = spec(TestKind::TcpStream, 2, 200);
        s.direction = dir;
        let r = client_tuned(&h, &secret, tuning).unwrap().run(&s, &mut |_| {}).unwrap();
        // Loopback's own MSS is near 65,483: only TCP_MAXSEG brings it down to 1000.
        for c in r.local.conns.iter().chain(&r.remote.conns) {
            let mss = c.tcp.map_or(0, |t| t.mss);
            assert!((1..=1000).contains(&mss), "{dir:?}: connection {} has MSS {mss}", c.id);
        }
    }
    let err = client_tuned(&h, &secret, ClientTuning { mss: Some(40), ..Default::default() })
        .unwrap()
        .run(&spec(TestKind::TcpStream, 1, 100), &mut |_| {})
        .unwrap_err();
    assert!(err.to_string().contains("MSS 40: must be 88 to 32767"), "{err}");
}

#[test]
fn cport_fixes_the_client_ports_and_refuses_what_cannot_fit() {
    let (h, secret) = agent(|_| {});
    // Two ports free for TCP and UDP, next to each other.
    let p = loop {
        let p = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let free = |p: u16| {
            std::net::TcpListener::bind(("0.0.0.0", p)).is_ok() && std::net::UdpSocket::bind(("0.0.0.0", p)).is_ok()
        };
        if p < 65_535 && free(p) && free(p + 1) {
            break p;
        }
    };
    let tuning = ClientTuning { cport: Some(p), ..Default::default() };
    // Twice: the ports are free again for the next test (the first test's may be in TIME_WAIT).
    for kind in [TestKind::TcpStream, TestKind::TcpStream, TestKind::UdpStream] {
        let mut s = spec(kind, 2, 200);
        if kind == TestKind::UdpStream {
            s.msg_size = 1000;
            s.rate = Some(10_000_000);
        }
        let r = client_tuned(&h, &secret, tuning).unwrap().run(&s, &mut |_| {}).unwrap();
        assert!(r.summary(None).throughput_bps > 0.0, "{kind:?}");
    }
    let refused = |tuning: ClientTuning, s: &TestSpec| {
        client_tuned(&h, &secret, tuning).unwrap().run(s, &mut |_| {}).unwrap_err().to_string()
    };
    let high = ClientTuning { cport: Some(65_535), ..Default::default() };
    let e = refused(high, &spec(TestKind::TcpStream, 2, 100));
    assert!(e.contains("--cport 65535 with 2 connections needs local ports 65535 to 65536"), "{e}");
    let e = refused(tuning, &spec(TestKind::TcpCrr, 1, 100));
    assert!(e.contains("--cport applies to tcp-stream, tcp-rr and udp-stream"), "{e}");
}

#[test]
fn affinity_pins_both_sides_workers_and_refuses_a_core_the_server_lacks() {
    let (h, secret) = agent(|_| {});
    let tuning = ClientTuning { cpu: Some(0), ..Default::default() };
    for kind in [TestKind::TcpStream, TestKind::UdpStream] {
        let mut s = spec(kind, 2, 200);
        s.server_cpu = Some(0);
        if kind == TestKind::UdpStream {
            s.msg_size = 1000;
            s.rate = Some(10_000_000);
        }
        let r = client_tuned(&h, &secret, tuning).unwrap().run(&s, &mut |_| {}).unwrap();
        assert_eq!(r.local.host.workers_pinned_to_core, Some(0), "{kind:?}: {:?}", r.local.host);
        assert_eq!(r.remote.host.workers_pinned_to_core, Some(0), "{kind:?}: {:?}", r.remote.host);
    }
    let mut s = spec(TestKind::TcpStream, 1, 100);
    s.server_cpu = Some(1000);
    let err = client(&h, &secret).unwrap().run(&s, &mut |_| {}).unwrap_err();
    assert!(matches!(err, EngineError::Remote { code: ErrorCode::BadParams, .. }), "{err:?}");
    assert!(err.to_string().contains("core 1000 does not exist"), "{err}");
    let err = client_tuned(&h, &secret, ClientTuning { cpu: Some(1000), ..Default::default() })
        .unwrap()
        .run(&spec(TestKind::TcpStream, 1, 100), &mut |_| {})
        .unwrap_err();
    assert!(
        matches!(err, EngineError::Usage(UsageError::ThisHost(_)))
            && err.to_string().contains("on this host: core 1000"),
        "{err}"
    );
}

#[test]
fn a_byte_count_ends_the_test_once_the_receiver_has_every_byte() {
    let (h, secret) = agent(|_| {});
    const N: u64 = 10 << 20;
    for dir in [Direction::Send, Direction::Receive] {
        let mut s = spec(TestKind::TcpStream, 3, 20_000);
        s.direction = dir;
        s.bytes = Some(N);
        // -t (20 s here) is only a cap: the byte count ends the test well before it.
        let r = crate::peer::within(Duration::from_secs(10), "a test of a byte count", || {
            client(&h, &secret).unwrap().run(&s, &mut |_| {}).unwrap()
        });
        let (sender, receiver) = if dir == Direction::Send { (&r.local, &r.remote) } else { (&r.remote, &r.local) };
        let sent: u64 = sender.conns.iter().map(|c| c.tx).sum();
        let got: u64 = receiver.conns.iter().map(|c| c.rx).sum();
        assert_eq!(
            (sent, got),
            (N, N),
            "{dir:?}: exactly the byte count, all of it counted by the receiver: {:?} {:?} {:?} {:?}",
            r.local.conns,
            r.remote.conns,
            r.local.errors,
            r.remote.errors
        );
        assert!(receiver.conns.iter().all(|c| c.tcp.is_some()), "{dir:?}: TCP_INFO kept at the close");
    }
    let mut s = spec(TestKind::UdpStream, 2, 20_000);
    (s.msg_size, s.rate, s.bytes) = (1000, Some(100_000_000), Some(1_000_500));
    let r = crate::peer::within(Duration::from_secs(10), "a udp test of a byte count", || {
        client(&h, &secret).unwrap().run(&s, &mut |_| {}).unwrap()
    });
    let sent: u64 = r.local.conns.iter().map(|c| c.tx).sum();
    assert_eq!(sent, 1_001_000, "whole datagrams up to the count: 1001 of 1000 bytes");
}

#[test]
fn tcp_rr_closed_and_open_loop_measure_latency() {
    let (h, secret) = agent(|_| {});
    let mut s = spec(TestKind::TcpRr, 2, 300);
    s.msg_size = 100;
    s.resp_size = 2000;
    let r = run(&h, &secret, &s);
    let l = r.latency.clone().unwrap();
    assert!(l.count > 100, "{l:?}");
    assert!(l.min <= l.p50 && l.p50 <= l.p99 && l.p99 <= l.max);
    // Every transaction moved exactly 100 bytes up and 2000 down.
    let up: u64 = r.remote.conns.iter().map(|c| c.rx).sum();
    assert_eq!(up % 100, 0);
    assert!(r.remote.transactions > 0);
    // Open loop at 400/s for 0.5 s: close to 200 transactions, not as many as the loop can do.
    let mut s = spec(TestKind::TcpRr, 4, 500);
    s.rate = Some(400);
    let r = run(&h, &secret, &s);
    let n = r.latency.unwrap().count;
    assert!((100..=240).contains(&n), "open loop ran {n} transactions");
    // One connection, pipelined: every request leaves on schedule whatever is still unanswered,
    // so the client sent what the schedule asked for (a late worker catches up in a burst).
    let mut s = spec(TestKind::TcpRr, 1, 1000);
    (s.msg_size, s.resp_size, s.rate) = (64, 64, Some(2000));
    let r = run(&h, &secret, &s);
    let sent: u64 = r.local.conns.iter().map(|c| c.tx).sum();
    assert!((1800 * 64..=2200 * 64).contains(&sent), "sent {} requests for 2000 scheduled", sent / 64);
    assert_eq!(sent % 64, 0, "whole requests only");
    let l = r.latency.unwrap();
    assert!(l.behind_schedule.is_some(), "an open-loop test says how far behind it was: {l:?}");
    // Never sent before it was due, so no latency is shorter than a loopback round trip (a
    // request sent early once showed, clamped, a minimum of 0.0 µs); load only lengthens it.
    assert!(l.min >= 2.0, "open-loop minimum {} µs is below any round trip", l.min);
}

#[test]
fn tcp_crr_opens_a_connection_per_transaction() {
    let (h, secret) = agent(|_| {});
    let r = run(&h, &secret, &spec(TestKind::TcpCrr, 2, 300));
    let l = r.latency.unwrap();
    assert!(l.count > 20, "{l:?}");
    // The server answered one transaction per connection and counted them.
    assert!(r.remote.transactions >= l.count.saturating_sub(2), "{} vs {}", r.remote.transactions, l.count);
    assert!(r.local.errors.is_empty(), "{:?}", r.local.errors);
}

#[test]
fn unpaced_small_datagrams_are_counted_one_by_one_through_the_batches() {
    // Unpaced 64-byte datagrams leave in sendmmsg batches of GSO trains and arrive as GRO trains
    // (issue 33): each must still be counted once, at its own size, both ways.
    let (h, secret) = agent(|_| {});
    for dir in [Direction::Send, Direction::Receive] {
        let mut s = spec(TestKind::UdpStream, 2, 400);
        s.direction = dir;
        s.msg_size = 64;
        s.rate = None;
        let r = run(&h, &secret, &s);
        let (snd, rcv) = if dir == Direction::Send { (&r.local, &r.remote) } else { (&r.remote, &r.local) };
        let (sent, u) = (snd.udp.unwrap().sent, rcv.udp.unwrap());
        assert!(u.received > 1_000, "{dir:?}: received {} of {sent}", u.received);
        assert!(u.received <= sent, "{dir:?}: received {} of {sent}", u.received);
        assert_eq!(u.bytes, u.received * 64, "{dir:?}: a train cut at the wrong size");
        assert_eq!(u.duplicates, 0, "{dir:?}");
        let tx: u64 = snd.conns.iter().map(|c| c.tx).sum();
        assert_eq!(tx % 64, 0, "{dir:?}: whole datagrams sent");
        assert!(r.local.errors.is_empty() && r.remote.errors.is_empty(), "{:?} {:?}", r.local.errors, r.remote.errors);
    }
}

#[test]
fn udp_stream_counts_loss_at_the_receiver_both_ways() {
    let (h, secret) = agent(|_| {});
    for dir in [Direction::Send, Direction::Receive] {
        let mut s = spec(TestKind::UdpStream, 2, 400);
        s.direction = dir;
        s.msg_size = 64;
        s.rate = Some(20_000_000); // 20 Mbit/s of 64-byte datagrams: ~39k packets/s
        let r = run(&h, &secret, &s);
        let sum = r.summary(None);
        let (snd, rcv) = if dir == Direction::Send { (&r.local, &r.remote) } else { (&r.remote, &r.local) };
        let (sent, got) = (snd.udp.unwrap().sent, rcv.udp.unwrap().received);
        assert!(sent > 5_000, "{dir:?}: sent {sent}");
        assert!(got > 0 && got <= sent, "{dir:?}: got {got} of {sent}");
        let loss = sum.loss_pct.unwrap();
        assert!((0.0..=100.0).contains(&loss));
        assert!((loss - 100.0 * (sent - got) as f64 / sent as f64).abs() < 1e-9);
        assert!(sum.packets_per_s.unwrap() > 1000.0);
        // Paced: the offered rate is near the target, not the loop's maximum.
        let offered = sum.sender_bps.unwrap();
        assert!(offered < 30e6 && offered > 10e6, "{dir:?}: offered {offered}");
    }
}

#[test]
fn profile_runs_gets_with_reconnects_and_random_sizes() {
    let (h, secret) = agent(|_| {});
    let size = |a, b| Size { min: a, max: b };
    let p = Profile {
        name: "mix".into(),
        description: String::new(),
        groups: vec![
            Group {
                name: "get".into(),
                connections: 3,
                transactions: vec![Transaction {
                    iterations: Some(5),
                    duration_ms: None,
                    rate: None,
                    flowops: vec![
                        FlowOp::Connect,
                        FlowOp::Write { size: size(100, 100) },
                        FlowOp::Read { size: size(50_000, 50_000) },
                        FlowOp::Disconnect,
                    ],
                }],
            },
            Group {
                name: "rr".into(),
                connections: 2,
                transactions: vec![Transaction {
                    iterations: None,
                    duration_ms: Some(200),
                    rate: None,
                    flowops: vec![FlowOp::Write { size: size(1, 1000) }, FlowOp::Read { size: size(1, 5000) }],
                }],
            },
        ],
    };
    let mut s = spec(TestKind::Profile, 0, 400);
    s.profile = Some(p);
    let r = run(&h, &secret, &s);
    // The GET group did exactly 5 × 50,000 bytes per connection.
    for slot in 0..3 {
        assert_eq!(r.local.conns[slot].rx, 250_000, "slot {slot}");
        assert_eq!(r.local.conns[slot].tx, 500);
    }
    assert!(r.local.conns[3].rx > 0 && r.local.conns[4].rx > 0);
    assert!(r.latency.unwrap().count >= 15);
    assert!(r.local.errors.is_empty(), "{:?}", r.local.errors);
}

/// flent's rrul in miniature: bulk uploads and downloads beside an open-loop latency probe. The
/// probe's latency and rate are its own (bulk writes and streamed reads are not transactions),
/// and each group's bytes are its connections' alone.
#[test]
fn a_profiles_groups_are_reported_apart_and_bulk_is_not_a_transaction() {
    let (h, secret) = agent(|_| {});
    let size = |n| Size { min: n, max: n };
    let txn = |rate, flowops| Transaction { iterations: None, duration_ms: None, rate, flowops };
    let group = |name: &str, connections, t| Group { name: name.into(), connections, transactions: vec![t] };
    let p = Profile {
        name: "rrul".into(),
        description: String::new(),
        groups: vec![
            group("upload", 2, txn(None, vec![FlowOp::Write { size: size(65_536) }])),
            group("download", 2, txn(None, vec![FlowOp::Read { size: size(65_536) }])),
            group(
                "latency",
                1,
                txn(Some(100.0), vec![FlowOp::Write { size: size(64) }, FlowOp::Read { size: size(64) }]),
            ),
        ],
    };
    let mut s = spec(TestKind::Profile, 0, 1_000);
    s.profile = Some(p);
    let r = run(&h, &secret, &s);
    assert!(r.local.errors.is_empty(), "{:?}", r.local.errors);
    let sum = r.summary(None);
    let names: Vec<&str> = sum.groups.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names, ["upload", "download", "latency"]);
    let (up, down, probe) = (&sum.groups[0], &sum.groups[1], &sum.groups[2]);
    assert_eq!((up.connections, down.connections, probe.connections), (2, 2, 1));
    assert!(up.send_bps > 1e6 && up.receive_bps == 0.0, "{up:?}");
    assert!(down.receive_bps > 1e6 && down.send_bps == 0.0, "{down:?}");
    assert!(up.transactions_per_s.is_none() && up.latency_us.is_none(), "bulk writes are no transactions: {up:?}");
    assert!(down.latency_us.is_none(), "a streamed read is no transaction: {down:?}");
    // 100/s for 1 s: at most 101 due, and on an idle loopback nearly all of them answered.
    let l = probe.latency_us.as_ref().unwrap();
    assert!((50..=101).contains(&l.count), "{l:?}");
    // The probe's bytes: 64 each way per transaction (plus its 8-byte message header).
    assert!(probe.receive_bps > 0.0 && probe.receive_bps < 1e6, "{probe:?}");
    // The test's own transactions are the probe's, not the bulk's tens of thousands of writes.
    assert_eq!(sum.latency_us.as_ref().map(|l| l.count), Some(l.count));
    assert_eq!(sum.transactions_per_s, probe.transactions_per_s);
}

#[test]
fn bad_parameters_are_refused_with_the_reason() {
    let (h, secret) = agent(|c| {
        c.bench.limits.max_connections = 50;
        c.bench.limits.max_duration_ms = 5_000;
    });
    let cases: Vec<(TestSpec, &str)> = vec![
        (spec(TestKind::TcpStream, 0, 100), "connections 0"),
        (spec(TestKind::TcpStream, 51, 100), "connections 51"),
        (spec(TestKind::TcpStream, 1, 6_000), "duration"),
        (
            {
                let mut s = spec(TestKind::TcpStream, 1, 100);
                s.msg_size = 64 << 20;
                s
            },
            "message size",
        ),
    ];
    for (s, want) in cases {
        let mut c = client(&h, &secret).unwrap();
        match c.run(&s, &mut |_| {}) {
            Err(EngineError::Remote { code: ErrorCode::BadParams, message }) => {
                assert!(message.contains(want), "{want:?} not in {message:?}")
            }
            other => panic!("{want}: expected a refusal, got {:?}", other.map(|_| ())),
        }
    }
    // The agent still serves a good test afterwards.
    run(&h, &secret, &spec(TestKind::TcpStream, 1, 100));
}

#[test]
fn wrong_key_cannot_run_a_test() {
    let (h, _) = agent(|_| {});
    let other = Secret::generate().unwrap();
    assert!(client(&h, &other).is_err());
}

/// Ask for a test speaking the control protocol by hand: the open control connection (the test
/// lasts as long as it) and the server's admission.
fn admitted_by_hand(h: &ServerHandle, secret: &Secret, s: &TestSpec) -> (conn::Secured, Ready) {
    let mut sec = crate::peer::Client::connect(h.addr, secret).ctl;
    sec.tx.send_frames(&[Frame::BenchRequest(&encode_doc(s))]).unwrap();
    let plain = sec.rx.recv().unwrap().unwrap().to_vec();
    let Frame::BenchReady(doc) = frame::decode(&plain).unwrap().0 else { panic!("expected BenchReady") };
    (sec, decode_doc(doc, "ready").unwrap())
}

#[test]
fn a_data_port_range_serves_one_test_per_port_and_refuses_the_next_as_busy() {
    let port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (h, secret) = agent(|c| c.bench.data_ports = Some((port, port)));
    // A test admitted by hand holds the range's one port, TCP and UDP.
    let mut held = spec(TestKind::UdpStream, 1, 1000);
    held.msg_size = 1000;
    let (sec, ready) = admitted_by_hand(&h, &secret, &held);
    assert_eq!((ready.tcp_port, ready.udp_port), (port, Some(port)));
    // A second test at the same time finds no port: refused as busy, naming the option.
    let err = client(&h, &secret).unwrap().run(&spec(TestKind::TcpStream, 1, 200), &mut |_| {}).unwrap_err();
    assert!(matches!(err, EngineError::Remote { code: ErrorCode::Busy, .. }), "{err:?}");
    assert!(err.to_string().contains(&format!("--data-ports {port}-{port}")), "{err}");
    // Once the first test is gone, its port serves the next one.
    drop(sec);
    let mut r = None;
    let freed = crate::peer::eventually(Duration::from_secs(10), || {
        match client(&h, &secret).unwrap().run(&spec(TestKind::TcpStream, 2, 200), &mut |_| {}) {
            Ok(x) => r = Some(x),
            Err(e) => assert!(e.to_string().contains("--data-ports"), "{e}"),
        }
        r.is_some()
    });
    assert!(freed, "the port was not freed");
    assert!(r.unwrap().summary(None).throughput_bps > 0.0);
}

#[test]
fn data_connection_with_a_wrong_cookie_or_index_is_refused() {
    let (h, secret) = agent(|_| {});
    // Speak the control protocol by hand to learn the test's data port and cookie.
    let (_sec, ready) = admitted_by_hand(&h, &secret, &spec(TestKind::TcpStream, 2, 1000));
    let data = std::net::SocketAddr::new(h.addr.ip(), ready.tcp_port);
    let knock = |hello: DataHello| {
        let mut sock = TcpStream::connect(data).unwrap();
        sock.write_all(&hello.encode()).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut b = [0u8; 4];
        let mut n = 0;
        while n < 4 {
            match sock.read(&mut b[n..]) {
                Ok(0) | Err(_) => break,
                Ok(k) => n += k,
            }
        }
        b[..n] == *b"LNRb"
    };
    let good = DataHello { test: ready.test, conn: 0, cookie: ready.cookie };
    let mut bad_cookie = good;
    bad_cookie.cookie[0] ^= 1;
    let mut bad_test = good;
    bad_test.test[15] ^= 1;
    let bad_index = DataHello { conn: 2, ..good };
    assert!(!knock(bad_cookie), "wrong cookie acknowledged");
    assert!(!knock(bad_test), "wrong test id acknowledged");
    assert!(!knock(bad_index), "index beyond the test's connections acknowledged");
    assert!(knock(good), "the right preamble is acknowledged");
}

/// This process's TCP descriptors whose local address is `at` (an IPv4 data port), the
/// listener left out: the agent's accepted data connections. (A client socket bound to another
/// loopback address may have the same port number: the address tells them apart.)
fn descriptors_at(at: std::net::SocketAddr) -> usize {
    let std::net::IpAddr::V4(ip) = at.ip() else { panic!("{at}: an IPv4 address") };
    let local = format!("{:08X}:{:04X}", u32::from_le_bytes(ip.octets()), at.port());
    let mine: std::collections::HashSet<String> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| l.to_str()?.strip_prefix("socket:[")?.strip_suffix(']').map(str::to_string))
        .collect();
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let held = |line: &&str| {
        let f: Vec<&str> = line.split_whitespace().collect();
        f.get(1) == Some(&local.as_str()) && f.get(3) != Some(&"0A") && f.get(9).is_some_and(|i| mine.contains(*i))
    };
    table.lines().skip(1).filter(held).count()
}

/// Connect to `to` from `from` (a loopback address of its own), sending `first` if any.
fn connect_from(from: [u8; 4], to: std::net::SocketAddr, first: &[u8]) -> TcpStream {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&std::net::SocketAddr::from((from, 0)).into()).unwrap();
    s.connect(&to.into()).unwrap();
    let mut s = TcpStream::from(s);
    if !first.is_empty() {
        s.write_all(first).unwrap();
    }
    s
}

/// Issue 28, attack 1: a key holder declares 2 data connections and opens 1,000 with the test's
/// cookie. The agent acknowledges one live connection per index and holds others pending only
/// within the test's budget (declared + 16), closing the rest at once: 2 + 18 descriptors.
#[test]
fn a_test_holds_no_more_data_connections_than_it_declared() {
    crate::hostile::raise_nofile(8192);
    let (h, secret) = agent(|c| c.bench.handshake_timeout = Duration::from_secs(3));
    let (_sec, ready) = admitted_by_hand(&h, &secret, &spec(TestKind::TcpStream, 2, 30_000));
    let data = std::net::SocketAddr::new(h.addr.ip(), ready.tcp_port);
    let hello = |conn| DataHello { test: ready.test, conn, cookie: ready.cookie }.encode();
    let mut socks: Vec<TcpStream> = (0..1000).map(|i| connect_from([127, 0, 0, 1], data, &hello(i % 2))).collect();
    // Connections are accepted in order: once this last one is answered (refused: a wrong
    // cookie, or closed over the budget), the agent has accepted every one before it.
    let wrong = DataHello { test: ready.test, conn: 0, cookie: [0; 32] };
    let mut marker = connect_from([127, 0, 0, 1], data, &wrong.encode());
    marker.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let _ = marker.read(&mut [0u8; 4]);
    let held = descriptors_at(data);
    println!("data connections the agent holds after 1,000 for a 2-connection test: {held}");
    assert!(held <= 2 + (2 + 16), "the agent holds {held} data connections for a 2-connection test");
    // Exactly two were acknowledged; the rest end unacknowledged (at once, or at the deadline).
    let mut acked = 0;
    for s in &mut socks {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut b = [0u8; 4];
        if s.read_exact(&mut b).is_ok() {
            acked += 1;
        }
    }
    assert_eq!(acked, 2, "one acknowledged connection per declared index");
}

/// Issue 28, attack 2: 1,100 connections without a key from another address fill no part of
/// the budget the test's own client has: its data connection is still acknowledged.
#[test]
fn an_unkeyed_flood_from_another_address_leaves_the_test_its_data_connection() {
    crate::hostile::raise_nofile(8192);
    let (h, secret) = agent(|c| c.bench.handshake_timeout = Duration::from_secs(30));
    let (_sec, ready) = admitted_by_hand(&h, &secret, &spec(TestKind::TcpStream, 1, 30_000));
    let data = std::net::SocketAddr::new(h.addr.ip(), ready.tcp_port);
    let flood: Vec<TcpStream> = (0..1100).map(|_| connect_from([127, 0, 0, 2], data, b"")).collect();
    let mut mine =
        connect_from([127, 0, 0, 1], data, &DataHello { test: ready.test, conn: 0, cookie: ready.cookie }.encode());
    mine.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut ack = [0u8; 4];
    mine.read_exact(&mut ack).expect("the test's own data connection is answered during the flood");
    assert_eq!(&ack, b"LNRb");
    let held = descriptors_at(data);
    assert!(held <= 1 + 16, "the flood holds {held} of the agent's descriptors (16 from one address at most)");
    drop(flood);
}

#[test]
fn silent_and_slow_clients_do_not_block_a_real_test() {
    let (h, secret) = agent(|c| {
        c.max_handshakes = 64;
        c.max_handshakes_per_source = 8;
    });
    // 40 connections that say nothing, and one that dribbles a byte at a time.
    let idle: Vec<TcpStream> = (0..40).map(|_| TcpStream::connect(h.addr).unwrap()).collect();
    let mut slow = TcpStream::connect(h.addr).unwrap();
    let _ = slow.write_all(b"L");
    // The per-source cap sheds most of the idle ones; the test still gets a slot, at the latest
    // once the deadline (2 s) frees the rest.
    let mut r = None;
    let served = crate::peer::eventually(Duration::from_secs(8), || {
        r = client(&h, &secret).and_then(|mut c| c.run(&spec(TestKind::TcpStream, 1, 200), &mut |_| {})).ok();
        r.is_some()
    });
    assert!(served, "no slot for a real test");
    assert!(r.unwrap().summary(None).throughput_bps > 0.0);
    // The slow client was dropped at the deadline: its socket reads EOF or an error.
    slow.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut b = [0u8; 8];
    assert!(matches!(slow.read(&mut b), Ok(0) | Err(_)), "slow-loris client still held");
    drop(idle);
}

#[test]
fn many_connections_are_all_served() {
    let (h, secret) = agent(|_| {});
    let r = run(&h, &secret, &spec(TestKind::TcpStream, 500, 1000));
    let f = r.summary(None).fairness.unwrap();
    assert_eq!(f.starved, 0, "{f:?}");
    assert_eq!(r.remote.conns.len(), 500);
}

#[test]
fn concurrent_clients_share_the_agent() {
    let (h, secret) = agent(|_| {});
    let threads: Vec<_> = (0..3)
        .map(|_| {
            let (addr, secret) = (h.addr, secret.clone());
            std::thread::spawn(move || {
                let cfg = BenchClientConfig {
                    addr,
                    secret,
                    key_auth: None,
                    suite: conn::preferred_suite(),
                    timeout: Duration::from_secs(10),
                    tuning: Default::default(),
                };
                let mut c = BenchClient::connect(cfg).unwrap();
                c.run(&spec(TestKind::TcpStream, 2, 400), &mut |_| {}).unwrap().summary(None).throughput_bps
            })
        })
        .collect();
    for t in threads {
        assert!(t.join().unwrap() > 1e6);
    }
}

#[test]
fn the_server_says_how_many_tests_shared_the_machine_it_reports() {
    let (h, secret) = agent(|_| {});
    let alone = run(&h, &secret, &spec(TestKind::TcpStream, 1, 300));
    assert_eq!(alone.remote.host.concurrent_tests, Some(1), "{:?}", alone.remote.host);
    // Two clients whose tests overlap (each 3 s, started together): at least one of them sees the
    // other running beside it, at its start or its end.
    let both: Vec<TestResult> = std::thread::scope(|s| {
        let t: Vec<_> = (0..2).map(|_| s.spawn(|| run(&h, &secret, &spec(TestKind::TcpStream, 1, 3000)))).collect();
        t.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let seen: Vec<u64> = both.iter().map(|r| r.remote.host.concurrent_tests.unwrap()).collect();
    assert!(seen.contains(&2) && seen.iter().all(|&n| (1..=2).contains(&n)), "{seen:?}");
}
