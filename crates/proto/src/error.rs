//! Typed errors of the protocol layer and the numeric codes that travel on the wire.

use thiserror::Error;

/// Why a peer's input was refused. Every variant ends the session: a peer that breaks a rule is
/// not trusted with the rest of it. (Per-entry failures on the receiver are I/O errors, reported
/// with an `Error` frame while the session goes on.)
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ProtoError {
    /// The input ended inside a frame or field.
    #[error("truncated {0}")]
    Truncated(&'static str),
    /// A length prefix exceeds its cap; nothing was allocated.
    #[error("{what} length {len} exceeds the cap of {cap}")]
    TooLong {
        /// Which field.
        what: &'static str,
        /// The length the peer declared.
        len: u64,
        /// The cap it exceeded.
        cap: u64,
    },
    /// A frame type this version does not know.
    #[error("unknown frame type 0x{0:02x}")]
    UnknownFrame(u8),
    /// A field holds a value outside its range.
    #[error("invalid {0}")]
    Invalid(&'static str),
    /// An entry name that could escape or confuse the destination.
    #[error("refused entry name: {0}")]
    BadName(&'static str),
    /// The preamble did not start with the linerate magic.
    #[error("not a linerate peer (bad magic)")]
    BadMagic,
    /// The peer speaks another protocol version.
    #[error("protocol version mismatch: we speak {ours}, peer speaks {theirs}")]
    Version {
        /// Our version.
        ours: u16,
        /// The peer's version.
        theirs: u16,
    },
    /// The Noise handshake failed: wrong secret, wrong session, or tampering.
    #[error("authentication failed (wrong secret, wrong session, or tampered handshake)")]
    Auth,
    /// A record failed AEAD verification: tampered, replayed, reordered or spliced.
    #[error("record authentication failed (tampered, replayed, reordered or spliced data)")]
    RecordAuth,
    /// The record sequence number space is exhausted.
    #[error("record sequence number exhausted")]
    SequenceExhausted,
    /// The peer broke a protocol rule (a frame in the wrong place, a duplicate, ...).
    #[error("protocol violation: {0}")]
    Violation(String),
    /// The peer exceeded a resource limit.
    #[error("limit exceeded: {0}")]
    Limit(String),
}

impl ProtoError {
    /// The wire code that reports this error to the peer.
    pub fn code(&self) -> ErrorCode {
        match self {
            ProtoError::BadName(_) => ErrorCode::BadName,
            ProtoError::Version { .. } => ErrorCode::Version,
            ProtoError::Auth | ProtoError::RecordAuth => ErrorCode::Auth,
            ProtoError::Limit(_) | ProtoError::TooLong { .. } => ErrorCode::Limit,
            ProtoError::Violation(_) => ErrorCode::Protocol,
            _ => ErrorCode::BadFrame,
        }
    }
}

/// Numeric error codes carried in `Error` and `Fatal` frames and in the preamble status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum ErrorCode {
    /// A frame could not be decoded.
    BadFrame = 1,
    /// An entry name was refused.
    BadName = 2,
    /// A filesystem operation failed on the receiver.
    Io = 3,
    /// Received data does not match what was declared (size, chunks, digest).
    Integrity = 4,
    /// The source changed while it was read; the file was not committed.
    SourceChanged = 5,
    /// The destination does not fit the request (not a directory, missing parent, ...).
    Destination = 6,
    /// A resource limit was exceeded.
    Limit = 7,
    /// A protocol rule was broken.
    Protocol = 8,
    /// Authentication failed.
    Auth = 9,
    /// Protocol versions differ.
    Version = 10,
    /// The server is at capacity; try again later.
    Busy = 11,
    /// The data stream names a session the server does not know.
    UnknownSession = 12,
    /// The sender could not read a source entry.
    SourceRead = 13,
    /// Benchmark parameters were refused (wrong type, out of range, over an admission cap), or a
    /// copy's filter rules (a pattern that is not UTF-8 or does not compile).
    BadParams = 14,
    /// The server does not offer this service (for example cp without a `--root`).
    Unsupported = 15,
    /// The authenticated key may not do this (a read-only key pushing).
    Denied = 16,
    /// The peer's user interrupted it (Ctrl-C, SIGTERM): it ended the session on purpose.
    Interrupted = 17,
    /// The destination's file system took no more (full, over quota, or read-only): the receiver
    /// ended the session at the first such failure, since every later write would fail alike.
    Storage = 18,
}

impl ErrorCode {
    /// Decode a wire code; unknown codes are kept as [`ErrorCode::Protocol`].
    pub fn from_u16(v: u16) -> ErrorCode {
        use ErrorCode::*;
        match v {
            1 => BadFrame,
            2 => BadName,
            3 => Io,
            4 => Integrity,
            5 => SourceChanged,
            6 => Destination,
            7 => Limit,
            9 => Auth,
            10 => Version,
            11 => Busy,
            12 => UnknownSession,
            13 => SourceRead,
            14 => BadParams,
            15 => Unsupported,
            16 => Denied,
            17 => Interrupted,
            18 => Storage,
            _ => Protocol,
        }
    }

    /// Short human name.
    pub fn describe(self) -> &'static str {
        use ErrorCode::*;
        match self {
            BadFrame => "malformed frame",
            BadName => "refused name",
            Io => "I/O error on the receiver",
            Integrity => "integrity check failed",
            SourceChanged => "source changed while being read",
            Destination => "bad destination or source path",
            Limit => "limit exceeded",
            Protocol => "protocol violation",
            Auth => "authentication failed",
            Version => "version mismatch",
            Busy => "server busy",
            UnknownSession => "unknown session",
            SourceRead => "source unreadable",
            BadParams => "bad benchmark parameters",
            Unsupported => "not offered by this server",
            Denied => "not permitted for this key",
            Interrupted => "interrupted by its user",
            Storage => "the destination file system is full, over quota or read-only",
        }
    }
}
