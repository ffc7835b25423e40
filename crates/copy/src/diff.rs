//! Compare two trees entry by entry: names, types, bytes, permission bits, modification times and
//! symlink targets. Used by `linerate demo` to prove a copy, and by the tests.

use linerate_model::units::{count, format_size};
use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// What a comparison found: the first few differences, and how much was compared.
#[derive(Debug, Default)]
pub struct Comparison {
    /// Human-readable differences (at most 20 are kept).
    pub differences: Vec<String>,
    /// Number of differences in all.
    pub count: usize,
    /// Regular files compared.
    pub files: u64,
    /// Bytes compared.
    pub bytes: u64,
}

impl Comparison {
    /// The verdict on a copy of `files` files, as `linerate demo` says it: whether it is
    /// identical, and the line saying so or the lines listing where it differs.
    pub fn verdict(&self, files: u64) -> (bool, String) {
        if self.count == 0 && self.files == files {
            let (files, bytes) = (count(self.files, "file"), format_size(self.bytes as f64));
            return (true, format!("verified: {files} and {bytes} identical, with modes, mtimes and symlinks"));
        }
        let mut text =
            format!("linerate demo: the copy differs from the source in {}:", count(self.count as u64, "place"));
        for d in &self.differences {
            text += &format!("\n  {d}");
        }
        (false, text)
    }

    fn differ(&mut self, s: String) {
        self.count += 1;
        if self.differences.len() < 20 {
            self.differences.push(s);
        }
    }
}

fn listing(root: &Path) -> io::Result<BTreeMap<PathBuf, fs::Metadata>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for e in fs::read_dir(root.join(&rel))? {
            let e = e?;
            let r = rel.join(e.file_name());
            let m = e.metadata()?;
            if m.is_dir() {
                stack.push(r.clone());
            }
            out.insert(r, m);
        }
    }
    Ok(out)
}

fn same_bytes(a: &Path, b: &Path) -> io::Result<bool> {
    let (mut fa, mut fb) = (fs::File::open(a)?, fs::File::open(b)?);
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    loop {
        let na = read_full(&mut fa, &mut ba)?;
        let nb = read_full(&mut fb, &mut bb)?;
        if na != nb || ba[..na] != bb[..nb] {
            return Ok(false);
        }
        if na == 0 {
            return Ok(true);
        }
    }
}

fn read_full(f: &mut fs::File, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// Compare the contents of directory `a` with directory `b` (the roots themselves are not
/// compared, only what is beneath them). `check_mtime` also compares file and directory mtimes.
pub fn compare_trees(a: &Path, b: &Path, check_mtime: bool) -> io::Result<Comparison> {
    let (la, lb) = (listing(a)?, listing(b)?);
    let mut c = Comparison::default();
    for (rel, ma) in &la {
        let Some(mb) = lb.get(rel) else {
            c.differ(format!("{}: missing from the copy", rel.display()));
            continue;
        };
        let (ta, tb) = (ma.file_type(), mb.file_type());
        if ta.is_dir() != tb.is_dir() || ta.is_file() != tb.is_file() || ta.is_symlink() != tb.is_symlink() {
            c.differ(format!("{}: type differs", rel.display()));
            continue;
        }
        if ta.is_symlink() {
            if fs::read_link(a.join(rel))? != fs::read_link(b.join(rel))? {
                c.differ(format!("{}: symlink target differs", rel.display()));
            }
            if check_mtime && (ma.mtime(), ma.mtime_nsec()) != (mb.mtime(), mb.mtime_nsec()) {
                c.differ(format!("{}: symlink mtime differs", rel.display()));
            }
            continue;
        }
        if ma.mode() & 0o1777 != mb.mode() & 0o1777 {
            c.differ(format!("{}: mode {:o} vs {:o}", rel.display(), ma.mode() & 0o7777, mb.mode() & 0o7777));
        }
        if check_mtime && (ma.mtime(), ma.mtime_nsec()) != (mb.mtime(), mb.mtime_nsec()) {
            c.differ(format!("{}: mtime differs", rel.display()));
        }
        if ta.is_file() {
            c.files += 1;
            c.bytes += ma.len();
            if ma.len() != mb.len() {
                c.differ(format!("{}: size {} vs {}", rel.display(), ma.len(), mb.len()));
            } else if !same_bytes(&a.join(rel), &b.join(rel))? {
                c.differ(format!("{}: contents differ", rel.display()));
            }
        }
    }
    for rel in lb.keys() {
        if !la.contains_key(rel) {
            c.differ(format!("{}: only in the copy", rel.display()));
        }
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verdict_is_identical_only_with_every_file_and_no_difference() {
        let mut c = Comparison { files: 2, bytes: 2000, ..Comparison::default() };
        assert_eq!(
            c.verdict(2),
            (true, "verified: 2 files and 2 kB identical, with modes, mtimes and symlinks".into())
        );
        assert!(!c.verdict(3).0);
        c.differ("a: size".into());
        let (identical, text) = c.verdict(2);
        assert!(!identical);
        assert_eq!(text, "linerate demo: the copy differs from the source in 1 place:\n  a: size");
    }
}
