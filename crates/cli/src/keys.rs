//! Keys on the command line: `linerate keygen`, how `cp` and `bench` authenticate to a running
//! server (a shared key file, or an ed25519 identity whose server is checked against
//! known_hosts), and `serve`'s daemon-mode flags (host key, authorized keys).

use anyhow::Result;
use clap::Args;
use linerate_net::auth::authorized::KeyAuthConfig;
use linerate_net::auth::credentials::{self, ClientKeys};
use linerate_net::auth::keys::{KeyClient, NoteSink};
use linerate_net::auth::secret::Secret;
use std::path::PathBuf;
use std::sync::Arc;

/// How a client proves itself to a running `linerate serve`.
#[derive(Args, Debug, Clone, Default)]
pub struct ClientKeyArgs {
    /// Key file shared with the server (64 hex digits, mode 0600).
    #[arg(long, value_name = "FILE", conflicts_with = "identity")]
    pub key_file: Option<PathBuf>,
    /// ed25519 identity for a server in daemon mode (`serve --authorized-keys`)
    /// [default without --key-file: id_ed25519 in the config directory, ~/.config/linerate].
    #[arg(long, value_name = "FILE")]
    pub identity: Option<PathBuf>,
    /// With an identity: refuse a server whose host key is not yet in known_hosts, instead of
    /// adding it on first contact.
    #[arg(long)]
    pub strict_host_key: bool,
}

impl ClientKeyArgs {
    /// The credentials for server `host:port` (as the user wrote the host): the shared secret,
    /// or an identity (`Some`) with a throwaway secret that is never sent. `what` names the
    /// operand in the error when there are none.
    pub fn resolve(&self, host: &str, port: u16, what: &str) -> Result<(Secret, Option<KeyClient>)> {
        Ok(self.client_keys().resolve(host, port, what, note())?)
    }

    /// The credentials as the flags name them.
    pub fn client_keys(&self) -> ClientKeys<'_> {
        ClientKeys {
            key_file: self.key_file.as_deref(),
            identity: self.identity.as_deref(),
            strict_host_key: self.strict_host_key,
        }
    }
}

/// Where what a client learns of a server's key goes: a note on stderr. A closed stderr loses
/// the note, nothing more (a copy's own output sees the pipe).
pub fn note() -> NoteSink {
    Arc::new(|m: String| {
        let _ = errln!("linerate: {m}");
    })
}

/// `linerate serve` flags for daemon mode with keys.
#[derive(Args, Debug, Clone, Default)]
pub struct ServeKeyArgs {
    /// Daemon mode: admit clients whose ed25519 keys are listed in FILE, one per line as
    /// `[options] linerate-ed25519 <base64> [comment]`; options root=DIR, ro, rw, rate=RATE.
    /// Re-read for every session. Needs --host-key.
    #[arg(long, value_name = "FILE", requires = "host_key")]
    pub authorized_keys: Option<PathBuf>,
    /// The server's ed25519 identity (`linerate keygen --type ed25519 FILE`); clients remember
    /// it in their known_hosts.
    #[arg(long, value_name = "FILE", requires = "authorized_keys")]
    pub host_key: Option<PathBuf>,
    /// Accept a host key file that its group may read (never write) when that group is this
    /// process's own: how Kubernetes mounts a Secret for a pod with fsGroup (0440).
    #[arg(long, requires = "host_key")]
    pub host_key_group_readable: bool,
}

impl ServeKeyArgs {
    /// The daemon's key configuration, checked now (the host key loads, the authorized keys
    /// parse); `None` without --authorized-keys.
    pub fn config(&self) -> Result<Option<KeyAuthConfig>> {
        let (Some(authorized), Some(host)) = (&self.authorized_keys, &self.host_key) else {
            return Ok(None);
        };
        Ok(Some(credentials::daemon(host, self.host_key_group_readable, authorized)?))
    }
}
