//! `linerate doctor` end to end: a path whose far end has a smaller MTU than the near end, built
//! from two network namespaces and a veth pair, must be named as a path-MTU mismatch.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_linerate")
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip (install iproute2)");
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

/// Two namespaces joined by a veth pair, and a server process in the far one; all removed on
/// drop, even when the test fails.
struct Lab {
    near: String,
    far: String,
    near_if: String,
    server: Option<Child>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Some(mut c) = self.server.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // Deleting a namespace deletes the veth end inside it, and so the pair.
        for ns in [&self.near, &self.far] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

#[test]
fn doctor_reports_this_host_as_json_and_refuses_an_unknown_interface() {
    let out = Command::new(bin()).args(["doctor", "--json", "--no-crypto-bench"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["schema"], "linerate.doctor/1");
    assert!(j["facts"]["cpu"]["cores"].as_u64().unwrap() >= 1);
    assert!(j["facts"]["nics"].as_array().unwrap().iter().all(|n| n["name"] != "lo"));
    assert!(j["facts"]["aead"].is_null());
    assert_eq!(j["verdict"]["rtt_source"], "assumed");
    assert!((j["verdict"]["rtt_s"].as_f64().unwrap() - 0.001).abs() < 1e-12);
    let out = Command::new(bin()).args(["doctor", "--iface", "nosuchif0", "--no-crypto-bench"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no interface \"nosuchif0\""));
    let out = Command::new(bin()).args(["doctor", "--rtt", "soon"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    // A bare number is refused with a hint rather than read as milliseconds (issue 30).
    let out = Command::new(bin()).args(["doctor", "--rtt", "20"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("give one, e.g. 20ms"));
}

/// Issue 33: against a loopback peer doctor said "via eth0", proposed `ethtool -L eth0` and
/// predicted encryption alone as the ceiling.
#[test]
fn doctor_against_a_loopback_peer_names_lo_gives_no_nic_advice_and_counts_the_copy_cpu() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let peer = l.local_addr().unwrap().to_string();
    let out = Command::new(bin()).args(["doctor", "--json", "--peer", &peer]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["facts"]["path"]["iface"], "lo", "{j}");
    assert_eq!(j["facts"]["primary"], "lo");
    let nics: Vec<&str> = j["facts"]["nics"].as_array().unwrap().iter().map(|n| n["name"].as_str().unwrap()).collect();
    assert_eq!(nics, ["lo"]);
    let text = j["findings"].to_string() + &j["verdict"]["actions"].to_string();
    assert!(!text.contains("ethtool") && !text.contains("cable"), "{text}");
    let multi = &j["verdict"]["multi_stream"];
    assert_eq!(multi["limited_by"], "cpu per byte", "{multi}");
    let crypto = multi["limits"].as_array().unwrap().iter().find(|l| l["name"] == "crypto").unwrap();
    assert!(multi["ceiling_bps"].as_f64().unwrap() < crypto["bps"].as_f64().unwrap(), "{multi}");
    drop(l);
}

#[test]
#[ignore = "needs root"]
fn doctor_names_a_path_mtu_mismatch_across_namespaces() {
    crate::support::require_root("creating network namespaces");
    let id = format!("{}{}", std::process::id() % 100_000, COUNTER.fetch_add(1, Ordering::SeqCst));
    let mut lab = Lab {
        near: format!("lrdoc-n{id}"),
        far: format!("lrdoc-f{id}"),
        near_if: format!("lrdn{id}"), // at most 4 + 5 + a few digits < 15 bytes
        server: None,
    };
    let far_if = format!("lrdf{id}");
    ip(&["netns", "add", &lab.near]);
    ip(&["netns", "add", &lab.far]);
    ip(&["link", "add", &lab.near_if, "netns", &lab.near, "type", "veth", "peer", "name", &far_if, "netns", &lab.far]);
    ip(&["-n", &lab.near, "addr", "add", "198.18.77.1/30", "dev", &lab.near_if]);
    ip(&["-n", &lab.far, "addr", "add", "198.18.77.2/30", "dev", &far_if]);
    ip(&["-n", &lab.near, "link", "set", &lab.near_if, "mtu", "9000", "up"]);
    ip(&["-n", &lab.far, "link", "set", &far_if, "mtu", "1500", "up"]);
    ip(&["-n", &lab.near, "link", "set", "lo", "up"]);
    ip(&["-n", &lab.far, "link", "set", "lo", "up"]);

    // A linerate serve on the far side answers the RTT probe's TCP connects.
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    assert!(Command::new(bin()).arg("keygen").arg(&key).output().unwrap().status.success());
    let mut server = Command::new("ip")
        .args(["netns", "exec", &lab.far, bin(), "serve", "--listen", "198.18.77.2:7878", "--key-file"])
        .arg(&key)
        .arg("--root")
        .arg(&root)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(server.stderr.take().unwrap());
    lab.server = Some(server);
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    assert!(line.contains("listening on"), "serve said: {line:?}");
    // Keep draining the server's complaints about probe connections that send nothing.
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));

    let out = Command::new("ip")
        .args(["netns", "exec", &lab.near, bin(), "doctor", "--peer", "198.18.77.2", "--no-crypto-bench", "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["schema"], "linerate.doctor/1");
    let path = &j["facts"]["path"];
    assert_eq!(path["iface"], lab.near_if.as_str(), "{path}");
    assert_eq!(path["pmtu"]["route_mtu"], 9000, "{path}");
    assert_eq!(path["pmtu"]["path_mtu"], 1500, "{path}");
    assert!(path["rtt"]["median_us"].as_f64().unwrap() > 0.0, "{path}");
    let findings = j["findings"].as_array().unwrap();
    let f = findings.iter().find(|f| f["id"] == "path-mtu-mismatch").unwrap_or_else(|| panic!("{findings:#?}"));
    assert_eq!(f["severity"], "critical");
    let msg = f["message"].as_str().unwrap();
    assert!(msg.contains("is 1500") && msg.contains(&lab.near_if) && msg.contains("MTU 9000"), "{msg}");
    assert!(f["fix"].as_str().unwrap().contains(&format!("ip link set dev {} mtu 1500", lab.near_if)));
    assert_eq!(j["verdict"]["iface"], lab.near_if.as_str());
    assert_eq!(j["verdict"]["rtt_source"], "measured");
    // The rate probe is not faked: without `linerate bench` it is reported as not run.
    assert!(path["probe"].is_null() && path["probe_error"].is_string(), "{path}");
}
