//! The workload of a `profile` benchmark test (uperf-style: groups of connections running
//! transactions of flow operations), as a profile file says it, as the client sends it in its
//! test request, and as a bench document records it. Here, in the shared vocabulary, so the
//! protocol (`linerate_proto::bench`, which re-exports it) and the typed bench document name
//! the same type; no I/O.

use serde::{Deserialize, Serialize};

/// Largest single profile message (payload or reply).
pub const MAX_PROFILE_MSG: u32 = 1 << 30;
/// Most groups in a profile.
pub const MAX_GROUPS: usize = 16;
/// Most transactions in a group and flow operations in a transaction.
pub const MAX_OPS: usize = 64;

/// A uperf-style workload: groups of connections, each running its transactions in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Short name for reports.
    pub name: String,
    /// What the workload stands for.
    #[serde(default)]
    pub description: String,
    /// The groups, run at the same time.
    #[serde(rename = "group")]
    pub groups: Vec<Group>,
}

/// Connections that run the same transactions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Group {
    /// Name for reports.
    pub name: String,
    /// Connections (uperf threads), each running the transactions independently.
    pub connections: u32,
    /// Transactions, in order.
    #[serde(rename = "transaction")]
    pub transactions: Vec<Transaction>,
}

/// A sequence of flow operations repeated a number of times or for a duration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Transaction {
    /// Repeat this many times...
    pub iterations: Option<u64>,
    /// ...or for this long, in milliseconds (the test's duration when neither is given).
    pub duration_ms: Option<u64>,
    /// Iterations per second per connection, timed from the intended start (open loop).
    pub rate: Option<f64>,
    /// The operations of one iteration.
    pub flowops: Vec<FlowOp>,
}

/// One operation of a transaction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case", deny_unknown_fields)]
pub enum FlowOp {
    /// Open a new data connection (closing the current one, if any).
    Connect,
    /// Send bytes.
    Write {
        /// Bytes to send.
        size: Size,
    },
    /// Receive bytes the server sends in answer.
    Read {
        /// Bytes to receive.
        size: Size,
    },
    /// Wait, without traffic.
    Think {
        /// Milliseconds.
        ms: u64,
    },
    /// Close the data connection.
    Disconnect,
}

/// A message size: fixed, or drawn uniformly from a range for every operation. Written as a
/// number, a string in linerate's size grammar ([`crate::units::parse_size`]: `"64K"`
/// and `"64KiB"` are 65,536 bytes, `"64kB"` 64,000), a range `"1K-64K"`, or `{ min, max }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "SizeRepr")]
pub struct Size {
    /// Smallest size.
    pub min: u32,
    /// Largest size (equal to `min` for a fixed size).
    pub max: u32,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum SizeRepr {
    Num(u64),
    Text(String),
    Range { min: u64, max: u64 },
}

impl TryFrom<SizeRepr> for Size {
    type Error = SizeError;
    fn try_from(r: SizeRepr) -> Result<Size, SizeError> {
        let fit = |v: u64| u32::try_from(v).map_err(|_| SizeError::Over4GiB(v));
        let size = |s: &str| crate::units::parse_size(s).map_err(SizeError::Grammar);
        let (min, max) = match r {
            SizeRepr::Num(n) => (n, n),
            SizeRepr::Range { min, max } => (min, max),
            SizeRepr::Text(t) => match t.split_once('-') {
                Some((a, b)) => (size(a)?, size(b)?),
                None => {
                    let v = size(&t)?;
                    (v, v)
                }
            },
        };
        Ok(Size { min: fit(min)?, max: fit(max)? })
    }
}

/// Why a profile's message size does not read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SizeError {
    /// Over what a 32-bit size holds.
    #[error("size {0} is over 4 GiB")]
    Over4GiB(u64),
    /// Not in the size grammar.
    #[error(transparent)]
    Grammar(crate::units::UnitError),
}

impl Profile {
    /// Connections the profile opens at once.
    pub fn connections(&self) -> u64 {
        self.groups.iter().map(|g| u64::from(g.connections)).sum()
    }

    /// Structural rules: counts, sizes, and that a read always follows something to answer.
    pub fn validate(&self) -> Result<(), ProfileError> {
        if self.groups.is_empty() || self.groups.len() > MAX_GROUPS {
            return Err(ProfileError::Groups { profile: self.name.clone() });
        }
        for g in &self.groups {
            if g.connections == 0 {
                return Err(ProfileError::NoConnections { group: g.name.clone() });
            }
            if g.transactions.is_empty() || g.transactions.len() > MAX_OPS {
                return Err(ProfileError::Transactions { group: g.name.clone() });
            }
            for (i, t) in g.transactions.iter().enumerate() {
                let at = || TransactionAt { group: g.name.clone(), number: i + 1 };
                if t.flowops.is_empty() || t.flowops.len() > MAX_OPS {
                    return Err(ProfileError::Flowops(at()));
                }
                if t.iterations.is_some() && t.duration_ms.is_some() {
                    return Err(ProfileError::IterationsAndDuration(at()));
                }
                if t.iterations == Some(0) || t.duration_ms == Some(0) {
                    return Err(ProfileError::ZeroLength(at()));
                }
                if let Some(r) = t.rate {
                    if !(r.is_finite() && r > 0.0 && r <= 1e7) {
                        return Err(ProfileError::Rate(at()));
                    }
                }
                for op in &t.flowops {
                    match op {
                        FlowOp::Write { size } | FlowOp::Read { size }
                            if size.min > size.max || size.max > MAX_PROFILE_MSG =>
                        {
                            return Err(ProfileError::Size { at: at(), min: size.min, max: size.max });
                        }
                        FlowOp::Think { ms } if *ms > 60_000 => {
                            return Err(ProfileError::Think { at: at(), ms: *ms });
                        }
                        _ => {}
                    }
                }
            }
        }
        Ok(())
    }
}

/// Which transaction of which group a [`ProfileError`] is about (numbered from 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionAt {
    /// The group's name.
    pub group: String,
    /// The transaction's place in the group, from 1.
    pub number: usize,
}

impl std::fmt::Display for TransactionAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "group {:?} transaction {}", self.group, self.number)
    }
}

/// Why a profile breaks the structural rules ([`Profile::validate`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    /// No group, or more than [`MAX_GROUPS`].
    #[error("profile {profile:?}: needs 1 to {MAX_GROUPS} groups")]
    Groups {
        /// The profile's name.
        profile: String,
    },
    /// A group that opens no connection.
    #[error("group {group:?}: connections must be at least 1")]
    NoConnections {
        /// The group's name.
        group: String,
    },
    /// A group with no transaction, or more than [`MAX_OPS`].
    #[error("group {group:?}: needs 1 to {MAX_OPS} transactions")]
    Transactions {
        /// The group's name.
        group: String,
    },
    /// A transaction with no flowop, or more than [`MAX_OPS`].
    #[error("{0}: needs 1 to {MAX_OPS} flowops")]
    Flowops(TransactionAt),
    /// Both an iteration count and a duration.
    #[error("{0}: give iterations or duration, not both")]
    IterationsAndDuration(TransactionAt),
    /// Zero iterations or a zero duration.
    #[error("{0}: iterations and duration must be positive")]
    ZeroLength(TransactionAt),
    /// A rate that is not above 0 and at most 10,000,000 per second.
    #[error("{0}: rate must be above 0 and at most 10,000,000 per second")]
    Rate(TransactionAt),
    /// A message size range out of order or over [`MAX_PROFILE_MSG`].
    #[error("{at}: size {min}-{max} must be ordered and at most {MAX_PROFILE_MSG}")]
    Size {
        /// Where.
        at: TransactionAt,
        /// The range's low end.
        min: u32,
        /// The range's high end.
        max: u32,
    },
    /// A think time over 60 s.
    #[error("{at}: think time {ms} ms is over 60 s")]
    Think {
        /// Where.
        at: TransactionAt,
        /// The think time asked for.
        ms: u64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_from_numbers_suffixes_and_ranges() {
        let p = |j: &str| serde_json::from_str::<Size>(j);
        assert_eq!(p("512").unwrap(), Size { min: 512, max: 512 });
        assert_eq!(p(r#""64K""#).unwrap(), Size { min: 65536, max: 65536 });
        assert_eq!(p(r#""1K-1M""#).unwrap(), Size { min: 1024, max: 1 << 20 });
        assert_eq!(p(r#"{"min":1,"max":2}"#).unwrap(), Size { min: 1, max: 2 });
        assert!(p(r#""12Q""#).is_err());
        assert!(p(r#""8G""#).is_err(), "over u32");
        assert!(p("-1").is_err());
        assert_eq!(p(r#""64KiB-1MB""#).unwrap(), Size { min: 65536, max: 1_000_000 });
        assert!(p(r#""1.5""#).is_err(), "fractional bytes");
        assert!(p(r#""-1K""#).is_err());
    }

    #[test]
    fn profile_rules() {
        let op = |size: u32| FlowOp::Write { size: Size { min: size, max: size } };
        let t = Transaction { iterations: Some(1), duration_ms: None, rate: None, flowops: vec![op(10)] };
        let mut p = Profile {
            name: "p".into(),
            description: String::new(),
            groups: vec![Group { name: "g".into(), connections: 2, transactions: vec![t.clone()] }],
        };
        p.validate().unwrap();
        assert_eq!(p.connections(), 2);
        p.groups[0].transactions[0].duration_ms = Some(5);
        assert!(matches!(p.validate(), Err(ProfileError::IterationsAndDuration(_))), "{:?}", p.validate());
        p.groups[0].transactions[0] = Transaction { flowops: vec![op(MAX_PROFILE_MSG + 1)], ..t.clone() };
        assert!(p.validate().is_err());
        p.groups[0].transactions[0] = Transaction { rate: Some(f64::NAN), ..t };
        assert!(p.validate().is_err());
        p.groups.clear();
        assert!(p.validate().is_err());
    }
}
