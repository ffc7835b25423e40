//! Values that config files (scenarios, inventories) and `lab set` hold once they are read:
//! [`Rate`], [`Duration`], [`Percent`], [`Subnet`] and [`QueueLimit`]. Each is made by the one
//! grammar of [`super`] (through `FromStr` or serde), so a file is checked when it is read and
//! the code that plans from it never parses a string again (issue 30, "validated once").

use super::{parse_duration, parse_rate, parse_size, shown, Quantity, UnitError};
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use std::fmt;
use std::str::FromStr;

/// A rate in bits per second, at least 1 bit/s: `"10gbit"`, `"500M"`, `"50MB/s"` in a file, or
/// an integer number of bits per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rate(u64);

impl Rate {
    /// A rate of `bps` bits per second.
    pub const fn from_bits_per_s(bps: u64) -> Rate {
        Rate(bps)
    }
    /// Bits per second.
    pub const fn bits_per_s(self) -> u64 {
        self.0
    }
}

impl FromStr for Rate {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Rate, UnitError> {
        parse_rate(s).map(Rate)
    }
}

impl fmt::Display for Rate {
    /// Exact, in bits, as tc reads it: `1000000000bit`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}bit", self.0)
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Rate, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Rate;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a rate: bits per second or a string such as \"10gbit\", \"500M\", \"50MB/s\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Rate, E> {
                if v == 0 {
                    return Err(E::custom(UnitError::BelowOneBit { input: "0".into() }));
                }
                Ok(Rate(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Rate, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::custom(UnitError::Negative { what: Quantity::Rate, input: v.to_string() })),
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Rate, E> {
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// A span of time in the one duration grammar (`"250us"`, `"5ms"`, `"1.5s"`, `"10m"`, `"6h"`).
/// A file gives it as a string; where a bare number would be ambiguous the reader asks for a
/// unit ([`Duration::with_unit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Duration(std::time::Duration);

impl Duration {
    /// Reads `s`, refusing a bare number ([`UnitError::NoUnit`]): for fields whose readers
    /// could take `5` for milliseconds (a link's delay, `doctor --rtt`).
    pub fn with_unit(s: &str) -> Result<Duration, UnitError> {
        let t = s.trim();
        if t.ends_with(|c: char| c.is_ascii_digit() || c == '.') {
            return Err(UnitError::NoUnit { input: shown(t) });
        }
        t.parse()
    }
    /// The span as a `std::time::Duration`.
    pub const fn get(self) -> std::time::Duration {
        self.0
    }
    /// Whole microseconds (what tc is given).
    pub fn as_micros(self) -> u64 {
        u64::try_from(self.0.as_micros()).unwrap_or(u64::MAX)
    }
}

impl From<std::time::Duration> for Duration {
    fn from(d: std::time::Duration) -> Duration {
        Duration(d)
    }
}

impl From<Duration> for std::time::Duration {
    fn from(d: Duration) -> std::time::Duration {
        d.0
    }
}

impl FromStr for Duration {
    type Err = UnitError;
    /// The one grammar: a bare number is seconds.
    fn from_str(s: &str) -> Result<Duration, UnitError> {
        parse_duration(s).map(Duration)
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Duration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration: a string such as \"250us\", \"5ms\", \"1.5s\", \"10m\", \"6h\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

/// A percentage, 0 to 100: `"1%"`, `"1"`, `1.0` and `1` all mean one percent (`loss = "1%"` in a
/// scenario, `lab set wan loss=1%`). Its text is the number and `%`, as netem reads it: `0.5%`.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
pub struct Percent(f64);

impl Percent {
    /// `p` percent, if within 0..=100.
    pub fn new(p: f64) -> Result<Percent, UnitError> {
        if (0.0..=100.0).contains(&p) {
            Ok(Percent(p))
        } else {
            Err(UnitError::PercentRange { input: shown(&p.to_string()) })
        }
    }
    /// The percentage (`1.0` for 1 %).
    pub const fn get(self) -> f64 {
        self.0
    }
    /// The share it is (`0.01` for 1 %).
    pub fn fraction(self) -> f64 {
        self.0 / 100.0
    }
    /// Whether it is above zero.
    pub fn is_positive(self) -> bool {
        self.0 > 0.0
    }
}

impl FromStr for Percent {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Percent, UnitError> {
        let t = s.trim();
        let num = t.strip_suffix('%').unwrap_or(t).trim_end();
        let plain = !num.is_empty()
            && num.bytes().all(|c| c.is_ascii_digit() || c == b'.')
            && num.bytes().filter(|&c| c == b'.').count() <= 1
            && num != ".";
        let p: f64 = match num.parse() {
            Ok(p) if plain => p,
            _ if num.starts_with('-') => return Err(UnitError::PercentRange { input: shown(t) }),
            _ => return Err(UnitError::NotAPercent { input: shown(t) }),
        };
        Percent::new(p).map_err(|_| UnitError::PercentRange { input: shown(t) })
    }
}

impl fmt::Display for Percent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}%", self.0)
    }
}

impl<'de> Deserialize<'de> for Percent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Percent, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Percent;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a percentage: a number from 0 to 100, or a string such as \"1%\"")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Percent, E> {
                Percent::new(v).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Percent, E> {
                Percent::new(v as f64).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Percent, E> {
                Percent::new(v as f64).map_err(E::custom)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Percent, E> {
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// An IPv4 address with an optional prefix length: `"198.18.1.0/24"` or `"198.18.1.1"`, read
/// by `ipnet`. The address keeps its host bits (an interface address is `ADDR/PREFIX`); where
/// no prefix was written the reader supplies its own default ([`Subnet::or_prefix`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Subnet {
    addr: std::net::Ipv4Addr,
    prefix: Option<u8>,
}

impl Subnet {
    /// The address as written (host bits kept).
    pub const fn addr(self) -> std::net::Ipv4Addr {
        self.addr
    }
    /// The prefix length as written, if it was.
    pub const fn prefix(self) -> Option<u8> {
        self.prefix
    }
    /// The network, with `default` as the prefix length where none was written.
    pub fn or_prefix(self, default: u8) -> ipnet::Ipv4Net {
        let p = self.prefix.unwrap_or(default).min(32);
        // a prefix of at most 32 is always accepted
        ipnet::Ipv4Net::new(self.addr, p).unwrap_or_else(|_| ipnet::Ipv4Net::from(self.addr))
    }
}

impl FromStr for Subnet {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Subnet, UnitError> {
        let t = s.trim();
        let bad = || UnitError::NotAnAddress { input: shown(t) };
        if t.contains('/') {
            let n: ipnet::Ipv4Net = t.parse().map_err(|_| bad())?;
            Ok(Subnet { addr: n.addr(), prefix: Some(n.prefix_len()) })
        } else {
            Ok(Subnet { addr: t.parse().map_err(|_| bad())?, prefix: None })
        }
    }
}

impl fmt::Display for Subnet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.prefix {
            Some(p) => write!(f, "{}/{p}", self.addr),
            None => write!(f, "{}", self.addr),
        }
    }
}

impl<'de> Deserialize<'de> for Subnet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Subnet, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Subnet;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an IPv4 address, ADDR or ADDR/PREFIX, e.g. \"198.18.1.0/24\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Subnet, E> {
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

/// How much a queue holds: a number of bytes (`"64KiB"`, `65536`) or a time at the queue's rate
/// (`"2ms"`, the unit required).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueLimit {
    /// This many bytes.
    Bytes(u64),
    /// What the rate carries in this time.
    Time(Duration),
}

impl QueueLimit {
    /// Bytes at `bits_per_s`: a time's worth, or the bytes given.
    pub fn bytes_at(self, bits_per_s: u64) -> u64 {
        match self {
            QueueLimit::Bytes(b) => b,
            QueueLimit::Time(t) => {
                let b = u128::from(t.as_micros()) * u128::from(bits_per_s) / 8_000_000;
                u64::try_from(b).unwrap_or(u64::MAX)
            }
        }
    }
}

impl FromStr for QueueLimit {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<QueueLimit, UnitError> {
        if let Ok(t) = Duration::with_unit(s) {
            return Ok(QueueLimit::Time(t));
        }
        parse_size(s).map(QueueLimit::Bytes).map_err(|_| UnitError::NotAQueue { input: shown(s) })
    }
}

impl<'de> Deserialize<'de> for QueueLimit {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<QueueLimit, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = QueueLimit;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a queue: a size (\"64KiB\", or bytes) or a time at the rate (\"2ms\")")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<QueueLimit, E> {
                Ok(QueueLimit::Bytes(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<QueueLimit, E> {
                u64::try_from(v)
                    .map(QueueLimit::Bytes)
                    .map_err(|_| E::custom(UnitError::Negative { what: Quantity::Size, input: v.to_string() }))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<QueueLimit, E> {
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize, Debug)]
    struct F {
        loss: Option<Percent>,
        rate: Option<Rate>,
        delay: Option<Duration>,
        subnet: Option<Subnet>,
        queue: Option<QueueLimit>,
    }

    fn read(text: &str) -> Result<F, String> {
        serde_json::from_str(text).map_err(|e| e.to_string())
    }

    #[test]
    fn a_percentage_is_a_number_or_a_string_with_or_without_the_sign() {
        for text in
            [r#"{"loss": "1%"}"#, r#"{"loss": "1"}"#, r#"{"loss": 1.0}"#, r#"{"loss": 1}"#, r#"{"loss": " 1 %"}"#]
        {
            assert_eq!(read(text).unwrap().loss, Some(Percent(1.0)), "{text}");
        }
        assert_eq!("0.5%".parse::<Percent>().unwrap().to_string(), "0.5%", "netem's form");
        assert_eq!("100".parse::<Percent>().unwrap().fraction(), 1.0);
        for bad in ["101", "-1", "-1%", "100.5%", "lots", "", "%", "1e2", "nan", "inf", "1.2.3%", "."] {
            let e = bad.parse::<Percent>().unwrap_err();
            assert!(matches!(e, UnitError::NotAPercent { .. } | UnitError::PercentRange { .. }), "{bad:?}: {e}");
        }
        assert!(read(r#"{"loss": 101.0}"#).unwrap_err().contains("0 to 100"));
        assert!(read(r#"{"loss": -1}"#).is_err());
        assert!(read(r#"{"loss": "fast"}"#).unwrap_err().contains("\"fast\""));
    }

    #[test]
    fn rates_durations_subnets_and_queues_read_once() {
        let f = read(r#"{"rate": "10gbit", "delay": "5ms", "subnet": "198.18.1.1/24", "queue": "2ms", "loss": null}"#)
            .unwrap();
        assert_eq!(f.rate, Some(Rate(10_000_000_000)));
        assert_eq!(f.rate.unwrap().to_string(), "10000000000bit");
        assert_eq!(f.delay.unwrap().as_micros(), 5000);
        let s = f.subnet.unwrap();
        assert_eq!(
            (s.addr(), s.prefix(), s.to_string()),
            ("198.18.1.1".parse().unwrap(), Some(24), "198.18.1.1/24".into())
        );
        assert_eq!(f.queue, Some(QueueLimit::Time(Duration(std::time::Duration::from_millis(2)))));
        assert_eq!(f.queue.unwrap().bytes_at(1_000_000_000), 250_000, "2 ms at 1 Gbit/s");
        assert_eq!(read(r#"{"rate": 1000}"#).unwrap().rate, Some(Rate(1000)));
        assert_eq!(read(r#"{"queue": "64KiB"}"#).unwrap().queue, Some(QueueLimit::Bytes(65536)));
        assert_eq!(read(r#"{"queue": 1500}"#).unwrap().queue, Some(QueueLimit::Bytes(1500)));
        assert_eq!(
            read(r#"{"queue": "1500"}"#).unwrap().queue,
            Some(QueueLimit::Bytes(1500)),
            "a bare number is bytes"
        );
        let sub = "198.18.1.1".parse::<Subnet>().unwrap();
        assert_eq!((sub.prefix(), sub.or_prefix(32).to_string()), (None, "198.18.1.1/32".to_string()));
        assert_eq!(sub.or_prefix(24).network().to_string(), "198.18.1.0");
        for bad in ["198.18.1.1/33", "10.0.0.256", "host", "198.18.1.1/", "/24", "::1"] {
            assert!(matches!(bad.parse::<Subnet>(), Err(UnitError::NotAnAddress { .. })), "{bad:?}");
        }
        assert!(
            read(r#"{"rate": "fast"}"#).unwrap_err().contains("unknown unit") || read(r#"{"rate": "fast"}"#).is_err()
        );
        assert!(read(r#"{"rate": 0}"#).unwrap_err().contains("below 1 bit/s"));
        assert!(read(r#"{"delay": 5}"#).is_err(), "a duration in a file is a string");
        let e = read(r#"{"queue": "lots"}"#).unwrap_err();
        assert!(e.contains("a size") && e.contains("2ms"), "{e}");
    }

    #[test]
    fn a_duration_that_needs_a_unit_says_so() {
        assert_eq!(Duration::with_unit("250us").unwrap().as_micros(), 250);
        assert_eq!(Duration::with_unit(" 1.5s ").unwrap().get(), std::time::Duration::from_millis(1500));
        for bare in ["5", "0.5", "5."] {
            let e = Duration::with_unit(bare).unwrap_err();
            assert!(matches!(e, UnitError::NoUnit { .. }), "{bare}: {e}");
            assert!(e.to_string().contains("no unit: give one"), "{e}");
        }
        assert_eq!("5".parse::<Duration>().unwrap().get(), std::time::Duration::from_secs(5), "bare: seconds");
        assert!(Duration::with_unit("5 fortnights").is_err());
    }
}
