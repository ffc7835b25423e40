//! User and group names for `-o`/`-g` (rsync's name mapping): the sender names the ids of what it
//! sends, the receiver looks each name up to find its own id. The lookups are `nix`'s safe
//! wrappers of the C library's reentrant calls (`getpwuid_r` and friends, a buffer grown on
//! `ERANGE` up to 1 MiB), which read /etc/passwd, /etc/group or whatever NSS is configured.
//! `nix` holds names as UTF-8 (a name that is not is read lossily); the wire carries printable
//! ASCII names only (`linerate_proto::name::validate_id_name`), so no name that crosses it
//! changes. Also what the receiving process may apply: owners as root, groups as root or where
//! it is a member (as rsync's receiver decides).

use nix::unistd::{Gid, Group, Uid, User};

/// The name of user `uid` on this machine.
pub fn user_name(uid: u32) -> Option<Vec<u8>> {
    User::from_uid(Uid::from_raw(uid)).ok().flatten().map(|u| u.name.into_bytes())
}

/// The name of group `gid` on this machine.
pub fn group_name(gid: u32) -> Option<Vec<u8>> {
    Group::from_gid(Gid::from_raw(gid)).ok().flatten().map(|g| g.name.into_bytes())
}

/// This machine's id of user `name` (`None` for a name with a NUL or not UTF-8: no such user).
pub fn user_id(name: &[u8]) -> Option<u32> {
    User::from_name(std::str::from_utf8(name).ok()?).ok().flatten().map(|u| u.uid.as_raw())
}

/// This machine's id of group `name` (as [`user_id`]).
pub fn group_id(name: &[u8]) -> Option<u32> {
    Group::from_name(std::str::from_utf8(name).ok()?).ok().flatten().map(|g| g.gid.as_raw())
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
        assert_eq!(group_id(b"\xffroot"), None, "a name that is not UTF-8 names no group");
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
