//! An accept loop that a stop wakes (issue 30): the listener and a [`mio::Waker`] on one
//! [`mio::Poll`], so that `serve` and its metrics endpoint wait for a connection, a deadline
//! or a wake-up at once — never by sleeping, and never by connecting to themselves.

use linerate_model::shutdown::Shutdown;
use mio::{Events, Interest, Poll, Token, Waker};
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

const LISTENER: Token = Token(0);
const WAKE: Token = Token(1);

/// How long accepting pauses after it failed for want of resources (out of file descriptors):
/// the connection stays queued and accepting again at once would fail again at once.
const BACKOFF: Duration = Duration::from_millis(50);

/// What [`Acceptor::next`] returned.
#[derive(Debug)]
pub enum Accepted {
    /// A connection (blocking, as std opens them) and its peer.
    Conn(TcpStream, SocketAddr),
    /// [`Acceptor::waker`] was woken: something the caller waits for changed.
    Woken,
    /// The deadline passed.
    Timeout,
}

/// A listener with a waker; see the module documentation.
#[derive(Debug)]
pub struct Acceptor {
    listener: TcpListener,
    poll: Poll,
    events: Events,
    waker: Arc<Waker>,
}

impl Acceptor {
    /// Watch `listener` (made non-blocking).
    pub fn new(listener: TcpListener) -> io::Result<Acceptor> {
        listener.set_nonblocking(true)?;
        let poll = Poll::new()?;
        let fd = listener.as_raw_fd();
        poll.registry().register(&mut mio::unix::SourceFd(&fd), LISTENER, Interest::READABLE)?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKE)?);
        Ok(Acceptor { listener, poll, events: Events::with_capacity(16), waker })
    }

    /// The waker: [`Waker::wake`] makes a waiting [`Acceptor::next`] return [`Accepted::Woken`].
    pub fn waker(&self) -> Arc<Waker> {
        self.waker.clone()
    }

    /// Wake a waiting [`Acceptor::next`] when `shutdown` comes.
    pub fn wake_on(&self, shutdown: &Shutdown) {
        let w = self.waker();
        shutdown.on_stop(move || {
            let _ = w.wake();
        });
    }

    /// The next connection, or a wake-up, or `deadline` (none: no deadline).
    pub fn next(&mut self, deadline: Option<Instant>) -> Accepted {
        let passed = |d: Option<Instant>| d.is_some_and(|d| Instant::now() >= d);
        loop {
            match self.listener.accept() {
                Ok((sock, peer)) => {
                    if sock.set_nonblocking(false).is_ok() {
                        return Accepted::Conn(sock, peer);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if self.wait(deadline) {
                        return Accepted::Woken;
                    }
                    if passed(deadline) {
                        return Accepted::Timeout;
                    }
                }
                Err(e) if matches!(e.kind(), io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted) => {}
                // Out of descriptors (or memory): the connection stays queued, so the listener
                // stays readable; wait for the back-off (or a wake-up, or the deadline) instead.
                Err(_) => {
                    let pause = Instant::now() + BACKOFF;
                    let until = deadline.map_or(pause, |d| d.min(pause));
                    while Instant::now() < until {
                        if self.wait(Some(until)) {
                            return Accepted::Woken;
                        }
                    }
                    if passed(deadline) {
                        return Accepted::Timeout;
                    }
                }
            }
        }
    }

    /// Wait for readiness until `until`; whether the waker was woken.
    fn wait(&mut self, until: Option<Instant>) -> bool {
        let timeout = until.map(|u| u.saturating_duration_since(Instant::now()));
        match self.poll.poll(&mut self.events, timeout) {
            Ok(()) => self.events.iter().any(|e| e.token() == WAKE),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => false,
            // A poll that cannot wait any more: report a wake-up, so the caller looks at its
            // state rather than spin here.
            Err(_) => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linerate_model::shutdown::Stopper;

    #[test]
    fn accepts_wakes_on_a_stop_and_times_out() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let mut a = Acceptor::new(l).unwrap();
        let _c = TcpStream::connect(addr).unwrap();
        assert!(matches!(a.next(None), Accepted::Conn(..)));
        assert!(matches!(a.next(Some(Instant::now())), Accepted::Timeout));
        let stop = Stopper::new();
        a.wake_on(&stop.shutdown());
        let t = std::thread::spawn(move || matches!(a.next(None), Accepted::Woken));
        stop.stop();
        assert!(t.join().unwrap(), "a stop wakes the accept loop");
    }
}
