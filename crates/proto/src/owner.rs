//! Owners on the receiving side: which user and group ids a receiver applies to what it writes
//! (rsync's `-o`, `-g`, `--numeric-ids`). The sender names the ids it uses (`IdName` frames, on
//! the stream of the entry, before it); the receiver maps each name to its own id of that name,
//! falling back to the sender's number when the name is unknown here, as rsync does. Without I/O:
//! the lookup of a name is a function the engine passes in.

use crate::caps::MAX_ID_NAMES;
use crate::frame::{IdKind, IdName, Owner, FLAG_GROUP, FLAG_NUMERIC_IDS, FLAG_OWNER};
use crate::ProtoError;
use std::collections::HashMap;

/// The sender's ids mapped to this receiver's, for one session.
#[derive(Debug, Default)]
pub struct IdMap {
    flags: u32,
    users: HashMap<u32, u32>,
    groups: HashMap<u32, u32>,
}

impl IdMap {
    /// An empty map for a session with `Begin.flags` `flags`.
    pub fn new(flags: u32) -> IdMap {
        IdMap { flags, ..IdMap::default() }
    }

    /// Take an `IdName` from the peer: refused when the session keeps no such ids or uses numbers
    /// only (a violation), for a name that breaks [`crate::name::validate_id_name`] (BadName),
    /// or beyond [`MAX_ID_NAMES`] ids of one kind (Limit). `lookup` gives this machine's id of a
    /// name (None: unknown here, the sender's number is kept). A second name for an id already
    /// mapped replaces the first (a well-behaved sender sends the same one on each stream).
    pub fn name(&mut self, n: &IdName, lookup: impl FnOnce(IdKind, &[u8]) -> Option<u32>) -> Result<(), ProtoError> {
        let flag = match n.kind {
            IdKind::User => FLAG_OWNER,
            IdKind::Group => FLAG_GROUP,
        };
        if self.flags & flag == 0 || self.flags & FLAG_NUMERIC_IDS != 0 {
            return Err(ProtoError::Violation(format!(
                "an id name ({:?}) in a session that does not map {} by name",
                n.kind,
                if flag == FLAG_OWNER { "owners" } else { "groups" }
            )));
        }
        crate::name::validate_id_name(n.name)?;
        let map = match n.kind {
            IdKind::User => &mut self.users,
            IdKind::Group => &mut self.groups,
        };
        if map.len() >= MAX_ID_NAMES && !map.contains_key(&n.id) {
            return Err(ProtoError::Limit(format!("more than {MAX_ID_NAMES} distinct ids of one kind")));
        }
        let local = lookup(n.kind, n.name).unwrap_or(n.id);
        map.insert(n.id, local);
        Ok(())
    }

    /// The ids to apply for the sender's `owner`: `None` for what the session does not keep.
    pub fn local(&self, owner: Owner) -> (Option<u32>, Option<u32>) {
        let uid = (self.flags & FLAG_OWNER != 0).then(|| *self.users.get(&owner.uid).unwrap_or(&owner.uid));
        let gid = (self.flags & FLAG_GROUP != 0).then(|| *self.groups.get(&owner.gid).unwrap_or(&owner.gid));
        (uid, gid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(id: u32, name: &[u8]) -> IdName<'_> {
        IdName { kind: IdKind::User, id, name }
    }

    #[test]
    fn maps_names_to_local_ids_and_keeps_the_number_of_an_unknown_name() {
        let mut m = IdMap::new(FLAG_OWNER | FLAG_GROUP);
        m.name(&user(1000, b"alice"), |_, n| (n == b"alice").then_some(2000)).unwrap();
        m.name(&user(1001, b"nobody-here"), |_, _| None).unwrap();
        m.name(&IdName { kind: IdKind::Group, id: 50, name: b"staff" }, |k, _| (k == IdKind::Group).then_some(7))
            .unwrap();
        assert_eq!(m.local(Owner { uid: 1000, gid: 50 }), (Some(2000), Some(7)));
        assert_eq!(m.local(Owner { uid: 1001, gid: 51 }), (Some(1001), Some(51)));
    }

    #[test]
    fn applies_only_what_the_flags_keep_and_refuses_names_with_numeric_ids() {
        let m = IdMap::new(FLAG_GROUP);
        assert_eq!(m.local(Owner { uid: 3, gid: 4 }), (None, Some(4)));
        let mut m = IdMap::new(FLAG_OWNER | FLAG_NUMERIC_IDS);
        assert!(matches!(m.name(&user(1, b"a"), |_, _| Some(9)), Err(ProtoError::Violation(_))));
        let mut m = IdMap::new(FLAG_GROUP);
        assert!(matches!(m.name(&user(1, b"a"), |_, _| Some(9)), Err(ProtoError::Violation(_))));
    }

    #[test]
    fn refuses_bad_names_and_too_many_ids() {
        let mut m = IdMap::new(FLAG_OWNER);
        for bad in [&b""[..], b"a/b", b"a:b", b"a b", b"a\0b", b"-x", b"123", b"\xc3\xa9", &[b'a'; 256]] {
            assert!(m.name(&user(1, bad), |_, _| None).is_err(), "{bad:?}");
        }
        for id in 0..MAX_ID_NAMES as u32 {
            m.name(&user(id, b"u"), |_, _| None).unwrap();
        }
        m.name(&user(0, b"again"), |_, _| None).unwrap();
        assert!(matches!(m.name(&user(u32::MAX, b"u"), |_, _| None), Err(ProtoError::Limit(_))));
    }
}
