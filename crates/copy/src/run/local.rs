//! A copy to a path on this host runs the way every copy does: through a receiver process of
//! this user (`linerate serve --once`), on loopback, holding a fresh key.

use linerate_net::auth::secret::Secret;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Why the local receiver did not start.
#[derive(Debug, thiserror::Error)]
pub enum LocalServerError {
    /// The path of this executable is unknown.
    #[error("finding the linerate executable")]
    Exe(#[source] std::io::Error),
    /// The process did not start.
    #[error("starting the local server process")]
    Spawn(#[source] std::io::Error),
    /// A pipe to (`true`) or from (`false`) the child is missing.
    #[error("no pipe {} the server", if *.0 { "to" } else { "from" })]
    Pipe(bool),
    /// The key could not be written to the child.
    #[error("passing the key to the local server")]
    Key(#[source] std::io::Error),
    /// The child's first line could not be read.
    #[error("reading the local server's address")]
    Read(#[source] std::io::Error),
    /// The child's first line is no announce line.
    #[error("the local server did not start (it said {0:?})")]
    NotStarted(String),
}

/// A local `linerate serve --once` child, listening on loopback, holding a fresh key.
pub struct LocalServer {
    pub(crate) child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl LocalServer {
    /// Start `exe` (this linerate: `None` for [`std::env::current_exe`]) as a receiver of this
    /// user serving `root`, give it `secret` through a pipe and read the address it listens on.
    pub fn spawn(exe: Option<&Path>, root: &Path, secret: &Secret) -> Result<LocalServer, LocalServerError> {
        let exe = match exe {
            Some(e) => e.to_path_buf(),
            None => std::env::current_exe().map_err(LocalServerError::Exe)?,
        };
        spawn(&exe, root, secret)
    }
}

fn spawn(exe: &Path, root: &Path, secret: &Secret) -> Result<LocalServer, LocalServerError> {
    let mut child = Command::new(exe)
        .args(["serve", "--listen", "127.0.0.1:0", "--key-file", "-", "--once", "--announce", "--quiet"])
        // The same user as the client: owners, groups and devices as that user's privileges allow
        // (as rsync's local receiver), not a daemon's refusal.
        .args(["--keep-owners", "--allow-devices", "--root"])
        .arg(root)
        // Its own process group: the terminal's Ctrl-C reaches only the client, which then ends
        // the session in order (the server keeps what arrived and gives directories their modes).
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(LocalServerError::Spawn)?;
    // The key goes through the inherited pipe, never argv or the environment.
    {
        let mut stdin = child.stdin.take().ok_or(LocalServerError::Pipe(true))?;
        stdin.write_all(format!("{}\n", secret.to_hex()).as_bytes()).map_err(LocalServerError::Key)?;
    }
    let stdout = child.stdout.take().ok_or(LocalServerError::Pipe(false))?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).map_err(LocalServerError::Read)?;
    let addr = line
        .strip_prefix("LINERATE ")
        .and_then(|r| r.split_once(" LISTEN "))
        .and_then(|(_, a)| a.trim().parse().ok())
        .ok_or_else(|| LocalServerError::NotStarted(line.trim().to_string()))?;
    Ok(LocalServer { child, addr })
}
