//! Parsers on real kernel output: `numa_maps` captured from processes on
//! a one-node host and in a two-node guest (Debian 6.1 kernel under QEMU)
//! running `numactl` + `memhog` with interleave, bind, prefer and local
//! policies, and hugetlbfs-backed memory; thread `stat`, `status` and the
//! command lines of real QEMU processes.

use numaplace_observe::numa_maps::{self, Backing, Policy};
use numaplace_observe::procfs;
use std::collections::BTreeMap;

fn data(rel: &str) -> String {
    let path = format!("{}/tests/data/{rel}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn maps(rel: &str) -> Vec<numa_maps::Mapping> {
    numa_maps::parse(&data(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn per_node(rel: &str) -> BTreeMap<u32, u64> {
    numa_maps::bytes_per_node(&maps(rel))
}

#[test]
fn bind_policy_puts_the_memory_on_the_bound_node() {
    // `numactl --membind=1 --cpunodebind=0 memhog 8m` in the guest.
    let m = maps("guest-a/proc/101/numa_maps");
    assert_eq!(m.len(), 27);
    assert!(m.iter().all(|m| m.policy == Policy::Bind { nodes: vec![1] }));
    let big = m.iter().find(|m| m.anon_pages == 2050).expect("the 8 MiB buffer");
    assert_eq!(big.pages, BTreeMap::from([(1, 2050)]));
    assert_eq!(big.page_size, 4096);
    // Shared library pages were faulted in earlier by other processes on
    // node 0; everything the process touched itself is on node 1.
    assert_eq!(per_node("guest-a/proc/101/numa_maps"), BTreeMap::from([(0, 1_499_136), (1, 8_511_488)]));
}

#[test]
fn interleave_spreads_pages_over_both_nodes() {
    let m = maps("guest-a/proc/100/numa_maps");
    assert!(m.iter().all(|m| m.policy == Policy::Interleave { nodes: vec![0, 1] }));
    let big = m.iter().max_by_key(|m| m.anon_pages).expect("buffer");
    assert_eq!(big.pages, BTreeMap::from([(0, 526), (1, 527)]));
    let heap = m.iter().find(|m| m.backing == Backing::Heap).expect("heap");
    assert_eq!(heap.pages, BTreeMap::from([(0, 3), (1, 2)]));
}

#[test]
fn huge_page_counts_are_in_huge_pages() {
    // memhog on a hugetlbfs file with prefer:1: N1=4 means four 2 MiB pages.
    let m = maps("guest-b/proc/105/numa_maps");
    let huge: Vec<_> = m.iter().filter(|m| m.huge).collect();
    assert_eq!(huge.len(), 1);
    assert_eq!(huge[0].page_size, 2 << 20);
    assert_eq!(huge[0].pages, BTreeMap::from([(1, 4)]));
    assert_eq!(huge[0].backing, Backing::File("/mnt/huge/h1".into()));
    assert_eq!(huge[0].policy, Policy::Prefer { nodes: vec![1] });
    assert_eq!(huge[0].bytes_per_node().collect::<Vec<_>>(), vec![(1, 8 << 20)]);
    // Interleaved huge pages: one 2 MiB page on each node.
    let m = maps("guest-b/proc/106/numa_maps");
    let huge = m.iter().find(|m| m.huge).expect("huge mapping");
    assert_eq!(huge.policy, Policy::Interleave { nodes: vec![0, 1] });
    assert_eq!(huge.bytes_per_node().collect::<Vec<_>>(), vec![(0, 2 << 20), (1, 2 << 20)]);
}

#[test]
fn local_prefer_and_default_policies() {
    assert!(maps("guest-b/proc/103/numa_maps").iter().all(|m| m.policy == Policy::Local));
    assert!(maps("guest-b/proc/104/numa_maps").iter().all(|m| m.policy == Policy::Prefer { nodes: vec![1] }));
    let bash = maps("host/host-bash.numa_maps");
    assert!(bash.iter().all(|m| m.policy == Policy::Default));
    assert!(bash.iter().any(|m| m.backing == Backing::Stack));
    assert_eq!(per_node("host/host-bash.numa_maps"), BTreeMap::from([(0, 4_067_328)]));
    // One-node host: numactl policies name node 0 only.
    assert!(maps("host/host-bind.numa_maps").iter().all(|m| m.policy == Policy::Bind { nodes: vec![0] }));
    assert!(maps("host/host-interleave.numa_maps").iter().all(|m| m.policy == Policy::Interleave { nodes: vec![0] }));
    assert!(maps("host/host-prefer.numa_maps").iter().all(|m| m.policy == Policy::Prefer { nodes: vec![0] }));
}

#[test]
fn mappings_without_resident_pages_have_no_counts() {
    let m = maps("host/host-interleave.numa_maps");
    let empty: Vec<_> = m.iter().filter(|m| m.pages.is_empty()).collect();
    assert!(!empty.is_empty());
    assert!(empty.iter().all(|m| m.page_size == 0));
}

#[test]
fn qemu_process_memory_and_threads() {
    // A real QEMU process on this host (TCG, 2 x 256 MiB guest nodes).
    let m = maps("host-qemu/proc/32218/numa_maps");
    assert_eq!(m.len(), 347);
    assert_eq!(numa_maps::bytes_per_node(&m), BTreeMap::from([(0, 208_822_272)]));
    let args = procfs::split_cmdline(data("host-qemu/proc/32218/cmdline").as_bytes());
    let q = procfs::qemu_info(&args).expect("a QEMU process");
    assert_eq!(q.name.as_deref(), Some("app3"));
    assert_eq!(q.memory_bytes, Some(512 << 20));
    let q = procfs::qemu_info(&procfs::split_cmdline(data("host-qemu/proc/31885/cmdline").as_bytes())).expect("qemu");
    assert_eq!(q.name.as_deref(), Some("web2"));
    let st = procfs::parse_task_stat(&data("host-qemu/proc/32218/task/32230/stat")).expect("stat");
    assert_eq!(st.comm, "CPU 0/TCG");
    assert!(procfs::is_vcpu_thread(&st.comm));
    assert_eq!(st.processor, 0);
}

#[test]
fn status_restrictions() {
    let s = procfs::parse_status(&data("guest-a/proc/101/status")).expect("status");
    assert_eq!(s.name, "memhog");
    assert_eq!(s.cpus_allowed.to_list(), "0");
    assert_eq!(s.mems_allowed.to_list(), "0-1");
    let s = procfs::parse_status(&data("host/host-bind.status")).expect("status");
    assert_eq!((s.cpus_allowed.to_list().as_str(), s.mems_allowed.to_list().as_str()), ("0-1", "0"));
}

#[test]
fn maps_ranges_line_up_with_numa_maps() {
    let ranges = procfs::parse_maps(&data("guest-a/proc/101/maps")).expect("maps");
    let m = maps("guest-a/proc/101/numa_maps");
    assert_eq!(ranges.len(), m.len());
    for mapping in &m {
        assert!(ranges.iter().any(|r| r.start == mapping.start), "{:x}", mapping.start);
    }
}
