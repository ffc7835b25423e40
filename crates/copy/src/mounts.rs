//! Which file system a destination is on, so that a full, over-quota or read-only destination
//! is named in the one message that ends the copy ("the file system at /mnt/small (tmpfs)"),
//! not left to the user to work out from a path (issue 31).

use std::io;
use std::os::fd::AsFd;

/// How a write failure on the destination's file system ends the copy: every later write there
/// fails the same way, so the first one ends the session ([`linerate_proto::ErrorCode::Storage`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exhausted {
    /// ENOSPC: no space left.
    Full,
    /// EDQUOT: the user's disk quota is reached.
    Quota,
    /// EROFS: the file system is mounted read-only.
    ReadOnly,
}

impl Exhausted {
    /// The kind of `e`, when it is one that ends a copy (EIO is not: it may be one bad file).
    pub fn of(e: &io::Error) -> Option<Exhausted> {
        match e.raw_os_error() {
            Some(libc::ENOSPC) => Some(Exhausted::Full),
            Some(libc::EDQUOT) => Some(Exhausted::Quota),
            Some(libc::EROFS) => Some(Exhausted::ReadOnly),
            _ => None,
        }
    }

    /// What happened to the file system, after its name ("... filled up").
    pub fn what(self) -> &'static str {
        match self {
            Exhausted::Full => "filled up",
            Exhausted::Quota => "reached the disk quota",
            Exhausted::ReadOnly => "is mounted read-only",
        }
    }
}

/// "the file system at MOUNT (TYPE)" for the file system holding `fd`, from
/// `/proc/self/mountinfo`; "the destination's file system" when it cannot be found.
pub fn describe(fd: impl AsFd) -> String {
    let found = rustix::fs::fstat(fd).ok().and_then(|st| {
        let dev = (rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev));
        let table = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        mount_of(&table, dev)
    });
    match found {
        Some((point, fstype)) => format!("the file system at {} ({})", linerate_proto::name::escape(&point), fstype),
        None => "the destination's file system".to_string(),
    }
}

/// The mount point and type of device `dev` (major, minor) in a mountinfo table (proc(5)): the
/// last line of that device, the mount on top. Mount points have `\ooo` escapes undone.
fn mount_of(table: &str, dev: (u32, u32)) -> Option<(Vec<u8>, String)> {
    let want = format!("{}:{}", dev.0, dev.1);
    table.lines().rev().find_map(|line| {
        let (fields, rest) = line.split_once(" - ")?;
        let mut f = fields.split(' ');
        let devno = f.nth(2)?;
        let _root = f.next()?;
        let point = f.next()?;
        let fstype = rest.split(' ').next()?;
        (devno == want).then(|| (unescape(point), linerate_proto::name::escape(fstype.as_bytes())))
    })
}

/// Undo mountinfo's octal escapes (`\040` for a space, `\011`, `\012`, `\134`).
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b.get(i + 1..i + 4).filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match oct {
            Some(d) => {
                out.push(d.iter().fold(0u8, |a, c| a.wrapping_mul(8).wrapping_add(c - b'0')));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const TABLE: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:41 / /mnt/small rw,relatime - tmpfs tmpfs rw,size=20480k
41 22 8:1 /srv/data /mnt/with\\040space ro,relatime - ext4 /dev/sda1 rw
";

    #[test]
    fn finds_the_mount_of_a_device_and_undoes_escapes() {
        assert_eq!(mount_of(TABLE, (0, 41)), Some((b"/mnt/small".to_vec(), "tmpfs".into())));
        // The device mounted twice: the later (upper) mount names it.
        assert_eq!(mount_of(TABLE, (8, 1)), Some((b"/mnt/with space".to_vec(), "ext4".into())));
        assert_eq!(mount_of(TABLE, (9, 9)), None);
        assert_eq!(mount_of("garbage\n\n1 2 3", (0, 41)), None);
    }

    #[test]
    fn describes_the_file_system_of_a_directory() {
        let t = tempfile::tempdir().unwrap();
        let d = describe(std::fs::File::open(t.path()).unwrap());
        assert!(d.starts_with("the file system at /") && d.ends_with(')'), "{d}");
    }

    #[test]
    fn only_full_quota_and_read_only_end_a_copy() {
        let e = |n| io::Error::from_raw_os_error(n);
        assert_eq!(Exhausted::of(&e(libc::ENOSPC)), Some(Exhausted::Full));
        assert_eq!(Exhausted::of(&e(libc::EDQUOT)), Some(Exhausted::Quota));
        assert_eq!(Exhausted::of(&e(libc::EROFS)), Some(Exhausted::ReadOnly));
        assert_eq!(Exhausted::of(&e(libc::EACCES)), None);
        assert_eq!(Exhausted::of(&e(libc::EIO)), None);
        assert_eq!(Exhausted::of(&io::Error::other("x")), None);
    }
}
