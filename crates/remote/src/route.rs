//! Which way a copy goes ([`Route`]), from `cp`'s operands: a local destination, a running
//! server (a push or a pull), or a host over ssh — checked as far as can be without starting a
//! process or a connection (operands, keys, the address of a server, a directory copied into
//! itself), in that order, and set into the copy's configuration.

use crate::target::{self, Job, SshTarget, TargetError};
use linerate_copy::dest::{exist, local_root, parse_dest, refuse_copy_into_itself, Dest, OperandError};
use linerate_copy::send::{self, CopyConfig};
use linerate_net::addr::ResolveError;
use linerate_net::auth::credentials::{ClientKeys, CredentialError};
use linerate_net::auth::keys::NoteSink;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Where a copy goes, or comes from.
#[derive(Debug)]
pub enum Route {
    /// To a path on this host: a server process of this user serves `root` on loopback, with a
    /// fresh key; the destination is the configuration's `dest` beneath it.
    Local {
        /// The local server's root.
        root: PathBuf,
    },
    /// A running server (`HOST:PORT:PATH`), its address and credentials in the configuration:
    /// a push of its `sources` to its `dest`, or a pull.
    Daemon {
        /// What a pull takes.
        pull: Option<Pull>,
    },
    /// `[user@]host:PATH` over ssh: the remote side is started when the copy runs, and gives
    /// the address and the key.
    Ssh {
        /// The remote operand.
        target: SshTarget,
        /// A pull's local destination (`None`: a push of the configuration's `sources` to
        /// `target.path`).
        into: Option<PathBuf>,
    },
}

/// What a pull takes: a path on the server, into a local destination.
#[derive(Debug)]
pub struct Pull {
    /// The remote path, as the server resolves it.
    pub from: Vec<u8>,
    /// The local destination.
    pub into: PathBuf,
}

/// Why a copy's operands name no route.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    /// An `[user@]host:PATH` operand is malformed, or the operands mix directions.
    #[error(transparent)]
    Target(#[from] TargetError),
    /// A source or the destination is not usable.
    #[error(transparent)]
    Operand(#[from] OperandError),
    /// No credentials for a running server.
    #[error(transparent)]
    Keys(#[from] CredentialError),
    /// Keys for a running server, given for a copy over ssh.
    #[error(
        "--key-file, --identity and --strict-host-key are for a running server (HOST:PORT:PATH); \
         over ssh ([user@]host:PATH), ssh authenticates and the remote side makes a one-time key"
    )]
    KeysOverSsh,
    /// A running server's name gave no address.
    #[error(transparent)]
    Resolve(#[from] ResolveError),
}

/// Resolve `sources` and `dest` into a route, setting into `config` (the flags' settings) the
/// sources, the destination path and its placement, and for a running server its address and
/// credentials (`keys`, telling `note` what they learn of the server's key; none are taken over
/// ssh).
pub fn resolve(
    sources: Vec<PathBuf>,
    dest: &Path,
    keys: &ClientKeys<'_>,
    note: &NoteSink,
    config: &mut CopyConfig,
) -> Result<Route, RouteError> {
    if let Some(job) = target::classify(&sources, dest)? {
        let (target, into) = match job {
            Job::Push { sources, target } => {
                exist(&sources)?;
                config.placement = send::placement(&sources, &target.path);
                config.sources = sources;
                config.dest = target.path.clone();
                (target, None)
            }
            Job::Pull { target, into } => (target, Some(into)),
        };
        if keys.key_file.is_some() || keys.identity.is_some() || keys.strict_host_key {
            return Err(RouteError::KeysOverSsh);
        }
        return Ok(Route::Ssh { target, into });
    }
    // A pull: one remote source, a local destination.
    if let ([src], Dest::Local(into)) = (sources.as_slice(), parse_dest(dest)?) {
        if let Ok(Dest::Remote { host, port, path }) = parse_dest(src) {
            (config.secret, config.key_auth) = keys.resolve(&host, port, "a remote source", note.clone())?;
            config.addr = linerate_net::addr::resolve(&host, None, Some(port))?;
            return Ok(Route::Daemon { pull: Some(Pull { from: path, into }) });
        }
    }
    for s in &sources {
        if let Ok(Dest::Remote { .. }) = parse_dest(s) {
            if std::fs::symlink_metadata(s).is_err() {
                return Err(OperandError::Pull(s.clone()).into());
            }
        }
    }
    exist(&sources)?;
    let route = match parse_dest(dest)? {
        Dest::Remote { host, port, path } => {
            (config.secret, config.key_auth) = keys.resolve(&host, port, "a remote destination", note.clone())?;
            config.placement = send::placement(&sources, &path);
            config.addr = linerate_net::addr::resolve(&host, None, Some(port))?;
            config.dest = path;
            Route::Daemon { pull: None }
        }
        Dest::Local(p) => {
            // Decided on the operand as typed (a trailing '/' counts), not on the path beneath
            // the root.
            config.placement = send::placement(&sources, p.as_os_str().as_bytes());
            let (root, path) = local_root(&p, config.placement)?;
            refuse_copy_into_itself(&sources, &root, &path)?;
            config.dest = path;
            config.peer = "destination";
            Route::Local { root }
        }
    };
    config.sources = sources;
    Ok(route)
}

#[cfg(test)]
mod tests {
    use super::*;
    use linerate_copy::options::settings;
    use std::sync::Arc;

    fn route(sources: &[&Path], dest: &Path, keys: &ClientKeys<'_>) -> (Result<Route, RouteError>, CopyConfig) {
        let mut c = settings();
        let note: NoteSink = Arc::new(|_| {});
        (resolve(sources.iter().map(|s| s.to_path_buf()).collect(), dest, keys, &note, &mut c), c)
    }

    #[test]
    fn a_local_destination_is_served_from_its_root() {
        let t = tempfile::tempdir().unwrap();
        let (src, dst) = (t.path().join("src"), t.path().join("dst"));
        std::fs::create_dir(&src).unwrap();
        let (r, c) = route(&[&src], &dst, &ClientKeys::default());
        let Ok(Route::Local { root }) = r else { panic!("{r:?}") };
        assert_eq!((root.as_path(), c.peer, &c.sources), (t.path(), "destination", &vec![src]));
        assert_eq!(c.dest, b"dst");
    }

    #[test]
    fn a_missing_source_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let (r, _) = route(&[&t.path().join("none")], &t.path().join("dst"), &ClientKeys::default());
        assert!(matches!(r, Err(RouteError::Operand(_))), "{r:?}");
    }

    #[test]
    fn keys_are_checked_before_the_servers_address() {
        let t = tempfile::tempdir().unwrap();
        let missing = t.path().join("no-key");
        let keys = ClientKeys { key_file: Some(&missing), ..ClientKeys::default() };
        let (r, _) = route(&[t.path()], Path::new("server.invalid:7000:/x"), &keys);
        assert!(matches!(r, Err(RouteError::Keys(_))), "{r:?}");
        let (r, _) = route(&[Path::new("server.invalid:7000:/x")], &t.path().join("dst"), &keys);
        assert!(matches!(r, Err(RouteError::Keys(_))), "{r:?}");
        let (r, _) = route(&[t.path()], Path::new("me@host:/x"), &keys);
        assert!(matches!(r, Err(RouteError::KeysOverSsh)), "{r:?}");
        let (r, _) = route(&[t.path()], Path::new("me@host:/x"), &ClientKeys::default());
        assert!(matches!(r, Ok(Route::Ssh { into: None, .. })), "{r:?}");
    }
}
