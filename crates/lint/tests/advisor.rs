//! The cases an operator found the advisor unsafe on (issue 15), each on
//! files written here: references to what the host lacks, the hot-add
//! case of docs/background.md § CPU hot-add, strict bindings, huge pages
//! per node, fixes of a whole host's VMs planned together, and sibling
//! threads shared across VMs.

mod common;

use common::*;
use numaplace_lint::{fix_all, lint, Finding, FixOptions, Severity, VmFile};
use numaplace_topo::{CpuSet, Topology};
use std::collections::BTreeMap;

fn findings_of(name: &str, text: &str, host: &Topology) -> Vec<Finding> {
    lint(&[file(name, text)], host)
}

/// The 1-based line of the first line of `text` containing `needle`.
fn line_of(text: &str, needle: &str) -> u32 {
    text.lines().position(|l| l.contains(needle)).map(|i| i as u32 + 1).unwrap_or_else(|| panic!("no {needle}"))
}

fn only(findings: &[Finding], rule: &str) -> Finding {
    let mine: Vec<&Finding> = findings.iter().filter(|f| f.rule == rule).collect();
    assert_eq!(mine.len(), 1, "{rule}: {findings:#?}");
    mine[0].clone()
}

#[test]
fn pins_to_cpus_the_host_lacks_are_an_error_naming_the_line() {
    let text = domain("ghost-cpus", 4, 8, &pins(&[500, 501, 502, 503]), "");
    let f = only(&findings_of("ghost-cpus.xml", &text, &host_72()), "unknown-reference");
    assert_eq!(f.severity, Severity::Error);
    assert!(f.message.contains("500-503") && f.message.contains("0-71"), "{}", f.message);
    assert_eq!(f.evidence[0].line, line_of(&text, "cpuset='500'"));
}

#[test]
fn a_pin_of_a_vcpu_beyond_the_count_is_an_error_naming_the_line() {
    let tune = "  <cputune>\n    <vcpupin vcpu='0' cpuset='0'/>\n    <vcpupin vcpu='9' cpuset='1'/>\n  </cputune>\n";
    let text = domain("ghost-vcpu", 4, 8, tune, "");
    let f = only(&findings_of("ghost-vcpu.xml", &text, &host_72()), "unknown-reference");
    assert_eq!(f.severity, Severity::Error);
    assert!(f.message.contains("vCPU 9") && f.message.contains("0-3"), "{}", f.message);
    assert!(f.evidence.iter().any(|e| e.line == line_of(&text, "vcpu='9'")), "{:?}", f.evidence);
}

#[test]
fn memory_bound_to_a_node_the_host_lacks_is_an_error_naming_the_line() {
    let tune = "  <numatune>\n    <memory mode='strict' nodeset='5'/>\n  </numatune>\n";
    let text = domain("ghost-node", 4, 8, tune, "");
    let f = only(&findings_of("ghost-node.xml", &text, &host_72()), "unknown-reference");
    assert!(f.message.contains("node(s) 5") && f.message.contains("nodes 0-1"), "{}", f.message);
    assert_eq!(f.evidence[0].line, line_of(&text, "nodeset='5'"));
    assert_eq!(f.severity, Severity::Error);
}

#[test]
fn undeclared_cells_page_sizes_and_devices_are_named() {
    // A memnode for a cell the guest does not have.
    let tune = "  <numatune>\n    <memnode cellid='3' mode='strict' nodeset='0'/>\n  </numatune>\n";
    let text = domain("ghost-cell", 4, 8, tune, "");
    let f = only(&findings_of("ghost-cell.xml", &text, &host_72()), "unknown-reference");
    assert!(f.message.contains("guest cell 3"), "{}", f.message);
    // A page size no node offers (esxi_2x12 offers 2 MiB and 1 GiB).
    let tune = "  <memoryBacking>\n    <hugepages>\n      <page size='16' unit='GiB'/>\n    </hugepages>\n  </memoryBacking>\n";
    let text = domain("ghost-pages", 4, 32, tune, "");
    let f = only(&findings_of("ghost-pages.xml", &text, &esxi_2x12()), "unknown-reference");
    assert!(f.message.contains("16 GiB") && f.message.contains("2 MiB and 1 GiB"), "{}", f.message);
    assert!(!findings_of("ghost-pages.xml", &text, &esxi_2x12()).iter().any(|f| f.rule == "hugepages-missing"));
    // A passthrough device the host does not list (it lists 0000:3b:00.0).
    let dev = "    <hostdev mode='subsystem' type='pci' managed='yes'>\n      <source>\n        <address domain='0x0000' bus='0x5e' slot='0x00' function='0x1'/>\n      </source>\n    </hostdev>\n";
    let text = domain("ghost-dev", 4, 8, "", dev);
    let f = only(&findings_of("ghost-dev.xml", &text, &esxi_2x12()), "unknown-reference");
    assert!(f.message.contains("0000:5e:00.1"), "{}", f.message);
    assert_eq!(f.evidence[0].line, line_of(&text, "bus='0x5e'"));
}

#[test]
fn the_fix_replans_unknown_pins_and_keeps_the_vm() {
    let host = host_72();
    let mut files = vec![file("ghost-cpus.xml", &domain("ghost-cpus", 4, 8, &pins(&[500, 501, 502, 503]), ""))];
    let before = files[0].sizes();
    let report = fix_all(&mut files, &host, FixOptions::default());
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert_eq!(files[0].sizes(), before);
    assert!(lint(&files, &host).is_empty(), "{:#?}", lint(&files, &host));
}

/// docs/background.md § CPU hot-add: 16 vCPUs and 200 GB with hot-add on,
/// here on 18-core, 125 GiB nodes: the vCPUs fit one node, the memory
/// does not.
const HOTADD_VMX: &str = ".encoding = \"UTF-8\"
displayName = \"sql-hotadd\"
numvcpus = \"16\"
memSize = \"204800\"
vcpu.hotadd = \"TRUE\"
ethernet0.present = \"TRUE\"
";

#[test]
fn hotadd_is_flagged_when_the_memory_needs_two_nodes() {
    let findings = findings_of("sql-hotadd.vmx", HOTADD_VMX, &host_72());
    let f = only(&findings, "cpu-hotadd-wide");
    assert_eq!(f.severity, Severity::Error);
    assert!(f.message.contains("200 GiB") && f.message.contains("2 host nodes"), "{}", f.message);
    assert!(f.evidence.iter().any(|e| e.text.starts_with("memSize")), "{:?}", f.evidence);
    // The memory is not reported a second time.
    assert!(!findings.iter().any(|f| f.rule == "memory-exceeds-node"), "{findings:#?}");
}

#[test]
fn the_hotadd_fix_turns_it_off_and_splits_virtual_nodes_without_touching_memsize() {
    let host = host_72();
    let mut files = vec![file("sql-hotadd.vmx", HOTADD_VMX)];
    let report = fix_all(&mut files, &host, FixOptions::default());
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    let text = &files[0].text;
    assert!(text.contains("vcpu.hotadd = \"FALSE\""), "{text}");
    assert!(text.contains("memSize = \"204800\""), "{text}");
    assert!(text.contains("numa.vcpu.maxPerVirtualNode = \"8\""), "{text}");
    let notes: Vec<&str> = report.notes.iter().map(|(_, n)| n.as_str()).collect();
    assert!(notes.iter().any(|n| n.contains("powered off and on")), "{notes:?}");
    let left: Vec<Finding> = lint(&files, &host).into_iter().filter(|f| f.severity >= Severity::Warning).collect();
    assert!(left.is_empty(), "{left:#?}");
}

#[test]
fn a_resize_is_made_only_when_allowed() {
    let host = esxi_2x12();
    for opts in [FixOptions::default(), FixOptions { allow_resize: true, ..FixOptions::default() }] {
        let mut files = vec![fixture("odd-17vcpu.vmx")];
        let before = files[0].text.clone();
        let f = only(&lint(&files, &host), "odd-vcpus-wide");
        assert!(f.resize && f.fix.contains("--allow-resize"), "{f:?}");
        let report = fix_all(&mut files, &host, opts);
        if opts.allow_resize {
            assert!(files[0].text.contains("numvcpus = \"18\""), "{}", files[0].text);
        } else {
            assert_eq!(files[0].text, before, "the file is left alone");
            assert!(report.fixed.is_empty());
            assert!(report.notes.iter().any(|(_, n)| n.contains("numvcpus left at 17")), "{:?}", report.notes);
        }
    }
    // memory-exceeds-node on a 1-vCPU VM: only a smaller memory fits.
    let vmx = "displayName = \"one\"\nnumvcpus = \"1\"\nmemSize = \"200000\"\n";
    let f = only(&findings_of("one.vmx", vmx, &host_72()), "memory-exceeds-node");
    assert!(f.resize, "{f:?}");
}

#[test]
fn memory_bound_strict_to_a_small_node_cannot_be_allocated() {
    let host = host_72();
    let cpus: Vec<u32> = (0..8).collect();
    for (mode, words) in [("strict", "fails to start"), ("restrictive", "fails to start"), ("preferred", "remote")] {
        let tune = format!("{}  <numatune>\n    <memory mode='{mode}' nodeset='0'/>\n  </numatune>\n", pins(&cpus));
        let text = domain("big", 8, 160, &tune, "");
        let f = only(&findings_of("big.xml", &text, &host), "memory-exceeds-node");
        assert!(f.message.contains(words), "{mode}: {}", f.message);
        if mode == "preferred" {
            assert_eq!(f.severity, Severity::Warning, "{f:?}");
        } else {
            assert_eq!(f.severity, Severity::Error, "{f:?}");
            assert!(!f.message.contains("is remote"), "{mode}: {}", f.message);
        }
    }
}

#[test]
fn huge_page_advice_gives_each_node_its_own_count() {
    // 160 GiB in 1 GiB pages, two cells of 80 GiB bound to nodes 0 and 1.
    let cpus: Vec<u32> = (0..8).chain(18..26).collect();
    let tune = format!(
        "  <memoryBacking>\n    <hugepages>\n      <page size='1048576' unit='KiB'/>\n    </hugepages>\n  </memoryBacking>\n{}  <numatune>\n    <memory mode='strict' nodeset='0-1'/>\n    <memnode cellid='0' mode='strict' nodeset='0'/>\n    <memnode cellid='1' mode='strict' nodeset='1'/>\n  </numatune>\n  <cpu mode='host-passthrough'>\n    <topology sockets='2' dies='1' cores='8' threads='1'/>\n    <numa>\n      <cell id='0' cpus='0-7' memory='83886080' unit='KiB'/>\n      <cell id='1' cpus='8-15' memory='83886080' unit='KiB'/>\n    </numa>\n  </cpu>\n",
        pins(&cpus)
    );
    let text = domain("paged", 16, 160, &tune, "");
    let f = only(&findings_of("paged.xml", &text, &host_72()), "hugepages-missing");
    assert!(f.message.contains("node0 needs 80") && f.message.contains("node1 needs 80"), "{}", f.message);
    assert!(f.fix.contains("echo 80 > /sys/devices/system/node/node0/hugepages/hugepages-1048576kB"), "{}", f.fix);
    assert!(f.fix.contains("echo 80 > /sys/devices/system/node/node1/"), "{}", f.fix);
    assert!(!f.fix.contains("160"), "{}", f.fix);
}

#[test]
fn sibling_threads_shared_across_vms_are_reported_once() {
    let host = host_72();
    // b runs on the sibling threads (36-39) of a's cores (0-3).
    let a = file("a.xml", &domain("a", 4, 8, &pins(&[0, 1, 2, 3]), ""));
    let b = file("b.xml", &domain("b", 4, 8, &pins(&[36, 37, 38, 39]), ""));
    let findings = lint(&[a, b], &host);
    let f = only(&findings, "siblings-shared");
    assert_eq!((f.vm.as_str(), f.severity), ("b", Severity::Warning), "{f:?}");
    assert!(f.message.contains("36-39") && f.message.contains("0-3") && f.message.contains("4 physical cores"));
    assert!(!findings.iter().any(|f| f.rule == "pinning-overlap"));
}

/// The CPUs each VM of the files is pinned to, by VM name.
fn pinned(files: &[VmFile]) -> BTreeMap<String, CpuSet> {
    let mut out = BTreeMap::new();
    for f in files {
        let doc = roxmltree::Document::parse(&f.text).expect("XML");
        let name = doc.descendants().find(|n| n.has_tag_name("name")).and_then(|n| n.text()).unwrap_or("").to_string();
        let cpus: CpuSet = doc
            .descendants()
            .filter(|n| n.has_tag_name("vcpupin"))
            .filter_map(|n| CpuSet::parse_list(n.attribute("cpuset")?).ok())
            .fold(CpuSet::new(), |a, s| a.union(&s));
        out.insert(name, cpus);
    }
    out
}

/// A host's whole set of VMs, fixed in one run: the fixes collide neither
/// with each other nor with the VMs kept, and no two VMs share a core
/// while whole cores are free (34 vCPUs on 36 cores).
#[test]
fn a_whole_host_fixed_together_leaves_no_cpu_or_core_on_two_vms() {
    let host = host_72();
    let texts = [
        // Kept: clean and pinned.
        ("keep.xml", domain("keep", 8, 16, &pins(&(0..8).collect::<Vec<_>>()), "")),
        // On keep's CPUs.
        ("collide.xml", domain("collide", 4, 8, &pins(&[4, 5, 6, 7]), "")),
        // On keep's sibling threads.
        ("siblings.xml", domain("siblings", 4, 8, &pins(&[36, 37, 38, 39]), "")),
        // Pinned to CPUs of both nodes each.
        ("spans.xml", domain("spans", 4, 8, &pins(&[8, 18, 9, 19]), "")),
        // Split into six guest cells of two vCPUs on a 2-node host,
        // unpinned.
        (
            "six.xml",
            domain(
                "six",
                12,
                96,
                &format!(
                    "  <cpu mode='host-passthrough'>\n    <numa>\n{}    </numa>\n  </cpu>\n",
                    (0..6)
                        .map(|c| format!(
                            "      <cell id='{c}' cpus='{}-{}' memory='16777216' unit='KiB'/>\n",
                            2 * c,
                            2 * c + 1
                        ))
                        .collect::<String>()
                ),
                "",
            ),
        ),
        // Pinned to CPUs the host lacks.
        ("ghost.xml", domain("ghost", 2, 4, &pins(&[100, 101]), "")),
    ];
    let mut files: Vec<VmFile> = texts.iter().map(|(n, t)| file(n, t)).collect();
    let sizes: Vec<_> = files.iter().map(VmFile::sizes).collect();
    let report = fix_all(&mut files, &host, FixOptions::default());
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert_eq!(files[0].text, texts[0].1, "the clean VM is kept byte for byte");
    assert_eq!(files.iter().map(VmFile::sizes).collect::<Vec<_>>(), sizes, "no VM resized");
    let by_vm = pinned(&files);
    let core_of = |cpu: u32| host.pu(cpu).and_then(|p| p.core);
    let names: Vec<&String> = by_vm.keys().collect();
    for (i, a) in names.iter().enumerate() {
        for b in &names[i + 1..] {
            let (x, y) = (&by_vm[*a], &by_vm[*b]);
            assert!(x.is_disjoint(y), "{a} and {b} share CPUs {}", x.intersection(y));
            let cores_x: Vec<_> = x.iter().filter_map(core_of).collect();
            assert!(y.iter().filter_map(core_of).all(|c| !cores_x.contains(&c)), "{a} and {b} share a core: {x} / {y}");
        }
    }
    let left: Vec<Finding> = lint(&files, &host).into_iter().filter(|f| f.severity >= Severity::Warning).collect();
    assert!(left.is_empty(), "{left:#?}");
}
