//! `linerate clean`: list and remove the partial files interrupted copies left in destinations'
//! working directories (`linerate_copy::clean`).

use crate::error::{Error, Kind, Result};
use clap::Args;
use linerate_copy::clean::{self, CleanConfig};
use std::path::PathBuf;

const CLEAN_AFTER_HELP: &str = "\
A copy that is interrupted keeps the chunks of its large files in a hidden working directory at
its destination (.linerate-work-<random hex>); running the same copy again resumes them and
removes those whose source is gone. `linerate clean` lists and removes the rest: give the
destination directory you gave `linerate cp` (or any directory above it); everything beneath
it is searched. The working directory goes too when nothing is left in it.";

/// `linerate clean` flags.
#[derive(Args, Debug)]
#[command(after_help = CLEAN_AFTER_HELP)]
pub struct CleanArgs {
    /// Directories to search, each with everything beneath it (symlinks are not followed).
    #[arg(required = true, value_name = "DIR")]
    dirs: Vec<PathBuf>,
    /// List what would be removed; remove nothing.
    #[arg(long, short = 'n')]
    dry_run: bool,
    /// Only partial files last written longer ago than this (30m, 12h, 7d).
    #[arg(long, value_name = "AGE", value_parser = linerate_model::units::parse_duration)]
    older_than: Option<std::time::Duration>,
}

/// Run `linerate clean`: 0 when everything found was handled, 1 when something could not be
/// read or removed (each said on stderr).
pub fn run_clean(a: CleanArgs) -> Result {
    let cfg = CleanConfig { paths: a.dirs, older_than: a.older_than, dry_run: a.dry_run };
    cfg.check().map_err(|e| Error::new(Kind::Usage, e))?;
    let report = clean::clean(&cfg, std::time::SystemTime::now());
    for e in &report.errors {
        errln!("linerate clean: {e}")?;
    }
    crate::out::bytes(crate::out::To::Out, report.render().as_bytes())?;
    if !report.errors.is_empty() {
        return Err(Error::reported(Kind::Partial));
    }
    Ok(())
}
