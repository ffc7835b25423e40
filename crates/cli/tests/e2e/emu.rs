//! linerate's link emulator end to end, as `lab up` runs it: the round trip ping sees against
//! the configured delay, UDP loss and reordering as `linerate bench` measures them, changes
//! while running (`lab set`), and nothing left behind. Needs root, iproute2, ping.

use crate::lab::{assert_clean, bin, can_run, sigint, start_up, wait_exit};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A lab that is up (`lab up` running), brought down by SIGINT when dropped, test failed or not.
struct Up {
    child: Option<Child>,
    id: String,
    _dir: tempfile::TempDir,
}

impl Up {
    fn new(link: &str) -> Up {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("emu.toml");
        let text = format!(
            "name = \"emu\"\n[[host]]\nname = \"a\"\n[[host]]\nname = \"b\"\n[[link]]\na = \"a\"\nb = \"b\"\n\
             emulator = \"linerate\"\n{link}"
        );
        std::fs::write(&f, text).unwrap();
        let (child, id) = start_up(&f);
        Up { child: Some(child), id, _dir: dir }
    }

    fn exec(&self, host: &str, cmd: &[&str]) -> std::process::Output {
        bin().args(["lab", "exec", host, "--run", &self.id, "--"]).args(cmd).output().unwrap()
    }

    fn set(&self, changes: &[&str]) -> String {
        let o = bin().args(["lab", "set", "a-b", "--run", &self.id]).args(changes).output().unwrap();
        assert!(o.status.success(), "lab set {changes:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    /// The median of `n` pings from a to b, ms.
    fn ping_median(&self, n: usize) -> f64 {
        let o = self.exec("a", &["ping", "-n", "-c", &n.to_string(), "-i", "0.05", "-W", "2", "198.18.1.2"]);
        let text = String::from_utf8_lossy(&o.stdout);
        let mut t: Vec<f64> =
            text.split_whitespace().filter_map(|w| w.strip_prefix("time=")).filter_map(|v| v.parse().ok()).collect();
        assert!(t.len() >= n - 1, "ping answered {} of {n}: {text}", t.len());
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            sigint(&c);
            let status = wait_exit(&mut c, Duration::from_secs(30));
            if !std::thread::panicking() {
                assert!(status.success(), "lab up ended with {status}");
                assert_clean(&self.id);
            }
        }
    }
}

#[test]
fn ping_sees_the_configured_round_trip_from_1_to_200_ms_and_lab_set_changes_it() {
    if !can_run() {
        return;
    }
    let lab = Up::new("delay = \"0ms\"\n");
    // The delay adds to the path's own round trip through the emulator (about 0.1 ms here).
    let base = lab.ping_median(21);
    assert!(base < 1.0, "the emulator itself adds {base} ms");
    for (one_way, rtt) in [("0.5ms", 1.0), ("5ms", 10.0), ("50ms", 100.0), ("100ms", 200.0)] {
        assert_eq!(lab.set(&[&format!("delay={one_way}")]), "ok");
        let n = if rtt > 50.0 { 9 } else { 21 };
        let added = lab.ping_median(n) - base;
        let tolerance = (rtt * 0.05_f64).max(0.1);
        assert!(
            (added - rtt).abs() <= tolerance,
            "delay {one_way} each way: ping adds {added:.3} ms, want {rtt} ± {tolerance}"
        );
    }
    // A cut: nothing passes, and the emulator counts what it dropped; then restored.
    lab.set(&["down"]);
    let o = lab.exec("a", &["ping", "-n", "-c", "2", "-i", "0.2", "-W", "1", "198.18.1.2"]);
    assert!(!o.status.success(), "ping crossed a cut link");
    let stats: serde_json::Value = serde_json::from_str(&lab.set(&["stats"])).unwrap();
    assert!(stats["a_to_b"]["down_drops"].as_u64().unwrap() >= 2, "{stats}");
    lab.set(&["up", "delay=0ms"]);
    assert!(lab.ping_median(3) < 1.0);
}

/// `linerate serve` in b, for `linerate bench` from a; stopped with the lab.
fn serve_in_b(lab: &Up, key: &Path) -> Child {
    let k = key.display().to_string();
    assert!(bin().args(["keygen", &k]).output().unwrap().status.success());
    let me = env!("CARGO_BIN_EXE_linerate");
    let child = Command::new("ip")
        .args(["netns", "exec", &format!("{}-b", lab.id), me, "serve", "--listen", "198.18.1.2:7878", "--key-file", &k])
        .arg("--quiet")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    child
}

fn udp(lab: &Up, key: &Path) -> serde_json::Value {
    let k = key.display().to_string();
    let o = lab.exec(
        "a",
        &[
            env!("CARGO_BIN_EXE_linerate"),
            "bench",
            "198.18.1.2",
            "--key-file",
            &k,
            "--test",
            "udp-stream",
            "-b",
            "150M",
        ]
        .iter()
        .copied()
        .chain(["-l", "1400", "-t", "4", "--json", "-q", "--no-save"])
        .collect::<Vec<_>>(),
    );
    assert!(o.status.success(), "bench: {}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v.get("summary").cloned().unwrap_or(v)
}

#[test]
fn udp_loss_and_reordering_are_what_the_link_was_given() {
    if !can_run() {
        return;
    }
    // Per-packet impairments: the TAPs carry wire packets, so 1 % means 1 % of datagrams.
    let lab = Up::new("delay = \"1ms\"\nloss = 1.0\n");
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("k");
    let mut server = serve_in_b(&lab, &key);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for (set, want) in [("loss=1%", 1.0), ("loss=0.1%", 0.1)] {
            lab.set(&[set]);
            let s = udp(&lab, &key);
            let loss = s["loss_pct"].as_f64().unwrap();
            assert!((loss - want).abs() <= want * 0.2, "{set}: bench measured {loss:.3} % ({s})");
        }
        lab.set(&["loss=0%", "reorder=5%"]);
        let s = udp(&lab, &key);
        assert!(s["out_of_order"].as_u64().unwrap() > 100, "reordering shows: {s}");
        assert!(s["loss_pct"].as_f64().unwrap() < 0.5, "{s}");
        let st: serde_json::Value = serde_json::from_str(&lab.set(&["stats"])).unwrap();
        assert!(st["a_to_b"]["lost"].as_u64().unwrap() > 500, "{st}");
        assert!(st["a_to_b"]["reordered"].as_u64().unwrap() > 500, "{st}");
    }));
    let _ = server.kill();
    let _ = server.wait();
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
}
