//! A libvirt domain XML for a planned VM: the pinning (`<vcpu>`,
//! `<cputune>`), the memory binding (`<numatune>`, `<memoryBacking>`) and
//! the guest topology (`<cpu>` with `<topology>` and `<numa>` cells and
//! their distances), in a complete domain that `virsh define` accepts.
//!
//! libvirt takes the guest's memory size from the cells and ignores a
//! different `<memory>` (GUEST-TESTING.md); `<memory>` is written as the
//! cell sum so the file says what the guest will get.

use numaplace_plan::{CpuMode, MemoryMode, Placement};
use numaplace_topo::CpuSet;
use std::fmt::Write;

/// The hypervisor libvirt should use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DomainType {
    /// Hardware virtualisation (`<domain type='kvm'>`).
    #[default]
    Kvm,
    /// QEMU software emulation (TCG), for test guests on hosts without
    /// working KVM.
    Qemu,
}

/// The CPU model the guest sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum GuestCpu {
    /// The host CPU passed through (production).
    #[default]
    HostPassthrough,
    /// `qemu64` with the GenuineIntel vendor: under TCG this is the model
    /// that keeps SMT siblings visible to the guest (other models and the
    /// AMD default drop them).
    Qemu64Intel,
}

/// How the domain is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LibvirtOptions {
    /// `kvm` or `qemu`.
    pub domain_type: DomainType,
    /// Guest CPU model.
    pub cpu: GuestCpu,
    /// Machine type (`q35`).
    pub machine: String,
}

impl Default for LibvirtOptions {
    fn default() -> Self {
        LibvirtOptions { domain_type: DomainType::Kvm, cpu: GuestCpu::HostPassthrough, machine: "q35".to_string() }
    }
}

impl LibvirtOptions {
    /// The options for a software-emulated test guest: domain type `qemu`
    /// and the `qemu64`/GenuineIntel CPU.
    pub fn tcg() -> LibvirtOptions {
        LibvirtOptions { domain_type: DomainType::Qemu, cpu: GuestCpu::Qemu64Intel, ..LibvirtOptions::default() }
    }
}

/// Escapes text for XML character data and single- or double-quoted
/// attributes.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\'' => out.push_str("&apos;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

/// KiB, rounded up: libvirt's memory unit, and a size must never shrink
/// below what was planned.
fn kib(bytes: u64) -> u64 {
    bytes.div_ceil(1024)
}

/// The node set of a placement in libvirt's list syntax (`0-1`).
fn nodeset(p: &Placement) -> String {
    p.nodes.iter().map(|n| n.0).collect::<CpuSet>().to_list()
}

/// The domain XML for one placement.
pub fn domain_xml(p: &Placement, opts: &LibvirtOptions) -> String {
    let mut x = String::new();
    // Writing to a String cannot fail; the results are ignored throughout.
    let kind = match opts.domain_type {
        DomainType::Kvm => "kvm",
        DomainType::Qemu => "qemu",
    };
    let _ = writeln!(x, "<domain type='{kind}'>");
    let _ = writeln!(x, "  <name>{}</name>", escape(&p.vm));
    let cells = &p.guest.cells;
    let memory_kib: u64 =
        if cells.is_empty() { kib(p.memory_bytes) } else { cells.iter().map(|c| kib(c.memory_bytes)).sum() };
    let _ = writeln!(x, "  <memory unit='KiB'>{memory_kib}</memory>");
    let _ = writeln!(x, "  <currentMemory unit='KiB'>{memory_kib}</currentMemory>");
    memory_backing(&mut x, p);
    let vcpus = p.vcpus.len().max(p.guest.cells.iter().map(|c| c.vcpus.len()).sum());
    if p.cpuset.is_empty() {
        let _ = writeln!(x, "  <vcpu placement='static'>{vcpus}</vcpu>");
    } else {
        let _ = writeln!(x, "  <vcpu placement='static' cpuset='{}'>{vcpus}</vcpu>", p.cpuset);
    }
    cputune(&mut x, p);
    numatune(&mut x, p);
    let _ = writeln!(x, "  <os>");
    let _ = writeln!(x, "    <type arch='x86_64' machine='{}'>hvm</type>", escape(&opts.machine));
    let _ = writeln!(x, "  </os>");
    // Without ACPI the guest sees one node (no SRAT) and cannot power off.
    let _ = writeln!(x, "  <features>");
    let _ = writeln!(x, "    <acpi/>");
    let _ = writeln!(x, "    <apic/>");
    let _ = writeln!(x, "  </features>");
    cpu(&mut x, p, opts);
    let _ = writeln!(x, "  <on_poweroff>destroy</on_poweroff>");
    let _ = writeln!(x, "  <on_reboot>restart</on_reboot>");
    let _ = writeln!(x, "  <on_crash>destroy</on_crash>");
    let _ = writeln!(x, "  <devices>");
    let _ = writeln!(x, "    <serial type='pty'>");
    let _ = writeln!(x, "      <target port='0'/>");
    let _ = writeln!(x, "    </serial>");
    let _ = writeln!(x, "    <console type='pty'>");
    let _ = writeln!(x, "      <target type='serial' port='0'/>");
    let _ = writeln!(x, "    </console>");
    // A balloon would hand pages back to the host and re-fault them on any
    // node, undoing the binding.
    let _ = writeln!(x, "    <memballoon model='none'/>");
    let _ = writeln!(x, "  </devices>");
    let _ = writeln!(x, "</domain>");
    x
}

fn memory_backing(x: &mut String, p: &Placement) {
    let Some(page) = p.hugepage_bytes else { return };
    let _ = writeln!(x, "  <memoryBacking>");
    let _ = writeln!(x, "    <hugepages>");
    if p.guest.cells.is_empty() {
        let _ = writeln!(x, "      <page size='{}' unit='KiB'/>", kib(page));
    } else {
        // The nodeset here names guest cells, not host nodes.
        let cells: CpuSet = p.guest.cells.iter().map(|c| c.id).collect();
        let _ = writeln!(x, "      <page size='{}' unit='KiB' nodeset='{cells}'/>", kib(page));
    }
    let _ = writeln!(x, "    </hugepages>");
    let _ = writeln!(x, "  </memoryBacking>");
}

fn cputune(x: &mut String, p: &Placement) {
    let pins = p.cpu_mode == CpuMode::Dedicated && !p.vcpus.is_empty();
    if !pins && p.emulator.is_empty() {
        return;
    }
    let _ = writeln!(x, "  <cputune>");
    if pins {
        for v in &p.vcpus {
            let _ = writeln!(x, "    <vcpupin vcpu='{}' cpuset='{}'/>", v.vcpu, v.pu);
        }
    }
    if !p.emulator.is_empty() {
        let _ = writeln!(x, "    <emulatorpin cpuset='{}'/>", p.emulator);
    }
    let _ = writeln!(x, "  </cputune>");
}

fn numatune(x: &mut String, p: &Placement) {
    if p.nodes.is_empty() {
        return;
    }
    let all = nodeset(p);
    let mode = match p.memory_mode {
        MemoryMode::Strict => "strict",
        MemoryMode::Interleave => "interleave",
    };
    let _ = writeln!(x, "  <numatune>");
    let _ = writeln!(x, "    <memory mode='{mode}' nodeset='{all}'/>");
    for c in &p.guest.cells {
        // Interleaved VMs spread every cell over all their nodes; strict
        // ones keep each cell on the host node it mirrors.
        let set = match p.memory_mode {
            MemoryMode::Strict => c.host_node.0.to_string(),
            MemoryMode::Interleave => all.clone(),
        };
        let _ = writeln!(x, "    <memnode cellid='{}' mode='{mode}' nodeset='{set}'/>", c.id);
    }
    let _ = writeln!(x, "  </numatune>");
}

fn cpu(x: &mut String, p: &Placement, opts: &LibvirtOptions) {
    match opts.cpu {
        GuestCpu::HostPassthrough => {
            let _ = writeln!(x, "  <cpu mode='host-passthrough' check='none'>");
        }
        GuestCpu::Qemu64Intel => {
            let _ = writeln!(x, "  <cpu mode='custom' match='exact' check='none'>");
            let _ = writeln!(x, "    <model fallback='allow' vendor_id='GenuineIntel'>qemu64</model>");
        }
    }
    let g = &p.guest;
    let _ = writeln!(
        x,
        "    <topology sockets='{}' dies='1' cores='{}' threads='{}'/>",
        g.sockets.max(1),
        g.cores.max(1),
        g.threads.max(1)
    );
    if !g.cells.is_empty() {
        let _ = writeln!(x, "    <numa>");
        for c in &g.cells {
            let _ =
                write!(x, "      <cell id='{}' cpus='{}' memory='{}' unit='KiB'", c.id, c.vcpus, kib(c.memory_bytes));
            if c.distances.len() == g.cells.len() && g.cells.len() > 1 {
                let _ = writeln!(x, ">");
                let _ = writeln!(x, "        <distances>");
                for (other, d) in g.cells.iter().zip(&c.distances) {
                    let _ = writeln!(x, "          <sibling id='{}' value='{d}'/>", other.id);
                }
                let _ = writeln!(x, "        </distances>");
                let _ = writeln!(x, "      </cell>");
            } else {
                let _ = writeln!(x, "/>");
            }
        }
        let _ = writeln!(x, "    </numa>");
    }
    let _ = writeln!(x, "  </cpu>");
}

/// Several domains, each preceded by a comment naming the VM, for one
/// stream that a person or `csplit` can cut apart.
pub fn domains_xml(placements: &[&Placement], opts: &LibvirtOptions) -> String {
    let mut out = String::new();
    for (i, p) in placements.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let _ = writeln!(out, "<!-- numaplace: domain {} -->", comment_safe(&p.vm));
        out.push_str(&domain_xml(p, opts));
    }
    out
}

/// Text that can sit inside an XML comment, which may not contain `--`.
fn comment_safe(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if c == '-' && out.ends_with('-') {
            out.push(' ');
        }
        out.push(c);
    }
    out
}
