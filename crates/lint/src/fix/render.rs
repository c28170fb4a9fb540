//! The libvirt elements a fix replaces, rendered from a planner
//! [`Placement`]: `<vcpu>`, the pins of `<cputune>`, `<numatune>`, the
//! `<topology>` and `<numa>` of `<cpu>`, and the huge pages of
//! `<memoryBacking>`.
//!
//! `numaplace-emit` renders whole domains only (its element writers are
//! private), and a fix must keep the rest of the user's domain, so these
//! few elements are written here in the same form.

use numaplace_plan::{CpuMode, MemoryMode, Placement};
use numaplace_topo::CpuSet;
use std::fmt::Write;

/// KiB, rounded up (libvirt's unit; a size must not shrink).
fn kib(bytes: u64) -> u64 {
    bytes.div_ceil(1024)
}

/// Indentation: the domain's child level and one step.
#[derive(Clone, Debug)]
pub struct Indent {
    /// Indent of the domain's children (`  `).
    pub base: String,
    /// One level more.
    pub step: String,
}

impl Indent {
    fn at(&self, depth: usize) -> String {
        let mut s = self.base.clone();
        for _ in 0..depth {
            s.push_str(&self.step);
        }
        s
    }
}

/// `<vcpu>`; the first line carries no indent (the file's is kept).
pub fn vcpu(p: &Placement) -> String {
    let n = p.vcpus.len().max(p.guest.cells.iter().map(|c| c.vcpus.len()).sum());
    if p.cpuset.is_empty() {
        format!("<vcpu placement='static'>{n}</vcpu>")
    } else {
        format!("<vcpu placement='static' cpuset='{}'>{n}</vcpu>", p.cpuset)
    }
}

/// The pin lines of `<cputune>` (one per vCPU, then the emulator).
pub fn pins(p: &Placement) -> Vec<String> {
    let mut out = Vec::new();
    if p.cpu_mode == CpuMode::Dedicated {
        for v in &p.vcpus {
            out.push(format!("<vcpupin vcpu='{}' cpuset='{}'/>", v.vcpu, v.pu));
        }
    } else {
        for v in &p.vcpus {
            out.push(format!("<vcpupin vcpu='{}' cpuset='{}'/>", v.vcpu, p.cpuset));
        }
    }
    if !p.emulator.is_empty() {
        out.push(format!("<emulatorpin cpuset='{}'/>", p.emulator));
    }
    out
}

/// A container element holding `lines` one level in; the first line
/// carries no indent.
pub fn block(name: &str, open_attrs: &str, lines: &[String], ind: &Indent, depth: usize) -> String {
    let mut x = String::new();
    let _ = write!(x, "<{name}{open_attrs}>");
    let inner = ind.at(depth + 1);
    for l in lines {
        let _ = write!(x, "\n{inner}{l}");
    }
    let _ = write!(x, "\n{}</{name}>", ind.at(depth));
    x
}

/// The child lines of `<numatune>`.
pub fn numatune_lines(p: &Placement) -> Vec<String> {
    let all: CpuSet = p.nodes.iter().map(|n| n.0).collect();
    let mode = match p.memory_mode {
        MemoryMode::Strict => "strict",
        MemoryMode::Interleave => "interleave",
    };
    let mut out = vec![format!("<memory mode='{mode}' nodeset='{all}'/>")];
    for c in &p.guest.cells {
        let set = match p.memory_mode {
            MemoryMode::Strict => c.host_node.0.to_string(),
            MemoryMode::Interleave => all.to_list(),
        };
        out.push(format!("<memnode cellid='{}' mode='{mode}' nodeset='{set}'/>", c.id));
    }
    out
}

/// `<topology>` and `<numa>` as lines at `<cpu>`'s child level (`depth`
/// is `<cpu>`'s own depth), the first line without indent.
pub fn cpu_children(p: &Placement, ind: &Indent, depth: usize) -> Vec<String> {
    let g = &p.guest;
    let mut out = vec![format!(
        "<topology sockets='{}' dies='1' cores='{}' threads='{}'/>",
        g.sockets.max(1),
        g.cores.max(1),
        g.threads.max(1)
    )];
    if g.cells.is_empty() {
        return out;
    }
    let l1 = ind.at(depth + 1);
    let l2 = ind.at(depth + 2);
    let l3 = ind.at(depth + 3);
    let l4 = ind.at(depth + 4);
    let mut numa = String::from("<numa>");
    for c in &g.cells {
        let _ = write!(numa, "\n{l2}<cell id='{}' cpus='{}' memory='{}' unit='KiB'", c.id, c.vcpus, kib(c.memory_bytes));
        if c.distances.len() == g.cells.len() && g.cells.len() > 1 {
            let _ = write!(numa, ">\n{l3}<distances>");
            for (other, d) in g.cells.iter().zip(&c.distances) {
                let _ = write!(numa, "\n{l4}<sibling id='{}' value='{d}'/>", other.id);
            }
            let _ = write!(numa, "\n{l3}</distances>\n{l2}</cell>");
        } else {
            numa.push_str("/>");
        }
    }
    let _ = write!(numa, "\n{l1}</numa>");
    out.push(numa);
    out
}

/// `<hugepages>` for the placement, when it uses huge pages.
pub fn hugepages(p: &Placement, ind: &Indent, depth: usize) -> Option<String> {
    let page = p.hugepage_bytes?;
    let line = if p.guest.cells.is_empty() {
        format!("<page size='{}' unit='KiB'/>", kib(page))
    } else {
        // This nodeset names guest cells, not host nodes.
        let cells: CpuSet = p.guest.cells.iter().map(|c| c.id).collect();
        format!("<page size='{}' unit='KiB' nodeset='{cells}'/>", kib(page))
    };
    Some(block("hugepages", "", &[line], ind, depth))
}
