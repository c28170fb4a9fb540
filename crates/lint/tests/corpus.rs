//! lint over libvirt's own test domains (fixtures/libvirt-domains, from
//! libvirt's `tests/qemuxmlconfdata`) on real hosts: every domain libvirt
//! accepts is read, and the findings on one file never disagree about
//! where its cells and memory are (issue 52).

use numaplace_lint::{lint, parse_file, Finding, Layout, VmFile};
use numaplace_topo::{CpuSet, Topology};
use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn corpus(folder: &str) -> Vec<(String, Vec<u8>)> {
    let dir = root().join("fixtures/libvirt-domains").join(folder);
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "xml"))
        .map(|p| (p.file_name().and_then(|n| n.to_str()).unwrap_or("").to_string(), std::fs::read(&p).expect("read")))
        .collect();
    out.sort();
    out
}

/// A 2-socket Intel host (2 nodes) and the 8-node EPYC corona.
fn hosts() -> Vec<(&'static str, Topology)> {
    ["hwloc/linux/32em64t-2n8c+dax+nvme+mic+dimms.xml", "mpibind/epyc-corona.xml"]
        .into_iter()
        .map(|f| {
            let path = root().join("fixtures/topologies").join(f);
            let t = numaplace_read::read_source(&path.display().to_string()).unwrap_or_else(|e| panic!("{f}: {e}"));
            (f, t)
        })
        .collect()
}

fn files(folder: &str) -> (Vec<VmFile>, Vec<String>) {
    let mut ok = Vec::new();
    let mut refused = Vec::new();
    for (name, bytes) in corpus(folder) {
        match parse_file(&name, &bytes) {
            Ok(f) => ok.push(f),
            Err(e) => refused.push(e.to_string()),
        }
    }
    (ok, refused)
}

/// "N guest NUMA cells on K host nodes" in a message, as numbers.
fn cells_on_nodes(message: &str) -> Option<(u32, u32)> {
    let (head, rest) = message.split_once(" guest NUMA cell")?;
    let c = head.rsplit(' ').next()?.parse().ok()?;
    let rest = rest.split_once(" on ")?.1;
    let k = rest.split(' ').next()?.parse().ok()?;
    Some((c, k))
}

/// Host node ids a finding's message names as `nodeN`.
fn named_nodes(message: &str) -> CpuSet {
    message
        .split("node")
        .skip(1)
        .filter_map(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect()
}

/// Node lists a message gives after "host node(s) " or "host nodes ".
fn host_node_lists(message: &str) -> Vec<CpuSet> {
    let mut out = Vec::new();
    for marker in ["host node(s) ", "host nodes "] {
        for rest in message.split(marker).skip(1) {
            let token: String = rest.chars().take_while(|c| c.is_ascii_digit() || *c == ',' || *c == '-').collect();
            if let Ok(set) = CpuSet::parse_list(token.trim_end_matches([',', '-'])) {
                out.push(set);
            }
        }
    }
    out
}

/// Every domain libvirt accepts reads in lint too, and lint runs over
/// all of them on both hosts; the findings on each file agree about
/// where its cells and memory are: every finding that says where carries
/// the one layout of its VM, cell counts match that layout, and the nodes
/// huge pages are wanted on are nodes the layout puts memory on.
#[test]
fn findings_on_libvirts_domains_agree_about_where_cells_and_memory_are() {
    let (files, refused) = files("accepted");
    assert!(refused.is_empty(), "{} valid domains refused:\n{}", refused.len(), refused.join("\n"));
    for (host_name, host) in hosts() {
        let found = lint(&files, &host);
        let mut by_file: std::collections::BTreeMap<&str, Vec<&Finding>> = Default::default();
        for f in &found {
            by_file.entry(f.file.as_str()).or_default().push(f);
        }
        for (file, findings) in by_file {
            let layouts: Vec<&Layout> = findings.iter().filter_map(|f| f.layout.as_ref()).collect();
            if let Some(first) = layouts.first() {
                assert!(
                    layouts.iter().all(|l| l == first),
                    "{host_name}: {file}: findings read different layouts: {layouts:#?}"
                );
            }
            let host_ids: CpuSet = host.nodes().iter().map(|n| n.id.0).collect();
            for f in &findings {
                // Only unknown-reference speaks of nodes the host lacks;
                // every other finding places memory on nodes that exist.
                if f.rule != "unknown-reference" {
                    for set in host_node_lists(&f.message) {
                        assert!(
                            set.is_subset(&host_ids),
                            "{host_name}: {file}: {} names nodes the host lacks: {}",
                            f.rule,
                            f.message
                        );
                    }
                }
                let Some(layout) = &f.layout else { continue };
                if let Some((c, k)) = cells_on_nodes(&f.message) {
                    assert_eq!(
                        (c, k),
                        (layout.cpu_cells(), layout.span),
                        "{host_name}: {file}: {}: {} disagrees with the layout {layout:#?}",
                        f.rule,
                        f.message
                    );
                    assert!(
                        k as usize <= host.nodes().len(),
                        "{host_name}: {file}: more host nodes than the host has: {}",
                        f.message
                    );
                }
                if f.rule == "hugepages-missing" {
                    let named = named_nodes(&f.message);
                    assert!(
                        named.is_subset(&layout.nodes()),
                        "{host_name}: {file}: huge pages wanted on nodes {named} the layout puts no memory on ({}): {layout:#?}",
                        f.message
                    );
                }
            }
        }
    }
}

/// The cases issue 52 found, each on the file it named.
#[test]
fn the_files_issue_52_named_are_read_as_libvirt_reads_them() {
    let (files, _) = files("accepted");
    let get = |n: &str| files.iter().find(|f| f.name == n).unwrap_or_else(|| panic!("{n}")).clone();
    let hosts = hosts();
    let (intel, corona) = (&hosts[0].1, &hosts[1].1);
    for host in [intel, corona] {
        // placement='auto' drops the nodeset: no binding to find remote
        // or unknown.
        let f = lint(&[get("numatune-auto-nodeset-invalid.xml")], host);
        assert!(f.iter().all(|f| f.rule != "memory-binding-remote" && f.rule != "unknown-reference"), "{f:#?}");
        // cell 3 bound to node 3 beside cells bound to 0-3: the cells are
        // on 4 host nodes, one per node, not 4 on one.
        for name in ["hugepages-shared.xml", "hugepages-memaccess.xml"] {
            let f = lint(&[get(name)], host);
            assert!(f.iter().all(|f| f.rule != "guest-cells-per-node"), "{name}: {f:#?}");
        }
    }
    // A 2-node host: the bindings name nodes 0-3, of which two exist.
    let f = lint(&[get("numatune-memnode.xml")], intel);
    for finding in f.iter().filter(|f| f.rule == "guest-cells-uneven") {
        let (_, k) = cells_on_nodes(&finding.message).expect("counts");
        assert!(k <= 2, "{}", finding.message);
    }
    // Memory-only cells are a tier of their own, not cells sharing memory.
    let f = lint(&[get("numatune-hmat.xml")], corona);
    assert!(f.iter().any(|f| f.rule == "guest-cells-cpuless"), "{f:#?}");
    assert!(f.iter().filter(|f| f.rule == "guest-cells-per-node").all(|f| !f.message.starts_with("6 ")), "{f:#?}");
}

/// A DIMM whose nodemask names host nodes the host lacks is an unknown
/// reference; one whose nodes are away from its cell's vCPUs is remote.
#[test]
fn memory_device_node_masks_are_checked_against_the_host() {
    let hosts = hosts();
    let intel = &hosts[0].1;
    let xml = |mask: &str| {
        format!(
            "<domain type='kvm'><name>dimm</name><memory unit='GiB'>6</memory><vcpu>2</vcpu>\
<cputune><vcpupin vcpu='0' cpuset='0'/><vcpupin vcpu='1' cpuset='1'/></cputune>\
<cpu><numa><cell id='0' cpus='0-1' memory='4' unit='GiB'/></numa></cpu>\
<devices><memory model='dimm'><source><nodemask>{mask}</nodemask></source>\
<target><size unit='GiB'>2</size><node>0</node></target></memory></devices></domain>"
        )
    };
    let lint_one = |mask: &str| {
        let f = parse_file("dimm.xml", xml(mask).as_bytes()).expect("reads");
        lint(&[f], intel)
    };
    let cpu0_node = intel.nodes().iter().find(|n| n.cpus.contains(0)).map(|n| n.id.0).expect("cpu 0");
    let other = intel.nodes().iter().map(|n| n.id.0).find(|&id| id != cpu0_node).expect("2 nodes");
    assert!(lint_one("7").iter().any(|f| f.rule == "unknown-reference" && f.message.contains("memory device")));
    assert!(lint_one(&other.to_string())
        .iter()
        .any(|f| f.rule == "memory-binding-remote" && f.message.contains("memory device")));
    assert!(!lint_one(&cpu0_node.to_string()).iter().any(|f| f.message.contains("memory device")));
}
