//! The balancer on a two-node host with reserved CPUs, a shared pool,
//! dedicated VMs and shared VMs: a move never puts a vCPU on a reserved
//! CPU or on another VM's dedicated CPU, never widens a dedicated VM's
//! 1:1 pins, re-plans a dedicated VM 1:1 through the planner, and leaves
//! what it may not move where it is, with the reason.

use numaplace_observe::act::{self, Pin, Pinned, System, Via};
use numaplace_observe::balance::{Balancer, Config, Event, SkipReason};
use numaplace_observe::host::{Host, Kept, Pins, Target};
use numaplace_observe::sample::{Kind, NodeInfo, ProcInfo, Snapshot};
use numaplace_observe::{ReadError, Source};
use numaplace_plan::{CpuMode, DeviceWish, HostState, Request, Reservations, Session, SmtPolicy};
use numaplace_topo::{CpuSet, MemoryKind, NodeId, Topology};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::time::Duration;

const GIB: u64 = 1 << 30;

/// Two sockets of four two-thread cores, one node each: node 0 holds
/// CPUs 0-3 and their siblings 8-11, node 1 CPUs 4-7 and 12-15.
fn topology() -> Topology {
    numaplace_read::read_source("2 sockets x 4 cores x 2 threads, 16GiB per node").expect("synthetic host")
}

fn set(s: &str) -> CpuSet {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// Each node's first core (both threads) kept for the host, its last
/// core the shared pool: the dedicated pool is cores 1 and 2 of each.
fn reservations() -> Reservations {
    Reservations {
        cpus: set("0,4,8,12"),
        memory_per_node: GIB,
        shared_cpus: set("3,7,11,15"),
        ..Reservations::default()
    }
}

/// A request pinned to `node` alone.
fn on_node(name: &str, vcpus: u32, mode: CpuMode, node: u32) -> Request {
    let mut r = Request::new(name, vcpus, 2 * GIB);
    r.cpu_mode = mode;
    r.max_nodes = Some(1);
    r.devices = vec![DeviceWish { address: None, node: Some(NodeId(node)), required: true }];
    r
}

/// The host's VMs, planned in order (as a libvirt host's running domains
/// would be read).
fn state(topology: &Topology, reservations: Reservations, vms: &[Request]) -> HostState {
    let mut state = HostState::with_reservations(topology, reservations).expect("reservations fit");
    let out = Session::new(topology, &mut state).place(vms).expect("change");
    for r in &out.results {
        assert!(r.is_ok(), "{r:?}");
    }
    state
}

/// Threads' CPU masks, as `/proc/PID/task/TID/status` gives them; no
/// process is in it unless a test adds one.
#[derive(Default)]
struct Threads(BTreeMap<u32, Vec<(String, CpuSet)>>);

impl Source for Threads {
    fn pids(&self) -> Result<Vec<u32>, ReadError> {
        Ok(self.0.keys().copied().collect())
    }
    fn tids(&self, pid: u32) -> Result<Vec<u32>, ReadError> {
        let n = self.0.get(&pid).map_or(0, Vec::len) as u32;
        match n {
            0 => Err(ReadError::Vanished(format!("/proc/{pid}").into())),
            _ => Ok((0..n).map(|i| pid * 100 + i).collect()),
        }
    }
    fn proc_file(&self, pid: u32, rel: &str) -> Result<Vec<u8>, ReadError> {
        let gone = || ReadError::Vanished(format!("/proc/{pid}/{rel}").into());
        let tid: u32 = rel
            .strip_prefix("task/")
            .and_then(|r| r.strip_suffix("/status"))
            .ok_or_else(gone)?
            .parse()
            .map_err(|_| gone())?;
        let (name, mask) = self.0.get(&pid).and_then(|t| t.get((tid - pid * 100) as usize)).ok_or_else(gone)?;
        Ok(format!("Name:\t{name}\nCpus_allowed_list:\t{}\nMems_allowed_list:\t0-1\n", mask.to_list()).into_bytes())
    }
    fn host_file(&self, rel: &str) -> Result<String, ReadError> {
        Err(ReadError::Vanished(rel.into()))
    }
    fn node_ids(&self) -> Result<Vec<u32>, ReadError> {
        Ok(vec![0, 1])
    }
}

/// A node of the synthetic host, `busy` CPUs' worth busy.
fn node(id: u32, busy: f64) -> NodeInfo {
    NodeInfo {
        node: id,
        cpus: if id == 0 { "0-3,8-11" } else { "4-7,12-15" }.into(),
        cpu_count: 8,
        memory_total_bytes: 16 * GIB,
        memory_free_bytes: 12 * GIB,
        busy_cpus: Some(busy),
        sampled_memory_bytes: 0,
    }
}

/// A VM (or process) homed on `home` with `remote` of its 2 GiB elsewhere.
fn process(pid: u32, name: &str, kind: Kind, vcpus: u32, home: u32, remote: u64, allowed: &str) -> ProcInfo {
    let memory = 2 * GIB;
    let memory_per_node: BTreeMap<u32, u64> = [(home, memory - remote), (1 - home, remote)].into();
    ProcInfo {
        pid,
        name: name.into(),
        kind,
        threads: vcpus + 2,
        counted_threads: vcpus,
        threads_per_node: [(home, vcpus)].into(),
        home_nodes: vec![home],
        home_migrations: 0,
        memory_per_node,
        memory_bytes: memory,
        local_bytes: memory - remote,
        remote_bytes: remote,
        local_percent: Some((memory - remote) as f64 * 100.0 / memory as f64),
        home_balance_percent: None,
        huge_bytes: 0,
        configured_memory_bytes: Some(memory),
        cpus_allowed: allowed.into(),
        mems_allowed: "0-1".into(),
        policies: vec!["default".into()],
    }
}

fn snapshot(busy: [f64; 2], processes: Vec<ProcInfo>) -> Snapshot {
    Snapshot {
        sequence: 1,
        numa: true,
        nodes: vec![node(0, busy[0]), node(1, busy[1])],
        processes,
        skipped: Default::default(),
    }
}

fn config() -> Config {
    Config { threshold_percent: 80.0, hysteresis: 1, max_moves: 8, cooldown: 2, min_memory_bytes: 1 << 20 }
}

fn decisions(events: &[Event]) -> BTreeMap<String, Target> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Decide(d) => Some((d.name.clone(), d.target.clone())),
            _ => None,
        })
        .collect()
}

fn skips(events: &[Event]) -> BTreeMap<String, SkipReason> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Skip { name, reason, .. } => Some((name.clone(), reason.clone())),
            _ => None,
        })
        .collect()
}

fn dedicated_pins(t: &Pins) -> Vec<(u32, u32)> {
    match t {
        Pins::Dedicated { vcpus, .. } => vcpus.clone(),
        Pins::Floating(cpus) => panic!("floating over {}", cpus.to_list()),
    }
}

#[test]
fn a_dedicated_vm_is_replanned_one_to_one_on_its_new_node() {
    let topology = topology();
    // db is dedicated on node 0, its two vCPUs on one core's threads,
    // with most of its memory on node 1, and node 0 is busy: node 1 is
    // the better home. web holds one of node 1's two dedicated cores.
    let mut db = on_node("db", 2, CpuMode::Dedicated, 0);
    db.smt = SmtPolicy::Pairs;
    let state = state(&topology, reservations(), &[db, on_node("web", 1, CpuMode::Dedicated, 1)]);
    let before = dedicated_pins(&Pins::of(state.placement("db").expect("db")));
    assert_eq!(before, [(0, 1), (1, 9)], "planned on a core of node 0's dedicated pool");
    assert_eq!(state.placement("web").expect("web").cpuset, set("5"));
    let threads = Threads::default();
    let mut host = Host::new(&topology, state, &threads);
    let snap = snapshot([8.0, 1.0], vec![process(10, "db", Kind::Vm, 2, 0, 3 * GIB / 2, "1,9")]);
    let events = Balancer::new(config()).step(&snap, &mut host);
    let target = decisions(&events).remove("db").unwrap_or_else(|| panic!("{events:?}"));
    assert_eq!(dedicated_pins(&target.before), before);
    // Re-planned 1:1 on node 1's free core: neither reserved (4, 12),
    // shared (7, 15) nor web's (5, whose sibling 13 would split a core).
    assert_eq!(dedicated_pins(&target.after), [(0, 6), (1, 14)]);
    // The log's words; the emulator threads stay on each node's
    // housekeeping CPUs, where the planner puts them.
    assert_eq!(
        format!("{} -> {}", target.before, target.after),
        "vCPUs 0->1, 1->9, emulator on 0,8 -> vCPUs 0->6, 1->14, emulator on 4,12"
    );

    // Carried out, the pinner is asked for exactly those pins and the
    // log has both.
    let mut pinner = Recorder::default();
    let d = events
        .iter()
        .find_map(|e| match e {
            Event::Decide(d) => Some(d.clone()),
            _ => None,
        })
        .expect("decision");
    let moved = act::carry_out(&mut pinner, &mut NoPages, &d, &snap, 0).expect("node 1 exists");
    assert_eq!(pinner.0, std::slice::from_ref(&target.after));
    assert_eq!((moved.before, moved.after, moved.outcome.error), (target.before, target.after, None));
}

#[test]
fn a_dedicated_vm_is_not_moved_onto_siblings_its_guest_was_told_are_cores() {
    let topology = topology();
    // db's vCPUs are on two whole cores; node 1 has one whole core left
    // beside web, so a re-plan there would pair db's vCPUs on one core.
    let vms = [on_node("db", 2, CpuMode::Dedicated, 0), on_node("web", 1, CpuMode::Dedicated, 1)];
    let state = state(&topology, reservations(), &vms);
    assert_eq!(dedicated_pins(&Pins::of(state.placement("db").expect("db"))), [(0, 1), (1, 2)]);
    let threads = Threads::default();
    let mut host = Host::new(&topology, state, &threads);
    let snap = snapshot([8.0, 1.0], vec![process(10, "db", Kind::Vm, 2, 0, 3 * GIB / 2, "1-2")]);
    let events = Balancer::new(config()).step(&snap, &mut host);
    assert!(decisions(&events).is_empty(), "{events:?}");
    let reason = skips(&events).remove("db").unwrap_or_else(|| panic!("{events:?}"));
    assert_eq!(
        reason,
        SkipReason::Kept(Kept::GuestThreads { vm: "db".into(), node: 1, before: 1, after: 2 }),
        "{reason}"
    );
}

#[test]
fn a_dedicated_vm_the_new_node_cannot_hold_stays_with_the_planners_reason() {
    let topology = topology();
    // web holds all four dedicated CPUs of node 1.
    let vms = [on_node("db", 2, CpuMode::Dedicated, 0), on_node("web", 4, CpuMode::Dedicated, 1)];
    let state = state(&topology, reservations(), &vms);
    let threads = Threads::default();
    let mut host = Host::new(&topology, state, &threads);
    let snap = snapshot([8.0, 1.0], vec![process(10, "db", Kind::Vm, 2, 0, 3 * GIB / 2, "1-2")]);
    let events = Balancer::new(config()).step(&snap, &mut host);
    assert!(decisions(&events).is_empty(), "{events:?}");
    let reason = skips(&events).remove("db").unwrap_or_else(|| panic!("{events:?}"));
    assert!(matches!(&reason, SkipReason::Kept(Kept::NotPlanned { vm, node: 1, .. }) if vm == "db"), "{reason:?}");
    assert_eq!(reason.code(), "not_planned");
    assert!(
        reason.to_string().starts_with("kept where it is: dedicated VM db: not re-planned 1:1 on node 1: "),
        "{reason}"
    );
}

#[test]
fn a_dedicated_vm_staying_on_its_node_keeps_its_pins() {
    let topology = topology();
    let state = state(&topology, reservations(), &[on_node("db", 2, CpuMode::Dedicated, 0)]);
    let threads = Threads::default();
    let host = Host::new(&topology, state, &threads);
    let p = process(10, "db", Kind::Vm, 2, 0, GIB, "1-2");
    let t = host.target(&p, 0).expect("its own node");
    assert_eq!(t.after, t.before);
    assert_eq!(dedicated_pins(&t.after), [(0, 1), (1, 2)]);
}

#[test]
fn a_vm_on_hbm_is_not_moved_onto_dram() {
    // Two sockets with an HBM node each: a VM that asked for HBM keeps it;
    // the move would take its pages to the target node's DRAM.
    let topology = numaplace_read::read_source(
        "2 sockets x 4 cores x 2 threads, 16GiB per node + 2 memory-only nodes of 8GiB HBM",
    )
    .expect("synthetic host");
    let on_hbm = |name: &str, mode| {
        let mut r = Request::new(name, 2, 2 * GIB);
        r.cpu_mode = mode;
        r.memory_kinds = Some(vec![MemoryKind::Hbm]);
        r
    };
    let (hbm, shared) = (on_hbm("hbm", CpuMode::Dedicated), on_hbm("web", CpuMode::Shared));
    let state = state(&topology, reservations(), &[hbm, shared, on_node("db", 2, CpuMode::Dedicated, 0)]);
    let threads = Threads::default();
    let host = Host::new(&topology, state, &threads);
    for (pid, name) in [(10, "hbm"), (11, "web")] {
        let kept = host.target(&process(pid, name, Kind::Vm, 2, 0, GIB, "1-2"), 1).expect_err("stays on its HBM");
        assert!(matches!(&kept, Kept::MemoryTier { vm, kind: MemoryKind::Hbm, .. } if vm == name), "{kept:?}");
        assert_eq!(kept.code(), "memory_tier");
    }
    // A VM on DRAM beside them still moves, and its re-plan stays on DRAM.
    let t = host.target(&process(12, "db", Kind::Vm, 2, 0, GIB, "1-2"), 1).expect("db moves");
    assert!(dedicated_pins(&t.after).iter().all(|&(_, cpu)| (5..=6).contains(&cpu)), "{:?}", t.after);
}

#[test]
fn floating_vms_float_over_the_shared_pool_of_the_new_node_only() {
    let topology = topology();
    let vms = [on_node("web", 2, CpuMode::Dedicated, 1), on_node("float", 2, CpuMode::Shared, 0)];
    // With a pool: only node 1's pool CPUs.
    let threads = Threads::default();
    let host = Host::new(&topology, state(&topology, reservations(), &vms), &threads);
    let float = process(11, "float", Kind::Vm, 2, 0, GIB, "3,11");
    let t = host.target(&float, 1).expect("node 1's pool");
    assert_eq!(t, Target { before: Pins::Floating(set("3,11")), after: Pins::Floating(set("7,15")) });
    // A process numaplace does not know floats the same way.
    let lone = process(12, "qemu-x", Kind::Vm, 2, 0, GIB, "0-15");
    assert_eq!(host.target(&lone, 1).map(|t| t.after), Ok(Pins::Floating(set("7,15"))));
    // Without a pool: every CPU of node 1 neither reserved nor web's.
    let no_pool = Reservations { shared_cpus: CpuSet::new(), ..reservations() };
    let host = Host::new(&topology, state(&topology, no_pool, &vms), &threads);
    let web = host.state().placement("web").expect("web").cpuset.clone();
    let after = host.target(&float, 1).expect("node 1").after;
    assert_eq!(after, Pins::Floating(set("5-7,13-15").difference(&web)));
    // A node whose every CPU is reserved or dedicated takes no one.
    let full = [on_node("web", 6, CpuMode::Dedicated, 1)];
    let host = Host::new(&topology, state(&topology, no_pool_reservations(), &full), &threads);
    assert_eq!(host.target(&float, 1), Err(Kept::NoFreeCpu { node: 1 }));
}

fn no_pool_reservations() -> Reservations {
    Reservations { shared_cpus: CpuSet::new(), ..reservations() }
}

#[test]
fn a_process_pinned_one_to_one_outside_libvirt_is_left_alone() {
    let topology = topology();
    let mut threads = Threads::default();
    // vCPU threads on CPUs 1 and 2 (node 0 has eight): pinned 1:1 by
    // someone else; its emulator thread floats.
    threads.0.insert(
        13,
        vec![("qemu-system-x86".into(), set("0-15")), ("CPU 0/KVM".into(), set("1")), ("CPU 1/KVM".into(), set("2"))],
    );
    // Another whose vCPU threads float over node 0.
    threads.0.insert(14, vec![("CPU 0/KVM".into(), set("0-3,8-11")), ("CPU 1/KVM".into(), set("0-3,8-11"))]);
    let host = Host::new(&topology, state(&topology, reservations(), &[]), &threads);
    let pinned = process(13, "manual", Kind::Vm, 2, 0, GIB, "0-15");
    assert_eq!(host.target(&pinned, 1), Err(Kept::PinnedOutside));
    let floats = process(14, "loose", Kind::Vm, 2, 0, GIB, "0-3,8-11");
    assert_eq!(host.target(&floats, 1).map(|t| t.after), Ok(Pins::Floating(set("7,15"))));
}

#[test]
fn no_move_takes_a_node_below_the_memory_the_host_reserves() {
    let topology = topology();
    let threads = Threads::default();
    // Node 1 has 12 GiB free; taking 1.5 GiB of the VM leaves 10.5 GiB.
    let snap = snapshot([8.0, 1.0], vec![process(11, "float", Kind::Vm, 2, 0, GIB / 2, "0-15")]);
    let reserving = |bytes| Reservations { memory_per_node: bytes, ..reservations() };
    let mut host = Host::new(&topology, state(&topology, reserving(10 * GIB), &[]), &threads);
    assert!(decisions(&Balancer::new(config()).step(&snap, &mut host)).contains_key("float"));
    let mut host = Host::new(&topology, state(&topology, reserving(11 * GIB), &[]), &threads);
    let events = Balancer::new(config()).step(&snap, &mut host);
    assert_eq!(skips(&events).remove("float"), Some(SkipReason::NoNode), "{events:?}");
}

/// A pinner that records what it was asked.
#[derive(Default)]
struct Recorder(Vec<Pins>);

impl Pin for Recorder {
    fn pin(&mut self, _: &mut dyn System, _: u32, target: &Target) -> Pinned {
        self.0.push(target.after.clone());
        Pinned { via: Via::Libvirt, threads: 0, error: None, restored: false }
    }
    fn restore(&mut self, _: &mut dyn System) -> bool {
        true
    }
}

/// A kernel whose process has no pages to move.
struct NoPages;

impl System for NoPages {
    fn tids(&mut self, _: u32) -> std::io::Result<Vec<u32>> {
        Ok(Vec::new())
    }
    fn get_affinity(&mut self, _: u32) -> std::io::Result<CpuSet> {
        Ok(CpuSet::new())
    }
    fn set_affinity(&mut self, _: u32, _: &CpuSet) -> std::io::Result<()> {
        Ok(())
    }
    fn maps(&mut self, _: u32) -> std::io::Result<(String, String)> {
        Ok((String::new(), String::new()))
    }
    fn move_pages(&mut self, _: u32, pages: &[u64], _: Option<u32>) -> std::io::Result<Vec<i32>> {
        Ok(vec![0; pages.len()])
    }
    fn now(&mut self) -> Duration {
        Duration::ZERO
    }
    fn sleep(&mut self, _: Duration) {}
}

/// One VM of a generated host: dedicated or shared, its size and node.
#[derive(Clone, Debug)]
struct Vm {
    dedicated: bool,
    vcpus: u32,
    node: u32,
    /// Where the sampler finds it, and how much of it is remote.
    home: u32,
    remote_eighths: u64,
}

fn vm() -> impl Strategy<Value = Vm> {
    (any::<bool>(), 1u32..=4, 0u32..2, 0u32..2, 0u64..8).prop_map(|(dedicated, vcpus, node, home, remote_eighths)| Vm {
        dedicated,
        vcpus,
        node,
        home,
        remote_eighths,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the host's reservations, VMs and load: no decision puts a
    /// vCPU on a reserved CPU or another VM's dedicated CPU, a floating VM
    /// stays in the pool when there is one, and a dedicated VM is only
    /// ever re-pinned 1:1 (never onto a wider set).
    #[test]
    fn no_move_uses_a_reserved_or_dedicated_cpu_or_unpins_a_dedicated_vm(
        reserved in proptest::collection::btree_set(0u32..16, 0..5),
        pool in proptest::collection::btree_set(0u32..16, 0..6),
        vms in proptest::collection::vec(vm(), 1..6),
        busy in (0.0f64..9.0, 0.0f64..9.0),
    ) {
        let topology = topology();
        let reserved: CpuSet = reserved.into_iter().collect();
        let pool: CpuSet = pool.into_iter().filter(|c| !reserved.contains(*c)).collect();
        let reservations = Reservations {
            cpus: reserved.clone(),
            memory_per_node: GIB,
            shared_cpus: pool.clone(),
            ..Reservations::default()
        };
        let mut state = HostState::with_reservations(&topology, reservations).expect("reservations fit");
        let requests: Vec<Request> = vms
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let mode = if v.dedicated { CpuMode::Dedicated } else { CpuMode::Shared };
                on_node(&format!("vm{i}"), v.vcpus, mode, v.node)
            })
            .collect();
        // Some may not fit: they are then processes numaplace does not know.
        Session::new(&topology, &mut state).place(&requests).expect("change");
        let processes: Vec<ProcInfo> = vms
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let name = format!("vm{i}");
                let allowed = state.placement(&name).map_or("0-15".to_string(), |p| p.run_cpus().to_list());
                process(100 + i as u32, &name, Kind::Vm, v.vcpus, v.home, v.remote_eighths * GIB / 4, &allowed)
            })
            .collect();
        // Each dedicated VM's CPUs and vCPU count.
        let dedicated: BTreeMap<String, (CpuSet, usize)> = state
            .placements()
            .iter()
            .filter(|p| p.cpu_mode == CpuMode::Dedicated)
            .map(|p| (p.vm.clone(), (p.cpuset.clone(), p.vcpus.len())))
            .collect();
        let threads = Threads::default();
        let mut host = Host::new(&topology, state, &threads);
        let snap = snapshot([busy.0, busy.1], processes);
        let events = Balancer::new(config()).step(&snap, &mut host);
        for e in &events {
            let Event::Decide(d) = e else { continue };
            let node_cpus = set(&snap.nodes[d.to as usize].cpus);
            let others: CpuSet =
                dedicated.iter().filter(|(vm, _)| **vm != d.name).fold(CpuSet::new(), |a, (_, (c, _))| a.union(c));
            match (&d.target.after, dedicated.get(&d.name).map(|(_, n)| n)) {
                (Pins::Dedicated { vcpus, .. }, Some(n)) => {
                    prop_assert_eq!(vcpus.len(), *n, "{:?}", d);
                    let cpus: CpuSet = vcpus.iter().map(|(_, pu)| *pu).collect();
                    prop_assert_eq!(cpus.len(), *n, "two vCPUs on one CPU: {:?}", d);
                    prop_assert!(cpus.is_subset(&node_cpus), "{:?}", d);
                    prop_assert!(cpus.intersection(&reserved).is_empty(), "on a reserved CPU: {:?}", d);
                    prop_assert!(cpus.intersection(&pool).is_empty(), "on the shared pool: {:?}", d);
                    prop_assert!(cpus.intersection(&others).is_empty(), "on another VM's CPU: {:?}", d);
                }
                (Pins::Floating(cpus), None) => {
                    prop_assert!(!cpus.is_empty());
                    prop_assert!(cpus.is_subset(&node_cpus), "{:?}", d);
                    prop_assert!(cpus.intersection(&reserved).is_empty(), "on a reserved CPU: {:?}", d);
                    prop_assert!(cpus.intersection(&others).is_empty(), "on a dedicated CPU: {:?}", d);
                    prop_assert!(pool.is_empty() || cpus.is_subset(&pool), "outside the pool: {:?}", d);
                }
                (after, _) => prop_assert!(false, "{} moved as {after:?}", d.name),
            }
        }
    }
}
