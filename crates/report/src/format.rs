//! How figures are written for people: a value with its SI prefix and unit (`9.31 Gbit/s`,
//! `120 us`), the one way every table, chart, comparison and list shows a number; and ids and
//! titles with their control characters replaced ([`clean`]).

use linerate_model::units::{format_si, significant};

/// Replaces control characters so an id or title from a file cannot drive the terminal.
pub fn clean(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { '?' } else { c }).collect()
}

/// A value with an SI prefix and its unit: `9.31 Gbit/s`, `512 kB`, `120 us`.
pub fn si(x: f64, unit: &str) -> String {
    if !x.is_finite() {
        return "–".into();
    }
    if unit == "%" {
        return format!("{}%", significant(x, 3));
    }
    if unit == "1/s" {
        // transactions, packets: `91.3 k/s`, not `91.3 k1/s`
        return format_si(x, "/s");
    }
    if let Some(per) = unit.strip_prefix("s/") {
        // CPU seconds per gigabit: `2.1 ms/Gbit`
        return format!("{}/{per}", si(x, "s"));
    }
    if let Some(per) = unit.strip_prefix("us/") {
        // service demand: `11 ms/KB`, not `11 kus/KB`
        return format!("{}/{per}", si(x, "us"));
    }
    if unit == "us" || unit == "s" || unit.is_empty() {
        let (v, u) = match unit {
            "us" if x.abs() >= 1e6 => (x / 1e6, "s"),
            "us" if x.abs() >= 1e3 => (x / 1e3, "ms"),
            "s" if x != 0.0 && x.abs() < 1e-3 => (x * 1e6, "us"),
            "s" if x != 0.0 && x.abs() < 1.0 => (x * 1e3, "ms"),
            _ => (x, unit),
        };
        return if u.is_empty() { significant(v, 3) } else { format!("{} {u}", significant(v, 3)) };
    }
    format_si(x, unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn si_formatting() {
        assert_eq!(si(9.31e9, "bit/s"), "9.31 Gbit/s");
        assert_eq!(si(512_000.0, "B"), "512 kB");
        assert_eq!(si(999.9, "bit/s"), "1 kbit/s");
        assert_eq!(si(0.0, "bit/s"), "0 bit/s");
        assert_eq!(si(1500.0, "us"), "1.5 ms");
        assert_eq!(si(0.25, "s"), "250 ms");
        assert_eq!(si(0.987_65, ""), "0.988");
        assert_eq!(si(0.0021, "s/Gbit"), "2.1 ms/Gbit");
        assert_eq!(si(91_300.0, "1/s"), "91.3 k/s");
        assert_eq!(si(11_000.0, "us/KB"), "11 ms/KB");
    }
}
