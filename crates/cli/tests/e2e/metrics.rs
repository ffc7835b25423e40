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
use std::time::Duration;

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
    let (mut last, mut value) = ((0, String::new()), None);
    // Prometheus says nothing when it has scraped: asked until it answers.
    let had = crate::support::eventually(Duration::from_secs(30), || {
        let (code, body) = get(prom, &format!("/api/v1/query?query={enc}"));
        if code == 200 {
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            if let Some(s) = v["data"]["result"].as_array().and_then(|r| r.first()) {
                value = Some(s["value"][1].as_str().unwrap().parse().unwrap());
                return true;
            }
        }
        last = (code, body);
        false
    });
    assert!(had, "Prometheus never had {q}: {} {}", last.0, last.1);
    value.unwrap_or_default()
}

/// Starts `linerate serve ARGS --metrics 127.0.0.1:0 --announce` (stderr as `log` says): the
/// agent, its address and its metrics address, from its two announce lines.
fn agent_with_metrics(args: impl FnOnce(&mut Command), log: Stdio) -> (Guard, String, String) {
    let mut cmd = bin();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--announce"]);
    args(&mut cmd);
    let mut serve = cmd.stdout(Stdio::piped()).stderr(log).spawn().unwrap();
    let mut out = BufReader::new(serve.stdout.take().unwrap());
    let (mut l1, mut l2) = (String::new(), String::new());
    out.read_line(&mut l1).unwrap();
    out.read_line(&mut l2).unwrap();
    assert!(l2.contains(" METRICS "), "{l2:?}");
    let last = |l: &str| l.trim().rsplit(' ').next().unwrap().to_string();
    (Guard(serve), last(&l1), last(&l2))
}

#[test]
fn prometheus_scrapes_the_agents_counters() {
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
    let (_serve, addr, metrics) = agent_with_metrics(
        |c| {
            c.arg("--quiet").arg("--root").arg(d.join("root")).arg("--host-key").arg(d.join("host_key"));
            c.arg("--authorized-keys").arg(d.join("authorized_keys"));
        },
        Stdio::null(),
    );

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
    assert_eq!(promtool_lint(&body), Vec::<String>::new(), "{body}");
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

/// The value of `series` (a whole name with its labels, as the exposition writes it) in `body`.
fn sample(body: &str, series: &str) -> Option<f64> {
    body.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Issue 33: a copy's bytes show while it runs (a scrape with the push still active already
/// counts bytes), a benchmark's bytes are counted, `--repeat` is a session per run whose figures
/// (throughput, or a round trip's latency percentiles) are stored as their mean with their
/// spread, and a wrong shared key is a refusal for `auth`, not a handshake failure.
#[test]
fn a_scrape_mid_copy_sees_bytes_and_a_wrong_key_is_refused_for_auth() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (key, other) = (d.join("key"), d.join("other"));
    crate::cli::keygen(&key);
    crate::cli::keygen(&other);
    fs::create_dir(d.join("root")).unwrap();
    let size = 4_000_000;
    crate::support::noise(&d.join("big"), size);
    let (_serve, addr, metrics) = agent_with_metrics(
        |c| {
            c.arg("--quiet").arg("--root").arg(d.join("root")).arg("--key-file").arg(&key);
        },
        Stdio::null(),
    );

    // 4 MB at 8 Mbit/s: about 4 s of copying, scraped as fast as the endpoint answers.
    let cp = bin()
        .args(["cp", "--no-save", "-q", "--bwlimit", "8Mbit", "--key-file"])
        .arg(&key)
        .arg(d.join("big"))
        .arg(format!("{addr}:big"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut cp = Guard(cp);
    let mut seen = None;
    while cp.0.try_wait().unwrap().is_none() {
        let (code, body) = get(&metrics, "/metrics");
        assert_eq!(code, 200, "{body}");
        let active = sample(&body, "linerate_sessions_active{kind=\"push\"}").unwrap();
        let bytes = sample(&body, "linerate_received_bytes_total{kind=\"push\"}").unwrap();
        if active == 1.0 && bytes > 0.0 {
            seen = Some(bytes);
            break;
        }
    }
    let mid = seen.expect("no scrape saw the push's bytes while it was running");
    assert!(mid < size as f64, "{mid} bytes counted mid-copy of {size}");
    let status = cp.0.wait().unwrap();
    assert!(status.success(), "the copy failed");
    let (_, body) = get(&metrics, "/metrics");
    assert_eq!(sample(&body, "linerate_received_bytes_total{kind=\"push\"}"), Some(size as f64), "{body}");

    let o = bin().args(["bench", &addr, "-t", "1", "-q", "--key-file"]).arg(&key).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "bench: {}", text(&o));
    let (_, body) = get(&metrics, "/metrics");
    let bench = sample(&body, "linerate_received_bytes_total{kind=\"bench\"}").unwrap();
    assert!(bench > 1e6, "a 1 s loopback benchmark moved {bench} bytes to the agent\n{body}");
    // `--repeat 3`: three runs, each a session of its own (issue 33); the figure is their mean.
    // A session is counted when the agent ends it, which may be just after its client exits: each
    // count is read once no benchmark session is running (a bounded look, not a wait for time).
    let sessions = |body: &str| sample(body, "linerate_sessions_total{kind=\"bench\",result=\"ok\"}").unwrap_or(0.0);
    let settled = || {
        let mut body = String::new();
        let idle = crate::support::eventually(Duration::from_secs(10), || {
            body = get(&metrics, "/metrics").1;
            sample(&body, "linerate_sessions_active{kind=\"bench\"}") == Some(0.0)
        });
        assert!(idle, "a benchmark session still running 10 s after its client exited");
        body
    };
    let before = sessions(&settled());
    let o = bin()
        .args(["bench", &addr, "-t", "0.3", "--repeat", "3", "--json", "--no-save", "--key-file"])
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "bench --repeat 3: {}", text(&o));
    let body = settled();
    assert_eq!(sessions(&body) - before, 3.0, "three repeats, three sessions\n{body}");
    let doc: linerate_model::doc::bench::BenchDocument = serde_json::from_slice(&o.stdout).unwrap();
    let runs = &doc.points[0].repeats.runs;
    assert_eq!(runs.len(), 3, "{runs:?}");
    let run = linerate_report::from_bench(&doc).unwrap();
    let mean = runs.iter().sum::<f64>() / 3.0;
    assert_eq!(run.find_metric("throughput").map(|m| m.value), Some(mean), "{runs:?}");
    // A round-trip test's repeats keep each run's latency percentiles: the stored p99 is their
    // mean, with their spread
    let o = bin()
        .args(["bench", &addr, "--test", "tcp-rr", "-t", "0.3", "--repeat", "3", "--json", "--no-save", "--key-file"])
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "bench tcp-rr --repeat 3: {}", text(&o));
    let doc: linerate_model::doc::bench::BenchDocument = serde_json::from_slice(&o.stdout).unwrap();
    let lat = &doc.points[0].repeats.latency_us;
    assert_eq!(lat.len(), 3, "{lat:?}");
    let run = linerate_report::from_bench(&doc).unwrap();
    let mean = lat.iter().map(|l| l.p99).sum::<f64>() / 3.0;
    assert!((run.find_metric("latency.p99").unwrap().value - mean).abs() < 1e-9, "{lat:?}");
    let s = run.spread("latency.p99").unwrap();
    assert_eq!((s.n, s.of), (3, linerate_report::model::SpreadOf::Repeats), "{s:?}");

    let o = bin()
        .args(["cp", "--no-save", "-q", "--key-file"])
        .arg(&other)
        .arg(d.join("big"))
        .arg(format!("{addr}:nope"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3), "a wrong key: {}", text(&o));
    let (_, body) = get(&metrics, "/metrics");
    assert_eq!(sample(&body, "linerate_refused_connections_total{reason=\"auth\"}"), Some(1.0), "{body}");
    assert_eq!(sample(&body, "linerate_handshake_failures_total"), Some(0.0), "{body}");
}

/// An agent for a mesh: benchmark-only, with a host key, the fleet's authorized_keys and
/// `--metrics`; its address, fingerprint and metrics address.
fn mesh_agent(dir: &Path, authorized: &Path) -> (Guard, String, String, String) {
    let (mut agent, addr, metrics) = agent_with_metrics(
        |c| {
            c.arg("--host-key").arg(dir.join("host_key")).arg("--authorized-keys").arg(authorized);
        },
        Stdio::piped(),
    );
    // The first log line names the host key; the rest is drained so the agent never blocks.
    let mut err = BufReader::new(agent.0.stderr.take().unwrap());
    let mut note = String::new();
    err.read_line(&mut note).unwrap();
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    let fp = note.split_whitespace().find(|w| w.starts_with("SHA256:")).unwrap_or_else(|| panic!("{note}"));
    (agent, addr, fp.trim_end_matches(';').to_string(), metrics)
}

/// `n` mesh agents `a0`… in `d` (keys, a shared authorized_keys with the controller's key `ctl`
/// given `mesh`), and the inventory's `[[agent]]` lines for them.
fn mesh_fleet(d: &Path, n: usize) -> (Vec<(Guard, String, String, String)>, String) {
    let keygen = |f: &Path| {
        let o = bin().args(["keygen", "--type", "ed25519"]).arg(f).output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
        String::from_utf8(o.stdout).unwrap().trim().to_string()
    };
    let mut lines = vec![format!("mesh {}", keygen(&d.join("ctl")))];
    for i in 0..n {
        fs::create_dir(d.join(format!("a{i}"))).unwrap();
        lines.push(format!("ro {}", keygen(&d.join(format!("a{i}/host_key")))));
    }
    fs::write(d.join("authorized_keys"), lines.join("\n") + "\n").unwrap();
    let agents: Vec<_> = (0..n).map(|i| mesh_agent(&d.join(format!("a{i}")), &d.join("authorized_keys"))).collect();
    let mut inv = String::new();
    for (i, (_, addr, fp, _)) in agents.iter().enumerate() {
        inv += &format!("[[agent]]\nname = \"a{i}\"\naddress = \"{addr}\"\nhost_key = \"{fp}\"\n");
    }
    (agents, inv)
}

/// `promtool check metrics` of an exposition: it must parse (promtool exits 1 on a format
/// error); what its lint finds against Prometheus's naming conventions (units, `_total`, a
/// histogram's `_bucket`, `_sum` and `_count`; exit 3) is returned, a problem a line.
fn promtool_lint(body: &str) -> Vec<String> {
    let mut check = Command::new(program("promtool"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
    let c = check.wait_with_output().unwrap();
    assert!(matches!(c.status.code(), Some(0 | 3)), "promtool check metrics: {}\n{body}", text(&c));
    text(&c).lines().filter(|l| !l.trim().is_empty()).map(str::to_string).collect()
}

/// The `_bucket` samples of `series` (`{labels` without the closing brace) in `body`: each
/// bucket's `le` and count, in the exposition's order.
fn buckets(body: &str, series: &str) -> Vec<(String, f64)> {
    let head = format!("linerate_mesh_transaction_latency_seconds_bucket{series},le=\"");
    body.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(&head)?;
            let (le, v) = rest.split_once("\"} ")?;
            Some((le.to_string(), v.parse().unwrap()))
        })
        .collect()
}

/// Issue 33: after a mesh round, each agent exports its pairs' last results (throughput,
/// latency, age, up) under the inventory's test, agent and peer names (issue 43), as a
/// Prometheus alert needs them; and (issue 43) the round-trip test's transactions as a
/// histogram that the next round adds to, which `promtool check metrics` accepts.
#[test]
fn a_mesh_round_is_exported_per_pair() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (agents, mut inv) = mesh_fleet(d, 2);
    inv += "[[test]]\nname = \"tput\"\nkind = \"tcp-stream\"\nduration = \"1s\"\n";
    inv += "[[test]]\nname = \"rtt\"\nkind = \"tcp-rr\"\nduration = \"1s\"\n";
    fs::write(d.join("inventory.toml"), inv).unwrap();
    let round = || {
        let o = bin()
            .arg("mesh")
            .arg(d.join("inventory.toml"))
            .arg("--identity")
            .arg(d.join("ctl"))
            .args(["--once", "-q"])
            .env("LINERATE_DB", d.join("runs.sqlite"))
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    };
    round();
    for (i, (_, _, _, metrics)) in agents.iter().enumerate() {
        let peer = format!("a{}", 1 - i);
        let (code, body) = get(metrics, "/metrics");
        assert_eq!(code, 200);
        let s = |name: &str, test: &str, extra: &str| {
            sample(&body, &format!("{name}{{agent=\"a{i}\",peer=\"{peer}\",{extra}test=\"{test}\"}}"))
        };
        assert_eq!(s("linerate_mesh_up", "tput", ""), Some(1.0), "a{i} to {peer}:\n{body}");
        assert!(s("linerate_mesh_throughput_bits", "tput", "").is_some_and(|b| b > 1e6), "{body}");
        let age = s("linerate_mesh_result_age_seconds", "tput", "").unwrap();
        assert!((0.0..600.0).contains(&age), "{age}");
        // Latency runs one way, from the lower-numbered agent: a0 has it, a1 has no such series.
        let p99 = s("linerate_mesh_latency_seconds", "rtt", "quantile=\"0.99\",");
        if i == 0 {
            assert_eq!(s("linerate_mesh_up", "rtt", ""), Some(1.0), "{body}");
            assert!(p99.is_some_and(|p| p > 0.0 && p < 1.0), "{p99:?} s\n{body}");
        } else {
            assert_eq!((p99, s("linerate_mesh_up", "rtt", "")), (None, None), "{body}");
        }
        // The agent also counts the sessions the controller opened: one per test it ran.
        let tasks = if i == 0 { 2.0 } else { 1.0 };
        assert_eq!(sample(&body, "linerate_sessions_total{kind=\"mesh\",result=\"ok\"}"), Some(tasks), "{body}");
        // It parses; the lint's complaints are the older gauges' (a `quantile` label on a gauge,
        // bits), none the histogram's.
        let lint = promtool_lint(&body);
        assert!(lint.iter().all(|l| !l.contains("transaction_latency")), "{lint:?}");
    }
    // The round trips as a histogram: a0's, cumulative, +Inf every transaction; none for the
    // stream test, none on a1. A second round adds to the first.
    let rtt = "{agent=\"a0\",peer=\"a1\",test=\"rtt\"";
    let scrape = |i: usize| get(&agents[i].3, "/metrics").1;
    let body = scrape(0);
    let first = buckets(&body, rtt);
    assert_eq!(first.len(), 17, "16 bounds and +Inf\n{body}");
    assert_eq!((first[0].0.as_str(), first[16].0.as_str()), ("0.00001", "+Inf"));
    assert!(first.windows(2).all(|w| w[0].1 <= w[1].1), "cumulative: {first:?}");
    let count = sample(&body, &format!("linerate_mesh_transaction_latency_seconds_count{rtt}}}")).unwrap();
    assert!(count > 100.0 && first[16].1 == count, "{count}: {first:?}");
    let sum = sample(&body, &format!("linerate_mesh_transaction_latency_seconds_sum{rtt}}}")).unwrap();
    assert!(sum > 0.0 && sum / count < 1.0, "mean {} s", sum / count);
    // The same test as the p50 gauge: the first bucket at or above it holds half the round trips.
    let p50 = sample(&body, "linerate_mesh_latency_seconds{agent=\"a0\",peer=\"a1\",quantile=\"0.5\",test=\"rtt\"}");
    let p50 = p50.unwrap_or_else(|| panic!("no p50\n{body}"));
    let (_, half) = first.iter().find(|(le, _)| le == "+Inf" || le.parse::<f64>().unwrap() >= p50).unwrap();
    assert!(*half >= count / 2.0, "p50 {p50} s: {first:?}");
    assert!(buckets(&body, "{agent=\"a0\",peer=\"a1\",test=\"tput\"").is_empty(), "{body}");
    assert!(!scrape(1).contains("linerate_mesh_transaction_latency_seconds"), "a1 ran no round trips");
    round();
    let body = scrape(0);
    let second = buckets(&body, rtt);
    let count2 = sample(&body, &format!("linerate_mesh_transaction_latency_seconds_count{rtt}}}")).unwrap();
    assert!(count2 > count && second[16].1 == count2, "{count} then {count2}");
    assert!(second.iter().zip(&first).all(|(b, a)| b.1 >= a.1), "counters never go back: {first:?} then {second:?}");
    // The family alone passes promtool's lint, help and type lines included.
    let family: String = body
        .lines()
        .filter(|l| l.contains("linerate_mesh_transaction_latency_seconds"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(family.contains("# TYPE linerate_mesh_transaction_latency_seconds histogram"), "{body}");
    assert_eq!(promtool_lint(&family), Vec::<String>::new(), "{family}");
}

/// Issue 43: an agent killed between two rounds. Its tests are failed pairs marked "agent down"
/// in the round (as many as the tally's failures) and in `report mesh`, never "not scheduled";
/// every other agent exports `linerate_mesh_up 0` toward it within that round, under the
/// inventory's test and agent names, with the interval; and `promtool test rules`, fed the
/// series the agents export, fires `LinerateMeshPairFailing` for exactly those pairs. Needs
/// `promtool` on the PATH: fails, loudly, when it is not.
#[test]
fn a_killed_agents_pairs_fail_and_its_peers_export_up_0_toward_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (agents, fleet) = mesh_fleet(d, 4);
    let mut agents: Vec<_> = agents.into_iter().map(Some).collect();
    let mut inv =
        String::from("interval = \"1h\"\n[limits]\nbackoff = \"200ms\"\nretries = 1\nconnect_timeout = \"2s\"\n");
    inv += &fleet;
    inv += "[[test]]\nname = \"tput\"\nkind = \"tcp-stream\"\nduration = \"1s\"\n";
    inv += "[[test]]\nname = \"rtt\"\nkind = \"tcp-rr\"\nduration = \"1s\"\n";
    fs::write(d.join("inventory.toml"), inv).unwrap();
    let db = d.join("runs.sqlite");
    let mesh = || {
        bin()
            .arg("mesh")
            .arg(d.join("inventory.toml"))
            .arg("--identity")
            .arg(d.join("ctl"))
            .args(["--once", "--json", "-q"])
            .env("LINERATE_DB", &db)
            .output()
            .unwrap()
    };
    let o = mesh();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let metrics: Vec<String> = agents.iter().map(|a| a.as_ref().unwrap().3.clone()).collect();
    let up = |i: usize, test: &str, peer: &str| {
        let (_, body) = get(&metrics[i], "/metrics");
        sample(&body, &format!("linerate_mesh_up{{agent=\"a{i}\",peer=\"{peer}\",test=\"{test}\"}}"))
    };
    assert_eq!(up(0, "tput", "a2"), Some(1.0), "named as the inventory names them");
    // a2 killed (the process this test started): the next round finds it down
    drop(agents[2].take());
    let o = mesh();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let run: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let tally = &run["params"]["tally"];
    assert_eq!(tally["down"], serde_json::json!(["a2"]), "{tally}");
    // each pair's last try: those with a2 failed, the rest measured
    let rows = run["tables"][0]["rows"].as_array().unwrap();
    let mut last = std::collections::BTreeMap::new();
    for r in rows {
        last.insert((r[0].as_str().unwrap(), r[1].as_str().unwrap(), r[2].as_str().unwrap()), r[4].as_str().unwrap());
    }
    let with_a2: Vec<_> = last.iter().filter(|((_, f, t), _)| *f == "a2" || *t == "a2").collect();
    assert_eq!(with_a2.len(), 6 + 3, "tput both ways and rtt one way, every pair with a2 tried or given up");
    assert!(with_a2.iter().all(|(_, s)| **s != "ok"), "{with_a2:?}");
    assert!(with_a2.iter().any(|(_, s)| s.starts_with("agent down: a2")), "{with_a2:?}");
    assert!(last.iter().filter(|((_, f, t), _)| *f != "a2" && *t != "a2").all(|(_, s)| *s == "ok"), "{last:?}");
    assert_eq!(tally["failed"].as_u64(), Some(with_a2.len() as u64), "the tally and the pairs agree: {tally}");
    // the matrix: every pair with a2 marked "agent down", none of them a "not scheduled" dash
    let page = d.join("mesh.html");
    let r = bin().args(["report", "mesh", "-o"]).arg(&page).env("LINERATE_DB", &db).output().unwrap();
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    let page = fs::read_to_string(&page).unwrap();
    assert_eq!(page.matches(">agent</text>").count(), with_a2.len(), "one 'agent down' cell per failed pair");
    assert_eq!(page.matches("agent down: a2, failed for the round").count(), with_a2.len());
    // every other agent exports up 0 toward a2 for each test it runs toward it, in this round
    let mut series = Vec::new();
    for i in [0, 1, 3] {
        let (_, body) = get(&metrics[i], "/metrics");
        assert_eq!(sample(&body, "linerate_mesh_interval_seconds"), Some(3600.0), "{body}");
        for l in body.lines().filter(|l| l.starts_with("linerate_mesh_up{")) {
            let (s, v) = l.rsplit_once(' ').unwrap();
            series.push((i, s.to_string(), v.parse::<f64>().unwrap()));
        }
        assert_eq!(up(i, "tput", "a2"), Some(0.0), "a{i} toward a2:\n{body}");
        let client = last.contains_key(&("rtt", format!("a{i}").as_str(), "a2"));
        assert_eq!(up(i, "rtt", "a2"), client.then_some(0.0), "a{i} rtt toward a2:\n{body}");
    }
    let down: Vec<_> = series.iter().filter(|(_, _, v)| *v == 0.0).collect();
    assert!(down.iter().all(|(_, s, _)| s.contains("peer=\"a2\"")), "{down:?}");
    assert_eq!(down.len(), with_a2.iter().filter(|((_, f, _), _)| *f != "a2").count(), "{series:?}");
    // promtool, fed the exported series for 20 minutes, fires LinerateMeshPairFailing for them
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/prometheus/linerate.rules.yml");
    let mut t = format!(
        "rule_files:\n  - {}\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n",
        rules.display()
    );
    for (i, s, v) in &series {
        let s = s.replace('{', &format!("{{instance=\"a{i}:9478\",job=\"linerate\","));
        t += &format!("      - series: '{s}'\n        values: '{v}x20'\n");
    }
    t += "    alert_rule_test:\n      - eval_time: 15m\n        alertname: LinerateMeshPairFailing\n        exp_alerts:\n";
    for (i, s, _) in &down {
        let label = |k: &str| s.split(&format!("{k}=\"")).nth(1).and_then(|x| x.split('"').next()).unwrap().to_string();
        let (test, peer) = (label("test"), label("peer"));
        t += &format!(
            "          - exp_labels: {{severity: warning, instance: \"a{i}:9478\", job: linerate, agent: a{i}, test: {test}, peer: {peer}}}\n            \
             exp_annotations:\n              summary: \"{test} from a{i}:9478 to {peer} failed\"\n              \
             description: \"The pair's last mesh test did not run (the peer was unreachable or down, or the test failed).\"\n"
        );
    }
    let file = d.join("round.test.yml");
    fs::write(&file, &t).unwrap();
    let p = Command::new("promtool").args(["test", "rules"]).arg(&file).output().unwrap_or_else(|e| {
        panic!("this test needs promtool (apt-get install prometheus) to run the alert rules: {e}")
    });
    assert!(p.status.success(), "promtool:\n{}\n{t}", text(&p));
}
