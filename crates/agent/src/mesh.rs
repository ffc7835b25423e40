//! Mesh sessions on both ends (protocol in `linerate_proto::mesh`): the agent, which runs one
//! test against another agent when a `mesh` key asks ([`serve_task`]), and the controller's
//! request ([`run_task`]).

use hdrhistogram::Histogram;
use linerate_bench::stats::busy;
use linerate_bench::{BenchClient, BenchClientConfig};
use linerate_net::auth::authorized::Grant;
use linerate_net::auth::keys::{host_name, Identity, KeyClient};
use linerate_net::auth::secret::Secret;
use linerate_net::conn::{self, RecvHalf, SendHalf};
use linerate_net::EngineError;
use linerate_proto::bench::{decode_doc, encode_doc, Limits};
use linerate_proto::error::ErrorCode;
use linerate_proto::frame::{self, Frame};
use linerate_proto::hello::Suite;
use linerate_proto::mesh::{MeshLatency, MeshOutcome, MeshReport, MeshSpread, MeshTask, MESH_DOC_VERSION};
use std::io::ErrorKind;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How long an agent waits to reach and authenticate with the peer.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether `e` means the other end could not be reached at all (as against refusing us).
fn unreachable(e: &EngineError) -> bool {
    match e {
        EngineError::Net { io, .. } => matches!(
            io.kind(),
            ErrorKind::ConnectionRefused
                | ErrorKind::TimedOut
                | ErrorKind::WouldBlock
                | ErrorKind::HostUnreachable
                | ErrorKind::NetworkUnreachable
                | ErrorKind::ConnectionReset
                | ErrorKind::AddrNotAvailable
        ),
        EngineError::Timeout(_) => true,
        _ => false,
    }
}

/// Whether `e` is an agent refusing a test because its `--max-tests` are all taken: worth
/// trying again after a backoff, as an unreachable agent is (the scheduler's rule).
fn agent_busy(e: &EngineError) -> bool {
    matches!(e, EngineError::Remote { code: ErrorCode::Busy, .. })
}

/// Why a mesh request ended without a result: the agent refused it (and told the controller,
/// with `code`), or the answer could not be sent.
#[derive(Debug, thiserror::Error)]
pub enum MeshRefusal {
    /// Refused: the key may not ask, the task is over this agent's caps, the peer is not allowed.
    #[error("{message}")]
    Refused {
        /// The code sent in the `Fatal` frame.
        code: ErrorCode,
        /// What was sent with it.
        message: String,
    },
    /// The result could not be sent to the controller.
    #[error(transparent)]
    Send(#[from] EngineError),
}

/// Tell the controller its request is refused (`Fatal` with `code`), and say why.
pub(crate) fn send_fatal(tx: &mut SendHalf, code: ErrorCode, msg: &str) -> Result<String, MeshRefusal> {
    let _ = tx.send_frames(&[Frame::Fatal(frame::Fatal { code: code as u16, message: msg.as_bytes() })]);
    Err(MeshRefusal::Refused { code, message: msg.to_string() })
}

/// What an agent allows a mesh task: its benchmark caps, and where it may send tests.
#[derive(Debug, Clone, Copy)]
pub struct Rules<'a> {
    /// The agent's caps on one test.
    pub limits: &'a Limits,
    /// Networks the peer's address must be in (`serve --mesh-targets`); none: any.
    pub targets: Option<&'a [ipnet::IpNet]>,
}

/// What sees each mesh test an agent ran: the task, its outcome and, when it ran and timed
/// transactions, its latency histogram in nanoseconds.
pub type OnOutcome<'a> = dyn FnMut(&MeshTask, &MeshOutcome, Option<&Histogram<u64>>) + 'a;

/// The agent's side: `doc` is the session's `MeshRequest`. Checks the key may ask (`mesh`), the
/// task against this agent's caps and the peer against its allowed targets, then runs the test
/// against the peer with `host_key` as this agent's identity, and answers `MeshResult` (or
/// `Fatal`). Returns a line for the log; `on_outcome` sees each test's outcome and, for a test
/// that ran and times transactions, its latency histogram in nanoseconds (for the agent's
/// metrics: it is measured here, where it is exported, so it never crosses the wire).
pub fn serve_task(
    doc: &[u8],
    tx: &mut SendHalf,
    grant: &Grant,
    host_key: Option<Arc<Identity>>,
    rules: &Rules<'_>,
    on_outcome: &mut OnOutcome<'_>,
) -> Result<String, MeshRefusal> {
    if !grant.mesh {
        let msg = format!("{} may not ask for mesh tests (give it the `mesh` option in authorized_keys)", grant.who());
        return send_fatal(tx, ErrorCode::Denied, &msg);
    }
    let Some(host_key) = host_key else {
        return send_fatal(tx, ErrorCode::Unsupported, "this agent has no --host-key to show other agents");
    };
    let task: MeshTask = match decode_doc(doc, "mesh task") {
        Ok(t) => t,
        Err(e) => return send_fatal(tx, ErrorCode::Protocol, &e.to_string()),
    };
    if let Err(e) = task.validate(rules.limits) {
        return send_fatal(tx, ErrorCode::BadParams, &format!("mesh task refused: {e}"));
    }
    if let Some(reason) = &task.failed {
        // The controller gave the peer up for the round: nothing runs, the pair is down.
        let outcome = MeshOutcome::Failed { message: reason.clone() };
        on_outcome(&task, &outcome, None);
        tx.send_frames(&[Frame::MeshResult(&encode_doc(&outcome))])?;
        let reason = linerate_proto::name::escape(reason.as_bytes());
        return Ok(format!("mesh test {} to {} recorded as failed: {reason}", task.test.kind.name(), task.peer));
    }
    let addr = match task.peer.to_socket_addrs().map(|mut a| a.next()) {
        Ok(Some(a)) => a,
        Ok(None) | Err(_) => {
            let outcome = MeshOutcome::PeerUnreachable { message: format!("{} does not resolve", task.peer) };
            on_outcome(&task, &outcome, None);
            tx.send_frames(&[Frame::MeshResult(&encode_doc(&outcome))])?;
            return Ok(format!("mesh test {} to {} failed: does not resolve", task.test.kind.name(), task.peer));
        }
    };
    if let Some(nets) = rules.targets {
        let ip = addr.ip().to_canonical();
        if !nets.iter().any(|n| n.contains(&ip)) {
            let allowed: Vec<String> = nets.iter().map(ToString::to_string).collect();
            let msg = format!("mesh task refused: {ip} is outside this agent's --mesh-targets {}", allowed.join(","));
            return send_fatal(tx, ErrorCode::Denied, &msg);
        }
    }
    let (outcome, latency) = run_against_peer(&task, addr, host_key);
    on_outcome(&task, &outcome, latency.as_ref());
    let line = match &outcome {
        MeshOutcome::Done(r) => {
            format!("mesh test {} to {}: {:.0} bit/s", task.test.kind.name(), task.peer, r.throughput_bps)
        }
        MeshOutcome::PeerUnreachable { message } | MeshOutcome::Failed { message } => {
            format!("mesh test {} to {} failed: {message}", task.test.kind.name(), task.peer)
        }
    };
    tx.send_frames(&[Frame::MeshResult(&encode_doc(&outcome))])?;
    Ok(line)
}

/// Run `task`'s test against the peer at `addr`: its outcome, and the test's latency histogram
/// when it ran and times transactions.
fn run_against_peer(
    task: &MeshTask,
    addr: SocketAddr,
    host_key: Arc<Identity>,
) -> (MeshOutcome, Option<Histogram<u64>>) {
    let name = host_name(&addr.ip().to_string(), addr.port());
    let cfg = BenchClientConfig {
        addr,
        secret: Secret([0; 32]), // unused: the key authenticates
        key_auth: Some(KeyClient::pinned(host_key, name, task.peer_host_key.clone())),
        suite: Suite::Aes256Gcm,
        timeout: PEER_TIMEOUT,
        tuning: Default::default(),
    };
    let started = SystemTime::now();
    let result = BenchClient::connect(cfg).and_then(|mut c| c.run(&task.test, &mut |_| {}));
    match result {
        Ok(mut r) => {
            let s = r.summary(None);
            let outcome = MeshOutcome::Done(MeshReport {
                version: MESH_DOC_VERSION,
                started_unix_s: started.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
                seconds: s.seconds,
                throughput_bps: s.throughput_bps,
                retransmits: s.retransmits,
                rtt_us: s.rtt_us,
                latency_us: s.latency_us.as_ref().map(|l| MeshLatency { p50: l.p50, p99: l.p99 }),
                transactions_per_s: s.transactions_per_s,
                loss_pct: s.loss_pct,
                cpu_busy: (busy(&s.cpu.local), busy(&s.cpu.remote)),
                spread: interval_spread(&r, s.latency_us.as_ref().map(|l| l.p50)),
            });
            (outcome, r.histogram.take())
        }
        Err(e) if unreachable(&e) || agent_busy(&e) => (MeshOutcome::PeerUnreachable { message: e.to_string() }, None),
        Err(e) => (MeshOutcome::Failed { message: e.to_string() }, None),
    }
}

/// The spread of a test's figures over its reporting intervals (warm-up and a partial last
/// interval left out), as `report` takes a bench run's (issue 43): goodput's, and for a
/// round-trip test the median's, from the intervals' transaction rates (a closed loop's round
/// trip is the inverse of its rate, so the relative spreads agree).
fn interval_spread(r: &linerate_bench::stats::TestResult, p50_us: Option<f64>) -> Option<MeshSpread> {
    use linerate_model::stats::{mean, std_dev, steady};
    let iv: Vec<_> = linerate_bench::doc::intervals_doc(r).into_iter().filter(|i| !i.omitted).collect();
    let pick = |f: fn(&linerate_model::doc::bench::BenchInterval) -> f64| -> Vec<f64> {
        steady(iv.iter().map(|i| (i.start_s, i.end_s, f(i))).collect()).into_iter().map(|(_, _, x)| x).collect()
    };
    let bps = pick(|i| i.bps);
    let tps = pick(|i| i.transactions_per_s);
    let p50_us = p50_us.and_then(|p50| {
        let m = mean(&tps).filter(|m| *m > 0.0)?;
        Some(std_dev(&tps)? / m * p50)
    });
    let s = MeshSpread { intervals: bps.len() as u64, throughput_bps: std_dev(&bps)?, p50_us };
    s.is_valid().then_some(s)
}

/// Why a controller's request did not come back with an outcome.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// The agent could not be reached (or did not answer in time).
    #[error("agent unreachable: {0}")]
    Unreachable(EngineError),
    /// The agent refused the request or the session failed otherwise.
    #[error("{0}")]
    Failed(EngineError),
}

/// The controller's side: ask the agent at `agent` (whose host key has fingerprint
/// `agent_key`) to run `task`, as `identity`; waits for the test's duration and `timeout` more.
pub fn run_task(
    agent: SocketAddr,
    agent_key: &str,
    identity: Arc<Identity>,
    task: &MeshTask,
    timeout: Duration,
) -> Result<MeshOutcome, TaskError> {
    let name = host_name(&agent.ip().to_string(), agent.port());
    let kc = KeyClient::pinned(identity, name, agent_key.to_string());
    let classify = |e: EngineError| if unreachable(&e) { TaskError::Unreachable(e) } else { TaskError::Failed(e) };
    let sec = conn::connect_control(agent, Suite::Aes256Gcm, &Secret([0; 32]), Some(&kc), timeout).map_err(classify)?;
    let (mut tx, mut rx) = (sec.tx, sec.rx);
    tx.send_frames(&[Frame::MeshRequest(&encode_doc(task))]).map_err(classify)?;
    let test = Duration::from_millis(task.test.duration_ms.saturating_add(task.test.omit_ms));
    // the agent connects to its peer (PEER_TIMEOUT), runs the test, and collects results
    let wait = test + PEER_TIMEOUT * 2 + timeout + Duration::from_secs(10);
    recv_outcome(&mut rx, wait)
        .map_err(|e| if agent_busy(&e) { TaskError::Unreachable(e) } else { TaskError::Failed(e) })
}

fn recv_outcome(rx: &mut RecvHalf, wait: Duration) -> Result<MeshOutcome, EngineError> {
    rx.set_timeout(Some(wait));
    let plain = match rx.recv() {
        Ok(Some(p)) => p,
        Ok(None) => return Err(EngineError::Timeout("the agent closed the session without an answer".into())),
        Err(e) if e.is_timeout() => {
            return Err(EngineError::Timeout(format!("no answer from the agent within {} s", wait.as_secs())))
        }
        Err(e) => return Err(e),
    };
    match conn::decode_all(plain)?.as_slice() {
        [Frame::MeshResult(doc)] => Ok(decode_doc(doc, "mesh outcome")?),
        [Frame::Fatal(f)] => Err(EngineError::Remote {
            code: ErrorCode::from_u16(f.code),
            message: linerate_proto::name::escape(f.message),
        }),
        other => Err(linerate_proto::ProtoError::Violation(format!("expected MeshResult, got {other:?}")).into()),
    }
}
