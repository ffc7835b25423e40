//! `linerate demo` (the whole job on one machine, no second host) and `linerate mktree`.

use crate::error::{Error, Kind, Result, ResultExt};
use crate::plan::CopyPlan;
use crate::progress::Show;
use crate::transfer::summary_json;
use anyhow::Context as _;
use clap::Args;
use linerate_copy::diff::compare_trees;
use linerate_copy::options::settings;
use linerate_copy::run::summary::summary_line;
use linerate_copy::sample::demo_tree;
use linerate_model::units::{count, format_size, parse_size};
use std::path::PathBuf;

/// `linerate demo` flags.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Large files in the sample tree (log-normal sizes).
    #[arg(long, default_value_t = 200)]
    files: u64,
    /// Mean size of the large files: a size (1.6MB, 2MiB, 1600000).
    #[arg(long, value_name = "SIZE", default_value = "1.6MB", value_parser = parse_size)]
    mean_size: u64,
    /// Small files (1 to 16 KiB) in the sample tree.
    #[arg(long, default_value_t = 2000)]
    small_files: u64,
    /// Parallel streams (default: from the core count).
    #[arg(long, short = 'P')]
    streams: Option<u16>,
    /// Work directory (default: a new directory under the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Keep the trees afterwards.
    #[arg(long)]
    keep: bool,
    /// Print the copy's JSON summary on stdout.
    #[arg(long)]
    json: bool,
}

/// Run `linerate demo`: 0 the copy is verified, 1 it differs from the source (or could not be
/// compared), 3 the sample tree could not be made (local I/O) or the copy failed.
pub fn run_demo(a: DemoArgs) -> Result {
    let work =
        a.dir.clone().unwrap_or_else(|| std::env::temp_dir().join(format!("linerate-demo-{}", std::process::id())));
    let done = demo_in(&a, &work);
    if !a.keep {
        let _ = std::fs::remove_dir_all(&work);
    } else {
        errln!("trees kept in {}", work.display())?;
    }
    done
}

fn demo_in(a: &DemoArgs, work: &std::path::Path) -> Result {
    let src = work.join("src");
    let dst = work.join("copy");
    std::fs::create_dir_all(&src).with_context(|| format!("making the sample tree in {}", work.display())).io()?;
    errln!("making a sample tree in {} ...", src.display())?;
    let made = demo_tree(&src, a.files, a.mean_size, a.small_files);
    let (files, bytes) = made.with_context(|| format!("making the sample tree in {}", work.display())).io()?;
    errln!("copying {}, {}, encrypted, through a local server ...", count(files, "file"), format_size(bytes as f64))?;
    let mut settings = settings();
    if let Some(s) = a.streams {
        settings.streams = s;
    }
    // `src/`: the copy is `dst` itself (the rsync rule of `cp`).
    let plan = CopyPlan::resolve(vec![src.join("")], &dst, &Default::default(), &Default::default(), settings)?;
    let report = plan.run(Show { quiet: a.json, ..Show::default() })?;
    errln!("{}", summary_line(&report, linerate_model::units::RateUnit::Bits))?;
    if a.json {
        outln!("{}", summary_json(&report))?;
    }
    let compared = compare_trees(&src, &dst, true);
    let (identical, text) =
        compared.map_err(|e| Error::new(Kind::Partial, e).context("comparing the trees"))?.verdict(files);
    errln!("{text}")?;
    match identical {
        true => Ok(()),
        false => Err(Error::reported(Kind::Partial)),
    }
}
