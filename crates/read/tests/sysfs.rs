//! The sysfs reader on the live host, on captured real machines (as
//! tarballs and extracted to a directory), on small hand-built trees that
//! each break one rule, and on mutated or random input.
//!
//! Expected values come from hwloc's own expected outputs for the same
//! captures (`tests/hwloc/linux/*.console` in hwloc's repository).

use numaplace_read::sysfs::{read_tree, DirTree, MemTree, Tree};
use numaplace_read::{read_live, ParseError};
use numaplace_topo::{CpuSet, DeviceKind, NodeId, Topology, Warning};
use proptest::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/topologies/hwloc").join(name)
}

fn load(name: &str) -> MemTree {
    MemTree::from_tarball_file(&fixture(name)).expect("fixture loads")
}

fn read(name: &str) -> Topology {
    read_tree(&load(name)).expect("fixture reads")
}

fn cpus(list: &str) -> CpuSet {
    list.parse().expect("valid CPU list")
}

// ---------------------------------------------------------------- live host

#[test]
fn the_live_host_reads() {
    let topo = read_live().expect("this machine's /sys reads");
    assert!(!topo.nodes().is_empty());
    assert!(topo.pu_count() >= 1);
    assert!(topo.core_count() >= 1);
    assert!(topo.total_memory() > 0, "a running machine has memory");
}

// ------------------------------------------------------- captured machines

/// Unpacks a tarball into a fresh directory under the temp dir and returns
/// the tree's root (the tarball's single top directory).
fn extract(name: &str) -> PathBuf {
    let flat = name.replace('/', "_");
    let dest = std::env::temp_dir().join(format!("numaplace-sysfs-test-{}-{flat}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dest);
    std::fs::create_dir_all(&dest).expect("temp dir");
    let file = std::fs::File::open(fixture(name)).expect("fixture");
    let mut archive = tar::Archive::new(bzip2::read::MultiBzDecoder::new(file));
    archive.unpack(&dest).expect("unpack");
    let top: Vec<PathBuf> = std::fs::read_dir(&dest).expect("list").map(|e| e.expect("entry").path()).collect();
    assert_eq!(top.len(), 1, "one top directory");
    top.into_iter().next().expect("top")
}

#[test]
fn a_directory_and_its_tarball_read_the_same() {
    let name = "linux/16em64t-4s2c2t-offlines.tar.bz2";
    let root = extract(name);
    let from_dir = read_tree(&DirTree::new(&root));
    let _ = std::fs::remove_dir_all(root.parent().unwrap_or(&root));
    assert_eq!(from_dir.expect("directory reads"), read(name));
}

#[test]
fn offline_cpus_are_known_but_not_used() {
    // hwloc: 12 PUs in 7 cores; cpu2, cpu5, cpu13 and cpu14 have online=0.
    let topo = read("linux/16em64t-4s2c2t-offlines.tar.bz2");
    assert_eq!(topo.offline_cpus(), &cpus("2,5,13-14"));
    assert_eq!((topo.pu_count(), topo.core_count(), topo.package_count()), (12, 7, 4));
    assert!(topo.pu(5).is_some_and(|p| !p.online && p.core.is_none()));
    assert!(topo.warnings().contains(&Warning::OfflineCpus(cpus("2,5,13-14"))));
    assert!(!topo.online_cpus().contains(13));
}

#[test]
fn sparse_nodes_keep_their_distances() {
    // Node numbers 0,1,2,33,34,45,72,73: rows follow the node order.
    let topo = read("linux/48amd64-4pa2n6c-sparse.tar.bz2");
    let ids: Vec<u32> = topo.nodes().iter().map(|n| n.id.0).collect();
    assert_eq!(ids, [0, 1, 2, 33, 34, 45, 72, 73]);
    assert!(topo.distances_known());
    assert_eq!(topo.distance_rows()[0], [10, 16, 16, 22, 16, 22, 16, 22]);
    let n33 = topo.node_index(NodeId(33)).expect("node33");
    assert_eq!(topo.distance(n33, n33), 10);
    assert_eq!(topo.nodes()[n33].cpus, cpus("18-23"));
}

#[test]
fn huge_pages_are_read_per_node_and_for_the_machine() {
    let topo = read("linux/16amd64-4n4c-cgroup-distance-merge.tar.bz2");
    for node in topo.nodes() {
        let pools: Vec<(u64, u64, Option<u64>)> =
            node.hugepages.iter().map(|h| (h.size_bytes, h.total, h.free)).collect();
        assert_eq!(pools, [(2 << 20, 512, Some(512))], "{}", node.id);
    }
    // No node directories: the pools come from /sys/kernel/mm/hugepages.
    let topo = read("linux/2i386-2t-hugepagesizecount.tar.bz2");
    let node = &topo.nodes()[0];
    let sizes: Vec<(u64, u64)> = node.hugepages.iter().map(|h| (h.size_bytes, h.total)).collect();
    assert_eq!(sizes, [(2 << 20, 1), (16 << 30, 1)]);
    assert_eq!(node.memory_bytes, 400_016_779_264 * 1024, "MemTotal of /proc/meminfo");
    assert!(topo.warnings().contains(&Warning::NoNumaInfo));
}

#[test]
fn devices_hang_off_their_nodes() {
    let topo = read("linux/32em64t-2n8c+dax+nvme+mic+dimms.tar.bz2");
    let dev = |addr: &str| topo.devices().iter().find(|d| d.address == addr).expect(addr);
    let ib = dev("0000:82:00.0");
    assert_eq!((ib.kind, ib.name.as_deref(), ib.node), (DeviceKind::Nic, Some("ib0"), Some(NodeId(1))));
    assert_eq!(ib.vendor_device, Some((0x15b3, 0x1003)));
    let eth = dev("0000:02:00.0");
    assert_eq!((eth.kind, eth.name.as_deref(), eth.node), (DeviceKind::Nic, Some("eth0"), Some(NodeId(0))));
    // numa_node = -1, but local_cpulist (0-3) lies inside node0.
    let nvme = dev("0000:00:02.0");
    assert_eq!((nvme.kind, nvme.node), (DeviceKind::Nvme, Some(NodeId(0))));
    // numa_node = -1 and local to every CPU: the firmware does not say.
    let old = read("history/24em64t-2n6c2t+2mic.olddriver.tar.bz2");
    let eth0 = old.devices().iter().find(|d| d.name.as_deref() == Some("eth0")).expect("eth0");
    assert_eq!((eth0.kind, eth0.node), (DeviceKind::Nic, None));
    assert_eq!(dev("0000:83:00.0").name.as_deref(), Some("mic0"));
    // Bridges and host devices are left out.
    assert!(topo.devices().iter().all(|d| d.kind != DeviceKind::Other || d.name.is_some()));
}

#[test]
fn nvidia_gpu_memory_nodes_are_left_out() {
    // hwloc's default: 2 nodes, the six V100 memory nodes dropped.
    let topo = read("linux/nvidiagpunumanodes.tar.bz2");
    let ids: Vec<u32> = topo.nodes().iter().map(|n| n.id.0).collect();
    assert_eq!(ids, [0, 8]);
    assert_eq!(topo.distance_rows(), [vec![10, 40], vec![40, 10]]);
    let skipped = topo.warnings().iter().filter(|w| matches!(w, Warning::Skipped { .. })).count();
    assert_eq!(skipped, 6);
    let gpus: Vec<_> = topo.devices().iter().filter(|d| d.kind == DeviceKind::Gpu).collect();
    assert_eq!(gpus.len(), 6, "{:?}", topo.devices());
}

#[test]
fn kernel_quirks_are_read_with_warnings() {
    // Two core_siblings sets per physical_package_id (Xeon E5 v3 with
    // cluster-on-die): four packages, as hwloc shows, and a warning.
    let topo = read("history/28em64t-2s2n7c-buggycoresiblings.tar.bz2");
    assert_eq!(topo.package_count(), 4);
    assert!(topo.warnings().iter().any(|w| matches!(w, Warning::InconsistentSiblings(_))));

    // Every node listing every CPU: one node, as hwloc merges them.
    let topo = read("linux/8em64t-2s2ca2c-buggynuma.tar.bz2");
    assert_eq!(topo.nodes().len(), 1);
    assert_eq!(topo.nodes()[0].cpus, cpus("0-7"));

    // AMD compute units: sibling threads with their own core ids are cores.
    let topo = read("linux/64amd64-4s2n4ca2co.tar.bz2");
    assert_eq!((topo.core_count(), topo.max_threads_per_core()), (64, 1));
    assert!(!topo.warnings().iter().any(|w| matches!(w, Warning::InconsistentSiblings(_))));

    // PS3: no package files, no meminfo.
    let topo = read("linux/2ps3-2t.tar.bz2");
    assert_eq!((topo.package_count(), topo.core_count(), topo.pu_count()), (0, 1, 2));
    assert!(topo.warnings().contains(&Warning::NoMemoryInfo));

    // s390: physical_package_id is -1, the sibling sets still make sockets.
    let topo = read("linux/20s390-2g6s4c.tar.bz2");
    assert_eq!((topo.package_count(), topo.core_count()), (8, 20));
}

#[test]
fn hybrid_cores_keep_their_thread_counts() {
    // i7-1370P: 6 P-cores with 2 threads, 8 E-cores with 1.
    let topo = read("linux/20em64t-hybrid-1p6c2t+2ca4co1t.tar.bz2");
    let mut widths: Vec<usize> = topo.cores().iter().map(|c| c.cpus.len()).collect();
    widths.sort_unstable();
    assert_eq!(widths, [1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2]);
    assert_eq!(topo.parts().cpu_model.as_deref(), Some("13th Gen Intel(R) Core(TM) i7-1370P"));
    assert_eq!(topo.caches().len(), 1);
    assert_eq!(topo.caches()[0].level, 3);
}

// ------------------------------------------------------- hand-built trees

/// Two nodes of two single-thread cores each, with distances.
fn two_nodes() -> MemTree {
    let mut t = MemTree::new();
    for cpu in 0..4u32 {
        let dir = format!("/sys/devices/system/cpu/cpu{cpu}/topology");
        t.insert_file(&format!("{dir}/physical_package_id"), format!("{}\n", cpu / 2));
        t.insert_file(&format!("{dir}/core_id"), format!("{}\n", cpu % 2));
        t.insert_file(&format!("{dir}/thread_siblings_list"), format!("{cpu}\n"));
        t.insert_file(&format!("{dir}/core_siblings_list"), if cpu < 2 { "0-1\n" } else { "2-3\n" });
    }
    t.insert_file("/sys/devices/system/cpu/online", "0-3\n");
    for node in 0..2u32 {
        let dir = format!("/sys/devices/system/node/node{node}");
        t.insert_file(&format!("{dir}/cpulist"), if node == 0 { "0-1\n" } else { "2-3\n" });
        t.insert_file(
            &format!("{dir}/meminfo"),
            format!("Node {node} MemTotal:  1048576 kB\nNode {node} MemFree: 524288 kB\n"),
        );
        t.insert_file(&format!("{dir}/distance"), if node == 0 { "10 21\n" } else { "21 10\n" });
    }
    t
}

fn error_of(tree: &MemTree) -> String {
    match read_tree(tree) {
        Ok(_) => panic!("the tree should not read"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_hand_built_tree_reads() {
    let topo = read_tree(&two_nodes()).expect("reads");
    assert_eq!((topo.package_count(), topo.nodes().len(), topo.core_count()), (2, 2, 4));
    assert_eq!(topo.nodes()[1].memory_bytes, 1 << 30);
    assert_eq!(topo.nodes()[1].free_bytes, Some(512 << 20));
    assert_eq!(topo.distance(0, 1), 21);
    assert!(topo.warnings().is_empty(), "{:?}", topo.warnings());
}

#[test]
fn a_device_without_numa_node_is_placed_by_its_local_cpus() {
    let mut t = two_nodes();
    let dev = "/sys/devices/pci0000:80/0000:80:00.0";
    t.insert_file(&format!("{dev}/class"), "0x010802\n");
    t.insert_file(&format!("{dev}/numa_node"), "-1\n");
    t.insert_file(&format!("{dev}/local_cpulist"), "2-3\n");
    t.insert_dir(&format!("{dev}/nvme/nvme3"));
    t.insert_link("/sys/bus/pci/devices/0000:80:00.0", "../../../devices/pci0000:80/0000:80:00.0");
    // Not a device placement cares about: left out.
    t.insert_file("/sys/devices/pci0000:00/0000:00:00.0/class", "0x060000\n");
    t.insert_link("/sys/bus/pci/devices/0000:00:00.0", "../../../devices/pci0000:00/0000:00:00.0");
    let topo = read_tree(&t).expect("reads");
    assert_eq!(topo.devices().len(), 1);
    let d = &topo.devices()[0];
    assert_eq!((d.kind, d.name.as_deref(), d.node), (DeviceKind::Nvme, Some("nvme3"), Some(NodeId(1))));
    // Local to every CPU says nothing.
    t.insert_file(&format!("{dev}/local_cpulist"), "0-3\n");
    assert_eq!(read_tree(&t).expect("reads").devices()[0].node, None);
}

#[test]
fn dies_count_only_when_a_package_has_several() {
    // Same die_id everywhere (what most x86 kernels print): no dies.
    let mut t = two_nodes();
    for cpu in 0..4 {
        t.insert_file(&format!("/sys/devices/system/cpu/cpu{cpu}/topology/die_id"), "0\n");
    }
    let topo = read_tree(&t).expect("reads");
    assert_eq!(topo.die_count(), 0);
    // One package of two dies (the second package has one).
    t.insert_file("/sys/devices/system/cpu/cpu1/topology/die_id", "1\n");
    let topo = read_tree(&t).expect("reads");
    assert_eq!(topo.parts().dies, [(0, 2), (1, 1)]);
    assert_eq!(topo.cores()[1].die, Some(1));
}

#[test]
fn a_distance_row_of_the_wrong_length_names_its_file() {
    let mut t = two_nodes();
    t.insert_file("/sys/devices/system/node/node1/distance", "21 10 21\n");
    let msg = error_of(&t);
    assert!(msg.starts_with("/sys/devices/system/node/node1/distance: "), "{msg}");
    assert!(msg.contains("3 values, expected 2"), "{msg}");
}

#[test]
fn a_self_distance_other_than_10_names_its_file() {
    let mut t = two_nodes();
    t.insert_file("/sys/devices/system/node/node0/distance", "20 21\n");
    let msg = error_of(&t);
    assert!(msg.starts_with("/sys/devices/system/node/node0/distance: "), "{msg}");
    assert!(msg.contains("to itself is 20"), "{msg}");
}

#[test]
fn a_cpu_in_two_nodes_names_the_second_list() {
    let mut t = two_nodes();
    t.insert_file("/sys/devices/system/node/node1/cpulist", "1-3\n");
    let msg = error_of(&t);
    assert!(msg.starts_with("/sys/devices/system/node/node1/cpulist: "), "{msg}");
    assert!(msg.contains("CPU 1 is in both node0 and node1"), "{msg}");
}

#[test]
fn numbers_beyond_the_bounds_name_their_entry() {
    // No kernel makes `cpu4000000000`; taken as a CPU it would size every
    // set at 500 MB, and skipping it would hide a broken capture.
    let mut t = two_nodes();
    t.insert_file("/sys/devices/system/cpu/cpu4000000000/topology/core_id", "0\n");
    assert_eq!(
        error_of(&t),
        "/sys/devices/system/cpu/cpu4000000000: expected a CPU number below 65536, found `4000000000`"
    );
    let mut t = two_nodes();
    t.insert_dir("/sys/devices/system/cpu/cpu99999999999999999999");
    assert!(error_of(&t).starts_with("/sys/devices/system/cpu/cpu99999999999999999999: expected a CPU number"));
    let mut t = two_nodes();
    t.insert_file("/sys/devices/system/node/node4096/cpulist", "\n");
    assert_eq!(error_of(&t), "/sys/devices/system/node/node4096: expected a node number below 4096, found `4096`");
    // A distance file of a hundred thousand values is refused with its
    // length, though only one value per node is kept while reading it.
    let mut t = two_nodes();
    t.insert_file("/sys/devices/system/node/node1/distance", format!("21 10{}\n", " 21".repeat(100_000)));
    assert!(error_of(&t).contains("100002 values, expected 2"));
}

#[test]
fn pools_beyond_the_node_memory_are_refused() {
    let pool = "/sys/devices/system/node/node0/hugepages/hugepages-1048576kB";
    let mut t = two_nodes();
    t.insert_file(&format!("{pool}/nr_hugepages"), "6144\n");
    assert_eq!(
        error_of(&t),
        "node0 has a pool of 6144 x 1 GiB huge pages (6 TiB), more than the node's 1 GiB of memory"
    );
    // The whole node as one pool is what the kernel could at most give.
    t.insert_file(&format!("{pool}/nr_hugepages"), "1\n");
    t.insert_file(&format!("{pool}/free_hugepages"), "2\n");
    assert_eq!(error_of(&t), "node0 has 2 free 1 GiB huge pages in a pool of 1");
    t.insert_file(&format!("{pool}/free_hugepages"), "1\n");
    assert_eq!(read_tree(&t).expect("reads").nodes()[0].hugepages[0].total, 1);
}

#[test]
fn garbage_in_a_cpu_list_names_its_file() {
    let mut t = two_nodes();
    t.insert_file("/sys/devices/system/node/node0/cpulist", "0-x\n");
    let msg = error_of(&t);
    assert!(msg.starts_with("/sys/devices/system/node/node0/cpulist: "), "{msg}");
    assert!(msg.contains("0-x"), "{msg}");
    let mut t = two_nodes();
    t.insert_file("/sys/devices/system/cpu/cpu3/topology/core_id", "three\n");
    assert!(error_of(&t).starts_with("/sys/devices/system/cpu/cpu3/topology/core_id: "));
}

#[test]
fn a_missing_meminfo_names_its_file() {
    let mut t = two_nodes();
    t.remove("/sys/devices/system/node/node1/meminfo");
    match read_tree(&t) {
        Err(ParseError::Missing(path)) => {
            assert_eq!(path, "/sys/devices/system/node/node1/meminfo")
        }
        other => panic!("expected a missing file, got {other:?}"),
    }
    let mut t = two_nodes();
    t.insert_file("/sys/devices/system/node/node0/meminfo", "Node 0 MemTotal: lots kB\n");
    assert!(error_of(&t).starts_with("/sys/devices/system/node/node0/meminfo: "));
}

#[test]
fn quirks_of_hand_built_trees_are_warnings() {
    // No distance file: defaults and a warning, not an error.
    let mut t = two_nodes();
    t.remove("/sys/devices/system/node/node1/distance");
    let topo = read_tree(&t).expect("reads");
    assert!(!topo.distances_known());
    assert!(topo.warnings().contains(&Warning::NoDistances));

    // A node without memory and a CPU the kernel took offline.
    let mut t = two_nodes();
    t.insert_file("/sys/devices/system/node/node1/meminfo", "Node 1 MemTotal: 0 kB\n");
    t.insert_file("/sys/devices/system/cpu/online", "0-2\n");
    t.remove("/sys/devices/system/cpu/cpu3/topology");
    let topo = read_tree(&t).expect("reads");
    assert!(topo.warnings().contains(&Warning::MemorylessNode(NodeId(1))));
    assert_eq!(topo.offline_cpus(), &cpus("3"));
    assert_eq!(topo.nodes()[1].cpus, cpus("2-3"));

    // No topology directories (kernels before 2.6.16): one core per CPU.
    let mut t = two_nodes();
    for cpu in 0..4 {
        t.remove(&format!("/sys/devices/system/cpu/cpu{cpu}/topology"));
    }
    let topo = read_tree(&t).expect("reads");
    assert_eq!((topo.core_count(), topo.package_count(), topo.pu_count()), (4, 0, 4));
    assert!(topo.warnings().contains(&Warning::NoCoreInfo));

    // No node directory at all: one node with everything.
    let mut t = two_nodes();
    t.remove("/sys/devices/system/node");
    t.insert_file("/proc/meminfo", "MemTotal:  2097152 kB\nMemFree: 1 kB\n");
    let topo = read_tree(&t).expect("reads");
    assert_eq!(topo.nodes().len(), 1);
    assert_eq!(topo.nodes()[0].memory_bytes, 2 << 30);
    assert!(topo.warnings().contains(&Warning::NoNumaInfo));

    // Old kernels count huge pages in meminfo only.
    t.insert_file(
        "/proc/meminfo",
        "MemTotal: 2097152 kB\nHugePages_Total: 8\nHugePages_Free: 3\nHugepagesize: 2048 kB\n",
    );
    let pools = read_tree(&t).expect("reads").nodes()[0].hugepages.clone();
    let got: Vec<(u64, u64, Option<u64>)> = pools.iter().map(|h| (h.size_bytes, h.total, h.free)).collect();
    assert_eq!(got, [(2 << 20, 8, Some(3))]);
}

#[test]
fn symlinks_resolve_inside_the_tree() {
    let mut t = MemTree::new();
    t.insert_file("/sys/devices/pci0000:00/0000:00:01.0/class", "0x020000\n");
    t.insert_link("/sys/bus/pci/devices/0000:00:01.0", "../../../devices/pci0000:00/0000:00:01.0");
    t.insert_link("/sys/loop/a", "b");
    t.insert_link("/sys/loop/b", "a");
    assert_eq!(
        t.resolve("/sys/bus/pci/devices/0000:00:01.0/class").as_deref(),
        Some("/sys/devices/pci0000:00/0000:00:01.0/class")
    );
    assert_eq!(t.read("/sys/bus/pci/devices/0000:00:01.0/class").expect("reads").as_deref(), Some("0x020000\n"));
    assert_eq!(t.list("/sys/bus/pci/devices/0000:00:01.0"), ["class"]);
    assert_eq!(t.resolve("/sys/loop/a"), None, "a loop resolves to nothing");
    assert!(!t.exists("/sys/nothing"));
}

// ------------------------------------------------------------ properties

fn small_tree() -> &'static MemTree {
    static TREE: OnceLock<MemTree> = OnceLock::new();
    TREE.get_or_init(|| load("linux/16em64t-4s2c2t-offlines.tar.bz2"))
}

/// Files the reader looks at in the small tree (others cannot matter).
fn interesting_files() -> &'static Vec<String> {
    static FILES: OnceLock<Vec<String>> = OnceLock::new();
    FILES.get_or_init(|| {
        small_tree()
            .files()
            .into_iter()
            .filter(|f| {
                f.contains("/topology/") || f.contains("/node/") || f.ends_with("/online") || f.contains("/cache/index")
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn mutating_one_file_never_panics(
        pick in any::<prop::sample::Index>(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<Option<prop::sample::Index>>(),
    ) {
        let files = interesting_files();
        let path = pick.get(files);
        let mut tree = small_tree().clone();
        let mut bytes = tree.read(path).ok().flatten().unwrap_or_default().into_bytes();
        if !bytes.is_empty() {
            for (at, byte) in &edits {
                let i = at.index(bytes.len());
                bytes[i] = *byte;
            }
            if let Some(c) = cut {
                bytes.truncate(c.index(bytes.len()));
            }
        }
        tree.insert_file(path, bytes);
        // Either outcome is fine; an error must name a file or say what is wrong.
        if let Err(e) = read_tree(&tree) {
            prop_assert!(!e.to_string().is_empty());
        }
    }
}

#[test]
fn a_path_outside_the_tree_is_not_reached() {
    // `..` in a tree path stays inside the root.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tree = DirTree::new(root.join("src"));
    assert_eq!(tree.read("/../Cargo.toml").expect("reads"), None);
}

/// A CPU-less node (HBM in flat mode, a CXL expander) is local to the CPU
/// node the kernel's HMAT initiators name, even where its distances to
/// both CPU nodes are equal; without initiators the nearest by distance.
#[test]
fn a_memory_only_node_is_local_to_its_hmat_initiators() {
    let mut t = two_nodes();
    let dir = "/sys/devices/system/node/node2";
    t.insert_file(&format!("{dir}/cpulist"), "\n");
    t.insert_file(&format!("{dir}/meminfo"), "Node 2 MemTotal:  1048576 kB\n");
    t.insert_file(&format!("{dir}/distance"), "14 14 10\n");
    t.insert_file("/sys/devices/system/node/node0/distance", "10 21 14\n");
    t.insert_file("/sys/devices/system/node/node1/distance", "21 10 14\n");
    let topo = read_tree(&t).expect("reads");
    assert_eq!(topo.local_cpu_nodes(2), (vec![0, 1], numaplace_topo::Locality::Distance));
    t.insert_file(&format!("{dir}/access0/initiators/node1"), "");
    t.insert_file(&format!("{dir}/access0/initiators/read_bandwidth"), "400000\n");
    let topo = read_tree(&t).expect("reads");
    assert_eq!(topo.local_cpu_nodes(2), (vec![1], numaplace_topo::Locality::Source));
    assert_eq!(topo.parts().local_to, vec![(NodeId(2), vec![NodeId(1)])]);
}

/// The kernel's memory tiers: a CPU-less node in a tier of its own (a CXL
/// expander ranks below DRAM) is memory of another kind, named after its
/// tier since sysfs does not say which; one in the CPU nodes' tier stays
/// DRAM.
#[test]
fn a_memory_only_node_in_a_lower_tier_is_another_kind() {
    let mut t = two_nodes();
    let dir = "/sys/devices/system/node/node2";
    t.insert_file(&format!("{dir}/cpulist"), "\n");
    t.insert_file(&format!("{dir}/meminfo"), "Node 2 MemTotal:  1048576 kB\n");
    t.insert_file(&format!("{dir}/distance"), "14 14 10\n");
    t.insert_file("/sys/devices/system/node/node0/distance", "10 21 14\n");
    t.insert_file("/sys/devices/system/node/node1/distance", "21 10 14\n");
    let tiers = "/sys/devices/virtual/memory_tiering";
    t.insert_file(&format!("{tiers}/memory_tier4/nodelist"), "0-1\n");
    t.insert_file(&format!("{tiers}/memory_tier22/nodelist"), "2\n");
    let topo = read_tree(&t).expect("reads");
    assert_eq!(topo.nodes()[2].kind.as_deref(), Some("memory_tier22"));
    assert_eq!(topo.memory_kind(2), numaplace_topo::MemoryKind::Other);
    assert_eq!(topo.memory_kind(0), numaplace_topo::MemoryKind::Dram);
    t.insert_file(&format!("{tiers}/memory_tier4/nodelist"), "0-2\n");
    t.insert_file(&format!("{tiers}/memory_tier22/nodelist"), "\n");
    let topo = read_tree(&t).expect("reads");
    assert_eq!(topo.memory_kind(2), numaplace_topo::MemoryKind::Dram, "the DRAM tier");
}
