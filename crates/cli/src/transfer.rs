//! Running a copy or a pull the way every command shows it (`cp`, `cp` over ssh, `demo`): a local
//! receiver when the destination is a path, the progress bar, the summary line and JSON document,
//! the run saved to the store, and the exit code.

use crate::error::{Error, Kind, ResultExt};
use crate::progress::{Bar, Show};
use anyhow::{anyhow, Context, Result};
use linerate_copy::send::{self, CopyConfig, CopyReport, Progress};
use linerate_model::doc::cp::{
    CpCounts, CpCpu, CpDirection, CpErrors, CpPeakRss, CpSkipped, CpSummary, CpTimeline, CpuSeconds,
};
use linerate_model::shutdown::Stopper;
use linerate_model::units::{count, format_size, RateUnit};
use linerate_net::auth::secret::Secret;
use linerate_net::EngineError;
use linerate_proto::ErrorCode;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A local `linerate serve --once` child, listening on loopback, holding a fresh key.
pub(crate) struct LocalServer {
    child: Child,
    addr: SocketAddr,
}

pub(crate) fn spawn_local_server(root: &Path, secret: &Secret) -> Result<LocalServer> {
    let exe = std::env::current_exe().context("finding the linerate executable")?;
    let mut child = Command::new(exe)
        .args(["serve", "--listen", "127.0.0.1:0", "--key-file", "-", "--once", "--announce", "--quiet"])
        // The same user as the client: owners, groups and devices as that user's privileges allow
        // (as rsync's local receiver), not a daemon's refusal.
        .args(["--keep-owners", "--allow-devices", "--root"])
        .arg(root)
        // Its own process group: the terminal's Ctrl-C reaches only the client, which then ends
        // the session in order (the server keeps what arrived and gives directories their modes).
        .process_group(0)
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

/// Copy `config.sources` to `config.dest` beneath `root` on this host, through a server process
/// of this user on loopback holding a fresh key.
pub(crate) fn copy_here(mut config: CopyConfig, root: &Path, show: Show) -> crate::error::Result<CopyReport> {
    let secret = Secret::generate().map_err(|e| Error::new(Kind::Usage, e))?;
    let mut server = spawn_local_server(root, &secret).session()?;
    (config.addr, config.secret) = (server.addr, secret);
    watching_writeback(true, &config, || {
        run_engine(show, |progress, sink| send::copy(&config, progress, sink), Some(&mut server))
    })
}

/// Copy `config.sources` to a running server (`config` has its address and credentials), or
/// pull `from` it `into` a local path.
pub(crate) fn copy_daemon(
    config: CopyConfig,
    pull: Option<(&[u8], &Path)>,
    show: Show,
) -> crate::error::Result<CopyReport> {
    match pull {
        None => watching_writeback(false, &config, || run_engine(show, |p, sink| send::copy(&config, p, sink), None)),
        Some((from, into)) => watching_writeback(true, &config, || {
            run_engine(show, |p, sink| linerate_copy::pull::pull(&config, from, into, p, sink), None)
        }),
    }
}

/// Runs a copy whose destination is on this host (`here`) and, unless it fsyncs or changes
/// nothing, notes in its report how much of it was still in the page cache at its end (issue 43:
/// 340 MB–1.3 GB of a 2 GB copy to ext4; counting the `sync`, the rate was 8–11 % lower). The
/// summary then says its rate is to the page cache. `--fsync` is the way to count the disk.
fn watching_writeback(
    here: bool,
    cfg: &CopyConfig,
    run: impl FnOnce() -> crate::error::Result<CopyReport>,
) -> crate::error::Result<CopyReport> {
    let before = (here && !cfg.fsync && !cfg.dry_run).then(dirty_bytes).flatten();
    let mut r = run()?;
    if let (Some(a), Some(b)) = (before, before.and_then(|_| dirty_bytes())) {
        r.page_cache_bytes = linerate_model::doc::cp::unwritten_share(r.moved(), a, b);
    }
    Ok(r)
}

/// The host's data in the page cache not yet on a disk: `Dirty` + `Writeback` of
/// `/proc/meminfo`, bytes; `None` where it cannot be read.
fn dirty_bytes() -> Option<u64> {
    parse_dirty(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

/// `Dirty:` + `Writeback:` (in kB, as the kernel writes them: KiB) of a `/proc/meminfo` text.
fn parse_dirty(meminfo: &str) -> Option<u64> {
    let field = |name: &str| {
        meminfo.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix(':')?.trim();
            rest.strip_suffix("kB").unwrap_or(rest).trim().parse::<u64>().ok()
        })
    };
    Some(field("Dirty")?.saturating_add(field("Writeback")?).saturating_mul(1024))
}

/// Run a copy or pull with a progress bar; map its failure to a kind.
pub(crate) fn run_engine(
    show: Show,
    f: impl FnOnce(Arc<Progress>, send::ErrorSink) -> Result<CopyReport, EngineError>,
    local: Option<&mut LocalServer>,
) -> crate::error::Result<CopyReport> {
    let current = Arc::new(Mutex::new(String::new()));
    let bar = Bar::target(show);
    let hook = Bar::hook(show, current.clone(), bar.clone());
    // Ctrl-C or SIGTERM ends the session in order (the process's signal thread stops `cancel`);
    // a second one hurries the stop, and `main` ends the process at once (`ending`).
    let stopper = Stopper::new();
    let _ = crate::ending::interrupt_on_signals(&stopper);
    // A closed standard output or error (`| head`) interrupts the copy the same way, quietly.
    crate::out::stop_on_close(&stopper);
    let progress = Arc::new(Progress { on_file: hook, cancel: stopper.shutdown(), ..Progress::default() });
    let bar = Bar::start(bar, progress.clone(), show, current);
    let handle = bar.handle();
    let sink: send::ErrorSink = Arc::new(move |m: String| Bar::println(&handle, &format!("linerate: {m}")));
    let result = f(progress.clone(), sink);
    let returned = std::time::Instant::now();
    bar.finish();
    let is_local = local.is_some();
    if let Some(server) = local {
        let interrupted = matches!(result, Err(EngineError::Interrupted));
        if result.is_err() && !(interrupted && exited_within(&mut server.child, Duration::from_secs(10))) {
            let _ = server.child.kill();
        }
        let _ = server.child.wait();
    }
    match result {
        // Whatever the copy did, its report (or its listing) was cut: say nothing more.
        _ if crate::out::closed() => Err(Error::reported(Kind::Closed)),
        Ok(mut r) => {
            r.timeline = Some(timeline(&r, returned, std::time::Instant::now()));
            Ok(r)
        }
        Err(EngineError::Interrupted) => {
            let p = &progress;
            let (files, bytes) = (p.files.load(Relaxed), p.bytes.load(Relaxed));
            let (found_files, found_bytes) = (p.found_files.load(Relaxed), p.found_bytes.load(Relaxed));
            let more = if p.walk_done.load(Relaxed) == 0 { "+" } else { "" };
            // Counted as sent: the receiver keeps each file it had finished when told to stop,
            // which may be a few fewer (it says nothing more once interrupted).
            Err(Error::new(
                Kind::Interrupted,
                anyhow!(
                    "interrupted after sending {files} of {found_files}{more} {} ({} of {}{more}); the files \
                     finished at the destination are kept; run the same command to resume",
                    if found_files == 1 && more.is_empty() { "file" } else { "files" },
                    format_size(bytes as f64),
                    format_size(found_bytes as f64)
                ),
            ))
        }
        // The destination's file system took no more: the receiver ended the session at the
        // first such write and said which file system and how much it wrote; add what was due.
        Err(
            ref e @ (EngineError::Remote { code: ErrorCode::Storage, ref message }
            | EngineError::Aborted { code: ErrorCode::Storage, ref message }),
        ) => {
            let p = &progress;
            let more = if p.walk_done.load(Relaxed) == 0 { "+" } else { "" };
            let verb = if matches!(e, EngineError::Aborted { .. }) { "received" } else { "sent" };
            Err(Error::new(
                Kind::Session,
                anyhow!(
                    "the copy stopped: {message}; {} of {}{more} had been {verb}. Once the destination can \
                     take the rest, the same command goes on from there",
                    format_size(p.bytes.load(Relaxed) as f64),
                    format_size(p.found_bytes.load(Relaxed) as f64)
                ),
            ))
        }
        // A local copy's receiver is this machine's own process: no "server" to blame.
        Err(EngineError::Remote { code, message }) if is_local => Err(Error::new(
            Kind::of_engine(&EngineError::Remote { code, message: String::new() }),
            anyhow!("the copy to the local destination ended: {message} ({})", code.describe()),
        )),
        Err(e) => Err(e.into()),
    }
}

/// The whole command's timeline: the session's phases (a push's own; a pull's as one transfer)
/// between the time before it (from `main`) and after it (`returned` from the session, `now`).
fn timeline(r: &CopyReport, returned: std::time::Instant, now: std::time::Instant) -> CpTimeline {
    let session = r.timeline.unwrap_or(CpTimeline { transfer_s: r.seconds, ..CpTimeline::default() });
    let total_s = now.saturating_duration_since(crate::started()).as_secs_f64();
    let end_s = now.saturating_duration_since(returned).as_secs_f64();
    let inside = session.connect_s + session.transfer_s + session.finish_s + session.close_s;
    CpTimeline { start_s: (total_s - end_s - inside).max(0.0), end_s, total_s, ..session }
}

/// Whether `child` exits within `limit` (it is not killed).
fn exited_within(child: &mut Child, limit: Duration) -> bool {
    linerate_net::proc::exit_within(child, limit).is_some()
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
        dry_run: r.dry_run.then_some(CpSkipped { files: r.would_send.0, bytes: r.would_send.1 }),
        phases: r.phases,
        timeline: r.timeline,
        page_cache_bytes: r.page_cache_bytes,
    }
}

/// A one-line human summary, rates in `unit` (the progress line's).
pub fn summary_line(r: &CopyReport, unit: RateUnit) -> String {
    if r.dry_run {
        // Nothing moved: say what would, in the same words as the listing above it.
        let verb = if r.pulled { "receive" } else { "send" };
        let mut line = format!(
            "dry run, nothing changed: would {verb} {} ({})",
            count(r.would_send.0, "file"),
            format_size(r.would_send.1 as f64)
        );
        if r.deleted > 0 {
            line += &format!(", would delete {}", r.deleted);
        }
        if r.skipped_files > 0 {
            line += &format!("; {} up to date ({})", r.skipped_files, format_size(r.skipped_bytes as f64));
        }
        return line;
    }
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
    // Files the receiver committed: one sent whole but not written (a full disk) is not copied.
    let failed = r.files.saturating_sub(r.server.files);
    if failed > 0 {
        extra += &format!("; {failed} sent but not written (see above)");
    }
    // Files the receiver would not take (beneath a directory it could not create, reported once).
    if r.refused_files > 0 {
        extra += &format!("; {} not copied (see above)", r.refused_files);
    }
    // A copy too small or too short for a rate shows none (`model::doc::cp::rate_bps`).
    let rate = r.gbit_per_s().map_or(String::new(), |g| format!(": {}", unit.format(g * 1e9 / 8.0)));
    if let (Some(b), true) = (r.page_cache_bytes, r.gbit_per_s().is_some()) {
        extra += &format!(
            "; rate to the page cache: {} still being written to disk (--fsync counts the disk)",
            format_size(b as f64)
        );
    }
    let line = format!(
        "{}, {} in {:.2} s{rate} over {} ({}); CPU client {:.2}s user {:.2}s sys, server {:.2}s user {:.2}s sys",
        count(r.files.min(r.server.files), "file"),
        format_size(r.bytes as f64),
        r.seconds,
        count(u64::from(r.streams), "stream"),
        r.cipher,
        r.client_cpu.user_us as f64 / 1e6,
        r.client_cpu.sys_us as f64 / 1e6,
        r.server.cpu_user_us as f64 / 1e6,
        r.server.cpu_sys_us as f64 / 1e6,
    );
    line + &extra
}

/// A copy that sent nothing and changed nothing: no file or byte sent, nothing resumed or
/// deleted, no error (every file was up to date). Directories and symlinks are not counted: a
/// sync sends every one of them whatever its state. Such a run measures nothing, and a store
/// kept by a periodic sync would fill with them, so it is not saved.
pub(crate) fn changed_nothing(r: &CopyReport) -> bool {
    r.bytes == 0
        && r.files == 0
        && r.resumed_bytes == 0
        && r.deleted == 0
        && r.local_errors == 0
        && r.server.errors == 0
        && r.server.files == 0
        && r.server.bytes == 0
}

/// Keeps the run in the report store, unless it [changed nothing](changed_nothing); a failure
/// to save is a warning, not a failed copy. A dry run is never given to it (`cp.rs`).
pub(crate) fn save_cp_run(report: &CopyReport, dest: &Path, db: Option<&Path>, quiet: bool) -> crate::error::Result {
    if changed_nothing(report) {
        if !quiet {
            errln!("nothing was sent or changed: not saved as a run")?;
        }
        return Ok(());
    }
    let mut run = linerate_report::from_cp(&summary_doc(report));
    run.params.destination = Some(linerate_net::error::shown(dest));
    let saved = linerate_report::store::save_run(db, &run);
    match saved {
        Ok(id) if !quiet => errln!("saved as run {id} (linerate report show {id})"),
        Ok(_) => Ok(()),
        Err(e) => errln!("linerate: warning: the run was not saved: {:#}", anyhow::Error::new(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(files: u64, bytes: u64, deleted: u64) -> CopyReport {
        CopyReport {
            bytes,
            files,
            dirs: 3,
            links: 1,
            seconds: 0.2,
            streams: 2,
            cipher: "aes-256-gcm",
            local_errors: 0,
            server: Default::default(),
            client_cpu: Default::default(),
            client_peak_rss: 1 << 20,
            skipped_files: 10,
            skipped_bytes: 4096,
            resumed_bytes: 0,
            deleted,
            pulled: false,
            dry_run: false,
            would_send: (0, 0),
            phases: None,
            timeline: None,
            refused_files: 0,
            skipped_specials: 0,
            page_cache_bytes: None,
        }
    }

    #[test]
    fn the_summary_counts_only_files_written_and_a_dry_run_says_what_it_would_do() {
        let mut r = report(1000, 3_000_000, 0);
        r.server.files = 999; // one failed on a full disk after it was sent
        let line = summary_line(&r, RateUnit::Bits);
        assert!(line.starts_with("999 files, ") && line.contains("1 sent but not written"), "{line}");
        let mut dry = report(0, 0, 2);
        (dry.dry_run, dry.would_send) = (true, (607, 1_900_000_000));
        let line = summary_line(&dry, RateUnit::Bits);
        assert_eq!(
            line,
            "dry run, nothing changed: would send 607 files (1.9 GB), would delete 2; 10 up to date (4.1 kB)"
        );
    }

    #[test]
    fn summary_lines() {
        // One file, one stream, a tiny copy (no rate: its time is the set-up), then a real one
        // in bits (the default) and in bytes (--bytes), and a one-file dry run.
        let mut one = report(1, 4, 0);
        (one.server.files, one.streams, one.skipped_files) = (1, 1, 0);
        let mut big = report(1200, 3_000_000_000, 0);
        big.server.files = 1200;
        big.seconds = 2.5;
        let mut dry = report(0, 0, 0);
        (dry.dry_run, dry.would_send, dry.skipped_files) = (true, (1, 4096), 0);
        // a copy to this host that ended with 340 MB of it still dirty: its rate is to the cache
        let mut cached = big.clone();
        cached.page_cache_bytes = Some(340_000_000);
        let lines = [
            summary_line(&one, RateUnit::Bits),
            summary_line(&big, RateUnit::Bits),
            summary_line(&big, RateUnit::Bytes),
            summary_line(&dry, RateUnit::Bits),
            summary_line(&cached, RateUnit::Bits),
        ];
        insta::assert_snapshot!(lines.join("\n"));
    }

    #[test]
    fn a_tiny_copy_has_no_rate_in_its_json() {
        let mut six = report(1, 6, 0);
        (six.server.files, six.seconds) = (1, 0.322);
        let j: serde_json::Value = serde_json::from_str(&summary_json(&six)).unwrap();
        assert!(j["gbit_per_s"].is_null(), "{j}");
        assert!(j.get("page_cache_bytes").is_none(), "not measured: absent: {j}");
        let mut big = report(1, 3_000_000_000, 0);
        big.seconds = 2.5;
        let j: serde_json::Value = serde_json::from_str(&summary_json(&big)).unwrap();
        assert!(j["gbit_per_s"].as_f64().is_some_and(|g| (g - 9.6).abs() < 1e-9), "{j}");
    }

    #[test]
    fn dirty_data_is_dirty_plus_writeback_from_meminfo() {
        let m =
            "MemTotal:       16318820 kB\nDirty:            332032 kB\nWriteback:         1024 kB\nAnonPages: 1 kB\n";
        assert_eq!(parse_dirty(m), Some((332_032 + 1024) * 1024));
        assert_eq!(parse_dirty("Dirty: 1 kB\n"), None, "no Writeback line");
        assert_eq!(parse_dirty("Dirty: x kB\nWriteback: 0 kB\n"), None);
        assert_eq!(parse_dirty("DirtyX: 1 kB\nDirty: 2 kB\nWriteback: 0 kB\n"), Some(2048), "the exact name");
    }

    #[test]
    fn a_sync_with_everything_up_to_date_changed_nothing() {
        assert!(changed_nothing(&report(0, 0, 0)));
        assert!(!changed_nothing(&report(1, 0, 0)), "an empty file was sent");
        assert!(!changed_nothing(&report(1, 10, 0)));
        assert!(!changed_nothing(&report(0, 0, 2)), "entries were deleted");
        let mut failed = report(0, 0, 0);
        failed.local_errors = 1;
        assert!(!changed_nothing(&failed), "a copy that failed is worth keeping");
    }
}
