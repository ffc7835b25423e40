//! The few socket options no safe crate offers: `TCP_INFO` and `SO_MAX_PACING_RATE`. One of the
//! two modules with `unsafe` (with `copy::fill`); each block is one `getsockopt`/`setsockopt` on
//! a borrowed socket.
#![allow(unsafe_code)]

use linerate_proto::bench::TcpSample;
use std::io;
use std::os::fd::{AsFd, AsRawFd};

/// Offsets into Linux `struct tcp_info` (include/uapi/linux/tcp.h), stable since 4.x.
mod off {
    pub const SND_MSS: usize = 16;
    pub const RTT: usize = 68;
    pub const RTTVAR: usize = 72;
    pub const SND_CWND: usize = 80;
    pub const TOTAL_RETRANS: usize = 100;
    pub const PACING_RATE: usize = 104;
    pub const MIN_RTT: usize = 148;
    pub const DELIVERY_RATE: usize = 160;
    pub const MIN_LEN_FOR_DELIVERY: usize = 168;
}

/// The smallest round trip the connection has seen (`tcpi_min_rtt`, µs; Linux 4.10 and later):
/// unlike the smoothed RTT, not inflated by delayed acknowledgements of a request-response
/// exchange such as a handshake. `None` where the kernel does not report it.
pub fn min_rtt_us(sock: &impl AsFd) -> io::Result<Option<u32>> {
    let (buf, len) = raw_tcp_info(sock)?;
    let o = off::MIN_RTT;
    Ok((o + 4 <= len).then(|| u32::from_ne_bytes([buf[o], buf[o + 1], buf[o + 2], buf[o + 3]])).filter(|&v| v > 0))
}

fn raw_tcp_info(sock: &impl AsFd) -> io::Result<([u8; 256], usize)> {
    let mut buf = [0u8; 256];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: the fd is borrowed and open for the call; the kernel writes at most `len` bytes
    // into `buf`, which is that long, and stores the length it wrote in `len`.
    let rc = unsafe {
        libc::getsockopt(sock.as_fd().as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_INFO, buf.as_mut_ptr().cast(), &mut len)
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((buf, (len as usize).min(256)))
}

/// Read `TCP_INFO` of a connected socket.
pub fn tcp_info(sock: &impl AsFd) -> io::Result<TcpSample> {
    let (buf, len) = raw_tcp_info(sock)?;
    let u32_at =
        |o: usize| if o + 4 <= len { u32::from_ne_bytes([buf[o], buf[o + 1], buf[o + 2], buf[o + 3]]) } else { 0 };
    let u64_at = |o: usize| {
        if o + 8 <= len {
            let mut b = [0u8; 8];
            b.copy_from_slice(&buf[o..o + 8]);
            u64::from_ne_bytes(b)
        } else {
            0
        }
    };
    Ok(TcpSample {
        cwnd: u32_at(off::SND_CWND),
        rtt_us: u32_at(off::RTT),
        rttvar_us: u32_at(off::RTTVAR),
        retrans: u32_at(off::TOTAL_RETRANS),
        mss: u32_at(off::SND_MSS),
        pacing_rate: u64_at(off::PACING_RATE),
        delivery_rate: if len >= off::MIN_LEN_FOR_DELIVERY { u64_at(off::DELIVERY_RATE) } else { 0 },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn tcp_info_of_a_loopback_connection_has_an_mss_and_a_window() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        c.write_all(&[1u8; 100_000]).unwrap();
        let mut b = vec![0u8; 100_000];
        s.read_exact(&mut b).unwrap();
        let i = tcp_info(&c).unwrap();
        assert!(i.mss > 0 && i.cwnd > 0, "{i:?}");
        assert!(i.rtt_us > 0, "{i:?}");
        let l2 = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(tcp_info(&l2).is_err(), "TCP_INFO on a UDP socket must fail, not invent numbers");
    }
}
