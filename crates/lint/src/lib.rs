//! `numaplace lint`: checks existing VM definitions (libvirt domain XML,
//! VMware `.vmx`, numaplace request JSON) against their host's NUMA
//! topology for the traps measured in docs/background.md, and writes corrected
//! files.
//!
//! [`read_file`] or [`parse_file`] turn each file into a [`VmFile`];
//! [`lint`] checks them against a host and returns [`Finding`]s, which
//! [`output`] renders as text, JSON or SARIF; [`fix_all`] (or [`fix`], one
//! file) writes corrected files, splicing the text so every byte a fix does
//! not own stays as it was. Inside, parsers turn each file into one
//! normalised VM view and each rule (one type per rule, `rules/`) reads
//! only views and the host.

mod domain;
mod error;
mod finding;
mod fix;
mod host;
mod layout;
pub mod output;
mod request;
mod rules;
mod vm;
mod vmx;

pub use domain::held;
pub use error::{FileError, FixError, NewFinding, VmError};
pub use finding::{Finding, Severity};
pub use fix::{fix, fix_all, fix_all_reserved, FixOptions, FixReport, Fixed};
pub use layout::{CellKind, CellPlace, Layout};
// A domain as a host state holds it is numaplace-libvirt's; re-exported so
// callers of `held` need one crate.
pub use numaplace_libvirt::{host_state, Held, HeldHost, HeldWarning};
pub use vm::{Evidence, SourceFormat};

use host::HostView;
use numaplace_plan::Reservations;
use numaplace_topo::Topology;
use vm::VmView;

/// One parsed file: its text and the VMs it defines.
#[derive(Clone, Debug)]
pub struct VmFile {
    /// The file as named on the command line.
    pub name: String,
    /// Its format.
    pub format: SourceFormat,
    /// Its text.
    pub text: String,
    /// Its VMs (one, except for request JSON lists).
    vms: Vec<VmView>,
    /// For `.vmx`: cells still to derive from the host's node size.
    cells_pending: bool,
}

/// What a VM has, which a fix keeps unless allowed to resize.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmSize {
    /// VM name.
    pub name: String,
    /// vCPUs (the maximum, hot-pluggable ones included).
    pub vcpus: u32,
    /// Memory in bytes.
    pub memory_bytes: u64,
    /// Huge page sizes asked for (`None`: the host's default size).
    pub hugepages: Vec<Option<u64>>,
    /// Passthrough PCI devices.
    pub devices: Vec<String>,
}

impl VmFile {
    /// What each VM of the file has.
    pub fn sizes(&self) -> Vec<VmSize> {
        self.vms
            .iter()
            .map(|vm| VmSize {
                name: vm.name.clone(),
                vcpus: vm.vcpus,
                memory_bytes: vm.memory_bytes,
                hugepages: vm.hugepages.iter().map(|h| h.size_bytes).collect(),
                devices: vm.devices.iter().map(|d| d.address.clone()).collect(),
            })
            .collect()
    }
}

/// Guesses a file's format from its name and first bytes.
fn detect(name: &str, text: &str) -> Option<SourceFormat> {
    let head = text.trim_start_matches('\u{feff}').trim_start();
    if head.starts_with('<') {
        return Some(SourceFormat::Libvirt);
    }
    if head.starts_with('{') || head.starts_with('[') {
        return Some(SourceFormat::Request);
    }
    if name.to_ascii_lowercase().ends_with(".vmx") {
        return Some(SourceFormat::Vmx);
    }
    let first = head.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('#'))?;
    let (key, value) = first.split_once('=')?;
    (!key.trim().contains(char::is_whitespace) && value.trim().starts_with('"')).then_some(SourceFormat::Vmx)
}

/// Parses a file's bytes; `name` is used in evidence and errors.
pub fn parse_file(name: &str, bytes: &[u8]) -> Result<VmFile, FileError> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| FileError::new(name, VmError::NotUtf8 { offset: e.valid_up_to() }))?
        .to_string();
    let format = detect(name, &text).ok_or_else(|| FileError::new(name, VmError::UnknownFormat))?;
    let wrap = |e: VmError| FileError::new(name, e);
    let mut file =
        VmFile { name: name.to_string(), format, text: String::new(), vms: Vec::new(), cells_pending: false };
    match format {
        SourceFormat::Libvirt => file.vms.push(domain::parse(name, &text).map_err(wrap)?),
        SourceFormat::Vmx => {
            let (vm, pending) = vmx::parse(name, &text).map_err(wrap)?;
            file.vms.push(vm);
            file.cells_pending = pending;
        }
        SourceFormat::Request => {
            file.vms = request::parse(name, &text).map_err(wrap)?;
        }
    }
    file.text = text;
    Ok(file)
}

/// Reads and parses a file from disk.
pub fn read_file(path: &str) -> Result<VmFile, FileError> {
    let bytes = std::fs::read(path).map_err(|e| FileError::new(path, VmError::Io(e)))?;
    parse_file(path, &bytes)
}

/// The VM views of the files, with host-dependent cells derived.
fn views(files: &[VmFile], host: &HostView<'_>) -> Vec<VmView> {
    let mut out = Vec::new();
    for f in files {
        for vm in &f.vms {
            let mut vm = vm.clone();
            if f.cells_pending {
                vmx::derive_cells(&mut vm, host.node_cores());
            }
            out.push(vm);
        }
    }
    out
}

/// Lints every VM of the files against a host, in file order, then line,
/// then rule id.
///
/// The rules across VMs (pinning overlaps, shared siblings, floating load)
/// compare a VM only with VMs of the same hypervisor: an ESXi `.vmx` and a
/// KVM domain or request never share a host, so linting both kinds in one
/// run must not make one the other's neighbour.
pub fn lint(files: &[VmFile], topology: &Topology) -> Vec<Finding> {
    lint_reserved(files, topology, &Reservations::default())
}

/// [`lint`] on a host with reservations (the planner's, as `plan`
/// resolves them from the host profile and its flags): rules count the
/// reserved CPUs and memory, and the QEMU overhead, as the planner does,
/// so a domain `plan` made with the same reservations lints clean.
pub fn lint_reserved(files: &[VmFile], topology: &Topology, reservations: &Reservations) -> Vec<Finding> {
    let host = HostView::reserved(topology, reservations);
    let vms = views(files, &host);
    let all = rules::all();
    let mut found: Vec<Vec<Finding>> = vec![Vec::new(); vms.len()];
    for kind in [Hypervisor::Kvm, Hypervisor::Esxi] {
        let (at, group): (Vec<usize>, Vec<VmView>) = vms
            .iter()
            .enumerate()
            .filter(|(_, vm)| hypervisor(vm.format) == kind)
            .map(|(i, vm)| (i, vm.clone()))
            .unzip();
        let held = rules::counted(&group, &host);
        let cx = rules::Context { host: &host, vms: &group, held: &held };
        for (i, vm) in at.into_iter().zip(&group) {
            let mut mine: Vec<Finding> = all.iter().flat_map(|r| r.check(vm, &cx)).collect();
            mine.sort_by(|a, b| (a.line(), a.rule).cmp(&(b.line(), b.rule)));
            found[i] = mine;
        }
    }
    found.into_iter().flatten().collect()
}

/// Which hypervisor runs a VM of a format: a host runs one, so VMs of two
/// never share CPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hypervisor {
    /// KVM through libvirt: domain XML, and numaplace's own requests.
    Kvm,
    /// VMware ESXi: `.vmx` files.
    Esxi,
}

/// The hypervisor of a format.
pub(crate) fn hypervisor(format: SourceFormat) -> Hypervisor {
    match format {
        SourceFormat::Vmx => Hypervisor::Esxi,
        SourceFormat::Libvirt | SourceFormat::Request => Hypervisor::Kvm,
    }
}
