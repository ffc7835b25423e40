//! The receiver's working directory: one hidden directory per destination, with an unguessable
//! name (`.linerate-work-` and 128 random bits in hex), holding the partial files of large files
//! being received and their resume journals, each named after the file's path beneath the
//! destination so the next run of the same copy finds it. Nothing else the receiver makes takes
//! a name in the user's tree for longer than a rename (complete-in-one-go files are unnamed
//! `O_TMPFILE` files), and no user's name is reserved (issue 31): rsync's `--partial-dir` takes a
//! fixed name away; this one cannot collide with a user's in practice.
//!
//! The directory is found again by its form ([`name::is_work_dir_name`]) and a marker file inside
//! holding a fixed random magic. A peer can neither write into it nor plant one: a receiver never
//! writes an entry of that form for a peer (it reports the entry and goes on), so every working
//! directory in a destination was made by a receiver (or by the local user). The sender's walk
//! skips a working directory it meets (a tree that is itself a destination), and `--delete`
//! leaves one alone, as rsync protects its partial directory.

use crate::confined::{self, Anchor};
use crate::journal;
use linerate_proto::name;
use rustix::fs::{self as rfs, AtFlags, Mode, OFlags, StatxFlags};
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

/// The marker file's name inside a working directory.
pub const MARKER: &str = "LINERATE-WORKDIR";

/// The marker file's content: what the directory is, for a person who finds it, and a magic
/// no other file holds by chance.
const MARKER_TEXT: &[u8] =
    b"linerate working directory: partial files of interrupted copies and their resume journals.\n\
Run the same copy again to resume them; `linerate clean DIR` lists and removes them.\n\
magic 5c1e0b0a7d3f49e2a6c8e1d4b9f27a63\n";

/// Which mounted file system a directory is on: a rename between two directories works only
/// within one mount (`EXDEV` otherwise, even between bind mounts of one file system).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mount {
    id: u64,
    dev: (u32, u32),
}

fn mount_of(fd: &OwnedFd) -> io::Result<Mount> {
    let st = rfs::statx(fd, "", AtFlags::EMPTY_PATH, StatxFlags::MNT_ID).map_err(io::Error::from)?;
    let id = if StatxFlags::from_bits_retain(st.stx_mask).contains(StatxFlags::MNT_ID) { st.stx_mnt_id } else { 0 };
    Ok(Mount { id, dev: (st.stx_dev_major, st.stx_dev_minor) })
}

/// An open working directory.
#[derive(Debug)]
pub struct WorkDir {
    /// Its handle.
    pub fd: OwnedFd,
    /// Its name in the destination directory.
    pub name: Vec<u8>,
    mount: Mount,
}

impl WorkDir {
    fn open(dest: &OwnedFd, name: &[u8]) -> io::Result<WorkDir> {
        let fd = confined::open_dir(dest, name)?;
        if !has_marker(&fd) {
            return Err(io::Error::other("no working-directory marker"));
        }
        let mount = mount_of(&fd)?;
        Ok(WorkDir { fd, name: name.to_vec(), mount })
    }

    /// Whether a partial file here can be renamed into `dir` (the same mount): else a file of
    /// that directory is received without resume.
    pub fn reaches(&self, dir: &OwnedFd) -> bool {
        mount_of(dir).is_ok_and(|m| m == self.mount)
    }
}

/// Whether directory `dir` holds the marker (a regular file, not a link, with exactly the text).
fn has_marker(dir: &OwnedFd) -> bool {
    let Ok(fd) = rfs::openat(dir, MARKER, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()) else {
        return false;
    };
    marker_matches(std::fs::File::from(fd))
}

fn marker_matches(f: std::fs::File) -> bool {
    if !f.metadata().is_ok_and(|m| m.is_file()) {
        return false;
    }
    let mut got = Vec::with_capacity(MARKER_TEXT.len() + 1);
    f.take(MARKER_TEXT.len() as u64 + 1).read_to_end(&mut got).is_ok() && got == MARKER_TEXT
}

/// Whether entry `name` of `parent` is a working directory: its form, a directory (not a
/// symlink), holding the marker.
pub fn is_work_dir(parent: &OwnedFd, name: &[u8]) -> bool {
    name::is_work_dir_name(name) && confined::open_dir(parent, name).is_ok_and(|d| has_marker(&d))
}

/// [`is_work_dir`] by path, for the sender's walk (beneath `anchor` when it has one, following
/// no symlink on the way).
pub fn is_work_dir_path(path: &Path, file_name: &[u8], anchor: Option<&Arc<Anchor>>) -> bool {
    if !name::is_work_dir_name(file_name) {
        return false;
    }
    let marker = path.join(MARKER);
    let f = match anchor {
        Some(a) => a.open(&marker, OFlags::RDONLY).map(std::fs::File::from),
        None => {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new().read(true).custom_flags(OFlags::NOFOLLOW.bits() as i32).open(&marker)
        }
    };
    f.is_ok_and(marker_matches) && std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

/// Every working directory in `dest`, in name order (normally one; two sessions starting at
/// once may each have made one).
pub fn find_all(dest: &OwnedFd) -> io::Result<Vec<WorkDir>> {
    // Only names of the form are kept: a destination of a million entries costs one pass, not
    // a copy of its names.
    let mut names: Vec<Vec<u8>> = Vec::new();
    let mut d = rfs::Dir::read_from(dest).map_err(io::Error::from)?;
    while let Some(e) = d.read() {
        let e = e.map_err(io::Error::from)?;
        if name::is_work_dir_name(e.file_name().to_bytes()) {
            names.push(e.file_name().to_bytes().to_vec());
        }
    }
    names.sort();
    Ok(names.iter().filter_map(|n| WorkDir::open(dest, n).ok()).collect())
}

/// The working directory of `dest`, if it has one (a dry run looks, never makes one).
pub fn find(dest: &OwnedFd) -> io::Result<Option<WorkDir>> {
    Ok(find_all(dest)?.into_iter().next())
}

/// The working directory of `dest`, made now (mode 0700, with its marker) if it has none.
pub fn find_or_create(dest: &OwnedFd) -> io::Result<WorkDir> {
    if let Some(w) = find(dest)? {
        return Ok(w);
    }
    let name = [name::WORK_DIR_PREFIX, confined::random_hex(16)?.as_bytes()].concat();
    rfs::mkdirat(dest, name.as_slice(), Mode::from_raw_mode(0o700)).map_err(io::Error::from)?;
    let made = (|| {
        let fd = confined::open_dir(dest, &name)?;
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let m = rfs::openat(&fd, MARKER, flags, Mode::from_raw_mode(0o600)).map_err(io::Error::from)?;
        std::io::Write::write_all(&mut std::fs::File::from(m), MARKER_TEXT)?;
        let mount = mount_of(&fd)?;
        Ok(WorkDir { fd, name: name.clone(), mount })
    })();
    if made.is_err() {
        let _ = confined::remove_tree(dest, &name);
    }
    made
}

/// Remove working directory `work` of `dest` if it holds nothing but its marker. A session that
/// put a file there meanwhile keeps it: the marker is written again when the directory is not
/// empty after all.
pub fn remove_if_empty(dest: &OwnedFd, work: &WorkDir) -> bool {
    match confined::list_dir(&work.fd) {
        Ok(names) if names.iter().all(|n| n == MARKER.as_bytes()) => {}
        _ => return false,
    }
    let _ = rfs::unlinkat(&work.fd, MARKER, AtFlags::empty());
    match rfs::unlinkat(dest, work.name.as_slice(), AtFlags::REMOVEDIR) {
        Ok(()) => true,
        Err(_) => {
            let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            if let Ok(m) = rfs::openat(&work.fd, MARKER, flags, Mode::from_raw_mode(0o600)) {
                let _ = std::io::Write::write_all(&mut std::fs::File::from(m), MARKER_TEXT);
            }
            false
        }
    }
}

/// A partial file left in a working directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    /// Its key (the names in the working directory are `<key>.part` and `<key>.journal`).
    pub key: String,
    /// The path beneath the destination it was to become, from its journal (None: no readable
    /// journal).
    pub path: Option<Vec<u8>>,
    /// Bytes it holds on disk.
    pub bytes: u64,
    /// When it (or its journal) was last written.
    pub modified: SystemTime,
}

fn key_of(n: &[u8]) -> Option<&str> {
    let stem = n.strip_suffix(b".part").or_else(|| n.strip_suffix(b".journal"))?;
    let stem = std::str::from_utf8(stem).ok()?;
    (stem.len() == 32 && stem.bytes().all(|b| b.is_ascii_hexdigit())).then_some(stem)
}

/// Every partial file (or lone journal) in `work`, in key order.
pub fn leftovers(work: &WorkDir) -> io::Result<Vec<Leftover>> {
    let mut keys: Vec<String> =
        confined::list_dir(&work.fd)?.iter().filter_map(|n| key_of(n).map(String::from)).collect();
    keys.sort();
    keys.dedup();
    let mut out = Vec::with_capacity(keys.len());
    for key in keys {
        let (part, jname) = journal::key_names(&key);
        let mut bytes = 0;
        let mut modified = SystemTime::UNIX_EPOCH;
        for n in [&part, &jname] {
            if let Ok(st) = rfs::statat(&work.fd, n.as_slice(), AtFlags::SYMLINK_NOFOLLOW) {
                let t = SystemTime::UNIX_EPOCH
                    + std::time::Duration::new(
                        st.st_mtime.max(0) as u64,
                        st.st_mtime_nsec.clamp(0, 999_999_999) as u32,
                    );
                modified = modified.max(t);
                if n == &part {
                    bytes = (st.st_blocks as u64).saturating_mul(512).min(st.st_size as u64);
                }
            }
        }
        let path = journal::read_path(&work.fd, &jname);
        out.push(Leftover { key, path, bytes, modified });
    }
    Ok(out)
}

/// Remove the partial file and journal of `key` from `work`.
pub fn remove(work: &WorkDir, key: &str) {
    let (part, jname) = journal::key_names(key);
    confined::remove(&work.fd, &part);
    confined::remove(&work.fd, &jname);
}

/// What a session may remove at its end: leftovers of paths within its tree (whose first
/// component is one of `roots`, the names it declared at the destination) that it was not
/// offered (`offered` holds the keys of the partial files it used): their source is gone (or
/// changed into something without a partial file).
pub fn abandoned<'a>(
    all: &'a [Leftover],
    roots: &std::collections::HashSet<Vec<u8>>,
    offered: &std::collections::HashSet<String>,
) -> Vec<&'a Leftover> {
    all.iter()
        .filter(|l| {
            let Some(path) = &l.path else { return false };
            let top = path.split(|&b| b == b'/').next().unwrap_or_default();
            roots.contains(top) && !offered.contains(&l.key)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::collections::HashSet;

    fn dest() -> (tempfile::TempDir, OwnedFd) {
        let t = tempfile::tempdir().unwrap();
        let fd = confined::open_root(t.path()).unwrap();
        (t, fd)
    }

    #[test]
    fn made_once_found_again_and_removed_when_empty() {
        let (t, d) = dest();
        assert!(find(&d).unwrap().is_none());
        let w = find_or_create(&d).unwrap();
        assert!(name::is_work_dir_name(&w.name));
        let again = find_or_create(&d).unwrap();
        assert_eq!(again.name, w.name, "found again, not made twice");
        let shown = String::from_utf8(w.name.clone()).unwrap();
        assert!(is_work_dir(&d, &w.name));
        assert!(is_work_dir_path(&t.path().join(&shown), shown.as_bytes(), None));
        std::fs::write(t.path().join(&shown).join("0123456789abcdef0123456789abcdef.part"), b"x").unwrap();
        assert!(!remove_if_empty(&d, &w), "not empty");
        assert!(t.path().join(&shown).join(MARKER).is_file(), "the marker stays");
        remove(&w, "0123456789abcdef0123456789abcdef");
        assert!(remove_if_empty(&d, &w));
        assert!(std::fs::read_dir(t.path()).unwrap().next().is_none(), "nothing left");
    }

    #[test]
    fn a_directory_of_that_form_without_the_marker_or_a_symlink_is_not_a_working_directory() {
        let (t, d) = dest();
        let n = ".linerate-work-0123456789abcdef0123456789abcdef";
        std::fs::create_dir(t.path().join(n)).unwrap();
        assert!(!is_work_dir(&d, n.as_bytes()) && find(&d).unwrap().is_none());
        std::fs::write(t.path().join(n).join(MARKER), b"something else").unwrap();
        assert!(!is_work_dir(&d, n.as_bytes()), "the wrong text");
        std::fs::write(t.path().join(n).join(MARKER), MARKER_TEXT).unwrap();
        assert!(is_work_dir(&d, n.as_bytes()));
        let other = ".linerate-work-ffffffffffffffffffffffffffffffff";
        std::os::unix::fs::symlink(t.path().join(n), t.path().join(other)).unwrap();
        assert!(!is_work_dir(&d, other.as_bytes()), "a symlink is never followed");
        assert!(!is_work_dir_path(&t.path().join(other), other.as_bytes(), None));
        let plain = ".linerate-settings";
        std::fs::create_dir(t.path().join(plain)).unwrap();
        std::fs::write(t.path().join(plain).join(MARKER), MARKER_TEXT).unwrap();
        assert!(!is_work_dir(&d, plain.as_bytes()), "only the exact form");
    }

    #[test]
    fn only_unoffered_leftovers_within_the_sessions_roots_are_abandoned() {
        let t = SystemTime::UNIX_EPOCH;
        let l = |key: &str, path: Option<&str>| Leftover {
            key: key.into(),
            path: path.map(|p| p.as_bytes().to_vec()),
            bytes: 1,
            modified: t,
        };
        let all = [
            l("a", Some("src/gone")),
            l("b", Some("src/sub/kept")),
            l("c", Some("other/x")),
            l("d", Some("src")),
            l("e", None),
            l("f", Some("srcx/y")),
        ];
        let roots: HashSet<Vec<u8>> = [b"src".to_vec()].into();
        let offered: HashSet<String> = ["b".to_string()].into();
        let keys: Vec<&str> = abandoned(&all, &roots, &offered).iter().map(|l| l.key.as_str()).collect();
        assert_eq!(keys, ["a", "d"]);
    }
}
