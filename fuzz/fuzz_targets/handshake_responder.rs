//! The responder side of the Noise handshake reading arbitrary bytes, with a fixed psk and
//! prologue. Input: one selector byte (suite), then the initiator's message. `read` must fail
//! with `Auth` (or `TooLong` past `MAX_HANDSHAKE_MSG`) and never panic; a message that does
//! authenticate must lead to a normal answer and key schedule.
#![no_main]

use libfuzzer_sys::fuzz_target;
use linerate_fuzz::{handshake_prologue, handshake_suite, HANDSHAKE_PSK};
use linerate_proto::caps::MAX_HANDSHAKE_MSG;
use linerate_proto::handshake::{Handshake, Role};
use linerate_proto::ProtoError;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, msg)) = data.split_first() else {
        return;
    };
    let suite = handshake_suite(selector);
    let prologue = handshake_prologue(suite);
    let mut r = Handshake::new(Role::Responder, suite, &HANDSHAKE_PSK, &prologue).expect("responder");
    assert_eq!(r.role(), Role::Responder);
    match r.read(msg) {
        Ok(payload) => {
            assert!(msg.len() <= MAX_HANDSHAKE_MSG);
            assert!(payload.len() <= msg.len());
            assert!(!r.is_finished());
            let answer = r.write(b"session-id").expect("responder answer");
            assert!(!answer.is_empty());
            assert!(r.is_finished());
            // The handshake is over: any further message is refused.
            assert!(r.read(msg).is_err());
            let keys = r.finish().expect("key schedule");
            assert_ne!(keys.initiator_to_responder, keys.responder_to_initiator);
        }
        Err(ProtoError::TooLong { .. }) => assert!(msg.len() > MAX_HANDSHAKE_MSG),
        Err(ProtoError::Auth) => {
            assert!(!r.is_finished());
            // A caller that ignores the failure and goes on must get errors, not panics.
            let _ = r.read(msg);
            let _ = r.write(b"x");
            assert!(r.finish().is_err());
        }
        Err(e) => panic!("unexpected handshake error {e:?}"),
    }
});
