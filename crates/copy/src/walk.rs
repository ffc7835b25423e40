//! Walking source trees: a depth-first walk that never follows symlinks and emits each directory
//! before anything inside it, so the receiver can always create a parent before its children.
//! Every name is sent; only a receiver's working directory met in the tree (a tree that is itself
//! a destination, [`crate::workdir`]) is skipped.

use crate::confined::Anchor;
use crate::filter::TreeFilter;
use linerate_net::error::shown;
use linerate_proto::frame::{Owner, SpecialKind, Time};
use std::fs::{self, Metadata};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
    /// Owner when walked.
    pub owner: Owner,
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
        /// Owner.
        owner: Owner,
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
        /// Owner of the link itself.
        owner: Owner,
    },
    /// A regular file.
    File(SrcFile),
    /// A device, FIFO or socket: sent only with `-D` (`FLAG_DEVICES`), else counted as skipped.
    Special {
        /// Parent directory id.
        parent: u64,
        /// Name.
        name: Vec<u8>,
        /// Where it is (for messages).
        path: PathBuf,
        /// What it is.
        kind: SpecialKind,
        /// Device number (major, minor); zeros for a FIFO or socket.
        rdev: (u32, u32),
        /// Permission bits.
        mode: u32,
        /// Modification time.
        mtime: Time,
        /// Owner.
        owner: Owner,
    },
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
pub fn walk_listing(roots: &[Root], listing: bool, emit: impl FnMut(Item) -> bool, error: &dyn Fn(String)) {
    walk_filtered(roots, listing, None, emit, error);
}

/// [`walk_listing`], skipping what `filter` excludes: an excluded entry is not emitted, listed
/// or counted, and an excluded directory is not entered.
pub fn walk_filtered(
    roots: &[Root],
    listing: bool,
    filter: Option<&TreeFilter>,
    mut emit: impl FnMut(Item) -> bool,
    error: &dyn Fn(String),
) {
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
        if filter.is_some_and(|f| f.excluded(&root.name, b"", meta.is_dir())) {
            continue;
        }
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
                Some(Ok(de)) if filter.is_some_and(|f| excluded(f, root, stack.last().map(|s| s.2.as_path()), &de)) => {
                }
                Some(Ok(de))
                    if linerate_proto::name::is_work_dir_name(de.file_name().as_bytes())
                        && crate::workdir::is_work_dir_path(
                            &stack.last().map(|s| s.2.join(de.file_name())).unwrap_or_else(|| de.path()),
                            de.file_name().as_bytes(),
                            beneath,
                        ) =>
                {
                    // A receiver's working directory (this tree is itself a destination): its
                    // partial files are not part of the tree, as rsync skips its partial dir.
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

/// Whether `filter` excludes entry `de` of directory `dir` in the walk of `root`.
fn excluded(filter: &TreeFilter, root: &Root, dir: Option<&Path>, de: &fs::DirEntry) -> bool {
    let mut rel = dir
        .and_then(|d| d.strip_prefix(&root.path).ok())
        .map(|r| r.as_os_str().as_bytes().to_vec())
        .unwrap_or_default();
    if !rel.is_empty() {
        rel.push(b'/');
    }
    rel.extend_from_slice(de.file_name().as_bytes());
    let is_dir = de.file_type().is_ok_and(|t| t.is_dir());
    filter.excluded(&root.name, &rel, is_dir)
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
    let owner = Owner { uid: m.uid(), gid: m.gid() };
    if ft.is_dir() {
        // The receiver refuses a directory nested deeper than this below the destination
        // (linerate_proto::track): reported once here, its subtree not sent, the rest copied.
        if stack.len() >= linerate_proto::caps::MAX_DEPTH as usize {
            error(format!(
                "{}: not copied: directories nest deeper than {} levels here (nothing beneath it is sent)",
                shown(path),
                linerate_proto::caps::MAX_DEPTH
            ));
            return true;
        }
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
        emit(Item::Dir { id, parent, name, mode, mtime, owner })
    } else if ft.is_symlink() {
        match read_link(path, beneath) {
            Ok(target) => emit(Item::Link { parent, name, target, mtime, owner }),
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
            owner,
            have: None,
            beneath,
            inode,
            link_target: false,
        }))
    } else if let Some(kind) = special_kind(&ft) {
        let dev = m.rdev() as rustix::fs::Dev;
        let rdev = if kind.is_device() { (rustix::fs::major(dev), rustix::fs::minor(dev)) } else { (0, 0) };
        let path = path.to_path_buf();
        emit(Item::Special { parent, name, path, kind, rdev, mode, mtime, owner })
    } else {
        error(format!("{}: not a regular file, directory or symlink; skipped", shown(path)));
        true
    }
}

/// The kind of a device, FIFO or socket.
fn special_kind(ft: &std::fs::FileType) -> Option<SpecialKind> {
    use std::os::unix::fs::FileTypeExt;
    Some(if ft.is_fifo() {
        SpecialKind::Fifo
    } else if ft.is_socket() {
        SpecialKind::Socket
    } else if ft.is_char_device() {
        SpecialKind::Char
    } else if ft.is_block_device() {
        SpecialKind::Block
    } else {
        return None;
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::cell::Cell;

    #[test]
    fn a_tree_deeper_than_the_receiver_allows_is_cut_with_one_error() {
        let t = tempfile::tempdir().unwrap();
        let max = linerate_proto::caps::MAX_DEPTH as usize;
        // Deeper than the limit by 3 levels (2 bytes a level: within PATH_MAX).
        let mut deep = t.path().join("top");
        for _ in 1..max + 3 {
            deep.push("d");
        }
        fs::create_dir_all(&deep).unwrap();
        fs::write(deep.join("deep"), b"x").unwrap();
        fs::write(t.path().join("top/f"), b"y").unwrap();
        let root = Root { path: t.path().join("top"), name: b"top".to_vec(), beneath: None };
        let (mut dirs, mut files) = (0usize, Vec::new());
        let errors = std::cell::RefCell::new(Vec::new());
        walk(
            std::slice::from_ref(&root),
            |item| {
                match item {
                    Item::Dir { .. } => dirs += 1,
                    Item::File(f) => files.push(f.name),
                    _ => {}
                }
                true
            },
            &|e| errors.borrow_mut().push(e),
        );
        assert_eq!(dirs, max, "every directory the receiver takes is sent");
        assert_eq!(files, vec![b"f".to_vec()], "the file beneath the cut is not sent; the rest is");
        let errors = errors.into_inner();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains("deeper than 1024 levels"), "{}", errors[0]);
    }

    /// `root/pulled/a/b/f` beneath an anchor at `root`, and `outside/b/secret` next to it.
    fn fixture() -> (tempfile::TempDir, Arc<Anchor>, Root) {
        let t = tempfile::tempdir().unwrap();
        fs::create_dir_all(t.path().join("root/pulled/a/b")).unwrap();
        fs::write(t.path().join("root/pulled/a/b/f"), b"inside").unwrap();
        fs::create_dir_all(t.path().join("outside/b")).unwrap();
        fs::write(t.path().join("outside/b/secret"), b"outside").unwrap();
        let anchor = Arc::new(Anchor::new(crate::confined::open_root(&t.path().join("root")).unwrap()));
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
    fn excluded_entries_are_neither_emitted_nor_listed_and_an_excluded_directory_is_not_entered() {
        use crate::filter::{push_rule, Filter, RuleKind};
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        fs::create_dir_all(src.join("web/node_modules/pkg")).unwrap();
        fs::create_dir_all(src.join("sub")).unwrap();
        for f in ["keep.c", "a.o", "sub/b.o", "sub/keep.o", "web/node_modules/pkg/x.js", "web/app.js"] {
            fs::write(src.join(f), b"x").unwrap();
        }
        // Entering node_modules would meet this FIFO and report it: an error proves the walk went in.
        rustix::fs::mknodat(
            rustix::fs::CWD,
            src.join("web/node_modules/fifo"),
            rustix::fs::FileType::Fifo,
            0o644.into(),
            0,
        )
        .unwrap();
        let mut rules = Vec::new();
        for r in ["node_modules/", "+ keep.o", "*.o"] {
            push_rule(&mut rules, r, RuleKind::Exclude);
        }
        let filter = TreeFilter { filter: Arc::new(Filter::new(rules).unwrap()), root_in_path: true };
        let root = Root { path: src.clone(), name: b"src".to_vec(), beneath: None };
        let (mut seen, mut listed) = (Vec::new(), Vec::new());
        let errors = std::cell::RefCell::new(Vec::new());
        walk_filtered(
            std::slice::from_ref(&root),
            true,
            Some(&filter),
            |item| {
                match item {
                    Item::File(f) => seen.push(f.path.strip_prefix(&src).unwrap().display().to_string()),
                    Item::Listing { names, .. } => listed.extend(names),
                    _ => {}
                }
                true
            },
            &|e| errors.borrow_mut().push(e),
        );
        seen.sort();
        assert_eq!(seen, ["keep.c", "sub/keep.o", "web/app.js"]);
        assert!(errors.borrow().is_empty(), "{:?}", errors.borrow());
        assert!(!listed.iter().any(|n| n == b"node_modules" || n == b"a.o"), "excluded names are not listed");
        // The root itself is matched by its name, unless it is the transfer root.
        let out = TreeFilter {
            filter: Arc::new(
                Filter::new(vec![crate::filter::Rule { kind: RuleKind::Exclude, pattern: "/src".into() }]).unwrap(),
            ),
            root_in_path: true,
        };
        let mut n = 0;
        walk_filtered(
            std::slice::from_ref(&root),
            false,
            Some(&out),
            |_| {
                n += 1;
                true
            },
            &|_| {},
        );
        assert_eq!(n, 0);
        let contents = TreeFilter { root_in_path: false, ..out };
        walk_filtered(
            std::slice::from_ref(&root),
            false,
            Some(&contents),
            |_| {
                n += 1;
                true
            },
            &|_| {},
        );
        assert!(n > 5, "{n}");
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
