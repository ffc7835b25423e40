//! Running a copy or a pull the way every command shows it (`cp`, `cp` over ssh, `demo`):
//! `linerate_copy::run` runs it, stoppable by a signal or a closed output, drawn by the progress
//! bar ([`Drawn`]); its failure becomes an exit kind; its summary is printed and the run saved.

use crate::error::{Error, Kind};
use crate::progress::{Drawn, Show};
use linerate_copy::run::summary::{changed_nothing, summary_doc};
use linerate_copy::run::{Observer, RunContext, RunError};
use linerate_copy::send::CopyReport;
use linerate_model::shutdown::Stopper;
use linerate_net::EngineError;
use std::path::Path;

/// Run `f` (a `linerate_copy::run` call) shown as `show`: Ctrl-C or SIGTERM ends the session in
/// order (the process's signal thread stops it); a second one hurries the stop, and `main` ends
/// the process at once (`ending`). A closed standard output or error (`| head`) interrupts the
/// copy the same way, quietly.
pub(crate) fn shown(
    show: Show,
    f: impl FnOnce(&mut dyn Observer, &RunContext) -> Result<CopyReport, RunError>,
) -> crate::error::Result<CopyReport> {
    let stopper = Stopper::new();
    let _ = crate::ending::interrupt_on_signals(&stopper);
    crate::out::stop_on_close(&stopper);
    let cx = RunContext { cancel: stopper.shutdown(), started: crate::started() };
    let result = f(&mut Drawn::new(show), &cx);
    // Whatever the copy did, its report (or its listing) was cut: say nothing more.
    if crate::out::closed() {
        return Err(Error::reported(Kind::Closed));
    }
    result.map_err(|e| match e {
        RunError::Engine(e) => e.into(),
        RunError::Key(e) => Error::new(Kind::Usage, e),
        RunError::LocalServer(e) => Error::new(Kind::Session, e),
        e @ RunError::Interrupted { .. } => Error::new(Kind::Interrupted, e),
        e @ RunError::Storage { .. } => Error::new(Kind::Session, e),
        // A local copy's receiver is this machine's own process: no "server" to blame.
        RunError::Local { code, .. } => {
            Error::new(Kind::of_engine(&EngineError::Remote { code, message: String::new() }), e)
        }
    })
}

/// The `--json` summary, as printed.
pub fn summary_json(r: &CopyReport) -> String {
    serde_json::to_string(&summary_doc(r)).expect("a cp summary has only numbers, strings and booleans")
}

/// Keeps the run in the report store, unless it [changed nothing](changed_nothing); a failure
/// to save is a warning, not a failed copy. A dry run is never given to it (`cp.rs`).
pub(crate) fn save_cp_run(report: &CopyReport, dest: &Path, db: Option<&Path>, quiet: bool) -> crate::error::Result {
    if changed_nothing(report) {
        if !quiet {
            errln!("nothing was sent or changed: not saved as a run")?;
        }
        return Ok(());
    }
    let mut run = linerate_report::from_cp(&summary_doc(report));
    run.params.destination = Some(linerate_net::error::shown(dest));
    let saved = linerate_report::store::save_run(db, &run);
    match saved {
        Ok(id) if !quiet => errln!("saved as run {id} (linerate report show {id})"),
        Ok(_) => Ok(()),
        Err(e) => errln!("linerate: warning: the run was not saved: {:#}", anyhow::Error::new(e)),
    }
}
