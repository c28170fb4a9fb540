//! PCI devices worth placing guests near (GPUs and accelerators, NICs,
//! NVMe and other storage, co-processors) from `/sys/bus/pci/devices`,
//! with the node the firmware says each hangs off.
//!
//! Devices are an extra: a device whose files do not parse is skipped with
//! a warning rather than failing the whole topology.

use super::{cpu_set, text, value};
use numaplace_topo::{Device, DeviceKind, Node, NodeId, Warning};

const PCI_DIR: &str = "/sys/bus/pci/devices";

/// Subdirectories naming the OS device a PCI function drives, best first:
/// an interface name beats an InfiniBand HCA name, a controller name beats
/// a block device.
const NAME_DIRS: [&str; 7] = ["net", "infiniband", "nvme", "drm", "mic", "block", "dma"];

pub(super) fn read(tree: &dyn super::Tree, nodes: &[Node], warnings: &mut Vec<Warning>) -> Vec<Device> {
    let mut devices = Vec::new();
    for address in tree.list(PCI_DIR) {
        let dir = format!("{PCI_DIR}/{address}");
        match read_device(tree, &dir, &address, nodes, warnings) {
            Ok(Some(d)) => devices.push(d),
            Ok(None) => {}
            Err((path, reason)) => warnings.push(Warning::Skipped { path, reason }),
        }
    }
    devices
}

fn hex(tree: &dyn super::Tree, path: &str) -> Result<Option<u32>, (String, String)> {
    let v = value(tree, path).map_err(|e| (path.to_string(), e.to_string()))?;
    let Some(v) = v else { return Ok(None) };
    let digits = v.strip_prefix("0x").unwrap_or(&v);
    u32::from_str_radix(digits, 16).map(Some).map_err(|_| {
        (path.to_string(), format!("expected a hexadecimal number, found `{}`", v.chars().take(40).collect::<String>()))
    })
}

/// Whether a class code (`0xCCSSPP`) is one placement cares about.
fn interesting(class: u32) -> bool {
    let base = class >> 16;
    matches!(base, 0x01 | 0x02 | 0x03 | 0x12) || class >> 8 == 0x0b40
}

fn read_device(
    tree: &dyn super::Tree,
    dir: &str,
    address: &str,
    nodes: &[Node],
    warnings: &mut Vec<Warning>,
) -> Result<Option<Device>, (String, String)> {
    let Some(class) = hex(tree, &format!("{dir}/class"))? else {
        return Ok(None);
    };
    if !interesting(class) {
        return Ok(None);
    }
    let vendor = hex(tree, &format!("{dir}/vendor"))?;
    let device = hex(tree, &format!("{dir}/device"))?;
    let vendor_device = match (vendor, device) {
        (Some(v), Some(d)) => u16::try_from(v).ok().zip(u16::try_from(d).ok()),
        _ => None,
    };
    let node_path = format!("{dir}/numa_node");
    let node = match text(tree, &node_path) {
        Ok(Some(t)) => match t.trim().parse::<i64>() {
            Ok(n) if n < 0 => None,
            Ok(n) => {
                let id = u32::try_from(n).ok().map(NodeId);
                match id.filter(|id| nodes.iter().any(|node| node.id == *id)) {
                    Some(id) => Some(id),
                    None => {
                        warnings.push(Warning::Skipped {
                            path: node_path.clone(),
                            reason: format!(
                                "names node {n}, which is not a node of this machine; device left without a node"
                            ),
                        });
                        None
                    }
                }
            }
            Err(_) => return Err((node_path, format!("expected a node number, found `{}`", t.trim()))),
        },
        Ok(None) => None,
        Err(e) => return Err((node_path, e.to_string())),
    };
    let node = node.or_else(|| node_from_local_cpus(tree, dir, nodes));
    Ok(Some(Device {
        address: address.to_string(),
        kind: DeviceKind::from_pci_class(class),
        name: os_name(tree, dir),
        vendor_device,
        node,
    }))
}

/// The OS name of what drives the device: `eth0`, `mlx5_0`, `nvme0`,
/// `card0`. Old kernels have `net:eth0` links instead of a `net` directory.
fn os_name(tree: &dyn super::Tree, dir: &str) -> Option<String> {
    let entries = tree.list(dir);
    for kind in NAME_DIRS {
        let mut names = tree.list(&format!("{dir}/{kind}"));
        if kind == "drm" {
            // `card0` is the device; `renderD128` and `controlD64` are views of it.
            names.retain(|n| n.starts_with("card"));
        }
        if let Some(name) = names.into_iter().next() {
            return Some(name);
        }
        let prefix = format!("{kind}:");
        if let Some(name) = entries.iter().find_map(|e| e.strip_prefix(&prefix)) {
            return Some(name.to_string());
        }
    }
    None
}

/// When the firmware gives no `numa_node`, the CPUs the device is local to
/// may still point at one node: the one holding all of them, if that is
/// not every CPU of the machine (what kernels print when they do not know).
fn node_from_local_cpus(tree: &dyn super::Tree, dir: &str, nodes: &[Node]) -> Option<NodeId> {
    let (local, _) = cpu_set(tree, dir, &["local_cpulist", "local_cpus"]).ok()??;
    let all = nodes.iter().fold(numaplace_topo::CpuSet::new(), |acc, n| acc.union(&n.cpus));
    let local = local.intersection(&all);
    if local.is_empty() || local == all {
        return None;
    }
    let mut homes = nodes.iter().filter(|n| local.is_subset(&n.cpus));
    match (homes.next(), homes.next()) {
        (Some(home), None) => Some(home.id),
        _ => None,
    }
}
