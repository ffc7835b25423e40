//! A lab that is up: its plan, its state file and a guard that tears it down when dropped
//! (error paths and panics included) unless it was detached on purpose.

use crate::exec::proc_start;
use crate::exec::{Executor, SystemExecutor};
use crate::plan::Plan;
use crate::scenario::Scenario;
use crate::state::{clean_stale, ProcRec, RunState};
use crate::LabError;
use linerate_model::shutdown::Shutdown;
use std::path::{Path, PathBuf};

/// Where a lab tells what it cannot return (a teardown's problems on drop).
type Tell = Box<dyn FnMut(&str) + Send>;

/// A lab that is up. Dropping it tears it down.
pub struct Lab {
    /// The plan it was built from.
    pub plan: Plan,
    /// Its state (also on disk).
    pub state: RunState,
    ex: Box<dyn Executor>,
    finished: bool,
    /// Handles of the emulator processes, reaped at teardown.
    children: Vec<Box<dyn crate::exec::Process>>,
    /// Told of each problem of a teardown on drop (the library prints nothing): [`Lab::on_drop_problem`].
    on_drop_problem: Option<Tell>,
}

/// A fresh run id: `lr` and six hex digits, not used by any state file or namespace.
pub fn new_run_id() -> String {
    use std::hash::BuildHasher;
    loop {
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let h = std::collections::hash_map::RandomState::new().hash_one((std::process::id(), nanos));
        let id = format!("lr{:06x}", h & 0xff_ffff);
        let taken = crate::state::state_dir().join(format!("{id}.json")).exists()
            || std::fs::read_dir("/run/netns")
                .into_iter()
                .flatten()
                .flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with(&id));
        if !taken {
            return id;
        }
    }
}

impl Lab {
    /// Brings a scenario up with the system executor (needs root). Stale runs of dead owners
    /// are cleaned first, each told to `tell` in a line for the user. A stop of `stop` (the caller's
    /// signals) between two commands tears down what was built and returns
    /// [`LabError::Interrupted`].
    pub fn up(
        sc: &Scenario,
        file: &Path,
        detached: bool,
        stop: &Shutdown,
        tell: &mut dyn FnMut(&str),
    ) -> Result<Lab, LabError> {
        if !crate::is_root() {
            return Err(LabError::NotRoot);
        }
        let mut ex = SystemExecutor;
        for id in clean_stale(&mut ex) {
            tell(&format!("linerate lab: cleaned stale run {id}"));
        }
        Self::up_with(Box::new(SystemExecutor), sc, file, &new_run_id(), detached, stop)
    }

    /// Brings a scenario up through `ex` as run `run`. On any error (or `stop`) everything
    /// created so far is removed before returning.
    pub fn up_with(
        ex: Box<dyn Executor>,
        sc: &Scenario,
        file: &Path,
        run: &str,
        detached: bool,
        stop: &Shutdown,
    ) -> Result<Lab, LabError> {
        let plan = Plan::new(sc, run)?;
        let me = std::process::id();
        let state = RunState {
            run: run.to_string(),
            scenario: sc.name.clone(),
            file: file.display().to_string(),
            pid: me,
            pid_start: proc_start(me).unwrap_or(0),
            detached,
            created_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            namespaces: plan.namespaces.clone(),
            hosts: plan.hosts.iter().map(|(h, p)| (h.clone(), p.ns.clone())).collect(),
            processes: Vec::new(),
            temp_dirs: Vec::new(),
            description: plan.description.clone(),
            emulators: plan.emulators.iter().map(|e| (e.link.clone(), e.control.clone())).collect(),
        };
        // Recorded before anything exists, so a crash at any point leaves a cleanable record.
        state.save()?;
        let mut lab = Lab { plan, state, ex, finished: false, children: Vec::new(), on_drop_problem: None };
        let cmds = lab.plan.commands.clone();
        for (i, c) in cmds.iter().enumerate() {
            if i == lab.plan.emulators_at {
                lab.start_emulators()?;
            }
            if stop.is_stopped() {
                return Err(LabError::Interrupted); // the guard tears down
            }
            lab.ex.run(c)?;
        }
        Ok(lab)
    }

    /// Starts one `linerate lab emulate` per emulated link (this binary), records it, and waits
    /// until its TAPs exist. Its configuration, control socket and log live in a directory of
    /// the state directory, removed at teardown.
    fn start_emulators(&mut self) -> Result<(), LabError> {
        let emus = self.plan.emulators.clone();
        let Some(first) = emus.first() else { return Ok(()) };
        let dir = first.ready.parent().map(Path::to_path_buf).unwrap_or_else(crate::state::state_dir);
        std::fs::create_dir_all(&dir).map_err(|e| LabError::Io(format!("creating {}", dir.display()), e))?;
        self.add_temp_dir(dir.clone())?;
        // The control sockets change links: only root may reach them.
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .map_err(|e| LabError::Io(format!("making {} private", dir.display()), e))?;
        let me = std::env::current_exe().map_err(|e| LabError::Io("finding the running linerate".into(), e))?;
        for (i, e) in emus.iter().enumerate() {
            let conf = dir.join(format!("emu{i}.json"));
            let text = serde_json::to_vec_pretty(e)
                .map_err(|source| LabError::Encode { what: conf.display().to_string(), source })?;
            std::fs::write(&conf, text).map_err(|x| LabError::Io(format!("writing {}", conf.display()), x))?;
            let log = dir.join(format!("emu{i}.log"));
            let argv = vec![
                me.display().to_string(),
                "lab".into(),
                "emulate".into(),
                "--config".into(),
                conf.display().to_string(),
            ];
            let child =
                self.ex.spawn(&crate::exec::Job { argv, stdout: log.clone(), stderr: log.clone(), feeder: None })?;
            let pid = child.id();
            self.children.push(child);
            self.add_process(pid, &format!("emulator of link {}", e.link))?;
            if !self.ex.wait_path(pid, &e.ready, std::time::Duration::from_secs(10)) {
                let said = std::fs::read_to_string(&log).unwrap_or_default();
                return Err(LabError::Run(
                    format!("emulator of link {}", e.link),
                    format!("its TAP devices did not come up: {}", said.trim()),
                ));
            }
        }
        Ok(())
    }

    /// Records a process started inside the lab (stopped by pid at teardown).
    pub fn add_process(&mut self, pid: u32, what: &str) -> Result<(), LabError> {
        let start = proc_start(pid).unwrap_or(0);
        self.state.processes.push(ProcRec { pid, start, what: what.to_string() });
        self.state.save()
    }

    /// Records a temporary directory (removed at teardown).
    pub fn add_temp_dir(&mut self, p: PathBuf) -> Result<(), LabError> {
        self.state.temp_dirs.push(p);
        self.state.save()
    }

    /// The executor the lab was built with; the runner starts and stops its processes through it.
    pub fn exec(&mut self) -> &mut dyn Executor {
        self.ex.as_mut()
    }

    /// The namespace of a host.
    pub fn ns(&self, host: &str) -> Result<&str, LabError> {
        self.plan
            .hosts
            .get(host)
            .map(|h| h.ns.as_str())
            .ok_or_else(|| LabError::Scenario(format!("unknown host '{host}'")))
    }

    /// Where the problems of a teardown on drop (an error path; [`Lab::down`] returns them
    /// instead) are told.
    pub fn on_drop_problem(&mut self, tell: impl FnMut(&str) + Send + 'static) {
        self.on_drop_problem = Some(Box::new(tell));
    }

    /// Tears the lab down now; returns what could not be removed.
    pub fn down(mut self) -> Vec<String> {
        self.finished = true;
        let problems = self.state.teardown(self.ex.as_mut());
        self.reap();
        problems
    }

    /// [`Lab::down`], telling `tell` how it ended in lines for the user
    /// ([`crate::show::down_lines`]).
    pub fn down_told(self, tell: &mut dyn FnMut(&str)) -> Vec<String> {
        let id = self.plan.run.clone();
        let problems = self.down();
        crate::show::down_lines(&id, &problems).iter().for_each(|l| tell(l));
        problems
    }

    fn reap(&mut self) {
        for c in &mut self.children {
            let _ = c.try_wait();
        }
    }

    /// Leaves the lab up (for `up --detach`): the state file stays, marked detached.
    pub fn detach(mut self) -> Result<(), LabError> {
        self.state.detached = true;
        self.state.save()?;
        self.finished = true;
        Ok(())
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if !self.finished {
            self.finished = true;
            for p in self.state.teardown(self.ex.as_mut()) {
                if let Some(tell) = self.on_drop_problem.as_mut() {
                    tell(&p);
                }
            }
            self.reap();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::RecordingExecutor;
    use crate::testkit::{private_state_dir, SharedRecorder, TWO_HOSTS};
    use linerate_model::shutdown::Stopper;

    #[test]
    fn a_failed_command_leaves_no_state_file() {
        let dir = private_state_dir();
        let rec = SharedRecorder::new(RecordingExecutor { fail_at: Some(3), ..Default::default() });
        let sc = Scenario::parse(TWO_HOSTS).unwrap();
        let r = Lab::up_with(Box::new(rec.clone()), &sc, Path::new("t.toml"), "lrtest1", false, &Shutdown::never());
        assert!(matches!(r, Err(LabError::Command { .. })));
        assert_eq!(rec.rec().commands.len(), 4, "stopped at the failing command");
        assert!(!dir.join("lrtest1.json").exists(), "teardown removed the state file");
        let stopper = Stopper::new();
        stopper.stop();
        let r = Lab::up_with(Box::new(rec.clone()), &sc, Path::new("t.toml"), "lrtest2", false, &stopper.shutdown());
        assert!(matches!(r, Err(LabError::Interrupted)));
        assert!(!dir.join("lrtest2.json").exists());
    }
}
