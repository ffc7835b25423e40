//! What the workspace's tests share across crates, behind the `testkit` feature (enabled only
//! through `[dev-dependencies]`, so none of it ships): the one root-only rule, a bounded wait
//! for a child process, and the one polling wait, for state that has no event to await.

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

/// Whether `cond` became true within `limit` (a bound that only guards against a hang). Asked
/// again after a pause that starts at 1 ms and doubles up to 100 ms. The one polling wait of the
/// tests, for state another thread or process changes without an event to await (a server's
/// count of sessions, a process's descriptors, what Prometheus has scraped, an emulator's
/// counters, a listener closed); everything that can be awaited is (a read, a child's exit
/// through [`exit_within`], a pidfd, inotify).
pub fn eventually(limit: std::time::Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + limit;
    let mut pause = std::time::Duration::from_millis(1);
    while !cond() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return false;
        }
        std::thread::sleep(pause.min(left));
        pause = (pause * 2).min(std::time::Duration::from_millis(100));
    }
    true
}
