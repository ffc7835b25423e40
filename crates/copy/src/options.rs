//! The rules of `cp`'s options beyond their names: a session's settings before the flags, what
//! rsync's `-a` and its switches keep, and the ranges `-P`, `--chunk-size` and
//! `--modify-window` take.

use crate::send::CopyConfig;
use linerate_net::auth::secret::Secret;
use linerate_proto::caps;
use std::net::SocketAddr;

/// A session's settings before the flags: every default, the stream count this host's cores
/// suggest; the address and key are placeholders until the route sets them.
pub fn settings() -> CopyConfig {
    let mut c = CopyConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)), Secret([0; 32]), Vec::new(), Vec::new());
    c.streams = default_streams();
    c
}

/// The stream count before the path's round trip: this host's cores, 2 to 8.
pub fn default_streams() -> u16 {
    std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(2, 8) as u16
}

/// rsync's metadata switches as given: `-a`, `-o`, `-g`, `-D`, `--devices`, `--specials` and
/// their `--no-` forms.
#[derive(Debug, Clone, Copy, Default)]
pub struct MetaFlags {
    /// `-a`.
    pub archive: bool,
    /// `-o`.
    pub owner: bool,
    /// `-g`.
    pub group: bool,
    /// `-D`.
    pub devices_and_specials: bool,
    /// `--devices`.
    pub devices: bool,
    /// `--specials`.
    pub specials: bool,
    /// `--no-o`.
    pub no_owner: bool,
    /// `--no-g`.
    pub no_group: bool,
    /// `--no-D`.
    pub no_devices: bool,
}

impl MetaFlags {
    /// Set what of -a (-o, -g, -D) a copy keeps. `-a` keeps owners only when run as `root`
    /// (rsync's -o as another user would be refused by a daemon and could not be applied by a
    /// receiver of that user anyway), groups always (a receiver keeps those it may), and
    /// devices, FIFOs and sockets.
    pub fn apply(self, root: bool, c: &mut CopyConfig) {
        let a = self;
        c.owner = (a.owner || (a.archive && root)) && !a.no_owner;
        c.group = (a.group || a.archive) && !a.no_group;
        c.devices = (a.devices || a.devices_and_specials || a.archive) && !a.no_devices;
        c.specials = (a.specials || a.devices_and_specials || a.archive) && !a.no_devices;
    }
}

/// `--modify-window`: whole seconds from 0 to a year ([`caps::MAX_MODIFY_WINDOW`]).
pub fn parse_modify_window(s: &str) -> Result<u32, String> {
    match s.parse::<i64>() {
        Ok(n) if (0..=i64::from(caps::MAX_MODIFY_WINDOW)).contains(&n) => Ok(n as u32),
        Ok(n) if n < 0 => Err(format!(
            "{n}: --modify-window takes whole seconds from 0 (rsync's negative values, for nanoseconds, \
             are the default here: 0 compares to the nanosecond)"
        )),
        _ => Err(format!("'{s}': --modify-window takes whole seconds from 0 to {}", caps::MAX_MODIFY_WINDOW)),
    }
}

/// `-P`: 1 to 256 streams; a number like scp's `-P PORT` gets a hint.
pub fn parse_streams(s: &str) -> Result<u16, String> {
    let max = caps::MAX_STREAMS;
    match s.parse::<u32>() {
        Ok(n) if (1..=u32::from(max)).contains(&n) => Ok(n as u16),
        Ok(n) if n > u32::from(max) => Err(format!(
            "{n} streams: -P takes 1 to {max} parallel streams (not a port, as scp's -P does: for an ssh \
             port use -e 'ssh -p {n}' or Port in ~/.ssh/config; a daemon's port goes in HOST:PORT:PATH)"
        )),
        _ => Err(format!("'{s}': -P takes 1 to {max} parallel streams")),
    }
}

/// `--chunk-size`: a size in the one grammar, then the protocol's rule (a power of two from 64K
/// to 8M).
pub fn parse_chunk_size(s: &str) -> Result<u32, String> {
    let v = linerate_model::units::parse_size(s).map_err(|e| e.to_string())?;
    match u32::try_from(v) {
        Ok(v) if v.is_power_of_two() && (caps::MIN_CHUNK..=caps::MAX_CHUNK).contains(&v) => Ok(v),
        _ => Err(format!("chunk size must be a power of two from 64K to 8M (64KiB to 8MiB), not {s} ({v} bytes)")),
    }
}

/// The warning for `-X`/`-A` (`xattrs`, `acls`), which are accepted for rsync's sake and not
/// kept; none when neither is given.
pub fn unkept_warning(xattrs: bool, acls: bool) -> Option<String> {
    let what = match (xattrs, acls) {
        (false, false) => return None,
        (true, true) => "-X and -A: extended attributes and ACLs are",
        (true, false) => "-X: extended attributes are",
        (false, true) => "-A: ACLs are",
    };
    Some(format!(
        "warning: {what} not kept: linerate does not copy extended attributes or ACLs (see docs/USER_GUIDE.md)"
    ))
}

/// The note for `-o` when the receiver is this user's own process (a local copy) and this user
/// is not root: owners cannot be kept; none otherwise.
pub fn owner_note(owner: bool, local: bool, root: bool) -> Option<&'static str> {
    (owner && local && !root).then_some(
        "note: -o: owners are kept only by a receiver running as root; not here (groups are, where you are a member)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x_and_a_are_named_as_not_kept_and_o_is_noted_only_where_it_cannot_be_kept() {
        assert_eq!(unkept_warning(false, false), None);
        assert!(unkept_warning(true, true)
            .unwrap()
            .starts_with("warning: -X and -A: extended attributes and ACLs are not kept"));
        assert!(unkept_warning(true, false).unwrap().starts_with("warning: -X: extended attributes are not kept"));
        assert!(unkept_warning(false, true).unwrap().starts_with("warning: -A: ACLs are not kept"));
        assert!(owner_note(true, true, false).is_some());
        for (owner, local, root) in [(false, true, false), (true, false, false), (true, true, true)] {
            assert_eq!(owner_note(owner, local, root), None, "{owner} {local} {root}");
        }
    }

    #[test]
    fn streams_are_1_to_256_and_a_port_gets_a_hint() {
        assert_eq!(parse_streams("1"), Ok(1));
        assert_eq!(parse_streams("256"), Ok(256));
        assert!(parse_streams("0").unwrap_err().contains("1 to 256"));
        assert!(parse_streams("x").is_err());
        let e = parse_streams("2222").unwrap_err();
        assert!(e.contains("not a port") && e.contains("ssh -p 2222"), "{e}");
    }

    #[test]
    fn parses_chunk_sizes() {
        assert_eq!(parse_chunk_size("1M"), Ok(1 << 20));
        assert_eq!(parse_chunk_size("64K"), Ok(64 << 10));
        assert_eq!(parse_chunk_size("8MiB"), Ok(8 << 20));
        assert_eq!(parse_chunk_size("1048576"), Ok(1 << 20));
        assert!(parse_chunk_size("3M").is_err());
        assert!(parse_chunk_size("16M").is_err());
        assert!(parse_chunk_size("32K").is_err());
        assert!(parse_chunk_size("x").is_err());
        assert!(parse_chunk_size("8G").is_err());
        let e = parse_chunk_size("1MB").unwrap_err();
        assert!(e.contains("power of two") && e.contains("1000000 bytes"), "{e}");
    }

    #[test]
    fn archive_keeps_owners_only_as_root_and_no_switches_win() {
        let mut c = settings();
        let a = MetaFlags { archive: true, ..MetaFlags::default() };
        a.apply(false, &mut c);
        assert!(!c.owner && c.group && c.devices && c.specials);
        a.apply(true, &mut c);
        assert!(c.owner);
        MetaFlags { no_owner: true, no_group: true, no_devices: true, ..a }.apply(true, &mut c);
        assert!(!c.owner && !c.group && !c.devices && !c.specials);
        MetaFlags { owner: true, specials: true, ..MetaFlags::default() }.apply(false, &mut c);
        assert!(c.owner && !c.group && !c.devices && c.specials);
    }
}
