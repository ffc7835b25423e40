//! Mesh sessions (`linerate mesh`): a controller asks an agent to run one benchmark test
//! against another agent, and gets a summary back. The session opens like any other (preambles,
//! Noise, public-key authentication: only a key whose `authorized_keys` line carries `mesh` may
//! ask); its one request is `MeshRequest` ([`MeshTask`]), its one answer `MeshResult`
//! ([`MeshOutcome`]) or a `Fatal`. The agent then runs the test as a `linerate bench` client,
//! with its own host key as its identity, against the peer, whose host key must have the
//! fingerprint the task names.

use crate::bench::{Limits, TestSpec};
use serde::{Deserialize, Serialize};

/// Version of the mesh documents.
pub const MESH_DOC_VERSION: u32 = 1;
/// Longest `peer` (a DNS name and a port).
pub const MAX_PEER: usize = 260;

/// What a controller asks an agent to run.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MeshTask {
    /// [`MESH_DOC_VERSION`].
    pub version: u32,
    /// The other agent: `HOST:PORT` or `[IPv6]:PORT`.
    pub peer: String,
    /// The other agent's host key fingerprint (`SHA256:` and unpadded base64); any other key is
    /// refused.
    pub peer_host_key: String,
    /// The test, as `linerate bench` requests it.
    pub test: TestSpec,
    /// The inventory's names for the test, this agent and the peer: the labels of the agent's
    /// `linerate_mesh_*` series (issue 43: the kind and the peer's address made `rtt` and
    /// `rtt-loaded` one series). Absent from an older controller: the kind and the address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub names: Option<MeshNames>,
    /// The mesh's configured time between rounds, seconds: exported as
    /// `linerate_mesh_interval_seconds`, which the stale alert reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_s: Option<u64>,
    /// Run nothing: the pair's test is failed for this round for this reason (the controller
    /// gave its peer up as down), and the agent records it so (its `linerate_mesh_up` goes to 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

/// The inventory's names of a mesh task's test and agents.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct MeshNames {
    /// The test's name (`rtt-loaded`).
    pub test: String,
    /// The agent that runs the task.
    pub agent: String,
    /// The peer it measures against.
    pub peer: String,
}

/// Longest reason of a [`MeshTask::failed`].
pub const MAX_REASON: usize = 1024;

/// Whether `n` is an inventory name: 1 to 63 of `a-z`, `0-9`, `.`, `_`, `-`.
pub fn is_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 63
        && n.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
}

/// Whether `fp` looks like a host key fingerprint (`SHA256:` and 43 characters of base64).
pub fn is_fingerprint(fp: &str) -> bool {
    fp.strip_prefix("SHA256:")
        .is_some_and(|b| b.len() == 43 && b.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'+' || c == b'/'))
}

impl MeshTask {
    /// Checks the task against the agent's benchmark caps `lim`; the error names what is wrong.
    pub fn validate(&self, lim: &Limits) -> Result<(), TaskError> {
        if self.version != MESH_DOC_VERSION {
            return Err(TaskError::Version(self.version));
        }
        let p = &self.peer;
        let (host, port) = match p.rsplit_once(':') {
            Some((h, port)) => (h.trim_start_matches('[').trim_end_matches(']'), port),
            None => return Err(TaskError::NoPort),
        };
        let host_ok = !host.is_empty()
            && p.len() <= MAX_PEER
            && host.bytes().all(|b| b.is_ascii_alphanumeric() || b".-:".contains(&b));
        if !host_ok || port.parse::<u16>().map_or(true, |v| v == 0) {
            return Err(TaskError::Peer);
        }
        if !is_fingerprint(&self.peer_host_key) {
            return Err(TaskError::PeerHostKey);
        }
        if let Some(n) = &self.names {
            if ![&n.test, &n.agent, &n.peer].iter().all(|x| is_name(x)) {
                return Err(TaskError::Names);
            }
        }
        if self.interval_s.is_some_and(|i| i == 0 || i > 366 * 86_400) {
            return Err(TaskError::Interval);
        }
        if self.failed.as_ref().is_some_and(|r| r.len() > MAX_REASON) {
            return Err(TaskError::Reason);
        }
        Ok(self.test.validate(lim)?)
    }
}

/// Why an agent refuses a [`MeshTask`] ([`MeshTask::validate`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskError {
    /// Another version of the mesh document.
    #[error("mesh document version {0} (this agent speaks {MESH_DOC_VERSION})")]
    Version(u32),
    /// A peer without `:PORT`.
    #[error("peer: HOST:PORT")]
    NoPort,
    /// A peer whose host or port does not read.
    #[error("peer: HOST:PORT with a host name or address and a port")]
    Peer,
    /// A peer host key that is not a fingerprint.
    #[error("peer_host_key: SHA256: and 43 characters of base64")]
    PeerHostKey,
    /// An inventory name outside the name rule.
    #[error("names: 1 to 63 of a-z, 0-9, '.', '_', '-' each")]
    Names,
    /// An interval of 0 or over a year.
    #[error("interval_s: 1 s to a year")]
    Interval,
    /// A failure reason over [`MAX_REASON`] bytes.
    #[error("failed: at most {MAX_REASON} bytes")]
    Reason,
    /// The test itself is refused.
    #[error(transparent)]
    Test(#[from] crate::bench::SpecError),
}

/// Latency of a round-trip test, µs.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MeshLatency {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// A test's figures, as the agent that ran it measured them.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MeshReport {
    /// [`MESH_DOC_VERSION`].
    pub version: u32,
    /// Unix seconds at the start of the test.
    pub started_unix_s: u64,
    /// Seconds counted.
    pub seconds: f64,
    /// Goodput counted at the receiver(s), bit/s.
    pub throughput_bps: f64,
    /// Retransmitted segments (TCP stream tests).
    pub retransmits: u64,
    /// Mean smoothed round trip of the test's connections, µs (client side), if known.
    pub rtt_us: Option<f64>,
    /// Round-trip latency (tcp-rr).
    pub latency_us: Option<MeshLatency>,
    /// Transactions per second (tcp-rr).
    pub transactions_per_s: Option<f64>,
    /// Datagram loss, percent (udp-stream).
    pub loss_pct: Option<f64>,
    /// Busy share of the agent's and the peer's CPUs (0 to 1).
    pub cpu_busy: (f64, f64),
    /// The spread of the test's figures over its reporting intervals (warm-up and a partial
    /// last interval left out), as a bench run's: what `report` judges a change of the pair by
    /// (issue 43). Absent from an older agent, or with fewer than two intervals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread: Option<MeshSpread>,
}

/// How a mesh test's figures varied over its reporting intervals (the stored round's type).
pub use linerate_model::doc::mesh::PairSpread as MeshSpread;

/// How a mesh test ended.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum MeshOutcome {
    /// It ran.
    Done(MeshReport),
    /// The peer could not be reached (connection refused or timed out): the controller backs off
    /// from the peer, not from this agent.
    PeerUnreachable {
        /// What happened.
        message: String,
    },
    /// It failed otherwise (the peer refused the test or the key, a host key mismatch…).
    Failed {
        /// What happened.
        message: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::{decode_doc, encode_doc, TestKind};

    const FP: &str = "SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU";

    fn task(peer: &str, fp: &str) -> MeshTask {
        MeshTask {
            version: 1,
            peer: peer.into(),
            peer_host_key: fp.into(),
            test: TestSpec::new(TestKind::TcpStream),
            names: None,
            interval_s: None,
            failed: None,
        }
    }

    #[test]
    fn tasks_round_trip_and_bad_ones_are_refused() {
        let lim = Limits::default();
        let t = task("198.18.1.2:7878", FP);
        assert_eq!(t.validate(&lim), Ok(()));
        let back: MeshTask = decode_doc(&encode_doc(&t), "mesh task").unwrap();
        assert_eq!(back, t);
        assert!(task("[fd00::2]:7878", FP).validate(&lim).is_ok());
        assert!(task("agent-3.example:9000", FP).validate(&lim).is_ok());
        for (peer, fp, says) in [
            ("198.18.1.2", FP, "HOST:PORT"),
            ("198.18.1.2:0", FP, "HOST:PORT"),
            ("a b:7878", FP, "HOST:PORT"),
            (":7878", FP, "HOST:PORT"),
            ("198.18.1.2:7878", "SHA256:short", "peer_host_key"),
            ("198.18.1.2:7878", "linerate-ed25519 AAAA", "peer_host_key"),
        ] {
            let e = task(peer, fp).validate(&lim).unwrap_err().to_string();
            assert!(e.contains(says), "{peer} {fp}: {e}");
        }
        let mut long = task("198.18.1.2:7878", FP);
        long.test.duration_ms = 10_000_000;
        assert!(long.validate(&lim).is_err(), "the agent's own caps apply");
        let mut v2 = task("198.18.1.2:7878", FP);
        v2.version = 2;
        assert_eq!(v2.validate(&lim), Err(TaskError::Version(2)));
        let unknown = br#"{"version":1,"peer":"a:1","peer_host_key":"x","test":{},"extra":1}"#;
        assert!(decode_doc::<MeshTask>(unknown, "mesh task").is_err());
        // issue 43: the inventory's names, the interval and a failure to record travel along,
        // checked; a task without them is written as before (an older agent reads it)
        let names = MeshNames { test: "rtt-loaded".into(), agent: "fra-1".into(), peer: "ams-2".into() };
        let t = MeshTask { names: Some(names.clone()), interval_s: Some(3600), failed: Some("down".into()), ..t };
        assert_eq!(t.validate(&lim), Ok(()));
        assert_eq!(decode_doc::<MeshTask>(&encode_doc(&t), "mesh task").unwrap(), t);
        assert!(!String::from_utf8_lossy(&encode_doc(&task("a:1", FP))).contains("names"));
        for bad in [
            MeshTask { names: Some(MeshNames { peer: "AMS 2".into(), ..names.clone() }), ..t.clone() },
            MeshTask { names: Some(MeshNames { test: String::new(), ..names }), ..t.clone() },
            MeshTask { interval_s: Some(0), ..t.clone() },
            MeshTask { failed: Some("x".repeat(MAX_REASON + 1)), ..t.clone() },
        ] {
            assert!(bad.validate(&lim).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn outcomes_round_trip() {
        let r = MeshReport {
            version: 1,
            started_unix_s: 1,
            seconds: 10.0,
            throughput_bps: 9.4e9,
            retransmits: 3,
            rtt_us: Some(120.0),
            latency_us: None,
            transactions_per_s: None,
            loss_pct: None,
            cpu_busy: (0.5, 0.4),
            spread: Some(MeshSpread { intervals: 10, throughput_bps: 1e8, p50_us: None }),
        };
        assert!(r.spread.unwrap().is_valid());
        let bad = MeshSpread { intervals: 10, throughput_bps: f64::NAN, p50_us: None };
        assert!(!bad.is_valid() && !MeshSpread { intervals: 1, ..r.spread.unwrap() }.is_valid());
        for o in [
            MeshOutcome::Done(r),
            MeshOutcome::PeerUnreachable { message: "refused".into() },
            MeshOutcome::Failed { message: "x".into() },
        ] {
            let back: MeshOutcome = decode_doc(&encode_doc(&o), "mesh outcome").unwrap();
            assert_eq!(back, o);
        }
    }
}
