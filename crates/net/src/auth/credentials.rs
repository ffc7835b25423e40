//! Which credentials the flags name: a client's for a running server (a shared key file, or an
//! ed25519 identity whose server is checked against `known_hosts`), and a daemon's (its host key
//! and authorized keys), loaded and checked before anything connects.

use super::authorized::{AuthorizedKeys, KeyAuthConfig};
use super::keys::{self, Identity, KeyClient, NoteSink};
use super::secret::Secret;
use crate::EngineError;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why no credentials could be had.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// Neither a key file nor an identity (`what` names the operand; `default` the identity
    /// looked for).
    #[error(
        "{what} needs the server's shared key (--key-file FILE) or an ed25519 identity (--identity FILE, \
         default {default}; make one with `linerate keygen --type ed25519`)"
    )]
    Missing {
        /// The operand that needs them.
        what: String,
        /// The default identity's path, or a description of it.
        default: String,
    },
    /// No directory for `known_hosts`.
    #[error("no config directory for known_hosts: set HOME or XDG_CONFIG_HOME")]
    NoConfigDir,
    /// A key did not load.
    #[error(transparent)]
    Key(#[from] EngineError),
    /// The daemon's host key did not load.
    #[error("the host key (--host-key)")]
    HostKey(#[source] EngineError),
    /// The daemon's authorized keys did not load.
    #[error("the authorized keys (--authorized-keys)")]
    AuthorizedKeys(#[source] EngineError),
}

/// A client's credentials as the flags name them.
#[derive(Debug, Clone, Default)]
pub struct ClientKeys<'a> {
    /// A key file shared with the server.
    pub key_file: Option<&'a Path>,
    /// An ed25519 identity (default: the config directory's `id_ed25519`, if it exists).
    pub identity: Option<&'a Path>,
    /// Refuse a server whose host key is not yet in `known_hosts`.
    pub strict_host_key: bool,
}

impl ClientKeys<'_> {
    /// The credentials for server `host:port` (as the user wrote the host): the shared secret,
    /// or an identity (`Some`) with a throwaway secret that is never sent, telling `note` what
    /// it learns of the server's key. `what` names the operand in the error when there are none.
    pub fn resolve(
        &self,
        host: &str,
        port: u16,
        what: &str,
        note: NoteSink,
    ) -> Result<(Secret, Option<KeyClient>), CredentialError> {
        if let Some(file) = self.key_file {
            return Ok((Secret::load(file)?, None));
        }
        let default = keys::default_identity();
        let path: PathBuf = match (self.identity, &default) {
            (Some(p), _) => p.to_path_buf(),
            (None, Some(d)) if d.exists() => d.clone(),
            _ => {
                let default = default.map_or("the config directory's id_ed25519".into(), |d| d.display().to_string());
                return Err(CredentialError::Missing { what: what.to_string(), default });
            }
        };
        let identity = Identity::load(&path)?;
        let known_hosts = keys::default_known_hosts().ok_or(CredentialError::NoConfigDir)?;
        let mut client = KeyClient::new(Arc::new(identity), known_hosts, keys::host_name(host, port));
        client.strict = self.strict_host_key;
        client.note = note;
        Ok((Secret::generate()?, Some(client)))
    }
}

/// A daemon's key configuration, checked now (the host key loads, with `group_readable` one its
/// own group may read; the authorized keys parse).
pub fn daemon(host_key: &Path, group_readable: bool, authorized: &Path) -> Result<KeyAuthConfig, CredentialError> {
    let host_key = Identity::load_with(host_key, group_readable).map_err(CredentialError::HostKey)?;
    AuthorizedKeys::load(authorized).map_err(CredentialError::AuthorizedKeys)?;
    Ok(KeyAuthConfig { host_key: Arc::new(host_key), authorized_keys: authorized.to_path_buf() })
}

/// The fingerprint line `serve` prints at start, for clients to compare on first contact, and
/// the fingerprint alone (for the log's field).
pub fn host_key_note(cfg: &KeyAuthConfig, authorized: &Path) -> (String, String) {
    let fingerprint = cfg.host_key.public().fingerprint();
    (format!("host key {fingerprint}; admitting the keys listed in {}", authorized.display()), fingerprint)
}
