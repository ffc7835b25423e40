//! `linerate doctor`'s rate probe ([`linerate_doctor::RateProbe`]): a short tcp-stream test
//! against the peer's agent, memory to memory and unencrypted, as `linerate bench` runs it.

use crate::{BenchClient, BenchClientConfig};
use linerate_net::auth::keys::KeyClient;
use linerate_net::auth::secret::Secret;
use linerate_proto::bench::{TestKind, TestSpec};
use std::net::ToSocketAddrs;
use std::time::Duration;

/// Measures the rate to a peer with a `linerate bench` tcp-stream test, authenticated by a
/// shared key or an ed25519 identity.
pub struct BenchProbe {
    key: Secret,
    key_auth: Option<KeyClient>,
}

impl BenchProbe {
    /// A probe that authenticates with `key`, or with `key_auth` where given (daemon mode).
    pub fn new(key: Secret, key_auth: Option<KeyClient>) -> BenchProbe {
        BenchProbe { key, key_auth }
    }
}

impl linerate_doctor::RateProbe for BenchProbe {
    fn probe(&self, peer: &str, streams: u32, secs: f64) -> Result<f64, Box<dyn std::error::Error + Send + Sync>> {
        let addr = peer.to_socket_addrs().map_err(|e| format!("{peer}: {e}"))?.next().ok_or("no address")?;
        let cfg = BenchClientConfig {
            addr,
            secret: self.key.clone(),
            key_auth: self.key_auth.clone(),
            suite: linerate_net::conn::preferred_suite(),
            timeout: Duration::from_secs(10),
            tuning: Default::default(),
        };
        let mut spec = TestSpec::new(TestKind::TcpStream);
        spec.connections = streams.max(1);
        spec.duration_ms = (secs * 1000.0) as u64;
        spec.omit_ms = 200;
        let r = BenchClient::connect(cfg).and_then(|mut c| c.run(&spec, &mut |_| {}))?;
        Ok(r.summary(None).throughput_bps)
    }
}
