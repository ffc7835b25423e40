//! The network layer every linerate session stands on, and what it needs to decide who may do
//! what and how fast.
//!
//! | module | what |
//! |---|---|
//! | [`conn`] | preambles, the Noise handshake and AEAD records over TCP |
//! | [`accept`] | an accept loop that a stop wakes |
//! | [`addr`] | a peer's name read into an address |
//! | [`sockopt`] | the few socket options no safe crate offers |
//! | [`auth`] | shared secrets, ed25519 identities, known hosts, authorized keys |
//! | [`rate`], [`limit`] | pacing, per-client and total caps with a fair share |
//! | [`resources`] | CPU time and peak memory of this process, for reports |
//! | [`proc`] | waiting for a child process to exit with a deadline (a pidfd, no polling) |
//! | [`error`] | [`EngineError`]: what failed, where, and the protocol code it maps to |
//!
//! Protocol rules live in `linerate-proto` (no I/O); this crate and those above it (copy,
//! bench, agent) drive them and perform the I/O.

pub mod accept;
pub mod addr;
pub mod auth;
pub mod conn;
pub mod error;
pub mod limit;
pub mod proc;
pub mod rate;
pub mod resources;
pub mod sockopt;

pub use error::{EngineError, UsageError};
