//! The kernel-level mover for processes libvirt does not hold
//! (`act::Cgroup`), against a fake kernel that keeps cgroup v2's rules:
//! a thread's mask must fit its cgroup's `cpuset.cpus`, `move_pages`
//! refuses a node outside the cgroup's `cpuset.mems`, and narrowing
//! `cpuset.mems` migrates the pages outside it at once (unpaced). The
//! real kernel's behaviour is proven in a multi-node guest by
//! `crates/cli/tests/observe_guest.rs`.

use numaplace_observe::act::{self, Affinity, Cgroup, System};
use numaplace_observe::host::{Pins, Target};
use numaplace_topo::CpuSet;
use std::collections::BTreeMap;
use std::time::Duration;

const PAGE: u64 = 4096;
const BASE: u64 = 0x1000_0000;

fn set(s: &str) -> CpuSet {
    CpuSet::parse_list(s).expect("set")
}

/// One process (threads 10 and 11) in cgroup `/vm`; `other` is a thread
/// of another process that may share it.
struct Kernel {
    masks: BTreeMap<u32, CpuSet>,
    /// cgroup -> file -> value.
    files: BTreeMap<String, BTreeMap<&'static str, String>>,
    member: BTreeMap<u32, String>,
    pages: BTreeMap<u64, u32>,
    /// Pages marked for a NUMA-hinting fault: resident, but `move_pages`
    /// reports them absent (as the 6.1 guest kernel does).
    hinted: std::collections::BTreeSet<u64>,
    clock: Duration,
    fail_move: bool,
    /// Moves leave every other status unwritten (as the kernel does for a
    /// batch it stopped part-way).
    unreported: bool,
    /// Moves also take this many pages after the last one asked.
    overshoot: u64,
    /// When pages arrived on node 0, by the clock: (time, pages).
    arrivals: Vec<(Duration, u64)>,
    /// Every change, in order: "cpus 0-1", "mask 10 0-1", "mems 0-1",
    /// "move 256" (pages by move_pages), "cgroup-migrate 3" (pages the
    /// kernel moved because cpuset.mems shrank).
    log: Vec<String>,
}

impl Kernel {
    fn new(cpus: &str, mems: &str, pages: u64) -> Kernel {
        let group: BTreeMap<&'static str, String> = [
            ("cpuset.cpus", cpus.to_string()),
            ("cpuset.mems", mems.to_string()),
            ("cgroup.threads", "10\n11\n".into()),
        ]
        .into();
        Kernel {
            masks: [(10, set(cpus)), (11, set(cpus))].into(),
            files: [("/vm".to_string(), group)].into(),
            member: [(10, "/vm".to_string()), (11, "/vm".to_string())].into(),
            pages: (0..pages).map(|i| (BASE + i * PAGE, 1)).collect(),
            hinted: std::collections::BTreeSet::new(),
            clock: Duration::ZERO,
            fail_move: false,
            unreported: false,
            overshoot: 0,
            arrivals: Vec::new(),
            log: Vec::new(),
        }
    }
    fn file(&self, f: &str) -> String {
        self.files["/vm"][f].clone()
    }
    fn on(&self, node: u32) -> usize {
        self.pages.values().filter(|n| **n == node).count()
    }
    fn position(&self, prefix: &str) -> usize {
        self.log.iter().position(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no {prefix} in {:?}", self.log))
    }
}

fn einval() -> std::io::Error {
    std::io::Error::from_raw_os_error(libc::EINVAL)
}

impl System for Kernel {
    fn tids(&mut self, _: u32) -> std::io::Result<Vec<u32>> {
        Ok(vec![10, 11])
    }
    fn get_affinity(&mut self, tid: u32) -> std::io::Result<CpuSet> {
        Ok(self.masks[&tid].clone())
    }
    fn set_affinity(&mut self, tid: u32, cpus: &CpuSet) -> std::io::Result<()> {
        // sched_setaffinity keeps a mask inside the cgroup's CPUs.
        if !cpus.is_subset(&set(&self.file("cpuset.cpus"))) {
            return Err(einval());
        }
        self.log.push(format!("mask {tid} {}", cpus.to_list()));
        self.masks.insert(tid, cpus.clone());
        Ok(())
    }
    fn maps(&mut self, _: u32) -> std::io::Result<(String, String)> {
        let n = self.pages.len() as u64;
        let mut per: BTreeMap<u32, u64> = BTreeMap::new();
        for node in self.pages.values() {
            *per.entry(*node).or_default() += 1;
        }
        let counts: Vec<String> = per.iter().map(|(node, c)| format!("N{node}={c}")).collect();
        Ok((
            format!("{BASE:x}-{:x} rw-p 00000000 00:00 0\n", BASE + n * PAGE),
            format!("{BASE:x} default anon={n} {} kernelpagesize_kB=4\n", counts.join(" ")),
        ))
    }
    fn move_pages(&mut self, _: u32, pages: &[u64], node: Option<u32>) -> std::io::Result<Vec<i32>> {
        if let Some(to) = node {
            if self.fail_move {
                return Err(std::io::Error::from_raw_os_error(libc::ENOMEM));
            }
            // The kernel refuses a node outside the cgroup's memory nodes.
            if !set(&self.file("cpuset.mems")).contains(to) {
                return Err(std::io::Error::from_raw_os_error(libc::EACCES));
            }
            self.log.push(format!("move {}", pages.len()));
        }
        let unreported = node.is_some() && self.unreported;
        let before = self.on(0) as u64;
        if let (Some(to), Some(last)) = (node, pages.last()) {
            for i in 1..=self.overshoot {
                if let Some(at) = self.pages.get_mut(&(last + i * PAGE)) {
                    *at = to;
                }
            }
        }
        let out: Vec<i32> = pages
            .iter()
            .enumerate()
            .map(|(i, a)| if unreported && i % 2 == 1 { (a, true) } else { (a, false) })
            .map(|(a, blank)| match (self.pages.get_mut(a).filter(|_| !self.hinted.contains(a)), node) {
                (Some(at), Some(to)) if blank => {
                    *at = to;
                    i32::MIN
                }
                (Some(at), Some(to)) => {
                    *at = to;
                    to as i32
                }
                (Some(at), None) => *at as i32,
                (None, _) => -libc::ENOENT,
            })
            .collect();
        let arrived = self.on(0) as u64 - before;
        if arrived > 0 {
            self.arrivals.push((self.clock, arrived));
        }
        Ok(out)
    }
    fn now(&mut self) -> Duration {
        self.clock
    }
    fn sleep(&mut self, d: Duration) {
        self.clock += d;
    }
    fn cgroup_of(&mut self, _: u32, tid: u32) -> std::io::Result<Option<String>> {
        Ok(self.member.get(&tid).cloned())
    }
    fn cgroup_read(&mut self, cgroup: &str, file: &str) -> std::io::Result<String> {
        self.files
            .get(cgroup)
            .and_then(|g| g.get(file))
            .cloned()
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
    }
    fn cgroup_write(&mut self, cgroup: &str, file: &str, value: &str) -> std::io::Result<()> {
        let key = match file {
            "cpuset.cpus" => "cpuset.cpus",
            "cpuset.mems" => "cpuset.mems",
            _ => return Err(einval()),
        };
        if key == "cpuset.cpus" {
            // The kernel fits every thread's mask into the new CPUs.
            for m in self.masks.values_mut() {
                *m = m.intersection(&set(value));
                if m.is_empty() {
                    *m = set(value);
                }
            }
            self.log.push(format!("cpus {value}"));
        } else {
            // cgroup v2 migrates the pages outside the new memory nodes.
            let to = set(value).iter().next().ok_or_else(einval)?;
            let mut moved = 0;
            for at in self.pages.values_mut() {
                if !set(value).contains(*at) {
                    *at = to;
                    moved += 1;
                }
            }
            self.log.push(format!("mems {value}"));
            self.log.push(format!("cgroup-migrate {moved}"));
        }
        self.files.get_mut(cgroup).ok_or_else(einval)?.insert(key, value.to_string());
        Ok(())
    }
}

fn to_node0(before: &str) -> Target {
    Target { before: Pins::Floating(set(before)), after: Pins::Floating(set("0-1")) }
}

#[test]
fn a_process_confined_by_its_cgroup_moves_through_its_cpuset_at_the_rate() {
    // Like a domain pinned and bound by libvirt: CPU 2 and node 1.
    let mut k = Kernel::new("2", "1", 4096); // 16 MiB
    let rate = 4 << 20;
    let out = act::move_process(&mut Cgroup::default(), &mut k, 7, 0, &to_node0("2"), rate);
    assert_eq!(out.error, None, "{:?}", k.log);
    assert_eq!((k.file("cpuset.cpus").as_str(), k.file("cpuset.mems").as_str()), ("0-1", "0"));
    assert!(k.masks.values().all(|m| m.to_list() == "0-1"), "{:?}", k.masks);
    assert_eq!(k.on(0), 4096);
    // Every page went through the paced move_pages: the memory nodes were
    // widened first (moving nothing) and narrowed only afterwards (moving
    // what was left: nothing).
    assert_eq!(out.bytes_moved, 16 << 20);
    assert!(out.migrate_seconds >= 4.0 - 0.01, "16 MiB at 4 MiB/s takes 4 s: {out:?}");
    assert!(k.position("cpus 0-1") < k.position("mask "), "the cgroup before the threads: {:?}", k.log);
    assert!(k.position("mems 0-1") < k.position("move "), "{:?}", k.log);
    assert_eq!(k.log[k.position("mems 0-1") + 1], "cgroup-migrate 0");
    assert_eq!(k.log[k.log.len() - 2..], ["mems 0".to_string(), "cgroup-migrate 0".to_string()]);
}

#[test]
fn threads_alone_cannot_leave_their_cgroup() {
    // What balance did before it wrote cgroups: the kernel refuses the
    // new mask, and nothing moves.
    let mut k = Kernel::new("2", "1", 256);
    let out = act::move_process(&mut Affinity::default(), &mut k, 7, 0, &to_node0("2"), 1 << 20);
    assert!(out.error.as_deref().is_some_and(|e| e.starts_with("pinning threads")), "{out:?}");
    assert_eq!(k.on(1), 256);
}

#[test]
fn a_cgroup_shared_with_another_process_is_never_changed() {
    let mut k = Kernel::new("2", "1", 256);
    k.files.get_mut("/vm").expect("vm").insert("cgroup.threads", "10\n11\n99\n".into());
    let out = act::move_process(&mut Cgroup::default(), &mut k, 7, 0, &to_node0("2"), 1 << 20);
    let e = out.error.expect("refused");
    assert!(e.contains("cgroup /vm holds other processes too") && e.contains("allows only CPUs 2"), "{e}");
    assert!(out.restored);
    assert!(k.log.is_empty(), "nothing written: {:?}", k.log);
    assert_eq!(k.on(1), 256);
}

#[test]
fn a_failed_migration_puts_the_cgroup_and_the_masks_back() {
    let mut k = Kernel::new("2", "1", 256);
    k.fail_move = true;
    let out = act::move_process(&mut Cgroup::default(), &mut k, 7, 0, &to_node0("2"), 1 << 20);
    assert!(out.error.as_deref().is_some_and(|e| e.starts_with("migrating pages")), "{out:?}");
    assert!(out.restored);
    assert_eq!((k.file("cpuset.cpus").as_str(), k.file("cpuset.mems").as_str()), ("2", "1"));
    assert!(k.masks.values().all(|m| m.to_list() == "2"), "{:?}", k.masks);
}

#[test]
fn a_dedicated_target_is_refused_before_anything_changes() {
    let mut k = Kernel::new("2-3", "1", 256);
    let target = Target {
        before: Pins::Dedicated { vcpus: vec![(0, 2), (1, 3)], emulator: set("2") },
        after: Pins::Dedicated { vcpus: vec![(0, 0), (1, 1)], emulator: set("0") },
    };
    let out = act::move_process(&mut Cgroup::default(), &mut k, 7, 0, &target, 1 << 20);
    assert!(out.error.as_deref().is_some_and(|e| e.contains("through libvirt")), "{out:?}");
    assert!(k.log.is_empty(), "{:?}", k.log);
    assert_eq!(k.file("cpuset.cpus"), "2-3");
}

#[test]
fn without_cgroups_it_pins_as_affinity_does() {
    // No cgroup v2 (the default `System` methods): thread masks only.
    let mut k = Kernel::new("0-3", "0-1", 256);
    k.member.clear();
    let out = act::move_process(&mut Cgroup::default(), &mut k, 7, 0, &to_node0("0-3"), 0);
    assert_eq!(out.error, None);
    assert_eq!(out.threads_pinned, 2);
    assert_eq!((k.file("cpuset.cpus").as_str(), k.file("cpuset.mems").as_str()), ("0-3", "0-1"));
    assert_eq!(k.on(0), 256);
}

#[test]
fn the_cgroup_v2_mount_and_a_thread_s_path_are_read_from_the_kernel_s_text() {
    let mountinfo = "22 1 0:21 / /sys rw - sysfs sysfs rw\n\
                     30 22 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
    assert_eq!(act::cgroup2_mount(mountinfo).as_deref(), Some("/sys/fs/cgroup"));
    assert_eq!(act::cgroup2_mount("22 1 0:21 / /sys rw - sysfs sysfs rw\n"), None);
    assert_eq!(act::cgroup_v2_path("0::/machine.slice/vm1\n").as_deref(), Some("/machine.slice/vm1"));
    assert_eq!(act::cgroup_v2_path("12:cpuset:/\n0::/\n"), None);
    assert_eq!(act::cgroup_v2_path("4:memory:/x\n"), None, "cgroup v1 only");
}

#[test]
fn pages_move_pages_cannot_see_are_left_and_the_memory_nodes_stay_widened() {
    // 4 MiB of 16 marked for NUMA-hinting faults: move_pages skips them;
    // narrowing the cgroup's nodes would make the kernel move them all at
    // once, above the rate, so the nodes stay widened and the pages are
    // counted as not moved.
    let mut k = Kernel::new("2", "1", 4096);
    k.hinted = (0..1024).map(|i| BASE + i * PAGE).collect();
    let out = act::move_process(&mut Cgroup::default(), &mut k, 7, 0, &to_node0("2"), 4 << 20);
    assert_eq!(out.error, None, "{:?}", k.log);
    assert_eq!(out.bytes_moved, 12 << 20);
    assert_eq!(out.pages_not_moved, 1024);
    assert_eq!(k.file("cpuset.mems"), "0-1");
    assert!(k.log.iter().all(|l| !l.starts_with("cgroup-migrate ") || l == "cgroup-migrate 0"), "{:?}", k.log);
    assert_eq!((k.on(0), k.on(1)), (3072, 1024));
    // One batch (rate / 8 = 512 KiB) left behind may still go at once.
    let mut k = Kernel::new("2", "1", 4096);
    k.hinted = (0..128).map(|i| BASE + i * PAGE).collect();
    let out = act::move_process(&mut Cgroup::default(), &mut k, 7, 0, &to_node0("2"), 4 << 20);
    assert_eq!(out.error, None);
    assert_eq!(k.file("cpuset.mems"), "0");
    assert_eq!(k.log.last().map(String::as_str), Some("cgroup-migrate 128"));
    assert_eq!(k.on(0), 4096);
}

#[test]
fn pages_moved_without_a_status_still_count_against_the_rate() {
    let mut k = Kernel::new("2", "1", 4096);
    k.unreported = true;
    let out = act::move_process(&mut Cgroup::default(), &mut k, 7, 0, &to_node0("2"), 4 << 20);
    assert_eq!(out.error, None);
    assert_eq!(out.bytes_moved, 16 << 20, "{out:?}");
    assert!(out.migrate_seconds >= 4.0 - 0.01, "{out:?}");
}

#[test]
fn pages_the_kernel_moves_beyond_those_asked_count_against_the_rate() {
    // Each call also moves the next 200 pages (as the four-node guest's
    // kernel did): the pacing counts them, so over any window the pages
    // that arrived fit the rate plus what one call moves (a batch and
    // the kernel's extra).
    let mut k = Kernel::new("2", "1", 4096); // 16 MiB
    k.overshoot = 200;
    let rate = 4u64 << 20;
    let out = act::move_process(&mut Cgroup::default(), &mut k, 7, 0, &to_node0("2"), rate);
    assert_eq!(out.error, None);
    assert_eq!(k.on(0), 4096);
    assert_eq!(out.bytes_moved, 16 << 20, "{out:?}");
    assert!(out.migrate_seconds >= 4.0 - 0.01, "{out:?}");
    let batch = rate / 8 + 200 * PAGE;
    for (i, (t0, _)) in k.arrivals.iter().enumerate() {
        let mut total = 0;
        for (t1, pages) in &k.arrivals[i..] {
            total += pages * PAGE;
            let window = (*t1 - *t0).as_secs_f64();
            assert!(total as f64 <= rate as f64 * window + batch as f64, "{total} bytes within {window} s");
        }
    }
}
