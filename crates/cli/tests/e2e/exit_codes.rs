//! Exit codes, one table over every subcommand's failure kinds: each row runs the real binary
//! into one failure (bad usage, a session that cannot start, a store or a file that cannot be
//! written, a partial run) and checks the code README.md and docs/USER_GUIDE.md promise for it,
//! and that the message names the cause. `crates/cli/src/error.rs` holds the one kind → code
//! mapping; these rows check that each command gives its failures the right kind. A closed
//! standard output or error (141) needs a real pipe closed early: `pipes.rs`.

use std::fs;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};

use crate::support::sshlab::text;

/// One row: what is run, the code it must exit with, and a piece of its message.
struct Row {
    what: &'static str,
    args: Vec<String>,
    code: i32,
    says: &'static str,
}

fn row(what: &'static str, args: &[&str], code: i32, says: &'static str) -> Row {
    Row { what, args: args.iter().map(|s| s.to_string()).collect(), code, says }
}

fn run(dir: &Path, args: &[String]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_linerate"))
        .current_dir(dir)
        .env("LINERATE_DB", dir.join("runs.sqlite"))
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .env("LINERATE_LAB_DIR", dir.join("labs"))
        .args(args)
        .output()
        .unwrap()
}

/// A loopback port nobody listens on: bound, then closed.
fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn every_subcommand_exits_with_the_documented_code_for_each_failure_kind() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let p = |name: &str| d.join(name).to_str().unwrap().to_string();
    // Fixtures: a shared key, a regular file (a path beneath it cannot be made), a source tree
    // whose file `a` meets a directory in the way at the destination (an entry that cannot be
    // copied), a bad scenario, an ed25519 key.
    let key = p("key");
    assert_eq!(run(d, &["keygen".into(), key.clone()]).status.code(), Some(0));
    fs::write(d.join("file"), b"not a directory").unwrap();
    let under_file = |rest: &str| format!("{}/{rest}", p("file"));
    fs::create_dir(d.join("src")).unwrap();
    fs::write(d.join("src/a"), b"alpha").unwrap();
    fs::create_dir_all(d.join("dst/a/in-the-way")).unwrap();
    fs::write(d.join("bad.toml"), "name = \"bad\"\n[[host]]\nname = 7\n").unwrap();
    fs::write(d.join("bad-inventory.toml"), "agents = 3\n").unwrap();
    let dead = format!("127.0.0.1:{}", closed_port());
    let dead_dest = format!("{dead}:x");
    let store_under_file = under_file("runs.sqlite");

    let rows = [
        // cp: 1 some entries failed, 2 usage, 3 the session failed.
        row(
            "cp, a directory in the way of a file",
            &["cp", "--no-save", "-q", &p("src/"), &p("dst")],
            1,
            "entries failed",
        ),
        row("cp, a missing source", &["cp", "--no-save", &p("nope"), &p("dst2")], 2, "no such file"),
        row("cp, a remote destination without a key", &["cp", "--no-save", &p("src"), "h:7878:x"], 2, "key"),
        row(
            "cp, nobody listening",
            &["cp", "--no-save", "-q", "--timeout", "3", "--key-file", &key, &p("src/a"), &dead_dest],
            3,
            "",
        ),
        // serve: 2 usage; 3 no client within the deadline of --once.
        row("serve without a key", &["serve", "--listen", "127.0.0.1:0"], 2, "--key-file"),
        row(
            "serve --once, nobody connects",
            &["serve", "--listen", "127.0.0.1:0", "--key-file", &key, "--once", "--connect-deadline", "1", "-q"],
            3,
            "",
        ),
        // bench: 2 usage, 3 connection failure.
        row("bench -1 without -s", &["bench", "-1", "-c", "127.0.0.1"], 2, "add -s"),
        row("bench, a bad --repeat", &["bench", "-c", "127.0.0.1", "--key-file", &key, "--repeat", "x"], 2, "--repeat"),
        row("bench, nobody listening", &["bench", "-c", &dead, "--key-file", &key, "-t", "1", "--no-save"], 3, ""),
        // keygen: 2 usage (no FILE, an existing file), 3 the key cannot be written.
        row("keygen without FILE", &["keygen"], 2, "needs FILE"),
        row("keygen over an existing key", &["keygen", &key], 2, "exists"),
        row("keygen beneath a regular file", &["keygen", &under_file("dir/key")], 3, "file"),
        // demo, mktree, generate: local I/O is not usage.
        row("demo in a directory beneath a regular file", &["demo", "--dir", &under_file("demo")], 3, "sample tree"),
        row("mktree into an existing path", &["mktree", &p("file"), "--files", "1"], 3, "file"),
        row("mktree, a bad size", &["mktree", &p("t"), "--mean-size", "big"], 2, "big"),
        row("generate --dir with a completion", &["generate", "complete-bash", "--dir", &p("man")], 2, "--dir"),
        row("generate man into a regular file", &["generate", "man", "--dir", &under_file("man")], 3, "man"),
        // doctor: 2 usage.
        row("doctor, an unknown interface", &["doctor", "--iface", "nosuchif0", "--no-crypto-bench"], 2, "nosuchif0"),
        // lab: 2 a bad scenario, no lab up.
        row("lab plan of a bad scenario", &["lab", "plan", &p("bad.toml")], 2, "scenario"),
        row("lab exec without a lab", &["lab", "exec", "h1", "--", "true"], 2, "lab"),
        // mesh: 2 a bad inventory (a round that cannot be stored: e2e/mesh.rs).
        row("mesh, a bad inventory", &["mesh", &p("bad-inventory.toml"), "--once"], 2, "bad-inventory"),
        // report: 2 usage, 3 the store.
        row("report show of an unknown run", &["report", "show", "nope"], 2, "nope"),
        row("report list, a store beneath a file", &["report", "--db", &store_under_file, "list"], 3, "run store"),
        row("report, a bad --chart", &["report", "svg", "x", "--chart", "pie", "-o", "-"], 2, "--chart"),
    ];
    let mut wrong = Vec::new();
    for r in &rows {
        let o = run(d, &r.args);
        let out = text(&o);
        if o.status.code() != Some(r.code) || !out.contains(r.says) {
            wrong.push(format!(
                "{}: exit {:?}, expected {} and {:?} in:\n{out}",
                r.what,
                o.status.code(),
                r.code,
                r.says
            ));
        }
        assert!(!out.contains("panicked"), "{}: {out}", r.what);
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn a_closed_stdout_is_a_quiet_end_with_141() {
    let t = tempfile::tempdir().unwrap();
    // `generate man | true` with the reader gone before the first write: a pipe whose read end
    // is closed before the command starts, so its first write fails with EPIPE whatever the
    // page's size and however fast it runs (closing the reader after the start raced a page
    // that fits in the pipe).
    let (reader, writer) = rustix::pipe::pipe().unwrap();
    drop(reader);
    let child = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args(["generate", "man"])
        .current_dir(t.path())
        .stdout(std::process::Stdio::from(writer))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let o = child.wait_with_output().unwrap();
    // Kind::Closed: 128 + SIGPIPE, documented beside the other codes (pipes.rs for the rest).
    assert_eq!(o.status.code(), Some(141), "{}", text(&o));
    assert!(o.stderr.is_empty(), "{}", String::from_utf8_lossy(&o.stderr));
}
