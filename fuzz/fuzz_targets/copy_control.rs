//! The copy session's control-stream machines (`linerate_proto::copy`) driven by arbitrary
//! frames and clock steps: the first input byte picks the session's flags; the rest is a
//! sequence of steps (a clock advance, an offer, `Finish`, a stream's end, a keepalive, or a
//! frame for either side decoded from the input). No input may panic, a machine must keep its
//! deadlines consistent (`handle_timeout` fails exactly when `poll_timeout` has passed), and once
//! the sender's session is over it accepts nothing more.
#![no_main]

use libfuzzer_sys::fuzz_target;
use linerate_proto::copy::{ReceiverControl, SenderControl, SenderEvent, SenderTimeouts};
use linerate_proto::frame::{self, Finish, FLAG_DELETE, FLAG_DRY_RUN, FLAG_SYNC};
use std::time::{Duration, Instant};

const T: SenderTimeouts = SenderTimeouts { stall: Duration::from_secs(30), summary: Duration::from_secs(60) };

fuzz_target!(|data: &[u8]| {
    let Some((&first, mut rest)) = data.split_first() else { return };
    let flags = [0, FLAG_SYNC, FLAG_SYNC | FLAG_DELETE, FLAG_SYNC | FLAG_DELETE | FLAG_DRY_RUN][usize::from(first % 4)];
    let t0 = Instant::now();
    let mut now = t0;
    let mut tx = SenderControl::new(flags, 64 * 1024, T, t0);
    let mut rx = ReceiverControl::new(flags, 1 + u16::from(first >> 4), Duration::from_secs(10), t0);
    let mut next_id = 0u64;
    while let Some((&op, tail)) = rest.split_first() {
        rest = tail;
        match op % 8 {
            0 => now += Duration::from_secs(u64::from(op >> 3)),
            1 => {
                tx.offered(next_id, u64::from(op) << 16, now);
                next_id += 1;
            }
            2 => tx.finish(Finish { files: u64::from(op >> 3), ..Finish::default() }, now),
            3 => rx.stream_ended(),
            4 => {
                let _ = rx.handle_record(op & 8 == 0, now);
            }
            5 => rx.working(op & 8 == 0, now),
            // A frame, to the sender (6) or the receiver (7), from the next bytes.
            _ => {
                let Some((&len, tail)) = rest.split_first() else { return };
                let len = usize::from(len).min(tail.len());
                let (bytes, tail) = tail.split_at(len);
                rest = tail;
                let Ok((f, _)) = frame::decode(bytes) else { continue };
                if op % 8 == 6 {
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
        let d = rx.poll_timeout();
        assert_eq!(d.is_some_and(|d| now >= d), rx.handle_timeout(now).is_err(), "receiver deadline {d:?}");
    }
});
