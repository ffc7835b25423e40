//! linerate's end-to-end tests, one binary: the real `linerate` driven as a user drives it.
//! Each module is one area; `support` holds what they share (incompressible data, the root
//! check, the two-namespace ssh lab). Root-only tests fail loudly without root unless
//! `LINERATE_SKIP_ROOT_TESTS=1` says to skip them; `.ci/run` runs them as root. No test touches
//! the user's own run store: see [`isolate_the_run_store`].
#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod cli;
mod converge;
mod daemon;
mod doctor;
mod emu;
mod exit_codes;
mod failonce;
mod faults;
mod filter;
mod generate;
mod lab;
mod links;
mod mesh;
mod meta;
mod metrics;
mod pipes;
mod provision;
mod report;
mod rerun;
mod ssh;
mod support;
mod workfiles;

/// Every `linerate` these tests start saves its runs in this test process's own store beneath
/// cargo's target directory, never in the user's (`~/.local/share/linerate/runs.sqlite`): set
/// before the harness starts any thread, inherited by every child (through `ip netns exec`
/// too), and overridden by a test's own `--db` or `LINERATE_DB`.
// `unsafe`: a constructor runs before `main`, where the standard library is only partly set up;
// this one only sets one variable, before any thread exists.
#[allow(unsafe_code)]
#[ctor::ctor]
unsafe fn isolate_the_run_store() {
    let store = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("runs-{}.sqlite", std::process::id()));
    std::env::set_var("LINERATE_DB", store);
}
