//! Public-key authentication of a control connection (daemon mode, issue 5).
//!
//! After an ephemeral-only Noise `NN` handshake, the server proves it holds its host key and the
//! client proves it holds an authorized key, each by an ed25519 signature over a label and the
//! Noise handshake hash (the `HostAuth` and `ClientAuth` frames). The hash covers both preambles
//! and both ephemeral keys, so a signature is worth nothing in any other connection; the labels
//! differ per direction, so the server's signature cannot be reflected back as the client's.
//! This is the shape of TLS 1.3's `CertificateVerify` and of SIGMA. Only verification lives here;
//! signing needs a private key and happens in the engine.

use crate::handshake::KEY_LEN;
use crate::ProtoError;
use ring::signature::{UnparsedPublicKey, ED25519};

/// Length of an ed25519 public key.
pub const PUBLIC_KEY_LEN: usize = 32;
/// Length of an ed25519 signature.
pub const SIGNATURE_LEN: usize = 64;

/// Who signs, which picks the domain-separation label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signer {
    /// The server, with its host key (`HostAuth`).
    Host,
    /// The client, with its identity key (`ClientAuth`).
    Client,
}

impl Signer {
    /// The label prefixed to the handshake hash; NUL-terminated so neither is a prefix of the
    /// other's input.
    pub fn label(self) -> &'static [u8] {
        match self {
            Signer::Host => b"linerate/1 host auth\0",
            Signer::Client => b"linerate/1 client auth\0",
        }
    }
}

/// The exact bytes `signer` signs in the connection whose handshake hash is `hash`.
pub fn signed_message(signer: Signer, hash: &[u8; KEY_LEN]) -> Vec<u8> {
    let label = signer.label();
    let mut m = Vec::with_capacity(label.len() + hash.len());
    m.extend_from_slice(label);
    m.extend_from_slice(hash);
    m
}

/// Check `signature` by `key` over [`signed_message`]. Any failure is [`ProtoError::Auth`].
pub fn verify(
    signer: Signer,
    key: &[u8; PUBLIC_KEY_LEN],
    signature: &[u8; SIGNATURE_LEN],
    hash: &[u8; KEY_LEN],
) -> Result<(), ProtoError> {
    UnparsedPublicKey::new(&ED25519, key).verify(&signed_message(signer, hash), signature).map_err(|_| ProtoError::Auth)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::rand::SystemRandom;
    use ring::signature::{Ed25519KeyPair, KeyPair};

    fn pair() -> Ed25519KeyPair {
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
        Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap()
    }

    fn sign(k: &Ed25519KeyPair, who: Signer, hash: &[u8; 32]) -> ([u8; 32], [u8; 64]) {
        let key = k.public_key().as_ref().try_into().unwrap();
        let sig = k.sign(&signed_message(who, hash)).as_ref().try_into().unwrap();
        (key, sig)
    }

    #[test]
    fn a_signature_verifies_only_for_its_key_direction_and_session() {
        let k = pair();
        let (key, sig) = sign(&k, Signer::Host, &[7; 32]);
        assert_eq!(verify(Signer::Host, &key, &sig, &[7; 32]), Ok(()));
        // another session's hash
        assert_eq!(verify(Signer::Host, &key, &sig, &[8; 32]), Err(ProtoError::Auth));
        // reflected: the host's signature presented as the client's
        assert_eq!(verify(Signer::Client, &key, &sig, &[7; 32]), Err(ProtoError::Auth));
        // another key claiming it
        let (other, _) = sign(&pair(), Signer::Host, &[7; 32]);
        assert_eq!(verify(Signer::Host, &other, &sig, &[7; 32]), Err(ProtoError::Auth));
        // a flipped bit
        let mut bad = sig;
        bad[10] ^= 1;
        assert_eq!(verify(Signer::Host, &key, &bad, &[7; 32]), Err(ProtoError::Auth));
    }

    #[test]
    fn hostile_keys_and_signatures_fail_without_panicking() {
        // Degenerate encodings must not panic. (A small-order key such as all zeros can pass
        // verification for some messages: such a key is only ever trusted when it is listed in
        // authorized_keys or known_hosts, which no generated key is; see SECURITY.md.)
        for key in [[0u8; 32], [0xff; 32], [0x80; 32]] {
            for sig in [[0u8; 64], [0xff; 64]] {
                let _ = verify(Signer::Client, &key, &sig, &[0; 32]);
            }
        }
        let (key, _) = sign(&pair(), Signer::Client, &[0; 32]);
        for sig in [[0u8; 64], [0xff; 64]] {
            assert_eq!(verify(Signer::Client, &key, &sig, &[0; 32]), Err(ProtoError::Auth));
        }
        assert_eq!(verify(Signer::Client, &[0xff; 32], &[0; 64], &[0; 32]), Err(ProtoError::Auth));
    }

    #[test]
    fn labels_differ_and_neither_prefixes_the_other() {
        let (h, c) = (Signer::Host.label(), Signer::Client.label());
        assert!(!h.starts_with(c) && !c.starts_with(h));
    }
}
