//! Pacing of copy traffic: `cp --bwlimit` on the client, per-session and total caps with a fair
//! share on the server (issue 5).
//!
//! **The bucket.** [`Bucket`] is a token bucket that hands out bytes in arrival order: each
//! caller reserves its record's bytes (a place in line), then waits until the credit that flows
//! in at the rate reaches its place. Credit that nobody uses piles up to the burst only (the larger
//! of 5 ms of traffic and 256 KiB, about one record), so the bytes let through by time `t` never
//! exceed `burst + rate × t`, and a sender that keeps up gets exactly `rate` in the long run.
//! Many threads share one bucket under one short lock; waiters sleep (never spin), in slices of
//! at most 20 ms so that a changed rate takes effect quickly. The bucket reads no clock itself:
//! callers pass the time, so tests drive it on a fake clock.
//!
//! **Fair sharing.** A [`Governor`] owns the server's caps. Each session it admits gets its own
//! bucket ([`SessionRate`]), whose rate the governor sets. Without a total cap a session's rate
//! is simply its cap (per client, or the tighter cap of its key). With a total cap the governor
//! splits the total max-min fairly, from measured demand, every 100 ms and whenever a session
//! starts or ends:
//! - a session that had to wait for its bucket in the last period wants more than it got: its
//!   demand is its cap (unbounded without one);
//! - a session that never waited is limited elsewhere (its disk, its link, its client): its
//!   demand is what it used, plus a quarter of headroom, and at least an eighth of an equal
//!   share so it can grow back;
//! - the total is water-filled over these demands ([`max_min`]): nobody gets more than it asks
//!   while anyone that asks for more gets an equal share of the rest. Whatever is left over when
//!   every demand is met is water-filled again up to the caps, so the whole total is always
//!   handed out (work conserving) and the sum of rates never exceeds it.
//!
//! A session that was given less than it now wants waits in its bucket, is marked as wanting
//! more, and gets its equal share at the next period: a fair split settles within about 100 ms.
//!
//! Rates in this module's public API are in **bit/s**, like every rate on linerate's command
//! line; buckets count bytes.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

/// Longest single sleep of a waiting sender: it re-reads its rate at least this often.
const MAX_SLEEP: Duration = Duration::from_millis(20);
/// How often the governor re-splits the total from measured demand.
pub const REALLOCATE_EVERY: Duration = Duration::from_millis(100);
/// A bucket holds at most this much traffic at its rate...
const BURST_TIME: Duration = Duration::from_millis(5);
/// ...or this many bytes (about one record), whichever is larger.
const MIN_BURST: u64 = 256 * 1024;
/// Credit is counted in billionths of a byte, so that `rate × nanoseconds` is exact.
const NANO: u128 = 1_000_000_000;

/// Bytes per second for a rate in bit/s (at least 1).
fn bytes_per_s(bps: u64) -> u64 {
    (bps / 8).max(1)
}

/// A token bucket on a caller-supplied clock (nanoseconds since any fixed origin).
#[derive(Debug, Clone)]
pub struct Bucket {
    /// Bytes per second.
    rate: u64,
    /// Most unused credit kept, in bytes.
    burst: u64,
    /// Time of the last refill.
    last_ns: u64,
    /// Credit granted so far, in nano-bytes.
    credit: u128,
    /// Bytes reserved so far, in nano-bytes (the end of the line).
    reserved: u128,
}

impl Bucket {
    /// A full bucket pacing `rate` bytes per second, as of `now_ns`.
    pub fn new(rate: u64, now_ns: u64) -> Bucket {
        let burst = burst_for(rate);
        Bucket { rate: rate.max(1), burst, last_ns: now_ns, credit: u128::from(burst) * NANO, reserved: 0 }
    }

    /// Bytes per second.
    pub fn rate(&self) -> u64 {
        self.rate
    }

    /// Most unused credit kept, bytes.
    pub fn burst(&self) -> u64 {
        self.burst
    }

    fn refill(&mut self, now_ns: u64) {
        let dt = now_ns.saturating_sub(self.last_ns);
        self.last_ns = self.last_ns.max(now_ns);
        self.credit += u128::from(self.rate) * u128::from(dt);
        let cap = self.reserved + u128::from(self.burst) * NANO;
        if self.credit > cap {
            self.credit = cap;
        }
    }

    /// Change the rate from `now_ns` on; credit earned until then is kept.
    pub fn set_rate(&mut self, rate: u64, now_ns: u64) {
        self.refill(now_ns);
        self.rate = rate.max(1);
        self.burst = burst_for(self.rate);
        let cap = self.reserved + u128::from(self.burst) * NANO;
        if self.credit > cap {
            self.credit = cap;
        }
    }

    /// Take a place in line for `bytes`; pass the ticket to [`Bucket::wait`].
    pub fn reserve(&mut self, bytes: u64, now_ns: u64) -> u128 {
        self.refill(now_ns);
        self.reserved += u128::from(bytes) * NANO;
        self.reserved
    }

    /// How long the holder of `ticket` must still wait at `now_ns` (None: go now).
    pub fn wait(&mut self, ticket: u128, now_ns: u64) -> Option<Duration> {
        self.refill(now_ns);
        if self.credit >= ticket {
            return None;
        }
        let ns = (ticket - self.credit).div_ceil(u128::from(self.rate));
        Some(Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX)))
    }
}

fn burst_for(rate: u64) -> u64 {
    let t = u128::from(rate) * BURST_TIME.as_nanos() / NANO;
    u64::try_from(t).unwrap_or(u64::MAX).max(MIN_BURST)
}

/// Max-min fair split of `total` over claims (`None`: no limit): each claim gets the smaller of
/// what it asks and an equal share of what the smaller claims left. The sum never exceeds
/// `total`, and equals it when some claim is unlimited or the claims add up to more.
pub fn max_min(total: u64, limits: &[Option<u64>]) -> Vec<u64> {
    let n = limits.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| limits[i].unwrap_or(u64::MAX));
    let mut left = total;
    let mut out = vec![0; n];
    for (k, &i) in order.iter().enumerate() {
        let share = left / (n - k) as u64;
        let a = limits[i].map_or(share, |l| l.min(share));
        out[i] = a;
        left -= a;
    }
    out
}

/// What the governor knows of one session when it splits the total.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    /// What it is expected to use, bytes/s (`None`: as much as it may).
    pub demand: Option<u64>,
    /// The most it may have, bytes/s (`None`: no cap of its own).
    pub cap: Option<u64>,
}

/// Split `total` bytes/s over sessions: max-min fair over their demands (each within its cap),
/// then any rest max-min fair up to the caps. See the module documentation.
pub fn allocate(total: u64, claims: &[Claim]) -> Vec<u64> {
    let want: Vec<Option<u64>> = claims
        .iter()
        .map(|c| match (c.demand, c.cap) {
            (Some(d), Some(c)) => Some(d.min(c)),
            (d, c) => d.or(c),
        })
        .collect();
    let mut out = max_min(total, &want);
    let rest = total - out.iter().sum::<u64>();
    if rest > 0 {
        let room: Vec<Option<u64>> =
            claims.iter().zip(&out).map(|(c, a)| c.cap.map(|c| c.saturating_sub(*a))).collect();
        for (o, extra) in out.iter_mut().zip(max_min(rest, &room)) {
            *o += extra;
        }
    }
    out
}

#[derive(Debug)]
struct Meter {
    bucket: Bucket,
    /// Bytes taken since `since_ns`.
    used: u64,
    since_ns: u64,
    /// Some taker had to wait since `since_ns`.
    waited: bool,
    /// Demand found at the last reallocation, bytes/s (`None`: unbounded, or not yet measured).
    demand: Option<u64>,
}

#[derive(Debug)]
struct Paced {
    origin: Instant,
    /// Bytes/s.
    cap: Option<u64>,
    meter: Mutex<Meter>,
    governor: Weak<Governor>,
}

impl Paced {
    fn meter(&self) -> MutexGuard<'_, Meter> {
        self.meter.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

impl Drop for Paced {
    fn drop(&mut self) {
        if let Some(g) = self.governor.upgrade() {
            g.reallocate(false);
        }
    }
}

/// The pace of one session (or of one client's copy): cheap to clone, shared by all the
/// session's stream threads. Unlimited when made by [`SessionRate::unlimited`].
#[derive(Debug, Clone, Default)]
pub struct SessionRate(Option<Arc<Paced>>);

impl SessionRate {
    /// No pacing at all.
    pub fn unlimited() -> SessionRate {
        SessionRate(None)
    }

    /// A fixed rate in bit/s (`None`: unlimited), for `cp --bwlimit`.
    pub fn fixed(bps: Option<u64>) -> SessionRate {
        SessionRate(bps.map(|bps| {
            let origin = Instant::now();
            let rate = bytes_per_s(bps);
            Arc::new(Paced {
                origin,
                cap: Some(rate),
                meter: Mutex::new(Meter {
                    bucket: Bucket::new(rate, 0),
                    used: 0,
                    since_ns: 0,
                    waited: false,
                    demand: None,
                }),
                governor: Weak::new(),
            })
        }))
    }

    /// Whether this paces anything.
    pub fn is_limited(&self) -> bool {
        self.0.is_some()
    }

    /// The current rate in bit/s (`None`: unlimited).
    pub fn current_bps(&self) -> Option<u64> {
        self.0.as_ref().map(|p| p.meter().bucket.rate().saturating_mul(8))
    }

    /// Wait until `bytes` more may pass. Sleeps (never spins); returns at once when unlimited.
    pub fn take(&self, bytes: usize) {
        let Some(p) = &self.0 else { return };
        let bytes = bytes as u64;
        let ticket = {
            let mut m = p.meter();
            m.used = m.used.saturating_add(bytes);
            m.bucket.reserve(bytes, p.now_ns())
        };
        loop {
            let wait = {
                let mut m = p.meter();
                let w = m.bucket.wait(ticket, p.now_ns());
                // Marked on every round: a wait may span several reallocation periods.
                m.waited |= w.is_some();
                w
            };
            let Some(wait) = wait else { break };
            // Not a polling loop (issue 30's exceptions): pacing a rate is waiting out the time
            // the bucket says, in slices so that a reallocation is seen.
            std::thread::sleep(wait.min(MAX_SLEEP));
            if let Some(g) = p.governor.upgrade() {
                g.maybe_reallocate();
            }
        }
        if let Some(g) = p.governor.upgrade() {
            g.maybe_reallocate();
        }
    }
}

/// Server-wide caps on copy sessions, and the fair split of the total among them.
#[derive(Debug)]
pub struct Governor {
    origin: Instant,
    /// Bytes/s over all sessions.
    total: Option<u64>,
    /// Bytes/s per session.
    per_session: Option<u64>,
    sessions: Mutex<Sessions>,
}

#[derive(Debug, Default)]
struct Sessions {
    live: Vec<Weak<Paced>>,
    last_ns: u64,
}

impl Governor {
    /// Caps in bit/s: `total` over all sessions, `per_session` for each (`None`: no cap).
    pub fn new(total_bps: Option<u64>, per_session_bps: Option<u64>) -> Arc<Governor> {
        Arc::new(Governor {
            origin: Instant::now(),
            total: total_bps.map(bytes_per_s),
            per_session: per_session_bps.map(bytes_per_s),
            sessions: Mutex::new(Sessions::default()),
        })
    }

    /// Whether any cap is set.
    pub fn is_limited(&self) -> bool {
        self.total.is_some() || self.per_session.is_some()
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Admit a session whose own cap (its key's `rate=`, bit/s) is `cap_bps`; the tighter of it
    /// and the per-session cap applies. Pace the session's traffic with the result; dropping its
    /// last clone ends its share.
    pub fn admit(self: &Arc<Self>, cap_bps: Option<u64>) -> SessionRate {
        let cap = match (cap_bps.map(bytes_per_s), self.per_session) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if cap.is_none() && self.total.is_none() {
            return SessionRate::unlimited();
        }
        let now = self.now_ns();
        let start = cap.or(self.total).unwrap_or(u64::MAX);
        let paced = Arc::new(Paced {
            origin: self.origin,
            cap,
            meter: Mutex::new(Meter {
                bucket: Bucket::new(start, now),
                used: 0,
                since_ns: now,
                waited: false,
                demand: None,
            }),
            governor: if self.total.is_some() { Arc::downgrade(self) } else { Weak::new() },
        });
        if self.total.is_some() {
            self.lock().live.push(Arc::downgrade(&paced));
            self.reallocate(false);
        }
        SessionRate(Some(paced))
    }

    fn lock(&self) -> MutexGuard<'_, Sessions> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The pace allowed now over the sessions sharing the total, bit/s (`None`: no total cap).
    pub fn paced_bps(&self) -> Option<u64> {
        self.total?;
        let live = self.lock().live.iter().filter_map(Weak::upgrade).collect::<Vec<_>>();
        Some(live.iter().map(|p| p.meter.lock().unwrap_or_else(PoisonError::into_inner).bucket.rate()).sum::<u64>() * 8)
    }

    /// Sessions currently sharing the total.
    pub fn sessions(&self) -> usize {
        self.lock().live.iter().filter(|w| w.strong_count() > 0).count()
    }

    fn maybe_reallocate(&self) {
        let due = match self.sessions.try_lock() {
            Ok(s) => self.now_ns().saturating_sub(s.last_ns) >= REALLOCATE_EVERY.as_nanos() as u64,
            Err(_) => false, // someone else is at it
        };
        if due {
            self.reallocate(true);
        }
    }

    /// Re-split the total; with `measure`, first update each session's demand from what it used.
    fn reallocate(&self, measure: bool) {
        let Some(total) = self.total else { return };
        let mut s = self.lock();
        let now = self.now_ns();
        if measure && now.saturating_sub(s.last_ns) < REALLOCATE_EVERY.as_nanos() as u64 {
            return; // another thread just did it
        }
        s.live.retain(|w| w.strong_count() > 0);
        let live: Vec<Arc<Paced>> = s.live.iter().filter_map(Weak::upgrade).collect();
        if live.is_empty() {
            s.last_ns = now;
            return;
        }
        let floor = total / live.len() as u64 / 8;
        let claims: Vec<Claim> = live
            .iter()
            .map(|p| {
                let mut m = p.meter();
                if measure {
                    let dt = now.saturating_sub(m.since_ns).max(1);
                    let used = u128::from(m.used) * NANO / u128::from(dt);
                    let used = u64::try_from(used).unwrap_or(u64::MAX);
                    m.demand = if m.waited { None } else { Some(used.saturating_add(used / 4).max(floor)) };
                    m.used = 0;
                    m.waited = false;
                    m.since_ns = now;
                }
                Claim { demand: m.demand, cap: p.cap }
            })
            .collect();
        if measure {
            s.last_ns = now;
        }
        for (p, rate) in live.iter().zip(allocate(total, &claims)) {
            p.meter().bucket.set_rate(rate.max(1), now);
        }
        // A session whose last handle went away meanwhile ends here, when `live` goes: its drop
        // re-splits the total, which takes this lock again.
        drop(s);
        drop(live);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Run one sender that always has `record` bytes ready on a fake clock for `secs`; returns
    /// the bytes let through and the most that ever went beyond `rate × t`.
    fn drive(rate: u64, record: u64, secs: u64) -> (u64, i128) {
        let mut b = Bucket::new(rate, 0);
        let (mut now, mut sent, mut excess) = (0u64, 0u64, 0i128);
        while now < secs * 1000 * MS {
            let t = b.reserve(record, now);
            if let Some(w) = b.wait(t, now) {
                now += w.as_nanos() as u64;
                assert!(b.wait(t, now).is_none(), "the wait it named was not enough");
            }
            sent += record;
            excess = excess.max(sent as i128 - (u128::from(rate) * u128::from(now) / NANO) as i128);
        }
        (sent, excess)
    }

    #[test]
    fn bucket_keeps_the_long_run_rate_exactly() {
        for (rate, record) in [(125_000_000, 1 << 20), (1_000_000, 4096), (10_000, 300 * 1024)] {
            let (sent, excess) = drive(rate, record, 10);
            let expect = rate * 10;
            // One burst plus at most one record ahead, never more.
            let slack = burst_for(rate) + record;
            assert!(sent >= expect && sent <= expect + slack, "rate {rate}: {sent} bytes vs {expect}");
            assert!(excess <= slack as i128, "rate {rate}: ran {excess} bytes ahead");
        }
    }

    #[test]
    fn bucket_burst_is_about_a_record_and_unused_credit_does_not_pile_up() {
        let mut b = Bucket::new(1_000_000, 0);
        assert_eq!(b.burst(), MIN_BURST);
        // After a long idle spell only one burst goes at once.
        let t = b.reserve(MIN_BURST, 3600 * 1000 * MS);
        assert!(b.wait(t, 3600 * 1000 * MS).is_none());
        let t = b.reserve(100_000, 3600 * 1000 * MS);
        let w = b.wait(t, 3600 * 1000 * MS).unwrap();
        assert_eq!(w, Duration::from_millis(100));
        // Fast links: 5 ms of traffic.
        assert_eq!(Bucket::new(1_250_000_000, 0).burst(), 6_250_000);
    }

    #[test]
    fn bucket_serves_waiters_in_order_and_follows_a_new_rate() {
        let mut b = Bucket::new(1_000_000, 0);
        let first = b.reserve(MIN_BURST + 500_000, 0);
        let second = b.reserve(500_000, 0);
        assert_eq!(b.wait(first, 0), Some(Duration::from_millis(500)));
        assert_eq!(b.wait(second, 0), Some(Duration::from_millis(1000)));
        // Halfway, the rate doubles: the rest comes twice as fast.
        b.set_rate(2_000_000, 250 * MS);
        assert_eq!(b.wait(first, 250 * MS), Some(Duration::from_millis(125)));
        assert_eq!(b.wait(second, 250 * MS), Some(Duration::from_millis(375)));
        assert!(b.wait(second, 625 * MS).is_none());
    }

    #[test]
    fn max_min_splits_equally_and_hands_back_what_small_claims_leave() {
        assert_eq!(max_min(300, &[None, None, None]), [100, 100, 100]);
        assert_eq!(max_min(300, &[Some(50), None, None]), [50, 125, 125]);
        assert_eq!(max_min(300, &[Some(50), Some(60), Some(1000)]), [50, 60, 190]);
        assert_eq!(max_min(300, &[Some(10), Some(20)]), [10, 20]);
        assert_eq!(max_min(300, &[]), Vec::<u64>::new());
        assert!(max_min(100, &[None, None, None]).iter().sum::<u64>() <= 100);
    }

    #[test]
    fn allocate_is_fair_capped_and_work_conserving() {
        let c = |demand, cap| Claim { demand, cap };
        // Everyone wants more: equal shares.
        assert_eq!(allocate(300, &[c(None, None), c(None, None), c(None, None)]), [100, 100, 100]);
        // A session limited elsewhere keeps its demand; the others share the rest.
        assert_eq!(allocate(300, &[c(Some(30), None), c(None, None), c(None, None)]), [30, 135, 135]);
        // Caps (per client or per key) bound the share; the rest goes to the others.
        assert_eq!(allocate(300, &[c(None, Some(50)), c(None, None), c(None, None)]), [50, 125, 125]);
        // Every demand met: the rest is handed out up to the caps, never beyond the total.
        let a = allocate(300, &[c(Some(10), None), c(Some(20), Some(40)), c(Some(30), Some(35))]);
        assert_eq!(a.iter().sum::<u64>(), 300);
        assert_eq!(a, [225, 40, 35]);
        // Caps that add up to less than the total: each gets its cap.
        assert_eq!(allocate(300, &[c(None, Some(10)), c(Some(1), Some(20))]), [10, 20]);
    }

    #[test]
    fn governor_splits_the_total_as_sessions_come_and_go() {
        let g = Governor::new(Some(240_000_000), Some(200_000_000));
        let a = g.admit(None);
        assert_eq!(a.current_bps(), Some(200_000_000), "alone: its cap, within the total");
        let b = g.admit(Some(40_000_000));
        assert_eq!(b.current_bps(), Some(40_000_000), "a key's tighter cap applies");
        assert_eq!(a.current_bps(), Some(200_000_000));
        let c = g.admit(None);
        assert_eq!((a.current_bps(), c.current_bps()), (Some(100_000_000), Some(100_000_000)));
        assert_eq!(g.sessions(), 3);
        drop(b);
        assert_eq!((a.current_bps(), c.current_bps()), (Some(120_000_000), Some(120_000_000)));
        let a2 = a.clone();
        drop(a);
        assert_eq!(g.sessions(), 2, "a clone keeps the session");
        drop(a2);
        assert_eq!(c.current_bps(), Some(200_000_000));
        // No caps at all: nothing to pace.
        assert!(!Governor::new(None, None).admit(None).is_limited());
    }

    #[test]
    fn a_session_limited_elsewhere_leaves_its_share_to_the_others() {
        use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
        let g = Governor::new(Some(80_000_000), None); // 10 MB/s
        let (busy, slow) = (g.admit(None), g.admit(None));
        assert_eq!((busy.current_bps(), slow.current_bps()), (Some(40_000_000), Some(40_000_000)));
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Relaxed) {
                    busy.take(65536);
                }
            });
            // At most 1 MB/s: limited by something else than its share.
            s.spawn(|| {
                while !stop.load(Relaxed) {
                    slow.take(10_000);
                    std::thread::sleep(Duration::from_millis(10));
                }
            });
            std::thread::sleep(Duration::from_millis(1500));
            stop.store(true, Relaxed);
        });
        let (b, w) = (busy.current_bps().unwrap(), slow.current_bps().unwrap());
        assert!(b >= 60_000_000, "the busy session got {b} bit/s; the slow one uses ~8M of its {w}");
        assert!(w >= 5_000_000, "the slow session keeps room to grow: {w}");
        assert!(b + w <= 80_000_000, "{b} + {w} over the total");
    }

    #[test]
    fn take_paces_threads_sharing_one_rate() {
        // 8 Mbit/s = 1 MB/s; 4 threads take 0.6 MB beyond the first burst: at least 0.6 s.
        let r = SessionRate::fixed(Some(8_000_000));
        let start = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..(MIN_BURST as usize + 600_000) / 4 / 16384 {
                        r.take(16384);
                    }
                });
            }
        });
        let t = start.elapsed();
        assert!(t >= Duration::from_millis(500), "{t:?}");
        assert!(t < Duration::from_secs(30), "{t:?}");
        let start = Instant::now();
        SessionRate::unlimited().take(1 << 30);
        assert!(start.elapsed() < Duration::from_millis(100));
    }
}
