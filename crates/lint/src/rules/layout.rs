//! Where a VM's guest cells and memory are on the host, derived once from
//! its view and the host: which host nodes each cell's vCPUs are pinned
//! to, and which host nodes each cell's memory comes from. Every rule
//! that speaks of where cells or memory are reads this one [`Layout`]
//! (and a finding carries the layout it read), so two findings on one
//! file cannot disagree about it (issue 52: a per-node count that left
//! out a `memnode` beside a huge-page check that honoured it).

use crate::host::HostView;
use crate::vm::{BindMode, Vm};
use numaplace_topo::CpuSet;

/// What a guest cell holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CellKind {
    /// vCPUs and memory.
    Ordinary,
    /// Memory without vCPUs (libvirt: a cell without `cpus`, since 6.6.0
    /// "a CPU-less NUMA node"): a tier the guest sees as a node of its own.
    MemoryOnly,
    /// vCPUs without memory: they are told their memory is remote.
    CpusOnly,
    /// Neither (a node for ACPI generic initiators, or a placeholder).
    Empty,
}

/// One guest cell, placed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CellPlace {
    /// Cell id.
    pub id: u32,
    /// What it holds.
    pub kind: CellKind,
    /// Its memory in bytes.
    pub memory_bytes: u64,
    /// Host node ids its vCPUs are pinned to, when every one is pinned.
    pub cpu_nodes: Option<CpuSet>,
    /// Host node ids its memory comes from: the one node its vCPUs are
    /// pinned to when its binding allows it (the kernel allocates on the
    /// local node first), else its binding's nodes (its `memnode`, else
    /// the whole VM's binding), only nodes the host has. `None`: any node.
    pub memory_nodes: Option<CpuSet>,
    /// The binding spreads it on purpose (`interleave`).
    pub interleaved: bool,
}

/// Where a VM's cells and memory are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The cells, in the file's order.
    pub cells: Vec<CellPlace>,
    /// Host node ids the memory of a VM without cells comes from (its
    /// whole-VM binding, nodes the host has); `None`: any node.
    pub memory_nodes: Option<CpuSet>,
    /// Host nodes the VM's cells with vCPUs mirror: those their pinned
    /// vCPUs and bound memory are on, and at least the nodes the VM's size
    /// needs.
    pub span: u32,
}

impl Layout {
    /// The layout of a VM on a host.
    pub fn of(vm: &Vm, host: &HostView<'_>) -> Layout {
        let existing = |nodes: &CpuSet| -> Option<CpuSet> {
            let set: CpuSet = nodes.iter().filter(|&id| host.node_pos(id).is_some()).collect();
            (!set.is_empty()).then_some(set)
        };
        let whole = vm.vm_binding();
        let cells: Vec<CellPlace> = vm
            .cells
            .iter()
            .map(|c| {
                let kind = match (c.vcpus.is_empty(), c.memory_bytes == 0) {
                    (false, false) => CellKind::Ordinary,
                    (true, false) => CellKind::MemoryOnly,
                    (false, true) => CellKind::CpusOnly,
                    (true, true) => CellKind::Empty,
                };
                let cpu_nodes = (!c.vcpus.is_empty())
                    .then(|| {
                        let mut cpus = CpuSet::new();
                        for v in c.vcpus.iter() {
                            cpus = cpus.union(&vm.pin(v)?.cpus);
                        }
                        Some(host.ids(&host.nodes_of(&cpus)))
                    })
                    .flatten()
                    .filter(|n| !n.is_empty());
                // libvirt formatdomain.rst, "NUMA Node Tuning", `memnode`:
                // "For those nodes having no corresponding memnode element,
                // the default from element memory will be used."
                let binding = vm.bindings.iter().find(|b| b.cell == Some(c.id)).or(whole);
                let bound = binding.and_then(|b| existing(&b.nodes));
                let local = cpu_nodes
                    .as_ref()
                    .filter(|n| n.len() == 1)
                    .filter(|n| bound.as_ref().is_none_or(|b| n.is_subset(b)))
                    .filter(|n| n.iter().all(|id| host.node_pos(id).is_some_and(|p| host.nodes[p].memory_bytes > 0)));
                let memory_nodes = if kind == CellKind::MemoryOnly || kind == CellKind::Empty {
                    bound.clone()
                } else {
                    local.cloned().or(bound.clone())
                };
                CellPlace {
                    id: c.id,
                    kind,
                    memory_bytes: c.memory_bytes,
                    cpu_nodes,
                    memory_nodes,
                    interleaved: binding.is_some_and(|b| b.mode == BindMode::Interleave),
                }
            })
            .collect();
        let memory_nodes = whole.and_then(|b| existing(&b.nodes));
        let (needed, _) = super::span(vm, host);
        let mut ids = CpuSet::new();
        for c in &cells {
            if let Some(n) = &c.cpu_nodes {
                ids = ids.union(n);
            }
            // Memory spread on purpose mirrors no node; a cell without
            // vCPUs is not counted among the cells that mirror nodes
            // (`cpu_cells`), so its node is not counted either.
            if !c.interleaved && c.kind == CellKind::Ordinary {
                if let Some(n) = &c.memory_nodes {
                    ids = ids.union(n);
                }
            }
        }
        let span = needed.max(ids.len() as u32).min(host.nodes.len().max(1) as u32);
        Layout { cells, memory_nodes, span }
    }

    /// Cells with vCPUs: those the guest scheduler runs on, which the
    /// cell-count rules count (memory-only and empty cells are counted by
    /// their own rule).
    pub fn cpu_cells(&self) -> u32 {
        self.cells.iter().filter(|c| matches!(c.kind, CellKind::Ordinary | CellKind::CpusOnly)).count() as u32
    }

    /// Where the memory of some cells (`cells`: ids, `None` for all) or of
    /// `whole` bytes when the VM has no cells comes from, as (host node id,
    /// bytes), each cell's memory split evenly over its nodes and merged
    /// per node; `None` when some of it may come from any node.
    pub fn memory_homes(&self, cells: Option<&CpuSet>, whole: u64) -> Option<Vec<(u32, u64)>> {
        let mut homes: Vec<(u32, u64)> = Vec::new();
        let mut spread = |nodes: &CpuSet, bytes: u64| {
            let n = nodes.len() as u64;
            let share = bytes / n.max(1);
            for (i, id) in nodes.iter().enumerate() {
                let part = if i as u64 + 1 == n { bytes - share * (n - 1) } else { share };
                homes.push((id, part));
            }
        };
        let mine: Vec<&CellPlace> =
            self.cells.iter().filter(|c| c.memory_bytes > 0 && cells.is_none_or(|ids| ids.contains(c.id))).collect();
        if mine.is_empty() {
            spread(self.memory_nodes.as_ref()?, whole);
        } else {
            for c in mine {
                spread(c.memory_nodes.as_ref()?, c.memory_bytes);
            }
        }
        homes.sort_by_key(|h| h.0);
        let mut merged: Vec<(u32, u64)> = Vec::new();
        for (id, bytes) in homes {
            match merged.last_mut() {
                Some(last) if last.0 == id => last.1 += bytes,
                _ => merged.push((id, bytes)),
            }
        }
        Some(merged)
    }

    /// Every host node the layout puts memory or pinned vCPUs on.
    pub fn nodes(&self) -> CpuSet {
        let mut all = self.memory_nodes.clone().unwrap_or_default();
        for c in &self.cells {
            for n in [&c.cpu_nodes, &c.memory_nodes].into_iter().flatten() {
                all = all.union(n);
            }
        }
        all
    }
}
