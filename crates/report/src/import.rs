//! `report import`: a document read from a file or standard input, at most 64 MiB, into a run.

use crate::{ReportError, RunReport};
use std::io::Read;
use std::path::{Path, PathBuf};

/// The largest document read: 64 MiB.
const MAX: u64 = 64 << 20;

/// Why a document could not be imported.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// Standard input (`-`) could not be read.
    #[error("cannot read standard input")]
    Stdin(#[source] std::io::Error),
    /// The file could not be read.
    #[error("cannot read {}", .0.display())]
    Read(PathBuf, #[source] std::io::Error),
    /// The file is larger than 64 MiB.
    #[error("{} is larger than 64 MiB; not a linerate document", .0.display())]
    TooLarge(PathBuf),
    /// The file is not JSON.
    #[error("{} is not JSON", .0.display())]
    NotJson(PathBuf, #[source] serde_json::Error),
    /// The JSON is not a document a run is made from.
    #[error("cannot import {}", .0.display())]
    Convert(PathBuf, #[source] Box<ReportError>),
}

/// The run of the document in `file` (`-`: standard input): `cp --json`, `bench --json`,
/// `lab run --json` output or an exported run.
pub fn read(file: &Path) -> Result<RunReport, ImportError> {
    let mut buf = Vec::new();
    if file.as_os_str() == "-" {
        std::io::stdin().lock().take(MAX + 1).read_to_end(&mut buf).map_err(ImportError::Stdin)?;
    } else {
        std::fs::File::open(file)
            .and_then(|f| f.take(MAX + 1).read_to_end(&mut buf))
            .map_err(|e| ImportError::Read(file.to_path_buf(), e))?;
    }
    if buf.len() as u64 > MAX {
        return Err(ImportError::TooLarge(file.to_path_buf()));
    }
    let v = serde_json::from_slice(&buf).map_err(|e| ImportError::NotJson(file.to_path_buf(), e))?;
    crate::from_json(v).map_err(|e| ImportError::Convert(file.to_path_buf(), Box::new(e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_is_not_json_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("x.json");
        std::fs::write(&f, "not json").unwrap();
        let e = read(&f).unwrap_err();
        assert!(matches!(e, ImportError::NotJson(..)), "{e:?}");
        assert_eq!(e.to_string(), format!("{} is not JSON", f.display()));
        let missing = dir.path().join("none.json");
        assert!(matches!(read(&missing), Err(ImportError::Read(..))));
    }
}
