//! Runs a scenario's measurements inside a lab that is up: starts the servers they need
//! (linerate serve, a throwaway sshd, iperf3 -s) in the server hosts, runs the clients (alone,
//! or a group at once, repeated), parses what they print, reads the machine's busy CPU time
//! around each group, checks every copy against its source byte for byte once the clock has
//! stopped, and assembles the results document (schema `linerate.lab/1`). Trees, copies and
//! keys live in a fresh working directory on tmpfs (`/dev/shm`) unless the scenario's `workdir`
//! says otherwise. Servers are stopped by pid when the runner ends.

use crate::exec::proc_start;
use crate::exec::{Executor, Job, Killer, Process};
use crate::lab::Lab;
use crate::scenario::{fmt_ip, CpMode, RunSpec, Scenario, Tool};
use crate::LabError;
use linerate_model::doc::bench::{BenchDocument, CpuShare};
use linerate_model::doc::cp::CpSummary;
use linerate_model::doc::lab::{
    CpuBusy, GroupRecord, Guarantee, Interval, LabDocument, LabRun, LabScenario, Machine, RawDoc, RunCpu, SweepStep,
    LAB_SCHEMA, START_TOLERANCE_MS,
};
use linerate_model::doc::ToolInfo;
use linerate_model::shutdown::Shutdown;
use linerate_model::stats::jain;
use linerate_model::units::format_rate;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use linerate_model::DEFAULT_PORT;
/// Port of the lab's sshd.
pub const SSH_PORT: u16 = 2222;
/// Largest tool output read back (bytes).
const MAX_OUTPUT: u64 = 64 << 20;
/// Where the working directory is made unless the scenario's `workdir` says otherwise: tmpfs,
/// so that copies, like iperf3, move memory to memory.
pub const DEFAULT_WORKDIR: &str = "/dev/shm";
/// The name of the lab's sshd in the rclone configuration the runner writes.
const RCLONE_REMOTE: &str = "lab";

/// How to run.
pub struct RunnerConfig<'a> {
    /// The linerate binary for serve, bench, cp, keygen and mktree (the CLI passes its own).
    pub linerate: PathBuf,
    /// Stopped by the caller's signals (or a closed output): the runs end, their processes
    /// killed, and [`run_all`] returns [`LabError::Interrupted`].
    pub stop: &'a Shutdown,
    /// Progress lines go here.
    pub log: &'a mut dyn FnMut(&str),
}

/// One client instance of a group.
#[derive(Debug, Clone)]
struct Instance {
    name: String,
    spec: usize,
    host: String,
    via: Option<String>,
    server: String,
    addr: u32,
    port: u16,
}

/// Runs that go at once, `repeat` times.
#[derive(Debug)]
struct Group {
    name: String,
    sweep: Option<SweepStep>,
    repeat: u32,
    members: Vec<Instance>,
}

fn groups(sc: &Scenario, lab: &Lab) -> Result<Vec<Group>, LabError> {
    let mut out: Vec<Group> = Vec::new();
    let mut next_port = 5201u16;
    for (i, r) in sc.runs.iter().enumerate() {
        let base = r.name.clone().unwrap_or_else(|| format!("{}-{}", r.tool.name(), i + 1));
        let hosts = sc.run_hosts(r)?;
        let vias: Vec<Option<&str>> =
            if r.vias.is_empty() { vec![r.via.as_deref()] } else { r.vias.iter().map(|v| Some(v.as_str())).collect() };
        let mut all = Vec::new();
        for h in &hosts {
            for v in &vias {
                let port = match (r.tool, r.port) {
                    (_, Some(p)) => p,
                    (Tool::Iperf3, None) => {
                        next_port = next_port.wrapping_add(1);
                        next_port - 1
                    }
                    (Tool::Bench, None) => DEFAULT_PORT,
                    (Tool::Cp, None) if !r.mode.unwrap_or_default().over_ssh() => DEFAULT_PORT,
                    _ => SSH_PORT,
                };
                let name = match (hosts.len() > 1, vias.len() > 1) {
                    (false, false) => base.clone(),
                    (true, false) => format!("{base}@{h}"),
                    (_, true) => format!("{base}@{h}/{}", v.unwrap_or("")),
                };
                all.push(Instance {
                    name,
                    spec: i,
                    host: h.clone(),
                    via: v.map(str::to_string),
                    server: r.server.clone(),
                    addr: lab.plan.server_addr(h, &r.server, *v)?,
                    port,
                });
            }
        }
        if !r.sweep.is_empty() {
            for &n in &r.sweep {
                out.push(Group {
                    name: format!("{base}/{n}"),
                    sweep: Some(SweepStep { base: base.clone(), instances: n as u32 }),
                    repeat: r.repeat.unwrap_or(1),
                    members: all[..n].to_vec(),
                });
            }
            continue;
        }
        let members = all;
        let gname = r.group.clone().unwrap_or(base);
        match out.iter_mut().find(|g| g.name == gname && r.group.is_some()) {
            Some(g) => {
                g.repeat = g.repeat.max(r.repeat.unwrap_or(1));
                g.members.extend(members);
            }
            None => out.push(Group { name: gname, sweep: None, repeat: r.repeat.unwrap_or(1), members }),
        }
    }
    Ok(out)
}

/// What a server host's `linerate serve` must admit so that none of the scenario's bench
/// clients is refused: the agent's defaults (8 tests at once, 10,000 connections a test, an
/// hour a test) raised to what the scenario asks (issue 29: 12 and 16 guests against one
/// agent were refused as busy by the default 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct AgentCaps {
    /// `--max-tests`: twice the most bench clients of one group against the host, since the
    /// next group's tests may be admitted while the agent still winds down the last group's.
    tests: usize,
    /// `--max-connections`: the most streams of one bench run against the host.
    connections: u32,
    /// `--max-duration`, seconds: the longest bench run's, plus a minute of warm-up and slack.
    duration_s: u64,
}

impl Default for AgentCaps {
    fn default() -> Self {
        AgentCaps { tests: 8, connections: 10_000, duration_s: 3600 }
    }
}

/// Each server host's [`AgentCaps`], from the groups that run bench clients against it.
fn agent_caps(sc: &Scenario, gs: &[Group]) -> BTreeMap<String, AgentCaps> {
    let mut caps: BTreeMap<String, AgentCaps> = BTreeMap::new();
    for g in gs {
        let mut per_host: BTreeMap<&str, usize> = BTreeMap::new();
        for inst in g.members.iter().filter(|i| sc.runs[i.spec].tool == Tool::Bench) {
            let spec = &sc.runs[inst.spec];
            *per_host.entry(&inst.server).or_default() += 1;
            let c = caps.entry(inst.server.clone()).or_default();
            c.connections = c.connections.max(spec.streams.unwrap_or(1));
            c.duration_s = c.duration_s.max(u64::from(spec.seconds.unwrap_or(10)) + 60);
        }
        for (host, n) in per_host {
            let c = caps.entry(host.to_string()).or_default();
            c.tests = c.tests.max(2 * n);
        }
    }
    caps
}

/// The argv that runs `prog args` inside namespace `ns`.
fn in_ns(ns: &str, prog: &Path, args: &[String]) -> Vec<String> {
    let mut v: Vec<String> = vec!["ip".into(), "netns".into(), "exec".into(), ns.into(), prog.to_string_lossy().into()];
    v.extend(args.iter().cloned());
    v
}

/// Finds a program through the lab's executor, or says which package to install.
fn program(lab: &mut Lab, name: &str, package: &str) -> Result<PathBuf, LabError> {
    lab.exec()
        .find_program(&[name])
        .ok_or_else(|| LabError::MissingTool { program: name.to_string(), package: package.to_string() })
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> LabError {
    let w = what.into();
    move |e| LabError::Io(w, e)
}

fn read_capped(p: &Path) -> String {
    let mut s = String::new();
    if let Ok(f) = File::open(p) {
        let _ = f.take(MAX_OUTPUT).read_to_string(&mut s);
    }
    s
}

fn tail(s: &str) -> String {
    let t = s.trim();
    let start = t.char_indices().rev().nth(400).map(|(i, _)| i).unwrap_or(0);
    t[start..].chars().map(|c| if c.is_control() && c != '\n' { '?' } else { c }).collect()
}

/// Sum of the sizes of the regular files under `dir`.
fn tree_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(e.path()),
                Ok(t) if t.is_file() => total += e.metadata().map(|m| m.len()).unwrap_or(0),
                _ => {}
            }
        }
    }
    total
}

/// The file sizes of a generated tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Sizes {
    /// Log-normal with this mean (`file_size`, default 1.6 MB).
    Mean(u64),
    /// Uniform between the two (`min_size`, `max_size`).
    Uniform(u64, u64),
}

impl Sizes {
    /// A run's: uniform when it gives `min_size` and `max_size`, else log-normal.
    fn of(spec: &RunSpec) -> Sizes {
        match (spec.min_size, spec.max_size) {
            (Some(min), Some(max)) => Sizes::Uniform(min, max),
            _ => Sizes::Mean(spec.file_size.unwrap_or(1_600_000)),
        }
    }

    /// `linerate mktree`'s flags for them.
    fn args(self) -> Vec<String> {
        match self {
            Sizes::Mean(m) => vec!["--mean-size".into(), m.to_string()],
            Sizes::Uniform(a, b) => vec!["--min-size".into(), a.to_string(), "--max-size".into(), b.to_string()],
        }
    }

    /// Their part of the tree directory's name.
    fn label(self) -> String {
        match self {
            Sizes::Mean(m) => m.to_string(),
            Sizes::Uniform(a, b) => format!("{a}-{b}"),
        }
    }
}

/// The throwaway sshd's files.
#[derive(Debug, Clone, Default)]
struct SshKeys {
    /// The client's private key.
    user_key: PathBuf,
    /// The host key, pinned under the alias `linerate-lab`.
    known_hosts: PathBuf,
    /// The sshd's configuration.
    config: PathBuf,
    /// Its host key's public line (`ssh-ed25519 AAAA… comment`).
    host_pub: String,
}

/// The runner's long-lived things: servers, keys, trees.
struct Env {
    tmp: PathBuf,
    linerate: PathBuf,
    key: Option<PathBuf>,
    ssh: Option<SshKeys>,
    serve: BTreeMap<String, (u32, u64, PathBuf)>, // host -> (pid, start, root)
    sshd: BTreeMap<String, (u32, u64)>,
    /// ssh master connections: (client namespace, server address, port) -> control socket.
    masters: BTreeMap<(String, String, u16), PathBuf>,
    trees: BTreeMap<(u64, Sizes, u32), (PathBuf, u64)>,
    /// What each server host's `linerate serve` must admit ([`agent_caps`]).
    caps: BTreeMap<String, AgentCaps>,
    servers: Vec<(u32, u64)>,
    children: Vec<Box<dyn Process>>, // the servers' handles, to reap them once stopped
    user: String,
}

/// `path` as an argument.
fn arg(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

impl Env {
    /// Nothing started yet; the working directory `tmp` exists.
    fn new(tmp: PathBuf, linerate: &Path) -> Env {
        let user =
            if crate::is_root() { "root".to_string() } else { std::env::var("USER").unwrap_or_else(|_| "root".into()) };
        Env {
            tmp,
            // started by sshd with its own PATH and working directory: an absolute path
            linerate: std::path::absolute(linerate).unwrap_or_else(|_| linerate.to_path_buf()),
            key: None,
            ssh: None,
            serve: BTreeMap::new(),
            sshd: BTreeMap::new(),
            masters: BTreeMap::new(),
            trees: BTreeMap::new(),
            caps: BTreeMap::new(),
            servers: Vec::new(),
            children: Vec::new(),
            user,
        }
    }

    /// Reaps servers that have exited.
    fn reap(&mut self) {
        self.children.retain_mut(|c| matches!(c.try_wait(), Ok(None)));
    }

    /// Runs `prog args` to completion through the lab's executor.
    fn run_quiet(lab: &mut Lab, prog: &Path, args: &[&str]) -> Result<(), LabError> {
        let mut argv = vec![arg(prog)];
        argv.extend(args.iter().map(|a| a.to_string()));
        lab.exec().run(&argv).map(drop)
    }

    /// Writes and deletes a scratch file of `bytes` (rounded up to MiB) in the working
    /// directory, so that the copies about to start write to memory the kernel just freed
    /// rather than to pages it reported free to a hypervisor, which fault on first write (on
    /// this project's VMs a cold 2 GiB write to tmpfs took 4.0 s, a warm one 1.1 s).
    fn prefault(&mut self, lab: &mut Lab, bytes: u64) -> Result<(), LabError> {
        if bytes == 0 {
            return Ok(());
        }
        let scratch = self.tmp.join("prefault");
        let dd = program(lab, "dd", "coreutils")?;
        let (of, count) = (format!("of={}", scratch.display()), format!("count={}", bytes.div_ceil(1 << 20)));
        let made = Self::run_quiet(lab, &dd, &["if=/dev/zero", &of, "bs=1M", &count, "status=none"]);
        match std::fs::remove_file(&scratch) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(LabError::Io(format!("removing the scratch file {}", scratch.display()), e));
            }
            _ => {}
        }
        made
    }

    fn key(&mut self, lab: &mut Lab) -> Result<PathBuf, LabError> {
        if let Some(k) = &self.key {
            return Ok(k.clone());
        }
        let k = self.tmp.join("lab.key");
        Self::run_quiet(lab, &self.linerate, &["keygen", &arg(&k)])?;
        self.key = Some(k.clone());
        Ok(k)
    }

    /// Starts `argv` in the background as `what`, records it with the lab and the runner (ended
    /// with it), its output going to a log in the working directory: its pid, start time and log.
    fn spawn_tracked(&mut self, lab: &mut Lab, argv: Vec<String>, what: &str) -> Result<(u32, u64, PathBuf), LabError> {
        let log = self.tmp.join(format!("{}.log", what.replace(['/', ' '], "_")));
        let child = lab.exec().spawn(&Job { argv, stdout: log.clone(), stderr: log.clone(), feeder: None })?;
        let pid = child.id();
        self.children.push(child);
        lab.add_process(pid, what)?;
        let start = proc_start(pid).unwrap_or(0);
        self.servers.push((pid, start));
        Ok((pid, start, log))
    }

    /// Starts a server in the background, records it with the lab, and waits until it listens.
    fn spawn_server(
        &mut self,
        lab: &mut Lab,
        argv: Vec<String>,
        what: &str,
        port: u16,
    ) -> Result<(u32, u64), LabError> {
        let (pid, start, log) = self.spawn_tracked(lab, argv, what)?;
        if !lab.exec().wait_listening(pid, port, Duration::from_secs(15)) {
            return Err(LabError::Run(
                what.into(),
                format!("did not listen on port {port}: {}", tail(&read_capped(&log))),
            ));
        }
        Ok((pid, start))
    }

    fn ensure_serve(&mut self, lab: &mut Lab, host: &str) -> Result<PathBuf, LabError> {
        if let Some((_, _, root)) = self.serve.get(host) {
            return Ok(root.clone());
        }
        let key = self.key(lab)?;
        let root = self.tmp.join(format!("serve-{host}"));
        std::fs::create_dir_all(&root).map_err(io(format!("creating {}", root.display())))?;
        let caps = self.caps.get(host).copied().unwrap_or_default();
        let args: Vec<String> = vec![
            "serve".into(),
            "--listen".into(),
            format!("0.0.0.0:{DEFAULT_PORT}"),
            "--key-file".into(),
            arg(&key),
            "--root".into(),
            arg(&root),
            "--max-tests".into(),
            caps.tests.to_string(),
            "--max-connections".into(),
            caps.connections.to_string(),
            "--max-duration".into(),
            caps.duration_s.to_string(),
            "--quiet".into(),
        ];
        let argv = in_ns(lab.ns(host)?, &self.linerate, &args);
        let (pid, st) = self.spawn_server(lab, argv, &format!("serve-{host}"), DEFAULT_PORT)?;
        self.serve.insert(host.into(), (pid, st, root.clone()));
        Ok(root)
    }

    fn ssh_setup(&mut self, lab: &mut Lab) -> Result<SshKeys, LabError> {
        if let Some(s) = &self.ssh {
            return Ok(s.clone());
        }
        let keygen = program(lab, "ssh-keygen", "openssh-client")?;
        let d = self.tmp.join("ssh");
        std::fs::create_dir_all(&d).map_err(io(format!("creating {}", d.display())))?;
        let (hk, uk) = (d.join("host_key"), d.join("user_key"));
        for k in [&hk, &uk] {
            Self::run_quiet(lab, &keygen, &["-q", "-t", "ed25519", "-N", "", "-C", "linerate-lab", "-f", &arg(k)])?;
        }
        let read = |p: PathBuf| std::fs::read_to_string(&p).map_err(io(format!("reading {}", p.display())));
        let hpub = read(d.join("host_key.pub"))?;
        let upub = read(d.join("user_key.pub"))?;
        let (ak, kh, cfg) = (d.join("authorized_keys"), d.join("known_hosts"), d.join("sshd_config"));
        let write = |p: &Path, s: String| std::fs::write(p, s).map_err(io(format!("writing {}", p.display())));
        write(&ak, upub)?;
        write(&kh, format!("linerate-lab {}", hpub.trim()) + "\n")?;
        write(
            &cfg,
            format!(
                "Port {SSH_PORT}\nListenAddress 0.0.0.0\nHostKey {}\nAuthorizedKeysFile {}\nPidFile none\n\
                 PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n\
                 PermitRootLogin prohibit-password\nStrictModes no\nSubsystem sftp internal-sftp\nLogLevel ERROR\n\
                 MaxStartups 100\nMaxSessions 100\n",
                hk.display(),
                ak.display()
            ),
        )?;
        // sshd insists on its privilege separation directory.
        let _ = std::fs::create_dir_all("/run/sshd");
        let s = SshKeys { user_key: uk, known_hosts: kh, config: cfg, host_pub: hpub.trim().to_string() };
        self.ssh = Some(s.clone());
        Ok(s)
    }

    fn ensure_sshd(&mut self, lab: &mut Lab, host: &str) -> Result<(), LabError> {
        if self.sshd.contains_key(host) {
            return Ok(());
        }
        let cfg = self.ssh_setup(lab)?.config;
        let sshd = program(lab, "sshd", "openssh-server")?;
        let args: Vec<String> = vec!["-D".into(), "-e".into(), "-f".into(), arg(&cfg)];
        let argv = in_ns(lab.ns(host)?, &sshd, &args);
        let p = self.spawn_server(lab, argv, &format!("sshd-{host}"), SSH_PORT)?;
        self.sshd.insert(host.into(), p);
        Ok(())
    }

    /// The lab's ssh options; with `master`, its sessions go through that master connection.
    fn ssh_opts(&self, master: Option<&Path>) -> Vec<String> {
        let SshKeys { user_key: uk, known_hosts: kh, .. } = self.ssh.clone().unwrap_or_default();
        let mut o: Vec<String> = vec![
            "-F".into(),
            "/dev/null".into(),
            "-i".into(),
            arg(&uk),
            "-o".into(),
            format!("UserKnownHostsFile={}", kh.display()),
            "-o".into(),
            "HostKeyAlias=linerate-lab".into(),
            "-o".into(),
            "StrictHostKeyChecking=yes".into(),
            "-o".into(),
            "BatchMode=yes".into(),
            "-o".into(),
            "IdentitiesOnly=yes".into(),
            "-o".into(),
            "LogLevel=ERROR".into(),
        ];
        if let Some(m) = master {
            o.extend(["-o".into(), format!("ControlPath={}", m.display()), "-o".into(), "ControlMaster=no".into()]);
        }
        o
    }

    /// The run's ssh master connection (`ssh_master = true`), opened once per client host, server
    /// and port and kept until the runner ends: `ssh -M -N` in the client's namespace, waited
    /// for until its control socket exists. `None` for runs without one.
    fn master(&mut self, lab: &mut Lab, c: &Ctx) -> Result<Option<PathBuf>, LabError> {
        if !c.spec.ssh_master {
            return Ok(None);
        }
        let key = (c.ns.clone(), c.addr.clone(), c.inst.port);
        if let Some(p) = self.masters.get(&key) {
            return Ok(Some(p.clone()));
        }
        let sock = self.tmp.join(format!("ssh/master-{}", self.masters.len()));
        let ssh = program(lab, "ssh", "openssh-client")?;
        let mut a = vec!["-p".into(), c.inst.port.to_string()];
        a.extend(self.ssh_opts(None));
        a.extend(["-o".into(), "ControlMaster=yes".into(), "-o".into(), format!("ControlPath={}", sock.display())]);
        a.extend(["-o".into(), "ControlPersist=no".into(), "-N".into(), format!("{}@{}", self.user, c.addr)]);
        let what = format!("ssh-master-{}", self.masters.len());
        let (pid, _, log) = self.spawn_tracked(lab, in_ns(&c.ns, &ssh, &a), &what)?;
        if !lab.exec().wait_path(pid, &sock, Duration::from_secs(15)) {
            return Err(LabError::Run(
                what,
                format!("no control socket {}: {}", sock.display(), tail(&read_capped(&log))),
            ));
        }
        self.masters.insert(key, sock.clone());
        Ok(Some(sock))
    }

    /// The `-e` command of rsync and `linerate cp`: the lab's ssh with its options, in words
    /// split on spaces (the working directory's paths have none: the scenario's check).
    fn rsh(&self, lab: &mut Lab, port: u16, master: Option<&Path>) -> Result<String, LabError> {
        let ssh = program(lab, "ssh", "openssh-client")?;
        Ok(format!("{} -p {port} {}", ssh.display(), self.ssh_opts(master).join(" ")))
    }

    /// An rclone configuration with one sftp remote, the server host's sshd at `addr:port`,
    /// and its own known_hosts (rclone names a host `[ADDR]:PORT`), written for run `tag`.
    fn rclone_conf(&self, addr: &str, port: u16, tag: &str) -> Result<PathBuf, LabError> {
        let keys = self.ssh.clone().unwrap_or_default();
        let (conf, known) = (self.tmp.join(format!("{tag}.rclone.conf")), self.tmp.join(format!("{tag}.known_hosts")));
        let write = |p: &Path, s: String| std::fs::write(p, s).map_err(io(format!("writing {}", p.display())));
        write(&known, format!("[{addr}]:{port} {}\n", keys.host_pub))?;
        write(
            &conf,
            format!(
                "[{RCLONE_REMOTE}]\ntype = sftp\nhost = {addr}\nport = {port}\nuser = {}\nkey_file = {}\n\
                 known_hosts_file = {}\n",
                self.user,
                keys.user_key.display(),
                known.display()
            ),
        )?;
        Ok(conf)
    }

    /// A generated tree of `files` files of `sizes`, split into `parts` parts.
    fn tree(&mut self, lab: &mut Lab, files: u64, sizes: Sizes, parts: u32) -> Result<(PathBuf, u64), LabError> {
        if let Some(t) = self.trees.get(&(files, sizes, parts)) {
            return Ok(t.clone());
        }
        let dir = self.tmp.join(format!("tree-{files}x{}-{parts}", sizes.label()));
        std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
        for p in 0..parts {
            let d = dir.join(format!("part{p}"));
            let n = (files / u64::from(parts) + u64::from(u64::from(p) < files % u64::from(parts))).max(1);
            let mut a = vec!["mktree".to_string(), arg(&d), "--files".into(), n.to_string()];
            a.extend(sizes.args());
            Self::run_quiet(lab, &self.linerate, &a.iter().map(String::as_str).collect::<Vec<_>>())?;
        }
        let bytes = tree_bytes(&dir);
        self.trees.insert((files, sizes, parts), (dir.clone(), bytes));
        Ok((dir, bytes))
    }

    /// A client job tagged `tag`: its output goes to `tag.out` and `tag.err` in the run's directory.
    fn job(&self, argv: Vec<String>, tag: &str, feeder: Option<Vec<String>>) -> Job {
        Job { argv, stdout: self.tmp.join(format!("{tag}.out")), stderr: self.tmp.join(format!("{tag}.err")), feeder }
    }
}

/// What one instance started and how to read it back.
struct Started {
    procs: Vec<Box<dyn Process>>,
    out: Vec<Job>, // what each process was started as, for its output files
    bytes: u64,
    /// The copy (and a tree placed for it), removed after the run.
    cleanup: Vec<PathBuf>,
    /// (source, copy), compared once the clock has stopped.
    verify: Option<(PathBuf, PathBuf)>,
    server: Option<(u32, u64)>, // a per-run server (iperf3), stopped when the run ends
    pending: Vec<Job>,          // clients, started together once every instance is prepared
    /// The client takes `--start-at` (bench): it connects first and begins at that instant.
    syncable: bool,
    t0: Instant,
    timeout: Duration,
}

impl Started {
    /// Starts the prepared clients; the clock starts now.
    fn launch(&mut self, ex: &mut dyn Executor) -> Result<(), LabError> {
        self.t0 = Instant::now();
        for job in std::mem::take(&mut self.pending) {
            self.procs.push(ex.spawn(&job)?);
            self.out.push(job);
        }
        Ok(())
    }

    /// Kills what was started.
    fn kill(&mut self) {
        self.procs.iter_mut().for_each(|p| p.kill());
    }
}

/// One instance about to start: its run, where it runs, and what it reaches.
struct Ctx<'a> {
    spec: &'a RunSpec,
    inst: &'a Instance,
    tag: &'a str,
    /// The client host's namespace.
    ns: String,
    /// The server's address as the client reaches it.
    addr: String,
}

impl Ctx<'_> {
    fn streams(&self) -> u32 {
        self.spec.streams.unwrap_or(1)
    }

    /// `ADDR:PORT:TAG`, the daemon operand of `linerate cp`.
    fn daemon_path(&self) -> String {
        format!("{}:{}:{}", self.addr, self.inst.port, self.tag)
    }
}

fn start_instance(
    env: &mut Env,
    lab: &mut Lab,
    spec: &RunSpec,
    inst: &Instance,
    tag: &str,
) -> Result<Started, LabError> {
    let c = Ctx { spec, inst, tag, ns: lab.ns(&inst.host)?.to_string(), addr: fmt_ip(inst.addr) };
    let secs = spec.seconds.unwrap_or(10);
    let timed = Duration::from_secs(spec.timeout.unwrap_or(u64::from(secs) + 60));
    let transfer = Duration::from_secs(spec.timeout.unwrap_or(600));
    let mut st = Started {
        procs: vec![],
        out: vec![],
        bytes: 0,
        cleanup: vec![],
        verify: None,
        server: None,
        pending: vec![],
        syncable: spec.tool == Tool::Bench,
        t0: Instant::now(),
        timeout: if spec.tool.copies() { transfer } else { timed },
    };
    match spec.tool {
        Tool::Iperf3 => start_iperf3(env, lab, &c, secs, &mut st)?,
        Tool::Bench => start_bench(env, lab, &c, &mut st)?,
        Tool::Cp => start_cp(env, lab, &c, &mut st)?,
        Tool::Scp | Tool::Rsync | Tool::Tar | Tool::Rclone => start_over_sshd(env, lab, &c, &mut st)?,
    }
    Ok(st)
}

/// An `iperf3 -s` of its own in the server host, and the client.
fn start_iperf3(env: &mut Env, lab: &mut Lab, c: &Ctx, secs: u32, st: &mut Started) -> Result<(), LabError> {
    let (spec, inst) = (c.spec, c.inst);
    let iperf = program(lab, "iperf3", "iperf3")?;
    let sargs: Vec<String> = vec!["-s".into(), "-p".into(), inst.port.to_string()];
    let sns = lab.ns(&inst.server)?.to_string();
    let argv = in_ns(&sns, &iperf, &sargs);
    st.server = Some(env.spawn_server(lab, argv, &format!("iperf3-{}-{}", inst.server, inst.port), inst.port)?);
    let mut a: Vec<String> = vec!["-c".into(), c.addr.clone(), "-p".into(), inst.port.to_string(), "-J".into()];
    a.extend(["-i".into(), "1".into(), "-t".into(), secs.to_string(), "-P".into(), c.streams().to_string()]);
    if spec.reverse {
        a.push("-R".into());
    }
    a.extend(spec.args.iter().cloned());
    st.pending.push(env.job(in_ns(&c.ns, &iperf, &a), c.tag, None));
    Ok(())
}

/// `linerate bench` against the server host's `linerate serve`.
fn start_bench(env: &mut Env, lab: &mut Lab, c: &Ctx, st: &mut Started) -> Result<(), LabError> {
    let spec = c.spec;
    env.ensure_serve(lab, &c.inst.server)?;
    let key = env.key(lab)?;
    let mut a: Vec<String> = vec!["bench".into(), format!("{}:{}", c.addr, c.inst.port), "--key-file".into()];
    a.extend([arg(&key), "--json".into(), "-q".into(), "--no-save".into()]);
    if let Some(s) = spec.seconds {
        a.extend(["-t".into(), s.to_string()]);
    }
    if let Some(p) = spec.streams {
        a.extend(["-P".into(), p.to_string()]);
    }
    if spec.reverse {
        a.push("--reverse".into());
    }
    a.extend(spec.args.iter().cloned());
    st.pending.push(env.job(in_ns(&c.ns, &env.linerate, &a), c.tag, None));
    Ok(())
}

/// `linerate cp` of a generated tree in the run's mode: to or from the server host's
/// `linerate serve`, or through its sshd (`linerate serve --once --ssh` started there by ssh).
fn start_cp(env: &mut Env, lab: &mut Lab, c: &Ctx, st: &mut Started) -> Result<(), LabError> {
    let mode = c.spec.mode.unwrap_or_default();
    // The server side first: the daemon (its root and key), or the sshd.
    let daemon = if mode.over_ssh() {
        env.ensure_sshd(lab, &c.inst.server)?;
        None
    } else {
        let root = env.ensure_serve(lab, &c.inst.server)?;
        Some((root, env.key(lab)?))
    };
    let (src, bytes) = env.tree(lab, c.spec.files.unwrap_or(64), Sizes::of(c.spec), 1)?;
    let part = src.join("part0");
    st.bytes = bytes;
    let mut a: Vec<String> = vec!["cp".into()];
    let dest = match daemon {
        Some((root, key)) if mode == CpMode::Pull => {
            // The tree under the daemon's root, as hard links: made before the clock starts.
            let served = root.join(c.tag);
            let cp = program(lab, "cp", "coreutils")?;
            Env::run_quiet(lab, &cp, &["-al", &arg(&part), &arg(&served)])?;
            st.cleanup.push(served);
            let dest = env.tmp.join(format!("dest-{}", c.tag));
            a.extend([contents(c.daemon_path()), arg(&dest), "--key-file".into(), arg(&key)]);
            dest
        }
        Some((root, key)) => {
            a.extend([contents(arg(&part)), c.daemon_path(), "--key-file".into(), arg(&key)]);
            root.join(c.tag)
        }
        None => {
            let dest = env.tmp.join(format!("dest-{}", c.tag));
            let remote = |p: &Path| format!("{}@{}:{}", env.user, c.addr, p.display());
            let (from, to) = if mode == CpMode::SshPush {
                (contents(arg(&part)), remote(&dest))
            } else {
                (contents(remote(&part)), arg(&dest))
            };
            let master = env.master(lab, c)?;
            a.extend([from, to, "-e".into(), env.rsh(lab, c.inst.port, master.as_deref())?]);
            // sshd's sessions have a bare PATH: the remote side is named by its absolute path
            a.extend(["--remote-linerate".into(), arg(&env.linerate)]);
            dest
        }
    };
    // the lab saves its own results; each copy inside it stays out of the user's run store
    a.extend(["--json".into(), "-q".into(), "--no-save".into()]);
    // Without `streams`, cp chooses as a user's would (its default, raised on a long path).
    if let Some(p) = c.spec.streams {
        a.extend(["-P".into(), p.to_string()]);
    }
    a.extend(c.spec.args.iter().cloned());
    st.verify = Some((part, dest.clone()));
    st.cleanup.push(dest);
    st.pending.push(env.job(in_ns(&c.ns, &env.linerate, &a), c.tag, None));
    Ok(())
}

/// A cp source naming a directory's contents (rsync's trailing `/`): the destination is the copy.
fn contents(source: String) -> String {
    source + "/"
}

/// scp, rsync, tar | ssh and rclone (sftp) through the server host's sshd: one process per part
/// of the tree (`streams` parts), each into its own directory.
fn start_over_sshd(env: &mut Env, lab: &mut Lab, c: &Ctx, st: &mut Started) -> Result<(), LabError> {
    let (spec, port, streams) = (c.spec, c.inst.port, c.streams());
    env.ensure_sshd(lab, &c.inst.server)?;
    let (src, bytes) = env.tree(lab, spec.files.unwrap_or(64), Sizes::of(spec), streams)?;
    st.bytes = bytes;
    let dest = env.tmp.join(format!("dest-{}", c.tag));
    std::fs::create_dir_all(&dest).map_err(io(format!("creating {}", dest.display())))?;
    st.verify = Some((src.clone(), dest.clone()));
    st.cleanup.push(dest.clone());
    let ssh = program(lab, "ssh", "openssh-client")?;
    let master = env.master(lab, c)?;
    let opts = env.ssh_opts(master.as_deref());
    let target = format!("{}@{}", env.user, c.addr);
    let rclone_conf = match spec.tool {
        Tool::Rclone => Some(env.rclone_conf(&c.addr, port, c.tag)?),
        _ => None,
    };
    for p in 0..streams {
        let part = src.join(format!("part{p}"));
        let dpart = dest.join(format!("part{p}"));
        let ptag = format!("{}-{p}", c.tag);
        let job = match spec.tool {
            Tool::Scp => {
                let scp = program(lab, "scp", "openssh-client")?;
                let mut a = vec!["-q".into(), "-r".into(), "-P".into(), port.to_string()];
                a.extend(opts.iter().cloned());
                a.extend(spec.args.iter().cloned());
                a.extend([arg(&part), format!("{target}:{}", dpart.display())]);
                env.job(in_ns(&c.ns, &scp, &a), &ptag, None)
            }
            Tool::Rsync => {
                let rsync = program(lab, "rsync", "rsync")?;
                let mut a = vec!["-a".into(), "-e".into(), env.rsh(lab, port, master.as_deref())?];
                a.extend(spec.args.iter().cloned());
                a.extend([format!("{}/", part.display()), format!("{target}:{}/", dpart.display())]);
                env.job(in_ns(&c.ns, &rsync, &a), &ptag, None)
            }
            Tool::Rclone => {
                let rclone = program(lab, "rclone", "rclone")?;
                let conf = rclone_conf.as_ref().map(|p| arg(p)).unwrap_or_default();
                let mut a = vec!["copy".into(), arg(&part), format!("{RCLONE_REMOTE}:{}", dpart.display())];
                // --transfers 8 unless the run's args say otherwise (rclone takes the last one)
                a.extend(["--config".into(), conf, "--transfers".into(), "8".into()]);
                a.extend(spec.args.iter().cloned());
                env.job(in_ns(&c.ns, &rclone, &a), &ptag, None)
            }
            _ => {
                std::fs::create_dir_all(&dpart).map_err(io(format!("creating {}", dpart.display())))?;
                let tar = program(lab, "tar", "tar")?;
                let feeder = vec![arg(&tar), "-C".into(), arg(&part), "-cf".into(), "-".into(), ".".into()];
                let mut a = vec!["-p".into(), port.to_string()];
                a.extend(opts.iter().cloned());
                a.extend([target.clone(), "tar".into(), "-C".into(), arg(&dpart), "-xf".into(), "-".into()]);
                env.job(in_ns(&c.ns, &ssh, &a), &ptag, Some(feeder))
            }
        };
        st.pending.push(job);
    }
    Ok(())
}

/// Waits for every process of every instance, each on a waiter thread of its own (a blocking
/// `wait`, sent on a channel): whichever comes first of an exit, the stop and the next
/// instance's timeout wakes it, never a poll. At a timeout that instance's processes are
/// killed; at the stop, all of them, and [`LabError::Interrupted`] is returned. Every waiter
/// has ended when it returns. Each instance's wall time and failure, if any.
fn wait_all(started: &mut [Started], stop: &Shutdown) -> Result<Vec<(f64, Option<String>)>, LabError> {
    let killers: Vec<Vec<Killer>> = started.iter().map(|s| s.procs.iter().map(|p| p.killer()).collect()).collect();
    let mut done: Vec<Option<(f64, Option<String>)>> = vec![None; started.len()];
    let mut failure: Vec<Option<String>> = vec![None; started.len()];
    let mut left: Vec<usize> = started.iter().map(|s| s.procs.len()).collect();
    let (tx, exits) = crossbeam_channel::unbounded();
    // The waiters hold the processes; this thread reads the rest of each instance.
    let mut procs: Vec<Vec<Box<dyn Process>>> = started.iter_mut().map(|s| std::mem::take(&mut s.procs)).collect();
    let started = &*started;
    let result = std::thread::scope(|scope| {
        for (i, ps) in procs.iter_mut().enumerate() {
            for (k, p) in ps.iter_mut().enumerate() {
                let tx = tx.clone();
                scope.spawn(move || {
                    let _ = tx.send((i, k, p.wait()));
                });
            }
        }
        drop(tx);
        let kill = |i: usize| killers[i].iter().for_each(Killer::kill);
        loop {
            for (i, s) in started.iter().enumerate() {
                if done[i].is_none() && left[i] == 0 {
                    done[i] = Some((s.t0.elapsed().as_secs_f64(), failure[i].take()));
                }
            }
            let deadline = started.iter().zip(&done).filter(|(_, d)| d.is_none()).map(|(s, _)| s.t0 + s.timeout).min();
            let Some(deadline) = deadline else { return Ok(done.into_iter().flatten().collect()) };
            crossbeam_channel::select! {
                recv(exits) -> exit => {
                    let Ok((i, k, status)) = exit else { continue };
                    left[i] -= 1;
                    match status {
                        Ok(st) if !st.success() => {
                            let err = &started[i].out[k].stderr;
                            failure[i].get_or_insert(format!("exited with {st}: {}", tail(&read_capped(err))));
                        }
                        Ok(_) => {}
                        Err(e) => failure[i] = Some(format!("wait: {e}")),
                    }
                }
                recv(stop.stopped()) -> _ => {
                    (0..started.len()).for_each(kill);
                    return Err(LabError::Interrupted);
                }
                recv(crossbeam_channel::at(deadline)) -> _ => {
                    let now = Instant::now();
                    for (i, s) in started.iter().enumerate() {
                        if done[i].is_none() && s.t0 + s.timeout <= now {
                            kill(i);
                            let why = format!("timed out after {} s", s.timeout.as_secs());
                            done[i] = Some((s.t0.elapsed().as_secs_f64(), Some(why)));
                        }
                    }
                }
            }
        }
    });
    drop(procs); // all exited and reaped: the waiters are done
    result
}

fn f(v: &Value, path: &[&str]) -> Option<f64> {
    let mut x = v;
    for p in path {
        x = x.get(p)?;
    }
    x.as_f64()
}

/// What a finished instance's output says.
struct Measured {
    rate_bps: f64,
    duration_s: f64,
    bytes: Option<u64>,
    cpu: Option<RunCpu>,
    fairness: Option<f64>,
    flows: Option<u64>,
    intervals: Vec<Interval>,
    raw: Option<RawDoc>,
    congestion: Option<String>,
    started_unix_us: Option<u64>,
}

impl Measured {
    /// A transfer timed by the runner: `bytes` in `wall` seconds.
    fn transfer(bytes: u64, wall: f64) -> Measured {
        Measured {
            rate_bps: bytes as f64 * 8.0 / wall.max(1e-9),
            duration_s: wall,
            bytes: Some(bytes),
            cpu: None,
            fairness: None,
            flows: None,
            intervals: Vec::new(),
            raw: None,
            congestion: None,
            started_unix_us: None,
        }
    }
}

/// A share of the machine from iperf3's percentages (user and system only).
fn iperf3_cpu(c: &Value, user: &str, system: &str) -> Option<CpuBusy> {
    Some(CpuBusy { user: f(c, &[user])? / 100.0, system: f(c, &[system])? / 100.0, softirq: 0.0, irq: 0.0 })
}

fn busy(c: &CpuShare) -> CpuBusy {
    CpuBusy { user: c.user, system: c.system, softirq: c.softirq, irq: c.irq }
}

/// The congestion control of the side that sent the bulk data (the agent's when the client
/// received), as that side read it back from its data sockets; the client's for both ways.
fn sender_congestion(doc: &BenchDocument) -> Option<String> {
    let receiving = doc.test.as_ref().is_some_and(|t| t.direction == "receive");
    let host = if receiving { &doc.hosts.remote } else { &doc.hosts.local };
    host.as_ref()?.congestion_control_in_use.clone()
}

/// Parses one finished instance's output.
fn parse_result(tool: Tool, out: &str, bytes: u64, wall: f64) -> Result<Measured, String> {
    match tool {
        Tool::Iperf3 => {
            // iperf3's own JSON: read as it is, the fields it has had for years
            let v: Value = serde_json::from_str(out).map_err(|e| format!("iperf3 --json output: {e}"))?;
            if let Some(e) = v.get("error").and_then(Value::as_str) {
                return Err(format!("iperf3: {e}"));
            }
            let end = v.get("end").ok_or("iperf3 output has no 'end'")?;
            let rate = f(end, &["sum_received", "bits_per_second"])
                .or_else(|| f(end, &["sum", "bits_per_second"]))
                .ok_or("iperf3 output has no end.sum_received.bits_per_second")?;
            let streams: Vec<f64> = end
                .get("streams")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(|s| f(s, &["receiver", "bits_per_second"])).collect())
                .unwrap_or_default();
            let cpu = end.get("cpu_utilization_percent").map(|c| RunCpu {
                local: iperf3_cpu(c, "host_user", "host_system"),
                remote: iperf3_cpu(c, "remote_user", "remote_system"),
            });
            let intervals = v
                .get("intervals")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|i| {
                            let s = i.get("sum")?;
                            Some(Interval {
                                start_s: f(s, &["start"])?,
                                end_s: f(s, &["end"])?,
                                bps: f(s, &["bits_per_second"])?,
                            })
                        })
                        .collect()
                })
                .unwrap_or_default();
            Ok(Measured {
                rate_bps: rate,
                duration_s: f(end, &["sum_received", "seconds"]).unwrap_or(wall),
                bytes: f(end, &["sum_received", "bytes"]).map(|b| b as u64),
                cpu,
                fairness: jain(&streams),
                flows: Some(streams.len() as u64),
                intervals,
                raw: None,
                congestion: end.get("sender_tcp_congestion").and_then(Value::as_str).map(str::to_string),
                started_unix_us: None,
            })
        }
        Tool::Bench => {
            let doc: BenchDocument =
                serde_json::from_str(out).map_err(|e| format!("linerate bench --json output: {e}"))?;
            let s = doc.summary.as_ref().ok_or("bench output has no summary (no test ran)")?;
            let intervals: Vec<Interval> = doc
                .intervals
                .iter()
                .flatten()
                .map(|i| Interval { start_s: i.start_s, end_s: i.end_s, bps: i.bps })
                .collect();
            Ok(Measured {
                rate_bps: s.throughput_bps,
                duration_s: intervals.last().map_or(wall, |i| i.end_s),
                bytes: None,
                cpu: Some(RunCpu { local: Some(busy(&s.cpu.local)), remote: Some(busy(&s.cpu.remote)) }),
                fairness: s.jain,
                flows: Some(s.connections),
                intervals,
                congestion: sender_congestion(&doc),
                started_unix_us: doc.started_unix_us,
                raw: Some(RawDoc::Bench(Box::new(doc.clone()))),
            })
        }
        Tool::Cp => {
            let doc: CpSummary = serde_json::from_str(out).map_err(|e| format!("linerate cp --json output: {e}"))?;
            if !doc.complete {
                return Err("linerate cp reported an incomplete copy".into());
            }
            Ok(Measured {
                flows: Some(u64::from(doc.streams)),
                raw: Some(RawDoc::Cp(Box::new(doc.clone()))),
                ..Measured::transfer(doc.bytes, wall)
            })
        }
        Tool::Scp | Tool::Rsync | Tool::Tar | Tool::Rclone => Ok(Measured::transfer(bytes, wall)),
    }
}

/// The QoS guarantee of the run's host (if any) and how often its intervals met it.
fn guarantee(lab: &Lab, host: &str, intervals: &[Interval]) -> Option<Guarantee> {
    let g = lab.plan.guarantees.iter().find(|g| g.hosts.iter().any(|h| h == host))?;
    let iv: Vec<f64> = intervals.iter().skip(1).map(|i| i.bps).collect();
    let met = iv.iter().filter(|&&b| b >= 0.9 * g.rate_bps as f64).count();
    Some(Guarantee {
        class: g.class.clone(),
        link: g.link.clone(),
        rate_bps: g.rate_bps,
        ceil_bps: g.ceil_bps,
        intervals_met_pct: (!iv.is_empty()).then(|| 100.0 * met as f64 / iv.len() as f64),
    })
}

/// A measurement's record before it ran: what, where, in which group.
fn record(g: &Group, inst: &Instance, spec: &RunSpec, repeat: u32) -> LabRun {
    LabRun {
        name: inst.name.clone(),
        tool: spec.tool,
        mode: (spec.tool == Tool::Cp).then(|| spec.mode.unwrap_or_default()),
        host: inst.host.clone(),
        server: inst.server.clone(),
        server_addr: fmt_ip(inst.addr),
        via: inst.via.clone(),
        group: g.name.clone(),
        sweep: g.sweep.clone(),
        repeat,
        streams: spec.streams.unwrap_or(1),
        reverse: spec.reverse,
        args: spec.args.clone(),
        ok: false,
        error: None,
        rate_bps: None,
        duration_s: None,
        bytes: None,
        cpu: None,
        machine_cpu_s: None,
        fairness: None,
        flows: None,
        intervals: Vec::new(),
        guarantee: None,
        raw: None,
        congestion: None,
        started_unix_us: None,
    }
}

/// Lines up the start of a group's bench clients: each is told (`--start-at`) to begin its test
/// at one instant far enough ahead for all of them to start and authenticate, so that process
/// start-up, one after another on a busy machine, does not stagger the measurements. Whether it
/// did (groups of two or more bench clients).
fn synchronise(started: &mut [Option<Started>]) -> bool {
    let n = started.iter().flatten().filter(|s| s.syncable).count();
    if n < 2 {
        return false;
    }
    // start-up and a handshake each, on two cores: ~30 ms a client; 4x that, and half a second
    let lead = Duration::from_millis(500 + 120 * n as u64);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let at = (now + lead).as_millis().to_string();
    for s in started.iter_mut().flatten().filter(|s| s.syncable) {
        for job in &mut s.pending {
            job.argv.extend(["--start-at".to_string(), at.clone()]);
        }
        s.timeout += lead;
    }
    true
}

/// A group's record from its members' runs: totals and fairness over the members that
/// measured, which members failed, and how far apart their tests started.
fn group_record(g: &Group, repeat: u32, recs: &[LabRun], synchronised: bool) -> GroupRecord {
    let rates: Vec<f64> = recs.iter().filter(|r| r.ok).filter_map(|r| r.rate_bps).collect();
    let starts: Vec<u64> = recs.iter().filter(|r| r.ok).filter_map(|r| r.started_unix_us).collect();
    let skew = match (starts.iter().min(), starts.iter().max()) {
        (Some(a), Some(b)) if starts.len() > 1 => Some((b - a) as f64 / 1e3),
        _ => None,
    };
    GroupRecord {
        group: g.name.clone(),
        repeat,
        members: recs.iter().map(|r| r.name.clone()).collect(),
        rate_bps: rates.iter().sum(),
        fairness: jain(&rates),
        ok: recs.iter().all(|r| r.ok),
        failed: recs.iter().filter(|r| !r.ok).map(|r| r.name.clone()).collect(),
        start_skew_ms: skew,
        start_tolerance_ms: synchronised.then_some(START_TOLERANCE_MS),
    }
}

/// The progress line of a group of several members: its total and fairness, over how many of
/// its members, and how far apart they started.
fn group_line(g: &GroupRecord) -> String {
    let (n, of) = g.measured();
    let over = if g.ok { String::new() } else { format!(" over {n} of {of} members") };
    let mut line = format!(
        "{:<28} {:>11} {:>14} total, Jain {}{over}",
        g.group,
        "group",
        format_rate(g.rate_bps),
        g.fairness.map_or("-".to_string(), |j| format!("{j:.3}")),
    );
    if let Some(skew) = g.start_skew_ms {
        line.push_str(&format!(", starts within {skew:.1} ms"));
        if g.start_tolerance_ms.is_some_and(|t| skew > t) {
            line.push_str(&format!(" (more than the {START_TOLERANCE_MS} ms aimed at)"));
        }
    }
    if !g.ok {
        line.push_str(&format!("; INCOMPLETE: {} failed", g.failed.join(", ")));
    }
    line
}

/// Compares a copy with its source byte for byte (`diff -qr`, through the executor), after
/// the clock has stopped: a copy that differs fails its run.
fn verify(lab: &mut Lab, pair: Option<&(PathBuf, PathBuf)>) -> Result<(), LabError> {
    let Some((src, copy)) = pair else { return Ok(()) };
    let diff = program(lab, "diff", "diffutils")?;
    match lab.exec().run(&[arg(&diff), "-qr".into(), arg(src), arg(copy)]) {
        Ok(_) => Ok(()),
        Err(LabError::Command { stderr, .. }) => {
            Err(LabError::CopyDiffers { copy: copy.clone(), original: src.clone(), diff: tail(&stderr) })
        }
        Err(e) => Err(e),
    }
}

/// What each of linerate's link emulators did over the scenario (asked through its control
/// socket); one that does not answer is left out, with a line in the log.
fn emulator_counters(lab: &Lab, cfg: &mut RunnerConfig<'_>) -> Vec<linerate_model::doc::lab::LabEmulator> {
    let mut out = Vec::new();
    for (link, sock) in &lab.state.emulators {
        match crate::emu::ask(sock, "stats").and_then(|a| {
            serde_json::from_str::<crate::emu::EmuStats>(&a).map_err(|source| LabError::EmulatorAnswer {
                link: link.clone(),
                answer: a.clone(),
                source,
            })
        }) {
            Ok(s) => out.push(linerate_model::doc::lab::LabEmulator {
                link: link.clone(),
                a_to_b: s.a_to_b,
                b_to_a: s.b_to_a,
            }),
            Err(e) => (cfg.log)(&format!("no counters from the emulator of link {link}: {e}")),
        }
    }
    out
}

/// A run that got as far as a lab: what the measurements returned and what the teardown could
/// not remove.
pub struct Finished {
    /// The run id (the lab's namespaces and state file are named after it).
    pub id: String,
    /// The results document, or why the measurements stopped.
    pub result: Result<LabDocument, LabError>,
    /// What the teardown could not remove (each told already).
    pub problems: Vec<String>,
}

/// `lab run`: brings `sc` up (stale runs of dead owners cleaned first), runs every
/// measurement with `linerate` until done or `stop`, and tears the lab down, telling `tell`
/// each step in a line for the user (a stale run cleaned, the lab up, the measurements'
/// progress, the teardown's end). An error means no lab was built; a lab dropped on the way (a panic) tells its
/// teardown's problems to `on_drop_problem`.
pub fn up_and_run(
    sc: &Scenario,
    file: &Path,
    linerate: PathBuf,
    stop: &Shutdown,
    tell: &mut dyn FnMut(&str),
    on_drop_problem: impl FnMut(&str) + Send + 'static,
) -> Result<Finished, LabError> {
    let mut lab = Lab::up(sc, file, false, stop, tell)?;
    lab.on_drop_problem(on_drop_problem);
    tell(&format!("lab {} up: scenario {}", lab.plan.run, sc.name));
    let result = run_all(&mut lab, sc, &mut RunnerConfig { linerate, stop, log: tell });
    let id = lab.plan.run.clone();
    let problems = lab.down_told(tell);
    Ok(Finished { id, result, problems })
}

/// Runs every measurement of `sc` in `lab` and returns the results document.
pub fn run_all(lab: &mut Lab, sc: &Scenario, cfg: &mut RunnerConfig<'_>) -> Result<LabDocument, LabError> {
    let base = sc.workdir.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_WORKDIR));
    let tmp = tempfile::Builder::new().prefix(&format!("linerate-{}-", lab.plan.run)).tempdir_in(&base).map_err(io(
        format!("creating a working directory in {} (the scenario's `workdir` chooses another)", base.display()),
    ))?;
    let tmp_path = tmp.path().to_path_buf();
    lab.add_temp_dir(tmp_path.clone())?;
    let mut env = Env::new(tmp_path.clone(), &cfg.linerate);
    let started_unix =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let result = run_groups(lab, sc, cfg, &mut env);
    for (pid, st) in env.servers.drain(..) {
        lab.exec().stop(pid, st, Duration::from_secs(2));
    }
    env.reap();
    let (runs, group_recs) = result?;
    let emulators = emulator_counters(lab, cfg);
    let now = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    Ok(LabDocument {
        schema: LAB_SCHEMA.into(),
        tool: ToolInfo::linerate(env!("CARGO_PKG_VERSION")),
        scenario: LabScenario {
            name: sc.name.clone(),
            description: sc.description.clone(),
            file: lab.state.file.clone(),
        },
        run_id: lab.plan.run.clone(),
        started_unix,
        finished_unix: now(),
        machine: Machine {
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        },
        lab: lab.plan.description.clone(),
        workdir: Some(tmp_path.display().to_string()),
        runs,
        groups: group_recs,
        emulators,
        time_scale: None,
    })
}

type Records = (Vec<LabRun>, Vec<GroupRecord>);

fn run_groups(lab: &mut Lab, sc: &Scenario, cfg: &mut RunnerConfig<'_>, env: &mut Env) -> Result<Records, LabError> {
    let gs = groups(sc, lab)?;
    env.caps = agent_caps(sc, &gs);
    let mut runs = Vec::new();
    let mut group_recs = Vec::new();
    let mut counter = 0usize;
    for g in &gs {
        for rep in 0..g.repeat {
            if cfg.stop.is_stopped() {
                return Err(LabError::Interrupted);
            }
            let mut started = Vec::new();
            let mut recs: Vec<LabRun> = Vec::new();
            for inst in &g.members {
                counter += 1;
                let spec = &sc.runs[inst.spec];
                let tag = format!("r{counter}");
                let mut rec = record(g, inst, spec, rep);
                match start_instance(env, lab, spec, inst, &tag) {
                    Ok(s) => started.push(Some(s)),
                    Err(e @ LabError::Interrupted) => return Err(e),
                    Err(e) => {
                        rec.error = Some(e.to_string());
                        started.push(None);
                    }
                }
                recs.push(rec);
            }
            // Every server is up and every tree made: start all clients of the group together.
            if sc.prefault.unwrap_or(true) {
                let bytes = started.iter().flatten().filter(|s| s.verify.is_some()).map(|s| s.bytes).sum();
                env.prefault(lab, bytes)?;
            }
            let synchronised = synchronise(&mut started);
            let cpu_before = lab.exec().busy_cpu_s();
            for (k, slot) in started.iter_mut().enumerate() {
                if let Some(s) = slot {
                    if let Err(e) = s.launch(lab.exec()) {
                        s.kill();
                        recs[k].error = Some(e.to_string());
                        *slot = None;
                    }
                }
            }
            let idx: Vec<usize> = started.iter().enumerate().filter(|(_, s)| s.is_some()).map(|(i, _)| i).collect();
            let mut live: Vec<Started> = started.into_iter().flatten().collect();
            let outcomes = wait_all(&mut live, cfg.stop)?;
            // to the millisecond (the counters tick every 10 ms; the rest is floating-point noise)
            let machine_cpu_s =
                cpu_before.zip(lab.exec().busy_cpu_s()).map(|(a, b)| ((b - a) * 1e3).round().max(0.0) / 1e3);
            for ((k, s), (wall, failure)) in idx.into_iter().zip(live.iter()).zip(outcomes) {
                let inst = &g.members[k];
                let spec = &sc.runs[inst.spec];
                let rec = &mut recs[k];
                rec.machine_cpu_s = machine_cpu_s;
                let out = s.out.first().map(|j| read_capped(&j.stdout)).unwrap_or_default();
                let parsed = match failure {
                    Some(e) => Err(e),
                    None => parse_result(spec.tool, &out, s.bytes, wall),
                }
                .and_then(|m| verify(lab, s.verify.as_ref()).map(|()| m).map_err(|e| e.to_string()));
                match parsed {
                    Ok(m) => {
                        rec.guarantee = guarantee(lab, &inst.host, &m.intervals);
                        rec.ok = true;
                        rec.rate_bps = Some(m.rate_bps);
                        rec.duration_s = Some(m.duration_s);
                        rec.bytes = m.bytes;
                        rec.cpu = m.cpu;
                        rec.fairness = m.fairness;
                        rec.flows = m.flows;
                        rec.intervals = m.intervals;
                        rec.raw = m.raw;
                        rec.congestion = m.congestion;
                        rec.started_unix_us = m.started_unix_us;
                    }
                    Err(e) => rec.error = Some(e),
                }
                for d in &s.cleanup {
                    let _ = std::fs::remove_dir_all(d);
                }
                if let Some((pid, start)) = s.server {
                    lab.exec().stop(pid, start, Duration::from_secs(2));
                }
            }
            env.reap();
            for r in &recs {
                let what = r.mode.map_or_else(|| r.tool.name().to_string(), |m| format!("cp {}", m.name()));
                let line = match r.rate_bps {
                    Some(b) => format!("{:<28} {:>11} {:>14}", r.name, what, format_rate(b)),
                    None => format!("{:<28} failed: {}", r.name, r.error.as_deref().unwrap_or("")),
                };
                (cfg.log)(&line);
            }
            let rec = group_record(g, rep, &recs, synchronised);
            if g.members.len() > 1 {
                (cfg.log)(&group_line(&rec));
            }
            group_recs.push(rec);
            runs.extend(recs);
        }
    }
    Ok((runs, group_recs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::{RecordingExecutor, RECORDED_PID_BASE};
    use crate::testkit::{private_state_dir, SharedRecorder, TWO_HOSTS};
    use crate::{Plan, Scenario};
    use linerate_model::shutdown::Stopper;

    const IPERF3_OUT: &str = r#"{"intervals":[{"sum":{"start":0,"end":1,"bits_per_second":9e8}}],
        "end":{"sum_received":{"bits_per_second":9e8,"seconds":3,"bytes":337500000},
               "streams":[{"receiver":{"bits_per_second":4.5e8}},{"receiver":{"bits_per_second":4.5e8}}]}}"#;

    /// Three hosts around `b`: iperf3 from `a` and `c` at once, a `linerate cp` from `a`, and
    /// `tar | ssh` from `c` in two parts.
    const SC: &str = r#"
name = "unit"
[[host]]
name = "a"
[[host]]
name = "b"
[[host]]
name = "c"
[[link]]
a = "a"
b = "b"
[[link]]
a = "c"
b = "b"
[[run]]
tool = "iperf3"
hosts = ["a", "c"]
server = "b"
seconds = 3
streams = 2
[[run]]
tool = "cp"
host = "a"
server = "b"
files = 8
[[run]]
tool = "tar"
host = "c"
server = "b"
streams = 2
"#;

    /// Runs `text` as run `run` through a recording executor; the document (or error) and the
    /// recording, taken before the lab's teardown.
    fn run_recorded(
        text: &str,
        run: &str,
        rec: RecordingExecutor,
        stop_at_start: bool,
    ) -> (Result<LabDocument, LabError>, RecordingExecutor, Plan) {
        private_state_dir();
        let rec = SharedRecorder::new(rec);
        let sc = Scenario::parse(text).unwrap();
        let mut lab =
            Lab::up_with(Box::new(rec.clone()), &sc, Path::new("u.toml"), run, false, &Shutdown::never()).unwrap();
        let stopper = Stopper::new();
        if stop_at_start {
            stopper.stop();
        }
        let mut log = |_: &str| {};
        let mut cfg = RunnerConfig { linerate: "/opt/linerate".into(), stop: &stopper.shutdown(), log: &mut log };
        let doc = run_all(&mut lab, &sc, &mut cfg);
        let plan = lab.plan.clone();
        let taken = std::mem::take(&mut *rec.rec());
        drop(lab);
        (doc, taken, plan)
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn every_process_goes_through_the_executor_servers_first_and_each_is_stopped() {
        let cp_out = serde_json::to_string(&linerate_model::doc::example::cp()).unwrap();
        let rec = RecordingExecutor {
            outputs: vec![("iperf3".into(), IPERF3_OUT.into()), ("linerate".into(), cp_out)],
            ..Default::default()
        };
        let (doc, rec, plan) = run_recorded(SC, "lrunit1", rec, false);
        let doc = doc.unwrap();
        let b_from = |h: &str| fmt_ip(plan.server_addr(h, "b", None).unwrap());
        let argvs: Vec<&Vec<String>> = rec.spawned.iter().map(|j| &j.argv).collect();

        // The iperf3 group: both servers are up before either client starts.
        let server = |port: &str| strings(&["ip", "netns", "exec", "lrunit1-b", "/usr/bin/iperf3", "-s", "-p", port]);
        let client = |h: &str, port: &str| {
            let ns = format!("lrunit1-{h}");
            let mut v = strings(&["ip", "netns", "exec", &ns, "/usr/bin/iperf3", "-c"]);
            v.extend(strings(&[&b_from(h), "-p", port, "-J", "-i", "1", "-t", "3", "-P", "2"]));
            v
        };
        assert_eq!(argvs[..4], [&server("5201"), &server("5202"), &client("a", "5201"), &client("c", "5202")]);
        assert_eq!(
            rec.stopped[..2],
            [(RECORDED_PID_BASE, 4), (RECORDED_PID_BASE + 1, 4)],
            "per-run servers end with their run, before the next starts"
        );

        // cp: a key and a tree through `run`, one `serve` in b, then the client in a.
        let keygen = rec.commands.iter().position(|c| c[0] == "/opt/linerate" && c[1] == "keygen").unwrap();
        let mktree = rec.commands.iter().position(|c| c[0] == "/opt/linerate" && c[1] == "mktree").unwrap();
        assert!(keygen < mktree);
        assert_eq!(rec.commands[mktree][3..], strings(&["--files", "8", "--mean-size", "1600000"]));
        assert_eq!(argvs[4][..6], strings(&["ip", "netns", "exec", "lrunit1-b", "/opt/linerate", "serve"]));
        assert_eq!(argvs[5][..6], strings(&["ip", "netns", "exec", "lrunit1-a", "/opt/linerate", "cp"]));
        assert!(argvs[5].contains(&format!("{}:7878:r3", b_from("a"))), "{:?}", argvs[5]);

        // tar | ssh: sshd in b, then one ssh per part, each fed by a local tar of its part.
        assert_eq!(argvs[6][..5], strings(&["ip", "netns", "exec", "lrunit1-b", "/usr/bin/sshd"]));
        for (k, part) in [(7, "part0"), (8, "part1")] {
            let j = &rec.spawned[k];
            assert_eq!(j.argv[..5], strings(&["ip", "netns", "exec", "lrunit1-c", "/usr/bin/ssh"]));
            assert_eq!(j.argv[j.argv.len() - 4..].first().map(String::as_str), Some("-C"));
            let feeder = j.feeder.as_ref().expect("tar feeds ssh");
            assert_eq!(feeder[0], "/usr/bin/tar");
            assert!(feeder[2].ends_with(part), "{feeder:?}");
        }
        assert_eq!(rec.spawned.len(), 9);
        let (serve, sshd) = (RECORDED_PID_BASE + 4, RECORDED_PID_BASE + 6);
        let ended: Vec<(u32, usize)> = [serve, sshd].iter().map(|&p| (p, 9)).collect();
        assert_eq!(rec.stopped[rec.stopped.len() - 2..], ended, "long-lived servers end with the runner");

        // The document: every run measured from what its tool printed.
        let names: Vec<&str> = doc.runs.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["iperf3-1@a", "iperf3-1@c", "cp-2", "tar-3"]);
        assert!(doc.runs.iter().all(|r| r.ok), "{:?}", doc.runs.iter().map(|r| &r.error).collect::<Vec<_>>());
        assert_eq!(doc.runs[0].rate_bps, Some(9e8));
        assert_eq!(doc.runs[2].bytes, Some(linerate_model::doc::example::cp().bytes));
        assert_eq!(doc.groups[0].members, ["iperf3-1@a", "iperf3-1@c"]);
        assert_eq!(doc.groups[0].rate_bps, 1.8e9);
        assert_eq!(doc.groups[0].fairness, Some(1.0));
    }

    #[test]
    fn a_failing_client_is_recorded_and_a_stop_starts_nothing() {
        let rec = RecordingExecutor { failing: vec!["iperf3".into()], ..Default::default() };
        let (doc, rec, _) = run_recorded(SC, "lrunit2", rec, false);
        let doc = doc.unwrap();
        assert!(!doc.runs[0].ok);
        assert!(doc.runs[0].error.as_deref().unwrap().starts_with("exited with exit status: 1"), "{:?}", doc.runs[0]);
        assert!(!doc.groups[0].ok);
        assert_eq!(rec.spawned.len(), 9, "one failure does not stop the scenario");

        let (doc, rec, _) = run_recorded(SC, "lrunit3", RecordingExecutor::default(), true);
        assert!(matches!(doc, Err(LabError::Interrupted)));
        assert!(rec.spawned.is_empty(), "{:?}", rec.spawned);
    }

    /// Three guests run `linerate bench` against `s` at once, and the agent is started once.
    const GUESTS: &str = r#"
name = "guests"
[[host]]
name = "g[1..3]"
[[host]]
name = "s"
[[switch]]
name = "sw"
[[link]]
a = "g[1..3]"
b = "sw"
[[link]]
a = "sw"
b = "s"
[[run]]
name = "fair"
tool = "bench"
hosts = ["g[1..3]"]
server = "s"
streams = 5
seconds = 100
"#;

    #[test]
    fn a_group_with_one_failing_member_is_incomplete_and_its_starts_are_synchronised() {
        let bench =
            BenchDocument { started_unix_us: Some(1_795_326_436_000_000), ..linerate_model::doc::example::bench() };
        let rec = RecordingExecutor {
            outputs: vec![("linerate".into(), serde_json::to_string(&bench).unwrap())],
            failing_ns: vec!["lrunit7-g2".into()],
            ..Default::default()
        };
        let (doc, rec, _) = run_recorded(GUESTS, "lrunit7", rec, false);
        let doc = doc.unwrap();
        // the agent admits what the scenario asks: 3 tests at once (twice, for the overlap of
        // groups), 5 connections, 100 s
        let serve = &rec.spawned[0].argv;
        assert_eq!(serve[5], "serve");
        let flag = |f: &str| serve.iter().position(|a| a == f).map(|i| serve[i + 1].as_str());
        assert_eq!(
            (flag("--max-tests"), flag("--max-connections"), flag("--max-duration")),
            (Some("8"), Some("10000"), Some("3600"))
        );
        // every client starts its test at one instant
        let at: Vec<&str> = rec.spawned[1..]
            .iter()
            .map(|j| j.argv.iter().position(|a| a == "--start-at").map(|i| j.argv[i + 1].as_str()).unwrap())
            .collect();
        assert_eq!(at.len(), 3);
        assert!(at.iter().all(|t| *t == at[0] && t.parse::<u64>().is_ok()), "{at:?}");

        let g = &doc.groups[0];
        assert!(!g.ok, "a failed member makes the group incomplete");
        assert_eq!(g.failed, ["fair@g2"]);
        assert_eq!(g.measured(), (2, 3));
        let one = doc.runs[0].rate_bps.unwrap();
        assert_eq!(g.rate_bps, 2.0 * one, "the total over the two that measured");
        assert_eq!(g.start_tolerance_ms, Some(START_TOLERANCE_MS));
        assert_eq!(g.start_skew_ms, Some(0.0));
        assert_eq!(doc.runs[0].started_unix_us, bench.started_unix_us);
        assert_eq!(doc.runs[0].congestion.as_deref(), Some("cubic"), "as the client read it back");
        let line = group_line(g);
        assert!(line.contains("over 2 of 3 members") && line.ends_with("INCOMPLETE: fair@g2 failed"), "{line}");
    }

    #[test]
    fn the_congestion_control_recorded_is_the_senders() {
        let mut doc = linerate_model::doc::example::bench();
        doc.hosts.remote = Some(linerate_model::host::HostInfo {
            congestion_control_in_use: Some("bbr".into()),
            ..Default::default()
        });
        assert_eq!(sender_congestion(&doc).as_deref(), Some("cubic"), "the client sent");
        doc.test.as_mut().unwrap().direction = "receive".into();
        assert_eq!(sender_congestion(&doc).as_deref(), Some("bbr"), "the agent sent");
    }

    #[test]
    fn agents_admit_every_bench_client_of_the_largest_group_against_them() {
        let text = GUESTS.replace("g[1..3]", "g[1..16]").replace("seconds = 100", "seconds = 3600");
        private_state_dir();
        let sc = Scenario::parse(&text).unwrap();
        let never = Shutdown::never();
        let rec = RecordingExecutor::default();
        let lab = Lab::up_with(Box::new(rec), &sc, Path::new("u.toml"), "lrunit8", false, &never).unwrap();
        let caps = agent_caps(&sc, &groups(&sc, &lab).unwrap());
        // (a scenario's streams stay within the agent's default 10,000 connections)
        assert_eq!(caps["s"], AgentCaps { tests: 32, connections: 10_000, duration_s: 3660 });
        assert_eq!(caps.len(), 1);
    }

    /// Every cp mode and rclone, from `a` to `b` of the fixture, one after the other.
    const MODES_RUNS: &str = r#"
[[run]]
name = "push"
tool = "cp"
host = "a"
server = "b"
files = 4
[[run]]
name = "pull"
tool = "cp"
mode = "pull"
host = "a"
server = "b"
files = 4
[[run]]
name = "ssh-push"
tool = "cp"
mode = "ssh-push"
host = "a"
server = "b"
files = 4
streams = 3
[[run]]
name = "ssh-pull"
tool = "cp"
mode = "ssh-pull"
host = "a"
server = "b"
files = 20
min_size = "1KiB"
max_size = "16KiB"
[[run]]
name = "rclone"
tool = "rclone"
host = "a"
server = "b"
files = 4
args = ["--transfers", "16"]
"#;

    fn modes() -> String {
        format!("{TWO_HOSTS}{MODES_RUNS}")
    }

    /// The user the runner logs in as over ssh.
    fn lab_user() -> String {
        Env::new(PathBuf::new(), Path::new("/opt/linerate")).user
    }

    #[test]
    fn cp_modes_and_rclone_run_as_their_users_would_on_tmpfs() {
        let cp_out = serde_json::to_string(&linerate_model::doc::example::cp()).unwrap();
        let rec = RecordingExecutor { outputs: vec![("linerate".into(), cp_out)], ..Default::default() };
        let (doc, rec, plan) = run_recorded(&modes(), "lrunit4", rec, false);
        let doc = doc.unwrap();
        let w = doc.workdir.clone().unwrap();
        assert!(w.starts_with("/dev/shm/linerate-lrunit4-"), "trees and copies on tmpfs by default: {w}");
        assert!(!Path::new(&w).exists(), "the working directory goes with the runner");
        let addr = fmt_ip(plan.server_addr("a", "b", None).unwrap());
        let login = format!("{}@{addr}", lab_user());
        let tree = format!("{w}/tree-4x1600000-1");
        let part = format!("{tree}/part0");
        let client = |k: usize| rec.spawned[k].argv[4..].to_vec();
        let servers: Vec<&str> = [0, 3].iter().map(|&k| rec.spawned[k].argv[5].as_str()).collect();
        assert_eq!(servers, ["serve", "-D"], "the daemon, then the sshd, in b");
        assert!(rec
            .spawned
            .iter()
            .all(|j| j.argv[3] == if j.argv[5] == "serve" || j.argv[5] == "-D" { "lrunit4-b" } else { "lrunit4-a" }));

        // push: to the daemon
        let key = format!("{w}/lab.key");
        let tail = strings(&["--json", "-q", "--no-save"]);
        let push = client(1);
        // `part0/`: the destination is the copy (rsync's rule), so a rerun lands in the same place.
        let contents = format!("{part}/");
        assert_eq!(
            push[..6],
            strings(&["/opt/linerate", "cp", &contents, &format!("{addr}:7878:r1"), "--key-file", &key])
        );
        assert_eq!(push[6..], tail[..], "no -P without `streams`: cp's own default");
        // pull: the tree hard-linked under the daemon's root first, then pulled into the workdir
        let served = format!("{w}/serve-b/r2");
        assert!(rec.commands.contains(&strings(&["/usr/bin/cp", "-al", &part, &served])), "{:?}", rec.commands);
        let pull = client(2);
        let pull_dest = format!("{w}/dest-r2");
        assert_eq!(pull[1..6], strings(&["cp", &format!("{addr}:7878:r2/"), &pull_dest, "--key-file", &key]));
        // ssh-push and ssh-pull: through the lab's sshd, the remote side named by its absolute path
        let rsh = format!("/usr/bin/ssh -p 2222 -F /dev/null -i {w}/ssh/user_key -o UserKnownHostsFile={w}/ssh/");
        for (k, from, to) in [
            (4, format!("{part}/"), format!("{login}:{w}/dest-r3")),
            (5, format!("{login}:{w}/tree-20x1024-16384-1/part0/"), format!("{w}/dest-r4")),
        ] {
            let a = client(k);
            assert_eq!(a[1..4], strings(&["cp", &from, &to]), "{a:?}");
            assert_eq!(a[4], "-e");
            assert!(a[5].starts_with(&rsh) && a[5].contains("BatchMode=yes"), "{}", a[5]);
            assert_eq!(a[6..8], strings(&["--remote-linerate", "/opt/linerate"]));
            assert_eq!(a[8..11], tail[..]);
            assert!(!a.contains(&"--key-file".to_string()), "ssh authenticates, not the daemon's key");
        }
        assert_eq!(client(4)[11..13], strings(&["-P", "3"]), "`streams` gives -P");
        let mktree = rec.commands.iter().find(|c| c[1] == "mktree" && c[2].contains("tree-20x")).unwrap();
        assert_eq!(mktree[3..], strings(&["--files", "20", "--min-size", "1024", "--max-size", "16384"]));
        // rclone: sftp to the sshd with a configuration of its own; --transfers 8 unless args say
        let conf = format!("{w}/r5.rclone.conf");
        let rclone = client(6);
        assert_eq!(rclone[..4], strings(&["/usr/bin/rclone", "copy", &part, &format!("lab:{w}/dest-r5/part0")]));
        assert_eq!(rclone[4..], strings(&["--config", &conf, "--transfers", "8", "--transfers", "16"]));
        assert_eq!(rec.spawned.len(), 7);

        // Every copy compared with its source once its run ended.
        for (src, copy) in [
            (part.clone(), format!("{w}/serve-b/r1")),
            (part.clone(), pull_dest),
            (part.clone(), format!("{w}/dest-r3")),
            (format!("{w}/tree-20x1024-16384-1/part0"), format!("{w}/dest-r4")),
            (tree.clone(), format!("{w}/dest-r5")),
        ] {
            assert!(rec.commands.contains(&strings(&["/usr/bin/diff", "-qr", &src, &copy])), "{src} {copy}");
        }
        // The document: each cp run's mode, and the machine's CPU over each run.
        let modes: Vec<Option<CpMode>> = doc.runs.iter().map(|r| r.mode).collect();
        let want = [Some(CpMode::Push), Some(CpMode::Pull), Some(CpMode::SshPush), Some(CpMode::SshPull), None];
        assert_eq!(modes, want);
        assert!(doc.runs.iter().all(|r| r.ok), "{:?}", doc.runs.iter().map(|r| &r.error).collect::<Vec<_>>());
        assert!(doc.runs.iter().all(|r| r.machine_cpu_s == Some(1.5)), "one reading before, one after each run");
        assert_eq!(doc.runs[4].bytes, Some(0), "rclone is timed by the runner over the tree's bytes");
    }

    #[test]
    fn ssh_master_runs_share_one_master_connection_opened_before_the_clock() {
        let text = modes()
            .replace("name = \"ssh-push\"\n", "name = \"ssh-push\"\nssh_master = true\n")
            .replace("name = \"ssh-pull\"\n", "name = \"ssh-pull\"\nssh_master = true\n")
            + "[[run]]\nname = \"rsync\"\ntool = \"rsync\"\nhost = \"a\"\nserver = \"b\"\nfiles = 4\nssh_master = true\n";
        let cp_out = serde_json::to_string(&linerate_model::doc::example::cp()).unwrap();
        let rec = RecordingExecutor { outputs: vec![("linerate".into(), cp_out)], ..Default::default() };
        let (doc, rec, plan) = run_recorded(&text, "lrunit8", rec, false);
        let w = doc.unwrap().workdir.unwrap();
        let addr = fmt_ip(plan.server_addr("a", "b", None).unwrap());
        let sock = format!("{w}/ssh/master-0");
        let masters: Vec<&Job> = rec.spawned.iter().filter(|j| j.argv.contains(&"-N".to_string())).collect();
        assert_eq!(masters.len(), 1, "one master for every run from a to b's sshd");
        let m = &masters[0].argv;
        assert_eq!(m[3], "lrunit8-a", "opened from the client host: {m:?}");
        for o in [
            "ControlMaster=yes",
            &format!("ControlPath={sock}"),
            "ControlPersist=no",
            &format!("{}@{addr}", lab_user()),
        ] {
            assert!(m.contains(&o.to_string()), "{o} in {m:?}");
        }
        let through = format!("-o ControlPath={sock} -o ControlMaster=no");
        let clients: Vec<&Job> = rec.spawned.iter().filter(|j| j.argv.iter().any(|a| a.contains(&through))).collect();
        assert_eq!(clients.len(), 3, "ssh-push, ssh-pull and rsync go through it");
        let master_at = rec.spawned.iter().position(|j| j.argv.contains(&"-N".to_string())).unwrap();
        let first_client = rec.spawned.iter().position(|j| j.argv.iter().any(|a| a.contains(&through))).unwrap();
        assert!(master_at < first_client, "the master is up before its first client starts");
        assert!(!rec
            .spawned
            .iter()
            .any(|j| j.argv.iter().any(|a| a.contains("ControlPath")) && j.argv.contains(&"rclone".to_string())));
    }

    #[test]
    fn prefault_writes_and_deletes_a_scratch_file_as_large_as_the_copies() {
        private_state_dir();
        let rec = SharedRecorder::new(RecordingExecutor::default());
        let sc = Scenario::parse(SC).unwrap();
        let never = Shutdown::never();
        let mut lab = Lab::up_with(Box::new(rec.clone()), &sc, Path::new("u.toml"), "lrunit7", false, &never).unwrap();
        let w = tempfile::tempdir().unwrap();
        let mut env = Env::new(w.path().to_path_buf(), Path::new("/opt/linerate"));
        env.prefault(&mut lab, 0).unwrap();
        env.prefault(&mut lab, (3 << 20) + 1).unwrap();
        let dd: Vec<Vec<String>> = rec.rec().commands.iter().filter(|c| c[0] == "/usr/bin/dd").cloned().collect();
        let of = format!("of={}/prefault", w.path().display());
        assert_eq!(
            dd,
            [strings(&["/usr/bin/dd", "if=/dev/zero", &of, "bs=1M", "count=4", "status=none"])],
            "none for 0 bytes"
        );
        assert_eq!(std::fs::read_dir(w.path()).unwrap().count(), 0, "the scratch file is deleted");
    }

    #[test]
    fn a_scenario_workdir_holds_the_trees_instead_of_tmpfs() {
        let disk = tempfile::tempdir().unwrap();
        let text =
            format!("workdir = \"{}\"\n{}", disk.path().display(), SC.replace("name = \"unit\"", "name = \"w\""));
        let (doc, rec, _) = run_recorded(&text, "lrunit5", RecordingExecutor::default(), false);
        let w = doc.unwrap().workdir.unwrap();
        assert!(w.starts_with(&format!("{}/linerate-lrunit5-", disk.path().display())), "{w}");
        let mktree = rec.commands.iter().find(|c| c[1] == "mktree").unwrap();
        assert!(mktree[2].starts_with(&w), "{mktree:?}");
        assert!(rec.spawned.iter().flat_map(|j| &j.argv).all(|a| !a.contains("/dev/shm")));
        assert_eq!(std::fs::read_dir(disk.path()).unwrap().count(), 0, "removed at the end");
    }

    #[test]
    fn a_copy_that_differs_from_its_source_fails_its_run() {
        let cp_out = serde_json::to_string(&linerate_model::doc::example::cp()).unwrap();
        let rec = RecordingExecutor {
            outputs: vec![("linerate".into(), cp_out)],
            failing: vec!["diff".into()],
            ..Default::default()
        };
        let (doc, rec, _) = run_recorded(&modes(), "lrunit6", rec, false);
        let doc = doc.unwrap();
        for r in &doc.runs {
            assert!(!r.ok && r.rate_bps.is_none(), "{r:?}");
            let e = r.error.as_deref().unwrap();
            assert!(e.contains("differs from its source") && e.contains("diff failed (recorded)"), "{e}");
        }
        assert_eq!(rec.spawned.len(), 7, "each copy ran; only its check failed");
        assert!(!doc.groups.iter().any(|g| g.ok));
    }

    #[test]
    fn the_rclone_configuration_names_the_sshd_its_key_and_host_key() {
        let dir = tempfile::tempdir().unwrap();
        let mut env = Env::new(dir.path().to_path_buf(), Path::new("/opt/linerate"));
        env.ssh = Some(SshKeys {
            user_key: "/w/ssh/user_key".into(),
            host_pub: "ssh-ed25519 AAAAhost linerate-lab".into(),
            ..Default::default()
        });
        let conf = env.rclone_conf("198.18.0.2", 2222, "r9").unwrap();
        let known = dir.path().join("r9.known_hosts");
        assert_eq!(
            std::fs::read_to_string(&conf).unwrap(),
            format!(
                "[lab]\ntype = sftp\nhost = 198.18.0.2\nport = 2222\nuser = {}\nkey_file = /w/ssh/user_key\n\
                 known_hosts_file = {}\n",
                lab_user(),
                known.display()
            )
        );
        assert_eq!(std::fs::read_to_string(known).unwrap(), "[198.18.0.2]:2222 ssh-ed25519 AAAAhost linerate-lab\n");
    }

    #[test]
    fn the_wait_ends_at_each_instance_exit_or_timeout_and_at_once_on_a_stop() {
        let dir = tempfile::tempdir().unwrap();
        let mut n = 0;
        let mut start = |argv: &[&str], timeout: Duration| {
            n += 1;
            let (stdout, stderr) = (dir.path().join(format!("{n}.out")), dir.path().join(format!("{n}.err")));
            let job = Job { argv: strings(argv), stdout, stderr, feeder: None };
            let p = crate::exec::SystemExecutor.spawn(&job).unwrap();
            Started {
                procs: vec![p],
                out: vec![job],
                bytes: 0,
                cleanup: vec![],
                verify: None,
                server: None,
                pending: vec![],
                syncable: false,
                t0: Instant::now(),
                timeout,
            }
        };
        let long = Duration::from_secs(600);
        let mut three = [
            start(&["sleep", "600"], Duration::from_millis(100)),
            start(&["true"], long),
            start(&["sh", "-c", "echo oops >&2; exit 3"], long),
        ];
        let sleeper = three[0].procs[0].id();
        let out = wait_all(&mut three, &Shutdown::never()).unwrap();
        assert_eq!(out[0].1.as_deref(), Some("timed out after 0 s"));
        assert_eq!(out[1].1, None);
        assert_eq!(out[2].1.as_deref(), Some("exited with exit status: 3: oops"));
        assert!(out[0].0 < 60.0, "killed at its timeout, not at the sleep's end: {} s", out[0].0);
        assert!(proc_start(sleeper).is_none(), "the timed-out process is killed and reaped");

        let stopper = Stopper::new();
        stopper.stop();
        let mut one = [start(&["sleep", "600"], long)];
        let pid = one[0].procs[0].id();
        assert!(matches!(wait_all(&mut one, &stopper.shutdown()), Err(LabError::Interrupted)));
        assert!(proc_start(pid).is_none(), "the stop killed and reaped it before the wait returned");
    }

    #[test]
    fn parses_iperf3_bench_and_cp_output() {
        let iperf = r#"{"intervals":[{"sum":{"start":0,"end":1,"bits_per_second":9e8}}],
            "end":{"sum_received":{"bits_per_second":9.5e8,"seconds":10,"bytes":1187500000},
                   "streams":[{"receiver":{"bits_per_second":5e8}},{"receiver":{"bits_per_second":4.5e8}}],
                   "cpu_utilization_percent":{"host_user":1.5,"host_system":20,"remote_user":1,"remote_system":30}}}"#;
        let m = parse_result(Tool::Iperf3, iperf, 0, 10.0).unwrap();
        assert_eq!(m.rate_bps, 9.5e8);
        assert_eq!(m.bytes, Some(1_187_500_000));
        assert_eq!(m.intervals, [Interval { start_s: 0.0, end_s: 1.0, bps: 9e8 }]);
        assert!((m.fairness.unwrap() - 0.9972).abs() < 1e-3);
        assert_eq!(m.cpu.unwrap().local.unwrap().system, 0.2);
        assert!(parse_result(Tool::Iperf3, r#"{"error":"unable to connect"}"#, 0, 1.0)
            .err()
            .unwrap()
            .contains("unable"));

        let doc = linerate_model::doc::example::bench();
        let m = parse_result(Tool::Bench, &serde_json::to_string(&doc).unwrap(), 0, 1.0).unwrap();
        let s = doc.summary.as_ref().unwrap();
        assert_eq!(m.rate_bps, s.throughput_bps);
        assert_eq!(m.fairness, s.jain);
        assert_eq!(m.flows, Some(s.connections));
        assert_eq!(m.cpu.unwrap().remote.unwrap().busy(), s.cpu.remote.busy());
        assert_eq!(m.intervals.len(), doc.intervals.as_ref().unwrap().len());
        assert_eq!(m.raw.as_ref().and_then(RawDoc::bench), Some(&doc));
        let e = parse_result(Tool::Bench, r#"{"schema":"linerate.bench/1","summary":{"throughput_bps":3e9}}"#, 0, 1.0);
        assert!(e.err().unwrap().contains("missing field"), "an incomplete document is refused, not half read");

        let cp = linerate_model::doc::example::cp();
        let m = parse_result(Tool::Cp, &serde_json::to_string(&cp).unwrap(), 0, 2.0).unwrap();
        assert_eq!(m.bytes, Some(cp.bytes));
        assert_eq!(m.rate_bps, cp.bytes as f64 * 8.0 / 2.0);
        let incomplete = serde_json::to_string(&CpSummary { complete: false, ..cp }).unwrap();
        assert!(parse_result(Tool::Cp, &incomplete, 0, 2.0).is_err());

        let m = parse_result(Tool::Scp, "", 1_000_000_000, 8.0).unwrap();
        assert_eq!(m.rate_bps, 1e9);
    }
}
