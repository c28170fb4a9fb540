//! The lint documents (`numaplace lint --format json|sarif`): they read
//! back as written, keys come out in the order the documents have always
//! had (alphabetical at every level), and unknown fields are refused.

use numaplace_wire::lint::{
    EvidenceDoc, FindingDoc, LintDoc, SarifArtifactLocation, SarifConfiguration, SarifDriver, SarifLevel,
    SarifLocation, SarifLog, SarifPhysicalLocation, SarifRegion, SarifResult, SarifRule, SarifRun, SarifText,
    SarifTool, SeverityDoc, SummaryDoc, SARIF_SCHEMA, SARIF_VERSION,
};

fn finding(line: Option<u32>) -> FindingDoc {
    FindingDoc {
        evidence: line
            .map(|l| EvidenceDoc {
                file: "db1.xml".into(),
                line: l,
                text: "<vcpu placement='static' current='8'>16</vcpu>".into(),
            })
            .into_iter()
            .collect(),
        file: "db1.xml".into(),
        fix: "remove current='8'".into(),
        impact: "docs/background.md § CPU hot-add: 28662 vs 52927".into(),
        line,
        message: "CPU hot-add is on for 16 vCPUs".into(),
        resize: false,
        rule: "cpu-hotadd-wide".into(),
        severity: SeverityDoc::Error,
        vm: "db1".into(),
    }
}

fn lint_doc() -> LintDoc {
    LintDoc {
        findings: vec![finding(Some(11)), FindingDoc { severity: SeverityDoc::Info, ..finding(None) }],
        summary: SummaryDoc { error: 1, info: 1, warning: 0 },
    }
}

fn sarif_log() -> SarifLog {
    let text = |t: &str| SarifText { text: t.into() };
    SarifLog {
        schema: SARIF_SCHEMA.into(),
        runs: vec![SarifRun {
            results: vec![SarifResult {
                level: SarifLevel::Note,
                locations: vec![SarifLocation {
                    physical_location: SarifPhysicalLocation {
                        artifact_location: SarifArtifactLocation { uri: "db1.xml".into() },
                        region: SarifRegion { snippet: text("<vcpu>16</vcpu>"), start_line: 11 },
                    },
                }],
                message: text("db1: CPU hot-add ... Impact: ... Fix: ..."),
                rule_id: "cpu-hotadd-wide".into(),
            }],
            tool: SarifTool {
                driver: SarifDriver {
                    name: "numaplace".into(),
                    rules: vec![SarifRule {
                        default_configuration: SarifConfiguration { level: SarifLevel::Error },
                        help_uri: "docs/lint.md#cpu-hotadd-wide".into(),
                        id: "cpu-hotadd-wide".into(),
                        short_description: text("CPU hot-add on a wide VM"),
                    }],
                    version: "0.1.0".into(),
                },
            },
        }],
        version: SARIF_VERSION.into(),
    }
}

#[test]
fn a_lint_document_round_trips() {
    let doc = lint_doc();
    let text = serde_json::to_string_pretty(&doc).expect("serialises");
    let back: LintDoc = serde_json::from_str(&text).expect("reads back");
    assert_eq!(back, doc);
    assert_eq!(serde_json::to_string_pretty(&back).expect("serialises"), text);
}

#[test]
fn a_sarif_log_round_trips() {
    let log = sarif_log();
    let text = serde_json::to_string_pretty(&log).expect("serialises");
    let back: SarifLog = serde_json::from_str(&text).expect("reads back");
    assert_eq!(back, log);
    assert_eq!(serde_json::to_string_pretty(&back).expect("serialises"), text);
}

#[test]
fn lint_json_keys_and_values_are_as_documented() {
    let doc = LintDoc { findings: vec![finding(None)], ..lint_doc() };
    let expected = concat!(
        r#"{"findings":[{"evidence":[],"file":"db1.xml","fix":"remove current='8'","#,
        r#""impact":"docs/background.md § CPU hot-add: 28662 vs 52927","line":null,"message":"CPU hot-add is on for 16 vCPUs","#,
        r#""resize":false,"rule":"cpu-hotadd-wide","severity":"error","vm":"db1"}],"#,
        r#""summary":{"error":1,"info":1,"warning":0}}"#
    );
    assert_eq!(serde_json::to_string(&doc).expect("serialises"), expected);
    let one = serde_json::to_string(&finding(Some(11))).expect("serialises");
    assert!(
        one.starts_with(
            r#"{"evidence":[{"file":"db1.xml","line":11,"text":"<vcpu placement='static' current='8'>16</vcpu>"}],"#
        ),
        "{one}"
    );
    assert!(one.contains(r#""line":11,"message""#), "{one}");
}

#[test]
fn sarif_keys_and_values_are_as_written() {
    let expected = concat!(
        r#"{"$schema":"https://json.schemastore.org/sarif-2.1.0.json","runs":[{"results":[{"level":"note","#,
        r#""locations":[{"physicalLocation":{"artifactLocation":{"uri":"db1.xml"},"#,
        r#""region":{"snippet":{"text":"<vcpu>16</vcpu>"},"startLine":11}}}],"#,
        r#""message":{"text":"db1: CPU hot-add ... Impact: ... Fix: ..."},"ruleId":"cpu-hotadd-wide"}],"#,
        r#""tool":{"driver":{"name":"numaplace","rules":[{"defaultConfiguration":{"level":"error"},"#,
        r#""helpUri":"docs/lint.md#cpu-hotadd-wide","id":"cpu-hotadd-wide","#,
        r#""shortDescription":{"text":"CPU hot-add on a wide VM"}}],"version":"0.1.0"}}}],"version":"2.1.0"}"#
    );
    assert_eq!(serde_json::to_string(&sarif_log()).expect("serialises"), expected);
}

#[test]
fn unknown_fields_and_severities_are_refused() {
    let mut v = serde_json::to_value(lint_doc()).expect("serialises");
    v["summary"]["fatal"] = 0.into();
    assert!(serde_json::from_value::<LintDoc>(v).is_err());
    let mut v = serde_json::to_value(lint_doc()).expect("serialises");
    v["findings"][0]["severity"] = "fatal".into();
    assert!(serde_json::from_value::<LintDoc>(v).is_err());
    let mut v = serde_json::to_value(sarif_log()).expect("serialises");
    v["runs"][0]["tool"]["driver"]["rules"][0]["fullDescription"] = "x".into();
    assert!(serde_json::from_value::<SarifLog>(v).is_err());
}
