//! The Noise handshake (NNpsk0) that authenticates every connection and gives it fresh,
//! forward-secret keys, and the key schedule derived from it.
//!
//! A control connection uses the session secret as its pre-shared key; each data connection uses
//! a key derived from its control connection's handshake, and both preambles are the prologue, so
//! a data stream is bound to exactly one session and one stream index. The handshake is driven
//! by the caller: `write` produces a message to send, `read` consumes one; no I/O happens here.

use crate::caps::MAX_HANDSHAKE_MSG;
use crate::hello::Suite;
use crate::ProtoError;
use ring::hkdf;

/// Length of every key and secret in the protocol.
pub const KEY_LEN: usize = 32;

/// Which side of the handshake we are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The connecting side (the `cp` or `bench` client).
    Initiator,
    /// The accepting side (`serve`).
    Responder,
}

/// A handshake in progress.
pub struct Handshake {
    state: snow::HandshakeState,
    role: Role,
}

/// The keys a finished handshake yields for one connection.
pub struct ConnKeys {
    /// Key sealing records from initiator to responder.
    pub initiator_to_responder: [u8; KEY_LEN],
    /// Key sealing records from responder to initiator.
    pub responder_to_initiator: [u8; KEY_LEN],
    /// Pre-shared key for the data streams of the session this connection controls.
    pub stream_psk: [u8; KEY_LEN],
}

impl Drop for ConnKeys {
    fn drop(&mut self) {
        use zeroize::Zeroize;
        self.initiator_to_responder.zeroize();
        self.responder_to_initiator.zeroize();
        self.stream_psk.zeroize();
    }
}

impl Handshake {
    /// Start a handshake. `prologue` must be the exact preamble bytes both sides exchanged.
    pub fn new(role: Role, suite: Suite, psk: &[u8; KEY_LEN], prologue: &[u8]) -> Result<Handshake, ProtoError> {
        let params = suite.noise_params().parse().map_err(|_| ProtoError::Invalid("noise params"))?;
        let builder = snow::Builder::new(params)
            .psk(0, psk)
            .and_then(|b| b.prologue(prologue))
            .map_err(|_| ProtoError::Invalid("noise builder"))?;
        let state = match role {
            Role::Initiator => builder.build_initiator(),
            Role::Responder => builder.build_responder(),
        }
        .map_err(|_| ProtoError::Invalid("noise state"))?;
        Ok(Handshake { state, role })
    }

    /// Start an ephemeral-only handshake (Noise `NN`) for a public-key control connection
    /// ([`crate::hello::AuthMode::PublicKey`]). It authenticates nobody by itself: both sides
    /// then sign [`Handshake::hash`] with their ed25519 keys ([`crate::auth`]), as TLS 1.3
    /// signs its transcript, before anything else is trusted.
    pub fn new_nn(role: Role, suite: Suite, prologue: &[u8]) -> Result<Handshake, ProtoError> {
        let params = suite.noise_params_nn().parse().map_err(|_| ProtoError::Invalid("noise params"))?;
        let builder =
            snow::Builder::new(params).prologue(prologue).map_err(|_| ProtoError::Invalid("noise builder"))?;
        let state = match role {
            Role::Initiator => builder.build_initiator(),
            Role::Responder => builder.build_responder(),
        }
        .map_err(|_| ProtoError::Invalid("noise state"))?;
        Ok(Handshake { state, role })
    }

    /// The Noise handshake hash: a digest of the prologue (both preambles) and every handshake
    /// message, unique to this connection. Meaningful once [`Handshake::is_finished`]; read it
    /// before [`Handshake::finish`].
    pub fn hash(&self) -> Result<[u8; KEY_LEN], ProtoError> {
        if !self.state.is_handshake_finished() {
            return Err(ProtoError::Violation("handshake not finished".into()));
        }
        self.state.get_handshake_hash().try_into().map_err(|_| ProtoError::Invalid("handshake hash length"))
    }

    /// Produce the next handshake message, carrying `payload` (encrypted in both NNpsk0 messages).
    pub fn write(&mut self, payload: &[u8]) -> Result<Vec<u8>, ProtoError> {
        let mut out = vec![0u8; MAX_HANDSHAKE_MSG];
        let n = self.state.write_message(payload, &mut out).map_err(|_| ProtoError::Invalid("handshake write"))?;
        out.truncate(n);
        Ok(out)
    }

    /// Consume the peer's next handshake message and return its payload. Any failure, including a
    /// wrong pre-shared key, is [`ProtoError::Auth`].
    pub fn read(&mut self, msg: &[u8]) -> Result<Vec<u8>, ProtoError> {
        if msg.len() > MAX_HANDSHAKE_MSG {
            return Err(ProtoError::TooLong {
                what: "handshake message",
                len: msg.len() as u64,
                cap: MAX_HANDSHAKE_MSG as u64,
            });
        }
        let mut out = vec![0u8; MAX_HANDSHAKE_MSG];
        let n = self.state.read_message(msg, &mut out).map_err(|_| ProtoError::Auth)?;
        out.truncate(n);
        Ok(out)
    }

    /// Whether both messages have been exchanged.
    pub fn is_finished(&self) -> bool {
        self.state.is_handshake_finished()
    }

    /// Which side we are.
    pub fn role(&self) -> Role {
        self.role
    }

    /// Derive the connection keys. HKDF-SHA256 with the handshake hash as salt over the Noise
    /// split output, with distinct labels, in the manner of the TLS 1.3 key schedule, so the record
    /// keys and the stream key never share material.
    pub fn finish(mut self) -> Result<ConnKeys, ProtoError> {
        if !self.state.is_handshake_finished() {
            return Err(ProtoError::Violation("handshake not finished".into()));
        }
        let (k1, k2) = self.state.dangerously_get_raw_split();
        let mut ikm = [0u8; 2 * KEY_LEN];
        ikm[..KEY_LEN].copy_from_slice(&k1);
        ikm[KEY_LEN..].copy_from_slice(&k2);
        let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, self.state.get_handshake_hash()).extract(&ikm);
        ikm.fill(0);
        Ok(ConnKeys {
            initiator_to_responder: expand(&prk, b"record i2r")?,
            responder_to_initiator: expand(&prk, b"record r2i")?,
            stream_psk: expand(&prk, b"stream psk")?,
        })
    }
}

struct Len32;
impl hkdf::KeyType for Len32 {
    fn len(&self) -> usize {
        KEY_LEN
    }
}

fn expand(prk: &hkdf::Prk, label: &[u8]) -> Result<[u8; KEY_LEN], ProtoError> {
    let mut out = [0u8; KEY_LEN];
    prk.expand(&[b"linerate/1 ", label], Len32)
        .and_then(|okm| okm.fill(&mut out))
        .map_err(|_| ProtoError::Invalid("hkdf"))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        psk_i: [u8; 32],
        psk_r: [u8; 32],
        pro_i: &[u8],
        pro_r: &[u8],
    ) -> Result<(ConnKeys, ConnKeys, Vec<u8>), ProtoError> {
        let mut i = Handshake::new(Role::Initiator, Suite::Aes256Gcm, &psk_i, pro_i)?;
        let mut r = Handshake::new(Role::Responder, Suite::Aes256Gcm, &psk_r, pro_r)?;
        let m1 = i.write(b"")?;
        r.read(&m1)?;
        let m2 = r.write(b"session-id")?;
        let payload = i.read(&m2)?;
        Ok((i.finish()?, r.finish()?, payload))
    }

    #[test]
    fn matching_secrets_agree_on_keys_and_payload() {
        let (i, r, payload) = run([1; 32], [1; 32], b"p", b"p").unwrap();
        assert_eq!(payload, b"session-id");
        assert_eq!(i.initiator_to_responder, r.initiator_to_responder);
        assert_eq!(i.responder_to_initiator, r.responder_to_initiator);
        assert_eq!(i.stream_psk, r.stream_psk);
        assert_ne!(i.initiator_to_responder, i.responder_to_initiator);
        assert_ne!(i.stream_psk, i.initiator_to_responder);
    }

    #[test]
    fn wrong_secret_fails_authentication() {
        assert!(matches!(run([1; 32], [2; 32], b"p", b"p"), Err(ProtoError::Auth)));
    }

    #[test]
    fn different_prologue_fails_authentication() {
        assert!(matches!(run([1; 32], [1; 32], b"stream 1", b"stream 2"), Err(ProtoError::Auth)));
    }

    #[test]
    fn every_handshake_has_fresh_keys() {
        let (a, _, _) = run([1; 32], [1; 32], b"p", b"p").unwrap();
        let (b, _, _) = run([1; 32], [1; 32], b"p", b"p").unwrap();
        assert_ne!(a.initiator_to_responder, b.initiator_to_responder);
    }

    fn run_nn(pro_i: &[u8], pro_r: &[u8]) -> Result<([u8; 32], [u8; 32], ConnKeys, ConnKeys), ProtoError> {
        let mut i = Handshake::new_nn(Role::Initiator, Suite::ChaCha20Poly1305, pro_i)?;
        let mut r = Handshake::new_nn(Role::Responder, Suite::ChaCha20Poly1305, pro_r)?;
        assert!(i.hash().is_err(), "no hash before the end");
        r.read(&i.write(b"")?)?;
        let m2 = r.write(b"session-id")?;
        assert_eq!(i.read(&m2)?, b"session-id");
        let (hi, hr) = (i.hash()?, r.hash()?);
        Ok((hi, hr, i.finish()?, r.finish()?))
    }

    #[test]
    fn nn_handshake_agrees_on_hash_and_keys_and_each_is_fresh() {
        let (hi, hr, ki, kr) = run_nn(b"p", b"p").unwrap();
        assert_eq!(hi, hr);
        assert_eq!(ki.initiator_to_responder, kr.initiator_to_responder);
        assert_eq!(ki.stream_psk, kr.stream_psk);
        let (h2, _, _, _) = run_nn(b"p", b"p").unwrap();
        assert_ne!(hi, h2, "a signature over one session's hash must not fit another");
    }

    #[test]
    fn nn_handshake_binds_the_prologue() {
        // The auth-mode byte is in the preamble: a peer who flips it breaks the handshake.
        assert!(matches!(run_nn(b"mode 1", b"mode 0"), Err(ProtoError::Auth)));
    }

    #[test]
    fn oversize_handshake_message_is_refused_before_parsing() {
        let mut r = Handshake::new(Role::Responder, Suite::Aes256Gcm, &[0; 32], b"").unwrap();
        assert!(matches!(r.read(&vec![0; MAX_HANDSHAKE_MSG + 1]), Err(ProtoError::TooLong { .. })));
    }
}
