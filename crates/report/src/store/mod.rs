//! The run store: every saved run as its JSON document, plus a metrics table for listing and
//! queries, in one SQLite file ([`sqlite`]) or one PostgreSQL database ([`postgres`], over TLS
//! with [`pgtls`]) that many agents and controllers write at once. Both have the same layout versions and migrations:
//! opening a store migrates it forward one step at a time inside a transaction, and refuses a
//! newer one.
//!
//! A run is stored in one shape ([`crate::convert::to_stored`]): its own facts (id, kind, time,
//! title, version, parameters, hosts) and the typed document it was made from (its body); the
//! metrics, spreads, charts and tables are derived from the body when the run is read
//! ([`crate::convert::load`]). Only a run without a body (stored before bodies were kept, or
//! made from a document older than the typed ones) keeps them in its document, since they are
//! all there is of it. The `metrics` table is an index, written when a run is saved: `report
//! list` takes each run's headline figure from it without reading the documents.
//!
//! Versions: 0 = empty; 1 = `runs` table; 2 = `metrics` table (backfilled from the stored
//! documents) and an index on the creation time; 3 = documents in the one shape above (each
//! stored run with a body is rewritten without its derived parts, and its `metrics` rows
//! derived again).

pub mod pgtls;
pub mod postgres;
pub mod sqlite;

use crate::model::{Metric, RunReport};
use crate::ReportError;
use linerate_model::metric::{Goal, GroupFigure, MetricId};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The layout version this build writes.
pub const STORE_VERSION: i64 = 3;

/// Environment variable that overrides the default database (a path or a `postgres://` URL).
pub const DB_ENV: &str = "LINERATE_DB";

/// One line of `report list`.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    /// Run id.
    pub id: String,
    /// `cp`, `bench`, `lab` or `mesh`.
    pub kind: String,
    /// RFC 3339 creation time.
    pub created: String,
    /// Title.
    pub title: String,
    /// The headline figure (throughput, or the first metric), if any.
    pub headline: Option<Metric>,
}

impl RunSummary {
    /// The run as one line of `report list --json`: `id`, `kind`, `created`, `title` and the
    /// headline's `name`, `value` and `unit` (`null` without one), keys in name order.
    pub fn json_line(&self) -> String {
        #[derive(Serialize)]
        struct Headline<'a> {
            name: &'a MetricId,
            unit: &'a str,
            value: f64,
        }
        #[derive(Serialize)]
        struct Line<'a> {
            created: &'a str,
            headline: Option<Headline<'a>>,
            id: &'a str,
            kind: &'a str,
            title: &'a str,
        }
        let headline = self.headline.as_ref().map(|m| Headline { name: &m.name, unit: &m.unit, value: m.value });
        let line = Line { created: &self.created, headline, id: &self.id, kind: &self.kind, title: &self.title };
        serde_json::to_string(&line).unwrap_or_default()
    }
}

/// Version 1's table, the same in both databases.
const RUNS_V1: &str = "CREATE TABLE runs (
    id      TEXT PRIMARY KEY,
    kind    TEXT NOT NULL,
    created TEXT NOT NULL,
    title   TEXT NOT NULL,
    doc     TEXT NOT NULL
);";

/// The query of `report list`, both databases: each run with its headline figure (the first in
/// insertion order, which `order` names, of a sweep's best throughput or transactions, the
/// throughput or transactions — converters put a run's goal figures first — else the first
/// lab group's rate, `rate.GROUP`). The names are [`MetricId`]'s, none of which holds a quote
/// or a LIKE wildcard.
fn list_sql(order: &str) -> String {
    let goals: Vec<String> =
        [MetricId::best, MetricId::goal].iter().flat_map(|id| Goal::ALL.map(|g| format!("'{}'", id(g)))).collect();
    let rate = format!("'{}.%'", GroupFigure::Rate.name());
    format!(
        "SELECT r.id, r.kind, r.created, r.title, m.name, m.value, m.unit, m.better
         FROM runs r LEFT JOIN metrics m
           ON m.run_id = r.id AND m.name = COALESCE(
              (SELECT name FROM metrics WHERE run_id = r.id
                 AND name IN ({})
               ORDER BY {order} LIMIT 1),
              (SELECT name FROM metrics WHERE run_id = r.id AND name LIKE {rate} ORDER BY {order} LIMIT 1))
         ORDER BY r.created, r.id",
        goals.join(", ")
    )
}

/// A stored document read back as a run ([`crate::convert::load`]); `id` names it in errors.
fn read_doc(id: &str, doc: &str) -> Result<RunReport, ReportError> {
    let v = serde_json::from_str(doc).map_err(|e| ReportError::Invalid(format!("stored run {id}: {e}")))?;
    crate::convert::load(v)
}

/// Whether `a` and `b` are the same run converted twice: the same figures (in any order, equal
/// to 12 significant digits, since JSON text need not read back to the last bit) and the same
/// value of every parameter both have.
fn same_run(a: &RunReport, b: &RunReport) -> bool {
    let close = |x: f64, y: f64| (x - y).abs() <= 1e-12 * x.abs().max(y.abs());
    let figures_of = |x: &RunReport, y: &RunReport| {
        x.metrics.iter().all(|m| y.find_metric(&m.name).is_some_and(|n| close(n.value, m.value) && n.unit == m.unit))
    };
    a.kind == b.kind && a.metrics.len() == b.metrics.len() && figures_of(a, b) && figures_of(b, a) && same_params(a, b)
}

/// Whether every parameter both runs have has the same value in each.
fn same_params(a: &RunReport, b: &RunReport) -> bool {
    let theirs = b.params.entries();
    a.params.entries().iter().all(|(k, v)| theirs.iter().find(|(x, _)| x == k).is_none_or(|(_, w)| w == v))
}

/// An open run store, whichever database holds it.
pub enum Store {
    /// A SQLite file.
    Sqlite(sqlite::SqliteStore),
    /// A PostgreSQL database.
    Postgres(Box<postgres::PgStore>),
}

/// Whether `db` names a PostgreSQL database (`postgres://` or `postgresql://`).
pub fn is_postgres(db: &str) -> bool {
    db.starts_with("postgres://") || db.starts_with("postgresql://")
}

/// The store `--db` names, else the default ([`Store::default_path`]); a PostgreSQL URL with a
/// password on the command line is refused.
pub fn store_path(db: Option<&Path>) -> Result<PathBuf, ReportError> {
    match db {
        Some(p) => {
            let s = p.to_string_lossy();
            if is_postgres(&s) && postgres::has_password(&s) {
                return Err(ReportError::PasswordOnCommandLine(postgres::redact(&s)));
            }
            Ok(p.to_path_buf())
        }
        None => Store::default_path().ok_or(ReportError::NoDataDir),
    }
}

/// Why [`save_run`] could not keep a run: the store could not be named (a usage problem), or
/// could not be opened or written (the store's).
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    /// `--db` (or the default) names no store ([`store_path`]).
    #[error(transparent)]
    Name(Box<ReportError>),
    /// The store could not be opened.
    #[error("cannot open the run store {path}")]
    Open {
        /// The store, as named.
        path: String,
        /// Why.
        #[source]
        source: Box<ReportError>,
    },
    /// The store took no new run: every id tried was taken.
    #[error(transparent)]
    NoFreeId(Box<ReportError>),
    /// Writing the run failed.
    #[error("cannot save run {id} in {path}")]
    Save {
        /// The run's id.
        id: String,
        /// The store, as shown.
        path: String,
        /// Why.
        #[source]
        source: Box<ReportError>,
    },
}

/// Saves `run` in the store `db` names (else `$LINERATE_DB`, else the user's data directory,
/// [`store_path`]) and returns its id: what `cp`, `bench`, `lab` and `mesh` call to keep their
/// result. Prints nothing.
pub fn save_run(db: Option<&Path>, run: &RunReport) -> Result<String, SaveError> {
    let mut store = open_store(db)?;
    store.save(run).map_err(|e| match e {
        ReportError::NoFreeId { .. } => SaveError::NoFreeId(Box::new(e)),
        e => SaveError::Save { id: run.id.clone(), path: store.path().to_string(), source: Box::new(e) },
    })
}

/// The store `--db` names (or the default one), open: [`SaveError::Name`] when it names none,
/// [`SaveError::Open`] when it cannot be opened.
pub fn open_store(db: Option<&Path>) -> Result<Store, SaveError> {
    let path = store_path(db).map_err(|e| SaveError::Name(Box::new(e)))?;
    Store::open(&path).map_err(|e| SaveError::Open { path: path.display().to_string(), source: Box::new(e) })
}

/// `lab run`'s last step: the HTML report of results `doc` beside `results` (its extension
/// .html) and, unless `no_save`, the run kept in the store `db` names ([`save_run`]). Returns
/// the lines that tell where each went, or warn why it did not; prints nothing.
pub fn keep_lab_run(
    doc: &linerate_model::doc::lab::LabDocument,
    results: &Path,
    db: Option<&Path>,
    no_save: bool,
) -> Vec<String> {
    let rep = match crate::from_lab(doc) {
        Ok(rep) => rep,
        Err(e) => return vec![format!("linerate lab: warning: no report from the results: {e}")],
    };
    let html = results.with_extension("html");
    let mut lines = vec![match crate::html::write(std::slice::from_ref(&rep), 5.0, &html) {
        Ok(()) => format!("report: {}", html.display()),
        Err(e) => format!("linerate lab: warning: no HTML report: cannot write {}: {e}", html.display()),
    }];
    if !no_save {
        lines.push(match save_run(db, &rep) {
            Ok(id) => format!("saved as run {id} (linerate report show {id})"),
            Err(e) => format!("linerate lab: warning: the run was not saved: {}", crate::chain(&e)),
        });
    }
    lines
}

impl Store {
    /// Saves `run` and returns its id: the run's own, or a new one when two runs of the same
    /// second drew the same id (three tries).
    pub fn save(&mut self, run: &RunReport) -> Result<String, ReportError> {
        let mut fresh;
        let mut r = run;
        for _ in 0..3 {
            match self.insert(r) {
                Ok(()) => return Ok(r.id.clone()),
                Err(ReportError::Duplicate(_)) => {
                    fresh = r.clone();
                    fresh.id = crate::new_id();
                    r = &fresh;
                }
                Err(e) => return Err(e),
            }
        }
        Err(ReportError::NoFreeId { id: run.id.clone(), db: self.path().to_string() })
    }

    /// A mesh round and its baseline for `report mesh`: round `id` (default: the newest mesh run)
    /// and round `against` (default: the mesh run stored before it, if any; `last:K`: the
    /// median of the last K rounds of the same agents and tests, [`crate::compare::baseline`]).
    pub fn mesh_round(
        &mut self,
        id: Option<&str>,
        against: Option<&str>,
    ) -> Result<(RunReport, Option<RunReport>), ReportError> {
        let meshes: Vec<String> = self.list()?.into_iter().filter(|r| r.kind == "mesh").map(|r| r.id).collect();
        let run_id = match id {
            Some(i) => i.to_string(),
            None => meshes.last().cloned().ok_or(ReportError::NoMeshRun)?,
        };
        let run = self.get(&run_id)?;
        let base_id = match against {
            Some(a) => Some(a.to_string()),
            None => meshes.iter().position(|m| *m == run.id).and_then(|i| i.checked_sub(1)).map(|i| meshes[i].clone()),
        };
        // `last:K`: the median of the last K rounds of the same agents and tests, their spread
        // as its noise (what `report compare --against last:K` compares with)
        if let Some(k) = base_id.as_deref().and_then(|b| b.strip_prefix("last:")) {
            let k = k.parse::<usize>().ok().filter(|k| (1..=1000).contains(k)).ok_or_else(|| {
                ReportError::Invalid(format!("--against last:{k}: expected last:K, K from 1 to 1000"))
            })?;
            let before = self.last_of_same_test(&run, k)?;
            return Ok((run, crate::compare::baseline(&before)));
        }
        let base = base_id.map(|b| self.get(&b)).transpose()?;
        Ok((run, base))
    }

    /// `report mesh`: round `id` (the newest mesh run by default) against `against`
    /// ([`Store::mesh_round`]), with its cells' history, rendered as one HTML page (`html`) or
    /// one test's SVG ([`crate::mesh::render`]).
    pub fn mesh_report(
        &mut self,
        id: Option<&str>,
        against: Option<&str>,
        threshold: f64,
        html: bool,
        test: Option<&str>,
    ) -> Result<String, ReportError> {
        let (run, base) = self.mesh_round(id, against)?;
        let history = self.mesh_history(&run, crate::mesh::HISTORY - 1)?;
        crate::mesh::render(&run, base.as_ref(), &history, threshold, html, test)
    }

    /// Earlier rounds of the same mesh as `run` (same agents and tests), oldest first: at most
    /// `keep`, looking back through at most 8 × `keep` + 56 mesh runs stored before it (other
    /// meshes may share the store).
    pub fn mesh_history(&mut self, run: &RunReport, keep: usize) -> Result<Vec<RunReport>, ReportError> {
        let meshes: Vec<String> = self.list()?.into_iter().filter(|r| r.kind == "mesh").map(|r| r.id).collect();
        let before = meshes.iter().position(|m| *m == run.id).unwrap_or(meshes.len());
        let mut out = Vec::new();
        for id in meshes[..before].iter().rev().take(8 * keep + 56) {
            let r = self.get(id)?;
            if crate::mesh::same_mesh(&r, run) {
                out.push(r);
                if out.len() == keep {
                    break;
                }
            }
        }
        out.reverse();
        Ok(out)
    }

    /// The number of the next round of the mesh `like` stands for (same agents and tests): one
    /// past the newest such round stored (looking back through 64 mesh runs), else 1.
    pub fn next_mesh_round(&mut self, like: &RunReport) -> Result<u64, ReportError> {
        let last = self.mesh_history(like, 1)?;
        Ok(last.first().and_then(|r| r.params.round).map_or(1, |n| n.saturating_add(1)))
    }

    /// The default database: `$LINERATE_DB`, else `$XDG_DATA_HOME/linerate/runs.sqlite` (or
    /// `~/.local/share/linerate/runs.sqlite`).
    pub fn default_path() -> Option<PathBuf> {
        if let Some(p) = std::env::var_os(DB_ENV).filter(|p| !p.is_empty()) {
            return Some(PathBuf::from(p));
        }
        dirs::data_dir().map(|d| d.join("linerate").join("runs.sqlite"))
    }

    /// Opens (creating if needed) and migrates the store `db`: a SQLite file's path, or a
    /// `postgres://` URL.
    pub fn open(db: &Path) -> Result<Store, ReportError> {
        match db.to_str().filter(|s| is_postgres(s)) {
            Some(url) => Ok(Store::Postgres(Box::new(postgres::PgStore::connect(url)?))),
            None => Ok(Store::Sqlite(sqlite::SqliteStore::open(db)?)),
        }
    }

    /// An in-memory SQLite store (tests).
    pub fn open_in_memory() -> Result<Store, ReportError> {
        Ok(Store::Sqlite(sqlite::SqliteStore::open_in_memory()?))
    }

    /// The layout version.
    pub fn version(&mut self) -> Result<i64, ReportError> {
        match self {
            Store::Sqlite(s) => s.version(),
            Store::Postgres(p) => p.version(),
        }
    }

    /// Saves a run in the one stored shape ([`crate::convert::to_stored`]: a run with a body
    /// without the parts its body gives, which [`Store::get`] derives again), and its metrics in
    /// the `metrics` index; its id must be new.
    pub fn insert(&mut self, r: &RunReport) -> Result<(), ReportError> {
        match self {
            Store::Sqlite(s) => s.insert(r),
            Store::Postgres(p) => p.insert(r),
        }
    }

    /// The stored run `r` is a copy of, if any: one with its id, or of its kind and title with
    /// the same figures, the same parameters where both have them (cp adds its destination
    /// when it saves a run) and, except for cp, whose summary carries no start time, the same
    /// start time. This is how `report import` knows a `bench --json` document the bench
    /// command already saved.
    pub fn find_same(&mut self, r: &RunReport) -> Result<Option<String>, ReportError> {
        let candidates: Vec<String> = self
            .list()?
            .into_iter()
            .filter(|s| {
                s.id == r.id
                    || (s.kind == r.kind.as_str()
                        && s.title == r.title
                        && (r.kind == crate::model::RunKind::Cp || s.created == r.created))
            })
            .map(|s| s.id)
            .collect();
        for id in candidates {
            if same_run(&self.get(&id)?, r) {
                return Ok(Some(id));
            }
        }
        Ok(None)
    }

    /// The last `k` runs of the same test as `run` ([`crate::compare::same_test`]) stored before
    /// it (in `report list` order), oldest first: the baseline of `report compare --against
    /// last:K`.
    pub fn last_of_same_test(&mut self, run: &RunReport, k: usize) -> Result<Vec<RunReport>, ReportError> {
        let list = self.list()?;
        let end = list.iter().position(|s| s.id == run.id).unwrap_or(list.len());
        let mut out = Vec::new();
        for s in list[..end].iter().rev().filter(|s| s.kind == run.kind.as_str()) {
            if out.len() == k {
                break;
            }
            let r = self.get(&s.id)?;
            if crate::compare::same_test(&r, run) {
                out.push(r);
            }
        }
        out.reverse();
        Ok(out)
    }

    /// The full id of the run whose id is `id` or starts with `id`.
    pub fn resolve(&mut self, id: &str) -> Result<String, ReportError> {
        match self {
            Store::Sqlite(s) => s.resolve(id),
            Store::Postgres(p) => p.resolve(id),
        }
    }

    /// The run `id` (or the only run whose id starts with it), its figures, charts and tables
    /// derived from its body where it has one ([`crate::convert::load`]).
    pub fn get(&mut self, id: &str) -> Result<RunReport, ReportError> {
        match self {
            Store::Sqlite(s) => s.get(id),
            Store::Postgres(p) => p.get(id),
        }
    }

    /// Every run, oldest first.
    pub fn list(&mut self) -> Result<Vec<RunSummary>, ReportError> {
        match self {
            Store::Sqlite(s) => s.list(),
            Store::Postgres(p) => p.list(),
        }
    }

    /// Deletes run `id` (or the only run whose id starts with it); returns the full id.
    pub fn remove(&mut self, id: &str) -> Result<String, ReportError> {
        match self {
            Store::Sqlite(s) => s.remove(id),
            Store::Postgres(p) => p.remove(id),
        }
    }

    /// The database, for messages (a URL without its password).
    pub fn path(&self) -> &str {
        match self {
            Store::Sqlite(s) => s.path(),
            Store::Postgres(p) => p.shown(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Better;

    #[test]
    fn a_list_line_keeps_its_keys_in_name_order() {
        let mut r = RunSummary {
            id: "20261125-000000-abcdef".into(),
            kind: "bench".into(),
            created: "2026-11-25T00:00:00Z".into(),
            title: "bench \"x\"".into(),
            headline: Some(Metric {
                name: "throughput".into(),
                value: 9.5e9,
                unit: "bit/s".into(),
                better: Better::Higher,
            }),
        };
        assert_eq!(
            r.json_line(),
            r#"{"created":"2026-11-25T00:00:00Z","headline":{"name":"throughput","unit":"bit/s","value":9500000000.0},"id":"20261125-000000-abcdef","kind":"bench","title":"bench \"x\""}"#
        );
        r.headline = None;
        assert!(r.json_line().contains(r#""headline":null"#));
    }
    #[test]
    fn a_mesh_round_against_last_k_is_the_median_of_like_rounds_before_it() {
        let mut store = Store::open_in_memory().unwrap();
        let round = |n: u64, agents: &[&str], v: f64| {
            let mut r = RunReport::new(crate::model::RunKind::Mesh, format!("mesh round {n}"));
            r.id = format!("2026010{n}-000000-00000{n}");
            r.created = format!("2026-01-0{n}T00:00:00Z");
            r.params.agents = Some(agents.iter().map(|a| a.to_string()).collect());
            r.metric("tput:a>b", v, "bit/s", Better::Higher);
            r
        };
        for (n, agents, v) in [(1, ["a", "b"], 8.0), (2, ["a", "x"], 1.0), (3, ["a", "b"], 10.0), (4, ["a", "b"], 9.0)]
        {
            store.insert(&round(n, &agents, v)).unwrap();
        }
        store.insert(&round(5, &["a", "b"], 2.0)).unwrap();
        let (run, base) = store.mesh_round(None, Some("last:3")).unwrap();
        let base = base.unwrap();
        assert_eq!((run.id.as_str(), base.id.as_str()), ("20260105-000000-000005", "last:3"));
        // rounds 1, 3 and 4: round 2 had other agents
        assert_eq!(base.find_metric("tput:a>b").unwrap().value, 9.0);
        assert_eq!(base.spread("tput:a>b").map(|s| s.n), Some(3));
        assert!(store.mesh_round(None, Some("last:0")).is_err());
        let shown = store.mesh_report(None, Some("last:3"), 10.0, true, None);
        assert!(matches!(&shown, Err(ReportError::Invalid(m)) if m.contains("no agents and tests")), "{shown:?}");
        let empty = Store::open_in_memory().unwrap().mesh_report(None, None, 10.0, true, None);
        assert!(matches!(empty, Err(ReportError::NoMeshRun)), "{empty:?}");
    }

    #[test]
    fn a_lab_run_is_kept_as_html_and_in_the_store_or_each_step_says_why_not() {
        let dir = tempfile::tempdir().unwrap();
        let (results, db) = (dir.path().join("s-lrX.json"), dir.path().join("runs.sqlite"));
        let doc = linerate_model::doc::example::lab();
        let lines = keep_lab_run(&doc, &results, Some(&db), false);
        assert_eq!(lines[0], format!("report: {}", dir.path().join("s-lrX.html").display()));
        assert!(lines[1].starts_with("saved as run "), "{lines:?}");
        assert!(dir.path().join("s-lrX.html").is_file());
        assert_eq!(Store::open(&db).unwrap().list().unwrap().len(), 1);
        assert_eq!(keep_lab_run(&doc, &results, Some(&db), true).len(), 1);
        let gone = dir.path().join("no-such-dir/r.json");
        let lines = keep_lab_run(&doc, &gone, Some(&db), true);
        assert!(lines[0].starts_with("linerate lab: warning: no HTML report: cannot write "), "{lines:?}");
        let other = linerate_model::doc::lab::LabDocument { schema: "x".into(), ..doc };
        let lines = keep_lab_run(&other, &results, Some(&db), false);
        assert_eq!(lines, ["linerate lab: warning: no report from the results: unknown document schema 'x': expected linerate.run/1, linerate.bench/1, linerate.lab/1 or a cp summary; upgrade linerate to read newer documents"]);
    }
}
