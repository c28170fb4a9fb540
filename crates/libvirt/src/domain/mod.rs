//! The libvirt domain format, in one place: a domain's XML read into what
//! it holds ([`read`] gives a [`Definition`], with the line of each
//! setting), a whole domain written for a placement ([`mod@write`], with the
//! direct kernel boot `verify` needs as typed [`write::Boot`] options),
//! and a placement's NUMA elements spliced into an operator's own domain
//! ([`splice`], [`merge`]), every other byte kept.
//!
//! A [`Definition`] is numaplace's one description of a VM as a file
//! defines it: `lint`'s `.vmx` and request readers produce one too, and
//! lint's rules read it (a line of 0 is "no line": a default, or a
//! setting derived from nothing written). [`crate::held`] turns one into
//! the placement a host state records. Nothing else parses domain XML.

mod read;
mod splice;
pub mod write;

/// The first child element of a name, for the edge's other readers of a
/// definition (apply's narrowing, check's I/O threads).
pub(crate) use read::child;
pub use read::read;
pub use splice::{merge, splice};
pub use write::{
    domain_xml, domains_xml, remote_devices, sibling_vcpus, Boot, DomainType, GuestCpu, LibvirtOptions, METADATA_NS,
};

use numaplace_topo::CpuSet;

/// Most vCPUs a domain may declare: above any hypervisor's limit (QEMU and
/// libvirt accept a few thousand), and low enough that a reader can walk
/// every vCPU.
pub const MAX_VCPUS: u32 = 16384;

/// Why a domain's XML could not be read (or spliced), with the line at
/// fault; the caller names the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DomainError {
    /// XML that does not parse.
    #[error("line {line}, column {column}: malformed XML: {message}")]
    Xml {
        /// 1-based line.
        line: u32,
        /// 1-based column.
        column: u32,
        /// roxmltree's message.
        message: String,
    },
    /// XML whose root is not `<domain>`.
    #[error("line {line}: expected a libvirt <domain>, found <{found}>")]
    NotADomain {
        /// Line of the root element.
        line: u32,
        /// The root element's name.
        found: String,
    },
    /// A value of the wrong form.
    #[error("line {line}: {field}: expected {expected}, found `{found}`")]
    BadValue {
        /// 1-based line.
        line: u32,
        /// Element/attribute path.
        field: String,
        /// What a valid value looks like.
        expected: &'static str,
        /// What was there (cut to 80 characters).
        found: String,
    },
    /// A required element is absent.
    #[error("{0} is missing")]
    Missing(&'static str),
}

impl DomainError {
    /// A [`DomainError::BadValue`], cutting `found` to a readable length.
    pub fn bad(line: u32, field: impl Into<String>, expected: &'static str, found: &str) -> DomainError {
        DomainError::BadValue { line, field: field.into(), expected, found: found.chars().take(80).collect() }
    }

    /// The line at fault, when there is one.
    pub fn line(&self) -> Option<u32> {
        match self {
            DomainError::Xml { line, .. }
            | DomainError::NotADomain { line, .. }
            | DomainError::BadValue { line, .. } => Some(*line),
            DomainError::Missing(_) => None,
        }
    }
}

/// A [`DomainError`] with the domain it came from (a file name, or
/// `libvirt:URI/NAME`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{source_name}: {error}")]
pub struct DomainFileError {
    /// Where the domain was read from.
    pub source_name: String,
    /// What was wrong.
    pub error: DomainError,
}

/// The guest CPU shape (`<cpu><topology>`).
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
    /// The line of `<topology>`.
    pub at: u32,
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

/// One guest NUMA cell (`<cpu><numa><cell>`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cell {
    /// Cell id.
    pub id: u32,
    /// Its vCPUs.
    pub vcpus: CpuSet,
    /// Memory in bytes.
    pub memory_bytes: u64,
    /// Its line.
    pub at: u32,
}

/// One vCPU's pinning (`<vcpupin>`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pin {
    /// vCPU number.
    pub vcpu: u32,
    /// Host CPUs it may run on.
    pub cpus: CpuSet,
    /// Its line.
    pub at: u32,
}

/// A memory binding mode (libvirt `numatune`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindMode {
    /// Allocation only from the nodes.
    Strict,
    /// Preferably from the nodes.
    Preferred,
    /// Interleaved over the nodes.
    Interleave,
    /// Restricted, but the kernel may move pages.
    Restrictive,
}

impl BindMode {
    /// Parses libvirt's mode names.
    pub fn parse(text: &str) -> Option<BindMode> {
        match text {
            "strict" => Some(BindMode::Strict),
            "preferred" => Some(BindMode::Preferred),
            "interleave" => Some(BindMode::Interleave),
            "restrictive" => Some(BindMode::Restrictive),
            _ => None,
        }
    }
}

/// Host nodes memory is bound to (`<numatune>`'s `<memory>` or
/// `<memnode>`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    /// The guest cell, for a per-cell binding (`memnode`); `None` for the
    /// whole VM.
    pub cell: Option<u32>,
    /// Mode.
    pub mode: BindMode,
    /// Host node ids.
    pub nodes: CpuSet,
    /// Its line.
    pub at: u32,
}

/// A huge page request (`<memoryBacking><hugepages>`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HugePageWish {
    /// Page size in bytes; `None` means the host's default size.
    pub size_bytes: Option<u64>,
    /// Guest cells it applies to (`None`: all).
    pub cells: Option<CpuSet>,
    /// Its line.
    pub at: u32,
}

/// A PCI device passed through (`<hostdev type='pci'>`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassDevice {
    /// PCI address, `dddd:bb:dd.f`, lower-case hex.
    pub address: String,
    /// The line of its source address.
    pub at: u32,
}

/// A memory device (`<devices><memory model='dimm'>` and the other
/// models): memory added beside the cells', on a guest cell and, when
/// its source says so, on given host nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryDevice {
    /// `model` (`dimm`, `nvdimm`, `virtio-mem`, ...).
    pub model: String,
    /// `<target><size>` in bytes (0 when not given).
    pub size_bytes: u64,
    /// `<target><node>`: the guest cell it attaches to.
    pub cell: Option<u32>,
    /// `<source><nodemask>`: the host nodes its memory comes from.
    pub host_nodes: Option<CpuSet>,
    /// The line of its `<memory>` element.
    pub at: u32,
}

/// CPU hot-add as configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HotAdd {
    /// vCPUs online at boot, when fewer than the maximum are.
    pub current: Option<u32>,
    /// The line that enables it.
    pub at: u32,
    /// A second line that enables it (the first hot-pluggable `<vcpu>` in
    /// `<vcpus>`, beside `current=`).
    pub also: Option<u32>,
}

/// What a VM holds, as its file says, with the line of each setting (0:
/// none): vCPUs, pinning, memory and its binding, guest cells and CPU
/// shape, huge pages, passthrough devices, hot-add and numaplace's mark.
/// Read from a domain's XML by [`read`] (everything else in the domain is
/// not read), and from `.vmx` and request files by `numaplace-lint`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Definition {
    /// `<name>` (the caller's name for it when the domain has none).
    pub name: String,
    /// Maximum vCPUs (`<vcpu>`).
    pub vcpus: u32,
    /// The line of `<vcpu>`.
    pub vcpus_at: u32,
    /// Memory in bytes (`<memory>`).
    pub memory_bytes: u64,
    /// The line of `<memory>` (of the first cell when derived).
    pub memory_at: u32,
    /// `<memory>` is missing and `memory_bytes` is libvirt's sum of the
    /// cells and memory devices.
    pub memory_derived: bool,
    /// Memory devices (`<devices><memory>`).
    pub memory_devices: Vec<MemoryDevice>,
    /// Memory the guest has now (`<currentMemory>`), when given.
    pub current_memory_bytes: Option<u64>,
    /// Guest CPU shape, when declared.
    pub shape: Option<Shape>,
    /// Guest NUMA cells as declared.
    pub cells: Vec<Cell>,
    /// Per-vCPU pinning, sorted by vCPU.
    pub pins: Vec<Pin>,
    /// CPUs every vCPU may use (`<vcpu cpuset>`) and its line.
    pub cpuset: Option<(CpuSet, u32)>,
    /// Memory bindings (whole-VM and per cell).
    pub bindings: Vec<Binding>,
    /// Huge pages.
    pub hugepages: Vec<HugePageWish>,
    /// Passthrough PCI devices.
    pub devices: Vec<PassDevice>,
    /// CPU hot-add, when enabled.
    pub hotadd: Option<HotAdd>,
    /// CPUs of the emulator threads (`<emulatorpin>`).
    pub emulator: Option<CpuSet>,
    /// CPUs the I/O threads are pinned to (every `<iothreadpin>`).
    pub iothreads: CpuSet,
    /// The domain carries numaplace's mark (`<metadata>`): numaplace
    /// planned it.
    pub managed: bool,
    /// The mark says some or all vCPUs float by plan (`cpu='shared'` or
    /// `cpu='mixed'`).
    pub planned_shared: bool,
    /// Passthrough devices the mark says were placed away from the vCPUs
    /// on purpose (`remote-devices`), lower case.
    pub planned_remote_devices: Vec<String>,
    /// vCPUs the mark says were paired on sibling threads on purpose
    /// (`sibling-vcpus`).
    pub planned_sibling_vcpus: Option<u32>,
    /// The mark says some vCPUs float and others are pinned
    /// (`cpu='mixed'`).
    pub planned_mixed: bool,
    /// The CPU the mark says each vCPU is counted against (`vcpu-pus`,
    /// shared and mixed VMs), in vCPU order; empty when not given or not
    /// readable.
    pub planned_pus: Vec<u32>,
    /// The memory the mark says the VM is charged per node (`charged`, an
    /// overcommitting shared VM); empty when not given or not readable.
    pub planned_charged: Vec<(u32, u64)>,
    /// The cells were derived the way the hypervisor derives them (the
    /// `.vmx` reader, as ESXi does) rather than written in the file. A
    /// domain's cells are always declared.
    pub cells_derived: bool,
    /// Host node ids the VM is restricted to as a whole, CPUs and memory
    /// alike (`.vmx` `numa.nodeAffinity`), and its line. A domain says
    /// this with `cpuset` and `<numatune>` instead, so its reader leaves
    /// it empty.
    pub node_affinity: Option<(CpuSet, u32)>,
    /// Most guest nodes allowed (a numaplace request's `max_nodes`).
    pub max_nodes: Option<u32>,
}

impl Definition {
    /// The pin of one vCPU.
    pub fn pin(&self, vcpu: u32) -> Option<&Pin> {
        // Sorted by vCPU, so a 16384-vCPU domain is not a quadratic walk.
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
