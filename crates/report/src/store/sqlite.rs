//! The SQLite store: one file; its layout version is `PRAGMA user_version`.

use super::{RunSummary, STORE_VERSION};
use crate::model::{Metric, RunReport};
use crate::ReportError;
use rusqlite::{params, Connection, OptionalExtension, Transaction};
use std::path::Path;

/// An open SQLite store.
pub struct SqliteStore {
    conn: Connection,
    path: String,
}

/// Migration from version `i` to `i + 1` is `MIGRATIONS[i]`.
const MIGRATIONS: &[fn(&Transaction) -> rusqlite::Result<()>] = &[v0_to_v1, v1_to_v2, v2_to_v3];

fn v0_to_v1(tx: &Transaction) -> rusqlite::Result<()> {
    tx.execute_batch(super::RUNS_V1)
}

fn v1_to_v2(tx: &Transaction) -> rusqlite::Result<()> {
    tx.execute_batch(
        "CREATE TABLE metrics (
            run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            name   TEXT NOT NULL,
            value  REAL NOT NULL,
            unit   TEXT NOT NULL,
            better TEXT NOT NULL,
            PRIMARY KEY (run_id, name)
        );
        CREATE INDEX runs_created ON runs(created);",
    )?;
    // backfill; a document this build cannot read keeps its run, just without metric rows
    let docs: Vec<(String, String)> = {
        let mut st = tx.prepare("SELECT id, doc FROM runs")?;
        let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        rows.collect::<Result<_, _>>()?
    };
    for (id, doc) in docs {
        if let Ok(r) = super::read_doc(&id, &doc) {
            insert_metrics(tx, &id, &r.metrics)?;
        }
    }
    Ok(())
}

/// Every run with a body in the one stored shape, its metric rows derived again.
fn v2_to_v3(tx: &Transaction) -> rusqlite::Result<()> {
    let docs: Vec<(String, String)> = {
        let mut st = tx.prepare("SELECT id, doc FROM runs ORDER BY id")?;
        let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        rows.collect::<Result<_, _>>()?
    };
    for (id, doc) in docs {
        if let Some((doc, metrics)) = crate::convert::restored(&doc) {
            tx.execute("UPDATE runs SET doc = ?1 WHERE id = ?2", params![doc, id])?;
            tx.execute("DELETE FROM metrics WHERE run_id = ?1", [&id])?;
            insert_metrics(tx, &id, &metrics)?;
        }
    }
    Ok(())
}

fn insert_metrics(tx: &Transaction, id: &str, metrics: &[Metric]) -> rusqlite::Result<()> {
    let mut st =
        tx.prepare("INSERT OR REPLACE INTO metrics (run_id, name, value, unit, better) VALUES (?1, ?2, ?3, ?4, ?5)")?;
    for m in metrics {
        let better = match m.better {
            crate::Better::Higher => "higher",
            crate::Better::Lower => "lower",
        };
        st.execute(params![id, m.name.to_string(), m.value, m.unit, better])?;
    }
    Ok(())
}

impl SqliteStore {
    /// Opens (creating if needed, with its parent directory) and migrates the store at `path`.
    pub fn open(path: &Path) -> Result<SqliteStore, ReportError> {
        let p = path.display().to_string();
        if let Some(parent) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|source| ReportError::Io {
                what: "cannot create the directory of",
                path: p.clone(),
                source,
            })?;
        }
        let conn = Connection::open(path).map_err(|source| ReportError::Sqlite { path: p.clone(), source })?;
        let mut s = SqliteStore { conn, path: p };
        s.prepare()?;
        Ok(s)
    }

    /// An in-memory store (tests).
    pub fn open_in_memory() -> Result<SqliteStore, ReportError> {
        let conn =
            Connection::open_in_memory().map_err(|source| ReportError::Sqlite { path: ":memory:".into(), source })?;
        let mut s = SqliteStore { conn, path: ":memory:".into() };
        s.prepare()?;
        Ok(s)
    }

    fn err(&self) -> impl Fn(rusqlite::Error) -> ReportError + '_ {
        |source| ReportError::Sqlite { path: self.path.clone(), source }
    }

    fn prepare(&mut self) -> Result<(), ReportError> {
        let path = self.path.clone();
        let e = |source| ReportError::Sqlite { path: path.clone(), source };
        self.conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(e)?;
        self.conn.pragma_update(None, "foreign_keys", true).map_err(e)?;
        loop {
            let tx = self.conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(e)?;
            let v: i64 = tx.pragma_query_value(None, "user_version", |r| r.get(0)).map_err(e)?;
            if v > STORE_VERSION {
                return Err(ReportError::StoreTooNew { path: path.clone(), found: v, known: STORE_VERSION });
            }
            if v == STORE_VERSION {
                return tx.commit().map_err(e);
            }
            let step = usize::try_from(v).map_err(|_| ReportError::Invalid(format!("negative user_version {v}")))?;
            MIGRATIONS[step](&tx).map_err(e)?;
            tx.pragma_update(None, "user_version", v + 1).map_err(e)?;
            tx.commit().map_err(e)?;
        }
    }

    /// The layout version of the open file.
    pub fn version(&self) -> Result<i64, ReportError> {
        self.conn.pragma_query_value(None, "user_version", |r| r.get(0)).map_err(self.err())
    }

    /// Saves a run ([`crate::convert::to_stored`]: a run with a body without its derived
    /// parts); its id must be new.
    pub fn insert(&mut self, r: &RunReport) -> Result<(), ReportError> {
        let doc = crate::convert::to_stored(r)?;
        let path = self.path.clone();
        let e = |source| ReportError::Sqlite { path: path.clone(), source };
        let tx = self.conn.transaction().map_err(e)?;
        tx.execute(
            "INSERT INTO runs (id, kind, created, title, doc) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![r.id, r.kind.as_str(), r.created, r.title, doc],
        )
        .map_err(|source| match source.sqlite_error_code() {
            Some(rusqlite::ErrorCode::ConstraintViolation) => ReportError::Duplicate(r.id.clone()),
            _ => e(source),
        })?;
        insert_metrics(&tx, &r.id, &r.metrics).map_err(e)?;
        tx.commit().map_err(e)
    }

    /// The full id of the run whose id is `id` or starts with `id`.
    pub fn resolve(&self, id: &str) -> Result<String, ReportError> {
        let exact: Option<String> = self
            .conn
            .query_row("SELECT id FROM runs WHERE id = ?1", [id], |r| r.get(0))
            .optional()
            .map_err(self.err())?;
        if let Some(x) = exact {
            return Ok(x);
        }
        let pattern = format!("{}%", id.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_"));
        let mut st =
            self.conn.prepare("SELECT id FROM runs WHERE id LIKE ?1 ESCAPE '\\' LIMIT 50").map_err(self.err())?;
        let ids: Vec<String> =
            st.query_map([pattern], |r| r.get(0)).map_err(self.err())?.collect::<Result<_, _>>().map_err(self.err())?;
        match ids.len() {
            0 => Err(ReportError::NotFound(id.to_string())),
            1 => Ok(ids.into_iter().next().unwrap_or_default()),
            n => Err(ReportError::Ambiguous(id.to_string(), n)),
        }
    }

    /// The run `id` (or the only run whose id starts with it).
    pub fn get(&self, id: &str) -> Result<RunReport, ReportError> {
        let full = self.resolve(id)?;
        let doc: String =
            self.conn.query_row("SELECT doc FROM runs WHERE id = ?1", [&full], |r| r.get(0)).map_err(self.err())?;
        super::read_doc(&full, &doc)
    }

    /// Every run, oldest first.
    pub fn list(&self) -> Result<Vec<RunSummary>, ReportError> {
        let mut st = self.conn.prepare(&super::list_sql("rowid")).map_err(self.err())?;
        let rows = st
            .query_map([], |r| {
                let name: Option<String> = r.get(4)?;
                let headline = match name {
                    Some(name) => Some(Metric {
                        name: name.as_str().into(),
                        value: r.get(5)?,
                        unit: r.get(6)?,
                        better: if r.get::<_, String>(7)? == "lower" {
                            crate::Better::Lower
                        } else {
                            crate::Better::Higher
                        },
                    }),
                    None => None,
                };
                Ok(RunSummary { id: r.get(0)?, kind: r.get(1)?, created: r.get(2)?, title: r.get(3)?, headline })
            })
            .map_err(self.err())?;
        rows.collect::<Result<_, _>>().map_err(self.err())
    }

    /// Deletes run `id` (or the only run whose id starts with it); returns the full id.
    pub fn remove(&mut self, id: &str) -> Result<String, ReportError> {
        let full = self.resolve(id)?;
        let path = self.path.clone();
        let e = |source| ReportError::Sqlite { path: path.clone(), source };
        let tx = self.conn.transaction().map_err(e)?;
        tx.execute("DELETE FROM metrics WHERE run_id = ?1", [&full]).map_err(e)?;
        tx.execute("DELETE FROM runs WHERE id = ?1", [&full]).map_err(e)?;
        tx.commit().map_err(e)?;
        Ok(full)
    }

    /// The database file, for messages.
    pub fn path(&self) -> &str {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Store, STORE_VERSION};
    use crate::{Better, ReportError, RunKind, RunReport};

    fn sample(title: &str, bps: f64) -> RunReport {
        let mut r = RunReport::new(RunKind::Bench, title);
        r.metric("throughput", bps, "bit/s", Better::Higher);
        r.metric("latency.p99", 120.0, "us", Better::Lower);
        r
    }

    #[test]
    fn round_trip_list_prefix_and_remove() {
        let mut s = Store::open_in_memory().unwrap();
        assert_eq!(s.version().unwrap(), STORE_VERSION);
        let a = sample("a", 9.3e9);
        let b = sample("b", 1e9);
        s.insert(&a).unwrap();
        s.insert(&b).unwrap();
        assert_eq!(s.get(&a.id).unwrap(), a);
        assert_eq!(s.get(&b.id[..b.id.len() - 1]).unwrap(), b);
        let l = s.list().unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(l.iter().find(|x| x.id == a.id).unwrap().headline.as_ref().unwrap().value, 9.3e9);
        assert!(matches!(s.get("2"), Err(ReportError::Ambiguous(_, 2))));
        assert!(matches!(s.get("zzz"), Err(ReportError::NotFound(_))));
        assert!(matches!(s.insert(&a), Err(ReportError::Duplicate(id)) if id == a.id));
        assert_eq!(s.remove(&a.id).unwrap(), a.id);
        assert!(matches!(s.get(&a.id), Err(ReportError::NotFound(_))));
        assert_eq!(s.list().unwrap().len(), 1);
    }

    #[test]
    fn like_wildcards_in_an_id_prefix_are_literal() {
        let mut s = Store::open_in_memory().unwrap();
        s.insert(&sample("a", 1.0)).unwrap();
        assert!(matches!(s.get("%"), Err(ReportError::NotFound(_))));
        assert!(matches!(s.get("_"), Err(ReportError::NotFound(_))));
    }
}
