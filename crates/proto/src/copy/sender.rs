//! The sending side of a copy session as one machine: it owns the control stream's rules
//! ([`SenderControl`]) and decides everything the sender puts on the control stream and when —
//! offers batched into records, `--delete` listings, keepalives after silence, `Finish` — and
//! when the walker may stop waiting for answers. The engine feeds it what arrives and what its
//! threads did (`handle_*`, `offer`, `keep`, `finish`, with an explicit `now`), sends what
//! [`Sender::poll_transmit`] hands out, acts on [`Sender::poll_event`], and wakes it at
//! [`Sender::poll_timeout`]. No sockets, no clock reads: a test steps it on a virtual clock.

use super::{Expired, SenderControl, SenderEvent, SenderTimeouts};
use crate::caps::MAX_KEEP_NAMES;
use crate::frame::{self, Fatal, FileStart, Finish, Frame, HardLink, Keep, Names, Offer, Summary, FLAG_SYNC};
use crate::ProtoError;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Most files offered and not yet answered: the receiver's tracker holds at most
/// `MAX_OPEN_FILES` declared files, and the wanted ones wait in the sender's queue beside these.
pub const OFFER_WINDOW: usize = 1024;

/// A batch of control frames goes out once it holds this many bytes ...
pub const BATCH_BYTES: usize = 256 * 1024;

/// ... or once its first frame has waited this long.
pub const BATCH_DELAY: Duration = Duration::from_millis(20);

/// What [`Expired::what`] says of a write that made no progress for the stall timeout.
pub const WRITE_STALL: &str = "progress sending to the receiver";

/// Names per `Keep` frame (a quarter of the cap, so a frame stays well within its byte caps).
const KEEP_PART: usize = MAX_KEEP_NAMES / 4;

/// What a sender session is configured with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SenderConfig {
    /// The session's `FLAG_*` bits.
    pub flags: u32,
    /// Its chunk size.
    pub chunk_size: u32,
    /// How long to wait for answers and for the summary.
    pub timeouts: SenderTimeouts,
    /// After this long without a record on the control stream, a keepalive goes out.
    pub keepalive: Duration,
}

/// What the sender learns from its receiver (or from its own deadlines), in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// One entry failed on the receiver; the session goes on.
    Error {
        /// An [`crate::ErrorCode`].
        code: u16,
        /// The entry's path at the destination.
        path: Vec<u8>,
        /// What went wrong, in the receiver's words.
        message: Vec<u8>,
    },
    /// The answer to an open offer, with the chunk ranges the receiver holds (checked: see
    /// [`super::held_ranges`]).
    Want {
        /// The offered file.
        file: u64,
        /// Its `WANT_*` verdict.
        verdict: u8,
        /// Held chunk ranges, `(first, count)`.
        held: Vec<(u64, u64)>,
    },
    /// A deletion the request asked for.
    Note {
        /// `NOTE_*` kind.
        kind: u8,
        /// The path at the destination.
        path: Vec<u8>,
    },
    /// The walk is over and every offer was answered: the queue may finish (the walker's wait).
    Settled,
    /// The receiver's summary: the session is over.
    Summary(Summary),
    /// The receiver ended the session.
    Fatal {
        /// An [`crate::ErrorCode`].
        code: u16,
        /// Why, in its words.
        message: Vec<u8>,
    },
}

/// The sending side of a copy session ([module docs](self)).
#[derive(Debug)]
pub struct Sender {
    rules: SenderControl,
    keepalive: Duration,
    sync: bool,
    /// Frames not yet in a record, and when the first of them was added.
    batch: Vec<u8>,
    batch_since: Option<Instant>,
    /// Records to send, in order (an empty one is a keepalive).
    out: VecDeque<Vec<u8>>,
    events: VecDeque<Event>,
    /// When the last record was handed out to be sent.
    last_sent: Instant,
    /// The walk still offers or lists.
    walking: bool,
    settled: bool,
    /// `Finish` or this side's `Fatal` was queued: no keepalives, no more offers.
    closing: bool,
    /// A wait passed its limit: the session is over for this side, though what the receiver
    /// still says (its `Fatal`, explaining) is taken.
    expired: bool,
    /// Streams (0: control, then the data streams) with a write under way, and since when.
    writing: Vec<Option<Instant>>,
    stall: Duration,
}

impl Sender {
    /// A session after the receiver's `Target`, at `now`.
    pub fn new(cfg: SenderConfig, now: Instant) -> Sender {
        Sender {
            rules: SenderControl::new(cfg.flags, cfg.chunk_size, cfg.timeouts, now),
            keepalive: cfg.keepalive.max(Duration::from_millis(1)),
            sync: cfg.flags & FLAG_SYNC != 0,
            batch: Vec::new(),
            batch_since: None,
            out: VecDeque::new(),
            events: VecDeque::new(),
            last_sent: now,
            walking: true,
            settled: false,
            closing: false,
            expired: false,
            writing: Vec::new(),
            stall: cfg.timeouts.stall,
        }
    }

    /// Whether another file may be offered now: fewer than [`OFFER_WINDOW`] are unanswered.
    pub fn can_offer(&self) -> bool {
        !self.closing && self.rules.open_offers() < OFFER_WINDOW
    }

    /// Offers not answered yet.
    pub fn open_offers(&self) -> usize {
        self.rules.open_offers()
    }

    /// Offer `file` (sync), with its BLAKE3 with `checksum`. An offer that fills the window goes
    /// out at once, since no answer can come for what was not sent.
    pub fn offer(&mut self, file: FileStart<'_>, digest: Option<[u8; 32]>, now: Instant) -> Result<(), ProtoError> {
        if !self.sync || !self.walking || !self.can_offer() {
            return Err(ProtoError::Violation(
                "an offer outside the walk of a sync session, or beyond its window".into(),
            ));
        }
        self.rules.offered(file.id, file.size, now);
        self.push(Frame::Offer(Offer { file, digest }), now);
        if !self.can_offer() {
            self.flush();
        }
        Ok(())
    }

    /// Name a user or group id (`IdName`) ahead of the offer that uses it: the control stream
    /// keeps the order, so the receiver knows the name when the offer arrives. Only while the walk
    /// offers (ignored after).
    pub fn name_id(&mut self, n: crate::frame::IdName<'_>, now: Instant) {
        if self.walking && !self.closing {
            self.push(Frame::IdName(n), now);
        }
    }

    /// `-H` in a sync session: announce a link target (before its offer) or send a further name,
    /// in order with the offers.
    pub fn hard_link(&mut self, l: HardLink<'_>, now: Instant) -> Result<(), ProtoError> {
        if !self.sync || !self.walking || self.closing {
            return Err(ProtoError::Violation("a hard link outside the walk of a sync session".into()));
        }
        self.push(Frame::HardLink(l), now);
        Ok(())
    }

    /// List directory `dir` for `--delete` (in frames of at most a quarter of the cap's names).
    pub fn keep<N: AsRef<[u8]>>(&mut self, dir: u64, names: &[N], now: Instant) {
        let mut scratch = Vec::new();
        if names.is_empty() {
            self.push(Frame::Keep(Keep { dir, last: true, names: Names::encode::<&[u8]>(&[], &mut scratch) }), now);
        }
        let mut parts = names.chunks(KEEP_PART).peekable();
        while let Some(part) = parts.next() {
            let last = parts.peek().is_none();
            self.push(Frame::Keep(Keep { dir, last, names: Names::encode(part, &mut scratch) }), now);
        }
    }

    /// The walk is over: what is batched goes out, and once every offer is answered the queue
    /// may finish ([`Event::Settled`]).
    pub fn walk_done(&mut self) {
        self.walking = false;
        self.flush();
        self.check_settled();
    }

    /// Every data stream ended: `Finish` with these totals goes out, and the summary is due. Only
    /// after the walk and with no offer open.
    pub fn finish(&mut self, fin: Finish, now: Instant) -> Result<(), ProtoError> {
        if self.walking || self.rules.open_offers() > 0 || self.closing {
            return Err(ProtoError::Violation("Finish before the walk ended and every offer was answered".into()));
        }
        self.flush();
        let mut rec = Vec::new();
        Frame::Finish(fin).encode(&mut rec);
        self.out.push_back(rec);
        self.rules.finish(fin, now);
        self.closing = true;
        Ok(())
    }

    /// This side ends the session (its user interrupted it): a `Fatal` goes out, nothing after it.
    pub fn abort(&mut self, code: u16, message: &[u8]) {
        if self.rules.is_over() {
            return;
        }
        self.batch.clear();
        self.batch_since = None;
        let mut rec = Vec::new();
        Frame::Fatal(Fatal { code, message }).encode(&mut rec);
        self.out.push_back(rec);
        self.closing = true;
        self.rules.end();
    }

    /// A write of a record began on `stream` (0: control, then the data streams). A write that
    /// makes no progress for the stall timeout ends the session ([`Sender::handle_timeout`]): a
    /// dead link must not hold it for the kernel's retransmission limit.
    pub fn writing(&mut self, stream: u16, now: Instant) {
        let i = usize::from(stream);
        if self.writing.len() <= i {
            self.writing.resize(i + 1, None);
        }
        self.writing[i] = Some(now);
    }

    /// The write on `stream` is done (sent into the socket, or failed).
    pub fn written(&mut self, stream: u16) {
        if let Some(w) = self.writing.get_mut(usize::from(stream)) {
            *w = None;
        }
    }

    fn write_deadline(&self) -> Option<Instant> {
        self.writing.iter().flatten().min().map(|&t| t + self.stall)
    }

    /// Whether the session is over (a summary, a fatal error, this side's abort, or a wait that
    /// passed its limit).
    pub fn is_over(&self) -> bool {
        self.rules.is_over() || self.expired
    }

    /// One record from the receiver's control stream. An error ends the session (the engine
    /// closes it with the error's code).
    pub fn handle_record(&mut self, plain: &[u8], now: Instant) -> Result<(), ProtoError> {
        for f in frame::frames(plain) {
            let event = match f.and_then(|f| self.rules.handle_frame(f, now)) {
                Ok(e) => e,
                Err(e) => {
                    self.rules.end();
                    return Err(e);
                }
            };
            self.events.push_back(match event {
                SenderEvent::Error(e) => {
                    Event::Error { code: e.code, path: e.path.to_vec(), message: e.message.to_vec() }
                }
                SenderEvent::Want { file, verdict, held } => Event::Want { file, verdict, held },
                SenderEvent::Note(n) => Event::Note { kind: n.kind, path: n.path.to_vec() },
                SenderEvent::Summary(s) => Event::Summary(s),
                SenderEvent::Fatal(f) => Event::Fatal { code: f.code, message: f.message.to_vec() },
            });
        }
        self.check_settled();
        Ok(())
    }

    /// The next record to send on the control stream (its plaintext frames; empty: a keepalive).
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Vec<u8>> {
        let r = self.out.pop_front()?;
        self.last_sent = now;
        Some(r)
    }

    /// The next thing the sender learnt.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`Sender::handle_timeout`] must be called next: a batch's flush, a keepalive, an
    /// answer's or the summary's deadline, whichever comes first.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.rules.is_over() || self.expired {
            return None;
        }
        let batch = self.batch_since.map(|t| t + BATCH_DELAY);
        let keepalive = (!self.closing).then(|| self.last_sent + self.keepalive);
        [batch, keepalive, self.rules.poll_timeout(), self.write_deadline()].into_iter().flatten().min()
    }

    /// `now` has come: flush a batch that waited long enough, queue a keepalive after silence, or
    /// fail a wait that passed its limit (the session is then over).
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), Expired> {
        if self.rules.is_over() || self.expired {
            return Ok(());
        }
        if self.batch_since.is_some_and(|t| now >= t + BATCH_DELAY) {
            self.flush();
        }
        let stalled =
            self.write_deadline().filter(|&d| now >= d).map(|_| Expired { what: WRITE_STALL, after: self.stall });
        if let Some(e) = stalled.map_or_else(|| self.rules.handle_timeout(now).err(), Some) {
            self.expired = true;
            self.closing = true;
            self.batch.clear();
            self.batch_since = None;
            return Err(e);
        }
        if !self.closing && self.out.is_empty() && now >= self.last_sent + self.keepalive {
            self.out.push_back(Vec::new());
        }
        Ok(())
    }

    fn push(&mut self, f: Frame<'_>, now: Instant) {
        f.encode(&mut self.batch);
        self.batch_since.get_or_insert(now);
        if self.batch.len() >= BATCH_BYTES {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if !self.batch.is_empty() {
            self.out.push_back(std::mem::take(&mut self.batch));
        }
        self.batch_since = None;
    }

    fn check_settled(&mut self) {
        if !self.walking && !self.settled && self.rules.open_offers() == 0 && !self.rules.is_over() {
            self.settled = true;
            self.events.push_back(Event::Settled);
        }
    }
}
