//! The topology as an operator reads it at a glance: one block per node
//! (CPUs grouped by core, memory, huge pages), the distance matrix, the
//! devices, and the warnings that change what placement can do.

use numaplace_topo::{format_size, CpuSet, Topology};
use std::fmt::Write;

/// Wrap width for long CPU lines.
const WIDTH: usize = 100;

/// Renders a topology as text.
pub fn topology(t: &Topology) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", t.name().unwrap_or("host"));
    // The architecture only where it is not the x86-64 every source
    // defaults to, so an x86 host's text is as it always was.
    match (&t.parts().cpu_model, *t.arch() != numaplace_topo::Arch::X86_64) {
        (Some(model), true) => {
            let _ = writeln!(out, "  {model} ({})", t.arch());
        }
        (Some(model), false) => {
            let _ = writeln!(out, "  {model}");
        }
        (None, true) => {
            let _ = writeln!(out, "  {}", t.arch());
        }
        (None, false) => {}
    }
    let dies = match t.die_count() {
        0 => String::new(),
        d => format!("{}, ", plural(d, "die")),
    };
    let _ = writeln!(out, "  {}, {dies}{} memory", counts(t), format_size(t.total_memory()));
    out.push('\n');
    for (i, node) in t.nodes().iter().enumerate() {
        let online = t.node_online_cpus(i);
        let cores: Vec<usize> = t.cores_of_node(i).collect();
        let (pkg, kind) = if t.has_cpus(i) {
            let pkg = t.package_of_node(i).map_or(String::new(), |p| format!("  package {p}"));
            (pkg, node.kind.as_deref().map_or(String::new(), |k| format!("  [{k}]")))
        } else {
            memory_only_label(t, i)
        };
        let free = node.free_bytes.map_or(String::new(), |f| format!(" (free {})", format_size(f)));
        let _ = writeln!(
            out,
            "{}{pkg}{kind}  {} cores, {} PUs  memory {}{free}",
            node.id,
            cores.len(),
            online.len(),
            format_size(node.memory_bytes),
        );
        if !online.is_empty() {
            let _ = writeln!(out, "  cpus {online}");
            let groups: Vec<String> = cores
                .iter()
                .map(|&c| {
                    let cpus = &t.cores()[c].cpus;
                    cpus.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("+")
                })
                .collect();
            wrap(&mut out, "  cores ", &groups);
            // A node of several L3 groups (an EPYC CCX) shows them: the
            // planner keeps a small VM within one (docs/plan.md).
            let l3: Vec<String> = t
                .caches()
                .iter()
                .map(|c| c.cpus.intersection(&online))
                .filter(|c| !c.is_empty())
                .map(|c| c.to_string())
                .collect();
            if l3.len() > 1 {
                let level = t.caches().first().map_or(3, |c| c.level);
                wrap(&mut out, &format!("  l{level} "), &l3);
            }
        }
        let offline = node.cpus.difference(&online);
        if !offline.is_empty() {
            let _ = writeln!(out, "  offline cpus {offline}");
        }
        if node.hugepages.iter().any(|h| h.total > 0) {
            let pools: Vec<String> = node
                .hugepages
                .iter()
                .filter(|h| h.total > 0)
                .map(|h| {
                    let free = h.free.map_or(String::new(), |f| format!(" ({f} free)"));
                    format!("{} x {}{free}", format_size(h.size_bytes), h.total)
                })
                .collect();
            let _ = writeln!(out, "  hugepages {}", pools.join(", "));
        }
    }
    if t.nodes().len() > 1 {
        out.push('\n');
        distances(&mut out, t);
    }
    if !t.devices().is_empty() {
        let _ = writeln!(out, "\ndevices");
        for d in t.devices() {
            let node = d.node.map_or("node ?".to_string(), |n| n.to_string());
            let name = d.name.as_deref().unwrap_or("");
            let _ = writeln!(out, "  {:<14} {:<7} {:<6} {name}", d.address, d.kind.as_str(), node);
        }
    }
    if !t.warnings().is_empty() {
        out.push('\n');
        for w in t.warnings() {
            let _ = writeln!(out, "warning: {w}");
        }
    }
    out
}

fn distances(out: &mut String, t: &Topology) {
    let assumed = if t.distances_known() { "" } else { " (assumed: the source has none)" };
    let n = t.nodes().len();
    // Beyond 16 nodes a full matrix no longer fits a terminal; the
    // distinct values and how often they occur say what matters.
    if n > 16 {
        let mut counts = std::collections::BTreeMap::new();
        for row in t.distance_rows() {
            for &d in row {
                *counts.entry(d).or_insert(0usize) += 1;
            }
        }
        let summary: Vec<String> = counts.iter().map(|(d, c)| format!("{d} x{c}")).collect();
        let _ = writeln!(out, "distances{assumed}: {n}x{n} matrix, values {}", summary.join(", "));
        let _ = writeln!(out, "  (full matrix: --format json)");
        return;
    }
    let _ = writeln!(out, "distances{assumed}");
    let _ = write!(out, "{:>8}", "");
    for node in t.nodes() {
        let _ = write!(out, "{:>5}", node.id.0);
    }
    out.push('\n');
    for (node, row) in t.nodes().iter().zip(t.distance_rows()) {
        let _ = write!(out, "{:>8}", node.id.to_string());
        for d in row {
            let _ = write!(out, "{d:>5}");
        }
        out.push('\n');
    }
}

fn wrap(out: &mut String, head: &str, items: &[String]) {
    let mut line = head.to_string();
    let indent = " ".repeat(head.len());
    for item in items {
        if line.len() + item.len() + 1 > WIDTH && line.trim().len() > head.trim().len() {
            out.push_str(line.trim_end());
            out.push('\n');
            line = indent.clone();
        }
        line.push_str(item);
        line.push(' ');
    }
    out.push_str(line.trim_end());
    out.push('\n');
}

/// A CPU set in list syntax, or `-` when empty.
pub fn cpus(set: &CpuSet) -> String {
    if set.is_empty() {
        "-".into()
    } else {
        set.to_string()
    }
}

/// A count and its noun, plural unless one: `1 package`, `2 packages`.
/// The one rule for every message of the workspace (text views, lint
/// findings, logs, the web view); any unsigned count will do.
pub fn plural(n: impl TryInto<u64>, word: &str) -> String {
    let mut out = String::new();
    push_plural(&mut out, n, word);
    out
}

/// [`plural`], written at the end of `out`.
pub fn push_plural(out: &mut String, n: impl TryInto<u64>, word: &str) {
    let n = n.try_into().unwrap_or(u64::MAX);
    // Pieces, not `write!`: text views write several per item.
    out.push_str(itoa::Buffer::new().format(n));
    out.push(' ');
    out.push_str(word);
    out.push_str(ending(n));
}

/// The noun alone, as [`plural`] would write it after `n`: `node` for
/// one, `nodes` otherwise (for sentences that put the count elsewhere).
pub fn noun(n: impl TryInto<u64>, word: &str) -> String {
    format!("{word}{}", ending(n.try_into().unwrap_or(u64::MAX)))
}

/// The plural rule itself.
fn ending(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// The machine's size in one phrase: `2 packages, 8 NUMA nodes, 48 cores,
/// 96 PUs (SMT2)`.
pub fn counts(t: &Topology) -> String {
    let threads = t.max_threads_per_core();
    let smt = if threads > 1 { format!(" (SMT{threads})") } else { String::new() };
    format!(
        "{}, {}, {}, {}{smt}",
        plural(t.package_count(), "package"),
        plural(t.nodes().len(), "NUMA node"),
        plural(t.core_count(), "core"),
        plural(t.pu_count(), "PU")
    )
}

/// A memory-only node's package (that of the CPU nodes it is local to,
/// when they share one) and its label: its kind as the source names it
/// (`DRAM` when none) and those CPU nodes, with how they were found.
pub(crate) fn memory_only_label(t: &Topology, i: usize) -> (String, String) {
    let (local, how) = t.local_cpu_nodes(i);
    let mut packages: Vec<u32> = local.iter().filter_map(|&j| t.package_of_node(j)).collect();
    packages.dedup();
    let pkg = match packages.as_slice() {
        [p] if packages.len() == local.len() || local.iter().all(|&j| t.package_of_node(j) == Some(*p)) => {
            format!("  package {p}")
        }
        _ => String::new(),
    };
    let name = t.nodes().get(i).and_then(|n| n.kind.clone()).unwrap_or_else(|| "DRAM".to_string());
    let names: Vec<String> = local.iter().filter_map(|&j| t.nodes().get(j)).map(|n| n.id.to_string()).collect();
    let near = match how {
        numaplace_topo::Locality::Source => format!(", local to {}", names.join(",")),
        numaplace_topo::Locality::Distance => format!(", nearest {}", names.join(",")),
        numaplace_topo::Locality::Unknown => ", locality unknown".to_string(),
    };
    (pkg, format!("  [{name}{near}]"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_is_singular_only_when_it_is_one_whatever_its_type() {
        assert_eq!(plural(0usize, "node"), "0 nodes");
        assert_eq!(plural(1u32, "node"), "1 node");
        assert_eq!(plural(2u64, "NUMA node"), "2 NUMA nodes");
        assert_eq!(plural(u64::MAX, "byte"), format!("{} bytes", u64::MAX));
        let mut line = String::from("4 vCPUs on ");
        push_plural(&mut line, 1usize, "cell");
        assert_eq!(line, "4 vCPUs on 1 cell");
        assert_eq!((noun(1u32, "node"), noun(3usize, "node")), ("node".to_string(), "nodes".to_string()));
    }
}
