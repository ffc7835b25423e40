//! Resume journals: how a receiver keeps the finished chunks of a large file across an
//! interrupted transfer, without hashing what it writes.
//!
//! A file of more than one chunk is written to a partial file in the receiver's working directory
//! ([`crate::workdir`]), `<k>.part`, with a journal `<k>.journal` (`k` from the file's path
//! beneath the destination). The journal's header names the source it belongs to (size,
//! modification time, chunk size, path) and the boot it was written in; each entry records the index of a chunk written
//! to the partial file, as soon as it is written. Every second or 64 MiB the partial file is made
//! durable (`fdatasync`), then a checkpoint entry is appended and the journal made durable.
//!
//! When the same source is offered again, the chunks a journal lists are trusted if the machine
//! has not restarted since (what a killed process wrote is in the page cache); after a restart,
//! only those listed before the last checkpoint, whose bytes reached the disk. No chunk is
//! hashed: a chunk corrupted on disk by something other than a crash is not noticed here, only by
//! `--verify`, which checks the whole file. The partial file is renamed into place only when
//! complete, so nothing appears under its final name before it is whole.
//!
//! A journal read back is untrusted input (anyone who can write the destination can write it):
//! its header must match the source exactly, the path it names is at most 4096 bytes, and at most
//! [`MAX_ENTRIES`] entries are read.

use linerate_proto::frame::Time;
use rustix::fs::{self as rfs, AtFlags, Mode, OFlags};
use std::collections::BTreeSet;
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

const MAGIC: &[u8; 5] = b"LNRJ\x03";
/// An entry: a chunk index and its complement (so a zeroed or torn entry is never read as one).
const ENTRY: usize = 16;
/// The index of a checkpoint entry.
const CHECKPOINT: u64 = u64::MAX;
/// Bytes of the boot id after the header.
const BOOT: usize = 16;
/// Flush the journal at least this often while chunks arrive.
const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// ... or after this many bytes of chunks.
const FLUSH_BYTES: u64 = 64 << 20;

/// This boot's id (`/proc/sys/kernel/random/boot_id`), or zeros when unknown (then no journal
/// counts as written in this boot).
fn boot_id() -> [u8; BOOT] {
    let mut id = [0u8; BOOT];
    let Ok(text) = std::fs::read_to_string("/proc/sys/kernel/random/boot_id") else { return id };
    let digits: Vec<u8> = text.bytes().filter_map(|c| (c as char).to_digit(16).map(|d| d as u8)).collect();
    if digits.len() != 2 * BOOT {
        return id;
    }
    for (i, pair) in digits.chunks(2).enumerate() {
        id[i] = pair[0] << 4 | pair[1];
    }
    id
}

fn entry(index: u64) -> [u8; ENTRY] {
    let mut e = [0u8; ENTRY];
    e[..8].copy_from_slice(&index.to_be_bytes());
    e[8..].copy_from_slice(&(!index).to_be_bytes());
    e
}

/// The key of the file at `path` beneath the destination: 128 bits of its BLAKE3, in hex.
pub fn key(path: &[u8]) -> String {
    hex::encode(&blake3::hash(path).as_bytes()[..16])
}

/// Names of the partial file and the journal of key `key` in the working directory.
pub fn key_names(key: &str) -> (Vec<u8>, Vec<u8>) {
    (format!("{key}.part").into_bytes(), format!("{key}.journal").into_bytes())
}

/// The partial file's and the journal's names, in the working directory, for the file at `path`
/// beneath the destination.
pub fn names(path: &[u8]) -> (Vec<u8>, Vec<u8>) {
    key_names(&key(path))
}

/// The path beneath the destination that journal `jname` in `work` belongs to, if it is a
/// readable journal of this format (bounded: at most a header and a 4096-byte path are read).
pub fn read_path(work: &OwnedFd, jname: &[u8]) -> Option<Vec<u8>> {
    let f = rfs::openat(work, jname, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()).ok()?;
    let f = File::from(f);
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let fixed = MAGIC.len() + 8 + 8 + 4 + 8;
    let mut head = vec![0u8; fixed + 2];
    f.read_exact_at(&mut head, 0).ok()?;
    if head[..MAGIC.len()] != MAGIC[..] {
        return None;
    }
    let len = usize::from(u16::from_be_bytes([head[fixed], head[fixed + 1]]));
    if len == 0 || len > linerate_proto::caps::MAX_PATH {
        return None;
    }
    let mut path = vec![0u8; len];
    f.read_exact_at(&mut path, (fixed + 2) as u64).ok()?;
    Some(path)
}

/// The source a journal belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Source<'a> {
    /// Path beneath the destination (the key of the partial file).
    pub path: &'a [u8],
    /// Size in bytes.
    pub size: u64,
    /// Modification time.
    pub mtime: Time,
    /// Chunk size of the session.
    pub chunk: u64,
}

impl Source<'_> {
    fn header(&self) -> Vec<u8> {
        let mut h = MAGIC.to_vec();
        h.extend_from_slice(&self.size.to_be_bytes());
        h.extend_from_slice(&self.mtime.sec.to_be_bytes());
        h.extend_from_slice(&self.mtime.nsec.to_be_bytes());
        h.extend_from_slice(&self.chunk.to_be_bytes());
        h.extend_from_slice(&(self.path.len() as u16).to_be_bytes());
        h.extend_from_slice(self.path);
        h
    }
    fn chunks(&self) -> u64 {
        self.size.div_ceil(self.chunk.max(1))
    }
    fn chunk_len(&self, i: u64) -> usize {
        (self.size - i * self.chunk).min(self.chunk) as usize
    }
}

/// An open journal of a partial file being received.
pub struct Journal {
    file: File,
    name: Vec<u8>,
    end: u64,
    unsynced: u64,
    last: Instant,
    /// Whether the partial file holds a chunk (kept from before, or written now).
    holds: bool,
}

/// A partial file ready to receive chunks.
pub struct Partial {
    /// The partial file, open for writing.
    pub file: File,
    /// Its name in the working directory.
    pub name: Vec<u8>,
    /// Its journal.
    pub journal: Journal,
    /// Verified chunks it already holds, as `(first, count)` ranges, in order.
    pub have: Vec<(u64, u64)>,
}

fn open_rw(parent: &OwnedFd, name: &[u8]) -> io::Result<File> {
    let fd = rfs::openat(parent, name, OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?;
    let f = File::from(fd);
    if !f.metadata()?.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    Ok(f)
}

fn create(parent: &OwnedFd, name: &[u8]) -> io::Result<File> {
    let flags = OFlags::RDWR | OFlags::CREATE | OFlags::TRUNC | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rfs::openat(parent, name, flags, Mode::from_raw_mode(0o600)) {
        Ok(fd) => Ok(File::from(fd)),
        // Something that is not a regular file sits there (a directory, a symlink): replace it
        // only if it is an empty directory or a link; otherwise report.
        Err(_) => {
            let _ = rfs::unlinkat(parent, name, AtFlags::empty());
            Ok(File::from(rfs::openat(parent, name, flags | OFlags::EXCL, Mode::from_raw_mode(0o600))?))
        }
    }
}

/// Most journal entries read (2 Mi entries, 32 MiB of journal: 1 TiB of 1 MiB chunks with a
/// checkpoint after each). A longer journal is read that far; the chunks it names beyond are
/// simply sent again.
pub const MAX_ENTRIES: u64 = 1 << 21;

/// The chunks a usable journal for `src` lets the receiver keep, in order, with the partial file
/// and the journal; `None` when there is none. Linear in the journal's size: one buffered pass.
fn trusted(parent: &OwnedFd, src: &Source<'_>) -> Option<(File, File, Vec<u64>)> {
    let (pname, jname) = names(src.path);
    let journal = open_rw(parent, &jname).ok()?;
    let part = open_rw(parent, &pname).ok()?;
    let header = src.header();
    let mut got = vec![0u8; header.len() + BOOT];
    journal.read_exact_at(&mut got, 0).ok()?;
    if got[..header.len()] != header[..] {
        return None;
    }
    let this_boot = boot_id();
    let same_boot = this_boot != [0; BOOT] && got[header.len()..] == this_boot;
    let start = (header.len() + BOOT) as u64;
    let len = journal.metadata().ok()?.len();
    // Each chunk once, and at most one checkpoint after each.
    let entries = (len.saturating_sub(start) / ENTRY as u64).min(2 * src.chunks() + 2).min(MAX_ENTRIES);
    let on_disk = part.metadata().ok()?.len();
    let (mut durable, mut since) = (BTreeSet::new(), BTreeSet::new());
    let mut r = io::BufReader::with_capacity(1 << 16, &journal);
    io::Seek::seek(&mut r, io::SeekFrom::Start(start)).ok()?;
    let mut e = [0u8; ENTRY];
    for _ in 0..entries {
        if io::Read::read_exact(&mut r, &mut e).is_err() {
            break;
        }
        let (i, check) = (u64::from_be_bytes(e[..8].try_into().ok()?), u64::from_be_bytes(e[8..].try_into().ok()?));
        if check != !i {
            continue; // zeroed or torn: not an entry
        }
        if i == CHECKPOINT {
            durable.append(&mut since);
        } else if i < src.chunks() && i * src.chunk + src.chunk_len(i) as u64 <= on_disk {
            since.insert(i);
        }
    }
    if same_boot {
        durable.append(&mut since);
    }
    Some((part, journal, durable.into_iter().collect()))
}

fn ranges(idx: impl Iterator<Item = u64>) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for i in idx {
        match out.last_mut() {
            Some((first, count)) if *first + *count == i => *count += 1,
            _ => out.push((i, 1)),
        }
    }
    out.truncate(linerate_proto::caps::MAX_WANT_RANGES);
    out
}

/// What a dry run would reuse: the trusted ranges in working directory `parent`, without
/// changing anything.
pub fn probe(parent: &OwnedFd, src: &Source<'_>) -> Vec<(u64, u64)> {
    trusted(parent, src).map(|(_, _, ok)| ranges(ok.into_iter())).unwrap_or_default()
}

/// Open the partial file for `src` in working directory `parent`, reusing every trusted chunk, or
/// start afresh.
pub fn open(parent: &OwnedFd, src: &Source<'_>) -> io::Result<Partial> {
    let (pname, jname) = names(src.path);
    let mut body = src.header();
    body.extend_from_slice(&boot_id());
    if let Some((file, journal, ok)) = trusted(parent, src) {
        let have = ranges(ok.iter().copied());
        // Keep exactly the chunks offered as held, made durable before the checkpoint says so.
        let end = have.last().map_or(0, |&(first, count)| first + count);
        file.sync_data()?;
        for &i in ok.iter().take_while(|&&i| i < end) {
            body.extend_from_slice(&entry(i));
        }
        body.extend_from_slice(&entry(CHECKPOINT));
        journal.set_len(0)?;
        journal.write_all_at(&body, 0)?;
        journal.sync_data()?;
        let end = body.len() as u64;
        let holds = !have.is_empty();
        let journal = Journal { file: journal, name: jname, end, unsynced: 0, last: Instant::now(), holds };
        return Ok(Partial { file, name: pname, journal, have });
    }
    let file = create(parent, &pname)?;
    let jfile = create(parent, &jname)?;
    jfile.write_all_at(&body, 0)?;
    jfile.sync_data()?;
    let end = body.len() as u64;
    let journal = Journal { file: jfile, name: jname, end, unsynced: 0, last: Instant::now(), holds: false };
    Ok(Partial { file, name: pname, journal, have: Vec::new() })
}

impl Journal {
    /// Chunk `index` (`len` bytes) was written to `part`: append its entry at once (so a killed
    /// process loses nothing), and now and then make the partial file durable and checkpoint
    /// (for a crash of the machine).
    pub fn record(&mut self, part: &File, index: u64, len: usize) -> io::Result<()> {
        self.append(index)?;
        self.holds = true;
        self.unsynced += len as u64;
        if self.unsynced >= FLUSH_BYTES || self.last.elapsed() >= FLUSH_EVERY {
            self.flush(part)?;
        }
        Ok(())
    }

    fn append(&mut self, index: u64) -> io::Result<()> {
        self.file.write_all_at(&entry(index), self.end)?;
        self.end += ENTRY as u64;
        Ok(())
    }

    /// Make the partial file's data durable, then say so with a checkpoint, made durable too.
    pub fn flush(&mut self, part: &File) -> io::Result<()> {
        self.last = Instant::now();
        if self.unsynced == 0 {
            return Ok(());
        }
        part.sync_data()?;
        self.append(CHECKPOINT)?;
        self.file.sync_data()?;
        self.unsynced = 0;
        Ok(())
    }

    /// Whether the partial file holds any chunk worth keeping for the next run.
    pub fn holds_chunks(&self) -> bool {
        self.holds
    }

    /// The file is complete and renamed: the journal goes (from working directory `parent`).
    pub fn remove(&self, parent: &OwnedFd) {
        let _ = rfs::unlinkat(parent, self.name.as_slice(), AtFlags::empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> (tempfile::TempDir, OwnedFd) {
        let d = tempfile::tempdir().unwrap();
        let fd = crate::confined::open_root(d.path()).unwrap();
        (d, fd)
    }

    const CS: u64 = 64 * 1024;

    fn src(size: u64) -> Source<'static> {
        Source { path: b"dir/big.bin", size, mtime: Time { sec: 5, nsec: 6 }, chunk: CS }
    }

    fn path(d: &tempfile::TempDir, name: &[u8]) -> std::path::PathBuf {
        d.path().join(std::str::from_utf8(name).unwrap())
    }

    /// Writes chunk `i` of `s` with bytes `i + 1` and records it.
    fn write(p: &mut Partial, s: &Source<'_>, i: u64) {
        p.file.write_all_at(&vec![i as u8 + 1; s.chunk_len(i)], i * CS).unwrap();
        p.journal.record(&p.file, i, s.chunk_len(i)).unwrap();
    }

    /// As if the machine had restarted since the journal was written.
    fn another_boot(d: &tempfile::TempDir, s: &Source<'_>) {
        let (_, jname) = names(s.path);
        let j = std::fs::OpenOptions::new().write(true).open(path(d, &jname)).unwrap();
        j.write_all_at(&[0xa5; BOOT], s.header().len() as u64).unwrap();
    }

    #[test]
    fn chunks_written_in_this_boot_are_kept_without_a_flush_and_nothing_is_hashed() {
        let (_d, fd) = dir();
        let s = src(4 * CS + 10);
        let mut p = open(&fd, &s).unwrap();
        assert!(p.have.is_empty());
        for i in [0u64, 1, 3] {
            write(&mut p, &s, i);
        }
        drop(p); // killed: no flush
        assert_eq!(probe(&fd, &s), vec![(0, 2), (3, 1)]);
        let p = open(&fd, &s).unwrap();
        assert_eq!(p.have, vec![(0, 2), (3, 1)]);
        drop(p);
        assert_eq!(open(&fd, &s).unwrap().have, vec![(0, 2), (3, 1)], "the rewritten journal agrees");
    }

    #[test]
    fn after_a_restart_only_chunks_before_the_last_checkpoint_are_kept() {
        let (d, fd) = dir();
        let s = src(4 * CS);
        let mut p = open(&fd, &s).unwrap();
        write(&mut p, &s, 0);
        write(&mut p, &s, 1);
        p.journal.flush(&p.file).unwrap();
        write(&mut p, &s, 3);
        drop(p);
        another_boot(&d, &s);
        assert_eq!(probe(&fd, &s), vec![(0, 2)], "chunk 3 may not have reached the disk");
        // A resume rewrites the journal for this boot with a checkpoint: all it keeps is durable.
        assert_eq!(open(&fd, &s).unwrap().have, vec![(0, 2)]);
        another_boot(&d, &s);
        assert_eq!(probe(&fd, &s), vec![(0, 2)]);
    }

    #[test]
    fn zeroed_torn_and_out_of_range_entries_are_ignored_and_reading_is_bounded() {
        let (d, fd) = dir();
        let s = src(3 * CS);
        let mut p = open(&fd, &s).unwrap();
        write(&mut p, &s, 0);
        // Chunk 2 recorded but its bytes are not in the file (the file is shorter).
        p.journal.record(&p.file, 2, CS as usize).unwrap();
        // A zeroed block (a page lost in a crash), an index beyond the file.
        p.journal.file.write_all_at(&[0u8; ENTRY], p.journal.end).unwrap();
        p.journal.end += ENTRY as u64;
        p.journal.append(7).unwrap();
        drop(p);
        assert_eq!(probe(&fd, &s), vec![(0, 1)]);
        // A torn last entry.
        let (_, jname) = names(s.path);
        let j = std::fs::OpenOptions::new().append(true).open(path(&d, &jname)).unwrap();
        use std::io::Write;
        (&j).write_all(&[0, 0, 0]).unwrap();
        assert_eq!(probe(&fd, &s), vec![(0, 1)]);
        // At most 2 × chunks + 2 entries are read: chunk 1 written and recorded after 4,000 others
        // is beyond them.
        let mut p = open(&fd, &s).unwrap();
        for _ in 0..4000 {
            p.journal.append(0).unwrap();
        }
        write(&mut p, &s, 1);
        drop(p);
        assert_eq!(probe(&fd, &s), vec![(0, 1)]);
    }

    #[test]
    fn a_changed_source_or_an_old_format_journal_starts_afresh() {
        let (d, fd) = dir();
        let s = src(2 * CS);
        let mut p = open(&fd, &s).unwrap();
        write(&mut p, &s, 0);
        p.journal.flush(&p.file).unwrap();
        drop(p);
        assert_eq!(probe(&fd, &s), vec![(0, 1)]);
        let changed = Source { mtime: Time { sec: 9, nsec: 0 }, ..s };
        assert!(probe(&fd, &changed).is_empty());
        assert!(open(&fd, &changed).unwrap().have.is_empty());
        assert!(probe(&fd, &s).is_empty(), "the old journal was replaced");
        // A journal of format 1 (hashes of chunks) is not read.
        let mut p = open(&fd, &s).unwrap();
        write(&mut p, &s, 0);
        drop(p);
        let (_, jname) = names(s.path);
        std::fs::OpenOptions::new().write(true).open(path(&d, &jname)).unwrap().write_all_at(b"LNRJ\x01", 0).unwrap();
        assert!(probe(&fd, &s).is_empty());
    }

    #[test]
    fn a_journal_names_its_path_and_a_forged_one_is_read_within_bounds() {
        let (d, fd) = dir();
        let s = src(2 * CS);
        drop(open(&fd, &s).unwrap());
        let (_, jname) = names(s.path);
        assert_eq!(read_path(&fd, &jname).as_deref(), Some(&b"dir/big.bin"[..]));
        // A header claiming a path longer than any path, a short file, another format, a link.
        let mut forged = s.header();
        let at = forged.len() - s.path.len() - 2;
        forged[at..at + 2].copy_from_slice(&u16::MAX.to_be_bytes());
        std::fs::write(path(&d, &jname), &forged).unwrap();
        assert_eq!(read_path(&fd, &jname), None);
        std::fs::write(path(&d, &jname), &s.header()[..10]).unwrap();
        assert_eq!(read_path(&fd, &jname), None);
        std::fs::write(path(&d, &jname), b"LNRJ\x02 whatever").unwrap();
        assert_eq!(read_path(&fd, &jname), None);
        std::fs::remove_file(path(&d, &jname)).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", path(&d, &jname)).unwrap();
        assert_eq!(read_path(&fd, &jname), None, "a symlink is never followed");
    }
}
