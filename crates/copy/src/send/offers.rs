//! Sync on the sending side: the walker hands files to offer and `--delete` listings to the
//! session's driver through a bounded channel (back-pressure, no lock); the session machine
//! (`linerate_proto::copy::sender::Sender`) decides when they go out and how many may be open;
//! an answer queues the file, or what is missing of it.

use super::*;
use crate::walk::{self, Item, SrcFile};
use crossbeam_channel::Sender as Chan;
use linerate_net::error::shown;
use linerate_proto::caps::MAX_LINK_TARGETS;
use linerate_proto::frame::{WANT_MISSING, WANT_NONE, WANT_REFUSED};
use std::thread::JoinHandle;

/// What the walker hands the driver.
pub(super) enum Walked {
    /// A file to offer, with its BLAKE3 (`checksum`).
    Offer(SrcFile, Option<[u8; 32]>),
    /// A directory's names, for `--delete`.
    Keep(u64, Vec<Vec<u8>>),
    /// `-H`: a further name `(parent, name, file id of the first name)`, in order with the offers.
    HardLink(u64, Vec<u8>, u64),
    /// The walk is over.
    Done,
}

/// Walked items the driver has not taken yet: the walker waits beyond this many.
pub(super) const WALK_AHEAD: usize = 256;

/// Start the walker: it queues entries, or hands files to offer and listings to the driver (in
/// a sync session), and says when it is done. It stops early once the copy is aborted or the
/// driver is gone.
pub(super) fn spawn_walker(roots: Vec<Root>, ctx: &Arc<Ctx>, walked: Chan<Walked>, o: &SendOpts) -> JoinHandle<()> {
    let ctx = ctx.clone();
    let (listing, checksum) = (o.has(linerate_proto::frame::FLAG_DELETE), o.has(linerate_proto::frame::FLAG_CHECKSUM));
    let filter = o.filter.clone();
    let hard_links = o.has(linerate_proto::frame::FLAG_HARD_LINKS);
    std::thread::spawn(move || {
        let err = |m: String| ctx.fail(m);
        let mut links = Links::default();
        walk::walk_filtered(
            &roots,
            listing && ctx.sync,
            filter.as_ref(),
            |item| {
                let item = if hard_links { links.item(item, &ctx) } else { item };
                if let Item::File(f) = &item {
                    ctx.progress.found_files.fetch_add(1, Relaxed);
                    ctx.progress.found_bytes.fetch_add(f.size, Relaxed);
                }
                if ctx.queue.is_aborted() {
                    return false;
                }
                match item {
                    Item::File(f) if ctx.sync => {
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
                        walked.send(Walked::Offer(f, digest)).is_ok()
                    }
                    Item::Listing { dir, names } => walked.send(Walked::Keep(dir, names)).is_ok(),
                    Item::Special { kind, .. }
                        if !(if kind.is_device() { ctx.kinds.devices } else { ctx.kinds.specials }) =>
                    {
                        ctx.totals.skipped_specials.fetch_add(1, Relaxed);
                        true
                    }
                    Item::HardLink { parent, name, file } if ctx.sync => {
                        walked.send(Walked::HardLink(parent, name, file)).is_ok()
                    }
                    item => ctx.queue.push(item),
                }
            },
            &err,
        );
        let _ = walked.send(Walked::Done);
    })
}

/// `-H` on the sending side: the first name of each inode with several names, by `(st_dev,
/// st_ino)`, at most [`MAX_LINK_TARGETS`] of them (the receiver keeps no more); past that, further
/// names go as separate files, said once.
#[derive(Default)]
struct Links {
    first: HashMap<(u64, u64), u64>,
    full: bool,
}

impl Links {
    /// The item to send for walked `item`: a further name of a file already sent becomes a
    /// [`Item::HardLink`]; a first name is marked as a link target.
    fn item(&mut self, item: Item, ctx: &Ctx) -> Item {
        let Item::File(mut f) = item else { return item };
        let Some(inode) = f.inode else { return Item::File(f) };
        if let Some(&file) = self.first.get(&inode) {
            return Item::HardLink { parent: f.parent, name: f.name, file };
        }
        if self.first.len() < MAX_LINK_TARGETS {
            self.first.insert(inode, f.id);
            f.link_target = true;
        } else if !std::mem::replace(&mut self.full, true) {
            (ctx.on_error)(format!(
                "{}: more than {MAX_LINK_TARGETS} files with several names: further names are copied as separate files",
                shown(&f.path)
            ));
        }
        Item::File(f)
    }
}

pub(super) fn hash_file(f: &SrcFile) -> Result<[u8; 32], String> {
    let file = open_src(f).map_err(|e| format!("{}: {e}", shown(&f.path)))?;
    let mut h = blake3::Hasher::new();
    h.update_reader(&file).map_err(|e| format!("{}: {e}", shown(&f.path)))?;
    unchanged(f, &file)?;
    Ok(*h.finalize().as_bytes())
}

/// The receiver's answer to offer `f` (checked by the session machine): queue the file (or what
/// is missing of it), or count it as up to date. The driver handles answers before it lets the
/// queue finish (the machine's `Settled` comes after them), so an answered file is in the queue
/// in time.
pub(super) fn on_want(
    ctx: &Ctx,
    mut f: SrcFile,
    verdict: u8,
    held_ranges: Vec<(u64, u64)>,
    dry: bool,
    list: &Option<ListSink>,
) {
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
            t.tally.skipped_files.fetch_add(1, Relaxed);
            t.tally.skipped_bytes.fetch_add(f.size, Relaxed);
            skip(f.size);
        }
        WANT_REFUSED => {
            t.refused_files.fetch_add(1, Relaxed);
            skip(f.size);
        }
        _ if dry => {
            t.tally.would_files.fetch_add(1, Relaxed);
            t.tally.would_bytes.fetch_add(f.size - held, Relaxed);
            skip(f.size);
            ListSink::say(
                list,
                &match held {
                    0 => format!("would send {}", shown(&f.path)),
                    // The receiver holds all of it: only its metadata would change.
                    h if h == f.size => format!("would update {} (its data is already there)", shown(&f.path)),
                    h => format!("would send {} (resume: {h} of {} bytes held)", shown(&f.path), f.size),
                },
            );
        }
        verdict => {
            if verdict == WANT_MISSING && held > 0 {
                t.tally.resumed_bytes.fetch_add(held, Relaxed);
                ctx.progress.found_bytes.fetch_sub(held, Relaxed);
                f.have = Some(held_ranges.into());
            }
            ctx.queue.push_ready(Item::File(f));
        }
    }
}
