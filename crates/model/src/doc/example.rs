//! Complete example documents with every optional field filled, for tests and documentation: a
//! producer-side test can feed them to a reader, and the golden files in `crates/model/tests/`
//! pin the JSON they make, field name by field name.

use super::bench::*;
use super::cp::*;
use super::lab::*;
use super::ToolInfo;
use crate::host::{HostInfo, HostMetadata};

/// A `cp --json` summary of a 2 GiB push over 4 streams.
pub fn cp() -> CpSummary {
    CpSummary {
        bytes: 2_147_483_648,
        files: 1024,
        dirs: 33,
        links: 2,
        seconds: 2.05,
        gbit_per_s: Some(8.38),
        streams: 4,
        cipher: "aes-256-gcm".into(),
        complete: true,
        errors: CpErrors { local: 1, remote: 2 },
        received: CpCounts { files: 1024, bytes: 2_147_483_648, dirs: 33, links: 2 },
        cpu: CpCpu {
            client: CpuSeconds { user_s: 0.61, system_s: 1.42 },
            server: CpuSeconds { user_s: 0.74, system_s: 1.88 },
        },
        peak_rss_bytes: CpPeakRss { client: 41_234_432, server: 38_801_408 },
        direction: CpDirection::Push,
        skipped: CpSkipped { files: 3, bytes: 4096 },
        resumed_bytes: 1_000_000,
        deleted: 5,
        dry_run: None,
        phases: None,
        timeline: None,
        page_cache_bytes: Some(356_515_840),
    }
}

fn cpu_share(busy: f64) -> CpuShare {
    CpuShare {
        user: busy / 4.0,
        system: busy / 2.0,
        softirq: busy / 8.0,
        irq: busy / 8.0,
        idle: 1.0 - busy,
        steal: 0.0,
        cores: 16,
        process_user_s: 0.5,
        process_system_s: 2.5,
    }
}

fn tcp(rtt_us: u32) -> TcpStats {
    TcpStats {
        cwnd: 54,
        rtt_us,
        rttvar_us: rtt_us / 2,
        retrans: 3,
        mss: 8948,
        delivery_rate: 1_200_000_000,
        pacing_rate: 1_400_000_000,
    }
}

/// A tcp-rr test on `connections` connections, with every figure present.
pub fn bench_test(connections: u32, msg_size: u32) -> BenchTest {
    BenchTest {
        version: 1,
        kind: "tcp-rr".into(),
        direction: "send".into(),
        connections,
        duration_ms: 10_000,
        omit_ms: 1000,
        interval_ms: 1000,
        msg_size,
        resp_size: 512,
        sndbuf: Some(262_144),
        rcvbuf: Some(262_144),
        rate: Some(50_000),
        zerocopy: false,
        nodelay: true,
        profile: None,
        server: "198.18.0.2:7878".into(),
        test: "tcp-rr".into(),
        options: Default::default(),
    }
}

/// Figures of a test moving `bps` over `connections` connections.
pub fn bench_summary(bps: f64, connections: u64) -> BenchSummary {
    let per = bps / connections as f64;
    BenchSummary {
        throughput_bps: bps,
        send_bps: bps * 0.5,
        receive_bps: bps * 0.5,
        connections,
        seconds: 10.0,
        jain: Some(0.98),
        fairness: Some(Fairness {
            min_bps: per - 1e6,
            max_bps: per + 1e6,
            mean_bps: per,
            stddev_bps: 1e6,
            cov: 0.05,
            jain: Some(0.98),
            starved: 0,
        }),
        transactions_per_s: Some(48_000.0),
        latency_us: Some(Latency {
            min: 21.0,
            mean: 40.5,
            p50: 38.0,
            p90: 61.5,
            p99: 142.0,
            p999: 611.0,
            max: 2480.0,
            count: 480_000,
            curve: [(0.0, 21.0), (50.0, 38.0), (90.0, 61.5), (99.0, 142.0), (99.9, 611.0), (100.0, 2480.0)]
                .iter()
                .map(|&(percentile, us)| CurvePoint { percentile, us })
                .collect(),
            behind_schedule: None,
        }),
        loss_pct: Some(0.01),
        out_of_order: Some(12),
        duplicates: Some(0),
        packets_per_s: Some(812_000.0),
        jitter_us: Some(4.5),
        sender_bps: Some(bps + 1e7),
        udp_batching: None,
        cpu: CpuPair { local: cpu_share(0.25), remote: cpu_share(0.5) },
        service_demand_us_per_kb: SidePair { local: 0.21, remote: 0.32 },
        service_demand_us_per_tran: Some(SidePair { local: 4.2, remote: 6.4 }),
        retransmits: 7,
        rtt_us: Some(95.0),
        buffers: BufferPair {
            local: Some(Buffers { sndbuf: 262_144, rcvbuf: 131_072 }),
            remote: Some(Buffers { sndbuf: 524_288, rcvbuf: 262_144 }),
        },
        efficiency: Some(Efficiency { link_bps: 10e9, mtu: 9000, ceiling_bps: 9.9e9, ratio: 0.5 }),
        errors: vec!["server: connection 3 reset".into()],
        groups: Vec::new(),
    }
}

fn intervals(bps: f64) -> Vec<BenchInterval> {
    (0..3)
        .map(|i| BenchInterval {
            start_s: f64::from(i),
            end_s: f64::from(i + 1),
            bps: bps + f64::from(i) * 1e7,
            transactions_per_s: 48_000.0,
            omitted: i == 0,
            detail: Default::default(),
        })
        .collect()
}

/// A sweep over 1, 2 and 4 connections at two message sizes: the first point at the top.
pub fn bench() -> BenchDocument {
    let mut points = Vec::new();
    for (msg, label) in [(1024, "1K"), (65536, "64K")] {
        for conns in [1u32, 2, 4] {
            let bps = 1e9 * f64::from(conns) * if msg == 1024 { 0.5 } else { 1.0 };
            points.push(BenchPoint {
                params: [("conns".to_string(), conns.to_string()), ("msg".to_string(), label.to_string())]
                    .into_iter()
                    .collect(),
                test: bench_test(conns, msg),
                summary: bench_summary(bps, u64::from(conns)),
                intervals: intervals(bps),
                repeats: Repeats {
                    runs: vec![bps - 1e7, bps + 1e7],
                    latency_us: Vec::new(),
                    steal: vec![SidePair { local: 0.02, remote: 0.0 }, SidePair { local: 0.01, remote: 0.0 }],
                    confidence: Some(Confidence {
                        n: 2,
                        mean: bps,
                        half_width: bps / 8.0,
                        level: 99,
                        width_pct: 12.0,
                        full_width_pct: Some(24.0),
                    }),
                    target_width_pct: 5.0,
                    met: false,
                },
            });
        }
    }
    let first = points[0].clone();
    BenchDocument {
        schema: BENCH_SCHEMA.into(),
        tool: ToolInfo::linerate("0.1.0"),
        started_unix_s: 1_795_326_436,
        started_unix_us: None,
        sweep: Some(vec![SweepParam::Connections, SweepParam::MsgSize]),
        test: Some(first.test.clone()),
        hosts: BenchHosts {
            local: Some(HostInfo {
                machine: HostMetadata {
                    hostname: "client-a".into(),
                    kernel: "6.1.0".into(),
                    ..HostMetadata::default()
                },
                congestion_control_in_use: Some("cubic".into()),
                ..HostInfo::default()
            }),
            remote: Some(HostInfo {
                machine: HostMetadata {
                    hostname: "server-b".into(),
                    kernel: "6.1.0".into(),
                    ..HostMetadata::default()
                },
                ..HostInfo::default()
            }),
        },
        summary: Some(first.summary.clone()),
        intervals: Some(first.intervals.clone()),
        connections: Some(
            (0..first.test.connections)
                .map(|id| BenchConnection {
                    id,
                    bytes: 625_000_000,
                    bps: 5e8,
                    tcp: Some(tcp(90)),
                    server_tcp: Some(tcp(100)),
                })
                .collect(),
        ),
        points,
    }
}

fn lab_run(name: &str, tool: Tool, host: &str, group: &str, rate: f64) -> LabRun {
    LabRun {
        name: name.into(),
        tool,
        mode: (tool == Tool::Cp).then_some(CpMode::Push),
        host: host.into(),
        server: "peer".into(),
        server_addr: "198.18.0.9".into(),
        via: Some("uplink".into()),
        group: group.into(),
        sweep: None,
        repeat: 0,
        streams: 2,
        reverse: false,
        args: vec!["-O".into(), "1".into()],
        ok: true,
        error: None,
        rate_bps: Some(rate),
        duration_s: Some(3.0),
        bytes: Some((rate * 3.0 / 8.0) as u64),
        cpu: Some(RunCpu {
            local: Some(CpuBusy { user: 0.02, system: 0.1, softirq: 0.04, irq: 0.01 }),
            remote: Some(CpuBusy { user: 0.01, system: 0.12, softirq: 0.05, irq: 0.0 }),
        }),
        machine_cpu_s: Some(1.25),
        fairness: Some(0.99),
        flows: Some(2),
        intervals: (0..3).map(|i| Interval { start_s: f64::from(i), end_s: f64::from(i + 1), bps: rate }).collect(),
        guarantee: Some(Guarantee {
            class: "g-guaranteed".into(),
            link: "uplink".into(),
            rate_bps: 400_000_000,
            ceil_bps: 1_000_000_000,
            intervals_met_pct: Some(100.0),
        }),
        raw: None,
        congestion: Some("cubic".into()),
        started_unix_us: None,
    }
}

/// A lab run: an iperf3 ceiling, a bench run with its document, a cp run with its summary, a
/// group of two guests, a sweep over one and two guests, and one failed run.
pub fn lab() -> LabDocument {
    let mut runs = vec![
        lab_run("iperf3-1", Tool::Iperf3, "g1", "iperf3-1", 9.4e8),
        LabRun {
            raw: Some(RawDoc::Bench(Box::new(bench()))),
            ..lab_run("bench-2", Tool::Bench, "g1", "bench-2", 9.2e8)
        },
        LabRun {
            raw: Some(RawDoc::Cp(Box::new(cp()))),
            mode: Some(CpMode::SshPull),
            ..lab_run("cp-3", Tool::Cp, "g1", "cp-3", 8.1e8)
        },
        lab_run("mix@g1", Tool::Bench, "g1", "mix", 5.5e8),
        lab_run("mix@g2", Tool::Bench, "g2", "mix", 4.0e8),
    ];
    for n in [1u32, 2] {
        for g in 1..=n {
            let step = SweepStep { base: "tx".into(), instances: n };
            let run =
                lab_run(&format!("tx@g{g}"), Tool::Bench, &format!("g{g}"), &format!("tx/{n}"), 9e8 / f64::from(n));
            runs.push(LabRun { sweep: Some(step), ..run });
        }
    }
    runs.push(LabRun {
        ok: false,
        error: Some("timed out after 60 s".into()),
        rate_bps: None,
        machine_cpu_s: None,
        ..lab_run("scp-4", Tool::Scp, "g2", "scp-4", 0.0)
    });
    let groups = runs
        .iter()
        .map(|r| GroupRecord {
            group: r.group.clone(),
            repeat: r.repeat,
            members: vec![r.name.clone()],
            rate_bps: r.rate_bps.unwrap_or(0.0),
            fairness: None,
            ok: r.ok,
            failed: if r.ok { Vec::new() } else { vec![r.name.clone()] },
            start_skew_ms: None,
            start_tolerance_ms: None,
        })
        .collect();
    LabDocument {
        schema: LAB_SCHEMA.into(),
        tool: ToolInfo::linerate("0.1.0"),
        scenario: LabScenario {
            name: "example".into(),
            description: "every kind of run".into(),
            file: "scenarios/example.toml".into(),
        },
        run_id: "lr4242".into(),
        started_unix: 1_795_326_436,
        finished_unix: 1_795_326_999,
        machine: Machine { kernel: "6.1.0".into(), cpus: 2 },
        lab: LabDescription {
            hosts: [(
                "g1".to_string(),
                LabHost {
                    ns: "lr4242-g1".into(),
                    interfaces: vec![LabInterface {
                        name: "eth0".into(),
                        addr: "198.18.0.1/24".into(),
                        link: "uplink".into(),
                    }],
                },
            )]
            .into_iter()
            .collect(),
            switches: vec![LabSwitch {
                name: "sw".into(),
                bridge: "br0".into(),
                ns: "lr4242-sw".into(),
                subnet: "198.18.0.0/24".into(),
            }],
            links: vec![LabLink {
                name: "uplink".into(),
                a: "g1".into(),
                b: "sw".into(),
                a_if: "eth0".into(),
                b_if: "p0".into(),
                addrs: vec![Some("198.18.0.1/24".into()), None],
                rate_bps: Some(1_000_000_000),
                shaper: Shaper::Htb,
                burst_bytes: None,
                latency_us: None,
                mtu: 1500,
                delay_us: Some(100),
                jitter_us: Some(10),
                loss_pct: Some(0.1),
                reorder_pct: Some(0.5),
                subnet: "198.18.0.0/24".into(),
            }],
            qos: vec![LabQos {
                link: "uplink".into(),
                side: Side::B,
                ingress: false,
                rate_bps: 1_000_000_000,
                classes: vec![LabClass {
                    name: "g-guaranteed".into(),
                    rate_bps: 400_000_000,
                    ceil_bps: 1_000_000_000,
                    src: None,
                    dst: Some("g1".into()),
                    sport: None,
                    dport: Some(5201),
                    default: false,
                    hosts: vec!["g1".into()],
                }],
            }],
        },
        workdir: Some("/dev/shm/linerate-lr4242-Xy12ab".into()),
        runs,
        groups,
        emulators: vec![LabEmulator {
            link: "wan".into(),
            a_to_b: EmuCounters {
                received: 1000,
                passed: 990,
                passed_bytes: 1_400_000,
                lost: 10,
                segmented: 8,
                ..Default::default()
            },
            b_to_a: EmuCounters {
                received: 500,
                passed: 500,
                passed_bytes: 33_000,
                queue_high_bytes: 64_000,
                ..Default::default()
            },
        }],
        time_scale: None,
    }
}
