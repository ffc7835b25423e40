//! What the workspace's tests share across crates, behind the `testkit` feature (enabled only
//! through `[dev-dependencies]`, so none of it ships): the one root-only rule.

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
