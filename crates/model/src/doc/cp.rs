//! The `linerate cp --json` summary: one JSON object per copy, with no schema string (it is
//! recognised by its `bytes` and `gbit_per_s` fields). Written by `cli/src/cp.rs`, kept as
//! `raw` in lab runs of `cp`, read by `linerate-report`.

use serde::{Deserialize, Serialize};

/// What one copy moved, how fast, and what it cost.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct CpSummary {
    /// File bytes sent.
    pub bytes: u64,
    /// Files sent.
    pub files: u64,
    /// Directories sent.
    pub dirs: u64,
    /// Symlinks sent.
    pub links: u64,
    /// Wall-clock seconds from first connect to the receiver's summary.
    pub seconds: f64,
    /// Goodput, Gbit/s (SI), of the bytes moved in this run.
    pub gbit_per_s: f64,
    /// Data streams used.
    pub streams: u32,
    /// The AEAD used (`aes-256-gcm`, `chacha20-poly1305`).
    pub cipher: String,
    /// Every entry arrived.
    pub complete: bool,
    /// Entries that failed on each side.
    pub errors: CpErrors,
    /// What the receiver committed.
    pub received: CpCounts,
    /// CPU time of both processes.
    pub cpu: CpCpu,
    /// Peak resident memory of both processes.
    pub peak_rss_bytes: CpPeakRss,
    /// Which way the data went. Absent in summaries written before pulls existed: push.
    #[serde(default)]
    pub direction: CpDirection,
    /// Files found up to date and not sent. Absent in older summaries: none.
    #[serde(default)]
    pub skipped: CpSkipped,
    /// Bytes of partial files the receiver already held and kept. Absent in older summaries: 0.
    #[serde(default)]
    pub resumed_bytes: u64,
    /// Entries deleted at the destination (in a dry run: that would be). Absent in older
    /// summaries: 0.
    #[serde(default)]
    pub deleted: u64,
    /// A dry run (`cp -n`): nothing was changed; the files that would have been sent. Absent
    /// for a real copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<CpSkipped>,
    /// Where the time went before and during the session, for a copy over ssh. Absent for
    /// other copies and in older summaries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phases: Option<CpPhases>,
    /// Where the whole command's wall time went, process start to the report (issue 34). Absent
    /// in older summaries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<CpTimeline>,
}

/// The whole command's wall time in consecutive phases, seconds; they add up to `total_s`.
/// The session's own phases (`connect_s` to `close_s`) are the sending side's view, so a pull
/// has only their sum, in `transfer_s`.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Default)]
pub struct CpTimeline {
    /// From the start of `main` to the first connect: arguments, keys, a local receiver's start,
    /// over ssh the login, the probe, an upload and the remote's start (`phases`).
    pub start_s: f64,
    /// The control connection, its handshake, the destination's answer and the data streams'
    /// handshakes.
    pub connect_s: f64,
    /// The walk, the offers and every byte, to the sender's `Finish` (the receiver may still be
    /// writing).
    pub transfer_s: f64,
    /// From `Finish` to the receiver's summary: the last writes, renames into place, directory
    /// times and modes, `--fsync`.
    pub finish_s: f64,
    /// From the summary to the end of the session: its threads joined, sockets closed.
    pub close_s: f64,
    /// From the session's end to the report: a local receiver's exit awaited, the result saved.
    pub end_s: f64,
    /// All of them: the command's wall time up to the report.
    pub total_s: f64,
}

/// The phases of a copy over ssh, in order.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Default)]
pub struct CpPhases {
    /// Seconds from starting ssh to the remote side's announcement: the ssh login, the probe,
    /// an upload of linerate if one was needed, and the remote's start.
    pub remote_start_s: f64,
    /// Which linerate ran on the remote host.
    pub remote_linerate: RemoteLinerate,
    /// Bytes of this executable sent to the remote host (0 unless `uploaded`).
    pub upload_bytes: u64,
    /// Seconds from the first uploaded byte to the remote's announcement (its SHA-256 check
    /// and start included); 0 unless `uploaded`.
    pub upload_s: f64,
    /// Seconds of the copy session itself (connect to the receiver's summary), as `seconds`.
    pub copy_s: f64,
}

/// Which linerate ran on the remote host of a copy over ssh.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum RemoteLinerate {
    /// The one named by `--remote-linerate`.
    #[default]
    Given,
    /// The one an earlier run uploaded to the remote user's cache.
    Cache,
    /// One installed on the remote `PATH`.
    Path,
    /// This executable, uploaded by this run.
    Uploaded,
}

/// Failed entries of a copy.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpErrors {
    /// On the sending side (unreadable, changed while read).
    pub local: u64,
    /// At the receiver.
    pub remote: u64,
}

/// Entries the receiver committed under their final names.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpCounts {
    /// Files.
    pub files: u64,
    /// Bytes in those files.
    pub bytes: u64,
    /// Directories created or merged.
    pub dirs: u64,
    /// Symlinks.
    pub links: u64,
}

/// CPU seconds of the two processes of a copy.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Default)]
pub struct CpCpu {
    /// The `linerate cp` process.
    pub client: CpuSeconds,
    /// The receiving (or, for a pull, sending) agent.
    pub server: CpuSeconds,
}

/// A process's CPU time.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Default)]
pub struct CpuSeconds {
    /// User mode, seconds.
    pub user_s: f64,
    /// Kernel mode, seconds.
    pub system_s: f64,
}

impl CpuSeconds {
    /// User plus system.
    pub fn total(&self) -> f64 {
        self.user_s + self.system_s
    }
}

/// Peak resident memory, bytes.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpPeakRss {
    /// The `linerate cp` process.
    pub client: u64,
    /// The agent.
    pub server: u64,
}

/// Which way a copy went.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum CpDirection {
    /// This side sent.
    #[default]
    Push,
    /// This side received.
    Pull,
}

/// Files not sent because the destination already had them.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpSkipped {
    /// Files (up to date, or in `dry_run`, that would be sent).
    pub files: u64,
    /// Bytes in those files.
    pub bytes: u64,
}
