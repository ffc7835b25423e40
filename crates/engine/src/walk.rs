//! Walking source trees: a depth-first walk that never follows symlinks and emits each directory
//! before anything inside it, so the receiver can always create a parent before its children.

use linerate_proto::frame::Time;
use std::fs::{self, Metadata};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A path for a message: control characters and invalid UTF-8 escaped (scp CVE-2019-6109).
pub fn shown(p: &Path) -> String {
    linerate_proto::name::escape(p.as_os_str().as_bytes())
}

/// A regular file to send.
#[derive(Debug, Clone)]
pub struct SrcFile {
    /// Session-unique file id.
    pub id: u64,
    /// Parent directory id on the receiver.
    pub parent: u64,
    /// Name in the parent.
    pub name: Vec<u8>,
    /// Where to read it.
    pub path: PathBuf,
    /// Size when walked.
    pub size: u64,
    /// Permission bits.
    pub mode: u32,
    /// Modification time when walked.
    pub mtime: Time,
    /// Sync: chunk ranges `(first, count)` the receiver already holds (not sent again).
    pub have: Option<std::sync::Arc<[(u64, u64)]>>,
}

/// One entry of a source tree, in the order it must be sent.
#[derive(Debug, Clone)]
pub enum Item {
    /// A directory.
    Dir {
        /// Directory id (1..).
        id: u64,
        /// Parent directory id.
        parent: u64,
        /// Name.
        name: Vec<u8>,
        /// Permission bits.
        mode: u32,
        /// Modification time.
        mtime: Time,
    },
    /// A symlink, sent as its target text.
    Link {
        /// Parent directory id.
        parent: u64,
        /// Name.
        name: Vec<u8>,
        /// Target, verbatim.
        target: Vec<u8>,
        /// Modification time of the link.
        mtime: Time,
    },
    /// A regular file.
    File(SrcFile),
    /// Every name in directory `dir` (only with [`walk_listing`]), after its last entry; not sent
    /// for a directory that could not be listed completely.
    Listing {
        /// Directory id.
        dir: u64,
        /// The names, in directory order.
        names: Vec<Vec<u8>>,
    },
}

/// A source root and the name it gets at the destination.
#[derive(Debug, Clone)]
pub struct Root {
    /// Local path.
    pub path: PathBuf,
    /// Name under the destination directory.
    pub name: Vec<u8>,
}

/// Mtime of metadata as a protocol time.
pub fn mtime_of(m: &Metadata) -> Time {
    Time { sec: m.mtime(), nsec: m.mtime_nsec().clamp(0, 999_999_999) as u32 }
}

/// Walk every root, calling `emit` for each entry in send order and `error` for each entry that
/// cannot be read (which is then skipped). `emit` returning false stops the walk.
pub fn walk(roots: &[Root], emit: impl FnMut(Item) -> bool, error: &dyn Fn(String)) {
    walk_listing(roots, false, emit, error);
}

/// [`walk`], also emitting an [`Item::Listing`] of each directory when `listing` is set (for
/// `--delete`; memory then grows with the names of the directories being walked).
pub fn walk_listing(roots: &[Root], listing: bool, mut emit: impl FnMut(Item) -> bool, error: &dyn Fn(String)) {
    let mut next_dir = 1u64;
    let mut next_file = 1u64;
    for root in roots {
        let meta = match fs::symlink_metadata(&root.path) {
            Ok(m) => m,
            Err(e) => {
                error(format!("{}: {e}", shown(&root.path)));
                continue;
            }
        };
        let mut stack: Vec<(fs::ReadDir, u64, PathBuf)> = Vec::new();
        // Names seen per directory on the stack (with `listing`); None after a listing error.
        let mut names: Vec<Option<Vec<Vec<u8>>>> = Vec::new();
        if !entry(&root.path, root.name.clone(), 0, &meta, &mut next_dir, &mut next_file, &mut stack, &mut emit, error)
        {
            return;
        }
        loop {
            while listing && names.len() < stack.len() {
                names.push(Some(Vec::new()));
            }
            let Some((iter, dir_id, _)) = stack.last_mut() else { break };
            let dir_id = *dir_id;
            match iter.next() {
                None => {
                    stack.pop();
                    if let Some(Some(list)) = names.pop().filter(|_| listing) {
                        if !emit(Item::Listing { dir: dir_id, names: list }) {
                            return;
                        }
                    }
                }
                Some(Err(e)) => {
                    let p = stack.last().map(|s| shown(&s.2)).unwrap_or_default();
                    error(format!("{p}: {e}"));
                    stack.pop();
                    names.pop();
                }
                Some(Ok(de)) => {
                    if let Some(Some(list)) = names.last_mut() {
                        list.push(de.file_name().as_bytes().to_vec());
                    }
                    let path = de.path();
                    match de.metadata() {
                        Ok(m) => {
                            let name = de.file_name().as_bytes().to_vec();
                            if !entry(
                                &path,
                                name,
                                dir_id,
                                &m,
                                &mut next_dir,
                                &mut next_file,
                                &mut stack,
                                &mut emit,
                                error,
                            ) {
                                return;
                            }
                        }
                        Err(e) => error(format!("{}: {e}", shown(&path))),
                    }
                }
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn entry(
    path: &std::path::Path,
    name: Vec<u8>,
    parent: u64,
    m: &Metadata,
    next_dir: &mut u64,
    next_file: &mut u64,
    stack: &mut Vec<(fs::ReadDir, u64, PathBuf)>,
    emit: &mut impl FnMut(Item) -> bool,
    error: &dyn Fn(String),
) -> bool {
    let ft = m.file_type();
    let mtime = mtime_of(m);
    let mode = m.permissions().mode() & 0o7777;
    if ft.is_dir() {
        let rd = match fs::read_dir(path) {
            Ok(rd) => rd,
            Err(e) => {
                error(format!("{}: {e}", shown(path)));
                return true;
            }
        };
        let id = *next_dir;
        *next_dir += 1;
        stack.push((rd, id, path.to_path_buf()));
        emit(Item::Dir { id, parent, name, mode, mtime })
    } else if ft.is_symlink() {
        match fs::read_link(path) {
            Ok(t) => emit(Item::Link { parent, name, target: t.as_os_str().as_bytes().to_vec(), mtime }),
            Err(e) => {
                error(format!("{}: {e}", shown(path)));
                true
            }
        }
    } else if ft.is_file() {
        let id = *next_file;
        *next_file += 1;
        emit(Item::File(SrcFile { id, parent, name, path: path.to_path_buf(), size: m.len(), mode, mtime, have: None }))
    } else {
        error(format!("{}: not a regular file, directory or symlink; skipped", shown(path)));
        true
    }
}
