//! The balancer's decisions (hysteresis, the node scorer, the move limit)
//! on a recorded two-node guest, and the mover's pacing and rollback
//! against a fake kernel.

use numaplace_observe::act::{self, Affinity, System, Via};
use numaplace_observe::balance::{self, Balancer, Config, Event, Exclusion, SkipReason};
use numaplace_observe::host::{Host, Pins, Target};
use numaplace_observe::sample::{Options, Sampler, Snapshot};
use numaplace_observe::FsSource;
use numaplace_plan::HostState;
use numaplace_topo::{CpuSet, Topology};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

fn guest_a() -> FsSource {
    FsSource::new(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/guest-a"))
}

/// The recorded guest's machine: two nodes of one CPU and 256 MiB each.
fn guest_topology() -> Topology {
    numaplace_read::read_source("2 sockets x 1 cores x 1 threads, 256MiB per node").expect("synthetic host")
}

/// The recorded guest as a move sees it: nothing reserved, no VMs.
fn host<'a>(topology: &'a Topology, source: &'a FsSource) -> Host<'a> {
    Host::new(topology, HostState::new(topology), source)
}

/// Floating from `before` to `after`.
fn floating(before: &str, after: &str) -> Target {
    let set = |s: &str| s.parse::<CpuSet>().expect("set");
    Target { before: Pins::Floating(set(before)), after: Pins::Floating(set(after)) }
}

fn snapshot() -> Snapshot {
    let mut s = Sampler::new(guest_a(), Options { all: true, pids: vec![101], window: 3 });
    let mut snap = s.sample().expect("sample");
    for n in &mut snap.nodes {
        n.busy_cpus = Some(0.1);
    }
    snap
}

fn config() -> Config {
    Config { threshold_percent: 80.0, hysteresis: 3, max_moves: 1, cooldown: 2, min_memory_bytes: 1 << 20 }
}

#[test]
fn moves_only_after_the_hysteresis_and_then_cools_down() {
    let snap = snapshot();
    let (topology, source) = (guest_topology(), guest_a());
    let mut host = host(&topology, &source);
    let mut b = Balancer::new(config());
    for n in 1..=2 {
        let ev = b.step(&snap, &mut host);
        assert!(matches!(ev.as_slice(), [Event::Watching { pid: 101, samples_below: k, .. }] if *k == n), "{ev:?}");
    }
    let ev = b.step(&snap, &mut host);
    let [Event::Decide(d)] = ev.as_slice() else { panic!("{ev:?}") };
    assert_eq!((d.pid, d.from.clone()), (101, vec![0]));
    // Both nodes have a free core; node 1 already holds the remote 8 MiB,
    // so moving the process there leaves more memory free.
    assert_eq!(d.to, 1);
    assert_eq!(d.bytes_to_move, 1_499_136);
    // numactl bound it to node 0's CPU; it will float over node 1's.
    assert_eq!(d.target, floating("0", "1"));
    b.moved(101);
    assert!(b.step(&snap, &mut host).is_empty());
    assert!(b.step(&snap, &mut host).is_empty());
    assert!(matches!(b.step(&snap, &mut host).as_slice(), [Event::Watching { samples_below: 1, .. }]));
}

#[test]
fn never_onto_a_busy_node() {
    let mut snap = snapshot();
    snap.nodes[1].busy_cpus = Some(0.9);
    let p = &snap.processes[0];
    let (topology, source) = (guest_topology(), guest_a());
    let mut host = host(&topology, &source);
    let scores = balance::score(&snap.nodes, p, &mut host);
    assert!(matches!(scores[1].excluded, Some(Exclusion::NoFreeCore { .. })), "{scores:?}");
    assert!(scores[1].excluded.as_ref().is_some_and(|r| r.to_string().contains("no free core")), "{scores:?}");
    assert_eq!(balance::choose(&scores).map(|s| s.node), Some(0));
    assert_eq!(scores[0].bytes_to_move, 8_511_488);
    // And not onto a node whose memory would run out.
    snap.nodes[0].memory_free_bytes = 10 << 20;
    let scores = balance::score(&snap.nodes, &snap.processes[0], &mut host);
    assert!(matches!(scores[0].excluded, Some(Exclusion::BelowReserve { .. })), "{scores:?}");
    assert!(scores[0].excluded.as_ref().is_some_and(|r| r.to_string().contains("reserve")), "{scores:?}");
    assert_eq!(balance::choose(&scores), None);
    let mut b = Balancer::new(Config { hysteresis: 1, ..config() });
    let ev = b.step(&snap, &mut host);
    assert!(matches!(ev.as_slice(), [Event::Skip { reason: SkipReason::NoNode, .. }]), "{ev:?}");
    assert!(matches!(ev.as_slice(), [Event::Skip { reason, .. }] if reason.to_string().contains("no node")));
}

#[test]
fn at_most_max_moves_per_round() {
    let mut snap = snapshot();
    let mut twin = snap.processes[0].clone();
    twin.pid = 202;
    snap.processes.push(twin);
    let (topology, source) = (guest_topology(), guest_a());
    let mut b = Balancer::new(Config { hysteresis: 1, ..config() });
    let ev = b.step(&snap, &mut host(&topology, &source));
    assert!(
        matches!(ev.as_slice(), [Event::Decide(_), Event::Skip { reason: SkipReason::MaxMoves { moves: 1 }, .. }]),
        "{ev:?}"
    );
    assert!(matches!(&ev[1], Event::Skip { reason, .. } if reason.to_string().contains("--max-moves")));
}

/// A fake kernel: one process, pages in a map, a virtual clock.
struct Fake {
    affinity: BTreeMap<u32, CpuSet>,
    fail_set_on: Option<u32>,
    fail_move: bool,
    pages: BTreeMap<u64, u32>,
    clock: Duration,
    moved_log: Vec<(Duration, u64)>,
}

const PAGE: u64 = 4096;

impl Fake {
    fn new(pages: u64) -> Fake {
        Fake {
            affinity: [(10, "0-1".parse().expect("set")), (11, "0-1".parse().expect("set"))].into(),
            fail_set_on: None,
            fail_move: false,
            pages: (0..pages).map(|i| (0x1000_0000 + i * PAGE, 1)).collect(),
            clock: Duration::ZERO,
            moved_log: Vec::new(),
        }
    }
}

impl System for Fake {
    fn tids(&mut self, _: u32) -> std::io::Result<Vec<u32>> {
        Ok(self.affinity.keys().copied().collect())
    }
    fn get_affinity(&mut self, tid: u32) -> std::io::Result<CpuSet> {
        Ok(self.affinity[&tid].clone())
    }
    fn set_affinity(&mut self, tid: u32, cpus: &CpuSet) -> std::io::Result<()> {
        if self.fail_set_on == Some(tid) {
            // Fails once, as when a thread is briefly unmovable.
            self.fail_set_on = None;
            return Err(std::io::Error::from_raw_os_error(libc::EPERM));
        }
        self.affinity.insert(tid, cpus.clone());
        Ok(())
    }
    fn maps(&mut self, _: u32) -> std::io::Result<(String, String)> {
        let n = self.pages.len() as u64;
        let end = 0x1000_0000 + n * PAGE;
        let mut per_node: BTreeMap<u32, u64> = BTreeMap::new();
        for node in self.pages.values() {
            *per_node.entry(*node).or_default() += 1;
        }
        let counts: Vec<String> = per_node.iter().map(|(node, c)| format!("N{node}={c}")).collect();
        Ok((
            format!("10000000-{end:x} rw-p 00000000 00:00 0\n"),
            format!("10000000 default anon={n} {} kernelpagesize_kB=4\n", counts.join(" ")),
        ))
    }
    fn move_pages(&mut self, _: u32, pages: &[u64], node: Option<u32>) -> std::io::Result<Vec<i32>> {
        if node.is_some() && self.fail_move {
            return Err(std::io::Error::from_raw_os_error(libc::ENOMEM));
        }
        let mut moved = 0;
        let out = pages
            .iter()
            .map(|a| match (self.pages.get_mut(a), node) {
                (Some(at), Some(to)) => {
                    *at = to;
                    moved += PAGE;
                    to as i32
                }
                (Some(at), None) => *at as i32,
                (None, _) => -libc::ENOENT,
            })
            .collect();
        if moved > 0 {
            self.moved_log.push((self.clock, moved));
        }
        Ok(out)
    }
    fn now(&mut self) -> Duration {
        self.clock
    }
    fn sleep(&mut self, d: Duration) {
        self.clock += d;
    }
}

#[test]
fn pages_move_at_no_more_than_the_rate() {
    let mut sys = Fake::new(16 * 1024); // 64 MiB
    let rate = 16 << 20;
    let cpus: CpuSet = "0".parse().expect("set");
    let out = act::move_process(&mut Affinity::default(), &mut sys, 7, 0, &floating("0-1", "0"), rate);
    assert_eq!(out.error, None);
    assert_eq!(out.via, Via::SchedSetaffinity);
    assert_eq!(out.threads_pinned, 2);
    assert_eq!(out.bytes_moved, 64 << 20);
    assert!(sys.pages.values().all(|n| *n == 0));
    assert!(sys.affinity.values().all(|c| c == &cpus));
    // Over any window between two batches, what moved fits the rate: a
    // batch is never followed by the next sooner than its size allows.
    for (i, (t0, _)) in sys.moved_log.iter().enumerate() {
        let mut total = 0u64;
        for (t1, bytes) in &sys.moved_log[i..] {
            assert!(total as f64 <= rate as f64 * (*t1 - *t0).as_secs_f64() + 1.0, "{total} bytes in {:?}", *t1 - *t0);
            assert!(*bytes <= rate / 8);
            total += bytes;
        }
    }
    assert!(out.migrate_seconds >= 4.0 - 0.01, "64 MiB at 16 MiB/s takes 4 s, took {}", out.migrate_seconds);
}

#[test]
fn a_failed_pin_restores_every_thread_and_moves_nothing() {
    let mut sys = Fake::new(256);
    sys.fail_set_on = Some(11);
    let out = act::move_process(&mut Affinity::default(), &mut sys, 7, 0, &floating("0-1", "0"), 1 << 20);
    assert!(out.error.as_deref().is_some_and(|e| e.starts_with("pinning threads")), "{out:?}");
    assert!(out.restored);
    assert_eq!(sys.affinity[&10].to_list(), "0-1");
    assert!(sys.pages.values().all(|n| *n == 1));
}

#[test]
fn a_dedicated_target_is_never_pinned_thread_by_thread() {
    // Which thread runs which vCPU is libvirt's to say: without it the
    // move is refused before any mask or page changes.
    let mut sys = Fake::new(256);
    let target = Target {
        before: Pins::Dedicated { vcpus: vec![(0, 0), (1, 1)], emulator: CpuSet::new() },
        after: Pins::Dedicated { vcpus: vec![(0, 1), (1, 0)], emulator: CpuSet::new() },
    };
    let out = act::move_process(&mut Affinity::default(), &mut sys, 7, 0, &target, 1 << 20);
    assert!(out.error.as_deref().is_some_and(|e| e.contains("through libvirt")), "{out:?}");
    assert!(out.restored);
    assert!(sys.affinity.values().all(|c| c.to_list() == "0-1"));
    assert!(sys.pages.values().all(|n| *n == 1));
}

#[test]
fn a_failed_migration_restores_the_cpu_masks() {
    let mut sys = Fake::new(256);
    sys.fail_move = true;
    let out = act::move_process(&mut Affinity::default(), &mut sys, 7, 0, &floating("0-1", "0"), 1 << 20);
    assert!(out.error.as_deref().is_some_and(|e| e.starts_with("migrating pages")), "{out:?}");
    assert!(out.restored);
    assert!(sys.affinity.values().all(|c| c.to_list() == "0-1"));
}

#[test]
fn a_slow_batch_earns_no_credit_for_later_ones() {
    // 2 MiB at 16 MiB/s needs 125 ms; a batch that already took 100 ms
    // waits the remaining 25 ms, one that took a second waits nothing, and
    // the next batch is paced on its own again.
    assert_eq!(act::pace(2 << 20, 16 << 20, Duration::from_millis(100)), Duration::from_millis(25));
    assert_eq!(act::pace(2 << 20, 16 << 20, Duration::from_secs(1)), Duration::ZERO);
    assert_eq!(act::pace(2 << 20, 0, Duration::ZERO), Duration::ZERO, "rate 0 means unlimited");
}

#[test]
fn carrying_out_a_decision_pins_migrates_and_reads_back() {
    // The recorded guest's process 101, told to move to node 0 of a
    // snapshot whose node 0 has CPU 0; the fake kernel holds its pages.
    let snap = snapshot();
    let (topology, source) = (guest_topology(), guest_a());
    let mut judge = host(&topology, &source);
    let mut b = Balancer::new(Config { hysteresis: 1, ..config() });
    let mut d = match b.step(&snap, &mut judge).as_slice() {
        [Event::Decide(d)] => d.clone(),
        other => panic!("{other:?}"),
    };
    d.to = 0;
    d.target = judge.target(&snap.processes[0], 0).expect("node 0 may take it");
    let mut sys = Fake::new(1024);
    let moved = act::carry_out(&mut Affinity::default(), &mut sys, &d, &snap, 16 << 20).expect("node 0 exists");
    assert_eq!((moved.pid, moved.to, moved.rate_limit_bytes_per_second), (101, 0, 16 << 20));
    assert_eq!(moved.outcome.error, None);
    assert_eq!(moved.outcome.bytes_moved, 4 << 20);
    assert_eq!(moved.local_percent_after, Some(100.0));
    assert_eq!(moved.before, Pins::Floating("0".parse().expect("set")));
    assert_eq!(moved.after, Pins::Floating("0".parse().expect("set")));
    assert!(sys.affinity.values().all(|c| c.to_list() == "0"), "{:?}", sys.affinity);
    assert!((moved.outcome.bytes_per_second() - (16 << 20) as f64).abs() < 1.0, "{moved:?}");
    // A node the snapshot lacks is refused before anything is touched.
    d.to = 7;
    let err = act::carry_out(&mut Affinity::default(), &mut sys, &d, &snap, 0).expect_err("no node 7");
    assert_eq!(err.to_string(), "node 7 vanished");
    assert_eq!(err.pid, 101);
}
