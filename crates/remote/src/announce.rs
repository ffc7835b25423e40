//! The one line a remote `linerate serve --once --ssh` prints on its standard output, the way
//! mosh's server does (issue 5): protocol version, port, a fresh one-time key, and the address
//! the ssh connection reached. The client then opens its parallel streams directly to that port.

use linerate_net::auth::secret::Secret;
use std::net::IpAddr;

/// First word of the announce line.
pub const TAG: &str = "LINERATE";

/// The one line a `serve --once --ssh` prints: `LINERATE <protocol> PORT <port> SECRET <64 hex>
/// [ADDR <ip>] [SOFTWARE <version>]`. Words after the version are `KEY VALUE` pairs; unknown keys
/// are ignored, so later versions can add some.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announce {
    /// The wire protocol version the server speaks.
    pub version: u16,
    /// The port it listens on.
    pub port: u16,
    /// The one-time secret of the session.
    pub secret: Secret,
    /// The server's address as the ssh connection reached it (`SSH_CONNECTION`), when known.
    pub addr: Option<IpAddr>,
    /// The server's software version (`linerate --version`), when given.
    pub software: Option<String>,
}

/// Why a line is not a usable announcement.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnnounceError {
    /// The line does not start with `LINERATE <number>`: not from a linerate server.
    #[error("not an announce line")]
    NotAnnounce,
    /// The server speaks another protocol version.
    #[error("the remote linerate speaks protocol version {remote}{}, this one speaks version {local}", .software.as_ref().map(|s| format!(" (linerate {s})")).unwrap_or_default())]
    Version {
        /// The remote's protocol version.
        remote: u16,
        /// Ours.
        local: u16,
        /// The remote's software version, when given.
        software: Option<String>,
    },
    /// A required field is missing or malformed.
    #[error("malformed announce line: {0}")]
    Malformed(&'static str),
}

impl Announce {
    /// The line, without its newline. It carries the secret: write it only to the pipe the client
    /// reads, never to a log.
    pub fn line(&self) -> String {
        let mut s = format!("{TAG} {} PORT {} SECRET {}", self.version, self.port, self.secret.to_hex());
        if let Some(a) = self.addr {
            s.push_str(&format!(" ADDR {a}"));
        }
        if let Some(v) = &self.software {
            s.push_str(&format!(" SOFTWARE {v}"));
        }
        s
    }

    /// Parse a line; a server of another protocol version is [`AnnounceError::Version`] whatever
    /// else its line says.
    pub fn parse(line: &str) -> Result<Announce, AnnounceError> {
        let mut words = line.split_ascii_whitespace();
        if words.next() != Some(TAG) {
            return Err(AnnounceError::NotAnnounce);
        }
        let version: u16 = words.next().and_then(|v| v.parse().ok()).ok_or(AnnounceError::NotAnnounce)?;
        let rest: Vec<&str> = words.collect();
        let field = |k: &str| rest.chunks(2).find(|p| p[0] == k).and_then(|p| p.get(1).copied());
        let software = field("SOFTWARE").filter(|s| s.len() <= 64).map(str::to_string);
        let local = linerate_proto::PROTOCOL_VERSION;
        if version != local {
            return Err(AnnounceError::Version { remote: version, local, software });
        }
        let port = field("PORT").and_then(|p| p.parse::<u16>().ok()).filter(|&p| p != 0);
        let port = port.ok_or(AnnounceError::Malformed("no PORT"))?;
        let secret = field("SECRET").ok_or(AnnounceError::Malformed("no SECRET"))?;
        // Exactly 64 hex digits: no white space around them, as from_hex would allow.
        let secret = Secret::from_hex(secret)
            .ok()
            .filter(|_| secret.len() == 64)
            .ok_or(AnnounceError::Malformed("SECRET is not 64 hex digits"))?;
        let addr = match field("ADDR") {
            Some(a) => Some(a.parse().map_err(|_| AnnounceError::Malformed("ADDR is not an IP address"))?),
            None => None,
        };
        Ok(Announce { version, port, secret, addr, software })
    }
}

/// The server address of an ssh session from the value of `SSH_CONNECTION` (`client_ip
/// client_port server_ip server_port`): the address the client reached, as mosh uses it.
pub fn ssh_connection_addr(value: &str) -> Option<IpAddr> {
    let a = value.split_ascii_whitespace().nth(2)?;
    // A link-local IPv6 address may carry a zone (`fe80::1%eth0`), useless to the client.
    a.parse().ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn sample() -> Announce {
        Announce {
            version: linerate_proto::PROTOCOL_VERSION,
            port: 40123,
            secret: Secret([7; 32]),
            addr: Some("198.18.0.2".parse().unwrap()),
            software: Some("0.1.0".into()),
        }
    }

    #[test]
    fn announce_round_trips_and_ignores_unknown_fields() {
        let a = sample();
        assert_eq!(Announce::parse(&a.line()).unwrap(), a);
        let extra = format!("{} FUTURE thing\n", a.line());
        assert_eq!(Announce::parse(&extra).unwrap(), a);
        let bare = Announce { addr: None, software: None, ..a };
        assert_eq!(Announce::parse(&bare.line()).unwrap(), bare);
        assert_eq!(format!("{:?}", bare.secret), "Secret(..)", "Debug does not show the key");
    }

    #[test]
    fn announce_names_both_versions_on_mismatch() {
        let e = Announce::parse("LINERATE 999 SOMETHING else SOFTWARE 9.9.9").unwrap_err();
        assert!(matches!(e, AnnounceError::Version { remote: 999, .. }), "{e:?}");
        let msg = e.to_string();
        let ours = format!("version {}", linerate_proto::PROTOCOL_VERSION);
        assert!(msg.contains("999") && msg.contains("9.9.9") && msg.contains(&ours), "{msg}");
    }

    #[test]
    fn announce_rejects_garbage() {
        assert_eq!(Announce::parse("Welcome to host!"), Err(AnnounceError::NotAnnounce));
        assert_eq!(Announce::parse("LINERATE x"), Err(AnnounceError::NotAnnounce));
        assert_eq!(Announce::parse(""), Err(AnnounceError::NotAnnounce));
        let v = linerate_proto::PROTOCOL_VERSION;
        assert!(matches!(Announce::parse(&format!("LINERATE {v} PORT 0 SECRET x")), Err(AnnounceError::Malformed(_))));
        assert!(matches!(Announce::parse(&format!("LINERATE {v} PORT 9 SECRET ab")), Err(AnnounceError::Malformed(_))));
        let s = "ab".repeat(32);
        assert!(matches!(
            Announce::parse(&format!("LINERATE {v} PORT 9 SECRET {s} ADDR nope")),
            Err(AnnounceError::Malformed(_))
        ));
        assert!(matches!(Announce::parse(&format!("LINERATE {v} SECRET {s}")), Err(AnnounceError::Malformed(_))));
        // 64 characters that are not all hex digits (a sign, a space) are not a key.
        let signed = format!("+{}", "a".repeat(63));
        assert!(Announce::parse(&format!("LINERATE {v} PORT 9 SECRET {signed}")).is_err());
    }

    #[test]
    fn ssh_connection_gives_the_server_address() {
        assert_eq!(ssh_connection_addr("198.18.0.1 51234 198.18.0.2 22"), Some("198.18.0.2".parse().unwrap()));
        assert_eq!(ssh_connection_addr("::1 5 ::1 22"), Some("::1".parse().unwrap()));
        assert_eq!(ssh_connection_addr("fe80::1%eth0 5 fe80::2%eth0 22"), None);
        assert_eq!(ssh_connection_addr(""), None);
    }
}
