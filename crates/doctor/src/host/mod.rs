//! Host inspection for `linerate doctor` and for the host metadata in benchmark results.
//!
//! Everything here reads the kernel's view of the machine: sysfs and procfs through a [`Roots`]
//! value (so tests can point it at fixture trees instead of `/sys` and `/proc`), the ethtool
//! generic-netlink family for offloads ([`ethtool`]), `tc` for the qdisc ([`qdisc`]), and, for
//! a peer, sockets ([`path`]). Readers never panic on odd file contents: a value that cannot be
//! read or parsed is `None`. The judgement of what the facts mean lives in
//! [`mod@crate::analyze`]. Issue 8.

pub mod aead;
pub mod copycost;
pub mod cpu;
pub mod ethtool;
pub mod nic;
pub mod path;
pub mod qdisc;
pub mod repeat;
pub mod tcp;

use std::path::{Path, PathBuf};

/// Where sysfs and procfs are mounted; `/sys` and `/proc` on a live host, fixture trees in tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Roots {
    /// The sysfs root (normally `/sys`).
    pub sys: PathBuf,
    /// The procfs root (normally `/proc`).
    pub proc: PathBuf,
}

impl Default for Roots {
    fn default() -> Self {
        Roots { sys: PathBuf::from("/sys"), proc: PathBuf::from("/proc") }
    }
}

impl Roots {
    /// Roots under one directory holding `sys/` and `proc/` (fixture trees).
    pub fn under(dir: &Path) -> Roots {
        Roots { sys: dir.join("sys"), proc: dir.join("proc") }
    }
}

/// Largest file a reader takes in; sysfs/procfs values are small, `/proc/interrupts` and
/// `/proc/cpuinfo` on big machines are the largest.
const MAX_READ: u64 = 8 << 20;

/// Read a small text file; `None` if it is missing, unreadable or not UTF-8.
pub(crate) fn read(path: &Path) -> Option<String> {
    use std::io::Read;
    let f = std::fs::File::open(path).ok()?;
    let mut s = String::new();
    f.take(MAX_READ).read_to_string(&mut s).ok()?;
    Some(s)
}

/// Read a file holding one value, trimmed; `None` if missing or unreadable.
pub fn read_trim(path: &Path) -> Option<String> {
    read(path).map(|s| s.trim().to_string())
}

/// Read a file holding one number.
pub(crate) fn read_num<T: std::str::FromStr>(path: &Path) -> Option<T> {
    read_trim(path)?.parse().ok()
}

/// Parse a kernel CPU list ("0-3,8,10-11") into CPU numbers; `None` if malformed. Capped at
/// 65536 CPUs so a hostile file cannot make us allocate without bound.
pub fn parse_cpu_list(s: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?),
            None => {
                let a = part.trim().parse::<u32>().ok()?;
                (a, a)
            }
        };
        if b < a || out.len() + (b - a) as usize > 65_536 {
            return None;
        }
        out.extend(a..=b);
    }
    Some(out)
}

/// Parse a kernel CPU mask in hex with comma-separated 32-bit words ("00000000,0000000f");
/// returns the CPUs set. `None` if malformed.
pub fn parse_cpu_mask(s: &str) -> Option<Vec<u32>> {
    let words: Vec<&str> = s.trim().split(',').collect();
    if words.len() > 2048 {
        return None;
    }
    let mut cpus = Vec::new();
    for (i, w) in words.iter().rev().enumerate() {
        let v = u32::from_str_radix(w, 16).ok()?;
        for bit in 0..32 {
            if v & (1 << bit) != 0 {
                cpus.push(i as u32 * 32 + bit);
            }
        }
    }
    Some(cpus)
}

pub use linerate_model::host::{HostMetadata, IfaceMetadata};

/// Collect [`HostMetadata`] from the live host (`/sys`, `/proc`, netlink, `tc`). Takes a few
/// milliseconds; never fails (unknown values are empty or `None`).
pub fn metadata() -> HostMetadata {
    metadata_at(&Roots::default(), true)
}

/// [`metadata`] over given roots; `live` also asks netlink and `tc` (off for fixture trees).
pub fn metadata_at(roots: &Roots, live: bool) -> HostMetadata {
    let cpu = cpu::CpuFacts::read(roots);
    let tcp = tcp::TcpFacts::read(roots);
    let interfaces = nic::list(roots, false)
        .into_iter()
        .map(|name| {
            let dir = roots.sys.join("class/net").join(&name);
            IfaceMetadata {
                mtu: read_num(&dir.join("mtu")),
                speed_mbps: nic::speed(&dir),
                qdisc: if live { qdisc::show(&name).ok().and_then(|q| q.root.map(|r| r.kind)) } else { None },
                offloads: if live {
                    ethtool::features(&name).ok().map(|f| ethtool::Offloads::from_features(&f))
                } else {
                    None
                },
                name,
            }
        })
        .collect();
    HostMetadata {
        kernel: read_trim(&roots.proc.join("sys/kernel/osrelease")).unwrap_or_default(),
        hostname: read_trim(&roots.proc.join("sys/kernel/hostname")).unwrap_or_default(),
        cpu_model: cpu.model.clone(),
        logical_cpus: cpu.logical_cpus,
        cores: cpu.cores,
        congestion_control: tcp.congestion_control.unwrap_or_default(),
        interfaces,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_and_masks() {
        assert_eq!(parse_cpu_list("0-3,8,10-11").unwrap(), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_cpu_list("\n").unwrap(), Vec::<u32>::new());
        assert!(parse_cpu_list("3-1").is_none());
        assert!(parse_cpu_list("0-4000000000").is_none());
        assert_eq!(parse_cpu_mask("00000000,0000000f").unwrap(), vec![0, 1, 2, 3]);
        assert_eq!(parse_cpu_mask("1,0").unwrap(), vec![32]);
        assert!(parse_cpu_mask("xyz").is_none());
    }

    #[test]
    fn live_metadata_names_the_kernel_and_interfaces() {
        let m = metadata();
        let j = serde_json::to_string(&m).unwrap();
        eprintln!("{j}");
        assert!(!m.kernel.is_empty() && m.logical_cpus >= 1 && m.cores >= 1, "{j}");
        assert!(m.interfaces.iter().all(|i| i.name != "lo"), "{j}");
        let back: HostMetadata = serde_json::from_str(&j).unwrap();
        assert_eq!(back, m);
    }
}
