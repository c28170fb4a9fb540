//! libvirt domain XML as `virsh dumpxml` prints it, turned into a
//! [`Definition`]: `<vcpu>`, `<vcpus>`, `<cputune>`, `<numatune>`, `<cpu>`
//! (topology and NUMA cells), `<memory>`, `<memoryBacking>`, PCI
//! `<hostdev>` devices and memory devices. Everything else in the domain
//! is ignored. Every domain libvirt's own tests accept reads
//! (`tests/corpus.rs`); what libvirt derives when a setting is missing or
//! overridden is derived here the same way, each with its source.

use super::{
    BindMode, Binding, Cell, Definition, DomainError, HotAdd, HugePageWish, MemoryDevice, PassDevice, Pin, Shape,
    MAX_VCPUS,
};
use numaplace_topo::CpuSet;
use roxmltree::{Document, Node};

/// Parses the XML, mapping roxmltree's error to a line and column.
pub(crate) fn parse_xml(text: &str) -> Result<Document<'_>, DomainError> {
    let opts = roxmltree::ParsingOptions { allow_dtd: false, ..Default::default() };
    Document::parse_with_options(text, opts).map_err(|e| {
        let (line, column) = match e {
            // roxmltree places an error found at the end of the text (a
            // file cut short) at 1:1; it is where the text ends (as the
            // hwloc reader reports it).
            roxmltree::Error::UnexpectedEndOfStream | roxmltree::Error::UnclosedRootNode => {
                let last = text.rsplit('\n').next().unwrap_or("");
                let line = u32::try_from(text.matches('\n').count() + 1).unwrap_or(u32::MAX);
                (line, u32::try_from(last.chars().count() + 1).unwrap_or(u32::MAX))
            }
            _ => (e.pos().row, e.pos().col),
        };
        DomainError::Xml { line, column, message: e.to_string() }
    })
}

/// The 1-based line a node starts on.
pub(crate) fn line_of(doc: &Document<'_>, node: Node<'_, '_>) -> u32 {
    doc.text_pos_at(node.range().start).row
}

/// The first child element with a name.
pub(crate) fn child<'a, 'i>(node: Node<'a, 'i>, name: &str) -> Option<Node<'a, 'i>> {
    node.children().find(|c| c.is_element() && c.has_tag_name(name))
}

fn children<'a, 'i>(node: Node<'a, 'i>, name: &'static str) -> impl Iterator<Item = Node<'a, 'i>> {
    node.children().filter(move |c| c.is_element() && c.has_tag_name(name))
}

/// Multiplier of a libvirt memory unit (`KiB` when absent), by libvirt's
/// own table ([`numaplace_topo::libvirt_unit_bytes`], shared with the
/// capabilities reader so a unit means the same in both).
pub(crate) fn unit_bytes(unit: Option<&str>) -> Option<u64> {
    unit.map_or(Some(1 << 10), numaplace_topo::libvirt_unit_bytes)
}

fn number(doc: &Document<'_>, node: Node<'_, '_>, field: &str, text: Option<&str>) -> Result<u64, DomainError> {
    let t = text.unwrap_or("").trim();
    t.parse::<u64>().map_err(|_| DomainError::bad(line_of(doc, node), field, "a whole number", t))
}

fn small(doc: &Document<'_>, node: Node<'_, '_>, field: &str, text: Option<&str>) -> Result<u32, DomainError> {
    let n = number(doc, node, field, text)?;
    u32::try_from(n).map_err(|_| DomainError::bad(line_of(doc, node), field, "a number below 2^32", &n.to_string()))
}

fn hex_or_dec(text: &str) -> Option<u32> {
    let t = text.trim();
    match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => t.parse().ok(),
    }
}

/// A libvirt CPU or node list, with its `^N` exclusions (`0-7,^3`).
fn cpuset(doc: &Document<'_>, node: Node<'_, '_>, field: &str, text: &str) -> Result<CpuSet, DomainError> {
    let mut set = CpuSet::new();
    let mut minus = CpuSet::new();
    for piece in text.split(',') {
        let piece = piece.trim();
        let (target, body) = match piece.strip_prefix('^') {
            Some(rest) => (&mut minus, rest),
            None => (&mut set, piece),
        };
        let part = CpuSet::parse_list(body)
            .map_err(|_| DomainError::bad(line_of(doc, node), field, "a CPU list such as 0-3,8", text))?;
        *target = target.union(&part);
    }
    Ok(set.difference(&minus))
}

fn size(
    doc: &Document<'_>,
    node: Node<'_, '_>,
    field: &str,
    value: Option<&str>,
    unit: Option<&str>,
) -> Result<u64, DomainError> {
    let n = number(doc, node, field, value)?;
    let mult = unit_bytes(unit).ok_or_else(|| {
        DomainError::bad(
            line_of(doc, node),
            format!("{field} unit"),
            "a libvirt unit: b, bytes, KB, k, KiB, MB, M, MiB, GB, G, GiB, TB, T, TiB, PB, P, PiB, EB, E or EiB",
            unit.unwrap_or(""),
        )
    })?;
    n.checked_mul(mult)
        .ok_or_else(|| DomainError::bad(line_of(doc, node), field, "a size below 16 EiB", value.unwrap_or("")))
}

/// Reads a domain's XML into what it holds; `file` is its name when the
/// domain has no `<name>`. One element of the domain at a time, in the
/// order below; each part reads only its own element (the memory a domain
/// leaves out is derived last, from the cells and memory devices).
pub fn read(file: &str, text: &str) -> Result<Definition, DomainError> {
    let doc = parse_xml(text)?;
    let root = doc.root_element();
    if !root.has_tag_name("domain") {
        return Err(DomainError::NotADomain {
            line: line_of(&doc, root),
            found: root.tag_name().name().chars().take(40).collect(),
        });
    }
    let name = child(root, "name").and_then(|n| n.text()).unwrap_or("").trim().to_string();
    let mut vm = Definition { name, ..Definition::default() };
    if vm.name.is_empty() {
        vm.name = file.to_string();
    }
    if let Some(meta) = child(root, "metadata") {
        read_mark(meta, &mut vm);
    }
    read_vcpus(&doc, root, &mut vm)?;
    // `<memory>` may be missing when the domain has guest cells: see the
    // end, where the cells (and memory devices) give it.
    let memory = child(root, "memory");
    if let Some(memory) = memory {
        vm.memory_bytes = size(&doc, memory, "memory", memory.text(), memory.attribute("unit"))?;
        vm.memory_at = line_of(&doc, memory);
    }
    if let Some(cur) = child(root, "currentMemory") {
        vm.current_memory_bytes = Some(size(&doc, cur, "currentMemory", cur.text(), cur.attribute("unit"))?);
    }
    if let Some(tune) = child(root, "cputune") {
        read_cputune(&doc, tune, &mut vm)?;
    }
    if let Some(numatune) = child(root, "numatune") {
        read_numatune(&doc, numatune, &mut vm)?;
    }
    if let Some(cpu) = child(root, "cpu") {
        read_cpu(&doc, cpu, &mut vm)?;
    }
    if let Some(huge) = child(root, "memoryBacking").and_then(|b| child(b, "hugepages")) {
        read_hugepages(&doc, huge, &mut vm)?;
    }
    if let Some(devices) = child(root, "devices") {
        read_hostdevs(&doc, devices, &mut vm)?;
        read_memory_devices(&doc, devices, &mut vm)?;
    }
    if memory.is_none() {
        derive_memory(&mut vm)?;
    }
    Ok(vm)
}

/// numaplace's own mark (see write::METADATA_NS), from `<metadata>`.
fn read_mark(meta: Node<'_, '_>, vm: &mut Definition) {
    let mark = meta
        .children()
        .find(|n| n.tag_name().namespace() == Some(super::write::METADATA_NS) && n.tag_name().name() == "vm");
    vm.managed = mark.is_some();
    vm.planned_shared = mark.is_some_and(|n| matches!(n.attribute("cpu"), Some("shared" | "mixed")));
    vm.planned_sibling_vcpus =
        mark.and_then(|n| n.attribute("sibling-vcpus")).and_then(|v| v.trim().parse::<u32>().ok());
    vm.planned_remote_devices = mark
        .and_then(|n| n.attribute("remote-devices"))
        .map(|list| list.split_whitespace().map(str::to_ascii_lowercase).collect())
        .unwrap_or_default();
    vm.planned_mixed = mark.is_some_and(|n| n.attribute("cpu") == Some("mixed"));
    // The mark's figures are hints for counting the VM as planned: a
    // list that does not read is ignored whole, never an error.
    vm.planned_pus = mark
        .and_then(|n| n.attribute("vcpu-pus"))
        .and_then(|list| list.split_whitespace().map(|p| p.parse::<u32>().ok()).collect::<Option<Vec<_>>>())
        .unwrap_or_default();
    vm.planned_charged = mark
        .and_then(|n| n.attribute("charged"))
        .and_then(|list| {
            list.split_whitespace()
                .map(|pair| {
                    let (node, bytes) = pair.split_once(':')?;
                    Some((node.parse::<u32>().ok()?, bytes.parse::<u64>().ok()?))
                })
                .collect::<Option<Vec<_>>>()
        })
        .unwrap_or_default();
}

/// `<vcpu>` (count, `cpuset`, `current`) and `<vcpus>` (hot-pluggable
/// vCPUs).
fn read_vcpus(doc: &Document<'_>, root: Node<'_, '_>, vm: &mut Definition) -> Result<(), DomainError> {
    // A domain without `<vcpu>` has one vCPU: formatdomain.rst gives no
    // default, but libvirt's own tests show it (`console-sclp.xml` has no
    // `<vcpu>` and is written back with `<vcpu placement='static'>1</vcpu>`,
    // tests/qemuxmlconfdata/console-sclp.s390x-latest.xml). The root
    // element stands in for it: no attribute of it is read.
    let vcpu = child(root, "vcpu").unwrap_or(root);
    vm.vcpus = if vcpu == root { 1 } else { small(doc, vcpu, "vcpu", vcpu.text())? };
    if vm.vcpus == 0 || vm.vcpus > MAX_VCPUS {
        return Err(DomainError::bad(
            line_of(doc, vcpu),
            "vcpu",
            "a vCPU count from 1 to 16384",
            &vm.vcpus.to_string(),
        ));
    }
    let at = line_of(doc, vcpu);
    vm.vcpus_at = at;
    // formatdomain.rst, "CPU Allocation", `placement`: "auto" pins the
    // process to numad's advisory nodeset and "the value of attribute
    // cpuset will be ignored if it's specified"; without the attribute it
    // defaults to numatune's placement, or "static" when cpuset is given.
    let numatune_auto = child(root, "numatune")
        .and_then(|t| child(t, "memory"))
        .is_some_and(|m| m.attribute("placement") == Some("auto"));
    let vcpu_auto = match vcpu.attribute("placement") {
        Some(p) => p == "auto",
        None => vcpu.attribute("cpuset").is_none() && numatune_auto,
    };
    if let Some(set) = vcpu.attribute("cpuset").filter(|_| !vcpu_auto) {
        vm.cpuset = Some((cpuset(doc, vcpu, "vcpu/@cpuset", set)?, at));
    }
    if let Some(cur) = vcpu.attribute("current") {
        let current = small(doc, vcpu, "vcpu/@current", Some(cur))?;
        if current < vm.vcpus {
            vm.hotadd = Some(HotAdd { current: Some(current), at, also: None });
        }
    }
    if let Some(vcpus) = child(root, "vcpus") {
        if let Some(hot) = children(vcpus, "vcpu").find(|v| v.attribute("hotpluggable") == Some("yes")) {
            match &mut vm.hotadd {
                Some(h) => h.also = Some(line_of(doc, hot)),
                None => {
                    let enabled = children(vcpus, "vcpu").filter(|v| v.attribute("enabled") != Some("no")).count();
                    vm.hotadd =
                        Some(HotAdd { current: u32::try_from(enabled).ok(), at: line_of(doc, hot), also: None });
                }
            }
        }
    }
    Ok(())
}

/// `<cputune>`: vCPU, emulator and I/O thread pinning.
fn read_cputune(doc: &Document<'_>, tune: Node<'_, '_>, vm: &mut Definition) -> Result<(), DomainError> {
    for pin in children(tune, "vcpupin") {
        let vcpu = small(doc, pin, "vcpupin/@vcpu", pin.attribute("vcpu"))?;
        let cpus = cpuset(doc, pin, "vcpupin/@cpuset", pin.attribute("cpuset").unwrap_or(""))?;
        vm.pins.push(Pin { vcpu, cpus, at: line_of(doc, pin) });
    }
    vm.pins.sort_by_key(|p| p.vcpu);
    if let Some(pin) = child(tune, "emulatorpin") {
        vm.emulator = Some(cpuset(doc, pin, "emulatorpin/@cpuset", pin.attribute("cpuset").unwrap_or(""))?);
    }
    for pin in children(tune, "iothreadpin") {
        let cpus = cpuset(doc, pin, "iothreadpin/@cpuset", pin.attribute("cpuset").unwrap_or(""))?;
        vm.iothreads = vm.iothreads.union(&cpus);
    }
    Ok(())
}

/// `<numatune>`: the whole-VM and per-cell memory bindings.
fn read_numatune(doc: &Document<'_>, numatune: Node<'_, '_>, vm: &mut Definition) -> Result<(), DomainError> {
    let all = children(numatune, "memory").map(|n| (n, false)).chain(children(numatune, "memnode").map(|n| (n, true)));
    for (node, per_cell) in all {
        // formatdomain.rst, "NUMA Node Tuning", `memory`: placement
        // "auto" allocates "only from the advisory nodeset returned
        // from querying numad, and the value of attribute nodeset will
        // be ignored if it's specified"; without the attribute it is
        // "static" when a nodeset is given. So a given nodeset binds
        // only when the placement is not "auto": numad's nodes are not
        // known here, so such memory is read as unbound.
        if !per_cell && node.attribute("placement") == Some("auto") {
            continue;
        }
        let Some(nodeset) = node.attribute("nodeset") else { continue };
        let mode_text = node.attribute("mode").unwrap_or("strict");
        let mode = BindMode::parse(mode_text).ok_or_else(|| {
            DomainError::bad(
                line_of(doc, node),
                "numatune mode",
                "strict, preferred, interleave or restrictive",
                mode_text,
            )
        })?;
        let cell = if per_cell { Some(small(doc, node, "memnode/@cellid", node.attribute("cellid"))?) } else { None };
        let nodes = cpuset(doc, node, "numatune nodeset", nodeset)?;
        vm.bindings.push(Binding { cell, mode, nodes, at: line_of(doc, node) });
    }
    Ok(())
}

/// `<cpu>`: the guest CPU shape (`<topology>`) and NUMA cells.
fn read_cpu(doc: &Document<'_>, cpu: Node<'_, '_>, vm: &mut Definition) -> Result<(), DomainError> {
    if let Some(topo) = child(cpu, "topology") {
        let get = |name: &str| -> Result<u32, DomainError> {
            match topo.attribute(name) {
                None => Ok(1),
                Some(v) => v.trim().parse::<u32>().ok().filter(|&n| n > 0).ok_or_else(|| {
                    DomainError::bad(line_of(doc, topo), format!("topology/@{name}"), "a count of at least 1", v)
                }),
            }
        };
        vm.shape = Some(Shape {
            sockets: get("sockets")?,
            dies: get("dies")?,
            cores: get("cores")?,
            threads: get("threads")?,
            at: line_of(doc, topo),
        });
    }
    let Some(numa) = child(cpu, "numa") else { return Ok(()) };
    for (i, cell) in children(numa, "cell").enumerate() {
        let id = match cell.attribute("id") {
            Some(t) => small(doc, cell, "cell/@id", Some(t))?,
            None => i as u32,
        };
        let vcpus = match cell.attribute("cpus") {
            Some(t) => cpuset(doc, cell, "cell/@cpus", t)?,
            None => CpuSet::new(),
        };
        let memory_bytes = size(doc, cell, "cell/@memory", cell.attribute("memory"), cell.attribute("unit"))?;
        vm.cells.push(Cell { id, vcpus, memory_bytes, at: line_of(doc, cell) });
    }
    // formatdomain.rst, "CPU model and topology" (NUMA cells): for
    // QEMU "the sum of all CPUs declared in each cell will be
    // matched with the maximum number of virtual CPUs declared in
    // the vcpu element. This is done by filling any remaining CPUs
    // into the first NUMA cell" (libvirt's own test
    // numavcpus-topology-mismatch.xml is written back so). The first
    // cell is cell 0: libvirt keeps cells by id.
    let listed = vm.cells.iter().fold(CpuSet::new(), |a, c| a.union(&c.vcpus));
    let rest = CpuSet::range(0, vm.vcpus - 1).difference(&listed);
    if !rest.is_empty() {
        if let Some(first) = vm.cells.iter_mut().min_by_key(|c| c.id) {
            first.vcpus = first.vcpus.union(&rest);
        }
    }
    Ok(())
}

/// `<memoryBacking><hugepages>`: one wish per `<page>`, or one for the
/// host's default size.
fn read_hugepages(doc: &Document<'_>, huge: Node<'_, '_>, vm: &mut Definition) -> Result<(), DomainError> {
    let pages: Vec<_> = children(huge, "page").collect();
    if pages.is_empty() {
        vm.hugepages.push(HugePageWish { size_bytes: None, cells: None, at: line_of(doc, huge) });
    }
    for page in pages {
        let size_bytes = size(doc, page, "page/@size", page.attribute("size"), page.attribute("unit"))?;
        let cells = match page.attribute("nodeset") {
            Some(t) => Some(cpuset(doc, page, "page/@nodeset", t)?),
            None => None,
        };
        vm.hugepages.push(HugePageWish { size_bytes: Some(size_bytes), cells, at: line_of(doc, page) });
    }
    Ok(())
}

/// PCI `<hostdev>` devices passed through.
fn read_hostdevs(doc: &Document<'_>, devices: Node<'_, '_>, vm: &mut Definition) -> Result<(), DomainError> {
    for dev in children(devices, "hostdev").filter(|d| d.attribute("type") == Some("pci")) {
        let Some(addr) = child(dev, "source").and_then(|s| child(s, "address")) else { continue };
        let field = |name: &str| addr.attribute(name).and_then(hex_or_dec);
        let (Some(bus), Some(slot), Some(function)) = (field("bus"), field("slot"), field("function")) else {
            return Err(DomainError::bad(line_of(doc, addr), "hostdev source address", "bus, slot and function", ""));
        };
        let domain = field("domain").unwrap_or(0);
        let address = format!("{domain:04x}:{bus:02x}:{slot:02x}.{function:x}");
        vm.devices.push(PassDevice { address, at: line_of(doc, addr) });
    }
    Ok(())
}

/// Memory devices: formatdomain.rst, "Memory devices": `<target><size>`
/// (mandatory) and `<node>` (the guest cell it attaches to);
/// `<source><nodemask>` "override[s] the default set of NUMA nodes where
/// the memory would be allocated" (else numatune's defaults apply).
fn read_memory_devices(doc: &Document<'_>, devices: Node<'_, '_>, vm: &mut Definition) -> Result<(), DomainError> {
    for dev in children(devices, "memory") {
        let model = dev.attribute("model").unwrap_or("").to_string();
        let target = child(dev, "target");
        let size_bytes = match target.and_then(|t| child(t, "size")) {
            Some(s) => size(doc, s, "memory/target/size", s.text(), s.attribute("unit"))?,
            None => 0,
        };
        let cell = match target.and_then(|t| child(t, "node")) {
            Some(n) => Some(small(doc, n, "memory/target/node", n.text())?),
            None => None,
        };
        let host_nodes = match child(dev, "source").and_then(|s| child(s, "nodemask")) {
            Some(m) => Some(cpuset(doc, m, "memory/source/nodemask", m.text().unwrap_or(""))?),
            None => None,
        };
        vm.memory_devices.push(MemoryDevice { model, size_bytes, cell, host_nodes, at: line_of(doc, dev) });
    }
    Ok(())
}

/// The memory of a domain without `<memory>`: formatdomain.rst, "Memory
/// Allocation": "In case NUMA is configured for the guest ... the memory
/// element can be omitted"; the initial memory is then "the NUMA cell
/// size configuration" (`maxMemory`), and `memory` "includes possible
/// additional memory devices specified at start".
fn derive_memory(vm: &mut Definition) -> Result<(), DomainError> {
    if vm.cells.is_empty() {
        return Err(DomainError::Missing("<memory> (or guest NUMA cells giving it)"));
    }
    let cells = vm.cells.iter().fold(0u64, |a, c| a.saturating_add(c.memory_bytes));
    let devices = vm.memory_devices.iter().fold(0u64, |a, d| a.saturating_add(d.size_bytes));
    vm.memory_bytes = cells.saturating_add(devices);
    vm.memory_at = vm.cells.first().map_or(0, |c| c.at);
    vm.memory_derived = true;
    Ok(())
}
