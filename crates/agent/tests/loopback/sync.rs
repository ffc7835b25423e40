//! Integration tests of pull, sync (skip unchanged, --checksum, --dry-run, --delete) and resume,
//! through a real server on loopback.

use linerate_agent::server::{Server, ServerConfig, ServerHandle};
use linerate_copy::diff::compare_trees;
use linerate_copy::pull;
use linerate_copy::send::{self, CopyConfig, CopyReport, ErrorSink, ListSink, Progress};
use linerate_net::auth::secret::Secret;
use linerate_net::EngineError;
use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

const CHUNK: u32 = 64 * 1024;

struct Fx {
    dir: tempfile::TempDir,
    secret: Secret,
    srv: ServerHandle,
}

impl Fx {
    fn new() -> Fx {
        let dir = if Path::new("/dev/shm").is_dir() {
            tempfile::Builder::new().prefix("linerate-sync-").tempdir_in("/dev/shm").unwrap()
        } else {
            tempfile::tempdir().unwrap()
        };
        fs::create_dir(dir.path().join("root")).unwrap();
        let secret = Secret::generate().unwrap();
        let mut cfg = ServerConfig::new("127.0.0.1:0".parse().unwrap(), dir.path().join("root"), secret.clone());
        cfg.log = false;
        cfg.handshake_timeout = Duration::from_secs(5);
        cfg.idle_timeout = Duration::from_secs(10);
        let srv = Server::bind(cfg).unwrap().spawn();
        Fx { dir, secret, srv }
    }
    fn p(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }
    fn cfg(&self, addr: SocketAddr, sources: Vec<PathBuf>, dest: &str) -> (CopyConfig, Arc<Mutex<Vec<String>>>) {
        let mut c = CopyConfig::new(addr, self.secret.clone(), sources, dest.as_bytes().to_vec());
        c.streams = 3;
        c.chunk_size = CHUNK;
        c.timeout = Duration::from_secs(5);
        c.stall_timeout = Duration::from_secs(10);
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l2 = lines.clone();
        c.list = Some(ListSink(Arc::new(move |s: &str| l2.lock().unwrap().push(s.to_string()))));
        (c, lines)
    }
}

fn sink() -> (ErrorSink, Arc<Mutex<Vec<String>>>) {
    let errors = Arc::new(Mutex::new(Vec::new()));
    let e2 = errors.clone();
    (Arc::new(move |m| e2.lock().unwrap().push(m)), errors)
}

fn push(cfg: &CopyConfig) -> Result<CopyReport, EngineError> {
    send::copy(cfg, Arc::new(Progress::default()), sink().0)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u32).wrapping_mul(2654435761).rotate_left(seed as u32 % 31) as u8 ^ seed).collect()
}

fn tree(root: &Path) {
    let c = CHUNK as usize;
    fs::create_dir_all(root.join("a/b")).unwrap();
    fs::create_dir_all(root.join("empty")).unwrap();
    for (i, len) in [0, 1, 4097, c, c + 1, 5 * c + 77].into_iter().enumerate() {
        fs::write(root.join(format!("a/f{len}")), pattern(len, i as u8)).unwrap();
    }
    fs::write(root.join("a/b/deep"), b"deep").unwrap();
    fs::write(root.join("big"), pattern(40 * c + 3, 9)).unwrap();
    symlink("a/f1", root.join("link")).unwrap();
}

fn same(a: &Path, b: &Path) {
    let c = compare_trees(a, b, true).unwrap();
    assert_eq!(c.count, 0, "{:#?}", c.differences);
    assert!(c.files >= 8, "compared only {} files", c.files);
}

fn regular_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() {
                out.push(e.path());
            }
        }
    }
    out
}

#[test]
fn pull_receives_a_tree_byte_for_byte_by_the_rsync_rule_and_lands_there_again() {
    let fx = Fx::new();
    tree(&fx.p("root/srv-tree"));
    fs::create_dir(fx.p("local")).unwrap();
    let (cfg, _) = fx.cfg(fx.srv.addr, vec![], "");
    let pull = |from: &[u8], into: &str| pull::pull(&cfg, from, &fx.p(into), Arc::new(Progress::default()), sink().0);
    // Twice each: the second run lands where the first did, and finds everything up to date.
    for run in 0..2 {
        // A directory, into an existing directory or one made now: under the remote name.
        let r = pull(b"srv-tree", "local").unwrap();
        assert!(r.pulled && r.is_complete(), "{r:?}");
        same(&fx.p("root/srv-tree"), &fx.p("local/srv-tree"));
        pull(b"srv-tree", "made").unwrap();
        same(&fx.p("root/srv-tree"), &fx.p("made/srv-tree"));
        // A trailing '/': the destination becomes the copy.
        let r = pull(b"srv-tree/", "renamed").unwrap();
        same(&fx.p("root/srv-tree"), &fx.p("renamed"));
        if run == 1 {
            assert_eq!((r.files, r.skipped_files), (0, 8), "the second run sends nothing: {r:?}");
        }
        // One file: a new name, or into a directory.
        pull(b"srv-tree/big", "one.bin").unwrap();
        assert_eq!(fs::read(fx.p("one.bin")).unwrap(), fs::read(fx.p("root/srv-tree/big")).unwrap());
        pull(b"srv-tree/big", "local").unwrap();
        assert_eq!(fs::read(fx.p("local/big")).unwrap(), fs::read(fx.p("root/srv-tree/big")).unwrap());
    }
    assert!(!fx.p("made/srv-tree/srv-tree").exists() && !fx.p("renamed/srv-tree").exists());
}

/// Issue 28, as decided in SECURITY.md: an existing directory a trailing-slash pull lands as
/// takes the source directory's permission bits (as `rsync -a` does), never set-group-ID.
#[test]
fn a_trailing_slash_pull_gives_an_existing_directory_the_source_directorys_mode() {
    use std::os::unix::fs::PermissionsExt;
    let fx = Fx::new();
    tree(&fx.p("root/srv-tree"));
    fs::set_permissions(fx.p("root/srv-tree"), fs::Permissions::from_mode(0o2755)).unwrap();
    fs::create_dir(fx.p("private")).unwrap();
    fs::set_permissions(fx.p("private"), fs::Permissions::from_mode(0o700)).unwrap();
    let (cfg, _) = fx.cfg(fx.srv.addr, vec![], "");
    pull::pull(&cfg, b"srv-tree/", &fx.p("private"), Arc::new(Progress::default()), sink().0).unwrap();
    same(&fx.p("root/srv-tree"), &fx.p("private"));
    assert_eq!(fs::metadata(fx.p("private")).unwrap().permissions().mode() & 0o7777, 0o755);
}

#[test]
fn pull_refuses_paths_outside_the_root_and_through_symlinks() {
    let fx = Fx::new();
    fs::write(fx.p("outside"), b"secret").unwrap();
    symlink(fx.p("."), fx.p("root/escape")).unwrap();
    let (cfg, _) = fx.cfg(fx.srv.addr, vec![], "");
    for path in [b"../outside".as_slice(), b"escape/outside", b"/etc/passwd", b"missing"] {
        let r = pull::pull(&cfg, path, &fx.p("got"), Arc::new(Progress::default()), sink().0);
        assert!(r.is_err(), "{:?} was served", String::from_utf8_lossy(path));
        assert!(!fx.p("got").exists());
    }
    // A symlink as the source itself is sent as a link, never followed.
    pull::pull(&cfg, b"escape", &fx.p("got"), Arc::new(Progress::default()), sink().0).unwrap();
    assert!(fs::symlink_metadata(fx.p("got")).unwrap().file_type().is_symlink());
}

#[test]
fn a_second_push_skips_unchanged_files_and_sends_changed_ones() {
    let fx = Fx::new();
    tree(&fx.p("src"));
    // An existing destination directory: every run lands in dst/src (cp -r), so runs repeat.
    fs::create_dir(fx.p("root/dst")).unwrap();
    let (cfg, _) = fx.cfg(fx.srv.addr, vec![fx.p("src")], "dst");
    let first = push(&cfg).unwrap();
    assert!(first.is_complete() && first.skipped_files == 0, "{first:?}");
    same(&fx.p("src"), &fx.p("root/dst/src"));
    let second = push(&cfg).unwrap();
    assert_eq!(second.files, 0, "{second:?}");
    assert_eq!(second.skipped_files, first.files);
    assert_eq!(second.bytes, 0);
    // A changed size, and a changed mtime with the same size: both are sent again.
    fs::write(fx.p("src/a/f1"), b"xy").unwrap();
    let f = fs::File::options().write(true).open(fx.p("src/a/b/deep")).unwrap();
    f.write_all_at_start(b"DEEP");
    f.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(1_500_000_000)).unwrap();
    let third = push(&cfg).unwrap();
    assert_eq!(third.files, 2, "{third:?}");
    same(&fx.p("src"), &fx.p("root/dst/src"));
}

trait AtStart {
    fn write_all_at_start(&self, b: &[u8]);
}
impl AtStart for fs::File {
    fn write_all_at_start(&self, b: &[u8]) {
        use std::os::unix::fs::FileExt;
        self.write_all_at(b, 0).unwrap();
    }
}

#[test]
fn checksum_finds_a_change_that_size_and_mtime_hide() {
    let fx = Fx::new();
    tree(&fx.p("src"));
    // An existing destination directory: every run lands in dst/src (cp -r), so runs repeat.
    fs::create_dir(fx.p("root/dst")).unwrap();
    let (mut cfg, _) = fx.cfg(fx.srv.addr, vec![fx.p("src")], "dst");
    push(&cfg).unwrap();
    // Same size, same mtime, other bytes (as after a restore that kept times).
    let p = fx.p("root/dst/src/a/f4097");
    let mtime = fs::metadata(&p).unwrap().modified().unwrap();
    let mut data = fs::read(&p).unwrap();
    data[100] ^= 0xff;
    fs::write(&p, &data).unwrap();
    fs::File::options().write(true).open(&p).unwrap().set_modified(mtime).unwrap();
    assert_eq!(push(&cfg).unwrap().files, 0, "size and mtime match: skipped");
    assert_ne!(fs::read(&p).unwrap(), fs::read(fx.p("src/a/f4097")).unwrap());
    cfg.checksum = true;
    let r = push(&cfg).unwrap();
    assert_eq!(r.files, 1, "{r:?}");
    same(&fx.p("src"), &fx.p("root/dst/src"));
}

#[test]
fn dry_run_lists_and_changes_nothing_and_delete_removes_only_extras() {
    let fx = Fx::new();
    tree(&fx.p("src"));
    // An existing destination directory: every run lands in dst/src (cp -r), so runs repeat.
    fs::create_dir(fx.p("root/dst")).unwrap();
    let (mut cfg, lines) = fx.cfg(fx.srv.addr, vec![fx.p("src")], "dst");
    push(&cfg).unwrap();
    fs::write(fx.p("root/dst/src/a/extra"), b"x").unwrap();
    fs::create_dir_all(fx.p("root/dst/src/a/old/sub")).unwrap();
    fs::write(fx.p("root/dst/src/a/old/sub/f"), b"x").unwrap();
    fs::write(fx.p("root/unrelated"), b"outside the copied tree").unwrap();
    fs::write(fx.p("src/a/new"), b"new file").unwrap();
    cfg.delete = true;
    cfg.dry_run = true;
    let before = regular_files(&fx.p("root")).len();
    let r = push(&cfg).unwrap();
    assert_eq!(regular_files(&fx.p("root")).len(), before, "a dry run changes nothing");
    let l = lines.lock().unwrap().clone();
    assert!(l.iter().any(|s| s.starts_with("would send") && s.contains("new")), "{l:?}");
    assert!(l.iter().any(|s| s == "would delete src/a/extra"), "{l:?}");
    assert!(l.iter().any(|s| s == "would delete src/a/old"), "{l:?}");
    assert_eq!(r.deleted, 2);
    assert!(!fx.p("root/dst/src/a/new").exists());
    lines.lock().unwrap().clear();
    cfg.dry_run = false;
    let r = push(&cfg).unwrap();
    assert_eq!(r.deleted, 2, "{:?}", lines.lock().unwrap());
    assert!(!fx.p("root/dst/src/a/extra").exists() && !fx.p("root/dst/src/a/old").exists());
    assert!(fx.p("root/unrelated").exists(), "outside the copied directories");
    same(&fx.p("src"), &fx.p("root/dst/src"));
}

#[test]
fn pull_with_delete_and_dry_run_acts_on_the_local_side() {
    let fx = Fx::new();
    tree(&fx.p("root/t"));
    let (mut cfg, lines) = fx.cfg(fx.srv.addr, vec![], "");
    fs::create_dir(fx.p("here")).unwrap();
    pull::pull(&cfg, b"t", &fx.p("here"), Arc::new(Progress::default()), sink().0).unwrap();
    fs::write(fx.p("here/t/a/stale"), b"x").unwrap();
    cfg.delete = true;
    cfg.dry_run = true;
    let r = pull::pull(&cfg, b"t", &fx.p("here"), Arc::new(Progress::default()), sink().0).unwrap();
    assert_eq!((r.deleted, r.files), (1, 0));
    assert!(fx.p("here/t/a/stale").exists());
    assert!(lines.lock().unwrap().iter().any(|s| s == "would delete t/a/stale"), "{:?}", lines.lock().unwrap());
    cfg.dry_run = false;
    pull::pull(&cfg, b"t", &fx.p("here"), Arc::new(Progress::default()), sink().0).unwrap();
    assert!(!fx.p("here/t/a/stale").exists());
    same(&fx.p("root/t"), &fx.p("here/t"));
}

/// Forwards connections to `to`; the data connection number `conn_no` is cut after `after`
/// bytes from the client.
fn cutting_proxy(to: SocketAddr, conn_no: usize, after: usize) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || {
        for c in l.incoming().take(16) {
            let Ok(mut client) = c else { return };
            let Ok(mut server) = TcpStream::connect(to) else { return };
            let n = seen.fetch_add(1, Ordering::SeqCst);
            let (mut c2, mut s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut s2, &mut c2);
                let _ = c2.shutdown(std::net::Shutdown::Both);
            });
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 16 * 1024];
                let mut total = 0;
                while let Ok(k) = client.read(&mut buf) {
                    if k == 0 {
                        break;
                    }
                    let k = if n == conn_no { k.min(after.saturating_sub(total)) } else { k };
                    if k == 0 || server.write_all(&buf[..k]).is_err() {
                        break;
                    }
                    total += k;
                }
                let _ = server.shutdown(std::net::Shutdown::Both);
                let _ = client.shutdown(std::net::Shutdown::Both);
            });
        }
    });
    addr
}

#[test]
fn an_interrupted_push_resumes_from_its_journaled_chunks() {
    let fx = Fx::new();
    fs::create_dir(fx.p("src")).unwrap();
    let size = 300 * CHUNK as usize + 5;
    fs::write(fx.p("src/huge"), pattern(size, 4)).unwrap();
    // One data stream, cut after ~12 MB: the session fails part-way.
    let proxy = cutting_proxy(fx.srv.addr, 1, 12 << 20);
    let (mut cfg, _) = fx.cfg(proxy, vec![fx.p("src/huge")], "huge");
    cfg.streams = 1;
    assert!(push(&cfg).is_err(), "the cut must fail the copy");
    assert!(!fx.p("root/huge").exists(), "nothing under the final name before it is complete");
    // The server's session ends (and flushes its journal) on its own time.
    assert!(crate::peer::eventually(Duration::from_secs(30), || fx.srv.active_sessions() == 0));
    let (mut again, _) = fx.cfg(fx.srv.addr, vec![fx.p("src/huge")], "huge");
    again.verify = true;
    let r = push(&again).unwrap();
    assert!(r.is_complete(), "{r:?}");
    assert!(r.resumed_bytes >= 4 << 20, "only {} bytes resumed", r.resumed_bytes);
    assert!(r.resumed_bytes < size as u64);
    assert_eq!(fs::read(fx.p("root/huge")).unwrap(), fs::read(fx.p("src/huge")).unwrap());
    let left: Vec<_> = fs::read_dir(fx.p("root")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, vec![std::ffi::OsString::from("huge")], "journal and partial removed");
}

/// A resume trusts its own partial file (no chunk is hashed as it is written); `--verify`
/// catches a chunk corrupted on disk between the runs: nothing is committed, the partial file and
/// journal go, and the next run sends the file whole.
#[test]
fn a_partial_chunk_corrupted_on_disk_fails_verify_and_the_next_run_sends_it_whole() {
    let fx = Fx::new();
    fs::create_dir(fx.p("src")).unwrap();
    let size = 200 * CHUNK as usize;
    fs::write(fx.p("src/f"), pattern(size, 2)).unwrap();
    let proxy = cutting_proxy(fx.srv.addr, 1, 8 << 20);
    let (mut cfg, _) = fx.cfg(proxy, vec![fx.p("src/f")], "f");
    cfg.streams = 1;
    assert!(push(&cfg).is_err());
    assert!(crate::peer::eventually(Duration::from_secs(30), || fx.srv.active_sessions() == 0));
    // Flip a byte in the first chunk of the partial file.
    let part = fs::read_dir(fx.p("root"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| crate::peer::in_work_dir(p))
        .flat_map(|w| fs::read_dir(w).unwrap().map(|e| e.unwrap().path()))
        .find(|p| p.to_string_lossy().ends_with(".part"))
        .expect("a partial file is kept in the working directory");
    let f = fs::File::options().write(true).open(&part).unwrap();
    f.write_all_at_start(b"\xff\xfe");
    let (mut verified, _) = fx.cfg(fx.srv.addr, vec![fx.p("src/f")], "f");
    verified.verify = true;
    let (es, errors) = sink();
    let r = send::copy(&verified, Arc::new(Progress::default()), es).unwrap();
    assert!(!r.is_complete() && r.resumed_bytes > 0, "{r:?}");
    assert!(errors.lock().unwrap().iter().any(|e| e.contains("BLAKE3")), "{:?}", errors.lock().unwrap());
    assert!(!fx.p("root/f").exists(), "nothing committed");
    assert!(!part.exists(), "the partial file is discarded");
    let (again, _) = fx.cfg(fx.srv.addr, vec![fx.p("src/f")], "f");
    let r = push(&again).unwrap();
    assert!(r.is_complete() && r.resumed_bytes == 0, "{r:?}");
    assert_eq!(fs::read(fx.p("root/f")).unwrap(), fs::read(fx.p("src/f")).unwrap());
}
