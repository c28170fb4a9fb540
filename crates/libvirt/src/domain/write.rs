//! A libvirt domain XML for a planned VM: the pinning (`<vcpu>`,
//! `<cputune>`), the memory binding (`<numatune>`, `<memoryBacking>`) and
//! the guest topology (`<cpu>` with `<topology>` and `<numa>` cells and
//! their distances), in a complete domain that `virsh define` accepts.
//!
//! libvirt takes the guest's memory size from the cells and ignores a
//! different `<memory>` (GUEST-TESTING.md); `<memory>` is written as the
//! cell sum so the file says what the guest will get.
//!
//! The NUMA elements are also written one by one (`vcpu_element`,
//! `cputune_lines`, `numatune_lines`, `cpu_children`, `hugepages_element`,
//! `block`), at any indentation: `lint --fix` splices them into a user's
//! own domain, and one writer keeps the two outputs from drifting apart.
//!
//! A test guest (`verify`) gets direct kernel boot, its console in a file
//! and no restart as typed [`Boot`] options, not as edits of the text.

use numaplace_emit::arch;
use numaplace_emit::pcie::Expander;
use numaplace_plan::{CpuMode, MemoryMode, Placement};
use numaplace_topo::text::xml_escape as escape;
use numaplace_topo::{Arch, CpuSet, NodeId, Topology};
use std::fmt::Write;
use std::path::PathBuf;

/// The hypervisor libvirt should use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DomainType {
    /// Hardware virtualisation (`<domain type='kvm'>`).
    #[default]
    Kvm,
    /// QEMU software emulation (TCG), for test guests on hosts without
    /// working KVM.
    Qemu,
}

/// The CPU model the guest sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum GuestCpu {
    /// The host CPU passed through (production).
    #[default]
    HostPassthrough,
    /// `qemu64` with the GenuineIntel vendor: under TCG this is the model
    /// that keeps SMT siblings visible to the guest (other models and the
    /// AMD default drop them).
    Qemu64Intel,
}

/// How the domain is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LibvirtOptions {
    /// `kvm` or `qemu`.
    pub domain_type: DomainType,
    /// Guest CPU model.
    pub cpu: GuestCpu,
    /// Machine type (`q35`; on a host of another architecture, `q35`
    /// stands for that architecture's own: [`numaplace_emit::arch::target`]).
    pub machine: String,
    /// The host's architecture (see [`LibvirtOptions::for_host`]): what
    /// the domain is emulated as. Callers check it with
    /// [`numaplace_emit::arch::target`] first; for one it refuses, the domain names
    /// that architecture with `machine`, which libvirt then refuses.
    pub arch: Arch,
    /// The host's CPUs per node (see [`LibvirtOptions::for_host`]). A
    /// shared VM spanning nodes needs them: each vCPU floats over its own
    /// cell's host node, or the guest's NUMA cells would not match where
    /// its vCPUs run. Without them such a VM gets no per-vCPU pins.
    pub node_cpus: Vec<(NodeId, CpuSet)>,
    /// The host's passthrough devices and their nodes (see
    /// [`LibvirtOptions::for_host`]): a device the planner had to leave
    /// away from the VM's vCPUs is marked as planned so in `<metadata>`,
    /// and `lint` reports it as the deliberate choice it was.
    pub device_nodes: Vec<(String, NodeId)>,
    /// The host's cores of two or more threads (see
    /// [`LibvirtOptions::for_host`]): vCPUs the planner put on sibling
    /// threads of one core (`compact`, or no whole core left) are counted
    /// in `<metadata>` so `lint` knows the pairing was planned.
    pub siblings: Vec<CpuSet>,
    /// Direct kernel boot with the console to a file, for a test guest
    /// (`verify`); `None` for a VM that boots its own disk.
    pub boot: Option<Boot>,
    /// For a test guest (`verify`): emulated devices (virtio-rng), one per
    /// (device, guest cell), each behind that cell's expander bus where
    /// the passed-through device would be, in place of the placement's
    /// devices; so the guest boots without the host's devices and still
    /// shows which cell it puts each in. Empty: the placement's devices.
    pub stand_ins: Vec<(String, u32)>,
}

/// A guest booted straight into a kernel, its serial console written to a
/// file, run once: what `verify` boots under libvirt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Boot {
    /// The kernel image (`<os><kernel>`).
    pub kernel: PathBuf,
    /// The initramfs (`<os><initrd>`).
    pub initrd: PathBuf,
    /// The kernel command line (`<os><cmdline>`).
    pub cmdline: String,
    /// The file the first serial port writes to, in place of a pty.
    pub serial_log: PathBuf,
}

impl Default for LibvirtOptions {
    fn default() -> Self {
        LibvirtOptions {
            domain_type: DomainType::Kvm,
            cpu: GuestCpu::HostPassthrough,
            machine: "q35".to_string(),
            arch: Arch::X86_64,
            node_cpus: Vec::new(),
            device_nodes: Vec::new(),
            siblings: Vec::new(),
            boot: None,
            stand_ins: Vec::new(),
        }
    }
}

impl LibvirtOptions {
    /// The options for a software-emulated test guest: domain type `qemu`
    /// and the `qemu64`/GenuineIntel CPU.
    pub fn tcg() -> LibvirtOptions {
        LibvirtOptions { domain_type: DomainType::Qemu, cpu: GuestCpu::Qemu64Intel, ..LibvirtOptions::default() }
    }

    /// The same options with the CPUs of each node of the host the VMs
    /// were planned on.
    pub fn for_host(mut self, topology: &Topology) -> LibvirtOptions {
        self.arch = topology.arch().clone();
        self.node_cpus = topology.nodes().iter().map(|n| (n.id, n.cpus.clone())).collect();
        self.device_nodes =
            topology.devices().iter().filter_map(|d| d.node.map(|n| (d.address.to_ascii_lowercase(), n))).collect();
        self.siblings = topology.cores().iter().filter(|c| c.cpus.len() > 1).map(|c| c.cpus.clone()).collect();
        self
    }
}

/// Indentation of the elements written: the level of the domain's
/// children and one step more. numaplace writes two spaces; `lint --fix`
/// passes the file's own so a spliced element matches its neighbours.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Indent {
    /// Indent of the domain's children.
    pub base: String,
    /// One level more.
    pub step: String,
}

impl Default for Indent {
    fn default() -> Self {
        Indent { base: "  ".to_string(), step: "  ".to_string() }
    }
}

impl Indent {
    /// The indent `depth` levels below the domain's children.
    pub fn at(&self, depth: usize) -> String {
        let mut s = self.base.clone();
        for _ in 0..depth {
            s.push_str(&self.step);
        }
        s
    }
}

/// KiB, rounded up: libvirt's memory unit, and a size must never shrink
/// below what was planned.
fn kib(bytes: u64) -> u64 {
    bytes.div_ceil(1024)
}

/// The domain XML for one placement: its resources (name, numaplace's
/// mark, memory, vCPUs, pinning, binding), the machine and its OS, the
/// guest CPU with its cells, and the devices.
pub fn domain_xml(p: &Placement, opts: &LibvirtOptions) -> String {
    let ind = Indent::default();
    let mut x = String::new();
    // Writing to a String cannot fail; the results are ignored throughout.
    let kind = match opts.domain_type {
        DomainType::Kvm => "kvm",
        DomainType::Qemu => "qemu",
    };
    let _ = writeln!(x, "<domain type='{kind}'>");
    write_resources(&mut x, p, opts, &ind);
    let target = arch::target(&opts.arch);
    let (arch_name, x86, maximum) = match &target {
        Ok(t) => (t.arch, t.x86_features, t.tcg_maximum_cpu),
        Err(e) => (e.arch.as_str(), false, false),
    };
    let machine = write_machine(&mut x, p, opts, &target);
    let _ = writeln!(x, "  <os>");
    // libvirt picks the emulator for the architecture (qemu-system-ppc64
    // for ppc64le) from its capabilities; its path differs by distribution.
    let _ = writeln!(x, "    <type arch='{}' machine='{}'>hvm</type>", escape(arch_name), escape(machine));
    if let Some(boot) = &opts.boot {
        let _ = writeln!(x, "    <kernel>{}</kernel>", escape(&boot.kernel.to_string_lossy()));
        let _ = writeln!(x, "    <initrd>{}</initrd>", escape(&boot.initrd.to_string_lossy()));
        let _ = writeln!(x, "    <cmdline>{}</cmdline>", escape(&boot.cmdline));
    }
    let _ = writeln!(x, "  </os>");
    if x86 {
        // Without ACPI the guest sees one node (no SRAT) and cannot power off.
        let _ = writeln!(x, "  <features>");
        let _ = writeln!(x, "    <acpi/>");
        let _ = writeln!(x, "    <apic/>");
        let _ = writeln!(x, "  </features>");
    }
    let (cpu_attrs, mut cpu_lines) = match opts.cpu {
        GuestCpu::HostPassthrough => (" mode='host-passthrough' check='none'", Vec::new()),
        // qemu64 is an x86 model: elsewhere the emulator's most capable
        // CPU, or the machine's default where libvirt refuses that
        // (arch::Target::tcg_maximum_cpu).
        GuestCpu::Qemu64Intel if !x86 && maximum => (" mode='maximum' check='none'", Vec::new()),
        GuestCpu::Qemu64Intel if !x86 => ("", Vec::new()),
        GuestCpu::Qemu64Intel => (
            " mode='custom' match='exact' check='none'",
            vec!["<model fallback='allow' vendor_id='GenuineIntel'>qemu64</model>".to_string()],
        ),
    };
    cpu_lines.extend(cpu_children(p, &ind, 0));
    let _ = writeln!(x, "  {}", block("cpu", cpu_attrs, &cpu_lines, &ind, 0));
    let _ = writeln!(x, "  <on_poweroff>destroy</on_poweroff>");
    // A test guest that panics or reboots ends its domain, as `-no-reboot`
    // ends QEMU: restarting it would only run into the time limit.
    let _ = writeln!(x, "  <on_reboot>{}</on_reboot>", if opts.boot.is_some() { "destroy" } else { "restart" });
    let _ = writeln!(x, "  <on_crash>destroy</on_crash>");
    write_devices(&mut x, p, opts, &ind, x86 && machine.contains("q35"));
    let _ = writeln!(x, "</domain>");
    x
}

/// The domain's name, numaplace's mark, memory, vCPUs, pinning and
/// memory binding.
fn write_resources(x: &mut String, p: &Placement, opts: &LibvirtOptions, ind: &Indent) {
    let _ = writeln!(x, "  <name>{}</name>", escape(&p.vm));
    // Who planned the domain and how: lint tells a shared VM overcommitted
    // by request from one whose pins crowd by mistake, and a live host's
    // state reader tells numaplace's domains from others.
    let _ = writeln!(x, "  <metadata>");
    let _ = writeln!(x, "    {}", metadata_element(p, opts));
    let _ = writeln!(x, "  </metadata>");
    let cells = &p.guest.cells;
    let memory_kib: u64 =
        if cells.is_empty() { kib(p.memory_bytes) } else { cells.iter().map(|c| kib(c.memory_bytes)).sum() };
    let _ = writeln!(x, "  <memory unit='KiB'>{memory_kib}</memory>");
    let _ = writeln!(x, "  <currentMemory unit='KiB'>{memory_kib}</currentMemory>");
    if let Some(huge) = hugepages_element(p, ind, 1) {
        let _ = writeln!(x, "  {}", block("memoryBacking", "", &[huge], ind, 0));
    }
    let _ = writeln!(x, "  {}", vcpu_element(p));
    if let Some(vcpus) = vcpus_element(p, ind, 0) {
        let _ = writeln!(x, "  {vcpus}");
    }
    let tune = cputune_lines(p, opts);
    if !tune.is_empty() {
        let _ = writeln!(x, "  {}", block("cputune", "", &tune, ind, 0));
    }
    let numa = numatune_lines(p);
    if !numa.is_empty() {
        let _ = writeln!(x, "  {}", block("numatune", "", &numa, ind, 0));
    }
}

/// The machine type for the placement (with a comment when a memory-less
/// cell forces an older one).
fn write_machine<'a>(
    x: &mut String,
    p: &Placement,
    opts: &'a LibvirtOptions,
    target: &Result<arch::Target, arch::Unsupported>,
) -> &'a str {
    // `q35` is the default of the options: another architecture's own.
    let mut machine = match target {
        Ok(t) if opts.machine == arch::X86_64.machine => t.machine,
        _ => opts.machine.as_str(),
    };
    if has_memoryless_cell(p) {
        // libvirt (9.0 at least) gives each guest cell a memory backend
        // whenever a cell is bound or the machine type needs one, and QEMU
        // refuses a backend of size 0. Up to pc-q35-5.0 QEMU still takes a
        // cell's size without a backend (`-numa node,mem=0`), so a cell
        // with CPUs and no memory can be declared; the memory is then
        // bound as a whole (<numatune><memory>), exact when it all comes
        // from one host node.
        if let Ok(t) = target {
            if machine == t.machine {
                machine = t.memoryless_machine;
            }
        }
        let _ = writeln!(
            x,
            "  <!-- a guest cell without memory (memory-less host node): machine {}, memory bound as a whole -->",
            escape(machine)
        );
    }
    machine
}

/// `<devices>`: the console, no balloon, and the passthrough devices
/// (behind expander buses on q35).
fn write_devices(x: &mut String, p: &Placement, opts: &LibvirtOptions, ind: &Indent, q35: bool) {
    let _ = writeln!(x, "  <devices>");
    match &opts.boot {
        Some(boot) => {
            let _ = writeln!(x, "    <serial type='file'>");
            let _ = writeln!(x, "      <source path='{}'/>", escape(&boot.serial_log.to_string_lossy()));
        }
        None => {
            let _ = writeln!(x, "    <serial type='pty'>");
        }
    }
    let _ = writeln!(x, "      <target port='0'/>");
    let _ = writeln!(x, "    </serial>");
    let _ = writeln!(x, "    <console type='pty'>");
    let _ = writeln!(x, "      <target type='serial' port='0'/>");
    let _ = writeln!(x, "    </console>");
    // A balloon would hand pages back to the host and re-fault them on any
    // node, undoing the binding.
    let _ = writeln!(x, "    <memballoon model='none'/>");
    // On q35, each guest cell that a passed-through device is near gets a
    // PCIe expander bus naming the cell, and the device sits behind a root
    // port on it: the guest's ACPI tables then give the device that cell
    // (`numa_node`), as the host's give its node. Other machines (POWER's
    // pseries) have no expander bus: the device goes on the root bus.
    let stand_in = !opts.stand_ins.is_empty();
    let near = match (q35, stand_in) {
        (false, _) => Vec::new(),
        (true, true) => numaplace_emit::pcie::expanders_for(&opts.stand_ins),
        (true, false) => numaplace_emit::pcie::expanders(p, &opts.device_nodes),
    };
    let (controllers, ports) = expander_controllers(&near);
    for line in controllers {
        let _ = writeln!(x, "    {line}");
    }
    if stand_in {
        for (_, port) in &ports {
            let _ = writeln!(x, "    {}", stand_in_element(*port, ind, 1));
        }
    }
    for d in p.devices.iter().filter(|_| !stand_in) {
        let at = ports.iter().find(|(a, _)| a == d).map(|(_, port)| *port);
        let _ = writeln!(x, "    {}", hostdev_element_at(d, at, ind, 1));
    }
    let _ = writeln!(x, "  </devices>");
}

/// An element holding `lines`, each one level in (`depth` is the
/// element's own level); the first line carries no indent, so the caller
/// places it.
pub fn block(name: &str, attrs: &str, lines: &[String], ind: &Indent, depth: usize) -> String {
    let mut x = String::new();
    let _ = write!(x, "<{name}{attrs}>");
    let inner = ind.at(depth + 1);
    for l in lines {
        let _ = write!(x, "\n{inner}{l}");
    }
    let _ = write!(x, "\n{}</{name}>", ind.at(depth));
    x
}

/// `<vcpu>`: the count (with CPU hot-add, the maximum, and `current`
/// those online at boot), and the CPUs all vCPUs may use.
pub fn vcpu_element(p: &Placement) -> String {
    let n = p.vcpus.len().max(p.guest.cells.iter().map(|c| c.vcpus.len()).sum());
    let current = match p.online_vcpus {
        Some(on) if (on as usize) < n => format!(" current='{on}'"),
        _ => String::new(),
    };
    let cpus = p.run_cpus();
    if cpus.is_empty() {
        format!("<vcpu placement='static'{current}>{n}</vcpu>")
    } else {
        format!("<vcpu placement='static'{current} cpuset='{cpus}'>{n}</vcpu>")
    }
}

/// `<vcpus>` (at `depth`), with CPU hot-add only: the vCPUs online at
/// boot are enabled and stay (`hotpluggable='no'`, as libvirt requires of
/// vCPU 0), the rest are disabled and may be plugged in later; each is
/// already pinned by `<vcpupin>` and placed in a guest cell.
pub fn vcpus_element(p: &Placement, ind: &Indent, depth: usize) -> Option<String> {
    let online = p.online_vcpus? as usize;
    let n = p.vcpus.len();
    if online >= n {
        return None;
    }
    let lines: Vec<String> = (0..n)
        .map(|i| {
            if i < online {
                format!("<vcpu id='{i}' enabled='yes' hotpluggable='no'/>")
            } else {
                format!("<vcpu id='{i}' enabled='no' hotpluggable='yes'/>")
            }
        })
        .collect();
    Some(block("vcpus", "", &lines, ind, depth))
}

/// The controller index of the first expander bus: the indexes below it
/// stay free for the controllers libvirt numbers itself.
const FIRST_EXPANDER_INDEX: u32 = 100;

/// The `<controller>` lines of the expander buses ([`numaplace_emit::pcie`])
/// and, for each device behind one, the controller index of its root port.
fn expander_controllers(near: &[Expander]) -> (Vec<String>, Vec<(String, u32)>) {
    let mut lines = Vec::new();
    let mut ports = Vec::new();
    for (k, e) in near.iter().enumerate() {
        let index = FIRST_EXPANDER_INDEX + 16 * k as u32;
        lines.push(format!(
            "<controller type='pci' index='{index}' model='pcie-expander-bus'><target busNr='{}'><node>{}</node></target></controller>",
            e.bus_nr, e.cell
        ));
        for (j, d) in e.devices.iter().enumerate() {
            let port = index + 1 + j as u32;
            lines.push(format!(
                "<controller type='pci' index='{port}' model='pcie-root-port'><address type='pci' domain='0x0000' bus='0x{index:02x}' slot='0x{j:02x}' function='0x0'/></controller>"
            ));
            ports.push((d.clone(), port));
        }
    }
    (lines, ports)
}

/// The guest address (`<address>`) of a device behind root port `bus`.
fn behind_port(bus: u32) -> String {
    format!("<address type='pci' domain='0x0000' bus='0x{bus:02x}' slot='0x00' function='0x0'/>")
}

/// A virtio-rng device behind root port `bus`: a test guest's stand-in
/// for a passed-through device ([`LibvirtOptions::stand_ins`]).
fn stand_in_element(bus: u32, ind: &Indent, depth: usize) -> String {
    let lines = ["<backend model='random'>/dev/urandom</backend>".to_string(), behind_port(bus)];
    block("rng", " model='virtio'", &lines, ind, depth)
}

/// `<hostdev>` (at `depth`) passing PCI device `address`
/// (`dddd:bb:ss.f`) through with VFIO; libvirt detaches it from its host
/// driver (`managed='yes'`).
pub fn hostdev_element(address: &str, ind: &Indent, depth: usize) -> String {
    hostdev_element_at(address, None, ind, depth)
}

/// [`hostdev_element`], behind root port `port` (a controller index) when
/// given.
fn hostdev_element_at(address: &str, port: Option<u32>, ind: &Indent, depth: usize) -> String {
    let (domain, rest) = address.split_once(':').unwrap_or(("0000", address));
    let (bus, rest) = rest.split_once(':').unwrap_or(("00", rest));
    let (slot, function) = rest.split_once('.').unwrap_or((rest, "0"));
    let source = block(
        "source",
        "",
        &[format!(
            "<address domain='0x{}' bus='0x{}' slot='0x{}' function='0x{}'/>",
            escape(domain),
            escape(bus),
            escape(slot),
            escape(function)
        )],
        ind,
        depth + 1,
    );
    let mut lines = vec![source];
    lines.extend(port.map(behind_port));
    block("hostdev", " mode='subsystem' type='pci' managed='yes'", &lines, ind, depth)
}

/// The children of `<cputune>` (none: leave the element out). A dedicated
/// vCPU is pinned to its PU, a mixed VM's floating vCPU to its node's
/// shared pool; a shared VM on one node floats over
/// `<vcpu cpuset>`, and a shared VM over several nodes has each vCPU float
/// over its own node's CPUs of that set (given the host's CPUs in
/// `opts`).
pub fn cputune_lines(p: &Placement, opts: &LibvirtOptions) -> Vec<String> {
    let mut out = Vec::new();
    match p.cpu_mode {
        CpuMode::Dedicated => {
            for v in &p.vcpus {
                match p.floats(v.vcpu) {
                    // A mixed VM's floating vCPU: its node's shared pool.
                    Some(set) => out.push(format!("<vcpupin vcpu='{}' cpuset='{set}'/>", v.vcpu)),
                    None => out.push(format!("<vcpupin vcpu='{}' cpuset='{}'/>", v.vcpu, v.pu)),
                }
            }
        }
        CpuMode::Shared if p.nodes.len() > 1 && !opts.node_cpus.is_empty() => {
            // Each node's share of the floating set, worked out once.
            let floats: Vec<(NodeId, String)> = opts
                .node_cpus
                .iter()
                .filter(|(id, _)| p.nodes.contains(id))
                .map(|(id, cpus)| (*id, p.cpuset.intersection(cpus)))
                .filter(|(_, set)| !set.is_empty())
                .map(|(id, set)| (id, set.to_string()))
                .collect();
            for v in &p.vcpus {
                if let Some((_, set)) = floats.iter().find(|(id, _)| *id == v.node) {
                    out.push(format!("<vcpupin vcpu='{}' cpuset='{set}'/>", v.vcpu));
                }
            }
        }
        CpuMode::Shared => {}
    }
    if !p.emulator.is_empty() {
        out.push(format!("<emulatorpin cpuset='{}'/>", p.emulator));
    }
    out
}

/// numaplace's mark, a child of `<metadata>`: who planned the domain, its
/// CPU mode, and the passthrough devices it left on nodes without the
/// VM's vCPUs (`remote-devices`, space-separated, only when there are
/// some): the planner notes why (a preferred device whose node could not
/// hold the VM, or a required one whose node's CPUs were taken). A shared
/// or mixed VM's mark also lists the CPU each vCPU is counted against
/// (`vcpu-pus`), and an overcommitting shared VM's the memory charged per
/// node (`charged`, `NODE:BYTES` pairs).
pub fn metadata_element(p: &Placement, opts: &LibvirtOptions) -> String {
    let cpu = match p.cpu_mode {
        CpuMode::Dedicated if p.is_mixed() => "mixed",
        CpuMode::Dedicated => "dedicated",
        CpuMode::Shared => "shared",
    };
    let mut attrs = format!("cpu='{cpu}'");
    let paired = sibling_vcpus(p, &opts.siblings);
    if paired > 0 {
        let _ = write!(attrs, " sibling-vcpus='{paired}'");
    }
    let remote = remote_devices(p, &opts.device_nodes);
    if !remote.is_empty() {
        let _ = write!(attrs, " remote-devices='{}'", escape(&remote.join(" ")));
    }
    // What the definition alone does not say, so a host read back counts
    // the VM as planned: the CPU each vCPU of a shared or mixed VM is
    // counted against (its floating vCPUs could be counted on any CPU of
    // their set), and the memory an overcommitting shared VM is charged.
    if p.cpu_mode == CpuMode::Shared || p.is_mixed() {
        let pus: Vec<String> = p.vcpus.iter().map(|v| v.pu.to_string()).collect();
        let _ = write!(attrs, " vcpu-pus='{}'", pus.join(" "));
    }
    if !p.charged.is_empty() {
        let charged: Vec<String> = p.charged.iter().map(|(n, b)| format!("{}:{b}", n.0)).collect();
        let _ = write!(attrs, " charged='{}'", charged.join(" "));
    }
    format!("<numaplace:vm xmlns:numaplace='{METADATA_NS}' {attrs}/>")
}

/// How many of a dedicated placement's vCPUs share a core with another
/// of its vCPUs (0 for shared VMs, whose vCPUs float).
pub fn sibling_vcpus(p: &Placement, siblings: &[CpuSet]) -> usize {
    if p.cpu_mode != CpuMode::Dedicated {
        return 0;
    }
    let pins: CpuSet = p.vcpus.iter().map(|v| v.pu).collect();
    p.vcpus
        .iter()
        .filter(|v| {
            siblings.iter().any(|core| core.contains(v.pu) && core.iter().any(|o| o != v.pu && pins.contains(o)))
        })
        .count()
}

/// The placement's devices on nodes where none of its vCPUs run, as
/// written in the placement; devices whose node is unknown are left out.
pub fn remote_devices<'p>(p: &'p Placement, device_nodes: &[(String, NodeId)]) -> Vec<&'p str> {
    p.devices
        .iter()
        .filter(|address| {
            let node = device_nodes.iter().find(|(a, _)| a.eq_ignore_ascii_case(address)).map(|d| d.1);
            node.is_some_and(|n| !p.vcpus.iter().any(|v| v.node == n))
        })
        .map(String::as_str)
        .collect()
}

/// The XML namespace of numaplace's `<metadata>` element in the domains
/// it writes.
pub const METADATA_NS: &str = "https://numaplace.dev/xmlns/domain/1";

/// The newest q35 machine type whose NUMA cells may be declared without a
/// memory backend (QEMU requires backends from 5.1 on).
pub const MEMORYLESS_MACHINE: &str = arch::X86_64.memoryless_machine;

/// Whether a guest cell has vCPUs and no memory (it mirrors a memory-less
/// host node).
pub fn has_memoryless_cell(p: &Placement) -> bool {
    p.guest.cells.len() > 1 && p.guest.cells.iter().any(|c| c.memory_bytes == 0)
}

/// The children of `<numatune>` (none for a placement without nodes).
pub fn numatune_lines(p: &Placement) -> Vec<String> {
    if p.nodes.is_empty() {
        return Vec::new();
    }
    // The nodes the memory comes from: a memory-less node among the VM's
    // nodes holds none of it.
    let mut mem_nodes: CpuSet = p.memory.iter().filter(|m| m.1 > 0).map(|m| m.0 .0).collect();
    if mem_nodes.is_empty() {
        mem_nodes = p.nodes.iter().map(|n| n.0).collect();
    }
    let all = mem_nodes.to_list();
    let mode = match p.memory_mode {
        MemoryMode::Strict => "strict",
        MemoryMode::Interleave => "interleave",
    };
    let mut out = vec![format!("<memory mode='{mode}' nodeset='{all}'/>")];
    if has_memoryless_cell(p) {
        // A per-cell binding makes libvirt give every cell a memory
        // backend, and QEMU refuses one of size 0 (see domain_xml).
        return out;
    }
    for c in p.guest.cells.iter().filter(|c| c.memory_bytes > 0) {
        // Interleaved VMs spread every cell over all their nodes; strict
        // ones keep each cell on the host nodes holding its memory: the
        // node it mirrors, or the HBM or CXL node backing it when the tier
        // is hidden (with its own node's DRAM too when the cell has both:
        // `strict` over the two, where the kernel takes the faulting
        // vCPU's nearest node first, its own DRAM, then the other; a
        // cell's one backend cannot be split by amount). A cell without
        // memory (a memory-less host node) has nothing to bind.
        let set = match p.memory_mode {
            MemoryMode::Strict => c.backing().iter().map(|b| b.0 .0).collect::<CpuSet>().to_list(),
            MemoryMode::Interleave => all.clone(),
        };
        out.push(format!("<memnode cellid='{}' mode='{mode}' nodeset='{set}'/>", c.id));
    }
    out
}

/// `<topology>` and `<numa>`, the children of `<cpu>` (`depth` is
/// `<cpu>`'s own level); the first line of each carries no indent.
pub fn cpu_children(p: &Placement, ind: &Indent, depth: usize) -> Vec<String> {
    let g = &p.guest;
    let mut out = vec![format!(
        "<topology sockets='{}' dies='{}' cores='{}' threads='{}'/>",
        g.sockets.max(1),
        g.dies.max(1),
        g.cores.max(1),
        g.threads.max(1)
    )];
    if g.cells.is_empty() {
        return out;
    }
    let l1 = ind.at(depth + 1);
    let l2 = ind.at(depth + 2);
    let l3 = ind.at(depth + 3);
    let l4 = ind.at(depth + 4);
    let mut numa = String::from("<numa>");
    for c in &g.cells {
        // A memory-only cell has no `cpus` attribute: libvirt (9.0 here)
        // refuses an empty bitmap ("Failed to parse bitmap ''") and takes
        // a cell without one as CPU-less since 6.5; QEMU gets it as
        // `-numa node` without `cpus=` (qemu.rs).
        let _ = write!(numa, "\n{l2}<cell id='{}'", c.id);
        if !c.vcpus.is_empty() {
            let _ = write!(numa, " cpus='{}'", c.vcpus);
        }
        let _ = write!(numa, " memory='{}' unit='KiB'", kib(c.memory_bytes));
        if c.distances.len() == g.cells.len() && g.cells.len() > 1 {
            let _ = write!(numa, ">\n{l3}<distances>");
            for (other, d) in g.cells.iter().zip(&c.distances) {
                let _ = write!(numa, "\n{l4}<sibling id='{}' value='{d}'/>", other.id);
            }
            let _ = write!(numa, "\n{l3}</distances>\n{l2}</cell>");
        } else {
            numa.push_str("/>");
        }
    }
    let _ = write!(numa, "\n{l1}</numa>");
    out.push(numa);
    out
}

/// `<hugepages>` (a child of `<memoryBacking>`, at `depth`), when the
/// placement uses huge pages.
pub fn hugepages_element(p: &Placement, ind: &Indent, depth: usize) -> Option<String> {
    let page = p.hugepage_bytes?;
    let line = if p.guest.cells.is_empty() {
        format!("<page size='{}' unit='KiB'/>", kib(page))
    } else {
        // This nodeset names guest cells, not host nodes.
        let cells: CpuSet = p.guest.cells.iter().filter(|c| c.memory_bytes > 0).map(|c| c.id).collect();
        format!("<page size='{}' unit='KiB' nodeset='{cells}'/>", kib(page))
    };
    Some(block("hugepages", "", &[line], ind, depth))
}

/// Several domains, each preceded by a comment naming the VM, for one
/// stream that a person or `csplit` can cut apart.
pub fn domains_xml(placements: &[&Placement], opts: &LibvirtOptions) -> String {
    let mut out = String::new();
    for (i, p) in placements.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let _ = writeln!(out, "<!-- numaplace: domain {} -->", comment_safe(&p.vm));
        out.push_str(&domain_xml(p, opts));
    }
    out
}

/// Text that can sit inside an XML comment, which may not contain `--`.
fn comment_safe(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if c == '-' && out.ends_with('-') {
            out.push(' ');
        }
        out.push(c);
    }
    out
}
