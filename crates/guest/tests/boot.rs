//! Boots a real guest kernel under QEMU (software emulation) with the test
//! initramfs numaplace builds, and checks the report end to end. Needs
//! `qemu-system-x86_64` and the distribution's package repository (the
//! kernel is fetched once into the cache); `scripts/test` installs QEMU.
//! Without QEMU the test says SKIPPED, or fails under
//! NUMAPLACE_REQUIRE_TOOLS (as in CI).

use numaplace_guest::testing::require_tool;
use numaplace_guest::{boot, check, prepare, report};
use numaplace_plan::{GuestCell, GuestTopology};
use numaplace_topo::NodeId;
use std::time::Duration;

fn cache() -> std::path::PathBuf {
    std::env::var_os("NUMAPLACE_CACHE_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("numaplace-cache"))
}

#[test]
fn a_two_cell_smt_guest_reports_its_topology() {
    if !require_tool("qemu-system-x86_64") {
        return;
    }
    let assets = prepare::prepare(&cache()).expect("kernel and initramfs");
    let mut args: Vec<String> =
        "-accel tcg,thread=single -cpu qemu64,vendor=GenuineIntel -smp 4,sockets=2,cores=1,threads=2 -m 512M \
        -object memory-backend-ram,id=m0,size=256M -object memory-backend-ram,id=m1,size=256M \
        -numa node,nodeid=0,memdev=m0,cpus=0-1 -numa node,nodeid=1,memdev=m1,cpus=2-3 \
        -numa dist,src=0,dst=1,val=21 -numa dist,src=1,dst=0,val=21"
            .split_whitespace()
            .map(String::from)
            .collect();
    args.extend(boot::boot_args(&assets.kernel, &assets.initrd));
    let serial = boot::run_to_end("qemu-system-x86_64", &args, Duration::from_secs(120)).expect("boot");
    let seen = report::parse(&serial).expect("report");
    let cell = |id: u32, cpus: &str, distances: Vec<u32>| GuestCell {
        id,
        vcpus: cpus.parse().expect("list"),
        memory_bytes: 256 << 20,
        host_node: NodeId(id),
        distances,
        memory_nodes: Vec::new(),
    };
    let plan = GuestTopology {
        sockets: 2,
        dies: 1,
        cores: 1,
        threads: 2,
        cells: vec![cell(0, "0-1", vec![10, 21]), cell(1, "2-3", vec![21, 10])],
    };
    let verdict = check::compare(&plan, None, &seen);
    assert!(verdict.passed(), "{:?}", verdict.mismatches().collect::<Vec<_>>());
}
