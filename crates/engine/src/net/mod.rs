//! The network layer of copy sessions: preambles, the Noise handshake and AEAD records over TCP
//! ([`conn`]), and the few socket options no safe crate offers ([`sys`]).

pub mod conn;
pub mod sys;
