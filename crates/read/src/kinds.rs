//! Memory kinds the source does not name (issue 48). hwloc names a node's
//! kind only when the firmware or its own tables say (`subtype="HBM"`),
//! and a sysfs tree never does, so on a real Xeon Max in flat mode the
//! HBM nodes read as DRAM: ordinary VMs land on them and `memory_kind=hbm`
//! finds none. Each reader passes what evidence it has; a kind found is
//! set on the node and a warning names the evidence.

use numaplace_topo::{MemoryKind, Node, NodeId, Warning};

/// What a reader knows beyond the nodes themselves.
pub(crate) struct Evidence<'a> {
    /// The CPU model string (`/proc/cpuinfo`'s `model name`, hwloc's
    /// `CPUModel`).
    pub(crate) cpu_model: Option<&'a str>,
    /// The CPU nodes each CPU-less node is local to.
    pub(crate) local_to: &'a [(NodeId, Vec<NodeId>)],
    /// A node's read bandwidth from its local initiators, in the source's
    /// unit (hwloc's `Bandwidth` memory attribute, MiB/s; sysfs
    /// `access0/initiators/read_bandwidth`, MB/s): the same unit for
    /// every node of one source.
    pub(crate) bandwidth: &'a dyn Fn(NodeId) -> Option<u64>,
    /// Where the bandwidth figures came from, for the warning.
    pub(crate) bandwidth_source: &'a str,
}

/// Bandwidth this many times the local DRAM node's is HBM: Xeon Max's HBM
/// reads about 4x its DDR5 per socket, KNL's MCDRAM about 5x; CXL and
/// NVM read slower than DRAM.
const HBM_RATIO: u64 = 2;

/// Whether a CPU model carries HBM on its package: Intel's Xeon CPU Max
/// series (Sapphire Rapids HBM, `Intel(R) Xeon(R) CPU Max 9462`) and the
/// Xeon Phi x200 (Knights Landing and Mill, `Xeon Phi(TM) CPU 7250`: 16 GB
/// of MCDRAM, a CPU-less node per quadrant in flat mode).
fn carries_hbm(model: &str) -> bool {
    let m = model.to_ascii_lowercase();
    (m.contains("xeon") && m.contains("cpu max")) || (m.contains("xeon phi") && m.contains("cpu 72"))
}

/// Sets the kind of every CPU-less node without one that the evidence
/// says is HBM, and says so in `warnings`.
pub(crate) fn find(nodes: &mut [Node], ev: &Evidence<'_>, warnings: &mut Vec<Warning>) {
    let model_hbm = ev.cpu_model.filter(|m| carries_hbm(m));
    for i in 0..nodes.len() {
        let node = &nodes[i];
        if !node.cpus.is_empty() || node.kind.is_some() || node.memory_bytes == 0 {
            continue;
        }
        let Some((_, to)) = ev.local_to.iter().find(|(n, _)| *n == node.id) else { continue };
        let id = node.id;
        // The bandwidth of the CPU nodes it is local to, where they are
        // DRAM (no kind named) and the source gives one.
        let own = (ev.bandwidth)(id);
        let theirs = to
            .iter()
            .filter(|t| nodes.iter().any(|n| n.id == **t && n.kind.is_none()))
            .filter_map(|&t| (ev.bandwidth)(t).map(|b| (t, b)))
            .max_by_key(|&(_, b)| b);
        let evidence = match (own, theirs) {
            (Some(b), Some((t, tb))) if tb > 0 && b >= HBM_RATIO * tb => Some(format!(
                "{} gives it {b} against {tb} for {t}, the CPUs' own node ({}x)",
                ev.bandwidth_source,
                b / tb
            )),
            // A bandwidth that says it is not faster rules HBM out, the
            // CPU model notwithstanding.
            (Some(_), Some(_)) => None,
            _ => model_hbm.map(|m| {
                let to: Vec<String> = to.iter().map(|t| t.to_string()).collect();
                format!(
                    "no CPUs, local to {}, on a {m} (a CPU that carries HBM), and no bandwidth figures",
                    to.join(", ")
                )
            }),
        };
        if let Some(evidence) = evidence {
            nodes[i].kind = Some("HBM".to_string());
            warnings.push(Warning::KindFound { node: id, kind: MemoryKind::Hbm, evidence });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use numaplace_topo::CpuSet;

    fn node(id: u32, cpus: &str, gib: u64) -> Node {
        Node {
            id: NodeId(id),
            cpus: cpus.parse().unwrap_or_else(|_| CpuSet::new()),
            memory_bytes: gib << 30,
            free_bytes: None,
            hugepages: Vec::new(),
            kind: None,
        }
    }

    #[test]
    fn a_cpu_that_carries_hbm_makes_its_cpuless_nodes_hbm() {
        let mut nodes = vec![node(0, "0-11", 64), node(1, "", 16)];
        nodes[1].cpus = CpuSet::new();
        let local = [(NodeId(1), vec![NodeId(0)])];
        let none = |_: NodeId| None;
        let ev = Evidence {
            cpu_model: Some("Intel(R) Xeon(R) CPU Max 9462"),
            local_to: &local,
            bandwidth: &none,
            bandwidth_source: "",
        };
        let mut w = Vec::new();
        find(&mut nodes, &ev, &mut w);
        assert_eq!(MemoryKind::of(nodes[1].kind.as_deref()), MemoryKind::Hbm);
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].code(), "hbm-found");
        assert!(w[0].to_string().contains("Xeon(R) CPU Max 9462"), "{}", w[0]);
        // Another CPU: nothing is guessed.
        let mut nodes = vec![node(0, "0-11", 64), node(1, "", 16)];
        nodes[1].cpus = CpuSet::new();
        let ev = Evidence { cpu_model: Some("Intel(R) Xeon(R) Platinum 8480+"), ..ev };
        find(&mut nodes, &ev, &mut Vec::new());
        assert_eq!(nodes[1].kind, None);
    }

    #[test]
    fn bandwidth_decides_where_it_is_given() {
        let local = [(NodeId(1), vec![NodeId(0)])];
        let run = |hbm_bw: u64, model: Option<&str>| {
            let mut nodes = vec![node(0, "0-11", 64), node(1, "", 16)];
            nodes[1].cpus = CpuSet::new();
            let bw = move |n: NodeId| Some(if n == NodeId(0) { 100_000 } else { hbm_bw });
            let ev = Evidence { cpu_model: model, local_to: &local, bandwidth: &bw, bandwidth_source: "hwloc" };
            let mut w = Vec::new();
            find(&mut nodes, &ev, &mut w);
            (MemoryKind::of(nodes[1].kind.as_deref()), w)
        };
        let (kind, w) = run(400_000, None);
        assert_eq!(kind, MemoryKind::Hbm);
        assert!(w[0].to_string().contains("400000 against 100000 for node0"), "{}", w[0]);
        // Slower than DRAM (CXL, NVM): not HBM, even on a Xeon Max.
        assert_eq!(run(50_000, Some("Intel(R) Xeon(R) CPU Max 9480")).0, MemoryKind::Dram);
    }
}
