//! The host's CPU architecture: what a VM planned on it runs as (the
//! machine type, the emulator and the CPU features of its domain).

use std::fmt;

/// A host's CPU architecture. Sources that do not say are x86-64, the
/// architecture numaplace has always assumed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Arch {
    /// x86-64 (Intel, AMD).
    #[default]
    X86_64,
    /// 64-bit POWER, little-endian (POWER8/9/10 running Linux).
    Ppc64le,
    /// 64-bit POWER, big-endian.
    Ppc64,
    /// 64-bit ARM.
    Aarch64,
    /// Any other name a source gave (`s390x`, `riscv64`, `i686`), kept as
    /// read, lower-case.
    Other(String),
}

impl Arch {
    /// The architecture a source names, in the kernel's (`uname -m`),
    /// hwloc's and libvirt's spellings; an empty name is x86-64.
    pub fn from_name(name: &str) -> Arch {
        match name.trim().to_ascii_lowercase().as_str() {
            "" | "x86_64" | "amd64" | "x86-64" | "x64" => Arch::X86_64,
            "ppc64le" | "ppc64el" | "powerpc64le" => Arch::Ppc64le,
            "ppc64" | "powerpc64" => Arch::Ppc64,
            "aarch64" | "arm64" => Arch::Aarch64,
            other => Arch::Other(other.to_string()),
        }
    }

    /// The name libvirt and the kernel use (`x86_64`, `ppc64le`).
    pub fn name(&self) -> &str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Ppc64le => "ppc64le",
            Arch::Ppc64 => "ppc64",
            Arch::Aarch64 => "aarch64",
            Arch::Other(name) => name,
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
