//! The value rules of a request's fields: sizes, ratios, flags, guest
//! cells, devices and memory kinds, each read the same from a JSON value
//! and from `--vm`'s text ([`Given`]). `None` is a value the field does
//! not take; the caller words the error with the field's expectation.

use super::Given;
use numaplace_plan::{CellWish, DeviceWish};
use numaplace_topo::{parse_size, CpuSet, MemoryKind, NodeId, MAX_CPU};
use serde_json::Value;

/// Most guest cells a request may give: QEMU numbers guest nodes below
/// 4096 (`MAX_NODES`), and the bound keeps a hostile request small.
pub(super) const MAX_CELLS: usize = 4096;

pub(super) fn cell_from_json(item: &Value) -> Option<CellWish> {
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
pub(super) fn vcpu_list(list: &[u32]) -> Option<CpuSet> {
    let set: CpuSet = list.iter().copied().collect();
    (!set.is_empty() && set.len() == list.len()).then_some(set)
}

/// The `--vm` form's cells: `4:8GiB,2:4GiB` (counts) or
/// `0,2,4,6:4GiB,1,3,5,7:4GiB` (lists, ranges allowed: `0-3:4GiB`). A
/// piece without `:` continues the cell's vCPU list.
pub(super) fn cells_from_text(text: &str) -> Option<Vec<CellWish>> {
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
pub(super) fn cell_from_text(text: &str) -> Option<CellWish> {
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

pub(super) const DEVICE_EXPECTED: &str =
    "{\"address\": \"0000:3b:00.0\"} or {\"node\": 1}, with optional \"required\": true";

/// A finite ratio, as a JSON number or text.
pub(super) fn ratio(value: Given) -> Option<f64> {
    let r = match value {
        Given::Json(v) => v.as_f64(),
        Given::Str(_) => None,
        Given::Text(t) => t.trim().parse::<f64>().ok(),
    };
    r.filter(|r| r.is_finite())
}

pub(super) fn whole(value: Given) -> Option<u64> {
    match value {
        Given::Json(v) => v.as_u64(),
        Given::Str(_) => None,
        Given::Text(t) => t.trim().parse().ok(),
    }
}

pub(super) fn size(value: Given) -> Option<u64> {
    match value {
        Given::Json(Value::Number(n)) => n.as_u64(),
        other => other.text().and_then(parse_size),
    }
}

pub(super) fn flag(value: Given) -> Option<bool> {
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
pub(super) fn normalise_address(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    if lower.matches(':').count() == 1 {
        format!("0000:{lower}")
    } else {
        lower
    }
}

pub(super) fn device_from_json(item: &Value) -> Option<DeviceWish> {
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

pub(super) fn device_from_text(text: &str, required: bool) -> Option<DeviceWish> {
    let text = text.trim();
    if let Some(n) = text.strip_prefix("node") {
        let node = n.parse::<u32>().ok()?;
        return Some(DeviceWish { address: None, node: Some(NodeId(node)), required });
    }
    is_pci_address(text).then(|| DeviceWish { address: Some(normalise_address(text)), node: None, required })
}

/// The kinds a `memory_kind` value names: one kind or several separated
/// by commas (`dram,hbm`), or `any` for every kind; `None` when a name is
/// not a kind or none is given.
pub(super) fn memory_kinds(text: &str) -> Option<Vec<MemoryKind>> {
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
