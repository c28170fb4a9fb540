//! Every real machine in `fixtures/topologies` is read, and its counts agree
//! with `INDEX.csv` (which hwloc 2.9's `lstopo` produced from the same
//! files): packages, NUMA nodes, cores, PUs, and memory per node within 1%
//! (or the index's 0.1 GiB rounding, whichever is larger).
//!
//! `NUMAPLACE_INDEX_FILTER=text` restricts the run to rows whose file name
//! contains `text`, to debug one reader at a time.

use numaplace_read::{parse_text, read_source, SourceKind};
use numaplace_topo::Topology;
use std::path::PathBuf;

/// Files of the index that the readers refuse as they stand, with the
/// start of the error. libvirt's test harness gives its 1 GiB cells huge
/// page pools of terabytes, which no kernel reports: the file is kept as
/// libvirt ships it, must be refused, and its counts are checked on a copy
/// whose cells hold the pools (8 and 16 TiB).
const REFUSED: [(&str, &str); 1] = [(
    "libvirt/vircaps-x86_64-resctrl-amd.xml",
    "node0 has a pool of 4096 x 2 MiB huge pages (8 GiB), more than the node's 1 GiB of memory",
)];

/// Reads an index file; a file of [`REFUSED`] must fail as listed, and its
/// copy with room for the pools is read instead.
fn read_row(file: &str) -> Result<Topology, String> {
    let path = fixtures().join(file);
    let path = path.to_str().expect("utf-8 path");
    let Some((_, want)) = REFUSED.iter().find(|(f, _)| *f == file) else {
        return read_source(path).map_err(|e| e.to_string());
    };
    match read_source(path) {
        Ok(_) => return Err(format!("read, but should be refused with `{want}`")),
        Err(e) if !e.to_string().ends_with(want) => return Err(format!("refused with `{e}`, not `{want}`")),
        Err(_) => {}
    }
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let roomy = text
        .replace("<memory unit='KiB'>1048576</memory>", "<memory unit='KiB'>8589934592</memory>")
        .replace("<memory unit='KiB'>2097152</memory>", "<memory unit='KiB'>17179869184</memory>");
    parse_text(SourceKind::Libvirt, file, &roomy).map_err(|e| e.to_string())
}

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/topologies")
}

struct Row {
    file: String,
    packages: usize,
    nodes: usize,
    cores: usize,
    pus: usize,
    mem_gib: Vec<f64>,
}

/// A minimal CSV reader for the index (quoted fields may hold commas).
fn split_csv(line: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(String::new()),
            _ => out.last_mut().expect("non-empty").push(c),
        }
    }
    out
}

fn rows() -> Vec<Row> {
    let text = std::fs::read_to_string(fixtures().join("INDEX.csv")).expect("INDEX.csv");
    let mut lines = text.lines();
    let header = split_csv(lines.next().expect("header"));
    let col = |name: &str| header.iter().position(|h| h == name).expect(name);
    let (f, p, n, c, u, m) =
        (col("file"), col("packages"), col("numa_nodes"), col("cores"), col("pus"), col("mem_per_node_GiB"));
    lines
        .map(split_csv)
        .map(|r| Row {
            file: r[f].clone(),
            packages: r[p].parse().expect("packages"),
            nodes: r[n].parse().expect("nodes"),
            cores: r[c].parse().expect("cores"),
            pus: r[u].parse().expect("pus"),
            mem_gib: r[m].split_whitespace().map(|v| v.parse().expect("memory")).collect(),
        })
        .collect()
}

#[test]
fn real_topologies_match_the_index() {
    let filter = std::env::var("NUMAPLACE_INDEX_FILTER").unwrap_or_default();
    let mut failures = Vec::new();
    let mut checked = 0;
    for row in rows().into_iter().filter(|r| r.file.contains(&filter)) {
        let topo = match read_row(&row.file) {
            Ok(t) => t,
            Err(e) => {
                failures.push(format!("{}: {e}", row.file));
                continue;
            }
        };
        checked += 1;
        let got = (topo.package_count(), topo.nodes().len(), topo.core_count(), topo.pu_count());
        let want = (row.packages, row.nodes, row.cores, row.pus);
        if got != want {
            failures.push(format!("{}: (packages, nodes, cores, pus) = {got:?}, index says {want:?}", row.file));
        }
        // A blank memory column means the index has no trustworthy sizes
        // for that file (libvirt's test harness mocks cell memory).
        if row.mem_gib.is_empty() {
            continue;
        }
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        let mut mem: Vec<f64> = topo.nodes().iter().map(|n| gib(n.memory_bytes)).collect();
        let mut expected = row.mem_gib.clone();
        mem.sort_by(f64::total_cmp);
        expected.sort_by(f64::total_cmp);
        let close = mem.len() == expected.len()
            && mem.iter().zip(&expected).all(|(a, b)| (a - b).abs() <= (b * 0.01).max(0.051));
        if !close {
            failures.push(format!("{}: memory per node {mem:.1?} GiB, index says {expected:?}", row.file));
        }
    }
    assert!(failures.is_empty(), "{} of {checked} files disagree:\n{}", failures.len(), failures.join("\n"));
    assert!(checked > 0 || !filter.is_empty(), "no topology was checked");
}
