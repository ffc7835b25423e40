//! Integration tests of the agent and the crates below it, in one binary (one link instead of
//! five): real servers and clients on loopback (copies, pulls, sync, keys, bench tests, hostile
//! peers). `peer` is the shared hostile-peer harness.
#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod bench;
mod copy;
mod hostile;
mod keys;
mod peer;
mod sync;
