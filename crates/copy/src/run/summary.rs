//! What a copy's end says: the `--json` document ([`summary_doc`], the typed `CpSummary`
//! `linerate-report` reads) and the one-line human summary ([`summary_line`]); and whether a
//! run [changed nothing](changed_nothing), so is not worth keeping.

use crate::send::CopyReport;
use linerate_model::doc::cp::{CpCounts, CpCpu, CpDirection, CpErrors, CpPeakRss, CpSkipped, CpSummary, CpuSeconds};
use linerate_model::units::{count, format_size, RateUnit};

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

/// What a copy that is not [complete](CopyReport::is_complete) failed in: how many entries, here
/// and on the receiver (`None` when complete).
pub fn failures(r: &CopyReport) -> Option<String> {
    (!r.is_complete()).then(|| {
        format!(
            "{} entries failed ({} here, {} on the receiver); see above",
            r.local_errors + r.server.errors,
            r.local_errors,
            r.server.errors
        )
    })
}

/// The one note for the devices, FIFOs and sockets a copy without `-D` skipped (rsync says
/// "skipping non-regular file" for each); `None` when none.
pub fn skipped_specials(r: &CopyReport) -> Option<String> {
    (r.skipped_specials > 0).then(|| {
        format!("skipped {} (device, FIFO or socket): -D copies them", count(r.skipped_specials, "non-regular file"))
    })
}

/// A copy that sent nothing and changed nothing: no file or byte sent, nothing resumed or
/// deleted, no error (every file was up to date). Directories and symlinks are not counted: a
/// sync sends every one of them whatever its state. Such a run measures nothing, and a store
/// kept by a periodic sync would fill with them, so it is not saved.
pub fn changed_nothing(r: &CopyReport) -> bool {
    r.bytes == 0
        && r.files == 0
        && r.resumed_bytes == 0
        && r.deleted == 0
        && r.local_errors == 0
        && r.server.errors == 0
        && r.server.files == 0
        && r.server.bytes == 0
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
        let j: serde_json::Value = serde_json::to_value(summary_doc(&six)).unwrap();
        assert!(j["gbit_per_s"].is_null(), "{j}");
        assert!(j.get("page_cache_bytes").is_none(), "not measured: absent: {j}");
        let mut big = report(1, 3_000_000_000, 0);
        big.seconds = 2.5;
        let j: serde_json::Value = serde_json::to_value(summary_doc(&big)).unwrap();
        assert!(j["gbit_per_s"].as_f64().is_some_and(|g| (g - 9.6).abs() < 1e-9), "{j}");
    }

    #[test]
    fn failures_and_skipped_specials_are_said_only_when_there_are_some() {
        let mut r = report(3, 30, 0);
        r.server.files = 3;
        assert_eq!((failures(&r), skipped_specials(&r)), (None, None));
        (r.local_errors, r.server.errors, r.skipped_specials) = (1, 2, 1);
        assert_eq!(failures(&r).as_deref(), Some("3 entries failed (1 here, 2 on the receiver); see above"));
        assert_eq!(
            skipped_specials(&r).as_deref(),
            Some("skipped 1 non-regular file (device, FIFO or socket): -D copies them")
        );
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
