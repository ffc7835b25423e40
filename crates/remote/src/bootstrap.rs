//! The start-up dialogue with the far side as a machine without I/O: it is fed the remote's
//! standard output as bytes ([`Bootstrap::handle_output`], [`Bootstrap::handle_eof`]), the
//! progress of an upload, and the time — every `handle_*` takes the `now` it happened at — asks
//! to be woken at [`Bootstrap::poll_timeout`], and says what to do through
//! [`Bootstrap::poll_action`]: write a line to the remote, hash and send this executable, start
//! the copy with the announce line, or give up with a typed [`BootError`]. The adapter that runs
//! it over ssh is [`crate::spawn`]; every rule and deadline is tested here on a virtual clock.
//!
//! The phases, with the boot script of [`crate::script`] (with `--remote-linerate`, only the
//! last):
//! 1. **probe**: the script runs a cached or installed linerate (`LINERATE-PROBE run ...`), or
//!    reports the remote's facts and waits (`LINERATE-PROBE ... end`);
//! 2. **decide** ([`crate::probe::decide`]): answer `QUIT` and refuse ([`Refusal`]), or upload;
//! 3. **upload**: this side hashes its executable ([`Action::Hash`]), writes `UPLOAD <size>
//!    <sha256>` and the bytes ([`Action::Send`]); the script checks the SHA-256 and runs it, or
//!    says `fail` (a mismatch is [`UploadFailure::Sha256Mismatch`]);
//! 4. **announce**: the `LINERATE ...` line ([`Announce`]) ends the dialogue: [`Action::Started`].
//!
//! Every byte from the remote is hostile: a line is at most [`MAX_LINE`] bytes (a longer one is
//! read as several), at most [`MAX_PRELUDE_LINES`] lines that are not an announce, probe or run
//! line are read before each of those, and at most [`MAX_OUTPUT`] bytes in all, so nothing it
//! prints grows memory; whatever of it is shown is escaped as names are (`\xNN`).
//!
//! Deadlines: the first line within [`BootConfig::first_line`] of the start (`--ssh-timeout`),
//! the announce line within [`BootConfig::announce`] (`--ssh-start-timeout`), moved on by the
//! time an upload took, whose sending ends instead when no byte was taken for
//! [`BootConfig::stall`] (`--stall-timeout`).

use crate::announce::{Announce, AnnounceError};
use crate::probe::{decide, Local, Probe, Refusal, Upload};
use linerate_model::doc::cp::RemoteLinerate;
use linerate_proto::name::escape;
use std::collections::VecDeque;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

/// Longest line of the remote's output read as one, its newline included; a longer one is read
/// as several.
pub const MAX_LINE: usize = 4096;

/// Most lines of other output (a login banner printed by a shell startup file) read before each
/// announce, probe or run line.
pub const MAX_PRELUDE_LINES: usize = 64;

/// Most bytes of the remote's output read before its announce line, whatever they are.
pub const MAX_OUTPUT: u64 = 1 << 20;

/// Characters of the remote's first other line quoted in a message.
const QUOTED: usize = 100;

/// What the boot script says when the upload's SHA-256 is not the one announced.
pub const SHA256_MISMATCH: &str = "the upload does not match its SHA-256";

/// What a start-up is: what runs on the remote, and its deadlines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootConfig {
    /// What the remote command runs.
    pub mode: Mode,
    /// The remote's first line is due this long after the start (`--ssh-timeout`).
    pub first_line: Duration,
    /// Its announce line is due this long after the start (`--ssh-start-timeout`), the upload's
    /// time not counted.
    pub announce: Duration,
    /// An upload fails when no byte was taken for this long (`--stall-timeout`).
    pub stall: Duration,
}

/// What the remote command runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// A linerate named by `--remote-linerate`: its announce line, nothing else, is expected.
    Given,
    /// The boot script, which may probe and take this executable.
    Offer(Offer),
}

/// This executable, as the boot script is offered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    /// Its cache entry's name (`<version>-<build id>`).
    pub name: String,
    /// Its size, bytes.
    pub size: u64,
    /// What it can run on.
    pub local: Local,
    /// Whether it may be sent.
    pub upload: Upload,
}

/// What the adapter must do now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Write these bytes (one line: `QUIT`, or `UPLOAD <size> <sha256>`) to the remote's
    /// standard input.
    Write(Vec<u8>),
    /// The remote takes this executable into `dir`: hash it and give the SHA-256 to
    /// [`Bootstrap::handle_hashed`] (the time this takes is no deadline's).
    Hash {
        /// The cache directory there (to say where it goes).
        dir: String,
        /// The executable's size.
        size: u64,
    },
    /// Write the executable's `size` bytes after the line just written, reporting progress to
    /// [`Bootstrap::handle_sent`] and the end to [`Bootstrap::handle_sent_all`].
    Send {
        /// Bytes to send.
        size: u64,
    },
    /// The remote linerate announced itself: the dialogue is over; start the copy.
    Started(Started),
    /// The start-up failed: stop ssh (see [`BootError::waits_for_ssh`]) and report.
    Failed(BootError),
}

/// A remote side that announced itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    /// Its announce line.
    pub announce: Announce,
    /// Which linerate runs there.
    pub ran: RemoteLinerate,
    /// Bytes of this executable sent (0 unless uploaded).
    pub upload_bytes: u64,
    /// From the upload's decision to the announce line (zero unless uploaded).
    pub upload_time: Duration,
}

/// Why a start-up failed: the facts, rendered for the user by [`BootError::message`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BootError {
    /// Nothing, not one line, within [`BootConfig::first_line`].
    #[error("the remote side printed nothing within {}", shown(*after))]
    Silent {
        /// The deadline's length.
        after: Duration,
    },
    /// No announce line within [`BootConfig::announce`].
    #[error("the remote side did not announce itself within {}", shown(*after))]
    NoAnnounce {
        /// The deadline's length.
        after: Duration,
        /// The first other line it printed (escaped, cut).
        began: Option<String>,
    },
    /// Its output ended first.
    #[error("the remote side ended without announcing itself")]
    Ended {
        /// The first other line it printed (escaped, cut).
        began: Option<String>,
    },
    /// More than [`MAX_PRELUDE_LINES`] other lines in a row, or [`MAX_OUTPUT`] bytes in all.
    #[error("the remote side printed too much without announcing itself")]
    Flood {
        /// The first other line it printed (escaped, cut).
        began: Option<String>,
    },
    /// Its announce line is unusable.
    #[error(transparent)]
    Announce(AnnounceError),
    /// This executable is not sent.
    #[error("the upload is refused: {0:?}")]
    Refused(Refusal),
    /// The script took the upload but did not run it.
    #[error("the upload failed: {0}")]
    UploadFailed(UploadFailure),
    /// ssh took no byte of the upload for [`BootConfig::stall`].
    #[error("ssh took no byte of the upload for {}", shown(*after))]
    UploadStalled {
        /// The bound's length.
        after: Duration,
    },
    /// The executable sent is not the one hashed: shorter, or other bytes.
    #[error("this program's executable changed while it was sent ({sent} of {size} bytes)")]
    ExecutableChanged {
        /// Bytes sent.
        sent: u64,
        /// Bytes hashed and announced.
        size: u64,
    },
}

/// How an upload the script took failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UploadFailure {
    /// What arrived is not what was announced.
    #[error("{SHA256_MISMATCH}")]
    Sha256Mismatch,
    /// The script's reason (escaped, cut): the cache could not be made or the file installed.
    #[error("{0}")]
    Said(String),
    /// It ended its probe again without a reason.
    #[error("it ended")]
    Ended,
}

/// What a message about a failed start names besides the error.
#[derive(Debug, Clone, Copy)]
pub struct Scene<'a> {
    /// The remote host (raw; escaped when shown).
    pub host: &'a str,
    /// ssh's destination, `[user@]host` (raw).
    pub login: &'a str,
    /// `--remote-linerate`, if given.
    pub given: Option<&'a str>,
    /// How ssh ended (`None`: it did not, and was killed).
    pub status: Option<ExitStatus>,
}

/// Where the dialogue is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Reading the remote's output for a probe, a run line or the announce line.
    Reading,
    /// Answered with an upload: waiting for this side's SHA-256.
    Hashing,
    /// Sending the executable, announced with `sha`; the last byte was taken at `progress_at`.
    Sending { sha: [u8; 32], progress_at: Instant },
    /// Over: started or failed.
    Done,
}

/// An upload under way or made.
#[derive(Debug, Clone, Copy)]
struct Uploading {
    /// When it was decided.
    since: Instant,
    /// Bytes taken so far.
    bytes: u64,
}

/// The dialogue; see the module documentation.
#[derive(Debug)]
pub struct Bootstrap {
    cfg: BootConfig,
    phase: Phase,
    /// When the first line is due.
    first_at: Instant,
    /// When the announce line is due (moved on by an upload).
    whole_at: Instant,
    /// Whether a whole line came.
    spoke: bool,
    /// The line being read (at most [`MAX_LINE`] bytes).
    partial: Vec<u8>,
    /// Bytes of output read.
    read: u64,
    /// Lines since the last announce, probe or run line.
    batch: usize,
    /// The first other line of the batch, as it may be shown.
    began: Option<String>,
    probe: Probe,
    ran: RemoteLinerate,
    upload: Option<Uploading>,
    /// An announce line that came while this side was still sending.
    held: Option<Announce>,
    actions: VecDeque<Action>,
}

impl Bootstrap {
    /// A remote command started at `now`.
    pub fn new(cfg: BootConfig, now: Instant) -> Bootstrap {
        Bootstrap {
            first_at: now + cfg.first_line,
            whole_at: now + cfg.announce,
            cfg,
            phase: Phase::Reading,
            spoke: false,
            partial: Vec::new(),
            read: 0,
            batch: 0,
            began: None,
            probe: Probe::new(),
            ran: RemoteLinerate::Given,
            upload: None,
            held: None,
            actions: VecDeque::new(),
        }
    }

    /// The remote printed `bytes` (any split: lines are put together here).
    pub fn handle_output(&mut self, mut bytes: &[u8], now: Instant) {
        while !bytes.is_empty() && self.phase != Phase::Done {
            if self.read >= MAX_OUTPUT {
                return self.fail(BootError::Flood { began: self.began.clone() });
            }
            let room = (MAX_LINE - self.partial.len()).min(usize::try_from(MAX_OUTPUT - self.read).unwrap_or(MAX_LINE));
            let window = &bytes[..room.min(bytes.len())];
            let (took, ended) = match window.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (window.len(), self.partial.len() + window.len() == MAX_LINE),
            };
            self.partial.extend_from_slice(&bytes[..took]);
            self.read += took as u64;
            bytes = &bytes[took..];
            if ended {
                let line = std::mem::take(&mut self.partial);
                self.line(&line, now);
            }
        }
    }

    /// The remote's output ended (a last line without its newline is read first).
    pub fn handle_eof(&mut self, now: Instant) {
        if !self.partial.is_empty() && self.phase != Phase::Done {
            let line = std::mem::take(&mut self.partial);
            self.line(&line, now);
        }
        self.fail(BootError::Ended { began: self.began.clone() });
    }

    /// This executable's SHA-256, as [`Action::Hash`] asked.
    pub fn handle_hashed(&mut self, sha: [u8; 32], now: Instant) {
        if self.phase != Phase::Hashing {
            return;
        }
        let Mode::Offer(offer) = &self.cfg.mode else { return };
        let line = format!("UPLOAD {} {}\n", offer.size, hex::encode(sha));
        let size = offer.size;
        self.phase = Phase::Sending { sha, progress_at: now };
        self.actions.push_back(Action::Write(line.into_bytes()));
        self.actions.push_back(Action::Send { size });
    }

    /// ssh has taken `total` bytes of the executable so far.
    pub fn handle_sent(&mut self, total: u64, now: Instant) {
        let (Phase::Sending { sha, .. }, Some(u)) = (self.phase, self.upload.as_mut()) else { return };
        if total > u.bytes {
            u.bytes = total;
            self.phase = Phase::Sending { sha, progress_at: now };
        }
    }

    /// The executable was sent: `total` bytes whose SHA-256 is `sha`.
    pub fn handle_sent_all(&mut self, total: u64, sha: [u8; 32], now: Instant) {
        let (Phase::Sending { sha: announced, .. }, Some(u), Mode::Offer(offer)) =
            (self.phase, self.upload.as_mut(), &self.cfg.mode)
        else {
            return;
        };
        u.bytes = total;
        if total != offer.size || sha != announced {
            return self.fail(BootError::ExecutableChanged { sent: total, size: offer.size });
        }
        // The upload's own time is bounded by `stall`, not by the start-up's deadline.
        self.whole_at += now.saturating_duration_since(u.since);
        self.phase = Phase::Reading;
        if let Some(a) = self.held.take() {
            self.started(a, now);
        }
    }

    /// When [`Bootstrap::handle_timeout`] is next due (`None`: no deadline runs).
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.phase {
            Phase::Reading if self.first_line_due() => Some(self.first_at),
            Phase::Reading => Some(self.whole_at),
            Phase::Sending { progress_at, .. } => Some(progress_at + self.cfg.stall),
            Phase::Hashing | Phase::Done => None,
        }
    }

    /// Time passed to `now`: a deadline may have passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.poll_timeout().is_none_or(|t| now < t) {
            return;
        }
        let e = match self.phase {
            Phase::Reading if self.first_line_due() => BootError::Silent { after: self.cfg.first_line },
            Phase::Reading => BootError::NoAnnounce { after: self.cfg.announce, began: self.began.clone() },
            _ => BootError::UploadStalled { after: self.cfg.stall },
        };
        self.fail(e);
    }

    /// The next thing to do.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Whether the dialogue is over (its last action may still wait in [`Bootstrap::poll_action`]).
    pub fn is_over(&self) -> bool {
        self.phase == Phase::Done
    }

    /// Whether the next deadline is the first line's.
    fn first_line_due(&self) -> bool {
        !self.spoke && self.first_at <= self.whole_at
    }

    /// One whole line (with its newline, if it had one).
    fn line(&mut self, raw: &[u8], now: Instant) {
        self.spoke = true;
        self.batch += 1;
        // The line as it may be shown, and as it is parsed: an announce line is plain ASCII,
        // unchanged by escaping, and whatever an error quotes of it is escaped already.
        let text = escape(raw.trim_ascii_end());
        if let Mode::Offer(_) = self.cfg.mode {
            if let Some(how) = text.strip_prefix("LINERATE-PROBE run ") {
                self.ran = match how.split(' ').next() {
                    Some("cache") => RemoteLinerate::Cache,
                    Some("uploaded") => RemoteLinerate::Uploaded,
                    _ => RemoteLinerate::Path,
                };
                return self.next_batch();
            }
            if self.probe.add(raw) {
                if self.probe.over() {
                    self.next_batch();
                    return self.probe_over(now);
                }
                return self.count_other();
            }
        }
        match Announce::parse(&text) {
            Ok(a) => {
                self.next_batch();
                match self.phase {
                    Phase::Reading => self.started(a, now),
                    // Sent in full before this side heard so: it counts once the sending ends.
                    Phase::Hashing | Phase::Sending { .. } => self.held = Some(a),
                    Phase::Done => {}
                }
            }
            Err(AnnounceError::NotAnnounce) => {
                // A line naming a SECRET is never quoted: it may be a malformed announce line.
                if self.began.is_none() && !text.contains("SECRET") {
                    self.began = Some(text.chars().take(QUOTED).collect());
                }
                self.count_other();
            }
            Err(e) => self.fail(BootError::Announce(e)),
        }
    }

    /// A line that is not the end of a batch: too many of them end the dialogue.
    fn count_other(&mut self) {
        if self.batch >= MAX_PRELUDE_LINES {
            self.fail(BootError::Flood { began: self.began.clone() });
        }
    }

    /// An announce, probe or run line: a new batch of other lines begins.
    fn next_batch(&mut self) {
        self.batch = 0;
        self.began = None;
    }

    /// The script ended its probe (`end`) or gave up (`fail`).
    fn probe_over(&mut self, now: Instant) {
        let probe = std::mem::replace(&mut self.probe, Probe::new());
        if self.upload.is_some() {
            // The upload was answered by another probe: the script failed after it.
            let failure = match probe.failed {
                Some(why) if why == SHA256_MISMATCH => UploadFailure::Sha256Mismatch,
                Some(why) => UploadFailure::Said(why),
                None => UploadFailure::Ended,
            };
            return self.fail(BootError::UploadFailed(failure));
        }
        let Mode::Offer(offer) = &self.cfg.mode else { return };
        match decide(&probe, &offer.local, &offer.name, offer.upload) {
            Ok(dir) => {
                let size = offer.size;
                self.upload = Some(Uploading { since: now, bytes: 0 });
                self.phase = Phase::Hashing;
                self.actions.push_back(Action::Hash { dir, size });
            }
            Err(refusal) => {
                self.actions.push_back(Action::Write(b"QUIT\n".to_vec()));
                self.fail(BootError::Refused(refusal));
            }
        }
    }

    fn started(&mut self, announce: Announce, now: Instant) {
        let ran = if self.cfg.mode == Mode::Given { RemoteLinerate::Given } else { self.ran };
        let (upload_bytes, upload_time) = match self.upload {
            Some(u) => (u.bytes, now.saturating_duration_since(u.since)),
            None => (0, Duration::ZERO),
        };
        self.phase = Phase::Done;
        self.actions.push_back(Action::Started(Started { announce, ran, upload_bytes, upload_time }));
    }

    fn fail(&mut self, e: BootError) {
        if self.phase != Phase::Done {
            self.phase = Phase::Done;
            self.actions.push_back(Action::Failed(e));
        }
    }
}

impl BootError {
    /// Whether ssh is given a few seconds to end by itself, for its exit status: not when the
    /// remote is past a deadline or the upload went wrong on this side.
    pub fn waits_for_ssh(&self) -> bool {
        !matches!(
            self,
            BootError::Silent { .. }
                | BootError::NoAnnounce { .. }
                | BootError::UploadStalled { .. }
                | BootError::ExecutableChanged { .. }
        )
    }

    /// Whether the request itself cannot be met (a refused upload: exit 2), not the session.
    pub fn is_usage(&self) -> bool {
        matches!(self, BootError::Refused(_))
    }

    /// The message for the user.
    pub fn message(&self, at: &Scene) -> String {
        let host = escape(at.host.as_bytes());
        let began = |b: &Option<String>| b.as_ref().map(|l| format!(" (its output began with \"{l}\")"));
        match self {
            BootError::Silent { after } => format!(
                "the remote side on {host} printed nothing within {t} of starting ssh (--ssh-timeout {t}), so ssh was \
                 stopped: ssh may have been waiting to connect or for an answer at a prompt, or the remote login shell \
                 hung. Try `ssh {login} true` by hand; raise --ssh-timeout for a slow login",
                t = shown(*after),
                login = escape(at.login.as_bytes()),
            ),
            BootError::NoAnnounce { after, began: b } => format!(
                "the remote side on {host} did not announce itself within {t} of starting ssh \
                 (--ssh-start-timeout {t}; an upload's sending not counted){}, so ssh was stopped",
                began(b).unwrap_or_default(),
                t = shown(*after),
            ),
            BootError::Ended { began: Some(line) } => format!(
                "the remote side on {host} did not announce itself (its output began with \"{line}\"); {}",
                status_words(at)
            ),
            BootError::Ended { began: None } => {
                format!("the remote side on {host} ended without announcing itself; {}", status_words(at))
            }
            BootError::Flood { began: b } => format!(
                "the remote side on {host} did not announce itself within the {MAX_PRELUDE_LINES} lines (or {} MiB) it \
                 may print first{}; {}",
                MAX_OUTPUT >> 20,
                began(b).unwrap_or_default(),
                status_words(at)
            ),
            BootError::Announce(e @ AnnounceError::Version { .. }) => format!(
                "{e}: install the same linerate version on both hosts (or name the remote one with --remote-linerate \
                 PATH)"
            ),
            BootError::Announce(e) => {
                format!("the remote linerate on {host} announced nothing usable: {e}; {}", status_words(at))
            }
            BootError::Refused(r) => r.on(&host).to_string(),
            BootError::UploadFailed(why) => format!("the upload of linerate to {host} failed: {why}"),
            BootError::UploadStalled { after } => format!(
                "uploading linerate to {host}: ssh took no byte for {} (--stall-timeout); stopped",
                shown(*after)
            ),
            BootError::ExecutableChanged { sent, size } if sent < size => format!(
                "uploading linerate to {host}: this program's executable is shorter than when it was measured \
                 ({sent} of {size} bytes)"
            ),
            BootError::ExecutableChanged { .. } => format!(
                "uploading linerate to {host}: this program's executable changed while it was sent (its SHA-256 is \
                 not the one announced)"
            ),
        }
    }
}

/// How ssh ended, in words.
pub fn exit_words(status: Option<ExitStatus>) -> String {
    match status.map(|s| (s.code(), s)) {
        Some((Some(c), _)) => format!("ssh exited with status {c}"),
        Some((None, s)) => format!("ssh ended: {s}"),
        None => "ssh did not end and was killed".into(),
    }
}

/// How ssh ended, with what its status usually means here.
fn status_words(at: &Scene) -> String {
    let host = escape(at.host.as_bytes());
    let program = escape(at.given.unwrap_or("linerate").as_bytes());
    match at.status.map(|s| s.code()) {
        Some(Some(255)) => "ssh exited with status 255: the ssh connection failed (see its message above)".into(),
        Some(Some(127)) if at.given.is_some() => format!(
            "ssh exited with status 127: '{program}' was not found on {host}; install linerate there or name it with \
             --remote-linerate PATH"
        ),
        Some(Some(126)) if at.given.is_none() => format!(
            "ssh exited with status 126: the uploaded linerate could not be run on {host} (is the remote user's cache \
             on a file system mounted noexec? Remove it with `linerate cache clean {host}`, or install linerate there \
             and name it with --remote-linerate PATH)"
        ),
        Some(Some(2)) => format!(
            "ssh exited with status 2: the remote '{program}' refused its command line (older than this linerate, \
             without `serve --ssh`?)"
        ),
        _ => exit_words(at.status),
    }
}

/// A duration as the flags take it: `30s`, `1.5s`, `200ms`.
pub fn shown(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else if d.as_millis() < 1000 {
        format!("{}ms", d.as_millis())
    } else {
        format!("{:.3}s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::probe::{Foreign, Mismatch};
    use std::os::unix::process::ExitStatusExt;

    const S: Duration = Duration::from_secs(1);
    const MS: Duration = Duration::from_millis(1);
    const X86: Local = Local { arch: &["x86_64", "amd64"], glibc: Some((2, 34)) };
    const SIZE: u64 = 17_000_000;
    const DIR: &str = "/home/u/.cache/linerate/0.1.0-abcd";

    fn cfg(mode: Mode) -> BootConfig {
        BootConfig { mode, first_line: 30 * S, announce: 120 * S, stall: 300 * S }
    }

    fn offer(upload: Upload) -> Mode {
        Mode::Offer(Offer { name: "0.1.0-abcd".into(), size: SIZE, local: X86, upload })
    }

    /// A scripted remote: the machine, a virtual clock, and what it asked for so far.
    struct Remote {
        m: Bootstrap,
        t0: Instant,
        now: Instant,
    }

    impl Remote {
        fn new(mode: Mode) -> Remote {
            let t0 = Instant::now();
            Remote { m: Bootstrap::new(cfg(mode), t0), t0, now: t0 }
        }

        fn at(&mut self, d: Duration) -> &mut Remote {
            self.now = self.t0 + d;
            self.m.handle_timeout(self.now);
            self
        }

        fn say(&mut self, line: &str) -> &mut Remote {
            self.m.handle_output(format!("{line}\n").as_bytes(), self.now);
            self
        }

        fn actions(&mut self) -> Vec<Action> {
            std::iter::from_fn(|| self.m.poll_action()).collect()
        }

        /// The one action left, which ends the dialogue.
        fn end(&mut self) -> Action {
            let mut a = self.actions();
            assert!(self.m.is_over(), "not over: {a:?}");
            assert_eq!(self.m.poll_timeout(), None, "no deadline once over");
            a.pop().unwrap()
        }

        fn failed(&mut self) -> BootError {
            match self.end() {
                Action::Failed(e) => e,
                a => panic!("not a failure: {a:?}"),
            }
        }

        fn started(&mut self) -> Started {
            match self.end() {
                Action::Started(s) => s,
                a => panic!("not a start: {a:?}"),
            }
        }

        /// A probe the remote can take an upload with, and `more` lines after it.
        fn probe(&mut self, more: &[&str]) -> &mut Remote {
            self.say("LINERATE-PROBE os Linux").say("LINERATE-PROBE arch x86_64").say("LINERATE-PROBE libc glibc 2.36");
            self.say(&format!("LINERATE-PROBE cache {DIR}"));
            for l in more {
                self.say(l);
            }
            self.say("LINERATE-PROBE end")
        }

        /// Probe, hash, send: the upload made, as the adapter would make it.
        fn upload(&mut self, sha: [u8; 32]) -> &mut Remote {
            self.probe(&[]);
            assert_eq!(self.actions(), [Action::Hash { dir: DIR.into(), size: SIZE }]);
            assert_eq!(self.m.poll_timeout(), None, "hashing is this side's time");
            self.m.handle_hashed(sha, self.now);
            let line = format!("UPLOAD {SIZE} {}\n", hex::encode(sha)).into_bytes();
            assert_eq!(self.actions(), [Action::Write(line), Action::Send { size: SIZE }]);
            self
        }
    }

    fn announce_line() -> String {
        let a = announce();
        a.line()
    }

    fn announce() -> Announce {
        Announce {
            version: linerate_proto::PROTOCOL_VERSION,
            port: 40123,
            secret: linerate_net::auth::secret::Secret([0xab; 32]),
            addr: None,
            software: Some("0.1.0".into()),
        }
    }

    fn scene(status: Option<i32>) -> Scene<'static> {
        Scene { host: "lab", login: "me@lab", given: None, status: status.map(|c| ExitStatus::from_raw(c << 8)) }
    }

    #[test]
    fn a_given_linerate_announces_itself_after_a_banner() {
        let mut r = Remote::new(Mode::Given);
        assert_eq!(r.m.poll_timeout(), Some(r.t0 + 30 * S), "the first line's deadline first");
        r.at(2 * S).say("Welcome to the lab");
        assert_eq!(r.m.poll_timeout(), Some(r.t0 + 120 * S), "then the announce line's");
        let s = r.at(3 * S).say(&announce_line()).started();
        assert_eq!(
            s,
            Started { announce: announce(), ran: RemoteLinerate::Given, upload_bytes: 0, upload_time: Duration::ZERO }
        );
    }

    #[test]
    fn a_cached_or_installed_linerate_runs_without_a_probe() {
        for (run, ran) in [
            ("LINERATE-PROBE run cache", RemoteLinerate::Cache),
            ("LINERATE-PROBE run path /usr/bin/linerate", RemoteLinerate::Path),
        ] {
            let mut r = Remote::new(offer(Upload::Allowed));
            let s = r.say(run).say(&announce_line()).started();
            assert_eq!((s.ran, s.upload_bytes), (ran, 0));
        }
    }

    #[test]
    fn an_upload_is_hashed_sent_checked_there_and_then_announced() {
        let mut r = Remote::new(offer(Upload::Allowed));
        let sha = [7; 32];
        r.at(S).upload(sha);
        // The stall bound runs from the line, and moves with every byte taken.
        r.at(2 * S);
        assert_eq!(r.m.poll_timeout(), Some(r.t0 + S + 300 * S));
        r.m.handle_sent(1 << 20, r.t0 + 100 * S);
        assert_eq!(r.m.poll_timeout(), Some(r.t0 + 400 * S));
        r.m.handle_sent(1 << 20, r.t0 + 200 * S);
        assert_eq!(r.m.poll_timeout(), Some(r.t0 + 400 * S), "no new byte, no progress");
        r.m.handle_sent_all(SIZE, sha, r.t0 + 300 * S);
        // 299 s of upload are not the start-up's: the announce is due at 120 + 299 s.
        assert_eq!(r.m.poll_timeout(), Some(r.t0 + 419 * S));
        r.at(418 * S).say("LINERATE-PROBE run uploaded");
        let s = r.say(&announce_line()).started();
        assert_eq!(s.ran, RemoteLinerate::Uploaded);
        assert_eq!((s.upload_bytes, s.upload_time), (SIZE, 417 * S));
    }

    #[test]
    fn an_announce_read_before_the_sending_is_done_counts_once_it_is() {
        let mut r = Remote::new(offer(Upload::Allowed));
        r.upload([1; 32]).say("LINERATE-PROBE run uploaded").say(&announce_line());
        assert!(r.actions().is_empty() && !r.m.is_over());
        r.m.handle_sent_all(SIZE, [1; 32], r.now);
        assert_eq!(r.started().ran, RemoteLinerate::Uploaded);
    }

    #[test]
    fn a_foreign_architecture_is_answered_quit_and_refused() {
        let mut r = Remote::new(offer(Upload::Allowed));
        r.say("LINERATE-PROBE os Linux").say("LINERATE-PROBE arch aarch64").say("LINERATE-PROBE libc glibc 2.36");
        r.say("LINERATE-PROBE end");
        let a = r.actions();
        assert_eq!(a[0], Action::Write(b"QUIT\n".to_vec()));
        let Action::Failed(e @ BootError::Refused(Refusal::Foreign(f))) = &a[1] else { panic!("{a:?}") };
        assert_eq!(f.mismatch, Mismatch::Architecture);
        assert!(e.is_usage() && e.waits_for_ssh());
        let m = e.message(&scene(None));
        assert!(
            m.starts_with("lab runs Linux aarch64 with glibc 2.36, and this linerate is built for Linux x86_64"),
            "{m}"
        );
    }

    #[test]
    fn an_old_glibc_is_refused() {
        let mut r = Remote::new(offer(Upload::Allowed));
        r.say("LINERATE-PROBE os Linux").say("LINERATE-PROBE arch x86_64").say("LINERATE-PROBE libc glibc 2.17");
        let e = r.say("LINERATE-PROBE end").failed();
        let BootError::Refused(Refusal::Foreign(f)) = &e else { panic!("{e:?}") };
        assert_eq!(
            **f,
            Foreign {
                mismatch: Mismatch::Libc,
                os: "Linux".into(),
                arch: "x86_64".into(),
                libc: "glibc 2.17".into(),
                local: X86,
                found: None,
            }
        );
    }

    #[test]
    fn a_cache_directory_others_may_write_is_refused() {
        let mut r = Remote::new(offer(Upload::Allowed));
        r.probe(&["LINERATE-PROBE unsafe /home/u/.cache is writable by others"]);
        let e = r.failed();
        assert_eq!(e, BootError::Refused(Refusal::UnsafeCache { why: "/home/u/.cache is writable by others".into() }));
        assert!(e
            .message(&scene(None))
            .starts_with("will not upload linerate to lab: /home/u/.cache is writable by others."));
    }

    #[test]
    fn no_upload_refuses_and_names_the_switch() {
        let mut r = Remote::new(offer(Upload::RefusedByFlag));
        let e = r.probe(&[]).failed();
        assert!(matches!(e, BootError::Refused(Refusal::NotAllowed { by: Upload::RefusedByFlag, .. })), "{e:?}");
        assert!(e
            .message(&scene(None))
            .contains("lab has no usable linerate, and --no-upload refuses to send this one"));
    }

    #[test]
    fn a_sha256_mismatch_there_fails_the_upload() {
        let mut r = Remote::new(offer(Upload::Allowed));
        r.upload([2; 32]);
        r.m.handle_sent_all(SIZE, [2; 32], r.now);
        let e = r.say("LINERATE-PROBE fail the upload does not match its SHA-256").failed();
        assert_eq!(e, BootError::UploadFailed(UploadFailure::Sha256Mismatch));
        assert_eq!(
            e.message(&scene(Some(1))),
            "the upload of linerate to lab failed: the upload does not match its SHA-256"
        );
        // Any other reason is quoted as said; a probe ended again has none.
        let mut r = Remote::new(offer(Upload::Allowed));
        r.upload([2; 32]);
        let e = r.say("LINERATE-PROBE fail could not create /x").failed();
        assert_eq!(e, BootError::UploadFailed(UploadFailure::Said("could not create /x".into())));
        let mut r = Remote::new(offer(Upload::Allowed));
        r.upload([2; 32]);
        r.m.handle_sent_all(SIZE, [2; 32], r.now);
        assert_eq!(r.probe(&[]).failed(), BootError::UploadFailed(UploadFailure::Ended));
    }

    #[test]
    fn an_executable_that_changed_while_it_was_sent_is_not_announced_as_whole() {
        let mut r = Remote::new(offer(Upload::Allowed));
        r.upload([3; 32]);
        r.m.handle_sent_all(SIZE - 1, [3; 32], r.now);
        let e = r.failed();
        assert_eq!(e, BootError::ExecutableChanged { sent: SIZE - 1, size: SIZE });
        assert!(e.message(&scene(None)).contains("shorter than when it was measured (16999999 of 17000000 bytes)"));
        let mut r = Remote::new(offer(Upload::Allowed));
        r.upload([3; 32]);
        r.m.handle_sent_all(SIZE, [4; 32], r.now);
        assert_eq!(r.failed(), BootError::ExecutableChanged { sent: SIZE, size: SIZE });
    }

    #[test]
    fn a_remote_that_never_answers_fails_at_the_first_lines_deadline_and_not_before() {
        let mut r = Remote::new(offer(Upload::Allowed));
        r.at(30 * S - MS);
        assert!(r.actions().is_empty());
        // A line without its end is no line.
        r.m.handle_output(b"Password: ", r.now);
        let e = r.at(30 * S).failed();
        assert_eq!(e, BootError::Silent { after: 30 * S });
        assert!(!e.waits_for_ssh(), "a remote past its deadline is not given more time");
        let m = e.message(&scene(None));
        assert!(m.contains("on lab printed nothing within 30s of starting ssh (--ssh-timeout 30s)"), "{m}");
        assert!(m.contains("Try `ssh me@lab true` by hand"), "{m}");
    }

    #[test]
    fn a_remote_that_never_announces_itself_fails_at_the_start_up_deadline() {
        let mut r = Remote::new(Mode::Given);
        r.at(S).say("Welcome to the lab").say("Last login: yesterday");
        r.at(120 * S - MS);
        assert!(r.actions().is_empty());
        let e = r.at(120 * S).failed();
        assert_eq!(e, BootError::NoAnnounce { after: 120 * S, began: Some("Welcome to the lab".into()) });
        assert!(e.message(&scene(None)).contains(
            "did not announce itself within 120s of starting ssh (--ssh-start-timeout 120s; an upload's sending not \
             counted) (its output began with \"Welcome to the lab\"), so ssh was stopped"
        ));
        // A start-up deadline shorter than the first line's is the one that counts.
        let mut r = Remote::new(Mode::Given);
        r.m = Bootstrap::new(BootConfig { announce: 10 * S, ..cfg(Mode::Given) }, r.t0);
        assert_eq!(r.at(10 * S).failed(), BootError::NoAnnounce { after: 10 * S, began: None });
    }

    #[test]
    fn an_upload_ssh_stops_taking_fails_at_the_stall_bound() {
        let mut r = Remote::new(offer(Upload::Allowed));
        r.upload([5; 32]);
        r.m.handle_sent(4096, r.t0 + 10 * S);
        r.at(310 * S - MS);
        assert!(r.actions().is_empty(), "the start-up deadline does not run while sending");
        let e = r.at(310 * S).failed();
        assert_eq!(e, BootError::UploadStalled { after: 300 * S });
        assert_eq!(
            e.message(&scene(None)),
            "uploading linerate to lab: ssh took no byte for 300s (--stall-timeout); stopped"
        );
    }

    #[test]
    fn a_flood_of_lines_ends_at_the_cap_without_holding_more_than_a_line() {
        let mut r = Remote::new(Mode::Given);
        for i in 0..MAX_PRELUDE_LINES - 1 {
            r.say(&format!("banner {i}"));
        }
        assert!(!r.m.is_over(), "63 lines of banner are a banner");
        let e = r.say("one more").failed();
        assert_eq!(e, BootError::Flood { began: Some("banner 0".into()) });
        let m = e.message(&scene(None));
        assert!(m.contains("within the 64 lines (or 1 MiB)") && m.contains("ssh did not end and was killed"), "{m}");
        // One endless line is read as lines of MAX_LINE bytes, never held whole.
        let mut r = Remote::new(Mode::Given);
        let chunk = vec![b'x'; 10_000];
        for _ in 0..100 {
            r.m.handle_output(&chunk, r.now);
            assert!(r.m.partial.len() < MAX_LINE);
        }
        let Action::Failed(BootError::Flood { began: Some(b) }) = r.end() else { panic!() };
        assert_eq!(b.len(), QUOTED);
        // Run lines start a new batch each, but not a new byte budget.
        let mut r = Remote::new(offer(Upload::Allowed));
        let mut n = 0u64;
        while !r.m.is_over() {
            r.say("LINERATE-PROBE run cache");
            n += 1;
        }
        assert!(n * 25 >= MAX_OUTPUT && n * 25 < MAX_OUTPUT + 100, "{n}");
        assert!(matches!(r.failed(), BootError::Flood { .. }));
    }

    #[test]
    fn output_that_ends_first_is_reported_with_the_first_other_line_and_sshs_status() {
        let mut r = Remote::new(Mode::Given);
        r.say("Welcome to the lab");
        // A last line without its newline is still read.
        r.m.handle_output(b"bye", r.now);
        r.m.handle_eof(r.now);
        let e = r.failed();
        assert_eq!(e, BootError::Ended { began: Some("Welcome to the lab".into()) });
        assert!(e.waits_for_ssh(), "ssh's exit status is worth a few seconds");
        assert_eq!(
            e.message(&scene(Some(7))),
            "the remote side on lab did not announce itself (its output began with \"Welcome to the lab\"); ssh exited \
             with status 7"
        );
        let mut r = Remote::new(Mode::Given);
        r.m.handle_output(announce_line().as_bytes(), r.now);
        r.m.handle_eof(r.now);
        assert_eq!(r.started().announce, announce(), "an announce line cut short of its newline counts");
        // What ssh's status usually means is said.
        let e = BootError::Ended { began: None };
        assert!(e
            .message(&scene(Some(255)))
            .ends_with("status 255: the ssh connection failed (see its message above)"));
        let given = Scene { given: Some("/opt/lr"), ..scene(Some(127)) };
        assert!(e.message(&given).contains("'/opt/lr' was not found on lab"));
        assert!(e.message(&scene(Some(126))).contains("mounted noexec"));
        assert!(e.message(&scene(Some(2))).contains("refused its command line"));
    }

    #[test]
    fn announce_lines_of_another_version_or_malformed_end_the_dialogue() {
        let mut r = Remote::new(Mode::Given);
        let e = r.say(&format!("LINERATE 999 PORT 1 SECRET {} SOFTWARE 9.9.9", "ab".repeat(32))).failed();
        let m = e.message(&scene(None));
        assert!(m.contains("protocol version 999 (linerate 9.9.9)") && m.contains("install the same linerate version"));
        let mut r = Remote::new(Mode::Given);
        let v = linerate_proto::PROTOCOL_VERSION;
        let e = r.say(&format!("LINERATE {v} PORT 9 SECRET ab")).failed();
        assert_eq!(e, BootError::Announce(AnnounceError::Malformed("SECRET is not 64 hex digits")));
        assert!(e.message(&scene(Some(0))).starts_with("the remote linerate on lab announced nothing usable:"));
    }

    #[test]
    fn the_remotes_bytes_are_escaped_and_a_secret_is_never_quoted() {
        let mut r = Remote::new(Mode::Given);
        r.m.handle_output(b"LINERATE x SECRET 0123\n", r.now);
        r.m.handle_output(b"hi \xff\xfe \x1b[31mred\r\n", r.now);
        r.m.handle_eof(r.now);
        let BootError::Ended { began: Some(b) } = r.failed() else { panic!() };
        assert_eq!(b, r"hi \xff\xfe \x1b[31mred");
        let mut r = Remote::new(Mode::Given);
        r.m.handle_output(
            format!("LINERATE 999 PORT 1 SECRET {} SOFTWARE \x1b]0;x\n", "ab".repeat(32)).as_bytes(),
            r.now,
        );
        assert!(r.failed().message(&scene(None)).contains(r"(linerate \x1b]0;x)"));
    }

    #[test]
    fn a_given_linerate_that_prints_probe_lines_is_not_probed() {
        // Probe lines from a program named by --remote-linerate are other lines, and no upload.
        let mut r = Remote::new(Mode::Given);
        r.probe(&[]).say("LINERATE-PROBE run cache");
        assert!(r.actions().is_empty());
        let s = r.say(&announce_line()).started();
        assert_eq!(s.ran, RemoteLinerate::Given);
    }

    #[test]
    fn lines_may_arrive_a_byte_at_a_time() {
        let mut r = Remote::new(offer(Upload::Allowed));
        let all = format!("LINERATE-PROBE run cache\n{}\n", announce_line());
        for b in all.as_bytes() {
            r.m.handle_output(std::slice::from_ref(b), r.now);
        }
        assert_eq!(r.started().ran, RemoteLinerate::Cache);
    }

    #[test]
    fn nothing_is_done_after_the_end() {
        let mut r = Remote::new(Mode::Given);
        r.say(&announce_line());
        assert!(matches!(r.end(), Action::Started(_)));
        r.say("LINERATE-PROBE end").at(1000 * S);
        r.m.handle_eof(r.now);
        r.m.handle_hashed([0; 32], r.now);
        r.m.handle_sent_all(1, [0; 32], r.now);
        assert!(r.actions().is_empty());
    }
}
