//! Findings as text for people, JSON for programs (top-level `findings`)
//! and SARIF 2.1.0 for code-scanning tools.

use crate::finding::{Finding, Severity};
use crate::rules;
use serde_json::{json, Value};
use std::fmt::Write;

/// The text view: one block per finding and a summary line.
pub fn text(findings: &[Finding], files: usize) -> String {
    let mut x = String::new();
    for f in findings {
        let line = f.line().map(|l| format!(":{l}")).unwrap_or_default();
        let _ = writeln!(x, "{}{line}: {}[{}] {}: {}", f.file, f.severity, f.rule, f.vm, f.message);
        for e in &f.evidence {
            // Evidence from another VM's file (pinning overlaps) says
            // which file, or its lines read as this file's.
            if e.file == f.file {
                let _ = writeln!(x, "    | {:>4} | {}", e.line, e.text);
            } else {
                let _ = writeln!(x, "    | {}:{} | {}", e.file, e.line, e.text);
            }
        }
        let _ = writeln!(x, "    impact: {}", f.impact);
        let _ = writeln!(x, "    fix:    {}", f.fix);
        x.push('\n');
    }
    let count = |s: Severity| findings.iter().filter(|f| f.severity == s).count();
    if findings.is_empty() {
        let _ = writeln!(x, "no findings in {}", files_word(files));
    } else {
        let _ = writeln!(
            x,
            "{} finding{} in {} ({} error, {} warning, {} info)",
            findings.len(),
            if findings.len() == 1 { "" } else { "s" },
            files_word(files),
            count(Severity::Error),
            count(Severity::Warning),
            count(Severity::Info)
        );
    }
    x
}

fn files_word(n: usize) -> String {
    if n == 1 {
        "1 file".into()
    } else {
        format!("{n} files")
    }
}

fn finding_json(f: &Finding) -> Value {
    json!({
        "rule": f.rule,
        "severity": f.severity.as_str(),
        "vm": f.vm,
        "file": f.file,
        "line": f.line(),
        "message": f.message,
        "evidence": f.evidence.iter().map(|e| json!({"file": e.file, "line": e.line, "text": e.text})).collect::<Vec<_>>(),
        "impact": f.impact,
        "fix": f.fix,
    })
}

/// The JSON document: `{"findings": [...], "summary": {...}}`.
pub fn json(findings: &[Finding]) -> String {
    let count = |s: Severity| findings.iter().filter(|f| f.severity == s).count();
    let doc = json!({
        "findings": findings.iter().map(finding_json).collect::<Vec<_>>(),
        "summary": {
            "error": count(Severity::Error),
            "warning": count(Severity::Warning),
            "info": count(Severity::Info),
        },
    });
    let mut s = serde_json::to_string_pretty(&doc).unwrap_or_default();
    s.push('\n');
    s
}

fn sarif_level(s: Severity) -> &'static str {
    match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Info => "note",
    }
}

/// A SARIF 2.1.0 log with one run.
pub fn sarif(findings: &[Finding]) -> String {
    let rules: Vec<Value> = rules::all()
        .iter()
        .map(|r| {
            json!({
                "id": r.id(),
                "shortDescription": {"text": r.summary()},
                "defaultConfiguration": {"level": sarif_level(r.severity())},
                "helpUri": format!("docs/lint.md#{}", r.id()),
            })
        })
        .collect();
    let results: Vec<Value> = findings
        .iter()
        .map(|f| {
            let locations: Vec<Value> = f
                .evidence
                .iter()
                .take(1)
                .map(|e| {
                    json!({"physicalLocation": {
                        "artifactLocation": {"uri": e.file},
                        "region": {"startLine": e.line, "snippet": {"text": e.text}},
                    }})
                })
                .collect();
            json!({
                "ruleId": f.rule,
                "level": sarif_level(f.severity),
                "message": {"text": format!("{}: {} Impact: {} Fix: {}", f.vm, f.message, f.impact, f.fix)},
                "locations": locations,
            })
        })
        .collect();
    let doc = json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "numaplace",
                "version": env!("CARGO_PKG_VERSION"),
                "rules": rules,
            }},
            "results": results,
        }],
    });
    let mut s = serde_json::to_string_pretty(&doc).unwrap_or_default();
    s.push('\n');
    s
}
