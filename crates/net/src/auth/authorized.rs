//! The server's authorized-keys file (`serve --authorized-keys`): which ed25519 keys may start
//! sessions and what each may do. One key per line, `[options] linerate-ed25519 <base64>
//! [comment]`, `#` comments; options `root=DIR`, `ro`, `rw`, `rate=RATE`, `mesh`. Anything unknown or
//! malformed is refused with its line number, never skipped. The server re-reads the file for
//! every new session (as sshd does), so edits apply without a restart.

use crate::auth::keys::{read_capped, Identity, PublicKey, KEY_TYPE};
use crate::{EngineError, UsageError};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Largest authorized-keys file read.
const MAX_FILE: u64 = 4 * 1024 * 1024;
/// Longest `root=` directory.
const MAX_ROOT: usize = 4096;

/// What a key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Pulls only; any push or write is refused with `Denied`.
    ReadOnly,
    /// Pushes and pulls (the default).
    ReadWrite,
}

/// One line of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorizedKey {
    /// The key.
    pub key: PublicKey,
    /// `root=DIR`: this key's sessions are confined beneath DIR instead of the server's `--root`.
    pub root: Option<PathBuf>,
    /// `ro` or `rw`.
    pub access: Access,
    /// `rate=RATE`: this key's rate limit in bit/s.
    pub rate: Option<u64>,
    /// `mesh`: the key may ask this agent to run tests against other agents (a `linerate mesh`
    /// controller).
    pub mesh: bool,
    /// The comment after the key (for logs).
    pub comment: String,
    /// Line number in the file (1-based).
    pub line: usize,
}

/// A parsed authorized-keys file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthorizedKeys {
    /// The entries, in file order.
    pub keys: Vec<AuthorizedKey>,
}

impl AuthorizedKeys {
    /// Read and parse `path`. The file must not be writable by group or others (as sshd's
    /// StrictModes): whoever can edit it can grant themselves access.
    pub fn load(path: &Path) -> Result<AuthorizedKeys, EngineError> {
        let meta = std::fs::metadata(path).map_err(|e| EngineError::file(path, e))?;
        if meta.mode() & 0o022 != 0 {
            return Err(EngineError::Usage(UsageError::Keys(format!(
                "{}: authorized keys file is writable by group or others (mode {:o}); run `chmod go-w {}`",
                path.display(),
                meta.mode() & 0o777,
                path.display()
            ))));
        }
        let text = read_capped(path, MAX_FILE).map_err(|e| match e {
            EngineError::Secret(m) => EngineError::Usage(UsageError::Keys(m)),
            e => e,
        })?;
        AuthorizedKeys::parse(&text)
            .map_err(|e| EngineError::Usage(UsageError::Keys(format!("{}:{e}", path.display()))))
    }

    /// Parse the file's text. An error is `LINE: what is wrong`.
    pub fn parse(text: &str) -> Result<AuthorizedKeys, String> {
        let mut keys = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let n = i + 1;
            keys.push(parse_line(line, n).map_err(|e| format!("{n}: {e}"))?);
        }
        Ok(AuthorizedKeys { keys })
    }

    /// The entry for `key` (the first, if listed twice).
    pub fn find(&self, key: &PublicKey) -> Option<&AuthorizedKey> {
        self.keys.iter().find(|k| k.key == *key)
    }
}

fn parse_line(line: &str, n: usize) -> Result<AuthorizedKey, String> {
    let (options, rest) = if line.starts_with(KEY_TYPE) {
        ("", line)
    } else {
        let (o, r) = line.split_once(char::is_whitespace).ok_or("expected `[options] linerate-ed25519 <key>`")?;
        (o, r.trim_start())
    };
    if !rest.starts_with(KEY_TYPE) {
        return Err(format!("expected `{KEY_TYPE} <key>` after the options"));
    }
    let (key, comment) = PublicKey::parse_line(rest)?;
    let mut entry =
        AuthorizedKey { key, root: None, access: Access::ReadWrite, rate: None, mesh: false, comment, line: n };
    let (mut seen_access, mut seen_root, mut seen_rate, mut seen_mesh) = (false, false, false, false);
    for opt in options.split(',').filter(|o| !o.is_empty()) {
        let (name, value) = match opt.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (opt, None),
        };
        let once = |seen: &mut bool| {
            if std::mem::replace(seen, true) {
                Err(format!("option {name:?} given twice"))
            } else {
                Ok(())
            }
        };
        match (name, value) {
            ("ro", None) | ("rw", None) => {
                once(&mut seen_access).map_err(|_| "give one of `ro` and `rw`".to_string())?;
                entry.access = if name == "ro" { Access::ReadOnly } else { Access::ReadWrite };
            }
            ("root", Some(dir)) => {
                once(&mut seen_root)?;
                let p = PathBuf::from(dir);
                if !p.is_absolute() || dir.len() > MAX_ROOT {
                    return Err(format!("root={dir:?} must be an absolute path"));
                }
                entry.root = Some(p);
            }
            ("rate", Some(r)) => {
                once(&mut seen_rate)?;
                entry.rate = Some(crate::limit::parse_limit(r).map_err(|e| e.to_string())?);
            }
            ("mesh", None) => {
                once(&mut seen_mesh)?;
                entry.mesh = true;
            }
            ("ro" | "rw" | "mesh", Some(_)) => return Err(format!("option {name:?} takes no value")),
            ("root" | "rate", None) => return Err(format!("option {name:?} needs a value ({name}=...)")),
            _ => {
                let shown: String = name.chars().take(40).map(|c| if c.is_control() { '?' } else { c }).collect();
                return Err(format!("unknown option {shown:?} (known: root=DIR, ro, rw, rate=RATE, mesh)"));
            }
        }
    }
    Ok(entry)
}

/// What an admitted session may do: from its key's line, or everything the server offers for a
/// shared-secret session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The authenticated key (`None`: shared secret).
    pub key: Option<PublicKey>,
    /// The key's comment, for logs.
    pub comment: String,
    /// Confine this session beneath this directory instead of the server's `--root`.
    pub root: Option<PathBuf>,
    /// Pulls only.
    pub read_only: bool,
    /// Per-key rate limit, bit/s (`rate=`); the server's limiter applies it to the session.
    pub rate: Option<u64>,
    /// May ask for mesh tests (`mesh`).
    pub mesh: bool,
}

impl Grant {
    /// A shared-secret session: the server's root, read-write, no per-key rate.
    pub fn secret() -> Grant {
        Grant { key: None, comment: String::new(), root: None, read_only: false, rate: None, mesh: false }
    }

    /// A session of an authorized key.
    pub fn from_entry(e: &AuthorizedKey) -> Grant {
        Grant {
            key: Some(e.key),
            comment: e.comment.clone(),
            root: e.root.clone(),
            read_only: e.access == Access::ReadOnly,
            rate: e.rate,
            mesh: e.mesh,
        }
    }

    /// Who this is, for messages: the key's fingerprint (and comment), or "shared secret".
    pub fn who(&self) -> String {
        match (&self.key, self.comment.is_empty()) {
            (Some(k), true) => format!("key {}", k.fingerprint()),
            (Some(k), false) => {
                format!("key {} ({})", k.fingerprint(), linerate_proto::name::escape(self.comment.as_bytes()))
            }
            (None, _) => "shared secret".into(),
        }
    }
}

/// Daemon mode's server side: the host key and where the authorized keys are.
#[derive(Debug, Clone)]
pub struct KeyAuthConfig {
    /// The server's host key, proving who it is to clients (`serve --host-key`).
    pub host_key: Arc<Identity>,
    /// The authorized-keys file, re-read for every new session (`serve --authorized-keys`).
    pub authorized_keys: PathBuf,
}

impl KeyAuthConfig {
    /// Decide on a client key that proved itself: its grant, or the message of a `Fatal` with
    /// code `Auth`. A file that became unreadable or invalid refuses every session.
    pub fn admit(&self, key: &PublicKey) -> Result<Grant, KeyRefused> {
        let keys = AuthorizedKeys::load(&self.authorized_keys).map_err(KeyRefused::Unusable)?;
        match keys.find(key) {
            Some(e) => Ok(Grant::from_entry(e)),
            None => Err(KeyRefused::NotAuthorized(key.fingerprint())),
        }
    }
}

/// Why [`KeyAuthConfig::admit`] admitted no key (the message goes to the client).
#[derive(Debug, thiserror::Error)]
pub enum KeyRefused {
    /// The authorized keys file could not be read, is open to others, or does not parse.
    #[error("the server cannot use its authorized keys file ({0}); no key is admitted")]
    Unusable(EngineError),
    /// The key (its fingerprint) is not in the file.
    #[error("key {0} is not authorized on this server")]
    NotAuthorized(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(b: u8) -> String {
        PublicKey([b; 32]).to_line("c")
    }

    #[test]
    fn parses_keys_with_options_and_comments() {
        let text =
            format!("# team\n\n{}\nro {}\nroot=/srv/a,rw,rate=2.5G {}\n  rate=500M,ro   {}\n", k(1), k(2), k(3), k(4));
        let a = AuthorizedKeys::parse(&text).unwrap();
        assert_eq!(a.keys.len(), 4);
        let e = |b| a.find(&PublicKey([b; 32])).unwrap();
        assert_eq!((e(1).access, e(1).root.clone(), e(1).rate, e(1).line), (Access::ReadWrite, None, None, 3));
        assert_eq!(e(1).comment, "c");
        assert_eq!(e(2).access, Access::ReadOnly);
        assert_eq!((e(3).root.clone(), e(3).rate), (Some(PathBuf::from("/srv/a")), Some(2_500_000_000)));
        assert_eq!((e(4).access, e(4).rate, e(4).line), (Access::ReadOnly, Some(500_000_000), 6));
        assert!(a.find(&PublicKey([5; 32])).is_none());
        assert_eq!(Grant::from_entry(e(4)).rate, Some(500_000_000));
        assert!(Grant::from_entry(e(4)).read_only);
        // The one rate grammar: tc's form and bytes per second too.
        let a = AuthorizedKeys::parse(&format!("rate=1gbit {}\nrate=50MB/s {}\n", k(1), k(2))).unwrap();
        assert_eq!(a.find(&PublicKey([1; 32])).unwrap().rate, Some(1_000_000_000));
        assert_eq!(a.find(&PublicKey([2; 32])).unwrap().rate, Some(400_000_000));
        // `mesh`: a controller's key; no other key may ask for mesh tests.
        let a = AuthorizedKeys::parse(&format!(
            "ro,mesh {}
{}
",
            k(1),
            k(2)
        ))
        .unwrap();
        assert!(Grant::from_entry(a.find(&PublicKey([1; 32])).unwrap()).mesh);
        assert!(!Grant::from_entry(a.find(&PublicKey([2; 32])).unwrap()).mesh);
        assert!(!Grant::secret().mesh);
    }

    #[test]
    fn parse_errors_name_the_line() {
        let good = k(1);
        for (bad, needle) in [
            (format!("bogus {good}"), "unknown option \"bogus\""),
            (format!("ro,rw {good}"), "one of `ro` and `rw`"),
            (format!("mesh,mesh {good}"), "given twice"),
            (format!("mesh=1 {good}"), "takes no value"),
            (format!("root=rel/dir {good}"), "absolute"),
            (format!("root {good}"), "needs a value"),
            (format!("ro=1 {good}"), "takes no value"),
            (format!("rate=fast {good}"), "rate \"fast\""),
            (format!("rate=0 {good}"), "below the smallest limit"),
            (format!("rate=50k {good}"), "below the smallest limit"),
            (format!("rate=1G,rate=2G {good}"), "twice"),
            ("linerate-ed25519 AAAA".into(), "32 bytes"),
            ("ssh-ed25519 AAAAC3Nza".into(), "linerate-ed25519"),
            ("ro".into(), "expected"),
            (format!("ro {}", "x".repeat(10)), "linerate-ed25519"),
        ] {
            let text = format!("# c\n{good}\n{bad}\n");
            let err = AuthorizedKeys::parse(&text).unwrap_err();
            assert!(err.starts_with("3: ") && err.contains(needle), "{bad:?}: {err}");
        }
    }

    #[test]
    fn a_group_writable_file_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ak");
        std::fs::write(&p, k(1)).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(AuthorizedKeys::load(&p).unwrap().keys.len(), 1);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o664)).unwrap();
        assert!(AuthorizedKeys::load(&p).unwrap_err().to_string().contains("chmod go-w"));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&p, format!("{}\nrw,x {}\n", k(1), k(2))).unwrap();
        let err = AuthorizedKeys::load(&p).unwrap_err().to_string();
        assert!(err.contains(&format!("{}:2: unknown option", p.display())), "{err}");
    }
}
