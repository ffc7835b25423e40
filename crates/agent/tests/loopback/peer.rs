//! A hostile peer for the hostile-peer suite: it completes a correct handshake with
//! `linerate_net::conn` and then sends whatever a malicious client would (frames out of order,
//! bad names, raw records, lengths beyond every cap), and a scratch layout that proves nothing
//! was created or changed outside the server's root.

use linerate_agent::server::{Server, ServerConfig, ServerHandle};
use linerate_net::auth::secret::Secret;
use linerate_net::conn::{self, Secured};
use linerate_proto::frame::{Begin, Finish, Frame, Summary, Time};
use linerate_proto::hello::StreamKind;
use linerate_proto::record::HEADER_LEN;
use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

/// Chunk size of every hostile session.
pub const CS: u32 = 64 * 1024;
/// How long a test waits for the server's verdict on one session.
pub const VERDICT_WAIT: Duration = Duration::from_secs(15);

static SERVER_PANICS: AtomicUsize = AtomicUsize::new(0);

/// Count panics on unnamed threads (the server's; test threads are named) from now on.
pub fn watch_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current().name().is_none() {
                SERVER_PANICS.fetch_add(1, SeqCst);
            }
            prev(info);
        }));
    });
}

/// Panics seen on server threads so far (in this test process).
pub fn server_panics() -> usize {
    SERVER_PANICS.load(SeqCst)
}

/// A scratch directory on tmpfs where there is one.
pub fn scratch() -> tempfile::TempDir {
    if Path::new("/dev/shm").is_dir() {
        if let Ok(t) = tempfile::Builder::new().prefix("linerate-hostile-").tempdir_in("/dev/shm") {
            return t;
        }
    }
    tempfile::tempdir().unwrap()
}

/// Everything about a tree that a stray write could change: type, size, mode, mtime, content
/// hash of files, link targets.
pub type Snapshot = BTreeMap<PathBuf, String>;

/// Snapshot `dir`, skipping `skip` (the server's root) entirely.
pub fn snapshot(dir: &Path, skip: Option<&Path>) -> Snapshot {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            if Some(p.as_path()) == skip {
                continue;
            }
            let Ok(m) = fs::symlink_metadata(&p) else { continue };
            let ft = m.file_type();
            let what = if ft.is_symlink() {
                format!("link -> {:?}", fs::read_link(&p).ok())
            } else if ft.is_dir() {
                stack.push(p.clone());
                "dir".to_string()
            } else {
                let hash = fs::read(&p).map(|b| blake3::hash(&b).to_hex().to_string()).unwrap_or_default();
                format!("file {hash}")
            };
            out.insert(
                p,
                format!("{what} size {} mode {:o} mtime {}.{}", m.len(), m.mode(), m.mtime(), m.mtime_nsec()),
            );
        }
    }
    out
}

/// Files beneath `dir` whose name marks them as temporary (`.linerate-tmp-*`, see
/// `confined::temp_name`).
pub fn temp_files(dir: &Path) -> Vec<PathBuf> {
    snapshot(dir, None)
        .into_keys()
        // Temporary files, not the working directory of resumable partial files, which an
        // interrupted session keeps on purpose for the next run (see `workdir`).
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(".linerate-tmp-")))
        .collect()
}

/// Whether `p` is a receiver's working directory or lies in one.
pub fn in_work_dir(p: &Path) -> bool {
    p.components().any(|c| c.as_os_str().to_string_lossy().starts_with(".linerate-work-"))
}

/// The state of /etc/passwd, the classic target of a write through a planted symlink.
fn passwd() -> String {
    fs::symlink_metadata("/etc/passwd")
        .map(|m| format!("{} {} {}.{}", m.len(), m.mode(), m.mtime(), m.mtime_nsec()))
        .unwrap_or_default()
}

/// A scratch layout: `root/` served by an in-process server, `outside/` with a canary file that
/// must never change, and everything else in the scratch directory snapshotted at the start.
pub struct Fx {
    /// The scratch directory.
    pub dir: tempfile::TempDir,
    /// The server's root.
    pub root: PathBuf,
    /// A directory beside the root that hostile input aims at.
    pub outside: PathBuf,
    /// The server's secret.
    pub secret: Secret,
    /// The server.
    pub srv: ServerHandle,
    before: Snapshot,
    passwd: String,
}

impl Fx {
    /// A server with short timeouts (handshake 2 s, idle 3 s).
    pub fn new() -> Fx {
        Fx::with(|_| {})
    }

    /// A server with short timeouts, adjusted by `f`.
    pub fn with(f: impl FnOnce(&mut ServerConfig)) -> Fx {
        watch_panics();
        let dir = scratch();
        let root = dir.path().join("root");
        let outside = dir.path().join("outside");
        fs::create_dir(&root).unwrap();
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("canary"), b"must not change").unwrap();
        let secret = Secret::generate().unwrap();
        let mut cfg = ServerConfig::new("127.0.0.1:0".parse().unwrap(), root.clone(), secret.clone());
        cfg.log = false;
        cfg.handshake_timeout = Duration::from_secs(2);
        cfg.idle_timeout = Duration::from_secs(3);
        f(&mut cfg);
        let srv = Server::bind(cfg).unwrap().spawn();
        let before = snapshot(dir.path(), Some(&root));
        Fx { dir, root, outside, secret, srv, before, passwd: passwd() }
    }

    /// An authenticated control connection.
    pub fn client(&self) -> Client {
        Client::connect(self.srv.addr, &self.secret)
    }

    /// A session that sent `Begin` for `dest` with `streams` data streams, all connected.
    pub fn session(&self, dest: &[u8], streams: u16) -> Client {
        let mut c = self.client();
        c.begin(dest, streams, 0).unwrap();
        c.open_streams();
        c
    }

    /// Nothing outside the root changed, /etc/passwd is untouched, no temporary file is left
    /// beneath the root, and no server thread panicked.
    pub fn check_confined(&self) {
        // A session's cleanup runs when it ends.
        eventually(Duration::from_secs(30), || temp_files(&self.root).is_empty());
        assert_eq!(temp_files(&self.root), Vec::<PathBuf>::new(), "temporary files left beneath the root");
        let after = snapshot(self.dir.path(), Some(&self.root));
        assert_eq!(after, self.before, "something outside the root changed");
        assert_eq!(passwd(), self.passwd, "/etc/passwd changed");
        assert_eq!(server_panics(), 0, "a server thread panicked");
    }
}

/// How a hostile session ended, as the client saw it on the control stream.
#[derive(Debug)]
pub enum Verdict {
    /// The server finished with a summary; `errors` are the per-entry reports before it.
    Summary {
        /// The summary.
        summary: Summary,
        /// (code, path, message) of each `Error` frame.
        errors: Vec<(u16, Vec<u8>, String)>,
    },
    /// The server ended the session with a `Fatal` frame.
    Fatal {
        /// Its code.
        code: u16,
        /// Its message.
        message: String,
    },
    /// The connection closed (or failed) without a verdict; why, as the client saw it.
    Closed(#[allow(dead_code)] String),
}

impl Verdict {
    /// The fatal code and message, or a panic naming what came instead.
    pub fn fatal(&self) -> (u16, &str) {
        match self {
            Verdict::Fatal { code, message } => (*code, message),
            other => panic!("expected a Fatal frame, got {other:?}"),
        }
    }
}

/// An authenticated client that sends whatever it is told to.
pub struct Client {
    /// The control connection.
    pub ctl: Secured,
    /// Data streams 1..=n, once opened.
    pub data: Vec<Secured>,
    addr: SocketAddr,
    streams: u16,
}

impl Client {
    /// Connect and authenticate a control connection.
    pub fn connect(addr: SocketAddr, secret: &Secret) -> Client {
        let ctl = conn::connect(
            addr,
            StreamKind::Control,
            conn::preferred_suite(),
            &secret.0,
            [0; 16],
            0,
            Duration::from_secs(5),
        )
        .unwrap();
        bound_writes(&ctl);
        Client { ctl, data: Vec::new(), addr, streams: 0 }
    }

    /// Send `Begin` and read the answer: whether the destination is a directory, or the fatal.
    pub fn begin(&mut self, dest: &[u8], streams: u16, flags: u32) -> Result<bool, Verdict> {
        self.streams = streams;
        self.ctl
            .tx
            .send_frames(&[Frame::Begin(Begin { dest, sources: 1, chunk_size: CS, flags, streams, modify_window: 0 })])
            .unwrap();
        self.ctl.rx.set_timeout(Some(VERDICT_WAIT));
        let plain = match self.ctl.rx.recv() {
            Ok(Some(p)) => p.to_vec(),
            other => return Err(Verdict::Closed(format!("{other:?}"))),
        };
        match conn::decode_all(&plain).unwrap().first() {
            Some(Frame::Target { dest_is_dir }) => Ok(*dest_is_dir),
            Some(Frame::Fatal(f)) => {
                Err(Verdict::Fatal { code: f.code, message: String::from_utf8_lossy(f.message).into_owned() })
            }
            other => panic!("unexpected answer to Begin: {other:?}"),
        }
    }

    /// Connect and authenticate every data stream announced in `Begin`.
    pub fn open_streams(&mut self) {
        for i in 1..=self.streams {
            let s = conn::connect(
                self.addr,
                StreamKind::Data,
                self.ctl.suite,
                &self.ctl.stream_psk,
                self.ctl.session,
                i,
                Duration::from_secs(5),
            )
            .unwrap();
            bound_writes(&s);
            self.data.push(s);
        }
    }

    /// Send frames as one record on data stream `i` (1-based); errors ignored (the server may
    /// already have closed the stream, which the verdict shows).
    pub fn send(&mut self, i: usize, frames: &[Frame<'_>]) {
        let _ = self.data[i - 1].tx.send_frames(frames);
    }

    /// Seal `plain` (any bytes, not necessarily frames) as one record on data stream `i`.
    pub fn send_plain(&mut self, i: usize, plain: &[u8]) {
        let mut buf = vec![0u8; HEADER_LEN];
        buf.extend_from_slice(plain);
        let _ = self.data[i - 1].tx.send_buf(&mut buf);
    }

    /// Seal `plain` on stream `i` and return the wire bytes of the record (also sent there).
    pub fn seal_on(&mut self, i: usize, plain: &[u8]) -> Vec<u8> {
        let mut buf = vec![0u8; HEADER_LEN];
        buf.extend_from_slice(plain);
        self.data[i - 1].tx.send_buf(&mut buf).unwrap();
        buf
    }

    /// Write raw bytes (no record layer) on data stream `i`, or on control for `i == 0`.
    pub fn raw(&mut self, i: usize, bytes: &[u8]) {
        let s = if i == 0 { &self.ctl } else { &self.data[i - 1] };
        if let Some(mut sock) = s.rx.socket() {
            let _ = sock.write_all(bytes);
        }
    }

    /// `End` on every data stream, then `Finish` with these totals.
    pub fn end_all(&mut self, fin: Finish) {
        for i in 1..=self.data.len() {
            self.send(i, &[Frame::End]);
        }
        let _ = self.ctl.tx.send_frames(&[Frame::Finish(fin)]);
    }

    /// Read the control stream until a `Summary`, a `Fatal`, or its end.
    pub fn verdict(&mut self) -> Verdict {
        self.ctl.rx.set_timeout(Some(VERDICT_WAIT));
        let mut errors = Vec::new();
        loop {
            let plain = match self.ctl.rx.recv() {
                Ok(Some(p)) => p.to_vec(),
                Ok(None) => return Verdict::Closed("end of stream".into()),
                Err(e) => return Verdict::Closed(e.to_string()),
            };
            for f in conn::decode_all(&plain).unwrap() {
                match f {
                    Frame::Error(e) => {
                        errors.push((e.code, e.path.to_vec(), String::from_utf8_lossy(e.message).into_owned()))
                    }
                    Frame::Summary(summary) => return Verdict::Summary { summary, errors },
                    Frame::Fatal(f) => {
                        return Verdict::Fatal {
                            code: f.code,
                            message: String::from_utf8_lossy(f.message).into_owned(),
                        }
                    }
                    other => panic!("unexpected frame from the server: {other:?}"),
                }
            }
        }
    }
}

/// A server that gave up may leave a full window behind (the kernel keeps an orphaned socket's
/// unread data for a while); this hostile client does not wait on it for long.
fn bound_writes(s: &Secured) {
    if let Some(sock) = s.rx.socket() {
        let _ = sock.set_write_timeout(Some(Duration::from_secs(3)));
    }
}

/// A raw TCP connection to `addr` (no preamble sent).
pub fn raw_tcp(addr: SocketAddr) -> TcpStream {
    TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap()
}

/// A modification time for hostile entries.
pub const T0: Time = Time { sec: 1_000_000_000, nsec: 0 };

/// Whether a condition became true within a bound (for state that has no event to await).
pub use linerate_model::testkit::eventually;

/// `op`'s result; the test fails if it takes longer than `limit`. A generous bound that only
/// guards against a hang (the timing rules themselves are tested on the session machines'
/// virtual clock, crates/proto `copy::pair`), awaited on a channel rather than measured.
pub fn within<T: Send>(limit: Duration, what: &str, op: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        let (tx, rx) = crossbeam_channel::bounded(1);
        s.spawn(move || {
            let _ = tx.send(op());
        });
        rx.recv_timeout(limit).unwrap_or_else(|_| panic!("{what}: still running after {limit:?}"))
    })
}
