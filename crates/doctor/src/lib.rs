//! `linerate doctor`: what will limit a transfer, found before anyone benchmarks. [`host`] reads
//! this machine (CPU, NICs, PCIe links, queues and interrupts, offloads, qdiscs, TCP settings)
//! and the path to a peer (RTT, path MTU); [`mod@analyze`] turns those facts into findings with a
//! severity and a concrete fix, and a verdict: the expected ceiling and what sets it; [`text`]
//! renders that report for a terminal. It uses nothing of the engine: a rate probe against a
//! peer comes in through [`analyze::RateProbe`].

pub mod analyze;
pub mod host;
pub mod text;

pub use analyze::*;
