//! Starting a copy's remote side through ssh (issue 5), the way mosh does: the remote
//! `linerate serve --once --ssh` prints one [`Announce`] line on its standard output (protocol
//! version, port, a fresh one-time secret, and the address the ssh connection reached), and the
//! client opens its parallel streams directly to that port. Where a firewall blocks that,
//! `cp --via-ssh` runs a local [`Forwarder`] instead: every connection it accepts on loopback is
//! piped through one `ssh -W` channel of an ssh master connection.

use linerate_model::shutdown::Stopper;
use linerate_net::accept::{Accepted, Acceptor};
use linerate_net::auth::secret::Secret;
use linerate_net::EngineError;
use std::io::{Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// First word of the announce line.
pub const TAG: &str = "LINERATE";

/// The one line a `serve --once --ssh` prints: `LINERATE <protocol> PORT <port> SECRET <64 hex>
/// [ADDR <ip>] [SOFTWARE <version>]`. Words after the version are `KEY VALUE` pairs; unknown keys
/// are ignored, so later versions can add some.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announce {
    /// The wire protocol version the server speaks.
    pub version: u16,
    /// The port it listens on.
    pub port: u16,
    /// The one-time secret of the session.
    pub secret: Secret,
    /// The server's address as the ssh connection reached it (`SSH_CONNECTION`), when known.
    pub addr: Option<IpAddr>,
    /// The server's software version (`linerate --version`), when given.
    pub software: Option<String>,
}

/// Why a line is not a usable announcement.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnnounceError {
    /// The line does not start with `LINERATE <number>`: not from a linerate server.
    #[error("not an announce line")]
    NotAnnounce,
    /// The server speaks another protocol version.
    #[error("the remote linerate speaks protocol version {remote}{}, this one speaks version {local}", .software.as_ref().map(|s| format!(" (linerate {s})")).unwrap_or_default())]
    Version {
        /// The remote's protocol version.
        remote: u16,
        /// Ours.
        local: u16,
        /// The remote's software version, when given.
        software: Option<String>,
    },
    /// A required field is missing or malformed.
    #[error("malformed announce line: {0}")]
    Malformed(&'static str),
}

impl Announce {
    /// The line, without its newline. It carries the secret: write it only to the pipe the client
    /// reads, never to a log.
    pub fn line(&self) -> String {
        let mut s = format!("{TAG} {} PORT {} SECRET {}", self.version, self.port, self.secret.to_hex());
        if let Some(a) = self.addr {
            s.push_str(&format!(" ADDR {a}"));
        }
        if let Some(v) = &self.software {
            s.push_str(&format!(" SOFTWARE {v}"));
        }
        s
    }

    /// Parse a line; a server of another protocol version is [`AnnounceError::Version`] whatever
    /// else its line says.
    pub fn parse(line: &str) -> Result<Announce, AnnounceError> {
        let mut words = line.split_ascii_whitespace();
        if words.next() != Some(TAG) {
            return Err(AnnounceError::NotAnnounce);
        }
        let version: u16 = words.next().and_then(|v| v.parse().ok()).ok_or(AnnounceError::NotAnnounce)?;
        let rest: Vec<&str> = words.collect();
        let field = |k: &str| rest.chunks(2).find(|p| p[0] == k).and_then(|p| p.get(1).copied());
        let software = field("SOFTWARE").filter(|s| s.len() <= 64).map(str::to_string);
        let local = linerate_proto::PROTOCOL_VERSION;
        if version != local {
            return Err(AnnounceError::Version { remote: version, local, software });
        }
        let port = field("PORT").and_then(|p| p.parse::<u16>().ok()).filter(|&p| p != 0);
        let port = port.ok_or(AnnounceError::Malformed("no PORT"))?;
        let secret = field("SECRET").ok_or(AnnounceError::Malformed("no SECRET"))?;
        let secret = Secret::from_hex(secret).map_err(|_| AnnounceError::Malformed("SECRET is not 64 hex digits"))?;
        let addr = match field("ADDR") {
            Some(a) => Some(a.parse().map_err(|_| AnnounceError::Malformed("ADDR is not an IP address"))?),
            None => None,
        };
        Ok(Announce { version, port, secret, addr, software })
    }
}

/// The server address of an ssh session from the value of `SSH_CONNECTION` (`client_ip
/// client_port server_ip server_port`): the address the client reached, as mosh uses it.
pub fn ssh_connection_addr(value: &str) -> Option<IpAddr> {
    let a = value.split_ascii_whitespace().nth(2)?;
    // A link-local IPv6 address may carry a zone (`fe80::1%eth0`), useless to the client.
    a.parse().ok()
}

/// Most connections a [`Forwarder`] pipes at once (a copy needs its streams plus one).
pub const FORWARDER_MAX: usize = 2 * linerate_proto::caps::MAX_STREAMS as usize + 8;

/// A loopback listener whose every accepted connection is piped through a child process (for
/// `--via-ssh`: `ssh -S CTL -W 127.0.0.1:PORT host`, one multiplexed channel per stream).
pub struct Forwarder {
    addr: SocketAddr,
    stop: Stopper,
    accepted: Arc<AtomicU64>,
    children: Arc<Mutex<Vec<Child>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Forwarder {
    /// Listen on `127.0.0.1:0`; `command` makes the child for each connection (its standard input
    /// and output are replaced by pipes; its standard error is inherited).
    pub fn start(command: impl Fn() -> Command + Send + 'static) -> Result<Forwarder, EngineError> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).map_err(|e| EngineError::net("forwarder: listening", e))?;
        let addr = listener.local_addr().map_err(|e| EngineError::net("forwarder: local address", e))?;
        let mut acceptor = Acceptor::new(listener).map_err(|e| EngineError::net("forwarder: listening", e))?;
        let stop = Stopper::new();
        acceptor.wake_on(&stop.shutdown());
        let accepted = Arc::new(AtomicU64::new(0));
        let children = Arc::new(Mutex::new(Vec::new()));
        let live = Arc::new(AtomicUsize::new(0));
        let (s, a, c) = (stop.shutdown(), accepted.clone(), children.clone());
        let thread = std::thread::spawn(move || {
            while !s.is_stopped() {
                let Accepted::Conn(sock, _) = acceptor.next(None) else { continue };
                if live.load(Relaxed) >= FORWARDER_MAX {
                    continue; // dropped: closed at once
                }
                let mut cmd = command();
                cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
                let Ok(mut child) = cmd.spawn() else { continue };
                let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
                    let _ = child.kill();
                    let _ = child.wait();
                    continue;
                };
                a.fetch_add(1, Relaxed);
                c.lock().unwrap_or_else(PoisonError::into_inner).push(child);
                live.fetch_add(1, Relaxed);
                let live = live.clone();
                std::thread::spawn(move || {
                    pipe(sock, stdin, stdout);
                    live.fetch_sub(1, Relaxed);
                });
            }
        });
        Ok(Forwarder { addr, stop, accepted, children, thread: Some(thread) })
    }

    /// Where the copy connects.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections accepted (and piped) so far.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Relaxed)
    }

    /// Stop accepting, give the children `grace` to finish on their own, then kill the rest (by
    /// their process ids) and reap them all.
    pub fn stop(mut self, grace: Duration) {
        self.shutdown(grace);
    }

    fn shutdown(&mut self, grace: Duration) {
        self.stop.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let mut children = std::mem::take(&mut *self.children.lock().unwrap_or_else(PoisonError::into_inner));
        let until = std::time::Instant::now() + grace;
        for c in &mut children {
            let left = until.saturating_duration_since(std::time::Instant::now());
            if linerate_net::proc::exit_within(c, left).is_none() {
                let _ = c.kill();
            }
            let _ = c.wait();
        }
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.shutdown(Duration::ZERO);
        }
    }
}

/// Copy both ways between a socket and a child's pipes until both directions end.
fn pipe(sock: TcpStream, mut stdin: impl Write + Send + 'static, mut stdout: impl Read) {
    let _ = sock.set_nodelay(true);
    let Ok(mut up) = sock.try_clone() else { return };
    let upward = std::thread::spawn(move || {
        let _ = shovel(&mut up, &mut stdin);
        // Dropping stdin tells the child (and through it the remote end) that we are done.
    });
    let mut down = &sock;
    let _ = shovel(&mut stdout, &mut down);
    let _ = sock.shutdown(Shutdown::Both);
    let _ = upward.join();
}

/// Copy until end of input with plain reads and writes. `std::io::copy` splices between a socket
/// and a pipe, and with the pipe's other end passed to an ssh mux master no data came through
/// (OpenSSH 9.2: the copy's first connection timed out in the lab test).
fn shovel(from: &mut impl Read, to: &mut impl Write) -> std::io::Result<()> {
    let mut buf = vec![0u8; 128 << 10];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        to.write_all(&buf[..n])?;
    }
}

/// Whether a TCP connection to `addr` opens within `timeout`: how a client chooses between the
/// address an ssh connection reached and the host name ssh resolves. The connection closes
/// before its first byte, which a server takes for a probe, not a session.
pub fn reachable(addr: SocketAddr, timeout: Duration) -> bool {
    std::net::TcpStream::connect_timeout(&addr, timeout).is_ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn sample() -> Announce {
        Announce {
            version: linerate_proto::PROTOCOL_VERSION,
            port: 40123,
            secret: Secret::generate().unwrap(),
            addr: Some("198.18.0.2".parse().unwrap()),
            software: Some("0.1.0".into()),
        }
    }

    #[test]
    fn announce_round_trips_and_ignores_unknown_fields() {
        let a = sample();
        assert_eq!(Announce::parse(&a.line()).unwrap(), a);
        let extra = format!("{} FUTURE thing\n", a.line());
        assert_eq!(Announce::parse(&extra).unwrap(), a);
        let bare = Announce { addr: None, software: None, ..a };
        assert_eq!(Announce::parse(&bare.line()).unwrap(), bare);
    }

    #[test]
    fn announce_names_both_versions_on_mismatch() {
        let e = Announce::parse("LINERATE 999 SOMETHING else SOFTWARE 9.9.9").unwrap_err();
        assert!(matches!(e, AnnounceError::Version { remote: 999, .. }), "{e:?}");
        let msg = e.to_string();
        let ours = format!("version {}", linerate_proto::PROTOCOL_VERSION);
        assert!(msg.contains("999") && msg.contains("9.9.9") && msg.contains(&ours), "{msg}");
    }

    #[test]
    fn announce_rejects_garbage() {
        assert_eq!(Announce::parse("Welcome to host!"), Err(AnnounceError::NotAnnounce));
        assert_eq!(Announce::parse("LINERATE x"), Err(AnnounceError::NotAnnounce));
        assert_eq!(Announce::parse(""), Err(AnnounceError::NotAnnounce));
        let v = linerate_proto::PROTOCOL_VERSION;
        assert!(matches!(Announce::parse(&format!("LINERATE {v} PORT 0 SECRET x")), Err(AnnounceError::Malformed(_))));
        assert!(matches!(Announce::parse(&format!("LINERATE {v} PORT 9 SECRET ab")), Err(AnnounceError::Malformed(_))));
        let s = "ab".repeat(32);
        assert!(matches!(
            Announce::parse(&format!("LINERATE {v} PORT 9 SECRET {s} ADDR nope")),
            Err(AnnounceError::Malformed(_))
        ));
        assert!(matches!(Announce::parse(&format!("LINERATE {v} SECRET {s}")), Err(AnnounceError::Malformed(_))));
    }

    #[test]
    fn ssh_connection_gives_the_server_address() {
        assert_eq!(ssh_connection_addr("198.18.0.1 51234 198.18.0.2 22"), Some("198.18.0.2".parse().unwrap()));
        assert_eq!(ssh_connection_addr("::1 5 ::1 22"), Some("::1".parse().unwrap()));
        assert_eq!(ssh_connection_addr("fe80::1%eth0 5 fe80::2%eth0 22"), None);
        assert_eq!(ssh_connection_addr(""), None);
    }

    #[test]
    fn forwarder_pipes_each_connection_through_a_child() {
        let f = Forwarder::start(|| Command::new("cat")).unwrap();
        for i in 0..3u8 {
            let mut s = TcpStream::connect(f.addr()).unwrap();
            let msg = vec![i; 100_000];
            let w = {
                let mut s = s.try_clone().unwrap();
                let msg = msg.clone();
                std::thread::spawn(move || {
                    s.write_all(&msg).unwrap();
                    s.shutdown(Shutdown::Write).unwrap();
                })
            };
            let mut back = Vec::new();
            s.read_to_end(&mut back).unwrap();
            w.join().unwrap();
            assert_eq!(back, msg);
        }
        assert_eq!(f.accepted(), 3);
        f.stop(Duration::from_secs(5));
    }
}
