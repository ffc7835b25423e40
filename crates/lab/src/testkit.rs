//! What the lab's tests share, in this crate and in the CLI's end-to-end tests: the scenario
//! fixture, the check that a run left nothing behind, the root-only rule, and a recording
//! executor a test can read after the lab took it. Behind the `testkit` feature, enabled only
//! through `[dev-dependencies]`, so none of it ships.
#![allow(clippy::unwrap_used, clippy::missing_panics_doc)] // test helpers fail loudly by design

use crate::exec::{Executor, Job, Process, RecordingExecutor};
use crate::LabError;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

pub use linerate_model::testkit::require_root;

/// The fixture: hosts `a` and `b` on one 1 Gbit/s link `a-b`. The text ends inside the
/// `[[link]]` table, so a test appends the link's other keys, then its `[[run]]`s.
pub const TWO_HOSTS: &str = r#"name = "two"
[[host]]
name = "a"
[[host]]
name = "b"
[[link]]
a = "a"
b = "b"
rate = "1gbit"
"#;

/// The fixture's hosts and link with the link's keys `link` in place of its rate (each line
/// ending in a newline); [`TWO_HOSTS`] is `two_hosts("rate = \"1gbit\"\n")`.
pub fn two_hosts(link: &str) -> String {
    let bare = TWO_HOSTS.strip_suffix("rate = \"1gbit\"\n").expect("the fixture ends with its rate");
    format!("{bare}{link}")
}

/// A `[[run]]` of iperf3 from `a` to `b` for `seconds`.
pub fn iperf3_run(seconds: u32) -> String {
    format!("[[run]]\ntool = \"iperf3\"\nhost = \"a\"\nserver = \"b\"\nseconds = {seconds}\n")
}

/// `text` written to `s.toml` in a fresh directory (kept while the returned guard lives).
pub fn write_scenario(text: &str) -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("s.toml");
    std::fs::write(&f, text).unwrap();
    (d, f)
}

/// [`require_root`] for a test that builds real labs, and the tools they use (iproute2,
/// iperf3, ping: `.ci/run` installs them).
pub fn require_lab(what: &str) {
    require_root(what);
    for p in ["ip", "tc", "iperf3", "ping"] {
        assert!(
            Command::new(p).arg("-V").output().is_ok(),
            "{p} is missing: install iproute2, iperf3 and iputils-ping (.ci/run does)"
        );
    }
}

/// Nothing of run `id` remains: no namespace, no interface in this namespace, no state file,
/// no process whose command line names it.
pub fn assert_clean(id: &str) {
    let ns: Vec<String> = std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(id))
        .collect();
    assert!(ns.is_empty(), "namespaces left behind: {ns:?}");
    let list = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&list.stdout).contains(id), "namespaces left behind");
    let links = Command::new("ip").args(["-o", "link"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&links.stdout).contains(id), "links left behind");
    assert!(!crate::state::state_dir().join(format!("{id}.json")).exists(), "state file left behind");
    let ps = Command::new("ps").args(["-eo", "args"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&ps.stdout).contains(id), "a process of {id} is still running");
}

/// One state directory for every test of a process that builds labs through a recording
/// executor (the variable is process-wide: tests that each set their own would race).
pub fn private_state_dir() -> &'static Path {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let d = tempfile::tempdir().expect("a temporary directory for lab state files");
        std::env::set_var("LINERATE_LAB_DIR", d.path());
        d
    })
    .path()
}

/// A [`RecordingExecutor`] a test still reads after the lab took it.
#[derive(Debug, Clone, Default)]
pub struct SharedRecorder(pub Arc<Mutex<RecordingExecutor>>);

impl SharedRecorder {
    /// Shares `rec`.
    pub fn new(rec: RecordingExecutor) -> SharedRecorder {
        SharedRecorder(Arc::new(Mutex::new(rec)))
    }

    /// What was recorded so far.
    pub fn rec(&self) -> MutexGuard<'_, RecordingExecutor> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Executor for SharedRecorder {
    fn run(&mut self, argv: &[String]) -> Result<String, LabError> {
        self.rec().run(argv)
    }
    fn spawn(&mut self, job: &Job) -> Result<Box<dyn Process>, LabError> {
        self.rec().spawn(job)
    }
    fn wait_listening(&mut self, pid: u32, port: u16, limit: Duration) -> bool {
        self.rec().wait_listening(pid, port, limit)
    }
    fn wait_path(&mut self, pid: u32, path: &Path, limit: Duration) -> bool {
        self.rec().wait_path(pid, path, limit)
    }
    fn stop(&mut self, pid: u32, start: u64, grace: Duration) {
        self.rec().stop(pid, start, grace)
    }
    fn find_program(&mut self, names: &[&str]) -> Option<PathBuf> {
        self.rec().find_program(names)
    }
    fn busy_cpu_s(&mut self) -> Option<f64> {
        self.rec().busy_cpu_s()
    }
}
