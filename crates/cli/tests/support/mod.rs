//! Shared helpers of the integration tests.
#![allow(dead_code)] // each test binary uses a part

pub mod sshlab;

/// Write `len` bytes of incompressible, deterministic data to `path`.
pub fn noise(path: &std::path::Path, len: usize) {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ len as u64;
    let data: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(path, data).unwrap();
}
