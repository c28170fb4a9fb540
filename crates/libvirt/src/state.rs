//! A libvirt host's domains as a host state: every defined domain (or
//! only the running ones) read through [`crate::domain::read`], turned
//! into a placement by [`crate::held`] and recorded by
//! [`crate::host_state`].

use crate::domain::DomainFileError;
use crate::{Domain, Held, HeldHost, HeldWarning, Libvirt, VirtError};
use numaplace_plan::{Reservations, StateError};
use numaplace_topo::Topology;

/// Why a host's domains could not be read as state.
#[derive(Debug, thiserror::Error)]
pub enum StateReadError {
    /// libvirt (or the dump directory) failed.
    #[error(transparent)]
    Libvirt(#[from] VirtError),
    /// A domain's XML does not read.
    #[error(transparent)]
    Domain(#[from] DomainFileError),
    /// The reservations do not fit the host.
    #[error("reservations: {0}")]
    Reservations(StateError),
}

/// The domains of a host, as state.
#[derive(Clone, Debug)]
pub struct HostDomains {
    /// The state and how each domain was counted.
    pub host: HeldHost,
    /// The domains that run, by name.
    pub running: Vec<String>,
}

/// Domains with the name messages give them, and those that vanished
/// while the host was read ([`HeldWarning::Vanished`]).
pub type DomainFiles = (Vec<(String, Domain)>, Vec<HeldWarning>);

/// Every defined domain (with `running_only`, the running ones), named in
/// messages as [`crate::Domain::file`] says (`libvirt:URI/NAME`, or the
/// dump directory's `DIR/NAME.xml`). A domain undefined while it was read
/// is left out with a warning.
pub fn domain_files(lv: &dyn Libvirt, running_only: bool) -> Result<DomainFiles, StateReadError> {
    let listing = lv.domains()?;
    let out = listing.domains.into_iter().filter(|d| d.running || !running_only).map(|d| (d.file.clone(), d)).collect();
    Ok((out, listing.vanished.into_iter().map(|vm| HeldWarning::Vanished { vm }).collect()))
}

/// Domains as a host state holds them, what was left out of them, and
/// the names of those that run.
pub type HeldDomains = (Vec<Held>, Vec<HeldWarning>, Vec<String>);

/// Every domain as a host state holds it, and what was left out.
pub fn held_domains(lv: &dyn Libvirt, topology: &Topology, running_only: bool) -> Result<HeldDomains, StateReadError> {
    let (files, mut warnings) = domain_files(lv, running_only)?;
    let (mut held, mut running) = (Vec::new(), Vec::new());
    for (name, d) in files {
        let definition =
            crate::domain::read(&name, &d.xml).map_err(|error| DomainFileError { source_name: name.clone(), error })?;
        let (h, mut w) = crate::held(&definition, &name, topology);
        if d.running {
            running.push(h.placement.vm.clone());
        }
        held.push(h);
        warnings.append(&mut w);
    }
    Ok((held, warnings, running))
}

/// Reads every defined domain (with `running_only`, the running ones)
/// into a state with `reservations`.
pub fn read_state(
    lv: &dyn Libvirt,
    topology: &Topology,
    reservations: Reservations,
    running_only: bool,
) -> Result<HostDomains, StateReadError> {
    let (held, mut warnings, running) = held_domains(lv, topology, running_only)?;
    let mut host = crate::host_state(topology, reservations, held).map_err(StateReadError::Reservations)?;
    warnings.append(&mut host.warnings);
    host.warnings = warnings;
    Ok(HostDomains { host, running })
}
