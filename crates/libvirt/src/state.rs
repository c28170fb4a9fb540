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
    /// A domain's XML does not read (no longer returned by this
    /// module's readers, which skip such a domain; kept for callers that
    /// read one domain).
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
    /// Domains whose XML does not read: left out of the state.
    pub skipped: Vec<Skipped>,
}

/// A domain left out of a host's state because its XML does not read:
/// one bad definition must not stop a host's other domains being
/// planned around, checked for drift or reported (issue 52). Callers
/// warn with it ([`std::fmt::Display`] names the domain and what is
/// wrong) and go on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped(pub DomainFileError);

impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: left out, its definition does not read: {}", self.0.source_name, self.0.error)
    }
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

/// Domains as a host state holds them, what was left out of them, the
/// names of those that run, and the domains that do not read.
pub type HeldDomains = (Vec<Held>, Vec<HeldWarning>, Vec<String>, Vec<Skipped>);

/// Every readable domain as a host state holds it, what was left out of
/// them, and the domains skipped because they do not read.
pub fn held_domains(lv: &dyn Libvirt, topology: &Topology, running_only: bool) -> Result<HeldDomains, StateReadError> {
    let (files, mut warnings) = domain_files(lv, running_only)?;
    let (mut held, mut running, mut skipped) = (Vec::new(), Vec::new(), Vec::new());
    for (name, d) in files {
        let definition = match crate::domain::read(&name, &d.xml) {
            Ok(definition) => definition,
            Err(error) => {
                skipped.push(Skipped(DomainFileError { source_name: name, error }));
                continue;
            }
        };
        let (h, mut w) = crate::held(&definition, &name, topology);
        if d.running {
            running.push(h.placement.vm.clone());
        }
        held.push(h);
        warnings.append(&mut w);
    }
    Ok((held, warnings, running, skipped))
}

/// Reads every defined domain (with `running_only`, the running ones)
/// into a state with `reservations`.
pub fn read_state(
    lv: &dyn Libvirt,
    topology: &Topology,
    reservations: Reservations,
    running_only: bool,
) -> Result<HostDomains, StateReadError> {
    let (held, mut warnings, running, skipped) = held_domains(lv, topology, running_only)?;
    let mut host = crate::host_state(topology, reservations, held).map_err(StateReadError::Reservations)?;
    warnings.append(&mut host.warnings);
    host.warnings = warnings;
    Ok(HostDomains { host, running, skipped })
}

/// A domain's `<uuid>` from its XML, lower-cased (libvirt accepts either
/// case and prints lower), or `None` when it has none or the XML does not
/// parse. The agent names a domain by it when the fleet knows VMs by
/// their orchestrator's instance UUID (OpenStack Nova names the domain
/// `instance-NNNNNNNN` and gives it the instance's UUID).
pub fn domain_uuid(xml: &str) -> Option<String> {
    let doc = roxmltree::Document::parse(xml).ok()?;
    let root = doc.root_element();
    let uuid = root.children().find(|n| n.has_tag_name("uuid"))?.text()?.trim().to_ascii_lowercase();
    // libvirt's forms: 32 hex digits, with or without the four dashes.
    let hex = uuid.chars().filter(|c| *c != '-').count();
    (hex == 32 && uuid.chars().all(|c| c.is_ascii_hexdigit() || c == '-')).then_some(uuid)
}

#[cfg(test)]
mod uuid_tests {
    use super::domain_uuid;

    #[test]
    fn a_domains_uuid_is_read_lower_cased_and_only_when_well_formed() {
        let xml = |u: &str| format!("<domain type='kvm'><name>instance-0000002a</name><uuid>{u}</uuid></domain>");
        assert_eq!(
            domain_uuid(&xml("6A1B4C2D-0000-4E5F-8A9B-0C1D2E3F4A5B")).as_deref(),
            Some("6a1b4c2d-0000-4e5f-8a9b-0c1d2e3f4a5b")
        );
        assert_eq!(domain_uuid(&xml("not-a-uuid")), None);
        assert_eq!(domain_uuid("<domain><name>x</name></domain>"), None);
        assert_eq!(domain_uuid("<domain"), None);
        // A <uuid> deeper in the tree (a disk's secret) is not the domain's.
        assert_eq!(
            domain_uuid(
                "<domain><devices><secret><uuid>6a1b4c2d00004e5f8a9b0c1d2e3f4a5b</uuid></secret></devices></domain>"
            ),
            None
        );
    }
}
