//! QEMU command-line arguments for a planned VM: `-smp` with the guest's
//! sockets, cores and threads, one memory backend per guest cell bound to
//! its host node(s), `-numa node` per cell and `-numa dist` for every
//! ordered pair of cells.
//!
//! QEMU has no option to pin a vCPU thread to a host CPU: pinning is done
//! from outside, by libvirt (`<vcpupin>`) or by `taskset` on each vCPU
//! thread (their ids come from QMP `query-cpus-fast`). [`notes`] says so
//! for every VM, with the commands to use.

use crate::arch::{target, Unsupported, X86_64};
use numaplace_plan::{CpuMode, MemoryMode, Placement};
use numaplace_topo::{Arch, CpuSet};

/// How QEMU runs the guest: the workspace's one accelerator type.
pub use numaplace_topo::Accel;

/// The CPU model the guest sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum QemuCpu {
    /// `-cpu host`.
    #[default]
    Host,
    /// `-cpu qemu64,vendor=GenuineIntel`: keeps SMT siblings visible under
    /// TCG.
    Qemu64Intel,
    /// `-cpu max`: the emulator's most capable CPU, for TCG guests of
    /// architectures other than x86 (qemu64 is an x86 model).
    Max,
}

/// How the arguments are written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QemuOptions {
    /// Accelerator.
    pub accel: Accel,
    /// CPU model.
    pub cpu: QemuCpu,
    /// Machine type.
    pub machine: String,
    /// The program name used by [`command_line`].
    pub program: String,
    /// hugetlbfs mount for huge-page backed VMs; `None` picks
    /// `/dev/hugepages` for 2 MiB pages and `/dev/hugepages1G` for 1 GiB.
    pub hugetlbfs: Option<String>,
    /// The host's passthrough devices and their nodes: a device near a
    /// guest cell goes behind a `pxb-pcie` naming it ([`crate::pcie`]), on
    /// q35; empty: every device on the root bus, as before.
    pub device_nodes: Vec<(String, numaplace_topo::NodeId)>,
}

impl Default for QemuOptions {
    fn default() -> Self {
        QemuOptions {
            accel: Accel::Kvm,
            cpu: QemuCpu::Host,
            machine: X86_64.machine.to_string(),
            program: X86_64.emulator.to_string(),
            hugetlbfs: None,
            device_nodes: Vec::new(),
        }
    }
}

impl QemuOptions {
    /// The options for guests run by `accel`.
    pub fn for_accel(accel: Accel) -> QemuOptions {
        match accel {
            Accel::Kvm => QemuOptions::default(),
            Accel::Tcg => QemuOptions::tcg(),
        }
    }

    /// The options for a software-emulated test guest.
    pub fn tcg() -> QemuOptions {
        QemuOptions { accel: Accel::Tcg, cpu: QemuCpu::Qemu64Intel, ..QemuOptions::default() }
    }

    /// The same options with the devices of the host the VM was planned
    /// on and their nodes.
    pub fn with_devices(mut self, topology: &numaplace_topo::Topology) -> QemuOptions {
        self.device_nodes =
            topology.devices().iter().filter_map(|d| d.node.map(|n| (d.address.to_ascii_lowercase(), n))).collect();
        self
    }

    /// The same options for a host of `arch`: its machine type (where the
    /// machine is the default `q35`), its emulator (where the program is
    /// the default `qemu-system-x86_64`) and, for TCG, a CPU model it has;
    /// or the refusal for an architecture numaplace writes no arguments
    /// for.
    pub fn for_arch(mut self, arch: &Arch) -> Result<QemuOptions, Unsupported> {
        let t = target(arch)?;
        if self.machine == X86_64.machine {
            self.machine = t.machine.to_string();
        }
        if self.program == X86_64.emulator {
            self.program = t.emulator.to_string();
        }
        if self.cpu == QemuCpu::Qemu64Intel && !t.x86_features {
            self.cpu = QemuCpu::Max;
        }
        Ok(self)
    }
}

/// A size as QEMU reads it, exact: the largest binary suffix that divides
/// it, else bytes (`B`, which `-m` needs since its default unit is MiB).
fn size(bytes: u64) -> String {
    for (suffix, unit) in [("T", 1u64 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)] {
        if bytes >= unit && bytes.checked_rem(unit) == Some(0) {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    format!("{bytes}B")
}

fn hugetlbfs(page: u64, opts: &QemuOptions) -> String {
    if let Some(dir) = &opts.hugetlbfs {
        return dir.clone();
    }
    if page == 2 << 20 {
        "/dev/hugepages".to_string()
    } else {
        format!("/dev/hugepages{}", size(page))
    }
}

/// The arguments (without the program name).
pub fn args(p: &Placement, opts: &QemuOptions) -> Vec<String> {
    let mut a: Vec<String> = Vec::new();
    let mut push = |flag: &str, value: String| {
        a.push(flag.to_string());
        a.push(value);
    };
    // QEMU splits -name on commas; a doubled comma is a literal one.
    push("-name", format!("guest={}", p.vm.replace(',', ",,")));
    push("-machine", opts.machine.clone());
    push("-accel", opts.accel.name().to_string());
    push(
        "-cpu",
        match opts.cpu {
            QemuCpu::Host => "host".to_string(),
            QemuCpu::Qemu64Intel => "qemu64,vendor=GenuineIntel".to_string(),
            QemuCpu::Max => "max".to_string(),
        },
    );
    let g = &p.guest;
    let cells_vcpus: usize = g.cells.iter().map(|c| c.vcpus.len()).sum();
    let vcpus = p.vcpus.len().max(cells_vcpus);
    // With CPU hot-add, the first `online` vCPUs boot; the rest can be
    // added with device_add, each already in its guest cell.
    let online = p.online_vcpus.map_or(vcpus, |n| (n as usize).min(vcpus));
    // dies= only when a socket holds several (QEMU's default is 1).
    let dies = if g.dies > 1 { format!(",dies={}", g.dies) } else { String::new() };
    push(
        "-smp",
        format!(
            "{online},sockets={}{dies},cores={},threads={},maxcpus={vcpus}",
            g.sockets.max(1),
            g.cores.max(1),
            g.threads.max(1)
        ),
    );
    let total: u64 = if g.cells.is_empty() { p.memory_bytes } else { g.cells.iter().map(|c| c.memory_bytes).sum() };
    push("-m", size(total));
    for backend in memory_backends(p, opts) {
        push("-object", backend);
    }
    for node in numa_nodes(p) {
        push("-numa", node);
    }
    for (flag, value) in devices(p, opts) {
        push(flag, value);
    }
    if g.cells.len() > 1 {
        for src in &g.cells {
            for (dst, d) in g.cells.iter().zip(&src.distances) {
                if src.id != dst.id {
                    push("-numa", format!("dist,src={},dst={},val={d}", src.id, dst.id));
                }
            }
        }
    }
    a
}

/// One `-object` memory backend per guest cell with memory, bound to the
/// host nodes holding it (or interleaved over all of the VM's).
fn memory_backends(p: &Placement, opts: &QemuOptions) -> Vec<String> {
    let g = &p.guest;
    let mut out = Vec::new();
    let all_nodes: CpuSet = p.nodes.iter().map(|n| n.0).collect();
    // A cell without memory (a memory-less host node) gets no backend:
    // QEMU refuses a size of 0, and a node without memdev is how it is
    // told that a node has CPUs only.
    for c in g.cells.iter().filter(|c| c.memory_bytes > 0) {
        let (nodes, policy) = match p.memory_mode {
            // The nodes holding the cell's memory: its own, or the HBM
            // or CXL backing it when the tier is hidden (both with its
            // DRAM: `bind` fills the faulting vCPU's nearest node first).
            MemoryMode::Strict => (c.backing().iter().map(|b| b.0 .0).collect::<CpuSet>().to_list(), "bind"),
            MemoryMode::Interleave => (all_nodes.to_list(), "interleave"),
        };
        // host-nodes takes a range with `-`; separate pieces repeat the key.
        let host_nodes: Vec<String> = nodes.split(',').map(|r| format!("host-nodes={r}")).collect();
        let backend = match p.hugepage_bytes {
            Some(page) => format!(
                "memory-backend-file,id=m{},size={},mem-path={},prealloc=on,{},policy={policy}",
                c.id,
                size(c.memory_bytes),
                hugetlbfs(page, opts),
                host_nodes.join(",")
            ),
            None => format!(
                "memory-backend-ram,id=m{},size={},{},policy={policy}",
                c.id,
                size(c.memory_bytes),
                host_nodes.join(",")
            ),
        };
        out.push(backend);
    }
    out
}

/// One `-numa node` per guest cell, with its vCPUs.
fn numa_nodes(p: &Placement) -> Vec<String> {
    let mut out = Vec::new();
    // A memory-only cell is `-numa node,nodeid=N,memdev=mN` with no
    // `cpus=`: QEMU (7.2 here, x86 and pseries alike) takes that as a
    // CPU-less node, and its guest numbers it after the nodes with CPUs,
    // which is why the planner puts such cells last.
    for c in &p.guest.cells {
        let mut node = if c.memory_bytes > 0 {
            format!("node,nodeid={},memdev=m{}", c.id, c.id)
        } else {
            format!("node,nodeid={}", c.id)
        };
        for (lo, hi) in c.vcpus.ranges() {
            if lo == hi {
                node.push_str(&format!(",cpus={lo}"));
            } else {
                node.push_str(&format!(",cpus={lo}-{hi}"));
            }
        }
        out.push(node);
    }
    out
}

/// The passed-through devices (`-device vfio-pci`), each near a guest
/// cell behind its expander bus and root port.
fn devices(p: &Placement, opts: &QemuOptions) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let mut push = |flag: &'static str, value: String| out.push((flag, value));
    // A device near a guest cell goes behind a root port on an expander
    // bus whose NUMA node is that cell (q35 only: pxb-pcie is PCIe).
    let near = if opts.machine.contains("q35") { crate::pcie::expanders(p, &opts.device_nodes) } else { Vec::new() };
    for (k, e) in near.iter().enumerate() {
        push("-device", format!("pxb-pcie,id=pxb{k},bus_nr={},numa_node={},bus=pcie.0", e.bus_nr, e.cell));
        for j in 0..e.devices.len() {
            push(
                "-device",
                format!("pcie-root-port,id=pxb{k}p{j},bus=pxb{k},chassis={},addr={j:#x}", 100 + 16 * k + j),
            );
        }
    }
    for d in &p.devices {
        let behind = near
            .iter()
            .enumerate()
            .find_map(|(k, e)| e.devices.iter().position(|x| x == d).map(|j| format!(",bus=pxb{k}p{j}")));
        push("-device", format!("vfio-pci,host={d}{}", behind.unwrap_or_default()));
    }
    out
}

/// Quotes a word for a POSIX shell when it needs quoting.
pub fn shell_quote(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_=,./:+@%".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// The whole command as one shell line: program and quoted arguments.
pub fn command_line(p: &Placement, opts: &QemuOptions) -> String {
    std::iter::once(opts.program.clone()).chain(args(p, opts)).map(|w| shell_quote(&w)).collect::<Vec<_>>().join(" ")
}

/// What the arguments cannot do, and how to do it: QEMU cannot pin vCPU
/// threads, so the pinning is listed for `taskset`.
pub fn notes(p: &Placement) -> Vec<String> {
    notes_for(p, &QemuOptions::default())
}

/// [`notes`] for a command written with `opts` (its program names the
/// emulator to confine).
pub fn notes_for(p: &Placement, opts: &QemuOptions) -> Vec<String> {
    let mut out = vec!["QEMU cannot pin vCPU threads itself; use the libvirt output, or pin each vCPU thread \
         (ids from QMP query-cpus-fast) with taskset -pc"
        .to_string()];
    let cpus = p.run_cpus();
    if !cpus.is_empty() {
        out.push(format!("to confine the whole process instead: taskset -c {} {} ...", cpus, opts.program));
    }
    if p.cpu_mode == CpuMode::Dedicated && !p.vcpus.is_empty() {
        let pins: Vec<String> = p
            .vcpus
            .iter()
            .map(|v| match p.floats(v.vcpu) {
                Some(set) => format!("{}->{set}", v.vcpu),
                None => format!("{}->{}", v.vcpu, v.pu),
            })
            .collect();
        out.push(format!("vCPU->PU: {}", pins.join(" ")));
    }
    if !p.emulator.is_empty() {
        out.push(format!("emulator threads: taskset -pc {} <qemu pid>", p.emulator));
    }
    out
}
