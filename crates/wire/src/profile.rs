//! The host profile (`docs/formats/host-profile.md`): a TOML file an
//! operator writes once per host with what the host keeps for itself and
//! how VMs may use it, and [`resolve`], the one place where the profile, a
//! document's `reserved` object and the per-run flags become the
//! planner's [`Reservations`]. The CLI and the server both call it, so a
//! reservation means the same whichever way it reached numaplace.
//!
//! The file is read as a TOML table and walked key by key rather than
//! through a serde derive: every refusal then names the file, the key and
//! what was expected in numaplace's own words, and an unknown key (a typo
//! that would silently reserve nothing) is refused.

use crate::topology::ReservedDoc;
use numaplace_plan::{Overhead, Reservations};
use numaplace_topo::{try_parse_size, CpuSet, MemoryKind, NodeId, Topology, Warning, MAX_CPU, MAX_NODE};
use std::fmt;

/// Where the profile is read from when no `--host-config` is given (and
/// `NUMAPLACE_HOST_CONFIG` is unset); a missing file there means no profile.
pub const DEFAULT_PATH: &str = "/etc/numaplace/host.toml";

/// The keys a profile may have, in the order the documentation lists them.
pub const KEYS: [&str; 7] =
    ["reserved_cpus", "reserved_memory", "shared_cpus", "accel", "qemu_overhead", "memory_kinds", "node_kinds"];

/// The keys of the `[qemu_overhead]` table.
pub const OVERHEAD_KEYS: [&str; 2] = ["fixed", "per_gib"];

/// How guests run on the host: the workspace's one accelerator type.
pub use numaplace_topo::Accel;

/// A host profile as read, every value checked for its form (whether its
/// CPUs exist is checked against a host by [`resolve`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostProfile {
    /// The file it was read from, for errors.
    pub file: String,
    /// `reserved_cpus`: CPUs no vCPU is planned on.
    pub reserved_cpus: Option<CpuSet>,
    /// `reserved_memory`: bytes kept free on every node.
    pub reserved_memory: Option<u64>,
    /// `shared_cpus`: the shared CPU pool.
    pub shared_cpus: Option<CpuSet>,
    /// `accel`: the guest type when a command is given none.
    pub accel: Option<Accel>,
    /// `[qemu_overhead]`: QEMU's memory beside each VM's (default when
    /// absent, or for the key absent from the table).
    pub overhead: Overhead,
    /// `memory_kinds`: kinds of memory beside DRAM (`hbm`, `cxl`, ...) a
    /// VM whose request names none may use; empty: DRAM only.
    pub memory_kinds: Vec<MemoryKind>,
    /// `[node_kinds]`: the memory kind of each node the operator declares
    /// (`"8-15" = "hbm"`), over whatever the host's files say or the
    /// reader found; by node, each once.
    pub node_kinds: Vec<(NodeId, MemoryKind)>,
}

/// What a value should have been.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expected {
    /// The file is not TOML (the parser's own words, with its position).
    Toml(String),
    /// A key the profile does not have (or the table given).
    Key(&'static [&'static str]),
    /// A CPU list in the kernel's syntax.
    CpuList,
    /// A size such as 2GiB.
    Size,
    /// `kvm` or `tcg`.
    Accel,
    /// A list of memory kinds (`["hbm", "cxl"]`).
    MemoryKinds,
    /// A memory kind (`"hbm"`).
    MemoryKind,
    /// A node list (`"8-15"`).
    NodeList,
    /// A node this host has (the host's nodes).
    HostNode(CpuSet),
    /// A table of the keys given.
    Table(&'static [&'static str]),
    /// A CPU this host has online (the host's online CPUs).
    HostCpu(CpuSet),
    /// A CPU number below the workspace's limit.
    SmallCpu,
    /// CPUs not also named by the other list (its place).
    NotIn(String),
    /// A reservation that leaves VMs at least one CPU (the host's online
    /// CPUs).
    LeavesCpus(CpuSet),
    /// Memory per node less than the largest node has (its bytes).
    LeavesMemory(u64),
}

/// A reservation or profile value refused: where it was (a file and key,
/// a document and field, or a flag), what was expected, what was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReservationError {
    /// `FILE: key`, `FILE: reserved.cpus` or `--reserved-cpus`.
    pub at: String,
    /// What was expected.
    pub expected: Expected,
    /// What was found, as written (quoted when it was text).
    pub found: String,
}

impl fmt::Display for ReservationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = &self.at;
        let found = &self.found;
        match &self.expected {
            Expected::Toml(why) => write!(f, "{at}: not a TOML file: {why}"),
            Expected::Key(keys) => {
                write!(f, "{at}: unknown key {found}; expected one of {}", keys.join(", "))
            }
            Expected::CpuList => write!(f, "{at}: expected a CPU list such as 0-1,32-33, found {found}"),
            Expected::Size => write!(f, "{at}: expected a size such as 2GiB or 512MiB, found {found}"),
            Expected::Accel => write!(f, "{at}: expected kvm or tcg, found {found}"),
            Expected::MemoryKinds => write!(
                f,
                "{at}: expected a list of memory kinds from dram, hbm, cxl, gpu, nvm, other such as [\"hbm\"], found {found}"
            ),
            Expected::MemoryKind => {
                write!(f, "{at}: expected a memory kind, one of dram, hbm, cxl, gpu, nvm, other, found {found}")
            }
            Expected::NodeList => write!(f, "{at}: expected a node list such as 8-15 as the key, found {found}"),
            Expected::HostNode(nodes) => {
                write!(f, "{at}: expected nodes this host has ({nodes}), found node {found}, which it does not have")
            }
            Expected::Table(keys) => {
                write!(f, "{at}: expected a table with {}, found {found}", keys.join(" and "))
            }
            Expected::HostCpu(online) => {
                write!(f, "{at}: expected CPUs this host has online ({online}), found CPU {found}, which does not exist or is offline")
            }
            Expected::SmallCpu => write!(f, "{at}: expected CPU numbers below {MAX_CPU}, found {found}"),
            Expected::LeavesCpus(online) => write!(
                f,
                "{at}: expected CPUs that leave VMs at least one of the host's online CPUs ({online}), found {found}, \
                 every one: no VM could be placed"
            ),
            Expected::LeavesMemory(largest) => write!(
                f,
                "{at}: expected less memory than the largest node has ({largest} bytes), found {found} bytes kept \
                 free on every node: no VM could be placed"
            ),
            Expected::NotIn(other) => {
                write!(f, "{at}: expected CPUs not also reserved by {other}, found CPU {found} both reserved for the host and in the shared pool")
            }
        }
    }
}

impl std::error::Error for ReservationError {}

fn quoted(text: &str) -> String {
    format!("{text:?}")
}

/// How a TOML value is shown in an error: text quoted, others as TOML.
fn shown(value: &toml::Value) -> String {
    match value {
        toml::Value::String(s) => quoted(s),
        toml::Value::Table(_) => "a table".into(),
        toml::Value::Array(_) => "an array".into(),
        toml::Value::Integer(n) => n.to_string(),
        toml::Value::Float(x) => x.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Datetime(d) => d.to_string(),
    }
}

fn cpu_list(at: &str, text: &str) -> Result<CpuSet, ReservationError> {
    text.trim().parse::<CpuSet>().map_err(|_| ReservationError {
        at: at.into(),
        expected: Expected::CpuList,
        found: quoted(text),
    })
}

fn size(at: &str, text: &str) -> Result<u64, ReservationError> {
    try_parse_size(text).map_err(|_| ReservationError { at: at.into(), expected: Expected::Size, found: quoted(text) })
}

/// A string value, or the error a value of another type gets.
fn text<'v>(at: &str, value: &'v toml::Value, expected: Expected) -> Result<&'v str, ReservationError> {
    value.as_str().ok_or_else(|| ReservationError { at: at.into(), expected, found: shown(value) })
}

/// A size given as text (`"2GiB"`) or as a whole number of bytes.
fn size_value(at: &str, value: &toml::Value) -> Result<u64, ReservationError> {
    match value {
        toml::Value::Integer(n) => u64::try_from(*n).map_err(|_| ReservationError {
            at: at.into(),
            expected: Expected::Size,
            found: n.to_string(),
        }),
        other => size(at, text(at, other, Expected::Size)?),
    }
}

impl HostProfile {
    /// Reads a profile's text; `file` names it in errors.
    pub fn parse(file: &str, source: &str) -> Result<HostProfile, ReservationError> {
        let table = source.parse::<toml::Table>().map_err(|e| {
            // The parser's message with its position in words, on one
            // line (its own display draws the line with a caret).
            let why = match e.span() {
                Some(span) => {
                    let before = source.get(..span.start).unwrap_or(source);
                    let line = before.matches('\n').count() + 1;
                    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
                    format!("line {line}, column {column}: {}", e.message())
                }
                None => e.message().to_string(),
            };
            ReservationError { at: file.into(), expected: Expected::Toml(why), found: String::new() }
        })?;
        let mut profile = HostProfile {
            file: file.into(),
            reserved_cpus: None,
            reserved_memory: None,
            shared_cpus: None,
            accel: None,
            overhead: Overhead::default(),
            memory_kinds: Vec::new(),
            node_kinds: Vec::new(),
        };
        for (key, value) in &table {
            let at = format!("{file}: {key}");
            match key.as_str() {
                "reserved_cpus" => {
                    profile.reserved_cpus = Some(cpu_list(&at, text(&at, value, Expected::CpuList)?)?);
                }
                "shared_cpus" => profile.shared_cpus = Some(cpu_list(&at, text(&at, value, Expected::CpuList)?)?),
                "reserved_memory" => profile.reserved_memory = Some(size_value(&at, value)?),
                "memory_kinds" => {
                    let bad =
                        |found: String| ReservationError { at: at.clone(), expected: Expected::MemoryKinds, found };
                    let items = value.as_array().ok_or_else(|| bad(shown(value)))?;
                    for item in items {
                        let kind = item.as_str().and_then(MemoryKind::from_name).ok_or_else(|| bad(shown(item)))?;
                        if kind != MemoryKind::Dram && !profile.memory_kinds.contains(&kind) {
                            profile.memory_kinds.push(kind);
                        }
                    }
                }
                "node_kinds" => profile.node_kinds = node_kinds(file, value)?,
                "accel" => {
                    let name = text(&at, value, Expected::Accel)?;
                    profile.accel = Some(match Accel::from_name(name) {
                        Some(accel) => accel,
                        None => return Err(ReservationError { at, expected: Expected::Accel, found: quoted(name) }),
                    })
                }
                "qemu_overhead" => {
                    let Some(inner) = value.as_table() else {
                        return Err(ReservationError {
                            at,
                            expected: Expected::Table(&OVERHEAD_KEYS),
                            found: shown(value),
                        });
                    };
                    for (k, v) in inner {
                        let at = format!("{file}: qemu_overhead.{k}");
                        match k.as_str() {
                            "fixed" => profile.overhead.fixed_bytes = size_value(&at, v)?,
                            "per_gib" => profile.overhead.per_gib_bytes = size_value(&at, v)?,
                            _ => {
                                return Err(ReservationError {
                                    at: format!("{file}: qemu_overhead"),
                                    expected: Expected::Key(&OVERHEAD_KEYS),
                                    found: format!("`{k}`"),
                                })
                            }
                        }
                    }
                }
                _ => {
                    return Err(ReservationError {
                        at: file.into(),
                        expected: Expected::Key(&KEYS),
                        found: format!("`{key}`"),
                    })
                }
            }
        }
        Ok(profile)
    }
}

/// The `[node_kinds]` table: node lists as keys, a kind name each. A
/// node named twice takes the later value.
fn node_kinds(file: &str, value: &toml::Value) -> Result<Vec<(NodeId, MemoryKind)>, ReservationError> {
    let Some(table) = value.as_table() else {
        return Err(ReservationError {
            at: format!("{file}: node_kinds"),
            expected: Expected::Table(&["node lists", "memory kinds"]),
            found: shown(value),
        });
    };
    let mut out: Vec<(NodeId, MemoryKind)> = Vec::new();
    for (nodes, kind) in table {
        let at = format!("{file}: node_kinds.{nodes}");
        let list = CpuSet::parse_list(nodes.trim())
            .ok()
            .filter(|l| !l.is_empty() && l.iter().all(|n| n < MAX_NODE))
            .ok_or_else(|| ReservationError { at: at.clone(), expected: Expected::NodeList, found: quoted(nodes) })?;
        let kind = kind.as_str().and_then(MemoryKind::from_name).ok_or_else(|| ReservationError {
            at: at.clone(),
            expected: Expected::MemoryKind,
            found: shown(kind),
        })?;
        for node in list.iter() {
            out.retain(|(n, _)| n.0 != node);
            out.push((NodeId(node), kind));
        }
    }
    out.sort();
    Ok(out)
}

/// The host as the profile declares it: each node of `[node_kinds]` takes
/// its declared kind, whatever the source named or the reader found (its
/// `*-found` warning goes: the operator has said). A node the host does
/// not have is refused, naming the key.
pub fn declare_kinds(topology: Topology, profile: Option<&HostProfile>) -> Result<Topology, ReservationError> {
    let Some(p) = profile.filter(|p| !p.node_kinds.is_empty()) else { return Ok(topology) };
    let mut parts = topology.to_parts();
    let have: CpuSet = parts.nodes.iter().map(|n| n.id.0).collect();
    for &(id, kind) in &p.node_kinds {
        let Some(node) = parts.nodes.iter_mut().find(|n| n.id == id) else {
            return Err(ReservationError {
                at: format!("{}: node_kinds", p.file),
                expected: Expected::HostNode(have),
                found: id.0.to_string(),
            });
        };
        node.kind = match kind {
            MemoryKind::Dram => None,
            MemoryKind::Hbm => Some("HBM".into()),
            MemoryKind::Cxl => Some("CXL".into()),
            MemoryKind::Gpu => Some("GPUMemory".into()),
            MemoryKind::Nvm => Some("NVM".into()),
            MemoryKind::Other => Some("other".into()),
        };
        parts.warnings.retain(|w| !matches!(w, Warning::KindFound { node, .. } if *node == id));
    }
    // The parts came from a checked topology and only kinds changed.
    Topology::from_parts(parts).map_err(|e| ReservationError {
        at: format!("{}: node_kinds", p.file),
        expected: Expected::NodeList,
        found: e.to_string(),
    })
}

/// A value given for this run (a command-line flag, a query parameter):
/// the name it was given under, for errors, and its text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Given<'a> {
    /// `--reserved-cpus`, or `reserved_cpus` for the server's query.
    pub key: &'a str,
    /// The text as given.
    pub value: &'a str,
}

impl<'a> Given<'a> {
    /// A value given under `key`, if any.
    pub fn of(key: &'a str, value: Option<&'a str>) -> Option<Given<'a>> {
        value.map(|value| Given { key, value })
    }
}

/// The per-run values, each given or not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Overrides<'a> {
    /// CPUs reserved for the host.
    pub reserved_cpus: Option<Given<'a>>,
    /// Memory kept free on every node.
    pub reserved_memory: Option<Given<'a>>,
    /// The shared CPU pool.
    pub shared_cpus: Option<Given<'a>>,
}

/// A document's `reserved` object (a plan's, or a topology JSON's) and
/// the name of the document, for errors.
#[derive(Clone, Copy, Debug)]
pub struct Document<'a> {
    /// The file (or host) the document came from.
    pub name: &'a str,
    /// Its `reserved`.
    pub reserved: &'a ReservedDoc,
}

/// One value with where it came from (a flag, or a file and key), for
/// the errors found once every value is known.
struct Sourced<T> {
    value: T,
    at: String,
}

/// One CPU list of a document's `reserved`, bounded like every CPU list
/// of a document.
fn document_list(doc: &Document<'_>, field: &str, list: &[u32]) -> Result<Sourced<CpuSet>, ReservationError> {
    let at = format!("{}: {field}", doc.name);
    if let Some(c) = list.iter().find(|&&c| c >= MAX_CPU) {
        return Err(ReservationError { at, expected: Expected::SmallCpu, found: c.to_string() });
    }
    Ok(Sourced { value: list.iter().copied().collect(), at })
}

/// The host's reservations for one run: each of the reserved CPUs, the
/// reserved memory and the shared pool from its flag when given, else
/// from the document's `reserved` (taken whole: it is what that document
/// was planned with), else from the profile, else none; the QEMU overhead
/// rule from the profile, else the default. Every CPU must be one the
/// host has online, and no CPU both reserved and shared; a refusal names
/// the flag, or the file and key, the value came from.
pub fn resolve(
    topology: &Topology,
    profile: Option<&HostProfile>,
    document: Option<Document<'_>>,
    overrides: &Overrides<'_>,
) -> Result<Reservations, ReservationError> {
    let (mut cpus, mut memory, mut shared) = match (document, profile) {
        (Some(doc), _) => (
            document_list(&doc, "reserved.cpus", &doc.reserved.cpus)?,
            Sourced { value: doc.reserved.memory_per_node, at: format!("{}: reserved.memory_per_node", doc.name) },
            document_list(&doc, "reserved.shared_cpus", &doc.reserved.shared_cpus)?,
        ),
        (None, Some(p)) => {
            let at = |key: &str| format!("{}: {key}", p.file);
            (
                Sourced { value: p.reserved_cpus.clone().unwrap_or_default(), at: at("reserved_cpus") },
                Sourced { value: p.reserved_memory.unwrap_or(0), at: at("reserved_memory") },
                Sourced { value: p.shared_cpus.clone().unwrap_or_default(), at: at("shared_cpus") },
            )
        }
        (None, None) => (
            Sourced { value: CpuSet::new(), at: String::new() },
            Sourced { value: 0, at: String::new() },
            Sourced { value: CpuSet::new(), at: String::new() },
        ),
    };
    if let Some(g) = overrides.reserved_cpus {
        cpus = Sourced { value: cpu_list(g.key, g.value)?, at: g.key.into() };
    }
    if let Some(g) = overrides.shared_cpus {
        shared = Sourced { value: cpu_list(g.key, g.value)?, at: g.key.into() };
    }
    if let Some(g) = overrides.reserved_memory {
        memory = Sourced { value: size(g.key, g.value)?, at: g.key.into() };
    }
    let online = topology.online_cpus();
    for list in [&cpus, &shared] {
        if let Some(cpu) = list.value.iter().find(|&c| !online.contains(c)) {
            return Err(ReservationError {
                at: list.at.clone(),
                expected: Expected::HostCpu(online),
                found: cpu.to_string(),
            });
        }
    }
    if let Some(both) = cpus.value.intersection(&shared.value).iter().next() {
        return Err(ReservationError {
            at: shared.at.clone(),
            expected: Expected::NotIn(cpus.at.clone()),
            found: both.to_string(),
        });
    }
    // A reservation that leaves no VM anything is refused where it is
    // written: accepted, every VM would be rejected without the
    // reservation being named.
    if !online.is_empty() && online.difference(&cpus.value).is_empty() {
        return Err(ReservationError {
            at: cpus.at.clone(),
            expected: Expected::LeavesCpus(online),
            found: cpus.value.to_string(),
        });
    }
    let largest = topology.nodes().iter().map(|n| n.memory_bytes).max().unwrap_or(0);
    if largest > 0 && memory.value >= largest {
        return Err(ReservationError {
            at: memory.at.clone(),
            expected: Expected::LeavesMemory(largest),
            found: memory.value.to_string(),
        });
    }
    Ok(Reservations {
        cpus: cpus.value,
        memory_per_node: memory.value,
        shared_cpus: shared.value,
        overhead: profile.map_or_else(Overhead::default, |p| p.overhead),
        memory_kinds: profile.map_or_else(Vec::new, |p| p.memory_kinds.clone()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_reads_every_key() {
        let p = HostProfile::parse(
            "host.toml",
            "reserved_cpus = \"0,40\"\nreserved_memory = \"2GiB\"\nshared_cpus = \"1-3\"\naccel = \"tcg\"\n[qemu_overhead]\nfixed = \"128MiB\"\nper_gib = \"16MiB\"\n",
        )
        .expect("profile");
        assert_eq!(p.reserved_cpus, Some("0,40".parse().expect("set")));
        assert_eq!(p.reserved_memory, Some(2 << 30));
        assert_eq!(p.shared_cpus, Some("1-3".parse().expect("set")));
        assert_eq!(p.accel, Some(Accel::Tcg));
        assert_eq!(p.overhead, Overhead { fixed_bytes: 128 << 20, per_gib_bytes: 16 << 20 });
    }

    #[test]
    fn bad_values_name_the_file_the_key_and_what_was_expected() {
        let e = HostProfile::parse("/etc/numaplace/host.toml", "reserved_cpus = \"x\"").expect_err("bad");
        assert_eq!(e.expected, Expected::CpuList);
        assert_eq!(
            e.to_string(),
            "/etc/numaplace/host.toml: reserved_cpus: expected a CPU list such as 0-1,32-33, found \"x\""
        );
        let e = HostProfile::parse("h.toml", "reserved_cpu = \"0\"").expect_err("typo");
        assert_eq!(e.expected, Expected::Key(&KEYS));
        assert!(e.to_string().starts_with("h.toml: unknown key `reserved_cpu`; expected one of reserved_cpus,"), "{e}");
        let e = HostProfile::parse("h.toml", "accel = \"xen\"").expect_err("accel");
        assert_eq!(e.expected, Expected::Accel);
        let e = HostProfile::parse("h.toml", "reserved_memory = \"2 lots\"").expect_err("size");
        assert_eq!(e.at, "h.toml: reserved_memory");
        let e = HostProfile::parse("h.toml", "[qemu_overhead]\nfixd = 1").expect_err("inner key");
        assert_eq!(e.expected, Expected::Key(&OVERHEAD_KEYS));
        let e = HostProfile::parse("h.toml", "reserved_cpus = [").expect_err("syntax");
        assert!(matches!(e.expected, Expected::Toml(_)), "{e}");
    }

    #[test]
    fn node_kinds_declare_a_kind_per_node_and_bad_ones_name_the_key() {
        let p = HostProfile::parse("h.toml", "[node_kinds]\n8-9 = \"hbm\"\n\"2\" = \"CXL\"\n9 = \"dram\"\n")
            .expect("profile");
        assert_eq!(
            p.node_kinds,
            vec![(NodeId(2), MemoryKind::Cxl), (NodeId(8), MemoryKind::Hbm), (NodeId(9), MemoryKind::Dram)]
        );
        let e = HostProfile::parse("h.toml", "[node_kinds]\n8 = \"fast\"").expect_err("kind");
        assert_eq!(
            e.to_string(),
            "h.toml: node_kinds.8: expected a memory kind, one of dram, hbm, cxl, gpu, nvm, other, found \"fast\""
        );
        let e = HostProfile::parse("h.toml", "[node_kinds]\nx = \"hbm\"").expect_err("nodes");
        assert_eq!(e.to_string(), "h.toml: node_kinds.x: expected a node list such as 8-15 as the key, found \"x\"");
        let e = HostProfile::parse("h.toml", "node_kinds = \"hbm\"").expect_err("table");
        assert_eq!(e.at, "h.toml: node_kinds");
        let e = HostProfile::parse("h.toml", "[node_kinds]\n5000 = \"hbm\"").expect_err("bound");
        assert_eq!(e.expected, Expected::NodeList);
    }

    #[test]
    fn the_default_overhead_is_the_planners() {
        let p = HostProfile::parse("h.toml", "").expect("empty");
        assert_eq!(p.overhead, Overhead::default());
        for m in [0, 1, 1 << 30, (64 << 30) + 12345, u64::MAX / 2] {
            assert_eq!(Overhead::default().bytes(m), (64 << 20) + m / 128);
        }
    }
}
