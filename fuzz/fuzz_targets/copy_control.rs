//! The copy session's control-stream machines (`linerate_proto::copy`) driven by arbitrary
//! frames and clock steps: the first input byte picks the session's flags; the rest is a
//! sequence of steps (a clock advance, an offer, `Finish`, a stream's end, a keepalive, or a
//! frame for either side decoded from the input). No input may panic, a machine must keep its
//! deadlines consistent (`handle_timeout` fails exactly when `poll_timeout` has passed), and once
//! the sender's session is over it accepts nothing more. The sender's session machine
//! (`copy::sender::Sender`) takes the same steps: it never panics, and once it has handled a
//! deadline and its records were taken, its next deadline is later than now (a driver waking at
//! it never spins).
#![no_main]

use libfuzzer_sys::fuzz_target;
use linerate_proto::copy::sender::{Sender, SenderConfig};
use linerate_proto::copy::{ReceiverControl, SenderControl, SenderEvent, SenderTimeouts};
use linerate_proto::frame::{self, FileStart, Finish, Time, FLAG_DELETE, FLAG_DRY_RUN, FLAG_SYNC};
use std::time::{Duration, Instant};

const T: SenderTimeouts = SenderTimeouts { stall: Duration::from_secs(30), summary: Duration::from_secs(60) };

fuzz_target!(|data: &[u8]| {
    let Some((&first, mut rest)) = data.split_first() else { return };
    let flags = [0, FLAG_SYNC, FLAG_SYNC | FLAG_DELETE, FLAG_SYNC | FLAG_DELETE | FLAG_DRY_RUN][usize::from(first % 4)];
    let t0 = Instant::now();
    let mut now = t0;
    let mut tx = SenderControl::new(flags, 64 * 1024, T, t0);
    let mut rx = ReceiverControl::new(flags, 1 + u16::from(first >> 4), Duration::from_secs(10), t0);
    let cfg = SenderConfig { flags, chunk_size: 64 * 1024, timeouts: T, keepalive: Duration::from_secs(20) };
    let mut m = Sender::new(cfg, t0);
    let mut next_id = 0u64;
    while let Some((&op, tail)) = rest.split_first() {
        rest = tail;
        match op % 8 {
            0 => now += Duration::from_secs(u64::from(op >> 3)),
            1 => {
                tx.offered(next_id, u64::from(op) << 16, now);
                let f = FileStart {
                    id: next_id,
                    parent: 0,
                    name: b"f",
                    size: u64::from(op) << 16,
                    mode: 0,
                    mtime: Time::default(),
                    owner: Default::default(),
                };
                let _ = m.offer(f, None, now);
                if op & 8 != 0 {
                    m.keep(next_id, &[b"a".as_slice()], now);
                }
                next_id += 1;
            }
            2 => {
                let fin = Finish { files: u64::from(op >> 3), ..Finish::default() };
                tx.finish(fin, now);
                m.walk_done();
                let _ = m.finish(fin, now);
            }
            3 => {
                rx.stream_ended();
                m.writing(u16::from(op >> 3) % 4, now);
            }
            4 => {
                let _ = rx.handle_record(op & 8 == 0, now);
            }
            5 => {
                rx.working(op & 8 == 0, now);
                m.written(u16::from(op >> 4) % 4);
            }
            // A frame, to the sender (6) or the receiver (7), from the next bytes.
            _ => {
                let Some((&len, tail)) = rest.split_first() else { return };
                let len = usize::from(len).min(tail.len());
                let (bytes, tail) = tail.split_at(len);
                rest = tail;
                let Ok((f, _)) = frame::decode(bytes) else { continue };
                if op % 8 == 6 {
                    let _ = m.handle_record(bytes, now);
                    let over = tx.is_over();
                    let r = tx.handle_frame(f, now);
                    assert!(!(over && r.is_ok()), "the sender accepted a frame after the end");
                    if let Ok(SenderEvent::Want { held, .. }) = r {
                        for w in held.windows(2) {
                            assert!(w[0].0 + w[0].1 <= w[1].0, "held ranges overlap: {held:?}");
                        }
                        assert!(held.iter().all(|&(_, c)| c > 0));
                    }
                } else {
                    let _ = rx.handle_control_frame(f, now);
                }
            }
        }
        let d = tx.poll_timeout();
        assert_eq!(d.is_some_and(|d| now >= d), tx.handle_timeout(now).is_err(), "sender deadline {d:?}");
        let _ = m.handle_timeout(now);
        while m.poll_transmit(now).is_some() {}
        while m.poll_event().is_some() {}
        let d = m.poll_timeout();
        assert!(d.is_none_or(|d| d > now), "the machine's deadline {d:?} is not after now after handling it");
        let d = rx.poll_timeout();
        assert_eq!(d.is_some_and(|d| now >= d), rx.handle_timeout(now).is_err(), "receiver deadline {d:?}");
    }
});
