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

/// Every defined domain (with `running_only`, the running ones), with the
/// name messages give it, `SOURCE/NAME`.
pub fn domain_files(lv: &dyn Libvirt, running_only: bool) -> Result<Vec<(String, Domain)>, StateReadError> {
    let source = lv.describe();
    Ok(lv
        .domains()?
        .into_iter()
        .filter(|d| d.running || !running_only)
        .map(|d| (format!("{source}/{}", d.name), d))
        .collect())
}

/// Domains as a host state holds them, what was left out of them, and
/// the names of those that run.
pub type HeldDomains = (Vec<Held>, Vec<HeldWarning>, Vec<String>);

/// Every domain as a host state holds it, and what was left out.
pub fn held_domains(lv: &dyn Libvirt, topology: &Topology, running_only: bool) -> Result<HeldDomains, StateReadError> {
    let (mut held, mut warnings, mut running) = (Vec::new(), Vec::new(), Vec::new());
    for (name, d) in domain_files(lv, running_only)? {
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
