//! The plan for people: for each VM the choice (nodes, vCPU->PU map,
//! memory per node, guest topology), the alternatives considered and why
//! they lost, the planner's notes, the rejections with their shortfall,
//! and a map of the host (nodes -> cores -> threads) showing which VM's
//! vCPU sits on every PU after the plan.

use numaplace_plan::{CpuMode, Decision, HostState, MemoryMode, Pieces, Placement, Rejection, Sentence, VcpuPin};
use numaplace_topo::{format_size, CpuSet, NodeId, Topology};
use std::fmt::Write;

use crate::text::push_plural;

/// The whole view: `results` are this run's answers in request order,
/// `state` the host afterwards (the VMs it started with and the new ones),
/// which the map shows with the free capacity the planner counts.
pub fn render(topology: &Topology, results: &[Result<Decision, Rejection>], state: &HostState) -> String {
    // Sized once: a VM's plan is about 600 bytes, and a string grown from
    // empty copies itself and touches fresh pages at every doubling.
    let mut x = String::with_capacity(4096 + 800 * results.len());
    let ok = results.iter().filter(|r| r.is_ok()).count();
    let host = topology.name().unwrap_or("host");
    // Writing to a String cannot fail; results are ignored throughout.
    let _ = writeln!(x, "Plan for {host}: {ok} of {} VMs placed", results.len());
    // Worked out once, and only when a CPU shortfall names them.
    let mut holders = None;
    // Whether any node holds several L3 groups: asked once for the run,
    // not for each VM (it built every node's CPU set each time).
    let split_l3 = !topology.caches().is_empty()
        && (0..topology.nodes().len()).any(|i| !node_l3(topology, &topology.node_online_cpus(i)).is_empty());
    // Buffers reused from VM to VM.
    let mut scratch = Scratch::default();
    for r in results {
        x.push('\n');
        match r {
            Ok(d) => decision(&mut x, d, topology, split_l3, &mut scratch),
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

/// `node0,node2`, or `(none)`.
fn node_list(x: &mut String, nodes: &[NodeId]) {
    if nodes.is_empty() {
        x.push_str("(none)");
    }
    for (i, n) in nodes.iter().enumerate() {
        if i > 0 {
            x.push(',');
        }
        push_node(x, *n);
    }
}

/// A number in place (`write!` costs the formatting machinery each time;
/// a VM's text has a few dozen).
fn push_num(x: &mut String, n: impl itoa::Integer) {
    x.push_str(itoa::Buffer::new().format(n));
}

/// `node3`, as [`NodeId`]'s `Display` writes it.
fn push_node(x: &mut String, n: NodeId) {
    x.push_str("node");
    push_num(x, n.0);
}

/// `0-3,8`, as [`CpuSet`]'s `Display` writes it.
fn push_set(x: &mut String, set: &CpuSet) {
    for (i, (a, b)) in set.ranges().into_iter().enumerate() {
        if i > 0 {
            x.push(',');
        }
        push_num(x, a);
        if a != b {
            x.push('-');
            push_num(x, b);
        }
    }
}

/// The L3 groups (cache positions) of a node's cores, when it has more
/// than one (an EPYC node of two or more CCX); empty otherwise.
fn node_l3(topology: &Topology, cpus: &CpuSet) -> Vec<usize> {
    let mut groups: Vec<usize> =
        (0..topology.caches().len()).filter(|&g| !topology.caches()[g].cpus.intersection(cpus).is_empty()).collect();
    groups.dedup();
    if groups.len() > 1 {
        groups
    } else {
        Vec::new()
    }
}

/// `  L3        1 group: 24-26,72-74 (3 vCPUs)` for a dedicated VM on a
/// host whose nodes hold several L3 groups: whether it kept to one.
/// `split` says whether any node of the host holds several groups.
fn l3_line(x: &mut String, topology: &Topology, p: &Placement, split: bool) {
    if !split || p.vcpus.is_empty() {
        return;
    }
    let used: Vec<(&CpuSet, usize)> = topology
        .caches()
        .iter()
        .map(|c| (&c.cpus, p.vcpus.iter().filter(|v| c.cpus.contains(v.pu)).count()))
        .filter(|&(_, n)| n > 0)
        .collect();
    if used.is_empty() {
        return;
    }
    x.push_str("  L3        ");
    push_plural(x, used.len(), "group");
    x.push(':');
    for (i, (cpus, n)) in used.iter().enumerate() {
        let _ = write!(x, "{}{cpus} (", if i > 0 { ", " } else { " " });
        push_plural(x, *n, "vCPU");
        x.push(')');
    }
    x.push('\n');
}

/// Buffers a render reuses from VM to VM: alternatives' node lists
/// written side by side (`lists`, each ending at its `ends`), and the
/// sizes worded so far (a batch's VMs mostly share a few).
#[derive(Default)]
struct Scratch {
    lists: String,
    ends: Vec<usize>,
    sizes: Vec<(u64, String)>,
}

impl Scratch {
    /// [`format_size`] of `bytes`, worded once per render.
    fn size(&mut self, x: &mut String, bytes: u64) {
        if let Some((_, s)) = self.sizes.iter().find(|(b, _)| *b == bytes) {
            x.push_str(s);
            return;
        }
        let s = format_size(bytes);
        x.push_str(&s);
        if self.sizes.len() < 16 {
            self.sizes.push((bytes, s));
        }
    }
}

fn decision(x: &mut String, d: &Decision, topology: &Topology, split_l3: bool, scratch: &mut Scratch) {
    let p = &d.placement;
    let mode = match p.cpu_mode {
        CpuMode::Dedicated if p.is_mixed() => "mixed",
        CpuMode::Dedicated => "dedicated",
        CpuMode::Shared => "shared",
    };
    x.push_str(&p.vm);
    x.push_str(": ");
    push_plural(x, p.vcpus.len(), "vCPU");
    if let Some(on) = p.online_vcpus.filter(|&on| (on as usize) < p.vcpus.len()) {
        let _ = write!(x, " ({on} online at boot, the rest hot-pluggable)");
    }
    x.push_str(", ");
    scratch.size(x, p.memory_bytes);
    x.push_str(" on ");
    node_list(x, &p.nodes);
    x.push_str(" (");
    x.push_str(mode);
    x.push_str(")\n");
    match p.cpu_mode {
        CpuMode::Dedicated => {
            x.push_str("  vCPU->PU  ");
            write_pin_runs(x, p);
            x.push('\n');
            l3_line(x, topology, p, split_l3);
        }
        CpuMode::Shared => {
            x.push_str("  vCPUs float over PUs ");
            push_set(x, &p.cpuset);
            x.push('\n');
        }
    }
    if !p.emulator.is_empty() {
        x.push_str("  emulator  PUs ");
        push_set(x, &p.emulator);
        x.push('\n');
    }
    x.push_str("  memory    ");
    for (i, (n, b)) in p.memory.iter().enumerate() {
        x.push_str(if i > 0 { ", " } else { "" });
        push_node(x, *n);
        x.push(' ');
        scratch.size(x, *b);
    }
    let binding = match p.memory_mode {
        MemoryMode::Strict => "strict",
        MemoryMode::Interleave => "interleaved",
    };
    let _ = write!(x, " ({binding}");
    if let Some(b) = p.hugepage_bytes {
        let _ = write!(x, ", {} huge pages", format_size(b));
    }
    x.push_str(")\n");
    if !p.devices.is_empty() {
        let _ = writeln!(x, "  devices   {} (passed through with VFIO)", p.devices.join(", "));
    }
    guest(x, &p.guest, scratch);
    if !d.alternatives.is_empty() {
        x.push_str("  considered:\n");
        // The node lists side by side in one buffer, then each padded to
        // the widest (no string per list).
        scratch.lists.clear();
        scratch.ends.clear();
        let mut width = 0;
        for a in &d.alternatives {
            let start = scratch.lists.len();
            node_list(&mut scratch.lists, &a.nodes);
            width = width.max(scratch.lists.len() - start);
            scratch.ends.push(scratch.lists.len());
        }
        let mut start = 0;
        for (a, &end) in d.alternatives.iter().zip(&scratch.ends) {
            let list = scratch.lists.get(start..end).unwrap_or_default();
            start = end;
            // Padded as `{list:<width$}` would (node lists are ASCII).
            x.push_str("    ");
            x.push_str(list);
            x.extend(std::iter::repeat_n(' ', width - list.len() + 2));
            said(x, &a.verdict);
        }
    }
    for n in &d.notes {
        x.push_str("  note: ");
        said(x, n);
    }
}

/// The guest's topology and its cells, a line each.
fn guest(x: &mut String, g: &numaplace_plan::GuestTopology, scratch: &mut Scratch) {
    x.push_str("  guest     ");
    push_plural(x, g.sockets, "socket");
    if g.dies > 1 {
        let _ = write!(x, " x {} dies", g.dies);
    }
    x.push_str(" x ");
    push_plural(x, g.cores, "core");
    x.push_str(" x ");
    push_plural(x, g.threads, "thread");
    x.push_str(", ");
    push_plural(x, g.cells.len(), "cell");
    x.push('\n');
    for c in &g.cells {
        x.push_str("    cell");
        push_num(x, c.id);
        x.push_str(": ");
        // A memory-only cell (a guest node for memory alone) has an empty
        // vCPU list, which would print as a dangling `vCPUs ,`.
        if c.vcpus.is_empty() {
            x.push_str("no vCPUs");
        } else {
            x.push_str("vCPUs ");
            push_set(x, &c.vcpus);
        }
        x.push_str(", ");
        scratch.size(x, c.memory_bytes);
        x.push_str(", on host ");
        push_node(x, c.host_node);
        // A cell whose memory is on other host nodes (HBM or CXL backing
        // it, the tier hidden from the guest) says where.
        if !c.memory_nodes.is_empty() {
            x.push_str(", memory on ");
            for (i, (node, bytes)) in c.memory_nodes.iter().enumerate() {
                let _ = write!(x, "{}{node} {}", if i > 0 { " + " } else { "" }, format_size(*bytes));
            }
        }
        x.push_str(", distances [");
        for (i, d) in c.distances.iter().enumerate() {
            x.push_str(if i > 0 { " " } else { "" });
            push_num(x, *d);
        }
        x.push_str("]\n");
    }
}

/// A sentence and a newline: written piece by piece where the planner
/// words it so, without the formatting machinery (several per VM).
fn said(x: &mut String, s: &impl Sentence) {
    struct Into<'a>(&'a mut String);
    impl Pieces for Into<'_> {
        fn text(&mut self, s: &'static str) {
            self.0.push_str(s);
        }
        fn name(&mut self, s: &str) {
            self.0.push_str(s);
        }
        fn num(&mut self, n: u64) {
            self.0.push_str(itoa::Buffer::new().format(n));
        }
    }
    if !s.pieces(&mut Into(x)) {
        let _ = write!(x, "{s}");
    }
    x.push('\n');
}

/// vCPU->PU pinning in runs: consecutive vCPUs on PUs with a constant
/// step on one node print as one item (`v0-15 -> 0-15 (node0)`,
/// `v0-7 -> 0-14 step 2 (node0)`; two as a list, `v0-1 -> 4,12 (node1)`).
pub fn pin_runs(p: &Placement) -> String {
    let mut x = String::new();
    write_pin_runs(&mut x, p);
    x
}

fn write_pin_runs(x: &mut String, p: &Placement) {
    // Most placements list their vCPUs in order already.
    let sorted;
    let pins: &[VcpuPin] = if p.vcpus.windows(2).all(|w| w[0].vcpu <= w[1].vcpu) {
        &p.vcpus
    } else {
        let mut pins = p.vcpus.clone();
        pins.sort_by_key(|v| v.vcpu);
        sorted = pins;
        &sorted
    };
    let mut i = 0;
    let mut any = false;
    // A mixed VM's floating vCPU is shown with the set it floats over,
    // never as part of a run of pinned ones.
    let pinned = |v: &VcpuPin| p.floats(v.vcpu).is_none();
    while let Some(first) = pins.get(i) {
        if any {
            x.push_str(", ");
        }
        any = true;
        if let Some(set) = p.floats(first.vcpu) {
            x.push('v');
            push_num(x, first.vcpu);
            x.push_str(" floats ");
            push_set(x, set);
            x.push_str(" (");
            push_node(x, first.node);
            x.push(')');
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
        // `v0 -> 4`, `v0-15 -> 0-15`, `v0-1 -> 4,12`, `v0-7 -> 0-14 step 2`,
        // then the node.
        x.push('v');
        push_num(x, first.vcpu);
        if j == i {
            x.push_str(" -> ");
            push_num(x, first.pu);
        } else {
            x.push('-');
            push_num(x, last.vcpu);
            x.push_str(" -> ");
            push_num(x, first.pu);
            // Two PUs apart (a core's two threads, most often) read better
            // as a list than as a range with a step as wide as the range.
            x.push(if step != Some(1) && j == i + 1 { ',' } else { '-' });
            push_num(x, last.pu);
            if step != Some(1) && j != i + 1 {
                x.push_str(" step ");
                push_num(x, step.unwrap_or(1));
            }
        }
        x.push_str(" (");
        push_node(x, first.node);
        x.push(')');
        i = j + 1;
    }
    if !any {
        x.push_str("(none)");
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
    // Who sits on each PU, from the state's one map of holders: in shared
    // mode several vCPUs may count against one PU; a dedicated VM's PUs
    // without a vCPU are its emulator's or the siblings it keeps idle.
    let map = state.cpu_map();
    let host = map.host();
    let on_pu = |pu: u32| !map.on(pu).is_empty() || host.contains(pu);
    let pool = &state.reservations().shared_cpus;
    let free_mark = |pu: u32| if pool.contains(pu) { "~" } else { "-" };
    // `pu=holder+holder`, or `pu=-` (free).
    let thread = |x: &mut String, pu: u32| {
        x.push_str(itoa::Buffer::new().format(pu));
        x.push('=');
        if !on_pu(pu) {
            x.push_str(free_mark(pu));
            return;
        }
        for (i, h) in map.on(pu).iter().enumerate() {
            let _ = write!(x, "{}{}:{}", if i > 0 { "+" } else { "" }, h.vm, h.what);
        }
        if host.contains(pu) {
            x.push_str(if map.on(pu).is_empty() { "host" } else { "+host" });
        }
    };
    if pool.is_empty() {
        let _ = writeln!(x, "Host map (PU=VM:vCPU, 'host' reserved, '-' free):");
    } else {
        let _ = writeln!(x, "Host map (PU=VM:vCPU, 'host' reserved, '-' free, '~' free in the shared pool {pool}):");
    }
    for (ni, node) in topology.nodes().iter().enumerate() {
        let cores: Vec<usize> = topology.cores_of_node(ni).collect();
        let online = topology.node_online_cpus(ni);
        let used = online.iter().filter(|&c| on_pu(c)).count();
        let _ = write!(
            x,
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
            let _ = write!(x, "; {} pages {} of {} free", format_size(pool.size_bytes), free, pool.total);
        }
        x.push('\n');
        let mut seen = CpuSet::new();
        let l3 = node_l3(topology, &online);
        for ci in cores {
            let Some(core) = topology.cores().get(ci) else { continue };
            seen = seen.union(&core.cpus);
            match core.core_id {
                Some(id) => {
                    let label = format!("c{id}");
                    let _ = write!(x, "  {label:>4}: [");
                }
                None => {
                    let _ = write!(x, "  {:>4}: [", "c?");
                }
            }
            for (i, pu) in core.cpus.iter().enumerate() {
                if i > 0 {
                    x.push_str(" | ");
                }
                thread(x, pu);
            }
            x.push(']');
            // On a node of several L3 groups, each core names its group
            // (0, 1, ... within the node): small VMs keep to one.
            let group = core.cpus.first().and_then(|pu| topology.caches().iter().position(|c| c.cpus.contains(pu)));
            if let Some(k) = group.and_then(|g| l3.iter().position(|&h| h == g)) {
                let _ = write!(x, " L3.{k}");
            }
            x.push('\n');
        }
        // PUs in the node that belong to no core of it (a core spanning
        // nodes is listed under the node of its first thread).
        let rest = online.difference(&seen);
        if !rest.is_empty() {
            x.push_str("  other: [");
            for (i, pu) in rest.iter().enumerate() {
                if i > 0 {
                    x.push_str(" | ");
                }
                thread(x, pu);
            }
            x.push_str("]\n");
        }
    }
}
