//! VMware `.vmx` files: `key = "value"` lines, turned into a
//! [`Definition`] (numaplace-libvirt's, the one every rule reads), each
//! setting with its line.
//!
//! Keys read: `displayName`, `numvcpus`, `cpuid.coresPerSocket`, `memSize`
//! (MiB), `vcpu.hotadd`, `numa.vcpu.maxPerVirtualNode`,
//! `numa.autosize.vcpu.maxPerVirtualNode`, `numa.vcpu.min`,
//! `numa.nodeAffinity`, `sched.cpu.affinity`, `pciPassthruN.present` and
//! `pciPassthruN.id`. Keys are case-insensitive, as ESXi reads them; a key
//! given twice takes its last value.
//!
//! The guest NUMA cells are derived the way ESXi 6.0 derived them in the
//! measurements in docs/background.md § Guest NUMA topology (the hypervisor, not the file, decides
//! them): one cell with CPU hot-add or below `numa.vcpu.min` (9) vCPUs;
//! cells of `maxPerVirtualNode` vCPUs when set; else one cell per virtual
//! socket when `cpuid.coresPerSocket` > 1; else cells of at most one host
//! node's cores, which needs the host and is done by [`derive_cells`].

use crate::error::VmError;
use numaplace_libvirt::domain::{Cell, Definition, DomainError, HotAdd, PassDevice, Shape, MAX_VCPUS};
use numaplace_topo::CpuSet;

/// ESXi's default `numa.vcpu.min`: smaller VMs see one node.
pub const VNUMA_MIN_VCPUS: u32 = 9;

/// One `key = "value"` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Key, lower-cased.
    pub key: String,
    /// Value without quotes.
    pub value: String,
    /// 1-based line.
    pub line: u32,
    /// The line as written, trimmed.
    pub text: String,
}

/// Splits a `.vmx` into entries; comments and blank lines are skipped.
pub fn entries(text: &str) -> Result<Vec<Entry>, VmError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i as u32 + 1;
        let t = raw.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let syntax = || VmError::VmxSyntax { line, text: t.chars().take(80).collect() };
        let (key, value) = t.split_once('=').ok_or_else(syntax)?;
        let key = key.trim();
        let value = value.trim();
        if key.is_empty() || key.contains(char::is_whitespace) || key.contains('"') {
            return Err(syntax());
        }
        let value = match value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
            Some(inner) => inner,
            // ESXi writes every value quoted; bare words are accepted
            // because hand-edited files have them.
            None if !value.contains('"') => value,
            None => return Err(syntax()),
        };
        out.push(Entry { key: key.to_ascii_lowercase(), value: value.to_string(), line, text: t.to_string() });
    }
    Ok(out)
}

/// The last entry of a key (ESXi keeps the last of duplicates).
pub fn last<'a>(entries: &'a [Entry], key: &str) -> Option<&'a Entry> {
    entries.iter().rev().find(|e| e.key == key)
}

fn count(e: &Entry, expected: &'static str) -> Result<u32, VmError> {
    e.value
        .trim()
        .parse::<u32>()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| VmError::bad(e.line, e.key.clone(), expected, &e.value))
}

fn boolean(e: &Entry) -> Result<bool, VmError> {
    match e.value.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "1" => Ok(true),
        "false" | "no" | "0" => Ok(false),
        _ => Err(VmError::bad(e.line, e.key.clone(), "TRUE or FALSE", &e.value)),
    }
}

/// A comma list of numbers and ranges (`0,1,4-7`).
fn list(e: &Entry) -> Result<CpuSet, VmError> {
    CpuSet::parse_list(&e.value.replace(' ', ""))
        .map_err(|_| VmError::bad(e.line, e.key.clone(), "a list such as 0,1,4-7", &e.value))
}

/// A PCI address as ESXi writes it (`0000:3b:00.0` or `3b:00.0`, hex).
fn pci_address(e: &Entry) -> Result<String, VmError> {
    let bad = || VmError::bad(e.line, e.key.clone(), "a PCI address such as 0000:3b:00.0", &e.value);
    let parts: Vec<&str> = e.value.trim().split(':').collect();
    let (domain, bus, rest) = match parts.as_slice() {
        [d, b, r] => (*d, *b, *r),
        [b, r] => ("0", *b, *r),
        _ => return Err(bad()),
    };
    let (slot, function) = rest.split_once('.').ok_or_else(bad)?;
    let hex = |s: &str| u32::from_str_radix(s, 16).map_err(|_| bad());
    Ok(format!("{:04x}:{:02x}:{:02x}.{:x}", hex(domain)?, hex(bus)?, hex(slot)?, hex(function)?))
}

/// Parses a `.vmx` into a definition; `file` is its name when it has no
/// `displayName`. Cells that depend on the host are left empty for
/// [`derive_cells`] (the returned flag says so).
pub fn parse(file: &str, text: &str) -> Result<(Definition, bool), VmError> {
    let entries = entries(text)?;
    let name = last(&entries, "displayname").map(|e| e.value.clone()).unwrap_or_else(|| file.to_string());
    let mut vm = Definition { name, vcpus: 1, ..Definition::default() };
    if let Some(e) = last(&entries, "numvcpus") {
        vm.vcpus = count(e, "a vCPU count of at least 1")?;
        if vm.vcpus > MAX_VCPUS {
            return Err(VmError::bad(e.line, "numvcpus", "a vCPU count from 1 to 16384", &e.value));
        }
        vm.vcpus_at = e.line;
    }
    let e = last(&entries, "memsize").ok_or(DomainError::Missing("memSize"))?;
    vm.memory_bytes = u64::from(count(e, "a memory size in MB")?) << 20;
    vm.memory_at = e.line;

    let mut cps = 1;
    if let Some(e) = last(&entries, "cpuid.corespersocket") {
        cps = count(e, "a core count of at least 1")?;
        if !vm.vcpus.is_multiple_of(cps) {
            return Err(VmError::bad(e.line, "cpuid.coresPerSocket", "a divisor of numvcpus", &e.value));
        }
        vm.shape = Some(Shape { sockets: vm.vcpus / cps, dies: 1, cores: cps, threads: 1, at: e.line });
    }
    if let Some(e) = last(&entries, "vcpu.hotadd") {
        if boolean(e)? {
            vm.hotadd = Some(HotAdd { current: None, at: e.line, also: None });
        }
    }
    if let Some(e) = last(&entries, "sched.cpu.affinity") {
        let v = e.value.trim();
        if !v.eq_ignore_ascii_case("all") && !v.is_empty() {
            vm.cpuset = Some((list(e)?, e.line));
        }
    }
    if let Some(e) = last(&entries, "numa.nodeaffinity") {
        if !e.value.trim().is_empty() {
            vm.node_affinity = Some((list(e)?, e.line));
        }
    }
    let mut ids: Vec<(u32, &Entry)> = Vec::new();
    for e in &entries {
        let Some(rest) = e.key.strip_prefix("pcipassthru") else { continue };
        let Some((index, "id")) = rest.split_once('.') else { continue };
        let Ok(index) = index.parse::<u32>() else { continue };
        ids.retain(|(i, _)| *i != index);
        ids.push((index, e));
    }
    ids.sort_by_key(|(i, _)| *i);
    for (index, e) in ids {
        let present = last(&entries, &format!("pcipassthru{index}.present")).map(boolean).transpose()?;
        if present != Some(false) {
            vm.devices.push(PassDevice { address: pci_address(e)?, at: e.line });
        }
    }

    let mut max_per_node = None;
    for key in ["numa.autosize.vcpu.maxpervirtualnode", "numa.vcpu.maxpervirtualnode"] {
        if let Some(e) = last(&entries, key) {
            max_per_node = Some((count(e, "a vCPU count of at least 1")?, e.line));
        }
    }
    let min_vcpus = match last(&entries, "numa.vcpu.min") {
        Some(e) => count(e, "a vCPU count of at least 1")?,
        None => VNUMA_MIN_VCPUS,
    };
    // Cells that do not depend on the host are derived now.
    let fixed = if let Some(h) = &vm.hotadd {
        Some((vm.vcpus, h.at))
    } else if vm.vcpus < min_vcpus {
        Some((vm.vcpus, vm.vcpus_at))
    } else if let Some((max, line)) = max_per_node {
        Some((max, line))
    } else if cps > 1 {
        Some((cps, vm.shape.as_ref().map_or(0, |s| s.at)))
    } else {
        None
    };
    let pending = fixed.is_none();
    if let Some((size, at)) = fixed {
        fill_cells(&mut vm, size, at);
    }
    Ok((vm, pending))
}

/// Cells of `size` vCPUs (the last one smaller), memory in proportion.
fn fill_cells(vm: &mut Definition, size: u32, at: u32) {
    let vcpus = vm.vcpus.max(1);
    let size = size.clamp(1, vcpus);
    let n = vcpus.div_ceil(size);
    let per_vcpu = vm.memory_bytes / u64::from(vcpus);
    vm.cells = (0..n)
        .map(|i| {
            let first = i * size;
            let last = (first + size).min(vcpus) - 1;
            Cell { id: i, vcpus: CpuSet::range(first, last), memory_bytes: per_vcpu * u64::from(last - first + 1), at }
        })
        .collect();
    vm.cells_derived = true;
}

/// Derives the cells ESXi 6.0 gives a VM with one core per socket and no
/// size override: as few cells as hold the vCPUs at one host node's cores
/// each (16 vCPUs on 12-core nodes: 2 cells; 25: 3 cells).
pub fn derive_cells(vm: &mut Definition, node_cores: u32) {
    if !vm.cells.is_empty() || node_cores == 0 {
        return;
    }
    let n = vm.vcpus.div_ceil(node_cores).max(1);
    let size = vm.vcpus.div_ceil(n);
    let at = vm.vcpus_at;
    fill_cells(vm, size, at);
}
