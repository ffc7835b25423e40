//! Socket options no safe crate the workspace uses offers (rustix 1.1 and nix 0.32 have
//! neither), each a small wrapper around `libc`:
//! - [`set_max_pacing_rate`]: `setsockopt(SOL_SOCKET, SO_MAX_PACING_RATE)` of one 64-bit integer,
//!   or 32 bits on kernels before 4.20 (one `unsafe` block, the call).
//! - [`tcp_info`] and [`min_rtt_us`], through `raw_tcp_info`: `getsockopt(IPPROTO_TCP, TCP_INFO)`
//!   into a zeroed `libc::tcp_info`, read as libc lays it out, no offset table of our own (two
//!   `unsafe` blocks: the zeroed struct and the call).
//!
//! Every call is on a socket borrowed for its length (`AsFd`). The other modules with `unsafe`
//! are linerate-copy's `fill` (a vector's length extended over bytes `read` wrote) and
//! linerate-bench's `dgram` (the UDP receiver's `recvmmsg` and its `UDP_GRO` control messages).
#![allow(unsafe_code)]

use linerate_proto::bench::TcpStats;
use std::io;
use std::os::fd::{AsFd, AsRawFd};

/// SO_MAX_PACING_RATE in bytes/s on a borrowed socket: 64 bits where the kernel takes them
/// (4.20 and later), else capped to 32 (about 34 Gbit/s).
pub fn set_max_pacing_rate(sock: &impl AsFd, rate: u64) -> io::Result<()> {
    let fd = sock.as_fd().as_raw_fd();
    let set = |v: *const libc::c_void, len: usize| {
        // SAFETY: the fd is open for the call (borrowed from `sock`); `v` points to an integer
        // of `len` bytes on the caller's stack frame, which the kernel only reads.
        let rc = unsafe { libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_MAX_PACING_RATE, v, len as libc::socklen_t) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    };
    set(std::ptr::from_ref(&rate).cast(), std::mem::size_of::<u64>()).or_else(|_| {
        let small = u32::try_from(rate).unwrap_or(u32::MAX);
        set(std::ptr::from_ref(&small).cast(), std::mem::size_of::<u32>())
    })
}

/// The smallest round trip the connection has seen (`tcpi_min_rtt`, µs; Linux 4.10 and later):
/// unlike the smoothed RTT, not inflated by delayed acknowledgements of a request-response
/// exchange such as a handshake. `None` where the kernel does not report it.
pub fn min_rtt_us(sock: &impl AsFd) -> io::Result<Option<u32>> {
    Ok(Some(raw_tcp_info(sock)?.tcpi_min_rtt).filter(|&v| v > 0))
}

/// Linux `struct tcp_info` of a TCP socket, as libc lays it out. An older kernel fills only its
/// first part; the fields it does not know stay zero.
fn raw_tcp_info(sock: &impl AsFd) -> io::Result<libc::tcp_info> {
    // SAFETY: `tcp_info` is integers only, for which all zeroes is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: the fd is borrowed and open for the call; the kernel writes at most `len` bytes
    // into `info`, which is that long, and stores the length it wrote in `len`.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_fd().as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(info)
}

/// Read `TCP_INFO` of a connected socket.
pub fn tcp_info(sock: &impl AsFd) -> io::Result<TcpStats> {
    let i = raw_tcp_info(sock)?;
    Ok(TcpStats {
        cwnd: i.tcpi_snd_cwnd,
        rtt_us: i.tcpi_rtt,
        rttvar_us: i.tcpi_rttvar,
        retrans: i.tcpi_total_retrans,
        mss: i.tcpi_snd_mss,
        pacing_rate: i.tcpi_pacing_rate,
        delivery_rate: i.tcpi_delivery_rate,
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
        assert!(min_rtt_us(&c).unwrap().is_some_and(|m| m > 0 && m <= i.rtt_us.max(1) * 8), "{i:?}");
        assert!(i.pacing_rate > 0, "a field past the old offset table's middle is read: {i:?}");
        let l2 = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(tcp_info(&l2).is_err(), "TCP_INFO on a UDP socket must fail, not invent numbers");
    }
}
