//! The `remote_bootstrap` target's operation language and checks: the ssh start-up dialogue
//! (`linerate_remote::Bootstrap`) fed a remote's output — raw bytes, or lines of the boot
//! script's and the server's own vocabulary, valid and mangled, split anywhere — the clock, and
//! an upload's progress, under each mode and upload policy.
//!
//! Checked at every step: no panic; one terminal action (`Started` or `Failed`) and nothing
//! after it; `handle_timeout` ends the dialogue exactly when `poll_timeout` has passed; the only
//! lines written are one `UPLOAD <size> <sha256>` (after one `Hash`, in the offer mode) or a
//! `QUIT` just before a refusal; a start reports no more bytes than the executable's and
//! `given` in the given mode; no more than `MAX_OUTPUT` bytes of output are ever taken in.

use arbitrary::Arbitrary;
use linerate_model::doc::cp::RemoteLinerate;
use linerate_remote::bootstrap::{Action, BootConfig, BootError, Bootstrap, Mode, Offer, MAX_OUTPUT};
use linerate_remote::probe::{Local, Refusal, Upload};
use std::time::{Duration, Instant};

/// The executable's size in the offer mode.
pub const SIZE: u64 = 1 << 20;

/// One step.
#[derive(Arbitrary, Debug, Clone)]
pub enum Op {
    /// Raw bytes from the remote.
    Bytes(Vec<u8>),
    /// A line of the vocabulary, split in two at `split` (modulo its length).
    Line(Line, u16),
    /// The remote's output ends.
    Eof,
    /// Time passes (ms), then the deadline is checked.
    Advance(u32),
    /// Jump to the machine's own deadline (and a little past it).
    ToDeadline(u8),
    /// The executable's hash (`same`: the one later sent).
    Hashed(bool),
    /// Bytes of the upload taken so far.
    Sent(u32),
    /// The upload's end: all bytes or `short` fewer, with the hash announced or another.
    SentAll { short: u16, other_hash: bool },
}

/// A line the remote might print.
#[derive(Arbitrary, Debug, Clone)]
pub enum Line {
    /// `LINERATE-PROBE <key> <value>` with a known key.
    Probe(ProbeKey, String),
    /// `LINERATE-PROBE run cache|path X|uploaded|other`.
    Run(u8),
    /// The probe of a host this build runs on, whole.
    GoodProbe,
    /// An announce line of this version (valid or with a field mangled).
    Announce(u8, u16),
    /// An announce line of another version.
    OtherVersion(u16, String),
    /// Anything.
    Other(String),
}

/// The keys of a probe line.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum ProbeKey {
    /// `os`
    Os,
    /// `arch`
    Arch,
    /// `libc`
    Libc,
    /// `found`
    Found,
    /// `cache`
    Cache,
    /// `unsafe`
    Unsafe,
    /// `nosum`
    Nosum,
    /// `end`
    End,
    /// `fail`
    Fail,
}

/// A whole input: the mode, the policy, the deadlines (seconds) and the steps.
#[derive(Arbitrary, Debug, Clone)]
pub struct Ops {
    /// `--remote-linerate` (no probe, no upload).
    pub given: bool,
    /// 0 allowed, 1 `--no-upload`, else `LINERATE_NO_UPLOAD`.
    pub upload: u8,
    /// `--ssh-timeout`, `--ssh-start-timeout`, `--stall-timeout`, in seconds (1 to 256).
    pub deadlines: (u8, u8, u8),
    /// The steps.
    pub ops: Vec<Op>,
}

const X86: Local = Local { arch: &["x86_64", "amd64"], glibc: Some((2, 34)) };

fn bytes_of(line: &Line) -> Vec<u8> {
    let v = linerate_proto::PROTOCOL_VERSION;
    let s = match line {
        Line::Probe(k, value) => {
            let key = match k {
                ProbeKey::Os => "os",
                ProbeKey::Arch => "arch",
                ProbeKey::Libc => "libc",
                ProbeKey::Found => "found",
                ProbeKey::Cache => "cache",
                ProbeKey::Unsafe => "unsafe",
                ProbeKey::Nosum => "nosum",
                ProbeKey::End => "end",
                ProbeKey::Fail => "fail",
            };
            format!("LINERATE-PROBE {key} {value}\n")
        }
        Line::Run(n) => match n % 4 {
            0 => "LINERATE-PROBE run cache\n".into(),
            1 => "LINERATE-PROBE run path /usr/bin/linerate\n".into(),
            2 => "LINERATE-PROBE run uploaded\n".into(),
            _ => "LINERATE-PROBE run\n".into(),
        },
        Line::GoodProbe => "LINERATE-PROBE os Linux\nLINERATE-PROBE arch x86_64\nLINERATE-PROBE libc glibc 2.36\n\
                            LINERATE-PROBE cache /c/linerate/x\nLINERATE-PROBE end\n"
            .into(),
        Line::Announce(mangle, port) => {
            let key = "ab".repeat(32);
            match mangle % 6 {
                0 | 1 => format!("LINERATE {v} PORT {} SECRET {key} SOFTWARE 0.1.0\n", port.max(&1)),
                2 => format!("LINERATE {v} PORT {port} SECRET {}\n", &key[..63]),
                3 => format!("LINERATE {v} SECRET {key}\n"),
                4 => format!("LINERATE {v} PORT {port} SECRET {key} ADDR nowhere\n"),
                _ => format!("LINERATE {v} PORT 1 SECRET {key} ADDR 198.18.0.2 FUTURE x\n"),
            }
        }
        Line::OtherVersion(n, software) => {
            format!("LINERATE {} PORT 1 SECRET {} SOFTWARE {software}\n", n.wrapping_add(v + 1), "ab".repeat(32))
        }
        Line::Other(s) => format!("{s}\n"),
    };
    s.into_bytes()
}

/// What the harness has seen of the machine.
struct Seen {
    over: bool,
    hashes: usize,
    uploads: usize,
    sending: bool,
    fed: u64,
}

/// Run one input; panics on a broken rule.
pub fn run(input: &Ops) {
    let t0 = Instant::now();
    let s = |n: u8| Duration::from_secs(u64::from(n) + 1);
    let upload = match input.upload {
        0 => Upload::Allowed,
        1 => Upload::RefusedByFlag,
        _ => Upload::RefusedByEnv,
    };
    let mode = if input.given {
        Mode::Given
    } else {
        Mode::Offer(Offer { name: "0.1.0-abcd".into(), size: SIZE, local: X86, upload })
    };
    let cfg = BootConfig {
        mode: mode.clone(),
        first_line: s(input.deadlines.0),
        announce: s(input.deadlines.1),
        stall: s(input.deadlines.2),
    };
    let mut m = Bootstrap::new(cfg, t0);
    let mut now = t0;
    let mut seen = Seen { over: false, hashes: 0, uploads: 0, sending: false, fed: 0 };
    let mut sha = [0u8; 32];
    for op in input.ops.iter().take(512) {
        match op {
            Op::Bytes(b) => {
                seen.fed += b.len() as u64;
                m.handle_output(b, now);
            }
            Op::Line(l, split) => {
                let b = bytes_of(l);
                let at = usize::from(*split) % (b.len() + 1);
                seen.fed += b.len() as u64;
                m.handle_output(&b[..at], now);
                m.handle_output(&b[at..], now);
            }
            Op::Eof => {
                m.handle_eof(now);
                assert!(m.is_over(), "output ended and the dialogue goes on");
            }
            Op::Advance(ms) => {
                now += Duration::from_millis(u64::from(*ms % 600_000));
                let due = m.poll_timeout();
                m.handle_timeout(now);
                if due.is_some_and(|t| t <= now) {
                    assert!(m.is_over(), "a deadline passed and the dialogue goes on");
                } else {
                    assert_eq!(m.is_over(), seen.over, "a timeout before the deadline changed something");
                }
            }
            Op::ToDeadline(extra) => {
                if let Some(t) = m.poll_timeout() {
                    assert!(t >= now || seen.over, "a deadline in the past was not acted on");
                    now = now.max(t) + Duration::from_millis(u64::from(*extra));
                    m.handle_timeout(now);
                    assert!(m.is_over(), "its own deadline did not end it");
                }
            }
            Op::Hashed(same) => {
                sha = if *same { [7; 32] } else { [8; 32] };
                m.handle_hashed(sha, now);
            }
            Op::Sent(n) => m.handle_sent(u64::from(*n).min(SIZE), now),
            Op::SentAll { short, other_hash } => {
                let sent_sha = if *other_hash { [9; 32] } else { sha };
                m.handle_sent_all(SIZE - u64::from(*short).min(SIZE), sent_sha, now);
            }
        }
        if seen.fed > MAX_OUTPUT + 2 * linerate_remote::bootstrap::MAX_LINE as u64 {
            assert!(m.is_over(), "{} bytes of output taken in", seen.fed);
        }
        check_actions(&mut m, &mode, &mut seen);
    }
}

fn check_actions(m: &mut Bootstrap, mode: &Mode, seen: &mut Seen) {
    let mut quit = false;
    while let Some(a) = m.poll_action() {
        assert!(!seen.over, "an action after the end: {a:?}");
        match a {
            Action::Write(line) if line == b"QUIT\n" => quit = true,
            Action::Write(line) => {
                let text = String::from_utf8(line).expect("a line of text");
                assert!(text.starts_with(&format!("UPLOAD {SIZE} ")) && text.ends_with('\n'), "{text:?}");
                assert_eq!(seen.hashes, 1, "an upload line without a hash");
                seen.uploads += 1;
                assert_eq!(seen.uploads, 1, "two upload lines");
            }
            Action::Hash { size, .. } => {
                assert!(matches!(mode, Mode::Offer(o) if o.upload == Upload::Allowed), "a hash in {mode:?}");
                assert_eq!(size, SIZE);
                seen.hashes += 1;
                assert_eq!(seen.hashes, 1, "two hashes");
            }
            Action::Send { size } => {
                assert_eq!((size, seen.uploads), (SIZE, 1), "bytes sent without their line");
                seen.sending = true;
            }
            Action::Started(s) => {
                assert!(!quit);
                assert!(s.upload_bytes <= SIZE);
                if matches!(mode, Mode::Given) {
                    assert_eq!((s.ran, s.upload_bytes), (RemoteLinerate::Given, 0));
                }
                if s.upload_bytes > 0 {
                    assert_eq!(s.upload_bytes, SIZE, "started with a part of the executable");
                }
                seen.over = true;
            }
            Action::Failed(e) => {
                assert_eq!(quit, matches!(e, BootError::Refused(_)), "QUIT goes with a refusal alone: {e:?}");
                if let BootError::Refused(Refusal::NotAllowed { by, .. }) = &e {
                    assert!(matches!(mode, Mode::Offer(o) if o.upload == *by));
                }
                // Every error can be told to the user.
                let scene = linerate_remote::bootstrap::Scene { host: "h", login: "h", given: None, status: None };
                assert!(!e.message(&scene).is_empty());
                seen.over = true;
            }
        }
    }
    assert_eq!(m.is_over(), seen.over, "over without saying so, or the other way round");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upload_then_a_start_runs_the_checks() {
        let ops = Ops {
            given: false,
            upload: 0,
            deadlines: (10, 100, 10),
            ops: vec![
                Op::Line(Line::Other("Welcome".into()), 3),
                Op::Line(Line::GoodProbe, 30),
                Op::Hashed(true),
                Op::Sent(1000),
                Op::Advance(5000),
                Op::SentAll { short: 0, other_hash: false },
                Op::Line(Line::Run(2), 5),
                Op::Line(Line::Announce(0, 4000), 9),
                Op::Eof,
                Op::ToDeadline(1),
            ],
        };
        run(&ops);
    }

    #[test]
    fn random_inputs_keep_the_rules() {
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..2000 {
            let bytes: Vec<u8> = (0..512)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            if let Ok(ops) = Ops::arbitrary(&mut arbitrary::Unstructured::new(&bytes)) {
                run(&ops);
            }
        }
    }
}
