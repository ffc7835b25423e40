//! Naming a peer: `HOST`, `HOST:PORT`, `IPv6`, `[IPv6]:PORT`, turned into a socket address (the
//! default port when none is named, an address family when asked), and the host part alone
//! (which a key's `known_hosts`-style entry is looked up by).

use linerate_model::DEFAULT_PORT;
use std::net::{SocketAddr, ToSocketAddrs};

/// Why a peer's name gave no address.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The name carries a port and another was given apart (`-p`).
    #[error("{server} names its port and -p {port} another: give the port once")]
    PortTwice {
        /// The name as given.
        server: String,
        /// The port given apart.
        port: u16,
    },
    /// The resolver failed.
    #[error("resolving {server}: {source}")]
    Resolver {
        /// The name as given.
        server: String,
        /// The resolver's error.
        source: std::io::Error,
    },
    /// The name resolved, but to no address of the family asked for (or none at all).
    #[error("{server}: no {}address", family.map_or(String::new(), |f| format!("IPv{f} ")))]
    NoAddress {
        /// The name as given.
        server: String,
        /// 4 or 6, when one family was asked for.
        family: Option<u8>,
    },
}

/// The host part of `server` (`HOST`, `HOST:PORT`, `IPv6`, `[IPv6]:PORT`).
pub fn host_of(server: &str) -> &str {
    if let Some(rest) = server.strip_prefix('[') {
        return rest.split_once(']').map_or(rest, |(h, _)| h);
    }
    match server.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') && p.parse::<u16>().is_ok() => h,
        _ => server,
    }
}

/// `host` with `port` (the default port when none), IPv6 in brackets.
pub fn host_port(host: &str, port: Option<u16>) -> String {
    let port = port.unwrap_or(DEFAULT_PORT);
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The address family iperf3's `-4` and `-6` ask [`resolve`] for (`-4` first), or any.
pub fn family(ipv4: bool, ipv6: bool) -> Option<u8> {
    [(ipv4, 4), (ipv6, 6)].into_iter().find_map(|(on, f)| on.then_some(f))
}

/// The first address of `server`, keeping only IPv4 (`Some(4)`) or IPv6 (`Some(6)`) addresses
/// when asked (iperf3's -4 and -6), on `port` (iperf3's -p) when `server` names none, else on
/// the default port.
pub fn resolve(server: &str, family: Option<u8>, port: Option<u16>) -> Result<SocketAddr, ResolveError> {
    let has_port = server.parse::<SocketAddr>().is_ok()
        || server.rsplit_once(':').is_some_and(|(h, p)| !h.contains(':') && p.parse::<u16>().is_ok());
    let with_port = match (has_port, port) {
        (true, Some(port)) => return Err(ResolveError::PortTwice { server: server.to_string(), port }),
        (true, None) => server.to_string(),
        (false, p) => host_port(server, p),
    };
    with_port
        .to_socket_addrs()
        .map_err(|source| ResolveError::Resolver { server: server.to_string(), source })?
        .find(|a| match family {
            Some(4) => a.is_ipv4(),
            Some(6) => a.is_ipv6(),
            _ => true,
        })
        .ok_or_else(|| ResolveError::NoAddress { server: server.to_string(), family })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minus_4_wins_over_minus_6_and_neither_is_any() {
        assert_eq!((family(true, true), family(false, true), family(false, false)), (Some(4), Some(6), None));
    }

    #[test]
    fn a_peers_host_and_address_are_read_from_every_form_of_its_name() {
        assert_eq!(host_of("h.example:7878"), "h.example");
        assert_eq!(host_of("[::1]:7878"), "::1");
        assert_eq!(host_of("::1"), "::1");
        assert_eq!(host_of("h.example"), "h.example");
        assert_eq!(host_port("::1", Some(9)), "[::1]:9");
        assert_eq!(host_port("127.0.0.1", None), format!("127.0.0.1:{DEFAULT_PORT}"));
        assert_eq!(resolve("127.0.0.1:9", None, None).unwrap(), "127.0.0.1:9".parse().unwrap());
        assert_eq!(resolve("127.0.0.1", None, Some(9)).unwrap(), "127.0.0.1:9".parse().unwrap());
        assert_eq!(resolve("[::1]:9", Some(6), None).unwrap(), "[::1]:9".parse().unwrap());
        let twice = resolve("127.0.0.1:9", None, Some(10)).unwrap_err();
        assert_eq!(twice.to_string(), "127.0.0.1:9 names its port and -p 10 another: give the port once");
        let none = resolve("127.0.0.1", Some(6), None).unwrap_err();
        assert_eq!(none.to_string(), "127.0.0.1: no IPv6 address");
    }
}
