//! Nothing to install on the far host (issue 32): when `cp [user@]host:PATH` finds no usable
//! linerate there, it sends its own executable through the same ssh connection and runs it.
//!
//! One ssh session does everything, with no extra round trip when nothing is sent. Its command
//! is a POSIX `sh` script ([`boot_command`]) that runs, in this order:
//! 1. the copy an earlier run uploaded, `${XDG_CACHE_HOME:-~/.cache}/linerate/<version>-<build
//!    id>/linerate`, when its directories are the user's own and writable by nobody else and its
//!    size is this executable's (its SHA-256 was checked when it was uploaded);
//! 2. a `linerate` on the remote `PATH` that speaks this protocol version
//!    (`linerate serve --ssh-protocol`);
//! 3. else it prints a probe ([`Probe`]: OS, architecture, C library, the cache directory's
//!    state, a SHA-256 tool) and waits for the client's answer ([`decide`]): `UPLOAD <size>
//!    <sha256>` and the bytes, which it writes beneath the cache (created 0700) under a
//!    temporary name it creates exclusively, checks by SHA-256, makes executable, renames into
//!    place and runs; or `QUIT`.
//!
//! `linerate cache clean [HOST]` removes the cache, on this host or through ssh
//! ([`clean_command`], the same script on both).

use anyhow::{anyhow, bail, Context, Result};
use linerate_proto::name::escape;
use object::read::elf::{FileHeader, SectionHeader};
use std::fs::File;
use std::io::{Read, Write};
use std::path::PathBuf;

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

impl Exe {
    /// The running executable.
    pub fn current() -> Result<Exe> {
        let path = PathBuf::from("/proc/self/exe");
        let file = File::open(&path).context("opening this program's executable (/proc/self/exe)")?;
        let size = file.metadata().context("reading this program's size")?.len();
        let ElfFacts { build_id, glibc } = elf_facts(file).context("reading this program's ELF headers")?;
        let id = match build_id {
            Some(id) => id,
            None => sha256_hex(&path)?,
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
fn elf_facts(file: File) -> Result<ElfFacts> {
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

/// `2.34` (or `2.34.1`: the third part is ignored) as `(2, 34)`.
fn parse_version(s: &str) -> Option<(u32, u32)> {
    let mut parts = s.trim().split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().map_or(Some(0), |m| m.parse().ok())?;
    Some((major, minor))
}

/// SHA-256 of a file, hex.
pub fn sha256_hex(path: &std::path::Path) -> Result<String> {
    let mut f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        ctx.update(&buf[..n]);
    }
    Ok(hex::encode(ctx.finish().as_ref()))
}

/// The tag of the script's probe lines.
pub const PROBE_TAG: &str = "LINERATE-PROBE";

/// What `linerate serve --ssh-protocol` prints: the tag and the protocol version.
pub const PROTOCOL_TAG: &str = "LINERATE-PROTOCOL";

/// The boot script (one line, no `'` and no `!`, so any login shell passes it to `sh -c`
/// unchanged: sh, bash, zsh, csh, fish). Arguments: the cache entry's name, the executable's
/// size, this protocol version, then `serve`'s extra arguments.
const BOOT: &str = concat!(
    "umask 077; n=$1; z=$2; pv=$3; shift 3; ",
    "c=${XDG_CACHE_HOME:-$HOME/.cache}; d=$c/linerate; v=$d/$n; b=$v/linerate; bad=; ",
    "p() { echo \"LINERATE-PROBE $*\"; }; ",
    // Each directory is absent, or a directory (the cache's root may be a link to one) owned by
    // this user and writable by nobody else.
    "ok() { for x in \"$@\"; do ",
    "if [ -L \"$x\" ]; then if [ \"$x\" = \"$c\" ]; then :; else bad=\"$x is a symbolic link\"; return 1; fi; fi; ",
    "if [ -d \"$x\" ]; then if [ -O \"$x\" ]; then :; else bad=\"$x is not owned by $(id -un)\"; return 1; fi; ",
    "case $(ls -ldL \"$x\") in ?????w*|????????w*) bad=\"$x is writable by others\"; return 1;; esac; ",
    "elif [ -e \"$x\" ] || [ -L \"$x\" ]; then bad=\"$x is not a directory\"; return 1; fi; done; }; ",
    "s() { (sha256sum \"$1\" || shasum -a 256 \"$1\" || openssl dgst -sha256 -r \"$1\") 2>/dev/null | head -n 1 | cut -d \" \" -f 1; }; ",
    "if [ -f \"$b\" ] && [ -x \"$b\" ] && ok \"$c\" \"$d\" \"$v\" && [ \"$(($(wc -c < \"$b\")+0))\" = \"$z\" ]; then ",
    "p run cache; exec \"$b\" serve --once --ssh \"$@\"; fi; ",
    "l=$(command -v linerate 2>/dev/null); lv=; ",
    "if [ -n \"$l\" ]; then lv=$(\"$l\" serve --ssh-protocol 2>/dev/null | head -n 1); ",
    "case $lv in \"LINERATE-PROTOCOL $pv \"*) p run path \"$l\"; exec \"$l\" serve --once --ssh \"$@\";; esac; fi; ",
    "p os \"$(uname -s)\"; p arch \"$(uname -m)\"; ",
    "lc=$(getconf GNU_LIBC_VERSION 2>/dev/null) || lc=$(ldd --version 2>&1 | head -n 1); p libc \"$lc\"; ",
    "[ -n \"$l\" ] && p found \"$l\" \"$lv\"; ",
    "if ok \"$c\" \"$d\" \"$v\"; then p cache \"$v\"; else p unsafe \"$bad\"; fi; ",
    "[ -n \"$(s /dev/null)\" ] || p nosum; p end; ",
    "read -r cmd z2 h || exit 0; [ \"$cmd\" = UPLOAD ] || exit 0; ",
    "ok \"$c\" \"$d\" \"$v\" || { p fail \"$bad\"; exit 1; }; ",
    "mkdir -p \"$v\" || { p fail \"could not create $v\"; exit 1; }; ",
    "ok \"$c\" \"$d\" \"$v\" || { p fail \"$bad\"; exit 1; }; ",
    "if [ -d \"$b\" ]; then p fail \"$b is a directory\"; exit 1; fi; ",
    "t=$v/.upload-$$; set -C; if : > \"$t\"; then set +C; else p fail \"$t exists\"; exit 1; fi; ",
    "head -c \"$z2\" > \"$t\"; ",
    "if [ \"$(s \"$t\")\" = \"$h\" ]; then :; else rm -f \"$t\"; p fail \"the upload does not match its SHA-256\"; exit 1; fi; ",
    "if chmod 700 \"$t\" && mv -f \"$t\" \"$b\"; then :; else rm -f \"$t\"; p fail \"could not install $b\"; exit 1; fi; ",
    "p run uploaded; exec \"$b\" serve --once --ssh \"$@\""
);

/// The cache script: lists (`$1` = `-n`) or removes (`$1` = `rm`) every entry of the cache
/// (directories named `<version>-<hex>` holding `linerate` and upload leftovers), then the cache
/// directory when empty. Prints `LINERATE-CACHE <bytes> <path>` per entry. Never follows a link
/// and never removes a name it did not make.
const CLEAN: &str = concat!(
    "m=$1; c=${XDG_CACHE_HOME:-$HOME/.cache}; d=$c/linerate; ",
    "if [ -L \"$d\" ]; then echo \"LINERATE-CACHE-SKIP $d is a symbolic link\"; exit 0; fi; ",
    "[ -d \"$d\" ] || exit 0; ",
    "for v in \"$d\"/*; do [ -d \"$v\" ] || continue; [ -L \"$v\" ] && continue; ",
    "case ${v##*/} in [0-9]*-*) ;; *) continue;; esac; ",
    "sz=0; for f in \"$v\"/linerate \"$v\"/.upload-*; do if [ -L \"$f\" ]; then :; elif [ -f \"$f\" ]; then ",
    "sz=$((sz + $(wc -c < \"$f\"))); fi; done; echo \"LINERATE-CACHE $sz $v\"; ",
    "if [ \"$m\" = rm ]; then rm -f \"$v\"/linerate \"$v\"/.upload-*; ",
    "rmdir \"$v\" 2>/dev/null || echo \"LINERATE-CACHE-SKIP $v holds other files\"; fi; done; ",
    "if [ \"$m\" = rm ]; then rmdir \"$d\" 2>/dev/null; fi; exit 0"
);

/// Quote a word for a POSIX shell.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty() && s.bytes().all(|c| c.is_ascii_alphanumeric() || b"_./-+=:,@%".contains(&c)) {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The remote command that runs the cached copy, a compatible `linerate` on the PATH, or probes
/// and waits for an upload. `extra`: further `serve` arguments (`--ssh-loopback`).
pub fn boot_command(exe: &Exe, extra: &[&str]) -> String {
    let mut cmd = format!(
        "exec /bin/sh -c '{BOOT}' linerate-boot {} {} {}",
        shell_quote(&exe.name),
        exe.size,
        linerate_proto::PROTOCOL_VERSION
    );
    for e in extra {
        cmd.push(' ');
        cmd.push_str(&shell_quote(e));
    }
    cmd
}

/// The command that lists (`remove` false) or removes the cache, for `sh -c` locally or as an
/// ssh remote command.
pub fn clean_command(remove: bool) -> (String, String) {
    (CLEAN.to_string(), if remove { "rm".into() } else { "-n".into() })
}

/// The remote command form of [`clean_command`].
pub fn clean_remote_command(remove: bool) -> String {
    let (script, mode) = clean_command(remove);
    format!("exec /bin/sh -c '{script}' linerate-cache {mode}")
}

/// What the boot script found on the remote when it had nothing to run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Probe {
    /// `uname -s`.
    pub os: String,
    /// `uname -m`.
    pub arch: String,
    /// `glibc 2.36`, `musl libc (x86_64)`, or what `ldd --version` said first.
    pub libc: String,
    /// A `linerate` on the PATH that did not speak this protocol: its path and what it said.
    pub found: Option<(String, String)>,
    /// The cache entry's directory when it can be used, else why not.
    pub cache: Option<Result<String, String>>,
    /// Whether a SHA-256 tool was found.
    pub sum: bool,
    /// Set by `end`.
    pub complete: bool,
    /// A failure reported after an upload (`fail ...`).
    pub failed: Option<String>,
}

impl Probe {
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
        let value: String = escape(value).chars().take(300).collect();
        match key {
            b"os" => self.os = value,
            b"arch" => self.arch = value,
            b"libc" => self.libc = value,
            b"found" => {
                let (path, said) = value.split_once(' ').unwrap_or((&value, ""));
                self.found = Some((path.to_string(), said.to_string()));
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

    /// A new probe (a SHA-256 tool assumed until `nosum` says otherwise).
    pub fn new() -> Probe {
        Probe { sum: true, ..Probe::default() }
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

/// The local facts [`decide`] compares a probe with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Local {
    /// `uname -m` names of this build's architecture.
    pub arch: &'static [&'static str],
    /// The newest glibc version this executable needs (`None`: static).
    pub glibc: Option<(u32, u32)>,
}

impl Local {
    /// This build.
    pub fn this(exe: &Exe) -> Local {
        Local { arch: uname_names(std::env::consts::ARCH), glibc: exe.glibc }
    }
}

/// The names `uname -m` gives for a Rust target architecture.
fn uname_names(arch: &'static str) -> &'static [&'static str] {
    match arch {
        "x86_64" => &["x86_64", "amd64"],
        "aarch64" => &["aarch64", "arm64"],
        "x86" => &["i386", "i486", "i586", "i686"],
        "riscv64" => &["riscv64"],
        "powerpc64" => &["ppc64le", "ppc64"],
        "s390x" => &["s390x"],
        "loongarch64" => &["loongarch64"],
        "arm" => &["armv7l", "armv6l", "armv8l"],
        other => std::slice::from_ref(Box::leak(Box::new(other))),
    }
}

/// Why this executable cannot be sent, in words for the user (with what to do).
pub fn decide(p: &Probe, local: &Local, exe_name: &str, host: &str, upload: Upload) -> Result<(), String> {
    let version = env!("CARGO_PKG_VERSION");
    let install = format!(
        "install linerate {version} on {host} (for example `cargo install --locked --path crates/cli` from the same \
         source, built there) and run again, or name it with --remote-linerate PATH"
    );
    let found = match &p.found {
        Some((path, said)) if said.is_empty() => format!(
            "; the linerate at {path} there does not speak protocol version {}",
            linerate_proto::PROTOCOL_VERSION
        ),
        Some((path, said)) => format!(
            "; the linerate at {path} there answered \"{said}\", not protocol version {}",
            linerate_proto::PROTOCOL_VERSION
        ),
        None => String::new(),
    };
    if !p.complete {
        return Err(format!("{host} ended its probe early{found}"));
    }
    let built = match local.glibc {
        Some((a, b)) => format!("Linux {} with glibc {a}.{b} or newer", local.arch[0]),
        None => format!("Linux {} (static)", local.arch[0]),
    };
    let libc_ok = match (local.glibc, p.libc.as_str()) {
        (None, _) => true,
        (Some(need), l) => match l.strip_prefix("glibc ").and_then(parse_version) {
            Some(have) => have >= need,
            // musl, uClibc, bionic: not glibc. Anything unrecognised is tried.
            None => !(l.contains("musl") || l.contains("uClibc") || l.contains("bionic")),
        },
    };
    if p.os != "Linux" || !local.arch.contains(&p.arch.as_str()) || !libc_ok {
        let libc = if p.libc.is_empty() { "an unknown C library".to_string() } else { p.libc.clone() };
        return Err(format!(
            "{host} runs {} {} with {libc}, and this linerate is built for {built}, so it cannot run there{found}: {install}",
            if p.os.is_empty() { "an unknown system" } else { &p.os },
            p.arch
        ));
    }
    match upload {
        Upload::Allowed => {}
        Upload::RefusedByFlag | Upload::RefusedByEnv => {
            let by = if upload == Upload::RefusedByFlag { "--no-upload" } else { "LINERATE_NO_UPLOAD" };
            return Err(format!(
                "{host} has no usable linerate{found}, and {by} refuses to send this one ({exe_name}): {install}, or allow the \
                 upload"
            ));
        }
    }
    match &p.cache {
        Some(Ok(_)) => {}
        Some(Err(why)) => {
            return Err(format!(
                "will not upload linerate to {host}: {why}. Make it the user's own and writable by nobody else (chmod go-w), \
                 or remove it; or {install}"
            ))
        }
        None => return Err(format!("{host} did not say where its cache is: {install}")),
    }
    if !p.sum {
        return Err(format!(
            "{host} has no sha256sum, shasum or openssl to check an upload with (nothing runs unchecked): {install}"
        ));
    }
    Ok(())
}

/// Send `UPLOAD <size> <sha256>` and the executable's bytes to the boot script, calling
/// `progress` with the bytes sent so far (0 once the line is written: hashing the executable
/// first is this side's time, not ssh's). Returns the bytes sent.
pub fn upload(exe: &Exe, to: &mut impl Write, mut progress: impl FnMut(u64)) -> Result<u64> {
    let sum = sha256_hex(&exe.path)?;
    let mut f = File::open(&exe.path).context("opening this program's executable")?;
    writeln!(to, "UPLOAD {} {sum}", exe.size).context("sending to ssh")?;
    progress(0);
    let mut buf = vec![0u8; 256 << 10];
    let mut sent = 0u64;
    while sent < exe.size {
        let want = buf.len().min(usize::try_from(exe.size - sent).unwrap_or(usize::MAX));
        let n = f.read(&mut buf[..want]).context("reading this program's executable")?;
        if n == 0 {
            bail!("this program's executable is shorter than when it was measured ({sent} of {} bytes)", exe.size);
        }
        to.write_all(&buf[..n]).map_err(|e| anyhow!("sending the executable through ssh: {e}"))?;
        sent += n as u64;
        progress(sent);
    }
    to.flush().context("sending to ssh")?;
    Ok(sent)
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

    #[test]
    fn a_compatible_remote_gets_the_upload() {
        assert_eq!(decide(&ok_probe(), &X86, "0.1.0-abcd", "h", Upload::Allowed), Ok(()));
        // The same glibc is enough; a static build needs none.
        let mut p = ok_probe();
        p.libc = "glibc 2.34".into();
        assert_eq!(decide(&p, &X86, "n", "h", Upload::Allowed), Ok(()));
        p.libc = "musl libc (x86_64)".into();
        assert_eq!(decide(&p, &Local { glibc: None, ..X86 }, "n", "h", Upload::Allowed), Ok(()));
    }

    #[test]
    fn a_foreign_remote_is_told_what_was_found_and_what_to_do() {
        let mut p = ok_probe();
        p.arch = "aarch64".into();
        let e = decide(&p, &X86, "n", "lab", Upload::Allowed).unwrap_err();
        assert!(e.contains("lab runs Linux aarch64 with glibc 2.36"), "{e}");
        assert!(e.contains("built for Linux x86_64 with glibc 2.34 or newer"), "{e}");
        assert!(e.contains("--remote-linerate PATH"), "{e}");
        let mut p = ok_probe();
        p.libc = "glibc 2.31".into();
        assert!(decide(&p, &X86, "n", "h", Upload::Allowed).unwrap_err().contains("with glibc 2.31"));
        p.libc = "musl libc (x86_64)".into();
        assert!(decide(&p, &X86, "n", "h", Upload::Allowed).unwrap_err().contains("musl"));
        let mut p = ok_probe();
        p.os = "FreeBSD".into();
        p.arch = "amd64".into();
        assert!(decide(&p, &X86, "n", "h", Upload::Allowed).unwrap_err().contains("h runs FreeBSD amd64"));
        // Foreign is said even when the upload is refused anyway: it is the more useful fact.
        let mut p = ok_probe();
        p.arch = "aarch64".into();
        assert!(decide(&p, &X86, "n", "h", Upload::RefusedByFlag).unwrap_err().contains("cannot run there"));
    }

    #[test]
    fn refusals_say_which_switch_and_what_was_found() {
        let mut p = ok_probe();
        assert!(p.add("LINERATE-PROBE found /usr/bin/linerate LINERATE-PROTOCOL 1 SOFTWARE 0.0.9"));
        let e = decide(&p, &X86, "0.1.0-abcd", "h", Upload::RefusedByFlag).unwrap_err();
        assert!(e.contains("--no-upload refuses") && e.contains("/usr/bin/linerate"), "{e}");
        assert!(e.contains("LINERATE-PROTOCOL 1"), "{e}");
        let e = decide(&ok_probe(), &X86, "n", "h", Upload::RefusedByEnv).unwrap_err();
        assert!(e.contains("LINERATE_NO_UPLOAD"), "{e}");
        let mut p = ok_probe();
        assert!(p.add("LINERATE-PROBE unsafe /home/u/.cache/linerate is writable by others"));
        let e = decide(&p, &X86, "n", "h", Upload::Allowed).unwrap_err();
        assert!(e.contains("writable by others") && e.contains("will not upload"), "{e}");
        let mut p = ok_probe();
        assert!(p.add("LINERATE-PROBE nosum"));
        assert!(decide(&p, &X86, "n", "h", Upload::Allowed).unwrap_err().contains("sha256sum"));
        let mut p = ok_probe();
        p.complete = false;
        assert!(decide(&p, &X86, "n", "h", Upload::Allowed).is_err());
    }

    #[test]
    fn probe_lines_are_capped_and_others_are_not_probe_lines() {
        let mut p = Probe::new();
        assert!(!p.add("LINERATE 2 PORT 1 SECRET x"));
        assert!(!p.add("Welcome to the server"));
        assert!(!p.add("LINERATE-PROBEX os Linux"));
        assert!(p.add(format!("LINERATE-PROBE os {}", "L".repeat(10_000))));
        assert_eq!(p.os.len(), 300);
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
    fn the_scripts_survive_any_login_shell() {
        for s in [BOOT, CLEAN] {
            assert!(!s.contains('\'') && !s.contains('!') && !s.contains('\n') && !s.contains('\\'), "{s}");
        }
        let exe = Exe { path: "/x".into(), size: 10, name: "0.1.0-0123456789abcdef".into(), glibc: None };
        let c = boot_command(&exe, &["--ssh-loopback"]);
        assert!(c.starts_with("exec /bin/sh -c 'umask 077;"), "{c}");
        let tail =
            format!("' linerate-boot 0.1.0-0123456789abcdef 10 {} --ssh-loopback", linerate_proto::PROTOCOL_VERSION);
        assert!(c.ends_with(&tail), "{c}");
    }

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
        assert_eq!(parse_version("2.34"), Some((2, 34)));
        assert_eq!(parse_version("2.3.4"), Some((2, 3)));
        assert_eq!(parse_version("x"), None);
    }

    #[test]
    fn the_upload_is_the_line_then_the_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("exe");
        std::fs::write(&path, b"hello").unwrap();
        let exe = Exe { path: path.clone(), size: 5, name: "n".into(), glibc: None };
        let mut out = Vec::new();
        let mut seen = Vec::new();
        assert_eq!(upload(&exe, &mut out, |n| seen.push(n)).unwrap(), 5);
        let sum = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";
        assert_eq!(out, format!("UPLOAD 5 {sum}\nhello").into_bytes());
        assert_eq!(seen, [0, 5]);
        // A file that shrank since it was measured is not sent as if whole.
        let exe = Exe { size: 9, ..exe };
        assert!(upload(&exe, &mut Vec::new(), |_| {}).is_err());
    }
}
