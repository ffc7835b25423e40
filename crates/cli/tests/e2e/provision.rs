//! Nothing to install on the far host (issue 32), against a real sshd in a namespace lab whose
//! user has an empty home and no linerate on its PATH: the first copy uploads this executable
//! and copies, the second runs the cached copy without uploading, a cache made writable by others
//! is refused, `--no-upload` and `LINERATE_NO_UPLOAD` refuse with their message, `linerate cache`
//! lists and removes the remote copy, a host whose `uname -m` says aarch64 is told so, and a
//! linerate on the remote PATH is used when it speaks this protocol and named when it does not.

use crate::support::sshlab::{run_bounded, text, Options, SshLab, HOST};
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(300);

/// A small tree: a nested directory, a 2 MiB file, a symlink.
fn tree(src: &Path) {
    fs::create_dir_all(src.join("d/e")).unwrap();
    crate::support::noise(&src.join("d/e/big.bin"), 2 << 20);
    fs::write(src.join("top.txt"), b"top\n").unwrap();
    std::os::unix::fs::symlink("top.txt", src.join("link")).unwrap();
}

/// `diff -r`: the same names, bytes and link targets.
fn same_tree(a: &Path, b: &Path) {
    let o = std::process::Command::new("diff").arg("-r").arg("--no-dereference").arg(a).arg(b).output().unwrap();
    assert!(o.status.success(), "{} and {} differ: {}", a.display(), b.display(), text(&o));
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(o)))
}

/// The lab user's cache entries: `~/.cache/linerate/*/linerate`.
fn cached(home: &Path) -> Vec<PathBuf> {
    let Ok(rd) = fs::read_dir(home.join(".cache/linerate")) else { return Vec::new() };
    rd.filter_map(|e| e.ok()).map(|e| e.path().join("linerate")).filter(|p| p.is_file()).collect()
}

/// A lab logged into as a fresh user, checked to have no linerate and an empty home.
fn bare_host(remote_path: Option<String>) -> SshLab {
    let lab = SshLab::start_with(Options { user: true, remote_path });
    let home = &lab.user.as_ref().unwrap().home;
    assert_eq!(fs::read_dir(home).unwrap().count(), 0, "the lab user's home is not empty");
    let o = run_bounded(
        {
            let mut c = lab.ssh();
            c.args([HOST, "command -v linerate || echo none"]);
            c
        },
        LIMIT,
    );
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "none", "linerate is on the lab user's PATH: {}", text(&o));
    lab
}

#[test]
#[ignore = "needs root"]
fn cp_uploads_itself_once_to_a_host_with_only_sshd() {
    let lab = bare_host(None);
    let user = lab.user.as_ref().unwrap();
    let src = lab.dir.path().join("src");
    tree(&src);
    let dst = user.home.join("dst");
    fs::create_dir(&dst).unwrap();
    std::os::unix::fs::chown(&dst, Some(user.uid), Some(user.gid)).unwrap();

    // First run: nothing there, so cp uploads itself, then copies.
    let mut c = lab.cp_bare();
    c.arg("--json").arg(&src).arg(format!("{HOST}:dst"));
    let o = run_bounded(c, LIMIT);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    same_tree(&src, &dst.join("src"));
    let j = json(&o);
    let exe_size = fs::metadata(env!("CARGO_BIN_EXE_linerate")).unwrap().len();
    assert_eq!(j["phases"]["remote_linerate"], "uploaded", "{j}");
    assert_eq!(j["phases"]["upload_bytes"], exe_size, "{j}");
    let bins = cached(&user.home);
    assert_eq!(bins.len(), 1, "{bins:?}");
    let bin = &bins[0];
    assert_eq!(fs::read(bin).unwrap(), fs::read(env!("CARGO_BIN_EXE_linerate")).unwrap(), "the cached copy differs");
    // The cache is the user's own, 0700, the file executable by the user alone.
    for p in [user.home.join(".cache"), user.home.join(".cache/linerate"), bin.parent().unwrap().to_path_buf()] {
        let m = fs::metadata(&p).unwrap();
        assert_eq!((m.uid(), m.mode() & 0o777), (user.uid, 0o700), "{}", p.display());
    }
    assert_eq!(fs::metadata(bin).unwrap().mode() & 0o777, 0o700);
    let mtime = fs::metadata(bin).unwrap().mtime_nsec();
    // Nothing else was left in the cache (no temporary upload file).
    assert_eq!(fs::read_dir(bin.parent().unwrap()).unwrap().count(), 1);

    // Second run, a pull through an ssh ControlMaster (--via-ssh: the boot script passes
    // --ssh-loopback on): the cached copy runs, nothing is uploaded.
    let back = lab.dir.path().join("back");
    fs::create_dir(&back).unwrap();
    let mut c = lab.cp_bare();
    c.args(["--json", "--via-ssh"]).arg(format!("{HOST}:dst/src")).arg(&back);
    let o = run_bounded(c, LIMIT);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    same_tree(&src, &back.join("src"));
    let j = json(&o);
    assert_eq!(j["phases"]["remote_linerate"], "cache", "{j}");
    assert_eq!(j["phases"]["upload_bytes"], 0, "{j}");
    assert_eq!(fs::metadata(bin).unwrap().mtime_nsec(), mtime, "the cached copy was written again");

    // A cache directory others may write to is refused: nothing runs from it, nothing is sent.
    let cache = user.home.join(".cache/linerate");
    fs::set_permissions(&cache, fs::Permissions::from_mode(0o777)).unwrap();
    let mut c = lab.cp_bare();
    c.arg(&src).arg(format!("{HOST}:refused"));
    let o = run_bounded(c, LIMIT);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains(&format!("{} is writable by others", cache.display())), "{}", text(&o));
    assert!(!user.home.join("refused").exists());
    fs::set_permissions(&cache, fs::Permissions::from_mode(0o700)).unwrap();

    // `linerate cache` lists and removes the remote copy, through the same ssh.
    let cache_cmd = |args: &[&str]| {
        let mut c = lab.in_client(env!("CARGO_BIN_EXE_linerate"));
        c.arg("cache").args(args).args(["-e", &lab.rsh(), HOST]);
        run_bounded(c, LIMIT)
    };
    let o = cache_cmd(&["list"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains(&bin.parent().unwrap().display().to_string()) && text(&o).contains("1 copy"),
        "{}",
        text(&o)
    );
    let o = cache_cmd(&["clean"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).starts_with("removed"), "{}", text(&o));
    assert!(!cache.exists(), "the cache directory is still there");

    // With the cache gone, --no-upload (or LINERATE_NO_UPLOAD) refuses to send it again.
    let mut c = lab.cp_bare();
    c.arg("--no-upload").arg(&src).arg(format!("{HOST}:dst"));
    let o = run_bounded(c, LIMIT);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("lab has no usable linerate, and --no-upload refuses to send this one"), "{}", text(&o));
    let mut c = lab.cp_bare();
    c.env("LINERATE_NO_UPLOAD", "1").arg(&src).arg(format!("{HOST}:dst"));
    let o = run_bounded(c, LIMIT);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("LINERATE_NO_UPLOAD refuses"), "{}", text(&o));
    assert!(cached(&user.home).is_empty());
}

#[test]
#[ignore = "needs root"]
fn a_host_that_cannot_run_this_build_is_told_what_was_found() {
    // The remote's `uname -m` answers aarch64 (a wrapper first on its PATH).
    let wrap = tempfile::Builder::new().prefix("linerate-foreign-").tempdir().unwrap();
    fs::set_permissions(wrap.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let uname = wrap.path().join("uname");
    fs::write(&uname, "#!/bin/sh\nif [ \"$1\" = -m ]; then echo aarch64; else exec /bin/uname \"$@\"; fi\n").unwrap();
    fs::set_permissions(&uname, fs::Permissions::from_mode(0o755)).unwrap();
    let lab = bare_host(Some(format!("{}:/usr/bin:/bin", wrap.path().display())));
    let user = lab.user.as_ref().unwrap();
    let src = lab.dir.path().join("src");
    tree(&src);
    let mut c = lab.cp_bare();
    c.arg(&src).arg(format!("{HOST}:dst"));
    let o = run_bounded(c, LIMIT);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("lab runs Linux aarch64 with glibc"), "{t}");
    assert!(t.contains(&format!("built for Linux {}", std::env::consts::ARCH)), "{t}");
    assert!(t.contains("cannot run there") && t.contains("--remote-linerate PATH"), "{t}");
    assert_eq!(t.lines().count(), 1, "one message: {t}");
    // Nothing was sent or made there.
    assert!(!user.home.join(".cache").exists() && !user.home.join("dst").exists());
}

#[test]
#[ignore = "needs root"]
fn an_installed_linerate_of_this_protocol_is_used_and_an_older_one_is_named() {
    // A directory on the remote PATH with a `linerate`: first this build, then an old one.
    let bin = tempfile::Builder::new().prefix("linerate-path-").tempdir().unwrap();
    fs::set_permissions(bin.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let installed = bin.path().join("linerate");
    let script = |body: &str| {
        fs::write(&installed, format!("#!/bin/sh\n{body}\n")).unwrap();
        fs::set_permissions(&installed, fs::Permissions::from_mode(0o755)).unwrap();
    };
    script(&format!("exec {} \"$@\"", env!("CARGO_BIN_EXE_linerate")));
    let lab = SshLab::start_with(Options {
        user: true,
        remote_path: Some(format!("{}:/usr/bin:/bin", bin.path().display())),
    });
    let user = lab.user.as_ref().unwrap();
    let src = lab.dir.path().join("src");
    tree(&src);
    let mut c = lab.cp_bare();
    c.arg("--json").arg(&src).arg(format!("{HOST}:"));
    let o = run_bounded(c, LIMIT);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let j = json(&o);
    assert_eq!(j["phases"]["remote_linerate"], "path", "{j}");
    assert_eq!(j["phases"]["upload_bytes"], 0, "{j}");
    same_tree(&src, &user.home.join("src"));
    assert!(!user.home.join(".cache").exists(), "nothing is cached when an installed linerate serves");
    // An older linerate (protocol 1) is not run; with uploads refused, the message names it.
    script("echo LINERATE-PROTOCOL 1 SOFTWARE 0.0.1; exit 0");
    let mut c = lab.cp_bare();
    c.arg("--no-upload").arg(&src).arg(format!("{HOST}:again"));
    let o = run_bounded(c, LIMIT);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains(&format!(
            "the linerate at {} there answered \"LINERATE-PROTOCOL 1 SOFTWARE 0.0.1\"",
            installed.display()
        )),
        "{t}"
    );
    assert!(!user.home.join("again").exists());
}
