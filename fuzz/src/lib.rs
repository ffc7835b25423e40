//! Helpers shared by the fuzz targets and the seed-corpus generator (`examples/gen_corpus.rs`):
//! the fixed keys the crypto targets use, the operation language plus reference model of the
//! `tracker` target, the pull receiver the `pull_receiver` target drives with that model, and the
//! operations and checks of the `remote_bootstrap` target (`remote_model`).

use linerate_proto::hello::{AuthMode, ClientHello, ServerHello, StreamKind, Suite};
use linerate_proto::record::{Binding, Direction};
use linerate_proto::PROTOCOL_VERSION;

/// Fixed record key of the `record_open` target (seeds are sealed with it).
pub const RECORD_KEY: [u8; 32] = [0x42; 32];
/// Fixed session of the `record_open` target.
pub const RECORD_SESSION: [u8; 16] = [7; 16];
/// Fixed stream index of the `record_open` target.
pub const RECORD_STREAM: u16 = 1;

/// Suite and binding of the `record_open` target, chosen by the input's first byte
/// (bit 0: suite, bit 1: direction).
pub fn record_params(selector: u8) -> (Suite, Binding) {
    let suite = if selector & 1 == 0 { Suite::Aes256Gcm } else { Suite::ChaCha20Poly1305 };
    let direction = if selector & 2 == 0 { Direction::ClientToServer } else { Direction::ServerToClient };
    (suite, Binding { session: RECORD_SESSION, stream: RECORD_STREAM, direction })
}

/// Fixed pre-shared key of the `handshake_responder` target.
pub const HANDSHAKE_PSK: [u8; 32] = [0x5a; 32];

/// Suite of the `handshake_responder` target, chosen by bit 0 of the input's first byte.
pub fn handshake_suite(selector: u8) -> Suite {
    if selector & 1 == 0 {
        Suite::Aes256Gcm
    } else {
        Suite::ChaCha20Poly1305
    }
}

/// Fixed prologue of the `handshake_responder` target: a control-connection preamble pair, as
/// the engine builds it.
pub fn handshake_prologue(suite: Suite) -> Vec<u8> {
    let mut p = ClientHello { kind: StreamKind::Control, suite, session: [0; 16], stream: 0, auth: AuthMode::Secret }
        .encode()
        .to_vec();
    p.extend_from_slice(&ServerHello { version: PROTOCOL_VERSION, status: 0 }.encode());
    p
}

pub mod bench_model;
pub mod links_model;
pub mod pull_receiver;
pub mod remote_model;
pub mod tracker_model;
