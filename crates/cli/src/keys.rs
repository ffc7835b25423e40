//! Keys on the command line: `linerate keygen`, how `cp` and `bench` authenticate to a running
//! server (a shared key file, or an ed25519 identity whose server is checked against
//! known_hosts), and `serve`'s daemon-mode flags (host key, authorized keys).

use anyhow::{anyhow, Context, Result};
use clap::Args;
use linerate_net::auth::authorized::{AuthorizedKeys, KeyAuthConfig};
use linerate_net::auth::keys::{self, Identity, KeyClient};
use linerate_net::auth::secret::Secret;
use std::path::{Path, PathBuf};
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
        if let Some(file) = &self.key_file {
            return Ok((Secret::load(file)?, None));
        }
        let default = keys::default_identity();
        let path = match (&self.identity, &default) {
            (Some(p), _) => p.clone(),
            (None, Some(d)) if d.exists() => d.clone(),
            _ => {
                let shown = default.map_or("the config directory's id_ed25519".into(), |d| d.display().to_string());
                return Err(anyhow!(
                    "{what} needs the server's shared key (--key-file FILE) or an ed25519 identity \
                     (--identity FILE, default {shown}; make one with `linerate keygen --type ed25519`)"
                ));
            }
        };
        let identity = Identity::load(&path)?;
        let known_hosts = keys::default_known_hosts()
            .ok_or_else(|| anyhow!("no config directory for known_hosts: set HOME or XDG_CONFIG_HOME"))?;
        let mut client = KeyClient::new(Arc::new(identity), known_hosts, keys::host_name(host, port));
        client.strict = self.strict_host_key;
        // A closed stderr loses the note, nothing more (a copy's own output sees the pipe).
        client.note = Arc::new(|m: String| {
            let _ = errln!("linerate: {m}");
        });
        Ok((Secret::generate()?, Some(client)))
    }
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
        let host_key = Identity::load_with(host, self.host_key_group_readable)
            .with_context(|| "the host key (--host-key)".to_string())?;
        AuthorizedKeys::load(authorized).context("the authorized keys (--authorized-keys)")?;
        Ok(Some(KeyAuthConfig { host_key: Arc::new(host_key), authorized_keys: authorized.clone() }))
    }
}

/// The fingerprint line `serve` prints at start, for clients to compare on first contact.
pub fn host_key_note(cfg: &KeyAuthConfig, authorized: &Path) -> (String, String) {
    let fingerprint = cfg.host_key.public().fingerprint();
    (format!("host key {fingerprint}; admitting the keys listed in {}", authorized.display()), fingerprint)
}
