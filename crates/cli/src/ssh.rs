//! `linerate cp` to and from `[user@]host:PATH` (issue 5): the flags and operands, and the copy
//! once the remote side has started. Starting it — ssh, the boot script, the self-upload, the
//! announce line — is `linerate_remote`'s; the copy then runs over direct parallel streams, or
//! with `--via-ssh` through channels of the same ssh connection (the engine's `Forwarder`).
//! Paths travel inside the protocol, never through the remote shell. Also the `serve --ssh`
//! side, which prints the announce line.

use crate::error::{Error, Kind, ResultExt};

use anyhow::Result;
use clap::Args;
use linerate_copy::recv;
use linerate_copy::send::{CopyConfig, CopyReport};
use linerate_net::EngineError;
use linerate_remote::copy::{SshCopy, SshCopyError};
use linerate_remote::probe::Upload;
use linerate_remote::serve::{listen, ServeConfig};
use linerate_remote::spawn::{self, Notice, Rsh};
use linerate_remote::target::SshTarget;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

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
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = spawn::parse_ssh_timeout)]
    pub ssh_timeout: Duration,
    /// How long the remote side may take, from the start of ssh, to announce itself (its port and
    /// one-time key), not counting the time the self-upload spends sending, which ends instead
    /// when ssh takes no byte for --stall-timeout. A duration (120, 2m).
    #[arg(long, value_name = "DURATION", default_value = "120s", value_parser = spawn::parse_ssh_timeout)]
    pub ssh_start_timeout: Duration,
}

impl Default for SshArgs {
    fn default() -> SshArgs {
        SshArgs {
            rsh: None,
            remote_linerate: None,
            no_upload: false,
            via_ssh: false,
            ssh_timeout: spawn::FIRST_LINE,
            ssh_start_timeout: spawn::ANNOUNCE,
        }
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

/// The ssh command of `args` (`-e`, or `ssh`), without a destination.
pub fn ssh_command(args: &SshArgs) -> Result<Command> {
    Ok(Rsh::parse(args.rsh.as_deref())?.command())
}

/// How `args` start the remote side: the flags, then `LINERATE_NO_UPLOAD`.
fn start_options(args: &SshArgs, stall: Duration) -> spawn::Options {
    let env = std::env::var("LINERATE_NO_UPLOAD").ok();
    spawn::Options {
        remote_linerate: args.remote_linerate.clone(),
        upload: Upload::of(args.no_upload, env.as_deref()),
        via_ssh: args.via_ssh,
        first_line: args.ssh_timeout,
        announce: args.ssh_start_timeout,
        stall,
    }
}

/// The upload's progress bar, erased when the upload or the start-up ends.
struct UploadBar(Option<indicatif::ProgressBar>);

impl Drop for UploadBar {
    fn drop(&mut self) {
        if let Some(b) = self.0.take() {
            b.finish_and_clear();
        }
    }
}

/// What the start-up tells the user, on stderr (`quiet`: only what they must know): the
/// upload's note and progress bar, and a port the copy cannot reach directly.
fn notices(quiet: bool) -> impl FnMut(Notice<'_>) {
    let mut bar = UploadBar(None);
    move |n| {
        if let Some(line) = n.text(quiet) {
            let _ = errln!("{line}");
        }
        match n {
            Notice::Uploading { size, .. } => {
                let b = if quiet {
                    indicatif::ProgressBar::hidden()
                } else {
                    indicatif::ProgressBar::with_draw_target(Some(size), indicatif::ProgressDrawTarget::stderr())
                };
                b.set_style(
                    indicatif::ProgressStyle::with_template(
                        "linerate: uploading {bytes}/{total_bytes} {wide_bar} {binary_bytes_per_sec}",
                    )
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
                );
                bar = UploadBar(Some(b));
            }
            Notice::Sent(n) => {
                if let Some(b) = &bar.0 {
                    b.set_position(n);
                }
            }
            Notice::SentAll => bar = UploadBar(None),
            Notice::CannotOffer(_) | Notice::Unreachable { .. } => {}
        }
    }
}

/// Run a copy over ssh (`config` has the flags' settings, and a push's sources and
/// destination), to `target` or, for a pull, from it `into` a local path; returns the report or
/// the failure, as a copy to a running server does.
pub fn copy(
    cfg: CopyConfig,
    target: &SshTarget,
    into: Option<&Path>,
    args: &SshArgs,
    show: crate::progress::Show,
) -> crate::error::Result<CopyReport> {
    if args.via_ssh {
        errln!(
            "linerate: warning: --via-ssh carries every stream through one ssh connection; expect it to be \
             slower than a direct connection"
        )?;
    }
    let rsh = Rsh::parse(args.rsh.as_deref()).usage()?;
    let opts = start_options(args, cfg.stall_timeout);
    let started = SshCopy::start(cfg, target, into, &rsh, &opts, &mut notices(show.quiet)).map_err(|e| match e {
        SshCopyError::Start(e) => Error::new(if e.is_usage() { Kind::Usage } else { Kind::Session }, e),
        e @ SshCopyError::Forwarder(_) => Error::new(Kind::Session, e),
    })?;
    let result = crate::transfer::shown(show, |obs, cx| started.run(obs, cx));
    let (result, carried) = started.finish(result);
    if let (Some(n), false) = (carried, show.quiet) {
        let _ = errln!("linerate: --via-ssh: {n} connections carried through ssh");
    }
    result
}

/// `linerate serve --once --ssh`: started by `linerate cp` through ssh.
pub fn run_serve_ssh(a: &ServeSshArgs, handshake_timeout: Duration, idle_timeout: Duration) -> crate::error::Result {
    let fail = |what: &str, e: &dyn std::fmt::Display| Err(Error::msg(Kind::Session, format!("{what}: {e}")));
    let deadline = a.connect_deadline.max(Duration::from_secs(1));
    let config = ServeConfig { loopback: a.ssh_loopback, connect_deadline: deadline, handshake_timeout, idle_timeout };
    let (server, announce) = listen(&config).map_err(|e| Error::msg(Kind::Session, e.to_string()))?;
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
