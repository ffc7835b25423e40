//! `linerate clean`: list and remove the partial files that interrupted copies left in the
//! receivers' working directories ([`crate::workdir`]) beneath some directories, with the
//! size each holds and how long ago it was last written. A copy run again resumes its partial
//! files and removes those of its tree whose source is gone; this is for the rest (a copy that is
//! never run again, a file copied on its own to a directory).

use crate::confined;
use crate::workdir::{self, Leftover, WorkDir};
use linerate_model::units::format_size;
use linerate_net::error::shown;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// What to clean.
#[derive(Debug, Clone, Default)]
pub struct CleanConfig {
    /// Directories searched, each with everything beneath it (symlinks are not followed).
    pub paths: Vec<PathBuf>,
    /// Only partial files last written longer ago than this.
    pub older_than: Option<Duration>,
    /// List only, remove nothing.
    pub dry_run: bool,
}

/// A path to clean that is not a directory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: not a directory", shown(.0))]
pub struct NotADirectory(pub PathBuf);

impl CleanConfig {
    /// Every path to search is a directory; the first that is not, else nothing.
    pub fn check(&self) -> Result<(), NotADirectory> {
        match self.paths.iter().find(|d| !d.is_dir()) {
            Some(d) => Err(NotADirectory(d.clone())),
            None => Ok(()),
        }
    }
}

/// One partial file found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partial {
    /// The file it was to become (its path beneath the working directory's destination), or the
    /// partial file itself when no journal says.
    pub path: PathBuf,
    /// Bytes it holds on disk.
    pub bytes: u64,
    /// How long ago it was last written.
    pub age: Duration,
    /// Whether it is removed (or, in a dry run, would be): false when it is younger than
    /// `--older-than`.
    pub removed: bool,
}

/// What [`clean`] found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanReport {
    /// Every partial file found, in path order.
    pub partials: Vec<Partial>,
    /// Working directories found.
    pub work_dirs: usize,
    /// Working directories removed because nothing was left in them.
    pub work_dirs_removed: usize,
    /// What could not be read or removed, one line each (names escaped).
    pub errors: Vec<String>,
    /// Nothing was removed.
    pub dry_run: bool,
}

/// Search `cfg.paths` for working directories and remove their partial files (all, or those
/// older than `cfg.older_than`), and each working directory left empty; `now` dates them.
pub fn clean(cfg: &CleanConfig, now: SystemTime) -> CleanReport {
    let mut r = CleanReport { dry_run: cfg.dry_run, ..CleanReport::default() };
    for root in &cfg.paths {
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            let rd = match std::fs::read_dir(&dir) {
                Ok(rd) => rd,
                Err(e) => {
                    r.errors.push(format!("{}: {e}", shown(&dir)));
                    continue;
                }
            };
            let mut holds_work_dir = false;
            for e in rd.flatten() {
                let name = e.file_name();
                if linerate_proto::name::is_work_dir_name(name.as_bytes()) {
                    holds_work_dir = true;
                } else if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
            if holds_work_dir {
                clean_in(&dir, cfg, now, &mut r);
            }
        }
    }
    r.partials.sort_by(|a, b| a.path.cmp(&b.path));
    r
}

/// Clean the working directories of destination `dir`.
fn clean_in(dir: &Path, cfg: &CleanConfig, now: SystemTime, r: &mut CleanReport) {
    let fd = match confined::open_root(dir) {
        Ok(fd) => fd,
        Err(e) => return r.errors.push(format!("{}: {e}", shown(dir))),
    };
    let works = match workdir::find_all(&fd) {
        Ok(w) => w,
        Err(e) => return r.errors.push(format!("{}: {e}", shown(dir))),
    };
    for work in works {
        r.work_dirs += 1;
        let here = dir.join(std::ffi::OsStr::from_bytes(&work.name));
        match workdir::leftovers(&work) {
            Ok(all) => {
                for l in all {
                    r.partials.push(one(dir, &here, &work, &l, cfg, now));
                }
            }
            Err(e) => r.errors.push(format!("{}: {e}", shown(&here))),
        }
        if !cfg.dry_run && workdir::remove_if_empty(&fd, &work) {
            r.work_dirs_removed += 1;
        }
    }
}

fn one(dir: &Path, here: &Path, work: &WorkDir, l: &Leftover, cfg: &CleanConfig, now: SystemTime) -> Partial {
    let age = now.duration_since(l.modified).unwrap_or_default();
    let removed = cfg.older_than.is_none_or(|min| age > min);
    if removed && !cfg.dry_run {
        workdir::remove(work, &l.key);
    }
    let path = match &l.path {
        Some(p) => dir.join(std::ffi::OsStr::from_bytes(p)),
        None => here.join(format!("{}.part", l.key)),
    };
    Partial { path, bytes: l.bytes, age, removed }
}

/// An age for people: `40 s`, `12 min`, `3 h`, `2 d`.
fn age(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..120 => format!("{s} s"),
        120..7200 => format!("{} min", s / 60),
        7200..172_800 => format!("{} h", s / 3600),
        _ => format!("{} d", s / 86_400),
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

impl CleanReport {
    /// The report for people: one line per partial file (what happens to it, the bytes it holds,
    /// its age, the file it was to become), then a summary line.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let verb = if self.dry_run { "would remove" } else { "removed" };
        for p in &self.partials {
            let what = if p.removed { verb } else { "kept" };
            out.push_str(&format!(
                "{what:<12}  {:>9}  {:>7}  {}\n",
                format_size(p.bytes as f64),
                age(p.age),
                shown(&p.path)
            ));
        }
        let gone: Vec<&Partial> = self.partials.iter().filter(|p| p.removed).collect();
        let bytes: u64 = gone.iter().map(|p| p.bytes).sum();
        let kept = self.partials.len() - gone.len();
        let done = if self.dry_run { "would be removed" } else { "removed" };
        let mut summary = format!(
            "{} {done} ({}) in {}",
            plural(gone.len(), "partial file", "partial files"),
            format_size(bytes as f64),
            plural(self.work_dirs, "working directory", "working directories")
        );
        if kept > 0 {
            summary.push_str(&format!("; {kept} kept (younger than --older-than)"));
        }
        if self.work_dirs_removed > 0 {
            let n = plural(self.work_dirs_removed, "empty working directory", "empty working directories");
            summary.push_str(&format!("; {n} removed"));
        }
        out.push_str(&summary);
        out.push('\n');
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::journal;
    use linerate_proto::frame::Time;

    /// A destination `dest` with a working directory holding a journaled partial file of
    /// `src/big` (two chunks written) and a stray partial file without a journal.
    fn planted() -> (tempfile::TempDir, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let dest = t.path().join("dest");
        std::fs::create_dir_all(dest.join("src/sub")).unwrap();
        let fd = confined::open_root(&dest).unwrap();
        let work = workdir::find_or_create(&fd).unwrap();
        let src = journal::Source { path: b"src/big", size: 3 << 16, mtime: Time { sec: 1, nsec: 0 }, chunk: 1 << 16 };
        let mut p = journal::open(&work.fd, &src).unwrap();
        for i in 0..2u64 {
            std::os::unix::fs::FileExt::write_all_at(&p.file, &[7u8; 1 << 16], i << 16).unwrap();
            p.journal.record(&p.file, i, 1 << 16).unwrap();
        }
        let wname = String::from_utf8(work.name.clone()).unwrap();
        std::fs::write(dest.join(&wname).join("ffffffffffffffffffffffffffffffff.part"), b"stray").unwrap();
        (t, dest)
    }

    #[test]
    fn lists_then_removes_partial_files_and_the_emptied_working_directory() {
        let (t, dest) = planted();
        let now = SystemTime::now() + Duration::from_secs(3 * 3600);
        let cfg = CleanConfig { paths: vec![t.path().to_path_buf()], older_than: None, dry_run: true };
        let r = clean(&cfg, now);
        assert_eq!((r.partials.len(), r.work_dirs, r.work_dirs_removed), (2, 1, 0), "{r:?}");
        let big = r.partials.iter().find(|p| p.path == dest.join("src/big")).unwrap();
        assert_eq!(big.bytes, 2 << 16);
        assert!(r.partials.iter().any(|p| p.path.ends_with("ffffffffffffffffffffffffffffffff.part")));
        assert!(r.partials.iter().all(|p| p.removed));
        assert_eq!(clean(&cfg, now), r, "a dry run changes nothing");
        let r = clean(&CleanConfig { dry_run: false, ..cfg.clone() }, now);
        assert_eq!((r.partials.len(), r.work_dirs_removed), (2, 1), "{r:?}");
        let left: Vec<_> = std::fs::read_dir(&dest).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, ["src"], "only the tree is left");
        assert_eq!(clean(&cfg, now).partials.len(), 0);
    }

    #[test]
    fn older_than_keeps_recent_partial_files() {
        let (t, _dest) = planted();
        let cfg = CleanConfig {
            paths: vec![t.path().to_path_buf()],
            older_than: Some(Duration::from_secs(86_400)),
            dry_run: false,
        };
        let r = clean(&cfg, SystemTime::now());
        assert!(r.partials.iter().all(|p| !p.removed), "{r:?}");
        assert_eq!(r.work_dirs_removed, 0);
        let r = clean(&cfg, SystemTime::now() + Duration::from_secs(2 * 86_400));
        assert!(r.partials.iter().all(|p| p.removed) && r.work_dirs_removed == 1, "{r:?}");
    }

    #[test]
    fn renders_what_it_did() {
        let p = |path: &str, bytes, secs, removed| Partial {
            path: PathBuf::from(path),
            bytes,
            age: Duration::from_secs(secs),
            removed,
        };
        let r = CleanReport {
            partials: vec![
                p("/backup/src/big.iso", 115_000_000, 3 * 3600 + 5, true),
                p("/backup/src/new\x1b[2J.bin", 2_000_000, 45, false),
            ],
            work_dirs: 1,
            work_dirs_removed: 0,
            errors: vec![],
            dry_run: false,
        };
        insta::assert_snapshot!(r.render(), @r"
        removed          115 MB      3 h  /backup/src/big.iso
        kept               2 MB     45 s  /backup/src/new\x1b[2J.bin
        1 partial file removed (115 MB) in 1 working directory; 1 kept (younger than --older-than)
        ");
        let dry = CleanReport { dry_run: true, partials: vec![], work_dirs: 2, ..r };
        insta::assert_snapshot!(dry.render(), @"0 partial files would be removed (0 B) in 2 working directories");
    }
}
