//! A copy resolved before anything starts ([`CopyPlan`]): the session's settings, from the flags,
//! and the route its operands name — a local destination, a running server, or a host over ssh
//! — checked as far as can be without starting a process or a connection (operands, keys, the
//! address of a server, a directory copied into itself). [`CopyPlan::run`] then runs it.

use crate::error::{Error, Kind, ResultExt};
use crate::keys::ClientKeyArgs;
use crate::progress::Show;
use crate::ssh::SshArgs;
use crate::transfer::shown;
use linerate_copy::dest::{exist, local_root, parse_dest, refuse_copy_into_itself, Dest, OperandError};
use linerate_copy::run;
use linerate_copy::send::{self, CopyConfig, CopyReport};
use linerate_remote::target::{Job, SshTarget};
use std::net::SocketAddr;
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
        let usage = |e| Error::new(Kind::Usage, e);
        if let Some(job) = linerate_remote::target::classify(&sources, dest).usage()? {
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
                    return Err(usage(OperandError::Pull(s.clone())));
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

/// The first address of `host` on `port`; a failure is the session's.
fn resolve(host: &str, port: u16) -> crate::error::Result<SocketAddr> {
    // Its message says it all (`resolving HOST: why`): not again as a cause.
    linerate_net::addr::resolve(host, None, Some(port)).map_err(|e| Error::msg(Kind::Session, e.to_string()))
}
