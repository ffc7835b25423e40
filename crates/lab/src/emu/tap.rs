//! TAP devices with virtio-net headers: the few ioctls no safe crate offers, and timer slack.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::wire::VNET_HDR;

#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Create TAP device `name` (not persistent: it goes when the returned descriptor closes), in
/// the caller's network namespace, non-blocking, with virtio-net headers and offloads: the
/// kernel hands it (and takes from it) TCP super-packets of up to 64 KB with partial checksums.
pub fn create(name: &str) -> io::Result<OwnedFd> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("bad interface name '{name}'")));
    }
    // SAFETY: a NUL-terminated constant path; the result is checked.
    let fd = unsafe { libc::open(c"/dev/net/tun".as_ptr(), libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut req = IfReq { name: [0; libc::IFNAMSIZ], flags: 0, _pad: [0; 22] };
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    req.flags = (libc::IFF_TAP | libc::IFF_NO_PI | libc::IFF_VNET_HDR) as libc::c_short;
    // SAFETY: TUNSETIFF reads and writes an `ifreq`, which `IfReq` lays out (name, flags, padding
    // to 40 bytes); the pointer is valid for the call.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut req as *mut IfReq) })?;
    let hdr: libc::c_int = VNET_HDR as libc::c_int;
    // SAFETY: TUNSETVNETHDRSZ reads one int through the pointer, valid for the call.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETVNETHDRSZ, &hdr as *const libc::c_int) })?;
    let offloads = libc::TUN_F_CSUM | libc::TUN_F_TSO4 | libc::TUN_F_TSO6 | libc::TUN_F_TSO_ECN;
    // SAFETY: TUNSETOFFLOAD takes the flags by value.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETOFFLOAD, offloads as libc::c_ulong) })?;
    Ok(fd)
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Let this thread's timed waits end within 1 µs of their deadline (the default slack is 50 µs).
pub fn tight_timers() {
    // SAFETY: PR_SET_TIMERSLACK takes a value and touches no memory.
    unsafe {
        libc::prctl(
            libc::PR_SET_TIMERSLACK,
            1000 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        );
    }
}

/// Wait until `fd` is readable or `timeout_ns` passed (`ppoll`, nanosecond resolution).
pub fn wait_readable(fd: &OwnedFd, timeout_ns: u64) -> io::Result<bool> {
    let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    let ts = libc::timespec {
        tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: one valid pollfd and a valid timespec for the call; no signal mask.
    let r = unsafe { libc::ppoll(&mut p, 1, &ts, std::ptr::null()) };
    match r {
        r if r < 0 => {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e)
            }
        }
        0 => Ok(false),
        _ => Ok(p.revents & libc::POLLIN != 0),
    }
}
