//! The operands of `linerate cp` over ssh: `[user@]host:PATH` ([`parse_spec`]), told apart from
//! a running server's `HOST:PORT:PATH` and from local paths, and which way the copy goes
//! ([`classify`]: a push of local sources, or a pull of one remote source).

use linerate_proto::name::escape;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Why ssh operands were refused.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// A bracketed address without its closing `]:` (the operand, escaped).
    #[error("'{0}': expected [user@][ADDR]:PATH")]
    Form(String),
    /// A user or host that ssh could misread (empty, an option, not printable).
    #[error("'{0}': not a valid [user@]host:PATH")]
    Invalid(String),
    /// Both ends remote.
    #[error("copying from one remote host to another is not supported: copy through this host")]
    RemoteToRemote,
    /// A pull of more than one source.
    #[error("a copy from a remote host takes exactly one [user@]host:PATH source")]
    PullSources,
}

/// An `[user@]host:PATH` operand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshTarget {
    /// What ssh is given as its destination: `user@host` or `host`.
    pub login: String,
    /// The host alone (IPv6 without brackets).
    pub host: String,
    /// The remote path, as bytes: relative to the remote user's home unless absolute.
    pub path: Vec<u8>,
}

/// What an ssh copy does.
#[derive(Debug, PartialEq, Eq)]
pub enum Job {
    /// Local sources to a remote destination.
    Push {
        /// The local sources.
        sources: Vec<PathBuf>,
        /// The remote destination.
        target: SshTarget,
    },
    /// One remote source to a local destination.
    Pull {
        /// The remote source.
        target: SshTarget,
        /// The local destination.
        into: PathBuf,
    },
}

/// Parse an operand in the ssh form, `[user@]host:PATH` or `[user@][v6addr]:PATH`. `None` for a
/// local path (starts with `/`, `./` or `../`, no `:` or a `/` before the first `:`) and for the
/// daemon form `HOST:PORT:PATH` (a numeric port between two colons, and no `user@`).
pub fn parse_spec(p: &Path) -> Option<Result<SshTarget, TargetError>> {
    let b = p.as_os_str().as_bytes();
    if b.starts_with(b"/") || b.starts_with(b"./") || b.starts_with(b"../") {
        return None;
    }
    let colon = b.iter().position(|&c| c == b':')?;
    // A '/' before the first ':' (outside brackets) makes it a local path, as for scp.
    let bracketed = b.starts_with(b"[") || b.windows(2).position(|w| w == b"@[").is_some_and(|i| i < colon);
    if !bracketed && b[..colon].contains(&b'/') {
        return None;
    }
    let at = b[..colon].iter().position(|&c| c == b'@').filter(|&i| !b[..i].contains(&b'['));
    let (user, rest) = match at {
        Some(i) => (Some(&b[..i]), &b[i + 1..]),
        None => (None, b),
    };
    let (host, path): (&[u8], &[u8]) = if let Some(r) = rest.strip_prefix(b"[") {
        let Some(end) = r.windows(2).position(|w| w == b"]:") else {
            return Some(Err(TargetError::Form(escape(b))));
        };
        (&r[..end], &r[end + 2..])
    } else {
        let c = rest.iter().position(|&c| c == b':')?;
        (&rest[..c], &rest[c + 1..])
    };
    // The daemon form: a numeric port between two colons, no user.
    if user.is_none() {
        if let Some(c) = path.iter().position(|&c| c == b':') {
            if c > 0 && path[..c].iter().all(u8::is_ascii_digit) {
                return None;
            }
        }
    }
    let ok = |s: &[u8]| {
        !s.is_empty() && !s.starts_with(b"-") && s.iter().all(|&c| c.is_ascii_graphic() && c != b'@' && c != b'/')
    };
    if !ok(host) || user.is_some_and(|u| !ok(u)) {
        return Some(Err(TargetError::Invalid(escape(b))));
    }
    let host = String::from_utf8_lossy(host).into_owned();
    let login = match user {
        Some(u) => format!("{}@{host}", String::from_utf8_lossy(u)),
        None => host.clone(),
    };
    Some(Ok(SshTarget { login, host, path: path.to_vec() }))
}

/// A remote operand of either form (`host:...`): not `/`, `./` or `../`, and a `:` before any `/`.
fn looks_remote(p: &Path) -> bool {
    let b = p.as_os_str().as_bytes();
    if b.starts_with(b"/") || b.starts_with(b"./") || b.starts_with(b"../") {
        return false;
    }
    b.iter().position(|&c| c == b':').is_some_and(|c| !b[..c].contains(&b'/'))
}

/// Whether `cp SRC... DEST` is an ssh copy, and which way.
pub fn classify(sources: &[PathBuf], dest: &Path) -> Result<Option<Job>, TargetError> {
    let mut remote_sources = Vec::new();
    for s in sources {
        if let Some(t) = parse_spec(s) {
            remote_sources.push(t?);
        }
    }
    match parse_spec(dest) {
        Some(t) => {
            if !remote_sources.is_empty() {
                return Err(TargetError::RemoteToRemote);
            }
            Ok(Some(Job::Push { sources: sources.to_vec(), target: t? }))
        }
        None if remote_sources.is_empty() => Ok(None),
        None => {
            if sources.len() != 1 {
                return Err(TargetError::PullSources);
            }
            if looks_remote(dest) {
                return Err(TargetError::RemoteToRemote);
            }
            let target = remote_sources.remove(0);
            Ok(Some(Job::Pull { target, into: dest.to_path_buf() }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(s: &str) -> Option<SshTarget> {
        parse_spec(Path::new(s)).map(|r| r.unwrap())
    }

    fn t(login: &str, host: &str, path: &str) -> Option<SshTarget> {
        Some(SshTarget { login: login.into(), host: host.into(), path: path.as_bytes().to_vec() })
    }

    #[test]
    fn tells_ssh_operands_from_daemon_and_local_ones() {
        assert_eq!(spec("host:dir/x"), t("host", "host", "dir/x"));
        assert_eq!(spec("me@host:"), t("me@host", "host", ""));
        assert_eq!(spec("me@host:/abs path"), t("me@host", "host", "/abs path"));
        assert_eq!(spec("host:notaport:x"), t("host", "host", "notaport:x"));
        assert_eq!(spec("host:1"), t("host", "host", "1"));
        assert_eq!(spec("me@host:7878:x"), t("me@host", "host", "7878:x"));
        assert_eq!(spec("[::1]:x"), t("::1", "::1", "x"));
        assert_eq!(spec("me@[fe80::1]:x"), t("me@fe80::1", "fe80::1", "x"));
        // The daemon form and local paths are not ssh operands.
        assert_eq!(spec("host:7878:x"), None);
        assert_eq!(spec("[::1]:7878:x"), None);
        assert_eq!(spec("plain/dir"), None);
        assert_eq!(spec("./a:b"), None);
        assert_eq!(spec("/abs:x"), None);
        assert_eq!(spec("dir/a:b"), None);
        // Malformed.
        assert!(parse_spec(Path::new(":x")).unwrap().is_err());
        assert!(parse_spec(Path::new("-oProxyCommand=x:y")).unwrap().is_err());
        assert!(parse_spec(Path::new("[::1:x")).unwrap().is_err());
    }

    #[test]
    fn classifies_push_and_pull() {
        let p = |v: &[&str]| v.iter().map(PathBuf::from).collect::<Vec<_>>();
        assert!(matches!(classify(&p(&["a", "b"]), Path::new("h:x")).unwrap(), Some(Job::Push { .. })));
        assert!(matches!(classify(&p(&["h:x"]), Path::new("d")).unwrap(), Some(Job::Pull { .. })));
        assert_eq!(classify(&p(&["a"]), Path::new("d")).unwrap(), None);
        assert_eq!(classify(&p(&["a"]), Path::new("h:7878:d")).unwrap(), None);
        assert!(classify(&p(&["h:x", "h:y"]), Path::new("d")).is_err());
        assert!(classify(&p(&["h:x"]), Path::new("g:y")).is_err());
    }
}
