//! Faults (issue 6) with the real binary: SIGKILL of the server and of the client mid-transfer,
//! and a link cut mid-transfer between two network namespaces. Each must end with a clear
//! failure and no partial file under a final name, and a rerun then completes with identical
//! bytes.
//!
//! Loss, delay, reordering, duplication, corruption and a blackout the connection survives are
//! in `emu.rs`, through the lab's own link emulator (this kernel has no netem).

use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_linerate"))
}

fn scratch() -> tempfile::TempDir {
    if Path::new("/dev/shm").is_dir() {
        if let Ok(t) = tempfile::Builder::new().prefix("linerate-faults-").tempdir_in("/dev/shm") {
            return t;
        }
    }
    tempfile::tempdir().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn keygen(path: &Path) {
    let out = bin().arg("keygen").arg(path).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

/// 16 files of 64 MiB: sparse in the source (cheap to make and read), with a distinct pattern at
/// several offsets so a misplaced chunk would show.
fn big_tree(src: &Path) {
    fs::create_dir_all(src.join("sub")).unwrap();
    for i in 0..16u8 {
        let p = if i % 2 == 0 { src.join(format!("f{i:02}")) } else { src.join(format!("sub/f{i:02}")) };
        let f = fs::File::create(&p).unwrap();
        f.set_len(64 << 20).unwrap();
        for (k, off) in [0u64, 1 << 20, 33 << 20, (64 << 20) - 4096].into_iter().enumerate() {
            let pat: Vec<u8> = (0..4096).map(|j| (j as u8) ^ i ^ (k as u8 * 37)).collect();
            std::os::unix::fs::FileExt::write_all_at(&f, &pat, off).unwrap();
        }
    }
    fs::write(src.join("small"), b"small file").unwrap();
}

fn hash(p: &Path) -> blake3::Hash {
    blake3::Hasher::new().update_reader(fs::File::open(p).unwrap()).unwrap().finalize()
}

/// Every regular file beneath `dst` has a final name (no temporary) and is byte for byte the
/// source file of that name: an interrupted copy may leave fewer files, never a partial one.
fn only_complete_files(src: &Path, dst: &Path) -> usize {
    let mut n = 0;
    let mut stack = vec![dst.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let ft = e.file_type().unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            assert!(!name.starts_with(".linerate-"), "temporary file left: {:?}", e.path());
            if ft.is_dir() {
                stack.push(e.path());
            } else if ft.is_file() {
                let rel = e.path().strip_prefix(dst).unwrap().to_path_buf();
                assert_eq!(hash(&e.path()), hash(&src.join(&rel)), "{rel:?} is not the complete source file");
                n += 1;
            }
        }
    }
    n
}

fn same(a: &Path, b: &Path) {
    let c = linerate_copy::diff::compare_trees(a, b, true).unwrap();
    assert_eq!(c.count, 0, "{:#?}", c.differences);
    assert_eq!(c.files, 17);
}

/// A `linerate serve` child, killed on drop; its stderr is collected.
struct Serve {
    child: Child,
    addr: String,
    /// The server's log so far, and a signal for each piece of it that arrives.
    log: Arc<(Mutex<String>, Condvar)>,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Serve {
    fn start(mut cmd: Command, root: &Path, key: &Path, listen: &str) -> Serve {
        let mut child = cmd
            // The idle timeout must exceed the client's keepalive interval (20 s).
            .args(["serve", "--announce", "--idle-timeout", "25", "--handshake-timeout", "3", "--listen", listen])
            .arg("--root")
            .arg(root)
            .arg("--key-file")
            .arg(key)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        assert!(line.starts_with(&format!("{}LISTEN ", crate::support::ANNOUNCE)), "{line:?}");
        let addr = line.trim().rsplit(' ').next().unwrap().to_string();
        let log = Arc::new((Mutex::new(String::new()), Condvar::new()));
        let (l2, mut err) = (log.clone(), child.stderr.take().unwrap());
        std::thread::spawn(move || {
            let mut b = [0u8; 4096];
            while let Ok(n @ 1..) = err.read(&mut b) {
                l2.0.lock().unwrap().push_str(&String::from_utf8_lossy(&b[..n]));
                l2.1.notify_all();
            }
        });
        Serve { child, addr, log }
    }

    fn log(&self) -> String {
        self.log.0.lock().unwrap().clone()
    }

    /// Whether the log says `needle` within `limit` (awaited as the log arrives; the bound only
    /// guards against a hang).
    fn await_log(&self, needle: &str, limit: Duration) -> bool {
        let (log, arrived) = &*self.log;
        let log = arrived.wait_timeout_while(log.lock().unwrap(), limit, |l| !l.contains(needle)).unwrap().0;
        log.contains(needle)
    }
}

/// Start `linerate cp SRC ADDR:dest` in the background: `dest` exists, so the copy lands in
/// `dest/src` on every run (cp -r semantics).
fn start_copy(cmd: Command, src: &Path, key: &Path, addr: &str) -> Child {
    start_copy_with(cmd, &[], src, key, addr)
}

fn start_copy_with(mut cmd: Command, extra: &[&str], src: &Path, key: &Path, addr: &str) -> Child {
    cmd.args(["cp", "--no-save", "-q", "--stall-timeout", "3", "-P", "4"])
        .args(extra)
        .arg("--key-file")
        .arg(key)
        .arg(src)
        .arg(format!("{addr}:dest"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Wait until some file of the copy is committed beneath `dst`, so the transfer is under way.
fn wait_mid_transfer(dst: &Path, copy: &mut Child) {
    let any = || ["f00", "f02", "f04", "f06", "f08", "small"].iter().any(|n| dst.join(n).exists());
    let parent = dst.parent().unwrap_or(dst);
    let alive = || copy.try_wait().unwrap().is_none();
    let started = crate::support::await_files(&[parent], Duration::from_secs(60), alive, any);
    assert!(copy.try_wait().unwrap().is_none(), "the copy ended before it could be interrupted");
    assert!(started, "the copy never started");
}

/// Wait for `child` to exit, at most `limit`; returns its status, stdout and stderr.
fn finish(mut child: Child, limit: Duration) -> (ExitStatus, String) {
    let st = crate::support::exit_within(&mut child, limit).unwrap_or_else(|| panic!("still running after {limit:?}"));
    let mut s = String::new();
    let _ = child.stdout.take().unwrap().read_to_string(&mut s);
    let _ = child.stderr.take().unwrap().read_to_string(&mut s);
    (st, s)
}

/// Wait until the receiver has journaled chunks of a large file of the copy that lands in `dst`
/// (in the working directory of `dst`'s parent, the session's destination directory): the
/// interrupted copy will leave something to resume.
fn wait_for_journal(dst: &Path, copy: &mut Child) {
    let parent = dst.parent().unwrap_or(dst);
    let journaled = || crate::support::journaled(parent);
    let alive = || copy.try_wait().unwrap().is_none();
    let found = crate::support::await_files(&[parent], Duration::from_secs(60), alive, journaled);
    assert!(copy.try_wait().unwrap().is_none(), "the copy ended before it could be interrupted");
    assert!(found, "no chunk was ever journaled");
}

/// Run the same command again: it completes, skips the files that arrived, and resumes the
/// interrupted ones from their journaled chunks.
fn rerun_completes(cmd: Command, src: &Path, key: &Path, addr: &str, dst: &Path, kept: usize) {
    let (st, out) = finish(start_copy_with(cmd, &["--json"], src, key, addr), Duration::from_secs(120));
    assert_eq!(st.code(), Some(0), "{out}");
    same(src, dst);
    let json = out.lines().find(|l| l.starts_with('{')).unwrap_or_else(|| panic!("no JSON summary: {out}"));
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    assert!(v["skipped"]["files"].as_u64().unwrap() >= kept as u64, "complete files were sent again: {json}");
    assert!(v["resumed_bytes"].as_u64().unwrap() > 0, "nothing was resumed: {json}");
}

#[test]
fn sigkill_of_the_server_mid_transfer_fails_clearly_and_a_rerun_completes() {
    let t = scratch();
    let (src, root, key) = (t.path().join("src"), t.path().join("root"), t.path().join("key"));
    big_tree(&src);
    fs::create_dir_all(root.join("dest")).unwrap();
    keygen(&key);
    let mut srv = Serve::start(bin(), &root, &key, "127.0.0.1:0");
    let mut copy = start_copy(bin(), &src, &key, &srv.addr);
    wait_mid_transfer(&root.join("dest/src"), &mut copy);
    wait_for_journal(&root.join("dest/src"), &mut copy);
    srv.child.kill().unwrap(); // SIGKILL
    srv.child.wait().unwrap();
    let (st, out) = finish(copy, Duration::from_secs(30));
    assert_eq!(st.code(), Some(3), "{out}");
    assert!(out.contains("linerate:") && out.len() < 2000, "{out}");
    assert!(out.contains("the server closed the connection mid-transfer"), "unclear failure: {out}");
    let kept = only_complete_files(&src, &root.join("dest/src"));
    assert!(kept < 17, "everything arrived before the kill");
    let srv = Serve::start(bin(), &root, &key, "127.0.0.1:0");
    rerun_completes(bin(), &src, &key, &srv.addr, &root.join("dest/src"), kept);
}

#[test]
fn sigkill_of_the_client_mid_transfer_leaves_no_partial_file_and_a_rerun_completes() {
    let t = scratch();
    let (src, root, key) = (t.path().join("src"), t.path().join("root"), t.path().join("key"));
    big_tree(&src);
    fs::create_dir_all(root.join("dest")).unwrap();
    keygen(&key);
    let srv = Serve::start(bin(), &root, &key, "127.0.0.1:0");
    let mut copy = start_copy(bin(), &src, &key, &srv.addr);
    wait_mid_transfer(&root.join("dest/src"), &mut copy);
    wait_for_journal(&root.join("dest/src"), &mut copy);
    copy.kill().unwrap(); // SIGKILL
    copy.wait().unwrap();
    // The server notices at once (the streams end), says so, and cleans up.
    srv.await_log("session aborted", Duration::from_secs(30));
    let log = srv.log();
    assert!(log.contains("session aborted"), "{log}");
    // A client that went away is said to have, not blamed for a protocol violation.
    assert!(log.contains("client closed the session (interrupted)") && !log.contains("violation"), "{log}");
    let kept = only_complete_files(&src, &root.join("dest/src"));
    assert!(kept < 17, "everything arrived before the kill");
    rerun_completes(bin(), &src, &key, &srv.addr, &root.join("dest/src"), kept);
}

/// Two network namespaces joined by a veth pair, removed on drop.
struct Link {
    a: String,
    b: String,
    dev: String,
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

fn ip(args: &[&str]) -> bool {
    Command::new("ip").args(args).status().is_ok_and(|s| s.success())
}

impl Link {
    fn new() -> Link {
        let id = format!("{}{}", std::process::id() % 100_000, COUNTER.fetch_add(1, Ordering::Relaxed));
        let l = Link { a: format!("lrfa{id}"), b: format!("lrfb{id}"), dev: format!("lrv{id}") };
        let peer = format!("{}p", l.dev);
        assert!(ip(&["netns", "add", &l.a]) && ip(&["netns", "add", &l.b]));
        assert!(ip(&["link", "add", &l.dev, "netns", &l.a, "type", "veth", "peer", "name", &peer, "netns", &l.b]));
        assert!(ip(&["-n", &l.a, "addr", "add", "198.18.66.1/30", "dev", &l.dev]));
        assert!(ip(&["-n", &l.b, "addr", "add", "198.18.66.2/30", "dev", &peer]));
        for (ns, dev) in [(&l.a, &l.dev), (&l.b, &peer)] {
            assert!(ip(&["-n", ns, "link", "set", "lo", "up"]) && ip(&["-n", ns, "link", "set", dev, "up"]));
        }
        l
    }

    /// `linerate` run inside namespace `ns`.
    fn bin_in(ns: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns, env!("CARGO_BIN_EXE_linerate")]);
        c
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        // Deleting a namespace removes its end of the veth pair, and with it the other end.
        let _ = ip(&["netns", "del", &self.a]);
        let _ = ip(&["netns", "del", &self.b]);
    }
}

#[test]
#[ignore = "needs root"]
fn a_link_cut_mid_transfer_fails_clearly_and_a_rerun_completes() {
    crate::support::require_root("a link cut between network namespaces");
    let t = scratch();
    let (src, root, key) = (t.path().join("src"), t.path().join("root"), t.path().join("key"));
    big_tree(&src);
    fs::create_dir_all(root.join("dest")).unwrap();
    keygen(&key);
    let link = Link::new();
    let srv = Serve::start(Link::bin_in(&link.b), &root, &key, "198.18.66.2:0");
    let mut copy = start_copy(Link::bin_in(&link.a), &src, &key, &srv.addr);
    wait_mid_transfer(&root.join("dest/src"), &mut copy);
    wait_for_journal(&root.join("dest/src"), &mut copy);
    assert!(ip(&["-n", &link.a, "link", "set", &link.dev, "down"]));
    // Ends at its stall timeout (3 s), not the server's idle timeout (25 s): bounded below that.
    let (st, out) = finish(copy, Duration::from_secs(20));
    assert_eq!(st.code(), Some(3), "{out}");
    assert!(out.contains("no progress sending to the server for 3 s"), "{out}");
    // The server gives up on the silent streams at its idle timeout and cleans up.
    assert!(srv.await_log("session aborted", Duration::from_secs(60)), "{}", srv.log());
    let kept = only_complete_files(&src, &root.join("dest/src"));
    assert!(kept < 17, "everything arrived before the cut");
    assert!(ip(&["-n", &link.a, "link", "set", &link.dev, "up"]));
    rerun_completes(Link::bin_in(&link.a), &src, &key, &srv.addr, &root.join("dest/src"), kept);
    drop(srv);
    drop(link);
}
