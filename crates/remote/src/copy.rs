//! A copy over ssh once [`spawn`] has started the far side: its key and address
//! (or, with `--via-ssh`, a local forwarder through channels of the same ssh connection) set in
//! the session's configuration, the copy run through `linerate_copy::run` (a push of the
//! sources to the target's path, or a pull of it into a local path), then the forwarder and
//! ssh ended in order and the start-up's phases added to the report. Paths travel inside the
//! protocol, never through the remote shell.

use crate::spawn::{self, Notice, Options, Route, Rsh, Session, StartError};
use crate::target::SshTarget;
use linerate_copy::run::{Observer, RunContext, RunError};
use linerate_copy::send::{self, CopyConfig, CopyReport};
use linerate_copy::ssh::Forwarder;
use linerate_model::doc::cp::CpPhases;
use linerate_net::EngineError;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why a copy over ssh did not start.
#[derive(Debug, thiserror::Error)]
pub enum SshCopyError {
    /// The far side did not start.
    #[error(transparent)]
    Start(#[from] StartError),
    /// `--via-ssh`'s local forwarder did not start.
    #[error("starting the local forwarder for --via-ssh")]
    Forwarder(#[source] EngineError),
}

/// A copy over ssh whose far side has started.
pub struct SshCopy {
    cfg: CopyConfig,
    session: Session,
    fwd: Option<Forwarder>,
    from: Vec<u8>,
    into: Option<PathBuf>,
}

impl SshCopy {
    /// Start the far side of `target` through `rsh` within `opts`, telling `notice` what the
    /// user should know, and set where `cfg` connects: a push of `cfg.sources`, or (`into`) a
    /// pull of `target.path` into a local path.
    pub fn start(
        mut cfg: CopyConfig,
        target: &SshTarget,
        into: Option<&Path>,
        rsh: &Rsh,
        opts: &Options,
        notice: &mut dyn FnMut(Notice<'_>),
    ) -> Result<SshCopy, SshCopyError> {
        let session = spawn::start(rsh, &target.login, &target.host, opts, notice)?;
        cfg.secret = session.key().clone();
        let fwd = match session.route() {
            Route::Direct(addr) => {
                cfg.addr = *addr;
                None
            }
            Route::Forward(f) => {
                let f = f.clone();
                let fwd = Forwarder::start(move || f.command()).map_err(SshCopyError::Forwarder)?;
                cfg.addr = fwd.addr();
                Some(fwd)
            }
        };
        Ok(SshCopy { cfg, session, fwd, from: target.path.clone(), into: into.map(Path::to_path_buf) })
    }

    /// Run the copy, shown to `obs`.
    pub fn run(&self, obs: &mut dyn Observer, cx: &RunContext) -> Result<CopyReport, RunError> {
        linerate_copy::run::session(
            obs,
            cx,
            |progress, sink| match &self.into {
                None => send::copy(&self.cfg, progress, sink),
                Some(into) => linerate_copy::pull::pull(&self.cfg, &self.from, into, progress, sink),
            },
            None,
        )
    }

    /// End the forwarder (given a few seconds after a copy that ended well) and ssh, and add
    /// the start-up's phases to the report; also the number of connections the forwarder
    /// carried, with `--via-ssh`.
    pub fn finish<E>(self, result: Result<CopyReport, E>) -> (Result<CopyReport, E>, Option<u64>) {
        let ok = result.is_ok();
        let carried = self.fwd.map(|f| {
            let n = f.accepted();
            f.stop(if ok { Duration::from_secs(5) } else { Duration::ZERO });
            n
        });
        let phases = self.session.phases();
        self.session.finish(ok);
        (
            result.map(|mut r| {
                r.phases = Some(CpPhases { copy_s: r.seconds, ..phases });
                r
            }),
            carried,
        )
    }
}
