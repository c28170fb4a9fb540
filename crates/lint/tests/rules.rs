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

/// The default domain (`virt-install` writes no `<numa>`) wider than a
/// node: the guest sees one NUMA node over the two its vCPUs need, the
/// measured cost of CPU hot-add without hot-add. `--fix` declares a cell
/// per node.
#[test]
fn a_wide_domain_without_guest_cells_is_flagged_and_fixed() {
    let host = esxi_2x12();
    let text = domain("wide", 24, 64, "", "");
    let findings = numaplace_lint::lint(&[file("wide.xml", &text)], &host);
    let f = findings.iter().find(|f| f.rule == "guest-cells-missing").expect("flagged");
    assert_eq!(f.severity, numaplace_lint::Severity::Warning);
    assert!(f.message.starts_with("24 vCPUs, more than the 12 cores of one host node"), "{}", f.message);
    assert!(f.impact.contains("28662 vs 52927"), "{}", f.impact);
    assert!(f.fix.contains("declare 2 guest cells"), "{}", f.fix);
    let mut files = vec![file("wide.xml", &text)];
    let report = numaplace_lint::fix_all(&mut files, &host, numaplace_lint::FixOptions::default());
    assert_eq!(report.fixed.len(), 1, "{:?}", report.failed);
    let fixed = &report.fixed[0].1;
    assert_eq!(fixed.matches("<cell ").count(), 2, "{fixed}");
    let after = numaplace_lint::lint(&[file("wide.xml", fixed)], &host);
    assert!(after.iter().all(|f| f.rule != "guest-cells-missing"), "{after:#?}");
}

/// A small VM pinned over two nodes without cells is the same trap; the
/// same VM pinned inside one node is one guest node told the truth.
#[test]
fn pins_over_two_nodes_without_guest_cells_are_flagged_pins_on_one_are_not() {
    let host = esxi_2x12();
    let node0: Vec<u32> = host.nodes()[0].cpus.iter().take(4).collect();
    let node1: Vec<u32> = host.nodes()[1].cpus.iter().take(2).collect();
    let spread = [node0[0], node0[1], node1[0], node1[1]];
    let findings = numaplace_lint::lint(&[file("spread.xml", &domain("spread", 4, 8, &pins(&spread), ""))], &host);
    let f = findings.iter().find(|f| f.rule == "guest-cells-missing").expect("flagged");
    assert!(f.message.starts_with("4 vCPUs pinned over 2 host nodes"), "{}", f.message);
    let local = numaplace_lint::lint(&[file("local.xml", &domain("local", 4, 8, &pins(&node0), ""))], &host);
    assert!(local.iter().all(|f| f.rule != "guest-cells-missing"), "{local:#?}");
}
