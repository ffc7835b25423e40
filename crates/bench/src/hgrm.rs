//! A latency histogram as HdrHistogram's percentile distribution text (`.hgrm`), the format of
//! Java's `AbstractHistogram.outputPercentileDistribution` that wrk2 and HdrHistogramJS write
//! too, so that HdrHistogram's online plotter and `hdr-plot` draw a linerate test's latency
//! (issue 43: `linerate bench --hgrm`). The rows are the `hdrhistogram` crate's quantile
//! iteration; only the columns are laid out here, as Java lays them out.

use hdrhistogram::Histogram;
use std::fmt::Write;

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

#[cfg(test)]
mod tests {
    use super::*;
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
