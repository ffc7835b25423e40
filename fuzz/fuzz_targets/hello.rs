//! `ClientHello::decode` (first 28 bytes, zero-padded) and `ServerHello::decode` (first 8):
//! no panic; an accepted preamble is consistent and re-encodes to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use linerate_proto::hello::{ClientHello, ServerHello, StreamKind, Suite, CLIENT_HELLO_LEN, MAGIC, SERVER_HELLO_LEN};
use linerate_proto::{ProtoError, PROTOCOL_VERSION};

fn padded<const N: usize>(data: &[u8]) -> [u8; N] {
    let mut b = [0u8; N];
    let n = data.len().min(N);
    b[..n].copy_from_slice(&data[..n]);
    b
}

fuzz_target!(|data: &[u8]| {
    let b: [u8; CLIENT_HELLO_LEN] = padded(data);
    match ClientHello::decode(&b) {
        Ok(h) => {
            assert_eq!(h.encode(), b, "client hello does not re-encode to its bytes");
            match h.kind {
                StreamKind::Control => assert!(h.stream == 0 && h.session == [0; 16]),
                StreamKind::Data => assert_ne!(h.stream, 0),
            }
            assert_eq!(Suite::from_u8(h.suite as u8), Ok(h.suite));
            let _ = (h.suite.noise_params(), h.suite.name());
        }
        Err(ProtoError::BadMagic) => assert_ne!(b[..4], MAGIC),
        Err(ProtoError::Version { ours, theirs }) => {
            assert_eq!(ours, PROTOCOL_VERSION);
            assert_ne!(theirs, PROTOCOL_VERSION);
        }
        Err(ProtoError::Invalid(_)) => {}
        Err(e) => panic!("unexpected client hello error {e:?}"),
    }

    let s: [u8; SERVER_HELLO_LEN] = padded(data);
    match ServerHello::decode(&s) {
        Ok(h) => {
            let e = h.encode();
            assert_eq!(e[..7], s[..7], "server hello does not re-encode to its bytes");
        }
        Err(ProtoError::BadMagic) => assert_ne!(s[..4], MAGIC),
        Err(e) => panic!("unexpected server hello error {e:?}"),
    }
});
