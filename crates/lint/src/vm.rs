//! The normalised "VM view" every rule reads, whatever file it came from:
//! vCPUs, the guest CPU shape and NUMA cells, pinning, memory binding,
//! huge pages, passthrough devices and hot-add, each with the file line
//! that says so.
//!
//! Parsers fill it in; rules never look at XML or `.vmx` text, so one rule
//! covers every format that can express its trap.

use numaplace_topo::CpuSet;
use std::fmt;

/// Most vCPUs a VM may declare: above any hypervisor's limit (QEMU and
/// libvirt accept a few thousand, ESXi 768), and low enough that rules can
/// walk every vCPU.
pub const MAX_VCPUS: u32 = 16384;

/// Which kind of file a VM came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceFormat {
    /// libvirt domain XML (`virsh dumpxml`).
    Libvirt,
    /// VMware `.vmx`.
    Vmx,
    /// numaplace's own request JSON.
    Request,
}

/// A line of a file that a finding points at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evidence {
    /// The file as named on the command line.
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// The line's text, trimmed.
    pub text: String,
}

impl fmt::Display for Evidence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.text)
    }
}

/// Where a setting was read: a line, or nothing when it is a default.
pub type Source = Option<Evidence>;

/// The guest CPU shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Sockets.
    pub sockets: u32,
    /// Dies per socket.
    pub dies: u32,
    /// Cores per die.
    pub cores: u32,
    /// Threads per core.
    pub threads: u32,
    /// Where it is declared.
    pub at: Source,
}

impl Shape {
    /// vCPUs per socket.
    pub fn per_socket(&self) -> u32 {
        self.dies.max(1).saturating_mul(self.per_die())
    }

    /// vCPUs per die.
    pub fn per_die(&self) -> u32 {
        self.cores.max(1).saturating_mul(self.threads.max(1))
    }
}

/// One guest NUMA cell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cell {
    /// Cell id.
    pub id: u32,
    /// Its vCPUs.
    pub vcpus: CpuSet,
    /// Memory in bytes.
    pub memory_bytes: u64,
    /// Where it is declared (or the setting it is derived from).
    pub at: Source,
}

/// One vCPU's pinning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pin {
    /// vCPU number.
    pub vcpu: u32,
    /// Host CPUs it may run on.
    pub cpus: CpuSet,
    /// Where.
    pub at: Source,
}

/// A memory binding mode (libvirt `numatune`), as numaplace-libvirt reads it.
pub use numaplace_libvirt::domain::BindMode;

/// Host nodes memory is bound to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    /// The guest cell, for a per-cell binding (`memnode`); `None` for the
    /// whole VM.
    pub cell: Option<u32>,
    /// Mode.
    pub mode: BindMode,
    /// Host node ids.
    pub nodes: CpuSet,
    /// Where.
    pub at: Source,
}

/// A huge page request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HugePageWish {
    /// Page size in bytes; `None` means the host's default size.
    pub size_bytes: Option<u64>,
    /// Guest cells it applies to (`None`: all).
    pub cells: Option<CpuSet>,
    /// Where.
    pub at: Source,
}

/// A PCI device passed through.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassDevice {
    /// PCI address, `dddd:bb:dd.f`, lower-case hex.
    pub address: String,
    /// Where.
    pub at: Source,
}

/// A memory device added beside the cells' memory (libvirt
/// `<devices><memory model='dimm'>` and the other models).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryDevice {
    /// The model (`dimm`, `nvdimm`, `virtio-mem`, ...).
    pub model: String,
    /// Its size in bytes.
    pub size_bytes: u64,
    /// The guest cell it attaches to (`<target><node>`).
    pub cell: Option<u32>,
    /// The host nodes its memory comes from (`<source><nodemask>`).
    pub host_nodes: Option<CpuSet>,
    /// Where.
    pub at: Source,
}

/// CPU hot-add as configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HotAdd {
    /// vCPUs online at boot, when fewer than the maximum are.
    pub current: Option<u32>,
    /// Where it is enabled.
    pub at: Source,
    /// A second line that enables it (libvirt's first hot-pluggable
    /// `<vcpu>` in `<vcpus>`, beside `current=`).
    pub also: Source,
}

/// One VM as the rules see it.
#[derive(Clone, Debug, PartialEq)]
pub struct VmView {
    /// The file it came from.
    pub file: String,
    /// The format of that file.
    pub format: SourceFormat,
    /// VM name.
    pub name: String,
    /// Maximum vCPUs.
    pub vcpus: u32,
    /// Where the vCPU count is set.
    pub vcpus_at: Source,
    /// Memory in bytes.
    pub memory_bytes: u64,
    /// Where the memory size is set (the first cell's line when the
    /// size is derived from the cells).
    pub memory_at: Source,
    /// Whether `memory_bytes` was derived (libvirt: the sum of the cells
    /// and memory devices when `<memory>` is missing).
    pub memory_derived: bool,
    /// Memory devices (libvirt `<devices><memory>`).
    pub memory_devices: Vec<MemoryDevice>,
    /// Guest CPU shape, when declared.
    pub shape: Option<Shape>,
    /// Guest NUMA cells: declared (libvirt), derived the way the hypervisor
    /// derives them (.vmx), or empty (one node; for a request, left to the
    /// planner).
    pub cells: Vec<Cell>,
    /// Whether `cells` were derived rather than written in the file.
    pub cells_derived: bool,
    /// Per-vCPU pinning, sorted by vCPU (parsers sort it).
    pub pins: Vec<Pin>,
    /// CPUs every vCPU may use (libvirt `<vcpu cpuset>`, vmx
    /// `sched.cpu.affinity`), when restricted.
    pub cpuset: Option<(CpuSet, Source)>,
    /// Host node ids the VM is restricted to as a whole (vmx
    /// `numa.nodeAffinity`), CPUs and memory alike.
    pub node_affinity: Option<(CpuSet, Source)>,
    /// Memory bindings (whole-VM and per cell).
    pub bindings: Vec<Binding>,
    /// Huge pages.
    pub hugepages: Vec<HugePageWish>,
    /// Passthrough devices.
    pub devices: Vec<PassDevice>,
    /// CPU hot-add, when enabled.
    pub hotadd: Option<HotAdd>,
    /// Most guest nodes allowed (request `max_nodes`).
    pub max_nodes: Option<u32>,
    /// The file says numaplace planned some or all of its vCPUs to float
    /// (shared with overcommit asked for, or mixed with floating vCPUs in
    /// the shared pool): libvirt `<metadata><numaplace:vm cpu='shared'/>`
    /// or `cpu='mixed'`, a request's `cpu: shared` or `shared_vcpus`.
    pub planned_shared: bool,
    /// The file carries numaplace's mark (libvirt `<metadata>`): numaplace
    /// planned the VM.
    pub managed: bool,
    /// Passthrough devices numaplace's mark says it placed away from the
    /// VM's vCPUs on purpose (`remote-devices`), lower case.
    pub planned_remote_devices: Vec<String>,
    /// vCPUs numaplace's mark says it paired on sibling threads on purpose
    /// (`sibling-vcpus`: `compact`, or no whole core left).
    pub planned_sibling_vcpus: Option<u32>,
    /// numaplace's mark says some vCPUs float and others are pinned
    /// (`cpu='mixed'`).
    pub planned_mixed: bool,
    /// The CPU numaplace's mark says each vCPU is counted against
    /// (`vcpu-pus`, shared and mixed VMs), in vCPU order; empty when
    /// not given or not readable.
    pub planned_pus: Vec<u32>,
    /// The memory numaplace's mark says the VM is charged per node
    /// (`charged`, an overcommitting shared VM); empty when not given or
    /// not readable.
    pub planned_charged: Vec<(u32, u64)>,
    /// Memory the guest has now (libvirt `<currentMemory>`, below
    /// `memory_bytes` when a balloon took some back), when given.
    pub current_memory_bytes: Option<u64>,
    /// CPUs of the emulator threads (libvirt `<emulatorpin>`).
    pub emulator: Option<CpuSet>,
    /// CPUs the I/O threads are pinned to (libvirt `<iothreadpin>`, all
    /// of them together).
    pub iothreads: CpuSet,
}

impl VmView {
    /// An empty view for a file, to be filled in by a parser.
    pub fn new(file: &str, format: SourceFormat) -> VmView {
        VmView {
            file: file.to_string(),
            format,
            name: String::new(),
            vcpus: 0,
            vcpus_at: None,
            memory_bytes: 0,
            memory_at: None,
            memory_derived: false,
            memory_devices: Vec::new(),
            shape: None,
            cells: Vec::new(),
            cells_derived: false,
            pins: Vec::new(),
            cpuset: None,
            node_affinity: None,
            bindings: Vec::new(),
            hugepages: Vec::new(),
            devices: Vec::new(),
            hotadd: None,
            max_nodes: None,
            planned_shared: false,
            managed: false,
            planned_remote_devices: Vec::new(),
            planned_sibling_vcpus: None,
            planned_mixed: false,
            planned_pus: Vec::new(),
            planned_charged: Vec::new(),
            current_memory_bytes: None,
            emulator: None,
            iothreads: CpuSet::new(),
        }
    }

    /// The pin of one vCPU.
    pub fn pin(&self, vcpu: u32) -> Option<&Pin> {
        // Sorted by vCPU, so a 16384-vCPU VM is not a quadratic walk.
        let i = self.pins.partition_point(|p| p.vcpu < vcpu);
        self.pins.get(i).filter(|p| p.vcpu == vcpu)
    }

    /// Whether every vCPU has a pin.
    pub fn fully_pinned(&self) -> bool {
        self.vcpus > 0 && (0..self.vcpus).all(|v| self.pin(v).is_some())
    }

    /// Whether every vCPU is pinned to exactly one CPU (dedicated).
    pub fn dedicated(&self) -> bool {
        self.fully_pinned() && self.pins.iter().all(|p| p.cpus.len() == 1)
    }

    /// The cell holding a vCPU.
    pub fn cell_of(&self, vcpu: u32) -> Option<&Cell> {
        self.cells.iter().find(|c| c.vcpus.contains(vcpu))
    }

    /// The whole-VM memory binding, if any.
    pub fn vm_binding(&self) -> Option<&Binding> {
        self.bindings.iter().find(|b| b.cell.is_none())
    }
}
