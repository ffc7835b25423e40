//! Working files that never take a user's name (issue 31): every name copies (`.linerate-settings`
//! too, pushed and pulled, and deleted by `--delete` like any other); an interrupted copy keeps
//! its partial file in the destination's hidden working directory, which the next run of the same
//! copy empties of what its source no longer has (with or without `--delete`) and removes;
//! `linerate clean` lists and removes what is left; a complete copy leaves no working directory.

use crate::cli::{keygen, serve};
use crate::support::{await_files, exit_within, journaled, noise, work_dirs, work_files};
use std::fs;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_linerate"))
}

fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("linerate-work-test-")
        .tempdir_in("/dev/shm")
        .unwrap_or_else(|_| tempfile::tempdir().unwrap())
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn same(a: &Path, b: &Path) {
    let c = linerate_copy::diff::compare_trees(a, b, true).unwrap();
    assert_eq!(c.count, 0, "{}: {:#?}", b.display(), c.differences);
}

fn run(mut cmd: Command) -> Output {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    assert!(exit_within(&mut child, LIMIT).is_some(), "still running after {LIMIT:?}");
    child.wait_with_output().unwrap()
}

/// `linerate cp --no-save -q EXTRA... SRC DEST`.
fn cp(extra: &[&str], src: &Path, dest: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = bin();
    c.args(["cp", "--no-save", "-q"]).args(extra).arg(src).arg(dest);
    c
}

/// A tree whose names look like the receiver's working files of before, and a file of 3 chunks.
fn awkward_tree(src: &Path) {
    fs::create_dir_all(src.join(".linerate-x")).unwrap();
    fs::write(src.join(".linerate-settings"), b"theme = dark\n").unwrap();
    fs::write(src.join(".linerate-resume-0011223344556677.part"), b"mine").unwrap();
    fs::write(src.join(".linerate-x/.linerate-resume-0011223344556677.journal"), b"also mine").unwrap();
    std::os::unix::fs::symlink(".linerate-settings", src.join(".linerate-tmp-link")).unwrap();
    noise(&src.join("three-chunks"), 3 << 20);
}

#[test]
fn names_like_working_files_copy_pushed_and_pulled_go_with_delete_and_no_working_directory_stays() {
    let t = scratch();
    let p = |s: &str| t.path().join(s);
    let src = p("src");
    awkward_tree(&src);
    // Local (a push through the local server).
    fs::create_dir(p("dest")).unwrap();
    let out = run(cp(&[], &src, p("dest")));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    same(&src, &p("dest/src"));
    assert_eq!(work_dirs(&p("dest")), Vec::<std::path::PathBuf>::new(), "a complete copy leaves no working directory");
    // --delete removes an extra `.linerate-` name like any other.
    fs::write(p("dest/src/.linerate-extra"), b"x").unwrap();
    let out = run(cp(&["--delete"], &src, p("dest")));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!p("dest/src/.linerate-extra").exists(), "--delete kept a .linerate- name");
    same(&src, &p("dest/src"));
    // Pushed to a daemon, then pulled back from it.
    let key = p("key");
    keygen(&key);
    fs::create_dir(p("root")).unwrap();
    let srv = serve(&p("root"), &key);
    let push = {
        let mut c = bin();
        c.args(["cp", "--no-save", "-q", "--key-file"]).arg(&key).arg(&src).arg(format!("{}:pushed", srv.addr));
        c
    };
    let out = run(push);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    same(&src, &p("root/pushed/src"));
    assert_eq!(work_dirs(&p("root")), Vec::<std::path::PathBuf>::new());
    fs::create_dir(p("pulled")).unwrap();
    let mut pull = bin();
    pull.args(["cp", "--no-save", "-q", "--key-file"])
        .arg(&key)
        .arg(format!("{}:pushed/src", srv.addr))
        .arg(p("pulled"));
    let out = run(pull);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    same(&src, &p("pulled/src"));
    assert_eq!(work_dirs(&p("pulled")), Vec::<std::path::PathBuf>::new());
}

/// Start `linerate cp` of `src` into `dest` (paced), wait until a chunk of its large file is
/// journaled in `dest`'s working directory, and interrupt it (SIGINT, exit 130): one partial file
/// and its journal are left there.
fn interrupted_copy(src: &Path, dest: &Path) {
    let mut child = cp(&["--bwlimit", "40M"], src, dest).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let alive = || child.try_wait().unwrap().is_none();
    let found = await_files(&[dest], LIMIT, alive, || journaled(dest));
    if let Some(s) = child.try_wait().unwrap() {
        panic!("ended ({s}) before it could be interrupted: {}", text(&child.wait_with_output().unwrap()));
    }
    assert!(found, "no chunk was ever journaled");
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    assert!(exit_within(&mut child, LIMIT).is_some());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", text(&out));
    let names: Vec<String> =
        work_files(dest).iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(names.iter().filter(|n| n.ends_with(".part")).count(), 1, "{names:?}");
    assert_eq!(names.iter().filter(|n| n.ends_with(".journal")).count(), 1, "{names:?}");
    assert!(names.iter().all(|n| !n.contains("big")), "the user's name is not in a working name: {names:?}");
}

/// A tree with a small file and a 64 MiB one at `big` (a path beneath `src`).
fn tree_with_big(src: &Path, big: &str) {
    fs::create_dir_all(src.join(big).parent().unwrap()).unwrap();
    fs::write(src.join("small"), b"small").unwrap();
    noise(&src.join(big), 64 << 20);
}

/// Interrupt a copy of a tree with a large file at `big`, remove `gone` (that file or a directory
/// above it) from the source, and run the copy again with `extra` flags: it completes, and the
/// partial file and journal are gone, with the working directory.
fn source_gone_after_an_interrupt(big: &str, gone: &str, extra: &[&str]) {
    let t = scratch();
    let (src, dest) = (t.path().join("src"), t.path().join("dest"));
    tree_with_big(&src, big);
    fs::create_dir(&dest).unwrap();
    interrupted_copy(&src, &dest);
    if src.join(gone).is_dir() {
        fs::remove_dir_all(src.join(gone)).unwrap();
    } else {
        fs::remove_file(src.join(gone)).unwrap();
    }
    let out = run(cp(extra, &src, &dest));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    same(&src, &dest.join("src"));
    assert_eq!(work_dirs(&dest), Vec::<std::path::PathBuf>::new(), "the partial file and journal stayed");
}

#[test]
fn the_next_run_removes_the_partial_file_of_a_source_removed_after_an_interrupt() {
    source_gone_after_an_interrupt("big", "big", &[]);
}

#[test]
fn delete_removes_the_partial_files_beneath_a_deleted_directory() {
    // (--delete removes dest/src/sub; `same` checks it is gone.)
    source_gone_after_an_interrupt("sub/big", "sub", &["--delete"]);
}

#[test]
fn clean_lists_then_removes_an_abandoned_partial_file() {
    let t = scratch();
    let (src, dest) = (t.path().join("src"), t.path().join("dest"));
    tree_with_big(&src, "big");
    fs::create_dir(&dest).unwrap();
    interrupted_copy(&src, &dest);
    let clean = |extra: &[&str]| {
        let mut c = bin();
        c.arg("clean").args(extra).arg(t.path());
        run(c)
    };
    // Listed, with what it holds, and kept.
    let out = clean(&["--dry-run"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let listed = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = listed
        .lines()
        .find(|l| l.ends_with(&format!("{}", dest.join("src/big").display())))
        .unwrap_or_else(|| panic!("{listed}"));
    assert!(line.starts_with("would remove") && line.contains(" MB") && line.contains(" s "), "{listed}");
    assert!(
        listed.contains("1 partial file would be removed") && listed.contains("in 1 working directory"),
        "{listed}"
    );
    assert_eq!(work_files(&dest).len(), 3, "a dry run removed something");
    // Younger than a day: kept.
    let out = clean(&["--older-than", "1d"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).lines().any(|l| l.starts_with("kept")), "{}", text(&out));
    assert_eq!(work_files(&dest).len(), 3);
    // Removed, and the working directory with it.
    let out = clean(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("1 partial file removed") && said.contains("1 empty working directory removed"), "{said}");
    assert_eq!(work_dirs(&dest), Vec::<std::path::PathBuf>::new());
    // The copy run again starts the large file afresh and completes.
    let out = run(cp(&[], &src, &dest));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    same(&src, &dest.join("src"));
    // Not a directory: usage.
    let mut c = bin();
    c.arg("clean").arg(src.join("small"));
    assert_eq!(run(c).status.code(), Some(2));
}

#[test]
fn a_destinations_working_directory_is_not_copied_and_one_a_peer_sends_is_not_written() {
    let t = scratch();
    let p = |s: &str| t.path().join(s);
    // `a` is itself a destination: a working directory with a partial file in it.
    fs::create_dir_all(p("a")).unwrap();
    fs::write(p("a/file"), b"data").unwrap();
    let fd = linerate_copy::confined::open_root(&p("a")).unwrap();
    let work = linerate_copy::workdir::find_or_create(&fd).unwrap();
    let work_name = String::from_utf8(work.name.clone()).unwrap();
    fs::write(p("a").join(&work_name).join("0123456789abcdef0123456789abcdef.part"), b"partial").unwrap();
    fs::create_dir(p("b")).unwrap();
    let out = run(cp(&[], &p("a"), p("b")));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(fs::read(p("b/a/file")).unwrap(), b"data");
    assert!(!p("b/a").join(&work_name).exists(), "a working directory was copied");
    // --delete leaves a working directory alone (the next copy into it, or `clean`, empties it).
    fs::write(p("b/a/gone"), b"x").unwrap();
    let b_fd = linerate_copy::confined::open_root(&p("b/a")).unwrap();
    let b_work = linerate_copy::workdir::find_or_create(&b_fd).unwrap();
    let out = run(cp(&["--delete"], &p("a"), p("b")));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!p("b/a/gone").exists());
    assert!(p("b/a").join(String::from_utf8(b_work.name).unwrap()).is_dir(), "--delete removed a working directory");
    // A directory of that form without the marker is no working directory: sent, and the
    // receiver declines to write it (one error, the rest copied).
    let forged = ".linerate-work-00112233445566778899aabbccddeeff";
    fs::create_dir_all(p("c").join(forged)).unwrap();
    fs::write(p("c").join(forged).join("LINERATE-WORKDIR"), b"forged").unwrap();
    fs::write(p("c/ok"), b"ok").unwrap();
    let out = run(cp(&[], &p("c"), p("b")));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("linerate working directory"), "{}", text(&out));
    assert_eq!(fs::read(p("b/c/ok")).unwrap(), b"ok");
    assert!(!p("b/c").join(forged).exists());
}

#[test]
#[ignore = "needs root"]
fn a_large_file_in_a_directory_on_another_mount_is_received_without_resume() {
    crate::support::require_root("a tmpfs mounted in a private mount namespace");
    let t = scratch();
    let (src, dest) = (t.path().join("src"), t.path().join("dest"));
    tree_with_big(&src, "sub/big");
    fs::create_dir_all(dest.join("src/sub")).unwrap();
    // The copy's `src/sub` is another file system than `dest` (where the working directory
    // is): a partial file could not be renamed there, so none is made.
    let script = "mount -t tmpfs -o size=100m tmpfs \"$1\" && \"$2\" cp --no-save -q \"$3\" \"$4\" \
                  && ls -A \"$4\" && ls -A \"$1\"; r=$?; umount \"$1\"; exit $r";
    let mut c = Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "sh", "-c", script, "sh"])
        .arg(dest.join("src/sub"))
        .arg(env!("CARGO_BIN_EXE_linerate"))
        .arg(&src)
        .arg(&dest);
    let out = run(c);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let listed = String::from_utf8_lossy(&out.stdout);
    assert_eq!(listed.lines().collect::<Vec<_>>(), ["src", "big"], "{listed}");
}
