//! The scripts `cp` runs on the far host through ssh (issue 32): one ssh session does everything,
//! with no extra round trip when nothing is sent. Its command is a POSIX `sh` script
//! ([`boot_command`]) that runs, in this order:
//! 1. the copy an earlier run uploaded, `${XDG_CACHE_HOME:-~/.cache}/linerate/<version>-<build
//!    id>/linerate`, when its directories are the user's own and writable by nobody else and its
//!    size is this executable's (its SHA-256 was checked when it was uploaded);
//! 2. a `linerate` on the remote `PATH` that speaks this protocol version
//!    (`linerate serve --ssh-protocol`);
//! 3. else it prints a probe ([`crate::probe::Probe`]: OS, architecture, C library, the cache
//!    directory's state, a SHA-256 tool) and waits for the client's answer
//!    ([`crate::bootstrap::Bootstrap`]): `UPLOAD <size> <sha256>` and the bytes, which it writes
//!    beneath the cache (created 0700) under a temporary name it creates exclusively, checks by
//!    SHA-256, makes executable, renames into place and runs; or `QUIT`.
//!
//! `linerate cache clean [HOST]` removes the cache, on this host or through ssh
//! ([`clean_command`], the same script on both).

/// The tag of the script's probe lines.
pub const PROBE_TAG: &str = "LINERATE-PROBE";

/// What `linerate serve --ssh-protocol` prints: the tag and the protocol version.
pub const PROTOCOL_TAG: &str = "LINERATE-PROTOCOL";

/// The line `linerate serve --ssh-protocol` prints: [`PROTOCOL_TAG`], this build's protocol
/// version and its software version (`software`, the package's).
pub fn protocol_line(software: &str) -> String {
    format!("{PROTOCOL_TAG} {} SOFTWARE {software}", linerate_proto::PROTOCOL_VERSION)
}

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

/// The remote command that runs the cached copy (`name`: the cache entry's, `size`: this
/// executable's), a compatible `linerate` on the PATH, or probes
/// and waits for an upload. `extra`: further `serve` arguments (`--ssh-loopback`).
pub fn boot_command(name: &str, size: u64, extra: &[&str]) -> String {
    let mut cmd = format!(
        "exec /bin/sh -c '{BOOT}' linerate-boot {} {size} {}",
        shell_quote(name),
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

/// The remote command that runs `program` (`--remote-linerate`, quoted for the remote shell) as
/// the server at once. `extra`: further `serve` arguments.
pub fn serve_command(program: &str, extra: &[&str]) -> String {
    let mut c = format!("{} serve --once --ssh", shell_quote(program));
    for e in extra {
        c.push(' ');
        c.push_str(e);
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boot_script_runs_a_cached_linerate_whose_protocol_line_names_this_version() {
        let line = protocol_line("1.2.3");
        // The script compares the line's start with `LINERATE-PROTOCOL $pv ` ($pv: ours).
        assert!(BOOT.contains(&format!("\"{PROTOCOL_TAG} $pv \"*")), "{BOOT}");
        assert_eq!(line, format!("{PROTOCOL_TAG} {} SOFTWARE 1.2.3", linerate_proto::PROTOCOL_VERSION));
    }

    #[test]
    fn the_scripts_survive_any_login_shell() {
        for s in [BOOT, CLEAN] {
            assert!(!s.contains('\'') && !s.contains('!') && !s.contains('\n') && !s.contains('\\'), "{s}");
        }
        let c = boot_command("0.1.0-0123456789abcdef", 10, &["--ssh-loopback"]);
        assert!(c.starts_with("exec /bin/sh -c 'umask 077;"), "{c}");
        let tail =
            format!("' linerate-boot 0.1.0-0123456789abcdef 10 {} --ssh-loopback", linerate_proto::PROTOCOL_VERSION);
        assert!(c.ends_with(&tail), "{c}");
        assert_eq!(serve_command("/opt/my lr", &["--ssh-loopback"]), "'/opt/my lr' serve --once --ssh --ssh-loopback");
    }

    #[test]
    fn quotes_for_the_remote_shell() {
        assert_eq!(shell_quote("linerate"), "linerate");
        assert_eq!(shell_quote("/opt/lr/bin/linerate"), "/opt/lr/bin/linerate");
        assert_eq!(shell_quote("a b'$(x)"), r"'a b'\''$(x)'");
        assert_eq!(shell_quote(""), "''");
    }
}
