//! The one boundary between the lab and the kernel: running an `ip`/`tc` argv. The system
//! executor runs it (never through a shell); the recording one lets the planner and the
//! teardown be tested without root.

use crate::LabError;
use std::process::{Command, Stdio};

/// Runs one command given as argv and returns its standard output.
pub trait Executor {
    /// Runs `argv` (the first element is the program) to completion.
    fn run(&mut self, argv: &[String]) -> Result<String, LabError>;
}

/// Runs commands as subprocesses.
#[derive(Debug, Default)]
pub struct SystemExecutor;

impl Executor for SystemExecutor {
    fn run(&mut self, argv: &[String]) -> Result<String, LabError> {
        let (prog, args) = argv.split_first().ok_or_else(|| LabError::State("empty command".into()))?;
        let out = Command::new(prog)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| LabError::Io(format!("running {prog} (is iproute2 installed?)"), e))?;
        if !out.status.success() {
            let mut stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
            stderr.truncate(2000);
            return Err(LabError::Command { argv: argv.join(" "), status: out.status.to_string(), stderr });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// Records commands instead of running them; optionally fails the `fail_at`-th (0-based).
#[derive(Debug, Default)]
pub struct RecordingExecutor {
    /// Everything asked for, in order.
    pub commands: Vec<Vec<String>>,
    /// Fail this command (to test cleanup after an error).
    pub fail_at: Option<usize>,
}

impl Executor for RecordingExecutor {
    fn run(&mut self, argv: &[String]) -> Result<String, LabError> {
        let i = self.commands.len();
        self.commands.push(argv.to_vec());
        if self.fail_at == Some(i) {
            return Err(LabError::Command { argv: argv.join(" "), status: "exit 2".into(), stderr: "injected".into() });
        }
        Ok(String::new())
    }
}
