//! The JSON `numaplace verify --format json` prints (documented in
//! `docs/verify.md`): `{"passed": bool, "verified": [...]}`, one entry per
//! booted VM with every check compared. Output only.
//!
//! These are plain data; the command fills them from the guest harness's
//! outcome, so this crate does not depend on `numaplace-guest`.
//!
//! Fields are declared in the alphabetical order of their JSON names, the
//! order the document has always been written in (it was built as
//! `serde_json` maps), since serde writes a struct's fields in declaration
//! order.

use serde::Serialize;

/// The whole document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerifyDoc<'a> {
    /// Whether every VM matched its plan.
    pub passed: bool,
    /// The VMs, in the plan's order.
    pub verified: Vec<VerifiedDoc<'a>>,
}

/// One booted VM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerifiedDoc<'a> {
    /// Every property compared, in a stable order.
    pub checks: Vec<CheckDoc<'a>>,
    /// Whether host pinning and binding were the plan's own (not mapped
    /// onto this machine).
    pub host_side_verified: bool,
    /// What was adapted to this machine.
    pub notes: &'a [String],
    /// Whether every check matched.
    pub passed: bool,
    /// The VM's name.
    pub vm: &'a str,
}

/// One property compared.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckDoc<'a> {
    /// The guest node it belongs to (null: the whole guest).
    pub cell: Option<u32>,
    /// What the plan says.
    pub expected: &'a str,
    /// What the guest saw.
    pub found: &'a str,
    /// Whether they agree.
    pub ok: bool,
    /// What was compared (`cpus`, `memory`, `thread siblings of cpu 3`).
    pub what: &'a str,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pretty<T: Serialize>(v: &T) -> String {
        serde_json::to_string_pretty(v).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_document_keeps_its_bytes() {
        let notes = vec!["host side mapped onto this machine".to_string()];
        let doc = VerifyDoc {
            passed: false,
            verified: vec![
                VerifiedDoc {
                    checks: vec![
                        CheckDoc { cell: None, expected: "2", found: "2", ok: true, what: "nodes" },
                        CheckDoc { cell: Some(1), expected: "2-3", found: "2", ok: false, what: "cpus" },
                    ],
                    host_side_verified: false,
                    notes: &notes,
                    passed: false,
                    vm: "db",
                },
                VerifiedDoc { checks: Vec::new(), host_side_verified: true, notes: &[], passed: true, vm: "web" },
            ],
        };
        // As the command built it before this type existed.
        let old = json!({
            "verified": [
                {
                    "vm": "db", "passed": false, "host_side_verified": false, "notes": notes,
                    "checks": [
                        {"cell": null, "what": "nodes", "expected": "2", "found": "2", "ok": true},
                        {"cell": 1, "what": "cpus", "expected": "2-3", "found": "2", "ok": false},
                    ],
                },
                {"vm": "web", "passed": true, "host_side_verified": true, "notes": [], "checks": []},
            ],
            "passed": false,
        });
        assert_eq!(pretty(&doc), pretty(&old));
        assert!(pretty(&doc).starts_with("{\n  \"passed\": false,\n  \"verified\": [\n    {\n      \"checks\": ["));
    }
}
