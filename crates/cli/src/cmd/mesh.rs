//! `linerate mesh`: run an inventory's tests between every pair of its agents, round after
//! round, and keep each round in the run store.

use crate::error::{Error, Kind, Result, ResultExt};
use anyhow::Context;
use clap::Args;
use linerate_mesh::controller::{run_rounds, Observer, Verdict};
use linerate_mesh::inventory::Inventory;
use linerate_mesh::report::next_round;
use linerate_mesh::round::{NetAgents, RoundResult, Try};
use linerate_mesh::text;
use linerate_model::shutdown::Stopper;
use linerate_report::RunReport;
use std::path::PathBuf;
use std::sync::Arc;

/// `linerate mesh` flags.
#[derive(Args, Debug)]
pub struct MeshArgs {
    /// The inventory (TOML): agents, tests, interval (docs/USER_GUIDE.md, "linerate mesh").
    pub inventory: PathBuf,
    /// Run one round and exit (default when the inventory has no `interval`).
    #[arg(long)]
    pub once: bool,
    /// The controller's ed25519 key [default: the inventory's `identity`, else id_ed25519 in
    /// the config directory]; every agent lists its public key with the `mesh` option.
    #[arg(long, value_name = "FILE")]
    pub identity: Option<PathBuf>,
    /// Accept an identity file that its group may read (never write) when that group is this
    /// process's own: how Kubernetes mounts a Secret for a pod with fsGroup (0440).
    #[arg(long)]
    pub identity_group_readable: bool,
    /// Run store to save each round in (a SQLite file or a postgres:// URL) [default: $LINERATE_DB, else the user's data directory].
    #[arg(long, value_name = "PATH")]
    pub db: Option<PathBuf>,
    /// Do not save the rounds.
    #[arg(long)]
    pub no_save: bool,
    /// Print each round as JSON (the stored run) on standard output.
    #[arg(long)]
    pub json: bool,
    /// No line per test on standard error.
    #[arg(short, long)]
    pub quiet: bool,
}

/// Runs `linerate mesh`: 0 every test ran, 1 some failed ([`Kind::Partial`]), 2 bad usage (the
/// inventory, the key), 3 no test ran at all ([`Kind::Session`]) or the round could not be
/// stored ([`Kind::Store`]).
pub fn run_mesh(a: MeshArgs) -> Result {
    let inv = Inventory::load(&a.inventory).usage()?;
    let identity = Arc::new(inv.controller_identity(a.identity.as_deref(), a.identity_group_readable).usage()?);
    let stopper = Stopper::new();
    crate::ending::stop_on_signals(&stopper, |_| {}).context("installing signal handlers").internal()?;
    let agents = NetAgents { inv: &inv, identity };
    let interval = if a.once { None } else { inv.interval };
    // Rounds are numbered on from the last stored round of the same mesh (agents and tests).
    let first = if a.no_save { 1 } else { next_round(a.db.as_deref(), &inv)? };
    let mut printer = Printer { inv: &inv, a: &a };
    match run_rounds(&inv, &agents, first, interval, &stopper.shutdown(), &mut printer)? {
        Verdict::AllRan => Ok(()),
        // Each failed test is on its line and in the stored run.
        Verdict::SomeFailed => Err(Error::reported(Kind::Partial)),
        Verdict::NoneRan => Err(Error::reported(Kind::Session)),
    }
}

/// Writes each try and round: lines on standard error, the rounds as JSON on standard output
/// (`--json`), and saves each in the run store.
struct Printer<'a> {
    inv: &'a Inventory,
    a: &'a MeshArgs,
}

impl Observer for Printer<'_> {
    type Error = Error;

    fn tried(&mut self, round: u64, t: &Try) {
        if !self.a.quiet {
            // A closed stderr is seen at the round's end (its summary line).
            let _ = errln!("{}", text::tried(self.inv, round, t));
        }
    }

    fn round(&mut self, r: &RoundResult, run: &RunReport) -> Result {
        if self.a.json {
            outln!("{}", serde_json::to_string_pretty(run).internal()?)?;
        }
        let saved = match self.a.no_save {
            true => None,
            false => Some(linerate_report::store::save_run(self.a.db.as_deref(), run)?),
        };
        errln!("{}", text::round_summary(self.inv, r, saved.as_deref()))
    }
}
