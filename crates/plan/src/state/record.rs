//! Recording and removing placements: the checks against what the host
//! physically has, and the per-node and per-PU counters kept in step.

use super::*;

impl HostState {
    /// Recomputes the CPU counters of one node from the PU tables.
    pub(super) fn recount(&mut self, node: usize) {
        let Some(facts) = self.facts.get(node) else { return };
        let mut sum = CoreCounts::default();
        for core in &facts.cores {
            sum.add(self.core_counts(core));
        }
        if let Some(use_) = self.uses.get_mut(node) {
            use_.free_cores = sum.free_cores;
            use_.free_smt_cores = sum.free_smt;
            use_.free_pus = sum.free_pus;
            use_.open_pus = sum.open;
        }
    }

    /// One core's share of its node's CPU counters.
    pub(super) fn core_counts(&self, core: &[u32]) -> CoreCounts {
        let pools = !self.reservations.shared_cpus.is_empty();
        let mut c = CoreCounts::default();
        let mut all_free = true;
        for &pu in core {
            let i = pu as usize;
            let (Some(&taken), Some(&host_cpu), Some(&load), Some(&shared)) =
                (self.taken.get(i), self.host_cpu.get(i), self.load.get(i), self.pool.get(i))
            else {
                // Not a PU of this host: never free.
                all_free = false;
                continue;
            };
            let taken = taken || host_cpu;
            // With pools, shared VMs float only over the shared pool and
            // dedicated vCPUs never go there.
            if !taken && (!pools || shared) {
                c.open += 1;
            }
            if !taken && load == 0 && !shared {
                c.free_pus += 1;
            } else {
                all_free = false;
            }
        }
        if all_free {
            c.free_cores = 1;
            c.free_smt = u32::from(core.len() >= 2);
        }
        c
    }

    /// Takes the shares of `cores` (node position, core index) out of
    /// their nodes' counters (`back` false), or puts them back: taken out
    /// before their PUs change and put back after, they keep the counters
    /// what a recount of the whole node would make them, at the cost of a
    /// VM's own cores rather than its nodes' (checked against the recount
    /// in debug builds).
    pub(super) fn count_cores(&mut self, cores: &[(usize, u32)], back: bool) {
        for &(node, ci) in cores {
            // The node's PUs change: what pinning there would do too.
            self.probes.forget(node);
            let Some(core) = self.facts.get(node).and_then(|f| f.cores.get(ci as usize)) else { continue };
            let c = self.core_counts(core);
            let Some(use_) = self.uses.get_mut(node) else { continue };
            let apply = |x: &mut u32, d: u32| *x = if back { x.wrapping_add(d) } else { x.wrapping_sub(d) };
            apply(&mut use_.free_cores, c.free_cores);
            apply(&mut use_.free_smt_cores, c.free_smt);
            apply(&mut use_.free_pus, c.free_pus);
            apply(&mut use_.open_pus, c.open);
        }
        #[cfg(debug_assertions)]
        if back {
            for &(node, _) in cores {
                let kept = self.uses[node].clone();
                self.recount(node);
                debug_assert_eq!(kept, self.uses[node], "counters of node position {node} kept in step");
            }
        }
    }

    /// Records a placement (from an earlier plan) as taken. The placement
    /// is checked whole before anything is recorded, so a refused one
    /// leaves the state unchanged.
    ///
    /// A dedicated VM takes its pinned PUs and the rest of its `cpuset`
    /// (under `isolate` that holds the idle siblings it keeps to itself);
    /// a shared VM adds one unit of load to the PU each vCPU is counted
    /// against. The PUs a dedicated VM takes leave the floating sets of
    /// the shared VMs placed before it ([`HostState::placements`] shows
    /// the sets as they are now).
    pub fn place(&mut self, placement: &Placement) -> Result<(), StateError> {
        self.place_shared(Arc::new(placement.clone()))
    }

    /// [`HostState::place`], keeping the placement it is given rather than
    /// a copy: a batch's decision and its state share one.
    pub fn place_shared(&mut self, placement: Arc<Placement>) -> Result<(), StateError> {
        let mut scratch = std::mem::take(&mut self.scratch);
        let result = self.place_with(placement, &mut scratch);
        // Leave the buffers empty for the next call, whatever failed.
        scratch.cores.clear();
        scratch.per_node.clear();
        scratch.bits.iter_mut().for_each(|w| *w = 0);
        self.scratch = scratch;
        result
    }

    pub(super) fn place_with(&mut self, kept: Arc<Placement>, scratch: &mut Scratch) -> Result<(), StateError> {
        let placement = &*kept;
        let vm = &placement.vm;
        let name_at = match self.name_slot(vm) {
            Ok(_) => return Err(StateError::DuplicateVm(vm.clone())),
            Err(at) => at,
        };
        for id in &placement.nodes {
            self.node_pos(*id).ok_or(StateError::UnknownNode(*id))?;
        }
        for device in &placement.devices {
            if let Some(holder) = self.device_holder(device) {
                return Err(StateError::DeviceTaken {
                    vm: vm.clone(),
                    device: device.clone(),
                    holder: holder.to_string(),
                });
            }
        }
        self.check_cpus(placement, scratch)?;
        self.check_memory(placement, &mut scratch.per_node)?;
        self.record_checked(kept, name_at, scratch);
        Ok(())
    }

    /// [`HostState::place`]'s check of a placement's CPUs: each pin on the
    /// node it names, a dedicated VM's PUs free and pinned once, a shared
    /// vCPU's PU not dedicated, a floating vCPU in the shared pool. Leaves
    /// the PUs to take marked in `scratch.bits` and the cores they change
    /// in `scratch.cores`.
    pub(super) fn check_cpus(&self, placement: &Placement, scratch: &mut Scratch) -> Result<(), StateError> {
        let vm = &placement.vm;
        let dedicated = placement.cpu_mode == CpuMode::Dedicated;
        let cores = &mut scratch.cores;
        // A dedicated VM's PUs (pins, then the rest of its cpuset) are
        // marked in a bitmap sized to the host's PU numbers, which is both
        // the duplicate check and, read back, the ascending order in which
        // they are checked and recorded.
        let bits = &mut scratch.bits;
        for pin in &placement.vcpus {
            let node = self.pu_node.get(pin.pu as usize).copied().flatten().ok_or(StateError::UnknownPu(pin.pu))?;
            let actual = self.facts[node].id;
            if actual != pin.node {
                return Err(StateError::PuNodeMismatch { vcpu: pin.vcpu, pu: pin.pu, claimed: pin.node, actual });
            }
            if dedicated && placement.floats(pin.vcpu).is_none() {
                // `pu_node` has an entry, so the PU has a bit.
                if mark_bit(bits, pin.pu) {
                    return Err(StateError::PuPinnedTwice { vm: vm.clone(), pu: pin.pu });
                }
            } else if self.taken.get(pin.pu as usize).copied().unwrap_or(true) {
                return Err(StateError::PuTaken { vm: vm.clone(), pu: pin.pu });
            }
            cores.push((node, self.core_at(pin.pu)));
        }
        // PUs past the bitmap do not exist on this host; the first one is
        // reported after every lower PU was checked, as an ascending walk
        // over the whole set would.
        let mut beyond: Option<u32> = None;
        if dedicated {
            for pu in placement.cpuset.iter() {
                if (pu as usize) < self.taken.len() {
                    mark_bit(bits, pu);
                } else {
                    beyond = beyond.or(Some(pu));
                }
            }
        }
        for (w, &word) in bits.iter().enumerate() {
            let mut rest = word;
            while rest != 0 {
                let pu = (w * 64) as u32 + rest.trailing_zeros();
                rest &= rest - 1;
                let node = self.pu_node.get(pu as usize).copied().flatten().ok_or(StateError::UnknownPu(pu))?;
                if !self.pu_unused(pu) {
                    return Err(StateError::PuTaken { vm: vm.clone(), pu });
                }
                cores.push((node, self.core_at(pu)));
            }
        }
        if let Some(pu) = beyond {
            return Err(StateError::UnknownPu(pu));
        }
        // A mixed VM's floating vCPUs run in the shared pool, whose CPUs
        // are never dedicated: their sets then never shrink.
        for f in &placement.floating {
            let counted = placement.vcpus.iter().filter(|v| f.vcpus.contains(v.vcpu)).map(|v| v.pu);
            if let Some(cpu) = f.cpus.iter().chain(counted).find(|&pu| !self.pu_shared_pool(pu)) {
                return Err(StateError::FloatOutsidePool { vm: vm.clone(), cpu });
            }
        }
        Ok(())
    }

    /// [`HostState::place`]'s check of a placement's memory: what it
    /// charges each node (summed in `per_node`) fits the node's free
    /// memory, or its free huge pages in whole pages.
    pub(super) fn check_memory(
        &self,
        placement: &Placement,
        per_node: &mut Vec<(usize, u64)>,
    ) -> Result<(), StateError> {
        let vm = &placement.vm;
        for (id, bytes) in placement.charged_memory() {
            let pos = self.node_pos(*id).ok_or(StateError::UnknownNode(*id))?;
            match per_node.iter_mut().find(|(p, _)| *p == pos) {
                Some(entry) => entry.1 = entry.1.saturating_add(*bytes),
                None => per_node.push((pos, *bytes)),
            }
        }
        for &(pos, bytes) in per_node.iter() {
            let node = self.facts[pos].id;
            match placement.hugepage_bytes {
                Some(size) if size > 0 => {
                    if bytes % size != 0 {
                        return Err(StateError::NotWholePages { vm: vm.clone(), node, bytes, size });
                    }
                    let free = self.free_pages(pos, size);
                    if bytes / size > free {
                        return Err(StateError::HugePagesExceeded {
                            vm: vm.clone(),
                            node,
                            size,
                            needed: bytes / size,
                            free,
                        });
                    }
                }
                _ => {
                    let free = self.physical_free(pos);
                    if bytes > free {
                        return Err(StateError::MemoryExceeded { vm: vm.clone(), node, needed: bytes, free });
                    }
                }
            }
        }
        Ok(())
    }

    /// Records a placement [`HostState::place_with`] has checked: its PUs
    /// taken or loaded, memory and pages used, overhead, devices, and the
    /// counters of the cores it changes.
    pub(super) fn record_checked(&mut self, kept: Arc<Placement>, name_at: usize, scratch: &mut Scratch) {
        let placement = &*kept;
        let vm = &placement.vm;
        let dedicated = placement.cpu_mode == CpuMode::Dedicated;
        let (cores, bits, per_node) = (&mut scratch.cores, &scratch.bits, &scratch.per_node);
        // Checked: now record. The counters of the cores whose PUs change
        // are taken out here and put back once they have changed.
        cores.sort_unstable();
        cores.dedup();
        self.count_cores(cores, false);
        for (w, &word) in bits.iter().enumerate() {
            let mut rest = word;
            while rest != 0 {
                let pu = w * 64 + rest.trailing_zeros() as usize;
                rest &= rest - 1;
                if let Some(t) = self.taken.get_mut(pu) {
                    *t = true;
                }
            }
        }
        if dedicated {
            let me = u32::try_from(self.placed.len() + 1).unwrap_or(u32::MAX);
            for pin in placement.vcpus.iter().filter(|v| placement.floats(v.vcpu).is_none()) {
                if let Some(o) = self.owner.get_mut(pin.pu as usize) {
                    *o = me;
                }
            }
        }
        // Shared vCPUs, and a mixed VM's floating ones, load their PUs.
        for pin in placement.vcpus.iter().filter(|v| !dedicated || placement.floats(v.vcpu).is_some()) {
            if let Some(l) = self.load.get_mut(pin.pu as usize) {
                *l = l.saturating_add(1);
            }
            if let Some(node) = self.pu_node.get(pin.pu as usize).copied().flatten() {
                self.uses[node].shared_load += 1;
            }
        }
        for &(pos, bytes) in per_node.iter() {
            let use_ = &mut self.uses[pos];
            match placement.hugepage_bytes {
                Some(size) if size > 0 => {
                    if let Some(i) = self.facts[pos].pools.iter().position(|(s, _)| *s == size) {
                        use_.pages_used[i] = use_.pages_used[i].saturating_add(bytes / size);
                    }
                }
                _ => use_.memory_used = use_.memory_used.saturating_add(bytes),
            }
        }
        if let Some(pos) = self.overhead_node(placement) {
            let use_ = &mut self.uses[pos];
            use_.overhead = use_.overhead.saturating_add(self.reservations.overhead.bytes(placement.memory_bytes));
        }
        self.hold_devices(&placement.devices, true);
        self.count_large(placement, true);
        self.count_cores(cores, true);
        if dedicated {
            self.shrink_shared(&placement.cpuset);
        } else {
            self.shared_vms += 1;
        }
        self.names.insert(name_at, (name_hash(vm), self.placed.len()));
        self.floating.push((!dedicated).then(|| Box::new((placement.cpuset.clone(), placement.emulator.clone()))));
        self.placed.push(kept);
    }

    /// Forgets a VM: its PUs, load, memory and huge pages are free again,
    /// and the shared VMs placed before it get back the CPUs it took from
    /// their floating sets. Returns the placement as it was recorded last
    /// (for a migration: remove here, place in another state). The state
    /// after `place(p)` then `remove(&p.vm)` equals the state before.
    pub fn remove(&mut self, name: &str) -> Result<Placement, StateError> {
        let slot = self.name_slot(name).map_err(|_| StateError::UnknownVm(name.to_string()))?;
        let (_, at) = self.names.remove(slot);
        let placement = Arc::unwrap_or_clone(self.placed.remove(at));
        self.floating.remove(at);
        for entry in &mut self.names {
            if entry.1 > at {
                entry.1 -= 1;
            }
        }
        let gone = u32::try_from(at + 1).unwrap_or(u32::MAX);
        for o in self.owner.iter_mut().filter(|o| **o > gone) {
            *o -= 1;
        }
        let dedicated = placement.cpu_mode == CpuMode::Dedicated;
        // The counters of the cores whose PUs change, taken out before and
        // put back after.
        let mut cores: Vec<(usize, u32)> = placement.vcpus.iter().filter_map(|pin| self.core_index(pin.pu)).collect();
        if dedicated {
            cores.extend(placement.cpuset.iter().filter_map(|pu| self.core_index(pu)));
        }
        cores.sort_unstable();
        cores.dedup();
        self.count_cores(&cores, false);
        let node_of = |pu: u32| self.pu_node.get(pu as usize).copied().flatten();
        for pin in &placement.vcpus {
            if dedicated && placement.floats(pin.vcpu).is_none() {
                if let Some(t) = self.taken.get_mut(pin.pu as usize) {
                    *t = false;
                }
                if let Some(o) = self.owner.get_mut(pin.pu as usize) {
                    *o = 0;
                }
            } else {
                if let Some(l) = self.load.get_mut(pin.pu as usize) {
                    *l = l.saturating_sub(1);
                }
                if let Some(node) = node_of(pin.pu) {
                    self.uses[node].shared_load = self.uses[node].shared_load.saturating_sub(1);
                }
            }
        }
        if dedicated {
            for pu in placement.cpuset.iter() {
                if let Some(t) = self.taken.get_mut(pu as usize) {
                    *t = false;
                }
            }
        } else {
            self.shared_vms = self.shared_vms.saturating_sub(1);
        }
        for (id, bytes) in placement.charged_memory() {
            let Some(pos) = self.node_pos(*id) else { continue };
            let use_ = &mut self.uses[pos];
            match placement.hugepage_bytes {
                Some(size) if size > 0 => {
                    if let Some(i) = self.facts[pos].pools.iter().position(|(s, _)| *s == size) {
                        use_.pages_used[i] = use_.pages_used[i].saturating_sub(bytes / size);
                    }
                }
                _ => use_.memory_used = use_.memory_used.saturating_sub(*bytes),
            }
        }
        if let Some(pos) = self.overhead_node(&placement) {
            let use_ = &mut self.uses[pos];
            use_.overhead = use_.overhead.saturating_sub(self.reservations.overhead.bytes(placement.memory_bytes));
        }
        self.hold_devices(&placement.devices, false);
        self.count_large(&placement, false);
        self.count_cores(&cores, true);
        if placement.cpu_mode == CpuMode::Dedicated && self.shared_vms > 0 {
            self.regrow_shared(at, &placement.cpuset);
        }
        Ok(placement)
    }

    /// Counts a large dedicated VM on the nodes of its pinned vCPUs
    /// ([`NodeUse::large_vms`]), or no longer.
    pub(super) fn count_large(&mut self, p: &Placement, take: bool) {
        let large = p.cpu_mode == CpuMode::Dedicated
            && p.guest.threads <= 1
            && p.vcpus.len() > crate::limits::SMALL_VM_VCPUS as usize;
        if !large {
            return;
        }
        let mut seen: Vec<usize> = Vec::with_capacity(p.nodes.len());
        for pin in p.vcpus.iter().filter(|v| p.floats(v.vcpu).is_none()) {
            let Some(node) = self.pu_node.get(pin.pu as usize).copied().flatten() else { continue };
            if seen.contains(&node) {
                continue;
            }
            seen.push(node);
            self.probes.forget(node);
            if let Some(u) = self.uses.get_mut(node) {
                u.large_vms = if take { u.large_vms.saturating_add(1) } else { u.large_vms.saturating_sub(1) };
            }
        }
    }

    /// Counts passthrough devices as held (or free again) on their nodes.
    pub(super) fn hold_devices(&mut self, held: &[String], take: bool) {
        for address in held {
            let lower = address.to_ascii_lowercase();
            let Ok(at) = self.devices.binary_search_by(|d| d.0.as_str().cmp(lower.as_str())) else { continue };
            let node = self.devices[at].1;
            if let Some(u) = self.uses.get_mut(node) {
                u.devices_held = if take { u.devices_held.saturating_add(1) } else { u.devices_held.saturating_sub(1) };
            }
        }
    }

    /// After a dedicated VM that was at position `at` is gone: the shared
    /// VMs placed before it whose recorded floating set met its CPUs have
    /// their sets worked out again from the recorded ones, shrunk by the
    /// dedicated VMs still placed after them, in order, exactly as
    /// [`HostState::shrink_shared`] did when those were placed.
    pub(super) fn regrow_shared(&mut self, at: usize, freed: &CpuSet) {
        for i in 0..at.min(self.placed.len()) {
            let Some(Some(origin)) = self.floating.get(i) else { continue };
            let (mut cpuset, mut emulator) = (origin.0.clone(), origin.1.clone());
            if cpuset.is_disjoint(freed) {
                continue;
            }
            for later in self.placed.iter().skip(i + 1) {
                if later.cpu_mode != CpuMode::Dedicated || cpuset.is_disjoint(&later.cpuset) {
                    continue;
                }
                let was = std::mem::take(&mut cpuset);
                cpuset = was.difference(&later.cpuset);
                if emulator == was {
                    emulator = cpuset.clone();
                }
            }
            if let Some(p) = self.placed.get_mut(i) {
                // A copy only if a decision still shares it: the decision
                // keeps the sets it was planned with.
                let p = Arc::make_mut(p);
                p.cpuset = cpuset;
                p.emulator = emulator;
            }
        }
    }

    /// Takes newly dedicated PUs out of the floating sets of the shared
    /// VMs placed before, as Kubernetes' CPU manager shrinks its shared
    /// pool: otherwise a shared VM's vCPUs could still run on CPUs a
    /// dedicated VM was promised. The PUs shared vCPUs are counted against
    /// are never dedicated, so no floating set becomes empty. An emulator
    /// set that was the floating set follows it; a housekeeping set is the
    /// operator's and stays.
    pub(super) fn shrink_shared(&mut self, taken: &CpuSet) {
        if self.shared_vms == 0 {
            return;
        }
        for p in &mut self.placed {
            if p.cpu_mode != CpuMode::Shared || p.cpuset.is_disjoint(taken) {
                continue;
            }
            // A copy only if a decision still shares it: the decision
            // keeps the sets it was planned with.
            let p = Arc::make_mut(p);
            let was = std::mem::take(&mut p.cpuset);
            p.cpuset = was.difference(taken);
            if p.emulator == was {
                p.emulator = p.cpuset.clone();
            }
        }
    }

    /// The node QEMU's own memory is counted on: the VM's first memory
    /// node (its first node when it lists no memory).
    pub(super) fn overhead_node(&self, placement: &Placement) -> Option<usize> {
        let id = placement.memory.first().map(|m| m.0).or_else(|| placement.nodes.first().copied())?;
        self.node_pos(id)
    }

    /// Room for `more` placements: a batch's lists are sized once instead
    /// of regrown, each regrowth touching fresh memory (a large share of a
    /// VM's cost, docs/performance.md).
    pub fn reserve(&mut self, more: usize) {
        self.placed.reserve(more);
        self.floating.reserve(more);
        self.names.reserve(more);
    }
}

/// FNV-1a: a few instructions per byte of a short VM name, and the same
/// on every run, so the index order (and any plan) does not vary.
pub(super) fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// Sets `pu`'s bit, saying whether it was set already; a PU past the
/// bitmap has no bit (false).
pub(super) fn mark_bit(bits: &mut [u64], pu: u32) -> bool {
    let (w, b) = ((pu / 64) as usize, pu % 64);
    match bits.get_mut(w) {
        Some(word) => {
            let was = *word & (1 << b) != 0;
            *word |= 1 << b;
            was
        }
        None => false,
    }
}
