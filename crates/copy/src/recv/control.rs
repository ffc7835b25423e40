//! The control stream of a receiving session: offers and their answers (sync, resume),
//! `--delete` listings, `Finish`, and the end of the session with its summary.

use super::*;
use crate::confined::{self};
use crate::journal::{self};
use crate::workdir;
use linerate_net::resources::{self};
use linerate_proto::copy::ReceiverEvent;
use linerate_proto::frame::{
    FileStart, Finish, Keep, Offer, Summary, FLAG_CHECKSUM, FLAG_DRY_RUN, FLAG_FSYNC, NOTE_DELETED, NOTE_WOULD_DELETE,
    WANT_ALL, WANT_MISSING, WANT_NONE, WANT_REFUSED,
};

/// What the destination holds of an offered file ([`RecvSession::held`]).
pub(super) enum Held {
    /// Nothing worth keeping: the file is received.
    Nothing,
    /// The file, data and metadata: nothing to do.
    Same,
    /// Its data, opened read-only (never through a symlink); its mode, owner, group or time
    /// differ. `shared`: it has other names.
    Data { file: OwnedFd, shared: bool },
}
use linerate_proto::track::Step;
use linerate_proto::{frame, ErrorCode};
use std::collections::HashSet;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Whether a destination's modification time (seconds, nanoseconds) and the source's count as
/// equal: to the nanosecond with no window, else (rsync's `--modify-window`) when their seconds
/// differ by at most `window`, nanoseconds ignored.
fn same_mtime((sec, nsec): (i64, impl Into<i128>), src: frame::Time, window: u32) -> bool {
    if window == 0 {
        return sec == src.sec && nsec.into() == i128::from(src.nsec);
    }
    sec.abs_diff(src.sec) <= u64::from(window)
}

/// The chunk ranges to answer as held for a file whose data is up to date and whose metadata is
/// not (issue 42): all of them, so that none is sent and the metadata is applied in place, for a
/// file of more than one `chunk` without other names (`shared`: another name's mode is not this
/// copy's to change). `None`: receive it again (a small file costs one chunk; the sender reads
/// `have` only for files of several chunks).
fn held_whole(size: u64, chunk: u64, shared: bool) -> Option<Vec<(u64, u64)>> {
    (size > chunk && !shared).then(|| vec![(0, size.div_ceil(chunk))])
}

impl RecvSession {
    /// Give every directory declared so far its mode and modification time (deepest first, so a
    /// parent's time is not disturbed afterwards), fsyncing each with `sync`; what failed, by
    /// path. Run at the end of a session, and by an abort too, so that an interrupted copy does
    /// not leave its directories at the owner-only mode they are created with.
    pub(super) fn apply_dir_meta(&self, st: &mut State, sync: bool) -> Vec<(Vec<u8>, String)> {
        // Looked up one by one rather than collected: a copy of every directory's metadata would
        // add a third to the receiver's peak memory for a tree of many directories.
        let mut meta_errors = Vec::new();
        for id in st.tracker.dirs_deepest_first() {
            let Some((mode, mtime, owner)) = st.tracker.dir_info(id).map(|d| (d.mode, d.mtime, d.owner)) else {
                continue;
            };
            // The target (0) keeps its own owner; its mode is 0 here and is not applied either.
            let ids = if id == 0 { (None, None) } else { self.ids_for(st, owner) };
            // A directory that could not be created was reported then; skip it here.
            if let Ok(fd) = st.dirs.get(id, &st.tracker) {
                let r = confined::set_meta_owned(&*fd, mode, mtime, ids).and_then(|()| {
                    if sync {
                        confined::sync_dir(&fd)
                    } else {
                        Ok(())
                    }
                });
                if let Err(e) = r {
                    meta_errors.push((st.tracker.dir_path(id), e.to_string()));
                }
            }
        }
        meta_errors
    }

    /// Serve the control stream: wait for `Finish`, for every data stream's `End`, then settle
    /// directories and send the summary.
    pub fn run_control(self: &Arc<Self>, mut rx: RecvHalf) -> Outcome {
        let cpu0 = resources::thread();
        let fin = match self.wait_finish(&mut rx) {
            Ok(f) => f,
            Err(a) => {
                self.abort(a);
                return self.aborted_outcome();
            }
        };
        // Every stream must end; Finish only comes after the client saw all its streams through.
        let mut st = self.lock();
        while !st.ctl.rules().all_ended() && !self.aborted.load(Relaxed) {
            let now = Instant::now();
            if let Err(e) = st.ctl.handle_timeout(now) {
                drop(st);
                self.abort(e.into());
                return self.aborted_outcome();
            }
            let left = st.ctl.poll_timeout().map_or(WAIT_LIMIT, |d| d.saturating_duration_since(now));
            st = self.wait(st, left.max(Duration::from_millis(1)));
        }
        if self.aborted.load(Relaxed) {
            // Not under the state's lock: the abort in progress needs it to finish.
            drop(st);
            return self.aborted_outcome();
        }
        let ids = st.tracker.open_file_ids();
        let leftovers: Vec<Option<Slot>> = ids.iter().map(|id| st.open.remove(id)).collect();
        for id in ids {
            st.tracker.abandon(id);
        }
        let meta_errors = self.apply_dir_meta(&mut st, self.p.flags & FLAG_FSYNC != 0);
        drop(st);
        const INCOMPLETE: &str = "incomplete: not every chunk arrived";
        for slot in leftovers {
            match slot {
                Some(Slot::Ready(of)) => {
                    // A resumable file keeps its journaled chunks for the next run.
                    Self::drop_file(&of, true);
                    self.report(ErrorCode::Integrity, &of.path, INCOMPLETE);
                }
                Some(Slot::Deferred(new)) => self.report(ErrorCode::Integrity, &new.path, INCOMPLETE),
                _ => self.report(ErrorCode::Integrity, b"", "a declared file never completed"),
            }
        }
        self.fail_waiting_links();
        for (path, e) in meta_errors {
            self.report(ErrorCode::Io, &path, &format!("setting directory mode and time: {e}"));
        }
        // Partial files of this tree whose source is gone go; a dry run changes nothing.
        if self.p.flags & FLAG_DRY_RUN == 0 {
            self.settle_work_dir(true);
        }
        let files = self.n.tally.files.load(Relaxed);
        if files + self.n.tally.errors.load(Relaxed) + self.n.beneath_failed.load(Relaxed) < fin.files {
            self.report(ErrorCode::Integrity, b"", &format!("client sent {} files, {files} arrived", fin.files));
        }
        let used = resources::thread().since(cpu0);
        let summary = Summary {
            files,
            bytes: self.n.tally.bytes.load(Relaxed),
            dirs: self.n.tally.dirs.load(Relaxed),
            links: self.n.tally.links.load(Relaxed),
            errors: self.n.tally.errors.load(Relaxed),
            cpu_user_us: self.n.cpu_user.load(Relaxed) + used.user_us,
            cpu_sys_us: self.n.cpu_sys.load(Relaxed) + used.sys_us,
            peak_rss: resources::peak_rss(),
        };
        let sent = self.lock().ctl.summary(summary);
        if let Err(e) = sent {
            self.abort(e.into());
            return self.aborted_outcome();
        }
        let _ = self.flush_control();
        Outcome::Done(summary)
    }

    /// Read the control stream until `Finish`: offers (sync) and listings (`--delete`) come first.
    pub(super) fn wait_finish(&self, rx: &mut RecvHalf) -> Result<Finish, Abort> {
        rx.set_timeout(Some(self.p.idle_timeout));
        loop {
            let idle = self.p.idle_timeout;
            let plain = next_record(rx, "the control stream", "peer closed the control stream", idle)?;
            if plain.is_empty() {
                self.record(true)?;
                continue;
            }
            self.record(false)?;
            self.lock().ctl.rules_mut().working(true, Instant::now());
            let fin = self.control_record(plain);
            self.lock().ctl.rules_mut().working(false, Instant::now());
            let fin = fin?;
            // The record's answers go out together, in order (crates/proto `copy::receiver`).
            self.lock().ctl.end_record()?;
            self.flush_control().map_err(|e| Abort::new(ErrorCode::Protocol, format!("answering offers: {e}")))?;
            if let Some(f) = fin {
                *self.fin.lock().unwrap_or_else(PoisonError::into_inner) = f;
                return Ok(f);
            }
        }
    }

    /// One record of the control stream before `Finish`: offers and listings; the `Finish`, if
    /// it holds one (as its last frame).
    pub(super) fn control_record(&self, plain: &[u8]) -> Result<Option<Finish>, Abort> {
        let mut fin = None;
        let now = Instant::now();
        for f in frame::frames(plain) {
            let event = self.lock().ctl.handle_control_frame(f?, now)?;
            match event {
                ReceiverEvent::Offer(mut o) => {
                    o.file.name = self.local_name(o.file.parent, o.file.name);
                    self.on_offer(&o)?
                }
                ReceiverEvent::Keep(k) => self.on_keep(&k)?,
                ReceiverEvent::IdName(n) => self.on_id_name(&n)?,
                ReceiverEvent::HardLink(l) => self.on_hard_link(&l, true)?,
                ReceiverEvent::Finish(x) => fin = Some(x),
                ReceiverEvent::Fatal(f) => {
                    // The sender gave up (a pull's server, or a client its user interrupted); say
                    // why, in its words.
                    let message = format!("{SENDER_ENDED}{}", linerate_proto::name::escape(f.message));
                    let code = ErrorCode::from_u16(f.code);
                    return Err(Abort { interrupted: code == ErrorCode::Interrupted, ..Abort::new(code, message) });
                }
            }
        }
        Ok(fin)
    }

    /// A file offered in a sync session: decide what of it to fetch, and get ready to receive it.
    pub(super) fn on_offer(&self, o: &Offer<'_>) -> Result<(), Abort> {
        let s = &o.file;
        let (parent, path, fresh, ids) = self.until_from(true, |st| {
            Ok(match st.tracker.file_start(s)? {
                Step::Accepted => {
                    st.open.insert(s.id, Slot::Creating);
                    let fresh = st.dirs.is_fresh(s.parent);
                    let ids = self.ids_for(st, s.owner);
                    let parent = Self::parent_for(st, s.parent, s.name);
                    Some((parent, Self::entry_path(st, s.parent, s.name), fresh, ids))
                }
                _ => None,
            })
        })?;
        let dry = self.has(FLAG_DRY_RUN);
        let chunk = u64::from(self.p.chunk_size.max(1));
        let decided = (|| -> Result<Decision, (&str, Option<Arc<OwnedFd>>, std::io::Error)> {
            let parent = match parent {
                Ok(p) => p,
                Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => return Err(("cannot create file", None, e)),
                Err(_) if dry => return Ok((WANT_ALL, Vec::new(), None)),
                Err(e) => return Err(("cannot create file", None, e)),
            };
            // In a directory this session created there is nothing to compare with: a file of
            // one chunk is wanted whole, and created by the data stream that brings it.
            if fresh && !dry && s.size <= chunk {
                let new = NewFile {
                    parent,
                    dir: s.parent,
                    path: path.clone(),
                    name: s.name.into(),
                    mode: s.mode,
                    mtime: s.mtime,
                    ids,
                };
                return Ok((WANT_ALL, Vec::new(), Some(Slot::Deferred(Box::new(new)))));
            }
            if !fresh {
                match self.held(&parent, s, o.digest, ids) {
                    Held::Same => return Ok((WANT_NONE, Vec::new(), None)),
                    // The data is there and only its metadata differs (rsync -a applies it on a
                    // rerun too): a file of more than one chunk is answered as held whole, so the
                    // sender sends none of it and its end applies the metadata to the file in
                    // place. A smaller one (a resend costs one chunk at most), or one with other
                    // names, whose mode is not this copy's to change through this one, is received
                    // again and replaces it.
                    Held::Data { file, shared } => {
                        if let Some(all) = held_whole(s.size, chunk, shared) {
                            if dry {
                                return Ok((WANT_MISSING, all, None));
                            }
                            let of = OpenFile {
                                inc: confined::Incoming { file: file.into(), tmp: None },
                                write: Mutex::new(()),
                                journal: None,
                                partial_in: None,
                                in_place: true,
                                parent,
                                path: path.clone(),
                                name: s.name.into(),
                                tmp: Vec::new(),
                                mode: s.mode,
                                mtime: s.mtime,
                                ids,
                            };
                            return Ok((WANT_MISSING, all, Some(Slot::Ready(Arc::new(of)))));
                        }
                    }
                    Held::Nothing => {}
                }
            }
            let src = journal::Source { path: &path, size: s.size, mtime: s.mtime, chunk };
            // A large file resumes from (and is written to) a partial file in the working
            // directory, when that can be renamed into the file's directory (the same mount);
            // otherwise it is received unnamed, without resume.
            let work = if s.size > chunk { self.work_dir(!dry).filter(|w| w.reaches(&parent)) } else { None };
            if dry {
                let have = work.map(|w| journal::probe(&w.fd, &src)).unwrap_or_default();
                return Ok((if have.is_empty() { WANT_ALL } else { WANT_MISSING }, have, None));
            }
            let tmp = confined::temp_name(&self.p.tag, s.id);
            let (inc, jr, have) = match &work {
                Some(w) => {
                    let p = journal::open(&w.fd, &src)
                        .map_err(|e| ("cannot create partial file", Some(parent.clone()), e))?;
                    self.lock().offered.insert(journal::key(&path));
                    (confined::Incoming { file: p.file, tmp: Some(p.name) }, Some(Mutex::new(p.journal)), p.have)
                }
                None => {
                    let inc = confined::create_incoming(&parent, &tmp, s.mode)
                        .map_err(|e| ("cannot create file", Some(parent.clone()), e))?;
                    (inc, None, Vec::new())
                }
            };
            let of = OpenFile {
                inc,
                write: Mutex::new(()),
                journal: jr,
                partial_in: work,
                in_place: false,
                parent,
                path: path.clone(),
                name: s.name.into(),
                tmp,
                mode: s.mode,
                mtime: s.mtime,
                ids,
            };
            Ok((if have.is_empty() { WANT_ALL } else { WANT_MISSING }, have, Some(Slot::Ready(Arc::new(of)))))
        })();
        let (verdict, have, of) = match decided {
            Ok(d) => d,
            Err((what, dir, e)) => {
                let mut st = self.lock();
                st.open.remove(&s.id);
                st.tracker.abandon(s.id);
                drop(st);
                self.wake();
                self.entry_failed(dir.as_deref(), s.parent, &path, what, &e)?;
                self.n.refused.fetch_add(1, Relaxed);
                self.lock().ctl.answer(s.id, WANT_REFUSED, &[])?;
                self.settle_links(s.id);
                return Ok(());
            }
        };
        let held: u64 = have
            .iter()
            .flat_map(|&(first, count)| first..first.saturating_add(count))
            .map(|i| s.size.saturating_sub(i.saturating_mul(chunk)).min(chunk))
            .sum();
        let mut st = self.lock();
        match of {
            Some(slot) => {
                st.tracker.prefill(s.id, have.iter().copied());
                st.open.insert(s.id, slot);
                self.n.tally.resumed_bytes.fetch_add(held, Relaxed);
                if let Some(p) = &self.progress {
                    p.found_files.fetch_add(1, Relaxed);
                    p.found_bytes.fetch_add(s.size - held, Relaxed);
                }
            }
            None => {
                st.open.remove(&s.id);
                st.tracker.skip(s.id);
                if dry && verdict != WANT_NONE {
                    self.n.tally.would_files.fetch_add(1, Relaxed);
                    self.n.tally.would_bytes.fetch_add(s.size - held.min(s.size), Relaxed);
                } else {
                    self.n.tally.skipped_files.fetch_add(1, Relaxed);
                    self.n.tally.skipped_bytes.fetch_add(s.size, Relaxed);
                }
                if dry && verdict != WANT_NONE {
                    if let Some(l) = &self.list {
                        let shown = linerate_proto::name::escape(&path);
                        (l.0)(&match held {
                            0 => format!("would receive {shown}"),
                            // Its data is all there: only its metadata would change.
                            h if h == s.size => format!("would update {shown} (its data is already there)"),
                            h => format!("would receive {shown} (resume: {h} of {} bytes held)", s.size),
                        });
                    }
                }
            }
        }
        st.ctl.answer(s.id, verdict, &have)?;
        drop(st);
        self.wake();
        self.settle_links(s.id);
        Ok(())
    }

    /// What the destination holds of offered file `s`: a regular file of the same size and
    /// modification time, or with `--checksum` of the same size and BLAKE3, holds its data; it is
    /// the same when its mode, its owner and group where kept (`ids`), and with `--checksum` its
    /// time are too ([`confined::meta_differs`]).
    pub(super) fn held(
        &self,
        parent: &OwnedFd,
        s: &FileStart<'_>,
        digest: Option<[u8; 32]>,
        ids: confined::Ids,
    ) -> Held {
        use rustix::fs::{self as rfs, AtFlags};
        let Ok(st) = rfs::statat(parent, s.name, AtFlags::SYMLINK_NOFOLLOW) else { return Held::Nothing };
        if st.st_size as u64 != s.size {
            return Held::Nothing;
        }
        let same_time = same_mtime((st.st_mtime, st.st_mtime_nsec), s.mtime, self.p.modify_window);
        let open = || match confined::open_regular(parent, s.name, &st) {
            Ok(Some((fd, now))) => Some((fd, now)),
            _ => None,
        };
        let opened = if self.has(FLAG_CHECKSUM) {
            let Some(want) = digest else { return Held::Nothing };
            let Some((fd, now)) = open() else { return Held::Nothing };
            let mut h = blake3::Hasher::new();
            let mut reader = std::fs::File::from(fd);
            if h.update_reader(&mut reader).is_err() || *h.finalize().as_bytes() != want {
                return Held::Nothing;
            }
            if same_time && !confined::meta_differs(&now, s.mode, ids) {
                return Held::Same;
            }
            (reader.into(), now)
        } else {
            if !same_time {
                return Held::Nothing;
            }
            if rfs::FileType::from_raw_mode(st.st_mode) == rfs::FileType::RegularFile
                && !confined::meta_differs(&st, s.mode, ids)
            {
                return Held::Same;
            }
            let Some(opened) = open() else { return Held::Nothing };
            opened
        };
        let (fd, now) = opened;
        Held::Data { file: fd, shared: now.st_nlink > 1 }
    }

    /// `--delete`: the names source directory `k.dir` holds; after the last part, remove
    /// everything else in it.
    pub(super) fn on_keep(&self, k: &Keep<'_>) -> Result<(), Abort> {
        let done = self.until_from(true, |st| {
            if st.tracker.dir_info(k.dir).is_none() {
                return Ok(None);
            }
            let entry = st.keeps.entry(k.dir).or_insert_with(|| Some(HashSet::new()));
            if let Some(set) = entry {
                if set.len() + k.names.len() > linerate_proto::caps::MAX_DIR_NAMES {
                    *entry = None;
                } else {
                    set.extend(k.names.iter().map(Box::from));
                }
            }
            if !k.last {
                return Ok(Some(None));
            }
            let set = st.keeps.remove(&k.dir).flatten();
            Ok(Some(Some((set, st.dirs.get(k.dir, &st.tracker), st.tracker.dir_path(k.dir)))))
        })?;
        let Some((set, dir, path)) = done else { return Ok(()) };
        let Some(set) = set else {
            self.report(ErrorCode::Limit, &path, "too many names to delete safely; nothing deleted here");
            return Ok(());
        };
        // A directory that does not exist (dry run) or could not be made has nothing to delete.
        let Ok(dir) = dir else { return Ok(()) };
        let dry = self.has(FLAG_DRY_RUN);
        // What the sender's rules exclude stays (rsync's "protect"), unless --delete-excluded.
        use rustix::fs as rfs;
        let protected = |n: &[u8]| {
            self.p.keep.as_ref().is_some_and(|f| {
                let is_dir = rfs::statat(&*dir, n, rfs::AtFlags::SYMLINK_NOFOLLOW)
                    .is_ok_and(|st| rfs::FileType::from_raw_mode(st.st_mode) == rfs::FileType::Directory);
                f.excluded_in(&path, n, is_dir)
            })
        };
        let own_temp = confined::temp_prefix(&self.p.tag);
        let extra = match confined::list_dir(&dir) {
            // A working directory (of this destination or one beneath) is never deleted, as
            // rsync protects its partial directory; `linerate clean` empties it. Excluded names
            // are kept (without --delete-excluded), and so are this session's own temporary
            // names (a link or special another stream is about to rename into place).
            Ok(names) => names.into_iter().filter(|n| {
                !set.contains(n.as_slice())
                    && !workdir::is_work_dir(&dir, n)
                    && !n.starts_with(&own_temp)
                    && !protected(n)
            }),
            Err(e) => {
                self.report(ErrorCode::Io, &path, &format!("listing for --delete: {e}"));
                return Ok(());
            }
        };
        for name in extra {
            let mut shown = path.clone();
            if !shown.is_empty() {
                shown.push(b'/');
            }
            shown.extend_from_slice(&name);
            if !dry {
                match confined::remove_tree(&dir, &name) {
                    Ok(()) => {}
                    // Gone since the listing (as rsync, a vanished name is not an error).
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => {
                        self.report(ErrorCode::Io, &shown, &format!("cannot delete: {e}"));
                        continue;
                    }
                }
            }
            self.n.tally.deleted.fetch_add(1, Relaxed);
            let kind = if dry { NOTE_WOULD_DELETE } else { NOTE_DELETED };
            match &self.list {
                Some(l) => {
                    let what = if dry { "would delete" } else { "deleted" };
                    (l.0)(&format!("{what} {}", linerate_proto::name::escape(&shown)));
                }
                None => {
                    self.lock().ctl.note(kind, &shown);
                    let _ = self.flush_control();
                }
            }
        }
        Ok(())
    }

    /// Why the session was aborted, once the abort has told the client (it holds the reason's
    /// lock until then). Never called under the state's lock.
    pub(super) fn aborted_outcome(&self) -> Outcome {
        let a = self.abort_reason.lock().unwrap_or_else(PoisonError::into_inner).clone();
        Outcome::Aborted(a.unwrap_or(Abort::protocol("aborted")))
    }
}

#[cfg(test)]
mod tests {
    use super::{held_whole, same_mtime};
    use linerate_proto::frame::Time;

    #[test]
    fn only_a_file_of_several_chunks_without_other_names_is_updated_in_place() {
        let chunk = 64 << 10;
        assert_eq!(held_whole(chunk + 1, chunk, false), Some(vec![(0, 2)]), "every chunk, the last one short");
        assert_eq!(held_whole(3 * chunk, chunk, false), Some(vec![(0, 3)]));
        assert_eq!(held_whole(u64::MAX, 1 << 23, false), Some(vec![(0, 1 << 41)]), "no overflow");
        assert_eq!(held_whole(chunk, chunk, false), None, "one chunk: sent again");
        assert_eq!(held_whole(0, chunk, false), None, "no chunk to hold");
        assert_eq!(held_whole(3 * chunk, chunk, true), None, "another name shares its mode");
    }

    #[test]
    fn modify_window_compares_seconds_within_the_window_and_nanoseconds_without_one() {
        let src = Time { sec: 1000, nsec: 500 };
        assert!(same_mtime((1000, 500i64), src, 0));
        assert!(!same_mtime((1000, 501i64), src, 0), "no window: to the nanosecond");
        assert!(!same_mtime((1001, 500i64), src, 0));
        assert!(same_mtime((1000, 0i64), src, 1), "a window ignores nanoseconds");
        assert!(same_mtime((1002, 0i64), src, 2) && same_mtime((998, 999i64), src, 2));
        assert!(!same_mtime((1003, 0i64), src, 2) && !same_mtime((997, 0i64), src, 2));
        // Hostile times do not overflow.
        assert!(!same_mtime((i64::MAX, 0i64), Time { sec: i64::MIN, nsec: 0 }, u32::MAX));
    }
}
