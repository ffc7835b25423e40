//! The counters both ends of a copy keep as it runs: what went across (files, bytes,
//! directories, links), what failed, and what was skipped, resumed, deleted or only would be
//! sent (a dry run). The sender's `Totals` and the receiver's `Counters` each hold one beside
//! the counters of their own (issue 44: the list was written twice).

use linerate_proto::frame::Finish;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Counters shared by the sender and the receiver of a copy session, added to from any stream
/// thread (relaxed: each is read on its own, for progress and totals).
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub files: AtomicU64,
    pub bytes: AtomicU64,
    pub dirs: AtomicU64,
    pub links: AtomicU64,
    pub errors: AtomicU64,
    pub skipped_files: AtomicU64,
    pub skipped_bytes: AtomicU64,
    pub resumed_bytes: AtomicU64,
    pub deleted: AtomicU64,
    pub would_files: AtomicU64,
    pub would_bytes: AtomicU64,
}

impl Tally {
    /// The `Finish` frame of these counters: files, bytes, directories and links.
    pub(crate) fn finish(&self) -> Finish {
        Finish {
            files: self.files.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            dirs: self.dirs.load(Relaxed),
            links: self.links.load(Relaxed),
        }
    }
}
