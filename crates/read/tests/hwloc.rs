//! The hwloc XML reader on real exports (hwloc's own test suite and
//! LLNL's mpibind node dumps): distances in both formats, CPU-less memory
//! nodes, huge pages, devices and their nodes, offline CPUs; errors that
//! name what is wrong; and property tests that no input makes it panic.

use numaplace_read::hwloc::parse;
use numaplace_read::ParseError;
use numaplace_topo::{CpuSet, DeviceKind, NodeId, Topology, Warning};
use proptest::prelude::*;
use std::path::PathBuf;

fn fixture_text(rel: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/topologies").join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn read(rel: &str) -> Topology {
    parse(&fixture_text(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn cpus(list: &str) -> CpuSet {
    list.parse().expect("valid CPU list")
}

fn node(t: &Topology, id: u32) -> &numaplace_topo::Node {
    let i = t.node_index(NodeId(id)).unwrap_or_else(|| panic!("node{id} missing"));
    &t.nodes()[i]
}

const GIB: u64 = 1 << 30;

#[test]
fn sgi_uv2000_v2_distances_keep_the_firmware_slit() {
    // 24 nodes of an SGI UV 2000: pairs of sockets on a blade (50), then
    // two NUMAlink hop classes (65, 79).
    let t = read("hwloc/xml/192em64t-24n8c2t.xml");
    assert!(t.distances_known());
    let rows = t.distance_rows();
    assert_eq!(rows.len(), 24);
    assert_eq!(
        rows[0],
        [10, 50, 65, 65, 65, 65, 65, 65, 65, 65, 79, 79, 65, 65, 79, 79, 65, 65, 79, 79, 79, 79, 79, 79]
    );
    assert_eq!(rows[5][4], 50);
    assert_eq!(rows[2][8], 79);
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row[i], 10);
        for (j, &d) in row.iter().enumerate() {
            assert_eq!(d, rows[j][i], "SLIT of this machine is symmetric");
        }
    }
    // The name lives in a topology-level <info> in the 3.0 format.
    assert_eq!(t.name(), Some("uv2000"));
    assert_eq!(t.parts().cpu_model.as_deref(), Some("Intel(R) Xeon(R) CPU E5-4640 0 @ 2.40GHz"));
    assert_eq!(node(&t, 0).cpus, cpus("0-7,192-199"));
    // One 20 MiB L3 per socket, shared by its 8 cores and 16 threads.
    assert_eq!(t.caches().len(), 24);
    assert!(t.caches().iter().all(|c| c.level == 3 && c.size_bytes == Some(20 << 20) && c.cpus.len() == 16));
}

#[test]
fn v1_float_distances_become_slit_values_and_match_the_v2_export() {
    // EPYC 7401 x2 (NPS4): v1 writes latency_base=10 and 1.0/1.6/3.2.
    let v1 = read("mpibind/epyc-corona-hwloc1.xml");
    let rows = v1.distance_rows();
    assert!(v1.distances_known());
    assert_eq!(rows[0], [10, 16, 16, 16, 32, 32, 32, 32]);
    assert_eq!(rows[7], [32, 32, 32, 32, 16, 16, 16, 10]);
    // The same machine exported by hwloc 2 agrees on everything placement
    // uses.
    let v2 = read("mpibind/epyc-corona.xml");
    assert_eq!(v1.distance_rows(), v2.distance_rows());
    let shape = |t: &Topology| t.nodes().iter().map(|n| (n.id, n.cpus.clone(), n.memory_bytes)).collect::<Vec<_>>();
    assert_eq!(shape(&v1), shape(&v2));
    assert_eq!(v1.cores(), v2.cores());
}

#[test]
fn v1_gpu_memory_nodes_are_cpuless_and_far() {
    // POWER9 + V100 (coral-butte): DRAM nodes 0 and 8, GPU memory 252-255.
    let t = read("mpibind/coral-butte-hwloc1.xml");
    let ids: Vec<u32> = t.nodes().iter().map(|n| n.id.0).collect();
    assert_eq!(ids, [0, 8, 252, 253, 254, 255]);
    assert_eq!(t.distance_rows()[0], [10, 40, 80, 80, 80, 80]);
    for id in 252..=255 {
        assert!(node(&t, id).cpus.is_empty());
        assert!(t.warnings().contains(&Warning::CpulessNode(NodeId(id))));
    }
    assert_eq!(node(&t, 0).cpus, cpus("0-87"));
    assert_eq!(t.max_threads_per_core(), 4);
}

#[test]
fn knl_snc4_flat_mcdram_nodes_are_cpuless_with_their_kind() {
    let t = read("mpibind/knl-snc4-flat-hwloc1.xml");
    assert_eq!(t.nodes().len(), 8);
    for id in 4..8 {
        let n = node(&t, id);
        assert_eq!(n.kind.as_deref(), Some("MCDRAM"));
        assert!(n.cpus.is_empty());
        assert_eq!(n.memory_bytes, 4 * GIB);
        assert!(t.warnings().contains(&Warning::CpulessNode(NodeId(id))));
    }
    for id in 0..4 {
        assert_eq!(node(&t, id).kind, None, "DDR nodes have no kind");
    }
    assert_eq!(node(&t, 0).cpus, cpus("0-17,68-85,136-153,204-221"));
    assert_eq!(t.pu_count(), 272);
    // No L3 on KNL: the last level is the L2 shared by the 2 cores of a tile.
    assert_eq!(t.caches().len(), 34);
    assert!(t.caches().iter().all(|c| c.level == 2));
    // hwloc 1.x wrote no distances for this box.
    assert!(!t.distances_known());
    assert!(t.warnings().contains(&Warning::NoDistances));
}

#[test]
fn v2_hbm_beside_dram_leaves_the_cpus_to_dram() {
    // Both nodes of each cluster hang off the same parent in v2.
    let t = read("hwloc/xml/64intel64-heteromem.xml");
    for id in 0..4 {
        assert_eq!(node(&t, id).kind, None, "subtype DRAM is ordinary memory");
        assert_eq!(node(&t, id).cpus.len(), 16);
    }
    for id in 4..8 {
        assert_eq!(node(&t, id).kind.as_deref(), Some("HBM"));
        assert!(node(&t, id).cpus.is_empty());
        assert_eq!(node(&t, id).memory_bytes, 2 * GIB);
    }
}

#[test]
fn nodes_behind_memory_side_caches_keep_their_cpus() {
    // Cascade Lake in SNC2 with Optane in memory mode: each NUMANode sits
    // under a MemCache object, itself under the SNC group.
    let t = read("hwloc/xml/memorysidecaches.xml");
    assert_eq!(t.nodes().len(), 4);
    for n in t.nodes() {
        assert_eq!(n.cpus.len(), 20, "{}", n.id);
        assert_eq!(n.kind, None);
    }
    assert!(!t.warnings().iter().any(|w| matches!(w, Warning::CpulessNode(_))));
}

#[test]
fn v2_huge_pages_leave_out_the_base_page() {
    // AWS g4dn.metal: 5281 + 5280 2 MiB pages reserved, no 1 GiB pages.
    let t = read("mpibind/g4dnmetal.xml");
    let pools = |id| node(&t, id).hugepages.iter().map(|h| (h.size_bytes, h.total)).collect::<Vec<_>>();
    assert_eq!(pools(0), [(2 << 20, 5281), (GIB, 0)]);
    assert_eq!(pools(1), [(2 << 20, 5280), (GIB, 0)]);
    // POWER9 has a 64 KiB base page.
    let lassen = read("mpibind/coral-lassen.xml");
    let sizes: Vec<u64> = node(&lassen, 0).hugepages.iter().map(|h| h.size_bytes).collect();
    assert_eq!(sizes, [2 << 20, GIB]);
}

#[test]
fn gpus_and_nics_sit_on_the_node_of_their_socket() {
    let t = read("mpibind/g4dnmetal.xml");
    assert_eq!(t.name(), Some("gpu-st-g4dnmetal-1"));
    let gpus: Vec<_> = t.devices().iter().filter(|d| d.kind == DeviceKind::Gpu).collect();
    assert_eq!(gpus.len(), 8, "eight NVIDIA T4");
    assert!(gpus.iter().all(|d| d.vendor_device == Some((0x10de, 0x1eb8))));
    let on = |n: u32| gpus.iter().filter(|d| d.node == Some(NodeId(n))).count();
    assert_eq!((on(0), on(1)), (4, 4));
    let gpu0 = gpus.iter().find(|d| d.address == "0000:18:00.0").expect("first T4");
    assert_eq!(gpu0.name.as_deref(), Some("cuda0"));
    assert_eq!(gpu0.node, Some(NodeId(0)));
    let eth0 = t.devices().iter().find(|d| d.name.as_deref() == Some("eth0")).expect("ENA NIC");
    assert_eq!((eth0.kind, eth0.node), (DeviceKind::Nic, Some(NodeId(1))));
    assert!(t.devices().iter().any(|d| d.kind == DeviceKind::Nvme && d.name.as_deref() == Some("nvme0n1")));

    // DGX-2: sixteen V100s, eight behind each socket; NVSwitches and
    // bridges are left out.
    let dgx = read("hwloc/xml/nvidiaDGX2.xml");
    assert_eq!(dgx.devices().len(), 16);
    assert!(dgx.devices().iter().all(|d| d.kind == DeviceKind::Gpu));
    let on = |n: u32| dgx.devices().iter().filter(|d| d.node == Some(NodeId(n))).count();
    assert_eq!((on(0), on(1)), (8, 8));
}

#[test]
fn old_infiniband_class_counts_as_a_nic() {
    // QLogic HCA with PCI class 0c06 (InfiniBand as a serial bus), behind
    // the I/O hub of the second pair of sockets.
    let t = read("hwloc/linux/40intel64-2g2n4c+pcilocality.xml");
    let ib = t.devices().iter().find(|d| d.address == "0000:43:00.0").expect("IB HCA");
    assert_eq!(ib.kind, DeviceKind::Nic);
    assert_eq!(ib.name.as_deref(), Some("ib0"));
    assert_eq!(ib.node, Some(NodeId(1)));
}

#[test]
fn missing_pus_are_offline() {
    let t = read("hwloc/linux/16em64t-4s2c2t-offlines-xml.xml");
    assert_eq!(t.offline_cpus(), &cpus("2,5,13-14"));
    assert_eq!((t.core_count(), t.pu_count()), (7, 12));
    assert!(t.warnings().contains(&Warning::OfflineCpus(cpus("2,5,13-14"))));
    // SMT switched off on a 2x18-core Broadwell.
    let quartz = read("mpibind/cts1-quartz-smt1.xml");
    assert_eq!(quartz.offline_cpus(), &cpus("36-71"));
    assert_eq!(quartz.max_threads_per_core(), 1);
}

#[test]
fn every_core_of_a_real_file_has_its_package() {
    let t = read("mpibind/cascade-lake-ap-snl-hwloc1.xml");
    assert_eq!(t.package_count(), 4);
    assert!(t.cores().iter().all(|c| c.package.is_some() && c.cpus.len() == 2));
    for p in t.packages() {
        assert_eq!(p.cpus.len(), 48);
    }
}

const SMALL_V2: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE topology SYSTEM "hwloc2.dtd">
<topology version="2.0">
  <object type="Machine" os_index="0" cpuset="0x0000000f" complete_cpuset="0x0000000f">
    <object type="Package" os_index="0" cpuset="0x00000003">
      <object type="NUMANode" os_index="0" cpuset="0x00000003" local_memory="1073741824"/>
      <object type="Core" os_index="0"><object type="PU" os_index="0"/><object type="PU" os_index="1"/></object>
    </object>
    <object type="Package" os_index="1" cpuset="0x0000000c">
      <object type="NUMANode" os_index="1" cpuset="0x0000000c" local_memory="MEMORY"/>
      <object type="Core" os_index="0"><object type="PU" os_index="2"/><object type="PU" os_index="3"/></object>
    </object>
  </object>
  <distances2 type="NUMANode" nbobjs="2" kind="5" name="NUMALatency" indexing="os">
    <indexes length="4">0 1 </indexes>
    <u64values length="12">VALUES</u64values>
  </distances2>
</topology>
"#;

fn small(memory: &str, values: &str) -> String {
    SMALL_V2.replace("MEMORY", memory).replace("VALUES", values)
}

#[test]
fn a_hand_written_file_reads() {
    let t = parse(&small("2147483648", "10 21 21 10")).expect("valid file");
    assert_eq!(t.distance_rows(), [[10, 21], [21, 10]]);
    assert_eq!(node(&t, 1).memory_bytes, 2 * GIB);
    assert_eq!(node(&t, 1).cpus, cpus("2-3"));
    assert_eq!(t.cores().iter().map(|c| c.package).collect::<Vec<_>>(), [Some(0), Some(1)]);
}

#[test]
fn truncated_file_is_an_xml_error_with_its_line() {
    let text = fixture_text("hwloc/xml/16amd64-8n2c-cpusets.xml");
    let cut = &text[..text.len() / 2];
    match parse(cut) {
        Err(ParseError::Xml { line, .. }) => assert!(line > 10, "line {line}"),
        other => panic!("expected an XML error, got {other:?}"),
    }
}

#[test]
fn garbage_memory_size_names_the_node_and_attribute() {
    let err = parse(&small("abc", "10 21 21 10")).expect_err("local_memory=abc");
    match &err {
        ParseError::BadValue { field, found, .. } => {
            assert!(field.contains("object[type=NUMANode] local_memory"), "{field}");
            assert!(field.contains("line 10"), "{field}");
            assert_eq!(found, "abc");
        }
        other => panic!("expected BadValue, got {other:?}"),
    }
    assert!(err.to_string().contains("local_memory"));
}

#[test]
fn short_distance_matrices_are_refused() {
    let err = parse(&small("1073741824", "10 21 21")).expect_err("3 values for 2 nodes");
    assert!(
        matches!(&err, ParseError::BadValue { field, .. } if field.contains("distances2[name=NUMALatency] u64values")),
        "{err}"
    );
    // The same in a v1 file: one <latency> short.
    let v1 = fixture_text("mpibind/epyc-corona-hwloc1.xml");
    let short = v1.replacen("<latency value=\"1.000000\"/>", "", 1);
    let err = parse(&short).expect_err("63 latencies for 8 nodes");
    assert!(matches!(&err, ParseError::BadValue { field, .. } if field.contains("distances latency")), "{err}");
}

#[test]
fn other_bad_inputs_are_typed_errors() {
    let no_index = small("1", "10 21 21 10").replace(r#"<object type="PU" os_index="3"/>"#, r#"<object type="PU"/>"#);
    assert!(matches!(parse(&no_index), Err(ParseError::Missing(f)) if f.contains("object[type=PU] os_index")));
    let huge_cpu = small("1", "10 21 21 10").replace(r#"os_index="3""#, r#"os_index="4000000""#);
    assert!(matches!(parse(&huge_cpu), Err(ParseError::BadValue { .. })));
    let bad_type = small("1", "10 21 21 10").replace("\"Core\"", "\"Hexagon\"");
    assert!(matches!(parse(&bad_type), Err(ParseError::BadValue { field, .. }) if field.contains("type")));
    let self_distance = small("1", "12 21 21 10");
    assert!(matches!(parse(&self_distance), Err(ParseError::Model(_))));
    let unknown_node = small("1", "10 21 21 10").replace("0 1 </indexes>", "0 7 </indexes>");
    assert!(matches!(parse(&unknown_node), Err(ParseError::BadValue { field, .. }) if field.contains("indexes")));
    assert!(matches!(parse("<capabilities/>"), Err(ParseError::BadValue { .. })));
    assert!(matches!(parse("<topology/>"), Err(ParseError::Missing(_))));
}

#[test]
fn numbers_beyond_the_bounds_name_their_attribute() {
    let far_node = small("1073741824", "10 21 21 10")
        .replace(r#"<object type="NUMANode" os_index="1""#, r#"<object type="NUMANode" os_index="4096""#);
    let err = parse(&far_node).expect_err("node 4096").to_string();
    assert!(err.starts_with("object[type=NUMANode] os_index (line 10): expected a node number below 4096"), "{err}");
    // The pool of the issue: 6144 x 1 GiB pages on a 1 GiB node, which hwloc
    // never writes (its page counts come out of the node's memory).
    let pool = small("1073741824", "10 21 21 10").replace(
        r#"local_memory="1073741824"/>"#,
        r#"local_memory="1073741824"><page_type size="4096" count="262144"/><page_type size="1073741824" count="6144"/></object>"#,
    );
    let err = parse(&pool).expect_err("6 TiB of pages on 1 GiB").to_string();
    assert_eq!(err, "node0 has a pool of 6144 x 1 GiB huge pages (6 TiB), more than the node's 1 GiB of memory");
}

#[test]
fn a_deep_tree_over_a_high_pu_stops_at_the_set_budget() {
    // Each object's PU set is a bitmap up to its highest PU: 20000 nested
    // groups over PU 65535 (half a megabyte of XML) would take 160 MiB of
    // sets, and are refused before any is built.
    let depth = 20_000;
    let text = format!(
        r#"<topology version="2.0"><object type="Machine" os_index="0">{}<object type="PU" os_index="65535"/>{}</object></topology>"#,
        r#"<object type="Group">"#.repeat(depth),
        "</object>".repeat(depth)
    );
    let err = parse(&text).expect_err("over budget").to_string();
    assert!(err.starts_with("topology: expected an object tree whose PU sets fit in 128 MiB"), "{err}");
    // The same tree a hundred levels deep is an ordinary machine.
    let shallow = format!(
        r#"<topology version="2.0"><object type="Machine" os_index="0">{}<object type="PU" os_index="65535"/>{}</object></topology>"#,
        r#"<object type="Group">"#.repeat(100),
        "</object>".repeat(100)
    );
    assert_eq!(parse(&shallow).expect("reads").pu_count(), 1);
}

/// Small and mid-sized real files in both formats, for mutation tests.
const MUTATION_FILES: [&str; 6] = [
    "hwloc/linux/2i386-2c-nohugepage.xml",
    "hwloc/linux/32amd64-4s2n4c-cgroup2.xml",
    "hwloc/xml/16amd64-8n2c-cpusets.xml",
    "hwloc/xml/64intel64-heteromem.xml",
    "hwloc/history/28intel64-2p2g7c-CoDgroups.v1.xml",
    "mpibind/coral-butte-hwloc1.xml",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(text in any::<String>()) {
        let _ = parse(&text);
    }

    #[test]
    fn hwloc_shaped_text_never_panics(
        text in r#"<topology( version="[0-9.]{0,4}")?>(<object type="(Machine|Package|NUMANode|Core|PU|L3Cache|Cache|PCIDev|Group)"( os_index="[0-9a-fx-]{0,6}")?( cpuset="0x[0-9a-f,]{0,12}")?( local_memory="[0-9a-z]{0,5}")?>){0,6}(</object>){0,6}(<distances2 type="NUMANode" nbobjs="[0-9]{0,2}" indexing="(os|gp)"><indexes>[0-9 ]{0,8}</indexes><u64values>[0-9 ]{0,12}</u64values></distances2>)?</topology>"#
    ) {
        let _ = parse(&text);
    }

    #[test]
    fn mutated_real_files_never_panic(
        file in 0..MUTATION_FILES.len(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), prop::sample::select(b"<>\"=/,x0f9- abc\n".to_vec())), 1..8),
    ) {
        let mut bytes = fixture_text(MUTATION_FILES[file]).into_bytes();
        for (at, byte) in edits {
            let i = at.index(bytes.len());
            bytes[i] = byte;
        }
        let _ = parse(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn mutated_attribute_values_never_panic(
        file in 0..MUTATION_FILES.len(),
        which in any::<prop::sample::Index>(),
        value in r#"[0-9a-zA-Z,.x:\[\] -]{0,24}"#,
    ) {
        let text = fixture_text(MUTATION_FILES[file]);
        let starts: Vec<usize> = text.match_indices("=\"").map(|(i, _)| i + 2).collect();
        let start = starts[which.index(starts.len())];
        let end = start + text[start..].find('"').unwrap_or(0);
        let mutated = format!("{}{}{}", &text[..start], value, &text[end..]);
        let _ = parse(&mutated);
    }

    #[test]
    fn truncated_real_files_never_panic(file in 0..MUTATION_FILES.len(), at in any::<prop::sample::Index>()) {
        let text = fixture_text(MUTATION_FILES[file]);
        let mut cut = at.index(text.len());
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        prop_assert!(parse(&text[..cut]).is_err() || cut > text.len() - 20);
    }
}

/// hwloc puts each memory-only node under the group of the CPUs it is
/// local to: a KNL in SNC4 flat mode (v1 file) has MCDRAM node 4+k under
/// node k's group, and a v2 file with HBM subtypes has each HBM node
/// beside its DRAM node; both are read as local to that CPU node, with
/// their kind, though neither file has distances to tell.
#[test]
fn memory_only_nodes_keep_the_cpu_node_their_group_holds() {
    use numaplace_topo::{Locality, MemoryKind};
    let knl = read("mpibind/knl-snc4-flat-hwloc1.xml");
    for k in 0..4u32 {
        let i = knl.node_index(NodeId(4 + k)).expect("mcdram node");
        assert_eq!(knl.local_cpu_nodes(i), (vec![k as usize], Locality::Source), "node{}", 4 + k);
        assert_eq!(knl.memory_kind(i), MemoryKind::Hbm);
        assert_eq!(knl.memory_kind(k as usize), MemoryKind::Dram);
    }
    let hetero = read("hwloc/xml/64intel64-heteromem.xml");
    let local = |id: u32| hetero.local_cpu_nodes(hetero.node_index(NodeId(id)).expect("node")).0;
    assert_eq!([local(4), local(5), local(6), local(7)], [vec![1], vec![2], vec![3], vec![0]]);
    // POWER9 GPU memory hangs off the machine in hwloc 1.x: no group says,
    // so the nearest CPU nodes by distance.
    let lassen = read("mpibind/coral-lassen-hwloc1.xml");
    let i = lassen.node_index(NodeId(252)).expect("gpu memory node");
    assert_eq!(lassen.local_cpu_nodes(i).1, Locality::Distance);
}

/// Issue 48: a node whose kind the source does not name. No public hwloc
/// export or sysfs dump of a Xeon Max in flat mode could be found, so the
/// nearest real data stands in: LLNL's KNL in SNC-4 flat mode, four DRAM
/// quadrants each with a CPU-less 4 GiB MCDRAM node, with hwloc's `Type`
/// infos taken out (as a sysfs tree, and the Xeon Max export of the issue,
/// show them: no kind). The CPU model carries HBM, so each CPU-less node
/// reads as HBM, with a warning naming the evidence; with the infos in
/// place nothing is guessed.
#[test]
fn cpuless_nodes_of_a_cpu_that_carries_hbm_read_as_hbm() {
    let text = fixture_text("mpibind/knl-snc4-flat-hwloc1.xml");
    let named = parse(&text).expect("reads");
    let hbm =
        |t: &Topology| (0..t.nodes().len()).filter(|&i| t.memory_kind(i) == numaplace_topo::MemoryKind::Hbm).count();
    assert_eq!(hbm(&named), 4);
    assert!(named.warnings().iter().all(|w| w.code() != "hbm-found"), "{:?}", named.warnings());
    let unnamed = text.replace(r#"<info name="Type" value="MCDRAM"/>"#, "");
    assert_ne!(unnamed, text);
    let t = parse(&unnamed).expect("reads");
    assert_eq!(hbm(&t), 4, "{:?}", t.nodes());
    let found: Vec<&Warning> = t.warnings().iter().filter(|w| w.code() == "hbm-found").collect();
    assert_eq!(found.len(), 4);
    assert!(found[0].to_string().contains("Xeon Phi(TM) CPU 7250"), "{}", found[0]);
    // Another CPU model: the nodes stay DRAM, as the source says.
    let other = unnamed.replace("Xeon Phi(TM) CPU 7250", "Xeon(R) Platinum 8480+");
    assert_eq!(hbm(&parse(&other).expect("reads")), 0);
}
