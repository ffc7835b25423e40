//! Confined filesystem operations for the receiver.
//!
//! Every write happens relative to a directory handle that was itself opened beneath the
//! destination one validated component at a time with `O_NOFOLLOW | O_DIRECTORY`, so no name a
//! peer sends and no symlink planted in the tree can steer a write outside the destination.
//! Files are written unnamed (`O_TMPFILE`) or under an unguessable temporary name in their final
//! directory, or for a resumable one in the receiver's working directory
//! ([`crate::workdir`]), and given their final name only when complete.

use linerate_proto::frame::{Placement, Time};
use linerate_proto::name;
use linerate_proto::track::Tracker;
use rustix::fs::{self as rfs, AtFlags, Mode, OFlags, Timespec, Timestamps, UTIME_OMIT};
use rustix::io::Errno;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

/// How many directory handles the receiver keeps open per session.
const DIR_CACHE_CAP: usize = 256;

fn ioe(e: Errno) -> io::Error {
    io::Error::from(e)
}

/// Open an existing directory `name` beneath `parent`, refusing symlinks.
pub fn open_dir(parent: &OwnedFd, name: &[u8]) -> io::Result<OwnedFd> {
    rfs::openat(parent, name, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| match e {
            Errno::LOOP | Errno::NOTDIR => io::Error::new(
                io::ErrorKind::AlreadyExists,
                "exists and is not a directory (symlinks are never followed)",
            ),
            e => ioe(e),
        })
}

/// Open a directory by path (for the server's root); the path itself is the operator's.
pub fn open_root(path: &std::path::Path) -> io::Result<OwnedFd> {
    rfs::open(path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).map_err(ioe)
}

/// Create directory `name` beneath `parent` (or open it if it already is a directory).
pub fn make_dir(parent: &OwnedFd, name: &[u8]) -> io::Result<(OwnedFd, bool)> {
    match rfs::mkdirat(parent, name, Mode::from_raw_mode(0o700)) {
        Ok(()) => Ok((open_dir(parent, name)?, true)),
        Err(Errno::EXIST) => Ok((open_dir(parent, name)?, false)),
        Err(e) => Err(ioe(e)),
    }
}

/// Create directory `name` beneath `parent` for the tree being received: an existing directory
/// is opened, and a file, symlink or special in its place is removed first (never followed), as
/// rsync turns a file into a directory with or without `--delete` (issue 42). Returns the handle
/// and whether the directory was made now.
pub fn make_dir_replacing(parent: &OwnedFd, name: &[u8]) -> io::Result<(OwnedFd, bool)> {
    match make_dir(parent, name) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            // Only a non-directory goes (`unlinkat` without `AT_REMOVEDIR` refuses a directory,
            // so one swapped in meanwhile stays, and so does everything in it).
            rfs::unlinkat(parent, name, AtFlags::empty()).map_err(|e| match e {
                Errno::ISDIR | Errno::PERM => io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    "exists and is not a directory, and could not be removed to make one",
                ),
                e => ioe(e),
            })?;
            match rfs::mkdirat(parent, name, Mode::from_raw_mode(0o700)) {
                Ok(()) => Ok((open_dir(parent, name)?, true)),
                Err(e) => Err(ioe(e)),
            }
        }
        r => r,
    }
}

/// The temporary name of file `id` of a session, in its final directory (used only where no
/// unnamed file can be: a file system without `O_TMPFILE`, a symlink before its rename). It holds
/// 64 random bits drawn once per process, so it never meets a user's name and a peer cannot
/// predict it; no name is reserved for it.
pub fn temp_name(session_tag: &str, id: u64) -> Vec<u8> {
    let mut name = temp_prefix(session_tag);
    name.extend_from_slice(id.to_string().as_bytes());
    name
}

/// What every [`temp_name`] of a session begins with: how the session's own `--delete` pass
/// knows a name that another of its streams is about to rename into place.
pub fn temp_prefix(session_tag: &str) -> Vec<u8> {
    static SALT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let salt = SALT.get_or_init(|| random_hex(8).unwrap_or_else(|_| format!("{:016x}", std::process::id())));
    format!(".linerate-tmp-{salt}-{session_tag}-").into_bytes()
}

/// Hex digits of `bytes` random bytes from the operating system's generator.
pub fn random_hex(bytes: usize) -> io::Result<String> {
    let mut b = vec![0u8; bytes];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b)
        .map_err(|_| io::Error::other("the system random generator failed"))?;
    Ok(hex::encode(b))
}

/// The process umask, read once (reading it means setting it, so do it before threads write).
fn umask() -> u32 {
    static UMASK: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *UMASK.get_or_init(|| {
        let old = rustix::process::umask(Mode::from_raw_mode(0o077));
        rustix::process::umask(old);
        old.as_raw_mode()
    })
}

/// A file being received: unnamed (`O_TMPFILE`, linked in only when complete, and gone by
/// itself if we crash) where the filesystem allows, else under a temporary name.
pub struct Incoming {
    /// The open file.
    pub file: File,
    /// The temporary name, when the file has one.
    pub tmp: Option<Vec<u8>>,
}

fn proc_fd_available() -> bool {
    static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OK.get_or_init(|| std::path::Path::new("/proc/self/fd").is_dir())
}

/// Create the file that will become `parent/<name>`, already carrying its final permission bits
/// where the umask allows (it is only ever written through the handle we hold). `tmp` is the
/// temporary name to use if the filesystem has no unnamed files.
pub fn create_incoming(parent: &OwnedFd, tmp: &[u8], mode: u32) -> io::Result<Incoming> {
    let mode = safe_mode(mode);
    if proc_fd_available() {
        match rfs::openat(parent, ".", OFlags::RDWR | OFlags::TMPFILE | OFlags::CLOEXEC, mode) {
            Ok(fd) => return Ok(Incoming { file: File::from(fd), tmp: None }),
            Err(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL | Errno::NOENT) => {}
            Err(e) => return Err(ioe(e)),
        }
    }
    let flags = OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = match rfs::openat(parent, tmp, flags, mode) {
        // A leftover from an earlier crashed session with the same name is ours to replace.
        Err(Errno::EXIST) => {
            let _ = rfs::unlinkat(parent, tmp, AtFlags::empty());
            rfs::openat(parent, tmp, flags, mode)
        }
        r => r,
    }
    .map_err(ioe)?;
    Ok(Incoming { file: File::from(fd), tmp: Some(tmp.to_vec()) })
}

/// Give a complete file its final name, replacing a file or symlink there (a directory as `way`
/// allows). An unnamed file is linked in directly when the name is free (one directory
/// operation), else linked under `spare` and renamed over the old entry.
pub fn commit_incoming(parent: &OwnedFd, inc: &Incoming, name: &[u8], spare: &[u8], way: InTheWay) -> io::Result<()> {
    let Some(tmp) = &inc.tmp else {
        return match link_unnamed(&inc.file, parent, name) {
            Ok(()) => Ok(()),
            Err(Errno::EXIST) => {
                let _ = rfs::unlinkat(parent, spare, AtFlags::empty());
                link_unnamed(&inc.file, parent, spare).map_err(ioe)?;
                rename_into_place(parent, spare, name, way).inspect_err(|_| remove(parent, spare))
            }
            Err(e) => Err(ioe(e)),
        };
    };
    rename_into_place(parent, tmp, name, way)
}

/// Give unnamed file `file` the name `parent/name`. By the handle itself (`AT_EMPTY_PATH`, allowed
/// to the file's opener since Linux 6.10, and to holders of `CAP_DAC_READ_SEARCH` before) where
/// the kernel permits; else through `/proc/self/fd/N`, whose path walk through procfs cost a
/// seventh of a small-file copy's CPU (perf). Which one works is learned once.
fn link_unnamed(file: &File, parent: &OwnedFd, name: &[u8]) -> Result<(), Errno> {
    use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
    // 0: not tried yet, 1: by handle, 2: through /proc.
    static HOW: AtomicU8 = AtomicU8::new(0);
    if HOW.load(Relaxed) != 2 {
        match rfs::linkat(file, "", parent, name, AtFlags::EMPTY_PATH) {
            Ok(()) => {
                HOW.store(1, Relaxed);
                return Ok(());
            }
            Err(Errno::PERM | Errno::NOENT | Errno::INVAL) if HOW.load(Relaxed) == 0 => HOW.store(2, Relaxed),
            Err(e) => return Err(e),
        }
    }
    link_through_proc(file, parent, name)
}

/// [`link_unnamed`] for kernels that refuse `AT_EMPTY_PATH`: follow `/proc/self/fd/N`.
fn link_through_proc(file: &File, parent: &OwnedFd, name: &[u8]) -> Result<(), Errno> {
    use std::os::fd::AsRawFd;
    let me = format!("/proc/self/fd/{}", file.as_raw_fd());
    rfs::linkat(rfs::CWD, me.as_str(), parent, name, AtFlags::SYMLINK_FOLLOW)
}

/// Remove what an unfinished incoming file left behind (nothing, for an unnamed one).
pub fn discard_incoming(parent: &OwnedFd, inc: &Incoming) {
    if let Some(tmp) = &inc.tmp {
        remove(parent, tmp);
    }
}

/// Whether a file created with `mode` already has exactly those bits (the umask removed none).
pub fn created_with(mode: u32) -> bool {
    safe_mode(mode).as_raw_mode() & umask() == 0
}

/// Apply the modification time only (for files created with their final mode).
pub fn set_mtime(fd: &impl std::os::fd::AsFd, mtime: Time) -> io::Result<()> {
    rfs::futimens(fd, &timestamps(mtime)).map_err(ioe)
}

fn timestamps(mtime: Time) -> Timestamps {
    Timestamps {
        last_access: Timespec { tv_sec: 0, tv_nsec: UTIME_OMIT },
        last_modification: Timespec { tv_sec: mtime.sec, tv_nsec: mtime.nsec.into() },
    }
}

/// The permission bits we apply: set-user-ID and set-group-ID are never taken from a peer.
pub fn safe_mode(mode: u32) -> Mode {
    Mode::from_raw_mode(mode & 0o1777)
}

/// Apply mode and modification time to an open file or directory.
pub fn set_meta(fd: &impl std::os::fd::AsFd, mode: u32, mtime: Time) -> io::Result<()> {
    set_meta_owned(fd, mode, mtime, (None, None))
}

/// The owner and group to apply to an entry (`-o`, `-g`), each `None` when not kept; already
/// filtered to what this process may set ([`crate::ids::Privileges::allowed`]).
pub type Ids = (Option<u32>, Option<u32>);

/// The permission bits to apply: set-user-ID and set-group-ID only when both the owner and the
/// group were applied as the sender had them (rsync -a as root keeps them; a file that would
/// otherwise become set-user-ID to whoever receives it never is).
pub fn mode_bits(mode: u32, ids: Ids) -> Mode {
    if ids.0.is_some() && ids.1.is_some() {
        Mode::from_raw_mode(mode & 0o7777)
    } else {
        safe_mode(mode)
    }
}

fn owner_ids(ids: Ids) -> (Option<rustix::fs::Uid>, Option<rustix::fs::Gid>) {
    // -1 means "leave it" to chown(2): never passed on (the caller's ids exclude it).
    (
        ids.0.filter(|&u| u != u32::MAX).map(rustix::fs::Uid::from_raw_unchecked),
        ids.1.filter(|&g| g != u32::MAX).map(rustix::fs::Gid::from_raw_unchecked),
    )
}

/// Owner, then mode (chown clears set-user-ID bits, so it goes first), then modification time.
pub fn set_meta_owned(fd: &impl std::os::fd::AsFd, mode: u32, mtime: Time, ids: Ids) -> io::Result<()> {
    let (uid, gid) = owner_ids(ids);
    if uid.is_some() || gid.is_some() {
        rfs::fchown(fd, uid, gid).map_err(|e| io::Error::other(format!("setting the owner: {}", ioe(e))))?;
    }
    rfs::fchmod(fd, mode_bits(mode, ids)).map_err(ioe)?;
    rfs::futimens(fd, &timestamps(mtime)).map_err(ioe)
}

/// Set the owner of entry `name` in `parent` itself, never what a symlink points to.
fn chown_entry(parent: &OwnedFd, name: &[u8], ids: Ids) -> io::Result<()> {
    let (uid, gid) = owner_ids(ids);
    if uid.is_none() && gid.is_none() {
        return Ok(());
    }
    rfs::chownat(parent, name, uid, gid, AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|e| io::Error::other(format!("setting the owner: {}", ioe(e))))
}

/// Whether an existing entry (`st`) has other permission bits, or another owner or group where
/// `ids` keeps them, than receiving a file of `mode` would give it: what an up-to-date file still
/// needs on a rerun (rsync -a applies it too: issue 42).
pub fn meta_differs(st: &rfs::Stat, mode: u32, ids: Ids) -> bool {
    let (uid, gid) = owner_ids(ids);
    st.st_mode & 0o7777 != mode_bits(mode, ids).as_raw_mode()
        || uid.is_some_and(|u| u.as_raw() != st.st_uid)
        || gid.is_some_and(|g| g.as_raw() != st.st_gid)
}

/// Open regular file `name` in `parent` read-only, to read it or to change its metadata through
/// the handle: `None` when it is not the regular file `seen` (its `statat` without following,
/// made first because opening a device can have effects). Never follows a symlink, never waits on
/// a FIFO swapped in since the look, and never takes another file for it.
pub fn open_regular(parent: &OwnedFd, name: &[u8], seen: &rfs::Stat) -> io::Result<Option<(OwnedFd, rfs::Stat)>> {
    if rfs::FileType::from_raw_mode(seen.st_mode) != rfs::FileType::RegularFile {
        return Ok(None);
    }
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let fd = match rfs::openat(parent, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::LOOP | Errno::NOENT | Errno::NXIO) => return Ok(None),
        Err(e) => return Err(ioe(e)),
    };
    let st = rfs::fstat(&fd).map_err(ioe)?;
    let same = rfs::FileType::from_raw_mode(st.st_mode) == rfs::FileType::RegularFile
        && (st.st_dev, st.st_ino) == (seen.st_dev, seen.st_ino);
    Ok(same.then_some((fd, st)))
}

/// A device, FIFO or socket node to create.
#[derive(Debug, Clone, Copy)]
pub struct Special {
    /// What it is.
    pub kind: linerate_proto::frame::SpecialKind,
    /// Device number (major, minor), for a device.
    pub rdev: (u32, u32),
    /// Permission bits.
    pub mode: u32,
    /// Modification time.
    pub mtime: Time,
}

/// Create device, FIFO or socket node `name` beneath `parent` (temp name, owner, mode, time, then
/// rename into place, replacing what is there, a directory as `way` allows).
pub fn make_special(parent: &OwnedFd, tmp: &[u8], name: &[u8], sp: Special, ids: Ids, way: InTheWay) -> io::Result<()> {
    use linerate_proto::frame::SpecialKind;
    let _ = rfs::unlinkat(parent, tmp, AtFlags::empty());
    let ft = match sp.kind {
        SpecialKind::Fifo => rfs::FileType::Fifo,
        SpecialKind::Socket => rfs::FileType::Socket,
        SpecialKind::Char => rfs::FileType::CharacterDevice,
        SpecialKind::Block => rfs::FileType::BlockDevice,
    };
    let dev = if sp.kind.is_device() { rfs::makedev(sp.rdev.0, sp.rdev.1) } else { 0 };
    // Created owner-only: no one else can open it before its owner and mode are set.
    rfs::mknodat(parent, tmp, ft, Mode::from_raw_mode(0o600), dev).map_err(ioe)?;
    let r = chown_entry(parent, tmp, ids)
        .and_then(|()| {
            // `tmp` is the node just made (not a symlink): chmodat cannot be redirected by it.
            rfs::chmodat(parent, tmp, mode_bits(sp.mode, ids), AtFlags::empty()).map_err(ioe)
        })
        .and_then(|()| rfs::utimensat(parent, tmp, &timestamps(sp.mtime), AtFlags::SYMLINK_NOFOLLOW).map_err(ioe))
        .and_then(|()| rename_into_place(parent, tmp, name, way));
    if r.is_err() {
        remove(parent, tmp);
    }
    r
}

/// What a file, symlink or special renamed into place may remove when a directory holds its name
/// (a type change, issue 42): rsync's rule. A directory of the working directory's form is never
/// removed (a peer cannot name one, see [`linerate_proto::name::is_work_dir_name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InTheWay {
    /// Only an empty directory (rsync without `--delete`: "cannot delete non-empty directory").
    EmptyDir,
    /// A directory and everything beneath it, by [`remove_tree`] (rsync with `--delete`).
    Tree,
}

/// Move `tmp` to `name` within `parent`, replacing a file or symlink there, and a directory as
/// `way` allows.
pub fn rename_into_place(parent: &OwnedFd, tmp: &[u8], name: &[u8], way: InTheWay) -> io::Result<()> {
    rename_between(parent, tmp, parent, name, way)
}

/// Move `from` in directory `from_dir` to `name` in `parent` (a partial file from the working
/// directory into place), replacing a file or symlink there, and a directory as `way` allows.
pub fn rename_between(from_dir: &OwnedFd, from: &[u8], parent: &OwnedFd, name: &[u8], way: InTheWay) -> io::Result<()> {
    let rename = || rfs::renameat(from_dir, from, parent, name);
    match rename() {
        Ok(()) => return Ok(()),
        Err(Errno::ISDIR | Errno::NOTEMPTY | Errno::EXIST) => {}
        Err(e) => return Err(ioe(e)),
    }
    make_way(parent, name, way)?;
    // Once: a directory made there again meanwhile is in the way again.
    rename().map_err(|e| match e {
        Errno::ISDIR | Errno::NOTEMPTY | Errno::EXIST => {
            io::Error::new(io::ErrorKind::AlreadyExists, "a directory is in the way")
        }
        e => ioe(e),
    })
}

/// Remove directory `name` of `parent`, which holds the name of a non-directory being renamed
/// into place, as `way` allows; never following a symlink ([`remove_tree`]).
fn make_way(parent: &OwnedFd, name: &[u8], way: InTheWay) -> io::Result<()> {
    let in_the_way =
        |why: &str| io::Error::new(io::ErrorKind::AlreadyExists, format!("a directory is in the way ({why})"));
    if name::is_work_dir_name(name) {
        return Err(in_the_way("a linerate working directory is never removed"));
    }
    match way {
        InTheWay::Tree => remove_tree(parent, name),
        InTheWay::EmptyDir => rfs::unlinkat(parent, name, AtFlags::REMOVEDIR).map_err(|e| match e {
            Errno::NOTEMPTY | Errno::EXIST => in_the_way("not empty; --delete replaces it, as rsync does"),
            e => ioe(e),
        }),
    }
}

/// Remove a temporary file, ignoring a missing one.
pub fn remove(parent: &OwnedFd, tmp: &[u8]) {
    let _ = rfs::unlinkat(parent, tmp, AtFlags::empty());
}

/// Create symlink `name -> target` beneath `parent` atomically (temp name + rename), with its
/// owner (`lchown`, with `-o`/`-g`) and mtime, replacing what is there, a directory as `way` allows.
pub fn make_symlink(
    parent: &OwnedFd,
    tmp: &[u8],
    name: &[u8],
    target: &[u8],
    mtime: Time,
    ids: Ids,
    way: InTheWay,
) -> io::Result<()> {
    let _ = rfs::unlinkat(parent, tmp, AtFlags::empty());
    rfs::symlinkat(target, parent, tmp).map_err(ioe)?;
    let r = chown_entry(parent, tmp, ids)
        .and_then(|()| rfs::utimensat(parent, tmp, &timestamps(mtime), AtFlags::SYMLINK_NOFOLLOW).map_err(ioe))
        .and_then(|()| rename_into_place(parent, tmp, name, way));
    if r.is_err() {
        remove(parent, tmp);
    }
    r
}

/// `-H`: give the regular file `first` in `target_dir` the further name `name` in `dir`, never
/// following a symlink: linked under `tmp`, checked to be that same regular file, and renamed
/// over whatever `name` was (a file or symlink; a directory as `way` allows). Nothing changes
/// when `name` already is that file (a second run).
pub fn hard_link(
    target_dir: &OwnedFd,
    first: &[u8],
    dir: &OwnedFd,
    name: &[u8],
    tmp: &[u8],
    way: InTheWay,
) -> io::Result<()> {
    use rustix::fs::FileType;
    let regular = |st: &rfs::Stat| FileType::from_raw_mode(st.st_mode) == FileType::RegularFile;
    let t = rfs::statat(target_dir, first, AtFlags::SYMLINK_NOFOLLOW).map_err(ioe)?;
    if !regular(&t) {
        return Err(io::Error::other("its first name is no longer a regular file"));
    }
    if let Ok(cur) = rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        if (cur.st_dev, cur.st_ino) == (t.st_dev, t.st_ino) {
            return Ok(());
        }
    }
    let _ = rfs::unlinkat(dir, tmp, AtFlags::empty());
    // No AT_SYMLINK_FOLLOW: a symlink swapped in meanwhile is linked itself, never its target,
    // and then refused below.
    rfs::linkat(target_dir, first, dir, tmp, AtFlags::empty()).map_err(ioe)?;
    let linked = rfs::statat(dir, tmp, AtFlags::SYMLINK_NOFOLLOW).map_err(ioe);
    let r = match linked {
        Ok(l) if regular(&l) && (l.st_dev, l.st_ino) == (t.st_dev, t.st_ino) => rename_into_place(dir, tmp, name, way),
        Ok(_) => Err(io::Error::other("its first name changed while being linked")),
        Err(e) => Err(e),
    };
    if r.is_err() {
        remove(dir, tmp);
    }
    r
}

/// Size of the blocks [`write_sparse`] leaves unwritten when they hold only zeros.
pub const SPARSE_BLOCK: usize = 4096;

/// `-S`: write `data` at `offset` (a multiple of [`SPARSE_BLOCK`]), leaving blocks of zeros
/// unwritten so that they stay holes in a new file; the caller gives the file its full size.
pub fn write_sparse(file: &File, data: &[u8], offset: u64) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut run: Option<usize> = None;
    let mut at = 0;
    for block in data.chunks(SPARSE_BLOCK) {
        let zero = block.iter().all(|&b| b == 0);
        match (zero, run) {
            (false, None) => run = Some(at),
            (true, Some(start)) => {
                file.write_all_at(&data[start..at], offset + start as u64)?;
                run = None;
            }
            _ => {}
        }
        at += block.len();
    }
    if let Some(start) = run {
        file.write_all_at(&data[start..], offset + start as u64)?;
    }
    Ok(())
}

/// fsync a directory.
pub fn sync_dir(fd: &OwnedFd) -> io::Result<()> {
    rfs::fsync(fd).map_err(ioe)
}

/// Where a session's sources land.
#[derive(Debug)]
pub struct Destination {
    /// The directory that is directory id 0 of the session.
    pub dir: OwnedFd,
    /// True when sources go into `dir` under their own names; false when the single source
    /// becomes the last path component (which `dir` is the parent of).
    pub into_dir: bool,
    /// A dry run's destination directory that does not exist yet (it would be created): `dir`
    /// is then its parent, and nothing beneath the destination exists.
    pub absent: bool,
}

/// Resolve a destination path beneath `root` as `placement` asks
/// ([`Placement`]): `Cp` follows `cp -r` (an existing directory
/// receives the sources under their names; otherwise its parent must exist and exactly one source
/// takes the final name); `Into` makes the destination a directory (creating its last component
/// when absent, except in a `dry_run`, which creates nothing); `As` makes the single source (a
/// directory's contents) the destination itself, refused up front when a non-directory is there.
pub fn resolve_destination(
    root: &OwnedFd,
    dest: &[u8],
    sources: u32,
    placement: Placement,
    dry_run: bool,
) -> Result<Destination, PlaceError> {
    let parts = name::split_dest(dest)?;
    let shown = name::escape(dest);
    let open_root = || {
        rfs::openat(root, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| PlaceError::Root(ioe(e)))
    };
    let Some((last, parents)) = parts.split_last() else {
        if placement == Placement::As {
            return Err(PlaceError::AsNeedsAName);
        }
        return Ok(Destination { dir: open_root()?, into_dir: true, absent: false });
    };
    let mut dir = open_root()?;
    for p in parents {
        dir = open_dir(&dir, p).map_err(|e| PlaceError::Parent { shown: shown.clone(), parent: name::escape(p), e })?;
    }
    let existing = rfs::statat(&dir, *last, AtFlags::SYMLINK_NOFOLLOW)
        .map(|st| rfs::FileType::from_raw_mode(st.st_mode) == rfs::FileType::Directory);
    place(dir, last, existing, sources, placement, dry_run, &shown, |dir| open_dir(dir, last))
}

/// Why a copy's destination or a pull's source was refused before anything was sent (the
/// message goes to the client in the session's ERROR frame). In the fields, `shown` is the path
/// as the client gave it, escaped for display ([`name::escape`]), `e` what the system said.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // the fields are named in the paragraph above
pub enum PlaceError {
    /// The path is not a valid destination path (a bad component).
    #[error(transparent)]
    Path(#[from] linerate_proto::ProtoError),
    /// The root directory could not be opened.
    #[error("opening the root: {0}")]
    Root(io::Error),
    /// `As` without a name to give the copy.
    #[error("copying a directory's contents (a source ending in '/') needs a destination directory name, not the top")]
    AsNeedsAName,
    /// A directory above the destination could not be opened.
    #[error("destination '{shown}': parent '{parent}': {e}")]
    Parent { shown: String, parent: String, e: io::Error },
    /// The destination's last component is invalid, or could not be opened or examined.
    #[error("destination '{shown}': {e}")]
    Destination { shown: String, e: io::Error },
    /// A file where a directory's contents must go.
    #[error("destination '{shown}' exists and is not a directory; a directory's contents (a source ending in '/') need a directory")]
    ContentsNeedADirectory { shown: String },
    /// A file (or nothing) where several sources need a directory.
    #[error("destination '{shown}' is not a directory, and {sources} sources need one")]
    SourcesNeedADirectory { shown: String, sources: u32 },
    /// A file where `Into` needs a directory.
    #[error("destination '{shown}' exists and is not a directory")]
    NotADirectory { shown: String },
    /// The destination directory could not be created.
    #[error("creating destination directory '{shown}': {e}")]
    Create { shown: String, e: io::Error },
    /// An ssh user's destination path over the protocol's cap.
    #[error("destination path longer than 4096 bytes")]
    DestinationTooLong,
    /// An ssh user's destination path with a NUL byte.
    #[error("destination path contains NUL")]
    DestinationNul,
    /// A pull of the root itself.
    #[error("name the file or directory to pull (the root itself has no name)")]
    SourceUnnamed,
    /// An ssh user's pull of `.`, `..` or a home.
    #[error("source '{shown}': name the file or directory to pull (not '.', '..' or a home)")]
    SourceNotNamed { shown: String },
    /// An ssh user's source path over the cap or with a NUL byte.
    #[error("source path longer than 4096 bytes or containing NUL")]
    SourceBad,
    /// A directory above the source could not be opened.
    #[error("source '{shown}': '{parent}': {e}")]
    SourceParent { shown: String, parent: String, e: io::Error },
    /// The source could not be examined.
    #[error("source '{shown}': {e}")]
    Source { shown: String, e: io::Error },
    /// Pulling hands the walk paths under `/proc/self/fd`.
    #[error("pulling needs /proc on the server")]
    NoProc,
}

/// The placement rules once the destination's parent `dir` is open and `existing` says whether
/// `last` is a directory there (`Err(NOENT)`: nothing there). Everything that can be refused is
/// refused here, before anything is sent: a file where a directory must be (`As` takes only a
/// directory's contents, `Into` needs a directory).
#[allow(clippy::too_many_arguments)]
fn place(
    dir: OwnedFd,
    last: &[u8],
    existing: Result<bool, Errno>,
    sources: u32,
    placement: Placement,
    dry_run: bool,
    shown: &str,
    open: impl Fn(&OwnedFd) -> io::Result<OwnedFd>,
) -> Result<Destination, PlaceError> {
    let shown = || shown.to_string();
    let many = || PlaceError::SourcesNeedADirectory { shown: shown(), sources };
    let not_dir = || PlaceError::NotADirectory { shown: shown() };
    let at = |dir, into_dir| Ok(Destination { dir, into_dir, absent: false });
    match (placement, existing) {
        // The source is a directory's contents: a file cannot take them.
        (Placement::As, Ok(false)) if sources == 1 => Err(PlaceError::ContentsNeedADirectory { shown: shown() }),
        (Placement::As, Ok(true) | Err(Errno::NOENT)) if sources == 1 => at(dir, false),
        (Placement::As, Ok(_) | Err(Errno::NOENT)) => Err(many()),
        (_, Ok(true)) => {
            let d = open(&dir).map_err(|e| PlaceError::Destination { shown: shown(), e })?;
            at(d, true)
        }
        // A dry run changes nothing: the destination would be created, and nothing is in it.
        (Placement::Into, Err(Errno::NOENT)) if dry_run => Ok(Destination { dir, into_dir: true, absent: true }),
        (Placement::Into, Err(Errno::NOENT)) => {
            let (d, _) = make_dir(&dir, last).map_err(|e| PlaceError::Create { shown: shown(), e })?;
            // Made for the copy: the same mode a directory of the tree gets by default.
            let _ = rfs::fchmod(&d, Mode::from_raw_mode(0o777 & !umask()));
            at(d, true)
        }
        (Placement::Into, Ok(false)) => Err(not_dir()),
        (Placement::Cp, Ok(false) | Err(Errno::NOENT)) if sources == 1 => at(dir, false),
        (Placement::Cp, Ok(false) | Err(Errno::NOENT)) => Err(many()),
        (_, Err(e)) => Err(PlaceError::Destination { shown: shown(), e: ioe(e) }),
    }
}

/// Resolve a destination the way scp does for the ssh user who started the server
/// (the server's `PathMode::AsUser`): relative to `base` (the login directory), absolute paths
/// allowed (`~/` is the login directory too), symlinks and `..` in the path followed as the
/// operating system allows; then the rules of [`resolve_destination`]. Entries of the tree are
/// later created beneath the returned handle, confined as always.
pub fn resolve_user_destination(
    base: &OwnedFd,
    dest: &[u8],
    sources: u32,
    placement: Placement,
    dry_run: bool,
) -> Result<Destination, PlaceError> {
    if dest.len() > linerate_proto::caps::MAX_PATH {
        return Err(PlaceError::DestinationTooLong);
    }
    if dest.contains(&0) {
        return Err(PlaceError::DestinationNul);
    }
    let shown = name::escape(dest);
    // `~` and `~/...` name the login directory, as scp (in SFTP mode) expands them.
    let dest = if dest == b"~" { &b""[..] } else { dest.strip_prefix(b"~/").unwrap_or(dest) };
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let trimmed = {
        let mut t = dest;
        while t.len() > 1 && t.ends_with(b"/") {
            t = &t[..t.len() - 1];
        }
        t
    };
    // `.`, `/`, an empty path: a directory that has no name to give a copy.
    let unnamed = trimmed.is_empty() || trimmed == b"/" || trimmed == b"." || trimmed.ends_with(b"/.");
    if placement != Placement::As || unnamed {
        if placement == Placement::As {
            return Err(PlaceError::AsNeedsAName);
        }
        let whole: &[u8] = if dest.is_empty() { b"." } else { dest };
        match rfs::openat(base, whole, dir_flags, Mode::empty()) {
            Ok(dir) => return Ok(Destination { dir, into_dir: true, absent: false }),
            Err(Errno::NOENT | Errno::NOTDIR) => {}
            Err(e) => return Err(PlaceError::Destination { shown, e: ioe(e) }),
        }
    }
    // Not a directory (or absent, or to become the copy): its parent must be one.
    let (parent, last): (&[u8], &[u8]) = match trimmed.iter().rposition(|&b| b == b'/') {
        Some(0) => (b"/", &trimmed[1..]),
        Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
        None => (b".", trimmed),
    };
    name::validate(last).map_err(|e| PlaceError::Destination {
        shown: shown.clone(),
        e: io::Error::new(io::ErrorKind::InvalidInput, e),
    })?;
    let dir = rfs::openat(base, parent, dir_flags, Mode::empty()).map_err(|e| PlaceError::Parent {
        shown: shown.clone(),
        parent: name::escape(parent),
        e: ioe(e),
    })?;
    let existing = rfs::statat(&dir, last, AtFlags::empty())
        .map(|st| rfs::FileType::from_raw_mode(st.st_mode) == rfs::FileType::Directory);
    place(dir, last, existing, sources, placement, dry_run, &shown, |dir| {
        rfs::openat(dir, last, dir_flags, Mode::empty()).map_err(ioe)
    })
}

/// Why [`DirCache::get`] has no handle: a directory above could not be created (it was
/// reported once; what lies beneath it is skipped without a message of its own, as rsync does).
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("a parent directory could not be created")]
pub struct BeneathFailed;

impl BeneathFailed {
    /// Whether `e` is this: the entry lies beneath a directory that failed.
    pub fn is(e: &io::Error) -> bool {
        e.get_ref().is_some_and(|inner| inner.is::<BeneathFailed>())
    }
}

/// Open directory handles of a session, by directory id, bounded in number. A handle that was
/// dropped is reopened by walking down from the nearest open ancestor, component by component.
pub struct DirCache {
    root: Arc<OwnedFd>,
    fds: HashMap<u64, Arc<OwnedFd>>,
    failed: HashSet<u64>,
    /// Directories this session created: nothing in them predates it, so a file offered there
    /// needs no look at the destination.
    fresh: HashSet<u64>,
}

impl DirCache {
    /// A cache whose directory 0 is `root`.
    pub fn new(root: OwnedFd) -> DirCache {
        DirCache { root: Arc::new(root), fds: HashMap::new(), failed: HashSet::new(), fresh: HashSet::new() }
    }

    /// Remember a handle just created for `id`.
    pub fn insert(&mut self, id: u64, fd: OwnedFd) -> Arc<OwnedFd> {
        if self.fds.len() >= DIR_CACHE_CAP {
            self.fds.clear();
        }
        let fd = Arc::new(fd);
        self.fds.insert(id, fd.clone());
        fd
    }

    /// Remember that directory `id` could not be created; everything beneath it fails with
    /// [`BeneathFailed`]. Directory 0 is marked for a dry run's absent destination.
    /// Returns whether it was not marked before.
    pub fn mark_failed(&mut self, id: u64) -> bool {
        self.failed.insert(id)
    }

    /// The handle of directory 0 (the destination, or its parent).
    pub fn root(&self) -> Arc<OwnedFd> {
        self.root.clone()
    }

    /// Remember that this session created directory `id`.
    pub fn mark_fresh(&mut self, id: u64) {
        self.fresh.insert(id);
    }

    /// Whether this session created directory `id` (the destination itself never counts).
    pub fn is_fresh(&self, id: u64) -> bool {
        self.fresh.contains(&id)
    }

    /// The handle of directory `id`, reopening it if needed.
    pub fn get(&mut self, id: u64, tracker: &Tracker) -> io::Result<Arc<OwnedFd>> {
        if self.failed.contains(&id) {
            return Err(io::Error::other(BeneathFailed));
        }
        if id == 0 {
            return Ok(self.root.clone());
        }
        if let Some(fd) = self.fds.get(&id) {
            return Ok(fd.clone());
        }
        let mut chain = Vec::new();
        let mut cur = id;
        let mut base = loop {
            if self.failed.contains(&cur) {
                return Err(io::Error::other(BeneathFailed));
            }
            if cur == 0 {
                break self.root.clone();
            }
            if let Some(fd) = self.fds.get(&cur) {
                break fd.clone();
            }
            let d = tracker.dir_info(cur).ok_or_else(|| io::Error::other("undeclared directory"))?;
            chain.push(cur);
            cur = d.parent;
        };
        while let Some(next) = chain.pop() {
            let d = tracker.dir_info(next).ok_or_else(|| io::Error::other("undeclared directory"))?;
            let fd = open_dir(&base, &d.name)?;
            base = self.insert(next, fd);
        }
        Ok(base)
    }
}

/// Every name in directory `dir` but `.` and `..`.
pub fn list_dir(dir: &OwnedFd) -> io::Result<Vec<Vec<u8>>> {
    let mut d = rfs::Dir::read_from(dir).map_err(ioe)?;
    let mut out = Vec::new();
    while let Some(e) = d.read() {
        let e = e.map_err(ioe)?;
        let n = e.file_name().to_bytes();
        if n != b"." && n != b".." {
            out.push(n.to_vec());
        }
    }
    Ok(out)
}

/// Remove entry `name` of `parent`, with everything beneath it if it is a directory (never
/// following a symlink: a link is removed, not its target).
pub fn remove_tree(parent: &OwnedFd, name: &[u8]) -> io::Result<()> {
    remove_tree_at(parent, name, 0)
}

fn remove_tree_at(parent: &OwnedFd, name: &[u8], depth: u32) -> io::Result<()> {
    match rfs::unlinkat(parent, name, AtFlags::empty()) {
        Ok(()) => return Ok(()),
        Err(Errno::ISDIR | Errno::PERM) => {}
        Err(e) => return Err(ioe(e)),
    }
    // Each level holds a directory handle open: stay well inside the descriptor limit.
    if depth >= 256 {
        return Err(io::Error::other("directory nesting too deep to delete"));
    }
    let dir = open_dir(parent, name)?;
    for child in list_dir(&dir)? {
        remove_tree_at(&dir, &child, depth + 1)?;
    }
    rfs::unlinkat(parent, name, AtFlags::REMOVEDIR).map_err(ioe)
}

/// Resolve the source of a pull beneath `root`, one component at a time with `O_NOFOLLOW`, so no
/// symlink on the way can lead outside it. Returns the handle of the source's parent (keep it
/// for the session) and a path to the source through that handle (`/proc/self/fd/N/name`), which
/// cannot be redirected by renaming the directories above it. The source itself may be a file,
/// a directory or a symlink (sent as a link).
pub fn resolve_source(root: &OwnedFd, path: &[u8]) -> Result<(OwnedFd, std::path::PathBuf), PlaceError> {
    use std::os::fd::AsRawFd;
    let parts = name::split_dest(path)?;
    let shown = name::escape(path);
    let Some((last, parents)) = parts.split_last() else {
        return Err(PlaceError::SourceUnnamed);
    };
    let mut dir = rfs::openat(root, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| PlaceError::Root(ioe(e)))?;
    for p in parents {
        dir = open_dir(&dir, p).map_err(|e| PlaceError::SourceParent {
            shown: shown.clone(),
            parent: name::escape(p),
            e,
        })?;
    }
    rfs::statat(&dir, *last, AtFlags::SYMLINK_NOFOLLOW).map_err(|e| PlaceError::Source { shown, e: ioe(e) })?;
    if !proc_fd_available() {
        return Err(PlaceError::NoProc);
    }
    let mut p = std::path::PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
    p.push(std::ffi::OsStr::from_bytes(last));
    Ok((dir, p))
}

/// The directory a pull's source was resolved in, which confines the server's walk of it. Paths
/// beneath its prefix (`/proc/self/fd/N`, see [`Anchor::path`]) are opened relative to the directory handle
/// with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`, so a symlink
/// anywhere on the way (a directory swapped for one while the walk runs) is refused, never
/// followed.
#[derive(Debug)]
pub struct Anchor {
    dir: OwnedFd,
    prefix: std::path::PathBuf,
}

impl Anchor {
    /// Anchor at `dir` (kept open for as long as the anchor lives).
    pub fn new(dir: OwnedFd) -> Anchor {
        use std::os::fd::AsRawFd;
        let prefix = std::path::PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
        Anchor { dir, prefix }
    }

    /// The path that names `name` in the anchored directory.
    pub fn path(&self, name: &[u8]) -> std::path::PathBuf {
        self.prefix.join(std::ffi::OsStr::from_bytes(name))
    }

    /// Open `path` (beneath [`Anchor::path`]) with `flags`, following no symlink on the way. A
    /// path not beneath the prefix, or a symlink met on the way, is an error.
    pub fn open(&self, path: &std::path::Path, flags: OFlags) -> io::Result<OwnedFd> {
        use rustix::fs::ResolveFlags;
        let rel = path
            .strip_prefix(&self.prefix)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "not beneath the pulled directory"))?;
        let how = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        rfs::openat2(&self.dir, rel, flags | OFlags::CLOEXEC | OFlags::NOFOLLOW, Mode::empty(), how).map_err(
            |e| match e {
                Errno::LOOP | Errno::XDEV => io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    "a symlink on the way (changed while walking?); not followed",
                ),
                Errno::NOSYS => {
                    io::Error::new(io::ErrorKind::Unsupported, "pulling needs openat2 (Linux 5.6 or later)")
                }
                e => ioe(e),
            },
        )
    }
}

/// Resolve the source of a pull for a server run by the ssh user
/// (the server's `PathMode::AsUser`), as scp does: relative to `base` (the login directory,
/// also `~/`), absolute paths allowed, symlinks and `..` in the directories above the source
/// followed as the operating system allows. The source itself is not followed (a symlink is sent
/// as a link), and what lies beneath it is walked as always. Returns what [`resolve_source`] does.
pub fn resolve_user_source(base: &OwnedFd, path: &[u8]) -> Result<(OwnedFd, std::path::PathBuf), PlaceError> {
    use std::os::fd::AsRawFd;
    if path.len() > linerate_proto::caps::MAX_PATH || path.contains(&0) {
        return Err(PlaceError::SourceBad);
    }
    let shown = name::escape(path);
    let path = path.strip_prefix(b"~/").unwrap_or(path);
    let mut trimmed = path;
    while trimmed.len() > 1 && trimmed.ends_with(b"/") {
        trimmed = &trimmed[..trimmed.len() - 1];
    }
    let (parent, last): (&[u8], &[u8]) = match trimmed.iter().rposition(|&b| b == b'/') {
        Some(0) => (b"/", &trimmed[1..]),
        Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
        None => (b".", trimmed),
    };
    if name::validate(last).is_err() || last == b"~" {
        return Err(PlaceError::SourceNotNamed { shown });
    }
    let dir = rfs::openat(base, parent, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| PlaceError::SourceParent { shown: shown.clone(), parent: name::escape(parent), e: ioe(e) })?;
    rfs::statat(&dir, last, AtFlags::SYMLINK_NOFOLLOW).map_err(|e| PlaceError::Source { shown, e: ioe(e) })?;
    if !proc_fd_available() {
        return Err(PlaceError::NoProc);
    }
    let mut p = std::path::PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
    p.push(std::ffi::OsStr::from_bytes(last));
    Ok((dir, p))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    #[test]
    fn a_sessions_temporary_names_share_its_prefix_and_no_other_sessions() {
        let (a, b) = (temp_prefix("s1"), temp_prefix("s2"));
        for id in [0, 7, u64::MAX] {
            assert!(temp_name("s1", id).starts_with(&a));
            assert!(!temp_name("s2", id).starts_with(&a));
        }
        assert!(!b"a-user-file".starts_with(&a) && a.starts_with(b".linerate-tmp-"));
        assert_ne!(a, b);
    }

    fn base(p: &std::path::Path) -> OwnedFd {
        open_root(p).unwrap()
    }

    fn ino(fd: &OwnedFd) -> u64 {
        rfs::fstat(fd).unwrap().st_ino
    }

    #[test]
    fn an_unnamed_file_is_linked_by_handle_or_through_proc_and_an_existing_name_is_not_replaced() {
        use std::io::Write;
        let t = tempfile::tempdir().unwrap();
        let dir = base(t.path());
        for (name, via_proc) in [(&b"by-handle"[..], false), (&b"through-proc"[..], true)] {
            let mut inc = create_incoming(&dir, b".tmp", 0o644).unwrap();
            assert!(inc.tmp.is_none(), "tmpfs and ext4 have O_TMPFILE");
            inc.file.write_all(name).unwrap();
            let r = if via_proc {
                link_through_proc(&inc.file, &dir, name)
            } else {
                rfs::linkat(&inc.file, "", &dir, name, AtFlags::EMPTY_PATH)
            };
            r.unwrap();
            let path = t.path().join(std::ffi::OsStr::from_bytes(name));
            assert_eq!(std::fs::read(&path).unwrap(), name);
            assert_eq!(link_unnamed(&inc.file, &dir, name), Err(Errno::EXIST));
        }
    }

    #[test]
    fn make_dir_says_whether_it_created_the_directory() {
        let t = tempfile::tempdir().unwrap();
        let dir = base(t.path());
        assert!(make_dir(&dir, b"new").unwrap().1, "created now");
        assert!(!make_dir(&dir, b"new").unwrap().1, "already there: not fresh");
        std::fs::write(t.path().join("file"), b"x").unwrap();
        assert!(make_dir(&dir, b"file").is_err(), "a file in the way is not a directory");
        let mut cache = DirCache::new(base(t.path()));
        cache.mark_fresh(7);
        assert!(cache.is_fresh(7) && !cache.is_fresh(0) && !cache.is_fresh(8));
    }

    #[test]
    fn a_directory_replaces_a_file_or_a_symlink_without_following_it() {
        let t = tempfile::tempdir().unwrap();
        let (dest, outside) = (t.path().join("dest"), t.path().join("outside"));
        std::fs::create_dir_all(dest.join("dir")).unwrap();
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("kept"), b"k").unwrap();
        std::fs::write(dest.join("file"), b"f").unwrap();
        std::os::unix::fs::symlink(&outside, dest.join("link")).unwrap();
        let d = base(&dest);
        for name in ["file", "link"] {
            let (fd, made) = make_dir_replacing(&d, name.as_bytes()).unwrap();
            assert!(made, "{name}: made now, so nothing in it predates the session");
            assert!(dest.join(name).symlink_metadata().unwrap().is_dir(), "{name}");
            assert_eq!(
                ino(&fd),
                dest.join(name).symlink_metadata().map(|m| std::os::unix::fs::MetadataExt::ino(&m)).unwrap()
            );
        }
        assert_eq!(std::fs::read(outside.join("kept")).unwrap(), b"k", "the symlink's target untouched");
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);
        assert!(!make_dir_replacing(&d, b"dir").unwrap().1, "a directory is opened, not replaced");
    }

    #[test]
    fn a_directory_in_the_way_of_a_file_goes_as_rsync_decides_and_never_beyond_it() {
        let t = tempfile::tempdir().unwrap();
        let (dest, outside) = (t.path().join("dest"), t.path().join("outside"));
        std::fs::create_dir(&dest).unwrap();
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("kept"), b"k").unwrap();
        let d = base(&dest);
        let full = |name: &str| {
            std::fs::create_dir_all(dest.join(name).join("deep/er")).unwrap();
            std::fs::write(dest.join(name).join("deep/er/x"), b"x").unwrap();
            std::os::unix::fs::symlink(&outside, dest.join(name).join("out")).unwrap();
            std::os::unix::fs::symlink(outside.join("kept"), dest.join(name).join("deep/kept")).unwrap();
        };
        let tmp = |n: &str| std::fs::write(dest.join(n), n.as_bytes()).unwrap();
        // Without --delete: an empty directory goes, one that holds something stays.
        std::fs::create_dir(dest.join("empty")).unwrap();
        tmp("t1");
        rename_into_place(&d, b"t1", b"empty", InTheWay::EmptyDir).unwrap();
        assert_eq!(std::fs::read(dest.join("empty")).unwrap(), b"t1");
        full("full");
        tmp("t2");
        let e = rename_into_place(&d, b"t2", b"full", InTheWay::EmptyDir).unwrap_err();
        assert!(e.to_string().contains("not empty") && e.to_string().contains("--delete"), "{e}");
        assert!(dest.join("full/deep/er/x").exists() && dest.join("t2").exists(), "nothing removed");
        // With --delete: the whole tree, links removed and never followed.
        rename_into_place(&d, b"t2", b"full", InTheWay::Tree).unwrap();
        assert_eq!(std::fs::read(dest.join("full")).unwrap(), b"t2");
        assert_eq!(std::fs::read(outside.join("kept")).unwrap(), b"k");
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);
        // A directory of the working directory's form is never removed, whatever is asked.
        let work = ".linerate-work-0123456789abcdef0123456789abcdef";
        std::fs::create_dir(dest.join(work)).unwrap();
        tmp("t3");
        for way in [InTheWay::EmptyDir, InTheWay::Tree] {
            let e = rename_into_place(&d, b"t3", work.as_bytes(), way).unwrap_err();
            assert!(e.to_string().contains("working directory"), "{e}");
            assert!(dest.join(work).is_dir());
        }
    }

    #[test]
    fn metadata_differs_in_mode_or_in_the_owners_kept() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("f");
        std::fs::write(&p, b"f").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let st = rfs::stat(&p).unwrap();
        let (uid, gid) = (st.st_uid, st.st_gid);
        assert!(!meta_differs(&st, 0o644, (None, None)));
        assert!(!meta_differs(&st, 0o100644, (None, None)), "the file type bits are not the mode");
        assert!(meta_differs(&st, 0o600, (None, None)), "the finding: a chmod 600");
        assert!(!meta_differs(&st, 0o4644, (None, None)), "set-user-ID is never applied without its owner");
        assert!(meta_differs(&st, 0o4644, (Some(uid), Some(gid))), "and is with it");
        assert!(!meta_differs(&st, 0o644, (Some(uid), Some(gid))));
        assert!(meta_differs(&st, 0o644, (Some(uid + 1), None)) && meta_differs(&st, 0o644, (None, Some(gid + 1))));
        assert!(!meta_differs(&st, 0o644, (Some(u32::MAX), Some(u32::MAX))), "-1 is never applied");
    }

    #[test]
    fn open_regular_opens_only_the_regular_file_it_was_shown() {
        let t = tempfile::tempdir().unwrap();
        let d = base(t.path());
        std::fs::write(t.path().join("f"), b"f").unwrap();
        std::fs::write(t.path().join("g"), b"g").unwrap();
        std::os::unix::fs::symlink("f", t.path().join("l")).unwrap();
        assert!(rustix::fs::mknodat(&d, "fifo", rfs::FileType::Fifo, Mode::from_raw_mode(0o600), 0).is_ok());
        let seen = |n: &str| rfs::statat(&d, n, AtFlags::SYMLINK_NOFOLLOW).unwrap();
        assert!(open_regular(&d, b"f", &seen("f")).unwrap().is_some());
        for n in ["l", "fifo"] {
            assert!(open_regular(&d, n.as_bytes(), &seen(n)).unwrap().is_none(), "{n}");
        }
        // Swapped since the look: a symlink or another file is not taken for it.
        let f = seen("f");
        std::fs::rename(t.path().join("f"), t.path().join("f-old")).unwrap();
        std::os::unix::fs::symlink("g", t.path().join("f")).unwrap();
        assert!(open_regular(&d, b"f", &f).unwrap().is_none(), "a symlink swapped in");
        std::fs::remove_file(t.path().join("f")).unwrap();
        std::fs::copy(t.path().join("g"), t.path().join("f")).unwrap();
        assert!(open_regular(&d, b"f", &f).unwrap().is_none(), "another file swapped in");
    }

    #[test]
    fn user_destination_resolves_like_scp() {
        let t = tempfile::tempdir().unwrap();
        let home = t.path().join("home");
        std::fs::create_dir_all(home.join("sub")).unwrap();
        std::fs::create_dir_all(t.path().join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(t.path().join("elsewhere"), home.join("link")).unwrap();
        let b = base(&home);
        let elsewhere = ino(&open_root(&t.path().join("elsewhere")).unwrap());
        // Empty: the login directory itself.
        let d = resolve_user_destination(&b, b"", 2, Placement::Cp, false).unwrap();
        assert!(d.into_dir && ino(&d.dir) == ino(&b));
        // Relative, through a symlink in the prefix, and with `..`.
        let d = resolve_user_destination(&b, b"link", 1, Placement::Cp, false).unwrap();
        assert!(d.into_dir && ino(&d.dir) == elsewhere);
        let d = resolve_user_destination(&b, b"~/link", 1, Placement::Cp, false).unwrap();
        assert!(d.into_dir && ino(&d.dir) == elsewhere);
        let d = resolve_user_destination(&b, b"~", 1, Placement::Cp, false).unwrap();
        assert!(d.into_dir && ino(&d.dir) == ino(&b));
        let d = resolve_user_destination(&b, b"sub/../link/new", 1, Placement::Cp, false).unwrap();
        assert!(!d.into_dir && ino(&d.dir) == elsewhere);
        // Absolute.
        let abs = t.path().join("elsewhere/x");
        let d = resolve_user_destination(&b, abs.as_os_str().as_bytes(), 1, Placement::Cp, false).unwrap();
        assert!(!d.into_dir && ino(&d.dir) == elsewhere);
        // A new name takes exactly one source; a missing parent is an error.
        assert!(resolve_user_destination(&b, b"newname", 2, Placement::Cp, false)
            .err()
            .unwrap()
            .to_string()
            .contains("2 sources"));
        assert!(resolve_user_destination(&b, b"nope/x", 1, Placement::Cp, false).is_err());
        assert!(resolve_user_destination(&b, b"a\0b", 1, Placement::Cp, false).is_err());
    }

    #[test]
    fn placements_land_the_same_place_every_time() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("has")).unwrap();
        std::fs::write(t.path().join("file"), b"x").unwrap();
        let b = base(t.path());
        let has = ino(&open_root(&t.path().join("has")).unwrap());
        for user in [false, true] {
            let r = |dest: &[u8], n: u32, p: Placement| {
                if user {
                    resolve_user_destination(&b, dest, n, p, false)
                } else {
                    resolve_destination(&b, dest, n, p, false)
                }
            };
            // Into: an existing directory, or one made now (and found again the next time).
            let d = r(b"has", 1, Placement::Into).unwrap();
            assert!(d.into_dir && ino(&d.dir) == has);
            let new = if user { &b"new-user"[..] } else { b"new-root" };
            let first = r(new, 1, Placement::Into).unwrap();
            assert!(first.into_dir, "{user}");
            let again = r(new, 1, Placement::Into).unwrap();
            assert!(again.into_dir && ino(&again.dir) == ino(&first.dir), "{user}: the same directory again");
            assert!(matches!(r(b"file", 1, Placement::Into).unwrap_err(), PlaceError::NotADirectory { .. }));
            assert!(r(b"nope/x", 1, Placement::Into).is_err(), "only the last component is created");
            // As: the parent is the target whether or not a directory of that name exists.
            for dest in [&b"has"[..], b"has/", b"absent"] {
                let d = r(dest, 1, Placement::As).unwrap();
                assert!(!d.into_dir && ino(&d.dir) == ino(&b), "{user} {}", String::from_utf8_lossy(dest));
            }
            // A directory's contents never land on a file: refused before anything is sent.
            let e = r(b"file", 1, Placement::As).unwrap_err();
            assert!(matches!(e, PlaceError::ContentsNeedADirectory { .. }), "{user}: {e}");
            assert!(e.to_string().contains("exists and is not a directory"), "{user}: {e}");
            let e = r(b"has", 2, Placement::As).unwrap_err();
            assert!(matches!(e, PlaceError::SourcesNeedADirectory { sources: 2, .. }), "{e}");
            assert!(e.to_string().contains("2 sources"));
            for top in [&b""[..], b"/"] {
                assert!(matches!(r(top, 1, Placement::As).unwrap_err(), PlaceError::AsNeedsAName));
            }
        }
        assert!(matches!(resolve_user_destination(&b, b".", 1, Placement::As, false), Err(PlaceError::AsNeedsAName)));
        assert!(matches!(resolve_user_destination(&b, b"~", 1, Placement::As, false), Err(PlaceError::AsNeedsAName)));
    }

    #[test]
    fn a_dry_run_creates_no_destination_directory() {
        let t = tempfile::tempdir().unwrap();
        let b = base(t.path());
        for user in [false, true] {
            let d = if user {
                resolve_user_destination(&b, b"new", 1, Placement::Into, true)
            } else {
                resolve_destination(&b, b"new", 1, Placement::Into, true)
            }
            .unwrap();
            assert!(d.absent && d.into_dir && ino(&d.dir) == ino(&b), "{user}");
            assert!(!t.path().join("new").exists(), "{user}: a dry run made the destination");
        }
        let mut cache = DirCache::new(base(t.path()));
        cache.mark_failed(0);
        let tracker = Tracker::new(1 << 20);
        assert!(BeneathFailed::is(&cache.get(0, &tracker).unwrap_err()));
        assert!(!BeneathFailed::is(&io::Error::other("x")));
    }

    #[test]
    fn user_source_resolves_like_scp() {
        let t = tempfile::tempdir().unwrap();
        let home = t.path().join("home");
        std::fs::create_dir_all(home.join("sub")).unwrap();
        std::fs::create_dir_all(t.path().join("elsewhere/d")).unwrap();
        std::os::unix::fs::symlink(t.path().join("elsewhere"), home.join("link")).unwrap();
        let b = base(&home);
        for p in [&b"link/d"[..], b"~/link/d/", b"sub/../link/d"] {
            let (_holder, path) = resolve_user_source(&b, p).unwrap();
            assert!(path.is_dir(), "{}", String::from_utf8_lossy(p));
        }
        let abs = t.path().join("elsewhere/d");
        let (_holder, path) = resolve_user_source(&b, abs.as_os_str().as_bytes()).unwrap();
        assert!(path.is_dir());
        // The source itself is not followed: a symlink stays a symlink.
        let (_holder, path) = resolve_user_source(&b, b"link").unwrap();
        assert!(std::fs::symlink_metadata(path).unwrap().file_type().is_symlink());
        for bad in [&b""[..], b"~", b"~/", b".", b"sub/..", b"missing", b"a\0b"] {
            assert!(resolve_user_source(&b, bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn a_hard_link_is_the_same_file_replaces_a_file_and_refuses_a_symlink_or_a_directory() {
        use std::os::unix::fs::MetadataExt;
        let t = tempfile::tempdir().unwrap();
        let d = base(t.path());
        std::fs::write(t.path().join("first"), b"data").unwrap();
        std::fs::write(t.path().join("old"), b"old").unwrap();
        hard_link(&d, b"first", &d, b"old", b"tmp", InTheWay::EmptyDir).unwrap();
        let (a, b) =
            (std::fs::metadata(t.path().join("first")).unwrap(), std::fs::metadata(t.path().join("old")).unwrap());
        assert_eq!((a.ino(), a.nlink()), (b.ino(), 2));
        hard_link(&d, b"first", &d, b"old", b"tmp", InTheWay::EmptyDir).unwrap();
        assert_eq!(std::fs::metadata(t.path().join("first")).unwrap().nlink(), 2, "already linked: unchanged");
        std::os::unix::fs::symlink("/etc/passwd", t.path().join("sym")).unwrap();
        assert!(hard_link(&d, b"sym", &d, b"new", b"tmp", InTheWay::EmptyDir).is_err(), "a symlink as first name");
        std::fs::create_dir(t.path().join("dir")).unwrap();
        assert!(hard_link(&d, b"dir", &d, b"new", b"tmp", InTheWay::EmptyDir).is_err(), "a directory as first name");
        assert!(!t.path().join("new").exists() && !t.path().join("tmp").exists());
    }

    #[test]
    fn sparse_writes_leave_zero_blocks_unwritten() {
        use std::os::unix::fs::MetadataExt;
        let t = tempfile::tempdir().unwrap();
        let f = File::options().create(true).truncate(true).read(true).write(true).open(t.path().join("s")).unwrap();
        let mut data = vec![0u8; 1 << 20];
        data[5] = 1;
        data[(1 << 20) - 1] = 2;
        write_sparse(&f, &data, 1 << 20).unwrap();
        f.set_len(3 << 20).unwrap();
        let m = f.metadata().unwrap();
        assert!(m.blocks() * 512 <= 64 * 1024, "{} blocks", m.blocks());
        let mut back = vec![0u8; 1 << 20];
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut back, 1 << 20).unwrap();
        assert_eq!(back, data);
    }
}
