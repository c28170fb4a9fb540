//! Converting between the planner's values and the plan document: a
//! placement, a rejection and a whole plan, both ways.

use super::*;

pub(super) fn list(set: &CpuSet) -> Vec<u32> {
    // Sized first: collecting the set's iterator grows the list 4, 8, 16.
    let mut v = Vec::with_capacity(set.len());
    v.extend(set.iter());
    v
}

/// A decision's sentence, in a string sized for one: formatting into an
/// empty string grows it four or five times.
pub(super) fn sentence(words: &(impl fmt::Display + ?Sized)) -> String {
    use fmt::Write;
    let mut s = String::with_capacity(128);
    // Writing into a string cannot fail.
    let _ = write!(s, "{words}");
    s
}

pub(super) fn set(cpus: &[u32]) -> CpuSet {
    cpus.iter().copied().collect()
}

pub(super) fn memory_mode_name(mode: MemoryMode) -> &'static str {
    match mode {
        MemoryMode::Strict => "strict",
        MemoryMode::Interleave => "interleave",
    }
}

impl From<&Placement> for PlacementDoc {
    fn from(p: &Placement) -> Self {
        PlacementView::of_placement(p).to_doc()
    }
}

impl PlacementDoc {
    /// A placed VM with the planner's reasoning; `request` is what it was
    /// planned from.
    pub fn from_decision(d: &Decision, request: Option<&numaplace_plan::Request>) -> PlacementDoc {
        PlacementView::of_decision(d, request).to_doc()
    }

    /// The placement this entry describes; `at` is its path in the
    /// document, for errors (`placements[0]`).
    pub fn to_placement(&self, at: &str) -> Result<Placement, PlanDocError> {
        let bad = |field: &str, expected: &'static str, found: &str| PlanDocError::BadValue {
            field: format!("{at}.{field}"),
            expected,
            found: format!("\"{found}\""),
        };
        let cpu_mode = match (self.cpu_mode.as_str(), self.floating.is_empty()) {
            ("dedicated", true) | ("mixed", false) => CpuMode::Dedicated,
            ("shared", true) => CpuMode::Shared,
            ("mixed", true) => return Err(bad("floating", "the floating vCPUs of a mixed VM", "none")),
            (_, false) => {
                return Err(bad("cpu_mode", "mixed, for a VM with floating vCPUs", &self.cpu_mode));
            }
            (other, true) => return Err(bad("cpu_mode", "dedicated, shared or mixed", other)),
        };
        let memory_mode = match self.memory_mode.as_str() {
            "strict" => MemoryMode::Strict,
            "interleave" => MemoryMode::Interleave,
            other => return Err(bad("memory_mode", "strict or interleave", other)),
        };
        if self.vm.is_empty() {
            return Err(bad("vm", "a VM name", ""));
        }
        self.check_bounds(at)?;
        let vcpus = self.vcpu_pins(at)?;
        Ok(Placement {
            vm: self.vm.clone(),
            nodes: self.nodes.iter().copied().map(NodeId).collect(),
            cpu_mode,
            vcpus,
            cpuset: set(&self.cpuset),
            emulator: set(&self.emulator),
            memory: self.memory.iter().map(|m| (NodeId(m.node), m.bytes)).collect(),
            memory_bytes: self.memory_bytes,
            memory_mode,
            hugepage_bytes: self.hugepage_bytes,
            guest: GuestTopology {
                sockets: self.guest.sockets,
                dies: self.guest.dies.max(1),
                cores: self.guest.cores,
                threads: self.guest.threads,
                cells: self
                    .guest
                    .cells
                    .iter()
                    .map(|c| GuestCell {
                        id: c.id,
                        vcpus: set(&c.vcpus),
                        memory_bytes: c.memory_bytes,
                        host_node: NodeId(c.host_node),
                        distances: c.distances.clone(),
                        memory_nodes: c.memory_nodes.iter().map(|m| (NodeId(m.node), m.bytes)).collect(),
                    })
                    .collect(),
            },
            online_vcpus: self.online_vcpus,
            devices: self.devices.clone(),
            floating: self
                .floating
                .iter()
                .map(|f| Floating { node: NodeId(f.node), vcpus: set(&f.vcpus), cpus: set(&f.cpus) })
                .collect(),
            charged: self.charged.iter().map(|m| (NodeId(m.node), m.bytes)).collect(),
        })
    }

    /// The entry in the form this version writes: a version 1 entry's
    /// `vcpus` become `pins`. Call it on entries [`PlacementDoc::to_placement`]
    /// accepted, which checked that nothing is lost.
    pub fn into_current(mut self) -> PlacementDoc {
        // Only when the cells name every vCPU's node: a domain pinned by
        // hand (no cells, or cells on other nodes) keeps `vcpus`, the one
        // form that says its nodes.
        let cells_say_nodes = self.vcpus.iter().all(|v| {
            self.guest.cells.iter().find(|c| c.vcpus.contains(&v.vcpu)).is_some_and(|c| c.host_node == v.node)
        });
        if self.pins.is_empty() && !self.vcpus.is_empty() && cells_say_nodes {
            self.pins = self.vcpus.iter().map(|v| v.pu).collect();
            self.vcpus.clear();
        }
        self
    }

    /// Each vCPU's PU and node: from `pins` (version 2), the node being
    /// that of the guest cell holding the vCPU, or from `vcpus` (version 1).
    pub(super) fn vcpu_pins(&self, at: &str) -> Result<Vec<VcpuPin>, PlanDocError> {
        if self.pins.is_empty() {
            // Version 1, or a domain pinned by hand: vCPUs in order, each
            // naming its node. A vCPU may sit on another node than its
            // guest cell's (a numaplace domain re-pinned by hand across
            // nodes, as an agent reports it); the host state checks each
            // node against its CPU, and `into_current` keeps such an entry
            // in this form.
            for (j, v) in self.vcpus.iter().enumerate() {
                if v.vcpu as usize != j {
                    return Err(PlanDocError::BadValue {
                        field: format!("{at}.vcpus[{j}].vcpu"),
                        expected: "the vCPUs in order from 0",
                        found: v.vcpu.to_string(),
                    });
                }
            }
            return Ok(self.vcpus.iter().map(|v| VcpuPin { vcpu: v.vcpu, pu: v.pu, node: NodeId(v.node) }).collect());
        }
        if !self.vcpus.is_empty() {
            // Both, as the fleet service answers a placement whose guest
            // cells do not name its host nodes (a domain pinned by hand):
            // `pins` for every reader, `vcpus` for the nodes. They must
            // name the same PUs; the nodes then come from `vcpus`.
            let agree =
                self.pins.len() == self.vcpus.len() && self.pins.iter().zip(&self.vcpus).all(|(p, v)| *p == v.pu);
            if !agree {
                return Err(PlanDocError::BadValue {
                    field: format!("{at}.vcpus"),
                    expected: "pins or vcpus, or both naming the same PUs in order",
                    found: "both, naming other PUs".to_string(),
                });
            }
            let mut alone = self.clone();
            alone.pins.clear();
            return alone.vcpu_pins(at);
        }
        self.pins
            .iter()
            .enumerate()
            .map(|(i, &pu)| {
                let vcpu = i as u32;
                let cell = self.guest.cells.iter().find(|c| c.vcpus.contains(&vcpu)).ok_or_else(|| {
                    PlanDocError::BadValue {
                        field: format!("{at}.guest.cells"),
                        expected: "a cell for every pinned vCPU",
                        found: format!("none holding vCPU {vcpu}"),
                    }
                })?;
                Ok(VcpuPin { vcpu, pu, node: NodeId(cell.host_node) })
            })
            .collect()
    }

    /// Refuses numbers that would size what [`PlacementDoc::to_placement`]
    /// builds, before it builds anything: CPU and vCPU numbers (a set is a
    /// bitmap up to its highest number), node numbers, list lengths, and a
    /// guest shape of more vCPUs than any host has CPU numbers (the guest
    /// check walks every one).
    pub(super) fn check_bounds(&self, at: &str) -> Result<(), PlanDocError> {
        let out = |field: String, expected: &'static str, found: String| {
            Err(PlanDocError::BadValue { field: format!("{at}.{field}"), expected, found })
        };
        let count = |field: &str, len: usize, max: u32, expected: &'static str| {
            if len > max as usize {
                return out(field.to_string(), expected, format!("{len} entries"));
            }
            Ok(())
        };
        const CPU: &str = "a number below 65536";
        const NODE: &str = "a node number below 4096";
        count("nodes", self.nodes.len(), MAX_NODE, "at most 4096 nodes")?;
        count("vcpus", self.vcpus.len(), MAX_CPU, "at most 65536 vCPUs")?;
        count("pins", self.pins.len(), MAX_CPU, "at most 65536 vCPUs")?;
        count("memory", self.memory.len(), MAX_NODE, "one entry per node, at most 4096")?;
        count("guest.cells", self.guest.cells.len(), MAX_NODE, "at most 4096 cells")?;
        if let Some((j, &n)) = self.nodes.iter().enumerate().find(|(_, &n)| n >= MAX_NODE) {
            return out(format!("nodes[{j}]"), NODE, n.to_string());
        }
        for (j, v) in self.vcpus.iter().enumerate() {
            for (name, value, limit, expected) in
                [("vcpu", v.vcpu, MAX_CPU, CPU), ("pu", v.pu, MAX_CPU, CPU), ("node", v.node, MAX_NODE, NODE)]
            {
                if value >= limit {
                    return out(format!("vcpus[{j}].{name}"), expected, value.to_string());
                }
            }
        }
        if let Some((j, m)) = self.memory.iter().enumerate().find(|(_, m)| m.node >= MAX_NODE) {
            return out(format!("memory[{j}].node"), NODE, m.node.to_string());
        }
        count("charged", self.charged.len(), MAX_NODE, "one entry per node, at most 4096")?;
        if let Some((j, m)) = self.charged.iter().enumerate().find(|(_, m)| m.node >= MAX_NODE) {
            return out(format!("charged[{j}].node"), NODE, m.node.to_string());
        }
        let mut lists: Vec<(String, &[u32])> =
            vec![("pins".into(), &self.pins), ("cpuset".into(), &self.cpuset), ("emulator".into(), &self.emulator)];
        count("floating", self.floating.len(), MAX_NODE, "one entry per node, at most 4096")?;
        for (j, f) in self.floating.iter().enumerate() {
            if f.node >= MAX_NODE {
                return out(format!("floating[{j}].node"), NODE, f.node.to_string());
            }
            lists.push((format!("floating[{j}].vcpus"), &f.vcpus));
            lists.push((format!("floating[{j}].cpus"), &f.cpus));
        }
        for (j, c) in self.guest.cells.iter().enumerate() {
            for (name, value) in [("id", c.id), ("host_node", c.host_node)] {
                if value >= MAX_NODE {
                    return out(format!("guest.cells[{j}].{name}"), NODE, value.to_string());
                }
            }
            count(&format!("guest.cells[{j}].distances"), c.distances.len(), MAX_NODE, "one distance per cell")?;
            count(&format!("guest.cells[{j}].memory_nodes"), c.memory_nodes.len(), MAX_NODE, "one entry per node")?;
            if let Some((k, m)) = c.memory_nodes.iter().enumerate().find(|(_, m)| m.node >= MAX_NODE) {
                return out(format!("guest.cells[{j}].memory_nodes[{k}].node"), NODE, m.node.to_string());
            }
            lists.push((format!("guest.cells[{j}].vcpus"), &c.vcpus));
        }
        for (field, cpus) in lists {
            if let Some(c) = cpus.iter().find(|&&c| c >= MAX_CPU) {
                return out(field, CPU, c.to_string());
            }
        }
        let planned = self.pins.len().max(self.vcpus.len());
        if let Some(online) = self.online_vcpus {
            if online == 0 || online as usize >= planned {
                return out("online_vcpus".into(), "from 1 to one less than the vCPUs pinned", online.to_string());
            }
        }
        count("devices", self.devices.len(), 4096, "at most 4096 devices")?;
        if let Some((j, d)) = self.devices.iter().enumerate().find(|(_, d)| !request::is_pci_address(d)) {
            let found: String = d.chars().take(80).collect();
            return out(format!("devices[{j}]"), "a PCI address such as 0000:3b:00.0", format!("\"{found}\""));
        }
        let g = &self.guest;
        // Four u32 factors can pass u64: saturate rather than overflow.
        let shape =
            [g.sockets, g.dies, g.cores, g.threads].iter().fold(1u64, |a, &n| a.saturating_mul(u64::from(n.max(1))));
        if shape > u64::from(MAX_CPU) {
            let found = format!("{} x {} x {} x {}", g.sockets, g.dies, g.cores, g.threads);
            return out("guest".into(), "sockets x dies x cores x threads of at most 65536 vCPUs", found);
        }
        Ok(())
    }

    /// The planner's decision this entry records (placement, alternatives
    /// and notes).
    pub fn to_decision(&self, at: &str) -> Result<Decision, PlanDocError> {
        Ok(Decision {
            placement: self.to_placement(at)?.into(),
            alternatives: self
                .alternatives
                .iter()
                .map(|a| Alternative {
                    nodes: a.nodes.iter().copied().map(NodeId).collect(),
                    verdict: a.verdict.as_str().into(),
                })
                .collect(),
            notes: self.notes.iter().map(|n| Note::Text(n.text().to_string())).collect(),
        })
    }
}

impl RejectionDoc {
    /// For a CPU shortfall, names the VMs holding the host's CPUs (from
    /// [`numaplace_plan::HostState::cpu_holders`]), in the fields and the
    /// sentence; any other rejection is returned as it was.
    pub fn with_holders(mut self, r: &Rejection, holders: &[numaplace_plan::Holder]) -> RejectionDoc {
        if r.reason.is_cpu_short() && !holders.is_empty() {
            self.held_by = holders.iter().map(HolderDoc::from).collect();
            self.reason = format!("{}; {}", self.reason, numaplace_plan::held_by(holders));
        }
        self
    }

    /// A rejection, with the request it answered.
    pub fn new(r: &Rejection, request: Option<&numaplace_plan::Request>) -> RejectionDoc {
        let mut doc = RejectionDoc {
            vm: r.vm.clone(),
            code: r.reason.code().to_string(),
            reason: r.reason.to_string(),
            resource: None,
            needed: None,
            memory_bytes: None,
            hugepage_bytes: None,
            max_nodes: None,
            best_total: None,
            nodes: Vec::new(),
            held_by: Vec::new(),
            request: request.map(RequestDoc::from),
        };
        let free = |b: &NodeFree| NodeFreeDoc { node: b.node.0, free: b.free, memory_bytes: b.memory };
        match &r.reason {
            RejectReason::CpuShort { resource, needed, max_nodes, best, best_total } => {
                doc.resource = Some(resource.code().to_string());
                doc.needed = Some(*needed);
                doc.max_nodes = Some(*max_nodes);
                doc.best_total = Some(*best_total);
                doc.nodes = best.iter().map(free).collect();
            }
            RejectReason::MemoryShort { needed, hugepage, max_nodes, best_total, .. } => {
                doc.memory_bytes = Some(*needed);
                doc.hugepage_bytes = *hugepage;
                doc.max_nodes = Some(*max_nodes);
                doc.best_total = Some(*best_total);
            }
            RejectReason::NoJointFit { resource, needed, memory, max_nodes, best } => {
                doc.resource = Some(resource.code().to_string());
                doc.needed = Some(*needed);
                doc.memory_bytes = Some(*memory);
                doc.max_nodes = Some(*max_nodes);
                doc.nodes = best.iter().map(free).collect();
            }
            RejectReason::MemoryKindShort { needed, best_total, .. } => {
                doc.memory_bytes = Some(*needed);
                doc.best_total = Some(*best_total);
            }
            RejectReason::Unreachable { resource, needed, memory, .. } => {
                doc.resource = Some(resource.code().to_string());
                doc.needed = Some(*needed);
                doc.memory_bytes = Some(*memory);
            }
            RejectReason::GuestNodesUneven { guest_nodes, memory, .. } => {
                doc.needed = Some(u64::from(*guest_nodes));
                doc.memory_bytes = Some(*memory);
            }
            RejectReason::NotWholePages { memory, page } => {
                doc.memory_bytes = Some(*memory);
                doc.hugepage_bytes = Some(*page);
            }
            RejectReason::NotWholeBlocks { memory, .. } => doc.memory_bytes = Some(*memory),
            RejectReason::NoHugePagePool { size } | RejectReason::BadHugePageSize { size } => {
                doc.hugepage_bytes = Some(*size);
            }
            RejectReason::DeviceNodeFull { resource, at, .. } => {
                doc.resource = Some(resource.code().to_string());
                doc.nodes = vec![free(at)];
            }
            RejectReason::DevicesOnTooManyNodes { nodes, max_nodes } => {
                doc.needed = Some(*nodes as u64);
                doc.max_nodes = Some(*max_nodes);
            }
            RejectReason::CellsOverNodes { cells, max_nodes } => {
                doc.needed = Some(*cells as u64);
                doc.max_nodes = Some(*max_nodes);
            }
            RejectReason::CellsNoFit { resource, cells, best, .. } => {
                doc.resource = Some(resource.code().to_string());
                doc.needed = Some(cells.iter().map(|c| c.0).sum());
                doc.memory_bytes = Some(cells.iter().map(|c| c.1).sum());
                doc.nodes = best.iter().map(free).collect();
            }
            RejectReason::HotAddWide { nodes } => {
                doc.needed = Some(nodes.len() as u64);
                doc.nodes = nodes.iter().map(|n| NodeFreeDoc { node: n.0, free: 0, memory_bytes: 0 }).collect();
            }
            _ => {}
        }
        doc
    }
}

impl PlanDoc {
    /// An empty plan for a host.
    pub fn new(host: Option<String>) -> PlanDoc {
        PlanDoc {
            format: FORMAT.to_string(),
            version: VERSION,
            host,
            host_topology: None,
            reserved: None,
            accel: None,
            placements: Vec::new(),
            rejected: Vec::new(),
            held: Vec::new(),
        }
    }

    /// Parses a plan document and checks its header.
    pub fn parse(text: &str) -> Result<PlanDoc, PlanDocError> {
        let doc: PlanDoc = serde_json::from_str(text).map_err(|e| PlanDocError::Json {
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })?;
        if doc.format != FORMAT {
            return Err(PlanDocError::WrongFormat(doc.format));
        }
        if !(OLDEST_VERSION..=VERSION).contains(&doc.version) {
            return Err(PlanDocError::UnsupportedVersion(doc.version));
        }
        // Each version has its own form of the pinning; a document mixing
        // them was edited by hand or by a tool that misread the format.
        let (field, expected) = if doc.version == 1 {
            ("pins", "vcpus (version 1 has no pins)")
        } else {
            ("vcpus", "pins (version 2 writes the pinning as pins)")
        };
        let wrong =
            doc.placements.iter().position(|p| if doc.version == 1 { !p.pins.is_empty() } else { !p.vcpus.is_empty() });
        if let Some(i) = wrong {
            return Err(PlanDocError::BadValue {
                field: format!("placements[{i}].{field}"),
                expected,
                found: format!("{field} in a version {} document", doc.version),
            });
        }
        Ok(doc)
    }

    /// The document as people read it: the outer levels one member per
    /// line, each placement's fields on a line each, ending in a newline.
    pub fn to_json(&self) -> String {
        let mut out = Vec::new();
        // Writing plain data with string keys into memory cannot fail.
        let _ = self.write_json(&mut out, false);
        String::from_utf8(out).unwrap_or_default()
    }

    /// Writes the document to `out`: laid out for people (as
    /// [`PlanDoc::to_json`]), or `compact` on one line for programs; a
    /// newline ends both. Stream it into a buffered writer: a plan of
    /// thousands of VMs is never held as one string.
    pub fn write_json<W: std::io::Write>(&self, out: W, compact: bool) -> std::io::Result<()> {
        self.write_json_with([], out, compact)
    }

    /// [`PlanDoc::write_json`] with `placed` written after the document's
    /// own placements, straight from the values they borrow: a plan's
    /// fresh decisions are never copied into document entries first, and
    /// each view is made as its entry is written.
    pub fn write_json_with<'p, W: std::io::Write>(
        &self,
        placed: impl IntoIterator<Item = PlacementView<'p>>,
        mut out: W,
        compact: bool,
    ) -> std::io::Result<()> {
        // Levels 1-3 (the document, its lists of VMs, and each VM) one
        // member per line; written by hand, as serde would lay them out.
        write::plan_doc(&mut out, self, placed, compact)?;
        out.write_all(b"\n")
    }

    /// The placements, to be recorded as host state. Stored requests are
    /// checked too, so a hand-edited state fails here rather than later.
    pub fn to_placements(&self) -> Result<Vec<Placement>, PlanDocError> {
        // Each placement's sets are bounded on their own; the document's
        // together are held to the same budget as a topology's, checked as
        // they are built so the overshoot is one placement at most.
        let mut bytes = 0usize;
        self.placements
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let at = format!("placements[{i}]");
                if let Some(r) = &p.request {
                    r.to_request(&format!("{at}.request")).map_err(PlanDocError::Request)?;
                }
                let placement = p.to_placement(&at)?;
                bytes += placement.cpuset.bytes()
                    + placement.emulator.bytes()
                    + placement.guest.cells.iter().map(|c| c.vcpus.bytes()).sum::<usize>();
                if bytes > MAX_SETS_BYTES {
                    return Err(PlanDocError::BadValue {
                        field: "placements".to_string(),
                        expected: "CPU lists that fit in 128 MiB of bitmaps (one bit per number up to each list's \
                                   highest)",
                        found: format!("more, by {at}"),
                    });
                }
                Ok(placement)
            })
            .collect()
    }
}
