//! `numaplace balance --dry-run` on a multi-node host read from a dump:
//! a recorded process tree (`--root`), the host's topology (`--host`)
//! and its domains (`--state`, `virsh dumpxml` files). It must say which
//! VMs it would move and where their threads would run, a dedicated
//! domain re-planned 1:1 on its new node, and move nothing.
//!
//! The tree is observe's recording of three real QEMU processes
//! (`crates/observe/tests/data/host-qemu`, see its README) made into a
//! two-node host's: every page the kernel counted on node 0 is counted on
//! node 1 (`N0=` becomes `N1=` in each `numa_maps`), and the node
//! directories are those of the topology below. The processes' threads
//! last ran on CPUs 0-1 (node 0), so each VM's memory is all remote.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Two nodes of four single-thread cores and 16 GiB: CPUs 0-3 and 4-7.
const HOST: &str = "2 sockets x 4 cores x 1 threads, 16GiB per node";

/// `app3` (pid 32218 in the tree) as libvirt runs it: dedicated, vCPUs on
/// CPUs 1 and 2, the emulator on 0, its memory on node 0.
const APP3: &str = "<domain type='kvm' id='7'><name>app3</name>\
    <memory unit='MiB'>512</memory><vcpu placement='static'>2</vcpu>\
    <cputune><vcpupin vcpu='0' cpuset='1'/><vcpupin vcpu='1' cpuset='2'/><emulatorpin cpuset='0'/></cputune>\
    <numatune><memory mode='restrictive' nodeset='0'/></numatune>\
    <cpu><topology sockets='1' dies='1' cores='2' threads='1'/>\
    <numa><cell id='0' cpus='0-1' memory='512' unit='MiB'/></numa></cpu></domain>";

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("dir");
    for e in std::fs::read_dir(from).expect("read dir").flatten() {
        let target = to.join(e.file_name());
        if e.path().is_dir() {
            copy_tree(&e.path(), &target);
        } else {
            let bytes = std::fs::read(e.path()).expect("read");
            let bytes = if e.file_name() == "numa_maps" {
                String::from_utf8_lossy(&bytes).replace(" N0=", " N1=").into_bytes()
            } else {
                bytes
            };
            std::fs::write(&target, bytes).expect("write");
        }
    }
}

/// The dump: `tree/` (proc and sys) and `domains/`.
fn dump(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    let recorded = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../observe/tests/data/host-qemu");
    let tree = dir.join("tree");
    copy_tree(&recorded, &tree);
    let meminfo = std::fs::read_to_string(tree.join("sys/devices/system/node/node0/meminfo")).expect("meminfo");
    for (node, cpus) in [(0, "0-3"), (1, "4-7")] {
        let d = tree.join(format!("sys/devices/system/node/node{node}"));
        std::fs::create_dir_all(&d).expect("node dir");
        std::fs::write(d.join("cpulist"), format!("{cpus}\n")).expect("cpulist");
        std::fs::write(d.join("meminfo"), meminfo.replace("Node 0 ", &format!("Node {node} "))).expect("meminfo");
    }
    let domains = dir.join("domains");
    std::fs::create_dir_all(&domains).expect("domains");
    std::fs::write(domains.join("app3.xml"), APP3).expect("domain");
    dir
}

fn balance(dir: &Path, extra: &[&str]) -> std::process::Output {
    let (tree, domains) = (dir.join("tree"), dir.join("domains"));
    Command::new(env!("CARGO_BIN_EXE_numaplace"))
        .env("NUMAPLACE_HOST_CONFIG", concat!(env!("CARGO_TARGET_TMPDIR"), "/no-host-profile.toml"))
        .args(["balance", "--root"])
        .arg(&tree)
        .args(["--host", HOST, "--state"])
        .arg(&domains)
        .args(extra)
        .output()
        .expect("run numaplace")
}

#[test]
fn a_dry_run_on_a_dumped_two_node_host_shows_each_move_and_its_pins() {
    let dir = dump("balance-dump");
    let before = std::fs::read_to_string(dir.join("tree/proc/32218/numa_maps")).expect("numa_maps");
    let o = balance(
        &dir,
        &["--dry-run", "--hysteresis", "2", "--rounds", "2", "--max-moves", "3", "--no-libvirt", "--format", "json"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let events: Vec<Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    // Round 1 watches (hysteresis 2), round 2 decides; nothing moves.
    assert!(events.iter().any(|e| e["event"] == "watching" && e["name"] == "app3"), "{events:?}");
    assert!(!events.iter().any(|e| e["event"] == "moved"), "{events:?}");
    let decide = |name: &str| {
        events
            .iter()
            .find(|e| e["event"] == "decide" && e["name"] == name)
            .unwrap_or_else(|| panic!("no decision for {name}: {events:?}"))
            .clone()
    };

    // The dedicated domain: from its pins on node 0 to a 1:1 re-plan on
    // node 1, where all its memory is; never floating, never widened.
    let app3 = decide("app3");
    assert_eq!(app3["from"], serde_json::json!([0]), "{app3}");
    assert_eq!(app3["to"], 1, "{app3}");
    assert_eq!(
        app3["before"],
        serde_json::json!({"mode": "dedicated", "cpus": "0-2", "emulator": "0", "vcpus": [{"vcpu": 0, "cpu": 1}, {"vcpu": 1, "cpu": 2}]})
    );
    let after = &app3["after"];
    assert_eq!(after["mode"], "dedicated", "{app3}");
    let cpus: Vec<u64> =
        after["vcpus"].as_array().expect("vcpus").iter().map(|v| v["cpu"].as_u64().expect("cpu")).collect();
    assert_eq!(cpus.len(), 2, "{after}");
    assert!(cpus.iter().all(|c| (4..8).contains(c)) && cpus[0] != cpus[1], "1:1 on node 1: {after}");
    assert!(after["emulator"].as_str().is_some_and(|e| !e.is_empty()), "{after}");
    assert!(app3["bytes_to_move"].as_u64().expect("bytes") == 0, "its memory is on node 1 already: {app3}");

    // A QEMU process libvirt does not hold floats over node 1, away from
    // nothing (no reservation, app3's old pins are on node 0).
    let db1 = decide("db1");
    assert_eq!(db1["to"], 1, "{db1}");
    assert_eq!(db1["after"], serde_json::json!({"mode": "floating", "cpus": "4-7", "emulator": "4-7", "vcpus": []}));

    // Said in words too, marked as a dry run; the dump is unchanged.
    assert!(err.contains("app3 (pid 32218)") && err.contains("new home node 1") && err.contains("[dry run]"), "{err}");
    assert_eq!(std::fs::read_to_string(dir.join("tree/proc/32218/numa_maps")).expect("numa_maps"), before);
}

#[test]
fn a_recorded_tree_is_never_balanced_for_real() {
    let dir = dump("balance-dump-live");
    let o = balance(&dir, &["--rounds", "1"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--root") && err.contains("only read with --dry-run"), "{err}");
}

#[test]
fn a_state_directory_without_domains_is_refused_before_anything_is_read() {
    let dir = dump("balance-dump-empty");
    std::fs::remove_file(dir.join("domains/app3.xml")).expect("rm");
    let o = balance(&dir, &["--dry-run", "--rounds", "1"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--state") && err.contains("no domain XML file"), "{err}");
}
