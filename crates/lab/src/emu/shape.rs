//! One direction of an emulated link, without I/O: what netem does to packets, as a state
//! machine fed `(now, packet)` and polled for packets whose time has come.
//!
//! A packet may stand for several wire packets (a TCP super-packet, [`Packet::segments`]): the
//! rate charges all their bytes, and the per-packet draws below are made for each of them; if
//! any hits, the packet is cut ([`Packet::split`]) and each part goes on with its own draws, or
//! else it goes on whole.
//!
//! Stages, in order: the link is down (everything dropped); loss (random, or Gilbert–Elliott
//! bursts); corruption (one bit flipped past the headers the caller names); duplication; the
//! rate with its queue limit (a FIFO serialiser: a packet departs `len × 8 / rate` after the one
//! before it, and is tail-dropped if the backlog would pass the limit); then the delay line:
//! release = departure + delay + jitter, never before an earlier packet's release unless the
//! packet is picked for reordering (then it is released at its departure, ahead of the others).
//! Time is in nanoseconds from any origin; randomness comes from a seeded generator, so a test
//! on a virtual clock sees the same packets every time.

use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Most bytes the delay line holds (10 Gbit/s × 200 ms is 250 MB); past it packets are dropped.
pub const MAX_HELD: u64 = 256 << 20;

/// How jitter is drawn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dist {
    /// Normal, mean 0, standard deviation = the jitter (cut at ±4 σ), as netem's default table.
    #[default]
    Normal,
    /// Uniform over ±jitter.
    Uniform,
}

/// Which packets are lost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "model")]
pub enum Loss {
    /// None.
    #[default]
    None,
    /// Each packet independently, with this probability (0..=1).
    Random {
        /// Probability.
        p: f64,
    },
    /// Gilbert–Elliott: a good and a bad state; `p` the chance to go bad after a packet, `r` to
    /// recover; `bad` and `good` the loss probability in each state.
    GilbertElliott {
        /// Good → bad.
        p: f64,
        /// Bad → good.
        r: f64,
        /// Loss probability in the bad state.
        bad: f64,
        /// Loss probability in the good state.
        good: f64,
    },
}

impl Loss {
    /// `rate` of the packets lost in bursts of `burst` packets on average (Gilbert–Elliott with
    /// every packet lost in the bad state and none in the good one); random if `burst` ≤ 1.
    pub fn bursty(rate: f64, burst: f64) -> Loss {
        if rate <= 0.0 {
            return Loss::None;
        }
        if burst <= 1.0 || rate >= 1.0 {
            return Loss::Random { p: rate.min(1.0) };
        }
        let r = 1.0 / burst;
        Loss::GilbertElliott { p: (rate * r / (1.0 - rate)).min(1.0), r, bad: 1.0, good: 0.0 }
    }
}

/// What one direction does to its packets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Impairment {
    /// Whether packets pass at all (`false`: a cut link).
    pub up: bool,
    /// One-way delay, ns.
    pub delay_ns: u64,
    /// Jitter, ns (standard deviation for `Normal`).
    pub jitter_ns: u64,
    /// How jitter is drawn.
    pub dist: Dist,
    /// Loss.
    pub loss: Loss,
    /// Probability that a packet skips the delay line's order (0..=1).
    pub reorder: f64,
    /// Probability that a packet is sent twice.
    pub duplicate: f64,
    /// Probability that one bit of a packet is flipped.
    pub corrupt: f64,
    /// Rate of the serialiser, bit/s (`None`: no rate here).
    pub rate_bps: Option<u64>,
    /// Most bytes waiting for the serialiser (tail drop past it).
    pub queue_bytes: u64,
}

impl Default for Impairment {
    fn default() -> Self {
        Impairment {
            up: true,
            delay_ns: 0,
            jitter_ns: 0,
            dist: Dist::Normal,
            loss: Loss::None,
            reorder: 0.0,
            duplicate: 0.0,
            corrupt: 0.0,
            rate_bps: None,
            queue_bytes: MAX_HELD,
        }
    }
}

impl Impairment {
    /// Whether anything is drawn for each wire packet (loss, reordering, duplication, corruption):
    /// then a super-packet's wire packets are drawn for one by one, and it is cut when one is hit.
    pub fn per_packet(&self) -> bool {
        self.loss != Loss::None || self.reorder > 0.0 || self.duplicate > 0.0 || self.corrupt > 0.0
    }
}

/// What happened to a direction's packets so far (a type of the lab document).
pub use linerate_model::doc::lab::EmuCounters as Counters;

/// A packet as the shaper sees it.
pub trait Packet: Clone {
    /// Its length in bytes (what the rate charges).
    fn wire_len(&self) -> usize;
    /// Flip bit `bit` of what lies past the headers (`bit` < 8 × that length; nothing if none).
    fn flip(&mut self, bit: usize);
    /// How many bytes past the headers may be corrupted.
    fn body_len(&self) -> usize;
    /// How many wire packets it stands for (counted, and drawn for, one by one).
    fn segments(&self) -> usize {
        1
    }
    /// Those wire packets, in order (`segments()` of them).
    fn split(self) -> Vec<Self> {
        vec![self]
    }
}

/// What the draws decided for one wire packet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Fate {
    lost: bool,
    corrupt: bool,
    duplicate: bool,
    reorder: bool,
}

impl Packet for Vec<u8> {
    fn wire_len(&self) -> usize {
        self.as_slice().len()
    }
    fn flip(&mut self, bit: usize) {
        if let Some(b) = self.get_mut(bit / 8) {
            *b ^= 1 << (bit % 8);
        }
    }
    fn body_len(&self) -> usize {
        self.as_slice().len()
    }
}

struct Held<P> {
    release: u64,
    seq: u64,
    pkt: P,
}

impl<P> PartialEq for Held<P> {
    fn eq(&self, o: &Self) -> bool {
        (self.release, self.seq) == (o.release, o.seq)
    }
}
impl<P> Eq for Held<P> {}
impl<P> PartialOrd for Held<P> {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl<P> Ord for Held<P> {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.release, self.seq).cmp(&(o.release, o.seq))
    }
}

/// One direction of an emulated link.
pub struct Shaper<P> {
    cfg: Impairment,
    rng: fastrand::Rng,
    bad: bool,
    /// When the serialiser is free again.
    busy_until: u64,
    /// The latest release of a packet that kept its order.
    last_release: u64,
    seq: u64,
    held: BinaryHeap<Reverse<Held<P>>>,
    held_bytes: u64,
    n: Counters,
}

impl<P: Packet> Shaper<P> {
    /// A shaper doing `cfg`, its randomness from `seed`.
    pub fn new(cfg: Impairment, seed: u64) -> Self {
        Shaper {
            cfg,
            rng: fastrand::Rng::with_seed(seed),
            bad: false,
            busy_until: 0,
            last_release: 0,
            seq: 0,
            held: BinaryHeap::new(),
            held_bytes: 0,
            n: Counters::default(),
        }
    }

    /// What it does now.
    pub fn config(&self) -> &Impairment {
        &self.cfg
    }

    /// Change what it does, from the next packet on (packets already held keep their times).
    pub fn set(&mut self, cfg: Impairment) {
        self.cfg = cfg;
    }

    /// The counters so far.
    pub fn counters(&self) -> Counters {
        self.n
    }

    /// Bytes held in the delay line now.
    pub fn held_bytes(&self) -> u64 {
        self.held_bytes
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (p >= 1.0 || self.rng.f64() < p)
    }

    fn lost(&mut self) -> bool {
        match self.cfg.loss {
            Loss::None => false,
            Loss::Random { p } => self.chance(p),
            Loss::GilbertElliott { p, r, bad, good } => {
                let lost = if self.bad { self.chance(bad) } else { self.chance(good) };
                self.bad = if self.bad { !self.chance(r) } else { self.chance(p) };
                lost
            }
        }
    }

    fn jitter(&mut self) -> i64 {
        let j = self.cfg.jitter_ns as f64;
        if j <= 0.0 {
            return 0;
        }
        let x = match self.cfg.dist {
            Dist::Uniform => (self.rng.f64() * 2.0 - 1.0) * j,
            Dist::Normal => {
                // Box–Muller on two uniforms in (0, 1].
                let (u1, u2) = (1.0 - self.rng.f64(), self.rng.f64());
                ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos() * j).clamp(-4.0 * j, 4.0 * j)
            }
        };
        x as i64
    }

    /// A packet arrives at `now`.
    pub fn push(&mut self, now: u64, pkt: P) {
        let n = pkt.segments().max(1) as u64;
        self.n.received += n;
        if !self.cfg.up {
            self.n.down_drops += n;
            return;
        }
        if !self.cfg.per_packet() {
            return self.enqueue(now, pkt, false);
        }
        if n == 1 {
            let f = self.fate();
            return self.deliver(now, pkt, f);
        }
        let mut fates: Vec<Fate> = (0..n).map(|_| self.fate()).collect();
        if fates.iter().all(|f| *f == Fate::default()) {
            return self.enqueue(now, pkt, false);
        }
        self.n.segmented += 1;
        let parts = pkt.split();
        // (a packet cut into other than `segments()` parts counts as what it was cut into)
        self.n.received = self.n.received - n + parts.len() as u64;
        while fates.len() < parts.len() {
            let f = self.fate();
            fates.push(f);
        }
        for (p, f) in parts.into_iter().zip(fates) {
            self.deliver(now, p, f);
        }
    }

    fn fate(&mut self) -> Fate {
        Fate {
            lost: self.lost(),
            corrupt: self.chance(self.cfg.corrupt),
            duplicate: self.chance(self.cfg.duplicate),
            reorder: self.chance(self.cfg.reorder),
        }
    }

    fn deliver(&mut self, now: u64, mut pkt: P, f: Fate) {
        if f.lost {
            self.n.lost += 1;
            return;
        }
        if f.corrupt && pkt.body_len() > 0 {
            let bit = self.rng.usize(..pkt.body_len() * 8);
            pkt.flip(bit);
            self.n.corrupted += 1;
        }
        if f.duplicate {
            self.n.duplicated += 1;
            self.enqueue(now, pkt.clone(), false);
        }
        self.enqueue(now, pkt, f.reorder);
    }

    fn enqueue(&mut self, now: u64, pkt: P, reorder: bool) {
        let len = pkt.wire_len() as u64;
        let segs = pkt.segments().max(1) as u64;
        let depart = match self.cfg.rate_bps.filter(|&r| r > 0) {
            Some(rate) => {
                let start = self.busy_until.max(now);
                let backlog = ((start - now) as u128 * rate as u128 / 8_000_000_000) as u64;
                if backlog + len > self.cfg.queue_bytes {
                    self.n.queue_drops += segs;
                    return;
                }
                self.n.queue_high_bytes = self.n.queue_high_bytes.max(backlog + len);
                let d = start + (len as u128 * 8_000_000_000 / rate as u128) as u64;
                self.busy_until = d;
                d
            }
            None => now,
        };
        if self.held_bytes + len > MAX_HELD {
            self.n.overflow_drops += segs;
            return;
        }
        let release = if reorder && !self.held.is_empty() {
            self.n.reordered += 1;
            depart
        } else {
            let r = (depart + self.cfg.delay_ns).saturating_add_signed(self.jitter()).max(depart);
            let r = r.max(self.last_release);
            self.last_release = r;
            r
        };
        self.seq += 1;
        self.held_bytes += len;
        self.held.push(Reverse(Held { release, seq: self.seq, pkt }));
    }

    /// When the next packet is due, if any is held.
    pub fn next_release(&self) -> Option<u64> {
        self.held.peek().map(|Reverse(h)| h.release)
    }

    /// The next packet due at `now`, if any.
    pub fn pop_due(&mut self, now: u64) -> Option<P> {
        if self.next_release()? > now {
            return None;
        }
        let Reverse(h) = self.held.pop()?;
        let len = h.pkt.wire_len() as u64;
        self.held_bytes -= len;
        self.n.passed += h.pkt.segments().max(1) as u64;
        self.n.passed_bytes += len;
        Some(h.pkt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn drain(s: &mut Shaper<Vec<u8>>, until: u64) -> Vec<(u64, Vec<u8>)> {
        let mut out = Vec::new();
        let mut t = 0;
        while t <= until {
            while let Some(p) = s.pop_due(t) {
                out.push((t, p));
            }
            t += 10_000; // 10 µs steps of the virtual clock
        }
        out
    }

    #[test]
    fn a_delay_holds_each_packet_exactly_that_long_and_keeps_the_order() {
        let mut s = Shaper::new(Impairment { delay_ns: 5 * MS, ..Default::default() }, 1);
        for i in 0..10u8 {
            s.push(u64::from(i) * MS, vec![i; 100]);
        }
        assert_eq!(s.next_release(), Some(5 * MS));
        assert!(s.pop_due(5 * MS - 1).is_none(), "not a nanosecond early");
        let out = drain(&mut s, 20 * MS);
        let times: Vec<u64> = out.iter().map(|(t, _)| *t).collect();
        assert_eq!(times, (0..10).map(|i| (i + 5) * MS).collect::<Vec<_>>());
        assert!(out.iter().enumerate().all(|(i, (_, p))| p[0] as usize == i));
        assert_eq!(s.counters().passed, 10);
        assert_eq!(s.held_bytes(), 0);
    }

    #[test]
    fn jitter_spreads_releases_without_reordering_unless_asked() {
        let cfg = Impairment { delay_ns: 10 * MS, jitter_ns: 2 * MS, ..Default::default() };
        let mut s = Shaper::new(cfg.clone(), 7);
        for i in 0..1000u64 {
            s.push(i * 100_000, (i as u32).to_be_bytes().to_vec());
        }
        let out = drain(&mut s, 200 * MS);
        assert_eq!(out.len(), 1000);
        let ids: Vec<u32> = out.iter().map(|(_, p)| u32::from_be_bytes([p[0], p[1], p[2], p[3]])).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "in order");
        let delays: Vec<i64> = out.iter().zip(0..).map(|((t, _), i)| *t as i64 - i * 100_000).collect();
        let spread = delays.iter().max().unwrap() - delays.iter().min().unwrap();
        assert!(spread > 2 * MS as i64, "jitter moved packets: spread {spread} ns");
        assert!(delays.iter().all(|&d| d >= 0));
        // With reordering asked, some packets overtake.
        let mut r = Shaper::new(Impairment { reorder: 0.05, ..cfg }, 7);
        for i in 0..1000u64 {
            r.push(i * 100_000, (i as u32).to_be_bytes().to_vec());
        }
        let out = drain(&mut r, 200 * MS);
        let ids: Vec<u32> = out.iter().map(|(_, p)| u32::from_be_bytes([p[0], p[1], p[2], p[3]])).collect();
        let back = ids.windows(2).filter(|w| w[0] > w[1]).count();
        assert!(back > 10, "overtaken {back} times");
        let n = r.counters().reordered;
        assert!((25..=80).contains(&n), "about 5 % of 1000 reordered: {n}");
        // Uniform jitter stays within ±jitter of the delay.
        let mut u =
            Shaper::new(Impairment { delay_ns: 10 * MS, jitter_ns: MS, dist: Dist::Uniform, ..Default::default() }, 5);
        for i in 0..500u64 {
            u.push(i * 10 * MS, vec![0; 10]); // far apart: the order rule never binds
        }
        let out = drain(&mut u, 6000 * MS);
        assert_eq!(out.len(), 500);
        let d: Vec<u64> = out.iter().zip(0..).map(|((t, _), i)| t - i * 10 * MS).collect();
        assert!(d.iter().all(|&x| (9 * MS..=11 * MS + 10_000).contains(&x)), "{:?}", d.iter().max());
        assert!(d.iter().any(|&x| x < 9_500_000) && d.iter().any(|&x| x > 10_500_000), "spread over the range");
    }

    #[test]
    fn random_loss_hits_its_rate_and_bursty_loss_comes_in_runs() {
        for (loss, want) in [(Loss::Random { p: 0.01 }, 0.01), (Loss::bursty(0.01, 4.0), 0.01)] {
            let mut s = Shaper::new(Impairment { loss, ..Default::default() }, 3);
            let mut pattern = Vec::new();
            for i in 0..200_000u64 {
                let before = s.counters().lost;
                s.push(i, vec![0; 10]);
                pattern.push(s.counters().lost > before);
                while s.pop_due(i).is_some() {}
            }
            let rate = s.counters().lost as f64 / 200_000.0;
            assert!((rate - want).abs() < want * 0.15, "{loss:?}: {rate}");
            let runs = pattern.windows(2).filter(|w| w[1] && !w[0]).count().max(1);
            let mean_run = s.counters().lost as f64 / runs as f64;
            match loss {
                Loss::Random { .. } => assert!(mean_run < 1.1, "random loss is not bursty: {mean_run}"),
                _ => assert!((3.0..5.0).contains(&mean_run), "bursts of about 4: {mean_run}"),
            }
        }
    }

    #[test]
    fn the_rate_serialises_and_the_queue_limit_drops_the_tail() {
        // 1 Gbit/s: a 1250-byte packet takes 10 µs; a queue of 12,500 bytes holds 10 of them.
        let cfg = Impairment { rate_bps: Some(1_000_000_000), queue_bytes: 12_500, ..Default::default() };
        let mut s = Shaper::new(cfg, 1);
        for _ in 0..20 {
            s.push(0, vec![0; 1250]);
        }
        assert_eq!(s.counters().queue_drops, 10, "a burst of 20 into a queue of 10");
        assert_eq!(s.counters().queue_high_bytes, 12_500);
        let out = drain(&mut s, MS);
        let times: Vec<u64> = out.iter().map(|(t, _)| *t).collect();
        assert_eq!(times, (1..=10).map(|i| i * 10_000).collect::<Vec<_>>(), "one every 10 µs");
    }

    #[test]
    fn duplication_corruption_and_a_cut_link() {
        let cfg = Impairment { duplicate: 1.0, corrupt: 1.0, ..Default::default() };
        let mut s = Shaper::new(cfg, 9);
        s.push(0, vec![0u8; 64]);
        let a = s.pop_due(0).unwrap();
        let b = s.pop_due(0).unwrap();
        assert_eq!(a, b, "the copy is the same packet");
        assert_eq!(a.iter().map(|x| x.count_ones()).sum::<u32>(), 1, "exactly one bit flipped");
        assert_eq!((s.counters().duplicated, s.counters().corrupted, s.counters().passed), (1, 1, 2));
        s.set(Impairment { up: false, ..Default::default() });
        s.push(1, vec![1]);
        assert!(s.pop_due(10).is_none());
        assert_eq!(s.counters().down_drops, 1);
        s.set(Impairment::default());
        s.push(2, vec![2]);
        assert_eq!(s.pop_due(2), Some(vec![2]), "restored");
    }

    /// A packet standing for `.1` wire packets of 100 bytes.
    #[derive(Clone, Debug)]
    struct Multi(u8, usize);

    impl Packet for Multi {
        fn wire_len(&self) -> usize {
            100 * self.1
        }
        fn flip(&mut self, _bit: usize) {
            self.0 ^= 1;
        }
        fn body_len(&self) -> usize {
            100
        }
        fn segments(&self) -> usize {
            self.1
        }
        fn split(self) -> Vec<Self> {
            vec![Multi(self.0, 1); self.1]
        }
    }

    #[test]
    fn a_super_packet_is_drawn_for_packet_by_packet_and_cut_only_when_hit() {
        let mut s = Shaper::new(Impairment { loss: Loss::Random { p: 0.01 }, ..Default::default() }, 11);
        let (mut whole, mut parts) = (0u64, 0u64);
        for i in 0..10_000u64 {
            s.push(i, Multi(0, 45));
            while let Some(p) = s.pop_due(i) {
                if p.1 == 45 {
                    whole += 1
                } else {
                    parts += 1
                }
            }
        }
        let c = s.counters();
        assert_eq!(c.received, 450_000, "counted in wire packets");
        assert_eq!(c.passed + c.lost, c.received);
        assert!((c.lost as f64 / 450_000.0 - 0.01).abs() < 0.0015, "1 % of wire packets: {}", c.lost);
        // 1 - 0.99^45 = 36 % of the super-packets have a loss, and only those are cut
        assert!((3_300..=3_900).contains(&c.segmented), "cut: {}", c.segmented);
        assert_eq!(whole + c.segmented, 10_000);
        assert_eq!(parts + c.lost, c.segmented * 45);
        // Without per-packet impairments nothing is cut, and the rate charges every wire packet.
        let cfg = Impairment { rate_bps: Some(8_000_000_000), ..Default::default() };
        let mut r = Shaper::new(cfg, 1);
        r.push(0, Multi(0, 45));
        assert_eq!(r.next_release(), Some(4_500), "4,500 bytes at 1 byte/ns");
        assert_eq!((r.counters().received, r.counters().segmented), (45, 0));
        // Corruption cuts too, and flips one part only.
        let mut c = Shaper::new(Impairment { corrupt: 0.5, ..Default::default() }, 3);
        c.push(0, Multi(0, 10));
        let out: Vec<Multi> = std::iter::from_fn(|| c.pop_due(0)).collect();
        assert_eq!(out.len(), 10);
        assert_eq!(out.iter().filter(|p| p.0 == 1).count() as u64, c.counters().corrupted);
        assert!(c.counters().corrupted > 0);
    }

    #[test]
    fn the_delay_line_is_bounded() {
        let mut s = Shaper::new(Impairment { delay_ns: 1_000 * MS, ..Default::default() }, 1);
        let big = vec![0u8; 64 << 10];
        for i in 0..5000u64 {
            s.push(i, big.clone());
        }
        assert!(s.held_bytes() <= MAX_HELD);
        assert_eq!(s.counters().overflow_drops, 5000 - MAX_HELD / (64 << 10));
    }
}
