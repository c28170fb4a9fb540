//! Reading a host state: free capacity per node and PU and the lookups
//! the planner makes (who holds each CPU: `holders`).

use super::*;

impl HostState {
    /// A PU's core, by its index on the PU's node (`u32::MAX`, which
    /// names no core, for a PU outside the tables).
    pub(super) fn core_at(&self, pu: u32) -> u32 {
        self.pu_core.get(pu as usize).copied().unwrap_or(u32::MAX)
    }

    /// A PU's node position and core index on it.
    pub(crate) fn core_index(&self, pu: u32) -> Option<(usize, u32)> {
        Some((self.pu_node.get(pu as usize).copied().flatten()?, self.core_at(pu)))
    }

    /// Position of a node id.
    pub(crate) fn node_pos(&self, id: NodeId) -> Option<usize> {
        self.facts.binary_search_by_key(&id, |f| f.id).ok()
    }

    /// Number of nodes.
    pub(crate) fn node_count(&self) -> usize {
        self.facts.len()
    }

    /// What each node can give VMs, in node order ([`NodeCapacity`]: the
    /// one definition of it).
    pub fn capacity(&self) -> Vec<NodeCapacity> {
        self.facts
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let mut cores = 0;
                let mut threads = 0;
                for core in &f.cores {
                    let usable = core.iter().filter(|&&pu| !self.pu_reserved(pu) && !self.pu_shared_pool(pu)).count();
                    threads += usable as u32;
                    cores += u32::from(usable > 0);
                }
                NodeCapacity { id: f.id, cores, threads, memory: self.node_capacity(i), hugepages: f.pools.clone() }
            })
            .collect()
    }

    /// The memory of a node VMs may use when no VM is placed on it: its
    /// total less its huge page pools and the host's per-node reserve.
    pub(crate) fn node_capacity(&self, node: usize) -> u64 {
        self.facts.get(node).map_or(0, |f| f.memory_bytes.saturating_sub(self.reservations.memory_per_node))
    }

    /// Ordinary memory still free on a node for planning: less the
    /// node's reserve and the overhead of the VMs there.
    pub(crate) fn free_memory(&self, node: usize) -> u64 {
        match self.uses.get(node) {
            Some(u) => {
                self.physical_free(node).saturating_sub(u.overhead).saturating_sub(self.reservations.memory_per_node)
            }
            None => 0,
        }
    }

    /// Ordinary memory no placement uses, whatever the margins.
    pub(super) fn physical_free(&self, node: usize) -> u64 {
        match (self.facts.get(node), self.uses.get(node)) {
            (Some(f), Some(u)) => f.memory_bytes.saturating_sub(u.memory_used),
            _ => 0,
        }
    }

    /// Free pages of one huge page size on a node (0 without such a pool).
    pub(crate) fn free_pages(&self, node: usize, size: u64) -> u64 {
        let (Some(f), Some(u)) = (self.facts.get(node), self.uses.get(node)) else {
            return 0;
        };
        f.pools
            .iter()
            .zip(&u.pages_used)
            .find(|((s, _), _)| *s == size)
            .map_or(0, |((_, avail), used)| avail.saturating_sub(*used))
    }

    /// Whether a PU is free for a new dedicated vCPU (not the host's, not
    /// in the shared pool).
    pub(crate) fn pu_free(&self, pu: u32) -> bool {
        self.pu_unused(pu) && !self.pu_reserved(pu) && !self.pu_shared_pool(pu)
    }

    /// Whether a PU is in the host's shared pool.
    pub fn pu_shared_pool(&self, pu: u32) -> bool {
        self.pool.get(pu as usize).copied().unwrap_or(false)
    }

    /// Whether a PU runs something: a dedicated or shared vCPU.
    pub(crate) fn pu_busy(&self, pu: u32) -> bool {
        !self.pu_unused(pu) && !self.pu_reserved(pu)
    }

    /// Whether a PU carries nothing (reserved for the host or not).
    pub(super) fn pu_unused(&self, pu: u32) -> bool {
        !self.taken.get(pu as usize).copied().unwrap_or(true) && self.load.get(pu as usize).copied().unwrap_or(1) == 0
    }

    /// Whether a new shared VM may float over a PU: not dedicated, not the
    /// host's.
    pub(crate) fn pu_open(&self, pu: u32) -> bool {
        !self.taken.get(pu as usize).copied().unwrap_or(true)
            && !self.pu_reserved(pu)
            && (self.reservations.shared_cpus.is_empty() || self.pu_shared_pool(pu))
    }

    /// Whether a PU is reserved for the host.
    pub fn pu_reserved(&self, pu: u32) -> bool {
        self.host_cpu.get(pu as usize).copied().unwrap_or(false)
    }

    /// Whether a VM of that name is placed.
    pub(crate) fn has_vm(&self, name: &str) -> bool {
        self.name_slot(name).is_ok()
    }

    /// Where `name` is (`Ok`) or would go (`Err`) in `names`.
    pub(super) fn name_slot(&self, name: &str) -> Result<usize, usize> {
        let h = name_hash(name);
        let first = self.names.partition_point(|&(x, _)| x < h);
        let same = self.names.get(first..).unwrap_or(&[]).iter().take_while(|&&(x, _)| x == h);
        for (n, &(_, i)) in same.enumerate() {
            if self.placed.get(i).is_some_and(|p| p.vm == name) {
                return Ok(first + n);
            }
        }
        Err(first)
    }

    /// Where a VM is in [`HostState::placements`].
    pub(crate) fn position(&self, name: &str) -> Option<usize> {
        let slot = self.name_slot(name).ok()?;
        self.names.get(slot).map(|&(_, i)| i)
    }

    /// Whether node position `j` reaches every node of `set` (no SLIT
    /// distance of 255, firmware's "unreachable", between them).
    pub(crate) fn reaches(&self, j: usize, set: &[usize]) -> bool {
        let row = self.distances.get(j);
        set.iter().all(|&i| row.and_then(|r| r.get(i)).is_none_or(|&d| d < crate::limits::UNREACHABLE))
    }

    /// Whether the nodes of `set` all reach each other.
    pub(crate) fn all_reach(&self, set: &[usize]) -> bool {
        (1..set.len()).all(|x| self.reaches(set[x], &set[..x]))
    }

    /// Whether the host lists any passthrough device with a known node.
    pub(crate) fn has_passthrough(&self) -> bool {
        !self.devices.is_empty()
    }

    /// Passthrough devices (GPU, NIC, NVMe) on a node that no VM holds.
    pub(crate) fn free_devices(&self, node: usize) -> u32 {
        match (self.facts.get(node), self.uses.get(node)) {
            (Some(f), Some(u)) => f.passthrough.saturating_sub(u.devices_held),
            _ => 0,
        }
    }

    /// The placements recorded so far, in order (as they are now: a
    /// shared VM's floating set shrinks as dedicated VMs take CPUs).
    pub fn placements(&self) -> &[Arc<Placement>] {
        &self.placed
    }

    /// The VM a PCI device is passed through to, if any.
    pub fn device_holder(&self, device: &str) -> Option<&str> {
        self.placed.iter().find(|p| p.devices.iter().any(|d| d == device)).map(|p| p.vm.as_str())
    }

    /// The placement of the VM of that name, as it is now.
    pub fn placement(&self, name: &str) -> Option<&Placement> {
        let at = self.name_slot(name).ok()?;
        self.names.get(at).and_then(|&(_, i)| self.placed.get(i)).map(|p| &**p)
    }

    /// The shared placements recorded so far, in order.
    pub(crate) fn shared_placements(&self) -> impl Iterator<Item = &Placement> {
        let upto = if self.shared_vms > 0 { self.placed.len() } else { 0 };
        self.placed.get(..upto).unwrap_or(&[]).iter().map(|p| &**p).filter(|p| p.cpu_mode == CpuMode::Shared)
    }

    /// Free whole cores on a node (all threads unused), by node id.
    pub fn free_cores(&self, node: NodeId) -> Option<u32> {
        self.node_pos(node).map(|i| self.uses[i].free_cores)
    }

    /// Free PUs on a node (not dedicated, no shared load), by node id.
    pub fn free_pus(&self, node: NodeId) -> Option<u32> {
        self.node_pos(node).map(|i| self.uses[i].free_pus)
    }

    /// Ordinary memory free on a node for numaplace's VMs, bytes.
    pub fn free_memory_bytes(&self, node: NodeId) -> Option<u64> {
        self.node_pos(node).map(|i| self.free_memory(i))
    }

    /// Free huge pages of `size` bytes on a node.
    pub fn free_hugepages(&self, node: NodeId, size: u64) -> Option<u64> {
        self.node_pos(node).map(|i| self.free_pages(i, size))
    }

    /// Shared vCPUs counted against a node.
    pub fn shared_load(&self, node: NodeId) -> Option<u64> {
        self.node_pos(node).map(|i| self.uses[i].shared_load)
    }

    /// The host's nodes as the planner counts them, in node order: the
    /// facts every user of a state (the simulator's metrics, a service's
    /// per-node summaries) reads from here rather than working them out
    /// again from the topology.
    pub fn nodes(&self) -> impl ExactSizeIterator<Item = NodeSpec<'_>> {
        self.facts.iter().map(|f| NodeSpec { id: f.id, cores: &f.cores, memory_bytes: f.memory_bytes })
    }

    /// Position (in [`HostState::nodes`]) of the node of an online PU.
    pub fn pu_node(&self, pu: u32) -> Option<usize> {
        self.pu_node.get(pu as usize).copied().flatten()
    }

    /// The PUs of a PU's core (itself and its siblings).
    pub(crate) fn core_of(&self, pu: u32) -> Option<&[u32]> {
        self.pu_node(pu).and_then(|node| self.core_on(node, pu))
    }

    /// [`HostState::core_of`] when the PU is on the node at `node`.
    pub(crate) fn core_on(&self, node: usize, pu: u32) -> Option<&[u32]> {
        if self.pu_node(pu) != Some(node) {
            return None;
        }
        let ci = *self.pu_core.get(pu as usize)?;
        self.facts.get(node)?.cores.get(ci as usize).map(Vec::as_slice)
    }

    /// One past the highest PU number the host has.
    pub fn pu_limit(&self) -> usize {
        self.pu_node.len()
    }

    /// Whether a PU is dedicated to (or reserved by) a placed VM.
    pub fn pu_taken(&self, pu: u32) -> bool {
        self.taken.get(pu as usize).copied().unwrap_or(false)
    }

    /// The dedicated VM with a vCPU pinned to `pu`, if any.
    pub(crate) fn pu_owner(&self, pu: u32) -> Option<&Placement> {
        let at = self.owner.get(pu as usize).copied().unwrap_or(0).checked_sub(1)?;
        self.placed.get(at as usize).map(|p| &**p)
    }

    /// Positions (in [`HostState::placements`]) of the dedicated VMs with
    /// a vCPU pinned to one of `pus`, ascending.
    pub(crate) fn owners_of(&self, pus: &CpuSet) -> Vec<usize> {
        let mut at: Vec<usize> = pus
            .iter()
            .filter_map(|pu| self.owner.get(pu as usize).copied().unwrap_or(0).checked_sub(1))
            .map(|i| i as usize)
            .collect();
        at.sort_unstable();
        at.dedup();
        at
    }

    /// Shared vCPUs counted against a PU.
    pub fn pu_shared_load(&self, pu: u32) -> u32 {
        self.load.get(pu as usize).copied().unwrap_or(0)
    }

    /// Ordinary memory placed VMs use on the node at a position, bytes
    /// (their guest memory; [`HostState::overhead_used`] is QEMU's).
    pub fn memory_used(&self, node: usize) -> u64 {
        self.uses.get(node).map_or(0, |u| u.memory_used)
    }

    /// QEMU overhead counted on the node at a position, bytes.
    pub fn overhead_used(&self, node: usize) -> u64 {
        self.uses.get(node).map_or(0, |u| u.overhead)
    }

    /// Who holds each CPU thread and as what: the one map every view
    /// reads ([`CpuMap`]).
    pub fn cpu_map(&self) -> CpuMap {
        CpuMap::of_state(self)
    }

    /// The VMs holding host CPUs, most CPUs first, then by name: a
    /// dedicated VM's pinned CPUs and the idle siblings it keeps, a mixed
    /// VM's pinned CPUs, a shared VM's CPUs its vCPUs are counted against
    /// ([`CpuMap::holders`]). A CPU shortfall names them (`held by db1
    /// (CPUs 0-7), ...`), so an operator sees which VMs, numaplace's or
    /// not, fill the host.
    pub fn cpu_holders(&self) -> Vec<Holder> {
        self.cpu_map().holders()
    }

    /// PUs dedicated to (or reserved by) placed VMs.
    pub fn taken_pus(&self) -> CpuSet {
        self.taken.iter().enumerate().filter(|(_, t)| **t).map(|(i, _)| i as u32).collect()
    }
}
