//! A latency histogram as HdrHistogram's percentile distribution text (`.hgrm`), the format of
//! Java's `AbstractHistogram.outputPercentileDistribution` that wrk2 and HdrHistogramJS write
//! too, so that HdrHistogram's online plotter and `hdr-plot` draw a linerate test's latency
//! (issue 43: `linerate bench --hgrm`). The rows are the `hdrhistogram` crate's quantile
//! iteration; only the columns are laid out here, as Java lays them out. The files are written
//! whole or not at all ([`write_atomically`]), their paths checked before the test
//! ([`check_writable`]).

use crate::TestResult;
use hdrhistogram::Histogram;
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// Quantile steps per half of the distance left to 100 %: Java's and wrk2's default, which
/// gives rows at 0, 10, … 50 %, then 55, … 75 %, 77.5 %, and so on into the tail.
pub const TICKS_PER_HALF_DISTANCE: u32 = 5;

/// Nanoseconds per microsecond: the `.hgrm` values are microseconds, as wrk2's are.
pub const NS_PER_US: f64 = 1000.0;

/// The percentile distribution of `h` as Java prints it with `percentileTicksPerHalfDistance`
/// `ticks` and `outputValueUnitScalingRatio` `scale` (the recorded unit per printed unit): a
/// header, one row per quantile step (value, quantile, count up to it, 1/(1−quantile); the 100 %
/// row without the last column), and the mean, standard deviation, maximum, count and the
/// histogram's layout. Values have as many decimals as the histogram has significant digits. An
/// empty histogram gives the header and the footer, as Java's does.
pub fn percentile_distribution(h: &Histogram<u64>, ticks: u32, scale: f64) -> String {
    let digits = usize::from(h.sigfig());
    let mut o = format!("{:>12} {:>14} {:>10} {:>14}\n\n", "Value", "Percentile", "TotalCount", "1/(1-Percentile)");
    let mut total = 0u64;
    for v in h.iter_quantiles(ticks.max(1)) {
        total += v.count_since_last_iteration();
        let (value, q) = (v.value_iterated_to() as f64 / scale, v.quantile_iterated_to());
        // Writing to a String cannot fail.
        let _ = if q < 1.0 {
            writeln!(o, "{value:12.digits$} {q:2.12} {total:10} {:14.2}", 1.0 / (1.0 - q))
        } else {
            writeln!(o, "{value:12.digits$} {q:2.12} {total:10}")
        };
    }
    let max = if h.is_empty() { 0.0 } else { h.max() as f64 / scale };
    let _ =
        writeln!(o, "#[Mean    = {:12.digits$}, StdDeviation   = {:12.digits$}]", h.mean() / scale, h.stdev() / scale);
    let _ = writeln!(o, "#[Max     = {max:12.digits$}, Total count    = {:12}]", h.len());
    // Java's subBucketCount, from the layout the crate reports: its counts array holds
    // (buckets + 1) halves of a bucket's sub-buckets.
    let sub_buckets = 2 * h.distinct_values() / (usize::from(h.buckets()) + 1);
    let _ = writeln!(o, "#[Buckets = {:12}, SubBuckets     = {sub_buckets:12}]", h.buckets());
    o
}

/// [`percentile_distribution`] of a latency histogram in nanoseconds, in microseconds with
/// Java's default steps: what `linerate bench --hgrm` writes.
pub fn latency_hgrm(h: &Histogram<u64>) -> String {
    percentile_distribution(h, TICKS_PER_HALF_DISTANCE, NS_PER_US)
}

/// One `--hgrm` file of a test that ran: where it goes, its text, the transactions it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct HgrmFile {
    /// The path.
    pub path: PathBuf,
    /// The percentile distribution ([`latency_hgrm`]).
    pub text: String,
    /// Transactions in it.
    pub transactions: u64,
}

/// `--hgrm PATH`'s files for a test that ran: PATH with every transaction, and with a profile of
/// two or more groups each group's at PATH with `.gN` before its extension (`rrul.hgrm` →
/// `rrul.g3.hgrm` for the third `[[group]]`), a group without transactions an empty distribution.
pub fn files(path: &Path, r: &TestResult) -> Vec<HgrmFile> {
    let file = |path: PathBuf, h: &Histogram<u64>| HgrmFile { path, text: latency_hgrm(h), transactions: h.len() };
    let Some(all) = &r.histogram else { return Vec::new() };
    let mut files = vec![file(path.to_path_buf(), all)];
    if r.group_histograms.len() >= 2 {
        for (i, h) in r.group_histograms.iter().enumerate() {
            files.push(file(group_path(path, i + 1), h));
        }
    }
    files
}

/// `PATH` with `.gN` before its extension: `x.hgrm` → `x.g2.hgrm`, `x` → `x.g2`.
fn group_path(path: &Path, n: usize) -> PathBuf {
    let mut name = path.file_stem().unwrap_or_default().to_os_string();
    name.push(format!(".g{n}"));
    if let Some(ext) = path.extension() {
        name.push(".");
        name.push(ext);
    }
    path.with_file_name(name)
}

/// A path for messages, control characters escaped.
pub fn shown(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    linerate_proto::name::escape(path.as_os_str().as_bytes())
}

/// The directory a file at `path` is written in.
fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// Whether a file can be written at `path`: `path` is no directory, its directory is one, and
/// a temporary file can be made in it (and is removed at once).
pub fn check_writable(path: &Path) -> std::io::Result<()> {
    use std::io::{Error, ErrorKind};
    if path.is_dir() {
        return Err(Error::new(ErrorKind::IsADirectory, "is a directory"));
    }
    let dir = dir_of(path);
    // A missing directory (or a file in its place) is named as such, not by a temporary name.
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(Error::new(ErrorKind::NotADirectory, format!("{} is not a directory", shown(dir)))),
        Err(e) => return Err(Error::new(e.kind(), format!("{}: {e}", shown(dir)))),
    }
    tempfile::Builder::new().prefix(".linerate-hgrm-").tempfile_in(dir).map(drop)
}

/// Write `text` at `path` whole or not at all: into a temporary file beside it (mode 0666 less
/// the umask, as a file the shell creates), flushed to disk, then renamed over `path`.
pub fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::PermissionsExt;
    let mut tmp = tempfile::Builder::new()
        .prefix(".linerate-hgrm-")
        .permissions(std::fs::Permissions::from_mode(0o666))
        .tempfile_in(dir_of(path))?;
    tmp.write_all(text.as_bytes())?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hgrm_files_are_written_whole_and_unwritable_paths_are_found_first() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("rr.hgrm");
        assert_eq!(group_path(&f, 3), dir.path().join("rr.g3.hgrm"));
        assert_eq!(group_path(Path::new("x"), 1), Path::new("x.g1"));
        check_writable(&f).unwrap();
        write_atomically(&f, "one\n").unwrap();
        write_atomically(&f, "two\n").unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "two\n", "replaced");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, [std::ffi::OsString::from("rr.hgrm")], "no temporary file left");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & 0o600, 0o600, "{mode:o}");
        // A missing directory, a directory, a path under a file: refused before any test.
        for bad in [dir.path().join("no/such/dir/x.hgrm"), dir.path().to_path_buf(), f.join("x.hgrm")] {
            assert!(check_writable(&bad).is_err(), "{}", bad.display());
            assert!(write_atomically(&bad, "x").is_err(), "{}", bad.display());
        }
    }
    use crate::reactor::new_histogram;

    /// HdrHistogramJS's own test of its Java-compatible output (`should compute percentile
    /// distribution`: 25, 50 and 75 recorded, printed unscaled), line for line; only the
    /// bucket count differs, since theirs covers up to 2^53 and ours 100 s in nanoseconds.
    #[test]
    fn three_values_print_as_hdrhistogram_prints_them() {
        let mut h = new_histogram();
        for v in [25, 50, 75] {
            h.record(v).unwrap();
        }
        let want = "       Value     Percentile TotalCount 1/(1-Percentile)

      25.000 0.000000000000          1           1.00
      25.000 0.100000000000          1           1.11
      25.000 0.200000000000          1           1.25
      25.000 0.300000000000          1           1.43
      50.000 0.400000000000          2           1.67
      50.000 0.500000000000          2           2.00
      50.000 0.550000000000          2           2.22
      50.000 0.600000000000          2           2.50
      50.000 0.650000000000          2           2.86
      75.000 0.700000000000          3           3.33
      75.000 1.000000000000          3
#[Mean    =       50.000, StdDeviation   =       20.412]
#[Max     =       75.000, Total count    =            3]
#[Buckets =           27, SubBuckets     =         2048]
";
        assert_eq!(percentile_distribution(&h, 5, 1.0), want);
    }

    /// A known latency histogram in microseconds, every line of it: a thousand round trips of
    /// 20 to 119.9 µs and one of 5 ms.
    #[test]
    fn a_latency_histogram_in_microseconds() {
        let mut h = new_histogram();
        for i in 0..1000u64 {
            h.record(20_000 + i * 100).unwrap();
        }
        h.record(5_000_000).unwrap();
        let text = latency_hgrm(&h);
        insta::assert_snapshot!(text);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "       Value     Percentile TotalCount 1/(1-Percentile)");
        assert_eq!(lines[1], "");
        assert_eq!(lines[2], "      20.015 0.000000000000          1           1.00", "the highest equivalent value");
        let n = lines.len();
        assert_eq!(
            lines[n - 4],
            "    5001.215 1.000000000000       1001",
            "the 100 % row: the highest equivalent value"
        );
        assert_eq!(lines[n - 2], "#[Max     =     5001.215, Total count    =         1001]");
        assert_eq!(lines[n - 1], "#[Buckets =           27, SubBuckets     =         2048]");
    }

    #[test]
    fn an_empty_histogram_is_a_header_and_a_footer() {
        let text = latency_hgrm(&new_histogram());
        assert_eq!(
            text,
            "       Value     Percentile TotalCount 1/(1-Percentile)\n\n\
             #[Mean    =        0.000, StdDeviation   =        0.000]\n\
             #[Max     =        0.000, Total count    =            0]\n\
             #[Buckets =           27, SubBuckets     =         2048]\n"
        );
    }
}
