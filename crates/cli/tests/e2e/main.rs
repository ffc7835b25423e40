//! linerate's end-to-end tests, one binary: the real `linerate` driven as a user drives it.
//! Each module is one area; `support` holds what they share (incompressible data, the root
//! check, the two-namespace ssh lab). Root-only tests fail loudly without root unless
//! `LINERATE_SKIP_ROOT_TESTS=1` says to skip them; `.ci/run` runs them as root.
#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod cli;
mod daemon;
mod doctor;
mod emu;
mod exit_codes;
mod faults;
mod generate;
mod lab;
mod links;
mod mesh;
mod metrics;
mod report;
mod rerun;
mod ssh;
mod support;
