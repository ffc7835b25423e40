//! The streams of a copy whose remote side was started through ssh (issue 5; the start-up
//! itself, and its announce line, are `linerate-remote`'s): where a firewall blocks the direct
//! connection to the remote's port, `cp --via-ssh` runs a local [`Forwarder`]: every
//! connection it accepts on loopback is piped through one `ssh -W` channel of an ssh master
//! connection.

use linerate_model::shutdown::Stopper;
use linerate_net::accept::{Accepted, Acceptor};
use linerate_net::EngineError;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

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
