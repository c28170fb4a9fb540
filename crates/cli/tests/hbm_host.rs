//! A real Xeon Max host read from its hwloc export, as an operator meets
//! it (issue 48's acceptance line): `topology` shows its eight HBM nodes
//! with the evidence, `plan` keeps ordinary VMs off them and places
//! `memory_kind=hbm` on them, and the host profile's `[node_kinds]`
//! declares a node's kind over what was found, a bad value refused with
//! exit 2 naming the key.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture(rel: &str) -> String {
    format!("{}/../../fixtures/topologies/{rel}", env!("CARGO_MANIFEST_DIR"))
}

fn flat() -> String {
    fixture("psmgmt/topo.dp-intelmax01-flat.xml")
}

fn workdir(test: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hbm-host").join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Runs numaplace with no host profile unless `profile` names one.
fn run(dir: &Path, args: &[&str], profile: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_numaplace"));
    cmd.current_dir(dir).env("NUMAPLACE_HOST_CONFIG", dir.join("no-profile.toml")).args(args);
    if let Some(text) = profile {
        let path = dir.join("host.toml");
        std::fs::write(&path, text).expect("profile");
        cmd.arg("--host-config").arg(path);
    }
    cmd.output().expect("run numaplace")
}

fn json(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)))
}

/// Memory per node of the plan's VMs that were placed.
fn memory_nodes(plan: &serde_json::Value) -> Vec<(String, Vec<u64>)> {
    plan["placements"]
        .as_array()
        .expect("placements")
        .iter()
        .map(|p| {
            let nodes = p["memory"].as_array().expect("memory").iter().map(|m| m["node"].as_u64().expect("node"));
            (p["vm"].as_str().expect("vm").to_string(), nodes.collect())
        })
        .collect()
}

#[test]
fn topology_shows_the_real_xeon_maxs_hbm_with_its_evidence() {
    let dir = workdir("topology");
    let doc = json(&run(&dir, &["topology", "--from", &flat(), "--format", "json"], None));
    let nodes = doc["nodes"].as_array().expect("nodes");
    let hbm: Vec<u64> = nodes.iter().filter(|n| n["kind"] == "HBM").map(|n| n["id"].as_u64().expect("id")).collect();
    assert_eq!(hbm, (8..16).collect::<Vec<u64>>());
    let found: Vec<&serde_json::Value> =
        doc["warnings"].as_array().expect("warnings").iter().filter(|w| w["code"] == "hbm-found").collect();
    assert_eq!(found.len(), 8);
    assert_eq!(found[0]["node"], 8);
    assert_eq!(found[0]["kind"], "hbm");
    assert_eq!(found[0]["evidence"]["source"], "cpu-model");
    assert_eq!(found[0]["evidence"]["local_node"], 0);
    assert_eq!(found[0]["evidence"]["size_bytes"], 16u64 << 30);
    // The text view says it too.
    let text = run(&dir, &["topology", "--from", &flat()], None);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("node8  package 0  [HBM, local to node0]"), "{text}");
    assert!(text.contains("warning: node15 read as hbm memory although the source names no kind"), "{text}");
}

#[test]
fn plan_keeps_ordinary_vms_off_the_hbm_and_places_hbm_vms_on_it() {
    let dir = workdir("plan");
    let mut args = vec!["plan".to_string(), "--host".into(), flat(), "--format".into(), "json".into()];
    // 16 VMs of 60 GiB fill the DRAM (eight 126 GiB nodes); one of 130 GiB
    // spans two DRAM nodes rather than taking HBM; the HBM VM last.
    for k in 0..16 {
        args.extend(["--vm".into(), format!("name=vm{k},vcpus=4,memory=60GiB")]);
    }
    args.extend(["--vm".into(), "name=hpc,vcpus=8,memory=12GiB,memory_kind=hbm".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let doc = json(&run(&dir, &args, None));
    let placed = memory_nodes(&doc);
    assert_eq!(placed.len(), 17, "{placed:?}");
    for (vm, nodes) in &placed {
        if vm == "hpc" {
            assert!(nodes.iter().all(|&n| n >= 8), "{vm}: {nodes:?}");
        } else {
            assert!(nodes.iter().all(|&n| n < 8), "{vm} on HBM: {nodes:?}");
        }
    }
    let wide =
        run(&dir, &["plan", "--host", &flat(), "--format", "json", "--vm", "name=wide,vcpus=16,memory=130GiB"], None);
    let placed = memory_nodes(&json(&wide));
    assert!(placed[0].1.len() >= 2 && placed[0].1.iter().all(|&n| n < 8), "{placed:?}");
}

#[test]
fn the_profile_declares_node_kinds_over_what_was_found() {
    let dir = workdir("profile");
    let hbm = ["plan", "--host", &flat(), "--format", "json", "--vm", "name=h,vcpus=4,memory=8GiB,memory_kind=hbm"];
    // Declared DRAM, nodes 8-15 are no HBM: the VM is refused (exit 1).
    let o = run(&dir, &hbm, Some("[node_kinds]\n\"8-15\" = \"dram\"\n"));
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stdout));
    // Declared CXL, two of them take memory_kind=cxl.
    let cxl = ["plan", "--host", &flat(), "--format", "json", "--vm", "name=c,vcpus=4,memory=8GiB,memory_kind=cxl"];
    let doc = json(&run(&dir, &cxl, Some("[node_kinds]\n12-13 = \"cxl\"\n")));
    let placed = memory_nodes(&doc);
    assert!(placed[0].1.iter().all(|&n| n == 12 || n == 13), "{placed:?}");
    // Bad values: exit 2, the key named.
    for (profile, want) in [
        ("[node_kinds]\n8 = \"fast\"\n", "node_kinds.8: expected a memory kind"),
        ("[node_kinds]\n99 = \"hbm\"\n", "node_kinds: expected nodes this host has (0-15), found node 99"),
    ] {
        let o = run(&dir, &hbm, Some(profile));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains(want), "{err}");
    }
}
