//! `linerate keygen`: a shared 256-bit key, or an ed25519 key pair for daemon mode.

use crate::error::{Error, Kind, Result};
use clap::Args;
use linerate_net::auth::keys::{self, Identity};
use linerate_net::auth::secret::Secret;
use linerate_net::EngineError;
use std::path::PathBuf;

/// `linerate keygen` flags.
#[derive(Args, Debug)]
pub struct KeygenArgs {
    /// Where to write the key; never replaced. An ed25519 key's public half goes to FILE.pub
    /// [default with --type ed25519: id_ed25519 in the config directory, ~/.config/linerate].
    file: Option<PathBuf>,
    /// secret: a random 256-bit key shared by client and server (64 hex digits, mode 0600).
    /// ed25519: a key pair for daemon mode (private key PKCS#8 PEM, mode 0600).
    #[arg(long = "type", short = 't', value_enum, default_value_t = KeyType::Secret)]
    kind: KeyType,
    /// Comment on the public key line (default: user@host).
    #[arg(long, short = 'C')]
    comment: Option<String>,
}

/// `--type`: the kind of key to make.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum KeyType {
    // A shared secret.
    Secret,
    // An ed25519 key pair.
    Ed25519,
}

/// A key's engine error: a refused (existing) file is usage, a failed write local I/O.
fn key_err(e: EngineError) -> Error {
    let kind = match &e {
        EngineError::File { io, .. } if io.kind() == std::io::ErrorKind::AlreadyExists => Kind::Usage,
        EngineError::File { .. } => Kind::Io,
        _ => Kind::of_engine(&e),
    };
    Error::new(kind, e)
}

/// Run `linerate keygen`: a missing FILE or a key file that exists is usage; a directory or
/// file that cannot be written is [`Kind::Io`].
pub fn run_keygen(a: KeygenArgs) -> Result {
    if a.kind == KeyType::Secret {
        let file = a.file.as_ref().ok_or_else(|| Error::usage("a shared key needs FILE: linerate keygen FILE"))?;
        if a.comment.is_some() {
            return Err(Error::usage("--comment is for ed25519 keys (--type ed25519)"));
        }
        Secret::create(file).map_err(key_err)?;
        return errln!("wrote a new key to {}", file.display());
    }
    let file = match &a.file {
        Some(f) => f.clone(),
        None => keys::default_identity()
            .ok_or_else(|| Error::usage("no config directory: give FILE, or set HOME or XDG_CONFIG_HOME"))?,
    };
    let comment = a.comment.unwrap_or_else(keys::default_comment);
    let id = Identity::create(&file, &comment).map_err(key_err)?;
    errln!(
        "wrote a new ed25519 key to {} and its public key to {}\nfingerprint {}",
        file.display(),
        keys::pub_path(&file).display(),
        id.public().fingerprint()
    )?;
    // The public line on stdout, ready for a server's authorized keys file.
    outln!("{}", id.public().to_line(&comment))
}
