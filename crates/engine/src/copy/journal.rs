//! Resume journals: how a receiver keeps the finished chunks of a large file across an
//! interrupted transfer.
//!
//! A file of more than one chunk is written to a named partial file beside its final name,
//! `.linerate-resume-<h>.part`, with a journal `.linerate-resume-<h>.journal` (`h` from the final
//! name). The journal's header names the source it belongs to (size, modification time, chunk
//! size, name); each entry records a chunk index and the BLAKE3 of the bytes written there. An entry
//! is appended as soon as its chunk is written, and both files are made durable (`fdatasync`)
//! every second or 64 MiB; an entry whose bytes did not reach the disk simply fails its check. When the same source is offered again, every
//! entry is checked by hashing the partial file's bytes; only chunks that verify are kept, and the
//! journal is rewritten to hold exactly those. The partial file is renamed into place only when
//! complete, so nothing appears under its final name before it is whole.

use linerate_proto::frame::Time;
use rustix::fs::{self as rfs, AtFlags, Mode, OFlags};
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

const MAGIC: &[u8; 5] = b"LNRJ\x01";
const ENTRY: usize = 8 + 32;
/// Flush the journal at least this often while chunks arrive.
const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// ... or after this many bytes of chunks.
const FLUSH_BYTES: u64 = 64 << 20;

/// The partial file's and the journal's names for final name `name`.
pub fn names(name: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let h = blake3::hash(name);
    let hex: String = h.as_bytes()[..8].iter().map(|b| format!("{b:02x}")).collect();
    (format!(".linerate-resume-{hex}.part").into_bytes(), format!(".linerate-resume-{hex}.journal").into_bytes())
}

/// Whether `name` is one of the receiver's own working files (never deleted by `--delete`).
pub fn is_working_name(name: &[u8]) -> bool {
    name.starts_with(b".linerate-")
}

/// The source a journal belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Source<'a> {
    /// Final name.
    pub name: &'a [u8],
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
        h.extend_from_slice(&(self.name.len() as u16).to_be_bytes());
        h.extend_from_slice(self.name);
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
}

/// A partial file ready to receive chunks.
pub struct Partial {
    /// The partial file, open for writing.
    pub file: File,
    /// Its name in the parent directory.
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

/// Most journal entries read (1 Mi entries, 40 MiB of journal: 1 TiB of 1 MiB chunks). A longer
/// journal is read that far; the chunks it names beyond are simply sent again.
pub const MAX_ENTRIES: u64 = 1 << 20;

/// A journal entry: chunk index and the BLAKE3 of its bytes.
type Entry = (u64, [u8; 32]);

/// Chunks of the partial file that verify against the journal, as sorted `(index, BLAKE3)`.
/// `None` when there is no usable journal for `src`. Linear in the journal's size: the entries
/// are read in one pass (the last entry of an index wins), then each distinct chunk is read and
/// hashed once.
fn verified(parent: &OwnedFd, src: &Source<'_>) -> Option<(File, File, Vec<Entry>)> {
    let (pname, jname) = names(src.name);
    let journal = open_rw(parent, &jname).ok()?;
    let part = open_rw(parent, &pname).ok()?;
    let header = src.header();
    let mut got = vec![0u8; header.len()];
    journal.read_exact_at(&mut got, 0).ok()?;
    if got != header {
        return None;
    }
    let len = journal.metadata().ok()?.len();
    let entries = ((len - header.len() as u64) / ENTRY as u64).min(src.chunks()).min(MAX_ENTRIES);
    let mut claimed = std::collections::BTreeMap::new();
    let mut r = io::BufReader::with_capacity(1 << 16, &journal);
    io::Seek::seek(&mut r, io::SeekFrom::Start(header.len() as u64)).ok()?;
    let mut entry = [0u8; ENTRY];
    for _ in 0..entries {
        if io::Read::read_exact(&mut r, &mut entry).is_err() {
            break;
        }
        let i = u64::from_be_bytes(entry[..8].try_into().unwrap_or_default());
        if i < src.chunks() {
            claimed.insert(i, <[u8; 32]>::try_from(&entry[8..]).unwrap_or_default());
        }
    }
    let mut ok = Vec::with_capacity(claimed.len());
    let mut data = vec![0u8; src.chunk as usize];
    for (i, hash) in claimed {
        let n = src.chunk_len(i);
        if part.read_exact_at(&mut data[..n], i * src.chunk).is_ok() && *blake3::hash(&data[..n]).as_bytes() == hash {
            ok.push((i, hash));
        }
    }
    Some((part, journal, ok))
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

/// What a dry run would reuse: the verified ranges, without changing anything.
pub fn probe(parent: &OwnedFd, src: &Source<'_>) -> Vec<(u64, u64)> {
    verified(parent, src).map(|(_, _, ok)| ranges(ok.iter().map(|e| e.0))).unwrap_or_default()
}

/// Open the partial file for `src` in `parent`, reusing every chunk that verifies, or start
/// afresh.
pub fn open(parent: &OwnedFd, src: &Source<'_>) -> io::Result<Partial> {
    let (pname, jname) = names(src.name);
    let header = src.header();
    if let Some((file, journal, ok)) = verified(parent, src) {
        let have = ranges(ok.iter().map(|e| e.0));
        // Keep exactly the entries that verified (and fit in the ranges offered).
        let end = have.last().map_or(0, |&(first, count)| first + count);
        let mut body = header.clone();
        for (i, hash) in ok.iter().take_while(|e| e.0 < end) {
            body.extend_from_slice(&i.to_be_bytes());
            body.extend_from_slice(hash);
        }
        journal.set_len(0)?;
        journal.write_all_at(&body, 0)?;
        journal.sync_data()?;
        let end = body.len() as u64;
        let journal = Journal { file: journal, name: jname, end, unsynced: 0, last: Instant::now() };
        return Ok(Partial { file, name: pname, journal, have });
    }
    let file = create(parent, &pname)?;
    let jfile = create(parent, &jname)?;
    jfile.write_all_at(&header, 0)?;
    jfile.sync_data()?;
    let journal = Journal { file: jfile, name: jname, end: header.len() as u64, unsynced: 0, last: Instant::now() };
    Ok(Partial { file, name: pname, journal, have: Vec::new() })
}

impl Journal {
    /// Chunk `index` (these bytes) was written to `part`: append its entry at once (so a killed
    /// process loses nothing), and make both files durable now and then (for a crash of the
    /// machine). The order of the two writes does not matter for safety: an entry whose bytes
    /// did not reach the disk fails its hash check and the chunk is sent again.
    pub fn record(&mut self, part: &File, index: u64, data: &[u8]) -> io::Result<()> {
        let mut entry = [0u8; ENTRY];
        entry[..8].copy_from_slice(&index.to_be_bytes());
        entry[8..].copy_from_slice(blake3::hash(data).as_bytes());
        self.file.write_all_at(&entry, self.end)?;
        self.end += ENTRY as u64;
        self.unsynced += data.len() as u64;
        if self.unsynced >= FLUSH_BYTES || self.last.elapsed() >= FLUSH_EVERY {
            self.flush(part)?;
        }
        Ok(())
    }

    /// Make the partial file's data durable, then the entries that describe it.
    pub fn flush(&mut self, part: &File) -> io::Result<()> {
        self.last = Instant::now();
        if self.unsynced == 0 {
            return Ok(());
        }
        part.sync_data()?;
        self.file.sync_data()?;
        self.unsynced = 0;
        Ok(())
    }

    /// The file is complete and renamed: the journal goes.
    pub fn remove(&self, parent: &OwnedFd) {
        let _ = rfs::unlinkat(parent, self.name.as_slice(), AtFlags::empty());
    }
}

/// Remove the partial file and journal of `name` (the source changed or failed).
pub fn discard(parent: &OwnedFd, name: &[u8]) {
    let (p, j) = names(name);
    let _ = rfs::unlinkat(parent, p.as_slice(), AtFlags::empty());
    let _ = rfs::unlinkat(parent, j.as_slice(), AtFlags::empty());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> (tempfile::TempDir, OwnedFd) {
        let d = tempfile::tempdir().unwrap();
        let fd = crate::copy::fsx::open_root(d.path()).unwrap();
        (d, fd)
    }

    const CS: u64 = 64 * 1024;

    fn src(size: u64) -> Source<'static> {
        Source { name: b"big.bin", size, mtime: Time { sec: 5, nsec: 6 }, chunk: CS }
    }

    #[test]
    fn verified_chunks_survive_and_corrupt_ones_do_not() {
        let (d, fd) = dir();
        let s = src(4 * CS + 10);
        let mut p = open(&fd, &s).unwrap();
        assert!(p.have.is_empty());
        for i in [0u64, 1, 3] {
            let data = vec![i as u8 + 1; s.chunk_len(i)];
            p.file.write_all_at(&data, i * CS).unwrap();
            p.journal.record(&p.file, i, &data).unwrap();
        }
        p.journal.flush(&p.file).unwrap();
        drop(p);
        // Corrupt chunk 1 on disk: it must not be trusted.
        let (pname, _) = names(b"big.bin");
        let part =
            std::fs::OpenOptions::new().write(true).open(d.path().join(std::str::from_utf8(&pname).unwrap())).unwrap();
        part.write_all_at(b"X", CS + 7).unwrap();
        let p = open(&fd, &s).unwrap();
        assert_eq!(p.have, vec![(0, 1), (3, 1)]);
        // The rewritten journal holds exactly those: a second open agrees.
        drop(p);
        assert_eq!(open(&fd, &s).unwrap().have, vec![(0, 1), (3, 1)]);
    }

    #[test]
    fn a_journal_is_read_once_with_the_last_entry_of_a_chunk_winning_and_no_more_entries_than_chunks() {
        let (d, fd) = dir();
        let s = src(3 * CS);
        let mut p = open(&fd, &s).unwrap();
        let data = vec![3u8; CS as usize];
        p.file.write_all_at(&data, 0).unwrap();
        // A forged journal: chunk 0 claimed 4,000 times with a wrong hash, then once rightly.
        for _ in 0..4000 {
            p.journal.record(&p.file, 0, b"not these bytes").unwrap();
        }
        p.journal.record(&p.file, 0, &data).unwrap();
        p.journal.flush(&p.file).unwrap();
        drop(p);
        let (_, jname) = names(b"big.bin");
        let jpath = d.path().join(std::str::from_utf8(&jname).unwrap());
        // Only as many entries as the file has chunks are read: the right one is beyond them.
        assert!(probe(&fd, &s).is_empty());
        // Within them, the last entry of a chunk wins, and the rewritten journal holds it once.
        let len = std::fs::metadata(&jpath).unwrap().len();
        let header = s.header().len() as u64;
        let f = std::fs::OpenOptions::new().write(true).open(&jpath).unwrap();
        let mut right = [0u8; ENTRY];
        right[8..].copy_from_slice(blake3::hash(&data).as_bytes());
        let mut wrong = [0u8; ENTRY];
        wrong[8..].copy_from_slice(blake3::hash(b"x").as_bytes());
        f.set_len(header).unwrap();
        f.write_all_at(&[wrong, right, wrong].concat(), header).unwrap();
        assert!(len > header + 4000 * ENTRY as u64);
        // wrong, right, wrong: the last (wrong) wins.
        assert!(probe(&fd, &s).is_empty());
        f.write_all_at(&[wrong, wrong, right].concat(), header).unwrap();
        assert_eq!(open(&fd, &s).unwrap().have, vec![(0, 1)]);
        assert_eq!(std::fs::metadata(&jpath).unwrap().len(), header + ENTRY as u64);
    }

    #[test]
    fn a_changed_source_starts_afresh() {
        let (_d, fd) = dir();
        let s = src(2 * CS);
        let mut p = open(&fd, &s).unwrap();
        let data = vec![7u8; CS as usize];
        p.file.write_all_at(&data, 0).unwrap();
        p.journal.record(&p.file, 0, &data).unwrap();
        p.journal.flush(&p.file).unwrap();
        drop(p);
        assert_eq!(probe(&fd, &s), vec![(0, 1)]);
        let changed = Source { mtime: Time { sec: 9, nsec: 0 }, ..s };
        assert!(probe(&fd, &changed).is_empty());
        assert!(open(&fd, &changed).unwrap().have.is_empty());
        assert!(probe(&fd, &s).is_empty(), "the old journal was replaced");
    }

    #[test]
    fn an_entry_whose_bytes_never_landed_is_not_trusted_and_a_torn_entry_is_ignored() {
        let (d, fd) = dir();
        let s = src(2 * CS);
        let mut p = open(&fd, &s).unwrap();
        let data = vec![1u8; CS as usize];
        // The entry is recorded but the bytes are not in the file (a crash between the writes).
        p.journal.record(&p.file, 0, &data).unwrap();
        drop(p);
        assert!(probe(&fd, &s).is_empty());
        let (_, jname) = names(b"big.bin");
        let j =
            std::fs::OpenOptions::new().append(true).open(d.path().join(std::str::from_utf8(&jname).unwrap())).unwrap();
        use std::io::Write;
        (&j).write_all(&[0, 0, 0]).unwrap();
        assert!(probe(&fd, &s).is_empty());
    }
}
