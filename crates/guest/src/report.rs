//! What the guest kernel saw, as printed by the initramfs's `/init` on the
//! serial console, and the parser for it.
//!
//! The script prints plain `key value` lines between two markers, so the
//! parser does not care about the kernel's own boot messages around them.

use numaplace_topo::CpuSet;
use std::collections::BTreeMap;

/// Marker printed before the report.
pub const BEGIN: &str = "NUMAPLACE-BEGIN";
/// Marker printed after the report.
pub const END: &str = "NUMAPLACE-END";

/// The `/init` of the test initramfs: mounts proc and sysfs, prints the
/// NUMA and CPU topology the kernel built, and powers off. Memory is
/// reported as a count of memory blocks because a node's `MemTotal` is
/// always less than what was configured (the kernel keeps some), while
/// the blocks add up exactly.
pub const INIT_SCRIPT: &str = r#"#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
cd /sys/devices/system
echo NUMAPLACE-BEGIN
echo "block_size $(cat memory/block_size_bytes)"
echo "possible $(cat cpu/possible)"
for n in node/node[0-9]*; do
  id=${n#node/node}
  echo "node $id cpus $(cat $n/cpulist)"
  echo "node $id distance $(cat $n/distance)"
  c=0
  for b in $n/memory[0-9]*; do [ -e "$b" ] && c=$((c+1)); done
  echo "node $id blocks $c"
done
for c in cpu/cpu[0-9]*; do
  id=${c#cpu/cpu}
  t=$c/topology
  echo "cpu $id package $(cat $t/physical_package_id) die $(cat $t/die_id 2>/dev/null || echo 0) core $(cat $t/core_id) siblings $(cat $t/thread_siblings_list)"
done
for d in /sys/bus/pci/devices/*; do
  [ -e "$d/numa_node" ] && echo "pci ${d##*/} $(cat $d/vendor) $(cat $d/device) node $(cat $d/numa_node)"
done
/bin/busybox dmesg | /bin/busybox grep -F "not on the same node" | /bin/busybox sed 's/^/warning /'
echo NUMAPLACE-END
/bin/busybox poweroff -f
"#;

/// One guest NUMA node as the guest kernel reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeReport {
    /// `cpulist`.
    pub cpus: CpuSet,
    /// `distance` row.
    pub distances: Vec<u32>,
    /// Number of memory blocks.
    pub blocks: u64,
}

/// One guest CPU as the guest kernel reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuReport {
    /// `physical_package_id`.
    pub package: i64,
    /// `die_id` (0 where the kernel has none).
    pub die: i64,
    /// `core_id`.
    pub core: i64,
    /// `thread_siblings_list`.
    pub siblings: CpuSet,
}

/// One guest PCI device as the guest kernel reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PciReport {
    /// `dddd:bb:ss.f`.
    pub address: String,
    /// PCI vendor id.
    pub vendor: u32,
    /// PCI device id.
    pub device: u32,
    /// `numa_node` (-1: the kernel knows none).
    pub node: i32,
}

/// Everything the guest printed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GuestReport {
    /// Memory block size in bytes.
    pub block_size: u64,
    /// Nodes by id.
    pub nodes: BTreeMap<u32, NodeReport>,
    /// CPUs by id (those present).
    pub cpus: BTreeMap<u32, CpuReport>,
    /// The CPUs the guest may ever have (`cpu/possible`): with CPU
    /// hot-add, more than are present.
    pub possible: Option<CpuSet>,
    /// Kernel warnings that its CPU topology contradicts its NUMA nodes
    /// (a core, cache or die spanning two nodes: "... is not on the same
    /// node"); the scheduler then ignores part of the topology.
    pub warnings: Vec<String>,
    /// PCI devices and the NUMA node the guest gives each (from its ACPI
    /// tables: a device behind an expander bus gets the bus's node).
    pub pci: Vec<PciReport>,
}

impl GuestReport {
    /// Memory of a node in bytes (blocks x block size).
    pub fn node_memory(&self, node: u32) -> Option<u64> {
        self.nodes.get(&node).map(|n| n.blocks * self.block_size)
    }
}

/// Why the serial output holds no usable report.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    /// The begin marker never came: the guest did not boot to `/init`.
    #[error("the guest printed no report (no {BEGIN} line): it did not reach /init; last output: {tail}")]
    NoReport {
        /// The last lines of output, for diagnosis.
        tail: String,
    },
    /// The end marker never came: the guest stopped half way.
    #[error("the guest report is cut off (no {END} line)")]
    Truncated,
    /// A line that does not fit the report's form.
    #[error("unexpected report line `{0}`")]
    BadLine(String),
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}

/// Parses the serial console output of a guest.
pub fn parse(serial: &str) -> Result<GuestReport, ReportError> {
    // Serial output carries \r and terminal escapes; only whole report
    // lines between the markers matter.
    let clean: Vec<&str> = serial.lines().map(|l| l.trim_matches(|c: char| c == '\r' || c.is_whitespace())).collect();
    let start =
        clean.iter().position(|l| l.ends_with(BEGIN)).ok_or_else(|| ReportError::NoReport { tail: tail(serial) })?;
    let mut report = GuestReport::default();
    for line in &clean[start + 1..] {
        if *line == END {
            return Ok(report);
        }
        if line.is_empty() || line.starts_with('[') {
            // A kernel message interleaved with the script's output.
            continue;
        }
        let bad = || ReportError::BadLine(line.chars().take(120).collect());
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["possible", list] => {
                report.possible = Some(CpuSet::parse_list(list).map_err(|_| bad())?);
            }
            ["block_size", hex] => {
                report.block_size = u64::from_str_radix(hex, 16).map_err(|_| bad())?;
            }
            ["node", id, key, rest @ ..] => {
                let id: u32 = id.parse().map_err(|_| bad())?;
                let node = report.nodes.entry(id).or_default();
                match *key {
                    "cpus" => node.cpus = CpuSet::parse_list(&rest.join(",")).map_err(|_| bad())?,
                    "distance" => {
                        node.distances = rest.iter().map(|d| d.parse()).collect::<Result<_, _>>().map_err(|_| bad())?;
                    }
                    "blocks" => node.blocks = rest.first().and_then(|b| b.parse().ok()).ok_or_else(bad)?,
                    _ => return Err(bad()),
                }
            }
            ["cpu", id, "package", pkg, rest @ ..] => {
                // Reports from before dies have no `die` field.
                let (die, core, sib) = match rest {
                    ["die", die, "core", core, "siblings", sib] => (*die, *core, *sib),
                    ["core", core, "siblings", sib] => ("0", *core, *sib),
                    _ => return Err(bad()),
                };
                let cpu = CpuReport {
                    package: pkg.parse().map_err(|_| bad())?,
                    die: die.parse().map_err(|_| bad())?,
                    core: core.parse().map_err(|_| bad())?,
                    siblings: CpuSet::parse_list(sib).map_err(|_| bad())?,
                };
                report.cpus.insert(id.parse().map_err(|_| bad())?, cpu);
            }
            ["pci", address, vendor, device, "node", node] => {
                let hex = |t: &str| u32::from_str_radix(t.trim_start_matches("0x"), 16);
                report.pci.push(PciReport {
                    address: (*address).to_string(),
                    vendor: hex(vendor).map_err(|_| bad())?,
                    device: hex(device).map_err(|_| bad())?,
                    node: node.parse().map_err(|_| bad())?,
                });
            }
            ["warning", ..] => {
                report.warnings.push(line.trim_start_matches("warning").trim().chars().take(200).collect());
            }
            _ => return Err(bad()),
        }
    }
    Err(ReportError::Truncated)
}
