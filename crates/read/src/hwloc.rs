//! hwloc XML reader, for both the 1.x format (no `version`, NUMA nodes in
//! the normal hierarchy, `Socket` and `Cache` types, float `<distances>`)
//! and the 2.x/3.x format (`version="2.0"` or later, NUMA nodes as memory
//! children, `<distances2>` with SLIT values).
//!
//! Counts follow what `lstopo --disallowed` shows for the same file: every
//! Package, NUMANode, Core and PU object counts, whether or not it is
//! allowed. CPUs the machine has but no PU object shows (offline, or cut
//! away by a cgroup when the file was written) are reported offline.

mod devices;
mod distances;
mod nodes;
mod tree;

use crate::ParseError;
use numaplace_topo::{
    Arch, Cache, Core, CpuSet, Figure, FigureSource, Node, NodeId, Package, Parts, Topology, Warning,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use tree::{attr_bitmap, attr_u64, info, parse_u64, Kind, Tree};

/// Parses hwloc XML text.
pub fn parse(text: &str) -> Result<Topology, ParseError> {
    let options = roxmltree::ParsingOptions { allow_dtd: true, ..Default::default() };
    let doc = roxmltree::Document::parse_with_options(text, options).map_err(|e| xml_error(text, &e))?;
    let top = doc.root_element();
    if !top.has_tag_name("topology") {
        return Err(ParseError::bad("root element", "<topology> (hwloc XML)", top.tag_name().name()));
    }
    let v1 = is_v1(top.attribute("version"));
    let root = top
        .children()
        .find(|c| c.has_tag_name("object"))
        .ok_or_else(|| ParseError::Missing("the root <object> of <topology>".to_string()))?;
    let tree = Tree::build(root, v1)?;
    let all_pus = tree.pus.first().cloned().unwrap_or_default();
    let offline = attr_bitmap(root, "complete_cpuset")?.unwrap_or_default().difference(&all_pus);

    let mut warnings = Vec::new();
    let package_ids = package_ids(&tree);
    let die_ids = die_ids(&tree, &package_ids);
    let found = nodes::collect(&tree, &offline)?;
    let local_to = found.local_to;
    let mut nodes = found.nodes;
    if nodes.is_empty() {
        nodes.push(whole_machine_node(root, v1, all_pus.union(&offline))?);
        warnings.push(Warning::NoNumaInfo);
    } else if !found.memory_known {
        warnings.push(Warning::NoMemoryInfo);
    }
    let (cores, had_core_objects) = cores(&tree, &package_ids, &die_ids);
    if !had_core_objects && !cores.is_empty() {
        warnings.push(Warning::NoCoreInfo);
    }
    let numa_ids: HashMap<usize, NodeId> = found.objs.iter().zip(&nodes).map(|(&obj, node)| (obj, node.id)).collect();
    let node_ids: Vec<NodeId> = nodes.iter().map(|n| n.id).collect();
    let gp: HashMap<u64, NodeId> = found
        .objs
        .iter()
        .zip(&nodes)
        .filter_map(|(&obj, node)| {
            let gp = tree.objs.get(obj)?.el.attribute("gp_index")?;
            Some((parse_u64(gp.trim())?, node.id))
        })
        .collect();
    let distances = if v1 { distances::v1(root, &node_ids)? } else { distances::v2(top, &node_ids, &gp)? };
    // Kinds the file does not name: from hwloc's Bandwidth and Latency
    // memory attributes (HMAT), else from the CPU model (issue 48).
    let bandwidth = memattr(top, &gp, "Bandwidth", u64::max);
    let latency = memattr(top, &gp, "Latency", u64::min);
    let model = cpu_model(&tree, top);
    let figure = |n: NodeId, f: Figure| match f {
        Figure::Bandwidth => bandwidth.get(&n).copied(),
        Figure::Latency => latency.get(&n).copied(),
    };
    let evidence = crate::kinds::Evidence {
        cpu_model: model.as_deref(),
        cpu_model_number: cpu_model_number(&tree),
        local_to: &local_to,
        figure: &figure,
        figure_source: FigureSource::HwlocMemattr,
        tiers: &[],
        dax: &[],
    };
    crate::kinds::find(&mut nodes, &evidence, &mut warnings);
    let devices = devices::collect(&tree, &nodes, &|obj| numa_ids.get(&obj).copied())?;

    let parts = Parts {
        name: info(root, "HostName").or_else(|| info(top, "HostName")).map(str::to_string),
        cpu_model: model,
        // hwloc writes `uname -m` as the root's `Architecture` info.
        arch: info(root, "Architecture").or_else(|| info(top, "Architecture")).map(Arch::from_name).unwrap_or_default(),
        packages: package_ids
            .iter()
            .map(|(&obj, &id)| Package { id, cpus: tree.pus.get(obj).cloned().unwrap_or_default() })
            .collect(),
        dies: dies_per_package(&tree, &package_ids),
        nodes,
        cores,
        caches: caches(&tree)?,
        offline,
        distances,
        devices,
        local_to,
        warnings,
    };
    Ok(Topology::from_parts(parts)?)
}

/// An XML syntax error with its position. roxmltree places errors found
/// at the end of the text (a file cut short) at 1:1; those are reported
/// where the text ends instead.
fn xml_error(text: &str, e: &roxmltree::Error) -> ParseError {
    let (line, column) = match e {
        roxmltree::Error::UnexpectedEndOfStream | roxmltree::Error::UnclosedRootNode => {
            let line = text.matches('\n').count() + 1;
            let last = text.rsplit('\n').next().unwrap_or("");
            (u32::try_from(line).unwrap_or(u32::MAX), u32::try_from(last.chars().count() + 1).unwrap_or(u32::MAX))
        }
        _ => (e.pos().row, e.pos().col),
    };
    ParseError::Xml { line, column, message: e.to_string() }
}

/// hwloc 1.x wrote no version; 2.x and 3.x write `version="2.0"`/`"3.0"`.
fn is_v1(version: Option<&str>) -> bool {
    let major: Option<u32> = version.and_then(|v| {
        let digits: String = v.trim().chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    });
    major.is_none_or(|m| m < 2)
}

/// Package ids by arena index. Packages without an `os_index` get the
/// lowest numbers no other package uses, in document order.
fn package_ids(tree: &Tree<'_, '_>) -> BTreeMap<usize, u32> {
    let packages: Vec<(usize, Option<u32>)> =
        tree.objs.iter().enumerate().filter(|(_, o)| o.kind == Kind::Package).map(|(i, o)| (i, o.os_index)).collect();
    let used: BTreeSet<u32> = packages.iter().filter_map(|&(_, id)| id).collect();
    let mut free = (0u32..).filter(|id| !used.contains(id));
    packages.into_iter().filter_map(|(i, id)| Some((i, id.or_else(|| free.next())?))).collect()
}

/// Die numbers by arena index: `os_index`, or the die's rank within its
/// package when hwloc gave none.
fn die_ids(tree: &Tree<'_, '_>, packages: &BTreeMap<usize, u32>) -> BTreeMap<usize, u32> {
    let mut rank: BTreeMap<Option<u32>, u32> = BTreeMap::new();
    let mut out = BTreeMap::new();
    for (i, o) in tree.objs.iter().enumerate().filter(|(_, o)| o.kind == Kind::Die) {
        let package = o.package.and_then(|p| packages.get(&p).copied());
        let r = rank.entry(package).or_insert(0);
        out.insert(i, o.os_index.unwrap_or(*r));
        *r += 1;
    }
    out
}

/// `(package id, number of dies)` for packages that have Die objects.
fn dies_per_package(tree: &Tree<'_, '_>, packages: &BTreeMap<usize, u32>) -> Vec<(u32, u32)> {
    let mut count: BTreeMap<u32, u32> = BTreeMap::new();
    for o in tree.objs.iter().filter(|o| o.kind == Kind::Die) {
        if let Some(&pkg) = o.package.and_then(|p| packages.get(&p)) {
            *count.entry(pkg).or_insert(0) += 1;
        }
    }
    count.into_iter().collect()
}

/// Cores from PUs: each PU joins its nearest Core ancestor; a PU with none
/// becomes a one-thread core of its own. Also says whether the file had
/// any Core objects at all.
fn cores(tree: &Tree<'_, '_>, packages: &BTreeMap<usize, u32>, dies: &BTreeMap<usize, u32>) -> (Vec<Core>, bool) {
    let mut by_core: BTreeMap<usize, CpuSet> = BTreeMap::new();
    let mut lone = Vec::new();
    for o in tree.objs.iter().filter(|o| o.kind == Kind::Pu) {
        // Tree::build has checked that every PU has a valid os_index.
        let Some(cpu) = o.os_index else { continue };
        match o.core {
            Some(c) => {
                by_core.entry(c).or_default().insert(cpu);
            }
            None => lone.push((cpu, o.package, o.die)),
        }
    }
    let had_core_objects = tree.objs.iter().any(|o| o.kind == Kind::Core);
    let package_of = |p: Option<usize>| p.and_then(|p| packages.get(&p).copied());
    let die_of = |d: Option<usize>| d.and_then(|d| dies.get(&d).copied());
    let mut out: Vec<Core> = by_core
        .into_iter()
        .filter_map(|(c, cpus)| {
            let o = tree.objs.get(c)?;
            Some(Core { package: package_of(o.package), die: die_of(o.die), core_id: o.os_index, cpus })
        })
        .collect();
    out.extend(lone.into_iter().map(|(cpu, package, die)| Core {
        package: package_of(package),
        die: die_of(die),
        core_id: None,
        cpus: std::iter::once(cpu).collect(),
    }));
    (out, had_core_objects)
}

/// The last-level CPU cache of every PU, each cache once.
fn caches(tree: &Tree<'_, '_>) -> Result<Vec<Cache>, ParseError> {
    let llcs: BTreeSet<usize> = tree.objs.iter().filter(|o| o.kind == Kind::Pu).filter_map(|o| o.llc).collect();
    let mut out = Vec::new();
    for c in llcs {
        let (Some(o), Some(cpus)) = (tree.objs.get(c), tree.pus.get(c)) else { continue };
        let Kind::Cache { level, .. } = o.kind else { continue };
        out.push(Cache { level, size_bytes: attr_u64(o.el, "cache_size")?, cpus: cpus.clone() });
    }
    Ok(out)
}

/// The CPU model of the first package that names one, else of any object
/// (some 1.x files put it on the machine), else of the topology (3.x).
fn cpu_model(tree: &Tree<'_, '_>, top: roxmltree::Node<'_, '_>) -> Option<String> {
    let of_kind =
        |pred: &dyn Fn(Kind) -> bool| tree.objs.iter().filter(|o| pred(o.kind)).find_map(|o| info(o.el, "CPUModel"));
    of_kind(&|k| k == Kind::Package)
        .or_else(|| of_kind(&|_| true))
        .or_else(|| info(top, "CPUModel"))
        .map(|m| m.trim().to_string())
        .filter(|m| !m.is_empty())
}

/// The model number of the first package that gives one (hwloc's
/// `CPUModelNumber` info, decimal).
fn cpu_model_number(tree: &Tree<'_, '_>) -> Option<u32> {
    tree.objs
        .iter()
        .filter(|o| o.kind == Kind::Package)
        .find_map(|o| info(o.el, "CPUModelNumber"))
        .and_then(|n| n.trim().parse().ok())
}

/// Each node's value of a memory attribute (hwloc 2.3+ writes the
/// firmware's HMAT figures as `Bandwidth`, MiB/s, and `Latency`, ns), the
/// best over its initiators by `best`, by node.
fn memattr(
    top: roxmltree::Node<'_, '_>,
    gp: &HashMap<u64, NodeId>,
    name: &str,
    best: fn(u64, u64) -> u64,
) -> HashMap<NodeId, u64> {
    let mut out: HashMap<NodeId, u64> = HashMap::new();
    for attr in top.children().filter(|c| c.has_tag_name("memattr") && c.attribute("name") == Some(name)) {
        for v in attr.children().filter(|c| c.has_tag_name("memattr_value")) {
            let target = v.attribute("target_obj_gp_index").and_then(|g| parse_u64(g.trim()));
            let value = v.attribute("value").and_then(|x| parse_u64(x.trim())).filter(|&x| x > 0);
            if let (Some(node), Some(value)) = (target.and_then(|g| gp.get(&g)), value) {
                out.entry(*node).and_modify(|e| *e = best(*e, value)).or_insert(value);
            }
        }
    }
    out
}

/// The one node of a file without NUMA objects: hwloc's own default is a
/// single node holding all CPUs and the machine's memory.
fn whole_machine_node(root: roxmltree::Node<'_, '_>, v1: bool, cpus: CpuSet) -> Result<Node, ParseError> {
    let (memory, _) = nodes::memory_of(root, v1)?;
    Ok(Node {
        id: NodeId(0),
        cpus,
        memory_bytes: memory,
        free_bytes: None,
        hugepages: nodes::hugepages(root)?,
        kind: None,
    })
}
