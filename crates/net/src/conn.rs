//! Authenticated, encrypted connections: the preamble exchange and Noise handshake over TCP,
//! then AEAD records in each direction. Each half can move to its own thread.

use crate::auth::keys::{Identity, KeyClient, PublicKey};
use crate::auth::secret::Secret;
use crate::{EngineError, UsageError};
use linerate_proto::auth::{self, Signer};
use linerate_proto::caps::MAX_HANDSHAKE_MSG;
use linerate_proto::frame::{self, Frame, KeyAuth};
use linerate_proto::handshake::{ConnKeys, Handshake, Role, KEY_LEN};
use linerate_proto::hello::{
    AuthMode, ClientHello, ServerHello, SessionId, StreamKind, Suite, CLIENT_HELLO_LEN, SERVER_HELLO_LEN,
};
use linerate_proto::record::{Binding, Direction, Opener, Sealer, HEADER_LEN};
use linerate_proto::{caps, ErrorCode, ProtoError, PROTOCOL_VERSION};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Sends records.
pub struct SendHalf {
    sock: TcpStream,
    sealer: Sealer,
    buf: Vec<u8>,
}

/// Receives records.
///
/// Two rules keep a hostile peer from holding memory or time it has not paid for: a record's
/// buffer grows only as its bytes arrive (in steps of [`GROW_STEP`]), never to the length its
/// header claims, and a record longer than the current cap ([`RecvHalf::set_record_cap`]) is
/// refused before anything is read. A timeout ([`RecvHalf::set_timeout`]) bounds a whole record,
/// not each read: a peer dribbling one byte at a time is cut off when the record is late.
pub struct RecvHalf {
    sock: TcpStream,
    opener: Opener,
    buf: Vec<u8>,
    /// Longest record (ciphertext with tag) accepted now.
    cap: usize,
    /// How long one whole record may take (None: forever).
    timeout: Option<Duration>,
    /// The socket's SO_RCVTIMEO as last set (None: none).
    armed: Option<Duration>,
}

/// A record buffer grows by at most this much beyond the bytes already received.
pub const GROW_STEP: usize = 64 * 1024;

/// The largest record a server accepts before the client has authenticated (public-key mode:
/// the one `ClientAuth`, 102 bytes of frame plus the tag, with room to spare).
pub const PREAUTH_RECORD: usize = 256;

/// The largest record a server accepts as a session's first request (`Begin` + `Pull`, or a
/// `BenchRequest`), and on a benchmark session's control connection.
pub const REQUEST_RECORD: usize = 1024 * 1024 + caps::RECORD_OVERHEAD;

/// A finished handshake: both halves plus what the handshake established.
pub struct Secured {
    /// Outgoing records.
    pub tx: SendHalf,
    /// Incoming records.
    pub rx: RecvHalf,
    /// The session this connection belongs to.
    pub session: SessionId,
    /// Key for the session's data streams (meaningful on control connections).
    pub stream_psk: zeroize::Zeroizing<[u8; KEY_LEN]>,
    /// The AEAD in use.
    pub suite: Suite,
    /// On a public-key control connection accepted by a server: the client's key, whose
    /// signature over this connection's handshake hash verified. Whether the key is authorized
    /// is the server's decision ([`crate::auth::authorized`]).
    pub peer_key: Option<PublicKey>,
}

impl SendHalf {
    /// Seal and send `buf` (which must start with [`HEADER_LEN`] reserved bytes).
    pub fn send_buf(&mut self, buf: &mut Vec<u8>) -> Result<(), EngineError> {
        self.sealer.seal(buf)?;
        self.sock.write_all(buf).map_err(|e| EngineError::net("sending a record", e))
    }

    /// Encode and send frames as one record.
    pub fn send_frames(&mut self, frames: &[Frame<'_>]) -> Result<(), EngineError> {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        buf.resize(HEADER_LEN, 0);
        for f in frames {
            f.encode(&mut buf);
        }
        let r = self.send_buf(&mut buf);
        self.buf = buf;
        r
    }

    /// Send an empty record: proof of life on a stream with nothing to say.
    pub fn keepalive(&mut self) -> Result<(), EngineError> {
        self.send_frames(&[])
    }

    /// The connection's MSS (`TCP_MAXSEG`), where the kernel says.
    pub fn mss(&self) -> Option<u32> {
        socket2::SockRef::from(&self.sock).tcp_mss().ok().filter(|m| *m > 0)
    }

    /// Close our sending direction.
    pub fn shutdown(&self) {
        let _ = self.sock.shutdown(Shutdown::Both);
    }
}

impl RecvHalf {
    /// Receive and open the next record within the timeout ([`RecvHalf::set_timeout`]), counted
    /// from this call to the record's last byte; returns its plaintext. `Ok(None)` on a clean EOF
    /// at a record boundary. A late record is a `Net` error of kind `TimedOut`.
    pub fn recv(&mut self) -> Result<Option<&[u8]>, EngineError> {
        let deadline = self.timeout.map(|t| Instant::now() + t);
        self.recv_until(deadline)
    }

    /// [`RecvHalf::recv`], with the whole record due by `deadline` (a phase's absolute deadline,
    /// such as the handshake's).
    pub fn recv_by(&mut self, deadline: Instant) -> Result<Option<&[u8]>, EngineError> {
        self.recv_until(Some(deadline))
    }

    fn recv_until(&mut self, deadline: Option<Instant>) -> Result<Option<&[u8]>, EngineError> {
        let mut header = [0u8; HEADER_LEN];
        let mut n = 0;
        while n < HEADER_LEN {
            match read_until(&mut self.sock, &mut self.armed, &mut header[n..], deadline)? {
                0 if n == 0 => return Ok(None),
                0 => return Err(ProtoError::Truncated("record header").into()),
                k => n += k,
            }
        }
        let len = Opener::record_len(header)?;
        if len > self.cap {
            return Err(ProtoError::TooLong { what: "record", len: len as u64, cap: self.cap as u64 }.into());
        }
        let mut got = 0;
        while got < len {
            // Grow only as far as the bytes received so far justify.
            if self.buf.len() <= got {
                self.buf.resize((got + GROW_STEP).min(len), 0);
            }
            let end = self.buf.len().min(len);
            match read_until(&mut self.sock, &mut self.armed, &mut self.buf[got..end], deadline)? {
                0 => return Err(ProtoError::Truncated("record body").into()),
                k => got += k,
            }
        }
        Ok(Some(self.opener.open(&mut self.buf[..len])?))
    }

    /// Set the timeout of one whole record (None: wait forever).
    pub fn set_timeout(&mut self, t: Option<Duration>) {
        self.timeout = t;
    }

    /// Refuse records longer than `cap` bytes of ciphertext (at most [`caps::MAX_RECORD`]) from
    /// now on.
    pub fn set_record_cap(&mut self, cap: usize) {
        self.cap = cap.min(caps::MAX_RECORD);
    }

    /// Release a buffer grown for a large record (a phase that needs only small ones follows).
    pub fn shrink(&mut self) {
        self.buf = Vec::new();
    }

    /// A clone of the socket, to shut it down from another thread.
    pub fn socket(&self) -> Option<TcpStream> {
        self.sock.try_clone().ok()
    }
}

/// One read of at most `buf.len()` bytes (0 at EOF), due by `deadline`. The socket's timeout is
/// re-armed only when the one set would let a read overshoot the deadline by more than a little,
/// so a fast stream costs no extra system call per read.
fn read_until(
    sock: &mut TcpStream,
    armed: &mut Option<Duration>,
    buf: &mut [u8],
    deadline: Option<Instant>,
) -> Result<usize, EngineError> {
    let late = || EngineError::net("receiving a record", io::ErrorKind::TimedOut.into());
    loop {
        match deadline {
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(late());
                }
                let slack = (left / 8).min(Duration::from_secs(1));
                if armed.is_none_or(|a| a > left + slack) {
                    sock.set_read_timeout(Some(left)).map_err(|e| EngineError::net("configuring a socket", e))?;
                    *armed = Some(left);
                }
            }
            None if armed.is_some() => {
                sock.set_read_timeout(None).map_err(|e| EngineError::net("configuring a socket", e))?;
                *armed = None;
            }
            None => {}
        }
        match sock.read(buf) {
            Ok(k) => return Ok(k),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // The armed timeout ran out: late if the deadline has passed, else re-arm.
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                *armed = Some(Duration::MAX)
            }
            Err(e) => return Err(EngineError::net("receiving a record", e)),
        }
    }
}

/// Read exactly `buf.len()` bytes before `deadline`, however slowly the peer dribbles them.
fn read_by(sock: &mut TcpStream, buf: &mut [u8], deadline: Instant, what: &str) -> Result<(), EngineError> {
    let mut n = 0;
    while n < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(EngineError::Timeout(format!("{what}: handshake deadline passed")));
        }
        sock.set_read_timeout(Some(left)).map_err(|e| EngineError::net(what, e))?;
        match sock.read(&mut buf[n..]) {
            Ok(0) => return Err(EngineError::net(what, io::ErrorKind::UnexpectedEof.into())),
            Ok(k) => n += k,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                return Err(EngineError::Timeout(format!("{what}: handshake deadline passed")))
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(EngineError::net(what, e)),
        }
    }
    Ok(())
}

fn send_hs(sock: &mut TcpStream, msg: &[u8]) -> Result<(), EngineError> {
    let mut b = Vec::with_capacity(2 + msg.len());
    b.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    b.extend_from_slice(msg);
    sock.write_all(&b).map_err(|e| EngineError::net("sending a handshake message", e))
}

/// The server's handshake reply to a client. The server closes without a word when the
/// client's message does not authenticate: that is an authentication failure, not a network one.
fn recv_reply(sock: &mut TcpStream, deadline: Instant) -> Result<Vec<u8>, EngineError> {
    match recv_hs(sock, deadline) {
        Err(EngineError::Net { .. }) => Err(ProtoError::Auth.into()),
        r => r,
    }
}

fn recv_hs(sock: &mut TcpStream, deadline: Instant) -> Result<Vec<u8>, EngineError> {
    let mut len = [0u8; 2];
    read_by(sock, &mut len, deadline, "reading a handshake message")?;
    let len = u16::from_be_bytes(len) as usize;
    if len > MAX_HANDSHAKE_MSG {
        return Err(
            ProtoError::TooLong { what: "handshake message", len: len as u64, cap: MAX_HANDSHAKE_MSG as u64 }.into()
        );
    }
    let mut msg = vec![0u8; len];
    read_by(sock, &mut msg, deadline, "reading a handshake message")?;
    Ok(msg)
}

fn halves(
    sock: TcpStream,
    keys: &ConnKeys,
    suite: Suite,
    session: SessionId,
    stream: u16,
    role: Role,
) -> Result<(SendHalf, RecvHalf), EngineError> {
    let _ = sock.set_nodelay(true);
    let (tx_dir, rx_dir, tx_key, rx_key) = match role {
        Role::Initiator => (
            Direction::ClientToServer,
            Direction::ServerToClient,
            &keys.initiator_to_responder,
            &keys.responder_to_initiator,
        ),
        Role::Responder => (
            Direction::ServerToClient,
            Direction::ClientToServer,
            &keys.responder_to_initiator,
            &keys.initiator_to_responder,
        ),
    };
    let sealer = Sealer::new(suite, tx_key, Binding { session, stream, direction: tx_dir })?;
    let opener = Opener::new(suite, rx_key, Binding { session, stream, direction: rx_dir })?;
    let rsock = sock.try_clone().map_err(|e| EngineError::net("cloning a socket", e))?;
    let rx = RecvHalf { sock: rsock, opener, buf: Vec::new(), cap: caps::MAX_RECORD, timeout: None, armed: None };
    Ok((SendHalf { sock, sealer, buf: Vec::new() }, rx))
}

/// The client's side of the preambles, before `deadline`: send `hello`, read the server's and
/// check its version and status. Returns the Noise prologue (both preambles, in order). A server
/// that does not offer the authentication asked for answers `Unsupported`: with `unsupported`,
/// a usage error "`addr` `unsupported`" (how to authenticate instead), else a refusal.
fn preambles(
    sock: &mut TcpStream,
    addr: SocketAddr,
    hello: ClientHello,
    deadline: Instant,
    unsupported: Option<&str>,
) -> Result<Vec<u8>, EngineError> {
    let hello = hello.encode();
    sock.write_all(&hello).map_err(|e| EngineError::net(format!("sending the preamble to {addr}"), e))?;
    let mut sh = [0u8; SERVER_HELLO_LEN];
    read_by(sock, &mut sh, deadline, "reading the server's preamble")?;
    let server = ServerHello::decode(&sh)?;
    if server.version != PROTOCOL_VERSION {
        return Err(ProtoError::Version { ours: PROTOCOL_VERSION, theirs: server.version }.into());
    }
    match (ErrorCode::from_u16(server.status.into()), unsupported) {
        _ if server.status == 0 => {}
        (ErrorCode::Unsupported, Some(how)) => {
            return Err(UsageError::Unsupported { addr, how: how.to_string() }.into())
        }
        (code, _) => return Err(EngineError::Refused { code }),
    }
    let mut prologue = hello.to_vec();
    prologue.extend_from_slice(&sh);
    Ok(prologue)
}

/// Connect as a client. For a control connection pass `session = [0; 16]` and `stream = 0`; the
/// server's session id is returned in [`Secured::session`].
pub fn connect(
    addr: SocketAddr,
    kind: StreamKind,
    suite: Suite,
    psk: &[u8; KEY_LEN],
    session: SessionId,
    stream: u16,
    timeout: Duration,
) -> Result<Secured, EngineError> {
    let mut sock =
        TcpStream::connect_timeout(&addr, timeout).map_err(|e| EngineError::net(format!("connecting to {addr}"), e))?;
    let deadline = Instant::now() + timeout;
    let hello = ClientHello { kind, suite, session, stream, auth: AuthMode::Secret };
    let unsupported = (kind == StreamKind::Control).then_some(
        "does not accept a shared key (it admits ed25519 keys listed in its --authorized-keys): \
         use --identity FILE, or drop --key-file to use ~/.config/linerate/id_ed25519 \
         (made by `linerate keygen --type ed25519`)",
    );
    let prologue = preambles(&mut sock, addr, hello, deadline, unsupported)?;
    let mut hs = Handshake::new(Role::Initiator, suite, psk, &prologue)?;
    send_hs(&mut sock, &hs.write(b"")?)?;
    let reply = recv_reply(&mut sock, deadline)?;
    let payload = hs.read(&reply)?;
    let keys = hs.finish()?;
    let session = match kind {
        StreamKind::Control => payload.as_slice().try_into().map_err(|_| ProtoError::Invalid("session id"))?,
        StreamKind::Data => session,
    };
    sock.set_read_timeout(None).map_err(|e| EngineError::net("configuring a socket", e))?;
    let (tx, rx) = halves(sock, &keys, suite, session, stream, Role::Initiator)?;
    Ok(Secured { tx, rx, session, stream_psk: zeroize::Zeroizing::new(keys.stream_psk), suite, peer_key: None })
}

/// Connect a session's control connection: with `key`, by public keys ([`connect_key`]);
/// without, by the shared secret ([`connect`]).
pub fn connect_control(
    addr: SocketAddr,
    suite: Suite,
    secret: &Secret,
    key: Option<&KeyClient>,
    timeout: Duration,
) -> Result<Secured, EngineError> {
    match key {
        Some(k) => connect_key(addr, suite, k, timeout),
        None => connect(addr, StreamKind::Control, suite, &secret.0, [0; 16], 0, timeout),
    }
}

/// Connect a control connection authenticated by public keys: Noise `NN`, then the server's
/// `HostAuth` is verified and checked against known_hosts, then our `ClientAuth` goes out. The
/// server's verdict on our key comes as its answer to the first request (a `Fatal` with code
/// `Auth` when the key is not authorized).
pub fn connect_key(
    addr: SocketAddr,
    suite: Suite,
    client: &KeyClient,
    timeout: Duration,
) -> Result<Secured, EngineError> {
    let deadline = Instant::now() + timeout;
    let (mut sec, hash) = connect_nn(addr, suite, timeout)?;
    let a = recv_key_auth(&mut sec.rx, deadline, true)?;
    auth::verify(Signer::Host, &a.key, &a.signature, &hash).map_err(|_| {
        EngineError::HostKey(format!("the server's host key signature does not verify ({})", PublicKey(a.key)))
    })?;
    client.check_host(&PublicKey(a.key))?;
    sec.tx.send_frames(&[Frame::ClientAuth(client.identity.sign(Signer::Client, &hash))])?;
    Ok(sec)
}

/// The first half of [`connect_key`], public for tests that misbehave after it: preambles with
/// [`AuthMode::PublicKey`] and the `NN` handshake. Returns the connection, not yet
/// authenticated by anyone, and its handshake hash.
pub fn connect_nn(addr: SocketAddr, suite: Suite, timeout: Duration) -> Result<(Secured, [u8; KEY_LEN]), EngineError> {
    let sock =
        TcpStream::connect_timeout(&addr, timeout).map_err(|e| EngineError::net(format!("connecting to {addr}"), e))?;
    connect_nn_on(sock, suite, timeout)
}

/// [`connect_nn`] over a connection made by the caller (from a chosen source address, in tests
/// that play many peers).
pub fn connect_nn_on(
    mut sock: TcpStream,
    suite: Suite,
    timeout: Duration,
) -> Result<(Secured, [u8; KEY_LEN]), EngineError> {
    let addr = sock.peer_addr().map_err(|e| EngineError::net("peer address", e))?;
    let deadline = Instant::now() + timeout;
    let hello =
        ClientHello { kind: StreamKind::Control, suite, session: [0; 16], stream: 0, auth: AuthMode::PublicKey };
    let unsupported = Some("does not accept key authentication (it has no --authorized-keys); use --key-file");
    let prologue = preambles(&mut sock, addr, hello, deadline, unsupported)?;
    let mut hs = Handshake::new_nn(Role::Initiator, suite, &prologue)?;
    send_hs(&mut sock, &hs.write(b"")?)?;
    let reply = recv_reply(&mut sock, deadline)?;
    let payload = hs.read(&reply)?;
    let hash = hs.hash()?;
    let keys = hs.finish()?;
    let session: SessionId = payload.as_slice().try_into().map_err(|_| ProtoError::Invalid("session id"))?;
    sock.set_read_timeout(None).map_err(|e| EngineError::net("configuring a socket", e))?;
    let (tx, rx) = halves(sock, &keys, suite, session, 0, Role::Initiator)?;
    Ok((Secured { tx, rx, session, stream_psk: zeroize::Zeroizing::new(keys.stream_psk), suite, peer_key: None }, hash))
}

/// Read the one record holding the peer's `HostAuth` (`from_host`) or `ClientAuth` before
/// `deadline`. A `Fatal` becomes [`EngineError::Remote`]; anything else is a violation.
fn recv_key_auth(rx: &mut RecvHalf, deadline: Instant, from_host: bool) -> Result<KeyAuth, EngineError> {
    let what = if from_host { "the server's HostAuth" } else { "the client's ClientAuth" };
    let plain = match rx.recv_by(deadline) {
        Ok(Some(p)) => p,
        Ok(None) => return Err(EngineError::net(format!("waiting for {what}"), io::ErrorKind::UnexpectedEof.into())),
        Err(e) if e.is_timeout() => return Err(EngineError::Timeout(format!("waiting for {what}"))),
        Err(e) => return Err(e),
    };
    match decode_all(plain)?.as_slice() {
        [Frame::HostAuth(a)] if from_host => Ok(*a),
        [Frame::ClientAuth(a)] if !from_host => Ok(*a),
        [Frame::Fatal(f), ..] => Err(EngineError::Remote {
            code: ErrorCode::from_u16(f.code),
            message: linerate_proto::name::escape(f.message),
        }),
        [other, ..] => Err(ProtoError::Violation(format!("expected {what} alone in a record, got {other:?}")).into()),
        [] => Err(ProtoError::Violation(format!("expected {what}, got an empty record")).into()),
    }
}

/// What the server decided about a preamble.
pub enum Admit {
    /// Proceed with this pre-shared key; `session` is the id to bind (for control, a fresh one).
    Psk {
        /// The key.
        psk: [u8; KEY_LEN],
        /// The session.
        session: SessionId,
    },
    /// A public-key control connection: run `NN`, sign with this host key, and verify the
    /// client's signature; `session` is the fresh session id.
    Key {
        /// The server's host key.
        host: Arc<Identity>,
        /// The session.
        session: SessionId,
    },
    /// Refuse with this code.
    Refuse(ErrorCode),
}

/// Accept as a server: read the preamble, ask `admit` which key applies, run the handshake, all
/// before `deadline`. Returns the preamble too.
pub fn accept(
    mut sock: TcpStream,
    deadline: Instant,
    admit: impl FnOnce(&ClientHello) -> Admit,
) -> Result<(ClientHello, Secured), EngineError> {
    let mut ch = [0u8; CLIENT_HELLO_LEN];
    read_by(&mut sock, &mut ch, deadline, "reading the client's preamble")?;
    let hello = match ClientHello::decode(&ch) {
        Ok(h) => h,
        Err(e) => {
            let status = if matches!(e, ProtoError::Version { .. }) { ErrorCode::Version } else { ErrorCode::BadFrame };
            let _ = sock.write_all(&ServerHello { version: PROTOCOL_VERSION, status: status as u8 }.encode());
            return Err(e.into());
        }
    };
    let (psk, session, host) = match admit(&hello) {
        Admit::Psk { psk, session } if hello.auth == AuthMode::Secret => (psk, session, None),
        Admit::Key { host, session } if hello.auth == AuthMode::PublicKey => ([0; KEY_LEN], session, Some(host)),
        Admit::Psk { .. } | Admit::Key { .. } => {
            // The admission does not fit the mode the client asked for: never fall back.
            let code = ErrorCode::Unsupported;
            let _ = sock.write_all(&ServerHello { version: PROTOCOL_VERSION, status: code as u8 }.encode());
            return Err(EngineError::Refused { code });
        }
        Admit::Refuse(code) => {
            let _ = sock.write_all(&ServerHello { version: PROTOCOL_VERSION, status: code as u8 }.encode());
            return Err(EngineError::Refused { code });
        }
    };
    let sh = ServerHello { version: PROTOCOL_VERSION, status: 0 }.encode();
    sock.write_all(&sh).map_err(|e| EngineError::net("sending the preamble", e))?;
    let mut prologue = ch.to_vec();
    prologue.extend_from_slice(&sh);
    let mut hs = match host {
        Some(_) => Handshake::new_nn(Role::Responder, hello.suite, &prologue)?,
        None => Handshake::new(Role::Responder, hello.suite, &psk, &prologue)?,
    };
    hs.read(&recv_hs(&mut sock, deadline)?)?;
    let payload: &[u8] = match hello.kind {
        StreamKind::Control => &session,
        StreamKind::Data => b"",
    };
    send_hs(&mut sock, &hs.write(payload)?)?;
    let hash = if host.is_some() { Some(hs.hash()?) } else { None };
    let keys = hs.finish()?;
    sock.set_read_timeout(None).map_err(|e| EngineError::net("configuring a socket", e))?;
    let (tx, mut rx) = halves(sock, &keys, hello.suite, session, hello.stream, Role::Responder)?;
    // Until the session says what it is, a record may be no longer than its first request (on a
    // data stream: nothing is read until the session attaches it, which sets its own cap).
    rx.set_record_cap(match hello.kind {
        StreamKind::Control => REQUEST_RECORD,
        StreamKind::Data => PREAUTH_RECORD,
    });
    let mut sec = Secured {
        tx,
        rx,
        session,
        stream_psk: zeroize::Zeroizing::new(keys.stream_psk),
        suite: hello.suite,
        peer_key: None,
    };
    if let (Some(host), Some(hash)) = (host, hash) {
        sec.peer_key = Some(server_key_auth(&mut sec, &host, &hash, deadline)?);
    }
    Ok((hello, sec))
}

/// The server's half of public-key authentication: send `HostAuth`, then read the client's
/// `ClientAuth` and verify its signature before `deadline`. A bad signature gets `Fatal` (Auth).
fn server_key_auth(
    sec: &mut Secured,
    host: &Identity,
    hash: &[u8; KEY_LEN],
    deadline: Instant,
) -> Result<PublicKey, EngineError> {
    sec.tx.send_frames(&[Frame::HostAuth(host.sign(Signer::Host, hash))])?;
    // Nobody is authenticated yet: a record may hold the one ClientAuth and no more.
    sec.rx.set_record_cap(PREAUTH_RECORD);
    let a = match recv_key_auth(&mut sec.rx, deadline, false) {
        Ok(a) => a,
        Err(EngineError::Proto(e)) => {
            let msg = e.to_string();
            let _ =
                sec.tx.send_frames(&[Frame::Fatal(frame::Fatal { code: e.code() as u16, message: msg.as_bytes() })]);
            return Err(e.into());
        }
        Err(e) => return Err(e),
    };
    let key = PublicKey(a.key);
    if auth::verify(Signer::Client, &a.key, &a.signature, hash).is_err() {
        let msg = format!("the signature of key {} does not verify", key.fingerprint());
        let fatal = frame::Fatal { code: ErrorCode::Auth as u16, message: msg.as_bytes() };
        let _ = sec.tx.send_frames(&[Frame::Fatal(fatal)]);
        return Err(ProtoError::Violation(msg).into());
    }
    sec.rx.set_record_cap(REQUEST_RECORD);
    Ok(key)
}

/// Decode every frame of a record, failing on the first bad one.
pub fn decode_all(plain: &[u8]) -> Result<Vec<Frame<'_>>, ProtoError> {
    frame::frames(plain).collect()
}

/// The suite to propose: AES-256-GCM where this CPU accelerates AES, ChaCha20-Poly1305 elsewhere.
pub fn preferred_suite() -> Suite {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("aes") && std::arch::is_x86_feature_detected!("pclmulqdq") {
            return Suite::Aes256Gcm;
        }
        Suite::ChaCha20Poly1305
    }
    #[cfg(target_arch = "aarch64")]
    {
        if std::arch::is_aarch64_feature_detected!("aes") && std::arch::is_aarch64_feature_detected!("pmull") {
            return Suite::Aes256Gcm;
        }
        Suite::ChaCha20Poly1305
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        Suite::ChaCha20Poly1305
    }
}

/// The record size we aim for when batching small frames.
pub const BATCH_TARGET: usize = caps::MAX_BATCH;
