//! A short measurement of bulk AEAD speed on one core, with the same primitives (ring) and the
//! same record size class the transfer uses: AES-256-GCM and ChaCha20-Poly1305.

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, CHACHA20_POLY1305};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// Measured sealing rates on one core, in bits per second of plaintext.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AeadRates {
    /// AES-256-GCM.
    pub aes_256_gcm_bps: f64,
    /// ChaCha20-Poly1305.
    pub chacha20_poly1305_bps: f64,
}

impl AeadRates {
    /// The faster of the two, which is what `--cipher auto` ends up near.
    pub fn best_bps(&self) -> f64 {
        self.aes_256_gcm_bps.max(self.chacha20_poly1305_bps)
    }
}

/// Record size for the measurement (64 KiB, the order of a transfer record).
const RECORD: usize = 64 * 1024;

fn rate(alg: &'static ring::aead::Algorithm, budget: Duration) -> f64 {
    let Ok(key) = UnboundKey::new(alg, &[0x42; 32]) else { return 0.0 };
    let key = LessSafeKey::new(key);
    let mut buf = vec![0x5au8; RECORD];
    let (start, cpu0) = (Instant::now(), super::copycost::thread_cpu());
    let mut bytes = 0u64;
    let mut seq = 0u64;
    // Bounded both by time and by count (10 GiB), whichever comes first.
    while start.elapsed() < budget && bytes < 10 << 30 {
        let mut n = [0u8; 12];
        n[4..].copy_from_slice(&seq.to_be_bytes());
        seq += 1;
        if key.seal_in_place_separate_tag(Nonce::assume_unique_for_key(n), Aad::empty(), &mut buf).is_err() {
            return 0.0;
        }
        bytes += RECORD as u64;
    }
    // CPU time, not wall time: a busy machine slows the measurement, not the rate it finds
    let secs = super::copycost::thread_cpu().saturating_sub(cpu0).as_secs_f64();
    if secs > 0.0 {
        bytes as f64 * 8.0 / secs
    } else {
        0.0
    }
}

/// Measure both AEADs on the calling thread, about `budget` in total (0.3 s by default in doctor).
pub fn measure(budget: Duration) -> AeadRates {
    let half = budget / 2;
    AeadRates { aes_256_gcm_bps: rate(&AES_256_GCM, half), chacha20_poly1305_bps: rate(&CHACHA20_POLY1305, half) }
}

#[cfg(test)]
mod tests {
    #[test]
    fn measures_something_positive() {
        let r = super::measure(std::time::Duration::from_millis(40));
        assert!(r.aes_256_gcm_bps > 0.0 && r.chacha20_poly1305_bps > 0.0, "{r:?}");
    }
}
