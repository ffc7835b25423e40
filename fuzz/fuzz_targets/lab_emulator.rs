//! The lab's link emulator without I/O: a `Shaper` driven by arbitrary frames (raw, or TCP
//! super-packets with arbitrary headers and segment sizes, as a TAP hands them over), clock
//! steps and control changes (parsed by `emu::apply` from arbitrary words, as `lab set` sends
//! them). It must never panic, never hold more than `MAX_HELD` bytes, never release a packet
//! before its time, cut a super-packet into wire packets whose lengths add up to its own, and
//! keep its counters consistent.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use linerate_lab::emu::apply;
use linerate_lab::emu::shape::{Impairment, Packet, Shaper, MAX_HELD};
use linerate_lab::emu::wire::Frame;

#[derive(Arbitrary, Debug)]
enum Op {
    Push { dt_us: u16, bytes: Vec<u8> },
    Tcp { dt_us: u16, v6: bool, mss: u16, payload: u16, vnet: [u8; 12], ip: [u8; 40], tcp: [u8; 60] },
    Pop { dt_us: u32 },
    Set(Vec<String>),
}

/// A frame with a consistent Ethernet type and IP lengths around arbitrary header bytes.
fn super_packet(v6: bool, mss: u16, payload: u16, vnet: [u8; 12], ip: [u8; 40], tcp: [u8; 60]) -> Vec<u8> {
    let mut f = vnet.to_vec();
    f[1] = if v6 { 4 } else { 1 };
    f[4..6].copy_from_slice(&mss.to_ne_bytes());
    f.extend_from_slice(&[0; 12]);
    f.extend_from_slice(if v6 { &[0x86, 0xdd] } else { &[0x08, 0x00] });
    let doff = usize::from(tcp[12] >> 4).max(5) * 4;
    let l4_len = doff + usize::from(payload);
    let mut ip = ip;
    if v6 {
        ip[0] = 0x60;
        ip[4..6].copy_from_slice(&(l4_len as u16).to_be_bytes());
        ip[6] = 6;
        f.extend_from_slice(&ip);
    } else {
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&((20 + l4_len).min(65_535) as u16).to_be_bytes());
        ip[6] &= 0x40;
        ip[7] = 0;
        ip[9] = 6;
        f.extend_from_slice(&ip[..20]);
    }
    f.extend_from_slice(&tcp[..doff]);
    f.resize(f.len() + usize::from(payload), 0xa5);
    f
}

fuzz_target!(|input: (u64, Vec<Op>)| {
    let (seed, ops) = input;
    let mut s: Shaper<Frame> = Shaper::new(Impairment::default(), seed);
    let mut now: u64 = 0;
    let mut pushed = 0u64;
    for op in ops.iter().take(10_000) {
        let frame = match op {
            Op::Push { dt_us, bytes } => Some((dt_us, Frame::new(bytes.clone()))),
            Op::Tcp { dt_us, v6, mss, payload, vnet, ip, tcp } => {
                Some((dt_us, Frame::new(super_packet(*v6, *mss, *payload, *vnet, *ip, *tcp))))
            }
            _ => None,
        };
        match (frame, op) {
            (Some((dt_us, f)), _) => {
                now += u64::from(*dt_us) * 1000;
                let parts = f.clone().split();
                assert_eq!(parts.len(), f.segments());
                assert_eq!(parts.iter().map(Packet::wire_len).sum::<usize>(), f.wire_len());
                pushed += f.segments() as u64;
                s.push(now, f);
            }
            (None, Op::Pop { dt_us }) => {
                now += u64::from(*dt_us) * 1000;
                while let Some(p) = s.pop_due(now) {
                    assert!(p.bytes().len() <= 1 << 20);
                }
                if let Some(next) = s.next_release() {
                    assert!(next > now, "a due packet was left behind");
                }
            }
            (None, Op::Set(words)) => {
                let w: Vec<&str> = words.iter().map(String::as_str).take(16).collect();
                if let Ok(cfg) = apply(s.config().clone(), &w) {
                    assert!((0.0..=1.0).contains(&cfg.duplicate) && (0.0..=1.0).contains(&cfg.corrupt));
                    assert!(cfg.queue_bytes <= MAX_HELD);
                    s.set(cfg);
                }
            }
            (None, _) => {}
        }
        assert!(s.held_bytes() <= MAX_HELD);
        let c = s.counters();
        assert_eq!(c.received, pushed);
        assert!(c.passed <= c.received + c.duplicated);
        assert!(c.lost + c.down_drops + c.queue_drops + c.overflow_drops <= c.received + c.duplicated);
    }
});
