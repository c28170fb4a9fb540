//! numaplace's own request JSON (a list of requests or one object), read
//! through the wire crate's field rules so the linter accepts exactly what
//! `numaplace plan --vms` accepts.
//!
//! serde_json keeps no positions, so evidence lines are found by looking
//! for each request's keys near the line that names it.

use crate::error::VmError;
use numaplace_libvirt::domain::{Definition, HotAdd, HugePageWish, MAX_VCPUS};
use numaplace_plan::Policy;
use numaplace_wire::plan::request::request_from_entry;
use numaplace_wire::plan::RequestError;
use serde_json::Value;

/// How many lines before a request's name its other keys may sit.
const LOOK_BACK: usize = 8;

/// Parses request JSON into one definition per VM, each setting with its
/// line (0 where none names it).
pub fn parse(text: &str) -> Result<Vec<Definition>, VmError> {
    let value: Value = serde_json::from_str(text).map_err(|e| {
        VmError::Request(RequestError::Json { line: e.line(), column: e.column(), message: e.to_string() })
    })?;
    let items: Vec<&Value> = match &value {
        Value::Array(items) => items.iter().collect(),
        other => vec![other],
    };
    let lines: Vec<&str> = text.lines().collect();
    let mut cursor = 0usize;
    let mut out = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        let req = request_from_entry(item, i, Policy::Balanced).map_err(VmError::Request)?;
        let quoted = serde_json::to_string(&req.name).unwrap_or_default();
        if let Some(pos) = lines.iter().skip(cursor).position(|l| l.contains(&quoted)) {
            cursor += pos;
        }
        // The line of a key near the request's name, 0 when none has it.
        let find = |key: &str| -> u32 {
            let needle = format!("\"{key}\"");
            let start = cursor.saturating_sub(LOOK_BACK);
            lines.iter().enumerate().skip(start).find(|(_, l)| l.contains(&needle)).map_or(0, |(j, _)| j as u32 + 1)
        };
        if req.vcpus > MAX_VCPUS {
            return Err(VmError::bad(find("vcpus"), "vcpus", "a vCPU count from 1 to 16384", &req.vcpus.to_string()));
        }
        let mut vm = Definition {
            name: req.name.clone(),
            vcpus: req.planned_vcpus(),
            vcpus_at: find("vcpus"),
            memory_bytes: req.memory_bytes,
            ..Definition::default()
        };
        vm.memory_at = find("memory");
        vm.max_nodes = req.max_nodes;
        vm.planned_shared = req.cpu_mode == numaplace_plan::CpuMode::Shared || !req.shared_vcpus.is_empty();
        if req.cpu_hotadd() {
            let at = match find("max_vcpus") {
                0 => find("cpu_hotadd"),
                line => line,
            };
            vm.hotadd = Some(HotAdd { current: Some(req.vcpus), at, also: None });
        }
        if let Some(size) = req.hugepage_bytes {
            vm.hugepages.push(HugePageWish { size_bytes: Some(size), cells: None, at: find("hugepages") });
        }
        out.push(vm);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_entry_is_named_as_plan_names_it() {
        let text = "[{\"name\": \"a\", \"vcpus\": 2, \"memory\": \"1GiB\"},\n {\"name\": \"b\", \"vcpus\": 0, \"memory\": \"1GiB\"}]";
        let Err(e) = parse(text) else { panic!("vcpus 0 is refused") };
        let words = e.to_string();
        assert!(words.contains("vms[1] \"b\""), "{words}");
        // In the very words `plan --vms` uses.
        let Err(plan) = numaplace_wire::plan::request::requests_from_json(text, Policy::Balanced) else {
            panic!("plan refuses it too")
        };
        assert!(words.contains(&plan.to_string()), "{words} / {plan}");
    }
}
