//! The QEMU argument emitter: `-smp`, memory backends bound to host
//! nodes, `-numa node` per cell with one `cpus=` per range, `-numa dist`
//! for every ordered pair, and a command line a shell reads back intact.

mod common;

use common::*;
use numaplace_emit::qemu::{args, command_line, notes, shell_quote, QemuOptions};
use numaplace_guest::testing::require_tool;

/// The values of every occurrence of `flag`.
fn values(a: &[String], flag: &str) -> Vec<String> {
    a.windows(2).filter(|w| w[0] == flag).map(|w| w[1].clone()).collect()
}

#[test]
fn wide_vm_gets_two_bound_cells_and_both_distances() {
    let a = args(&wide_dedicated("db1"), &QemuOptions::default());
    assert_eq!(values(&a, "-machine"), ["q35"]);
    assert_eq!(values(&a, "-accel"), ["kvm"]);
    assert_eq!(values(&a, "-cpu"), ["host"]);
    assert_eq!(values(&a, "-smp"), ["8,sockets=2,cores=4,threads=1,maxcpus=8"]);
    assert_eq!(values(&a, "-m"), ["8G"]);
    assert_eq!(
        values(&a, "-object"),
        [
            "memory-backend-ram,id=m0,size=4G,host-nodes=0,policy=bind",
            "memory-backend-ram,id=m1,size=4G,host-nodes=1,policy=bind"
        ]
    );
    assert_eq!(
        values(&a, "-numa"),
        [
            "node,nodeid=0,memdev=m0,cpus=0-3",
            "node,nodeid=1,memdev=m1,cpus=4-7",
            "dist,src=0,dst=1,val=21",
            "dist,src=1,dst=0,val=21"
        ]
    );
}

#[test]
fn huge_pages_use_a_file_backend_on_hugetlbfs() {
    let a = args(&pairs_hugepages("hp"), &QemuOptions::default());
    assert_eq!(
        values(&a, "-object"),
        ["memory-backend-file,id=m0,size=2G,mem-path=/dev/hugepages1G,prealloc=on,host-nodes=1,policy=bind"]
    );
    assert_eq!(values(&a, "-smp"), ["4,sockets=1,cores=2,threads=2,maxcpus=4"]);
    // One cell: no distances to give.
    assert!(values(&a, "-numa").iter().all(|v| !v.starts_with("dist")));
    let custom = QemuOptions { hugetlbfs: Some("/mnt/huge".into()), ..QemuOptions::default() };
    assert!(values(&args(&pairs_hugepages("hp"), &custom), "-object")[0].contains("mem-path=/mnt/huge,"));
}

#[test]
fn spread_interleaves_over_all_nodes() {
    let a = args(&spread("bw"), &QemuOptions::default());
    assert_eq!(
        values(&a, "-object"),
        [
            "memory-backend-ram,id=m0,size=1G,host-nodes=0-1,policy=interleave",
            "memory-backend-ram,id=m1,size=1G,host-nodes=0-1,policy=interleave"
        ]
    );
}

#[test]
fn sizes_stay_exact_and_split_cpu_ranges_repeat_cpus() {
    let mut p = shared_small("web");
    // 768 MiB is no whole number of GiB: it must not be rounded.
    assert_eq!(values(&args(&p, &QemuOptions::default()), "-m"), ["768M"]);
    p.guest.cells[0].vcpus = "0-1,4-5".parse().expect("list");
    p.guest.cells[0].memory_bytes = (768 << 20) + 512;
    let a = args(&p, &QemuOptions::default());
    assert_eq!(values(&a, "-numa"), ["node,nodeid=0,memdev=m0,cpus=0-1,cpus=4-5"]);
    assert_eq!(values(&a, "-m"), ["805306880B"]);
}

#[test]
fn tcg_guest_uses_qemu64_intel() {
    let a = args(&wide_dedicated("t"), &QemuOptions::tcg());
    assert_eq!(values(&a, "-accel"), ["tcg"]);
    assert_eq!(values(&a, "-cpu"), ["qemu64,vendor=GenuineIntel"]);
}

#[test]
fn command_line_quotes_for_the_shell() {
    assert_eq!(shell_quote("plain-1,x=2"), "plain-1,x=2");
    assert_eq!(shell_quote("it's"), r"'it'\''s'");
    assert_eq!(shell_quote(""), "''");
    let line = command_line(&wide_dedicated("my vm, 'odd'"), &QemuOptions::default());
    assert!(line.starts_with("qemu-system-x86_64 -name 'guest=my vm,, '\\''odd'\\''' -machine q35"), "{line}");
}

#[test]
fn notes_say_qemu_cannot_pin() {
    let n = notes(&wide_dedicated("db1"));
    assert!(n[0].contains("cannot pin"), "{n:?}");
    assert!(n.iter().any(|l| l.contains("taskset -c 0-7")), "{n:?}");
    assert!(n.iter().any(|l| l.contains("0->0") && l.contains("7->7")), "{n:?}");
}

/// Starts QEMU (stopped, TCG, no display) with the emitted arguments and
/// asks it over QMP where each vCPU and each memory backend went. Skipped
/// with a notice where QEMU is not installed; CI installs it and sets
/// NUMAPLACE_REQUIRE_TOOLS, so there it fails instead. Both cells are bound
/// to host node 0 because CI machines have one node.
#[test]
fn qemu_accepts_the_arguments_and_builds_the_cells() {
    use std::io::Write;
    if !require_tool("qemu-system-x86_64") {
        return;
    }
    let mut p = wide_dedicated("qmp-check");
    p.nodes = vec![numaplace_topo::NodeId(0)];
    for c in &mut p.guest.cells {
        c.host_node = numaplace_topo::NodeId(0);
        c.memory_bytes = 256 << 20;
    }
    p.guest.threads = 2;
    p.guest.cores = 2;
    let mut child = std::process::Command::new("qemu-system-x86_64")
        .args(args(&p, &QemuOptions::tcg()))
        .args(["-S", "-display", "none", "-nodefaults", "-qmp", "stdio"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start QEMU");
    let script = concat!(
        "{\"execute\":\"qmp_capabilities\"}\n",
        "{\"execute\":\"query-cpus-fast\"}\n",
        "{\"execute\":\"query-memdev\"}\n",
        "{\"execute\":\"quit\"}\n"
    );
    child.stdin.take().expect("stdin").write_all(script.as_bytes()).expect("send QMP");
    let out = child.wait_with_output().expect("QEMU ends after quit");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "QEMU refused the arguments:\n{}", String::from_utf8_lossy(&out.stderr));
    // 8 vCPUs, 4 per guest node, as 2 sockets x 2 cores x 2 threads.
    assert_eq!(text.matches("\"node-id\": 0").count(), 4, "{text}");
    assert_eq!(text.matches("\"node-id\": 1").count(), 4, "{text}");
    assert_eq!(text.matches("\"thread-id\": 1,").count(), 4, "{text}");
    assert_eq!(text.matches("\"policy\": \"bind\"").count(), 2, "{text}");
}

#[test]
fn hot_add_sets_maxcpus_and_devices_become_vfio() {
    let a = args(&hot_add_with_gpu("hot"), &QemuOptions::default());
    assert_eq!(values(&a, "-smp"), ["3,sockets=2,cores=4,threads=1,maxcpus=8"]);
    // Every possible vCPU is in a cell, so a hot-added one has its node.
    assert_eq!(values(&a, "-numa")[..2], ["node,nodeid=0,memdev=m0,cpus=0-3", "node,nodeid=1,memdev=m1,cpus=4-7"]);
    assert_eq!(values(&a, "-device"), ["vfio-pci,host=0000:3b:00.0"]);
}

#[test]
fn a_memoryless_cell_has_no_backend() {
    let a = args(&memoryless_cell("ml"), &QemuOptions::default());
    assert_eq!(values(&a, "-object"), ["memory-backend-ram,id=m0,size=8G,host-nodes=0,policy=bind"]);
    assert_eq!(values(&a, "-numa")[..2], ["node,nodeid=0,memdev=m0,cpus=0-3", "node,nodeid=1,cpus=4-7"]);
}

/// A passed-through device near guest cell 1 sits behind a root port on a
/// `pxb-pcie` whose NUMA node is that cell; without the host's device
/// nodes it stays on the root bus.
#[test]
fn a_device_near_a_cell_sits_behind_an_expander_bus_naming_it() {
    let p = hot_add_with_gpu("pxb");
    let node = p.guest.cells[1].host_node;
    let opts = QemuOptions { device_nodes: vec![("0000:3b:00.0".into(), node)], ..QemuOptions::default() };
    let a = args(&p, &opts);
    let devices: Vec<&str> = a.windows(2).filter(|w| w[0] == "-device").map(|w| w[1].as_str()).collect();
    assert_eq!(
        devices,
        [
            "pxb-pcie,id=pxb0,bus_nr=254,numa_node=1,bus=pcie.0",
            "pcie-root-port,id=pxb0p0,bus=pxb0,chassis=100,addr=0x0",
            "vfio-pci,host=0000:3b:00.0,bus=pxb0p0",
        ]
    );
    let plain = args(&p, &QemuOptions::default());
    assert!(plain.iter().any(|x| x == "vfio-pci,host=0000:3b:00.0"));
    assert!(!plain.iter().any(|x| x.starts_with("pxb-pcie")));
}

/// A cell backed by a hidden HBM tier gets one backend bound to every
/// node holding its memory (`host-nodes=0,host-nodes=2`), and listed
/// cells one `cpus=` per vCPU of theirs, with dies as the planner gave.
#[test]
fn hidden_tiers_bind_every_backing_node_and_listed_cells_repeat_cpus() {
    let a = args(&hidden_tier("hbm"), &QemuOptions::default());
    assert_eq!(
        values(&a, "-object"),
        [
            "memory-backend-ram,id=m0,size=4G,host-nodes=0,host-nodes=2,policy=bind",
            "memory-backend-ram,id=m1,size=4G,host-nodes=3,policy=bind"
        ]
    );
    assert_eq!(values(&a, "-numa")[..2], ["node,nodeid=0,memdev=m0,cpus=0-3", "node,nodeid=1,memdev=m1,cpus=4-7"]);
    let a = args(&interleaved("nova"), &QemuOptions::default());
    assert_eq!(values(&a, "-smp"), ["8,sockets=1,dies=8,cores=1,threads=1,maxcpus=8"]);
    assert_eq!(
        values(&a, "-numa")[..2],
        ["node,nodeid=0,memdev=m0,cpus=0,cpus=2,cpus=4,cpus=6", "node,nodeid=1,memdev=m1,cpus=1,cpus=3,cpus=5,cpus=7"]
    );
}
