//! linerate's end-to-end tests, one binary: the real `linerate` driven as a user drives it.
//! Each module is one area; `support` holds what they share (incompressible data, the root
//! check, the two-namespace ssh lab). Root-only tests are `#[ignore = "needs root"]`: a plain
//! `cargo test` lists them as ignored; `.ci/run` runs them as root with `--include-ignored`;
//! run so without root they fail saying so (`support::require_root`). No test touches
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
/// too), and overridden by a test's own `--db` or `LINERATE_DB`. Likewise every temporary file
/// and directory (`tempfile::tempdir()`, `std::env::temp_dir()`) of these tests and of the
/// programs they start goes beneath it, in [`temp_dir`], never in the system's temp directory
/// (issue 42: an empty `.tmpXXXXXX` was left there).
// `unsafe`: a constructor runs before `main`, where the standard library is only partly set up;
// this one only makes a directory and sets two variables, before any thread exists.
#[allow(unsafe_code)]
#[ctor::ctor]
unsafe fn isolate_the_run_store() {
    let store = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("runs-{}.sqlite", std::process::id()));
    std::env::set_var("LINERATE_DB", store);
    let tmp = temp_dir();
    // Sticky and open to all, as /tmp: some tests run linerate as user nobody.
    if std::fs::create_dir_all(&tmp)
        .and_then(|()| std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o1777)))
        .is_ok()
    {
        std::env::set_var("TMPDIR", &tmp);
    }
}

/// This test process's temporary directory: `target/tmp/e2e-<pid>`.
fn temp_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("e2e-{}", std::process::id()))
}

/// At exit the temporary directory goes if the tests left it empty, as they should; anything
/// left in it stays beneath target/ to be looked at, and is named here.
#[ctor::dtor]
fn remove_the_temp_dir_when_empty() {
    let tmp = temp_dir();
    if std::fs::remove_dir(&tmp).is_err() && tmp.exists() {
        let left: Vec<_> = std::fs::read_dir(&tmp).into_iter().flatten().flatten().map(|e| e.file_name()).collect();
        eprintln!("warning: the tests left {left:?} in {}", tmp.display());
    }
}
