//! Authenticated, encrypted connections: the preamble exchange and Noise handshake over TCP,
//! then AEAD records in each direction. Each half can move to its own thread.

use crate::keys::{Identity, KeyClient, PublicKey};
use crate::secret::Secret;
use crate::EngineError;
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
pub struct RecvHalf {
    sock: TcpStream,
    opener: Opener,
    buf: Vec<u8>,
}

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
    /// is the server's decision ([`crate::authorized`]).
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

    /// Close our sending direction.
    pub fn shutdown(&self) {
        let _ = self.sock.shutdown(Shutdown::Both);
    }
}

impl RecvHalf {
    /// Receive and open the next record; returns its plaintext. `Ok(None)` on a clean EOF at a
    /// record boundary.
    pub fn recv(&mut self) -> Result<Option<&[u8]>, EngineError> {
        let mut header = [0u8; HEADER_LEN];
        match read_full(&mut self.sock, &mut header) {
            Ok(0) => return Ok(None),
            Ok(n) if n < HEADER_LEN => return Err(ProtoError::Truncated("record header").into()),
            Ok(_) => {}
            Err(e) => return Err(EngineError::net("receiving a record", e)),
        }
        let len = Opener::record_len(header)?;
        if self.buf.len() < len {
            self.buf.resize(len, 0);
        }
        let ct = &mut self.buf[..len];
        match read_full(&mut self.sock, ct) {
            Ok(n) if n == len => {}
            Ok(_) => return Err(ProtoError::Truncated("record body").into()),
            Err(e) => return Err(EngineError::net("receiving a record", e)),
        }
        Ok(Some(self.opener.open(ct)?))
    }

    /// Set a timeout on reads (None: wait forever).
    pub fn set_timeout(&self, t: Option<Duration>) {
        let _ = self.sock.set_read_timeout(t);
    }

    /// A clone of the socket, to shut it down from another thread.
    pub fn socket(&self) -> Option<TcpStream> {
        self.sock.try_clone().ok()
    }
}

/// Read until `buf` is full or EOF; returns bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
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
    Ok((SendHalf { sock, sealer, buf: Vec::new() }, RecvHalf { sock: rsock, opener, buf: Vec::new() }))
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
    let hello = ClientHello { kind, suite, session, stream, auth: AuthMode::Secret }.encode();
    sock.write_all(&hello).map_err(|e| EngineError::net(format!("sending the preamble to {addr}"), e))?;
    let mut sh = [0u8; SERVER_HELLO_LEN];
    read_by(&mut sock, &mut sh, deadline, "reading the server's preamble")?;
    let server = ServerHello::decode(&sh)?;
    if server.version != PROTOCOL_VERSION {
        return Err(ProtoError::Version { ours: PROTOCOL_VERSION, theirs: server.version }.into());
    }
    if server.status != 0 {
        return Err(EngineError::Refused { code: ErrorCode::from_u16(server.status.into()) });
    }
    let mut prologue = hello.to_vec();
    prologue.extend_from_slice(&sh);
    let mut hs = Handshake::new(Role::Initiator, suite, psk, &prologue)?;
    send_hs(&mut sock, &hs.write(b"")?)?;
    let reply = match recv_hs(&mut sock, deadline) {
        Ok(m) => m,
        // The server closes without a word when our message does not authenticate.
        Err(EngineError::Net { .. }) => return Err(ProtoError::Auth.into()),
        Err(e) => return Err(e),
    };
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
    let mut sock =
        TcpStream::connect_timeout(&addr, timeout).map_err(|e| EngineError::net(format!("connecting to {addr}"), e))?;
    let deadline = Instant::now() + timeout;
    let hello =
        ClientHello { kind: StreamKind::Control, suite, session: [0; 16], stream: 0, auth: AuthMode::PublicKey }
            .encode();
    sock.write_all(&hello).map_err(|e| EngineError::net(format!("sending the preamble to {addr}"), e))?;
    let mut sh = [0u8; SERVER_HELLO_LEN];
    read_by(&mut sock, &mut sh, deadline, "reading the server's preamble")?;
    let server = ServerHello::decode(&sh)?;
    if server.version != PROTOCOL_VERSION {
        return Err(ProtoError::Version { ours: PROTOCOL_VERSION, theirs: server.version }.into());
    }
    match ErrorCode::from_u16(server.status.into()) {
        _ if server.status == 0 => {}
        ErrorCode::Unsupported => {
            return Err(EngineError::Usage(format!(
                "{addr} does not accept key authentication (it has no --authorized-keys); use --key-file"
            )))
        }
        code => return Err(EngineError::Refused { code }),
    }
    let mut prologue = hello.to_vec();
    prologue.extend_from_slice(&sh);
    let mut hs = Handshake::new_nn(Role::Initiator, suite, &prologue)?;
    send_hs(&mut sock, &hs.write(b"")?)?;
    let reply = match recv_hs(&mut sock, deadline) {
        Ok(m) => m,
        Err(EngineError::Net { .. }) => return Err(ProtoError::Auth.into()),
        Err(e) => return Err(e),
    };
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
    rx.set_timeout(Some(deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1))));
    let plain = match rx.recv() {
        Ok(Some(p)) => p,
        Ok(None) => return Err(EngineError::net(format!("waiting for {what}"), io::ErrorKind::UnexpectedEof.into())),
        Err(EngineError::Net { io: source, .. })
            if matches!(source.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) =>
        {
            return Err(EngineError::Timeout(format!("waiting for {what}")))
        }
        Err(e) => return Err(e),
    };
    let got = match decode_all(plain)?.as_slice() {
        [Frame::HostAuth(a)] if from_host => Ok(*a),
        [Frame::ClientAuth(a)] if !from_host => Ok(*a),
        [Frame::Fatal(f), ..] => Err(EngineError::Remote {
            code: ErrorCode::from_u16(f.code),
            message: linerate_proto::name::escape(f.message),
        }),
        [other, ..] => Err(ProtoError::Violation(format!("expected {what} alone in a record, got {other:?}")).into()),
        [] => Err(ProtoError::Violation(format!("expected {what}, got an empty record")).into()),
    };
    rx.set_timeout(None);
    got
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
    let (tx, rx) = halves(sock, &keys, hello.suite, session, hello.stream, Role::Responder)?;
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
pub const BATCH_TARGET: usize = 256 * 1024;
const _: () = assert!(BATCH_TARGET < caps::MAX_RECORD);
