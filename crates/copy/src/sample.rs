//! Sample trees for the demo, the benchmark and the tests: deterministic from a seed, with
//! incompressible contents and sizes drawn log-normal (the studies' data set) or uniform.

use std::fs;
use std::io::{self, Write};
use std::path::Path;

/// How file sizes are drawn.
#[derive(Debug, Clone, Copy)]
pub enum Sizes {
    /// Log-normal with this mean in bytes (sigma 1.0).
    LogNormal {
        /// Mean size.
        mean: u64,
    },
    /// Uniform between the bounds, inclusive.
    Uniform {
        /// Smallest size.
        min: u64,
        /// Largest size.
        max: u64,
    },
}

impl Sizes {
    /// `mktree`'s sizes: uniform between `min` and `max` when both are given, else log-normal
    /// with `mean` (1.6 MB, the studies' data set, when absent).
    pub fn from_flags(mean: Option<u64>, min: Option<u64>, max: Option<u64>) -> Sizes {
        match (mean, min, max) {
            (_, Some(min), Some(max)) => Sizes::Uniform { min, max },
            (m, _, _) => Sizes::LogNormal { mean: m.unwrap_or(1_600_000) },
        }
    }
}

/// What to generate.
#[derive(Debug, Clone, Copy)]
pub struct TreeSpec {
    /// Number of regular files.
    pub files: u64,
    /// Size distribution.
    pub sizes: Sizes,
    /// Files per directory before a new directory is started.
    pub per_dir: u64,
    /// PRNG seed.
    pub seed: u64,
}

/// xorshift64*: fast, deterministic test data. Not for anything secret.
pub struct Rng(u64);

impl Rng {
    /// Seeded generator (a zero seed is replaced).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Fill a buffer with random bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for c in buf.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
}

fn draw(rng: &mut Rng, s: Sizes) -> u64 {
    match s {
        Sizes::LogNormal { mean } => {
            let sigma = 1.0f64;
            let mu = (mean.max(1) as f64).ln() - sigma * sigma / 2.0;
            let z = (-2.0 * (1.0 - rng.unit()).ln()).sqrt() * (2.0 * std::f64::consts::PI * rng.unit()).cos();
            (mu + sigma * z).exp().round() as u64
        }
        Sizes::Uniform { min, max } => min + rng.next_u64() % (max.saturating_sub(min) + 1),
    }
}

/// Create the tree under `root` (which must not exist yet). Returns (files, bytes).
pub fn make_tree(root: &Path, spec: TreeSpec, mut progress: impl FnMut(u64, u64)) -> io::Result<(u64, u64)> {
    fs::create_dir(root)?;
    let mut rng = Rng::new(spec.seed);
    let mut buf = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    let per_dir = spec.per_dir.max(1);
    for i in 0..spec.files {
        let dir = root.join(format!("d{:04}", i / per_dir));
        if i % per_dir == 0 {
            fs::create_dir(&dir)?;
        }
        let size = draw(&mut rng, spec.sizes);
        let mut f = io::BufWriter::with_capacity(1 << 20, fs::File::create(dir.join(format!("f{i:06}.bin")))?);
        let mut left = size;
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            rng.fill(&mut buf[..n]);
            f.write_all(&buf[..n])?;
            left -= n as u64;
        }
        f.flush()?;
        bytes += size;
        progress(i + 1, bytes);
    }
    Ok((spec.files, bytes))
}

/// `linerate demo`'s tree in `src`: `files` large files of log-normal sizes around `mean`,
/// `small` files of 1 to 16 KiB, an empty directory, an empty file and a symlink; its files
/// (the empty one counted) and bytes.
pub fn demo_tree(src: &Path, files: u64, mean: u64, small: u64) -> io::Result<(u64, u64)> {
    let big = make_tree(
        &src.join("large"),
        TreeSpec { files, sizes: Sizes::LogNormal { mean }, per_dir: 100, seed: 7 },
        |_, _| {},
    )?;
    let small = make_tree(
        &src.join("small"),
        TreeSpec { files: small, sizes: Sizes::Uniform { min: 1024, max: 16384 }, per_dir: 500, seed: 8 },
        |_, _| {},
    )?;
    std::fs::create_dir(src.join("empty-dir"))?;
    std::fs::write(src.join("empty-file"), b"")?;
    std::os::unix::fs::symlink("large/d0000", src.join("link-to-large"))?;
    Ok((big.0 + small.0 + 1, big.1 + small.1))
}
