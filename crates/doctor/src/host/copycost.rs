//! What a byte of a copy costs the CPU besides encryption (issue 33: doctor predicted 173 Gbit/s
//! "limited by crypto" on a host that moved 47): both ends go through the kernel's TCP stack,
//! and through the page cache, the sender reading and the receiver writing new pages (which
//! allocates them: the dearer of the two). BLAKE3 is measured too: `cp --verify` and `--checksum`
//! hash every byte on both ends, a plain copy none. Each is measured here in short rounds on
//! one core, repeated until its spread is known ([`super::repeat`]; issue 43: one 75 ms
//! page-cache test read 18.6 Gbit/s, and 5.4 a few minutes later), in CPU time of the measuring
//! threads (so a busy machine slows the measurement down, not its result); the analysis adds
//! them to the AEAD cost ([`super::aead`]) into CPU seconds per byte.

use super::repeat::{self, Repeat, Spread};
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
    /// Each figure over its rounds (the figures above are their medians); absent in reports
    /// written before issue 43.
    #[serde(default)]
    pub spread: Option<CopyCostSpread>,
}

/// [`CopyCost`]'s figures over their rounds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CopyCostSpread {
    /// BLAKE3.
    pub blake3: Spread,
    /// Page-cache reads.
    pub page_read: Spread,
    /// Page-cache writes.
    pub page_write: Spread,
    /// TCP over loopback, both ends.
    pub tcp_both_ends: Spread,
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

    /// [`CopyCost::page_bps`] over the rounds: the dearer pass by its median.
    pub fn page_spread(&self) -> Option<Spread> {
        self.spread.map(|s| if s.page_read.median_bps < s.page_write.median_bps { s.page_read } else { s.page_write })
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

/// Runs `step` (which handles `size` bytes) until `round` of wall time or [`MAX_BYTES`];
/// returns the rate in the thread's CPU time, `None` as soon as a step fails.
fn on_one_core(round: Duration, size: usize, mut step: impl FnMut() -> Option<()>) -> Option<f64> {
    let (start, cpu0) = (Instant::now(), thread_cpu());
    let mut bytes = 0u64;
    while start.elapsed() < round && bytes < MAX_BYTES {
        step()?;
        bytes += size as u64;
    }
    Some(rate(bytes, thread_cpu().saturating_sub(cpu0)))
}

/// TCP over loopback for about `budget` (one round): a writer here, a reader on a thread; the CPU time of
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

/// An in-memory file for the page-cache passes, and where the writes and the reads are.
struct PageFile {
    file: File,
    data: Vec<u8>,
    sink: Vec<u8>,
    at: u64,
    from: u64,
}

impl PageFile {
    fn new() -> Option<PageFile> {
        let fd = rustix::fs::memfd_create("linerate-doctor", rustix::fs::MemfdFlags::CLOEXEC).ok()?;
        Some(PageFile { file: File::from(fd), data: vec![0x5au8; IO], sink: vec![0u8; IO], at: 0, from: 0 })
    }

    /// One round of writes of [`IO`] bytes into new pages: the file is emptied each time it
    /// reaches [`PAGE_FILE`], as a receiver's files are always new.
    fn write(&mut self, round: Duration) -> Option<f64> {
        let PageFile { file, data, at, .. } = self;
        on_one_core(round, IO, || {
            if *at == PAGE_FILE {
                file.set_len(0).ok()?;
                *at = 0;
            }
            file.write_all_at(data, *at).ok()?;
            *at += IO as u64;
            Some(())
        })
    }

    /// One round of reads of [`IO`] bytes of what the writes left in the file.
    fn read(&mut self, round: Duration) -> Option<f64> {
        let PageFile { file, data, sink, at, from } = self;
        if *at < IO as u64 {
            file.write_all_at(data, 0).ok()?;
            *at = IO as u64;
        }
        let end = *at;
        on_one_core(round, IO, || {
            file.read_exact_at(sink, *from).ok()?;
            *from = (*from + IO as u64) % end;
            Some(())
        })
    }
}

/// Measure the costs, each repeated as `rule` says (up to its budget each; [`Repeat::DOCTOR`]
/// in doctor): BLAKE3, page-cache writes, then reads, TCP over loopback. A figure whose
/// measurement failed is 0 (and there is no `spread`).
pub fn measure(rule: &Repeat) -> CopyCost {
    let data = vec![0x5au8; RECORD];
    let blake3 = repeat::timed(rule, || {
        on_one_core(rule.round(), RECORD, || {
            std::hint::black_box(blake3::hash(std::hint::black_box(&data)));
            Some(())
        })
    });
    let mut page = PageFile::new();
    let page_write = page.as_mut().and_then(|p| repeat::timed(rule, || p.write(rule.round())));
    let page_read = page.as_mut().and_then(|p| repeat::timed(rule, || p.read(rule.round())));
    let tcp = repeat::timed(rule, || tcp_both_ends(rule.round()));
    let median = |s: Option<Spread>| s.map_or(0.0, |s| s.median_bps);
    CopyCost {
        blake3_bps: median(blake3),
        page_read_bps: median(page_read),
        page_write_bps: median(page_write),
        tcp_both_ends_bps: median(tcp),
        spread: (|| {
            Some(CopyCostSpread {
                blake3: blake3?,
                page_read: page_read?,
                page_write: page_write?,
                tcp_both_ends: tcp?,
            })
        })(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_every_cost_with_its_spread() {
        let c = measure(&Repeat { budget: Duration::from_millis(30), ..Repeat::DOCTOR });
        // Every cost was measured (a positive, finite rate). Which is faster depends on the
        // machine and its load, so the test does not judge that.
        assert!(c.complete(), "{c:?}");
        for r in [c.blake3_bps, c.page_read_bps, c.page_write_bps, c.tcp_both_ends_bps] {
            assert!(r.is_finite() && r > 0.0, "{c:?}");
        }
        let s = c.spread.unwrap();
        for (x, median) in [
            (s.blake3, c.blake3_bps),
            (s.page_read, c.page_read_bps),
            (s.page_write, c.page_write_bps),
            (s.tcp_both_ends, c.tcp_both_ends_bps),
        ] {
            assert!(x.rounds >= 1 && x.low_bps <= median && median <= x.high_bps && x.median_bps == median, "{c:?}");
        }
        assert_eq!(c.page_spread().unwrap().median_bps, c.page_bps());
    }
}
