//! Rate limits as people write them: `cp --bwlimit`, `serve --max-rate-per-client` and
//! `--max-rate-total`, and the `rate=` of an authorized key. The syntax is linerate's one rate
//! grammar ([`linerate_model::units::parse_rate`]: `500M`, `1G`, `2.5Gbit/s`, or bytes as
//! rsync users write them, `50MB/s` = 400 Mbit/s); this module adds the floor a limit needs.

use linerate_model::units::{self, UnitError};

/// Slowest rate accepted: below this a 1 MiB record would take longer than the server's idle
/// timeout to go through.
pub const MIN_RATE: u64 = 100_000;

/// Why a rate limit was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// Not a rate in linerate's grammar.
    #[error(transparent)]
    Syntax(#[from] UnitError),
    /// A rate below [`MIN_RATE`].
    #[error("rate {input:?} is below the smallest limit, 100 kbit/s")]
    BelowMinimum {
        /// The text given.
        input: String,
    },
}

/// Parse a rate limit into bit/s: any rate of the grammar, at least [`MIN_RATE`].
pub fn parse_limit(s: &str) -> Result<u64, LimitError> {
    let below = || LimitError::BelowMinimum { input: s.trim().chars().take(64).collect() };
    match units::parse_rate(s) {
        Ok(bits) if bits < MIN_RATE => Err(below()),
        Ok(bits) => Ok(bits),
        Err(UnitError::BelowOneBit { .. }) => Err(below()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_rates_of_at_least_100_kbit() {
        assert_eq!(parse_limit("500M"), Ok(500_000_000));
        assert_eq!(parse_limit("50MB/s"), Ok(400_000_000));
        assert_eq!(parse_limit("100k"), Ok(MIN_RATE));
        assert_eq!(parse_limit("12.5kB/s"), Ok(MIN_RATE));
        for low in ["99k", "0", "12.4kB/s", "0.01bit"] {
            assert!(matches!(parse_limit(low), Err(LimitError::BelowMinimum { .. })), "{low:?}");
        }
        for bad in ["", "fast", "-1M", "5X", "50iB/s", "1e30T", "nan"] {
            assert!(matches!(parse_limit(bad), Err(LimitError::Syntax(_))), "{bad:?} accepted");
        }
    }
}
