//! Hand-built placements and a small host for the emitter tests. The
//! planner is tested elsewhere; these are the shapes it produces, written
//! out literally so each emitter test says exactly what goes in.

#![allow(dead_code)]

use numaplace_plan::{CpuMode, GuestCell, GuestTopology, MemoryMode, Placement, VcpuPin};
use numaplace_topo::{Core, CpuSet, HugePages, Node, NodeId, Package, Parts, Topology};

pub const GIB: u64 = 1 << 30;

fn set(text: &str) -> CpuSet {
    text.parse().expect("literal CPU list")
}

/// A host like the field notes' XAPI case scaled down: 2 packages, each
/// one node of 4 cores x 2 threads; PU n and n+8 are siblings
/// (node0: 0-3,8-11; node1: 4-7,12-15), 16 GiB per node, distance 21.
pub fn host_2n4c2t() -> Topology {
    let mut parts = Parts { name: Some("lab-2n4c2t".into()), ..Parts::default() };
    for pkg in 0..2u32 {
        let base = pkg * 4;
        let cpus = set(&format!("{}-{},{}-{}", base, base + 3, base + 8, base + 11));
        parts.packages.push(Package { id: pkg, cpus: cpus.clone() });
        parts.nodes.push(Node {
            id: NodeId(pkg),
            cpus,
            memory_bytes: 16 * GIB,
            free_bytes: None,
            hugepages: Vec::new(),
            kind: None,
        });
        for c in 0..4 {
            parts.cores.push(Core {
                package: Some(pkg),
                die: None,
                core_id: Some(c),
                cpus: set(&format!("{},{}", base + c, base + c + 8)),
            });
        }
    }
    parts.distances = Some(vec![vec![10, 21], vec![21, 10]]);
    Topology::from_parts(parts).expect("valid literal topology")
}

/// [`host_2n4c2t`] with a pool of four 1 GiB huge pages on each node.
pub fn host_2n4c2t_hugepages() -> Topology {
    let mut parts = host_2n4c2t().to_parts();
    for node in &mut parts.nodes {
        node.hugepages = vec![HugePages { size_bytes: GIB, total: 4, free: None }];
    }
    Topology::from_parts(parts).expect("valid literal topology")
}

/// A dedicated 8-vCPU VM over both nodes of [`host_2n4c2t`], one vCPU per
/// core: cell0 = vCPUs 0-3 on PUs 0-3 (node0), cell1 = vCPUs 4-7 on PUs
/// 4-7 (node1), 4 GiB each.
pub fn wide_dedicated(name: &str) -> Placement {
    let vcpus = (0..8).map(|v| VcpuPin { vcpu: v, pu: v, node: NodeId(v / 4) }).collect();
    Placement {
        vm: name.to_string(),
        nodes: vec![NodeId(0), NodeId(1)],
        cpu_mode: CpuMode::Dedicated,
        vcpus,
        cpuset: set("0-7"),
        emulator: set("0-7"),
        memory: vec![(NodeId(0), 4 * GIB), (NodeId(1), 4 * GIB)],
        memory_bytes: 8 * GIB,
        memory_mode: MemoryMode::Strict,
        hugepage_bytes: None,
        online_vcpus: None,
        devices: Vec::new(),
        floating: Vec::new(),
        charged: Vec::new(),
        guest: GuestTopology {
            sockets: 2,
            dies: 1,
            cores: 4,
            threads: 1,
            cells: vec![
                GuestCell {
                    id: 0,
                    vcpus: set("0-3"),
                    memory_bytes: 4 * GIB,
                    host_node: NodeId(0),
                    distances: vec![10, 21],
                    memory_nodes: Vec::new(),
                },
                GuestCell {
                    id: 1,
                    vcpus: set("4-7"),
                    memory_bytes: 4 * GIB,
                    host_node: NodeId(1),
                    distances: vec![21, 10],
                    memory_nodes: Vec::new(),
                },
            ],
        },
    }
}

/// A 4-vCPU `pairs` VM on node1 of [`host_2n4c2t`] backed by 1 GiB huge
/// pages: each pair of vCPUs on one core's two threads (v0->4, v1->12,
/// v2->5, v3->13), so the guest is 1 socket x 2 cores x 2 threads.
pub fn pairs_hugepages(name: &str) -> Placement {
    let pus = [4, 12, 5, 13];
    let vcpus = pus.iter().enumerate().map(|(v, &pu)| VcpuPin { vcpu: v as u32, pu, node: NodeId(1) }).collect();
    Placement {
        vm: name.to_string(),
        nodes: vec![NodeId(1)],
        cpu_mode: CpuMode::Dedicated,
        vcpus,
        cpuset: set("4-5,12-13"),
        emulator: set("0"),
        memory: vec![(NodeId(1), 2 * GIB)],
        memory_bytes: 2 * GIB,
        memory_mode: MemoryMode::Strict,
        hugepage_bytes: Some(GIB),
        online_vcpus: None,
        devices: Vec::new(),
        floating: Vec::new(),
        charged: Vec::new(),
        guest: GuestTopology {
            sockets: 1,
            dies: 1,
            cores: 2,
            threads: 2,
            cells: vec![GuestCell {
                id: 0,
                vcpus: set("0-3"),
                memory_bytes: 2 * GIB,
                host_node: NodeId(1),
                distances: vec![10],
                memory_nodes: Vec::new(),
            }],
        },
    }
}

/// A shared 6-vCPU VM floating over node0's PUs, 3 GiB (not a multiple of
/// 2 GiB, to exercise size formatting), 768 MiB in the cell.
pub fn shared_small(name: &str) -> Placement {
    let vcpus = (0..6).map(|v| VcpuPin { vcpu: v, pu: [0, 1, 2, 3, 8, 9][v as usize], node: NodeId(0) }).collect();
    Placement {
        vm: name.to_string(),
        nodes: vec![NodeId(0)],
        cpu_mode: CpuMode::Shared,
        vcpus,
        cpuset: set("0-3,8-11"),
        emulator: set("0-3,8-11"),
        memory: vec![(NodeId(0), 768 << 20)],
        memory_bytes: 768 << 20,
        memory_mode: MemoryMode::Strict,
        hugepage_bytes: None,
        online_vcpus: None,
        devices: Vec::new(),
        floating: Vec::new(),
        charged: Vec::new(),
        guest: GuestTopology {
            sockets: 1,
            dies: 1,
            cores: 6,
            threads: 1,
            cells: vec![GuestCell {
                id: 0,
                vcpus: set("0-5"),
                memory_bytes: 768 << 20,
                host_node: NodeId(0),
                distances: vec![10],
                memory_nodes: Vec::new(),
            }],
        },
    }
}

/// A `spread` VM: 4 vCPUs, 2 cells, memory interleaved over both nodes.
pub fn spread(name: &str) -> Placement {
    let pus = [2, 3, 6, 7];
    let vcpus = pus.iter().enumerate().map(|(v, &pu)| VcpuPin { vcpu: v as u32, pu, node: NodeId(pu / 4) }).collect();
    Placement {
        vm: name.to_string(),
        nodes: vec![NodeId(0), NodeId(1)],
        cpu_mode: CpuMode::Dedicated,
        vcpus,
        cpuset: set("2-3,6-7"),
        emulator: set("2-3,6-7"),
        memory: vec![(NodeId(0), GIB), (NodeId(1), GIB)],
        memory_bytes: 2 * GIB,
        memory_mode: MemoryMode::Interleave,
        hugepage_bytes: None,
        online_vcpus: None,
        devices: Vec::new(),
        floating: Vec::new(),
        charged: Vec::new(),
        guest: GuestTopology {
            sockets: 2,
            dies: 1,
            cores: 2,
            threads: 1,
            cells: vec![
                GuestCell {
                    id: 0,
                    vcpus: set("0-1"),
                    memory_bytes: GIB,
                    host_node: NodeId(0),
                    distances: vec![10, 21],
                    memory_nodes: Vec::new(),
                },
                GuestCell {
                    id: 1,
                    vcpus: set("2-3"),
                    memory_bytes: GIB,
                    host_node: NodeId(1),
                    distances: vec![21, 10],
                    memory_nodes: Vec::new(),
                },
            ],
        },
    }
}

/// [`wide_dedicated`] booting with 3 of its 8 vCPUs online (CPU hot-add)
/// and a GPU passed through.
pub fn hot_add_with_gpu(name: &str) -> Placement {
    let mut p = wide_dedicated(name);
    p.online_vcpus = Some(3);
    p.devices = vec!["0000:3b:00.0".to_string()];
    p
}

/// [`wide_dedicated`] with node 1 memory-less: cell 1 has vCPUs 4-7 and
/// no memory, all 8 GiB come from node 0.
pub fn memoryless_cell(name: &str) -> Placement {
    let mut p = wide_dedicated(name);
    p.memory = vec![(NodeId(0), 8 * GIB)];
    p.guest.cells[0].memory_bytes = 8 * GIB;
    p.guest.cells[1].memory_bytes = 0;
    p
}

/// [`wide_dedicated`] with a hidden HBM tier: cell 0 holds 2 GiB of its
/// node0 DRAM and 2 GiB on node 2 (an HBM node beside it), cell 1 all of
/// its 4 GiB on node 3 (node1's HBM).
pub fn hidden_tier(name: &str) -> Placement {
    let mut p = wide_dedicated(name);
    p.nodes = vec![NodeId(0), NodeId(1), NodeId(2), NodeId(3)];
    p.memory = vec![(NodeId(0), 2 * GIB), (NodeId(2), 2 * GIB), (NodeId(3), 4 * GIB)];
    p.guest.cells[0].memory_nodes = vec![(NodeId(0), 2 * GIB), (NodeId(2), 2 * GIB)];
    p.guest.cells[1].memory_nodes = vec![(NodeId(3), 4 * GIB)];
    p
}

/// [`wide_dedicated`] with Nova's interleaved cells: vCPUs 0,2,4,6 on
/// node0 and 1,3,5,7 on node1, the guest one socket of 8 one-core dies.
pub fn interleaved(name: &str) -> Placement {
    let mut p = wide_dedicated(name);
    p.vcpus = (0..8).map(|v| VcpuPin { vcpu: v, pu: v / 2 + 4 * (v % 2), node: NodeId(v % 2) }).collect();
    p.guest.sockets = 1;
    p.guest.dies = 8;
    p.guest.cores = 1;
    p.guest.cells[0].vcpus = set("0,2,4,6");
    p.guest.cells[1].vcpus = set("1,3,5,7");
    p
}
