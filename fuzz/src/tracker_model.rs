//! The `tracker` target: a sequence of [`Op`]s (derived with `arbitrary`) is applied to a
//! `Tracker::new(65536)` and, side by side, to a small reference model of what the receiver has
//! been told. Every answer of the tracker is checked against the model, so besides panics the
//! target catches accepted frames that should have been refused, refusals with no reason, files
//! that complete early, late or twice, and drift of `open_files()`.
//!
//! The model relies on the caller contract of `Tracker::chunk_written` (called once per chunk
//! that `Tracker::chunk` accepted); the target never calls it for a chunk it was not given.

use arbitrary::{Arbitrary, Unstructured};
use linerate_proto::caps::{MAX_DEPTH, MAX_NAME, MAX_OPEN_FILES, MAX_PATH};
use linerate_proto::frame::{DirEntry, FileEnd, FileStart, LinkEntry, Time};
use linerate_proto::track::{Completion, Step, Tracker};
use std::collections::{HashMap, HashSet};

/// Chunk size of the tracked session.
pub const CHUNK_SIZE: u32 = 65536;
const CS: u64 = CHUNK_SIZE as u64;
/// Largest file size a sender may declare (the largest `off_t`), as documented by the tracker.
const MAX_FILE_SIZE: u64 = i64::MAX as u64;

/// A directory or file id: mostly from a small set so operations meet (0 is the root
/// directory), sometimes any `u64`.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Id {
    /// `v % 4`
    Small(u8),
    /// Any id.
    Raw(u64),
}

impl Id {
    fn get(self) -> u64 {
        match self {
            Id::Small(v) => u64::from(v % 4),
            Id::Raw(v) => v,
        }
    }
}

/// A parent directory id: often the root.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Parent {
    /// Directory 0, the destination root.
    Root,
    /// `v % 4`
    Small(u8),
    /// Any id.
    Raw(u64),
}

impl Parent {
    fn get(self) -> u64 {
        match self {
            Parent::Root => 0,
            Parent::Small(v) => u64::from(v % 4),
            Parent::Raw(v) => v,
        }
    }
}

/// An entry name: a valid short one, or arbitrary bytes (empty, `.`, `..`, `/`, NUL, too long).
#[derive(Arbitrary, Debug, Clone)]
pub enum Name {
    /// `n0` .. `n15`
    Short(u8),
    /// Any bytes.
    Raw(Vec<u8>),
}

impl Name {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Name::Short(v) => format!("n{}", v % 16).into_bytes(),
            Name::Raw(b) => b.clone(),
        }
    }
}

/// A file size.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Size {
    /// `(full % 4) * CHUNK_SIZE` plus a partial chunk of 0, 1, 1000 or `CHUNK_SIZE - 1` bytes
    /// (`tail % 4`).
    Chunks {
        /// Whole chunks.
        full: u8,
        /// Which partial chunk.
        tail: u8,
    },
    /// The size the file was declared with (0 if it is not open).
    Declared,
    /// Any size.
    Raw(u64),
}

/// A chunk offset.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Offset {
    /// `(index % 6) * CHUNK_SIZE`
    Index(u8),
    /// Any offset.
    Raw(u64),
}

/// A chunk length.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Len {
    /// The length the tracker should expect at that offset (0 if the file is not open).
    Exact,
    /// Any length.
    Raw(u32),
}

/// One call into the tracker.
#[derive(Arbitrary, Debug, Clone)]
pub enum Op {
    /// `Tracker::dir`
    Dir {
        /// New directory id.
        id: Id,
        /// Parent id.
        parent: Parent,
        /// Name.
        name: Name,
        /// Mode bits.
        mode: u32,
    },
    /// `Tracker::dir` `count % 16` times, each directory inside the previous one; `count == 255`
    /// builds a chain of `MAX_DEPTH + 2` to reach the depth cap. Only the first `255` of
    /// `DirChain` or `FileStartMany` in an input is honoured (as 15 after that), to keep
    /// executions fast.
    DirChain {
        /// Id of the first directory; the next ones count up.
        first: u64,
        /// Parent of the first directory.
        parent: Parent,
        /// How many.
        count: u8,
    },
    /// `Tracker::link`
    Link {
        /// Parent id.
        parent: Parent,
        /// Name.
        name: Name,
        /// Target bytes (empty ones and NULs are refused).
        target: Vec<u8>,
    },
    /// `Tracker::file_start`
    FileStart {
        /// File id.
        id: Id,
        /// Parent id.
        parent: Parent,
        /// Name.
        name: Name,
        /// Declared size.
        size: Size,
    },
    /// `Tracker::file_start` `count % 16` times in the root, one-byte files with consecutive
    /// ids; `count == 255` declares as many as it takes to pass `MAX_OPEN_FILES` by two.
    FileStartMany {
        /// Id of the first file.
        first: u64,
        /// How many.
        count: u8,
    },
    /// `Tracker::chunk`
    Chunk {
        /// File id.
        file: Id,
        /// Offset.
        offset: Offset,
        /// Length.
        len: Len,
    },
    /// `Tracker::chunk_written`, for a chunk accepted earlier (skipped when the file has none
    /// outstanding, which would break the caller contract).
    ChunkWritten {
        /// File id.
        file: Id,
    },
    /// `Tracker::file_end`
    FileEnd {
        /// File id.
        file: Id,
        /// Size declared at the end.
        size: Size,
        /// Digest, `[v; 32]`.
        digest: Option<u8>,
    },
    /// `Tracker::abandon`
    Abandon {
        /// File id.
        file: Id,
    },
    /// Apply again the operation applied `back % n` steps ago (n: operations so far; bulk ones
    /// are skipped), so that repeated frames (duplicates, re-declarations, replays) are easy to
    /// reach.
    Replay {
        /// How far back.
        back: u8,
    },
}

/// The input of the `tracker` target: operations read one after another until the bytes run
/// out. (A plain `Vec<Op>` spends a continuation byte before each element and stops at the first
/// even one, so random inputs would hold one operation on average.)
#[derive(Debug, Clone)]
pub struct Ops(pub Vec<Op>);

impl<'a> Arbitrary<'a> for Ops {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let mut ops = Vec::new();
        while !u.is_empty() {
            ops.push(Op::arbitrary(u)?);
        }
        Ok(Ops(ops))
    }

    fn arbitrary_take_rest(mut u: Unstructured<'a>) -> arbitrary::Result<Self> {
        Self::arbitrary(&mut u)
    }
}

#[derive(Debug)]
struct MDir {
    parent: u64,
    name: Vec<u8>,
    depth: u32,
}

#[derive(Debug)]
struct MFile {
    size: u64,
    chunks: u64,
    claimed: HashSet<u64>,
    /// Accepted chunks not yet reported written.
    pending: u64,
    written: u64,
    end: Option<Option<[u8; 32]>>,
}

/// Outcome classes seen during a run, one bit each (the corpus generator keeps inputs that add
/// new bits).
pub type Features = u64;

/// The tracker under test and the model it is checked against.
pub struct Harness {
    t: Tracker,
    dirs: HashMap<u64, MDir>,
    files: HashMap<u64, MFile>,
    dead: HashSet<u64>,
    completed: HashSet<u64>,
    /// Whether the one full-size bulk operation of this input has been used.
    big_used: bool,
    /// Operations applied so far, for [`Op::Replay`].
    history: Vec<Op>,
    /// Outcome classes seen so far.
    pub features: Features,
}

fn name_ok(n: &[u8]) -> bool {
    !n.is_empty() && n.len() <= MAX_NAME && n != b"." && n != b".." && !n.contains(&b'/') && !n.contains(&0)
}

fn target_ok(t: &[u8]) -> bool {
    !t.is_empty() && t.len() <= MAX_PATH && !t.contains(&0)
}

fn step_class(s: &Step) -> u32 {
    match s {
        Step::NotYet => 0,
        Step::Accepted => 1,
        Step::Discard => 2,
        Step::Complete(_) => 3,
    }
}

impl Default for Harness {
    fn default() -> Self {
        Self::new()
    }
}

impl Harness {
    /// A fresh `Tracker::new(65536)` and an empty model (only the root directory 0).
    pub fn new() -> Harness {
        let mut dirs = HashMap::new();
        dirs.insert(0, MDir { parent: 0, name: Vec::new(), depth: 0 });
        Harness {
            t: Tracker::new(CHUNK_SIZE),
            dirs,
            files: HashMap::new(),
            dead: HashSet::new(),
            completed: HashSet::new(),
            big_used: false,
            history: Vec::new(),
            features: 0,
        }
    }

    fn seen<E>(&mut self, op: u32, r: &Result<Step, E>) {
        let class = match r {
            Ok(s) => step_class(s),
            Err(_) => 4,
        };
        self.features |= 1 << (op * 5 + class);
    }

    /// Apply every operation, then check the end state.
    pub fn run(ops: &[Op]) -> Features {
        let mut h = Harness::new();
        for op in ops {
            h.apply(op);
        }
        h.check_final();
        h.features
    }

    fn big(&mut self, count: u8) -> bool {
        let big = count == 255 && !self.big_used;
        self.big_used |= big;
        big
    }

    /// Apply one operation and check the tracker's answer against the model.
    pub fn apply(&mut self, op: &Op) {
        let op = match op {
            Op::Replay { back } => match self.history.len() {
                0 => return,
                n => match &self.history[n - 1 - usize::from(*back) % n] {
                    // Bulk operations are not replayed: they are slow and say nothing new.
                    Op::DirChain { .. } | Op::FileStartMany { .. } => return,
                    op => op.clone(),
                },
            },
            op => op.clone(),
        };
        self.apply_one(&op);
        self.history.push(op);
    }

    fn apply_one(&mut self, op: &Op) {
        match op {
            Op::Dir { id, parent, name, mode } => self.dir(id.get(), parent.get(), &name.bytes(), *mode),
            Op::DirChain { first, parent, count } => {
                let n = if self.big(*count) { u64::from(MAX_DEPTH) + 2 } else { u64::from(*count % 16) };
                let mut p = parent.get();
                for i in 0..n {
                    let id = first.wrapping_add(i);
                    self.dir(id, p, b"c", 0o755);
                    p = id;
                }
            }
            Op::Link { parent, name, target } => self.link(parent.get(), &name.bytes(), target),
            Op::FileStart { id, parent, name, size } => {
                let id = id.get();
                let size = self.size(id, *size);
                self.file_start(id, parent.get(), &name.bytes(), size);
            }
            Op::FileStartMany { first, count } => {
                let n = if self.big(*count) {
                    (MAX_OPEN_FILES + 2).saturating_sub(self.files.len()) as u64
                } else {
                    u64::from(*count % 16)
                };
                for i in 0..n {
                    self.file_start(first.wrapping_add(i), 0, b"m", 1);
                }
            }
            Op::Chunk { file, offset, len } => {
                let file = file.get();
                let offset = match *offset {
                    Offset::Index(i) => u64::from(i % 6) * CS,
                    Offset::Raw(v) => v,
                };
                let len = match *len {
                    Len::Exact => match self.files.get(&file) {
                        Some(f) if offset < f.size => (f.size - offset).min(CS) as usize,
                        _ => 0,
                    },
                    Len::Raw(v) => v as usize,
                };
                self.chunk(file, offset, len);
            }
            Op::ChunkWritten { file } => self.chunk_written(file.get()),
            Op::FileEnd { file, size, digest } => {
                let file = file.get();
                let size = self.size(file, *size);
                self.file_end(file, size, digest.map(|v| [v; 32]));
            }
            Op::Abandon { file } => self.abandon(file.get()),
            Op::Replay { .. } => unreachable!("replays are resolved in apply"),
        }
        let open = self.t.open_files();
        assert_eq!(open, self.files.len(), "open_files() disagrees with the files declared and not finished");
        assert!(open <= MAX_OPEN_FILES, "open_files() = {open} exceeds MAX_OPEN_FILES");
    }

    fn size(&self, file: u64, s: Size) -> u64 {
        match s {
            Size::Chunks { full, tail } => u64::from(full % 4) * CS + [0, 1, 1000, CS - 1][usize::from(tail % 4)],
            Size::Declared => self.files.get(&file).map_or(0, |f| f.size),
            Size::Raw(v) => v,
        }
    }

    fn dir(&mut self, id: u64, parent: u64, name: &[u8], mode: u32) {
        let r = self.t.dir(&DirEntry { id, parent, name, mode, mtime: Time::default() });
        self.seen(0, &r);
        let parent_depth = self.dirs.get(&parent).map(|d| d.depth);
        match r {
            Ok(Step::Accepted) => {
                assert!(name_ok(name), "dir {id} accepted with bad name {name:?}");
                assert!(!self.dirs.contains_key(&id), "dir {id} accepted a second time");
                let depth =
                    parent_depth.unwrap_or_else(|| panic!("dir {id} accepted under undeclared parent {parent}")) + 1;
                assert!(depth <= MAX_DEPTH, "dir {id} accepted at depth {depth}");
                self.dirs.insert(id, MDir { parent, name: name.to_vec(), depth });
            }
            Ok(Step::NotYet) => {
                assert!(parent_depth.is_none(), "dir {id}: NotYet although parent {parent} is declared")
            }
            Ok(s) => panic!("dir {id}: unexpected {s:?}"),
            Err(e) => assert!(
                !name_ok(name) || self.dirs.contains_key(&id) || parent_depth.is_some_and(|d| d + 1 > MAX_DEPTH),
                "dir {id} under {parent} named {name:?} refused for no reason: {e}"
            ),
        }
    }

    fn link(&mut self, parent: u64, name: &[u8], target: &[u8]) {
        let r = self.t.link(&LinkEntry { parent, name, target, mtime: Time::default() });
        self.seen(1, &r);
        let valid = name_ok(name) && target_ok(target);
        let expect = if !valid {
            None
        } else if self.dirs.contains_key(&parent) {
            Some(Step::Accepted)
        } else {
            Some(Step::NotYet)
        };
        assert_eq!(r.ok(), expect, "link {name:?} -> {target:?} under {parent}");
    }

    fn file_start(&mut self, id: u64, parent: u64, name: &[u8], size: u64) {
        let r = self.t.file_start(&FileStart { id, parent, name, size, mode: 0o644, mtime: Time::default() });
        self.seen(2, &r);
        let parent_known = self.dirs.contains_key(&parent);
        match r {
            Ok(Step::Accepted) => {
                assert!(name_ok(name), "file {id} accepted with bad name {name:?}");
                assert!(size <= MAX_FILE_SIZE, "file {id} accepted with size {size}");
                assert!(
                    !self.files.contains_key(&id) && !self.dead.contains(&id),
                    "file {id} declared twice and accepted"
                );
                assert!(parent_known, "file {id} accepted under undeclared {parent}");
                assert!(self.files.len() < MAX_OPEN_FILES, "file {id} accepted beyond MAX_OPEN_FILES");
                // File ids are unique in a session (frame.rs: "File id, unique in the session"),
                // completed ones included: a second declaration would commit a second file.
                assert!(!self.completed.contains(&id), "file {id} declared again after it completed, and accepted");
                self.files.insert(
                    id,
                    MFile {
                        size,
                        chunks: size.div_ceil(CS),
                        claimed: HashSet::new(),
                        pending: 0,
                        written: 0,
                        end: None,
                    },
                );
            }
            Ok(Step::NotYet) => {
                assert!(!parent_known, "file {id}: NotYet although parent {parent} is declared")
            }
            Ok(s) => panic!("file_start {id}: unexpected {s:?}"),
            Err(e) => assert!(
                !name_ok(name)
                    || size > MAX_FILE_SIZE
                    || self.files.contains_key(&id)
                    || self.dead.contains(&id)
                    || self.completed.contains(&id)
                    || (parent_known && self.files.len() >= MAX_OPEN_FILES),
                "file {id} refused for no reason: {e}"
            ),
        }
    }

    fn chunk(&mut self, file: u64, offset: u64, len: usize) {
        let r = self.t.chunk(file, offset, len);
        self.seen(3, &r);
        match r {
            Ok(Step::Discard) => {
                assert!(self.dead.contains(&file), "chunk of file {file} discarded but the file was not abandoned")
            }
            Ok(Step::NotYet) => assert!(
                !self.files.contains_key(&file) && !self.dead.contains(&file) && !self.completed.contains(&file),
                "chunk of file {file}: NotYet although the file is known"
            ),
            Ok(Step::Accepted) => {
                let f = self
                    .files
                    .get_mut(&file)
                    .unwrap_or_else(|| panic!("chunk accepted for file {file} that is not open"));
                assert_eq!(offset % CS, 0, "misaligned chunk accepted");
                let idx = offset / CS;
                assert!(idx < f.chunks, "chunk {idx} of {} accepted", f.chunks);
                assert_eq!(len as u64, (f.size - offset).min(CS), "chunk of the wrong length accepted");
                assert!(f.claimed.insert(idx), "duplicate chunk {idx} accepted");
                f.pending += 1;
            }
            Ok(s) => panic!("chunk: unexpected {s:?}"),
            // Nothing more may arrive for a completed file.
            Err(_) if self.completed.contains(&file) => {}
            Err(e) => {
                let f = self.files.get(&file).unwrap_or_else(|| panic!("chunk for unopened file {file} refused: {e}"));
                let idx = offset / CS;
                assert!(
                    !offset.is_multiple_of(CS)
                        || idx >= f.chunks
                        || len as u64 != (f.size - offset).min(CS)
                        || f.claimed.contains(&idx),
                    "good chunk {idx} of file {file} refused: {e}"
                );
            }
        }
    }

    fn chunk_written(&mut self, file: u64) {
        let expect = match self.files.get_mut(&file) {
            // Calling it for a chunk that was never accepted breaks the caller contract.
            Some(f) if f.pending == 0 => return,
            Some(f) => {
                f.pending -= 1;
                f.written += 1;
                f.end.is_some() && f.written == f.chunks
            }
            None => false,
        };
        let s = self.t.chunk_written(file);
        self.seen(4, &Ok::<_, ()>(s.clone()));
        if !self.files.contains_key(&file) {
            assert_eq!(s, Step::Discard, "chunk_written for a file that is not open");
        } else if expect {
            self.expect_complete(file, s);
        } else {
            assert_eq!(s, Step::Accepted, "chunk_written of file {file}");
        }
    }

    fn file_end(&mut self, file: u64, size: u64, digest: Option<[u8; 32]>) {
        let r = self.t.file_end(&FileEnd { file, size, digest });
        self.seen(5, &r);
        match r {
            Ok(Step::Discard) => {
                assert!(self.dead.contains(&file), "file_end of {file} discarded but the file was not abandoned")
            }
            Ok(Step::NotYet) => assert!(
                !self.files.contains_key(&file) && !self.dead.contains(&file) && !self.completed.contains(&file),
                "file_end of {file}: NotYet although the file is known"
            ),
            Ok(s @ (Step::Accepted | Step::Complete(_))) => {
                let f = self
                    .files
                    .get_mut(&file)
                    .unwrap_or_else(|| panic!("file_end accepted for {file} that is not open"));
                assert!(f.end.is_none(), "file {file} ended twice and accepted");
                assert_eq!(size, f.size, "file_end of {file} with the wrong size accepted");
                f.end = Some(digest);
                if f.written == f.chunks {
                    self.expect_complete(file, s);
                } else {
                    assert_eq!(s, Step::Accepted, "file {file} completed with chunks missing");
                }
            }
            Err(_) if self.completed.contains(&file) => {}
            Err(e) => {
                let f =
                    self.files.get(&file).unwrap_or_else(|| panic!("file_end of unopened file {file} refused: {e}"));
                assert!(f.end.is_some() || size != f.size, "good file_end of {file} refused: {e}");
            }
        }
    }

    fn expect_complete(&mut self, file: u64, s: Step) {
        let f = self.files.remove(&file).expect("model file");
        assert_eq!(
            s,
            Step::Complete(Completion { file, size: f.size, digest: f.end.flatten() }),
            "file {file} should complete now"
        );
        assert!(
            self.completed.insert(file),
            "file {file} completed twice (its id was accepted again after it completed)"
        );
    }

    fn abandon(&mut self, file: u64) {
        let expect = self.files.contains_key(&file) || self.dead.contains(&file);
        let got = self.t.abandon(file);
        self.features |= 1 << (6 * 5 + u32::from(got));
        assert_eq!(got, expect, "abandon({file})");
        if self.files.remove(&file).is_some() {
            self.dead.insert(file);
        }
    }

    /// Check the queries a receiver uses at the end of a session.
    pub fn check_final(&self) {
        let mut ids = self.t.open_file_ids();
        ids.sort_unstable();
        let mut want: Vec<u64> = self.files.keys().copied().collect();
        want.sort_unstable();
        assert_eq!(ids, want, "open_file_ids()");

        let order = self.t.dirs_deepest_first();
        assert_eq!(order.len(), self.dirs.len() - 1, "dirs_deepest_first() length");
        let mut last = u32::MAX;
        for id in &order {
            let m = self.dirs.get(id).expect("dirs_deepest_first() lists an unknown dir");
            let info = self.t.dir_info(*id).expect("dir_info of a listed dir");
            assert_eq!(info.depth, m.depth, "depth of dir {id}");
            assert_eq!(info.parent, m.parent, "parent of dir {id}");
            assert_eq!(&*info.name, &m.name[..], "name of dir {id}");
            assert!(info.depth <= last, "dirs_deepest_first() is not deepest first");
            last = info.depth;
        }
        // Paths are only rebuilt for a few dirs: a chain of MAX_DEPTH dirs would be quadratic.
        for id in order.iter().take(16) {
            let path = self.t.dir_path(*id);
            let parts: Vec<&[u8]> = path.split(|&b| b == b'/').collect();
            assert_eq!(parts.len() as u32, self.dirs[id].depth, "dir_path({id})");
            assert_eq!(parts.last().copied(), Some(&self.dirs[id].name[..]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(id: u64, parent: u64, full: u8, tail: u8) -> Op {
        Op::FileStart {
            id: Id::Raw(id),
            parent: Parent::Raw(parent),
            name: Name::Short(id as u8),
            size: Size::Chunks { full, tail },
        }
    }
    fn chunk(file: u64, index: u8) -> Op {
        Op::Chunk { file: Id::Raw(file), offset: Offset::Index(index), len: Len::Exact }
    }
    fn written(file: u64) -> Op {
        Op::ChunkWritten { file: Id::Raw(file) }
    }
    fn end(file: u64) -> Op {
        Op::FileEnd { file: Id::Raw(file), size: Size::Declared, digest: Some(1) }
    }

    /// The model must accept an ordinary session, so that whatever the fuzzer reports is the
    /// tracker's fault and not the model's.
    #[test]
    fn model_accepts_an_ordinary_session() {
        let ops = vec![
            Op::Dir { id: Id::Raw(1), parent: Parent::Root, name: Name::Short(1), mode: 0o755 },
            start(2, 1, 2, 5),
            chunk(2, 2),
            written(2),
            end(2),
            chunk(2, 0),
            chunk(2, 1),
            Op::Replay { back: 0 }, // duplicate chunk: refused
            written(2),
            written(2), // completes
            written(2), // nothing outstanding: skipped
            start(3, 0, 0, 0),
            end(3),            // an empty file completes at its end
            start(4, 6, 1, 0), // parent not declared yet
            Op::DirChain { first: 6, parent: Parent::Raw(1), count: 3 },
            Op::Replay { back: 1 }, // now it is
            chunk(4, 0),
            Op::Abandon { file: Id::Raw(4) },
            written(4), // discarded
            chunk(4, 0),
            Op::Link { parent: Parent::Raw(1), name: Name::Short(9), target: b"../x".to_vec() },
            Op::FileStartMany { first: 1000, count: 255 },
        ];
        let features = Harness::run(&ops);
        assert!(features.count_ones() >= 12, "{features:b}");

        let deep = [Op::DirChain { first: 5000, parent: Parent::Root, count: 255 }];
        Harness::run(&deep);
    }
}
