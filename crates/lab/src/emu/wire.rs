//! Frames as a TAP with virtio-net headers hands them over, without I/O: how many wire packets
//! a TCP super-packet stands for, cutting one into those packets (as the kernel's GSO would),
//! and finishing a partial checksum so that a flipped bit is caught at the far end.
//!
//! The emulator keeps the TAPs' offloads on whatever it is asked, so a 64 KB super-packet
//! crosses user space as one frame; the shaper draws loss, corruption, duplication and
//! reordering for each wire packet it stands for, and only when a draw hits is the frame cut
//! ([`Frame::split`]). Every length and offset comes from the frame and is checked: a frame
//! that is not plain Ethernet + IPv4/IPv6 + TCP counts as one packet and is never cut.

use super::shape::Packet;

/// Bytes of the virtio-net header in front of every frame (`struct virtio_net_hdr_mrg_rxbuf`).
pub const VNET_HDR: usize = 12;
/// Ethernet header (no VLAN tag: the lab does not tag).
const ETH: usize = 14;
/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`: the checksum at `csum_start + csum_offset` is to be finished.
const NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_GSO_TCPV4`, `…_TCPV6` and the ECN bit.
const GSO_TCPV4: u8 = 1;
const GSO_TCPV6: u8 = 4;
const GSO_ECN: u8 = 0x80;
/// Smallest segment size it cuts at (a smaller one is not a TCP stack's, and would make one
/// frame tens of thousands of packets).
const MIN_MSS: usize = 64;

/// Where a TCP super-packet's parts are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tcp {
    v6: bool,
    /// Offset of the TCP header in the frame (past the virtio-net header).
    l4: usize,
    /// Offset of the payload.
    payload: usize,
    mss: usize,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

fn vnet_u16(b: &[u8], at: usize) -> Option<u16> {
    // The header is in the host's byte order (a legacy virtio header; the lab sets no other).
    Some(u16::from_ne_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// The TCP super-packet `f` (virtio-net header + Ethernet frame) is, if it is one.
fn tcp_gso(f: &[u8]) -> Option<Tcp> {
    let gso = *f.get(1)? & !GSO_ECN;
    if gso != GSO_TCPV4 && gso != GSO_TCPV6 {
        return None;
    }
    let mss = usize::from(vnet_u16(f, 4)?);
    if mss < MIN_MSS {
        return None;
    }
    let l3 = VNET_HDR + ETH;
    let (v6, l4) = match u16_at(f, VNET_HDR + 12)? {
        0x0800 => {
            let (vihl, proto) = (*f.get(l3)?, *f.get(l3 + 9)?);
            let ihl = usize::from(vihl & 0x0f) * 4;
            let total = usize::from(u16_at(f, l3 + 2)?);
            // IPv4, TCP, a sane header, not a fragment, and its length the frame's
            if vihl >> 4 != 4 || proto != 6 || ihl < 20 || u16_at(f, l3 + 6)? & 0x3fff != 0 || l3 + total != f.len() {
                return None;
            }
            (false, l3 + ihl)
        }
        0x86dd => {
            let (ver, next) = (*f.get(l3)? >> 4, *f.get(l3 + 6)?);
            let plen = usize::from(u16_at(f, l3 + 4)?);
            if ver != 6 || next != 6 || l3 + 40 + plen != f.len() {
                return None;
            }
            (true, l3 + 40)
        }
        _ => return None,
    };
    let doff = usize::from(*f.get(l4 + 12)? >> 4) * 4;
    let payload = l4 + doff;
    if doff < 20 || payload >= f.len() {
        return None;
    }
    Some(Tcp { v6, l4, payload, mss })
}

/// One's-complement sum of `b` (big-endian words, an odd last byte padded) added to `sum`.
fn sum(mut acc: u64, b: &[u8]) -> u64 {
    let mut words = b.chunks_exact(2);
    for w in &mut words {
        acc += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        acc += u64::from(*last) << 8;
    }
    acc
}

fn fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// The TCP pseudo-header's sum for a segment of `tcp_len` bytes (`ip` is the IP header).
fn pseudo(ip: &[u8], v6: bool, tcp_len: usize) -> u16 {
    let acc = if v6 { sum(0, &ip[8..40]) + tcp_len as u64 } else { sum(0, &ip[12..20]) + tcp_len as u64 };
    fold(acc + 6)
}

/// A frame read from a TAP: the virtio-net header, then the Ethernet frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    buf: Vec<u8>,
    /// Wire packets it stands for (1 unless a TCP super-packet).
    segs: usize,
    /// Header bytes each of those packets repeats.
    hdrs: usize,
}

impl Frame {
    /// A frame as read (`buf` starts with the virtio-net header).
    pub fn new(buf: Vec<u8>) -> Frame {
        match tcp_gso(&buf) {
            Some(t) if buf.len() - t.payload > t.mss => {
                let segs = (buf.len() - t.payload).div_ceil(t.mss);
                Frame { segs, hdrs: t.payload - VNET_HDR, buf }
            }
            Some(_) => {
                // A super-packet of one packet is a packet: no GSO for the far end to undo.
                let mut buf = buf;
                buf[1] = 0;
                buf[2..6].fill(0);
                Frame { buf, segs: 1, hdrs: 0 }
            }
            None => Frame { buf, segs: 1, hdrs: 0 },
        }
    }

    /// The bytes to write to a TAP.
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Finish a partial checksum (`NEEDS_CSUM`) here, so the receiver checks it rather than
    /// trusting it; nothing if there is none or its offsets do not fit.
    pub fn finish_checksum(&mut self) {
        let b = &mut self.buf;
        if b.len() < VNET_HDR || b[0] & NEEDS_CSUM == 0 {
            return;
        }
        let (Some(start), Some(off)) = (vnet_u16(b, 6), vnet_u16(b, 8)) else { return };
        let start = VNET_HDR + usize::from(start);
        let at = start + usize::from(off);
        if at + 2 > b.len() {
            return;
        }
        // The field holds the pseudo-header's sum; the result's complement replaces it.
        let c = !fold(sum(0, &b[start..]));
        let c = if c == 0 { 0xffff } else { c };
        b[at..at + 2].copy_from_slice(&c.to_be_bytes());
        b[0] &= !NEEDS_CSUM;
    }

    /// The wire packets a TCP super-packet stands for, each with its own IP length, IPv4 id and
    /// header checksum, TCP sequence number and flags (FIN and PSH on the last only, CWR on the
    /// first only) and a partial checksum for the receiver to trust, as the kernel's GSO would
    /// cut it; any other frame, itself.
    pub fn split(self) -> Vec<Frame> {
        let Some(t) = tcp_gso(&self.buf).filter(|_| self.segs > 1) else { return vec![self] };
        let f = &self.buf;
        let (l3, hdr) = (VNET_HDR + ETH, &f[..t.payload]);
        let seq = u32::from_be_bytes([f[t.l4 + 4], f[t.l4 + 5], f[t.l4 + 6], f[t.l4 + 7]]);
        let id = u16_at(f, l3 + 4).unwrap_or(0);
        let body = &f[t.payload..];
        let n = self.segs;
        let mut out = Vec::with_capacity(n);
        for (i, chunk) in body.chunks(t.mss).enumerate() {
            let mut s = Vec::with_capacity(t.payload + chunk.len());
            s.extend_from_slice(hdr);
            s.extend_from_slice(chunk);
            let tcp_len = t.payload - t.l4 + chunk.len();
            // virtio-net header: no GSO, checksum from the TCP header, its field at 16
            s[..VNET_HDR].fill(0);
            s[0] = NEEDS_CSUM;
            s[6..8].copy_from_slice(&((t.l4 - VNET_HDR) as u16).to_ne_bytes());
            s[8..10].copy_from_slice(&16u16.to_ne_bytes());
            if t.v6 {
                s[l3 + 4..l3 + 6].copy_from_slice(&(tcp_len as u16).to_be_bytes());
            } else {
                let ip_len = t.l4 - l3 + tcp_len;
                s[l3 + 2..l3 + 4].copy_from_slice(&(ip_len as u16).to_be_bytes());
                s[l3 + 4..l3 + 6].copy_from_slice(&id.wrapping_add(i as u16).to_be_bytes());
                s[l3 + 10..l3 + 12].fill(0);
                let c = !fold(sum(0, &s[l3..t.l4]));
                s[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
            }
            let tcp = t.l4;
            s[tcp + 4..tcp + 8].copy_from_slice(&seq.wrapping_add((i * t.mss) as u32).to_be_bytes());
            if i + 1 < n {
                s[tcp + 13] &= !(0x01 | 0x08); // FIN, PSH
            }
            if i > 0 {
                s[tcp + 13] &= !0x80; // CWR
            }
            let p = pseudo(&s[l3..t.l4], t.v6, tcp_len);
            s[tcp + 16..tcp + 18].copy_from_slice(&p.to_be_bytes());
            out.push(Frame { buf: s, segs: 1, hdrs: 0 });
        }
        out
    }
}

impl Packet for Frame {
    fn wire_len(&self) -> usize {
        // what its wire packets add up to: the headers repeat in each
        self.buf.len().saturating_sub(VNET_HDR) + (self.segs - 1) * self.hdrs
    }
    fn segments(&self) -> usize {
        self.segs
    }
    fn flip(&mut self, bit: usize) {
        // past the virtio-net and Ethernet headers: IP and what it carries, all checksummed
        // (a partial checksum is finished first, or the receiver would trust it)
        self.finish_checksum();
        if let Some(b) = self.buf.get_mut(VNET_HDR + ETH + bit / 8) {
            *b ^= 1 << (bit % 8);
        }
    }
    fn body_len(&self) -> usize {
        self.buf.len().saturating_sub(VNET_HDR + ETH)
    }
    fn split(self) -> Vec<Self> {
        Frame::split(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TCP super-packet as the kernel hands it over: `payload` bytes, segment size `mss`,
    /// flags `flags`, a partial checksum.
    fn super_packet(v6: bool, payload: usize, mss: u16, flags: u8) -> Vec<u8> {
        let mut f = vec![0u8; VNET_HDR];
        f[0] = NEEDS_CSUM;
        f[1] = if v6 { GSO_TCPV6 } else { GSO_TCPV4 };
        f[4..6].copy_from_slice(&mss.to_ne_bytes());
        f.extend_from_slice(&[2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2]);
        f.extend_from_slice(if v6 { &[0x86, 0xdd] } else { &[0x08, 0x00] });
        let l3 = f.len();
        let tcp_len = 32 + payload;
        if v6 {
            f.extend_from_slice(&[0x60, 0, 0, 0]);
            f.extend_from_slice(&(tcp_len as u16).to_be_bytes());
            f.extend_from_slice(&[6, 64]);
            f.extend((0..32).map(|i| i as u8));
        } else {
            f.extend_from_slice(&[0x45, 0]);
            f.extend_from_slice(&((20 + tcp_len) as u16).to_be_bytes());
            f.extend_from_slice(&[0x12, 0x34, 0x40, 0, 64, 6, 0, 0, 198, 18, 0, 1, 198, 18, 0, 2]);
        }
        if !v6 {
            let c = !fold(sum(0, &f[l3..]));
            f[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
        }
        let l4 = f.len();
        f[6..8].copy_from_slice(&((l4 - VNET_HDR) as u16).to_ne_bytes());
        f[8..10].copy_from_slice(&16u16.to_ne_bytes());
        f.extend_from_slice(&[0x9c, 0x40, 0xd4, 0x31, 0xff, 0xff, 0xff, 0x00, 0, 0, 0, 1, 0x80, flags]);
        f.extend_from_slice(&[0x01, 0xf5, 0, 0, 0, 0, 1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]);
        f.extend((0..payload).map(|i| (i * 7 % 251) as u8));
        let p = pseudo(&f[l3..l4], v6, tcp_len);
        f[l4 + 16..l4 + 18].copy_from_slice(&p.to_be_bytes());
        f
    }

    /// Whether a finished frame's IPv4 header and TCP checksums verify.
    fn verifies(f: &Frame, v6: bool) -> bool {
        let mut f = f.clone();
        f.finish_checksum();
        let b = &f.buf[VNET_HDR + ETH..];
        let (ip, tcp) = if v6 { b.split_at(40) } else { b.split_at(20) };
        let ip_ok = v6 || fold(sum(0, ip)) == 0xffff;
        let acc = sum(0, tcp) + u64::from(pseudo(ip, v6, tcp.len()));
        ip_ok && fold(acc) == 0xffff
    }

    #[test]
    fn a_super_packet_counts_its_wire_packets_and_their_headers() {
        let f = Frame::new(super_packet(false, 10_000, 1448, 0x18));
        assert_eq!(f.segments(), 7, "10,000 bytes at 1448 a packet");
        assert_eq!(f.wire_len(), 14 + 20 + 32 + 10_000 + 6 * (14 + 20 + 32));
        let one = Frame::new(super_packet(false, 1000, 1448, 0x18));
        assert_eq!((one.segments(), one.wire_len()), (1, 14 + 20 + 32 + 1000));
        let mut bad = super_packet(false, 10_000, 1448, 0x18);
        bad[VNET_HDR + 14 + 9] = 17; // not TCP
        assert_eq!(Frame::new(bad).segments(), 1);
        let tiny = Frame::new(super_packet(true, 10_000, 16, 0x18));
        assert_eq!(tiny.segments(), 1, "a segment size no stack uses is not cut");
    }

    #[test]
    fn cutting_gives_what_the_kernel_would_send() {
        for v6 in [false, true] {
            let orig = super_packet(v6, 10_000, 1448, 0x80 | 0x18 | 0x01); // CWR, ACK, PSH, FIN
            let f = Frame::new(orig.clone());
            let payload_at = f.hdrs + VNET_HDR;
            let segs = f.clone().split();
            assert_eq!(segs.len(), 7);
            let mut body = Vec::new();
            for (i, s) in segs.iter().enumerate() {
                assert_eq!(s.segments(), 1);
                assert!(verifies(s, v6), "segment {i} (v6 {v6}) checks");
                let b = &s.buf;
                assert_eq!(b[1], 0, "no GSO left");
                let l4 = payload_at - 32;
                let seq = u32::from_be_bytes([b[l4 + 4], b[l4 + 5], b[l4 + 6], b[l4 + 7]]);
                assert_eq!(seq, 0xffff_ff00u32.wrapping_add(i as u32 * 1448), "sequence numbers wrap");
                let flags = b[l4 + 13];
                assert_eq!(flags & 0x80 != 0, i == 0, "CWR on the first");
                assert_eq!(flags & 0x09 != 0, i == 6, "FIN and PSH on the last");
                assert_eq!(flags & 0x10, 0x10, "ACK on all");
                if !v6 {
                    let id = u16::from_be_bytes([b[VNET_HDR + 18], b[VNET_HDR + 19]]);
                    assert_eq!(id, 0x1234 + i as u16);
                }
                assert_eq!(b[VNET_HDR..VNET_HDR + ETH], orig[VNET_HDR..VNET_HDR + ETH], "the Ethernet header");
                body.extend_from_slice(&b[payload_at..]);
            }
            assert_eq!(body, orig[payload_at..], "the payload, in order, whole");
            assert_eq!(segs.iter().map(Packet::wire_len).sum::<usize>(), f.wire_len());
        }
    }

    #[test]
    fn a_flipped_bit_fails_the_receivers_checksum() {
        let f = Frame::new(super_packet(false, 1000, 1448, 0x18));
        assert!(verifies(&f, false));
        let mut c = f.clone();
        c.flip(8 * 500);
        assert_eq!(c.buf[0] & NEEDS_CSUM, 0, "finished: the receiver must check it");
        let b = &c.buf[VNET_HDR + ETH..];
        let acc = sum(0, &b[20..]) + u64::from(pseudo(&b[..20], false, b.len() - 20));
        assert_ne!(fold(acc), 0xffff, "the flip is caught");
        let mut d = f.clone();
        d.finish_checksum();
        let b = &d.buf[VNET_HDR + ETH..];
        let acc = sum(0, &b[20..]) + u64::from(pseudo(&b[..20], false, b.len() - 20));
        assert_eq!(fold(acc), 0xffff, "finished and untouched, it checks");
    }

    #[test]
    fn garbage_is_one_packet_and_never_panics() {
        let mut x: u64 = 1;
        for len in 0..400 {
            let mut b: Vec<u8> = (0..len)
                .map(|_| {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    (x >> 56) as u8
                })
                .collect();
            if len > 2 {
                b[1] = GSO_TCPV4;
            }
            let mut f = Frame::new(b);
            let _ = f.wire_len();
            f.finish_checksum();
            f.flip(len * 3);
            assert!(!f.split().is_empty());
        }
    }
}
