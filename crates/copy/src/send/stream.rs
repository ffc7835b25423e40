//! One data stream of the sending side: take work from the shared queue, read, frame and send it,
//! batching small files into large records and spreading big files' chunks over every stream.

use super::stall::Watched;
use super::*;
use crate::digest::{self, Part};
use crate::fill;
use crate::queue::{Chunked, Waited, Work};
use crate::walk::{self, Item, SrcFile};
use linerate_net::conn::BATCH_TARGET;
use linerate_net::error::shown;
use linerate_net::EngineError;
use linerate_proto::caps::RECORD_OVERHEAD;
use linerate_proto::frame::{
    self, DirEntry, FileAbort, FileEnd, FileStart, Frame, HardLink, Hole, LinkEntry, SpecialEntry, LINK_NAME,
    LINK_TARGET,
};
use linerate_proto::record::HEADER_LEN;
use linerate_proto::ErrorCode;
use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};

/// A large file being sent in chunks by several streams.
pub(super) struct BigFile {
    pub(super) src: SrcFile,
    pub(super) file: File,
    pub(super) chunks: u64,
    pub(super) remaining: AtomicU64,
    pub(super) failed: Mutex<Option<String>>,
    pub(super) parts: Option<Mutex<Vec<Option<Part>>>>,
}

impl Chunked for Arc<BigFile> {
    fn chunks(&self) -> u64 {
        self.chunks
    }
}

pub(super) fn is_big(chunk: u64) -> impl Fn(&Item) -> bool {
    move |i| matches!(i, Item::File(f) if f.size > chunk)
}

pub(super) fn reset(buf: &mut Vec<u8>) {
    buf.clear();
    buf.resize(HEADER_LEN, 0);
}

/// Send one record, paced.
pub(super) fn flush(ctx: &Ctx, tx: &mut Watched, buf: &mut Vec<u8>) -> Result<(), EngineError> {
    ctx.pace.take(buf.len());
    tx.send_buf(buf)
}

/// One stream: pull work, fill records, send. Flushes whenever the queue has nothing ready.
pub(super) fn stream_loop(ctx: &Ctx, tx: &mut Watched) -> Result<(), EngineError> {
    let cap = ctx.chunk as usize + RECORD_OVERHEAD;
    let mut buf = Vec::with_capacity(cap + 64);
    reset(&mut buf);
    // Ids named on this stream: an entry's owner is named on its own stream, before it.
    let mut named = super::owners::Named::new();
    loop {
        let work = match ctx.queue.try_next(is_big(ctx.chunk)) {
            Some(w) => w,
            None => {
                if buf.len() > HEADER_LEN {
                    flush(ctx, tx, &mut buf)?;
                    reset(&mut buf);
                }
                match ctx.queue.next_within(is_big(ctx.chunk), ctx.keepalive) {
                    Waited::Work(w) => w,
                    Waited::Done => break,
                    Waited::Idle => {
                        tx.keepalive()?;
                        continue;
                    }
                }
            }
        };
        match work {
            Work::Item(Item::Dir { id, parent, name, mode, mtime, owner }) => {
                ctx.owners.name(owner, &mut named, |f| f.encode(&mut buf));
                let owner = ctx.owners.wire(owner);
                Frame::Dir(DirEntry { id, parent, name: &name, mode, mtime, owner }).encode(&mut buf);
                ctx.totals.tally.dirs.fetch_add(1, Relaxed);
            }
            Work::Item(Item::Link { parent, name, target, mtime, owner }) => {
                ctx.owners.name(owner, &mut named, |f| f.encode(&mut buf));
                let owner = ctx.owners.wire(owner);
                Frame::Link(LinkEntry { parent, name: &name, target: &target, mtime, owner }).encode(&mut buf);
                ctx.totals.tally.links.fetch_add(1, Relaxed);
            }
            Work::Item(Item::Special { parent, name, path: _, kind, rdev, mode, mtime, owner }) => {
                ctx.owners.name(owner, &mut named, |f| f.encode(&mut buf));
                let owner = ctx.owners.wire(owner);
                let (major, minor) = rdev;
                Frame::Special(SpecialEntry { parent, name: &name, kind, major, minor, mode, mtime, owner })
                    .encode(&mut buf);
            }
            Work::Item(Item::File(f)) if f.size > ctx.chunk => {
                if buf.len() > HEADER_LEN && buf.len() + ctx.chunk as usize + 1024 > cap {
                    flush(ctx, tx, &mut buf)?;
                    reset(&mut buf);
                }
                match open_big(ctx, f) {
                    Ok(big) => {
                        ctx.progress.on_file.call(&big.src.path, big.src.size, false);
                        if !ctx.sync {
                            ctx.owners.name(big.src.owner, &mut named, |f| f.encode(&mut buf));
                            encode_start(ctx, &big.src, &mut buf);
                        }
                        send_chunk(ctx, &big, 0, &mut buf);
                        ctx.queue.publish(Some(big));
                    }
                    Err(failed) => {
                        let (f, msg) = *failed;
                        ctx.queue.publish(None);
                        withdraw(ctx, &f, &msg, &mut buf);
                        ctx.fail(msg);
                    }
                }
            }
            Work::Item(Item::File(f)) => {
                if buf.len() + f.size as usize + 1024 > cap {
                    flush(ctx, tx, &mut buf)?;
                    reset(&mut buf);
                }
                if !ctx.sync {
                    ctx.owners.name(f.owner, &mut named, |f| f.encode(&mut buf));
                }
                send_small(ctx, &f, &mut buf);
            }
            Work::Chunk(big, n) => {
                if buf.len() > HEADER_LEN && buf.len() + ctx.chunk as usize + 1024 > cap {
                    flush(ctx, tx, &mut buf)?;
                    reset(&mut buf);
                }
                send_chunk(ctx, &big, n, &mut buf);
            }
            Work::Item(Item::HardLink { parent, name, file }) => {
                // Not counted in the totals: see the receiver (`recv/links.rs`).
                Frame::HardLink(HardLink { kind: LINK_NAME, file, parent, name: &name }).encode(&mut buf);
            }
            // Listings go to the control stream, never into the queue.
            Work::Item(Item::Listing { .. }) => {}
        }
        if buf.len() >= BATCH_TARGET {
            flush(ctx, tx, &mut buf)?;
            reset(&mut buf);
        }
    }
    Frame::End.encode(&mut buf);
    flush(ctx, tx, &mut buf)
}

pub(super) fn encode_start(ctx: &Ctx, f: &SrcFile, buf: &mut Vec<u8>) {
    if f.link_target {
        // On the same stream, before the declaration: the receiver keeps where it lands.
        Frame::HardLink(HardLink { kind: LINK_TARGET, file: f.id, parent: 0, name: b"" }).encode(buf);
    }
    Frame::FileStart(file_start(ctx, f)).encode(buf);
}

/// How file `f` is declared (`FileStart`, or an `Offer` in a sync session).
pub(super) fn file_start<'a>(ctx: &Ctx, f: &'a SrcFile) -> FileStart<'a> {
    FileStart {
        id: f.id,
        parent: f.parent,
        name: &f.name,
        size: f.size,
        mode: f.mode,
        mtime: f.mtime,
        owner: ctx.owners.wire(f.owner),
    }
}

pub(super) fn open_src(f: &SrcFile) -> std::io::Result<File> {
    f.open()
}

/// Whether the file still looks as it did when walked.
pub(super) fn unchanged(f: &SrcFile, file: &File) -> Result<(), String> {
    let m = file.metadata().map_err(|e| format!("{}: {e}", shown(&f.path)))?;
    if m.len() != f.size || walk::mtime_of(&m) != f.mtime || !m.is_file() {
        return Err(format!("{}: changed while being read; not copied", shown(&f.path)));
    }
    Ok(())
}

/// A small file travels whole in the current record: start, one chunk, end.
pub(super) fn send_small(ctx: &Ctx, f: &SrcFile, buf: &mut Vec<u8>) {
    let mark = buf.len();
    let result = (|| {
        let file = open_src(f).map_err(|e| format!("{}: {e}", shown(&f.path)))?;
        if !ctx.sync {
            encode_start(ctx, f, buf);
        }
        let mut digest = None;
        if f.size > 0 {
            let at = buf.len() + frame::CHUNK_HEADER_LEN;
            frame::encode_chunk_header(buf, f.id, 0, f.size as usize);
            fill::append_at(&file, buf, f.size as usize, 0).map_err(|e| format!("{}: {e}", shown(&f.path)))?;
            if ctx.verify {
                digest = Some(*blake3::hash(&buf[at..]).as_bytes());
            }
        } else if ctx.verify {
            digest = Some(*blake3::hash(b"").as_bytes());
        }
        unchanged(f, &file)?;
        Frame::FileEnd(FileEnd { file: f.id, size: f.size, digest }).encode(buf);
        Ok::<(), String>(())
    })();
    match result {
        Ok(()) => {
            ctx.totals.tally.files.fetch_add(1, Relaxed);
            ctx.totals.tally.bytes.fetch_add(f.size, Relaxed);
            ctx.progress.files.fetch_add(1, Relaxed);
            ctx.progress.bytes.fetch_add(f.size, Relaxed);
            ctx.progress.on_file.call(&f.path, f.size, true);
        }
        Err(msg) => {
            buf.truncate(mark);
            withdraw(ctx, f, &msg, buf);
            ctx.fail(msg);
        }
    }
}

/// A file that could not be read: an offer declared it (sync), so it is withdrawn; a link target
/// is declared and withdrawn, so that its further names fail at once instead of waiting for it.
fn withdraw(ctx: &Ctx, f: &SrcFile, msg: &str, buf: &mut Vec<u8>) {
    if !ctx.sync && !f.link_target {
        return;
    }
    if !ctx.sync {
        encode_start(ctx, f, buf);
    }
    let code = if msg.contains("changed while") { ErrorCode::SourceChanged } else { ErrorCode::SourceRead };
    Frame::FileAbort(FileAbort { file: f.id, code: code as u16, message: msg.as_bytes() }).encode(buf);
}

/// `-S`: whether `len` bytes at `off` are all hole (`SEEK_DATA` finds no data before their end).
/// A file system without `SEEK_DATA` reports no holes.
fn is_hole(file: &File, off: u64, len: u64) -> bool {
    match rustix::fs::seek(file, rustix::fs::SeekFrom::Data(off)) {
        Ok(data) => data >= off.saturating_add(len),
        Err(e) => e == rustix::io::Errno::NXIO,
    }
}

pub(super) fn open_big(ctx: &Ctx, f: SrcFile) -> Result<Arc<BigFile>, Box<(SrcFile, String)>> {
    let file = match open_src(&f) {
        Ok(file) => file,
        Err(e) => {
            let msg = format!("{}: {e}", shown(&f.path));
            return Err(Box::new((f, msg)));
        }
    };
    if let Err(msg) = unchanged(&f, &file) {
        return Err(Box::new((f, msg)));
    }
    let chunks = f.size.div_ceil(ctx.chunk);
    let parts = ctx.verify.then(|| Mutex::new(vec![None; chunks as usize]));
    Ok(Arc::new(BigFile { src: f, file, chunks, remaining: AtomicU64::new(chunks), failed: Mutex::new(None), parts }))
}

/// Read chunk `n` of a large file into the record; the stream that finishes the last chunk checks
/// the source is unchanged and ends (or aborts) the file.
pub(super) fn send_chunk(ctx: &Ctx, big: &BigFile, n: u64, buf: &mut Vec<u8>) {
    let off = n * ctx.chunk;
    let len = (big.src.size - off).min(ctx.chunk) as usize;
    let mark = buf.len();
    let held = big.src.have.as_ref().is_some_and(|h| h.iter().any(|&(first, count)| n >= first && n - first < count));
    // A hole goes as a `Hole` frame: nothing to send, nothing to write.
    let hole = ctx.sparse && !held && is_hole(&big.file, off, len as u64);
    let skip = held || hole;
    if skip && big.parts.is_none() {
        // The receiver has it, or it is a hole; nothing to read.
    } else {
        frame::encode_chunk_header(buf, big.src.id, off, len);
    }
    let at = buf.len();
    if skip && big.parts.is_none() {
        buf.truncate(mark);
        if hole {
            Frame::Hole(Hole { file: big.src.id, offset: off, len: len as u64 }).encode(buf);
            ctx.progress.bytes.fetch_add(len as u64, Relaxed);
        }
    } else {
        match fill::append_at(&big.file, buf, len, off) {
            Ok(()) => {
                if let Some(parts) = &big.parts {
                    let p = digest::hash_chunk(&buf[at..], off, big.src.size);
                    parts.lock().unwrap_or_else(PoisonError::into_inner)[n as usize] = Some(p);
                }
                if skip {
                    // Read only for the whole-file digest; the receiver has these bytes, or they
                    // are a hole.
                    buf.truncate(mark);
                    if hole {
                        Frame::Hole(Hole { file: big.src.id, offset: off, len: len as u64 }).encode(buf);
                    }
                }
                if !held {
                    ctx.progress.bytes.fetch_add(len as u64, Relaxed);
                }
            }
            Err(e) => {
                buf.truncate(mark);
                big.failed
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get_or_insert(format!("{}: {e}", shown(&big.src.path)));
            }
        }
    }
    if big.remaining.fetch_sub(1, Relaxed) != 1 {
        return;
    }
    let mut failure = big.failed.lock().unwrap_or_else(PoisonError::into_inner).take();
    if failure.is_none() {
        failure = unchanged(&big.src, &big.file).err();
    }
    let digest = match (&big.parts, &failure) {
        (Some(parts), None) => {
            let parts: Option<Vec<Part>> =
                parts.lock().unwrap_or_else(PoisonError::into_inner).iter().copied().collect();
            parts.and_then(|p| digest::merge(&p, ctx.chunk, big.src.size))
        }
        _ => None,
    };
    match failure {
        None => {
            Frame::FileEnd(FileEnd { file: big.src.id, size: big.src.size, digest }).encode(buf);
            ctx.totals.tally.files.fetch_add(1, Relaxed);
            ctx.totals.tally.bytes.fetch_add(big.src.size, Relaxed);
            ctx.progress.files.fetch_add(1, Relaxed);
            ctx.progress.on_file.call(&big.src.path, big.src.size, true);
        }
        Some(msg) => {
            let code = if msg.contains("changed while") { ErrorCode::SourceChanged } else { ErrorCode::SourceRead };
            Frame::FileAbort(FileAbort { file: big.src.id, code: code as u16, message: msg.as_bytes() }).encode(buf);
            ctx.fail(msg);
        }
    }
}
