//! What users read: evidence lines, the measured cost and its source, the
//! fix, and the JSON and SARIF shapes.

mod common;

use common::*;
use numaplace_lint::output;
use numaplace_wire::lint::{LintDoc, SarifLevel, SarifLog, SeverityDoc};
use serde_json::Value;

#[test]
fn hotadd_finding_points_at_the_lines_and_cites_the_measurement() {
    let findings = check(&["hotadd-16vcpu-200g.xml"], &esxi_2x8());
    let f = findings.iter().find(|f| f.rule == "cpu-hotadd-wide").expect("finding");
    let lines: Vec<u32> = f.evidence.iter().map(|e| e.line).collect();
    // <vcpu current='8'> is line 11; the first hot-pluggable vCPU line 14.
    assert_eq!(lines, vec![11, 14]);
    assert_eq!(f.evidence[0].text, "<vcpu placement='static' current='8'>16</vcpu>");
    assert!(f.impact.contains("28662 vs 52927"), "{}", f.impact);
    assert!(f.impact.contains("docs/background.md § CPU hot-add"), "{}", f.impact);
    assert!(f.message.contains("16 vCPUs") && f.message.contains("8 cores"), "{}", f.message);

    let vmx = check(&["hotadd-16vcpu-200g.vmx"], &esxi_2x8());
    assert_eq!(
        vmx[0].evidence.iter().map(|e| e.text.as_str()).collect::<Vec<_>>(),
        vec!["numvcpus = \"16\"", "vcpu.hotadd = \"TRUE\""]
    );
    assert!(vmx[0].fix.contains("vcpu.hotadd = \"FALSE\""), "{}", vmx[0].fix);
}

#[test]
fn esxi_layouts_cite_photoworxx() {
    let f = &check(&["esxi-24vcpu-3x8.vmx"], &esxi_2x12())[0];
    assert!(f.message.starts_with("3 guest NUMA cells on 2 host nodes"), "{}", f.message);
    assert!(f.impact.contains("23600 vs 53000"), "{}", f.impact);
    assert!(f.fix.contains("cpuid.coresPerSocket = \"12\""), "{}", f.fix);
}

#[test]
fn request_json_evidence_finds_the_key_line() {
    let f = &check(&["request-hotadd.json"], &esxi_2x12())[0];
    assert_eq!(f.vm, "db1");
    assert_eq!(f.evidence.iter().map(|e| e.line).collect::<Vec<_>>(), vec![4, 7]);
}

#[test]
fn json_has_top_level_findings_with_every_field() {
    let findings = check(&["esxi-24vcpu-3x8.vmx", "odd-17vcpu.xml"], &esxi_2x12());
    let doc: Value = serde_json::from_str(&output::json(&findings)).expect("valid JSON");
    let list = doc["findings"].as_array().expect("findings list");
    // The .vmx's uneven cells; the domain's odd count and its missing
    // guest cells (17 vCPUs on 12-core nodes, no <numa>).
    assert_eq!(list.len(), 3, "{doc}");
    for f in list {
        for key in ["rule", "severity", "message", "impact", "fix"] {
            assert!(f[key].is_string(), "{key} in {f}");
        }
        let ev = &f["evidence"][0];
        assert!(ev["file"].is_string() && ev["line"].is_u64() && ev["text"].is_string(), "{f}");
    }
    assert_eq!(list[0]["rule"], "guest-cells-uneven");
    assert_eq!(list[1]["severity"], "warning");
    assert!(list.iter().any(|f| f["rule"] == "guest-cells-missing"), "{doc}");
}

#[test]
fn sarif_is_a_2_1_0_log_with_located_results() {
    let findings = check(&["numatune-remote.xml"], &esxi_2x12());
    let doc: Value = serde_json::from_str(&output::sarif(&findings)).expect("valid JSON");
    assert_eq!(doc["version"], "2.1.0");
    let run = &doc["runs"][0];
    assert_eq!(run["tool"]["driver"]["name"], "numaplace");
    assert!(
        run["tool"]["driver"]["rules"].as_array().is_some_and(|r| r.len() == 23),
        "issue 47 added three rules and issue 52 one: 23"
    );
    let result = &run["results"][0];
    assert_eq!(result["ruleId"], "memory-binding-remote");
    assert_eq!(result["level"], "error");
    let region = &result["locations"][0]["physicalLocation"]["region"];
    assert!(region["startLine"].as_u64().is_some_and(|l| l > 1), "{result}");
}

#[test]
fn text_output_ends_with_a_summary() {
    let findings = check(&["odd-17vcpu.vmx"], &esxi_2x12());
    let text = output::text(&findings, 1);
    assert!(text.starts_with("odd-17vcpu.vmx:6: warning[odd-vcpus-wide] app-odd: 17 vCPUs"), "{text}");
    assert!(text.ends_with("1 finding in 1 file (0 error, 1 warning, 0 info)\n"), "{text}");
    assert_eq!(output::text(&[], 2), "no findings in 2 files\n");
}

#[test]
fn json_and_sarif_read_back_through_the_wire_types_byte_for_byte() {
    let names = ["esxi-24vcpu-3x8.vmx", "odd-17vcpu.xml", "numatune-remote.xml", "overlap-a.xml", "overlap-b.xml"];
    let findings = check(&names, &esxi_2x12());
    assert!(findings.len() >= 4, "{findings:#?}");

    let json = output::json(&findings);
    let doc: LintDoc = serde_json::from_str(&json).expect("a lint document");
    assert_eq!(doc.findings.len(), findings.len());
    let errors = findings.iter().filter(|f| f.severity == numaplace_lint::Severity::Error).count();
    assert_eq!(doc.summary.error, errors as u64);
    assert_eq!(doc.findings.iter().filter(|f| f.severity == SeverityDoc::Error).count(), errors);
    for (d, f) in doc.findings.iter().zip(&findings) {
        assert_eq!((d.rule.as_str(), &d.vm, &d.file), (f.rule, &f.vm, &f.file));
        assert_eq!(d.line, f.evidence.first().map(|e| e.line));
    }
    let mut again = serde_json::to_string_pretty(&doc).expect("serialises");
    again.push('\n');
    assert_eq!(again, json);

    let sarif = output::sarif(&findings);
    let log: SarifLog = serde_json::from_str(&sarif).expect("a SARIF log");
    assert_eq!(log.runs[0].results.len(), findings.len());
    assert!(log.runs[0].tool.driver.rules.iter().any(|r| r.default_configuration.level == SarifLevel::Error));
    let mut again = serde_json::to_string_pretty(&log).expect("serialises");
    again.push('\n');
    assert_eq!(again, sarif);

    let empty: LintDoc = serde_json::from_str(&output::json(&[])).expect("an empty document");
    assert!(empty.findings.is_empty() && empty.summary.error + empty.summary.warning + empty.summary.info == 0);
}
