//! linerate's shared vocabulary, a leaf crate every other one may use: the typed documents that
//! carry results between crates ([`doc`]), the one grammar for rates, sizes, durations and
//! percentages that every flag, key option and scenario field accepts, with the typed values
//! config files are read into ([`units`]), the statistics every report uses with
//! one documented behaviour at the edges ([`stats`]), host metadata ([`host`]), the names of a stored run's figures ([`metric`]), a benchmark
//! profile's workload ([`profile`]), RFC 3339 time stamps ([`time`]), and the one way to stop a
//! loop ([`shutdown`]). No I/O (but the optional signal thread of [`shutdown`]); the `testkit`
//! feature adds what tests share across crates (the root-only rule), for `[dev-dependencies]`.
#![forbid(unsafe_code)]

pub mod doc;
pub mod host;
pub mod metric;
pub mod profile;
pub mod shutdown;
#[cfg(feature = "signals")]
pub mod signals;
pub mod stats;
pub mod tcp;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod time;
pub mod units;

/// The agent's TCP port when an address names none (`serve --listen`, `bench HOST`, `cp
/// HOST:PATH`, doctor's peer, a mesh inventory, the lab's agents).
pub const DEFAULT_PORT: u16 = 7878;
