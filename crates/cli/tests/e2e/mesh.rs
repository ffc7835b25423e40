//! `linerate mesh` end to end on loopback: three benchmark-only agents (`serve --host-key
//! --authorized-keys`, each listing the controller's key with `mesh` and the agents' host keys),
//! one round of a throughput test both ways and a round-trip test; every pair measured, no agent
//! in two throughput tests at once (from the round's own timeline), the run stored; and the
//! refusals: a controller key without `mesh`, a wrong pinned host key, an agent that is down;
//! an agent that is busy (its `--max-tests` taken), tried again after a backoff.

use crate::support::sshlab::text;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::Duration;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_linerate"))
}

fn keygen(file: &Path) -> String {
    let o = bin().args(["keygen", "--type", "ed25519"]).arg(file).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    String::from_utf8(o.stdout).unwrap().trim().to_string()
}

/// An agent: killed when dropped.
struct Agent {
    child: Child,
    addr: String,
    fingerprint: String,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn agent(dir: &Path, authorized: &Path, extra: &[&str]) -> Agent {
    let mut cmd = bin();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--announce", "--host-key"]).arg(dir.join("host_key"));
    cmd.arg("--authorized-keys").arg(authorized).args(extra);
    let a = crate::support::spawn_announced(cmd);
    let fingerprint = a.fingerprint.unwrap_or_else(|| panic!("no fingerprint from the agent at {}", a.addr));
    Agent { child: a.child, addr: a.addr, fingerprint }
}

/// Three agents sharing one authorized_keys: `ctl` with `mesh`, `plain` without, every host key.
struct Fleet {
    dir: tempfile::TempDir,
    agents: Vec<Agent>,
}

impl Fleet {
    fn new(n: usize) -> Fleet {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let ctl = keygen(&d.join("ctl"));
        let plain = keygen(&d.join("plain"));
        let mut lines = vec![format!("mesh {ctl}"), plain];
        for i in 0..n {
            fs::create_dir(d.join(format!("a{i}"))).unwrap();
            lines.push(format!("ro {}", keygen(&d.join(format!("a{i}/host_key")))));
        }
        let ak = d.join("authorized_keys");
        fs::write(&ak, lines.join("\n") + "\n").unwrap();
        let agents = (0..n).map(|i| agent(&d.join(format!("a{i}")), &ak, &[])).collect();
        Fleet { dir, agents }
    }

    /// An inventory of the agents (`fps` overrides their fingerprints), 1 s tests.
    fn inventory(&self, fps: &[&str], extra: &str) -> PathBuf {
        let mut t = String::from("[limits]\nbackoff = \"200ms\"\nretries = 1\nconnect_timeout = \"2s\"\n");
        for (i, a) in self.agents.iter().enumerate() {
            let fp = fps.get(i).copied().unwrap_or(&a.fingerprint);
            t += &format!("[[agent]]\nname = \"a{i}\"\naddress = \"{}\"\nhost_key = \"{fp}\"\n", a.addr);
        }
        t += "[[test]]\nname = \"tput\"\nkind = \"tcp-stream\"\nduration = \"1s\"\n";
        t += "[[test]]\nname = \"rtt\"\nkind = \"tcp-rr\"\nduration = \"1s\"\n";
        t += extra;
        let p = self.dir.path().join("inventory.toml");
        fs::write(&p, t).unwrap();
        p
    }

    fn mesh(&self, inv: &Path, key: &str, args: &[&str]) -> Output {
        bin()
            .arg("mesh")
            .arg(inv)
            .arg("--identity")
            .arg(self.dir.path().join(key))
            .args(args)
            .env("LINERATE_DB", self.dir.path().join("runs.sqlite"))
            .output()
            .unwrap()
    }
}

fn pairs(run: &serde_json::Value) -> Vec<Vec<serde_json::Value>> {
    let t = run["tables"].as_array().unwrap().iter().find(|t| t["title"] == "pairs").unwrap();
    t["rows"].as_array().unwrap().iter().map(|r| r.as_array().unwrap().clone()).collect()
}

#[test]
fn a_round_measures_every_pair_without_overlap_and_is_stored() {
    let f = Fleet::new(3);
    let inv = f.inventory(&[], "");
    let o = f.mesh(&inv, "ctl", &["--once", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let run: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(run["kind"], "mesh");
    let rows = pairs(&run);
    assert_eq!(rows.len(), 6 + 3, "tput both ways, rtt one way: {rows:?}");
    assert!(rows.iter().all(|r| r[4] == "ok"), "{rows:?}");
    let metrics = run["metrics"].as_array().unwrap();
    for (a, b) in [(0, 1), (1, 0), (0, 2), (2, 0), (1, 2), (2, 1)] {
        let m = metrics.iter().find(|m| m["name"] == format!("tput:a{a}>a{b}")).unwrap_or_else(|| panic!("a{a}>a{b}"));
        assert!(m["value"].as_f64().unwrap() > 1e6, "{m}");
    }
    assert_eq!(metrics.iter().filter(|m| m["name"].as_str().unwrap().ends_with(":p50")).count(), 3);
    // The timeline: no agent in two throughput tests at once, nor in a round trip beside one.
    let tput: Vec<_> = rows.iter().filter(|r| r[0] == "tput").collect();
    for x in &tput {
        for y in &rows {
            if std::ptr::eq(*x, y) {
                continue;
            }
            let shared = [&x[1], &x[2]].iter().any(|n| **n == y[1] || **n == y[2]);
            let (xs, xe, ys, ye) =
                (x[10].as_f64().unwrap(), x[11].as_f64().unwrap(), y[10].as_f64().unwrap(), y[11].as_f64().unwrap());
            assert!(!shared || xe <= ys + 1e-3 || ye <= xs + 1e-3, "overlap: {x:?} {y:?}");
        }
    }
    // Stored: `report list` shows the round.
    let db = f.dir.path().join("runs.sqlite");
    let report = |args: &[&str]| bin().arg("report").args(args).env("LINERATE_DB", &db).output().unwrap();
    let l = report(&["list"]);
    assert!(text(&l).contains("mesh round 1"), "rounds are numbered from 1: {}", text(&l));
    // The next round of the same mesh is numbered on from the stored one.
    let o = f.mesh(&inv, "ctl", &["--once", "--json", "-q"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let next: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(next["params"]["round"], 2, "{}", next["title"]);
    // A later round where a0 > a1's round trip took 100 times as long: `report compare` exits 4
    // naming that pair, and the matrix colours that cell red against the round before. (Far past
    // the pair's own spread, which on a loaded 2-core host reaches tens of percent: issue 43
    // judges a pair by it, so a halved figure may be within the noise here.)
    let mut later = next.clone();
    later["id"] = serde_json::json!(format!("{}-later", next["id"].as_str().unwrap()));
    later["created"] = serde_json::json!("2099-01-01T00:00:00Z");
    // The figures are the round's (the run's body, which a stored run's metrics are derived
    // from): the try's median, and the metric an export shows beside it.
    for t in later["body"]["mesh"]["tries"].as_array_mut().unwrap() {
        if (t["test"].as_str(), t["from"].as_str(), t["to"].as_str()) == (Some("rtt"), Some("a0"), Some("a1")) {
            t["figures"]["p50_us"] = serde_json::json!(t["figures"]["p50_us"].as_f64().unwrap() * 100.0);
        }
    }
    for m in later["metrics"].as_array_mut().unwrap() {
        if m["name"] == "rtt:a0>a1:p50" {
            m["value"] = serde_json::json!(m["value"].as_f64().unwrap() * 100.0);
        }
    }
    let file = f.dir.path().join("later.json");
    fs::write(&file, serde_json::to_vec(&later).unwrap()).unwrap();
    let i = report(&["import", file.to_str().unwrap()]);
    assert_eq!(i.status.code(), Some(0), "{}", text(&i));
    let (a, b) = (next["id"].as_str().unwrap(), later["id"].as_str().unwrap());
    let c = report(&["compare", a, b, "--threshold", "40"]);
    assert_eq!(c.status.code(), Some(4), "{}", text(&c));
    assert!(text(&c).contains("rtt:a0>a1:p50"), "{}", text(&c));
    let html = f.dir.path().join("mesh.html");
    let m = report(&["mesh", "-o", html.to_str().unwrap(), "--threshold", "40"]);
    assert_eq!(m.status.code(), Some(0), "{}", text(&m));
    let page = fs::read_to_string(&html).unwrap();
    assert_eq!(page.matches("<svg").count(), 2, "a matrix per test");
    assert!(page.contains(&format!("against <code>{a}</code>")), "the previous round is the baseline");
    assert!(page.contains("2 earlier rounds in each cell's history"), "rounds 1 and 2 before the later one");
    assert_eq!(page.matches("#f4a6a6").count(), 1, "one cell worse: a0 > a1");
    assert!(page.contains("+9900%"));
    let svg = report(&["mesh", b, "--test", "rtt", "-o", "-"]);
    assert!(String::from_utf8_lossy(&svg.stdout).starts_with("<svg"), "{}", text(&svg));
}

#[test]
fn refusals_a_key_without_mesh_a_wrong_host_key_and_a_dead_agent() {
    let f = Fleet::new(3);
    let inv = f.inventory(&[], "");
    let o = f.mesh(&inv, "plain", &["--once", "--no-save", "--json", "-q"]);
    assert_eq!(o.status.code(), Some(3), "no test may run: {}", text(&o));
    let run: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(pairs(&run).iter().all(|r| r[4].as_str().unwrap().contains("mesh")), "the reason names the option");
    // Agent 2 pinned to another key: its tests fail, the rest run.
    let other = "SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU";
    let fps: Vec<&str> = vec![&f.agents[0].fingerprint, &f.agents[1].fingerprint, other];
    let inv = f.inventory(&fps, "");
    let o = f.mesh(&inv, "ctl", &["--once", "--no-save", "--json", "-q"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let rows = pairs(&serde_json::from_slice(&o.stdout).unwrap());
    for r in &rows {
        let involves = r[1] == "a2" || r[2] == "a2";
        assert_eq!(r[4] == "ok", !involves, "{r:?}");
        if involves {
            assert!(r[4].as_str().unwrap().contains("pinned"), "{r:?}");
        }
    }
}

/// Issue 30: a round that ran but cannot be stored is a store failure (exit 3, naming the
/// store), not bad usage (it was 2).
#[test]
fn a_round_that_cannot_be_stored_exits_3_naming_the_store() {
    let f = Fleet::new(2);
    let inv = f.inventory(&[], "");
    let file = f.dir.path().join("a-file");
    fs::write(&file, b"not a directory").unwrap();
    let db = file.join("runs.sqlite");
    let o = f.mesh(&inv, "ctl", &["--once", "-q", "--db", db.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("linerate mesh: cannot open the run store"), "{}", text(&o));
}

/// Issue 28: an agent given `--mesh-targets` refuses a task for an address outside them (the
/// loopback agents here are outside 198.18.0.0/15), naming the option; the other agent's run.
#[test]
fn an_agent_sends_mesh_tests_only_to_its_mesh_targets() {
    let mut f = Fleet::new(2);
    drop(f.agents.remove(0));
    let ak = f.dir.path().join("authorized_keys");
    f.agents.insert(0, agent(&f.dir.path().join("a0"), &ak, &["--mesh-targets", "198.18.0.0/15,fd00::/8"]));
    let inv = f.inventory(&[], "");
    let o = f.mesh(&inv, "ctl", &["--once", "--no-save", "--json", "-q"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let rows = pairs(&serde_json::from_slice(&o.stdout).unwrap());
    assert!(rows.iter().any(|r| r[1] == "a0") && rows.iter().any(|r| r[1] == "a1"), "{rows:?}");
    for r in &rows {
        if r[1] == "a0" {
            assert!(
                r[4].as_str().unwrap().contains("outside this agent's --mesh-targets 198.18.0.0/15,fd00::/8"),
                "{r:?}"
            );
        } else {
            assert_eq!(r[4], "ok", "{r:?}");
        }
    }
}

#[test]
fn an_agent_that_is_down_is_given_up_after_its_retries() {
    let mut f = Fleet::new(3);
    let inv = f.inventory(&[], "");
    let dead = f.agents.remove(1);
    drop(dead);
    let o = f.mesh(&inv, "ctl", &["--once", "--no-save", "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let run: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(run["params"]["tally"]["down"], serde_json::json!(["a1"]), "{}", run["params"]["tally"]);
    let rows = pairs(&run);
    assert!(rows.iter().filter(|r| r[1] != "a1" && r[2] != "a1").all(|r| r[4] == "ok"), "{rows:?}");
    assert!(rows.iter().any(|r| r[4].as_str().unwrap().starts_with("unreachable a1")), "{rows:?}");
    assert!(text(&o).contains("down: a1"), "{}", text(&o));
}

/// Issue 33: an agent whose `--max-tests` are all taken refuses a task as busy; the controller
/// backs off and tries again, as for an agent it cannot reach, and the round completes once the
/// slot is free (a busy agent is neither a failure nor down).
#[test]
fn a_busy_agent_is_tried_again_after_a_backoff_and_its_tests_run() {
    use std::io::BufRead;
    let mut f = Fleet::new(2);
    drop(f.agents.remove(1));
    let ak = f.dir.path().join("authorized_keys");
    f.agents.insert(1, agent(&f.dir.path().join("a1"), &ak, &["--max-tests", "1"]));
    // Hold a1's one test slot: a 3 s benchmark by another key, seen running (its first interval).
    let cfg = f.dir.path().join("config");
    let mut hold = bin()
        .args(["bench", &f.agents[1].addr, "-t", "3", "-i", "0.2", "--no-save", "--identity"])
        .arg(f.dir.path().join("plain"))
        .env("XDG_CONFIG_HOME", &cfg)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(hold.stdout.take().unwrap()).lines();
    let first = lines.by_ref().map_while(Result::ok).find(|l| l.contains("bit/s"));
    assert!(first.is_some(), "the holding benchmark never printed an interval");
    // Backoffs of 0.2, 0.4, 0.8, 1.6 and 3.2 s outlast the 3 s the slot is held.
    let inv = f.inventory(&[], "");
    let t = fs::read_to_string(&inv).unwrap().replace("retries = 1", "retries = 6");
    fs::write(&inv, t).unwrap();
    let o = f.mesh(&inv, "ctl", &["--once", "--no-save", "--json", "-q"]);
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let held = hold.wait().unwrap();
    assert!(held.success(), "the holding benchmark failed: {rest:?}");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let run: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // A row per try: a1's first tries busy, every pair's last try measured.
    let rows = pairs(&run);
    assert!(rows.iter().any(|r| r[4].as_str().unwrap().contains("(server busy)")), "{rows:?}");
    for r in &rows {
        let last = rows.iter().filter(|x| x[..3] == r[..3]).map(|x| x[3].as_u64().unwrap()).max();
        assert!(r[3].as_u64() != last || r[4] == "ok", "the last try failed: {r:?}");
    }
    let tally = &run["params"]["tally"];
    assert!(tally["retried"].as_u64().unwrap() >= 1, "a1 was busy at first: {tally}");
    assert_eq!(tally["down"], serde_json::json!([]), "{tally}");
}

/// Issue 17's lab: six hosts on one switch, host h6's link shaped to 100 Mbit/s, an agent in
/// each, the controller in h1. One round: every pair measured both ways, every pair with h6 slow
/// and the others fast, no agent in two throughput tests at once and no round trip beside a
/// throughput test on its agents (the round's timeline), and nothing of the lab left behind.
#[test]
#[ignore = "needs root"]
fn six_agents_on_a_switch_with_one_slow_link_show_its_pairs_slow() {
    use crate::lab::{assert_clean, sigint, start_up, wait_exit};
    crate::lab::require_lab();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut sc = String::from("name = \"mesh6\"\n[[switch]]\nname = \"sw\"\n");
    for i in 1..=6 {
        sc += &format!("[[host]]\nname = \"h{i}\"\n[[link]]\na = \"h{i}\"\nb = \"sw\"\n");
        if i == 6 {
            sc += "rate = \"100mbit\"\n";
        }
    }
    fs::write(d.join("mesh6.toml"), sc).unwrap();
    let (mut up, id) = start_up(&d.join("mesh6.toml"));
    let ns = |i: usize| format!("{id}-h{i}");
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let ctl = keygen(&d.join("ctl"));
        let mut lines = vec![format!("mesh {ctl}")];
        for i in 1..=6 {
            fs::create_dir(d.join(format!("h{i}"))).unwrap();
            lines.push(format!("ro {}", keygen(&d.join(format!("h{i}/host_key")))));
        }
        fs::write(d.join("authorized_keys"), lines.join("\n") + "\n").unwrap();
        let mut agents = Vec::new();
        let mut inv = String::from("[limits]\nconnect_timeout = \"5s\"\n");
        for i in 1..=6 {
            let o =
                Command::new("ip").args(["netns", "exec", &ns(i), "ip", "-o", "-4", "addr", "show"]).output().unwrap();
            let t = String::from_utf8_lossy(&o.stdout).to_string();
            let ip = t
                .split_whitespace()
                .filter_map(|w| w.split('/').next())
                .find(|w| w.starts_with("198.1"))
                .unwrap_or_else(|| panic!("no address in h{i}: {t}"))
                .to_string();
            let mut cmd = Command::new("ip");
            cmd.args(["netns", "exec", &ns(i), env!("CARGO_BIN_EXE_linerate"), "serve", "--listen"])
                .arg(format!("{ip}:7878"))
                .args(["--announce", "--host-key"])
                .arg(d.join(format!("h{i}/host_key")))
                .arg("--authorized-keys")
                .arg(d.join("authorized_keys"));
            let a = crate::support::spawn_announced(cmd);
            let fp = a.fingerprint.clone().unwrap();
            inv += &format!("[[agent]]\nname = \"h{i}\"\naddress = \"{ip}:7878\"\nhost_key = \"{fp}\"\n");
            agents.push(Agent { child: a.child, addr: a.addr, fingerprint: fp });
        }
        inv += "[[test]]\nname = \"tput\"\nkind = \"tcp-stream\"\nduration = \"2s\"\n";
        inv += "[[test]]\nname = \"rtt\"\nkind = \"tcp-rr\"\nduration = \"1s\"\n";
        fs::write(d.join("fleet.toml"), inv).unwrap();
        let o = Command::new("ip")
            .args(["netns", "exec", &ns(1), env!("CARGO_BIN_EXE_linerate"), "mesh"])
            .arg(d.join("fleet.toml"))
            .arg("--identity")
            .arg(d.join("ctl"))
            .args(["--once", "--json", "--no-save"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        eprint!("{}", String::from_utf8_lossy(&o.stderr)); // the round, test by test (--nocapture)
        let run: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        if let Some(keep) = std::env::var_os("LINERATE_KEEP_MESH_RUN") {
            fs::write(keep, &o.stdout).unwrap();
        }
        let rows = pairs(&run);
        assert_eq!(rows.len(), 30 + 15);
        let tput: Vec<_> = rows.iter().filter(|r| r[0] == "tput").collect();
        let rate = |r: &Vec<serde_json::Value>| r[5].as_f64().unwrap();
        let slow: Vec<f64> = tput.iter().filter(|r| r[1] == "h6" || r[2] == "h6").map(|r| rate(r)).collect();
        let fast: Vec<f64> = tput.iter().filter(|r| r[1] != "h6" && r[2] != "h6").map(|r| rate(r)).collect();
        assert_eq!((slow.len(), fast.len()), (10, 20));
        assert!(slow.iter().all(|&x| x < 110e6), "h6's pairs are bound by its 100 Mbit/s link: {slow:?}");
        let fast_min = fast.iter().copied().fold(f64::INFINITY, f64::min);
        assert!(fast_min > 5.0 * 100e6, "the other pairs are not: {fast:?}");
        // Issue 33: no agent in two throughput tests at once, and no latency test beside a
        // throughput test on either of its agents (pScheduler's exclusive and normal classes).
        for x in &tput {
            for y in rows.iter().filter(|y| !std::ptr::eq(*x, *y)) {
                let shared = [&x[1], &x[2]].iter().any(|n| **n == y[1] || **n == y[2]);
                let (xs, xe) = (x[10].as_f64().unwrap(), x[11].as_f64().unwrap());
                let (ys, ye) = (y[10].as_f64().unwrap(), y[11].as_f64().unwrap());
                assert!(!shared || xe <= ys + 1e-3 || ye <= xs + 1e-3, "overlap: {x:?} {y:?}");
            }
        }
        let rtt: Vec<_> = rows.iter().filter(|r| r[0] == "rtt").collect();
        assert_eq!(rtt.len(), 15, "every pair's round trip");
        assert!(rtt.iter().all(|r| r[6].as_f64().is_some_and(|p50| p50 > 0.0)), "{rtt:?}");
        drop(agents);
    }));
    sigint(&up);
    let status = wait_exit(&mut up, Duration::from_secs(30));
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
    assert!(status.success(), "lab up ended with {status}");
    assert_clean(&id);
}

/// Without --once, SIGTERM during a round starts nothing new, lets the running tests finish,
/// saves the round as stopped and exits; the next round never starts.
#[test]
fn sigterm_finishes_the_running_tests_saves_the_round_and_exits() {
    let f = Fleet::new(4);
    let inv = f.inventory(&[], "interval = \"1m\"\n");
    // (the extra line lands after the tests: move it to the top, where TOML wants it)
    let text = fs::read_to_string(&inv).unwrap().replace("interval = \"1m\"\n", "");
    fs::write(&inv, format!("interval = \"1m\"\n{text}")).unwrap();
    let mut child = bin()
        .arg("mesh")
        .arg(&inv)
        .arg("--identity")
        .arg(f.dir.path().join("ctl"))
        .arg("--json")
        .env("LINERATE_DB", f.dir.path().join("runs.sqlite"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the first test to end (the second wave is then running), then SIGTERM.
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut l = String::new();
        assert!(std::io::BufRead::read_line(&mut err, &mut l).unwrap() > 0, "mesh ended early: {seen}");
        seen += &l;
        if l.contains(": tput ") {
            break;
        }
    }
    let t = std::time::Instant::now();
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(t.elapsed() < Duration::from_secs(20), "took {:?} to stop", t.elapsed());
    assert!(out.status.code().is_some_and(|c| c <= 1), "{:?}: {rest}", out.status);
    let run: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(run["title"].as_str().unwrap().ends_with("(stopped)"), "{}", run["title"]);
    let rows = pairs(&run);
    assert!(rows.len() < 12 + 6, "the round was cut short: {} tests", rows.len());
    assert!(rows.iter().all(|r| r[4] == "ok"), "the running tests finished: {rows:?}");
    assert!(!rest.contains("round 2"), "no next round: {rest}");
    assert!(rest.contains("saved as"), "{rest}");
}
