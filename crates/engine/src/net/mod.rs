//! The network layer of copy sessions: preambles, the Noise handshake and AEAD records over TCP
//! ([`conn`]), the few socket options no safe crate offers ([`sys`]), and an accept loop that a
//! stop wakes ([`accept`]), and a peer's name read into an address ([`addr`]).

pub mod accept;
pub mod addr;
pub mod conn;
pub mod sys;
