//! Exit codes, documented in `linerate cp --help` and docs/USER_GUIDE.md, and the one mapping
//! from an engine error to its code.

/// Everything was copied.
pub const OK: u8 = 0;
/// The session completed but some entries failed (each was reported).
pub const PARTIAL: u8 = 1;
/// Bad usage or configuration (flags, key file, destination).
pub const USAGE: u8 = 2;
/// The session failed: connection, authentication, protocol or a fatal server error, a
/// busy server, or an internal error.
pub const SESSION: u8 = 3;

/// The user interrupted it (Ctrl-C, SIGTERM): 128 + SIGINT, as a shell reports a process
/// killed by SIGINT; what was done is kept and the same command resumes.
pub const INTERRUPTED: u8 = 130;

use linerate_engine::EngineError;
use linerate_proto::ErrorCode;

/// The exit code of a failed `cp`, `bench` or `doctor` run, the one mapping for every
/// command: [`USAGE`] when the request itself cannot be met as given (flags, key file,
/// destination, or the server refusing its parameters: Destination, BadParams, Limit,
/// Unsupported), [`SESSION`] for everything else (the network, authentication, the peer, a
/// busy server, an internal error).
pub fn of(e: &EngineError) -> u8 {
    match e {
        EngineError::Usage(_) | EngineError::Secret(_) => USAGE,
        EngineError::Interrupted => INTERRUPTED,
        EngineError::Remote {
            code: ErrorCode::Destination | ErrorCode::BadParams | ErrorCode::Limit | ErrorCode::Unsupported,
            ..
        } => USAGE,
        _ => SESSION,
    }
}
