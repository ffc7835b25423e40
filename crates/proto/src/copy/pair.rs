//! A sender and a receiver machine stepped against each other in memory on a virtual clock, in
//! the manner of quinn-proto's test `Pair`: transmits are delivered after a fixed latency, and
//! the clock jumps to the earliest deadline (a delivery or either side's `poll_timeout`). Every
//! ordering rule and deadline of the copy control stream is tested here in microseconds.

use super::receiver::Receiver;
use super::sender::{Event, Sender, SenderConfig, BATCH_BYTES, BATCH_DELAY, OFFER_WINDOW};
use super::{ReceiverEvent, SenderTimeouts, END_WAIT};
use crate::frame::{
    self, FileStart, Finish, Frame, Summary, Time, FLAG_DELETE, FLAG_DRY_RUN, FLAG_SYNC, NOTE_DELETED, WANT_ALL,
    WANT_MISSING, WANT_NONE,
};
use crate::ErrorCode;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

const CS: u32 = 64 * 1024;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn ms(m: u64) -> Duration {
    Duration::from_millis(m)
}

/// How the simulated receiver answers an offer: `None` leaves it unanswered (a stalled receiver).
type Policy = Box<dyn FnMut(u64, u64) -> Option<(u8, Vec<(u64, u64)>)>>;

/// What one side put on the wire, when (as an offset from the start) and which frames.
#[derive(Debug, Clone)]
struct Sent {
    at: Duration,
    frames: Vec<String>,
    bytes: usize,
}

fn kinds(rec: &[u8]) -> Vec<String> {
    frame::frames(rec)
        .map(|f| {
            let f = f.expect("machines send well-formed frames");
            format!("{f:?}").split(|c: char| !c.is_alphanumeric()).next().unwrap_or_default().to_string()
        })
        .collect()
}

struct Pair {
    t0: Instant,
    now: Instant,
    latency: Duration,
    tx: Sender,
    rx: Receiver,
    to_rx: VecDeque<(Instant, Vec<u8>)>,
    to_tx: VecDeque<(Instant, Vec<u8>)>,
    tx_sent: Vec<Sent>,
    rx_sent: Vec<Sent>,
    tx_events: Vec<(Duration, Event)>,
    rx_events: Vec<(Duration, String)>,
    tx_error: Option<(Duration, String)>,
    rx_error: Option<(Duration, String)>,
    policy: Policy,
    /// Records that arrived at the receiver while it held them (a receiver busy elsewhere).
    held: Option<Vec<Vec<u8>>>,
}

impl Pair {
    fn new(flags: u32, keepalive: Duration, timeouts: SenderTimeouts, idle: Duration) -> Pair {
        let t0 = Instant::now();
        let cfg = SenderConfig { flags, chunk_size: CS, timeouts, keepalive };
        let mut rx = Receiver::new(flags, 1, idle, t0);
        assert!(rx.rules_mut().attach(1));
        Pair {
            t0,
            now: t0,
            latency: ms(1),
            tx: Sender::new(cfg, t0),
            rx,
            to_rx: VecDeque::new(),
            to_tx: VecDeque::new(),
            tx_sent: Vec::new(),
            rx_sent: Vec::new(),
            tx_events: Vec::new(),
            rx_events: Vec::new(),
            tx_error: None,
            rx_error: None,
            policy: Box::new(|_, _| Some((WANT_ALL, Vec::new()))),
            held: None,
        }
    }

    fn sync() -> Pair {
        Pair::new(FLAG_SYNC, secs(20), T, secs(300))
    }

    fn at(&self) -> Duration {
        self.now - self.t0
    }

    fn offer(&mut self, id: u64, size: u64) {
        let f = FileStart {
            id,
            parent: 0,
            name: b"f",
            size,
            mode: 0o644,
            mtime: Time::default(),
            owner: Default::default(),
        };
        self.tx.offer(f, None, self.now).unwrap();
    }

    /// Move every transmit onto the wire and deliver what has arrived; whether anything moved.
    fn step(&mut self) -> bool {
        let mut moved = false;
        while let Some(rec) = self.tx.poll_transmit(self.now) {
            self.tx_sent.push(Sent { at: self.at(), frames: kinds(&rec), bytes: rec.len() });
            self.to_rx.push_back((self.now + self.latency, rec));
            moved = true;
        }
        while let Some(rec) = self.rx.poll_transmit() {
            self.rx_sent.push(Sent { at: self.at(), frames: kinds(&rec), bytes: rec.len() });
            self.to_tx.push_back((self.now + self.latency, rec));
            moved = true;
        }
        while self.to_rx.front().is_some_and(|(t, _)| *t <= self.now) {
            let (_, rec) = self.to_rx.pop_front().unwrap();
            match &mut self.held {
                Some(h) => h.push(rec),
                None => self.receive(&rec),
            }
            moved = true;
        }
        while self.to_tx.front().is_some_and(|(t, _)| *t <= self.now) {
            let (_, rec) = self.to_tx.pop_front().unwrap();
            if self.tx_error.is_none() {
                if let Err(e) = self.tx.handle_record(&rec, self.now) {
                    self.tx_error = Some((self.at(), e.to_string()));
                }
            }
            moved = true;
        }
        while let Some(e) = self.tx.poll_event() {
            self.tx_events.push((self.at(), e));
            moved = true;
        }
        moved
    }

    /// What the receiving engine does with a control record: the rules, then answers.
    fn receive(&mut self, rec: &[u8]) {
        if self.rx_error.is_some() {
            return;
        }
        let at = self.at();
        let r = (|| {
            self.rx.handle_record(rec.is_empty(), self.now)?;
            for f in frame::frames(rec) {
                match self.rx.handle_control_frame(f?, self.now)? {
                    ReceiverEvent::Offer(o) => {
                        self.rx_events.push((at, format!("Offer {}", o.file.id)));
                        if let Some((verdict, have)) = (self.policy)(o.file.id, o.file.size) {
                            self.rx.answer(o.file.id, verdict, &have)?;
                        } else {
                            // A receiver that never answers also never ends the record.
                            return Ok(());
                        }
                    }
                    ReceiverEvent::Keep(k) => self.rx_events.push((at, format!("Keep {} {}", k.dir, k.names.len()))),
                    ReceiverEvent::HardLink(l) => self.rx_events.push((at, format!("HardLink {} {}", l.kind, l.file))),
                    ReceiverEvent::Finish(f) => self.rx_events.push((at, format!("Finish {}", f.files))),
                    ReceiverEvent::Fatal(f) => self.rx_events.push((at, format!("Fatal {}", f.code))),
                    ReceiverEvent::IdName(n) => self.rx_events.push((at, format!("IdName {}", n.id))),
                }
            }
            self.rx.end_record()
        })();
        if let Err(e) = r {
            self.rx_error = Some((at, e.to_string()));
        }
    }

    /// Step until quiet, then jump the clock to the next delivery or deadline, until `limit`
    /// (from the start) or until neither side has anything left to wait for.
    fn drive_until(&mut self, limit: Duration) {
        let mut wakes = 0u32;
        loop {
            while self.step() {}
            // A machine whose deadline does not move past a handled `now` would spin its driver.
            wakes += 1;
            assert!(wakes < 100_000, "the driver spins at {:?}", self.at());
            let next = [
                self.to_rx.front().map(|(t, _)| *t),
                self.to_tx.front().map(|(t, _)| *t),
                self.tx.poll_timeout().filter(|_| self.tx_error.is_none()),
                self.rx.poll_timeout().filter(|_| self.rx_error.is_none()),
            ]
            .into_iter()
            .flatten()
            .min();
            let Some(next) = next.filter(|&t| t <= self.t0 + limit) else {
                self.now = self.now.max(self.t0 + limit);
                return;
            };
            self.now = self.now.max(next);
            if self.tx_error.is_none() {
                if let Err(e) = self.tx.handle_timeout(self.now) {
                    self.tx_error = Some((self.at(), e.to_string()));
                }
            }
            if self.rx_error.is_none() {
                if let Err(e) = self.rx.handle_timeout(self.now) {
                    self.rx_error = Some((self.at(), e.to_string()));
                }
            }
        }
    }

    fn keepalives(&self) -> Vec<Duration> {
        self.tx_sent.iter().filter(|s| s.frames.is_empty()).map(|s| s.at).collect()
    }

    fn settled(&self) -> bool {
        self.tx_events.iter().any(|(_, e)| *e == Event::Settled)
    }
}

const T: SenderTimeouts = SenderTimeouts { stall: Duration::from_secs(300), summary: Duration::from_secs(600) };

fn fin(files: u64) -> Finish {
    Finish { files, bytes: files * 10, dirs: 0, links: 0 }
}

#[test]
fn keepalives_go_out_after_each_silence_of_the_cadence_and_stop_at_finish() {
    let mut p = Pair::sync();
    p.drive_until(secs(65));
    assert_eq!(p.keepalives(), [secs(20), secs(40), secs(60)]);
    // A record with frames is not silence: the next keepalive comes 20 s after it.
    p.offer(1, 10);
    p.drive_until(secs(100));
    let offered = secs(65) + BATCH_DELAY;
    assert_eq!(p.tx_sent.iter().find(|s| !s.frames.is_empty()).unwrap().at, offered);
    assert_eq!(p.keepalives()[3..], [offered + secs(20)]);
    // The receiver's answer does not move the sender's cadence: only what it sends does.
    assert!(p.tx_events.iter().any(|(at, e)| matches!(e, Event::Want { file: 1, .. }) && *at == offered + ms(2)));
    p.tx.walk_done();
    p.tx.finish(fin(1), p.now).unwrap();
    p.drive_until(secs(500));
    assert_eq!(p.keepalives().len(), 4, "no keepalive after Finish");
    assert_eq!(p.tx_sent.last().unwrap().frames, ["Finish"]);
}

#[test]
fn offers_are_batched_into_one_record_that_waits_at_most_20_ms() {
    let mut p = Pair::sync();
    for id in 0..3 {
        p.offer(id, 10);
        p.now += ms(5);
    }
    assert!(p.tx.poll_transmit(p.now).is_none(), "a batch waits for more");
    p.drive_until(secs(1));
    assert_eq!(p.tx_sent[0].at, BATCH_DELAY, "20 ms after its first offer");
    assert_eq!(p.tx_sent[0].frames, ["Offer", "Offer", "Offer"]);
    // The receiver answers the record's offers in one record, in order.
    assert_eq!(p.rx_sent.len(), 1);
    assert_eq!(p.rx_sent[0].frames, ["Want", "Want", "Want"]);
    let files: Vec<u64> = p
        .tx_events
        .iter()
        .filter_map(|(_, e)| if let Event::Want { file, .. } = e { Some(*file) } else { None })
        .collect();
    assert_eq!(files, [0, 1, 2]);
}

#[test]
fn a_full_batch_or_a_full_window_goes_out_at_once() {
    let mut p = Pair::sync();
    let name = vec![b'n'; 255];
    let mut id = 0;
    while p.tx_sent.is_empty() {
        let f = FileStart {
            id,
            parent: 0,
            name: &name,
            size: 1,
            mode: 0o644,
            mtime: Time::default(),
            owner: Default::default(),
        };
        p.tx.offer(f, None, p.now).unwrap();
        id += 1;
        p.step();
    }
    assert_eq!(p.tx_sent[0].at, Duration::ZERO, "a batch of 256 KiB does not wait");
    assert!(p.tx_sent[0].bytes >= BATCH_BYTES && p.tx_sent[0].bytes < BATCH_BYTES + 400);
    // A receiver that does not answer: the window fills, and what fills it goes out at once.
    let mut p = Pair::sync();
    p.policy = Box::new(|_, _| None);
    for id in 0..OFFER_WINDOW as u64 {
        assert!(p.tx.can_offer());
        p.offer(id, 10);
    }
    assert!(!p.tx.can_offer(), "the window is full");
    assert!(p
        .tx
        .offer(
            FileStart {
                id: 9999,
                parent: 0,
                name: b"x",
                size: 1,
                mode: 0,
                mtime: Time::default(),
                owner: Default::default()
            },
            None,
            p.now
        )
        .is_err());
    p.step();
    assert_eq!(p.tx_sent.iter().map(|s| s.frames.len()).sum::<usize>(), OFFER_WINDOW);
    assert_eq!(p.tx_sent.last().unwrap().at, Duration::ZERO);
}

#[test]
fn answers_open_the_window_and_the_walk_settles_when_every_offer_is_answered() {
    let mut p = Pair::sync();
    for id in 0..OFFER_WINDOW as u64 {
        p.offer(id, 10);
    }
    assert!(!p.tx.can_offer());
    p.drive_until(ms(10));
    assert!(p.tx.can_offer() && p.tx.open_offers() == 0);
    assert!(!p.settled(), "the walk goes on");
    p.offer(5000, 10);
    p.tx.walk_done();
    assert!(!p.settled(), "an offer is open");
    assert!(p.tx.finish(fin(0), p.now).is_err(), "no Finish while an offer is open");
    p.drive_until(ms(20));
    assert!(p.settled());
    // A session without sync settles as soon as its walk ends.
    let mut plain = Pair::new(0, secs(20), T, secs(300));
    plain.tx.walk_done();
    plain.step();
    assert!(plain.settled());
}

#[test]
fn unanswered_offers_expire_at_the_stall_timeout_and_every_answer_restarts_it() {
    let stall = SenderTimeouts { stall: secs(3), summary: secs(600) };
    // A receiver that answers each offer 2.5 s after it went out, offers every 1.5 s: for 15 s
    // some offer is always open, yet every answer restarts the wait, so it never stalls.
    let mut p = Pair::new(FLAG_SYNC, ms(500), stall, secs(300));
    p.latency = ms(1250);
    for i in 0..10u32 {
        p.offer(u64::from(i), 10);
        p.drive_until(ms(1500) * (i + 1));
        assert!(p.tx.open_offers() > 0);
    }
    p.drive_until(secs(20));
    assert_eq!(p.tx.open_offers(), 0, "every offer answered");
    assert!(p.tx_error.is_none(), "{:?}", p.tx_error);
    // The same receiver with the sender's limit below its answer time: stalled at 3 s.
    let tight = SenderTimeouts { stall: secs(2), summary: secs(600) };
    let mut p = Pair::new(FLAG_SYNC, ms(500), tight, secs(300));
    p.latency = ms(1250);
    p.offer(0, 10);
    p.drive_until(secs(10));
    // (Counted from the offer itself, not from when its batch went out.)
    assert_eq!(p.tx_error.clone().unwrap().0, secs(2));
    let answered = std::rc::Rc::new(std::cell::Cell::new(0u32));
    // A stalled one: the sender gives up 3 s after the first unanswered offer went out, however
    // many keepalives it sent meanwhile.
    let seen = answered.clone();
    let mut p = Pair::new(FLAG_SYNC, ms(500), stall, secs(300));
    p.policy = Box::new(move |_, _| {
        seen.set(seen.get() + 1);
        None
    });
    p.now += secs(1);
    p.offer(1, 10);
    p.now += secs(1);
    p.offer(2, 10);
    p.drive_until(secs(60));
    let (at, why) = p.tx_error.clone().expect("the sender must give up");
    assert_eq!(at, secs(4));
    assert_eq!(why, "no answer to the open offers within 3 s");
    assert_eq!(answered.get(), 1, "the stalled receiver saw the first offer");
    assert!(p.tx.is_over() && p.tx.poll_timeout().is_none(), "nothing is left to wait for");
}

#[test]
fn the_summary_is_due_within_its_limit_after_finish_and_ends_the_session() {
    let timeouts = SenderTimeouts { stall: secs(300), summary: secs(600) };
    let mut p = Pair::new(0, secs(20), timeouts, secs(300));
    assert!(p.tx.finish(fin(1), p.now).is_err(), "no Finish before the walk ended");
    p.tx.walk_done();
    p.now += secs(7);
    p.tx.finish(fin(1), p.now).unwrap();
    p.drive_until(secs(8));
    assert!(p.rx_events.iter().any(|(_, e)| e == "Finish 1"));
    assert!(p.rx.summary_due().is_none(), "the data stream has not ended");
    assert!(p.rx.summary(Summary::default()).is_err());
    // The stream ends; the summary goes, and ends the session.
    p.rx.rules_mut().stream_ended();
    let s = Summary { files: 1, bytes: 10, ..Summary::default() };
    p.rx.summary(s).unwrap();
    p.drive_until(secs(2000));
    assert_eq!(p.tx_events.last().unwrap().1, Event::Summary(s));
    assert!(p.tx.is_over() && p.tx_error.is_none());
    // A receiver that never summarizes: the sender gives up 600 s after Finish.
    let mut p = Pair::new(0, secs(20), timeouts, secs(300));
    p.tx.walk_done();
    p.tx.finish(fin(1), p.now).unwrap();
    p.drive_until(secs(5000));
    assert_eq!(
        p.tx_error.clone().unwrap(),
        (secs(600), "no summary from the receiver after the end within 600 s".into())
    );
    // ... while the receiver gives its streams 120 s to end after Finish.
    assert_eq!(
        p.rx_error.unwrap(),
        (END_WAIT + p.latency, "protocol violation: data streams did not end after Finish".into())
    );
}

#[test]
fn a_receiver_fed_only_keepalives_ends_the_session_at_its_idle_timeout() {
    let mut p = Pair::new(FLAG_SYNC, ms(250), T, secs(3));
    p.drive_until(secs(10));
    let (at, why) = p.rx_error.clone().unwrap();
    // The first keepalive at or after 3 s of no progress (arriving 1 ms after it left).
    assert_eq!(at, secs(3) + p.latency);
    assert!(why.contains("nothing but keepalives for 3 s"), "{why}");
    // A record with frames is progress: the idle time counts from its arrival.
    let mut p = Pair::new(FLAG_SYNC, ms(250), T, secs(3));
    p.now += secs(1);
    p.offer(1, 10);
    p.drive_until(secs(10));
    let offer_arrived = secs(1) + BATCH_DELAY + p.latency;
    assert_eq!(p.rx_error.unwrap().0, offer_arrived + secs(3));
    // A receiver busy with its own work (hashing) takes the sender's keepalives meanwhile.
    let mut p = Pair::new(FLAG_SYNC, ms(250), T, secs(3));
    p.rx.rules_mut().working(true, p.now);
    p.drive_until(secs(30));
    assert!(p.rx_error.is_none());
    p.rx.rules_mut().working(false, p.now);
    p.drive_until(secs(40));
    assert_eq!(p.rx_error.unwrap().0, secs(33) + p.latency);
}

#[test]
fn a_fatal_from_either_side_ends_the_session_and_nothing_follows_it() {
    // The receiver ends it: the sender learns why, stops its keepalives and deadlines.
    let mut p = Pair::sync();
    p.offer(1, 10);
    p.policy = Box::new(|_, _| None);
    p.drive_until(secs(1));
    p.rx.abort(ErrorCode::Limit as u16, b"disk full");
    p.rx.report(ErrorCode::Io as u16, b"late", b"after the end");
    p.rx.abort(ErrorCode::Protocol as u16, b"second");
    p.drive_until(secs(2000));
    assert_eq!(p.rx_sent.iter().map(|s| s.frames.clone()).collect::<Vec<_>>(), [["Fatal"]], "one Fatal, then nothing");
    assert_eq!(
        p.tx_events.last().unwrap().1,
        Event::Fatal { code: ErrorCode::Limit as u16, message: b"disk full".to_vec() }
    );
    assert!(p.tx.is_over() && p.tx.poll_timeout().is_none() && p.tx_error.is_none());
    assert!(p.keepalives().len() <= 1);
    // The sender ends it (its user pressed Ctrl-C): what was batched is dropped, one Fatal goes.
    let mut p = Pair::sync();
    p.policy = Box::new(|_, _| None);
    p.offer(1, 10);
    p.drive_until(secs(1));
    p.offer(2, 10);
    p.tx.abort(ErrorCode::Interrupted as u16, b"interrupted");
    p.tx.abort(ErrorCode::Interrupted as u16, b"twice");
    p.drive_until(secs(2000));
    assert_eq!(p.tx_sent.iter().map(|s| s.frames.clone()).collect::<Vec<_>>(), [vec!["Offer"], vec!["Fatal"]]);
    assert!(p.tx_error.is_none(), "an aborted sender waits for no answer");
    // (The stalled receiver of this pair reads no more; one that does takes the Fatal.)
    let mut rx = Receiver::new(FLAG_SYNC, 1, secs(300), p.now);
    let mut rec = Vec::new();
    Frame::Fatal(frame::Fatal { code: ErrorCode::Interrupted as u16, message: b"interrupted" }).encode(&mut rec);
    let f = frame::frames(&rec).next().unwrap().unwrap();
    assert!(matches!(rx.handle_control_frame(f.clone(), p.now), Ok(ReceiverEvent::Fatal(_))));
    // After Finish the receiver reads its control stream no more: a Fatal then breaks the rules.
    let mut rx = Receiver::new(FLAG_SYNC, 1, secs(300), p.now);
    rx.handle_control_frame(Frame::Finish(fin(0)), p.now).unwrap();
    assert!(rx.handle_control_frame(f, p.now).is_err());
    // A broken rule ends it on the side that saw it: a Want nobody asked for.
    let mut p = Pair::sync();
    let mut scratch = Vec::new();
    let mut rec = Vec::new();
    let have = frame::Ranges::encode(&[], &mut scratch);
    Frame::Want(frame::Want { file: 42, verdict: WANT_ALL, have }).encode(&mut rec);
    let e = p.tx.handle_record(&rec, p.now).unwrap_err();
    assert!(e.to_string().contains("no open offer"), "{e}");
    assert!(p.tx.is_over() && p.tx.poll_timeout().is_none());
}

#[test]
fn the_receiver_answers_each_record_in_order_and_completely() {
    let mut rx = Receiver::new(FLAG_SYNC, 1, secs(300), Instant::now());
    let now = Instant::now();
    let mut rec = Vec::new();
    for id in [4, 2] {
        let file = FileStart {
            id,
            parent: 0,
            name: b"f",
            size: 1,
            mode: 0,
            mtime: Time::default(),
            owner: Default::default(),
        };
        Frame::Offer(frame::Offer { file, digest: None }).encode(&mut rec);
    }
    for f in frame::frames(&rec) {
        rx.handle_control_frame(f.unwrap(), now).unwrap();
    }
    assert!(rx.answer(2, WANT_ALL, &[]).is_err(), "4 comes first");
    rx.answer(4, WANT_NONE, &[]).unwrap();
    assert!(rx.end_record().is_err(), "2 is unanswered");
    assert!(rx.poll_transmit().is_none(), "a half-answered record sends nothing");
}

/// A whole sync session with `--delete`: listings and offers batched, a resumed file, a slow
/// receiver whose own work keeps keepalives acceptable, a deletion reported, `Finish`, the
/// stream's end, the summary. Stepped on the virtual clock over 400 s in microseconds.
#[test]
fn a_whole_session_runs_between_the_two_machines() {
    let flags = FLAG_SYNC | FLAG_DELETE;
    let mut p = Pair::new(flags, secs(20), T, secs(300));
    p.policy = Box::new(|id, _| Some(if id == 1 { (WANT_MISSING, vec![(0, 1), (2, 1)]) } else { (WANT_ALL, vec![]) }));
    p.tx.keep(1, &[b"a".as_slice(), b"b"], p.now);
    p.offer(0, 10);
    p.offer(1, 3 * u64::from(CS));
    p.drive_until(ms(100));
    assert_eq!(p.tx_sent[0].frames, ["Keep", "Offer", "Offer"]);
    assert_eq!(p.rx_events.iter().map(|(_, e)| e.as_str()).collect::<Vec<_>>(), ["Keep 1 2", "Offer 0", "Offer 1"]);
    let held: Vec<_> = p
        .tx_events
        .iter()
        .filter_map(|(_, e)| if let Event::Want { file, held, .. } = e { Some((*file, held.clone())) } else { None })
        .collect();
    assert_eq!(held, [(0, vec![]), (1, vec![(0, 1), (2, 1)])]);
    // The receiver works on something for 350 s; the sender's keepalives meanwhile are fine.
    p.rx.rules_mut().working(true, p.now);
    p.drive_until(secs(350));
    p.rx.rules_mut().working(false, p.now);
    assert!(p.rx_error.is_none());
    assert_eq!(p.keepalives().len(), 17);
    p.rx.note(NOTE_DELETED, b"old");
    p.tx.walk_done();
    p.drive_until(secs(351));
    assert!(p.settled());
    assert!(p.tx_events.iter().any(|(_, e)| *e == Event::Note { kind: NOTE_DELETED, path: b"old".to_vec() }));
    p.tx.finish(fin(2), p.now).unwrap();
    p.drive_until(secs(352));
    p.rx.rules_mut().stream_ended();
    let s = Summary { files: 2, bytes: 20, ..Summary::default() };
    p.rx.summary(s).unwrap();
    p.drive_until(secs(400));
    assert_eq!(p.tx_events.last().unwrap().1, Event::Summary(s));
    assert!(p.tx_error.is_none() && p.rx_error.is_none());
    assert!(p.tx.poll_timeout().is_none() && p.rx.poll_timeout().is_none());
    // A dry run's receiver may report only what it would delete.
    let mut dry = Pair::new(flags | FLAG_DRY_RUN, secs(20), T, secs(300));
    dry.rx.note(NOTE_DELETED, b"old");
    dry.drive_until(secs(1));
    assert!(dry.tx_error.unwrap().1.contains("did not ask for"));
}

#[test]
fn a_write_that_makes_no_progress_for_the_stall_timeout_ends_the_session() {
    let stall = SenderTimeouts { stall: secs(3), summary: secs(600) };
    let mut p = Pair::new(0, secs(20), stall, secs(300));
    // Data stream 2 writes records of a second each, for a minute: never a stall.
    for i in 0..60u32 {
        p.tx.writing(2, p.now);
        p.drive_until(secs(1) * i + ms(999));
        p.tx.written(2);
    }
    assert!(p.tx_error.is_none(), "{:?}", p.tx_error);
    // Then one write blocks (a dead link), while the control stream's keepalives still go out.
    p.tx.writing(1, p.now);
    let blocked = p.at();
    p.drive_until(secs(600));
    let (at, why) = p.tx_error.clone().unwrap();
    assert_eq!(at, blocked + secs(3));
    assert_eq!(why, "no progress sending to the receiver within 3 s");
    assert!(p.tx.is_over() && p.tx.poll_timeout().is_none());
}

#[test]
fn hard_links_travel_in_order_with_the_offers_in_a_sync_session_with_the_flag_only() {
    use crate::frame::{HardLink, FLAG_HARD_LINKS, LINK_NAME, LINK_TARGET};
    let mut p = Pair::new(FLAG_SYNC | FLAG_HARD_LINKS, secs(20), T, secs(300));
    p.tx.hard_link(HardLink { kind: LINK_TARGET, file: 3, parent: 0, name: b"" }, p.now).unwrap();
    p.offer(3, 10);
    p.tx.hard_link(HardLink { kind: LINK_NAME, file: 3, parent: 0, name: b"again" }, p.now).unwrap();
    p.drive_until(ms(100));
    assert_eq!(p.tx_sent[0].frames, ["HardLink", "Offer", "HardLink"]);
    let seen: Vec<_> = p.rx_events.iter().map(|(_, e)| e.as_str()).collect();
    assert_eq!(seen, ["HardLink 0 3", "Offer 3", "HardLink 1 3"]);
    assert!(p.rx_error.is_none());
    // Without the flag the receiver refuses them; without sync the sender does not send them here.
    let mut plain = Pair::sync();
    plain.tx.hard_link(HardLink { kind: LINK_NAME, file: 3, parent: 0, name: b"x" }, plain.now).unwrap();
    plain.drive_until(ms(100));
    assert!(plain.rx_error.unwrap().1.contains("not allowed on the control stream"));
    let mut tx = Sender::new(
        SenderConfig { flags: FLAG_HARD_LINKS, chunk_size: CS, timeouts: T, keepalive: secs(20) },
        plain.now,
    );
    assert!(tx.hard_link(HardLink { kind: LINK_NAME, file: 3, parent: 0, name: b"x" }, plain.now).is_err());
}
