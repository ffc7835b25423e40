//! The inventory: which agents a mesh measures, which tests it runs between every pair of them,
//! and how often — a TOML file, read strictly (unknown keys refused) and checked whole before
//! anything runs.
//!
//! ```toml
//! interval = "6h"                       # a round starts this often (at once if one overran)
//! identity = "/etc/linerate/mesh_key"   # the controller's ed25519 key (`mesh` on every agent)
//!
//! [[agent]]
//! name = "fra-1"
//! address = "198.18.1.1:7878"           # HOST:PORT; the port defaults to 7878
//! host_key = "SHA256:…"                 # the agent's host key fingerprint, as `serve` prints it
//!
//! [[test]]
//! name = "throughput"
//! kind = "tcp-stream"                   # exclusive: never two at once on an agent
//! duration = "10s"
//! streams = 4
//! both_ways = true
//!
//! [[test]]
//! name = "rtt"
//! kind = "tcp-rr"                       # latency: never beside a throughput test on its agents
//! duration = "5s"
//!
//! [[test]]
//! name = "rtt-loaded"
//! kind = "tcp-rr"
//! under_load = true                     # on purpose: beside the throughput tests
//! ```

use crate::schedule::{Class, Limits, TestPlan};
use linerate_model::units;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Most agents in one inventory.
pub const MAX_AGENTS: usize = 4096;
/// Most tests in one inventory.
pub const MAX_TESTS: usize = 16;
/// Longest test.
pub const MAX_TEST_DURATION: Duration = Duration::from_secs(600);
use linerate_model::DEFAULT_PORT;
/// Largest inventory file read.
pub const MAX_FILE: u64 = 4 << 20;

/// Why an inventory was refused.
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    /// The file could not be read.
    #[error("cannot read the inventory {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// It is not valid TOML of this form.
    #[error("inventory {path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong, and where.
        message: String,
    },
}

pub use linerate_proto::bench::TestKind;

/// Whether a test of `kind` measures latency (round trips) rather than throughput.
pub fn is_latency(kind: TestKind) -> bool {
    kind == TestKind::TcpRr
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInventory {
    interval: Option<units::Duration>,
    identity: Option<PathBuf>,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    agent: Vec<RawAgent>,
    #[serde(default)]
    test: Vec<RawTest>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    max_parallel: Option<usize>,
    retries: Option<u32>,
    backoff: Option<units::Duration>,
    connect_timeout: Option<units::Duration>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAgent {
    name: String,
    address: String,
    host_key: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTest {
    name: String,
    kind: TestKind,
    duration: Option<units::Duration>,
    streams: Option<u64>,
    rate: Option<units::Rate>,
    #[serde(default)]
    both_ways: Option<bool>,
    under_load: Option<bool>,
}

/// An agent of the mesh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Agent {
    /// Its name (unique; `[a-z0-9._-]`, at most 63).
    pub name: String,
    /// Host name or address.
    pub host: String,
    /// Its port.
    pub port: u16,
    /// Its host key's fingerprint (`SHA256:` and base64), pinned.
    pub host_key: String,
}

/// A test run between every pair.
#[derive(Debug, Clone, PartialEq)]
pub struct Test {
    /// Its name (unique).
    pub name: String,
    /// What it measures.
    pub kind: TestKind,
    /// How long it runs.
    pub duration: Duration,
    /// Parallel connections.
    pub streams: u64,
    /// Offered rate, bit/s (udp-stream: required).
    pub rate: Option<u64>,
    /// Both directions of every pair, or one.
    pub both_ways: bool,
    /// A latency test measured beside the throughput tests on purpose (`under_load = true`).
    pub under_load: bool,
}

impl Test {
    /// How the scheduler treats it: throughput tests exclusive, latency tests normal (never
    /// beside a throughput test on their agents), or background when asked under load.
    pub fn class(&self) -> Class {
        match (is_latency(self.kind), self.under_load) {
            (false, _) => Class::Exclusive,
            (true, false) => Class::Normal,
            (true, true) => Class::Background,
        }
    }
}

/// A checked inventory.
#[derive(Debug, Clone, PartialEq)]
pub struct Inventory {
    /// Time between round starts (`None`: `--once` only).
    pub interval: Option<Duration>,
    /// The controller's ed25519 identity file.
    pub identity: Option<PathBuf>,
    /// The scheduler's limits.
    pub limits: Limits,
    /// How long to wait for an agent to answer before counting it unreachable.
    pub connect_timeout: Duration,
    /// The agents, in file order (their index is their id).
    pub agents: Vec<Agent>,
    /// The tests.
    pub tests: Vec<Test>,
}

/// A name outside the inventory's name rule.
#[derive(Debug, thiserror::Error)]
#[error("{what} name {name:?}: 1 to 63 of a-z, 0-9, '.', '_', '-'")]
struct BadName {
    what: &'static str,
    name: String,
}

fn check_name(what: &'static str, n: &str) -> Result<(), BadName> {
    if linerate_proto::mesh::is_name(n) {
        Ok(())
    } else {
        Err(BadName { what, name: n.to_string() })
    }
}

/// `HOST[:PORT]`, `[V6]:PORT`, `V6`.
fn parse_agent_address(a: &str) -> Result<(String, u16), String> {
    let bad = || format!("agent address {a:?}: HOST, HOST:PORT or [IPv6]:PORT");
    let a = a.trim();
    if let Some(rest) = a.strip_prefix('[') {
        let (h, p) = rest.split_once(']').ok_or_else(bad)?;
        let port = match p.strip_prefix(':') {
            Some(p) => p.parse().map_err(|_| bad())?,
            None if p.is_empty() => DEFAULT_PORT,
            None => return Err(bad()),
        };
        h.parse::<std::net::Ipv6Addr>().map_err(|_| bad())?;
        return Ok((h.to_string(), port));
    }
    if a.parse::<std::net::Ipv6Addr>().is_ok() {
        return Ok((a.to_string(), DEFAULT_PORT));
    }
    let (h, port) = match a.rsplit_once(':') {
        Some((h, p)) => (h, p.parse::<u16>().map_err(|_| bad())?),
        None => (a, DEFAULT_PORT),
    };
    let host_ok =
        !h.is_empty() && h.len() <= 253 && h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
    if !host_ok || port == 0 {
        return Err(bad());
    }
    Ok((h.to_string(), port))
}

/// The under-load tests can all be scheduled under load (issue 43): each needs a throughput
/// test at least as long as itself on both its agents for the whole of it, so the scheduler
/// starts it only with such a wave ([`crate::schedule`]). A throughput direction (a test one
/// way, or each way of a `both_ways` one) loads every agent of the fleet in as many waves as an
/// under-load direction needs, so the under-load directions must be no more than the throughput
/// directions at least as long as them — counted longest first, each throughput direction
/// covering one under-load direction.
fn check_under_load(tests: &[Test]) -> Result<(), Uncovered> {
    let dirs = |t: &Test| if t.both_ways { 2 } else { 1 };
    let mut loaded: Vec<&Test> = tests.iter().filter(|t| t.under_load).collect();
    loaded.sort_by_key(|t| std::cmp::Reverse(t.duration));
    let mut need = 0usize;
    for t in loaded {
        need += dirs(t);
        let have: usize = tests.iter().filter(|x| !is_latency(x.kind) && x.duration >= t.duration).map(dirs).sum();
        if need > have {
            return Err(Uncovered { test: t.name.clone(), seconds: t.duration.as_secs_f64(), have, need });
        }
    }
    Ok(())
}

/// An under-load test the inventory's throughput tests cannot cover ([`check_under_load`]).
#[derive(Debug, thiserror::Error)]
#[error(
    "test {test:?}: under_load needs a throughput test at least as long ({seconds} s) on both its agents for all of \
     it, and {}: add one, shorten it, or set both_ways = false",
    if *have == 0 {
        "no throughput test (tcp-stream, udp-stream) is".to_string()
    } else {
        format!("the throughput tests at least as long as it cover {have} of the {need} under-load directions")
    }
)]
struct Uncovered {
    test: String,
    seconds: f64,
    have: usize,
    need: usize,
}

/// Why the controller's key cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum ControllerKeyError {
    /// No `--identity`, no `identity` in the inventory, and no config directory.
    #[error("no identity: give --identity FILE or `identity` in the inventory")]
    NoIdentity,
    /// The key file cannot be read, is open to others, or holds no ed25519 key.
    #[error("the controller's key {} (make one with `linerate keygen --type ed25519`)", .path.display())]
    Load {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: linerate_net::EngineError,
    },
}

impl Inventory {
    /// The controller's ed25519 identity: `given` (`--identity`), else the inventory's
    /// `identity`, else `id_ed25519` in the config directory. With `own_group`, a file its group
    /// may read (never write) is taken when that group is this process's own
    /// (`--identity-group-readable`: a Kubernetes Secret mounted with fsGroup, 0440).
    pub fn controller_identity(
        &self,
        given: Option<&Path>,
        own_group: bool,
    ) -> Result<linerate_net::auth::keys::Identity, ControllerKeyError> {
        use linerate_net::auth::keys::{default_identity, Identity};
        let path = given
            .map(Path::to_path_buf)
            .or_else(|| self.identity.clone())
            .or_else(default_identity)
            .ok_or(ControllerKeyError::NoIdentity)?;
        Identity::load_with(&path, own_group).map_err(|source| ControllerKeyError::Load { path, source })
    }

    /// Reads and checks the inventory at `path`.
    pub fn load(path: &Path) -> Result<Inventory, InventoryError> {
        use std::io::Read;
        let p = path.display().to_string();
        let mut text = String::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_FILE + 1).read_to_string(&mut text))
            .map_err(|source| InventoryError::Read { path: p.clone(), source })?;
        if text.len() as u64 > MAX_FILE {
            return Err(InventoryError::Invalid { path: p, message: format!("larger than {MAX_FILE} bytes") });
        }
        Inventory::parse(&text).map_err(|message| InventoryError::Invalid { path: p, message })
    }

    /// Checks an inventory's text; the message names what is wrong.
    pub fn parse(text: &str) -> Result<Inventory, String> {
        let raw: RawInventory = toml::from_str(text).map_err(|e| e.to_string())?;
        let mut agents = Vec::with_capacity(raw.agent.len());
        for a in raw.agent {
            check_name("agent", &a.name).map_err(|e| e.to_string())?;
            if agents.iter().any(|x: &Agent| x.name == a.name) {
                return Err(format!("agent {:?} is listed twice", a.name));
            }
            let (host, port) = parse_agent_address(&a.address)?;
            if agents.iter().any(|x: &Agent| x.host == host && x.port == port) {
                return Err(format!("agent {:?}: address {} is another agent's", a.name, a.address));
            }
            let fp = a.host_key.trim();
            let b64 = fp.strip_prefix("SHA256:").unwrap_or("");
            if b64.is_empty()
                || b64.len() > 64
                || !b64.bytes().all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b))
            {
                return Err(format!(
                    "agent {:?}: host_key {:?} is not a fingerprint (SHA256:…, as `linerate serve` prints it)",
                    a.name, a.host_key
                ));
            }
            agents.push(Agent { name: a.name, host, port, host_key: fp.to_string() });
        }
        if agents.len() < 2 || agents.len() > MAX_AGENTS {
            return Err(format!("{} agents: a mesh needs 2 to {MAX_AGENTS}", agents.len()));
        }
        let mut tests = Vec::with_capacity(raw.test.len());
        for t in raw.test {
            check_name("test", &t.name).map_err(|e| e.to_string())?;
            if tests.iter().any(|x: &Test| x.name == t.name) {
                return Err(format!("test {:?} is listed twice", t.name));
            }
            let what = format!("test {:?}", t.name);
            let d = t.duration.map_or(Duration::from_secs(10), units::Duration::get);
            if d < Duration::from_secs(1) || d > MAX_TEST_DURATION {
                return Err(format!("{what}: duration from 1 s to {} s", MAX_TEST_DURATION.as_secs()));
            }
            let streams = t.streams.unwrap_or(1);
            if !(1..=128).contains(&streams) {
                return Err(format!("{what}: streams from 1 to 128"));
            }
            if !matches!(t.kind, TestKind::TcpStream | TestKind::UdpStream | TestKind::TcpRr) {
                return Err(format!("{what}: kind {}: a mesh runs tcp-stream, udp-stream or tcp-rr", t.kind.name()));
            }
            let rate = t.rate.map(units::Rate::bits_per_s);
            if t.kind == TestKind::UdpStream && rate.is_none() {
                return Err(format!("{what}: a udp-stream test needs a rate"));
            }
            let under_load = t.under_load.unwrap_or(false);
            if under_load && !is_latency(t.kind) {
                return Err(format!("{what}: under_load is for latency tests (tcp-rr), not {}", t.kind.name()));
            }
            let both_ways = t.both_ways.unwrap_or(!is_latency(t.kind));
            tests.push(Test { name: t.name, kind: t.kind, duration: d, streams, rate, both_ways, under_load });
        }
        if tests.is_empty() || tests.len() > MAX_TESTS {
            return Err(format!("{} tests: 1 to {MAX_TESTS}", tests.len()));
        }
        check_under_load(&tests).map_err(|e| e.to_string())?;
        let interval = raw.interval.map(units::Duration::get);
        if interval.is_some_and(|i| i < Duration::from_secs(60)) {
            return Err("interval: at least 1 minute".into());
        }
        let mut limits = Limits::default();
        if let Some(m) = raw.limits.max_parallel {
            if !(1..=1024).contains(&m) {
                return Err("limits.max_parallel: 1 to 1024".into());
            }
            limits.max_parallel = m;
            limits.max_shared = m;
        }
        if let Some(r) = raw.limits.retries {
            limits.retries = r.min(10);
        }
        if let Some(b) = raw.limits.backoff {
            limits.backoff = b.get().clamp(Duration::from_millis(100), Duration::from_secs(600));
        }
        let connect_timeout = raw
            .limits
            .connect_timeout
            .map_or(Duration::from_secs(10), units::Duration::get)
            .clamp(Duration::from_secs(1), Duration::from_secs(120));
        Ok(Inventory { interval, identity: raw.identity, limits, connect_timeout, agents, tests })
    }

    /// The tests as the scheduler sees them.
    pub fn plans(&self) -> Vec<TestPlan> {
        self.tests.iter().map(|t| TestPlan { class: t.class(), both_ways: t.both_ways, duration: t.duration }).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_controller_key_is_the_flag_s_else_the_inventory_s_and_group_read_only_when_asked() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let (flag, listed) = (dir.path().join("flag_key"), dir.path().join("listed_key"));
        let key = linerate_net::auth::keys::Identity::write_new(&flag, "test").unwrap();
        let t = two_agents("[[test]]\nname = \"x\"\nkind = \"tcp-stream\"\n");
        let inv = Inventory { identity: Some(listed.clone()), ..Inventory::parse(&t).unwrap() };
        let got = inv.controller_identity(Some(&flag), false).unwrap();
        assert_eq!(got.public().to_line(""), key.public().to_line(""), "--identity first");
        let e = inv.controller_identity(None, false).unwrap_err().to_string();
        assert!(e.starts_with(&format!("the controller's key {} (make one with", listed.display())), "{e}");
        // 0440 (a Secret with fsGroup): refused unless asked, then taken (the group is our own).
        std::fs::set_permissions(&flag, std::fs::Permissions::from_mode(0o440)).unwrap();
        assert!(inv.controller_identity(Some(&flag), false).is_err(), "group-readable refused by default");
        assert!(inv.controller_identity(Some(&flag), true).is_ok(), "--identity-group-readable");
    }

    const FP: &str = "SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU";

    fn two_agents(tests: &str) -> String {
        format!(
            "interval = \"1h\"\n[[agent]]\nname = \"a\"\naddress = \"198.18.1.1\"\nhost_key = \"{FP}\"\n\
             [[agent]]\nname = \"b\"\naddress = \"[fd00::2]:9000\"\nhost_key = \"{FP}\"\n{tests}"
        )
    }

    #[test]
    fn a_good_inventory_reads_with_its_defaults() {
        let inv = Inventory::parse(&two_agents(
            "[[test]]\nname = \"tput\"\nkind = \"tcp-stream\"\nstreams = 4\n\
             [[test]]\nname = \"rtt\"\nkind = \"tcp-rr\"\nduration = \"5s\"\n\
             [[test]]\nname = \"loaded\"\nkind = \"tcp-rr\"\nunder_load = true\n",
        ))
        .unwrap();
        assert_eq!(inv.interval, Some(Duration::from_secs(3600)));
        assert_eq!((inv.agents[0].host.as_str(), inv.agents[0].port), ("198.18.1.1", DEFAULT_PORT));
        assert_eq!((inv.agents[1].host.as_str(), inv.agents[1].port), ("fd00::2", 9000));
        assert_eq!(inv.tests[0].duration, Duration::from_secs(10));
        assert!(inv.tests[0].both_ways && !inv.tests[1].both_ways, "throughput both ways, latency one");
        assert_eq!(
            inv.plans().iter().map(|p| p.class).collect::<Vec<_>>(),
            [Class::Exclusive, Class::Normal, Class::Background]
        );
    }

    #[test]
    fn bad_inventories_are_refused_saying_what_is_wrong() {
        let t = "[[test]]\nname = \"x\"\nkind = \"tcp-stream\"\n";
        for (text, says) in [
            (two_agents(""), "0 tests"),
            (two_agents("[[test]]\nname = \"x\"\nkind = \"ping\"\n"), "unknown variant"),
            (two_agents("[[test]]\nname = \"x\"\nkind = \"tcp-crr\"\n"), "a mesh runs"),
            (two_agents("[[test]]\nname = \"x\"\nkind = \"tcp-stream\"\nduration = \"1h\"\n"), "duration from"),
            (two_agents("[[test]]\nname = \"x\"\nkind = \"udp-stream\"\n"), "needs a rate"),
            (two_agents(&format!("{t}under_load = true\n")), "under_load is for latency tests"),
            // issue 43: an under-load test the throughput tests cannot cover for all of it
            (
                two_agents("[[test]]\nname = \"l\"\nkind = \"tcp-rr\"\nunder_load = true\n"),
                "test \"l\": under_load needs a throughput test at least as long (10 s) on both its agents for all \
                 of it, and no throughput test (tcp-stream, udp-stream) is",
            ),
            (
                two_agents(&format!(
                    "{t}duration = \"5s\"\n[[test]]\nname = \"l\"\nkind = \"tcp-rr\"\nunder_load = true\n"
                )),
                "no throughput test",
            ),
            (
                two_agents(&format!(
                    "{t}both_ways = false\n[[test]]\nname = \"l\"\nkind = \"tcp-rr\"\nunder_load = true\n\
                     [[test]]\nname = \"m\"\nkind = \"tcp-rr\"\nunder_load = true\n"
                )),
                "cover 1 of the 2 under-load directions",
            ),
            (two_agents("[[test]]\nname = \"x\"\nkind = \"udp-stream\"\nrate = \"fast\"\n"), "rate = \"fast\""),
            (two_agents("[[test]]\nname = \"x\"\nkind = \"tcp-rr\"\nduration = \"5 weeks\"\n"), "unknown unit"),
            (two_agents(t).replace("\"1h\"", "\"1 fortnight\""), "interval = \"1 fortnight\""),
            (two_agents(&format!("{t}{t}")), "listed twice"),
            (two_agents(&format!("{t}colour = \"red\"\n")), "unknown field"),
            (two_agents(t).replace("198.18.1.1", "a b"), "agent address"),
            (two_agents(t).replace("name = \"b\"", "name = \"a\""), "listed twice"),
            (two_agents(t).replace("name = \"b\"", "name = \"B/\""), "agent name"),
            (two_agents(t).replacen(FP, "ssh-ed25519 AAAA", 1), "not a fingerprint"),
            (two_agents(t).replace("\"1h\"", "\"10s\""), "at least 1 minute"),
            (two_agents(t).replace("[fd00::2]:9000", "198.18.1.1:7878"), "another agent's"),
            (format!("[[agent]]\nname = \"a\"\naddress = \"h\"\nhost_key = \"{FP}\"\n{t}"), "a mesh needs 2"),
        ] {
            let e = Inventory::parse(&text).unwrap_err();
            assert!(e.contains(says), "{says:?} not in {e:?}\n{text}");
        }
    }
}
