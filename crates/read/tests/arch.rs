//! The host's architecture, as each source says it (issue 37): hwloc's
//! `Architecture` info, libvirt's `host/cpu/arch`, the kernel's cpuinfo
//! in a copy of a host's `/proc` and `/sys`, the synthetic grammar's
//! `arch` clause and numaplace's own JSON. A source that does not say is
//! x86-64, as numaplace always assumed.

use numaplace_read::sysfs::{read_tree, MemTree};
use numaplace_read::{hwloc, json, libvirt, synthetic, ParseError};
use numaplace_topo::Arch;
use std::path::PathBuf;

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/topologies").join(rel)
}

fn text(rel: &str) -> String {
    std::fs::read_to_string(fixture(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

#[test]
fn hwloc_files_name_their_architecture() {
    for (rel, arch) in [
        ("mpibind/coral-lassen.xml", Arch::Ppc64le),
        ("mpibind/coral-lassen-hwloc1.xml", Arch::Ppc64le),
        ("hwloc/linux/nvidia-dgx-gb10.xml", Arch::Aarch64),
        ("mpibind/epyc-corona.xml", Arch::X86_64),
    ] {
        let t = hwloc::parse(&text(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
        assert_eq!(*t.arch(), arch, "{rel}");
    }
}

#[test]
fn a_copy_of_sys_and_proc_is_told_apart_by_its_cpuinfo() {
    for (name, arch) in [
        ("256ppc-8n8s4t.tar.bz2", Arch::Ppc64le),
        ("128arm-2pa2n8cluster4co.tar.bz2", Arch::Aarch64),
        ("20s390-2g6s4c.tar.bz2", Arch::Other("s390x".into())),
        ("128ia64-17n4s2c.tar.bz2", Arch::Other("ia64".into())),
        ("16amd64-8n2c.tar.bz2", Arch::X86_64),
    ] {
        let tree = MemTree::from_tarball_file(&fixture(&format!("hwloc/linux/{name}"))).expect("fixture loads");
        let t = read_tree(&tree).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(*t.arch(), arch, "{name}");
    }
}

#[test]
fn libvirt_capabilities_give_host_cpu_arch() {
    // libvirt's test data gives its cells more huge pages than memory;
    // cells of 8 and 16 TiB hold them (as in tests/libvirt.rs).
    let caps = text("libvirt/vircaps-x86_64-hmat.xml")
        .replace("<memory unit='KiB'>1048576</memory>", "<memory unit='KiB'>8589934592</memory>")
        .replace("<memory unit='KiB'>2097152</memory>", "<memory unit='KiB'>17179869184</memory>");
    assert_eq!(*libvirt::parse(&caps).expect("reads").arch(), Arch::X86_64);
    let power = caps.replacen("<arch>x86_64</arch>", "<arch>ppc64le</arch>", 1);
    assert_ne!(power, caps, "the fixture names its arch");
    assert_eq!(*libvirt::parse(&power).expect("reads").arch(), Arch::Ppc64le);
}

#[test]
fn the_synthetic_grammar_takes_an_optional_arch() {
    let plain = synthetic::parse("2 sockets x 4 cores").expect("reads");
    assert_eq!(*plain.arch(), Arch::X86_64);
    let power = synthetic::parse("2 sockets x 10 cores x 4 threads, arch ppc64le").expect("reads");
    assert_eq!(*power.arch(), Arch::Ppc64le);
    let arm = synthetic::parse("arch: aarch64, 1 socket x 8 cores").expect("reads");
    assert_eq!(*arm.arch(), Arch::Aarch64);
    match synthetic::parse("2 sockets x 4 cores, arch sparc") {
        Err(ParseError::BadValue { field, expected, found }) => {
            assert_eq!((field.as_str(), found.as_str()), ("arch", "sparc"));
            assert!(expected.contains("ppc64le"), "{expected}");
        }
        other => panic!("expected a refusal naming arch, got {other:?}"),
    }
    assert!(synthetic::parse("2 sockets x 4 cores, arch ppc64le, arch aarch64").is_err());
}

#[test]
fn topology_json_keeps_the_arch_and_reads_none_as_x86() {
    let power = hwloc::parse(&text("mpibind/coral-lassen.xml")).expect("reads");
    let written = json::to_string(&power);
    assert!(written.contains("\"arch\": \"ppc64le\""), "{}", &written[..400.min(written.len())]);
    assert_eq!(*json::parse(&written).expect("reads back").arch(), Arch::Ppc64le);
    let x86 = json::to_string(&synthetic::parse("2 sockets x 4 cores").expect("reads"));
    assert!(!x86.contains("\"arch\""), "x86-64 is the default and left out");
    assert_eq!(*json::parse(&x86).expect("reads back").arch(), Arch::X86_64);
}
