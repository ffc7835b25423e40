//! Offloads (TSO, GSO, GRO, LRO, checksums) through the kernel's ethtool generic-netlink family:
//! the same `ETHTOOL_MSG_FEATURES_GET` request `ethtool -k` sends (Linux 5.6+). The messages are
//! built and parsed here over a netlink socket from rustix, bounds-checked, without unsafe code.

use rustix::net::{self, netlink, AddressFamily, RecvFlags, SendFlags, SocketType};
use std::collections::BTreeMap;
use std::time::Duration;

/// Why the features of an interface could not be read.
#[derive(Debug, thiserror::Error)]
pub enum EthtoolError {
    /// A socket call failed.
    #[error("netlink socket: {0}")]
    Io(#[from] std::io::Error),
    /// The kernel has no `ethtool` generic-netlink family (older than 5.6, or a sandbox).
    #[error("the kernel has no ethtool netlink family (Linux 5.6 or later is needed)")]
    NoFamily,
    /// The kernel answered with an error (errno), e.g. ENODEV for an unknown interface.
    #[error("the kernel refused the ethtool request for {iface}: {errno}")]
    Kernel {
        /// The interface asked about.
        iface: String,
        /// The kernel's error.
        errno: std::io::Error,
    },
    /// The reply did not parse.
    #[error("malformed netlink reply: {0}")]
    Malformed(&'static str),
    /// The interface name cannot be an interface name.
    #[error("{0:?} is not a valid interface name")]
    BadName(String),
}

pub use linerate_model::host::Offloads;

const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const NLA_F_NESTED: u16 = 1 << 15;
const NLA_TYPE_MASK: u16 = !(3 << 14);
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const ETHTOOL_MSG_FEATURES_GET: u8 = 11;
const ETHTOOL_A_FEATURES_HEADER: u16 = 1;
/// Reply attribute: features in effect.
const ETHTOOL_A_FEATURES_HW: u16 = 2;
const ETHTOOL_A_FEATURES_ACTIVE: u16 = 4;
const ETHTOOL_A_HEADER_DEV_NAME: u16 = 2;
const ETHTOOL_A_BITSET_NOMASK: u16 = 1;
const ETHTOOL_A_BITSET_BITS: u16 = 3;
const ETHTOOL_A_BITSET_BITS_BIT: u16 = 1;
const ETHTOOL_A_BITSET_BIT_NAME: u16 = 2;
const ETHTOOL_A_BITSET_BIT_VALUE: u16 = 3;

fn put_attr(buf: &mut Vec<u8>, ty: u16, payload: &[u8]) {
    buf.extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
    buf.extend_from_slice(&ty.to_ne_bytes());
    buf.extend_from_slice(payload);
    while buf.len() % 4 != 0 {
        buf.push(0);
    }
}

fn cstr(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

fn genl_message(family: u16, seq: u32, cmd: u8, version: u8, attrs: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(20 + attrs.len());
    m.extend_from_slice(&((20 + attrs.len()) as u32).to_ne_bytes());
    m.extend_from_slice(&family.to_ne_bytes());
    m.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&[cmd, version, 0, 0]);
    m.extend_from_slice(attrs);
    m
}

/// Netlink attributes in a buffer, as (type without flags, payload); stops at the first
/// malformed header.
pub(crate) fn attrs(mut b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if b.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([b[0], b[1]]) as usize;
        let ty = u16::from_ne_bytes([b[2], b[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > b.len() {
            return None;
        }
        let payload = &b[4..len];
        b = b.get((len + 3) & !3..).unwrap_or(&[]);
        Some((ty, payload))
    })
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Send one request and return the attributes of the reply with the same sequence number.
fn transact(fd: &rustix::fd::OwnedFd, msg: &[u8], seq: u32, iface: &str) -> Result<Vec<u8>, EthtoolError> {
    net::sendto(fd, msg, SendFlags::empty(), &netlink::SocketAddrNetlink::new(0, 0)).map_err(std::io::Error::from)?;
    let mut buf = vec![0u8; 128 * 1024];
    for _ in 0..16 {
        let (n, _) = net::recv(fd, &mut buf[..], RecvFlags::empty()).map_err(std::io::Error::from)?;
        let mut m = &buf[..n.min(buf.len())];
        while m.len() >= 16 {
            let len = u32_at(m, 0).ok_or(EthtoolError::Malformed("header"))? as usize;
            if len < 16 || len > m.len() {
                return Err(EthtoolError::Malformed("message length"));
            }
            let ty = u16_at(m, 4).ok_or(EthtoolError::Malformed("header"))?;
            let got_seq = u32_at(m, 8).ok_or(EthtoolError::Malformed("header"))?;
            let body = &m[16..len];
            if got_seq == seq {
                if ty == NLMSG_ERROR {
                    let code = u32_at(body, 0).ok_or(EthtoolError::Malformed("error message"))? as i32;
                    if code == 0 {
                        return Err(EthtoolError::Malformed("acknowledgement without a reply"));
                    }
                    return Err(EthtoolError::Kernel {
                        iface: iface.to_string(),
                        errno: std::io::Error::from_raw_os_error(-code),
                    });
                }
                return Ok(body.get(4..).ok_or(EthtoolError::Malformed("generic netlink header"))?.to_vec());
            }
            m = m.get((len + 3) & !3..).unwrap_or(&[]);
        }
    }
    Err(EthtoolError::Malformed("no reply to our request"))
}

fn socket() -> Result<rustix::fd::OwnedFd, EthtoolError> {
    let fd =
        net::socket(AddressFamily::NETLINK, SocketType::RAW, Some(netlink::GENERIC)).map_err(std::io::Error::from)?;
    net::bind(&fd, &netlink::SocketAddrNetlink::new(0, 0)).map_err(std::io::Error::from)?;
    net::sockopt::set_socket_timeout(&fd, net::sockopt::Timeout::Recv, Some(Duration::from_secs(1)))
        .map_err(std::io::Error::from)?;
    Ok(fd)
}

/// Parse a non-compact ethtool bitset into name → set. A bitset with `NOMASK` lists only the
/// bits that are set; otherwise each bit carries a `VALUE` flag when set.
pub(crate) fn parse_bitset(b: &[u8]) -> BTreeMap<String, bool> {
    let nomask = attrs(b).any(|(t, _)| t == ETHTOOL_A_BITSET_NOMASK);
    let mut out = BTreeMap::new();
    for (t, bits) in attrs(b) {
        if t != ETHTOOL_A_BITSET_BITS {
            continue;
        }
        for (t, bit) in attrs(bits) {
            if t != ETHTOOL_A_BITSET_BITS_BIT || out.len() >= 1024 {
                continue;
            }
            let mut name = None;
            let mut value = false;
            for (t, p) in attrs(bit) {
                match t {
                    ETHTOOL_A_BITSET_BIT_NAME => {
                        name = std::str::from_utf8(p.split(|c| *c == 0).next().unwrap_or(&[])).ok().map(str::to_string)
                    }
                    ETHTOOL_A_BITSET_BIT_VALUE => value = true,
                    _ => {}
                }
            }
            if let Some(n) = name {
                out.insert(n, nomask || value);
            }
        }
    }
    out
}

/// All features of interface `iface` the device supports, name → active (as `ethtool -k`
/// shows them, without the fixed ones the device cannot have).
pub fn features(iface: &str) -> Result<BTreeMap<String, bool>, EthtoolError> {
    if iface.is_empty() || iface.len() > 15 || iface.contains(['/', '\0']) {
        return Err(EthtoolError::BadName(iface.to_string()));
    }
    let fd = socket()?;
    let mut a = Vec::new();
    put_attr(&mut a, CTRL_ATTR_FAMILY_NAME, &cstr("ethtool"));
    let reply = match transact(&fd, &genl_message(GENL_ID_CTRL, 1, CTRL_CMD_GETFAMILY, 1, &a), 1, iface) {
        Ok(r) => r,
        Err(EthtoolError::Kernel { .. }) => return Err(EthtoolError::NoFamily),
        Err(e) => return Err(e),
    };
    let family = attrs(&reply)
        .find(|(t, _)| *t == CTRL_ATTR_FAMILY_ID)
        .and_then(|(_, p)| u16_at(p, 0))
        .ok_or(EthtoolError::NoFamily)?;
    let mut hdr = Vec::new();
    put_attr(&mut hdr, ETHTOOL_A_HEADER_DEV_NAME, &cstr(iface));
    let mut a = Vec::new();
    put_attr(&mut a, ETHTOOL_A_FEATURES_HEADER | NLA_F_NESTED, &hdr);
    let reply = transact(&fd, &genl_message(family, 2, ETHTOOL_MSG_FEATURES_GET, 1, &a), 2, iface)?;
    let mut hw = None;
    let mut active = None;
    for (t, p) in attrs(&reply) {
        match t {
            ETHTOOL_A_FEATURES_HW => hw = Some(parse_bitset(p)),
            ETHTOOL_A_FEATURES_ACTIVE => active = Some(parse_bitset(p)),
            _ => {}
        }
    }
    let active = active.ok_or(EthtoolError::Malformed("no active feature set"))?;
    // The device's changeable features, each off unless active; plus all active ones.
    let mut out: BTreeMap<String, bool> = hw.unwrap_or_default().into_keys().map(|k| (k, false)).collect();
    for (k, v) in active {
        if v {
            out.insert(k, true);
        } else {
            out.entry(k).or_insert(false);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bit(name: &str, value: bool) -> Vec<u8> {
        let mut b = Vec::new();
        put_attr(&mut b, 1, &7u32.to_ne_bytes());
        put_attr(&mut b, ETHTOOL_A_BITSET_BIT_NAME, &cstr(name));
        if value {
            put_attr(&mut b, ETHTOOL_A_BITSET_BIT_VALUE, &[]);
        }
        let mut out = Vec::new();
        put_attr(&mut out, ETHTOOL_A_BITSET_BITS_BIT | NLA_F_NESTED, &b);
        out
    }

    #[test]
    fn parses_bitsets_with_and_without_mask() {
        let mut bits = bit("tx-tcp-segmentation", true);
        bits.extend(bit("rx-lro", false));
        let mut set = Vec::new();
        put_attr(&mut set, ETHTOOL_A_BITSET_BITS | NLA_F_NESTED, &bits);
        let m = parse_bitset(&set);
        assert_eq!(m.get("tx-tcp-segmentation"), Some(&true));
        assert_eq!(m.get("rx-lro"), Some(&false));
        let mut list = Vec::new();
        put_attr(&mut list, ETHTOOL_A_BITSET_NOMASK, &[]);
        list.extend(set);
        assert_eq!(parse_bitset(&list).get("rx-lro"), Some(&true));
        let o = Offloads::from_features(&m);
        assert_eq!((o.tso, o.lro, o.gro, o.tx_checksum), (Some(true), Some(false), None, None));
    }

    #[test]
    fn truncated_attributes_stop_cleanly() {
        let mut b = Vec::new();
        put_attr(&mut b, 3, b"abcdefgh");
        for cut in 0..b.len() {
            let _ = attrs(&b[..cut]).count();
            let _ = parse_bitset(&b[..cut]);
        }
        assert_eq!(attrs(&b).count(), 1);
        assert_eq!(attrs(&[0xff, 0xff, 0, 0]).count(), 0);
    }

    #[test]
    fn loopback_features_via_netlink() {
        // The loopback device exists in every network namespace; kernels without the ethtool
        // family (before 5.6) or sandboxes without netlink are reported, not failed.
        match features("lo") {
            Ok(f) => assert!(f.contains_key("tx-generic-segmentation") || !f.is_empty(), "{f:?}"),
            Err(e) => eprintln!("ethtool netlink unavailable here: {e}"),
        }
        assert!(matches!(features("no/such"), Err(EthtoolError::BadName(_))));
    }
}
