//! Real labs in network namespaces: rate, MTU, delay and QoS are applied, and nothing is left
//! behind. They need root, iproute2, iperf3 and ping (`.ci/run` installs them): each is
//! `#[ignore = "needs root"]`, run by `.ci/run` with `--include-ignored`, and fails without
//! root ([`require_lab`]).
#![allow(clippy::unwrap_used)] // tests fail loudly by design

use linerate_lab::exec::{Executor, Job, Process, SystemExecutor};
use linerate_lab::lab::new_run_id;
use linerate_lab::runner::{run_all, RunnerConfig};
use linerate_lab::state::{clean_stale, RunState};
use linerate_lab::testkit::{assert_clean, iperf3_run, require_lab, TWO_HOSTS};
use linerate_lab::{Lab, LabError, Scenario};
use linerate_model::shutdown::Shutdown;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

/// Measuring tests run one at a time (two cores).
static SERIAL: Mutex<()> = Mutex::new(());

fn up(text: &str) -> Lab {
    let sc = Scenario::parse(text).unwrap();
    Lab::up_with(Box::new(SystemExecutor), &sc, Path::new("test.toml"), &new_run_id(), false, &Shutdown::never())
        .unwrap()
}

fn run(lab: &mut Lab, text: &str) -> Value {
    let sc = Scenario::parse(text).unwrap();
    let stop = Shutdown::never();
    let mut log = |l: &str| eprintln!("{l}");
    // iperf3 runs need no linerate binary.
    let mut cfg = RunnerConfig { linerate: "/nonexistent/linerate".into(), stop: &stop, log: &mut log };
    serde_json::to_value(run_all(lab, &sc, &mut cfg).unwrap()).unwrap()
}

fn ns_cmd(lab: &Lab, host: &str, args: &[&str]) -> std::process::Output {
    Command::new("ip").args(["netns", "exec", lab.ns(host).unwrap()]).args(args).output().unwrap()
}

/// The fixture's 1 Gbit/s link, measured by iperf3 for 4 s (the first second left out).
fn link_1g() -> String {
    format!("{TWO_HOSTS}{}args = [\"-O\", \"1\"]\n", iperf3_run(4))
}

#[test]
#[ignore = "needs root"]
fn a_1gbit_link_is_shaped_at_1gbit_and_never_exceeds_it() {
    require_lab("a real lab (network namespaces)");
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for shaper in ["tbf", "htb"] {
        let text = link_1g().replace("rate = \"1gbit\"", &format!("rate = \"1gbit\"\nshaper = \"{shaper}\""));
        let mut lab = up(&text);
        let id = lab.plan.run.clone();
        let doc = run(&mut lab, &text);
        // What the lab decides: the shaper it was asked for, at the rate it was asked for.
        let qdiscs = ns_cmd(&lab, "a", &["tc", "qdisc", "show"]);
        let classes = ns_cmd(&lab, "a", &["tc", "class", "show", "dev", "eth0"]);
        assert!(lab.down().is_empty());
        assert_clean(&id);
        let shown = format!("{}{}", String::from_utf8_lossy(&qdiscs.stdout), String::from_utf8_lossy(&classes.stdout));
        assert!(shown.contains(&format!("qdisc {shaper} ")) && shown.contains("rate 1Gbit"), "{shaper}: {shown}");
        assert_eq!(doc["schema"], "linerate.lab/1");
        let r = &doc["runs"][0];
        assert_eq!(r["ok"], true, "{r}");
        // What the link allows: never more than its rate (iperf3 counts payload, the shaper
        // frames, so even a perfect run stays under 1 Gbit/s; 2 % for the edges of intervals).
        // How close a loaded machine gets is the benchmarks' business, not a test's.
        let bps = r["rate_bps"].as_f64().unwrap();
        assert!(bps > 0.0 && bps <= 1.02e9, "{shaper}: measured {bps} bit/s on a 1 Gbit/s link");
        assert!(r["intervals"].as_array().unwrap().len() >= 3);
        // both ends and the kernel's work for them are busy CPU of this machine for a few seconds
        let cpu = r["machine_cpu_s"].as_f64().unwrap();
        assert!(cpu > 0.0 && cpu < 4.0 * 60.0, "{shaper}: {cpu} core-seconds over a 4 s run");
        let workdir = doc["workdir"].as_str().unwrap();
        assert!(workdir.starts_with("/dev/shm/linerate-") && !Path::new(workdir).exists(), "{workdir}");
    }
}

#[test]
#[ignore = "needs root"]
fn mtu_is_applied() {
    require_lab("a real lab (network namespaces)");
    let lab = up(&format!("{TWO_HOSTS}mtu = 1400\n"));
    let id = lab.plan.run.clone();
    let b = linerate_lab::scenario::fmt_ip(lab.plan.server_addr("a", "b", None).unwrap());
    // 1372 bytes of ICMP payload + 28 bytes of headers = 1400: fits; one more does not.
    let fits = ns_cmd(&lab, "a", &["ping", "-c", "1", "-W", "2", "-M", "do", "-s", "1372", &b]);
    let too_big = ns_cmd(&lab, "a", &["ping", "-c", "1", "-W", "2", "-M", "do", "-s", "1373", &b]);
    let link = ns_cmd(&lab, "b", &["ip", "-o", "link", "show", "eth0"]);
    let mut told = Vec::new();
    let problems = lab.down_told(&mut |l| told.push(l.to_string()));
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(told, [format!("lab {id} torn down")]);
    assert_clean(&id);
    assert!(fits.status.success(), "{}", String::from_utf8_lossy(&fits.stderr));
    assert!(!too_big.status.success(), "a 1401-byte packet went through a 1400-byte MTU");
    assert!(String::from_utf8_lossy(&link.stdout).contains("mtu 1400"));
}

/// Whether the kernel has sch_netem (some minimal kernels do not).
fn has_netem() -> bool {
    let id = new_run_id();
    let ns = format!("{id}-probe");
    let mut ex = SystemExecutor;
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    ex.run(&s(&["ip", "netns", "add", &ns])).unwrap();
    let ok = ex.run(&s(&["ip", "-n", &ns, "link", "add", "d0", "type", "veth", "peer", "name", "d1"])).is_ok()
        && ex.run(&s(&["tc", "-n", &ns, "qdisc", "add", "dev", "d0", "root", "netem", "delay", "1ms"])).is_ok();
    ex.run(&s(&["ip", "netns", "del", &ns])).unwrap();
    ok
}

#[test]
#[ignore = "needs root"]
fn netem_delay_is_applied_or_refused_cleanly() {
    require_lab("a real lab (network namespaces)");
    // netem asked for by name (linerate's own emulator is tested end to end in crates/cli).
    let text = format!("{TWO_HOSTS}delay = \"20ms\"\nemulator = \"netem\"\n");
    let sc = Scenario::parse(&text).unwrap();
    let id = new_run_id();
    let r = Lab::up_with(Box::new(SystemExecutor), &sc, Path::new("d.toml"), &id, false, &Shutdown::never());
    if !has_netem() {
        // The kernel lacks netem: `up` must fail naming the qdisc, and leave nothing behind.
        let e = r.err().expect("netem cannot work on this kernel");
        assert!(matches!(e, LabError::Command { .. }) && e.to_string().contains("netem"), "{e}");
        assert_clean(&id);
        eprintln!("note: this kernel has no sch_netem; delay checked only for a clean refusal");
        return;
    }
    let lab = r.unwrap();
    let b = linerate_lab::scenario::fmt_ip(lab.plan.server_addr("a", "b", None).unwrap());
    let out = ns_cmd(&lab, "a", &["ping", "-c", "3", "-i", "0.2", "-W", "2", &b]);
    drop(lab);
    assert_clean(&id);
    let text = String::from_utf8_lossy(&out.stdout);
    // rtt min/avg/max/mdev = 40.1/40.2/...
    let min: f64 = text
        .lines()
        .find(|l| l.contains("min/avg/max"))
        .and_then(|l| l.split('=').nth(1))
        .and_then(|v| v.trim().split('/').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no RTT in: {text}"));
    assert!((39.0..80.0).contains(&min), "RTT {min} ms with 20 ms each way");
}

#[test]
#[ignore = "needs root"]
fn qos_guarantee_holds_under_contention() {
    require_lab("a real lab (network namespaces)");
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let text = TWO_HOSTS.to_string()
        + r#"[[qos]]
link = "a-b"
side = "a"
[[qos.class]]
name = "gold"
rate = "600mbit"
dport = 5301
[[run]]
name = "gold"
tool = "iperf3"
host = "a"
server = "b"
port = 5301
seconds = 5
group = "contend"
args = ["-O", "1"]
[[run]]
name = "bulk"
tool = "iperf3"
host = "a"
server = "b"
port = 5302
streams = 8
seconds = 5
group = "contend"
args = ["-O", "1"]
"#;
    let mut lab = up(&text);
    let id = lab.plan.run.clone();
    let doc = run(&mut lab, &text);
    drop(lab);
    assert_clean(&id);
    let runs = doc["runs"].as_array().unwrap();
    let rate = |n: &str| runs.iter().find(|r| r["name"] == n).unwrap()["rate_bps"].as_f64().unwrap();
    let (gold, bulk) = (rate("gold"), rate("bulk"));
    eprintln!("gold {gold:.3e} bulk {bulk:.3e}");
    // htb counts frames with their headers (and 24 bytes of wire overhead per frame), so TCP
    // goodput is ~93-96% of a class's rate; unguarded, one flow against eight would get ~1/9.
    assert!(gold >= 0.85 * 600e6, "one guaranteed flow got {gold} bit/s against 8 others");
    assert!(gold + bulk <= 1.1e9, "the link's 1 Gbit/s held: {}", gold + bulk);
    assert_eq!(doc["groups"][0]["members"].as_array().unwrap().len(), 2);
    assert!(doc["groups"][0]["fairness"].as_f64().is_some());
}

/// Fails the n-th command, after running the ones before it for real.
struct FailAt(usize, usize);
impl Executor for FailAt {
    fn run(&mut self, argv: &[String]) -> Result<String, LabError> {
        self.1 += 1;
        if self.1 == self.0 {
            return Err(LabError::Command { argv: argv.join(" "), status: "injected".into(), stderr: String::new() });
        }
        SystemExecutor.run(argv)
    }
    fn spawn(&mut self, job: &Job) -> Result<Box<dyn Process>, LabError> {
        SystemExecutor.spawn(job)
    }
    fn wait_listening(&mut self, pid: u32, port: u16, limit: Duration) -> bool {
        SystemExecutor.wait_listening(pid, port, limit)
    }
    fn wait_path(&mut self, pid: u32, path: &Path, limit: Duration) -> bool {
        SystemExecutor.wait_path(pid, path, limit)
    }
    fn stop(&mut self, pid: u32, start: u64, grace: Duration) {
        SystemExecutor.stop(pid, start, grace)
    }
    fn find_program(&mut self, names: &[&str]) -> Option<PathBuf> {
        SystemExecutor.find_program(names)
    }
}

#[test]
#[ignore = "needs root"]
fn nothing_is_left_after_a_failed_build_or_a_failed_run() {
    require_lab("a real lab (network namespaces)");
    let sc = Scenario::parse(&link_1g()).unwrap();
    for n in [3, 8, 12] {
        let id = new_run_id();
        let r = Lab::up_with(Box::new(FailAt(n, 0)), &sc, Path::new("f.toml"), &id, false, &Shutdown::never());
        assert!(r.is_err());
        assert_clean(&id);
    }
    // A run whose tool fails is reported, and the lab still goes away.
    let bad = link_1g().replace("args = [\"-O\", \"1\"]", "args = [\"--no-such-iperf3-flag\"]");
    let mut lab = up(&bad);
    let id = lab.plan.run.clone();
    let doc = run(&mut lab, &bad);
    assert_eq!(doc["runs"][0]["ok"], false);
    assert!(doc["runs"][0]["error"].as_str().unwrap().contains("exited"), "{}", doc["runs"][0]);
    drop(lab);
    assert_clean(&id);
}

#[test]
#[ignore = "needs root"]
fn a_stale_run_of_a_dead_owner_is_cleaned() {
    require_lab("a real lab (network namespaces)");
    let lab = up(&link_1g());
    let id = lab.plan.run.clone();
    // Pretend the owner died: a pid that has exited.
    let mut dead = Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    dead.wait().unwrap();
    let mut st: RunState = lab.state.clone();
    st.pid = dead_pid;
    st.save().unwrap();
    std::mem::forget(lab); // as if the process were killed: no teardown
    assert!(Path::new("/run/netns").join(format!("{id}-a")).exists());
    assert!(RunState::find(Some(&id)).unwrap().is_stale());
    let cleaned = clean_stale(&mut SystemExecutor);
    assert!(cleaned.contains(&id), "{cleaned:?}");
    assert_clean(&id);
}
