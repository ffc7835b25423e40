//! `linerate mesh`: run an inventory's tests between every pair of its agents, round after
//! round, and keep each round in the run store.

use crate::error::{Error, Kind, Result, ResultExt};
use anyhow::{anyhow, Context};
use clap::Args;
use linerate_mesh::inventory::Inventory;
use linerate_mesh::report::{like, to_report};
use linerate_mesh::round::{run_round, NetAgents, TaskResult, Try};
use linerate_model::shutdown::Stopper;
use linerate_model::units::format_rate;
use linerate_net::auth::keys::{self, Identity};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

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

fn line(inv: &Inventory, round: u64, t: &Try) -> String {
    let test = &inv.tests[t.task.test];
    let (a, b) = (&inv.agents[t.task.from].name, &inv.agents[t.task.to].name);
    let what = match &t.result {
        TaskResult::Done(m) => match m.latency_us {
            Some(l) => format!("p50 {:.0} us, p99 {:.0} us", l.p50, l.p99),
            None => format_rate(m.throughput_bps),
        },
        TaskResult::Unreachable { agent, message } => {
            format!("{} unreachable: {message}", inv.agents[*agent].name)
        }
        TaskResult::Failed { message } => format!("failed: {message}"),
        TaskResult::Down { agent } => format!("not tried: {} is down", inv.agents[*agent].name),
    };
    format!("linerate mesh: round {round}: {} {a} > {b}: {what} ({:.1}-{:.1} s)", test.name, t.start_s, t.end_s)
}

/// The number of the next round of `inv`'s mesh in the run store (1 for a new mesh).
fn next_round(db: Option<&std::path::Path>, inv: &Inventory) -> Result<u64> {
    let path = linerate_report::store::store_path(db).usage()?;
    let mut store = linerate_report::store::Store::open(&path)
        .with_context(|| format!("cannot open the run store {}", path.display()))
        .store()?;
    store.next_mesh_round(&like(inv)).with_context(|| format!("cannot read the run store {}", path.display())).store()
}

/// Runs `linerate mesh`: 0 every test ran, 1 some failed ([`Kind::Partial`]), 2 bad usage (the
/// inventory, the key), 3 no test ran at all ([`Kind::Session`]) or the round could not be
/// stored ([`Kind::Store`]).
pub fn run_mesh(a: MeshArgs) -> Result {
    let inv = Inventory::load(&a.inventory).usage()?;
    let id_path = a
        .identity
        .clone()
        .or_else(|| inv.identity.clone())
        .or_else(keys::default_identity)
        .ok_or_else(|| anyhow!("no identity: give --identity FILE or `identity` in the inventory"))
        .usage()?;
    let identity = Arc::new(
        Identity::load(&id_path)
            .with_context(|| {
                format!("the controller's key {} (make one with `linerate keygen --type ed25519`)", id_path.display())
            })
            .usage()?,
    );
    let stopper = Stopper::new();
    crate::ending::stop_on_signals(&stopper, |_| {}).context("installing signal handlers").internal()?;
    let stop = stopper.shutdown();
    let agents = NetAgents { inv: &inv, identity };
    let interval = if a.once { None } else { inv.interval };
    // Rounds are numbered on from the last stored round of the same mesh (agents and tests).
    let first = if a.no_save { 1 } else { next_round(a.db.as_deref(), &inv)? };
    let mut done = Ok(());
    for round in first.. {
        let began = Instant::now();
        let quiet = a.quiet;
        let r = run_round(&inv, &agents, round, &stop, &mut |t| {
            if !quiet {
                // A closed stderr is seen at the round's end (the next line below).
                let _ = errln!("{}", line(&inv, round, t));
            }
        });
        let rep = to_report(&inv, &r);
        if a.json {
            outln!("{}", serde_json::to_string_pretty(&rep).internal()?)?;
        }
        let saved = if a.no_save {
            None
        } else {
            Some(linerate_report::store::save_run(a.db.as_deref(), &rep).map_err(Error::from)?)
        };
        errln!(
            "linerate mesh: round {round}: {} ran, {} failed ({} retries, {} waves){}{}",
            r.tally.done,
            r.tally.failed,
            r.tally.retried,
            r.tally.waves,
            if r.down.is_empty() {
                String::new()
            } else {
                format!(
                    "; down: {}",
                    r.down.iter().map(|&d| inv.agents[d].name.as_str()).collect::<Vec<_>>().join(", ")
                )
            },
            saved.map_or(String::new(), |id| format!("; saved as {id}"))
        )?;
        // Each failed test is on its line above and in the stored run.
        done = match (r.tally.done, r.tally.failed) {
            (0, f) if f > 0 => Err(Error::reported(Kind::Session)),
            (_, 0) => Ok(()),
            _ => Err(Error::reported(Kind::Partial)),
        };
        let Some(every) = interval else { break };
        // Next round at its time (at once if this one overran), unless stopped meanwhile.
        if r.stopped || stop.wait_deadline(began + every) {
            break;
        }
    }
    done
}
