//! Batched datagram I/O for udp-stream (issue 33): a test of small datagrams must not be one
//! system call per datagram on each side, as iperf3's is. The sender hands the kernel many
//! datagrams per `sendmmsg` and the receiver takes many per `recvmmsg`, each message one datagram,
//! one packet on the wire. Asked for (`--gsro`, [`Offload`]), each message is instead a UDP GSO
//! (`UDP_SEGMENT`) train the kernel cuts into datagrams of the test's size, and the receiver's a
//! UDP GRO train it cuts again at the size the kernel reports: fewer, larger packets through the
//! stack, so off by default (issue 43: 64-byte datagrams read 7.3 M packets/s where the veth
//! counted 129 k). Where the kernel refuses GSO or GRO the socket goes on without it, so old
//! kernels and NICs without the checksum offload GSO needs still run the test. Each side counts
//! its calls, messages and datagrams ([`Batching`]) so a run says how its datagrams travelled.
//! The sender's `sendmmsg` is rustix's and the GSO/GRO socket options are nix's, both safe. The
//! receiver's `recvmmsg` is the one `unsafe` part of the UDP path (its `mmsghdr` array points into
//! buffers the [`Receiver`] owns for the length of each call, and the `UDP_GRO` control message
//! and sender address are read back from them): rustix (1.1) has no `recvmmsg` and parses no
//! `UDP_GRO` control message. nix's `recvmmsg` (`MultiHeaders`, `ControlMessageOwned::
//! UdpGroSegments`) could carry both; moving to it rewrites the receive side of the 64-byte
//! packets/s path and wants its own measurement, so it is left for a change of its own (issue 44).
#![allow(unsafe_code)]

use nix::sys::socket::{setsockopt, sockopt};
use rustix::net::{MMsgHdr, SendAncillaryBuffer, SendFlags, SocketAddrAny};
use std::io::{self, IoSlice};
use std::mem::{size_of, zeroed};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;

/// Segments per GSO message: the kernel's `UDP_MAX_SEGMENTS` (64 before Linux 6.9, 128 since).
const GSO_SEGMENTS: usize = 64;
/// Largest UDP payload one message may carry (IPv4).
const MAX_PAYLOAD: usize = 65_507;
/// Messages per `sendmmsg` / `recvmmsg` call.
const BATCH: usize = 32;
/// Bytes a batch may hold: bounds memory with many connections of large datagrams.
const BATCH_BYTES: usize = 1 << 20;
/// A GRO message is at most this long.
const GRO_MESSAGE: usize = 65_536;
/// Room for one `cmsghdr` carrying an `int` (`CMSG_SPACE(sizeof(int))` on 64-bit Linux), in
/// `u64`s so the buffer is aligned as a `cmsghdr` must be.
const CTRL_WORDS: usize = 3;

/// Whether a socket asks the kernel for trains of datagrams: GSO when sending, GRO when
/// receiving (the test's `gsro`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Offload {
    /// One datagram per message: what the packet counts count is what the wire carries.
    Off,
    /// GSO / GRO trains where the kernel grants them.
    Trains,
}

impl Offload {
    /// The test's choice.
    pub(crate) fn of(gsro: bool) -> Offload {
        if gsro {
            Offload::Trains
        } else {
            Offload::Off
        }
    }
}

/// How one side's datagrams travelled: system calls, messages (a GSO or GRO train is one
/// message) and datagrams, counted over the whole test (warm-up included; only their ratios are
/// reported).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Batching {
    pub calls: u64,
    pub messages: u64,
    pub datagrams: u64,
}

impl Batching {
    pub(crate) fn add(&mut self, o: Batching) {
        self.calls += o.calls;
        self.messages += o.messages;
        self.datagrams += o.datagrams;
    }
}

/// Ask the kernel to cut each message into datagrams of `size` bytes (`UDP_SEGMENT`; 0: off).
fn set_gso(sock: &UdpSocket, size: usize) -> io::Result<()> {
    let size = libc::c_int::try_from(size).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    Ok(setsockopt(sock, sockopt::UdpGsoSegment, &size)?)
}

/// Ask the kernel for GRO trains on receive (`UDP_GRO`).
fn set_gro(sock: &UdpSocket, on: bool) -> io::Result<()> {
    Ok(setsockopt(sock, sockopt::UdpGroSegment, &on)?)
}

/// Size the receive buffer to the rate when the test did not ask for one (`-w`): 100 ms of
/// datagrams, counted at the kernel's per-datagram cost (its `truesize`, ~1 KB more than the
/// payload on loopback), between 4 MB and 64 MB; unpaced, 32 MB shared by the `share` sockets
/// that split the test's datagrams (at least 4 MB each). As root the system's
/// `net.core.rmem_max` is passed by (`SO_RCVBUFFORCE`), otherwise the kernel trims the request.
pub(crate) fn size_recv_buffer(sock: &UdpSocket, rate_bps: Option<u64>, size: usize, share: u32) {
    let want = match rate_bps {
        Some(r) => {
            let pps = r as f64 / 8.0 / size.max(1) as f64 / f64::from(share.max(1));
            (pps * 0.1 * (size + 1024) as f64).clamp(4.0 * 1048576.0, 64.0 * 1048576.0) as libc::c_int
        }
        None => ((32 << 20) / share.max(1) as libc::c_int).max(4 << 20),
    };
    let have = socket2::SockRef::from(sock).recv_buffer_size().unwrap_or(0);
    if have >= want as usize {
        return;
    }
    if setsockopt(sock, sockopt::RcvBufForce, &(want as usize)).is_err() {
        let _ = socket2::SockRef::from(sock).set_recv_buffer_size(want as usize);
    }
}

/// A sender's batch: `capacity()` datagrams of `size` bytes laid end to end, sent to the
/// socket's connected peer or to `dest`.
pub(crate) struct Sender {
    sock: Arc<UdpSocket>,
    dest: Option<SocketAddrAny>,
    size: usize,
    /// Datagrams per message (1 once GSO is off).
    gso: usize,
    /// Messages per call.
    msgs: usize,
    buf: Vec<u8>,
    counted: Batching,
}

impl Sender {
    /// A batch for datagrams of `size` bytes (at least 1), whose contents start as `fill`; GSO
    /// trains only when `offload` asks and the kernel grants them.
    pub(crate) fn new(
        sock: Arc<UdpSocket>,
        dest: Option<SocketAddr>,
        size: usize,
        fill: &[u8],
        offload: Offload,
    ) -> Sender {
        let size = size.max(1);
        let mut gso = (MAX_PAYLOAD / size).min(GSO_SEGMENTS);
        if gso > 1 && (offload == Offload::Off || set_gso(&sock, size).is_err()) {
            gso = 1;
        }
        let gso = gso.max(1);
        let msgs = (BATCH_BYTES / (gso * size)).clamp(1, BATCH);
        let mut buf = Vec::with_capacity(msgs * gso * size);
        while buf.len() < msgs * gso * size {
            buf.extend_from_slice(&fill[..fill.len().min(size)]);
            buf.resize(buf.len().next_multiple_of(size), 0);
        }
        Sender { sock, dest: dest.map(SocketAddrAny::from), size, gso, msgs, buf, counted: Batching::default() }
    }

    /// Calls, messages and datagrams sent so far.
    pub(crate) fn batching(&self) -> Batching {
        self.counted
    }

    /// Datagrams one [`Sender::send`] can carry.
    pub(crate) fn capacity(&self) -> usize {
        self.msgs * self.gso
    }

    /// Datagram `i` of the batch (`i < capacity()`), to write its header.
    pub(crate) fn datagram_mut(&mut self, i: usize) -> &mut [u8] {
        &mut self.buf[i * self.size..(i + 1) * self.size]
    }

    /// Send datagrams `0..n` (at most `capacity()`); how many the kernel took, 0 when its buffer
    /// is full. A GSO send the kernel refuses (no checksum offload on the route's NIC, a
    /// datagram over the path MTU) turns GSO off for this socket and is tried again without it.
    pub(crate) fn send(&mut self, n: usize) -> io::Result<usize> {
        let n = n.min(self.capacity());
        if n == 0 {
            return Ok(0);
        }
        let per = self.gso;
        let count = n.div_ceil(per);
        let iov: Vec<IoSlice<'_>> = (0..count)
            .map(|j| IoSlice::new(&self.buf[j * per * self.size..((j + 1) * per).min(n) * self.size]))
            .collect();
        // No control messages: GSO's segment size is the socket's (`UDP_SEGMENT` set above).
        let mut ctrl: [SendAncillaryBuffer<'_, '_, '_>; BATCH] =
            std::array::from_fn(|_| SendAncillaryBuffer::default());
        let mut hdrs: Vec<MMsgHdr<'_>> = iov
            .iter()
            .zip(ctrl.iter_mut())
            .map(|(v, c)| match &self.dest {
                Some(d) => MMsgHdr::new_with_addr(d, std::slice::from_ref(v), c),
                None => MMsgHdr::new(std::slice::from_ref(v), c),
            })
            .collect();
        let e = match rustix::net::sendmmsg(&*self.sock, &mut hdrs, SendFlags::empty()) {
            Ok(m) => {
                let sent = (m * per).min(n);
                self.counted.add(Batching { calls: 1, messages: m as u64, datagrams: sent as u64 });
                return Ok(sent);
            }
            Err(e) => io::Error::from(e),
        };
        match e.raw_os_error() {
            Some(libc::EAGAIN | libc::ENOBUFS) => Ok(0),
            Some(libc::EIO | libc::EINVAL | libc::EOPNOTSUPP) if self.gso > 1 => {
                let _ = set_gso(&self.sock, 0);
                self.gso = 1;
                self.msgs = self.msgs.min(BATCH);
                self.send(n.min(self.capacity()))
            }
            _ => Err(e),
        }
    }
}

/// One received message: its bytes, the size of the datagrams it holds (a GRO train holds
/// several), and where it came from.
pub(crate) struct Message<'a> {
    pub bytes: &'a [u8],
    pub segment: usize,
    pub from: Option<SocketAddr>,
}

impl Message<'_> {
    /// The datagrams the message holds, in order.
    pub(crate) fn datagrams(&self) -> impl Iterator<Item = &[u8]> {
        self.bytes.chunks(self.segment.max(1))
    }
}

/// A receiver's batch of message buffers.
pub(crate) struct Receiver {
    sock: Arc<UdpSocket>,
    slot: usize,
    buf: Vec<u8>,
    ctrl: Vec<[u64; CTRL_WORDS]>,
    names: Vec<libc::sockaddr_storage>,
    /// (length, segment size, name length) of each message the last call filled.
    got: Vec<(usize, usize, libc::socklen_t)>,
    counted: Batching,
}

impl Receiver {
    /// A batch for datagrams up to `size` bytes; asks the kernel for GRO trains when `offload`
    /// says.
    pub(crate) fn new(sock: Arc<UdpSocket>, size: usize, offload: Offload) -> Receiver {
        let gro = offload == Offload::Trains && set_gro(&sock, true).is_ok();
        // A datagram larger than expected (a peer's) is cut to the slot, never overflows it.
        let slot = if gro { GRO_MESSAGE } else { size.clamp(2048, GRO_MESSAGE) };
        let msgs = (BATCH_BYTES / slot).clamp(1, BATCH);
        Receiver {
            sock,
            slot,
            buf: vec![0; msgs * slot],
            ctrl: vec![[0; CTRL_WORDS]; msgs],
            // SAFETY: `sockaddr_storage` is plain integers; all zeroes is valid.
            names: vec![unsafe { zeroed() }; msgs],
            got: Vec::with_capacity(msgs),
            counted: Batching::default(),
        }
    }

    /// Calls that returned messages, messages and datagrams received so far.
    pub(crate) fn batching(&self) -> Batching {
        self.counted
    }

    /// Wait for at least one message (up to the socket's read timeout) and take what else is
    /// queued, up to the batch; how many messages arrived (0 on a timeout).
    #[cfg(test)]
    pub(crate) fn recv(&mut self) -> io::Result<usize> {
        self.take(libc::MSG_WAITFORONE)
    }

    /// Take what is queued, up to the batch, without waiting; how many messages (0: none).
    pub(crate) fn try_recv(&mut self) -> io::Result<usize> {
        self.take(libc::MSG_DONTWAIT)
    }

    /// One `recvmmsg` with `flags`.
    fn take(&mut self, flags: libc::c_int) -> io::Result<usize> {
        let msgs = self.ctrl.len();
        let slot = self.slot;
        let mut iov: Vec<libc::iovec> = self
            .buf
            .chunks_mut(slot)
            .map(|c| libc::iovec { iov_base: c.as_mut_ptr().cast(), iov_len: c.len() })
            .collect();
        let mut hdrs: Vec<libc::mmsghdr> = (0..msgs)
            .map(|j| {
                // SAFETY: `mmsghdr` is plain integers and pointers, for which all zeroes is valid.
                let mut h: libc::mmsghdr = unsafe { zeroed() };
                h.msg_hdr.msg_name = (&mut self.names[j] as *mut libc::sockaddr_storage).cast();
                h.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
                h.msg_hdr.msg_iov = &mut iov[j] as *mut libc::iovec;
                h.msg_hdr.msg_iovlen = 1;
                h.msg_hdr.msg_control = self.ctrl[j].as_mut_ptr().cast();
                h.msg_hdr.msg_controllen = size_of::<[u64; CTRL_WORDS]>() as _;
                h
            })
            .collect();
        // SAFETY: each header's iovec, name and control buffer point into `self.buf`,
        // `self.names` and `self.ctrl` at the lengths given, all alive and not otherwise
        // borrowed for the call; the kernel writes at most those lengths. The fd is open for the
        // call, borrowed from `self.sock`. Raw `libc` still: rustix 1.1 has no `recvmmsg` and
        // cannot hand back the `UDP_GRO` control message (see the module header).
        let rc = unsafe {
            libc::recvmmsg(self.sock.as_raw_fd(), hdrs.as_mut_ptr(), msgs as libc::c_uint, flags, std::ptr::null_mut())
        };
        self.got.clear();
        if rc < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        for h in hdrs.iter().take(rc as usize) {
            let len = (h.msg_len as usize).min(slot);
            let segment = gro_segment(&h.msg_hdr).filter(|&s| s > 0).unwrap_or(len);
            self.got.push((len, segment, h.msg_hdr.msg_namelen));
            self.counted.datagrams += len.div_ceil(segment.max(1)).max(1) as u64;
        }
        self.counted.calls += 1;
        self.counted.messages += self.got.len() as u64;
        Ok(self.got.len())
    }

    /// Message `j` of the last [`Receiver::recv`].
    pub(crate) fn message(&self, j: usize) -> Option<Message<'_>> {
        let &(len, segment, namelen) = self.got.get(j)?;
        let bytes = &self.buf[j * self.slot..j * self.slot + len];
        Some(Message { bytes, segment, from: sockaddr(&self.names[j], namelen) })
    }
}

/// The segment size of a GRO train, from the message's `UDP_GRO` control message.
fn gro_segment(h: &libc::msghdr) -> Option<usize> {
    // SAFETY: `h` was filled by `recvmmsg`: its control pointer and length describe the buffer
    // the kernel wrote, which the CMSG macros walk without leaving it.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == libc::UDP_GRO {
                let v = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                return usize::try_from(v).ok();
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    None
}

/// A sender's address as `recvmmsg` stored it.
fn sockaddr(s: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    if len == 0 {
        return None;
    }
    let copy: socket2::SockAddrStorage = {
        let mut st = socket2::SockAddrStorage::zeroed();
        // SAFETY: both are `sockaddr_storage`-sized plain bytes; `len` is at most that size.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (s as *const libc::sockaddr_storage).cast::<u8>(),
                (&mut st as *mut socket2::SockAddrStorage).cast::<u8>(),
                (len as usize).min(size_of::<libc::sockaddr_storage>()),
            );
        }
        st
    };
    // SAFETY: the storage holds an address of `len` bytes written by the kernel.
    unsafe { socket2::SockAddr::new(copy, len) }.as_socket()
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::getsockopt;
    use std::time::Duration;

    fn pair() -> (Arc<UdpSocket>, Arc<UdpSocket>) {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        (Arc::new(tx), Arc::new(rx))
    }

    /// Receive until `want` datagrams arrived (or a read times out), in arrival order.
    fn drain(r: &mut Receiver, want: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while out.len() < want {
            let n = r.recv().unwrap();
            if n == 0 {
                break;
            }
            for j in 0..n {
                let m = r.message(j).unwrap();
                out.extend(m.datagrams().map(<[u8]>::to_vec));
            }
        }
        out
    }

    #[test]
    fn a_batch_of_small_datagrams_arrives_whole_and_in_order() {
        let (tx, rx) = pair();
        let mut s = Sender::new(tx.clone(), None, 64, &[0xaa; 64], Offload::Trains);
        let mut r = Receiver::new(rx, 64, Offload::Trains);
        let n = s.capacity().min(500);
        for i in 0..n {
            s.datagram_mut(i)[..4].copy_from_slice(&(i as u32).to_be_bytes());
        }
        assert_eq!(s.send(n).unwrap(), n);
        let got = drain(&mut r, n);
        assert_eq!(got.len(), n, "{} datagrams a batch", s.capacity());
        for (i, d) in got.iter().enumerate() {
            assert_eq!(d.len(), 64, "a GRO train is cut back into 64-byte datagrams");
            assert_eq!(&d[..4], &(i as u32).to_be_bytes(), "datagram {i}");
            assert!(d[4..].iter().all(|&b| b == 0xaa));
        }
    }

    #[test]
    fn a_part_batch_and_an_addressed_send_carry_the_sender_address() {
        let (tx, rx) = pair();
        let to = rx.local_addr().unwrap();
        let free = Arc::new(UdpSocket::bind("127.0.0.1:0").unwrap());
        let mut s = Sender::new(free.clone(), Some(to), 100, &[1; 100], Offload::Off);
        let mut r = Receiver::new(rx, 100, Offload::Off);
        assert_eq!(s.send(3).unwrap(), 3);
        let n = r.recv().unwrap();
        assert!(n >= 1);
        let m = r.message(0).unwrap();
        assert_eq!(m.from, Some(free.local_addr().unwrap()));
        drop(tx);
    }

    #[test]
    fn a_gso_send_the_kernel_refuses_goes_out_one_datagram_a_message() {
        let (tx, rx) = pair();
        let mut s = Sender::new(tx.clone(), None, 64, &[7; 64], Offload::Trains);
        let mut r = Receiver::new(rx, 64, Offload::Trains);
        // Segments of 1 byte: 64-byte trains pass the kernel's segment limit, so it refuses
        // them (EINVAL) as a NIC without the offload would (EIO).
        set_gso(&tx, 1).unwrap();
        assert!(s.capacity() > 32, "GSO on at first: {}", s.capacity());
        assert_eq!(s.send(40).unwrap(), 32, "one batch of single datagrams");
        assert_eq!(s.capacity(), 32, "GSO is off for the socket from then on");
        let got = drain(&mut r, 32);
        assert_eq!(got.len(), 32);
        assert!(got.iter().all(|d| d.len() == 64));
    }

    #[test]
    fn without_gro_each_message_is_one_datagram() {
        let (tx, rx) = pair();
        let mut r = Receiver::new(rx.clone(), 64, Offload::Trains);
        set_gro(&rx, false).unwrap();
        for i in 0u8..5 {
            tx.send(&[i; 40]).unwrap();
        }
        let got = drain(&mut r, 5);
        assert_eq!(got, (0u8..5).map(|i| vec![i; 40]).collect::<Vec<_>>());
    }

    #[test]
    fn without_gsro_no_socket_asks_for_trains_and_each_datagram_is_its_own_message() {
        assert_eq!(Offload::of(false), Offload::Off);
        let (tx, rx) = pair();
        let mut s = Sender::new(tx.clone(), None, 64, &[3; 64], Offload::Off);
        let mut r = Receiver::new(rx.clone(), 64, Offload::Off);
        assert_eq!(getsockopt(&*tx, sockopt::UdpGsoSegment).unwrap(), 0, "no GSO segment size");
        assert!(!getsockopt(&*rx, sockopt::UdpGroSegment).unwrap(), "no GRO");
        assert_eq!(s.capacity(), BATCH, "a batch of single datagrams");
        assert_eq!(s.send(20).unwrap(), 20);
        let got = drain(&mut r, 20);
        assert_eq!(got.len(), 20);
        assert_eq!(s.batching(), Batching { calls: 1, messages: 20, datagrams: 20 });
        let b = r.batching();
        assert_eq!((b.messages, b.datagrams), (20, 20), "{b:?}");
    }

    #[test]
    fn with_gsro_the_sockets_ask_for_trains_and_count_them() {
        assert_eq!(Offload::of(true), Offload::Trains);
        let (tx, rx) = pair();
        let mut s = Sender::new(tx.clone(), None, 64, &[3; 64], Offload::Trains);
        let mut r = Receiver::new(rx.clone(), 64, Offload::Trains);
        assert_eq!(getsockopt(&*tx, sockopt::UdpGsoSegment).unwrap(), 64, "GSO cuts at the datagram size");
        assert!(getsockopt(&*rx, sockopt::UdpGroSegment).unwrap());
        assert_eq!(s.send(128).unwrap(), 128);
        assert_eq!(s.batching(), Batching { calls: 1, messages: 2, datagrams: 128 }, "two trains of 64");
        assert_eq!(drain(&mut r, 128).len(), 128);
        assert_eq!(r.batching().datagrams, 128, "{:?}", r.batching());
    }

    #[test]
    fn the_receive_buffer_grows_to_the_rate() {
        let (_tx, rx) = pair();
        let before = socket2::SockRef::from(&*rx).recv_buffer_size().unwrap();
        size_recv_buffer(&rx, Some(1_000_000_000), 64, 1);
        let after = socket2::SockRef::from(&*rx).recv_buffer_size().unwrap();
        assert!(after > before, "{before} -> {after} (as root SO_RCVBUFFORCE passes rmem_max)");
    }
}
