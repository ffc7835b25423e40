//! `linerate cp` to and from `[user@]host:PATH` (issue 5): the remote side is started through the
//! system `ssh` (so ~/.ssh/config, agents, ProxyJump and keys work as for scp) with a fixed
//! command line, `linerate serve --once --ssh`, which announces a port and a one-time secret on
//! its standard output; the copy then runs over direct parallel streams, or with `--via-ssh`
//! through channels of the same ssh connection. Paths travel inside the protocol, never through
//! the remote shell. Also the `serve --ssh` side.

use crate::error::{Error, Kind, ResultExt};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use linerate_agent::server::{Server, ServerConfig};
use linerate_copy::recv;
use linerate_copy::send::{self, CopyConfig, CopyReport};
use linerate_copy::ssh::{self, Announce, AnnounceError, Forwarder};
use linerate_net::auth::secret::Secret;
use linerate_net::EngineError;
use linerate_proto::name::escape;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc;

use std::time::{Duration, Instant};

use crate::provision::{self, shell_quote};
use linerate_model::doc::cp::{CpPhases, RemoteLinerate};

/// `linerate cp` flags for `[user@]host:PATH` operands.
#[derive(Args, Debug, Clone)]
pub struct SshArgs {
    /// Program that starts the remote side instead of `ssh`, with its arguments, split as rsync
    /// splits -e (spaces separate, quotes keep spaces, no shell): -e "ssh -p 2222 -i 'my key'".
    #[arg(short = 'e', long = "rsh", value_name = "COMMAND")]
    pub rsh: Option<String>,
    /// The linerate program on the remote host (found in the remote PATH unless absolute).
    /// Without it, cp runs the copy of itself it uploaded to the remote user's cache before, or
    /// a `linerate` of this protocol version on the remote PATH, or else uploads itself once
    /// (see --no-upload).
    #[arg(long, value_name = "PATH")]
    pub remote_linerate: Option<String>,
    /// Never send this executable to the remote host: fail (exit 2) when it has no usable
    /// linerate. The environment variable LINERATE_NO_UPLOAD=1 does the same.
    #[arg(long)]
    pub no_upload: bool,
    /// Carry the streams through the ssh connection (for a firewall that blocks the direct
    /// connection to the remote's ephemeral port). Slower: one ssh connection, one core.
    #[arg(long)]
    pub via_ssh: bool,
    /// How long the remote side may take to print its first line after ssh starts: ssh
    /// connecting and authenticating (a password or passphrase typed at its prompt included) and
    /// the remote login shell starting. A duration (30, 30s, 2m, 500ms).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_ssh_timeout)]
    pub ssh_timeout: Duration,
    /// How long the remote side may take, from the start of ssh, to announce itself (its port and
    /// one-time key), not counting the time the self-upload spends sending, which ends instead
    /// when ssh takes no byte for --stall-timeout. A duration (120, 2m).
    #[arg(long, value_name = "DURATION", default_value = "120s", value_parser = parse_ssh_timeout)]
    pub ssh_start_timeout: Duration,
}

/// The default of `--ssh-timeout`: the remote's first line.
const SSH_TIMEOUT: Duration = Duration::from_secs(30);
/// The default of `--ssh-start-timeout`: the remote's announce line.
const SSH_START_TIMEOUT: Duration = Duration::from_secs(120);

impl Default for SshArgs {
    fn default() -> SshArgs {
        SshArgs {
            rsh: None,
            remote_linerate: None,
            no_upload: false,
            via_ssh: false,
            ssh_timeout: SSH_TIMEOUT,
            ssh_start_timeout: SSH_START_TIMEOUT,
        }
    }
}

/// `--ssh-timeout`, `--ssh-start-timeout`: a duration in the one grammar, more than zero.
fn parse_ssh_timeout(s: &str) -> Result<Duration, String> {
    match linerate_model::units::parse_duration(s) {
        Ok(d) if d.is_zero() => Err(format!("'{s}': give a duration above zero (30, 30s, 2m, 500ms)")),
        Ok(d) => Ok(d),
        Err(e) => Err(e.to_string()),
    }
}

/// A duration as the flags take it: `30s`, `1.5s`, `200ms`.
fn shown(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else if d.as_millis() < 1000 {
        format!("{}ms", d.as_millis())
    } else {
        format!("{:.3}s", d.as_secs_f64())
    }
}

/// `linerate serve` flags for being started by `linerate cp` through ssh.
#[derive(Args, Debug, Clone)]
pub struct ServeSshArgs {
    /// Started through ssh by `linerate cp`: make a one-time key, listen on an ephemeral port of
    /// every address, print `LINERATE <version> PORT <port> SECRET <key> [ADDR <ip>]` on stdout,
    /// resolve the client's paths as this user (like scp, relative to the current directory),
    /// exit when stdin closes. Needs --once.
    #[arg(long, requires = "once", conflicts_with_all = ["key_file", "authorized_keys", "root", "listen", "announce"])]
    pub ssh: bool,
    /// With --ssh: listen on 127.0.0.1 only (cp --via-ssh reaches it through the ssh connection).
    #[arg(long, requires = "ssh")]
    pub ssh_loopback: bool,
    /// With --once: how long to wait for the client to connect before giving up, a duration
    /// (30s, 2m); a bare number is seconds.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = linerate_model::units::parse_duration)]
    pub connect_deadline: Duration,
    /// Print `LINERATE-PROTOCOL <version> SOFTWARE <version>` and exit: how `cp` tells whether
    /// the linerate on a remote PATH can serve it.
    #[arg(long, hide = true, exclusive = true)]
    pub ssh_protocol: bool,
}

/// An `[user@]host:PATH` operand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshTarget {
    /// What ssh is given as its destination: `user@host` or `host`.
    pub login: String,
    /// The host alone (IPv6 without brackets).
    pub host: String,
    /// The remote path, as bytes: relative to the remote user's home unless absolute.
    pub path: Vec<u8>,
}

/// What an ssh copy does.
#[derive(Debug, PartialEq, Eq)]
pub enum Job {
    /// Local sources to a remote destination.
    Push { sources: Vec<PathBuf>, target: SshTarget },
    /// One remote source to a local destination.
    Pull { target: SshTarget, into: PathBuf },
}

/// Parse an operand in the ssh form, `[user@]host:PATH` or `[user@][v6addr]:PATH`. `None` for a
/// local path (starts with `/`, `./` or `../`, no `:` or a `/` before the first `:`) and for the
/// daemon form `HOST:PORT:PATH` (a numeric port between two colons, and no `user@`).
pub fn parse_spec(p: &Path) -> Option<Result<SshTarget>> {
    let b = p.as_os_str().as_bytes();
    if b.starts_with(b"/") || b.starts_with(b"./") || b.starts_with(b"../") {
        return None;
    }
    let colon = b.iter().position(|&c| c == b':')?;
    // A '/' before the first ':' (outside brackets) makes it a local path, as for scp.
    let bracketed = b.starts_with(b"[") || b.windows(2).position(|w| w == b"@[").is_some_and(|i| i < colon);
    if !bracketed && b[..colon].contains(&b'/') {
        return None;
    }
    let at = b[..colon].iter().position(|&c| c == b'@').filter(|&i| !b[..i].contains(&b'['));
    let (user, rest) = match at {
        Some(i) => (Some(&b[..i]), &b[i + 1..]),
        None => (None, b),
    };
    let (host, path): (&[u8], &[u8]) = if let Some(r) = rest.strip_prefix(b"[") {
        let Some(end) = r.windows(2).position(|w| w == b"]:") else {
            return Some(Err(anyhow!("'{}': expected [user@][ADDR]:PATH", escape(b))));
        };
        (&r[..end], &r[end + 2..])
    } else {
        let c = rest.iter().position(|&c| c == b':')?;
        (&rest[..c], &rest[c + 1..])
    };
    // The daemon form: a numeric port between two colons, no user.
    if user.is_none() {
        if let Some(c) = path.iter().position(|&c| c == b':') {
            if c > 0 && path[..c].iter().all(u8::is_ascii_digit) {
                return None;
            }
        }
    }
    let ok = |s: &[u8]| {
        !s.is_empty() && !s.starts_with(b"-") && s.iter().all(|&c| c.is_ascii_graphic() && c != b'@' && c != b'/')
    };
    if !ok(host) || user.is_some_and(|u| !ok(u)) {
        return Some(Err(anyhow!("'{}': not a valid [user@]host:PATH", escape(b))));
    }
    let host = String::from_utf8_lossy(host).into_owned();
    let login = match user {
        Some(u) => format!("{}@{host}", String::from_utf8_lossy(u)),
        None => host.clone(),
    };
    Some(Ok(SshTarget { login, host, path: path.to_vec() }))
}

/// A remote operand of either form (`host:...`): not `/`, `./` or `../`, and a `:` before any `/`.
fn looks_remote(p: &Path) -> bool {
    let b = p.as_os_str().as_bytes();
    if b.starts_with(b"/") || b.starts_with(b"./") || b.starts_with(b"../") {
        return false;
    }
    b.iter().position(|&c| c == b':').is_some_and(|c| !b[..c].contains(&b'/'))
}

/// Whether `cp SRC... DEST` is an ssh copy, and which way.
pub fn classify(sources: &[PathBuf], dest: &Path) -> Result<Option<Job>> {
    let mut remote_sources = Vec::new();
    for s in sources {
        if let Some(t) = parse_spec(s) {
            remote_sources.push(t?);
        }
    }
    match parse_spec(dest) {
        Some(t) => {
            if !remote_sources.is_empty() {
                bail!("copying from one remote host to another is not supported: copy through this host");
            }
            Ok(Some(Job::Push { sources: sources.to_vec(), target: t? }))
        }
        None if remote_sources.is_empty() => Ok(None),
        None => {
            if sources.len() != 1 {
                bail!("a copy from a remote host takes exactly one [user@]host:PATH source");
            }
            if looks_remote(dest) {
                bail!("copying from one remote host to another is not supported: copy through this host");
            }
            let target = remote_sources.remove(0);
            Ok(Some(Job::Pull { target, into: dest.to_path_buf() }))
        }
    }
}

/// The command that starts ssh: `-e COMMAND` split as rsync splits it, or `ssh`.
fn rsh_words(args: &SshArgs) -> Result<Vec<String>> {
    let words = split_rsh(args.rsh.as_deref().unwrap_or("ssh"))?;
    if words.is_empty() {
        bail!("--rsh is empty");
    }
    Ok(words)
}

/// Split `-e COMMAND` into words by rsync's rule (no shell runs): spaces separate words; single
/// or double quotes keep spaces inside a word; a doubled quote inside quotes of its kind is one
/// literal quote; backslashes are ordinary characters.
fn split_rsh(s: &str) -> Result<Vec<String>> {
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
                        None => bail!("--rsh: unterminated {c} quote in {s:?}"),
                    }
                }
            }
            other => word.get_or_insert_with(String::new).push(other),
        }
    }
    words.extend(word);
    Ok(words)
}

/// The ssh command of `args` (`-e`, or `ssh`), without a destination.
pub fn ssh_command(args: &SshArgs) -> Result<Command> {
    Ok(rsh_command(&rsh_words(args)?))
}

fn rsh_command(words: &[String]) -> Command {
    let mut c = Command::new(&words[0]);
    c.args(&words[1..]);
    c
}

/// The host name ssh would connect to (`ssh -G`: HostName from ~/.ssh/config), else `host`.
fn ssh_hostname(words: &[String], target: &SshTarget) -> String {
    let out = rsh_command(words).args(["-G", "--", &target.login]).stdin(Stdio::null()).stderr(Stdio::null()).output();
    if let Ok(o) = out {
        if o.status.success() {
            for line in String::from_utf8_lossy(&o.stdout).lines() {
                if let Some(h) = line.strip_prefix("hostname ") {
                    return h.trim().to_string();
                }
            }
        }
    }
    target.host.clone()
}

/// The remote side of one copy: the ssh child (kept for the session), the secret and where to
/// connect.
pub struct Remote {
    ssh: Option<Child>,
    stdin: Option<ChildStdin>,
    /// Where the copy connects (the remote's port, or the local forwarder).
    pub addr: SocketAddr,
    /// The session's one-time secret.
    pub secret: Secret,
    /// How the remote side started.
    pub phases: CpPhases,
    fwd: Option<Forwarder>,
    ctl: Option<tempfile::TempDir>,
}

/// Most lines of other output (a login banner printed by a shell startup file) skipped while
/// looking for the announce line.
const MAX_PRELUDE_LINES: usize = 64;

/// Longest line of the remote's output read as one; a longer one is read as several.
const MAX_LINE: u64 = 4096;

/// The remote's standard output, read line by line on a thread of its own so that every wait for
/// it has a deadline ([`StartClock`]): a remote that prints nothing and never exits cannot hold
/// `cp` (issue 42). A few lines wait in a bounded queue; once the reader is dropped (after the
/// announce line) the thread reads and discards the rest, so the remote never blocks on a full
/// pipe, and ends with it.
struct Lines {
    rx: mpsc::Receiver<Vec<u8>>,
}

impl Lines {
    fn spawn(out: ChildStdout) -> Lines {
        let (tx, rx) = mpsc::sync_channel(8);
        std::thread::spawn(move || {
            let mut out = BufReader::new(out);
            loop {
                let mut line = Vec::new();
                match (&mut out).take(MAX_LINE).read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                if tx.send(line).is_err() {
                    let _ = std::io::copy(&mut out, &mut std::io::sink());
                    return;
                }
            }
        });
        Lines { rx }
    }

    /// The next line, or why there is none: the output ended, or `until` passed.
    fn next(&self, until: Instant) -> Result<Vec<u8>, mpsc::RecvTimeoutError> {
        self.rx.recv_timeout(until.saturating_duration_since(Instant::now()))
    }
}

/// The start-up's deadlines: the remote's first line (`--ssh-timeout`) and its announce line
/// (`--ssh-start-timeout`, moved on by the time an upload spent sending).
struct StartClock {
    first: Instant,
    whole: Instant,
    /// Whether a first line came.
    spoke: bool,
}

impl StartClock {
    fn new(started: Instant, args: &SshArgs) -> StartClock {
        StartClock { first: started + args.ssh_timeout, whole: started + args.ssh_start_timeout, spoke: false }
    }

    /// Until when to wait for the next line.
    fn until(&self) -> Instant {
        if self.first_line_due() {
            self.first
        } else {
            self.whole
        }
    }

    /// Whether the next deadline is the first line's.
    fn first_line_due(&self) -> bool {
        !self.spoke && self.first <= self.whole
    }
}

/// Which remote linerate to start.
enum Boot {
    /// `--remote-linerate PATH` (or `linerate`, when this executable cannot be read).
    Given(String),
    /// The cache, the PATH, or an upload of this executable ([`provision`]).
    Provision(provision::Exe),
}

/// Whether this run may upload: `--no-upload`, then `LINERATE_NO_UPLOAD` (set to anything but
/// empty, `0`, `false`, `no` or `off`).
fn upload_policy(args: &SshArgs) -> provision::Upload {
    if args.no_upload {
        return provision::Upload::RefusedByFlag;
    }
    match std::env::var("LINERATE_NO_UPLOAD") {
        Ok(v) if !matches!(v.trim().to_ascii_lowercase().as_str(), "" | "0" | "false" | "no" | "off") => {
            provision::Upload::RefusedByEnv
        }
        _ => provision::Upload::Allowed,
    }
}

impl Remote {
    /// Start the remote side through ssh (`--remote-linerate`, or the boot script that finds or
    /// uploads one) and read its announce line, within `args`' deadlines; `stall` bounds the
    /// self-upload instead (it fails when ssh takes no byte for that long).
    pub fn start(target: &SshTarget, args: &SshArgs, quiet: bool, stall: Duration) -> crate::error::Result<Remote> {
        let started = Instant::now();
        let words = rsh_words(args).usage()?;
        let ctl = if args.via_ssh {
            let d = tempfile::Builder::new()
                .prefix("linerate-ssh-")
                .tempdir()
                .context("creating a private directory for the ssh control socket")
                .session()?;
            // Private, whatever the umask: the socket gives anyone who can reach it our ssh session.
            std::fs::set_permissions(d.path(), std::os::unix::fs::PermissionsExt::from_mode(0o700))
                .context("making the control socket's directory private")
                .session()?;
            Some(d)
        } else {
            None
        };
        let extra: &[&str] = if args.via_ssh { &["--ssh-loopback"] } else { &[] };
        let boot = match &args.remote_linerate {
            Some(p) => Boot::Given(p.clone()),
            None => match provision::Exe::current() {
                Ok(exe) => Boot::Provision(exe),
                Err(e) => {
                    if !quiet {
                        errln!("linerate: note: cannot offer this program to the remote host ({e:#}); trying its `linerate`")?;
                    }
                    Boot::Given("linerate".into())
                }
            },
        };
        let remote_cmd = match &boot {
            Boot::Given(p) => {
                let mut c = format!("{} serve --once --ssh", shell_quote(p));
                for e in extra {
                    c.push(' ');
                    c.push_str(e);
                }
                c
            }
            Boot::Provision(exe) => provision::boot_command(exe, extra),
        };
        let mut cmd = rsh_command(&words);
        cmd.arg("-T");
        if let Some(d) = &ctl {
            cmd.arg("-M").arg("-S").arg(d.path().join("ctl")).args(["-o", "ControlPersist=no"]);
        }
        cmd.args(["--", &target.login, &remote_cmd])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().with_context(|| format!("starting {}", words[0])).usage()?;
        let mut clock = StartClock::new(Instant::now(), args);
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let mut remote = Remote {
            ssh: Some(child),
            stdin,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            secret: Secret([0; 32]),
            phases: CpPhases::default(),
            fwd: None,
            ctl,
        };
        let given = match &boot {
            Boot::Given(p) => Some(p.as_str()),
            Boot::Provision(_) => None,
        };
        let Some(out) = stdout else {
            let status = remote.kill_ssh(Duration::from_secs(5));
            let e = remote_failed(AnnounceFailure::Eof(None), status, target, given, args);
            return Err(Error::new(Kind::Session, e));
        };
        let lines = Lines::spawn(out);
        let mut probe = provision::Probe::new();
        let mut ran = RemoteLinerate::Given;
        let mut upload_started = None;
        let ann = loop {
            match read_announce(&lines, &mut probe, &mut clock) {
                Ok(Startup::Announce(a)) => break a,
                Ok(Startup::Probe) => {
                    let Boot::Provision(exe) = &boot else { unreachable!("only the boot script probes") };
                    if upload_started.is_some() {
                        // The upload was answered by another probe: the script failed after it.
                        let why = probe.failed.clone().unwrap_or_else(|| "it ended".into());
                        let _ = remote.kill_ssh(Duration::from_secs(5));
                        return Err(Error::new(
                            Kind::Session,
                            anyhow!("the upload of linerate to {} failed: {why}", escape(target.host.as_bytes())),
                        ));
                    }
                    let host = escape(target.host.as_bytes());
                    let local = provision::Local::this(exe);
                    if let Err(why) = provision::decide(&probe, &local, &exe.name, &host, upload_policy(args)) {
                        if let Some(mut i) = remote.stdin.take() {
                            let _ = i.write_all(b"QUIT\n");
                        }
                        let _ = remote.kill_ssh(Duration::from_secs(5));
                        return Err(Error::new(Kind::Usage, anyhow!(why)));
                    }
                    let sending = Instant::now();
                    upload_started = Some(sending);
                    remote.phases.upload_bytes = remote.upload(exe, &host, &probe, quiet, stall)?;
                    // The upload's own time is bounded by `stall`, not by the start-up's deadline.
                    clock.whole += sending.elapsed();
                    probe = provision::Probe::new();
                }
                Ok(Startup::Ran(how)) => ran = how,
                Err(e) => {
                    // A remote past its deadline is not given more time to end by itself.
                    let grace =
                        if matches!(e, AnnounceFailure::Late { .. }) { Duration::ZERO } else { Duration::from_secs(5) };
                    let status = remote.kill_ssh(grace);
                    let e = match (e, &probe.failed) {
                        (AnnounceFailure::Eof(_), Some(why)) => anyhow!(
                            "the upload of linerate to {} failed: {why}; {}",
                            escape(target.host.as_bytes()),
                            exit_words(status)
                        ),
                        (e, _) => remote_failed(e, status, target, given, args),
                    };
                    return Err(Error::new(Kind::Session, e));
                }
            }
        };
        // From here `lines`' thread reads and discards, so the remote never blocks on a full pipe.
        drop(lines);
        remote.phases.remote_linerate = if given.is_some() { RemoteLinerate::Given } else { ran };
        remote.phases.remote_start_s = started.elapsed().as_secs_f64();
        remote.phases.upload_s = upload_started.map_or(0.0, |t| t.elapsed().as_secs_f64());
        remote.secret = ann.secret.clone();
        if let Some(d) = &remote.ctl {
            let ctl_path = d.path().join("ctl");
            let (words, login, port) = (words.clone(), target.login.clone(), ann.port);
            let fwd = Forwarder::start(move || {
                let mut c = rsh_command(&words);
                c.arg("-S").arg(&ctl_path).args(["-o", "ControlMaster=no", "-W", &format!("127.0.0.1:{port}")]);
                c.args(["--", &login]);
                c
            })
            .context("starting the local forwarder for --via-ssh")
            .session()?;
            remote.addr = fwd.addr();
            remote.fwd = Some(fwd);
        } else {
            remote.addr = pick_addr(&ann, target, &words).session()?;
        }
        Ok(remote)
    }

    /// Send this executable to the boot script, with a progress bar on a terminal. It is written
    /// on a thread of its own, so that a remote that stops reading (its pipe full) ends it after
    /// `stall` without progress instead of holding `cp` (issue 42).
    fn upload(
        &mut self,
        exe: &provision::Exe,
        host: &str,
        probe: &provision::Probe,
        quiet: bool,
        stall: Duration,
    ) -> crate::error::Result<u64> {
        let dir = match &probe.cache {
            Some(Ok(d)) => d.clone(),
            _ => String::new(),
        };
        if !quiet {
            errln!(
                "linerate: {host} has no usable linerate: sending this one ({}) to {dir} there, once (--no-upload refuses)",
                linerate_model::units::format_size(exe.size as f64)
            )?;
        }
        let bar = if quiet {
            indicatif::ProgressBar::hidden()
        } else {
            indicatif::ProgressBar::with_draw_target(Some(exe.size), indicatif::ProgressDrawTarget::stderr())
        };
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "linerate: uploading {bytes}/{total_bytes} {wide_bar} {binary_bytes_per_sec}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        let Some(mut stdin) = self.stdin.take() else {
            return Err(Error::msg(Kind::Session, "ssh's standard input is gone"));
        };
        /// What the sending thread reports.
        enum Sending {
            Progress(u64),
            Done(Result<u64>, ChildStdin),
        }
        let (tx, rx) = mpsc::channel();
        let (exe, progress) = (exe.clone(), tx.clone());
        std::thread::spawn(move || {
            let sent = provision::upload(&exe, &mut stdin, |n| {
                let _ = progress.send(Sending::Progress(n));
            });
            let _ = tx.send(Sending::Done(sent, stdin));
        });
        let sent = loop {
            match rx.recv_timeout(stall) {
                Ok(Sending::Progress(n)) => bar.set_position(n),
                Ok(Sending::Done(sent, stdin)) => {
                    self.stdin = Some(stdin);
                    break sent;
                }
                // The thread stays blocked in its write until ssh is killed (the caller drops us).
                Err(_) => {
                    bar.finish_and_clear();
                    return Err(Error::msg(
                        Kind::Session,
                        format!(
                            "uploading linerate to {host}: ssh took no byte for {} (--stall-timeout); stopped",
                            shown(stall)
                        ),
                    ));
                }
            }
        };
        bar.finish_and_clear();
        sent.map_err(|e| Error::new(Kind::Session, e.context(format!("uploading linerate to {host}"))))
    }
    /// Connections the `--via-ssh` forwarder carried.
    pub fn forwarded(&self) -> Option<u64> {
        self.fwd.as_ref().map(Forwarder::accepted)
    }

    /// Kill ssh by its process id and reap it, after `grace` for it to end by itself.
    fn kill_ssh(&mut self, grace: Duration) -> Option<ExitStatus> {
        let mut child = self.ssh.take()?;
        if let Some(s) = linerate_net::proc::exit_within(&mut child, grace) {
            self.stdin = None;
            return Some(s);
        }
        let _ = child.kill();
        self.stdin = None;
        child.wait().ok()
    }

    /// End the session: after a completed copy the remote exits by itself and ssh with it (given
    /// a few seconds); otherwise ssh is killed at once. The control socket's directory goes too.
    pub fn finish(mut self, ok: bool) {
        let grace = if ok { Duration::from_secs(15) } else { Duration::ZERO };
        if let Some(f) = self.fwd.take() {
            f.stop(if ok { Duration::from_secs(5) } else { Duration::ZERO });
        }
        self.kill_ssh(grace);
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        if let Some(f) = self.fwd.take() {
            f.stop(Duration::ZERO);
        }
        self.kill_ssh(Duration::ZERO);
        // `ctl` (a TempDir) removes the control socket's directory when dropped after this.
    }
}

/// What went wrong reading the announce line.
enum AnnounceFailure {
    /// Output ended (or a read failed) before a `LINERATE` line; the first other line seen.
    Eof(Option<String>),
    /// A line was found but is unusable.
    Bad(AnnounceError),
    /// A deadline passed: the first line's (`first`), else the announce line's; the first other
    /// line seen.
    Late { first: bool, other: Option<String> },
}

/// What the remote side said before or instead of its announce line.
enum Startup {
    /// The announce line: the remote linerate runs.
    Announce(Announce),
    /// The boot script's probe ended (`end`) or reported a failure (`fail`): it waits for an
    /// answer, or has given up.
    Probe,
    /// The boot script said which linerate it runs.
    Ran(RemoteLinerate),
}

/// Read the remote's output up to its announce line, a finished probe, or a `run` note, by the
/// deadlines of `clock`; other lines (a login banner) are skipped, at most
/// [`MAX_PRELUDE_LINES`] of them. Whatever of the remote's bytes is shown is escaped as names
/// are ([`escape`]: `\xNN` for a control character or a byte that is not UTF-8).
fn read_announce(
    lines: &Lines,
    probe: &mut provision::Probe,
    clock: &mut StartClock,
) -> Result<Startup, AnnounceFailure> {
    let mut other = None;
    for _ in 0..MAX_PRELUDE_LINES {
        let line = match lines.next(clock.until()) {
            Ok(line) => line,
            Err(mpsc::RecvTimeoutError::Disconnected) => return Err(AnnounceFailure::Eof(other)),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                return Err(AnnounceFailure::Late { first: clock.first_line_due(), other })
            }
        };
        clock.spoke = true;
        // The line as it may be shown, and as it is parsed: an announce line is plain ASCII,
        // unchanged by escaping, and whatever an error quotes of it is escaped already.
        let text = escape(line.trim_ascii_end());
        if let Some(how) = text.strip_prefix("LINERATE-PROBE run ") {
            return Ok(Startup::Ran(match how.split(' ').next() {
                Some("cache") => RemoteLinerate::Cache,
                Some("uploaded") => RemoteLinerate::Uploaded,
                _ => RemoteLinerate::Path,
            }));
        }
        if probe.add(&line) {
            if probe.complete || probe.failed.is_some() {
                return Ok(Startup::Probe);
            }
            continue;
        }
        match Announce::parse(&text) {
            Ok(a) => return Ok(Startup::Announce(a)),
            Err(AnnounceError::NotAnnounce) => {
                if other.is_none() && !text.contains("SECRET") {
                    other = Some(text.chars().take(100).collect());
                }
            }
            Err(e) => return Err(AnnounceFailure::Bad(e)),
        }
    }
    Err(AnnounceFailure::Eof(other))
}

/// How ssh ended, in words.
fn exit_words(status: Option<ExitStatus>) -> String {
    match status.map(|s| (s.code(), s)) {
        Some((Some(c), _)) => format!("ssh exited with status {c}"),
        Some((None, s)) => format!("ssh ended: {s}"),
        None => "ssh did not end and was killed".into(),
    }
}

fn remote_failed(
    f: AnnounceFailure,
    status: Option<ExitStatus>,
    target: &SshTarget,
    given: Option<&str>,
    args: &SshArgs,
) -> anyhow::Error {
    let host = escape(target.host.as_bytes());
    let program = escape(given.unwrap_or("linerate").as_bytes());
    let status = match status.map(|s| s.code()) {
        Some(Some(255)) => "ssh exited with status 255: the ssh connection failed (see its message above)".into(),
        Some(Some(127)) if given.is_some() => format!(
            "ssh exited with status 127: '{program}' was not found on {host}; install linerate there or name it with \
             --remote-linerate PATH"
        ),
        Some(Some(126)) if given.is_none() => format!(
            "ssh exited with status 126: the uploaded linerate could not be run on {host} (is the remote user's cache \
             on a file system mounted noexec? Remove it with `linerate cache clean {host}`, or install linerate there \
             and name it with --remote-linerate PATH)"
        ),
        Some(Some(2)) => format!(
            "ssh exited with status 2: the remote '{program}' refused its command line (older than this linerate, \
             without `serve --ssh`?)"
        ),
        _ => exit_words(status),
    };
    // What an error quotes of the remote's line (its SOFTWARE) is escaped: the line was, before
    // it was parsed (read_announce).
    match f {
        AnnounceFailure::Bad(e @ AnnounceError::Version { .. }) => anyhow!(
            "{e}: install the same linerate version on both hosts (or name the remote one with --remote-linerate PATH)"
        ),
        AnnounceFailure::Bad(e) => anyhow!("the remote linerate on {host} announced nothing usable: {e}; {status}"),
        AnnounceFailure::Late { first: true, .. } => anyhow!(
            "the remote side on {host} printed nothing within {t} of starting ssh (--ssh-timeout {t}), so ssh was \
             stopped: ssh may have been waiting to connect or for an answer at a prompt, or the remote login shell \
             hung. Try `ssh {login} true` by hand; raise --ssh-timeout for a slow login",
            t = shown(args.ssh_timeout),
            login = escape(target.login.as_bytes()),
        ),
        AnnounceFailure::Late { first: false, other } => {
            let began = other.map(|l| format!(" (its output began with \"{l}\")")).unwrap_or_default();
            anyhow!(
                "the remote side on {host} did not announce itself within {t} of starting ssh \
                 (--ssh-start-timeout {t}; an upload's sending not counted){began}, so ssh was stopped",
                t = shown(args.ssh_start_timeout),
            )
        }
        AnnounceFailure::Eof(Some(line)) => {
            anyhow!("the remote side on {host} did not announce itself (its output began with \"{line}\"); {status}")
        }
        AnnounceFailure::Eof(None) => {
            anyhow!("the remote side on {host} ended without announcing itself; {status}")
        }
    }
}

/// Where to reach the remote's port: the address the ssh connection reached (mosh's choice) if a
/// connection gets through, else the host name as ssh resolves it (`ssh -G`).
fn pick_addr(ann: &Announce, target: &SshTarget, words: &[String]) -> Result<SocketAddr> {
    const PROBE: Duration = Duration::from_secs(3);
    if let Some(ip) = ann.addr {
        let a = SocketAddr::new(ip, ann.port);
        if ssh::reachable(a, PROBE) {
            return Ok(a);
        }
    }
    let name = ssh_hostname(words, target);
    let addr = (name.as_str(), ann.port)
        .to_socket_addrs()
        .with_context(|| format!("resolving {}", escape(name.as_bytes())))?
        .next()
        .ok_or_else(|| anyhow!("{}: no address", escape(name.as_bytes())))?;
    if !ssh::reachable(addr, PROBE) {
        errln!(
            "linerate: note: port {} on {} is not reachable directly; if a firewall blocks it, add --via-ssh",
            ann.port,
            escape(name.as_bytes())
        )?;
    }
    Ok(addr)
}

/// Run an ssh copy; returns the report or the failure, as `transfer::copy_to` does.
pub fn copy(
    job: Job,
    args: &SshArgs,
    mut cfg_fn: impl FnMut(&mut CopyConfig),
    show: crate::progress::Show,
) -> crate::error::Result<CopyReport> {
    let usage = |e: anyhow::Error| Error::new(Kind::Usage, e);
    let target = match &job {
        Job::Push { sources, target } => {
            for s in sources {
                if std::fs::symlink_metadata(s).is_err() {
                    return Err(usage(anyhow!("{}: no such file or directory", s.display())));
                }
            }
            target
        }
        Job::Pull { target, .. } => target,
    };
    if args.via_ssh {
        errln!(
            "linerate: warning: --via-ssh carries every stream through one ssh connection; expect it to be \
             slower than a direct connection"
        )?;
    }
    // The flags first (the upload's stall bound is one), the remote's address and key once known.
    let mut cfg = CopyConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)), Secret([0; 32]), Vec::new(), Vec::new());
    cfg.streams = crate::transfer::default_streams();
    cfg_fn(&mut cfg);
    let remote = Remote::start(target, args, show.quiet, cfg.stall_timeout)?;
    let phases = remote.phases;
    cfg.addr = remote.addr;
    cfg.secret = remote.secret.clone();
    let quiet = show.quiet;
    let result = crate::transfer::run_engine(
        show,
        |progress, sink| match job {
            Job::Push { sources, target } => {
                cfg.placement = send::placement(&sources, &target.path);
                cfg.sources = sources;
                cfg.dest = target.path;
                send::copy(&cfg, progress, sink)
            }
            Job::Pull { target, into } => linerate_copy::pull::pull(&cfg, &target.path, &into, progress, sink),
        },
        None,
    );
    if let (Some(n), false) = (remote.forwarded(), quiet) {
        let _ = errln!("linerate: --via-ssh: {n} connections carried through ssh");
    }
    remote.finish(result.is_ok());
    result.map(|mut r| {
        r.phases = Some(CpPhases { copy_s: r.seconds, ..phases });
        r
    })
}

/// `linerate serve --once --ssh`: started by `linerate cp` through ssh.
pub fn run_serve_ssh(a: &ServeSshArgs, handshake_timeout: Duration, idle_timeout: Duration) -> crate::error::Result {
    let fail = |what: &str, e: &dyn std::fmt::Display| Err(Error::msg(Kind::Session, format!("{what}: {e}")));
    let secret = match Secret::generate() {
        Ok(s) => s,
        Err(e) => return fail("making the session key", &e),
    };
    let home = match std::env::current_dir() {
        Ok(d) => d,
        Err(e) => return fail("finding the current directory", &e),
    };
    let addr = std::env::var_os("SSH_CONNECTION").and_then(|v| ssh::ssh_connection_addr(&v.to_string_lossy()));
    let deadline = a.connect_deadline.max(Duration::from_secs(1));
    let listens: Vec<SocketAddr> = if a.ssh_loopback {
        vec![SocketAddr::from(([127, 0, 0, 1], 0))]
    } else {
        // Every address: dual-stack where IPv6 is enabled, else IPv4 alone.
        vec![SocketAddr::from((IpAddr::from([0u16; 8]), 0)), SocketAddr::from(([0, 0, 0, 0], 0))]
    };
    let mut server = Err(EngineError::Usage("no address to listen on".into()));
    for l in listens {
        let mut cfg = ServerConfig::ssh_user(l, secret.clone(), home.clone(), deadline);
        cfg.handshake_timeout = handshake_timeout;
        cfg.idle_timeout = idle_timeout;
        server = Server::bind(cfg);
        if server.is_ok() {
            break;
        }
    }
    let server = match server {
        Ok(s) => s,
        Err(e) => return fail("listening", &e),
    };
    let announce = Announce {
        version: linerate_proto::PROTOCOL_VERSION,
        port: server.local_addr().port(),
        secret,
        addr: if a.ssh_loopback { None } else { addr },
        software: Some(env!("CARGO_PKG_VERSION").to_string()),
    };
    // The only place the secret is written: the pipe ssh carries back to the client.
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{}", announce.line()).and_then(|()| out.flush()).is_err() {
        return fail("writing the announce line", &"standard output is closed");
    }
    drop(out);
    drop(announce);
    // The client holds our stdin open for the session: its end means the client (or the ssh
    // connection) is gone, and nobody will ever read what we would write.
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
        let _ = errln!("linerate serve: the ssh connection closed; exiting");
        crate::ending::request(Kind::Session);
    });
    match server.run() {
        // The session's own outcome was logged by the server.
        Ok(Some(recv::Outcome::Done(s))) if s.errors == 0 => Ok(()),
        Ok(Some(recv::Outcome::Done(_))) => Err(Error::reported(Kind::Partial)),
        Ok(Some(recv::Outcome::Aborted(_))) => Err(Error::reported(Kind::Session)),
        Ok(None) => Ok(()),
        Err(EngineError::Timeout(_)) => {
            Err(Error::msg(Kind::Session, format!("no client connected within {} s; exiting", deadline.as_secs())))
        }
        Err(e) => fail("serving", &e),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn rsh_is_split_as_rsync_splits_it() {
        let w = |s: &str| split_rsh(s).unwrap();
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
        assert!(split_rsh("ssh 'open").is_err());
    }

    fn spec(s: &str) -> Option<SshTarget> {
        parse_spec(Path::new(s)).map(|r| r.unwrap())
    }

    fn t(login: &str, host: &str, path: &str) -> Option<SshTarget> {
        Some(SshTarget { login: login.into(), host: host.into(), path: path.as_bytes().to_vec() })
    }

    #[test]
    fn tells_ssh_operands_from_daemon_and_local_ones() {
        assert_eq!(spec("host:dir/x"), t("host", "host", "dir/x"));
        assert_eq!(spec("me@host:"), t("me@host", "host", ""));
        assert_eq!(spec("me@host:/abs path"), t("me@host", "host", "/abs path"));
        assert_eq!(spec("host:notaport:x"), t("host", "host", "notaport:x"));
        assert_eq!(spec("host:1"), t("host", "host", "1"));
        assert_eq!(spec("me@host:7878:x"), t("me@host", "host", "7878:x"));
        assert_eq!(spec("[::1]:x"), t("::1", "::1", "x"));
        assert_eq!(spec("me@[fe80::1]:x"), t("me@fe80::1", "fe80::1", "x"));
        // The daemon form and local paths are not ssh operands.
        assert_eq!(spec("host:7878:x"), None);
        assert_eq!(spec("[::1]:7878:x"), None);
        assert_eq!(spec("plain/dir"), None);
        assert_eq!(spec("./a:b"), None);
        assert_eq!(spec("/abs:x"), None);
        assert_eq!(spec("dir/a:b"), None);
        // Malformed.
        assert!(parse_spec(Path::new(":x")).unwrap().is_err());
        assert!(parse_spec(Path::new("-oProxyCommand=x:y")).unwrap().is_err());
        assert!(parse_spec(Path::new("[::1:x")).unwrap().is_err());
    }

    #[test]
    fn classifies_push_and_pull() {
        let p = |v: &[&str]| v.iter().map(PathBuf::from).collect::<Vec<_>>();
        assert!(matches!(classify(&p(&["a", "b"]), Path::new("h:x")).unwrap(), Some(Job::Push { .. })));
        assert!(matches!(classify(&p(&["h:x"]), Path::new("d")).unwrap(), Some(Job::Pull { .. })));
        assert_eq!(classify(&p(&["a"]), Path::new("d")).unwrap(), None);
        assert_eq!(classify(&p(&["a"]), Path::new("h:7878:d")).unwrap(), None);
        assert!(classify(&p(&["h:x", "h:y"]), Path::new("d")).is_err());
        assert!(classify(&p(&["h:x"]), Path::new("g:y")).is_err());
    }

    #[test]
    fn quotes_for_the_remote_shell() {
        assert_eq!(shell_quote("linerate"), "linerate");
        assert_eq!(shell_quote("/opt/lr/bin/linerate"), "/opt/lr/bin/linerate");
        assert_eq!(shell_quote("a b'$(x)"), r"'a b'\''$(x)'");
        assert_eq!(shell_quote(""), "''");
    }
}
