//! The process adapter: starts the remote side through the system `ssh` (so ~/.ssh/config,
//! agents, ProxyJump and keys work as for scp) with a fixed command line, drives the
//! [`Bootstrap`] machine with ssh's pipes and the clock, and keeps ssh for the session.
//!
//! ssh's standard output is read on a thread of its own, so every wait has the machine's
//! deadline: a remote that prints nothing and never exits cannot hold `cp` (issue 42); once the
//! remote has announced itself the thread reads and discards the rest, so the remote never
//! blocks on a full pipe. An upload is written on a thread of its own too, so that a remote that
//! stops reading is caught by the machine's stall deadline.

use crate::bootstrap::{Action, BootConfig, BootError, Bootstrap, Mode, Offer, Scene, Started};
use crate::exe::{digest32, sha256_file, Exe, ExeError};
use crate::probe::{Local, Upload};
use crate::script::{boot_command, serve_command};
use linerate_model::doc::cp::CpPhases;
use linerate_net::auth::secret::Secret;
use linerate_proto::name::escape;
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The program that starts ssh: `-e COMMAND` split as rsync splits it, or `ssh`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rsh {
    words: Vec<String>,
}

/// Why `-e COMMAND` is not a command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RshError {
    /// Nothing but spaces.
    #[error("--rsh is empty")]
    Empty,
    /// A quote opened and not closed.
    #[error("--rsh: unterminated {quote} quote in {given:?}")]
    Unterminated {
        /// `'` or `"`.
        quote: char,
        /// The whole value.
        given: String,
    },
}

impl Rsh {
    /// `-e COMMAND` (`None`: `ssh`), split by rsync's rule (no shell runs): spaces separate
    /// words; single or double quotes keep spaces inside a word; a doubled quote inside quotes
    /// of its kind is one literal quote; backslashes are ordinary characters.
    pub fn parse(rsh: Option<&str>) -> Result<Rsh, RshError> {
        let words = split(rsh.unwrap_or("ssh"))?;
        if words.is_empty() {
            return Err(RshError::Empty);
        }
        Ok(Rsh { words })
    }

    /// The command, without a destination.
    pub fn command(&self) -> Command {
        let mut c = Command::new(&self.words[0]);
        c.args(&self.words[1..]);
        c
    }

    /// The host name ssh would connect to (`ssh -G`: HostName from ~/.ssh/config), else `host`.
    fn hostname(&self, login: &str, host: &str) -> String {
        let out = self.command().args(["-G", "--", login]).stdin(Stdio::null()).stderr(Stdio::null()).output();
        if let Ok(o) = out {
            if o.status.success() {
                for line in String::from_utf8_lossy(&o.stdout).lines() {
                    if let Some(h) = line.strip_prefix("hostname ") {
                        return h.trim().to_string();
                    }
                }
            }
        }
        host.to_string()
    }
}

fn split(s: &str) -> Result<Vec<String>, RshError> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' => {
                if let Some(w) = word.take() {
                    words.push(w);
                }
            }
            '\'' | '"' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some(q) if q == c && chars.peek() == Some(&c) => {
                            chars.next();
                            w.push(c);
                        }
                        Some(q) if q == c => break,
                        Some(other) => w.push(other),
                        None => return Err(RshError::Unterminated { quote: c, given: s.to_string() }),
                    }
                }
            }
            other => word.get_or_insert_with(String::new).push(other),
        }
    }
    words.extend(word);
    Ok(words)
}

/// How to start the remote side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// `--remote-linerate PATH`: run it, offer nothing.
    pub remote_linerate: Option<String>,
    /// Whether this executable may be sent.
    pub upload: Upload,
    /// `--via-ssh`: an ssh master connection whose channels carry the streams; the remote listens
    /// on its loopback only.
    pub via_ssh: bool,
    /// `--ssh-timeout`.
    pub first_line: Duration,
    /// `--ssh-start-timeout`.
    pub announce: Duration,
    /// `--stall-timeout`: the upload's bound.
    pub stall: Duration,
}

/// The default of `--ssh-timeout`: the remote's first line.
pub const FIRST_LINE: Duration = Duration::from_secs(30);
/// The default of `--ssh-start-timeout`: the remote's announce line.
pub const ANNOUNCE: Duration = Duration::from_secs(120);

/// `--ssh-timeout`, `--ssh-start-timeout`: a duration in the one grammar, more than zero.
pub fn parse_ssh_timeout(s: &str) -> Result<Duration, String> {
    match linerate_model::units::parse_duration(s) {
        Ok(d) if d.is_zero() => Err(format!("'{s}': give a duration above zero (30, 30s, 2m, 500ms)")),
        Ok(d) => Ok(d),
        Err(e) => Err(e.to_string()),
    }
}

/// Something for the user while the remote side starts.
#[derive(Debug)]
pub enum Notice<'a> {
    /// This executable cannot be offered (why); the remote's own `linerate` is tried.
    CannotOffer(&'a ExeError),
    /// The upload begins.
    Uploading {
        /// The host, escaped.
        host: &'a str,
        /// The cache directory there.
        dir: &'a str,
        /// Bytes to send.
        size: u64,
    },
    /// Bytes of the upload ssh has taken so far.
    Sent(u64),
    /// The upload's sending is over.
    SentAll,
    /// The announced port could not be reached directly (`name` as ssh resolves the host).
    Unreachable {
        /// The port.
        port: u16,
        /// The host name, escaped.
        name: &'a str,
    },
}

impl Notice<'_> {
    /// What it says to the user, a line for standard error (`quiet`: only what they must
    /// know); `None` for the upload's progress, which is drawn, not said.
    pub fn text(&self, quiet: bool) -> Option<String> {
        match *self {
            Notice::CannotOffer(e) if !quiet => {
                Some(format!("linerate: note: cannot offer this program to the remote host ({e}); trying its `linerate`"))
            }
            Notice::Uploading { host, dir, size } if !quiet => Some(format!(
                "linerate: {host} has no usable linerate: sending this one ({}) to {dir} there, once (--no-upload \
                 refuses)",
                linerate_model::units::format_size(size as f64)
            )),
            Notice::Unreachable { port, name } => Some(format!(
                "linerate: note: port {port} on {name} is not reachable directly; if a firewall blocks it, add --via-ssh"
            )),
            _ => None,
        }
    }
}

/// How an upload failed on this side.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// Hashing the executable.
    #[error(transparent)]
    Hash(ExeError),
    /// Writing the `UPLOAD` line, or flushing.
    #[error("sending to ssh")]
    Line(#[source] io::Error),
    /// Opening the executable.
    #[error("opening this program's executable")]
    Open(#[source] io::Error),
    /// Reading it.
    #[error("reading this program's executable")]
    Read(#[source] io::Error),
    /// Writing its bytes to ssh.
    #[error("sending the executable through ssh: {0}")]
    Through(io::Error),
    /// ssh's standard input is gone.
    #[error("ssh's standard input is gone")]
    NoStdin,
}

/// Why the remote side did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// ssh could not be started.
    #[error("starting {program}")]
    Spawn {
        /// `ssh`, or `-e`'s first word.
        program: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The private directory of `--via-ssh`'s control socket.
    #[error("{what}")]
    ControlDir {
        /// The step.
        what: &'static str,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The dialogue failed; `message` says it for the user, with ssh's exit status.
    #[error("{message}")]
    Boot {
        /// The machine's error.
        error: BootError,
        /// The message.
        message: String,
    },
    /// The upload failed on this side.
    #[error("uploading linerate to {host}")]
    Upload {
        /// The host, escaped.
        host: String,
        /// Why.
        #[source]
        source: SendError,
    },
    /// The host name as ssh resolves it did not resolve.
    #[error("resolving {name}")]
    Resolve {
        /// The name, escaped.
        name: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// It resolved to nothing.
    #[error("{name}: no address")]
    NoAddress {
        /// The name, escaped.
        name: String,
    },
}

impl StartError {
    /// Whether the request itself cannot be met as given (exit 2): ssh cannot be started, or
    /// the upload is refused; anything else is the session's failure.
    pub fn is_usage(&self) -> bool {
        match self {
            StartError::Spawn { .. } => true,
            StartError::Boot { error, .. } => error.is_usage(),
            _ => false,
        }
    }
}

/// Where the copy connects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// The remote's port, directly.
    Direct(SocketAddr),
    /// Through channels of the ssh master connection (`--via-ssh`): each connection is piped
    /// through a [`Forward::command`].
    Forward(Forward),
}

/// `ssh -S CTL -o ControlMaster=no -W 127.0.0.1:PORT -- LOGIN`: one channel to the remote's
/// loopback port through the master connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forward {
    rsh: Rsh,
    ctl: PathBuf,
    login: String,
    port: u16,
}

impl Forward {
    /// The command for one connection.
    pub fn command(&self) -> Command {
        let mut c = self.rsh.command();
        c.arg("-S").arg(&self.ctl).args(["-o", "ControlMaster=no", "-W", &format!("127.0.0.1:{}", self.port)]);
        c.args(["--", &self.login]);
        c
    }
}

/// A started remote side: ssh (kept for the session: the remote exits when its standard input
/// closes), its key and where to connect.
pub struct Session {
    ssh: Ssh,
    started: Started,
    route: Route,
    remote_start: Duration,
    /// `--via-ssh`'s control socket's directory, removed when dropped (after ssh is stopped).
    _ctl: Option<tempfile::TempDir>,
}

impl Session {
    /// The session's one-time key.
    pub fn key(&self) -> &Secret {
        &self.started.announce.secret
    }

    /// Where to connect.
    pub fn route(&self) -> &Route {
        &self.route
    }

    /// How the remote side started (`copy_s` left at zero).
    pub fn phases(&self) -> CpPhases {
        CpPhases {
            remote_linerate: self.started.ran,
            remote_start_s: self.remote_start.as_secs_f64(),
            upload_s: self.started.upload_time.as_secs_f64(),
            upload_bytes: self.started.upload_bytes,
            copy_s: 0.0,
        }
    }

    /// End the session: after a completed copy the remote exits by itself and ssh with it (given
    /// a few seconds); otherwise ssh is killed at once.
    pub fn finish(mut self, ok: bool) {
        self.ssh.stop(if ok { Duration::from_secs(15) } else { Duration::ZERO });
    }
}

/// ssh and the pipe to it.
struct Ssh {
    child: Option<Child>,
    stdin: Option<ChildStdin>,
}

impl Ssh {
    /// Stop ssh by its process id and reap it, after `grace` for it to end by itself.
    fn stop(&mut self, grace: Duration) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        let status = linerate_net::proc::exit_within(&mut child, grace);
        if status.is_none() {
            let _ = child.kill();
        }
        self.stdin = None;
        status.or_else(|| child.wait().ok())
    }
}

impl Drop for Ssh {
    fn drop(&mut self) {
        self.stop(Duration::ZERO);
    }
}

/// What the pipes' threads report.
enum Event {
    /// ssh printed these bytes.
    Output(Vec<u8>),
    /// Its output ended.
    Eof,
    /// The upload's bytes taken so far.
    Sent(u64),
    /// The upload's end: bytes sent and their SHA-256, and ssh's standard input back.
    SentAll(Result<(u64, [u8; 32]), SendError>, ChildStdin),
}

/// Why the dialogue loop ended without a start.
enum Fail {
    Boot(BootError),
    Upload(SendError),
}

/// Start the remote side on `login` (`host` alone, for messages and addresses) through `rsh`,
/// within `opts`' deadlines.
pub fn start(
    rsh: &Rsh,
    login: &str,
    host: &str,
    opts: &Options,
    notice: &mut dyn FnMut(Notice<'_>),
) -> Result<Session, StartError> {
    let began = Instant::now();
    let ctl = if opts.via_ssh { Some(control_dir()?) } else { None };
    let extra: &[&str] = if opts.via_ssh { &["--ssh-loopback"] } else { &[] };
    let (given, exe) = match &opts.remote_linerate {
        Some(p) => (Some(p.clone()), None),
        None => match Exe::current() {
            Ok(exe) => (None, Some(exe)),
            Err(e) => {
                notice(Notice::CannotOffer(&e));
                (Some("linerate".to_string()), None)
            }
        },
    };
    let (remote_cmd, mode) = match (&exe, &given) {
        (Some(exe), _) => {
            let offer =
                Offer { name: exe.name.clone(), size: exe.size, local: Local::this(exe.glibc), upload: opts.upload };
            (boot_command(&exe.name, exe.size, extra), Mode::Offer(offer))
        }
        (None, p) => (serve_command(p.as_deref().unwrap_or("linerate"), extra), Mode::Given),
    };
    let mut cmd = rsh.command();
    cmd.arg("-T");
    if let Some(d) = &ctl {
        cmd.arg("-M").arg("-S").arg(d.path().join("ctl")).args(["-o", "ControlPersist=no"]);
    }
    cmd.args(["--", login, &remote_cmd]).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
    let mut child = cmd.spawn().map_err(|source| StartError::Spawn { program: rsh.words[0].clone(), source })?;
    let cfg = BootConfig { mode, first_line: opts.first_line, announce: opts.announce, stall: opts.stall };
    let mut machine = Bootstrap::new(cfg, Instant::now());
    let stdout = child.stdout.take();
    let mut ssh = Ssh { stdin: child.stdin.take(), child: Some(child) };
    let shown_host = escape(host.as_bytes());
    // Only the offer mode, which has an `Exe`, hashes and sends it.
    let exe_path = exe.map_or_else(|| PathBuf::from("/proc/self/exe"), |e| e.path);
    let started = match converse(&mut machine, &mut ssh, stdout, &exe_path, &shown_host, notice) {
        Ok(s) => s,
        Err(Fail::Boot(error)) => {
            let grace = if error.waits_for_ssh() { Duration::from_secs(5) } else { Duration::ZERO };
            let status = ssh.stop(grace);
            let message = error.message(&Scene { host, login, given: given.as_deref(), status });
            return Err(StartError::Boot { error, message });
        }
        Err(Fail::Upload(source)) => return Err(StartError::Upload { host: shown_host, source }),
    };
    let remote_start = began.elapsed();
    let port = started.announce.port;
    let route = match &ctl {
        Some(d) => Route::Forward(Forward { rsh: rsh.clone(), ctl: d.path().join("ctl"), login: login.into(), port }),
        None => Route::Direct(pick_addr(&started, rsh, login, host, notice)?),
    };
    Ok(Session { ssh, started, route, remote_start, _ctl: ctl })
}

/// The private directory for `--via-ssh`'s control socket.
fn control_dir() -> Result<tempfile::TempDir, StartError> {
    let d = tempfile::Builder::new().prefix("linerate-ssh-").tempdir().map_err(|source| StartError::ControlDir {
        what: "creating a private directory for the ssh control socket",
        source,
    })?;
    // Private, whatever the umask: the socket gives anyone who can reach it our ssh session.
    std::fs::set_permissions(d.path(), std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .map_err(|source| StartError::ControlDir { what: "making the control socket's directory private", source })?;
    Ok(d)
}

/// Run the dialogue to its end: the machine's actions done with ssh's pipes, its inputs from
/// them and the clock.
fn converse(
    machine: &mut Bootstrap,
    ssh: &mut Ssh,
    stdout: Option<ChildStdout>,
    exe: &Path,
    host: &str,
    notice: &mut dyn FnMut(Notice<'_>),
) -> Result<Started, Fail> {
    let (tx, rx) = mpsc::sync_channel(8);
    match stdout {
        Some(out) => read_output(out, tx.clone()),
        None => machine.handle_eof(Instant::now()),
    }
    loop {
        while let Some(action) = machine.poll_action() {
            match action {
                Action::Write(line) => {
                    let written = match ssh.stdin.as_mut() {
                        Some(i) => i.write_all(&line).and_then(|()| i.flush()),
                        None => Err(io::ErrorKind::BrokenPipe.into()),
                    };
                    // A `QUIT` comes with the end of the dialogue: a remote gone already is fine.
                    if let (Err(e), false) = (written, machine.is_over()) {
                        return Err(Fail::Upload(SendError::Line(e)));
                    }
                }
                Action::Hash { dir, size } => {
                    notice(Notice::Uploading { host, dir: &dir, size });
                    let sha = sha256_file(exe).map_err(|e| Fail::Upload(SendError::Hash(e)))?;
                    machine.handle_hashed(sha, Instant::now());
                }
                Action::Send { size } => {
                    let Some(stdin) = ssh.stdin.take() else { return Err(Fail::Upload(SendError::NoStdin)) };
                    send_exe(exe.to_path_buf(), size, stdin, tx.clone());
                }
                Action::Started(s) => return Ok(s),
                Action::Failed(e) => return Err(Fail::Boot(e)),
            }
        }
        let event = match machine.poll_timeout() {
            Some(t) => rx.recv_timeout(t.saturating_duration_since(Instant::now())),
            None => rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
        };
        let now = Instant::now();
        match event {
            Ok(Event::Output(bytes)) => machine.handle_output(&bytes, now),
            Ok(Event::Eof) | Err(mpsc::RecvTimeoutError::Disconnected) => machine.handle_eof(now),
            Ok(Event::Sent(n)) => {
                notice(Notice::Sent(n));
                machine.handle_sent(n, now);
            }
            Ok(Event::SentAll(sent, stdin)) => {
                ssh.stdin = Some(stdin);
                notice(Notice::SentAll);
                let (n, sha) = sent.map_err(Fail::Upload)?;
                machine.handle_sent_all(n, sha, now);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => machine.handle_timeout(now),
        }
    }
}

/// Read ssh's standard output on a thread of its own; once nobody listens, read and discard the
/// rest (the remote never blocks on a full pipe) until it ends.
fn read_output(mut out: ChildStdout, tx: mpsc::SyncSender<Event>) {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; crate::bootstrap::MAX_LINE];
        loop {
            let n = match out.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            if tx.send(Event::Output(buf[..n].to_vec())).is_err() {
                let _ = io::copy(&mut out, &mut io::sink());
                return;
            }
        }
        let _ = tx.send(Event::Eof);
    });
}

/// Write the executable's first `size` bytes to ssh on a thread of its own, hashing what is
/// sent; the thread stays blocked in its write while ssh takes nothing, until ssh is killed.
fn send_exe(path: PathBuf, size: u64, mut stdin: ChildStdin, tx: mpsc::SyncSender<Event>) {
    std::thread::spawn(move || {
        let sent = (|| {
            let mut f = File::open(&path).map_err(SendError::Open)?;
            let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
            let mut buf = vec![0u8; 256 << 10];
            let mut sent = 0u64;
            while sent < size {
                let want = buf.len().min(usize::try_from(size - sent).unwrap_or(usize::MAX));
                let n = match f.read(&mut buf[..want]) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(SendError::Read(e)),
                };
                stdin.write_all(&buf[..n]).map_err(SendError::Through)?;
                ctx.update(&buf[..n]);
                sent += n as u64;
                let _ = tx.send(Event::Sent(sent));
            }
            stdin.flush().map_err(SendError::Line)?;
            Ok((sent, digest32(ctx.finish())))
        })();
        let _ = tx.send(Event::SentAll(sent, stdin));
    });
}

/// Where to reach the remote's port: the address the ssh connection reached (mosh's choice) if a
/// connection gets through, else the host name as ssh resolves it (`ssh -G`).
fn pick_addr(
    started: &Started,
    rsh: &Rsh,
    login: &str,
    host: &str,
    notice: &mut dyn FnMut(Notice<'_>),
) -> Result<SocketAddr, StartError> {
    const PROBE: Duration = Duration::from_secs(3);
    let port = started.announce.port;
    if let Some(ip) = started.announce.addr {
        let a = SocketAddr::new(ip, port);
        if reachable(a, PROBE) {
            return Ok(a);
        }
    }
    let name = rsh.hostname(login, host);
    let shown = escape(name.as_bytes());
    let addr = (name.as_str(), port)
        .to_socket_addrs()
        .map_err(|source| StartError::Resolve { name: shown.clone(), source })?
        .next()
        .ok_or_else(|| StartError::NoAddress { name: shown.clone() })?;
    if !reachable(addr, PROBE) {
        notice(Notice::Unreachable { port, name: &shown });
    }
    Ok(addr)
}

/// Whether a TCP connection to `addr` opens within `timeout`. The connection closes before its
/// first byte, which a server takes for a probe, not a session.
fn reachable(addr: SocketAddr, timeout: Duration) -> bool {
    TcpStream::connect_timeout(&addr, timeout).is_ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn notices_say_the_upload_and_an_unreachable_port_and_quiet_only_the_port() {
        let up = Notice::Uploading { host: "h", dir: "~/.cache/linerate/v", size: 2000 };
        let text = up.text(false).unwrap();
        assert_eq!(
            text,
            "linerate: h has no usable linerate: sending this one (2 kB) to ~/.cache/linerate/v there, once \
             (--no-upload refuses)"
        );
        assert_eq!(up.text(true), None);
        let port = Notice::Unreachable { port: 7, name: "h" };
        assert!(port.text(true).unwrap().contains("port 7 on h is not reachable directly"));
        assert_eq!((Notice::Sent(1).text(false), Notice::SentAll.text(false)), (None, None));
    }

    #[test]
    fn ssh_timeouts_are_durations_above_zero() {
        assert_eq!(parse_ssh_timeout("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_ssh_timeout("0").unwrap_err().contains("above zero"));
        assert!(parse_ssh_timeout("soon").is_err());
    }

    #[test]
    fn rsh_is_split_as_rsync_splits_it() {
        let w = |s: &str| split(s).unwrap();
        assert_eq!(w("ssh"), ["ssh"]);
        assert_eq!(w("  ssh -p 2222   -F cfg "), ["ssh", "-p", "2222", "-F", "cfg"]);
        assert_eq!(w("ssh -i '/keys/my key'"), ["ssh", "-i", "/keys/my key"]);
        assert_eq!(w(r#"ssh -o "ProxyCommand=nc %h %p""#), ["ssh", "-o", "ProxyCommand=nc %h %p"]);
        assert_eq!(w("ssh -o'User=a b'c"), ["ssh", "-oUser=a bc"]);
        assert_eq!(w("ssh 'it''s'"), ["ssh", "it's"]);
        assert_eq!(w(r#"ssh "say ""hi""""#), ["ssh", r#"say "hi""#]);
        assert_eq!(w(r"ssh -i C:\k"), ["ssh", "-i", r"C:\k"]);
        assert_eq!(w("ssh ''"), ["ssh", ""]);
        assert!(w("").is_empty());
        assert_eq!(Rsh::parse(Some("  ")), Err(RshError::Empty));
        let e = Rsh::parse(Some("ssh 'open")).unwrap_err();
        assert_eq!(e.to_string(), "--rsh: unterminated ' quote in \"ssh 'open\"");
        assert_eq!(Rsh::parse(None).unwrap().words, ["ssh"]);
    }

    const KEY: &str = "abababababababababababababababababababababababababababababababab";

    /// An `-e` that runs `script` in `sh` in place of ssh: ssh's arguments (`-T`, ..., the
    /// remote command) become the script's `$0`, `$1`, ...
    fn fake(script: &str) -> Rsh {
        Rsh { words: vec!["/bin/sh".into(), "-c".into(), script.into()] }
    }

    fn opts(remote_linerate: Option<&str>) -> Options {
        Options {
            remote_linerate: remote_linerate.map(str::to_string),
            upload: Upload::Allowed,
            // The route is then a forward: no address to probe.
            via_ssh: true,
            first_line: Duration::from_secs(30),
            announce: Duration::from_secs(30),
            stall: Duration::from_secs(30),
        }
    }

    fn announce_script(before: &str) -> String {
        let v = linerate_proto::PROTOCOL_VERSION;
        format!("{before} echo 'LINERATE {v} PORT 4000 SECRET {KEY}'")
    }

    #[test]
    fn a_given_remote_that_announces_itself_is_a_session_until_it_is_finished() {
        let mut seen = Vec::new();
        let s = start(&fake(&announce_script("echo hello;")), "me@h", "h", &opts(Some("/opt/lr")), &mut |n| {
            seen.push(format!("{n:?}"))
        })
        .unwrap();
        assert_eq!(s.key().to_hex(), KEY);
        let Route::Forward(f) = s.route() else { panic!("{:?}", s.route()) };
        assert_eq!(f.port, 4000);
        assert_eq!(s.phases().remote_linerate, linerate_model::doc::cp::RemoteLinerate::Given);
        assert!(seen.is_empty(), "{seen:?}");
        // A remote that has ended (as a server does after its session) is reaped at once.
        s.finish(true);
    }

    #[test]
    fn a_remote_that_ends_without_announcing_is_named_with_sshs_status() {
        let e = start(&fake("echo 'Welcome to the lab'; exit 7"), "me@h", "h", &opts(Some("lr")), &mut |_| {})
            .err()
            .unwrap();
        assert!(!e.is_usage());
        assert_eq!(
            e.to_string(),
            "the remote side on h did not announce itself (its output began with \"Welcome to the lab\"); ssh exited \
             with status 7"
        );
        let e =
            start(&Rsh { words: vec!["/nonexistent/ssh".into()] }, "h", "h", &opts(None), &mut |_| {}).err().unwrap();
        assert!(e.is_usage() && e.to_string() == "starting /nonexistent/ssh", "{e}");
    }

    #[test]
    fn an_upload_is_sent_whole_after_its_line_and_the_uploaded_linerate_announces_itself() {
        // The boot script's part, by hand: a probe of this host, then the line and the bytes,
        // checked here against the line's size and SHA-256.
        let probe = "p() { echo \"LINERATE-PROBE $*\"; }; p os \"$(uname -s)\"; p arch \"$(uname -m)\"; \
                     p libc \"$(getconf GNU_LIBC_VERSION)\"; p cache /c/linerate/x; p end; \
                     read -r cmd z h; [ \"$cmd\" = UPLOAD ] || exit 9; \
                     [ \"$(head -c \"$z\" | sha256sum | cut -d ' ' -f 1)\" = \"$h\" ] || exit 8; p run uploaded;";
        let exe = Exe::current().unwrap();
        let mut sent = 0;
        let mut uploading = None;
        let s = start(&fake(&announce_script(probe)), "me@h", "h", &opts(None), &mut |n| match n {
            Notice::Uploading { dir, size, .. } => uploading = Some((dir.to_string(), size)),
            Notice::Sent(n) => sent = n,
            _ => {}
        })
        .unwrap();
        assert_eq!(uploading, Some(("/c/linerate/x".to_string(), exe.size)));
        assert_eq!(sent, exe.size);
        let p = s.phases();
        assert_eq!((p.remote_linerate, p.upload_bytes), (linerate_model::doc::cp::RemoteLinerate::Uploaded, exe.size));
        s.finish(true);
    }

    #[test]
    fn a_forward_is_a_channel_of_the_master_connection() {
        let f =
            Forward { rsh: Rsh::parse(Some("ssh -p 2")).unwrap(), ctl: "/t/ctl".into(), login: "u@h".into(), port: 9 };
        let c = f.command();
        let args: Vec<_> = c.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(c.get_program(), "ssh");
        assert_eq!(args, ["-p", "2", "-S", "/t/ctl", "-o", "ControlMaster=no", "-W", "127.0.0.1:9", "--", "u@h"]);
    }
}
