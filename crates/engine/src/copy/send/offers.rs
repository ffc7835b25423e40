//! Sync on the sending side: offers of files to the receiver, their answers (checked by
//! `linerate_proto::copy::SenderControl`), and the control-stream outbox that batches offers and
//! `--delete` listings.

use super::*;
use crate::copy::walk::{shown, Item, SrcFile};
use crate::net::conn::SendHalf;
use linerate_proto::copy::SenderControl;
use linerate_proto::frame::{FileStart, Frame, Keep, Names, Offer, WANT_MISSING, WANT_NONE, WANT_REFUSED};
use linerate_proto::record::HEADER_LEN;
use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Most files offered and not yet answered: the receiver's tracker holds at most
/// `MAX_OPEN_FILES` declared files, and the wanted ones wait in the queue beside these.
pub(super) const OFFER_WINDOW: usize = 1024;

/// The control stream's state: offers awaiting their `Want` and the protocol's rules for what
/// the receiver may answer and when ([`SenderControl`]), under one lock.
pub(super) struct Offers {
    pub(super) state: Mutex<OfferState>,
    pub(super) changed: Condvar,
    /// Threads waiting on `changed` (the walker): an answer wakes it only if it waits.
    pub(super) waiters: AtomicUsize,
}

pub(super) struct OfferState {
    /// Offered files by id, to queue when their `Want` comes.
    pub(super) files: HashMap<u64, SrcFile>,
    /// What the receiver may send and every deadline of the wait for it.
    pub(super) ctl: SenderControl,
}

impl Offers {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, OfferState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wait on `changed` for at most `limit`, counted in `waiters` (counted under the lock, so a
    /// change made under it after this wait began sees the count).
    pub(super) fn wait<'a>(
        &self,
        st: std::sync::MutexGuard<'a, OfferState>,
        limit: Duration,
    ) -> std::sync::MutexGuard<'a, OfferState> {
        self.waiters.fetch_add(1, SeqCst);
        let st = self.changed.wait_timeout(st, limit).unwrap_or_else(PoisonError::into_inner).0;
        self.waiters.fetch_sub(1, SeqCst);
        st
    }
}

/// Frames for the control stream from the walker (offers, listings), batched into records.
pub(super) struct Outbox {
    pub(super) tx: Arc<Mutex<SendHalf>>,
    pub(super) buf: Vec<u8>,
    pub(super) since: Instant,
}

impl Outbox {
    pub(super) fn new(tx: Arc<Mutex<SendHalf>>) -> Outbox {
        let mut buf = Vec::with_capacity(OUTBOX_FLUSH + 4096);
        reset(&mut buf);
        Outbox { tx, buf, since: Instant::now() }
    }

    pub(super) fn maybe_flush(&mut self, ctx: &Ctx) {
        if self.buf.len() >= OUTBOX_FLUSH || self.since.elapsed() >= Duration::from_millis(20) {
            self.flush(ctx);
        }
    }

    /// Send what is batched. A failure aborts the copy (the control reader reports why).
    pub(super) fn flush(&mut self, ctx: &Ctx) {
        if self.buf.len() > HEADER_LEN {
            let r = self.tx.lock().unwrap_or_else(PoisonError::into_inner).send_buf(&mut self.buf);
            if r.is_err() {
                ctx.queue.abort();
            }
            reset(&mut self.buf);
        }
        self.since = Instant::now();
    }

    /// List directory `dir` for `--delete`, in frames of at most `MAX_KEEP_NAMES` names.
    pub(super) fn keep(&mut self, dir: u64, names: &[Vec<u8>]) {
        let mut scratch = Vec::new();
        let mut parts = names.chunks(linerate_proto::caps::MAX_KEEP_NAMES / 4).peekable();
        if parts.peek().is_none() {
            Frame::Keep(Keep { dir, last: true, names: Names::encode::<&[u8]>(&[], &mut scratch) })
                .encode(&mut self.buf);
        }
        while let Some(part) = parts.next() {
            let last = parts.peek().is_none();
            Frame::Keep(Keep { dir, last, names: Names::encode(part, &mut scratch) }).encode(&mut self.buf);
            if self.buf.len() >= OUTBOX_FLUSH {
                let mut b = std::mem::take(&mut self.buf);
                let _ = self.tx.lock().unwrap_or_else(PoisonError::into_inner).send_buf(&mut b);
                self.buf = b;
                reset(&mut self.buf);
            }
        }
    }
}

/// How often a walker waiting for answers to its offers checks for a stall.
pub(super) const WANT_POLL: Duration = Duration::from_millis(200);

/// Whether the receiver has answered no offer for the stall timeout (`last` is the pending count
/// and when it last changed); if so the copy is aborted.
pub(super) fn stalled(ctx: &Ctx, st: &mut OfferState) -> bool {
    if st.ctl.handle_timeout(Instant::now()).is_ok() {
        return false;
    }
    ctx.stalled.store(true, Relaxed);
    ctx.queue.abort();
    true
}

/// Batch size of the control outbox.
pub(super) const OUTBOX_FLUSH: usize = 256 * 1024;

/// Offer a file (sync sessions), waiting while too many offers are unanswered.
pub(super) fn offer(ctx: &Ctx, offers: &Offers, out: &mut Outbox, f: SrcFile, checksum: bool) -> bool {
    let digest = if checksum {
        match hash_file(&f) {
            Ok(d) => Some(d),
            Err(msg) => {
                ctx.fail(msg);
                return true;
            }
        }
    } else {
        None
    };
    {
        let mut st = offers.lock();
        if st.files.len() >= OFFER_WINDOW {
            drop(st);
            out.flush(ctx);
            st = offers.lock();
            while st.files.len() >= OFFER_WINDOW && !ctx.queue.is_aborted() {
                st = offers.wait(st, WANT_POLL);
                if stalled(ctx, &mut st) {
                    return false;
                }
            }
        }
        if ctx.queue.is_aborted() {
            return false;
        }
        let start = FileStart { id: f.id, parent: f.parent, name: &f.name, size: f.size, mode: f.mode, mtime: f.mtime };
        Frame::Offer(Offer { file: start, digest }).encode(&mut out.buf);
        st.ctl.offered(f.id, f.size, Instant::now());
        st.files.insert(f.id, f);
    }
    out.maybe_flush(ctx);
    true
}

pub(super) fn hash_file(f: &SrcFile) -> Result<[u8; 32], String> {
    let file = open_src(f).map_err(|e| format!("{}: {e}", shown(&f.path)))?;
    let mut h = blake3::Hasher::new();
    h.update_reader(&file).map_err(|e| format!("{}: {e}", shown(&f.path)))?;
    unchanged(f, &file)?;
    Ok(*h.finalize().as_bytes())
}

/// Wakes the walker, if it waits, when dropped (after the pending lock, declared before it, is
/// released).
pub(super) struct Notify<'a>(&'a Offers);

impl Drop for Notify<'_> {
    fn drop(&mut self) {
        if self.0.waiters.load(SeqCst) > 0 {
            self.0.changed.notify_all();
        }
    }
}

/// The receiver's answer to an offer (checked by [`SenderControl`]): queue the file (or what
/// is missing of it), or count it as up to date. Called with the offers' lock, held until the
/// file is queued: the walker finishes the queue once no offer is pending, so an answered offer
/// must be in the queue before it stops counting as pending.
#[allow(clippy::too_many_arguments)]
pub(super) fn on_want(
    ctx: &Ctx,
    offers: &Offers,
    mut st: std::sync::MutexGuard<'_, OfferState>,
    file: u64,
    verdict: u8,
    held_ranges: Vec<(u64, u64)>,
    dry: bool,
    list: &Option<ListSink>,
) {
    let _notify = Notify(offers);
    let Some(mut f) = st.files.remove(&file) else { return };
    let t = &ctx.totals;
    let held: u64 = held_ranges
        .iter()
        .map(|&(first, count)| {
            // The last chunk may be short; every other one is whole.
            let last = first + count - 1;
            count * ctx.chunk - (last * ctx.chunk + ctx.chunk).saturating_sub(f.size)
        })
        .sum();
    let skip = |bytes: u64| {
        ctx.progress.found_files.fetch_sub(1, Relaxed);
        ctx.progress.found_bytes.fetch_sub(bytes, Relaxed);
    };
    match verdict {
        WANT_NONE => {
            t.skipped_files.fetch_add(1, Relaxed);
            t.skipped_bytes.fetch_add(f.size, Relaxed);
            skip(f.size);
        }
        WANT_REFUSED => skip(f.size),
        _ if dry => {
            t.would_files.fetch_add(1, Relaxed);
            t.would_bytes.fetch_add(f.size - held, Relaxed);
            skip(f.size);
            let how = if held > 0 { format!(" (resume: {held} of {} bytes held)", f.size) } else { String::new() };
            ListSink::say(list, &format!("would send {}{how}", shown(&f.path)));
        }
        verdict => {
            if verdict == WANT_MISSING && held > 0 {
                t.resumed_bytes.fetch_add(held, Relaxed);
                ctx.progress.found_bytes.fetch_sub(held, Relaxed);
                f.have = Some(held_ranges.into());
            }
            ctx.queue.push_ready(Item::File(f));
        }
    }
    drop(st);
}
