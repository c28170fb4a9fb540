//! VM requests as users write them: a JSON list (`--vms FILE`) or a
//! `key=value,key=value` list (`--vm`), both turned into
//! [`numaplace_plan::Request`] by one set of field rules, so the two forms
//! accept the same keys, values and defaults and fail with the same
//! messages (`docs/formats/request.md`).
//!
//! The JSON form is checked field by field from a `serde_json::Value`
//! rather than through derived deserialisation, because serde's messages
//! name the type expected but not the field or the VM at fault.

use numaplace_plan::{CpuMode, EmulatorPlacement, MemoryTiers, Policy, Request, SmtPolicy};
use numaplace_topo::{CpuSet, MemoryKind, MAX_CPU};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::fmt;

mod fast;
mod values;
use fast::requests_fast;
pub(crate) use values::is_pci_address;
use values::*;

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
    /// The keys come in three groups (the VM's name and size, how its
    /// vCPUs run, where it goes), each passing a key it does not know on
    /// to the next; the last refuses it.
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
            "hugepages" => {
                // Huge page sizes are powers of two of at least 4 KiB on
                // every architecture Linux supports.
                let bytes = size(value).filter(|b| b.is_power_of_two() && *b >= 4096);
                self.req.hugepage_bytes =
                    Some(bytes.ok_or_else(|| self.bad("hugepages", "a page size such as 2MiB or 1GiB", value))?);
            }
            "cpu_hotadd" => {
                self.hotadd = Some(flag(value).ok_or_else(|| self.bad("cpu_hotadd", "true or false", value))?)
            }
            "max_vcpus" => {
                let n = whole(value).filter(|&n| (2..=u64::from(MAX_CPU)).contains(&n));
                self.max_vcpus =
                    Some(n.ok_or_else(|| self.bad("max_vcpus", "a whole number from 2 to 65536", value))? as u32);
            }
            _ => return self.set_cpus(key, value),
        }
        Ok(())
    }

    /// [`Draft::set`]'s second group: how the VM's vCPUs run.
    fn set_cpus(&mut self, key: &str, value: Given) -> Result<(), RequestError> {
        match key {
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
            "shared_vcpus" => {
                const EXPECTED: &str = "a list of vCPU numbers such as 0-1 (the vCPUs that float; the rest are pinned)";
                let text = value.text().ok_or_else(|| self.bad("shared_vcpus", EXPECTED, value))?;
                let set = CpuSet::parse_list(text).ok().filter(|s| !s.is_empty());
                self.req.shared_vcpus = set.ok_or_else(|| self.bad("shared_vcpus", EXPECTED, value))?;
            }
            _ => return self.set_layout(key, value),
        }
        Ok(())
    }

    /// [`Draft::set`]'s last group: where the VM goes (nodes, guest cells,
    /// memory kinds, devices).
    fn set_layout(&mut self, key: &str, value: Given) -> Result<(), RequestError> {
        match key {
            "max_nodes" => {
                let n = whole(value).filter(|&n| (1..=u64::from(u32::MAX)).contains(&n));
                self.req.max_nodes = Some(n.ok_or_else(|| self.bad("max_nodes", "a whole number >= 1", value))? as u32);
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

/// How a request's memory kinds are written back (`any` for all).
pub(super) fn memory_kinds_name(kinds: &[MemoryKind]) -> String {
    if MemoryKind::ALL.iter().all(|k| kinds.contains(k)) {
        return "any".to_string();
    }
    kinds.iter().map(MemoryKind::as_str).collect::<Vec<_>>().join(",")
}
