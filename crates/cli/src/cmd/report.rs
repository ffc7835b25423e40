//! `linerate report`: the run store on the command line (list, show, export, rm, import,
//! compare) and the charts (html, svg).

use crate::error::{Error, Kind, ResultExt};
use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use linerate_report::compare::{self, CompareError, Rule};
use linerate_report::export::{self, Format};
use linerate_report::list::clean;
use linerate_report::store::open_store;
use linerate_report::svg::ChartKind;
use linerate_report::{RunReport, Store};
use std::path::{Path, PathBuf};

const REPORT_AFTER_HELP: &str = "\
STORE:
  Runs are kept in an SQLite file: --db PATH, else $LINERATE_DB, else
  $XDG_DATA_HOME/linerate/runs.sqlite (~/.local/share/linerate/runs.sqlite).
  `cp` saves every run there unless given --no-save. An ID may be abbreviated to any
  unique prefix.

COMPARE:
  A goal figure regresses only when its change is worse than --threshold AND beyond the
  noise: SIGMAS x sqrt(sd_A^2 + sd_B^2), each side's standard deviation measured across its
  --repeat runs, else across its reporting intervals, or, for `--against last:K`, across
  the K runs its median is taken from. A figure without a measured spread is judged by the
  threshold alone. Runs whose kinds or key parameters differ (test, direction, connections,
  rate cap, duration, sizes, congestion, MTU, profile, sweep) are refused without --force.

EXIT STATUS:
  0  success (compare: no goal figure regressed beyond the threshold and the noise)
  2  bad usage, an unknown or ambiguous run id, an unreadable document, or compare: runs
     of different kinds or key parameters without --force
  3  the store could not be opened, read or written
  4  compare: a goal figure (throughput of a stream test, transactions or latency of a
     request/response test, time or rate of a copy) regressed beyond --threshold and the
     noise";

/// `linerate report` flags.
#[derive(Args, Debug)]
#[command(after_help = REPORT_AFTER_HELP)]
pub struct ReportArgs {
    /// Run store: a SQLite file, or a postgres:// URL without its password [default: $LINERATE_DB,
    /// else the user's data directory].
    #[arg(long, global = true, value_name = "PATH")]
    db: Option<PathBuf>,
    #[command(subcommand)]
    cmd: ReportCmd,
}

#[derive(Subcommand, Debug)]
enum ReportCmd {
    /// List stored runs, oldest first.
    List {
        /// One JSON object per run on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Show one run as Markdown.
    Show {
        /// Run id (or a unique prefix).
        id: String,
    },
    /// Export one run.
    Export {
        /// Run id (or a unique prefix).
        id: String,
        /// Output format: the linerate.run/1 JSON document, long-format CSV, or Markdown.
        #[arg(long, short, value_enum, default_value = "json")]
        format: ExportFormat,
        /// Write to FILE instead of stdout.
        #[arg(long, short, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Delete one run.
    Rm {
        /// Run id (or a unique prefix).
        id: String,
    },
    /// Store a document: `cp --json`, `bench --json`, `lab run --json` output or an exported run
    /// (`-` reads standard input). Prints the new run id; a run the store holds already (the one
    /// `bench` saved before printing its `--json`) is not stored again, and its id is printed.
    Import {
        /// The JSON file.
        file: PathBuf,
    },
    /// Every figure of two runs side by side; exit 4 if a goal figure of B regressed against A
    /// beyond the threshold and the measured noise (other figures, such as retransmits, are
    /// informational). Refuses runs of different kinds or key parameters without --force.
    Compare {
        /// `A B` (baseline, new run), or `B` alone with --against.
        #[arg(required = true, num_args = 1..=2, value_name = "RUN")]
        runs: Vec<String>,
        /// The baseline instead of A: `last:K`, the median of the last K runs of the same test
        /// (same kind, key parameters and agent) stored before B.
        #[arg(long, value_name = "last:K")]
        against: Option<String>,
        /// Allowed change in percent in each figure's bad direction.
        #[arg(long, default_value_t = 5.0)]
        threshold: f64,
        /// How many standard deviations of measured noise a change must exceed to count (0: the
        /// threshold alone decides).
        #[arg(long, default_value_t = linerate_model::stats::NOISE_SIGMAS, value_name = "N")]
        sigmas: f64,
        /// Compare runs of different kinds or key parameters anyway, side by side.
        #[arg(long)]
        force: bool,
        /// Judge every figure as measured, never by its counterpart without the hypervisor's
        /// steal (which repeated runs carry where the steal varied enough to fit a line).
        #[arg(long)]
        no_steal_adjust: bool,
    },
    /// One self-contained HTML file with every chart of the runs, side by side.
    Html {
        /// Run ids; the first is the baseline of the changes in the summary.
        #[arg(required = true)]
        ids: Vec<String>,
        /// Output file.
        #[arg(long, short, value_name = "FILE")]
        output: PathBuf,
        /// Changes beyond this percentage are coloured in the summary.
        #[arg(long, default_value_t = 5.0)]
        threshold: f64,
    },
    /// A mesh round's matrix per test (rows run the test against the columns), coloured by the
    /// change against an earlier round: HTML (every test) or SVG (one test).
    Mesh {
        /// The mesh run [default: the newest mesh run in the store].
        id: Option<String>,
        /// The baseline round [default: the mesh run stored before it, if any]; `last:K`: the
        /// median of the last K rounds of the same agents and tests.
        #[arg(long, value_name = "ID")]
        against: Option<String>,
        /// Changes beyond this percentage are coloured.
        #[arg(long, default_value_t = 10.0)]
        threshold: f64,
        /// With an .svg output: the test to draw [default: the first].
        #[arg(long, value_name = "NAME")]
        test: Option<String>,
        /// Output file: .html for every test, .svg for one (`-` for SVG on stdout).
        #[arg(long, short, value_name = "FILE")]
        output: PathBuf,
    },
    /// One chart as an SVG file.
    Svg {
        /// Run id (or a unique prefix).
        id: String,
        /// bars, xy, flows, series or latency, optionally `:N` for the N-th of that kind.
        #[arg(long, value_name = "KIND[:N]")]
        chart: String,
        /// Output file (`-` for stdout).
        #[arg(long, short, value_name = "FILE")]
        output: PathBuf,
    },
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum ExportFormat {
    Json,
    Csv,
    Md,
}

fn lookup(store: &mut Store, id: &str) -> crate::error::Result<RunReport> {
    store.get(id).map_err(|e| match Kind::of_report(&e) {
        Kind::Store => Error::new(
            Kind::Store,
            anyhow::Error::new(e).context(format!("cannot read run {id} from {}", store.path())),
        ),
        _ => Error::from(e),
    })
}

fn write_out(output: Option<&Path>, text: &str) -> crate::error::Result {
    match output {
        Some(p) if p.as_os_str() != "-" => {
            std::fs::write(p, text).with_context(|| format!("cannot write {}", p.display())).io()
        }
        _ => crate::out::bytes(crate::out::To::Out, text.as_bytes()),
    }
}

/// Runs `linerate report`: 0 success, 2 usage, 3 the store failed ([`Kind::Store`]), 4 `compare`
/// found a regression ([`Kind::Regressed`]).
pub fn run_report(a: ReportArgs) -> crate::error::Result {
    let db = a.db.as_deref();
    match a.cmd {
        ReportCmd::List { json } => {
            let mut store = open_store(db)?;
            let runs = store.list().context("cannot list runs").store()?;
            let text = if json { linerate_report::list::json_lines(&runs) } else { linerate_report::list::text(&runs) };
            if runs.is_empty() && !json {
                errln!("no runs in {}", store.path())?;
            }
            write_out(None, &text)?;
            Ok(())
        }
        ReportCmd::Show { id } => {
            let mut store = open_store(db)?;
            let r = lookup(&mut store, &id)?;
            write_out(None, &export::to_markdown(&r))?;
            Ok(())
        }
        ReportCmd::Export { id, format, output } => {
            let mut store = open_store(db)?;
            let r = lookup(&mut store, &id)?;
            let f = match format {
                ExportFormat::Json => Format::Json,
                ExportFormat::Csv => Format::Csv,
                ExportFormat::Md => Format::Md,
            };
            write_out(output.as_deref(), &export::export(&r, f))?;
            Ok(())
        }
        ReportCmd::Rm { id } => {
            let mut store = open_store(db)?;
            lookup(&mut store, &id)?;
            let full = store.remove(&id).context("cannot delete the run").store()?;
            errln!("removed run {full}")?;
            Ok(())
        }
        ReportCmd::Import { file } => {
            let r = linerate_report::import::read(&file).usage()?;
            let mut store = open_store(db)?;
            // `bench --json > f && report import f`: bench saved the run already
            let same = store.find_same(&r).context("cannot read the store").store()?;
            if let Some(id) = same {
                errln!("already stored as run {id}; not stored again")?;
                outln!("{id}")?;
                return Ok(());
            }
            store.insert(&r).map_err(|e| match e {
                linerate_report::ReportError::Duplicate(_) => Error::new(Kind::Usage, e),
                other => Error::new(Kind::Store, anyhow::Error::new(other).context("cannot save the run")),
            })?;
            outln!("{}", r.id)?;
            Ok(())
        }
        ReportCmd::Compare { runs, against, threshold, sigmas, force, no_steal_adjust } => {
            let rule = Rule::checked(threshold, sigmas, !no_steal_adjust).usage()?;
            let mut store = open_store(db)?;
            let (ra, rb) = match (against.as_deref(), runs.as_slice()) {
                (None, [a, b]) => (lookup(&mut store, a)?, lookup(&mut store, b)?),
                (Some(spec), [b]) => {
                    let k = compare::parse_last(spec).usage()?;
                    let rb = lookup(&mut store, b)?;
                    let before = store.last_of_same_test(&rb, k).context("cannot read the store").store()?;
                    let (base, warning) = compare::baseline_before(&rb, &before, k).usage()?;
                    if let Some(w) = warning {
                        errln!("linerate report: warning: {w}")?;
                    }
                    (base, rb)
                }
                (None, _) => return Err(CompareError::NeedsTwo).usage(),
                (Some(_), _) => return Err(CompareError::AgainstTakesOne).usage(),
            };
            let c = compare::compare_by(&ra, &rb, rule);
            c.refusal(&ra, &rb, force).usage()?;
            for w in &c.warnings {
                errln!("linerate report: warning: {}", clean(w))?;
            }
            write_out(None, &c.to_text())?;
            match c.regressed() {
                Some(line) => Err(Error::msg(Kind::Regressed, line)),
                None => Ok(()),
            }
        }
        ReportCmd::Html { ids, output, threshold } => {
            let mut store = open_store(db)?;
            let runs = ids.iter().map(|id| lookup(&mut store, id)).collect::<crate::error::Result<Vec<_>>>()?;
            linerate_report::html::write(&runs, threshold, &output)
                .with_context(|| format!("cannot write {}", output.display()))
                .io()?;
            errln!("wrote {}", output.display())?;
            Ok(())
        }
        ReportCmd::Mesh { id, against, threshold, test, output } => {
            let html = output.extension().is_some_and(|e| e == "html");
            let text =
                open_store(db)?.mesh_report(id.as_deref(), against.as_deref(), threshold, html, test.as_deref())?;
            write_out(Some(&output), &text)?;
            Ok(())
        }
        ReportCmd::Svg { id, chart, output } => {
            let (kind, index) = ChartKind::parse_spec(&chart).usage()?;
            let mut store = open_store(db)?;
            let r = lookup(&mut store, &id)?;
            let svg = linerate_report::svg::render(&r, kind, index).usage()?;
            write_out(Some(&output), &svg)?;
            Ok(())
        }
    }
}
