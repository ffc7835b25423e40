//! Daemon mode with ed25519 keys, end to end through the binary: `keygen --type ed25519`,
//! `serve --authorized-keys --host-key`, `cp`/`bench` with `--identity` or the key in the config
//! directory, known_hosts on first contact, refusals, and, between two hosts of a namespace lab
//! (loopback when not root), three key clients sharing a capped daemon fairly while an unknown
//! key and a read-only push are refused.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use crate::support::noise;
use crate::support::sshlab::{SshLab, SERVER_IP};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_linerate"))
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A scratch directory that is also the client's config home (`XDG_CONFIG_HOME`).
struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Home {
        Home { dir: tempfile::tempdir().unwrap() }
    }
    fn path(&self) -> &Path {
        self.dir.path()
    }
    fn config(&self) -> PathBuf {
        self.path().join("config")
    }
    /// The binary with this home's config directory and no run store.
    fn cmd(&self) -> Command {
        self.client(None)
    }
    /// [`Home::cmd`], in the lab's client namespace when there is a lab.
    fn client(&self, lab: Option<&SshLab>) -> Command {
        let mut c = lab.map_or_else(bin, |l| l.in_client(env!("CARGO_BIN_EXE_linerate")));
        c.env("XDG_CONFIG_HOME", self.config()).env("LINERATE_DB", self.path().join("runs.sqlite"));
        c
    }
    /// `keygen --type ed25519 FILE`: the public line it printed.
    fn keygen(&self, file: &Path, comment: &str) -> String {
        let out = self.cmd().args(["keygen", "--type", "ed25519", "--comment", comment]).arg(file).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }
}

struct Serve {
    child: Child,
    addr: String,
    /// The host key fingerprint the server printed.
    fingerprint: String,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A daemon on loopback admitting the keys in `authorized` (no shared key), with `extra` flags.
fn serve(h: &Home, root: &Path, authorized: &str, extra: &[&str]) -> Serve {
    serve_on(h, bin(), root, authorized, "127.0.0.1:0", extra)
}

/// [`serve`] run as `server` (the binary, perhaps in a namespace) listening on `listen`, with a
/// host key made now unless the home has one.
fn serve_on(h: &Home, mut server: Command, root: &Path, authorized: &str, listen: &str, extra: &[&str]) -> Serve {
    let ak = h.path().join("authorized_keys");
    fs::write(&ak, authorized).unwrap();
    let host_key = h.path().join("host_key");
    if !host_key.exists() {
        h.keygen(&host_key, "host");
    }
    server
        .args(["serve", "--listen", listen, "--announce", "--quiet", "--root"])
        .arg(root)
        .arg("--authorized-keys")
        .arg(&ak)
        .arg("--host-key")
        .arg(&host_key)
        .args(extra);
    let a = crate::support::spawn_announced(server);
    let fingerprint = a.fingerprint.unwrap_or_else(|| panic!("no fingerprint at start from {}", a.addr));
    Serve { child: a.child, addr: a.addr, fingerprint }
}

fn small_tree(dir: &Path) {
    fs::create_dir_all(dir.join("sub")).unwrap();
    fs::write(dir.join("a.txt"), b"daemon mode").unwrap();
    fs::write(dir.join("sub/b.bin"), vec![9u8; 300_000]).unwrap();
}

#[test]
fn keygen_writes_a_private_key_0600_and_a_public_line_and_never_replaces() {
    let h = Home::new();
    let k = h.path().join("id");
    let line = h.keygen(&k, "me@test");
    assert!(line.starts_with("linerate-ed25519 ") && line.ends_with(" me@test"), "{line}");
    assert_eq!(fs::read_to_string(h.path().join("id.pub")).unwrap().trim(), line);
    assert_eq!(fs::metadata(&k).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(fs::read_to_string(&k).unwrap().starts_with("-----BEGIN PRIVATE KEY-----"));
    let out = h.cmd().args(["keygen", "--type", "ed25519"]).arg(&k).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("already exists"), "{}", text(&out));
    // Without FILE: the config directory's id_ed25519, in a directory made 0700.
    let out = h.cmd().args(["keygen", "--type", "ed25519"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let default = h.config().join("linerate/id_ed25519");
    assert!(default.exists() && h.config().join("linerate/id_ed25519.pub").exists());
    assert_eq!(fs::metadata(default.parent().unwrap()).unwrap().permissions().mode() & 0o777, 0o700);
    assert!(text(&out).contains("fingerprint SHA256:"), "{}", text(&out));
    // A shared key still needs its FILE.
    let out = h.cmd().arg("keygen").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

#[test]
fn a_daemon_admits_listed_keys_refuses_others_and_read_only_keys_only_read() {
    let h = Home::new();
    let (root, src) = (h.path().join("root"), h.path().join("src"));
    fs::create_dir(&root).unwrap();
    small_tree(&src);
    // The writer uses the default identity; the reader and the stranger name theirs.
    let out = h.cmd().args(["keygen", "--type", "ed25519", "--comment", "writer"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let writer = String::from_utf8(out.stdout).unwrap();
    let reader_key = h.path().join("reader");
    let reader = h.keygen(&reader_key, "reader");
    let stranger_key = h.path().join("stranger");
    h.keygen(&stranger_key, "stranger");
    let srv = serve(&h, &root, &format!("# test\nrw {writer}ro {reader}\n"), &[]);

    // An authorized key pushes; first contact records the host key and names its fingerprint.
    let out = h.cmd().args(["cp", "-q"]).arg(src.join("")).arg(format!("{}:copy", srv.addr)).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(fs::read(root.join("copy/a.txt")).unwrap(), b"daemon mode");
    assert_eq!(fs::read(root.join("copy/sub/b.bin")).unwrap(), vec![9u8; 300_000]);
    assert!(text(&out).contains("first contact") && text(&out).contains(&srv.fingerprint), "{}", text(&out));
    let kh = fs::read_to_string(h.config().join("linerate/known_hosts")).unwrap();
    assert!(kh.starts_with(&format!("{} linerate-ed25519 ", srv.addr)), "{kh}");

    // An unknown key is refused by fingerprint, and nothing is written.
    let out = h
        .cmd()
        .args(["cp", "-q", "--identity"])
        .arg(&stranger_key)
        .arg(&src)
        .arg(format!("{}:stranger", srv.addr))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(text(&out).contains("is not authorized on this server"), "{}", text(&out));
    assert!(!root.join("stranger").exists());

    // A read-only key may not write...
    let ro = |args: &[&str]| h.cmd().args(args).arg("--identity").arg(&reader_key).output().unwrap();
    let dest = format!("{}:ro", srv.addr);
    let out = ro(&["cp", "-q", src.to_str().unwrap(), &dest]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(text(&out).contains("is read-only on this server"), "{}", text(&out));
    assert!(!root.join("ro").exists());
    // ...but may read.
    let into = h.path().join("pulled");
    fs::create_dir(&into).unwrap();
    let from = format!("{}:copy", srv.addr);
    let out = ro(&["cp", "-q", &from, into.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(fs::read(into.join("copy/sub/b.bin")).unwrap(), vec![9u8; 300_000]);

    // A shared-key client is refused by a keys-only daemon.
    let secret = h.path().join("secret");
    let out = h.cmd().arg("keygen").arg(&secret).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = h.cmd().args(["cp", "-q", "--key-file"]).arg(&secret).arg(&src).arg(format!("{}:s", srv.addr)).output();
    let out = out.unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("does not accept a shared key") && text(&out).contains("--identity"), "{}", text(&out));
    assert!(!root.join("s").exists());

    // Benchmarks authenticate the same way.
    let out = h.cmd().args(["bench", &srv.addr, "-t", "0.5", "--json", "--no-save"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(j.to_string().contains("throughput"), "{j}");
    // So does doctor's rate probe, here with the read-only key (benchmarks only read).
    let out = ro(&["doctor", "--peer", &srv.addr, "--json", "--no-crypto-bench", "--include-lo"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let probe = &j["facts"]["path"]["probe"];
    assert!(probe["single_bps"].as_f64().is_some_and(|b| b > 0.0), "{}", j["facts"]["path"]);
}

#[test]
fn a_changed_host_key_is_refused_and_strict_mode_refuses_the_unknown() {
    let h = Home::new();
    let (root, src) = (h.path().join("root"), h.path().join("src"));
    fs::create_dir(&root).unwrap();
    small_tree(&src);
    let id = h.path().join("id");
    let line = h.keygen(&id, "me");
    let srv = serve(&h, &root, &format!("{line}\n"), &[]);
    let addr = srv.addr.clone();
    let cp = |extra: &[&str], dest: &str| {
        let mut c = h.cmd();
        c.args(["cp", "-q", "--identity"]).arg(&id).args(extra).arg(&src).arg(format!("{addr}:{dest}"));
        c.output().unwrap()
    };
    // Strict: an unknown host is refused and not recorded.
    let out = cp(&["--strict-host-key"], "strict");
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(text(&out).contains("--strict-host-key"), "{}", text(&out));
    assert!(!h.config().join("linerate/known_hosts").exists());
    assert!(!root.join("strict").exists());
    // Another server on the same address (a new host key) is refused once the first is known.
    assert_eq!(cp(&[], "first").status.code(), Some(0));
    drop(srv);
    fs::remove_file(h.path().join("host_key")).unwrap();
    fs::remove_file(h.path().join("host_key.pub")).unwrap();
    let listen = addr.clone();
    // The old listener is gone with its process (dropping `srv` awaited its exit).
    assert!(std::net::TcpListener::bind(&listen).is_ok(), "{listen} still taken after the old server exited");
    let srv2 = serve_on(&h, bin(), &root, &format!("{line}\n"), &listen, &[]);
    let out = cp(&[], "second");
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(text(&out).contains("HAS CHANGED") && text(&out).contains(&srv2.fingerprint), "{}", text(&out));
    assert!(!root.join("second").exists());
}

#[test]
fn a_daemon_shares_a_total_cap_fairly_between_three_key_clients_and_refuses_the_others() {
    let h = Home::new();
    // Two hosts joined by a veth link (a real sshd runs there too), or loopback when not root.
    let lab = SshLab::start_if_root();
    let (server, listen) = match &lab {
        Some(l) => (l.in_server(env!("CARGO_BIN_EXE_linerate")), format!("{SERVER_IP}:7878")),
        None => (bin(), "127.0.0.1:0".to_string()),
    };
    let root = h.path().join("root");
    fs::create_dir(&root).unwrap();
    let ids: Vec<PathBuf> = (1..=4).map(|i| h.path().join(format!("id{i}"))).collect();
    let lines: Vec<String> = ids.iter().map(|k| h.keygen(k, "client")).collect();
    let stranger = h.path().join("stranger");
    h.keygen(&stranger, "stranger");
    let authorized = format!("{}\n{}\n{}\nro {}\n", lines[0], lines[1], lines[2], lines[3]);
    let srv = serve_on(&h, server, &root, &authorized, &listen, &["--max-rate-total", "160M"]);
    let small = h.path().join("small");
    fs::write(&small, b"refused").unwrap();
    let refused = |id: &Path, dest: &str| {
        let mut c = h.client(lab.as_ref());
        c.args(["cp", "-q", "--identity"]).arg(id).arg(&small).arg(format!("{}:{dest}", srv.addr));
        let out = c.output().unwrap();
        assert_eq!(out.status.code(), Some(3), "{}", text(&out));
        assert!(!root.join(dest).exists());
        text(&out)
    };
    let msg = refused(&stranger, "stranger");
    assert!(msg.contains("is not authorized on this server"), "{msg}");
    let msg = refused(&ids[3], "reader");
    assert!(msg.contains("is read-only on this server"), "{msg}");
    // Three clients with 1, 2 and 4 streams: a cap shared per stream would give them 1/7, 2/7
    // and 4/7; a fair one gives each a third.
    let size = 20_000_000;
    let streams = [1, 2, 4];
    for p in streams {
        noise(&h.path().join(format!("src{p}")), size);
    }
    let clients: Vec<_> = streams
        .iter()
        .zip(&ids)
        .map(|(p, id)| {
            h.client(lab.as_ref())
                .args(["cp", "--json", "-P", &p.to_string(), "--identity"])
                .arg(id)
                .arg(h.path().join(format!("src{p}")))
                .arg(format!("{}:got{p}", srv.addr))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let rates: Vec<f64> = clients
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            assert_eq!(out.status.code(), Some(0), "{}", text(&out));
            let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(j["bytes"], size);
            j["bytes"].as_f64().unwrap() * 8.0 / j["seconds"].as_f64().unwrap()
        })
        .collect();
    let share = 160e6 / 3.0;
    eprintln!("client rates, Mbit/s: {:?}", rates.iter().map(|r| (r / 1e5).round() / 10.0).collect::<Vec<_>>());
    for (r, p) in rates.iter().zip(streams) {
        assert!(
            (r / share - 1.0).abs() <= 0.25,
            "client with {p} streams got {:.1} Mbit/s of a fair {:.1}: {rates:?}",
            r / 1e6,
            share / 1e6
        );
    }
    let sum: f64 = rates.iter().sum();
    assert!(sum <= 160e6 * 1.1, "together {:.1} Mbit/s over a 160 Mbit/s cap: {rates:?}", sum / 1e6);
    for p in streams {
        assert_eq!(fs::metadata(root.join(format!("got{p}"))).unwrap().len(), size as u64);
    }
}

#[test]
fn key_flags_with_an_ssh_operand_are_refused_not_ignored() {
    let h = Home::new();
    let src = h.path().join("f");
    fs::write(&src, b"x").unwrap();
    // No ssh runs: the operand is classified first (and `nohost.invalid` resolves nowhere).
    for flags in [&["--identity", "id"][..], &["--key-file", "k"], &["--strict-host-key"]] {
        let out = h.cmd().args(["cp", "-q"]).args(flags).arg(&src).arg("me@nohost.invalid:dst").output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {}", text(&out));
        assert!(text(&out).contains("for a running server (HOST:PORT:PATH)"), "{}", text(&out));
    }
}

/// `serve` on SIGTERM mid-copy: it stops accepting and lets the running copy finish within
/// `--shutdown-grace`, then exits 0; with a grace too short for the copy, it aborts the copy
/// cleanly (the client is told why and exits 3, nothing unfinished appears under its final name,
/// the verified part is kept) and still exits 0, and the same copy run again resumes.
#[test]
fn serve_on_sigterm_finishes_running_copies_within_the_grace_then_aborts_them_cleanly() {
    let h = Home::new();
    let (root, src) = (h.path().join("root"), h.path().join("src"));
    fs::create_dir_all(&root).unwrap();
    fs::create_dir_all(&src).unwrap();
    // 8 MB at 16 Mbit/s (2 MB/s): about 4 s.
    noise(&src.join("big.bin"), 8 << 20);
    let key = h.path().join("id");
    let line = h.keygen(&key, "client");
    let sigterm = |child: &Child| {
        let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    };
    let wait = |child: &mut Child, limit: std::time::Duration| -> (Option<i32>, std::time::Duration) {
        let t = std::time::Instant::now();
        let st = crate::support::exit_within(child, limit).unwrap_or_else(|| panic!("still running after {limit:?}"));
        (st.code(), t.elapsed())
    };
    for (grace, finishes) in [("20", true), ("1", false)] {
        // An existing directory, so that the run and its rerun both copy `src` into it.
        let dest = format!("dest-{grace}");
        fs::create_dir(root.join(&dest)).unwrap();
        let mut srv =
            serve(&h, &root, &format!("{line}\n"), &["--max-rate-per-client", "16M", "--shutdown-grace", grace]);
        let copy = |h: &Home, addr: &str| {
            let mut c = h.cmd();
            c.args(["cp", "-q", "--identity"]).arg(&key).arg(&src).arg(format!("{addr}:{dest}"));
            c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
        };
        let mut client = copy(&h, &srv.addr);
        // Well under way (a third of it arrived, at 16 Mbit/s): something to resume after an abort.
        let alive = || client.try_wait().unwrap().is_none();
        let under_way = || bytes_beneath(&root.join(&dest)) >= (8 << 20) / 3;
        let started =
            crate::support::await_files(&[&root.join(&dest)], std::time::Duration::from_secs(30), alive, under_way);
        assert!(started, "the copy never got under way");
        sigterm(&srv.child);
        // Once it is stopping it closes its listener (nothing else to see with --quiet)...
        let closed = || std::net::TcpStream::connect(&srv.addr).is_err();
        assert!(crate::support::eventually(std::time::Duration::from_secs(10), closed), "serve listens after SIGTERM");
        // ...and no new session starts.
        let late =
            h.cmd().args(["cp", "-q", "--identity"]).arg(&key).arg(&src).arg(format!("{}:late", srv.addr)).output();
        assert_ne!(late.unwrap().status.code(), Some(0), "a copy started after SIGTERM");
        let out = client.wait_with_output().unwrap();
        let (code, _) = wait(&mut srv.child, std::time::Duration::from_secs(30));
        assert_eq!(code, Some(0), "serve did not exit 0 after SIGTERM (grace {grace})");
        let landed = root.join(&dest).join("src/big.bin");
        if finishes {
            assert_eq!(out.status.code(), Some(0), "{}", text(&out));
            assert_eq!(fs::read(&landed).unwrap(), fs::read(src.join("big.bin")).unwrap());
        } else {
            assert_eq!(out.status.code(), Some(3), "{}", text(&out));
            assert!(text(&out).contains("shutting down"), "{}", text(&out));
            assert!(!landed.exists(), "an unfinished file appeared under its final name");
            // Run again against a new server: the copy completes, resuming what had arrived.
            let srv = serve(&h, &root, &format!("{line}\n"), &[]);
            let out = h
                .cmd()
                .args(["cp", "--json", "--identity"])
                .arg(&key)
                .arg(&src)
                .arg(format!("{}:{dest}", srv.addr))
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(0), "{}", text(&out));
            assert_eq!(fs::read(&landed).unwrap(), fs::read(src.join("big.bin")).unwrap());
            let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert!(j["resumed_bytes"].as_u64().unwrap_or(0) > 0, "nothing was resumed: {j}");
        }
    }
}

/// Bytes written in the files beneath `dir` (partial and working files included; by the blocks
/// they hold, since a partial file's length may run ahead of what was written).
fn bytes_beneath(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => bytes_beneath(&e.path()),
            _ => e.metadata().map_or(0, |m| m.blocks() * 512),
        })
        .sum()
}
