//! What a byte of a copy costs the CPU besides encryption (issue 33: doctor predicted 173 Gbit/s
//! "limited by crypto" on a host that moved 47): both ends hash every byte with BLAKE3, both
//! go through the kernel's TCP stack, and both copy it through the page cache (read on one end,
//! write on the other). Each is measured here for a short time on one core, in CPU time of the
//! measuring threads (so a busy machine slows the measurement down, not its result); the
//! analysis adds them to the AEAD cost ([`super::aead`]) into CPU seconds per byte.

use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Per-byte costs of a copy other than the AEAD, each as the rate one core sustains (bit/s of
/// payload per CPU second); 0 where the measurement failed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CopyCost {
    /// BLAKE3 over 64 KiB records (each end hashes every byte).
    pub blake3_bps: f64,
    /// A memory copy of 64 KiB records: one page-cache read or write (one per end).
    pub memcpy_bps: f64,
    /// TCP over loopback, the CPU of the sending and the receiving thread together: one
    /// byte through both ends' stacks.
    pub tcp_both_ends_bps: f64,
}

impl CopyCost {
    /// Whether every figure was measured.
    pub fn complete(&self) -> bool {
        self.blake3_bps > 0.0 && self.memcpy_bps > 0.0 && self.tcp_both_ends_bps > 0.0
    }
}

/// Record size, as in [`super::aead`]: the order of a transfer record.
const RECORD: usize = 64 * 1024;

/// At most this much data per measurement, whatever the budget.
const MAX_BYTES: u64 = 10 << 30;

/// CPU time of the calling thread.
pub(crate) fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec.max(0) as u64, t.tv_nsec.clamp(0, 999_999_999) as u32)
}

/// `bytes` in `cpu` as bit/s; 0 when nothing was measured.
fn rate(bytes: u64, cpu: Duration) -> f64 {
    let s = cpu.as_secs_f64();
    if s > 0.0 && bytes > 0 {
        bytes as f64 * 8.0 / s
    } else {
        0.0
    }
}

/// Runs `step` (which handles [`RECORD`] bytes) until `budget` of wall time or [`MAX_BYTES`];
/// returns the rate in the thread's CPU time.
fn on_one_core(budget: Duration, mut step: impl FnMut()) -> f64 {
    let (start, cpu0) = (Instant::now(), thread_cpu());
    let mut bytes = 0u64;
    while start.elapsed() < budget && bytes < MAX_BYTES {
        step();
        bytes += RECORD as u64;
    }
    rate(bytes, thread_cpu().saturating_sub(cpu0))
}

/// TCP over loopback for about `budget`: a writer here, a reader on a thread; the CPU time of
/// both against the bytes the reader got. `None` if a socket call fails.
fn tcp_both_ends(budget: Duration) -> Option<f64> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).ok()?;
    // connected before accept (the backlog completes it), so nothing below waits for a peer
    let mut tx = TcpStream::connect(l.local_addr().ok()?).ok()?;
    let (mut rx, _) = l.accept().ok()?;
    rx.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    tx.set_write_timeout(Some(Duration::from_secs(5))).ok()?;
    let reader = std::thread::spawn(move || {
        let cpu0 = thread_cpu();
        let mut buf = vec![0u8; RECORD];
        let mut got = 0u64;
        while let Ok(n) = rx.read(&mut buf) {
            if n == 0 {
                break;
            }
            got += n as u64;
        }
        (got, thread_cpu().saturating_sub(cpu0))
    });
    let buf = vec![0x5au8; RECORD];
    let (start, cpu0) = (Instant::now(), thread_cpu());
    let mut sent = 0u64;
    while start.elapsed() < budget && sent < MAX_BYTES {
        if tx.write_all(&buf).is_err() {
            break;
        }
        sent += RECORD as u64;
    }
    let tx_cpu = thread_cpu().saturating_sub(cpu0);
    drop(tx);
    let (got, rx_cpu) = reader.join().ok()?;
    Some(rate(got, tx_cpu + rx_cpu))
}

/// Measure the three costs, about `budget` in total.
pub fn measure(budget: Duration) -> CopyCost {
    let third = budget / 3;
    let data = vec![0x5au8; RECORD];
    let mut sink = vec![0u8; RECORD];
    let blake3_bps = on_one_core(third, || {
        std::hint::black_box(blake3::hash(std::hint::black_box(&data)));
    });
    let memcpy_bps = on_one_core(third, || {
        sink.copy_from_slice(std::hint::black_box(&data));
        std::hint::black_box(&mut sink);
    });
    CopyCost { blake3_bps, memcpy_bps, tcp_both_ends_bps: tcp_both_ends(third).unwrap_or(0.0) }
}

#[cfg(test)]
mod tests {
    #[test]
    fn measures_every_cost() {
        let c = super::measure(std::time::Duration::from_millis(60));
        // Every cost was measured (a positive, finite rate). Which is faster depends on the
        // machine and its load, so the test does not judge that.
        assert!(c.complete(), "{c:?}");
        for r in [c.blake3_bps, c.memcpy_bps, c.tcp_both_ends_bps] {
            assert!(r.is_finite() && r > 0.0, "{c:?}");
        }
    }
}
