//! Per-interface facts from sysfs and procfs: link, MTU, driver, PCIe link, queues, IRQs, RPS.

use super::{parse_cpu_list, parse_cpu_mask, read, read_num, read_trim, Roots};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::Path;

/// A PCIe link as negotiated and as the card could do (from the device's sysfs attributes).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PcieLink {
    /// Negotiated transfer rate per lane in GT/s (`current_link_speed`).
    pub current_gts: f64,
    /// Negotiated lanes (`current_link_width`).
    pub current_width: u32,
    /// Highest rate the card supports in GT/s (`max_link_speed`).
    pub max_gts: f64,
    /// Lanes the card has (`max_link_width`).
    pub max_width: u32,
}

/// One interrupt line serving the interface.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IrqFacts {
    /// IRQ number.
    pub irq: u32,
    /// Action name from /proc/interrupts (e.g. `eth0-TxRx-0`).
    pub name: String,
    /// CPUs allowed to take it (`/proc/irq/N/smp_affinity_list`).
    pub affinity: Vec<u32>,
    /// CPUs that actually took some of it so far (non-zero counts in /proc/interrupts).
    pub cpus_hit: Vec<u32>,
}

/// What sysfs and procfs say about one network interface.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NicFacts {
    /// Interface name.
    pub name: String,
    /// MTU in bytes.
    pub mtu: Option<u32>,
    /// Link speed in Mbit/s (`None` when down, unknown, or only nominal: [`nominal`]).
    pub speed_mbps: Option<u64>,
    /// The speed the kernel reports for an interface where it is only nominal ([`nominal`]: a
    /// TAP's 10 Mbit/s, a veth's 10 Gbit/s), Mbit/s; never a line rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nominal_speed_mbps: Option<u64>,
    /// `operstate` (up, down, unknown...).
    pub operstate: Option<String>,
    /// Kernel driver bound to the device (`device/driver` link), `None` for virtual interfaces.
    pub driver: Option<String>,
    /// PCIe link, when the device is a PCIe function.
    pub pcie: Option<PcieLink>,
    /// Receive queues (`queues/rx-*`).
    pub rx_queues: u32,
    /// Transmit queues (`queues/tx-*`).
    pub tx_queues: u32,
    /// NUMA node of the device (`device/numa_node`; `None` if unknown or -1).
    pub numa_node: Option<u32>,
    /// CPUs enabled for receive packet steering, per receive queue (`rps_cpus`).
    pub rps_cpus: Vec<Vec<u32>>,
    /// Interrupt lines of the device or naming the interface.
    pub irqs: Vec<IrqFacts>,
}

/// Drivers of paravirtual NICs and software links: a guest's or a namespace's view of a link
/// whose speed and cabling belong to the host behind it.
pub const VIRTUAL_DRIVERS: &[&str] = &["virtio_net", "vif", "xen-netfront", "hv_netvsc", "vmxnet3", "veth", "tun"];

impl NicFacts {
    /// Whether the interface is virtual: no device behind it (loopback, veth, bridges), or a
    /// paravirtual driver ([`VIRTUAL_DRIVERS`]).
    pub fn is_virtual(&self) -> bool {
        self.driver.as_deref().is_none_or(|d| VIRTUAL_DRIVERS.contains(&d))
    }
}

/// Interface names under `class/net`, sorted; loopback only if asked.
pub fn list(roots: &Roots, include_lo: bool) -> Vec<String> {
    let mut v: Vec<String> = match std::fs::read_dir(roots.sys.join("class/net")) {
        Ok(rd) => rd.filter_map(|e| e.ok()).filter_map(|e| e.file_name().into_string().ok()).collect(),
        Err(_) => Vec::new(),
    };
    v.retain(|n| include_lo || n != "lo");
    v.sort();
    v
}

/// Link speed of the interface directory in Mbit/s; `None` when unknown (-1, down) or only
/// [`nominal`].
pub fn speed(dir: &Path) -> Option<u64> {
    reported_speed(dir).filter(|_| !nominal(dir))
}

/// The speed the kernel reports, Mbit/s, whatever it means; `None` for -1 or none.
fn reported_speed(dir: &Path) -> Option<u64> {
    let s: i64 = read_num(&dir.join("speed"))?;
    (s > 0).then_some(s as u64)
}

/// Whether the speed the kernel reports for the interface directory is nominal, not a line
/// rate (issue 43: a TAP's 10 Mbit/s was compared as one): a software interface (no device
/// behind it: TAP/tun, veth, a bridge) or a paravirtual NIC ([`VIRTUAL_DRIVERS`]). A bond, a
/// team or a VLAN (`DEVTYPE` in its `uevent`) reports its physical members' speed, which is
/// real.
pub fn nominal(dir: &Path) -> bool {
    let driver = std::fs::read_link(dir.join("device/driver")).ok();
    match driver.as_ref().and_then(|p| p.file_name()).and_then(|f| f.to_str()) {
        Some(d) => VIRTUAL_DRIVERS.contains(&d),
        None => !read(&dir.join("uevent")).is_some_and(|u| {
            u.lines().any(|l| matches!(l.trim().strip_prefix("DEVTYPE="), Some("bond" | "team" | "vlan")))
        }),
    }
}

/// Parse `current_link_speed`-style text ("8.0 GT/s PCIe", "5 GT/s") into GT/s.
pub fn parse_gts(s: &str) -> Option<f64> {
    let v: f64 = s.split_whitespace().next()?.parse().ok()?;
    (v.is_finite() && v > 0.0).then_some(v)
}

fn count_queues(dir: &Path, prefix: &str) -> u32 {
    match std::fs::read_dir(dir.join("queues")) {
        Ok(rd) => {
            rd.filter_map(|e| e.ok()).filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with(prefix))).count()
                as u32
        }
        Err(_) => 0,
    }
}

impl NicFacts {
    /// Read everything sysfs/procfs know about interface `name`.
    pub fn read(roots: &Roots, name: &str) -> NicFacts {
        let dir = roots.sys.join("class/net").join(name);
        let dev = dir.join("device");
        let driver = std::fs::read_link(dev.join("driver"))
            .ok()
            .and_then(|p| p.file_name().and_then(|f| f.to_str()).map(str::to_string));
        let pcie = (|| {
            Some(PcieLink {
                current_gts: parse_gts(&read(&dev.join("current_link_speed"))?)?,
                current_width: read_num(&dev.join("current_link_width"))?,
                max_gts: parse_gts(&read(&dev.join("max_link_speed"))?)?,
                max_width: read_num(&dev.join("max_link_width"))?,
            })
        })();
        let rx_queues = count_queues(&dir, "rx-");
        let rps_cpus = (0..rx_queues.min(4096))
            .map(|i| {
                read(&dir.join(format!("queues/rx-{i}/rps_cpus"))).and_then(|s| parse_cpu_mask(&s)).unwrap_or_default()
            })
            .collect();
        let numa_node = read_num::<i64>(&dev.join("numa_node")).and_then(|n| u32::try_from(n).ok());
        let mut msi: BTreeSet<u32> = BTreeSet::new();
        if let Ok(rd) = std::fs::read_dir(dev.join("msi_irqs")) {
            msi.extend(rd.filter_map(|e| e.ok()).filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok()));
        }
        // Drivers name their vectors after the interface (`eth0-TxRx-0`) or after the device
        // (`virtio2-input.0`).
        let dev_name = std::fs::read_link(&dev).ok().and_then(|p| p.file_name()?.to_str().map(str::to_string));
        let irqs = read(&roots.proc.join("interrupts"))
            .map(|text| {
                let mut v = irqs_for(&text, name, &msi, roots);
                if let Some(d) = dev_name.as_deref().filter(|d| *d != name) {
                    let more = irqs_for(&text, d, &BTreeSet::new(), roots);
                    v.extend(more.into_iter().filter(|i| !msi.contains(&i.irq)));
                }
                v
            })
            .unwrap_or_default();
        NicFacts {
            name: name.to_string(),
            mtu: read_num(&dir.join("mtu")),
            speed_mbps: speed(&dir),
            nominal_speed_mbps: reported_speed(&dir).filter(|_| nominal(&dir)),
            operstate: read_trim(&dir.join("operstate")),
            driver,
            pcie,
            rx_queues,
            tx_queues: count_queues(&dir, "tx-"),
            numa_node,
            rps_cpus,
            irqs,
        }
    }
}

/// True if an interrupt action name belongs to interface `name` (`eth0`, `eth0-TxRx-3`,
/// `eth0-rx-1`, `eth0:lsc`...), not to a longer name with the same prefix (`eth01`).
fn names_iface(action: &str, name: &str) -> bool {
    action.split(|c: char| c.is_whitespace() || c == ',').any(|tok| {
        tok.strip_prefix(name).is_some_and(|rest| rest.is_empty() || rest.starts_with(['-', ':', '@', '_', '.']))
    })
}

/// The lines of /proc/interrupts for the interface: IRQs in `msi` (the device's MSI vectors)
/// or whose action names the interface; affinity from `/proc/irq/N/smp_affinity_list`.
pub fn irqs_for(text: &str, name: &str, msi: &BTreeSet<u32>, roots: &Roots) -> Vec<IrqFacts> {
    let mut lines = text.lines();
    let ncpu = lines.next().map(|h| h.split_whitespace().filter(|t| t.starts_with("CPU")).count()).unwrap_or(0);
    let mut out = Vec::new();
    for line in lines {
        let Some((num, rest)) = line.trim_start().split_once(':') else { continue };
        let Ok(irq) = num.trim().parse::<u32>() else { continue };
        let toks: Vec<&str> = rest.split_whitespace().collect();
        let counts: Vec<u64> = toks.iter().take(ncpu).map_while(|t| t.parse().ok()).collect();
        // After the counts: chip name, hwirq/edge words, then the action names.
        let tail = toks.get(counts.len()..).unwrap_or(&[]);
        let action = tail.last().copied().unwrap_or("");
        if !(msi.contains(&irq) || names_iface(&tail.join(" "), name)) {
            continue;
        }
        let cpus_hit = counts.iter().enumerate().filter(|(_, c)| **c > 0).map(|(i, _)| i as u32).collect();
        let affinity = read(&roots.proc.join(format!("irq/{irq}/smp_affinity_list")))
            .and_then(|s| parse_cpu_list(&s))
            .unwrap_or_default();
        out.push(IrqFacts { irq, name: action.to_string(), affinity, cpus_hit });
        if out.len() >= 4096 {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_link_speeds() {
        assert_eq!(parse_gts("8.0 GT/s PCIe\n"), Some(8.0));
        assert_eq!(parse_gts("5 GT/s"), Some(5.0));
        assert_eq!(parse_gts("2.5 GT/s PCIe"), Some(2.5));
        assert_eq!(parse_gts("Unknown"), None);
        assert_eq!(parse_gts(""), None);
    }

    #[test]
    fn irq_lines_match_the_interface_not_a_longer_name() {
        let text = "           CPU0       CPU1\n\
                    24:         10          0   PCI-MSI 1-edge      eth0-TxRx-0\n\
                    25:          0        900   PCI-MSI 2-edge      eth0-TxRx-1\n\
                    26:          5          5   PCI-MSI 3-edge      eth01-TxRx-0\n\
                    27:          1          0   PCI-MSI 4-edge      mlx5_comp0@pci:0000:01:00.0\n\
                   NMI:          0          0   Non-maskable interrupts\n";
        let roots = Roots::under(Path::new("/nonexistent"));
        let msi = BTreeSet::from([27]);
        let irqs = irqs_for(text, "eth0", &msi, &roots);
        let nums: Vec<u32> = irqs.iter().map(|i| i.irq).collect();
        assert_eq!(nums, vec![24, 25, 27]);
        assert_eq!(irqs[0].name, "eth0-TxRx-0");
        assert_eq!(irqs[0].cpus_hit, vec![0]);
        assert_eq!(irqs[1].cpus_hit, vec![1]);
    }
}
