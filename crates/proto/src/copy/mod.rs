//! A copy session's control stream without I/O: what each side may receive and when, what counts
//! as progress, when waiting has lasted too long — and what each side sends and when.
//!
//! Two layers in the quinn-proto style. [`SenderControl`] and [`ReceiverControl`] are the rules:
//! the engine feeds them what arrives (`handle_*`, with an explicit `now`) and they say whether it
//! may, and when a wait expires (`poll_timeout`, `handle_timeout`). [`sender::Sender`] and
//! [`receiver::Receiver`] are the session machines built on them: they also own each side's
//! outbound queue (`poll_transmit`: offers batched into records, `--delete` listings, keepalives
//! on their cadence, `Finish`; answers, reports, the summary) and what the engine must act on
//! (`poll_event`), so that engine threads only move bytes and read the clock. The sending side is
//! the client in a push and the server in a pull. The tree itself (names, ids, chunks) is
//! [`crate::track::Tracker`]'s. The tests at the bottom step the two machines against each other
//! on a virtual clock (a quinn-style `Pair`), with no sockets and no sleeps.

pub mod receiver;
pub mod sender;

use crate::frame::{
    ErrorReport, Fatal, Finish, Frame, HardLink, Keep, Note, Offer, Summary, Want, FLAG_DELETE, FLAG_DRY_RUN,
    FLAG_HARD_LINKS, FLAG_SYNC, NOTE_DELETED, NOTE_WOULD_DELETE, WANT_MISSING,
};
use crate::ProtoError;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A wait that lasted longer than its limit; the session is over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired {
    /// What was awaited, as a person reads it ("the receiver's summary after the end").
    pub what: &'static str,
    /// The limit that passed.
    pub after: Duration,
}

impl std::fmt::Display for Expired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "no {} within {} s", self.what, self.after.as_secs_f64())
    }
}

/// The sender's limits on waiting for its receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SenderTimeouts {
    /// For an answer to offers while some are open (`--stall-timeout`).
    pub stall: Duration,
    /// For the summary after `Finish`.
    pub summary: Duration,
}

/// What one control frame from the receiver means to the sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SenderEvent<'a> {
    /// One entry failed on the receiver; the session goes on.
    Error(ErrorReport<'a>),
    /// The answer to an open offer, with the chunk ranges the receiver holds (verdict
    /// [`WANT_MISSING`] only): non-empty, within the file, ascending and apart, so every held
    /// chunk counts once.
    Want {
        /// The offered file.
        file: u64,
        /// Its `WANT_*` verdict.
        verdict: u8,
        /// Held chunk ranges, `(first, count)`.
        held: Vec<(u64, u64)>,
    },
    /// A deletion the request asked for (`delete`), of the kind it asked for.
    Note(Note<'a>),
    /// The receiver's summary, after `Finish` and claiming no more than was sent: the end.
    Summary(Summary),
    /// The receiver ended the session.
    Fatal(Fatal<'a>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SenderPhase {
    /// Entries and offers go out; answers come back.
    Sending,
    /// `Finish` went out at this time with these totals; the summary is due.
    Finished(Finish, Instant),
    /// The summary (or a fatal error) arrived.
    Over,
}

/// The sending side of a copy session's control stream.
#[derive(Debug, Clone)]
pub struct SenderControl {
    flags: u32,
    timeouts: SenderTimeouts,
    phase: SenderPhase,
    /// Open offers: file id → number of chunks.
    offers: HashMap<u64, u64>,
    chunk_size: u64,
    /// When the receiver last answered an offer, or the first open offer went out.
    last_answer: Instant,
}

impl SenderControl {
    /// A session with these `FLAG_*` bits and chunk size, after the receiver's `Target`.
    pub fn new(flags: u32, chunk_size: u32, timeouts: SenderTimeouts, now: Instant) -> SenderControl {
        SenderControl {
            flags,
            timeouts,
            phase: SenderPhase::Sending,
            offers: HashMap::new(),
            chunk_size: u64::from(chunk_size.max(1)),
            last_answer: now,
        }
    }

    /// File `file` of `size` bytes was offered (sync).
    pub fn offered(&mut self, file: u64, size: u64, now: Instant) {
        if self.offers.is_empty() {
            self.last_answer = now;
        }
        self.offers.insert(file, size.div_ceil(self.chunk_size));
    }

    /// Offers not answered yet.
    pub fn open_offers(&self) -> usize {
        self.offers.len()
    }

    /// Everything was sent: `Finish` with these totals goes out now.
    pub fn finish(&mut self, fin: Finish, now: Instant) {
        if self.phase == SenderPhase::Sending {
            self.phase = SenderPhase::Finished(fin, now);
        }
    }

    /// The session ended otherwise (a broken rule, an expired wait, this side's abort): nothing
    /// more is accepted and no deadline is left.
    pub fn end(&mut self) {
        self.phase = SenderPhase::Over;
    }

    /// Whether the session is over (a summary or a fatal error arrived).
    pub fn is_over(&self) -> bool {
        self.phase == SenderPhase::Over
    }

    /// One frame from the receiver's control stream.
    pub fn handle_frame<'a>(&mut self, f: Frame<'a>, now: Instant) -> Result<SenderEvent<'a>, ProtoError> {
        if self.phase == SenderPhase::Over {
            return Err(ProtoError::Violation(format!("{f:?} after the session ended")));
        }
        match f {
            Frame::Error(e) => Ok(SenderEvent::Error(e)),
            Frame::Want(w) if self.flags & FLAG_SYNC != 0 => {
                let Some(chunks) = self.offers.remove(&w.file) else {
                    return Err(ProtoError::Violation(format!("Want for file {}, which has no open offer", w.file)));
                };
                let held = held_ranges(&w, chunks)?;
                self.last_answer = now;
                Ok(SenderEvent::Want { file: w.file, verdict: w.verdict, held })
            }
            Frame::Note(n) => {
                let kind = if self.flags & FLAG_DRY_RUN != 0 { NOTE_WOULD_DELETE } else { NOTE_DELETED };
                if self.flags & FLAG_DELETE == 0 || n.kind != kind {
                    return Err(ProtoError::Violation(format!(
                        "a deletion report (kind {}) the request did not ask for",
                        n.kind
                    )));
                }
                Ok(SenderEvent::Note(n))
            }
            Frame::Summary(s) => match self.phase {
                SenderPhase::Finished(fin, _) => {
                    if s.files > fin.files || s.bytes > fin.bytes || s.dirs > fin.dirs || s.links > fin.links {
                        return Err(ProtoError::Violation(format!(
                            "the receiver's summary claims {} files, {} bytes, {} dirs, {} links; {} files, {} bytes, \
                             {} dirs, {} links were sent",
                            s.files, s.bytes, s.dirs, s.links, fin.files, fin.bytes, fin.dirs, fin.links
                        )));
                    }
                    self.phase = SenderPhase::Over;
                    Ok(SenderEvent::Summary(s))
                }
                _ => Err(ProtoError::Violation("the receiver sent its summary before the sender finished".into())),
            },
            Frame::Fatal(f) => {
                self.phase = SenderPhase::Over;
                Ok(SenderEvent::Fatal(f))
            }
            other => Err(ProtoError::Violation(format!("unexpected {other:?} from the peer on the control stream"))),
        }
    }

    /// The next deadline: the summary's after `Finish`, an answer's while offers are open.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.phase {
            SenderPhase::Finished(_, at) => Some(at + self.timeouts.summary),
            SenderPhase::Sending if !self.offers.is_empty() => Some(self.last_answer + self.timeouts.stall),
            _ => None,
        }
    }

    /// `now` has come: the wait that passed its deadline, if any.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), Expired> {
        match self.poll_timeout() {
            Some(d) if now >= d => Err(match self.phase {
                SenderPhase::Finished(..) => {
                    Expired { what: "summary from the receiver after the end", after: self.timeouts.summary }
                }
                _ => Expired { what: "answer to the open offers", after: self.timeouts.stall },
            }),
            _ => Ok(()),
        }
    }
}

/// The chunk ranges a `Want` says the receiver holds of a file of `chunks` chunks: only with
/// verdict [`WANT_MISSING`], each range non-empty, within the file, in order and apart from the
/// others, so that every byte counts once (a receiver claiming overlapping ranges would inflate
/// what is reported as resumed).
pub fn held_ranges(w: &Want<'_>, chunks: u64) -> Result<Vec<(u64, u64)>, ProtoError> {
    if w.verdict != WANT_MISSING {
        return if w.have.is_empty() {
            Ok(Vec::new())
        } else {
            Err(ProtoError::Violation(format!("Want for file {} lists held chunks with verdict {}", w.file, w.verdict)))
        };
    }
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(w.have.len());
    for (first, count) in w.have.iter() {
        let in_order = out.last().is_none_or(|&(f, c)| first >= f + c);
        if count == 0 || first.checked_add(count).is_none_or(|end| end > chunks) || !in_order {
            return Err(ProtoError::Violation(format!(
                "Want for file {} holds chunks {first}+{count}: empty, beyond the file's {chunks} chunks, or out of order",
                w.file
            )));
        }
        out.push((first, count));
    }
    Ok(out)
}

/// What one control frame from the sender means to the receiver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReceiverEvent<'a> {
    /// A file offered (sync): decide and answer with a `Want`.
    Offer(Offer<'a>),
    /// Names a directory keeps (`delete`), never for the target.
    Keep(Keep<'a>),
    /// `-H` in a sync session: a file's further name, or the announcement of one, in order with
    /// the offers.
    HardLink(HardLink<'a>),
    /// The sender sent everything; every data stream must now end.
    Finish(Finish),
    /// The sender ended the session.
    Fatal(Fatal<'a>),
    /// The name of a user or group id used by the offers that follow (checked by
    /// [`crate::owner::IdMap::name`]).
    IdName(crate::frame::IdName<'a>),
}

/// How long the streams may take to end after `Finish`, and a frame to wait for an entry
/// declared on another stream.
pub const END_WAIT: Duration = Duration::from_secs(120);

/// The receiving side of a copy session: its control stream's rules, which data streams are
/// attached and ended, and progress. Keepalives prove a sender alive but are not progress: a
/// session that has received nothing but keepalives for its idle timeout, while this side was not
/// busy itself, is over.
#[derive(Debug)]
pub struct ReceiverControl {
    flags: u32,
    streams: u16,
    idle: Duration,
    attached: Vec<bool>,
    ended: u16,
    finished: Option<(Finish, Instant)>,
    /// When a record with frames last arrived, or this side last finished work of its own.
    progress: Instant,
    /// This side is busy with a record (hashing for `checksum`, opening journals).
    working: bool,
}

impl ReceiverControl {
    /// A session with these `FLAG_*` bits, `streams` announced data streams and idle timeout.
    pub fn new(flags: u32, streams: u16, idle: Duration, now: Instant) -> ReceiverControl {
        ReceiverControl {
            flags,
            streams,
            idle,
            attached: vec![false; usize::from(streams)],
            ended: 0,
            finished: None,
            progress: now,
            working: false,
        }
    }

    /// Whether data stream `stream` (1-based) would be admitted: announced and not yet attached.
    pub fn can_attach(&self, stream: u16) -> bool {
        usize::from(stream).checked_sub(1).and_then(|i| self.attached.get(i)).is_some_and(|a| !a)
    }

    /// Admit data stream `stream`; false if it was not announced or is attached already.
    pub fn attach(&mut self, stream: u16) -> bool {
        match usize::from(stream).checked_sub(1).and_then(|i| self.attached.get_mut(i)) {
            Some(a) if !*a => {
                *a = true;
                true
            }
            _ => false,
        }
    }

    /// A data stream sent `End`.
    pub fn stream_ended(&mut self) {
        self.ended = self.ended.saturating_add(1).min(self.streams);
    }

    /// Data streams that sent `End`.
    pub fn ended(&self) -> u16 {
        self.ended
    }

    /// Whether every announced data stream has ended.
    pub fn all_ended(&self) -> bool {
        self.ended >= self.streams
    }

    /// A record arrived on any stream at `now`: with frames it is progress; empty (a keepalive)
    /// it is refused once nothing else came for the idle timeout.
    pub fn handle_record(&mut self, empty: bool, now: Instant) -> Result<(), ProtoError> {
        if !empty {
            self.progress = now;
            return Ok(());
        }
        let idle = now.saturating_duration_since(self.progress);
        if self.working || idle < self.idle {
            return Ok(());
        }
        Err(ProtoError::Violation(format!(
            "the sender sent nothing but keepalives for {:.0} s (the idle timeout): no progress",
            idle.as_secs_f64()
        )))
    }

    /// This side starts (`true`) or ends work of its own on a record; its end is progress.
    pub fn working(&mut self, busy: bool, now: Instant) {
        self.working = busy;
        self.progress = now;
    }

    /// One frame of the control stream. Nothing may follow `Finish`.
    pub fn handle_control_frame<'a>(&mut self, f: Frame<'a>, now: Instant) -> Result<ReceiverEvent<'a>, ProtoError> {
        if self.finished.is_some() {
            return Err(ProtoError::Violation("frames after Finish".into()));
        }
        match f {
            Frame::Offer(o) if self.flags & FLAG_SYNC != 0 => Ok(ReceiverEvent::Offer(o)),
            Frame::Keep(k) if self.flags & FLAG_DELETE != 0 => {
                if k.dir == 0 {
                    return Err(ProtoError::Violation("Keep for the destination itself".into()));
                }
                Ok(ReceiverEvent::Keep(k))
            }
            Frame::HardLink(l) if self.flags & FLAG_SYNC != 0 && self.flags & FLAG_HARD_LINKS != 0 => {
                Ok(ReceiverEvent::HardLink(l))
            }
            Frame::Finish(fin) => {
                self.finished = Some((fin, now));
                Ok(ReceiverEvent::Finish(fin))
            }
            Frame::Fatal(f) => Ok(ReceiverEvent::Fatal(f)),
            Frame::IdName(n) if self.flags & FLAG_SYNC != 0 => Ok(ReceiverEvent::IdName(n)),
            other => Err(ProtoError::Violation(format!("frame {other:?} is not allowed on the control stream now"))),
        }
    }

    /// The sender's totals, once `Finish` arrived.
    pub fn finish(&self) -> Option<Finish> {
        self.finished.map(|(f, _)| f)
    }

    /// The next deadline: after `Finish`, every data stream must end within [`END_WAIT`].
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.finished {
            Some((_, at)) if !self.all_ended() => Some(at + END_WAIT),
            _ => None,
        }
    }

    /// `now` has come: an error if the streams did not end in time after `Finish`.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), ProtoError> {
        match self.poll_timeout() {
            Some(d) if now >= d => Err(ProtoError::Violation("data streams did not end after Finish".into())),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod pair;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{FileStart, Names, Ranges, Time, NOTE_DELETED, WANT_ALL, WANT_NONE};

    const CS: u32 = 64 * 1024;
    const T: SenderTimeouts = SenderTimeouts { stall: Duration::from_secs(300), summary: Duration::from_secs(600) };

    fn want<'b>(file: u64, verdict: u8, ranges: &[(u64, u64)], buf: &'b mut Vec<u8>) -> Frame<'b> {
        buf.clear();
        Frame::Want(Want { file, verdict, have: Ranges::encode(ranges, buf) })
    }

    fn fin(files: u64) -> Finish {
        Finish { files, bytes: files * 10, dirs: 1, links: 0 }
    }

    #[test]
    fn a_summary_before_finish_or_claiming_more_than_was_sent_is_refused() {
        let t0 = Instant::now();
        let mut s = SenderControl::new(FLAG_SYNC, CS, T, t0);
        let early = s.handle_frame(Frame::Summary(Summary::default()), t0).unwrap_err();
        assert!(early.to_string().contains("before the sender finished"), "{early}");
        s.finish(fin(3), t0);
        let more = Summary { files: 4, bytes: 30, dirs: 1, ..Summary::default() };
        assert!(s.handle_frame(Frame::Summary(more), t0).unwrap_err().to_string().contains("claims 4 files"));
        let ok = Summary { files: 3, bytes: 30, dirs: 1, errors: 2, ..Summary::default() };
        assert_eq!(s.handle_frame(Frame::Summary(ok), t0).unwrap(), SenderEvent::Summary(ok));
        assert!(s.is_over());
        assert!(s.handle_frame(Frame::Summary(ok), t0).is_err(), "nothing after the end");
    }

    #[test]
    fn wants_answer_open_offers_once_and_count_each_held_chunk_once() {
        let t0 = Instant::now();
        let mut buf = Vec::new();
        let mut s = SenderControl::new(FLAG_SYNC, CS, T, t0);
        // 76,800 bytes: two chunks.
        s.offered(7, 76_800, t0);
        s.offered(8, 10, t0);
        assert_eq!(s.open_offers(), 2);
        let overlapping = want(7, WANT_MISSING, &[(0, 1), (0, 1)], &mut buf);
        assert!(s.clone().handle_frame(overlapping, t0).is_err());
        let beyond = want(7, WANT_MISSING, &[(1, 2)], &mut buf);
        assert!(s.clone().handle_frame(beyond, t0).is_err());
        let with_all = want(7, WANT_ALL, &[(0, 1)], &mut buf);
        assert!(s.clone().handle_frame(with_all, t0).is_err());
        let ok = want(7, WANT_MISSING, &[(0, 1)], &mut buf);
        assert_eq!(
            s.handle_frame(ok.clone(), t0).unwrap(),
            SenderEvent::Want { file: 7, verdict: WANT_MISSING, held: vec![(0, 1)] }
        );
        assert!(s.handle_frame(ok, t0).unwrap_err().to_string().contains("no open offer"), "answered twice");
        let none = want(8, WANT_NONE, &[], &mut buf);
        assert!(matches!(s.handle_frame(none, t0), Ok(SenderEvent::Want { held, .. }) if held.is_empty()));
        assert_eq!(s.open_offers(), 0);
        // Without sync there are no offers to answer.
        let mut plain = SenderControl::new(0, CS, T, t0);
        assert!(plain.handle_frame(want(1, WANT_ALL, &[], &mut buf), t0).is_err());
    }

    #[test]
    fn deletion_reports_come_only_with_delete_and_of_the_kind_asked_for() {
        let t0 = Instant::now();
        let note = |kind| Frame::Note(Note { kind, path: b"x" });
        assert!(SenderControl::new(FLAG_SYNC, CS, T, t0).handle_frame(note(NOTE_DELETED), t0).is_err());
        let mut del = SenderControl::new(FLAG_SYNC | FLAG_DELETE, CS, T, t0);
        assert!(del.handle_frame(note(NOTE_DELETED), t0).is_ok());
        assert!(del.handle_frame(note(NOTE_WOULD_DELETE), t0).is_err());
        let mut dry = SenderControl::new(FLAG_SYNC | FLAG_DELETE | FLAG_DRY_RUN, CS, T, t0);
        assert!(dry.handle_frame(note(NOTE_WOULD_DELETE), t0).is_ok());
        assert!(dry.handle_frame(note(NOTE_DELETED), t0).is_err());
    }

    #[test]
    fn entries_or_requests_on_the_senders_control_stream_are_refused() {
        let t0 = Instant::now();
        let mut s = SenderControl::new(FLAG_SYNC, CS, T, t0);
        let f = FileStart {
            id: 1,
            parent: 0,
            name: b"pushed",
            size: 4,
            mode: 0o644,
            mtime: Time::default(),
            owner: Default::default(),
        };
        assert!(s.handle_frame(Frame::FileStart(f), t0).unwrap_err().to_string().contains("unexpected FileStart"));
        assert!(s.handle_frame(Frame::Target { dest_is_dir: true }, t0).is_err());
        let fatal = Fatal { code: 3, message: b"disk full" };
        assert_eq!(s.handle_frame(Frame::Fatal(fatal.clone()), t0).unwrap(), SenderEvent::Fatal(fatal));
        assert!(s.is_over());
    }

    #[test]
    fn the_sender_waits_for_answers_and_the_summary_no_longer_than_its_limits() {
        let t0 = Instant::now();
        let mut buf = Vec::new();
        let mut s = SenderControl::new(FLAG_SYNC, CS, T, t0);
        assert_eq!(s.poll_timeout(), None, "nothing to wait for");
        s.offered(1, 10, t0 + Duration::from_secs(5));
        assert_eq!(s.poll_timeout(), Some(t0 + Duration::from_secs(305)));
        // Another offer does not move the deadline: only an answer does.
        s.offered(2, 10, t0 + Duration::from_secs(100));
        assert_eq!(s.poll_timeout(), Some(t0 + Duration::from_secs(305)));
        assert!(s.handle_timeout(t0 + Duration::from_secs(304)).is_ok());
        s.handle_frame(want(1, WANT_ALL, &[], &mut buf), t0 + Duration::from_secs(200)).unwrap();
        assert_eq!(s.poll_timeout(), Some(t0 + Duration::from_secs(500)));
        let e = s.handle_timeout(t0 + Duration::from_secs(500)).unwrap_err();
        assert_eq!(e.to_string(), "no answer to the open offers within 300 s");
        s.handle_frame(want(2, WANT_ALL, &[], &mut buf), t0 + Duration::from_secs(400)).unwrap();
        assert_eq!(s.poll_timeout(), None);
        s.finish(fin(2), t0 + Duration::from_secs(1000));
        assert_eq!(s.poll_timeout(), Some(t0 + Duration::from_secs(1600)));
        assert!(s.handle_timeout(t0 + Duration::from_secs(1599)).is_ok());
        assert_eq!(s.handle_timeout(t0 + Duration::from_secs(1600)).unwrap_err().after, T.summary);
    }

    #[test]
    fn keepalives_alone_are_not_progress_but_the_receivers_own_work_is() {
        let t0 = Instant::now();
        let idle = Duration::from_secs(3);
        let mut r = ReceiverControl::new(FLAG_SYNC, 2, idle, t0);
        let at = |ms| t0 + Duration::from_millis(ms);
        for ms in (250..3000).step_by(250) {
            r.handle_record(true, at(ms)).unwrap();
        }
        let e = r.handle_record(true, at(3000)).unwrap_err();
        assert!(e.to_string().contains("nothing but keepalives for 3 s"), "{e}");
        // A record with frames resets the clock.
        r.handle_record(false, at(3100)).unwrap();
        r.handle_record(true, at(6000)).unwrap();
        // While this side works (hashing a large file) the sender's keepalives are expected.
        r.working(true, at(6000));
        r.handle_record(true, at(60_000)).unwrap();
        r.working(false, at(61_000));
        r.handle_record(true, at(63_000)).unwrap();
        assert!(r.handle_record(true, at(64_000)).is_err());
    }

    #[test]
    fn streams_attach_once_within_the_announced_count_and_must_end_after_finish() {
        let t0 = Instant::now();
        let mut r = ReceiverControl::new(0, 2, Duration::from_secs(300), t0);
        assert!(!r.can_attach(0) && !r.can_attach(3));
        assert!(r.attach(1) && !r.attach(1) && !r.can_attach(1));
        assert!(r.attach(2) && !r.attach(3) && !r.attach(0));
        assert_eq!(r.poll_timeout(), None);
        assert_eq!(r.handle_control_frame(Frame::Finish(fin(1)), t0).unwrap(), ReceiverEvent::Finish(fin(1)));
        assert_eq!(r.finish(), Some(fin(1)));
        assert!(r.handle_control_frame(Frame::Finish(fin(1)), t0).unwrap_err().to_string().contains("after Finish"));
        assert_eq!(r.poll_timeout(), Some(t0 + END_WAIT));
        r.stream_ended();
        assert!(r.handle_timeout(t0 + END_WAIT - Duration::from_secs(1)).is_ok());
        assert!(r.handle_timeout(t0 + END_WAIT).is_err());
        r.stream_ended();
        assert!(r.all_ended());
        assert_eq!(r.poll_timeout(), None);
    }

    /// A sender and a receiver machine driven against each other in memory over a virtual
    /// clock: offers answered out of order, a resumed file, a slow receiver whose own work keeps
    /// keepalives acceptable, `Finish`, streams ending, the summary.
    #[test]
    fn a_sender_and_a_receiver_agree_over_a_whole_session_in_memory() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let flags = FLAG_SYNC | FLAG_DELETE;
        let mut tx = SenderControl::new(flags, CS, T, t0);
        let mut rx = ReceiverControl::new(flags, 2, Duration::from_secs(300), t0);
        assert!(rx.attach(1) && rx.attach(2));
        // Three offers in one record.
        let sizes = [10u64, 3 * u64::from(CS), 0];
        let mut record = Vec::new();
        for (i, &size) in sizes.iter().enumerate() {
            let file = FileStart {
                id: i as u64,
                parent: 0,
                name: b"f",
                size,
                mode: 0o644,
                mtime: Time::default(),
                owner: Default::default(),
            };
            tx.offered(i as u64, size, at(1));
            Frame::Offer(Offer { file, digest: None }).encode(&mut record);
        }
        rx.handle_record(false, at(1)).unwrap();
        let mut offered = Vec::new();
        for f in crate::frame::frames(&record) {
            match rx.handle_control_frame(f.unwrap(), at(1)).unwrap() {
                ReceiverEvent::Offer(o) => offered.push(o.file.id),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(offered, [0, 1, 2]);
        // The receiver works on them (hashing) for 400 s; the sender's keepalives meanwhile are fine.
        rx.working(true, at(2));
        rx.handle_record(true, at(350)).unwrap();
        rx.working(false, at(402));
        // Answers: file 1 resumes with chunks 0 and 2 held, the others whole or up to date.
        let mut buf = Vec::new();
        let answers = [(2, WANT_NONE, vec![]), (1, WANT_MISSING, vec![(0, 1), (2, 1)]), (0, WANT_ALL, vec![])];
        for (file, verdict, ranges) in answers {
            match tx.handle_frame(want(file, verdict, &ranges, &mut buf), at(402)).unwrap() {
                SenderEvent::Want { file: f, held, .. } => assert_eq!((f, held), (file, ranges)),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(tx.open_offers(), 0);
        assert_eq!(tx.poll_timeout(), None);
        // A deletion report, then the end.
        assert!(matches!(
            tx.handle_frame(Frame::Note(Note { kind: NOTE_DELETED, path: b"old" }), at(403)),
            Ok(SenderEvent::Note(_))
        ));
        let totals = fin(2);
        tx.finish(totals, at(410));
        assert!(matches!(rx.handle_control_frame(Frame::Finish(totals), at(410)), Ok(ReceiverEvent::Finish(_))));
        rx.stream_ended();
        rx.stream_ended();
        assert_eq!(rx.poll_timeout(), None);
        let summary = Summary { files: 2, bytes: 20, dirs: 1, ..Summary::default() };
        assert_eq!(tx.handle_frame(Frame::Summary(summary), at(411)).unwrap(), SenderEvent::Summary(summary));
        assert!(tx.is_over() && tx.handle_timeout(at(100_000)).is_ok());
    }

    #[test]
    fn the_receivers_control_stream_takes_only_what_the_request_allows() {
        let t0 = Instant::now();
        let f = FileStart {
            id: 1,
            parent: 0,
            name: b"f",
            size: 4,
            mode: 0o644,
            mtime: Time::default(),
            owner: Default::default(),
        };
        let offer = Frame::Offer(Offer { file: f.clone(), digest: None });
        let keep = |dir| Frame::Keep(Keep { dir, last: true, names: Names::default() });
        let mut plain = ReceiverControl::new(0, 1, Duration::from_secs(1), t0);
        assert!(plain.handle_control_frame(offer.clone(), t0).is_err(), "offers need sync");
        assert!(plain.handle_control_frame(keep(1), t0).is_err(), "listings need delete");
        assert!(plain.handle_control_frame(Frame::FileStart(f), t0).is_err(), "entries go on data streams");
        let mut sync = ReceiverControl::new(FLAG_SYNC | FLAG_DELETE, 1, Duration::from_secs(1), t0);
        assert!(matches!(sync.handle_control_frame(offer, t0), Ok(ReceiverEvent::Offer(_))));
        assert!(matches!(sync.handle_control_frame(keep(4), t0), Ok(ReceiverEvent::Keep(_))));
        assert!(sync.handle_control_frame(keep(0), t0).unwrap_err().to_string().contains("destination itself"));
    }
}
