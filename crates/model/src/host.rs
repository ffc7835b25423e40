//! Host metadata recorded beside benchmark results: what `linerate_doctor::host::metadata`
//! reads from the machine ([`HostMetadata`]), and the description each side of a benchmark
//! sends with its result and the bench document keeps ([`HostInfo`]: the machine, a few TCP
//! sysctls, and the test's own facts). One typed shape from the reader through the wire
//! (`linerate_proto::bench::SideReport::host`) to the document and the stored run; its JSON
//! field names are the ones the free-form description had, so older peers and documents read.

use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;

/// The machine: kernel, CPU, default congestion control, interfaces (`linerate bench --json`
/// `hosts.local`). Every field reads as empty when absent, so a partial description parses.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HostMetadata {
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// Host name.
    pub hostname: String,
    /// CPU model name from /proc/cpuinfo (empty if unknown).
    pub cpu_model: String,
    /// Logical CPUs online.
    pub logical_cpus: u32,
    /// Physical cores (logical CPUs when the topology is unknown).
    pub cores: u32,
    /// TCP congestion control in use by default (`net.ipv4.tcp_congestion_control`).
    pub congestion_control: String,
    /// Network interfaces, loopback excluded.
    pub interfaces: Vec<IfaceMetadata>,
}

/// One interface in [`HostMetadata`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IfaceMetadata {
    /// Interface name.
    pub name: String,
    /// MTU in bytes.
    pub mtu: Option<u32>,
    /// Link speed in Mbit/s (`None` for virtual links that report none).
    pub speed_mbps: Option<u64>,
    /// Root qdisc kind (`fq`, `fq_codel`, `mq`, `noqueue`...), if `tc` could tell.
    pub qdisc: Option<String>,
    /// Offloads in effect, if the ethtool netlink family answered.
    pub offloads: Option<Offloads>,
}

/// Offloads in effect on an interface (`None` when the device does not list the feature).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offloads {
    /// TCP segmentation offload (`tx-tcp-segmentation`).
    pub tso: Option<bool>,
    /// Generic segmentation offload (`tx-generic-segmentation`).
    pub gso: Option<bool>,
    /// Generic receive offload (`rx-gro`).
    pub gro: Option<bool>,
    /// Large receive offload (`rx-lro`).
    pub lro: Option<bool>,
    /// Receive checksum offload (`rx-checksum`).
    pub rx_checksum: Option<bool>,
    /// Transmit checksum offload (any of `tx-checksum-ipv4`, `-ipv6`, `-ip-generic`).
    pub tx_checksum: Option<bool>,
}

impl Offloads {
    /// Pick the offloads out of a full feature map (name → active).
    pub fn from_features(f: &BTreeMap<String, bool>) -> Offloads {
        let one = |n: &str| f.get(n).copied();
        let tx_csum: Vec<bool> = ["tx-checksum-ipv4", "tx-checksum-ipv6", "tx-checksum-ip-generic"]
            .iter()
            .filter_map(|n| f.get(*n).copied())
            .collect();
        Offloads {
            tso: one("tx-tcp-segmentation"),
            gso: one("tx-generic-segmentation"),
            gro: one("rx-gro"),
            lro: one("rx-lro"),
            rx_checksum: one("rx-checksum"),
            tx_checksum: if tx_csum.is_empty() { None } else { Some(tx_csum.iter().any(|b| *b)) },
        }
    }
}

/// One side's description in a benchmark result: the machine, its TCP buffer sysctls, and
/// what this test did on it. Fields absent in older descriptions read as empty.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HostInfo {
    /// The machine.
    #[serde(flatten)]
    pub machine: HostMetadata,
    /// `net.ipv4.tcp_timestamps`, as the file says it (empty where it could not be read).
    pub tcp_timestamps: String,
    /// `net.core.default_qdisc`.
    pub default_qdisc: String,
    /// `net.core.rmem_max`.
    pub rmem_max: String,
    /// `net.core.wmem_max`.
    pub wmem_max: String,
    /// `net.ipv4.tcp_rmem` (three numbers).
    pub tcp_rmem: String,
    /// `net.ipv4.tcp_wmem`.
    pub tcp_wmem: String,
    /// The congestion control this test's data sockets used, as read back from them (TCP tests).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub congestion_control_in_use: Option<String>,
    /// The core this side's workers were pinned to (`-A`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workers_pinned_to_core: Option<u32>,
    /// Tests the agent was running when this one ended, this one included: its machine's CPU
    /// figures cover them all (the server's description only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrent_tests: Option<u64>,
    /// Packets the interface that routes to the peer counted over the test (UDP tests, where
    /// the route's interface was found): every packet on it, the warm-up, the control
    /// connection and other traffic included, beside which the tool's own count is read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interface_packets: Option<InterfacePackets>,
}

/// An interface's packet counters (`/sys/class/net/IF/statistics/{rx,tx}_packets`) moved over
/// a window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct InterfacePackets {
    /// The interface.
    pub name: String,
    /// Packets it received in the window.
    pub rx_packets: u64,
    /// Packets it sent.
    pub tx_packets: u64,
    /// The window, seconds.
    pub seconds: f64,
}

/// Reads a field that may be `null` as its default (a side that had nothing to describe).
pub fn null_as_default<'de, D: Deserializer<'de>, T: Deserialize<'de> + Default>(d: D) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_description_keeps_the_free_form_field_names() {
        let h = HostInfo {
            machine: HostMetadata { kernel: "6.1".into(), cores: 4, ..HostMetadata::default() },
            tcp_rmem: "4096 131072 6291456".into(),
            congestion_control_in_use: Some("bbr".into()),
            concurrent_tests: Some(2),
            ..HostInfo::default()
        };
        let v = serde_json::to_value(&h).unwrap();
        assert_eq!(v["kernel"], "6.1");
        assert_eq!(v["cores"], 4);
        assert_eq!(v["tcp_rmem"], "4096 131072 6291456");
        assert_eq!(v["congestion_control_in_use"], "bbr");
        assert_eq!(v["concurrent_tests"], 2);
        assert!(v.get("workers_pinned_to_core").is_none(), "absent facts are left out: {v}");
        assert_eq!(serde_json::from_value::<HostInfo>(v).unwrap(), h);
    }

    #[test]
    fn a_partial_or_older_description_reads() {
        let h: HostInfo = serde_json::from_str(r#"{"congestion_control_in_use":"bbr","extra":1}"#).unwrap();
        assert_eq!(h.congestion_control_in_use.as_deref(), Some("bbr"));
        assert_eq!(h.machine, HostMetadata::default());
        assert!(serde_json::from_str::<HostInfo>(r#"{"cores":"four"}"#).is_err(), "a mistyped field is refused");
    }
}
