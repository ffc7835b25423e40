//! TCP settings that bound a stream's rate: congestion control and socket buffer limits.

use super::{read, read_num, read_trim, Roots};
use serde::{Deserialize, Serialize};

/// TCP sysctls from `/proc/sys/net`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TcpFacts {
    /// `net.ipv4.tcp_congestion_control`.
    pub congestion_control: Option<String>,
    /// `net.ipv4.tcp_available_congestion_control`.
    pub available_congestion_control: Vec<String>,
    /// `net.ipv4.tcp_rmem`: min, default, max bytes (the max bounds receive autotuning).
    pub tcp_rmem: Option<[u64; 3]>,
    /// `net.ipv4.tcp_wmem`: min, default, max bytes (the max bounds send autotuning).
    pub tcp_wmem: Option<[u64; 3]>,
    /// `net.core.rmem_max`: the cap on an explicit SO_RCVBUF.
    pub rmem_max: Option<u64>,
    /// `net.core.wmem_max`: the cap on an explicit SO_SNDBUF.
    pub wmem_max: Option<u64>,
}

/// Parse a three-number sysctl ("4096 131072 6291456").
pub fn parse_triple(s: &str) -> Option<[u64; 3]> {
    let v: Vec<u64> = s.split_whitespace().map(|t| t.parse().ok()).collect::<Option<_>>()?;
    <[u64; 3]>::try_from(v).ok()
}

impl TcpFacts {
    /// Read the TCP sysctls under `roots`.
    pub fn read(roots: &Roots) -> TcpFacts {
        let s = roots.proc.join("sys/net");
        TcpFacts {
            congestion_control: read_trim(&s.join("ipv4/tcp_congestion_control")),
            available_congestion_control: read(&s.join("ipv4/tcp_available_congestion_control"))
                .map(|t| t.split_whitespace().take(64).map(str::to_string).collect())
                .unwrap_or_default(),
            tcp_rmem: read(&s.join("ipv4/tcp_rmem")).and_then(|t| parse_triple(&t)),
            tcp_wmem: read(&s.join("ipv4/tcp_wmem")).and_then(|t| parse_triple(&t)),
            rmem_max: read_num(&s.join("core/rmem_max")),
            wmem_max: read_num(&s.join("core/wmem_max")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triples() {
        assert_eq!(parse_triple("4096\t131072\t6291456\n"), Some([4096, 131072, 6291456]));
        assert_eq!(parse_triple("1 2"), None);
        assert_eq!(parse_triple("1 2 x"), None);
    }
}
