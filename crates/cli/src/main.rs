//! `linerate`: the command-line front end. Flags are parsed here and turned into engine
//! configurations; all the work happens in `linerate-engine`.

mod bench;
mod cp;
mod demo;
mod doctor;
#[cfg(test)]
mod flag_units;
mod keys;
mod lab;
mod progress;
mod report;
mod ssh;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Exit codes, documented in `linerate cp --help` and docs/USER_GUIDE.md.
pub mod exit {
    /// Everything was copied.
    pub const OK: u8 = 0;
    /// The session completed but some entries failed (each was reported).
    pub const PARTIAL: u8 = 1;
    /// Bad usage or configuration (flags, key file, destination).
    pub const USAGE: u8 = 2;
    /// The session failed: connection, authentication, protocol or a fatal server error, a
    /// busy server, or an internal error.
    pub const SESSION: u8 = 3;

    use linerate_engine::EngineError;
    use linerate_proto::ErrorCode;

    /// The exit code of a failed `cp`, `bench` or `doctor` run, the one mapping for every
    /// command: [`USAGE`] when the request itself cannot be met as given (flags, key file,
    /// destination, or the server refusing its parameters: Destination, BadParams, Limit,
    /// Unsupported), [`SESSION`] for everything else (the network, authentication, the peer, a
    /// busy server, an internal error).
    pub fn of(e: &EngineError) -> u8 {
        match e {
            EngineError::Usage(_) | EngineError::Secret(_) => USAGE,
            EngineError::Remote {
                code: ErrorCode::Destination | ErrorCode::BadParams | ErrorCode::Limit | ErrorCode::Unsupported,
                ..
            } => USAGE,
            _ => SESSION,
        }
    }
}

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
    /// Run the agent: receives copies (with --root) and answers benchmarks.
    Serve(cp::ServeArgs),
    /// Benchmark the network against a `linerate serve` (netperf/uperf/iperf3-class tests).
    Bench(bench::BenchArgs),
    /// Write a new key: a shared 256-bit key (default) or an ed25519 key pair for daemon mode.
    Keygen(keys::KeygenArgs),
    /// Make a sample tree, copy it encrypted through a local server, verify it, print the rate.
    Demo(demo::DemoArgs),
    /// Generate a sample tree (for benchmarks): deterministic, incompressible contents.
    Mktree(demo::MktreeArgs),
    /// Inspect this host and the path to a peer: find the bottleneck and predict the ceiling.
    Doctor(doctor::DoctorArgs),
    /// Emulated hosts, links, switches and QoS in network namespaces; scenario runs (root).
    Lab(lab::LabArgs),
    /// Stored runs: list, show, export, compare, and charts as SVG or one HTML file.
    Report(report::ReportArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let code = match cli.cmd {
        Cmd::Cp(a) => cp::run_cp(a),
        Cmd::Serve(a) => cp::run_serve(a),
        Cmd::Bench(a) => bench::run(a),
        Cmd::Keygen(a) => keys::run_keygen(a),
        Cmd::Demo(a) => demo::run_demo(a),
        Cmd::Mktree(a) => demo::run_mktree(a),
        Cmd::Doctor(a) => doctor::run_doctor(a),
        Cmd::Lab(a) => lab::run_lab(a),
        Cmd::Report(a) => report::run_report(a),
    };
    ExitCode::from(code)
}
