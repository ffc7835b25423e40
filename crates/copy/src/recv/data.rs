//! The data streams of a receiving session: every frame checked by the tracker before the
//! filesystem is touched, files written through directory handles, committed only when complete.

use super::*;
use crate::confined::{self};
use crate::mounts::Exhausted;
use linerate_net::resources::{self};
use linerate_proto::frame::{
    Chunk, DirEntry, FileAbort, FileEnd, FileStart, Frame, LinkEntry, SpecialEntry, FLAG_DRY_RUN, FLAG_FSYNC,
    FLAG_SPARSE, FLAG_VERIFY,
};
use linerate_proto::track::{Completion, Step};
use linerate_proto::{frame, ErrorCode, ProtoError};
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, PoisonError};

impl RecvSession {
    /// Serve one data stream until its `End`, or abort the session on a protocol error.
    pub fn run_data(self: &Arc<Self>, mut rx: RecvHalf) {
        let cpu0 = resources::thread();
        rx.set_timeout(Some(self.p.idle_timeout));
        rx.set_record_cap(linerate_proto::caps::data_record_cap(self.p.chunk_size));
        let r = self.data_loop(&mut rx);
        let used = resources::thread().since(cpu0);
        self.n.cpu_user.fetch_add(used.user_us, Relaxed);
        self.n.cpu_sys.fetch_add(used.sys_us, Relaxed);
        match r {
            Ok(()) => {
                self.lock().ctl.rules_mut().stream_ended();
                self.wake();
            }
            Err(a) => self.abort(a),
        }
    }

    pub(super) fn data_loop(&self, rx: &mut RecvHalf) -> Result<(), Abort> {
        loop {
            let idle = self.p.idle_timeout;
            let plain = next_record(rx, "a data stream", "data stream closed before its end", idle)?;
            self.record(plain.is_empty())?;
            if plain.is_empty() {
                continue;
            }
            if let Some(pace) = self.pace.get() {
                pace.take(plain.len());
            }
            for f in frame::frames(plain) {
                match f? {
                    Frame::Dir(mut d) => {
                        d.name = self.local_name(d.parent, d.name);
                        self.on_dir(&d)?
                    }
                    Frame::Link(mut l) => {
                        l.name = self.local_name(l.parent, l.name);
                        self.on_link(&l)?
                    }
                    Frame::FileStart(mut s) => {
                        s.name = self.local_name(s.parent, s.name);
                        self.on_file_start(&s)?
                    }
                    Frame::Special(mut s) => {
                        s.name = self.local_name(s.parent, s.name);
                        self.on_special(&s)?
                    }
                    Frame::IdName(n) => self.on_id_name(&n)?,
                    Frame::Chunk(c) => self.on_chunk(&c)?,
                    Frame::FileEnd(e) => self.on_file_end(&e)?,
                    Frame::FileAbort(a) => self.on_file_abort(&a)?,
                    Frame::HardLink(l) => self.on_hard_link(&l, false)?,
                    Frame::Hole(h) => self.on_hole(&h)?,
                    Frame::End => return Ok(()),
                    other => {
                        return Err(
                            ProtoError::Violation(format!("frame {other:?} is not allowed on a data stream")).into()
                        )
                    }
                }
            }
        }
    }

    pub(super) fn on_dir(&self, d: &DirEntry) -> Result<(), Abort> {
        let failed = self.until(|st| {
            Ok(match st.tracker.dir(d)? {
                Step::Accepted => {
                    if let Err(why) = Self::admit(d.name) {
                        st.dirs.mark_failed(d.id);
                        let e = std::io::Error::new(std::io::ErrorKind::InvalidInput, why);
                        return Ok(Some(Some((Self::entry_path(st, d.parent, d.name), e, None))));
                    }
                    let dry = self.has(FLAG_DRY_RUN);
                    let r = st.dirs.get(d.parent, &st.tracker).and_then(|p| {
                        if dry {
                            confined::open_dir(&p, d.name).map(|fd| (fd, false))
                        } else {
                            confined::make_dir_replacing(&p, d.name)
                        }
                    });
                    if dry && r.is_err() {
                        // Would be created: everything beneath it is new.
                        st.dirs.mark_failed(d.id);
                        return Ok(Some(None));
                    }
                    Some(match r {
                        Ok((fd, created)) => {
                            st.dirs.insert(d.id, fd);
                            if created {
                                st.dirs.mark_fresh(d.id);
                            }
                            None
                        }
                        Err(e) => {
                            st.dirs.mark_failed(d.id);
                            Some((Self::entry_path(st, d.parent, d.name), e, st.dirs.get(d.parent, &st.tracker).ok()))
                        }
                    })
                }
                _ => None,
            })
        })?;
        self.wake();
        match failed {
            None => {
                self.n.tally.dirs.fetch_add(1, Relaxed);
            }
            // Reported once; what lies beneath it is skipped without a message of its own, as
            // rsync does ("Skipping any contents from this failed directory").
            Some((path, e, parent)) => self.entry_failed(parent.as_deref(), d.parent, &path, CREATE_DIR, &e)?,
        }
        Ok(())
    }

    pub(super) fn on_link(&self, l: &LinkEntry) -> Result<(), Abort> {
        let (parent, path, ids) = self.until(|st| {
            Ok(match st.tracker.link(l)? {
                Step::Accepted => {
                    let parent = Self::parent_for(st, l.parent, l.name);
                    Some((parent, Self::entry_path(st, l.parent, l.name), self.ids_for(st, l.owner)))
                }
                _ => None,
            })
        })?;
        if self.has(FLAG_DRY_RUN) {
            return Ok(());
        }
        let tmp = confined::temp_name(&self.p.tag, u64::MAX - self.n.temp_seq.fetch_add(1, Relaxed));
        let made = match parent {
            Ok(p) => confined::make_symlink(&p, &tmp, l.name, l.target, l.mtime, ids, self.in_the_way())
                .map_err(|e| (Some(p), e)),
            Err(e) => Err((None, e)),
        };
        match made {
            Ok(()) => {
                self.n.tally.links.fetch_add(1, Relaxed);
            }
            Err((dir, e)) => self.entry_failed(dir.as_deref(), l.parent, &path, "cannot create symlink", &e)?,
        }
        Ok(())
    }

    /// A device, FIFO or socket (`-D`): made under a temporary name with its owner, mode and time,
    /// then renamed into place. Not counted in the summary's files or links.
    pub(super) fn on_special(&self, s: &SpecialEntry) -> Result<(), Abort> {
        let (parent, path, ids) = self.until(|st| {
            Ok(match st.tracker.special(s)? {
                Step::Accepted => {
                    let parent = Self::parent_for(st, s.parent, s.name);
                    Some((parent, Self::entry_path(st, s.parent, s.name), self.ids_for(st, s.owner)))
                }
                _ => None,
            })
        })?;
        // Only root makes devices; rsync's receiver of another user skips them silently too.
        if self.has(FLAG_DRY_RUN) || (s.kind.is_device() && !self.privileges.root) {
            return Ok(());
        }
        let tmp = confined::temp_name(&self.p.tag, u64::MAX - self.n.temp_seq.fetch_add(1, Relaxed));
        let sp = confined::Special { kind: s.kind, rdev: (s.major, s.minor), mode: s.mode, mtime: s.mtime };
        let made = match parent {
            Ok(p) => confined::make_special(&p, &tmp, s.name, sp, ids, self.in_the_way()).map_err(|e| (Some(p), e)),
            Err(e) => Err((None, e)),
        };
        if let Err((dir, e)) = made {
            let what = if s.kind.is_device() { "cannot create device" } else { "cannot create special file" };
            self.entry_failed(dir.as_deref(), s.parent, &path, what, &e)?;
        }
        Ok(())
    }

    pub(super) fn on_file_start(&self, s: &FileStart) -> Result<(), Abort> {
        let (parent, path, ids) = self.until(|st| {
            Ok(match st.tracker.file_start(s)? {
                Step::Accepted => {
                    st.open.insert(s.id, Slot::Creating);
                    let parent = Self::parent_for(st, s.parent, s.name);
                    Some((parent, Self::entry_path(st, s.parent, s.name), self.ids_for(st, s.owner)))
                }
                _ => None,
            })
        })?;
        let parent = match parent {
            Ok(p) => p,
            Err(e) => return self.creation_failed(s.id, None, s.parent, &path, &e),
        };
        let new = NewFile { parent, dir: s.parent, path, name: s.name.into(), mode: s.mode, mtime: s.mtime, ids };
        if self.create(s.id, new)? {
            if let Some(p) = &self.progress {
                p.found_files.fetch_add(1, Relaxed);
                p.found_bytes.fetch_add(s.size, Relaxed);
            }
        }
        Ok(())
    }

    /// Create file `id` (its slot is [`Slot::Creating`]) and make it ready for its chunks;
    /// whether it was (not when the file was abandoned meanwhile, or could not be created,
    /// which is reported as that file's error).
    pub(super) fn create(&self, id: u64, new: NewFile) -> Result<bool, Abort> {
        let tmp = confined::temp_name(&self.p.tag, id);
        let created = confined::create_incoming(&new.parent, &tmp, new.mode);
        let mut st = self.lock();
        let still_wanted = matches!(st.open.get(&id), Some(Slot::Creating));
        match created {
            Ok(inc) if still_wanted => {
                let NewFile { parent, path, name, mode, mtime, ids, .. } = new;
                let of = OpenFile {
                    inc,
                    write: Mutex::new(()),
                    journal: None,
                    partial_in: None,
                    in_place: false,
                    parent,
                    path,
                    name,
                    tmp,
                    mode,
                    mtime,
                    ids,
                };
                st.open.insert(id, Slot::Ready(Arc::new(of)));
                drop(st);
                self.wake();
                Ok(true)
            }
            Ok(inc) => {
                drop(st);
                confined::discard_incoming(&new.parent, &inc);
                Ok(false)
            }
            Err(e) => {
                drop(st);
                self.creation_failed(id, Some(&new.parent), new.dir, &new.path, &e).map(|()| false)
            }
        }
    }

    /// File `id` could not be created (in directory `dir`, id `dir_id`): it is given up, its
    /// waiting links settled, and the failure reported as that entry's.
    fn creation_failed(
        &self,
        id: u64,
        dir: Option<&OwnedFd>,
        dir_id: u64,
        path: &[u8],
        e: &std::io::Error,
    ) -> Result<(), Abort> {
        let mut st = self.lock();
        st.open.remove(&id);
        st.tracker.abandon(id);
        drop(st);
        self.wake();
        let r = self.entry_failed(dir, dir_id, path, "cannot create file", e);
        self.settle_links(id);
        r
    }

    /// [`Self::until`] for a frame of file `id`: a file still being created is waited for, and
    /// one answered but not yet created ([`Slot::Deferred`]) is created by this stream first;
    /// then `f` judges the frame.
    fn until_created<T>(
        &self,
        id: u64,
        mut f: impl FnMut(&mut State) -> Result<Option<T>, ProtoError>,
    ) -> Result<T, Abort> {
        loop {
            let judged = self.until(|st| match Self::claim(st, id) {
                Ok(true) => Ok(f(st)?.map(Ok)),
                Ok(false) => Ok(None),
                Err(new) => Ok(Some(Err(new))),
            })?;
            match judged {
                Ok(v) => return Ok(v),
                Err(new) => {
                    self.create(id, *new)?;
                }
            }
        }
    }

    /// Under the state's lock, before a frame of file `id` is judged: `Err` with the file to
    /// create when it is [`Slot::Deferred`] (now [`Slot::Creating`]: this stream creates it),
    /// `Ok(false)` while another stream creates it (wait), `Ok(true)` to go on.
    fn claim(st: &mut State, id: u64) -> Result<bool, Box<NewFile>> {
        match st.open.get_mut(&id) {
            Some(Slot::Creating) => Ok(false),
            Some(slot @ Slot::Deferred(_)) => match std::mem::replace(slot, Slot::Creating) {
                Slot::Deferred(new) => Err(new),
                _ => unreachable!("matched as Deferred just above"),
            },
            _ => Ok(true),
        }
    }

    pub(super) fn on_chunk(&self, c: &Chunk) -> Result<(), Abort> {
        // One look under the lock: the tracker's verdict and, if accepted, the open file (a file
        // still being created is waited for before the tracker is asked).
        let (step, of) = self.until_created(c.file, |st| {
            Ok(match st.tracker.chunk(c.file, c.offset, c.data.len())? {
                Step::NotYet => None,
                Step::Accepted => match st.open.get(&c.file) {
                    Some(Slot::Ready(of)) => Some((Step::Accepted, Some(of.clone()))),
                    _ => Some((Step::Accepted, None)),
                },
                s => Some((s, None)),
            })
        })?;
        let Some(of) = of.filter(|_| step == Step::Accepted) else {
            return Ok(());
        };
        // The chunk and its journal entry in one turn: an abort (which takes the turn before it
        // judges what a partial file holds) never sees the bytes without their entry.
        let (written, journaled) = {
            let _turn = of.write.lock().unwrap_or_else(PoisonError::into_inner);
            let written = if self.has(FLAG_SPARSE) {
                confined::write_sparse(&of.inc.file, c.data, c.offset)
            } else {
                of.inc.file.write_all_at(c.data, c.offset)
            };
            let journaled = match (&written, &of.journal) {
                (Ok(()), Some(j)) => {
                    let index = c.offset / u64::from(self.p.chunk_size.max(1));
                    j.lock().unwrap_or_else(PoisonError::into_inner).record(&of.inc.file, index, c.data.len())
                }
                _ => Ok(()),
            };
            (written, journaled)
        };
        if let Err(e) = written {
            // A full file system ends the session (the file is kept for a resume, as on any abort).
            if let Some(x) = Exhausted::of(&e) {
                return Err(self.exhausted(Some(&of.parent), &of.path, x, &e));
            }
            self.fail_file(c.file, ErrorCode::Io, &format!("write failed: {e}"));
            return Ok(());
        }
        self.n.written.fetch_add(c.data.len() as u64, Relaxed);
        if let Err(e) = journaled {
            if let Some(x) = Exhausted::of(&e) {
                return Err(self.exhausted(Some(&of.parent), &of.path, x, &e));
            }
            self.fail_file(c.file, ErrorCode::Io, &format!("writing the resume journal: {e}"));
            return Ok(());
        }
        if let Some(p) = &self.progress {
            p.bytes.fetch_add(c.data.len() as u64, Relaxed);
        }
        let mut st = self.lock();
        if let Step::Complete(done) = st.tracker.chunk_written(c.file) {
            let slot = st.open.remove(&done.file);
            drop(st);
            if let Some(Slot::Ready(of)) = slot {
                self.commit(&of, done)?;
            }
        }
        Ok(())
    }

    pub(super) fn on_file_end(&self, e: &FileEnd) -> Result<(), Abort> {
        if self.p.flags & FLAG_VERIFY != 0 && e.digest.is_none() {
            return Err(ProtoError::Violation("file end without a digest in a verified session".into()).into());
        }
        self.completing(e.file, |t| t.file_end(e))
    }

    /// A frame that may complete file `file` (its end, or a hole): `judge` is the tracker's
    /// verdict, and the file's slot is taken in the same look (a file still being created is
    /// waited for first); a complete file is committed.
    pub(super) fn completing(
        &self,
        file: u64,
        mut judge: impl FnMut(&mut Tracker) -> Result<Step, ProtoError>,
    ) -> Result<(), Abort> {
        let done = self.until_created(file, |st| {
            Ok(match judge(&mut st.tracker)? {
                Step::NotYet => None,
                Step::Complete(done) => {
                    let slot = st.open.remove(&done.file);
                    Some(Some((done, slot)))
                }
                _ => Some(None),
            })
        })?;
        if let Some((done, Some(Slot::Ready(of)))) = done {
            self.commit(&of, done)?;
        }
        Ok(())
    }

    pub(super) fn on_file_abort(&self, a: &FileAbort) -> Result<(), Abort> {
        let slot =
            self.until(|st| Ok(if st.tracker.abandon(a.file) { Some(st.open.remove(&a.file)) } else { None }))?;
        if let Some(Slot::Ready(of)) = slot {
            Self::drop_file(&of, false);
        }
        self.wake();
        self.settle_links(a.file);
        Ok(())
    }

    /// Give up on a file after a local failure: remove its temporary file, tell the client.
    pub(super) fn fail_file(&self, id: u64, code: ErrorCode, msg: &str) {
        let mut st = self.lock();
        st.tracker.abandon(id);
        let slot = st.open.remove(&id);
        drop(st);
        self.wake();
        if let Some(Slot::Ready(of)) = slot {
            Self::drop_file(&of, false);
            self.report(code, &of.path, msg);
        }
        self.settle_links(id);
    }

    /// Every chunk is written and the end declared: verify, apply metadata, rename into place.
    pub(super) fn commit(&self, of: &OpenFile, done: Completion) -> Result<(), Abort> {
        let mut full = None;
        let r = (|| -> Result<(), (ErrorCode, String)> {
            let mut io = |what: &str, e: std::io::Error| {
                if let Some(x) = Exhausted::of(&e) {
                    full = Some((x, e));
                    return (ErrorCode::Storage, String::new());
                }
                (ErrorCode::Io, format!("{what}: {e}"))
            };
            if self.has(FLAG_SPARSE) && !of.in_place {
                // Holes and unwritten zeros at the end: the file still gets its full size.
                of.inc.file.set_len(done.size).map_err(|e| io("setting the size", e))?;
            }
            if self.p.flags & FLAG_VERIFY != 0 {
                if of.in_place {
                    // Read from its start (the up-to-date check may have read it already).
                    use std::io::Seek;
                    (&of.inc.file).rewind().map_err(|e| io("re-reading for verification", e))?;
                }
                // Read while the session lives: an abort (the client gone, a deadline) stops the
                // hashing at the next read instead of letting it hold a core and the session.
                let mut h = blake3::Hasher::new();
                let mut file = WhileAlive { file: &of.inc.file, aborted: &self.aborted };
                h.update_reader(&mut file).map_err(|e| io("re-reading for verification", e))?;
                if Some(*h.finalize().as_bytes()) != done.digest {
                    let what = if of.in_place {
                        "BLAKE3 of the file at the destination"
                    } else {
                        "BLAKE3 of the written file"
                    };
                    return Err((ErrorCode::Integrity, format!("{what} differs from the source")));
                }
            }
            // Every chunk was checked for offset and exact length and written, so the size is right.
            if !of.in_place && of.journal.is_none() && of.ids == (None, None) && confined::created_with(of.mode) {
                confined::set_mtime(&of.inc.file, of.mtime).map_err(|e| io("setting the modification time", e))?;
            } else {
                confined::set_meta_owned(&of.inc.file, of.mode, of.mtime, of.ids)
                    .map_err(|e| io("setting owner, mode and time", e))?;
            }
            if self.p.flags & FLAG_FSYNC != 0 {
                of.inc.file.sync_all().map_err(|e| io("fsync", e))?;
            }
            if of.in_place {
                // Already under its name: only its metadata changed.
                return Ok(());
            }
            let way = self.in_the_way();
            match (&of.partial_in, &of.inc.tmp) {
                // A partial file: from the working directory into place (the same mount: checked
                // when it was opened).
                (Some(work), Some(part)) => confined::rename_between(&work.fd, part, &of.parent, &of.name, way),
                _ => confined::commit_incoming(&of.parent, &of.inc, &of.name, &of.tmp, way),
            }
            .map_err(|e| io("renaming into place", e))?;
            if let (Some(j), Some(work)) = (&of.journal, &of.partial_in) {
                j.lock().unwrap_or_else(PoisonError::into_inner).remove(&work.fd);
            }
            if self.p.flags & FLAG_FSYNC != 0 {
                confined::sync_dir(&of.parent).map_err(|e| io("fsync of directory", e))?;
            }
            Ok(())
        })();
        match r {
            Ok(()) => {
                self.committed(done.file, true);
                self.n.tally.files.fetch_add(1, Relaxed);
                self.n.tally.bytes.fetch_add(done.size, Relaxed);
                if let Some(p) = &self.progress {
                    p.files.fetch_add(1, Relaxed);
                    use std::os::unix::ffi::OsStrExt;
                    p.on_file.call(std::path::Path::new(std::ffi::OsStr::from_bytes(&of.path)), done.size, true);
                }
            }
            Err(_) if full.is_some() => {
                // The file is complete in its temporary: kept for a resume, as on any abort.
                if let Some((x, e)) = full {
                    return Err(self.exhausted(Some(&of.parent), &of.path, x, &e));
                }
            }
            // Ended mid-verification: kept for a resume, as on any abort.
            Err(_) if self.aborted.load(Relaxed) => {
                Self::drop_file(of, true);
                return Err(Abort::protocol("session aborted"));
            }
            Err((code, msg)) => {
                Self::drop_file(of, false);
                self.report(code, &of.path, &msg);
                self.committed(done.file, false);
            }
        }
        Ok(())
    }
}

/// A file read only while its session is alive (see [`RecvSession::commit`]).
struct WhileAlive<'a> {
    file: &'a std::fs::File,
    /// The session's abort state, read before each block: a read of a flag between pieces of
    /// work that never wait (a file's blocks), not a stop polled for.
    aborted: &'a std::sync::atomic::AtomicBool,
}

impl std::io::Read for WhileAlive<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.aborted.load(Relaxed) {
            return Err(std::io::Error::other("the session ended"));
        }
        std::io::Read::read(&mut self.file, buf)
    }
}

#[cfg(test)]
mod tests {
    use super::WhileAlive;
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

    #[test]
    fn a_check_stops_reading_when_its_session_ends() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&[7u8; 4096]).unwrap();
        let aborted = AtomicBool::new(false);
        let mut buf = [0u8; 1024];
        let mut r = WhileAlive { file: &f, aborted: &aborted };
        std::io::Seek::rewind(&mut &f).unwrap();
        assert_eq!(r.read(&mut buf).unwrap(), 1024);
        aborted.store(true, Relaxed);
        let e = r.read(&mut buf).unwrap_err();
        assert!(e.to_string().contains("session ended"), "{e}");
        // And blake3's reader loop gives up on it rather than retrying.
        let mut h = blake3::Hasher::new();
        assert!(h.update_reader(WhileAlive { file: &f, aborted: &aborted }).is_err());
    }
}
