//! udp-stream: paced datagrams with sequence numbers, counted at the receiver (loss, reordering,
//! duplicates, jitter). Each client socket first registers its address with the server by a
//! datagram carrying the test's tag, so the server knows which socket is which connection and,
//! in reverse mode, where to send. Datagrams move in batches, many per system call each side
//! ([`super::dgram`]), and are counted one by one. Receivers wait for their socket and the
//! test's stop in one poll ([`Readiness`]); senders are paced and look at the stop between
//! batches.

use super::dgram::{size_recv_buffer, Batching, Offload, Receiver, Sender};
use super::Counters;
use linerate_model::shutdown::{Shutdown, Stopper};
use linerate_net::{EngineError, UsageError};
use linerate_proto::bench::{Direction, Ready, TestSpec, UdpBatching, UdpCounts, UdpHeader, UDP_HEADER_LEN};
use mio::{Events, Interest, Poll, Token, Waker};
use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Sequence number of a registration datagram (its `sent_ns` carries the connection index).
const REGISTER: u64 = u64::MAX;
/// Width of the window that tells duplicates from late arrivals.
const WINDOW: u64 = 4096;

/// Per-connection receive bookkeeping.
#[derive(Default, Clone)]
struct RecvState {
    next: u64,
    seen: Vec<u64>,
    received: u64,
    bytes: u64,
    ooo: u64,
    dups: u64,
    jitter_ns: f64,
    last_transit: Option<i128>,
}

impl RecvState {
    /// Count a datagram; those sent during the warm-up (`sent_ns < omit_ns`, on the sender's
    /// clock) only move the window.
    fn on_datagram(&mut self, h: &UdpHeader, len: usize, arrival_ns: u64, omit_ns: u64) {
        if self.seen.is_empty() {
            self.seen = vec![0; (WINDOW / 64) as usize];
        }
        let seq = h.seq;
        if seq + WINDOW < self.next {
            self.ooo += 1; // too old to tell; counted as late
            return;
        }
        let bit = |s: u64| ((s % WINDOW) / 64) as usize;
        let mask = |s: u64| 1u64 << (s % 64);
        if seq >= self.next {
            // Clear the window slots we skip over.
            let mut s = self.next;
            while s <= seq && s < self.next + WINDOW {
                self.seen[bit(s)] &= !mask(s);
                s += 1;
            }
            if seq > self.next + WINDOW {
                self.seen.iter_mut().for_each(|w| *w = 0);
            }
            self.next = seq + 1;
        } else if self.seen[bit(seq)] & mask(seq) != 0 {
            self.dups += 1;
            return;
        } else {
            self.ooo += 1;
        }
        self.seen[bit(seq)] |= mask(seq);
        if h.sent_ns < omit_ns {
            return;
        }
        self.received += 1;
        self.bytes += len as u64;
        let transit = i128::from(arrival_ns) - i128::from(h.sent_ns);
        if let Some(prev) = self.last_transit {
            let d = (transit - prev).abs() as f64;
            self.jitter_ns += (d - self.jitter_ns) / 16.0;
        }
        self.last_transit = Some(transit);
    }
}

fn merge(states: &[RecvState], sent: u64, tx: Batching, rx: Batching) -> UdpCounts {
    let n = states.iter().filter(|s| s.received > 0).count().max(1) as f64;
    let batching = UdpBatching {
        send_calls: tx.calls,
        sent_messages: tx.messages,
        sent_datagrams: tx.datagrams,
        recv_calls: rx.calls,
        received_messages: rx.messages,
        received_datagrams: rx.datagrams,
    };
    UdpCounts {
        sent,
        received: states.iter().map(|s| s.received).sum(),
        bytes: states.iter().map(|s| s.bytes).sum(),
        out_of_order: states.iter().map(|s| s.ooo).sum(),
        duplicates: states.iter().map(|s| s.dups).sum(),
        expected: states.iter().map(|s| s.next).sum(),
        jitter_us: states.iter().map(|s| s.jitter_ns).sum::<f64>() / n / 1000.0,
        batching: Some(batching),
    }
}

/// Poll token of a receiver's socket.
const SOCKET: Token = Token(0);
/// Poll token of its waker.
const WAKE: Token = Token(1);

/// What a receiving thread waits on: its socket and a stop, in one mio poll, the stop waking it
/// through a [`Waker`] ([`Shutdown::on_stop`]). The socket is registered edge-triggered: its
/// reader takes what is queued (without blocking) before each wait.
struct Readiness {
    poll: Poll,
    events: Events,
    /// Woken by the stop's hook, which holds it too.
    _waker: Arc<Waker>,
}

impl Readiness {
    fn new(sock: &UdpSocket, stop: &Shutdown) -> Result<Readiness, EngineError> {
        let net = |e| EngineError::net("watching a UDP socket", e);
        let poll = Poll::new().map_err(net)?;
        let fd = sock.as_raw_fd();
        poll.registry().register(&mut mio::unix::SourceFd(&fd), SOCKET, Interest::READABLE).map_err(net)?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKE).map_err(net)?);
        let wake = waker.clone();
        stop.on_stop(move || {
            let _ = wake.wake();
        });
        Ok(Readiness { poll, events: Events::with_capacity(4), _waker: waker })
    }

    /// Block until the socket has something new or the stop came (or a signal interrupted).
    fn wait(&mut self) {
        let _ = self.poll.poll(&mut self.events, None);
    }
}

fn tag(ready: &Ready) -> [u8; 8] {
    let mut t = [0u8; 8];
    t.copy_from_slice(&ready.cookie[..8]);
    t
}

/// Send paced datagrams on `socks` (slot, socket, destination) until the test's stop, in batches
/// (see [`super::dgram`]): as many as the rate allows since the last batch, up to a batch. The
/// datagrams of one batch carry the same send time. The datagrams sent after the warm-up, and
/// how all of them travelled.
fn send_loop(
    socks: &[(u32, Arc<UdpSocket>, Option<SocketAddr>)],
    spec: &TestSpec,
    tag: [u8; 8],
    counters: &Counters,
    total_conns: u64,
) -> (u64, Batching) {
    let size = spec.msg_size as usize;
    let fill = super::reactor::pattern(size);
    let offload = Offload::of(spec.gsro);
    let mut batches: Vec<Sender> =
        socks.iter().map(|(_, s, to)| Sender::new(s.clone(), *to, size, &fill, offload)).collect();
    let pps = spec.rate.map(|r| r as f64 / 8.0 / size as f64 / total_conns.max(1) as f64);
    let start = Instant::now();
    let omit_ns = counters.omit_ns();
    let mut seqs = vec![0u64; socks.len()];
    let mut sent = 0u64;
    while !counters.stopped() {
        let elapsed = start.elapsed().as_secs_f64();
        let mut idle = true;
        for (k, ((slot, _, _), tx)) in socks.iter().zip(batches.iter_mut()).enumerate() {
            let room = tx.capacity() as u64;
            let due = pps.map_or(seqs[k] + room, |p| (p * elapsed) as u64 + 1);
            let want = due.saturating_sub(seqs[k]).min(room) as usize;
            // A byte count (iperf3 -n): the last datagram goes out whole.
            let taken = if want == 0 { 0 } else { counters.take(want * size) };
            if taken == 0 {
                continue;
            }
            let n = taken.div_ceil(size);
            let now_ns = counters.since_start().as_nanos() as u64;
            for i in 0..n {
                UdpHeader { tag, seq: seqs[k] + i as u64, sent_ns: now_ns }
                    .write(&mut tx.datagram_mut(i)[..UDP_HEADER_LEN]);
            }
            // A full socket buffer or an ICMP error from a closed port: try again later.
            let m = tx.send(n).unwrap_or(0);
            counters.give_back(taken.saturating_sub(m * size));
            if m > 0 {
                counters.add_tx(*slot as usize, m * size);
                seqs[k] += m as u64;
                if now_ns >= omit_ns {
                    sent += m as u64;
                }
                idle = false;
            }
        }
        if idle {
            // Pacing, not polling (one of the sleeps the tree keeps on purpose): nothing to send
            // until the rate allows the next datagram, at most 5 ms.
            let wait = pps.map_or(Duration::from_micros(50), |p| Duration::from_secs_f64((1.0 / p).min(0.005)));
            std::thread::sleep(wait);
        }
    }
    let mut travelled = Batching::default();
    batches.iter().for_each(|b| travelled.add(b.batching()));
    (sent, travelled)
}

/// Receive on `rx` until the test's stop, waiting on `ready` (its socket's and the stop's):
/// each datagram carrying the test's tag is counted for the connection `slot_of` names from its
/// source address (registrations go to `on_register`).
fn receive_loop(
    rx: &mut Receiver,
    ready: &mut Readiness,
    tag: [u8; 8],
    c: &Counters,
    states: &mut [RecvState],
    mut slot_of: impl FnMut(Option<SocketAddr>) -> Option<usize>,
    mut on_register: impl FnMut(&[u8], Option<SocketAddr>),
) {
    let omit_ns = c.omit_ns();
    while !c.stopped() {
        // An error (an ICMP one on a connected socket) is read once: try again.
        let Ok(n) = rx.try_recv() else { continue };
        if n == 0 {
            ready.wait();
            continue;
        }
        let now_ns = c.since_start().as_nanos() as u64;
        for j in 0..n {
            let Some(m) = rx.message(j) else { continue };
            let slot = slot_of(m.from);
            let mut bytes = 0;
            for d in m.datagrams() {
                let Some(h) = UdpHeader::read(d).filter(|h| h.tag == tag) else { continue };
                if h.seq == REGISTER {
                    on_register(d, m.from);
                    continue;
                }
                if let Some(st) = slot.and_then(|i| states.get_mut(i)) {
                    bytes += d.len();
                    st.on_datagram(&h, d.len(), now_ns, omit_ns);
                }
            }
            if bytes > 0 {
                c.add_rx(slot.unwrap_or(0), bytes);
            }
        }
    }
}

/// A UDP test in progress on one side.
pub(crate) struct Running {
    senders: Vec<JoinHandle<(u64, Batching)>>,
    receivers: Vec<JoinHandle<(Vec<RecvState>, Batching)>>,
    buffers: Option<(u32, u32)>,
}

impl Running {
    /// End the threads (the caller stopped the counters) and merge the counts.
    pub(crate) fn join(self, counters: &Counters) -> (UdpCounts, Option<(u32, u32)>) {
        counters.stop();
        let (mut sent, mut tx, mut rx) = (0, Batching::default(), Batching::default());
        for (n, b) in self.senders.into_iter().filter_map(|t| t.join().ok()) {
            sent += n;
            tx.add(b);
        }
        let mut states = Vec::new();
        for (st, b) in self.receivers.into_iter().filter_map(|t| t.join().ok()) {
            states.extend(st);
            rx.add(b);
        }
        (merge(&states, sent, tx, rx), self.buffers)
    }
}

fn buffers_of(s: &UdpSocket) -> Option<(u32, u32)> {
    let r = socket2::SockRef::from(s);
    Some((r.send_buffer_size().ok()? as u32, r.recv_buffer_size().ok()? as u32))
}

/// The test's socket options (buffers, TOS) on a UDP socket; TCP's do not apply (a congestion
/// control is refused with udp-stream by the test's rules).
fn apply_opts(s: &UdpSocket, spec: &TestSpec) -> Result<(), EngineError> {
    let opts = super::reactor::SockOpts { nodelay: false, congestion: None, ..super::reactor::SockOpts::of(spec) };
    opts.apply(&socket2::SockRef::from(s)).map_err(|e| UsageError::Test(e.to_string()).into())
}

/// The client's sockets.
pub(crate) struct Client {
    socks: Vec<Arc<UdpSocket>>,
    tag: [u8; 8],
    counters: Arc<Counters>,
}

impl Client {
    pub(crate) fn open(
        spec: &TestSpec,
        ready: &Ready,
        target: SocketAddr,
        cport: Option<u16>,
        counters: Arc<Counters>,
    ) -> Result<Client, EngineError> {
        let mut socks = Vec::new();
        for i in 0..spec.connections {
            // Socket i on port cport + i when the client asked for fixed ports (iperf3 --cport).
            let port = match super::reactor::local_port(cport, i) {
                Some(p) => p.map_err(|e| UsageError::Test(e.to_string()))?,
                None => 0,
            };
            let bind: SocketAddr = if target.is_ipv4() {
                ([0, 0, 0, 0], port).into()
            } else {
                (std::net::Ipv6Addr::UNSPECIFIED, port).into()
            };
            let s =
                UdpSocket::bind(bind).map_err(|e| EngineError::net(format!("binding a UDP socket to {bind}"), e))?;
            apply_opts(&s, spec)?;
            s.connect(target).map_err(|e| EngineError::net(format!("connecting UDP to {target}"), e))?;
            // Register (three times: this is UDP) so the server knows this socket's address.
            let mut reg = [0u8; UDP_HEADER_LEN];
            UdpHeader { tag: tag(ready), seq: REGISTER, sent_ns: u64::from(i) }.write(&mut reg);
            for _ in 0..3 {
                let _ = s.send(&reg);
            }
            socks.push(Arc::new(s));
        }
        // Give the registrations a moment to land before the start (kept on purpose: the server
        // acknowledges no registration, so there is no event to await; a lost one only costs
        // that socket's first datagrams).
        std::thread::sleep(Duration::from_millis(20));
        Ok(Client { socks, tag: tag(ready), counters })
    }

    /// Send or receive on worker threads, pinned to `cpu` when given.
    pub(crate) fn start(self, spec: &TestSpec, cpu: Option<u32>) -> Result<Running, EngineError> {
        let buffers = self.socks.first().and_then(|s| buffers_of(s));
        let mut run = Running { senders: Vec::new(), receivers: Vec::new(), buffers };
        let total = self.socks.len() as u64;
        match spec.direction {
            Direction::Send | Direction::Bidir => {
                let threads = super::worker_count(total);
                for t in 0..threads {
                    let mine: Vec<_> = self
                        .socks
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| i % threads == t)
                        .map(|(i, s)| (i as u32, s.clone(), None))
                        .collect();
                    let (spec, c, tag) = (spec.clone(), self.counters.clone(), self.tag);
                    run.senders.push(super::spawn_worker(cpu, move || send_loop(&mine, &spec, tag, &c, total)));
                }
            }
            Direction::Receive => {
                let offload = Offload::of(spec.gsro);
                for (i, s) in self.socks.iter().enumerate() {
                    let (s, c, tag, size) = (s.clone(), self.counters.clone(), self.tag, spec.msg_size as usize);
                    if spec.rcvbuf.is_none() {
                        size_recv_buffer(&s, spec.rate, size, spec.connections);
                    }
                    let mut ready = Readiness::new(&s, &c.shutdown())?;
                    run.receivers.push(super::spawn_worker(cpu, move || {
                        // Socket i's datagrams are connection i's (its counters' slot).
                        let mut st = vec![RecvState::default(); i + 1];
                        let mut rx = Receiver::new(s, size, offload);
                        receive_loop(&mut rx, &mut ready, tag, &c, &mut st, |_| Some(i), |_, _| ());
                        (vec![st.swap_remove(i)], rx.batching())
                    }));
                }
            }
        }
        Ok(run)
    }
}

/// The server's socket and the registered client addresses.
pub(crate) struct Server {
    sock: Arc<UdpSocket>,
    tag: [u8; 8],
    counters: Arc<Counters>,
    conns: u64,
    peers: Arc<Mutex<HashMap<SocketAddr, u32>>>,
    registrar: Option<JoinHandle<()>>,
    /// Ends the registrar at the start.
    reg_stop: Stopper,
}

impl Server {
    pub(crate) fn open(
        sock: UdpSocket,
        spec: &TestSpec,
        ready: &Ready,
        counters: Arc<Counters>,
    ) -> Result<Server, EngineError> {
        apply_opts(&sock, spec)?;
        // Non-blocking while the registrar reads it (below); blocking again for the test's sends.
        sock.set_nonblocking(true).map_err(|e| EngineError::net("a non-blocking UDP socket", e))?;
        let sock = Arc::new(sock);
        let peers = Arc::new(Mutex::new(HashMap::new()));
        let reg_stop = Stopper::new();
        let mut watch = Readiness::new(&sock, &reg_stop.shutdown())?;
        // Before the start, only registrations are read.
        let registrar = {
            let (s, p, stop, t, n) =
                (sock.clone(), peers.clone(), reg_stop.shutdown(), tag(ready), u64::from(spec.connections));
            std::thread::spawn(move || {
                let mut buf = [0u8; 2048];
                while !stop.is_stopped() {
                    match s.recv_from(&mut buf) {
                        Ok((len, from)) => register(&buf[..len], from, t, n, &p),
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => watch.wait(),
                        Err(_) => {}
                    }
                }
            })
        };
        Ok(Server {
            sock,
            tag: tag(ready),
            counters,
            conns: u64::from(spec.connections),
            peers,
            registrar: Some(registrar),
            reg_stop,
        })
    }

    /// Receive or send on worker threads, pinned to `cpu` when given.
    pub(crate) fn start(mut self, spec: &TestSpec, cpu: Option<u32>) -> Result<Running, EngineError> {
        self.reg_stop.stop();
        if let Some(r) = self.registrar.take() {
            let _ = r.join();
        }
        self.sock.set_nonblocking(false).map_err(|e| EngineError::net("a blocking UDP socket", e))?;
        let buffers = buffers_of(&self.sock);
        let mut run = Running { senders: Vec::new(), receivers: Vec::new(), buffers };
        let (s, c, t, n, p) = (self.sock.clone(), self.counters.clone(), self.tag, self.conns, self.peers.clone());
        match spec.direction {
            Direction::Send | Direction::Bidir => {
                if spec.rcvbuf.is_none() {
                    size_recv_buffer(&s, spec.rate, spec.msg_size as usize, 1);
                }
                let (size, offload) = (spec.msg_size as usize, Offload::of(spec.gsro));
                let mut ready = Readiness::new(&s, &c.shutdown())?;
                run.receivers.push(super::spawn_worker(cpu, move || {
                    let mut states = vec![RecvState::default(); n as usize];
                    let mut rx = Receiver::new(s, size, offload);
                    // The registered addresses, copied: looked up again only for an unknown one.
                    let mut known = p.lock().map(|m| m.clone()).unwrap_or_default();
                    let slot_of = |from: Option<SocketAddr>| {
                        let from = from?;
                        if !known.contains_key(&from) {
                            known = p.lock().map(|m| m.clone()).unwrap_or_default();
                        }
                        known.get(&from).map(|&i| i as usize)
                    };
                    let on_register = |d: &[u8], from: Option<SocketAddr>| {
                        if let Some(from) = from {
                            register(d, from, t, n, &p);
                        }
                    };
                    receive_loop(&mut rx, &mut ready, t, &c, &mut states, slot_of, on_register);
                    let travelled = rx.batching();
                    (states, travelled)
                }));
            }
            Direction::Receive => {
                let spec = spec.clone();
                run.senders.push(super::spawn_worker(cpu, move || {
                    let peers: Vec<_> = p
                        .lock()
                        .map(|m| m.iter().map(|(a, i)| (*i, s.clone(), Some(*a))).collect())
                        .unwrap_or_default();
                    send_loop(&peers, &spec, t, &c, n)
                }));
            }
        }
        Ok(run)
    }
}

fn register(b: &[u8], from: SocketAddr, t: [u8; 8], conns: u64, peers: &Mutex<HashMap<SocketAddr, u32>>) {
    if let Some(h) = UdpHeader::read(b).filter(|h| h.tag == t && h.seq == REGISTER && h.sent_ns < conns) {
        if let Ok(mut m) = peers.lock() {
            if m.len() < conns as usize || m.contains_key(&from) {
                m.insert(from, h.sent_ns as u32);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(seq: u64) -> UdpHeader {
        UdpHeader { tag: [0; 8], seq, sent_ns: seq * 1000 }
    }

    #[test]
    fn loss_reordering_and_duplicates_are_told_apart() {
        let mut st = RecvState::default();
        for s in [0, 1, 3, 2, 2, 5, 6] {
            st.on_datagram(&h(s), 100, s * 1000 + 50, 0);
        }
        let c = merge(&[st], 8, Batching::default(), Batching::default());
        assert_eq!(c.received, 6, "{:?}", c.received);
        assert_eq!(c.duplicates, 1);
        assert_eq!(c.out_of_order, 1, "2 arrived after 3");
        assert_eq!(c.expected, 7, "highest seq 6 + 1");
        assert_eq!(c.sent - c.received, 2, "4 and 7 lost");
        assert_eq!(c.bytes, 600);
        assert!(c.jitter_us.abs() < 1e-9, "constant transit time means no jitter");
    }

    #[test]
    fn datagrams_sent_in_the_warm_up_are_not_counted() {
        let mut st = RecvState::default();
        for s in 0..10 {
            st.on_datagram(&h(s), 100, s * 1000 + 50, 5000);
        }
        let c = merge(&[st], 5, Batching::default(), Batching::default());
        assert_eq!(c.received, 5, "seq 5..9 were sent at 5000 ns and later");
        assert_eq!(c.expected, 10);
    }
}
