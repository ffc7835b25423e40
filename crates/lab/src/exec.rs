//! The one boundary between the lab and the operating system's processes: running an
//! `ip`/`tc`/`ssh-keygen`/`diff` argv to completion, starting a server or a client in the
//! background (waited on by a thread, killed through a pidfd by another), waiting until a
//! server listens, stopping a process by pid and start time (the pid helpers the state file's
//! teardown uses too), finding a program, reading the machine's busy CPU time. The system
//! executor does it (never through a shell);
//! the recording one lets the planner, the teardown and the runner be tested without root by
//! the commands they ask for.

use crate::LabError;
use std::fs::File;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A command started in the background, its output going to files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// The program and its arguments (`ip netns exec NS …` included when it runs in a host).
    pub argv: Vec<String>,
    /// Where its standard output goes (created).
    pub stdout: PathBuf,
    /// Where its standard error goes; the same path as `stdout` shares the file.
    pub stderr: PathBuf,
    /// A local command whose standard output is this one's standard input (`tar -c | ssh`).
    pub feeder: Option<Vec<String>>,
}

/// A process started by [`Executor::spawn`].
pub trait Process: Send {
    /// Its pid.
    fn id(&self) -> u32;
    /// Its exit status once it has exited (its feeder is then ended too).
    fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>>;
    /// Blocks until it exits; its status (its feeder is then ended too). A waiter thread's
    /// call: [`Process::killer`] ends it from another.
    fn wait(&mut self) -> std::io::Result<ExitStatus>;
    /// What kills it from another thread while one waits on it.
    fn killer(&self) -> Killer;
    /// Kills it (and its feeder) and reaps it.
    fn kill(&mut self);
}

/// Kills one started process from any thread: SIGKILL through a pidfd opened while the
/// process could not yet have been reaped, so never another process that reused its pid.
#[derive(Debug)]
pub struct Killer(Option<std::os::fd::OwnedFd>);

impl Killer {
    /// One that kills nothing (a recorded process, or one whose pidfd could not be opened).
    pub fn none() -> Killer {
        Killer(None)
    }

    /// SIGKILL to the process; nothing once it has been reaped.
    pub fn kill(&self) {
        if let Some(fd) = &self.0 {
            let _ = rustix::process::pidfd_send_signal(fd, rustix::process::Signal::KILL);
        }
    }
}

/// Everything the lab asks of the operating system's processes.
pub trait Executor {
    /// Runs `argv` (the first element is the program) to completion; its standard output.
    fn run(&mut self, argv: &[String]) -> Result<String, LabError>;
    /// Starts `job` in the background.
    fn spawn(&mut self, job: &Job) -> Result<Box<dyn Process>, LabError>;
    /// Waits up to `limit` until process `pid` (in its own namespace) listens on TCP `port`;
    /// false if it exited or the time ran out.
    fn wait_listening(&mut self, pid: u32, port: u16, limit: Duration) -> bool;
    /// Waits up to `limit` until `path` exists (a control socket process `pid` makes); false if
    /// the process exited or the time ran out.
    fn wait_path(&mut self, pid: u32, path: &Path, limit: Duration) -> bool;
    /// Ends process `pid` if it is still the one that started at `start`: SIGTERM, up to
    /// `grace`, then SIGKILL.
    fn stop(&mut self, pid: u32, start: u64, grace: Duration);
    /// The first of `names` found in the system's program directories.
    fn find_program(&mut self, names: &[&str]) -> Option<PathBuf>;
    /// Busy core-seconds of the whole machine since boot (`/proc/stat`); `None` if unreadable.
    fn busy_cpu_s(&mut self) -> Option<f64> {
        busy_cpu_s(&std::fs::read_to_string("/proc/stat").ok()?, rustix::param::clock_ticks_per_second())
    }
}

/// Busy core-seconds in a `/proc/stat` text: user + nice + system + irq + softirq + steal of
/// the `cpu` line (idle and iowait are not busy; guest time is already in user and nice), over
/// `ticks_per_s` (USER_HZ).
pub fn busy_cpu_s(stat: &str, ticks_per_s: u64) -> Option<f64> {
    let line = stat.lines().find(|l| l.split_whitespace().next() == Some("cpu"))?;
    let v: Vec<u64> = line.split_whitespace().skip(1).map(str::parse).collect::<Result<_, _>>().ok()?;
    // user nice system idle iowait irq softirq steal
    let busy = [0, 1, 2, 5, 6, 7].iter().map(|&i| v.get(i).copied().unwrap_or(0)).sum::<u64>();
    (v.len() >= 4 && ticks_per_s > 0).then(|| busy as f64 / ticks_per_s as f64)
}

/// Runs commands as subprocesses.
#[derive(Debug, Default)]
pub struct SystemExecutor;

impl Executor for SystemExecutor {
    fn run(&mut self, argv: &[String]) -> Result<String, LabError> {
        let (prog, args) = argv.split_first().ok_or(LabError::EmptyCommand { what: "run" })?;
        let out = Command::new(prog)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| LabError::Io(format!("running {prog} (is it installed?)"), e))?;
        if !out.status.success() {
            // what went wrong is on stderr, except for the tools that report on stdout (diff -q)
            let said = if out.stderr.iter().all(u8::is_ascii_whitespace) { &out.stdout } else { &out.stderr };
            let mut stderr = String::from_utf8_lossy(said).trim().to_string();
            if let Some((i, _)) = stderr.char_indices().nth(2000) {
                stderr.truncate(i);
            }
            return Err(LabError::Command { argv: argv.join(" "), status: out.status.to_string(), stderr });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn spawn(&mut self, job: &Job) -> Result<Box<dyn Process>, LabError> {
        let (prog, args) = job.argv.split_first().ok_or(LabError::EmptyCommand { what: "background" })?;
        let create = |p: &Path| File::create(p).map_err(|e| LabError::Io(format!("creating {}", p.display()), e));
        let out = create(&job.stdout)?;
        let err = if job.stderr == job.stdout {
            out.try_clone().map_err(|e| LabError::Io(format!("sharing {}", job.stdout.display()), e))?
        } else {
            create(&job.stderr)?
        };
        let mut cmd = Command::new(prog);
        cmd.args(args).stdout(out).stderr(err).stdin(Stdio::null());
        let feeder = match &job.feeder {
            None => None,
            Some(f) => {
                let (fprog, fargs) = f.split_first().ok_or(LabError::EmptyCommand { what: "feeder" })?;
                let mut child = Command::new(fprog)
                    .args(fargs)
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .map_err(|e| LabError::Io(format!("starting {fprog}"), e))?;
                let pipe = child.stdout.take().ok_or_else(|| LabError::NoFeederPipe { program: fprog.clone() })?;
                cmd.stdin(Stdio::from(pipe));
                Some(child)
            }
        };
        match cmd.spawn() {
            Ok(child) => {
                // Opened before anyone can reap the child: the pidfd is of this process.
                let pidfd = rustix::process::Pid::from_raw(child.id() as i32)
                    .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok());
                Ok(Box::new(SystemProcess { child, feeder, pidfd }))
            }
            Err(e) => {
                if let Some(mut f) = feeder {
                    end(&mut f);
                }
                Err(LabError::Io(format!("starting {prog}"), e))
            }
        }
    }

    fn wait_listening(&mut self, pid: u32, port: u16, limit: Duration) -> bool {
        let t = Instant::now();
        while t.elapsed() < limit {
            if ["tcp", "tcp6"]
                .iter()
                .any(|f| std::fs::read_to_string(format!("/proc/{pid}/net/{f}")).is_ok_and(|s| listens(&s, port)))
            {
                return true;
            }
            if proc_start(pid).is_none() {
                return false;
            }
            // A polling loop kept on purpose (issue 30): nothing signals that another process
            // (in another namespace) started listening; /proc/PID/net/tcp is read every 50 ms.
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    fn wait_path(&mut self, pid: u32, path: &Path, limit: Duration) -> bool {
        let t = Instant::now();
        while t.elapsed() < limit {
            if path.exists() {
                return true;
            }
            if proc_start(pid).is_none() {
                return false;
            }
            // A polling loop kept on purpose (issue 30): the control socket appears once the
            // emulator has made its TAPs; inotify would need the directory watched before the
            // spawn, for a wait of a few milliseconds at bring-up.
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    fn stop(&mut self, pid: u32, start: u64, grace: Duration) {
        stop_process(pid, start, grace);
    }

    fn find_program(&mut self, names: &[&str]) -> Option<PathBuf> {
        for n in names {
            let p = Path::new(n);
            if p.is_absolute() && p.exists() {
                return Some(p.to_path_buf());
            }
            for dir in ["/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/sbin", "/usr/local/bin"] {
                let c = Path::new(dir).join(n);
                if c.exists() {
                    return Some(c);
                }
            }
        }
        None
    }
}

/// Start time of a process (field 22 of /proc/PID/stat), or None if it does not exist.
pub fn proc_start(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    // After the comm: state is field 3, starttime field 22.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether `pid` is alive and is still the process that started at `start`.
pub fn alive(pid: u32, start: u64) -> bool {
    proc_start(pid) == Some(start) && !is_zombie(pid)
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| s[i + 1..].trim_start().starts_with('Z')))
        .unwrap_or(false)
}

pub(crate) fn signal(pid: u32, sig: rustix::process::Signal) {
    if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(p, sig);
    }
}

/// Ends a process the lab started: SIGTERM, up to `grace`, then SIGKILL. Only if `start` matches.
pub fn stop_process(pid: u32, start: u64, grace: Duration) {
    if !alive(pid, start) {
        return;
    }
    signal(pid, rustix::process::Signal::TERM);
    if !exit_within(pid, start, grace) {
        signal(pid, rustix::process::Signal::KILL);
    }
}

/// Waits up to `limit` for process `pid` (the one that started at `start`) to exit; whether it
/// did. The wait is a `poll` on a pidfd, which becomes readable when the process exits: no
/// polling of /proc.
pub fn exit_within(pid: u32, start: u64, limit: Duration) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let Some(p) = rustix::process::Pid::from_raw(pid as i32) else { return true };
    let Ok(fd) = rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()) else {
        return !alive(pid, start);
    };
    // The pidfd is of the right process only if it still has the recorded start time.
    if !alive(pid, start) {
        return true;
    }
    let deadline = std::time::Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let ts = Timespec { tv_sec: left.as_secs() as i64, tv_nsec: i64::from(left.subsec_nanos()) };
        match rustix::event::poll(&mut [PollFd::new(&fd, PollFlags::IN)], Some(&ts)) {
            Ok(0) => return false,
            Ok(_) => return true,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return !alive(pid, start),
        }
    }
}

/// Whether a `/proc/PID/net/tcp` table has a socket listening on `port`.
fn listens(table: &str, port: u16) -> bool {
    let want = format!(":{port:04X}");
    table.lines().skip(1).any(|l| {
        let cols: Vec<&str> = l.split_whitespace().collect();
        cols.len() > 3 && cols[1].ends_with(&want) && cols[3] == "0A"
    })
}

fn end(c: &mut Child) {
    let _ = c.kill();
    let _ = c.wait();
}

/// A subprocess, the local command feeding it, if any, and a pidfd to kill it by.
struct SystemProcess {
    child: Child,
    feeder: Option<Child>,
    pidfd: Option<std::os::fd::OwnedFd>,
}

impl SystemProcess {
    fn end_feeder(&mut self) {
        if let Some(mut f) = self.feeder.take() {
            end(&mut f);
        }
    }
}

impl Process for SystemProcess {
    fn id(&self) -> u32 {
        self.child.id()
    }

    fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        let r = self.child.try_wait()?;
        if r.is_some() {
            self.end_feeder();
        }
        Ok(r)
    }

    fn wait(&mut self) -> std::io::Result<ExitStatus> {
        let r = self.child.wait();
        self.end_feeder();
        r
    }

    fn killer(&self) -> Killer {
        Killer(self.pidfd.as_ref().and_then(|fd| fd.try_clone().ok()))
    }

    fn kill(&mut self) {
        end(&mut self.child);
        self.end_feeder();
    }
}

/// Records what it is asked instead of doing it. Commands succeed (or the `fail_at`-th fails,
/// and those of `failing` programs), and a `ssh-keygen … -f KEY` leaves a placeholder `KEY.pub`
/// for the runner to read; started processes exit at once, with status 0 (1 for `failing`
/// programs), having printed `outputs` for their program; every program is found under
/// `/usr/bin`; every server listens; the machine's busy CPU time grows by 1.5 s a reading.
#[derive(Debug, Default)]
pub struct RecordingExecutor {
    /// Every command run to completion, in order.
    pub commands: Vec<Vec<String>>,
    /// Fail this command (0-based, counted in `commands`), to test cleanup after an error.
    pub fail_at: Option<usize>,
    /// Every process started, in order.
    pub spawned: Vec<Job>,
    /// Pids stopped, in order, each with how many processes had been started by then.
    pub stopped: Vec<(u32, usize)>,
    /// What a started program prints, by its file name (`iperf3`, `linerate`).
    pub outputs: Vec<(String, String)>,
    /// Programs whose processes exit with status 1, and whose commands fail.
    pub failing: Vec<String>,
    /// Namespaces whose started processes exit with status 1 (one member of a group failing).
    pub failing_ns: Vec<String>,
    /// Readings of the machine's busy CPU time so far.
    pub cpu_readings: u32,
}

/// The pid of the first recorded process: above any real pid (the kernel's limit is 2^22), so
/// a stop that reached the system by mistake could not hit a real process.
pub const RECORDED_PID_BASE: u32 = 1 << 30;

impl RecordingExecutor {
    /// The program a job runs (after `ip netns exec NS`).
    fn program(argv: &[String]) -> &str {
        let prog = match argv {
            [ip, netns, exec, _ns, prog, ..] if ip == "ip" && netns == "netns" && exec == "exec" => prog,
            [prog, ..] => prog,
            [] => "",
        };
        Path::new(prog).file_name().and_then(|n| n.to_str()).unwrap_or("")
    }
}

impl Executor for RecordingExecutor {
    fn run(&mut self, argv: &[String]) -> Result<String, LabError> {
        let i = self.commands.len();
        self.commands.push(argv.to_vec());
        if self.fail_at == Some(i) {
            return Err(LabError::Command { argv: argv.join(" "), status: "exit 2".into(), stderr: "injected".into() });
        }
        if self.failing.iter().any(|p| p == Self::program(argv)) {
            let stderr = format!("{} failed (recorded)", Self::program(argv));
            return Err(LabError::Command { argv: argv.join(" "), status: "exit status: 1".into(), stderr });
        }
        if Self::program(argv) == "ssh-keygen" {
            if let Some(k) = argv.iter().skip_while(|a| *a != "-f").nth(1) {
                let public = format!("{k}.pub");
                std::fs::write(&public, "ssh-ed25519 AAAArecorded linerate-lab\n")
                    .map_err(|e| LabError::Io(format!("writing {public}"), e))?;
            }
        }
        Ok(String::new())
    }

    fn spawn(&mut self, job: &Job) -> Result<Box<dyn Process>, LabError> {
        let prog = Self::program(&job.argv).to_string();
        let out = self.outputs.iter().find(|(p, _)| *p == prog).map(|(_, o)| o.as_str()).unwrap_or("");
        std::fs::write(&job.stdout, out).map_err(|e| LabError::Io(format!("writing {}", job.stdout.display()), e))?;
        let ns_fails = matches!(&job.argv[..], [ip, _, _, ns, ..] if ip == "ip" && self.failing_ns.contains(ns));
        let code = if self.failing.contains(&prog) || ns_fails { 1 } else { 0 };
        let pid = RECORDED_PID_BASE + self.spawned.len() as u32;
        self.spawned.push(job.clone());
        Ok(Box::new(RecordedProcess { pid, code }))
    }

    fn wait_listening(&mut self, _pid: u32, _port: u16, _limit: Duration) -> bool {
        true
    }

    fn wait_path(&mut self, _pid: u32, _path: &Path, _limit: Duration) -> bool {
        true
    }

    fn stop(&mut self, pid: u32, _start: u64, _grace: Duration) {
        self.stopped.push((pid, self.spawned.len()));
    }

    fn find_program(&mut self, names: &[&str]) -> Option<PathBuf> {
        names.first().map(|n| Path::new("/usr/bin").join(n))
    }

    fn busy_cpu_s(&mut self) -> Option<f64> {
        self.cpu_readings += 1;
        Some(1.5 * f64::from(self.cpu_readings))
    }
}

/// A recorded process: already exited.
struct RecordedProcess {
    pid: u32,
    code: i32,
}

impl Process for RecordedProcess {
    fn id(&self) -> u32 {
        self.pid
    }

    fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        Ok(Some(ExitStatus::from_raw(self.code << 8)))
    }

    fn wait(&mut self) -> std::io::Result<ExitStatus> {
        Ok(ExitStatus::from_raw(self.code << 8))
    }

    fn killer(&self) -> Killer {
        Killer::none()
    }

    fn kill(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_listening_socket_from_the_proc_table() {
        let table = "  sl  local_address rem_address   st\n\
                     0: 00000000:1EC6 00000000:0000 0A 00000000\n\
                     1: 0100007F:1451 0100007F:9C40 01 00000000\n";
        assert!(listens(table, 7878), "0x1EC6 = 7878, state 0A = LISTEN");
        assert!(!listens(table, 5201), "5201 = 0x1451 is an established connection, not a listener");
        assert!(!listens(table, 0x1EC), "a port whose hex is a suffix of another does not match");
    }

    #[test]
    fn reads_busy_cpu_time_from_proc_stat() {
        let stat = "cpu  100 20 30 1000 50 5 15 10 7 0\ncpu0 50 10 15 500 25 2 7 5 3 0\nintr 1 2\n";
        // user 100 + nice 20 + system 30 + irq 5 + softirq 15 + steal 10 = 180 ticks
        assert_eq!(busy_cpu_s(stat, 100), Some(1.8));
        assert_eq!(busy_cpu_s("cpu0 1 2 3 4\n", 100), None, "only the machine's line counts");
        assert_eq!(busy_cpu_s("cpu  1 x 3 4\n", 100), None);
        assert!(SystemExecutor.busy_cpu_s().is_some_and(|s| s > 0.0), "this machine's /proc/stat");
    }

    #[test]
    fn a_failed_command_says_what_it_printed() {
        let e = SystemExecutor.run(&["sh".into(), "-c".into(), "echo differ; exit 1".into()]).unwrap_err();
        assert!(matches!(&e, LabError::Command { stderr, .. } if stderr == "differ"), "{e}");
        let e = SystemExecutor.run(&["sh".into(), "-c".into(), "echo out; echo err >&2; exit 1".into()]).unwrap_err();
        assert!(matches!(&e, LabError::Command { stderr, .. } if stderr == "err"), "{e}");
    }

    #[test]
    fn a_spawned_pipeline_runs_and_its_status_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let (out, err) = (dir.path().join("o"), dir.path().join("e"));
        let job = Job {
            argv: vec!["tr".into(), "a-z".into(), "A-Z".into()],
            stdout: out.clone(),
            stderr: err,
            feeder: Some(vec!["echo".into(), "linerate".into()]),
        };
        let mut p = SystemExecutor.spawn(&job).unwrap();
        assert!(p.wait().unwrap().success());
        assert_eq!(std::fs::read_to_string(out).unwrap(), "LINERATE\n");
        let missing = Job { argv: vec!["/nonexistent/prog".into()], ..job };
        assert!(matches!(SystemExecutor.spawn(&missing), Err(LabError::Io(..))));
    }

    #[test]
    fn a_killer_ends_a_wait_blocked_on_another_thread() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("o");
        let job = Job { argv: vec!["sleep".into(), "600".into()], stdout: out.clone(), stderr: out, feeder: None };
        let mut p = SystemExecutor.spawn(&job).unwrap();
        let (pid, killer) = (p.id(), p.killer());
        let waiter = std::thread::spawn(move || p.wait().unwrap());
        killer.kill();
        let status = waiter.join().unwrap();
        assert_eq!(status.signal(), Some(9), "{status}");
        assert!(proc_start(pid).is_none(), "reaped by the wait");
        killer.kill(); // after the reap: nothing, never another process
    }

    #[test]
    fn reads_own_start_time_and_liveness() {
        let me = std::process::id();
        let st = proc_start(me).unwrap();
        assert!(alive(me, st));
        assert!(!alive(me, st + 1), "a different start time is a different process");
        assert!(!alive(u32::MAX - 1, st));
    }
}
