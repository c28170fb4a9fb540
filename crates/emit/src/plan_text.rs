//! The plan for people: for each VM the choice (nodes, vCPU->PU map,
//! memory per node, guest topology), the alternatives considered and why
//! they lost, the planner's notes, the rejections with their shortfall,
//! and a map of the host (nodes -> cores -> threads) showing which VM's
//! vCPU sits on every PU after the plan.

use numaplace_plan::{CpuMode, Decision, HostState, MemoryMode, Placement, Rejection, VcpuPin};
use numaplace_topo::{format_size, CpuSet, NodeId, Topology};
use std::collections::BTreeMap;
use std::fmt::Write;

/// The whole view: `results` are this run's answers in request order,
/// `state` the host afterwards (the VMs it started with and the new ones),
/// which the map shows with the free capacity the planner counts.
pub fn render(topology: &Topology, results: &[Result<Decision, Rejection>], state: &HostState) -> String {
    let mut x = String::new();
    let ok = results.iter().filter(|r| r.is_ok()).count();
    let host = topology.name().unwrap_or("host");
    // Writing to a String cannot fail; results are ignored throughout.
    let _ = writeln!(x, "Plan for {host}: {ok} of {} VMs placed", results.len());
    // Worked out once, and only when a CPU shortfall names them.
    let mut holders = None;
    for r in results {
        x.push('\n');
        match r {
            Ok(d) => decision(&mut x, d),
            Err(rej) => {
                let _ = writeln!(x, "{}: REJECTED", rej.vm);
                let _ = writeln!(x, "  reason: {}", rej.reason);
                if rej.reason.is_cpu_short() {
                    let held = numaplace_plan::held_by(holders.get_or_insert_with(|| state.cpu_holders()));
                    if !held.is_empty() {
                        let _ = writeln!(x, "  {held}");
                    }
                }
            }
        }
    }
    x.push('\n');
    host_map(&mut x, topology, state);
    x
}

fn node_list(nodes: &[NodeId]) -> String {
    if nodes.is_empty() {
        return "(none)".to_string();
    }
    nodes.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(",")
}

fn decision(x: &mut String, d: &Decision) {
    let p = &d.placement;
    let mode = match p.cpu_mode {
        CpuMode::Dedicated if p.is_mixed() => "mixed",
        CpuMode::Dedicated => "dedicated",
        CpuMode::Shared => "shared",
    };
    let hotadd = match p.online_vcpus {
        Some(on) if (on as usize) < p.vcpus.len() => format!(" ({on} online at boot, the rest hot-pluggable)"),
        _ => String::new(),
    };
    let _ = writeln!(
        x,
        "{}: {} vCPUs{hotadd}, {} on {} ({mode})",
        p.vm,
        p.vcpus.len(),
        format_size(p.memory_bytes),
        node_list(&p.nodes)
    );
    match p.cpu_mode {
        CpuMode::Dedicated => {
            let _ = writeln!(x, "  vCPU->PU  {}", pin_runs(p));
        }
        CpuMode::Shared => {
            let _ = writeln!(x, "  vCPUs float over PUs {}", p.cpuset);
        }
    }
    if !p.emulator.is_empty() {
        let _ = writeln!(x, "  emulator  PUs {}", p.emulator);
    }
    let memory: Vec<String> = p.memory.iter().map(|(n, b)| format!("{n} {}", format_size(*b))).collect();
    let binding = match p.memory_mode {
        MemoryMode::Strict => "strict",
        MemoryMode::Interleave => "interleaved",
    };
    let pages = p.hugepage_bytes.map(|b| format!(", {} huge pages", format_size(b))).unwrap_or_default();
    let _ = writeln!(x, "  memory    {} ({binding}{pages})", memory.join(", "));
    if !p.devices.is_empty() {
        let _ = writeln!(x, "  devices   {} (passed through with VFIO)", p.devices.join(", "));
    }
    let g = &p.guest;
    let plural = |n: u32, word: &str| if n == 1 { format!("{n} {word}") } else { format!("{n} {word}s") };
    let dies = if g.dies > 1 { format!(" x {} dies", g.dies) } else { String::new() };
    let _ = writeln!(
        x,
        "  guest     {}{dies} x {} x {}, {}",
        plural(g.sockets, "socket"),
        plural(g.cores, "core"),
        plural(g.threads, "thread"),
        plural(g.cells.len() as u32, "cell")
    );
    for c in &g.cells {
        let dist: Vec<String> = c.distances.iter().map(|d| d.to_string()).collect();
        // A memory-only cell (a guest node for memory alone) has an empty
        // vCPU list, which would print as a dangling `vCPUs ,`.
        let vcpus = if c.vcpus.is_empty() { "no vCPUs".to_string() } else { format!("vCPUs {}", c.vcpus) };
        let _ = writeln!(
            x,
            "    cell{}: {vcpus}, {}, on host {}, distances [{}]",
            c.id,
            format_size(c.memory_bytes),
            c.host_node,
            dist.join(" ")
        );
    }
    if !d.alternatives.is_empty() {
        let _ = writeln!(x, "  considered:");
        let width = d.alternatives.iter().map(|a| node_list(&a.nodes).len()).max().unwrap_or(0);
        for a in &d.alternatives {
            let _ = writeln!(x, "    {:<width$}  {}", node_list(&a.nodes), a.verdict);
        }
    }
    for n in &d.notes {
        let _ = writeln!(x, "  note: {n}");
    }
}

/// vCPU->PU pinning in runs: consecutive vCPUs on PUs with a constant
/// step on one node print as one item (`v0-15 -> 0-15 (node0)`,
/// `v0-7 -> 0-14 step 2 (node0)`).
pub fn pin_runs(p: &Placement) -> String {
    let mut pins = p.vcpus.clone();
    pins.sort_by_key(|v| v.vcpu);
    let mut runs: Vec<String> = Vec::new();
    let mut i = 0;
    // A mixed VM's floating vCPU is shown with the set it floats over,
    // never as part of a run of pinned ones.
    let pinned = |v: &VcpuPin| p.floats(v.vcpu).is_none();
    while let Some(first) = pins.get(i) {
        if let Some(set) = p.floats(first.vcpu) {
            runs.push(format!("v{} floats {set} ({})", first.vcpu, first.node));
            i += 1;
            continue;
        }
        let mut j = i;
        let step = pins.get(i + 1).filter(|next| pinned(next)).and_then(|next| {
            (next.vcpu == first.vcpu + 1 && next.node == first.node && next.pu > first.pu).then(|| next.pu - first.pu)
        });
        if let Some(step) = step {
            while let (Some(a), Some(b)) = (pins.get(j), pins.get(j + 1)) {
                if pinned(b) && b.vcpu == a.vcpu + 1 && b.node == a.node && b.pu > a.pu && b.pu - a.pu == step {
                    j += 1;
                } else {
                    break;
                }
            }
        }
        let last = pins.get(j).copied().unwrap_or(*first);
        let item = if j == i {
            format!("v{} -> {} ({})", first.vcpu, first.pu, first.node)
        } else if step == Some(1) {
            format!("v{}-{} -> {}-{} ({})", first.vcpu, last.vcpu, first.pu, last.pu, first.node)
        } else {
            let step = step.unwrap_or(1);
            format!("v{}-{} -> {}-{} step {step} ({})", first.vcpu, last.vcpu, first.pu, last.pu, first.node)
        };
        runs.push(item);
        i = j + 1;
    }
    if runs.is_empty() {
        "(none)".to_string()
    } else {
        runs.join(", ")
    }
}

/// The host map alone: one line per node with each PU's holder (the
/// fleet service's host view).
pub fn host_map_text(topology: &Topology, state: &HostState) -> String {
    let mut x = String::new();
    host_map(&mut x, topology, state);
    x
}

fn host_map(x: &mut String, topology: &Topology, state: &HostState) {
    // Who sits on each PU. In shared mode several vCPUs may count against
    // one PU, so a PU holds a list; a dedicated VM's PUs without a vCPU
    // (the siblings `isolate` keeps idle) are its own too.
    let mut on_pu: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for p in state.placements() {
        for v in &p.vcpus {
            on_pu.entry(v.pu).or_default().push(format!("{}:v{}", p.vm, v.vcpu));
        }
        if p.cpu_mode == CpuMode::Dedicated {
            let pinned: CpuSet = p.vcpus.iter().map(|v| v.pu).collect();
            for pu in p.cpuset.difference(&pinned).iter() {
                // An isolated emulator CPU runs the emulator threads alone;
                // the others (isolate's siblings) run nothing.
                let what = if p.emulator.len() == 1 && p.emulator.contains(pu) { "emu" } else { "idle" };
                on_pu.entry(pu).or_default().push(format!("{}:{what}", p.vm));
            }
        }
    }
    for pu in state.reservations().cpus.iter() {
        on_pu.entry(pu).or_default().push("host".to_string());
    }
    let pool = &state.reservations().shared_cpus;
    let free_mark = |pu: u32| if pool.contains(pu) { "~" } else { "-" };
    if pool.is_empty() {
        let _ = writeln!(x, "Host map (PU=VM:vCPU, 'host' reserved, '-' free):");
    } else {
        let _ = writeln!(x, "Host map (PU=VM:vCPU, 'host' reserved, '-' free, '~' free in the shared pool {pool}):");
    }
    for (ni, node) in topology.nodes().iter().enumerate() {
        let cores: Vec<usize> = topology.cores_of_node(ni).collect();
        let online = topology.node_online_cpus(ni);
        let used = online.iter().filter(|c| on_pu.contains_key(c)).count();
        let mut line = format!(
            "{}: {} cores ({} free), {} of {} PUs used; memory {}, {} free",
            node.id,
            cores.len(),
            state.free_cores(node.id).unwrap_or(0),
            used,
            online.len(),
            format_size(node.memory_bytes),
            format_size(state.free_memory_bytes(node.id).unwrap_or(0))
        );
        // Empty pools (sizes the kernel supports but nobody reserved) are
        // noise in a map of what is used.
        for pool in node.hugepages.iter().filter(|p| p.total > 0) {
            let free = state.free_hugepages(node.id, pool.size_bytes).unwrap_or(0);
            line.push_str(&format!("; {} pages {} of {} free", format_size(pool.size_bytes), free, pool.total));
        }
        let _ = writeln!(x, "{line}");
        let mut seen = CpuSet::new();
        for ci in cores {
            let Some(core) = topology.cores().get(ci) else { continue };
            seen = seen.union(&core.cpus);
            let threads: Vec<String> = core
                .cpus
                .iter()
                .map(|pu| match on_pu.get(&pu) {
                    Some(who) => format!("{pu}={}", who.join("+")),
                    None => format!("{pu}={}", free_mark(pu)),
                })
                .collect();
            let label = core.core_id.map_or_else(|| "c?".to_string(), |id| format!("c{id}"));
            let _ = writeln!(x, "  {label:>4}: [{}]", threads.join(" | "));
        }
        // PUs in the node that belong to no core of it (a core spanning
        // nodes is listed under the node of its first thread).
        let rest = online.difference(&seen);
        if !rest.is_empty() {
            let threads: Vec<String> = rest
                .iter()
                .map(|pu| format!("{pu}={}", on_pu.get(&pu).map_or(free_mark(pu).to_string(), |w| w.join("+"))))
                .collect();
            let _ = writeln!(x, "  other: [{}]", threads.join(" | "));
        }
    }
}
