//! The linerate engine: everything that touches sockets and files, in folders by subsystem.
//!
//! | module | what |
//! |---|---|
//! | [`net`] | the handshake and AEAD record layer over TCP, socket options |
//! | [`auth`] | shared secrets, ed25519 identities, known hosts, authorized keys |
//! | [`copy`] | sending and receiving trees (`copy::send`, `copy::recv`, `copy::pull`) and what they share |
//! | [`server`] | the `serve` daemon: many sessions at once, caps, deadlines, shutdown |
//! | [`ssh`] | `cp --via-ssh`: the copy's streams through channels of an ssh connection |
//! | [`rate`], [`limit`] | pacing, per-client and total caps with a fair share |
//! | [`mod@bench`] | the benchmark client, agent and traffic generators |
//! | [`mesh`] | mesh sessions: an agent running a test against another on a controller's request |
//! | [`metrics`] | the agent's counters, and `serve --metrics` (Prometheus text format) |
//! | [`log`] | `serve`'s log lines: RFC 3339 time stamps, text or JSON |
//! | [`usage`] | CPU time and peak memory of this process, for reports |
//! | [`proc`] | waiting for a child process to exit with a deadline (a pidfd, no polling) |
//!
//! Protocol rules live in `linerate-proto` (no I/O); this crate drives them and performs the I/O.

pub mod auth;
pub mod bench;
pub mod copy;
pub mod error;
pub mod limit;
pub mod log;
pub mod mesh;
pub mod metrics;
pub mod net;
pub mod proc;
pub mod rate;
pub mod server;
pub mod ssh;
pub mod usage;

pub use error::EngineError;
/// The one way to stop a loop: a [`shutdown::Stopper`] and the [`shutdown::Shutdown`]s it closes.
pub use linerate_model::shutdown;
