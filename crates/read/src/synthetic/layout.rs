//! `Spec::build`: the machine a description's words say, laid out. The
//! levels are completed and resolved into a [`Shape`] (counts per level,
//! with every size bounded before anything is built), then the cores,
//! packages, dies and L3 groups, the nodes with their memory and huge
//! pages, and the distances are made from it in turn.

use super::{err, Distances, Level, LevelSpec, Memory, Spec, MAX_NODES};
use crate::ParseError;
use numaplace_topo::{
    Cache, Core, CpuSet, HugePages, Node, NodeId, Package, Parts, Warning, MAX_CPU, MAX_NODE_BYTES, MAX_SETS_BYTES,
};

/// Splits `total` into `n` near-equal parts (the first ones get the rest).
fn split(total: u64, n: u64) -> Vec<u64> {
    if n == 0 {
        return Vec::new();
    }
    (0..n).map(|i| total / n + u64::from(i < total % n)).collect()
}

/// The machine's levels resolved to counts: each level's count within the
/// level outside it, every level present (missing ones count 1).
struct Shape {
    levels: Vec<LevelSpec>,
    total_cores: u64,
    threads: u64,
    /// Sibling threads numbered next to each other (`numbering linear`).
    linear: bool,
}

impl Shape {
    fn count(&self, l: Level) -> u64 {
        self.levels.iter().find(|s| s.level == l).map_or(1, |s| s.count)
    }

    fn index(&self, l: Level) -> usize {
        self.levels.iter().position(|s| s.level == l).unwrap_or(0)
    }

    /// Units of a level over the whole machine.
    fn units(&self, l: Level) -> u64 {
        self.levels[..=self.index(l)].iter().map(|s| s.count).product()
    }

    /// Cores in each unit of a level.
    fn cores_in(&self, l: Level) -> u64 {
        self.total_cores / self.units(l).max(1)
    }

    /// The CPU number of a core's thread, numbered as Linux does on x86
    /// (every first thread, then every second) unless linear.
    fn cpu(&self, core: u64, thread: u64) -> u32 {
        let n = if self.linear { core * self.threads + thread } else { thread * self.total_cores + core };
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    fn nodes(&self) -> u64 {
        self.units(Level::Node)
    }
}

impl Spec {
    /// Lays out the machine the words describe.
    pub(super) fn build(&self, text: &str) -> Result<Parts, ParseError> {
        let shape = self.shape(text)?;
        let mut parts = Parts {
            name: Some(text.split_whitespace().collect::<Vec<_>>().join(" ")),
            arch: self.arch.clone().unwrap_or_default(),
            ..Parts::default()
        };
        let node_cpus = self.cores(&shape, &mut parts);
        self.nodes(&shape, node_cpus, &mut parts, text)?;
        parts.distances = self.distance_rows(&shape, parts.nodes.len() as u64);
        Ok(parts)
    }

    /// The written levels completed and resolved: missing levels count 1
    /// (one node per socket, one thread per core), and `8 cores per
    /// socket` counts cores over every level in between.
    fn resolved_levels(&self, text: &str) -> Result<Vec<LevelSpec>, ParseError> {
        let mut levels = self.levels.clone();
        levels.sort_by_key(|l| l.level.rank());
        let default = |level| LevelSpec { level, count: 1, per: None, words: String::new() };
        if !levels.iter().any(|l| l.level == Level::Socket) {
            levels.insert(0, default(Level::Socket));
        }
        if !levels.iter().any(|l| l.level == Level::Node) {
            levels.insert(1, default(Level::Node));
        }
        if !levels.iter().any(|l| l.level == Level::Core) {
            let at = levels.iter().position(|l| l.level == Level::Thread).unwrap_or(levels.len());
            levels.insert(at, default(Level::Core));
        }
        if !levels.iter().any(|l| l.level == Level::Thread) {
            levels.push(default(Level::Thread));
        }
        for i in 0..levels.len() {
            let Some(per) = levels[i].per else { continue };
            let Some(outer) = levels[..i].iter().position(|l| l.level == per) else {
                return Err(err("levels", "`per` naming an outer level (`8 cores per socket`)", &levels[i].words));
            };
            let between = levels[outer + 1..i].iter().try_fold(1u64, |acc, l| acc.checked_mul(l.count));
            let between = between.ok_or_else(|| err("levels", "at most 65536 CPUs and 4096 nodes", text.trim()))?;
            if levels[i].count.checked_rem(between) != Some(0) {
                return Err(err("levels", "a count that the levels in between divide evenly", &levels[i].words));
            }
            levels[i].count /= between;
        }
        Ok(levels)
    }

    /// The resolved levels, refused when the machine is larger than every
    /// reader allows: CPUs, nodes, and the bytes its CPU sets would take.
    fn shape(&self, text: &str) -> Result<Shape, ParseError> {
        let levels = self.resolved_levels(text)?;
        let too_big = || err("levels", "at most 65536 CPUs and 4096 nodes", text.trim());
        let core_at = levels.iter().position(|s| s.level == Level::Core).unwrap_or(0);
        let mut total_cores: u64 = 1;
        for l in &levels[..=core_at] {
            total_cores = total_cores.checked_mul(l.count).ok_or_else(too_big)?;
        }
        let shape = Shape { levels, total_cores, threads: 1, linear: self.linear };
        let threads = shape.count(Level::Thread);
        let shape = Shape { threads, ..shape };
        let total_pus = total_cores.checked_mul(threads).ok_or_else(too_big)?;
        if total_pus > u64::from(MAX_CPU) {
            return Err(too_big());
        }
        let extra = self.extra.iter().fold(0u64, |acc, e| acc.saturating_add(e.count));
        if shape.nodes().saturating_add(extra) > MAX_NODES {
            return Err(too_big());
        }
        // The CPU sets cost a bit per number up to each set's highest, so a
        // machine near 65536 CPUs would take hundreds of MiB; the cost is
        // summed before anything is built, and held to the budget every
        // reader has (so whatever is read here also reads back from JSON).
        // A unit's highest CPU is its last core's last thread.
        let has_l3 = self.levels.iter().any(|l| l.level == Level::L3);
        let highest = |last_core: u64| Some(shape.cpu(last_core, threads - 1));
        let mut bytes: usize = (0..total_cores).map(|g| CpuSet::bytes_for(highest(g))).sum();
        for (level, present) in [(Level::Node, true), (Level::L3, has_l3), (Level::Socket, true)] {
            let per = shape.cores_in(level).max(1);
            if present {
                bytes += (0..shape.units(level)).map(|u| CpuSet::bytes_for(highest((u + 1) * per - 1))).sum::<usize>();
            }
        }
        if bytes > MAX_SETS_BYTES {
            let found = format!("{total_pus} CPUs, whose CPU sets would take {} MiB", bytes >> 20);
            return Err(err("levels", "a machine whose CPU sets fit in 128 MiB (some 40000 CPUs or fewer)", &found));
        }
        Ok(shape)
    }

    /// The cores, packages, dies and L3 groups into `parts`; gives each
    /// node's CPUs.
    fn cores(&self, shape: &Shape, parts: &mut Parts) -> Vec<CpuSet> {
        let sockets = shape.count(Level::Socket);
        let has_dies = self.levels.iter().any(|l| l.level == Level::Die);
        let dies_per_socket = shape.units(Level::Die) / sockets;
        let has_l3 = self.levels.iter().any(|l| l.level == Level::L3);
        let mut node_cpus = vec![CpuSet::new(); shape.nodes() as usize];
        let mut l3_cpus = vec![CpuSet::new(); if has_l3 { shape.units(Level::L3) as usize } else { 0 }];
        let mut package_cpus = vec![CpuSet::new(); sockets as usize];
        let cores_per_socket = shape.cores_in(Level::Socket);
        for g in 0..shape.total_cores {
            let set: CpuSet = (0..shape.threads).map(|t| shape.cpu(g, t)).collect();
            let socket = g / cores_per_socket;
            let die = has_dies.then(|| (g / shape.cores_in(Level::Die)) % dies_per_socket.max(1));
            for (list, level) in
                [(&mut node_cpus, Level::Node), (&mut l3_cpus, Level::L3), (&mut package_cpus, Level::Socket)]
            {
                if let Some(s) = list.get_mut((g / shape.cores_in(level)) as usize) {
                    *s = s.union(&set);
                }
            }
            parts.cores.push(Core {
                package: Some(socket as u32),
                die: die.map(|d| d as u32),
                core_id: Some((g % cores_per_socket) as u32),
                cpus: set,
            });
        }
        parts.packages = package_cpus.into_iter().enumerate().map(|(i, cpus)| Package { id: i as u32, cpus }).collect();
        if has_dies && dies_per_socket > 1 {
            parts.dies = (0..sockets).map(|s| (s as u32, dies_per_socket as u32)).collect();
        }
        parts.caches = l3_cpus.into_iter().map(|cpus| Cache { level: 3, size_bytes: None, cpus }).collect();
        node_cpus
    }

    /// The nodes with CPUs (their memory and huge pages), then the extra
    /// memory-only nodes, into `parts`.
    fn nodes(&self, shape: &Shape, node_cpus: Vec<CpuSet>, parts: &mut Parts, text: &str) -> Result<(), ParseError> {
        let nodes = shape.nodes();
        let memory = self.node_memory(nodes, nodes / shape.count(Level::Socket))?;
        if self.memory.is_none() {
            parts.warnings.push(Warning::NoMemoryInfo);
        }
        let big = |b: u64| b > MAX_NODE_BYTES;
        if memory.iter().copied().any(big) || self.extra.iter().any(|e| big(e.size)) {
            return Err(err("memory", "at most 1 PiB per node", text.trim()));
        }
        let pools = self.node_hugepages(nodes);
        if pools.iter().flatten().any(|h| big(h.total.saturating_mul(h.size_bytes))) {
            return Err(err("hugepages", "at most 1 PiB of pages per node", text.trim()));
        }
        for (i, cpus) in node_cpus.into_iter().enumerate() {
            let mem = memory.get(i).copied().unwrap_or(0);
            parts.nodes.push(Node {
                id: NodeId(i as u32),
                cpus,
                memory_bytes: mem,
                free_bytes: Some(mem),
                hugepages: pools.get(i).cloned().unwrap_or_default(),
                kind: None,
            });
        }
        for e in &self.extra {
            for _ in 0..e.count {
                let id = NodeId(parts.nodes.len() as u32);
                parts.nodes.push(Node {
                    id,
                    cpus: CpuSet::new(),
                    memory_bytes: e.size,
                    free_bytes: Some(e.size),
                    hugepages: Vec::new(),
                    kind: e.kind.clone(),
                });
            }
        }
        Ok(())
    }

    /// The distance rows over `all` nodes (the extra ones last, far from
    /// every other), when the words give distances.
    fn distance_rows(&self, shape: &Shape, all: u64) -> Option<Vec<Vec<u32>>> {
        let nodes = shape.nodes();
        let nodes_per_socket = nodes / shape.count(Level::Socket);
        self.distances.as_ref().map(|d| match d {
            Distances::Matrix(rows) => rows.clone(),
            &Distances::Tiers(local, near, far) => {
                let socket_of = |n: u64| (n < nodes).then(|| n / nodes_per_socket.max(1));
                (0..all)
                    .map(|i| {
                        (0..all)
                            .map(|j| match (socket_of(i), socket_of(j)) {
                                _ if i == j => local,
                                (Some(a), Some(b)) if a == b => near,
                                _ => far,
                            })
                            .collect()
                    })
                    .collect()
            }
        })
    }

    /// Memory of each node with CPUs.
    fn node_memory(&self, nodes: u64, nodes_per_socket: u64) -> Result<Vec<u64>, ParseError> {
        Ok(match &self.memory {
            None => vec![0; nodes as usize],
            Some(Memory::Per(size, Level::Socket)) => {
                let share = split(*size, nodes_per_socket.max(1));
                (0..nodes).map(|i| share.get((i % nodes_per_socket.max(1)) as usize).copied().unwrap_or(0)).collect()
            }
            Some(Memory::Per(size, _)) => vec![*size; nodes as usize],
            Some(Memory::Total(size)) => split(*size, nodes),
            Some(Memory::List(list)) => {
                if list.len() as u64 != nodes {
                    let found = format!("{} sizes for {} nodes", list.len(), nodes);
                    return Err(err(
                        "memory",
                        "one size per node with CPUs, `64GiB per node` or `128GiB total`",
                        &found,
                    ));
                }
                list.clone()
            }
        })
    }

    /// Huge page pools of each node with CPUs.
    fn node_hugepages(&self, nodes: u64) -> Vec<Vec<HugePages>> {
        let mut out = vec![Vec::new(); nodes as usize];
        let Some(spec) = &self.hugepages else { return out };
        for &(size, count) in &spec.pools {
            let counts = if spec.total { split(count, nodes) } else { vec![count; nodes as usize] };
            for (pools, n) in out.iter_mut().zip(counts) {
                pools.push(HugePages { size_bytes: size, total: n, free: Some(n) });
            }
        }
        out
    }
}
