//! `linerate cp` over ssh (issue 5) in a two-host namespace lab with a real sshd: push and pull
//! compared byte for byte, `--via-ssh` with the remote listening where only the ssh connection
//! reaches it, the remote's deadline, version and garbage announcements, the secret kept out of
//! argv and output, and a hostile path that would run a command if it went through a shell.

use crate::support::sshlab::{run_bounded, text, SshLab, HOST};
use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

/// A small tree: nested directories, an empty file, a 3 MiB file spread over chunks, a symlink.
fn tree(src: &Path) {
    fs::create_dir_all(src.join("a/b")).unwrap();
    fs::write(src.join("top.txt"), b"top level\n").unwrap();
    fs::write(src.join("a/empty"), b"").unwrap();
    let big: Vec<u8> = (0..3u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    fs::write(src.join("a/b/big.bin"), big).unwrap();
    std::os::unix::fs::symlink("../top.txt", src.join("a/link")).unwrap();
}

/// Every file, directory and link of `a` is in `b` with the same bytes or target.
fn same_tree(a: &Path, b: &Path) {
    for e in fs::read_dir(a).unwrap() {
        let e = e.unwrap();
        let (pa, pb) = (e.path(), b.join(e.file_name()));
        let t = e.file_type().unwrap();
        if t.is_dir() {
            assert!(pb.is_dir(), "{} missing", pb.display());
            same_tree(&pa, &pb);
        } else if t.is_symlink() {
            assert_eq!(fs::read_link(&pa).unwrap(), fs::read_link(&pb).unwrap(), "{}", pb.display());
        } else {
            assert_eq!(fs::read(&pa).unwrap(), fs::read(&pb).unwrap(), "{} differs", pb.display());
        }
    }
}

fn remote(path: &Path) -> String {
    format!("{HOST}:{}", path.display())
}

#[test]
#[ignore = "needs root"]
fn push_over_ssh_copies_the_tree() {
    let lab = SshLab::start();
    let (src, dst) = (lab.dir.path().join("src"), lab.dir.path().join("dst"));
    tree(&src);
    fs::create_dir(&dst).unwrap();
    let mut cmd = lab.cp();
    cmd.arg(&src).arg(remote(&dst)).arg("--json");
    let o = run_bounded(cmd, LIMIT);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    same_tree(&src, &dst.join("src"));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["files"], 3, "{j}");
    assert_eq!(j["complete"], true, "{j}");
    // A single source to a new name takes that name (cp -r rules, as for a daemon).
    let mut cmd = lab.cp();
    cmd.arg(src.join("top.txt")).arg(remote(&dst.join("renamed.txt")));
    let o = run_bounded(cmd, LIMIT);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(fs::read(dst.join("renamed.txt")).unwrap(), b"top level\n");
    // A missing remote parent is a destination error (exit 2), named.
    let mut cmd = lab.cp();
    cmd.arg(&src).arg(remote(&dst.join("no/such/dir")));
    let o = run_bounded(cmd, LIMIT);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("no/such"), "{}", text(&o));
    wait_no_remote(&lab);
}

/// The remote linerates of the lab's server are all gone within a few seconds.
fn wait_no_remote(lab: &SshLab) {
    let running: Vec<u32> = lab.server_pids().into_iter().filter(|p| cmdline(*p).contains("serve --once")).collect();
    let left = crate::support::await_gone(&running, Duration::from_secs(15));
    assert!(left.is_empty(), "remote linerate still running: {left:?}");
}

#[test]
#[ignore = "needs root"]
fn the_remote_ends_when_the_client_is_killed_mid_transfer() {
    let lab = SshLab::start();
    let (src, dst) = (lab.dir.path().join("src"), lab.dir.path().join("dst"));
    fs::create_dir_all(&src).unwrap();
    fs::create_dir(&dst).unwrap();
    for i in 0..16 {
        // Sparse: cheap to make, still 64 MiB each to read, encrypt and send.
        let f = fs::File::create(src.join(format!("f{i:02}"))).unwrap();
        f.set_len(64 << 20).unwrap();
    }
    let mut cmd = lab.cp();
    cmd.arg(&src).arg(remote(&dst)).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    let mut client = cmd.spawn().unwrap();
    // Wait until the session runs (the remote has made the destination directory).
    let alive = || client.try_wait().unwrap().is_none();
    crate::support::await_files(&[&dst], Duration::from_secs(30), alive, || dst.join("src").exists());
    assert!(dst.join("src").exists(), "the copy never started");
    assert!(lab.server_pids().iter().any(|p| cmdline(*p).contains("serve --once")));
    client.kill().unwrap(); // SIGKILL: no chance to clean up
    client.wait().unwrap();
    // The remote's streams break (and ssh, then the remote, see their stdin close): it exits.
    wait_no_remote(&lab);
}

#[test]
#[ignore = "needs root"]
fn pull_over_ssh_copies_the_tree() {
    let lab = SshLab::start();
    let (src, dst) = (lab.dir.path().join("src"), lab.dir.path().join("dst"));
    tree(&src);
    fs::create_dir(&dst).unwrap();
    let mut cmd = lab.cp();
    cmd.arg(remote(&src)).arg(&dst).arg("--json");
    let o = run_bounded(cmd, LIMIT);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    same_tree(&src, &dst.join("src"));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["direction"], "pull", "{j}");
    // A file to a new local name; then the same pull again skips what is unchanged.
    let mut cmd = lab.cp();
    cmd.arg(remote(&src.join("a/b/big.bin"))).arg(dst.join("copy.bin"));
    let o = run_bounded(cmd, LIMIT);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(fs::read(dst.join("copy.bin")).unwrap(), fs::read(src.join("a/b/big.bin")).unwrap());
    let mut cmd = lab.cp();
    cmd.arg(remote(&src)).arg(&dst).arg("--json");
    let o = run_bounded(cmd, LIMIT);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["skipped"]["files"], 3, "{j}");
    // A missing remote source is named, with exit status 2.
    let mut cmd = lab.cp();
    cmd.arg(remote(&src.join("nope"))).arg(&dst);
    let o = run_bounded(cmd, LIMIT);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("nope"), "{}", text(&o));
    wait_no_remote(&lab);
}

#[test]
#[ignore = "needs root"]
fn via_ssh_pulls_too() {
    let lab = SshLab::start();
    let (src, dst) = (lab.dir.path().join("src"), lab.dir.path().join("dst"));
    tree(&src);
    fs::create_dir(&dst).unwrap();
    let mut cmd = lab.cp();
    cmd.args(["--via-ssh", "-P", "2"]).arg(remote(&src)).arg(&dst);
    let o = run_bounded(cmd, LIMIT);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    same_tree(&src, &dst.join("src"));
    assert!(out.contains("--via-ssh: 3 connections carried through ssh"), "{out}");
}

#[test]
#[ignore = "needs root"]
fn a_relative_remote_path_is_under_the_remote_home_and_a_hostile_name_never_meets_a_shell() {
    let lab = SshLab::start();
    // The remote side's working directory, as scp resolves relative paths.
    let o = lab.ssh().args([HOST, "pwd"]).stdin(Stdio::null()).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let home = std::path::PathBuf::from(String::from_utf8(o.stdout).unwrap().trim());
    let src = lab.dir.path().join("src");
    tree(&src);
    // Quotes, spaces, `$(...)`, backticks and `;` in the remote path: a shell (whose working
    // directory is that home) would create the canary.
    let pid = std::process::id();
    let canary = home.join(format!("linerate-sshtest-{pid}-PWNED"));
    let c = canary.file_name().unwrap().to_str().unwrap();
    let name = format!("linerate-sshtest-{pid}-it's a \"dir\" $(touch {c}) `touch {c}`; touch {c}");
    struct Gone(std::path::PathBuf);
    impl Drop for Gone {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0).or_else(|_| fs::remove_file(&self.0));
        }
    }
    let made = Gone(home.join(&name));
    let _canary_gone = Gone(canary.clone());
    let mut cmd = lab.cp();
    cmd.arg(src.join("")).arg(format!("{HOST}:{name}"));
    let o = run_bounded(cmd, LIMIT);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(!canary.exists(), "the path went through a shell");
    same_tree(&src, &made.0);
    // The same hostile name as an absolute path in the scratch directory.
    let abs = lab.dir.path().join(&name);
    let mut cmd = lab.cp();
    cmd.arg(src.join("top.txt")).arg(remote(&abs));
    let o = run_bounded(cmd, LIMIT);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(fs::read(&abs).unwrap(), b"top level\n");
    assert!(!canary.exists(), "the path went through a shell");
}

#[test]
#[ignore = "needs root"]
fn via_ssh_reaches_a_remote_that_listens_on_its_loopback_only() {
    let lab = SshLab::start();
    let (src, dst) = (lab.dir.path().join("src"), lab.dir.path().join("dst"));
    tree(&src);
    fs::create_dir(&dst).unwrap();
    let mut cmd = lab.cp();
    cmd.arg("--via-ssh").arg("-P").arg("3").arg(&src).arg(remote(&dst));
    let o = run_bounded(cmd, LIMIT);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    same_tree(&src, &dst.join("src"));
    // With --via-ssh the remote listens on 127.0.0.1 of the server's namespace, which the
    // client's namespace cannot reach: every stream (control + 3 data) came through the forwarder.
    assert!(out.contains("slower"), "no warning: {out}");
    assert!(out.contains("--via-ssh: 4 connections carried through ssh"), "{out}");
    // Nothing left behind: no ssh master, no control socket directory of ours.
    let left: Vec<u32> = lab.server_pids().into_iter().filter(|p| cmdline(*p).contains("serve")).collect();
    assert!(left.is_empty(), "remote linerate still running: {left:?}");
}

fn cmdline(pid: u32) -> String {
    fs::read(format!("/proc/{pid}/cmdline")).map(|b| String::from_utf8_lossy(&b).replace('\0', " ")).unwrap_or_default()
}

#[test]
#[ignore = "needs root"]
fn the_remote_gives_up_after_its_deadline_and_its_secret_is_not_in_argv() {
    let lab = SshLab::start();
    let mut ssh = lab
        .ssh()
        .args(["-T", HOST, env!("CARGO_BIN_EXE_linerate"), "serve", "--once", "--ssh", "--connect-deadline", "2"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(ssh.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let secret = line.split_whitespace().skip_while(|w| *w != "SECRET").nth(1).unwrap().to_string();
    assert_eq!(secret.len(), 64, "{line}");
    assert!(line.starts_with(&format!("{}PORT ", crate::support::ANNOUNCE)), "{line}");
    assert!(line.contains(" ADDR 198.18.67.2"), "the address from SSH_CONNECTION: {line}");
    // While it waits, no process in the server's namespace carries the secret in its argv.
    let pids = lab.server_pids();
    assert!(pids.iter().any(|p| cmdline(*p).contains("--ssh")), "remote linerate not found");
    for p in pids {
        assert!(!cmdline(p).contains(&secret), "secret in argv of {p}: {}", cmdline(p));
    }
    // Nobody connects: it exits after its deadline with a message, and ssh with it.
    let st = crate::support::exit_within(&mut ssh, Duration::from_secs(20));
    let mut err = String::new();
    std::io::Read::read_to_string(&mut ssh.stderr.take().unwrap(), &mut err).unwrap();
    let st = st.unwrap_or_else(|| panic!("still running 20 s after its 2 s deadline: {err}"));
    assert_eq!(st.code(), Some(3), "{err}");
    assert!(err.contains("no client connected within 2 s"), "{err}");
    assert!(!err.contains(&secret));
}

#[test]
#[ignore = "needs root"]
fn the_secret_stays_out_of_the_clients_output() {
    let lab = SshLab::start();
    let (src, dst) = (lab.dir.path().join("src"), lab.dir.path().join("dst"));
    tree(&src);
    fs::create_dir(&dst).unwrap();
    // An --rsh that keeps a copy of what the remote announced, to learn the secret.
    let seen = lab.dir.path().join("announced");
    let wrapper = lab.dir.path().join("tee-ssh");
    fs::write(
        &wrapper,
        format!("#!/bin/sh\nssh -F '{}' \"$@\" | tee -a '{}'\n", lab.ssh_config.display(), seen.display()),
    )
    .unwrap();
    fs::set_permissions(&wrapper, fs::Permissions::from_mode(0o755)).unwrap();
    let mut cmd = lab.in_client(env!("CARGO_BIN_EXE_linerate"));
    cmd.args(["cp", "--no-save", "--json", "--rsh"]).arg(&wrapper);
    cmd.args(["--remote-linerate", env!("CARGO_BIN_EXE_linerate")]).arg(&src).arg(remote(&dst));
    let o = run_bounded(cmd, LIMIT);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    same_tree(&src, &dst.join("src"));
    let line = fs::read_to_string(&seen).unwrap();
    let secret = line.split_whitespace().skip_while(|w| *w != "SECRET").nth(1).unwrap().to_string();
    assert_eq!(secret.len(), 64, "{line}");
    assert!(!text(&o).contains(&secret), "the secret leaked into the client's output");
    assert!(!lab.sshd_log().contains(&secret));
}

#[test]
#[ignore = "needs root"]
fn a_version_mismatch_and_a_silent_remote_are_named() {
    let lab = SshLab::start();
    let src = lab.dir.path().join("src");
    tree(&src);
    let script = |name: &str, body: &str| {
        let p = lab.dir.path().join(name);
        fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        p
    };
    let cp_with = |remote_bin: &Path| {
        let mut cmd = lab.in_client(env!("CARGO_BIN_EXE_linerate"));
        cmd.args(["cp", "--no-save", "--rsh", &lab.rsh(), "--remote-linerate"]).arg(remote_bin);
        cmd.arg(&src).arg(remote(&lab.dir.path().join("dst")));
        run_bounded(cmd, LIMIT)
    };
    let newer = script("newer", &format!("echo 'LINERATE 999 PORT 1 SECRET {} SOFTWARE 9.9.9'", "ab".repeat(32)));
    let o = cp_with(&newer);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(3), "{out}");
    assert!(out.contains("protocol version 999 (linerate 9.9.9)") && out.contains("speaks version 3"), "{out}");
    assert!(!out.contains(&"ab".repeat(32)), "{out}");
    let chatty = script("chatty", "echo 'Welcome to the lab'; echo 'oops' >&2; exit 7");
    let o = cp_with(&chatty);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(3), "{out}");
    assert!(out.contains("Welcome to the lab") && out.contains("ssh exited with status 7"), "{out}");
    assert!(out.contains("oops"), "ssh's stderr must pass through: {out}");
    let older = script("older", "echo \"error: unexpected argument '--ssh' found\" >&2; exit 2");
    let o = cp_with(&older);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(3), "{out}");
    assert!(out.contains("unexpected argument") && out.contains("status 2") && out.contains("older"), "{out}");
    let o = cp_with(&lab.dir.path().join("not-installed"));
    let out = text(&o);
    assert_eq!(o.status.code(), Some(3), "{out}");
    assert!(out.contains("status 127") && out.contains("--remote-linerate"), "{out}");
}

#[test]
#[ignore = "needs root"]
fn the_remote_exits_when_the_ssh_connection_closes_before_anyone_connects() {
    let lab = SshLab::start();
    let bin = env!("CARGO_BIN_EXE_linerate");
    let mut ssh = lab
        .ssh()
        .args(["-T", HOST, bin, "serve", "--once", "--ssh", "--connect-deadline", "120"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(ssh.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.starts_with("LINERATE "), "{line}");
    drop(ssh.stdin.take()); // what the client's death or a dropped ssh connection looks like
    let st = crate::support::exit_within(&mut ssh, Duration::from_secs(20));
    let mut err = String::new();
    std::io::Read::read_to_string(&mut ssh.stderr.take().unwrap(), &mut err).unwrap();
    let st = st.unwrap_or_else(|| panic!("waited for the deadline instead: {err}"));
    assert_eq!(st.code(), Some(3), "{err}");
    assert!(err.contains("the ssh connection closed"), "{err}");
    wait_no_remote(&lab);
}

/// Not a test but a measurement: rates of a 1 GiB push and pull over the lab's veth (no rate
/// limit, so CPU bound) with `linerate cp` direct, `linerate cp --via-ssh` and `scp -r` (and pulls
/// with linerate and scp), each checked for identical bytes. It exists only with the crate's
/// `measure` feature, so that no test run (`.ci/run`'s `--include-ignored` included) starts it:
/// `cargo test -p linerate --features measure --test e2e ssh::measure -- --ignored --nocapture`
/// (as root); `LINERATE_BIN` names a release build to measure instead of this test's debug binary
/// (for both ends). bench/README.md lists it with the benchmarks.
#[cfg(feature = "measure")]
#[test]
#[ignore = "a measurement, not a test: run it alone (see its doc)"]
fn measure_push_rates() {
    let lab = SshLab::start();
    let bin = std::env::var("LINERATE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_linerate").into());
    let shm = tempfile::Builder::new().prefix("linerate-sshbench-").tempdir_in("/dev/shm").unwrap();
    let src = shm.path().join("src");
    fs::create_dir(&src).unwrap();
    for i in 0..4u8 {
        let chunk: Vec<u8> = (0..1u32 << 20).map(|j| (j.wrapping_mul(2_654_435_761) >> 11) as u8 ^ i).collect();
        let mut f = fs::File::create(src.join(format!("f{i}"))).unwrap();
        for _ in 0..256 {
            std::io::Write::write_all(&mut f, &chunk).unwrap();
        }
    }
    let bytes = 4u64 << 28;
    let run = |name: &str, cmd: std::process::Command, dst: &Path| {
        fs::create_dir_all(dst).unwrap();
        let t0 = std::time::Instant::now();
        let o = run_bounded(cmd, LIMIT * 5);
        let s = t0.elapsed().as_secs_f64();
        assert!(o.status.success(), "{name}: {}", text(&o));
        same_tree(&src, &dst.join("src"));
        eprintln!("{name:>24}: {:6.2} s  {:6.2} Gbit/s", s, bytes as f64 * 8.0 / s / 1e9);
        fs::remove_dir_all(dst).unwrap();
    };
    let cp = |extra: &[&str]| {
        let mut c = lab.in_client(&bin);
        c.args(["cp", "--no-save", "-q", "--rsh", &lab.rsh(), "--remote-linerate", &bin]).args(extra).arg(&src);
        c
    };
    let dst = shm.path().join("dst");
    for _ in 0..2 {
        let mut c = cp(&[]);
        c.arg(remote(&dst));
        run("linerate cp (ssh start)", c, &dst);
        let mut c = cp(&["--via-ssh"]);
        c.arg(remote(&dst));
        run("linerate cp --via-ssh", c, &dst);
        let mut c = lab.in_client("scp");
        c.arg("-F").arg(&lab.ssh_config).args(["-q", "-r"]).arg(&src).arg(remote(&dst));
        run("scp -r", c, &dst);
        let mut c = lab.in_client(&bin);
        c.args(["cp", "--no-save", "-q", "--rsh", &lab.rsh(), "--remote-linerate", &bin]).arg(remote(&src)).arg(&dst);
        run("linerate cp (pull)", c, &dst);
        let mut c = lab.in_client("scp");
        c.arg("-F").arg(&lab.ssh_config).args(["-q", "-r"]).arg(remote(&src)).arg(&dst);
        run("scp -r (pull)", c, &dst);
    }
}

/// The link goes down as soon as the session has made the destination directory (early in the
/// transfer); the client must fail on its stall timeout, and the same command, with the link
/// back, must complete with identical bytes.
#[test]
#[ignore = "needs root"]
fn a_link_cut_mid_push_fails_clearly_and_the_same_command_then_completes() {
    let lab = SshLab::start();
    let (src, dst) = (lab.dir.path().join("src"), lab.dir.path().join("dst"));
    fs::create_dir_all(&src).unwrap();
    fs::create_dir(&dst).unwrap();
    for i in 0..16u8 {
        let f = fs::File::create(src.join(format!("f{i:02}"))).unwrap();
        f.set_len(64 << 20).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, &[i; 4096], 33 << 20).unwrap();
    }
    let cmd = || {
        let mut c = lab.cp();
        c.args(["--stall-timeout", "3"]).arg(&src).arg(remote(&dst));
        c
    };
    let mut client = cmd().stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let alive = || client.try_wait().unwrap().is_none();
    crate::support::await_files(&[&dst], Duration::from_secs(30), alive, || dst.join("src").exists());
    assert!(lab.set_link(false));
    let mut err = String::new();
    std::io::Read::read_to_string(&mut client.stderr.take().unwrap(), &mut err).unwrap();
    let st = client.wait().unwrap();
    if st.success() {
        eprintln!("note: the copy finished before the cut; only the rerun is checked");
    } else {
        assert_eq!(st.code(), Some(3), "{err}");
        assert!(err.contains("for 3 s"), "the stall timeout names the cut: {err}");
    }
    assert!(lab.set_link(true));
    let o = run_bounded(cmd(), LIMIT);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    same_tree(&src, &dst.join("src"));
}

// ---- issue 5 transfers over ssh: resume after SIGKILL of either side and after a cut link,
// ---- skip unchanged, --checksum, --delete and --dry-run.

/// 16 sparse files of 64 MiB with a distinct pattern at several offsets.
fn big_tree(src: &Path) {
    fs::create_dir_all(src).unwrap();
    for i in 0..16u8 {
        let f = fs::File::create(src.join(format!("f{i:02}"))).unwrap();
        f.set_len(64 << 20).unwrap();
        for (k, off) in [0u64, 1 << 20, 33 << 20, (64 << 20) - 4096].into_iter().enumerate() {
            let pat: Vec<u8> = (0..4096).map(|j| (j as u8) ^ i ^ (k as u8 * 37)).collect();
            std::os::unix::fs::FileExt::write_all_at(&f, &pat, off).unwrap();
        }
    }
}

/// Wait until a resume journal with entries exists for the copy landing in `dir` (in the working
/// directory of its parent): the receiver is mid-file.
fn wait_for_journal(dir: &Path, child: &mut std::process::Child) {
    let parent = dir.parent().unwrap_or(dir);
    let journaled = || crate::support::journaled(parent);
    let alive = || child.try_wait().unwrap().is_none();
    let found = crate::support::await_files(&[parent], Duration::from_secs(60), alive, journaled);
    assert!(child.try_wait().unwrap().is_none(), "the copy ended before it could be interrupted");
    assert!(found, "no chunk was ever journaled");
}

/// Run `cmd` with `--json` to its end: it must complete and resume something.
fn rerun_resumes(mut cmd: std::process::Command, src: &Path, dst: &Path) -> serde_json::Value {
    cmd.arg("--json");
    let o = run_bounded(cmd, LIMIT);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    same_tree(src, dst);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(j["resumed_bytes"].as_u64().unwrap() > 0, "nothing was resumed: {j}");
    j
}

#[test]
#[ignore = "needs root"]
fn a_push_killed_on_either_side_resumes_when_run_again() {
    let lab = SshLab::start();
    let (src, dst) = (lab.dir.path().join("src"), lab.dir.path().join("dst"));
    big_tree(&src);
    fs::create_dir(&dst).unwrap();
    let cmd = || {
        let mut c = lab.cp();
        c.args(["--stall-timeout", "5", "-P", "2"]).arg(&src).arg(remote(&dst));
        c
    };
    // 1. SIGKILL of the client.
    let mut client = cmd().stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    wait_for_journal(&dst.join("src"), &mut client);
    client.kill().unwrap();
    client.wait().unwrap();
    wait_no_remote(&lab);
    assert!(!dst.join("src").read_dir().unwrap().any(|e| {
        let n = e.unwrap().file_name().to_string_lossy().into_owned();
        n.starts_with(".linerate-")
    }));
    rerun_resumes(cmd(), &src, &dst.join("src"));
    // 2. SIGKILL of the remote linerate (the receiver).
    fs::remove_dir_all(dst.join("src")).unwrap();
    fs::create_dir(dst.join("src")).unwrap();
    let mut client = cmd().stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    wait_for_journal(&dst.join("src"), &mut client);
    for pid in lab.server_pids().into_iter().filter(|p| cmdline(*p).contains("serve --once")) {
        let p = rustix::process::Pid::from_raw(pid as i32).unwrap();
        rustix::process::kill_process(p, rustix::process::Signal::KILL).unwrap();
    }
    let mut err = String::new();
    std::io::Read::read_to_string(&mut client.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(client.wait().unwrap().code(), Some(3), "{err}");
    assert!(err.contains("server"), "the failure names the server: {err}");
    rerun_resumes(cmd(), &src, &dst.join("src"));
}

#[test]
#[ignore = "needs root"]
fn a_pull_cut_off_by_the_link_resumes_when_run_again() {
    let lab = SshLab::start();
    let (src, here) = (lab.dir.path().join("served"), lab.dir.path().join("here"));
    big_tree(&src);
    fs::create_dir(&here).unwrap();
    let cmd = || {
        let mut c = lab.cp();
        c.args(["--stall-timeout", "3", "-P", "2"]).arg(remote(&src)).arg(&here);
        c
    };
    let mut client = cmd().stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    wait_for_journal(&here.join("served"), &mut client);
    assert!(lab.set_link(false));
    let mut err = String::new();
    std::io::Read::read_to_string(&mut client.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(client.wait().unwrap().code(), Some(3), "{err}");
    assert!(err.contains("silent for 3 s"), "the idle timeout names the cut: {err}");
    assert!(lab.set_link(true));
    let j = rerun_resumes(cmd(), &src, &here.join("served"));
    assert_eq!(j["direction"], "pull");
}

#[test]
#[ignore = "needs root"]
fn sync_over_ssh_skips_unchanged_finds_hidden_changes_with_checksum_and_deletes_extras() {
    let lab = SshLab::start();
    let (src, dst) = (lab.dir.path().join("src"), lab.dir.path().join("dst"));
    tree(&src);
    fs::create_dir(&dst).unwrap();
    let run = |extra: &[&str]| {
        let mut c = lab.cp();
        c.arg("--json").args(extra).arg(&src).arg(remote(&dst));
        let o = run_bounded(c, LIMIT);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        (
            serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    run(&[]);
    let (j, _) = run(&[]);
    assert_eq!((j["files"].as_u64(), j["skipped"]["files"].as_u64()), (Some(0), Some(3)), "{j}");
    // The same size and mtime, other bytes: only --checksum sees it.
    let p = dst.join("src/top.txt");
    let mtime = fs::metadata(&p).unwrap().modified().unwrap();
    fs::write(&p, b"TOP LEVEL\n").unwrap();
    fs::File::options().write(true).open(&p).unwrap().set_modified(mtime).unwrap();
    assert_eq!(run(&[]).0["files"], 0);
    assert_eq!(fs::read(&p).unwrap(), b"TOP LEVEL\n");
    let (j, _) = run(&["--checksum"]);
    assert_eq!(j["files"], 1, "{j}");
    assert_eq!(fs::read(&p).unwrap(), b"top level\n");
    // Extras at the destination: listed by a dry run, removed by --delete, nothing else touched.
    fs::write(dst.join("src/a/extra"), b"x").unwrap();
    fs::write(dst.join("beside"), b"not in the copied tree").unwrap();
    let (j, err) = run(&["--delete", "--dry-run"]);
    assert!(err.contains("would delete src/a/extra"), "{err}");
    assert_eq!(j["deleted"], 1);
    assert!(dst.join("src/a/extra").exists());
    let (j, _) = run(&["--delete"]);
    assert_eq!(j["deleted"], 1);
    assert!(!dst.join("src/a/extra").exists() && dst.join("beside").exists());
    same_tree(&src, &dst.join("src"));
}

/// A scratch directory beneath cargo's target directory, and in it an executable `-e` program
/// (a fake ssh: the remote side's output is what `body` prints, whatever ssh was asked to run).
fn fake_ssh(body: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::Builder::new().prefix("linerate-fakessh-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let p = dir.path().join("ssh");
    fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(dir.path().join("f"), b"x").unwrap();
    (dir, p)
}

/// `linerate cp DIR/f host:dst` through the fake ssh `rsh`, with `flags`.
fn cp_through(dir: &Path, rsh: &Path, flags: &[&str]) -> std::process::Output {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_linerate"));
    cmd.args(["cp", "--no-save", "-q", "--rsh"]).arg(rsh).args(flags).arg(dir.join("f")).arg("host:dst");
    run_bounded(cmd, LIMIT)
}

#[test]
fn a_remote_that_prints_nothing_is_stopped_at_the_first_line_deadline() {
    // Issue 42: a remote that prints nothing and never exits kept cp waiting without end. `exec`:
    // the sleep is the process cp starts, and ends with it.
    let (dir, rsh) = fake_ssh("exec sleep 600");
    let o = cp_through(dir.path(), &rsh, &["--ssh-timeout", "200ms"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(3), "{out}");
    assert!(out.contains("on host printed nothing within 200ms of starting ssh (--ssh-timeout 200ms)"), "{out}");
    assert!(out.contains("ssh was stopped"), "{out}");
}

#[test]
fn a_remote_that_never_announces_itself_is_stopped_at_the_start_up_deadline() {
    let (dir, rsh) = fake_ssh("echo 'Welcome to the lab'; exec sleep 600");
    let o = cp_through(dir.path(), &rsh, &["--ssh-start-timeout", "300ms"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(3), "{out}");
    assert!(out.contains("did not announce itself within 300ms of starting ssh (--ssh-start-timeout 300ms"), "{out}");
    assert!(out.contains("its output began with \"Welcome to the lab\""), "{out}");
    // A zero deadline is no deadline: refused as usage.
    let o = cp_through(dir.path(), &rsh, &["--ssh-timeout", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

#[test]
fn the_remotes_bytes_are_escaped_as_names_are() {
    // Issue 42: bytes that are not UTF-8 showed as U+FFFD, not as SECURITY.md's `\xNN`; a control
    // character in the SOFTWARE of an announce line of another version reached the terminal.
    let (dir, rsh) = fake_ssh(r"printf 'hi \377\376 \033[31mred\n'; exit 7");
    let o = cp_through(dir.path(), &rsh, &[]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(3), "{out}");
    assert!(out.contains(r#"its output began with "hi \xff\xfe \x1b[31mred""#), "{out}");
    assert!(!out.contains('\u{fffd}') && !out.contains('\u{1b}'), "{out}");
    let (dir, rsh) =
        fake_ssh(&format!(r"printf 'LINERATE 999 PORT 1 SECRET {} SOFTWARE \033]0;x\377\n'", "ab".repeat(32)));
    let o = cp_through(dir.path(), &rsh, &[]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(3), "{out}");
    assert!(out.contains(r"protocol version 999 (linerate \x1b]0;x\xff)"), "{out}");
    assert!(!out.contains('\u{fffd}') && !out.contains('\u{1b}'), "{out}");
}

#[test]
fn a_remote_that_stops_reading_the_upload_is_stopped_at_the_stall_timeout() {
    // A probe this build can run on (the facts of this host, as the boot script reports them),
    // then a remote that never reads what it was sent: the upload fills the pipe and stops.
    let (dir, rsh) = fake_ssh(
        "p() { echo \"LINERATE-PROBE $*\"; }; p os \"$(uname -s)\"; p arch \"$(uname -m)\"; \
         p libc \"$(getconf GNU_LIBC_VERSION)\"; p cache /nowhere/linerate/x; p end; exec sleep 600",
    );
    let o = cp_through(dir.path(), &rsh, &["--stall-timeout", "1"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(3), "{out}");
    assert!(out.contains("uploading linerate to host: ssh took no byte for 1s (--stall-timeout); stopped"), "{out}");
}
