//! The linerate wire protocol, without I/O.
//!
//! This crate holds everything two linerate peers must agree on: the connection preamble and its
//! version check ([`hello`]), the Noise handshake that authenticates every connection to a
//! session ([`handshake`]), public-key signatures of daemon mode ([`auth`]), the AEAD record layer ([`record`]), the frames carried inside records
//! ([`frame`]), entry-name validation ([`name`]), the receiver's bookkeeping of what a sender
//! may and may not do ([`track`]), a copy session's sender and receiver as machines that own
//! its control-stream rules, what goes out and when, and its deadlines ([`copy`]), the
//! benchmark session: test parameters, their admission
//! rules, data-connection preambles and results ([`mod@bench`]), and a server's admission: handshake and
//! session slots, deadlines and the stages of its shutdown ([`admit`]). Nothing here touches a socket, a file or a clock, so every
//! rule can be driven and tested in memory. The format is specified in `docs/PROTOCOL.md`.
#![forbid(unsafe_code)]

pub mod admit;
pub mod auth;
pub mod bench;
pub mod copy;
pub mod error;
pub mod frame;
pub mod handshake;
pub mod hello;
pub mod mesh;
pub mod name;
pub mod owner;
pub mod record;
pub mod track;

pub use error::{ErrorCode, ProtoError};

/// Protocol version carried in every preamble; peers must match exactly.
pub const PROTOCOL_VERSION: u16 = 3;

/// Caps on everything a peer can make us allocate or track.
pub mod caps {
    /// Longest entry name (one path component), as on Linux.
    pub const MAX_NAME: usize = 255;
    /// Longest path or symlink target.
    pub const MAX_PATH: usize = 4096;
    /// Longest free-text message in an error frame.
    pub const MAX_MESSAGE: usize = 1024;
    /// Smallest chunk size a sender may choose (a power of two).
    pub const MIN_CHUNK: u32 = 64 * 1024;
    /// Largest chunk size a sender may choose (a power of two).
    pub const MAX_CHUNK: u32 = 8 * 1024 * 1024;
    /// Default chunk size.
    pub const DEFAULT_CHUNK: u32 = 1024 * 1024;
    /// Room for frame headers beside a full chunk in one record.
    pub const RECORD_OVERHEAD: usize = 64 * 1024;
    /// Largest record ciphertext (including the tag) either side accepts.
    pub const MAX_RECORD: usize = MAX_CHUNK as usize + RECORD_OVERHEAD;
    /// Records of small frames (entries, small files) are sent once they reach this size.
    pub const MAX_BATCH: usize = 256 * 1024;
    const _: () = assert!(MAX_BATCH < MAX_RECORD);

    /// Largest record ciphertext accepted on a data stream of a session with this chunk size:
    /// a full chunk or a full batch, with room for frame headers beside it.
    pub const fn data_record_cap(chunk_size: u32) -> usize {
        let body = if (chunk_size as usize) > MAX_BATCH { chunk_size as usize } else { MAX_BATCH };
        let cap = body + RECORD_OVERHEAD;
        if cap > MAX_RECORD {
            MAX_RECORD
        } else {
            cap
        }
    }
    /// Largest Noise handshake message we send or accept.
    pub const MAX_HANDSHAKE_MSG: usize = 1024;
    /// Most data streams one session may open.
    pub const MAX_STREAMS: u16 = 256;
    /// Most files a receiver keeps open (declared but not finished) at once.
    pub const MAX_OPEN_FILES: usize = 4096;
    /// Deepest directory nesting accepted.
    pub const MAX_DEPTH: u32 = 1024;
    /// Most have-ranges in one `Want` (a receiver with a more fragmented partial file offers fewer
    /// and has the rest sent again).
    pub const MAX_WANT_RANGES: usize = 4096;
    /// Most names in one `Keep` frame (a larger directory is listed in several).
    pub const MAX_KEEP_NAMES: usize = 16384;
    /// Most names a receiver collects for one directory under `--delete`; a larger directory is
    /// left undeleted and reported.
    pub const MAX_DIR_NAMES: usize = 1 << 20;
    /// Largest JSON document in a benchmark frame (a result for 10,000 connections fits).
    pub const MAX_BENCH_DOC: usize = 4 * 1024 * 1024;
    /// Largest mesh document (`MeshRequest`, `MeshResult`): a test and a summary of it.
    pub const MAX_MESH_DOC: usize = 64 * 1024;
    /// Longest user or group name in an `IdName` frame (Linux's `LOGIN_NAME_MAX` less its NUL).
    pub const MAX_ID_NAME: usize = 255;
    /// Most distinct ids of each kind (users, groups) a receiver maps in one session.
    pub const MAX_ID_NAMES: usize = 65536;
    /// Most rules in a `Filter` frame (`--exclude`, `--include`, lines of `--exclude-from`).
    pub const MAX_FILTER_RULES: usize = 4096;
    /// Most pattern bytes, all rules of a `Filter` frame together (it travels in the first
    /// request record, at most 1 MiB).
    pub const MAX_FILTER_BYTES: usize = 256 * 1024;
    /// Most bytes of the regular expressions a session's filter rules compile to, all together,
    /// checked before any is compiled: building one costs about 280 bytes of memory per byte
    /// (measured with globset 0.4: 87 patterns of `**/` × 1000, inside every cap above, took
    /// 273 MB before failing), so this keeps a session's rules under about 40 MB. A rule set
    /// as large as 4096 rules like `*.o` or `**/dir/name` fits.
    pub const MAX_FILTER_REGEX: usize = 128 * 1024;
    /// Largest `--modify-window` a `Begin` may carry, in seconds (a year: rsync's common uses are
    /// 1 or 2 s for FAT and 3601 s for daylight-saving shifts).
    pub const MAX_MODIFY_WINDOW: u32 = 366 * 86_400;
    /// Most files with several names (`-H`) one session tracks: the sender remembers the first
    /// name of at most this many inodes, the receiver where at most this many landed. Past it,
    /// further names are sent as separate files.
    pub const MAX_LINK_TARGETS: usize = 1 << 18;
    /// Most hard links a receiver holds waiting for their first name to be committed.
    pub const MAX_PENDING_LINKS: usize = 1 << 16;
    /// `-S` with `verify`: the zeros a receiver hashes for holes it was told of, beyond
    /// [`HOLE_VERIFY_PER_BYTE`] per data byte received, per session (64 GiB, about 20 s of one
    /// core at BLAKE3's 3 GB/s). A `Hole` is 24 bytes whatever its length, so without a budget a
    /// 150-byte push could cost hours of hashing (issue 42).
    pub const HOLE_VERIFY_ALLOWANCE: u64 = 64 << 30;
    /// `-S` with `verify`: hole bytes a receiver hashes per data byte it received in the session,
    /// beyond [`HOLE_VERIFY_ALLOWANCE`] (hashing a byte costs about a quarter of receiving one).
    pub const HOLE_VERIFY_PER_BYTE: u64 = 64;
}
