//! `linerate lab` end to end: up/status/exec/down, and nothing left behind after SIGINT to
//! `lab up` or `lab run`, or after the owner is killed outright. Needs root, iproute2, iperf3:
//! each test is `#[ignore = "needs root"]` ([`require_lab`]). The scenario is the lab
//! testkit's fixture.

use linerate_lab::testkit;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub(crate) fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_linerate"))
}

/// Root, iproute2, iperf3 and ping, or the test fails saying which is missing.
pub(crate) fn require_lab() {
    linerate_lab::testkit::require_lab("the lab tests");
}

/// The testkit's two hosts, and a 30 s iperf3 run (long enough to be interrupted mid-run).
fn scenario_text() -> String {
    format!("{}{}", testkit::TWO_HOSTS, testkit::iperf3_run(30))
}

fn scenario() -> (tempfile::TempDir, std::path::PathBuf) {
    testkit::write_scenario(&scenario_text())
}

fn state_file(id: &str) -> std::path::PathBuf {
    Path::new("/run/linerate/lab").join(format!("{id}.json"))
}

pub(crate) use testkit::assert_clean;

/// Starts `lab up FILE` and returns the child and the run id from its first line.
pub(crate) fn start_up(f: &Path) -> (Child, String) {
    let mut child = bin().args(["lab", "up"]).arg(f).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    // "lab lrXXXXXX up: ..."
    let id = line.split_whitespace().nth(1).unwrap_or_default().to_string();
    assert!(id.starts_with("lr") && line.contains(" up"), "unexpected first line: {line}");
    (child, id)
}

pub(crate) fn wait_exit(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    exit_within(child, limit).unwrap_or_else(|| panic!("linerate lab did not exit within {limit:?}"))
}

/// How `child` exited, or `None` when it had not within `limit` (it is then killed).
fn exit_within(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    crate::support::exit_within(child, limit)
}

/// A `lab up` that is interrupted and awaited when dropped, so a failed assertion never leaves
/// its namespaces and processes behind.
struct LabUp {
    child: Option<Child>,
    id: String,
}

impl LabUp {
    fn start(f: &Path) -> LabUp {
        let (child, id) = start_up(f);
        LabUp { child: Some(child), id }
    }

    /// Interrupt it and return how it exited.
    fn down(self) -> std::process::ExitStatus {
        sigint(self.child.as_ref().expect("running"));
        self.exited()
    }

    /// How it exited, once it does (something else told it to end).
    fn exited(mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().expect("running");
        wait_exit(&mut c, Duration::from_secs(30))
    }
}

impl Drop for LabUp {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            sigint(&c);
            let _ = exit_within(&mut c, Duration::from_secs(30));
        }
    }
}

pub(crate) fn sigint(child: &Child) {
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
}

#[test]
#[ignore = "needs root"]
fn lab_up_serves_exec_and_status_then_sigint_removes_everything() {
    crate::lab::require_lab();
    let (_d, f) = scenario();
    let up = LabUp::start(&f);
    let id = up.id.clone();
    assert!(state_file(&id).exists());
    let st = bin().args(["lab", "status", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    let me = v.as_array().unwrap().iter().find(|r| r["run"] == id.as_str()).unwrap().clone();
    assert_eq!(me["owner_alive"], true);
    let b = me["lab"]["hosts"]["b"]["interfaces"][0]["addr"].as_str().unwrap().split('/').next().unwrap().to_string();
    let ex = bin()
        .args(["lab", "exec", "a", "--run", &id, "--", "ip", "-o", "-4", "addr", "show", "eth0"])
        .output()
        .unwrap();
    assert!(ex.status.success());
    assert!(String::from_utf8_lossy(&ex.stdout).contains("198.18."), "{}", String::from_utf8_lossy(&ex.stdout));
    let ping = bin().args(["lab", "exec", "a", "--run", &id, "--", "ping", "-c", "1", "-W", "2", &b]).output().unwrap();
    assert!(ping.status.success(), "a cannot reach b at {b}");
    // `lab exec` passes on its command's own status, silently (issue 30's exit-code table).
    let seven = bin().args(["lab", "exec", "a", "--run", &id, "--", "sh", "-c", "exit 7"]).output().unwrap();
    assert_eq!(seven.status.code(), Some(7), "{}", String::from_utf8_lossy(&seven.stderr));
    assert!(seven.stderr.is_empty(), "{}", String::from_utf8_lossy(&seven.stderr));
    let status = up.down();
    assert!(status.success(), "{status}");
    assert_clean(&id);
}

#[test]
#[ignore = "needs root"]
fn sigint_during_lab_run_tears_down_and_kills_the_servers() {
    crate::lab::require_lab();
    let (d, f) = scenario();
    let out = d.path().join("results.json");
    let mut child =
        bin().args(["lab", "run", "--no-save"]).arg(&f).arg("-o").arg(&out).stderr(Stdio::piped()).spawn().unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    // Skip any "cleaned stale run" line (another test may have left one to be cleaned).
    let mut line = String::new();
    while !line.starts_with("lab ") {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "lab run exited early");
    }
    let id = line.split_whitespace().nth(1).unwrap_or_default().to_string();
    assert!(id.starts_with("lr"), "unexpected first line: {line}");
    // Wait until the iperf3 server is recorded (the run is under way), then interrupt.
    let state = state_file(&id);
    let recorded = || std::fs::read_to_string(&state).unwrap_or_default().contains("iperf3");
    let alive = || child.try_wait().unwrap().is_none();
    let dir = state.parent().unwrap();
    assert!(crate::support::await_files(&[dir], Duration::from_secs(20), alive, recorded), "the run never started");
    let state: serde_json::Value = serde_json::from_slice(&std::fs::read(state_file(&id)).unwrap()).unwrap();
    let servers: Vec<u64> = state["processes"].as_array().unwrap().iter().map(|p| p["pid"].as_u64().unwrap()).collect();
    assert!(!servers.is_empty());
    sigint(&child);
    let status = wait_exit(&mut child, Duration::from_secs(30));
    assert_eq!(status.code(), Some(130), "{status}");
    assert!(!out.exists(), "no results after an interrupted run");
    assert_clean(&id);
    for pid in servers {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        assert!(!stat.contains("iperf3"), "iperf3 server {pid} still runs");
    }
}

#[test]
#[ignore = "needs root"]
fn detach_then_down_and_a_killed_owner_is_cleaned_by_the_next_up() {
    crate::lab::require_lab();
    let (_d, f) = scenario();
    // Owner killed outright: the run is stale, and the next `up` removes it.
    let (mut child, stale) = start_up(&f);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(state_file(&stale).exists());
    let st = bin().args(["lab", "status"]).output().unwrap();
    assert!(String::from_utf8_lossy(&st.stdout).contains("stale"));
    let up = bin().args(["lab", "up", "--detach"]).arg(&f).output().unwrap();
    assert!(up.status.success(), "{}", String::from_utf8_lossy(&up.stderr));
    // This `up` (or a concurrent test's) found the dead owner and removed its run.
    assert_clean(&stale);
    let text = String::from_utf8_lossy(&up.stdout);
    let id = text.split_whitespace().nth(1).unwrap().to_string();
    assert!(state_file(&id).exists(), "a detached lab stays up");
    let down = bin().args(["lab", "down", &id]).output().unwrap();
    assert!(down.status.success(), "{}", String::from_utf8_lossy(&down.stderr));
    assert_clean(&id);
}

#[test]
fn lab_plan_needs_no_root_and_rejects_foreign_addresses() {
    let (d, f) = scenario();
    let out = bin().args(["lab", "plan"]).arg(&f).output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout)
        .contains("tc -n lrPLAN-a qdisc add dev eth0 root handle 1: tbf rate 1000000000bit"));
    let bad = d.path().join("bad.toml");
    std::fs::write(&bad, scenario_text().replace("rate = \"1gbit\"", "a_addr = \"10.0.0.1/24\"")).unwrap();
    let out = bin().args(["lab", "plan"]).arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("198.18.0.0/15"));
}

#[test]
#[ignore = "needs root"]
fn lab_run_copies_with_every_cp_mode_scp_rsync_tar_and_rclone_and_writes_results() {
    crate::lab::require_lab();
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("copy.toml");
    let mut text = testkit::two_hosts("rate = \"2gbit\"\n");
    let runs = [
        ("cp", "cp", "", 2),
        ("cp-pull", "cp", "pull", 2),
        ("cp-ssh-push", "cp", "ssh-push", 2),
        ("cp-ssh-pull", "cp", "ssh-pull", 1),
        ("scp", "scp", "", 1),
        ("rsync", "rsync", "", 2),
        ("tar", "tar", "", 2),
        ("rclone", "rclone", "", 1),
    ];
    for (name, tool, mode, streams) in runs {
        text += &format!(
            "[[run]]\nname = \"{name}\"\ntool = \"{tool}\"\nhost = \"a\"\nserver = \"b\"\nfiles = 6\nfile_size = 200000\nstreams = {streams}\n"
        );
        if !mode.is_empty() {
            text += &format!("mode = \"{mode}\"\n");
        }
    }
    std::fs::write(&f, text).unwrap();
    let out_file = d.path().join("r.json");
    let out = bin().args(["lab", "run", "--no-save"]).arg(&f).arg("-o").arg(&out_file).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{err}");
    let id = err.lines().find(|l| l.starts_with("lab ")).unwrap().split_whitespace().nth(1).unwrap().to_string();
    assert_clean(&id);
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&out_file).unwrap()).unwrap();
    assert_eq!(doc["schema"], "linerate.lab/1");
    assert_eq!(doc["run_id"], id.as_str());
    assert_eq!(doc["lab"]["links"][0]["rate_bps"], 2_000_000_000u64);
    let runs = doc["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 8);
    let workdir = doc["workdir"].as_str().unwrap();
    assert!(workdir.starts_with("/dev/shm/linerate-") && !Path::new(workdir).exists(), "{workdir}");
    for r in runs {
        // ok: copied, and the copy compared equal to its source byte for byte
        assert_eq!(r["ok"], true, "{r}");
        // Read around each group from /proc/stat, which counts in ticks: a copy of a few tens of
        // milliseconds may fall between two, so only presence and sign are the code's to decide
        // (the runner's unit test checks the arithmetic with a fake executor).
        assert!(r["machine_cpu_s"].as_f64().is_some_and(|c| c >= 0.0), "{r}");
        let bytes = r["bytes"].as_f64().unwrap();
        assert!(bytes > 6.0 * 50_000.0, "{r}");
        let bps = r["rate_bps"].as_f64().unwrap();
        assert!(bps > 1e6 && bps < 2.2e9, "{}: {bps} bit/s over a 2 Gbit/s link", r["name"]);
    }
    for (k, mode) in ["push", "pull", "ssh-push", "ssh-pull"].iter().enumerate() {
        assert_eq!(runs[k]["mode"], *mode, "{}", runs[k]);
        assert_eq!(runs[k]["raw"]["complete"], true, "linerate cp's own JSON is kept");
    }
    // The report is written beside the results, self-contained, with its charts inline.
    let html = std::fs::read_to_string(out_file.with_extension("html")).unwrap();
    assert!(html.contains("<svg") && !html.contains("src=\"http"), "{}", &html[..html.len().min(300)]);
}

#[test]
#[ignore = "needs root"]
fn lab_down_asks_a_foreground_owner_to_tear_down() {
    crate::lab::require_lab();
    let (_d, f) = scenario();
    let up = LabUp::start(&f);
    let id = up.id.clone();
    let down = bin().args(["lab", "down", &id]).output().unwrap();
    assert!(down.status.success(), "{}", String::from_utf8_lossy(&down.stderr));
    assert!(String::from_utf8_lossy(&down.stderr).contains("torn down by its owner"));
    let status = up.exited();
    assert!(status.success(), "{status}");
    assert_clean(&id);
}

#[test]
#[ignore = "needs root"]
fn a_group_with_a_failing_member_is_reported_incomplete_and_the_run_exits_1() {
    crate::lab::require_lab();
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("pair.toml");
    let mut text = String::from(
        "name = \"incomplete\"\n[[host]]\nname = \"g[1..3]\"\n[[host]]\nname = \"b\"\n[[switch]]\nname = \"sw\"\n\
         [[link]]\na = \"g[1..3]\"\nb = \"sw\"\n[[link]]\na = \"sw\"\nb = \"b\"\nrate = \"1gbit\"\n",
    );
    // two members that measure, and one whose client refuses its arguments
    for (name, host, args) in [("ok1", "g1", ""), ("ok2", "g2", ""), ("bad", "g3", "\"--no-such-flag\"")] {
        text += &format!(
            "[[run]]\nname = \"{name}\"\ntool = \"bench\"\nhost = \"{host}\"\nserver = \"b\"\ngroup = \"trio\"\n\
             seconds = 1\nargs = [{args}]\n"
        );
    }
    std::fs::write(&f, text).unwrap();
    let out_file = d.path().join("r.json");
    let out = bin().args(["lab", "run", "--no-save"]).arg(&f).arg("-o").arg(&out_file).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let id = err.lines().find(|l| l.starts_with("lab ")).unwrap().split_whitespace().nth(1).unwrap().to_string();
    assert_clean(&id);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("over 2 of 3 members") && err.contains("INCOMPLETE: bad failed"), "{err}");
    assert!(err.contains("1 of 3 runs failed: bad; incomplete groups"), "{err}");
    assert!(err.contains("trio (2 of 3 members measured)"), "{err}");

    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&out_file).unwrap()).unwrap();
    let g = &doc["groups"][0];
    assert_eq!((&g["group"], &g["ok"], &g["failed"]), (&"trio".into(), &false.into(), &serde_json::json!(["bad"])));
    let ok: Vec<&serde_json::Value> = doc["runs"].as_array().unwrap().iter().filter(|r| r["ok"] == true).collect();
    assert_eq!(ok.len(), 2);
    let total: f64 = ok.iter().map(|r| r["rate_bps"].as_f64().unwrap()).sum();
    let sum = g["rate_bps"].as_f64().unwrap();
    assert!((sum - total).abs() <= 1e-9 * total, "the total over the two that measured: {sum} against {total}");
    // the two that measured were started together, and the document says how far apart
    assert_eq!(g["start_tolerance_ms"], 50.0);
    assert!(g["start_skew_ms"].as_f64().is_some_and(|s| s >= 0.0), "{g}");
    assert!(ok.iter().all(|r| r["congestion"].as_str().is_some_and(|c| !c.is_empty())), "{ok:?}");

    let html = std::fs::read_to_string(out_file.with_extension("html")).unwrap();
    assert!(html.contains("INCOMPLETE: 1 of 3 runs failed, 1 of 1 groups incomplete"), "the report's title");
    assert!(html.contains("2 of 3") && html.contains("INCOMPLETE: 1 failed (bad)"), "the groups table");
}
