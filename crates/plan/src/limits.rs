//! Figures the node-set search and the host state both count by, kept
//! apart so the state never imports the search that reads it.

/// Dedicated VMs of at most this many vCPUs are small: the general-purpose
/// sizes of the Azure V1 trace among the fixtures run 1, 2, 4 and 8 vCPUs,
/// and the VMs issue 39 protects are larger (its database: 64). A node
/// where a VM short of whole cores would take a larger VM's idle siblings
/// ranks after one where it takes only small VMs' (`nodeset::Candidate::siblings`).
pub(crate) const SMALL_VM_VCPUS: u32 = 8;

/// The ACPI SLIT's "unreachable" (firmware writes 0xFF): two nodes this
/// far apart are never in one set; each is still used alone.
pub(crate) const UNREACHABLE: u32 = 255;
