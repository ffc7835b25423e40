//! The statistics every report uses, each implemented once with one documented behaviour at the
//! edges, so a figure computed by the engine, the lab and the report agrees (issue 14: Jain's
//! index used to exist three times, with three answers for the same input).
//!
//! Common rule: a value that is not finite (NaN, ±∞) makes the input meaningless, and the answer
//! is `None`; these functions never panic and never return NaN.

/// Jain's fairness index of a set of rates: (Σx)² / (n·Σx²). 1 is perfectly fair; 1/n is one
/// rate taking everything.
///
/// * one value: `Some(1.0)` when it is positive (one flow is trivially fair to itself);
/// * empty, all zero (nothing moved: fairness is undefined, not perfect and not zero), any
///   negative value (not a rate) or any value that is not finite: `None`.
pub fn jain(rates: &[f64]) -> Option<f64> {
    if rates.iter().any(|x| !x.is_finite() || *x < 0.0) {
        return None;
    }
    let sum: f64 = rates.iter().sum();
    let squares: f64 = rates.iter().map(|x| x * x).sum();
    (squares > 0.0).then(|| sum * sum / (rates.len() as f64 * squares))
}

/// The median: the middle value, or the mean of the two middle values of an even count.
///
/// * empty, or any value that is not finite: `None`;
/// * one value: that value.
pub fn median(values: &[f64]) -> Option<f64> {
    percentile(values, 50.0)
}

/// The `p`-th percentile (0 ≤ p ≤ 100) by linear interpolation between the closest ranks (the
/// "R-7" rule of R, NumPy's default): p = 0 is the smallest value, 100 the largest, 50 the
/// [`median`].
///
/// * empty, any value that is not finite, or `p` outside 0..=100 (or NaN): `None`;
/// * one value: that value, for every `p`.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() || values.iter().any(|x| !x.is_finite()) || !(0.0..=100.0).contains(&p) {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = p / 100.0 * (v.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    Some(v[lo] + (v[hi] - v[lo]) * (rank - lo as f64))
}

/// The arithmetic mean.
///
/// * empty, or any value that is not finite: `None`.
pub fn mean(values: &[f64]) -> Option<f64> {
    if values.is_empty() || values.iter().any(|x| !x.is_finite()) {
        return None;
    }
    Some(values.iter().sum::<f64>() / values.len() as f64)
}

/// The sample standard deviation (the n − 1 rule): how far one more sample is expected to fall
/// from the mean.
///
/// * fewer than two values, or any value that is not finite: `None`.
pub fn std_dev(values: &[f64]) -> Option<f64> {
    let m = mean(values).filter(|_| values.len() >= 2)?;
    Some((values.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (values.len() - 1) as f64).sqrt())
}

/// How many standard deviations of noise a change must exceed to count ([`beyond_noise`]) unless
/// the user asks for another number: 3, so that a change between two measurements of the same
/// thing whose noise is normal and correctly estimated is called a change in under 0.14 % of
/// comparisons (one side of a normal distribution beyond 3 σ).
pub const NOISE_SIGMAS: f64 = 3.0;

/// The standard error of a mean of `n` samples whose standard deviation is `sd`: `sd / √n`, how
/// far the mean is expected to fall from the true value (hyperfine's and netperf's rule for
/// repeated runs).
///
/// * `n` = 0, or `sd` negative or not finite: `None`.
pub fn standard_error(sd: f64, n: u64) -> Option<f64> {
    (n > 0 && sd.is_finite() && sd >= 0.0).then(|| sd / (n as f64).sqrt())
}

/// How much wider the standard error of a median is than a mean's, for normal samples: √(π/2)
/// ≈ 1.2533 (the median is the less efficient estimator; the price of its robustness).
pub const MEDIAN_SE_FACTOR: f64 = 1.253_314_137_315_500_3;

/// The noise band of a change from `a` to `b`, each given as a standard deviation (`None`: not
/// measured, counted as 0): `sigmas · √(sd_a² + sd_b²)`, the spread of the difference of two
/// independent measurements, `sigmas` times. `None` when neither side has a spread (nothing is
/// known about the noise) or an input is not finite or negative.
pub fn noise_band(sd_a: Option<f64>, sd_b: Option<f64>, sigmas: f64) -> Option<f64> {
    if sd_a.is_none() && sd_b.is_none() {
        return None;
    }
    let (x, y) = (sd_a.unwrap_or(0.0), sd_b.unwrap_or(0.0));
    if [x, y, sigmas].iter().any(|v| !v.is_finite() || *v < 0.0) {
        return None;
    }
    Some(sigmas * (x * x + y * y).sqrt())
}

/// The noise rule of `report compare` and the mesh (issue 33): a change from `a` to `b` is beyond
/// the noise when `|b − a|` exceeds the [`noise_band`]. Without a band (no spread measured on
/// either side) every change is beyond it: the threshold alone then decides.
pub fn beyond_noise(a: f64, b: f64, band: Option<f64>) -> bool {
    band.is_none_or(|n| (b - a).abs() > n)
}

/// A least-squares line `y = a + b·x` through the points: the value at `x` = 0 (`a`), the slope
/// (`b`) and the standard error of `a` (`√(s² (1/n + x̄²/Sxx))`, `s²` the residuals' variance
/// over `n − 2`). How `report` estimates a figure at zero hypervisor steal from runs that each
/// had their own (issue 33).
///
/// * fewer than 3 points, lengths that differ, a value not finite, or every `x` the same: `None`.
pub fn line_fit(x: &[f64], y: &[f64]) -> Option<LineFit> {
    let n = x.len();
    if n < 3 || y.len() != n || x.iter().chain(y).any(|v| !v.is_finite()) {
        return None;
    }
    let (mx, my) = (mean(x)?, mean(y)?);
    let sxx: f64 = x.iter().map(|v| (v - mx).powi(2)).sum();
    if sxx <= f64::EPSILON * n as f64 {
        return None;
    }
    let slope = x.iter().zip(y).map(|(a, b)| (a - mx) * (b - my)).sum::<f64>() / sxx;
    let at_zero = my - slope * mx;
    let s2 = x.iter().zip(y).map(|(a, b)| (b - at_zero - slope * a).powi(2)).sum::<f64>() / (n - 2) as f64;
    let se = (s2 * (1.0 / n as f64 + mx * mx / sxx)).sqrt();
    Some(LineFit { at_zero, slope, at_zero_se: se, slope_se: (s2 / sxx).sqrt(), n })
}

/// Two-sided Student t critical values for 95 % and 99 % confidence, by degrees of freedom 1..30
/// (the last stands for every larger number).
const T95: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120,
    2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
];
const T99: [f64; 30] = [
    63.657, 9.925, 5.841, 4.604, 4.032, 3.707, 3.499, 3.355, 3.250, 3.169, 3.106, 3.055, 3.012, 2.977, 2.947, 2.921,
    2.898, 2.878, 2.861, 2.845, 2.831, 2.819, 2.807, 2.797, 2.787, 2.779, 2.771, 2.763, 2.756, 2.750,
];

/// The two-sided Student t critical value at `level` percent confidence (99, else 95) for `dof`
/// degrees of freedom (at least 1; 30 and more read the 30 row, a slight overstatement).
pub fn student_t(level: u32, dof: usize) -> f64 {
    let table = if level >= 99 { &T99 } else { &T95 };
    table[dof.clamp(1, table.len()) - 1]
}

/// A least-squares line ([`line_fit`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LineFit {
    /// Its value at x = 0.
    pub at_zero: f64,
    /// Its slope.
    pub slope: f64,
    /// The standard error of `at_zero`.
    pub at_zero_se: f64,
    /// The standard error of `slope` (`√(s² / Sxx)`).
    pub slope_se: f64,
    /// How many points it was fitted to.
    pub n: usize,
}

impl LineFit {
    /// Whether the slope is told apart from zero at 95 % confidence: `|slope|` beyond Student's
    /// t for `n − 2` degrees of freedom times its standard error. A line through points that
    /// scatter around a flat one is not a trend to extrapolate by.
    pub fn slope_is_significant(&self) -> bool {
        self.slope.abs() > student_t(95, self.n.saturating_sub(2)) * self.slope_se
    }
}

/// Intervals as (start, end, value) without the tail of the test's shutdown: a trailing interval
/// that is partial (under half as long as the median interval) or empty (nothing, after
/// intervals that had something) is not a drop in rate, and is left out; so is any interval
/// whose figures are not finite. What a run's spread over its intervals is taken from, for a
/// bench run (`report`) and a mesh test (the agent) alike.
pub fn steady(intervals: Vec<(f64, f64, f64)>) -> Vec<(f64, f64, f64)> {
    let mut iv: Vec<(f64, f64, f64)> =
        intervals.into_iter().filter(|(s, e, b)| s.is_finite() && e.is_finite() && b.is_finite()).collect();
    if iv.len() >= 2 {
        let mut lengths: Vec<f64> = iv.iter().map(|(s, e, _)| e - s).collect();
        lengths.sort_by(f64::total_cmp);
        let typical = lengths[lengths.len() / 2];
        if let Some(&(s, e, b)) = iv.last() {
            let before = iv[..iv.len() - 1].iter().any(|(_, _, b)| *b > 0.0);
            if e - s < typical / 2.0 || (b == 0.0 && before) {
                iv.pop();
            }
        }
    }
    iv
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_fit_finds_the_value_at_zero_and_how_sure_it_is() {
        // y = 10 − 20·x exactly: no residual, no doubt
        let x = [0.0, 0.1, 0.2, 0.3];
        let y: Vec<f64> = x.iter().map(|v| 10.0 - 20.0 * v).collect();
        let f = line_fit(&x, &y).unwrap();
        assert!((f.at_zero - 10.0).abs() < 1e-9 && (f.slope + 20.0).abs() < 1e-9 && f.at_zero_se < 1e-9, "{f:?}");
        // residuals +1, −1, −1, +1 (orthogonal to x: the line stays): s² = 4 / 2 = 2, x̄ = 0.15,
        // Sxx = 0.05, so se = √(2 · (1/4 + 0.0225/0.05)) = √1.4
        let y2 = [y[0] + 1.0, y[1] - 1.0, y[2] - 1.0, y[3] + 1.0];
        let f = line_fit(&x, &y2).unwrap();
        assert!((f.at_zero - 10.0).abs() < 1e-9 && (f.at_zero_se - 1.4f64.sqrt()).abs() < 1e-9, "{f:?}");
        // nothing to fit
        assert!(line_fit(&[0.1; 4], &y).is_none(), "every x the same");
        assert!(line_fit(&x[..2], &y[..2]).is_none() && line_fit(&x, &y[..3]).is_none());
        assert!(line_fit(&[0.0, f64::NAN, 0.2], &[1.0, 2.0, 3.0]).is_none());
    }

    #[test]
    fn jain_of_equal_rates_is_one_and_of_one_hog_is_one_over_n() {
        assert!((jain(&[5.0, 5.0, 5.0, 5.0]).unwrap() - 1.0).abs() < 1e-12);
        assert!((jain(&[8.0, 0.0, 0.0, 0.0]).unwrap() - 0.25).abs() < 1e-12);
        assert!((jain(&[1.0, 3.0]).unwrap() - 0.8).abs() < 1e-12, "16 / (2 * 10)");
    }

    #[test]
    fn jain_edge_cases_are_the_documented_ones() {
        assert_eq!(jain(&[]), None, "empty");
        assert_eq!(jain(&[7.0]), Some(1.0), "one value");
        assert_eq!(jain(&[0.0]), None, "one zero");
        assert_eq!(jain(&[0.0, 0.0]), None, "all zero");
        assert_eq!(jain(&[1.0, f64::NAN]), None, "NaN");
        assert_eq!(jain(&[1.0, f64::INFINITY]), None, "infinite");
        assert_eq!(jain(&[2.0, -1.0]), None, "negative");
    }

    #[test]
    fn standard_error_shrinks_with_the_root_of_the_count() {
        assert_eq!(standard_error(10.0, 4), Some(5.0));
        assert_eq!(standard_error(3.0, 1), Some(3.0));
        assert_eq!(standard_error(3.0, 0), None);
        assert_eq!(standard_error(-1.0, 4), None);
        assert_eq!(standard_error(f64::NAN, 4), None);
        assert!((MEDIAN_SE_FACTOR - (std::f64::consts::PI / 2.0).sqrt()).abs() < 1e-15);
    }

    #[test]
    fn median_takes_the_middle_or_the_mean_of_the_two_middles() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[9.0]), Some(9.0));
        assert_eq!(median(&[0.0, 0.0]), Some(0.0));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[1.0, f64::NAN, 3.0]), None);
    }

    #[test]
    fn percentiles_interpolate_between_ranks() {
        let v = [10.0, 20.0, 30.0, 40.0, 50.0];
        assert_eq!(percentile(&v, 0.0), Some(10.0));
        assert_eq!(percentile(&v, 100.0), Some(50.0));
        assert_eq!(percentile(&v, 25.0), Some(20.0));
        assert_eq!(percentile(&v, 90.0), Some(46.0));
        assert_eq!(percentile(&[5.0, 1.0], 50.0), Some(3.0), "unsorted input");
        assert_eq!(percentile(&[7.0], 99.9), Some(7.0));
        assert_eq!(percentile(&v, 100.5), None);
        assert_eq!(percentile(&v, -1.0), None);
        assert_eq!(percentile(&v, f64::NAN), None);
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&[1.0, f64::NEG_INFINITY], 50.0), None);
    }
    #[test]
    fn mean_and_standard_deviation_use_the_n_minus_1_rule() {
        assert_eq!(mean(&[1.0, 2.0, 6.0]), Some(3.0));
        assert_eq!(mean(&[]), None);
        assert_eq!(mean(&[1.0, f64::NAN]), None);
        assert!((std_dev(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).unwrap() - 2.138_089_935).abs() < 1e-9);
        assert_eq!(std_dev(&[5.0, 5.0]), Some(0.0));
        assert_eq!(std_dev(&[5.0]), None, "one value has no spread");
        assert_eq!(std_dev(&[1.0, f64::INFINITY]), None);
    }

    #[test]
    fn a_change_counts_only_beyond_the_noise_of_both_sides() {
        // 3 and 4 add as a right triangle: the band is 3 x 5
        assert_eq!(noise_band(Some(3.0), Some(4.0), 3.0), Some(15.0));
        assert_eq!(noise_band(None, Some(4.0), 2.0), Some(8.0), "one side measured");
        assert_eq!(noise_band(None, None, 3.0), None, "nothing known");
        assert_eq!(noise_band(Some(-1.0), None, 3.0), None);
        assert_eq!(noise_band(Some(1.0), None, f64::NAN), None);
        assert!(beyond_noise(100.0, 84.0, Some(15.0)));
        assert!(!beyond_noise(100.0, 86.0, Some(15.0)));
        assert!(!beyond_noise(100.0, 115.0, Some(15.0)), "the band's edge is inside");
        assert!(beyond_noise(100.0, 99.0, None), "no band: the threshold alone decides");
    }
}
