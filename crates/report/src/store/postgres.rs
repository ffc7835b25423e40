//! The PostgreSQL store: the same layout and versions as SQLite's, for many writers at once.
//! The version lives in `linerate_meta`; migrations run in a transaction holding an advisory
//! lock, so two processes opening an old database together migrate it once. The connection is
//! TLS (rustls, [`super::pgtls`]) when the URL's `sslmode` says `require`, `verify-ca` or
//! `verify-full`, and never falls back to plaintext; without `sslmode` it is plaintext, which
//! is allowed to this machine only: another host needs an `sslmode`, `disable` included. The
//! URL (or key-value string) is read by `postgres::Config` once `sslmode` and `sslrootcert`
//! are taken out.

use super::pgtls::{self, PgTlsError, SslMode};
use super::{RunSummary, STORE_VERSION};
use crate::model::{Better, Metric, RunReport};
use crate::ReportError;
use postgres::error::SqlState;
use postgres::{Client, NoTls, Transaction};

/// The advisory lock key of migrations ("linerate" in ASCII, as a number).
const MIGRATION_LOCK: i64 = 0x6c69_6e65_7261_7465;

type Migration = fn(&mut Transaction<'_>) -> Result<(), postgres::Error>;

/// Migration from version `i` to `i + 1` is `MIGRATIONS[i]`.
const MIGRATIONS: &[Migration] = &[v0_to_v1, v1_to_v2, v2_to_v3];

fn v0_to_v1(tx: &mut Transaction<'_>) -> Result<(), postgres::Error> {
    tx.batch_execute(super::RUNS_V1)
}

fn v1_to_v2(tx: &mut Transaction<'_>) -> Result<(), postgres::Error> {
    tx.batch_execute(
        "CREATE TABLE metrics (
            run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            name   TEXT NOT NULL,
            value  DOUBLE PRECISION NOT NULL,
            unit   TEXT NOT NULL,
            better TEXT NOT NULL,
            seq    BIGSERIAL,
            PRIMARY KEY (run_id, name)
        );
        CREATE INDEX runs_created ON runs(created);",
    )?;
    // backfill; a document this build cannot read keeps its run, just without metric rows
    let rows = tx.query("SELECT id, doc FROM runs ORDER BY id", &[])?;
    for row in rows {
        let (id, doc): (String, String) = (row.get(0), row.get(1));
        if let Ok(r) = super::read_doc(&id, &doc) {
            insert_metrics(tx, &id, &r.metrics)?;
        }
    }
    Ok(())
}

/// Every run with a body in the one stored shape, its metric rows derived again (in the run's
/// order, which is all `seq` is read for).
fn v2_to_v3(tx: &mut Transaction<'_>) -> Result<(), postgres::Error> {
    let rows = tx.query("SELECT id, doc FROM runs ORDER BY id", &[])?;
    for row in rows {
        let (id, doc): (String, String) = (row.get(0), row.get(1));
        if let Some((doc, metrics)) = crate::convert::restored(&doc) {
            tx.execute("UPDATE runs SET doc = $1 WHERE id = $2", &[&doc, &id])?;
            tx.execute("DELETE FROM metrics WHERE run_id = $1", &[&id])?;
            insert_metrics(tx, &id, &metrics)?;
        }
    }
    Ok(())
}

fn insert_metrics(tx: &mut Transaction<'_>, id: &str, metrics: &[Metric]) -> Result<(), postgres::Error> {
    let st = tx.prepare(
        "INSERT INTO metrics (run_id, name, value, unit, better) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (run_id, name) DO UPDATE SET value = EXCLUDED.value, unit = EXCLUDED.unit,
         better = EXCLUDED.better",
    )?;
    for m in metrics {
        let better = match m.better {
            Better::Higher => "higher",
            Better::Lower => "lower",
        };
        tx.execute(&st, &[&id, &m.name.to_string(), &m.value, &m.unit, &better])?;
    }
    Ok(())
}

/// `url` with any password replaced by `***`: the one in `user:password@`, and any
/// `password=` option (`?password=…` in a URL, `password=…` in a key-value string).
pub fn redact(url: &str) -> String {
    let mut out = match url.split_once("://") {
        Some((scheme, rest)) => match rest.find(['@', '/', '?']) {
            Some(at) if rest.as_bytes()[at] == b'@' => match rest[..at].split_once(':') {
                Some((user, _)) => format!("{scheme}://{user}:***{}", &rest[at..]),
                None => url.to_string(),
            },
            _ => url.to_string(),
        },
        None => url.to_string(),
    };
    let mut from = 0;
    while let Some(i) = out[from..].find("password=").map(|i| from + i + "password=".len()) {
        let quoted = out[i..].starts_with('\'');
        let end = if quoted {
            out[i + 1..].find('\'').map_or(out.len(), |j| i + 1 + j + 1)
        } else {
            out[i..].find(['&', ' ', '\t']).map_or(out.len(), |j| i + j)
        };
        out.replace_range(i..end, "***");
        from = i + 3;
    }
    out
}

/// Whether `url` carries a password (`user:password@`, or a `password=` option), as
/// `postgres::Config` reads it.
pub fn has_password(url: &str) -> bool {
    match url.parse::<postgres::Config>() {
        Ok(c) => c.get_password().is_some_and(|p| !p.is_empty()),
        Err(_) => redact(url) != url,
    }
}

/// Whether every host `config` names is this machine (a Unix socket, or loopback by name or
/// address); no host at all is the default socket.
fn all_local(config: &postgres::Config) -> bool {
    config.get_hosts().iter().all(|h| match h {
        postgres::config::Host::Unix(_) => true,
        postgres::config::Host::Tcp(h) => {
            let h = h.trim_start_matches('[').trim_end_matches(']');
            h == "localhost" || h.parse::<std::net::IpAddr>().is_ok_and(|a| a.is_loopback())
        }
    })
}

/// Refuses plaintext to another host unless the URL asks for it with `sslmode=disable`.
fn plaintext_check(mode: Option<SslMode>, config: &postgres::Config) -> Result<(), String> {
    if mode.is_some() || all_local(config) {
        return Ok(());
    }
    let host = config.get_hosts().iter().find_map(|h| match h {
        postgres::config::Host::Tcp(h) => Some(h.clone()),
        postgres::config::Host::Unix(_) => None,
    });
    Err(format!(
        "{} is reached over the network: add sslmode=verify-full (with sslrootcert=CA.pem, or the \
         system CA store) for TLS, or sslmode=disable if the network is trusted",
        host.unwrap_or_default()
    ))
}

/// The password for `config` from `PGPASSWORD`, else from the password file (`PGPASSFILE`, else
/// `~/.pgpass`: `host:port:database:user:password` lines, `*` matching anything), as libpq finds
/// it. The file is read only if no one but its owner can read it.
fn password_from_env(config: &postgres::Config) -> Option<String> {
    if let Some(p) = std::env::var_os("PGPASSWORD").filter(|p| !p.is_empty()) {
        return p.into_string().ok();
    }
    let file = std::env::var_os("PGPASSFILE")
        .map(std::path::PathBuf::from)
        .or_else(|| dirs::home_dir().map(|h| h.join(".pgpass")))?;
    use std::os::unix::fs::MetadataExt;
    if std::fs::metadata(&file).ok()?.mode() & 0o077 != 0 {
        return None;
    }
    let text = std::fs::read_to_string(&file).ok()?;
    let host = match config.get_hosts().first() {
        Some(postgres::config::Host::Tcp(h)) => h.clone(),
        _ => "localhost".to_string(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432).to_string();
    let db = config.get_dbname().unwrap_or_default().to_string();
    let user = config.get_user().unwrap_or_default().to_string();
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let f: Vec<&str> = l.splitn(5, ':').collect();
        let ok = |i: usize, want: &str| f.get(i).is_some_and(|v| *v == "*" || *v == want);
        (f.len() == 5 && ok(0, &host) && ok(1, &port) && ok(2, &db) && ok(3, &user)).then(|| f[4].to_string())
    })
}

/// An open PostgreSQL store.
pub struct PgStore {
    client: Client,
    shown: String,
}

impl PgStore {
    /// Connects to `url` (`postgres://[user[:password]@]host[:port]/db[?…]`, or the same with
    /// `host=/socket/dir`) and migrates the schema.
    pub fn connect(url: &str) -> Result<PgStore, ReportError> {
        let shown = redact(url);
        let tls_err = |error| ReportError::PostgresTls { db: shown.clone(), error };
        let opts = pgtls::split(url).map_err(tls_err)?;
        let pg = |error| ReportError::Postgres { db: shown.clone(), error };
        let mut config: postgres::Config = opts.rest.parse().map_err(pg)?;
        plaintext_check(opts.mode, &config).map_err(|m| ReportError::Invalid(format!("database {shown}: {m}")))?;
        if config.get_password().is_none() {
            if let Some(p) = password_from_env(&config) {
                config.password(p);
            }
        }
        let client = match opts.mode.unwrap_or(SslMode::Disable) {
            SslMode::Disable => {
                config.ssl_mode(postgres::config::SslMode::Disable);
                config.connect(NoTls).map_err(pg)?
            }
            mode => {
                let roots = pgtls::roots_for(mode, opts.rootcert.as_deref());
                let tls = pgtls::client_config(mode, &roots).map_err(tls_err)?;
                // `Require` in postgres::Config: TLS or an error, never plaintext
                config.ssl_mode(postgres::config::SslMode::Require);
                config.connect(tokio_postgres_rustls::MakeRustlsConnect::new(tls)).map_err(|source| {
                    match pgtls::rustls_cause(&source).cloned() {
                        Some(cause) => tls_err(PgTlsError::Handshake { roots, cause }),
                        None => pg(source),
                    }
                })?
            }
        };
        let mut s = PgStore { client, shown };
        s.migrate()?;
        Ok(s)
    }

    fn err(&self) -> impl Fn(postgres::Error) -> ReportError + use<> {
        let db = self.shown.clone();
        move |error| ReportError::Postgres { db: db.clone(), error }
    }

    fn migrate(&mut self) -> Result<(), ReportError> {
        let db = self.shown.clone();
        let e = self.err();
        let mut tx = self.client.transaction().map_err(&e)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).map_err(&e)?;
        tx.batch_execute("CREATE TABLE IF NOT EXISTS linerate_meta (key TEXT PRIMARY KEY, value BIGINT NOT NULL)")
            .map_err(&e)?;
        let mut v: i64 = tx
            .query_opt("SELECT value FROM linerate_meta WHERE key = 'version'", &[])
            .map_err(&e)?
            .map_or(0, |r| r.get(0));
        if v > STORE_VERSION {
            return Err(ReportError::StoreTooNew { path: db.clone(), found: v, known: STORE_VERSION });
        }
        while v < STORE_VERSION {
            let step = usize::try_from(v).map_err(|_| ReportError::Invalid(format!("negative store version {v}")))?;
            MIGRATIONS[step](&mut tx).map_err(&e)?;
            v += 1;
        }
        tx.execute(
            "INSERT INTO linerate_meta (key, value) VALUES ('version', $1)
             ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            &[&v],
        )
        .map_err(&e)?;
        tx.commit().map_err(&e)
    }

    /// The layout version.
    pub fn version(&mut self) -> Result<i64, ReportError> {
        let r = self.client.query_one("SELECT value FROM linerate_meta WHERE key = 'version'", &[]);
        r.map(|r| r.get(0)).map_err(self.err())
    }

    /// Saves a run ([`crate::convert::to_stored`]: a run with a body without its derived
    /// parts); its id must be new.
    pub fn insert(&mut self, r: &RunReport) -> Result<(), ReportError> {
        let doc = crate::convert::to_stored(r)?;
        let e = self.err();
        let mut tx = self.client.transaction().map_err(&e)?;
        tx.execute(
            "INSERT INTO runs (id, kind, created, title, doc) VALUES ($1, $2, $3, $4, $5)",
            &[&r.id, &r.kind.as_str(), &r.created, &r.title, &doc],
        )
        .map_err(|source| match source.code() {
            Some(c) if *c == SqlState::UNIQUE_VIOLATION => ReportError::Duplicate(r.id.clone()),
            _ => e(source),
        })?;
        insert_metrics(&mut tx, &r.id, &r.metrics).map_err(&e)?;
        tx.commit().map_err(&e)
    }

    /// The full id of the run whose id is `id` or starts with `id`.
    pub fn resolve(&mut self, id: &str) -> Result<String, ReportError> {
        let e = self.err();
        if let Some(r) = self.client.query_opt("SELECT id FROM runs WHERE id = $1", &[&id]).map_err(&e)? {
            return Ok(r.get(0));
        }
        let pattern = format!("{}%", id.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_"));
        let rows =
            self.client.query("SELECT id FROM runs WHERE id LIKE $1 ESCAPE '\\' LIMIT 50", &[&pattern]).map_err(&e)?;
        match rows.len() {
            0 => Err(ReportError::NotFound(id.to_string())),
            1 => Ok(rows[0].get(0)),
            n => Err(ReportError::Ambiguous(id.to_string(), n)),
        }
    }

    /// The run `id` (or the only run whose id starts with it).
    pub fn get(&mut self, id: &str) -> Result<RunReport, ReportError> {
        let full = self.resolve(id)?;
        let row = self.client.query_one("SELECT doc FROM runs WHERE id = $1", &[&full]).map_err(self.err())?;
        let doc: String = row.get(0);
        super::read_doc(&full, &doc)
    }

    /// Every run, oldest first.
    pub fn list(&mut self) -> Result<Vec<RunSummary>, ReportError> {
        let rows = self.client.query(&super::list_sql("seq"), &[]).map_err(self.err())?;
        Ok(rows
            .into_iter()
            .map(|r| {
                let name: Option<String> = r.get(4);
                let headline = name.map(|name| Metric {
                    name: name.as_str().into(),
                    value: r.get(5),
                    unit: r.get(6),
                    better: if r.get::<_, String>(7) == "lower" { Better::Lower } else { Better::Higher },
                });
                RunSummary { id: r.get(0), kind: r.get(1), created: r.get(2), title: r.get(3), headline }
            })
            .collect())
    }

    /// Deletes run `id` (or the only run whose id starts with it); returns the full id.
    pub fn remove(&mut self, id: &str) -> Result<String, ReportError> {
        let full = self.resolve(id)?;
        let e = self.err();
        let mut tx = self.client.transaction().map_err(&e)?;
        tx.execute("DELETE FROM metrics WHERE run_id = $1", &[&full]).map_err(&e)?;
        tx.execute("DELETE FROM runs WHERE id = $1", &[&full]).map_err(&e)?;
        tx.commit().map_err(&e)?;
        Ok(full)
    }

    /// The URL without its password.
    pub fn shown(&self) -> &str {
        &self.shown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted_and_found() {
        assert_eq!(redact("postgres://me:s3cret@db:5432/runs"), "postgres://me:***@db:5432/runs");
        assert_eq!(redact("postgres://me@db/runs"), "postgres://me@db/runs");
        assert_eq!(redact("postgresql://db/runs?user=me"), "postgresql://db/runs?user=me");
        assert_eq!(redact("postgres://db/runs?password=s3cret&user=me"), "postgres://db/runs?password=***&user=me");
        assert_eq!(redact("host=db password=s3cret user=me"), "host=db password=*** user=me");
        assert_eq!(redact("host=db password='s3 cret' user=me"), "host=db password=*** user=me");
        assert_eq!(redact("postgres://db/x?a=1@b"), "postgres://db/x?a=1@b", "an @ past the host is no user");
        assert!(has_password("postgres://me:x@db/runs"));
        assert!(has_password("postgres://db/runs?password=x"));
        assert!(has_password("host=db password=x"));
        assert!(!has_password("postgres://me@db/runs"));
        for url in ["postgres://me:s3cret@db/runs", "postgres://db/runs?password=s3cret", "host=db password=s3cret"] {
            assert!(!redact(url).contains("s3cret"), "{url}");
        }
    }

    #[test]
    fn plaintext_to_another_host_must_be_asked_for_and_prefer_is_refused() {
        let check = |url: &str| {
            let o = pgtls::split(url).unwrap();
            plaintext_check(o.mode, &o.rest.parse().unwrap())
        };
        assert!(check("postgres://me@127.0.0.1:5432/runs").is_ok());
        assert!(check("postgres://me@localhost/runs").is_ok());
        assert!(check("postgres://me@[::1]:5432/runs").is_ok());
        assert!(check("postgres:///runs?host=/var/run/postgresql").is_ok());
        assert!(check("host=/var/run/postgresql dbname=runs").is_ok());
        assert!(check("postgres://me@db.example/runs?sslmode=disable").is_ok());
        assert!(check("postgres://me@db.example/runs?sslmode=verify-full").is_ok());
        assert!(check("postgres://me@db.example/runs").unwrap_err().contains("db.example is reached over the network"));
        assert!(check("postgres://me@localhost,db.example/runs").unwrap_err().contains("sslmode=verify-full"));
        for m in ["prefer", "allow"] {
            let e = PgStore::connect(&format!("postgres://me:s3cret@127.0.0.1/runs?sslmode={m}")).err().unwrap();
            let e = e.to_string();
            assert!(e.contains("never falls back to plaintext") && !e.contains("s3cret"), "{m}: {e}");
        }
    }
}
