//! `numaplace lint`: checks existing VM definitions (libvirt domain XML,
//! VMware `.vmx`, numaplace request JSON) against their host's NUMA
//! topology for the traps measured in docs/background.md, and writes corrected
//! files.
//!
//! [`read_file`] or [`parse_file`] turn each file into a [`VmFile`];
//! [`lint`] checks them against a host and returns [`Finding`]s, which
//! [`output`] renders as text, JSON or SARIF; [`fix_all`] (or [`fix`], one
//! file) writes corrected files, splicing the text so every byte a fix does
//! not own stays as it was. Inside, each file's reader (numaplace-libvirt's
//! for domain XML, `vmx.rs` and `request.rs` here) gives numaplace-libvirt's
//! `Definition` of each VM, with the line of each setting, and each rule
//! (one type per rule, `rules/`) reads only definitions (`vm::Vm`: a
//! definition with its file, for evidence) and the host.

mod error;
mod finding;
mod fix;
mod host;
pub mod output;
mod request;
mod rules;
mod vm;
mod vmx;

pub use error::{FileError, VmError};
pub use finding::{Finding, Severity};
pub use fix::error::{FixError, RoomHolder};
pub use fix::joint::{fix_all, fix_all_reserved, FixReport};
pub use fix::trade::NewFinding;
pub use fix::trade::{rule_cost, Trade};
pub use fix::{fix, FixOptions, Fixed};
pub use rules::layout::{CellKind, CellPlace, Layout};
pub use rules::Beyond;
// A domain as a host state holds it is numaplace-libvirt's; re-exported so
// callers of `held` need one crate.
pub use numaplace_libvirt::{host_state, Held, HeldHost, HeldWarning};
pub use vm::{Evidence, SourceFormat};

use host::HostView;
use numaplace_plan::Reservations;
use numaplace_topo::Topology;
use vm::Vm;

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
    vms: Vec<Vm>,
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
    let (defs, cells_pending) = match format {
        SourceFormat::Libvirt => {
            (vec![numaplace_libvirt::domain::read(name, &text).map_err(|e| wrap(e.into()))?], false)
        }
        SourceFormat::Vmx => {
            let (vm, pending) = vmx::parse(name, &text).map_err(wrap)?;
            (vec![vm], pending)
        }
        SourceFormat::Request => (request::parse(&text).map_err(wrap)?, false),
    };
    let lines = Vm::lines_of(&text);
    let vms = defs.into_iter().map(|d| Vm::new(name, format, d, lines.clone())).collect();
    Ok(VmFile { name: name.to_string(), format, text, vms, cells_pending })
}

/// Reads and parses a file from disk.
pub fn read_file(path: &str) -> Result<VmFile, FileError> {
    let bytes = std::fs::read(path).map_err(|e| FileError::new(path, VmError::Io(e)))?;
    parse_file(path, &bytes)
}

/// The VMs of the files, with host-dependent cells derived.
fn views(files: &[VmFile], host: &HostView<'_>) -> Vec<Vm> {
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
    lint_held(files, 0, topology, reservations)
}

/// [`lint_reserved`] where the first `held` files are the VMs already on
/// the host (`lint --state`): they are the incumbents a FILE is checked
/// against, so a collision between a held domain and a FILE is reported
/// on the FILE.
///
/// The findings do not depend on the order of the files: the rules see
/// the VMs in one canonical order ([`canonical_order`]), and the
/// findings are then listed in the order the files were given.
pub fn lint_held(files: &[VmFile], held: usize, topology: &Topology, reservations: &Reservations) -> Vec<Finding> {
    let host = HostView::reserved(topology, reservations);
    let held_files = held;
    let order = canonical_order(files, held);
    // Each VM, in canonical order, with the position of its file.
    let mut vms: Vec<(usize, Vm)> = Vec::new();
    for &i in &order {
        for vm in views(std::slice::from_ref(&files[i]), &host) {
            vms.push((i, vm));
        }
    }
    let all = rules::all();
    let mut found: Vec<Vec<(String, Vec<Finding>)>> = vec![Vec::new(); files.len()];
    for kind in [Hypervisor::Kvm, Hypervisor::Esxi] {
        let (at, group): (Vec<usize>, Vec<Vm>) =
            vms.iter().filter(|(_, vm)| hypervisor(vm.format) == kind).map(|(i, vm)| (*i, vm.clone())).unzip();
        let held = rules::counted(&group, &host);
        // The held files come first in the canonical order.
        let incumbents = at.iter().filter(|&&i| i < held_files).count();
        let cx = rules::Context { host: &host, vms: &group, held: &held, incumbents };
        for (i, vm) in at.into_iter().zip(&group) {
            let mut mine: Vec<Finding> = all.iter().flat_map(|r| r.check(vm, &cx)).collect();
            mine.sort_by(|a, b| (a.line(), a.rule).cmp(&(b.line(), b.rule)));
            found[i].push((vm.name.clone(), mine));
        }
    }
    // Within a file (a request list), its VMs in the file's order.
    found
        .into_iter()
        .zip(files)
        .flat_map(|(mut per_vm, file)| {
            per_vm.sort_by_key(|(name, _)| file.vms.iter().position(|v| &v.name == name));
            per_vm.into_iter().flat_map(|(_, f)| f)
        })
        .collect()
}

/// The canonical order of a set of files, which every rule across VMs and
/// the joint fix follow, so that the same set gives the same answer
/// whatever order the files were named in: the first `held` files (the
/// host's domains, the incumbents) first, then every file by the names of
/// its VMs, then its name, then its text. Two files equal in all three
/// are the same file twice, and either order gives the same answer.
pub fn canonical_order(files: &[VmFile], held: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..files.len()).collect();
    let key = |i: usize| {
        let f = &files[i];
        let names: Vec<&str> = f.vms.iter().map(|v| v.name.as_str()).collect();
        (i >= held, names, f.name.as_str(), f.text.as_str())
    };
    order.sort_by(|&a, &b| key(a).cmp(&key(b)));
    order
}

/// The VMs of a libvirt domain file, as a host state holds them
/// (`numaplace_libvirt::held`), and what was left out of them. Files of
/// other formats are refused.
pub fn held(file: &VmFile, topology: &Topology) -> Result<(Vec<Held>, Vec<HeldWarning>), FileError> {
    if file.format != SourceFormat::Libvirt {
        let found = format!("{:?}", file.format);
        let e = numaplace_libvirt::domain::DomainError::NotADomain { line: 1, found };
        return Err(FileError::new(&file.name, e.into()));
    }
    let mut warnings = Vec::new();
    let out = file
        .vms
        .iter()
        .map(|vm| {
            let (h, mut w) = numaplace_libvirt::held(&vm.def, &file.name, topology);
            warnings.append(&mut w);
            h
        })
        .collect();
    Ok((out, warnings))
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
