//! What a byte of a copy costs the CPU besides encryption (issue 33: doctor predicted 173 Gbit/s
//! "limited by crypto" on a host that moved 47): both ends go through the kernel's TCP stack,
//! and through the page cache, the sender reading and the receiver writing new pages (which
//! allocates them: the dearer of the two). BLAKE3 is measured too: `cp --verify` and `--checksum`
//! hash every byte on both ends, a plain copy none. Each is measured here for a short time on
//! one core, in CPU time of the measuring threads (so a busy machine slows the measurement down,
//! not its result); the analysis adds them to the AEAD cost ([`super::aead`]) into CPU seconds
//! per byte.

use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

/// Per-byte costs of a copy other than the AEAD, each as the rate one core sustains (bit/s of
/// payload per CPU second); 0 where the measurement failed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CopyCost {
    /// BLAKE3 over 64 KiB records (each end hashes every byte with `--verify` or `--checksum`).
    pub blake3_bps: f64,
    /// Reading 1 MiB at a time from the page cache (`pread` of a file in memory): the sender's.
    pub page_read_bps: f64,
    /// Writing 1 MiB at a time into new page-cache pages (`pwrite` into an in-memory file,
    /// emptied every 64 MiB): the receiver's, allocation included.
    pub page_write_bps: f64,
    /// TCP over loopback in 1 MiB writes, the CPU of the sending and the receiving thread
    /// together: one
    /// byte through both ends' stacks.
    pub tcp_both_ends_bps: f64,
}

impl CopyCost {
    /// Whether every figure was measured.
    pub fn complete(&self) -> bool {
        [self.blake3_bps, self.page_read_bps, self.page_write_bps, self.tcp_both_ends_bps].iter().all(|r| *r > 0.0)
    }

    /// The dearer end's page-cache pass: the receiver's write, unless reading costs more.
    pub fn page_bps(&self) -> f64 {
        self.page_read_bps.min(self.page_write_bps)
    }
}

/// Record size, as in [`super::aead`]: the order of a transfer record.
const RECORD: usize = 64 * 1024;

/// What `cp` hands the kernel per call on the data path: a 1 MiB record to a socket, a 1 MiB
/// chunk to a file (`--chunk-size`'s default).
const IO: usize = 1 << 20;

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

/// Runs `step` (which handles `size` bytes) until `budget` of wall time or [`MAX_BYTES`];
/// returns the rate in the thread's CPU time, `None` as soon as a step fails.
fn on_one_core(budget: Duration, size: usize, mut step: impl FnMut() -> Option<()>) -> Option<f64> {
    let (start, cpu0) = (Instant::now(), thread_cpu());
    let mut bytes = 0u64;
    while start.elapsed() < budget && bytes < MAX_BYTES {
        step()?;
        bytes += size as u64;
    }
    Some(rate(bytes, thread_cpu().saturating_sub(cpu0)))
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
        let mut buf = vec![0u8; IO];
        let mut got = 0u64;
        while let Ok(n) = rx.read(&mut buf) {
            if n == 0 {
                break;
            }
            got += n as u64;
        }
        (got, thread_cpu().saturating_sub(cpu0))
    });
    let buf = vec![0x5au8; IO];
    let (start, cpu0) = (Instant::now(), thread_cpu());
    let mut sent = 0u64;
    while start.elapsed() < budget && sent < MAX_BYTES {
        if tx.write_all(&buf).is_err() {
            break;
        }
        sent += IO as u64;
    }
    let tx_cpu = thread_cpu().saturating_sub(cpu0);
    drop(tx);
    let (got, rx_cpu) = reader.join().ok()?;
    Some(rate(got, tx_cpu + rx_cpu))
}

/// The file the page-cache passes use: 64 MiB at most, in memory (`memfd`), never on a disk.
const PAGE_FILE: u64 = 64 << 20;

/// Page-cache writes, then reads, of [`IO`] bytes each in an in-memory file, for about `budget` and
/// half of it:
/// `(read, write)` rates, `None` if the file cannot be made. The writes go to new pages: the
/// file is emptied each time it reaches [`PAGE_FILE`], as a receiver's files are always new.
fn page_cache(budget: Duration) -> Option<(f64, f64)> {
    let fd = rustix::fs::memfd_create("linerate-doctor", rustix::fs::MemfdFlags::CLOEXEC).ok()?;
    let file = File::from(fd);
    let data = vec![0x5au8; IO];
    let mut at = 0u64;
    let write = on_one_core(budget, IO, || {
        if at == PAGE_FILE {
            file.set_len(0).ok()?;
            at = 0;
        }
        file.write_all_at(&data, at).ok()?;
        at += IO as u64;
        Some(())
    })?;
    let mut sink = vec![0u8; IO];
    let mut from = 0u64;
    let read = on_one_core(budget / 2, IO, || {
        file.read_exact_at(&mut sink, from).ok()?;
        from = (from + IO as u64) % at.max(IO as u64);
        Some(())
    })?;
    Some((read, write))
}

/// Measure the costs, about `budget` in total (a quarter each; the page-cache reads half that).
pub fn measure(budget: Duration) -> CopyCost {
    let quarter = budget / 4;
    let data = vec![0x5au8; RECORD];
    let blake3_bps = on_one_core(quarter, RECORD, || {
        std::hint::black_box(blake3::hash(std::hint::black_box(&data)));
        Some(())
    })
    .unwrap_or(0.0);
    let (page_read_bps, page_write_bps) = page_cache(quarter).unwrap_or((0.0, 0.0));
    CopyCost { blake3_bps, page_read_bps, page_write_bps, tcp_both_ends_bps: tcp_both_ends(quarter).unwrap_or(0.0) }
}

#[cfg(test)]
mod tests {
    #[test]
    fn measures_every_cost() {
        let c = super::measure(std::time::Duration::from_millis(60));
        // Every cost was measured (a positive, finite rate). Which is faster depends on the
        // machine and its load, so the test does not judge that.
        assert!(c.complete(), "{c:?}");
        for r in [c.blake3_bps, c.page_read_bps, c.page_write_bps, c.tcp_both_ends_bps] {
            assert!(r.is_finite() && r > 0.0, "{c:?}");
        }
    }
}
