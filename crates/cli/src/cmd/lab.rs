//! `linerate lab`: up, down, status, exec, run and plan — flags and printing only; the work is
//! in `linerate-lab`.

use crate::error::{Error, Kind};
use anyhow::{anyhow, Context, Result};
use clap::{Args, Subcommand};
use linerate_lab::runner::up_and_run;
use linerate_lab::state::RunState;
use linerate_lab::{show, Lab, LabError, Plan, Scenario, SystemExecutor};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args)]
#[command(after_help = "Scenario format: docs/USER_GUIDE.md, section `linerate lab`; examples in scenarios/.
Needs root and iproute2 (ip, tc); the runs also use iperf3, ssh/sshd, scp, rsync, tar, rclone, diff.")]
pub struct LabArgs {
    #[command(subcommand)]
    cmd: LabCmd,
}

#[derive(Subcommand)]
enum LabCmd {
    /// Build the lab of a scenario and keep it up until Ctrl-C (or `lab down`).
    Up {
        /// Scenario file (TOML).
        file: PathBuf,
        /// Leave the lab up and exit; remove it later with `linerate lab down RUN`.
        #[arg(long)]
        detach: bool,
    },
    /// Tear a lab down (the only one, or RUN).
    Down {
        /// Run id (see `lab status`).
        run: Option<String>,
        /// Every lab.
        #[arg(long, conflicts_with = "run")]
        all: bool,
    },
    /// List the labs that are up, their hosts and addresses.
    Status {
        /// One JSON document.
        #[arg(long)]
        json: bool,
    },
    /// Run a command inside a host of a lab: `linerate lab exec HOST -- CMD ARGS...`.
    Exec {
        /// Host name from the scenario.
        host: String,
        /// Run id, when several labs are up.
        #[arg(long)]
        run: Option<String>,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
    /// Bring the lab up, perform every [[run]], tear it down, and write the results (JSON).
    Run {
        /// Scenario file (TOML).
        file: PathBuf,
        /// Results file [default: SCENARIO-RUNID.json in the current directory]; the HTML
        /// report is written beside it with the extension .html.
        #[arg(long, short)]
        output: Option<PathBuf>,
        /// Run store to save the results in (a SQLite file or a postgres:// URL) [default: $LINERATE_DB, else the user's data directory].
        #[arg(long, value_name = "PATH")]
        db: Option<PathBuf>,
        /// Do not save the results in the run store.
        #[arg(long)]
        no_save: bool,
        /// A smoke run: shorten every duration by this factor (0 < F <= 1): timed runs'
        /// seconds (at least 1), the trees copied and the repeats; every host, sweep step and
        /// stream still runs. Checks that the scenario runs end to end; its figures are not the
        /// experiment's (the results and report say so).
        #[arg(long, value_name = "F")]
        scale_time: Option<f64>,
    },
    /// Print the ip/tc commands a scenario would run, with addresses (no root needed).
    Plan {
        /// Scenario file (TOML).
        file: PathBuf,
    },
    /// Change a link that linerate's emulator runs, while it runs: `lab set LINK delay=50ms
    /// loss=1%`, `lab set LINK down` (a cut), `lab set LINK up`. Keys: delay, jitter, loss,
    /// loss_burst, reorder, duplicate, corrupt (percentages), rate, queue (bytes); `stats`
    /// prints the emulator's counters instead.
    Set {
        /// The link's name (see the scenario; default `A-B`).
        link: String,
        /// Changes (KEY=VALUE, `up`, `down`), or `stats`.
        #[arg(required = true)]
        changes: Vec<String>,
        /// Only one direction: `a>b` or `b>a` (default both).
        #[arg(long, value_enum, default_value_t = Dir::Both)]
        dir: Dir,
        /// Run id, when several labs are up.
        #[arg(long)]
        run: Option<String>,
    },
    /// linerate's link emulator for one link (started by `lab up`; not for direct use).
    #[command(hide = true)]
    Emulate {
        /// Its configuration (JSON, written by `lab up`).
        #[arg(long)]
        config: PathBuf,
    },
}

/// Entry point for `linerate lab`: 0 ok, 1 some runs failed, 2 bad scenario or usage, 3 the lab
/// could not be built, 130 interrupted (after teardown); `exec` passes on its command's status.
pub fn run_lab(a: LabArgs) -> crate::error::Result {
    let r = match a.cmd {
        LabCmd::Up { file, detach } => up(file, detach),
        LabCmd::Down { run, all } => down(run, all),
        LabCmd::Status { json } => status(json),
        LabCmd::Exec { host, run, cmd } => exec(&host, run.as_deref(), &cmd),
        LabCmd::Run { file, output, db, no_save, scale_time } => run(file, output, db, no_save, scale_time),
        LabCmd::Plan { file } => plan(file),
        LabCmd::Set { link, changes, dir, run } => set(&link, &changes, dir, run.as_deref()),
        LabCmd::Emulate { config } => match crate::ending::signals() {
            Ok(stop) => linerate_lab::emu::run(&config, stop).map_err(Into::into),
            Err(e) => Err(anyhow::Error::new(e).context("installing signal handlers")),
        },
    };
    // The lab's own errors say their kind; anything else stopped the lab from being built or run.
    r.map_err(|e| match e.downcast_ref::<LabError>().map(Kind::of_lab) {
        Some(kind) => Error::new(kind, e),
        None => e.downcast::<Error>().unwrap_or_else(|e| Error::new(Kind::Session, e)),
    })
}

/// Told of a problem of a lab torn down on an error path (a closed stderr loses it).
fn drop_problem(p: &str) {
    let _ = errln!("linerate lab: teardown: {p}");
}

/// A line on stderr; a closed stderr loses it (the exit code says the rest).
fn tell(line: &str) {
    let _ = errln!("{line}");
}

fn up(file: PathBuf, detach: bool) -> Result<()> {
    let sc = Scenario::load(&file)?;
    // SIGINT, SIGTERM or SIGHUP tears the lab down, while it is built or once it is up.
    let stopped = crate::ending::signals().context("installing signal handlers")?;
    let mut lab = Lab::up(&sc, &file, detach, &stopped, &mut tell)?;
    lab.on_drop_problem(drop_problem);
    // A closed standard output or error (`| head -1`) tears the lab down as Ctrl-C does, even
    // while it waits with nothing to print.
    let wake = linerate_model::shutdown::Stopper::new();
    crate::out::stop_on_close(&wake);
    let shown = crate::out::bytes(crate::out::To::Out, show::up(&lab.plan, &sc.name, detach).as_bytes());
    if detach && shown.is_ok() {
        lab.detach()?;
        return Ok(());
    }
    if shown.is_ok() {
        let w = wake.clone();
        stopped.on_stop(move || {
            w.stop();
        });
        crate::out::watch_closed();
        wake.shutdown().wait();
    }
    let problems = lab.down_told(&mut tell);
    shown?;
    if crate::out::closed() {
        return Err(Error::reported(Kind::Closed).into());
    }
    // Each problem is on its line above.
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Error::reported(Kind::Session).into())
    }
}

fn down(run: Option<String>, all: bool) -> Result<()> {
    let runs = if all { RunState::list() } else { vec![RunState::find(run.as_deref())?] };
    if linerate_lab::state::down(runs, Duration::from_secs(15), &mut SystemExecutor, &mut tell) {
        Ok(())
    } else {
        Err(Error::reported(Kind::Session).into())
    }
}

fn status(json: bool) -> Result<()> {
    crate::out::bytes(crate::out::To::Out, linerate_lab::state::status(json)?.as_bytes())?;
    Ok(())
}

/// `lab set --dir`: the directions of a link a change applies to.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    // Both directions.
    Both,
    // From the link's first end to its second.
    #[value(name = "a>b")]
    AB,
    // From the link's second end to its first.
    #[value(name = "b>a")]
    BA,
}

impl Dir {
    /// The word the emulator's `set` request takes.
    fn word(self) -> &'static str {
        match self {
            Dir::Both => "both",
            Dir::AB => "a>b",
            Dir::BA => "b>a",
        }
    }
}

fn set(link: &str, changes: &[String], dir: Dir, run: Option<&str>) -> Result<()> {
    let s = RunState::find(run)?;
    outln!("{}", s.ask_emulator(link, &RunState::set_request(dir.word(), changes))?)?;
    Ok(())
}

fn exec(host: &str, run: Option<&str>, cmd: &[String]) -> Result<()> {
    let st = RunState::find(run)?.exec(host, cmd)?;
    // The command's own status, passed on (a signal's end is a failed session).
    match st.code().map(|c| c.clamp(0, 255) as u8) {
        Some(0) => Ok(()),
        Some(c) => Err(Error::reported(Kind::Exited(c)).into()),
        None => Err(Error::reported(Kind::Session).into()),
    }
}

fn run(file: PathBuf, output: Option<PathBuf>, db: Option<PathBuf>, no_save: bool, scale: Option<f64>) -> Result<()> {
    let sc = Scenario::load(&file)?;
    let sc = match scale {
        Some(f) => sc.scaled(f)?,
        None => sc,
    };
    if sc.runs.is_empty() {
        return Err(anyhow!("{}: no [[run]] to perform (use `lab up` to just build it)", file.display()));
    }
    let me = std::env::current_exe().context("finding the linerate executable")?;
    // A signal, or a closed stderr (`2>&1 | head`), stops the build or the runs: one stop for
    // both, which the runner waits on beside its clients.
    let signals = crate::ending::signals().context("installing signal handlers")?;
    let stopper = linerate_model::shutdown::Stopper::new();
    let s = stopper.clone();
    signals.on_stop(move || {
        s.stop();
    });
    crate::out::stop_on_close(&stopper);
    let stop = stopper.shutdown();
    let done = up_and_run(&sc, &file, me, &stop, &mut tell, drop_problem)?;
    if crate::out::closed() {
        return Err(Error::reported(Kind::Closed).into());
    }
    let (result, problems) = (done.result, done.problems);
    let out = output.unwrap_or_else(|| PathBuf::from(format!("{}-{}.json", sc.name, done.id)));
    let mut doc = result?;
    doc.time_scale = scale;
    let text = serde_json::to_string_pretty(&doc)?;
    std::fs::write(&out, text + "\n").with_context(|| format!("writing {}", out.display()))?;
    errln!("results: {}", out.display())?;
    // The run's report: an HTML page beside the results, and the run kept in the store.
    for line in linerate_report::store::keep_lab_run(&doc, &out, db.as_deref(), no_save) {
        errln!("{line}")?;
    }
    let all_ok = doc.runs.iter().all(|r| r.ok);
    if !all_ok && !problems.is_empty() {
        errln!("linerate lab: {}", show::failures(&doc))?;
    }
    if !problems.is_empty() {
        // The teardown's problems are on their lines above.
        Err(Error::reported(Kind::Session).into())
    } else if all_ok {
        Ok(())
    } else {
        Err(Error::msg(Kind::Partial, show::failures(&doc)).into())
    }
}

fn plan(file: PathBuf) -> Result<()> {
    let sc = Scenario::load(&file)?;
    let p = Plan::new(&sc, "lrPLAN")?;
    crate::out::bytes(crate::out::To::Out, show::plan(&p, &sc.name).as_bytes())?;
    Ok(())
}
