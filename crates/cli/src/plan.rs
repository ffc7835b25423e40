//! A copy resolved before anything starts ([`CopyPlan`]): the session's settings, from the flags,
//! and the route its operands name — a local destination, a running server, or a host over ssh
//! — checked as far as can be without starting a process or a connection (operands, keys, the
//! address of a server, a directory copied into itself). [`CopyPlan::run`] then runs it.

use crate::error::{Error, Kind, ResultExt};
use crate::keys::ClientKeyArgs;
use crate::progress::Show;
use crate::ssh::{Job, SshArgs, SshTarget};
use crate::transfer::shown;
use anyhow::{anyhow, bail, Context, Result};
use linerate_copy::run;
use linerate_copy::send::{self, CopyConfig, CopyReport};
use linerate_net::auth::secret::Secret;
use linerate_proto::frame::Placement;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A copy, resolved.
pub struct CopyPlan {
    /// The session: the flags' settings, the sources, the destination path and its placement;
    /// for a running server its address and credentials too. The route sets what it learns
    /// when it runs (a local server's or a remote side's address and one-time key).
    pub config: CopyConfig,
    /// Where the copy goes, or comes from.
    pub route: Route,
}

/// Where a copy goes, or comes from.
pub enum Route {
    /// To a path on this host: a server process of this user serves `root` on loopback, with a
    /// fresh key; the destination is `config.dest` beneath it.
    Local {
        /// The local server's root.
        root: PathBuf,
    },
    /// A running server (`HOST:PORT:PATH`), its address and credentials in `config`: a push of
    /// `config.sources` to `config.dest`, or a pull.
    Daemon {
        /// What a pull takes.
        pull: Option<Pull>,
    },
    /// `[user@]host:PATH` over ssh: the remote side is started when the copy runs, and gives
    /// the address and the key.
    Ssh {
        /// The remote operand.
        target: SshTarget,
        /// A pull's local destination (`None`: a push of `config.sources` to `target.path`).
        into: Option<PathBuf>,
        /// How to start the remote side.
        args: SshArgs,
    },
}

/// What a pull takes: a path on the server, into a local destination.
pub struct Pull {
    /// The remote path, as the server resolves it.
    pub from: Vec<u8>,
    /// The local destination.
    pub into: PathBuf,
}

/// A session's settings before the flags: every default, the stream count this host's cores
/// suggest; the address and key are placeholders until the route sets them.
pub fn settings() -> CopyConfig {
    let mut c = CopyConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)), Secret([0; 32]), Vec::new(), Vec::new());
    c.streams = default_streams();
    c
}

impl CopyPlan {
    /// Resolve `sources` and `dest` with `config` (the flags' settings): which route, checked
    /// now. `keys` authenticate to a running server; `ssh` starts a remote side.
    pub fn resolve(
        sources: Vec<PathBuf>,
        dest: &Path,
        keys: &ClientKeyArgs,
        ssh: &SshArgs,
        mut config: CopyConfig,
    ) -> crate::error::Result<CopyPlan> {
        let usage = |e: anyhow::Error| Error::new(Kind::Usage, e);
        if let Some(job) = crate::ssh::classify(&sources, dest).map_err(usage)? {
            let (target, into) = match job {
                Job::Push { sources, target } => {
                    exist(&sources).map_err(usage)?;
                    config.placement = send::placement(&sources, &target.path);
                    config.sources = sources;
                    config.dest = target.path.clone();
                    (target, None)
                }
                Job::Pull { target, into } => (target, Some(into)),
            };
            return Ok(CopyPlan { config, route: Route::Ssh { target, into, args: ssh.clone() } });
        }
        // A pull: one remote source, a local destination.
        if let ([src], Dest::Local(into)) = (sources.as_slice(), parse_dest(dest).map_err(usage)?) {
            if let Ok(Dest::Remote { host, port, path }) = parse_dest(src) {
                (config.secret, config.key_auth) = keys.resolve(&host, port, "a remote source").usage()?;
                config.addr = resolve(&host, port)?;
                return Ok(CopyPlan { config, route: Route::Daemon { pull: Some(Pull { from: path, into }) } });
            }
        }
        for s in &sources {
            if let Ok(Dest::Remote { .. }) = parse_dest(s) {
                if std::fs::symlink_metadata(s).is_err() {
                    return Err(usage(anyhow!(
                        "{}: a pull takes exactly one remote source and a local destination",
                        s.display()
                    )));
                }
            }
        }
        exist(&sources).map_err(usage)?;
        let route = match parse_dest(dest).map_err(usage)? {
            Dest::Remote { host, port, path } => {
                (config.secret, config.key_auth) = keys.resolve(&host, port, "a remote destination").usage()?;
                config.placement = send::placement(&sources, &path);
                config.addr = resolve(&host, port)?;
                config.dest = path;
                Route::Daemon { pull: None }
            }
            Dest::Local(p) => {
                // Decided on the operand as typed (a trailing '/' counts), not on the path
                // beneath the root.
                config.placement = send::placement(&sources, p.as_os_str().as_bytes());
                let (root, path) = local_root(&p, config.placement).map_err(usage)?;
                refuse_copy_into_itself(&sources, &root, &path).map_err(usage)?;
                config.dest = path;
                config.peer = "destination";
                Route::Local { root }
            }
        };
        config.sources = sources;
        Ok(CopyPlan { config, route })
    }
}

impl CopyPlan {
    /// Run the copy, showing it as `show` says; used by `cp` and `demo`. Returns the report
    /// (complete or not: see `CopyReport::is_complete`) or the failure.
    pub fn run(self, show: Show) -> crate::error::Result<CopyReport> {
        let CopyPlan { config, route } = self;
        match route {
            Route::Local { root } => shown(show, |obs, cx| run::local(config, &root, None, obs, cx)),
            Route::Daemon { pull: None } => shown(show, |obs, cx| run::daemon(config, None, obs, cx)),
            Route::Daemon { pull: Some(Pull { from, into }) } => {
                shown(show, |obs, cx| run::daemon(config, Some((&from, &into)), obs, cx))
            }
            Route::Ssh { target, into, args } => crate::ssh::copy(config, &target, into.as_deref(), &args, show),
        }
    }
}

/// Every source exists (as a name: a dangling symlink is copied as one).
fn exist(sources: &[PathBuf]) -> Result<()> {
    for s in sources {
        if std::fs::symlink_metadata(s).is_err() {
            bail!("{}: no such file or directory", s.display());
        }
    }
    Ok(())
}

/// Split a local destination into the server root and the path beneath it: an existing directory
/// is the root itself, unless the copy is to become it (`Placement::As`), when its parent is.
pub(crate) fn local_root(dest: &Path, placement: Placement) -> Result<(PathBuf, Vec<u8>)> {
    if dest.is_dir() {
        let root = dest.canonicalize().with_context(|| format!("{}", dest.display()))?;
        if placement != Placement::As {
            return Ok((root, Vec::new()));
        }
        return match (root.parent(), root.file_name()) {
            (Some(parent), Some(name)) => Ok((parent.to_path_buf(), name.as_bytes().to_vec())),
            _ => bail!(
                "{}: copying a directory's contents (a source ending in '/') needs a destination other than /",
                dest.display()
            ),
        };
    }
    let name = dest.file_name().ok_or_else(|| anyhow!("{}: destination has no file name", dest.display()))?;
    let parent = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let root = parent.canonicalize().with_context(|| format!("destination directory {}", parent.display()))?;
    if !root.is_dir() {
        bail!("{}: not a directory, so {} cannot be made in it", parent.display(), dest.display());
    }
    Ok((root, name.as_bytes().to_vec()))
}

/// Refuse to copy a directory into itself (`cp src src/sub`), as GNU cp does: the walk would
/// meet its own copy. `root`/`path` is where the copy lands ([`local_root`]).
pub(crate) fn refuse_copy_into_itself(sources: &[PathBuf], root: &Path, path: &[u8]) -> Result<()> {
    let target = root.join(std::ffi::OsStr::from_bytes(path));
    for s in sources {
        let Ok(src) = s.canonicalize() else { continue };
        if std::fs::symlink_metadata(s).is_ok_and(|m| m.is_dir()) && target.starts_with(&src) {
            bail!(
                "cannot copy a directory, {}, into itself, {}: copy it elsewhere, or its contents one by one",
                s.display(),
                target.display()
            );
        }
    }
    Ok(())
}

/// Where the copy goes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Dest {
    Remote { host: String, port: u16, path: Vec<u8> },
    Local(PathBuf),
}

pub(crate) fn parse_dest(p: &Path) -> Result<Dest> {
    let b = p.as_os_str().as_bytes();
    let Ok(s) = std::str::from_utf8(b) else {
        return Ok(Dest::Local(p.to_path_buf()));
    };
    if s.starts_with('/') || s.starts_with("./") || s.starts_with("../") || !s.contains(':') {
        return Ok(Dest::Local(p.to_path_buf()));
    }
    let (host, rest) = if let Some(r) = s.strip_prefix('[') {
        let (h, rest) = r.split_once("]:").ok_or_else(|| anyhow!("'{s}': expected [ADDR]:PORT:PATH"))?;
        (h.to_string(), rest)
    } else {
        let (h, rest) = s.split_once(':').ok_or_else(|| anyhow!("'{s}': expected HOST:PORT:PATH"))?;
        (h.to_string(), rest)
    };
    let (port, path) = rest
        .split_once(':')
        .ok_or_else(|| anyhow!("'{s}': expected HOST:PORT:PATH (prefix a local path containing ':' with ./)"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| anyhow!("'{s}': port '{port}' is not a number (prefix a local path containing ':' with ./)"))?;
    if host.is_empty() {
        bail!("'{s}': empty host");
    }
    Ok(Dest::Remote { host, port, path: path.as_bytes().to_vec() })
}

pub(crate) fn default_streams() -> u16 {
    std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(2, 8) as u16
}

pub(crate) fn resolve(host: &str, port: u16) -> crate::error::Result<SocketAddr> {
    (host, port)
        .to_socket_addrs()
        .with_context(|| format!("resolving {host}"))
        .session()?
        .next()
        .ok_or_else(|| Error::msg(Kind::Session, format!("{host}: no address")))
}
