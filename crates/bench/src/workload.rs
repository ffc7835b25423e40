//! What each client connection does: the role of a stream connection, the scripts of rr, crr
//! and profile connections (closed or open loop), and opening thousands of connections before
//! the clock starts without flooding the server's accept queue.

use super::reactor::{pace, senders, ClientScript, Conn, Dialer, OpenLoop, Role, Script, Step};
use super::Counters;
use linerate_net::{EngineError, UsageError};
use linerate_proto::bench::{Direction, FlowOp, MsgHeader, Profile, Size, TestKind, TestSpec, REPLY_STREAM};
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Connections being opened at once while setting up.
const CONNECT_WINDOW: usize = 256;

/// The buffer each worker writes from.
pub(crate) fn write_size(spec: &TestSpec) -> usize {
    match spec.kind {
        TestKind::TcpStream => spec.msg_size as usize,
        TestKind::TcpRr | TestKind::TcpCrr => spec.msg_size.max(spec.resp_size) as usize,
        _ => 256 * 1024,
    }
}

/// The role of a long-lived client connection.
pub(crate) fn client_role(spec: &TestSpec, slot: u32) -> Role {
    let p = pace(spec, senders(spec));
    match spec.kind {
        TestKind::TcpStream => match spec.direction {
            Direction::Send => Role::Source { pace: p },
            Direction::Receive => Role::Sink,
            Direction::Bidir if spec.each_way && slot < spec.connections => Role::Source { pace: p },
            Direction::Bidir if spec.each_way => Role::Sink,
            Direction::Bidir => Role::Duplex { pace: p },
        },
        // Open loop on long-lived connections: pipelined, as sockperf's under-load mode.
        TestKind::TcpRr if spec.rate.is_some() => {
            let rr = RrScript::new(spec, slot, false);
            match rr.interval {
                Some(iv) => Role::OpenLoop(Box::new(OpenLoop::new(rr.req, rr.resp, iv, rr.phase))),
                None => Role::Client(Box::new(ClientScript::new(Box::new(rr)))),
            }
        }
        _ => Role::Client(Box::new(ClientScript::new(Box::new(RrScript::new(spec, slot, false))))),
    }
}

/// The role of the server's end of data connection `slot` for this test.
pub(crate) fn server_role(spec: &TestSpec, slot: u32) -> Role {
    let p = pace(spec, senders(spec));
    match spec.kind {
        TestKind::TcpStream => match spec.direction {
            Direction::Send => Role::Sink,
            Direction::Receive => Role::Source { pace: p },
            Direction::Bidir if spec.each_way && slot < spec.connections => Role::Sink,
            Direction::Bidir if spec.each_way => Role::Source { pace: p },
            Direction::Bidir => Role::Duplex { pace: p },
        },
        TestKind::TcpRr | TestKind::TcpCrr => Role::RrServer {
            req: spec.msg_size,
            resp: spec.resp_size,
            once: spec.kind == TestKind::TcpCrr,
            need: 0,
            owe: 0,
            served: false,
        },
        _ => Role::ProfServer { hdr: [0; 8], got: 0, need: 0, pending: 0, owe: 0, stream: false },
    }
}

/// Client connections of crr and profile tests: no socket yet; their scripts connect.
pub(crate) fn script_conns(spec: &TestSpec, counters: &Arc<Counters>) -> Vec<Conn> {
    let _ = counters;
    let mk = |slot: u32, script: Box<dyn Script>| Conn {
        sock: None,
        slot,
        role: Role::Client(Box::new(ClientScript::new(script))),
        sent: 0,
        parked: false,
        timer: None,
    };
    match (&spec.kind, &spec.profile) {
        (TestKind::Profile, Some(p)) => {
            let mut out = Vec::new();
            let mut slot = 0u32;
            for (gi, g) in p.groups.iter().enumerate() {
                for _ in 0..g.connections {
                    out.push(mk(slot, Box::new(ProfileScript::new(p, gi, slot, spec.duration_ms + spec.omit_ms))));
                    slot += 1;
                }
            }
            out
        }
        _ => (0..spec.connections).map(|i| mk(i, Box::new(RrScript::new(spec, i, true)))).collect(),
    }
}

/// Which of a profile's connections (by slot) wait for answers beside groups that only move bulk
/// (flent's rrul: uploads, downloads and a latency probe). Those get event loops of their own:
/// sharing one with bulk flows, a probe would wait for their turns (milliseconds of reads and
/// writes) and report the tool's scheduling as the network's latency. Empty when the profile is
/// all of one sort, which then shares loops as any test does.
pub(crate) fn probe_slots(spec: &TestSpec) -> Vec<bool> {
    let Some(p) = spec.profile.as_ref().filter(|_| spec.kind == TestKind::Profile) else {
        return Vec::new();
    };
    let answers: Vec<bool> = p.groups.iter().map(waits_for_answers).collect();
    if answers.iter().all(|a| *a) || answers.iter().all(|a| !*a) {
        return Vec::new();
    }
    p.groups.iter().zip(answers).flat_map(|(g, a)| std::iter::repeat_n(a, g.connections as usize)).collect()
}

/// Whether a group's transactions wait for the server's answers: a read after a write (a read
/// alone, looped for a duration, is a streamed download).
fn waits_for_answers(g: &linerate_proto::bench::Group) -> bool {
    g.transactions.iter().any(|t| {
        let streamed = t.iterations.is_none() && t.flowops.len() == 1;
        !streamed && t.flowops.iter().any(|op| matches!(op, FlowOp::Read { .. }))
    })
}

/// Open `n` connections with their preambles acknowledged, at most [`CONNECT_WINDOW`] at a time.
pub(crate) fn open_all(d: &Dialer, n: u64, deadline: Instant) -> Result<Vec<TcpStream>, EngineError> {
    let net = |what: &str, e: std::io::Error| EngineError::net(format!("{what} (data connections to {})", d.addr), e);
    let mut poll = Poll::new().map_err(|e| net("creating a poll set", e))?;
    let mut events = Events::with_capacity(1024);
    let mut done: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    // In flight: socket, index, hello bytes sent, ack bytes read.
    let mut flight: Vec<Option<(TcpStream, u32, usize, usize)>> = Vec::new();
    let mut next = 0u64;
    let mut finished = 0u64;
    let mut ack = [0u8; 4];
    while finished < n {
        while next < n && flight.iter().filter(|f| f.is_some()).count() < CONNECT_WINDOW {
            let mut s = d.dial(next as u32).map_err(|e| net("connecting", e))?;
            let slot = flight.iter().position(Option::is_none).unwrap_or_else(|| {
                flight.push(None);
                flight.len() - 1
            });
            poll.registry()
                .register(&mut s, Token(slot), Interest::READABLE | Interest::WRITABLE)
                .map_err(|e| net("registering", e))?;
            flight[slot] = Some((s, next as u32, 0, 0));
            next += 1;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(EngineError::Timeout(format!(
                "opening {n} data connections: {finished} were up at the deadline"
            )));
        }
        poll.poll(&mut events, Some(left.min(Duration::from_millis(100)))).map_err(|e| net("polling", e))?;
        for ev in events.iter() {
            let k = ev.token().0;
            let Some((s, idx, sent, got)) = flight.get_mut(k).and_then(Option::as_mut) else { continue };
            let hello = d.hello_bytes(*idx);
            if let Ok(Some(e)) | Err(e) = s.take_error() {
                return Err(net("connecting", e));
            }
            while *sent < hello.len() {
                match s.write(&hello[*sent..]) {
                    Ok(w) => *sent += w,
                    Err(e)
                        if e.kind() == std::io::ErrorKind::WouldBlock
                            || e.kind() == std::io::ErrorKind::NotConnected =>
                    {
                        break
                    }
                    Err(e) => return Err(net("sending a preamble", e)),
                }
            }
            while *sent == hello.len() && *got < 4 {
                match s.read(&mut ack[*got..]) {
                    Ok(0) => {
                        return Err(UsageError::Test(format!(
                            "the server closed data connection {idx} without accepting it (wrong cookie or test)"
                        ))
                        .into())
                    }
                    Ok(r) => *got += r,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(net("reading an acknowledgement", e)),
                }
            }
            if *got == 4 {
                let Some((mut s, idx, _, _)) = flight[k].take() else { continue };
                let _ = poll.registry().deregister(&mut s);
                done[idx as usize] = Some(s);
                finished += 1;
            }
        }
    }
    Ok(done.into_iter().flatten().collect())
}

impl Dialer {
    pub(crate) fn hello_bytes(&self, conn: u32) -> [u8; linerate_proto::bench::DATA_HELLO_LEN] {
        linerate_proto::bench::DataHello { test: self.test, conn, cookie: self.cookie }.encode()
    }
}

/// Request/response: closed loop, or open loop at a fixed rate per connection timed from the
/// intended send (so a slow answer delays the next request but never hides its own latency).
#[derive(Debug)]
pub(crate) struct RrScript {
    req: u64,
    resp: u64,
    reconnect: bool,
    interval: Option<Duration>,
    phase: Duration,
    base: Option<Instant>,
    k: u64,
}

impl RrScript {
    pub(crate) fn new(spec: &TestSpec, slot: u32, reconnect: bool) -> RrScript {
        let conns = u64::from(spec.connections.max(1));
        let interval = spec.rate.map(|r| Duration::from_secs_f64(conns as f64 / r as f64));
        // Spread the connections' schedules over one interval so they don't fire together.
        let phase = interval.map_or(Duration::ZERO, |i| i.mul_f64(f64::from(slot) / conns as f64));
        RrScript {
            req: u64::from(spec.msg_size),
            resp: u64::from(spec.resp_size),
            reconnect,
            interval,
            phase,
            base: None,
            k: 0,
        }
    }
}

impl Script for RrScript {
    fn next_iteration(&mut self, now: Instant, steps: &mut VecDeque<Step>) -> Option<Instant> {
        if self.reconnect {
            steps.extend([
                Step::Connect,
                Step::Send { n: self.req, hdr: None },
                Step::Ack,
                Step::Recv { n: self.resp },
                Step::Close,
                Step::Mark { answered: true },
            ]);
        } else {
            steps.extend([
                Step::Send { n: self.req, hdr: None },
                Step::Recv { n: self.resp },
                Step::Mark { answered: true },
            ]);
        }
        match self.interval {
            None => Some(now),
            Some(iv) => {
                let base = *self.base.get_or_insert(now + self.phase);
                let t = base + iv.mul_f64(self.k as f64);
                self.k += 1;
                Some(t)
            }
        }
    }

    fn scheduled(&self) -> bool {
        self.interval.is_some()
    }

    fn deadline(&self) -> Option<Instant> {
        None
    }
}

/// A profile group's transactions for one connection.
#[derive(Debug)]
pub(crate) struct ProfileScript {
    group: usize,
    txns: Vec<linerate_proto::bench::Transaction>,
    default_ms: u64,
    t: usize,
    iter: u64,
    txn_start: Option<Instant>,
    deadline: Option<Instant>,
    connected: bool,
    rng: u64,
}

impl ProfileScript {
    pub(crate) fn new(p: &Profile, group: usize, slot: u32, default_ms: u64) -> ProfileScript {
        ProfileScript {
            group,
            txns: p.groups.get(group).map(|g| g.transactions.clone()).unwrap_or_default(),
            default_ms,
            t: 0,
            iter: 0,
            txn_start: None,
            deadline: None,
            connected: false,
            rng: 0x2545_F491_4F6C_DD1D ^ (u64::from(slot) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        }
    }

    fn draw(&mut self, s: Size) -> u64 {
        if s.min == s.max {
            return u64::from(s.min);
        }
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        u64::from(s.min) + self.rng % (u64::from(s.max - s.min) + 1)
    }

    fn ensure_connected(&mut self, steps: &mut VecDeque<Step>) {
        if !self.connected {
            steps.extend([Step::Connect, Step::Ack]);
            self.connected = true;
        }
    }
}

impl Script for ProfileScript {
    fn next_iteration(&mut self, now: Instant, steps: &mut VecDeque<Step>) -> Option<Instant> {
        loop {
            let txn = self.txns.get(self.t)?.clone();
            let start = *self.txn_start.get_or_insert(now);
            let limit_ms = match (txn.iterations, txn.duration_ms) {
                (Some(_), _) => None,
                (None, Some(d)) => Some(d),
                (None, None) => Some(self.default_ms),
            };
            self.deadline = limit_ms.map(|ms| start + Duration::from_millis(ms));
            let over = match (txn.iterations, self.deadline) {
                (Some(n), _) => self.iter >= n,
                (None, Some(d)) => now >= d,
                (None, None) => true,
            };
            if over {
                self.t += 1;
                self.iter = 0;
                self.txn_start = None;
                continue;
            }
            let streaming =
                txn.iterations.is_none() && txn.flowops.len() == 1 && matches!(txn.flowops[0], FlowOp::Read { .. });
            let ops = txn.flowops;
            // Whether this iteration waits for an answer, which makes it a transaction.
            let mut answered = false;
            let mut i = 0;
            while i < ops.len() {
                match &ops[i] {
                    FlowOp::Connect => {
                        if self.connected {
                            steps.push_back(Step::Close);
                        }
                        self.connected = false;
                        self.ensure_connected(steps);
                    }
                    FlowOp::Disconnect => {
                        if self.connected {
                            steps.push_back(Step::Close);
                        }
                        self.connected = false;
                    }
                    FlowOp::Think { ms } => steps.push_back(Step::Think { d: Duration::from_millis(*ms) }),
                    FlowOp::Write { .. } | FlowOp::Read { .. } if streaming => {
                        self.ensure_connected(steps);
                        let hdr = MsgHeader { len: 0, reply: REPLY_STREAM };
                        steps.extend([Step::Send { n: 0, hdr: Some(hdr) }, Step::RecvStream, Step::Close]);
                        // One streaming iteration fills the transaction's time.
                        self.connected = false;
                        self.iter = u64::MAX - 1;
                    }
                    FlowOp::Write { size } | FlowOp::Read { size } => {
                        self.ensure_connected(steps);
                        let n = if matches!(ops[i], FlowOp::Write { .. }) { self.draw(*size) } else { 0 };
                        let first_read = if n > 0 { i + 1 } else { i };
                        let mut reads = Vec::new();
                        let mut j = first_read;
                        while let Some(FlowOp::Read { size }) = ops.get(j) {
                            reads.push(self.draw(*size));
                            j += 1;
                        }
                        answered |= !reads.is_empty();
                        let reply: u64 = reads.iter().sum();
                        let reply = u32::try_from(reply).unwrap_or(u32::MAX - 1).min(u32::MAX - 1);
                        steps.push_back(Step::Send { n, hdr: Some(MsgHeader { len: n as u32, reply }) });
                        steps.extend(reads.into_iter().map(|n| Step::Recv { n }));
                        i = j;
                        continue;
                    }
                }
                i += 1;
            }
            steps.push_back(Step::Mark { answered });
            self.iter = self.iter.saturating_add(1);
            let intended = match txn.rate {
                Some(r) => start + Duration::from_secs_f64((self.iter - 1) as f64 / r),
                None => now,
            };
            return Some(intended);
        }
    }

    fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    fn group(&self) -> usize {
        self.group
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linerate_proto::bench::{Group, Transaction};

    fn profile(flowops: Vec<FlowOp>, iterations: Option<u64>) -> Profile {
        Profile {
            name: "t".into(),
            description: String::new(),
            groups: vec![Group {
                name: "g".into(),
                connections: 1,
                transactions: vec![Transaction { iterations, duration_ms: None, rate: None, flowops }],
            }],
        }
    }

    #[test]
    fn a_get_announces_the_reads_that_follow_its_write() {
        let sz = |n| Size { min: n, max: n };
        let p = profile(vec![FlowOp::Write { size: sz(100) }, FlowOp::Read { size: sz(1 << 20) }], Some(2));
        let mut s = ProfileScript::new(&p, 0, 0, 1000);
        let mut steps = VecDeque::new();
        let now = Instant::now();
        assert!(s.next_iteration(now, &mut steps).is_some());
        let want = [
            Step::Connect,
            Step::Ack,
            Step::Send { n: 100, hdr: Some(MsgHeader { len: 100, reply: 1 << 20 }) },
            Step::Recv { n: 1 << 20 },
            Step::Mark { answered: true },
        ];
        assert_eq!(steps.iter().copied().collect::<Vec<_>>(), want);
        steps.clear();
        assert!(s.next_iteration(now, &mut steps).is_some());
        assert_eq!(steps.len(), 3, "second iteration reuses the connection: {steps:?}");
        steps.clear();
        assert!(s.next_iteration(now, &mut steps).is_none(), "two iterations only");
    }

    #[test]
    fn only_a_mix_of_bulk_and_answered_groups_sets_probes_apart() {
        let sz = |n| Size { min: n, max: n };
        let group = |name: &str, connections, flowops| Group {
            name: name.into(),
            connections,
            transactions: vec![Transaction { iterations: None, duration_ms: None, rate: None, flowops }],
        };
        let up = group("up", 2, vec![FlowOp::Write { size: sz(65536) }]);
        let down = group("down", 1, vec![FlowOp::Read { size: sz(65536) }]);
        let probe = group("probe", 1, vec![FlowOp::Write { size: sz(64) }, FlowOp::Read { size: sz(64) }]);
        let mut spec = TestSpec::new(TestKind::Profile);
        let mut with = |groups: Vec<Group>| {
            spec.profile = Some(Profile { name: "p".into(), description: String::new(), groups });
            probe_slots(&spec)
        };
        assert_eq!(with(vec![up.clone(), down.clone(), probe.clone()]), [false, false, false, true]);
        assert!(with(vec![up, down]).is_empty(), "all bulk: loops shared as usual");
        assert!(with(vec![probe.clone(), probe]).is_empty(), "all answered: loops shared as usual");
    }

    #[test]
    fn random_sizes_stay_in_range_and_vary() {
        let p = profile(vec![FlowOp::Write { size: Size { min: 10, max: 20 } }], Some(200));
        let mut s = ProfileScript::new(&p, 0, 3, 1000);
        let mut seen = std::collections::HashSet::new();
        let mut steps = VecDeque::new();
        while s.next_iteration(Instant::now(), &mut steps).is_some() {
            for st in steps.drain(..) {
                if let Step::Send { n, .. } = st {
                    assert!((10..=20).contains(&n));
                    seen.insert(n);
                }
            }
        }
        assert!(seen.len() > 5, "{seen:?}");
    }

    #[test]
    fn open_loop_schedule_is_timed_from_the_intended_start() {
        let mut spec = TestSpec::new(TestKind::TcpRr);
        spec.connections = 2;
        spec.rate = Some(1000); // 500/s per connection: every 2 ms
        let mut s = RrScript::new(&spec, 1, false);
        let mut steps = VecDeque::new();
        let t0 = Instant::now();
        let a = s.next_iteration(t0, &mut steps).unwrap();
        // Even if the previous answer came late, the next intended time does not move.
        let b = s.next_iteration(t0 + Duration::from_millis(50), &mut steps).unwrap();
        assert_eq!(a, t0 + Duration::from_millis(1), "phase of connection 1 of 2");
        assert_eq!(b - a, Duration::from_millis(2));
    }
}
