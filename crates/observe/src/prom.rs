//! The sampler's figures in the Prometheus text exposition format
//! (version 0.0.4): one `# HELP` and `# TYPE` per family, base units in
//! the names (`_bytes`, ratios from 0 to 1), `_total` on counters. Series
//! carry the VM name and its pid, since two processes may share a name.

use crate::sample::{Kind, ProcInfo, Snapshot};
use numaplace_topo::text::prom;

/// The content type to serve the text with.
pub const CONTENT_TYPE: &str = prom::CONTENT_TYPE;

/// A series' labels: names are ours, values (VM names) escaped on writing.
type Labels = Vec<(&'static str, String)>;

struct Family {
    name: String,
    help: &'static str,
    kind: prom::Kind,
    samples: Vec<(Labels, f64)>,
}

/// Renders a snapshot. VMs become `numaplace_vm_*` series labelled `vm`;
/// other processes (when sampled) `numaplace_process_*` labelled `process`.
/// A family without a sample is left out.
pub fn render(snap: &Snapshot) -> String {
    let mut families: Vec<Family> = Vec::new();
    for (kind, prefix, label) in [(Kind::Vm, "numaplace_vm", "vm"), (Kind::Process, "numaplace_process", "process")] {
        let procs: Vec<&ProcInfo> = snap.processes.iter().filter(|p| p.kind == kind).collect();
        if !procs.is_empty() {
            process_families(&mut families, snap, &procs, (prefix, label), kind == Kind::Vm);
        }
    }
    node_families(&mut families, snap);
    let mut out = String::new();
    for f in families.iter().filter(|f| !f.samples.is_empty()) {
        prom::family(&mut out, &f.name, f.help, f.kind);
        for (labels, v) in &f.samples {
            let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
            prom::sample(&mut out, &f.name, &labels, prom::Float(*v));
        }
    }
    out
}

/// The per-process families of one kind (VMs or other processes), named
/// `{prefix}_*` and labelled `{label}` and `pid`, since two processes may
/// share a name.
fn process_families(
    families: &mut Vec<Family>,
    snap: &Snapshot,
    procs: &[&ProcInfo],
    (prefix, label): (&str, &'static str),
    vm: bool,
) {
    use prom::Kind::{Counter, Gauge};
    let id = |p: &ProcInfo| vec![(label, p.name.clone()), ("pid", p.pid.to_string())];
    let with_node = |p: &ProcInfo, node: u32| {
        let mut l = id(p);
        l.push(("node", node.to_string()));
        l
    };
    let mut fam = |suffix: &str, help: &'static str, kind: prom::Kind, samples: Vec<(Labels, f64)>| {
        families.push(Family { name: format!("{prefix}_{suffix}"), help, kind, samples });
    };
    // Per process and node.
    fam(
        "memory_bytes",
        "Resident memory on each NUMA node (esxtop GST_ND).",
        Gauge,
        procs
            .iter()
            .flat_map(|p| {
                snap.nodes
                    .iter()
                    .map(move |n| (with_node(p, n.node), p.memory_per_node.get(&n.node).copied().unwrap_or(0) as f64))
            })
            .collect(),
    );
    fam(
        "local_memory_bytes",
        "Resident memory on the home node(s) (NLMEM).",
        Gauge,
        procs.iter().map(|p| (id(p), p.local_bytes as f64)).collect(),
    );
    fam(
        "remote_memory_bytes",
        "Resident memory off the home node(s) (NRMEM).",
        Gauge,
        procs.iter().map(|p| (id(p), p.remote_bytes as f64)).collect(),
    );
    fam(
        "local_memory_ratio",
        "Share of resident memory on the home node(s), 0 to 1 (N%L / 100).",
        Gauge,
        procs.iter().filter_map(|p| p.local_percent.map(|v| (id(p), v / 100.0))).collect(),
    );
    fam(
        "home_balance_ratio",
        "For homes on several nodes: smallest home-node memory over the largest, 0 to 1.",
        Gauge,
        procs.iter().filter_map(|p| p.home_balance_percent.map(|v| (id(p), v / 100.0))).collect(),
    );
    fam(
        "home_node",
        "1 for each home node (NHN): where the vCPU (or all) threads ran most.",
        Gauge,
        procs.iter().flat_map(|p| p.home_nodes.iter().map(move |n| (with_node(p, *n), 1.0))).collect(),
    );
    fam(
        "home_node_migrations_total",
        "Changes of the home node set seen since the exporter started (NMIG).",
        Counter,
        procs.iter().map(|p| (id(p), p.home_migrations as f64)).collect(),
    );
    fam(
        "threads",
        "Counted threads (vCPUs of a VM) by the node they last ran on.",
        Gauge,
        procs
            .iter()
            .flat_map(|p| p.threads_per_node.iter().map(move |(n, c)| (with_node(p, *n), f64::from(*c))))
            .collect(),
    );
    fam(
        "huge_page_memory_bytes",
        "Resident memory in huge-page (hugetlbfs) mappings.",
        Gauge,
        procs.iter().map(|p| (id(p), p.huge_bytes as f64)).collect(),
    );
    if vm {
        fam(
            "configured_memory_bytes",
            "Memory the VM was started with (QEMU -m, esxtop MEMSZ).",
            Gauge,
            procs.iter().filter_map(|p| p.configured_memory_bytes.map(|m| (id(p), m as f64))).collect(),
        );
    }
}

/// The host's families: per NUMA node, the skipped processes and the
/// node count.
fn node_families(families: &mut Vec<Family>, snap: &Snapshot) {
    use prom::Kind::Gauge;
    let node = |n: u32| vec![("node", n.to_string())];
    let mut fam = |name: &str, help: &'static str, samples: Vec<(Labels, f64)>| {
        families.push(Family { name: name.into(), help, kind: Gauge, samples });
    };
    fam(
        "numaplace_node_memory_total_bytes",
        "Memory of the NUMA node (MemTotal).",
        snap.nodes.iter().map(|n| (node(n.node), n.memory_total_bytes as f64)).collect(),
    );
    fam(
        "numaplace_node_memory_free_bytes",
        "Free memory of the NUMA node (MemFree).",
        snap.nodes.iter().map(|n| (node(n.node), n.memory_free_bytes as f64)).collect(),
    );
    fam(
        "numaplace_node_cpus",
        "CPUs in the NUMA node.",
        snap.nodes.iter().map(|n| (node(n.node), f64::from(n.cpu_count))).collect(),
    );
    fam(
        "numaplace_node_busy_cpus",
        "CPUs' worth of busy time on the node since the previous scrape.",
        snap.nodes.iter().filter_map(|n| n.busy_cpus.map(|b| (node(n.node), b))).collect(),
    );
    fam(
        "numaplace_node_sampled_memory_bytes",
        "Memory of the watched VMs/processes on the node.",
        snap.nodes.iter().map(|n| (node(n.node), n.sampled_memory_bytes as f64)).collect(),
    );
    let reason = |r: &str| vec![("reason", r.to_string())];
    fam(
        "numaplace_unreadable_processes",
        "Processes skipped in this sample, by reason.",
        vec![
            (reason("permission_denied"), f64::from(snap.skipped.permission_denied)),
            (reason("vanished"), f64::from(snap.skipped.vanished)),
            (reason("error"), snap.skipped.errors.len() as f64),
        ],
    );
    fam(
        "numaplace_numa_nodes",
        "NUMA nodes the kernel exposes (0 without NUMA support).",
        vec![(Vec::new(), if snap.numa { snap.nodes.len() as f64 } else { 0.0 })],
    );
}
