//! `linerate doctor`'s rate probe ([`linerate_doctor::RateProbe`]): a short tcp-stream test
//! against the peer's agent, memory to memory and unencrypted, as `linerate bench` runs it.

use crate::{BenchClient, BenchClientConfig};
use linerate_net::addr::ResolveError;
use linerate_net::auth::credentials::{ClientKeys, CredentialError};
use linerate_net::auth::keys::{KeyClient, NoteSink};
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

    /// A probe of `peer` (`HOST[:PORT]`) with the credentials `keys` name, telling `note` what
    /// they learn of the server's key.
    pub fn for_peer(peer: &str, keys: &ClientKeys<'_>, note: NoteSink) -> Result<BenchProbe, ProbeKeyError> {
        let port = linerate_net::addr::resolve(peer, None, None)?.port();
        let (key, key_auth) = keys.resolve(linerate_net::addr::host_of(peer), port, "the rate probe", note)?;
        Ok(BenchProbe::new(key, key_auth))
    }
}

/// Why a peer gets no probe.
#[derive(Debug, thiserror::Error)]
pub enum ProbeKeyError {
    /// Its name gave no port.
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    /// No credentials for it.
    #[error(transparent)]
    Keys(#[from] CredentialError),
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
