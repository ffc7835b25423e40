//! Rate limits as people write them: `cp --bwlimit`, `serve --max-rate-per-client` and
//! `--max-rate-total`, and the `rate=` of an authorized key. Rates are bit/s with SI suffixes, as
//! everywhere in linerate (`500M`, `1G`, `2.5Gbit/s`); a rate that ends in a capital `B/s` or `B`
//! counts bytes instead, the way rsync users write it (`50MB/s` = 400 Mbit/s, `50MiB/s` =
//! 419.43 Mbit/s).

/// Slowest rate accepted: below this a 1 MiB record would take longer than the server's idle
/// timeout to go through.
pub const MIN_RATE: u64 = 100_000;

/// Parse a rate limit into bit/s.
pub fn parse_limit(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let bytes_form = t.strip_suffix("B/s").or_else(|| t.strip_suffix('B'));
    let (t, unit_bits) = match bytes_form {
        Some(rest) => (rest, 8.0),
        None => (
            t.strip_suffix("bit/s").or_else(|| t.strip_suffix("bps")).or_else(|| t.strip_suffix("b/s")).unwrap_or(t),
            1.0,
        ),
    };
    let (num, mult) = if let Some(n) = t.strip_suffix('i').filter(|_| unit_bits > 1.0) {
        let (n, m) = split_suffix(n, 1024.0).ok_or_else(|| format!("rate {s:?}: Ki, Mi, Gi or Ti before B/s"))?;
        if m == 1.0 {
            return Err(format!("rate {s:?}: Ki, Mi, Gi or Ti before B/s"));
        }
        (n, m)
    } else {
        split_suffix(t, 1000.0).ok_or_else(|| format!("rate {s:?}: unknown suffix (use k, M, G, T; B/s for bytes)"))?
    };
    let v: f64 = num.trim().parse().map_err(|_| format!("rate {s:?} is not a number (examples: 500M, 1G, 50MB/s)"))?;
    if !(v.is_finite() && v > 0.0) {
        return Err(format!("rate {s:?} must be positive"));
    }
    let bits = v * mult * unit_bits;
    if bits > u64::MAX as f64 / 2.0 {
        return Err(format!("rate {s:?} is too large"));
    }
    let bits = bits.round() as u64;
    if bits < MIN_RATE {
        return Err(format!("rate {s:?} is below the smallest limit, 100 kbit/s"));
    }
    Ok(bits)
}

/// Split an SI (or binary) multiplier off the end: `500M` → ("500", 1e6).
fn split_suffix(t: &str, base: f64) -> Option<(&str, f64)> {
    match t.chars().last() {
        Some(c) if c.is_ascii_alphabetic() => {
            let p = match c {
                'k' | 'K' => 1,
                'M' => 2,
                'G' => 3,
                'T' => 4,
                _ => return None,
            };
            Some((&t[..t.len() - 1], base.powi(p)))
        }
        _ => Some((t, 1.0)),
    }
}

/// A rate for people: `400 Mbit/s`.
pub fn show(bps: u64) -> String {
    let v = bps as f64;
    if v >= 1e9 {
        format!("{:.3} Gbit/s", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.1} Mbit/s", v / 1e6)
    } else {
        format!("{:.0} kbit/s", v / 1e3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_bits_and_bytes() {
        assert_eq!(parse_limit("500M"), Ok(500_000_000));
        assert_eq!(parse_limit("1G"), Ok(1_000_000_000));
        assert_eq!(parse_limit("2.5Gbit/s"), Ok(2_500_000_000));
        assert_eq!(parse_limit("800kbps"), Ok(800_000));
        assert_eq!(parse_limit("100Mb/s"), Ok(100_000_000));
        assert_eq!(parse_limit("250000000"), Ok(250_000_000));
        assert_eq!(parse_limit("50MB/s"), Ok(400_000_000));
        assert_eq!(parse_limit("50MB"), Ok(400_000_000));
        assert_eq!(parse_limit("50MiB/s"), Ok(50 * 1024 * 1024 * 8));
        assert_eq!(parse_limit("1GiB/s"), Ok(8 << 30));
        assert_eq!(parse_limit("125000B/s"), Ok(1_000_000));
        for bad in ["", "fast", "0", "-1M", "5X", "50iB/s", "99k", "1e30T", "nan"] {
            assert!(parse_limit(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn shows_rates() {
        assert_eq!(show(400_000_000), "400.0 Mbit/s");
        assert_eq!(show(2_500_000_000), "2.500 Gbit/s");
        assert_eq!(show(100_000), "100 kbit/s");
    }
}
