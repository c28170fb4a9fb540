//! The host profile and the per-run reservation flags, one clap group
//! (`#[command(flatten)]`) shared by every command that plans or moves
//! VMs: `plan`, `lint`, `apply`, `balance`, `agent` and `top --state`.
//! What they resolve to comes from one function,
//! [`numaplace_wire::profile::resolve`] (the server calls it too).

use anyhow::{anyhow, Context as _};
use numaplace_plan::Reservations;
use numaplace_topo::{Accel, Topology};
use numaplace_wire::profile::{self, Document, Given, HostProfile, Overrides};

/// The environment variable naming the profile in place of
/// [`profile::DEFAULT_PATH`] (tests, and hosts keeping it elsewhere).
pub const ENV: &str = "NUMAPLACE_HOST_CONFIG";

/// What the host keeps for itself, for this run: the host profile and
/// the flags that override it (docs/formats/host-profile.md).
#[derive(clap::Args, Debug, Clone, Default)]
#[command(next_help_heading = "Host profile and reservations (docs/formats/host-profile.md)")]
pub struct HostArgs {
    /// The host profile, a TOML file. Default: the file
    /// $NUMAPLACE_HOST_CONFIG names, else /etc/numaplace/host.toml; either
    /// may be missing (no profile), but a FILE given here must exist.
    #[arg(long, value_name = "FILE")]
    pub host_config: Option<String>,
    /// CPUs the host keeps for itself (housekeeping, interrupts): no vCPU
    /// goes there, and VMs' emulator threads do when their nodes have
    /// some. Overrides the document's and the profile's reserved_cpus.
    #[arg(long, value_name = "LIST")]
    pub reserved_cpus: Option<String>,
    /// The host's shared CPU pool (Nova's cpu_shared_set): shared VMs
    /// float only here, dedicated vCPUs never come here; a mixed VM's
    /// shared_vcpus float here. Overrides the document's and the
    /// profile's shared_cpus.
    #[arg(long, value_name = "LIST")]
    pub shared_cpus: Option<String>,
    /// Memory kept free on every node for the host (e.g. 2GiB), besides
    /// each VM's QEMU overhead. Overrides the document's and the
    /// profile's reserved_memory.
    #[arg(long, value_name = "SIZE")]
    pub reserved_memory: Option<String>,
}

impl HostArgs {
    /// Reads the profile: `--host-config` (which must exist), else the
    /// file `NUMAPLACE_HOST_CONFIG` names, else the default path (either
    /// absent: no profile).
    pub fn profile(&self) -> anyhow::Result<Option<HostProfile>> {
        let (path, required) = match &self.host_config {
            Some(p) => (p.clone(), true),
            None => match std::env::var(ENV) {
                Ok(p) if !p.is_empty() => (p, false),
                _ => (profile::DEFAULT_PATH.to_string(), false),
            },
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => return Ok(None),
            Err(e) => {
                let flag = if required { "--host-config " } else { "" };
                return Err(e).with_context(|| format!("{flag}{path}: cannot read the host profile"));
            }
        };
        Ok(Some(HostProfile::parse(&path, &text)?))
    }

    /// The flags as the resolution takes them.
    pub fn overrides(&self) -> Overrides<'_> {
        Overrides {
            reserved_cpus: Given::of("--reserved-cpus", self.reserved_cpus.as_deref()),
            reserved_memory: Given::of("--reserved-memory", self.reserved_memory.as_deref()),
            shared_cpus: Given::of("--shared-cpus", self.shared_cpus.as_deref()),
        }
    }

    /// The reservations for this run: flags, else the document's
    /// `reserved`, else the profile's, else none.
    pub fn resolve(
        &self,
        topology: &Topology,
        profile: Option<&HostProfile>,
        document: Option<Document<'_>>,
    ) -> anyhow::Result<Reservations> {
        profile::resolve(topology, profile, document, &self.overrides()).map_err(|e| anyhow!(e))
    }

    /// The host with the kinds the profile's `[node_kinds]` declares
    /// (over what its files say or the reader found); exit 2 naming the
    /// key for a node the host does not have.
    pub fn declared(&self, topology: Topology, profile: Option<&HostProfile>) -> anyhow::Result<Topology> {
        profile::declare_kinds(topology, profile).map_err(|e| anyhow!(e))
    }

    /// The profile read and the reservations it and the flags give, for
    /// the commands that have no document of their own.
    pub fn load(&self, topology: &Topology) -> anyhow::Result<(Reservations, Option<HostProfile>)> {
        let profile = self.profile()?;
        let reserved = self.resolve(topology, profile.as_ref(), None)?;
        Ok((reserved, profile))
    }
}

/// The guest type: the flag, else the profile's `accel`, else KVM.
pub fn accel(flag: Option<Accel>, profile: Option<&HostProfile>) -> Accel {
    flag.or(profile.and_then(|p| p.accel)).unwrap_or_default()
}

/// The values `--accel` takes, each with its help, read into the
/// workspace's one [`Accel`] (`plan`, `apply` and `serve` share it).
pub fn accel_values() -> impl clap::builder::TypedValueParser<Value = Accel> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    let help = |a: Accel| match a {
        Accel::Kvm => "KVM with the host CPU passed through (production)",
        Accel::Tcg => "Software emulation with the qemu64/GenuineIntel CPU (test guests)",
    };
    PossibleValuesParser::new(Accel::ALL.map(|a| PossibleValue::new(a.name()).help(help(a))))
        // The parser accepted only the names the table spells.
        .map(|name| Accel::from_name(&name).unwrap_or_default())
}

/// How libvirt domains are written for guests run by `accel` (`plan
/// --format libvirt`, and `apply`'s new domains written from scratch).
pub fn libvirt_options(accel: Accel) -> numaplace_libvirt::domain::LibvirtOptions {
    use numaplace_libvirt::domain::LibvirtOptions;
    match accel {
        Accel::Kvm => LibvirtOptions::default(),
        Accel::Tcg => LibvirtOptions::tcg(),
    }
}
