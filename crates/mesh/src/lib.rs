//! `linerate mesh`: every pair of a fleet's agents measured on a schedule, as perfSONAR's
//! pScheduler does it — never two throughput tests on one agent at once, never a latency test
//! beside a throughput test on its agents (unless asked "under load"), synchronised
//! starts, retries with backoff for an agent that cannot be reached.
//!
//! [`inventory`] reads what to measure; [`schedule`] is the scheduler, without I/O; [`round`]
//! runs a round through the [`round::Agents`] boundary, [`controller`] round after round;
//! [`report`] makes it a stored run; [`text`] is what the CLI prints of it.

pub mod controller;
pub mod inventory;
pub mod report;
pub mod round;
pub mod schedule;
pub mod text;
