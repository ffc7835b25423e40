//! User and group names for `-o`/`-g` (rsync's name mapping): the sender names the ids of what it
//! sends, the receiver looks each name up to find its own id. The C library's reentrant lookups
//! (`getpwuid_r` and friends) read /etc/passwd, /etc/group or whatever NSS is configured; they
//! are the only unsafe code here. Also what the receiving process may apply: owners as root,
//! groups as root or where it is a member (as rsync's receiver decides).

#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int};

/// Largest buffer a lookup grows to (a group with many members can need more than the default).
const MAX_BUF: usize = 1 << 20;

/// A passwd or group record: its name and id.
trait Entry: Sized {
    /// The name and id, copied out.
    ///
    /// # Safety
    /// `self` must have been filled in by a successful lookup whose buffer is still alive.
    unsafe fn read(&self) -> (Vec<u8>, u32);
}

impl Entry for libc::passwd {
    unsafe fn read(&self) -> (Vec<u8>, u32) {
        // SAFETY: the caller's contract: `pw_name` is a NUL-terminated string in the live buffer.
        (unsafe { CStr::from_ptr(self.pw_name) }.to_bytes().to_vec(), self.pw_uid)
    }
}

impl Entry for libc::group {
    unsafe fn read(&self) -> (Vec<u8>, u32) {
        // SAFETY: as above, for `gr_name`.
        (unsafe { CStr::from_ptr(self.gr_name) }.to_bytes().to_vec(), self.gr_gid)
    }
}

/// Run one `get*_r` lookup with a buffer that grows on `ERANGE`; `None` when not found or failed.
fn lookup<T: Entry>(call: impl Fn(*mut T, *mut c_char, usize, *mut *mut T) -> c_int) -> Option<(Vec<u8>, u32)> {
    let mut size = 1024;
    loop {
        let mut buf = vec![0 as c_char; size];
        // SAFETY: passwd and group are plain C structs of integers and pointers; all-zero is a
        // valid value, and the call overwrites it.
        let mut entry: T = unsafe { std::mem::zeroed() };
        let mut result: *mut T = std::ptr::null_mut();
        let rc = call(&mut entry, buf.as_mut_ptr(), buf.len(), &mut result);
        if rc == libc::ERANGE && size < MAX_BUF {
            size *= 4;
            continue;
        }
        if rc != 0 || result.is_null() {
            return None;
        }
        // SAFETY: the lookup succeeded and filled `entry`, whose strings live in `buf`, alive here.
        return Some(unsafe { entry.read() });
    }
}

/// The name of user `uid` on this machine.
pub fn user_name(uid: u32) -> Option<Vec<u8>> {
    // SAFETY: every pointer is valid for the call; the buffer length is its real length.
    lookup::<libc::passwd>(|e, b, n, r| unsafe { libc::getpwuid_r(uid, e, b, n, r) }).map(|(name, _)| name)
}

/// The name of group `gid` on this machine.
pub fn group_name(gid: u32) -> Option<Vec<u8>> {
    // SAFETY: as for `user_name`.
    lookup::<libc::group>(|e, b, n, r| unsafe { libc::getgrgid_r(gid, e, b, n, r) }).map(|(name, _)| name)
}

/// This machine's id of user `name`.
pub fn user_id(name: &[u8]) -> Option<u32> {
    let c = CString::new(name).ok()?;
    // SAFETY: as for `user_name`; `c` is NUL-terminated and outlives the call.
    lookup::<libc::passwd>(|e, b, n, r| unsafe { libc::getpwnam_r(c.as_ptr(), e, b, n, r) }).map(|(_, id)| id)
}

/// This machine's id of group `name`.
pub fn group_id(name: &[u8]) -> Option<u32> {
    let c = CString::new(name).ok()?;
    // SAFETY: as for `user_id`.
    lookup::<libc::group>(|e, b, n, r| unsafe { libc::getgrnam_r(c.as_ptr(), e, b, n, r) }).map(|(_, id)| id)
}

/// What the receiving process may apply: rsync's receiver sets owners only as the super-user, and
/// a group as another user only where that user is a member.
#[derive(Debug, Clone)]
pub struct Privileges {
    /// Running as root: any owner and group.
    pub root: bool,
    /// The groups this process is in (its effective group and supplementary groups).
    pub groups: Vec<u32>,
}

impl Privileges {
    /// The privileges of this process.
    pub fn of_process() -> Privileges {
        let root = rustix::process::geteuid().is_root();
        let mut groups: Vec<u32> =
            rustix::process::getgroups().unwrap_or_default().iter().map(|g| g.as_raw()).collect();
        groups.push(rustix::process::getegid().as_raw());
        Privileges { root, groups }
    }

    /// The owner and group to apply for the wanted `(uid, gid)` (each `None` when not kept):
    /// owners only as root, groups as root or among this process's groups; the id -1 never.
    pub fn allowed(&self, (uid, gid): (Option<u32>, Option<u32>)) -> (Option<u32>, Option<u32>) {
        let uid = uid.filter(|&u| self.root && u != u32::MAX);
        let gid = gid.filter(|&g| g != u32::MAX && (self.root || self.groups.contains(&g)));
        (uid, gid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_and_its_group_round_trip_by_name() {
        assert_eq!(user_name(0).as_deref(), Some(&b"root"[..]));
        assert_eq!(user_id(b"root"), Some(0));
        let g0 = group_name(0).expect("group 0 has a name");
        assert_eq!(group_id(&g0), Some(0));
        assert_eq!(user_id(b"no-such-user-linerate"), None);
        assert_eq!(user_id(b"a\0b"), None);
    }

    #[test]
    fn a_non_root_receiver_keeps_only_its_own_groups() {
        let p = Privileges { root: false, groups: vec![100, 7] };
        assert_eq!(p.allowed((Some(5), Some(7))), (None, Some(7)));
        assert_eq!(p.allowed((Some(5), Some(8))), (None, None));
        let r = Privileges { root: true, groups: vec![] };
        assert_eq!(r.allowed((Some(5), Some(8))), (Some(5), Some(8)));
        assert_eq!(r.allowed((Some(u32::MAX), None)), (None, None));
    }
}
