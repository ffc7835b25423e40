//! What every converter uses: reading a document into its typed form, the run's time stamp,
//! number cells and chart lines.

use crate::model::*;
use crate::ReportError;
use serde_json::Value;

/// Deserializes a document into its typed form; a mismatch names the field.
pub(super) fn parse<T: serde::de::DeserializeOwned>(v: &Value, what: &str) -> Result<T, ReportError> {
    T::deserialize(v).map_err(|e| ReportError::Invalid(format!("{what}: {e}")))
}

/// Takes the run's start time and linerate version from the document.
pub(super) fn stamp(r: &mut RunReport, started_unix: u64, version: &str) {
    if started_unix > 0 {
        r.created = crate::time::rfc3339(started_unix);
    }
    r.tool_version = version.to_string();
}

/// A number cell, or null.
pub(super) fn num(x: Option<f64>) -> Cell {
    Cell::num(x)
}

/// Adds a named point to the line of that name, creating it.
pub(super) fn push_point(lines: &mut Vec<Line>, name: &str, p: [f64; 2]) {
    match lines.iter_mut().find(|l| l.name == name) {
        Some(l) => l.points.push(p),
        None => lines.push(Line { name: name.to_string(), points: vec![p] }),
    }
}
