//! Metrics on traces small enough to check by hand, on literal topologies
//! (a 2-node host with 2 cores x 2 threads per node unless said).
//! Numbers for the planner's policies are asserted only where every valid
//! placement gives them (the planner's exact choices are its own tests').

#![allow(clippy::unwrap_used)]

use numaplace_plan::Policy;
use numaplace_sim::trace::csv;
use numaplace_sim::{run_policy, Config, HostMix, SimPolicy};
use numaplace_topo::{Core, CpuSet, Node, NodeId, Parts, Topology};

/// `nodes` nodes of `cores` cores with `threads` threads, `gib` GiB each.
fn host(nodes: u32, cores: u32, threads: u32, gib: u64) -> Topology {
    let mut parts = Parts::default();
    let mut cpu = 0;
    for n in 0..nodes {
        let mut node_cpus = CpuSet::new();
        for c in 0..cores {
            let cpus: CpuSet = (cpu..cpu + threads).collect();
            cpu += threads;
            node_cpus = node_cpus.union(&cpus);
            parts.cores.push(Core { package: Some(n), die: None, core_id: Some(c), cpus });
        }
        parts.nodes.push(Node {
            id: NodeId(n),
            cpus: node_cpus,
            memory_bytes: gib << 30,
            free_bytes: None,
            hugepages: vec![],
            kind: None,
        });
    }
    Topology::from_parts(parts).expect("a valid literal topology")
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-4
}

const TRACE: &str = "\
vmid,vcpus,memory_gib,arrival_s,lifetime_s
a,2,2,0,100
b,4,4,0,100
c,4,1,10,100
";

#[test]
fn no_numa_by_hand() {
    let fleet = HostMix::uniform("h", host(2, 2, 2, 4), 1, 1.0);
    let trace = csv::parse("t.csv", TRACE).unwrap();
    let r = run_policy(&fleet, &trace, SimPolicy::NoNuma, &Config::default(), &mut |_| {});
    // a and b take 6 of 8 threads; c's 4 vCPUs do not fit the 2 left.
    assert_eq!((r.accepted, r.rejected), (2, 1));
    // Floating VMs are never on one node of a 2-node host, and their
    // memory is spread in proportion to node size: half is local.
    assert_eq!(r.single_node_share().unwrap(), 0.0);
    assert!(close(r.memory_locality().unwrap(), 0.5));
    // 6 busy vCPUs on 4 cores: the scheduler fills idle cores first,
    // then doubles up on 2 of them: 4 of 6 vCPUs share.
    assert!(close(r.smt_shared_vcpu_share().unwrap(), 4.0 / 6.0));
    // Memory factor: a guest shown one node of two has its memory time
    // at least 1 / 0.54 (CPU hot-add, 001), which is more than half of
    // it remote costs here: 1 / (0.5 + 0.5 / 0.54); SMT: 4/6 of vCPUs
    // lose 57.5%.
    let expected = 1.0 / (0.5 + 0.5 / 0.54) * (1.0 - 0.575 * 4.0 / 6.0);
    assert!(close(r.predicted_performance().unwrap(), expected), "{}", r.predicted_performance().unwrap());
    // 3 GiB on each 4 GiB node: balanced; CPU is one pool.
    assert!(close(r.memory_imbalance(), 0.0));
    assert!(close(r.cpu_imbalance(), 0.0));
    assert_eq!(r.peak_running_vms, 2);
    assert_eq!(r.planner_calls, 0);
    // At the end all left: every node empty.
    assert_eq!(r.final_cpu_histogram[0], 2);
    assert_eq!(r.final_memory_histogram[0], 2);
}

#[test]
fn no_numa_on_one_node_is_local() {
    let fleet = HostMix::uniform("h", host(1, 4, 1, 8), 1, 1.0);
    let trace = csv::parse("t.csv", "a,2,2,0,50\nb,2,2,0,50\n").unwrap();
    let r = run_policy(&fleet, &trace, SimPolicy::NoNuma, &Config::default(), &mut |_| {});
    assert_eq!(r.accepted, 2);
    assert_eq!(r.single_node_share().unwrap(), 1.0);
    assert_eq!(r.memory_locality().unwrap(), 1.0);
    // 4 vCPUs on 4 single-thread cores: nobody shares; all local.
    assert_eq!(r.smt_shared_vcpu_share().unwrap(), 0.0);
    assert!(close(r.predicted_performance().unwrap(), 1.0));
}

#[test]
fn stranded_memory_when_threads_run_out() {
    // One node, 2 threads, 8 GiB: a 2-vCPU 1 GiB VM leaves 7 GiB, less
    // the QEMU overhead the fleet keeps beside it, that no VM can use (no
    // free thread).
    let fleet = HostMix::uniform("h", host(1, 2, 1, 8), 1, 1.0);
    let trace = csv::parse("t.csv", "a,2,1,0,100\n").unwrap();
    let r = run_policy(&fleet, &trace, SimPolicy::NoNuma, &Config::default(), &mut |_| {});
    // Replay: [0, 101); the VM runs for 100 of those seconds.
    let share = r.stranded_memory_share();
    let free = (7u64 << 30) - numaplace_plan::vm_overhead_bytes(1 << 30);
    assert!(close(share, free as f64 / (8u64 << 30) as f64 * 100.0 / 101.0), "{share}");
    assert_eq!(r.stranded_cpu_share(), 0.0);
}

#[test]
fn planner_policies_keep_small_vms_on_one_node() {
    // 5 GiB nodes: b's 4 GiB and QEMU's overhead fit one.
    let fleet = HostMix::uniform("h", host(2, 2, 2, 5), 1, 1.0);
    let trace = csv::parse("t.csv", TRACE).unwrap();
    for policy in [Policy::Compact, Policy::SmtAware, Policy::Balanced] {
        let r = run_policy(&fleet, &trace, SimPolicy::Planner(policy), &Config::default(), &mut |_| {});
        assert_eq!(r.accepted + r.rejected, 3, "{policy:?}");
        // c needs 4 free threads; only 2 are left whatever the choices.
        assert_eq!(r.rejected, 1, "{policy:?}");
        // a (2 vCPUs, 2 GiB) and b (4 vCPUs, 4 GiB) each fit one node.
        assert_eq!(r.single_node_share().unwrap(), 1.0, "{policy:?}");
        assert!(close(r.memory_locality().unwrap(), 1.0), "{policy:?}");
        // 6 pinned vCPUs on 4 cores: at least 4 share a core.
        assert!(r.smt_shared_vcpu_share().unwrap() >= 4.0 / 6.0 - 1e-9, "{policy:?}");
        assert!(r.planner_calls >= 2);
    }
}

#[test]
fn departures_free_capacity() {
    // One 4-thread node; VMs of 4 vCPUs one after the other all fit,
    // overlapping ones do not.
    let fleet = HostMix::uniform("h", host(1, 4, 1, 8), 1, 1.0);
    let trace = csv::parse("t.csv", "a,4,2,0,10\nb,4,2,5,10\nc,4,2,10,10\nd,4,2,20,10\n").unwrap();
    for policy in [SimPolicy::NoNuma, SimPolicy::Planner(Policy::Balanced)] {
        let r = run_policy(&fleet, &trace, policy, &Config::default(), &mut |_| {});
        // b arrives while a runs; c arrives as a leaves; d after c left.
        assert_eq!((r.accepted, r.rejected), (3, 1), "{policy}");
        assert_eq!(r.peak_running_vms, 1);
    }
}

#[test]
fn the_same_inputs_give_the_same_numbers() {
    use numaplace_sim::trace::synthetic::{generate, Spec};
    let fleet = HostMix::uniform("h", host(2, 4, 2, 32), 6, 1.0);
    let spec = Spec { vms: 600, mean_interarrival_s: 20.0, mean_lifetime_s: 3600.0, ..Spec::default() };
    let cfg = Config { sample_every_s: 600, ..Config::default() };
    for policy in [SimPolicy::Planner(Policy::Balanced), SimPolicy::NoNuma] {
        let a = run_policy(&fleet, &generate(&spec, 11), policy, &cfg, &mut |_| {});
        let b = run_policy(&fleet, &generate(&spec, 11), policy, &cfg, &mut |_| {});
        assert_eq!(a, b, "{policy}");
        assert!(a.rejected > 0 && a.accepted > 0, "the fleet is meant to fill up: {} {}", a.accepted, a.rejected);
        let c = run_policy(&fleet, &generate(&spec, 12), policy, &cfg, &mut |_| {});
        assert_ne!(a.samples, c.samples, "{policy}");
    }
}

#[test]
fn overcommitted_hosts_take_more_vcpus() {
    let fleet = HostMix::uniform("h", host(1, 2, 1, 8), 1, 2.0);
    let trace = csv::parse("t.csv", "a,2,1,0,100\nb,2,1,0,100\nc,2,1,0,100\n").unwrap();
    for policy in [SimPolicy::NoNuma, SimPolicy::Planner(Policy::Balanced)] {
        let r = run_policy(&fleet, &trace, policy, &Config::default(), &mut |_| {});
        // 2 threads x 2.0 = 4 vCPU slots.
        assert_eq!((r.accepted, r.rejected), (2, 1), "{policy}");
        // 4 vCPUs on 2 single-thread cores: every vCPU shares.
        assert!(close(r.smt_shared_vcpu_share().unwrap(), 1.0), "{policy}");
    }
}

#[test]
fn host_order_decides_sibling_sharing() {
    use numaplace_sim::HostOrder;
    // Two hosts of one core with two threads; two 1-vCPU VMs.
    let fleet = HostMix::uniform("h", host(1, 1, 2, 8), 2, 1.0);
    let trace = csv::parse("t.csv", "a,1,1,0,100\nb,1,1,0,100\n").unwrap();
    let spread = Config { host_order: HostOrder::CoresFirst, ..Config::default() };
    let pack = Config { host_order: HostOrder::Pack, ..Config::default() };
    for policy in [SimPolicy::NoNuma, SimPolicy::Planner(Policy::Balanced)] {
        // Most free cores first: b goes to the idle host, nobody shares.
        let r = run_policy(&fleet, &trace, policy, &spread, &mut |_| {});
        assert_eq!((r.accepted, r.smt_shared_vcpu_share().unwrap()), (2, 0.0), "{policy}");
        // Best fit: b joins a on its core.
        let r = run_policy(&fleet, &trace, policy, &pack, &mut |_| {});
        assert_eq!(r.accepted, 2, "{policy}");
        assert!(close(r.smt_shared_vcpu_share().unwrap(), 1.0), "{policy}");
    }
}

#[test]
fn thread_count_does_not_change_results() {
    use numaplace_sim::trace::synthetic::{generate, Spec};
    let fleet = HostMix::uniform("h", host(2, 4, 2, 32), 4, 1.0);
    let trace = generate(&Spec { vms: 300, mean_interarrival_s: 20.0, ..Spec::default() }, 5);
    let cfg = Config::default();
    let one = numaplace_sim::run(&fleet, &trace, &SimPolicy::ALL, &cfg, 1, &mut |_| {});
    let two = numaplace_sim::run(&fleet, &trace, &SimPolicy::ALL, &cfg, 2, &mut |_| {});
    assert_eq!(one.len(), SimPolicy::ALL.len());
    assert_eq!(one, two);
    let names: Vec<&str> = one.iter().map(|r| r.policy.name()).collect();
    assert_eq!(names, ["compact", "smt-aware", "balanced", "spread", "no-numa"]);
}
