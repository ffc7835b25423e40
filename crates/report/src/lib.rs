//! linerate-report: the versioned, typed [`RunReport`] document every `cp`, `bench`, `lab` and
//! `mesh` run is turned into (with the document it was made from as its [`Body`]), the run
//! [`Store`] (SQLite or PostgreSQL), the exporters (JSON, CSV, Markdown), the comparison used by
//! `linerate report compare`, and the SVG charts and single-file HTML report.
//!
//! It reads the tools' JSON output into the typed documents of `linerate-model`, so it depends
//! on neither the engine nor the lab.

pub mod compare;
pub mod convert;
pub mod export;
pub mod format;
pub mod html;
pub mod import;
pub mod list;
pub mod mesh;
pub mod model;
pub mod store;
pub mod svg;
mod time;

pub use compare::{compare, Comparison, Row};
pub use convert::{from_bench, from_bench_json, from_cp, from_cp_json, from_json, from_lab, from_lab_json, from_mesh};
pub use model::*;
pub use store::{RunSummary, Store};

/// What can go wrong reading, converting or storing a report.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The document's `schema` string is missing or not one this version reads.
    #[error("unknown document schema '{0}': expected linerate.run/1, linerate.bench/1, linerate.lab/1 or a cp summary; upgrade linerate to read newer documents")]
    UnknownSchema(String),
    /// The document has the right schema string but the wrong shape.
    #[error("invalid document: {0}")]
    Invalid(String),
    /// No run with this id (or id prefix) in the store.
    #[error("no run '{0}' in the store; `linerate report list` shows the ids")]
    NotFound(String),
    /// A run with this id is already stored.
    #[error("run {0} is already in the store")]
    Duplicate(String),
    /// An id prefix matches several runs.
    #[error("run id '{0}' is ambiguous: it matches {1} runs; give more of the id")]
    Ambiguous(String, usize),
    /// The store was written by a newer linerate.
    #[error(
        "the store {path} has schema version {found}, newer than this linerate understands ({known}); upgrade linerate"
    )]
    StoreTooNew {
        /// Database file.
        path: String,
        /// Its `PRAGMA user_version`.
        found: i64,
        /// The newest version this build knows.
        known: i64,
    },
    /// PostgreSQL failed. The message carries the error's causes (the server's message, the
    /// TLS reason), so it is not also given as a source to be printed twice.
    #[error("database {db}: {}", chain(error))]
    Postgres {
        /// The database URL, without its password.
        db: String,
        /// The PostgreSQL error.
        error: postgres::Error,
    },
    /// TLS to PostgreSQL could not be set up, or its handshake failed.
    #[error("database {db}: {error}")]
    PostgresTls {
        /// The database URL, without its password.
        db: String,
        /// What went wrong (in the message, not a source: see `Postgres`).
        error: crate::store::pgtls::PgTlsError,
    },
    /// SQLite failed.
    #[error("database {path}: {source}")]
    Sqlite {
        /// Database file.
        path: String,
        /// The SQLite error.
        #[source]
        source: rusqlite::Error,
    },
    /// A file could not be read or written.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A chart that the run does not have.
    #[error("run {id} has no {kind} chart number {index} (it has {have})")]
    NoChart {
        /// Run id.
        id: String,
        /// Chart kind asked for.
        kind: String,
        /// 1-based index asked for.
        index: usize,
        /// How many charts of that kind the run has.
        have: usize,
    },
    /// A PostgreSQL URL with its password given as `--db` (other users can read a command line).
    #[error(
        "--db {0}: no password on the command line (other users can read it): give it in PGPASSWORD or \
         ~/.pgpass, or the whole URL in LINERATE_DB"
    )]
    PasswordOnCommandLine(String),
    /// No `--db`, no `$LINERATE_DB` and no data directory for this user.
    #[error("no data directory is known for this user: give --db PATH or set LINERATE_DB")]
    NoDataDir,
    /// `report mesh` without an id, and no mesh round in the store.
    #[error("no mesh run in the store")]
    NoMeshRun,
    /// Every id drawn for a new run was taken.
    #[error("cannot save run {id} in {db}: no free run id")]
    NoFreeId {
        /// The run's first id.
        id: String,
        /// The store.
        db: String,
    },
    /// `report mesh --test` named a test the mesh run does not have (or it has none).
    #[error("run {run} has no test {test:?}")]
    NoTest {
        /// The mesh run.
        run: String,
        /// The test asked for.
        test: Option<String>,
    },
    /// `report svg --chart` names no chart kind, or an N below 1.
    #[error("--chart {0}: expected bars, xy, flows, series or latency, optionally with :N (N from 1)")]
    ChartSpec(String),
}

/// An error and its causes on one line: `postgres::Error` says only its kind ("db error",
/// "error performing TLS handshake") and keeps the server's message or the reason in its source.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
