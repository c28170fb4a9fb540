//! The hwloc object tree flattened into an arena in document order, with
//! each object's type, parent and nearest interesting ancestors, plus the
//! attribute helpers that turn bad values into errors naming the element.
//!
//! The walk is iterative (an explicit stack), so a hostile file nesting
//! objects a million deep costs memory, not the thread's stack.

use crate::ParseError;
use numaplace_topo::{CpuSet, MAX_CPU, MAX_SETS_BYTES};
use roxmltree::Node;

/// What an hwloc object is, as far as the reader cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Machine,
    Package,
    Die,
    Group,
    Numa,
    /// A CPU cache; `eligible` is false for instruction caches and
    /// memory-side caches, which never count as a last-level CPU cache.
    Cache {
        level: u8,
        eligible: bool,
    },
    MemCache,
    Core,
    Pu,
    Bridge,
    PciDev,
    OsDev,
    Misc,
}

impl Kind {
    /// I/O objects hang off the normal hierarchy and carry no CPUs.
    pub(super) fn is_io(self) -> bool {
        matches!(self, Kind::Bridge | Kind::PciDev | Kind::OsDev)
    }

    /// Memory objects (v2 NUMA nodes and memory-side caches) sit beside
    /// the normal hierarchy; their CPUs are those of their normal parent.
    pub(super) fn is_memory(self) -> bool {
        matches!(self, Kind::Numa | Kind::MemCache)
    }
}

/// One object of the tree.
pub(super) struct Obj<'a, 'input> {
    pub kind: Kind,
    pub el: Node<'a, 'input>,
    pub parent: Option<usize>,
    pub depth: u32,
    pub os_index: Option<u32>,
    /// Nearest enclosing Package, Die and Core (the object itself included).
    pub package: Option<usize>,
    pub die: Option<usize>,
    pub core: Option<usize>,
    /// Outermost CPU cache above (or at) this object: the last-level cache
    /// of any PU below it.
    pub llc: Option<usize>,
}

/// The flattened tree and the PUs below each object.
pub(super) struct Tree<'a, 'input> {
    pub objs: Vec<Obj<'a, 'input>>,
    /// PUs in each object's subtree, indexed like `objs`.
    pub pus: Vec<CpuSet>,
    /// hwloc 1.x layout: NUMA nodes are part of the normal hierarchy.
    pub v1: bool,
}

impl<'a, 'input> Tree<'a, 'input> {
    /// Flattens the objects under (and including) `root`.
    pub(super) fn build(root: Node<'a, 'input>, v1: bool) -> Result<Self, ParseError> {
        let mut objs: Vec<Obj<'a, 'input>> = Vec::new();
        let mut stack: Vec<(Node<'a, 'input>, Option<usize>)> = vec![(root, None)];
        while let Some((el, parent)) = stack.pop() {
            let kind = object_kind(el)?;
            let os_index = attr_u32(el, "os_index")?;
            let idx = objs.len();
            let up = parent.and_then(|p| objs.get(p));
            let inherit = |f: fn(&Obj<'a, 'input>) -> Option<usize>| up.and_then(f);
            let llc = match (inherit(|o| o.llc), kind) {
                (Some(outer), _) => Some(outer),
                (None, Kind::Cache { eligible: true, .. }) => Some(idx),
                (None, _) => None,
            };
            let own = |k: Kind, f: fn(&Obj<'a, 'input>) -> Option<usize>| {
                if kind == k {
                    Some(idx)
                } else {
                    inherit(f)
                }
            };
            let obj = Obj {
                kind,
                el,
                parent,
                depth: up.map_or(0, |o| o.depth + 1),
                os_index,
                package: own(Kind::Package, |o| o.package),
                die: own(Kind::Die, |o| o.die),
                core: own(Kind::Core, |o| o.core),
                llc,
            };
            objs.push(obj);
            // Push children in reverse so they pop (and get numbered) in
            // document order.
            let children: Vec<Node<'a, 'input>> = el.children().filter(|c| c.has_tag_name("object")).collect();
            for child in children.into_iter().rev() {
                stack.push((child, Some(idx)));
            }
        }
        // Each object's PU set is a bitmap up to its highest PU, so a file
        // nesting a million objects over PU 65535 would take 8 GiB. The
        // highest PU of every subtree is found first (one number per
        // object), and the sets are built only if they fit the budget
        // every reader has.
        let mut highest: Vec<Option<u32>> = vec![None; objs.len()];
        for (i, obj) in objs.iter().enumerate() {
            if obj.kind == Kind::Pu {
                highest[i] = Some(pu_number(obj)?);
            }
        }
        for i in (0..objs.len()).rev() {
            if let (Some(p), Some(h)) = (objs[i].parent, highest[i]) {
                highest[p] = highest[p].max(Some(h));
            }
        }
        let bytes: usize = highest.iter().map(|&h| CpuSet::bytes_for(h)).sum();
        if bytes > MAX_SETS_BYTES {
            return Err(ParseError::bad(
                "topology",
                "an object tree whose PU sets fit in 128 MiB (one bit per PU number up to each object's highest)",
                &format!("{} objects over PUs up to {}", objs.len(), highest.first().copied().flatten().unwrap_or(0)),
            ));
        }
        let mut pus = vec![CpuSet::new(); objs.len()];
        for (i, obj) in objs.iter().enumerate() {
            if obj.kind == Kind::Pu {
                let cpu = pu_number(obj)?;
                pus[i].insert(cpu);
            }
        }
        // Children come after their parent in document order, so one
        // backward sweep folds every subtree into its root.
        for i in (0..objs.len()).rev() {
            if let Some(p) = objs[i].parent {
                if !pus[i].is_empty() {
                    pus[p] = pus[p].union(&pus[i]);
                }
            }
        }
        Ok(Tree { objs, pus, v1 })
    }

    /// The nearest ancestor that is neither a memory nor an I/O object:
    /// the object whose CPUs a NUMA node or a device is local to. In a v1
    /// file a NUMA node is such an ancestor.
    pub(super) fn normal_ancestor(&self, idx: usize) -> Option<usize> {
        let mut cur = self.objs.get(idx)?.parent;
        while let Some(p) = cur {
            let obj = self.objs.get(p)?;
            let memory = obj.kind.is_memory() && !(self.v1 && obj.kind == Kind::Numa);
            if !memory && !obj.kind.is_io() && obj.kind != Kind::Misc {
                return Some(p);
            }
            cur = obj.parent;
        }
        None
    }
}

/// A PU's OS number, which must fit a CPU set.
fn pu_number(obj: &Obj<'_, '_>) -> Result<u32, ParseError> {
    let cpu = obj.os_index.ok_or_else(|| ParseError::Missing(field(obj.el, "os_index")))?;
    if cpu >= MAX_CPU {
        return Err(ParseError::bad(field(obj.el, "os_index"), "a CPU number below 65536", &cpu.to_string()));
    }
    Ok(cpu)
}

/// Reads an object's type the way hwloc does (case-insensitive, with the
/// 1.x spellings `Socket`, `Cache`, `System`, `Tile`, `Module`).
fn object_kind(el: Node<'_, '_>) -> Result<Kind, ParseError> {
    let raw = el.attribute("type").ok_or_else(|| ParseError::Missing(field(el, "type")))?;
    let t = raw.trim().to_ascii_lowercase();
    let cache = |name: &str, suffix: &str| -> Option<u8> {
        let digit = name.strip_prefix('l')?.strip_suffix(suffix)?;
        digit.parse::<u8>().ok().filter(|d| (1..=5).contains(d))
    };
    let kind = match t.as_str() {
        "machine" | "system" => Kind::Machine,
        "package" | "socket" => Kind::Package,
        "die" => Kind::Die,
        "group" | "tile" | "module" => {
            // hwloc 2.0 wrote dies as Groups of kind INTEL_DIE (104) or
            // with subtype "Die"; 2.1 turns those into Die objects.
            let die_kind = el.attribute("kind").map(str::trim) == Some("104");
            let die_subtype = el.attribute("subtype").is_some_and(|s| s.eq_ignore_ascii_case("die"));
            if die_kind || die_subtype {
                Kind::Die
            } else {
                Kind::Group
            }
        }
        "numanode" | "node" => Kind::Numa,
        "memcache" => Kind::MemCache,
        "core" => Kind::Core,
        "pu" => Kind::Pu,
        "bridge" => Kind::Bridge,
        "pcidev" => Kind::PciDev,
        "osdev" => Kind::OsDev,
        "misc" => Kind::Misc,
        "cache" => {
            // hwloc 1.x: one `Cache` type, level in `depth`, instruction
            // caches marked by cache_type 2.
            let level = attr_u32(el, "depth")?.ok_or_else(|| ParseError::Missing(field(el, "depth")))?;
            let level = u8::try_from(level)
                .map_err(|_| ParseError::bad(field(el, "depth"), "a cache level from 1 to 5", &level.to_string()))?;
            let instruction = attr_u32(el, "cache_type")? == Some(2);
            Kind::Cache { level, eligible: !instruction && !memory_side(el) }
        }
        other => {
            if let Some(level) = cache(other, "cache") {
                Kind::Cache { level, eligible: !memory_side(el) }
            } else if let Some(level) = cache(other, "icache") {
                Kind::Cache { level, eligible: false }
            } else {
                return Err(ParseError::bad(
                    field(el, "type"),
                    "an hwloc object type (Machine, Package, Die, Group, NUMANode, L3Cache, Core, PU, PCIDev, ...)",
                    raw,
                ));
            }
        }
    };
    Ok(kind)
}

/// hwloc 2.0 showed memory-side caches (KNL cache mode, heteromem) as an
/// L3Cache with this subtype; they cache memory, not a CPU group.
fn memory_side(el: Node<'_, '_>) -> bool {
    el.attribute("subtype").is_some_and(|s| s.eq_ignore_ascii_case("MemorySideCache"))
}

/// Names an attribute of an element for error messages:
/// `object[type=NUMANode] local_memory (line 12)`.
pub(super) fn field(el: Node<'_, '_>, attr: &str) -> String {
    let tag = el.tag_name().name();
    let line = el.document().text_pos_at(el.range().start).row;
    let qualifier = match tag {
        "object" => el.attribute("type").map(|t| format!("[type={}]", cut(t))),
        "distances2" => el.attribute("name").map(|n| format!("[name={}]", cut(n))),
        _ => None,
    };
    format!("{tag}{} {attr} (line {line})", qualifier.unwrap_or_default())
}

/// Keeps hostile attribute values from flooding an error message.
fn cut(s: &str) -> String {
    s.chars().take(40).collect()
}

/// An optional unsigned attribute; present but not a number is an error.
pub(super) fn attr_u64(el: Node<'_, '_>, name: &str) -> Result<Option<u64>, ParseError> {
    match el.attribute(name) {
        None => Ok(None),
        Some(v) => {
            parse_u64(v.trim()).map(Some).ok_or_else(|| ParseError::bad(field(el, name), "an unsigned integer", v))
        }
    }
}

/// An optional attribute that must fit 32 bits.
pub(super) fn attr_u32(el: Node<'_, '_>, name: &str) -> Result<Option<u32>, ParseError> {
    match el.attribute(name) {
        None => Ok(None),
        Some(v) => parse_u64(v.trim())
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| ParseError::bad(field(el, name), "an unsigned 32-bit integer", v)),
    }
}

/// Decimal, or hex with `0x` (hwloc reads numbers with `strtoull(.., 0)`).
pub(super) fn parse_u64(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// An hwloc bitmap attribute (`0x000000ff,,,0x0000ff00`: 32-bit groups,
/// most significant first, empty groups meaning zero).
pub(super) fn attr_bitmap(el: Node<'_, '_>, name: &str) -> Result<Option<CpuSet>, ParseError> {
    let Some(raw) = el.attribute(name) else {
        return Ok(None);
    };
    let normalised: Vec<&str> = raw.split(',').map(|g| if g.trim().is_empty() { "0" } else { g }).collect();
    CpuSet::parse_mask(&normalised.join(","))
        .map(Some)
        .map_err(|source| ParseError::CpuSet { field: field(el, name), source })
}

/// The `value` of the first `<info name=NAME>` child of an element.
pub(super) fn info<'a>(el: Node<'a, '_>, name: &str) -> Option<&'a str> {
    el.children()
        .filter(|c| c.has_tag_name("info"))
        .find(|c| c.attribute("name") == Some(name))
        .and_then(|c| c.attribute("value"))
}
