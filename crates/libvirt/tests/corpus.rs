//! libvirt's own test domains (fixtures/libvirt-domains, from libvirt's
//! `tests/qemuxmlconfdata`): every domain libvirt's tests accept reads,
//! and none of the others panics the reader.

use numaplace_libvirt::domain;
use std::path::PathBuf;

fn corpus(folder: &str) -> Vec<(String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/libvirt-domains").join(folder);
    let mut out: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "xml"))
        .map(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("").to_string();
            let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (name, text)
        })
        .collect();
    out.sort();
    out
}

/// Every domain libvirt accepts is read: a refusal here is numaplace
/// refusing a valid domain (and, before issue 52, leaving a whole host
/// unplanned).
#[test]
fn every_domain_libvirt_accepts_reads() {
    let files = corpus("accepted");
    assert!(files.len() > 900, "the corpus holds {} accepted domains", files.len());
    let refused: Vec<String> = files
        .iter()
        .filter_map(|(name, text)| domain::read(name, text).err().map(|e| format!("{name}: {e}")))
        .collect();
    assert!(refused.is_empty(), "{} of {} valid domains refused:\n{}", refused.len(), files.len(), refused.join("\n"));
}

/// The domains libvirt refuses either read or are refused with a line and
/// a reason; none panics.
#[test]
fn domains_libvirt_refuses_never_panic() {
    let files = corpus("rejected");
    assert!(files.len() > 150);
    for (name, text) in &files {
        if let Err(e) = domain::read(name, text) {
            assert!(!e.to_string().is_empty(), "{name}");
        }
    }
}

/// What libvirt derives is derived the same way: memory from the cells
/// when `<memory>` is missing, and `placement='auto'` drops a given
/// nodeset (formatdomain.rst, "NUMA Node Tuning").
#[test]
fn derived_memory_and_auto_placement_follow_libvirt() {
    let files = corpus("accepted");
    let get = |n: &str| {
        let (name, text) = files.iter().find(|(f, _)| f == n).unwrap_or_else(|| panic!("{n} in the corpus"));
        domain::read(name, text).unwrap_or_else(|e| panic!("{n}: {e}"))
    };
    let d = get("cpu-numa-no-memory-element.xml");
    assert!(d.memory_derived);
    assert_eq!(d.memory_bytes, d.cells.iter().map(|c| c.memory_bytes).sum::<u64>());
    assert!(d.memory_bytes > 0);
    let d = get("numatune-auto-nodeset-invalid.xml");
    assert!(d.vm_binding().is_none(), "placement='auto' ignores the nodeset: {:?}", d.bindings);
    // vCPUs no cell lists go to the first cell, as libvirt writes the
    // file back (numavcpus-topology-mismatch.x86_64-latest.xml).
    let d = get("numavcpus-topology-mismatch.xml");
    let cell0 = d.cells.iter().find(|c| c.id == 0).expect("cell 0");
    assert_eq!(cell0.vcpus.to_string(), "0-1,5,7-11");
    // A domain without <vcpu> has one (console-sclp.s390x-latest.xml).
    assert_eq!(get("console-sclp.xml").vcpus, 1);
    let d = get("numatune-memnode.xml");
    assert!(d.bindings.iter().any(|b| b.cell == Some(2)));
}

/// A host's domains read as state: a domain that does not read is
/// skipped, named with its error, and the others are held (issue 52:
/// one bad file stopped `plan --state DIR` for the whole host).
#[test]
fn a_domain_that_does_not_read_is_skipped_and_named_not_the_end_of_the_host() {
    let dir = std::env::temp_dir().join(format!("numaplace-corpus-skip-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let files = corpus("accepted");
    for name in ["cpu-numa-no-memory-element.xml", "numatune-memnode.xml", "hugepages-shared.xml"] {
        let (_, text) = files.iter().find(|(f, _)| f == name).expect("in the corpus");
        let text = text.replacen("<name>QEMUGuest1</name>", &format!("<name>{name}</name>"), 1);
        std::fs::write(dir.join(name), text).expect("write");
    }
    std::fs::write(dir.join("broken.xml"), "<domain><name>broken</name><vcpu>two</vcpu></domain>").expect("write");
    let host = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/topologies/mpibind/epyc-corona.xml");
    let topology = numaplace_read::read_source(&host.display().to_string()).expect("host");
    let lv = numaplace_libvirt::open(&dir.display().to_string()).expect("a dump directory");
    let (held, _, _, skipped) =
        numaplace_libvirt::state::held_domains(lv.as_ref(), &topology, false).expect("the host reads");
    assert_eq!(held.len(), 3, "{held:?}");
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    let said = skipped[0].to_string();
    assert!(said.contains("broken.xml: left out") && said.contains("vcpu"), "{said}");
    let _ = std::fs::remove_dir_all(&dir);
}
