//! Frames: the messages carried inside records. One record holds one or more frames, each
//! `type: u8 | body_len: u32 BE | body`. Decoding borrows from the record buffer and never
//! allocates; every length is checked against its cap and against the bytes actually present.

use crate::auth::{PUBLIC_KEY_LEN, SIGNATURE_LEN};
use crate::caps::{
    MAX_BENCH_DOC, MAX_CHUNK, MAX_FILTER_BYTES, MAX_FILTER_RULES, MAX_ID_NAME, MAX_KEEP_NAMES, MAX_MESSAGE,
    MAX_MODIFY_WINDOW, MAX_NAME, MAX_PATH, MAX_WANT_RANGES, MIN_CHUNK,
};
use crate::ProtoError;

/// Bytes in front of every frame body.
pub const FRAME_HEADER_LEN: usize = 5;
/// Bytes of a [`Chunk`] frame before its data.
pub const CHUNK_HEADER_LEN: usize = FRAME_HEADER_LEN + 16;

/// `Begin.flags`: hash files with BLAKE3 while reading and check the written file before rename.
pub const FLAG_VERIFY: u32 = 1;
/// `Begin.flags`: fsync every file and directory before reporting success.
pub const FLAG_FSYNC: u32 = 2;
/// `Begin.flags`: a pull: the server sends the tree named by the `Pull` frame that follows
/// `Begin`, and the client receives it.
pub const FLAG_PULL: u32 = 4;
/// `Begin.flags`: sync: every regular file is offered (`Offer`) and the receiver answers which
/// chunks it needs (`Want`): nothing for an up-to-date file, the missing chunks of a partial one.
pub const FLAG_SYNC: u32 = 8;
/// `Begin.flags` (with `FLAG_SYNC`): a file is up to date only when its BLAKE3 matches (offers
/// carry the digest), not merely its size and modification time.
pub const FLAG_CHECKSUM: u32 = 16;
/// `Begin.flags` (with `FLAG_SYNC`): the sender lists each source directory (`Keep`); the
/// receiver deletes what else is in it.
pub const FLAG_DELETE: u32 = 32;
/// `Begin.flags` (with `FLAG_SYNC`): change nothing; the receiver only answers offers and reports
/// what it would delete.
pub const FLAG_DRY_RUN: u32 = 64;
/// `Begin.flags` (a push): `dest` is a directory the sources go into under their own names; the
/// server creates it (its last component only) when it does not exist. See [`Placement`].
pub const FLAG_INTO: u32 = 128;
/// `Begin.flags` (a push of one source): `dest` names the copy itself, even where a directory of
/// that name exists (the copy then merges into it). See [`Placement`].
pub const FLAG_AS: u32 = 256;
/// `Begin.flags`: keep owners (`-o`): entries carry the sender's user ids (and, without
/// [`FLAG_NUMERIC_IDS`], `IdName` frames name them); a receiver applies them only as root.
pub const FLAG_OWNER: u32 = 1 << 9;
/// `Begin.flags`: keep groups (`-g`): a receiver applies a group where it may (root: any; another
/// user: the groups it is a member of).
pub const FLAG_GROUP: u32 = 1 << 10;
/// `Begin.flags` (with [`FLAG_OWNER`] or [`FLAG_GROUP`]): ids are applied as numbers; no names
/// are sent or looked up (rsync's `--numeric-ids`).
pub const FLAG_NUMERIC_IDS: u32 = 1 << 11;
/// `Begin.flags`: the sender sends devices, FIFOs and sockets (`Special` frames; rsync's `-D`).
/// Without it a `Special` is a violation.
pub const FLAG_DEVICES: u32 = 1 << 12;
/// `Begin.flags` (`-H`): a file with several names in the tree is sent once; its other names
/// travel as [`HardLink`] entries and are linked on the receiver.
pub const FLAG_HARD_LINKS: u32 = 1 << 13;
/// `Begin.flags` (`-S`): holes of sparse files are not sent ([`Hole`]) and are left as holes on
/// the receiver, which also leaves blocks of zeros unwritten.
pub const FLAG_SPARSE: u32 = 1 << 14;
const KNOWN_FLAGS: u32 = FLAG_VERIFY
    | FLAG_FSYNC
    | FLAG_PULL
    | FLAG_SYNC
    | FLAG_CHECKSUM
    | FLAG_DELETE
    | FLAG_DRY_RUN
    | FLAG_INTO
    | FLAG_AS
    | FLAG_OWNER
    | FLAG_GROUP
    | FLAG_NUMERIC_IDS
    | FLAG_DEVICES
    | FLAG_HARD_LINKS
    | FLAG_SPARSE;

/// Where a push's sources land relative to `Begin.dest`: the client decides (from the rsync rule
/// for sources, docs/USER_GUIDE.md) so that running the same command again lands in the same
/// place; the server resolves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Neither flag (`cp -r`): an existing directory receives the sources under their names;
    /// otherwise the single source takes the destination's name.
    Cp,
    /// `FLAG_INTO`: the destination is a directory (created if absent) receiving the sources under
    /// their names.
    Into,
    /// `FLAG_AS`: the single source becomes the destination (its parent is the target).
    As,
}

impl Placement {
    /// The placement `Begin.flags` asks for (the decoder has refused both bits together).
    pub fn of_flags(flags: u32) -> Placement {
        if flags & FLAG_INTO != 0 {
            Placement::Into
        } else if flags & FLAG_AS != 0 {
            Placement::As
        } else {
            Placement::Cp
        }
    }

    /// The `Begin.flags` bit for this placement.
    pub fn flag(self) -> u32 {
        match self {
            Placement::Cp => 0,
            Placement::Into => FLAG_INTO,
            Placement::As => FLAG_AS,
        }
    }
}

/// A modification time: seconds since the epoch and nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Time {
    /// Seconds since 1970-01-01 UTC (may be negative).
    pub sec: i64,
    /// Nanoseconds, below 1e9.
    pub nsec: u32,
}

/// The owner of an entry: the sender's numeric user and group ids. Always on the wire in `Dir`,
/// `Link`, `FileStart` (and so `Offer`) and `Special`; meaningful only with [`FLAG_OWNER`] /
/// [`FLAG_GROUP`] (a sender without them sends zeros, and a receiver ignores them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Owner {
    /// User id on the sender.
    pub uid: u32,
    /// Group id on the sender.
    pub gid: u32,
}

/// What a `Special` entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecialKind {
    /// A named pipe (1).
    Fifo,
    /// A Unix-domain socket node (2).
    Socket,
    /// A character device (3), with its device number.
    Char,
    /// A block device (4), with its device number.
    Block,
}

impl SpecialKind {
    /// The wire byte.
    pub fn byte(self) -> u8 {
        match self {
            SpecialKind::Fifo => 1,
            SpecialKind::Socket => 2,
            SpecialKind::Char => 3,
            SpecialKind::Block => 4,
        }
    }
    /// The kind of wire byte `b`, if any.
    pub fn of_byte(b: u8) -> Option<SpecialKind> {
        Some(match b {
            1 => SpecialKind::Fifo,
            2 => SpecialKind::Socket,
            3 => SpecialKind::Char,
            4 => SpecialKind::Block,
            _ => return None,
        })
    }
    /// True for the two device kinds (their device number matters).
    pub fn is_device(self) -> bool {
        matches!(self, SpecialKind::Char | SpecialKind::Block)
    }
}

/// A device node, FIFO or socket (only with [`FLAG_DEVICES`]): recreated, never opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecialEntry<'a> {
    /// Parent directory id.
    pub parent: u64,
    /// Name.
    pub name: &'a [u8],
    /// What it is.
    pub kind: SpecialKind,
    /// Device number, major part (0 for a FIFO or socket).
    pub major: u32,
    /// Device number, minor part (0 for a FIFO or socket).
    pub minor: u32,
    /// Permission bits.
    pub mode: u32,
    /// Modification time.
    pub mtime: Time,
    /// Owner (with the owner flags).
    pub owner: Owner,
}

/// Whether an [`IdName`] names a user or a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IdKind {
    /// A user id (1).
    User,
    /// A group id (2).
    Group,
}

/// Sender → receiver, on the stream of the entry that uses the id, before it (rsync's id lists):
/// the name of a user or group id, so the receiver can map it to its own id of that name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdName<'a> {
    /// User or group.
    pub kind: IdKind,
    /// The sender's id.
    pub id: u32,
    /// Its name on the sender (checked by [`crate::name::validate_id_name`] before use).
    pub name: &'a [u8],
}

/// Client → server, first frame on the control stream: what to copy where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Begin<'a> {
    /// Destination path relative to the server's root.
    pub dest: &'a [u8],
    /// How many source roots follow (cp semantics: more than one needs a directory).
    pub sources: u32,
    /// Chunk size for large files, a power of two in [MIN_CHUNK, MAX_CHUNK].
    pub chunk_size: u32,
    /// `FLAG_*` bits.
    pub flags: u32,
    /// Number of data streams the client will open besides control.
    pub streams: u16,
    /// `--modify-window`: seconds within which two modification times count as equal in the
    /// receiver's up-to-date check (0: equal to the nanosecond); at most
    /// [`crate::caps::MAX_MODIFY_WINDOW`].
    pub modify_window: u32,
}

/// A directory to create (or merge into) under `parent`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry<'a> {
    /// New directory id (never 0, which is the destination itself).
    pub id: u64,
    /// Parent directory id.
    pub parent: u64,
    /// Name, one validated component.
    pub name: &'a [u8],
    /// Permission bits.
    pub mode: u32,
    /// Modification time, applied after its contents are written.
    pub mtime: Time,
    /// Owner (with the owner flags), applied with its mode.
    pub owner: Owner,
}

/// A symbolic link, recreated verbatim and never followed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkEntry<'a> {
    /// Parent directory id.
    pub parent: u64,
    /// Name.
    pub name: &'a [u8],
    /// Link target, stored as sent.
    pub target: &'a [u8],
    /// Modification time of the link itself.
    pub mtime: Time,
    /// Owner of the link itself (with the owner flags).
    pub owner: Owner,
}

/// A regular file whose chunks follow on any stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileStart<'a> {
    /// File id, unique in the session.
    pub id: u64,
    /// Parent directory id.
    pub parent: u64,
    /// Name.
    pub name: &'a [u8],
    /// Exact size in bytes.
    pub size: u64,
    /// Permission bits.
    pub mode: u32,
    /// Modification time.
    pub mtime: Time,
    /// Owner (with the owner flags).
    pub owner: Owner,
}

/// `HardLink.kind`: file `file` has further names to come: the receiver keeps where it lands.
/// Sent before the file's `FileStart` (on the same stream) or `Offer`.
pub const LINK_TARGET: u8 = 0;
/// `HardLink.kind`: `name` in `parent` is another name of file `file`.
pub const LINK_NAME: u8 = 1;

/// `-H`: a file's further name, or the announcement that a file will have some.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HardLink<'a> {
    /// [`LINK_TARGET`] or [`LINK_NAME`].
    pub kind: u8,
    /// The file id of the first name (a file of this session, announced with [`LINK_TARGET`]).
    pub file: u64,
    /// Parent directory id of the new name (0 with [`LINK_TARGET`]).
    pub parent: u64,
    /// The new name (empty with [`LINK_TARGET`]).
    pub name: &'a [u8],
}

/// `-S`: whole chunks of a file that are a hole at the source: nothing to write, they count as
/// received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hole {
    /// File id.
    pub file: u64,
    /// Offset, a multiple of the session's chunk size.
    pub offset: u64,
    /// Length: whole chunks, the last of which may end at the end of the file.
    pub len: u64,
}

/// File data at a chunk-aligned offset. Its `Debug` shows the length of the data, not the data.
#[derive(Clone, PartialEq, Eq)]
pub struct Chunk<'a> {
    /// File id.
    pub file: u64,
    /// Offset, a multiple of the session's chunk size.
    pub offset: u64,
    /// The bytes.
    pub data: &'a [u8],
}

/// All chunks of a file have been sent and the source was unchanged after reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEnd {
    /// File id.
    pub file: u64,
    /// Size read, which must equal the declared size.
    pub size: u64,
    /// BLAKE3 of the whole file, when `FLAG_VERIFY` is set.
    pub digest: Option<[u8; 32]>,
}

/// The sender gives up on a file (unreadable, or changed while read); the receiver discards it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileAbort<'a> {
    /// File id.
    pub file: u64,
    /// Why.
    pub code: u16,
    /// Human-readable detail.
    pub message: &'a [u8],
}

/// Client → server on the control stream after every stream has sent `End`: totals to check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Finish {
    /// Files sent completely.
    pub files: u64,
    /// File bytes sent.
    pub bytes: u64,
    /// Directories sent.
    pub dirs: u64,
    /// Symlinks sent.
    pub links: u64,
}

/// Server → client: one entry failed on the receiver; the session goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorReport<'a> {
    /// An [`crate::ErrorCode`].
    pub code: u16,
    /// Path of the entry relative to the destination.
    pub path: &'a [u8],
    /// Human-readable detail.
    pub message: &'a [u8],
}

/// Server → client, last frame of a session: what was committed and what it cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Summary {
    /// Files committed under their final names.
    pub files: u64,
    /// Bytes in those files.
    pub bytes: u64,
    /// Directories created or merged.
    pub dirs: u64,
    /// Symlinks created.
    pub links: u64,
    /// Entries that failed.
    pub errors: u64,
    /// Receiver CPU time in user mode, microseconds.
    pub cpu_user_us: u64,
    /// Receiver CPU time in kernel mode, microseconds.
    pub cpu_sys_us: u64,
    /// Receiver peak resident memory, bytes.
    pub peak_rss: u64,
}

/// Server → client: the session is over because of this error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fatal<'a> {
    /// An [`crate::ErrorCode`].
    pub code: u16,
    /// Human-readable detail.
    pub message: &'a [u8],
}

/// Client → server, right after a `Begin` with `FLAG_PULL`: the tree to send, relative to the
/// server's root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pull<'a> {
    /// Source path on the server.
    pub path: &'a [u8],
    /// Name the source gets at the client's destination.
    pub name: &'a [u8],
}

/// Sender → receiver on the control stream (sync sessions): a regular file, declared as by
/// `FileStart`; no chunk of it is sent before the receiver's `Want`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer<'a> {
    /// The file as `FileStart` would declare it.
    pub file: FileStart<'a>,
    /// BLAKE3 of the source, with `FLAG_CHECKSUM`.
    pub digest: Option<[u8; 32]>,
}

/// Receiver → sender on the control stream: what to send of an offered file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Want<'a> {
    /// File id of the offer.
    pub file: u64,
    /// One of the `WANT_*` verdicts.
    pub verdict: u8,
    /// With [`WANT_MISSING`]: chunk ranges the receiver already holds, verified.
    pub have: Ranges<'a>,
}

/// `Want.verdict`: the destination is up to date; nothing is sent, the file is complete.
pub const WANT_NONE: u8 = 0;
/// `Want.verdict`: send every chunk.
pub const WANT_ALL: u8 = 1;
/// `Want.verdict`: send every chunk not in `have` (a resumed transfer).
pub const WANT_MISSING: u8 = 2;
/// `Want.verdict`: the receiver cannot take this file (reported in an `Error`); nothing is sent.
pub const WANT_REFUSED: u8 = 3;

/// Encoded `(first chunk, count)` ranges: `count: u16`, then 16 bytes per range.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct Ranges<'a>(&'a [u8]);

impl<'a> Ranges<'a> {
    /// Encode `ranges` (at most [`crate::caps::MAX_WANT_RANGES`] are kept) into `out`, which the
    /// returned value borrows.
    pub fn encode(ranges: &[(u64, u64)], out: &'a mut Vec<u8>) -> Ranges<'a> {
        out.clear();
        for (first, count) in ranges.iter().take(crate::caps::MAX_WANT_RANGES) {
            out.extend_from_slice(&first.to_be_bytes());
            out.extend_from_slice(&count.to_be_bytes());
        }
        Ranges(out)
    }
    /// Ranges already encoded by [`Ranges::encode`] (a whole number of 16-byte ranges).
    pub fn from_encoded(b: &'a [u8]) -> Ranges<'a> {
        Ranges(&b[..b.len() / 16 * 16])
    }
    /// The ranges, in order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + 'a {
        self.0.chunks_exact(16).map(|c| {
            let (a, b) = c.split_at(8);
            (u64::from_be_bytes(a.try_into().unwrap_or_default()), u64::from_be_bytes(b.try_into().unwrap_or_default()))
        })
    }
    /// Number of ranges.
    pub fn len(&self) -> usize {
        self.0.len() / 16
    }
    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for Ranges<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<{} ranges>", self.len())
    }
}

/// Sender → receiver on the control stream (`FLAG_DELETE`): names in source directory `dir`;
/// after the frame with `last`, the receiver deletes every other entry of that directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keep<'a> {
    /// Directory id.
    pub dir: u64,
    /// True on the directory's last `Keep`.
    pub last: bool,
    /// The names.
    pub names: Names<'a>,
}

/// Encoded names: `count: u32`, then each as `len: u16 | bytes` (validated when decoded).
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct Names<'a>(&'a [u8]);

impl<'a> Names<'a> {
    /// Encode `names` into `out`, which the returned value borrows.
    pub fn encode<N: AsRef<[u8]>>(names: &[N], out: &'a mut Vec<u8>) -> Names<'a> {
        out.clear();
        out.extend_from_slice(&(names.len() as u32).to_be_bytes());
        for n in names {
            let n = n.as_ref();
            let n = &n[..n.len().min(MAX_NAME)];
            out.extend_from_slice(&(n.len() as u16).to_be_bytes());
            out.extend_from_slice(n);
        }
        Names(out)
    }
    /// The names, in order.
    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let mut rest = self.0.get(4..).unwrap_or_default();
        std::iter::from_fn(move || {
            let (len, tail) = rest.split_first_chunk::<2>()?;
            let len = u16::from_be_bytes(*len) as usize;
            let name = tail.get(..len)?;
            rest = &tail[len..];
            Some(name)
        })
    }
    /// Number of names.
    pub fn len(&self) -> usize {
        self.0.get(..4).map_or(0, |c| u32::from_be_bytes(c.try_into().unwrap_or_default()) as usize)
    }
    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl std::fmt::Debug for Names<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<{} names>", self.len())
    }
}

/// Receiver → sender on the control stream: something the receiver did or, in a dry run, would
/// do, for the client to show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note<'a> {
    /// One of the `NOTE_*` kinds.
    pub kind: u8,
    /// Path relative to the destination.
    pub path: &'a [u8],
}

/// Client → server, in the record of `Begin` (after `Pull` in a pull), only when the user gave
/// rules: rsync's `--exclude`/`--include` rules, in order (the first match wins). A push's receiver
/// uses them to protect excluded names from `--delete`; a pull's sender skips what they exclude.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterRules<'a> {
    /// `FILTER_*` bits.
    pub flags: u8,
    /// The rules.
    pub rules: Rules<'a>,
}

/// `FilterRules.flags`: the transfer root is the source directory itself (a source named with a
/// trailing `/`): paths matched begin below it, without the root's own name.
pub const FILTER_CONTENTS: u8 = 1;
/// `FilterRules.flags`: `--delete-excluded`: the rules do not protect names from `--delete`.
pub const FILTER_DELETE_EXCLUDED: u8 = 2;
const KNOWN_FILTER_FLAGS: u8 = FILTER_CONTENTS | FILTER_DELETE_EXCLUDED;
/// A rule's kind: exclude (`- PATTERN`).
pub const RULE_EXCLUDE: u8 = 0;
/// A rule's kind: include (`+ PATTERN`).
pub const RULE_INCLUDE: u8 = 1;

/// Encoded rules: `count: u16`, then each as `kind: u8 | len: u16 | pattern` (the decoder has
/// checked the kinds, the lengths and the caps).
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct Rules<'a>(&'a [u8]);

impl<'a> Rules<'a> {
    /// Encode `rules` (`(kind, pattern)`; patterns cut at [`MAX_PATH`], at most
    /// [`MAX_FILTER_RULES`] kept) into `out`, which the returned value borrows.
    pub fn encode<P: AsRef<[u8]>>(rules: &[(u8, P)], out: &'a mut Vec<u8>) -> Rules<'a> {
        out.clear();
        let kept = &rules[..rules.len().min(MAX_FILTER_RULES)];
        out.extend_from_slice(&(kept.len() as u16).to_be_bytes());
        for (kind, p) in kept {
            let p = p.as_ref();
            let p = &p[..p.len().min(MAX_PATH)];
            out.push(*kind);
            out.extend_from_slice(&(p.len() as u16).to_be_bytes());
            out.extend_from_slice(p);
        }
        Rules(out)
    }
    /// The rules, in order: `(kind, pattern)`.
    pub fn iter(&self) -> impl Iterator<Item = (u8, &'a [u8])> + 'a {
        let mut rest = self.0.get(2..).unwrap_or_default();
        std::iter::from_fn(move || {
            let (&kind, tail) = rest.split_first()?;
            let (len, tail) = tail.split_first_chunk::<2>()?;
            let len = u16::from_be_bytes(*len) as usize;
            let pattern = tail.get(..len)?;
            rest = &tail[len..];
            Some((kind, pattern))
        })
    }
    /// Number of rules.
    pub fn len(&self) -> usize {
        self.0.get(..2).map_or(0, |c| u16::from_be_bytes([c[0], c[1]]) as usize)
    }
    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl std::fmt::Debug for Rules<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<{} rules>", self.len())
    }
}

/// `Note.kind`: deleted (`--delete`).
pub const NOTE_DELETED: u8 = 1;
/// `Note.kind`: would be deleted (`--delete --dry-run`).
pub const NOTE_WOULD_DELETE: u8 = 2;

/// An ed25519 public key and its signature over the connection's handshake hash
/// ([`crate::auth`]): the body of `HostAuth` and `ClientAuth`. Its `Debug` shows the start of the
/// key, not 100 bytes of numbers.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct KeyAuth {
    /// The signer's ed25519 public key.
    pub key: [u8; PUBLIC_KEY_LEN],
    /// The signature over [`crate::auth::signed_message`].
    pub signature: [u8; SIGNATURE_LEN],
}

/// The only key algorithm of `HostAuth` and `ClientAuth` today.
pub const KEY_ALG_ED25519: u8 = 1;

impl std::fmt::Debug for KeyAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let head = hex::encode(&self.key[..4]);
        write!(f, "KeyAuth {{ key: {head}.., signature: <64 bytes> }}")
    }
}

/// Every frame of protocol version 1. Its `Debug` is bounded (chunk data and benchmark documents
/// appear as their length), so an error message that names a peer's frame stays short.
#[derive(Clone, PartialEq, Eq)]
pub enum Frame<'a> {
    /// 0x01
    Begin(Begin<'a>),
    /// 0x02
    Dir(DirEntry<'a>),
    /// 0x03
    Link(LinkEntry<'a>),
    /// 0x04
    FileStart(FileStart<'a>),
    /// 0x05
    Chunk(Chunk<'a>),
    /// 0x06
    FileEnd(FileEnd),
    /// 0x07
    FileAbort(FileAbort<'a>),
    /// 0x08: this stream carries nothing more from the client.
    End,
    /// 0x09
    Finish(Finish),
    /// 0x81: server → client answer to `Begin`: for a push, whether the sources go into the
    /// destination directory; for a pull, whether the requested source is a directory.
    Target {
        /// A push: true when sources go *into* the destination directory under their own names.
        /// A pull: true when the source is a directory (the client places it by the rsync rule).
        dest_is_dir: bool,
    },
    /// 0x82
    Error(ErrorReport<'a>),
    /// 0x83
    Summary(Summary),
    /// 0x84
    Fatal(Fatal<'a>),
    /// 0x0A: client → server after `Begin` with `FLAG_PULL`.
    Pull(Pull<'a>),
    /// 0x0B: sender → receiver, control stream, sync sessions.
    Offer(Offer<'a>),
    /// 0x0C: sender → receiver, control stream, `FLAG_DELETE`.
    Keep(Keep<'a>),
    /// 0x0D: sender → receiver, data stream, `FLAG_DEVICES`: a device, FIFO or socket.
    Special(SpecialEntry<'a>),
    /// 0x0E: sender → receiver, any stream, owner flags without `FLAG_NUMERIC_IDS`: an id's name.
    IdName(IdName<'a>),
    /// 0x85: receiver → sender, control stream: the answer to an `Offer`.
    Want(Want<'a>),
    /// 0x86: receiver → sender, control stream.
    Note(Note<'a>),
    /// 0x10: client → server, first frame of a benchmark session or the next test in it: the
    /// test as a JSON [`crate::bench::TestSpec`] (at most [`crate::caps::MAX_BENCH_DOC`] bytes).
    BenchRequest(&'a [u8]),
    /// 0x11: client → server: every data connection is up, start now. The server answers with
    /// its own `BenchGo` once its side runs.
    BenchGo,
    /// 0x12: client → server: the test's time is over; stop and send the results.
    BenchStop,
    /// 0x13: client → server on a public-key control connection, right after `HostAuth`
    /// checked out: the client's key and its signature. `Begin` (or `BenchRequest`) follows.
    ClientAuth(KeyAuth),
    /// 0x87: server → client, first record of a public-key control connection: the host key and
    /// its signature.
    HostAuth(KeyAuth),
    /// 0x90: server → client: the test is admitted; JSON [`crate::bench::Ready`].
    BenchReady(&'a [u8]),
    /// 0x91: server → client: the server's measurements; JSON [`crate::bench::SideReport`].
    BenchResult(&'a [u8]),
    /// 0x14: controller → agent, the only request of a mesh session: run a test against another
    /// agent; JSON [`crate::mesh::MeshTask`].
    MeshRequest(&'a [u8]),
    /// 0x94: agent → controller: how the test went; JSON [`crate::mesh::MeshReport`].
    MeshResult(&'a [u8]),
    /// 0x15: client → server, in the record of `Begin` (and `Pull`): `--exclude`/`--include`.
    Filter(FilterRules<'a>),
    /// 0x0F: sender → receiver (`FLAG_HARD_LINKS`): on a data stream, or on the control stream
    /// in a sync session.
    HardLink(HardLink<'a>),
    /// 0x17: sender → receiver, data stream (`FLAG_SPARSE`).
    Hole(Hole),
}

impl std::fmt::Debug for Chunk<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chunk")
            .field("file", &self.file)
            .field("offset", &self.offset)
            .field("len", &self.data.len())
            .finish()
    }
}

impl std::fmt::Debug for Frame<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let doc = |f: &mut std::fmt::Formatter<'_>, name: &str, d: &[u8]| write!(f, "{name}(<{} bytes>)", d.len());
        match self {
            Frame::Begin(b) => b.fmt(f),
            Frame::Dir(d) => d.fmt(f),
            Frame::Link(l) => l.fmt(f),
            Frame::FileStart(s) => s.fmt(f),
            Frame::Chunk(c) => c.fmt(f),
            Frame::FileEnd(e) => e.fmt(f),
            Frame::FileAbort(a) => a.fmt(f),
            Frame::End => f.write_str("End"),
            Frame::Finish(x) => x.fmt(f),
            Frame::Target { dest_is_dir } => f.debug_struct("Target").field("dest_is_dir", dest_is_dir).finish(),
            Frame::Error(e) => e.fmt(f),
            Frame::Summary(s) => s.fmt(f),
            Frame::Fatal(x) => x.fmt(f),
            Frame::Pull(p) => p.fmt(f),
            Frame::Offer(o) => o.fmt(f),
            Frame::Keep(k) => k.fmt(f),
            Frame::Special(x) => x.fmt(f),
            Frame::IdName(x) => x.fmt(f),
            Frame::Want(w) => w.fmt(f),
            Frame::Note(n) => n.fmt(f),
            Frame::BenchRequest(d) => doc(f, "BenchRequest", d),
            Frame::BenchGo => f.write_str("BenchGo"),
            Frame::BenchStop => f.write_str("BenchStop"),
            Frame::BenchReady(d) => doc(f, "BenchReady", d),
            Frame::BenchResult(d) => doc(f, "BenchResult", d),
            Frame::MeshRequest(d) => doc(f, "MeshRequest", d),
            Frame::MeshResult(d) => doc(f, "MeshResult", d),
            Frame::ClientAuth(a) => write!(f, "ClientAuth({a:?})"),
            Frame::HostAuth(a) => write!(f, "HostAuth({a:?})"),
            Frame::Filter(r) => r.fmt(f),
            Frame::HardLink(l) => l.fmt(f),
            Frame::Hole(h) => h.fmt(f),
        }
    }
}

mod ty {
    pub const BEGIN: u8 = 0x01;
    pub const DIR: u8 = 0x02;
    pub const LINK: u8 = 0x03;
    pub const FILE_START: u8 = 0x04;
    pub const CHUNK: u8 = 0x05;
    pub const FILE_END: u8 = 0x06;
    pub const FILE_ABORT: u8 = 0x07;
    pub const END: u8 = 0x08;
    pub const FINISH: u8 = 0x09;
    pub const TARGET: u8 = 0x81;
    pub const ERROR: u8 = 0x82;
    pub const SUMMARY: u8 = 0x83;
    pub const FATAL: u8 = 0x84;
    pub const PULL: u8 = 0x0A;
    pub const OFFER: u8 = 0x0B;
    pub const KEEP: u8 = 0x0C;
    pub const SPECIAL: u8 = 0x0D;
    pub const ID_NAME: u8 = 0x0E;
    pub const WANT: u8 = 0x85;
    pub const NOTE: u8 = 0x86;
    pub const BENCH_REQUEST: u8 = 0x10;
    pub const BENCH_GO: u8 = 0x11;
    pub const BENCH_STOP: u8 = 0x12;
    pub const BENCH_READY: u8 = 0x90;
    pub const BENCH_RESULT: u8 = 0x91;
    pub const CLIENT_AUTH: u8 = 0x13;
    pub const HOST_AUTH: u8 = 0x87;
    pub const MESH_REQUEST: u8 = 0x14;
    pub const MESH_RESULT: u8 = 0x94;
    pub const FILTER: u8 = 0x15;
    pub const HARD_LINK: u8 = 0x0F;
    pub const HOLE: u8 = 0x17;
}

struct W<'a>(&'a mut Vec<u8>);
impl W<'_> {
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn time(&mut self, t: Time) -> &mut Self {
        self.u64(t.sec as u64).u32(t.nsec)
    }
    fn owner(&mut self, o: Owner) -> &mut Self {
        self.u32(o.uid).u32(o.gid)
    }
    /// A u16-length-prefixed byte string, truncated at `cap` (only our own messages can be long).
    fn bytes(&mut self, b: &[u8], cap: usize) -> &mut Self {
        let b = &b[..b.len().min(cap)];
        self.u16(b.len() as u16);
        self.0.extend_from_slice(b);
        self
    }
}

struct R<'a> {
    b: &'a [u8],
    what: &'static str,
}
impl<'a> R<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtoError> {
        if self.b.len() < n {
            return Err(ProtoError::Truncated(self.what));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn u8(&mut self) -> Result<u8, ProtoError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, ProtoError> {
        Ok(u16::from_be_bytes(self.take(2)?.try_into().map_err(|_| ProtoError::Truncated(self.what))?))
    }
    fn u32(&mut self) -> Result<u32, ProtoError> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().map_err(|_| ProtoError::Truncated(self.what))?))
    }
    fn u64(&mut self) -> Result<u64, ProtoError> {
        Ok(u64::from_be_bytes(self.take(8)?.try_into().map_err(|_| ProtoError::Truncated(self.what))?))
    }
    fn time(&mut self) -> Result<Time, ProtoError> {
        let sec = self.u64()? as i64;
        let nsec = self.u32()?;
        if nsec >= 1_000_000_000 {
            return Err(ProtoError::Invalid("nanoseconds"));
        }
        Ok(Time { sec, nsec })
    }
    fn owner(&mut self) -> Result<Owner, ProtoError> {
        Ok(Owner { uid: self.u32()?, gid: self.u32()? })
    }
    fn bytes(&mut self, cap: usize, what: &'static str) -> Result<&'a [u8], ProtoError> {
        let len = self.u16()? as usize;
        if len > cap {
            return Err(ProtoError::TooLong { what, len: len as u64, cap: cap as u64 });
        }
        self.take(len)
    }
    fn done(&self) -> Result<(), ProtoError> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(ProtoError::Invalid("trailing bytes in frame"))
        }
    }
}

/// `len` of `what`, refused when over `cap`.
fn within_cap(what: &'static str, len: usize, cap: usize) -> Result<(), ProtoError> {
    if len > cap {
        return Err(ProtoError::TooLong { what, len: len as u64, cap: cap as u64 });
    }
    Ok(())
}

fn begin_frame(buf: &mut Vec<u8>, ty: u8) -> usize {
    buf.push(ty);
    buf.extend_from_slice(&[0; 4]);
    buf.len()
}

fn end_frame(buf: &mut [u8], body_start: usize) {
    let len = (buf.len() - body_start) as u32;
    buf[body_start - 4..body_start].copy_from_slice(&len.to_be_bytes());
}

impl Frame<'_> {
    /// Append this frame to `buf`.
    pub fn encode(&self, buf: &mut Vec<u8>) {
        let ty = self.type_byte();
        let start = begin_frame(buf, ty);
        let mut w = W(buf);
        match self {
            Frame::Begin(b) => {
                w.bytes(b.dest, MAX_PATH).u32(b.sources).u32(b.chunk_size).u32(b.flags).u16(b.streams);
                w.u32(b.modify_window);
            }
            Frame::Dir(d) => {
                w.u64(d.id).u64(d.parent).bytes(d.name, MAX_NAME).u32(d.mode).time(d.mtime).owner(d.owner);
            }
            Frame::Link(l) => {
                w.u64(l.parent).bytes(l.name, MAX_NAME).bytes(l.target, MAX_PATH).time(l.mtime).owner(l.owner);
            }
            Frame::FileStart(f) => {
                w.u64(f.id).u64(f.parent).bytes(f.name, MAX_NAME).u64(f.size).u32(f.mode).time(f.mtime).owner(f.owner);
            }
            Frame::Chunk(c) => {
                w.u64(c.file).u64(c.offset);
                w.0.extend_from_slice(c.data);
            }
            Frame::FileEnd(e) => {
                w.u64(e.file).u64(e.size);
                match e.digest {
                    Some(d) => {
                        w.u8(1);
                        w.0.extend_from_slice(&d);
                    }
                    None => {
                        w.u8(0);
                    }
                }
            }
            Frame::FileAbort(a) => {
                w.u64(a.file).u16(a.code).bytes(a.message, MAX_MESSAGE);
            }
            Frame::End => {}
            Frame::Finish(f) => {
                w.u64(f.files).u64(f.bytes).u64(f.dirs).u64(f.links);
            }
            Frame::Target { dest_is_dir } => {
                w.u8(*dest_is_dir as u8);
            }
            Frame::Error(e) => {
                w.u16(e.code).bytes(e.path, MAX_PATH).bytes(e.message, MAX_MESSAGE);
            }
            Frame::Summary(s) => {
                w.u64(s.files).u64(s.bytes).u64(s.dirs).u64(s.links).u64(s.errors);
                w.u64(s.cpu_user_us).u64(s.cpu_sys_us).u64(s.peak_rss);
            }
            Frame::Fatal(f) => {
                w.u16(f.code).bytes(f.message, MAX_MESSAGE);
            }
            Frame::Pull(p) => {
                w.bytes(p.path, MAX_PATH).bytes(p.name, MAX_NAME);
            }
            Frame::Offer(o) => {
                let f = &o.file;
                w.u64(f.id).u64(f.parent).bytes(f.name, MAX_NAME).u64(f.size).u32(f.mode).time(f.mtime).owner(f.owner);
                match o.digest {
                    Some(d) => {
                        w.u8(1);
                        w.0.extend_from_slice(&d);
                    }
                    None => {
                        w.u8(0);
                    }
                }
            }
            Frame::Keep(k) => {
                w.u64(k.dir).u8(k.last as u8);
                w.0.extend_from_slice(k.names.0);
            }
            Frame::Special(x) => {
                w.u64(x.parent).bytes(x.name, MAX_NAME).u8(x.kind.byte()).u32(x.major).u32(x.minor);
                w.u32(x.mode).time(x.mtime).owner(x.owner);
            }
            Frame::IdName(x) => {
                let kind = match x.kind {
                    IdKind::User => 1,
                    IdKind::Group => 2,
                };
                w.u8(kind).u32(x.id).bytes(x.name, MAX_ID_NAME);
            }
            Frame::Want(x) => {
                w.u64(x.file).u8(x.verdict).u16(x.have.len() as u16);
                w.0.extend_from_slice(x.have.0);
            }
            Frame::Note(n) => {
                w.u8(n.kind).bytes(n.path, MAX_PATH);
            }
            Frame::BenchRequest(d)
            | Frame::BenchReady(d)
            | Frame::BenchResult(d)
            | Frame::MeshRequest(d)
            | Frame::MeshResult(d) => {
                // Only our own documents are encoded; an oversize one is a bug the peer refuses.
                w.0.extend_from_slice(d);
            }
            Frame::BenchGo | Frame::BenchStop => {}
            Frame::HardLink(l) => {
                w.u8(l.kind).u64(l.file).u64(l.parent).bytes(l.name, MAX_NAME);
            }
            Frame::Hole(h) => {
                w.u64(h.file).u64(h.offset).u64(h.len);
            }
            Frame::ClientAuth(a) | Frame::HostAuth(a) => {
                w.u8(KEY_ALG_ED25519);
                w.0.extend_from_slice(&a.key);
                w.0.extend_from_slice(&a.signature);
            }
            Frame::Filter(r) => {
                w.u8(r.flags);
                w.0.extend_from_slice(r.rules.0);
            }
        }
        end_frame(buf, start);
    }

    fn type_byte(&self) -> u8 {
        match self {
            Frame::Begin(_) => ty::BEGIN,
            Frame::Dir(_) => ty::DIR,
            Frame::Link(_) => ty::LINK,
            Frame::FileStart(_) => ty::FILE_START,
            Frame::Chunk(_) => ty::CHUNK,
            Frame::FileEnd(_) => ty::FILE_END,
            Frame::FileAbort(_) => ty::FILE_ABORT,
            Frame::End => ty::END,
            Frame::Finish(_) => ty::FINISH,
            Frame::Target { .. } => ty::TARGET,
            Frame::Error(_) => ty::ERROR,
            Frame::Summary(_) => ty::SUMMARY,
            Frame::Fatal(_) => ty::FATAL,
            Frame::Pull(_) => ty::PULL,
            Frame::Offer(_) => ty::OFFER,
            Frame::Keep(_) => ty::KEEP,
            Frame::Special(_) => ty::SPECIAL,
            Frame::IdName(_) => ty::ID_NAME,
            Frame::Want(_) => ty::WANT,
            Frame::Note(_) => ty::NOTE,
            Frame::BenchRequest(_) => ty::BENCH_REQUEST,
            Frame::BenchGo => ty::BENCH_GO,
            Frame::BenchStop => ty::BENCH_STOP,
            Frame::BenchReady(_) => ty::BENCH_READY,
            Frame::BenchResult(_) => ty::BENCH_RESULT,
            Frame::MeshRequest(_) => ty::MESH_REQUEST,
            Frame::MeshResult(_) => ty::MESH_RESULT,
            Frame::ClientAuth(_) => ty::CLIENT_AUTH,
            Frame::HostAuth(_) => ty::HOST_AUTH,
            Frame::Filter(_) => ty::FILTER,
            Frame::HardLink(_) => ty::HARD_LINK,
            Frame::Hole(_) => ty::HOLE,
        }
    }
}

/// Append a chunk frame's header for `data_len` bytes of data; the caller appends the data itself
/// (read straight from the file into the record buffer, with no copy).
pub fn encode_chunk_header(buf: &mut Vec<u8>, file: u64, offset: u64, data_len: usize) {
    buf.push(ty::CHUNK);
    buf.extend_from_slice(&((16 + data_len) as u32).to_be_bytes());
    buf.extend_from_slice(&file.to_be_bytes());
    buf.extend_from_slice(&offset.to_be_bytes());
}

/// Decode the first frame of `buf`; returns it and the number of bytes it used.
pub fn decode(buf: &[u8]) -> Result<(Frame<'_>, usize), ProtoError> {
    let mut head = R { b: buf, what: "frame header" };
    let t = head.u8()?;
    let len = head.u32()? as usize;
    let body = head.take(len).map_err(|_| ProtoError::Truncated("frame body"))?;
    let mut r = R { b: body, what: "frame body" };
    let frame = match t {
        ty::BEGIN => {
            let dest = r.bytes(MAX_PATH, "destination path")?;
            let sources = r.u32()?;
            let chunk_size = r.u32()?;
            let flags = r.u32()?;
            let streams = r.u16()?;
            let modify_window = r.u32()?;
            if modify_window > MAX_MODIFY_WINDOW {
                return Err(ProtoError::Invalid("modify window"));
            }
            if !chunk_size.is_power_of_two() || !(MIN_CHUNK..=MAX_CHUNK).contains(&chunk_size) {
                return Err(ProtoError::Invalid("chunk size"));
            }
            if flags & !KNOWN_FLAGS != 0 {
                return Err(ProtoError::Invalid("unknown flags"));
            }
            if flags & (FLAG_INTO | FLAG_AS) == FLAG_INTO | FLAG_AS {
                return Err(ProtoError::Invalid("both placement flags"));
            }
            Frame::Begin(Begin { dest, sources, chunk_size, flags, streams, modify_window })
        }
        ty::DIR => Frame::Dir(DirEntry {
            id: r.u64()?,
            parent: r.u64()?,
            name: r.bytes(MAX_NAME, "name")?,
            mode: r.u32()?,
            mtime: r.time()?,
            owner: r.owner()?,
        }),
        ty::LINK => Frame::Link(LinkEntry {
            parent: r.u64()?,
            name: r.bytes(MAX_NAME, "name")?,
            target: r.bytes(MAX_PATH, "link target")?,
            mtime: r.time()?,
            owner: r.owner()?,
        }),
        ty::FILE_START => Frame::FileStart(FileStart {
            id: r.u64()?,
            parent: r.u64()?,
            name: r.bytes(MAX_NAME, "name")?,
            size: r.u64()?,
            mode: r.u32()?,
            mtime: r.time()?,
            owner: r.owner()?,
        }),
        ty::CHUNK => {
            let file = r.u64()?;
            let offset = r.u64()?;
            let data = r.take(r.b.len())?;
            Frame::Chunk(Chunk { file, offset, data })
        }
        ty::FILE_END => {
            let file = r.u64()?;
            let size = r.u64()?;
            let digest = match r.u8()? {
                0 => None,
                1 => Some(r.take(32)?.try_into().map_err(|_| ProtoError::Truncated("digest"))?),
                _ => return Err(ProtoError::Invalid("digest flag")),
            };
            Frame::FileEnd(FileEnd { file, size, digest })
        }
        ty::FILE_ABORT => {
            Frame::FileAbort(FileAbort { file: r.u64()?, code: r.u16()?, message: r.bytes(MAX_MESSAGE, "message")? })
        }
        ty::END => Frame::End,
        ty::FINISH => Frame::Finish(Finish { files: r.u64()?, bytes: r.u64()?, dirs: r.u64()?, links: r.u64()? }),
        ty::TARGET => Frame::Target {
            dest_is_dir: match r.u8()? {
                0 => false,
                1 => true,
                _ => return Err(ProtoError::Invalid("target flag")),
            },
        },
        ty::ERROR => Frame::Error(ErrorReport {
            code: r.u16()?,
            path: r.bytes(MAX_PATH, "path")?,
            message: r.bytes(MAX_MESSAGE, "message")?,
        }),
        ty::SUMMARY => Frame::Summary(Summary {
            files: r.u64()?,
            bytes: r.u64()?,
            dirs: r.u64()?,
            links: r.u64()?,
            errors: r.u64()?,
            cpu_user_us: r.u64()?,
            cpu_sys_us: r.u64()?,
            peak_rss: r.u64()?,
        }),
        ty::FATAL => Frame::Fatal(Fatal { code: r.u16()?, message: r.bytes(MAX_MESSAGE, "message")? }),
        ty::MESH_REQUEST | ty::MESH_RESULT => {
            within_cap("mesh document", len, crate::caps::MAX_MESH_DOC)?;
            let doc = r.take(len)?;
            if t == ty::MESH_REQUEST {
                Frame::MeshRequest(doc)
            } else {
                Frame::MeshResult(doc)
            }
        }
        ty::BENCH_REQUEST | ty::BENCH_READY | ty::BENCH_RESULT => {
            within_cap("benchmark document", len, MAX_BENCH_DOC)?;
            let doc = r.take(len)?;
            match t {
                ty::BENCH_REQUEST => Frame::BenchRequest(doc),
                ty::BENCH_READY => Frame::BenchReady(doc),
                _ => Frame::BenchResult(doc),
            }
        }
        ty::PULL => Frame::Pull(Pull { path: r.bytes(MAX_PATH, "pull path")?, name: r.bytes(MAX_NAME, "name")? }),
        ty::OFFER => {
            let file = FileStart {
                id: r.u64()?,
                parent: r.u64()?,
                name: r.bytes(MAX_NAME, "name")?,
                size: r.u64()?,
                mode: r.u32()?,
                mtime: r.time()?,
                owner: r.owner()?,
            };
            let digest = match r.u8()? {
                0 => None,
                1 => Some(r.take(32)?.try_into().map_err(|_| ProtoError::Truncated("digest"))?),
                _ => return Err(ProtoError::Invalid("digest flag")),
            };
            Frame::Offer(Offer { file, digest })
        }
        ty::KEEP => {
            let dir = r.u64()?;
            let last = match r.u8()? {
                0 => false,
                1 => true,
                _ => return Err(ProtoError::Invalid("last flag")),
            };
            let all = r.b;
            let count = r.u32()? as usize;
            within_cap("names in Keep", count, MAX_KEEP_NAMES)?;
            for _ in 0..count {
                r.bytes(MAX_NAME, "name")?;
            }
            let used = all.len() - r.b.len();
            Frame::Keep(Keep { dir, last, names: Names(&all[..used]) })
        }
        ty::SPECIAL => {
            let parent = r.u64()?;
            let name = r.bytes(MAX_NAME, "name")?;
            let kind = SpecialKind::of_byte(r.u8()?).ok_or(ProtoError::Invalid("special file kind"))?;
            let (major, minor) = (r.u32()?, r.u32()?);
            let (mode, mtime, owner) = (r.u32()?, r.time()?, r.owner()?);
            Frame::Special(SpecialEntry { parent, name, kind, major, minor, mode, mtime, owner })
        }
        ty::ID_NAME => {
            let kind = match r.u8()? {
                1 => IdKind::User,
                2 => IdKind::Group,
                _ => return Err(ProtoError::Invalid("id kind")),
            };
            Frame::IdName(IdName { kind, id: r.u32()?, name: r.bytes(MAX_ID_NAME, "user or group name")? })
        }
        ty::WANT => {
            let file = r.u64()?;
            let verdict = r.u8()?;
            if verdict > WANT_REFUSED {
                return Err(ProtoError::Invalid("want verdict"));
            }
            let count = r.u16()? as usize;
            within_cap("ranges in Want", count, MAX_WANT_RANGES)?;
            let have = Ranges(r.take(count * 16)?);
            Frame::Want(Want { file, verdict, have })
        }
        ty::NOTE => Frame::Note(Note { kind: r.u8()?, path: r.bytes(MAX_PATH, "path")? }),
        ty::HARD_LINK => {
            let l = HardLink { kind: r.u8()?, file: r.u64()?, parent: r.u64()?, name: r.bytes(MAX_NAME, "name")? };
            match l.kind {
                LINK_TARGET if l.parent != 0 || !l.name.is_empty() => {
                    return Err(ProtoError::Invalid("hard link announcement with a name"))
                }
                LINK_TARGET | LINK_NAME => {}
                _ => return Err(ProtoError::Invalid("hard link kind")),
            }
            Frame::HardLink(l)
        }
        ty::HOLE => Frame::Hole(Hole { file: r.u64()?, offset: r.u64()?, len: r.u64()? }),
        ty::BENCH_GO => Frame::BenchGo,
        ty::BENCH_STOP => Frame::BenchStop,
        ty::CLIENT_AUTH | ty::HOST_AUTH => {
            // Fixed size: algorithm, key and signature of exactly their lengths; anything else
            // is truncated or has trailing bytes.
            if r.u8()? != KEY_ALG_ED25519 {
                return Err(ProtoError::Invalid("key algorithm"));
            }
            let key = r.take(PUBLIC_KEY_LEN)?.try_into().map_err(|_| ProtoError::Truncated("public key"))?;
            let signature = r.take(SIGNATURE_LEN)?.try_into().map_err(|_| ProtoError::Truncated("signature"))?;
            let a = KeyAuth { key, signature };
            if t == ty::CLIENT_AUTH {
                Frame::ClientAuth(a)
            } else {
                Frame::HostAuth(a)
            }
        }
        ty::FILTER => {
            let flags = r.u8()?;
            if flags & !KNOWN_FILTER_FLAGS != 0 {
                return Err(ProtoError::Invalid("unknown filter flags"));
            }
            let all = r.b;
            let count = r.u16()? as usize;
            within_cap("filter rules", count, MAX_FILTER_RULES)?;
            let mut total = 0usize;
            for _ in 0..count {
                if r.u8()? > RULE_INCLUDE {
                    return Err(ProtoError::Invalid("filter rule kind"));
                }
                let p = r.bytes(MAX_PATH, "filter pattern")?;
                if p.is_empty() {
                    return Err(ProtoError::Invalid("empty filter pattern"));
                }
                total += p.len();
            }
            within_cap("filter patterns", total, MAX_FILTER_BYTES)?;
            let used = all.len() - r.b.len();
            Frame::Filter(FilterRules { flags, rules: Rules(&all[..used]) })
        }
        other => return Err(ProtoError::UnknownFrame(other)),
    };
    r.done()?;
    Ok((frame, FRAME_HEADER_LEN + len))
}

/// Iterate over the frames of one record's plaintext.
pub fn frames(buf: &[u8]) -> Frames<'_> {
    Frames { buf }
}

/// Iterator returned by [`frames`]; stops after the first error.
pub struct Frames<'a> {
    buf: &'a [u8],
}

impl<'a> Iterator for Frames<'a> {
    type Item = Result<Frame<'a>, ProtoError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.buf.is_empty() {
            return None;
        }
        match decode(self.buf) {
            Ok((f, used)) => {
                self.buf = &self.buf[used..];
                Some(Ok(f))
            }
            Err(e) => {
                self.buf = &[];
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<Frame<'static>> {
        let t = Time { sec: -5, nsec: 999_999_999 };
        vec![
            Frame::Begin(Begin {
                dest: b"a/b",
                sources: 2,
                chunk_size: 1 << 20,
                flags: FLAG_VERIFY | FLAG_HARD_LINKS | FLAG_SPARSE,
                streams: 4,
                modify_window: 2,
            }),
            Frame::Dir(DirEntry { id: 1, parent: 0, name: b"d", mode: 0o755, mtime: t, owner: Default::default() }),
            Frame::Link(LinkEntry { parent: 1, name: b"l", target: b"../x", mtime: t, owner: Default::default() }),
            Frame::FileStart(FileStart {
                id: 7,
                parent: 1,
                name: b"f",
                size: 3,
                mode: 0o644,
                mtime: t,
                owner: Owner { uid: 65534, gid: u32::MAX },
            }),
            Frame::Begin(Begin {
                dest: b"",
                sources: 1,
                chunk_size: 1 << 20,
                flags: FLAG_OWNER | FLAG_GROUP | FLAG_NUMERIC_IDS | FLAG_DEVICES | FLAG_SYNC,
                streams: 1,
                modify_window: 0,
            }),
            Frame::Special(SpecialEntry {
                parent: 1,
                name: b"null",
                kind: SpecialKind::Char,
                major: 1,
                minor: 3,
                mode: 0o666,
                mtime: t,
                owner: Owner { uid: 0, gid: 5 },
            }),
            Frame::Special(SpecialEntry {
                parent: 0,
                name: b"fifo",
                kind: SpecialKind::Fifo,
                major: 0,
                minor: 0,
                mode: 0o600,
                mtime: t,
                owner: Owner::default(),
            }),
            Frame::IdName(IdName { kind: IdKind::User, id: 1000, name: b"alice" }),
            Frame::IdName(IdName { kind: IdKind::Group, id: 0, name: b"root" }),
            Frame::Chunk(Chunk { file: 7, offset: 0, data: b"abc" }),
            Frame::FileEnd(FileEnd { file: 7, size: 3, digest: Some([5; 32]) }),
            Frame::FileEnd(FileEnd { file: 7, size: 3, digest: None }),
            Frame::FileAbort(FileAbort { file: 7, code: 5, message: b"changed" }),
            Frame::End,
            Frame::Finish(Finish { files: 1, bytes: 3, dirs: 1, links: 1 }),
            Frame::Target { dest_is_dir: true },
            Frame::Error(ErrorReport { code: 3, path: b"d/f", message: b"EACCES" }),
            Frame::Summary(Summary {
                files: 1,
                bytes: 3,
                dirs: 1,
                links: 1,
                errors: 0,
                cpu_user_us: 9,
                cpu_sys_us: 8,
                peak_rss: 7,
            }),
            Frame::Fatal(Fatal { code: 9, message: b"bye" }),
            Frame::Pull(Pull { path: b"src/tree", name: b"tree" }),
            Frame::Offer(Offer {
                file: FileStart {
                    id: 8,
                    parent: 1,
                    name: b"g",
                    size: 5 << 20,
                    mode: 0o600,
                    mtime: t,
                    owner: Default::default(),
                },
                digest: Some([7; 32]),
            }),
            Frame::Offer(Offer {
                file: FileStart { id: 9, parent: 0, name: b"h", size: 0, mode: 0, mtime: t, owner: Default::default() },
                digest: None,
            }),
            Frame::Keep(Keep { dir: 1, last: true, names: Names(b"\0\0\0\x02\0\x01a\0\x02bc") }),
            Frame::Want(Want {
                file: 8,
                verdict: WANT_MISSING,
                have: Ranges(&[0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2]),
            }),
            Frame::Want(Want { file: 9, verdict: WANT_NONE, have: Ranges(&[]) }),
            Frame::Note(Note { kind: NOTE_DELETED, path: b"d/old" }),
            Frame::BenchRequest(b"{\"kind\":\"tcp-stream\"}"),
            Frame::BenchGo,
            Frame::BenchStop,
            Frame::BenchReady(b"{}"),
            Frame::BenchResult(b""),
            Frame::MeshRequest(b"{\"version\":1}"),
            Frame::MeshResult(b"{}"),
            Frame::ClientAuth(KeyAuth { key: [1; 32], signature: [2; 64] }),
            Frame::HostAuth(KeyAuth { key: [3; 32], signature: [4; 64] }),
            Frame::Filter(FilterRules { flags: FILTER_CONTENTS, rules: Rules(b"\0\x02\0\0\x04*.rs\x01\0\x02a/") }),
            Frame::Filter(FilterRules { flags: 0, rules: Rules(b"\0\0") }),
            Frame::HardLink(HardLink { kind: LINK_NAME, file: 7, parent: 1, name: b"second" }),
            Frame::HardLink(HardLink { kind: LINK_TARGET, file: 7, parent: 0, name: b"" }),
            Frame::Hole(Hole { file: 7, offset: 1 << 20, len: 3 << 20 }),
        ]
    }

    #[test]
    fn every_frame_round_trips_alone_and_batched() {
        let mut all = Vec::new();
        for f in samples() {
            let mut buf = Vec::new();
            f.encode(&mut buf);
            assert_eq!(decode(&buf), Ok((f.clone(), buf.len())));
            f.encode(&mut all);
        }
        let back: Vec<_> = frames(&all).collect::<Result<_, _>>().unwrap();
        assert_eq!(back, samples());
    }

    #[test]
    fn placement_flags_round_trip_and_never_combine() {
        for p in [Placement::Cp, Placement::Into, Placement::As] {
            assert_eq!(Placement::of_flags(p.flag() | FLAG_SYNC), p);
            let mut buf = Vec::new();
            let begin =
                Begin { dest: b"d", sources: 1, chunk_size: 1 << 20, flags: p.flag(), streams: 2, modify_window: 0 };
            Frame::Begin(begin.clone()).encode(&mut buf);
            assert_eq!(decode(&buf), Ok((Frame::Begin(begin), buf.len())));
        }
        let mut buf = Vec::new();
        let both = Begin {
            dest: b"d",
            sources: 1,
            chunk_size: 1 << 20,
            flags: FLAG_INTO | FLAG_AS,
            streams: 2,
            modify_window: 0,
        };
        Frame::Begin(both).encode(&mut buf);
        assert_eq!(decode(&buf), Err(ProtoError::Invalid("both placement flags")));
    }

    #[test]
    fn chunk_header_matches_full_encoding() {
        let mut a = Vec::new();
        Frame::Chunk(Chunk { file: 3, offset: 1 << 20, data: b"xyz" }).encode(&mut a);
        let mut b = Vec::new();
        encode_chunk_header(&mut b, 3, 1 << 20, 3);
        b.extend_from_slice(b"xyz");
        assert_eq!(a, b);
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        for f in samples() {
            let mut buf = Vec::new();
            f.encode(&mut buf);
            for cut in 0..buf.len() {
                assert!(decode(&buf[..cut]).is_err(), "{f:?} cut at {cut}");
            }
        }
    }

    #[test]
    fn debug_of_a_frame_is_bounded_whatever_its_data() {
        // Error messages name the offending frame with `{:?}`; a full chunk or benchmark document
        // must not turn into a multi-megabyte message or log line.
        let big = vec![0x1b; 8 << 20];
        for f in [
            Frame::Chunk(Chunk { file: 1, offset: 0, data: &big }),
            Frame::BenchRequest(&big),
            Frame::BenchReady(&big),
            Frame::BenchResult(&big),
            Frame::MeshResult(&big),
        ] {
            let s = format!("{f:?}");
            assert!(s.len() < 100 && s.contains("8388608"), "{s}");
            assert!(!s.contains('\x1b'));
        }
        assert_eq!(format!("{:?}", Frame::End), "End");
        assert!(format!("{:?}", samples()[1]).starts_with("DirEntry"));
    }

    #[test]
    fn names_and_ranges_encode_and_iterate() {
        let mut out = Vec::new();
        let n = Names::encode(&[b"a".as_slice(), b"bc"], &mut out);
        assert_eq!(n.len(), 2);
        assert_eq!(n.iter().collect::<Vec<_>>(), vec![b"a".as_slice(), b"bc"]);
        let mut buf = Vec::new();
        Frame::Keep(Keep { dir: 3, last: false, names: n }).encode(&mut buf);
        let Ok((Frame::Keep(k), _)) = decode(&buf) else { panic!("keep") };
        assert_eq!(k.names.iter().count(), 2);
        let mut out = Vec::new();
        let r = Ranges::encode(&[(0, 4), (9, 1)], &mut out);
        assert_eq!(r.iter().collect::<Vec<_>>(), vec![(0, 4), (9, 1)]);
    }

    #[test]
    fn rejects_keep_and_want_that_claim_more_than_they_hold() {
        // A count larger than the names present, and a count over the cap.
        let mut buf = Vec::new();
        let start = begin_frame(&mut buf, ty::KEEP);
        W(&mut buf).u64(1).u8(1).u32(3).u16(1);
        buf.push(b'a');
        end_frame(&mut buf, start);
        assert!(decode(&buf).is_err());
        let mut buf = Vec::new();
        let start = begin_frame(&mut buf, ty::KEEP);
        W(&mut buf).u64(1).u8(1).u32(MAX_KEEP_NAMES as u32 + 1);
        end_frame(&mut buf, start);
        assert!(matches!(decode(&buf), Err(ProtoError::TooLong { .. })));
        let mut buf = Vec::new();
        let start = begin_frame(&mut buf, ty::WANT);
        W(&mut buf).u64(1).u8(WANT_MISSING).u16(2).u64(0).u64(1);
        end_frame(&mut buf, start);
        assert!(decode(&buf).is_err(), "two ranges announced, one present");
        let mut buf = Vec::new();
        let start = begin_frame(&mut buf, ty::WANT);
        W(&mut buf).u64(1).u8(9).u16(0);
        end_frame(&mut buf, start);
        assert!(decode(&buf).is_err(), "unknown verdict");
    }

    #[test]
    fn filter_rules_encode_iterate_and_refuse_what_breaks_the_rules() {
        let mut out = Vec::new();
        let rules = Rules::encode(&[(RULE_EXCLUDE, b"node_modules/".as_slice()), (RULE_INCLUDE, b"*.c")], &mut out);
        assert_eq!(rules.len(), 2);
        assert_eq!(rules.iter().collect::<Vec<_>>(), vec![(RULE_EXCLUDE, b"node_modules/".as_slice()), (1, b"*.c")]);
        let f = Frame::Filter(FilterRules { flags: FILTER_DELETE_EXCLUDED, rules });
        let mut buf = Vec::new();
        f.encode(&mut buf);
        assert_eq!(decode(&buf), Ok((f, buf.len())));
        assert_eq!(
            format!("{:?}", Frame::Filter(FilterRules { flags: 0, rules })),
            "FilterRules { flags: 0, rules: <2 rules> }"
        );
        let body = |b: &mut Vec<u8>, f: &dyn Fn(&mut W)| {
            b.clear();
            let start = begin_frame(b, ty::FILTER);
            f(&mut W(b));
            end_frame(b, start);
        };
        body(&mut buf, &|w| {
            w.u8(4).u16(0);
        });
        assert_eq!(decode(&buf), Err(ProtoError::Invalid("unknown filter flags")));
        body(&mut buf, &|w| {
            w.u8(0).u16(1).u8(2).bytes(b"x", 9);
        });
        assert_eq!(decode(&buf), Err(ProtoError::Invalid("filter rule kind")));
        body(&mut buf, &|w| {
            w.u8(0).u16(1).u8(0).u16(0);
        });
        assert_eq!(decode(&buf), Err(ProtoError::Invalid("empty filter pattern")));
        body(&mut buf, &|w| {
            w.u8(0).u16(2).u8(0).bytes(b"x", 9);
        });
        assert!(matches!(decode(&buf), Err(ProtoError::Truncated(_))), "two rules announced, one present");
        body(&mut buf, &|w| {
            w.u8(0).u16(MAX_FILTER_RULES as u16 + 1);
        });
        assert!(matches!(decode(&buf), Err(ProtoError::TooLong { what: "filter rules", .. })));
        // Every pattern within MAX_PATH, but together over MAX_FILTER_BYTES.
        let n = MAX_FILTER_BYTES / MAX_PATH + 1;
        let long = vec![b'a'; MAX_PATH];
        body(&mut buf, &|w| {
            w.u8(0).u16(n as u16);
            for _ in 0..n {
                w.u8(0).bytes(&long, MAX_PATH);
            }
        });
        assert!(matches!(decode(&buf), Err(ProtoError::TooLong { what: "filter patterns", .. })));
    }

    #[test]
    fn rejects_hard_link_frames_of_unknown_kind_or_announcements_with_a_name() {
        let mut buf = Vec::new();
        Frame::HardLink(HardLink { kind: 2, file: 1, parent: 0, name: b"" }).encode(&mut buf);
        assert_eq!(decode(&buf), Err(ProtoError::Invalid("hard link kind")));
        for (parent, name) in [(1, &b""[..]), (0, b"x")] {
            let mut buf = Vec::new();
            Frame::HardLink(HardLink { kind: LINK_TARGET, file: 1, parent, name }).encode(&mut buf);
            assert_eq!(decode(&buf), Err(ProtoError::Invalid("hard link announcement with a name")));
        }
    }

    #[test]
    fn rejects_unknown_types_and_trailing_bytes() {
        assert_eq!(decode(&[0x7f, 0, 0, 0, 0]), Err(ProtoError::UnknownFrame(0x7f)));
        assert!(matches!(decode(&[ty::END, 0, 0, 0, 1, 0]), Err(ProtoError::Invalid(_))));
    }

    #[test]
    fn rejects_a_frame_length_of_all_ones_without_allocating() {
        assert!(matches!(decode(&[ty::CHUNK, 0xff, 0xff, 0xff, 0xff, 1, 2]), Err(ProtoError::Truncated(_))));
    }

    #[test]
    fn key_auth_frames_have_exact_lengths_and_a_known_algorithm() {
        for t in [ty::CLIENT_AUTH, ty::HOST_AUTH] {
            let body = |alg: u8, key: usize, sig: usize| {
                let mut buf = Vec::new();
                let start = begin_frame(&mut buf, t);
                buf.push(alg);
                buf.extend(std::iter::repeat_n(9u8, key + sig));
                end_frame(&mut buf, start);
                decode(&buf).map(|(f, _)| format!("{f:?}"))
            };
            assert!(body(1, 32, 64).unwrap().starts_with(if t == ty::HOST_AUTH { "HostAuth" } else { "ClientAuth" }));
            assert_eq!(body(2, 32, 64), Err(ProtoError::Invalid("key algorithm")));
            assert_eq!(body(0, 32, 64), Err(ProtoError::Invalid("key algorithm")));
            assert!(matches!(body(1, 32, 63), Err(ProtoError::Truncated(_))));
            assert!(matches!(body(1, 31, 0), Err(ProtoError::Truncated(_))));
            assert_eq!(body(1, 32, 65), Err(ProtoError::Invalid("trailing bytes in frame")));
            assert_eq!(body(1, 4096, 64), Err(ProtoError::Invalid("trailing bytes in frame")));
        }
        let s = format!("{:?}", Frame::HostAuth(KeyAuth { key: [0xab; 32], signature: [0; 64] }));
        assert_eq!(s, "HostAuth(KeyAuth { key: abababab.., signature: <64 bytes> })");
    }

    #[test]
    fn rejects_names_over_the_cap() {
        let mut buf = Vec::new();
        let start = begin_frame(&mut buf, ty::DIR);
        let mut w = W(&mut buf);
        w.u64(1).u64(0).u16(256);
        buf.extend_from_slice(&[b'a'; 256]);
        W(&mut buf).u32(0).time(Time::default());
        end_frame(&mut buf, start);
        assert!(matches!(decode(&buf), Err(ProtoError::TooLong { what: "name", len: 256, cap: 255 })));
    }

    #[test]
    fn rejects_bad_chunk_sizes_flags_and_nanoseconds() {
        for (cs, flags, window) in [
            (1000, 0, 0),
            (MIN_CHUNK / 2, 0, 0),
            (MAX_CHUNK * 2, 0, 0),
            (MIN_CHUNK, 1 << 20, 0),
            (MIN_CHUNK, 0, MAX_MODIFY_WINDOW + 1),
            (MIN_CHUNK, 0, u32::MAX),
        ] {
            let mut buf = Vec::new();
            let b = Begin { dest: b"", sources: 1, chunk_size: cs, flags, streams: 1, modify_window: window };
            Frame::Begin(b).encode(&mut buf);
            assert!(matches!(decode(&buf), Err(ProtoError::Invalid(_))), "{cs} {flags} {window}");
        }
        let mut buf = Vec::new();
        Frame::Dir(DirEntry {
            id: 1,
            parent: 0,
            name: b"d",
            mode: 0,
            mtime: Time { sec: 0, nsec: 1_000_000_000 },
            owner: Default::default(),
        })
        .encode(&mut buf);
        assert_eq!(decode(&buf), Err(ProtoError::Invalid("nanoseconds")));
    }

    #[test]
    fn rejects_a_bad_special_kind_id_kind_and_an_overlong_id_name() {
        let mut buf = Vec::new();
        let start = begin_frame(&mut buf, ty::SPECIAL);
        W(&mut buf)
            .u64(0)
            .bytes(b"p", MAX_NAME)
            .u8(5)
            .u32(0)
            .u32(0)
            .u32(0)
            .time(Time::default())
            .owner(Owner::default());
        end_frame(&mut buf, start);
        assert_eq!(decode(&buf), Err(ProtoError::Invalid("special file kind")));
        let mut buf = Vec::new();
        let start = begin_frame(&mut buf, ty::ID_NAME);
        W(&mut buf).u8(3).u32(0).bytes(b"root", MAX_ID_NAME);
        end_frame(&mut buf, start);
        assert_eq!(decode(&buf), Err(ProtoError::Invalid("id kind")));
        let mut buf = Vec::new();
        let start = begin_frame(&mut buf, ty::ID_NAME);
        W(&mut buf).u8(1).u32(0).u16(256);
        buf.extend_from_slice(&[b'a'; 256]);
        end_frame(&mut buf, start);
        assert!(matches!(decode(&buf), Err(ProtoError::TooLong { len: 256, cap: 255, .. })));
    }
}
