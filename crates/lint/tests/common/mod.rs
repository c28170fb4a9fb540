//! Shared test helpers: the hosts of docs/background.md's measured cases, built
//! from synthetic descriptions, and fixture loading.

#![allow(dead_code)]

use numaplace_lint::{lint, parse_file, Finding, VmFile};
use numaplace_topo::{Device, DeviceKind, NodeId, Topology};

/// Reads a fixture from `tests/data`.
pub fn fixture(name: &str) -> VmFile {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    parse_file(name, &bytes).unwrap_or_else(|e| panic!("{e}"))
}

fn synthetic(text: &str) -> Topology {
    numaplace_read::synthetic::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// background § CPU hot-add [001]: 2 x 8-core, 2 x 128 GB.
pub fn esxi_2x8() -> Topology {
    synthetic("2 sockets x 8 cores, 128GiB per node")
}

/// background § Guest NUMA topology [000]: 2 x 12-core, 24 threads and 128 GB per node,
/// with a NIC at 0000:3b:00.0 on node 1, 4096 2 MiB huge pages per node
/// and 1 GiB pages supported but none reserved (as sysfs lists them).
pub fn esxi_2x12() -> Topology {
    let t = synthetic("2 sockets x 12 cores x 2 threads, 128GiB per node, hugepages 2MiB:4096, 1GiB:0 per node");
    let mut parts = t.to_parts();
    parts.devices.push(Device {
        address: "0000:3b:00.0".into(),
        kind: DeviceKind::Nic,
        name: Some("ens3f0".into()),
        vendor_device: Some((0x8086, 0x1572)),
        node: Some(NodeId(1)),
    });
    Topology::from_parts(parts).unwrap_or_else(|e| panic!("{e}"))
}

/// background § Memory larger than a node [002]: 16-thread / 96 GB nodes.
pub fn sidadm_96g() -> Topology {
    synthetic("2 sockets x 8 cores x 2 threads, 96GiB per node")
}

/// background § Hyperthread siblings [004]: 2 nodes of 16 cores x 2 threads.
pub fn xapi_2x16() -> Topology {
    synthetic("2 sockets x 16 cores x 2 threads, 256GiB per node")
}

/// Rule ids found for fixtures on a host, sorted and deduplicated.
pub fn rule_ids(findings: &[Finding]) -> Vec<&'static str> {
    let mut ids: Vec<&'static str> = findings.iter().map(|f| f.rule).collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Lints fixtures on a host.
pub fn check(names: &[&str], host: &Topology) -> Vec<Finding> {
    let files: Vec<VmFile> = names.iter().map(|n| fixture(n)).collect();
    lint(&files, host)
}

/// A host built by a test.
pub type HostFn = fn() -> Topology;

/// Fixture(s), host, and the rules that must fire (exactly).
pub type Scenario = (Vec<&'static str>, HostFn, Vec<&'static str>);

/// Every scenario.
pub fn scenarios() -> Vec<Scenario> {
    vec![
        (vec!["hotadd-16vcpu-200g.xml"], esxi_2x8, vec!["cpu-hotadd-wide"]),
        (vec!["hotadd-16vcpu-200g.vmx"], esxi_2x8, vec!["cpu-hotadd-wide"]),
        (vec!["sockets-3x8-cells.xml"], esxi_2x12, vec!["guest-cells-uneven", "partial-pinning"]),
        (vec!["esxi-24vcpu-3x8.vmx"], esxi_2x12, vec!["guest-cells-uneven"]),
        (vec!["esxi-20vcpu-5x4.vmx"], esxi_2x12, vec!["guest-cells-uneven"]),
        // 32 vCPUs on 24 cores also share siblings.
        (vec!["esxi-32vcpu-32x1.vmx"], esxi_2x12, vec!["guest-cells-uneven", "smt-contention"]),
        (vec!["six-cells-24vcpu.xml"], esxi_2x12, vec!["guest-cells-per-node"]),
        (vec!["esxi-24vcpu-6x4.vmx"], esxi_2x12, vec!["guest-cells-per-node"]),
        (vec!["sockets-3x8-two-cells.xml"], esxi_2x12, vec!["socket-spans-cells"]),
        (vec!["esxi-maxper-socket-span.vmx"], esxi_2x12, vec!["socket-spans-cells"]),
        // No <numa>: the guest sees one node over the two it needs.
        (vec!["odd-17vcpu.xml"], esxi_2x12, vec!["guest-cells-missing", "odd-vcpus-wide"]),
        (vec!["odd-17vcpu.vmx"], esxi_2x12, vec!["odd-vcpus-wide"]),
        (vec!["sidadm-8vcpu-96g.xml"], sidadm_96g, vec!["memory-exceeds-node"]),
        (vec!["sidadm-8vcpu-96g.vmx"], sidadm_96g, vec!["memory-exceeds-node"]),
        (vec!["xapi-32vcpu-one-node.xml"], xapi_2x16, vec!["smt-contention"]),
        (vec!["xapi-32vcpu-one-node.vmx"], xapi_2x16, vec!["smt-contention"]),
        (vec!["vcpu-spans-nodes.xml"], esxi_2x12, vec!["vcpu-spans-nodes"]),
        (vec!["partial-pinning.xml"], esxi_2x12, vec!["partial-pinning"]),
        (vec!["numatune-remote.xml"], esxi_2x12, vec!["memory-binding-remote"]),
        (vec!["hugepages-1g.xml"], esxi_2x12, vec!["hugepages-missing", "vm-exceeds-host"]),
        (vec!["device-remote.xml"], esxi_2x12, vec!["device-remote"]),
        (vec!["device-remote.vmx"], esxi_2x12, vec!["device-remote"]),
        (vec!["overlap-a.xml", "overlap-b.xml"], esxi_2x12, vec!["pinning-overlap"]),
        (vec!["request-hotadd.json"], esxi_2x12, vec!["cpu-hotadd-wide"]),
    ]
}

/// Fixtures that must be clean, with their host.
pub fn clean() -> Vec<(&'static str, HostFn)> {
    vec![
        ("clean-24vcpu-pinned.xml", esxi_2x12),
        ("clean-small.xml", esxi_2x12),
        ("clean-small.xml", esxi_2x8),
        ("clean-24vcpu-2x12.vmx", esxi_2x12),
        ("clean-small.vmx", sidadm_96g),
        ("request-clean.json", esxi_2x12),
        // 96 GB fits a 128 GB node (background § Memory larger than a node: those VMs were local).
        ("sidadm-8vcpu-96g.xml", esxi_2x12),
        // Hot-add on a VM that fits one node does no harm (background § CPU hot-add).
        ("hotadd-16vcpu-200g.vmx", xapi_2x16),
    ]
}

/// A libvirt domain as `virsh dumpxml` prints it, written by a test:
/// `tune` (pins, bindings, `<cpu>`, `<memoryBacking>`) goes after
/// `<vcpu>`, `devices` inside `<devices>`.
pub fn domain(name: &str, vcpus: u32, memory_gib: u64, tune: &str, devices: &str) -> String {
    let kib = memory_gib << 20;
    let cpu =
        if tune.contains("<cpu") { "" } else { "  <cpu mode='host-passthrough' check='none' migratable='on'/>\n" };
    format!(
        "<domain type='kvm'>
  <name>{name}</name>
  <memory unit='KiB'>{kib}</memory>
  <currentMemory unit='KiB'>{kib}</currentMemory>
  <vcpu placement='static'>{vcpus}</vcpu>
{tune}  <os>
    <type arch='x86_64' machine='pc-q35-6.2'>hvm</type>
    <boot dev='hd'/>
  </os>
{cpu}  <on_poweroff>destroy</on_poweroff>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source file='/var/lib/libvirt/images/{name}.qcow2'/>
      <target dev='vda' bus='virtio'/>
    </disk>
{devices}  </devices>
</domain>
"
    )
}

/// `<cputune>` pinning vCPU i to `cpus[i]`.
pub fn pins(cpus: &[u32]) -> String {
    let lines: String =
        cpus.iter().enumerate().map(|(v, c)| format!("    <vcpupin vcpu='{v}' cpuset='{c}'/>\n")).collect();
    format!("  <cputune>\n{lines}  </cputune>\n")
}

/// Parses a file written by a test.
pub fn file(name: &str, text: &str) -> VmFile {
    parse_file(name, text.as_bytes()).unwrap_or_else(|e| panic!("{e}"))
}

/// The 72-CPU host of issue 15's cases: 2 nodes of 18 cores x 2 threads
/// and 125 GiB, 1 GiB huge pages supported but none reserved.
pub fn host_72() -> Topology {
    synthetic("2 sockets x 18 cores x 2 threads, 125GiB per node, hugepages 1GiB:0, 2MiB:0 per node")
}
