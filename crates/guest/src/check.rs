//! Compares the guest topology a plan asked for with what the guest kernel
//! reported, cell by cell, so a mismatch names the cell, the property, and
//! both values.

use crate::report::GuestReport;
use numaplace_plan::GuestTopology;
use numaplace_topo::{format_size, CpuSet};
use std::collections::BTreeMap;

/// One property compared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// Which guest node the property belongs to (`None`: the whole guest).
    pub cell: Option<u32>,
    /// What was compared (`cpus`, `memory`, `distances`, `threads of cpu 3`).
    pub what: String,
    /// What the plan says.
    pub expected: String,
    /// What the guest saw.
    pub found: String,
}

impl Check {
    /// Whether the guest agreed with the plan.
    pub fn ok(&self) -> bool {
        self.expected == self.found
    }
}

/// The outcome of one verification.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Every property compared, in a stable order.
    pub checks: Vec<Check>,
}

impl Verdict {
    /// Whether every check matched.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(Check::ok)
    }

    /// The checks that did not match.
    pub fn mismatches(&self) -> impl Iterator<Item = &Check> {
        self.checks.iter().filter(|c| !c.ok())
    }
}

fn list(set: &CpuSet) -> String {
    if set.is_empty() {
        "(none)".into()
    } else {
        set.to_string()
    }
}

fn row(values: &[u32]) -> String {
    values.iter().map(u32::to_string).collect::<Vec<_>>().join(" ")
}

/// Compares a planned guest topology with a guest's report.
///
/// CPU topology is compared by grouping, not by raw ids: QEMU numbers
/// guest cores from its own APIC layout, so what must hold is that the
/// vCPUs the plan puts on one core are exactly one core's siblings in the
/// guest, and that the vCPUs of one planned socket share one package id
/// which no other socket uses.
///
/// With CPU hot-add (`online`: the vCPUs online at boot, fewer than the
/// plan's), only those are present in the guest: each cell is expected to
/// hold its online vCPUs, and the guest must know every planned vCPU as
/// possible, so that one added later has its place.
pub fn compare(expected: &GuestTopology, online: Option<u32>, report: &GuestReport) -> Verdict {
    let mut checks = Vec::new();
    let planned: u32 = expected.cells.iter().map(|c| c.vcpus.len() as u32).sum();
    let online = online.unwrap_or(planned).min(planned);
    if online < planned {
        checks.push(Check {
            cell: None,
            what: "possible cpus".into(),
            expected: list(&(0..planned).collect()),
            found: report.possible.as_ref().map_or("(not reported)".into(), list),
        });
    }
    let is_online = |v: u32| v < online;
    let planned_nodes: Vec<u32> = expected.cells.iter().map(|c| c.id).collect();
    let seen_nodes: Vec<u32> = report.nodes.keys().copied().collect();
    checks.push(Check {
        cell: None,
        what: "node list".into(),
        expected: format!("{planned_nodes:?}"),
        found: format!("{seen_nodes:?}"),
    });
    for cell in &expected.cells {
        let node = report.nodes.get(&cell.id);
        checks.push(Check {
            cell: Some(cell.id),
            what: "cpus".into(),
            expected: list(&cell.vcpus.iter().filter(|&v| is_online(v)).collect()),
            found: node.map_or("(node missing)".into(), |n| list(&n.cpus)),
        });
        checks.push(Check {
            cell: Some(cell.id),
            what: "memory".into(),
            expected: format_size(cell.memory_bytes),
            found: report.node_memory(cell.id).map_or("(node missing)".into(), format_size),
        });
        checks.push(Check {
            cell: Some(cell.id),
            what: "distances".into(),
            expected: row(&cell.distances),
            found: node.map_or("(node missing)".into(), |n| row(&n.distances)),
        });
    }
    let threads = expected.threads.max(1);
    let per_die = expected.cores.max(1) * threads;
    let per_socket = expected.dies.max(1) * per_die;
    let total: u32 = expected.sockets * per_socket;
    let mut socket_ids: BTreeMap<u32, Option<i64>> = BTreeMap::new();
    for vcpu in (0..total).filter(|&v| is_online(v)) {
        let core_start = vcpu - vcpu % threads;
        let want: CpuSet = (core_start..core_start + threads).filter(|&v| is_online(v)).collect();
        let seen = report.cpus.get(&vcpu);
        let cell = expected.cells.iter().find(|c| c.vcpus.contains(vcpu)).map(|c| c.id);
        checks.push(Check {
            cell,
            what: format!("thread siblings of cpu {vcpu}"),
            expected: list(&want),
            found: seen.map_or("(cpu missing)".into(), |c| list(&c.siblings)),
        });
        socket_ids.entry(vcpu / per_socket).or_insert(seen.map(|c| c.package));
    }
    // Each planned socket must map to its own guest package, and every vCPU
    // of it must report that package.
    for vcpu in (0..total).filter(|&v| is_online(v)) {
        let socket = vcpu / per_socket;
        let want = socket_ids.get(&socket).copied().flatten();
        let found = report.cpus.get(&vcpu).map(|c| c.package);
        if want.is_some() && found != want {
            checks.push(Check {
                cell: expected.cells.iter().find(|c| c.vcpus.contains(vcpu)).map(|c| c.id),
                what: format!("package of cpu {vcpu}"),
                expected: format!("same as cpu {}", socket * per_socket),
                found: format!("{found:?}"),
            });
        }
    }
    let distinct: std::collections::BTreeSet<i64> = socket_ids.values().flatten().copied().collect();
    checks.push(Check {
        cell: None,
        what: "distinct packages".into(),
        // With hot-add, the sockets holding a vCPU online at boot.
        expected: if online < planned { socket_ids.len().to_string() } else { expected.sockets.to_string() },
        found: distinct.len().to_string(),
    });
    if expected.dies > 1 {
        // Each planned die is its own (package, die) in the guest, the
        // same for all of its vCPUs.
        let mut die_ids: BTreeMap<u32, (i64, i64)> = BTreeMap::new();
        for vcpu in (0..total).filter(|&v| is_online(v)) {
            let Some(c) = report.cpus.get(&vcpu) else { continue };
            let first = *die_ids.entry(vcpu / per_die).or_insert((c.package, c.die));
            if first != (c.package, c.die) {
                checks.push(Check {
                    cell: expected.cells.iter().find(|cell| cell.vcpus.contains(vcpu)).map(|cell| cell.id),
                    what: format!("die of cpu {vcpu}"),
                    expected: format!("same as cpu {}", vcpu - vcpu % per_die),
                    found: format!("package {} die {}", c.package, c.die),
                });
            }
        }
        let distinct: std::collections::BTreeSet<(i64, i64)> = die_ids.values().copied().collect();
        checks.push(Check {
            cell: None,
            what: "distinct dies".into(),
            expected: die_ids.len().to_string(),
            found: distinct.len().to_string(),
        });
    }
    // The kernel says when its CPU topology contradicts its nodes (a core,
    // cache or die in two nodes), and then drops part of it.
    checks.push(Check {
        cell: None,
        what: "topology warnings".into(),
        expected: "none".into(),
        found: if report.warnings.is_empty() { "none".into() } else { report.warnings.join(" | ") },
    });
    Verdict { checks }
}

/// virtio's PCI vendor id and virtio-rng's device ids (transitional and
/// modern): the stand-in a test guest gets for a passed-through device.
const VIRTIO_VENDOR: u32 = 0x1af4;
const VIRTIO_RNG: [u32; 2] = [0x1005, 0x1044];

/// Compares the guest cells the plan's devices are near (one entry per
/// device, from [`numaplace_emit::pcie::expanders`]) with the `numa_node`
/// the guest gives their stand-ins (virtio-rng behind the same expander
/// buses), as sorted lists: `device cells`.
pub fn compare_devices(expected: &[u32], report: &GuestReport) -> Option<Check> {
    if expected.is_empty() {
        return None;
    }
    let mut want: Vec<u32> = expected.to_vec();
    want.sort_unstable();
    let mut seen: Vec<i32> = report
        .pci
        .iter()
        .filter(|d| d.vendor == VIRTIO_VENDOR && VIRTIO_RNG.contains(&d.device))
        .map(|d| d.node)
        .collect();
    seen.sort_unstable();
    let words = |v: Vec<String>| if v.is_empty() { "(none)".to_string() } else { v.join(" ") };
    Some(Check {
        cell: None,
        what: "device cells".into(),
        expected: words(want.iter().map(u32::to_string).collect()),
        found: words(seen.iter().map(i32::to_string).collect()),
    })
}
