//! The sampler's figures in the Prometheus text exposition format
//! (version 0.0.4): one `# HELP` and `# TYPE` per family, base units in
//! the names (`_bytes`, ratios from 0 to 1), `_total` on counters. Series
//! carry the VM name and its pid, since two processes may share a name.

use crate::sample::{Kind, ProcInfo, Snapshot};
use std::fmt::Write;

/// The content type to serve the text with.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

struct Family<'a> {
    name: String,
    help: &'a str,
    kind: &'a str,
    samples: Vec<(String, f64)>,
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn labels(pairs: &[(&str, String)]) -> String {
    let inner: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect();
    format!("{{{}}}", inner.join(","))
}

fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        }
    } else {
        format!("{v}")
    }
}

/// Renders a snapshot. VMs become `numaplace_vm_*` series labelled `vm`;
/// other processes (when sampled) `numaplace_process_*` labelled `process`.
pub fn render(snap: &Snapshot) -> String {
    let mut families: Vec<Family> = Vec::new();
    for (kind, prefix, label) in [(Kind::Vm, "numaplace_vm", "vm"), (Kind::Process, "numaplace_process", "process")] {
        let procs: Vec<&ProcInfo> = snap.processes.iter().filter(|p| p.kind == kind).collect();
        if procs.is_empty() {
            continue;
        }
        let id = |p: &ProcInfo| vec![(label, p.name.clone()), ("pid", p.pid.to_string())];
        let with_node = |p: &ProcInfo, node: u32| {
            let mut l = id(p);
            l.push(("node", node.to_string()));
            labels(&l)
        };
        let mut fam = |suffix: &str, help: &'static str, kind: &'static str, samples: Vec<(String, f64)>| {
            families.push(Family { name: format!("{prefix}_{suffix}"), help, kind, samples });
        };
        fam(
            "memory_bytes",
            "Resident memory on each NUMA node (esxtop GST_ND).",
            "gauge",
            procs
                .iter()
                .flat_map(|p| {
                    snap.nodes.iter().map(move |n| {
                        (with_node(p, n.node), p.memory_per_node.get(&n.node).copied().unwrap_or(0) as f64)
                    })
                })
                .collect(),
        );
        fam(
            "local_memory_bytes",
            "Resident memory on the home node(s) (NLMEM).",
            "gauge",
            procs.iter().map(|p| (labels(&id(p)), p.local_bytes as f64)).collect(),
        );
        fam(
            "remote_memory_bytes",
            "Resident memory off the home node(s) (NRMEM).",
            "gauge",
            procs.iter().map(|p| (labels(&id(p)), p.remote_bytes as f64)).collect(),
        );
        fam(
            "local_memory_ratio",
            "Share of resident memory on the home node(s), 0 to 1 (N%L / 100).",
            "gauge",
            procs.iter().filter_map(|p| p.local_percent.map(|v| (labels(&id(p)), v / 100.0))).collect(),
        );
        fam(
            "home_balance_ratio",
            "For homes on several nodes: smallest home-node memory over the largest, 0 to 1.",
            "gauge",
            procs.iter().filter_map(|p| p.home_balance_percent.map(|v| (labels(&id(p)), v / 100.0))).collect(),
        );
        fam(
            "home_node",
            "1 for each home node (NHN): where the vCPU (or all) threads ran most.",
            "gauge",
            procs.iter().flat_map(|p| p.home_nodes.iter().map(move |n| (with_node(p, *n), 1.0))).collect(),
        );
        fam(
            "home_node_migrations_total",
            "Changes of the home node set seen since the exporter started (NMIG).",
            "counter",
            procs.iter().map(|p| (labels(&id(p)), p.home_migrations as f64)).collect(),
        );
        fam(
            "threads",
            "Counted threads (vCPUs of a VM) by the node they last ran on.",
            "gauge",
            procs
                .iter()
                .flat_map(|p| p.threads_per_node.iter().map(move |(n, c)| (with_node(p, *n), f64::from(*c))))
                .collect(),
        );
        fam(
            "huge_page_memory_bytes",
            "Resident memory in huge-page (hugetlbfs) mappings.",
            "gauge",
            procs.iter().map(|p| (labels(&id(p)), p.huge_bytes as f64)).collect(),
        );
        if kind == Kind::Vm {
            fam(
                "configured_memory_bytes",
                "Memory the VM was started with (QEMU -m, esxtop MEMSZ).",
                "gauge",
                procs.iter().filter_map(|p| p.configured_memory_bytes.map(|m| (labels(&id(p)), m as f64))).collect(),
            );
        }
    }
    let node = |n: u32| labels(&[("node", n.to_string())]);
    families.push(Family {
        name: "numaplace_node_memory_total_bytes".into(),
        help: "Memory of the NUMA node (MemTotal).",
        kind: "gauge",
        samples: snap.nodes.iter().map(|n| (node(n.node), n.memory_total_bytes as f64)).collect(),
    });
    families.push(Family {
        name: "numaplace_node_memory_free_bytes".into(),
        help: "Free memory of the NUMA node (MemFree).",
        kind: "gauge",
        samples: snap.nodes.iter().map(|n| (node(n.node), n.memory_free_bytes as f64)).collect(),
    });
    families.push(Family {
        name: "numaplace_node_cpus".into(),
        help: "CPUs in the NUMA node.",
        kind: "gauge",
        samples: snap.nodes.iter().map(|n| (node(n.node), f64::from(n.cpu_count))).collect(),
    });
    families.push(Family {
        name: "numaplace_node_busy_cpus".into(),
        help: "CPUs' worth of busy time on the node since the previous scrape.",
        kind: "gauge",
        samples: snap.nodes.iter().filter_map(|n| n.busy_cpus.map(|b| (node(n.node), b))).collect(),
    });
    families.push(Family {
        name: "numaplace_node_sampled_memory_bytes".into(),
        help: "Memory of the watched VMs/processes on the node.",
        kind: "gauge",
        samples: snap.nodes.iter().map(|n| (node(n.node), n.sampled_memory_bytes as f64)).collect(),
    });
    families.push(Family {
        name: "numaplace_unreadable_processes".into(),
        help: "Processes skipped in this sample, by reason.",
        kind: "gauge",
        samples: vec![
            (labels(&[("reason", "permission_denied".into())]), f64::from(snap.skipped.permission_denied)),
            (labels(&[("reason", "vanished".into())]), f64::from(snap.skipped.vanished)),
            (labels(&[("reason", "error".into())]), snap.skipped.errors.len() as f64),
        ],
    });
    families.push(Family {
        name: "numaplace_numa_nodes".into(),
        help: "NUMA nodes the kernel exposes (0 without NUMA support).",
        kind: "gauge",
        samples: vec![(String::new(), if snap.numa { snap.nodes.len() as f64 } else { 0.0 })],
    });

    let mut out = String::new();
    for f in families.iter().filter(|f| !f.samples.is_empty()) {
        let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
        for (l, v) in &f.samples {
            let _ = writeln!(out, "{}{} {}", f.name, l, number(*v));
        }
    }
    out
}
