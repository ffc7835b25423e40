//! A copy's operands, read and checked before anything starts: the destination's form
//! (`HOST:PORT:PATH` or a local path, [`parse_dest`]), a local destination split into the
//! receiver's root and the path beneath it ([`local_root`]), and the copy rules GNU cp keeps
//! (every source exists, no directory copied into itself).

use linerate_proto::frame::Placement;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Why a copy's operands were refused.
#[derive(Debug, thiserror::Error)]
pub enum OperandError {
    /// A `HOST:PORT:PATH` operand is not in that form; `form` says what was expected.
    #[error("'{operand}': expected {form}")]
    Form {
        /// The operand as given.
        operand: String,
        /// The expected form.
        form: &'static str,
    },
    /// Its port is not a number.
    #[error("'{operand}': port '{port}' is not a number (prefix a local path containing ':' with ./)")]
    Port {
        /// The operand as given.
        operand: String,
        /// What stood in the port's place.
        port: String,
    },
    /// Its host is empty.
    #[error("'{0}': empty host")]
    EmptyHost(String),
    /// A source does not exist.
    #[error("{}: no such file or directory", .0.display())]
    NoSource(PathBuf),
    /// A remote source beside others, or with a remote destination.
    #[error("{}: a pull takes exactly one remote source and a local destination", .0.display())]
    Pull(PathBuf),
    /// A path of the destination could not be resolved (`what`: the path, or `destination
    /// directory` and the path).
    #[error("{what}")]
    Resolve {
        /// Which path.
        what: String,
        /// Why.
        #[source]
        io: std::io::Error,
    },
    /// A directory's contents copied onto `/`.
    #[error(
        "{}: copying a directory's contents (a source ending in '/') needs a destination other than /",
        .0.display()
    )]
    ContentsOntoRoot(PathBuf),
    /// The destination names no file (`..`).
    #[error("{}: destination has no file name", .0.display())]
    NoFileName(PathBuf),
    /// The destination's parent is not a directory.
    #[error("{}: not a directory, so {} cannot be made in it", parent.display(), dest.display())]
    ParentNotDirectory {
        /// The parent.
        parent: PathBuf,
        /// The destination.
        dest: PathBuf,
    },
    /// A directory copied into itself.
    #[error(
        "cannot copy a directory, {}, into itself, {}: copy it elsewhere, or its contents one by one",
        source_dir.display(),
        target.display()
    )]
    IntoItself {
        /// The source directory.
        source_dir: PathBuf,
        /// Where it would land.
        target: PathBuf,
    },
}

/// Where the copy goes.
#[derive(Debug, PartialEq, Eq)]
pub enum Dest {
    /// A running server's `HOST:PORT:PATH`.
    Remote {
        /// The host as written (IPv6 without brackets).
        host: String,
        /// The server's port.
        port: u16,
        /// The path on the server.
        path: Vec<u8>,
    },
    /// A path on this host.
    Local(PathBuf),
}

/// Read an operand as `HOST:PORT:PATH` (`[ADDR]:PORT:PATH`), or a local path: one starting with
/// `/`, `./` or `../`, without a `:`, or not UTF-8.
pub fn parse_dest(p: &Path) -> Result<Dest, OperandError> {
    let b = p.as_os_str().as_bytes();
    let Ok(s) = std::str::from_utf8(b) else {
        return Ok(Dest::Local(p.to_path_buf()));
    };
    if s.starts_with('/') || s.starts_with("./") || s.starts_with("../") || !s.contains(':') {
        return Ok(Dest::Local(p.to_path_buf()));
    }
    let form = |form| OperandError::Form { operand: s.to_string(), form };
    let (host, rest) = if let Some(r) = s.strip_prefix('[') {
        let (h, rest) = r.split_once("]:").ok_or_else(|| form("[ADDR]:PORT:PATH"))?;
        (h.to_string(), rest)
    } else {
        let (h, rest) = s.split_once(':').ok_or_else(|| form("HOST:PORT:PATH"))?;
        (h.to_string(), rest)
    };
    let (port, path) =
        rest.split_once(':').ok_or_else(|| form("HOST:PORT:PATH (prefix a local path containing ':' with ./)"))?;
    let port: u16 = port.parse().map_err(|_| OperandError::Port { operand: s.to_string(), port: port.to_string() })?;
    if host.is_empty() {
        return Err(OperandError::EmptyHost(s.to_string()));
    }
    Ok(Dest::Remote { host, port, path: path.as_bytes().to_vec() })
}

/// Every source exists (as a name: a dangling symlink is copied as one).
pub fn exist(sources: &[PathBuf]) -> Result<(), OperandError> {
    match sources.iter().find(|s| std::fs::symlink_metadata(s).is_err()) {
        Some(s) => Err(OperandError::NoSource(s.clone())),
        None => Ok(()),
    }
}

/// Split a local destination into the server root and the path beneath it: an existing directory
/// is the root itself, unless the copy is to become it (`Placement::As`), when its parent is.
pub fn local_root(dest: &Path, placement: Placement) -> Result<(PathBuf, Vec<u8>), OperandError> {
    if dest.is_dir() {
        let root = dest.canonicalize().map_err(|io| OperandError::Resolve { what: dest.display().to_string(), io })?;
        if placement != Placement::As {
            return Ok((root, Vec::new()));
        }
        return match (root.parent(), root.file_name()) {
            (Some(parent), Some(name)) => Ok((parent.to_path_buf(), name.as_bytes().to_vec())),
            _ => Err(OperandError::ContentsOntoRoot(dest.to_path_buf())),
        };
    }
    let name = dest.file_name().ok_or_else(|| OperandError::NoFileName(dest.to_path_buf()))?;
    let parent = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let root = parent
        .canonicalize()
        .map_err(|io| OperandError::Resolve { what: format!("destination directory {}", parent.display()), io })?;
    if !root.is_dir() {
        return Err(OperandError::ParentNotDirectory { parent, dest: dest.to_path_buf() });
    }
    Ok((root, name.as_bytes().to_vec()))
}

/// Refuse to copy a directory into itself (`cp src src/sub`), as GNU cp does: the walk would
/// meet its own copy. `root`/`path` is where the copy lands ([`local_root`]).
pub fn refuse_copy_into_itself(sources: &[PathBuf], root: &Path, path: &[u8]) -> Result<(), OperandError> {
    let target = root.join(OsStr::from_bytes(path));
    for s in sources {
        let Ok(src) = s.canonicalize() else { continue };
        if std::fs::symlink_metadata(s).is_ok_and(|m| m.is_dir()) && target.starts_with(&src) {
            return Err(OperandError::IntoItself { source_dir: s.clone(), target });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_remote_and_local_destinations() {
        let r = |s: &str| parse_dest(Path::new(s)).unwrap();
        assert_eq!(r("host:7878:a/b"), Dest::Remote { host: "host".into(), port: 7878, path: b"a/b".to_vec() });
        assert_eq!(r("[::1]:9:x"), Dest::Remote { host: "::1".into(), port: 9, path: b"x".to_vec() });
        assert_eq!(r("h:1:"), Dest::Remote { host: "h".into(), port: 1, path: vec![] });
        assert_eq!(r("plain/dir"), Dest::Local("plain/dir".into()));
        assert_eq!(r("./a:b:c"), Dest::Local("./a:b:c".into()));
        assert_eq!(r("/abs:1:x"), Dest::Local("/abs:1:x".into()));
        assert!(parse_dest(Path::new("host:notaport:x")).is_err());
        assert!(parse_dest(Path::new("host:1")).is_err());
        assert!(parse_dest(Path::new(":1:x")).is_err());
    }
}
