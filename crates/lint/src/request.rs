//! numaplace's own request JSON (a list of requests or one object), read
//! through the wire crate's field rules so the linter accepts exactly what
//! `numaplace plan --vms` accepts.
//!
//! serde_json keeps no positions, so evidence lines are found by looking
//! for each request's keys near the line that names it.

use crate::error::VmError;
use crate::vm::{Evidence, HotAdd, HugePageWish, SourceFormat, VmView, MAX_VCPUS};
use numaplace_plan::Policy;
use numaplace_wire::plan::request::request_from_entry;
use numaplace_wire::plan::RequestError;
use serde_json::Value;

/// How many lines before a request's name its other keys may sit.
const LOOK_BACK: usize = 8;

/// Parses request JSON into one view per VM.
pub fn parse(file: &str, text: &str) -> Result<Vec<VmView>, VmError> {
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
        let find = |key: &str| -> Option<Evidence> {
            let needle = format!("\"{key}\"");
            let start = cursor.saturating_sub(LOOK_BACK);
            let idx = lines.iter().enumerate().skip(start).find(|(_, l)| l.contains(&needle)).map(|(j, _)| j)?;
            Some(Evidence {
                file: file.to_string(),
                line: idx as u32 + 1,
                text: lines.get(idx).map(|l| l.trim().chars().take(200).collect()).unwrap_or_default(),
            })
        };
        if req.vcpus > MAX_VCPUS {
            let line = find("vcpus").map_or(0, |e| e.line);
            return Err(VmError::bad(line, "vcpus", "a vCPU count from 1 to 16384", &req.vcpus.to_string()));
        }
        let mut vm = VmView::new(file, SourceFormat::Request);
        vm.name = req.name.clone();
        vm.vcpus = req.planned_vcpus();
        vm.vcpus_at = find("vcpus");
        vm.memory_bytes = req.memory_bytes;
        vm.memory_at = find("memory");
        vm.max_nodes = req.max_nodes;
        vm.planned_shared = req.cpu_mode == numaplace_plan::CpuMode::Shared || !req.shared_vcpus.is_empty();
        if req.cpu_hotadd() {
            let at = find("max_vcpus").or_else(|| find("cpu_hotadd"));
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
        let Err(e) = parse("vms.json", text) else { panic!("vcpus 0 is refused") };
        let words = e.to_string();
        assert!(words.contains("vms[1] \"b\""), "{words}");
        // In the very words `plan --vms` uses.
        let Err(plan) = numaplace_wire::plan::request::requests_from_json(text, Policy::Balanced) else {
            panic!("plan refuses it too")
        };
        assert!(words.contains(&plan.to_string()), "{words} / {plan}");
    }
}
