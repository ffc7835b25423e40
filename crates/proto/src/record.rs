//! The record layer: every byte after the handshake travels in AEAD records.
//!
//! Wire form: `len: u32 BE` then `len` bytes of ciphertext with a 16-byte tag. The nonce is the
//! per-direction record sequence number, so a dropped, replayed or reordered record fails to
//! open; the AAD binds protocol version, session, stream index, direction and the length, so a
//! record spliced in from another stream, session or direction fails to open too.

use crate::caps::MAX_RECORD;
use crate::hello::{SessionId, Suite, MAGIC};
use crate::{ProtoError, PROTOCOL_VERSION};
use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};

/// Bytes of the length header in front of every record.
pub const HEADER_LEN: usize = 4;
/// Bytes of the AEAD tag at the end of every record.
pub const TAG_LEN: usize = 16;
const AAD_LEN: usize = 4 + 2 + 16 + 2 + 1 + 4;

/// Which way a record travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From the connecting client to the server.
    ClientToServer = 0,
    /// From the server to the client.
    ServerToClient = 1,
}

/// What a record is bound to besides its key.
#[derive(Debug, Clone, Copy)]
pub struct Binding {
    /// The session (all zero only before the server has named it, never for records).
    pub session: SessionId,
    /// The stream index (0 for control).
    pub stream: u16,
    /// The direction.
    pub direction: Direction,
}

struct Cipher {
    key: LessSafeKey,
    seq: u64,
    aad: [u8; AAD_LEN],
}

impl Cipher {
    fn new(suite: Suite, key: &[u8; 32], b: Binding) -> Result<Cipher, ProtoError> {
        let alg = match suite {
            Suite::Aes256Gcm => &aead::AES_256_GCM,
            Suite::ChaCha20Poly1305 => &aead::CHACHA20_POLY1305,
        };
        let key = UnboundKey::new(alg, key).map_err(|_| ProtoError::Invalid("record key"))?;
        let mut aad = [0u8; AAD_LEN];
        aad[0..4].copy_from_slice(&MAGIC);
        aad[4..6].copy_from_slice(&PROTOCOL_VERSION.to_be_bytes());
        aad[6..22].copy_from_slice(&b.session);
        aad[22..24].copy_from_slice(&b.stream.to_be_bytes());
        aad[24] = b.direction as u8;
        Ok(Cipher { key: LessSafeKey::new(key), seq: 0, aad })
    }

    fn next(&mut self, len: u32) -> Result<(Nonce, [u8; AAD_LEN]), ProtoError> {
        if self.seq == u64::MAX {
            return Err(ProtoError::SequenceExhausted);
        }
        let mut n = [0u8; 12];
        n[4..].copy_from_slice(&self.seq.to_be_bytes());
        self.seq += 1;
        let mut aad = self.aad;
        aad[25..29].copy_from_slice(&len.to_be_bytes());
        Ok((Nonce::assume_unique_for_key(n), aad))
    }
}

/// Seals outgoing records.
pub struct Sealer(Cipher);

impl Sealer {
    /// A sealer for one direction of one connection.
    pub fn new(suite: Suite, key: &[u8; 32], binding: Binding) -> Result<Sealer, ProtoError> {
        Cipher::new(suite, key, binding).map(Sealer)
    }

    /// `buf` holds [`HEADER_LEN`] reserved bytes followed by the plaintext. On return it holds the
    /// complete wire record: header, ciphertext, tag.
    pub fn seal(&mut self, buf: &mut Vec<u8>) -> Result<(), ProtoError> {
        if buf.len() < HEADER_LEN {
            return Err(ProtoError::Invalid("record buffer without header room"));
        }
        let ct_len = buf.len() - HEADER_LEN + TAG_LEN;
        if ct_len > MAX_RECORD {
            return Err(ProtoError::TooLong { what: "record", len: ct_len as u64, cap: MAX_RECORD as u64 });
        }
        let len = ct_len as u32;
        let (nonce, aad) = self.0.next(len)?;
        let tag = self
            .0
            .key
            .seal_in_place_separate_tag(nonce, Aad::from(aad), &mut buf[HEADER_LEN..])
            .map_err(|_| ProtoError::Invalid("seal"))?;
        buf.extend_from_slice(tag.as_ref());
        buf[..HEADER_LEN].copy_from_slice(&len.to_be_bytes());
        Ok(())
    }
}

/// Opens incoming records, in order.
pub struct Opener(Cipher);

impl Opener {
    /// An opener for one direction of one connection.
    pub fn new(suite: Suite, key: &[u8; 32], binding: Binding) -> Result<Opener, ProtoError> {
        Cipher::new(suite, key, binding).map(Opener)
    }

    /// Parse a record header into the number of ciphertext bytes that follow, refusing lengths
    /// over [`MAX_RECORD`] or too short to hold a tag before anything is allocated or read.
    pub fn record_len(header: [u8; HEADER_LEN]) -> Result<usize, ProtoError> {
        let len = u32::from_be_bytes(header) as usize;
        if len > MAX_RECORD {
            return Err(ProtoError::TooLong { what: "record", len: len as u64, cap: MAX_RECORD as u64 });
        }
        if len < TAG_LEN {
            return Err(ProtoError::Truncated("record shorter than its tag"));
        }
        Ok(len)
    }

    /// Decrypt one record's ciphertext (exactly the bytes after its header) in place and return
    /// the plaintext.
    pub fn open<'a>(&mut self, ct: &'a mut [u8]) -> Result<&'a mut [u8], ProtoError> {
        let len = u32::try_from(ct.len()).map_err(|_| ProtoError::Invalid("record length"))?;
        let (nonce, aad) = self.0.next(len)?;
        self.0.key.open_in_place(nonce, Aad::from(aad), ct).map_err(|_| ProtoError::RecordAuth)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(stream: u16) -> Binding {
        Binding { session: [9; 16], stream, direction: Direction::ClientToServer }
    }

    fn sealed(s: &mut Sealer, msg: &[u8]) -> Vec<u8> {
        let mut buf = vec![0u8; HEADER_LEN];
        buf.extend_from_slice(msg);
        s.seal(&mut buf).unwrap();
        buf
    }

    fn open(o: &mut Opener, rec: &[u8]) -> Result<Vec<u8>, ProtoError> {
        let len = Opener::record_len(rec[..4].try_into().unwrap())?;
        let mut ct = rec[4..4 + len].to_vec();
        o.open(&mut ct).map(|p| p.to_vec())
    }

    #[test]
    fn records_round_trip_in_order_for_both_suites() {
        for suite in [Suite::Aes256Gcm, Suite::ChaCha20Poly1305] {
            let mut s = Sealer::new(suite, &[3; 32], binding(1)).unwrap();
            let mut o = Opener::new(suite, &[3; 32], binding(1)).unwrap();
            for m in [&b"first"[..], b"", b"third"] {
                assert_eq!(open(&mut o, &sealed(&mut s, m)).unwrap(), m);
            }
        }
    }

    #[test]
    fn replayed_reordered_and_dropped_records_fail() {
        let mut s = Sealer::new(Suite::Aes256Gcm, &[3; 32], binding(1)).unwrap();
        let r0 = sealed(&mut s, b"zero");
        let r1 = sealed(&mut s, b"one");
        let mut o = Opener::new(Suite::Aes256Gcm, &[3; 32], binding(1)).unwrap();
        assert_eq!(open(&mut o, &r1), Err(ProtoError::RecordAuth)); // reordered / dropped r0
        let mut o = Opener::new(Suite::Aes256Gcm, &[3; 32], binding(1)).unwrap();
        open(&mut o, &r0).unwrap();
        assert_eq!(open(&mut o, &r0), Err(ProtoError::RecordAuth)); // replayed
    }

    #[test]
    fn spliced_records_from_another_stream_fail() {
        let mut s = Sealer::new(Suite::Aes256Gcm, &[3; 32], binding(2)).unwrap();
        let mut o = Opener::new(Suite::Aes256Gcm, &[3; 32], binding(1)).unwrap();
        assert_eq!(open(&mut o, &sealed(&mut s, b"x")), Err(ProtoError::RecordAuth));
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        let mut s = Sealer::new(Suite::Aes256Gcm, &[3; 32], binding(1)).unwrap();
        let rec = sealed(&mut s, b"payload bytes");
        for i in 4..rec.len() {
            let mut bad = rec.clone();
            bad[i] ^= 0x10;
            let mut o = Opener::new(Suite::Aes256Gcm, &[3; 32], binding(1)).unwrap();
            assert_eq!(open(&mut o, &bad), Err(ProtoError::RecordAuth), "offset {i}");
        }
    }

    #[test]
    fn record_length_caps_apply_before_reading() {
        assert!(matches!(Opener::record_len(u32::MAX.to_be_bytes()), Err(ProtoError::TooLong { .. })));
        assert!(matches!(Opener::record_len(((MAX_RECORD + 1) as u32).to_be_bytes()), Err(ProtoError::TooLong { .. })));
        assert_eq!(Opener::record_len((MAX_RECORD as u32).to_be_bytes()), Ok(MAX_RECORD));
        assert!(Opener::record_len(0u32.to_be_bytes()).is_err());
        assert!(Opener::record_len(15u32.to_be_bytes()).is_err());
    }
}
