//! `--fix`: every fixture with findings, fixed and linted again, is
//! clean; a fixed libvirt domain differs from its input only inside the
//! elements a fix owns; a fixed .vmx only on the keys it sets.

mod common;

use common::*;
use numaplace_lint::{fix, fix_all, lint, FixOptions, FixReport, Severity, SourceFormat, VmFile};

/// Fixes the files as `lint --fix` does: every file with a warning or
/// error, together.
fn fix_files(names: &[&str], host: &numaplace_topo::Topology, opts: FixOptions) -> (Vec<VmFile>, FixReport) {
    let mut files: Vec<VmFile> = names.iter().map(|n| fixture(n)).collect();
    let report = fix_all(&mut files, host, opts);
    (files, report)
}

/// Findings of warning or worse.
fn loud(files: &[VmFile], host: &numaplace_topo::Topology) -> Vec<numaplace_lint::Finding> {
    lint(files, host).into_iter().filter(|f| f.severity >= Severity::Warning).collect()
}

#[test]
fn every_fix_lints_clean_when_resizing_is_allowed() {
    let mut failures = Vec::new();
    let opts = FixOptions { allow_resize: true, ..FixOptions::default() };
    for (names, host, _) in scenarios() {
        if names.iter().all(|n| n.ends_with(".json")) {
            continue;
        }
        let host = host();
        let (files, report) = fix_files(&names, &host, opts);
        if let Some((i, e)) = report.failed.first() {
            failures.push(format!("{}: {e}", names[*i]));
        }
        let again = loud(&files, &host);
        if !again.is_empty() {
            let detail: Vec<String> = again.iter().map(|f| format!("  {} {}: {}", f.rule, f.file, f.message)).collect();
            failures.push(format!("{names:?} still has findings after --fix:\n{}", detail.join("\n")));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Without --allow-resize a fix keeps every vCPU, byte of memory, huge
/// page size and device; what it leaves is only what a resize would fix
/// (and the huge pages the host must reserve first).
#[test]
fn a_fix_keeps_what_the_vm_has_and_leaves_only_what_needs_a_resize() {
    let mut failures = Vec::new();
    for (names, host, _) in scenarios() {
        if names.iter().all(|n| n.ends_with(".json")) {
            continue;
        }
        let host = host();
        let before: Vec<VmFile> = names.iter().map(|n| fixture(n)).collect();
        let (files, report) = fix_files(&names, &host, FixOptions::default());
        for (b, a) in before.iter().zip(&files) {
            if b.sizes() != a.sizes() {
                failures.push(format!("{}: {:?} -> {:?}", b.name, b.sizes(), a.sizes()));
            }
        }
        let failed: Vec<&str> = report.failed.iter().map(|(i, _)| names[*i]).collect();
        if failed.iter().any(|n| *n != "hugepages-1g.xml") {
            failures.push(format!("{names:?}: no fix for {failed:?}: {:?}", report.failed));
        }
        for f in loud(&files, &host) {
            if !f.resize && !failed.contains(&f.file.as_str()) {
                failures.push(format!("{names:?}: {} {} remains and is not a resize: {}", f.rule, f.file, f.message));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The text outside the elements a libvirt fix owns, line by line.
fn unowned(text: &str) -> Vec<String> {
    let doc = roxmltree::Document::parse(text).expect("fixture parses");
    let owned = ["vcpu", "vcpus", "cputune", "numatune", "cpu", "memoryBacking"];
    let ranges: Vec<std::ops::Range<usize>> = doc
        .root_element()
        .children()
        .filter(|c| c.is_element() && owned.contains(&c.tag_name().name()))
        .map(|c| c.range())
        .collect();
    let mut rest = String::new();
    let mut pos = 0;
    for r in ranges {
        rest.push_str(&text[pos..r.start]);
        pos = r.end;
    }
    rest.push_str(&text[pos..]);
    rest.lines().map(|l| l.trim_end().to_string()).filter(|l| !l.trim().is_empty()).collect()
}

#[test]
fn libvirt_fix_keeps_every_other_byte() {
    for (names, host, _) in scenarios() {
        let host = host();
        let originals: Vec<VmFile> = names.iter().map(|n| fixture(n)).collect();
        let (fixed, _) = fix_files(&names, &host, FixOptions::default());
        for (before, after) in originals.iter().zip(&fixed) {
            if before.format != SourceFormat::Libvirt || before.text == after.text {
                continue;
            }
            assert_eq!(unowned(&before.text), unowned(&after.text), "{}", before.name);
            // The devices block, with the passthrough NIC, is untouched.
            let devices = |t: &str| t[t.find("<devices>").unwrap_or(0)..].to_string();
            assert_eq!(devices(&before.text), devices(&after.text), "{}", before.name);
        }
    }
}

#[test]
fn vmx_fix_changes_only_the_keys_it_sets() {
    let host = esxi_2x12();
    let before = fixture("esxi-24vcpu-3x8.vmx");
    let fixed = fix(&before, std::slice::from_ref(&before), &host, FixOptions::default()).expect("fix");
    let changed: Vec<(&str, &str)> = before.text.lines().zip(fixed.text.lines()).filter(|(a, b)| a != b).collect();
    assert_eq!(changed, vec![("cpuid.coresPerSocket = \"8\"", "cpuid.coresPerSocket = \"12\"")]);
    let added: Vec<&str> = fixed.text.lines().skip(before.text.lines().count()).collect();
    assert_eq!(added, vec!["numa.vcpu.maxPerVirtualNode = \"12\""]);
    assert!(fixed.text.starts_with(&before.text[..before.text.find("cpuid").unwrap_or(0)]));
}

#[test]
fn hotadd_fix_removes_hotplug_and_declares_cells() {
    let host = esxi_2x8();
    let before = fixture("hotadd-16vcpu-200g.xml");
    let fixed = fix(&before, std::slice::from_ref(&before), &host, FixOptions::default()).expect("fix").text;
    assert!(!fixed.contains("<vcpus>"), "{fixed}");
    assert!(!fixed.contains("current="), "{fixed}");
    assert!(fixed.contains("<vcpupin vcpu='15' cpuset="), "{fixed}");
    assert!(fixed.contains("<cell id='1' cpus='8-15'"), "{fixed}");
    assert!(fixed.contains("<memnode cellid='1' mode='strict' nodeset='1'/>"), "{fixed}");
    // The original <cpu> attributes are kept.
    assert!(fixed.contains("<cpu mode='host-passthrough' check='none' migratable='on'>"), "{fixed}");
}

#[test]
fn request_json_has_no_automatic_fix() {
    let host = esxi_2x12();
    let file = fixture("request-hotadd.json");
    assert!(fix(&file, std::slice::from_ref(&file), &host, FixOptions::default()).is_err());
}

/// The splice on its own, with a placement built by hand (no planner).
#[test]
fn splice_of_a_hand_built_placement() {
    use numaplace_plan::{CpuMode, GuestCell, GuestTopology, MemoryMode, Placement, VcpuPin};
    use numaplace_topo::{CpuSet, NodeId};
    let p = Placement {
        vm: "web-small".into(),
        nodes: vec![NodeId(1)],
        cpu_mode: CpuMode::Dedicated,
        vcpus: (0..4).map(|v| VcpuPin { vcpu: v, pu: 12 + v, node: NodeId(1) }).collect(),
        cpuset: CpuSet::range(12, 15),
        emulator: CpuSet::new(),
        memory: vec![(NodeId(1), 8 << 30)],
        memory_bytes: 8 << 30,
        memory_mode: MemoryMode::Strict,
        hugepage_bytes: Some(2 << 20),
        online_vcpus: None,
        devices: Vec::new(),
        floating: Vec::new(),
        charged: Vec::new(),
        guest: GuestTopology {
            sockets: 1,
            dies: 1,
            cores: 4,
            threads: 1,
            cells: vec![GuestCell {
                id: 0,
                vcpus: CpuSet::range(0, 3),
                memory_bytes: 8 << 30,
                host_node: NodeId(1),
                distances: vec![10],
                memory_nodes: Vec::new(),
            }],
        },
    };
    let before = fixture("clean-small.xml");
    let after = numaplace_libvirt::domain::splice(&before.text, &p).expect("splice");
    let expected_head = "  <currentMemory unit='KiB'>8388608</currentMemory>
  <memoryBacking>
    <hugepages>
      <page size='2048' unit='KiB' nodeset='0'/>
    </hugepages>
  </memoryBacking>
  <vcpu placement='static' cpuset='12-15'>4</vcpu>
  <cputune>
    <vcpupin vcpu='0' cpuset='12'/>
    <vcpupin vcpu='1' cpuset='13'/>
    <vcpupin vcpu='2' cpuset='14'/>
    <vcpupin vcpu='3' cpuset='15'/>
  </cputune>
  <numatune>
    <memory mode='strict' nodeset='1'/>
    <memnode cellid='0' mode='strict' nodeset='1'/>
  </numatune>
  <resource>";
    assert!(after.contains(expected_head), "{after}");
    assert!(
        after.contains(
            "  <cpu mode='host-passthrough' check='none' migratable='on'>
    <topology sockets='1' dies='1' cores='4' threads='1'/>
    <numa>
      <cell id='0' cpus='0-3' memory='8388608' unit='KiB'/>
    </numa>
  </cpu>
  <clock offset='utc'>"
        ),
        "{after}"
    );
    assert_eq!(unowned(&before.text), unowned(&after));
}

/// A host domain that floats (no pins, a cpuset) is load for a fix, as it
/// is for `plan --state`: the fixed VM's vCPUs go where the floating one
/// is not counted, rather than onto its CPUs. (A fix that would pin the
/// VM inside the floating domain's CPUs is not written, since the set
/// would then have a floating-on-dedicated warning it did not have:
/// tests/joint_fix.rs.)
#[test]
fn a_floating_host_domain_is_load_for_the_fix() {
    let host = numaplace_read::read_source("1 socket x 4 cores x 1 thread, 8GiB per node").expect("host");
    let floating = numaplace_lint::parse_file(
        "held.xml",
        b"<domain type='kvm'><name>held</name><memory unit='GiB'>1</memory>\
          <vcpu placement='static' cpuset='0-1'>2</vcpu></domain>",
    )
    .expect("held domain");
    // Two vCPUs on one CPU: an overlap a fix must replan.
    let broken = numaplace_lint::parse_file(
        "vm.xml",
        b"<domain type='kvm'><name>vm</name><memory unit='GiB'>1</memory><vcpu placement='static'>2</vcpu>\
          <cputune><vcpupin vcpu='0' cpuset='0'/><vcpupin vcpu='1' cpuset='0'/></cputune></domain>",
    )
    .expect("vm");
    let mut files = vec![floating, broken];
    let report = fix_all(&mut files, &host, FixOptions { held: 1, ..FixOptions::default() });
    assert!(report.failed.is_empty(), "{:?}", report.failed.iter().map(|(_, e)| e.to_string()).collect::<Vec<_>>());
    let text = files[1].text.clone();
    let pins: Vec<&str> = text.match_indices("cpuset='").map(|(i, _)| &text[i + 8..i + 9]).collect();
    // The floating domain's 2 vCPUs count against CPUs 0 and 1, so the
    // fixed VM is pinned to 2 and 3.
    assert!(
        text.contains("<vcpupin vcpu='0' cpuset='2'/>") && text.contains("<vcpupin vcpu='1' cpuset='3'/>"),
        "{pins:?}\n{text}"
    );
}
