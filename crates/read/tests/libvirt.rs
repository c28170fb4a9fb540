//! The libvirt capabilities reader on libvirt's own test data (a 2-socket
//! Zen2 host and an HMAT host with a CPU-less cell) and on small documents
//! that exercise units, old libvirt output and every error.

use numaplace_read::{libvirt, ParseError};
use numaplace_topo::{CpuSet, ModelError, NodeId, Topology, Warning};
use proptest::prelude::*;

fn fixture(name: &str) -> String {
    let path = format!("{}/../../fixtures/topologies/libvirt/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// libvirt's test harness makes up 1 and 2 GiB cells and then gives them
/// terabytes of huge page pools (6144 x 1 GiB on cell 0), which no kernel
/// reports and the model refuses. Tests about the rest of a file read it
/// with cells of 8 and 16 TiB, room for every pool.
fn with_room(text: &str) -> String {
    text.replace("<memory unit='KiB'>1048576</memory>", "<memory unit='KiB'>8589934592</memory>")
        .replace("<memory unit='KiB'>2097152</memory>", "<memory unit='KiB'>17179869184</memory>")
}

fn cpus(list: &str) -> CpuSet {
    CpuSet::parse_list(list).expect("test cpu list")
}

/// A two-cell document; `cell1` replaces the second cell's body.
fn two_cells(cell0: &str, cell1: &str) -> String {
    format!(
        "<capabilities><host><cpu><arch>x86_64</arch><model>Skylake-Server</model></cpu>\
         <topology><cells num='2'><cell id='0'>{cell0}</cell><cell id='1'>{cell1}</cell>\
         </cells></topology></host></capabilities>"
    )
}

#[test]
fn zen2_host_has_its_sockets_ccds_and_smt_pairs() {
    let t = libvirt::parse(&with_room(&fixture("vircaps-x86_64-resctrl-amd.xml"))).expect("parses");
    assert_eq!((t.package_count(), t.nodes().len(), t.core_count(), t.pu_count()), (2, 2, 32, 64));
    // Linux numbers second threads after all first threads: 0 and 32 share a core.
    let core0 = &t.cores()[0];
    assert_eq!(core0.cpus, cpus("0,32"));
    assert_eq!(core0.package, Some(0));
    assert_eq!(t.max_threads_per_core(), 2);
    assert_eq!(t.nodes()[0].cpus, cpus("0-15,32-47"));
    assert_eq!(t.nodes()[1].cpus, cpus("16-31,48-63"));
    assert_eq!(t.package_of_node(1), Some(1));
    assert_eq!(t.die_count(), 8, "four CCDs per socket");
    assert_eq!(t.nodes()[0].memory_bytes, 8 << 40);
    assert_eq!(t.nodes()[1].memory_bytes, 16 << 40);
    let pools: Vec<(u64, u64)> = t.nodes()[0].hugepages.iter().map(|h| (h.size_bytes, h.total)).collect();
    assert_eq!(pools, vec![(2 << 20, 4096), (1 << 30, 6144)], "the 4 KiB base page is no pool");
    assert_eq!(t.caches().len(), 8, "one L3 per CCX");
    assert!(t.caches().iter().all(|c| c.level == 3 && c.size_bytes == Some(16 << 20) && c.cpus.len() == 8));
    assert!(t.caches().iter().any(|c| c.cpus == cpus("12-15,44-47")));
    assert!(!t.distances_known());
    assert!(t.warnings().contains(&Warning::NoDistances));
}

#[test]
fn hmat_host_keeps_its_cpuless_memory_cell() {
    let t = libvirt::parse(&with_room(&fixture("vircaps-x86_64-hmat.xml"))).expect("parses");
    // libvirt's harness gives every CPU its own socket_id: 24 one-core packages.
    assert_eq!((t.package_count(), t.nodes().len(), t.core_count(), t.pu_count()), (24, 2, 24, 24));
    assert_eq!(t.nodes()[1].id, NodeId(1));
    assert!(t.nodes()[1].cpus.is_empty());
    assert_eq!(t.nodes()[1].memory_bytes, 16 << 40);
    assert!(t.warnings().contains(&Warning::CpulessNode(NodeId(1))));
    assert_eq!(t.die_count(), 0, "one die per package is not recorded");
    assert_eq!(t.caches().len(), 24);
}

#[test]
fn distances_units_and_model_are_read() {
    let cell0 = "<memory unit='GiB'>64</memory><pages unit='KiB' size='4'>100</pages>\
                 <pages unit='MiB' size='2'>512</pages>\
                 <distances><sibling id='0' value='10'/><sibling id='1' value='21'/></distances>\
                 <cpus num='2'><cpu id='0' socket_id='0' die_id='0' core_id='0' siblings='0-1'/>\
                 <cpu id='1' socket_id='0' die_id='0' core_id='0' siblings='0-1'/></cpus>";
    let cell1 = "<memory unit='bytes'>1073741824</memory>\
                 <distances><sibling id='1' value='10'/><sibling id='0' value='21'/></distances>\
                 <cpus num='2'><cpu id='2' socket_id='1' die_id='0' core_id='0' siblings='2-3'/>\
                 <cpu id='3' socket_id='1' die_id='0' core_id='0' siblings='2-3'/></cpus>";
    let t = libvirt::parse(&two_cells(cell0, cell1)).expect("parses");
    assert_eq!(t.parts().cpu_model.as_deref(), Some("Skylake-Server"));
    assert_eq!(t.distance_rows(), &[vec![10, 21], vec![21, 10]]);
    assert_eq!(t.nodes()[0].memory_bytes, 64 << 30);
    assert_eq!(t.nodes()[1].memory_bytes, 1 << 30);
    assert_eq!(t.nodes()[0].hugepages.len(), 1);
    assert_eq!(t.nodes()[0].hugepages[0].size_bytes, 2 << 20);
    assert_eq!(t.nodes()[0].hugepages[0].total, 512);
    assert!(t.warnings().is_empty(), "{:?}", t.warnings());
}

#[test]
fn pools_larger_than_their_cell_are_refused() {
    // libvirt's own test file as its harness wrote it: 4096 x 2 MiB and
    // 6144 x 1 GiB pages on a 1 GiB cell.
    let err = libvirt::parse(&fixture("vircaps-x86_64-resctrl-amd.xml")).expect_err("pools beyond memory");
    assert!(matches!(err, ParseError::Model(ModelError::HugePagesBeyondMemory { node: NodeId(0), .. })), "{err:?}");
    // The case of the issue alone: 6144 x 1 GiB on a 1 GiB cell, which a
    // 4 TiB VM was then planned onto.
    let cell0 = "<memory unit='KiB'>1048576</memory><pages unit='KiB' size='4'>262144</pages>\
                 <pages unit='KiB' size='1048576'>6144</pages>\
                 <cpus num='1'><cpu id='0' socket_id='0' core_id='0' siblings='0'/></cpus>";
    let cell1 = "<memory unit='KiB'>1048576</memory>\
                 <cpus num='1'><cpu id='1' socket_id='0' core_id='1' siblings='1'/></cpus>";
    let err = libvirt::parse(&two_cells(cell0, cell1)).expect_err("6 TiB of pages on 1 GiB");
    assert_eq!(
        err.to_string(),
        "node0 has a pool of 6144 x 1 GiB huge pages (6 TiB), more than the node's 1 GiB of memory"
    );
    // The pool that fits is read, base page left out: up to the last byte.
    let fits = cell0.replace(">6144<", ">1<");
    let t = libvirt::parse(&two_cells(&fits, cell1)).expect("1 x 1 GiB on 1 GiB fits");
    assert_eq!(t.nodes()[0].hugepages.iter().map(|h| (h.size_bytes, h.total)).collect::<Vec<_>>(), [(1 << 30, 1)]);
}

#[test]
fn numbers_beyond_the_bounds_name_their_place() {
    // Node numbers stop at 4096 (cells are nodes), CPU numbers at 65536.
    let err = libvirt::parse(&two_cells("", "").replace("<cell id='1'>", "<cell id='4096'>")).expect_err("cell id");
    assert_eq!(err.to_string(), "cell[2]/@id: expected a node number below 4096, found `4096`");
    let cell = "<cpus num='1'><cpu id='4000000000' socket_id='0' core_id='0'/></cpus>";
    let err = libvirt::parse(&two_cells(cell, "")).expect_err("cpu id");
    assert!(err.to_string().starts_with("cell[id=0]/cpus/cpu[id=4000000000]/@id: expected a CPU number"), "{err}");
    let cell = "<cpus num='1'><cpu id='0' siblings='0,65536'/></cpus>";
    let err = libvirt::parse(&two_cells(cell, "")).expect_err("sibling");
    assert!(matches!(err, ParseError::CpuSet { ref field, .. } if field.ends_with("/@siblings")), "{err:?}");
}

#[test]
fn repeated_sibling_lists_stop_at_the_budget() {
    // Each `siblings='0,65535'` costs an 8 KiB bitmap; twenty thousand of
    // them (a 600 KB file) would pass 128 MiB, and are refused on the way
    // rather than built. The CPUs are distinct, so nothing else objects.
    let cpus: String =
        (0..20_000).map(|i| format!("<cpu id='{i}' siblings='{i},65535'/>")).collect::<Vec<_>>().concat();
    let doc = two_cells(&format!("<cpus num='20000'>{cpus}</cpus>"), "");
    let err = libvirt::parse(&doc).expect_err("over budget");
    assert!(err.to_string().contains("@siblings: expected sibling lists that fit in 128 MiB"), "{err}");
}

#[test]
fn old_libvirt_without_topology_attributes_gives_one_pu_cores() {
    let cell = |ids: [u32; 2]| {
        format!("<memory unit='KiB'>1024</memory><cpus num='2'><cpu id='{}'/><cpu id='{}'/></cpus>", ids[0], ids[1])
    };
    let t = libvirt::parse(&two_cells(&cell([0, 1]), &cell([2, 3]))).expect("parses");
    assert_eq!((t.package_count(), t.core_count(), t.pu_count()), (0, 4, 4));
    assert!(t.warnings().contains(&Warning::NoCoreInfo));
    assert!(t.warnings().contains(&Warning::NoDistances));
    // A host CPU topology of one thread per core settles it.
    let doc = two_cells(&cell([0, 1]), &cell([2, 3]))
        .replace("<arch>x86_64</arch>", "<arch>x86_64</arch><topology sockets='1' dies='1' cores='2' threads='1'/>");
    let t = libvirt::parse(&doc).expect("parses");
    assert!(!t.warnings().contains(&Warning::NoCoreInfo), "{:?}", t.warnings());
}

#[test]
fn sibling_lists_alone_still_pair_threads() {
    let cell0 = "<cpus num='2'><cpu id='0' siblings='0,2'/><cpu id='2' siblings='0,2'/></cpus>";
    let cell1 = "<cpus num='2'><cpu id='1' siblings='1,3'/><cpu id='3' siblings='1,3'/></cpus>";
    let t = libvirt::parse(&two_cells(cell0, cell1)).expect("parses");
    assert_eq!(t.core_count(), 2);
    assert_eq!(t.cores()[0].cpus, cpus("0,2"));
    assert!(t.warnings().contains(&Warning::NoMemoryInfo));
}

#[test]
fn siblings_that_contradict_core_ids_are_reported() {
    let cell0 = "<cpus num='2'><cpu id='0' socket_id='0' core_id='0' siblings='0-1'/>\
                 <cpu id='1' socket_id='0' core_id='1' siblings='0-1'/></cpus>";
    let t = libvirt::parse(&two_cells(cell0, "<memory>1</memory>")).expect("parses");
    assert_eq!(t.core_count(), 2, "core ids win");
    assert!(t.warnings().contains(&Warning::InconsistentSiblings(cpus("0-1"))));
}

#[test]
fn malformed_xml_reports_line_and_column() {
    let err = libvirt::parse("<capabilities>\n  <host>\n    <cpu></host>").expect_err("malformed");
    match err {
        ParseError::Xml { line, column, .. } => assert_eq!((line, column), (3, 10), "where `</host>` closes `<cpu>`"),
        other => panic!("expected an XML error, got {other:?}"),
    }
}

#[test]
fn memory_of_lots_names_the_cell() {
    let err = libvirt::parse(&two_cells("", "<memory unit='KiB'>lots</memory>")).expect_err("bad memory");
    match err {
        ParseError::BadValue { field, found, .. } => {
            assert_eq!(field, "cell[id=1]/memory");
            assert_eq!(found, "lots");
        }
        other => panic!("expected BadValue, got {other:?}"),
    }
    let err = libvirt::parse(&two_cells("", "<memory unit='EiB'>4</memory>")).expect_err("too big");
    assert!(err.to_string().contains("cell[id=1]/memory"), "{err}");
    let err = libvirt::parse(&two_cells("", "<memory unit='parsecs'>1</memory>")).expect_err("bad unit");
    assert!(err.to_string().contains("cell[id=1]/memory"), "{err}");
}

#[test]
fn short_distance_row_is_refused() {
    let cell0 = "<distances><sibling id='0' value='10'/><sibling id='1' value='20'/></distances>";
    let cell1 = "<distances><sibling id='1' value='10'/></distances>";
    let err = libvirt::parse(&two_cells(cell0, cell1)).expect_err("short row");
    assert!(
        matches!(err, ParseError::Model(ModelError::DistanceRowLength { node: NodeId(1), len: 1, expected: 2 })),
        "{err:?}"
    );
    let err = libvirt::parse(&two_cells(cell0, "")).expect_err("missing row");
    assert!(matches!(err, ParseError::Missing(ref f) if f == "cell[id=1]/distances"), "{err:?}");
}

#[test]
fn cpu_in_two_cells_is_refused() {
    let cell = "<cpus num='1'><cpu id='5' socket_id='0' core_id='0' siblings='5'/></cpus>";
    let err = libvirt::parse(&two_cells(cell, cell)).expect_err("cpu twice");
    assert!(
        matches!(err, ParseError::Model(ModelError::CpuInTwoNodes { cpu: 5, first: NodeId(0), second: NodeId(1) })),
        "{err:?}"
    );
}

#[test]
fn documents_without_cells_are_refused() {
    let err = libvirt::parse("<capabilities><host><cpu/></host></capabilities>").expect_err("no cells");
    assert!(matches!(err, ParseError::Missing(ref f) if f == "host/topology/cells"), "{err:?}");
    let err = libvirt::parse("<domain/>").expect_err("not caps");
    assert!(matches!(err, ParseError::BadValue { .. }), "{err:?}");
}

fn facts(t: &Topology) -> (usize, usize, usize, usize) {
    (t.package_count(), t.nodes().len(), t.core_count(), t.pu_count())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(text in ".{0,300}") {
        let _ = libvirt::parse(&text);
    }

    /// Cutting or corrupting the real file yields a topology or an error,
    /// never a panic.
    #[test]
    fn damaged_fixture_never_panics(cut in 0usize..12400, byte in 0usize..12400, with in "[-0-9a-z<>/='\" ]") {
        let text = with_room(&fixture("vircaps-x86_64-resctrl-amd.xml"));
        let cut = cut.min(text.len());
        let _ = libvirt::parse(text.get(..cut).unwrap_or(""));
        let at = byte.min(text.len().saturating_sub(1));
        if text.is_char_boundary(at) && text.is_char_boundary(at + 1) {
            let damaged = format!("{}{}{}", &text[..at], with, &text[at + 1..]);
            if let Ok(t) = libvirt::parse(&damaged) {
                prop_assert!(facts(&t).3 <= 64);
            }
        }
    }
}
