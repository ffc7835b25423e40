//! The linerate engine: everything that touches sockets and files.
//!
//! [`conn`] runs the protocol's handshake and record layer over TCP; [`send`] walks source trees
//! and pushes them over parallel streams; [`recv`] writes what arrives, confined beneath the
//! destination by directory handles; [`server`] is the `serve` daemon that accepts sessions from
//! many clients at once; [`keys`] and [`authorized`] hold daemon mode's ed25519 keys, known
//! hosts and authorized keys. Protocol rules live in `linerate-proto`; this crate only performs I/O.

pub mod authorized;
pub mod bench;
pub mod compare;
pub mod conn;
pub mod cpu;
pub mod digest;
pub mod doctor;
pub mod error;
pub mod fsx;
pub mod host;
pub mod journal;
pub mod keys;
pub mod limit;
pub mod pull;
pub mod rate;
pub mod recv;
pub mod remote;
pub mod sample;
pub mod sched;
pub mod secret;
pub mod send;
pub mod server;
pub mod sys;
pub mod walk;

pub use error::EngineError;
