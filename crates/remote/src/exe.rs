//! This executable as an upload: its size, its cache entry's name, the glibc it needs, and its
//! SHA-256, read from `/proc/self/exe`.

use crate::probe::parse_version;
use object::read::elf::{FileHeader, SectionHeader};
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// What is known about this executable, for the remote cache and the compatibility check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exe {
    /// The running executable (`/proc/self/exe`: the file this process runs, even if its path
    /// was replaced since).
    pub path: PathBuf,
    /// Its size, bytes.
    pub size: u64,
    /// The cache entry's name: `<version>-<16 hex digits of the ELF build id>` (of its SHA-256
    /// when the linker wrote no build id).
    pub name: String,
    /// The newest glibc symbol version it needs (`(2, 34)`), `None` for a static build.
    pub glibc: Option<(u32, u32)>,
}

/// Why this executable cannot be offered: a step and its I/O error.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {error}")]
pub struct ExeError {
    what: String,
    error: io::Error,
}

impl ExeError {
    fn new(what: impl Into<String>, source: impl Into<io::Error>) -> ExeError {
        ExeError { what: what.into(), error: source.into() }
    }
}

impl Exe {
    /// The running executable.
    pub fn current() -> Result<Exe, ExeError> {
        let path = PathBuf::from("/proc/self/exe");
        let file =
            File::open(&path).map_err(|e| ExeError::new("opening this program's executable (/proc/self/exe)", e))?;
        let size = file.metadata().map_err(|e| ExeError::new("reading this program's size", e))?.len();
        let ElfFacts { build_id, glibc } = elf_facts(file).map_err(|e| {
            ExeError::new("reading this program's ELF headers", io::Error::new(io::ErrorKind::InvalidData, e))
        })?;
        let id = match build_id {
            Some(id) => id,
            None => hex::encode(sha256_file(&path)?),
        };
        let name = format!("{}-{}", env!("CARGO_PKG_VERSION"), &id[..16.min(id.len())]);
        Ok(Exe { path, size, name, glibc })
    }
}

/// What [`elf_facts`] reads from an executable.
struct ElfFacts {
    /// The GNU build id, hex.
    build_id: Option<String>,
    /// The newest `GLIBC_x.y` version it needs.
    glibc: Option<(u32, u32)>,
}

/// The ELF build id (hex) and the newest `GLIBC_x.y` version the file needs.
fn elf_facts(file: File) -> Result<ElfFacts, object::read::Error> {
    let data = object::read::ReadCache::new(file);
    let header = object::elf::FileHeader64::<object::Endianness>::parse(&data)?;
    let endian = header.endian()?;
    let sections = header.sections(endian, &data)?;
    let mut id = None;
    for s in sections.iter() {
        if let Some(mut notes) = s.notes(endian, &data)? {
            while let Some(note) = notes.next()? {
                if note.name() == b"GNU"
                    && note.n_type(endian) == object::elf::NT_GNU_BUILD_ID
                    && note.desc().len() >= 8
                {
                    id = Some(hex::encode(note.desc()));
                }
            }
        }
    }
    let mut glibc = None;
    if let Some((mut needs, link)) = sections.gnu_verneed(endian, &data)? {
        let strings = sections.strings(endian, &data, link)?;
        while let Some((_, mut aux)) = needs.next()? {
            while let Some(a) = aux.next()? {
                if let Some(v) = a.name(endian, strings)?.strip_prefix(b"GLIBC_") {
                    if let Some(v) = parse_version(&String::from_utf8_lossy(v)) {
                        glibc = glibc.max(Some(v));
                    }
                }
            }
        }
    }
    Ok(ElfFacts { build_id: id, glibc })
}

/// SHA-256 of a file.
pub fn sha256_file(path: &Path) -> Result<[u8; 32], ExeError> {
    let mut f = File::open(path).map_err(|e| ExeError::new(format!("opening {}", path.display()), e))?;
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(|e| ExeError::new(format!("reading {}", path.display()), e))?;
        if n == 0 {
            break;
        }
        ctx.update(&buf[..n]);
    }
    Ok(digest32(ctx.finish()))
}

/// A SHA-256 digest as its 32 bytes.
pub(crate) fn digest32(d: ring::digest::Digest) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(&d.as_ref()[..32]);
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn reads_this_test_binarys_elf() {
        let exe = Exe::current().unwrap();
        assert!(exe.size > 0);
        let (version, id) = exe.name.split_once('-').unwrap();
        assert_eq!(version, env!("CARGO_PKG_VERSION"));
        assert_eq!(id.len(), 16);
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        // A glibc build needs some glibc 2.x.
        if cfg!(target_env = "gnu") {
            assert!(exe.glibc.is_some_and(|(a, _)| a == 2), "{:?}", exe.glibc);
        }
    }

    #[test]
    fn hashes_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("exe");
        std::fs::write(&path, b"hello").unwrap();
        let sum = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";
        assert_eq!(hex::encode(sha256_file(&path).unwrap()), sum);
        let e = sha256_file(&dir.path().join("none")).unwrap_err();
        assert!(e.to_string().starts_with("opening "), "{e}");
    }
}
