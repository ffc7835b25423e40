//! The lab's link emulator without I/O: a `Shaper` driven by arbitrary packets, clock steps and
//! control changes (parsed by `emu::apply` from arbitrary words, as `lab set` sends them). It
//! must never panic, never hold more than `MAX_HELD` bytes, never release a packet before its
//! time or one it was not given, and keep its counters consistent.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use linerate_lab::emu::apply;
use linerate_lab::emu::shape::{Impairment, Shaper, MAX_HELD};

#[derive(Arbitrary, Debug)]
enum Op {
    Push { dt_us: u16, len: u16, tag: u8 },
    Pop { dt_us: u32 },
    Set(Vec<String>),
}

fuzz_target!(|input: (u64, Vec<Op>)| {
    let (seed, ops) = input;
    let mut s: Shaper<Vec<u8>> = Shaper::new(Impairment::default(), seed);
    let mut now: u64 = 0;
    let mut pushed = 0u64;
    for op in ops.iter().take(10_000) {
        match op {
            Op::Push { dt_us, len, tag } => {
                now += u64::from(*dt_us) * 1000;
                s.push(now, vec![*tag; usize::from(*len)]);
                pushed += 1;
            }
            Op::Pop { dt_us } => {
                now += u64::from(*dt_us) * 1000;
                while let Some(p) = s.pop_due(now) {
                    assert!(p.len() <= usize::from(u16::MAX));
                }
                if let Some(next) = s.next_release() {
                    assert!(next > now, "a due packet was left behind");
                }
            }
            Op::Set(words) => {
                let w: Vec<&str> = words.iter().map(String::as_str).take(16).collect();
                if let Ok(cfg) = apply(s.config().clone(), &w) {
                    assert!((0.0..=1.0).contains(&cfg.duplicate) && (0.0..=1.0).contains(&cfg.corrupt));
                    assert!(cfg.queue_bytes <= MAX_HELD);
                    s.set(cfg);
                }
            }
        }
        assert!(s.held_bytes() <= MAX_HELD);
        let c = s.counters();
        assert_eq!(c.received, pushed);
        assert!(c.passed <= c.received + c.duplicated);
        assert!(c.lost + c.down_drops + c.queue_drops + c.overflow_drops <= c.received + c.duplicated);
    }
});
