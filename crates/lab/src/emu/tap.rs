//! TAP devices with virtio-net headers: the three TUN ioctls through `rustix::ioctl` (no safe
//! wrapper offers them), and timer slack and waits through `rustix`'s safe calls.
#![allow(unsafe_code)]

use std::io;
use std::num::NonZeroU64;
use std::os::fd::OwnedFd;

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fs::{Mode, OFlags};
use rustix::ioctl::{opcode, IntegerSetter, Opcode, Setter, Updater};

use super::wire::VNET_HDR;

/// `TUNSETIFF`: `_IOW('T', 202, int)`; reads and writes an `ifreq`.
const TUNSETIFF: Opcode = opcode::write::<libc::c_int>(b'T', 202);
/// `TUNSETOFFLOAD`: `_IOW('T', 208, unsigned int)`; takes the flags by value.
const TUNSETOFFLOAD: Opcode = opcode::write::<libc::c_uint>(b'T', 208);
/// `TUNSETVNETHDRSZ`: `_IOW('T', 216, int)`; reads one int through the pointer.
const TUNSETVNETHDRSZ: Opcode = opcode::write::<libc::c_int>(b'T', 216);

/// The part of `struct ifreq` TUNSETIFF uses: the name, the flags, padding to 40 bytes.
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
    let fd = rustix::fs::open("/dev/net/tun", OFlags::RDWR | OFlags::NONBLOCK | OFlags::CLOEXEC, Mode::empty())?;
    let mut req = IfReq { name: [0; libc::IFNAMSIZ], flags: 0, _pad: [0; 22] };
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    req.flags = (libc::IFF_TAP | libc::IFF_NO_PI | libc::IFF_VNET_HDR) as libc::c_short;
    // SAFETY: TUNSETIFF reads and writes an `ifreq`, which `IfReq` lays out (name, flags,
    // padding to 40 bytes); the reference is valid for the call.
    unsafe { rustix::ioctl::ioctl(&fd, Updater::<TUNSETIFF, IfReq>::new(&mut req)) }?;
    let hdr = VNET_HDR as libc::c_int;
    // SAFETY: TUNSETVNETHDRSZ reads one int through the pointer, which `Setter` passes.
    unsafe { rustix::ioctl::ioctl(&fd, Setter::<TUNSETVNETHDRSZ, libc::c_int>::new(hdr)) }?;
    let offloads = libc::TUN_F_CSUM | libc::TUN_F_TSO4 | libc::TUN_F_TSO6 | libc::TUN_F_TSO_ECN;
    // SAFETY: TUNSETOFFLOAD takes the flags by value, and these are flags it knows.
    unsafe { rustix::ioctl::ioctl(&fd, IntegerSetter::<TUNSETOFFLOAD>::new_usize(offloads as usize)) }?;
    Ok(fd)
}

/// Let this thread's timed waits end within 1 µs of their deadline (the default slack is 50 µs).
pub fn tight_timers() {
    // best effort: the waits are only later without it
    let _ = rustix::thread::set_current_timer_slack(NonZeroU64::new(1000));
}

/// Wait until `fd` is readable or `timeout_ns` passed (`ppoll`, nanosecond resolution).
pub fn wait_readable(fd: &OwnedFd, timeout_ns: u64) -> io::Result<bool> {
    let mut p = [PollFd::new(fd, PollFlags::IN)];
    let ts = Timespec { tv_sec: (timeout_ns / 1_000_000_000) as _, tv_nsec: (timeout_ns % 1_000_000_000) as _ };
    match rustix::event::poll(&mut p, Some(&ts)) {
        Err(rustix::io::Errno::INTR) | Ok(0) => Ok(false),
        Err(e) => Err(e.into()),
        Ok(_) => Ok(p[0].revents().contains(PollFlags::IN)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_opcodes_are_the_kernels() {
        #[allow(clippy::unnecessary_cast)] // libc::Ioctl is a c_ulong with glibc, a c_int with musl
        let kernel = |op: libc::Ioctl| op as u64;
        assert_eq!(u64::from(TUNSETIFF), kernel(libc::TUNSETIFF));
        assert_eq!(u64::from(TUNSETOFFLOAD), kernel(libc::TUNSETOFFLOAD));
        assert_eq!(u64::from(TUNSETVNETHDRSZ), kernel(libc::TUNSETVNETHDRSZ));
        assert_eq!(std::mem::size_of::<IfReq>(), 40, "struct ifreq");
    }

    #[test]
    fn a_wait_on_a_quiet_descriptor_times_out_and_a_written_one_is_readable() {
        let (r, mut w) = std::os::unix::net::UnixStream::pair().unwrap();
        let r = OwnedFd::from(r);
        assert!(!wait_readable(&r, 1_000).unwrap());
        std::io::Write::write_all(&mut w, b"x").unwrap();
        assert!(wait_readable(&r, 1_000_000_000).unwrap());
        tight_timers();
        assert_eq!(rustix::thread::current_timer_slack().unwrap(), 1000);
    }
}
