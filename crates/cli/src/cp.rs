//! `linerate cp` and `linerate serve`: flags, destination parsing, the local server process for
//! local destinations, and the final report.

use crate::exit;
use crate::progress::{Bar, Show};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use linerate_engine::auth::secret::Secret;
use linerate_engine::copy::recv;
use linerate_engine::copy::send::{self, CopyConfig, CopyReport, Progress};
use linerate_engine::net::conn;
use linerate_engine::server::{Server, ServerConfig};
use linerate_engine::EngineError;
use linerate_model::doc::cp::{CpCounts, CpCpu, CpDirection, CpErrors, CpPeakRss, CpSkipped, CpSummary, CpuSeconds};
use linerate_model::units::{format_rate, format_size};
use linerate_proto::caps;
use linerate_proto::hello::Suite;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const CP_AFTER_HELP: &str = "\
DESTINATION:
  [user@]HOST:PATH over ssh: cp runs `linerate serve --once --ssh` on HOST through the
                   system ssh (~/.ssh/config, agent, ProxyJump and keys apply; -e to
                   replace ssh), which announces a port and a one-time key; the streams
                   then connect to HOST directly (--via-ssh: through the ssh connection).
                   PATH is relative to the remote home unless absolute, as for scp, and
                   never passes through a remote shell. IPv6: [user@][ADDR]:PATH.
  HOST:PORT:PATH   a running `linerate serve`; PATH is relative to its --root.
                   IPv6: [ADDR]:PORT:PATH. Needs --key-file with the server's shared
                   key, or for a daemon with --authorized-keys an ed25519 identity
                   (--identity FILE, default ~/.config/linerate/id_ed25519 from
                   `linerate keygen --type ed25519`); the server's host key is added to
                   ~/.config/linerate/known_hosts on first contact and checked after.
  PATH             a local path: cp starts its own server process on loopback and hands
                   it a fresh one-time key through a pipe. Prefix a local path that
                   contains ':' with ./

  An operand with a ':' before any '/' is remote: a numeric PORT between two colons (and
  no user@) means a running daemon, anything else ssh.

  Pull: `linerate cp HOST:PORT:PATH LOCAL` copies PATH from a running server;
  `linerate cp [user@]HOST:PATH LOCAL` copies it over ssh.

  Files already at the destination with the same size and mtime are skipped
  (--checksum: same BLAKE3); an interrupted large file resumes from its verified
  chunks when the same command runs again.

  As with cp -r: if DEST is an existing directory, each SRC is copied into it under its
  own name; otherwise the single SRC becomes DEST.

EXIT STATUS:
  0  everything was copied
  1  the session completed but some entries failed (each is reported on stderr)
  2  bad usage or configuration (flags, key file, a destination the server refused)
  3  the session failed: connection, authentication, protocol or a fatal server error";

/// `linerate cp` flags.
#[derive(Args, Debug)]
#[command(after_help = CP_AFTER_HELP)]
pub struct CpArgs {
    /// Sources, then the destination.
    #[arg(required = true, num_args = 2.., value_name = "SRC... DEST")]
    paths: Vec<PathBuf>,
    /// Parallel TCP streams [default: the number of CPU cores, 2 to 8].
    #[arg(long, short = 'P')]
    streams: Option<u16>,
    #[command(flatten)]
    keys: crate::keys::ClientKeyArgs,
    /// Hash every file with BLAKE3 while reading; the receiver checks the written file before
    /// renaming it into place.
    #[arg(long)]
    verify: bool,
    /// fsync every file and directory on the receiver before reporting success.
    #[arg(long)]
    fsync: bool,
    /// Print a JSON summary on stdout.
    #[arg(long)]
    json: bool,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
    /// Most bit/s over all streams: a rate (500M, 1gbit, 50MB/s, 50MiB/s), at least 100k.
    #[arg(long, value_name = "RATE", value_parser = linerate_engine::limit::parse_limit)]
    bwlimit: Option<u64>,
    /// List each file on stderr as it has been sent (names escaped).
    #[arg(long, short)]
    verbose: bool,
    /// Show progress even when stderr is not a terminal: a plain line every second.
    #[arg(long, conflicts_with = "quiet")]
    progress: bool,
    /// Chunk size for large files: a size, a power of two from 64K to 8M (K, M: ×1024).
    #[arg(long, value_name = "SIZE", default_value = "1M", value_parser = parse_chunk_size)]
    chunk_size: u32,
    /// AEAD: auto picks AES-256-GCM where the CPU accelerates AES, else ChaCha20-Poly1305.
    #[arg(long, default_value = "auto", value_parser = ["auto", "aes-256-gcm", "chacha20-poly1305"])]
    cipher: String,
    /// Seconds allowed to connect and authenticate.
    #[arg(long, default_value_t = 15)]
    timeout: u64,
    /// Seconds a stream may make no progress sending before the copy fails (a cut link, a
    /// stalled server).
    #[arg(long, default_value_t = 300)]
    stall_timeout: u64,
    /// Run store to save this run in [default: $LINERATE_DB, else the user's data directory].
    #[arg(long, value_name = "PATH")]
    db: Option<PathBuf>,
    /// Do not save this run in the run store.
    #[arg(long)]
    no_save: bool,
    #[command(flatten)]
    ssh: crate::ssh::SshArgs,
    /// A file is up to date when its BLAKE3 matches, not merely its size and modification time
    /// (both sides read every file of the same size).
    #[arg(long, short = 'c')]
    checksum: bool,
    /// Delete entries in the copied directories at the destination that the source does not have
    /// (never anything outside them).
    #[arg(long)]
    delete: bool,
    /// Change nothing: list what would be sent (and deleted), on standard output.
    #[arg(long, short = 'n')]
    dry_run: bool,
}

/// `linerate serve` flags.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "0.0.0.0:7878")]
    listen: String,
    /// Directory every copy is confined beneath. Without it the server answers benchmarks only.
    #[arg(long)]
    root: Option<PathBuf>,
    /// Longest benchmark test, seconds (warm-up included).
    #[arg(long, default_value_t = 3600)]
    max_duration: u64,
    /// Most connections in one benchmark test.
    #[arg(long, default_value_t = 10_000)]
    max_connections: u32,
    /// Highest rate a benchmark test may ask for (10G, 10gbit, 1.25GB/s); tests must then
    /// give --rate. Unlimited when absent.
    #[arg(long, value_name = "RATE", value_parser = linerate_model::units::parse_rate)]
    max_rate: Option<u64>,
    /// Most benchmark tests running at once, over all clients.
    #[arg(long, default_value_t = 8)]
    max_tests: usize,
    /// Most connections from one address in their handshake at once.
    #[arg(long, default_value_t = 16)]
    max_handshakes_per_source: usize,
    /// Key file shared with clients (64 hex digits, mode 0600); `-` reads the key from standard
    /// input. Optional with --authorized-keys (then only keys are admitted unless it is given).
    #[arg(long, value_name = "FILE", required_unless_present_any = ["ssh", "authorized_keys"])]
    key_file: Option<PathBuf>,
    #[command(flatten)]
    keys: crate::keys::ServeKeyArgs,
    /// Serve one session, then exit with its status.
    #[arg(long)]
    once: bool,
    /// Print `LINERATE <version> LISTEN <addr>` on stdout once listening.
    #[arg(long)]
    announce: bool,
    /// Most sessions at once.
    #[arg(long, default_value_t = 64)]
    max_sessions: usize,
    /// Seconds a client has from connecting to its first request, however slowly it sends.
    #[arg(long, default_value_t = 10)]
    handshake_timeout: u64,
    /// Receive buffers all copy sessions together may reserve: a size (2GiB), or a bare number
    /// of MiB; a push reserves streams × its chunk size (at most 256 MiB) when it starts, and is
    /// refused as busy when that is not free.
    #[arg(long, value_name = "SIZE", default_value = "1GiB", value_parser = parse_buffer_memory)]
    max_buffer_memory: u64,
    /// On SIGTERM or SIGINT: stop accepting, let running sessions finish for this many
    /// seconds, then abort the rest cleanly (unfinished files removed, resumable ones kept) and
    /// exit 0. A second signal aborts them at once.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    shutdown_grace: u64,
    /// Seconds a stream may stay silent mid-session.
    #[arg(long, default_value_t = 300)]
    idle_timeout: u64,
    /// No per-session log lines.
    #[arg(long, short)]
    quiet: bool,
    /// Most bit/s of each copy session, both directions (a rate, as cp --bwlimit).
    /// Benchmarks are not paced (see --max-rate).
    #[arg(long, value_name = "RATE", value_parser = linerate_engine::limit::parse_limit)]
    max_rate_per_client: Option<u64>,
    /// Most bit/s of all copy sessions together; every active session gets an equal share
    /// (within its own cap), and what one leaves unused goes to the others.
    #[arg(long, value_name = "RATE", value_parser = linerate_engine::limit::parse_limit)]
    max_rate_total: Option<u64>,
    #[command(flatten)]
    ssh: crate::ssh::ServeSshArgs,
}

/// `--chunk-size`: a size in the one grammar, then the protocol's rule (a power of two from 64K
/// to 8M).
fn parse_chunk_size(s: &str) -> Result<u32, String> {
    let v = linerate_model::units::parse_size(s).map_err(|e| e.to_string())?;
    match u32::try_from(v) {
        Ok(v) if v.is_power_of_two() && (caps::MIN_CHUNK..=caps::MAX_CHUNK).contains(&v) => Ok(v),
        _ => Err(format!("chunk size must be a power of two from 64K to 8M (64KiB to 8MiB), not {s} ({v} bytes)")),
    }
}

/// `--max-buffer-memory`: a size in the one grammar, in bytes; a bare number counts MiB, as the
/// flag always did.
fn parse_buffer_memory(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        let mib: u64 = t.parse().map_err(|_| format!("{t} MiB is too large"))?;
        return mib.checked_mul(1 << 20).ok_or_else(|| format!("{t} MiB is too large"));
    }
    linerate_model::units::parse_size(t).map_err(|e| e.to_string())
}

/// Where the copy goes.
#[derive(Debug, PartialEq, Eq)]
enum Dest {
    Remote { host: String, port: u16, path: Vec<u8> },
    Local(PathBuf),
}

fn parse_dest(p: &Path) -> Result<Dest> {
    let b = p.as_os_str().as_bytes();
    let Ok(s) = std::str::from_utf8(b) else {
        return Ok(Dest::Local(p.to_path_buf()));
    };
    if s.starts_with('/') || s.starts_with("./") || s.starts_with("../") || !s.contains(':') {
        return Ok(Dest::Local(p.to_path_buf()));
    }
    let (host, rest) = if let Some(r) = s.strip_prefix('[') {
        let (h, rest) = r.split_once("]:").ok_or_else(|| anyhow!("'{s}': expected [ADDR]:PORT:PATH"))?;
        (h.to_string(), rest)
    } else {
        let (h, rest) = s.split_once(':').ok_or_else(|| anyhow!("'{s}': expected HOST:PORT:PATH"))?;
        (h.to_string(), rest)
    };
    let (port, path) = rest
        .split_once(':')
        .ok_or_else(|| anyhow!("'{s}': expected HOST:PORT:PATH (prefix a local path containing ':' with ./)"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| anyhow!("'{s}': port '{port}' is not a number (prefix a local path containing ':' with ./)"))?;
    if host.is_empty() {
        bail!("'{s}': empty host");
    }
    Ok(Dest::Remote { host, port, path: path.as_bytes().to_vec() })
}

fn default_streams() -> u16 {
    std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(2, 8) as u16
}

/// A local `linerate serve --once` child, listening on loopback, holding a fresh key.
pub(crate) struct LocalServer {
    child: Child,
    addr: SocketAddr,
}

fn spawn_local_server(root: &Path, secret: &Secret) -> Result<LocalServer> {
    let exe = std::env::current_exe().context("finding the linerate executable")?;
    let mut child = Command::new(exe)
        .args(["serve", "--listen", "127.0.0.1:0", "--key-file", "-", "--once", "--announce", "--quiet", "--root"])
        .arg(root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting the local server process")?;
    // The key goes through the inherited pipe, never argv or the environment.
    {
        let mut stdin = child.stdin.take().ok_or_else(|| anyhow!("no pipe to the server"))?;
        stdin.write_all(format!("{}\n", secret.to_hex()).as_bytes()).context("passing the key to the local server")?;
    }
    let stdout = child.stdout.take().ok_or_else(|| anyhow!("no pipe from the server"))?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).context("reading the local server's address")?;
    let addr = line
        .strip_prefix("LINERATE ")
        .and_then(|r| r.split_once(" LISTEN "))
        .and_then(|(_, a)| a.trim().parse().ok())
        .ok_or_else(|| anyhow!("the local server did not start (it said {:?})", line.trim()))?;
    Ok(LocalServer { child, addr })
}

/// Split a local destination into the server root and the path beneath it.
fn local_root(dest: &Path) -> Result<(PathBuf, Vec<u8>)> {
    if dest.is_dir() {
        let root = dest.canonicalize().with_context(|| format!("{}", dest.display()))?;
        return Ok((root, Vec::new()));
    }
    let name = dest.file_name().ok_or_else(|| anyhow!("{}: destination has no file name", dest.display()))?;
    let parent = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let root = parent.canonicalize().with_context(|| format!("destination directory {}", parent.display()))?;
    Ok((root, name.as_bytes().to_vec()))
}

/// Run a copy; used by `cp` and `demo`. Returns the report and the exit code.
pub fn copy_to(
    sources: Vec<PathBuf>,
    dest: &Path,
    key_file: Option<&Path>,
    cfg_fn: impl FnMut(&mut CopyConfig),
    quiet: bool,
) -> Result<(CopyReport, u8), (anyhow::Error, u8)> {
    let keys = crate::keys::ClientKeyArgs { key_file: key_file.map(Path::to_path_buf), ..Default::default() };
    copy_showing(sources, dest, &keys, cfg_fn, Show { quiet, ..Show::default() })
}

/// [`copy_to`], authenticating to a running server with `keys` and showing progress as `show`
/// says.
pub fn copy_showing(
    sources: Vec<PathBuf>,
    dest: &Path,
    keys: &crate::keys::ClientKeyArgs,
    mut cfg_fn: impl FnMut(&mut CopyConfig),
    show: Show,
) -> Result<(CopyReport, u8), (anyhow::Error, u8)> {
    let usage = |e: anyhow::Error| (e, exit::USAGE);
    // A pull: one remote source, a local destination.
    if let ([src], Dest::Local(into)) = (sources.as_slice(), parse_dest(dest).map_err(usage)?) {
        if let Ok(Dest::Remote { host, port, path }) = parse_dest(src) {
            return pull_to(&host, port, &path, &into, keys, cfg_fn, show);
        }
    }
    for s in &sources {
        if let Ok(Dest::Remote { .. }) = parse_dest(s) {
            if std::fs::symlink_metadata(s).is_err() {
                return Err(usage(anyhow!(
                    "{}: a pull takes exactly one remote source and a local destination",
                    s.display()
                )));
            }
        }
    }
    for s in &sources {
        if std::fs::symlink_metadata(s).is_err() {
            return Err(usage(anyhow!("{}: no such file or directory", s.display())));
        }
    }
    let (addr, secret, key_auth, dest_path, mut local) = match parse_dest(dest).map_err(usage)? {
        Dest::Remote { host, port, path } => {
            let (secret, key_auth) = keys.resolve(&host, port, "a remote destination").map_err(usage)?;
            (resolve(&host, port)?, secret, key_auth, path, None)
        }
        Dest::Local(p) => {
            let (root, path) = local_root(&p).map_err(usage)?;
            let secret = Secret::generate().map_err(|e| usage(e.into()))?;
            let server = spawn_local_server(&root, &secret).map_err(|e| (e, exit::SESSION))?;
            (server.addr, secret, None, path, Some(server))
        }
    };
    let mut cfg = CopyConfig::new(addr, secret, sources, dest_path);
    cfg.streams = default_streams();
    cfg_fn(&mut cfg);
    cfg.key_auth = key_auth;
    run_engine(show, |progress, sink| send::copy(&cfg, progress, sink), local.as_mut())
}

/// Pull `path` from a running server into local `into`.
fn pull_to(
    host: &str,
    port: u16,
    path: &[u8],
    into: &Path,
    keys: &crate::keys::ClientKeyArgs,
    mut cfg_fn: impl FnMut(&mut CopyConfig),
    show: Show,
) -> Result<(CopyReport, u8), (anyhow::Error, u8)> {
    let (secret, key_auth) = keys.resolve(host, port, "a remote source").map_err(|e| (e, exit::USAGE))?;
    let addr = resolve(host, port)?;
    let mut cfg = CopyConfig::new(addr, secret, Vec::new(), Vec::new());
    cfg.streams = default_streams();
    cfg_fn(&mut cfg);
    cfg.key_auth = key_auth;
    run_engine(show, |progress, sink| linerate_engine::copy::pull::pull(&cfg, path, into, progress, sink), None)
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr, (anyhow::Error, u8)> {
    (host, port)
        .to_socket_addrs()
        .with_context(|| format!("resolving {host}"))
        .map_err(|e| (e, exit::SESSION))?
        .next()
        .ok_or_else(|| (anyhow!("{host}: no address"), exit::SESSION))
}

/// Run a copy or pull with a progress bar; map its result to a report and an exit code.
pub(crate) fn run_engine(
    show: Show,
    f: impl FnOnce(Arc<Progress>, send::ErrorSink) -> Result<CopyReport, EngineError>,
    local: Option<&mut LocalServer>,
) -> Result<(CopyReport, u8), (anyhow::Error, u8)> {
    let current = Arc::new(Mutex::new(String::new()));
    let bar = Bar::target(show);
    let hook = Bar::hook(show, current.clone(), bar.clone());
    let progress = Arc::new(Progress { on_file: hook, ..Progress::default() });
    let bar = Bar::start(bar, progress.clone(), show, current);
    let handle = bar.handle();
    let sink: send::ErrorSink = Arc::new(move |m: String| Bar::println(&handle, &format!("linerate: {m}")));
    let result = f(progress, sink);
    bar.finish();
    if let Some(server) = local {
        if result.is_err() {
            let _ = server.child.kill();
        }
        let _ = server.child.wait();
    }
    match result {
        Ok(r) => {
            let code = if r.is_complete() { exit::OK } else { exit::PARTIAL };
            Ok((r, code))
        }
        Err(e) => {
            let code = exit::of(&e);
            Err((anyhow::Error::new(e), code))
        }
    }
}

/// The `--json` summary, as printed.
pub fn summary_json(r: &CopyReport) -> String {
    serde_json::to_string(&summary_doc(r)).expect("a cp summary has only numbers, strings and booleans")
}

/// The `--json` summary (the typed document `linerate-report` reads).
pub fn summary_doc(r: &CopyReport) -> CpSummary {
    let secs = |us: u64| us as f64 / 1e6;
    CpSummary {
        bytes: r.bytes,
        files: r.files,
        dirs: r.dirs,
        links: r.links,
        seconds: r.seconds,
        gbit_per_s: r.gbit_per_s(),
        streams: u32::from(r.streams),
        cipher: r.cipher.to_string(),
        complete: r.is_complete(),
        errors: CpErrors { local: r.local_errors, remote: r.server.errors },
        received: CpCounts { files: r.server.files, bytes: r.server.bytes, dirs: r.server.dirs, links: r.server.links },
        cpu: CpCpu {
            client: CpuSeconds { user_s: secs(r.client_cpu.user_us), system_s: secs(r.client_cpu.sys_us) },
            server: CpuSeconds { user_s: secs(r.server.cpu_user_us), system_s: secs(r.server.cpu_sys_us) },
        },
        peak_rss_bytes: CpPeakRss { client: r.client_peak_rss, server: r.server.peak_rss },
        direction: if r.pulled { CpDirection::Pull } else { CpDirection::Push },
        skipped: CpSkipped { files: r.skipped_files, bytes: r.skipped_bytes },
        resumed_bytes: r.resumed_bytes,
        deleted: r.deleted,
    }
}

/// A one-line human summary.
pub fn summary_line(r: &CopyReport) -> String {
    let mut extra = String::new();
    if r.skipped_files > 0 {
        extra += &format!("; {} up to date ({})", r.skipped_files, format_size(r.skipped_bytes as f64));
    }
    if r.resumed_bytes > 0 {
        extra += &format!("; resumed, {} already there", format_size(r.resumed_bytes as f64));
    }
    if r.deleted > 0 {
        extra += &format!("; {} deleted", r.deleted);
    }
    let line = format!(
        "{} files, {} in {:.2} s: {} over {} streams ({}); CPU client {:.2}s user {:.2}s sys, server {:.2}s user {:.2}s sys",
        r.files,
        format_size(r.bytes as f64),
        r.seconds,
        format_rate(r.gbit_per_s() * 1e9),
        r.streams,
        r.cipher,
        r.client_cpu.user_us as f64 / 1e6,
        r.client_cpu.sys_us as f64 / 1e6,
        r.server.cpu_user_us as f64 / 1e6,
        r.server.cpu_sys_us as f64 / 1e6,
    );
    line + &extra
}

/// Keeps the run in the report store; a failure to save is a warning, not a failed copy.
fn save_cp_run(report: &CopyReport, dest: &Path, db: Option<&Path>, quiet: bool) {
    let mut run = linerate_report::from_cp(&summary_doc(report));
    run.params.insert("destination".into(), linerate_engine::copy::walk::shown(dest).into());
    let saved = crate::report::save_run(db, &run);
    match saved {
        Ok(id) if !quiet => eprintln!("saved as run {id} (linerate report show {id})"),
        Ok(_) => {}
        Err(e) => eprintln!("linerate: warning: the run was not saved: {e:#}"),
    }
}

pub fn run_cp(a: CpArgs) -> u8 {
    let mut paths = a.paths;
    let Some(dest) = paths.pop() else {
        return exit::USAGE;
    };
    let suite = match a.cipher.as_str() {
        "aes-256-gcm" => Suite::Aes256Gcm,
        "chacha20-poly1305" => Suite::ChaCha20Poly1305,
        _ => conn::preferred_suite(),
    };
    let show = Show { quiet: a.quiet || a.json, force: a.progress, verbose: a.verbose };
    let job = match crate::ssh::classify(&paths, &dest) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("linerate: {e:#}");
            return exit::USAGE;
        }
    };
    let apply = |c: &mut CopyConfig| {
        if let Some(s) = a.streams {
            c.streams = s.clamp(1, caps::MAX_STREAMS);
        }
        c.chunk_size = a.chunk_size;
        c.verify = a.verify;
        c.fsync = a.fsync;
        c.suite = suite;
        c.timeout = Duration::from_secs(a.timeout.max(1));
        c.stall_timeout = Duration::from_secs(a.stall_timeout.max(1));
        c.checksum = a.checksum;
        c.delete = a.delete;
        c.dry_run = a.dry_run;
        let to_stderr = a.json;
        c.list = Some(send::ListSink(Arc::new(move |line: &str| {
            if to_stderr {
                eprintln!("{line}");
            } else {
                println!("{line}");
            }
        })));
        c.bwlimit = a.bwlimit;
    };
    if job.is_some() && (a.keys.key_file.is_some() || a.keys.identity.is_some() || a.keys.strict_host_key) {
        eprintln!(
            "linerate: --key-file, --identity and --strict-host-key are for a running server (HOST:PORT:PATH); \
             over ssh ([user@]host:PATH), ssh authenticates and the remote side makes a one-time key"
        );
        return exit::USAGE;
    }
    let r = match job {
        Some(job) => crate::ssh::copy(job, &a.ssh, apply, show),
        None => copy_showing(paths, &dest, &a.keys, apply, show),
    };
    match r {
        Ok((report, code)) => {
            if a.json {
                println!("{}", summary_json(&report));
            } else if !a.quiet {
                eprintln!("{}", summary_line(&report));
            }
            if !a.no_save {
                save_cp_run(&report, &dest, a.db.as_deref(), a.quiet || a.json);
            }
            if code != exit::OK {
                eprintln!(
                    "linerate: {} entries failed ({} here, {} on the receiver); see above",
                    report.local_errors + report.server.errors,
                    report.local_errors,
                    report.server.errors
                );
            }
            code
        }
        Err((e, code)) => {
            eprintln!("linerate: {e:#}");
            code
        }
    }
}

pub fn run_serve(a: ServeArgs) -> u8 {
    if a.ssh.ssh {
        let (hs, idle) = (Duration::from_secs(a.handshake_timeout.max(1)), Duration::from_secs(a.idle_timeout.max(1)));
        return crate::ssh::run_serve_ssh(&a.ssh, hs, idle);
    }
    let keys = match a.keys.config() {
        Ok(k) => k,
        Err(e) => {
            eprintln!("linerate serve: {e:#}");
            return exit::USAGE;
        }
    };
    let secret = match (&a.key_file, &keys) {
        (Some(f), _) if f.as_os_str() == "-" => Secret::read_from(std::io::stdin().lock()),
        (Some(f), _) => Secret::load(f),
        // Keys only: a secret nobody holds, and the server refuses the secret mode outright.
        (None, Some(_)) => Secret::generate(),
        (None, None) => {
            eprintln!(
                "linerate serve: --key-file or --authorized-keys is required (or --ssh, when started by linerate cp)"
            );
            return exit::USAGE;
        }
    };
    let secret = match secret {
        Ok(s) => s,
        Err(e) => {
            eprintln!("linerate serve: {e}");
            return exit::USAGE;
        }
    };
    let listen = match a.listen.to_socket_addrs().ok().and_then(|mut i| i.next()) {
        Some(l) => l,
        None => {
            eprintln!("linerate serve: cannot parse listen address '{}'", a.listen);
            return exit::USAGE;
        }
    };
    let mut cfg = ServerConfig::bench_only(listen, secret);
    cfg.root = a.root;
    cfg.bench.limits.max_duration_ms = a.max_duration.saturating_mul(1000);
    cfg.bench.limits.max_connections = a.max_connections;
    cfg.bench.limits.max_rate_bps = a.max_rate.unwrap_or(u64::MAX);
    cfg.bench.max_tests = a.max_tests.max(1);
    cfg.bench.handshake_timeout = Duration::from_secs(a.handshake_timeout.max(1));
    cfg.max_handshakes_per_source = a.max_handshakes_per_source.max(1);
    cfg.once = a.once;
    cfg.first_connect_deadline = a.once.then(|| Duration::from_secs(a.ssh.connect_deadline.max(1)));
    cfg.max_sessions = a.max_sessions.max(1);
    cfg.max_buffer_memory = usize::try_from(a.max_buffer_memory).unwrap_or(usize::MAX).max(1 << 20);
    cfg.shutdown_grace = Duration::from_secs(a.shutdown_grace);
    cfg.handshake_timeout = Duration::from_secs(a.handshake_timeout.max(1));
    cfg.idle_timeout = Duration::from_secs(a.idle_timeout.max(1));
    cfg.log = !a.quiet;
    cfg.rate_per_client = a.max_rate_per_client;
    cfg.rate_total = a.max_rate_total;
    cfg.accept_secret = a.key_file.is_some();
    let key_note = keys.as_ref().zip(a.keys.authorized_keys.as_deref()).map(|(k, f)| crate::keys::host_key_note(k, f));
    cfg.keys = keys;
    let server = match Server::bind(cfg) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("linerate serve: {e}");
            return exit::USAGE;
        }
    };
    if a.announce {
        println!("LINERATE {} LISTEN {}", linerate_proto::PROTOCOL_VERSION, server.local_addr());
        let _ = std::io::stdout().flush();
    } else if !a.quiet {
        eprintln!("linerate serve: listening on {}", server.local_addr());
    }
    if let Some(note) = key_note {
        // Printed even with --quiet: clients compare this fingerprint on first contact.
        eprintln!("{note}");
    }
    if !a.quiet && (a.max_rate_per_client.is_some() || a.max_rate_total.is_some()) {
        let cap = |r: Option<u64>| r.map_or("none".to_string(), |r| format_rate(r as f64));
        eprintln!(
            "linerate serve: copy sessions capped at {} each, {} in total (split fairly)",
            cap(a.max_rate_per_client),
            cap(a.max_rate_total)
        );
    }
    if let Err(e) = stop_on_signals(server.stopper(), a.shutdown_grace, a.quiet) {
        eprintln!("linerate serve: installing signal handlers: {e}");
        return exit::SESSION;
    }
    match server.run() {
        Ok(Some(recv::Outcome::Done(s))) if s.errors == 0 => exit::OK,
        Ok(Some(recv::Outcome::Done(_))) => exit::PARTIAL,
        Ok(Some(recv::Outcome::Aborted(_))) => exit::SESSION,
        Ok(None) => exit::OK,
        Err(e) => {
            eprintln!("linerate serve: {e}");
            exit::SESSION
        }
    }
}

/// SIGTERM and SIGINT stop the server: the first lets running sessions finish within the grace,
/// a second aborts them now. A watcher thread turns the handlers' flag into
/// [`linerate_engine::server::Stopper::stop`].
fn stop_on_signals(stopper: linerate_engine::server::Stopper, grace: u64, quiet: bool) -> std::io::Result<()> {
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, flag.clone())?;
    }
    std::thread::spawn(move || {
        let mut signals = 0;
        loop {
            std::thread::sleep(Duration::from_millis(50));
            if !flag.swap(false, SeqCst) {
                continue;
            }
            signals += 1;
            if !quiet {
                if signals == 1 {
                    eprintln!("linerate serve: stopping: no new sessions; running ones have {grace} s to finish (signal again to abort them now)");
                } else {
                    eprintln!("linerate serve: aborting the running sessions");
                }
            }
            stopper.stop();
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_remote_and_local_destinations() {
        let r = |s: &str| parse_dest(Path::new(s)).unwrap();
        assert_eq!(r("host:7878:a/b"), Dest::Remote { host: "host".into(), port: 7878, path: b"a/b".to_vec() });
        assert_eq!(r("[::1]:9:x"), Dest::Remote { host: "::1".into(), port: 9, path: b"x".to_vec() });
        assert_eq!(r("h:1:"), Dest::Remote { host: "h".into(), port: 1, path: vec![] });
        assert_eq!(r("plain/dir"), Dest::Local("plain/dir".into()));
        assert_eq!(r("./a:b:c"), Dest::Local("./a:b:c".into()));
        assert_eq!(r("/abs:1:x"), Dest::Local("/abs:1:x".into()));
        assert!(parse_dest(Path::new("host:notaport:x")).is_err());
        assert!(parse_dest(Path::new("host:1")).is_err());
        assert!(parse_dest(Path::new(":1:x")).is_err());
    }

    #[test]
    fn parses_chunk_sizes() {
        assert_eq!(parse_chunk_size("1M"), Ok(1 << 20));
        assert_eq!(parse_chunk_size("64K"), Ok(64 << 10));
        assert_eq!(parse_chunk_size("8MiB"), Ok(8 << 20));
        assert_eq!(parse_chunk_size("1048576"), Ok(1 << 20));
        assert!(parse_chunk_size("3M").is_err());
        assert!(parse_chunk_size("16M").is_err());
        assert!(parse_chunk_size("32K").is_err());
        assert!(parse_chunk_size("x").is_err());
        assert!(parse_chunk_size("8G").is_err());
        let e = parse_chunk_size("1MB").unwrap_err();
        assert!(e.contains("power of two") && e.contains("1000000 bytes"), "{e}");
    }

    #[test]
    fn buffer_memory_is_a_size_or_a_number_of_mib() {
        assert_eq!(parse_buffer_memory("1024"), Ok(1 << 30));
        assert_eq!(parse_buffer_memory("1GiB"), Ok(1 << 30));
        assert_eq!(parse_buffer_memory("512M"), Ok(512 << 20));
        assert_eq!(parse_buffer_memory("2GB"), Ok(2_000_000_000));
        assert!(parse_buffer_memory("99999999999999999999").is_err());
        assert!(parse_buffer_memory("-1").is_err());
        assert!(parse_buffer_memory("lots").is_err());
    }
}
