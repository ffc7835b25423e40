//! Running the same `cp` command again lands exactly where the first run did and resumes or
//! syncs (issue 18), in every mode: local, a daemon push and pull, ssh push and pull, with and
//! without a trailing `/` on the source. Each command runs three times: interrupted with SIGINT
//! (exit 130, one line saying how to resume), to completion, and once more (nothing to send);
//! the destination then holds exactly one copy, no working files, and directories with the
//! source's modes.

use crate::support::noise;
use crate::support::sshlab::{text, SshLab, HOST};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_linerate"))
}

/// 8 files of 3 MB in two directories, a small file, an empty directory; directories 0755.
fn tree(src: &Path) {
    fs::create_dir_all(src.join("sub/deeper")).unwrap();
    fs::create_dir_all(src.join("empty")).unwrap();
    for i in 0..8 {
        let dir = if i % 2 == 0 { src.to_path_buf() } else { src.join("sub") };
        noise(&dir.join(format!("f{i}")), 3_000_000);
    }
    fs::write(src.join("sub/deeper/small"), b"small").unwrap();
    for d in ["", "sub", "sub/deeper", "empty"] {
        fs::set_permissions(src.join(d), fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// Every entry of `a` is in `b` and the reverse, same bytes, and directories with the same mode.
fn same(a: &Path, b: &Path) {
    let c = linerate_copy::diff::compare_trees(a, b, true).unwrap();
    assert_eq!(c.count, 0, "{}: {:#?}", b.display(), c.differences);
    for d in ["", "sub", "sub/deeper", "empty"] {
        let mode = fs::metadata(b.join(d)).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o755, "{}: mode {mode:o}", b.join(d).display());
    }
}

/// Names under `root` that are working files of an unfinished copy.
fn working_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_name().to_string_lossy().starts_with(".linerate-") {
                out.push(e.path());
            }
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            }
        }
    }
    out
}

/// Bytes of regular files under `root`, working files included.
fn bytes_under(root: &Path) -> u64 {
    let mut n = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).into_iter().flatten().flatten() {
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() {
                n += e.metadata().map_or(0, |m| m.len());
            }
        }
    }
    n
}

/// Builds the `cp` command, given extra flags.
type CpFn = dyn Fn(&[&str]) -> Command;

/// One way of running `cp`: the command, where its copy must land, and the directory it
/// writes in (watched for the first bytes, searched for working files).
struct Mode {
    name: &'static str,
    cp: Box<CpFn>,
    landed: PathBuf,
    watch: PathBuf,
}

/// Run `mode` three times (interrupted, completed, again) and check where and what it left.
fn three_runs(mode: &Mode, src: &Path) {
    let name = mode.name;
    // 1. Interrupted: paced so that it is surely mid-copy when the first bytes show.
    let mut child = (mode.cp)(&["--bwlimit", "40M"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let alive = || child.try_wait().unwrap().is_none();
    let arrived = crate::support::await_files(&[&mode.watch], LIMIT, alive, || bytes_under(&mode.watch) >= 1_000_000);
    if let Some(s) = child.try_wait().unwrap() {
        panic!("{name}: ended ({s}) before it could be interrupted: {}", text(&child.wait_with_output().unwrap()));
    }
    assert!(arrived, "{name}: nothing arrived");
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    let out = wait_bounded(child, name);
    assert_eq!(out.status.code(), Some(130), "{name}: {}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    let said: Vec<&str> = err.lines().filter(|l| l.contains("interrupted")).collect();
    assert!(said.len() == 1 && said[0].contains("run the same command to resume"), "{name}: {err}");
    // 2. The same command (unpaced) completes the copy, in the same place.
    let out = wait_bounded((mode.cp)(&["--json"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap(), name);
    assert_eq!(out.status.code(), Some(0), "{name}: {}", text(&out));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        j["skipped"]["files"].as_u64().unwrap() + j["resumed_bytes"].as_u64().unwrap() > 0,
        "{name}: nothing kept: {j}"
    );
    same(src, &mode.landed);
    // 3. Once more: nothing to send, nothing nested.
    let out = wait_bounded((mode.cp)(&["--json"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap(), name);
    assert_eq!(out.status.code(), Some(0), "{name}: {}", text(&out));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((j["files"].as_u64(), j["bytes"].as_u64()), (Some(0), Some(0)), "{name}: sent again: {j}");
    same(src, &mode.landed);
    let src_name = src.file_name().unwrap();
    assert!(!mode.landed.join(src_name).exists(), "{name}: a second copy nested in the first");
    assert_eq!(working_files(&mode.watch), Vec::<PathBuf>::new(), "{name}: working files left");
}

fn wait_bounded(mut child: std::process::Child, name: &str) -> std::process::Output {
    if crate::support::exit_within(&mut child, LIMIT).is_none() {
        panic!("{name}: still running after {LIMIT:?}: {}", text(&child.wait_with_output().unwrap()));
    }
    child.wait_with_output().unwrap()
}

fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("linerate-rerun-")
        .tempdir_in("/dev/shm")
        .unwrap_or_else(|_| tempfile::tempdir().unwrap())
}

#[test]
fn the_same_local_and_daemon_command_lands_in_the_same_place_every_time() {
    let t = scratch();
    let p = |s: &str| t.path().join(s);
    let src = p("src");
    tree(&src);
    fs::create_dir(p("root")).unwrap();
    let key = p("key");
    assert!(bin().arg("keygen").arg(&key).status().unwrap().success());
    let mut srv = bin()
        .args(["serve", "--listen", "127.0.0.1:0", "--announce", "--quiet", "--root"])
        .arg(p("root"))
        .arg("--key-file")
        .arg(&key)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    struct Reap(std::process::Child);
    impl Drop for Reap {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(srv.stdout.take().unwrap()), &mut line).unwrap();
    let srv = Reap(srv);
    let addr = line.trim().rsplit(' ').next().unwrap().to_string();
    // The daemon's tree to pull: a copy made by the first push below.
    let cp = move |args: Vec<String>| {
        move |extra: &[&str]| {
            let mut c = bin();
            c.args(["cp", "--no-save", "-q"]).args(extra).args(&args);
            c
        }
    };
    let s = |x: &Path| x.display().to_string();
    let modes = [
        Mode {
            name: "local dir",
            cp: Box::new(cp(vec![s(&src), s(&p("dst"))])),
            landed: p("dst/src"),
            watch: p("dst"),
        },
        Mode {
            name: "local dir/",
            cp: Box::new(cp(vec![format!("{}/", s(&src)), s(&p("dst2"))])),
            landed: p("dst2"),
            watch: p("dst2"),
        },
        Mode {
            name: "daemon push",
            cp: Box::new(cp(vec!["--key-file".into(), s(&key), s(&src), format!("{addr}:pushed")])),
            landed: p("root/pushed/src"),
            watch: p("root/pushed"),
        },
        Mode {
            name: "daemon pull",
            cp: Box::new(cp(vec!["--key-file".into(), s(&key), format!("{addr}:pushed/src"), s(&p("pulled"))])),
            landed: p("pulled/src"),
            watch: p("pulled"),
        },
        Mode {
            name: "daemon pull dir/",
            cp: Box::new(cp(vec!["--key-file".into(), s(&key), format!("{addr}:pushed/src/"), s(&p("pulled2"))])),
            landed: p("pulled2"),
            watch: p("pulled2"),
        },
    ];
    for m in &modes {
        three_runs(m, &src);
    }
    drop(srv);
}

#[test]
#[ignore = "needs root"]
fn the_same_ssh_command_lands_in_the_same_place_every_time() {
    let lab = SshLab::start();
    let dir = lab.dir.path().to_path_buf();
    let p = |s: &str| dir.join(s);
    let src = p("src");
    tree(&src);
    let s = |x: &Path| x.display().to_string();
    let lab = std::sync::Arc::new(lab);
    let cp = |args: Vec<String>| {
        let lab = lab.clone();
        move |extra: &[&str]| {
            let mut c = lab.cp();
            c.arg("-q").args(extra).args(&args);
            c
        }
    };
    let modes = [
        Mode {
            name: "ssh push",
            cp: Box::new(cp(vec![s(&src), format!("{HOST}:{}", s(&p("remote")))])),
            landed: p("remote/src"),
            watch: p("remote"),
        },
        Mode {
            name: "ssh push dir/",
            cp: Box::new(cp(vec![format!("{}/", s(&src)), format!("{HOST}:{}", s(&p("remote2")))])),
            landed: p("remote2"),
            watch: p("remote2"),
        },
        Mode {
            name: "ssh pull",
            cp: Box::new(cp(vec![format!("{HOST}:{}", s(&src)), s(&p("local"))])),
            landed: p("local/src"),
            watch: p("local"),
        },
    ];
    for m in &modes {
        three_runs(m, &src);
    }
}
