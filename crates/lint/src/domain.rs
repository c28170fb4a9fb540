//! libvirt domain XML for the rules. `numaplace-libvirt` owns the format:
//! it reads a domain into a [`Definition`] with the line of each setting,
//! and this module maps that into a [`VmView`] whose evidence quotes the
//! file's lines. The other way, [`definition`] gives any file's VM (a
//! `.vmx` or a request too) the form `numaplace_libvirt::held` counts, so
//! a fix plans around the other files as `plan --state` would.

use crate::error::VmError;
use crate::vm::{
    Binding, Cell, Evidence, HotAdd, HugePageWish, MemoryDevice, PassDevice, Pin, Shape, SourceFormat, VmView,
};
use crate::{FileError, VmFile};
use numaplace_libvirt::domain::{self, Definition, DomainError};
use numaplace_libvirt::{Held, HeldWarning};
use numaplace_topo::Topology;

/// Parses a domain XML into a VM view; `file` names it in evidence.
pub fn parse(file: &str, text: &str) -> Result<VmView, VmError> {
    let d = domain::read(file, text)?;
    Ok(view(file, text, d))
}

/// The rules' view of a definition read from `text`.
fn view(file: &str, text: &str, d: Definition) -> VmView {
    // One pass over the text for every line a setting points at.
    let lines: Vec<&str> = text.lines().collect();
    let ev = |line: u32| -> Option<Evidence> {
        let content = lines.get(line.saturating_sub(1) as usize).copied().unwrap_or("").trim();
        Some(Evidence { file: file.to_string(), line, text: content.chars().take(200).collect() })
    };
    let mut vm = VmView::new(file, SourceFormat::Libvirt);
    vm.name = d.name;
    vm.vcpus = d.vcpus;
    vm.vcpus_at = ev(d.vcpus_at);
    vm.memory_bytes = d.memory_bytes;
    vm.memory_at = ev(d.memory_at);
    vm.memory_derived = d.memory_derived;
    vm.memory_devices = d
        .memory_devices
        .into_iter()
        .map(|m| MemoryDevice {
            model: m.model,
            size_bytes: m.size_bytes,
            cell: m.cell,
            host_nodes: m.host_nodes,
            at: ev(m.at),
        })
        .collect();
    vm.current_memory_bytes = d.current_memory_bytes;
    vm.shape =
        d.shape.map(|s| Shape { sockets: s.sockets, dies: s.dies, cores: s.cores, threads: s.threads, at: ev(s.at) });
    vm.cells = d
        .cells
        .into_iter()
        .map(|c| Cell { id: c.id, vcpus: c.vcpus, memory_bytes: c.memory_bytes, at: ev(c.at) })
        .collect();
    vm.pins = d.pins.into_iter().map(|p| Pin { vcpu: p.vcpu, cpus: p.cpus, at: ev(p.at) }).collect();
    vm.cpuset = d.cpuset.map(|(set, at)| (set, ev(at)));
    vm.bindings =
        d.bindings.into_iter().map(|b| Binding { cell: b.cell, mode: b.mode, nodes: b.nodes, at: ev(b.at) }).collect();
    vm.hugepages = d
        .hugepages
        .into_iter()
        .map(|h| HugePageWish { size_bytes: h.size_bytes, cells: h.cells, at: ev(h.at) })
        .collect();
    vm.devices = d.devices.into_iter().map(|p| PassDevice { address: p.address, at: ev(p.at) }).collect();
    vm.hotadd = d.hotadd.map(|h| HotAdd { current: h.current, at: ev(h.at), also: h.also.and_then(ev) });
    vm.emulator = d.emulator;
    vm.iothreads = d.iothreads;
    vm.managed = d.managed;
    vm.planned_shared = d.planned_shared;
    vm.planned_remote_devices = d.planned_remote_devices;
    vm.planned_sibling_vcpus = d.planned_sibling_vcpus;
    vm.planned_mixed = d.planned_mixed;
    vm.planned_pus = d.planned_pus;
    vm.planned_charged = d.planned_charged;
    vm
}

/// A VM of any format as a domain would hold it: what
/// `numaplace_libvirt::held` counts. Lines are kept where the view has
/// them (0 where it has none).
pub(crate) fn definition(vm: &VmView) -> Definition {
    let line = |at: &Option<Evidence>| at.as_ref().map_or(0, |e| e.line);
    Definition {
        name: vm.name.clone(),
        vcpus: vm.vcpus,
        vcpus_at: line(&vm.vcpus_at),
        memory_bytes: vm.memory_bytes,
        memory_at: line(&vm.memory_at),
        memory_derived: vm.memory_derived,
        memory_devices: vm
            .memory_devices
            .iter()
            .map(|m| domain::MemoryDevice {
                model: m.model.clone(),
                size_bytes: m.size_bytes,
                cell: m.cell,
                host_nodes: m.host_nodes.clone(),
                at: line(&m.at),
            })
            .collect(),
        current_memory_bytes: vm.current_memory_bytes,
        shape: vm.shape.as_ref().map(|s| domain::Shape {
            sockets: s.sockets,
            dies: s.dies,
            cores: s.cores,
            threads: s.threads,
            at: line(&s.at),
        }),
        cells: vm
            .cells
            .iter()
            .map(|c| domain::Cell { id: c.id, vcpus: c.vcpus.clone(), memory_bytes: c.memory_bytes, at: line(&c.at) })
            .collect(),
        pins: vm.pins.iter().map(|p| domain::Pin { vcpu: p.vcpu, cpus: p.cpus.clone(), at: line(&p.at) }).collect(),
        cpuset: vm.cpuset.as_ref().map(|(set, at)| (set.clone(), line(at))),
        bindings: vm
            .bindings
            .iter()
            .map(|b| domain::Binding { cell: b.cell, mode: b.mode, nodes: b.nodes.clone(), at: line(&b.at) })
            .collect(),
        hugepages: vm
            .hugepages
            .iter()
            .map(|h| domain::HugePageWish { size_bytes: h.size_bytes, cells: h.cells.clone(), at: line(&h.at) })
            .collect(),
        devices: vm
            .devices
            .iter()
            .map(|d| domain::PassDevice { address: d.address.clone(), at: line(&d.at) })
            .collect(),
        hotadd: vm.hotadd.as_ref().map(|h| domain::HotAdd {
            current: h.current,
            at: line(&h.at),
            also: h.also.as_ref().map(|e| e.line),
        }),
        emulator: vm.emulator.clone(),
        iothreads: vm.iothreads.clone(),
        managed: vm.managed,
        planned_shared: vm.planned_shared,
        planned_remote_devices: vm.planned_remote_devices.clone(),
        planned_sibling_vcpus: vm.planned_sibling_vcpus,
        planned_mixed: vm.planned_mixed,
        planned_pus: vm.planned_pus.clone(),
        planned_charged: vm.planned_charged.clone(),
    }
}

/// The VMs of a libvirt domain file, as a host state holds them
/// (`numaplace_libvirt::held`), and what was left out of them. Files of
/// other formats are refused.
pub fn held(file: &VmFile, topology: &Topology) -> Result<(Vec<Held>, Vec<HeldWarning>), FileError> {
    if file.format != SourceFormat::Libvirt {
        return Err(FileError::new(&file.name, VmError::NotADomain { line: 1, found: format!("{:?}", file.format) }));
    }
    let mut warnings = Vec::new();
    let out = file
        .vms
        .iter()
        .map(|vm| {
            let (h, mut w) = numaplace_libvirt::held(&definition(vm), &file.name, topology);
            warnings.append(&mut w);
            h
        })
        .collect();
    Ok((out, warnings))
}

impl From<DomainError> for VmError {
    fn from(e: DomainError) -> VmError {
        match e {
            DomainError::Xml { line, column, message } => VmError::Xml { line, column, message },
            DomainError::NotADomain { line, found } => VmError::NotADomain { line, found },
            DomainError::BadValue { line, field, expected, found } => {
                VmError::BadValue { line, field, expected, found }
            }
            DomainError::Missing(what) => VmError::Missing(what),
        }
    }
}
