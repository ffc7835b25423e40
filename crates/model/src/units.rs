//! The one grammar for rates and sizes (issue 14). Every flag, `authorized_keys` option, scenario
//! field and profile entry that takes a rate or a size reads it with [`parse_rate`] or
//! [`parse_size`], so `50MB/s`, `1gbit` and `64KiB` mean the same wherever they are accepted;
//! every rate or size printed for people goes through [`format_rate`], [`format_size`] or
//! [`format_size_iec`]. Range checks (a chunk size's power of two, a limit's floor) stay with
//! the flag that needs them.
//!
//! Both start with a decimal number (`1500`, `2.5`, `.5`; no sign, no exponent), then optional
//! white space and a unit; the whole is trimmed.
//!
//! **Sizes** count bytes. `K`, `M`, `G`, `T` alone multiply by 1024 (as iperf3's `-l`, dd and
//! rsync read them, and as `bench -l 64K` and `cp --chunk-size 1M` always did); followed by `B`
//! they are SI (`kB`, `MB`: ×1000); `Ki`, `Mi`, `Gi`, `Ti`, with or without `B`, are IEC (×1024).
//! A lone `B` is bytes. Prefix letters and the `i` may be either case; `B` must be a capital (a
//! `b` is a bit). A size must come to a whole number of bytes: `1.5K` is 1536, `1.5` is refused.
//! A flag whose bare number always counted a larger unit (`serve --max-buffer-memory`, MiB)
//! reads the same grammar through [`parse_size_bare`], and says that unit in its help.
//!
//! **Rates** count bits per second. The prefixes `k`, `M`, `G`, `T` (either case) are SI
//! (×1000), `Ki`, `Mi`, `Gi`, `Ti` IEC (×1024); then `bit`, `bits`, `b` or nothing for bits,
//! `B` for bytes (×8), each optionally followed by `/s`; or `bps` (bits, as network gear writes
//! it; tc reads it as bytes) and `Bps` (bytes). So `500M`, `1gbit` (tc's form), `2.5Gbit/s`,
//! `800kbps`, `100Mb/s` are bits and `50MB/s`, `50MiB/s`, `125000B/s` are bytes. A rate must be
//! at least 1 bit/s; a fraction of a bit is rounded.
//!
//! **Durations** ([`parse_duration`]) take `ns`, `us` (or `µs`), `ms`, `s`, `m` or `min`, `h`, `d`;
//! a bare number is seconds: `250us`, `5ms`, `1.5s`, `10m`, `6h`. Fractions of a nanosecond are
//! dropped. Where a bare number could be taken for milliseconds (a link's delay, `doctor --rtt`)
//! the reader asks for the unit instead ([`Duration::with_unit`]), so no field reads `5` as
//! anything but five seconds. The grammar stays hand-written (it shares the exact decimal
//! reader, the caps and the error messages of rates and sizes): `humantime` refuses fractions
//! (`1.5s`, `0.5ms`) and a bare number, and `jiff`'s friendly format (used for time stamps, see
//! [`crate::time`]) a bare number and `d` for a `SignedDuration` — all documented forms here.
//!
//! **Percentages** ([`Percent`]) are a number from 0 to 100, with or without `%`.
//!
//! Config files hold these as the typed values of [`typed`] ([`Rate`], [`Duration`],
//! [`Percent`], [`Subnet`], [`QueueLimit`]), read once when the file is.

use std::fmt;

pub mod typed;
pub use typed::{Duration, Percent, QueueLimit, Rate, Subnet};

/// What a text was read as, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantity {
    /// A number of bytes ([`parse_size`]).
    Size,
    /// Bits per second ([`parse_rate`]).
    Rate,
    /// A span of time ([`parse_duration`]).
    Duration,
}

impl Quantity {
    /// The accepted forms, told in every error.
    pub fn forms(self) -> &'static str {
        match self {
            Quantity::Size => {
                "a size is a number of bytes, optionally with K, M, G, T (×1024), kB, MB, GB, TB (×1000) \
                 or KiB, MiB, GiB, TiB (×1024), e.g. 4096, 64K, 64KiB, 1.5MB"
            }
            Quantity::Rate => {
                "a rate is bit/s, optionally with k, M, G, T (×1000) or Ki, Mi, Gi, Ti (×1024), then bit, b, bps \
                 or nothing for bits, B or Bps for bytes, and /s if you like, e.g. 500M, 1gbit, 2.5Gbit/s, \
                 800kbps, 50MB/s, 50MiB/s"
            }
            Quantity::Duration => {
                "a duration is a number with ns, us, ms, s, m or min, h or d (seconds without one), \
                 e.g. 250us, 5ms, 1.5s, 10m, 6h"
            }
        }
    }
}

impl Quantity {
    /// The largest value, as text.
    fn most(self) -> &'static str {
        match self {
            Quantity::Size => "16 EiB",
            Quantity::Rate => "18.4 Ebit/s",
            Quantity::Duration => "584 years",
        }
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Quantity::Size => "size",
            Quantity::Rate => "rate",
            Quantity::Duration => "duration",
        })
    }
}

/// Why a rate or size was refused. Each message names the text (escaped, at most 64 characters)
/// and, where a different spelling would do, the accepted forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    /// Nothing but white space.
    #[error("no {what} given: {}", .what.forms())]
    Empty {
        /// Size or rate.
        what: Quantity,
    },
    /// A leading minus sign: no size or rate is negative.
    #[error("{what} {input:?} is negative: {}", .what.forms())]
    Negative {
        /// Size or rate.
        what: Quantity,
        /// The text given.
        input: String,
    },
    /// The text does not start with a decimal number.
    #[error("{what} {input:?} does not start with a number: {}", .what.forms())]
    NotANumber {
        /// Size or rate.
        what: Quantity,
        /// The text given.
        input: String,
    },
    /// The unit after the number is not one of the grammar's.
    #[error("{what} {input:?} has an unknown unit {unit:?}: {}", .what.forms())]
    UnknownUnit {
        /// Size or rate.
        what: Quantity,
        /// The text given.
        input: String,
        /// The part after the number.
        unit: String,
    },
    /// The value does not fit in 64 bits.
    #[error("{what} {input:?} is too large (the most is {})", .what.most())]
    Overflow {
        /// Size or rate.
        what: Quantity,
        /// The text given.
        input: String,
    },
    /// A size that does not come to a whole number of bytes (`1.5`, `0.1K`).
    #[error("size {input:?} is not a whole number of bytes")]
    FractionalBytes {
        /// The text given.
        input: String,
    },
    /// A size over what 32 bits hold, where a protocol field has 32 ([`parse_size32`]).
    #[error("size {input:?} is over 4 GiB")]
    Over4GiB {
        /// The text given.
        input: String,
    },
    /// A rate below 1 bit/s (`0`, `0.1bit`).
    #[error("rate {input:?} is below 1 bit/s")]
    BelowOneBit {
        /// The text given.
        input: String,
    },
    /// A bare number where a duration needs its unit (a link's delay, `doctor --rtt`).
    #[error("duration {input:?} has no unit: give one, e.g. {input}ms, {input}us or {input}s")]
    NoUnit {
        /// The text given.
        input: String,
    },
    /// Not a percentage.
    #[error("{input:?} is not a percentage: a number from 0 to 100, with or without %, e.g. 1%, 0.5")]
    NotAPercent {
        /// The text given.
        input: String,
    },
    /// A percentage outside 0 to 100.
    #[error("percentage {input:?} is not within 0 to 100")]
    PercentRange {
        /// The text given.
        input: String,
    },
    /// Not an IPv4 address or network.
    #[error("{input:?} is not an IPv4 address: ADDR or ADDR/PREFIX, e.g. 198.18.1.0/24")]
    NotAnAddress {
        /// The text given.
        input: String,
    },
    /// Neither a size nor a time.
    #[error("queue {input:?}: a size (\"64KiB\", or bytes) or a time at the rate (\"2ms\")")]
    NotAQueue {
        /// The text given.
        input: String,
    },
}

/// The text as an error shows it: at most 64 characters.
fn shown(s: &str) -> String {
    let t = s.trim();
    if t.chars().count() <= 64 {
        t.to_string()
    } else {
        t.chars().take(63).chain(['…']).collect()
    }
}

/// Fraction digits kept; with at most 18, any value that fits in 64 bits also fits in the
/// 128-bit arithmetic below, multiplier and ×8 included.
const MAX_FRACTION_DIGITS: u32 = 18;

/// A decimal number: `digits / 10^scale`, exact up to [`MAX_FRACTION_DIGITS`]; `inexact` when a
/// non-zero digit beyond them was dropped.
struct Decimal {
    digits: u128,
    scale: u32,
    inexact: bool,
}

/// Splits `t` (trimmed) into its number and the unit after it.
fn number(t: &str, what: Quantity) -> Result<(Decimal, &str), UnitError> {
    if t.is_empty() {
        return Err(UnitError::Empty { what });
    }
    if t.starts_with('-') {
        return Err(UnitError::Negative { what, input: shown(t) });
    }
    let end = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(end);
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if (int.is_empty() && frac.is_empty()) || frac.contains('.') {
        return Err(UnitError::NotANumber { what, input: shown(t) });
    }
    let overflow = || UnitError::Overflow { what, input: shown(t) };
    let mut d = Decimal { digits: 0, scale: 0, inexact: false };
    for (i, c) in int.bytes().chain(frac.bytes()).enumerate() {
        let v = u128::from(c - b'0');
        if i >= int.len() {
            if d.scale == MAX_FRACTION_DIGITS {
                d.inexact |= v != 0;
                continue;
            }
            d.scale += 1;
        }
        d.digits = d.digits.checked_mul(10).and_then(|x| x.checked_add(v)).ok_or_else(overflow)?;
    }
    Ok((d, unit.trim_start()))
}

/// `k`, `M`, `G`, `T` (either case) as a power: 1 to 4.
fn prefix_power(c: char) -> Option<u32> {
    match c.to_ascii_lowercase() {
        'k' => Some(1),
        'm' => Some(2),
        'g' => Some(3),
        't' => Some(4),
        _ => None,
    }
}

/// The multiplier of a size's unit.
fn size_unit(unit: &str) -> Option<u64> {
    if unit.is_empty() || unit == "B" {
        return Some(1);
    }
    let mut chars = unit.chars();
    let p = prefix_power(chars.next()?)?;
    match chars.as_str() {
        "" | "i" | "I" | "iB" | "IB" => Some(1024u64.pow(p)),
        "B" => Some(1000u64.pow(p)),
        _ => None,
    }
}

/// The multiplier of a rate's unit, in bits: prefix × (1 for bits, 8 for bytes).
fn rate_unit(unit: &str) -> Option<u64> {
    let (u, per_s) = match unit.strip_suffix("/s") {
        Some(u) => (u, true),
        None => (unit, false),
    };
    let mut chars = u.chars();
    let (scale, rest) = match chars.next().and_then(prefix_power) {
        Some(p) => match chars.as_str().strip_prefix(['i', 'I']) {
            Some(rest) => (1024u64.pow(p), rest),
            None => (1000u64.pow(p), chars.as_str()),
        },
        None => (1, u),
    };
    let bits = match rest {
        "" | "b" => 1,
        "B" => 8,
        "bps" if !per_s => 1,
        "Bps" if !per_s => 8,
        r if r.eq_ignore_ascii_case("bit") || r.eq_ignore_ascii_case("bits") => 1,
        _ => return None,
    };
    Some(scale * bits)
}

/// The value of `t` (trimmed) with its unit applied, as `numerator / denominator` (a power of
/// ten), and whether digits beyond the kept precision were dropped.
fn scaled(t: &str, what: Quantity, unit_of: fn(&str) -> Option<u64>) -> Result<(u128, u128, bool), UnitError> {
    let (d, unit) = number(t, what)?;
    let mult = unit_of(unit).ok_or_else(|| UnitError::UnknownUnit { what, input: shown(t), unit: shown(unit) })?;
    let n = d.digits.checked_mul(u128::from(mult)).ok_or_else(|| UnitError::Overflow { what, input: shown(t) })?;
    Ok((n, 10u128.pow(d.scale), d.inexact))
}

/// Reads a size in bytes: `4096`, `64K` (= 64 KiB), `64KiB`, `64kB` (= 64,000), `1.5M`, `2GiB`.
pub fn parse_size(s: &str) -> Result<u64, UnitError> {
    let t = s.trim();
    let (n, den, inexact) = scaled(t, Quantity::Size, size_unit)?;
    whole_bytes(t, n, den, inexact)
}

/// `serve --max-buffer-memory` (and `cp`'s): a size in the one grammar, in bytes; a bare number
/// counts MiB, as the flag always did.
pub fn parse_buffer_memory(s: &str) -> Result<u64, UnitError> {
    parse_size_bare(s, 1 << 20)
}

/// Reads a size as [`parse_size`] does, for a protocol field of 32 bits (a write, a datagram, a
/// socket buffer): over 4 GiB is refused.
pub fn parse_size32(s: &str) -> Result<u32, UnitError> {
    u32::try_from(parse_size(s)?).map_err(|_| UnitError::Over4GiB { input: s.to_string() })
}

/// Reads a size as [`parse_size`] does, except that a bare number (no unit) counts `bare` bytes
/// a unit: `parse_size_bare("512", 1 << 20)` is 512 MiB, `"2GiB"` and `"64K"` are what they say.
/// For a flag whose bare number always meant more than bytes (`serve --max-buffer-memory`,
/// MiB); its help states the unit.
pub fn parse_size_bare(s: &str, bare: u64) -> Result<u64, UnitError> {
    let t = s.trim();
    let (d, unit) = number(t, Quantity::Size)?;
    if !unit.is_empty() {
        return parse_size(t);
    }
    let n = d
        .digits
        .checked_mul(u128::from(bare))
        .ok_or_else(|| UnitError::Overflow { what: Quantity::Size, input: shown(t) })?;
    whole_bytes(t, n, 10u128.pow(d.scale), d.inexact)
}

/// `n / den` bytes, refused when it is not a whole number or does not fit in 64 bits.
fn whole_bytes(t: &str, n: u128, den: u128, inexact: bool) -> Result<u64, UnitError> {
    if inexact || n % den != 0 {
        return Err(UnitError::FractionalBytes { input: shown(t) });
    }
    u64::try_from(n / den).map_err(|_| UnitError::Overflow { what: Quantity::Size, input: shown(t) })
}

/// Reads a rate in bits per second: `500M`, `1gbit`, `2.5Gbit/s`, `800kbps`, `50MB/s` (= 400
/// Mbit/s), `50MiB/s`. A fraction of a bit is rounded to the nearest.
pub fn parse_rate(s: &str) -> Result<u64, UnitError> {
    let t = s.trim();
    let (n, den, _) = scaled(t, Quantity::Rate, rate_unit)?;
    let bits = n
        .checked_add(den / 2)
        .and_then(|n| u64::try_from(n / den).ok())
        .ok_or_else(|| UnitError::Overflow { what: Quantity::Rate, input: shown(t) })?;
    if bits == 0 {
        return Err(UnitError::BelowOneBit { input: shown(t) });
    }
    Ok(bits)
}

/// Reads a rate as [`parse_rate`] does, or zero in any unit (`0`, `0M`, `0.0G`) as 0: a pace
/// where 0 means none (`bench -b 0`, as iperf3's).
pub fn parse_rate_or_zero(s: &str) -> Result<u64, UnitError> {
    parse_rate(s).or_else(|e| {
        let t = s.trim();
        let num = &t[..t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len())];
        if num.parse::<f64>().is_ok_and(|v| v == 0.0) {
            Ok(0)
        } else {
            Err(e)
        }
    })
}

fn duration_unit(unit: &str) -> Option<u64> {
    Some(match unit {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "" | "s" => 1_000_000_000,
        "m" | "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        "d" => 86_400_000_000_000,
        _ => return None,
    })
}

/// Reads a duration: `250us`, `5ms`, `1.5s`, `10m` (minutes), `6h`, `1d`; a bare number is
/// seconds.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, UnitError> {
    let t = s.trim();
    let (n, den, _) = scaled(t, Quantity::Duration, duration_unit)?;
    let ns = u64::try_from(n / den).map_err(|_| UnitError::Overflow { what: Quantity::Duration, input: shown(t) })?;
    Ok(std::time::Duration::from_nanos(ns))
}

/// `x` with `digits` significant digits and no trailing zeros: `9.31`, `250`, `0.988`.
pub fn significant(x: f64, digits: i32) -> String {
    if x == 0.0 {
        return "0".into();
    }
    let mag = x.abs().log10().floor() as i32;
    let decimals = (digits - 1 - mag).clamp(0, 9) as usize;
    let s = format!("{x:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Splits `x` into a mantissa below 1000 and its SI prefix (`""`, `k`, `M`, `G`, `T`); a value
/// that would show as 1000 with three digits takes the next prefix.
pub fn si_prefix(x: f64) -> (f64, &'static str) {
    let a = x.abs();
    for (scale, p) in [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")] {
        if a >= scale * 0.9995 {
            return (x / scale, p);
        }
    }
    (x, "")
}

/// `x` in `unit` with an SI prefix and three significant digits: `9.31 Gbit/s`, `512 kB`.
pub fn format_si(x: f64, unit: &str) -> String {
    let (v, p) = si_prefix(x);
    format!("{} {p}{unit}", significant(v, 3))
}

/// A rate for people: `9.41 Gbit/s`, `400 Mbit/s`, `100 kbit/s` (SI, three significant digits;
/// [`parse_rate`] reads it back).
pub fn format_rate(bits_per_s: f64) -> String {
    format_si(bits_per_s, "bit/s")
}

/// An amount of data for people, SI as rates are: `1.6 MB`, `4.16 GB`, `512 B` (three
/// significant digits; [`parse_size`] reads it back to that precision).
pub fn format_size(bytes: f64) -> String {
    format_si(bytes, "B")
}

/// A memory or buffer size for people, IEC since such sizes are powers of two: `64 KiB`,
/// `6 MiB`, `1.5 GiB` (three significant digits).
pub fn format_size_iec(bytes: f64) -> String {
    let a = bytes.abs();
    for (p, u) in [(4, "TiB"), (3, "GiB"), (2, "MiB"), (1, "KiB")] {
        let scale = 1024f64.powi(p);
        if a >= scale * 0.9995 {
            return format!("{} {u}", significant(bytes / scale, 3));
        }
    }
    format!("{} B", significant(bytes, 3))
}

/// The unit a rate is shown in: bits per second (the default, as iperf3 and the rest of
/// linerate show rates) or bytes per second (`cp --bytes`, as rsync and scp show them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RateUnit {
    /// `9.41 Gbit/s`.
    #[default]
    Bits,
    /// `1.18 GB/s`.
    Bytes,
}

impl RateUnit {
    /// `bytes_per_s` in this unit, for people: [`format_rate`] or `format_size(..)/s`.
    pub fn format(self, bytes_per_s: f64) -> String {
        match self {
            RateUnit::Bits => format_rate(bytes_per_s * 8.0),
            RateUnit::Bytes => format_si(bytes_per_s, "B/s"),
        }
    }
}

/// `n` and its noun, singular or plural as `n` needs: `1 file`, `2 files`, `0 entries`,
/// `3 places` — the one plural rule for counts shown to people. `noun` is the singular; a
/// consonant and `y` become `ies`, a final `s`, `x`, `ch` or `sh` takes `es`, anything else `s`.
pub fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        return format!("1 {noun}");
    }
    let b = noun.as_bytes();
    let plural = match b {
        [.., c, b'y'] if !b"aeiou".contains(c) => format!("{}ies", &noun[..noun.len() - 1]),
        [.., b's' | b'x'] | [.., b'c' | b's', b'h'] => format!("{noun}es"),
        _ => format!("{noun}s"),
    };
    format!("{n} {plural}")
}

/// Serde support for a size field in a file: a number of bytes, or a string in the size
/// grammar (`file_size = "1.6MB"`). Use with `#[serde(deserialize_with = ...)]`.
pub mod serde_size {
    use super::{parse_size, Quantity, UnitError};
    use serde::de::{self, Deserializer, Visitor};
    use std::fmt;

    struct SizeVisitor;

    impl Visitor<'_> for SizeVisitor {
        type Value = u64;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a size: a number of bytes or a string such as \"64K\", \"1.6MB\", \"2GiB\"")
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
            Ok(v)
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v).map_err(|_| E::custom(UnitError::Negative { what: Quantity::Size, input: v.to_string() }))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
            parse_size(v).map_err(E::custom)
        }
    }

    /// A size: a number of bytes or a string.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        d.deserialize_any(SizeVisitor)
    }

    /// An optional size (with `#[serde(default)]`).
    pub fn option<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        deserialize(d).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_of_32_bits_and_rates_where_zero_is_none() {
        assert_eq!(parse_size32("64K"), Ok(65536));
        assert_eq!(parse_size32("64KiB"), Ok(65536));
        assert_eq!(parse_size32("64kB"), Ok(64000));
        assert_eq!(parse_size32("8G").unwrap_err().to_string(), "size \"8G\" is over 4 GiB");
        assert!(parse_size32("1.5").is_err());
        for (s, v) in [("0", 0), ("0M", 0), ("0.0G", 0), ("100M", 100_000_000), ("1gbit", 1_000_000_000)] {
            assert_eq!(parse_rate_or_zero(s), Ok(v), "{s}");
        }
        for bad in ["0.1", "x", "-1M", ""] {
            assert!(parse_rate_or_zero(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_rate_shows_in_bits_or_bytes() {
        assert_eq!(RateUnit::Bits.format(125e6), "1 Gbit/s");
        assert_eq!(RateUnit::Bytes.format(125e6), "125 MB/s");
        assert_eq!(RateUnit::default(), RateUnit::Bits);
    }

    #[test]
    fn counts_take_the_plural_they_need() {
        assert_eq!(count(1, "file"), "1 file");
        assert_eq!(count(0, "file"), "0 files");
        assert_eq!(count(2, "entry"), "2 entries");
        assert_eq!(count(1, "entry"), "1 entry");
        assert_eq!(count(3, "day"), "3 days");
        assert_eq!(count(2, "byte"), "2 bytes");
        assert_eq!(count(4, "match"), "4 matches");
        assert_eq!(count(5, "pass"), "5 passes");
    }

    const KI: u64 = 1024;
    const MI: u64 = 1024 * 1024;
    const GI: u64 = 1024 * 1024 * 1024;

    fn reads(parse: fn(&str) -> Result<u64, UnitError>, table: &[(&str, u64)]) {
        for &(text, want) in table {
            assert_eq!(parse(text), Ok(want), "{text:?}");
        }
    }

    #[test]
    fn durations_read_one_grammar() {
        let d = |t: &str| parse_duration(t).map(|d| d.as_nanos() as u64);
        reads(
            d,
            &[
                ("250us", 250_000),
                ("250µs", 250_000),
                ("5ms", 5_000_000),
                ("1.5s", 1_500_000_000),
                ("2", 2_000_000_000),
                (" 10m ", 600_000_000_000),
                ("10 min", 600_000_000_000),
                ("6h", 21_600_000_000_000),
                ("1d", 86_400_000_000_000),
                ("0.5ns", 0),
            ],
        );
        for bad in ["", "-1s", "s", "5 fortnights", "5M", "99999999999d"] {
            let e = parse_duration(bad).unwrap_err();
            assert!(
                matches!(
                    e,
                    UnitError::Empty { .. }
                        | UnitError::Negative { .. }
                        | UnitError::NotANumber { .. }
                        | UnitError::UnknownUnit { .. }
                        | UnitError::Overflow { .. }
                ),
                "{bad:?}: {e}"
            );
            assert!(e.to_string().contains("duration"), "{e}");
        }
    }

    #[test]
    fn sizes_read_one_grammar() {
        let table: &[(&str, u64)] = &[
            ("0", 0),
            ("4096", 4096),
            (" 4096 ", 4096),
            ("512B", 512),
            ("64K", 64 * KI),
            ("64k", 64 * KI),
            ("64KiB", 64 * KI),
            ("64Ki", 64 * KI),
            ("64KIB", 64 * KI),
            ("64kB", 64_000),
            ("64KB", 64_000),
            ("1M", MI),
            ("1m", MI),
            ("1MiB", MI),
            ("1MB", 1_000_000),
            ("1.5K", 1536),
            ("1.6MB", 1_600_000),
            ("1.5 GiB", 3 * GI / 2),
            ("2G", 2 * GI),
            ("2GB", 2_000_000_000),
            ("1T", 1 << 40),
            ("1TB", 1_000_000_000_000),
            ("8 MiB", 8 * MI),
            (".5K", 512),
            ("2.0", 2),
            ("1.000000000000000000000K", 1024),
            ("16383.5TiB", 16383 * (1 << 40) + (1 << 39)),
            ("18446744073709551615", u64::MAX),
        ];
        reads(parse_size, table);
    }

    #[test]
    fn a_bare_size_may_count_a_larger_unit() {
        let mib = |t: &str| parse_size_bare(t, MI);
        reads(
            mib,
            &[
                ("512", 512 * MI),
                (" 1024 ", GI),
                ("1.5", 3 * MI / 2),
                ("2GiB", 2 * GI),
                ("64K", 64 * KI),
                ("1MB", 1_000_000),
                ("0", 0),
            ],
        );
        assert!(matches!(mib("64Q"), Err(UnitError::UnknownUnit { .. })));
        assert!(matches!(mib("-1"), Err(UnitError::Negative { .. })));
        assert!(matches!(mib(""), Err(UnitError::Empty { .. })));
        assert!(matches!(mib("0.0000001"), Err(UnitError::FractionalBytes { .. })));
        assert!(matches!(mib("17592186044416"), Err(UnitError::Overflow { .. })));
        assert_eq!(parse_size_bare("4096", 1), parse_size("4096"));
    }

    #[test]
    fn sizes_refused_with_the_reason() {
        let s = |t: &str| parse_size(t).unwrap_err();
        assert_eq!(s(""), UnitError::Empty { what: Quantity::Size });
        assert_eq!(s("   "), UnitError::Empty { what: Quantity::Size });
        assert!(matches!(s("-1"), UnitError::Negative { .. }));
        assert!(matches!(s("-64K"), UnitError::Negative { .. }));
        for bad in ["K", "x", "+5", "1.2.3", ".", "..5", "nan", "inf", "1e6"] {
            assert!(
                matches!(s(bad), UnitError::NotANumber { .. } | UnitError::UnknownUnit { .. }),
                "{bad:?}: {:?}",
                s(bad)
            );
        }
        for bad in ["64Q", "64Kb", "64kb", "64kib", "1mb", "64 bytes", "64KiBB", "1P", "1MB/s", "1M B"] {
            assert!(matches!(s(bad), UnitError::UnknownUnit { .. }), "{bad:?}: {:?}", s(bad));
        }
        for bad in ["1.5", "0.1K", "1.1MiB", "0.0000000000000000001", "1.0000000000000000000001"] {
            assert!(matches!(s(bad), UnitError::FractionalBytes { .. }), "{bad:?}: {:?}", s(bad));
        }
        for bad in ["18446744073709551616", "16EiB", "16777216T", "99999999999999999999999999999999999999999"] {
            assert!(matches!(s(bad), UnitError::Overflow { .. } | UnitError::UnknownUnit { .. }), "{bad:?}");
        }
        assert!(matches!(s("18446744073709551616"), UnitError::Overflow { .. }));
        assert!(matches!(s("16777216T"), UnitError::Overflow { .. }));
    }

    #[test]
    fn rates_read_one_grammar() {
        let table: &[(&str, u64)] = &[
            ("250000000", 250_000_000),
            ("500M", 500_000_000),
            ("500m", 500_000_000),
            ("10G", 10_000_000_000),
            ("1.5G", 1_500_000_000),
            ("100k", 100_000),
            ("100K", 100_000),
            ("1T", 1_000_000_000_000),
            // tc's forms, as scenarios write them
            ("1gbit", 1_000_000_000),
            ("10gbit", 10_000_000_000),
            ("2.5gbit", 2_500_000_000),
            ("100mbit", 100_000_000),
            ("8kbit", 8_000),
            ("1000000bit", 1_000_000),
            ("1Gbit", 1_000_000_000),
            ("10GBIT", 10_000_000_000),
            ("1gibit", 1 << 30),
            // bits, spelled out
            ("2.5Gbit/s", 2_500_000_000),
            ("1 Gbit/s", 1_000_000_000),
            ("100Mb/s", 100_000_000),
            ("100Mb", 100_000_000),
            ("10Mbits", 10_000_000),
            ("10Mbits/s", 10_000_000),
            ("800kbps", 800_000),
            ("10Gbps", 10_000_000_000),
            ("500M/s", 500_000_000),
            ("64bit/s", 64),
            // bytes
            ("50MB/s", 400_000_000),
            ("50MB", 400_000_000),
            ("50MBps", 400_000_000),
            ("50MiB/s", 50 * MI * 8),
            ("1GiB/s", 8 * GI),
            ("125000B/s", 1_000_000),
            ("12.5B/s", 100),
            ("1.1MiB/s", 9_227_469), // 9,227,468.8 rounded
            ("64Ki", 64 * KI),
            ("0.5bit", 1),
            (" 2.5 G ", 2_500_000_000),
        ];
        reads(parse_rate, table);
    }

    #[test]
    fn rates_refused_with_the_reason() {
        let r = |t: &str| parse_rate(t).unwrap_err();
        assert_eq!(r(""), UnitError::Empty { what: Quantity::Rate });
        assert!(matches!(r("-1"), UnitError::Negative { .. }));
        assert!(matches!(r("-1M"), UnitError::Negative { .. }));
        for bad in ["fast", "G", "nan", "inf", "1e9", "+1G", "1..5G"] {
            assert!(matches!(r(bad), UnitError::NotANumber { .. } | UnitError::UnknownUnit { .. }), "{bad:?}");
        }
        for bad in ["5X", "1P", "1e30T", "50iB/s", "1Gbps/s", "1GBps/s", "1 G bit", "1Gbit/sec", "1Gbyte", "1KiKbit"] {
            assert!(matches!(r(bad), UnitError::UnknownUnit { .. }), "{bad:?}: {:?}", r(bad));
        }
        for bad in ["0", "0G", "0.4bit", "0.0"] {
            assert!(matches!(r(bad), UnitError::BelowOneBit { .. }), "{bad:?}: {:?}", r(bad));
        }
        for bad in ["18446744073709551616", "30000000000TB", "99999999999999999999999999999999999999999G"] {
            assert!(matches!(r(bad), UnitError::Overflow { .. } | UnitError::NotANumber { .. }), "{bad:?}");
        }
        assert!(matches!(r("30000000000TB"), UnitError::Overflow { .. }));
    }

    #[test]
    fn errors_name_the_text_and_the_accepted_forms() {
        let e = parse_rate("5 furlongs").unwrap_err().to_string();
        assert!(e.contains("\"5 furlongs\"") && e.contains("unknown unit \"furlongs\"") && e.contains("50MB/s"), "{e}");
        let e = parse_size("64Kb").unwrap_err().to_string();
        assert!(e.contains("64KiB") && e.contains("kB"), "{e}");
        let e = parse_size("1.5").unwrap_err().to_string();
        assert_eq!(e, "size \"1.5\" is not a whole number of bytes");
        let e = parse_rate("\x1b[2J1G").unwrap_err().to_string();
        assert!(!e.contains('\x1b'), "{e}");
        let long = "9".repeat(100) + "Q";
        assert!(parse_size(&long).unwrap_err().to_string().len() < 400);
    }

    #[test]
    fn formats_rates_and_sizes_for_people() {
        type Format = fn(f64) -> String;
        let (rate, si, iec): (Format, Format, Format) = (format_rate, format_size, format_size_iec);
        let table = [
            (rate, 9.31e9, "9.31 Gbit/s"),
            (rate, 9.416e9, "9.42 Gbit/s"),
            (rate, 400e6, "400 Mbit/s"),
            (rate, 2.5e9, "2.5 Gbit/s"),
            (rate, 100_000.0, "100 kbit/s"),
            (rate, 999.9, "1 kbit/s"),
            (rate, 12.0, "12 bit/s"),
            (rate, 0.0, "0 bit/s"),
            (si, 512_000.0, "512 kB"),
            (si, 1_600_000.0, "1.6 MB"),
            (si, 4_157_813_816.0, "4.16 GB"),
            (si, 100.0, "100 B"),
            (iec, 65536.0, "64 KiB"),
            (iec, 6.0 * MI as f64, "6 MiB"),
            (iec, 1.5 * GI as f64, "1.5 GiB"),
            (iec, 212_992.0, "208 KiB"),
            (iec, 1000.0, "1000 B"),
        ];
        for (format, x, want) in table {
            assert_eq!(format(x), want, "{x}");
        }
        assert_eq!(significant(0.987_65, 3), "0.988");
        assert_eq!(significant(1234.6, 4), "1235");
    }

    #[test]
    fn what_is_printed_reads_back() {
        for bps in [9.41e9, 400e6, 2.5e9, 100e3, 12.0] {
            assert_eq!(parse_rate(&format_rate(bps)).unwrap() as f64, bps, "{bps}");
        }
        for b in [512_000.0, 1.6e6, 100.0] {
            assert_eq!(parse_size(&format_size(b)).unwrap() as f64, b, "{b}");
        }
        for b in [64.0 * KI as f64, 6.0 * MI as f64, 1.5 * GI as f64] {
            assert_eq!(parse_size(&format_size_iec(b)).unwrap() as f64, b, "{b}");
        }
    }

    #[test]
    fn sizes_in_files_are_numbers_or_strings() {
        #[derive(serde::Deserialize, Debug)]
        struct F {
            #[serde(deserialize_with = "serde_size::deserialize")]
            a: u64,
            #[serde(default, deserialize_with = "serde_size::option")]
            b: Option<u64>,
        }
        let f: F = serde_json::from_str(r#"{"a": 4096, "b": "1.6MB"}"#).unwrap();
        assert_eq!((f.a, f.b), (4096, Some(1_600_000)));
        let f: F = serde_json::from_str(r#"{"a": "64K"}"#).unwrap();
        assert_eq!((f.a, f.b), (65536, None));
        let e = serde_json::from_str::<F>(r#"{"a": "64Q"}"#).unwrap_err().to_string();
        assert!(e.contains("unknown unit"), "{e}");
        assert!(serde_json::from_str::<F>(r#"{"a": -1}"#).unwrap_err().to_string().contains("negative"));
        assert!(serde_json::from_str::<F>(r#"{"a": 1.5}"#).is_err());
    }
}
