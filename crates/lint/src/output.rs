//! Findings as text for people, JSON for programs (top-level `findings`)
//! and SARIF 2.1.0 for code-scanning tools. The JSON shapes are the wire
//! crate's (`numaplace_wire::lint`); this module only fills them in.

use crate::finding::{Finding, Severity};
use crate::rules;
use numaplace_wire::lint::{
    EvidenceDoc, FindingDoc, LintDoc, SarifArtifactLocation, SarifConfiguration, SarifDriver, SarifLevel,
    SarifLocation, SarifLog, SarifPhysicalLocation, SarifRegion, SarifResult, SarifRule, SarifRun, SarifText,
    SarifTool, SeverityDoc, SummaryDoc, SARIF_SCHEMA, SARIF_VERSION,
};
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
            "{} in {} ({} error, {} warning, {} info)",
            crate::rules::plural(findings.len(), "finding"),
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

fn severity_doc(s: Severity) -> SeverityDoc {
    match s {
        Severity::Error => SeverityDoc::Error,
        Severity::Warning => SeverityDoc::Warning,
        Severity::Info => SeverityDoc::Info,
    }
}

fn finding_doc(f: &Finding) -> FindingDoc {
    FindingDoc {
        evidence: f
            .evidence
            .iter()
            .map(|e| EvidenceDoc { file: e.file.clone(), line: e.line, text: e.text.clone() })
            .collect(),
        file: f.file.clone(),
        fix: f.fix.clone(),
        impact: f.impact.clone(),
        line: f.line(),
        message: f.message.clone(),
        resize: f.resize,
        rule: f.rule.to_string(),
        severity: severity_doc(f.severity),
        vm: f.vm.clone(),
    }
}

/// The JSON document of the findings (`wire::lint::LintDoc`).
fn json_doc(findings: &[Finding]) -> LintDoc {
    let count = |s: Severity| findings.iter().filter(|f| f.severity == s).count() as u64;
    LintDoc {
        findings: findings.iter().map(finding_doc).collect(),
        summary: SummaryDoc {
            error: count(Severity::Error),
            info: count(Severity::Info),
            warning: count(Severity::Warning),
        },
    }
}

/// Pretty JSON (from `serde_json::to_string_pretty`) with a final newline.
fn pretty(json: serde_json::Result<String>) -> String {
    let mut s = json.unwrap_or_default();
    s.push('\n');
    s
}

/// The JSON document: `{"findings": [...], "summary": {...}}`.
pub fn json(findings: &[Finding]) -> String {
    pretty(serde_json::to_string_pretty(&json_doc(findings)))
}

fn sarif_level(s: Severity) -> SarifLevel {
    match s {
        Severity::Error => SarifLevel::Error,
        Severity::Warning => SarifLevel::Warning,
        Severity::Info => SarifLevel::Note,
    }
}

fn text_of(text: impl Into<String>) -> SarifText {
    SarifText { text: text.into() }
}

/// The SARIF log of the findings (`wire::lint::SarifLog`).
fn sarif_doc(findings: &[Finding]) -> SarifLog {
    let rules = rules::all()
        .iter()
        .map(|r| SarifRule {
            default_configuration: SarifConfiguration { level: sarif_level(r.severity()) },
            help_uri: format!("docs/lint.md#{}", r.id()),
            id: r.id().to_string(),
            short_description: text_of(r.summary()),
        })
        .collect();
    let results = findings
        .iter()
        .map(|f| SarifResult {
            level: sarif_level(f.severity),
            locations: f
                .evidence
                .iter()
                .take(1)
                .map(|e| SarifLocation {
                    physical_location: SarifPhysicalLocation {
                        artifact_location: SarifArtifactLocation { uri: e.file.clone() },
                        region: SarifRegion { snippet: text_of(e.text.clone()), start_line: e.line },
                    },
                })
                .collect(),
            message: text_of(format!("{}: {} Impact: {} Fix: {}", f.vm, f.message, f.impact, f.fix)),
            rule_id: f.rule.to_string(),
        })
        .collect();
    SarifLog {
        schema: SARIF_SCHEMA.to_string(),
        runs: vec![SarifRun {
            results,
            tool: SarifTool {
                driver: SarifDriver {
                    name: "numaplace".to_string(),
                    rules,
                    version: env!("CARGO_PKG_VERSION").to_string(),
                },
            },
        }],
        version: SARIF_VERSION.to_string(),
    }
}

/// A SARIF 2.1.0 log with one run.
pub fn sarif(findings: &[Finding]) -> String {
    pretty(serde_json::to_string_pretty(&sarif_doc(findings)))
}
