//! Walking source trees: a depth-first walk that never follows symlinks and emits each directory
//! before anything inside it, so the receiver can always create a parent before its children.

use crate::copy::fsx::Anchor;
use linerate_proto::frame::Time;
use std::fs::{self, Metadata};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
    /// Open `path` only beneath this directory, following no symlink (a server's pull).
    pub beneath: Option<Arc<Anchor>>,
    /// `(st_dev, st_ino)` when the file has several names (`st_nlink > 1`), for `-H`.
    pub inode: Option<(u64, u64)>,
    /// `-H`: further names of this file follow; the receiver is told to keep where it lands.
    pub link_target: bool,
}

impl SrcFile {
    /// Open the file for reading, never following a symlink (beneath its anchor, none on the way).
    pub fn open(&self) -> std::io::Result<fs::File> {
        use std::os::unix::fs::OpenOptionsExt;
        match &self.beneath {
            Some(a) => a.open(&self.path, rustix::fs::OFlags::RDONLY).map(fs::File::from),
            None => fs::OpenOptions::new()
                .read(true)
                .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
                .open(&self.path),
        }
    }
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
    /// `-H`: a further name of file `file` (sent earlier under its first name). Made by the
    /// sender from [`Item::File`]s of one inode; the walk itself never emits it.
    HardLink {
        /// Parent directory id.
        parent: u64,
        /// Name.
        name: Vec<u8>,
        /// File id of the first name.
        file: u64,
    },
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
    /// Walk and open only beneath this directory, following no symlink on the way (a server
    /// serving a pull: `path` is then [`Anchor::path`] of the source's name).
    pub beneath: Option<Arc<Anchor>>,
}

/// List directory `path`; beneath an anchor, only if no symlink lies on the way.
fn read_dir(path: &Path, beneath: Option<&Arc<Anchor>>) -> std::io::Result<fs::ReadDir> {
    use std::os::fd::AsRawFd;
    match beneath {
        // The magic link names the directory just opened, whatever happens to its path.
        Some(a) => {
            let fd = a.open(path, rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY)?;
            fs::read_dir(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        }
        None => fs::read_dir(path),
    }
}

/// The target of symlink `path`; beneath an anchor, only if no symlink lies on the way to it.
fn read_link(path: &Path, beneath: Option<&Arc<Anchor>>) -> std::io::Result<Vec<u8>> {
    match beneath {
        Some(a) => {
            let fd = a.open(path, rustix::fs::OFlags::PATH)?;
            let t = rustix::fs::readlinkat(&fd, "", Vec::new()).map_err(std::io::Error::from)?;
            Ok(t.into_bytes())
        }
        None => Ok(fs::read_link(path)?.into_os_string().into_vec()),
    }
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
        let beneath = root.beneath.as_ref();
        if !entry(
            &root.path,
            root.name.clone(),
            0,
            &meta,
            beneath,
            (&mut next_dir, &mut next_file),
            &mut stack,
            &mut emit,
            error,
        ) {
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
                Some(Ok(de)) if de.file_name().as_bytes().starts_with(linerate_proto::name::RESERVED_PREFIX) => {
                    // A receiver refuses these names (its own working files): say so, send the rest.
                    let path = stack.last().map(|s| s.2.join(de.file_name())).unwrap_or_else(|| de.path());
                    error(format!("{}: not sent: names beginning with .linerate- are reserved", shown(&path)));
                }
                Some(Ok(de)) => {
                    if let Some(Some(list)) = names.last_mut() {
                        list.push(de.file_name().as_bytes().to_vec());
                    }
                    // From the directory's own path (the listing may come through a magic link).
                    let path = stack.last().map(|s| s.2.join(de.file_name())).unwrap_or_else(|| de.path());
                    match de.metadata() {
                        Ok(m) => {
                            let name = de.file_name().as_bytes().to_vec();
                            if !entry(
                                &path,
                                name,
                                dir_id,
                                &m,
                                beneath,
                                (&mut next_dir, &mut next_file),
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
    beneath: Option<&Arc<Anchor>>,
    (next_dir, next_file): (&mut u64, &mut u64),
    stack: &mut Vec<(fs::ReadDir, u64, PathBuf)>,
    emit: &mut impl FnMut(Item) -> bool,
    error: &dyn Fn(String),
) -> bool {
    let ft = m.file_type();
    let mtime = mtime_of(m);
    let mode = m.permissions().mode() & 0o7777;
    if ft.is_dir() {
        let rd = match read_dir(path, beneath) {
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
        match read_link(path, beneath) {
            Ok(target) => emit(Item::Link { parent, name, target, mtime }),
            Err(e) => {
                error(format!("{}: {e}", shown(path)));
                true
            }
        }
    } else if ft.is_file() {
        let id = *next_file;
        *next_file += 1;
        let path = path.to_path_buf();
        let beneath = beneath.cloned();
        let inode = (m.nlink() > 1).then(|| (m.dev(), m.ino()));
        let size = m.len();
        emit(Item::File(SrcFile {
            id,
            parent,
            name,
            path,
            size,
            mode,
            mtime,
            have: None,
            beneath,
            inode,
            link_target: false,
        }))
    } else {
        error(format!("{}: not a regular file, directory or symlink; skipped", shown(path)));
        true
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::cell::Cell;

    /// `root/pulled/a/b/f` beneath an anchor at `root`, and `outside/b/secret` next to it.
    fn fixture() -> (tempfile::TempDir, Arc<Anchor>, Root) {
        let t = tempfile::tempdir().unwrap();
        fs::create_dir_all(t.path().join("root/pulled/a/b")).unwrap();
        fs::write(t.path().join("root/pulled/a/b/f"), b"inside").unwrap();
        fs::create_dir_all(t.path().join("outside/b")).unwrap();
        fs::write(t.path().join("outside/b/secret"), b"outside").unwrap();
        let anchor = Arc::new(Anchor::new(crate::copy::fsx::open_root(&t.path().join("root")).unwrap()));
        let root = Root { path: anchor.path(b"pulled"), name: b"pulled".to_vec(), beneath: Some(anchor.clone()) };
        (t, anchor, root)
    }

    /// Walk `root`, calling `swap` once when directory `a` has been listed (as a local user
    /// racing the walk would), and collect the files and errors.
    fn walk_swapping(root: &Root, swap: impl Fn()) -> (Vec<SrcFile>, Vec<String>) {
        let files = std::cell::RefCell::new(Vec::new());
        let errors = std::cell::RefCell::new(Vec::new());
        let swapped = Cell::new(false);
        walk(
            std::slice::from_ref(root),
            |item| {
                match item {
                    Item::Dir { name, .. } if name == b"a" && !swapped.get() => {
                        swap();
                        swapped.set(true);
                    }
                    Item::File(f) => files.borrow_mut().push(f),
                    _ => {}
                }
                true
            },
            &|e| errors.borrow_mut().push(e),
        );
        (files.into_inner(), errors.into_inner())
    }

    #[test]
    fn a_directory_swapped_for_a_symlink_mid_walk_is_not_followed_beneath_an_anchor() {
        let (t, _anchor, root) = fixture();
        let pulled = t.path().join("root/pulled");
        // `a` has been opened and listed; now it becomes a symlink to a tree outside the root,
        // whose `b` the walk would enter next by path.
        let (files, errors) = walk_swapping(&root, || {
            fs::rename(pulled.join("a"), pulled.join("a.moved")).unwrap();
            std::os::unix::fs::symlink(t.path().join("outside"), pulled.join("a")).unwrap();
        });
        assert!(files.iter().all(|f| !f.path.ends_with("secret")), "followed the swapped symlink: {files:?}");
        assert!(files.is_empty(), "{files:?}");
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains("symlink on the way"), "{errors:?}");
    }

    #[test]
    fn a_file_whose_directory_was_swapped_after_the_walk_is_not_opened_beneath_an_anchor() {
        let (t, _anchor, root) = fixture();
        let pulled = t.path().join("root/pulled");
        let (files, errors) = walk_swapping(&root, || {});
        assert!(errors.is_empty(), "{errors:?}");
        let [f] = files.as_slice() else { panic!("{files:?}") };
        let mut s = String::new();
        std::io::Read::read_to_string(&mut f.open().unwrap(), &mut s).unwrap();
        assert_eq!(s, "inside");
        // Between the walk and the read, `a/b` becomes a symlink to `outside/b` holding a file
        // of the same name: the open is refused, not redirected.
        fs::rename(pulled.join("a/b"), pulled.join("a/b.moved")).unwrap();
        fs::rename(t.path().join("outside/b/secret"), t.path().join("outside/b/f")).unwrap();
        std::os::unix::fs::symlink(t.path().join("outside/b"), pulled.join("a/b")).unwrap();
        let e = f.open().unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
    }

    #[test]
    fn without_an_anchor_the_walk_is_as_before() {
        // The control for the tests above: a push's walk of the user's own tree follows the
        // swapped path, which is why pulls are anchored.
        let (t, _anchor, _) = fixture();
        let pulled = t.path().join("root/pulled");
        let root = Root { path: pulled.clone(), name: b"pulled".to_vec(), beneath: None };
        let (files, _) = walk_swapping(&root, || {
            fs::rename(pulled.join("a"), pulled.join("a.moved")).unwrap();
            std::os::unix::fs::symlink(t.path().join("outside"), pulled.join("a")).unwrap();
        });
        assert!(files.iter().any(|f| f.path.ends_with("secret")), "{files:?}");
    }
}
