//! Parser for `/proc/PID/numa_maps`: one line per mapping, giving the
//! memory policy in force for it and how many pages sit on each node.
//!
//! Line shape (kernel `show_numa_map`): `<start-address> <policy>
//! [file=PATH|heap|stack] [huge] [anon=N] [dirty=N] [mapped=N] [mapmax=N]
//! [swapcache=N] [active=N] [writeback=N] [N<node>=N ...] [kernelpagesize_kB=N]`.
//! The `N<node>` counts are in units of `kernelpagesize_kB`, which is 2048
//! or 1048576 for hugetlb mappings: counting them as 4 KiB pages would
//! under-report huge-page-backed guests 512-fold. A mapping with no
//! resident pages has no counts and no page size.

use crate::error::ParseError;
use std::collections::BTreeMap;

/// The memory policy of one mapping, as the kernel prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Policy {
    /// The process default: allocate on the node of the CPU that faults.
    Default,
    /// Explicit local allocation (`numactl --localalloc`).
    Local,
    /// Prefer one node, fall back elsewhere.
    Prefer {
        /// The preferred nodes (one, or several for `prefer (many)`).
        nodes: Vec<u32>,
    },
    /// Allocate only on these nodes.
    Bind {
        /// The allowed nodes.
        nodes: Vec<u32>,
    },
    /// Spread pages round-robin over these nodes (plain or weighted).
    Interleave {
        /// The nodes.
        nodes: Vec<u32>,
    },
}

/// What backs a mapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backing {
    /// A file (path as the kernel escapes it: spaces as `\040`).
    File(String),
    /// The process heap.
    Heap,
    /// The main thread's stack.
    Stack,
    /// Anonymous memory without a label.
    Anonymous,
}

/// One line of `numa_maps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// Start address of the mapping.
    pub start: u64,
    /// Policy in force.
    pub policy: Policy,
    /// What backs it.
    pub backing: Backing,
    /// A hugetlbfs mapping (`huge`).
    pub huge: bool,
    /// Anonymous pages (`anon=`), if printed.
    pub anon_pages: u64,
    /// Pages per node, in units of `page_size`.
    pub pages: BTreeMap<u32, u64>,
    /// Page size in bytes (`kernelpagesize_kB` x 1024); 0 when the kernel
    /// printed none (nothing resident).
    pub page_size: u64,
}

impl Mapping {
    /// Resident bytes on each node.
    pub fn bytes_per_node(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.pages.iter().map(|(&node, &n)| (node, n.saturating_mul(self.page_size)))
    }
}

/// Parses a whole `numa_maps` text.
pub fn parse(text: &str) -> Result<Vec<Mapping>, ParseError> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| parse_line(l).map_err(|reason| ParseError::Line { file: "numa_maps", line: i + 1, reason }))
        .collect()
}

/// Sums resident bytes per node over all mappings.
pub fn bytes_per_node(maps: &[Mapping]) -> BTreeMap<u32, u64> {
    let mut total = BTreeMap::new();
    for m in maps {
        for (node, bytes) in m.bytes_per_node() {
            *total.entry(node).or_insert(0u64) += bytes;
        }
    }
    total
}

fn parse_line(line: &str) -> Result<Mapping, String> {
    let line = line.trim();
    let (addr, rest) = line.split_once(' ').unwrap_or((line, ""));
    let start = u64::from_str_radix(addr, 16).map_err(|_| format!("bad address {addr:?}"))?;
    let (policy, rest) = parse_policy(rest.trim_start())?;
    let mut m = Mapping {
        start,
        policy,
        backing: Backing::Anonymous,
        huge: false,
        anon_pages: 0,
        pages: BTreeMap::new(),
        page_size: 0,
    };
    for token in rest.split_whitespace() {
        match token.split_once('=') {
            None => match token {
                "heap" => m.backing = Backing::Heap,
                "stack" => m.backing = Backing::Stack,
                "huge" => m.huge = true,
                // Flag words from newer kernels are not fatal.
                _ => {}
            },
            Some(("file", path)) => m.backing = Backing::File(path.to_string()),
            Some((key, value)) => {
                let n = || value.parse::<u64>().map_err(|_| format!("bad number in {token:?}"));
                if key == "anon" {
                    m.anon_pages = n()?;
                } else if key == "kernelpagesize_kB" {
                    m.page_size = n()?.saturating_mul(1024);
                } else if let Some(node) = key.strip_prefix('N').and_then(|d| d.parse::<u32>().ok()) {
                    m.pages.insert(node, n()?);
                }
                // dirty=, mapped=, mapmax=, swapcache=, active=, writeback=
                // do not bear on placement.
            }
        }
    }
    if !m.pages.is_empty() && m.page_size == 0 {
        return Err("node page counts without kernelpagesize_kB".into());
    }
    Ok(m)
}

/// Splits the policy off the front of `rest`. Two kernel mode names hold
/// a space ("weighted interleave", "prefer (many)"), so the mode is matched
/// by name rather than taken as the first word.
fn parse_policy(rest: &str) -> Result<(Policy, &str), String> {
    const MODES: [&str; 7] =
        ["weighted interleave", "prefer (many)", "interleave", "default", "prefer", "local", "bind"];
    let mode = MODES
        .iter()
        .find(|m| rest.starts_with(**m))
        .ok_or_else(|| format!("unknown policy in {:?}", rest.split_whitespace().next().unwrap_or("")))?;
    let mut tail = rest.get(mode.len()..).unwrap_or("");
    // Mode flags: `=static`, `=relative` (and `=balancing` on newer kernels).
    if let Some(t) = tail.strip_prefix('=') {
        let end = t.find([':', ' ']).unwrap_or(t.len());
        tail = t.get(end..).unwrap_or("");
    }
    let mut nodes = Vec::new();
    if let Some(t) = tail.strip_prefix(':') {
        let (list, after) = t.split_once(' ').unwrap_or((t, ""));
        nodes = numaplace_topo::CpuSet::parse_list(list)
            .map_err(|e| format!("bad node list {list:?}: {e}"))?
            .iter()
            .collect();
        tail = after;
    }
    let policy = match *mode {
        "default" => Policy::Default,
        "local" => Policy::Local,
        "prefer" | "prefer (many)" => Policy::Prefer { nodes },
        "bind" => Policy::Bind { nodes },
        _ => Policy::Interleave { nodes },
    };
    Ok((policy, tail))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(s: &str) -> Mapping {
        parse_line(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn multi_word_modes_and_flags() {
        assert_eq!(
            line("7f00 weighted interleave:0-1 anon=2 N0=1 N1=1 kernelpagesize_kB=4").policy,
            Policy::Interleave { nodes: vec![0, 1] }
        );
        assert_eq!(line("7f00 prefer (many):2,3").policy, Policy::Prefer { nodes: vec![2, 3] });
        let m = line("7f00 bind=static:1 heap anon=3 N1=3 kernelpagesize_kB=4");
        assert_eq!(m.policy, Policy::Bind { nodes: vec![1] });
        assert_eq!(m.backing, Backing::Heap);
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_line("zzz default").is_err());
        assert!(parse_line("7f00 sometimes").is_err());
        assert!(parse_line("7f00 default N0=x kernelpagesize_kB=4").is_err());
        assert!(parse_line("7f00 default N0=1").is_err());
    }
}
