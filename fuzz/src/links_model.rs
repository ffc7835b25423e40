//! The `tracker_links` target's operation language and invariants: `-H` link targets and
//! further names, and `-S` holes, fed to a `Tracker` in any order. It must never panic, hand out
//! each waiting name exactly once (linked or failed), never link to a file it was not told
//! about, keep the waiting names within `MAX_PENDING_LINKS`, and complete a file at most once
//! whatever mix of chunks and holes arrives.

use arbitrary::{Arbitrary, Unstructured};
use linerate_proto::caps::MAX_PENDING_LINKS;
use linerate_proto::frame::{FileEnd, FileStart, HardLink, Hole, Time, LINK_NAME};
use linerate_proto::track::{LinkStep, Step, Tracker};
use std::collections::{HashMap, HashSet};

/// The chunk size of every run.
pub const CS: u64 = 64 * 1024;

/// One call into the tracker (ids and names from small ranges, so that they collide often).
#[derive(Arbitrary, Debug, Clone)]
pub enum Op {
    /// `Tracker::dir` of directory `id % 4 + 1` in the root.
    Dir(u8),
    /// `Tracker::announce_link_target`.
    Announce(u8),
    /// `Tracker::file_start` in directory `parent % 5`, of `chunks % 5` chunks plus `tail % 3`
    /// bytes.
    File { id: u8, parent: u8, name: u8, chunks: u8, tail: u8 },
    /// `Tracker::hard_link` named `name` in `parent % 5`.
    Link { file: u8, parent: u8, name: u8 },
    /// `Tracker::chunk` then `chunk_written` of chunk `index % 6` (of the exact length).
    Chunk { file: u8, index: u8 },
    /// `Tracker::hole` from chunk `first % 6` for `count % 4` chunks (`raw` lengths otherwise).
    Hole { file: u8, first: u8, count: u8, raw: Option<u64> },
    /// `Tracker::file_end` with the declared size.
    End(u8),
    /// `Tracker::abandon`.
    Abandon(u8),
    /// `Tracker::skip`.
    Skip(u8),
    /// `Tracker::committed` of a file the tracker completed.
    Committed { file: u8, ok: bool },
    /// `Tracker::fail_waiting_links` (the session's end).
    EndSession,
}

/// The input: operations until the bytes run out.
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
}

fn name(n: u8) -> Vec<u8> {
    format!("n{}", n % 8).into_bytes()
}

type Waiting = HashMap<u64, Vec<(u64, Box<[u8]>)>>;

/// The names waiting for `file`, if it is settled: exactly those queued for it.
fn hand_out(t: &mut Tracker, file: u64, waiting: &mut Waiting) {
    if let Some(s) = t.take_links(file) {
        let mut want = waiting.remove(&file).unwrap_or_default();
        want.sort();
        let mut got = s.links.clone();
        got.sort();
        assert_eq!(got, want, "names handed out for file {file} differ from those queued");
    }
}

/// Run `ops` and check the invariants.
pub fn run(ops: &[Op]) {
    let mut t = Tracker::new(CS as u32);
    let mut sizes: HashMap<u64, u64> = HashMap::new();
    let mut announced: HashSet<u64> = HashSet::new();
    let mut completed: HashSet<u64> = HashSet::new();
    // Names queued and not yet handed out, per first name.
    let mut waiting: Waiting = HashMap::new();
    for op in ops {
        match op {
            Op::Dir(id) => {
                let n = name(*id);
                let _ = t.dir(&linerate_proto::frame::DirEntry {
                    id: u64::from(id % 4 + 1),
                    parent: 0,
                    name: &n,
                    mode: 0o755,
                    mtime: Time::default(),
                    owner: Default::default(),
                });
            }
            Op::Announce(f) => {
                if t.announce_link_target(u64::from(*f)).is_ok() {
                    announced.insert(u64::from(*f));
                }
            }
            Op::File { id, parent, name: n, chunks, tail } => {
                let size = u64::from(chunks % 5) * CS + u64::from(tail % 3);
                let n = name(*n);
                let f = FileStart {
                    id: u64::from(*id),
                    parent: u64::from(parent % 5),
                    name: &n,
                    size,
                    mode: 0o644,
                    mtime: Time::default(),
                    owner: Default::default(),
                };
                if t.file_start(&f) == Ok(Step::Accepted) {
                    sizes.insert(u64::from(*id), size);
                }
            }
            Op::Link { file, parent, name: n } => {
                let n = name(*n);
                let l = HardLink { kind: LINK_NAME, file: u64::from(*file), parent: u64::from(parent % 5), name: &n };
                match t.hard_link(&l) {
                    Ok(step @ (LinkStep::Now { .. } | LinkStep::TargetFailed | LinkStep::Queued)) => {
                        assert!(announced.contains(&l.file), "a link to file {} that was never announced", l.file);
                        if step == LinkStep::Queued {
                            waiting.entry(l.file).or_default().push((l.parent, n.clone().into()));
                        }
                    }
                    Ok(LinkStep::NotYet) | Err(_) => {}
                }
                let queued: usize = waiting.values().map(Vec::len).sum();
                assert!(queued <= MAX_PENDING_LINKS);
            }
            Op::Chunk { file, index } => {
                let file = u64::from(*file);
                let Some(&size) = sizes.get(&file) else { continue };
                let off = u64::from(index % 6) * CS;
                let len = size.saturating_sub(off).min(CS) as usize;
                if t.chunk(file, off, len) == Ok(Step::Accepted) {
                    if let Step::Complete(c) = t.chunk_written(file) {
                        assert!(completed.insert(c.file), "file {} completed twice", c.file);
                    }
                }
            }
            Op::Hole { file, first, count, raw } => {
                let file = u64::from(*file);
                let offset = u64::from(first % 6) * CS;
                let len = raw.unwrap_or_else(|| {
                    let size = sizes.get(&file).copied().unwrap_or(0);
                    (offset + u64::from(count % 4) * CS).min(size).saturating_sub(offset)
                });
                if let Ok(Step::Complete(c)) = t.hole(&Hole { file, offset, len }) {
                    assert!(completed.insert(c.file), "file {} completed twice", c.file);
                }
            }
            Op::End(f) => {
                let file = u64::from(*f);
                let size = sizes.get(&file).copied().unwrap_or(0);
                if let Ok(Step::Complete(c)) = t.file_end(&FileEnd { file, size, digest: None }) {
                    assert!(completed.insert(c.file), "file {} completed twice", c.file);
                }
            }
            Op::Abandon(f) => {
                t.abandon(u64::from(*f));
                hand_out(&mut t, u64::from(*f), &mut waiting);
            }
            Op::Skip(f) => {
                t.skip(u64::from(*f));
                hand_out(&mut t, u64::from(*f), &mut waiting);
            }
            Op::Committed { file, ok } => {
                let file = u64::from(*file);
                if completed.contains(&file) {
                    t.committed(file, *ok);
                    hand_out(&mut t, file, &mut waiting);
                }
            }
            Op::EndSession => {
                for s in t.fail_waiting_links() {
                    assert!(!s.ok);
                }
                waiting.clear();
            }
        }
    }
}
