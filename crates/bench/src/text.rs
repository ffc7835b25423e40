//! The text of a `linerate bench` run, rendered from this crate's results (the CLI only
//! prints it): the opening line of each test, its live interval lines, the table after it, the
//! warnings about a missed schedule or coarse fairness, a sweep's summary and the CSV rows.

use crate::stats::{busy, confidence, Fairness, Latency, Point, StreamCounts, Summary, TestResult};
use linerate_model::units::{format_rate, format_size_iec};
use linerate_proto::bench::{Direction, IntervalCounts, TestKind, TestSpec};
use std::net::SocketAddr;

/// The line that opens a test: what runs, to where, for how long, and the sweep point.
pub fn banner(s: &TestSpec, addr: &SocketAddr, labels: &[(String, String)]) -> String {
    let dir = match s.direction {
        Direction::Send => "client → server",
        Direction::Receive => "server → client",
        Direction::Bidir => "both ways",
    };
    let pt = if labels.is_empty() {
        String::new()
    } else {
        format!(" [{}]", labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" "))
    };
    let length = match s.bytes {
        Some(b) => {
            format!("until {} are sent (at most {} s)", format_size_iec(b as f64), s.duration_ms as f64 / 1000.0)
        }
        None if s.until_stopped => "until Ctrl-C (at most the agent's cap)".to_string(),
        None => format!("{} s", s.duration_ms as f64 / 1000.0),
    };
    let datagrams = match s.kind {
        TestKind::UdpStream if s.gsro => format!(", {}-byte datagrams in GSO/GRO trains (--gsro)", s.msg_size),
        TestKind::UdpStream => format!(", {}-byte datagrams", s.msg_size),
        _ => String::new(),
    };
    let each_way = if s.each_way { format!(" ({} each way)", s.connections) } else { String::new() };
    format!(
        "linerate bench {} to {addr}, {} connection{}{each_way}, {dir}, {length}{}{datagrams}{}{pt}",
        s.kind.name(),
        s.initial_connections(),
        if s.initial_connections() == 1 { "" } else { "s" },
        if s.omit_ms > 0 { format!(" after {} s warm-up", s.omit_ms as f64 / 1000.0) } else { String::new() },
        pacing(s),
    )
}

/// The pace of a stream test as iperf3 states `-b`: per stream, and in all with several.
fn pacing(s: &TestSpec) -> String {
    let Some(total) = s.rate.filter(|_| matches!(s.kind, TestKind::TcpStream | TestKind::UdpStream)) else {
        return String::new();
    };
    // each way: the rate is each direction's, shared by its senders
    let (n, all) =
        if s.each_way { (u64::from(s.connections), " each way") } else { (s.initial_connections(), " in all") };
    let n = n.max(1);
    if n == 1 {
        return format!(", paced at {}{}", format_rate(total as f64), if s.each_way { all } else { "" });
    }
    format!(", paced at {} per stream ({}{all})", format_rate(total as f64 / n as f64), format_rate(total as f64))
}

/// The line said once a test until Ctrl-C (iperf3 `-t 0`) is admitted: how long the agent lets
/// it run at most.
pub fn granted(s: &TestSpec) -> Option<String> {
    s.until_stopped.then(|| {
        format!("running until Ctrl-C, at most {} s (the agent's cap)", (s.duration_ms + s.omit_ms) as f64 / 1000.0)
    })
}

/// One live line per reporting interval: the rates each way and transactions/s.
pub fn interval_line(spec: &TestSpec, iv: &IntervalCounts) -> String {
    line_of(spec, iv, iv.tx > 0, iv.rx > 0, false)
}

/// The live lines of one interval. With several streams (a test that keeps each one's figures,
/// [`crate::per_stream`]) a line per connection, labelled by its index, and then the
/// totals labelled `[SUM]`, as iperf3 prints `-P`; otherwise the one line of
/// [`interval_line`], unlabelled. Every line has a column for each way the test carries data
/// (a way with nothing in the interval reads 0), so with `--bidir` a connection that carries
/// one way has its figures in that way's column, under the sum's.
pub fn interval_lines(spec: &TestSpec, iv: &IntervalCounts, streams: &[StreamCounts]) -> String {
    if streams.is_empty() || !crate::per_stream(spec) {
        return interval_line(spec, iv);
    }
    let align = spec.direction == Direction::Bidir;
    let (mut sends, mut receives) = (iv.tx > 0, iv.rx > 0);
    let mut o = String::new();
    for s in streams {
        let (tx, rx) = stream_ways(spec, s.id);
        (sends, receives) = (sends || tx, receives || rx);
        let counts = IntervalCounts {
            start_s: iv.start_s,
            end_s: iv.end_s,
            rx: s.rx,
            tx: s.tx,
            transactions: s.transactions,
            retrans: s.retrans,
            cwnd: s.cwnd,
        };
        o += &format!("[{:>3}] {}\n", s.id, line_of(spec, &counts, tx || s.tx > 0, rx || s.rx > 0, align));
    }
    o + "[SUM] " + &line_of(spec, iv, sends, receives, align)
}

/// Which ways connection `id` of a test carries data, from the client: (sends, receives).
fn stream_ways(spec: &TestSpec, id: u32) -> (bool, bool) {
    let stream = matches!(spec.kind, TestKind::TcpStream | TestKind::UdpStream);
    match spec.direction {
        Direction::Send if stream => (true, false),
        Direction::Receive if stream => (false, true),
        Direction::Bidir if spec.each_way => (id < spec.connections, id >= spec.connections),
        // both ways on one connection, and request/response
        _ => (true, true),
    }
}

/// The widths of a line's `sent` and `received` columns.
const SENT_COLUMN: usize = 30;
const RECEIVED_COLUMN: usize = 34;

/// An interval line: its time span, the bytes and rate sent (when `sent`) and received (when
/// `received`), transactions, the TCP figures, the warm-up mark. `align` leaves a column's
/// room where it has none, so the columns after it line up across lines.
fn line_of(spec: &TestSpec, iv: &IntervalCounts, sent: bool, received: bool, align: bool) -> String {
    let secs = (iv.end_s - iv.start_s).max(1e-9);
    let mut line = format!("[{:6.2}-{:6.2} s]", iv.start_s, iv.end_s);
    if sent {
        line += &format!("  sent {:>10} {:>12}", format_size_iec(iv.tx as f64), format_rate(iv.tx as f64 * 8.0 / secs));
    } else if align {
        line += &" ".repeat(SENT_COLUMN);
    }
    if received {
        let (b, r) = (format_size_iec(iv.rx as f64), format_rate(iv.rx as f64 * 8.0 / secs));
        line += &format!("  received {b:>10} {r:>12}");
    } else if align {
        line += &" ".repeat(RECEIVED_COLUMN);
    }
    if matches!(spec.kind, TestKind::TcpRr | TestKind::TcpCrr | TestKind::Profile) {
        line += &format!("  {:>10.0} trans/s", iv.transactions as f64 / secs);
    }
    if let Some(r) = iv.retrans {
        line += &format!("  retr {r:>4}");
    }
    if let Some(c) = iv.cwnd {
        line += &format!("  cwnd {:>10}", format_size_iec(c as f64));
    }
    if iv.start_s * 1000.0 < spec.omit_ms as f64 {
        line += "  (warm-up)";
    }
    line.truncate(line.trim_end().len());
    line
}

/// After a UDP test, the receiver's intervals as iperf3's server prints them: what arrived, and
/// the loss against what the sender sent in the same span; none for other tests.
pub fn receiver_lines(r: &TestResult) -> String {
    if r.spec.kind != TestKind::UdpStream {
        return String::new();
    }
    let who = if r.spec.direction == Direction::Send { "server" } else { "client" };
    let mut o = String::new();
    for (iv, d) in crate::doc::interval_details(r) {
        let secs = (iv.end_s - iv.start_s).max(1e-9);
        let rate = format_rate(iv.rx as f64 * 8.0 / secs);
        o += &format!(
            "[{:6.2}-{:6.2} s]  {who} received {:>10} {rate:>12}",
            iv.start_s,
            iv.end_s,
            format_size_iec(iv.rx as f64)
        );
        if let Some(l) = d.lost_pct {
            o += &format!("  lost {l:.1}%");
        }
        o.push('\n');
    }
    o
}

/// An open-loop test that fell behind its schedule: what was asked, what was achieved. Its
/// latency then includes the wait for the schedule, as open loop means it to (the alternative,
/// timing from the late send, is coordinated omission), so the figures must be read with this.
pub fn missed_schedule(spec: &TestSpec, achieved: Option<f64>, behind: Option<f64>) -> Option<String> {
    let asked = spec.rate? as f64;
    let achieved = achieved?;
    if !matches!(spec.kind, TestKind::TcpRr | TestKind::TcpCrr) {
        return None;
    }
    let behind = behind.unwrap_or(0.0);
    let why = if achieved < 0.95 * asked {
        format!("{asked:.0} transactions/s asked, {achieved:.0}/s achieved ({:.0}%)", achieved * 100.0 / asked)
    } else if behind > 0.05 {
        format!(
            "{:.0}% of the requests left more than one interval after they were due (this host could \
             not keep up: -P spreads --rate over more connections)",
            behind * 100.0
        )
    } else {
        return None;
    };
    Some(format!(
        "the open-loop schedule was missed: {why}; latency counts each request from when it was due, so it \
         includes the backlog (no coordinated omission): lower --rate to measure latency at a rate this path sustains"
    ))
}

/// An open-loop request/response test whose median latency is within 10 % of its request
/// interval: the answers probably waited for the next request (Nagle's algorithm and delayed
/// ACKs hold a small write until the previous one is acknowledged), so the figure is the
/// schedule's, not the network's.
pub fn interval_latency(spec: &TestSpec, p50_us: Option<f64>) -> Option<String> {
    let rate = spec.rate.filter(|&r| r > 0)? as f64;
    if !matches!(spec.kind, TestKind::TcpRr | TestKind::TcpCrr) {
        return None;
    }
    let p50 = p50_us?;
    let interval = 1e6 * f64::from(spec.connections.max(1)) / rate;
    if (p50 - interval).abs() > 0.1 * interval {
        return None;
    }
    let why = if spec.nodelay {
        "the answers kept pace with the requests only"
    } else {
        "without TCP_NODELAY (--no-nodelay) a request waits for the previous answer's ACK (Nagle)"
    };
    Some(format!(
        "the median latency ({p50:.0} µs) is within 10% of the request interval ({interval:.0} µs): {why}, \
         so it measures the schedule, not the network"
    ))
}

/// Per-connection bytes are exact (counted per read at the receiver), but a sender moves whole
/// `-l` writes: with thousands of connections each makes only a few in the test, so the rates
/// come in steps of one write and the fairness figures are only as fine as that. Says so when
/// the average connection made under 20 writes.
pub fn coarse_fairness(spec: &TestSpec, seconds: f64, f: Option<&Fairness>) -> Option<String> {
    let f = f?;
    if spec.kind != TestKind::TcpStream || spec.connections < 2 || seconds <= 0.0 || spec.msg_size == 0 {
        return None;
    }
    let writes = f.mean_bps * seconds / 8.0 / f64::from(spec.msg_size);
    if writes >= 20.0 {
        return None;
    }
    let step = f64::from(spec.msg_size) * 8.0 / seconds;
    Some(format!(
        "the {} connections made {writes:.1} writes of {} each on average, so their rates come in steps of one \
         write ({} over {:.1} s) and the fairness figures (Jain {}) are that coarse; a smaller -l or a longer -t \
         resolves them finer",
        spec.connections,
        format_size_iec(f64::from(spec.msg_size)),
        format_rate(step),
        seconds,
        f.jain.map_or("-".into(), |j| format!("{j:.3}")),
    ))
}

/// One line per connection (as iperf3 prints with -P): what each moved, counted at its
/// receiver, over the counted time; none for one connection or more than 64.
fn per_connection(r: &TestResult) -> String {
    let n = r.local.conns.len().max(r.remote.conns.len());
    if !(2..=64).contains(&n) {
        return String::new();
    }
    let bps = |bytes: u64, secs: f64| format_rate(bytes as f64 * 8.0 / secs.max(1e-9));
    let mut o = String::new();
    for c in &r.remote.conns {
        let mut line = format!("  conn {:<5}", c.id);
        if c.rx > 0 {
            line += &format!("  client→server {:>12}", bps(c.rx, r.remote.seconds));
        }
        if let Some(l) = r.local.conns.iter().find(|l| l.id == c.id).filter(|l| l.rx > 0) {
            line += &format!("  server→client {:>12}", bps(l.rx, r.local.seconds));
        }
        let mine = r.local.conns.iter().find(|l| l.id == c.id).and_then(|l| l.tcp.as_ref());
        let retrans: u32 = [c.tcp.as_ref(), mine].into_iter().flatten().map(|t| t.retrans).sum();
        line += &format!("  retransmits {retrans}");
        o += &line;
        o.push('\n');
    }
    o
}

/// Latency percentiles on one line, microseconds.
fn latency_line(l: &Latency) -> String {
    format!(
        "min {:.1}  p50 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}  ({} samples)",
        l.min, l.p50, l.p90, l.p99, l.p999, l.max, l.count
    )
}

fn pct(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

/// The packet counters of the interfaces routing to the peer, each side's where it found one,
/// beside the datagrams the tool counted: every packet on them from the test's start until
/// its last datagrams landed (the control connection and other traffic included), so counts,
/// not rates over windows of different lengths.
fn interface_line(r: &TestResult, sent: u64, received: u64) -> Option<String> {
    let side = |who: &str, h: &linerate_model::host::HostInfo| {
        h.interface_packets.as_ref().map(|p| {
            format!(
                "{who} {} rx {}, tx {} packets",
                linerate_proto::name::escape(p.name.as_bytes()),
                p.rx_packets,
                p.tx_packets
            )
        })
    };
    let parts: Vec<String> =
        [side("client", &r.local.host), side("server", &r.remote.host)].into_iter().flatten().collect();
    (!parts.is_empty()).then(|| {
        format!(
            "{}; the test counted {sent} datagrams sent, {received} received (the interface counts all its packets)",
            parts.join("; ")
        )
    })
}

/// Datagrams per train as shown: an integer when whole, else one decimal.
fn train_len(n: f64) -> String {
    if (n - n.round()).abs() < 0.05 {
        format!("{n:.0}")
    } else {
        format!("{n:.1}")
    }
}

/// The table after a test: per-connection lines, goodput, transactions, latency, groups, UDP,
/// fairness, CPU of both hosts, service demand, TCP, line-rate efficiency, repeats, errors.
pub fn table(r: &TestResult, s: &Summary, runs: &[f64], level: u32) -> String {
    let mut o = String::from("\n");
    o += &per_connection(r);
    let row = |o: &mut String, k: &str, v: String| o.push_str(&format!("  {k:<18}{v}\n"));
    // A repeated point's headline and percentiles are its runs' mean (`Summary::mean_of_repeats`),
    // its other figures the last run's: each line says which.
    let repeated = runs.len() > 1;
    let (mean, last) =
        if repeated { (format!(" (the mean of {} runs)", runs.len()), "the last run: ") } else { (String::new(), "") };
    let rr = s.transactions_per_s.is_some();
    row(
        &mut o,
        "goodput",
        format!(
            "{}{}  ({last}client→server {}, server→client {}; counted at the receiver)",
            format_rate(s.throughput_bps),
            if rr { "" } else { mean.as_str() },
            format_rate(s.send_bps),
            format_rate(s.receive_bps)
        ),
    );
    if let Some(t) = s.transactions_per_s {
        row(&mut o, "transactions", format!("{t:.0}/s{mean}"));
    }
    if let Some(l) = &s.latency_us {
        let which = if repeated { " (p50–p99.9: the mean of the runs')" } else { "" };
        row(&mut o, "latency µs", format!("{}{which}", latency_line(l)));
    }
    // A profile's groups each on their own: the latency probe apart from the bulk beside it.
    if s.groups.len() > 1 {
        for g in &s.groups {
            let mut v = format!(
                "{} conn{}: client→server {}, server→client {}",
                g.connections,
                if g.connections == 1 { "" } else { "s" },
                format_rate(g.send_bps),
                format_rate(g.receive_bps)
            );
            if let (Some(t), Some(l)) = (g.transactions_per_s, &g.latency_us) {
                v += &format!("; {t:.0} transactions/s, latency µs {}", latency_line(l));
            }
            row(&mut o, &format!("group {}", g.name), v);
        }
    }
    if let (Some(loss), Some(pps)) = (s.loss_pct, s.packets_per_s) {
        // Datagrams per second on both sides: the sender's (counted after the warm-up) beside
        // the receiver's.
        let snd = if r.spec.direction == linerate_proto::bench::Direction::Receive { &r.remote } else { &r.local };
        let sent_pps = snd.udp.map_or(0.0, |u| if snd.seconds > 0.0 { u.sent as f64 / snd.seconds } else { 0.0 });
        // Without --gsro a datagram is a packet on the wire; with it the kernel moved trains,
        // and the line says how long they were.
        let (what, sent_trains, got_trains) = if r.spec.gsro {
            let b = s.udp_batching.unwrap_or_default();
            let trains = |n: Option<f64>, who: &str| {
                n.map_or(format!(" ({who} trains)"), |n| format!(" ({who} trains of {})", train_len(n)))
            };
            ("datagrams/s", trains(b.datagrams_per_train, "GSO"), trains(b.datagrams_per_received_train, "GRO"))
        } else {
            ("packets/s", String::new(), String::new())
        };
        let jitter = match s.jitter_us {
            Some(j) => format!("jitter {j:.1} µs"),
            None => "jitter not measured (a GSO/GRO train carries one time)".to_string(),
        };
        row(
            &mut o,
            "udp",
            format!(
                "loss {loss:.3}%  {sent_pps:.0} {what} sent{sent_trains}, {pps:.0} received{got_trains}  {} out of order  {} duplicated  {jitter}  offered {}",
                s.out_of_order.unwrap_or(0),
                s.duplicates.unwrap_or(0),
                format_rate(s.sender_bps.unwrap_or(0.0))
            ),
        );
        let rcv = if r.spec.direction == linerate_proto::bench::Direction::Receive { &r.local } else { &r.remote };
        let counts = (snd.udp.map_or(0, |u| u.sent), rcv.udp.map_or(0, |u| u.received));
        if let Some(v) = interface_line(r, counts.0, counts.1) {
            row(&mut o, "interface", v);
        }
    }
    if let Some(f) = &s.fairness {
        row(
            &mut o,
            "fairness",
            format!(
                "{} connections: Jain {}, min {} mean {} max {}, CoV {:.3}{}",
                s.connections,
                f.jain.map_or("-".into(), |j| format!("{j:.3}")),
                format_rate(f.min_bps),
                format_rate(f.mean_bps),
                format_rate(f.max_bps),
                f.cov,
                if f.starved > 0 { format!(", {} starved", f.starved) } else { String::new() }
            ),
        );
    }
    // The server's figures are its whole machine's: with other clients' tests beside this one
    // they include those too, and say so.
    let others = r.remote.host.concurrent_tests.unwrap_or(1);
    let server_label = if others > 1 {
        format!("CPU server (whole machine, {others} tests running)")
    } else {
        "CPU server".to_string()
    };
    for (k, c) in [("CPU client", &s.cpu.local), (server_label.as_str(), &s.cpu.remote)] {
        row(
            &mut o,
            k,
            format!(
                "user {} sys {} softirq {} of {} cores; process {:.2} s user {:.2} s sys",
                pct(c.user),
                pct(c.system),
                pct(c.softirq),
                c.cores,
                c.process_user_s,
                c.process_system_s
            ),
        );
    }
    row(
        &mut o,
        "service demand",
        format!(
            "client {:.3} µs/KB, server {:.3} µs/KB{}{}",
            s.service_demand_us_per_kb.0,
            s.service_demand_us_per_kb.1,
            if others > 1 {
                format!(" (the server's: its whole machine, {others} tests running)")
            } else {
                String::new()
            },
            s.service_demand_us_per_tran
                .map_or(String::new(), |(a, b)| format!("; {a:.1} / {b:.1} µs per transaction"))
        ),
    );
    let buf = |b: Option<(u32, u32)>| {
        b.map_or("-".to_string(), |(s, r)| {
            format!("snd {} rcv {}", format_size_iec(f64::from(s)), format_size_iec(f64::from(r)))
        })
    };
    // The congestion control the data sockets used, as each side read it back (TCP tests).
    let cc = |h: &linerate_model::host::HostInfo| {
        h.congestion_control_in_use.as_deref().map(|n| linerate_proto::name::escape(n.as_bytes()))
    };
    let congestion = match (cc(&r.local.host), cc(&r.remote.host)) {
        (None, None) => String::new(),
        (l, r) => {
            format!(", congestion client {} / server {}", l.as_deref().unwrap_or("-"), r.as_deref().unwrap_or("-"))
        }
    };
    row(
        &mut o,
        "tcp",
        format!(
            "retransmits {}, mean RTT {}, buffers client {} / server {}{congestion}",
            s.retransmits,
            s.rtt_us.map_or("-".into(), |r| format!("{r:.0} µs")),
            buf(s.buffers.0),
            buf(s.buffers.1)
        ),
    );
    if let Some(e) = &s.efficiency {
        row(
            &mut o,
            "line rate",
            format!(
                "{:.1}% of the {} TCP payload ceiling of a {} link at MTU {}",
                e.ratio * 100.0,
                format_rate(e.ceiling_bps),
                format_rate(e.link_bps),
                e.mtu
            ),
        );
    }
    if runs.len() > 1 {
        if let Some(c) = confidence(runs, level) {
            row(
                &mut o,
                "repeats",
                format!(
                    "{} runs, mean {:.4e} ± {:.2}% at {}% confidence (the interval's full width {:.2}% of the mean)",
                    c.n,
                    c.mean,
                    c.width_pct,
                    c.level,
                    c.full_width_pct.unwrap_or(2.0 * c.width_pct)
                ),
            );
        }
    }
    for e in s.errors.iter().take(5) {
        row(&mut o, "error", e.clone());
    }
    let _ = r;
    o
}

/// The columns of [`csv()`], in order.
pub const CSV_HEADER: [&str; 23] = [
    "test",
    "direction",
    "connections",
    "msg_size",
    "resp_size",
    "sndbuf",
    "rcvbuf",
    "seconds",
    "throughput_bps",
    "send_bps",
    "receive_bps",
    "transactions_per_s",
    "p50_us",
    "p99_us",
    "p999_us",
    "loss_pct",
    "jain",
    "cpu_local_busy",
    "cpu_remote_busy",
    "sd_local_us_per_kb",
    "sd_remote_us_per_kb",
    "retransmits",
    "runs",
];

/// `linerate bench --csv`: a header and one row per point (RFC 4180, through the `csv` crate).
pub fn csv(points: &[Point]) -> String {
    let mut w = csv::WriterBuilder::new().terminator(csv::Terminator::Any(b'\n')).from_writer(Vec::new());
    let mut rows = vec![CSV_HEADER.map(String::from).to_vec()];
    for p in points {
        let (s, sp) = (&p.summary, &p.result.spec);
        let opt = |v: Option<f64>| v.map_or(String::new(), |x| format!("{x}"));
        let dir = match sp.direction {
            Direction::Send => "send",
            Direction::Receive => "receive",
            Direction::Bidir => "bidir",
        };
        rows.push(vec![
            sp.kind.name().to_string(),
            dir.to_string(),
            s.connections.to_string(),
            sp.msg_size.to_string(),
            sp.resp_size.to_string(),
            sp.sndbuf.map_or(String::new(), |b| b.to_string()),
            sp.rcvbuf.map_or(String::new(), |b| b.to_string()),
            format!("{:.3}", s.seconds),
            format!("{:.0}", s.throughput_bps),
            format!("{:.0}", s.send_bps),
            format!("{:.0}", s.receive_bps),
            opt(s.transactions_per_s),
            opt(s.latency_us.as_ref().map(|l| l.p50)),
            opt(s.latency_us.as_ref().map(|l| l.p99)),
            opt(s.latency_us.as_ref().map(|l| l.p999)),
            opt(s.loss_pct),
            opt(s.jain),
            format!("{:.4}", busy(&s.cpu.local)),
            format!("{:.4}", busy(&s.cpu.remote)),
            format!("{:.4}", s.service_demand_us_per_kb.0),
            format!("{:.4}", s.service_demand_us_per_kb.1),
            s.retransmits.to_string(),
            p.runs.len().to_string(),
        ]);
    }
    for r in rows {
        // Writing to memory fails only on a bug; the rows written so far are kept.
        if w.write_record(&r).is_err() {
            break;
        }
    }
    let bytes = w.into_inner().unwrap_or_default();
    String::from_utf8(bytes).unwrap_or_default()
}

/// A sweep's summary: one line per point (goodput, transactions/s, p99, CPU of both hosts, Jain).
pub fn sweep_table(points: &[Point]) -> String {
    let mut o = format!(
        "\n{:<28} {:>14} {:>12} {:>10} {:>8} {:>8} {:>7}\n",
        "point", "goodput", "trans/s", "p99 µs", "CPU cl", "CPU sv", "Jain"
    );
    for p in points {
        let s = &p.summary;
        let label = p.labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ");
        o += &format!(
            "{:<28} {:>14} {:>12} {:>10} {:>8} {:>8} {:>7}\n",
            label,
            format_rate(s.throughput_bps),
            s.transactions_per_s.map_or("-".into(), |t| format!("{t:.0}")),
            s.latency_us.as_ref().map_or("-".into(), |l| format!("{:.1}", l.p99)),
            pct(busy(&s.cpu.local)),
            pct(busy(&s.cpu.remote)),
            s.jain.map_or("-".into(), |j| format!("{j:.3}")),
        );
    }
    o
}

/// Each line of `text` with its prefix (iperf3's `--timestamps`, the UTC time each line is
/// rendered, then `-T TITLE`), each ending with a newline: what a report's output receives.
pub fn prefixed(text: &str, title: Option<&str>, timestamps: bool) -> String {
    let mut all = String::new();
    for line in text.split('\n') {
        if timestamps {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            all += &linerate_model::time::rfc3339_millis(now.map_or(0, |d| d.as_millis() as u64));
            all.push(' ');
        }
        if let Some(t) = title {
            all += t;
            all += ":  ";
        }
        all += line;
        all.push('\n');
    }
    all
}

/// What a point's figures warn of, each a line for standard error: a missed open-loop schedule,
/// latency coarser than the interval, fairness over too short a test.
pub fn point_notes(p: &Point) -> Vec<String> {
    let (r, s) = (&p.result, &p.summary);
    let behind = r.latency.as_ref().and_then(|l| l.behind_schedule);
    let warn = [
        missed_schedule(&r.spec, s.transactions_per_s, behind),
        interval_latency(&r.spec, r.latency.as_ref().map(|l| l.p50)),
    ];
    let mut notes: Vec<String> = warn.into_iter().flatten().map(|w| format!("linerate bench: warning: {w}")).collect();
    notes
        .extend(coarse_fairness(&r.spec, s.seconds, s.fairness.as_ref()).map(|w| format!("linerate bench: note: {w}")));
    notes
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_missed_open_loop_schedule_is_named_with_both_rates() {
        let mut rr = TestSpec::new(TestKind::TcpRr);
        assert_eq!(missed_schedule(&rr, Some(10.0), None), None, "closed loop has no schedule");
        rr.rate = Some(20_000);
        assert_eq!(missed_schedule(&rr, Some(19_500.0), Some(0.01)), None, "within 5 %, on time");
        let w = missed_schedule(&rr, Some(17_375.0), None).unwrap();
        assert!(w.contains("20000 transactions/s asked, 17375/s achieved (87%)") && w.contains("coordinated"), "{w}");
        let w = missed_schedule(&rr, Some(19_967.0), Some(0.62)).unwrap();
        assert!(w.contains("62% of the requests left more than one interval after they were due"), "{w}");
        let mut stream = TestSpec::new(TestKind::TcpStream);
        stream.rate = Some(1_000_000_000);
        assert_eq!(missed_schedule(&stream, Some(1.0), Some(1.0)), None, "a paced stream is not a schedule");
    }

    #[test]
    fn a_median_at_the_request_interval_is_called_the_schedules() {
        let mut rr = TestSpec::new(TestKind::TcpRr);
        assert!(rr.nodelay, "request/response tests set TCP_NODELAY by default");
        assert!(!TestSpec::new(TestKind::TcpStream).nodelay);
        assert_eq!(interval_latency(&rr, Some(1037.0)), None, "closed loop");
        rr.rate = Some(1000);
        rr.nodelay = false;
        // Issue 43's measurement: p50 1,037 µs at 1000/s without TCP_NODELAY.
        let w = interval_latency(&rr, Some(1037.0)).unwrap();
        assert!(w.contains("(1037 µs) is within 10% of the request interval (1000 µs)") && w.contains("Nagle"), "{w}");
        assert_eq!(interval_latency(&rr, Some(55.0)), None, "the network's figure");
        rr.connections = 4;
        assert_eq!(interval_latency(&rr, Some(1037.0)), None, "4 connections: a 4 ms interval each");
        assert!(interval_latency(&rr, Some(3900.0)).is_some());
    }

    #[test]
    fn fairness_from_few_writes_per_connection_is_called_coarse() {
        let mut spec = TestSpec::new(TestKind::TcpStream);
        spec.connections = 10_000;
        spec.msg_size = 131_072;
        // The 10,000-connection run: 3.23 Mbit/s each over 3 s is 9.2 writes of 128 KiB.
        let f = crate::stats::fairness(&[2.09e6, 3.49e6, 4.19e6, 3.14e6]).unwrap();
        let w = coarse_fairness(&spec, 3.0, Some(&f)).unwrap();
        assert!(w.contains("9.2 writes of 128 KiB") && w.contains("350 kbit/s over 3.0 s"), "{w}");
        assert_eq!(coarse_fairness(&spec, 30.0, Some(&f)), None, "92 writes each: fine enough");
        spec.connections = 1;
        assert_eq!(coarse_fairness(&spec, 3.0, Some(&f)), None, "one connection has no fairness");
    }

    /// A three-connection tcp-stream on a shared server and a tcp-rr with latency: every row of
    /// the table shows.
    pub(crate) fn fixture_points() -> Vec<Point> {
        use linerate_proto::bench::{ConnCounts, CpuShare, SideReport, TcpStats, UdpCounts};
        let host = |cc: &str, tests: u32| linerate_model::host::HostInfo {
            congestion_control_in_use: Some(cc.to_string()),
            concurrent_tests: Some(tests.into()),
            ..Default::default()
        };
        let cpu = |user: f64| CpuShare {
            user,
            system: 0.21,
            softirq: 0.07,
            irq: 0.0,
            idle: 1.0 - user - 0.28,
            steal: 0.0,
            cores: 2,
            process_user_s: 0.4,
            process_system_s: 2.6,
        };
        let tcp =
            |retrans| Some(TcpStats { cwnd: 10, rtt_us: 52, rttvar_us: 8, retrans, mss: 1448, ..Default::default() });
        let conn = |id, rx, tx, retrans| ConnCounts { id, rx, tx, tcp: tcp(retrans) };
        let mut stream = TestSpec::new(TestKind::TcpStream);
        stream.connections = 3;
        stream.duration_ms = 3000;
        stream.omit_ms = 500;
        stream.msg_size = 131_072;
        let local = SideReport {
            seconds: 3.0,
            conns: vec![conn(0, 0, 1_200_000_000, 1), conn(1, 0, 1_100_000_000, 0), conn(2, 0, 1_000_000_000, 2)],
            cpu: cpu(0.05),
            buffers: Some((2_626_560, 131_072)),
            host: host("cubic", 1),
            ..Default::default()
        };
        let remote = SideReport {
            seconds: 3.0,
            conns: vec![conn(0, 1_200_000_000, 0, 0), conn(1, 1_100_000_000, 0, 3), conn(2, 1_000_000_000, 0, 0)],
            cpu: cpu(0.08),
            buffers: Some((16_384, 6_291_456)),
            host: host("bbr", 2),
            errors: vec!["connection 3 refused: busy".into()],
            ..Default::default()
        };
        let r = TestResult::of_sides(stream, local, remote);
        let s = r.summary(Some((10e9, 1500)));
        let first = Point {
            labels: vec![("conns".into(), "3".into())],
            result: r,
            summary: s,
            runs: vec![9.1e9, 8.8e9, 8.9e9],
            latencies: Vec::new(),
            steal: Vec::new(),
        };

        let mut rr = TestSpec::new(TestKind::TcpRr);
        rr.duration_ms = 2000;
        rr.msg_size = 64;
        rr.resp_size = 64;
        rr.rate = Some(20_000);
        let mut h = hdrhistogram::Histogram::<u64>::new(3).unwrap_or_else(|_| unreachable!());
        for ns in [21_000u64, 23_500, 25_000, 31_000, 48_000, 250_000] {
            let _ = h.record_n(ns, 1000);
        }
        let side = |transactions| SideReport {
            seconds: 2.0,
            conns: vec![conn(0, 384_000, 384_000, 0)],
            cpu: cpu(0.12),
            transactions,
            host: host("cubic", 1),
            ..Default::default()
        };
        let r = TestResult {
            latency: Some(crate::stats::latency_from_histogram(&h)),
            histogram: Some(h),
            ..TestResult::of_sides(rr, side(6000), side(6000))
        };
        let s = r.summary(None);
        let second = Point {
            labels: vec![("conns".into(), "1".into())],
            result: r,
            summary: s,
            runs: vec![3000.0],
            latencies: Vec::new(),
            steal: Vec::new(),
        };

        let mut udp = TestSpec::new(TestKind::UdpStream);
        udp.rate = Some(1_000_000);
        udp.msg_size = 1448;
        let sent = UdpCounts { sent: 259, ..Default::default() };
        let got = UdpCounts {
            received: 258,
            bytes: 373_584,
            out_of_order: 2,
            expected: 259,
            jitter_us: 12.5,
            ..Default::default()
        };
        let side = |rx, tx, udp| SideReport {
            seconds: 3.0,
            conns: vec![conn(0, rx, tx, 0)],
            cpu: cpu(0.01),
            udp,
            ..Default::default()
        };
        let r = TestResult::of_sides(udp, side(0, 375_032, Some(sent)), side(373_584, 0, Some(got)));
        let s = r.summary(None);
        let third = Point {
            labels: vec![("msg".into(), "1448".into())],
            result: r,
            summary: s,
            runs: vec![9.9e5],
            latencies: Vec::new(),
            steal: Vec::new(),
        };
        vec![first, second, third]
    }

    /// Every line the CLI prints for the fixture's three tests and their sweep, and the CSV:
    /// the bytes `linerate bench` printed before the rendering moved here.
    #[test]
    fn the_tables_banners_interval_lines_and_sweep_summary_read_as_before() {
        let pts = fixture_points();
        let addr: SocketAddr = "127.0.0.1:7878".parse().unwrap();
        let mut all = String::new();
        for p in &pts {
            all += &banner(&p.result.spec, &addr, &p.labels);
            all += "\n";
            let ivs = [
                IntervalCounts { start_s: 0.0, end_s: 0.5, tx: 400_000_000, ..Default::default() },
                IntervalCounts {
                    start_s: 1.0,
                    end_s: 2.0,
                    rx: 1000,
                    tx: 2000,
                    transactions: 3000,
                    ..Default::default()
                },
                IntervalCounts {
                    start_s: 2.0,
                    end_s: 3.0,
                    tx: 125_000_000,
                    retrans: Some(12),
                    cwnd: Some(2_949_120),
                    ..Default::default()
                },
            ];
            for iv in ivs {
                all += &interval_line(&p.result.spec, &iv);
                all += "\n";
            }
            all += &receiver_lines(&p.result);
            all += &table(&p.result, &p.summary, &p.runs, 95);
        }
        all += &sweep_table(&pts);
        insta::assert_snapshot!(all);
    }

    /// iperf3's `-P` layout: a line per connection, labelled by its index, then `[SUM]` with the
    /// totals; `--bidir` each way keeps every figure in its direction's column; `-P 1` prints
    /// the one line it always did.
    #[test]
    fn with_several_streams_each_interval_has_a_line_per_connection_and_a_sum() {
        let stream = |id, tx, rx, retrans: Option<u64>| StreamCounts {
            id,
            tx,
            rx,
            transactions: 0,
            retrans,
            cwnd: retrans.map(|_| 1_474_560 * u64::from(id + 1)),
        };
        let sum = |streams: &[StreamCounts], start_s: f64| IntervalCounts {
            start_s,
            end_s: start_s + 1.0,
            tx: streams.iter().map(|s| s.tx).sum(),
            rx: streams.iter().map(|s| s.rx).sum(),
            transactions: streams.iter().map(|s| s.transactions).sum(),
            retrans: Some(streams.iter().filter_map(|s| s.retrans).sum()),
            cwnd: Some(2_211_840),
        };
        let mut all = String::new();
        // -P 3 one way, the first second a warm-up: connection 2 stalled in it
        let mut send = TestSpec::new(TestKind::TcpStream);
        (send.connections, send.omit_ms) = (3, 1000);
        for (start_s, third) in [(0.0, 0), (1.0, 350_000_000)] {
            let ss =
                [stream(0, 400_000_000, 0, Some(3)), stream(1, 380_000_000, 0, Some(0)), stream(2, third, 0, Some(0))];
            all += &interval_lines(&send, &sum(&ss, start_s), &ss);
            all += "\n";
        }
        // --bidir -P 2: connections 0 and 1 send, 2 and 3 receive
        let mut bidir = TestSpec::new(TestKind::TcpStream);
        (bidir.connections, bidir.direction, bidir.each_way) = (2, Direction::Bidir, true);
        let ss = [
            stream(0, 600_000_000, 0, Some(1)),
            stream(1, 590_000_000, 0, Some(0)),
            stream(2, 0, 610_000_000, None),
            stream(3, 0, 20_000_000, None),
        ];
        all += &interval_lines(&bidir, &sum(&ss, 0.0), &ss);
        all += "\n";
        // tcp-rr -P 2: both ways and the transactions of each
        let mut rr = TestSpec::new(TestKind::TcpRr);
        rr.connections = 2;
        let ss = [
            StreamCounts { transactions: 9000, ..stream(0, 576_000, 576_000, None) },
            StreamCounts { transactions: 8000, ..stream(1, 512_000, 512_000, None) },
        ];
        let iv = IntervalCounts { retrans: None, cwnd: None, ..sum(&ss, 2.0) };
        all += &interval_lines(&rr, &iv, &ss);
        insta::assert_snapshot!(all);
        // -P 1, or no streams kept: the one line as before
        let one = TestSpec::new(TestKind::TcpStream);
        let ss = [stream(0, 400_000_000, 0, Some(3))];
        let iv = sum(&ss, 0.0);
        assert_eq!(interval_lines(&one, &iv, &ss), interval_line(&one, &iv));
        assert_eq!(interval_lines(&send, &iv, &[]), interval_line(&send, &iv));
    }

    #[test]
    fn a_repeated_points_table_prints_the_mean_the_store_keeps_and_says_what_is_the_last_runs() {
        let mut pts = fixture_points();
        let p = &mut pts[0];
        p.runs = vec![8.61e9, 7.0e9, 7.91e9];
        p.summary.throughput_bps = 8.61e9;
        p.summary.mean_of_repeats(p.result.spec.kind, &p.runs, &[]);
        let t = table(&p.result, &p.summary, &p.runs, 95);
        let goodput = t.lines().find(|l| l.trim_start().starts_with("goodput")).unwrap();
        assert!(goodput.contains("7.84 Gbit/s (the mean of 3 runs)  (the last run: client→server"), "{goodput}");
        // transactions: the mean of the runs', latency percentiles the mean of theirs
        let p = &mut pts[1];
        p.runs = vec![3000.0, 2000.0];
        let lat = |p50| linerate_model::doc::bench::RunLatency { p50, p90: 40.0, p99: 50.0, p999: 60.0 };
        p.summary.mean_of_repeats(p.result.spec.kind, &p.runs, &[lat(20.0), lat(30.0)]);
        assert_eq!(p.summary.transactions_per_s, Some(2500.0));
        assert_eq!(p.summary.latency_us.as_ref().map(|l| (l.p50, l.p99)), Some((25.0, 50.0)));
        let t = table(&p.result, &p.summary, &p.runs, 95);
        assert!(t.contains("transactions      2500/s (the mean of 2 runs)"), "{t}");
        assert!(t.contains("(p50–p99.9: the mean of the runs')"), "{t}");
        // one run: its own figures, unchanged
        let p = &mut pts[2];
        let before = p.summary.throughput_bps;
        p.summary.mean_of_repeats(p.result.spec.kind, &[1.0], &[]);
        assert_eq!(p.summary.throughput_bps, before);
    }

    #[test]
    fn the_csv_has_a_header_and_a_row_per_point() {
        let text = csv(&fixture_points());
        assert_eq!(text.lines().count(), 4);
        assert_eq!(text.lines().next().unwrap(), CSV_HEADER.join(","));
        insta::assert_snapshot!(text);
    }

    #[test]
    fn banners_say_the_pace_per_stream_and_the_agents_cap_for_a_test_until_ctrl_c() {
        let addr: SocketAddr = "127.0.0.1:7878".parse().unwrap();
        let mut paced = TestSpec::new(TestKind::TcpStream);
        (paced.connections, paced.rate) = (4, Some(400_000_000));
        let mut forever = TestSpec::new(TestKind::UdpStream);
        (forever.msg_size, forever.rate, forever.until_stopped) = (32_768, Some(1_000_000), true);
        let mut bidir = paced.clone();
        (bidir.direction, bidir.each_way, bidir.connections, bidir.rate) =
            (linerate_proto::bench::Direction::Bidir, true, 2, Some(200_000_000));
        let mut all = banner(&paced, &addr, &[]) + "\n" + &banner(&forever, &addr, &[]) + "\n";
        all += &(banner(&bidir, &addr, &[]) + "\n");
        assert_eq!(granted(&paced), None);
        forever.duration_ms = 3_600_000;
        all += &granted(&forever).unwrap();
        insta::assert_snapshot!(all);
    }

    #[test]
    fn after_a_udp_test_the_receivers_intervals_say_the_loss_against_what_was_sent() {
        use linerate_proto::bench::SideReport;
        let iv = |start_s: f64, rx: u64, tx: u64| IntervalCounts {
            start_s,
            end_s: start_s + 1.0,
            rx,
            tx,
            ..Default::default()
        };
        let side = |intervals| SideReport { intervals, ..Default::default() };
        // The sender offered 125 MB each second; the receiver got 97.5 MB, then all of it.
        let mut r = TestResult::of_sides(
            TestSpec::new(TestKind::UdpStream),
            side(vec![iv(0.0, 0, 125_000_000), iv(1.0, 0, 125_000_000)]),
            side(vec![iv(0.0, 97_500_000, 0), iv(1.0, 125_000_000, 0)]),
        );
        let d = crate::doc::interval_details(&r);
        assert_eq!(d.iter().map(|(_, d)| d.lost_pct.map(|l| l.round())).collect::<Vec<_>>(), [Some(22.0), Some(0.0)]);
        assert_eq!((d[0].1.bytes, d[0].1.sent_bytes), (Some(97_500_000), Some(125_000_000)));
        let lines = receiver_lines(&r);
        insta::assert_snapshot!(lines);
        r.spec = TestSpec::new(TestKind::TcpStream);
        assert_eq!(receiver_lines(&r), "", "TCP has no receiver lines: its loss is retransmitted");
        assert_eq!(crate::doc::interval_details(&r)[0].1.lost_pct, None);
    }
}
