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
pub mod show;
pub mod state;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;

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
    /// A file or process operation failed: what was being done, and the system's error (in the
    /// message, so not also a `source()`: a printed chain would say it twice).
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
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
    /// A copy differs from its source (`diff -qr`, once the clock has stopped): its run fails.
    #[error("the copy in {} differs from its source {}: {diff}", copy.display(), original.display())]
    CopyDiffers {
        /// The copy.
        copy: std::path::PathBuf,
        /// What was copied.
        original: std::path::PathBuf,
        /// What `diff -qr` said (its tail).
        diff: String,
    },
    /// A program the runs need is not installed.
    #[error("{program} not found (install {package})")]
    MissingTool {
        /// The program looked for (`iperf3`, `sshd`).
        program: String,
        /// The Debian package that has it.
        package: String,
    },
    /// A command line with no program in it (an executor was given an empty argv).
    #[error("an empty {what} command line: nothing to run")]
    EmptyCommand {
        /// Which command: `client`, `feeder`.
        what: &'static str,
    },
    /// A feeder (`tar -c` of `tar | ssh`) gave no pipe to read its output from.
    #[error("{program} gave no standard output to feed the next command")]
    NoFeederPipe {
        /// The feeder's program.
        program: String,
    },
    /// `lab down`/`exec`/`set` named a run that has no state file.
    #[error("no lab run '{id}' (see `linerate lab status`)")]
    UnknownRun {
        /// The run id asked for.
        id: String,
    },
    /// `lab exec` named a host the run does not have.
    #[error("lab {run} has no host '{}' (hosts: {hosts:?})", host.escape_default())]
    UnknownHost {
        /// The run.
        run: String,
        /// The host asked for.
        host: String,
        /// The run's hosts.
        hosts: Vec<String>,
    },
    /// `lab set` named a link that no emulator of the run runs.
    #[error("lab {run} has no link '{}' run by linerate's emulator (emulated links: {links:?})", link.escape_default())]
    UnknownLink {
        /// The run.
        run: String,
        /// The link asked for.
        link: String,
        /// The run's emulated links.
        links: Vec<String>,
    },
    /// No run was named and no lab is up.
    #[error("no lab is up")]
    NoLab,
    /// No run was named and several labs are up.
    #[error("{count} labs are up; name one (see `linerate lab status`)")]
    SeveralLabs {
        /// How many are up.
        count: usize,
    },
    /// A state file larger than any the lab writes.
    #[error("{}: state file too large ({len} bytes); not a lab's, remove it", path.display())]
    StateFileTooLarge {
        /// The file.
        path: std::path::PathBuf,
        /// Its size.
        len: usize,
    },
    /// A state file that is not one (hand-edited, or truncated by a full disk).
    #[error("{}: not a lab state file: {source}; remove it once no lab of it is up", path.display())]
    StateFile {
        /// The file.
        path: std::path::PathBuf,
        /// What JSON decoding said.
        #[source]
        source: serde_json::Error,
    },
    /// A document the lab writes could not be encoded (a state file, an emulator's
    /// configuration, `lab status --json`).
    #[error("encoding {what}: {source}")]
    Encode {
        /// What was being encoded (a path, or `lab status`).
        what: String,
        /// What JSON encoding said.
        #[source]
        source: serde_json::Error,
    },
    /// `linerate lab emulate` was given a configuration it cannot read.
    #[error("{}: not an emulator configuration: {source}", path.display())]
    EmulatorConfig {
        /// The configuration file.
        path: std::path::PathBuf,
        /// What JSON decoding said.
        #[source]
        source: serde_json::Error,
    },
    /// A link's emulator refused a request (`lab set`); its own words say why.
    #[error("the emulator at {} refused '{request}': {reason}", control.display())]
    EmulatorRefused {
        /// Its control socket.
        control: std::path::PathBuf,
        /// The request sent.
        request: String,
        /// What the emulator answered after `error: `.
        reason: String,
    },
    /// A link's emulator answered `stats` with something that is not its counters.
    #[error("the emulator of link {link} answered {answer:?}: {source}")]
    EmulatorAnswer {
        /// The link.
        link: String,
        /// Its answer.
        answer: String,
        /// What JSON decoding said.
        #[source]
        source: serde_json::Error,
    },
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}
