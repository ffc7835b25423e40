//! Daemon mode with ed25519 keys, against a real server on loopback: who is admitted, what each
//! key may do, host-key checking on the client, and the signatures' binding to one connection.

use linerate_agent::server::{Server, ServerConfig, ServerHandle};
use linerate_copy::send::{self, CopyConfig, CopyReport, ErrorSink, Progress};
use linerate_net::auth::authorized::KeyAuthConfig;
use linerate_net::auth::keys::{check_known_host, HostCheck, Identity, KeyClient, PublicKey};
use linerate_net::auth::secret::Secret;
use linerate_net::conn;
use linerate_net::{EngineError, UsageError};
use linerate_proto::auth::Signer;
use linerate_proto::frame::{self, Begin, Frame, KeyAuth};
use linerate_proto::ErrorCode;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

struct Fx {
    dir: tempfile::TempDir,
    src: PathBuf,
    root: PathBuf,
    authorized: PathBuf,
    known_hosts: PathBuf,
    host: Arc<Identity>,
    srv: ServerHandle,
}

fn identity(dir: &Path, name: &str) -> Arc<Identity> {
    Arc::new(Identity::write_new(&dir.join(name), name).unwrap())
}

fn write_authorized(path: &Path, text: &str) {
    fs::write(path, text).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).unwrap();
}

/// A key-only server (no shared secret accepted) with `--root root` and `authorized` as its
/// authorized keys; `src` holds two files.
fn fixture(authorized: &str) -> Fx {
    fixture_with(authorized, |_| {})
}

fn fixture_with(authorized: &str, tweak: impl FnOnce(&mut ServerConfig)) -> Fx {
    let dir = tempfile::tempdir().unwrap();
    let (src, root) = (dir.path().join("src"), dir.path().join("root"));
    fs::create_dir_all(src.join("sub")).unwrap();
    fs::write(src.join("a.txt"), b"hello keys").unwrap();
    fs::write(src.join("sub/b.bin"), vec![7u8; 200_000]).unwrap();
    fs::create_dir(&root).unwrap();
    let authorized_path = dir.path().join("authorized_keys");
    write_authorized(&authorized_path, authorized);
    let host = identity(dir.path(), "host_key");
    let mut cfg = ServerConfig::new("127.0.0.1:0".parse().unwrap(), root.clone(), Secret::generate().unwrap());
    cfg.accept_secret = false;
    cfg.keys = Some(KeyAuthConfig { host_key: host.clone(), authorized_keys: authorized_path.clone() });
    cfg.log = false;
    cfg.handshake_timeout = Duration::from_secs(5);
    tweak(&mut cfg);
    let srv = Server::bind(cfg).unwrap().spawn();
    let known_hosts = dir.path().join("config/known_hosts");
    Fx { src, root, authorized: authorized_path, known_hosts, host, srv, dir }
}

impl Fx {
    fn host_name(&self) -> String {
        format!("127.0.0.1:{}", self.srv.addr.port())
    }

    fn client(&self, id: &Arc<Identity>) -> (KeyClient, Arc<Mutex<Vec<String>>>) {
        let notes = Arc::new(Mutex::new(Vec::new()));
        let n2 = notes.clone();
        let mut k = KeyClient::new(id.clone(), self.known_hosts.clone(), self.host_name());
        k.note = Arc::new(move |m| n2.lock().unwrap().push(m));
        (k, notes)
    }

    fn copy(&self, key: KeyClient, dest: &str) -> Result<CopyReport, EngineError> {
        let mut c = CopyConfig::new(
            self.srv.addr,
            Secret::generate().unwrap(),
            vec![self.src.clone()],
            dest.as_bytes().to_vec(),
        );
        c.key_auth = Some(key);
        c.streams = 2;
        c.timeout = Duration::from_secs(5);
        let sink: ErrorSink = Arc::new(|m| panic!("unexpected entry error: {m}"));
        send::copy(&c, Arc::new(Progress::default()), sink)
    }
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
    v.sort();
    v
}

fn remote_err(r: Result<CopyReport, EngineError>) -> (ErrorCode, String) {
    match r {
        Err(EngineError::Remote { code, message }) => (code, message),
        other => panic!("expected a Fatal from the server, got {other:?}"),
    }
}

#[test]
fn an_authorized_key_copies_and_the_host_is_remembered() {
    let dir = tempfile::tempdir().unwrap();
    let me = identity(dir.path(), "me");
    let fx = fixture(&format!("# test\n{}\n", me.public().to_line("me")));
    let (k, notes) = fx.client(&me);
    let r = fx.copy(k.clone(), "out").unwrap();
    assert!(r.is_complete(), "{r:?}");
    assert_eq!(fs::read(fx.root.join("out/a.txt")).unwrap(), b"hello keys");
    assert_eq!(fs::read(fx.root.join("out/sub/b.bin")).unwrap(), vec![7u8; 200_000]);
    // First contact: accept-new wrote the host key and said so, with the fingerprint.
    let kh = fs::read_to_string(&fx.known_hosts).unwrap();
    assert_eq!(kh, format!("{} linerate-ed25519 {}\n", fx.host_name(), fx.host.public().to_base64()));
    let n = notes.lock().unwrap().clone();
    assert_eq!(n.len(), 1);
    assert!(n[0].contains(&fx.host.public().fingerprint()) && n[0].contains("first contact"), "{n:?}");
    // Second contact: the key matches, nothing is added or said.
    let (k2, notes2) = fx.client(&me);
    fx.copy(k2, "out2").unwrap();
    assert!(notes2.lock().unwrap().is_empty());
    assert_eq!(fs::read_to_string(&fx.known_hosts).unwrap(), kh);
}

#[test]
fn an_unknown_key_is_refused_by_fingerprint_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let (me, stranger) = (identity(dir.path(), "me"), identity(dir.path(), "stranger"));
    let fx = fixture(&me.public().to_line("me"));
    let (code, msg) = remote_err(fx.copy(fx.client(&stranger).0, "out"));
    assert_eq!(code, ErrorCode::Auth);
    assert_eq!(msg, format!("key {} is not authorized on this server", stranger.public().fingerprint()));
    assert!(entries(&fx.root).is_empty());
}

#[test]
fn a_read_only_key_is_refused_on_push_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let me = identity(dir.path(), "me");
    let fx = fixture(&format!("ro {}\n", me.public().to_line("reader")));
    let (code, msg) = remote_err(fx.copy(fx.client(&me).0, "out"));
    assert_eq!(code, ErrorCode::Denied);
    assert!(msg.contains(&me.public().fingerprint()) && msg.contains("is read-only on this server"), "{msg}");
    assert!(entries(&fx.root).is_empty());
}

#[test]
fn a_key_with_a_root_writes_only_beneath_it() {
    let dir = tempfile::tempdir().unwrap();
    let (me, other) = (identity(dir.path(), "me"), identity(dir.path(), "other"));
    let own = dir.path().join("own");
    fs::create_dir(&own).unwrap();
    let fx = fixture(&format!(
        "root={},rw,rate=100M {}\n{}\n",
        own.display(),
        me.public().to_line(""),
        other.public().to_line("")
    ));
    fx.copy(fx.client(&me).0, "out").unwrap();
    assert_eq!(fs::read(own.join("out/a.txt")).unwrap(), b"hello keys");
    assert!(entries(&fx.root).is_empty(), "nothing beneath --root");
    // Its root confines it: climbing out is refused as for any destination.
    let r = fx.copy(fx.client(&me).0, "../escape");
    assert!(r.is_err());
    assert!(!dir.path().join("escape").exists());
    // A key without root= still gets --root.
    fx.copy(fx.client(&other).0, "theirs").unwrap();
    assert_eq!(entries(&fx.root), ["theirs"]);
    assert_eq!(entries(&own), ["out"]);
}

/// Run the key handshake by hand up to the client's signature, then send `auth` and a Begin;
/// returns the server's answer: a Fatal's code and message, or `(0, "admitted")`.
fn hand_rolled(fx: &Fx, make: impl FnOnce(&[u8; 32]) -> KeyAuth) -> (u16, String) {
    let (mut sec, hash) = conn::connect_nn(fx.srv.addr, conn::preferred_suite(), Duration::from_secs(5)).unwrap();
    sec.rx.set_timeout(Some(Duration::from_secs(5)));
    let plain = sec.rx.recv().unwrap().unwrap();
    let host = match conn::decode_all(plain).unwrap().as_slice() {
        [Frame::HostAuth(a)] => *a,
        other => panic!("expected HostAuth, got {other:?}"),
    };
    assert_eq!(host.key, fx.host.public().0);
    linerate_proto::auth::verify(Signer::Host, &host.key, &host.signature, &hash).unwrap();
    sec.tx.send_frames(&[Frame::ClientAuth(make(&hash))]).unwrap();
    let begin = Begin { dest: b"out", sources: 1, chunk_size: 1 << 20, flags: 0, streams: 1, modify_window: 0 };
    let _ = sec.tx.send_frames(&[Frame::Begin(begin)]);
    let plain = sec.rx.recv().unwrap().unwrap();
    match conn::decode_all(plain).unwrap().as_slice() {
        [Frame::Fatal(frame::Fatal { code, message })] => (*code, String::from_utf8_lossy(message).into_owned()),
        [Frame::Target { .. }] => (0, "admitted".into()),
        other => panic!("expected Fatal or Target, got {other:?}"),
    }
}

#[test]
fn a_signature_by_another_key_or_for_another_session_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (me, thief) = (identity(dir.path(), "me"), identity(dir.path(), "thief"));
    let fx = fixture(&me.public().to_line("me"));
    // The authorized key, signed by someone else.
    let (code, msg) = hand_rolled(&fx, |h| KeyAuth { key: me.public().0, ..thief.sign(Signer::Client, h) });
    assert_eq!((code, msg.contains("does not verify")), (ErrorCode::Auth as u16, true), "{msg}");
    // The authorized key's own signature, but over another connection's hash (a replay).
    let (code, _) = hand_rolled(&fx, |h| {
        let mut other = *h;
        other[0] ^= 1;
        me.sign(Signer::Client, &other)
    });
    assert_eq!(code, ErrorCode::Auth as u16);
    // The server's own HostAuth reflected back as the client's.
    let host = fx.host.clone();
    write_authorized(&fx.authorized, &format!("{}\n{}\n", me.public().to_line(""), host.public().to_line("")));
    let (code, _) = hand_rolled(&fx, |h| host.sign(Signer::Host, h));
    assert_eq!(code, ErrorCode::Auth as u16);
    // The honest signature passes the same path (so the refusals above are about the signature).
    assert_eq!(hand_rolled(&fx, |h| me.sign(Signer::Client, h)), (0, "admitted".into()));
    assert!(entries(&fx.root).is_empty());
}

#[test]
fn a_changed_host_key_is_refused_by_the_client_and_nothing_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let me = identity(dir.path(), "me");
    let fx = fixture(&me.public().to_line("me"));
    let impostor = PublicKey([0x42; 32]);
    fs::create_dir_all(fx.known_hosts.parent().unwrap()).unwrap();
    fs::write(&fx.known_hosts, format!("# mine\n{} linerate-ed25519 {}\n", fx.host_name(), impostor.to_base64()))
        .unwrap();
    let err = fx.copy(fx.client(&me).0, "out").unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, EngineError::HostKey(_)), "{err:?}");
    assert!(msg.contains("HAS CHANGED") && msg.contains(&fx.known_hosts.display().to_string()), "{msg}");
    assert!(msg.contains("line 2") && msg.contains(&fx.host.public().fingerprint()), "{msg}");
    assert!(entries(&fx.root).is_empty());
    // Strict mode refuses an unknown host too, and writes nothing.
    fs::remove_file(&fx.known_hosts).unwrap();
    let (mut k, _) = fx.client(&me);
    k.strict = true;
    let err = fx.copy(k, "out").unwrap_err().to_string();
    assert!(err.contains("--strict-host-key"), "{err}");
    assert!(!fx.known_hosts.exists());
    assert!(entries(&fx.root).is_empty());
}

#[test]
fn known_hosts_accept_new_then_match() {
    let dir = tempfile::tempdir().unwrap();
    let kh = dir.path().join("kh");
    let k = PublicKey([5; 32]);
    assert_eq!(check_known_host(&kh, "h:1", &k, false).unwrap(), HostCheck::Added);
    assert_eq!(check_known_host(&kh, "h:1", &k, false).unwrap(), HostCheck::Known);
    assert_eq!(fs::read_to_string(&kh).unwrap().lines().count(), 1);
}

#[test]
fn authorized_keys_are_reread_per_session_and_a_lost_file_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let (me, late) = (identity(dir.path(), "me"), identity(dir.path(), "late"));
    let fx = fixture(&me.public().to_line("me"));
    assert_eq!(remote_err(fx.copy(fx.client(&late).0, "a")).0, ErrorCode::Auth);
    // Added while running: admitted at once, no restart.
    write_authorized(&fx.authorized, &format!("{}\n{}\n", me.public().to_line(""), late.public().to_line("")));
    fx.copy(fx.client(&late).0, "a").unwrap();
    // Made read-only while running: refused on the next push.
    write_authorized(&fx.authorized, &format!("ro {}\n", late.public().to_line("")));
    assert_eq!(remote_err(fx.copy(fx.client(&late).0, "b")).0, ErrorCode::Denied);
    // A file that became invalid or vanished refuses everyone; never a fallback to no auth.
    write_authorized(&fx.authorized, &format!("bogus {}\n", me.public().to_line("")));
    let (code, msg) = remote_err(fx.copy(fx.client(&me).0, "c"));
    assert_eq!(code, ErrorCode::Auth);
    assert!(msg.contains("cannot use its authorized keys file"), "{msg}");
    fs::remove_file(&fx.authorized).unwrap();
    assert_eq!(remote_err(fx.copy(fx.client(&me).0, "c")).0, ErrorCode::Auth);
    assert_eq!(entries(&fx.root), ["a"]);
}

#[test]
fn a_malformed_authorized_keys_file_is_refused_at_startup_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let me = identity(dir.path(), "me");
    let ak = dir.path().join("ak");
    write_authorized(&ak, &format!("# ok\n{}\nrw,sudo {}\n", me.public().to_line(""), me.public().to_line("")));
    let mut cfg = ServerConfig::new("127.0.0.1:0".parse().unwrap(), dir.path().into(), Secret::generate().unwrap());
    cfg.keys = Some(KeyAuthConfig { host_key: identity(dir.path(), "host"), authorized_keys: ak.clone() });
    let err = Server::bind(cfg).err().unwrap().to_string();
    assert!(err.contains(&format!("{}:3: unknown option \"sudo\"", ak.display())), "{err}");
}

#[test]
fn auth_modes_do_not_fall_back() {
    let dir = tempfile::tempdir().unwrap();
    let me = identity(dir.path(), "me");
    // A key-only server refuses a shared-secret client (whatever secret it holds).
    let fx = fixture(&me.public().to_line(""));
    let mut c = CopyConfig::new(fx.srv.addr, Secret::generate().unwrap(), vec![fx.src.clone()], b"x".to_vec());
    c.timeout = Duration::from_secs(5);
    let r = send::copy(&c, Arc::new(Progress::default()), Arc::new(|_| {}));
    // ...saying what to use instead.
    assert!(
        matches!(&r, Err(EngineError::Usage(UsageError::Unsupported { how, .. })) if how.contains("--identity")),
        "{r:?}"
    );
    // A secret-only server refuses a key client, saying so.
    let secret = Secret::generate().unwrap();
    let mut cfg = ServerConfig::new("127.0.0.1:0".parse().unwrap(), fx.root.clone(), secret.clone());
    cfg.log = false;
    let plain = Server::bind(cfg).unwrap().spawn();
    let mut c = CopyConfig::new(plain.addr, secret.clone(), vec![fx.src.clone()], b"x".to_vec());
    c.key_auth = Some(fx.client(&me).0);
    c.timeout = Duration::from_secs(5);
    let err = send::copy(&c, Arc::new(Progress::default()), Arc::new(|_| {})).unwrap_err().to_string();
    assert!(err.contains("does not accept key authentication"), "{err}");
    assert!(entries(&fx.root).is_empty());
}

#[test]
fn a_server_with_both_serves_each_client_its_way() {
    let dir = tempfile::tempdir().unwrap();
    let me = identity(dir.path(), "me");
    let secret = Secret::generate().unwrap();
    let s2 = secret.clone();
    let fx = fixture_with(&me.public().to_line(""), move |c| {
        c.accept_secret = true;
        c.secret = s2;
    });
    fx.copy(fx.client(&me).0, "by-key").unwrap();
    let mut c = CopyConfig::new(fx.srv.addr, secret, vec![fx.src.clone()], b"by-secret".to_vec());
    c.timeout = Duration::from_secs(5);
    send::copy(&c, Arc::new(Progress::default()), Arc::new(|_| {})).unwrap();
    assert_eq!(entries(&fx.root), ["by-key", "by-secret"]);
    let _ = &fx.dir;
}

impl Fx {
    fn pull(&self, key: KeyClient, from: &str, into: &Path) -> Result<CopyReport, EngineError> {
        let mut c = CopyConfig::new(self.srv.addr, Secret::generate().unwrap(), Vec::new(), Vec::new());
        c.key_auth = Some(key);
        c.streams = 2;
        c.timeout = Duration::from_secs(5);
        let sink: ErrorSink = Arc::new(|m| panic!("unexpected entry error: {m}"));
        linerate_copy::pull::pull(&c, from.as_bytes(), into, Arc::new(Progress::default()), sink)
    }
}

#[test]
fn a_read_only_key_pulls_beneath_its_own_root_only() {
    let dir = tempfile::tempdir().unwrap();
    let me = identity(dir.path(), "me");
    let own = dir.path().join("own");
    fs::create_dir_all(own.join("tree")).unwrap();
    fs::write(own.join("tree/mine.txt"), b"beneath the key's root").unwrap();
    let fx = fixture(&format!("ro,root={} {}\n", own.display(), me.public().to_line("reader")));
    fs::write(fx.root.join("server-wide.txt"), b"beneath --root").unwrap();
    let into = dir.path().join("got");
    fs::create_dir(&into).unwrap();
    // Reading is what a read-only key is for.
    let r = fx.pull(fx.client(&me).0, "tree", &into).unwrap();
    assert!(r.is_complete(), "{r:?}");
    assert_eq!(fs::read(into.join("tree/mine.txt")).unwrap(), b"beneath the key's root");
    // --root is not its root, and climbing out of its own is refused.
    assert!(fx.pull(fx.client(&me).0, "server-wide.txt", &into).is_err());
    assert!(fx.pull(fx.client(&me).0, "../root/server-wide.txt", &into).is_err());
    assert_eq!(entries(&into), ["tree"]);
    // Its root is untouched by the reads.
    assert_eq!(entries(&own), ["tree"]);
}

#[test]
fn a_keys_rate_paces_its_pushes_and_pulls() {
    let dir = tempfile::tempdir().unwrap();
    let (slow, free) = (identity(dir.path(), "slow"), identity(dir.path(), "free"));
    let fx = fixture(&format!("rate=8M {}\n{}\n", slow.public().to_line("slow"), free.public().to_line("free")));
    let big = fx.src.join("big.bin");
    fs::write(&big, vec![3u8; 4_000_000]).unwrap();
    // About 4.2 MB in the tree: at 8 Mbit/s that is at least 4 s (less a small burst).
    let bits = 8.0 * 4_210_010.0;
    let expect = bits / 8e6;
    let t = std::time::Instant::now();
    fx.copy(fx.client(&slow).0, "slow").unwrap();
    let took = t.elapsed().as_secs_f64();
    assert!(took >= 0.8 * expect, "push took {took:.2} s: not paced to 8 Mbit/s (expected about {expect:.2} s)");
    let into = dir.path().join("pulled");
    fs::create_dir(&into).unwrap();
    let t = std::time::Instant::now();
    fx.pull(fx.client(&slow).0, "slow", &into).unwrap();
    let took = t.elapsed().as_secs_f64();
    assert!(took >= 0.8 * expect, "pull took {took:.2} s: not paced to 8 Mbit/s (expected about {expect:.2} s)");
    assert_eq!(fs::read(into.join("slow/big.bin")).unwrap().len(), 4_000_000);
    // A key without rate= is not held to it (loose bound: half the paced time).
    let t = std::time::Instant::now();
    fx.copy(fx.client(&free).0, "free").unwrap();
    let took = t.elapsed().as_secs_f64();
    assert!(took < 0.5 * expect, "an unlimited key took {took:.2} s");
}
