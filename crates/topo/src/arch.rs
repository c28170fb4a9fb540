//! The host's CPU architecture: what a VM planned on it runs as (the
//! machine type, the emulator and the CPU features of its domain); and
//! how its guests run ([`Accel`]), the one type every writer, the host
//! profile and the command-line flags share.

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

/// How guests run on a host: the one accelerator type of the workspace
/// (the QEMU writer, the libvirt writer's options, the host profile's
/// `accel`, the plan document's `accel` and the `--accel` flags).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Accel {
    /// KVM, the host CPU passed through (production).
    #[default]
    Kvm,
    /// QEMU's software emulation, TCG (hosts without `/dev/kvm`, test
    /// guests).
    Tcg,
}

impl Accel {
    /// Every accelerator, in the order documents and help list them.
    pub const ALL: [Accel; 2] = [Accel::Kvm, Accel::Tcg];

    /// The name documents, flags and QEMU's `-accel` use (`kvm`, `tcg`).
    pub fn name(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }

    /// The accelerator `name` names, exactly as [`Accel::name`] spells it.
    pub fn from_name(name: &str) -> Option<Accel> {
        Accel::ALL.into_iter().find(|a| a.name() == name)
    }
}

#[cfg(test)]
mod accel_tests {
    use super::Accel;

    #[test]
    fn accel_names_read_back_and_nothing_else_is_one() {
        for a in Accel::ALL {
            assert_eq!(Accel::from_name(a.name()), Some(a));
        }
        assert_eq!(Accel::from_name("KVM"), None);
        assert_eq!(Accel::from_name("xen"), None);
        assert_eq!(Accel::default(), Accel::Kvm);
    }
}
