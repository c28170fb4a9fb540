//! The sampler on recorded trees: esxtop figures for a process whose
//! memory is bound to the node it does not run on, real QEMU processes
//! recognised as VMs, home-node changes counted, and trees that make
//! reading fail.

use numaplace_observe::sample::{Kind, Options, Sampler};
use numaplace_observe::FsSource;
use std::path::{Path, PathBuf};

fn data(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(rel)
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir").flatten() {
        let dst = to.join(e.file_name());
        if e.path().is_dir() {
            copy_tree(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), &dst).expect("copy");
        }
    }
}

fn scratch(name: &str, from: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("observe-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    copy_tree(&data(from), &dir);
    dir
}

fn all() -> Options {
    Options { all: true, ..Options::default() }
}

#[test]
fn memory_bound_to_the_other_node_is_remote() {
    let mut s = Sampler::new(FsSource::new(data("guest-a")), all());
    let snap = s.sample().expect("sample");
    assert!(snap.numa);
    assert_eq!(snap.nodes.len(), 2);
    assert_eq!(snap.nodes[0].cpus, "0");
    assert_eq!(snap.nodes[1].memory_total_bytes, 257_448 * 1024);
    let p = snap.processes.iter().find(|p| p.pid == 101).expect("pid 101");
    assert_eq!(p.kind, Kind::Process);
    assert_eq!(p.name, "memhog");
    assert_eq!(p.home_nodes, vec![0], "it runs on CPU 0 (--cpunodebind=0)");
    assert_eq!(p.memory_per_node.get(&1), Some(&8_511_488));
    assert_eq!(p.local_bytes, 1_499_136);
    assert_eq!(p.remote_bytes, 8_511_488);
    let pct = p.local_percent.expect("has memory");
    assert!((pct - 14.975).abs() < 0.01, "{pct}");
    assert_eq!(p.policies, vec!["bind:1"]);
    assert_eq!(p.home_balance_percent, None);
}

#[test]
fn huge_pages_are_counted_in_bytes() {
    let mut s = Sampler::new(FsSource::new(data("guest-b")), all());
    let snap = s.sample().expect("sample");
    let p = snap.processes.iter().find(|p| p.pid == 105).expect("pid 105");
    assert_eq!(p.huge_bytes, 8 << 20);
    assert_eq!(p.memory_bytes, 1_429_504 + 8_511_488);
}

#[test]
fn qemu_processes_are_vms_with_names_and_vcpus() {
    let mut s = Sampler::new(FsSource::new(data("host-qemu")), Options::default());
    let snap = s.sample().expect("sample");
    let names: Vec<(&str, u32, u32)> =
        snap.processes.iter().map(|p| (p.name.as_str(), p.threads, p.counted_threads)).collect();
    // db1 has one TCG thread for all vCPUs, web2 names no threads (so all
    // count), app3 has two named vCPU threads.
    assert_eq!(names, vec![("db1", 3, 1), ("web2", 4, 4), ("app3", 4, 2)]);
    for p in &snap.processes {
        assert_eq!(p.kind, Kind::Vm);
        assert_eq!(p.configured_memory_bytes, Some(512 << 20));
        assert_eq!(p.home_nodes, vec![0]);
        assert_eq!(p.local_percent, Some(100.0));
    }
    // Without --all, the non-QEMU processes of a tree are not listed.
    let mut s = Sampler::new(FsSource::new(data("guest-a")), Options::default());
    assert!(s.sample().expect("sample").processes.is_empty());
}

fn set_cpu(stat: &Path, cpu: u32) {
    let text = std::fs::read_to_string(stat).expect("stat");
    let close = text.rfind(')').expect(")");
    let mut fields: Vec<String> = text[close + 1..].split_whitespace().map(String::from).collect();
    fields[36] = cpu.to_string();
    std::fs::write(stat, format!("{} {}\n", &text[..=close], fields.join(" "))).expect("write");
}

#[test]
fn home_changes_are_counted_once_they_persist() {
    let root = scratch("nmig", "guest-a");
    let stat = root.join("proc/101/task/101/stat");
    let mut s = Sampler::new(FsSource::new(&root), Options { all: true, pids: vec![101], window: 3 });
    let home = |s: &mut Sampler<FsSource>| {
        let snap = s.sample().expect("sample");
        let p = snap.processes.first().cloned().expect("101");
        (p.home_nodes, p.home_migrations)
    };
    assert_eq!(home(&mut s), (vec![0], 0));
    set_cpu(&stat, 1);
    // One sample on node 1 out of two: both nodes hold half.
    assert_eq!(home(&mut s), (vec![0, 1], 1));
    // Still a third of the window on node 0.
    assert_eq!(home(&mut s), (vec![0, 1], 1));
    assert_eq!(home(&mut s), (vec![1], 2));
    let snap = s.sample().expect("sample");
    let p = &snap.processes[0];
    assert!(p.local_percent.expect("memory") > 85.0, "memory is on node 1, now its home");
}

#[test]
fn a_process_homed_on_two_nodes_reports_balance() {
    let root = scratch("wide", "guest-a");
    // Give pid 100 (interleaved memory) a second thread on the other node.
    let task = root.join("proc/100/task");
    copy_tree(&task.join("100"), &task.join("1000"));
    set_cpu(&task.join("1000/stat"), 0);
    let mut s = Sampler::new(FsSource::new(&root), Options { all: true, pids: vec![100], window: 3 });
    let snap = s.sample().expect("sample");
    let p = &snap.processes[0];
    assert_eq!(p.home_nodes, vec![0, 1]);
    assert_eq!(p.local_percent, Some(100.0));
    let bal = p.home_balance_percent.expect("balance");
    assert!((bal - 2_220_032.0 * 100.0 / 3_743_744.0).abs() < 0.01, "{bal}");
}

#[test]
fn vanished_and_unreadable_processes_are_counted_not_fatal() {
    let root = scratch("vanish", "guest-a");
    std::fs::remove_file(root.join("proc/100/numa_maps")).expect("rm");
    std::fs::write(root.join("proc/102/numa_maps"), "garbage line\n").expect("write");
    let mut s = Sampler::new(FsSource::new(&root), all());
    let snap = s.sample().expect("sample");
    assert_eq!(snap.skipped.vanished, 1);
    assert_eq!(snap.skipped.errors.len(), 1);
    assert!(snap.skipped.errors[0].contains("numa_maps line 1"), "{}", snap.skipped.errors[0]);
    assert_eq!(snap.processes.iter().map(|p| p.pid).collect::<Vec<_>>(), vec![101, 103]);
}

#[test]
fn a_kernel_without_numa_is_one_node() {
    let root = scratch("nonuma", "host-qemu");
    std::fs::remove_dir_all(root.join("sys")).expect("rm sys");
    let mut s = Sampler::new(FsSource::new(&root), Options::default());
    let snap = s.sample().expect("sample");
    assert!(!snap.numa);
    assert_eq!(snap.nodes.len(), 1);
    assert_eq!(snap.nodes[0].cpus, "0-1");
    assert!(snap.nodes[0].memory_total_bytes > 0);
    assert_eq!(snap.processes.len(), 3);
    // Such kernels have no numa_maps: memory falls back to VmRSS on node 0.
    for pid in [31386, 31885, 32218] {
        std::fs::remove_file(root.join(format!("proc/{pid}/numa_maps"))).expect("rm");
    }
    let snap = s.sample().expect("sample");
    assert_eq!(snap.skipped.vanished, 0);
    let db1 = snap.processes.iter().find(|p| p.name == "db1").expect("db1");
    assert_eq!(db1.memory_per_node.get(&0), Some(&db1.memory_bytes));
    assert!(db1.memory_bytes > 100 << 20);
    assert_eq!(db1.local_percent, Some(100.0));
    let text = numaplace_observe::text::render(&snap, numaplace_observe::text::SortKey::Pid);
    assert!(text.starts_with("note: this kernel exposes no NUMA nodes"));
}

#[test]
fn busy_cpus_come_from_the_difference_of_two_samples() {
    let root = scratch("busy", "guest-a");
    let mut s = Sampler::new(FsSource::new(&root), all());
    assert_eq!(s.sample().expect("first").nodes[0].busy_cpus, None);
    let stat = std::fs::read_to_string(root.join("proc/stat")).expect("stat");
    // Add 100 busy (user) ticks to cpu1 and 100 idle ticks to cpu0.
    let bumped: Vec<String> = stat
        .lines()
        .map(|l| {
            let mut f: Vec<String> = l.split_whitespace().map(String::from).collect();
            let add = |f: &mut Vec<String>, i: usize| f[i] = (f[i].parse::<u64>().expect("n") + 100).to_string();
            match f.first().map(String::as_str) {
                Some("cpu0") => add(&mut f, 4),
                Some("cpu1") => add(&mut f, 1),
                _ => {}
            }
            f.join(" ")
        })
        .collect();
    std::fs::write(root.join("proc/stat"), bumped.join("\n")).expect("write");
    let snap = s.sample().expect("second");
    assert_eq!(snap.nodes[0].busy_cpus, Some(0.0));
    assert_eq!(snap.nodes[1].busy_cpus, Some(1.0));
}
