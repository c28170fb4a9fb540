//! A libvirt host's domains as a host state: every defined domain (or
//! only the running ones) read through [`numaplace_lint::held`] and
//! recorded by [`numaplace_lint::host_state`].

use crate::{Libvirt, VirtError};
use numaplace_lint::{FileError, HeldHost};
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
    Domain(#[from] FileError),
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

/// Reads every defined domain (with `running_only`, the running ones)
/// into a state with `reservations`. A domain's XML names it in errors as
/// `libvirt:NAME` (or its file, for a dump directory).
pub fn read_state(
    lv: &dyn Libvirt,
    topology: &Topology,
    reservations: Reservations,
    running_only: bool,
) -> Result<HostDomains, StateReadError> {
    let mut held = Vec::new();
    let mut warnings = Vec::new();
    let mut running = Vec::new();
    for d in lv.domains()? {
        if running_only && !d.running {
            continue;
        }
        if d.running {
            running.push(d.name.clone());
        }
        let file = numaplace_lint::parse_file(&format!("{}/{}", lv.describe(), d.name), d.xml.as_bytes())?;
        let (mut h, mut w) = numaplace_lint::held(&file, topology)?;
        held.append(&mut h);
        warnings.append(&mut w);
    }
    let mut host = numaplace_lint::host_state(topology, reservations, held).map_err(StateReadError::Reservations)?;
    warnings.append(&mut host.warnings);
    host.warnings = warnings;
    Ok(HostDomains { host, running })
}
