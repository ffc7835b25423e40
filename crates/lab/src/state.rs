//! The state file of a run (`/run/linerate/lab/<run>.json`): who owns it, and every namespace,
//! process and temporary directory it created, so that anything can be torn down later, by
//! `down`, by a signal handler, or by the next `up` when the owner died; and `lab status`, the
//! labs that are up, rendered from those files.

use crate::exec::{alive, exit_within, proc_start, signal, Executor};
use crate::LabError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A process the run started.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProcRec {
    /// Its pid.
    pub pid: u32,
    /// Its start time (clock ticks since boot), so a reused pid is never signalled.
    pub start: u64,
    /// What it is (for status).
    pub what: String,
}

/// One lab as `lab status --json` lists it (keys in name order).
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct LabStatus<'a> {
    /// Left up on purpose (`up --detach`).
    pub detached: bool,
    /// Scenario file.
    pub file: &'a str,
    /// The lab's description.
    pub lab: &'a linerate_model::doc::lab::LabDescription,
    /// Whether the owner process is alive.
    pub owner_alive: bool,
    /// Owner process.
    pub pid: u32,
    /// Run id.
    pub run: &'a str,
    /// Scenario name.
    pub scenario: &'a str,
    /// Not detached and the owner is gone.
    pub stale: bool,
}

/// Everything about one run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunState {
    /// Run id.
    pub run: String,
    /// Scenario name.
    pub scenario: String,
    /// Scenario file.
    pub file: String,
    /// Owner process.
    pub pid: u32,
    /// Owner's start time (clock ticks since boot).
    pub pid_start: u64,
    /// Left up on purpose (`up --detach`): not stale when the owner exits.
    pub detached: bool,
    /// Seconds since the epoch.
    pub created_unix: u64,
    /// Namespaces, recorded before they are created.
    pub namespaces: Vec<String>,
    /// Host name to namespace.
    pub hosts: BTreeMap<String, String>,
    /// Processes started in the lab.
    pub processes: Vec<ProcRec>,
    /// Temporary directories (keys, trees, sshd config).
    pub temp_dirs: Vec<PathBuf>,
    /// The lab's description (as in the results document).
    pub description: linerate_model::doc::lab::LabDescription,
    /// linerate's link emulators: link name to control socket (`lab set`).
    #[serde(default)]
    pub emulators: BTreeMap<String, PathBuf>,
}

/// Where state files live: `$LINERATE_LAB_DIR` or `/run/linerate/lab`.
pub fn state_dir() -> PathBuf {
    std::env::var_os("LINERATE_LAB_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/run/linerate/lab"))
}

impl RunState {
    /// The state file's path.
    pub fn path(&self) -> PathBuf {
        state_dir().join(format!("{}.json", self.run))
    }

    /// Writes the state file atomically (temp + rename).
    pub fn save(&self) -> Result<(), LabError> {
        let dir = state_dir();
        std::fs::create_dir_all(&dir).map_err(|e| LabError::Io(format!("creating {}", dir.display()), e))?;
        let tmp = dir.join(format!(".{}.json.tmp", self.run));
        let text = serde_json::to_vec_pretty(self)
            .map_err(|source| LabError::Encode { what: self.path().display().to_string(), source })?;
        std::fs::write(&tmp, text).map_err(|e| LabError::Io(format!("writing {}", tmp.display()), e))?;
        std::fs::rename(&tmp, self.path()).map_err(|e| LabError::Io(format!("renaming {}", tmp.display()), e))
    }

    /// Reads one state file.
    pub fn load(path: &Path) -> Result<RunState, LabError> {
        let text = std::fs::read(path).map_err(|e| LabError::Io(format!("reading {}", path.display()), e))?;
        if text.len() > 16 << 20 {
            return Err(LabError::StateFileTooLarge { path: path.to_path_buf(), len: text.len() });
        }
        serde_json::from_slice(&text).map_err(|source| LabError::StateFile { path: path.to_path_buf(), source })
    }

    /// Every run with a state file, oldest first.
    pub fn list() -> Vec<RunState> {
        let mut v: Vec<RunState> = std::fs::read_dir(state_dir())
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .filter_map(|p| RunState::load(&p).ok())
            .collect();
        v.sort_by_key(|s| s.created_unix);
        v
    }

    /// Finds a run by id, or the only run when `id` is None.
    pub fn find(id: Option<&str>) -> Result<RunState, LabError> {
        let all = Self::list();
        match id {
            Some(id) => {
                all.into_iter().find(|s| s.run == id).ok_or_else(|| LabError::UnknownRun { id: id.to_string() })
            }
            None => match all.len() {
                0 => Err(LabError::NoLab),
                1 => Ok(all.into_iter().next().expect("one element")),
                count => Err(LabError::SeveralLabs { count }),
            },
        }
    }

    /// Whether the owner process is alive.
    pub fn owner_alive(&self) -> bool {
        alive(self.pid, self.pid_start)
    }

    /// Asks a live owner (`lab up` in the foreground, `lab run`) to tear down: SIGTERM, then
    /// waits up to `limit` for it to exit (it removes the state file first). Returns whether the
    /// state file went.
    pub fn ask_owner_to_stop(&self, limit: Duration) -> bool {
        if !self.owner_alive() || self.pid == std::process::id() {
            return false;
        }
        signal(self.pid, rustix::process::Signal::TERM);
        // The owner removes the state file as it tears down, then exits: await its exit.
        exit_within(self.pid, self.pid_start, limit);
        !self.path().exists()
    }

    /// Stale: not detached and the owner is gone.
    pub fn is_stale(&self) -> bool {
        !self.detached && !self.owner_alive()
    }

    /// The run as `lab status --json` lists it.
    pub fn status(&self) -> LabStatus<'_> {
        LabStatus {
            detached: self.detached,
            file: &self.file,
            lab: &self.description,
            owner_alive: self.owner_alive(),
            pid: self.pid,
            run: &self.run,
            scenario: &self.scenario,
            stale: self.is_stale(),
        }
    }

    /// The namespace of `host`.
    pub fn netns(&self, host: &str) -> Result<&str, LabError> {
        self.hosts.get(host).map(String::as_str).ok_or_else(|| LabError::UnknownHost {
            run: self.run.clone(),
            host: host.to_string(),
            hosts: self.hosts.keys().cloned().collect(),
        })
    }

    /// Runs `cmd` inside the namespace of `host` (`lab exec`, through `ip netns exec`): its exit
    /// status, which `lab exec` passes on.
    pub fn exec(&self, host: &str, cmd: &[String]) -> Result<std::process::ExitStatus, LabError> {
        let ns = self.netns(host)?;
        std::process::Command::new("ip")
            .args(["netns", "exec", ns])
            .args(cmd)
            .status()
            .map_err(|e| LabError::Io(format!("running ip netns exec {ns}"), e))
    }

    /// `lab set`'s request to a link's emulator: `stats` alone, or the `changes` (`rate=1G`,
    /// `loss=1%`, ...) in direction `dir` (`both`, `a>b`, `b>a`).
    pub fn set_request(dir: &str, changes: &[String]) -> String {
        if changes == ["stats"] {
            "stats".to_string()
        } else {
            format!("set {dir} {}", changes.join(" "))
        }
    }

    /// Asks the emulator of `link` `request` (`lab set`); its one-line answer.
    pub fn ask_emulator(&self, link: &str, request: &str) -> Result<String, LabError> {
        let Some(sock) = self.emulators.get(link) else {
            return Err(LabError::UnknownLink {
                run: self.run.clone(),
                link: link.to_string(),
                links: self.emulators.keys().cloned().collect(),
            });
        };
        crate::emu::ask(sock, request)
    }

    /// Removes everything the run created: its processes (by recorded pid, then any process
    /// left inside its namespaces), its namespaces (and with them every veth, bridge, ifb and
    /// qdisc), its temporary directories, and finally the state file. Best effort: returns
    /// what could not be removed.
    pub fn teardown(&self, ex: &mut dyn Executor) -> Vec<String> {
        let mut problems = Vec::new();
        for p in &self.processes {
            ex.stop(p.pid, p.start, Duration::from_secs(2));
        }
        for ns in &self.namespaces {
            if !Path::new("/run/netns").join(ns).exists() {
                continue;
            }
            // Processes still inside the run's own namespaces (e.g. from `lab exec`).
            if let Ok(out) = ex.run(&["ip".into(), "netns".into(), "pids".into(), ns.clone()]) {
                for pid in out.split_whitespace().filter_map(|p| p.parse::<u32>().ok()) {
                    if let Some(st) = proc_start(pid) {
                        ex.stop(pid, st, Duration::from_secs(1));
                    }
                }
            }
            if let Err(e) = ex.run(&["ip".into(), "netns".into(), "del".into(), ns.clone()]) {
                problems.push(e.to_string());
            }
        }
        for d in &self.temp_dirs {
            if d.exists() {
                if let Err(e) = std::fs::remove_dir_all(d) {
                    problems.push(format!("removing {}: {e}", d.display()));
                }
            }
        }
        if problems.is_empty() {
            let _ = std::fs::remove_file(self.path());
        }
        problems
    }
}

/// `lab down`: each of `runs` torn down, by its owner when one is alive (asked to within
/// `limit`), else here; `tell` hears a line for each, and each problem. Whether every run went
/// without a problem.
pub fn down(runs: Vec<RunState>, limit: Duration, ex: &mut dyn Executor, tell: &mut dyn FnMut(&str)) -> bool {
    let mut ok = true;
    for s in runs {
        if s.ask_owner_to_stop(limit) {
            tell(&format!("lab {} torn down by its owner (pid {})", s.run, s.pid));
            continue;
        }
        let problems = s.teardown(ex);
        for l in crate::show::down_lines(&s.run, &problems) {
            tell(&l);
        }
        ok &= problems.is_empty();
    }
    ok
}

/// Tears down every stale run (owner dead, not detached); returns their ids.
pub fn clean_stale(ex: &mut dyn Executor) -> Vec<String> {
    let mut cleaned = Vec::new();
    for s in RunState::list() {
        if s.is_stale() {
            let problems = s.teardown(ex);
            if problems.is_empty() {
                cleaned.push(s.run.clone());
            }
        }
    }
    cleaned
}

/// `lab status --json`: every lab that is up, with its owner's state and its description, as
/// one pretty JSON array.
pub fn status_json(runs: &[RunState]) -> Result<String, LabError> {
    let lines: Vec<LabStatus<'_>> = runs.iter().map(RunState::status).collect();
    // Through a JSON value, whose maps keep their keys sorted: every level of the document lists
    // its keys in name order, as it always did.
    let encode = |source| LabError::Encode { what: "lab status".into(), source };
    let sorted = serde_json::to_value(&lines).map_err(encode)?;
    serde_json::to_string_pretty(&sorted).map_err(encode)
}

/// `lab status`: a line per lab (run, scenario, file, who owns it) and a line per host with its
/// interfaces' addresses.
pub fn status_text(runs: &[RunState]) -> String {
    let mut o = String::new();
    if runs.is_empty() {
        o.push_str("no lab is up\n");
    }
    for s in runs {
        let how = match (s.detached, s.owner_alive()) {
            (true, _) => "detached".to_string(),
            (false, true) => format!("owned by pid {}", s.pid),
            (false, false) => "stale (owner gone; the next `lab up` or `lab down` removes it)".to_string(),
        };
        o.push_str(&format!("{}  {}  {}  {}\n", s.run, s.scenario, s.file, how));
        for (name, h) in &s.description.hosts {
            let addrs: Vec<String> = h.interfaces.iter().map(|i| format!("{} {}", i.name, i.addr)).collect();
            o.push_str(&format!("  {name:<12} {}\n", addrs.join(", ")));
        }
    }
    o
}

/// `lab status` of every lab that is up: [`status_json`] with its closing newline (`json`), else
/// [`status_text`].
pub fn status(json: bool) -> Result<String, LabError> {
    let runs = RunState::list();
    Ok(if json { status_json(&runs)? + "\n" } else { status_text(&runs) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lab_set_asks_for_stats_alone_or_for_the_changes_in_a_direction() {
        let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(RunState::set_request("both", &words(&["stats"])), "stats");
        assert_eq!(RunState::set_request("a>b", &words(&["rate=1G", "loss=1%"])), "set a>b rate=1G loss=1%");
        assert_eq!(RunState::set_request("both", &words(&["stats", "loss=1%"])), "set both stats loss=1%");
    }

    #[test]
    fn status_lists_each_lab_its_owner_and_its_hosts() {
        use linerate_model::doc::lab::{LabHost, LabInterface};
        let iface =
            |name: &str, addr: &str| LabInterface { name: name.into(), addr: addr.into(), link: "h1-h2".into() };
        let mut description = linerate_model::doc::lab::LabDescription::default();
        description
            .hosts
            .insert("h1".into(), LabHost { ns: "lrT.h1".into(), interfaces: vec![iface("eth0", "198.18.0.1/24")] });
        description
            .hosts
            .insert("h2".into(), LabHost { ns: "lrT.h2".into(), interfaces: vec![iface("eth0", "198.18.0.2/24")] });
        let run = RunState {
            run: "lrT".into(),
            scenario: "two-hosts".into(),
            file: "scenarios/01.toml".into(),
            // No such process: the owner is gone, but the lab was left up on purpose.
            pid: u32::MAX - 1,
            pid_start: 1,
            detached: true,
            created_unix: 0,
            namespaces: Vec::new(),
            hosts: BTreeMap::new(),
            processes: Vec::new(),
            temp_dirs: Vec::new(),
            description,
            emulators: BTreeMap::new(),
        };
        insta::assert_snapshot!(status_text(std::slice::from_ref(&run)));
        insta::assert_snapshot!(status_json(&[run]).unwrap());
        assert_eq!(status_text(&[]), "no lab is up\n");
    }
}
