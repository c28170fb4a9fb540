//! Reader of libvirt host capabilities XML (`virsh capabilities`).
//!
//! What is read, following libvirt's `capability.rng`:
//! `host/cpu/model`; `host/topology/cells/cell` with `memory`, `pages`,
//! `distances/sibling` and `cpus/cpu` (`socket_id`, `die_id`,
//! `cluster_id`, `core_id`, `siblings`); the last-level `host/cache/bank`
//! entries. Guest capabilities, HMAT interconnects and resctrl controls are
//! skipped: placement does not use them.
//!
//! libvirt prints a CPU's topology attributes all together or not at all
//! (old versions, or a CPU whose sysfs topology it could not read), so a
//! `<cpu id='N'/>` alone becomes a core of one PU in no package.

use crate::ParseError;
use numaplace_topo::{
    Arch, Cache, Core, CpuSet, HugePages, ModelError, Node, NodeId, Package, Parts, Topology, Warning, MAX_CPU,
    MAX_NODE, MAX_NODE_BYTES, MAX_SETS_BYTES,
};
use roxmltree::Node as XmlNode;
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// Most cells a file may have: cell ids are node numbers, below
/// [`MAX_NODE`], and each is listed once.
const MAX_CELLS: usize = MAX_NODE as usize;

/// Parses `virsh capabilities` output (a `<capabilities>` document, or a
/// bare `<host>` element cut out of one).
pub fn parse(text: &str) -> Result<Topology, ParseError> {
    let doc = roxmltree::Document::parse(text).map_err(|e| {
        let pos = e.pos();
        ParseError::Xml { line: pos.row, column: pos.col, message: e.to_string() }
    })?;
    let root = doc.root_element();
    let host = if root.has_tag_name("host") {
        root
    } else if root.has_tag_name("capabilities") {
        child(root, "host").ok_or_else(|| ParseError::Missing("capabilities/host".into()))?
    } else {
        return Err(ParseError::bad("root element", "<capabilities> or <host>", root.tag_name().name()));
    };
    let cells_el = child(host, "topology")
        .and_then(|t| child(t, "cells"))
        .ok_or_else(|| ParseError::Missing("host/topology/cells".into()))?;
    let mut cells = Vec::new();
    // Sibling sets are built one per CPU entry; their bitmaps are counted
    // as they are built, so a file repeating `siblings='65535'` stops at
    // the budget instead of taking 8 KiB per line.
    let mut set_bytes = 0usize;
    for el in children(cells_el, "cell") {
        if cells.len() == MAX_CELLS {
            return Err(ParseError::bad("host/topology/cells", "at most 4096 cells", "more"));
        }
        cells.push(read_cell(el, cells.len(), &mut set_bytes)?);
    }
    if cells.is_empty() {
        return Err(ParseError::Missing("host/topology/cells/cell".into()));
    }

    let mut parts = Parts {
        cpu_model: child(host, "cpu")
            .and_then(|c| child(c, "model"))
            .and_then(|m| m.text())
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty()),
        // `host/cpu/arch`, as libvirt names it (`x86_64`, `ppc64le`).
        arch: child(host, "cpu")
            .and_then(|c| child(c, "arch"))
            .and_then(|a| a.text())
            .map(Arch::from_name)
            .unwrap_or_default(),
        ..Parts::default()
    };
    let cpus = index_cpus(&cells)?;
    // `host/cpu/topology@threads` is coarse, but `1` settles that a CPU
    // without sibling data is a whole core.
    let no_smt = child(host, "cpu")
        .and_then(|c| child(c, "topology"))
        .and_then(|t| t.attribute("threads"))
        .is_some_and(|t| t.trim() == "1");
    build_cores(&cpus, no_smt, &mut parts);
    parts.distances = distance_rows(&cells)?;
    if cells.iter().all(|c| c.memory.is_none()) {
        parts.warnings.push(Warning::NoMemoryInfo);
    }
    parts.nodes = cells
        .into_iter()
        .map(|c| Node {
            id: NodeId(c.id),
            cpus: c.cpus.iter().map(|cpu| cpu.id).collect(),
            memory_bytes: c.memory.unwrap_or(0),
            free_bytes: None,
            hugepages: c.hugepages,
            kind: None,
        })
        .collect();
    if let Some(cache) = child(host, "cache") {
        parts.caches = read_caches(cache)?;
    }
    Ok(Topology::from_parts(parts)?)
}

/// One `<cpu>` of a cell, as written.
struct CpuEntry {
    id: u32,
    socket: Option<u32>,
    die: Option<u32>,
    cluster: Option<u32>,
    core: Option<u32>,
    siblings: Option<CpuSet>,
}

/// One `<cell>`, as written.
struct Cell {
    id: u32,
    memory: Option<u64>,
    hugepages: Vec<HugePages>,
    /// `(sibling id, value)` in document order; `None` without `<distances>`.
    distances: Option<Vec<(u32, u32)>>,
    cpus: Vec<CpuEntry>,
}

fn read_cell(el: XmlNode, pos: usize, set_bytes: &mut usize) -> Result<Cell, ParseError> {
    let id = required_u32(el, "id", &format!("cell[{}]", pos + 1))?;
    if id >= MAX_NODE {
        return Err(ParseError::bad(format!("cell[{}]/@id", pos + 1), "a node number below 4096", &id.to_string()));
    }
    let path = format!("cell[id={id}]");
    let memory = match child(el, "memory") {
        Some(m) => {
            let field = format!("{path}/memory");
            let bytes = scaled(m, &field, text_of(m))?;
            if bytes > MAX_NODE_BYTES {
                return Err(ParseError::bad(field, "at most 1 PiB per cell", text_of(m).trim()));
            }
            Some(bytes)
        }
        None => None,
    };

    let mut pages = Vec::new();
    for p in children(el, "pages") {
        let size_text = p.attribute("size").unwrap_or("");
        let field = format!("{path}/pages[size={size_text}]");
        let size: u64 = size_text
            .trim()
            .parse()
            .map_err(|_| ParseError::bad(format!("{field}/@size"), "a page size number", size_text))?;
        let size_bytes =
            unit_scale(p.attribute("unit").unwrap_or("KiB")).and_then(|s| size.checked_mul(s)).ok_or_else(|| {
                ParseError::bad(format!("{field}/@unit"), "a size unit such as KiB", p.attribute("unit").unwrap_or(""))
            })?;
        let count: u64 = text_of(p)
            .trim()
            .parse()
            .ok()
            .filter(|&c: &u64| c.checked_mul(size_bytes).is_some_and(|b| b <= MAX_NODE_BYTES))
            .ok_or_else(|| ParseError::bad(&field, "a page count (at most 1 PiB of pages)", text_of(p)))?;
        pages.push(HugePages { size_bytes, total: count, free: None });
    }
    // libvirt lists the base page size first (4 KiB on x86, 64 KiB on some
    // POWER and ARM kernels); it is ordinary memory, not a huge page pool.
    let base = pages.iter().map(|p| p.size_bytes).min().filter(|&s| s <= 64 << 10);
    let hugepages = pages.into_iter().filter(|p| Some(p.size_bytes) != base).collect();

    let distances = match child(el, "distances") {
        Some(d) => {
            let mut row = Vec::new();
            for s in children(d, "sibling") {
                let sid = required_u32(s, "id", &format!("{path}/distances/sibling"))?;
                let value = required_u32(s, "value", &format!("{path}/distances/sibling[id={sid}]"))?;
                row.push((sid, value));
            }
            Some(row)
        }
        None => None,
    };

    let mut cpus = Vec::new();
    if let Some(list) = child(el, "cpus") {
        for c in children(list, "cpu") {
            let cid = required_u32(c, "id", &format!("{path}/cpus/cpu"))?;
            let cpath = format!("{path}/cpus/cpu[id={cid}]");
            if cid >= MAX_CPU {
                return Err(ParseError::bad(format!("{cpath}/@id"), "a CPU number below 65536", &cid.to_string()));
            }
            let siblings = match c.attribute("siblings") {
                Some(s) => {
                    let set = CpuSet::parse_list(s)
                        .map_err(|e| ParseError::CpuSet { field: format!("{cpath}/@siblings"), source: e })?;
                    *set_bytes += set.bytes();
                    if *set_bytes > MAX_SETS_BYTES {
                        return Err(ParseError::bad(
                            format!("{cpath}/@siblings"),
                            "sibling lists that fit in 128 MiB of bitmaps (one bit per CPU number up to the highest)",
                            s,
                        ));
                    }
                    Some(set)
                }
                None => None,
            };
            cpus.push(CpuEntry {
                id: cid,
                socket: topology_id(c, "socket_id", &cpath)?,
                die: topology_id(c, "die_id", &cpath)?,
                cluster: topology_id(c, "cluster_id", &cpath)?,
                core: topology_id(c, "core_id", &cpath)?,
                siblings,
            });
        }
    }
    Ok(Cell { id, memory, hugepages, distances, cpus })
}

/// Every CPU by number with the cell listing it; a CPU listed twice is a
/// contradiction.
fn index_cpus(cells: &[Cell]) -> Result<BTreeMap<u32, &CpuEntry>, ParseError> {
    let mut home: BTreeMap<u32, u32> = BTreeMap::new();
    let mut cpus = BTreeMap::new();
    for cell in cells {
        for cpu in &cell.cpus {
            if let Some(&first) = home.get(&cpu.id) {
                if first == cell.id {
                    return Err(ParseError::bad(
                        format!("cell[id={}]/cpus", cell.id),
                        "each CPU listed once",
                        &format!("CPU {} listed twice", cpu.id),
                    ));
                }
                return Err(
                    ModelError::CpuInTwoNodes { cpu: cpu.id, first: NodeId(first), second: NodeId(cell.id) }.into()
                );
            }
            home.insert(cpu.id, cell.id);
            cpus.insert(cpu.id, cpu);
        }
    }
    Ok(cpus)
}

/// Groups CPUs into cores and packages. Core ids are trusted over sibling
/// lists, as the sysfs reader does; a disagreement is reported.
fn build_cores(cpus: &BTreeMap<u32, &CpuEntry>, no_smt: bool, parts: &mut Parts) {
    type Key = (u32, Option<u32>, Option<u32>, u32);
    let mut by_ids: BTreeMap<Key, CpuSet> = BTreeMap::new();
    // Sibling groups as sets (bitmaps, within the reader's budget), not
    // lists of numbers, which would cost 32 times as much.
    let mut by_siblings: HashSet<CpuSet> = HashSet::new();
    let mut packages: BTreeMap<u32, CpuSet> = BTreeMap::new();
    let mut dies: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
    let listed: CpuSet = cpus.keys().copied().collect();
    let mut lonely = CpuSet::new();
    for cpu in cpus.values() {
        if let Some(socket) = cpu.socket {
            packages.entry(socket).or_default().insert(cpu.id);
            if let Some(die) = cpu.die {
                dies.entry(socket).or_default().insert(die);
            }
        }
        match (cpu.socket, cpu.core, &cpu.siblings) {
            (Some(socket), Some(core), _) => {
                by_ids.entry((socket, cpu.die, cpu.cluster, core)).or_default().insert(cpu.id);
            }
            (_, _, Some(sib)) if sib.contains(cpu.id) => {
                by_siblings.insert(sib.intersection(&listed));
            }
            _ => lonely.insert(cpu.id),
        }
    }

    let mut inconsistent = CpuSet::new();
    let mut taken = CpuSet::new();
    for (&(socket, die, _, core), set) in &by_ids {
        for cpu in set.iter() {
            let sib = cpus.get(&cpu).and_then(|c| c.siblings.as_ref());
            if sib.is_some_and(|s| s.intersection(&listed) != *set) {
                inconsistent.insert(cpu);
            }
        }
        taken = taken.union(set);
        parts.cores.push(Core { package: Some(socket), die, core_id: Some(core), cpus: set.clone() });
    }
    // Sibling groups (no ids) must not overlap each other or the id-built
    // cores; overlapping ones are split into single PUs. They are taken in
    // the order of their CPU lists, so the result does not depend on
    // hashing.
    let mut by_siblings: Vec<CpuSet> = by_siblings.into_iter().collect();
    by_siblings.sort_by(|a, b| a.iter().cmp(b.iter()));
    for set in by_siblings {
        if set.is_disjoint(&taken) {
            taken = taken.union(&set);
            parts.cores.push(Core { package: None, die: None, core_id: None, cpus: set });
        } else {
            inconsistent = inconsistent.union(&set.difference(&taken));
            lonely = lonely.union(&set.difference(&taken));
        }
    }
    for cpu in lonely.difference(&taken).iter() {
        parts.cores.push(Core { package: None, die: None, core_id: None, cpus: [cpu].into_iter().collect() });
    }
    if !inconsistent.is_empty() {
        parts.warnings.push(Warning::InconsistentSiblings(inconsistent));
    }
    if !lonely.is_empty() && !no_smt {
        parts.warnings.push(Warning::NoCoreInfo);
    }
    parts.packages = packages.into_iter().map(|(id, cpus)| Package { id, cpus }).collect();
    // A package of one die is what every machine has; only real splits are
    // worth recording (hwloc drops such die levels the same way).
    if dies.values().any(|d| d.len() > 1) {
        parts.dies = dies.into_iter().map(|(p, d)| (p, d.len() as u32)).collect();
    }
}

/// The distance matrix in cell order, or `None` when no cell has one.
fn distance_rows(cells: &[Cell]) -> Result<Option<Vec<Vec<u32>>>, ParseError> {
    if cells.iter().all(|c| c.distances.is_none()) {
        return Ok(None);
    }
    let mut rows = Vec::new();
    for cell in cells {
        let given =
            cell.distances.as_ref().ok_or_else(|| ParseError::Missing(format!("cell[id={}]/distances", cell.id)))?;
        if given.len() != cells.len() {
            return Err(ModelError::DistanceRowLength {
                node: NodeId(cell.id),
                len: given.len(),
                expected: cells.len(),
            }
            .into());
        }
        let mut row = Vec::new();
        for to in cells {
            let value =
                given.iter().find(|(id, _)| *id == to.id).map(|&(_, v)| v).ok_or_else(|| {
                    ParseError::Missing(format!("cell[id={}]/distances/sibling[id={}]", cell.id, to.id))
                })?;
            row.push(value);
        }
        rows.push(row);
    }
    Ok(Some(rows))
}

/// Last-level cache banks: the highest `level` among `host/cache/bank`.
fn read_caches(cache: XmlNode) -> Result<Vec<Cache>, ParseError> {
    let mut banks = Vec::new();
    for b in children(cache, "bank") {
        let bid = b.attribute("id").unwrap_or("?");
        let path = format!("host/cache/bank[id={bid}]");
        let level = required_u32(b, "level", &path)?;
        let level = u8::try_from(level)
            .map_err(|_| ParseError::bad(format!("{path}/@level"), "a cache level", &level.to_string()))?;
        let size = match b.attribute("size") {
            Some(s) => Some(scaled_value(s, b.attribute("unit"), &format!("{path}/@size"))?),
            None => None,
        };
        let cpus = CpuSet::parse_list(b.attribute("cpus").unwrap_or(""))
            .map_err(|e| ParseError::CpuSet { field: format!("{path}/@cpus"), source: e })?;
        banks.push(Cache { level, size_bytes: size, cpus });
    }
    let Some(top) = banks.iter().map(|b| b.level).max() else { return Ok(Vec::new()) };
    let mut out: Vec<Cache> = Vec::new();
    // With code/data prioritisation a bank can be listed once per type.
    for bank in banks.into_iter().filter(|b| b.level == top && !b.cpus.is_empty()) {
        if !out.iter().any(|o| o.cpus == bank.cpus) {
            out.push(bank);
        }
    }
    Ok(out)
}

fn child<'a, 'i>(el: XmlNode<'a, 'i>, name: &str) -> Option<XmlNode<'a, 'i>> {
    el.children().find(|c| c.has_tag_name(name))
}

fn children<'a, 'i: 'a>(el: XmlNode<'a, 'i>, name: &'a str) -> impl Iterator<Item = XmlNode<'a, 'i>> + 'a {
    el.children().filter(move |c| c.has_tag_name(name))
}

fn text_of<'a>(el: XmlNode<'a, '_>) -> &'a str {
    el.text().unwrap_or("")
}

fn required_u32(el: XmlNode, attr: &str, path: &str) -> Result<u32, ParseError> {
    let raw = el.attribute(attr).ok_or_else(|| ParseError::Missing(format!("{path}/@{attr}")))?;
    raw.trim().parse().map_err(|_| ParseError::bad(format!("{path}/@{attr}"), "a non-negative integer", raw))
}

/// A topology id; libvirt prints `-1` when the kernel has no value.
fn topology_id(el: XmlNode, attr: &str, path: &str) -> Result<Option<u32>, ParseError> {
    let Some(raw) = el.attribute(attr) else { return Ok(None) };
    let v: i64 = raw.trim().parse().map_err(|_| ParseError::bad(format!("{path}/@{attr}"), "an integer id", raw))?;
    Ok(u32::try_from(v).ok())
}

/// An element whose text is a number scaled by its `unit` attribute
/// (KiB when absent, libvirt's default for memory).
fn scaled(el: XmlNode, field: &str, text: &str) -> Result<u64, ParseError> {
    scaled_value(text, el.attribute("unit"), field)
}

fn scaled_value(text: &str, unit: Option<&str>, field: &str) -> Result<u64, ParseError> {
    let n: u64 = text
        .trim()
        .parse()
        .map_err(|_| ParseError::bad(field, "a whole number with a unit (KiB, MiB, ...)", text.trim()))?;
    let unit = unit.unwrap_or("KiB");
    let scale = unit_scale(unit).ok_or_else(|| {
        ParseError::bad(
            field,
            "a libvirt unit: b, bytes, KB, k, KiB, MB, M, MiB, GB, G, GiB, TB, T, TiB, PB, P, PiB, EB, E or EiB",
            unit,
        )
    })?;
    n.checked_mul(scale).ok_or_else(|| ParseError::bad(field, "a size below 16 EiB", text.trim()))
}

/// libvirt's unit words, by libvirt's own table
/// ([`numaplace_topo::libvirt_unit_bytes`], shared with `lint`).
fn unit_scale(unit: &str) -> Option<u64> {
    numaplace_topo::libvirt_unit_bytes(unit)
}

#[cfg(test)]
mod tests {
    use super::unit_scale;

    #[test]
    fn units_follow_libvirt() {
        assert_eq!(unit_scale("KiB"), Some(1024));
        assert_eq!(unit_scale("k"), Some(1024));
        assert_eq!(unit_scale("KB"), Some(1000));
        assert_eq!(unit_scale("bytes"), Some(1));
        assert_eq!(unit_scale("GiB"), Some(1 << 30));
        assert_eq!(unit_scale("E"), Some(1 << 60));
        assert_eq!(unit_scale("lots"), None);
        assert_eq!(unit_scale(""), None);
    }
}
