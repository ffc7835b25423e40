//! Issue 14: every flag that takes a rate or a size reads the same grammar
//! (`linerate_model::units`); issue 44: so does every flag that takes a duration (a bare number
//! is seconds: `--timeout 15` is 15 s, `--timeout 1m` a minute). One table of flags, one list of
//! forms: each flag is parsed by clap exactly as the binary parses it, and must give each form's
//! value, or refuse it when the flag's own range check (a chunk size's power of two, a limit's
//! floor, 32 bits, a timeout above zero) rules it out.

use super::{Cli, Cmd};
use clap::Parser;

/// The parsed arguments of a command line, as their `Debug` text, or clap's error.
fn parsed(args: &[String]) -> Result<String, String> {
    let cli = Cli::try_parse_from(std::iter::once("linerate".to_string()).chain(args.iter().cloned()))
        .map_err(|e| e.to_string())?;
    Ok(match cli.cmd {
        Cmd::Cp(a) => format!("{a:?}"),
        Cmd::Serve(a) => format!("{a:?}"),
        Cmd::Bench(a) => format!("{a:?}"),
        Cmd::Demo(a) => format!("{a:?}"),
        Cmd::Mktree(a) => format!("{a:?}"),
        Cmd::Clean(a) => format!("{a:?}"),
        Cmd::Doctor(a) => format!("{a:?}"),
        _ => panic!("not a command with rate, size or duration flags"),
    })
}

/// Whether a flag reads a rate (bit/s), a size (bytes) or a duration (nanoseconds here).
#[derive(Clone, Copy)]
enum Kind {
    Rate,
    Size,
    Duration,
}

/// What a grammar value becomes under a flag's own range check, or `None` when it refuses it.
type Check = fn(&str, u64) -> Option<u64>;

fn any(_: &str, v: u64) -> Option<u64> {
    Some(v)
}
fn limit(_: &str, v: u64) -> Option<u64> {
    (v >= 100_000).then_some(v)
}
fn u32_size(_: &str, v: u64) -> Option<u64> {
    u32::try_from(v).is_ok().then_some(v)
}
fn chunk(_: &str, v: u64) -> Option<u64> {
    (v.is_power_of_two() && (64 << 10..=8 << 20).contains(&v)).then_some(v)
}
/// Whether `form` is a bare number (no unit).
fn bare(form: &str) -> bool {
    form.trim().ends_with(|c: char| c.is_ascii_digit() || c == '.')
}
fn mib_when_bare(form: &str, v: u64) -> Option<u64> {
    Some(if bare(form) { v << 20 } else { v })
}
fn above_zero(_: &str, v: u64) -> Option<u64> {
    (v > 0).then_some(v)
}
/// `doctor --rtt`: a unit is required, 1us to 60s.
fn rtt(form: &str, v: u64) -> Option<u64> {
    (!bare(form) && (1_000..=60_000_000_000).contains(&v)).then_some(v)
}

/// Every flag that takes a rate or a size: the command line around it, the flag (its field is
/// its name with `_` for `-`), what it reads and its range check.
const FLAGS: &[(&[&str], &str, Kind, Check)] = &[
    (&["cp", "a", "b"], "--bwlimit", Kind::Rate, limit),
    (&["cp", "a", "b"], "--chunk-size", Kind::Size, chunk),
    (&["serve", "--key-file", "k"], "--max-rate", Kind::Rate, any),
    (&["serve", "--key-file", "k"], "--max-rate-per-client", Kind::Rate, limit),
    (&["serve", "--key-file", "k"], "--max-rate-total", Kind::Rate, limit),
    (&["serve", "--key-file", "k"], "--max-buffer-memory", Kind::Size, mib_when_bare),
    (&["bench", "h"], "--rate", Kind::Rate, any),
    (&["bench", "h"], "--link-rate", Kind::Rate, any),
    (&["bench", "h"], "--length", Kind::Size, u32_size),
    (&["bench", "h"], "--response", Kind::Size, u32_size),
    (&["bench", "h"], "--window", Kind::Size, u32_size),
    (&["bench", "h"], "--sndbuf", Kind::Size, u32_size),
    (&["bench", "h"], "--rcvbuf", Kind::Size, u32_size),
    (&["demo"], "--mean-size", Kind::Size, any),
    (&["mktree", "d"], "--mean-size", Kind::Size, any),
    (&["mktree", "d", "--max-size", "1"], "--min-size", Kind::Size, any),
    (&["mktree", "d", "--min-size", "1"], "--max-size", Kind::Size, any),
    (&["cp", "a", "b"], "--timeout", Kind::Duration, any),
    (&["cp", "a", "b"], "--stall-timeout", Kind::Duration, any),
    (&["cp", "a", "b"], "--ssh-timeout", Kind::Duration, above_zero),
    (&["cp", "a", "b"], "--ssh-start-timeout", Kind::Duration, above_zero),
    (&["serve", "--key-file", "k"], "--max-duration", Kind::Duration, any),
    (&["serve", "--key-file", "k"], "--handshake-timeout", Kind::Duration, any),
    (&["serve", "--key-file", "k"], "--shutdown-grace", Kind::Duration, any),
    (&["serve", "--key-file", "k"], "--idle-timeout", Kind::Duration, any),
    (&["serve", "--key-file", "k"], "--connect-deadline", Kind::Duration, any),
    (&["bench", "h"], "--time", Kind::Duration, any),
    (&["bench", "h"], "--omit", Kind::Duration, any),
    (&["bench", "h"], "--interval", Kind::Duration, any),
    (&["bench", "h"], "--timeout", Kind::Duration, any),
    (&["clean", "d"], "--older-than", Kind::Duration, any),
    (&["doctor"], "--rtt", Kind::Duration, rtt),
];

/// Rates every rate flag reads, in bit/s.
const RATES: &[(&str, u64)] = &[
    ("50MB/s", 400_000_000),
    ("50MiB/s", 419_430_400),
    ("400M", 400_000_000),
    ("400m", 400_000_000),
    ("1gbit", 1_000_000_000),
    ("100mbit", 100_000_000),
    ("8kbit", 8_000),
    ("2.5Gbit/s", 2_500_000_000),
    ("1.5G", 1_500_000_000),
    ("10G", 10_000_000_000),
    ("800kbps", 800_000),
    ("10Gbps", 10_000_000_000),
    ("100Mb/s", 100_000_000),
    ("1 Gbit/s", 1_000_000_000),
    ("125000B/s", 1_000_000),
    ("250000000", 250_000_000),
];

/// Sizes every size flag reads, in bytes.
const SIZES: &[(&str, u64)] = &[
    ("64KiB", 65_536),
    ("64K", 65_536),
    ("64k", 65_536),
    ("64Ki", 65_536),
    ("65536", 65_536),
    ("64kB", 64_000),
    ("1MiB", 1 << 20),
    ("1M", 1 << 20),
    ("1MB", 1_000_000),
    ("1.5M", 1_572_864),
    ("8 MiB", 8 << 20),
    ("2GiB", 2 << 30),
    ("8G", 8 << 30),
    ("1000", 1000),
];

/// Durations every duration flag reads, in nanoseconds; a bare number is seconds.
const DURATIONS: &[(&str, u64)] = &[
    ("15", 15_000_000_000),
    ("0", 0),
    ("0.5", 500_000_000),
    ("1m", 60_000_000_000),
    ("10 min", 600_000_000_000),
    ("90s", 90_000_000_000),
    ("1.5s", 1_500_000_000),
    ("250ms", 250_000_000),
    ("500us", 500_000),
    ("2h", 7_200_000_000_000),
    ("1d", 86_400_000_000_000),
];

/// Refused by every rate flag.
const BAD_RATES: &[&str] = &["", "fast", "-1M", "0", "10X", "1e9", "1.2.3G", "1Gbps/s", "50iB/s"];

/// Refused by every size flag.
const BAD_SIZES: &[&str] = &["", "big", "-64K", "1.5", "0.1K", "64Kb", "64kb", "50MB/s", "1P", "1e6"];

/// Refused by every duration flag.
const BAD_DURATIONS: &[&str] = &["", "soon", "-1s", "1e3", "5M", "15 sec", "1.2.3s", "2 fortnights"];

fn line(cmd: &[&str], flag: &str, value: &str) -> Vec<String> {
    cmd.iter().map(|s| s.to_string()).chain([format!("{flag}={value}")]).collect()
}

/// The `Debug` text of a flag's value: a duration as `std::time::Duration` shows it.
fn shown(kind: Kind, v: u64) -> String {
    match kind {
        Kind::Duration => format!("{:?}", std::time::Duration::from_nanos(v)),
        Kind::Rate | Kind::Size => v.to_string(),
    }
}

#[test]
fn every_rate_size_and_duration_flag_reads_the_one_grammar() {
    let mut checked = 0;
    for &(cmd, flag, kind, check) in FLAGS {
        let field = flag.trim_start_matches('-').replace('-', "_");
        let (forms, bad, hint) = match kind {
            Kind::Rate => (RATES, BAD_RATES, "50MB/s"),
            Kind::Size => (SIZES, BAD_SIZES, "64KiB"),
            Kind::Duration => (DURATIONS, BAD_DURATIONS, "10m"),
        };
        for &(form, value) in forms {
            let got = parsed(&line(cmd, flag, form));
            match check(form, value) {
                Some(want) => {
                    let want = shown(kind, want);
                    let text = got.unwrap_or_else(|e| panic!("{flag} {form:?} refused: {e}"));
                    let found = [
                        format!(" {field}: Some({want})"),
                        format!(" {field}: {want},"),
                        format!(" {field}: {want} }}"),
                    ];
                    assert!(found.iter().any(|f| text.contains(f)), "{flag} {form:?}: want {want} in {text}");
                }
                None => {
                    let e = got.expect_err(&format!("{flag} {form:?} accepted, outside its range"));
                    assert!(e.contains(flag), "{flag} {form:?}: {e}");
                }
            }
            checked += 1;
        }
        for form in bad {
            if (cmd[0], flag, *form) == ("bench", "--rate", "0") {
                // bench's -b 0 is unpaced, as iperf3's.
                let text = parsed(&line(cmd, flag, form)).unwrap_or_else(|e| panic!("bench -b 0 refused: {e}"));
                assert!(text.contains(" rate: Some(0)"), "{text}");
                checked += 1;
                continue;
            }
            if (flag, *form) == ("--max-buffer-memory", "1.5") {
                // A bare number there counts MiB: 1.5 MiB is a whole number of bytes.
                let text = parsed(&line(cmd, flag, form)).unwrap_or_else(|e| panic!("1.5 MiB refused: {e}"));
                assert!(text.contains(" max_buffer_memory: 1572864,"), "{text}");
                checked += 1;
                continue;
            }
            let e = parsed(&line(cmd, flag, form)).expect_err(&format!("{flag} {form:?} accepted"));
            assert!(e.contains(flag), "{flag} {form:?}: {e}");
            let why = [
                hint,
                "smallest limit",
                "below 1 bit/s",
                "whole number of bytes",
                "power of two",
                "4 GiB",
                "has no unit",
            ];
            assert!(why.iter().any(|w| e.contains(w)), "{flag} {form:?}: the error should say why: {e}");
            checked += 1;
        }
    }
    assert_eq!(
        checked,
        6 * (RATES.len() + BAD_RATES.len())
            + 11 * (SIZES.len() + BAD_SIZES.len())
            + 15 * (DURATIONS.len() + BAD_DURATIONS.len())
    );
}

#[test]
fn short_flags_read_the_grammar_too() {
    let t = parsed(&["bench", "h", "-l", "64KiB", "-w", "1MB", "-b", "50MB/s"].map(String::from)).unwrap();
    assert!(t.contains(" length: Some(65536)") && t.contains(" window: Some(1000000)"), "{t}");
    assert!(t.contains(" rate: Some(400000000)"), "{t}");
}

#[test]
fn defaults_read_as_documented() {
    let t = parsed(&["cp", "a", "b"].map(String::from)).unwrap();
    assert!(t.contains(" chunk_size: 1048576,"), "{t}");
    let t = parsed(&["serve", "--key-file", "k"].map(String::from)).unwrap();
    assert!(t.contains(" max_buffer_memory: 1073741824,"), "{t}");
    let t = parsed(&["demo"].map(String::from)).unwrap();
    assert!(t.contains(" mean_size: 1600000,"), "{t}");
}

#[test]
fn duration_defaults_read_as_they_did_in_seconds() {
    let t = parsed(&["cp", "a", "b"].map(String::from)).unwrap();
    for want in [" timeout: 15s,", " stall_timeout: 300s,", " ssh_timeout: 30s,", " ssh_start_timeout: 120s"] {
        assert!(t.contains(want), "{want} in {t}");
    }
    let t = parsed(&["serve", "--key-file", "k"].map(String::from)).unwrap();
    for want in [
        " max_duration: 3600s,",
        " handshake_timeout: 10s,",
        " shutdown_grace: 30s,",
        " idle_timeout: 300s,",
        " connect_deadline: 30s",
    ] {
        assert!(t.contains(want), "{want} in {t}");
    }
    let t = parsed(&["bench", "h"].map(String::from)).unwrap();
    for want in [" time: None,", " omit: 0ns,", " interval: 1s,", " timeout: 15s,"] {
        assert!(t.contains(want), "{want} in {t}");
    }
    let t = parsed(&["bench", "h", "-t", "30", "-i", "0.5", "-O", "2"].map(String::from)).unwrap();
    assert!(t.contains(" time: Some(30s),") && t.contains(" interval: 500ms,") && t.contains(" omit: 2s,"), "{t}");
}

#[test]
fn closed_sets_are_value_enums_with_their_old_spellings() {
    let t = parsed(&["cp", "a", "b"].map(String::from)).unwrap();
    assert!(t.contains(" cipher: Auto,"), "{t}");
    for (word, want) in [("auto", "Auto"), ("aes-256-gcm", "Aes256Gcm"), ("chacha20-poly1305", "ChaCha20Poly1305")] {
        let t = parsed(&["cp", "--cipher", word, "a", "b"].map(String::from)).unwrap();
        assert!(t.contains(&format!(" cipher: {want},")), "{word}: {t}");
    }
    let e = parsed(&["cp", "--cipher", "rot13", "a", "b"].map(String::from)).unwrap_err();
    assert!(e.contains("aes-256-gcm") && e.contains("chacha20-poly1305"), "{e}");
    let t = parsed(&["bench", "h"].map(String::from)).unwrap();
    assert!(t.contains(" test: TcpStream,"), "{t}");
    for (word, want) in
        [("tcp-stream", "TcpStream"), ("udp-stream", "UdpStream"), ("tcp-rr", "TcpRr"), ("tcp-crr", "TcpCrr")]
    {
        let t = parsed(&["bench", "h", "--test", word].map(String::from)).unwrap();
        assert!(t.contains(&format!(" test: {want},")), "{word}: {t}");
    }
    assert!(parsed(&["bench", "h", "--test", "tcp-maerts"].map(String::from)).unwrap_err().contains("tcp-crr"));
}
