//! Owners on the sending side (`-o`, `-g`): the owner each entry carries, and the `IdName` frames
//! that name its ids, once per stream and before the first entry that uses them (rsync sends the
//! names of the ids it uses so the receiver can map them; `--numeric-ids` sends none).

use crate::ids;
use linerate_proto::frame::{Frame, IdKind, IdName, Owner, FLAG_GROUP, FLAG_NUMERIC_IDS, FLAG_OWNER};
use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};

/// The session's owner settings and the names looked up so far (shared by every stream).
#[derive(Debug, Default)]
pub(crate) struct Owners {
    flags: u32,
    names: Mutex<NameCache>,
}

/// Names looked up by (kind, id); `None` for an id without a (valid) name here.
type NameCache = HashMap<(IdKind, u32), Option<Vec<u8>>>;

/// The ids one stream has named already.
pub(crate) type Named = HashSet<(IdKind, u32)>;

impl Owners {
    /// The owner settings of a session with `Begin.flags` `flags`.
    pub(crate) fn new(flags: u32) -> Owners {
        Owners { flags: flags & (FLAG_OWNER | FLAG_GROUP | FLAG_NUMERIC_IDS), names: Mutex::default() }
    }

    /// What goes on the wire for `owner`: the ids the session keeps, zeros for the rest.
    pub(crate) fn wire(&self, owner: Owner) -> Owner {
        Owner {
            uid: if self.flags & FLAG_OWNER != 0 { owner.uid } else { 0 },
            gid: if self.flags & FLAG_GROUP != 0 { owner.gid } else { 0 },
        }
    }

    /// The `IdName` frames a stream must send before an entry owned by `owner` (ids it has not
    /// named yet; an id without a valid name on this machine is sent as a number only). Calls
    /// `emit` for each.
    pub(crate) fn name(&self, owner: Owner, named: &mut Named, mut emit: impl FnMut(Frame<'_>)) {
        if self.flags & FLAG_NUMERIC_IDS != 0 {
            return;
        }
        for (kind, flag, id) in [(IdKind::User, FLAG_OWNER, owner.uid), (IdKind::Group, FLAG_GROUP, owner.gid)] {
            if self.flags & flag == 0 || !named.insert((kind, id)) {
                continue;
            }
            let name = {
                let mut names = self.names.lock().unwrap_or_else(PoisonError::into_inner);
                names
                    .entry((kind, id))
                    .or_insert_with(|| {
                        let n = match kind {
                            IdKind::User => ids::user_name(id),
                            IdKind::Group => ids::group_name(id),
                        };
                        n.filter(|n| linerate_proto::name::validate_id_name(n).is_ok())
                    })
                    .clone()
            };
            if let Some(name) = name {
                emit(Frame::IdName(IdName { kind, id, name: &name }));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_each_id_once_per_stream_and_none_with_numeric_ids() {
        let o = Owners::new(FLAG_OWNER | FLAG_GROUP);
        let mut named = Named::new();
        let mut out = Vec::new();
        o.name(Owner { uid: 0, gid: 0 }, &mut named, |f| f.encode(&mut out));
        let first = out.len();
        assert!(first > 0);
        o.name(Owner { uid: 0, gid: 0 }, &mut named, |f| f.encode(&mut out));
        assert_eq!(out.len(), first, "named again on the same stream");
        let frames: Vec<_> = linerate_proto::frame::frames(&out).collect::<Result<_, _>>().unwrap();
        assert!(matches!(&frames[0], Frame::IdName(IdName { kind: IdKind::User, id: 0, name: b"root" })), "{frames:?}");
        let numeric = Owners::new(FLAG_OWNER | FLAG_NUMERIC_IDS);
        numeric.name(Owner { uid: 0, gid: 0 }, &mut Named::new(), |_| panic!("a name with --numeric-ids"));
        assert_eq!(Owners::new(FLAG_GROUP).wire(Owner { uid: 5, gid: 6 }), Owner { uid: 0, gid: 6 });
    }
}
