//! A `.vmx` whose node or CPU affinity confines the VM to fewer host nodes
//! than its memory needs (issue 38): flagged, and fixed by widening the
//! affinity together with the virtual NUMA nodes, never by a fix that its
//! own kept settings contradict.

mod common;

use common::*;
use numaplace_lint::{fix_all, lint, Finding, FixOptions, Severity};

/// docs/background.md § CPU hot-add's VM (16 vCPUs, 200 GB, hot-add on),
/// held to node 0 by both affinities, on 2 nodes of 18 cores and 125 GiB.
const CONFINED_VMX: &str = ".encoding = \"UTF-8\"
displayName = \"sql-confined\"
numvcpus = \"16\"
memSize = \"204800\"
vcpu.hotadd = \"TRUE\"
numa.nodeAffinity = \"0\"
sched.cpu.affinity = \"0-15\"
";

fn warnings(findings: Vec<Finding>) -> Vec<Finding> {
    findings.into_iter().filter(|f| f.severity >= Severity::Warning).collect()
}

#[test]
fn an_affinity_narrower_than_the_memory_needs_is_flagged_on_its_line() {
    let host = host_72();
    let findings = lint(&[file("confined.vmx", CONFINED_VMX)], &host);
    let f: Vec<&Finding> = findings.iter().filter(|f| f.rule == "affinity-too-narrow").collect();
    assert_eq!(f.len(), 1, "{findings:#?}");
    let f = f[0];
    assert_eq!(f.severity, Severity::Warning);
    assert!(f.message.contains("node0") && f.message.contains("2 host nodes"), "{}", f.message);
    let lines: Vec<&str> = f.evidence.iter().map(|e| e.text.as_str()).collect();
    assert!(lines.iter().any(|l| l.starts_with("numa.nodeAffinity")), "{lines:?}");
    assert!(lines.iter().any(|l| l.starts_with("memSize")), "{lines:?}");
}

#[test]
fn an_affinity_wide_enough_is_not_flagged() {
    let host = host_72();
    let text = CONFINED_VMX
        .replace("numa.nodeAffinity = \"0\"", "numa.nodeAffinity = \"0,1\"")
        .replace("sched.cpu.affinity = \"0-15\"\n", "");
    let findings = lint(&[file("wide.vmx", &text)], &host);
    assert!(!findings.iter().any(|f| f.rule == "affinity-too-narrow"), "{findings:#?}");
}

#[test]
fn the_fix_widens_the_affinity_that_would_contradict_it() {
    let host = host_72();
    let mut files = vec![file("confined.vmx", CONFINED_VMX)];
    let report = fix_all(&mut files, &host, FixOptions::default());
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    let text = files[0].text.clone();
    assert!(text.contains("vcpu.hotadd = \"FALSE\""), "{text}");
    assert!(text.contains("memSize = \"204800\""), "{text}");
    assert!(text.contains("numa.vcpu.maxPerVirtualNode = \"8\""), "{text}");
    // The memory may now go where the virtual nodes are: both host nodes.
    assert!(text.contains("numa.nodeAffinity = \"0,1\""), "{text}");
    assert!(!text.contains("sched.cpu.affinity = \"0-15\""), "{text}");
    let left = warnings(lint(&files, &host));
    assert!(left.is_empty(), "{left:#?}");
}

/// Issue 38: an ESXi VM and a KVM domain never share a host, so linting
/// both kinds in one run must not report one against the other (here a
/// `.vmx` held to CPUs 0-3 and a domain pinned to the same CPUs).
#[test]
fn vmx_and_libvirt_files_are_not_each_others_neighbours() {
    let host = host_72();
    let xml = domain("kvm", 4, 8, &pins(&[0, 1, 2, 3]), "");
    let vmx = "displayName = \"esxi\"\nnumvcpus = \"4\"\nmemSize = \"8192\"\nsched.cpu.affinity = \"0-3\"\n";
    let alone: Vec<&'static str> = lint(&[file("kvm.xml", &xml)], &host).iter().map(|f| f.rule).collect();
    let together = lint(&[file("esxi.vmx", vmx), file("kvm.xml", &xml)], &host);
    let kvm: Vec<&'static str> = together.iter().filter(|f| f.file == "kvm.xml").map(|f| f.rule).collect();
    assert_eq!(kvm, alone, "{together:#?}");
    let esxi_alone: Vec<&'static str> = lint(&[file("esxi.vmx", vmx)], &host).iter().map(|f| f.rule).collect();
    let esxi: Vec<&'static str> = together.iter().filter(|f| f.file == "esxi.vmx").map(|f| f.rule).collect();
    assert_eq!(esxi, esxi_alone, "{together:#?}");
}
