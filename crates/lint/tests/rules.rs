//! Every rule on docs/background.md's measured cases, in libvirt XML and .vmx, and
//! clean examples that must produce nothing.

mod common;

use common::*;

#[test]
fn every_scenario_fires_exactly_its_rules() {
    let mut failures = Vec::new();
    for (files, host, expected) in scenarios() {
        let findings = check(&files, &host());
        let got = rule_ids(&findings);
        if got != expected {
            let detail: Vec<String> =
                findings.iter().map(|f| format!("  {} {}: {}", f.rule, f.file, f.message)).collect();
            failures.push(format!("{files:?}: expected {expected:?}, got {got:?}\n{}", detail.join("\n")));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn clean_examples_produce_no_finding() {
    for (file, host) in clean() {
        let findings = check(&[file], &host());
        assert!(findings.is_empty(), "{file}: {findings:#?}");
    }
}
