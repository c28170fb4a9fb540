//! End to end on a real two-node kernel (issue 6): a software-emulated
//! guest (QEMU TCG, node 0 = CPU 0 + 256 MiB, node 1 = CPU 1 + 256 MiB)
//! boots with this numaplace binary in its initramfs. Inside it, a
//! workload faults 64 MiB in on CPU 1 (node 1) and then lives on CPU 0,
//! and a spinner keeps CPU 1 busy. `numaplace top --once --format json`
//! must report low locality; `numaplace balance` must choose node 0 (the
//! node with a free core), pin the workload there and migrate its pages
//! at no more than `--rate`, bringing it above the threshold. A monitor
//! loop in the guest samples the workload's `numa_maps` twice a second,
//! so the rate is checked against the guest kernel's own figures.

use numaplace_guest::testing::require_tool;
use numaplace_guest::{boot, prepare};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const RATE_MIB: u64 = 16;

fn cache() -> PathBuf {
    std::env::var_os("NUMAPLACE_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("numaplace-cache"))
}

/// The `touch_memory` example (the test workload), built beside the binary:
/// `cargo test --all-targets` builds it; a narrower run builds it here.
fn touch_example() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_numaplace"));
    let profile_dir = bin.parent().expect("target/<profile>");
    let touch = profile_dir.join("examples").join("touch_memory");
    if !touch.is_file() {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut build = Command::new(cargo);
        build.args(["build", "--quiet", "-p", "numaplace", "--example", "touch_memory"]);
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            build.arg("--release");
        }
        let ok = build.status().is_ok_and(|s| s.success());
        assert!(ok && touch.is_file(), "could not build the touch_memory example at {}", touch.display());
    }
    touch
}

/// The binary and the `touch_memory` workload (stripped when `strip` exists:
/// the guest's RAM holds them) and the shared libraries `ldd` lists for
/// them.
fn binary_and_libraries(work: &Path) -> Vec<(String, PathBuf)> {
    let mut files = Vec::new();
    for (name, bin) in
        [("numaplace", PathBuf::from(env!("CARGO_BIN_EXE_numaplace"))), ("touch_memory", touch_example())]
    {
        let small = work.join(name);
        let stripped = Command::new("strip").arg("-o").arg(&small).arg(&bin).status().is_ok_and(|s| s.success());
        files.push((format!("bin/{name}"), if stripped { small } else { bin.clone() }));
        let out = Command::new("ldd").arg(&bin).output().expect("ldd");
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or
            // "/lib64/ld-linux-x86-64.so.2 (0x...)".
            let path = line.split("=>").last().and_then(|r| r.split_whitespace().next()).unwrap_or("");
            let entry = path.trim_start_matches('/').to_string();
            if path.starts_with('/') && !files.iter().any(|(e, _)| *e == entry) {
                files.push((entry, PathBuf::from(path)));
            }
        }
    }
    files
}

const INIT: &str = r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t devtmpfs dev /dev
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t tmpfs tmp /tmp
touch_memory --bytes 64MiB --touch-cpus 1 --run-cpus 0 --hold 300s --ready /tmp/ready &
W=$!
n=0
while [ ! -e /tmp/ready ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n+1)); done
touch_memory --bytes 0 --run-cpus 1 --spin --hold 300s &
S=$!
sleep 1
echo "===PID $W"
echo "===TOP_BEFORE"
numaplace top --once --format json --pid $W --samples 2 --interval 1s
echo "===END"
( while [ -e /proc/$W ]; do
    T0=$(cut -d' ' -f1 /proc/uptime)
    echo "MON $T0 $(awk '{ps=0; for(i=1;i<=NF;i++) if ($i ~ /^kernelpagesize_kB=/) {split($i,k,"="); ps=k[2]}; for(i=1;i<=NF;i++) if ($i ~ /^N[0-9]+=/) {split(substr($i,2),a,"="); n[a[1]]+=a[2]*ps}} END {printf "%d %d", n[0], n[1]}' /proc/$W/numa_maps) $(cut -d' ' -f1 /proc/uptime)"
    sleep 0.5
  done ) &
M=$!
echo "===DRYRUN"
numaplace balance --dry-run --all --pid $W --interval 1s --threshold 80 --hysteresis 2 --rounds 2 --format json
echo "===END"
echo "===BALANCE"
numaplace balance --all --pid $W --interval 1s --threshold 80 --hysteresis 2 --rate 16MiB/s --rounds 5 --format json
echo "===END"
echo "===TOP_AFTER"
numaplace top --once --format json --pid $W
echo "===END"
kill $M $S $W
poweroff -f
"#;

fn section<'a>(serial: &'a str, name: &str) -> &'a str {
    let start = serial.find(&format!("==={name}\n")).unwrap_or_else(|| panic!("no {name} in:\n{serial}"));
    let rest = &serial[start + name.len() + 4..];
    &rest[..rest.find("===END").unwrap_or(rest.len())]
}

fn json_of(text: &str) -> Value {
    // The console may interleave kernel lines; the JSON is the part from
    // the first '{' to the last '}'.
    let (a, b) = (text.find('{').expect("json start"), text.rfind('}').expect("json end"));
    serde_json::from_str(&text[a..=b]).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[test]
fn balance_brings_a_remote_workload_home_within_the_rate() {
    // Checked before QEMU: a binary without these commands is a failure
    // on any machine, not a missing tool.
    for c in ["top", "balance"] {
        let o = Command::new(env!("CARGO_BIN_EXE_numaplace")).args([c, "--help"]).output().expect("numaplace runs");
        assert!(o.status.success(), "numaplace lacks `{c}`: {}", String::from_utf8_lossy(&o.stderr));
    }
    let o = Command::new(touch_example()).arg("--help").output().expect("touch runs");
    assert!(o.status.success(), "the touch_memory example fails: {}", String::from_utf8_lossy(&o.stderr));
    if !require_tool("qemu-system-x86_64") {
        return;
    }
    let work = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("observe-guest");
    std::fs::create_dir_all(&work).expect("work dir");
    let assets = prepare::prepare(&cache()).expect("kernel");
    let initrd = prepare::initramfs_with(&cache(), "observe", &binary_and_libraries(&work), INIT).expect("initramfs");
    let mut args: Vec<String> = "-accel tcg,thread=single -cpu qemu64,vendor=GenuineIntel -smp 2 -m 512M \
        -object memory-backend-ram,id=m0,size=256M -object memory-backend-ram,id=m1,size=256M \
        -numa node,nodeid=0,memdev=m0,cpus=0 -numa node,nodeid=1,memdev=m1,cpus=1 \
        -numa dist,src=0,dst=1,val=21 -numa dist,src=1,dst=0,val=21"
        .split_whitespace()
        .map(String::from)
        .collect();
    args.extend(boot::boot_args(&assets.kernel, &initrd));
    let serial = boot::run_to_end("qemu-system-x86_64", &args, Duration::from_secs(180)).expect("boot");
    let serial = serial.replace('\r', "");
    std::fs::write(work.join("serial.txt"), &serial).expect("keep the console log");

    // Before: memory on node 1, threads on node 0.
    let before = json_of(section(&serial, "TOP_BEFORE"));
    let p = &before["processes"][0];
    assert_eq!(p["home_nodes"], serde_json::json!([0]), "{p}");
    let pct = p["local_percent"].as_f64().expect("N%L");
    assert!(pct < 30.0, "the workload should start remote, N%L = {pct}");
    assert!(p["memory_per_node"]["1"].as_u64().expect("node 1") >= 64 << 20);
    assert!(before["nodes"][1]["busy_cpus"].as_f64().expect("busy") > 0.5, "the spinner loads node 1");

    let events_of = |name: &str| -> Vec<Value> {
        section(&serial, name)
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    };
    // A dry run decides but moves nothing.
    let dry = events_of("DRYRUN");
    assert!(dry.iter().any(|e| e["event"] == "decide"), "{dry:?}");
    assert!(!dry.iter().any(|e| e["event"] == "moved"), "{dry:?}");

    // Balance: still remote when it starts, a decision for node 0, then a
    // successful move.
    let events = events_of("BALANCE");
    let first = events.first().unwrap_or_else(|| panic!("no balance events"));
    assert!(first["local_percent"].as_f64().is_some_and(|p| p < 30.0), "the dry run moved something: {first}");
    let decide = events.iter().find(|e| e["event"] == "decide").unwrap_or_else(|| panic!("no decision: {events:?}"));
    assert_eq!(decide["to"], 0, "node 1 has no free core: {decide}");
    let moved = events.iter().find(|e| e["event"] == "moved").unwrap_or_else(|| panic!("no move: {events:?}"));
    assert!(moved["outcome"]["error"].is_null(), "{moved}");
    // Logged with where it ran and where it runs now: floating over node
    // 0's one CPU (nothing is reserved or dedicated in the guest).
    assert_eq!(moved["after"]["mode"], "floating", "{moved}");
    assert_eq!(moved["after"]["cpus"], "0", "{moved}");
    assert_eq!(decide["after"], moved["after"], "{decide}");
    assert!(moved["before"]["cpus"].is_string(), "{moved}");
    let bytes = moved["outcome"]["bytes_moved"].as_u64().expect("bytes");
    let secs = moved["outcome"]["migrate_seconds"].as_f64().expect("seconds");
    assert!(bytes >= 60 << 20, "moved {bytes}");
    let rate = (RATE_MIB << 20) as f64;
    // One batch (rate / 8) may run ahead of the limit.
    assert!(bytes as f64 <= rate * secs + rate / 8.0, "{bytes} bytes in {secs} s exceeds {RATE_MIB} MiB/s");
    assert!(moved["local_percent_after"].as_f64().expect("after") >= 80.0, "{moved}");
    assert!(moved["time_seconds"].as_f64().expect("time") < 30.0, "balanced within a bounded time");

    // The guest kernel's own figures over time. Each monitor line is
    // "MON t0 node0_kB node1_kB t1": numa_maps was read between uptimes t0
    // and t1, so whatever node 0 gained between two readings a and b
    // moved within [a.t0, b.t1]; it must fit the rate over that window
    // plus one batch (rate / 8) and the uptime resolution.
    let mon: Vec<(f64, f64, f64, f64)> = serial
        .lines()
        .filter_map(|l| {
            let mut f = l.strip_prefix("MON ")?.split_whitespace().map(|x| x.parse::<f64>().ok());
            Some((f.next()??, f.next()?? * 1024.0, f.next()?? * 1024.0, f.next()??))
        })
        .collect();
    assert!(mon.len() >= 4, "monitor samples: {mon:?}");
    for (i, a) in mon.iter().enumerate() {
        for b in &mon[i + 1..] {
            let window = b.3 - a.0 + 0.02;
            let gained = b.1 - a.1;
            assert!(
                gained <= rate * window + rate / 8.0,
                "node 0 gained {gained} bytes within {window} s (limit {RATE_MIB} MiB/s)"
            );
        }
    }
    let last = mon.last().expect("a sample");
    assert!(last.1 / (last.1 + last.2) >= 0.8, "guest kernel: {last:?}");

    let after = json_of(section(&serial, "TOP_AFTER"));
    let p = &after["processes"][0];
    assert!(p["local_percent"].as_f64().expect("N%L") >= 80.0, "{p}");
    assert_eq!(p["home_nodes"], serde_json::json!([0]));
}
