//! PCI devices worth placing VMs near: GPUs, NICs, NVMe and other storage
//! controllers, each with the NUMA node its locality points at.
//!
//! hwloc hangs each I/O subtree off the smallest normal object whose CPUs
//! cover the device's `local_cpus`, so a device's node is the node whose
//! CPUs that object holds.

use super::tree::{field, info, Kind, Tree};
use crate::ParseError;
use numaplace_topo::{Device, DeviceKind, Node, NodeId};

/// PCI class 0x0c06 (InfiniBand, filed under serial bus controllers by old
/// HCAs such as QLogic's) is a network device for placement purposes.
const CLASS_INFINIBAND_SERIAL: u32 = 0x0c06;

/// Collects the devices of the tree. `node_of_numa` gives the node id of a
/// NUMA object (v1 files may hang I/O off a NUMA node directly).
pub(super) fn collect(
    tree: &Tree<'_, '_>,
    nodes: &[Node],
    node_of_numa: &dyn Fn(usize) -> Option<NodeId>,
) -> Result<Vec<Device>, ParseError> {
    let mut out = Vec::new();
    for (i, obj) in tree.objs.iter().enumerate() {
        if obj.kind != Kind::PciDev {
            continue;
        }
        let el = obj.el;
        let (Some(busid), Some(pci_type)) = (el.attribute("pci_busid"), el.attribute("pci_type")) else {
            continue;
        };
        let address = parse_busid(busid)
            .ok_or_else(|| ParseError::bad(field(el, "pci_busid"), "a PCI address such as 0000:3b:00.0", busid))?;
        let (class, vendor_device) = parse_pci_type(pci_type).ok_or_else(|| {
            ParseError::bad(
                field(el, "pci_type"),
                "a PCI class and ids such as `0200 [8086:1533] [8086:35cb] 03`",
                pci_type,
            )
        })?;
        let kind = if class == CLASS_INFINIBAND_SERIAL { DeviceKind::Nic } else { DeviceKind::from_pci_class(class) };
        if kind == DeviceKind::Other {
            continue;
        }
        let node = tree.normal_ancestor(i).and_then(|a| {
            if tree.objs.get(a).is_some_and(|o| o.kind == Kind::Numa) {
                return node_of_numa(a);
            }
            local_node(tree, a, nodes)
        });
        out.push(Device { address, kind, name: device_name(el), vendor_device: Some(vendor_device), node });
    }
    Ok(out)
}

/// The node whose CPUs the object at `anchor` holds. An object spanning
/// several nodes (an I/O hub shared by two sockets) gives the lowest one,
/// unless it is the root, where hwloc puts devices of unknown locality.
fn local_node(tree: &Tree<'_, '_>, anchor: usize, nodes: &[Node]) -> Option<NodeId> {
    let cpus = tree.pus.get(anchor)?;
    let mut local = nodes.iter().filter(|n| !n.cpus.is_disjoint(cpus)).map(|n| n.id);
    let first = local.next()?;
    let is_root = tree.objs.get(anchor).is_some_and(|o| o.parent.is_none());
    if is_root && local.next().is_some() {
        return None;
    }
    Some(first)
}

/// The OS name of the device (`eth0`, `nvme0n1`, `card1`) when hwloc saw
/// one, else its model.
fn device_name(el: roxmltree::Node<'_, '_>) -> Option<String> {
    let osdev = el
        .children()
        .filter(|c| c.has_tag_name("object"))
        .filter(|c| c.attribute("type").is_some_and(|t| t.eq_ignore_ascii_case("OSDev")))
        .find_map(|c| c.attribute("name"));
    osdev
        .or_else(|| info(el, "PCIDevice"))
        .or_else(|| el.attribute("name"))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// `dddd:bb:dd.f` in hex, normalised to lower case and full width.
fn parse_busid(s: &str) -> Option<String> {
    let mut parts = s.trim().split(':');
    let (domain, bus, devfn) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let (dev, func) = devfn.split_once('.')?;
    let hex = |t: &str, max_digits: usize| -> Option<u32> {
        if t.is_empty() || t.len() > max_digits {
            return None;
        }
        u32::from_str_radix(t, 16).ok()
    };
    let (domain, bus, dev, func) = (hex(domain, 8)?, hex(bus, 2)?, hex(dev, 2)?, hex(func, 1)?);
    if dev > 0x1f || func > 7 {
        return None;
    }
    Some(format!("{domain:04x}:{bus:02x}:{dev:02x}.{func:x}"))
}

/// `CCSS [VVVV:DDDD] ...`: the class and the vendor and device ids. What
/// follows (subsystem ids, revision, and in hwloc 3 the programming
/// interface) does not matter for placement.
fn parse_pci_type(s: &str) -> Option<(u32, (u16, u16))> {
    let mut words = s.split_ascii_whitespace();
    let class = u32::from_str_radix(words.next()?, 16).ok().filter(|&c| c <= 0xffff)?;
    let ids = words.next()?.strip_prefix('[')?.strip_suffix(']')?;
    let (vendor, device) = ids.split_once(':')?;
    let id = |t: &str| (t.len() <= 4).then(|| u16::from_str_radix(t, 16).ok()).flatten();
    Some((class, (id(vendor)?, id(device)?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids_normalise() {
        assert_eq!(parse_busid("0000:3B:00.0").as_deref(), Some("0000:3b:00.0"));
        assert_eq!(parse_busid("0:1:2.3").as_deref(), Some("0000:01:02.3"));
        assert_eq!(parse_busid("0000:00:20.0"), None);
        assert_eq!(parse_busid("0000:00.0"), None);
        assert_eq!(parse_busid("zz:00:00.0"), None);
    }

    #[test]
    fn pci_types_parse() {
        assert_eq!(parse_pci_type("0200 [8086:1533] [8086:35cb] 03"), Some((0x0200, (0x8086, 0x1533))));
        assert_eq!(parse_pci_type("0300 [10de:1db4] [10de:1212] a1 00"), Some((0x0300, (0x10de, 0x1db4))));
        assert_eq!(parse_pci_type("0200"), None);
        assert_eq!(parse_pci_type("0200 [80861:1]"), None);
    }
}
