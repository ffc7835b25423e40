//! linerate lab: emulated hosts (network namespaces), links (veth pairs shaped by tbf/htb and
//! netem), switches (Linux bridges), several NICs per host and QoS classes (htb, ingress through
//! ifb), built with the `ip`/`tc` commands of iproute2 from a TOML scenario; and a runner that
//! measures iperf3, scp, rsync, tar over ssh, rclone over sftp, `linerate cp` (to and from its
//! daemon, and over ssh) and `linerate bench` inside it.
//!
//! Every run has a short id; everything it creates lives in namespaces named after that id and
//! is listed in a state file, so it is removed on `down`, on error, on a signal, and by the next
//! `up` if the owning process died.

pub mod emu;
pub mod exec;
pub mod lab;
pub mod plan;
pub mod runner;
pub mod scenario;
pub mod state;

pub use exec::{Executor, RecordingExecutor, SystemExecutor};
pub use lab::Lab;
pub use plan::Plan;
pub use scenario::Scenario;
pub use state::RunState;

/// What can go wrong in the lab.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// The scenario file is invalid; the message says where and why.
    #[error("scenario: {0}")]
    Scenario(String),
    /// A file or process operation failed.
    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
    /// An `ip`/`tc` (or other) command exited with an error.
    #[error("command `{argv}` failed ({status}): {stderr}")]
    Command {
        /// The command line, for the message.
        argv: String,
        /// Exit status.
        status: String,
        /// Its standard error (trimmed, capped), or its standard output when it wrote nothing
        /// to standard error (`diff -q` reports there).
        stderr: String,
    },
    /// The lab needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN for namespaces).
    #[error("linerate lab needs root (it creates network namespaces); run it with sudo")]
    NotRoot,
    /// SIGINT or SIGTERM arrived; the lab was torn down.
    #[error("interrupted; the lab was torn down")]
    Interrupted,
    /// A measurement failed.
    #[error("run '{0}': {1}")]
    Run(String, String),
    /// A run id or state file problem.
    #[error("{0}")]
    State(String),
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// One state directory for every unit test of this crate (the variable is process-wide, so
/// tests that set it each to their own directory would race).
#[cfg(test)]
pub(crate) fn test_state_dir() -> &'static std::path::Path {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let d = tempfile::tempdir().expect("a temporary directory for lab state files");
        std::env::set_var("LINERATE_LAB_DIR", d.path());
        d
    })
    .path()
}
