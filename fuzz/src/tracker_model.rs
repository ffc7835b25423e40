//! The `tracker` target: a sequence of [`Op`]s (derived with `arbitrary`) is applied to a
//! `Tracker::new(65536)` and, side by side, to a small reference model of what the receiver has
//! been told. Every answer of the tracker is checked against the model, so besides panics the
//! target catches accepted frames that should have been refused, refusals with no reason or for
//! the wrong reason, files that complete early, late or twice, and drift of `open_files()`.
//!
//! For a declaration (`dir`, `link`, `file_start`) the model predicts the exact answer, with the
//! checks in the tracker's order: the name (no name is reserved, `.linerate-` ones included), a file's size, the
//! id, the parent (`NotYet`), depth or files in flight (`Limit`), the name in use (a file open at
//! the same place, or any file declared in directory 0 this session), and for a pull
//! ([`Harness::for_pull`], used by the `pull_receiver` target) the one entry directory 0 may
//! receive.
//!
//! The model relies on the caller contract of `Tracker::chunk_written` (called once per chunk
//! that `Tracker::chunk` accepted); the target never calls it for a chunk it was not given.

use arbitrary::{Arbitrary, Unstructured};
use linerate_proto::caps::{MAX_DEPTH, MAX_NAME, MAX_OPEN_FILES, MAX_PATH};
use linerate_proto::frame::{DirEntry, FileEnd, FileStart, LinkEntry, Owner, SpecialEntry, SpecialKind, Time};
use linerate_proto::track::{Completion, Step, Tracker};
use linerate_proto::ProtoError;
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

/// An entry name: a valid short one, one like the receiver's old working names, or arbitrary bytes (empty, `.`, `..`, `/`,
/// NUL, too long).
#[derive(Arbitrary, Debug, Clone)]
pub enum Name {
    /// `n0` .. `n15` (`v % 16`); from 240 up, `.linerate-0` .. `.linerate-15`
    /// (ordinary names: no name is reserved).
    Short(u8),
    /// Any bytes.
    Raw(Vec<u8>),
}

impl Name {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Name::Short(v @ 240..) => format!(".linerate-{}", v % 16).into_bytes(),
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
    /// ids, each named `m<id>` (a name may be used once in the root); `count == 255` declares as
    /// many as it takes to pass `MAX_OPEN_FILES` by two.
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
    /// `Tracker::special`, last so that older seeds keep their meaning (the harness's tracker takes specials, as with `FLAG_DEVICES`)
    Special {
        /// Parent id.
        parent: Parent,
        /// Name.
        name: Name,
        /// Kind: a FIFO, socket, character or block device by `kind % 4`.
        kind: u8,
        /// Device number (major and minor both); non-zero is refused for a FIFO or socket.
        dev: u8,
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
    /// (parent, name): no second file may be declared there while this one is open.
    place: (u64, Vec<u8>),
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

/// The class of an answer to a declaration (`dir`, `link`, `file_start`): what the model
/// predicts, compared with what the tracker said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// `Ok(Step::NotYet)`: the parent is not declared yet.
    NotYet,
    /// `Ok(Step::Accepted)`.
    Accepted,
    /// Any other `Ok` step (never right for a declaration).
    OtherStep,
    /// `Err(ProtoError::BadName)`: a bad or reserved name, or a bad link target.
    BadName,
    /// `Err(ProtoError::Invalid)`: a file size beyond `MAX_FILE_SIZE`.
    Invalid,
    /// `Err(ProtoError::Violation)`: an id declared twice, a name in use, or (a pull) an entry
    /// beside the requested one.
    Violation,
    /// `Err(ProtoError::Limit)`: too deep, or too many files in flight.
    Limit,
    /// Any other error.
    OtherError,
}

/// The class of a tracker answer.
pub fn class_of(r: &Result<Step, ProtoError>) -> Class {
    match r {
        Ok(Step::NotYet) => Class::NotYet,
        Ok(Step::Accepted) => Class::Accepted,
        Ok(_) => Class::OtherStep,
        Err(ProtoError::BadName(_)) => Class::BadName,
        Err(ProtoError::Invalid(_)) => Class::Invalid,
        Err(ProtoError::Violation(_)) => Class::Violation,
        Err(ProtoError::Limit(_)) => Class::Limit,
        Err(_) => Class::OtherError,
    }
}

/// The tracker under test and the model it is checked against.
pub struct Harness {
    t: Tracker,
    dirs: HashMap<u64, MDir>,
    files: HashMap<u64, MFile>,
    dead: HashSet<u64>,
    completed: HashSet<u64>,
    /// (parent, name) of every open file.
    in_flight: HashSet<(u64, Vec<u8>)>,
    /// Names of the files ever accepted in directory 0.
    top_files: HashSet<Vec<u8>>,
    /// A pull: the one name directory 0 may receive, and whether it has.
    only: Option<(Vec<u8>, bool)>,
    /// Whether the one full-size bulk operation of this input has been used.
    big_used: bool,
    /// Operations applied so far, for [`Op::Replay`].
    history: Vec<Op>,
    /// Outcome classes seen so far.
    pub features: Features,
}

/// Whether a peer may declare an entry of this name: one path component (not empty, at most
/// `MAX_NAME` bytes, not `.` or `..`, no `/` or NUL); no name is reserved.
pub fn name_ok(n: &[u8]) -> bool {
    !n.is_empty()
        && n.len() <= MAX_NAME
        && n != b"."
        && n != b".."
        && !n.contains(&b'/')
        && !n.contains(&0)
}

/// Whether a symlink target is acceptable: not empty, at most `MAX_PATH` bytes, no NUL.
pub fn target_ok(t: &[u8]) -> bool {
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
        Self::with(Tracker::new(CHUNK_SIZE).with_specials(true), None)
    }

    /// A fresh `Tracker::for_pull(65536, name)` and an empty model that lets directory 0 receive
    /// one entry, named `name`.
    pub fn for_pull(name: &[u8]) -> Harness {
        Self::with(Tracker::for_pull(CHUNK_SIZE, name).with_specials(true), Some((name.to_vec(), false)))
    }

    fn with(t: Tracker, only: Option<(Vec<u8>, bool)>) -> Harness {
        let mut dirs = HashMap::new();
        dirs.insert(0, MDir { parent: 0, name: Vec::new(), depth: 0 });
        Harness {
            t,
            dirs,
            files: HashMap::new(),
            dead: HashSet::new(),
            completed: HashSet::new(),
            in_flight: HashSet::new(),
            top_files: HashSet::new(),
            only,
            big_used: false,
            history: Vec::new(),
            features: 0,
        }
    }

    /// The tracker under test.
    pub fn tracker(&self) -> &Tracker {
        &self.t
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
            Op::Dir { id, parent, name, mode } => {
                let _ = self.dir(id.get(), parent.get(), &name.bytes(), *mode);
            }
            Op::DirChain { first, parent, count } => {
                let n = if self.big(*count) { u64::from(MAX_DEPTH) + 2 } else { u64::from(*count % 16) };
                let mut p = parent.get();
                for i in 0..n {
                    let id = first.wrapping_add(i);
                    let _ = self.dir(id, p, b"c", 0o755);
                    p = id;
                }
            }
            Op::Link { parent, name, target } => {
                let _ = self.link(parent.get(), &name.bytes(), target);
            }
            Op::Special { parent, name, kind, dev } => {
                let _ = self.special(parent.get(), &name.bytes(), *kind, *dev);
            }
            Op::FileStart { id, parent, name, size } => {
                let id = id.get();
                let size = self.size(id, *size);
                let _ = self.file_start(id, parent.get(), &name.bytes(), size);
            }
            Op::FileStartMany { first, count } => {
                let n = if self.big(*count) {
                    (MAX_OPEN_FILES + 2).saturating_sub(self.files.len()) as u64
                } else {
                    u64::from(*count % 16)
                };
                for i in 0..n {
                    // Named after the id: a name is used once in the root, and ids are unique.
                    let id = first.wrapping_add(i);
                    let _ = self.file_start(id, 0, format!("m{id}").as_bytes(), 1);
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
                let _ = self.chunk(file, offset, len);
            }
            Op::ChunkWritten { file } => {
                self.chunk_written(file.get());
            }
            Op::FileEnd { file, size, digest } => {
                let file = file.get();
                let size = self.size(file, *size);
                let _ = self.file_end(file, size, digest.map(|v| [v; 32]));
            }
            Op::Abandon { file } => {
                self.abandon(file.get());
            }
            Op::Replay { .. } => unreachable!("replays are resolved in apply"),
        }
    }

    fn size(&self, file: u64, s: Size) -> u64 {
        match s {
            Size::Chunks { full, tail } => u64::from(full % 4) * CS + [0, 1, 1000, CS - 1][usize::from(tail % 4)],
            Size::Declared => self.files.get(&file).map_or(0, |f| f.size),
            Size::Raw(v) => v,
        }
    }

    fn check_open(&self) {
        let open = self.t.open_files();
        assert_eq!(open, self.files.len(), "open_files() disagrees with the files declared and not finished");
        assert!(open <= MAX_OPEN_FILES, "open_files() = {open} exceeds MAX_OPEN_FILES");
    }

    /// Whether a pull refuses an entry declared as `name` in `parent`: in directory 0 only the
    /// requested name, once.
    fn beside_request(&self, parent: u64, name: &[u8]) -> bool {
        match &self.only {
            Some((only, seen)) if parent == 0 => only[..] != *name || *seen,
            _ => false,
        }
    }

    /// An entry was accepted in `parent`: a pull's one entry in directory 0 is used up.
    fn accepted_in(&mut self, parent: u64) {
        if let Some((_, seen)) = self.only.as_mut().filter(|_| parent == 0) {
            *seen = true;
        }
    }

    /// What `Tracker::dir` must answer, checks in the tracker's order: name, id, parent, depth,
    /// a pull's request.
    fn expect_dir(&self, id: u64, parent: u64, name: &[u8]) -> Class {
        if !name_ok(name) {
            Class::BadName
        } else if self.dirs.contains_key(&id) {
            Class::Violation
        } else if let Some(p) = self.dirs.get(&parent) {
            if p.depth + 1 > MAX_DEPTH {
                Class::Limit
            } else if self.beside_request(parent, name) {
                Class::Violation
            } else {
                Class::Accepted
            }
        } else {
            Class::NotYet
        }
    }

    /// What `Tracker::link` must answer: name, target, parent, a pull's request.
    fn expect_link(&self, parent: u64, name: &[u8], target: &[u8]) -> Class {
        if !name_ok(name) || !target_ok(target) {
            Class::BadName
        } else if !self.dirs.contains_key(&parent) {
            Class::NotYet
        } else if self.beside_request(parent, name) {
            Class::Violation
        } else {
            Class::Accepted
        }
    }

    /// What `Tracker::file_start` must answer: name, size, id (open, abandoned or completed),
    /// parent, files in flight, the name in use (by an open file there, or by any file declared
    /// in directory 0 this session), a pull's request.
    fn expect_file_start(&self, id: u64, parent: u64, name: &[u8], size: u64) -> Class {
        if !name_ok(name) {
            Class::BadName
        } else if size > MAX_FILE_SIZE {
            Class::Invalid
        } else if self.files.contains_key(&id) || self.dead.contains(&id) || self.completed.contains(&id) {
            // File ids are unique in a session (frame.rs: "File id, unique in the session"),
            // completed ones included: a second declaration would commit a second file.
            Class::Violation
        } else if !self.dirs.contains_key(&parent) {
            Class::NotYet
        } else if self.files.len() >= MAX_OPEN_FILES {
            Class::Limit
        } else if self.in_flight.contains(&(parent, name.to_vec()))
            || (parent == 0 && self.top_files.contains(name))
            || self.beside_request(parent, name)
        {
            Class::Violation
        } else {
            Class::Accepted
        }
    }

    /// `Tracker::dir`, checked against the model; returns the tracker's answer.
    pub fn dir(&mut self, id: u64, parent: u64, name: &[u8], mode: u32) -> Result<Step, ProtoError> {
        let want = self.expect_dir(id, parent, name);
        let r = self.t.dir(&DirEntry { id, parent, name, mode, mtime: Time::default(), owner: Default::default() });
        self.seen(0, &r);
        assert_eq!(class_of(&r), want, "dir {id} under {parent} named {name:?}: {r:?}");
        if want == Class::Accepted {
            let depth = self.dirs[&parent].depth + 1;
            self.dirs.insert(id, MDir { parent, name: name.to_vec(), depth });
            self.accepted_in(parent);
        }
        self.check_open();
        r
    }

    /// `Tracker::link`, checked against the model; returns the tracker's answer.
    pub fn link(&mut self, parent: u64, name: &[u8], target: &[u8]) -> Result<Step, ProtoError> {
        let want = self.expect_link(parent, name, target);
        let r = self.t.link(&LinkEntry { parent, name, target, mtime: Time::default(), owner: Default::default() });
        self.seen(1, &r);
        assert_eq!(class_of(&r), want, "link {name:?} -> {target:?} under {parent}: {r:?}");
        if want == Class::Accepted {
            self.accepted_in(parent);
        }
        self.check_open();
        r
    }

    /// `Tracker::special`, checked against the model (a link's rules, and no device number on a
    /// FIFO or socket); returns the tracker's answer.
    pub fn special(&mut self, parent: u64, name: &[u8], kind: u8, dev: u8) -> Result<Step, ProtoError> {
        let kind =
            [SpecialKind::Fifo, SpecialKind::Socket, SpecialKind::Char, SpecialKind::Block][usize::from(kind % 4)];
        // A link's answer (any valid target), with the device-number check after the name's.
        let want = match self.expect_link(parent, name, b"t") {
            Class::BadName => Class::BadName,
            _ if !kind.is_device() && dev != 0 => Class::Invalid,
            c => c,
        };
        let (major, minor) = (u32::from(dev), u32::from(dev));
        let e = SpecialEntry {
            parent,
            name,
            kind,
            major,
            minor,
            mode: 0o644,
            mtime: Time::default(),
            owner: Owner::default(),
        };
        let r = self.t.special(&e);
        self.seen(7, &r);
        assert_eq!(class_of(&r), want, "special {kind:?} {dev} {name:?} under {parent}: {r:?}");
        if want == Class::Accepted {
            self.accepted_in(parent);
        }
        self.check_open();
        r
    }

    /// `Tracker::file_start`, checked against the model; returns the tracker's answer.
    pub fn file_start(&mut self, id: u64, parent: u64, name: &[u8], size: u64) -> Result<Step, ProtoError> {
        let want = self.expect_file_start(id, parent, name, size);
        let r = self.t.file_start(&FileStart {
            id,
            parent,
            name,
            size,
            mode: 0o644,
            mtime: Time::default(),
            owner: Default::default(),
        });
        self.seen(2, &r);
        assert_eq!(class_of(&r), want, "file {id} under {parent} named {name:?}, {size} bytes: {r:?}");
        if want == Class::Accepted {
            let place = (parent, name.to_vec());
            self.in_flight.insert(place.clone());
            if parent == 0 {
                self.top_files.insert(name.to_vec());
            }
            self.accepted_in(parent);
            self.files.insert(
                id,
                MFile {
                    place,
                    size,
                    chunks: size.div_ceil(CS),
                    claimed: HashSet::new(),
                    pending: 0,
                    written: 0,
                    end: None,
                },
            );
        }
        self.check_open();
        r
    }

    /// `Tracker::chunk`, checked against the model; returns the tracker's answer.
    pub fn chunk(&mut self, file: u64, offset: u64, len: usize) -> Result<Step, ProtoError> {
        let r = self.t.chunk(file, offset, len);
        self.seen(3, &r);
        match &r {
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
        self.check_open();
        r
    }

    /// `Tracker::chunk_written`, for a chunk accepted earlier, checked against the model; `None`
    /// (and no call) when the file has no accepted chunk outstanding, which would break the
    /// caller contract.
    pub fn chunk_written(&mut self, file: u64) -> Option<Step> {
        let expect = match self.files.get_mut(&file) {
            // Calling it for a chunk that was never accepted breaks the caller contract.
            Some(f) if f.pending == 0 => return None,
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
            self.expect_complete(file, s.clone());
        } else {
            assert_eq!(s, Step::Accepted, "chunk_written of file {file}");
        }
        self.check_open();
        Some(s)
    }

    /// `Tracker::file_end`, checked against the model; returns the tracker's answer.
    pub fn file_end(&mut self, file: u64, size: u64, digest: Option<[u8; 32]>) -> Result<Step, ProtoError> {
        let r = self.t.file_end(&FileEnd { file, size, digest });
        self.seen(5, &r);
        match &r {
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
                    self.expect_complete(file, s.clone());
                } else {
                    assert_eq!(*s, Step::Accepted, "file {file} completed with chunks missing");
                }
            }
            Err(_) if self.completed.contains(&file) => {}
            Err(e) => {
                let f =
                    self.files.get(&file).unwrap_or_else(|| panic!("file_end of unopened file {file} refused: {e}"));
                assert!(f.end.is_some() || size != f.size, "good file_end of {file} refused: {e}");
            }
        }
        self.check_open();
        r
    }

    /// Forget open file `file`: its name is free again.
    fn close(&mut self, file: u64) -> Option<MFile> {
        let f = self.files.remove(&file)?;
        self.in_flight.remove(&f.place);
        Some(f)
    }

    fn expect_complete(&mut self, file: u64, s: Step) {
        let f = self.close(file).expect("model file");
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

    /// `Tracker::abandon`, checked against the model; returns the tracker's answer.
    pub fn abandon(&mut self, file: u64) -> bool {
        let expect = self.files.contains_key(&file) || self.dead.contains(&file);
        let got = self.t.abandon(file);
        self.features |= 1 << (6 * 5 + u32::from(got));
        assert_eq!(got, expect, "abandon({file})");
        if self.close(file).is_some() {
            self.dead.insert(file);
        }
        self.check_open();
        got
    }

    /// `Tracker::skip` (a sync offer that needs nothing), checked against the model.
    pub fn skip(&mut self, file: u64) -> bool {
        let expect = self.files.contains_key(&file);
        let got = self.t.skip(file);
        self.features |= 1 << (6 * 5 + 2 + u32::from(got));
        assert_eq!(got, expect, "skip({file})");
        if self.close(file).is_some() {
            self.completed.insert(file);
        }
        self.check_open();
        got
    }

    /// `Tracker::prefill` (chunks a sync receiver holds already), checked against the model.
    /// Ranges are walked chunk by chunk, as the tracker does, so keep them short.
    pub fn prefill(&mut self, file: u64, have: &[(u64, u64)]) -> u64 {
        let mut expect = 0;
        if let Some(f) = self.files.get_mut(&file) {
            for &(first, count) in have {
                for i in first..first.saturating_add(count).min(f.chunks) {
                    if f.claimed.insert(i) {
                        f.written += 1;
                        expect += 1;
                    }
                }
            }
        }
        let got = self.t.prefill(file, have.iter().copied());
        self.features |= 1 << (6 * 5 + 4 + u32::from(got > 0));
        assert_eq!(got, expect, "prefill({file}, {have:?})");
        self.check_open();
        got
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
            Op::Special { parent: Parent::Raw(1), name: Name::Short(10), kind: 2, dev: 1 },
            Op::Special { parent: Parent::Raw(1), name: Name::Short(11), kind: 0, dev: 1 },
            Op::FileStartMany { first: 1000, count: 255 },
        ];
        let features = Harness::run(&ops);
        assert!(features.count_ones() >= 12, "{features:b}");

        let deep = [Op::DirChain { first: 5000, parent: Parent::Root, count: 255 }];
        Harness::run(&deep);
    }

    fn class(r: Result<Step, ProtoError>) -> Class {
        class_of(&r)
    }

    #[test]
    fn model_reserves_no_name() {
        assert!(name_ok(b".linerate-") && name_ok(b".linerate-journal") && name_ok(b".linerate-settings"));
        let mut h = Harness::new();
        assert_eq!(class(h.dir(1, 0, b".linerate-d", 0o755)), Class::Accepted);
        assert_eq!(class(h.link(0, b".linerate-l", b"x")), Class::Accepted);
        assert_eq!(class(h.file_start(1, 0, b".linerate-journal", 1)), Class::Accepted);
        assert_eq!(Name::Short(241).bytes(), b".linerate-1");
        assert_eq!(Name::Short(239).bytes(), b"n15");
    }

    #[test]
    fn model_refuses_a_second_file_of_one_name_while_the_first_is_open() {
        let mut h = Harness::new();
        assert_eq!(class(h.dir(1, 0, b"d", 0o755)), Class::Accepted);
        assert_eq!(class(h.file_start(10, 1, b"a", 3)), Class::Accepted);
        assert_eq!(class(h.file_start(11, 1, b"a", 3)), Class::Violation);
        assert_eq!(class(h.file_start(11, 1, b"b", 3)), Class::Accepted, "the refused id is still free");
        // Another directory, or a directory or link of that name, is no conflict for the tracker.
        assert_eq!(class(h.dir(2, 0, b"e", 0o755)), Class::Accepted);
        assert_eq!(class(h.file_start(12, 2, b"a", 3)), Class::Accepted);
        assert_eq!(class(h.link(1, b"a", b"t")), Class::Accepted);
        // Abandoned: the name is free again.
        assert!(h.abandon(10));
        assert_eq!(class(h.file_start(13, 1, b"a", 3)), Class::Accepted);
        // Completed: free again too.
        assert_eq!(class(h.chunk(13, 0, 3)), Class::Accepted);
        assert_eq!(h.chunk_written(13), Some(Step::Accepted));
        assert!(matches!(h.file_end(13, 3, None), Ok(Step::Complete(_))));
        assert_eq!(class(h.file_start(14, 1, b"a", 0)), Class::Accepted);
        // Skipped (sync): free again.
        assert!(h.skip(14));
        assert_eq!(class(h.file_start(15, 1, b"a", 0)), Class::Accepted);
        h.check_final();
    }

    #[test]
    fn model_refuses_a_top_level_file_name_twice_in_a_session() {
        let mut h = Harness::new();
        assert_eq!(class(h.file_start(1, 0, b"a", 0)), Class::Accepted);
        assert!(matches!(h.file_end(1, 0, None), Ok(Step::Complete(_))));
        assert_eq!(class(h.file_start(2, 0, b"a", 0)), Class::Violation, "completed, but still refused");
        assert_eq!(class(h.file_start(3, 0, b"b", 0)), Class::Accepted);
        assert!(h.abandon(3));
        assert_eq!(class(h.file_start(4, 0, b"b", 0)), Class::Violation, "abandoned, but still refused");
        // Only files count: a directory or link of that name in the root is the tracker's
        // business no more than it was.
        assert_eq!(class(h.dir(5, 0, b"c", 0o755)), Class::Accepted);
        assert_eq!(class(h.file_start(6, 0, b"c", 0)), Class::Accepted);
        assert_eq!(class(h.link(0, b"c", b"t")), Class::Accepted);
    }

    #[test]
    fn model_checks_in_the_trackers_order() {
        let mut h = Harness::new();
        // A reused id is refused before its parent is looked up.
        assert_eq!(class(h.file_start(1, 0, b"a", 0)), Class::Accepted);
        assert_eq!(class(h.file_start(1, 77, b"z", 0)), Class::Violation);
        assert_eq!(class(h.dir(5, 0, b"d", 0o755)), Class::Accepted);
        assert_eq!(class(h.dir(5, 77, b"d", 0o755)), Class::Violation);
        // The size before the id.
        assert_eq!(class(h.file_start(1, 0, b"a", u64::MAX)), Class::Invalid);
        // A name in use only counts once the parent is known: NotYet first.
        assert_eq!(class(h.file_start(2, 9, b"a", 0)), Class::NotYet);
        // The cap on files in flight before the name in use.
        let mut h = Harness::new();
        for id in 0..MAX_OPEN_FILES as u64 {
            assert_eq!(class(h.file_start(id, 0, format!("m{id}").as_bytes(), 1)), Class::Accepted);
        }
        assert_eq!(class(h.file_start(u64::MAX, 0, b"m0", 1)), Class::Limit);
        assert!(h.abandon(0));
        assert_eq!(class(h.file_start(u64::MAX, 0, b"m1", 1)), Class::Violation);
        assert_eq!(class(h.file_start(u64::MAX, 0, b"m0", 1)), Class::Violation, "declared in the root before");
    }

    #[test]
    fn model_lets_a_pull_receive_the_requested_tree_only() {
        let mut h = Harness::for_pull(b"tree");
        // NotYet, bad names, reused ids come first; a refused entry does not use up the slot.
        assert_eq!(class(h.dir(1, 7, b"x", 0o755)), Class::NotYet);
        assert_eq!(class(h.dir(1, 0, b"bad/name", 0o755)), Class::BadName);
        assert_eq!(class(h.dir(1, 0, b"other", 0o755)), Class::Violation);
        assert_eq!(class(h.link(0, b"tree2", b"/etc")), Class::Violation);
        assert_eq!(class(h.file_start(5, 0, b"evil", 3)), Class::Violation);
        assert_eq!(class(h.dir(1, 0, b"tree", 0o755)), Class::Accepted);
        assert_eq!(class(h.dir(1, 0, b"tree", 0o755)), Class::Violation);
        assert_eq!(class(h.dir(2, 0, b"tree", 0o755)), Class::Violation, "the requested name twice");
        assert_eq!(class(h.link(0, b"tree", b"x")), Class::Violation);
        assert_eq!(class(h.file_start(6, 0, b"tree", 0)), Class::Violation);
        // Beneath it, anything goes.
        assert_eq!(class(h.dir(2, 1, b"tree", 0o755)), Class::Accepted);
        assert_eq!(class(h.file_start(6, 2, b"f", 0)), Class::Accepted);
        assert_eq!(class(h.link(1, b"l", b"/etc/passwd")), Class::Accepted);
        assert_eq!(class(h.dir(1, 7, b"x", 0o755)), Class::Violation, "reused id, even under an unknown parent");
        assert_eq!(h.tracker().dir_path(2), b"tree/tree");
        h.check_final();

        // A single file, then the same name again.
        let mut h = Harness::for_pull(b"tree");
        assert_eq!(class(h.file_start(1, 0, b"tree", 2)), Class::Accepted);
        assert_eq!(class(h.file_start(2, 0, b"tree", 2)), Class::Violation);
        assert!(h.abandon(1));
        assert_eq!(class(h.file_start(3, 0, b"tree", 2)), Class::Violation);
        assert_eq!(class(h.dir(4, 0, b"tree", 0o755)), Class::Violation);

        // A single link.
        let mut h = Harness::for_pull(b"tree");
        assert_eq!(class(h.link(0, b"tree", b"elsewhere")), Class::Accepted);
        assert_eq!(class(h.link(0, b"tree", b"elsewhere")), Class::Violation);
        assert_eq!(class(h.dir(1, 0, b"tree", 0o755)), Class::Violation);
    }

    #[test]
    fn model_follows_skip_and_prefill() {
        let mut h = Harness::new();
        let size = 3 * CS + 7;
        assert_eq!(class(h.file_start(1, 0, b"f", size)), Class::Accepted);
        assert_eq!(h.prefill(1, &[(0, 2), (1, 1), (9, 4)]), 2);
        assert_eq!(class(h.chunk(1, 0, CS as usize)), Class::Violation);
        assert_eq!(class(h.chunk(1, 3 * CS, 7)), Class::Accepted);
        assert_eq!(h.chunk_written(1), Some(Step::Accepted));
        assert_eq!(h.prefill(1, &[(2, 1)]), 1);
        assert!(matches!(h.file_end(1, size, None), Ok(Step::Complete(_))));
        assert_eq!(h.prefill(1, &[(0, 1)]), 0);
        assert_eq!(class(h.file_start(2, 0, b"g", 1)), Class::Accepted);
        assert!(h.skip(2));
        assert!(!h.skip(2));
        assert!(h.chunk(2, 0, 1).is_err());
        h.check_final();
    }
}
