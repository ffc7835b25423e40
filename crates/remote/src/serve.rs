//! `linerate serve --once --ssh`, the far side `linerate cp` starts through ssh: a one-time key,
//! a server of this user listening on an ephemeral port of every address (of loopback alone for
//! `--via-ssh`), resolving the client's paths relative to the current directory, and the
//! announce line that tells the client where and with which key. Printing the line is the
//! caller's: the pipe ssh carries back is the only place the key is written.

use crate::announce::{ssh_connection_addr, Announce};
use linerate_agent::server::{Server, ServerConfig};
use linerate_net::auth::secret::Secret;
use linerate_net::EngineError;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// Why the far side did not start listening.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// No one-time key.
    #[error("making the session key: {0}")]
    Key(EngineError),
    /// No current directory to resolve paths in.
    #[error("finding the current directory: {0}")]
    Home(std::io::Error),
    /// No address to listen on.
    #[error("listening: {0}")]
    Listen(EngineError),
}

/// How the far side serves.
#[derive(Debug, Clone, Copy)]
pub struct ServeConfig {
    /// Listen on 127.0.0.1 only (`--ssh-loopback`, for `cp --via-ssh`).
    pub loopback: bool,
    /// How long to wait for the client to connect.
    pub connect_deadline: Duration,
    /// The server's handshake timeout.
    pub handshake_timeout: Duration,
    /// The server's idle timeout.
    pub idle_timeout: Duration,
}

/// Make a key, bind the server and compose its announce line (with the address ssh's
/// `SSH_CONNECTION` names, unless on loopback).
pub fn listen(c: &ServeConfig) -> Result<(Server, Announce), ServeError> {
    let secret = Secret::generate().map_err(ServeError::Key)?;
    let home = std::env::current_dir().map_err(ServeError::Home)?;
    let addr = std::env::var_os("SSH_CONNECTION").and_then(|v| ssh_connection_addr(&v.to_string_lossy()));
    let listens: Vec<SocketAddr> = if c.loopback {
        vec![SocketAddr::from(([127, 0, 0, 1], 0))]
    } else {
        // Every address: dual-stack where IPv6 is enabled, else IPv4 alone.
        vec![SocketAddr::from((IpAddr::from([0u16; 8]), 0)), SocketAddr::from(([0, 0, 0, 0], 0))]
    };
    let mut server = Err(EngineError::Usage(linerate_net::UsageError::Server("no address to listen on".into())));
    for l in listens {
        let mut cfg = ServerConfig::ssh_user(l, secret.clone(), home.clone(), c.connect_deadline);
        cfg.handshake_timeout = c.handshake_timeout;
        cfg.idle_timeout = c.idle_timeout;
        server = Server::bind(cfg);
        if server.is_ok() {
            break;
        }
    }
    let server = server.map_err(ServeError::Listen)?;
    let announce = Announce {
        version: linerate_proto::PROTOCOL_VERSION,
        port: server.local_addr().port(),
        secret,
        addr: if c.loopback { None } else { addr },
        software: Some(env!("CARGO_PKG_VERSION").to_string()),
    };
    Ok((server, announce))
}
