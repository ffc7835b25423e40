//! The error of the session crates (this one, linerate-copy, linerate-bench, linerate-agent): what
//! failed, where, and the protocol code it maps to. `EngineError` keeps the name of the crate
//! they were split from (linerate-engine).

use linerate_proto::{ErrorCode, ProtoError};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// A path for a message: control characters and invalid UTF-8 escaped (scp CVE-2019-6109).
pub fn shown(p: &Path) -> String {
    linerate_proto::name::escape(p.as_os_str().as_bytes())
}

/// An error that ends an operation (a session, a connection, a copy).
#[derive(Debug, Error)]
pub enum EngineError {
    /// Network I/O failed.
    #[error("{context}: {io}")]
    Net {
        /// What we were doing.
        context: String,
        /// The OS error (shown in the message, so not also a `source()`: printing the chain
        /// would repeat it).
        io: io::Error,
    },
    /// A local file operation failed.
    #[error("{}: {io}", shown(path))]
    File {
        /// Where.
        path: PathBuf,
        /// The OS error (in the message, as for `Net`).
        io: io::Error,
    },
    /// The peer broke the protocol or failed authentication.
    #[error(transparent)]
    Proto(#[from] ProtoError),
    /// The peer ended the session with a fatal error.
    #[error("server aborted the session: {message} ({})", code.describe())]
    Remote {
        /// The peer's code.
        code: ErrorCode,
        /// The peer's message (control characters escaped).
        message: String,
    },
    /// This side ended the session (a pull's receiver: the server broke a rule, or went silent).
    #[error("the session was aborted: {message} ({})", code.describe())]
    Aborted {
        /// The code sent to the peer.
        code: ErrorCode,
        /// Why (control characters escaped).
        message: String,
    },
    /// The server refused the connection before the handshake.
    #[error("server refused the connection: {}", code.describe())]
    Refused {
        /// Why.
        code: ErrorCode,
    },
    /// A secret could not be loaded.
    #[error("{0}")]
    Secret(String),
    /// The request makes no sense or cannot be done as asked (the user's to fix).
    #[error(transparent)]
    Usage(#[from] UsageError),
    /// The server's host key is not the one known for it (or unknown in strict mode).
    #[error("{0}")]
    HostKey(String),
    /// The user interrupted the copy (`Progress::cancel` in linerate-copy's `send`); the peer was told.
    #[error("interrupted")]
    Interrupted,
    /// Waiting for the peer took too long.
    #[error("timed out: {0}")]
    Timeout(String),
    /// Something failed inside linerate that is neither the user's nor the peer's doing (a
    /// worker thread panicked, a session ended without a result); a bug to report.
    #[error("internal error: {0} (please report this)")]
    Internal(String),
}

/// What about a request makes it impossible, by what it concerns (the message says the rest):
/// [`EngineError::Usage`].
#[derive(Debug, Error)]
pub enum UsageError {
    /// A copy's or pull's sources: none, a directory's contents among several sources, one that
    /// cannot be named at the destination, two that would land under one name.
    #[error("{0}")]
    Sources(String),
    /// A copy's or pull's destination: no parent, not a directory, no name.
    #[error("{0}")]
    Destination(String),
    /// A key file: an authorized keys file others may write, or one that does not parse.
    #[error("{0}")]
    Keys(String),
    /// The server at `addr` does not do what was asked (`how` says what and why).
    #[error("{addr} {how}")]
    Unsupported {
        /// The server.
        addr: std::net::SocketAddr,
        /// What it does not do.
        how: String,
    },
    /// A benchmark test's options as given (ports, sizes, the test kind), or a test the server
    /// would not start.
    #[error("{0}")]
    Test(String),
    /// An option this host's kernel refuses (a core, a congestion control, a TOS, an MSS).
    #[error("on this host: {0}")]
    ThisHost(Box<dyn std::error::Error + Send + Sync>),
    /// A server's own configuration: nothing to authenticate with, nothing to listen on.
    #[error("{0}")]
    Server(String),
}

impl EngineError {
    /// Wrap a network error with what we were doing.
    pub fn net(context: impl Into<String>, source: io::Error) -> EngineError {
        EngineError::Net { context: context.into(), io: source }
    }

    /// Whether this is a wait that ran out: [`EngineError::Timeout`], or a network read or write
    /// whose timeout expired (`TimedOut`, or `WouldBlock` from a socket timeout).
    pub fn is_timeout(&self) -> bool {
        match self {
            EngineError::Timeout(_) => true,
            EngineError::Net { io, .. } => {
                matches!(io.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
            }
            _ => false,
        }
    }

    /// Whether a receive or send ended because the peer went away: its connection was reset,
    /// or closed inside a record, as when a client's process is interrupted. (A close between
    /// records is `Ok(None)` from [`crate::conn::RecvHalf::recv`].)
    pub fn is_peer_gone(&self) -> bool {
        match self {
            EngineError::Proto(ProtoError::Truncated("record header" | "record body")) => true,
            // It said so itself (Ctrl-C on the client: `Fatal` code 17).
            EngineError::Remote { code: ErrorCode::Interrupted, .. } | EngineError::Interrupted => true,
            EngineError::Net { io, .. } => matches!(
                io.kind(),
                io::ErrorKind::ConnectionReset
                    | io::ErrorKind::ConnectionAborted
                    | io::ErrorKind::BrokenPipe
                    | io::ErrorKind::UnexpectedEof
            ),
            _ => false,
        }
    }

    /// Wrap a file error with its path.
    pub fn file(path: impl Into<PathBuf>, source: io::Error) -> EngineError {
        EngineError::File { path: path.into(), io: source }
    }
}
