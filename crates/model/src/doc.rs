//! The typed documents that carry results between crates (issue 14): what `linerate cp --json`
//! ([`cp`]), `linerate bench --json` ([`mod@bench`]), `linerate lab run` ([`lab`]) and a `linerate mesh`
//! round ([`mesh`]) write, and
//! what `linerate-report` reads back. Producers fill these structs and serialize them; the
//! report deserializes into them, so a field renamed on one side fails on the other instead of
//! silently dropping a figure. The JSON they make is described in docs/REPORT_SCHEMA.md; within
//! a schema version fields are only added.

use serde::{Deserialize, Deserializer, Serialize};

pub mod bench;
pub mod cp;
pub mod example;
pub mod iperf3;
pub mod lab;
pub mod mesh;

/// The program that wrote a document.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ToolInfo {
    /// Always `linerate`.
    pub name: String,
    /// Its version (`CARGO_PKG_VERSION`).
    pub version: String,
}

impl ToolInfo {
    /// linerate at `version` (pass `env!("CARGO_PKG_VERSION")`).
    pub fn linerate(version: &str) -> ToolInfo {
        ToolInfo { name: "linerate".into(), version: version.into() }
    }
}

/// Reads an `Option` field that every document has, `null` when there is no value. Serde would
/// read a missing `Option` field as `None`; with this, a field that is missing (or renamed by a
/// producer) is an error that names it, like any other field.
fn required<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    Option::<T>::deserialize(d)
}
