//! The receiver's bookkeeping: which directories and files a sender has declared, which chunks
//! have arrived and been written, and when a file is complete.
//!
//! Every frame a sender sends about the tree passes through a [`Tracker`] before the receiver
//! touches the filesystem, so out-of-range offsets, duplicate or missing chunks, sizes that do not
//! add up, re-declared ids, bad names and runaway nesting are all refused here, in one place,
//! without I/O. Frames may arrive on different streams in any order; a frame that refers to
//! something not yet declared gets [`Step::NotYet`] and the caller retries it once more is known.

use crate::caps::{MAX_DEPTH, MAX_LINK_TARGETS, MAX_OPEN_FILES, MAX_PENDING_LINKS};
use crate::frame::{DirEntry, FileEnd, FileStart, HardLink, Hole, LinkEntry, Owner, SpecialEntry, Time};
use crate::{name, ProtoError};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// Largest file size a sender may declare (the largest `off_t`).
pub const MAX_FILE_SIZE: u64 = i64::MAX as u64;

/// Outcome of feeding one frame to the tracker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The frame refers to a directory or file not declared yet; retry later.
    NotYet,
    /// Accepted; act on it.
    Accepted,
    /// The frame belongs to a file already given up on; drop it.
    Discard,
    /// Accepted, and the file is now complete: commit it.
    Complete(Completion),
}

/// A file whose every chunk has been written and whose end has been declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// File id.
    pub file: u64,
    /// Its size.
    pub size: u64,
    /// The sender's BLAKE3 digest, when verification was asked for.
    pub digest: Option<[u8; 32]>,
}

/// What to do with a hard link ([`Tracker::hard_link`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkStep {
    /// The parent directory or the first name is not declared yet; retry later.
    NotYet,
    /// The first name is committed (or was up to date): link to `name` in directory `dir` now.
    Now {
        /// Directory id of the first name.
        dir: u64,
        /// The first name.
        name: Arc<[u8]>,
    },
    /// The first name is still in flight: the link is kept and handed out by
    /// [`Tracker::take_links`] once the file is committed or has failed.
    Queued,
    /// The first name failed: this name cannot be linked (report it once).
    TargetFailed,
}

/// Names waiting for a first name that is now settled ([`Tracker::take_links`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettledLinks {
    /// Whether the first name was committed (link them) or failed (report them).
    pub ok: bool,
    /// Directory id of the first name.
    pub dir: u64,
    /// The first name.
    pub name: Arc<[u8]>,
    /// The names to link: `(parent directory id, name)`.
    pub links: Vec<(u64, Box<[u8]>)>,
}

/// Where a file announced as having several names stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TargetState {
    /// Announced, declared, in flight, or complete and being committed.
    Waiting,
    /// Under its first name on disk (committed, or found up to date).
    Committed,
    /// Given up on.
    Failed,
}

/// A file announced with `LINK_TARGET`: where it lands and the names waiting for it.
#[derive(Debug)]
struct Target {
    place: Option<(u64, Arc<[u8]>)>,
    state: TargetState,
    pending: Vec<(u64, Box<[u8]>)>,
}

/// A declared directory.
#[derive(Debug, Clone)]
pub struct DirInfo {
    /// Parent directory id (the root is its own parent).
    pub parent: u64,
    /// Name in the parent (empty for the root).
    pub name: Box<[u8]>,
    /// Permission bits to apply at the end.
    pub mode: u32,
    /// Modification time to apply at the end.
    pub mtime: Time,
    /// The sender's owner of it (applied at the end with the owner flags).
    pub owner: Owner,
    /// Nesting depth below the destination root.
    pub depth: u32,
}

#[derive(Debug)]
struct FileInfo {
    /// Where it goes: no two files in flight may share it.
    place: (u64, Arc<[u8]>),
    size: u64,
    chunks: u64,
    claimed: RangeSet,
    written: u64,
    end: Option<Option<[u8; 32]>>,
}

/// Set of u64 kept as disjoint inclusive ranges, so memory follows the number of gaps, not the
/// number of members (chunk indexes of a file; ids of completed files, which the sender assigns
/// densely).
#[derive(Debug, Default)]
struct RangeSet(BTreeMap<u64, u64>); // start -> end (inclusive)

impl RangeSet {
    fn contains(&self, i: u64) -> bool {
        matches!(self.0.range(..=i).next_back(), Some((_, &e)) if i <= e)
    }

    /// Insert `i`; false if it was already present.
    fn insert(&mut self, i: u64) -> bool {
        let prev = self.0.range(..=i).next_back().map(|(&s, &e)| (s, e));
        if matches!(prev, Some((_, e)) if i <= e) {
            return false;
        }
        let joins_prev = prev.filter(|&(_, e)| e + 1 == i).map(|(s, _)| s);
        let next_end = i.checked_add(1).and_then(|n| self.0.remove(&n));
        let start = joins_prev.unwrap_or(i);
        self.0.insert(start, next_end.unwrap_or(i));
        true
    }

    /// Insert every member of `first..=last` (`first <= last`); false, and nothing changed, if
    /// any of them was already present. Costs a few map operations whatever the range's length.
    fn insert_range(&mut self, first: u64, last: u64) -> bool {
        if matches!(self.0.range(..=last).next_back(), Some((_, &e)) if e >= first) {
            return false;
        }
        let prev = first.checked_sub(1).and_then(|p| self.0.range(..=p).next_back().map(|(&s, &e)| (s, e)));
        let start = match prev {
            Some((s, e)) if e + 1 == first => s,
            _ => first,
        };
        let end = last.checked_add(1).and_then(|n| self.0.remove(&n)).unwrap_or(last);
        self.0.insert(start, end);
        true
    }
}

/// The receiver's view of one session's tree.
#[derive(Debug)]
pub struct Tracker {
    chunk_size: u64,
    dirs: HashMap<u64, DirInfo>,
    files: HashMap<u64, FileInfo>,
    /// Files given up on: whatever still arrives for them is dropped (ranges, as for `done`).
    dead: RangeSet,
    /// Files completed: an id is never reused, and nothing more may arrive for it.
    done: RangeSet,
    /// Files in flight by (parent, name): two files may never be written to one name at once.
    in_flight: HashSet<(u64, Arc<[u8]>)>,
    /// Names of files declared in the target (directory 0) this session: each at most once, so
    /// two sources of one name can never be mixed into one file (`cp`'s "will not overwrite
    /// just-created").
    top_files: HashSet<Box<[u8]>>,
    /// A pull: the one name the target may receive, and whether it has.
    only: Option<(Box<[u8]>, bool)>,
    /// The session sends devices, FIFOs and sockets (`FLAG_DEVICES`).
    specials: bool,
    /// `-H`: files announced as having further names (at most [`MAX_LINK_TARGETS`]).
    targets: HashMap<u64, Target>,
    /// Names waiting in `targets` (at most [`MAX_PENDING_LINKS`]).
    pending_links: usize,
}

impl Tracker {
    /// A tracker for a session with this chunk size; directory 0 is the destination root.
    pub fn new(chunk_size: u32) -> Tracker {
        let mut dirs = HashMap::new();
        dirs.insert(
            0,
            DirInfo {
                parent: 0,
                name: Box::default(),
                mode: 0,
                mtime: Time::default(),
                owner: Owner::default(),
                depth: 0,
            },
        );
        Tracker {
            chunk_size: u64::from(chunk_size.max(1)),
            dirs,
            files: HashMap::new(),
            dead: RangeSet::default(),
            done: RangeSet::default(),
            in_flight: HashSet::new(),
            top_files: HashSet::new(),
            only: None,
            specials: false,
            targets: HashMap::new(),
            pending_links: 0,
        }
    }

    /// Accept `Special` entries (a session with `FLAG_DEVICES`); without this they are refused.
    pub fn with_specials(mut self, on: bool) -> Tracker {
        self.specials = on;
        self
    }

    /// A tracker for the receiving side of a pull that asked for `name`: the target may receive
    /// that one entry, once, and everything else must descend from it. Whatever a server sends
    /// outside the tree the client asked for (a file beside it, a mode for the target's other
    /// entries, a link, a `Keep` for a directory that is not in it) is a violation, refused before
    /// anything is touched (scp's CVE-2019-6111).
    pub fn for_pull(chunk_size: u32, name: &[u8]) -> Tracker {
        let mut t = Tracker::new(chunk_size);
        t.only = Some((name.into(), false));
        t
    }

    /// Check an entry declared in the target (directory 0) against a pull's request.
    fn top_entry(&mut self, parent: u64, name: &[u8]) -> Result<(), ProtoError> {
        let Some((only, seen)) = self.only.as_mut().filter(|_| parent == 0) else { return Ok(()) };
        if **only != *name {
            return Err(ProtoError::Violation(format!(
                "the sender declared '{}' beside the requested '{}': only the requested tree may be sent",
                name::escape(name),
                name::escape(only)
            )));
        }
        if std::mem::replace(seen, true) {
            return Err(ProtoError::Violation(format!(
                "the sender declared the requested '{}' twice",
                name::escape(name)
            )));
        }
        Ok(())
    }

    /// A directory declaration.
    pub fn dir(&mut self, d: &DirEntry) -> Result<Step, ProtoError> {
        name::validate_entry(d.name)?;
        if self.dirs.contains_key(&d.id) {
            return Err(ProtoError::Violation(format!("directory id {} declared twice", d.id)));
        }
        let Some(parent) = self.dirs.get(&d.parent) else {
            return Ok(Step::NotYet);
        };
        let depth = parent.depth + 1;
        if depth > MAX_DEPTH {
            return Err(ProtoError::Limit(format!("directory nesting deeper than {MAX_DEPTH}")));
        }
        self.top_entry(d.parent, d.name)?;
        self.dirs.insert(
            d.id,
            DirInfo { parent: d.parent, name: d.name.into(), mode: d.mode, mtime: d.mtime, owner: d.owner, depth },
        );
        Ok(Step::Accepted)
    }

    /// A symlink declaration.
    pub fn link(&mut self, l: &LinkEntry) -> Result<Step, ProtoError> {
        name::validate_entry(l.name)?;
        name::validate_link_target(l.target)?;
        if !self.dirs.contains_key(&l.parent) {
            return Ok(Step::NotYet);
        }
        self.top_entry(l.parent, l.name)?;
        Ok(Step::Accepted)
    }

    /// A device, FIFO or socket declaration: only in a session with `FLAG_DEVICES` (else a
    /// violation), with a valid name in a declared parent; like a link it has no id. A FIFO or
    /// socket must carry device number 0.
    pub fn special(&mut self, s: &SpecialEntry) -> Result<Step, ProtoError> {
        if !self.specials {
            return Err(ProtoError::Violation("a device, FIFO or socket in a session without devices".into()));
        }
        name::validate_entry(s.name)?;
        if !s.kind.is_device() && (s.major, s.minor) != (0, 0) {
            return Err(ProtoError::Invalid("a device number on a FIFO or socket"));
        }
        if !self.dirs.contains_key(&s.parent) {
            return Ok(Step::NotYet);
        }
        self.top_entry(s.parent, s.name)?;
        Ok(Step::Accepted)
    }

    /// A file declaration (a `FileStart`, or a sync session's `Offer`).
    pub fn file_start(&mut self, f: &FileStart) -> Result<Step, ProtoError> {
        name::validate_entry(f.name)?;
        if f.size > MAX_FILE_SIZE {
            return Err(ProtoError::Invalid("file size"));
        }
        if self.files.contains_key(&f.id) || self.dead.contains(f.id) || self.done.contains(f.id) {
            return Err(ProtoError::Violation(format!("file id {} declared twice", f.id)));
        }
        if !self.dirs.contains_key(&f.parent) {
            return Ok(Step::NotYet);
        }
        if self.files.len() >= MAX_OPEN_FILES {
            return Err(ProtoError::Limit(format!("more than {MAX_OPEN_FILES} files in flight")));
        }
        // One hash to check and claim the name, one to free it when the file is done; the name is
        // shared with the file's record, not copied.
        let place: (u64, Arc<[u8]>) = (f.parent, Arc::from(f.name));
        if (f.parent == 0 && self.top_files.contains(f.name)) || !self.in_flight.insert(place.clone()) {
            return Err(ProtoError::Violation(format!(
                "two files named '{}' in one session: the second would overwrite or mix into the first",
                name::escape(&self.entry_path(f.parent, f.name))
            )));
        }
        if let Err(e) = self.top_entry(f.parent, f.name) {
            self.in_flight.remove(&place);
            return Err(e);
        }
        if f.parent == 0 {
            self.top_files.insert(f.name.into());
        }
        if let Some(t) = self.targets.get_mut(&f.id) {
            t.place = Some(place.clone());
        }
        let chunks = f.size.div_ceil(self.chunk_size);
        self.files.insert(
            f.id,
            FileInfo { place, size: f.size, chunks, claimed: RangeSet::default(), written: 0, end: None },
        );
        Ok(Step::Accepted)
    }

    /// The path of entry `name` in directory `parent`, relative to the target.
    fn entry_path(&self, parent: u64, name: &[u8]) -> Vec<u8> {
        let mut p = self.dir_path(parent);
        if !p.is_empty() {
            p.push(b'/');
        }
        p.extend_from_slice(name);
        p
    }

    /// Forget file `id` (complete, skipped or abandoned): its name is free again.
    fn close(&mut self, id: u64) -> Option<FileInfo> {
        let f = self.files.remove(&id)?;
        self.in_flight.remove(&f.place);
        Some(f)
    }

    /// A chunk of `len` bytes at `offset`. On `Accepted` the caller writes it and then calls
    /// [`Tracker::chunk_written`].
    pub fn chunk(&mut self, file: u64, offset: u64, len: usize) -> Result<Step, ProtoError> {
        if self.dead.contains(file) {
            return Ok(Step::Discard);
        }
        if self.done.contains(file) {
            return Err(ProtoError::Violation(format!("chunk for file {file}, which is already complete")));
        }
        let cs = self.chunk_size;
        let Some(f) = self.files.get_mut(&file) else {
            return Ok(Step::NotYet);
        };
        if offset % cs != 0 || offset / cs >= f.chunks {
            return Err(ProtoError::Violation(format!("chunk offset {offset} out of range for file {file}")));
        }
        let expect = (f.size - offset).min(cs);
        if len as u64 != expect {
            return Err(ProtoError::Violation(format!(
                "chunk at {offset} of file {file} holds {len} bytes, expected {expect}"
            )));
        }
        if !f.claimed.insert(offset / cs) {
            return Err(ProtoError::Violation(format!("duplicate chunk at {offset} of file {file}")));
        }
        Ok(Step::Accepted)
    }

    /// A chunk accepted by [`Tracker::chunk`] is now on disk.
    pub fn chunk_written(&mut self, file: u64) -> Step {
        match self.files.get_mut(&file) {
            Some(f) => {
                f.written += 1;
                self.complete_if_done(file)
            }
            None => Step::Discard,
        }
    }

    /// The sender's end-of-file declaration.
    pub fn file_end(&mut self, e: &FileEnd) -> Result<Step, ProtoError> {
        if self.dead.contains(e.file) {
            return Ok(Step::Discard);
        }
        if self.done.contains(e.file) {
            return Err(ProtoError::Violation(format!("file {} ended twice", e.file)));
        }
        let Some(f) = self.files.get_mut(&e.file) else {
            return Ok(Step::NotYet);
        };
        if f.end.is_some() {
            return Err(ProtoError::Violation(format!("file {} ended twice", e.file)));
        }
        if e.size != f.size {
            return Err(ProtoError::Violation(format!(
                "file {} ended at {} bytes but was declared as {}",
                e.file, e.size, f.size
            )));
        }
        f.end = Some(e.digest);
        Ok(self.complete_if_done(e.file))
    }

    /// Sync: the receiver holds (verified) chunks `have` of declared file `file` already; they
    /// count as received and written, and a later `Chunk` for one of them is a duplicate. Ranges
    /// beyond the file, and chunks already claimed, are ignored. Returns the chunks counted.
    pub fn prefill(&mut self, file: u64, have: impl Iterator<Item = (u64, u64)>) -> u64 {
        let Some(f) = self.files.get_mut(&file) else { return 0 };
        let mut n = 0;
        for (first, count) in have {
            let end = first.saturating_add(count).min(f.chunks);
            for i in first..end {
                if f.claimed.insert(i) {
                    f.written += 1;
                    n += 1;
                }
            }
        }
        n
    }

    /// `-S`: chunks `offset..offset + len` of file `file` are a hole at the source; they count
    /// as received and written. Whole chunks only (the last may end at the end of the file), each
    /// once, and never one that was also sent as data.
    pub fn hole(&mut self, h: &Hole) -> Result<Step, ProtoError> {
        if self.dead.contains(h.file) {
            return Ok(Step::Discard);
        }
        if self.done.contains(h.file) {
            return Err(ProtoError::Violation(format!("hole in file {}, which is already complete", h.file)));
        }
        let cs = self.chunk_size;
        let Some(f) = self.files.get_mut(&h.file) else {
            return Ok(Step::NotYet);
        };
        let end = h.offset.checked_add(h.len).filter(|&e| e <= f.size && h.len > 0);
        let Some(end) = end.filter(|&e| h.offset % cs == 0 && (e % cs == 0 || e == f.size)) else {
            return Err(ProtoError::Violation(format!(
                "hole {}+{} out of range or not whole chunks for file {}",
                h.offset, h.len, h.file
            )));
        };
        let (first, last) = (h.offset / cs, end.div_ceil(cs) - 1);
        if !f.claimed.insert_range(first, last) {
            return Err(ProtoError::Violation(format!(
                "hole {}+{} of file {} overlaps chunks already received",
                h.offset, h.len, h.file
            )));
        }
        f.written += last - first + 1;
        Ok(self.complete_if_done(h.file))
    }

    /// `-H`: file `file` will have further names (`LINK_TARGET`), announced before it is
    /// declared: where it lands is kept for them.
    pub fn announce_link_target(&mut self, file: u64) -> Result<(), ProtoError> {
        if self.targets.contains_key(&file) {
            return Err(ProtoError::Violation(format!("file {file} announced twice as a link target")));
        }
        if self.files.contains_key(&file) || self.done.contains(file) || self.dead.contains(file) {
            return Err(ProtoError::Violation(format!("file {file} announced as a link target after its declaration")));
        }
        if self.targets.len() >= MAX_LINK_TARGETS {
            return Err(ProtoError::Limit(format!("more than {MAX_LINK_TARGETS} files with several names")));
        }
        self.targets.insert(file, Target { place: None, state: TargetState::Waiting, pending: Vec::new() });
        Ok(())
    }

    /// `-H`: `l.name` in `l.parent` is another name of file `l.file`, which must be a file of this
    /// session announced as a link target: never anything else at the destination.
    pub fn hard_link(&mut self, l: &HardLink) -> Result<LinkStep, ProtoError> {
        name::validate_entry(l.name)?;
        if !self.dirs.contains_key(&l.parent) {
            return Ok(LinkStep::NotYet);
        }
        let Some(t) = self.targets.get(&l.file) else {
            if self.files.contains_key(&l.file) || self.done.contains(l.file) || self.dead.contains(l.file) {
                return Err(ProtoError::Violation(format!(
                    "a hard link to file {}, which was not announced as having other names",
                    l.file
                )));
            }
            return Ok(LinkStep::NotYet);
        };
        let Some((dir, first)) = t.place.clone() else { return Ok(LinkStep::NotYet) };
        let state = t.state;
        let place = (l.parent, Arc::from(l.name));
        if place == (dir, first.clone())
            || self.in_flight.contains(&place)
            || (l.parent == 0 && self.top_files.contains(l.name))
        {
            return Err(ProtoError::Violation(format!(
                "a hard link named '{}' onto a file of that name in this session",
                name::escape(&self.entry_path(l.parent, l.name))
            )));
        }
        self.top_entry(l.parent, l.name)?;
        if l.parent == 0 {
            self.top_files.insert(l.name.into());
        }
        match state {
            TargetState::Committed => Ok(LinkStep::Now { dir, name: first }),
            TargetState::Failed => Ok(LinkStep::TargetFailed),
            TargetState::Waiting => {
                if self.pending_links >= MAX_PENDING_LINKS {
                    return Err(ProtoError::Limit(format!(
                        "more than {MAX_PENDING_LINKS} hard links waiting for their first name"
                    )));
                }
                self.pending_links += 1;
                if let Some(t) = self.targets.get_mut(&l.file) {
                    t.pending.push((l.parent, l.name.into()));
                }
                Ok(LinkStep::Queued)
            }
        }
    }

    /// A file this session completed is now committed under its name (`ok`), or committing it
    /// failed: its waiting names can be settled ([`Tracker::take_links`]).
    pub fn committed(&mut self, file: u64, ok: bool) {
        self.settle(file, ok);
    }

    fn settle(&mut self, file: u64, ok: bool) {
        if let Some(t) = self.targets.get_mut(&file).filter(|t| t.state == TargetState::Waiting) {
            t.state = if ok { TargetState::Committed } else { TargetState::Failed };
        }
    }

    /// The names that waited for file `file`, once it is committed or has failed.
    pub fn take_links(&mut self, file: u64) -> Option<SettledLinks> {
        let t = self.targets.get_mut(&file).filter(|t| t.state != TargetState::Waiting && !t.pending.is_empty())?;
        let (dir, name) = t.place.clone()?;
        let links = std::mem::take(&mut t.pending);
        self.pending_links -= links.len();
        Some(SettledLinks { ok: t.state == TargetState::Committed, dir, name, links })
    }

    /// At a session's end: every name still waiting, its first name given up on.
    pub fn fail_waiting_links(&mut self) -> Vec<SettledLinks> {
        let ids: Vec<u64> = self.targets.iter().filter(|(_, t)| !t.pending.is_empty()).map(|(&id, _)| id).collect();
        ids.into_iter()
            .filter_map(|id| {
                self.settle(id, false);
                self.take_links(id)
            })
            .collect()
    }

    /// Sync: declared file `file` needs nothing (the destination is up to date, or this is a dry
    /// run): it is complete, and any later frame for it is a violation.
    pub fn skip(&mut self, file: u64) -> bool {
        if self.close(file).is_some() {
            self.done.insert(file);
            self.settle(file, true);
            true
        } else {
            false
        }
    }

    /// The sender gave up on a file, or writing it failed here: forget it and drop whatever else
    /// arrives for it. Returns false if the file was never declared (the caller may retry).
    pub fn abandon(&mut self, file: u64) -> bool {
        if self.close(file).is_some() {
            self.dead.insert(file);
            self.settle(file, false);
            true
        } else {
            self.dead.contains(file)
        }
    }

    /// Whether file `file` is declared and neither complete nor abandoned.
    pub fn is_open(&self, file: u64) -> bool {
        self.files.contains_key(&file)
    }

    /// Files declared but not yet complete or abandoned.
    pub fn open_files(&self) -> usize {
        self.files.len()
    }

    /// Ids of files still open, for cleanup after a failed session.
    pub fn open_file_ids(&self) -> Vec<u64> {
        self.files.keys().copied().collect()
    }

    /// A declared directory.
    pub fn dir_info(&self, id: u64) -> Option<&DirInfo> {
        self.dirs.get(&id)
    }

    /// Directory ids, deepest first: the order in which to apply their modes and times.
    pub fn dirs_deepest_first(&self) -> Vec<u64> {
        let mut ids: Vec<(u32, u64)> =
            self.dirs.iter().filter(|(&id, _)| id != 0).map(|(&id, d)| (d.depth, id)).collect();
        ids.sort_unstable_by(|a, b| b.cmp(a));
        ids.into_iter().map(|(_, id)| id).collect()
    }

    /// Names of the directories and files declared in the destination itself (directory 0) this
    /// session: the top of its tree.
    pub fn top_names(&self) -> impl Iterator<Item = &[u8]> {
        let dirs = self.dirs.iter().filter(|(&id, d)| id != 0 && d.parent == 0).map(|(_, d)| &*d.name);
        dirs.chain(self.top_files.iter().map(|n| &**n))
    }

    /// The path of directory `id` relative to the destination root, joined with `/`.
    pub fn dir_path(&self, mut id: u64) -> Vec<u8> {
        let mut parts: Vec<&[u8]> = Vec::new();
        while id != 0 {
            let Some(d) = self.dirs.get(&id) else { break };
            parts.push(&d.name);
            id = d.parent;
        }
        parts.reverse();
        parts.join(&b'/')
    }

    fn complete_if_done(&mut self, file: u64) -> Step {
        let done = matches!(self.files.get(&file), Some(f) if f.end.is_some() && f.written == f.chunks);
        if !done {
            return Step::Accepted;
        }
        match self.close(file) {
            Some(f) => {
                self.done.insert(file);
                Step::Complete(Completion { file, size: f.size, digest: f.end.flatten() })
            }
            None => Step::Accepted,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CS: u32 = 64 * 1024;
    fn fs(id: u64, parent: u64, name: &[u8], size: u64) -> FileStart<'_> {
        FileStart { id, parent, name, size, mode: 0o644, mtime: Time::default(), owner: Default::default() }
    }
    fn end(file: u64, size: u64) -> FileEnd {
        FileEnd { file, size, digest: None }
    }

    #[test]
    fn file_completes_after_all_chunks_and_end_in_any_order() {
        let mut t = Tracker::new(CS);
        let size = 2 * u64::from(CS) + 5;
        assert_eq!(t.file_start(&fs(1, 0, b"f", size)).unwrap(), Step::Accepted);
        assert_eq!(t.chunk(1, 2 * u64::from(CS), 5).unwrap(), Step::Accepted);
        assert_eq!(t.chunk_written(1), Step::Accepted);
        assert_eq!(t.file_end(&end(1, size)).unwrap(), Step::Accepted);
        assert_eq!(t.chunk(1, 0, CS as usize).unwrap(), Step::Accepted);
        assert_eq!(t.chunk(1, u64::from(CS), CS as usize).unwrap(), Step::Accepted);
        assert_eq!(t.chunk_written(1), Step::Accepted);
        assert_eq!(t.chunk_written(1), Step::Complete(Completion { file: 1, size, digest: None }));
        assert_eq!(t.open_files(), 0);
    }

    #[test]
    fn prefilled_chunks_count_and_cannot_be_sent_again() {
        let mut t = Tracker::new(CS);
        let size = 3 * u64::from(CS);
        t.file_start(&fs(1, 0, b"f", size)).unwrap();
        assert_eq!(t.prefill(1, [(0, 2), (1, 1), (7, 5)].into_iter()), 2, "overlaps and out-of-range ignored");
        assert!(t.chunk(1, 0, CS as usize).is_err(), "a held chunk is a duplicate");
        assert_eq!(t.chunk(1, 2 * u64::from(CS), CS as usize).unwrap(), Step::Accepted);
        assert_eq!(t.chunk_written(1), Step::Accepted);
        assert_eq!(t.file_end(&end(1, size)).unwrap(), Step::Complete(Completion { file: 1, size, digest: None }));
    }

    #[test]
    fn a_skipped_file_is_complete() {
        let mut t = Tracker::new(CS);
        t.file_start(&fs(1, 0, b"f", 10)).unwrap();
        assert!(t.skip(1));
        assert!(!t.skip(1));
        assert!(t.chunk(1, 0, 10).is_err());
        assert!(t.file_end(&end(1, 10)).is_err());
        assert_eq!(t.open_files(), 0);
    }

    #[test]
    fn empty_file_completes_on_end() {
        let mut t = Tracker::new(CS);
        t.file_start(&fs(1, 0, b"e", 0)).unwrap();
        assert!(t.chunk(1, 0, 0).is_err(), "an empty file has no chunks");
        assert_eq!(t.file_end(&end(1, 0)).unwrap(), Step::Complete(Completion { file: 1, size: 0, digest: None }));
    }

    #[test]
    fn rejects_duplicate_misaligned_out_of_range_and_wrong_length_chunks() {
        let mut t = Tracker::new(CS);
        let size = u64::from(CS) + 1;
        t.file_start(&fs(1, 0, b"f", size)).unwrap();
        t.chunk(1, 0, CS as usize).unwrap();
        assert!(t.chunk(1, 0, CS as usize).is_err(), "duplicate");
        assert!(t.chunk(1, 1, CS as usize).is_err(), "misaligned");
        assert!(t.chunk(1, 2 * u64::from(CS), 1).is_err(), "past the end");
        assert!(t.chunk(1, u64::from(CS), 2).is_err(), "longer than declared");
        assert!(t.chunk(1, u64::from(CS), 0).is_err(), "shorter than declared");
    }

    #[test]
    fn rejects_end_with_another_size_and_double_end() {
        let mut t = Tracker::new(CS);
        t.file_start(&fs(1, 0, b"f", 10)).unwrap();
        assert!(t.file_end(&end(1, 11)).is_err());
        t.file_end(&end(1, 10)).unwrap();
        assert!(t.file_end(&end(1, 10)).is_err());
    }

    #[test]
    fn rejects_size_of_two_to_the_sixty_third() {
        let mut t = Tracker::new(CS);
        assert_eq!(t.file_start(&fs(1, 0, b"f", 1 << 63)), Err(ProtoError::Invalid("file size")));
    }

    #[test]
    fn waits_for_undeclared_parents_and_files() {
        let mut t = Tracker::new(CS);
        assert_eq!(t.file_start(&fs(1, 5, b"f", 1)).unwrap(), Step::NotYet);
        assert_eq!(t.chunk(9, 0, 1).unwrap(), Step::NotYet);
        assert_eq!(t.file_end(&end(9, 1)).unwrap(), Step::NotYet);
        let d =
            DirEntry { id: 5, parent: 0, name: b"d", mode: 0o755, mtime: Time::default(), owner: Default::default() };
        assert_eq!(t.dir(&d).unwrap(), Step::Accepted);
        assert_eq!(t.file_start(&fs(1, 5, b"f", 1)).unwrap(), Step::Accepted);
        assert_eq!(t.dir_path(5), b"d");
    }

    #[test]
    fn rejects_redeclared_ids_and_the_root_id() {
        let mut t = Tracker::new(CS);
        let d = DirEntry { id: 0, parent: 0, name: b"d", mode: 0, mtime: Time::default(), owner: Default::default() };
        assert!(t.dir(&d).is_err());
        let d = DirEntry { id: 1, ..d };
        t.dir(&d).unwrap();
        assert!(t.dir(&d).is_err());
        t.file_start(&fs(2, 0, b"f", 1)).unwrap();
        assert!(t.file_start(&fs(2, 0, b"g", 1)).is_err());
    }

    #[test]
    fn rejects_bad_names_in_every_declaration() {
        let mut t = Tracker::new(CS);
        for n in [&b".."[..], b"", b"a/b", b"."] {
            assert!(t
                .dir(&DirEntry {
                    id: 1,
                    parent: 0,
                    name: n,
                    mode: 0,
                    mtime: Time::default(),
                    owner: Default::default()
                })
                .is_err());
            assert!(t
                .link(&LinkEntry {
                    parent: 0,
                    name: n,
                    target: b"x",
                    mtime: Time::default(),
                    owner: Default::default()
                })
                .is_err());
            assert!(t
                .file_start(&FileStart {
                    id: 1,
                    parent: 0,
                    name: n,
                    size: 0,
                    mode: 0,
                    mtime: Time::default(),
                    owner: Default::default()
                })
                .is_err());
        }
    }

    #[test]
    fn caps_nesting_depth() {
        let mut t = Tracker::new(CS);
        for id in 1..=u64::from(MAX_DEPTH) {
            t.dir(&DirEntry {
                id,
                parent: id - 1,
                name: b"d",
                mode: 0,
                mtime: Time::default(),
                owner: Default::default(),
            })
            .unwrap();
        }
        let deeper = DirEntry {
            id: 5000,
            parent: u64::from(MAX_DEPTH),
            name: b"d",
            mode: 0,
            mtime: Time::default(),
            owner: Default::default(),
        };
        assert!(matches!(t.dir(&deeper), Err(ProtoError::Limit(_))));
        let order = t.dirs_deepest_first();
        assert_eq!(order.first(), Some(&u64::from(MAX_DEPTH)));
        assert_eq!(order.last(), Some(&1));
    }

    #[test]
    fn abandoned_files_swallow_late_chunks() {
        let mut t = Tracker::new(CS);
        t.file_start(&fs(1, 0, b"f", 10)).unwrap();
        assert!(t.abandon(1));
        assert_eq!(t.chunk(1, 0, 10).unwrap(), Step::Discard);
        assert_eq!(t.file_end(&end(1, 10)).unwrap(), Step::Discard);
        assert!(t.file_start(&fs(1, 0, b"f", 10)).is_err());
        assert!(!t.abandon(2));
    }

    #[test]
    fn caps_files_in_flight() {
        let mut t = Tracker::new(CS);
        for id in 0..MAX_OPEN_FILES as u64 {
            t.file_start(&fs(id, 0, format!("f{id}").as_bytes(), 1)).unwrap();
        }
        assert!(matches!(t.file_start(&fs(u64::MAX, 0, b"g", 1)), Err(ProtoError::Limit(_))));
    }

    #[test]
    fn range_set_merges_and_detects_duplicates() {
        let mut r = RangeSet::default();
        for i in [5, 3, 4, 0, 1, 2, 7] {
            assert!(r.insert(i), "{i}");
        }
        for i in 0..=5 {
            assert!(!r.insert(i), "{i}");
            assert!(r.contains(i));
        }
        assert!(!r.contains(6));
        assert!(r.insert(6));
        assert_eq!(r.0.len(), 1);
        assert_eq!(r.0.get(&0), Some(&7));
        assert!(!r.contains(8));
    }

    #[test]
    fn range_set_handles_the_ends_of_u64() {
        let mut r = RangeSet::default();
        assert!(r.insert(u64::MAX));
        assert!(r.insert(u64::MAX - 1));
        assert!(!r.insert(u64::MAX));
        assert!(r.contains(u64::MAX) && r.contains(u64::MAX - 1) && !r.contains(u64::MAX - 2));
        assert_eq!(r.0.len(), 1);
        assert!(r.insert(0) && !r.insert(0));
    }

    #[test]
    fn rejects_a_file_id_declared_again_after_it_completed() {
        // Found by the `tracker` fuzz target: FileStart 0, FileEnd 0, FileStart 0 was accepted.
        let mut t = Tracker::new(CS);
        t.file_start(&fs(0, 0, b"a", 0)).unwrap();
        assert!(matches!(t.file_end(&end(0, 0)).unwrap(), Step::Complete(_)));
        assert!(t.file_start(&fs(0, 0, b"b", 0)).is_err(), "a completed id must not be reused");
        assert!(t.file_end(&end(0, 0)).is_err(), "nor ended again");
        assert!(t.chunk(0, 0, 1).is_err(), "nor get more data");
        // Completed ids cost memory per gap, not per file.
        t.dir(&DirEntry {
            id: 1,
            parent: 0,
            name: b"d",
            mode: 0o755,
            mtime: Time::default(),
            owner: Default::default(),
        })
        .unwrap();
        for id in 1..10_000 {
            t.file_start(&fs(id, 1, b"f", 0)).unwrap();
            t.file_end(&end(id, 0)).unwrap();
        }
        assert_eq!(t.done.0.len(), 1);
        // So do abandoned ones.
        for id in 10_000..20_000 {
            t.file_start(&fs(id, 1, b"f", 5)).unwrap();
            assert!(t.abandon(id));
        }
        assert_eq!(t.dead.0.len(), 1);
    }

    fn d(id: u64, parent: u64, name: &[u8]) -> DirEntry<'_> {
        DirEntry { id, parent, name, mode: 0o777, mtime: Time::default(), owner: Default::default() }
    }

    #[test]
    fn refuses_a_second_file_of_one_name_in_flight_or_in_the_target() {
        let mut t = Tracker::new(CS);
        t.dir(&d(1, 0, b"d")).unwrap();
        let big = 3 * u64::from(CS);
        assert_eq!(t.file_start(&fs(1, 1, b"x", big)).unwrap(), Step::Accepted);
        let e = t.file_start(&fs(2, 1, b"x", big)).unwrap_err();
        assert!(e.to_string().contains("two files named 'd/x'"), "{e}");
        // Once the first is gone (abandoned, skipped or complete), the name is free in a directory.
        t.abandon(1);
        assert_eq!(t.file_start(&fs(3, 1, b"x", big)).unwrap(), Step::Accepted);
        assert!(t.skip(3));
        assert_eq!(t.file_start(&fs(4, 1, b"x", 0)).unwrap(), Step::Accepted);
        // In the target, never twice.
        t.file_start(&fs(5, 0, b"top", 0)).unwrap();
        assert!(matches!(t.file_end(&end(5, 0)).unwrap(), Step::Complete(_)));
        assert!(matches!(t.file_start(&fs(6, 0, b"top", 0)), Err(ProtoError::Violation(_))));
    }

    #[test]
    fn names_like_the_receivers_old_working_files_are_ordinary_names() {
        let mut t = Tracker::new(CS);
        let j = b".linerate-resume-0011223344556677.journal";
        assert_eq!(t.file_start(&fs(1, 0, j, 1)).unwrap(), Step::Accepted);
        assert_eq!(t.dir(&d(1, 0, b".linerate-x")).unwrap(), Step::Accepted);
        let l = LinkEntry {
            parent: 0,
            name: b".linerate-l",
            target: b"t",
            mtime: Time::default(),
            owner: Default::default(),
        };
        assert_eq!(t.link(&l).unwrap(), Step::Accepted);
        assert_eq!(t.file_start(&fs(2, 0, b".linerate-settings", 1)).unwrap(), Step::Accepted);
        let mut top: Vec<&[u8]> = t.top_names().collect();
        top.sort();
        assert_eq!(top, [&b".linerate-resume-0011223344556677.journal"[..], b".linerate-settings", b".linerate-x"]);
    }

    #[test]
    fn a_pull_accepts_only_the_requested_tree() {
        let big = 3 * u64::from(CS);
        let link = |parent, name| LinkEntry {
            parent,
            name,
            target: b"/etc/shadow",
            mtime: Time::default(),
            owner: Default::default(),
        };
        // Everything beside the requested name is refused, whatever its kind.
        type Declare = fn(&mut Tracker) -> Result<Step, ProtoError>;
        let beside: [Declare; 3] = [
            |t| t.file_start(&fs(9, 0, b"victim.txt", 3 * u64::from(CS))),
            |t| t.dir(&d(9, 0, b"victimdir")),
            |t| {
                t.link(&LinkEntry {
                    parent: 0,
                    name: b"planted-link",
                    target: b"/etc/shadow",
                    mtime: Time::default(),
                    owner: Default::default(),
                })
            },
        ];
        for (i, f) in beside.iter().enumerate() {
            let mut t = Tracker::for_pull(CS, b"tree");
            assert_eq!(t.dir(&d(1, 0, b"tree")).unwrap(), Step::Accepted);
            let e = f(&mut t).unwrap_err();
            assert!(e.to_string().contains("beside the requested 'tree'"), "{i}: {e}");
            // Before the tree, too.
            let mut t = Tracker::for_pull(CS, b"tree");
            assert!(matches!(f(&mut t), Err(ProtoError::Violation(_))), "{i}");
        }
        // The requested name once, of any kind; beneath it, anything.
        let mut t = Tracker::for_pull(CS, b"tree");
        t.dir(&d(1, 0, b"tree")).unwrap();
        t.dir(&d(2, 1, b"victimdir")).unwrap();
        t.file_start(&fs(1, 2, b"victim.txt", 1)).unwrap();
        t.link(&link(1, b"planted-link")).unwrap();
        assert!(t.dir(&d(3, 0, b"tree")).unwrap_err().to_string().contains("twice"));
        let mut t = Tracker::for_pull(CS, b"tree");
        assert_eq!(t.file_start(&fs(1, 0, b"tree", big)).unwrap(), Step::Accepted);
        assert!(t.link(&link(0, b"tree")).is_err());
        // A frame waiting for its parent is not judged before it has one.
        let mut t = Tracker::for_pull(CS, b"tree");
        assert_eq!(t.file_start(&fs(1, 7, b"victim.txt", 1)).unwrap(), Step::NotYet);
    }

    #[test]
    fn refuses_specials_without_devices_and_checks_them_like_links() {
        use crate::frame::SpecialKind;
        let sp = |parent, name, kind, major| SpecialEntry {
            parent,
            name,
            kind,
            major,
            minor: major,
            mode: 0o644,
            mtime: Time::default(),
            owner: Owner::default(),
        };
        let mut t = Tracker::new(CS);
        assert!(matches!(t.special(&sp(0, b"p", SpecialKind::Fifo, 0)), Err(ProtoError::Violation(_))));
        let mut t = Tracker::new(CS).with_specials(true);
        assert_eq!(t.special(&sp(0, b"null", SpecialKind::Char, 1)).unwrap(), Step::Accepted);
        assert_eq!(t.special(&sp(9, b"late", SpecialKind::Fifo, 0)).unwrap(), Step::NotYet);
        assert!(t.special(&sp(0, b"..", SpecialKind::Fifo, 0)).is_err());
        assert!(t.special(&sp(0, b"a/b", SpecialKind::Block, 8)).is_err());
        let fifo_with_a_device = sp(0, b"p", SpecialKind::Fifo, 0);
        assert!(t.special(&SpecialEntry { minor: 3, ..fifo_with_a_device }).is_err());
        let mut pull = Tracker::for_pull(CS, b"tree").with_specials(true);
        assert!(pull.special(&sp(0, b"planted", SpecialKind::Char, 1)).is_err());
    }

    fn hl(file: u64, parent: u64, name: &[u8]) -> HardLink<'_> {
        HardLink { kind: crate::frame::LINK_NAME, file, parent, name }
    }

    #[test]
    fn a_hard_link_to_an_unknown_id_waits_and_to_an_unannounced_file_is_refused() {
        let mut t = Tracker::new(CS);
        assert_eq!(t.hard_link(&hl(9, 0, b"l")).unwrap(), LinkStep::NotYet, "unknown id: not declared yet");
        assert_eq!(t.hard_link(&hl(9, 4, b"l")).unwrap(), LinkStep::NotYet, "unknown parent");
        // A file of this session that was never announced as having other names.
        t.file_start(&fs(1, 0, b"f", 1)).unwrap();
        assert!(matches!(t.hard_link(&hl(1, 0, b"l")), Err(ProtoError::Violation(_))));
        // Announced, not declared yet: wait for its declaration.
        t.announce_link_target(2).unwrap();
        assert_eq!(t.hard_link(&hl(2, 0, b"l")).unwrap(), LinkStep::NotYet);
        // Bad names are refused like any entry's.
        assert!(matches!(t.hard_link(&hl(2, 0, b"..")), Err(ProtoError::BadName(_))));
    }

    #[test]
    fn a_hard_link_to_a_directory_id_never_resolves() {
        // Directory and file ids are apart: a directory's id names no file, so the link waits
        // (and the receiver refuses it once nothing else can arrive).
        let mut t = Tracker::new(CS);
        t.dir(&d(5, 0, b"dir")).unwrap();
        assert_eq!(t.hard_link(&hl(5, 0, b"l")).unwrap(), LinkStep::NotYet);
        assert!(t.announce_link_target(5).is_ok(), "file id 5 is free");
        assert_eq!(t.hard_link(&hl(5, 0, b"l")).unwrap(), LinkStep::NotYet, "announced, never declared");
    }

    #[test]
    fn a_link_target_is_announced_once_before_its_declaration() {
        let mut t = Tracker::new(CS);
        t.announce_link_target(1).unwrap();
        assert!(matches!(t.announce_link_target(1), Err(ProtoError::Violation(_))), "twice");
        t.file_start(&fs(2, 0, b"f", 1)).unwrap();
        assert!(matches!(t.announce_link_target(2), Err(ProtoError::Violation(_))), "after FileStart");
    }

    #[test]
    fn a_hard_link_onto_a_name_in_flight_or_twice_in_the_target_is_refused() {
        let mut t = Tracker::new(CS);
        t.dir(&d(1, 0, b"d")).unwrap();
        t.announce_link_target(1).unwrap();
        t.file_start(&fs(1, 1, b"first", 10)).unwrap();
        t.file_start(&fs(2, 1, b"busy", 10)).unwrap();
        let e = t.hard_link(&hl(1, 1, b"busy")).unwrap_err();
        assert!(e.to_string().contains("'d/busy'"), "{e}");
        assert!(t.hard_link(&hl(1, 1, b"first")).is_err(), "onto its own first name");
        assert_eq!(t.hard_link(&hl(1, 0, b"top")).unwrap(), LinkStep::Queued);
        assert!(t.hard_link(&hl(1, 0, b"top")).is_err(), "the same name in the target twice");
    }

    #[test]
    fn hard_links_before_the_target_commits_wait_for_it_and_after_it_link_at_once() {
        let mut t = Tracker::new(CS);
        t.dir(&d(1, 0, b"a")).unwrap();
        t.dir(&d(2, 0, b"b")).unwrap();
        t.announce_link_target(7).unwrap();
        t.file_start(&fs(7, 1, b"first", 3)).unwrap();
        assert_eq!(t.hard_link(&hl(7, 2, b"second")).unwrap(), LinkStep::Queued);
        assert_eq!(t.take_links(7), None, "still in flight");
        t.chunk(7, 0, 3).unwrap();
        t.chunk_written(7);
        assert!(matches!(t.file_end(&end(7, 3)).unwrap(), Step::Complete(_)));
        // Complete is not yet on disk: a link arriving now still waits for the commit.
        assert_eq!(t.hard_link(&hl(7, 2, b"third")).unwrap(), LinkStep::Queued);
        assert_eq!(t.take_links(7), None, "being committed");
        t.committed(7, true);
        let settled = t.take_links(7).unwrap();
        assert!(settled.ok);
        assert_eq!((settled.dir, &*settled.name), (1, &b"first"[..]));
        assert_eq!(settled.links, vec![(2, Box::from(&b"second"[..])), (2, Box::from(&b"third"[..]))]);
        assert_eq!(t.take_links(7), None, "handed out once");
        assert_eq!(
            t.hard_link(&hl(7, 0, b"fourth")).unwrap(),
            LinkStep::Now { dir: 1, name: Arc::from(&b"first"[..]) }
        );
    }

    #[test]
    fn hard_links_to_a_failed_target_fail_once_and_to_a_skipped_one_link() {
        let mut t = Tracker::new(CS);
        t.announce_link_target(1).unwrap();
        t.file_start(&fs(1, 0, b"bad", 3)).unwrap();
        assert_eq!(t.hard_link(&hl(1, 0, b"l1")).unwrap(), LinkStep::Queued);
        assert!(t.abandon(1));
        let settled = t.take_links(1).unwrap();
        assert!(!settled.ok);
        assert_eq!(settled.links.len(), 1);
        assert_eq!(t.hard_link(&hl(1, 0, b"l2")).unwrap(), LinkStep::TargetFailed);
        // Sync: a first name found up to date is a target like a committed one.
        t.announce_link_target(2).unwrap();
        t.file_start(&fs(2, 0, b"same", 3)).unwrap();
        assert!(t.skip(2));
        assert!(matches!(t.hard_link(&hl(2, 0, b"l3")).unwrap(), LinkStep::Now { dir: 0, .. }));
        // A commit that failed fails the names waiting for it.
        t.announce_link_target(3).unwrap();
        t.file_start(&fs(3, 0, b"c", 0)).unwrap();
        assert!(matches!(t.file_end(&end(3, 0)).unwrap(), Step::Complete(_)));
        assert_eq!(t.hard_link(&hl(3, 0, b"l4")).unwrap(), LinkStep::Queued);
        t.committed(3, false);
        assert!(!t.take_links(3).unwrap().ok);
        // And at the end, whatever still waits.
        t.announce_link_target(4).unwrap();
        t.file_start(&fs(4, 0, b"e", 3)).unwrap();
        assert_eq!(t.hard_link(&hl(4, 0, b"l5")).unwrap(), LinkStep::Queued);
        let left = t.fail_waiting_links();
        assert_eq!(left.len(), 1);
        assert!(!left[0].ok);
    }

    #[test]
    fn holes_count_as_written_chunks_once_and_only_whole_ones() {
        let mut t = Tracker::new(CS);
        let cs = u64::from(CS);
        let size = 4 * cs + 7;
        t.file_start(&fs(1, 0, b"sparse", size)).unwrap();
        let hole = |offset, len| Hole { file: 1, offset, len };
        assert!(t.hole(&hole(1, cs)).is_err(), "misaligned");
        assert!(t.hole(&hole(0, cs / 2)).is_err(), "part of a chunk");
        assert!(t.hole(&hole(0, 0)).is_err(), "empty");
        assert!(t.hole(&hole(cs, u64::MAX)).is_err(), "past the end (and no loop over 2^64)");
        assert!(t.hole(&hole(4 * cs, 8)).is_err(), "past the end of the file");
        assert_eq!(t.hole(&hole(cs, 2 * cs)).unwrap(), Step::Accepted);
        assert!(t.hole(&hole(2 * cs, cs)).is_err(), "overlaps a hole");
        assert!(t.chunk(1, cs, CS as usize).is_err(), "a hole's chunk sent as data");
        t.chunk(1, 0, CS as usize).unwrap();
        assert_eq!(t.chunk_written(1), Step::Accepted);
        assert!(t.hole(&hole(0, cs)).is_err(), "overlaps data");
        assert_eq!(t.hole(&hole(3 * cs, cs + 7)).unwrap(), Step::Accepted, "the last chunk ends at the file's end");
        assert_eq!(t.file_end(&end(1, size)).unwrap(), Step::Complete(Completion { file: 1, size, digest: None }));
        assert!(t.hole(&hole(0, cs)).is_err(), "after completion");
        assert_eq!(t.hole(&Hole { file: 2, offset: 0, len: cs }).unwrap(), Step::NotYet);
    }

    #[test]
    fn range_set_inserts_ranges_and_refuses_overlaps() {
        let mut r = RangeSet::default();
        assert!(r.insert_range(10, 19));
        assert!(!r.insert_range(19, 30));
        assert!(!r.insert_range(0, 10));
        assert!(!r.insert_range(12, 13));
        assert!(r.insert_range(0, 9));
        assert!(r.insert_range(20, u64::MAX));
        assert_eq!(r.0.len(), 1);
        assert_eq!(r.0.get(&0), Some(&u64::MAX));
        let mut r = RangeSet::default();
        assert!(r.insert(5));
        assert!(r.insert_range(0, 4) && r.insert_range(6, 6));
        assert_eq!(r.0.get(&0), Some(&6));
    }
}
