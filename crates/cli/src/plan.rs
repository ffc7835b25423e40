//! A copy resolved before anything starts ([`CopyPlan`]): the session's settings, from the flags,
//! and the route its operands name (`linerate_remote::route`, checked there), with the flags
//! that start a remote side. [`CopyPlan::run`] then runs it.

use crate::keys::ClientKeyArgs;
use crate::progress::Show;
use crate::ssh::SshArgs;
use crate::transfer::shown;
use linerate_copy::run;
use linerate_copy::send::{CopyConfig, CopyReport};
pub use linerate_remote::route::Route;
use linerate_remote::route::{self, Pull};
use std::path::{Path, PathBuf};

/// A copy, resolved.
pub struct CopyPlan {
    /// The session: the flags' settings, the sources, the destination path and its placement;
    /// for a running server its address and credentials too. The route sets what it learns
    /// when it runs (a local server's or a remote side's address and one-time key).
    pub config: CopyConfig,
    /// Where the copy goes, or comes from.
    pub route: Route,
    /// How to start the remote side of [`Route::Ssh`].
    pub ssh: SshArgs,
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
        let route = route::resolve(sources, dest, &keys.client_keys(), &crate::keys::note(), &mut config)?;
        Ok(CopyPlan { config, route, ssh: ssh.clone() })
    }

    /// Run the copy, showing it as `show` says; used by `cp` and `demo`. Returns the report
    /// (complete or not: see `CopyReport::is_complete`) or the failure.
    pub fn run(self, show: Show) -> crate::error::Result<CopyReport> {
        let CopyPlan { config, route, ssh } = self;
        match route {
            Route::Local { root } => shown(show, |obs, cx| run::local(config, &root, None, obs, cx)),
            Route::Daemon { pull: None } => shown(show, |obs, cx| run::daemon(config, None, obs, cx)),
            Route::Daemon { pull: Some(Pull { from, into }) } => {
                shown(show, |obs, cx| run::daemon(config, Some((&from, &into)), obs, cx))
            }
            Route::Ssh { target, into } => crate::ssh::copy(config, &target, into.as_deref(), &ssh, show),
        }
    }
}
