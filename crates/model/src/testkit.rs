//! What the workspace's tests share across crates, behind the `testkit` feature (enabled only
//! through `[dev-dependencies]`, so none of it ships): the one root-only rule, and a bounded
//! wait for a child process.

/// The one rule for a test that needs root (network namespaces, mounts, owners, a PostgreSQL
/// run as its own user): it is `#[ignore = "needs root"]`, so a plain `cargo test` lists it as
/// ignored, never `ok`; `.ci/run`, which runs as root, runs it with `-- --include-ignored`; and
/// run so without root, it fails here, saying what needs root. Call it first in such a test.
pub fn require_root(what: &str) {
    assert!(
        rustix::process::geteuid().is_root(),
        "{what} needs root: run the tests as root with `cargo test -- --include-ignored` (.ci/run does), \
         or leave out --include-ignored so this test is listed as ignored"
    );
}

/// How `child` exited, if it did within `limit` (a bound that only guards against a hang); past
/// it the child is killed (by its pid) and reaped, and `None` returned. Waits on the child
/// itself (waitpid in a scoped thread), never by polling.
pub fn exit_within(child: &mut std::process::Child, limit: std::time::Duration) -> Option<std::process::ExitStatus> {
    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id()).ok()?)?;
    // `Child::wait` closes stdin first; a child whose stdin is its peer must not see that.
    let stdin = child.stdin.take();
    let status = std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::channel();
        let waiting = &mut *child;
        s.spawn(move || {
            let _ = tx.send(waiting.wait());
        });
        match rx.recv_timeout(limit) {
            Ok(r) => r.ok(),
            Err(_) => {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                let _ = rx.recv();
                None
            }
        }
    });
    child.stdin = stdin;
    status
}
