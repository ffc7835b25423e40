//! CPU facts: model, logical CPUs, physical cores, SMT, NUMA nodes, frequency governor and the
//! instruction-set extensions that make bulk encryption fast.

use super::{parse_cpu_list, read, read_num, read_trim, Roots};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// Crypto-relevant CPU flags from /proc/cpuinfo.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuFlags {
    /// A flags line was found in /proc/cpuinfo (all flags below are false otherwise).
    pub known: bool,
    /// AES-NI (x86 `aes`, or arm64 `aes`).
    pub aes: bool,
    /// Vector AES (`vaes`): AES-GCM on 256/512-bit registers.
    pub vaes: bool,
    /// AVX2 (fast ChaCha20).
    pub avx2: bool,
    /// Carry-less multiply (x86 `pclmulqdq`, arm64 `pmull`), needed for fast GHASH.
    pub pclmulqdq: bool,
}

/// What the host's CPUs look like.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuFacts {
    /// Model name (first `model name` line; empty if unknown).
    pub model: String,
    /// Logical CPUs online.
    pub logical_cpus: u32,
    /// Physical cores (distinct package/core pairs; logical CPUs if the topology is unknown).
    pub cores: u32,
    /// Simultaneous multithreading active (`None` if unknown).
    pub smt_active: Option<bool>,
    /// NUMA nodes online (1 if the kernel has no NUMA view).
    pub numa_nodes: u32,
    /// Frequency governor of CPU 0 (`None` without cpufreq, common in VMs).
    pub governor: Option<String>,
    /// Crypto-relevant flags.
    pub flags: CpuFlags,
}

impl CpuFacts {
    /// Read the CPU facts under `roots`.
    pub fn read(roots: &Roots) -> CpuFacts {
        let cpu_dir = roots.sys.join("devices/system/cpu");
        let cpuinfo = read(&roots.proc.join("cpuinfo")).unwrap_or_default();
        let field = |key: &str| {
            cpuinfo.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == key).then(|| v.trim().to_string())
            })
        };
        let online = read(&cpu_dir.join("online")).and_then(|s| parse_cpu_list(&s)).unwrap_or_default();
        let logical_cpus = if online.is_empty() {
            cpuinfo.lines().filter(|l| l.split(':').next().is_some_and(|k| k.trim() == "processor")).count() as u32
        } else {
            online.len() as u32
        };
        let mut pairs = BTreeSet::new();
        for c in &online {
            let t = cpu_dir.join(format!("cpu{c}/topology"));
            if let (Some(p), Some(k)) =
                (read_num::<i64>(&t.join("physical_package_id")), read_num::<i64>(&t.join("core_id")))
            {
                pairs.insert((p, k));
            }
        }
        let cores = if pairs.is_empty() { logical_cpus } else { pairs.len() as u32 };
        let smt_active = read_num::<u8>(&cpu_dir.join("smt/active")).map(|v| v == 1).or_else(|| {
            read(&cpu_dir.join("cpu0/topology/thread_siblings_list"))
                .and_then(|s| parse_cpu_list(&s))
                .map(|v| v.len() > 1)
        });
        let numa_nodes = read(&roots.sys.join("devices/system/node/online"))
            .and_then(|s| parse_cpu_list(&s))
            .map(|v| v.len() as u32)
            .filter(|n| *n > 0)
            .unwrap_or(1);
        let flags_line = field("flags").or_else(|| field("Features")).unwrap_or_default();
        let set: BTreeSet<&str> = flags_line.split_whitespace().collect();
        let flags = CpuFlags {
            known: !flags_line.is_empty(),
            aes: set.contains("aes"),
            vaes: set.contains("vaes"),
            avx2: set.contains("avx2") || set.contains("asimd"),
            pclmulqdq: set.contains("pclmulqdq") || set.contains("pmull"),
        };
        CpuFacts {
            model: field("model name").or_else(|| field("Model")).unwrap_or_default(),
            logical_cpus: logical_cpus.max(1),
            cores: cores.max(1),
            smt_active,
            numa_nodes,
            governor: read_trim(&cpu_dir.join("cpu0/cpufreq/scaling_governor")),
            flags,
        }
    }
}
