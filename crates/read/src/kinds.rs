//! Memory kinds the source does not name (issue 48). hwloc names a node's
//! kind only when the firmware or its own tables say (`subtype="HBM"`),
//! and a sysfs tree never does, so on a real Xeon Max in flat mode the
//! HBM nodes read as DRAM: ordinary VMs land on them and `memory_kind=hbm`
//! finds none. Each reader gathers what else its source says into an
//! [`Evidence`]; [`find`] weighs it, in this order, for every node without
//! CPUs and without a kind:
//!
//! 1. HMAT figures against the CPUs' own node: bandwidth at least twice
//!    is HBM; at most half (or, without bandwidths, latency at least
//!    twice) is slower memory;
//! 2. a DAX device onlined as the node, backed by an NVDIMM (NVM) or a CXL
//!    region (CXL);
//! 3. the kernel's memory tiers: a tier below the CPU nodes' is named
//!    after its tier (`memory_tier8`, kind `other`), which says what the
//!    tier says and no more;
//! 4. HMAT saying slower alone: kind `other`, named `slower-memory`;
//! 5. without any figure, a CPU model that carries HBM (Xeon CPU Max,
//!    Xeon Phi x200) with one CPU-less node beside each sub-NUMA domain,
//!    all of one size: HBM;
//! 6. a tier above the CPU nodes' that 5 did not claim: named after it.
//!
//! Each kind found is set on the node with a [`Warning::KindFound`]
//! carrying the typed [`KindEvidence`]. What the profile declares
//! (`[node_kinds]`) overrides all of this later, in wire's profile.

use numaplace_topo::{CpuSet, DaxBacking, Figure, FigureSource, KindEvidence, MemoryKind, Node, NodeId, Warning};

/// What a reader knows beyond the nodes themselves.
pub(crate) struct Evidence<'a> {
    /// The CPU model string (`/proc/cpuinfo`'s `model name`, hwloc's
    /// `CPUModel`).
    pub(crate) cpu_model: Option<&'a str>,
    /// The CPU model number (`/proc/cpuinfo`'s `model`, hwloc's
    /// `CPUModelNumber`), when the source gives it.
    pub(crate) cpu_model_number: Option<u32>,
    /// The CPU nodes each CPU-less node is local to.
    pub(crate) local_to: &'a [(NodeId, Vec<NodeId>)],
    /// A node's HMAT figure from its local initiators, in the source's
    /// unit (the same for every node of one source).
    pub(crate) figure: &'a dyn Fn(NodeId, Figure) -> Option<u64>,
    /// Where the figures came from.
    pub(crate) figure_source: FigureSource,
    /// The kernel's memory tiers: each tier's number and its nodes.
    pub(crate) tiers: &'a [(u32, CpuSet)],
    /// DAX devices onlined as nodes: device, target node, backing.
    pub(crate) dax: &'a [(String, NodeId, DaxBacking)],
}

impl Evidence<'_> {
    /// A source with nothing beyond its nodes and the CPU model.
    #[cfg(test)]
    fn bare<'a>(cpu_model: Option<&'a str>, local_to: &'a [(NodeId, Vec<NodeId>)]) -> Evidence<'a> {
        Evidence {
            cpu_model,
            cpu_model_number: None,
            local_to,
            figure: &|_, _| None,
            figure_source: FigureSource::HwlocMemattr,
            tiers: &[],
            dax: &[],
        }
    }
}

/// Bandwidth this many times the local DRAM node's is HBM: Xeon Max's HBM
/// reads about 4x its DDR5 per socket, KNL's MCDRAM about 5x; CXL and
/// NVM read slower than DRAM. The same ratio the other way (half the
/// bandwidth, or twice the latency) is slower memory.
const RATIO: u64 = 2;

/// Sizes of the CPU-model rule's nodes may differ by this fraction (1/64)
/// and still count as one size (firmware carves a few MiB off some).
const SIZE_SLACK: u64 = 64;

/// Whether a CPU model carries HBM on its package: Intel's Xeon CPU Max
/// series (Sapphire Rapids HBM, family 6 model 143, `Intel(R) Xeon(R) CPU
/// Max 9462`) and the Xeon Phi x200 (Knights Landing, model 87, and Mill,
/// model 133, `Xeon Phi(TM) CPU 7250`: 16 GB of MCDRAM, a CPU-less node
/// per quadrant in flat mode). A model number the source gives must be
/// one of those.
fn carries_hbm(model: &str, number: Option<u32>) -> bool {
    let m = model.to_ascii_lowercase();
    if m.contains("xeon") && m.contains("cpu max") {
        number.is_none_or(|n| n == 143)
    } else if m.contains("xeon phi") && m.contains("cpu 72") {
        number.is_none_or(|n| n == 87 || n == 133)
    } else {
        false
    }
}

/// What the HMAT figures say of one node against its local CPU nodes.
enum Hmat {
    Faster(KindEvidence),
    Slower(KindEvidence),
    /// Figures given, and they say neither: ordinary memory.
    Same,
    None,
}

fn hmat(node: NodeId, locals: &[NodeId], ev: &Evidence<'_>) -> Hmat {
    let pair = |figure: Figure| {
        let own = (ev.figure)(node, figure)?;
        let theirs = locals.iter().filter_map(|&t| (ev.figure)(t, figure).map(|v| (t, v)));
        // Against the best local node: the highest bandwidth, the lowest
        // latency.
        let (local, local_value) = match figure {
            Figure::Bandwidth => theirs.max_by_key(|&(_, v)| v),
            Figure::Latency => theirs.min_by_key(|&(_, v)| v),
        }?;
        let evidence = KindEvidence::Hmat { source: ev.figure_source, figure, value: own, local, local_value };
        Some((own, local_value, evidence))
    };
    if let Some((own, local, evidence)) = pair(Figure::Bandwidth).filter(|p| p.1 > 0) {
        return if own >= RATIO.saturating_mul(local) {
            Hmat::Faster(evidence)
        } else if own.saturating_mul(RATIO) <= local {
            Hmat::Slower(evidence)
        } else {
            Hmat::Same
        };
    }
    match pair(Figure::Latency).filter(|p| p.1 > 0) {
        Some((own, local, evidence)) if own >= RATIO.saturating_mul(local) => Hmat::Slower(evidence),
        Some(_) => Hmat::Same,
        None => Hmat::None,
    }
}

/// Sets the kind of every CPU-less node without one that the evidence
/// names, and says so in `warnings`.
pub(crate) fn find(nodes: &mut [Node], ev: &Evidence<'_>, warnings: &mut Vec<Warning>) {
    let dram_cpu_nodes: Vec<NodeId> =
        nodes.iter().filter(|n| !n.cpus.is_empty() && n.kind.is_none()).map(|n| n.id).collect();
    let cpu_nodes: Vec<NodeId> = nodes.iter().filter(|n| !n.cpus.is_empty()).map(|n| n.id).collect();
    // The CPU nodes' tier: the lowest-numbered tier holding one.
    let cpu_tier = ev.tiers.iter().filter(|(_, ns)| cpu_nodes.iter().any(|c| ns.contains(c.0))).map(|t| t.0).min();
    let mut found: Vec<(usize, String, MemoryKind, KindEvidence)> = Vec::new();
    // Nodes left to the CPU-model rule, with the tier above the CPUs'
    // they sit in, if any.
    let mut open: Vec<(usize, Option<u32>)> = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        if !node.cpus.is_empty() || node.kind.is_some() || node.memory_bytes == 0 {
            continue;
        }
        let locals: Vec<NodeId> = ev
            .local_to
            .iter()
            .find(|(n, _)| *n == node.id)
            .map(|(_, to)| to.iter().copied().filter(|t| dram_cpu_nodes.contains(t)).collect())
            .unwrap_or_default();
        let hmat = hmat(node.id, &locals, ev);
        if let Hmat::Faster(e) = hmat {
            found.push((i, "HBM".into(), MemoryKind::Hbm, e));
            continue;
        }
        let dax = ev.dax.iter().find(|(_, n, b)| *n == node.id && *b != DaxBacking::SoftReserved);
        if let Some((device, _, backing)) = dax {
            let (name, kind) =
                if *backing == DaxBacking::Cxl { ("CXL", MemoryKind::Cxl) } else { ("NVM", MemoryKind::Nvm) };
            found.push((i, name.into(), kind, KindEvidence::Dax { device: device.clone(), backing: *backing }));
            continue;
        }
        let tier = ev.tiers.iter().find(|(_, ns)| ns.contains(node.id.0)).map(|t| t.0);
        let tier = tier.zip(cpu_tier).filter(|(t, c)| t != c);
        if let Some((tier, cpu_tier)) = tier.filter(|(t, c)| t > c) {
            found.push((i, format!("memory_tier{tier}"), MemoryKind::Other, KindEvidence::Tier { tier, cpu_tier }));
            continue;
        }
        match hmat {
            Hmat::Slower(e) => found.push((i, "slower-memory".into(), MemoryKind::Other, e)),
            // Figures that say it is ordinary memory rule HBM out, the
            // CPU model notwithstanding.
            Hmat::Same => {}
            _ if !locals.is_empty() => open.push((i, tier.map(|t| t.0))),
            _ => {}
        }
    }
    let by_model = by_cpu_model(nodes, &open, ev);
    for (i, tier) in open {
        if let Some(e) = by_model.iter().find(|(j, _)| *j == i).map(|(_, e)| e.clone()) {
            found.push((i, "HBM".into(), MemoryKind::Hbm, e));
        } else if let (Some(tier), Some(cpu_tier)) = (tier, cpu_tier) {
            found.push((i, format!("memory_tier{tier}"), MemoryKind::Other, KindEvidence::Tier { tier, cpu_tier }));
        }
    }
    found.sort_by_key(|f| f.0);
    for (i, name, kind, evidence) in found {
        let Some(node) = nodes.get_mut(i) else { continue };
        node.kind = Some(name);
        warnings.push(Warning::KindFound { node: node.id, kind, evidence });
    }
}

/// The CPU-model rule over the nodes nothing else decided: on a CPU that
/// carries HBM, each is HBM when every one is local to exactly one CPU
/// node, no CPU node has two, and all are of one size (as the HBM of each
/// sub-NUMA domain is). Anything else (a CXL expander beside a Xeon Max,
/// say) leaves them all as they were.
fn by_cpu_model(nodes: &[Node], open: &[(usize, Option<u32>)], ev: &Evidence<'_>) -> Vec<(usize, KindEvidence)> {
    let Some(model) = ev.cpu_model.filter(|m| carries_hbm(m, ev.cpu_model_number)) else { return Vec::new() };
    let mut domains: Vec<(usize, NodeId, u64)> = Vec::new();
    for &(i, _) in open {
        let Some(node) = nodes.get(i) else { return Vec::new() };
        let Some((_, to)) = ev.local_to.iter().find(|(n, _)| *n == node.id) else { return Vec::new() };
        match to.as_slice() {
            [one] if !domains.iter().any(|d| d.1 == *one) => domains.push((i, *one, node.memory_bytes)),
            _ => return Vec::new(),
        }
    }
    let (Some(small), Some(large)) = (domains.iter().map(|d| d.2).min(), domains.iter().map(|d| d.2).max()) else {
        return Vec::new();
    };
    if large - small > large / SIZE_SLACK {
        return Vec::new();
    }
    let count = u32::try_from(domains.len()).unwrap_or(u32::MAX);
    domains
        .into_iter()
        .map(|(i, domain, size_bytes)| {
            (i, KindEvidence::CpuModel { model: model.to_string(), domain, nodes: count, size_bytes })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: u32, cpus: &str, gib: u64) -> Node {
        Node {
            id: NodeId(id),
            cpus: if cpus.is_empty() { CpuSet::new() } else { cpus.parse().unwrap_or_default() },
            memory_bytes: gib << 30,
            free_bytes: None,
            hugepages: Vec::new(),
            kind: None,
        }
    }

    /// Two SNC domains (nodes 0, 1) and a CPU-less node beside each.
    fn snc2(hbm: [u64; 2]) -> Vec<Node> {
        vec![node(0, "0-11", 64), node(1, "12-23", 64), node(2, "", hbm[0]), node(3, "", hbm[1])]
    }

    const LOCAL: [(NodeId, [NodeId; 1]); 2] = [(NodeId(2), [NodeId(0)]), (NodeId(3), [NodeId(1)])];

    fn local() -> Vec<(NodeId, Vec<NodeId>)> {
        LOCAL.iter().map(|(n, to)| (*n, to.to_vec())).collect()
    }

    #[test]
    fn a_cpu_that_carries_hbm_makes_its_equal_cpuless_nodes_hbm() {
        let local = local();
        let mut nodes = snc2([16, 16]);
        let mut w = Vec::new();
        find(&mut nodes, &Evidence::bare(Some("Intel(R) Xeon(R) CPU Max 9462"), &local), &mut w);
        assert_eq!(MemoryKind::of(nodes[2].kind.as_deref()), MemoryKind::Hbm);
        assert_eq!(MemoryKind::of(nodes[3].kind.as_deref()), MemoryKind::Hbm);
        assert_eq!(w.len(), 2);
        assert_eq!(w[0].code(), "hbm-found");
        let Warning::KindFound { evidence, .. } = &w[1] else { panic!("{w:?}") };
        assert_eq!(
            evidence,
            &KindEvidence::CpuModel {
                model: "Intel(R) Xeon(R) CPU Max 9462".into(),
                domain: NodeId(1),
                nodes: 2,
                size_bytes: 16 << 30
            }
        );
        assert!(w[0].to_string().contains("Xeon(R) CPU Max 9462"), "{}", w[0]);
        // Another CPU, another model number, or nodes of two sizes (an
        // expander beside the HBM): nothing is guessed.
        for (model, number, sizes) in [
            ("Intel(R) Xeon(R) Platinum 8480+", None, [16, 16]),
            ("Intel(R) Xeon(R) CPU Max 9462", Some(106), [16, 16]),
            ("Intel(R) Xeon(R) CPU Max 9462", Some(143), [16, 64]),
        ] {
            let mut nodes = snc2(sizes);
            let ev = Evidence { cpu_model_number: number, ..Evidence::bare(Some(model), &local) };
            find(&mut nodes, &ev, &mut Vec::new());
            assert_eq!((nodes[2].kind.as_deref(), nodes[3].kind.as_deref()), (None, None), "{model} {number:?}");
        }
    }

    #[test]
    fn hmat_figures_decide_where_they_are_given() {
        let local = local();
        let run = |bw: Option<u64>, lat: Option<u64>, model: Option<&str>| {
            let mut nodes = snc2([16, 16]);
            let figure = move |n: NodeId, f: Figure| match (n.0, f) {
                (0 | 1, Figure::Bandwidth) => bw.map(|_| 100_000),
                (0 | 1, Figure::Latency) => lat.map(|_| 100),
                (_, Figure::Bandwidth) => bw,
                (_, Figure::Latency) => lat,
            };
            let ev = Evidence {
                figure: &figure,
                figure_source: FigureSource::SysfsAccess0,
                ..Evidence::bare(model, &local)
            };
            let mut w = Vec::new();
            find(&mut nodes, &ev, &mut w);
            (MemoryKind::of(nodes[2].kind.as_deref()), w)
        };
        let (kind, w) = run(Some(400_000), None, None);
        assert_eq!(kind, MemoryKind::Hbm);
        assert!(
            matches!(
                &w[0],
                Warning::KindFound {
                    evidence: KindEvidence::Hmat {
                        value: 400_000,
                        local_value: 100_000,
                        local: NodeId(0),
                        figure: Figure::Bandwidth,
                        ..
                    },
                    ..
                }
            ),
            "{w:?}"
        );
        assert!(w[0].to_string().contains("400000 MB/s against 100000 MB/s for node0"), "{}", w[0]);
        // Slower than DRAM (CXL, NVM): not HBM, even on a Xeon Max; kept
        // off as slower memory.
        let (kind, w) = run(Some(40_000), None, Some("Intel(R) Xeon(R) CPU Max 9480"));
        assert_eq!((kind, w.len()), (MemoryKind::Other, 2));
        // Latency alone can say slower, never HBM.
        assert_eq!(run(None, Some(250), None).0, MemoryKind::Other);
        assert_eq!(run(None, Some(110), Some("Intel(R) Xeon(R) CPU Max 9480")).0, MemoryKind::Dram);
        // Figures like DRAM's: ordinary memory, whatever the CPU.
        assert_eq!(run(Some(120_000), None, Some("Intel(R) Xeon(R) CPU Max 9480")).0, MemoryKind::Dram);
    }

    #[test]
    fn dax_backing_and_tiers_name_what_they_say() {
        let local = local();
        let dax =
            [("dax5.0".to_string(), NodeId(2), DaxBacking::Nvdimm), ("dax1.0".to_string(), NodeId(3), DaxBacking::Cxl)];
        let mut nodes = snc2([16, 16]);
        let ev = Evidence { dax: &dax, ..Evidence::bare(None, &local) };
        let mut w = Vec::new();
        find(&mut nodes, &ev, &mut w);
        assert_eq!((nodes[2].kind.as_deref(), nodes[3].kind.as_deref()), (Some("NVM"), Some("CXL")));
        assert_eq!((w[0].code(), w[1].code()), ("memory-kind-found", "cxl-found"));
        // A tier below the CPUs': named after it. Above, on a Xeon Max
        // with one node per domain: HBM by the CPU model.
        let tiers = [
            (4, "0-1".parse().unwrap_or_default()),
            (8, "2".parse().unwrap_or_default()),
            (2, "3".parse().unwrap_or_default()),
        ];
        let mut nodes = snc2([16, 16]);
        let mut w = Vec::new();
        let ev = Evidence { tiers: &tiers, ..Evidence::bare(Some("Intel(R) Xeon(R) CPU Max 9462"), &local) };
        find(&mut nodes, &ev, &mut w);
        assert_eq!(nodes[2].kind.as_deref(), Some("memory_tier8"));
        assert_eq!(w[0].to_string(), "node2 read as other memory although the source names no kind: the kernel ranks it in memory_tier8, below the CPU nodes' memory_tier4 (sysfs memory_tiering; the tier does not say which kind)");
        assert_eq!(nodes[3].kind.as_deref(), Some("HBM"));
    }
}
