//! The binary's one error type: a failure and its [`Kind`]. Subcommands return
//! `Result<(), Error>`; `main` alone prints the one message and maps the kind to the exit code
//! documented in `linerate cp --help`, README.md and docs/USER_GUIDE.md ("Exit status").

use linerate_lab::LabError;
use linerate_net::EngineError;
use linerate_proto::ErrorCode;
use linerate_report::ReportError;
use std::fmt;

/// What went wrong, as far as the exit code is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The run completed but some of it failed (entries of a copy, runs of a lab, tests of a
    /// mesh round), each reported: 1.
    Partial,
    /// Bad usage or configuration (flags, key file, destination, scenario, inventory, a run id,
    /// a request the server refused as given): 2.
    Usage,
    /// The session failed: connection, authentication, protocol, the peer, a busy server; for
    /// `lab`, the lab could not be built; for `mesh`, no test ran at all: 3.
    Session,
    /// The run store could not be opened, read or written: 3.
    Store,
    /// A local file could not be read or written (a sample tree, a key, a man page, results): 3.
    Io,
    /// A bug or an environment that cannot be (the random generator failed, encoding JSON): 3.
    Internal,
    /// `report compare`: a goal figure regressed beyond the threshold: 4.
    Regressed,
    /// Interrupted (Ctrl-C, SIGTERM): 128 + SIGINT, as a shell reports a process killed by
    /// SIGINT; what was done is kept.
    Interrupted,
    /// Standard output or standard error was closed early (`| head`): the command ended quietly,
    /// work in flight stopped in order as by Ctrl-C (a copy keeps what arrived): 141, 128 +
    /// SIGPIPE, as a shell reports `find | head` or GNU `cp -v | head` — never 0, since part of
    /// the work or of its report did not happen.
    Closed,
    /// `lab exec`: the command run inside the lab exited with this status (passed on as is).
    Exited(u8),
}

impl Kind {
    /// The exit code of this kind: the one table of the binary.
    pub const fn code(self) -> u8 {
        match self {
            Kind::Partial => 1,
            Kind::Usage => 2,
            Kind::Session | Kind::Store | Kind::Io | Kind::Internal => 3,
            Kind::Regressed => 4,
            Kind::Interrupted => 130,
            Kind::Closed => 141,
            Kind::Exited(c) => c,
        }
    }

    /// The kind of an engine error, for every command that runs the engine (`cp`, `bench`,
    /// `doctor`, `serve`, `demo`): [`Kind::Usage`] when the request itself cannot be met as given
    /// (flags, key file, destination, or the server refusing its parameters: Destination,
    /// BadParams, Limit, Unsupported), [`Kind::Session`] for everything else (the network,
    /// authentication, the peer, a busy server).
    pub fn of_engine(e: &EngineError) -> Kind {
        match e {
            EngineError::Usage(_) | EngineError::Secret(_) => Kind::Usage,
            EngineError::Interrupted => Kind::Interrupted,
            EngineError::Remote {
                code: ErrorCode::Destination | ErrorCode::BadParams | ErrorCode::Limit | ErrorCode::Unsupported,
                ..
            } => Kind::Usage,
            _ => Kind::Session,
        }
    }

    /// The kind of a lab error: an interrupted run is [`Kind::Interrupted`] (after teardown); a
    /// failed file operation, command or measurement means the lab could not be built or run
    /// ([`Kind::Session`]); anything else (a bad scenario, run id, state file or emulator
    /// request, a missing tool, not root) is usage.
    pub fn of_lab(e: &LabError) -> Kind {
        match e {
            LabError::Interrupted => Kind::Interrupted,
            LabError::Io(..) | LabError::Command { .. } | LabError::Run(..) | LabError::CopyDiffers { .. } => {
                Kind::Session
            }
            _ => Kind::Usage,
        }
    }

    /// The kind of a run store error: the store itself failing (opening, reading, writing, a
    /// newer schema, no free id) is [`Kind::Store`]; an unknown or ambiguous run id, a document
    /// that cannot be read, a chart the run lacks, a `--db` that cannot be used is usage.
    pub fn of_report(e: &ReportError) -> Kind {
        match e {
            ReportError::StoreTooNew { .. }
            | ReportError::Postgres { .. }
            | ReportError::PostgresTls { .. }
            | ReportError::Sqlite { .. }
            | ReportError::Io { .. }
            | ReportError::NoFreeId { .. } => Kind::Store,
            _ => Kind::Usage,
        }
    }
}

/// A failure of a subcommand: its kind and, unless it was reported already (serve's log lines,
/// a lab command's own output), the message `main` prints.
pub struct Error {
    kind: Kind,
    source: Option<anyhow::Error>,
}

/// A subcommand's result.
pub type Result<T = (), E = Error> = std::result::Result<T, E>;

impl Error {
    /// `source`, of kind `kind`.
    pub fn new(kind: Kind, source: impl Into<anyhow::Error>) -> Error {
        Error { kind, source: Some(source.into()) }
    }

    /// A message of kind `kind`.
    pub fn msg(kind: Kind, message: impl fmt::Display + fmt::Debug + Send + Sync + 'static) -> Error {
        Error { kind, source: Some(anyhow::Error::msg(message)) }
    }

    /// A failure whose message was shown already: `main` only exits with its code.
    pub fn reported(kind: Kind) -> Error {
        Error { kind, source: None }
    }

    /// Usage, from a message.
    pub fn usage(message: impl fmt::Display + fmt::Debug + Send + Sync + 'static) -> Error {
        Error::msg(Kind::Usage, message)
    }

    /// What went wrong.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The message to print (`None`: reported already).
    pub fn message(&self) -> Option<&anyhow::Error> {
        self.source.as_ref()
    }

    /// Adds context to the message, keeping the kind.
    pub fn context(self, c: impl fmt::Display + Send + Sync + 'static) -> Error {
        Error { kind: self.kind, source: self.source.map(|s| s.context(c)) }
    }

    /// Whether the failure is a closed standard output or error (`| head`): not an error worth a
    /// word (ripgrep's rule), so `main` exits quietly with [`Kind::Closed`]'s code.
    pub fn is_broken_pipe(&self) -> bool {
        self.kind == Kind::Closed
            || self.source.as_ref().is_some_and(|s| {
                s.chain().any(|c| {
                    c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
                })
            })
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            Some(s) => write!(f, "{:?}: {s:#}", self.kind),
            None => write!(f, "{:?} (reported)", self.kind),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            Some(s) => write!(f, "{s:#}"),
            None => write!(f, "{:?} (reported above)", self.kind),
        }
    }
}

/// So that a kinded failure can travel through `anyhow` (the lab's helpers) and be found again.
impl std::error::Error for Error {}

impl From<EngineError> for Error {
    fn from(e: EngineError) -> Error {
        Error::new(Kind::of_engine(&e), e)
    }
}

impl From<linerate_remote::route::RouteError> for Error {
    fn from(e: linerate_remote::route::RouteError) -> Error {
        match e {
            // Its message says it all (`resolving HOST: why`): not again as a cause.
            linerate_remote::route::RouteError::Resolve(e) => Error::msg(Kind::Session, e.to_string()),
            e => Error::new(Kind::Usage, e),
        }
    }
}

impl From<ReportError> for Error {
    fn from(e: ReportError) -> Error {
        Error::new(Kind::of_report(&e), e)
    }
}

impl From<linerate_report::store::SaveError> for Error {
    fn from(e: linerate_report::store::SaveError) -> Error {
        use linerate_report::store::SaveError;
        let kind = if matches!(e, SaveError::Name(_)) { Kind::Usage } else { Kind::Store };
        Error::new(kind, e)
    }
}

impl From<LabError> for Error {
    fn from(e: LabError) -> Error {
        Error::new(Kind::of_lab(&e), e)
    }
}

impl From<linerate_bench::plan::PlanError> for Error {
    fn from(e: linerate_bench::plan::PlanError) -> Error {
        Error::new(Kind::Usage, e)
    }
}

impl From<linerate_bench::run::RunError> for Error {
    fn from(e: linerate_bench::run::RunError) -> Error {
        use linerate_bench::run::RunError;
        let kind = match e {
            RunError::Iperf3(_) => Kind::Usage,
            RunError::Json(_) => Kind::Internal,
            RunError::WriteHgrm { .. } => Kind::Io,
        };
        Error::new(kind, e)
    }
}

impl From<linerate_mesh::report::NextRoundError> for Error {
    fn from(e: linerate_mesh::report::NextRoundError) -> Error {
        use linerate_mesh::report::NextRoundError;
        let kind = if matches!(e, NextRoundError::Name(_)) { Kind::Usage } else { Kind::Store };
        Error::new(kind, e)
    }
}

/// Gives a failure its kind: `thing().usage()?`, `store.get(id).store()?`.
pub trait ResultExt<T> {
    /// The failure is of kind `kind`.
    fn kind(self, kind: Kind) -> Result<T>;
    /// Bad usage or configuration.
    fn usage(self) -> Result<T>;
    /// The session (or the lab, or every test) failed.
    fn session(self) -> Result<T>;
    /// The run store failed.
    fn store(self) -> Result<T>;
    /// A local file could not be read or written.
    fn io(self) -> Result<T>;
    /// A bug, or an environment that cannot be.
    fn internal(self) -> Result<T>;
}

impl<T, E: Into<anyhow::Error>> ResultExt<T> for std::result::Result<T, E> {
    fn kind(self, kind: Kind) -> Result<T> {
        self.map_err(|e| Error::new(kind, e))
    }
    fn usage(self) -> Result<T> {
        self.kind(Kind::Usage)
    }
    fn session(self) -> Result<T> {
        self.kind(Kind::Session)
    }
    fn store(self) -> Result<T> {
        self.kind(Kind::Store)
    }
    fn io(self) -> Result<T> {
        self.kind(Kind::Io)
    }
    fn internal(self) -> Result<T> {
        self.kind(Kind::Internal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_documented_code() {
        // README.md, docs/USER_GUIDE.md ("Exit status" of cp, bench, doctor, lab, mesh, report).
        let table = [
            (Kind::Partial, 1),
            (Kind::Usage, 2),
            (Kind::Session, 3),
            (Kind::Store, 3),
            (Kind::Io, 3),
            (Kind::Internal, 3),
            (Kind::Regressed, 4),
            (Kind::Interrupted, 130),
            (Kind::Closed, 141),
            (Kind::Exited(0), 0),
            (Kind::Exited(42), 42),
        ];
        for (kind, code) in table {
            assert_eq!(kind.code(), code, "{kind:?}");
            assert_eq!(Error::reported(kind).kind().code(), code, "{kind:?}");
        }
    }

    #[test]
    fn engine_errors_map_to_usage_session_or_interrupted() {
        let remote = |code| EngineError::Remote { code, message: String::new() };
        assert_eq!(Kind::of_engine(&EngineError::Usage(linerate_net::UsageError::Sources("x".into()))), Kind::Usage);
        assert_eq!(Kind::of_engine(&EngineError::Secret("x".into())), Kind::Usage);
        assert_eq!(Kind::of_engine(&EngineError::Interrupted), Kind::Interrupted);
        for c in [ErrorCode::Destination, ErrorCode::BadParams, ErrorCode::Limit, ErrorCode::Unsupported] {
            assert_eq!(Kind::of_engine(&remote(c)), Kind::Usage, "{c:?}");
        }
        assert_eq!(Kind::of_engine(&remote(ErrorCode::Busy)), Kind::Session);
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(Kind::of_engine(&EngineError::Net { context: "connect".into(), io: refused }), Kind::Session);
        assert_eq!(Error::from(EngineError::Interrupted).kind(), Kind::Interrupted);
    }

    #[test]
    fn lab_errors_map_to_usage_session_or_interrupted() {
        assert_eq!(Kind::of_lab(&LabError::Scenario("x".into())), Kind::Usage);
        assert_eq!(Kind::of_lab(&LabError::NotRoot), Kind::Usage);
        assert_eq!(Kind::of_lab(&LabError::UnknownRun { id: "x".into() }), Kind::Usage);
        assert_eq!(Kind::of_lab(&LabError::NoLab), Kind::Usage);
        let missing = LabError::MissingTool { program: "iperf3".into(), package: "iperf3".into() };
        assert_eq!(Kind::of_lab(&missing), Kind::Usage, "as when it was a State(String)");
        assert_eq!(Kind::of_lab(&LabError::Interrupted), Kind::Interrupted);
        assert_eq!(Kind::of_lab(&LabError::Run("r".into(), "x".into())), Kind::Session);
    }

    #[test]
    fn store_errors_are_store_and_run_ids_usage() {
        let io = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let failed = ReportError::Io { what: "open", path: "/x".into(), source: io };
        assert_eq!(Kind::of_report(&failed), Kind::Store);
        assert_eq!(Kind::of_report(&ReportError::StoreTooNew { path: "/x".into(), found: 9, known: 2 }), Kind::Store);
        assert_eq!(Kind::of_report(&ReportError::NotFound("x".into())), Kind::Usage);
        assert_eq!(Kind::of_report(&ReportError::Ambiguous("x".into(), 2)), Kind::Usage);
        assert_eq!(Kind::of_report(&ReportError::NoMeshRun), Kind::Usage);
        assert_eq!(Kind::of_report(&ReportError::NoDataDir), Kind::Usage);
    }

    #[test]
    fn kinds_are_given_and_kept_through_context() {
        let e = Err::<(), _>(anyhow::anyhow!("no store")).store().map_err(|e| e.context("saving")).unwrap_err();
        assert_eq!(e.kind(), Kind::Store);
        assert_eq!(format!("{:#}", e.message().unwrap()), "saving: no store");
        let io: std::result::Result<(), _> = Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied));
        assert_eq!(io.io().unwrap_err().kind(), Kind::Io);
    }

    #[test]
    fn a_closed_pipe_is_recognised_through_context() {
        let pipe = std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        let e = Error::new(Kind::Io, anyhow::Error::new(pipe).context("cannot write to stdout"));
        assert!(e.is_broken_pipe());
        assert!(!Error::usage("bad flag").is_broken_pipe());
        assert!(!Error::reported(Kind::Session).is_broken_pipe());
    }
}
