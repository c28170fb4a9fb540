//! The text and SVG views of a topology show what an operator needs: every
//! node with its cores grouped by sibling threads, memory, huge pages,
//! distances, devices and warnings; the SVG draws exactly one box per
//! package, node, core and PU.

use numaplace_emit::{svg, text};
use numaplace_topo::{Core, CpuSet, Device, DeviceKind, HugePages, Node, NodeId, Package, Parts, Topology};

/// 2 packages x 1 node x 4 cores x 2 threads, Linux numbering (cpu i and
/// i+8 are siblings), plus a memory-only node 2.
fn host() -> Topology {
    let mut parts = Parts { name: Some("test-host".into()), ..Parts::default() };
    for p in 0..2u32 {
        let mut pkg = CpuSet::new();
        let mut node = CpuSet::new();
        for c in 0..4u32 {
            let first = p * 4 + c;
            let cpus: CpuSet = [first, first + 8].into_iter().collect();
            pkg = pkg.union(&cpus);
            node = node.union(&cpus);
            parts.cores.push(Core { package: Some(p), die: None, core_id: Some(c), cpus });
        }
        parts.packages.push(Package { id: p, cpus: pkg });
        parts.nodes.push(Node {
            id: NodeId(p),
            cpus: node,
            memory_bytes: 64 << 30,
            free_bytes: Some(60 << 30),
            hugepages: vec![HugePages { size_bytes: 1 << 30, total: 16, free: Some(8) }],
            kind: None,
        });
    }
    parts.nodes.push(Node {
        id: NodeId(2),
        cpus: CpuSet::new(),
        memory_bytes: 16 << 30,
        free_bytes: None,
        hugepages: vec![],
        kind: Some("HBM".into()),
    });
    parts.distances = Some(vec![vec![10, 21, 17], vec![21, 10, 28], vec![17, 28, 10]]);
    parts.devices.push(Device {
        address: "0000:3b:00.0".into(),
        kind: DeviceKind::Nic,
        name: Some("eth0".into()),
        vendor_device: Some((0x8086, 0x1572)),
        node: Some(NodeId(1)),
    });
    Topology::from_parts(parts).expect("valid topology")
}

#[test]
fn text_shows_nodes_cores_memory_distances_devices_and_warnings() {
    let out = text::topology(&host());
    assert!(out.contains("2 packages, 3 NUMA nodes, 8 cores, 16 PUs (SMT2), 144 GiB"), "{out}");
    assert!(out.contains("node0  package 0  4 cores, 8 PUs  memory 64 GiB (free 60 GiB)"), "{out}");
    assert!(out.contains("cores 0+8 1+9 2+10 3+11"), "{out}");
    assert!(out.contains("hugepages 1 GiB x 16 (8 free)"), "{out}");
    // Memory-only: its kind and the CPU node it is nearest (distance 17).
    assert!(out.contains("node2  package 0  [HBM, nearest node0]  0 cores, 0 PUs  memory 16 GiB"), "{out}");
    assert!(out.contains("   node1   21   10   28"), "{out}");
    assert!(out.contains("0000:3b:00.0   nic     node1  eth0"), "{out}");
    assert!(out.contains("warning: node2 has no online CPUs"), "{out}");
}

/// Where the source says which CPU node a memory-only node is local to
/// (hwloc's group, the kernel's HMAT initiators), the views show that,
/// not the nearest by distance, with that node's package; without
/// distances or a source, they say the locality is unknown.
#[test]
fn a_memory_only_node_shows_its_kind_and_the_cpu_node_it_is_local_to() {
    let mut parts = host().to_parts();
    parts.local_to = vec![(NodeId(2), vec![NodeId(1)])];
    let t = Topology::from_parts(parts.clone()).expect("valid");
    let out = text::topology(&t);
    assert!(out.contains("node2  package 1  [HBM, local to node1]"), "{out}");
    assert_eq!(t.local_cpu_nodes(2), (vec![1], numaplace_topo::Locality::Source));
    assert_eq!(t.memory_kind(2), numaplace_topo::MemoryKind::Hbm);
    let svg = svg::topology(&t);
    assert!(svg.contains("HBM, local to node1"), "{svg}");
    parts.local_to.clear();
    parts.distances = None;
    let t = Topology::from_parts(parts.clone()).expect("valid");
    assert!(text::topology(&t).contains("node2  [HBM, locality unknown]"));
    // A node named local to a node without CPUs is refused.
    parts.local_to = vec![(NodeId(2), vec![NodeId(2)])];
    assert!(Topology::from_parts(parts).is_err());
}

#[test]
fn svg_draws_one_box_per_core_and_pu() {
    let t = host();
    let out = svg::topology(&t);
    let doc = roxmltree::Document::parse(&out).expect("SVG is well-formed XML");
    let count = |class: &str| doc.descendants().filter(|n| n.attribute("class") == Some(class)).count();
    assert_eq!(count("package"), 2);
    assert_eq!(count("node"), 3);
    assert_eq!(count("core"), t.core_count());
    assert_eq!(count("pu"), t.pu_count());
    let labels: Vec<&str> =
        doc.descendants().filter(|n| n.attribute("class") == Some("pu-label")).filter_map(|n| n.text()).collect();
    assert_eq!(labels[..2], ["0", "8"], "a core shows its sibling threads together");
    assert!(out.contains("nodes outside a single package"), "the HBM node gets its own frame");
    assert_eq!(out, svg::topology(&t), "the picture is deterministic");
}

/// The web view's host picture is this renderer's drawing with the VMs
/// on it: the same packages, nodes, cores and threads as the CLI's, each
/// thread a VM is pinned on carrying the VM's name (escaped) and
/// `data-vm`, reserved threads saying "host", and no `<style>` of its own
/// (the page's Content-Security-Policy refuses inline style).
#[test]
fn the_host_picture_is_the_topology_with_its_vms_drawn_on() {
    use numaplace_plan::{plan, HostState, Request, Reservations};
    let t = host();
    let reservations = Reservations { cpus: [0u32].into_iter().collect(), ..Reservations::default() };
    let mut state = HostState::with_reservations(&t, reservations).expect("valid");
    let name = "a<b>\"c'";
    let decision = plan(&t, &state, &Request::new(name, 2, 4 << 30)).expect("fits");
    state.place(&decision.placement).expect("places");
    let out = svg::host(&t, &state);
    assert!(!out.contains("<style"), "{out}");
    let doc = roxmltree::Document::parse(&out).expect("well-formed");
    let pus: Vec<_> = doc.descendants().filter(|n| n.attribute("class") == Some("pu")).collect();
    assert_eq!(pus.len(), t.pu_count(), "one group per thread, as in the CLI's picture");
    let cli = roxmltree::Document::parse(&svg::topology(&t))
        .expect("well-formed")
        .descendants()
        .filter(|n| n.attribute("class") == Some("pu"))
        .count();
    assert_eq!(cli, pus.len());
    let mut on: Vec<u32> = pus
        .iter()
        .filter(|g| g.attribute("data-vm") == Some(name))
        .map(|g| g.attribute("data-pu").expect("numbered").parse().expect("a number"))
        .collect();
    on.sort_unstable();
    let mut pins: Vec<u32> = decision.placement.vcpus.iter().map(|v| v.pu).collect();
    pins.sort_unstable();
    assert_eq!(on, pins, "the VM is drawn exactly on its threads");
    let label = |pu: u32| {
        let g = pus.iter().find(|g| g.attribute("data-pu") == Some(&pu.to_string())).expect("drawn");
        g.descendants().find(|n| n.has_tag_name("text")).and_then(|n| n.text()).expect("labelled").to_string()
    };
    assert_eq!(label(0), "0 host");
    assert_eq!(
        label(pins[0]),
        format!("{} {}", pins[0], "a<b>\"c'"),
        "the name, escaped in the markup, read back whole"
    );
}
