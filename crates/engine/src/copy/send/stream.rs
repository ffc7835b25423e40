//! One data stream of the sending side: take work from the shared queue, read, frame and send it,
//! batching small files into large records and spreading big files' chunks over every stream.

use super::session::Watched;
use super::*;
use crate::copy::digest::{self, Part};
use crate::copy::fill;
use crate::copy::sched::{Chunked, Waited, Work};
use crate::copy::walk::{self, shown, Item, SrcFile};
use crate::net::conn::BATCH_TARGET;
use crate::EngineError;
use linerate_proto::caps::RECORD_OVERHEAD;
use linerate_proto::frame::{self, DirEntry, FileAbort, FileEnd, FileStart, Frame, LinkEntry, SpecialEntry};
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
                ctx.totals.dirs.fetch_add(1, Relaxed);
            }
            Work::Item(Item::Link { parent, name, target, mtime, owner }) => {
                ctx.owners.name(owner, &mut named, |f| f.encode(&mut buf));
                let owner = ctx.owners.wire(owner);
                Frame::Link(LinkEntry { parent, name: &name, target: &target, mtime, owner }).encode(&mut buf);
                ctx.totals.links.fetch_add(1, Relaxed);
            }
            Work::Item(Item::Special { parent, name, path: _, kind, rdev, mode, mtime, owner }) => {
                ctx.owners.name(owner, &mut named, |f| f.encode(&mut buf));
                let owner = ctx.owners.wire(owner);
                let (major, minor) = rdev;
                Frame::Special(SpecialEntry { parent, name: &name, kind, major, minor, mode, mtime, owner })
                    .encode(&mut buf);
            }
            Work::Item(Item::File(f)) if f.size > ctx.chunk => {
                let id = f.id;
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
                    Err(msg) => {
                        ctx.queue.publish(None);
                        if ctx.sync {
                            // The offer declared it: withdraw it.
                            let code = if msg.contains("changed while") {
                                ErrorCode::SourceChanged
                            } else {
                                ErrorCode::SourceRead
                            };
                            Frame::FileAbort(FileAbort { file: id, code: code as u16, message: msg.as_bytes() })
                                .encode(&mut buf);
                        }
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
    Frame::FileStart(FileStart {
        id: f.id,
        parent: f.parent,
        name: &f.name,
        size: f.size,
        mode: f.mode,
        mtime: f.mtime,
        owner: ctx.owners.wire(f.owner),
    })
    .encode(buf);
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
            ctx.totals.files.fetch_add(1, Relaxed);
            ctx.totals.bytes.fetch_add(f.size, Relaxed);
            ctx.progress.files.fetch_add(1, Relaxed);
            ctx.progress.bytes.fetch_add(f.size, Relaxed);
            ctx.progress.on_file.call(&f.path, f.size, true);
        }
        Err(msg) => {
            buf.truncate(mark);
            if ctx.sync {
                // The offer declared it: withdraw it.
                let code = if msg.contains("changed while") { ErrorCode::SourceChanged } else { ErrorCode::SourceRead };
                Frame::FileAbort(FileAbort { file: f.id, code: code as u16, message: msg.as_bytes() }).encode(buf);
            }
            ctx.fail(msg);
        }
    }
}

pub(super) fn open_big(ctx: &Ctx, f: SrcFile) -> Result<Arc<BigFile>, String> {
    let file = open_src(&f).map_err(|e| format!("{}: {e}", shown(&f.path)))?;
    unchanged(&f, &file)?;
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
    if held && big.parts.is_none() {
        // The receiver has it; nothing to read.
    } else {
        frame::encode_chunk_header(buf, big.src.id, off, len);
    }
    let at = buf.len();
    if held && big.parts.is_none() {
        buf.truncate(mark);
    } else {
        match fill::append_at(&big.file, buf, len, off) {
            Ok(()) => {
                if let Some(parts) = &big.parts {
                    let p = digest::hash_chunk(&buf[at..], off, big.src.size);
                    parts.lock().unwrap_or_else(PoisonError::into_inner)[n as usize] = Some(p);
                }
                if held {
                    // Read only for the whole-file digest; the receiver has these bytes.
                    buf.truncate(mark);
                } else {
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
            ctx.totals.files.fetch_add(1, Relaxed);
            ctx.totals.bytes.fetch_add(big.src.size, Relaxed);
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
