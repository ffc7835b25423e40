//! AES-256-GCM in place on records of one size, one core: ring against aws-lc-rs (issue 34).
//! Prints GB/s and core-seconds per GB of sealing, and of opening (each open after a copy of
//! the sealed record, as a receiver opens what it just received), for 3 rounds.
//!
//! Usage: cargo run --release --manifest-path bench/aead/Cargo.toml -- [RECORD_BYTES]
use std::time::Instant;

const TOTAL: usize = 8 << 30; // bytes per measurement
const AAD: [u8; 29] = [1; 29];
const KEY: [u8; 32] = [7; 32];

/// Runs `op(record number)` until TOTAL bytes of `size`-byte records are done; GB/s.
fn rate(size: usize, mut op: impl FnMut(u64)) -> f64 {
    let t = Instant::now();
    let mut n = 0u64;
    while (n as usize) * size < TOTAL {
        op(n);
        n += 1;
    }
    TOTAL as f64 / t.elapsed().as_secs_f64() / 1e9
}

fn nonce(n: u64) -> [u8; 12] {
    let mut b = [0u8; 12];
    b[4..].copy_from_slice(&n.to_be_bytes());
    b
}

/// The same measurement for both libraries, whose AEAD APIs have the same shape.
macro_rules! measure {
    ($lib:ident, $name:expr, $size:expr, $round:expr) => {{
        use $lib::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
        let key = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &KEY).unwrap());
        let mut buf = vec![0x5au8; $size];
        let seal = rate($size, |n| {
            let tag = key.seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce(n)), Aad::from(&AAD), &mut buf);
            let _ = std::hint::black_box(tag.unwrap());
        });
        let mut rec = vec![0x33u8; $size];
        let tag = key.seal_in_place_separate_tag(Nonce::assume_unique_for_key([0; 12]), Aad::from(&AAD), &mut rec);
        rec.extend_from_slice(tag.unwrap().as_ref());
        let mut work = rec.clone();
        let open = rate($size, |_| {
            work.copy_from_slice(&rec);
            let plain = key.open_in_place(Nonce::assume_unique_for_key([0; 12]), Aad::from(&AAD), &mut work);
            let _ = std::hint::black_box(plain.unwrap());
        });
        println!(
            "round {} {:8} seal {:5.2} GB/s ({:.3} core-s/GB), copy+open {:5.2} GB/s ({:.3} core-s/GB)",
            $round,
            $name,
            seal,
            1.0 / seal,
            open,
            1.0 / open
        );
    }};
}

fn main() {
    let size: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(1 << 20);
    println!("AES-256-GCM in place, {size}-byte records, {} GiB per figure, one core", TOTAL >> 30);
    for round in 0..3 {
        measure!(ring, "ring", size, round);
        measure!(aws_lc_rs, "aws-lc-rs", size, round);
    }
}
