//! A closed pipe is a quiet end (issue 31): `cp -n … | head -1`, `cp -v … 2>&1 | head -1`,
//! `bench … | head -1` and `lab up | head -1` with a real pipe whose reader goes away after one
//! line. Each must exit 141 (documented in `linerate cp --help` and docs/USER_GUIDE.md), print
//! no panic, end well within its own timeouts (awaited; the bound only detects a hang), and a
//! copy must leave no half-written file under a final name.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_linerate"))
}

/// Where the child's stderr goes.
enum Err {
    /// Into the same pipe as stdout (`2>&1 | head -1`).
    Joined,
    /// Captured apart, to look for panic text.
    Apart,
}

/// Runs `cmd` with stdout (and, `Joined`, stderr) into a pipe, reads one line as `head -1`
/// does, closes the reader; returns the child and that line. `Apart`: stderr is piped.
fn head_1(mut cmd: Command, err: Err) -> (Child, String) {
    // Close-on-exec: only the child's stdout (and stderr) hold the writer end.
    let (reader, writer) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
    cmd.stdout(writer.try_clone().unwrap());
    match err {
        Err::Joined => cmd.stderr(writer),
        Err::Apart => {
            drop(writer);
            cmd.stderr(Stdio::piped())
        }
    };
    let child = cmd.spawn().unwrap();
    drop(cmd); // the parent's copies of the writer end
    let mut first = String::new();
    let mut r = BufReader::new(std::fs::File::from(reader));
    r.read_line(&mut first).unwrap();
    drop(r); // head -1 is done: the pipe has no reader any more
    (child, first)
}

/// Awaits `child`'s end (the bound only catches a hang) and returns its code and stderr.
fn ended(mut child: Child, limit: Duration, what: &str) -> (Option<i32>, String) {
    let mut err = child.stderr.take();
    let drain = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(e) = err.as_mut() {
            let _ = e.read_to_string(&mut s);
        }
        s
    });
    let status = crate::support::exit_within(&mut child, limit)
        .unwrap_or_else(|| panic!("{what}: still running {limit:?} after its output closed (a hang)"));
    let stderr = drain.join().unwrap();
    assert!(!stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"), "{what}: {stderr}");
    (status.code(), stderr)
}

/// A tree of many small files (many `-v` lines) and a few larger ones.
fn tree(dir: &Path) -> std::path::PathBuf {
    let src = dir.join("src");
    let out = bin()
        .args(["mktree", "--files", "3000", "--min-size", "1k", "--max-size", "64k", "--per-dir", "500"])
        .arg(&src)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    src
}

/// Every regular file beneath `dst` that has a final name (not the receiver's hidden working
/// files) is whole: the same bytes as its source.
fn no_half_written_file(src: &Path, dst: &Path) -> usize {
    let mut whole = 0;
    let mut stack = vec![dst.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            let ty = e.file_type().unwrap();
            if ty.is_dir() {
                stack.push(p);
            } else if ty.is_file() && !name.starts_with(".linerate") {
                let rel = p.strip_prefix(dst).unwrap();
                let want = std::fs::read(src.join(rel)).unwrap();
                assert!(std::fs::read(&p).unwrap() == want, "{} is not whole under its final name", p.display());
                whole += 1;
            }
        }
    }
    whole
}

#[test]
fn cp_dry_run_into_a_closed_pipe_ends_quietly_with_141() {
    let t = tempfile::tempdir().unwrap();
    let src = tree(t.path());
    let mut cmd = bin();
    cmd.args(["cp", "-n", "--no-save"]).arg(&src).arg(t.path().join("dst"));
    cmd.env("LINERATE_DB", t.path().join("runs.sqlite"));
    let (child, first) = head_1(cmd, Err::Apart);
    assert!(first.starts_with("would send "), "{first}");
    let (code, stderr) = ended(child, Duration::from_secs(120), "cp -n | head -1");
    assert_eq!(code, Some(141), "{stderr}");
    assert!(stderr.is_empty(), "a closed pipe is not worth a word: {stderr}");
}

#[test]
fn cp_verbose_with_stderr_into_a_closed_pipe_stops_in_order_with_141() {
    let t = tempfile::tempdir().unwrap();
    let src = tree(t.path());
    let dst = t.path().join("dst");
    let mut cmd = bin();
    cmd.args(["cp", "-v", "--no-save"]).arg(&src).arg(&dst);
    cmd.env("LINERATE_DB", t.path().join("runs.sqlite"));
    let (child, first) = head_1(cmd, Err::Joined);
    assert!(first.contains("src/"), "{first}");
    let (code, _) = ended(child, Duration::from_secs(120), "cp -v 2>&1 | head -1");
    assert_eq!(code, Some(141));
    // What arrived is whole; the same command (output kept) then completes the copy.
    no_half_written_file(&src, &dst.join("src"));
    let again = bin().args(["cp", "-q", "--no-save"]).arg(&src).arg(&dst).output().unwrap();
    assert_eq!(again.status.code(), Some(0), "{}", String::from_utf8_lossy(&again.stderr));
    assert_eq!(no_half_written_file(&src, &dst.join("src")), 3000);
}

#[test]
fn bench_into_a_closed_pipe_stops_at_its_next_interval_with_141() {
    let t = tempfile::tempdir().unwrap();
    let key = t.path().join("key");
    assert!(bin().arg("keygen").arg(&key).status().unwrap().success());
    let mut srv = bin()
        .args(["serve", "--listen", "127.0.0.1:0", "--announce", "--quiet", "--key-file"])
        .arg(&key)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut announce = String::new();
    BufReader::new(srv.stdout.take().unwrap()).read_line(&mut announce).unwrap();
    let addr = announce.trim().rsplit(' ').next().unwrap().to_string();
    let mut cmd = bin();
    // Ten minutes of test: only the closed pipe can end it within the bound below.
    cmd.args(["bench", &addr, "-t", "600", "-i", "0.2", "--no-save", "--key-file"]).arg(&key);
    cmd.env("LINERATE_DB", t.path().join("runs.sqlite"));
    let (child, first) = head_1(cmd, Err::Apart);
    assert!(!first.is_empty());
    let (code, stderr) = ended(child, Duration::from_secs(120), "bench | head -1");
    assert_eq!(code, Some(141), "{stderr}");
    let _ = srv.kill();
    let _ = srv.wait();
}

#[test]
#[ignore = "needs root"]
fn lab_up_into_a_closed_pipe_tears_down_with_141() {
    crate::lab::require_lab();
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("s.toml");
    std::fs::write(&f, linerate_lab::testkit::TWO_HOSTS).unwrap();
    let mut cmd = bin();
    cmd.args(["lab", "up"]).arg(&f);
    let (child, first) = head_1(cmd, Err::Apart);
    let id = first.split_whitespace().nth(1).unwrap_or_default().to_string();
    assert!(id.starts_with("lr") && first.contains(" up"), "{first}");
    // The rest of its lines fit in the pipe: it notices the reader is gone while it waits.
    let (code, stderr) = ended(child, Duration::from_secs(60), "lab up | head -1");
    assert_eq!(code, Some(141), "{stderr}");
    assert!(stderr.contains("torn down"), "{stderr}");
    crate::lab::assert_clean(&id);
}
