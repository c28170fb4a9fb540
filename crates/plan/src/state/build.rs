//! Building a host state: the topology-derived facts (cores, L3 groups,
//! planning distances, PU tables, passthrough devices), computed once.

use super::*;

/// The last-level cache group of each of `cores` (by the cache holding the
/// core's first PU), or nothing when fewer than two groups are among them:
/// a node within one L3 (most Intel nodes) pins as it always did.
pub(super) fn l3_groups(topology: &Topology, cores: &[Vec<u32>]) -> Vec<u32> {
    let caches = topology.caches();
    let group = |core: &Vec<u32>| -> u32 {
        let Some(&first) = core.first() else { return u32::MAX };
        caches.iter().position(|c| c.cpus.contains(first)).map_or(u32::MAX, |g| g as u32)
    };
    let groups: Vec<u32> = cores.iter().map(group).collect();
    if groups.iter().all(|&g| g == groups[0]) {
        return Vec::new();
    }
    groups
}

impl HostState {
    /// An empty host that reserves nothing.
    pub fn new(topology: &Topology) -> HostState {
        HostState::build(topology, Reservations::default())
    }

    /// An empty host that keeps `reservations` for itself. Fails on a
    /// reserved CPU the host does not have (or has offline).
    pub fn with_reservations(topology: &Topology, reservations: Reservations) -> Result<HostState, StateError> {
        let cpus = reservations.cpus.iter().chain(reservations.shared_cpus.iter());
        if let Some(bad) = cpus.into_iter().find(|&c| !topology.pu(c).is_some_and(|p| p.online)) {
            return Err(StateError::UnknownPu(bad));
        }
        if let Some(both) = reservations.cpus.intersection(&reservations.shared_cpus).iter().next() {
            return Err(StateError::ReservedAndShared(both));
        }
        Ok(HostState::build(topology, reservations))
    }

    /// What the host keeps for itself.
    pub fn reservations(&self) -> &Reservations {
        &self.reservations
    }

    /// Makes this state share `other`'s fixed facts (nodes, distances, PU
    /// tables) when they are equal, so that states built one by one for
    /// hosts of one kind (as a service builds them from its store) keep
    /// one copy; what VMs use is never shared. Whether they are now shared.
    pub fn share_layout(&mut self, other: &HostState) -> bool {
        if Arc::ptr_eq(&self.facts, &other.facts) {
            return true;
        }
        let same = self.facts == other.facts
            && self.distances == other.distances
            && self.pu_node == other.pu_node
            && self.pu_core == other.pu_core;
        if same {
            self.facts = Arc::clone(&other.facts);
            self.distances = Arc::clone(&other.distances);
            self.pu_node = Arc::clone(&other.pu_node);
            self.pu_core = Arc::clone(&other.pu_core);
        }
        same
    }

    pub(super) fn build(topology: &Topology, reservations: Reservations) -> HostState {
        let n = topology.nodes().len();
        let distances = planning_distances(topology);
        let pu_node = online_pu_nodes(topology);
        let max_pu = pu_node.len();
        let devices = passthrough_devices(topology);
        let facts = node_facts(topology, &pu_node, &distances, &devices);
        let uses = facts.iter().map(|f| NodeUse { pages_used: vec![0; f.pools.len()], ..NodeUse::default() }).collect();
        let mut pu_core = vec![u32::MAX; max_pu];
        for f in &facts {
            for (ci, core) in f.cores.iter().enumerate() {
                for &pu in core {
                    if let Some(slot) = pu_core.get_mut(pu as usize) {
                        *slot = u32::try_from(ci).unwrap_or(u32::MAX);
                    }
                }
            }
        }
        let smt = facts.iter().any(|f| f.cores.iter().any(|c| c.len() >= 2));
        let host_cpu = pu_flags(max_pu, &reservations.cpus);
        let pool = pu_flags(max_pu, &reservations.shared_cpus);
        let mut state = HostState {
            facts: Arc::new(facts),
            uses,
            distances: Arc::new(distances),
            pu_node: Arc::new(pu_node),
            pu_core: Arc::new(pu_core),
            taken: vec![false; max_pu],
            owner: vec![0; max_pu],
            load: vec![0; max_pu],
            host_cpu,
            pool,
            reservations,
            smt,
            dies: *topology.arch() == Arch::X86_64,
            block: if matches!(topology.arch(), Arch::Ppc64le | Arch::Ppc64) { PSERIES_BLOCK } else { BLOCK },
            devices,
            placed: Vec::new(),
            floating: Vec::new(),
            shared_vms: 0,
            names: Vec::new(),
            scratch: Scratch { bits: vec![0; max_pu.div_ceil(64)], ..Scratch::default() },
            probes: probes::ProbeCache::default(),
            ranks: carried::Carried::default(),
        };
        for i in 0..n {
            state.recount(i);
        }
        state
    }
}

/// The distances the planner plans with: the source's, except that
/// without distances from the source every pair is the assumed 20, and a
/// memory-only node would be as near to every CPU node as to the one its
/// group or HMAT initiators name. Planning takes it as halfway to local
/// (15) from those, so a VM's HBM or CXL memory is the one beside its
/// vCPUs (and its guest is told so).
pub(super) fn planning_distances(topology: &Topology) -> Vec<Vec<u32>> {
    let n = topology.nodes().len();
    let mut distances: Vec<Vec<u32>> = topology.distance_rows().to_vec();
    if !topology.distances_known() {
        for i in 0..n {
            if let (local, numaplace_topo::Locality::Source) = topology.local_cpu_nodes(i) {
                for j in local.into_iter().filter(|&j| j != i) {
                    for (a, b) in [(i, j), (j, i)] {
                        if let Some(d) = distances.get_mut(a).and_then(|r| r.get_mut(b)) {
                            *d = NEAR_MEMORY_DISTANCE;
                        }
                    }
                }
            }
        }
    }
    distances
}

/// Each CPU number's node position, for online PUs; one slot per number up
/// to the highest PU.
pub(super) fn online_pu_nodes(topology: &Topology) -> Vec<Option<usize>> {
    let max_pu = topology.pus().map(|p| p.id as usize + 1).max().unwrap_or(0);
    let mut pu_node = vec![None; max_pu];
    for pu in topology.pus() {
        if pu.online {
            if let Some(slot) = pu_node.get_mut(pu.id as usize) {
                *slot = pu.node;
            }
        }
    }
    pu_node
}

/// The devices a VM may ask for by address (GPUs, NICs, NVMe), lower-case
/// address and node position, sorted.
pub(super) fn passthrough_devices(topology: &Topology) -> Vec<(String, usize)> {
    let nodes = topology.nodes();
    let mut devices: Vec<(String, usize)> = topology
        .devices()
        .iter()
        .filter(|d| matches!(d.kind, DeviceKind::Gpu | DeviceKind::Nic | DeviceKind::Nvme))
        .filter_map(|d| {
            let pos = nodes.iter().position(|n| Some(n.id) == d.node)?;
            Some((d.address.to_ascii_lowercase(), pos))
        })
        .collect();
    devices.sort();
    devices
}

/// The fixed facts of each node: its cores (online threads only), memory
/// less its huge page pools, pools, distance tiers, package, devices, kind
/// and L3 groups.
pub(super) fn node_facts(
    topology: &Topology,
    pu_node: &[Option<usize>],
    distances: &[Vec<u32>],
    devices: &[(String, usize)],
) -> Vec<NodeFacts> {
    let nodes = topology.nodes();
    let n = nodes.len();
    let mut core_lists: Vec<Vec<Vec<u32>>> = vec![Vec::new(); n];
    let mut packages: Vec<Option<u32>> = vec![None; n];
    for core in topology.cores() {
        // A core whose threads sit on two nodes (a firmware bug the
        // model warns about) is split: each node gets its own threads.
        let mut per_node: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
        for cpu in core.cpus.iter() {
            if let Some(Some(node)) = pu_node.get(cpu as usize) {
                per_node.entry(*node).or_default().push(cpu);
            }
        }
        for (node, pus) in per_node {
            if let Some(list) = core_lists.get_mut(node) {
                list.push(pus);
            }
            if let Some(slot) = packages.get_mut(node) {
                *slot = slot.or(core.package);
            }
        }
    }
    let mut facts: Vec<NodeFacts> = nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            let cores = std::mem::take(&mut core_lists[i]);
            let pools: Vec<(u64, u64)> = node
                .hugepages
                .iter()
                .filter(|p| p.size_bytes > 0)
                .map(|p| (p.size_bytes, p.free.unwrap_or(p.total)))
                .collect();
            let reserved: u64 =
                node.hugepages.iter().map(|p| p.size_bytes.saturating_mul(p.total)).fold(0u64, u64::saturating_add);
            let mut tiers: Vec<u32> = distances.get(i).cloned().unwrap_or_default();
            tiers.sort_unstable();
            tiers.dedup();
            NodeFacts {
                id: node.id,
                cores,
                memory_bytes: node.memory_bytes.saturating_sub(reserved),
                pools,
                tiers,
                package: packages[i],
                passthrough: devices.iter().filter(|d| d.1 == i).count() as u32,
                kind: topology.memory_kind(i),
                l3: Vec::new(),
                l3_groups: Vec::new(),
                l3_slot: Vec::new(),
            }
        })
        .collect();
    for f in &mut facts {
        f.l3 = l3_groups(topology, &f.cores);
        for (ci, &g) in f.l3.iter().enumerate() {
            let slot = match f.l3.iter().take(ci).position(|&h| h == g) {
                Some(first) => f.l3_slot[first],
                None => {
                    f.l3_groups.push(Vec::new());
                    f.l3_groups.len() - 1
                }
            };
            f.l3_groups[slot].push(ci);
            f.l3_slot.push(slot);
        }
    }
    facts
}

/// One flag per CPU number below `max_pu`: set for the CPUs of `cpus`.
pub(super) fn pu_flags(max_pu: usize, cpus: &CpuSet) -> Vec<bool> {
    let mut flags = vec![false; max_pu];
    for pu in cpus.iter() {
        if let Some(slot) = flags.get_mut(pu as usize) {
            *slot = true;
        }
    }
    flags
}
