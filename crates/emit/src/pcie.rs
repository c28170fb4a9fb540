//! Where a VM's passed-through devices sit in the guest's PCIe tree, so
//! the guest learns which of its NUMA cells each device is near: one PCIe
//! expander bus (QEMU's `pxb-pcie`, libvirt's `pcie-expander-bus`) per
//! guest cell that has devices, naming that cell, with a root port per
//! device. The QEMU arguments and the libvirt domain lay it out alike.

use numaplace_plan::Placement;
use numaplace_topo::NodeId;

/// One expander bus for a guest cell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expander {
    /// The guest cell the devices are near (the bus's NUMA node).
    pub cell: u32,
    /// The bus number the guest gives the expander's root bus; each root
    /// port's bus follows it, one each.
    pub bus_nr: u32,
    /// The devices behind it (PCI addresses as in the placement), one
    /// root port each, in the placement's order.
    pub devices: Vec<String>,
}

/// The expander buses for the placement's devices: a device whose host
/// node (from `device_nodes`, the host's devices and their nodes) is the
/// one a guest cell mirrors goes behind that cell's bus; other devices
/// (node unknown, or on a node without a cell) get none. Buses come in
/// order of their first device and are numbered down from 255, each
/// leaving one bus number per root port above its own, so the guest's
/// root bus, counting up from 0, never meets them.
pub fn expanders(p: &Placement, device_nodes: &[(String, NodeId)]) -> Vec<Expander> {
    let near: Vec<(String, u32)> = p
        .devices
        .iter()
        .filter_map(|address| {
            let node = device_nodes.iter().find(|(a, _)| a.eq_ignore_ascii_case(address))?.1;
            let cell = p.guest.cells.iter().find(|c| c.host_node == node)?;
            Some((address.clone(), cell.id))
        })
        .collect();
    expanders_for(&near)
}

/// [`expanders`] for devices whose guest cells are known: (address, cell).
pub fn expanders_for(near: &[(String, u32)]) -> Vec<Expander> {
    let mut out: Vec<Expander> = Vec::new();
    for (address, cell) in near {
        match out.iter_mut().find(|e| e.cell == *cell) {
            Some(e) => e.devices.push(address.clone()),
            None => out.push(Expander { cell: *cell, bus_nr: 0, devices: vec![address.clone()] }),
        }
    }
    let mut top = 256u32;
    for e in &mut out {
        e.bus_nr = top.saturating_sub(1 + e.devices.len() as u32);
        top = e.bus_nr;
    }
    out
}
