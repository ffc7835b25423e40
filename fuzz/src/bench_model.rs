//! The `bench_machines` target: structured sequences of operations (derived with `arbitrary`) on
//! a benchmark session's `ServerMachine` and `ClientMachine`, each frame going through the wire
//! codec, checked step by step against the protocol's table of which frame is allowed in which
//! phase (docs/PROTOCOL.md "Benchmark sessions"). Besides panics it catches frames accepted out of
//! order, phases that drift, documents decoded differently from serde, admitted tests that
//! violate the server's caps, and results accepted that break `SideReport::check`.

use arbitrary::Arbitrary;
use linerate_proto::bench::{
    decode_doc, encode_doc, ClientEvent, ClientMachine, Direction, Limits, Phase, Ready, ServerEvent, ServerMachine,
    SideReport, TestKind, TestSpec, BENCH_DOC_VERSION,
};
use linerate_proto::frame::{self, Frame};

/// Test parameters with every field free, so the admission rules meet hostile values.
#[derive(Arbitrary, Debug, Clone)]
pub struct Spec {
    version: u8,
    kind: u8,
    direction: u8,
    connections: u32,
    duration_ms: u64,
    omit_ms: u64,
    interval_ms: u64,
    msg_size: u32,
    resp_size: u32,
    sndbuf: Option<u32>,
    rcvbuf: Option<u32>,
    rate: Option<u64>,
    zerocopy: bool,
    nodelay: bool,
    gsro: bool,
}

impl Spec {
    fn build(&self) -> TestSpec {
        let kind = [TestKind::TcpStream, TestKind::UdpStream, TestKind::TcpRr, TestKind::TcpCrr, TestKind::Profile]
            [usize::from(self.kind) % 5];
        let mut s = TestSpec::new(kind);
        s.version = if self.version < 200 { BENCH_DOC_VERSION } else { u32::from(self.version) };
        s.direction = [Direction::Send, Direction::Receive, Direction::Bidir][usize::from(self.direction) % 3];
        s.connections = self.connections;
        s.duration_ms = self.duration_ms;
        s.omit_ms = self.omit_ms;
        s.interval_ms = self.interval_ms;
        s.msg_size = self.msg_size;
        s.resp_size = self.resp_size;
        s.sndbuf = self.sndbuf;
        s.rcvbuf = self.rcvbuf;
        s.rate = self.rate;
        s.zerocopy = self.zerocopy;
        s.nodelay = self.nodelay;
        s.gsro = self.gsro;
        s
    }
}

/// A JSON document: well-formed for its type, mangled, or any bytes.
#[derive(Arbitrary, Debug, Clone)]
pub enum Doc {
    /// A valid document of the frame's type.
    Valid,
    /// A valid document with one byte replaced.
    Flip(u16, u8),
    /// A valid document cut short.
    Cut(u16),
    /// Any bytes.
    Raw(Vec<u8>),
}

impl Doc {
    fn apply(&self, mut valid: Vec<u8>) -> Vec<u8> {
        match self {
            Doc::Valid => valid,
            Doc::Flip(at, b) => {
                if !valid.is_empty() {
                    let i = usize::from(*at) % valid.len();
                    valid[i] = *b;
                }
                valid
            }
            Doc::Cut(at) => {
                valid.truncate(usize::from(*at) % (valid.len() + 1));
                valid
            }
            Doc::Raw(b) => b.clone(),
        }
    }
}

/// A result the server might send: sizes and figures free.
#[derive(Arbitrary, Debug, Clone)]
pub struct Result_ {
    version: u8,
    seconds: f64,
    conns: u8,
    intervals: u16,
    errors: u8,
    user: f64,
    /// UDP counts with a side's batching (calls, messages, datagrams each way).
    udp: Option<[u64; 6]>,
}

impl Result_ {
    fn build(&self) -> SideReport {
        SideReport {
            version: if self.version < 200 { BENCH_DOC_VERSION } else { u32::from(self.version) },
            seconds: self.seconds,
            conns: vec![Default::default(); usize::from(self.conns % 8)],
            intervals: vec![Default::default(); usize::from(self.intervals % 2048)],
            errors: vec![String::from("e"); usize::from(self.errors % 80)],
            cpu: linerate_proto::bench::CpuShare { user: self.user, ..Default::default() },
            udp: self.udp.map(|b| linerate_proto::bench::UdpCounts {
                sent: b[2],
                received: b[5],
                batching: Some(linerate_proto::bench::UdpBatching {
                    send_calls: b[0],
                    sent_messages: b[1],
                    sent_datagrams: b[2],
                    recv_calls: b[3],
                    received_messages: b[4],
                    received_datagrams: b[5],
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }
}

/// A frame on the control connection.
#[derive(Arbitrary, Debug, Clone)]
pub enum Wire {
    /// `BenchRequest` with a test document.
    Request(Spec, Doc),
    /// `BenchGo`.
    Go,
    /// `BenchStop`.
    Stop,
    /// `BenchReady` with an admission document.
    Ready(u16, Doc),
    /// `BenchResult` with a result document.
    Result(Result_, Doc),
    /// A copy frame that has no place in a benchmark session.
    End,
}

impl Wire {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            Wire::Request(s, d) => Frame::BenchRequest(&d.apply(encode_doc(&s.build()))).encode(&mut out),
            Wire::Go => Frame::BenchGo.encode(&mut out),
            Wire::Stop => Frame::BenchStop.encode(&mut out),
            Wire::Ready(port, d) => {
                let r = Ready {
                    version: BENCH_DOC_VERSION,
                    test: [1; 16],
                    cookie: [2; 32],
                    tcp_port: *port,
                    udp_port: None,
                    duration_ms: None,
                };
                Frame::BenchReady(&d.apply(encode_doc(&r))).encode(&mut out)
            }
            Wire::Result(r, d) => Frame::BenchResult(&d.apply(encode_doc(&r.build()))).encode(&mut out),
            Wire::End => Frame::End.encode(&mut out),
        }
        out
    }
}

/// One step of a session.
#[derive(Arbitrary, Debug, Clone)]
pub enum Op {
    /// The client sends this frame; the server machine takes it.
    ToServer(Wire),
    /// The server has admitted the requested test (`ServerMachine::admitted`).
    Admitted,
    /// The server sent its result (`ServerMachine::finished`).
    Finished,
    /// The client asks for a test (`ClientMachine::request`).
    ClientRequest(Spec),
    /// The client starts (`ClientMachine::go`).
    ClientGo,
    /// The client stops (`ClientMachine::stop`).
    ClientStop,
    /// The server sends this frame; the client machine takes it.
    ToClient(Wire),
}

/// The target's input.
#[derive(Arbitrary, Debug)]
pub struct Ops(pub Vec<Op>);

/// Bits of [`Harness::run`]'s feature mask: which outcomes an input reached.
fn bit(n: u32) -> u64 {
    1 << n
}

/// Runs operations against both machines and the model.
pub struct Harness {
    server: ServerMachine,
    server_phase: Phase,
    client: ClientMachine,
    client_phase: Phase,
    spec: Option<TestSpec>,
    features: u64,
}

impl Default for Harness {
    fn default() -> Self {
        Harness {
            server: ServerMachine::default(),
            server_phase: Phase::Idle,
            client: ClientMachine::default(),
            client_phase: Phase::Idle,
            spec: None,
            features: 0,
        }
    }
}

impl Harness {
    /// Apply every operation, checking each against the model; returns the features reached.
    pub fn run(ops: &[Op]) -> u64 {
        let mut h = Harness::default();
        for op in ops.iter().take(256) {
            h.apply(op);
        }
        h.features
    }

    fn decoded(bytes: &[u8]) -> Option<Frame<'_>> {
        let (f, used) = frame::decode(bytes).expect("our own encoding decodes");
        assert_eq!(used, bytes.len());
        Some(f)
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::ToServer(w) => {
                let bytes = w.encode();
                let Some(f) = Self::decoded(&bytes) else { return };
                let r = self.server.handle(&f);
                match (self.server_phase, &f, r) {
                    (Phase::Idle, Frame::BenchRequest(doc), r) => {
                        // The machine moves on before decoding: the server ends the session on
                        // a bad request anyway.
                        self.server_phase = Phase::Requested;
                        let want: Result<TestSpec, _> = decode_doc(doc, "test request");
                        match (r, want) {
                            (Ok(ServerEvent::Request(got)), Ok(want)) => {
                                let got = *got;
                                assert_eq!(got, want);
                                self.features |= bit(0);
                                // The document re-encodes to an equal test.
                                let again: TestSpec = decode_doc(&encode_doc(&got), "again").expect("re-decodes");
                                assert_eq!(again, got);
                                let lim = Limits::default();
                                if got.validate(&lim).is_ok() {
                                    self.features |= bit(1);
                                    let conns = got.initial_connections();
                                    assert!(conns >= 1 && conns <= u64::from(lim.max_connections));
                                    assert!(got.duration_ms >= 1);
                                    assert!(got.duration_ms.saturating_add(got.omit_ms) <= lim.max_duration_ms);
                                    assert!((10..=60_000).contains(&got.interval_ms));
                                } else {
                                    self.features |= bit(2);
                                }
                            }
                            (Err(_), Err(_)) => self.features |= bit(3),
                            (r, w) => panic!("request: machine {r:?}, serde {w:?}"),
                        }
                    }
                    (Phase::Admitted, Frame::BenchGo, Ok(ServerEvent::Go)) => {
                        self.server_phase = Phase::Running;
                        self.features |= bit(4);
                    }
                    (Phase::Admitted | Phase::Running, Frame::BenchStop, Ok(ServerEvent::Stop)) => {
                        self.server_phase = Phase::Stopping;
                        self.features |= bit(5);
                    }
                    (p, f, Err(_))
                        if !matches!(
                            (p, f),
                            (Phase::Admitted, Frame::BenchGo) | (Phase::Admitted | Phase::Running, Frame::BenchStop)
                        ) =>
                    {
                        self.features |= bit(6);
                    }
                    (p, f, r) => panic!("server in {p:?} took {f:?}: {r:?}"),
                }
            }
            Op::Admitted => {
                self.server.admitted();
                if self.server_phase == Phase::Requested {
                    self.server_phase = Phase::Admitted;
                    self.features |= bit(7);
                }
            }
            Op::Finished => {
                self.server.finished();
                self.server_phase = Phase::Idle;
            }
            Op::ClientRequest(s) => {
                let spec = s.build();
                let r = self.client.request(&spec);
                if self.client_phase == Phase::Idle {
                    let body = r.expect("a request from Idle is allowed");
                    let back: TestSpec = decode_doc(&body, "request").expect("our request decodes");
                    assert_eq!(back, spec);
                    self.client_phase = Phase::Requested;
                    self.spec = Some(spec);
                    self.features |= bit(8);
                } else {
                    assert!(r.is_err(), "a request in {:?} was allowed", self.client_phase);
                }
            }
            Op::ClientGo => {
                let r = self.client.go();
                if self.client_phase == Phase::Admitted {
                    r.expect("go after admission");
                    self.client_phase = Phase::Starting;
                    self.features |= bit(9);
                } else {
                    assert!(r.is_err(), "go in {:?} was allowed", self.client_phase);
                }
            }
            Op::ClientStop => {
                let r = self.client.stop();
                if matches!(self.client_phase, Phase::Admitted | Phase::Starting | Phase::Running) {
                    r.expect("stop while a test is on");
                    self.client_phase = Phase::Stopping;
                    self.features |= bit(10);
                } else {
                    assert!(r.is_err(), "stop in {:?} was allowed", self.client_phase);
                }
            }
            Op::ToClient(w) => {
                let bytes = w.encode();
                let Some(f) = Self::decoded(&bytes) else { return };
                let r = self.client.handle(&f);
                match (self.client_phase, &f, r) {
                    (Phase::Requested, Frame::BenchReady(doc), r) => {
                        let want: Option<Ready> =
                            decode_doc::<Ready>(doc, "ready").ok().filter(|x| x.version == BENCH_DOC_VERSION);
                        match (r, want) {
                            (Ok(ClientEvent::Ready(got)), Some(want)) => {
                                assert_eq!(got, want);
                                self.client_phase = Phase::Admitted;
                                self.features |= bit(11);
                            }
                            (Err(_), None) => self.features |= bit(12),
                            (r, w) => panic!("ready: machine {r:?}, model {w:?}"),
                        }
                    }
                    (Phase::Starting, Frame::BenchGo, Ok(ClientEvent::Started)) => {
                        self.client_phase = Phase::Running;
                        self.features |= bit(13);
                    }
                    (Phase::Stopping, Frame::BenchResult(doc), r) => {
                        let spec = self.spec.as_ref().expect("a test was requested");
                        let want = decode_doc::<SideReport>(doc, "result").ok().filter(|x| x.check(spec).is_ok());
                        match (r, want) {
                            (Ok(ClientEvent::Result(got)), Some(want)) => {
                                assert_eq!(*got, want);
                                assert!(got.seconds.is_finite() && got.seconds >= 0.0);
                                assert!(got.errors.len() <= 64);
                                self.client_phase = Phase::Idle;
                                self.features |= bit(14);
                            }
                            (Err(_), None) => self.features |= bit(15),
                            (r, w) => panic!("result: machine {r:?}, model {w:?}"),
                        }
                    }
                    (p, f, Err(_))
                        if !matches!(
                            (p, f),
                            (Phase::Requested, Frame::BenchReady(_))
                                | (Phase::Starting, Frame::BenchGo)
                                | (Phase::Stopping, Frame::BenchResult(_))
                        ) =>
                    {
                        self.features |= bit(16);
                    }
                    (p, f, r) => panic!("client in {p:?} took {f:?}: {r:?}"),
                }
            }
        }
        assert_eq!(self.server.phase(), self.server_phase, "server phase drifted");
        assert_eq!(self.client.phase(), self.client_phase, "client phase drifted");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_session_reaches_every_phase() {
        let spec = Spec {
            version: 0,
            kind: 0,
            direction: 0,
            connections: 2,
            duration_ms: 1000,
            omit_ms: 0,
            interval_ms: 100,
            msg_size: 1000,
            resp_size: 0,
            sndbuf: None,
            rcvbuf: None,
            rate: None,
            zerocopy: false,
            nodelay: false,
            gsro: false,
        };
        let res = Result_ { version: 0, seconds: 1.0, conns: 2, intervals: 10, errors: 0, user: 0.1, udp: None };
        let ops = vec![
            Op::ClientRequest(spec.clone()),
            Op::ToServer(Wire::Request(spec, Doc::Valid)),
            Op::Admitted,
            Op::ToClient(Wire::Ready(4000, Doc::Valid)),
            Op::ClientGo,
            Op::ToServer(Wire::Go),
            Op::ToClient(Wire::Go),
            Op::ClientStop,
            Op::ToServer(Wire::Stop),
            Op::Finished,
            Op::ToClient(Wire::Result(res, Doc::Valid)),
            Op::ToClient(Wire::End),
        ];
        let f = Harness::run(&ops);
        for b in [0, 1, 4, 5, 7, 8, 9, 10, 11, 13, 14, 16] {
            assert!(f & bit(b) != 0, "feature {b} not reached: {f:b}");
        }
    }
}
