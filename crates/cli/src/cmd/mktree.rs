//! `linerate mktree`: a sample tree for benchmarks, deterministic from a seed, incompressible.

use crate::error::{Result, ResultExt};
use anyhow::Context;
use clap::Args;
use linerate_copy::sample::{make_tree, Sizes, TreeSpec};
use linerate_model::units::{count, parse_size};
use std::path::PathBuf;

/// `linerate mktree` flags.
#[derive(Args, Debug)]
pub struct MktreeArgs {
    /// Directory to create.
    dir: PathBuf,
    /// Number of files.
    #[arg(long, default_value_t = 640)]
    files: u64,
    /// Log-normal sizes with this mean: a size (1.6MB, 2MiB, 1600000).
    #[arg(long, value_name = "SIZE", conflicts_with_all = ["min_size", "max_size"], value_parser = parse_size)]
    mean_size: Option<u64>,
    /// Uniform sizes: smallest (a size).
    #[arg(long, value_name = "SIZE", requires = "max_size", value_parser = parse_size)]
    min_size: Option<u64>,
    /// Uniform sizes: largest (a size).
    #[arg(long, value_name = "SIZE", requires = "min_size", value_parser = parse_size)]
    max_size: Option<u64>,
    /// Files per subdirectory.
    #[arg(long, default_value_t = 1000)]
    per_dir: u64,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// Run `linerate mktree`; a tree that cannot be written is [`crate::error::Kind::Io`].
pub fn run_mktree(a: MktreeArgs) -> Result {
    let sizes = Sizes::from_flags(a.mean_size, a.min_size, a.max_size);
    let spec = TreeSpec { files: a.files, sizes, per_dir: a.per_dir, seed: a.seed };
    let (files, bytes) = make_tree(&a.dir, spec, |_, _| {}).with_context(|| a.dir.display().to_string()).io()?;
    errln!("{}: {}, {}", a.dir.display(), count(files, "file"), count(bytes, "byte"))
}
