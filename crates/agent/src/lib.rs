//! The agent: `linerate serve`, the daemon that answers copies, bench tests and mesh requests.
//!
//! | module | what |
//! |---|---|
//! | [`server`] | the `serve` daemon: many sessions at once, caps, deadlines, shutdown |
//! | [`mesh`] | mesh sessions: an agent running a test against another on a controller's request |
//! | [`metrics`] | the agent's counters, and `serve --metrics` (Prometheus text format) |
//! | [`log`] | `serve`'s log lines: RFC 3339 time stamps, text or JSON |
//! | [`serve`] | `serve`'s flags on their way in (networks, port ranges) and its startup and stop lines |
//!
//! It puts together the crates below it: `linerate-copy` (a copy's two sides),
//! `linerate-bench` (the agent's side of a test) and `linerate-net` (connections, keys, caps).

pub mod log;
pub mod mesh;
pub mod metrics;
pub mod serve;
pub mod server;
