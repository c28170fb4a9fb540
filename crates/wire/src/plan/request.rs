//! VM requests as users write them: a JSON list (`--vms FILE`) or a
//! `key=value,key=value` list (`--vm`), both turned into
//! [`numaplace_plan::Request`] by one set of field rules, so the two forms
//! accept the same keys, values and defaults and fail with the same
//! messages (`docs/formats/request.md`).
//!
//! The JSON form is checked field by field from a `serde_json::Value`
//! rather than through derived deserialisation, because serde's messages
//! name the type expected but not the field or the VM at fault.

use numaplace_plan::{CellWish, CpuMode, DeviceWish, EmulatorPlacement, MemoryTiers, Policy, Request, SmtPolicy};
use numaplace_topo::{parse_size, CpuSet, MemoryKind, NodeId, MAX_CPU};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::fmt;

/// Every key a request may carry, in documentation order.
pub const KEYS: [&str; 21] = [
    "name",
    "vcpus",
    "memory",
    "cpu",
    "smt",
    "policy",
    "hugepages",
    "overcommit",
    "memory_overcommit",
    "max_nodes",
    "devices",
    "cpu_hotadd",
    "max_vcpus",
    "force",
    "emulator",
    "cells",
    "guest_nodes",
    "cells_share_nodes",
    "shared_vcpus",
    "memory_kind",
    "memory_tiers",
];

/// Why a request was refused. `at` names the request (`vms[2] "db1"`,
/// `--vm db1`) so a batch error points at the right entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestError {
    /// The text is not JSON.
    Json {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// serde_json's message.
        message: String,
    },
    /// The document is not a list of objects.
    NotAList {
        /// What the top level was (`an object`, `a number`, ...).
        found: &'static str,
    },
    /// An entry is not an object.
    NotAnObject {
        /// Which request.
        at: String,
    },
    /// A key this version does not know.
    UnknownField {
        /// Which request.
        at: String,
        /// The key as written.
        field: String,
    },
    /// A key given twice (`--vm` only; JSON keeps the last one).
    DuplicateField {
        /// Which request.
        at: String,
        /// The key.
        field: String,
    },
    /// A required key is absent.
    Missing {
        /// Which request.
        at: String,
        /// The key.
        field: &'static str,
    },
    /// A value of the wrong form.
    BadValue {
        /// Which request.
        at: String,
        /// The key.
        field: &'static str,
        /// What a valid value looks like.
        expected: &'static str,
        /// What was there (cut to 80 characters).
        found: String,
    },
    /// A `--vm` piece that is not `key=value`.
    BadPiece {
        /// The piece.
        piece: String,
    },
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestError::Json { line, column, message } => {
                write!(f, "malformed JSON at line {line}, column {column}: {message}")
            }
            RequestError::NotAList { found } => {
                write!(f, "expected a JSON list of VM requests, found {found}")
            }
            RequestError::NotAnObject { at } => {
                write!(f, "{at}: expected an object such as {{\"name\": \"db1\", \"vcpus\": 4, \"memory\": \"8GiB\"}}")
            }
            RequestError::UnknownField { at, field } => {
                write!(f, "{at}: unknown field `{field}` (known fields: {})", KEYS.join(", "))
            }
            RequestError::DuplicateField { at, field } => write!(f, "{at}: `{field}` is given twice"),
            RequestError::Missing { at, field } => write!(f, "{at}: `{field}` is required"),
            RequestError::BadValue { at, field, expected, found } => {
                write!(f, "{at}: {field}: expected {expected}, found {found}")
            }
            RequestError::BadPiece { piece } => {
                write!(f, "--vm: `{piece}` is not key=value (e.g. name=db1,vcpus=8,memory=16GiB)")
            }
        }
    }
}

impl std::error::Error for RequestError {}

/// A value as either form gives it: JSON, or the text after `key=`.
#[derive(Clone, Copy)]
enum Given<'a> {
    Json(&'a Value),
    /// A JSON string, as read without building a `Value` for it.
    Str(&'a str),
    Text(&'a str),
}

impl Given<'_> {
    /// How the value is quoted back in an error.
    fn show(&self) -> String {
        let s = match self {
            Given::Json(v) => v.to_string(),
            Given::Str(s) => Value::from(*s).to_string(),
            Given::Text(t) => format!("`{t}`"),
        };
        if s.chars().count() > 80 {
            let cut: String = s.chars().take(77).collect();
            format!("{cut}...")
        } else {
            s
        }
    }

    /// The value as text when it is a string (JSON) or any text (`--vm`).
    fn text(&self) -> Option<&str> {
        match self {
            Given::Json(Value::String(s)) => Some(s),
            Given::Json(_) => None,
            Given::Str(t) | Given::Text(t) => Some(t),
        }
    }
}

/// The request being built, with the defaults.
struct Draft<'a> {
    /// Where the request sits, for errors (`vms[2]`, `--vm`); the name is
    /// added once known. Worded only when an error is: a batch of valid
    /// requests formats nothing.
    base: Base<'a>,
    name: Option<String>,
    vcpus: Option<u32>,
    memory: Option<u64>,
    req: Request,
    policy: Option<Policy>,
    hotadd: Option<bool>,
    max_vcpus: Option<u32>,
}

/// Where a request sits in its input.
#[derive(Clone, Copy)]
enum Base<'a> {
    /// An entry of a `--vms` list.
    Entry(usize),
    /// As the caller names it (`--vm`, `request`).
    Named(&'a str),
}

impl Draft<'_> {
    fn new(base: Base<'_>) -> Draft<'_> {
        Draft {
            base,
            name: None,
            vcpus: None,
            memory: None,
            req: Request::new("", 0, 0),
            policy: None,
            hotadd: None,
            max_vcpus: None,
        }
    }

    /// The request's place, and its name once known (`vms[2] "db1"`).
    fn at(&self) -> String {
        let base = match self.base {
            Base::Entry(i) => format!("vms[{i}]"),
            Base::Named(at) => at.to_string(),
        };
        match &self.name {
            Some(name) => format!("{base} \"{name}\""),
            None => base,
        }
    }

    fn bad(&self, field: &'static str, expected: &'static str, value: Given) -> RequestError {
        RequestError::BadValue { at: self.at(), field, expected, found: value.show() }
    }

    /// Applies one key; `key` is already in canonical (underscore) form.
    fn set(&mut self, key: &str, value: Given) -> Result<(), RequestError> {
        match key {
            "name" => {
                const EXPECTED: &str = "a non-empty name without `/` or control characters";
                let name = value.text().ok_or_else(|| self.bad("name", EXPECTED, value))?;
                // libvirt refuses `/` in domain names and its schema refuses
                // line breaks; catching them here keeps every emitted domain
                // definable.
                if name.trim().is_empty() || name.contains('/') || name.chars().any(char::is_control) {
                    return Err(self.bad("name", EXPECTED, value));
                }
                self.name = Some(name.to_string());
            }
            "vcpus" => {
                // A guest numbers its vCPUs like a host numbers its CPUs, so
                // the same bound holds (QEMU stops at 4096 today); it also
                // keeps the planner's per-vCPU lists small.
                let n = whole(value).filter(|&n| (1..=u64::from(MAX_CPU)).contains(&n));
                self.vcpus = Some(n.ok_or_else(|| self.bad("vcpus", "a whole number from 1 to 65536", value))? as u32);
            }
            "memory" => {
                let bytes = size(value).filter(|&b| b > 0);
                self.memory =
                    Some(bytes.ok_or_else(|| self.bad("memory", "a size such as 64GiB, 512MiB or bytes", value))?);
            }
            "cpu" => {
                self.req.cpu_mode = match value.text() {
                    Some("dedicated") => CpuMode::Dedicated,
                    Some("shared") => CpuMode::Shared,
                    _ => return Err(self.bad("cpu", "dedicated or shared", value)),
                };
            }
            "smt" => {
                self.req.smt = value
                    .text()
                    .and_then(smt_from_name)
                    .ok_or_else(|| self.bad("smt", "prefer-cores, pairs, require, isolate or any", value))?;
            }
            "policy" => {
                self.policy = Some(
                    value
                        .text()
                        .and_then(Policy::from_name)
                        .ok_or_else(|| self.bad("policy", "compact, smt-aware, balanced, spread or pack", value))?,
                );
            }
            "hugepages" => {
                // Huge page sizes are powers of two of at least 4 KiB on
                // every architecture Linux supports.
                let bytes = size(value).filter(|b| b.is_power_of_two() && *b >= 4096);
                self.req.hugepage_bytes =
                    Some(bytes.ok_or_else(|| self.bad("hugepages", "a page size such as 2MiB or 1GiB", value))?);
            }
            "overcommit" => {
                let ratio = ratio(value).filter(|r| (1.0..=MAX_CPU_OVERCOMMIT).contains(r));
                self.req.overcommit =
                    ratio.ok_or_else(|| self.bad("overcommit", "a ratio from 1 to 1000 such as 4 or 1.5", value))?;
            }
            "memory_overcommit" => {
                let ratio = ratio(value).filter(|r| (1.0..=numaplace_plan::MAX_MEMORY_OVERCOMMIT).contains(r));
                self.req.memory_overcommit = ratio.ok_or_else(|| {
                    self.bad("memory_overcommit", "a ratio from 1 to 16 such as 1.5 (shared VMs only)", value)
                })?;
            }
            "max_nodes" => {
                let n = whole(value).filter(|&n| (1..=u64::from(u32::MAX)).contains(&n));
                self.req.max_nodes = Some(n.ok_or_else(|| self.bad("max_nodes", "a whole number >= 1", value))? as u32);
            }
            "devices" => {
                let Given::Json(Value::Array(items)) = value else {
                    return Err(self.bad("devices", "a list of {\"address\": ...} or {\"node\": ...}", value));
                };
                for item in items {
                    let wish = device_from_json(item)
                        .ok_or_else(|| self.bad("devices", DEVICE_EXPECTED, Given::Json(item)))?;
                    self.req.devices.push(wish);
                }
            }
            "device" | "required_device" => {
                let wish = value
                    .text()
                    .and_then(|t| device_from_text(t, key == "required_device"))
                    .ok_or_else(|| self.bad("device", "a PCI address such as 0000:3b:00.0, or nodeN", value))?;
                self.req.devices.push(wish);
            }
            "cpu_hotadd" => {
                self.hotadd = Some(flag(value).ok_or_else(|| self.bad("cpu_hotadd", "true or false", value))?)
            }
            "max_vcpus" => {
                let n = whole(value).filter(|&n| (2..=u64::from(MAX_CPU)).contains(&n));
                self.max_vcpus =
                    Some(n.ok_or_else(|| self.bad("max_vcpus", "a whole number from 2 to 65536", value))? as u32);
            }
            "force" => self.req.force = flag(value).ok_or_else(|| self.bad("force", "true or false", value))?,
            "emulator" => {
                const EXPECTED: &str = "vm-nodes, isolate, housekeeping or a CPU list such as 0-1";
                let text = value.text().ok_or_else(|| self.bad("emulator", EXPECTED, value))?;
                self.req.emulator = match text {
                    "vm-nodes" => EmulatorPlacement::VmNodes,
                    "isolate" => EmulatorPlacement::Isolate,
                    "housekeeping" => EmulatorPlacement::HostReserved,
                    _ => {
                        let set = CpuSet::parse_list(text).ok().filter(|s| !s.is_empty());
                        EmulatorPlacement::Housekeeping(set.ok_or_else(|| self.bad("emulator", EXPECTED, value))?)
                    }
                };
            }
            "cells" => {
                const EXPECTED: &str = "a list of {\"vcpus\": 4, \"memory\": \"8GiB\"}, vcpus a count or a list of distinct vCPUs such as [0, 2, 4, 6] (in --vm: cells=4:8GiB,4:8GiB or cells=0,2,4,6:8GiB,1,3,5,7:8GiB)";
                let cells = match value {
                    Given::Json(Value::Array(items)) => items.iter().map(cell_from_json).collect::<Option<Vec<_>>>(),
                    Given::Json(_) | Given::Str(_) => None,
                    Given::Text(t) => cells_from_text(t),
                };
                let cells = cells.filter(|c| !c.is_empty() && c.len() <= MAX_CELLS);
                self.req.cells = cells.ok_or_else(|| self.bad("cells", EXPECTED, value))?;
            }
            "guest_nodes" => {
                let n = whole(value).filter(|&n| (1..=MAX_CELLS as u64).contains(&n));
                self.req.guest_nodes =
                    Some(n.ok_or_else(|| self.bad("guest_nodes", "a whole number from 1 to 4096", value))? as u32);
            }
            "cells_share_nodes" => {
                self.req.cells_share_nodes =
                    flag(value).ok_or_else(|| self.bad("cells_share_nodes", "true or false", value))?
            }
            "shared_vcpus" => {
                const EXPECTED: &str = "a list of vCPU numbers such as 0-1 (the vCPUs that float; the rest are pinned)";
                let text = value.text().ok_or_else(|| self.bad("shared_vcpus", EXPECTED, value))?;
                let set = CpuSet::parse_list(text).ok().filter(|s| !s.is_empty());
                self.req.shared_vcpus = set.ok_or_else(|| self.bad("shared_vcpus", EXPECTED, value))?;
            }
            "memory_tiers" => {
                const EXPECTED: &str = "hidden or visible";
                self.req.memory_tiers = match value.text() {
                    Some("hidden") => MemoryTiers::Hidden,
                    Some("visible") => MemoryTiers::Visible,
                    _ => return Err(self.bad("memory_tiers", EXPECTED, value)),
                };
            }
            "memory_kind" => {
                const EXPECTED: &str =
                    "memory kinds from dram, hbm, cxl, gpu, nvm, other, or any (in --vm: memory_kind=hbm or dram,hbm)";
                let kinds = value.text().and_then(memory_kinds);
                self.req.memory_kinds = Some(kinds.ok_or_else(|| self.bad("memory_kind", EXPECTED, value))?);
            }
            other => return Err(RequestError::UnknownField { at: self.at(), field: other.to_string() }),
        }
        Ok(())
    }

    fn finish(self, default_policy: Policy) -> Result<Request, RequestError> {
        // Checked in the order the fields are worded, then moved into the
        // request without copying it.
        let missing = |field| RequestError::Missing { at: self.at(), field };
        if self.name.is_none() {
            return Err(missing("name"));
        }
        let vcpus = self.vcpus.ok_or_else(|| missing("vcpus"))?;
        let memory_bytes = self.memory.ok_or_else(|| missing("memory"))?;
        // Hot-add is planned for every vCPU the VM may have, so the most
        // it may grow to must be said; `max_vcpus` alone implies it.
        let bad = |field, expected, found: String| RequestError::BadValue { at: self.at(), field, expected, found };
        let max_vcpus = match (self.hotadd, self.max_vcpus) {
            (Some(true), None) => {
                return Err(bad(
                    "cpu_hotadd",
                    "max_vcpus beside it (the most vCPUs the VM may grow to; each is planned and pinned now)",
                    "true without max_vcpus".into(),
                ))
            }
            (Some(false), Some(_)) => {
                return Err(bad("cpu_hotadd", "true or absent when max_vcpus is given", "false".into()))
            }
            (_, Some(max)) if max <= vcpus => {
                return Err(bad("max_vcpus", "more than vcpus (the vCPUs online at boot)", max.to_string()))
            }
            (_, max) => max,
        };
        if !self.req.cells.is_empty() && self.req.guest_nodes.is_some() {
            return Err(bad(
                "guest_nodes",
                "either cells (each cell's size) or guest_nodes (that many equal cells), not both",
                "both".into(),
            ));
        }
        // A request that contradicts itself is bad input, named by its
        // field, not a VM no host can take.
        if !self.req.cells.is_empty() {
            let memory: u128 = self.req.cells.iter().map(|c| u128::from(c.memory_bytes)).sum();
            if memory != u128::from(memory_bytes) {
                return Err(bad(
                    "cells",
                    "cells whose memory adds up to the VM's memory",
                    format!("{memory} bytes in the cells for a VM of {memory_bytes} bytes"),
                ));
            }
            let cpus: u64 = self.req.cells.iter().map(|c| u64::from(c.vcpus)).sum();
            let planned = max_vcpus.unwrap_or(vcpus);
            if cpus != u64::from(planned) {
                return Err(bad(
                    "cells",
                    "cells whose vCPUs add up to the VM's vCPUs (max_vcpus with hot-add)",
                    format!("{cpus} vCPUs in the cells for a VM of {planned}"),
                ));
            }
        }
        if let Some(beyond) = self.req.shared_vcpus.iter().find(|&v| v >= max_vcpus.unwrap_or(vcpus)) {
            return Err(bad(
                "shared_vcpus",
                "vCPU numbers below the VM's vCPU count (vCPUs count from 0)",
                format!("vCPU {beyond} for a VM of {} vCPUs", max_vcpus.unwrap_or(vcpus)),
            ));
        }
        let Draft { name, mut req, policy, .. } = self;
        req.name = name.unwrap_or_default();
        req.vcpus = vcpus;
        req.memory_bytes = memory_bytes;
        req.policy = policy.unwrap_or(default_policy);
        req.max_vcpus = max_vcpus;
        Ok(req)
    }
}

/// Highest CPU overcommit ratio a request may ask (the planner's bound):
/// beyond it a shared vCPU's share of a CPU is no figure to plan with.
pub const MAX_CPU_OVERCOMMIT: f64 = 1000.0;

/// Most guest cells a request may give: QEMU numbers guest nodes below
/// 4096 (`MAX_NODES`), and the bound keeps a hostile request small.
const MAX_CELLS: usize = 4096;

fn cell_from_json(item: &Value) -> Option<CellWish> {
    let obj = item.as_object()?;
    let (mut vcpus, mut memory) = (None, None);
    for (key, v) in obj {
        match key.as_str() {
            "vcpus" => {
                vcpus = match v {
                    Value::Array(items) => {
                        let list: Option<Vec<u32>> = items
                            .iter()
                            .map(|n| n.as_u64().and_then(|n| u32::try_from(n).ok()).filter(|&n| n < MAX_CPU))
                            .collect();
                        vcpu_list(&list?).map(Err)
                    }
                    _ => v.as_u64().filter(|&n| (1..=u64::from(MAX_CPU)).contains(&n)).map(|n| Ok(n as u32)),
                }
            }
            "memory" => memory = size(Given::Json(v)).filter(|&b| b > 0),
            _ => return None,
        }
    }
    Some(match vcpus? {
        Ok(count) => CellWish::new(count, memory?),
        Err(list) => CellWish::listed(list, memory?),
    })
}

/// A cell's listed vCPUs (Nova's `hw:numa_cpus.N`): any distinct vCPU
/// numbers, in any order; the planner checks the lists against each
/// other and the VM's count.
fn vcpu_list(list: &[u32]) -> Option<CpuSet> {
    let set: CpuSet = list.iter().copied().collect();
    (!set.is_empty() && set.len() == list.len()).then_some(set)
}

/// The `--vm` form's cells: `4:8GiB,2:4GiB` (counts) or
/// `0,2,4,6:4GiB,1,3,5,7:4GiB` (lists, ranges allowed: `0-3:4GiB`). A
/// piece without `:` continues the cell's vCPU list.
fn cells_from_text(text: &str) -> Option<Vec<CellWish>> {
    let mut cells = Vec::new();
    let mut pending = String::new();
    for piece in text.split(',') {
        if !pending.is_empty() {
            pending.push(',');
        }
        pending.push_str(piece.trim());
        if piece.contains(':') {
            cells.push(cell_from_text(&pending)?);
            pending.clear();
        }
    }
    pending.is_empty().then_some(cells)
}

/// `4:8GiB` (a count) or `0-3:8GiB` / `0,2,4,6:8GiB` (the vCPUs), a cell
/// in the `--vm` form.
fn cell_from_text(text: &str) -> Option<CellWish> {
    let (vcpus, memory) = text.trim().split_once(':')?;
    let memory = parse_size(memory.trim()).filter(|&b| b > 0)?;
    let vcpus = vcpus.trim();
    if vcpus.contains(['-', ',']) {
        let set = CpuSet::parse_list(vcpus).ok().filter(|s| !s.is_empty() && s.last() < Some(MAX_CPU))?;
        return Some(CellWish::listed(set, memory));
    }
    let vcpus = vcpus.parse::<u64>().ok().filter(|&n| (1..=u64::from(MAX_CPU)).contains(&n))?;
    Some(CellWish::new(vcpus as u32, memory))
}

const DEVICE_EXPECTED: &str = "{\"address\": \"0000:3b:00.0\"} or {\"node\": 1}, with optional \"required\": true";

/// A finite ratio, as a JSON number or text.
fn ratio(value: Given) -> Option<f64> {
    let r = match value {
        Given::Json(v) => v.as_f64(),
        Given::Str(_) => None,
        Given::Text(t) => t.trim().parse::<f64>().ok(),
    };
    r.filter(|r| r.is_finite())
}

fn whole(value: Given) -> Option<u64> {
    match value {
        Given::Json(v) => v.as_u64(),
        Given::Str(_) => None,
        Given::Text(t) => t.trim().parse().ok(),
    }
}

fn size(value: Given) -> Option<u64> {
    match value {
        Given::Json(Value::Number(n)) => n.as_u64(),
        other => other.text().and_then(parse_size),
    }
}

fn flag(value: Given) -> Option<bool> {
    match value {
        Given::Json(v) => v.as_bool(),
        Given::Str(_) => None,
        Given::Text(t) => match t.trim() {
            "true" | "yes" | "on" | "1" => Some(true),
            "false" | "no" | "off" | "0" => Some(false),
            _ => None,
        },
    }
}

/// Whether text is a PCI address: `dddd:bb:dd.f` or `bb:dd.f`, hex.
pub(crate) fn is_pci_address(text: &str) -> bool {
    let (rest, func) = match text.rsplit_once('.') {
        Some(p) => p,
        None => return false,
    };
    let fields: Vec<&str> = rest.split(':').collect();
    let hex = |s: &str, n: usize| s.len() == n && s.chars().all(|c| c.is_ascii_hexdigit());
    let ok_fields = match fields.as_slice() {
        [d, b, s] => hex(d, 4) && hex(b, 2) && hex(s, 2),
        [b, s] => hex(b, 2) && hex(s, 2),
        _ => false,
    };
    ok_fields && func.len() == 1 && func.chars().all(|c| ('0'..='7').contains(&c))
}

/// Addresses are stored in the sysfs form (`0000:3b:00.0`, lower case) so
/// they compare equal to the host topology's device list.
fn normalise_address(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    if lower.matches(':').count() == 1 {
        format!("0000:{lower}")
    } else {
        lower
    }
}

fn device_from_json(item: &Value) -> Option<DeviceWish> {
    let obj = item.as_object()?;
    let mut wish = DeviceWish { address: None, node: None, required: false };
    for (key, v) in obj {
        match key.as_str() {
            "address" => {
                let a = v.as_str().filter(|a| is_pci_address(a))?;
                wish.address = Some(normalise_address(a));
            }
            "node" => wish.node = Some(NodeId(u32::try_from(v.as_u64()?).ok()?)),
            "required" => wish.required = v.as_bool()?,
            _ => return None,
        }
    }
    (wish.address.is_some() || wish.node.is_some()).then_some(wish)
}

fn device_from_text(text: &str, required: bool) -> Option<DeviceWish> {
    let text = text.trim();
    if let Some(n) = text.strip_prefix("node") {
        let node = n.parse::<u32>().ok()?;
        return Some(DeviceWish { address: None, node: Some(NodeId(node)), required });
    }
    is_pci_address(text).then(|| DeviceWish { address: Some(normalise_address(text)), node: None, required })
}

/// The SMT policy named `name` (`prefer-cores`, `pairs`, `isolate`, `any`).
pub fn smt_from_name(name: &str) -> Option<SmtPolicy> {
    Some(match name {
        "prefer-cores" => SmtPolicy::PreferCores,
        "pairs" => SmtPolicy::Pairs,
        "isolate" => SmtPolicy::Isolate,
        "require" => SmtPolicy::Require,
        "any" => SmtPolicy::Any,
        _ => return None,
    })
}

/// The name of an SMT policy as requests write it.
pub fn smt_name(smt: SmtPolicy) -> &'static str {
    match smt {
        SmtPolicy::PreferCores => "prefer-cores",
        SmtPolicy::Pairs => "pairs",
        SmtPolicy::Isolate => "isolate",
        SmtPolicy::Require => "require",
        SmtPolicy::Any => "any",
    }
}

/// The name of a CPU mode (`dedicated`, `shared`).
pub fn cpu_mode_name(mode: CpuMode) -> &'static str {
    match mode {
        CpuMode::Dedicated => "dedicated",
        CpuMode::Shared => "shared",
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// One request from a JSON object; `at` names it in errors (`vms[0]`).
/// `default_policy` applies when the object has no `policy`.
pub fn request_from_value(value: &Value, at: &str, default_policy: Policy) -> Result<Request, RequestError> {
    from_value(value, Base::Named(at), default_policy)
}

/// Entry `index` of a `--vms` list, read as `plan` reads it (errors name
/// it `vms[index]`); the label is made only for an error.
pub fn request_from_entry(value: &Value, index: usize, default_policy: Policy) -> Result<Request, RequestError> {
    from_value(value, Base::Entry(index), default_policy)
}

fn from_value(value: &Value, base: Base<'_>, default_policy: Policy) -> Result<Request, RequestError> {
    let obj: &Map<String, Value> =
        value.as_object().ok_or_else(|| RequestError::NotAnObject { at: Draft::new(base).at() })?;
    from_members(obj.iter().map(|(k, v)| (k.as_str(), json(v))), base, default_policy)
}

/// One request from its members, ordered by key (as a JSON object's map
/// orders them).
fn from_members<'v>(
    members: impl Iterator<Item = (&'v str, Given<'v>)> + Clone,
    base: Base<'_>,
    default_policy: Policy,
) -> Result<Request, RequestError> {
    let mut draft = Draft::new(base);
    // The name goes first so every later error names the VM.
    if let Some((_, name)) = members.clone().find(|(k, _)| *k == "name") {
        draft.set("name", name)?;
    }
    for (key, v) in members {
        if key != "name" {
            // JSON keys are taken as written: `max-nodes` is unknown here,
            // so a typo is not silently accepted under another spelling.
            if !KEYS.contains(&key) {
                return Err(RequestError::UnknownField { at: draft.at(), field: key.to_string() });
            }
            draft.set(key, v)?;
        }
    }
    draft.finish(default_policy)
}

/// A JSON value as a request's member: its strings read the one way
/// whichever path read them.
fn json(v: &Value) -> Given<'_> {
    match v {
        Value::String(s) => Given::Str(s),
        other => Given::Json(other),
    }
}

/// A request object's members as read, keys and strings borrowed from the
/// text where they need no unescaping.
struct Members<'de>(Vec<(Cow<'de, str>, Member<'de>)>);

/// A member's value: most are strings and numbers, read without building
/// a `Value` (and a `String`) for them.
// Copied only by the tests, which keep what the scanner hands over.
#[cfg_attr(test, derive(Clone))]
enum Member<'de> {
    Str(Cow<'de, str>),
    Json(Value),
}

impl Member<'_> {
    fn given(&self) -> Given<'_> {
        match self {
            Member::Str(s) => Given::Str(s),
            Member::Json(v) => Given::Json(v),
        }
    }
}

impl<'de> Deserialize<'de> for Member<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Member<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Member<'de>, E> {
                Ok(Member::Str(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Member<'de>, E> {
                Ok(Member::Str(Cow::Owned(v.to_string())))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Member<'de>, E> {
                Ok(Member::Json(Value::Bool(v)))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Member<'de>, E> {
                Ok(Member::Json(Value::from(v)))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Member<'de>, E> {
                Ok(Member::Json(Value::from(v)))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Member<'de>, E> {
                Ok(Member::Json(Value::from(v)))
            }
            fn visit_unit<E>(self) -> Result<Member<'de>, E> {
                Ok(Member::Json(Value::Null))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Member<'de>, A::Error> {
                Value::deserialize(SeqAccessDeserializer::new(seq)).map(Member::Json)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Member<'de>, A::Error> {
                Value::deserialize(MapAccessDeserializer::new(map)).map(Member::Json)
            }
        }
        d.deserialize_any(V)
    }
}

struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_string())))
            }
        }
        d.deserialize_str(V)
    }
}

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(4).min(KEYS.len()));
                while let Some(Key(k)) = map.next_key()? {
                    out.push((k, map.next_value()?));
                }
                Ok(Members(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// The common case of [`requests_from_json`], a list of valid requests,
/// without building the whole document as a `Value` first (a map and a
/// key string per member). `None` on anything else, duplicate keys
/// included: the general path then reads the file again and words the
/// error, so both paths accept and refuse exactly the same files.
fn requests_fast(text: &str, default_policy: Policy) -> Option<Vec<Request>> {
    // Sized once: a flat list has one `{` per request (a name with a `{`
    // only oversizes it), and growing a list of requests copies them all.
    // Bounded, so a file of braces cannot ask for much memory.
    let mut out = Vec::with_capacity(text.bytes().filter(|&b| b == b'{').count().min(4096));
    let scanned = scan_flat(text, |members| {
        out.push(request_of(out.len(), members, default_policy)?);
        Some(())
    });
    if scanned.is_some() {
        return Some(out);
    }
    let list: Vec<Members<'_>> = serde_json::from_str(text).ok()?;
    requests_of(list, default_policy)
}

/// Requests from their members as read, `None` on any error.
fn requests_of(list: Vec<Members<'_>>, default_policy: Policy) -> Option<Vec<Request>> {
    let mut out = Vec::with_capacity(list.len());
    for (i, Members(mut members)) in list.into_iter().enumerate() {
        out.push(request_of(i, &mut members, default_policy)?);
    }
    Some(out)
}

/// Request `i` from its members as read, `None` on any error.
fn request_of(i: usize, members: &mut [(Cow<'_, str>, Member<'_>)], default_policy: Policy) -> Option<Request> {
    // A JSON object's map orders its members by key and keeps the last of
    // a repeated one; the general path reads them so.
    members.sort_by(|a, b| a.0.cmp(&b.0));
    if members.windows(2).any(|w| w[0].0 == w[1].0) {
        return None;
    }
    let pairs = members.iter().map(|(k, v)| (k.as_ref(), v.given()));
    from_members(pairs, Base::Entry(i), default_policy).ok()
}

/// The plainest request files, read by hand: a list of objects whose
/// members are strings without escapes, whole numbers and booleans, as
/// most generated files are. The members are those serde reads
/// ([`Members`]); anything else (an escape, a fraction, a sign, a nested
/// value, a syntax error) is `None`, and serde reads the file. Reading
/// through serde's visitors was half the cost of taking a VM from a file.
/// Each object's members go to `each` as soon as they are read; `None`
/// from it stops the scan and is returned.
fn scan_flat<'t>(text: &'t str, mut each: impl FnMut(&mut [(Cow<'t, str>, Member<'t>)]) -> Option<()>) -> Option<()> {
    let mut s = Scan { b: text.as_bytes(), text, at: 0 };
    // One object's members at a time, in one list kept for them all.
    let mut members = Vec::with_capacity(KEYS.len());
    s.expect(b'[')?;
    if !s.eat(b']') {
        loop {
            members.clear();
            s.object(&mut members)?;
            each(&mut members)?;
            if s.eat(b']') {
                break;
            }
            s.expect(b',')?;
        }
    }
    s.space();
    (s.at == s.b.len()).then_some(())
}

/// [`scan_flat`]'s cursor.
struct Scan<'t> {
    b: &'t [u8],
    text: &'t str,
    at: usize,
}

impl<'t> Scan<'t> {
    /// Skips JSON whitespace.
    fn space(&mut self) {
        while self.b.get(self.at).is_some_and(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    /// Takes `c` after whitespace if it is next.
    fn eat(&mut self, c: u8) -> bool {
        self.space();
        let hit = self.b.get(self.at) == Some(&c);
        self.at += usize::from(hit);
        hit
    }

    fn expect(&mut self, c: u8) -> Option<()> {
        self.eat(c).then_some(())
    }

    fn object(&mut self, out: &mut Vec<(Cow<'t, str>, Member<'t>)>) -> Option<()> {
        self.expect(b'{')?;
        if self.eat(b'}') {
            return Some(());
        }
        loop {
            self.expect(b'"')?;
            let key = self.string()?;
            self.expect(b':')?;
            out.push((Cow::Borrowed(key), self.value()?));
            if self.eat(b'}') {
                return Some(());
            }
            self.expect(b',')?;
        }
    }

    /// The rest of a string after its opening quote, if it has no escape
    /// and no control character.
    fn string(&mut self) -> Option<&'t str> {
        let start = self.at;
        loop {
            match *self.b.get(self.at)? {
                b'"' => break,
                b'\\' | 0..0x20 => return None,
                _ => self.at += 1,
            }
        }
        // Both ends are ASCII quotes, so on character boundaries.
        let s = self.text.get(start..self.at)?;
        self.at += 1;
        Some(s)
    }

    fn value(&mut self) -> Option<Member<'t>> {
        self.space();
        match *self.b.get(self.at)? {
            b'"' => {
                self.at += 1;
                self.string().map(|s| Member::Str(Cow::Borrowed(s)))
            }
            b'0'..=b'9' => {
                let start = self.at;
                let mut n: u64 = 0;
                while let Some(&d @ b'0'..=b'9') = self.b.get(self.at) {
                    n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
                    self.at += 1;
                }
                // A leading zero is not JSON; a fraction or an exponent is
                // serde's to read.
                let leading_zero = self.b[start] == b'0' && self.at - start > 1;
                let more = self.b.get(self.at).is_some_and(|c| matches!(c, b'.' | b'e' | b'E'));
                (!leading_zero && !more).then(|| Member::Json(Value::from(n)))
            }
            _ => {
                let rest = self.b.get(self.at..)?;
                let (word, value) = if rest.starts_with(b"true") {
                    (4, true)
                } else if rest.starts_with(b"false") {
                    (5, false)
                } else {
                    return None;
                };
                self.at += word;
                Some(Member::Json(Value::Bool(value)))
            }
        }
    }
}

/// A JSON list of requests (`--vms FILE`).
pub fn requests_from_json(text: &str, default_policy: Policy) -> Result<Vec<Request>, RequestError> {
    match requests_fast(text, default_policy) {
        Some(requests) => Ok(requests),
        None => requests_general(text, default_policy),
    }
}

/// [`requests_from_json`] through a `Value`: any file, with its error.
fn requests_general(text: &str, default_policy: Policy) -> Result<Vec<Request>, RequestError> {
    let value: Value = serde_json::from_str(text).map_err(|e| RequestError::Json {
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
    let items = match &value {
        Value::Array(items) => items,
        other => return Err(RequestError::NotAList { found: kind_of(other) }),
    };
    items.iter().enumerate().map(|(i, item)| from_value(item, Base::Entry(i), default_policy)).collect()
}

/// One request from its fields as a form gives them, each a text read as
/// `--vm`'s values are (`at` names it in errors): the web view's place
/// form builds its request here, without JSON in between.
pub fn request_from_fields<'a>(
    at: &str,
    fields: &[(&'a str, &'a str)],
    default_policy: Policy,
) -> Result<Request, RequestError> {
    let mut draft = Draft::new(Base::Named(at));
    // The name goes first so every later error names the VM.
    if let Some((_, name)) = fields.iter().find(|(k, _)| *k == "name") {
        draft.set("name", Given::Text(name))?;
    }
    for (key, value) in fields.iter().filter(|(k, _)| *k != "name") {
        if !KEYS.contains(key) {
            return Err(RequestError::UnknownField { at: draft.at(), field: key.to_string() });
        }
        draft.set(key, Given::Text(value))?;
    }
    draft.finish(default_policy)
}

/// A `key=value,key=value` request (`--vm`). A piece without `=` continues
/// the previous value, so CPU lists keep their commas
/// (`emulator=0-1,4,name=db1`). Keys may use `-` for `_`.
pub fn request_from_spec(spec: &str, default_policy: Policy) -> Result<Request, RequestError> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    for piece in spec.split(',') {
        match piece.split_once('=') {
            Some((k, v)) => pairs.push((k.trim().replace('-', "_"), v.trim().to_string())),
            None => match pairs.last_mut() {
                Some((_, v)) if !piece.trim().is_empty() => {
                    v.push(',');
                    v.push_str(piece.trim());
                }
                _ => return Err(RequestError::BadPiece { piece: piece.to_string() }),
            },
        }
    }
    let mut draft = Draft::new(Base::Named("--vm"));
    if let Some((_, name)) = pairs.iter().find(|(k, _)| k == "name") {
        draft.set("name", Given::Text(name))?;
    }
    let mut seen: Vec<&str> = Vec::new();
    for (key, value) in &pairs {
        // Devices may be listed several times; every other key once.
        let repeatable = key == "device" || key == "required_device";
        if seen.contains(&key.as_str()) && !repeatable {
            return Err(RequestError::DuplicateField { at: draft.at(), field: key.clone() });
        }
        seen.push(key);
        if key == "devices" {
            return Err(RequestError::UnknownField { at: draft.at(), field: "devices (use device=ADDR)".into() });
        }
        if key != "name" {
            draft.set(key, Given::Text(value))?;
        }
    }
    draft.finish(default_policy)
}

/// A device wish as the plan JSON records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceWishDoc {
    /// PCI address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Host node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<u32>,
    /// Required (true) or preferred (false).
    #[serde(default)]
    pub required: bool,
}

/// A size as requests write it: bytes, or text with a unit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SizeDoc {
    /// Bytes.
    Bytes(u64),
    /// `64GiB`, `512MiB`, ...
    Text(String),
}

/// A request as the plan JSON records it (`placements[].request`), in the
/// same keys a `--vms` file uses, with every default written out so a plan
/// replays the same way whatever the defaults become.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestDoc {
    /// VM name.
    pub name: String,
    /// vCPUs.
    pub vcpus: u32,
    /// Memory.
    pub memory: SizeDoc,
    /// `dedicated` or `shared`.
    pub cpu: String,
    /// SMT policy name.
    pub smt: String,
    /// Placement policy name.
    pub policy: String,
    /// Huge page size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hugepages: Option<SizeDoc>,
    /// Overcommit ratio.
    pub overcommit: f64,
    /// Maximum guest nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_nodes: Option<u32>,
    /// Devices whose node matters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceWishDoc>,
    /// CPU hot-add wanted (true exactly when `max_vcpus` is given).
    pub cpu_hotadd: bool,
    /// With hot-add, the most vCPUs the VM may grow to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_vcpus: Option<u32>,
    /// Refusals overridden.
    pub force: bool,
    /// `vm-nodes`, `isolate`, `housekeeping` or a housekeeping CPU list.
    pub emulator: String,
    /// Guest cells, as asked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cells: Vec<CellDoc>,
    /// Equal guest cells, as asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_nodes: Option<u32>,
    /// Whether guest cells may share a host node.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cells_share_nodes: bool,
    /// Memory overcommit ratio (shared VMs), when not 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_overcommit: Option<f64>,
    /// The vCPUs that float in the shared pool (a mixed VM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_vcpus: Option<String>,
    /// The memory kinds asked (`hbm`, `dram,hbm`, `any`); absent: the
    /// host's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_kind: Option<String>,
    /// `visible` when the guest is shown its memory tiers as memory-only
    /// cells; absent: `hidden`, the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_tiers: Option<String>,
}

/// A guest cell's vCPUs as a request gives them: how many, or which
/// (any distinct vCPU numbers, Nova's `hw:numa_cpus.N`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum CellVcpusDoc {
    /// How many.
    Count(u32),
    /// Which.
    List(Vec<u32>),
}

/// A guest cell as a request gives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CellDoc {
    /// vCPUs: a count, or the list.
    pub vcpus: CellVcpusDoc,
    /// Memory.
    pub memory: SizeDoc,
}

impl From<&Request> for RequestDoc {
    fn from(r: &Request) -> Self {
        super::view::RequestView::of_request(r).to_doc()
    }
}

impl RequestDoc {
    /// The request, checked by the same rules as a `--vms` file; `at`
    /// names it in errors.
    pub fn to_request(&self, at: &str) -> Result<Request, RequestError> {
        // Serialising plain data with string keys cannot fail; if it ever
        // did, the Null would be refused as "not an object" below.
        let mut value = serde_json::to_value(self).unwrap_or(Value::Null);
        // Plans written before `max_vcpus` existed could say hot-add
        // without a maximum; those VMs were planned with nothing to add.
        if self.cpu_hotadd && self.max_vcpus.is_none() {
            if let Some(o) = value.as_object_mut() {
                o.insert("cpu_hotadd".into(), Value::Bool(false));
            }
        }
        request_from_value(&value, at, Policy::Balanced)
    }
}

/// The kinds a `memory_kind` value names: one kind or several separated
/// by commas (`dram,hbm`), or `any` for every kind; `None` when a name is
/// not a kind or none is given.
fn memory_kinds(text: &str) -> Option<Vec<MemoryKind>> {
    if text.trim().eq_ignore_ascii_case("any") {
        return Some(MemoryKind::ALL.to_vec());
    }
    let mut kinds = Vec::new();
    for name in text.split(',') {
        let kind = MemoryKind::from_name(name)?;
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    kinds.sort();
    (!kinds.is_empty()).then_some(kinds)
}

/// How a request's memory kinds are written back (`any` for all).
pub(super) fn memory_kinds_name(kinds: &[MemoryKind]) -> String {
    if MemoryKind::ALL.iter().all(|k| kinds.contains(k)) {
        return "any".to_string();
    }
    kinds.iter().map(MemoryKind::as_str).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A member as a file may give it: known keys with good and bad
    /// values, unknown keys, keys spelled with escapes.
    fn member() -> impl Strategy<Value = String> {
        let key = prop_oneof![
            proptest::sample::select(KEYS.to_vec()).prop_map(|k| format!("\"{k}\"")),
            Just("\"max-nodes\"".to_string()),
            Just("\"\\u006eame\"".to_string()),
        ];
        let value = proptest::sample::select(vec![
            "2",
            "0",
            "-1",
            "1.5",
            "65537",
            "\"2GiB\"",
            "\"vm\"",
            "\"a/b\"",
            "\"shared\"",
            // Escaped: read into an owned string, not borrowed.
            "\"sh\\u0061red\"",
            "\"dedicated\"",
            "\"isolate\"",
            "\"spread\"",
            "\"pairs\"",
            "true",
            "null",
            "[]",
            "{}",
            "\"0-1\"",
            "4",
            "[{\"vcpus\": 1, \"memory\": \"1GiB\"}]",
            "18446744073709551616",
            "\"hbm\"",
            "\"dram,cxl\"",
            "\"any\"",
        ]);
        (key, value).prop_map(|(k, v)| format!("{k}: {v}"))
    }

    fn entry() -> impl Strategy<Value = String> {
        let named = (0u8..4, proptest::collection::vec(member(), 0..6)).prop_map(|(n, mut m)| {
            m.insert(0, format!("\"name\": \"vm{n}\", \"vcpus\": 2, \"memory\": \"1GiB\""));
            format!("{{{}}}", m.join(", "))
        });
        prop_oneof![named, Just("3".to_string()), Just("{}".to_string())]
    }

    /// Texts near the scanner's edges: its own subset with every kind of
    /// whitespace, and the JSON just outside it; and whether the text is
    /// of the subset (valid, every value plain).
    fn near_flat() -> impl Strategy<Value = (String, bool)> {
        let plain = ["2", "0", "18446744073709551615", "true", "false", "\"2GiB\"", "\"\"", "\"é\""];
        let other = ["02", "-1", "1.5", "1e3", "18446744073709551616", "null", "truex", "\"a\\\"b\"", "[]", "{}"];
        let value = prop_oneof![
            3 => proptest::sample::select(plain.to_vec()).prop_map(|v| (v, true)),
            1 => proptest::sample::select(other.to_vec()).prop_map(|v| (v, false)),
        ];
        let key = proptest::sample::select(vec!["name", "vcpus", "memory", "cpu", "force", "x"]);
        let gap = proptest::sample::select(vec!["", " ", "\n", "\t", "\r\n  "]);
        let member =
            (key, gap.clone(), value, gap.clone()).prop_map(|(k, g, (v, p), h)| (format!("\"{k}\"{g}:{h}{v}"), p));
        let object = proptest::collection::vec(member, 0..4).prop_map(|m| {
            let p = m.iter().all(|x| x.1);
            (format!("{{{}}}", m.into_iter().map(|x| x.0).collect::<Vec<_>>().join(",")), p)
        });
        let tail = prop_oneof![3 => Just(("", true)), 1 => proptest::sample::select(vec![",", "]", " x"]).prop_map(|t| (t, false))];
        (proptest::collection::vec(object, 0..3), gap, tail).prop_map(|(objects, g, (tail, tail_ok))| {
            let p = tail_ok && objects.iter().all(|o| o.1);
            let body = objects.into_iter().map(|o| o.0).collect::<Vec<_>>().join(&format!(",{g}"));
            (format!("{g}[{g}{body}{g}]{g}{tail}"), p)
        })
    }

    /// Every object [`scan_flat`] reads, kept.
    fn scan_all(text: &str) -> Option<Vec<Members<'_>>> {
        let mut list = Vec::new();
        scan_flat(text, |members| {
            list.push(Members(members.to_vec()));
            Some(())
        })?;
        Some(list)
    }

    #[test]
    fn a_plain_generated_file_is_read_by_hand() {
        let text = "[{\"name\": \"vm0\", \"vcpus\": 2, \"memory\": \"2GiB\"},\n {\"name\": \"vm1\", \"vcpus\": 4, \"memory\": 4294967296, \"force\": true}]\n";
        let list = scan_all(text).expect("scanned");
        assert_eq!(list.len(), 2);
        assert_eq!(requests_of(list, Policy::Balanced), requests_general(text, Policy::Balanced).ok());
        assert!(scan_all("[{\"name\": \"v\\u006d\"}]").is_none(), "escapes are serde's");
        assert!(scan_all("[{\"cells\": []}]").is_none(), "nested values are serde's");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        /// What the scanner reads, serde reads the same; what serde cannot
        /// read, the scanner refuses too.
        #[test]
        fn the_scanner_reads_as_serde((text, plain) in near_flat()) {
            let by_serde: Option<Vec<Members<'_>>> = serde_json::from_str(&text).ok();
            match scan_all(&text) {
                Some(scanned) => {
                    let serde = by_serde.map(|l| requests_of(l, Policy::Balanced));
                    prop_assert!(serde.is_some(), "serde refuses what the scanner read: {}", text);
                    prop_assert_eq!(Some(requests_of(scanned, Policy::Balanced)), serde);
                }
                // Refusing is always safe (serde reads the file), but the
                // plain files must not need it.
                None => prop_assert!(!plain, "the scanner refused a plain file: {}", text),
            }
        }

        /// The fast path accepts only what the general path accepts, and
        /// reads it the same; it leaves nothing valid to the general path
        /// but files with a repeated key.
        #[test]
        fn the_fast_path_reads_as_the_general_path(entries in proptest::collection::vec(entry(), 0..4)) {
            let text = format!("[{}]", entries.join(", "));
            let general = requests_general(&text, Policy::Balanced);
            match requests_fast(&text, Policy::Balanced) {
                Some(fast) => prop_assert_eq!(Ok(fast), general),
                None => {
                    let repeated = entries.iter().any(|e| {
                        let keys: Vec<&str> = KEYS.iter().copied().filter(|k| e.matches(&format!("\"{k}\":")).count() > 1).collect();
                        !keys.is_empty() || e.contains("\\u006eame")
                    });
                    prop_assert!(general.is_err() || repeated, "fast path refused a valid file: {}", text);
                }
            }
        }
    }
}
