//! `frame::decode` and `frame::frames` on arbitrary bytes: no panic, consumed lengths add up,
//! and every decoded frame re-encodes to the exact bytes it came from and decodes back equal;
//! a mesh request's document decodes and is checked against an agent's caps without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use linerate_proto::frame::{self, encode_chunk_header, Frame, FRAME_HEADER_LEN};
use linerate_proto::ErrorCode;

fn round_trip(f: &Frame<'_>, original: &[u8]) {
    let mut buf = Vec::new();
    f.encode(&mut buf);
    let (back, used) = frame::decode(&buf).unwrap_or_else(|e| panic!("re-encoded {f:?} does not decode: {e}"));
    assert_eq!(used, buf.len(), "re-encoded frame not consumed whole");
    assert_eq!(&back, f, "frame changed across encode/decode");
    assert_eq!(buf, original, "re-encoding differs from the decoded bytes");
    if let Frame::Chunk(c) = f {
        let mut h = Vec::new();
        encode_chunk_header(&mut h, c.file, c.offset, c.data.len());
        assert_eq!(h[..], buf[..frame::CHUNK_HEADER_LEN], "encode_chunk_header");
    }
}

fuzz_target!(|data: &[u8]| {
    match frame::decode(data) {
        Ok((f, used)) => {
            assert!(used >= FRAME_HEADER_LEN && used <= data.len(), "used {used} of {}", data.len());
            round_trip(&f, &data[..used]);
            if let Frame::MeshRequest(doc) = f {
                use linerate_proto::bench::{decode_doc, Limits};
                if let Ok(t) = decode_doc::<linerate_proto::mesh::MeshTask>(doc, "mesh task") {
                    let _ = t.validate(&Limits::default());
                }
            }
        }
        Err(e) => {
            // Mapping an error to its wire code must not panic either.
            let _ = ErrorCode::from_u16(e.code() as u16).describe();
            let _ = e.to_string();
        }
    }

    let mut it = frame::frames(data);
    let mut consumed = 0usize;
    let mut count = 0usize;
    loop {
        match it.next() {
            None => {
                assert_eq!(consumed, data.len(), "frames() stopped early without an error");
                break;
            }
            Some(Ok(f)) => {
                let mut buf = Vec::new();
                f.encode(&mut buf);
                let end = consumed + buf.len();
                assert!(end <= data.len(), "frame runs past the input");
                round_trip(&f, &data[consumed..end]);
                consumed = end;
                count += 1;
                assert!(count * FRAME_HEADER_LEN <= data.len(), "more frames than headers fit");
            }
            Some(Err(_)) => {
                assert!(it.next().is_none(), "frames() goes on after an error");
                break;
            }
        }
    }
});
