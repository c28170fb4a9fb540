//! The `top` view as text: one row per VM/process with esxtop's NUMA
//! columns, then one row per node. Pure (a snapshot in, lines out), so the
//! refreshing terminal view and `--once --format text` share it.

use crate::sample::{Kind, ProcInfo, Snapshot};
use std::cmp::Ordering;
use std::fmt::Write;

/// Orders of the process rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    /// Lowest N%L first (the ones needing attention).
    Locality,
    /// Most resident memory first.
    Memory,
    /// Most remote memory first.
    Remote,
    /// By name.
    Name,
    /// By pid.
    Pid,
}

impl SortKey {
    /// The key bound to a keyboard letter in the live view.
    pub fn from_key(c: char) -> Option<SortKey> {
        Some(match c {
            'l' => SortKey::Locality,
            'm' => SortKey::Memory,
            'r' => SortKey::Remote,
            'n' => SortKey::Name,
            'p' => SortKey::Pid,
            _ => return None,
        })
    }
}

/// Sorts rows by `key`, ties broken by pid so the order is stable.
pub(crate) fn sort(procs: &mut [ProcInfo], key: SortKey) {
    let pct = |p: &ProcInfo| p.local_percent.unwrap_or(100.0);
    procs.sort_by(|a, b| {
        let primary = match key {
            SortKey::Locality => pct(a).partial_cmp(&pct(b)).unwrap_or(Ordering::Equal),
            SortKey::Memory => b.memory_bytes.cmp(&a.memory_bytes),
            SortKey::Remote => b.remote_bytes.cmp(&a.remote_bytes),
            SortKey::Name => a.name.cmp(&b.name),
            SortKey::Pid => Ordering::Equal,
        };
        primary.then(a.pid.cmp(&b.pid))
    });
}

fn mib(bytes: u64) -> String {
    format!("{}", (bytes + (1 << 19)) >> 20)
}

fn list(nodes: &[u32]) -> String {
    if nodes.is_empty() {
        "-".into()
    } else {
        nodes.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
    }
}

/// Renders the view (memory in MiB).
pub fn render(snap: &Snapshot, key: SortKey) -> String {
    let mut procs = snap.processes.clone();
    sort(&mut procs, key);
    let mut out = String::new();
    if !snap.numa {
        out.push_str("note: this kernel exposes no NUMA nodes; everything is on node 0\n");
    }
    let mut header = format!(
        "{:>7} {:<16} {:<4} {:>7} {:>5} {:>4} {:>7} {:>7} {:>5}",
        "PID", "NAME", "KIND", "MEMSZ", "NHN", "NMIG", "NRMEM", "NLMEM", "N%L"
    );
    for n in &snap.nodes {
        let _ = write!(header, " {:>9}", format!("GST_ND({})", n.node));
    }
    header.push_str("  NOTE");
    out.push_str(&header);
    out.push('\n');
    for p in &procs {
        let name: String = p.name.chars().take(16).collect();
        let pct = p.local_percent.map_or("-".into(), |v| format!("{v:.0}"));
        let _ = write!(
            out,
            "{:>7} {:<16} {:<4} {:>7} {:>5} {:>4} {:>7} {:>7} {:>5}",
            p.pid,
            name,
            if p.kind == Kind::Vm { "vm" } else { "proc" },
            p.configured_memory_bytes.map_or("-".into(), mib),
            list(&p.home_nodes),
            p.home_migrations,
            mib(p.remote_bytes),
            mib(p.local_bytes),
            pct
        );
        for n in &snap.nodes {
            let _ = write!(out, " {:>9}", mib(p.memory_per_node.get(&n.node).copied().unwrap_or(0)));
        }
        if let Some(b) = p.home_balance_percent {
            // N%L is trivially high for a process homed on every node it
            // uses; what matters then is how even the spread is.
            let _ = write!(out, "  spans {} nodes, balance {b:.0}%", p.home_nodes.len());
        }
        out.push('\n');
    }
    out.push('\n');
    let _ = writeln!(out, "{:>5} {:>10} {:>9} {:>9} {:>9} {:>10}", "NODE", "CPUS", "BUSY", "MEM", "FREE", "WATCHED");
    for n in &snap.nodes {
        let _ = writeln!(
            out,
            "{:>5} {:>10} {:>9} {:>9} {:>9} {:>10}",
            n.node,
            n.cpus,
            n.busy_cpus.map_or("-".into(), |b| format!("{b:.1}")),
            mib(n.memory_total_bytes),
            mib(n.memory_free_bytes),
            mib(n.sampled_memory_bytes)
        );
    }
    let s = &snap.skipped;
    if s.permission_denied > 0 {
        let _ = writeln!(
            out,
            "{} processes not readable (permission denied): run as root to see them",
            s.permission_denied
        );
    }
    if s.vanished > 0 {
        let _ = writeln!(out, "{} processes exited while being read (or do not exist)", s.vanished);
    }
    for e in &s.errors {
        let _ = writeln!(out, "skipped: {e}");
    }
    out
}
