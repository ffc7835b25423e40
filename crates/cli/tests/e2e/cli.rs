//! End-to-end tests of the `linerate` binary.

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use crate::support::noise;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_linerate"))
}

fn scratch() -> tempfile::TempDir {
    if Path::new("/dev/shm").is_dir() {
        if let Ok(t) = tempfile::Builder::new().prefix("linerate-cli-").tempdir_in("/dev/shm") {
            return t;
        }
    }
    tempfile::tempdir().unwrap()
}

fn tree(root: &Path) {
    fs::create_dir_all(root.join("sub/deeper")).unwrap();
    fs::create_dir_all(root.join("empty")).unwrap();
    fs::write(root.join("a.txt"), b"alpha").unwrap();
    fs::write(root.join("sub/b.bin"), vec![7u8; 3 * 1024 * 1024 + 5]).unwrap();
    fs::write(root.join("sub/deeper/c"), b"").unwrap();
    std::os::unix::fs::symlink("sub/b.bin", root.join("link")).unwrap();
}

fn same(a: &Path, b: &Path) {
    let c = linerate_copy::diff::compare_trees(a, b, true).unwrap();
    assert_eq!(c.count, 0, "{:#?}", c.differences);
    assert!(c.files >= 3);
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn local_copy_prints_a_json_summary_with_both_sides() {
    let t = scratch();
    let src = t.path().join("src");
    tree(&src);
    let db = t.path().join("runs.sqlite");
    let spawned = std::time::Instant::now();
    let out = bin()
        .env("LINERATE_DB", &db)
        .args(["cp", "--json", "-P", "3"])
        .arg(src.join(""))
        .arg(t.path().join("dst"))
        .output()
        .unwrap();
    let waited = spawned.elapsed().as_secs_f64();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // the command's timeline (issue 34): consecutive phases that add up to its total, the
    // session's inside `seconds`, and the total inside the process's life as the test saw it
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let t_ = &j["timeline"];
    let phase = |k: &str| t_[k].as_f64().unwrap_or_else(|| panic!("timeline.{k} missing: {j}"));
    let parts = ["start_s", "connect_s", "transfer_s", "finish_s", "close_s", "end_s"].map(phase);
    assert!(parts.iter().all(|p| *p >= 0.0), "{t_}");
    assert!((parts.iter().sum::<f64>() - phase("total_s")).abs() < 1e-6, "{t_}");
    let session = parts[1] + parts[2] + parts[3] + parts[4];
    assert!((session - j["seconds"].as_f64().unwrap()).abs() < 0.01, "session {session} in {j}");
    assert!(phase("transfer_s") > 0.0 && phase("start_s") > 0.0, "{t_}");
    assert!(phase("total_s") <= waited, "total {} > the process's {waited} s", phase("total_s"));
    same(&src, &t.path().join("dst"));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["files"], 3);
    assert_eq!(j["bytes"], 5 + 3 * 1024 * 1024 + 5);
    assert_eq!(j["streams"], 3);
    assert_eq!(j["complete"], true);
    assert!(j["cipher"] == "aes-256-gcm" || j["cipher"] == "chacha20-poly1305");
    assert!(j["seconds"].as_f64().unwrap() > 0.0);
    assert!(j["gbit_per_s"].as_f64().unwrap() > 0.0);
    for side in ["client", "server"] {
        for k in ["user_s", "system_s"] {
            assert!(j["cpu"][side][k].as_f64().is_some(), "cpu.{side}.{k} missing: {j}");
        }
        let rss = j["peak_rss_bytes"][side].as_u64().unwrap();
        assert!(rss > 0 && rss < 256 << 20, "{side} peak RSS {rss}");
    }
    // the run was saved in the store LINERATE_DB names, with the same throughput
    let out = bin().env("LINERATE_DB", &db).args(["report", "list", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let runs: Vec<serde_json::Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["kind"], "cp");
    let saved = runs[0]["headline"]["value"].as_f64().unwrap();
    assert!((saved - j["gbit_per_s"].as_f64().unwrap() * 1e9).abs() < 1.0, "{saved} vs {j}");
}

#[test]
fn a_six_byte_copy_has_no_rate_in_its_summary_json_or_report() {
    // issue 43: `report list` showed `149 bit/s` for a 6-byte copy
    let t = scratch();
    fs::write(t.path().join("six"), b"sixby\n").unwrap();
    let db = t.path().join("runs.sqlite");
    let out =
        bin().env("LINERATE_DB", &db).args(["cp"]).arg(t.path().join("six")).arg(t.path().join("a")).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let line = String::from_utf8_lossy(&out.stderr).lines().find(|l| l.starts_with("1 file, ")).map(str::to_string);
    let line = line.unwrap_or_else(|| panic!("no summary line: {}", text(&out)));
    assert!(line.contains(" 6 B in ") && !line.contains("bit/s") && !line.contains("B/s"), "{line}");
    let out = bin()
        .env("LINERATE_DB", &db)
        .args(["cp", "--json"])
        .arg(t.path().join("six"))
        .arg(t.path().join("b"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["bytes"], 6, "{j}");
    assert!(j.get("gbit_per_s").is_some_and(serde_json::Value::is_null), "a rate for 6 bytes: {j}");
    // both runs were saved, each without a headline rate
    let out = bin().env("LINERATE_DB", &db).args(["report", "list", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let runs: Vec<serde_json::Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert!(runs.iter().all(|r| r["kind"] == "cp" && r["headline"].is_null()), "{runs:?}");
    let out = bin().env("LINERATE_DB", &db).args(["report", "list"]).output().unwrap();
    let list = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(list.lines().count(), 2, "{list}");
    assert!(list.lines().all(|l| l.contains("  cp     ") && l.contains("  -  ") && !l.contains("bit/s")), "{list}");
    let id = runs[1]["id"].as_str().unwrap();
    let out = bin().env("LINERATE_DB", &db).args(["report", "show", id]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let shown = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(!shown.contains("bit/s") && !shown.contains("throughput"), "{shown}");
}

#[test]
fn copies_into_an_existing_directory_under_the_source_name() {
    let t = scratch();
    let src = t.path().join("src");
    tree(&src);
    fs::write(t.path().join("single"), b"one file").unwrap();
    fs::create_dir(t.path().join("into")).unwrap();
    let out = bin()
        .args(["cp", "--no-save", "-q"])
        .arg(&src)
        .arg(t.path().join("single"))
        .arg(t.path().join("into"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    same(&src, &t.path().join("into/src"));
    assert_eq!(fs::read(t.path().join("into/single")).unwrap(), b"one file");
    // Two sources and a destination that does not exist: it is made, and they go in it.
    let out = bin()
        .args(["cp", "--no-save", "-q"])
        .arg(&src)
        .arg(t.path().join("single"))
        .arg(t.path().join("made"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    same(&src, &t.path().join("made/src"));
    assert_eq!(fs::read(t.path().join("made/single")).unwrap(), b"one file");
    // Two sources and a file in the way: refused as a usage error, the file untouched.
    fs::write(t.path().join("afile"), b"keep").unwrap();
    let out = bin()
        .args(["cp", "--no-save", "-q"])
        .arg(&src)
        .arg(t.path().join("single"))
        .arg(t.path().join("afile"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("not a directory"), "{}", text(&out));
    assert_eq!(fs::read(t.path().join("afile")).unwrap(), b"keep");
}

pub(crate) struct Serve {
    child: Child,
    pub(crate) addr: String,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `cmd` (a `serve --announce …`) and reads the address it announces.
fn announced(mut cmd: Command) -> Serve {
    let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let addr = line.trim().rsplit(' ').next().unwrap().to_string();
    assert!(line.starts_with(&format!("{}LISTEN 127.0.0.1:", crate::support::ANNOUNCE)), "{line}");
    Serve { child, addr }
}

pub(crate) fn serve(root: &Path, key: &Path) -> Serve {
    let mut cmd = bin();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--announce", "--quiet", "--root"])
        .arg(root)
        .arg("--key-file")
        .arg(key);
    announced(cmd)
}

pub(crate) fn keygen(path: &Path) {
    let out = bin().arg("keygen").arg(path).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(fs::metadata(path).unwrap().permissions().mode() & 0o777, 0o600);
}

#[test]
fn copies_to_a_running_server_with_a_key_file_and_refuses_a_wrong_key() {
    let t = scratch();
    let (src, root) = (t.path().join("src"), t.path().join("root"));
    tree(&src);
    fs::create_dir(&root).unwrap();
    let (key, other) = (t.path().join("key"), t.path().join("other-key"));
    keygen(&key);
    keygen(&other);
    let srv = serve(&root, &key);
    let dest = format!("{}:copied", srv.addr);
    let out = bin()
        .args(["cp", "--no-save", "-q", "--verify", "--key-file"])
        .arg(&key)
        .arg(src.join(""))
        .arg(&dest)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    same(&src, &root.join("copied"));

    let out = bin()
        .args(["cp", "--no-save", "-q", "--key-file"])
        .arg(&other)
        .arg(&src)
        .arg(format!("{}:again", srv.addr))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(text(&out).contains("authentication failed"), "{}", text(&out));
    assert!(!root.join("again").exists());

    // A remote destination without a key is a usage error.
    let out = bin().args(["cp", "--no-save", "-q"]).arg(&src).arg(format!("{}:x", srv.addr)).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

#[test]
fn pulls_from_a_running_server_then_skips_what_is_there_and_lists_a_dry_run() {
    let t = scratch();
    let root = t.path().join("root");
    tree(&root.join("tree"));
    let key = t.path().join("key");
    keygen(&key);
    let srv = serve(&root, &key);
    let local = t.path().join("local");
    fs::create_dir(&local).unwrap();
    let db = t.path().join("runs.sqlite");
    let pull = |extra: &[&str]| {
        bin()
            .args(["cp", "-q", "--json", "--db"])
            .arg(&db)
            .args(extra)
            .arg("--key-file")
            .arg(&key)
            .arg(format!("{}:tree", srv.addr))
            .arg(&local)
            .output()
            .unwrap()
    };
    let out = pull(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    same(&root.join("tree"), &local.join("tree"));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["direction"], "pull");
    let runs = || {
        let out = bin().args(["report", "list", "--json", "--db"]).arg(&db).output().unwrap();
        String::from_utf8_lossy(&out.stdout).lines().count()
    };
    assert_eq!(runs(), 1, "the copy is saved");
    // The second run finds everything up to date: it changed nothing and is not saved.
    let out = pull(&[]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["files"], 0, "{v}");
    assert!(v["skipped"]["files"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(runs(), 1, "a no-op sync is not a run: {v}");
    let files = v["skipped"]["files"].as_u64().unwrap();
    // A dry run with --delete names the extra local file and keeps it, and counts a changed file
    // as one it would receive, not as up to date; it is never saved.
    fs::write(local.join("tree/extra"), b"x").unwrap();
    fs::write(root.join("tree/a.txt"), b"changed").unwrap();
    let out = pull(&["--dry-run", "--delete"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("would delete tree/extra"), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("would receive tree/a.txt"), "{}", text(&out));
    assert!(local.join("tree/extra").exists());
    assert_eq!(fs::read(local.join("tree/a.txt")).unwrap(), b"alpha", "a dry run changed a file");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((v["dry_run"]["files"].as_u64(), v["dry_run"]["bytes"].as_u64()), (Some(1), Some(7)), "{v}");
    assert_eq!(v["skipped"]["files"].as_u64(), Some(files - 1), "{v}");
    assert_eq!(v["deleted"], 1, "{v}");
    // Without --json the summary line agrees with the listing above it.
    let out = bin()
        .args(["cp", "-n", "--key-file"])
        .arg(&key)
        .arg(format!("{}:tree", srv.addr))
        .arg(&local)
        .arg("--db")
        .arg(&db)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("dry run, nothing changed: would receive 1 file (7 B); {} up to date", files - 1)),
        "{err}"
    );
    assert!(!err.contains("saved as run"), "a dry run was saved: {err}");
    assert_eq!(runs(), 1, "a dry run is not a run");
    // Two remote sources are refused.
    let out = bin()
        .args(["cp", "--no-save", "-q", "--key-file"])
        .arg(&key)
        .arg(format!("{}:tree", srv.addr))
        .arg(format!("{}:tree", srv.addr))
        .arg(&local)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

#[test]
fn refuses_a_key_file_others_can_read() {
    let t = scratch();
    let key = t.path().join("key");
    keygen(&key);
    fs::set_permissions(&key, fs::Permissions::from_mode(0o644)).unwrap();
    let out = bin()
        .args(["serve", "--listen", "127.0.0.1:0", "--root"])
        .arg(t.path())
        .arg("--key-file")
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("chmod 600"), "{}", text(&out));
    // keygen never overwrites.
    let out = bin().arg("keygen").arg(&key).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

/// Run the copy as an unprivileged user when we are root (root reads any file).
fn as_unprivileged(cmd: &mut Command) -> Command {
    let prog = cmd.get_program().to_owned();
    let args: Vec<_> = cmd.get_args().map(|a| a.to_owned()).collect();
    if rustix::process::geteuid().is_root() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]).arg(prog).args(args);
        c
    } else {
        let mut c = Command::new(prog);
        c.args(args);
        c
    }
}

#[test]
fn an_unreadable_file_is_reported_skipped_and_the_rest_copied() {
    let t = scratch();
    fs::set_permissions(t.path(), fs::Permissions::from_mode(0o777)).unwrap();
    let src = t.path().join("src");
    tree(&src);
    fs::write(src.join("locked"), b"no").unwrap();
    fs::set_permissions(src.join("locked"), fs::Permissions::from_mode(0o000)).unwrap();
    for p in ["", "sub", "sub/deeper", "empty"] {
        fs::set_permissions(src.join(p), fs::Permissions::from_mode(0o755)).unwrap();
    }
    let dst = t.path().join("dst");
    // A copy of the binary the unprivileged user can surely reach, wherever the checkout lives.
    let exe = t.path().join("linerate");
    fs::copy(env!("CARGO_BIN_EXE_linerate"), &exe).unwrap();
    fs::set_permissions(&exe, fs::Permissions::from_mode(0o755)).unwrap();
    let out = as_unprivileged(Command::new(&exe).args(["cp", "--no-save", "-q"]).arg(src.join("")).arg(&dst))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let msg = text(&out);
    assert!(msg.contains("locked") && msg.contains("ermission denied"), "{msg}");
    assert!(!dst.join("locked").exists());
    assert_eq!(fs::read(dst.join("a.txt")).unwrap(), b"alpha");
    assert_eq!(fs::read(dst.join("sub/b.bin")).unwrap().len(), 3 * 1024 * 1024 + 5);
}

#[test]
fn names_with_terminal_escapes_are_escaped_in_messages() {
    let t = scratch();
    let src = t.path().join("src");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("evil\x1b[2Jname"), b"x").unwrap();
    // A directory in its way at the destination: the file fails, and its name is printed.
    fs::create_dir_all(t.path().join("dst/src/evil\x1b[2Jname/x")).unwrap();
    let out = bin().args(["cp", "--no-save", "-q"]).arg(&src).arg(t.path().join("dst")).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains('\x1b'), "raw escape printed: {err:?}");
    assert!(err.contains("\\x1b[2Jname"), "{err:?}");
}

#[test]
fn demo_copies_and_verifies_a_sample_tree() {
    let t = scratch();
    let work: PathBuf = t.path().join("demo");
    let out = bin()
        .args(["demo", "--files", "20", "--mean-size", "300000", "--small-files", "200", "--dir"])
        .arg(&work)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("verified: 221 files"), "{}", text(&out));
    assert!(text(&out).contains("bit/s over"), "{}", text(&out));
    assert!(!work.exists(), "demo must clean up");
}

fn serve_bench_only(key: &Path, extra: &[&str]) -> Serve {
    let mut cmd = bin();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--announce", "--quiet", "--key-file"]).arg(key).args(extra);
    announced(cmd)
}

/// A scratch directory, a key in it, and a benchmark-only agent with that key.
fn keyed_agent(extra: &[&str]) -> (tempfile::TempDir, std::path::PathBuf, Serve) {
    let t = scratch();
    let key = t.path().join("key");
    keygen(&key);
    let srv = serve_bench_only(&key, extra);
    (t, key, srv)
}

/// How a one-session agent ended after its session; killed, failing, if it runs a minute more.
fn exit_within_a_minute(agent: &mut std::process::Child, what: &str) -> std::process::ExitStatus {
    crate::support::exit_within(agent, std::time::Duration::from_secs(60))
        .unwrap_or_else(|| panic!("{what} still running a minute after its benchmark session"))
}

#[test]
fn bench_json_iperf3_is_read_where_iperf3s_parsers_look_and_bidir_opens_a_connection_each_way() {
    let (_t, key, srv) = keyed_agent(&[]);
    let bench = |args: &[&str]| {
        bin().args(["bench", &srv.addr, "--no-save", "--key-file"]).arg(&key).args(args).output().unwrap()
    };
    let out = bench(&["--json-iperf3", "-P", "2", "-t", "0.5", "-i", "0.1"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["start"]["test_start"]["protocol"].as_str(), v["start"]["test_start"]["num_streams"].as_u64()),
        (Some("TCP"), Some(2))
    );
    let (sent, got) = (&v["end"]["sum_sent"], &v["end"]["sum_received"]);
    assert!(got["bits_per_second"].as_f64().unwrap() > 1e6 && got["bytes"].as_u64().unwrap() > 0, "{got}");
    assert!(sent["bytes"].as_u64() >= got["bytes"].as_u64(), "sent {sent}, received {got}");
    assert!(v["intervals"].as_array().unwrap().len() >= 3 && v["intervals"][0]["sum"]["bits_per_second"].is_f64());
    assert_eq!(v["end"]["streams"].as_array().unwrap().len(), 2);
    // intervals[].streams: each stream's own interval, as iperf3's client writes it (issue 43)
    let mut moved = [0u64; 2];
    for iv in v["intervals"].as_array().unwrap() {
        let ss = iv["streams"].as_array().unwrap();
        assert_eq!(ss.len(), 2, "{iv}");
        for (k, st) in ss.iter().enumerate() {
            assert_eq!((st["socket"].as_u64(), st["sender"].as_bool()), (Some(k as u64), Some(true)), "{st}");
            assert_eq!((&st["start"], &st["end"]), (&iv["sum"]["start"], &iv["sum"]["end"]), "{iv}");
            moved[k] += st["bytes"].as_u64().unwrap();
        }
    }
    assert!(moved.iter().all(|b| *b > 0), "{moved:?}");
    // iperf3's JSON is one stream test: a repeat or request/response is refused before it runs
    for args in
        [&["--json-iperf3", "--repeat", "2", "-t", "0.2"][..], &["--json-iperf3", "--test", "tcp-rr", "-t", "0.2"]]
    {
        let out = bench(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(String::from_utf8_lossy(&out.stderr).contains("--json-iperf3: iperf3's JSON"), "{}", text(&out));
    }
    // --bidir -P 2: four sockets, two each way, as iperf3's --bidir -P 2 (issue 43)
    let out = bench(&["--json", "--bidir", "-P", "2", "-t", "0.5"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((v["test"]["connections"].as_u64(), v["test"]["each_way"].as_bool()), (Some(2), Some(true)));
    assert_eq!(v["connections"].as_array().unwrap().len(), 4, "{}", v["connections"]);
    assert!(v["summary"]["send_bps"].as_f64().unwrap() > 1e6 && v["summary"]["receive_bps"].as_f64().unwrap() > 1e6);
    // each interval has the four streams, 0 and 1 sending, 2 and 3 receiving
    let (mut sent, mut got) = ([0u64; 4], [0u64; 4]);
    for iv in v["intervals"].as_array().unwrap() {
        let ss = iv["streams"].as_array().unwrap();
        assert_eq!(ss.iter().map(|s| s["id"].as_u64().unwrap()).collect::<Vec<_>>(), [0, 1, 2, 3], "{iv}");
        for (k, st) in ss.iter().enumerate() {
            (sent[k], got[k]) =
                (sent[k] + st["sent_bytes"].as_u64().unwrap(), got[k] + st["received_bytes"].as_u64().unwrap());
        }
    }
    assert!(sent[..2].iter().chain(&got[2..]).all(|b| *b > 0), "sent {sent:?} received {got:?}");
    assert!(sent[2..].iter().chain(&got[..2]).all(|b| *b == 0), "sent {sent:?} received {got:?}");
    // the text: a line per stream and their [SUM] each interval, as iperf3 prints -P
    let out = bench(&["-P", "2", "-t", "0.5", "-i", "0.1"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with('[')).collect();
    let sums: Vec<usize> = (0..lines.len()).filter(|i| lines[*i].starts_with("[SUM] [")).collect();
    assert!(sums.len() >= 4, "{stdout}");
    for i in sums {
        // "[SUM] [  0.10-  0.20 s]  sent …": the streams' lines above it, of the same span
        let span = &lines[i][6..23];
        assert!(i >= 2 && lines[i - 2].starts_with(&format!("[  0] {span}  sent ")), "{stdout}");
        assert!(lines[i - 1].starts_with(&format!("[  1] {span}  sent ")), "{stdout}");
    }
}

/// The rows of an `.hgrm` file (value µs, quantile, count up to it) and its footer's total.
fn hgrm_rows(hgrm: &str) -> (Vec<(f64, f64, u64)>, u64) {
    let mut lines = hgrm.lines();
    assert_eq!(lines.next(), Some("       Value     Percentile TotalCount 1/(1-Percentile)"), "{hgrm}");
    assert_eq!(lines.next(), Some(""), "{hgrm}");
    let mut rows = Vec::new();
    let mut total = None;
    for l in lines {
        if let Some(t) = l.strip_prefix("#[Max     = ") {
            total = t.split("Total count    =").nth(1).and_then(|c| c.trim_end_matches(']').trim().parse().ok());
        } else if !l.starts_with("#[") {
            let w: Vec<&str> = l.split_whitespace().collect();
            assert!(w.len() == 4 || (w.len() == 3 && w[1] == "1.000000000000"), "{l:?}");
            rows.push((w[0].parse().unwrap(), w[1].parse().unwrap(), w[2].parse().unwrap()));
        }
    }
    (rows, total.unwrap_or_else(|| panic!("no total in {hgrm}")))
}

/// Issue 43: `--hgrm` writes the histogram the report's percentiles were read from (every
/// transaction after the warm-up, over both connections): its sample count is the report's, its
/// 50 % row the report's p50 and its last row the max, the report's p99 lies between its rows
/// around 0.99 (no row falls on 0.99 itself: 0.9890625, 0.990625); a profile of two groups adds
/// a file per group; streams, sweeps, repeats and an unwritable path are refused before the
/// test, exit 2, and leave no file.
#[test]
fn bench_hgrm_holds_the_histogram_the_reports_percentiles_come_from() {
    let (t, key, srv) = keyed_agent(&[]);
    let bench = |args: &[&str]| {
        bin().args(["bench", &srv.addr, "--no-save", "-q", "--key-file"]).arg(&key).args(args).output().unwrap()
    };
    let f = t.path().join("rr.hgrm");
    let path = f.to_str().unwrap();
    let out = bench(&["--test", "tcp-rr", "-P", "2", "-t", "1", "-O", "0.3", "--hgrm", path]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report = String::from_utf8(out.stdout).unwrap();
    let line = report.lines().find(|l| l.contains("latency µs")).unwrap_or_else(|| panic!("{report}"));
    let figure = |k: &str| -> &str {
        let at = line.find(&format!(" {k} ")).unwrap_or_else(|| panic!("{k} in {line}")) + k.len() + 2;
        line[at..].split_whitespace().next().unwrap()
    };
    let samples: u64 = line.split('(').nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    let (rows, total) = hgrm_rows(&fs::read_to_string(&f).unwrap());
    assert!(samples > 100 && total == samples, "{total} in the file, {samples} in {line}");
    assert_eq!(rows.last().unwrap().2, total);
    let p50 = rows.iter().find(|r| r.1 == 0.5).unwrap().0;
    assert_eq!(format!("{p50:.1}"), figure("p50"), "{line}");
    assert_eq!(format!("{:.1}", rows.last().unwrap().0), figure("max"), "{line}");
    let p99: f64 = figure("p99").parse().unwrap();
    let below = rows.iter().filter(|r| r.1 <= 0.99).map(|r| r.0).fold(0.0, f64::max);
    let above = rows.iter().filter(|r| r.1 >= 0.99).map(|r| r.0).fold(f64::INFINITY, f64::min);
    assert!(below - 0.05 <= p99 && p99 <= above + 0.05, "p99 {p99} not within the rows' {below} to {above}");
    assert!(rows.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 < w[1].1 && w[0].2 <= w[1].2), "{rows:?}");
    assert_eq!(fs::metadata(&f).unwrap().permissions().mode() & 0o600, 0o600);

    // A profile of two groups: the whole, and each group's (the bulk group's empty).
    let prof = t.path().join("two.toml");
    fs::write(
        &prof,
        "name = \"two\"\n[[group]]\nname = \"probe\"\nconnections = 1\n[[group.transaction]]\n\
         flowops = [{ op = \"write\", size = 64 }, { op = \"read\", size = 64 }]\n\
         [[group]]\nname = \"bulk\"\nconnections = 1\n[[group.transaction]]\nflowops = [{ op = \"write\", size = \"64K\" }]\n",
    )
    .unwrap();
    let pf = t.path().join("two.hgrm");
    let out = bench(&["--profile", prof.to_str().unwrap(), "-t", "1", "--hgrm", pf.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let (_, all) = hgrm_rows(&fs::read_to_string(&pf).unwrap());
    let (_, probe) = hgrm_rows(&fs::read_to_string(t.path().join("two.g1.hgrm")).unwrap());
    let (bulk_rows, bulk) = hgrm_rows(&fs::read_to_string(t.path().join("two.g2.hgrm")).unwrap());
    assert!(all > 0 && all == probe, "{all} in all, {probe} in the probe group");
    assert_eq!((bulk_rows.len(), bulk), (0, 0), "bulk writes are no transactions");

    // Refused before the test, exit 2, nothing written.
    let missing = t.path().join("no/such/dir/x.hgrm");
    let gone = t.path().join("refused.hgrm");
    let no_dir = format!("{}: No such file or directory", missing.parent().unwrap().display());
    for (args, why) in [
        (
            vec!["--test", "tcp-stream", "-t", "0.2", "--hgrm", gone.to_str().unwrap()],
            "a tcp-stream test times no transactions",
        ),
        (vec!["-u", "-t", "0.2", "--hgrm", gone.to_str().unwrap()], "a udp-stream test times no transactions"),
        (
            vec!["--test", "tcp-rr", "--sweep", "msg=1,1K", "--hgrm", gone.to_str().unwrap()],
            "--sweep or --repeat is refused",
        ),
        (vec!["--test", "tcp-rr", "--repeat", "2", "--hgrm", gone.to_str().unwrap()], "--sweep or --repeat is refused"),
        (vec!["--test", "tcp-rr", "--hgrm", missing.to_str().unwrap()], no_dir.as_str()),
        (vec!["--test", "tcp-rr", "--hgrm", t.path().to_str().unwrap()], "is a directory"),
    ] {
        let out = bench(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--hgrm") && err.contains(why), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "refused before anything is printed: {}", text(&out));
    }
    assert!(!gone.exists() && !missing.exists());
}

#[test]
fn bench_prints_the_versioned_json_document_and_csv() {
    let (t, key, srv) = keyed_agent(&[]);
    let out = bin()
        .args(["bench", &srv.addr, "--json", "-t", "0.5", "-i", "0.1", "-P", "3", "--link-rate", "10G", "--key-file"])
        .arg(&key)
        .env("LINERATE_DB", t.path().join("runs.sqlite"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema"], "linerate.bench/1");
    let s = &v["summary"];
    assert!(s["throughput_bps"].as_f64().unwrap() > 1e6, "{s}");
    assert_eq!(s["connections"], 3);
    assert!(s["jain"].as_f64().unwrap() > 0.3);
    for side in ["local", "remote"] {
        let c = &s["cpu"][side];
        let total: f64 =
            ["user", "system", "softirq", "irq", "idle", "steal"].iter().map(|k| c[k].as_f64().unwrap()).sum();
        assert!((total - 1.0).abs() < 1e-6, "{side}: {c}");
    }
    assert!(s["efficiency"]["ceiling_bps"].as_f64().unwrap() > 9e9);
    assert_eq!(v["connections"].as_array().unwrap().len(), 3);
    assert!(v["intervals"].as_array().unwrap().len() >= 4);
    assert!(v["hosts"]["remote"]["kernel"].is_string());
    assert_eq!(v["points"].as_array().unwrap().len(), 1);
    // The run was kept in the store named by LINERATE_DB.
    let list = bin().args(["report", "list", "--json", "--db"]).arg(t.path().join("runs.sqlite")).output().unwrap();
    assert_eq!(list.status.code(), Some(0), "{}", text(&list));
    let runs = String::from_utf8(list.stdout).unwrap();
    let runs: Vec<serde_json::Value> = runs.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["kind"], "bench", "{runs:?}");
    // The user guide's CI recipe, `bench --json > f && report import f`, stores the run once.
    let f = t.path().join("bench.json");
    fs::write(&f, &out.stdout).unwrap();
    let import = bin().args(["report", "import"]).arg(&f).env("LINERATE_DB", t.path().join("runs.sqlite")).output();
    let import = import.unwrap();
    assert_eq!(import.status.code(), Some(0), "{}", text(&import));
    assert_eq!(String::from_utf8_lossy(&import.stdout).trim(), runs[0]["id"].as_str().unwrap());
    assert!(text(&import).contains("already stored as run"), "{}", text(&import));
    let list = bin().args(["report", "list", "--db"]).arg(t.path().join("runs.sqlite")).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&list.stdout).lines().count(), 1, "{}", text(&list));

    let out = bin()
        .args([
            "bench",
            &srv.addr,
            "--csv",
            "--no-save",
            "--test",
            "tcp-rr",
            "-t",
            "0.2",
            "--sweep",
            "msg=1,1K",
            "--key-file",
        ])
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let csv = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(rows.len(), 3, "{csv}");
    assert!(rows[1].starts_with("tcp-rr,send,1,1,") && rows[2].starts_with("tcp-rr,send,1,1024,"), "{csv}");
}

#[test]
fn bench_b_is_per_stream_as_iperf3s_and_zero_t_i_and_b_mean_what_they_mean_there() {
    let (_t, key, srv) = keyed_agent(&["--max-duration", "30"]);
    let bench =
        |args: &[&str]| bin().args(["bench", &srv.addr, "--no-save", "--key-file"]).arg(&key).args(args).output();
    // -P 4 -b 100M: 100 Mbit/s on each stream, ~400 Mbit/s in all (a total would send 100).
    let out = bench(&["--json", "-P", "4", "-b", "100M", "-t", "2"]).unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["test"]["rate"], 400_000_000u64, "{}", v["test"]);
    let bps = v["summary"]["throughput_bps"].as_f64().unwrap();
    assert!((300e6..=430e6).contains(&bps), "-P 4 -b 100M moved {bps} bit/s, not ~400 Mbit/s");
    // Interval entries carry what iperf3's lines do: bytes each side, retransmits and cwnd.
    let first = &v["intervals"][0];
    for k in ["bytes", "sent_bytes", "retransmits", "cwnd_bytes"] {
        assert!(first[k].is_u64(), "{k} missing: {first}");
    }
    assert!(first["cwnd_bytes"].as_u64().unwrap() > 0, "{first}");
    let conns = v["connections"].as_array().unwrap();
    assert_eq!(conns.len(), 4);
    for c in conns {
        let b = c["bps"].as_f64().unwrap();
        assert!((60e6..=110e6).contains(&b), "a stream not near its 100 Mbit/s: {c}");
    }

    // -t 0 runs until Ctrl-C, saying the agent's cap; the result is printed and the exit is 0.
    let mut child = bin()
        .args(["bench", &srv.addr, "--no-save", "-t", "0", "-i", "0.1", "-b", "20M", "--key-file"])
        .arg(&key)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut head = Vec::new();
    for l in lines.by_ref() {
        let l = l.unwrap();
        let interval = l.starts_with('[');
        head.push(l);
        if interval {
            break;
        }
    }
    assert!(head.iter().any(|l| l == "running until Ctrl-C, at most 30 s (the agent's cap)"), "{head:?}");
    assert!(head[0].contains("until Ctrl-C"), "{head:?}");
    crate::lab::sigint(&child);
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    let status = crate::support::exit_within(&mut child, std::time::Duration::from_secs(30)).expect("-t 0 ended");
    assert_eq!(status.code(), Some(0), "{head:?} {rest:?}");
    assert!(rest.iter().any(|l| l.trim_start().starts_with("goodput")), "{rest:?}");

    // -i 0: no interval lines; -b 0: unpaced, and UDP's datagram is the control connection's
    // MSS (loopback's is far over the 1460 bytes of a path without one), said in the banner.
    let out = bench(&["-u", "-b", "0", "-i", "0", "-t", "0.3"]).unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let o = String::from_utf8_lossy(&out.stdout);
    assert!(!o.lines().any(|l| l.starts_with('[')), "-i 0 printed interval lines: {o}");
    let banner = o.lines().next().unwrap();
    assert!(!banner.contains("paced"), "{banner}");
    let size: u32 = banner.split("-byte datagrams").next().unwrap().rsplit(' ').next().unwrap().parse().unwrap();
    assert!(size > 1460, "{banner}");
    // UDP: the receiver's loss per interval, in the JSON and in the lines after the test.
    let out = bench(&["-u", "-b", "50M", "-t", "1", "-i", "0.5", "--json"]).unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["intervals"][0]["lost_pct"].is_f64(), "{}", v["intervals"]);
    // Issue 43: by default no GSO/GRO (one datagram a packet), recorded as such; goodput over
    // the sender's window is what was offered less what was lost.
    assert_eq!(v["test"]["gsro"], false, "{}", v["test"]);
    let s = &v["summary"];
    assert_eq!(s["udp_batching"]["datagrams_per_train"].as_f64(), Some(1.0), "{s}");
    assert!(s["udp_batching"]["datagrams_per_send_call"].as_f64().is_some_and(|n| n >= 1.0), "{s}");
    assert!(s["jitter_us"].is_f64(), "{s}");
    let (got, offered, loss) =
        (s["throughput_bps"].as_f64().unwrap(), s["sender_bps"].as_f64().unwrap(), s["loss_pct"].as_f64().unwrap());
    let want = offered * (1.0 - loss / 100.0);
    assert!((got - want).abs() <= 0.01 * offered, "goodput {got} against offered {offered} less {loss}% lost: {s}");
    // The interface that routes to the agent (loopback) has its packets counted beside.
    assert_eq!(v["hosts"]["local"]["interface_packets"]["name"], "lo", "{}", v["hosts"]["local"]);
    assert!(v["hosts"]["local"]["interface_packets"]["tx_packets"].as_u64().is_some_and(|n| n > 0));
    // --gsro asks both hosts for trains, and the run says how long they were; no jitter then.
    let out = bench(&["-u", "-l", "64", "-b", "0", "-t", "0.3", "--gsro", "--json"]).unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["test"]["gsro"], true, "{}", v["test"]);
    let s = &v["summary"];
    assert!(s["udp_batching"]["datagrams_per_train"].as_f64().is_some_and(|n| n > 1.0), "{s}");
    assert!(s["udp_batching"]["datagrams_per_received_train"].as_f64().is_some(), "the agent's count: {s}");
    assert!(s["jitter_us"].is_null(), "{s}");
    let out = bench(&["-u", "-l", "64", "-b", "0", "-t", "0.3", "--gsro"]).unwrap();
    let o = String::from_utf8_lossy(&out.stdout);
    assert!(o.contains("GSO trains of") && o.contains("jitter not measured"), "{o}");
    assert!(o.lines().any(|l| l.contains("interface") && l.contains("client lo rx")), "{o}");
    let out = bench(&["-u", "-b", "50M", "-t", "1", "-i", "0.5"]).unwrap();
    let o = String::from_utf8_lossy(&out.stdout);
    assert!(o.lines().any(|l| l.contains("server received") && l.contains("lost")), "{o}");
}

#[test]
fn bench_refuses_bad_parameters_with_exit_code_2() {
    let t = scratch();
    let key = t.path().join("key");
    keygen(&key);
    let srv = serve_bench_only(&key, &["--max-connections", "10"]);
    let out =
        bin().args(["bench", &srv.addr, "--no-save", "-P", "11", "-t", "1", "--key-file"]).arg(&key).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("connections 11"), "{}", text(&out));
    let out = bin().args(["bench", &srv.addr, "--no-save", "-t", "-1", "--key-file"]).arg(&key).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    // Refused before anything is printed but the reason; iperf3 habits get a hint.
    for (args, words) in [
        (&["-i", "0.001"][..], "interval 1 ms"),
        (&["-s"][..], "cannot be used with"),
        (&["-1"][..], "add -s to run the agent"),
        (&["-B", "127.0.0.1"][..], "add -s to run the agent"),
        (&["-p", "7000"][..], "give the port once"),
        (&["-6"][..], "no IPv6 address"),
        (&["-C", "nosuchalgo"][..], "sysctl net.ipv4.tcp_available_congestion_control"),
        (&["-C", "bbr;x"][..], "letters, digits"),
        (&["-A", "999"][..], "core 999 does not exist"),
        (&["-M", "40"][..], "MSS 40: must be 88 to 32767"),
        (&["--cport", "65535", "-P", "2"][..], "local ports 65535 to 65536"),
        (&["--dscp", "af44"][..], "a DSCP is 0 to 63"),
    ] {
        let out = bin().args(["bench", &srv.addr, "--no-save", "--key-file"]).arg(&key).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(text(&out).contains(words) && !text(&out).contains(" to 127.0.0.1:"), "{args:?}: {}", text(&out));
    }
    // Issue 42: an instant far ahead waited silently; more than a day ahead is refused before
    // connecting (bounded: before, this waited for the year 3015).
    let mut far = bin();
    far.args(["bench", &srv.addr, "--no-save", "--start-at", "33000000000000", "--key-file"]).arg(&key);
    let out = crate::support::sshlab::run_bounded(far, std::time::Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("at most a day (86400000 ms)"), "{}", text(&out));
    assert!(!text(&out).contains(" to 127.0.0.1:"), "{}", text(&out));
    // iperf3's spelling runs: -c HOST -u -J, and UDP is paced at iperf3's 1 Mbit/s by default.
    let out = bin()
        .args(["bench", "-c", &srv.addr, "-u", "-t", "1", "-J", "--no-save", "--key-file"])
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = &j["summary"];
    let offered = s["sender_bps"].as_f64().unwrap_or_else(|| panic!("{j}"));
    assert!(offered > 0.0 && offered <= 1.1e6, "offered {offered} bit/s: {s}");
    // With -P the text report has a line per connection, as iperf3's.
    let out = bin()
        .args(["bench", &srv.addr, "-P", "3", "-t", "0.5", "-q", "--no-save", "--key-file"])
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let conns = String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.starts_with("  conn ")).count();
    assert_eq!(conns, 3, "the report is on stdout: {}", text(&out));
    // --logfile: the same report appended to a file, nothing on stdout.
    let log = t.path().join("bench.log");
    fs::write(&log, "earlier\n").unwrap();
    let out = bin()
        .args(["bench", &srv.addr, "-4", "-t", "0.3", "--no-save", "-T", "run1", "--timestamps", "--logfile"])
        .arg(&log)
        .arg("--key-file")
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(out.stdout.is_empty(), "{}", text(&out));
    let logged = fs::read_to_string(&log).unwrap();
    assert!(logged.starts_with("earlier\n") && logged.contains("goodput"), "{logged}");
    // -T and --timestamps start every line of the report, as in iperf3.
    for line in logged.lines().skip(1) {
        let (ts, rest) = line.split_once(' ').unwrap_or_else(|| panic!("{line:?}"));
        assert!(ts.ends_with('Z') && ts.starts_with("20") && rest.starts_with("run1:  "), "{line:?}");
    }
    // serve --once ends after one benchmark session, as after one copy.
    let mut once = bin()
        .args(["serve", "--listen", "127.0.0.1:0", "--announce", "--quiet", "--once", "--key-file"])
        .arg(&key)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(once.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let once_addr = line.trim().rsplit(' ').next().unwrap().to_string();
    let out =
        bin().args(["bench", &once_addr, "-t", "0.3", "-q", "--no-save", "--key-file"]).arg(&key).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(exit_within_a_minute(&mut once, "serve --once").code(), Some(0));
    // cp to a benchmark-only agent is refused, not silently accepted.
    let src = t.path().join("f");
    fs::write(&src, b"x").unwrap();
    let out =
        bin().args(["cp", "-q", "--key-file"]).arg(&key).arg(&src).arg(format!("{}:x", srv.addr)).output().unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(text(&out).contains("benchmarks only"), "{}", text(&out));
}

#[test]
fn bench_s_is_the_agent_and_c_p_reaches_it_as_iperf3s_do() {
    let t = scratch();
    let key = t.path().join("key");
    keygen(&key);
    // Client options are the client's: refused with -s, before anything listens.
    let out = bin().args(["bench", "-s", "-P", "4", "--key-file"]).arg(&key).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("cannot be used with"), "{}", text(&out));
    let out = bin().args(["bench", "-s"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("--key-file"), "{}", text(&out));
    // iperf3 -s -1 -B ADDR -p PORT, then iperf3 -c ADDR -p PORT.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port().to_string();
    let mut server = bin()
        .args(["bench", "-s", "-1", "-B", "127.0.0.1", "-p", &port, "--key-file"])
        .arg(&key)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // It says when it listens (its log's first lines); awaited, not polled.
    let mut log = BufReader::new(server.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("listening on") {
        line.clear();
        if log.read_line(&mut line).unwrap() == 0 {
            panic!("bench -s ended before it listened on port {port}: {:?}", server.wait());
        }
    }
    std::thread::spawn(move || std::io::copy(&mut log, &mut std::io::sink()));
    // A probe: a session the agent sees close before its hello; -1 counts only the benchmark.
    drop(std::net::TcpStream::connect(("127.0.0.1", port.parse::<u16>().unwrap())).unwrap());
    let out = bin()
        .args(["bench", "-c", "127.0.0.1", "-p", &port, "-t", "0.3", "-J", "--no-save", "--key-file"])
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["summary"]["throughput_bps"].as_f64().unwrap() > 0.0, "{v}");
    let status = exit_within_a_minute(&mut server, "bench -s -1");
    assert_eq!(status.code(), Some(0), "{:?}", server.wait_with_output().unwrap());
}

#[test]
fn bench_with_a_byte_count_sends_that_much_and_stops() {
    let (_t, key, srv) = keyed_agent(&[]);
    let mut cmd = bin();
    cmd.args(["bench", &srv.addr, "-n", "10M", "-t", "60", "-P", "2", "-C", "reno", "-M", "1000", "--dscp", "af11"])
        .args(["-J", "--no-save", "--key-file"])
        .arg(&key);
    // -t 60 is a cap: the byte count ends it well before (killed, and failed, past 20 s).
    let out = crate::support::sshlab::run_bounded(cmd, std::time::Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(0), "-t is a cap: {}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let moved: u64 = v["connections"].as_array().unwrap().iter().map(|c| c["bytes"].as_u64().unwrap()).sum();
    assert_eq!(moved, 10 << 20, "{}", v["connections"]);
    // The document says how the test was run, so a saved run compares only with its likes.
    let t = &v["test"];
    assert_eq!((t["bytes"].as_u64(), t["congestion"].as_str()), (Some(10 << 20), Some("reno")), "{t}");
    assert_eq!((t["mss"].as_u64(), t["tos"].as_u64()), (Some(1000), Some(10 << 2)), "{t}");
    let out = bin().args(["bench", &srv.addr, "-n", "1M", "--bidir", "--no-save", "--key-file"]).arg(&key).output();
    let out = out.unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("tcp-stream one way"), "{}", text(&out));
}

#[test]
fn serve_data_ports_carry_the_benchmark_data_and_a_bad_range_is_refused() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let range = format!("{port}-{}", port.saturating_add(3));
    let (_t, key, srv) = keyed_agent(&["--data-ports", &range]);
    let bench = ["bench", &srv.addr, "-P", "2", "-t", "0.3", "-q", "--no-save", "--key-file"];
    let out = bin().args(bench).arg(&key).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = bin().args(["serve", "--data-ports", "10-5", "--key-file"]).arg(&key).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("LOW-HIGH"), "{}", text(&out));
}

/// Random bytes, so nothing on the way can make them smaller.
#[test]
fn bwlimit_paces_the_copy_and_progress_lists_escaped_names() {
    let t = scratch();
    let src = t.path().join("src");
    fs::create_dir(&src).unwrap();
    noise(&src.join("big"), 20_000_000);
    fs::write(src.join("tab\there\x1b[1m"), b"small").unwrap();
    // 64 Mbit/s = 8 MB/s: 20 MB take 2.5 s; the first burst (256 KiB) goes at once.
    let start = std::time::Instant::now();
    let out = bin()
        .args(["cp", "--no-save", "--bwlimit", "64M", "--progress", "-v", "-P", "3"])
        .arg(src.join(""))
        .arg(t.path().join("dst"))
        .output()
        .unwrap();
    let took = start.elapsed().as_secs_f64();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(fs::read(t.path().join("dst/tab\there\x1b[1m")).unwrap(), b"small");
    let expect = (20_000_005.0 - 262_144.0) / 8e6;
    assert!(took >= 0.8 * expect, "{took:.2} s for 20 MB at 64 Mbit/s: not paced (expected about {expect:.2} s)");
    let err = String::from_utf8_lossy(&out.stderr);
    // -v lists every file, escaped; --progress prints plain progress lines without a terminal.
    assert!(err.lines().any(|l| l.ends_with("/src/big")), "{err}");
    assert!(err.contains("/src/tab\\x09here\\x1b[1m"), "{err}");
    assert!(!err.contains('\x1b'), "raw escape printed: {err:?}");
    let line = err.lines().find(|l| l.starts_with("linerate: ") && l.contains("% ")).unwrap_or_else(|| panic!("{err}"));
    // One rate unit, bits by default, as the summary line below it.
    assert!(line.contains("ETA") && line.contains("bit/s elapsed") && line.contains("files"), "{line}");
    // A nonsense limit is a usage error.
    let out = bin().args(["cp", "--no-save", "--bwlimit", "fast"]).arg(&src).arg(t.path().join("x")).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("--bwlimit"), "{}", text(&out));
}

#[test]
fn a_per_client_cap_paces_what_the_server_receives() {
    let t = scratch();
    let root = t.path().join("root");
    fs::create_dir(&root).unwrap();
    let key = t.path().join("key");
    keygen(&key);
    let mut child = bin()
        .args(["serve", "--listen", "127.0.0.1:0", "--announce", "--quiet", "--max-rate-per-client", "8MB/s"])
        .arg("--root")
        .arg(&root)
        .arg("--key-file")
        .arg(&key)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let srv = Serve { child, addr: line.trim().rsplit(' ').next().unwrap().to_string() };
    noise(&t.path().join("src"), 16_000_000);
    let out = bin()
        .args(["cp", "--no-save", "--json", "-P", "4", "--key-file"])
        .arg(&key)
        .arg(t.path().join("src"))
        .arg(format!("{}:got", srv.addr))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // 16 MB at 8 MB/s: 2 s, less one burst; the socket buffers do not help, the summary comes
    // only once the server has read everything.
    let took = j["seconds"].as_f64().unwrap();
    assert!(took >= 0.8 * (16e6 - 262_144.0) / 8e6, "{took:.2} s: the server did not pace the session");
    assert_eq!(fs::metadata(root.join("got")).unwrap().len(), 16_000_000);
}

#[test]
fn cp_help_documents_every_exit_code() {
    let out = bin().args(["cp", "--help"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let help = String::from_utf8(out.stdout).unwrap();
    let section = help.split("EXIT STATUS:").nth(1).unwrap_or_else(|| panic!("no EXIT STATUS section: {help}"));
    for (code, words) in [
        (0, "everything was copied"),
        (1, "some entries failed"),
        (2, "bad usage or configuration"),
        (3, "the session failed"),
        (130, "run the same command to resume"),
        (141, "closed early"),
    ] {
        assert!(section.contains(&format!("\n  {code}  ")), "exit code {code} missing: {section}");
        assert!(section.contains(words), "exit code {code}: {words:?} missing: {section}");
    }
    for flag in ["--bwlimit", "--progress", "--verbose"] {
        assert!(help.contains(flag), "{flag} missing from cp --help");
    }
}

#[test]
fn cp_exit_code_3_when_nobody_listens() {
    let t = scratch();
    let key = t.path().join("key");
    keygen(&key);
    fs::write(t.path().join("f"), b"x").unwrap();
    // A port that was just free: nothing listens there now.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let out = bin()
        .args(["cp", "--no-save", "-q", "--timeout", "3", "--key-file"])
        .arg(&key)
        .arg(t.path().join("f"))
        .arg(format!("127.0.0.1:{port}:f"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
}

#[test]
fn mistakes_a_user_makes_are_usage_errors_that_change_nothing() {
    let t = scratch();
    let src = t.path().join("src");
    tree(&src);
    fs::write(t.path().join("afile"), b"keep").unwrap();
    let cp = |args: &[&str]| bin().args(["cp", "--no-save", "-q"]).args(args).output().unwrap();
    let s = src.to_str().unwrap();
    let afile = t.path().join("afile");
    let a = afile.to_str().unwrap();
    for (args, words) in [
        (vec![s, &format!("{s}/sub")], "into itself"),
        (vec![s, s], "into itself"),
        (vec![s, a], "not a directory"),
        (vec![s, &format!("{a}/sub")], "not a directory"),
        (vec!["-P", "0", s, "x"], "1 to 256"),
        (vec!["-P", "2222", s, "x"], "ssh -p 2222"),
    ] {
        let out = cp(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(text(&out).contains(words), "{args:?}: {}", text(&out));
        assert!(text(&out).lines().count() <= 3, "{args:?}: one message, not a flood: {}", text(&out));
    }
    assert!(!src.join("sub/src").exists() && !src.join("src").exists(), "a copy into itself was made");
    assert_eq!(fs::read(&afile).unwrap(), b"keep");
    assert!(!t.path().join("x").exists());
    // scp's and rsync's -r and -a are accepted: cp always copies trees, keeping modes and times.
    let out = cp(&["-r", "-a", s, t.path().join("copy").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    same(&src, &t.path().join("copy/src"));
    // keygen makes the key's directory, private, as ssh-keygen does.
    let key = t.path().join("config/linerate/key");
    let out = bin().arg("keygen").arg(&key).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(fs::metadata(key.parent().unwrap()).unwrap().permissions().mode() & 0o777, 0o700);
}

#[test]
fn serve_log_format_json_writes_one_object_per_line_and_an_interrupted_client_is_no_violation() {
    let t = scratch();
    let (src, root, key) = (t.path().join("src"), t.path().join("root"), t.path().join("key"));
    tree(&src);
    fs::create_dir(&root).unwrap();
    keygen(&key);
    let mut cmd = bin();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--announce", "--log-format", "json", "--root"]);
    cmd.arg(&root).arg("--key-file").arg(&key).stderr(Stdio::piped());
    let mut srv = announced(cmd);
    // Every line the server logs, as it logs it, for the waits below; the whole log at the end.
    let stderr = BufReader::new(srv.child.stderr.take().unwrap());
    let (said, heard) = crossbeam_channel::unbounded::<String>();
    let log = std::thread::spawn(move || {
        let mut all = String::new();
        for line in stderr.lines() {
            let line = line.unwrap();
            all.push_str(&line);
            all.push('\n');
            let _ = said.send(line);
        }
        all
    });

    let out = bin().args(["cp", "-q", "--key-file"]).arg(&key).arg(&src).arg(format!("{}:dst", srv.addr)).output();
    assert_eq!(out.as_ref().unwrap().status.code(), Some(0), "{}", text(&out.unwrap()));
    let out = bin().args(["bench", &srv.addr, "-t", "0.3", "--no-save", "--key-file"]).arg(&key).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // A client killed mid-test (as Ctrl-C ends it), once its first interval is printed: the
    // server says it went away.
    let mut gone = bin()
        .args(["bench", &srv.addr, "-t", "20", "--no-save", "--key-file"])
        .arg(&key)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut intervals = BufReader::new(gone.stdout.take().unwrap()).lines();
    assert!(
        intervals.any(|l| l.is_ok_and(|l| l.starts_with('['))),
        "the 20 s benchmark ended before its first interval"
    );
    gone.kill().unwrap();
    gone.wait().unwrap();
    loop {
        match heard.recv_timeout(std::time::Duration::from_secs(60)) {
            Ok(l) if l.contains(r#""event":"interrupted""#) => break,
            Ok(_) => {}
            Err(e) => panic!("the server never logged the killed client's session ({e})"),
        }
    }
    let pid = rustix::process::Pid::from_raw(srv.child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let log = log.join().unwrap();

    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l:?}\n{log}")))
        .collect();
    for l in &lines {
        let ts = l["ts"].as_str().unwrap_or_else(|| panic!("no ts: {l}"));
        // 2026-11-24T12:00:00.123Z
        assert!(ts.len() == 24 && ts.ends_with('Z') && &ts[10..11] == "T" && &ts[19..20] == ".", "{ts}");
        assert!(["info", "warn", "error"].contains(&l["level"].as_str().unwrap_or_default()), "{l}");
        assert!(l["msg"].is_string(), "{l}");
    }
    let find = |kind: &str, event: &str| {
        lines
            .iter()
            .find(|l| l["kind"] == kind && l["event"] == event)
            .unwrap_or_else(|| panic!("no {kind} {event} line:\n{log}"))
    };
    let copy = find("copy", "done");
    assert_eq!(copy["files"], 3, "{copy}");
    assert!(copy["peer"].as_str().unwrap().starts_with("127.0.0.1:"), "{copy}");
    let test = find("bench", "test");
    assert_eq!(test["test"], "tcp-stream", "{test}");
    assert!(test["rx_bytes"].as_u64().unwrap() > 0 && test["rate_bps"].as_f64().unwrap() > 0.0, "{test}");
    assert!(test["seconds"].as_f64().unwrap() > 0.1, "{test}");
    let done = find("bench", "done");
    assert_eq!(done["tests"], 1);
    // The lines of one session carry its number; another session has another.
    assert!(test["session"].is_u64() && test["session"] == done["session"], "{test} {done}");
    assert_ne!(copy["session"], done["session"]);
    let gone = find("bench", "interrupted");
    assert!(gone["msg"].as_str().unwrap().contains("client closed the session (interrupted)"), "{gone}");
    assert!(!log.contains("violation"), "{log}");
    assert!(lines.iter().any(|l| l["msg"].as_str().unwrap().starts_with("stopping")), "{log}");
}

#[test]
fn serve_text_log_lines_start_with_a_utc_time_stamp() {
    let t = scratch();
    let key = t.path().join("key");
    keygen(&key);
    // A usage error is a log line too.
    let out = bin().args(["serve", "--listen", "nowhere", "--key-file"]).arg(&key).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8(out.stderr).unwrap();
    let (ts, rest) = err.split_once(' ').unwrap();
    assert!(ts.len() == 24 && ts.starts_with("20") && ts.ends_with('Z'), "{err}");
    assert_eq!(rest, "linerate serve: cannot parse listen address 'nowhere'\n");
}

#[test]
fn pulls_hard_links_as_links_and_holes_as_holes_with_h_and_s() {
    use std::os::unix::fs::{FileExt, MetadataExt};
    let t = scratch();
    let root = t.path().join("root");
    let src = root.join("tree");
    fs::create_dir_all(src.join("a")).unwrap();
    fs::create_dir_all(src.join("b")).unwrap();
    fs::write(src.join("a/first"), b"one file, two names").unwrap();
    fs::hard_link(src.join("a/first"), src.join("b/second")).unwrap();
    let sparse = fs::File::create(src.join("sparse")).unwrap();
    sparse.set_len(16 << 20).unwrap();
    sparse.write_all_at(b"the end", (16 << 20) - 7).unwrap();
    let key = t.path().join("key");
    keygen(&key);
    let srv = serve(&root, &key);
    let local = t.path().join("local");
    fs::create_dir(&local).unwrap();
    let out = bin()
        .args(["cp", "-q", "-H", "-S", "--db"])
        .arg(t.path().join("runs.sqlite"))
        .arg("--key-file")
        .arg(&key)
        .arg(format!("{}:tree", srv.addr))
        .arg(&local)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let (a, b) =
        (fs::metadata(local.join("tree/a/first")).unwrap(), fs::metadata(local.join("tree/b/second")).unwrap());
    assert_eq!((a.ino(), a.nlink()), (b.ino(), 2), "the pulled names are one file");
    let s = fs::metadata(local.join("tree/sparse")).unwrap();
    assert_eq!(s.len(), 16 << 20);
    assert!(s.blocks() * 512 <= 64 * 1024, "{} bytes used", s.blocks() * 512);
    assert_eq!(fs::read(local.join("tree/sparse")).unwrap(), fs::read(src.join("sparse")).unwrap());
}

#[test]
fn rsyncs_avh_copies_the_tree_with_h_as_human_readable() {
    // Issue 42: `-h` was clap's help, so rsync's everyday `-avh` printed the help and exited 0
    // having copied nothing.
    let t = scratch();
    let src = t.path().join("src");
    tree(&src);
    let dst = t.path().join("dst");
    let out = bin().args(["cp", "--no-save", "-avh"]).arg(src.join("")).arg(&dst).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!text(&out).contains("Usage:"), "{}", text(&out));
    same(&src, &dst);
    // Long and repeated forms too; help is `--help` alone, and says what `-h` is.
    let out = bin().args(["cp", "--no-save", "-q", "--human-readable", "-hh"]).arg(&src).arg(&dst).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    same(&src, &dst.join("src"));
    let out = bin().args(["cp", "--help"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("-h, --human-readable"), "{}", text(&out));
}

#[test]
fn a_command_line_answered_with_help_exits_2_unless_help_was_asked_for() {
    // Issue 42: no command line may end with 0 having done nothing it asked for. What clap answers
    // with the help (a missing subcommand or argument) is a usage error: help on stderr, exit 2.
    let falls_back: [&[&str]; 9] = [
        &[],
        &["cp"],
        &["cp", "-h"],
        &["cp", "-avh"],
        &["cp", "only-one"],
        &["report"],
        &["lab"],
        &["mesh"],
        &["cache"],
    ];
    for args in falls_back {
        let out = bin().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "linerate {args:?}: {}", text(&out));
        assert!(out.stdout.is_empty(), "linerate {args:?}: help belongs on stderr: {}", text(&out));
        assert!(String::from_utf8_lossy(&out.stderr).contains("Usage:"), "linerate {args:?}: {}", text(&out));
    }
    // Asked for, it is the answer: stdout, exit 0.
    for args in
        [&["--help"][..], &["-h"], &["help"], &["help", "cp"], &["cp", "--help"], &["bench", "-h"], &["--version"]]
    {
        let out = bin().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "linerate {args:?}: {}", text(&out));
        assert!(!out.stdout.is_empty(), "linerate {args:?}: {}", text(&out));
    }
}
