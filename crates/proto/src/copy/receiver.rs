//! The receiving side of a copy session as one machine: it owns the session-level rules
//! ([`ReceiverControl`]: what the control stream may carry, attached and ended streams,
//! keepalives that are not progress, the wait for the streams after `Finish`) and everything the
//! receiver puts on the control stream — the answers to one record's offers in one record and in
//! order, per-entry `Error`s, `Note`s, the `Summary` only once every stream ended after `Finish`,
//! at most one `Fatal` and nothing after it. The engine decides what to answer (that needs the
//! filesystem) and sends what [`Receiver::poll_transmit`] hands out.

use super::{ReceiverControl, ReceiverEvent};
use crate::frame::{ErrorReport, Fatal, Finish, Frame, Note, Ranges, Summary, Want};
use crate::ProtoError;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Where a receiving session is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Before the summary: records come and go.
    Open,
    /// The summary or a `Fatal` went out: nothing more.
    Closed,
}

/// The receiving side of a copy session ([module docs](self)).
#[derive(Debug)]
pub struct Receiver {
    rules: ReceiverControl,
    phase: Phase,
    /// Offers of the record being handled, not yet answered, in order.
    unanswered: VecDeque<u64>,
    /// Their answers so far, as `Want` frames.
    answers: Vec<u8>,
    out: VecDeque<Vec<u8>>,
}

impl Receiver {
    /// A session with these `FLAG_*` bits, `streams` announced data streams and idle timeout.
    pub fn new(flags: u32, streams: u16, idle: Duration, now: Instant) -> Receiver {
        Receiver {
            rules: ReceiverControl::new(flags, streams, idle, now),
            phase: Phase::Open,
            unanswered: VecDeque::new(),
            answers: Vec::new(),
            out: VecDeque::new(),
        }
    }

    /// The rules: streams attached and ended, progress, `Finish`.
    pub fn rules(&self) -> &ReceiverControl {
        &self.rules
    }

    /// The rules, to record what the engine's threads did (attach, `End`, work of its own).
    pub fn rules_mut(&mut self) -> &mut ReceiverControl {
        &mut self.rules
    }

    /// A record arrived on any stream ([`ReceiverControl::handle_record`]).
    pub fn handle_record(&mut self, empty: bool, now: Instant) -> Result<(), ProtoError> {
        self.rules.handle_record(empty, now)
    }

    /// One frame of a control record. An offer must be answered ([`Receiver::answer`]) before
    /// the record ends ([`Receiver::end_record`]).
    pub fn handle_control_frame<'a>(&mut self, f: Frame<'a>, now: Instant) -> Result<ReceiverEvent<'a>, ProtoError> {
        let e = self.rules.handle_control_frame(f, now)?;
        if let ReceiverEvent::Offer(o) = &e {
            self.unanswered.push_back(o.file.id);
        }
        Ok(e)
    }

    /// Answer the oldest unanswered offer of this record, `file`, with `verdict` and the chunk
    /// ranges held.
    pub fn answer(&mut self, file: u64, verdict: u8, have: &[(u64, u64)]) -> Result<(), ProtoError> {
        if self.unanswered.front() != Some(&file) {
            return Err(ProtoError::Violation(format!("an answer for file {file}, which is not the next offer")));
        }
        self.unanswered.pop_front();
        let mut scratch = Vec::new();
        Frame::Want(Want { file, verdict, have: Ranges::encode(have, &mut scratch) }).encode(&mut self.answers);
        Ok(())
    }

    /// The control record is handled: its answers go out in one record. Every offer in it must
    /// have been answered.
    pub fn end_record(&mut self) -> Result<(), ProtoError> {
        if !self.unanswered.is_empty() {
            self.unanswered.clear();
            self.answers.clear();
            return Err(ProtoError::Violation("a control record's offers were not all answered".into()));
        }
        if !self.answers.is_empty() {
            let rec = std::mem::take(&mut self.answers);
            self.queue(rec);
        }
        Ok(())
    }

    /// One entry failed: an `Error` goes out in a record of its own.
    pub fn report(&mut self, code: u16, path: &[u8], message: &[u8]) {
        let mut rec = Vec::new();
        Frame::Error(ErrorReport { code, path, message }).encode(&mut rec);
        self.queue(rec);
    }

    /// A deletion (or, in a dry run, one that would be made).
    pub fn note(&mut self, kind: u8, path: &[u8]) {
        let mut rec = Vec::new();
        Frame::Note(Note { kind, path }).encode(&mut rec);
        self.queue(rec);
    }

    /// Whether the summary may go: `Finish` arrived and every data stream ended.
    pub fn summary_due(&self) -> Option<Finish> {
        self.rules.finish().filter(|_| self.rules.all_ended() && self.phase == Phase::Open)
    }

    /// The summary goes out; the session is over.
    pub fn summary(&mut self, s: Summary) -> Result<(), ProtoError> {
        if self.summary_due().is_none() {
            return Err(ProtoError::Violation("a summary before every stream ended after Finish".into()));
        }
        let mut rec = Vec::new();
        Frame::Summary(s).encode(&mut rec);
        self.queue(rec);
        self.phase = Phase::Closed;
        Ok(())
    }

    /// This side ends the session: one `Fatal` goes out (the first abort's), nothing after it.
    pub fn abort(&mut self, code: u16, message: &[u8]) {
        if self.phase == Phase::Closed {
            return;
        }
        let mut rec = Vec::new();
        Frame::Fatal(Fatal { code, message }).encode(&mut rec);
        self.queue(rec);
        self.phase = Phase::Closed;
    }

    /// Whether the summary or a `Fatal` was queued.
    pub fn is_closed(&self) -> bool {
        self.phase == Phase::Closed
    }

    /// The next record to send on the control stream.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.out.pop_front()
    }

    /// After `Finish`: the streams' deadline ([`super::END_WAIT`]).
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.phase {
            Phase::Open => self.rules.poll_timeout(),
            Phase::Closed => None,
        }
    }

    /// `now` has come: an error if the streams did not end in time after `Finish`.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), ProtoError> {
        match self.phase {
            Phase::Open => self.rules.handle_timeout(now),
            Phase::Closed => Ok(()),
        }
    }

    fn queue(&mut self, rec: Vec<u8>) {
        if self.phase == Phase::Open {
            self.out.push_back(rec);
        }
    }
}
