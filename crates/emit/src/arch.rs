//! What a VM runs as on a host of each architecture: the names libvirt
//! and QEMU use for it, its machine type and emulator. One table for the
//! libvirt and QEMU writers, so the two never disagree.

use numaplace_topo::Arch;
use std::fmt;

/// How VMs are emulated on hosts of one architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// libvirt's `<type arch=...>` (also the kernel's name).
    pub arch: &'static str,
    /// The machine type written by default.
    pub machine: &'static str,
    /// The newest machine type of the same family whose NUMA cells may be
    /// declared without a memory backend (QEMU requires backends from 5.1
    /// on, for every machine), used for a guest cell without memory.
    pub memoryless_machine: &'static str,
    /// The QEMU program.
    pub emulator: &'static str,
    /// Whether the domain gets x86's `<acpi/>` and `<apic/>`. pSeries
    /// guests learn their NUMA layout from the device tree and have no
    /// APIC; an ARM `virt` guest booted without UEFI reads the device tree
    /// too, and libvirt refuses ACPI there without UEFI firmware.
    pub x86_features: bool,
    /// Whether a TCG guest's libvirt `<cpu>` may ask for the emulator's
    /// most capable model (`mode='maximum'`, QEMU's `-cpu max`, which the
    /// QEMU arguments use for every non-x86 TCG guest). libvirt 9.0 with
    /// QEMU 7.2 refuses it for ppc64 ("maximum CPU is not supported by
    /// QEMU binary"), so a POWER guest gets a `<cpu>` without a model:
    /// the machine's own default CPU. ARM's default (a 32-bit Cortex-A15)
    /// would not run a 64-bit guest, so ARM asks for the maximum.
    pub tcg_maximum_cpu: bool,
}

/// x86-64: q35, as numaplace has always written.
pub const X86_64: Target = Target {
    arch: "x86_64",
    machine: "q35",
    memoryless_machine: "pc-q35-5.0",
    emulator: "qemu-system-x86_64",
    x86_features: true,
    tcg_maximum_cpu: false,
};

/// The architecture numaplace writes no domain for: a typed refusal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsupported {
    /// The host's architecture, as read.
    pub arch: String,
}

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the host's architecture is {}: numaplace writes libvirt domains and QEMU arguments for x86_64, \
             ppc64le, ppc64 and aarch64 hosts only (the JSON and text plans are unaffected)",
            self.arch
        )
    }
}

impl std::error::Error for Unsupported {}

/// The target for a host's architecture, or why there is none.
pub fn target(arch: &Arch) -> Result<Target, Unsupported> {
    match arch {
        Arch::X86_64 => Ok(X86_64),
        // pSeries is POWER's KVM machine (PowerNV runs bare metal only);
        // qemu-system-ppc64 runs both endiannesses.
        Arch::Ppc64le | Arch::Ppc64 => Ok(Target {
            arch: if *arch == Arch::Ppc64le { "ppc64le" } else { "ppc64" },
            machine: "pseries",
            memoryless_machine: "pseries-5.0",
            emulator: "qemu-system-ppc64",
            x86_features: false,
            tcg_maximum_cpu: false,
        }),
        Arch::Aarch64 => Ok(Target {
            arch: "aarch64",
            machine: "virt",
            memoryless_machine: "virt-5.0",
            emulator: "qemu-system-aarch64",
            x86_features: false,
            tcg_maximum_cpu: true,
        }),
        Arch::Other(name) => Err(Unsupported { arch: name.clone() }),
    }
}
