//! The path to a peer: which interface routes to it, the round-trip time (TCP connect to its
//! `linerate serve` port) and the path MTU (ICMP echo probes with Don't Fragment set, largest
//! answered size wins). Traffic goes only to the peer the user named.

use super::{read, Roots};
use rustix::net::{self, ipproto, sockopt, AddressFamily, RecvFlags, SendFlags, SocketType};
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream, ToSocketAddrs, UdpSocket};
use std::time::{Duration, Instant};

use linerate_model::DEFAULT_PORT;

/// Why a path check failed.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    /// The peer did not resolve.
    #[error("cannot resolve peer {peer:?}: {why}")]
    Resolve {
        /// What the user gave.
        peer: String,
        /// Why.
        why: String,
    },
    /// A socket call failed.
    #[error("{what}: {err}")]
    Io {
        /// The step that failed.
        what: &'static str,
        /// The error.
        err: std::io::Error,
    },
    /// The probe is not possible here.
    #[error("{0}")]
    Unsupported(&'static str),
}

fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> PathError {
    move |err| PathError::Io { what, err }
}

/// Resolve `HOST[:PORT]` (IPv6 as `[addr]:port`), default port [`DEFAULT_PORT`].
pub fn resolve_peer(peer: &str) -> Result<SocketAddr, PathError> {
    let err = |why: String| PathError::Resolve { peer: peer.to_string(), why };
    if let Ok(a) = peer.parse::<SocketAddr>() {
        return Ok(a);
    }
    if let Ok(ip) = peer.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, DEFAULT_PORT));
    }
    let with_port = match peer.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') && p.parse::<u16>().is_ok() => peer.to_string(),
        Some((_, p)) if !p.is_empty() && !peer.contains("::") => {
            return Err(err(format!("port {p:?} is not a number")))
        }
        _ => format!("{peer}:{DEFAULT_PORT}"),
    };
    with_port.to_socket_addrs().map_err(|e| err(e.to_string()))?.next().ok_or_else(|| err("no address".to_string()))
}

/// The addresses of this host (`/32 host LOCAL` entries of `/proc/net/fib_trie`): the kernel
/// delivers traffic to them through `lo`, whatever interface carries them.
pub fn local_addrs(roots: &Roots) -> Vec<Ipv4Addr> {
    let Some(text) = read(&roots.proc.join("net/fib_trie")) else { return Vec::new() };
    let mut out = Vec::new();
    let mut last: Option<Ipv4Addr> = None;
    for line in text.lines().take(1_000_000) {
        let t = line.trim_start_matches([' ', '|', '+', '-']).trim();
        if let Ok(a) = t.parse::<Ipv4Addr>() {
            last = Some(a);
        } else if t == "/32 host LOCAL" {
            out.extend(last.filter(|a| !out.contains(a)));
        }
    }
    out
}

/// The interface traffic for `dst` leaves through: `lo` for a loopback address or one of this
/// host's own (the local table, which `/proc/net/route` does not show), else the IPv4 routing
/// table's choice (`/proc/net/route`, longest prefix, lowest metric).
pub fn route_iface(roots: &Roots, dst: Ipv4Addr) -> Option<String> {
    if dst.is_loopback() || local_addrs(roots).contains(&dst) {
        return Some("lo".to_string());
    }
    let text = read(&roots.proc.join("net/route"))?;
    let dst = u32::from_be_bytes(dst.octets());
    let mut best: Option<(u32, u32, String)> = None; // (prefix length, metric, iface)
    for line in text.lines().skip(1).take(100_000) {
        let t: Vec<&str> = line.split_whitespace().collect();
        if t.len() < 8 {
            continue;
        }
        let hex = |s: &str| u32::from_str_radix(s, 16).ok().map(|v| u32::from_be_bytes(v.to_ne_bytes()));
        let (Some(d), Some(flags), Some(metric), Some(mask)) =
            (hex(t[1]), u32::from_str_radix(t[3], 16).ok(), t[6].parse::<u32>().ok(), hex(t[7]))
        else {
            continue;
        };
        if flags & 1 == 0 || dst & mask != d & mask {
            continue;
        }
        let plen = mask.count_ones();
        if best.as_ref().is_none_or(|(bp, bm, _)| plen > *bp || (plen == *bp && metric < *bm)) {
            best = Some((plen, metric, t[0].to_string()));
        }
    }
    best.map(|b| b.2)
}

/// Round-trip time measured as TCP connect time, a few samples.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RttFacts {
    /// The address measured.
    pub addr: String,
    /// Each connect time, in microseconds.
    pub samples_us: Vec<f64>,
    /// Their median, in microseconds.
    pub median_us: f64,
}

/// Connect to `addr` `samples` times (each bounded by `timeout`) and take the median.
pub fn rtt(addr: SocketAddr, samples: u32, timeout: Duration) -> Result<RttFacts, PathError> {
    let mut v = Vec::new();
    for _ in 0..samples.clamp(1, 50) {
        let t = Instant::now();
        let s = TcpStream::connect_timeout(&addr, timeout).map_err(io("TCP connect to the peer's serve port"))?;
        v.push(t.elapsed().as_secs_f64() * 1e6);
        drop(s);
    }
    let median_us = linerate_model::stats::median(&v).unwrap_or(0.0);
    Ok(RttFacts { addr: addr.to_string(), samples_us: v, median_us })
}

/// What the path-MTU probe found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PmtuFacts {
    /// The kernel's MTU for the route to the peer (`IP_MTU` on a connected socket): the
    /// outgoing interface's MTU, or a smaller path MTU the kernel has learned.
    pub route_mtu: u32,
    /// Largest IP packet (bytes, headers included) that reached the peer and came back with
    /// Don't Fragment set; `None` if no probe was answered.
    pub path_mtu: Option<u32>,
    /// Each probe, in the order sent.
    pub probes: Vec<MtuProbe>,
}

/// One path-MTU probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MtuProbe {
    /// IP packet size in bytes, headers included.
    pub size: u32,
    /// Whether the echo reply came back.
    pub answered: bool,
}

fn checksum(b: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for c in b.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

struct Prober {
    fd: rustix::fd::OwnedFd,
    raw: bool,
    id: u16,
    seq: u16,
    wait: Duration,
}

impl Prober {
    /// Send one echo request per size (bytes of IP packet) at once, then wait up to `wait` for
    /// the replies; returns which came back. Sizes the kernel refuses to send (EMSGSIZE: it
    /// already knows the path is smaller) count as unanswered.
    fn batch(&mut self, sizes: &[u32]) -> Vec<bool> {
        let mut answered = vec![false; sizes.len()];
        let mut pending: Vec<(u16, usize)> = Vec::new(); // (sequence number, index)
        for (i, &size) in sizes.iter().enumerate() {
            let Some(payload) = (size as usize).checked_sub(28) else { continue };
            self.seq = self.seq.wrapping_add(1);
            let mut pkt = vec![0u8; 8 + payload];
            pkt[0] = 8; // echo request
            pkt[4..6].copy_from_slice(&self.id.to_be_bytes());
            pkt[6..8].copy_from_slice(&self.seq.to_be_bytes());
            for (k, b) in pkt[8..].iter_mut().enumerate() {
                *b = k as u8;
            }
            let c = checksum(&pkt);
            pkt[2..4].copy_from_slice(&c.to_be_bytes());
            if net::send(&self.fd, &pkt, SendFlags::empty()).is_ok() {
                pending.push((self.seq, i));
            }
        }
        let deadline = Instant::now() + self.wait;
        let mut buf = vec![0u8; 70_000];
        while !pending.is_empty() {
            let Some(left) = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()) else { break };
            if sockopt::set_socket_timeout(&self.fd, sockopt::Timeout::Recv, Some(left)).is_err() {
                break;
            }
            let Ok((n, _)) = net::recv(&self.fd, &mut buf[..], RecvFlags::empty()) else { break };
            let got = &buf[..n.min(buf.len())];
            let icmp = if self.raw {
                let ihl = usize::from(got.first().copied().unwrap_or(0) & 0x0f) * 4;
                got.get(ihl..).unwrap_or(&[])
            } else {
                got
            };
            if icmp.len() < 8 || icmp[0] != 0 || (self.raw && icmp[4..6] != self.id.to_be_bytes()) {
                continue;
            }
            let seq = u16::from_be_bytes([icmp[6], icmp[7]]);
            if let Some(pos) = pending.iter().position(|(s, _)| *s == seq) {
                answered[pending[pos].1] = true;
                pending.swap_remove(pos);
            }
        }
        answered
    }
}

/// Probe the path MTU to `peer` (IPv4): ICMP echo requests with Don't Fragment, sent in
/// batches: first the route MTU and common sizes (9000 down to 576; unanswered ones are sent
/// once more, so one lost reply does not read as a smaller MTU), then up to four rounds of 15
/// sizes spread between the largest answered and the smallest unanswered size. Needs a raw ICMP
/// socket (root / CAP_NET_RAW) or unprivileged ping sockets (`net.ipv4.ping_group_range`).
/// Takes about 0.3 s per round: under 2 s. A result up to 4 bytes above an answered standard
/// size (1500, 9000...) is reported as that size: receivers tolerate a VLAN tag's worth.
pub fn path_mtu(peer: IpAddr) -> Result<PmtuFacts, PathError> {
    let IpAddr::V4(v4) = peer else {
        return Err(PathError::Unsupported("the path-MTU probe supports IPv4 peers only"));
    };
    let udp = UdpSocket::bind("0.0.0.0:0").map_err(io("UDP socket"))?;
    udp.connect(SocketAddrV4::new(v4, 9)).map_err(io("route lookup toward the peer"))?;
    let route_mtu = sockopt::ip_mtu(&udp).map_err(|e| PathError::Io { what: "IP_MTU", err: e.into() })?;
    let (fd, raw) = match net::socket(AddressFamily::INET, SocketType::RAW, Some(ipproto::ICMP)) {
        Ok(fd) => (fd, true),
        Err(_) => match net::socket(AddressFamily::INET, SocketType::DGRAM, Some(ipproto::ICMP)) {
            Ok(fd) => (fd, false),
            Err(_) => {
                return Err(PathError::Unsupported(
                    "the path-MTU probe needs root (CAP_NET_RAW) or net.ipv4.ping_group_range covering this group",
                ))
            }
        },
    };
    sockopt::set_ip_mtu_discover(&fd, sockopt::Ipv4PathMtuDiscovery::DO)
        .map_err(|e| PathError::Io { what: "IP_MTU_DISCOVER", err: e.into() })?;
    net::connect(&fd, &SocketAddrV4::new(v4, 0)).map_err(|e| PathError::Io { what: "ICMP connect", err: e.into() })?;
    let mut p = Prober { fd, raw, id: (std::process::id() as u16) ^ 0x4c52, seq: 0, wait: Duration::from_millis(300) };
    let mut probes = Vec::new();
    let top = route_mtu.min(65_535);
    let mut sizes: Vec<u32> = [top, 9000, 8000, 4352, 4000, 1500, 1492, 1480, 1400, 1280, 1000, 576]
        .into_iter()
        .filter(|s| *s <= top && *s >= 68)
        .collect();
    sizes.dedup();
    let mut answered = p.batch(&sizes);
    let retry: Vec<u32> = sizes.iter().zip(&answered).filter(|(_, a)| !**a).map(|(s, _)| *s).collect();
    if !retry.is_empty() {
        let again = p.batch(&retry);
        for (s, a) in retry.iter().zip(again) {
            if a {
                if let Some(i) = sizes.iter().position(|x| x == s) {
                    answered[i] = true;
                }
            }
        }
    }
    probes.extend(sizes.iter().zip(&answered).map(|(s, a)| MtuProbe { size: *s, answered: *a }));
    let bounds = |probes: &[MtuProbe]| {
        let lo = probes.iter().filter(|p| p.answered).map(|p| p.size).max();
        let hi = probes.iter().filter(|p| !p.answered && lo.is_none_or(|l| p.size > l)).map(|p| p.size).min();
        (lo, hi)
    };
    for _ in 0..4 {
        let (Some(lo), Some(hi)) = bounds(&probes) else { break };
        if hi <= lo + 1 {
            break;
        }
        let step = ((hi - lo) / 16).max(1);
        let round: Vec<u32> = (1..16).map(|k| lo + k * step).filter(|s| *s < hi).collect();
        let got = p.batch(&round);
        probes.extend(round.iter().zip(got).map(|(s, a)| MtuProbe { size: *s, answered: a }));
    }
    // Receivers commonly take up to 4 bytes over their MTU (room for a VLAN tag; veth does):
    // a size that close above an answered standard size is that size.
    let standard = sizes.iter().zip(&answered).filter(|(_, a)| **a).map(|(s, _)| *s).max();
    let path_mtu = match (bounds(&probes).0, standard) {
        (Some(m), Some(s)) if m >= s && m - s <= 4 => Some(s),
        (m, _) => m,
    };
    Ok(PmtuFacts { route_mtu, path_mtu, probes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_peers_with_and_without_ports() {
        assert_eq!(resolve_peer("198.18.0.2").unwrap(), "198.18.0.2:7878".parse().unwrap());
        assert_eq!(resolve_peer("198.18.0.2:9").unwrap(), "198.18.0.2:9".parse().unwrap());
        assert_eq!(resolve_peer("[::1]:5").unwrap(), "[::1]:5".parse().unwrap());
        assert_eq!(resolve_peer("::1").unwrap(), "[::1]:7878".parse().unwrap());
        assert_eq!(resolve_peer("localhost:7").unwrap().port(), 7);
        assert!(resolve_peer("localhost:x").is_err());
    }

    /// A procfs fixture with these files under `proc/net/`.
    fn net_fixture(files: &[(&str, &str)]) -> (tempfile::TempDir, Roots) {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("proc/net")).unwrap();
        for (name, text) in files {
            std::fs::write(t.path().join("proc/net").join(name), text).unwrap();
        }
        let r = Roots::under(t.path());
        (t, r)
    }

    const ROUTE_HEADER: &str = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n";

    #[test]
    fn picks_the_longest_matching_route() {
        let routes = format!(
            "{ROUTE_HEADER}eth0\t00000000\t010012C6\t0003\t0\t0\t0\t00000000\t0\t0\t0\n\
             veth1\t000012C6\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
             down0\t020012C6\t00000000\t0000\t0\t0\t0\tFFFFFFFF\t0\t0\t0\n"
        );
        let (_t, r) = net_fixture(&[("route", &routes)]);
        assert_eq!(route_iface(&r, "198.18.0.2".parse().unwrap()).as_deref(), Some("veth1"));
        assert_eq!(route_iface(&r, "203.0.113.1".parse().unwrap()).as_deref(), Some("eth0"));
    }

    /// Issue 33: a loopback peer went "via eth0" (the default route of the main table).
    #[test]
    fn loopback_and_own_addresses_route_through_lo() {
        let routes = format!("{ROUTE_HEADER}eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n");
        let trie = "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 0.0.0.0\n        /0 universe UNICAST\n\
             \x20    +-- 127.0.0.0/8 2 0 2\n           |-- 127.0.0.1\n              /32 host LOCAL\n\
             \x20       |-- 192.0.2.0\n              /24 link UNICAST\n           |-- 192.0.2.2\n\
             \x20             /32 host LOCAL\n        |-- 192.0.2.255\n           /32 link BROADCAST\n";
        let (_t, r) = net_fixture(&[("route", &routes), ("fib_trie", trie)]);
        assert_eq!(local_addrs(&r), ["127.0.0.1".parse::<Ipv4Addr>().unwrap(), "192.0.2.2".parse().unwrap()]);
        for local in ["127.0.0.1", "127.3.2.1", "192.0.2.2"] {
            assert_eq!(route_iface(&r, local.parse().unwrap()).as_deref(), Some("lo"), "{local}");
        }
        assert_eq!(route_iface(&r, "192.0.2.1".parse().unwrap()).as_deref(), Some("eth0"));
        assert_eq!(route_iface(&r, "192.0.2.255".parse().unwrap()).as_deref(), Some("eth0"));
    }

    #[test]
    fn icmp_checksum_is_the_internet_checksum() {
        // RFC 1071 example bytes.
        assert_eq!(checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]), !0xddf2);
    }
}
