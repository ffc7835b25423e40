//! A short measurement of bulk AEAD speed on one core, with the same primitives (ring) and the
//! same record size class the transfer uses: AES-256-GCM and ChaCha20-Poly1305, each repeated
//! until its spread is known ([`super::repeat`]).

use super::repeat::{self, Repeat, Spread};
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, CHACHA20_POLY1305};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// Measured sealing rates on one core, in bits per second of plaintext: the median round, and
/// each with its spread over the rounds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AeadRates {
    /// AES-256-GCM, the median round.
    pub aes_256_gcm_bps: f64,
    /// ChaCha20-Poly1305, the median round.
    pub chacha20_poly1305_bps: f64,
    /// AES-256-GCM over its rounds (absent in reports written before issue 43).
    #[serde(default)]
    pub aes_256_gcm: Option<Spread>,
    /// ChaCha20-Poly1305 over its rounds (as `aes_256_gcm`).
    #[serde(default)]
    pub chacha20_poly1305: Option<Spread>,
}

impl AeadRates {
    /// The faster of the two, which is what `--cipher auto` ends up near.
    pub fn best_bps(&self) -> f64 {
        self.aes_256_gcm_bps.max(self.chacha20_poly1305_bps)
    }

    /// The faster of the two by its median: its name, median and spread (the median alone
    /// where no spread was measured).
    pub fn best(&self) -> (&'static str, f64, Option<Spread>) {
        if self.aes_256_gcm_bps >= self.chacha20_poly1305_bps {
            ("AES-256-GCM", self.aes_256_gcm_bps, self.aes_256_gcm)
        } else {
            ("ChaCha20-Poly1305", self.chacha20_poly1305_bps, self.chacha20_poly1305)
        }
    }
}

/// Record size for the measurement (64 KiB, the order of a transfer record).
const RECORD: usize = 64 * 1024;

/// One round: seal records for `round` of wall time; the rate in the thread's CPU time, `None`
/// if the key or a seal fails.
fn round(key: &LessSafeKey, seq: &mut u64, round: Duration) -> Option<f64> {
    let mut buf = vec![0x5au8; RECORD];
    let (start, cpu0) = (Instant::now(), super::copycost::thread_cpu());
    let mut bytes = 0u64;
    // Bounded both by time and by count (10 GiB), whichever comes first.
    while start.elapsed() < round && bytes < 10 << 30 {
        let mut n = [0u8; 12];
        n[4..].copy_from_slice(&seq.to_be_bytes());
        *seq += 1;
        let _tag = key.seal_in_place_separate_tag(Nonce::assume_unique_for_key(n), Aad::empty(), &mut buf).ok()?;
        bytes += RECORD as u64;
    }
    // CPU time, not wall time: a busy machine slows the measurement, not the rate it finds
    let secs = super::copycost::thread_cpu().saturating_sub(cpu0).as_secs_f64();
    (secs > 0.0).then(|| bytes as f64 * 8.0 / secs)
}

fn rate(alg: &'static ring::aead::Algorithm, rule: &Repeat) -> Option<Spread> {
    let key = LessSafeKey::new(UnboundKey::new(alg, &[0x42; 32]).ok()?);
    let mut seq = 0u64;
    repeat::timed(rule, || round(&key, &mut seq, rule.round()))
}

/// Measure both AEADs on the calling thread, each repeated as `rule` says (up to its budget
/// each, [`Repeat::DOCTOR`] in doctor). A figure whose measurement failed is 0.
pub fn measure(rule: &Repeat) -> AeadRates {
    let (aes, chacha) = (rate(&AES_256_GCM, rule), rate(&CHACHA20_POLY1305, rule));
    AeadRates {
        aes_256_gcm_bps: aes.map_or(0.0, |s| s.median_bps),
        chacha20_poly1305_bps: chacha.map_or(0.0, |s| s.median_bps),
        aes_256_gcm: aes,
        chacha20_poly1305: chacha,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_something_positive_with_its_spread() {
        let rule = Repeat { budget: Duration::from_millis(20), ..Repeat::DOCTOR };
        let r = measure(&rule);
        assert!(r.aes_256_gcm_bps > 0.0 && r.chacha20_poly1305_bps > 0.0, "{r:?}");
        for s in [r.aes_256_gcm.unwrap(), r.chacha20_poly1305.unwrap()] {
            assert!(s.rounds >= 1 && s.low_bps <= s.median_bps && s.median_bps <= s.high_bps, "{s:?}");
        }
        assert_eq!(r.aes_256_gcm.unwrap().median_bps, r.aes_256_gcm_bps);
    }
}
