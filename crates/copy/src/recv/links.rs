//! `-H` and `-S` on the receiving side: further names of a file linked to its first name once
//! that is committed (never to anything the session did not write or find up to date), and
//! holes that count as received without being written.

use super::*;
use crate::confined::{self};
use linerate_model::units::format_size_iec;
use linerate_proto::caps::{HOLE_VERIFY_ALLOWANCE, HOLE_VERIFY_PER_BYTE};
use linerate_proto::frame::{HardLink, Hole, FLAG_HARD_LINKS, FLAG_SPARSE, FLAG_VERIFY, LINK_TARGET};
use linerate_proto::track::Step;
use linerate_proto::track::{LinkStep, SettledLinks};
use std::sync::atomic::Ordering::Relaxed;

impl RecvSession {
    /// A `HardLink` frame, from a data stream or (sync) the control stream.
    pub(super) fn on_hard_link(&self, l: &HardLink<'_>, control: bool) -> Result<(), Abort> {
        if !self.has(FLAG_HARD_LINKS) {
            return Err(ProtoError::Violation("a hard link in a session without -H".into()).into());
        }
        if l.kind == LINK_TARGET {
            return Ok(self.lock().tracker.announce_link_target(l.file)?);
        }
        let name = self.local_name(l.parent, l.name);
        let l = HardLink { name, ..l.clone() };
        let step = self.until_from(control, |st| {
            Ok(match st.tracker.hard_link(&l)? {
                LinkStep::NotYet => None,
                s => Some(s),
            })
        })?;
        match step {
            LinkStep::Now { dir, name } => self.make_link(dir, &name, l.parent, l.name),
            LinkStep::TargetFailed => self.link_failed(l.parent, l.name),
            LinkStep::Queued | LinkStep::NotYet => {}
        }
        Ok(())
    }

    /// Link, or report, the names that waited for file `file`, if it is now settled.
    pub(super) fn settle_links(&self, file: u64) {
        let settled = self.lock().tracker.take_links(file);
        if let Some(s) = settled {
            self.act_on(s);
        }
    }

    /// File `file` was committed (`ok`) or failed to be: settle the names that waited for it.
    pub(super) fn committed(&self, file: u64, ok: bool) {
        self.lock().tracker.committed(file, ok);
        self.settle_links(file);
    }

    /// At the end of a session: every name still waiting fails.
    pub(super) fn fail_waiting_links(&self) {
        let left = self.lock().tracker.fail_waiting_links();
        for s in left {
            self.act_on(s);
        }
    }

    fn act_on(&self, s: SettledLinks) {
        for (parent, name) in s.links {
            if s.ok {
                self.make_link(s.dir, &s.name, parent, &name);
            } else {
                self.link_failed(parent, &name);
            }
        }
    }

    fn link_failed(&self, parent: u64, name: &[u8]) {
        let path = Self::entry_path(&self.lock(), parent, name);
        self.report(ErrorCode::Io, &path, "not linked: its first name could not be copied");
    }

    /// Give the committed file `first` in directory `dir` the further name `name` in `parent`.
    fn make_link(&self, dir: u64, first: &[u8], parent: u64, name: &[u8]) {
        if self.has(FLAG_DRY_RUN) {
            return;
        }
        let (target, at, path) = {
            let mut guard = self.lock();
            let st = &mut *guard;
            let target = st.dirs.get(dir, &st.tracker);
            // Through the one gate every entry's name passes (a working directory's form refused).
            let at = Self::parent_for(st, parent, name);
            (target, at, Self::entry_path(st, parent, name))
        };
        let tmp = confined::temp_name(&self.p.tag, u64::MAX - self.n.temp_seq.fetch_add(1, Relaxed));
        match target.and_then(|t| at.and_then(|a| confined::hard_link(&t, first, &a, name, &tmp, self.in_the_way()))) {
            // A further name is not counted as a file on either side, as rsync's "regular files
            // transferred" does not count it (docs/PROTOCOL.md); a failure is an error like any.
            Ok(()) => {}
            Err(e) => self.report(ErrorCode::Io, &path, &format!("cannot create hard link: {e}")),
        }
    }

    /// `-S`: chunks that are a hole at the source. With `verify` the zeros of a hole are hashed
    /// when the file is checked, which the sender's 24-byte frame does not pay for: they are
    /// charged to the session's budget ([`HOLE_VERIFY_ALLOWANCE`] and [`HOLE_VERIFY_PER_BYTE`]
    /// per data byte received), and a hole past it fails its file (`Limit`) before any hashing.
    pub(super) fn on_hole(&self, h: &Hole) -> Result<(), Abort> {
        if !self.has(FLAG_SPARSE) {
            return Err(ProtoError::Violation("a hole in a session without -S".into()).into());
        }
        let verify = self.has(FLAG_VERIFY);
        let mut refused = None;
        self.completing(h.file, |t| {
            if verify && t.is_open(h.file) {
                if let Err(why) = self.charge_hole(h.len) {
                    t.abandon(h.file);
                    refused = Some(why);
                    return Ok(Step::Discard);
                }
            }
            t.hole(h)
        })?;
        if let Some(why) = refused {
            self.fail_file(h.file, ErrorCode::Limit, &why);
        }
        Ok(())
    }

    /// Charge `len` hole bytes to the session's verification budget, or say why not (nothing is
    /// charged then).
    fn charge_hole(&self, len: u64) -> Result<(), String> {
        let data = self.n.written.load(Relaxed);
        let budget = HOLE_VERIFY_ALLOWANCE.saturating_add(data.saturating_mul(HOLE_VERIFY_PER_BYTE));
        let r = self.n.holes.fetch_update(Relaxed, Relaxed, |h| h.checked_add(len).filter(|&t| t <= budget));
        r.map(|_| ()).map_err(|charged| {
            format!(
                "verifying it would hash {} of holes, past this session's budget for zeros it was not sent \
                 ({} of {}: {} and {HOLE_VERIFY_PER_BYTE} per byte of data received); copy it without --verify",
                format_size_iec(len as f64),
                format_size_iec(charged as f64),
                format_size_iec(budget as f64),
                format_size_iec(HOLE_VERIFY_ALLOWANCE as f64),
            )
        })
    }
}
