//! The record layer on arbitrary bytes. Input: one selector byte (suite, direction), then a
//! stream of records `len: u32 BE | ciphertext` opened in order with a fixed key, as the engine
//! reads them. `Opener::record_len` and `Opener::open` must return errors, never panic; opened
//! plaintext is fed to `frame::frames`. The same bytes also go through `Sealer` and back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use linerate_fuzz::{record_params, RECORD_KEY};
use linerate_proto::caps::MAX_RECORD;
use linerate_proto::frame;
use linerate_proto::record::{Opener, Sealer, HEADER_LEN, TAG_LEN};
use linerate_proto::ProtoError;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, mut rest)) = data.split_first() else {
        return;
    };
    let (suite, binding) = record_params(selector);

    // The receive path: header, length check, open, frames.
    let mut opener = Opener::new(suite, &RECORD_KEY, binding).expect("opener");
    while rest.len() >= HEADER_LEN {
        let header: [u8; HEADER_LEN] = rest[..HEADER_LEN].try_into().unwrap();
        rest = &rest[HEADER_LEN..];
        let declared = u32::from_be_bytes(header) as usize;
        let len = match Opener::record_len(header) {
            Ok(len) => {
                assert_eq!(len, declared);
                assert!((TAG_LEN..=MAX_RECORD).contains(&len), "record_len accepted {len}");
                len
            }
            Err(_) => {
                assert!(!(TAG_LEN..=MAX_RECORD).contains(&declared), "record_len refused {declared}");
                break;
            }
        };
        if rest.len() < len {
            break;
        }
        let mut ct = rest[..len].to_vec();
        rest = &rest[len..];
        match opener.open(&mut ct) {
            Ok(pt) => {
                assert_eq!(pt.len(), len - TAG_LEN);
                for f in frame::frames(pt) {
                    if f.is_err() {
                        break;
                    }
                }
            }
            Err(e) => {
                assert_eq!(e, ProtoError::RecordAuth);
                // A failed record ends the connection.
                break;
            }
        }
    }

    // Opening ciphertext of any length, shorter than a tag included, without record_len.
    let mut raw = data[1..].to_vec();
    let mut o = Opener::new(suite, &RECORD_KEY, binding).expect("opener");
    let _ = o.open(&mut raw);
    let _ = o.open(&mut []);

    // Seal the input as plaintext and open it again; a flipped bit must be detected.
    let plain = &data[1..];
    let mut s = Sealer::new(suite, &RECORD_KEY, binding).expect("sealer");
    let mut rec = vec![0u8; HEADER_LEN];
    rec.extend_from_slice(plain);
    s.seal(&mut rec).expect("seal");
    assert_eq!(rec.len(), HEADER_LEN + plain.len() + TAG_LEN);
    let len = Opener::record_len(rec[..HEADER_LEN].try_into().unwrap()).expect("own record length");
    assert_eq!(len, rec.len() - HEADER_LEN);
    let mut bad = rec.clone();
    let mut o = Opener::new(suite, &RECORD_KEY, binding).expect("opener");
    let pt = o.open(&mut rec[HEADER_LEN..]).expect("open own record");
    assert_eq!(pt, plain);
    let bit = usize::from(selector) * 8 + usize::from(selector >> 3);
    let i = HEADER_LEN + bit / 8 % (bad.len() - HEADER_LEN);
    bad[i] ^= 1 << (bit % 8);
    let mut o = Opener::new(suite, &RECORD_KEY, binding).expect("opener");
    assert_eq!(o.open(&mut bad[HEADER_LEN..]), Err(ProtoError::RecordAuth), "flipped bit at {i} not detected");
});
