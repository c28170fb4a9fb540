//! Files with numbers no real machine has, as a user (or an attacker)
//! hands them to the command line: each is refused with exit 2, naming the
//! file and the field, at once. Before the bounds, a topology listing CPU
//! 4000000000 made `numaplace topology` allocate until it was killed, and
//! a libvirt host declaring 6144 x 1 GiB huge pages on a 1 GiB node was
//! accepted and had a 4 TiB VM planned onto it.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs numaplace; a run still going after a minute is killed and fails
/// the test. This is no speed measurement: a refused file takes
/// milliseconds, and the limit only keeps a regression (a bitmap sized by
/// a hostile number) from swapping the machine for the rest of the suite.
fn run(args: &[&str]) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_numaplace"))
        .env("NUMAPLACE_HOST_CONFIG", concat!(env!("CARGO_TARGET_TMPDIR"), "/no-host-profile.toml"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runs");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("waits") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("numaplace {args:?} was still running after 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (mut out, mut err) = (String::new(), String::new());
    child.stdout.take().expect("stdout").read_to_string(&mut out).expect("utf-8");
    child.stderr.take().expect("stderr").read_to_string(&mut err).expect("utf-8");
    (status.code().unwrap_or(-1), out, err)
}

fn tmp(name: &str, text: &str) -> String {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli-hostile");
    std::fs::create_dir_all(&dir).expect("dir");
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write");
    p.to_string_lossy().into_owned()
}

#[test]
fn a_topology_listing_cpu_4000000000_is_refused_at_once() {
    let file = tmp(
        "cpu4e9.json",
        r#"{"format": "numaplace-topology", "version": 1, "packages": 1, "cores": 1, "pus": 2,
            "nodes": [{"id": 0, "cpus": [0, 4000000000], "memory_bytes": 1073741824, "distances": [10]}],
            "core_list": [{"cpus": [0]}, {"cpus": [4000000000]}]}"#,
    );
    let (code, out, err) = run(&["topology", "--from", &file]);
    assert_eq!(code, 2, "{err}");
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("cpu4e9.json: nodes[0].cpus: expected CPU numbers below 65536, found `4000000000`"), "{err}");
    // The same number anywhere else a CPU goes, and a node number past the
    // bound, are named the same way.
    for (name, text, field) in [
        ("offline.json", r#""offline_cpus": [4000000000], "nodes": []"#, "offline_cpus: expected CPU numbers"),
        (
            "node.json",
            r#""nodes": [{"id": 4000000000, "cpus": [], "memory_bytes": 0, "distances": [10]}]"#,
            "nodes[0].id",
        ),
    ] {
        let doc =
            format!(r#"{{"format": "numaplace-topology", "version": 1, "packages": 0, "cores": 0, "pus": 0, {text}}}"#);
        let (code, _, err) = run(&["topology", "--from", &tmp(name, &doc)]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(&format!("{name}: {field}")), "{err}");
    }
}

#[test]
fn a_state_listing_cpu_4000000000_is_refused() {
    let state = tmp(
        "state.json",
        r#"{"format": "numaplace-plan", "version": 1, "placements": [{"vm": "a", "nodes": [0],
            "cpu_mode": "dedicated", "vcpus": [{"vcpu": 0, "pu": 0, "node": 0}], "cpuset": [0, 4000000000],
            "emulator": [0], "memory": [{"node": 0, "bytes": 1073741824}], "memory_bytes": 1073741824,
            "memory_mode": "strict", "guest": {"sockets": 1, "cores": 1, "threads": 1, "cells": [{"id": 0,
            "vcpus": [0], "memory_bytes": 1073741824, "host_node": 0, "distances": [10]}]}}]}"#,
    );
    let host = "2 sockets x 4 cores, 16GiB per node";
    let (code, _, err) = run(&["plan", "--host", host, "--state", &state, "--vm", "name=b,vcpus=2,memory=1GiB"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("state.json: placements[0].cpuset: expected a number below 65536, found 4000000000"), "{err}");
    let (code, _, err) = run(&["plan", "--host", host, "--vm", "name=b,vcpus=4000000000,memory=1GiB"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("vcpus: expected a whole number from 1 to 65536"), "{err}");
}

#[test]
fn a_typed_machine_of_ten_billion_cpus_is_refused() {
    let (code, _, err) = run(&["topology", "--from", "100000 sockets x 100000 cores"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("levels: expected at most 65536 CPUs and 4096 nodes"), "{err}");
}

/// libvirt capabilities of two 1 GiB cells; `pages` is the first cell's
/// 1 GiB page count.
fn caps(pages: u32) -> String {
    format!(
        "<capabilities><host><cpu><arch>x86_64</arch></cpu><topology><cells num='2'>\
         <cell id='0'><memory unit='KiB'>1048576</memory><pages unit='KiB' size='4'>262144</pages>\
         <pages unit='KiB' size='1048576'>{pages}</pages>\
         <cpus num='2'><cpu id='0' socket_id='0' core_id='0' siblings='0'/>\
         <cpu id='1' socket_id='0' core_id='1' siblings='1'/></cpus></cell>\
         <cell id='1'><memory unit='KiB'>1048576</memory>\
         <cpus num='2'><cpu id='2' socket_id='1' core_id='0' siblings='2'/>\
         <cpu id='3' socket_id='1' core_id='1' siblings='3'/></cpus></cell>\
         </cells></topology></host></capabilities>"
    )
}

#[test]
fn huge_pages_beyond_the_node_memory_are_refused() {
    let file = tmp("caps.xml", &caps(6144));
    let (code, out, err) = run(&["topology", "--from", &file]);
    assert_eq!(code, 2, "{err}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains(
            "caps.xml: node0 has a pool of 6144 x 1 GiB huge pages (6 TiB), more than the node's 1 GiB of memory"
        ),
        "{err}"
    );
    // The 4 TiB VM of the issue is not planned there: the host is refused.
    let (code, _, err) =
        run(&["plan", "--host", &file, "--vm", "name=big,vcpus=2,memory=4TiB,hugepages=1GiB", "--format", "json"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("node0 has a pool of 6144 x 1 GiB"), "{err}");
    // One page, all the node has, is a pool the kernel could hold.
    let (code, out, err) = run(&["topology", "--from", &tmp("caps-ok.xml", &caps(1))]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("1 GiB x 1"), "{out}");
}
