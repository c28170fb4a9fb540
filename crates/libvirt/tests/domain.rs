//! The domain reader and `held`, on their own: what a domain holds comes
//! back with the line of each setting, a domain numaplace wrote reads
//! back as what was planned, and no domain text (however large its
//! numbers, however mangled) panics the reader, `held` or `host_state`.

use numaplace_libvirt::domain::{self, domain_xml, DomainError, LibvirtOptions};
use numaplace_libvirt::{held, host_state};
use numaplace_plan::{plan, HostState, Request, Reservations};
use numaplace_topo::Topology;
use proptest::prelude::*;

fn host() -> Topology {
    numaplace_read::read_source("synthetic:2 sockets x 12 cores x 2 threads, 128GiB per node, hugepages 2MiB:4096")
        .unwrap_or_else(|e| panic!("{e}"))
}

fn fixture(name: &str) -> String {
    let path = format!("{}/../lint/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn a_domain_reads_into_what_it_holds_with_the_line_of_each_setting() {
    let d = domain::read("partial-pinning.xml", &fixture("partial-pinning.xml")).expect("reads");
    assert_eq!(d.name, "db-partial");
    assert_eq!((d.vcpus, d.vcpus_at), (16, 11));
    assert_eq!((d.memory_bytes, d.memory_at), (64 << 30, 9));
    let pins: Vec<(u32, String, u32)> = d.pins.iter().map(|p| (p.vcpu, p.cpus.to_list(), p.at)).collect();
    assert_eq!(pins[0], (0, "0".to_string(), 13));
    assert_eq!(pins[7], (7, "7".to_string(), 20));
    assert!(!d.dedicated(), "8 of 16 vCPUs pinned");
    let shape = d.shape.as_ref().expect("topology");
    assert_eq!((shape.sockets, shape.cores, shape.threads, shape.at), (2, 8, 1, 35));
    let cells: Vec<(u32, String, u32)> = d.cells.iter().map(|c| (c.id, c.vcpus.to_list(), c.at)).collect();
    assert_eq!(cells, [(0, "0-7".to_string(), 37), (1, "8-15".to_string(), 38)]);
    assert!(!d.managed);
}

#[test]
fn a_domain_numaplace_wrote_reads_back_as_planned_and_is_held_on_its_cpus() {
    let host = host();
    let decision = plan(&host, &HostState::new(&host), &Request::new("db", 8, 16 << 30)).expect("placed");
    let p = decision.placement.as_ref();
    let xml = domain_xml(p, &LibvirtOptions::default().for_host(&host));
    let d = domain::read("db.xml", &xml).expect("reads");
    assert!(d.managed, "numaplace's mark");
    assert!(d.dedicated());
    assert_eq!(d.vcpus as usize, p.vcpus.len());
    let (h, warnings) = held(&d, "db.xml", &host);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert!(h.pinned && h.managed);
    assert_eq!(h.placement.cpuset, p.cpuset);
    assert_eq!(h.placement.memory, p.memory);
}

#[test]
fn what_is_not_a_domain_is_refused_naming_the_line() {
    let err = domain::read("c.xml", "<capabilities/>").expect_err("not a domain");
    assert!(matches!(err, DomainError::NotADomain { line: 1, .. }), "{err}");
    let err = domain::read("b.xml", "<domain>\n  <vcpu>four</vcpu>\n  <memory>1</memory>\n</domain>\n")
        .expect_err("a bad count");
    assert!(matches!(err, DomainError::BadValue { line: 2, .. }), "{err}");
    // Without `<memory>` a domain needs guest cells to give it (libvirt's
    // rule); without either it has no size.
    assert_eq!(
        domain::read("m.xml", "<domain><vcpu>1</vcpu></domain>"),
        Err(DomainError::Missing("<memory> (or guest NUMA cells giving it)"))
    );
}

/// Moved from lint's fuzz tests with `held`.
#[test]
fn a_domain_of_huge_numbers_is_held_without_panic_or_overflow() {
    let host = host();
    let xml = "<domain><name>huge</name><memory unit='EiB'>15</memory><currentMemory unit='EiB'>15</currentMemory>\
        <vcpu cpuset='0-65535'>16384</vcpu>\
        <cputune><vcpupin vcpu='0' cpuset='65535'/><vcpupin vcpu='16383' cpuset='47'/><emulatorpin cpuset='0-65535'/></cputune>\
        <numatune><memory mode='strict' nodeset='0-1023'/><memnode cellid='0' mode='preferred' nodeset='1'/></numatune>\
        <memoryBacking><hugepages><page size='1' unit='b'/></hugepages></memoryBacking>\
        <cpu><numa><cell id='0' cpus='0-8191' memory='15' unit='EiB'/><cell id='1' cpus='8192-16383' memory='15' unit='EiB'/></numa></cpu></domain>";
    let d = domain::read("huge.xml", xml).expect("reads");
    let (h, warnings) = held(&d, "huge.xml", &host);
    assert!(warnings.iter().any(|w| w.to_string().contains("CPUs 48-65535")), "{warnings:?}");
    let state = host_state(&host, Reservations::default(), vec![h]).expect("state");
    // Far more memory than the host has: counted as what was left, said.
    assert!(state.warnings.iter().any(|w| w.to_string().contains("overcommitted")), "{:?}", state.warnings);
}

/// Reads, holds twice (the second copy collides with the first) and
/// records; only panics matter.
fn exercise(text: &str) {
    let host = host();
    if let Ok(d) = domain::read("f.xml", text) {
        let (h, _) = held(&d, "f.xml", &host);
        let mut again = h.clone();
        again.placement.vm.push_str("-again");
        let _ = host_state(&host, Reservations::default(), vec![h, again]);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,400}") {
        exercise(&text);
    }

    #[test]
    fn mutated_domains_never_panic(
        which in prop::sample::select(vec!["partial-pinning.xml", "hugepages-1g.xml", "device-remote.xml", "hotadd-16vcpu-200g.xml"]),
        edits in prop::collection::vec((any::<prop::sample::Index>(), 0u8..3, "[0-9<>='\"/ a-z\\-,^]{0,4}"), 1..6),
    ) {
        let mut text = fixture(which);
        for (at, op, piece) in edits {
            if text.is_empty() { break; }
            let mut pos = at.index(text.len());
            while !text.is_char_boundary(pos) { pos -= 1; }
            match op {
                0 => text.insert_str(pos, &piece),
                1 => { let end = (pos + piece.len().max(1)).min(text.len()); if text.is_char_boundary(end) { text.replace_range(pos..end, ""); } }
                _ => { let end = (pos + piece.len()).min(text.len()); if text.is_char_boundary(end) { text.replace_range(pos..end, &piece); } }
            }
        }
        exercise(&text);
    }
}
