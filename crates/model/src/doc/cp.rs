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
    /// Goodput, Gbit/s (SI), of the bytes moved in this run; `null` for a copy too small or too
    /// short to have a rate ([`rate_bps`]). Earlier versions always wrote a number.
    #[serde(deserialize_with = "super::required")]
    pub gbit_per_s: Option<f64>,
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
    /// Bytes still in the page cache, not yet on the disk, when a copy to this host ended without
    /// `--fsync` (the rise of `Dirty` + `Writeback` in `/proc/meminfo` over the copy), given only
    /// where it is large enough to change what the rate means ([`unwritten_share`]): the rate is
    /// then to the page cache. Absent otherwise and in older summaries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_cache_bytes: Option<u64>,
}

/// Below this many bytes moved, a copy's time is its set-up (connect, handshakes, a local
/// receiver's start), not a transfer: it has no rate (issue 43: `149 bit/s` for a 6-byte copy).
pub const RATE_MIN_BYTES: u64 = 1 << 20;

/// Below this many seconds, a copy's clock is too coarse for a rate (the same rule).
pub const RATE_MIN_SECONDS: f64 = 0.010;

/// The goodput of a copy that moved `moved` bytes in `seconds`, bit/s: `None` when it moved
/// fewer than [`RATE_MIN_BYTES`] or took less than [`RATE_MIN_SECONDS`] (or the time is not a
/// number). The summary line, `--json` and the report store all take the rate from here.
pub fn rate_bps(moved: u64, seconds: f64) -> Option<f64> {
    (moved >= RATE_MIN_BYTES && seconds.is_finite() && seconds >= RATE_MIN_SECONDS)
        .then(|| moved as f64 * 8.0 / seconds)
}

/// Page-cache data that counts against a rate: at least this share of the bytes moved...
pub const UNWRITTEN_MIN_SHARE: f64 = 0.10;

/// ... and at least this many bytes (a small copy's dirty pages are written in a moment).
pub const UNWRITTEN_MIN_BYTES: u64 = 64 << 20;

/// How much of a copy's `moved` bytes was still in the page cache at its end, given the host's
/// dirty and under-writeback bytes (`Dirty:` + `Writeback:` of `/proc/meminfo`) at its start and
/// its end: the rise, at most `moved`, when it is at least [`UNWRITTEN_MIN_SHARE`] of `moved`
/// and [`UNWRITTEN_MIN_BYTES`]; else `None` (the rate counts the disk, near enough). The host's
/// other writers move the figure too: it is an estimate, and it says so where it is printed.
pub fn unwritten_share(moved: u64, dirty_start: u64, dirty_end: u64) -> Option<u64> {
    let rise = dirty_end.saturating_sub(dirty_start).min(moved);
    (rise >= UNWRITTEN_MIN_BYTES && rise as f64 >= UNWRITTEN_MIN_SHARE * moved as f64).then_some(rise)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_too_small_or_too_short_has_no_rate() {
        // issue 43: 6 bytes in 0.32 s read `149 bit/s`
        assert_eq!(rate_bps(6, 0.322), None);
        assert_eq!(rate_bps(RATE_MIN_BYTES - 1, 10.0), None, "under 1 MiB");
        assert_eq!(rate_bps(1 << 30, 0.009), None, "under 10 ms");
        assert_eq!(rate_bps(1 << 30, f64::NAN), None);
        assert_eq!(rate_bps(1 << 30, f64::INFINITY), None);
        assert_eq!(rate_bps(RATE_MIN_BYTES, RATE_MIN_SECONDS), Some(RATE_MIN_BYTES as f64 * 8.0 / 0.010));
        assert_eq!(rate_bps(1_000_000_000, 2.0), Some(4e9));
    }

    #[test]
    fn the_page_cache_counts_when_a_tenth_and_64_mib_are_still_unwritten() {
        const MIB: u64 = 1 << 20;
        // issue 43: 340 MB of a 2 GB copy still dirty at the end
        assert_eq!(unwritten_share(2000 * MIB, 10 * MIB, 350 * MIB), Some(340 * MIB));
        assert_eq!(unwritten_share(2000 * MIB, 10 * MIB, 199 * MIB), None, "under a tenth");
        assert_eq!(unwritten_share(300 * MIB, 0, 63 * MIB), None, "a tenth but under 64 MiB");
        assert_eq!(unwritten_share(300 * MIB, 0, 64 * MIB), Some(64 * MIB), "both edges are inside");
        assert_eq!(unwritten_share(100 * MIB, 900 * MIB, 10 * MIB), None, "less dirty at the end");
        assert_eq!(unwritten_share(100 * MIB, 0, 5000 * MIB), Some(100 * MIB), "never more than was moved");
        assert_eq!(unwritten_share(0, 0, 5000 * MIB), None, "nothing moved");
    }
}
