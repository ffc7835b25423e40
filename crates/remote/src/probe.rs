//! What the boot script reports when it found nothing to run ([`Probe`]), and the client's
//! decision on it ([`decide`]): send this executable, or refuse, saying why ([`Refusal`]).

use crate::script::PROBE_TAG;
use linerate_proto::name::escape;
use std::fmt;

/// Longest probe value kept, in characters (after escaping).
pub const MAX_VALUE: usize = 300;

/// What the boot script found on the remote when it had nothing to run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Probe {
    /// `uname -s`.
    pub os: String,
    /// `uname -m`.
    pub arch: String,
    /// `glibc 2.36`, `musl libc (x86_64)`, or what `ldd --version` said first.
    pub libc: String,
    /// A `linerate` on the PATH that did not speak this protocol.
    pub found: Option<Found>,
    /// The cache entry's directory when it can be used, else why not.
    pub cache: Option<Result<String, String>>,
    /// Whether a SHA-256 tool was found.
    pub sum: bool,
    /// Set by `end`.
    pub complete: bool,
    /// A failure reported after an upload (`fail ...`).
    pub failed: Option<String>,
}

/// A `linerate` on the remote PATH that does not speak this protocol version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// Where it is.
    pub path: String,
    /// What it answered to `serve --ssh-protocol` (empty: nothing).
    pub said: String,
}

impl Probe {
    /// A new probe (a SHA-256 tool assumed until `nosum` says otherwise).
    pub fn new() -> Probe {
        Probe { sum: true, ..Probe::default() }
    }

    /// Add one `LINERATE-PROBE key value...` line, as the remote's bytes (untrusted: capped,
    /// unknown keys ignored, values escaped as names are, so a byte that is not UTF-8 shows as
    /// `\xNN`). Returns false for a line that is not a probe line.
    pub fn add(&mut self, line: impl AsRef<[u8]>) -> bool {
        let Some(rest) = line.as_ref().trim_ascii_end().strip_prefix(PROBE_TAG.as_bytes()) else { return false };
        let Some(rest) = rest.strip_prefix(b" ") else { return rest.is_empty() };
        let (key, value) = match rest.iter().position(|&b| b == b' ') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, &b""[..]),
        };
        let value: String = escape(value).chars().take(MAX_VALUE).collect();
        match key {
            b"os" => self.os = value,
            b"arch" => self.arch = value,
            b"libc" => self.libc = value,
            b"found" => {
                let (path, said) = value.split_once(' ').unwrap_or((&value, ""));
                self.found = Some(Found { path: path.to_string(), said: said.to_string() });
            }
            b"cache" => self.cache = Some(Ok(value)),
            b"unsafe" => self.cache = Some(Err(value)),
            b"nosum" => self.sum = false,
            b"end" => self.complete = true,
            b"fail" => self.failed = Some(value),
            _ => {}
        }
        true
    }

    /// Whether the script now waits for an answer (`end`) or has given up (`fail`).
    pub fn over(&self) -> bool {
        self.complete || self.failed.is_some()
    }
}

/// May this run upload its executable?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upload {
    /// Yes (the default).
    Allowed,
    /// No: `--no-upload`.
    RefusedByFlag,
    /// No: `LINERATE_NO_UPLOAD` is set.
    RefusedByEnv,
}

impl Upload {
    /// The policy of `--no-upload` (`flag`), then of `LINERATE_NO_UPLOAD`'s value (`env`): set to
    /// anything but empty, `0`, `false`, `no` or `off`, it refuses.
    pub fn of(flag: bool, env: Option<&str>) -> Upload {
        if flag {
            return Upload::RefusedByFlag;
        }
        match env {
            Some(v) if !matches!(v.trim().to_ascii_lowercase().as_str(), "" | "0" | "false" | "no" | "off") => {
                Upload::RefusedByEnv
            }
            _ => Upload::Allowed,
        }
    }
}

/// The local facts [`decide`] compares a probe with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Local {
    /// `uname -m` names of this build's architecture (the first is the one shown).
    pub arch: &'static [&'static str],
    /// The newest glibc version this executable needs (`None`: static).
    pub glibc: Option<(u32, u32)>,
}

impl Local {
    /// This build, with the glibc its executable needs.
    pub fn this(glibc: Option<(u32, u32)>) -> Local {
        Local { arch: uname_names(std::env::consts::ARCH), glibc }
    }
}

/// The names `uname -m` gives for a Rust target architecture (for one not listed, this build's
/// own Rust name).
fn uname_names(arch: &str) -> &'static [&'static str] {
    match arch {
        "x86_64" => &["x86_64", "amd64"],
        "aarch64" => &["aarch64", "arm64"],
        "x86" => &["i386", "i486", "i586", "i686"],
        "riscv64" => &["riscv64"],
        "powerpc64" => &["ppc64le", "ppc64"],
        "s390x" => &["s390x"],
        "loongarch64" => &["loongarch64"],
        "arm" => &["armv7l", "armv6l", "armv8l"],
        _ => &[std::env::consts::ARCH],
    }
}

/// `2.34` (or `2.34.1`: the third part is ignored) as `(2, 34)`.
pub(crate) fn parse_version(s: &str) -> Option<(u32, u32)> {
    let mut parts = s.trim().split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().map_or(Some(0), |m| m.parse().ok())?;
    Some((major, minor))
}

/// Which of the remote's facts rules this build out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mismatch {
    /// Not Linux.
    System,
    /// Another architecture.
    Architecture,
    /// A glibc older than this build needs, or a C library that is not glibc.
    Libc,
}

/// Why this executable is not sent: what the probe said, for the user with what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The script said `fail` (or nothing more) before `end`.
    ProbeCutShort {
        /// An incompatible `linerate` on the remote PATH.
        found: Option<Found>,
    },
    /// The remote cannot run this build.
    Foreign(Box<Foreign>),
    /// `--no-upload` or `LINERATE_NO_UPLOAD`.
    NotAllowed {
        /// Which.
        by: Upload,
        /// This executable's cache entry.
        name: String,
        /// An incompatible `linerate` on the remote PATH.
        found: Option<Found>,
    },
    /// The cache directory (or a parent) is not the user's own or is writable by others.
    UnsafeCache {
        /// The script's words.
        why: String,
    },
    /// The probe said nothing about the cache.
    NoCache,
    /// No `sha256sum`, `shasum` or `openssl` there: nothing would be checked.
    NoSha256Tool,
}

/// A remote that cannot run this build: what it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Foreign {
    /// What rules it out.
    pub mismatch: Mismatch,
    /// `uname -s` there.
    pub os: String,
    /// `uname -m` there.
    pub arch: String,
    /// Its C library.
    pub libc: String,
    /// What this build is for.
    pub local: Local,
    /// An incompatible `linerate` on the remote PATH.
    pub found: Option<Found>,
}

/// Compare a finished probe with this build and the upload policy: `Ok` with the cache
/// directory to send this executable to, or why not.
pub fn decide(p: &Probe, local: &Local, name: &str, upload: Upload) -> Result<String, Refusal> {
    let found = p.found.clone();
    if !p.complete {
        return Err(Refusal::ProbeCutShort { found });
    }
    let libc_ok = match (local.glibc, p.libc.as_str()) {
        (None, _) => true,
        (Some(need), l) => match l.strip_prefix("glibc ").and_then(parse_version) {
            Some(have) => have >= need,
            // musl, uClibc, bionic: not glibc. Anything unrecognised is tried.
            None => !(l.contains("musl") || l.contains("uClibc") || l.contains("bionic")),
        },
    };
    let mismatch = if p.os != "Linux" {
        Some(Mismatch::System)
    } else if !local.arch.contains(&p.arch.as_str()) {
        Some(Mismatch::Architecture)
    } else if !libc_ok {
        Some(Mismatch::Libc)
    } else {
        None
    };
    if let Some(mismatch) = mismatch {
        let (os, arch, libc) = (p.os.clone(), p.arch.clone(), p.libc.clone());
        return Err(Refusal::Foreign(Box::new(Foreign { mismatch, os, arch, libc, local: local.clone(), found })));
    }
    if upload != Upload::Allowed {
        return Err(Refusal::NotAllowed { by: upload, name: name.to_string(), found });
    }
    let dir = match &p.cache {
        Some(Ok(d)) => d.clone(),
        Some(Err(why)) => return Err(Refusal::UnsafeCache { why: why.clone() }),
        None => return Err(Refusal::NoCache),
    };
    if !p.sum {
        return Err(Refusal::NoSha256Tool);
    }
    Ok(dir)
}

impl Refusal {
    /// The message for the user, `host` (escaped) named.
    pub fn on(&self, host: &str) -> impl fmt::Display + '_ {
        On { refusal: self, host: host.to_string() }
    }
}

struct On<'a> {
    refusal: &'a Refusal,
    host: String,
}

/// What was found on the remote PATH, as a clause.
fn found_clause(found: &Option<Found>) -> String {
    let v = linerate_proto::PROTOCOL_VERSION;
    match found {
        Some(Found { path, said }) if said.is_empty() => {
            format!("; the linerate at {path} there does not speak protocol version {v}")
        }
        Some(Found { path, said }) => {
            format!("; the linerate at {path} there answered \"{said}\", not protocol version {v}")
        }
        None => String::new(),
    }
}

impl fmt::Display for On<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = &self.host;
        let version = env!("CARGO_PKG_VERSION");
        let install = format!(
            "install linerate {version} on {host} (for example `cargo install --locked --path crates/cli` from the \
             same source, built there) and run again, or name it with --remote-linerate PATH"
        );
        match self.refusal {
            Refusal::ProbeCutShort { found } => write!(f, "{host} ended its probe early{}", found_clause(found)),
            Refusal::Foreign(foreign) => {
                let Foreign { os, arch, libc, local, found, .. } = &**foreign;
                let shown = local.arch.first().copied().unwrap_or_default();
                let built = match local.glibc {
                    Some((a, b)) => format!("Linux {shown} with glibc {a}.{b} or newer"),
                    None => format!("Linux {shown} (static)"),
                };
                let libc = if libc.is_empty() { "an unknown C library" } else { libc.as_str() };
                let os = if os.is_empty() { "an unknown system" } else { os.as_str() };
                write!(
                    f,
                    "{host} runs {os} {arch} with {libc}, and this linerate is built for {built}, so it cannot run \
                     there{}: {install}",
                    found_clause(found)
                )
            }
            Refusal::NotAllowed { by, name, found } => {
                let by = if *by == Upload::RefusedByEnv { "LINERATE_NO_UPLOAD" } else { "--no-upload" };
                write!(
                    f,
                    "{host} has no usable linerate{}, and {by} refuses to send this one ({name}): {install}, or allow \
                     the upload",
                    found_clause(found)
                )
            }
            Refusal::UnsafeCache { why } => write!(
                f,
                "will not upload linerate to {host}: {why}. Make it the user's own and writable by nobody else \
                 (chmod go-w), or remove it; or {install}"
            ),
            Refusal::NoCache => write!(f, "{host} did not say where its cache is: {install}"),
            Refusal::NoSha256Tool => write!(
                f,
                "{host} has no sha256sum, shasum or openssl to check an upload with (nothing runs unchecked): {install}"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn probe(lines: &[&str]) -> Probe {
        let mut p = Probe::new();
        for l in lines {
            assert!(p.add(l), "{l}");
        }
        p
    }

    const X86: Local = Local { arch: &["x86_64", "amd64"], glibc: Some((2, 34)) };

    fn ok_probe() -> Probe {
        probe(&[
            "LINERATE-PROBE os Linux",
            "LINERATE-PROBE arch x86_64",
            "LINERATE-PROBE libc glibc 2.36",
            "LINERATE-PROBE cache /home/u/.cache/linerate/0.1.0-abcd",
            "LINERATE-PROBE end",
        ])
    }

    fn refused(p: &Probe, local: &Local, upload: Upload, host: &str) -> (Refusal, String) {
        let r = decide(p, local, "0.1.0-abcd", upload).unwrap_err();
        let text = r.on(host).to_string();
        (r, text)
    }

    #[test]
    fn a_compatible_remote_gets_the_upload() {
        let dir = "/home/u/.cache/linerate/0.1.0-abcd".to_string();
        assert_eq!(decide(&ok_probe(), &X86, "0.1.0-abcd", Upload::Allowed), Ok(dir.clone()));
        // The same glibc is enough; a static build needs none.
        let mut p = ok_probe();
        p.libc = "glibc 2.34".into();
        assert_eq!(decide(&p, &X86, "n", Upload::Allowed), Ok(dir.clone()));
        p.libc = "musl libc (x86_64)".into();
        assert_eq!(decide(&p, &Local { glibc: None, ..X86 }, "n", Upload::Allowed), Ok(dir));
    }

    #[test]
    fn a_foreign_remote_is_told_what_was_found_and_what_to_do() {
        let mut p = ok_probe();
        p.arch = "aarch64".into();
        let (r, e) = refused(&p, &X86, Upload::Allowed, "lab");
        assert!(matches!(&r, Refusal::Foreign(f) if f.mismatch == Mismatch::Architecture), "{r:?}");
        assert!(e.contains("lab runs Linux aarch64 with glibc 2.36"), "{e}");
        assert!(e.contains("built for Linux x86_64 with glibc 2.34 or newer"), "{e}");
        assert!(e.contains("--remote-linerate PATH"), "{e}");
        let mut p = ok_probe();
        p.libc = "glibc 2.31".into();
        let (r, e) = refused(&p, &X86, Upload::Allowed, "h");
        assert!(
            matches!(&r, Refusal::Foreign(f) if f.mismatch == Mismatch::Libc) && e.contains("with glibc 2.31"),
            "{e}"
        );
        p.libc = "musl libc (x86_64)".into();
        assert!(refused(&p, &X86, Upload::Allowed, "h").1.contains("musl"));
        let mut p = ok_probe();
        p.os = "FreeBSD".into();
        p.arch = "amd64".into();
        let (r, e) = refused(&p, &X86, Upload::Allowed, "h");
        assert!(
            matches!(&r, Refusal::Foreign(f) if f.mismatch == Mismatch::System) && e.contains("h runs FreeBSD amd64")
        );
        // Foreign is said even when the upload is refused anyway: it is the more useful fact.
        let mut p = ok_probe();
        p.arch = "aarch64".into();
        assert!(refused(&p, &X86, Upload::RefusedByFlag, "h").1.contains("cannot run there"));
        // Nothing known is said as such.
        let (_, e) = refused(&probe(&["LINERATE-PROBE end"]), &X86, Upload::Allowed, "h");
        assert!(e.starts_with("h runs an unknown system  with an unknown C library"), "{e}");
    }

    #[test]
    fn refusals_say_which_switch_and_what_was_found() {
        let mut p = ok_probe();
        assert!(p.add("LINERATE-PROBE found /usr/bin/linerate LINERATE-PROTOCOL 1 SOFTWARE 0.0.9"));
        let (_, e) = refused(&p, &X86, Upload::RefusedByFlag, "h");
        assert!(e.contains("--no-upload refuses") && e.contains("/usr/bin/linerate"), "{e}");
        assert!(e.contains("answered \"LINERATE-PROTOCOL 1 SOFTWARE 0.0.9\""), "{e}");
        let (_, e) = refused(&ok_probe(), &X86, Upload::RefusedByEnv, "h");
        assert!(e.contains("LINERATE_NO_UPLOAD"), "{e}");
        let mut p = ok_probe();
        assert!(p.add("LINERATE-PROBE unsafe /home/u/.cache/linerate is writable by others"));
        let (r, e) = refused(&p, &X86, Upload::Allowed, "h");
        assert!(matches!(r, Refusal::UnsafeCache { .. }), "{r:?}");
        assert!(e.contains("writable by others") && e.contains("will not upload"), "{e}");
        let mut p = ok_probe();
        assert!(p.add("LINERATE-PROBE nosum"));
        assert_eq!(refused(&p, &X86, Upload::Allowed, "h").0, Refusal::NoSha256Tool);
        let mut p = ok_probe();
        p.cache = None;
        assert_eq!(refused(&p, &X86, Upload::Allowed, "h").0, Refusal::NoCache);
        let mut p = ok_probe();
        p.complete = false;
        assert_eq!(refused(&p, &X86, Upload::Allowed, "h").1, "h ended its probe early");
    }

    #[test]
    fn the_upload_policy_is_the_flag_then_the_environment() {
        assert_eq!(Upload::of(true, None), Upload::RefusedByFlag);
        assert_eq!(Upload::of(true, Some("0")), Upload::RefusedByFlag);
        assert_eq!(Upload::of(false, Some("1")), Upload::RefusedByEnv);
        assert_eq!(Upload::of(false, Some(" YES ")), Upload::RefusedByEnv);
        for off in ["", "0", "false", "No", " off "] {
            assert_eq!(Upload::of(false, Some(off)), Upload::Allowed, "{off:?}");
        }
        assert_eq!(Upload::of(false, None), Upload::Allowed);
    }

    #[test]
    fn probe_lines_are_capped_and_others_are_not_probe_lines() {
        let mut p = Probe::new();
        assert!(!p.add("LINERATE 2 PORT 1 SECRET x"));
        assert!(!p.add("Welcome to the server"));
        assert!(!p.add("LINERATE-PROBEX os Linux"));
        assert!(p.add(format!("LINERATE-PROBE os {}", "L".repeat(10_000))));
        assert_eq!(p.os.len(), MAX_VALUE);
        assert!(p.add("LINERATE-PROBE os \u{1b}[31mred"));
        assert!(!p.os.contains('\u{1b}'), "{}", p.os);
    }

    #[test]
    fn probe_bytes_that_are_not_utf8_are_escaped_as_names_are() {
        // Issue 42: they showed as U+FFFD, not as SECURITY.md's `\xNN`.
        let mut p = Probe::new();
        assert!(p.add(b"LINERATE-PROBE fail could not create /home/\xff\xfeu\\x\n"));
        assert_eq!(p.failed.as_deref(), Some(r"could not create /home/\xff\xfeu\\x"));
        assert!(p.add(b"LINERATE-PROBE arch x86\xc3_64"));
        assert_eq!(p.arch, r"x86\xc3_64");
    }

    #[test]
    fn versions_and_architectures() {
        assert_eq!(parse_version("2.34"), Some((2, 34)));
        assert_eq!(parse_version("2.3.4"), Some((2, 3)));
        assert_eq!(parse_version("2"), Some((2, 0)));
        assert_eq!(parse_version("x"), None);
        assert_eq!(uname_names("aarch64"), ["aarch64", "arm64"]);
        assert!(!Local::this(None).arch.is_empty(), "this build has a name uname -m gives");
    }
}
