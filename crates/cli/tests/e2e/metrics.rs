//! `serve --metrics` end to end: an agent in daemon mode takes a push, a pull, a benchmark and
//! a refused key; its endpoint passes `promtool check metrics`, and a real Prometheus (Debian's
//! `prometheus`, started here on loopback with its own configuration and storage, stopped by a
//! guard) scrapes it and answers queries for the series with the right values.

use crate::support::sshlab::text;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_linerate"))
}

/// Kills its process when dropped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// GET `path` from `addr`: the status code and the body (0 when nothing listens yet).
fn get(addr: &str, path: &str) -> (u16, String) {
    let Ok(mut c) = TcpStream::connect(addr) else { return (0, String::new()) };
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(c, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut r = Vec::new();
    let _ = c.read_to_end(&mut r);
    let t = String::from_utf8_lossy(&r).to_string();
    let code = t.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = t.split_once("\r\n\r\n").map_or(String::new(), |(_, b)| b.to_string());
    (code, body)
}

fn program(name: &str) -> String {
    for dir in ["/usr/bin", "/usr/local/bin", "/usr/sbin"] {
        let p = Path::new(dir).join(name);
        if p.exists() {
            return p.display().to_string();
        }
    }
    panic!("{name} is needed for this test: install Debian's `prometheus` package (.ci/run does)");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The value of the one sample `query` returns, once Prometheus has it (waits up to 30 s).
fn query(prom: &str, q: &str) -> f64 {
    let t = Instant::now();
    loop {
        let enc: String = q
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b"_-.".contains(&b) {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect();
        let (code, body) = get(prom, &format!("/api/v1/query?query={enc}"));
        if code == 200 {
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            if let Some(s) = v["data"]["result"].as_array().and_then(|r| r.first()) {
                return s["value"][1].as_str().unwrap().parse().unwrap();
            }
        }
        assert!(t.elapsed() < Duration::from_secs(30), "Prometheus never had {q}: {code} {body}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn prometheus_scrapes_the_agents_counters() {
    let promtool = program("promtool");
    let prometheus = program("prometheus");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cfg = d.join("config");
    let keygen = |f: &Path, c: &str| {
        let o = bin()
            .args(["keygen", "--type", "ed25519", "--comment", c])
            .arg(f)
            .env("XDG_CONFIG_HOME", &cfg)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
        String::from_utf8(o.stdout).unwrap().trim().to_string()
    };
    let alice = keygen(&d.join("alice"), "alice");
    keygen(&d.join("mallory"), "mallory");
    keygen(&d.join("host_key"), "host");
    fs::write(d.join("authorized_keys"), format!("{alice}\n")).unwrap();
    fs::create_dir(d.join("root")).unwrap();
    fs::create_dir(d.join("src")).unwrap();
    for i in 0..3 {
        crate::support::noise(&d.join(format!("src/f{i}")), 100_000 + i);
    }
    let mut serve = bin()
        .args(["serve", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--announce", "--quiet", "--root"])
        .arg(d.join("root"))
        .arg("--host-key")
        .arg(d.join("host_key"))
        .arg("--authorized-keys")
        .arg(d.join("authorized_keys"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(serve.stdout.take().unwrap());
    let (mut l1, mut l2) = (String::new(), String::new());
    out.read_line(&mut l1).unwrap();
    out.read_line(&mut l2).unwrap();
    let _serve = Guard(serve);
    let addr = l1.trim().rsplit(' ').next().unwrap().to_string();
    assert!(l2.contains(" METRICS "), "{l2:?}");
    let metrics = l2.trim().rsplit(' ').next().unwrap().to_string();

    let cp = |key: &str, args: &[&str]| {
        bin().arg("cp").args(args).arg("--identity").arg(d.join(key)).env("XDG_CONFIG_HOME", &cfg).output().unwrap()
    };
    let src = d.join("src").display().to_string();
    let o = cp("alice", &["-q", &src, &format!("{addr}:copy")]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let back = d.join("back").display().to_string();
    let o = cp("alice", &["-q", &format!("{addr}:copy"), &back]);
    assert_eq!(o.status.code(), Some(0), "pull: {}", text(&o));
    let o = cp("mallory", &["-q", &src, &format!("{addr}:nope")]);
    assert_eq!(o.status.code(), Some(3), "an unlisted key: {}", text(&o));
    let o = bin()
        .args(["bench", &addr, "-t", "1", "-q", "--identity"])
        .arg(d.join("alice"))
        .env("XDG_CONFIG_HOME", &cfg)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "bench: {}", text(&o));

    // The endpoint: well-formed for promtool, 404 elsewhere.
    let (code, body) = get(&metrics, "/metrics");
    assert_eq!(code, 200, "{body}");
    let mut check = Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
    let c = check.wait_with_output().unwrap();
    assert!(c.status.success(), "promtool check metrics: {}\n{body}", text(&c));
    assert_eq!(get(&metrics, "/").0, 404);
    assert!(!body.contains(&d.display().to_string()), "no path in the metrics");

    // A real Prometheus scrapes it.
    let port = free_port();
    let pcfg = d.join("prometheus.yml");
    fs::write(
        &pcfg,
        format!("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: linerate\n    static_configs:\n      - targets: ['{metrics}']\n"),
    )
    .unwrap();
    let prom = Command::new(&prometheus)
        .arg(format!("--config.file={}", pcfg.display()))
        .arg(format!("--storage.tsdb.path={}", d.join("tsdb").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _prom = Guard(prom);
    let p = format!("127.0.0.1:{port}");
    assert_eq!(query(&p, "up{job=\"linerate\"}"), 1.0);
    assert_eq!(query(&p, "linerate_sessions_total{kind=\"push\",result=\"ok\"}"), 1.0);
    assert_eq!(query(&p, "linerate_sessions_total{kind=\"pull\",result=\"ok\"}"), 1.0);
    assert_eq!(query(&p, "linerate_sessions_total{kind=\"bench\",result=\"ok\"}"), 1.0);
    let tree = 3.0 * 100_000.0 + 3.0;
    assert_eq!(query(&p, "linerate_received_bytes_total{kind=\"push\"}"), tree);
    assert_eq!(query(&p, "linerate_sent_bytes_total{kind=\"pull\"}"), tree);
    assert_eq!(query(&p, "linerate_files_total{direction=\"received\"}"), 3.0);
    assert!(query(&p, "linerate_refused_connections_total{reason=\"auth\"}") >= 1.0);
    assert_eq!(query(&p, "linerate_key_bytes_total{name=\"alice\",direction=\"received\"}"), tree);
    assert_eq!(query(&p, "linerate_sessions_active{kind=\"push\"}"), 0.0);
    assert!(query(&p, "process_resident_memory_bytes") > 1e6);
    assert!(query(&p, "process_cpu_seconds_total") > 0.0);
}
