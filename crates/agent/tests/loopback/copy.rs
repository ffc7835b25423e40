//! Integration tests: real trees through a real server on loopback.

use linerate_agent::server::{Server, ServerConfig, ServerHandle};
use linerate_copy::diff::compare_trees;
use linerate_copy::send::{self, CopyConfig, CopyReport, ErrorSink, Progress};
use linerate_net::auth::secret::Secret;
use linerate_net::conn;
use linerate_net::EngineError;
use linerate_proto::frame::{Begin, Frame};
use linerate_proto::hello::{StreamKind, Suite};
use linerate_proto::{ErrorCode, ProtoError};
use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

const CHUNK: u32 = 64 * 1024;

/// A scratch directory, on tmpfs where there is one (fast, and memory-to-memory like the peers).
fn scratch() -> tempfile::TempDir {
    if Path::new("/dev/shm").is_dir() {
        if let Ok(t) = tempfile::Builder::new().prefix("linerate-test-").tempdir_in("/dev/shm") {
            return t;
        }
    }
    tempfile::tempdir().unwrap()
}

fn server(root: &Path, secret: &Secret) -> ServerHandle {
    let mut cfg = ServerConfig::new("127.0.0.1:0".parse().unwrap(), root.to_path_buf(), secret.clone());
    cfg.log = false;
    cfg.handshake_timeout = Duration::from_secs(5);
    Server::bind(cfg).unwrap().spawn()
}

/// A scratch dir with `src` (the full sample tree when `tree`) and an empty `root` served by a
/// fresh server.
struct Fixture {
    _dir: tempfile::TempDir,
    src: PathBuf,
    root: PathBuf,
    secret: Secret,
    srv: ServerHandle,
}

fn fixture(tree: bool) -> Fixture {
    let dir = scratch();
    let (src, root) = (dir.path().join("src"), dir.path().join("root"));
    if tree {
        make_tree(&src);
    } else {
        fs::create_dir_all(&src).unwrap();
    }
    fs::create_dir(&root).unwrap();
    let secret = Secret::generate().unwrap();
    let srv = server(&root, &secret);
    Fixture { _dir: dir, src, root, secret, srv }
}

fn config(addr: SocketAddr, secret: &Secret, sources: Vec<PathBuf>, dest: &str) -> CopyConfig {
    let mut c = CopyConfig::new(addr, secret.clone(), sources, dest.as_bytes().to_vec());
    c.streams = 3;
    c.chunk_size = CHUNK;
    c.timeout = Duration::from_secs(5);
    c
}

fn run(cfg: &CopyConfig) -> (Result<CopyReport, EngineError>, Vec<String>) {
    let errors = Arc::new(Mutex::new(Vec::new()));
    let e2 = errors.clone();
    let sink: ErrorSink = Arc::new(move |m| e2.lock().unwrap().push(m));
    let r = send::copy(cfg, Arc::new(Progress::default()), sink);
    let errs = errors.lock().unwrap().clone();
    (r, errs)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u32).wrapping_mul(2654435761).rotate_left(seed as u32 % 31) as u8 ^ seed).collect()
}

fn set_mtime(p: &Path, secs: u64, nanos: u32) {
    let t = SystemTime::UNIX_EPOCH + Duration::new(secs, nanos);
    fs::File::options().write(true).open(p).or_else(|_| fs::File::open(p)).unwrap().set_modified(t).unwrap();
}

/// A tree with every kind of entry and every awkward size around the chunk size.
fn make_tree(root: &Path) {
    let c = CHUNK as usize;
    fs::create_dir_all(root.join("a/b/c")).unwrap();
    fs::create_dir_all(root.join("empty/nested-empty")).unwrap();
    for (i, len) in [0, 1, 7, 4097, c - 1, c, c + 1, 2 * c, 3 * c + 7, 10 * c + 12345].into_iter().enumerate() {
        let p = root.join(format!("a/size-{len}"));
        fs::write(&p, pattern(len, i as u8)).unwrap();
        set_mtime(&p, 1_500_000_000 + i as u64, 123_456_789);
    }
    fs::write(root.join("a/b/c/deep.txt"), b"deep").unwrap();
    fs::write(root.join("exec.sh"), b"#!/bin/sh\necho hi\n").unwrap();
    fs::set_permissions(root.join("exec.sh"), fs::Permissions::from_mode(0o751)).unwrap();
    fs::write(root.join("private"), b"secret stuff").unwrap();
    fs::set_permissions(root.join("private"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::write(root.join("name with spaces & ünïcode"), b"x").unwrap();
    symlink("a/size-1", root.join("rel-link")).unwrap();
    symlink("/etc/passwd", root.join("abs-link")).unwrap();
    symlink("../../nowhere", root.join("a/dangling")).unwrap();
    symlink("b", root.join("a/dir-link")).unwrap();
    fs::set_permissions(root.join("a/b"), fs::Permissions::from_mode(0o750)).unwrap();
    for d in ["a/b/c", "a/b", "a", "empty/nested-empty", "empty"] {
        set_mtime(&root.join(d), 1_400_000_000, 5);
    }
}

fn assert_same(src: &Path, dst: &Path) {
    let c = compare_trees(src, dst, true).unwrap();
    assert_eq!(c.count, 0, "differences: {:#?}", c.differences);
    assert!(c.files >= 10, "compared only {} files", c.files);
}

/// Every non-directory entry beneath `dir` for which `keep` holds.
fn entries(dir: &Path, keep: impl Fn(&fs::DirEntry) -> bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else if keep(&e) {
                out.push(e.path());
            }
        }
    }
    out
}

fn no_temp_files(dir: &Path) -> Vec<PathBuf> {
    entries(dir, |e| {
        let n = e.file_name().to_string_lossy().into_owned();
        n.starts_with(".linerate-tmp-") || n.starts_with(".linerate-work-")
    })
}

#[test]
fn copies_every_entry_kind_byte_for_byte_with_modes_mtimes_and_links() {
    let Fixture { _dir, src, root, secret, srv } = fixture(true);
    for suite in [Suite::Aes256Gcm, Suite::ChaCha20Poly1305] {
        let dest = format!("copy-{}", suite.name());
        let mut cfg = config(srv.addr, &secret, vec![src.clone()], &dest);
        cfg.suite = suite;
        let (r, errs) = run(&cfg);
        let r = r.unwrap();
        assert!(errs.is_empty(), "{errs:?}");
        assert!(r.is_complete());
        assert_eq!(r.files, 14);
        assert_eq!(r.server.files, 14);
        assert_eq!(r.links, 4);
        assert_eq!(r.server.links, 4);
        assert_eq!(r.cipher, suite.name());
        assert_same(&src, &root.join(&dest));
        assert_eq!(fs::read_link(root.join(&dest).join("abs-link")).unwrap(), Path::new("/etc/passwd"));
        assert!(no_temp_files(&root).is_empty());
    }
}

#[test]
fn verify_and_fsync_copy_the_same_bytes() {
    let Fixture { _dir, src, root, secret, srv } = fixture(true);
    let mut cfg = config(srv.addr, &secret, vec![src.clone()], "v");
    cfg.verify = true;
    cfg.fsync = true;
    cfg.streams = 1;
    let (r, errs) = run(&cfg);
    assert!(r.unwrap().is_complete(), "{errs:?}");
    assert_same(&src, &root.join("v"));
}

#[test]
fn follows_cp_r_naming() {
    let t = scratch();
    let root = t.path().join("root");
    fs::create_dir_all(root.join("existing")).unwrap();
    fs::create_dir_all(t.path().join("s1/inner")).unwrap();
    fs::write(t.path().join("s1/inner/f"), b"1").unwrap();
    fs::write(t.path().join("file.txt"), b"single").unwrap();
    let secret = Secret::generate().unwrap();
    let srv = server(&root, &secret);

    // DEST does not exist: it becomes the copy of SRC.
    let (r, _) = run(&config(srv.addr, &secret, vec![t.path().join("s1")], "fresh"));
    r.unwrap();
    assert_eq!(fs::read(root.join("fresh/inner/f")).unwrap(), b"1");
    // DEST is an existing directory: each SRC goes inside under its own name.
    let (r, _) = run(&config(srv.addr, &secret, vec![t.path().join("s1"), t.path().join("file.txt")], "existing"));
    r.unwrap();
    assert_eq!(fs::read(root.join("existing/s1/inner/f")).unwrap(), b"1");
    assert_eq!(fs::read(root.join("existing/file.txt")).unwrap(), b"single");
    // A single file to a new name, and over an existing file.
    run(&config(srv.addr, &secret, vec![t.path().join("file.txt")], "renamed.txt")).0.unwrap();
    assert_eq!(fs::read(root.join("renamed.txt")).unwrap(), b"single");
    fs::write(t.path().join("file.txt"), b"updated").unwrap();
    run(&config(srv.addr, &secret, vec![t.path().join("file.txt")], "renamed.txt")).0.unwrap();
    assert_eq!(fs::read(root.join("renamed.txt")).unwrap(), b"updated");
    // Several sources need an existing directory.
    let (r, _) = run(&config(srv.addr, &secret, vec![t.path().join("s1"), t.path().join("file.txt")], "nodir"));
    match r {
        Err(EngineError::Remote { code: ErrorCode::Destination, message }) => {
            assert!(message.contains("not a directory"), "{message}")
        }
        other => panic!("expected a destination error, got {other:?}"),
    }
    // A missing parent is an error, not created on the fly.
    let (r, _) = run(&config(srv.addr, &secret, vec![t.path().join("s1")], "no/such/parent"));
    assert!(matches!(r, Err(EngineError::Remote { code: ErrorCode::Destination, .. })), "{r:?}");
    // `..` in the destination is refused before anything happens.
    let (r, _) = run(&config(srv.addr, &secret, vec![t.path().join("s1")], "../escape"));
    assert!(matches!(r, Err(EngineError::Remote { .. })), "{r:?}");
    assert!(!t.path().join("escape").exists());
}

#[test]
fn wrong_secret_is_refused_and_nothing_is_written() {
    let t = scratch();
    let (src, root) = (t.path().join("src"), t.path().join("root"));
    make_tree(&src);
    fs::create_dir(&root).unwrap();
    let srv = server(&root, &Secret::generate().unwrap());
    let (r, _) = run(&config(srv.addr, &Secret::generate().unwrap(), vec![src], "x"));
    assert!(matches!(r, Err(EngineError::Proto(ProtoError::Auth))), "{r:?}");
    assert!(r.unwrap_err().to_string().contains("authentication failed"));
    assert_eq!(fs::read_dir(&root).unwrap().count(), 0);
}

/// Forwards connections to `to`, flipping one bit at byte `at` of every connection after the
/// first (the data streams), client to server.
fn tampering_proxy(to: SocketAddr, at: usize) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for (n, c) in l.incoming().enumerate().take(64) {
            let Ok(mut client) = c else { return };
            let Ok(mut server) = TcpStream::connect(to) else { return };
            let (mut c2, mut s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut s2, &mut c2);
                let _ = c2.shutdown(std::net::Shutdown::Both);
            });
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                let mut seen = 0usize;
                loop {
                    let k = match client.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(k) => k,
                    };
                    if n > 0 && seen <= at && at < seen + k {
                        buf[at - seen] ^= 0x04;
                    }
                    seen += k;
                    if server.write_all(&buf[..k]).is_err() {
                        break;
                    }
                }
                let _ = server.shutdown(std::net::Shutdown::Both);
            });
        }
    });
    addr
}

#[test]
fn a_tampered_record_aborts_the_session_and_commits_nothing() {
    let Fixture { _dir, src, root, secret, srv } = fixture(false);
    fs::write(src.join("big"), pattern(5 * CHUNK as usize, 3)).unwrap();
    // Byte 200 of a data connection lies in its first record (the handshake takes 78 bytes).
    let proxy = tampering_proxy(srv.addr, 200);
    let mut cfg = config(proxy, &secret, vec![src.join("big")], "big");
    cfg.streams = 2;
    let (r, _) = run(&cfg);
    let err = r.unwrap_err();
    assert!(matches!(err, EngineError::Remote { code: ErrorCode::Auth, .. }), "{err:?}");
    assert!(err.to_string().contains("tampered"), "{err}");
    // The server's session ends on its own time; judge the destination once it has.
    assert!(crate::peer::eventually(Duration::from_secs(30), || srv.active_sessions() == 0));
    // Only the working directory's partial file and journal may stay (for the next run); nothing
    // is committed.
    let kept = entries(&root, |e| e.file_type().unwrap().is_file());
    assert!(!root.join("big").exists(), "nothing may appear under its final name");
    assert!(kept.iter().all(|p| crate::peer::in_work_dir(p)), "{kept:?}");
}

#[test]
fn a_stream_from_another_session_is_refused() {
    let t = scratch();
    let root = t.path().join("root");
    fs::create_dir_all(root.join("d")).unwrap();
    let secret = Secret::generate().unwrap();
    let srv = server(&root, &secret);
    let suite = conn::preferred_suite();
    let open = || {
        let mut c =
            conn::connect(srv.addr, StreamKind::Control, suite, &secret.0, [0; 16], 0, Duration::from_secs(5)).unwrap();
        c.tx.send_frames(&[Frame::Begin(Begin {
            dest: b"d",
            sources: 1,
            chunk_size: CHUNK,
            flags: 0,
            streams: 2,
            modify_window: 0,
        })])
        .unwrap();
        let plain = c.rx.recv().unwrap().unwrap().to_vec();
        assert!(matches!(conn::decode_all(&plain).unwrap()[0], Frame::Target { dest_is_dir: true }));
        c
    };
    let (a, b) = (open(), open());
    assert_ne!(a.session, b.session);
    let join = |psk: &[u8; 32], session, stream| {
        conn::connect(srv.addr, StreamKind::Data, suite, psk, session, stream, Duration::from_secs(5))
    };
    // B's stream key does not open a stream of session A.
    assert!(matches!(join(&b.stream_psk, a.session, 1), Err(EngineError::Proto(ProtoError::Auth))));
    // The control secret itself is not a stream key either.
    assert!(matches!(join(&secret.0, a.session, 1), Err(EngineError::Proto(ProtoError::Auth))));
    // A session that does not exist.
    assert!(matches!(join(&a.stream_psk, [9; 16], 1), Err(EngineError::Refused { code: ErrorCode::UnknownSession })));
    // The right key does join (so the refusals above are not a broken server).
    assert!(join(&a.stream_psk, a.session, 1).is_ok());
}

#[test]
fn serves_several_clients_at_once() {
    let Fixture { _dir, src, root, secret, srv } = fixture(true);
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let cfg = config(srv.addr, &secret, vec![src.clone()], &format!("c{i}"));
            std::thread::spawn(move || run(&cfg).0.map(|r| r.is_complete()))
        })
        .collect();
    for h in handles {
        assert!(h.join().unwrap().unwrap());
    }
    for i in 0..4 {
        assert_same(&src, &root.join(format!("c{i}")));
    }
}

#[test]
fn a_file_of_several_gib_arrives_intact() {
    // Sparse source (fast to read), destination on tmpfs when there is one.
    let base =
        if Path::new("/dev/shm").is_dir() { tempfile::tempdir_in("/dev/shm") } else { tempfile::tempdir() }.unwrap();
    let (src, root) = (base.path().join("src"), base.path().join("root"));
    fs::create_dir_all(&src).unwrap();
    fs::create_dir(&root).unwrap();
    let size = 3 * (1u64 << 30) + 12345;
    let f = fs::File::create(src.join("huge")).unwrap();
    f.set_len(size).unwrap();
    for (i, off) in [0, 1 << 20, (1 << 31) + 17, size - 5000].into_iter().enumerate() {
        std::os::unix::fs::FileExt::write_all_at(&f, &pattern(4096, i as u8), off).unwrap();
    }
    drop(f);
    let secret = Secret::generate().unwrap();
    let srv = server(&root, &secret);
    let mut cfg = config(srv.addr, &secret, vec![src.join("huge")], "huge");
    cfg.chunk_size = 1 << 20;
    cfg.verify = true;
    let (r, errs) = run(&cfg);
    let r = r.unwrap();
    assert!(r.is_complete(), "{errs:?}");
    assert_eq!(r.server.bytes, size);
    let hash = |p: &Path| blake3::Hasher::new().update_reader(fs::File::open(p).unwrap()).unwrap().finalize();
    assert_eq!(fs::metadata(root.join("huge")).unwrap().len(), size);
    assert_eq!(hash(&src.join("huge")), hash(&root.join("huge")));
}

#[test]
fn a_tree_of_100k_files_arrives_in_bounded_memory() {
    let Fixture { _dir, src, root, secret, srv } = fixture(false);
    for d in 0..100 {
        let dir = src.join(format!("d{d:03}"));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..1000 {
            fs::write(dir.join(format!("f{f:04}")), format!("{d}/{f}")).unwrap();
        }
    }
    let (r, errs) = run(&config(srv.addr, &secret, vec![src.clone()], "t"));
    let r = r.unwrap();
    assert!(r.is_complete(), "{errs:?}");
    assert_eq!(r.server.files, 100_000);
    assert_eq!(r.server.dirs, 101);
    let c = compare_trees(&src, &root.join("t"), true).unwrap();
    assert_eq!((c.count, c.files), (0, 100_000), "{:?}", c.differences);
    // Client and server share this process here; the CLI test checks each side separately.
    assert!(r.client_peak_rss < 256 << 20, "peak RSS {} bytes", r.client_peak_rss);
}

#[test]
fn a_fifo_without_devices_is_skipped_and_counted_and_the_rest_still_arrives() {
    let Fixture { _dir, src, root, secret, srv } = fixture(false);
    fs::create_dir_all(src.join("sub")).unwrap();
    fs::write(src.join("good"), b"good").unwrap();
    fs::write(src.join("sub/also-good"), b"fine").unwrap();
    // A FIFO without -D (FLAG_DEVICES): skipped and counted, as rsync's "skipping non-regular
    // file", not an error.
    rustix::fs::mknodat(
        rustix::fs::CWD,
        src.join("fifo").as_path(),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    let (r, errs) = run(&config(srv.addr, &secret, vec![src.clone()], "out"));
    let r = r.unwrap();
    assert!(r.is_complete(), "{errs:?}");
    assert_eq!(r.skipped_specials, 1);
    assert!(errs.is_empty(), "{errs:?}");
    assert!(fs::symlink_metadata(root.join("out/fifo")).is_err());
    assert_eq!(fs::read(root.join("out/good")).unwrap(), b"good");
    assert_eq!(fs::read(root.join("out/sub/also-good")).unwrap(), b"fine");
    assert!(!root.join("out/fifo").exists());
}

#[test]
fn a_source_that_changes_while_read_is_reported_and_not_committed() {
    let base = scratch();
    let (src, root) = (base.path().join("src"), base.path().join("root"));
    fs::create_dir_all(&src).unwrap();
    fs::create_dir(&root).unwrap();
    let path = src.join("moving");
    fs::File::create(&path).unwrap().set_len(1 << 30).unwrap(); // sparse, 1 GiB
    fs::write(src.join("steady"), b"steady").unwrap();
    let secret = Secret::generate().unwrap();
    let srv = server(&root, &secret);
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let toucher = {
        let (done, path) = (done.clone(), path.clone());
        std::thread::spawn(move || {
            // A new modification time every 5 ms, while the copy runs.
            let tick = crossbeam_channel::tick(Duration::from_millis(5));
            let mut t = 1_000_000_000u64;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                t += 1;
                set_mtime(&path, t, 0);
                let _ = tick.recv();
            }
        })
    };
    let mut cfg = config(srv.addr, &secret, vec![src.clone()], "out");
    cfg.chunk_size = 1 << 20;
    let (r, errs) = run(&cfg);
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    toucher.join().unwrap();
    let r = r.unwrap();
    assert!(!r.is_complete());
    assert_eq!(r.local_errors, 1, "{errs:?}");
    assert!(errs.iter().any(|e| e.contains("moving") && e.contains("changed while being read")), "{errs:?}");
    assert!(!root.join("out/moving").exists(), "a changed file must not appear under its name");
    assert_eq!(fs::read(root.join("out/steady")).unwrap(), b"steady");
    assert!(no_temp_files(&root).is_empty());
}

#[test]
fn a_server_of_another_version_is_named_with_both_versions() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let fake = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut hello = [0u8; 28];
        s.read_exact(&mut hello).unwrap();
        s.write_all(b"LNRT\x00\x09\x0a\x00").unwrap(); // version 9, status Version
    });
    let secret = Secret::generate().unwrap();
    let (r, _) = run(&config(addr, &secret, vec![PathBuf::from("/nonexistent")], "x"));
    fake.join().unwrap();
    let err = r.unwrap_err();
    let ours = linerate_proto::PROTOCOL_VERSION;
    assert!(matches!(err, EngineError::Proto(ProtoError::Version { ours: o, theirs: 9 }) if o == ours), "{err:?}");
    assert!(err.to_string().contains(&format!("we speak {ours}, peer speaks 9")), "{err}");
}

#[test]
fn a_silent_authenticated_client_is_dropped_at_the_idle_timeout() {
    let t = scratch();
    let secret = Secret::generate().unwrap();
    let mut cfg = ServerConfig::new("127.0.0.1:0".parse().unwrap(), t.path().to_path_buf(), secret.clone());
    cfg.log = false;
    cfg.idle_timeout = Duration::from_millis(800);
    let srv = Server::bind(cfg).unwrap().spawn();
    let suite = conn::preferred_suite();
    let begin = |c: &mut conn::Secured| {
        c.tx.send_frames(&[Frame::Begin(Begin {
            dest: b"",
            sources: 1,
            chunk_size: CHUNK,
            flags: 0,
            streams: 1,
            modify_window: 0,
        })])
        .unwrap();
        let _target = c.rx.recv().unwrap().unwrap().to_vec();
    };
    let fatal = |c: &mut conn::Secured| {
        let plain = c.rx.recv().unwrap().unwrap().to_vec();
        match &conn::decode_all(&plain).unwrap()[0] {
            Frame::Fatal(f) => {
                assert_eq!(f.code, ErrorCode::Protocol as u16);
                String::from_utf8_lossy(f.message).into_owned()
            }
            other => panic!("expected Fatal, got {other:?}"),
        }
    };
    // Silence ends a session, with a Fatal that says why.
    let mut c =
        conn::connect(srv.addr, StreamKind::Control, suite, &secret.0, [0; 16], 0, Duration::from_secs(5)).unwrap();
    begin(&mut c);
    assert_eq!(srv.active_sessions(), 1);
    let msg = fatal(&mut c);
    assert!(msg.contains("silent"), "{msg}");
    assert!(
        crate::peer::eventually(Duration::from_secs(30), || srv.active_sessions() == 0),
        "the slot must be free again"
    );
    // Keepalives prove the client alive but are not progress: alone, they end it just the same.
    let mut c =
        conn::connect(srv.addr, StreamKind::Control, suite, &secret.0, [0; 16], 0, Duration::from_secs(5)).unwrap();
    begin(&mut c);
    // (When the idle time is counted from, and that keepalives never reset it, is tested on the
    // session machines' virtual clock: crates/proto copy::pair.)
    let mut tx = c.tx;
    let (stop, stopped) = crossbeam_channel::bounded::<()>(1);
    let pinger = std::thread::spawn(move || {
        // A keepalive every 200 ms, until the session is over.
        let tick = crossbeam_channel::tick(Duration::from_millis(200));
        loop {
            crossbeam_channel::select! {
                recv(stopped) -> _ => return,
                recv(tick) -> _ => if tx.keepalive().is_err() { return },
            }
        }
    });
    let plain = c.rx.recv().unwrap().unwrap().to_vec();
    match &conn::decode_all(&plain).unwrap()[0] {
        Frame::Fatal(f) => {
            let msg = String::from_utf8_lossy(f.message);
            assert!(msg.contains("nothing but keepalives"), "{msg}");
        }
        other => panic!("expected Fatal, got {other:?}"),
    }
    let _ = stop.send(());
    pinger.join().unwrap();
    assert!(
        crate::peer::eventually(Duration::from_secs(30), || srv.active_sessions() == 0),
        "the slot must be free again"
    );
}
