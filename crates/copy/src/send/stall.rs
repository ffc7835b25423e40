//! The stall watch of a sending session: when each stream's write in progress began, set and
//! cleared by the stream threads around every write ([`Watched`]) and read by the driver into
//! the session machine, which keeps the stall deadline.

use linerate_net::conn::SendHalf;
use linerate_net::EngineError;
use linerate_proto::copy::sender::Sender;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// When each stream's write in progress began, shared by the stream threads (which set and clear
/// their slot around every write) and the driver (which reads them into the machine whenever it
/// runs): the machine keeps the stall deadline (a write that makes no progress for the stall
/// timeout ends the session, instead of waiting on a dead link for the kernel's retransmission
/// limit). Atomics, not messages: a write costs two stores, not two wake-ups of the driver.
pub(super) struct Writes {
    /// When the session began; a slot holds nanoseconds since then, plus one (0: not writing).
    epoch: Instant,
    /// Slot 0 is the control stream, then the data streams.
    since: Vec<AtomicU64>,
}

impl Writes {
    pub(super) fn new(streams: usize) -> Writes {
        Writes { epoch: Instant::now(), since: (0..=streams).map(|_| AtomicU64::new(0)).collect() }
    }

    fn begin(&self, stream: u16) {
        let ns = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX - 1);
        if let Some(s) = self.since.get(usize::from(stream)) {
            s.store(ns + 1, Relaxed);
        }
    }

    fn end(&self, stream: u16) {
        if let Some(s) = self.since.get(usize::from(stream)) {
            s.store(0, Relaxed);
        }
    }

    /// Tell the machine which writes are in progress, and since when.
    pub(super) fn report(&self, m: &mut Sender) {
        for (stream, s) in (0u16..).zip(&self.since) {
            match s.load(Relaxed) {
                0 => m.written(stream),
                ns => m.writing(stream, self.epoch + Duration::from_nanos(ns - 1)),
            }
        }
    }
}

/// A stream's sending half that marks when each write begins and ends ([`Writes`]).
pub(super) struct Watched {
    tx: SendHalf,
    stream: u16,
    writes: Arc<Writes>,
}

impl Watched {
    /// `tx`, the half of stream `stream` (0: the control stream), marking its writes in `writes`.
    pub(super) fn new(tx: SendHalf, stream: u16, writes: Arc<Writes>) -> Watched {
        Watched { tx, stream, writes }
    }

    /// Seal and send `buf` ([`SendHalf::send_buf`]).
    pub(super) fn send_buf(&mut self, buf: &mut Vec<u8>) -> Result<(), EngineError> {
        self.writes.begin(self.stream);
        let r = self.tx.send_buf(buf);
        self.writes.end(self.stream);
        r
    }

    /// Send a keepalive ([`SendHalf::keepalive`]).
    pub(super) fn keepalive(&mut self) -> Result<(), EngineError> {
        self.writes.begin(self.stream);
        let r = self.tx.keepalive();
        self.writes.end(self.stream);
        r
    }
}
