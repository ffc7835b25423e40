//! `linerate`: the command-line front end. Flags are parsed here and turned into the
//! configurations of the crates below; all the work happens there (`linerate-copy`,
//! `linerate-bench`, `linerate-agent`, `linerate-net`, and the lab, report and mesh crates).

// First: its `outln!`/`errln!` macros are used by every module below.
#[macro_use]
mod out;
mod cmd;
mod ending;
mod error;
mod filter;
#[cfg(test)]
mod flag_units;
mod keys;
mod plan;
mod progress;
mod ssh;
mod transfer;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use cmd::{bench, cache, clean, cp, demo, doctor, generate, keygen, lab, mesh, mktree, report, serve};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "linerate", version, about = "Move data at line rate, encrypted, over parallel streams")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Copy files and directory trees, encrypted, over parallel streams.
    Cp(cp::CpArgs),
    /// List and remove the partial files interrupted copies left at their destinations.
    Clean(clean::CleanArgs),
    /// List or remove the copies of linerate that `cp` uploaded to hosts over ssh.
    Cache(cache::CacheArgs),
    /// Run the agent: receives copies (with --root) and answers benchmarks.
    Serve(serve::ServeArgs),
    /// Benchmark the network against a `linerate serve` (netperf/uperf/iperf3-class tests).
    Bench(Box<bench::BenchArgs>),
    /// Write a new key: a shared 256-bit key (default) or an ed25519 key pair for daemon mode.
    Keygen(keygen::KeygenArgs),
    /// Make a sample tree, copy it encrypted through a local server, verify it, print the rate.
    Demo(demo::DemoArgs),
    /// Generate a sample tree (for benchmarks): deterministic, incompressible contents.
    Mktree(mktree::MktreeArgs),
    /// Inspect this host and the path to a peer: find the bottleneck and predict the ceiling.
    Doctor(doctor::DoctorArgs),
    /// Emulated hosts, links, switches and QoS in network namespaces; scenario runs (root).
    Lab(lab::LabArgs),
    /// Stored runs: list, show, export, compare, and charts as SVG or one HTML file.
    Report(report::ReportArgs),
    /// Scheduled tests between every pair of a fleet's agents (pScheduler-style), kept in the store.
    Mesh(mesh::MeshArgs),
    /// Shell completions (bash, zsh, fish, PowerShell, elvish) and man pages, on stdout.
    Generate(generate::GenerateArgs),
}

/// When `main` began: the origin of a copy's `timeline` (the exec and the loader before it take
/// about a millisecond).
static STARTED: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// When this process's `main` began.
pub(crate) fn started() -> std::time::Instant {
    *STARTED.get_or_init(std::time::Instant::now)
}

fn main() -> ExitCode {
    started();
    let parsed = Cli::command().try_get_matches().and_then(|m| Ok((Cli::from_arg_matches(&m)?, m)));
    let (cli, matches) = match parsed {
        Ok(p) => p,
        Err(e) => return ExitCode::from(parse_failed(&e)),
    };
    // Each command's messages begin with its name (`cp`'s with `linerate` alone, as scp's).
    let who = match matches.subcommand_name() {
        Some("cp") | None => "linerate".to_string(),
        Some(name) => format!("linerate {name}"),
    };
    // The command runs on a thread of its own; `main` ends the process when it returns, or at
    // once when asked to (a second Ctrl-C, a closed ssh connection: `ending`).
    let done = ending::run(move || dispatch(cli.cmd));
    match done {
        Ok(done) => ExitCode::from(exit_code(&who, done)),
        Err(kind) => ExitCode::from(kind.code()),
    }
}

/// Run the command.
fn dispatch(cmd: Cmd) -> error::Result {
    match cmd {
        Cmd::Cp(a) => cp::run_cp(a),
        Cmd::Clean(a) => clean::run_clean(a),
        Cmd::Cache(a) => cache::run_cache(a),
        Cmd::Serve(a) => serve::run_serve(a),
        // iperf3's `-s`: `linerate serve` with the same key file.
        Cmd::Bench(a) => match bench::server_argv(&a) {
            Some(argv) => {
                let s = serve::serve_args(argv?).map_err(|e| error::Error::usage(format!("-s: {e}")))?;
                serve::run_serve(s)
            }
            None => bench::run(*a),
        },
        Cmd::Keygen(a) => keygen::run_keygen(a),
        Cmd::Demo(a) => demo::run_demo(a),
        Cmd::Mktree(a) => mktree::run_mktree(a),
        Cmd::Doctor(a) => doctor::run_doctor(a),
        Cmd::Lab(a) => lab::run_lab(a),
        Cmd::Report(a) => report::run_report(a),
        Cmd::Mesh(a) => mesh::run_mesh(a),
        Cmd::Generate(a) => generate::run_generate(a, Cli::command()),
    }
}

/// A command line that is not a command: the help or the version asked for (`--help`, `help`,
/// `--version`) is printed on stdout, exit 0; anything else, including the help clap shows in
/// place of a missing subcommand or argument, goes to stderr with the usage code (2): no command
/// line ends with 0 having done nothing that was asked (issue 42).
fn parse_failed(e: &clap::Error) -> u8 {
    use clap::error::ErrorKind;
    let asked = matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion);
    // Nobody may read it (a closed pipe): the code is all that is left.
    let _ = e.print();
    if asked {
        0
    } else {
        error::Kind::Usage.code()
    }
}

/// The one place a failure becomes an exit code (and its message is printed): the code of its
/// [`error::Kind`]; a closed standard output or error (`| head`) is not worth a word and exits
/// with [`error::Kind::Closed`]'s code, whatever else failed after it.
fn exit_code(who: &str, done: error::Result) -> u8 {
    match done {
        Ok(()) if out::closed() => error::Kind::Closed.code(),
        Ok(()) => 0,
        Err(e) if e.is_broken_pipe() || out::closed() => error::Kind::Closed.code(),
        Err(e) => {
            if let Some(m) = e.message() {
                // Nobody may read it (stderr closed too): the code is all that is left.
                let _ = errln!("{who}: {m:#}");
            }
            e.kind().code()
        }
    }
}
