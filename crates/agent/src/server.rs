//! `linerate serve`: accepts sessions from many clients at once. Each connection gets a thread
//! for its handshake, bounded in number (in all and per source address) and in time, so slow or
//! unauthenticated peers cannot hold the server: those rules, and the stages of a shutdown, are
//! [`linerate_proto::admit::Admission`], a machine without a clock that the accept loop drives
//! (it waits on a [`mio`] poll for a connection, the machine's next deadline, or a wake-up from
//! a stop or a `--once` session's end). Every handler thread holds a
//! [`linerate_model::shutdown::TaskGuard`]; a shutdown waits on them with the machine's deadlines. The first frame of a session says what it is:
//! `Begin` starts a copy (one thread per stream), `BenchRequest` a benchmark session
//! ([`linerate_bench::server`]), `MeshRequest` a test this agent runs against another agent (a
//! `mesh` key only, [`crate::mesh`]).

use crate::log::{Field, Level, Log, LogFormat};
use crate::metrics::{Ended, Kind, Metrics};
use linerate_bench::server::{self as bench_server, BenchServerConfig};
use linerate_copy::confined;
use linerate_copy::filter::{Filter, FilterError, TreeFilter};
use linerate_copy::recv::{Abort, Outcome, RecvSession, SessionParams};
use linerate_model::shutdown::{Shutdown, Stopper, Tasks};
use linerate_model::units::format_size_iec;
use linerate_net::accept::{Accepted, Acceptor};
use linerate_net::auth::authorized::{Grant, KeyAuthConfig};
use linerate_net::auth::secret::Secret;
use linerate_net::conn::{self, Admit};
use linerate_net::rate::{Governor, SessionRate};
use linerate_net::{EngineError, UsageError};
use linerate_proto::admit::{self, Admission, AdmitConfig, HandshakeId, Verdict};
use linerate_proto::frame::{self, Frame, Placement};
use linerate_proto::handshake::KEY_LEN;
use linerate_proto::hello::{AuthMode, SessionId, StreamKind};
use linerate_proto::{caps, ErrorCode, ProtoError};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Settings of the server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Every write is confined beneath this directory; without one, copies are refused and
    /// only benchmarks are served.
    pub root: Option<PathBuf>,
    /// The shared secret clients must know.
    pub secret: Secret,
    /// Accept shared-secret sessions (`--key-file`). False for a key-only daemon, whose
    /// `secret` is then a random one nobody knows.
    pub accept_secret: bool,
    /// Daemon mode: accept public-key sessions with this host key and authorized keys.
    pub keys: Option<KeyAuthConfig>,
    /// Serve one session, then exit.
    pub once: bool,
    /// With `once`: give up if no session starts within this time.
    pub first_connect_deadline: Option<Duration>,
    /// Most sessions at once.
    pub max_sessions: usize,
    /// Most connections in their handshake at once.
    pub max_handshakes: usize,
    /// Time allowed from TCP accept to a finished handshake and `Begin`.
    pub handshake_timeout: Duration,
    /// How long a stream may stay silent mid-session.
    pub idle_timeout: Duration,
    /// Most connections from one source address in their handshake at once.
    pub max_handshakes_per_source: usize,
    /// Benchmark admission caps.
    pub bench: BenchServerConfig,
    /// Print one line per session on stderr.
    pub log: bool,
    /// How log lines are written (`serve --log-format`).
    pub log_format: LogFormat,
    /// Most bit/s of one copy session (`serve --max-rate-per-client`); `None`: no cap.
    pub rate_per_client: Option<u64>,
    /// Most bit/s of all copy sessions together, split fairly (`serve --max-rate-total`).
    pub rate_total: Option<u64>,
    /// How the paths a client names (a push's destination, a pull's source) are resolved against
    /// `root`.
    pub paths: PathMode,
    /// Most bytes of record buffers all copy sessions together may hold (`serve
    /// --max-buffer-memory`). Each push reserves what its streams can need when it starts
    /// (streams × the data record cap of its chunk size, plus its control stream's) and is
    /// refused as busy when that is not free; buffers grow only as record bytes arrive.
    pub max_buffer_memory: usize,
    /// On shutdown ([`Server::stopper`], `serve` on SIGTERM/SIGINT): how long running sessions
    /// may go on to finish before they are aborted (`serve --shutdown-grace`).
    pub shutdown_grace: Duration,
    /// Serve the counters in the Prometheus text format here (`serve --metrics`).
    pub metrics: Option<SocketAddr>,
    /// Networks a mesh task may send this agent's tests to (`serve --mesh-targets`); none: any
    /// address the agent reaches.
    pub mesh_targets: Option<Vec<ipnet::IpNet>>,
    /// A push may ask to keep owners and groups (`-o`/`-g`, part of `-a`): `serve --keep-owners`,
    /// or a server running as its user (ssh, a local copy). A daemon without it refuses them.
    pub keep_owners: bool,
    /// A push may create devices, FIFOs and sockets (`-D`, part of `-a`): `serve
    /// --allow-devices`, or a server running as its user. A daemon without it refuses them.
    pub allow_devices: bool,
}

/// After a shutdown's grace, how long aborted sessions have to end before the server stops
/// waiting for them.
pub const ABORT_WAIT: Duration = Duration::from_secs(10);

/// Most bytes of record buffers one copy session may reserve; a push that would need more
/// (streams × chunk size) is refused with a message naming both.
pub const MAX_SESSION_BUFFERS: usize = 256 << 20;

/// How a server resolves the paths its clients name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PathMode {
    /// A daemon's clients: beneath `root`, component by component, never following a symlink and
    /// never leaving it (`..` refused).
    #[default]
    BeneathRoot,
    /// A server started through ssh for its own user (`serve --once --ssh`), resolving paths the
    /// way scp does: relative to `root` (the login directory), absolute paths allowed, symlinks and
    /// `..` in the named path followed as the operating system allows that user. Only the named
    /// path is resolved this way: entries inside the transferred tree stay confined beneath it
    /// by directory handle, as in [`PathMode::BeneathRoot`].
    AsUser,
}

impl ServerConfig {
    /// Defaults for everything but address, root and secret.
    pub fn new(listen: SocketAddr, root: PathBuf, secret: Secret) -> ServerConfig {
        ServerConfig::bench_only(listen, secret).with_root(root)
    }

    /// A server for benchmarks only (no `--root`).
    pub fn bench_only(listen: SocketAddr, secret: Secret) -> ServerConfig {
        ServerConfig {
            listen,
            root: None,
            secret,
            accept_secret: true,
            keys: None,
            once: false,
            first_connect_deadline: None,
            max_sessions: 64,
            max_handshakes: 128,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            max_handshakes_per_source: 16,
            bench: BenchServerConfig::default(),
            log: true,
            log_format: LogFormat::Text,
            rate_per_client: None,
            rate_total: None,
            paths: PathMode::BeneathRoot,
            max_buffer_memory: 1 << 30,
            shutdown_grace: Duration::from_secs(30),
            metrics: None,
            mesh_targets: None,
            keep_owners: false,
            allow_devices: false,
        }
    }

    /// A one-session server started through ssh for the ssh user (`linerate serve --once --ssh`):
    /// paths resolve as that user names them, relative to `home` ([`PathMode::AsUser`]); it gives
    /// up when nobody connects within `deadline`, and logs nothing (the client reports).
    pub fn ssh_user(listen: SocketAddr, secret: Secret, home: PathBuf, deadline: Duration) -> ServerConfig {
        let mut cfg = ServerConfig::new(listen, home, secret);
        cfg.paths = PathMode::AsUser;
        cfg.once = true;
        cfg.first_connect_deadline = Some(deadline);
        cfg.log = false;
        // As the ssh user, with that user's privileges (rsync over ssh does the same).
        cfg.keep_owners = true;
        cfg.allow_devices = true;
        cfg
    }

    /// Serve copies beneath `root` too.
    pub fn with_root(mut self, root: PathBuf) -> ServerConfig {
        self.root = Some(root);
        self
    }
}

/// A live session: its data-stream key and its state.
type SessionEntry = (zeroize::Zeroizing<[u8; KEY_LEN]>, Sink);

/// Where a session's data streams go.
#[derive(Clone)]
enum Sink {
    /// A push: this server receives.
    Recv(Arc<RecvSession>),
    /// A pull: this server sends, once every stream is connected.
    Send(Arc<Collect>),
}

/// The data streams of a pull, gathered as they connect.
struct Collect {
    streams: u16,
    conns: Mutex<Vec<Option<conn::Secured>>>,
    changed: std::sync::Condvar,
}

struct Shared {
    cfg: ServerConfig,
    root: Option<OwnedFd>,
    tests: AtomicUsize,
    sessions: Mutex<HashMap<SessionId, SessionEntry>>,
    /// Handshake and session slots, deadlines, the shutdown's stages.
    admission: Mutex<Admission>,
    /// The sockets of connections in their handshake, to close those the admission says to.
    pending: Mutex<HashMap<HandshakeId, TcpStream>>,
    addr: SocketAddr,
    /// How the first session of a `--once` server ended.
    done: Mutex<Option<Outcome>>,
    /// Wakes the accept loop (a `--once` session ended).
    waker: Arc<mio::Waker>,
    stopper: Stopper,
    shutdown: Shutdown,
    /// Rate caps and the fair split of copy sessions.
    rates: Arc<Governor>,
    /// Bytes of record buffers reserved by running copy sessions.
    buffers: AtomicUsize,
    /// Sessions running, to end them at shutdown: their control socket and, for a push, the
    /// receiving session.
    running: Mutex<HashMap<u64, Running>>,
    next_running: std::sync::atomic::AtomicU64,
    /// The counters `--metrics` serves.
    metrics: Arc<Metrics>,
}

/// A running session, as shutdown sees it.
struct Running {
    control: Option<TcpStream>,
    recv: Option<Arc<RecvSession>>,
}

/// Removes a session from [`Shared::running`] when it ends.
struct RunningGuard<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Drop for RunningGuard<'_> {
    fn drop(&mut self) {
        self.shared.running.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.id);
    }
}

/// Record-buffer bytes reserved for one session, given back when it ends.
struct Reservation<'a> {
    shared: &'a Shared,
    bytes: usize,
}

impl Shared {
    /// One log line, unless logging is off (`serve --quiet`).
    fn log(&self, level: Level, msg: &str, fields: &[Field<'_>]) {
        if self.cfg.log {
            Log::new(self.cfg.log_format).emit(level, msg, fields);
        }
    }

    /// Register a running session (its control socket) until the guard drops.
    fn run_session(&self, control: Option<TcpStream>) -> RunningGuard<'_> {
        let id = self.next_running.fetch_add(1, Relaxed);
        self.running.lock().unwrap_or_else(PoisonError::into_inner).insert(id, Running { control, recv: None });
        RunningGuard { shared: self, id }
    }

    fn admission(&self) -> MutexGuard<'_, Admission> {
        self.admission.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Close the connection of handshake `id` (out of time, evicted, or aborted).
    fn close_pending(&self, id: HandshakeId) {
        if let Some(s) = self.pending.lock().unwrap_or_else(PoisonError::into_inner).remove(&id) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    /// Act on what the admission says; `Err` with the event that ends the server's run.
    fn act(&self) -> Result<(), admit::Event> {
        loop {
            let ev = self.admission().poll_event();
            match ev {
                None => return Ok(()),
                Some(admit::Event::Close(id)) => self.close_pending(id),
                Some(admit::Event::AbortSessions) => self.abort_running(),
                Some(e @ (admit::Event::NoClient | admit::Event::GiveUp)) => return Err(e),
            }
        }
    }

    /// After the accept loop ended on a stop: let running sessions finish within the grace, then
    /// abort the rest cleanly (a push's receiver removes its unfinished files and keeps resumable
    /// partial files; nothing unfinished is ever under a final name), and wait for them to end —
    /// until every handler's guard is dropped, or the admission's last deadline.
    fn drain(&self, mut tasks: Tasks) {
        let done = tasks.closing().clone();
        let mut hurry = self.shutdown.hurried().clone();
        loop {
            if self.act().is_err() {
                return;
            }
            let Some(at) = self.admission().poll_timeout() else { return };
            crossbeam_channel::select! {
                recv(done) -> _ => return,
                recv(hurry) -> _ => {
                    self.admission().handle_stop(Instant::now());
                    hurry = crossbeam_channel::never();
                }
                default(at.saturating_duration_since(Instant::now())) => {
                    self.admission().handle_timeout(Instant::now());
                }
            }
        }
    }

    /// Abort the sessions still running (the grace is over, or the stop was repeated).
    fn abort_running(&self) {
        let running: Vec<(Option<TcpStream>, Option<Arc<RecvSession>>)> = self
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .map(|r| (r.control.as_ref().and_then(|s| s.try_clone().ok()), r.recv.clone()))
            .collect();
        if running.is_empty() {
            return;
        }
        let msg = format!("shutting down: aborting {} session(s) still running", running.len());
        self.log(Level::Warn, &msg, &[("sessions", running.len().into())]);
        for (control, recv) in running {
            match recv {
                Some(session) => session
                    .abort(Abort::new(ErrorCode::Busy, "the server is shutting down; run the copy again to resume it")),
                None => {
                    if let Some(s) = control {
                        let _ = s.shutdown(std::net::Shutdown::Both);
                    }
                }
            }
        }
    }

    /// A session ended: the first one's outcome ends a `--once` server's accept loop.
    fn session_done(&self, outcome: Outcome) {
        if !self.cfg.once {
            return;
        }
        let mut done = self.done.lock().unwrap_or_else(PoisonError::into_inner);
        if done.is_none() {
            *done = Some(outcome);
            let _ = self.waker.wake();
        }
    }

    /// Let shutdown abort running session `id` through its receiver (a push).
    fn track_recv(&self, id: u64, session: &Arc<RecvSession>) {
        if let Some(r) = self.running.lock().unwrap_or_else(PoisonError::into_inner).get_mut(&id) {
            r.recv = Some(session.clone());
        }
    }

    /// Reserve `bytes` of record buffers, or None when the server's budget has no room.
    fn reserve(&self, bytes: usize) -> Option<Reservation<'_>> {
        let limit = self.cfg.max_buffer_memory;
        self.buffers
            .fetch_update(Relaxed, Relaxed, |used| used.checked_add(bytes).filter(|&n| n <= limit))
            .ok()
            .map(|_| Reservation { shared: self, bytes })
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.shared.buffers.fetch_sub(self.bytes, Relaxed);
    }
}

/// A bound server.
pub struct Server {
    acceptor: Acceptor,
    shared: Arc<Shared>,
    metrics_addr: Option<SocketAddr>,
    /// Ends the metrics endpoint when the server's run ends, or when a server never run is
    /// dropped.
    metrics_stop: StopOnDrop,
}

/// Stops its [`Stopper`] when dropped.
struct StopOnDrop(Stopper);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// Handle to a server running on a background thread.
pub struct ServerHandle {
    /// Where it listens.
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<Result<Option<Outcome>, EngineError>>>,
}

impl ServerHandle {
    /// Stop accepting and wait for the accept loop to end.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.shared.stopper.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Sessions currently running.
    pub fn active_sessions(&self) -> usize {
        self.shared.admission().sessions()
    }

    /// Copy sessions currently sharing `rate_total`.
    pub fn paced_sessions(&self) -> usize {
        self.shared.rates.sessions()
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl Server {
    /// Open the root and bind the address.
    pub fn bind(cfg: ServerConfig) -> Result<Server, EngineError> {
        if let Some(k) = &cfg.keys {
            // Refuse a malformed file at startup, naming the line; sessions re-read it.
            linerate_net::auth::authorized::AuthorizedKeys::load(&k.authorized_keys)?;
        }
        if !cfg.accept_secret && cfg.keys.is_none() {
            return Err(UsageError::Server("the server accepts neither a shared secret nor keys".into()).into());
        }
        let root = match &cfg.root {
            Some(r) => Some(confined::open_root(r).map_err(|e| EngineError::file(r, e))?),
            None => None,
        };
        let listener =
            TcpListener::bind(cfg.listen).map_err(|e| EngineError::net(format!("listening on {}", cfg.listen), e))?;
        let addr = listener.local_addr().map_err(|e| EngineError::net("local address", e))?;
        let acceptor = Acceptor::new(listener).map_err(|e| EngineError::net("watching the listener", e))?;
        let rates = Governor::new(cfg.rate_total, cfg.rate_per_client);
        let metrics = Arc::new(Metrics::default());
        let metrics_stop = StopOnDrop(Stopper::new());
        let metrics_addr = match cfg.metrics {
            Some(at) => {
                let l = TcpListener::bind(at).map_err(|e| EngineError::net(format!("serving metrics on {at}"), e))?;
                let bound = l.local_addr().map_err(|e| EngineError::net("local address", e))?;
                let (m, r) = (metrics.clone(), rates.clone());
                crate::metrics::spawn_http(l, Arc::new(move || m.render(r.paced_bps())), metrics_stop.0.shutdown())
                    .map_err(|e| EngineError::net(format!("serving metrics on {at}"), e))?;
                Some(bound)
            }
            None => None,
        };
        let admit_cfg = AdmitConfig {
            max_handshakes: cfg.max_handshakes,
            max_handshakes_per_source: cfg.max_handshakes_per_source,
            handshake_timeout: cfg.handshake_timeout,
            max_sessions: cfg.max_sessions,
            once: cfg.once,
            first_connect: cfg.first_connect_deadline,
            shutdown_grace: cfg.shutdown_grace,
            abort_wait: ABORT_WAIT,
        };
        let stopper = Stopper::new();
        acceptor.wake_on(&stopper.shutdown());
        let shared = Arc::new(Shared {
            cfg,
            root,
            tests: AtomicUsize::new(0),
            sessions: Mutex::new(HashMap::new()),
            admission: Mutex::new(Admission::new(admit_cfg, Instant::now())),
            pending: Mutex::new(HashMap::new()),
            addr,
            done: Mutex::new(None),
            waker: acceptor.waker(),
            shutdown: stopper.shutdown(),
            stopper,
            rates,
            buffers: AtomicUsize::new(0),
            running: Mutex::new(HashMap::new()),
            next_running: std::sync::atomic::AtomicU64::new(0),
            metrics,
        });
        Ok(Server { acceptor, shared, metrics_addr, metrics_stop })
    }

    /// Where `--metrics` is served (with the real port when 0 was asked for).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// The bound address (with the real port when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// What stops this server from another thread (a signal thread): the first
    /// [`Stopper::stop`] ends accepting and lets running sessions finish within the grace; a
    /// second aborts them now.
    pub fn stopper(&self) -> Stopper {
        self.shared.stopper.clone()
    }

    /// Run on a background thread.
    pub fn spawn(self) -> ServerHandle {
        let shared = self.shared.clone();
        let addr = shared.addr;
        let thread = std::thread::spawn(move || self.run());
        ServerHandle { addr, shared, thread: Some(thread) }
    }

    /// Accept connections until stopped; with `once`, until the first session ends, returning how
    /// it ended.
    pub fn run(self) -> Result<Option<Outcome>, EngineError> {
        let Server { mut acceptor, shared, metrics_stop, .. } = self;
        let tasks = Tasks::new();
        let end = accept_loop(&mut acceptor, &shared, &tasks);
        // New connections are refused from here on, not left waiting in the listen queue.
        drop(acceptor);
        let r = match end {
            Ok(()) if shared.cfg.once => match shared.done.lock().unwrap_or_else(PoisonError::into_inner).take() {
                Some(o) => Ok(Some(o)),
                None => Err(EngineError::Timeout("no client connected before the deadline".into())),
            },
            Ok(()) => {
                shared.drain(tasks);
                Ok(None)
            }
            Err(admit::Event::NoClient) => Err(EngineError::Timeout("no client connected before the deadline".into())),
            Err(_) => Ok(None),
        };
        drop(metrics_stop);
        r
    }
}

/// Accept until a stop (or, with `once`, the first session's end): each connection admitted
/// gets a handler thread holding a guard of `tasks`.
fn accept_loop(acceptor: &mut Acceptor, shared: &Arc<Shared>, tasks: &Tasks) -> Result<(), admit::Event> {
    loop {
        shared.act()?;
        if shared.cfg.once && shared.done.lock().unwrap_or_else(PoisonError::into_inner).is_some() {
            return Ok(());
        }
        if shared.shutdown.is_stopped() {
            shared.admission().handle_stop(Instant::now());
            return Ok(());
        }
        let deadline = shared.admission().poll_timeout();
        let (sock, peer) = match acceptor.next(deadline) {
            Accepted::Conn(sock, peer) => (sock, peer),
            Accepted::Woken | Accepted::Timeout => {
                shared.admission().handle_timeout(Instant::now());
                continue;
            }
        };
        let ip = peer.ip();
        // One source may not take more than its share of the handshake slots: closed at once.
        let Verdict::Admit { id, evict } = shared.admission().handle_connect(ip, Instant::now()) else { continue };
        if let Some(old) = evict {
            shared.close_pending(old);
        }
        match sock.try_clone() {
            Ok(copy) => {
                shared.pending.lock().unwrap_or_else(PoisonError::into_inner).insert(id, copy);
            }
            Err(_) => {
                shared.admission().handle_handshake_end(id);
                continue;
            }
        }
        let (shared, guard) = (shared.clone(), tasks.enter());
        std::thread::spawn(move || {
            let _guard = guard;
            handle(shared, sock, id);
        });
    }
}

fn random_session() -> SessionId {
    let mut id = [0u8; 16];
    // SystemRandom failing leaves a zero id, which no data stream can ever match (it is refused
    // as a control preamble's value), so the session simply cannot grow data streams.
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut id);
    id
}

fn handle(shared: Arc<Shared>, sock: TcpStream, slot: HandshakeId) {
    let peer = sock.peer_addr().ok();
    let local = sock.local_addr().ok().map(|a| a.ip());
    let deadline = Instant::now() + shared.cfg.handshake_timeout;
    let sock_copy = sock.try_clone().ok();
    let accepted = conn::accept(sock, deadline, |hello| match hello.kind {
        StreamKind::Control => {
            if !shared.admission().session_room() {
                Admit::Refuse(ErrorCode::Busy)
            } else {
                match (hello.auth, &shared.cfg.keys) {
                    (AuthMode::Secret, _) if shared.cfg.accept_secret => {
                        Admit::Psk { psk: shared.cfg.secret.0, session: random_session() }
                    }
                    (AuthMode::PublicKey, Some(k)) => {
                        Admit::Key { host: k.host_key.clone(), session: random_session() }
                    }
                    _ => Admit::Refuse(ErrorCode::Unsupported),
                }
            }
        }
        StreamKind::Data => match shared.sessions.lock().unwrap_or_else(PoisonError::into_inner).get(&hello.session) {
            // A stream the session did not announce, or has already, is refused before its
            // handshake: it costs the server nothing.
            Some((_, sink)) if !sink.can_attach(hello.stream) => Admit::Refuse(ErrorCode::Limit),
            Some((psk, _)) => Admit::Psk { psk: **psk, session: hello.session },
            None => Admit::Refuse(ErrorCode::UnknownSession),
        },
    });
    shared.pending.lock().unwrap_or_else(PoisonError::into_inner).remove(&slot);
    shared.admission().handle_handshake_end(slot);
    let (hello, mut sec) = match accepted {
        Ok(x) => x,
        Err(e) => {
            // A connection closed before its first byte is a probe (doctor's RTT, a port
            // check), not a failed handshake worth a log line.
            let silent_close = matches!(&e, EngineError::Net { io: source, context }
                if source.kind() == std::io::ErrorKind::UnexpectedEof && context.contains("preamble"));
            match &e {
                EngineError::Refused { code } => shared.metrics.refused(*code),
                // A wrong shared key, or a key's proof that does not verify.
                EngineError::Proto(linerate_proto::ProtoError::Auth) => shared.metrics.refused(ErrorCode::Auth),
                EngineError::Proto(linerate_proto::ProtoError::Version { .. }) => {
                    shared.metrics.refused(ErrorCode::Version)
                }
                _ if !silent_close => shared.metrics.handshake_failed(),
                _ => {}
            }
            if !silent_close {
                let (who, why) = (peer_name(peer), linerate_proto::name::escape(e.to_string().as_bytes()));
                let fields = [("peer", who.as_str().into()), ("event", "handshake-failed".into())];
                shared.log(Level::Warn, &format!("{who}: handshake failed: {why}"), &fields);
            }
            return;
        }
    };
    match hello.kind {
        StreamKind::Data => {
            let session = shared
                .sessions
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&sec.session)
                .map(|(_, s)| s.clone());
            match session {
                Some(Sink::Recv(s)) if s.attach(hello.stream, sock_copy) => s.run_data(sec.rx),
                Some(Sink::Send(c)) => c.attach(hello.stream, sec),
                _ => sec.tx.shutdown(),
            }
        }
        StreamKind::Control => {
            if shared.admission().handle_session_start().is_err() {
                // Shutting down: a session whose handshake was under way does not start.
                let _ = fatal(&mut sec.tx, ErrorCode::Busy, "the server is shutting down".into());
                return;
            }
            let _running = shared.run_session(sock_copy.as_ref().and_then(|s| s.try_clone().ok()));
            let client = Client { peer: peer_name(peer), ip: peer.map(|p| p.ip()), session: _running.id };
            let grant = grant(&shared, &mut sec, &client);
            let outcome = match grant {
                Ok(g) => control(&shared, sec, sock_copy, deadline, (local, &client), &g, _running.id),
                Err(o) => Some(o),
            };
            shared.admission().handle_session_end();
            let Some(outcome) = outcome else {
                // A benchmark or mesh session (logged already) ends a `--once` server too.
                shared.session_done(Outcome::Done(Default::default()));
                return;
            };
            log_copy(&shared, &client, &outcome);
            shared.session_done(outcome);
        }
    }
}

/// What an authenticated control connection may do: everything for the shared secret; for a
/// key, what its line in the authorized keys (re-read now) grants, or a `Fatal` (Auth).
fn grant(shared: &Shared, sec: &mut conn::Secured, client: &Client) -> Result<Grant, Outcome> {
    let (Some(key), Some(k)) = (sec.peer_key, shared.cfg.keys.as_ref()) else {
        return Ok(Grant::secret());
    };
    match k.admit(&key) {
        Ok(g) => {
            let key = g.who();
            // The kind is not known before the first request.
            let fields = client.fields(None, "authenticated", [("key", key.as_str().into())]);
            shared.log(Level::Info, &format!("{}: {key} authenticated", client.peer), &fields);
            Ok(g)
        }
        Err(refused) => {
            shared.metrics.refused(ErrorCode::Auth);
            Err(fatal(&mut sec.tx, ErrorCode::Auth, refused.to_string()))
        }
    }
}

/// Run a session's control connection (arrived on `local`, from `client`). `None` for a benchmark
/// or mesh session (its outcome is logged here); a copy's outcome otherwise.
fn control(
    shared: &Arc<Shared>,
    mut sec: conn::Secured,
    sock: Option<TcpStream>,
    deadline: Instant,
    (local, client): (Option<IpAddr>, &Client),
    grant: &Grant,
    running: u64,
) -> Option<Outcome> {
    // A key with `root=` is confined beneath its own directory instead of --root.
    let key_root = match grant.root.as_ref().map(|r| confined::open_root(r).map_err(|e| (r, e))).transpose() {
        Ok(r) => r,
        Err((r, e)) => {
            let msg = format!("{}: this key's root {} cannot be opened: {e}", grant.who(), r.display());
            return Some(fatal(&mut sec.tx, ErrorCode::Destination, msg));
        }
    };
    let root = key_root.as_ref().or(shared.root.as_ref());
    // The deadline covers everything up to the first request, however slowly its bytes come.
    let mut pull_from = None;
    let mut rules = None;
    let begin = match sec.rx.recv_by(deadline) {
        Ok(Some(plain)) => match conn::decode_all(plain).as_deref() {
            Ok([Frame::Begin(_), ..]) if root.is_none() => {
                let msg = "this server has no --root: it serves benchmarks only".to_string();
                return Some(fatal(&mut sec.tx, ErrorCode::Unsupported, msg));
            }
            Ok([Frame::Begin(b), Frame::Pull(p), filter @ ..])
                if b.flags & frame::FLAG_PULL != 0 && matches!(filter, [] | [Frame::Filter(_)]) =>
            {
                pull_from = Some((p.path.to_vec(), p.name.to_vec()));
                rules = peer_rules(filter);
                Ok((b.dest.to_vec(), b.sources, b.chunk_size, b.flags, b.streams, b.modify_window))
            }
            Ok([Frame::Begin(b), ..]) if b.flags & frame::FLAG_PULL != 0 => Err(ProtoError::Violation(
                "a pull's Begin must be followed by one Pull frame, then at most one Filter frame".into(),
            )),
            Ok([Frame::Begin(b), filter @ ..]) if matches!(filter, [] | [Frame::Filter(_)]) => {
                rules = peer_rules(filter);
                Ok((b.dest.to_vec(), b.sources, b.chunk_size, b.flags, b.streams, b.modify_window))
            }
            Ok([Frame::BenchRequest(doc)]) => {
                let doc = doc.to_vec();
                let ip = local.unwrap_or(IpAddr::from([127, 0, 0, 1]));
                let active = shared.metrics.active(Kind::Bench);
                let moved = Arc::new(bench_server::Moved::default());
                active.watch({
                    let m = moved.clone();
                    move || m.read()
                });
                let on_test = |t: &bench_server::TestDone| log_test(shared, client, t);
                let ends = bench_server::Ends { local: ip, client: client.ip };
                let (cfg, tests) = (&shared.cfg.bench, &shared.tests);
                let r = bench_server::serve_session(&doc, sec.tx, sec.rx, ends, cfg, tests, &moved, on_test);
                active.end(&Ended { ok: r.is_ok(), key: key_label(grant), ..Default::default() });
                log_bench(shared, client, &r);
                return None;
            }
            Ok([Frame::MeshRequest(doc)]) => {
                let host_key = shared.cfg.keys.as_ref().map(|k| k.host_key.clone());
                let active = shared.metrics.active(Kind::Mesh);
                // A mesh task is a benchmark test this agent runs: it takes one of --max-tests.
                let r = if shared.tests.fetch_add(1, Relaxed) >= shared.cfg.bench.max_tests {
                    let msg = format!("{} tests are running; try again later", shared.cfg.bench.max_tests);
                    crate::mesh::send_fatal(&mut sec.tx, ErrorCode::Busy, &msg)
                } else {
                    let rules = crate::mesh::Rules {
                        limits: &shared.cfg.bench.limits,
                        targets: shared.cfg.mesh_targets.as_deref(),
                    };
                    let mut record = |t: &linerate_proto::mesh::MeshTask,
                                      o: &linerate_proto::mesh::MeshOutcome,
                                      h: Option<&hdrhistogram::Histogram<u64>>| {
                        shared.metrics.mesh_result(t, o, h);
                    };
                    crate::mesh::serve_task(doc, &mut sec.tx, grant, host_key, &rules, &mut record)
                };
                shared.tests.fetch_sub(1, Relaxed);
                active.end(&Ended { ok: r.is_ok(), key: key_label(grant), ..Default::default() });
                match r {
                    Ok(line) => shared.log(Level::Info, &line, &client.fields(Some("mesh"), "done", [])),
                    Err(e) => {
                        let msg = format!("{}: mesh request refused: {e}", client.peer);
                        shared.log(Level::Warn, &msg, &client.fields(Some("mesh"), "refused", []));
                    }
                }
                return None;
            }
            Ok([first @ (Frame::Begin(_) | Frame::BenchRequest(_) | Frame::MeshRequest(_)), other, ..]) => {
                Err(ProtoError::Violation(format!(
                    "the first request must be alone in its record: {other:?} after {first:?}"
                )))
            }
            Ok([other, ..]) => Err(ProtoError::Violation(format!("expected Begin, got {other:?}"))),
            Ok([]) => Err(ProtoError::Violation("expected Begin, got an empty record".into())),
            Err(e) => Err(e.clone()),
        },
        Ok(None) => Err(ProtoError::Truncated("session before Begin")),
        Err(EngineError::Proto(e)) => Err(e),
        Err(e) if e.is_timeout() => Err(ProtoError::Violation("no request before the handshake deadline".into())),
        Err(e) => Err(ProtoError::Violation(e.to_string())),
    };
    let (dest, sources, chunk_size, flags, streams, modify_window) = match begin {
        Ok(b) => b,
        Err(e) => return Some(fatal(&mut sec.tx, e.code(), e.to_string())),
    };
    // The client's --exclude/--include rules: peer input, compiled here with the same caps.
    let rules = match rules.transpose() {
        Ok(r) => r,
        Err(e) => return Some(fatal(&mut sec.tx, ErrorCode::BadParams, format!("the copy's filter rules: {e}"))),
    };
    if grant.read_only && flags & frame::FLAG_PULL == 0 {
        let msg = format!("{} is read-only on this server", grant.who());
        return Some(fatal(&mut sec.tx, ErrorCode::Denied, msg));
    }
    if let Some(msg) = refused_metadata(&shared.cfg, flags) {
        return Some(fatal(&mut sec.tx, ErrorCode::Unsupported, msg));
    }
    if streams == 0 || streams > caps::MAX_STREAMS || sources == 0 {
        return Some(fatal(
            &mut sec.tx,
            ErrorCode::Limit,
            format!("streams must be 1..={} and sources at least 1", caps::MAX_STREAMS),
        ));
    }
    let Some(root) = root else {
        return Some(fatal(&mut sec.tx, ErrorCode::Unsupported, "no --root".into()));
    };
    // What this session's record buffers may grow to, reserved before anything is allocated: a
    // pull's server reads only its control stream (answers, small); a push's every data stream
    // up to one record of its chunk size, and a control stream of offers and listings.
    let need = match pull_from {
        Some(_) => conn::REQUEST_RECORD,
        None => usize::from(streams) * caps::data_record_cap(chunk_size) + caps::MAX_RECORD,
    };
    if need > MAX_SESSION_BUFFERS {
        let msg = format!(
            "{streams} streams of {} chunks need {} of receive buffers; this server allows {} per session: use fewer streams or smaller chunks",
            format_size_iec(f64::from(chunk_size)),
            format_size_iec(need as f64),
            format_size_iec(MAX_SESSION_BUFFERS as f64)
        );
        return Some(fatal(&mut sec.tx, ErrorCode::Limit, msg));
    }
    let Some(_reserved) = shared.reserve(need) else {
        let msg = format!(
            "the server's receive buffers (--max-buffer-memory {}) are taken by other sessions; try again later",
            format_size_iec(shared.cfg.max_buffer_memory as f64)
        );
        return Some(fatal(&mut sec.tx, ErrorCode::Busy, msg));
    };
    if let Some((path, name)) = pull_from {
        let pace = admit_rate(shared, grant.rate);
        let active = shared.metrics.active(Kind::Pull);
        let progress = Arc::new(linerate_copy::send::Progress::default());
        active.watch({
            let p = progress.clone();
            move || (0, p.bytes.load(Relaxed))
        });
        let what = (&path[..], name, rules);
        let o = serve_pull(shared, sec, sock, root, what, chunk_size, flags, streams, pace, progress);
        let sent = match &o {
            Outcome::Done(s) => (s.bytes, s.files),
            Outcome::Aborted(_) => (0, 0),
        };
        active.end(&Ended { ok: matches!(o, Outcome::Done(_)), sent, key: key_label(grant), ..Default::default() });
        return Some(o);
    }
    let dry = flags & linerate_proto::frame::FLAG_DRY_RUN != 0;
    let resolved = match shared.cfg.paths {
        PathMode::BeneathRoot => confined::resolve_destination(root, &dest, sources, Placement::of_flags(flags), dry),
        PathMode::AsUser => confined::resolve_user_destination(root, &dest, sources, Placement::of_flags(flags), dry),
    };
    let d = match resolved {
        Ok(d) => d,
        Err(e) => return Some(fatal(&mut sec.tx, ErrorCode::Destination, e.to_string())),
    };
    let into_dir = d.into_dir;
    let tag = hex::encode(&sec.session[..6]);
    // Under --delete, names the rules exclude are kept (unless the client said --delete-excluded).
    let keep = rules
        .filter(|(_, f)| f & frame::FILTER_DELETE_EXCLUDED == 0)
        .map(|(filter, f)| TreeFilter { filter: Arc::new(filter), root_in_path: f & frame::FILTER_CONTENTS == 0 });
    let idle_timeout = shared.cfg.idle_timeout;
    let params = SessionParams { flags, chunk_size, streams, tag, idle_timeout, pull_of: None, keep, modify_window };
    // The session's live counters, which `--metrics` reads while it runs.
    let progress = Arc::new(linerate_copy::send::Progress::default());
    let session = RecvSession::with_display(params, d, sec.tx, Some(progress.clone()), None, None);
    session.pace_with(admit_rate(shared, grant.rate));
    shared.track_recv(running, &session);
    if let Some(s) = sock {
        session.add_socket(s);
    }
    // Register before answering: the client opens its data streams as soon as it has the answer.
    shared
        .sessions
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(sec.session, (sec.stream_psk.clone(), Sink::Recv(session.clone())));
    let active = shared.metrics.active(Kind::Push);
    active.watch(move || (progress.bytes.load(Relaxed), 0));
    let outcome = match session.send_control(&[Frame::Target { dest_is_dir: into_dir }]) {
        Ok(()) => {
            sec.rx.set_timeout(None);
            sec.rx.set_record_cap(caps::MAX_RECORD);
            session.run_control(sec.rx)
        }
        Err(e) => Outcome::Aborted(Abort::new(ErrorCode::Protocol, e.to_string())),
    };
    let received = match &outcome {
        Outcome::Done(s) => (s.bytes, s.files),
        Outcome::Aborted(_) => (0, 0),
    };
    active.end(&Ended {
        ok: matches!(outcome, Outcome::Done(_)),
        received,
        key: key_label(grant),
        ..Default::default()
    });
    shared.sessions.lock().unwrap_or_else(PoisonError::into_inner).remove(&sec.session);
    Some(outcome)
}

/// The rules of a `Filter` frame (`[]`: none) and its flags, or why they cannot be used.
fn peer_rules(filter: &[Frame<'_>]) -> Option<Result<(Filter, u8), FilterError>> {
    match filter {
        [Frame::Filter(f)] => Some(Filter::of_frame(f).map(|c| (c, f.flags))),
        _ => None,
    }
}

/// How `--metrics` labels the session's key: its fingerprint and comment (none for a shared secret).
fn key_label(grant: &Grant) -> Option<(String, String)> {
    grant.key.map(|k| (k.fingerprint(), grant.comment.clone()))
}

/// The pace of a copy session being admitted: its share of `rate_total`, within
/// `rate_per_client` and `key_cap` (bit/s, the `rate=` of the client's key when keys carry one).
/// Pace what the session receives with it ([`RecvSession::pace_with`]) or what it sends (the
/// sender's pace); the share ends when the last clone is dropped.
/// Why a push's request to keep owners or create devices is refused: a daemon creates files
/// owned by arbitrary users, or device nodes, only when its operator opted in (`serve
/// --keep-owners`, `--allow-devices`). A pull only reads, and sends what it finds.
fn refused_metadata(cfg: &ServerConfig, flags: u32) -> Option<String> {
    if flags & frame::FLAG_PULL != 0 {
        return None;
    }
    if flags & (frame::FLAG_OWNER | frame::FLAG_GROUP) != 0 && !cfg.keep_owners {
        return Some(
            "this server does not keep owners and groups (-o/-g, part of -a): its operator can allow it \
             with `linerate serve --keep-owners`; or copy without them (-rlpt instead of -a, or add \
             --no-owner --no-group)"
                .into(),
        );
    }
    if flags & frame::FLAG_DEVICES != 0 && !cfg.allow_devices {
        return Some(
            "this server does not create devices, FIFOs or sockets (-D, part of -a): its operator can \
             allow it with `linerate serve --allow-devices`; or copy without them (--no-D)"
                .into(),
        );
    }
    None
}

fn admit_rate(shared: &Shared, key_cap: Option<u64>) -> SessionRate {
    shared.rates.admit(key_cap)
}

fn fatal(tx: &mut conn::SendHalf, code: ErrorCode, msg: String) -> Outcome {
    let _ = tx.send_frames(&[Frame::Fatal(frame::Fatal { code: code as u16, message: msg.as_bytes() })]);
    Outcome::Aborted(Abort::new(code, msg))
}

impl Sink {
    /// Whether data stream `index` would be admitted.
    fn can_attach(&self, index: u16) -> bool {
        match self {
            Sink::Recv(s) => s.can_attach(index),
            Sink::Send(c) => matches!(
                c.conns.lock().unwrap_or_else(PoisonError::into_inner).get(usize::from(index).wrapping_sub(1)),
                Some(None)
            ),
        }
    }
}

impl Collect {
    /// Keep data stream `index` (each once, within the count announced).
    fn attach(&self, index: u16, sec: conn::Secured) {
        let mut conns = self.conns.lock().unwrap_or_else(PoisonError::into_inner);
        match conns.get_mut(usize::from(index).wrapping_sub(1)) {
            Some(slot @ None) => *slot = Some(sec),
            _ => sec.tx.shutdown(),
        }
        self.changed.notify_all();
    }

    /// Every stream, once all connected before `deadline`.
    fn wait_all(&self, deadline: Instant) -> Option<Vec<conn::Secured>> {
        let mut conns = self.conns.lock().unwrap_or_else(PoisonError::into_inner);
        while conns.iter().any(Option::is_none) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            conns = self.changed.wait_timeout(conns, left).unwrap_or_else(PoisonError::into_inner).0;
        }
        Some(conns.iter_mut().filter_map(Option::take).collect())
    }
}

/// Keepalive interval of a pull's idle streams (an empty record costs a few dozen bytes).
const PULL_KEEPALIVE: Duration = Duration::from_millis(500);

/// Serve a pull: resolve the source beneath the root, answer, gather the client's data streams,
/// then send the tree over them as a client sends a push.
#[allow(clippy::too_many_arguments)]
fn serve_pull(
    shared: &Arc<Shared>,
    mut sec: conn::Secured,
    sock: Option<TcpStream>,
    root: &OwnedFd,
    (path, name, rules): (&[u8], Vec<u8>, Option<(Filter, u8)>),
    chunk_size: u32,
    flags: u32,
    streams: u16,
    pace: SessionRate,
    progress: Arc<linerate_copy::send::Progress>,
) -> Outcome {
    let _ = sock;
    if let Err(e) = linerate_proto::name::validate(&name) {
        return fatal(&mut sec.tx, ErrorCode::BadName, format!("pull: the destination name: {e}"));
    }
    let resolved = match shared.cfg.paths {
        PathMode::BeneathRoot => confined::resolve_source(root, path),
        PathMode::AsUser => confined::resolve_user_source(root, path),
    };
    let (dir, src) = match resolved {
        Ok(x) => x,
        Err(e) => return fatal(&mut sec.tx, ErrorCode::Destination, e.to_string()),
    };
    let collect = Arc::new(Collect {
        streams,
        conns: Mutex::new((0..streams).map(|_| None).collect()),
        changed: std::sync::Condvar::new(),
    });
    shared
        .sessions
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(sec.session, (sec.stream_psk.clone(), Sink::Send(collect.clone())));
    let unregister = || {
        shared.sessions.lock().unwrap_or_else(PoisonError::into_inner).remove(&sec.session);
    };
    // For a pull, `Target` says whether the source is a directory: the client places it by that.
    let is_dir = std::fs::symlink_metadata(&src).is_ok_and(|m| m.is_dir());
    if let Err(e) = sec.tx.send_frames(&[Frame::Target { dest_is_dir: is_dir }]) {
        unregister();
        return Outcome::Aborted(Abort::new(ErrorCode::Protocol, e.to_string()));
    }
    let data = collect.wait_all(Instant::now() + shared.cfg.handshake_timeout * 2);
    unregister();
    let Some(data) = data else {
        let msg = format!("not all {} data streams connected in time", collect.streams);
        return fatal(&mut sec.tx, ErrorCode::Protocol, msg);
    };
    sec.rx.set_timeout(None);
    let opts = linerate_copy::send::SendOpts {
        chunk: u64::from(chunk_size),
        flags,
        // The client receives, and may give up on a stream silent for its stall timeout (as
        // short as 1 s): keep idle streams audible well within it.
        keepalive: PULL_KEEPALIVE,
        stall_timeout: shared.cfg.idle_timeout,
        summary_wait: linerate_copy::send::SUMMARY_WAIT,
        list: None,
        peer: "client",
        pace,
        // With FLAG_DEVICES the client asked for -D (or --devices/--specials: it receives what
        // it asked for and the rest is sent anyway; rsync's server would filter, see USER_GUIDE).
        kinds: linerate_copy::send::SpecialKinds::ALL,
        // The walk skips what the client's rules exclude; a source named with a trailing '/' is
        // the transfer root itself.
        filter: rules.map(|(filter, f)| TreeFilter {
            filter: Arc::new(filter),
            root_in_path: !(f & frame::FILTER_CONTENTS != 0 && is_dir),
        }),
    };
    let (on, log) = (shared.cfg.log, Log::new(shared.cfg.log_format));
    let on_error: linerate_copy::send::ErrorSink = Arc::new(move |m: String| {
        if on {
            let msg = format!("pull: {}", linerate_proto::name::escape(m.as_bytes()));
            log.emit(Level::Warn, &msg, &[("kind", "pull".into())]);
        }
    });
    // The walk stays beneath the directory the source was resolved in, following no symlink.
    let anchor = Arc::new(confined::Anchor::new(dir));
    let roots = vec![linerate_copy::walk::Root { path: src, name, beneath: Some(anchor) }];
    let r = linerate_copy::send::run_sender(sec, data, roots, &opts, progress, on_error);
    match r {
        Ok(sent) => Outcome::Done(sent.summary),
        Err(e) => {
            let code = match &e {
                EngineError::Remote { code, .. } => *code,
                EngineError::Proto(p) => p.code(),
                _ => ErrorCode::Protocol,
            };
            Outcome::Aborted(Abort { interrupted: e.is_peer_gone(), ..Abort::new(code, e.to_string()) })
        }
    }
}

/// A peer's address as logs show it (empty when unknown).
fn peer_name(peer: Option<SocketAddr>) -> String {
    peer.map(|p| p.to_string()).unwrap_or_default()
}

/// Whom a session's log lines are about: the client's address, and the session's number in this
/// server's run, which every JSON line of the session carries.
struct Client {
    peer: String,
    /// The client's address, when the socket has one (a benchmark's data connections from it
    /// get the test's own admission budget).
    ip: Option<IpAddr>,
    session: u64,
}

impl Client {
    /// The fields of a line about this session (`kind`: copy, bench, mesh, once known;
    /// `event`: what happened), then `more`.
    fn fields<'a>(
        &'a self,
        kind: Option<&'a str>,
        event: &'a str,
        more: impl IntoIterator<Item = Field<'a>>,
    ) -> Vec<Field<'a>> {
        let mut f = vec![("peer", self.peer.as_str().into()), ("session", self.session.into())];
        f.extend(kind.map(|k| ("kind", k.into())));
        f.push(("event", event.into()));
        f.extend(more);
        f
    }
}

/// The log line of a copy session that ended: its counts, or why it was aborted (a client that
/// went away, such as one interrupted with Ctrl-C, is said to have closed the session).
fn log_copy(shared: &Shared, client: &Client, outcome: &Outcome) {
    let who = &client.peer;
    match outcome {
        Outcome::Done(s) => {
            let n = linerate_model::units::count;
            let msg = format!(
                "{who}: {}, {}, {}, {}, {}",
                n(s.files, "file"),
                n(s.bytes, "byte"),
                n(s.dirs, "dir"),
                n(s.links, "link"),
                n(s.errors, "error")
            );
            let counts = [
                ("files", s.files.into()),
                ("bytes", s.bytes.into()),
                ("dirs", s.dirs.into()),
                ("links", s.links.into()),
                ("errors", s.errors.into()),
            ];
            shared.log(Level::Info, &msg, &client.fields(Some("copy"), "done", counts));
        }
        Outcome::Aborted(a) if a.interrupted => {
            let why = linerate_proto::name::escape(a.message.as_bytes());
            let fields = client.fields(Some("copy"), "interrupted", [("detail", why.as_str().into())]);
            shared.log(
                Level::Info,
                &format!("{who}: session aborted: client closed the session (interrupted)"),
                &fields,
            );
        }
        Outcome::Aborted(a) => {
            let why = linerate_proto::name::escape(a.message.as_bytes());
            let msg = format!("{who}: session aborted: {why} ({})", a.code.describe());
            shared.log(
                Level::Warn,
                &msg,
                &client.fields(Some("copy"), "aborted", [("code", a.code.describe().into())]),
            );
        }
    }
}

/// The log line of one benchmark test that ran: kind, counted time, bytes and rate.
fn log_test(shared: &Shared, client: &Client, t: &bench_server::TestDone) {
    let bytes = t.rx + t.tx;
    let rate = if t.seconds > 0.0 { bytes as f64 * 8.0 / t.seconds } else { 0.0 };
    let msg = format!(
        "{}: benchmark test {}: {:.2} s, {} received, {} sent, {}",
        client.peer,
        t.kind.name(),
        t.seconds,
        format_size_iec(t.rx as f64),
        format_size_iec(t.tx as f64),
        linerate_model::units::format_rate(rate)
    );
    let counts = [
        ("test", t.kind.name().into()),
        ("seconds", t.seconds.into()),
        ("rx_bytes", t.rx.into()),
        ("tx_bytes", t.tx.into()),
        ("rate_bps", rate.into()),
    ];
    shared.log(Level::Info, &msg, &client.fields(Some("bench"), "test", counts));
}

/// The log line of a benchmark session that ended: how many tests ran, or why it stopped (a
/// client that went away, such as one interrupted with Ctrl-C, is said to have closed it).
fn log_bench(shared: &Shared, client: &Client, r: &Result<u64, EngineError>) {
    let who = &client.peer;
    match r {
        Ok(n) => {
            let fields = client.fields(Some("bench"), "done", [("tests", (*n).into())]);
            shared.log(Level::Info, &format!("{who}: benchmark session: {n} tests"), &fields);
        }
        Err(e) if e.is_peer_gone() => {
            let msg = format!("{who}: benchmark session ended: client closed the session (interrupted)");
            shared.log(Level::Info, &msg, &client.fields(Some("bench"), "interrupted", []));
        }
        // Messages from a peer are escaped where the error is made.
        Err(e) => {
            let msg = format!("{who}: benchmark session ended: {e}");
            shared.log(Level::Warn, &msg, &client.fields(Some("bench"), "aborted", []));
        }
    }
}
