//! The `pull_receiver` target: the receiving side of a pull of `tree`, fed whatever a hostile
//! server sends. The input is decoded with `frame::frames` (so the decoder runs too) and every
//! frame a pull's receiver acts on goes to a `Tracker::for_pull(65536, b"tree")` the way the
//! engine's receiver (`crates/copy/src/recv/`) hands it over:
//!
//! - `Dir`, `Link`, `FileStart` are declarations; `Offer` is one too, after which the receiver
//!   decides from what it holds (here: from the offer's `mtime.nsec % 4`) to take the whole
//!   file, skip it (`Tracker::skip`) or count chunks it holds already (`Tracker::prefill`);
//! - `Chunk` goes to `Tracker::chunk`, and an accepted one is written and reported with
//!   `Tracker::chunk_written`;
//! - `FileEnd` goes to `Tracker::file_end`, `FileAbort` to `Tracker::abandon`;
//! - `Keep` for directory 0 is refused by the engine before the tracker is asked; for another
//!   directory it waits until the directory is declared, and then acts in it;
//! - anything else (`End`, `Finish`, ...) does not reach the tracker and is skipped.
//!
//! A frame the tracker answers `NotYet` (or a `FileAbort`/`Keep` for something not declared yet)
//! waits, as it would on its stream, and is retried in arrival order after every step that
//! declared or finished something; at most [`MAX_WAITING`] wait at once (the engine would fail
//! the session for the others). A refused frame does not end the run: the engine would abort the
//! session, but the tracker must stay consistent whatever follows, so the run goes on.
//!
//! Every tracker call is checked against the reference model (`Harness::for_pull`), and besides:
//! every accepted directory, link, file and `Keep` lies beneath the requested tree (its path,
//! `Tracker::dir_path` of the parent joined with the name, is `tree` or starts with `tree/`); at
//! most one entry is ever accepted in directory 0; at the end, after the leftover files are
//! abandoned as the engine does, every directory whose mode and time would be applied is beneath
//! the tree too. Nothing here reads a clock or touches the filesystem.

use crate::tracker_model::{Features, Harness};
use linerate_proto::frame::{self, Frame};
use linerate_proto::track::Step;
use linerate_proto::ProtoError;

/// The name the client asked for.
pub const PULL_NAME: &[u8] = b"tree";

/// Most frames waiting for a declaration at once.
pub const MAX_WAITING: usize = 64;

/// Whether `path` (relative to the destination) is the requested tree or beneath it.
pub fn under_tree(path: &[u8]) -> bool {
    path.strip_prefix(PULL_NAME).is_some_and(|rest| rest.is_empty() || rest[0] == b'/')
}

/// What became of one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fed {
    /// It refers to something not declared yet: it waits.
    NotYet,
    /// Something was declared or finished: waiting frames may move now.
    Progress,
    /// Nothing that could move a waiting frame (refused, discarded, ignored, or a chunk
    /// accepted without completing its file).
    Done,
}

/// A pull's receiver: the tracker, its model, and the frames waiting for a declaration.
pub struct Receiver<'a> {
    h: Harness,
    waiting: Vec<Frame<'a>>,
    /// Entries accepted in directory 0.
    top: u32,
}

impl Default for Receiver<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'a> Receiver<'a> {
    /// A receiver for a pull of [`PULL_NAME`].
    pub fn new() -> Self {
        Receiver { h: Harness::for_pull(PULL_NAME), waiting: Vec::new(), top: 0 }
    }

    /// Feed every frame of `data` (up to the first that does not decode), then end the session.
    pub fn run(data: &'a [u8]) -> Features {
        let mut r = Receiver::new();
        for f in frame::frames(data) {
            let Ok(f) = f else { break };
            r.feed(f);
        }
        r.finish()
    }

    /// One frame from the server.
    pub fn feed(&mut self, f: Frame<'a>) {
        match self.apply(&f) {
            Fed::NotYet => {
                if self.waiting.len() < MAX_WAITING {
                    self.waiting.push(f);
                }
            }
            Fed::Progress => self.retry(),
            Fed::Done => {}
        }
    }

    /// Retry the waiting frames in arrival order until none moves.
    fn retry(&mut self) {
        loop {
            let mut moved = false;
            let mut i = 0;
            while i < self.waiting.len() {
                let f = self.waiting[i].clone();
                if self.apply(&f) == Fed::NotYet {
                    i += 1;
                } else {
                    self.waiting.remove(i);
                    moved = true;
                }
            }
            if !moved {
                break;
            }
        }
    }

    fn apply(&mut self, f: &Frame<'a>) -> Fed {
        match f {
            Frame::Dir(d) => {
                let r = self.h.dir(d.id, d.parent, d.name, d.mode);
                self.declared(&r, d.parent, d.name)
            }
            Frame::Link(l) => {
                let r = self.h.link(l.parent, l.name, l.target);
                self.declared(&r, l.parent, l.name)
            }
            Frame::Special(x) => {
                // The model's special takes one byte for the device number: larger ones stand
                // for "non-zero".
                let dev = u8::try_from(x.major.max(x.minor)).unwrap_or(u8::MAX);
                let r = self.h.special(x.parent, x.name, x.kind.byte() - 1, dev);
                self.declared(&r, x.parent, x.name)
            }
            Frame::FileStart(s) => {
                let r = self.h.file_start(s.id, s.parent, s.name, s.size);
                self.declared(&r, s.parent, s.name)
            }
            Frame::Offer(o) => {
                let s = &o.file;
                let r = self.h.file_start(s.id, s.parent, s.name, s.size);
                let fed = self.declared(&r, s.parent, s.name);
                if r == Ok(Step::Accepted) {
                    // What the receiver holds decides; here the offer's nanoseconds stand in.
                    match s.mtime.nsec % 4 {
                        1 => {
                            assert!(self.h.skip(s.id), "skip of a file just accepted");
                        }
                        2 => {
                            self.h.prefill(s.id, &[(0, 1)]);
                        }
                        3 => {
                            self.h.prefill(s.id, &[(1, 2)]);
                        }
                        _ => {}
                    }
                }
                fed
            }
            Frame::Chunk(c) => match self.h.chunk(c.file, c.offset, c.data.len()) {
                Ok(Step::NotYet) => Fed::NotYet,
                Ok(Step::Accepted) => {
                    // Written, then reported.
                    match self.h.chunk_written(c.file) {
                        Some(Step::Complete(_)) => Fed::Progress,
                        Some(_) => Fed::Done,
                        None => panic!("chunk of file {} accepted but nothing outstanding", c.file),
                    }
                }
                _ => Fed::Done,
            },
            Frame::FileEnd(e) => match self.h.file_end(e.file, e.size, e.digest) {
                Ok(Step::NotYet) => Fed::NotYet,
                Ok(Step::Complete(_)) => Fed::Progress,
                _ => Fed::Done,
            },
            Frame::FileAbort(a) => {
                if self.h.abandon(a.file) {
                    Fed::Progress
                } else {
                    Fed::NotYet
                }
            }
            Frame::Keep(k) => {
                assert_eq!(k.names.iter().count(), k.names.len(), "Keep names do not add up to their count");
                if k.dir == 0 {
                    // The engine refuses a Keep for the destination itself.
                    return Fed::Done;
                }
                if self.h.tracker().dir_info(k.dir).is_none() {
                    return Fed::NotYet;
                }
                let path = self.h.tracker().dir_path(k.dir);
                assert!(
                    under_tree(&path),
                    "Keep acts in directory {} at '{}', outside the requested tree",
                    k.dir,
                    String::from_utf8_lossy(&path)
                );
                Fed::Done
            }
            _ => Fed::Done,
        }
    }

    /// Check an accepted declaration of `name` in `parent`.
    fn declared(&mut self, r: &Result<Step, ProtoError>, parent: u64, name: &[u8]) -> Fed {
        match r {
            Ok(Step::NotYet) => Fed::NotYet,
            Ok(Step::Accepted) => {
                let mut path = self.h.tracker().dir_path(parent);
                if parent == 0 {
                    assert!(path.is_empty(), "dir_path(0) is not empty");
                    self.top += 1;
                    assert!(self.top <= 1, "a second entry accepted in the target: '{}'", show(name));
                } else {
                    assert!(!path.is_empty(), "an entry accepted in directory {parent}, which has no path");
                    path.push(b'/');
                }
                path.extend_from_slice(name);
                assert!(under_tree(&path), "'{}' accepted outside the requested tree", show(&path));
                Fed::Progress
            }
            _ => Fed::Done,
        }
    }

    /// The session ends: leftover files are abandoned, and directories get their modes.
    pub fn finish(mut self) -> Features {
        self.h.check_final();
        let mut open = self.h.tracker().open_file_ids();
        open.sort_unstable();
        for id in open {
            assert!(self.h.abandon(id), "abandon of open file {id}");
        }
        assert_eq!(self.h.tracker().open_files(), 0);
        for id in self.h.tracker().dirs_deepest_first() {
            let path = self.h.tracker().dir_path(id);
            assert!(under_tree(&path), "directory {id} at '{}' gets a mode, outside the requested tree", show(&path));
        }
        self.h.check_final();
        self.h.features
    }
}

fn show(b: &[u8]) -> String {
    linerate_proto::name::escape(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use linerate_proto::frame::{Chunk, DirEntry, FileEnd, FileStart, LinkEntry, Time};

    fn enc(frames: &[Frame<'_>]) -> Vec<u8> {
        let mut b = Vec::new();
        for f in frames {
            f.encode(&mut b);
        }
        b
    }
    fn dir(id: u64, parent: u64, name: &[u8]) -> Frame<'_> {
        Frame::Dir(DirEntry { id, parent, name, mode: 0o755, mtime: Time::default(), owner: Default::default() })
    }
    fn file(id: u64, parent: u64, name: &[u8], size: u64) -> Frame<'_> {
        Frame::FileStart(FileStart {
            id,
            parent,
            name,
            size,
            mode: 0o644,
            mtime: Time::default(),
            owner: Default::default(),
        })
    }

    #[test]
    fn paths_beneath_the_tree() {
        for p in [&b"tree"[..], b"tree/x", b"tree/x/y", b"tree/"] {
            assert!(under_tree(p), "{p:?}");
        }
        for p in [&b""[..], b"tre", b"trees", b"tree2/x", b"x/tree", b"/tree"] {
            assert!(!under_tree(p), "{p:?}");
        }
    }

    #[test]
    fn out_of_order_frames_wait_for_their_declarations() {
        let data = enc(&[
            Frame::Chunk(Chunk { file: 3, offset: 0, data: b"abc" }),
            Frame::FileEnd(FileEnd { file: 3, size: 3, digest: None }),
            file(3, 2, b"f", 3),
            dir(2, 1, b"sub"),
            Frame::Link(LinkEntry {
                parent: 2,
                name: b"l",
                target: b"/etc/passwd",
                mtime: Time::default(),
                owner: Default::default(),
            }),
            dir(1, 0, b"tree"),
            file(4, 0, b"evil", 0),
            dir(5, 0, b"tree"),
            Frame::End,
        ]);
        let mut r = Receiver::new();
        for f in frame::frames(&data) {
            r.feed(f.unwrap());
        }
        assert!(r.waiting.is_empty(), "{:?}", r.waiting);
        assert_eq!(r.top, 1);
        assert_eq!(r.h.tracker().open_files(), 0, "file 3 completed");
        assert_eq!(r.h.tracker().dir_path(2), b"tree/sub");
        r.finish();
    }
}
