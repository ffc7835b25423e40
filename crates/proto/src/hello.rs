//! The plaintext preamble that opens every connection: magic, version, what the connection is
//! for, and the cipher suite. It is short and fixed-size, so a peer of another version or a port
//! scanner is told apart before any cryptography runs. Both preambles are bound into the Noise
//! handshake as its prologue, so neither can be altered undetected.

use crate::{ProtoError, PROTOCOL_VERSION};

/// The four bytes that open every linerate connection.
pub const MAGIC: [u8; 4] = *b"LNRT";
/// Size of [`ClientHello`] on the wire.
pub const CLIENT_HELLO_LEN: usize = 28;
/// Size of [`ServerHello`] on the wire.
pub const SERVER_HELLO_LEN: usize = 8;
/// A session identifier chosen by the server.
pub type SessionId = [u8; 16];

/// What a connection carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    /// The first connection of a session: authenticated by the shared secret or by public keys
    /// ([`AuthMode`]); carries the session's control frames.
    Control = 0,
    /// A further connection joining an existing session: authenticated by a key derived from
    /// the control connection's handshake.
    Data = 1,
}

/// How a control connection authenticates (preamble byte 26). Data connections always use the
/// session's stream key, so their byte is 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMode {
    /// The shared 32-byte secret is the Noise pre-shared key (`NNpsk0`).
    Secret = 0,
    /// Ephemeral-only Noise (`NN`), then ed25519 signatures over the handshake hash by the
    /// server's host key and the client's key, in records (`HostAuth`, `ClientAuth`); see
    /// [`crate::auth`].
    PublicKey = 1,
}

/// The AEAD used for the handshake and records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Suite {
    /// AES-256-GCM (hardware-accelerated on x86-64 with AES-NI and on ARMv8 with the AES
    /// extension).
    Aes256Gcm = 1,
    /// ChaCha20-Poly1305, for CPUs without AES acceleration.
    ChaCha20Poly1305 = 2,
}

impl Suite {
    /// Decode from the wire.
    pub fn from_u8(v: u8) -> Result<Suite, ProtoError> {
        match v {
            1 => Ok(Suite::Aes256Gcm),
            2 => Ok(Suite::ChaCha20Poly1305),
            _ => Err(ProtoError::Invalid("cipher suite")),
        }
    }

    /// The Noise protocol name used for the handshake with this suite.
    pub fn noise_params(self) -> &'static str {
        match self {
            Suite::Aes256Gcm => "Noise_NNpsk0_25519_AESGCM_SHA256",
            Suite::ChaCha20Poly1305 => "Noise_NNpsk0_25519_ChaChaPoly_SHA256",
        }
    }

    /// The Noise protocol name of a public-key control connection ([`AuthMode::PublicKey`]):
    /// the same suite without a pre-shared key; the signatures that follow authenticate it.
    pub fn noise_params_nn(self) -> &'static str {
        match self {
            Suite::Aes256Gcm => "Noise_NN_25519_AESGCM_SHA256",
            Suite::ChaCha20Poly1305 => "Noise_NN_25519_ChaChaPoly_SHA256",
        }
    }

    /// Name for reports (`--json` `cipher`).
    pub fn name(self) -> &'static str {
        match self {
            Suite::Aes256Gcm => "aes-256-gcm",
            Suite::ChaCha20Poly1305 => "chacha20-poly1305",
        }
    }
}

/// The client's preamble.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientHello {
    /// What this connection is for.
    pub kind: StreamKind,
    /// The AEAD the client chose.
    pub suite: Suite,
    /// All zero on a control connection; the session joined on a data connection.
    pub session: SessionId,
    /// 0 for control; 1.. for data streams.
    pub stream: u16,
    /// How a control connection authenticates; always [`AuthMode::Secret`] on a data connection.
    pub auth: AuthMode,
}

impl ClientHello {
    /// Encode to the fixed wire form.
    pub fn encode(&self) -> [u8; CLIENT_HELLO_LEN] {
        let mut b = [0u8; CLIENT_HELLO_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4..6].copy_from_slice(&PROTOCOL_VERSION.to_be_bytes());
        b[6] = self.kind as u8;
        b[7] = self.suite as u8;
        b[8..24].copy_from_slice(&self.session);
        b[24..26].copy_from_slice(&self.stream.to_be_bytes());
        b[26] = self.auth as u8;
        b
    }

    /// Decode and check magic and version. A version mismatch is reported with both numbers.
    pub fn decode(b: &[u8; CLIENT_HELLO_LEN]) -> Result<ClientHello, ProtoError> {
        check_magic_version(b)?;
        let kind = match b[6] {
            0 => StreamKind::Control,
            1 => StreamKind::Data,
            _ => return Err(ProtoError::Invalid("stream kind")),
        };
        let suite = Suite::from_u8(b[7])?;
        let mut session = [0u8; 16];
        session.copy_from_slice(&b[8..24]);
        let stream = u16::from_be_bytes([b[24], b[25]]);
        let auth = match b[26] {
            0 => AuthMode::Secret,
            1 => AuthMode::PublicKey,
            _ => return Err(ProtoError::Invalid("auth mode")),
        };
        if b[27] != 0 {
            return Err(ProtoError::Invalid("reserved preamble byte"));
        }
        match kind {
            StreamKind::Control if stream != 0 || session != [0; 16] => {
                Err(ProtoError::Invalid("control preamble with a session or stream"))
            }
            StreamKind::Data if stream == 0 => Err(ProtoError::Invalid("data stream index 0")),
            StreamKind::Data if auth != AuthMode::Secret => Err(ProtoError::Invalid("auth mode on a data stream")),
            _ => Ok(ClientHello { kind, suite, session, stream, auth }),
        }
    }
}

/// The server's answer to a preamble: its version and whether it will go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerHello {
    /// The server's protocol version.
    pub version: u16,
    /// 0 to proceed with the handshake, otherwise an [`crate::ErrorCode`].
    pub status: u8,
}

impl ServerHello {
    /// Encode to the fixed wire form.
    pub fn encode(&self) -> [u8; SERVER_HELLO_LEN] {
        let mut b = [0u8; SERVER_HELLO_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4..6].copy_from_slice(&self.version.to_be_bytes());
        b[6] = self.status;
        b
    }

    /// Decode. The version is returned as sent so the client can name both versions.
    pub fn decode(b: &[u8; SERVER_HELLO_LEN]) -> Result<ServerHello, ProtoError> {
        if b[0..4] != MAGIC {
            return Err(ProtoError::BadMagic);
        }
        Ok(ServerHello { version: u16::from_be_bytes([b[4], b[5]]), status: b[6] })
    }
}

fn check_magic_version(b: &[u8]) -> Result<(), ProtoError> {
    if b[0..4] != MAGIC {
        return Err(ProtoError::BadMagic);
    }
    let theirs = u16::from_be_bytes([b[4], b[5]]);
    if theirs != PROTOCOL_VERSION {
        return Err(ProtoError::Version { ours: PROTOCOL_VERSION, theirs });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_hello_round_trips() {
        let h = ClientHello {
            kind: StreamKind::Data,
            suite: Suite::ChaCha20Poly1305,
            session: [7; 16],
            stream: 3,
            auth: AuthMode::Secret,
        };
        assert_eq!(ClientHello::decode(&h.encode()), Ok(h));
    }

    #[test]
    fn client_hello_names_both_versions_on_mismatch() {
        let mut b = ClientHello {
            kind: StreamKind::Control,
            suite: Suite::Aes256Gcm,
            session: [0; 16],
            stream: 0,
            auth: AuthMode::Secret,
        }
        .encode();
        b[4..6].copy_from_slice(&9u16.to_be_bytes());
        assert_eq!(ClientHello::decode(&b), Err(ProtoError::Version { ours: PROTOCOL_VERSION, theirs: 9 }));
        b[0] = b'X';
        assert_eq!(ClientHello::decode(&b), Err(ProtoError::BadMagic));
    }

    #[test]
    fn rejects_inconsistent_preambles() {
        let ok = ClientHello {
            kind: StreamKind::Control,
            suite: Suite::Aes256Gcm,
            session: [0; 16],
            stream: 0,
            auth: AuthMode::Secret,
        };
        let mut b = ok.encode();
        b[24] = 1; // control with a stream index
        assert!(ClientHello::decode(&b).is_err());
        let mut b = ok.encode();
        b[7] = 9; // unknown suite
        assert!(ClientHello::decode(&b).is_err());
        let mut b = ok.encode();
        b[6] = 1; // data stream with index 0
        assert!(ClientHello::decode(&b).is_err());
        let mut b = ok.encode();
        b[27] = 1;
        assert!(ClientHello::decode(&b).is_err());
    }

    #[test]
    fn auth_mode_byte_round_trips_and_unknown_modes_are_refused() {
        let key = ClientHello {
            kind: StreamKind::Control,
            suite: Suite::Aes256Gcm,
            session: [0; 16],
            stream: 0,
            auth: AuthMode::PublicKey,
        };
        let b = key.encode();
        assert_eq!(b[26], 1);
        assert_eq!(ClientHello::decode(&b), Ok(key));
        for mode in 2..=255u8 {
            let mut b = key.encode();
            b[26] = mode;
            assert_eq!(ClientHello::decode(&b), Err(ProtoError::Invalid("auth mode")), "mode {mode}");
        }
        // A data stream is keyed by its session; it has no auth mode of its own.
        let data = ClientHello { kind: StreamKind::Data, session: [1; 16], stream: 1, ..key };
        assert_eq!(ClientHello::decode(&data.encode()), Err(ProtoError::Invalid("auth mode on a data stream")));
    }
}
